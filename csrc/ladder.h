/* Helpers shared by rungs 2-6 of the CPU ladder.
 *
 * seq_ikj, seq_tiled and omp_tiled accumulate into C in place
 * (C[i][:] += a_il * B[l][:]) instead of keeping one dot product per element,
 * so they start each block of C from beta * C (or from zero when beta == 0,
 * never reading C: it may hold NaN) and fold alpha into the element of A they
 * broadcast. omp_packed fails (C set to NaN, errno ENOMEM) rather than fall
 * back on another loop when its packing buffers cannot be allocated.
 */
#ifndef LADDER_H
#define LADDER_H

#include "mm.h"

/* ISO C mode (-std=c11) turns GCC's fused multiply-add contraction off; the
 * accumulating loops below are written as a*b + c and are meant to become FMAs
 * where the ISA has them (clang contracts within an expression by default). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif

#define LADDER_MIN(x, y) ((x) < (y) ? (x) : (y))

/* Rows [i0, i1) x columns [j0, j1) of C (row stride ldc) become beta * C;
 * zero when beta == 0, without reading C. */
static inline void ladder_scale(float *C, long ldc, long i0, long i1, long j0, long j1,
                                float beta) {
    for (long i = i0; i < i1; ++i) {
        float *restrict row = C + i * ldc;
        if (beta == 0.0f)
            for (long j = j0; j < j1; ++j) row[j] = 0.0f;
        else
            for (long j = j0; j < j1; ++j) row[j] *= beta;
    }
}

/* Cache-blocking tile sizes of seq_tiled and omp_tiled: a TK x TJ block of B
 * (128 KiB) and a TI x TJ tile of C (128 KiB) stay in L2 while the tile is
 * updated; the one row of B and the one row of C in use at a time (4 KiB each)
 * stay in L1. */
#ifndef LADDER_TI
#define LADDER_TI 32
#endif
#ifndef LADDER_TJ
#define LADDER_TJ 1024
#endif
#ifndef LADDER_TK
#define LADDER_TK 32
#endif

/* One tile of C = alpha * A * B + beta * C: rows [i0, i0 + TI) and columns
 * [j0, j0 + TJ), clipped to m x n, over all of k in TK-deep steps, with the
 * i-k-j order of seq_ikj inside each step. */
static inline void ladder_tile(long m, long n, long k, float alpha, const float *restrict A,
                               const float *restrict B, float beta, float *restrict C,
                               long i0, long j0) {
    const long i1 = LADDER_MIN(i0 + LADDER_TI, m), j1 = LADDER_MIN(j0 + LADDER_TJ, n);
    ladder_scale(C, n, i0, i1, j0, j1, beta);
    for (long l0 = 0; l0 < k; l0 += LADDER_TK) {
        const long l1 = LADDER_MIN(l0 + LADDER_TK, k);
        for (long i = i0; i < i1; ++i) {
            float *restrict Ci = C + i * n;
            for (long l = l0; l < l1; ++l) {
                const float a = alpha * A[i * k + l];
                const float *restrict Bl = B + l * n;
                for (long j = j0; j < j1; ++j) Ci[j] += a * Bl[j];
            }
        }
    }
}

#endif
