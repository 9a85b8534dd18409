// Rung 3 - more work per work-item: each work-item computes WPT outputs of a
// column strip.
//
// Adds over rung 2: the work-group shrinks to TS x (TS / WPT) work-items and
// each one accumulates WPT elements of C that lie WPT/TS rows apart in the same
// column. Every element of B read from local memory is reused WPT times from a
// register, so local-memory reads per multiply-add fall from 2 to 1 + 1/WPT,
// and fewer work-items mean less index arithmetic and fewer barrier arrivals
// per flop. The per-work-item accumulators stay in registers.
//
// Edges: zero-filled tiles and guarded stores, as in rung 2. Build options:
// -D TS=<tile width> -D WPT=<outputs per work-item> (TS % WPT == 0);
// local size (TS, TS / WPT, 1).

#include "common.h"

#ifndef TS
#define TS 32
#endif
#ifndef WPT
#define WPT 8
#endif
#define RTS (TS / WPT)

__kernel void mm_more_work(const int M, const int N, const int K, const float alpha,
                           __global const float* restrict A, __global const float* restrict B,
                           const float beta, __global float* restrict C)
{
    __local float Asub[TS][TS];
    __local float Bsub[TS][TS];

    const int tx = get_local_id(0);
    const int ty = get_local_id(1);
    const int col = get_group_id(0) * TS + tx;
    const int row0 = get_group_id(1) * TS;
    MM_BATCH_OFFSET(M, N, K, A, B, C);

    float acc[WPT];
    #pragma unroll
    for (int w = 0; w < WPT; ++w)
        acc[w] = 0.0f;

    const int tiles = (K + TS - 1) / TS;
    for (int t = 0; t < tiles; ++t) {
        #pragma unroll
        for (int w = 0; w < WPT; ++w) {
            const int r = ty + w * RTS;
            const int ka = t * TS + tx;
            const int kb = t * TS + r;
            Asub[r][tx] = (row0 + r < M && ka < K) ? A[(size_t)(row0 + r) * K + ka] : 0.0f;
            Bsub[r][tx] = (kb < K && col < N) ? B[(size_t)kb * N + col] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int p = 0; p < TS; ++p) {
            const float b = Bsub[p][tx];
            #pragma unroll
            for (int w = 0; w < WPT; ++w)
                acc[w] = MAD(Asub[ty + w * RTS][p], b, acc[w]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    if (col < N) {
        #pragma unroll
        for (int w = 0; w < WPT; ++w) {
            const int row = row0 + ty + w * RTS;
            if (row < M) {
                const size_t at = (size_t)row * N + col;
                float out = alpha * acc[w];
                if (beta != 0.0f)
                    out = MAD(beta, C[at], out);
                C[at] = out;
            }
        }
    }
}
