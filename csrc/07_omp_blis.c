/* Rung 7, omp_blis: a BLIS-design kernel with a hand-written micro-kernel.
 * It keeps omp_packed's loop nest and packed panels, and adds:
 *
 * - A micro-kernel in intrinsics, sized to the register file and the two FMA
 *   pipes. With AVX-512 it is MR x NR = 14 x 32: 28 zmm accumulators, 2 zmm
 *   for the row of B and 1 for the broadcast element of A (31 of the 32
 *   registers), so a k-step is 28 independent FMAs (14 cycles on two pipes,
 *   far more than the FMA latency) against 2 vector loads and 14 broadcasts;
 *   omp_packed's 12 x 32 uses 24. The accumulators are named variables, as
 *   compilers keep an array of 28 vectors in memory. Alone, on slivers in
 *   L1/L2, it runs at the FP32 peak of a core (240-250 GFLOP/s on one Zen 5
 *   core); what is left to gain is around it (below). With
 *   AVX2 it is 6 x 16 (12 ymm accumulators of 16 registers); on other CPUs
 *   the compiler's generic 4-wide vectors, 6 x 8.
 * - Edges without waste: a partial block of C runs a kernel compiled for its
 *   exact number of rows (and for one vector instead of two when it is at
 *   most VL wide), written back with masked loads and stores, where
 *   omp_packed computed a full block into a scratch copy.
 * - The block of C the next micro-kernel call writes is prefetched, a row
 *   every 8 k-steps of this call, so the write-back does not wait on memory
 *   (at 2048^3 this alone is worth about 10%).
 * - Cache blocking from the caches of the machine it runs on (sysfs, else
 *   sysconf, else defaults): the KC x NR sliver of B a third more than L1,
 *   the MC x KC block of A half of L2, the KC x NC panel of B half of L3.
 * - Cheaper packing: A is transposed into its slivers 16 x 16 in registers
 *   (AVX-512), where omp_packed copies it element by element.
 * - Balanced threads with few barriers: each thread takes an equal share of
 *   the rows (and packs its own A), or, when that leaves the threads uneven
 *   (few rows), all share each packed block of A and split its columns.
 *   Panels of B and shared blocks of A are double-buffered, so one barrier
 *   per panel (and per shared block) suffices.
 *
 * Loop nest (as BLIS and GotoBLAS):
 *   jc (NC columns)  pc (KC of k: pack B)  ic (MC rows: pack A)
 *     jr (NR columns)  ir (MR rows)  micro-kernel over KC
 *
 * Every element of C is summed by one thread in the same order whatever the
 * thread count, so results do not depend on --threads. When the packing
 * buffer cannot be allocated the rung fails: C becomes NaN and errno ENOMEM,
 * as omp_packed does; it never runs another algorithm under its name. */
#define _GNU_SOURCE /* sysconf's cache queries; work_buffer.h's mmap and madvise */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#else /* built without OpenMP: one thread */
static inline int omp_get_max_threads(void) { return 1; }
static inline int omp_get_thread_num(void) { return 0; }
static inline int omp_get_num_threads(void) { return 1; }
#endif

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

#include "mm.h"
#include "work_buffer.h"

#define MIN(x, y) ((x) < (y) ? (x) : (y))
#define MAX(x, y) ((x) > (y) ? (x) : (y))

