// Float4 helpers shared by the register-blocked rungs: the predicated float4 /
// scalar loads and stores of rung 6 (used again by rungs 7-11, 18, 19 and 20),
// the transposing store of a B column into shared memory (rungs 7, 8, 9, 20),
// the register-block outer product (rungs 7-11, 20) and the float4 add of the
// slice sums (cuda/slice_sum.cuh, rung 21's fused tail). What a rung adds over
// its parent stays in the rung's own file. Rungs 10 and 11 write the four
// transposing stores out by hand: through store4_strided, nvcc allocated their
// registers differently (rung 10: 130 instead of 128).
#pragma once
#include "common.cuh"

// Four consecutive floats p[0..3], of which only the first `left` lie inside
// the matrix; zeros for the rest. One 16-byte load when `vec` (p is 16-byte
// aligned) and all four are inside, else predicated scalar loads.
__device__ __forceinline__ float4 load4(const float* p, int left, bool vec) {
    if (vec && left >= 4) return *reinterpret_cast<const float4*>(p);
    float4 v;
    v.x = left > 0 ? p[0] : 0.0f;
    v.y = left > 1 ? p[1] : 0.0f;
    v.z = left > 2 ? p[2] : 0.0f;
    v.w = left > 3 ? p[3] : 0.0f;
    return v;
}

// load4 for a staging thread's four rows of A: with `vec` (or not SPREAD) rows 0..3 of p
// (load4), else the scalar rows 0, Q, 2Q and 3Q, `left` rows from p inside the matrix.
// Spread so, a warp's scalar loads of one A column are consecutive floats.
template <int Q, bool SPREAD>
__device__ __forceinline__ float4 load4_rows(const float* p, int left, bool vec) {
    if (vec || !SPREAD) return load4(p, left, vec);
    float4 v;
    v.x = left > 0 ? p[0] : 0.0f;
    v.y = left > Q ? p[Q] : 0.0f;
    v.z = left > 2 * Q ? p[2 * Q] : 0.0f;
    v.w = left > 3 * Q ? p[3 * Q] : 0.0f;
    return v;
}

// s[0..3] = v (one 16-byte store: s aligned) or, rows spread as load4_rows' are, s[qQ] = v.q.
template <int Q, bool SPREAD>
__device__ __forceinline__ void store4_rows(float* s, float4 v, bool vec) {
    if (vec || !SPREAD) {
        *reinterpret_cast<float4*>(s) = v;
        return;
    }
    s[0] = v.x;
    s[Q] = v.y;
    s[2 * Q] = v.z;
    s[3 * Q] = v.w;
}

// load4 for rows whose alignment is known only at run time (rung 18): one
// 16-byte load when all four floats are inside and p is 16-byte aligned.
__device__ __forceinline__ float4 load4_aligned(const float* p, int left) {
    if (left >= 4 && (reinterpret_cast<unsigned long long>(p) & 15) == 0)
        return *reinterpret_cast<const float4*>(p);
    return load4(p, left, false);
}

// s += v, component by component.
__device__ __forceinline__ void add4(float4& s, const float4& v) {
    s.x += v.x;
    s.y += v.y;
    s.z += v.z;
    s.w += v.w;
}

// p[0..3] = alpha * acc (+ beta * p[0..3] when beta != 0), `left` of the four
// inside the matrix: one 16-byte access when `vec` and all four are inside.
__device__ __forceinline__ void store4(float* p, float4 acc, int left, bool vec, float alpha,
                                       float beta) {
    if (vec && left >= 4) {
        float4 out;
        if (beta == 0.0f) {
            out = make_float4(alpha * acc.x, alpha * acc.y, alpha * acc.z, alpha * acc.w);
        } else {
            const float4 old = *reinterpret_cast<const float4*>(p);
            out = make_float4(alpha * acc.x + beta * old.x, alpha * acc.y + beta * old.y,
                              alpha * acc.z + beta * old.z, alpha * acc.w + beta * old.w);
        }
        *reinterpret_cast<float4*>(p) = out;
        return;
    }
    if (left > 0) mm_store(p, acc.x, alpha, beta);
    if (left > 1) mm_store(p + 1, acc.y, alpha, beta);
    if (left > 2) mm_store(p + 2, acc.z, alpha, beta);
    if (left > 3) mm_store(p + 3, acc.w, alpha, beta);
}

// s[(k + q) * ld + j] = v.q for q = 0..3: four consecutive k of one column j of
// B written into a transposed (k-major) shared tile of row pitch `ld`.
__device__ __forceinline__ void store4_strided(float* s, int k, int ld, int j, float4 v) {
    s[(k + 0) * ld + j] = v.x;
    s[(k + 1) * ld + j] = v.y;
    s[(k + 2) * ld + j] = v.z;
    s[(k + 3) * ld + j] = v.w;
}

// acc[x][y] += a[x] * b[y]: one k step of an X x Y register block.
template <int X, int Y>
__device__ __forceinline__ void outer_fma(float (&acc)[X][Y], const float (&a)[X],
                                          const float (&b)[Y]) {
#pragma unroll
    for (int x = 0; x < X; ++x)
#pragma unroll
        for (int y = 0; y < Y; ++y) acc[x][y] += a[x] * b[y];
}

// outer_fma in column pairs: for each pair of columns, the rows in turn (down the
// rows for even pairs, back up for odd ones), both columns of a row together. Each
// a[x] feeds two FMAs in a row, b alternates between two registers, and the turn at
// the end of a pair keeps the last a. The same sums as outer_fma; measured faster
// (see cuda/mac_loop.inc), with more FFMAs taking operands from ptxas's reuse cache.
template <int X, int Y>
__device__ __forceinline__ void outer_fma_pairs(float (&acc)[X][Y], const float (&a)[X],
                                                const float (&b)[Y]) {
#pragma unroll
    for (int y = 0; y < Y; y += 2)
#pragma unroll
        for (int step = 0; step < X; ++step) {
            const int x = (y / 2) % 2 ? X - 1 - step : step;
            acc[x][y] += a[x] * b[y];
            acc[x][y + 1] += a[x] * b[y + 1];
        }
}

// outer_fma_pairs with the pair's order flipped on every row: a 2 x 2 zigzag in
// which each FMA shares an operand with the one before it. Its own function, not
// a flag of outer_fma_pairs: with the flag, ptxas emitted other code for the
// 256x128 tile (SASS compared) than the code its speed was measured with.
template <int X, int Y>
__device__ __forceinline__ void outer_fma_zigzag(float (&acc)[X][Y], const float (&a)[X],
                                                 const float (&b)[Y]) {
#pragma unroll
    for (int y = 0; y < Y; y += 2)
#pragma unroll
        for (int step = 0; step < X; ++step) {
            const int x = (y / 2) % 2 ? X - 1 - step : step;
            const int first = step % 2 ? y + 1 : y, second = step % 2 ? y : y + 1;
            acc[x][first] += a[x] * b[first];
            acc[x][second] += a[x] * b[second];
        }
}
