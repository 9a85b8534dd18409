// Rung 4 - 2D register blocking with float4 vector loads.
//
// Adds over rung 3:
// - A 2D block of TM x TN outputs per work-item (8 x 8 on a GPU) instead of a
//   1D strip. Per step along k a work-item reads TM values of A and TN values of
//   B and does TM*TN multiply-adds with them: reads per multiply-add fall from
//   about 1 to (TM + TN) / (TM * TN), 1/4 at 8 x 8, which is what turns the
//   kernel from bound by local-memory traffic into bound by arithmetic.
// - A BM x BN block of C per work-group (64 x 128 on a GPU) with BK-deep
//   slices of A and B, so each global element is read once per BM (or BN)
//   outputs.
// - float4 where it pays: 16-byte global loads of A and B and 16-byte stores of
//   C (with -D VEC=1, chosen by the host when K and N are multiples of 4 so that
//   every float4 is aligned and lies wholly inside or outside the matrix), and
//   16-byte local-memory reads. A work-item's TM rows and TN columns are split
//   into groups of 4 spaced WY*4 and WX*4 apart, so that neighbouring
//   work-items read neighbouring float4s: no bank conflicts.
// - The A slice is stored transposed (k-major) in local memory, padded by PAD
//   floats per row so that the transposing stores do not collide in one bank.
// - Double-buffered local memory with a register prefetch: the next slice is
//   loaded from global memory into registers while the current one is consumed,
//   then written to the other buffer; one barrier per slice.
// - -D STAGE=0 (the host's choice on CPUs) skips local memory: there it is
//   plain cached RAM, and each barrier would force every work-item's
//   accumulators out to memory (PoCL keeps state that lives across a barrier in
//   per-work-item arrays). The register block then streams A and B through the
//   caches, and the work-group loop vectorises.
//
// Edges: out-of-range loads give zeros (or are clamped to a valid element whose
// result is discarded) and stores are guarded (per float4 with VEC=1, per
// element with VEC=0), so any M, N, K >= 1 works.
// Build options: -D BM -D BN -D BK -D TM -D TN -D PAD -D VEC -D STAGE. TM, TN,
// BK are multiples of 4; local size (BN/TN, BM/TM, 1).

#include "common.h"

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 16
#endif
#ifndef TM
#define TM 8
#endif
#ifndef TN
#define TN 8
#endif
#ifndef PAD
#define PAD 4
#endif
#ifndef VEC
#define VEC 0
#endif
#ifndef STAGE
#define STAGE 1
#endif

#define WX (BN / TN)             // work-items along the columns of the block
#define WY (BM / TM)             // work-items along the rows of the block
#define NT (WX * WY)             // work-items per work-group
#define LDA (BM + PAD)           // row length of the transposed A slice, in floats
#define GM (TM / 4)              // float4 groups per work-item along rows
#define GN (TN / 4)              // float4 groups per work-item along columns

#if STAGE
#if VEC
#define A_LOADS (BM * BK / 4 / NT)
#define B_LOADS (BK * BN / 4 / NT)
#if (BM * BK / 4) % NT != 0 || (BK * BN / 4) % NT != 0
#error "each work-item must load a whole number of float4s of the A and B slices"
#endif
#else
#define A_LOADS (BM * BK / NT)
#define B_LOADS (BK * BN / NT)
#if (BM * BK) % NT != 0 || (BK * BN) % NT != 0
#error "each work-item must load a whole number of elements of the A and B slices"
#endif
#endif
#endif

__kernel __attribute__((reqd_work_group_size(WX, WY, 1)))
void mm_regblock_vec(const int M, const int N, const int K, const float alpha,
                     __global const float* restrict A, __global const float* restrict B,
                     const float beta, __global float* restrict C)
{
    const int tx = get_local_id(0);
    const int ty = get_local_id(1);
    const int tid = ty * WX + tx;
    const int n0 = get_group_id(0) * BN;
    const int m0 = get_group_id(1) * BM;
    MM_BATCH_OFFSET(M, N, K, A, B, C);

    float4 acc[TM][GN];
    #pragma unroll
    for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < GN; ++j)
            acc[i][j] = (float4)(0.0f);

#if STAGE
    __local float4 As[2][BK][LDA / 4];
    __local float4 Bs[2][BK][BN / 4];

#if VEC
    float4 ra[A_LOADS], rb[B_LOADS];
#define LOAD_SLICE(k0)                                                                  \
    for (int l = 0; l < A_LOADS; ++l) {                                                 \
        const int idx = tid + l * NT, r = idx / (BK / 4), c = (idx % (BK / 4)) * 4;     \
        ra[l] = (m0 + r < M && (k0) + c < K)                                            \
            ? *(const __global float4*)(A + (size_t)(m0 + r) * K + (k0) + c)            \
            : (float4)(0.0f);                                                           \
    }                                                                                   \
    for (int l = 0; l < B_LOADS; ++l) {                                                 \
        const int idx = tid + l * NT, r = idx / (BN / 4), c = (idx % (BN / 4)) * 4;     \
        rb[l] = ((k0) + r < K && n0 + c < N)                                            \
            ? *(const __global float4*)(B + (size_t)((k0) + r) * N + n0 + c)            \
            : (float4)(0.0f);                                                           \
    }
#define STORE_SLICE(buf)                                                                \
    for (int l = 0; l < A_LOADS; ++l) {                                                 \
        const int idx = tid + l * NT, r = idx / (BK / 4), c = (idx % (BK / 4)) * 4;     \
        __local float* at = (__local float*)As[buf] + c * LDA + r;                      \
        at[0] = ra[l].x; at[LDA] = ra[l].y; at[2 * LDA] = ra[l].z; at[3 * LDA] = ra[l].w; \
    }                                                                                   \
    for (int l = 0; l < B_LOADS; ++l) {                                                 \
        const int idx = tid + l * NT, r = idx / (BN / 4), c = idx % (BN / 4);           \
        Bs[buf][r][c] = rb[l];                                                          \
    }