/* ------------------------------------------------------------ vector layer */
#if defined(__AVX512F__)
#define ISA "avx512"
#define VL 16
#define MR 14
#define NV 2
typedef __m512 vec;
static inline vec vzero(void) { return _mm512_setzero_ps(); }
static inline vec vload(const float *p) { return _mm512_loadu_ps(p); }
static inline vec vbcast(const float *p) { return _mm512_set1_ps(*p); }
static inline vec vfma(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
static inline vec vmul(vec a, vec b) { return _mm512_mul_ps(a, b); }
static inline vec vset1(float x) { return _mm512_set1_ps(x); }
static inline void vstore(float *p, vec v) { _mm512_storeu_ps(p, v); }
static inline __mmask16 tail_mask(long count) { return (__mmask16)((1u << count) - 1u); }
/* The first `count` lanes; the others read as zero and memory past them is not touched. */
static inline vec vload_part(const float *p, long count) {
    return _mm512_maskz_loadu_ps(tail_mask(count), p);
}
static inline void vstore_part(float *p, vec v, long count) {
    _mm512_mask_storeu_ps(p, tail_mask(count), v);
}
#elif defined(__AVX2__) && defined(__FMA__)
#define ISA "avx2"
#define VL 8
#define MR 6
#define NV 2
typedef __m256 vec;
static inline vec vzero(void) { return _mm256_setzero_ps(); }
static inline vec vload(const float *p) { return _mm256_loadu_ps(p); }
static inline vec vbcast(const float *p) { return _mm256_broadcast_ss(p); }
static inline vec vfma(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
static inline vec vmul(vec a, vec b) { return _mm256_mul_ps(a, b); }
static inline vec vset1(float x) { return _mm256_set1_ps(x); }
static inline void vstore(float *p, vec v) { _mm256_storeu_ps(p, v); }
static inline __m256i tail_mask(long count) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)count),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline vec vload_part(const float *p, long count) {
    return _mm256_maskload_ps(p, tail_mask(count));
}
static inline void vstore_part(float *p, vec v, long count) {
    _mm256_maskstore_ps(p, tail_mask(count), v);
}
#else
/* Any other CPU: the compiler's generic 4-wide vectors (SSE, NEON, or scalar
 * code where there is no SIMD); 6 x 8 accumulators fit 16 registers. */
#define ISA "generic"
#if defined(__GNUC__) && !defined(__clang__)
/* ISO C mode turns GCC's contraction off; a * b + c should be one FMA where
 * the ISA has one (NEON, ...). clang contracts within an expression already. */
