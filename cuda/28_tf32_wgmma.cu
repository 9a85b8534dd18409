// Rung 28 (beyond the seeds), column-major: TF32 on Hopper's warpgroup tensor cores
// (precision class TF32; needs sm_90a: the backend compiles it for that target).
// Adds over rung 25 (mma.sync fed by cp.async and ldmatrix, 34-39% of cuBLAS TF32):
// - wgmma.mma_async m64nNk8: one instruction per warpgroup (4 warps) multiplies a
//   64 x 8 tile of A by an 8 x N tile of B, both read by the tensor cores straight
//   from shared memory through matrix descriptors: no ldmatrix, no fragments in
//   registers, and the products run asynchronously while the warps go on;
// - the bulk tensor copy engine (cp.async.bulk.tensor, TMA) loads whole 32-k tiles
//   into shared memory in the 128-byte swizzled layout the descriptors name (the
//   k rows of 128 bytes with their 16-byte pieces XOR-ed by the row index mod 8, so
//   the tensor cores read without bank conflicts); tiles past the matrix edge are
//   filled with zeros by the engine itself, so no edge test is left in the kernel;
// - warp specialisation: one producer warpgroup (one thread issues the copies,
//   registers given back with setmaxnreg) and two consumer warpgroups, each
//   64 x WG_BN of the 128 x WG_BN block tile, in a ring of WG_STAGES stages with a
//   "full" and an "empty" mbarrier each; a consumer frees a stage once the
//   products that read it have completed (wgmma.wait_group 1: one group in flight);
// - blocks in launch order walk groups of WG_GROUP_M = 8 row tiles by every column
//   tile, so that the blocks resident at once share A and B panels in L2.
// The TF32 wgmma reads K-major operands only: B (column-major, k contiguous) is read
// in place where its rows are whole 16-byte multiples (K % 4 == 0; else packed), A
// (m contiguous) is packed k-contiguous and rounded to TF32 by rung 25's mm_25_pack.
// B read in place reaches the tensor cores unrounded; they use its top 19 bits.
// Launch (mmsuite/tensorcore.py): mm_25_pack on A (and B), then
// mm_28_tf32_wgmma(maps, M, N, Kp, alpha, beta, C, W, kt_per_slice, slices), maps
// being A's and B's tensor maps in one by-value parameter (cuTensorMapEncodeTiled:
// 3-D, k x rows x batch, boxes of 32 x 128 for A and 32 x WG_BN for B, 128-byte
// swizzle); K split into slices as rung 25 does, added by rung 21's mm_21_reduce.
// Rung 29 includes this file: its producer, barriers and store are rung 29's too.
// Any M, N, K >= 1, any batch.
// Measured on the H100 (mmsuite run, same run as cuBLAS, L2 warm), packs included:
// 262-267 TFLOP/s at 2048^3, 324-337 at 4096^3 and 345-365 at 8192^3, 77-94% of
// cuda.cublas_tf32 and 5.3-7.1x cuBLAS FP32; error 4.2e-4 against cuBLAS TF32's
// 2.6e-4 (B in place is truncated to TF32). Variants tried: docs/kernel-log.md.
#include "25_tf32_mma.cu"

#define WG_BM 128
#define WG_BK 32  // 32 FP32 = 128 bytes: one row of the 128-byte swizzle
#ifndef WG_BN
#define WG_BN 256
#endif
#ifndef WG_STAGES
#define WG_STAGES 4
#endif
#ifndef WG_GROUP_M
#define WG_GROUP_M 8  // row tiles a group of blocks in launch order covers (0: no grouping)
#endif
#define WG_THREADS 384                     // producer + two consumer warpgroups
#define WG_A_TILE (WG_BM * WG_BK * 4)      // bytes of A's tile
#define WG_PRODUCER_REGS 40
#define WG_CONSUMER_REGS 232

// The dynamic shared memory of the wgmma kernels (their stages).
extern __shared__ unsigned char wg_dynamic[];

// A CUtensorMap, opaque: 128 bytes, 64-byte aligned, built on the host.
struct __align__(64) WgTensorMap {
    unsigned long long opaque[16];
};

__device__ __forceinline__ unsigned wg_smem(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void wg_bar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}

__device__ __forceinline__ void wg_bar_expect(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
                 "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void wg_bar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void wg_bar_wait(unsigned bar, unsigned parity) {
    unsigned done;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}

// One box of a 3-D tensor map (k, row, matrix) into shared memory; completes on bar.
__device__ __forceinline__ void wg_tma_load(unsigned dst, const WgTensorMap* map, int k, int row,
                                            int mat, unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(k), "r"(row), "r"(mat), "r"(bar)
        : "memory");
}

// Shared-memory matrix descriptor of a K-major tile in the 128-byte swizzle: 8-row
// groups 1024 bytes apart (stride byte offset); the leading offset is unused there.
__device__ __forceinline__ unsigned long long wg_desc(unsigned addr) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16) |
           ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wg_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Pins registers in place around the asynchronous products: no read or write of them
