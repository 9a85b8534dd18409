// Rung 12 (seed 000): 16x16 shared-memory tiles, row-major.
//
// Adds over 01_naive: a 16x16 block stages a 16x16 tile of A and of B in
// shared memory for each 16-wide step along k, then every thread reads the
// staged tiles 16 times. Each element brought from global memory now serves 16
// multiply-adds instead of one, so the kernel stops waiting on DRAM/L2.
//
// Thread (tx, ty) owns C[row0 + ty][col0 + tx]; tx walks the stride-1 column
// index so the B loads and the C stores are coalesced, and the A tile is read
// as a broadcast (As[ty][k] is the same word for a whole half-warp).
//
// Every thread takes part in loading tiles and in both barriers, including
// threads whose output lies outside C: out-of-range tile entries are zero, and
// only the final store is predicated. (Returning early, before the barriers,
// is undefined behaviour.)
#include "common.cuh"

#define TILE 16

extern "C" __global__ void __launch_bounds__(TILE * TILE)
mm_12_tiled16(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
              float* C) {
    MM_BATCH_OFFSET(M, N, K, A, B, C);
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty;
    const int col = blockIdx.x * TILE + tx;

    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[ty][tx] = (row < M && k0 + tx < K) ? A[(size_t)row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(size_t)(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    if (row < M && col < N) mm_store(&C[(size_t)row * N + col], acc, alpha, beta);
}
