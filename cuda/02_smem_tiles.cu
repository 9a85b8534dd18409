// Rung 2 (seed 004), column-major: 32x32x32 tiling in shared memory.
// Adds over rung 1: a block of 32x32 threads stages a 32x32 tile of A and of B
// in shared memory, one element per thread, then every thread reads its row of
// the A tile and its column of the B tile from there. Each global element is
// loaded once per block instead of 32 times: 32 times less global traffic.
// Edges: loads outside A or B fill the tile with zeros, stores are
// predicated, so any M, N, K works.
// The A tile is stored row by row (sa[i * 32 + k], as the seed does): a warp
// (32 rows, one k) hits one bank 32 times, on every store and every read.
// On the H100 that conflict costs more than the tiling saves: at 4096^3 this
// rung measured 1.6 TFLOP/s against rung 1's 4.3 (whose A loads are coalesced
// and whose re-reads hit L1/L2). Rung 4 removes the conflict (8.8 TFLOP/s).
#include "common.cuh"

#define TS 32

extern "C" __global__ void __launch_bounds__(1024)
mm_02_smem_tiles(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                 float* C) {
    MM_BATCH_OFFSET(M, N, K, A, B, C);
    __shared__ float sa[TS * TS];  // sa[i * TS + k]
    __shared__ float sb[TS * TS];  // sb[j * TS + k]
    const int i = blockIdx.x * TS + threadIdx.x;
    const int j = blockIdx.y * TS + threadIdx.y;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TS) {
        const int ka = k0 + threadIdx.y;  // column of A this thread loads
        const int kb = k0 + threadIdx.x;  // row of B this thread loads
        sa[threadIdx.x * TS + threadIdx.y] = (i < M && ka < K) ? A[i + (size_t)ka * M] : 0.0f;
        sb[threadIdx.y * TS + threadIdx.x] = (kb < K && j < N) ? B[kb + (size_t)j * K] : 0.0f;
        __syncthreads();
        for (int kk = 0; kk < TS; ++kk)
            acc += sa[threadIdx.x * TS + kk] * sb[threadIdx.y * TS + kk];
        __syncthreads();
    }
    if (i < M && j < N) mm_store(C + i + (size_t)j * M, acc, alpha, beta);
}
