// Rung 16 (seed 002, kernel K4): the j loop unrolled (UNROLL_J = 2 or 4
// partial sums per thread) with the k loop unrolled by 4. Column-major.
//
// Thread i of the block owns C[i, j0 : j0+UNROLL_J]: one row, UNROLL_J
// adjacent columns. Per strip of k the block caches UNROLL_J columns of B in
// shared memory (each thread loads UNROLL_J elements, coalesced along k).
//
// Adds over 14_strip_smem (the seed builds K4 on K2, not on the i-unrolled
// K3): in 14 and 15 every multiply-add needs its own A element from global
// memory. Here the A[i, k] loaded once feeds UNROLL_J multiply-adds, one per
// column, so the global traffic per flop drops by UNROLL_J; this is the first
// rung where an operand is reused from a register. Unrolling k by 4 removes
// loop overhead and lets the compiler issue four A loads ahead of their use.
// WIDTH is 128 (the seed's best): 128 threads hold UNROLL_J*WIDTH floats of
// shared memory (2 KB at UNROLL_J = 4), so many blocks fit on a multiprocessor.
#include "common.cuh"

#ifndef WIDTH
#define WIDTH 128
#endif
#ifndef UNROLL_J
#define UNROLL_J 4
#endif

extern "C" __global__ void __launch_bounds__(WIDTH)
mm_strip_unroll_j(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                  float* C) {
    MM_BATCH_OFFSET(M, N, K, A, B, C);
    __shared__ float cb[UNROLL_J][WIDTH];  // B[ks : ks+WIDTH, j0+u]

    const int tx = threadIdx.x;
    const int i = blockIdx.x * WIDTH + tx;
    const int j0 = blockIdx.y * UNROLL_J;
    const float* a = A + i;

    float sum[UNROLL_J];
#pragma unroll
    for (int u = 0; u < UNROLL_J; ++u) sum[u] = 0.0f;

    for (int ks = 0; ks < K; ks += WIDTH) {
#pragma unroll
        for (int u = 0; u < UNROLL_J; ++u)
            cb[u][tx] = (ks + tx < K && j0 + u < N) ? B[ks + tx + (size_t)K * (j0 + u)] : 0.0f;
        __syncthreads();
        if (i < M) {
            const int kn = min(WIDTH, K - ks);
#pragma unroll 4
            for (int k = 0; k < kn; ++k) {
                const float rb = a[(size_t)M * (ks + k)];
#pragma unroll
                for (int u = 0; u < UNROLL_J; ++u) sum[u] += rb * cb[u][k];
            }
        }
        __syncthreads();
    }
    if (i < M) {
#pragma unroll
        for (int u = 0; u < UNROLL_J; ++u)
            if (j0 + u < N) mm_store(&C[i + (size_t)M * (j0 + u)], sum[u], alpha, beta);
    }
}
