"""Facts about the host CPU and numpy's BLAS, read without importing any backend."""

from __future__ import annotations

import os
import platform
from pathlib import Path

#: The field of an environment (a result file's, the FMA probe's) that names the host's CPU
#: model: the same word as the C backend's name, and another thing.
CPU_MODEL = "cpu"


def allowed_cpus() -> int:
    """The CPUs this process may run on (its affinity mask), which can be fewer than the
    machine's."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


# OpenBLAS kernel families that use AVX-512; on a CPU with AVX-512 any other is slower.
_OPENBLAS_AVX512 = {"skylakex", "cooperlake", "sapphirerapids"}


def blas_info() -> dict:
    """numpy's BLAS as threadpoolctl sees it: library, version, threads, kernel architecture.

    ``warning`` is set when the architecture its kernels run as is below what the CPU
    offers (``OPENBLAS_CORETYPE=Haswell`` on an AVX-512 machine halves OpenBLAS), so
    that a reader of "% ref" knows which reference they got.
    """
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return {"warning": "threadpoolctl is not installed: BLAS threads and kernels unknown"}
    pools = [p for p in threadpool_info() if p.get("user_api") == "blas"]
    if not pools:
        return {"warning": "numpy's BLAS is not visible to threadpoolctl"}
    pool = pools[0]
    info = {"library": pool.get("internal_api"), "version": pool.get("version"),
            "threads": pool.get("num_threads"), "architecture": pool.get("architecture"),
            "threading_layer": pool.get("threading_layer"), "file": pool.get("filepath")}
    forced = {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
              if k in os.environ}
    if forced:
        info["forced_by"] = forced
    arch = str(info["architecture"] or "").lower()
    if (info["library"] == "openblas" and "avx512f" in cpu_flags()
            and arch and arch not in _OPENBLAS_AVX512):
        why = ", ".join(f"{k}={v}" for k, v in forced.items()) or "its build"
        info["warning"] = (f"OpenBLAS runs its {info['architecture']} kernels ({why}) on a CPU "
                           f"with AVX-512: cpu.blas, and so % ref, reflects a slower reference")
    return info
