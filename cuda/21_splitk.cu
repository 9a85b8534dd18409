// Rung 21 (beyond the seeds), column-major: rung 20 with split-K and its tile
// shape as compile-time parameters.
// Adds over rung 20 (128x128 tiles, one block per tile of C):
// - split-K: blockIdx.z = matrix * splits + slice, and slice s sums only its
//   own run of K tiles. Problems with few tiles of C (512^3 has 16 of 128x128,
//   a 128x128 output with K = 65536 has one) then still put a block on every
//   SM, where rung 20 leaves most of the 132 SMs idle;
// - the partial sums go to a workspace (splits x M x N per matrix) and a
//   second kernel, mm_21_reduce, adds the slices in a fixed order and applies
//   alpha and beta once. Atomics into C would save that pass but make the sum
//   order, hence the result's rounding, vary from run to run, and beta * C
//   would need its own pass before them anyway; the workspace is deterministic
//   and reads C exactly once (never when beta == 0). With one slice the main
//   kernel writes C itself, as rung 20 does;
// - FUSED=1 (small tiles, rung 22's variants *_f): no second launch. Each block
//   writes its slice's partial tile, packed (BM x BN, unpredicated), after the
//   batch's slices; the last block of a tile to finish (cuda/slice_sum.cuh's
//   last_slice) adds the slices in order and stores C. Skinny products with a
//   long K want many short slices, where the reduction's launch is a large
//   share of the time. On large tiles the one block that adds a tile is a
//   serial tail, so only small tiles are compiled so;
// - M not a multiple of 4 (scalar loads of A, scalar stores of C): the tile's
//   outputs go out through shared memory (store_tile_rows), consecutive lanes
//   on consecutive rows, where four rows a lane wrote a quarter of every sector
//   a store touched; tiles of 128 rows or more stage A in rows a quarter tile
//   apart (cuda/mac_staging.inc);
// - the tile shape comes from -D defines (BM x BN x BK, TM x TN outputs per
//   thread, LR lanes along a warp tile's rows, STAGES shared buffers, MINB
//   blocks per SM, SMEM_DYNAMIC for buffers over the 48 KB a kernel may
//   declare statically), so 32x32 ... 256x128 are one source compiled several
//   times, not copied files. Plain extern "C" entries: every variant is its
//   own module, so NVRTC's cache key covers it and nothing recompiles per
//   process. Rung 21 itself uses 128x128 with BK 8, and mmsuite/cuda_dispatch
//   picks its split factor per problem; rung 22 picks the tile shape too.
// Each block is rung 20's loop: float4 staging in registers of the next K
// tile while the FMAs of the current one run, A stored k-major and B
// transposed (row pitch BN + 4) in shared memory, warp tiles of
// (LR x TM) x (32 / LR x TN) with each thread's TM x TN outputs in groups of
// four rows and columns, 4 x LR and 4 x (32 / LR) apart.
// The K loop is text (cuda/mac_staging.inc, mac_loop.inc) that rung 23
// includes too, and the store of a thread's outputs (store_tile) a function
// that it calls.
// Measured on the H100 (spin kernel ahead of each sample, L2 warm), % of
// cuBLAS: 93% at 512^3 (rung 20: 29%), 98% at 1024^3 (54%), 92% at 2048^3
// to 8192^3, 90% on 8192x128x8192 (43%), 79% on 128x128x65536 (1%) with 128
// slices; the measurements behind FUSED and the staged stores are in
// docs/kernel-log.md.
// Edges as in rung 20: predicated float4 / scalar loads with zero fill against
// the end of the block's K slice, predicated stores; any M, N, K >= 1, any batch.
#include "common.cuh"
#include "slice_sum.cuh"
#include "vec4.cuh"

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 16
#endif
#ifndef TM
#define TM 8  // outputs per thread along the rows: 4 or 8
#endif
#ifndef TN
#define TN 8  // outputs per thread along the columns: 4 or 8
#endif
#ifndef FUSED
#define FUSED 0  // 1: the last block of a tile adds the slices (no mm_21_reduce)
#endif
#ifndef STAGES
#define STAGES 1  // shared-memory buffers: 2 drops the barrier after the FMAs
#endif
#ifndef LR
#define LR 4  // lanes along the rows of a warp tile; 32 / LR along its columns
#endif
#define WM (LR * TM)             // warp tile rows
#define WN ((32 / LR) * TN)      // warp tile columns
#define WARPS_M (BM / WM)
#define THREADS (32 * WARPS_M * (BN / WN))
#if !defined(MINB) || MINB == 0  // default: 16 warps per SM at <= 128 registers
#undef MINB
#define MINB ((512 / THREADS) > 0 ? (512 / THREADS) : 1)
#endif
#define LDB (BN + 4)             // sb[k * LDB + j]
#define SPREAD_A (BM >= 128)     // see cuda/mac_staging.inc
// One pass of the block stages A_KSTEP rows of the A tile and B_JSTEP columns
// of the B tile; a pass larger than the tile (512 threads, BK 8) leaves the
// surplus threads out of the staging.
#define A_KSTEP (THREADS / (BM / 4))
#define A_CHUNKS (A_KSTEP < BK ? BK / A_KSTEP : 1)
#define B_JSTEP (THREADS / (BK / 4))
#define B_CHUNKS (B_JSTEP < BN ? BN / B_JSTEP : 1)

