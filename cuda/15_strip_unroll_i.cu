// Rung 15 (seed 002, kernel K3): the i loop unrolled.
// Column-major; WIDTH threads per block, each thread owns UNROLL_I rows
// spaced WIDTH apart (i, i+WIDTH, ...), so a block covers UNROLL_I*WIDTH rows
// of one column j.
//
// Adds over 14_strip_smem: each shared B[k, j] read and each trip of the loop
// overhead now serves UNROLL_I multiply-adds instead of one, and each thread
// has UNROLL_I independent coalesced A loads in flight per k step instead of
// one, which hides more of their latency. The only value the unrolled
// iterations share is the shared-memory word, so the gain comes mostly from
// the extra independent work per thread, not from saved traffic.
#include "common.cuh"

#ifndef WIDTH
#define WIDTH 64
#endif
#ifndef UNROLL_I
#define UNROLL_I 2
#endif

extern "C" __global__ void __launch_bounds__(WIDTH)
mm_15_strip_unroll_i(int M, int N, int K, float alpha, const float* A, const float* B,
                     float beta, float* C) {
    MM_BATCH_OFFSET(M, N, K, A, B, C);
    __shared__ float cb[WIDTH];  // B[ks : ks+WIDTH, j]

    const int tx = threadIdx.x;
    const int i0 = blockIdx.x * (UNROLL_I * WIDTH) + tx;
    const int j = blockIdx.y;
    const float* b = B + (size_t)K * j;

    bool in[UNROLL_I];
    float sum[UNROLL_I];
#pragma unroll
    for (int u = 0; u < UNROLL_I; ++u) {
        in[u] = i0 + u * WIDTH < M;
        sum[u] = 0.0f;
    }

    for (int ks = 0; ks < K; ks += WIDTH) {
        cb[tx] = ks + tx < K ? b[ks + tx] : 0.0f;
        __syncthreads();
        const int kn = min(WIDTH, K - ks);
        const float* a = A + (size_t)M * ks + i0;
        if (in[UNROLL_I - 1]) {  // every row of this thread is inside C: no tests in the loop
            for (int k = 0; k < kn; ++k, a += M) {
                const float ck = cb[k];
#pragma unroll
                for (int u = 0; u < UNROLL_I; ++u) sum[u] += a[u * WIDTH] * ck;
            }
        } else if (in[0]) {  // the last block: some rows fall past M
            for (int k = 0; k < kn; ++k, a += M) {
                const float ck = cb[k];
#pragma unroll
                for (int u = 0; u < UNROLL_I; ++u)
                    if (in[u]) sum[u] += a[u * WIDTH] * ck;
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int u = 0; u < UNROLL_I; ++u)
        if (in[u]) mm_store(&C[i0 + u * WIDTH + (size_t)M * j], sum[u], alpha, beta);
}
