// Rung 5 (seed 004), column-major: a 4x1 micro-kernel per thread.
// Adds over rung 4: 256 threads per 32x32 block; each thread computes four
// consecutive rows of one column of C (rows r..r+3, r = 4 * (tid & 7), column
// tid >> 3). Per k it reads one B value and four A values from shared memory
// and does four multiply-adds: the B value is reused from a register, so
// shared-memory reads per FMA drop from 2 to 1.25, and four independent
// accumulators give the scheduler instruction-level parallelism.
// The B tile's columns are padded to 33 words so that the four columns a warp
// touches fall in different banks.
#include "common.cuh"

#define TS 32
#define LDB (TS + 1)

extern "C" __global__ void __launch_bounds__(256)
mm_05_micro_4x1(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                float* C) {
    MM_BATCH_OFFSET(M, N, K, A, B, C);
    __shared__ float sa[TS * TS];   // sa[k * TS + i]
    __shared__ float sb[TS * LDB];  // sb[j * LDB + k]
    const int tid = threadIdx.x;
    const int r = (tid & 7) << 2, c = tid >> 3;  // 4 rows r..r+3, one column c
    const int i0 = blockIdx.x * TS, j0 = blockIdx.y * TS;
    const int i = i0 + r, j = j0 + c;
    // Loads: A(i..i+3, k0 + c) and B(k0 + r .. k0 + r + 3, j).
    const float* a = A + i + (size_t)c * M;
    const float* b = B + r + (size_t)j * K;
    const size_t a_step = (size_t)TS * M;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int k0 = 0; k0 < K; k0 += TS) {
        const bool ka_ok = k0 + c < K;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            sa[c * TS + r + q] = (ka_ok && i + q < M) ? a[q] : 0.0f;
            sb[c * LDB + r + q] = (j < N && k0 + r + q < K) ? b[q] : 0.0f;
        }
        a += a_step;
        b += TS;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TS; ++kk) {
            const float bv = sb[c * LDB + kk];
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[q] += sa[kk * TS + r + q] * bv;
        }
        __syncthreads();
    }
    if (j < N) {
        float* cp = C + i + (size_t)j * M;
#pragma unroll
        for (int q = 0; q < 4; ++q)
            if (i + q < M) mm_store(cp + q, acc[q], alpha, beta);
    }
}
