// Rung 24 (beyond the seeds), column-major: products with at most 16 rows or
// columns (GEMV-like and very skinny), bound by device-memory bandwidth.
// Adds over rung 21 (register-blocked tiles of 32x32 and up): when min(M, N)
// <= 16 a tile of C is mostly empty and each loaded operand element feeds at
// most 16 FMAs, so the time is the big operand's bytes over the memory's
// bandwidth, not FMAs over lanes. These kernels stream the big operand once, in
// 16-byte loads with two rounds in flight, and keep the skinny operand in shared
// memory and the outputs in registers:
// - mm_24_gemv_n (N <= SKINNY): A (M x K) is big. A group of lanes reads
//   consecutive rows of one column of A (32 lanes: 128 rows; N_LANES 16 and 8:
//   64 and 32 rows, for an M too short to fill the SMs with 128-row blocks),
//   four columns a round; the K x N panel of B is staged by cp.async, four k of
//   a column to a 16-byte word, and read as a broadcast. The block's warps add
//   their sums in shared memory at the end;
// - mm_24_gemv_m (M <= SKINNY): B (K x N) is big. Eight lanes (four from SKINNY
//   8 up) read 128 (64) consecutive bytes of one column of B; the M x K panel of
//   A is staged in shared memory, padded every four columns so that a column's
//   lanes read distinct banks; from SKINNY 8 up each lane takes two columns, so
//   that every word of A feeds two FMAs. The lanes' sums meet by shuffles;
// - when the grid leaves the SMs short of loads in flight, K is split over
//   blocks (blockIdx.y) in slices of any multiple of 4, the slices added in a
//   fixed order by mm_24_reduce (cuda/slice_sum.cuh) or, with FUSED=1, by the
//   last block of each tile in the same launch (no second launch's gap).
// Why it is faster: every byte of the big operand is read once, in whole
// sectors, with enough loads on the way to reach the memory's rate. SKINNY (1,
// 2, 4, 8 or 16) sizes the registers and panels; the planner compiles the least
// one that holds the skinny side, on the N side also half of it run twice.
// Measured on the H100 (suite timer, row-major, cuBLAS in the same run), us:
// 1x8192x8192 92.1 (cuBLAS 92.4), 8x8192x8192 103.1 (131), 16x4096x4096 40.1
// (78.1), 4670x1x5511 44.1 (45.3), 8x3486x188 5.1 (5.4); the measurements behind
// each choice are in docs/kernel-log.md.
// Edges: predicated 16-byte or scalar loads with zero fill (M or K not a
// multiple of 4 take scalar loads; in mm_24_gemv_n a lane's four scalar rows are
// 32 apart, so that a warp's loads stay coalesced), any M, N, K >= 1 and any batch
// (blockIdx.z). Row-major problems reach these kernels with M and N swapped,
// so both skinny sides of either layout meet one of the two.
#include "async_copy.cuh"
#include "common.cuh"
#include "slice_sum.cuh"
#include "vec4.cuh"

#ifndef SKINNY
#define SKINNY 16
#endif
static_assert(SKINNY == 1 || SKINNY == 2 || SKINNY == 4 || SKINNY == 8 || SKINNY == 16,
              "SKINNY is 1, 2, 4, 8 or 16");

#ifndef FUSED
#define FUSED 0
#endif