#else
    float ra[A_LOADS], rb[B_LOADS];
#define LOAD_SLICE(k0)                                                                  \
    for (int l = 0; l < A_LOADS; ++l) {                                                 \
        const int idx = tid + l * NT, r = idx / BK, c = idx % BK;                       \
        ra[l] = (m0 + r < M && (k0) + c < K) ? A[(size_t)(m0 + r) * K + (k0) + c] : 0.0f; \
    }                                                                                   \
    for (int l = 0; l < B_LOADS; ++l) {                                                 \
        const int idx = tid + l * NT, r = idx / BN, c = idx % BN;                       \
        rb[l] = ((k0) + r < K && n0 + c < N) ? B[(size_t)((k0) + r) * N + n0 + c] : 0.0f; \
    }
#define STORE_SLICE(buf)                                                                \
    for (int l = 0; l < A_LOADS; ++l) {                                                 \
        const int idx = tid + l * NT, r = idx / BK, c = idx % BK;                       \
        ((__local float*)As[buf])[c * LDA + r] = ra[l];                                 \
    }                                                                                   \
    for (int l = 0; l < B_LOADS; ++l) {                                                 \
        const int idx = tid + l * NT, r = idx / BN, c = idx % BN;                       \
        ((__local float*)Bs[buf])[r * BN + c] = rb[l];                                  \
    }
#endif

    const int tiles = (K + BK - 1) / BK;
    LOAD_SLICE(0)
    STORE_SLICE(0)
    barrier(CLK_LOCAL_MEM_FENCE);

    for (int t = 0; t < tiles; ++t) {
        const int cur = t & 1;
        const int more = t + 1 < tiles;
        if (more) {
            LOAD_SLICE((t + 1) * BK)
        }
        #pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float4 av[GM], bv[GN];
            #pragma unroll
            for (int g = 0; g < GM; ++g)
                av[g] = As[cur][kk][ty + g * WY];
            #pragma unroll
            for (int h = 0; h < GN; ++h)
                bv[h] = Bs[cur][kk][tx + h * WX];
            #pragma unroll
            for (int g = 0; g < GM; ++g) {
                #pragma unroll
                for (int h = 0; h < GN; ++h) {
                    acc[4 * g + 0][h] = MAD((float4)(av[g].x), bv[h], acc[4 * g + 0][h]);
                    acc[4 * g + 1][h] = MAD((float4)(av[g].y), bv[h], acc[4 * g + 1][h]);
                    acc[4 * g + 2][h] = MAD((float4)(av[g].z), bv[h], acc[4 * g + 2][h]);
                    acc[4 * g + 3][h] = MAD((float4)(av[g].w), bv[h], acc[4 * g + 3][h]);
                }
            }
        }
        if (more) {
            STORE_SLICE(cur ^ 1)
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#else
    // No staging: each work-item streams its TM rows of A and TN columns of B from
    // global memory (through the caches). Rows and columns past the edge are
    // clamped to the last valid one; their results are never stored.
    const __global float* arow[TM];
    #pragma unroll
    for (int g = 0; g < GM; ++g)
        #pragma unroll
        for (int i = 0; i < 4; ++i)
            arow[4 * g + i] = A + (size_t)min(m0 + g * 4 * WY + ty * 4 + i, M - 1) * K;
    // Scalar loads here even with VEC=1: PoCL vectorises them across work-items
    // better than it handles vload4 (2.5x faster at 1024^3 on an x86-64 CPU).
    int bcol[TN];
    #pragma unroll
    for (int j = 0; j < TN; ++j)
        bcol[j] = min(n0 + (j / 4) * 4 * WX + tx * 4 + j % 4, N - 1);
    for (int p = 0; p < K; ++p) {
        const __global float* brow = B + (size_t)p * N;
        float4 bv[GN];
        #pragma unroll
        for (int h = 0; h < GN; ++h)
            bv[h] = (float4)(brow[bcol[4 * h]], brow[bcol[4 * h + 1]], brow[bcol[4 * h + 2]],
                             brow[bcol[4 * h + 3]]);
        #pragma unroll
        for (int i = 0; i < TM; ++i) {
            const float a = arow[i][p];
            #pragma unroll
            for (int h = 0; h < GN; ++h)
                acc[i][h] = MAD((float4)(a), bv[h], acc[i][h]);
        }
    }
#endif

    #pragma unroll
    for (int g = 0; g < GM; ++g) {
        #pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = m0 + g * 4 * WY + ty * 4 + i;
            if (row < M) {
                __global float* crow = C + (size_t)row * N;
                #pragma unroll
                for (int h = 0; h < GN; ++h) {
                    const int col = n0 + h * 4 * WX + tx * 4;
                    const float4 v = alpha * acc[4 * g + i][h];
#if VEC
                    if (col < N) {
                        __global float4* cp = (__global float4*)(crow + col);
                        if (beta != 0.0f)
                            *cp = MAD((float4)(beta), *cp, v);
                        else
                            *cp = v;
                    }
#else
                    const float vs[4] = {v.x, v.y, v.z, v.w};
                    #pragma unroll
                    for (int q = 0; q < 4; ++q) {
                        if (col + q < N) {
                            if (beta != 0.0f)
                                crow[col + q] = MAD(beta, crow[col + q], vs[q]);
                            else
                                crow[col + q] = vs[q];
                        }
                    }
#endif
                }
            }
        }
    }
}