#pragma GCC optimize("fp-contract=fast")
#endif
#define VL 4
#define MR 6
#define NV 2
typedef float vec __attribute__((vector_size(VL * sizeof(float))));
static inline vec vzero(void) { return (vec){0.0f, 0.0f, 0.0f, 0.0f}; }
static inline vec vload(const float *p) {
    vec v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline vec vset1(float x) { return (vec){x, x, x, x}; }
static inline vec vbcast(const float *p) { return vset1(*p); }
static inline vec vfma(vec a, vec b, vec c) { return a * b + c; }
static inline vec vmul(vec a, vec b) { return a * b; }
static inline void vstore(float *p, vec v) { memcpy(p, &v, sizeof v); }
static inline vec vload_part(const float *p, long count) {
    vec v = vzero();
    memcpy(&v, p, (size_t)count * sizeof(float));
    return v;
}
static inline void vstore_part(float *p, vec v, long count) {
    memcpy(p, &v, (size_t)count * sizeof(float));
}
#endif

#define NR (NV * VL)

#if defined(__GNUC__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#define PREFETCH_W(p) __builtin_prefetch((p), 1, 3)
#else
#define ALWAYS_INLINE inline
#define PREFETCH_W(p) ((void)(p))
#endif

/* Every cache line of a row of a block of C (NR floats at any alignment). */
static ALWAYS_INLINE void prefetch_row(const float *p) {
    for (int i = 0; i < NR; i += 16) PREFETCH_W(p + i);
    PREFETCH_W(p + NR - 1);
}

/* ------------------------------------------------------------ micro-kernel */

/* One row of the block: C[0:nr] = alpha * (acc0, acc1) + beta * C, C unread when beta == 0. */
static ALWAYS_INLINE void write_row(float *restrict cr, vec acc0, vec acc1, const int nv, long nr,
                                    vec va, float beta) {
    const vec vb = vset1(beta);
    for (int v = 0; v < nv; ++v) {
        const long count = MIN(VL, nr - v * VL);
        vec out = vmul(va, v == 0 ? acc0 : acc1);
        if (count == VL) {
            if (beta != 0.0f) out = vfma(vb, vload(cr + v * VL), out);
            vstore(cr + v * VL, out);
        } else {
            if (beta != 0.0f) out = vfma(vb, vload_part(cr + v * VL, count), out);
            vstore_part(cr + v * VL, out, count);
        }
    }
}

/* The accumulators are named variables, not an array: compilers keep a
 * 28-vector array in memory (it is larger than they scalarise), which would
 * put a load and a store around every FMA. */
#define ACC_DECLARE(r) vec c##r##_0 = vzero(), c##r##_1 = vzero();
#define ACC_UPDATE(r)                                        \
    if (rows > r) {                                          \
        const vec ar = vbcast(a + r);                        \
        c##r##_0 = vfma(ar, b0, c##r##_0);                   \
        if (nv > 1) c##r##_1 = vfma(ar, b1, c##r##_1);       \
    }
#define ACC_WRITE(r) \
    if (rows > r) write_row(c + r * ldc, c##r##_0, c##r##_1, nv, nr, va, beta);
#define FOR_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)

/* C[0:rows, 0:nr] (row stride ldc) = alpha * (A sliver x B sliver) + beta * C,
 * with C unread when beta == 0. `rows` (<= MR) and `nv` (1 or 2 vectors, with
 * nr <= nv * VL) are compile-time constants at every call (see run_kernel), so
 * only the accumulators in use exist. The slivers are kc x MR and kc x NR, packed.
 * `next` is the block of C the following call will write: its lines are
 * prefetched one row every few k-steps, so they are in L1 when that call
 * ends, without a burst of misses that would overflow the miss buffers. */
static ALWAYS_INLINE void micro_kernel(const int rows, const int nv, long kc,
                                       const float *restrict a, const float *restrict b,
                                       float *restrict c, long ldc, long nr, float alpha,
                                       float beta, const float *next) {
    FOR_ROWS(ACC_DECLARE)
#define K_STEP                                                              \
    do {                                                                    \
        const vec b0 = vload(b), b1 = nv > 1 ? vload(b + VL) : vzero();     \
        FOR_ROWS(ACC_UPDATE)                                                \
        a += MR;                                                            \
        b += NR;                                                            \
    } while (0)
    long l = 0;
    for (int r = 0; r < MR && l + 8 <= kc; ++r, l += 8) {
        prefetch_row(next + r * ldc);
        for (int u = 0; u < 8; ++u) K_STEP;
    }
    for (; l < kc; ++l) K_STEP;
#undef K_STEP
    const vec va = vset1(alpha);
    FOR_ROWS(ACC_WRITE)
}

/* The micro-kernel compiled for exactly `mr` rows and for one vector or NV. */
#define KERNEL_CASE(rows)                                                       \
    case rows:                                                                  \
        if (one)                                                                \
            micro_kernel(rows, 1, kc, a, b, c, ldc, nr, alpha, beta, next);     \
        else                                                                    \
            micro_kernel(rows, NV, kc, a, b, c, ldc, nr, alpha, beta, next);    \
        break;

static void run_kernel(long mr, long nr, long kc, const float *restrict a,
                       const float *restrict b, float *restrict c, long ldc, float alpha,
                       float beta, const float *next) {
    const int one = nr <= VL;
    switch (mr) {
        KERNEL_CASE(1)
        KERNEL_CASE(2)
        KERNEL_CASE(3)
        KERNEL_CASE(4)
#if MR > 4
        KERNEL_CASE(5)
        KERNEL_CASE(6)
#endif
#if MR > 6
        KERNEL_CASE(7)
        KERNEL_CASE(8)
        KERNEL_CASE(9)
        KERNEL_CASE(10)
        KERNEL_CASE(11)
        KERNEL_CASE(12)
        KERNEL_CASE(13)
        KERNEL_CASE(14)
#endif
    default:
        break;
    }
}

/* ---------------------------------------------------------------- packing */

/* Slivers [s0, s1) of the panel B[pc : pc+kc, jc : jc+nc], each kc rows of NR
 * floats, zero past n. Row by row: each row of B is read in one sequential
 * run (one page, one prefetch stream) and spread over the slivers, where a
 * sliver at a time would touch a new page of B on every row. */
static void pack_b_slivers(long n, const float *B, long pc, long kc, long jc, long nc, long s0,
                           long s1, float *restrict bp) {
    if (s0 >= s1) return;
    const long full = MIN(s1, (nc / NR)); /* slivers [s0, full) are NR wide */
    for (long l = 0; l < kc; ++l) {
        const float *src = B + (pc + l) * n + jc;
        float *dst = bp + l * NR;
        long s = s0;
        for (; s < full; ++s)
            for (int v = 0; v < NV; ++v)
                vstore(dst + s * kc * NR + v * VL, vload(src + s * NR + v * VL));
        for (; s < s1; ++s) {
            const long w = nc - s * NR;
            for (int v = 0; v < NV; ++v)
                vstore(dst + s * kc * NR + v * VL,
                       vload_part(src + s * NR + v * VL, MAX(0, MIN(VL, w - v * VL))));
        }
    }
}

#if defined(__AVX512F__)
/* 16 k-steps of a full strip: the 16 x 16 block (rows of A beyond MR read as
 * zero, as do rows from h on) transposed in registers, so the k-major sliver is written with 16
 * vector stores instead of 16 * MR scalar ones. `last` masks the final store
 * to MR floats: past it lies the next strip, which another thread may pack. */
static inline void pack_a_16(const float *src, long k, long h, float *restrict dst, int last) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; ++i) r[i] = i < h ? _mm512_loadu_ps(src + i * k) : _mm512_setzero_ps();
    for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* r[4i + x], 128-bit lane q: rows 4i..4i+3 of column 4q + x. */
    for (int i = 0; i < 4; ++i) {
        const __m512d t0 = _mm512_castps_pd(t[4 * i]), t1 = _mm512_castps_pd(t[4 * i + 1]);
        const __m512d t2 = _mm512_castps_pd(t[4 * i + 2]), t3 = _mm512_castps_pd(t[4 * i + 3]);
        r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
        r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
        r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
        r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
    }
    /* Column 4q + x: lane i of it is lane q of r[4i + x]. */
    for (int x = 0; x < 4; ++x) {
        const __m512 u0 = _mm512_shuffle_f32x4(r[x], r[4 + x], 0x44);
        const __m512 u1 = _mm512_shuffle_f32x4(r[x], r[4 + x], 0xEE);
        const __m512 u2 = _mm512_shuffle_f32x4(r[8 + x], r[12 + x], 0x44);
        const __m512 u3 = _mm512_shuffle_f32x4(r[8 + x], r[12 + x], 0xEE);
        t[x] = _mm512_shuffle_f32x4(u0, u2, 0x88);
        t[4 + x] = _mm512_shuffle_f32x4(u0, u2, 0xDD);
        t[8 + x] = _mm512_shuffle_f32x4(u1, u3, 0x88);
        t[12 + x] = _mm512_shuffle_f32x4(u1, u3, 0xDD);
    }
    /* In order, so each store's spill past MR floats is overwritten by the next. */
    for (int j = 0; j < 15; ++j) _mm512_storeu_ps(dst + j * MR, t[j]);
    if (last)
        _mm512_mask_storeu_ps(dst + 15 * MR, (__mmask16)((1u << MR) - 1u), t[15]);
    else
        _mm512_storeu_ps(dst + 15 * MR, t[15]);
}
#endif