// C = alpha * (the slices of a tile, splits of them added in order, as slice_sum adds them)
// + beta * C, by a tile's last block: the fused sum. The tile's outputs are numbered
// e = fast + FAST x slow, at row row0 + fast and column col0 + slow of the M x N output
// (N side: rows of the block's 128 outputs fast; M side: the SKINNY rows fast). A thread
// sums TAIL of its outputs at once, the slices the outer loop, so that the loads of TAIL
// outputs of TAIL_LOADS / TAIL slices are in flight together (one output at a time,
// gemv_n8f at 2125x7x246 in 4 slices waited 16 times for L2: 3.6 of its 10 us).
#define TAIL_OUTPUTS 4  // at most, a thread's outputs summed at once
#define TAIL_LOADS 8    // a thread's loads of slices in flight at once
template <int FAST, int OUTPUTS, int THREADS>
__device__ __forceinline__ void store_slice_sums(const float* slices, size_t plane, int splits,
                                                 int row0, int col0, int M, int N, float* C,
                                                 float alpha, float beta) {
    constexpr int PER = (OUTPUTS + THREADS - 1) / THREADS;
    constexpr int TAIL = PER < TAIL_OUTPUTS ? PER : TAIL_OUTPUTS;
    for (int e0 = threadIdx.x; e0 < OUTPUTS; e0 += TAIL * THREADS) {
        size_t at[TAIL];
        bool live[TAIL];
#pragma unroll
        for (int u = 0; u < TAIL; ++u) {
            const int e = e0 + u * THREADS, r = row0 + e % FAST, c = col0 + e / FAST;
            live[u] = e < OUTPUTS && r < M && c < N;
            at[u] = r + (size_t)c * M;
        }
        // SLICES slices' loads go out together and are added in order, so that the sum is
        // the one a slice at a time gives, without a wait for L2 per slice (not timed on
        // its own: it came with the N side's second round of loads).
        constexpr int SLICES = TAIL_LOADS / TAIL;
        float s[TAIL];
        for (int t0 = 0; t0 < splits; t0 += SLICES) {
            float v[SLICES][TAIL];
#pragma unroll
            for (int t = 0; t < SLICES; ++t)
#pragma unroll
                for (int u = 0; u < TAIL; ++u)
                    v[t][u] = live[u] && t0 + t < splits
                                  ? __ldcg(slices + (t0 + t) * plane + at[u]) : 0.0f;
#pragma unroll
            for (int t = 0; t < SLICES; ++t)
#pragma unroll
                for (int u = 0; u < TAIL; ++u)
                    if (t0 + t < splits) s[u] = t0 + t == 0 ? v[t][u] : s[u] + v[t][u];
        }
#pragma unroll
        for (int u = 0; u < TAIL; ++u)
            if (live[u]) mm_store(C + at[u], s[u], alpha, beta);
    }
}

#define PANEL_FLOATS 8192  // shared memory of either kernel: 32 KB

// ----------------------------------------------------------------- N skinny
#ifndef N_LANES
#define N_LANES 32  // lanes across one column of A: 32 read 512 bytes, 16 read 256, 8 read 128
#endif
// Warps along K; their sums meet in the panel, which holds four warps' sums of 128 rows x 16
// columns, or eight warps' of 32 or 64 rows.
#define N_WARPS (SKINNY == 16 && N_LANES == 32 ? 4 : 8)
#define N_THREADS (32 * N_WARPS)
static_assert(N_LANES == 32 || N_LANES == 16 || N_LANES == 8, "N_LANES is 8, 16 or 32");
#define N_GROUPS (32 / N_LANES)          // a warp's groups of lanes, each on columns of its own
#define N_ROWS (4 * N_LANES)             // rows of C per block: a group's lanes x 4
// Panel words per four rows of B (N_AT). A narrow block's four groups of lanes read rows of
// B four apart at once: padded by one 16-byte word, those reads fall on distinct banks.
#define N_KSTRIDE (4 * SKINNY + (N_GROUPS > 1 ? 4 : 0))
#define N_SUB_FIT ((PANEL_FLOATS / N_KSTRIDE * 4) & ~31)
#define N_SUB (N_SUB_FIT < 1024 ? N_SUB_FIT : 1024)  // B rows staged, a multiple of 32
#define N_UNROLL 4  // columns of A a warp loads a round
static_assert(N_WARPS * N_ROWS * SKINNY <= PANEL_FLOATS, "sums must fit the panel");

