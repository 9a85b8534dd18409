// Rung 2 - tiled: square TS x TS tiles of A and B staged in local memory.
//
// Adds over rung 1: a work-group of TS x TS work-items cooperatively copies one
// tile of A and one tile of B into local memory, synchronises, and every
// work-item then runs its partial dot product out of local memory. Each global
// element is now loaded once per work-group instead of once per work-item:
// global traffic falls by a factor of TS, and the loads stay coalesced.
// On a CPU (PoCL) local memory is ordinary cached RAM, so the gain there comes
// mostly from the better locality of the blocked loop.
//
// Edges: tiles are zero-filled outside A and B, and stores are guarded, so any
// M, N, K >= 1 works. Work-items outside C still take part in the loads and
// barriers. Build option: -D TS=<tile width>; local size (TS, TS, 1).

#include "common.h"

#ifndef TS
#define TS 16
#endif

__kernel void mm_tiled(const int M, const int N, const int K, const float alpha,
                       __global const float* restrict A, __global const float* restrict B,
                       const float beta, __global float* restrict C)
{
    __local float Asub[TS][TS];
    __local float Bsub[TS][TS];

    const int tx = get_local_id(0);
    const int ty = get_local_id(1);
    const int col = get_group_id(0) * TS + tx;
    const int row = get_group_id(1) * TS + ty;
    MM_BATCH_OFFSET(M, N, K, A, B, C);

    float acc = 0.0f;
    const int tiles = (K + TS - 1) / TS;
    for (int t = 0; t < tiles; ++t) {
        const int ka = t * TS + tx;
        const int kb = t * TS + ty;
        Asub[ty][tx] = (row < M && ka < K) ? A[(size_t)row * K + ka] : 0.0f;
        Bsub[ty][tx] = (kb < K && col < N) ? B[(size_t)kb * N + col] : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
        #pragma unroll
        for (int p = 0; p < TS; ++p)
            acc = MAD(Asub[ty][p], Bsub[p][tx], acc);
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
