/* Shared declarations for the CPU ladder.
 *
 * Every rung computes, for each of `batch` row-major matrices stored one after
 * another, C = alpha * A * B + beta * C with A m x k, B k x n, C m x n.
 * When beta == 0, C is never read (it may hold NaN poison).
 */
#ifndef MM_H
#define MM_H

#include <stddef.h>

#define MM_ARGS long m, long n, long k, long batch, float alpha, \
                const float *a, const float *b, float beta, float *c

/* Pointers to matrix `p` of the batch. */
#define MM_A(p) (a + (size_t)(p) * (size_t)m * (size_t)k)
#define MM_B(p) (b + (size_t)(p) * (size_t)k * (size_t)n)
#define MM_C(p) (c + (size_t)(p) * (size_t)m * (size_t)n)

/* The epilogue every rung shares: scale the accumulated product and add beta*C. */
static inline float mm_epilogue(float acc, float alpha, float beta, const float *cij) {
    return beta == 0.0f ? alpha * acc : alpha * acc + beta * *cij;
}

#endif