// B(k, j) of the panel: four consecutive k of a column in one 16-byte word, so that the
// staging copies whole 16-byte words of B's columns and a lane reads the four k of its
// round and one column in one load.
#define N_AT(k, j) (((k) >> 2) * N_KSTRIDE + (j) * 4 + ((k) & 3))
static_assert(N_SUB / 4 * N_KSTRIDE <= PANEL_FLOATS, "B's rows must fit the panel");

// A group's round of A: N_UNROLL consecutive columns kc + k .. of its lanes' rows (the
// lane's first row at `a`; k a multiple of 4); columns at or past `sub` are zeros and load
// nothing.
__device__ __forceinline__ void load_round_n(float4 (&v)[N_UNROLL], const float* a, int M,
                                             int kc, int k, int sub, int rows_left, bool vec_m) {
#pragma unroll
    for (int u = 0; u < N_UNROLL; ++u)
        v[u] = load4_rows<N_LANES, true>(a + (size_t)(kc + k + u) * M,
                                         k + u < sub ? rows_left : 0, vec_m);
}

// Stage B's columns [0, SKINNY) over K [kc, kc + sub) in the panel with cp.async, which
// copies without registers, so that every thread's copies are in flight at once (loaded
// into registers, a thread's 27 words of 16 columns of K 436 went out a few at a time:
// a third of the kernel). Columns at or past N and K at or past `sub` are zeros, to a whole 4 of K.
__device__ __forceinline__ void stage_b_async(float* panel, const float* B, int N, int K,
                                              int kc, int sub, bool vec_k) {
    const int words = ((sub + 3) >> 2) * SKINNY;  // 16-byte words: the column fastest
    for (int e = threadIdx.x; e < words; e += N_THREADS) {
        const int j = e % SKINNY, k = 4 * (e / SKINNY);
        const int left = j < N ? sub - k : 0;
        copy4(panel + N_AT(k, j), B + (size_t)j * K + kc + k, left, vec_k, B);
    }
    wait_all();
}

