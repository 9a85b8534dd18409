// Rung 26 (beyond the seeds), column-major: FP32 accuracy from BF16 tensor cores
// (precision class FP32-accurate: held to the FP32 tolerance).
// Adds over rung 25 (one TF32 product, about 200x FP32's error): the exact three-part
// BF16 split of cuda/exact_split.cuh (x = x0 + x1 + x2 exactly; mm_26_split writes the
// parts) and six products of it, a0b0 and five corrections, through mma.sync.m16n8k16
// with BF16 inputs and FP32 accumulators. BF16 runs at twice TF32's tensor rate, so the
// six cost what three TF32 products would; that is what lets an FP32-accurate rung come
// near FP32 SIMT speed on mma.sync and pass it on Hopper's wgmma (rung 29).
// Where the error goes, and what this rung does about it:
// - the split: exact, so no operand bit is lost (big and small TF32 parts, the split
//   this rung used before, keep about 22 of 24 bits: 3.1-3.5x cuBLAS FP32's
//   componentwise error under cancellation); the three products left out are below
//   2^-25 of |a||b| together;
// - accumulation: Hopper's tensor cores add inside the MMA with truncation, and over a
//   long K that dominates. Here a0b0 of each chunk of 32 k is summed in the tensor core
//   from zero and added into FP32 register accumulators outside it, rounded to nearest;
//   the five corrections (2^-8 of the result and smaller) go to accumulators of their
//   own, added to the main sum once, at the end, where it is finite (an Inf or NaN
//   operand leaves acc alone, as IEEE does);
// - long K is also cut into slices (mmsuite/tensorcore.py) when the tiles do not fill
//   the SMs, which shortens every FP32 sum; rung 21's mm_21_reduce adds the slices in a
//   fixed order.
// Rung 25's pipeline carries the three parts of both operands: its shared rows of 144
// bytes hold 64 BF16 k (the same 32-byte ldmatrix steps give m16n8k16's fragments as
// they gave m16n8k8's TF32 ones), two stages of 108 KB. The launches are mm_26_split(...)
// on A and on B, then mm_26_fp32_accurate(M, N, K, Kp, alpha, beta, A, B, C, W, a_offset,
// b_offset, Mp, Np, kt_per_slice, slices, flag_offset), then mm_21_reduce when K is
// split. Operands too small to split exactly (under about 2^-110) send every block to
// its FP32 SIMT path (exact_split.cuh). Where K is short (below 512) or M or N below
// 64, the tensor cores gain little: the planner runs rung 22's FP32 SIMT kernels there.
// Any M, N, K >= 1, any batch, as rung 25. Figures: docs/kernel-log.md.
#include "25_tf32_mma.cu"
#include "exact_split.cuh"

#ifndef ACCURATE_STAGES
#define ACCURATE_STAGES 2
#endif

// d = a * b + c on the tensor cores (m16n8k16, BF16 in, FP32 out).
__device__ __forceinline__ void tc_mma_bf16(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                            unsigned b1, const float (&c)[4]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]),
          "f"(c[2]), "f"(c[3]));
}

// The parts are packed k-contiguous at W + a_offset and W + b_offset, two BF16 per float:
// a row of Kp of them is Kp / 2 floats, and a stage's 32 floats per row carry 64 k.
extern "C" __global__ void __launch_bounds__(TC_THREADS, 1)
mm_26_fp32_accurate(int M, int N, int K, int Kp, float alpha, float beta, const float* A,
                    const float* B, float* C, float* W, int a_offset, int b_offset, int Mp,
                    int Np, int kt_per_slice, int slices, int flag_offset) {
    float* const smem = reinterpret_cast<float*>(tc_smem4);
    const bool simt = acc_flags_inexact(W, flag_offset);
    __syncthreads();  // every thread has read the flag before thread 0 counts the block
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp % TC_WARPS_M, wn = warp / TC_WARPS_M;
    const int mat = blockIdx.z / slices, slice = blockIdx.z % slices;
    const int m0 = blockIdx.x * TC_BM, n0 = blockIdx.y * TC_BN;
    const int kw = Kp / 2;  // floats per packed row
    const int kt0 = slice * kt_per_slice;
    const int tiles = simt ? 0 : min(kw / TC_BK, kt0 + kt_per_slice) - kt0;
    const size_t part_a = (size_t)gridDim.z / slices * Mp * kw;  // batch x Mp x Kp / 2
    const size_t part_b = (size_t)gridDim.z / slices * Np * kw;
    const float* a = W + a_offset + ((size_t)mat * Mp + m0) * kw;
    const float* b = W + b_offset + ((size_t)mat * Np + n0) * kw;

    float acc[TC_MI][TC_NJ][4], corr[TC_MI][TC_NJ][4];
#pragma unroll
    for (int i = 0; i < TC_MI; ++i)
#pragma unroll
        for (int j = 0; j < TC_NJ; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] = corr[i][j][r] = 0.0f;

    // ldmatrix row addresses: lanes 8q..8q+7 give the rows of matrix q.
    const int a_lane = ((lane & 7) + ((lane >> 3) & 1) * 8) * TC_LDS + (lane >> 4) * 4;
    const int b_lane = ((lane & 7) + (lane >> 4) * 8) * TC_LDS + ((lane >> 3) & 1) * 4;
    const int a_warp = wm * TC_WM * TC_LDS + a_lane;
    const int b_warp = wn * TC_WN * TC_LDS + b_lane;
    constexpr int STAGE = 2 * SPLIT_PARTS * TC_TILE;

#pragma unroll
    for (int s = 0; s < ACCURATE_STAGES - 1; ++s) {
        if (s < tiles)
            tc_load_stage<SPLIT_PARTS>(smem + s * STAGE, a, b, part_a, part_b, kw, kt0 + s);
        asm volatile("cp.async.commit_group;\n" ::);
    }
    for (int t = 0; t < tiles; ++t) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(ACCURATE_STAGES - 2));
        __syncthreads();  // tile t landed for all; everyone is done with tile t - 1's buffer
        const int next = t + ACCURATE_STAGES - 1;
        if (next < tiles)
            tc_load_stage<SPLIT_PARTS>(smem + (next % ACCURATE_STAGES) * STAGE, a, b, part_a,
                                       part_b, kw, kt0 + next);
        asm volatile("cp.async.commit_group;\n" ::);
        const float* const sa = smem + (t % ACCURATE_STAGES) * STAGE;
        const float* const sb = sa + SPLIT_PARTS * TC_TILE;
        // Two chunks of 32 k, each two k16 steps of 32 bytes (8 floats) per row.
