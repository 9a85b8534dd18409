// Rung 18 (seed 003): batched SGEMM on contiguous (batch, rows, cols) row-major
// tensors; TMxTN outputs per thread, BK-deep shared tiles, float4 global loads.
//
// Adds over 07_blocktile_2d: the seed's batched fast path. The batch is the
// grid's z dimension and each matrix sits right after the previous one, so a
// block finds its operands with one multiply (MM_BATCH_OFFSET) instead of
// walking shapes and strides. 256 threads (TPBM x TPBN = 16 x 16) own a
// BM x BN = 128 x 128 tile of C, TM x TN = 8 x 8 accumulators each, kept in
// registers until the end. Per BK = 16 step the block stages A[BM][BK] and
// B[BK][BN] in shared memory with 16-byte float4 loads: a quarter of the load
// instructions of scalar loads, and each fetched word then serves BN (or BM)
// multiply-adds from shared memory and TN (or TM) from registers.
//
// Thread (tr, tc) owns rows tr + 16*m and columns tc + 16*n, as in the seed:
// a warp's B reads are 16 consecutive words (no bank conflict), its A reads are
// two broadcast words, and its C stores are coalesced. Beyond the seed, the A
// values are read from shared memory four k steps at a time as one float4 per
// row (A_s rows are k-contiguous), which cuts the shared loads per
// multiply-add from 1/4 to 5/32.
//
// Edges (the seed assumed 1000 = a multiple of 4 and left edges out): a float4
// load is used only when all four floats are inside the matrix and the address
// is 16-byte aligned; otherwise the four floats are loaded one by one, each
// predicated, with zeros outside. Outputs outside C are not stored.
#include "common.cuh"

#define TM 8
#define TN 8
#define TPBM 16
#define TPBN 16
#define BM (TM * TPBM)
#define BN (TN * TPBN)
#define BK 16
#define NTHREADS (TPBM * TPBN)

static_assert(BK % 4 == 0 && BN % 4 == 0, "float4 staging needs multiples of 4");

// Four consecutive floats of one row: p[0..3], of which only the first `valid`
// exist. One 16-byte load when all four exist and p is aligned.
__device__ __forceinline__ float4 load4(const float* p, int valid) {
    if (valid >= 4 && (reinterpret_cast<unsigned long long>(p) & 15) == 0)
        return *reinterpret_cast<const float4*>(p);
    float4 v;
    v.x = valid > 0 ? p[0] : 0.0f;
    v.y = valid > 1 ? p[1] : 0.0f;
    v.z = valid > 2 ? p[2] : 0.0f;
    v.w = valid > 3 ? p[3] : 0.0f;
    return v;
}

extern "C" __global__ void __launch_bounds__(NTHREADS)
mm_18_batched_tmtn(int M, int N, int K, float alpha, const float* A, const float* B,
                   float beta, float* C) {
    MM_BATCH_OFFSET(M, N, K, A, B, C);
    __shared__ __align__(16) float A_s[BM * BK];  // [row][k]
    __shared__ __align__(16) float B_s[BK * BN];  // [k][col]

    const int row0 = blockIdx.y * BM;
    const int col0 = blockIdx.x * BN;
    const int tid = threadIdx.x;
    const int tr = tid / TPBN;
    const int tc = tid % TPBN;

    float acc[TM][TN];
#pragma unroll
    for (int m = 0; m < TM; ++m)
#pragma unroll
        for (int n = 0; n < TN; ++n) acc[m][n] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += BK) {
        // A_s[r][c] = A[row0 + r, k0 + c]: 4 consecutive threads cover one 16-float row.
#pragma unroll
        for (int idx = 4 * tid; idx < BM * BK; idx += 4 * NTHREADS) {
            const int r = idx / BK, c = idx % BK;
            const int gr = row0 + r, gk = k0 + c;
            const int valid = gr < M ? K - gk : 0;
            const float4 v = valid > 0 ? load4(A + (size_t)gr * K + gk, valid)
                                       : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            *reinterpret_cast<float4*>(&A_s[idx]) = v;
        }
        // B_s[r][c] = B[k0 + r, col0 + c]: a warp covers 128 consecutive floats of a row.
#pragma unroll
        for (int idx = 4 * tid; idx < BK * BN; idx += 4 * NTHREADS) {
            const int r = idx / BN, c = idx % BN;
            const int gk = k0 + r, gc = col0 + c;
            const int valid = gk < K ? N - gc : 0;
            const float4 v = valid > 0 ? load4(B + (size_t)gk * N + gc, valid)
                                       : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            *reinterpret_cast<float4*>(&B_s[idx]) = v;
        }
        __syncthreads();

#pragma unroll
        for (int k = 0; k < BK; k += 4) {
            float4 a4[TM];
#pragma unroll
            for (int m = 0; m < TM; ++m)
                a4[m] = *reinterpret_cast<const float4*>(&A_s[(m * TPBM + tr) * BK + k]);
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                float b[TN];
#pragma unroll
                for (int n = 0; n < TN; ++n) b[n] = B_s[(k + kk) * BN + n * TPBN + tc];
#pragma unroll
                for (int m = 0; m < TM; ++m) {
                    const float a = kk == 0 ? a4[m].x : kk == 1 ? a4[m].y : kk == 2 ? a4[m].z
                                                                                  : a4[m].w;
#pragma unroll
                    for (int n = 0; n < TN; ++n) acc[m][n] += a * b[n];
                }
            }
        }
        __syncthreads();
    }

#pragma unroll
    for (int m = 0; m < TM; ++m) {
        const int r = row0 + m * TPBM + tr;
        if (r >= M) continue;
#pragma unroll
        for (int n = 0; n < TN; ++n) {
            const int c = col0 + n * TPBN + tc;
            if (c < N) mm_store(&C[(size_t)r * N + c], acc[m][n], alpha, beta);
        }
    }
}
