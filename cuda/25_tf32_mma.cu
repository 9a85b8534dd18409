// Rung 25 (beyond the seeds), column-major: TF32 tensor cores (precision class TF32).
// Adds over rung 22 (FP32 FMAs on the SIMT lanes, 66.9 TFLOP/s peak on the H100,
// 95% of cuBLAS FP32 already): the products run on the tensor cores, whose dense
// TF32 peak is about 8x the FP32 one, through mma.sync.m16n8k8 with TF32 inputs
// and FP32 accumulators. TF32 keeps 10 mantissa bits, so the result carries
// about 200x FP32's error: a class of its own, with its own tolerance and peak.
// Two steps per sample (mmsuite/tensorcore.py plans them):
// - mm_25_pack(X, W, offset, R, K, Rp, Kp, r_stride, k_stride)
//   rounds an operand to TF32 (cvt.rna, to nearest, as cuBLAS does) and writes it
//   k-contiguous, zero-padded to whole 128 x 32 tiles, into the workspace. Both
//   operands then reach shared memory as whole 16-byte cp.async copies with no
//   edge test, and ldmatrix gives the mma fragments of A and B alike; the pass
//   reads and writes each operand once (about 0.1 ms at 4096^3, against
//   roughly a millisecond of tensor work for the FP32-accurate rung);
// - mm_25_tf32_mma: 128 x 128 x 32 block tiles, 8 warps of 64 x 32, a cp.async
//   pipeline of three shared buffers (one barrier per K tile), row pitch 36
//   words so ldmatrix's eight 16-byte rows fall in eight bank groups; K may be
//   split into slices (planner), whose partial sums go to the workspace and are
//   added in a fixed order by rung 21's mm_21_reduce.
// Rung 26 includes this file: the same pipeline carries the three BF16 parts of its
// exact split (tc_load_stage with PARTS = 3) into six products.
// Any M, N, K >= 1, any batch: the padding holds zeros, the stores are predicated.
// Measured on the H100 (same run as cuda.cublas_tf32, L2 warm): 116 / 141 / 150
// TFLOP/s at 2048^3 / 4096^3 / 8192^3, 34% / 36% / 39% of cuBLAS TF32 (337 / 394 /
// 382), 2.3x / 2.7x / 2.9x cuBLAS FP32; error 2.6e-4, as cuBLAS TF32's. The pack
// steps take 2 x 74 us of the 0.97 ms at 4096^3 (ncu); what bounds it is in
// docs/kernel-log.md.
#include "common.cuh"
#include "pack_tile.cuh"

#define TC_BM 128
#define TC_BN 128
#define TC_BK 32
#define TC_LDS (TC_BK + 4)  // words per shared row: 144 bytes, 16-byte aligned
// Warp tile: 64 rows (4 m16 tiles) x TC_WN columns (TC_WN / 8 n8 tiles); 2 x (128 / TC_WN)
// warps cover the block.
#ifndef TC_WN
#define TC_WN 32
#endif
#define TC_WARPS_M 2
#define TC_WM 64
#define TC_THREADS (32 * TC_WARPS_M * (TC_BN / TC_WN))
#define TC_MI (TC_WM / 16)
#define TC_NJ (TC_WN / 8)
#define TC_TILE (TC_BM * TC_LDS)  // floats of one operand's tile (BM == BN)

// The dynamic shared memory of the tensor kernels (their stages).
extern __shared__ float4 tc_smem4[];

__device__ __forceinline__ unsigned tc_smem(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// x rounded to the nearest TF32 value (low 13 bits zero).
__device__ __forceinline__ float to_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return __uint_as_float(r);
}

// Rows r of an operand (M rows of A, N columns of B), k-contiguous and padded:
// P[z][Rp][Kp] at W + offset, each 32 x 32 tile gathered through shared memory
// (pack_tile.cuh).
extern "C" __global__ void __launch_bounds__(256)
mm_25_pack(const float* X, float* W, int offset, int R, int K, int Rp, int Kp, int r_stride,
           int k_stride) {
    __shared__ float tile[32][33];
    pack_tile_load(tile, X, R, K, r_stride, k_stride);
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const int r0 = blockIdx.y * 32, k0 = blockIdx.x * 32;
    const size_t z = blockIdx.z;
    float* p = W + offset + z * (size_t)Rp * Kp;
    for (int i = ty; i < 32; i += 8) {
        const size_t at = (size_t)(r0 + i) * Kp + k0 + tx;
        p[at] = to_tf32(tile[i][tx]);
    }
}

__device__ __forceinline__ void tc_ldsm4(unsigned (&r)[4], const float* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(tc_smem(p)));
}

// d = a * b + c on the tensor cores (m16n8k8, TF32 in, FP32 out).
__device__ __forceinline__ void tc_mma(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                       unsigned b1, const float (&c)[4]) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]),
          "f"(c[2]), "f"(c[3]));
}

// One K tile of every part of both operands into a stage: 128 rows x 8 chunks of 16 bytes
// per operand part, four chunks per thread. A's parts are part_a floats apart, B's part_b;
// rows are Kp floats apart.
template <int PARTS>
__device__ __forceinline__ void tc_load_stage(float* stage, const float* a, const float* b,
                                              size_t part_a, size_t part_b, int Kp, int kt) {
#pragma unroll
    for (int part = 0; part < 2 * PARTS; ++part) {
        const float* src =
            part < PARTS ? a + part * part_a : b + (part - PARTS) * part_b;
        float* dst = stage + part * TC_TILE;
#pragma unroll
        for (int c = 0; c < TC_BM * TC_BK / 4 / TC_THREADS; ++c) {
            const int idx = threadIdx.x + c * TC_THREADS;
            const int row = idx >> 3, chunk = idx & 7;
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(
                             tc_smem(dst + row * TC_LDS + chunk * 4)),
                         "l"(src + (size_t)row * Kp + (size_t)kt * TC_BK + chunk * 4));
        }
    }
}

