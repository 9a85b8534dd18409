// Rung 23 (beyond the seeds), column-major: stream-K (Osama et al., PPoPP'23),
// the "two-tile stream-K + data-parallel" hybrid, on rung 21's MAC loop.
// Adds over rung 21 (one block per tile, or per tile and K slice):
// - the work is counted in MAC-loop iterations (one BK step of one BM x BN
//   tile): tiles x ceil(K / BK) of them, tiles of every matrix of the batch in
//   one iteration space. When the tiles do not fill whole waves of the grid
//   g = SMs x resident blocks per SM, the first sk_tiles = g + (tiles mod g)
//   tiles are shared by g stream-K blocks, each taking an even share of their
//   iterations (shares differ by at most one), between one and two tiles'
//   worth; the other tiles (a multiple of g) are data-parallel blocks, one
//   tile each. So every wave is full: 4097^3 in 128x128 tiles is 1089 tiles,
//   4.1 waves of 264 for rung 21 with its last wave an eighth full; here 264
//   blocks share 297 tiles evenly and 792 tiles run in three full waves;
// - a block whose share starts or ends inside a tile writes that tile's raw
//   partial sums to its own two workspace slots (first tile, last tile); a
//   second kernel, mm_23_fixup, adds each split tile's partials in block
//   order (the same rounding on every run), applies alpha and beta once and
//   writes C. Tiles a block covers whole go straight to C as in rung 20. A
//   fix-up by the tile's owner waiting on a flag is only safe when every
//   contributor is resident at once, which a launch cannot guarantee (another
//   process, MPS, a smaller SM partition); a stream-ordered second kernel never
//   deadlocks, and costs one launch gap plus a pass over at most 2 g partial
//   tiles, which sit in L2. The grid g is computed from the variant's occupancy
//   (mmsuite/cuda_dispatch), so it only sets the balance, never correctness;
// - whole tiles of an M not a multiple of 4 go to C through shared memory in
//   the tiles of 128 rows or more, as rung 21's plain tiles do (its
//   store_tile_rows; STAGED_STORE below);
// - tile shape from -D defines exactly as rung 21 (BM, BN, BK, TM, TN, LR,
//   STAGES, MINB); mmsuite/cuda_dispatch picks the variant per problem.
// The MAC loop is rung 21's text (cuda/mac_staging.inc, mac_loop.inc) over a
// K range [kb, ke), written into the kernel's tile loop as rung 21 writes it
// into its kernel (through a device function, ptxas grouped the shared loads
// ahead of the FMAs and the largest tile ran 4% slower).
// Measured on the H100 (spin kernel ahead of each sample, L2 warm, cuBLAS in
// the same run), % of cuBLAS, rung 22 in brackets: 91.5% at 4097^3 (94, with
// its tuned entry: this rung's 128x64 tiles), 93% at 4096^3 (95.5), 94.5% at
// 8192^3 (96), 94% on batch 100 x 1000^3 (97.6), 86% on 8192x128x8192 (92);
// more, and what was tried, in docs/kernel-log.md.
// Rung 21's tile defines (BK 8 unless given), its MAC loop and its store of
// a thread's outputs (store_tile); its kernels come along unused.
#ifndef BK
#define BK 8
#endif
#include "21_splitk.cu"

// STAGED_STORE (set by the planner where M is not a multiple of 4, in the tiles of 128 rows
// or more): whole tiles go out through shared memory, rung 21's store_tile_rows. A define,
// not a branch on M: compiled into every build, the store cost the aligned 256x128 tile
// 1.5-2.7% (2560^3: 732 -> 752 us); in the smaller tiles the staging's registers cost
// blocks an SM (64x64x16 with 4 x 8 outputs: 95 registers -> 115, five blocks -> four),
// and with several blocks an SM their scalar stores overlap other blocks' FMAs.
#ifndef STAGED_STORE
#define STAGED_STORE 0
#endif
#define FIX_THREADS 128  // threads of a fix-up block: one float4 of a tile each
static_assert((BM * BN) % (4 * FIX_THREADS) == 0, "fix-up blocks must tile BM x BN");