/* Strip t of the block A[ic : ic+mc, pc : pc+kc]: MR rows stored k by k
 * (kc x MR), zero past m. */
static void pack_a_strip(long k, const float *A, long ic, long mc, long pc, long kc, long t,
                         float *restrict ap) {
    const long i0 = t * MR, h = MIN(MR, mc - i0);
    const float *src = A + (ic + i0) * k + pc;
    float *dst = ap + t * kc * MR;
    long l = 0;
#if defined(__AVX512F__)
    for (; l + 16 <= kc; l += 16) pack_a_16(src + l, k, h, dst + l * MR, l + 16 == kc);
#endif
    for (; l < kc; ++l)
        for (int r = 0; r < MR; ++r) dst[l * MR + r] = r < h ? src[r * k + l] : 0.0f;
}

/* --------------------------------------------------------------- blocking */

/* Size in bytes of the level-`level` data cache of cpu0, or 0 when unknown.
 * sysfs first: it gives the cache cpu0 shares with its neighbours (a Zen 5
 * CCD's 32 MiB of L3), where glibc's sysconf may give the whole package's
 * (384 MiB on a 12-CCD EPYC) or nothing on other C libraries. */
static long cache_bytes(int level) {
    long size = 0;
    for (int index = 0; size <= 0 && index < 8; ++index) {
        char path[96];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", index);
        FILE *f = fopen(path, "r");
        if (f == NULL) break;
        int lvl = 0;
        const int ok = fscanf(f, "%d", &lvl) == 1;
        fclose(f);
        if (!ok || lvl != level) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", index);
        char type[32] = "";
        f = fopen(path, "r");
        if (f == NULL) continue;
        const int typed = fscanf(f, "%31s", type) == 1;
        fclose(f);
        if (!typed || strcmp(type, "Instruction") == 0) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", index);
        f = fopen(path, "r");
        if (f == NULL) continue;
        char unit = 'K';
        long value = 0;
        if (fscanf(f, "%ld%c", &value, &unit) >= 1)
            size = value * (unit == 'M' ? 1L << 20 : unit == 'G' ? 1L << 30 : unit == 'K' ? 1024 : 1);
        fclose(f);
    }
#if defined(_SC_LEVEL1_DCACHE_SIZE) && defined(_SC_LEVEL2_CACHE_SIZE) && \
    defined(_SC_LEVEL3_CACHE_SIZE)
    if (size <= 0) {
        const int names[] = {_SC_LEVEL1_DCACHE_SIZE, _SC_LEVEL2_CACHE_SIZE, _SC_LEVEL3_CACHE_SIZE};
        size = sysconf(names[level - 1]);
    }
#endif
    return size > 0 ? size : 0;
}

