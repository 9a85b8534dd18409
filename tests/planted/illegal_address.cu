// Test only, never in the catalogue: a kernel that writes far outside C, so the
// launch fails with an illegal address and leaves its CUDA context unusable.
// The isolation tests plant it between real rungs: it must cost one row.
extern "C" __global__ void mm_planted_illegal_address(int M, int N, int K, float alpha,
                                                      const float* A, const float* B,
                                                      float beta, float* C) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= M || j >= N) return;
    // 2^40 floats past C: no allocation is anywhere near there.
    C[(size_t)i + (size_t)j * M + ((size_t)1 << 40)] = alpha * A[i] * B[j] + beta;
}