// The work split, shared by both kernels (and mirrored by mmsuite/cuda_dispatch/families/streamk.py):
// stream-K block c of `ctas` owns iterations [sk_begin(c), sk_begin(c + 1)) of
// the first `total` = sk_tiles x ipt; the first `total mod ctas` get one more.
// Iterations are ints: the planner keeps tiles x ipt below 2^31.
__device__ __forceinline__ int sk_begin(int c, int total, int ctas) {
    const int base = total / ctas, extra = total % ctas;
    return c * base + min(c, extra);
}

// The stream-K block whose share holds iteration `it`.
__device__ __forceinline__ int sk_owner(int it, int total, int ctas) {
    const int base = total / ctas, extra = total % ctas;
    const int big = extra * (base + 1);  // iterations of the blocks with one more
    return it < big ? it / (base + 1) : extra + (it - big) / base;
}

// Blocks [0, sk_ctas) are stream-K blocks sharing the first sk_tiles tiles'
// iterations; block sk_ctas + d computes data-parallel tile sk_tiles + d whole.
// Tile t is matrix t / (tiles_m tiles_n), then rows first. W holds sk_ctas x 2
// partial tiles of BM x BN (column-major): slot 0 for the block's first tile,
// slot 1 for its last.
// This thread's index, read anew where it is used: a value the compiler may not
// hoist out of the loop over tiles, so nothing derived from it stays live across
// the MAC loop.

extern "C" __global__ void __launch_bounds__(THREADS, MINB)
mm_23_streamk(int M, int N, int K, float alpha, const float* A_all, const float* B_all,
              float beta, float* C, float* W, int sk_ctas, int sk_tiles) {
    // Only `it` stays in a register across tiles. The share's end, its first
    // tile and the tile counts wait in shared memory, and what derives from the
    // thread index is recomputed after the MAC loop: kept in registers across
    // it, they pushed the loop's state into local memory.
    __shared__ int share[4];  // end, first tile, iterations per tile, tiles_m
    int it;
    {
        int end;
        const int ipt = (K + BK - 1) / BK;
        if ((int)blockIdx.x < sk_ctas) {
            it = sk_begin(blockIdx.x, sk_tiles * ipt, sk_ctas);
            end = sk_begin(blockIdx.x + 1, sk_tiles * ipt, sk_ctas);
        } else {
            it = (sk_tiles + blockIdx.x - sk_ctas) * ipt;
            end = it + ipt;
        }
        if (threadIdx.x == 0) {
            share[0] = end;
            share[1] = it / ipt;
            share[2] = ipt;
            share[3] = (M + BM - 1) / BM;
        }
        if (it >= end) return;  // the same for every thread of the block
    }
    __syncthreads();

#if STAGED_STORE  // one array, as rung 21's: a whole tile goes out through all of it
    __shared__ __align__(16) float smem_static[STAGES * BK * (BM + LDB)];
    float* const sa_all = smem_static;
    float* const sb_all = smem_static + STAGES * BK * BM;
#else
    __shared__ __align__(16) float sa_all[STAGES * BK * BM];
    __shared__ __align__(16) float sb_all[STAGES * BK * LDB];
#endif
    for (;;) {
        float acc[TM][TN] = {};
        {
            const int ipt = share[2], tiles_m = share[3];
            const int tiles_mn = tiles_m * ((N + BN - 1) / BN);
            const int tid = thread_index();
            const int warp = tid >> 5, lane = tid & 31;
            const int tile = it / ipt, tile_begin = tile * ipt;
            const size_t mat = tile / tiles_mn;
            const int rest = tile % tiles_mn;
            const int kb = (it - tile_begin) * BK;
            const int ke = min(K, (min(share[0], tile_begin + ipt) - tile_begin) * BK);
            const float* A = A_all + mat * (size_t)M * K;
            const float* B = B_all + mat * (size_t)K * N;
            const int i0 = (rest % tiles_m) * BM, j0 = (rest / tiles_m) * BN;
            int left = ke - kb;
            const int tr = (warp % WARPS_M) * WM + (lane % LR) * 4;
            const int tc = (warp / WARPS_M) * WN + (lane / LR) * 4;
#include "mac_staging.inc"
#include "mac_loop.inc"
#if STAGES == 2
            __syncthreads();  // the next tile's first stores go to a buffer just read
#endif
        }
        const int ipt = share[2], tiles_m = share[3];
        const int tiles_mn = tiles_m * ((N + BN - 1) / BN);
        const int tid = thread_index();
        const int warp = tid >> 5, lane = tid & 31;
        const int tr = (warp % WARPS_M) * WM + (lane % LR) * 4;
        const int tc = (warp / WARPS_M) * WN + (lane / LR) * 4;
        const int tile = it / ipt, tile_begin = tile * ipt;
        const int stop = min(share[0], tile_begin + ipt);
        if (it == tile_begin && stop == tile_begin + ipt) {  // whole tile: C directly
            const int rest = tile % tiles_mn;
#if STAGED_STORE
            float* const c_mat = C + (size_t)(tile / tiles_mn) * M * N;
            const int r = (rest % tiles_m) * BM + tr, c = (rest / tiles_m) * BN + tc;
            // The planner's define says M is not a multiple of 4; the aligned store stays
            // for any M all the same (without it, ptxas spilled 256x128x16 LR 2: 132 bytes).
            if ((M & 3) == 0) {
                store_tile(c_mat, acc, M, N, r, c, true, alpha, beta);
            } else {
                __syncthreads();  // every warp is done reading the buffers
                store_tile_rows(c_mat, acc, M, N, r, c, smem_static, alpha, beta);
                __syncthreads();  // ... and with its part before the next tile's staging
            }
#else
            store_tile(C + (size_t)(tile / tiles_mn) * M * N, acc, M, N,
                       (rest % tiles_m) * BM + tr, (rest / tiles_m) * BN + tc, (M & 3) == 0,
                       alpha, beta);
#endif
        } else {  // part of a split tile: raw partial sums, the whole BM x BN block
            float* out = W + ((size_t)blockIdx.x * 2 + (tile == share[1] ? 0 : 1)) * (BM * BN);
#pragma unroll
            for (int y = 0; y < TN; ++y) {
                const int j = tc + 4 * (32 / LR) * (y / 4) + y % 4;
#pragma unroll
                for (int g = 0; g < TM / 4; ++g)
                    *reinterpret_cast<float4*>(out + tr + 4 * LR * g + j * BM) =
                        make_float4(acc[4 * g][y], acc[4 * g + 1][y], acc[4 * g + 2][y],
                                    acc[4 * g + 3][y]);
            }
        }
        if (stop == share[0]) return;
        it = stop;
    }
}