typedef struct {
    long kc, mc, nc;
} blocking;

/* KC, MC, NC for this machine's caches, read once. */
static blocking cache_blocking(void) {
    static blocking cached; /* all fields 0 until computed */
    blocking bl;
#pragma omp atomic read
    bl.kc = cached.kc;
    if (bl.kc != 0) {
        bl = cached;
        return bl;
    }
    long l1 = cache_bytes(1), l2 = cache_bytes(2), l3 = cache_bytes(3);
    if (l1 < 16384) l1 = 32768; /* unknown or implausible: a common size */
    if (l2 < 131072) l2 = 1L << 20;
    if (l3 < l2) l3 = 8 * l2;
    /* KC: the KC x NR sliver of B a third more than L1. A k-step reads NR floats
     * of it per MR x NV FMAs, which L2 sustains as well; a deep KC matters more:
     * it amortises the load and store of the block of C over more k-steps (on
     * Zen 5, 512 rather than 384 makes 512^3 one k-step and 5% faster). */
    bl.kc = MAX(64L, MIN(1024L, l1 * 4 / 3 / (NR * (long)sizeof(float)) / 16 * 16));
    /* MC: the MC x KC block of A in half of L2 (the B sliver and C pass through). */
    bl.mc = MAX((long)MR, MIN(4096L, l2 / 2 / (bl.kc * (long)sizeof(float)) / MR * MR));
    /* NC: the KC x NC panel of B in half of L3, at most 4096 columns: wider
     * panels save little (A is packed once per panel) and the buffer, kept
     * between calls, holds two. */
    bl.nc = MAX((long)NR, MIN(4096L, l3 / 2 / (bl.kc * (long)sizeof(float)) / NR * NR));
#ifdef BLIS_KC
    bl.kc = BLIS_KC;
#endif
#ifdef BLIS_MC
    bl.mc = BLIS_MC;
#endif
#ifdef BLIS_NC
    bl.nc = BLIS_NC;
#endif
    cached.mc = bl.mc;
    cached.nc = bl.nc;
#pragma omp atomic write
    cached.kc = bl.kc;
    return bl;
}

/* --------------------------------------------------------------- the rung */

static struct work_buffer_kept kept = WORK_BUFFER_KEPT_INIT;

/* Boundaries of thread `part`'s share of `count` elements cut in units of
 * `unit` (the last unit may be partial): the cut nearest to an equal share. */
static long cut(long count, long unit, int parts, int part) {
    const long units = (count + unit - 1) / unit;
    return part >= parts ? units : MIN(units, (count * part / parts + unit / 2) / unit);
}

/* Time of a strip of h rows, in rows: below 4 rows the 2 x h FMAs of a k-step
 * no longer cover the FMA latency, so a thin strip costs what 4 rows cost. */
static long strip_cost(long h) { return MAX(h, MIN(4L, (long)MR)); }

/* Time of a sliver of w columns, in columns: at most VL wide it runs one vector. */
static long sliver_cost(long w) { return w <= VL ? VL : NR; }

