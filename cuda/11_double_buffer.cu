// Rung 11 (seed 004), column-major: double-buffered shared memory.
// Adds over rung 10: two shared buffers per operand. While the block computes
// on one buffer, the prefetched registers of the next tile are written into
// the other, so the barrier that protected the single buffer before the
// stores (rung 10's second __syncthreads) is gone: one barrier per k-step,
// and warps that finish their FMAs early go on storing instead of waiting.
// The k loop is unrolled by two so that both buffers are compile-time
// addresses (indexing them with a run-time 0/1 measured 5% slower).
// On the H100 at 4096^3 this rung measured about 43 TFLOP/s, slightly below
// rung 10 (44.6): with two blocks of 256 threads per SM the barrier was not
// the limit there, and the stores now wait on the prefetch right after the
// FMAs instead of one barrier later.
#include "common.cuh"
#include "vec4.cuh"

#define BM 128
#define BN 128
#define BK 8
#define LDB (BN + 4)
#define WM 64
#define WN 32

extern "C" __global__ void __launch_bounds__(256, 2)
mm_11_double_buffer(int M, int N, int K, float alpha, const float* A, const float* B,
                    float beta, float* C) {
    MM_BATCH_OFFSET(M, N, K, A, B, C);
    __shared__ __align__(16) float sa0[BK * BM], sa1[BK * BM];    // sa[k * BM + i]
    __shared__ __align__(16) float sb0[BK * LDB], sb1[BK * LDB];  // sb[k * LDB + j]
    const int tid = threadIdx.x;
    const int i0 = blockIdx.x * BM, j0 = blockIdx.y * BN;
    const bool vec_m = (M & 3) == 0, vec_k = (K & 3) == 0;
    // Tile loads: A(i0 + la_i .. +3, k0 + la_k), B(k0 + lb_k .. +3, j0 + lb_j).
    const int la_i = (tid & 31) << 2, la_k = tid >> 5;
    const int lb_k = (tid & 1) << 2, lb_j = tid >> 1;
    const float* a = A + i0 + la_i + (size_t)la_k * M;
    const float* b = B + lb_k + (size_t)(j0 + lb_j) * K;
    const size_t a_step = (size_t)BK * M;
    const int a_left = M - i0 - la_i;
    const bool b_col = j0 + lb_j < N;
    const int warp = tid >> 5, lane = tid & 31;
    const int tr = (warp & 1) * WM + (lane & 7) * 4;
    const int tc = (warp >> 1) * WN + (lane >> 3) * 4;
    float acc[8][8] = {};
    {
        const float4 av = load4(a, la_k < K ? a_left : 0, vec_m);
        const float4 bv = load4(b, b_col ? K - lb_k : 0, vec_k);
        *reinterpret_cast<float4*>(sa0 + la_k * BM + la_i) = av;
        sb0[(lb_k + 0) * LDB + lb_j] = bv.x;
        sb0[(lb_k + 1) * LDB + lb_j] = bv.y;
        sb0[(lb_k + 2) * LDB + lb_j] = bv.z;
        sb0[(lb_k + 3) * LDB + lb_j] = bv.w;
    }
    __syncthreads();
    // One k-step: prefetch tile t+1 into registers, FMAs on (sa, sb), store the
    // prefetch into (san, sbn), one barrier.
    auto step = [&](int k0, const float* sa, const float* sb, float* san, float* sbn) {
        const int k1 = k0 + BK;
        const bool more = k1 < K;
        float4 av, bv;
        if (more) {
            a += a_step;
            b += BK;
            av = load4(a, k1 + la_k < K ? a_left : 0, vec_m);
            bv = load4(b, b_col ? K - k1 - lb_k : 0, vec_k);
        }
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float ar[8], br[8];
            *reinterpret_cast<float4*>(ar) = *reinterpret_cast<const float4*>(sa + kk * BM + tr);
            *reinterpret_cast<float4*>(ar + 4) =
                *reinterpret_cast<const float4*>(sa + kk * BM + tr + 32);
            *reinterpret_cast<float4*>(br) = *reinterpret_cast<const float4*>(sb + kk * LDB + tc);
            *reinterpret_cast<float4*>(br + 4) =
                *reinterpret_cast<const float4*>(sb + kk * LDB + tc + 16);
            outer_fma(acc, ar, br);
        }
        if (more) {
            *reinterpret_cast<float4*>(san + la_k * BM + la_i) = av;
            sbn[(lb_k + 0) * LDB + lb_j] = bv.x;
            sbn[(lb_k + 1) * LDB + lb_j] = bv.y;
            sbn[(lb_k + 2) * LDB + lb_j] = bv.z;
            sbn[(lb_k + 3) * LDB + lb_j] = bv.w;
        }
        __syncthreads();
    };
    for (int k0 = 0; k0 < K; k0 += 2 * BK) {
        step(k0, sa0, sb0, sa1, sb1);
        if (k0 + BK >= K) break;
        step(k0 + BK, sa1, sb1, sa0, sb0);
    }
    // Columns tc + {0..3, 16..19}, rows tr + {0..3} and tr + 32 + {0..3}.
#pragma unroll
    for (int y = 0; y < 8; ++y) {
        const int j = j0 + tc + (y < 4 ? y : 12 + y);
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
