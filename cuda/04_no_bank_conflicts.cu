// Rung 4 (seed 004), column-major: shared tiles laid out for the banks.
// Adds over rung 3: the A tile is stored transposed (k-major, sa[k * 32 + i]).
// A warp holds 32 consecutive rows i and one k, so its 32 stores and its 32
// reads per k now fall in 32 different banks instead of 32 times in the same
// one; the B tile stays column-major (sb[j * 32 + k]), whose reads are a single
// broadcast word per warp. Shared-memory traffic stops being serialised
// 32 ways, which roughly doubles the speed.
#include "common.cuh"

#define TS 32

extern "C" __global__ void __launch_bounds__(1024)
mm_04_no_bank_conflicts(int M, int N, int K, float alpha, const float* A, const float* B,
                        float beta, float* C) {
    MM_BATCH_OFFSET(M, N, K, A, B, C);
    __shared__ float sa[TS * TS];  // sa[k * TS + i]
    __shared__ float sb[TS * TS];  // sb[j * TS + k]
    const int tid = threadIdx.x;
    const int tx = tid & 31, ty = tid >> 5;
    const int i = blockIdx.x * TS + tx, j = blockIdx.y * TS + ty;
    const bool row_ok = i < M, col_ok = j < N;
    const float* a = A + i + (size_t)ty * M;
    const float* b = B + tx + (size_t)j * K;
    const size_t a_step = (size_t)TS * M;
    float* const sa_store = sa + ty * TS + tx;
    float* const sb_store = sb + ty * TS + tx;
    const float* const sa_row = sa + tx;
    const float* const sb_col = sb + ty * TS;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TS) {
        *sa_store = (row_ok && k0 + ty < K) ? *a : 0.0f;
        *sb_store = (col_ok && k0 + tx < K) ? *b : 0.0f;
        a += a_step;
        b += TS;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TS; ++kk) acc += sa_row[kk * TS] * sb_col[kk];
        __syncthreads();
    }
    if (row_ok && col_ok) mm_store(C + i + (size_t)j * M, acc, alpha, beta);
}
