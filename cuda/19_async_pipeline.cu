// Rung 19 (beyond the seeds), column-major: a multi-stage cp.async pipeline for Hopper.
// Adds over rung 11: the tiles travel from global to shared memory with
// cp.async (sm_80+), which copies without passing through registers, and the
// pipeline keeps STAGES - 1 tiles in flight while the block computes on one
// (three stages by default, 128x128 block, K step 16).
// Measured on the H100 at 4096^3 it does not pay: about 41 TFLOP/s, like
// rung 11 and below rung 10 (44.6). Copying B as it lies (k contiguous) rules
// out the transposed B tile of rungs 7-11, so the B fragments are read four
// k-steps at a time and hold 32 registers; at 128 registers per thread that
// probably leaves the compiler less room to overlap shared loads with the
// FMAs. Stage
// counts 2-6 and K steps 8-32 all measured 38-42 TFLOP/s. Rung 20 goes back
// to register staging.
// Both tiles are copied as they lie in memory, 16 bytes at a time: the A tile
// k-major (sa[k][i], i contiguous, as in A) and the B tile column by column
// (sb[j][k], padded to BK + 4 words). A thread's eight columns are 4 apart
// (tc + 4y), so the four distinct B rows a warp reads per instruction land in
// four different bank groups; A reads are eight consecutive float4 per warp.
// Edges: cp.async with a source size of 0 fills zeros, so the copies outside
// A or B need no branches; float4 copies when the column length (M for A, K
// for B) is a multiple of 4, else 4-byte copies. Stores are predicated.
#include "async_copy.cuh"
#include "common.cuh"
#include "vec4.cuh"

#ifndef BK
#define BK 16
#endif
#ifndef STAGES
#define STAGES 3
#endif
#define BM 128
#define BN 128
#define THREADS 256
#define LDA BM          // sa[k * LDA + i]
#define LDK (BK + 4)    // sb[j * LDK + k]
#define A_STAGE (BK * LDA)
#define B_STAGE (BN * LDK)
#define A_CHUNKS (BM * BK / 4 / THREADS)  // float4 copies per thread per tile
#define B_CHUNKS (BN * BK / 4 / THREADS)

extern "C" __global__ void __launch_bounds__(THREADS, 2)
mm_19_async_pipeline(int M, int N, int K, float alpha, const float* A, const float* B,
                     float beta, float* C) {
    MM_BATCH_OFFSET(M, N, K, A, B, C);
    extern __shared__ float4 smem4[];
    float* const sa = reinterpret_cast<float*>(smem4);  // STAGES x A_STAGE
    float* const sb = sa + STAGES * A_STAGE;            // STAGES x B_STAGE
    const int tid = threadIdx.x;
    const int i0 = blockIdx.x * BM, j0 = blockIdx.y * BN;
    const bool vec_m = (M & 3) == 0, vec_k = (K & 3) == 0;
    const int tiles = (K + BK - 1) / BK;

    // Copy plan, recomputed per tile to keep registers for the accumulators:
    // A chunk c -> (i = 4 * (c % (BM/4)), k = c / (BM/4)); B chunk c -> (k = 4 * (c % (BK/4)),
    // j = c / (BK/4)).
    auto load_tile = [&](int t, int stage) {
        const int k0 = t * BK;
        float* sa_s = sa + stage * A_STAGE;
        float* sb_s = sb + stage * B_STAGE;
#pragma unroll
        for (int r = 0; r < A_CHUNKS; ++r) {
            const int c = tid + r * THREADS, i = 4 * (c % (BM / 4)), k = k0 + c / (BM / 4);
            copy4(sa_s + (k - k0) * LDA + i, A + i0 + i + (size_t)k * M,
                  k < K ? M - i0 - i : 0, vec_m, A);
        }
#pragma unroll
        for (int r = 0; r < B_CHUNKS; ++r) {
            const int c = tid + r * THREADS, k = 4 * (c % (BK / 4)), j = c / (BK / 4);
            copy4(sb_s + j * LDK + k, B + k0 + k + (size_t)(j0 + j) * K,
                  j0 + j < N ? K - k0 - k : 0, vec_k, B);
        }
    };

    // Warp tile 64x32 (2x4 warps), lanes 8x4: rows tr..+3 and tr+32..+3, columns tc + 4y.
    const int warp = tid >> 5, lane = tid & 31;
    const int tr = (warp & 1) * 64 + (lane & 7) * 4;
    const int tc = (warp >> 1) * 32 + (lane >> 3);
    float acc[8][8] = {};

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < tiles) load_tile(s, s);
        commit();
    }
    for (int t = 0; t < tiles; ++t) {
        wait_pending<STAGES - 2>();  // tile t has landed (for this thread's copies)
        __syncthreads();             // ... and for everyone's; stage (t-1) % STAGES is free
        const int next = t + STAGES - 1;
        if (next < tiles) load_tile(next, next % STAGES);
        commit();
        const float* sa_s = sa + (t % STAGES) * A_STAGE;
        const float* sb_s = sb + (t % STAGES) * B_STAGE;
#pragma unroll
        for (int k4 = 0; k4 < BK; k4 += 4) {
            float4 bq[8];
#pragma unroll
            for (int y = 0; y < 8; ++y)
                bq[y] = *reinterpret_cast<const float4*>(sb_s + (tc + 4 * y) * LDK + k4);
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                float ar[8];
                *reinterpret_cast<float4*>(ar) =
                    *reinterpret_cast<const float4*>(sa_s + (k4 + q) * LDA + tr);
                *reinterpret_cast<float4*>(ar + 4) =
                    *reinterpret_cast<const float4*>(sa_s + (k4 + q) * LDA + tr + 32);
#pragma unroll
                for (int y = 0; y < 8; ++y) {
                    const float b = q == 0 ? bq[y].x : q == 1 ? bq[y].y : q == 2 ? bq[y].z
                                                                                 : bq[y].w;
#pragma unroll
                    for (int x = 0; x < 8; ++x) acc[x][y] += ar[x] * b;
                }
            }
        }
    }
    wait_pending<0>();

#pragma unroll
    for (int y = 0; y < 8; ++y) {
        const int j = j0 + tc + 4 * y;
        if (j >= N) continue;
#pragma unroll
        for (int g = 0; g < 2; ++g) {
            const int i = i0 + tr + 32 * g;
            store4(C + i + (size_t)j * M,
                   make_float4(acc[4 * g][y], acc[4 * g + 1][y], acc[4 * g + 2][y],
                               acc[4 * g + 3][y]),
                   M - i, vec_m, alpha, beta);
        }
    }
}