/* Time of the busiest thread when units [0, count) are cut among `parts`. */
static long busiest(long count, long unit, int parts, long (*cost)(long)) {
    long worst = 0;
    for (int p = 0; p < parts; ++p) {
        long total = 0;
        for (long u = cut(count, unit, parts, p); u < cut(count, unit, parts, p + 1); ++u)
            total += cost(MIN(unit, count - u * unit));
        worst = MAX(worst, total);
    }
    return worst;
}

/* Time of `rows` rows cut into strips from the first. */
static long rows_cost(long rows) { return rows / MR * MR + (rows % MR ? strip_cost(rows % MR) : 0); }

/* The block of C the micro-kernel for strip t of sliver s writes (row-major,
 * row stride n): strip t of rows from ic, sliver s of columns from jc. */
#define C_BLOCK(C, ic, t, jc, s) ((C) + ((ic) + (t) * MR) * n + (jc) + (s) * NR)

/* Strips [t0, t1) x slivers [s0, s1) of the block whose A strips start at ap
 * (packed from row ic) and whose B slivers start at bp: sliver by sliver, so
 * one sliver of B is reused by every strip of A. */
static void block_product(long n, long ic, long mc, long jc, long nc, long kc, long t0, long t1,
                          long s0, long s1, const float *ap, const float *bp, float *C,
                          float alpha, float beta) {
    if (t0 >= t1 || s0 >= s1) return;
    /* The first block of C; each micro-kernel prefetches the next one. */
    for (long r = 0; r < MR; ++r) {
        prefetch_row(C_BLOCK(C, ic, t0, jc, s0) + r * n);
    }
    for (long s = s0; s < s1; ++s) {
        const long nr = MIN(NR, nc - s * NR);
        for (long t = t0; t < t1; ++t) {
            const float *next = t + 1 < t1 ? C_BLOCK(C, ic, t + 1, jc, s) : C_BLOCK(C, ic, t0, jc, s + 1);
            run_kernel(MIN(MR, mc - t * MR), nr, kc, ap + t * kc * MR, bp + s * kc * NR,
                       C_BLOCK(C, ic, t, jc, s), n, alpha, beta, next);
        }
    }
}

