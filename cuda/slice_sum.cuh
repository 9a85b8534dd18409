// The deterministic sum of K slices' partial products, shared by the rungs that
// split K over blocks (21, 24): C = alpha * (W[0] + ... + W[splits - 1]) + beta * C
// for every matrix of the batch, slices added in order, so that every run rounds
// alike. One float4 per thread when M * N is a multiple of 4, grid-stride loop
// over the batch. W holds batch x splits x M x N floats.
// last_slice: the same sum without a second launch (rungs 24 with FUSED, 30).
#pragma once
#include "vec4.cuh"

// A thread's slices loaded at once, then added in order: one slice at a time, a sum of 48
// slices waited 48 times for memory (H100, Nsight Compute, 126x112 outputs from 48 slices:
// mm_21_reduce 21 us on 14 blocks).
#define SUM_LOADS 8

__device__ __forceinline__ void slice_sum(int M, int N, int batch, float alpha, const float* W,
                                          float beta, float* C, int splits) {
    const size_t mn = (size_t)M * N;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    if ((mn & 3) == 0) {
        const size_t quads = mn / 4 * batch;
        for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < quads; q += stride) {
            const size_t mat = q / (mn / 4), e = (q % (mn / 4)) * 4;
            const float* w = W + mat * splits * mn + e;
            float4 s = *reinterpret_cast<const float4*>(w);
            int t = 1;
            for (; t + SUM_LOADS <= splits; t += SUM_LOADS) {
                float4 v[SUM_LOADS];
#pragma unroll
                for (int u = 0; u < SUM_LOADS; ++u)
                    v[u] = *reinterpret_cast<const float4*>(w + (t + u) * mn);
#pragma unroll
                for (int u = 0; u < SUM_LOADS; ++u) add4(s, v[u]);
            }
            for (; t < splits; ++t) add4(s, *reinterpret_cast<const float4*>(w + t * mn));
            store4(C + mat * mn + e, s, 4, true, alpha, beta);
        }
        return;
    }
    for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < mn * batch; q += stride) {
        const size_t mat = q / mn, e = q % mn;
        const float* w = W + mat * splits * mn + e;
        float s = w[0];
        int t = 1;
        for (; t + SUM_LOADS <= splits; t += SUM_LOADS) {
            float v[SUM_LOADS];
#pragma unroll
            for (int u = 0; u < SUM_LOADS; ++u) v[u] = w[(t + u) * mn];
#pragma unroll
            for (int u = 0; u < SUM_LOADS; ++u) s += v[u];
        }
        for (; t < splits; ++t) s += w[t * mn];
        mm_store(C + mat * mn + e, s, alpha, beta);
    }
}

// Whether this block is the last of its tile's `splits` blocks to have written its slice
// to W: each fences its writes before counting itself in on the tile's counter (zero
// before the first launch), and the last, which then adds the slices in order, sets
// the counter back to zero for the next launch.
__device__ __forceinline__ bool last_slice(int* counter, int splits) {
    __shared__ int is_last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        is_last = atomicAdd(counter, 1) == splits - 1;
        if (is_last) *counter = 0;
    }
    __syncthreads();
    if (is_last) __threadfence();
    return is_last;
}
