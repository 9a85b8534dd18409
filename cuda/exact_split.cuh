// The exact three-part BF16 split of the FP32-accurate rungs (26 and 29): each FP32
// operand x becomes x0 + x1 + x2, three BF16 numbers (8 significant bits each, each
// rounded to nearest from what the ones before left) whose sum is x exactly, where big
// and small TF32 parts keep about 22 of x's 24 bits. Of the nine products the six
// above 2^-24 of |a||b| are taken: a0b0, and a0b1 + a1b0 + a0b2 + a1b1 + a2b0 (the
// three left out are below 2^-25 of |a||b| together). BF16 runs at twice TF32's tensor
// rate, so six BF16 products cost what three TF32 ones did.
// Operands under about 2^-110 cannot be split exactly (x2 would need bits under BF16's
// smallest subnormal, 2^-133): the split raises a flag in the workspace, and the main
// kernel's blocks then sum their tiles in FP32 on the SIMT lanes from A and B themselves;
// the last block to finish clears the flag for the next sample.
#pragma once

#include "pack_tile.cuh"

// The BF16 parts of each operand (SPLIT_PARTS in mmsuite/tensorcore.py too).
#define SPLIT_PARTS 3

// x rounded to the nearest BF16 (its bits), and a BF16's value.
__device__ __forceinline__ unsigned short bf16_rn(float x) {
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(h) : "f"(x));
    return h;
}
__device__ __forceinline__ float bf16_value(unsigned short h) {
    return __uint_as_float((unsigned)h << 16);
}

// x = x0 + x1 + x2 exactly for finite x down to about 2^-110: x - x0 has at most 16
// significant bits and is exact in FP32, so is what x1 leaves of it, which has at most 8.
// Below that, x2 would need bits under BF16's smallest subnormal (2^-133): the split
// returns false and the GEMM takes its FP32 SIMT path. An x that rounds up past BF16's
// largest finite value is truncated instead (x - x0 is still exact). A non-finite x is
// x0 alone.
__device__ __forceinline__ bool bf16_split(float x, unsigned short (&part)[SPLIT_PARTS]) {
    if (!isfinite(x)) {
        part[0] = bf16_rn(x);
        part[1] = part[2] = 0;
        return true;
    }
    part[0] = bf16_rn(x);
    if (isinf(bf16_value(part[0]))) part[0] = (unsigned short)(__float_as_uint(x) >> 16);
    const float r1 = x - bf16_value(part[0]);
    part[1] = bf16_rn(r1);
    const float r2 = r1 - bf16_value(part[1]);
    part[2] = bf16_rn(r2);
    return bf16_value(part[2]) == r2;
}

// Two words at W + flag_offset: whether a split was inexact in this sample, and how many
// blocks of the main kernel have finished with it (the last one clears both).
struct AccFlags {
    int inexact;
    unsigned done;
};

// mm_26_split: rows r of an operand (M rows of A, N columns of B) split into three BF16
// parts, each k-contiguous and zero-padded: P[part][z][Rp][Kp] at (bf16*)(W + offset), parts
// part_stride BF16 elements apart; an inexact split raises the sample's flag. The tile
// is gathered as rung 25's pack gathers it (pack_tile.cuh).
extern "C" __global__ void __launch_bounds__(256)
mm_26_split(const float* X, float* W, int offset, int part_stride, int R, int K, int Rp,
            int Kp, int r_stride, int k_stride, int flag_offset) {
    __shared__ float tile[32][33];
    pack_tile_load(tile, X, R, K, r_stride, k_stride);
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const int r0 = blockIdx.y * 32, k0 = blockIdx.x * 32;
    const size_t z = blockIdx.z;
    unsigned short* p = reinterpret_cast<unsigned short*>(W + offset) + z * (size_t)Rp * Kp;
    for (int i = ty; i < 32; i += 8) {
        const size_t at = (size_t)(r0 + i) * Kp + k0 + tx;
        unsigned short part[SPLIT_PARTS];
        const bool exact = bf16_split(tile[i][tx], part);
#pragma unroll
        for (int q = 0; q < SPLIT_PARTS; ++q) p[q * (size_t)part_stride + at] = part[q];
        if (!__all_sync(0xffffffffu, exact) && tx == 0)
            atomicOr(&reinterpret_cast<AccFlags*>(W + flag_offset)->inexact, 1);
    }
}

// Whether a split of this sample was inexact: read by every thread of a block before a
// barrier that its count (acc_flags_finish) comes after.
__device__ __forceinline__ bool acc_flags_inexact(const float* W, int flag_offset) {
    const AccFlags* flags = reinterpret_cast<const AccFlags*>(W + flag_offset);
    return *reinterpret_cast<const volatile int*>(&flags->inexact) != 0;
}

// One thread per block, after the block's stores: the last block to finish clears the flag
// and the count for the next sample (every block read the flag before counting itself).
__device__ __forceinline__ void acc_flags_finish(float* W, int flag_offset) {
    AccFlags* flags = reinterpret_cast<AccFlags*>(W + flag_offset);
    __threadfence();
    const unsigned blocks = gridDim.x * gridDim.y * gridDim.z;
    if (atomicAdd(&flags->done, 1u) == blocks - 1) {
        flags->inexact = 0;
        flags->done = 0;
        __threadfence();
    }
}

// C(m, n) of matrix `mat` summed in FP32 over k in [k_begin, k_end) straight from the
// column-major A and B: the SIMT path where a split was inexact.
__device__ __forceinline__ float simt_dot(const float* A, const float* B, int M, int N, int K,
                                          int mat, int m, int n, int k_begin, int k_end) {
    const float* a = A + (size_t)mat * M * K + m;
    const float* b = B + (size_t)mat * K * N + (size_t)n * K;
    float sum = 0.0f;
    for (int k = k_begin; k < k_end; ++k) sum = fmaf(a[(size_t)k * M], b[k], sum);
    return sum;
}