// C = alpha * (sum of a split tile's partials, in block order) + beta * C.
// Block (t, q) sums the q-th run of 4 x FIX_THREADS elements of stream-K tile
// t; a tile one block computed whole was written to C by that block already.
extern "C" __global__ void __launch_bounds__(FIX_THREADS)
mm_23_fixup(int M, int N, int K, float alpha, const float* W, float beta, float* C,
            int sk_ctas, int sk_tiles) {
    const int ipt = (K + BK - 1) / BK;
    const int total = (int)sk_tiles * ipt;
    const int tile = blockIdx.x, tile_begin = tile * ipt;
    const int lo = sk_owner(tile_begin, total, sk_ctas);
    const int hi = sk_owner(tile_begin + ipt - 1, total, sk_ctas);
    if (lo == hi) return;
    const int e = (blockIdx.y * FIX_THREADS + threadIdx.x) * 4;  // element of the BM x BN tile
    const int tiles_m = (M + BM - 1) / BM, tiles_mn = tiles_m * ((N + BN - 1) / BN);
    const size_t mat = tile / tiles_mn;
    const int rest = tile % tiles_mn;
    const int i = (rest % tiles_m) * BM + e % BM, j = (rest / tiles_m) * BN + e / BM;
    if (i >= M || j >= N) return;
    float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int c = lo; c <= hi; ++c) {
        const int slot = sk_begin(c, total, sk_ctas) / ipt == tile ? 0 : 1;
        const float4 v =
            *reinterpret_cast<const float4*>(W + ((size_t)c * 2 + slot) * (BM * BN) + e);
        s.x += v.x;
        s.y += v.y;
        s.z += v.z;
        s.w += v.w;
    }
    store4(C + mat * (size_t)M * N + i + (size_t)j * M, s, M - i, (M & 3) == 0, alpha, beta);
}
