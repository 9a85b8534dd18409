/* Rung 1, seq_naive: the textbook triple loop (seed 001).
 * For each C[i][j], a dot product along k; B is walked down a column with
 * stride n, so every step of the inner loop misses the cache for large n.
 * This is the speedup baseline of the whole suite. */
#include "mm.h"

void mm_seq_naive(MM_ARGS) {
    for (long p = 0; p < batch; ++p) {
        const float *A = MM_A(p), *B = MM_B(p);
        float *C = MM_C(p);
        for (long i = 0; i < m; ++i)
            for (long j = 0; j < n; ++j) {
                float acc = 0.0f;
                for (long l = 0; l < k; ++l)
                    acc += A[i * k + l] * B[l * n + j];
                C[i * n + j] = mm_epilogue(acc, alpha, beta, &C[i * n + j]);
            }
    }
}
