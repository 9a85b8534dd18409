// Rung 20 (beyond the seeds), column-major: rung 10 tuned for the H100.
// Adds over rung 10 (register prefetch, the fastest seed rung here):
// - K step 16 instead of 8: each thread stages two float4 of A and two of B per
//   tile, so the two barriers and the loop overhead are paid per 1024 FMAs per
//   thread instead of per 512;
// - warp tiles of 32x64 with the lanes laid out 4 (rows) x 8 (columns): per k
//   a warp reads 4 consecutive float4 of A and 8 of B (conflict-free, the rest
//   broadcast); the B tile keeps rung 8's 132-word pitch, which spreads its
//   transposing stores over the banks;
// - no cp.async: rung 19 shows that on this kernel the copy engine gains
//   nothing over register staging, and the staged registers come free here.
// Measured on the H100 at 4096^3: about 46 TFLOP/s against rung 10's 44.6
// and cuBLAS's 48-49 (FP32, no TF32).
// Edges as in the seed rungs: predicated float4 / scalar loads with zero fill,
// predicated float4 / scalar stores; any M, N, K >= 1 and any batch.
#include "common.cuh"
#include "vec4.cuh"

#ifndef BK
#define BK 16
#endif
#ifndef LR
#define LR 4  // lanes along the rows of a warp tile; 32 / LR along its columns
#endif
#define BM 128
#define BN 128
#define THREADS 256
#define LDB (BN + 4)            // sb[k * LDB + j]
#define WM (LR * 8)             // warp tile rows
#define WN ((32 / LR) * 8)      // warp tile columns
#define CHUNKS (BK / 8)         // float4 per operand per thread per tile
#define B_JSTEP (THREADS / (BK / 4))

extern "C" __global__ void __launch_bounds__(THREADS, 2)
mm_20_tuned(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
            float* C) {
    MM_BATCH_OFFSET(M, N, K, A, B, C);
    __shared__ __align__(16) float sa[BK * BM];   // sa[k * BM + i]
    __shared__ __align__(16) float sb[BK * LDB];  // sb[k * LDB + j]
    const int tid = threadIdx.x;
    const int i0 = blockIdx.x * BM, j0 = blockIdx.y * BN;
    const bool vec_m = (M & 3) == 0, vec_k = (K & 3) == 0;
    // Staging: A chunk r is A(i0 + la_i .. +3, k0 + la_k + 8r); B chunk r is
    // B(k0 + lb_k .. +3, j0 + lb_j + B_JSTEP r).
    const int la_i = (tid & 31) << 2, la_k = tid >> 5;
    const int lb_k = (tid & (BK / 4 - 1)) << 2, lb_j = tid / (BK / 4);
    const float* a = A + i0 + la_i + (size_t)la_k * M;
    const float* b = B + lb_k + (size_t)(j0 + lb_j) * K;
    const size_t a_step = (size_t)BK * M;
    const int a_left = M - i0 - la_i;
    // Outputs: rows tr + {0..3, WM/2 ..}, columns tc + {0..3, WN/2 ..}.
    const int warp = tid >> 5, lane = tid & 31;
    const int tr = (warp % (BM / WM)) * WM + (lane % LR) * 4;
    const int tc = (warp / (BM / WM)) * WN + (lane / LR) * 4;
    float acc[8][8] = {};
    float4 av[CHUNKS], bv[CHUNKS];
#pragma unroll
    for (int r = 0; r < CHUNKS; ++r) {
        av[r] = load4(a + (size_t)(8 * r) * M, la_k + 8 * r < K ? a_left : 0, vec_m);
        bv[r] = load4(b + (size_t)(B_JSTEP * r) * K, j0 + lb_j + B_JSTEP * r < N ? K - lb_k : 0,
                      vec_k);
    }
    for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
        for (int r = 0; r < CHUNKS; ++r) {
            *reinterpret_cast<float4*>(sa + (la_k + 8 * r) * BM + la_i) = av[r];
            store4_strided(sb, lb_k, LDB, lb_j + B_JSTEP * r, bv[r]);
        }
        __syncthreads();
        const int k1 = k0 + BK;
        if (k1 < K) {  // next tile into registers while the FMAs below run
            a += a_step;
            b += BK;
#pragma unroll
            for (int r = 0; r < CHUNKS; ++r) {
                av[r] = load4(a + (size_t)(8 * r) * M, k1 + la_k + 8 * r < K ? a_left : 0, vec_m);
                bv[r] = load4(b + (size_t)(B_JSTEP * r) * K,
                              j0 + lb_j + B_JSTEP * r < N ? K - k1 - lb_k : 0, vec_k);
            }
        }
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float ar[8], br[8];
            *reinterpret_cast<float4*>(ar) = *reinterpret_cast<const float4*>(sa + kk * BM + tr);
            *reinterpret_cast<float4*>(ar + 4) =
                *reinterpret_cast<const float4*>(sa + kk * BM + tr + WM / 2);
            *reinterpret_cast<float4*>(br) = *reinterpret_cast<const float4*>(sb + kk * LDB + tc);
            *reinterpret_cast<float4*>(br + 4) =
                *reinterpret_cast<const float4*>(sb + kk * LDB + tc + WN / 2);
            outer_fma(acc, ar, br);
        }
        __syncthreads();
    }
#pragma unroll
    for (int y = 0; y < 8; ++y) {
        const int j = j0 + tc + (y < 4 ? y : WN / 2 - 4 + y);
        if (j >= N) continue;
#pragma unroll
        for (int g = 0; g < 2; ++g) {
            const int i = i0 + tr + (WM / 2) * g;
            store4(C + i + (size_t)j * M,
                   make_float4(acc[4 * g][y], acc[4 * g + 1][y], acc[4 * g + 2][y],
                               acc[4 * g + 3][y]),
                   M - i, vec_m, alpha, beta);
        }
    }
}