// moves across this point (the compiler sees the wgmma's outputs as written at issue).
template <int R>
__device__ __forceinline__ void wg_pin(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The 64 accumulators of an m64n128 wgmma: operands %0 ... %63, read and written.
#define WG_D64                                                                              \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
    "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "   \
    "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, "   \
    "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define WG_D8(d, i)                                                                  \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]),       \
        "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define WG_D64_OPERANDS(d)                                                                 \
    WG_D8(d, 0), WG_D8(d, 8), WG_D8(d, 16), WG_D8(d, 24), WG_D8(d, 32), WG_D8(d, 40),     \
        WG_D8(d, 48), WG_D8(d, 56)

__device__ __forceinline__ void wg_mma_n128(float (&d)[64], unsigned long long da,
                                            unsigned long long db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 " WG_D64
                 ", %64, %65, p, 1, 1;\n}\n"
                 : WG_D64_OPERANDS(d)
                 : "l"(da), "l"(db), "r"(accumulate));
}

__device__ __forceinline__ void wg_mma_n256(float (&d)[128], unsigned long long da,
                                            unsigned long long db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, "
        "%14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, "
        "%28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, "
        "%42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "
        "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, "
        "%70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, "
        "%84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, "
        "%98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, "
        "%126, %127"
        "}, %128, %129, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
          "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
          "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]),
          "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),
          "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
          "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]),
          "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]),
          "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]),
          "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]),
          "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]),
          "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db), "r"(accumulate));
}

template <int BN>
__device__ __forceinline__ void wg_mma(float (&d)[BN / 2], unsigned long long da,
                                       unsigned long long db, int accumulate) {
    if constexpr (BN == 256)
        wg_mma_n256(d, da, db, accumulate);
    else
        wg_mma_n128(d, da, db, accumulate);
}

// Where a block works: its 128 x BN tile of C in matrix `mat`, and its slice of K
// (`tiles` stages of BK from stage `kt0`).
struct WgTile {
    int m0, n0, mat, slice, kt0, tiles;
};

template <int BN, int BK>
__device__ __forceinline__ WgTile wg_tile(int Kp, int kt_per_slice, int slices) {
    WgTile t;
    t.mat = blockIdx.z / slices;
    t.slice = blockIdx.z % slices;
#if WG_GROUP_M > 0
    // Blocks in launch order cover WG_GROUP_M row tiles by every column tile, then the
    // next WG_GROUP_M rows: the blocks resident at once share their A and B panels in L2.
    const int id = blockIdx.x + blockIdx.y * gridDim.x, per_group = WG_GROUP_M * gridDim.y;
    const int first = id / per_group * WG_GROUP_M;
    const int rows = min((int)gridDim.x - first, WG_GROUP_M);
    t.m0 = (first + id % per_group % rows) * WG_BM;
    t.n0 = id % per_group / rows * BN;
#else
    t.m0 = blockIdx.x * WG_BM;
    t.n0 = blockIdx.y * BN;
#endif
    t.kt0 = t.slice * kt_per_slice;
    t.tiles = min(Kp / BK, t.kt0 + kt_per_slice) - t.kt0;
    return t;
}

// One "full" (the producer's copies landed) and one "empty" (the consumers' products
// that read the stage completed: one arrival per consumer warp) barrier per stage.
template <int STAGES>
__device__ __forceinline__ void wg_init_barriers(unsigned long long* full_bar,
                                                 unsigned long long* empty_bar) {
    if (threadIdx.x == 0) {
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            wg_bar_init(wg_smem(&full_bar[s]), 1);
            wg_bar_init(wg_smem(&empty_bar[s]), 8);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
}

// The producer warpgroup: one thread copies every stage's PARTS tiles of A (A_TILE bytes
// each), then PARTS tiles of B (B_TILE bytes each), BK elements of k deep, into the ring.
// maps: A's parts, then B's.
template <int PARTS, int A_TILE, int B_TILE, int BK, int STAGES>
__device__ __forceinline__ void wg_produce(const WgTensorMap* maps, unsigned base,
                                           const WgTile& tile, unsigned long long* full_bar,
                                           unsigned long long* empty_bar) {
    constexpr int STAGE = PARTS * (A_TILE + B_TILE);
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(WG_PRODUCER_REGS));
    if (threadIdx.x % 128 != 0) return;
    for (int t = 0; t < tile.tiles; ++t) {
        const int s = t % STAGES;
        if (t >= STAGES) wg_bar_wait(wg_smem(&empty_bar[s]), ((t / STAGES) - 1) & 1);
        const unsigned full = wg_smem(&full_bar[s]);
        wg_bar_expect(full, STAGE);
        const int k = (tile.kt0 + t) * BK;
        const unsigned stage = base + s * STAGE;
#pragma unroll
        for (int p = 0; p < PARTS; ++p) {
            wg_tma_load(stage + p * A_TILE, maps + p, k, tile.m0, tile.mat, full);
            wg_tma_load(stage + PARTS * A_TILE + p * B_TILE, maps + PARTS + p, k, tile.n0,
                        tile.mat, full);
        }
    }
}

