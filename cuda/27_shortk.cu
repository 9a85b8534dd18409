// Rung 27 (beyond the seeds), column-major: products with a short K (K <= 64 or
// so; up to 96 with M misaligned and no side skinny), where writing C is the work.
// Adds over rung 21 (register-blocked tiles with a K loop pipelined through
// registers and shared memory): with K short, each output takes 2K flops but
// 4 bytes of store, so the time is C's bytes over the memory's write
// bandwidth, and a tile's K-loop machinery (staging registers, prologue, the
// 8 x 8 outputs a thread stores as scattered float4s over 8 columns) is
// overhead. Here each block loads its BM rows of A and BN columns of B for a
// K chunk of up to 32 into shared memory once (no pipeline), computes, and
// stores C so that a warp's lanes write whole columns: LM = BM / 4 lanes each
// own 4 consecutive rows (one float4) of TN columns, so a store instruction
// writes full 128-byte lines. Blocks are small (256 threads, 64 to 128 columns,
// 24-32 KB of shared memory) and short-lived, so several share an SM and their
// stores overlap the next blocks' loads.
// - A's chunk is staged with float4 loads down each column (coalesced); B's
//   columns are read column-fastest, so that consecutive threads write distinct
//   banks; every lane reads its A rows as one float4 and its TN values of B as
//   float4 broadcasts;
// - where M is not a multiple of 4 each warp passes its outputs through shared
//   memory, a column at a time, so that consecutive lanes store consecutive rows,
//   128 bytes a store instruction;
// - any K still works (the chunk loop); rung 22 offers it only on short K, and
//   its fitted model ranks it against the tiles.
// Whole columns (mm_27_shortk_cols, ROWS 8, 16 or 32): where M is a few dozen or
// less a BM-row block is mostly padding. Here a block owns ROWS rows of 256
// columns of C, one column a thread, its ROWS sums in registers; with M <= ROWS a
// block's part of C is one contiguous run, stored through shared memory with
// consecutive lanes on consecutive floats whatever M's alignment. Rung 22 offers
// it where M <= ROWS and K <= 64.
// Measured on the H100 (suite timer, L2 warm, cuBLAS in the same run; row-major
// shapes as `mmsuite run` names them), us: 15443x1914x1 42.2 (cuBLAS 54.7),
// 3001x2999x7 16.8 (19.9), 8192x8192x1 85.0 (105.0), batch 42 of 14726x31x8 60.4
// (46.6), batch 23 of 8994x15x6 11.3 (13.7); more in docs/kernel-log.md.
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

#ifndef ROWS
#define ROWS 32
#endif
static_assert(ROWS == 8 || ROWS == 16 || ROWS == 32, "ROWS is 8, 16 or 32");
#define CW SK_THREADS        // columns of C per whole-column block: one a thread
#define CW_PAD (CW + 1)      // B's chunk row stride: a warp's staging writes spread banks
#define C_RUN (ROWS * CW + ROWS * CW / 32)  // C's block with a word of padding every 32
#define STAGE (KC * CW_PAD > C_RUN ? KC * CW_PAD : C_RUN)

extern "C" __global__ void __launch_bounds__(SK_THREADS)
mm_27_shortk_cols(int M, int N, int K, float alpha, const float* A, const float* B,
                  float beta, float* C) {
    __shared__ __align__(16) float Ac[KC][ROWS];
    __shared__ float stage[STAGE];  // B's chunk, then C's block
    MM_BATCH_OFFSET(M, N, K, A, B, C);
    const int i0 = blockIdx.x * ROWS, j0 = blockIdx.y * CW;
    const int rows = min(ROWS, M - i0), cols = min(CW, N - j0);
    const int t = threadIdx.x;
    // The staging loops walk flat indices 256 apart: a thread's (column, row) pair moves
    // by a fixed step, so that no pass divides (a division per load was as many
    // instructions as the FMAs it fed).
    const int a_col = t / rows, a_row = t - a_col * rows;
    const int a_col_step = SK_THREADS / rows, a_row_step = SK_THREADS - a_col_step * rows;
    float acc[ROWS] = {};
    for (int k0 = 0; k0 < K; k0 += KC) {
        const int sub = min(KC, K - k0);
        if (k0) __syncthreads();  // the previous chunk is read
        // A's chunk: `sub` columns of `rows` floats (one run when rows == M).
        {
            int kk = a_col, r = a_row;
#pragma unroll 4
            for (int e = t; e < sub * rows; e += SK_THREADS) {
                Ac[kk][r] = A[(size_t)(k0 + kk) * M + i0 + r];
                kk += a_col_step;
                r += a_row_step;
                if (r >= rows) r -= rows, ++kk;
            }
        }
        // B's chunk: `cols` columns of `sub` floats (one run when sub == K).
        {
            const int c_step = SK_THREADS / sub, kk_step = SK_THREADS - c_step * sub;
            int c = t / sub, kk = t - c * sub;
#pragma unroll 8
            for (int e = t; e < sub * cols; e += SK_THREADS) {
                stage[kk * CW_PAD + c] = B[(size_t)(j0 + c) * K + k0 + kk];
                c += c_step;
                kk += kk_step;
                if (kk >= sub) kk -= sub, ++c;
            }
        }
        __syncthreads();
        if (t < cols) {
#pragma unroll 4
            for (int kk = 0; kk < sub; ++kk) {
                const float b = stage[kk * CW_PAD + t];
#pragma unroll
                for (int r = 0; r < ROWS; r += 4) {  // rows past `rows` are never stored
                    const float4 a = *reinterpret_cast<const float4*>(&Ac[kk][r]);
                    acc[r] += a.x * b;
                    acc[r + 1] += a.y * b;
                    acc[r + 2] += a.z * b;
                    acc[r + 3] += a.w * b;
                }
            }
        }
    }
    __syncthreads();  // every thread is done with B's chunk: the stage holds C's block now
    // A warp writes one row of 32 columns, `rows` words apart: distinct banks when `rows` is
    // odd; when it is even, a word of padding every 32 spreads them (2 lanes a bank at
    // most). The padding would put all 32 of M = 31 in one bank, so odd counts go without.
    const int pad_shift = (rows & 1) ? 31 : 5;  // word f is stored at f + (f >> pad_shift)
    if (t < cols) {
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            const int f = t * rows + r;
            if (r < rows) stage[f + (f >> pad_shift)] = acc[r];
        }
    }
    __syncthreads();
    const int total = rows * cols;
    if (rows == M) {  // one contiguous run of C
        float* out = C + (size_t)j0 * M;
#pragma unroll 4
        for (int e = t; e < total; e += SK_THREADS)
            mm_store(out + e, stage[e + (e >> pad_shift)], alpha, beta);
        return;
    }
    int c = a_col, r = a_row;  // the same walk as A's staging: 256 apart over rows x cols
#pragma unroll 4
    for (int e = t; e < total; e += SK_THREADS) {
        mm_store(C + (size_t)(j0 + c) * M + i0 + r, stage[e + (e >> pad_shift)], alpha, beta);
        c += a_col_step;
        r += a_row_step;
        if (r >= rows) r -= rows, ++c;
    }
}