// C (or slice blockIdx.y of W) rows [N_ROWS bx, +N_ROWS) = A rows x B over K slice
// [kchunk y, +kchunk), for SKINNY columns of B and C per blockIdx.z (any N: wider
// problems read A once per SKINNY columns, which only rung 24 alone asks of it).
extern "C" __global__ void __launch_bounds__(N_THREADS)
mm_24_gemv_n(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
             float* C, float* W, int kchunk) {
    __shared__ __align__(16) float panel[PANEL_FLOATS];
    // blockIdx.z = matrix x groups + group: columns [SKINNY group, +SKINNY) of B and C.
    const int groups = (N + SKINNY - 1) / SKINNY, group = blockIdx.z % groups;
    const size_t mat = blockIdx.z / groups;
    const int splits = gridDim.y, slice = blockIdx.y;
    const int N_all = N;
    N = min(SKINNY, N - SKINNY * group);
    A += mat * (size_t)M * K;
    B += mat * (size_t)K * N_all + (size_t)SKINNY * group * K;
    C += mat * (size_t)M * N_all + (size_t)SKINNY * group * M;
    W += (size_t)SKINNY * group * M;
    const int warp = threadIdx.x >> 5, lane_group = (threadIdx.x & 31) / N_LANES,
              lane = threadIdx.x % N_LANES;
    // M a multiple of 4: a lane's rows are 4 lane .. +3 (one 16-byte load). Else its
    // rows are lane, + N_LANES, + 2 N_LANES, + 3 N_LANES, so that each scalar load of a
    // group reads consecutive floats rather than 16-byte words at a stride of 16.
    const bool vec_m = (M & 3) == 0;
    const int lane_row = vec_m ? 4 * lane : lane;
    // K of a warp's round of loads; its lane_group-th group takes the lane_group-th 4.
    constexpr int WARP_K = N_GROUPS * N_UNROLL;
    const bool vec_k = (K & 3) == 0;  // kc is always a multiple of 4 (gemv_kchunk)
    const int i = blockIdx.x * N_ROWS + lane_row;
    const int rows_left = M - i;
    const int kb = min(K, slice * kchunk), ke = min(K, kb + kchunk);
    float acc[4][SKINNY] = {};
    for (int kc = kb; kc < ke; kc += N_SUB) {
        const int sub = min(N_SUB, ke - kc);
        // The warp's first round of A needs no panel: in flight while the block stages B.
        float4 a[N_UNROLL];
        const int k0 = warp * WARP_K + lane_group * N_UNROLL;
        load_round_n(a, A + i, M, kc, k0, sub, rows_left, vec_m);
        __syncthreads();  // the previous panel is read
        stage_b_async(panel, B, N, K, kc, sub, vec_k);
        __syncthreads();
        for (int k = k0; k < sub; k += N_WARPS * WARP_K) {
            // The next round's loads go out before this round's FMAs wait for its own.
            float4 next[N_UNROLL];
            load_round_n(next, A + i, M, kc, k + N_WARPS * WARP_K, sub, rows_left, vec_m);
            // Columns past `sub` are zeros in both a and the panel (k + 3 < sub rounded up).
#pragma unroll
            for (int j = 0; j < SKINNY; ++j) {
                const float4 b = *reinterpret_cast<const float4*>(panel + N_AT(k, j));
                const float bk[N_UNROLL] = {b.x, b.y, b.z, b.w};
#pragma unroll
                for (int u = 0; u < N_UNROLL; ++u) {
                    acc[0][j] += a[u].x * bk[u];
                    acc[1][j] += a[u].y * bk[u];
                    acc[2][j] += a[u].z * bk[u];
                    acc[3][j] += a[u].w * bk[u];
                }
            }
#pragma unroll
            for (int u = 0; u < N_UNROLL; ++u) a[u] = next[u];
        }
    }
    // A warp's groups hold sums of the same rows over different columns: added by
    // shuffles, in a fixed order, into the first group's lanes.
#pragma unroll
    for (int step = N_LANES; step < 32; step *= 2)
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int j = 0; j < SKINNY; ++j)
                acc[r][j] += __shfl_xor_sync(0xffffffffu, acc[r][j], step);
    __syncthreads();  // the panel now holds each warp's sums: [warp][j][row]
    if (lane_group == 0) {
#pragma unroll
        for (int j = 0; j < SKINNY; ++j)
            store4_rows<N_LANES, true>(panel + (warp * SKINNY + j) * N_ROWS + lane_row,
                                       make_float4(acc[0][j], acc[1][j], acc[2][j], acc[3][j]),
                                       vec_m);
    }
    __syncthreads();
    float* out = splits == 1 ? C : W + (mat * splits + slice) * (size_t)M * N_all;
    const float alpha_c = alpha, beta_c = beta;  // C's, for a fused sum
    if (splits > 1) {  // raw sums: alpha and beta belong to the reduction
        alpha = 1.0f;
        beta = 0.0f;
    }
    for (int e = threadIdx.x; e < N_ROWS * SKINNY; e += N_THREADS) {
        const int row = e % N_ROWS, j = e / N_ROWS;
        const int r = blockIdx.x * N_ROWS + row;
        if (j >= N || r >= M) continue;
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < N_WARPS; ++w) s += panel[(w * SKINNY + j) * N_ROWS + row];
        mm_store(out + r + (size_t)j * M, s, alpha, beta);
    }
    if (!FUSED || splits == 1) return;
    const size_t batch = gridDim.z / groups;
    int* counters = reinterpret_cast<int*>(W - (size_t)SKINNY * group * M +
                                           batch * splits * (size_t)M * N_all);
    if (!last_slice(counters + blockIdx.z * gridDim.x + blockIdx.x, splits)) return;
    const float* slices = W + mat * splits * (size_t)M * N_all;
    store_slice_sums<N_ROWS, N_ROWS * SKINNY, N_THREADS>(
        slices, (size_t)M * N_all, splits, blockIdx.x * N_ROWS, 0, M, N, C, alpha_c, beta_c);
}

