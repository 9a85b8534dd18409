/* Rung 6, omp_packed: packed panels and a register-blocked micro-kernel.
 * Over omp_tiled: the blocks of A and B a core works on are first copied
 * ("packed") into contiguous, zero-padded slivers in the exact order the
 * micro-kernel reads them, so the inner loop streams two small buffers with
 * stride 1 and never misses the TLB or needs an edge test. The micro-kernel
 * keeps an MR x NR block of C in vector registers for the whole KC-deep step:
 * per step of k it loads NR values of B, broadcasts MR values of A and issues
 * MR*NR/VL fused multiply-adds, where omp_tiled loaded and stored C on every
 * update. The loop nest is the one of BLIS/GotoBLAS:
 *
 *   jc (NC columns)  pc (KC of k: pack B)  ic (MC rows, threads: pack A)
 *     jr (NR columns)  ir (MR rows)  micro-kernel over KC
 *
 * The micro-kernel is plain C on GCC/clang vector types, so it compiles for
 * any target; the vector width and MR x NR follow the ISA the compiler
 * targets (AVX-512, AVX/AVX2, else 128-bit vectors).
 *
 * The packed panels live in a buffer kept from call to call, on a mapping of
 * its own (work_buffer.h): no page faults after the first call, and the same
 * place in every process. */
#define _GNU_SOURCE /* mmap's anonymous mappings and madvise */
#include <errno.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#else /* built without OpenMP: one thread */
static inline int omp_get_max_threads(void) { return 1; }
static inline int omp_get_thread_num(void) { return 0; }
#endif

#include "ladder.h"
#include "work_buffer.h"

#if defined(__AVX512F__)
#define VL 16 /* floats per vector: 32 registers of 16 floats */
#define MR_DEFAULT 12
#define NV_DEFAULT 2
#elif defined(__AVX__)
#define VL 8 /* 16 registers of 8 floats */
#define MR_DEFAULT 6
#define NV_DEFAULT 2
#else
#define VL 4 /* SSE, NEON, ...: 16 or 32 registers of 4 floats */
#define MR_DEFAULT 6
#define NV_DEFAULT 2
#endif

#ifndef MR
#define MR MR_DEFAULT /* rows of the register block */
#endif
#ifndef NV
#define NV NV_DEFAULT /* vectors per row of the register block */
#endif
#define NR (NV * VL) /* columns of the register block */

/* Cache blocking: a KC x NR sliver of B is reused from L1/L2 by the whole ir
 * loop, the MC x KC block of A stays in L2 for the whole jr loop, and the
 * KC x NC panel of B in L3. With AVX-512: 48 KiB, 288 KiB and 6 MiB. */
#ifndef KC
#define KC 384
#endif
#ifndef MC
#define MC (MR * 16)
#endif
#ifndef NC
#define NC (NR * 128)
#endif

typedef float vf __attribute__((vector_size(VL * sizeof(float))));

