// Shared by every OpenCL rung: the multiply-add macro and the batch offset.
//
// ABI: __kernel void <entry>(const int M, const int N, const int K, const float alpha,
//          __global const float* A, __global const float* B, const float beta,
//          __global float* C)
// computes, for matrix get_global_id(2) of the batch, C = alpha*A*B + beta*C,
// with row-major A (M x K), B (K x N), C (M x N) stored one matrix after
// another. When beta == 0, C is never read (it may hold NaN poison).
// The host pastes this file into each rung's source before building it.
#ifndef MM_COMMON_H
#define MM_COMMON_H

// fma() is exact but PoCL's CPU compiler calls a slow library routine for it; with
// -D FAST_MAD=1 (set by the host for CPU devices, with -cl-mad-enable) the kernel
// writes a * b + c, which the compiler contracts to a hardware FMA.
#ifndef FAST_MAD
#define FAST_MAD 0
#endif
#if FAST_MAD
#define MAD(a, b, c) ((a) * (b) + (c))
#else
#define MAD(a, b, c) fma((a), (b), (c))
#endif

// Move A, B and C to matrix get_global_id(2) of the batch (the range's third
// dimension; every rung uses a local size of 1 along it).
#define MM_BATCH_OFFSET(M, N, K, A, B, C)                                  \
    do {                                                                   \
        const size_t mm_z = get_global_id(2);                              \
        A += mm_z * (size_t)(M) * (size_t)(K);                             \
        B += mm_z * (size_t)(K) * (size_t)(N);                             \
        C += mm_z * (size_t)(M) * (size_t)(N);                             \
    } while (0)

#endif
