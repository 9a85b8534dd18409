"""Three short C probes of the host CPU, compiled with cffi and cached per machine.

- **FMA throughput**: each thread runs twelve independent chains of vector FMAs
  (``x = x * m + a`` on the widest vectors the compiler targets with ``-march=native``),
  enough chains to hide the FMA latency on every x86-64 and AArch64 core. FLOPs per
  second of the thread's own CPU time is what the core's FMA units deliver at the
  clock it ran at: a core's real FP32 peak, whatever a table of vector extensions
  says (Zen 1 runs AVX2 on two 128-bit units, Zen 4 AVX-512 on two 256-bit ones).
  Thread CPU time leaves out the time another program had the core, so a busy
  neighbour does not lower the figure. It runs at every thread count the suite may
  use (at most the cores): more active cores may mean a lower clock.
- **Clock**: a chain of dependent register-to-register integer adds retires one add per
  cycle, so adds per second of thread CPU time is the clock (adds of an immediate would
  not do: newer Intel cores run chains of them several a cycle); it serves the table's
  cross-check where the kernel reports no maximum clock (virtual machines).
- **Memory copy**: each thread copies its share of a 256 MiB buffer with ``memcpy``
  (after touching its own pages first); bytes read plus bytes written per second of
  wall time is the memory bandwidth a row's roof is drawn with (:mod:`mmsuite.roof`).
  Wall time counts a neighbour's turns on the core, so a copy measured while other
  processes used the CPU is measured again by the next run, keeping the best figure of
  each thread count, until one is taken on a quiet machine.

Compiling takes about a second, so the figures are kept in
``$XDG_CACHE_HOME/mmsuite/cpu-probe/`` (``~/.cache/...``), one file per machine
(host name, CPU model, flags and core count), and measured again only when one of
those changes or the file is removed.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import platform
import sys
import tempfile
from functools import cache
from pathlib import Path

from .host import CPU_MODEL, cpu_flags, cpu_model
from .load import DISTORTING_SHARE, LoadWindow

#: Bump when the probes change: older cached figures are then measured again.
PROBE_VERSION = 4
CHAINS = 12
#: FMAs per chain in one timing: about 20 ms a core at 100 GFLOP/s.
FMA_ITERATIONS = 10_000_000
#: The best of this many timings (the least disturbed one).
REPEATS = 3
#: Bytes of each buffer the memory copy probe copies: beyond the last-level cache of the
#: CPUs it runs on (an EPYC's L3 is 32 MiB a CCD), so that the copy measures DRAM.
COPY_BYTES = 256 * 2**20

_SOURCE = r"""
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__AVX512F__)
#define MM_LANES 16
#elif defined(__AVX__)
#define MM_LANES 8
#else
#define MM_LANES 4
#endif
typedef float mm_vec __attribute__((vector_size(MM_LANES * sizeof(float))));

static double thread_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int mm_fma_lanes(void) { return MM_LANES; }

/* Each of `threads` threads runs `iterations` rounds of 12 independent vector FMAs and
   writes its GFLOP/s per second of its own CPU time to per_thread[its index]. The
   values come from the caller so that the compiler can neither fold nor merge chains
   (with constants, GCC merged two of twelve and the figure read 9% high). */
void mm_fma_probe(int threads, long iterations, float start, float step, float m_value,
                  float a_value, double *per_thread) {
#pragma omp parallel num_threads(threads)
    {
        mm_vec x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, m, a;
        for (int l = 0; l < MM_LANES; l++) {  /* m < 1: the chains settle near 1, no overflow */
            x0[l] = start; x1[l] = start + step; x2[l] = start + 2 * step;
            x3[l] = start + 3 * step; x4[l] = start + 4 * step; x5[l] = start + 5 * step;
            x6[l] = start + 6 * step; x7[l] = start + 7 * step; x8[l] = start + 8 * step;
            x9[l] = start + 9 * step; x10[l] = start + 10 * step; x11[l] = start + 11 * step;
            m[l] = m_value; a[l] = a_value;
        }
        double start = thread_seconds();
        for (long i = 0; i < iterations; i++) {
            x0 = x0 * m + a; x1 = x1 * m + a; x2 = x2 * m + a; x3 = x3 * m + a;
            x4 = x4 * m + a; x5 = x5 * m + a; x6 = x6 * m + a; x7 = x7 * m + a;
            x8 = x8 * m + a; x9 = x9 * m + a; x10 = x10 * m + a; x11 = x11 * m + a;
        }
        double seconds = thread_seconds() - start;
        mm_vec s = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7 + x8 + x9 + x10 + x11;
        float total = 0.0f;
        for (int l = 0; l < MM_LANES; l++) total += s[l];
        /* The sum keeps the chains alive; it is never 0, so it never changes the figure. */
        double flops = 2.0 * 12 * MM_LANES * (double)iterations * (total != 0.0f);
        per_thread[omp_get_thread_num()] = seconds > 0 ? flops / seconds / 1e9 : 0.0;
    }
}

