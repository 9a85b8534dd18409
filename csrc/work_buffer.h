/* The packing rungs' (omp_packed, omp_blis) work buffer: kept from call to
 * call, on a mapping of its own.
 *
 * Kept, because a fresh buffer of this size is fresh pages from the kernel,
 * whose page faults and zeroing cost as much as the whole product at 256^3.
 *
 * Where malloc puts a buffer depends on the process's history: the heap hands
 * out addresses whose offset within a page, and so the cache sets the packed
 * slivers share with the operands, differ from one process to the next and
 * then stay fixed for the life of the process. Two processes timing the same
 * code (the two sides of `mmsuite continuous`) were measured a third apart at
 * 512^3 under load, a bias that no number of rounds averages out. A mapping of
 * its own starts on a 2 MiB boundary in every process and is advised to use
 * transparent huge pages, as the harness places the operands. */
#ifndef WORK_BUFFER_H
#define WORK_BUFFER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

#ifndef MAP_ANONYMOUS
#define MAP_ANONYMOUS MAP_ANON
#endif

#define WORK_BUFFER_HUGE_PAGE ((size_t)2 << 20)

/* The bytes a mapping of `floats` floats takes: whole 2 MiB pages, so that
 * huge pages can back all of it. On small pages a buffer lies on physical
 * pages that differ from process to process, and so do its conflicts in the
 * physically indexed caches (omp_packed's panel of B at 512^3 is 512 KiB, a
 * Zen 3 core's whole L2). */
static inline size_t work_buffer_bytes(size_t floats) {
    const size_t bytes = floats * sizeof(float) + (floats == 0);
    return (bytes + WORK_BUFFER_HUGE_PAGE - 1) / WORK_BUFFER_HUGE_PAGE * WORK_BUFFER_HUGE_PAGE;
}

/* A fresh zeroed mapping of `bytes` (from work_buffer_bytes) starting on a
 * 2 MiB boundary, or NULL. */
static inline float *work_buffer_map(size_t bytes) {
    const int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS;
    /* Over-map by one huge page, then give back the ends around the boundary. */
    const size_t span = bytes + WORK_BUFFER_HUGE_PAGE;
    char *raw = mmap(NULL, span, prot, flags, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    char *start = (char *)(((uintptr_t)raw + WORK_BUFFER_HUGE_PAGE - 1) &
                           ~(uintptr_t)(WORK_BUFFER_HUGE_PAGE - 1));
    if (start > raw) munmap(raw, (size_t)(start - raw));
    const size_t tail = (size_t)(raw + span - (start + bytes));
    if (tail > 0) munmap(start + bytes, tail);
#ifdef MADV_HUGEPAGE
    madvise(start, bytes, MADV_HUGEPAGE); /* advice only: refused, the pages stay small */
#endif
    return (float *)start;
}

static inline void work_buffer_unmap(float *buffer, size_t bytes) {
    if (buffer != NULL) munmap(buffer, bytes);
}

/* A rung's kept buffer: one call at a time holds it; a call that finds it held
 * (the rung called from two threads at once) maps its own and unmaps it after. */
struct work_buffer_kept {
    float *floats;
    size_t bytes;
    atomic_flag held;
};

#define WORK_BUFFER_KEPT_INIT {NULL, 0, ATOMIC_FLAG_INIT}

struct work_buffer {
    float *floats; /* NULL when the memory cannot be had */
    size_t bytes;
    int kept;
};

/* At least `floats` floats: the kept buffer (grown if need be), or a mapping of
 * this call's own when another call holds it. */
static inline struct work_buffer work_buffer_take(struct work_buffer_kept *kept, size_t floats) {
    struct work_buffer work = {NULL, work_buffer_bytes(floats), 0};
    work.kept = !atomic_flag_test_and_set_explicit(&kept->held, memory_order_acquire);
    if (!work.kept) {
        work.floats = work_buffer_map(work.bytes);
        return work;
    }
    if (work.bytes > kept->bytes) {
        work_buffer_unmap(kept->floats, kept->bytes);
        kept->floats = work_buffer_map(work.bytes);
        kept->bytes = kept->floats == NULL ? 0 : work.bytes;
    }
    work.floats = kept->floats;
    return work;
}

static inline void work_buffer_give_back(struct work_buffer_kept *kept, struct work_buffer work) {
    if (work.kept)
        atomic_flag_clear_explicit(&kept->held, memory_order_release);
    else
        work_buffer_unmap(work.floats, work.bytes);
}

#endif
