// Rung 6 (seed 004), column-major: 128-bit loads and stores.
// Adds over rung 5: the four consecutive A elements, B elements and C elements a
// thread handles are moved as one float4 (one 16-byte instruction instead of
// four), in global and in shared memory. Fewer load/store instructions per FMA,
// wider memory transactions.
// A float4 access needs 16-byte alignment: it is used when the column length
// is a multiple of 4 (M for A and C, K for B) and all four elements lie inside
// the matrix; otherwise the thread falls back to predicated scalar accesses
// with zero fill, so any M, N, K works. The B tile's columns are padded to 36
// words: 16-byte aligned, and the four columns a warp reads fall in four banks.
// The predicated loads and stores (load4, store4) are in vec4.cuh, shared with
// the later rungs.
#include "common.cuh"
#include "vec4.cuh"

#define TS 32
#define LDB (TS + 4)

extern "C" __global__ void __launch_bounds__(256)
mm_06_float4(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
             float* C) {
    MM_BATCH_OFFSET(M, N, K, A, B, C);
    __shared__ __align__(16) float sa[TS * TS];   // sa[k * TS + i]
    __shared__ __align__(16) float sb[TS * LDB];  // sb[j * LDB + k]
    const int tid = threadIdx.x;
    const int r = (tid & 7) << 2, c = tid >> 3;
    const int i0 = blockIdx.x * TS, j0 = blockIdx.y * TS;
    const int i = i0 + r, j = j0 + c;
    const bool vec_m = (M & 3) == 0, vec_k = (K & 3) == 0;
    const float* a = A + i + (size_t)c * M;
    const float* b = B + r + (size_t)j * K;
    const size_t a_step = (size_t)TS * M;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int k0 = 0; k0 < K; k0 += TS) {
        *reinterpret_cast<float4*>(sa + c * TS + r) = load4(a, k0 + c < K ? M - i : 0, vec_m);
        *reinterpret_cast<float4*>(sb + c * LDB + r) = load4(b, j < N ? K - k0 - r : 0, vec_k);
        a += a_step;
        b += TS;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TS; ++kk) {
            const float bv = sb[c * LDB + kk];
            const float4 av = *reinterpret_cast<const float4*>(sa + kk * TS + r);
            acc.x += av.x * bv;
            acc.y += av.y * bv;
            acc.z += av.z * bv;
            acc.w += av.w * bv;
        }
        __syncthreads();
    }
    if (j < N) store4(C + i + (size_t)j * M, acc, M - i, vec_m, alpha, beta);
}