// ----------------------------------------------------------------- M skinny
#define M_THREADS 256
// Lanes per column of B: eight read 128 bytes per load; with 8 or 16 rows of A staged,
// four (64 bytes) give a block 64 columns, halving the A panel each block reads.
#define M_LANES (SKINNY >= 8 ? 4 : 8)
// Columns of B per lane: with 8 or 16 rows of A, two, so that each A word read from shared
// memory feeds two FMAs (one, and a 16-row block spent more time reading A than B).
#define M_CPL (SKINNY >= 8 ? 2 : 1)
#define M_GROUP (M_THREADS / M_LANES)      // a lane's columns are M_GROUP apart
#define M_COLS (M_CPL * M_GROUP)           // columns of C per block
#define M_STEP (4 * M_LANES)               // K per load of a column's lanes
#ifndef M_UNROLL
#define M_UNROLL (SKINNY >= 8 ? 2 : 4)     // a lane's 16-byte loads of a column per round
#endif
#define M_ROUND (M_UNROLL * M_STEP)        // K per round of a column's lanes
#define M_SUB (((PANEL_FLOATS / (SKINNY + 1)) / M_ROUND) * M_ROUND)
#define M_AT(k, r) ((k) * SKINNY + (r) + ((k) >> 2) * 4)  // A(r, kc + k) in the panel
static_assert(M_AT(M_SUB - 1, SKINNY - 1) < PANEL_FLOATS, "A panel must fit");

// A lane's round of B: M_UNROLL float4s of each of its columns, M_STEP apart from K
// offset k of the panel at kc; those at or past `sub` are zeros and load nothing.
__device__ __forceinline__ void load_round_m(float4 (&v)[M_UNROLL][M_CPL],
                                             const float* const (&b)[M_CPL],
                                             const bool (&inside)[M_CPL], int kc, int k, int sub,
                                             bool vec_k) {
#pragma unroll
    for (int u = 0; u < M_UNROLL; ++u) {
        const int kk = k + u * M_STEP;
#pragma unroll
        for (int c = 0; c < M_CPL; ++c)
            v[u][c] = load4(b[c] + kc + kk, inside[c] && kk < sub ? sub - kk : 0, vec_k);
    }
}

