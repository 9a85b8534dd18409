// cp.async (sm_80+) helpers shared by the rungs that stage tiles without registers: rung 19's
// pipeline and rung 24's panel of B. A copy of 0 source bytes fills zeros, so the copies past
// a matrix's edge need no branches, only a valid address (`safe`) to name.
#pragma once

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Copy 4 consecutive floats of a column, `left` of them inside the matrix, zero-filling
// the rest: one 16-byte copy when `vec` (the column's length and the position are
// multiples of 4, so left is <= 0 or >= 4), else four 4-byte copies.
__device__ __forceinline__ void copy4(float* dst, const float* src, int left, bool vec,
                                      const float* safe) {
    if (vec) {
        const int bytes = left > 0 ? 16 : 0;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)),
                     "l"(bytes ? src : safe), "r"(bytes));
    } else {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int bytes = q < left ? 4 : 0;
            asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(
                             smem_addr(dst + q)),
                         "l"(bytes ? src + q : safe), "r"(bytes));
        }
    }
}

// Close this thread's copies issued since the last commit into one group.
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void wait_pending() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Wait for every copy this thread issued, committed or not.
__device__ __forceinline__ void wait_all() { asm volatile("cp.async.wait_all;\n" ::); }
