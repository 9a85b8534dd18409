// example.cu_reg4x4: a 64x64 tile of C per 16x16 block, 4x4 outputs per thread.
// Over cuda.12_tiled16: each value read from shared memory now serves four
// multiply-adds held in registers, so shared-memory bandwidth stops being the
// limit. Row-major, any M, N, K (zero-filled edges), batch on grid z.
#include "common.cuh"

#define BM 64
#define BK 16

extern "C" __global__ void __launch_bounds__(256)
example_reg4x4(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
               float* C) {
    MM_BATCH_OFFSET(M, N, K, A, B, C);
    __shared__ float As[BK][BM + 1];  // k-major: a thread's four rows in one broadcast
    __shared__ float Bs[BK][BM];
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16 + tx;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BM;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int i = tid; i < BM * BK; i += 256) {  // 64 rows x 16 k of A, 16 k x 64 cols of B
            const int ar = i / BK, ak = i % BK, bk = i / BM, bc = i % BM;
            As[ak][ar] = (row0 + ar < M && k0 + ak < K) ? A[(size_t)(row0 + ar) * K + k0 + ak] : 0.0f;
            Bs[bk][bc] = (k0 + bk < K && col0 + bc < N) ? B[(size_t)(k0 + bk) * N + col0 + bc] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int q = 0; q < BK; ++q) {
            float a[4], b[4];
#pragma unroll
            for (int r = 0; r < 4; ++r) a[r] = As[q][ty + 16 * r];
#pragma unroll
            for (int s = 0; s < 4; ++s) b[s] = Bs[q][tx + 16 * s];
#pragma unroll
            for (int r = 0; r < 4; ++r)
#pragma unroll
                for (int s = 0; s < 4; ++s) acc[r][s] += a[r] * b[s];
        }
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            const int row = row0 + ty + 16 * r, col = col0 + tx + 16 * s;
            if (row < M && col < N) mm_store(&C[(size_t)row * N + col], acc[r][s], alpha, beta);
        }
}
