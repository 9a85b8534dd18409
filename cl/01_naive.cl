// Rung 1 - naive: one work-item per element of C.
//
// The baseline of the OpenCL ladder. Every work-item walks a full row of A and
// a full column of B straight from global memory, so each input element is
// fetched from global memory once per output it contributes to (M*N*K*2 loads
// in all). Work-item dimension 0 runs along the columns of C, so neighbouring
// work-items read neighbouring elements of B and C (coalesced on a GPU, one
// vector lane apart on a CPU) while sharing the element of A they read.
//
// Layout: row-major A (M x K), B (K x N), C (M x N); dimension 2 of the range
// is the batch, matrices stored one after another. C is read only when
// beta != 0 (it may hold NaN poison otherwise).

#include "common.h"

__kernel void mm_naive(const int M, const int N, const int K, const float alpha,
                       __global const float* restrict A, __global const float* restrict B,
                       const float beta, __global float* restrict C)
{
    const int col = get_global_id(0);
    const int row = get_global_id(1);
    if (row >= M || col >= N)
        return;
    MM_BATCH_OFFSET(M, N, K, A, B, C);

    const __global float* a = A + (size_t)row * K;
    const __global float* b = B + col;
    float acc = 0.0f;
    for (int p = 0; p < K; ++p)
        acc = MAD(a[p], b[(size_t)p * N], acc);

    const size_t at = (size_t)row * N + col;
    float out = alpha * acc;
    if (beta != 0.0f)
        out = MAD(beta, C[at], out);
    C[at] = out;
}