// The block's tile of C (or of its slice's partial sums): TF32 products accumulated in the
// tensor cores.
template <int STAGES>
__device__ __forceinline__ void tc_gemm(int M, int N, int Kp, float alpha, float beta, float* C,
                                        float* W, int a_offset, int b_offset, int Mp, int Np,
                                        int kt_per_slice, int slices) {
    float* const smem = reinterpret_cast<float*>(tc_smem4);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp % TC_WARPS_M, wn = warp / TC_WARPS_M;
    const int mat = blockIdx.z / slices, slice = blockIdx.z % slices;
    const int m0 = blockIdx.x * TC_BM, n0 = blockIdx.y * TC_BN;
    const int kt_total = Kp / TC_BK;
    const int kt0 = slice * kt_per_slice;
    const int kt1 = min(kt_total, kt0 + kt_per_slice);
    const int tiles = kt1 - kt0;
    const float* a = W + a_offset + ((size_t)mat * Mp + m0) * Kp;
    const float* b = W + b_offset + ((size_t)mat * Np + n0) * Kp;

    float acc[TC_MI][TC_NJ][4];
#pragma unroll
    for (int i = 0; i < TC_MI; ++i)
#pragma unroll
        for (int j = 0; j < TC_NJ; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;

    // ldmatrix row addresses: lanes 8q..8q+7 give the rows of matrix q.
    const int a_lane = ((lane & 7) + ((lane >> 3) & 1) * 8) * TC_LDS + (lane >> 4) * 4;
    const int b_lane = ((lane & 7) + (lane >> 4) * 8) * TC_LDS + ((lane >> 3) & 1) * 4;
    const int a_warp = wm * TC_WM * TC_LDS + a_lane;
    const int b_warp = wn * TC_WN * TC_LDS + b_lane;
    constexpr int STAGE = 2 * TC_TILE;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < tiles) tc_load_stage<1>(smem + s * STAGE, a, b, 0, 0, Kp, kt0 + s);
        asm volatile("cp.async.commit_group;\n" ::);
    }
    for (int t = 0; t < tiles; ++t) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 2));
        __syncthreads();  // tile t landed for all; everyone is done with tile t - 1's buffer
        const int next = t + STAGES - 1;
        if (next < tiles)
            tc_load_stage<1>(smem + (next % STAGES) * STAGE, a, b, 0, 0, Kp, kt0 + next);
        asm volatile("cp.async.commit_group;\n" ::);
        const float* const sa = smem + (t % STAGES) * STAGE;
        const float* const sb = sa + TC_TILE;
#pragma unroll
        for (int kk = 0; kk < TC_BK / 8; ++kk) {
            unsigned bf[TC_NJ / 2][4];
#pragma unroll
            for (int jp = 0; jp < TC_NJ / 2; ++jp)
                tc_ldsm4(bf[jp], sb + b_warp + jp * 16 * TC_LDS + kk * 8);
#pragma unroll
            for (int i = 0; i < TC_MI; ++i) {
                unsigned af[4];
                tc_ldsm4(af, sa + a_warp + i * 16 * TC_LDS + kk * 8);
#pragma unroll
                for (int j = 0; j < TC_NJ; ++j)
                    tc_mma(acc[i][j], af, bf[j / 2][(j & 1) * 2], bf[j / 2][(j & 1) * 2 + 1],
                           acc[i][j]);
            }
        }
    }
    asm volatile("cp.async.wait_group 0;\n" ::);

    // Fragment (i, j) holds rows g and g + 8, columns 2t and 2t + 1 of its 16 x 8 tile.
    const int g = lane >> 2, tq = lane & 3;
    const size_t mn = (size_t)M * N;
    float* out = slices == 1 ? C + (size_t)mat * mn : W + ((size_t)mat * slices + slice) * mn;
#pragma unroll
    for (int i = 0; i < TC_MI; ++i)
#pragma unroll
        for (int j = 0; j < TC_NJ; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int m = m0 + wm * TC_WM + i * 16 + g + (r >> 1) * 8;
                const int n = n0 + wn * TC_WN + j * 8 + 2 * tq + (r & 1);
                if (m >= M || n >= N) continue;
                float* c = out + m + (size_t)n * M;
                if (slices == 1)
                    mm_store(c, acc[i][j][r], alpha, beta);
                else
                    *c = acc[i][j][r];  // mm_21_reduce applies alpha and beta
            }
}

// Three stages (111 KB) and registers cut to 128 so that two blocks share an SM: on the
// H100 141.6 against 119.3 TFLOP/s at 4096^3 with four stages and one block (149.2 against
// 129.2 at 8192^3); 64 x 64 warp tiles in 128-thread blocks, two per SM: 142.1 (150.5).
#ifndef TF32_STAGES
#define TF32_STAGES 3
#endif
#ifndef TF32_MINB
#define TF32_MINB 2  // blocks per SM the register budget is cut for
#endif

// A and B packed by mm_25_pack at W + a_offset and W + b_offset; K padded to Kp.
extern "C" __global__ void __launch_bounds__(TC_THREADS, TF32_MINB)
mm_25_tf32_mma(int M, int N, int Kp, float alpha, float beta, float* C, float* W, int a_offset,
               int b_offset, int Mp, int Np, int kt_per_slice, int slices) {
    tc_gemm<TF32_STAGES>(M, N, Kp, alpha, beta, C, W, a_offset, b_offset, Mp, Np,
                         kt_per_slice, slices);
}