static inline vf load(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void store(float *p, vf v) { memcpy(p, &v, sizeof v); }

/* acc = sum over kc of (column of the A sliver) x (row of the B sliver). */
static inline void micro_kernel(long kc, const float *restrict ap, const float *restrict bp,
                                vf acc[MR][NV]) {
    vf c[MR][NV];
    for (int r = 0; r < MR; ++r)
        for (int v = 0; v < NV; ++v) c[r][v] = (vf){0};
    for (long l = 0; l < kc; ++l) {
        vf b[NV];
        for (int v = 0; v < NV; ++v) b[v] = load(bp + v * VL);
        for (int r = 0; r < MR; ++r) {
            const float a = ap[r];
            for (int v = 0; v < NV; ++v) c[r][v] += a * b[v];
        }
        ap += MR;
        bp += NR;
    }
    for (int r = 0; r < MR; ++r)
        for (int v = 0; v < NV; ++v) acc[r][v] = c[r][v];
}

/* One vector of the block: alpha * acc + beta * C, C unread when beta == 0. */
static inline vf epilogue(vf acc, const float *c, float alpha, float beta) {
    return beta == 0.0f ? alpha * acc : alpha * acc + beta * load(c);
}

/* The block of C at C (mr x nr of it valid, row stride ldc) = alpha * acc + beta * C.
 * Edge blocks go through a full-size scratch block with the same vector
 * arithmetic, so an element's value never depends on where the blocks fall. */
static inline void write_back(float *C, long ldc, long mr, long nr, vf acc[MR][NV], float alpha,
                              float beta) {
    if (mr == MR && nr == NR) {
        for (int r = 0; r < MR; ++r)
            for (int v = 0; v < NV; ++v)
                store(C + r * ldc + v * VL, epilogue(acc[r][v], C + r * ldc + v * VL, alpha, beta));
        return;
    }
    float scratch[MR][NR];
    if (beta != 0.0f) {
        memset(scratch, 0, sizeof scratch);
        for (long r = 0; r < mr; ++r) memcpy(scratch[r], C + r * ldc, nr * sizeof(float));
    }
    for (int r = 0; r < MR; ++r)
        for (int v = 0; v < NV; ++v)
            store(&scratch[r][v * VL], epilogue(acc[r][v], &scratch[r][v * VL], alpha, beta));
    for (long r = 0; r < mr; ++r) memcpy(C + r * ldc, scratch[r], nr * sizeof(float));
}

/* Sliver s of the panel B[pc : pc+kc, jc : jc+nc]: kc rows of NR columns, zero-padded past n. */
static void pack_b_sliver(long n, const float *B, long pc, long kc, long jc, long nc, long s,
                          float *bp) {
    const long j0 = jc + s * NR, w = LADDER_MIN(NR, jc + nc - j0);
    float *dst = bp + s * kc * NR;
    for (long l = 0; l < kc; ++l, dst += NR) {
        const float *src = B + (pc + l) * n + j0;
        if (w == NR) {
            memcpy(dst, src, NR * sizeof(float));
        } else {
            for (long j = 0; j < w; ++j) dst[j] = src[j];
            for (long j = w; j < NR; ++j) dst[j] = 0.0f;
        }
    }
}

/* A[ic : ic+mc, pc : pc+kc] into MR-high slivers, each kc x MR (column by column), zero-padded. */
static void pack_a(long k, const float *A, long ic, long mc, long pc, long kc, float *ap) {
    for (long i0 = 0; i0 < mc; i0 += MR, ap += kc * MR) {
        const long h = LADDER_MIN(MR, mc - i0);
        const float *src = A + (ic + i0) * k + pc;
        if (h == MR) {
            for (long l = 0; l < kc; ++l)
                for (int r = 0; r < MR; ++r) ap[l * MR + r] = src[r * k + l];
        } else {
            for (long l = 0; l < kc; ++l)
                for (int r = 0; r < MR; ++r) ap[l * MR + r] = r < h ? src[r * k + l] : 0.0f;
        }
    }
}

static struct work_buffer_kept kept = WORK_BUFFER_KEPT_INIT;

void mm_omp_packed(MM_ARGS) {
    const int threads = omp_get_max_threads();
    /* Row blocks: at most MC rows each, a multiple of the thread count in number
     * (while there are enough MR-row strips), and equal to within one strip, so
     * that every thread gets the same work. The k-steps are evened out likewise. */
    const long strips = (m + MR - 1) / MR;
    long blocks = (strips + MC / MR - 1) / (MC / MR);
    blocks = LADDER_MIN(strips, (blocks + threads - 1) / threads * threads);
    const long mc_max = (strips + blocks - 1) / blocks * MR;
    const long ksteps = (k + KC - 1) / KC, kc_max = (k + ksteps - 1) / ksteps;
    const long nc_max = LADDER_MIN(NC, (n + NR - 1) / NR * NR);
    /* The panel of B, then each thread's block of A, 64-byte aligned. */
    const size_t b_floats = ((size_t)kc_max * nc_max + 15) / 16 * 16;
    const size_t a_floats = ((size_t)kc_max * mc_max + 15) / 16 * 16;
    const struct work_buffer work = work_buffer_take(&kept, b_floats + threads * a_floats);
    if (work.floats == NULL) {
        /* Out of memory for the packs: fail visibly rather than time another algorithm
         * under this rung's name. C becomes NaN, so verification fails the row, and
         * errno says why. */
        work_buffer_give_back(&kept, work);
        const size_t total = (size_t)batch * (size_t)m * (size_t)n;
        for (size_t i = 0; i < total; ++i) c[i] = __builtin_nanf("");
        errno = ENOMEM;
        return;
    }
    float *bpack = work.floats, *apack = work.floats + b_floats;

#pragma omp parallel num_threads(threads)
    {
        float *ap = apack + (size_t)omp_get_thread_num() * a_floats;
        for (long p = 0; p < batch; ++p) {
            const float *A = MM_A(p), *B = MM_B(p);
            float *C = MM_C(p);
            for (long jc = 0; jc < n; jc += NC) {
                const long nc = LADDER_MIN(NC, n - jc), slivers = (nc + NR - 1) / NR;
                for (long pc = 0; pc < k; pc += kc_max) {
                    const long kc = LADDER_MIN(kc_max, k - pc);
                    /* The first k-step applies beta; later ones accumulate. */
                    const float b_step = pc == 0 ? beta : 1.0f;
#pragma omp for schedule(static)
                    for (long s = 0; s < slivers; ++s) pack_b_sliver(n, B, pc, kc, jc, nc, s, bpack);
                    /* (implicit barrier: the panel of B is complete) */
#pragma omp for schedule(dynamic, 1)
                    for (long blk = 0; blk < blocks; ++blk) {
                        const long ic = blk * strips / blocks * MR;
                        const long mc = LADDER_MIN(m, (blk + 1) * strips / blocks * MR) - ic;
                        pack_a(k, A, ic, mc, pc, kc, ap);
                        for (long jr = 0; jr < nc; jr += NR) {
                            const float *bs = bpack + (jr / NR) * kc * NR;
                            for (long ir = 0; ir < mc; ir += MR) {
                                vf acc[MR][NV];
                                micro_kernel(kc, ap + (ir / MR) * kc * MR, bs, acc);
                                write_back(C + (ic + ir) * n + jc + jr, n,
                                           LADDER_MIN(MR, mc - ir), LADDER_MIN(NR, nc - jr), acc,
                                           alpha, b_step);
                            }
                        }
                    }
                    /* (implicit barrier: nobody still reads the panel before it is repacked) */
                }
            }
        }
    }
    work_buffer_give_back(&kept, work);
}