void mm_omp_blis(MM_ARGS) {
    if (m <= 0 || n <= 0 || batch <= 0) return;
    if (k <= 0) { /* an empty sum: C = beta * C, not read when beta == 0 */
        const size_t total = (size_t)batch * (size_t)m * (size_t)n;
        for (size_t i = 0; i < total; ++i) c[i] = beta == 0.0f ? 0.0f : beta * c[i];
        return;
    }
    const int threads = omp_get_max_threads();
    const blocking bl = cache_blocking();
    /* Even out the k-steps and the panels; both are the same for any thread
     * count, so every element's sum keeps its order. */
    const long ksteps = (k + bl.kc - 1) / bl.kc;
    /* A multiple of 16, which A is packed by, in all steps but the last. */
    const long kc_max = ksteps == 1 ? k : ((k + ksteps - 1) / ksteps + 15) / 16 * 16;
    const long npanels = (n + bl.nc - 1) / bl.nc;
    const long nc_max = ((n + npanels - 1) / npanels + NR - 1) / NR * NR;
    const long strips = (m + MR - 1) / MR;
    const long mc_max = MIN(bl.mc, strips * MR);
    /* Threads split the rows (each packs and multiplies its own strips of A
     * against the whole panel of B) or the columns of each block (all share
     * one packed block of A). Rows need one barrier per k-step, columns one
     * more per block of A: take columns only when they leave the busiest
     * thread clearly less work. */
    int by_rows = 1;
    if (threads > 1) {
        const long nc = MIN(nc_max, n); /* the first panel's columns */
        const long rows_time = rows_cost((m + threads - 1) / threads) * busiest(nc, NR, 1, sliver_cost);
        const long cols_time = busiest(nc, NR, threads, sliver_cost) * rows_cost(m);
        by_rows = rows_time <= cols_time + cols_time / 64;
    }
    /* Panels of B and blocks of A are double-buffered: a thread may pack the
     * next while another still multiplies with the current one. */
    const size_t b_floats = ((size_t)kc_max * nc_max + 15) / 16 * 16;
    const size_t a_floats = ((size_t)kc_max * mc_max + 15) / 16 * 16;
    const struct work_buffer work =
        work_buffer_take(&kept, 2 * b_floats + (size_t)(by_rows ? threads : 2) * a_floats);
    float *bpack = work.floats;
    if (bpack == NULL) {
        /* Fail visibly: C is NaN, so verification fails the row, and errno says why. */
        const size_t total = (size_t)batch * (size_t)m * (size_t)n;
        for (size_t i = 0; i < total; ++i) c[i] = __builtin_nanf("");
        work_buffer_give_back(&kept, work);
        errno = ENOMEM;
        return;
    }
    float *apack = bpack + 2 * b_floats;

#pragma omp parallel num_threads(threads)
    {
        const int me = omp_get_thread_num(), team = omp_get_num_threads();
        long panel = 0, block = 0; /* panels of B and shared blocks of A packed so far */
        /* By rows: this thread's rows [r0, r1), an equal share (the strips start
         * at r0), in blocks of at most mc_max rows. */
        const long r0 = m * me / team, r1 = m * (me + 1) / team;
        const long own_strips = (r1 - r0 + MR - 1) / MR;
        const long own_blocks = MAX(1L, (r1 - r0 + mc_max - 1) / mc_max);
        const long shared_blocks = (strips * MR + mc_max - 1) / mc_max;
        for (long p = 0; p < batch; ++p) {
            const float *A = MM_A(p), *B = MM_B(p);
            float *C = MM_C(p);
            for (long jc = 0; jc < n; jc += nc_max) {
                const long nc = MIN(nc_max, n - jc), slivers = (nc + NR - 1) / NR;
                for (long pc = 0; pc < k; pc += kc_max) {
                    const long kc = MIN(kc_max, k - pc);
                    /* The first k-step applies beta; later ones accumulate. */
                    const float b_step = pc == 0 ? beta : 1.0f;
                    float *bp = bpack + (size_t)(panel++ & 1) * b_floats;
                    pack_b_slivers(n, B, pc, kc, jc, nc, slivers * me / team,
                                   slivers * (me + 1) / team, bp);
                    /* The panel is complete; and every thread is done with the one
                     * before it, so the next may overwrite the other buffer. */
#pragma omp barrier
                    if (by_rows) {
                        float *ap = apack + (size_t)me * a_floats;
                        for (long blk = 0; blk < own_blocks; ++blk) {
                            const long t0 = own_strips * blk / own_blocks;
                            const long t1 = own_strips * (blk + 1) / own_blocks;
                            const long ic = r0 + t0 * MR, mc = MIN(r1, r0 + t1 * MR) - ic;
                            for (long t = 0; t < t1 - t0; ++t) pack_a_strip(k, A, ic, mc, pc, kc, t, ap);
                            block_product(n, ic, mc, jc, nc, kc, 0, t1 - t0, 0, slivers, ap, bp, C,
                                          alpha, b_step);
                        }
                    } else {
                        const long s0 = cut(nc, NR, team, me), s1 = cut(nc, NR, team, me + 1);
                        for (long blk = 0; blk < shared_blocks; ++blk) {
                            const long t0 = strips * blk / shared_blocks;
                            const long t1 = strips * (blk + 1) / shared_blocks;
                            const long ic = t0 * MR, mc = MIN(m, t1 * MR) - ic, nt = t1 - t0;
                            float *ap = apack + (size_t)(block++ & 1) * a_floats;
                            for (long t = nt * me / team; t < nt * (me + 1) / team; ++t)
                                pack_a_strip(k, A, ic, mc, pc, kc, t, ap);
                            /* The block is complete, and nobody still reads the one before it. */
#pragma omp barrier
                            block_product(n, ic, mc, jc, nc, kc, 0, nt, s0, s1, ap, bp, C, alpha,
                                          b_step);
                        }
                    }
                }
            }
        }
    }
    work_buffer_give_back(&kept, work);
}

/* The micro-kernel's ISA and MR x NR, and the cache blocking, for the record. */
const char *mm_omp_blis_config(void) {
    static char text[128];
    const blocking bl = cache_blocking();
    snprintf(text, sizeof text, "%s MRxNR=%dx%d KC=%ld MC=%ld NC=%ld", ISA, MR, NR, bl.kc,
             bl.mc, bl.nc);
    return text;
}
