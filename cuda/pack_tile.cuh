// The gather both operand packs share (rung 25's mm_25_pack, the FP32-accurate rungs'
// mm_26_split): block (k0 / 32, r0 / 32, z) reads a 32 x 32 tile of rows r (M rows of A,
// N columns of B) by k of matrix z into shared memory, zero past the edges. Element
// (r, k) of matrix z sits at X[z * R * K + r * r_stride + k * k_stride]; the reads follow
// the source's contiguous axis, and the caller's writes, row i of the tile at a time,
// follow k.
#pragma once

__device__ __forceinline__ void pack_tile_load(float (&tile)[32][33], const float* X, int R,
                                               int K, int r_stride, int k_stride) {
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const int r0 = blockIdx.y * 32, k0 = blockIdx.x * 32;
    const float* x = X + blockIdx.z * (size_t)R * K;
    if (r_stride == 1) {
        for (int i = ty; i < 32; i += 8) {
            const int r = r0 + tx, k = k0 + i;
            tile[tx][i] = (r < R && k < K) ? x[r + (size_t)k * k_stride] : 0.0f;
        }
    } else {
        for (int i = ty; i < 32; i += 8) {
            const int r = r0 + i, k = k0 + tx;
            tile[i][tx] = (r < R && k < K) ? x[(size_t)r * r_stride + k] : 0.0f;
        }
    }
    __syncthreads();
}
