// Rung 18 (seed 003): batched SGEMM on contiguous (batch, rows, cols) row-major
// tensors; TMxTN outputs per thread, BK-deep shared tiles, float4 global loads.
// One source, two rungs: PREFETCH=0 is the seed's kernel (cuda.18_batched_tmtn),
// PREFETCH=1 adds the step the seed names next (cuda.18_batched_prefetch).
//
// Adds over 07_blocktile_2d: the seed's batched fast path. The batch is the
// grid's z dimension and each matrix sits right after the previous one, so a
// block finds its operands with one multiply (MM_BATCH_OFFSET) instead of
// walking shapes and strides. 256 threads (TPBM x TPBN = 16 x 16) own a
// BM x BN = 128 x 128 tile of C, TM x TN = 8 x 8 accumulators each, kept in
// registers until the end. Per BK = 16 step the block stages A[BM][BK] and
// B[BK][BN] in shared memory with 16-byte float4 loads: a quarter of the load
// instructions of scalar loads, and each fetched word then serves BN (or BM)
// multiply-adds from shared memory and TN (or TM) from registers.
//
// Thread (tr, tc) owns rows tr + 16*m (as in the seed) and, within each half
// of the tile's columns, the four adjacent columns 4*tc .. 4*tc+3. Beyond the
// seed, both operands are read from shared memory 16 bytes at a time: B as two
// float4 per k (the 16 threads of a half-warp read 256 contiguous bytes, no
// bank conflict), A as one float4 per row per four k (its rows are
// k-contiguous; a warp reads two rows, a broadcast). That is 4 shared loads
// per 64 multiply-adds per k instead of the seed's 16: +17% at 4096^3 on an
// H100 (29.4 -> 34.3 TFLOP/s).
//
// PREFETCH=1: the global loads of tile k+1 go into registers before the math
// on tile k, and are written to shared memory only after it, so their latency
// hides behind 64 multiply-adds per k instead of stalling the block at the
// barrier. The 16 extra registers (168 in all) leave one block per SM; still
// +12% on an H100: 38.3 TFLOP/s at 4096^3 and 36.3 at batch 100 x 1000^3
// (PREFETCH=0: 34.3 and 31.7), 79% and 77% of cuBLAS (48.3 and 46.9).
//
// Edges (the seed assumed 1000 = a multiple of 4 and left edges out): a float4
// load is used only when all four floats are inside the matrix and the address
// is 16-byte aligned; otherwise the four floats are loaded one by one, each
// predicated, with zeros outside. Outputs outside C are not stored.
#include "common.cuh"
#include "vec4.cuh"

#define TM 8
#define TN 8
#define TPBM 16
#define TPBN 16
#define BM (TM * TPBM)
#define BN (TN * TPBN)
#define BK 16
#define NTHREADS (TPBM * TPBN)
#define A_LOADS (BM * BK / 4 / NTHREADS)  // float4 loads per thread per A tile
#define B_LOADS (BK * BN / 4 / NTHREADS)

#ifndef PREFETCH
#define PREFETCH 0
#endif
// Without prefetching, two blocks per SM (128 registers); with it, one.
#define MIN_BLOCKS (PREFETCH ? 1 : 2)

static_assert(BK % 4 == 0 && TN % 4 == 0, "float4 staging and reads need multiples of 4");
static_assert(A_LOADS * 4 * NTHREADS == BM * BK && B_LOADS * 4 * NTHREADS == BK * BN,
              "every thread stages the same number of float4");

extern "C" __global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS)
mm_18_batched_tmtn(int M, int N, int K, float alpha, const float* A, const float* B,
                   float beta, float* C) {
    MM_BATCH_OFFSET(M, N, K, A, B, C);
    __shared__ __align__(16) float A_s[BM * BK];  // [row][k]
    __shared__ __align__(16) float B_s[BK * BN];  // [k][col]

    const int row0 = blockIdx.y * BM;
    const int col0 = blockIdx.x * BN;
    const int tid = threadIdx.x;
    const int tr = tid / TPBN;
    const int tc = tid % TPBN;

    float acc[TM][TN];
#pragma unroll
    for (int m = 0; m < TM; ++m)
#pragma unroll
        for (int n = 0; n < TN; ++n) acc[m][n] = 0.0f;

    // Global -> registers (fetch) and registers -> shared (stash), float4 per thread.
    float4 ra[A_LOADS], rb[B_LOADS];
    auto fetch = [&](int k0) {
#pragma unroll
        for (int t = 0; t < A_LOADS; ++t) {  // 4 threads cover one 16-float row of A
            const int idx = 4 * (tid + t * NTHREADS);
            const int gr = row0 + idx / BK, gk = k0 + idx % BK;
            const int valid = gr < M ? K - gk : 0;
            ra[t] = valid > 0 ? load4_aligned(A + (size_t)gr * K + gk, valid)
                              : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int t = 0; t < B_LOADS; ++t) {  // a warp covers 128 consecutive floats of B
            const int idx = 4 * (tid + t * NTHREADS);
            const int gk = k0 + idx / BN, gc = col0 + idx % BN;
            const int valid = gk < K ? N - gc : 0;
            rb[t] = valid > 0 ? load4_aligned(B + (size_t)gk * N + gc, valid)
                              : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    };
    auto stash = [&]() {
#pragma unroll
        for (int t = 0; t < A_LOADS; ++t)
            *reinterpret_cast<float4*>(&A_s[4 * (tid + t * NTHREADS)]) = ra[t];
#pragma unroll
        for (int t = 0; t < B_LOADS; ++t)
            *reinterpret_cast<float4*>(&B_s[4 * (tid + t * NTHREADS)]) = rb[t];
    };

#if PREFETCH
    fetch(0);
#endif
    for (int k0 = 0; k0 < K; k0 += BK) {
#if PREFETCH
        stash();  // tile k0, fetched during the previous step
        __syncthreads();
        if (k0 + BK < K) fetch(k0 + BK);  // in flight during the math below
#else
        fetch(k0);
        stash();
        __syncthreads();
#endif
#pragma unroll
        for (int k = 0; k < BK; k += 4) {
            float4 a4[TM];
#pragma unroll
            for (int m = 0; m < TM; ++m)
                a4[m] = *reinterpret_cast<const float4*>(&A_s[(m * TPBM + tr) * BK + k]);
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                float b[TN];
#pragma unroll
                for (int g = 0; g < TN / 4; ++g) {
                    const float4 v = *reinterpret_cast<const float4*>(
                        &B_s[(k + kk) * BN + g * 4 * TPBN + 4 * tc]);
                    b[4 * g] = v.x, b[4 * g + 1] = v.y, b[4 * g + 2] = v.z, b[4 * g + 3] = v.w;
                }
#pragma unroll
                for (int m = 0; m < TM; ++m) {
                    const float a = kk == 0 ? a4[m].x : kk == 1 ? a4[m].y : kk == 2 ? a4[m].z
                                                                                  : a4[m].w;
#pragma unroll
                    for (int n = 0; n < TN; ++n) acc[m][n] += a * b[n];
                }
            }
        }
        __syncthreads();
    }

#pragma unroll
    for (int m = 0; m < TM; ++m) {
        const int r = row0 + m * TPBM + tr;
        if (r >= M) continue;
#pragma unroll
        for (int n = 0; n < TN; ++n) {
            const int c = col0 + (n / 4) * 4 * TPBN + 4 * tc + n % 4;
            if (c < N) mm_store(&C[(size_t)r * N + c], acc[m][n], alpha, beta);
        }
    }
}