// Where a consumer thread's accumulator 4j + r lies in C: row g (+ 8 for r >= 2) of its
// warp's 16, column 8j + 2q + (r & 1), g and q the lane's quad and place in it.
__device__ __forceinline__ int wg_row(const WgTile& tile, int consumer, int r) {
    const int lane = threadIdx.x & 31, warp = (threadIdx.x % 128) >> 5;
    return tile.m0 + consumer * 64 + warp * 16 + (lane >> 2) + (r >> 1) * 8;
}
__device__ __forceinline__ int wg_col(const WgTile& tile, int j, int r) {
    return tile.n0 + j * 8 + 2 * (threadIdx.x & 3) + (r & 1);
}

// The consumer's 64 x BN accumulators into C (alpha and beta applied), or into its
// slice's partial sums.
template <int BN>
__device__ __forceinline__ void wg_store(const float (&acc)[BN / 2], const WgTile& tile,
                                         int consumer, int M, int N, float alpha, float beta,
                                         float* C, float* W, int slices) {
    const size_t mn = (size_t)M * N;
    float* out = slices == 1 ? C + (size_t)tile.mat * mn
                             : W + ((size_t)tile.mat * slices + tile.slice) * mn;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int m = wg_row(tile, consumer, r), n = wg_col(tile, j, r);
            if (m >= M || n >= N) continue;
            float* c = out + m + (size_t)n * M;
            if (slices == 1)
                mm_store(c, acc[4 * j + r], alpha, beta);
            else
                *c = acc[4 * j + r];  // mm_21_reduce applies alpha and beta
        }
}

// The block's 128 x BN tile of C (or of its slice's partial sums): TF32 products
// accumulated in the tensor cores. maps: A's, then B's.
template <int BN, int STAGES>
__device__ __forceinline__ void wg_gemm(const WgTensorMap* maps, int M, int N, int Kp,
                                        float alpha, float beta, float* C, float* W,
                                        int kt_per_slice, int slices) {
    constexpr int B_TILE = BN * WG_BK * 4;
    constexpr int STAGE = WG_A_TILE + B_TILE;  // bytes, a multiple of 1024
    constexpr int R = BN / 2;                  // accumulators per thread
    __shared__ __align__(8) unsigned long long full_bar[STAGES], empty_bar[STAGES];
    // The swizzle repeats every 1024 bytes: tiles start on such a boundary.
    const unsigned base = (wg_smem(wg_dynamic) + 1023u) & ~1023u;
    const WgTile tile = wg_tile<BN, WG_BK>(Kp, kt_per_slice, slices);
    wg_init_barriers<STAGES>(full_bar, empty_bar);
    if (threadIdx.x < 128) {
        wg_produce<1, WG_A_TILE, B_TILE, WG_BK, STAGES>(maps, base, tile, full_bar, empty_bar);
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(WG_CONSUMER_REGS));
    const int consumer = threadIdx.x / 128 - 1;  // rows 64 * consumer of the block tile
    const int lane = threadIdx.x & 31;

    float acc[R];
#pragma unroll
    for (int i = 0; i < R; ++i) acc[i] = 0.0f;
    for (int t = 0; t < tile.tiles; ++t) {
        const int s = t % STAGES;
        wg_bar_wait(wg_smem(&full_bar[s]), (t / STAGES) & 1);
        const unsigned a = base + s * STAGE + consumer * 64 * WG_BK * 4;
        const unsigned b = base + s * STAGE + WG_A_TILE;
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < WG_BK / 8; ++kk)
            wg_mma<BN>(acc, wg_desc(a + kk * 32), wg_desc(b + kk * 32), 1);
        wg_commit();
        // All groups but the newest have completed: stage t - 1 is read.
        wg_wait<1>();
        if (t > 0 && lane == 0) wg_bar_arrive(wg_smem(&empty_bar[(t - 1) % STAGES]));
    }
    wg_wait<0>();
    wg_pin(acc);
    wg_store<BN>(acc, tile, consumer, M, N, alpha, beta, C, W, slices);
}

// A's parts, then B's parts: one kernel parameter, so that the maps can be indexed.
template <int PARTS>
struct WgMaps {
    WgTensorMap map[2 * PARTS];
};

// Shared memory asked for: WG_STAGES x (A and B tiles) + 1024 bytes to align them
// (197632 bytes with the defaults).
extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
mm_28_tf32_wgmma(const __grid_constant__ WgMaps<1> maps, int M, int N, int Kp, float alpha,
                 float beta, float* C, float* W, int kt_per_slice, int slices) {
    wg_gemm<WG_BN, WG_STAGES>(maps.map, M, N, Kp, alpha, beta, C, W, kt_per_slice, slices);
}
