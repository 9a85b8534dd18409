// Rung 14 (seed 002, kernel K2): the right operand's strip cached in shared memory.
// Column-major; same mapping as 13_strip (one output per thread, WIDTH rows
// per block, one column j per block).
//
// Adds over 13_strip: in 13 every thread of the block loads the same B[k, j]
// from global memory on every k step, one long-latency load that carries a
// single useful word. Here the k loop is strip-mined by WIDTH: the block first
// copies B[ks : ks+WIDTH, j] into shared memory with one coalesced load (one
// element per thread), waits at a barrier, then runs WIDTH steps whose only
// global load is the coalesced A column. Half of the inner loop's global loads
// are gone, and the remaining one streams.
//
// Edges: the whole block must reach both barriers, so threads past the last
// row still load their share of the B strip and only skip the arithmetic; the
// last strip of k is shorter when WIDTH does not divide K.
#include "common.cuh"

#ifndef WIDTH
#define WIDTH 64
#endif

extern "C" __global__ void __launch_bounds__(WIDTH)
mm_14_strip_smem(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                 float* C) {
    MM_BATCH_OFFSET(M, N, K, A, B, C);
    __shared__ float cb[WIDTH];  // B[ks : ks+WIDTH, j]

    const int tx = threadIdx.x;
    const int i = blockIdx.x * WIDTH + tx;
    const int j = blockIdx.y;
    const float* a = A + i;
    const float* b = B + (size_t)K * j;

    float sum = 0.0f;
    for (int ks = 0; ks < K; ks += WIDTH) {
        cb[tx] = ks + tx < K ? b[ks + tx] : 0.0f;
        __syncthreads();
        if (i < M) {
            const int kn = min(WIDTH, K - ks);
            for (int k = 0; k < kn; ++k) sum += a[(size_t)M * (ks + k)] * cb[k];
        }
        __syncthreads();
    }
    if (i < M) mm_store(&C[i + (size_t)M * j], sum, alpha, beta);
}