static_assert(BM % WM == 0 && BN % WN == 0, "tile must hold whole warp tiles");
static_assert((TM == 4 || TM == 8) && (TN == 4 || TN == 8), "TM and TN are 4 or 8");
static_assert(THREADS % (BM / 4) == 0 && (BK % A_KSTEP == 0 || A_KSTEP % BK == 0),
              "A staging must tile BM x BK");
static_assert(THREADS % (BK / 4) == 0 && (BN % B_JSTEP == 0 || B_JSTEP % BN == 0),
              "B staging must tile BK x BN");
static_assert(THREADS <= 1024, "too many threads");
static_assert(STAGES == 1 || STAGES == 2, "STAGES is 1 or 2");

// out(r + 4 LR g + {0..3}, c + 4 (32 / LR) h + {0..3}) = alpha * acc + beta * out
// for the thread's outputs of an M x N column-major matrix, predicated at its edges.
__device__ __forceinline__ void store_tile(float* out, const float (&acc)[TM][TN], int M, int N,
                                           int r, int c, bool vec_m, float alpha, float beta) {
#pragma unroll
    for (int y = 0; y < TN; ++y) {
        const int j = c + 4 * (32 / LR) * (y / 4) + y % 4;
        if (j >= N) continue;
#pragma unroll
        for (int g = 0; g < TM / 4; ++g) {
            const int i = r + 4 * LR * g;
            store4(out + i + (size_t)j * M,
                   make_float4(acc[4 * g][y], acc[4 * g + 1][y], acc[4 * g + 2][y],
                               acc[4 * g + 3][y]),
                   M - i, vec_m, alpha, beta);
        }
    }
}

// With M not a multiple of 4, store_tile's stores are scalar, and a warp's store put its
// lanes 16 bytes apart (four rows a lane): each one wrote a quarter of every sector it
// touched, and with K short C's stores are most of the time. store_tile_rows moves the tile
// through shared memory instead, one column of each thread's outputs at a time: each warp
// writes its WM x (32 / LR) outputs, then stores them with consecutive lanes on consecutive
// rows. In the warp's part, column q's rows 4 b + s lie at q EPI_P + s EPI_R4 + b: the
// lanes' writes (one s and g at a time) and reads (32 rows) fall on distinct banks, and the
// writes stay scalar (float4 writes of the accumulators bound their registers in quads, and
// the 256x64 tiles spilled). Warps take turns (EPI_ROUNDS) where the block's buffers hold too
// few warps' parts.
#define EPI_R4 (WM / 4 + ((8 - WM / 4) % 32 + 32) % 32)          // = 8 (mod 32)
#define EPI_P (4 * EPI_R4 + ((LR - 4 * EPI_R4) % 32 + 32) % 32)  // = LR (mod 32)
#define EPI_WARP (EPI_P * (32 / LR))                             // floats of a warp's part
#define EPI_FLOATS (STAGES * BK * (BM + LDB))                    // the block's buffers
#define EPI_WARPS (THREADS / 32)
#define EPI_SLOTS (EPI_FLOATS / EPI_WARP)  // warps' parts the buffers hold at once
#define EPI_ROUNDS ((EPI_WARPS + EPI_SLOTS - 1) / EPI_SLOTS)
static_assert(EPI_SLOTS >= 1, "a warp's part must fit the shared buffers");

