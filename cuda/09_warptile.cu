// Rung 9 (seed 004), column-major: warp tiling.
// Adds over rung 8: the 128x128 block tile is split among its 8 warps as 2x4
// warp tiles of 64x32, and within a warp the 32 lanes form an 8x4 grid. Each
// thread still computes 8x8 outputs, but as 2x2 sub-tiles of 4x4 that are 32
// rows and 16 columns apart (rows lr*4 and 32 + lr*4 of its warp tile). For
// each k a warp then reads 8 consecutive float4 of the A tile and 4 of the B
// tile: every shared load is conflict-free (rung 8's eight-row strides put two
// threads of a quarter-warp in the same banks), and the warp's working set is
// a compact 64x32 patch that stays in the same shared-memory lines.
#include "common.cuh"
#include "vec4.cuh"

#define BM 128
#define BN 128
#define BK 8
#define LDB (BN + 4)
#define WM 64   // warp tile rows
#define WN 32   // warp tile columns

extern "C" __global__ void __launch_bounds__(256)
mm_09_warptile(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
               float* C) {
    MM_BATCH_OFFSET(M, N, K, A, B, C);
    __shared__ __align__(16) float sa[BK * BM];   // sa[k * BM + i]
    __shared__ __align__(16) float sb[BK * LDB];  // sb[k * LDB + j]
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
    // Warp tile (wr, wc) of 2x4, lane (lr, lc) of 8x4.
    const int warp = tid >> 5, lane = tid & 31;
    const int tr = (warp & 1) * WM + (lane & 7) * 4;   // rows tr..+3 and tr+32..+3
    const int tc = (warp >> 1) * WN + (lane >> 3) * 4; // columns tc..+3 and tc+16..+3
    float acc[8][8] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        const float4 av = load4(a, k0 + la_k < K ? a_left : 0, vec_m);
        const float4 bv = load4(b, b_col ? K - k0 - lb_k : 0, vec_k);
        *reinterpret_cast<float4*>(sa + la_k * BM + la_i) = av;
        store4_strided(sb, lb_k, LDB, lb_j, bv);
        a += a_step;
        b += BK;
        __syncthreads();
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
        __syncthreads();
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
