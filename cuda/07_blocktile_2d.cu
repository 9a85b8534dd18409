// Rung 7 (seed 004), column-major: 64x64x16 blocks, a 4x4 micro-tile per thread.
// Adds over rung 6: each of the 256 threads computes a 4x4 tile of C (rows
// 4 * (tid & 15) .., columns 4 * (tid >> 4) ..) from one float4 of the A tile
// and one float4 of the B tile per k: 16 FMAs for two shared loads instead of
// four FMAs for two. The block tile grows to 64x64 (K step 16 keeps the shared
// memory near rung 6's), so each loaded element feeds 64 FMAs in the block.
// The B tile is stored transposed, k-major with the columns contiguous
// (sb[k * 68 + j]), so a thread's four B values are one float4; its rows are
// padded to 68 words to spread the transposing stores over the banks.
// Edges: predicated float4 / scalar loads with zero fill, predicated stores.
#include "common.cuh"
#include "vec4.cuh"

#define BM 64
#define BN 64
#define BK 16
#define LDB (BN + 4)

extern "C" __global__ void __launch_bounds__(256)
mm_07_blocktile_2d(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                   float* C) {
    MM_BATCH_OFFSET(M, N, K, A, B, C);
    __shared__ __align__(16) float sa[BK * BM];   // sa[k * BM + i]
    __shared__ __align__(16) float sb[BK * LDB];  // sb[k * LDB + j]
    const int tid = threadIdx.x;
    const int i0 = blockIdx.x * BM, j0 = blockIdx.y * BN;
    const bool vec_m = (M & 3) == 0, vec_k = (K & 3) == 0;
    // Tile loads: A(i0 + la_i .. +3, k0 + la_k), B(k0 + lb_k .. +3, j0 + lb_j).
    const int la_i = (tid & 15) << 2, la_k = tid >> 4;
    const int lb_k = (tid & 3) << 2, lb_j = tid >> 2;
    const float* a = A + i0 + la_i + (size_t)la_k * M;
    const float* b = B + lb_k + (size_t)(j0 + lb_j) * K;
    const size_t a_step = (size_t)BK * M;
    const int a_left = M - i0 - la_i;
    const bool b_col = j0 + lb_j < N;
    // This thread's 4x4 outputs.
    const int tr = (tid & 15) << 2, tc = (tid >> 4) << 2;
    float acc[4][4] = {};
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
            const float4 av = *reinterpret_cast<const float4*>(sa + kk * BM + tr);
            const float4 bw = *reinterpret_cast<const float4*>(sb + kk * LDB + tc);
            const float ar[4] = {av.x, av.y, av.z, av.w};
            const float br[4] = {bw.x, bw.y, bw.z, bw.w};
            outer_fma(acc, ar, br);
        }
        __syncthreads();
    }
    const int i = i0 + tr;
#pragma unroll
    for (int y = 0; y < 4; ++y) {
        const int j = j0 + tc + y;
        if (j < N)
            store4(C + i + (size_t)j * M, make_float4(acc[0][y], acc[1][y], acc[2][y], acc[3][y]),
                   M - i, vec_m, alpha, beta);
    }
}