// threadIdx.x read anew: what derives from it here is not kept in registers across the
// MAC loop (as the loop's own tr and tc are), which spilled the 256x64 tiles.
__device__ __forceinline__ int thread_index() {
    int tid;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
    return tid;
}

// store_tile (the same arguments) through `smem`, which every warp is done with.
__device__ __forceinline__ void store_tile_rows(float* out, const float (&acc)[TM][TN], int M,
                                                int N, int r, int c, float* smem,
                                                float alpha, float beta) {
    const int tid = thread_index(), warp = tid >> 5, lane = tid & 31;
    // The warp tile's first row and column (r and c less the lane's offsets in it).
    const int wr = r - (lane % LR) * 4, wc = c - (lane / LR) * 4;
    float* const part = smem + (warp / EPI_ROUNDS) * EPI_WARP;
    float* const mine = part + (lane / LR) * EPI_P + lane % LR;  // row 4 (lane % LR)
#pragma unroll
    for (int y = 0; y < TN; ++y) {
        // Column q of the warp's part is column wc + 4 q + col0 of the tile.
        const int col0 = 4 * (32 / LR) * (y / 4) + y % 4;
#pragma unroll
        for (int round = 0; round < EPI_ROUNDS; ++round) {
            if (warp % EPI_ROUNDS == round) {
#pragma unroll
                for (int g = 0; g < TM / 4; ++g)
#pragma unroll
                    for (int s = 0; s < 4; ++s) mine[s * EPI_R4 + LR * g] = acc[4 * g + s][y];
                __syncwarp();
#pragma unroll
                for (int t = 0; t < TM; ++t) {
                    const int e = lane + 32 * t, row = e % WM, q = e / WM;
                    const int i = wr + row, j = wc + 4 * q + col0;
                    if (i < M && j < N)
                        mm_store(out + i + (size_t)j * M,
                                 part[q * EPI_P + row % 4 * EPI_R4 + row / 4], alpha, beta);
                }
                __syncwarp();
            }
            if (EPI_ROUNDS > 1) __syncthreads();
        }
    }
}

