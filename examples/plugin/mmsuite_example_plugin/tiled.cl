// example.cl_tiled: TS x TS tiles of A and B staged in local memory.
// Over opencl.naive: each element brought from global memory serves TS
// multiply-adds instead of one. Out-of-range tile entries are zero, so any
// M, N, K works; dimension 2 of the range is the batch.
#include "common.h"

__kernel void example_tiled(const int M, const int N, const int K, const float alpha,
                            __global const float* restrict A, __global const float* restrict B,
                            const float beta, __global float* restrict C)
{
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int col = get_group_id(0) * TS + tx;
    const int row = get_group_id(1) * TS + ty;
    MM_BATCH_OFFSET(M, N, K, A, B, C);
    __local float As[TS][TS];
    __local float Bs[TS][TS];
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TS) {
        As[ty][tx] = (row < M && k0 + tx < K) ? A[(size_t)row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(size_t)(k0 + ty) * N + col] : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int q = 0; q < TS; ++q)
            acc = MAD(As[ty][q], Bs[q][tx], acc);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (row < M && col < N) {
        const size_t at = (size_t)row * N + col;
        float out = alpha * acc;
        if (beta != 0.0f)
            out = MAD(beta, C[at], out);
        C[at] = out;
    }
}