#pragma unroll
        for (int kc = 0; kc < 2; ++kc) {
            unsigned bf[SPLIT_PARTS][2][TC_NJ / 2][4];
#pragma unroll
            for (int p = 0; p < SPLIT_PARTS; ++p)
#pragma unroll
                for (int q = 0; q < 2; ++q)
#pragma unroll
                    for (int jp = 0; jp < TC_NJ / 2; ++jp)
                        tc_ldsm4(bf[p][q][jp], sb + p * TC_TILE + b_warp + jp * 16 * TC_LDS +
                                                   (2 * kc + q) * 8);
#pragma unroll
            for (int i = 0; i < TC_MI; ++i) {
                unsigned af[SPLIT_PARTS][2][4];
#pragma unroll
                for (int p = 0; p < SPLIT_PARTS; ++p)
#pragma unroll
                    for (int q = 0; q < 2; ++q)
                        tc_ldsm4(af[p][q], sa + p * TC_TILE + a_warp + i * 16 * TC_LDS +
                                               (2 * kc + q) * 8);
#pragma unroll
                for (int j = 0; j < TC_NJ; ++j) {
                    const int jp = j / 2, h = (j & 1) * 2;
                    // a0b0 of the chunk, summed in the tensor core from zero...
                    const float zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                    float part[4];
                    tc_mma_bf16(part, af[0][0], bf[0][0][jp][h], bf[0][0][jp][h + 1], zero);
                    tc_mma_bf16(part, af[0][1], bf[0][1][jp][h], bf[0][1][jp][h + 1], part);
#pragma unroll
                    for (int r = 0; r < 4; ++r) acc[i][j][r] += part[r];  // FP32, to nearest
                    // ...and the five corrections into their own accumulators.
                    float(&c)[4] = corr[i][j];
#pragma unroll
                    for (int q = 0; q < 2; ++q) {
                        tc_mma_bf16(c, af[0][q], bf[1][q][jp][h], bf[1][q][jp][h + 1], c);
                        tc_mma_bf16(c, af[1][q], bf[0][q][jp][h], bf[0][q][jp][h + 1], c);
                        tc_mma_bf16(c, af[0][q], bf[2][q][jp][h], bf[2][q][jp][h + 1], c);
                        tc_mma_bf16(c, af[1][q], bf[1][q][jp][h], bf[1][q][jp][h + 1], c);
                        tc_mma_bf16(c, af[2][q], bf[0][q][jp][h], bf[0][q][jp][h + 1], c);
                    }
                }
            }
        }
    }
    asm volatile("cp.async.wait_group 0;\n" ::);

    // Fragment (i, j) holds rows g and g + 8, columns 2t and 2t + 1 of its 16 x 8 tile.
    const int g = lane >> 2, tq = lane & 3;
    const int k_end = min(K, (kt0 + kt_per_slice) * 2 * TC_BK);
    const size_t mn = (size_t)M * N;
    float* out = slices == 1 ? C + (size_t)mat * mn : W + ((size_t)mat * slices + slice) * mn;
#pragma unroll
    for (int i = 0; i < TC_MI; ++i)
#pragma unroll
        for (int j = 0; j < TC_NJ; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int m = m0 + wm * TC_WM + i * 16 + g + (r >> 1) * 8;
                const int n = n0 + wn * TC_WN + j * 8 + 2 * tq + (r & 1);
                if (m >= M || n >= N) continue;
                float v = acc[i][j][r];
                if (isfinite(v)) v += corr[i][j][r];
                if (simt) v = simt_dot(A, B, M, N, K, mat, m, n, kt0 * 2 * TC_BK, k_end);
                float* c = out + m + (size_t)n * M;
                if (slices == 1)
                    mm_store(c, v, alpha, beta);
                else
                    *c = v;  // mm_21_reduce applies alpha and beta
            }
    if (threadIdx.x == 0) acc_flags_finish(W, flag_offset);
}