// C (SPLITS == 1) or workspace slice (SPLITS > 1) of matrix blockIdx.z / SPLITS
// gets the block's tile; W holds batch * SPLITS * M * N floats (unused when 1).
// FUSED: W holds batch * SPLITS packed tiles per tile of C, then one arrival
// counter per tile of C (zero before the first launch, left zero by each).
extern "C" __global__ void __launch_bounds__(THREADS, MINB)
mm_21_splitk(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
             float* C, float* W, int splits) {
    const int slice = blockIdx.z % splits;
    const size_t mat = blockIdx.z / splits;
    A += mat * (size_t)M * K;
    B += mat * (size_t)K * N;
    // Where the tile goes, fixed before the loop as one pointer (C is matrix
    // `mat` of C when splits == 1): written after the loop, or as a select, it
    // cost rung 20's 128 registers a spill.
    float* out = (splits == 1 ? C : W) + (mat * splits + slice) * (size_t)M * N;
    // This slice's K range: whole BK tiles, the last slice takes what is left.
    // The loop counts the K left in the slice down (one register, as rung 20's k0).
    const int k_tiles = (K + BK - 1) / BK;
    const int per = (k_tiles + splits - 1) / splits;
    const int kb = min(K, slice * per * BK);
    int left = min(K, kb + per * BK) - kb;

#if SMEM_DYNAMIC  // buffers over 48 KB: the launch passes their size
    extern __shared__ __align__(16) float smem_dynamic[];
    float* const sa_all = smem_dynamic;                     // sa[k * BM + i] per stage
    float* const sb_all = smem_dynamic + STAGES * BK * BM;  // sb[k * LDB + j] per stage
#else  // one array: store_tile_rows reuses all of it
    __shared__ __align__(16) float smem_static[STAGES * BK * (BM + LDB)];
    float* const sa_all = smem_static;                     // sa[k * BM + i] per stage
    float* const sb_all = smem_static + STAGES * BK * BM;  // sb[k * LDB + j] per stage
#endif
    const int tid = threadIdx.x;
    const int i0 = blockIdx.x * BM, j0 = blockIdx.y * BN;
#include "mac_staging.inc"
    // Outputs: rows tr + 4 LR g + {0..3}, columns tc + 4 (32 / LR) h + {0..3}.
    const int warp = tid >> 5, lane = tid & 31;
    const int tr = (warp % WARPS_M) * WM + (lane % LR) * 4;
    const int tc = (warp / WARPS_M) * WN + (lane / LR) * 4;
    float acc[TM][TN] = {};
#include "mac_loop.inc"
#if FUSED
    if (splits > 1) {
        // The slice's tile, packed, then the last of the tile's blocks sums them in order.
        const size_t tiles = (size_t)gridDim.x * gridDim.y, tile = blockIdx.y * gridDim.x
                                                                 + blockIdx.x;
        float* const first = W + (mat * splits * tiles + tile) * (BM * BN);
        const size_t pitch = tiles * (BM * BN);  // from one slice's tile to the next's
        store_tile(first + slice * pitch, acc, BM, BN, tr, tc, true, 1.0f, 0.0f);
        int* const counters = reinterpret_cast<int*>(W + gridDim.z * pitch);
        if (!last_slice(counters + mat * tiles + tile, splits)) return;
        // Each thread adds the slices of its QUADS float4s of the tile, SLICES slices' loads
        // of all of them in flight ahead of their adds (which stay in slice order).
        constexpr int QUADS = BM * BN / 4 / THREADS;
        constexpr int SLICES = QUADS >= 2 * SUM_LOADS ? 1 : 2 * SUM_LOADS / QUADS;
        static_assert(QUADS * THREADS * 4 == BM * BN, "a fused tile's quads per thread");
        const float* const mine = first + 4 * tid;
        float4 s[QUADS];
#pragma unroll
        for (int u = 0; u < QUADS; ++u)
            s[u] = __ldcg(reinterpret_cast<const float4*>(mine + 4 * u * THREADS));
        int t = 1;
        for (; t + SLICES <= splits; t += SLICES) {
            float4 v[SLICES][QUADS];
#pragma unroll
            for (int q = 0; q < SLICES; ++q)
#pragma unroll
                for (int u = 0; u < QUADS; ++u)
                    v[q][u] = __ldcg(reinterpret_cast<const float4*>(
                        mine + (t + q) * pitch + 4 * u * THREADS));
#pragma unroll
            for (int q = 0; q < SLICES; ++q)
#pragma unroll
                for (int u = 0; u < QUADS; ++u) add4(s[u], v[q][u]);
        }
        for (; t < splits; ++t) {
#pragma unroll
            for (int u = 0; u < QUADS; ++u)
                add4(s[u], __ldcg(reinterpret_cast<const float4*>(mine + t * pitch
                                                                  + 4 * u * THREADS)));
        }
        float* const c_mat = C + mat * (size_t)M * N;
#pragma unroll
        for (int u = 0; u < QUADS; ++u) {
            const int e = 4 * (tid + u * THREADS), i = i0 + e % BM, j = j0 + e / BM;
            if (i < M && j < N)
                store4(c_mat + i + (size_t)j * M, s[u], M - i, vec_m, alpha, beta);
        }
        return;
    }
#endif
    // Raw partial sums into the workspace: alpha and beta belong to the reduction.
    if (splits > 1) {
        alpha = 1.0f;
        beta = 0.0f;
    }
#if FUSED  // split 1 is never launched fused; the plain store keeps its registers unspilled
    store_tile(out, acc, M, N, i0 + tr, j0 + tc, vec_m, alpha, beta);
#else
    if (vec_m) {
        store_tile(out, acc, M, N, i0 + tr, j0 + tc, true, alpha, beta);
    } else {
        __syncthreads();  // every warp is done reading the buffers
        store_tile_rows(out, acc, M, N, i0 + tr, j0 + tc, sa_all, alpha, beta);
    }
#endif
}

// C = alpha * (W[0] + ... + W[splits - 1]) + beta * C for every matrix of the
// batch, slices added in order (cuda/slice_sum.cuh).
extern "C" __global__ void __launch_bounds__(256)
mm_21_reduce(int M, int N, int batch, float alpha, const float* W, float beta, float* C,
             int splits) {
    slice_sum(M, N, batch, alpha, W, beta, C, splits);
}
