// Rung 3 (seed 004), column-major: rung 2 with the thread index hoisted.
// Adds over rung 2: a 1D block of 1024 threads; the thread's row and column in
// the tile (tid & 31, tid >> 5) and its global offsets are computed once, and
// the A and B pointers advance by one tile per step instead of re-deriving the
// addresses from threadIdx every iteration. Fewer live registers and integer
// instructions per loaded element; a small gain. The shared layout (and its
// bank conflict on the A tile) is unchanged.
#include "common.cuh"

#define TS 32

extern "C" __global__ void __launch_bounds__(1024)
mm_03_hoisted_index(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                    float* C) {
    MM_BATCH_OFFSET(M, N, K, A, B, C);
    __shared__ float sa[TS * TS];  // sa[i * TS + k]
    __shared__ float sb[TS * TS];  // sb[j * TS + k]
    const int tid = threadIdx.x;
    const int tx = tid & 31, ty = tid >> 5;
    const int i = blockIdx.x * TS + tx, j = blockIdx.y * TS + ty;
    const bool row_ok = i < M, col_ok = j < N;
    const float* a = A + i + (size_t)ty * M;  // A(i, ty), advances TS columns per step
    const float* b = B + tx + (size_t)j * K;  // B(tx, j), advances TS rows per step
    const size_t a_step = (size_t)TS * M;
    float* const sa_store = sa + tx * TS + ty;
    float* const sb_store = sb + ty * TS + tx;
    const float* const sa_row = sa + tx * TS;
    const float* const sb_col = sb + ty * TS;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TS) {
        *sa_store = (row_ok && k0 + ty < K) ? *a : 0.0f;
        *sb_store = (col_ok && k0 + tx < K) ? *b : 0.0f;
        a += a_step;
        b += TS;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TS; ++kk) acc += sa_row[kk] * sb_col[kk];
        __syncthreads();
    }
    if (row_ok && col_ok) mm_store(C + i + (size_t)j * M, acc, alpha, beta);
}
