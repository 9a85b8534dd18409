/* Rung 2, seq_ikj: loop interchange (seed 002).
 * Over seq_naive: the loops run i, k, j instead of i, j, k, so the inner loop
 * walks a row of B and a row of C with stride 1 (C[i][:] += a_il * B[l][:])
 * instead of striding down a column of B. Every cache line fetched is used
 * in full, and the stride-1 loop vectorises: an order of magnitude faster at
 * sizes where a column of B no longer fits in cache. */
#include "ladder.h"

void mm_seq_ikj(MM_ARGS) {
    for (long p = 0; p < batch; ++p) {
        const float *restrict A = MM_A(p), *restrict B = MM_B(p);
        float *restrict C = MM_C(p);
        for (long i = 0; i < m; ++i) {
            float *restrict Ci = C + i * n;
            ladder_scale(C, n, i, i + 1, 0, n, beta);
            for (long l = 0; l < k; ++l) {
                const float a = alpha * A[i * k + l];
                const float *restrict Bl = B + l * n;
                for (long j = 0; j < n; ++j) Ci[j] += a * Bl[j];
            }
        }
    }
}
