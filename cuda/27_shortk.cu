// Rung 27 (beyond the seeds), column-major: products with a short K (K <= 64 or
// so; up to 96 with M misaligned and no side skinny), where writing C is the work.
// Adds over rung 21 (register-blocked tiles with a K loop pipelined through
// registers and shared memory): with K short, each output takes 2K flops but
// 4 bytes of store, so the time is C's bytes over the memory's write
// bandwidth, and a tile's K-loop machinery (staging registers, prologue, the
// 8 x 8 outputs a thread stores as scattered float4s over 8 columns) is
// overhead. Here each block loads its BM rows of A and BN columns of B for a
// K chunk of up to 32 into shared memory once (no pipeline: with K <= 32
// there is one chunk), computes, and stores C so that a warp's lanes write
// whole columns: LM = BM / 4 lanes each own 4 consecutive rows (one float4)
// of TN columns, a store instruction writes BM x (32 / LM) floats of
// consecutive memory, full 128-byte lines. Blocks are small (256 threads,
// 64 to 128 columns, 24-32 KB of shared memory) and short-lived, so several
// share an SM and their stores overlap the next blocks' loads.
// - A's chunk is staged with float4 loads down each column (coalesced);
//   B's columns (K floats each, K short) are read column-fastest, so that
//   consecutive threads write distinct banks; every lane reads its A rows as
//   one float4 and its TN values of B as float4 broadcasts;
// - where M is not a multiple of 4 (columns not 16-byte aligned) each warp passes
//   its outputs through shared memory, a column at a time, so that consecutive
//   lanes store consecutive rows, 128 bytes a store instruction: the tiles' scalar
//   stores, 16 bytes apart across the lanes, were what left them 4x slower;
// - any K still works (the chunk loop), but rung 22 offers only short K here (up
//   to 8 with M a multiple of 4, where the tiles store as fast from K = 12 or so;
//   otherwise up to 96, or 64 where a side is at most 16, where the tiles' scalar
//   stores are slow) and its fitted model ranks it against the tiles.
// Measured on the H100 (suite timer, L2 warm, cuBLAS in the same run; row-major
// shapes as `mmsuite run` names them), us: 15443x1914x1 42.2 (cuBLAS 54.7, rung 22
// with tiles 242.5), 9384x483x1 8.7 (10.9, 47.5), 292x3021x2 3.7 (4.6, 9.6),
// 3001x2999x7 16.8 (19.9, 76.1), 988x3562x42 18.8 (16.0, 43.5), batch 46 x
// 920x2025x1 118.3 (158.9, 662.0); M a multiple of 4, 8192x8192x1 85.0 (105.0).
// Edges: predicated float4 or scalar loads with zero fill, predicated stores;
// any M, N, K >= 1 and any batch (blockIdx.z).
#include "common.cuh"
#include "vec4.cuh"

#ifndef BM
#define BM 128
#endif
#ifndef TN
#define TN 8
#endif
static_assert(BM == 32 || BM == 64 || BM == 128, "BM is 32, 64 or 128");
static_assert(TN == 4 || TN == 8 || TN == 16, "TN is 4, 8 or 16");

#define SK_THREADS 256
#define LM (BM / 4)            // lanes down a column of C, four rows each
#define CG (32 / LM)           // column groups of TN a warp covers
#define BN (8 * CG * TN)       // columns of C per block
#define KC 32                  // K staged per chunk

extern "C" __global__ void __launch_bounds__(SK_THREADS)
mm_27_shortk(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
             float* C) {
    __shared__ __align__(16) float As[KC][BM];
    __shared__ __align__(16) float Bs[KC][BN];
    MM_BATCH_OFFSET(M, N, K, A, B, C);
    const int i0 = blockIdx.x * BM, j0 = blockIdx.y * BN;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row = 4 * (lane % LM);               // the lane's first row in the block
    const int col = (warp * CG + lane / LM) * TN;  // the lane's first column in the block
    const bool vec_m = (M & 3) == 0;
    float acc[TN][4] = {};
    for (int k0 = 0; k0 < K; k0 += KC) {
        const int sub = min(KC, K - k0);
        if (k0) __syncthreads();  // the previous chunk is read
        for (int e = threadIdx.x; e < sub * LM; e += SK_THREADS) {
            const int kk = e / LM, r = 4 * (e % LM);
            *reinterpret_cast<float4*>(&As[kk][r]) =
                load4(A + (size_t)(k0 + kk) * M + i0 + r, M - i0 - r, vec_m);
        }
        for (int e = threadIdx.x; e < sub * BN; e += SK_THREADS) {
            const int c = e % BN, kk = e / BN;
            Bs[kk][c] = j0 + c < N ? B[(size_t)(j0 + c) * K + k0 + kk] : 0.0f;
        }
        __syncthreads();
#pragma unroll 4
        for (int kk = 0; kk < sub; ++kk) {
            const float4 a = *reinterpret_cast<const float4*>(&As[kk][row]);
            float b[TN];
#pragma unroll
            for (int q = 0; q < TN; q += 4) {
                const float4 v = *reinterpret_cast<const float4*>(&Bs[kk][col + q]);
                b[q] = v.x;
                b[q + 1] = v.y;
                b[q + 2] = v.z;
                b[q + 3] = v.w;
            }
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                acc[j][0] += a.x * b[j];
                acc[j][1] += a.y * b[j];
                acc[j][2] += a.z * b[j];
                acc[j][3] += a.w * b[j];
            }
        }
    }
    if (vec_m) {
        const int rows_left = M - i0 - row;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int c = j0 + col + j;
            if (c < N)
                store4(C + (size_t)c * M + i0 + row,
                       make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]), rows_left,
                       true, alpha, beta);
        }
        return;
    }
    // Columns not 16-byte aligned: each warp passes its outputs, a column of each group
    // at a time, through 128 words of shared memory, so that consecutive lanes store
    // consecutive rows (128 bytes a store instruction) rather than four scalars apart.
    __syncthreads();  // every warp is done with As: it becomes the warps' scratch
    float* scratch = &As[0][0] + warp * (CG * BM);
    const int group = lane / LM;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
        *reinterpret_cast<float4*>(scratch + group * BM + row) =
            make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
        __syncwarp();
#pragma unroll
        for (int x = 0; x < 4; ++x) {
            const int e = lane + 32 * x, r = i0 + e % BM;
            const int c = j0 + (warp * CG + e / BM) * TN + j;
            if (c < N && r < M) mm_store(C + (size_t)c * M + r, scratch[e], alpha, beta);
        }
        __syncwarp();
    }
}
