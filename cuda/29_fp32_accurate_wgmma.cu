// Rung 29 (beyond the seeds), column-major: FP32 accuracy from BF16 wgmma
// (precision class FP32-accurate; needs sm_90a).
// Adds over rung 26 (the same exact three-part BF16 split, cuda/exact_split.cuh, and the
// same six products on mma.sync, 0.9-1.0x cuBLAS FP32): rung 28's Hopper pipeline, TMA
// loads into 128-byte-swizzled tiles, a producer and two consumer warpgroups, wgmma
// reading both operands from shared memory, 128 x 128 block tiles, stages 64 k deep
// (128 bytes of BF16: one row of the swizzle), 2 x 96 KB.
// Accumulation: a0b0 of each 32-k chunk is summed in the tensor core from zero and added
// into FP32 register accumulators outside it, rounded to nearest (the tensor core's own
// adds truncate); the five correction products (2^-8 of the result and smaller) go to a
// second accumulator for the whole K, whose truncation is invisible at that scale. Per
// 32-k chunk each consumer warpgroup issues twice: the chunk (2 x m64n128k16), then the
// corrections (10 x m64n128k16); it waits for the chunk alone (wgmma.wait_group 1: the
// corrections keep the tensor core busy meanwhile) and adds it. C = acc + corr where acc
// is finite; where it is not (an Inf or NaN operand), acc alone, as IEEE.
// Launch (mmsuite/tensorcore.py): mm_26_split on A and on B (three BF16 parts each,
// k-contiguous, zero-padded to whole 128 x 64 tiles), then mm_29_fp32_accurate_wgmma(
// maps, M, N, K, Kp, alpha, beta, A, B, C, W, kt_per_slice, slices, flag_offset) with
// six tensor maps (A's parts, then B's), then mm_21_reduce when K is sliced. Short K
// (below 512) or M or N below 64: rung 22's FP32 SIMT kernels, as rung 26. Any M, N,
// K >= 1, any batch. On the H200 (cuBLAS FP32 in the same run): 1.95x at 2048^3, 2.15x at
// 4096^3, 2.25x at 8192^3, with 0.14-0.31x cuBLAS FP32's componentwise error on every
// input class; the table is in docs/kernel-log.md.
#include "28_tf32_wgmma.cu"
#include "exact_split.cuh"

#define ACC_BK 64  // 64 BF16 = 128 bytes: one row of the 128-byte swizzle
#define ACC_BN 128
#ifndef ACC_STAGES
#define ACC_STAGES 2  // 2 x 96 KB
#endif
#define ACC_TILE (WG_BM * ACC_BK * 2)  // bytes of one part of A's (or B's) tile

// The FP32 SIMT path, where a split was inexact: this thread's accumulators (as wg_store
// places them) summed over the block's slice of K.
template <int BN>
__device__ __forceinline__ void acc_simt(float (&acc)[BN / 2], const WgTile& tile, int consumer,
                                         int M, int N, int K, int k_end, const float* A,
                                         const float* B) {
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int m = wg_row(tile, consumer, r), n = wg_col(tile, j, r);
            acc[4 * j + r] = m < M && n < N ? simt_dot(A, B, M, N, K, tile.mat, m, n,
                                                       tile.kt0 * ACC_BK, k_end)
                                            : 0.0f;
        }
}

// d (+)= a * b, m64n128k16, BF16 operands K-major in shared memory (no transpose).
__device__ __forceinline__ void wg_mma_bf16_n128(float (&d)[64], unsigned long long da,
                                                 unsigned long long db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WG_D64
                 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : WG_D64_OPERANDS(d)
                 : "l"(da), "l"(db), "r"(accumulate));
}

extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
mm_29_fp32_accurate_wgmma(const __grid_constant__ WgMaps<SPLIT_PARTS> maps, int M, int N, int K,
                          int Kp, float alpha, float beta, const float* A, const float* B,
                          float* C, float* W, int kt_per_slice, int slices, int flag_offset) {
    constexpr int STAGE = SPLIT_PARTS * 2 * ACC_TILE;  // bytes: A's and B's parts
    constexpr int R = ACC_BN / 2;                       // accumulators per thread
    __shared__ __align__(8) unsigned long long full_bar[ACC_STAGES], empty_bar[ACC_STAGES];
    const unsigned base = (wg_smem(wg_dynamic) + 1023u) & ~1023u;
    // Read by every thread before the barrier below, which the block's count comes after.
    const bool simt = acc_flags_inexact(W, flag_offset);
    WgTile tile = wg_tile<ACC_BN, ACC_BK>(Kp, kt_per_slice, slices);
    const int k_end = min(K, (tile.kt0 + kt_per_slice) * ACC_BK);
    if (simt) tile.tiles = 0;  // nothing for the tensor pipeline to do
    wg_init_barriers<ACC_STAGES>(full_bar, empty_bar);
    if (threadIdx.x < 128) {
        wg_produce<SPLIT_PARTS, ACC_TILE, ACC_TILE, ACC_BK, ACC_STAGES>(maps.map, base, tile,
                                                                       full_bar, empty_bar);
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(WG_CONSUMER_REGS));
    const int consumer = threadIdx.x / 128 - 1;  // rows 64 * consumer of the block tile
    const int lane = threadIdx.x & 31;

    float acc[R], corr[R], chunk[R];
#pragma unroll
    for (int i = 0; i < R; ++i) acc[i] = corr[i] = chunk[i] = 0.0f;

    for (int t = 0; t < tile.tiles; ++t) {
        const int s = t % ACC_STAGES;
        wg_bar_wait(wg_smem(&full_bar[s]), (t / ACC_STAGES) & 1);
        const unsigned stage = base + s * STAGE;
        // Part p of A (this consumer's 64 rows) and of B; k16 steps are 32 bytes apart.
        unsigned a[SPLIT_PARTS], b[SPLIT_PARTS];
#pragma unroll
        for (int p = 0; p < SPLIT_PARTS; ++p) {
            a[p] = stage + p * ACC_TILE + consumer * 64 * ACC_BK * 2;
            b[p] = stage + SPLIT_PARTS * ACC_TILE + p * ACC_TILE;
        }
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            wg_fence();
            // a0b0 of this 32-k chunk, summed in the tensor core from zero...
#pragma unroll
            for (int kk = 2 * half; kk < 2 * half + 2; ++kk)
                wg_mma_bf16_n128(chunk, wg_desc(a[0] + kk * 32), wg_desc(b[0] + kk * 32),
                                 kk > 2 * half);
            wg_commit();
            // ...and the corrections, one accumulator for the whole K.
#pragma unroll
            for (int kk = 2 * half; kk < 2 * half + 2; ++kk) {
                const int off = kk * 32;
                wg_mma_bf16_n128(corr, wg_desc(a[0] + off), wg_desc(b[1] + off), 1);
                wg_mma_bf16_n128(corr, wg_desc(a[1] + off), wg_desc(b[0] + off), 1);
                wg_mma_bf16_n128(corr, wg_desc(a[0] + off), wg_desc(b[2] + off), 1);
                wg_mma_bf16_n128(corr, wg_desc(a[1] + off), wg_desc(b[1] + off), 1);
                wg_mma_bf16_n128(corr, wg_desc(a[2] + off), wg_desc(b[0] + off), 1);
            }
            wg_commit();
            // Every group but the newest has completed: this chunk, and (at half 0) all
            // of stage t - 1's products, which frees that stage.
            wg_wait<1>();
            wg_pin(chunk);
#pragma unroll
            for (int i = 0; i < R; ++i) acc[i] += chunk[i];  // FP32, round to nearest
            wg_pin(chunk);
            if (half == 0 && t > 0 && lane == 0)
                wg_bar_arrive(wg_smem(&empty_bar[(t - 1) % ACC_STAGES]));
        }
    }
    wg_wait<0>();
    wg_pin(acc);
    wg_pin(corr);
#pragma unroll
    for (int i = 0; i < R; ++i)
        if (isfinite(acc[i])) acc[i] += corr[i];
    if (simt) acc_simt<ACC_BN>(acc, tile, consumer, M, N, K, k_end, A, B);
    wg_store<ACC_BN>(acc, tile, consumer, M, N, alpha, beta, C, W, slices);
    if (threadIdx.x == 128) acc_flags_finish(W, flag_offset);
}