static double wall_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* GB/s (bytes read + bytes written) of `threads` threads each copying its share of a
   `bytes` buffer with memcpy, the best of `repeats` timings; each thread first touches
   its own share, so that the pages lie near the core that copies them. 0 when the
   buffers cannot be allocated. */
double mm_copy_gbs(int threads, long bytes, int repeats) {
    char *src = malloc(bytes), *dst = malloc(bytes);
    if (src == NULL || dst == NULL) { free(src); free(dst); return 0.0; }
    long share = (bytes / threads) & ~4095L;
    double best = 0.0;
    for (int r = -1; r < repeats; r++) {  /* r = -1 places the pages */
        double start = wall_seconds();
#pragma omp parallel num_threads(threads)
        {
            int t = omp_get_thread_num();
            long offset = t * share, length = t == threads - 1 ? bytes - offset : share;
            if (r < 0) { memset(src + offset, 1, length); memset(dst + offset, 0, length); }
            else memcpy(dst + offset, src + offset, length);
        }
        double seconds = wall_seconds() - start;
        if (r >= 0 && seconds > 0 && 2.0 * bytes / seconds / 1e9 > best)
            best = 2.0 * bytes / seconds / 1e9;
    }
    volatile char keep = dst[bytes - 1];  /* the copy is used: never optimised away */
    (void)keep;
    free(src); free(dst);
    return best;
}

double mm_clock_mhz(long n) {
    double start = thread_seconds();
    long x = 0;
    for (long i = 0; i < n; i++) {
#if defined(__x86_64__)
        /* A register operand, not an immediate: newer Intel cores run chains of
           add-immediate several a cycle. A 16-core Xeon VM (2.1 GHz base, AVX-512) read
           4860-5991 MHz with immediates, 2659-2830 with a register: 64 FLOPs a cycle. */
        __asm__ volatile("add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0"
                         : "+r"(x) : "r"(1L));
#elif defined(__aarch64__)
        __asm__ volatile("add %0, %0, #1\n\tadd %0, %0, #1\n\tadd %0, %0, #1\n\t"
                         "add %0, %0, #1" : "+r"(x));
#else
        return 0.0;
#endif
    }
    double seconds = thread_seconds() - start;
    return seconds > 0 ? 4.0 * (double)n / seconds / 1e6 : 0.0;
}
"""

_CDEF = """
int mm_fma_lanes(void);
void mm_fma_probe(int threads, long iterations, float start, float step, float m_value,
                  float a_value, double *per_thread);
