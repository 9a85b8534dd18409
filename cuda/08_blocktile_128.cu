// Rung 8 (seed 004), column-major: 128x128x8 blocks, an 8x8 micro-tile per thread.
// Adds over rung 7: each of the 256 threads computes 8x8 outputs (eight
// consecutive rows, eight consecutive columns) from two float4 of A and two of
// B per k: 64 FMAs for four shared loads, twice rung 7's ratio, and the block
// tile doubles to 128x128 so that every global element feeds 128 FMAs. K steps
// by 8 to keep the tiles at 4 KB each. 64 accumulators live in registers.
// The B tile is stored transposed (sb[k * 132 + j]); 132-word rows make the
// transposing stores of a warp land in 32 distinct banks.
#include "common.cuh"
#include "vec4.cuh"

#define BM 128
#define BN 128
#define BK 8
#define LDB (BN + 4)
#define TM 8
#define TN 8

extern "C" __global__ void __launch_bounds__(256)
mm_08_blocktile_128(int M, int N, int K, float alpha, const float* A, const float* B,
                    float beta, float* C) {
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
    // This thread's 8x8 outputs: rows tr .. tr + 7, columns tc .. tc + 7 of the block.
    const int tr = (tid & 15) * TM, tc = (tid >> 4) * TN;
    float acc[TM][TN] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        *reinterpret_cast<float4*>(sa + la_k * BM + la_i) =
            load4(a, k0 + la_k < K ? a_left : 0, vec_m);
        const float4 bv = load4(b, b_col ? K - k0 - lb_k : 0, vec_k);
        store4_strided(sb, lb_k, LDB, lb_j, bv);
        a += a_step;
        b += BK;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float ar[TM], br[TN];
            *reinterpret_cast<float4*>(ar) = *reinterpret_cast<const float4*>(sa + kk * BM + tr);
            *reinterpret_cast<float4*>(ar + 4) =
                *reinterpret_cast<const float4*>(sa + kk * BM + tr + 4);
            *reinterpret_cast<float4*>(br) = *reinterpret_cast<const float4*>(sb + kk * LDB + tc);
            *reinterpret_cast<float4*>(br + 4) =
                *reinterpret_cast<const float4*>(sb + kk * LDB + tc + 4);
            outer_fma(acc, ar, br);
        }
        __syncthreads();
    }
#pragma unroll
    for (int y = 0; y < TN; ++y) {
        const int j = j0 + tc + y;
        if (j >= N) continue;
#pragma unroll
        for (int x = 0; x < TM; x += 4) {
            const int i = i0 + tr + x;
            store4(C + i + (size_t)j * M,
                   make_float4(acc[x][y], acc[x + 1][y], acc[x + 2][y], acc[x + 3][y]), M - i,
                   vec_m, alpha, beta);
        }
    }
}
