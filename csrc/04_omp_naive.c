/* Rung 4, omp_naive: seq_naive on every core (seed 001).
 * Over seq_naive: the same i, j, k loop, with the (i, j) iterations shared
 * among OpenMP threads one element at a time (schedule(dynamic,1) over the
 * collapsed i-j space). The elements are independent, so the speedup is up to
 * the number of cores; each element still strides down a column of B. */
#include "mm.h"

void mm_omp_naive(MM_ARGS) {
    for (long p = 0; p < batch; ++p) {
        const float *A = MM_A(p), *B = MM_B(p);
        float *C = MM_C(p);
#pragma omp parallel for schedule(dynamic, 1) collapse(2)
        for (long i = 0; i < m; ++i)
            for (long j = 0; j < n; ++j) {
                float acc = 0.0f;
                for (long l = 0; l < k; ++l)
                    acc += A[i * k + l] * B[l * n + j];
                C[i * n + j] = mm_epilogue(acc, alpha, beta, &C[i * n + j]);
            }
    }
}
