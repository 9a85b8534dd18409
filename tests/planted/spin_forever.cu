// Test only, never in the catalogue: a kernel that never returns. The volatile
// reads keep the loop (an empty infinite loop may be removed by the compiler);
// the inputs are never NaN, so the condition always holds. The isolation tests
// plant it between real rungs: its worker must be killed at the timeout.
extern "C" __global__ void mm_planted_spin_forever(int M, int N, int K, float alpha,
                                                   const float* A, const float* B, float beta,
                                                   float* C) {
    const volatile float* a = A;
    while (a[0] == a[0]) {
    }
    C[0] = alpha * B[0] + beta;
}