// C (or slice blockIdx.y of W) columns [M_COLS bx, +M_COLS) = A x B columns over K slice
// [kchunk y, +kchunk); M <= SKINNY, kchunk a multiple of 4.
extern "C" __global__ void __launch_bounds__(M_THREADS)
mm_24_gemv_m(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
             float* C, float* W, int kchunk) {
    __shared__ __align__(16) float panel[PANEL_FLOATS];
    const size_t mat = blockIdx.z;
    const int splits = gridDim.y, slice = blockIdx.y;
    A += mat * (size_t)M * K;
    B += mat * (size_t)K * N;
    const int q = threadIdx.x % M_LANES;
    const int j = blockIdx.x * M_COLS + threadIdx.x / M_LANES;  // the lane's first column
    const bool vec_k = (K & 3) == 0;
    bool inside[M_CPL];
    const float* b[M_CPL];
#pragma unroll
    for (int c = 0; c < M_CPL; ++c) {
        inside[c] = j + c * M_GROUP < N;
        b[c] = B + (size_t)(inside[c] ? j + c * M_GROUP : 0) * K;
    }
    const int kb = min(K, slice * kchunk), ke = min(K, kb + kchunk);
    float acc[M_CPL][SKINNY] = {};
    for (int kc = kb; kc < ke; kc += M_SUB) {
        const int sub = min(M_SUB, ke - kc);
        // The lane's first round of B needs no panel: in flight while the block stages A.
        float4 v[M_UNROLL][M_CPL];
        load_round_m(v, b, inside, kc, 4 * q, sub, vec_k);
        __syncthreads();  // the previous panel is read
        // Up to a whole float4 of B past `sub`: those columns of the panel hold zeros,
        // never stale words (0 x NaN would be NaN).
        for (int e = threadIdx.x; e < ((sub + 3) & ~3) * SKINNY; e += M_THREADS) {
            const int k = e / SKINNY, r = e % SKINNY;  // A(r, kc + k): consecutive in A
            panel[M_AT(k, r)] = r < M && k < sub ? A[(size_t)(kc + k) * M + r] : 0.0f;
        }
        __syncthreads();
        for (int k = 4 * q; k < sub; k += M_ROUND) {
            // The next round's loads go out before this round's FMAs wait for its own.
            float4 next[M_UNROLL][M_CPL];
            load_round_m(next, b, inside, kc, k + M_ROUND, sub, vec_k);
#pragma unroll
            for (int u = 0; u < M_UNROLL; ++u) {
                const int kk = k + u * M_STEP;
                if (kk >= sub) break;
#pragma unroll
                for (int t = 0; t < 4; ++t) {
                    const float* a = panel + M_AT(kk + t, 0);
#pragma unroll
                    for (int r = 0; r < SKINNY; ++r) {
                        const float ar = a[r];
#pragma unroll
                        for (int c = 0; c < M_CPL; ++c) {
                            const float bk = t == 0 ? v[u][c].x : t == 1 ? v[u][c].y
                                           : t == 2 ? v[u][c].z : v[u][c].w;
                            acc[c][r] += ar * bk;
                        }
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < M_UNROLL; ++u)
#pragma unroll
                for (int c = 0; c < M_CPL; ++c) v[u][c] = next[u][c];
        }
    }
#pragma unroll
    for (int c = 0; c < M_CPL; ++c)
#pragma unroll
        for (int r = 0; r < SKINNY; ++r)
#pragma unroll
            for (int o = M_LANES / 2; o > 0; o >>= 1)
                acc[c][r] += __shfl_xor_sync(0xffffffffu, acc[c][r], o);
#if !FUSED
    if (!inside[0]) return;
#endif
    float* out = splits == 1 ? C + mat * (size_t)M * N
                             : W + (mat * splits + slice) * (size_t)M * N;
    const float alpha_c = alpha, beta_c = beta;  // C's, for a fused sum
    if (splits > 1) {
        alpha = 1.0f;
        beta = 0.0f;
    }
#pragma unroll
    for (int c = 0; c < M_CPL; ++c)
#pragma unroll
        for (int r = 0; r < SKINNY; ++r)
            if (r % M_LANES == q && r < M && inside[c])
                mm_store(out + r + (size_t)(j + c * M_GROUP) * M, acc[c][r], alpha, beta);
    if (!FUSED || splits == 1) return;
    int* counters = reinterpret_cast<int*>(W + (size_t)gridDim.z * splits * M * N);
    if (!last_slice(counters + blockIdx.z * gridDim.x + blockIdx.x, splits)) return;
    const float* slices = W + mat * splits * (size_t)M * N;
    C += mat * (size_t)M * N;
    store_slice_sums<SKINNY, M_COLS * SKINNY, M_THREADS>(
        slices, (size_t)M * N, splits, 0, blockIdx.x * M_COLS, M, N, C, alpha_c, beta_c);
}

// C = alpha * (sum of the slices) + beta * C (cuda/slice_sum.cuh).
extern "C" __global__ void __launch_bounds__(256)
mm_24_reduce(int M, int N, int batch, float alpha, const float* W, float beta, float* C,
             int splits) {
    slice_sum(M, N, batch, alpha, W, beta, C, splits);
}
