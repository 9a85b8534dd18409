// Rung 13 (seed 002, kernel K1): one output per thread along a strip of rows.
// Column-major, as the seed's Fortran-style loop nest is.
//
// The seed strip-mines the stride-1 loop over rows i into strips of WIDTH and
// runs one strip per thread block, one column j per block row of the grid:
//
//     parfor strips is, parfor columns j, SIMD for i in [is, is+WIDTH):
//         C[i + M*j] = sum_k A[i + M*k] * B[k + K*j]
//
// Adds over 01_naive: nothing but the mapping. Consecutive threads take
// consecutive rows, so the A load of every k step is one coalesced sweep of
// the column A[:, k], and the B element is the same address for the whole
// block (a broadcast). WIDTH (32, 64 or 128 threads per block, set with
// -DWIDTH) is the only knob: wider blocks put more warps on each multiprocessor
// to hide the global-memory latency that every iteration of the k loop pays.
//
// Launch: block (WIDTH, 1), each block covers WIDTH rows of one column,
// grid.x walks the rows.
#include "common.cuh"

#ifndef WIDTH
#define WIDTH 64
#endif

extern "C" __global__ void __launch_bounds__(WIDTH)
mm_strip(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
         float* C) {
    MM_BATCH_OFFSET(M, N, K, A, B, C);
    const int i = blockIdx.x * WIDTH + threadIdx.x;
    const int j = blockIdx.y;
    if (i >= M) return;  // no shared memory and no barrier: leaving early is safe

    const float* a = A + i;                 // A[i, k] = a[M*k]
    const float* b = B + (size_t)K * j;     // B[k, j] = b[k]
    float sum = 0.0f;
    for (int k = 0; k < K; ++k) sum += a[(size_t)M * k] * b[k];
    mm_store(&C[i + (size_t)M * j], sum, alpha, beta);
}
