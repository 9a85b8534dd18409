// Rung 1 (seed 004), column-major: the textbook kernel. One thread per element
// of C, the dot product along k read straight from global memory. A warp's 32
// threads walk 32 consecutive rows, so each A load is one coalesced 128-byte
// line and each B load is a broadcast; every A and B element is re-read from
// memory (or cache) by every block that needs it: this is the baseline.
#include "common.cuh"

extern "C" __global__ void mm_01_naive(int M, int N, int K, float alpha, const float* A,
                                       const float* B, float beta, float* C) {
    MM_BATCH_OFFSET(M, N, K, A, B, C);
    const int i = blockIdx.x * blockDim.x + threadIdx.x;  // row of C
    const int j = blockIdx.y * blockDim.y + threadIdx.y;  // column of C
    if (i >= M || j >= N) return;
    const float* a = A + i;                  // A(i, 0); A(i, k) = a[k * M]
    const float* b = B + (size_t)j * K;      // B(0, j); B(k, j) = b[k]
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += a[(size_t)k * M] * b[k];
    mm_store(C + i + (size_t)j * M, acc, alpha, beta);
}