double mm_clock_mhz(long n);
double mm_copy_gbs(int threads, long bytes, int repeats);
"""

#: -ffp-contract=fast turns x * m + a into one FMA instruction (-std=c11 would forbid it).
FLAGS = ["-O2", "-fopenmp", "-ffp-contract=fast"] + (
    ["-march=native"] if platform.machine() in ("x86_64", "AMD64") else ["-mcpu=native"])


def thread_counts(cores: int) -> list[int]:
    """The thread counts probed: every one up to 8 cores, then powers of two and all cores."""
    if cores <= 8:
        return list(range(1, cores + 1))
    return sorted({*(2**i for i in range(cores.bit_length()) if 2**i <= cores), cores})


def _measure() -> dict:
    """Compile and run both probes (about a second); raises when there is no C compiler."""
    from cffi import FFI

    ffi = FFI()
    ffi.cdef(_CDEF)
    ffi.set_source("_mmsuite_cpu_probe", _SOURCE, extra_compile_args=FLAGS,
                   extra_link_args=["-fopenmp"])
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="mmsuite-probe-") as tmp:
        ffi.compile(tmpdir=tmp)
        sys.path.insert(0, tmp)
        try:
            module = importlib.import_module("_mmsuite_cpu_probe")
        finally:
            sys.path.remove(tmp)
        sys.modules.pop("_mmsuite_cpu_probe", None)
        lib = module.lib
        per_thread = ffi.new("double[]", cores)
        fma: dict[str, float] = {}
        for threads in thread_counts(cores):
            best = 0.0
            for _ in range(REPEATS):
                lib.mm_fma_probe(threads, FMA_ITERATIONS, 1.0, 0.01, 0.9999, 1e-4, per_thread)
                best = max(best, sum(per_thread[i] for i in range(threads)))
            fma[str(threads)] = round(best, 2)
        clock = max(lib.mm_clock_mhz(20_000_000) for _ in range(5))
        lanes = lib.mm_fma_lanes()
        window = LoadWindow.start()
        copy = {str(threads): round(gbs, 2) for threads in thread_counts(cores)
                if (gbs := lib.mm_copy_gbs(threads, COPY_BYTES, REPEATS)) > 0}
        share = window.finish()["others_share"]
    return {"fma_gflops": fma, "lanes": lanes, "chains": CHAINS,
            "clock_mhz": round(clock) if clock > 0 else None, "flags": " ".join(FLAGS),
            "copy_gbs": copy, "copy_bytes": COPY_BYTES,
            # A copy is timed by the wall clock: one measured while others used the CPU
            # may read low, and is measured again on the next run (load_or_measure).
            "copy_loaded": share is not None and share > DISTORTING_SHARE}


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mmsuite" / "cpu-probe"


def _cpu_identity() -> str:
    """Family, model and stepping (virtual machines often name every CPU "AMD EPYC")."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor()
    wanted = ("vendor_id", "cpu family", "model", "stepping", "CPU implementer", "CPU part")
    found = {}
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip() in wanted and key.strip() not in found:
            found[key.strip()] = value.strip()
    return " ".join(f"{k}={v}" for k, v in found.items())


def machine_key() -> str:
    """What must stay the same for cached figures to hold: host, CPU model, flags, cores."""
    text = "|".join([platform.node(), cpu_model(), _cpu_identity(),
                     " ".join(sorted(cpu_flags())), str(os.cpu_count()), str(PROBE_VERSION)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def load_or_measure(folder: Path | None = None) -> dict | None:
    """The probes' figures for this machine, from the cache or measured now (and cached).

    None when they cannot be measured (no C compiler); ``cached`` says where they came
    from. A cache that cannot be written only costs the next run another second.
    """
    path = (folder or cache_dir()) / f"{machine_key()}.json"
    cached: dict = {}
    try:
        cached = json.loads(path.read_text())
        if cached.get("version") == PROBE_VERSION and cached.get("fma_gflops") \
                and not cached.get("copy_loaded"):
            return {**cached, "cached": True}
    except (OSError, ValueError, AttributeError):
        cached = {}
    try:
        figures = _measure()
    except Exception:  # no compiler, no cffi backend: the CPU peak falls back to the table
        return {**cached, "cached": True} if cached.get("fma_gflops") else None
    if cached.get("version") == PROBE_VERSION and isinstance(cached.get("copy_gbs"), dict):
        # Load only ever slows a copy: the best figure of each thread count so far holds.
        figures["copy_gbs"] = {t: max(float(v), float(cached["copy_gbs"].get(t) or 0.0))
                               for t, v in (figures.get("copy_gbs") or {}).items()}
    figures = {"version": PROBE_VERSION, CPU_MODEL: cpu_model(), "host": platform.node(),
               "cores": os.cpu_count(), **figures}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(figures, indent=1) + "\n")
    except OSError:
        pass
    return {**figures, "cached": False}


@cache
def figures() -> dict | None:
    """:func:`load_or_measure` once per process."""
    return load_or_measure()


def copy_figures() -> dict | None:
    """The memory copy probe's figures for a run's environment (``cpu_copy_probe``): GB/s
    by thread count, read + written; None without a C compiler."""
    probe = figures()
    if not probe or not probe.get("copy_gbs"):
        return None
    return {"gbs_by_threads": probe["copy_gbs"], "bytes": probe.get("copy_bytes"),
            "cached": probe.get("cached", False)}
