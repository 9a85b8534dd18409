/* example.c_ikj_omp: seq_ikj's loop order, rows of C shared among OpenMP threads.
 * Over cpu.seq_ikj: each thread owns whole rows of C, so no two threads write the
 * same cache line, and the stride-1 inner loop over a strip of the row still
 * vectorises; the strip's partial sums stay in a small array in L1. */
#include "mm.h"

#define STRIP 256

void example_ikj_omp(MM_ARGS) {
    for (long p = 0; p < batch; ++p) {
        const float *A = MM_A(p), *B = MM_B(p);
        float *C = MM_C(p);
#pragma omp parallel for schedule(static)
        for (long i = 0; i < m; ++i) {
            for (long j0 = 0; j0 < n; j0 += STRIP) {
                const long width = n - j0 < STRIP ? n - j0 : STRIP;
                float acc[STRIP] = {0};
                for (long q = 0; q < k; ++q) {
                    const float aiq = A[i * k + q];
                    const float *brow = B + q * n + j0;
                    for (long j = 0; j < width; ++j) acc[j] += aiq * brow[j];
                }
                float *row = C + i * n + j0;
                for (long j = 0; j < width; ++j) row[j] = mm_epilogue(acc[j], alpha, beta, &row[j]);
            }
        }
    }
}
