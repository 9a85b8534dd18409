// Rung 17 (seed 002, kernel K5): 16x16 tiles of both operands in shared memory.
// Column-major, written the way the seed writes it.
//
// A 16x16 block owns a 16x16 tile of C; thread (tx, ty) owns C[i0+tx, j0+ty]
// (tx walks the stride-1 row index). Per 16-deep step of k the block copies
// bt[i][k] = A[i0+i, ks+k] and ct[k][j] = B[ks+k, j0+j] into shared memory,
// both with loads that are coalesced along the stride-1 index, then runs the
// fully unrolled tile product at[i][j] += bt[i][k] * ct[k][j].
//
// Adds over 16_strip_unroll_j: the strip kernels cache only B; every A element
// still comes from global memory, reused UNROLL_J times from a register. Tiling
// both operands makes each global element serve 16 multiply-adds: 1/8 of a
// global load per multiply-add against about 1/4 for the 4-column strip. The
// price is two shared-memory reads per multiply-add and 256-thread blocks,
// which is why on the seed's GTX 280 this rung lost to the strip kernel. It
// loses on an H100 too: 6.3 TFLOP/s at 4096^3 against 15.5 for the 4-column
// strip, whose second operand comes from a register, and 8.2 for 12_tiled16.
//
// Differs from 12_tiled16 (the same blocking, row-major, seed 000) in how the
// tiles sit in shared memory: the A tile is kept k-contiguous as bt[i][k], as
// the seed does, so its column reads bt[tx][k] stride through rows; a pad of
// one word per row puts the 16 rows a half-warp reads in 16 different banks.
#include "common.cuh"

#define TILE 16

extern "C" __global__ void __launch_bounds__(TILE * TILE)
mm_17_strip_tiled16(int M, int N, int K, float alpha, const float* A, const float* B,
                    float beta, float* C) {
    MM_BATCH_OFFSET(M, N, K, A, B, C);
    __shared__ float bt[TILE][TILE + 1];  // A tile as [i][k]; +1 pad: conflict-free bt[tx][k]
    __shared__ float ct[TILE][TILE + 1];  // B tile as [k][j]

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int i = blockIdx.x * TILE + tx;
    const int j = blockIdx.y * TILE + ty;

    float acc = 0.0f;
    for (int ks = 0; ks < K; ks += TILE) {
        // (tx, ty) loads A[i, ks+ty] and B[ks+tx, j]: both coalesced along tx.
        bt[tx][ty] = (i < M && ks + ty < K) ? A[i + (size_t)M * (ks + ty)] : 0.0f;
        ct[tx][ty] = (ks + tx < K && j < N) ? B[ks + tx + (size_t)K * j] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc += bt[tx][k] * ct[k][ty];
        __syncthreads();
    }
    if (i < M && j < N) mm_store(&C[i + (size_t)M * j], acc, alpha, beta);
}
