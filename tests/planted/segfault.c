// Test only, never in the catalogue: a CPU rung that writes through a null pointer,
// so the process that runs it dies of SIGSEGV. The isolation tests build it in their
// temporary folder and plant it as cpu.seq_ikj's entry: it must cost one row.
void mm_planted_segfault(long m, long n, long k, long batch, float alpha, const float *a,
                         const float *b, float beta, float *c) {
    volatile float *nowhere = (volatile float *)0;
    nowhere[m + n + k + batch] = alpha * a[0] * b[0] + beta * c[0];
}
