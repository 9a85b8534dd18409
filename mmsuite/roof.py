"""The roof each row can reach: bytes moved, achieved GB/s, arithmetic intensity and % roof.

A GEMM must read A and B and write C at least once; with beta != 0 it reads C as
well. A split plan (split-K, stream-K) writes its partial sums to a workspace and
reads them back, where the row's info records the workspace (``workspace_bytes``):

    bytes  = 4 * batch * (M*K + K*N + M*N * (2 if beta != 0 else 1)) + 2 * workspace
    intensity = FLOPs / bytes                                 (FLOP per byte)
    roof   = min(FP32 peak, memory bandwidth * intensity)     (the roofline model)
    % roof = achieved GFLOP/s / roof

The bandwidth is measured, not taken from a datasheet, by a copy probe per device,
counted as bytes read plus bytes written (STREAM's convention):

- the host's memory (the C ladder, OpenCL on a CPU): :mod:`mmsuite.cpu_probe` copies
  256 MiB with ``memcpy`` on each thread count it probes, cached with the FMA probe;
- a CUDA GPU: :func:`cuda_copy_probe`, a device-to-device copy of 1 GiB through
  CuPy, cached per GPU like the CPU probe;
- OpenCL on an NVIDIA GPU takes the figure a CUDA backend measured on the same GPU.

The bytes are a floor: a kernel that reads its inputs more than once moves more. A
row whose inputs stay in cache between samples (L2 warm, small problems) can pass
its memory roof, since the copy probe measures DRAM: such a % roof above 100 says
that the row ran from cache, not that the figure is wrong.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .backend_table import BACKENDS, DEVICE_PEAK, GPU_BACKENDS, GPU_PEAK, HOST_PEAK
from .host import CPU_MODEL
from .machines import environment_of

FLOAT32_BYTES = 4
#: Bytes of each buffer the GPU copy probe copies: far beyond any GPU's L2.
GPU_COPY_BYTES = 2**30
GPU_COPY_REPEATS = 10
#: Bump when the GPU probe changes: cached figures are then measured again.
GPU_PROBE_VERSION = 1


def bytes_moved(record: dict) -> int:
    """The fewest bytes the row's GEMM moves to and from memory (module docstring)."""
    problem = record["problem"]
    m, n, k, batch = (int(problem[key]) for key in ("m", "n", "k", "batch"))
    c_passes = 2 if float(problem.get("beta") or 0.0) != 0.0 else 1
    elements = batch * (m * k + k * n + c_passes * m * n)
    workspace = (record.get("info") or {}).get("workspace_bytes") or 0
    return FLOAT32_BYTES * elements + 2 * int(workspace)


@dataclass(frozen=True)
class Bandwidth:
    """A device's measured memory bandwidth and where the figure came from."""

    gbs: float
    device: str
    how: str


def _host_bandwidth(environment: dict, threads: Any) -> Bandwidth | None:
    probe = environment.get("cpu_copy_probe")
    if not isinstance(probe, dict):
        return None
    try:
        by_threads = {int(t): float(v) for t, v in (probe.get("gbs_by_threads") or {}).items()
                      if float(v) > 0}
    except (TypeError, ValueError, AttributeError):
        return None
    if not by_threads:
        return None
    wanted = int(threads or environment.get("cpu_cores") or max(by_threads))
    # The best count up to the row's: fewer threads reach no more than the row's could, and
    # a count whose copy a neighbour slowed (wall time: it cannot be left out) is passed over.
    fewer = [t for t in by_threads if t <= wanted] or [min(by_threads)]
    count = max(fewer, key=lambda t: by_threads[t])
    name = str(environment.get(CPU_MODEL) or "CPU")
    return Bandwidth(by_threads[count], f"{name} host memory",
                     f"copy probe: {by_threads[count]:.4g} GB/s on {count} threads")


def _gpu_bandwidth(facts: dict, name: str) -> Bandwidth | None:
    probe = facts.get("copy_probe")
    gbs = probe.get("gbs") if isinstance(probe, dict) else None
    if not isinstance(gbs, (int, float)) or not gbs > 0:
        return None
    return Bandwidth(float(gbs), name, f"copy probe: device-to-device copy, {gbs:.4g} GB/s")


def bandwidth_for(record: dict, environment: dict) -> Bandwidth | None:
    """The measured memory bandwidth of the device ``record`` ran on; None where the run's
    environment holds no copy probe for it (older files, a probe that failed)."""
    environment = environment_of(record, environment)
    backends = environment.get("backends") or {}
    backend = record.get("backend")
    source = BACKENDS[backend].peak if isinstance(backend, str) and backend in BACKENDS else None
    facts = backends.get(backend) or {}
    if source == HOST_PEAK:
        threads = (record.get("info") or {}).get("threads") or facts.get("omp_threads")
        return _host_bandwidth(environment, threads)
    if source == GPU_PEAK:
        return _gpu_bandwidth(facts, str(facts.get("gpu") or "GPU"))
    if source == DEVICE_PEAK:
        kind = str(facts.get("opencl_device_type") or "").upper()
        if kind == "CPU":
            return _host_bandwidth(environment, facts.get("compute_units"))
        name = str(facts.get("opencl_device") or "")
        for gpu_backend in GPU_BACKENDS:  # the same GPU, measured by a GPU backend
            same = backends.get(gpu_backend) or {}
            if name and same.get("gpu") == name:
                return _gpu_bandwidth(same, name)
    return None


def annotate(records: list[dict], environment: dict) -> list[dict]:
    """Add ``bytes_moved``, ``intensity`` (FLOP/byte) and ``achieved_gbs`` to each timed
    record, and where the device's bandwidth is known ``bandwidth_gbs``, ``roof_device``,
    ``roof_gflops``, ``roof_bound`` ("memory" or "compute": which roof is lower) and
    ``pct_roof``, in place. Run after :func:`mmsuite.peak.annotate` (it reads
    ``peak_gflops``)."""
    for record in records:
        gflops = record.get("gflops")
        ms = (record.get("kernel_ms") or {}).get("median")
        if not isinstance(gflops, (int, float)) or not math.isfinite(gflops) or gflops <= 0 \
                or not ms or not record.get("flops"):
            continue
        moved = bytes_moved(record)
        intensity = float(record["flops"]) / moved
        record.update(bytes_moved=moved, intensity=intensity,
                      achieved_gbs=moved / (float(ms) * 1e6))
        bandwidth = bandwidth_for(record, environment)
        peak = record.get("peak_gflops")
        if bandwidth is None:
            continue
        memory_roof = bandwidth.gbs * intensity
        roof = min(memory_roof, float(peak)) if peak else memory_roof
        record.update(bandwidth_gbs=bandwidth.gbs, roof_device=bandwidth.device,
                      roof_gflops=roof, pct_roof=100.0 * gflops / roof,
                      roof_bound="memory" if roof == memory_roof and peak else
                      "compute" if peak else "memory (no FLOP peak known)")
    return records


# --------------------------------------------------------------- the GPU copy probe
def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mmsuite" / "copy-probe"


def cuda_copy_probe(cp: Any, gpu: str, pci_bus_id: str, driver: object,
                    folder: Path | None = None) -> dict:
    """GB/s of a device-to-device copy of ``GPU_COPY_BYTES`` (read + written) on the current
    GPU, the best of ``GPU_COPY_REPEATS`` timed with CUDA events; cached per GPU and driver.
    A failure is recorded as ``{"error": ...}``, never raised: the roof is optional."""
    key = hashlib.sha256(f"{gpu}|{pci_bus_id}|{driver}|{GPU_PROBE_VERSION}".encode())
    path = (folder or cache_dir()) / f"{key.hexdigest()[:16]}.json"
    try:
        cached = json.loads(path.read_text())
        if cached.get("version") == GPU_PROBE_VERSION and cached.get("gbs"):
            return {**cached, "cached": True}
    except (OSError, ValueError, AttributeError):
        pass
    try:
        figures = {"version": GPU_PROBE_VERSION, "gpu": gpu, **_time_cuda_copy(cp)}
    except Exception as exc:  # out of memory, a driver error: no roof for this GPU
        return {"error": f"{type(exc).__name__}: {exc}"}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(figures, indent=1) + "\n")
    except OSError:
        pass
    return {**figures, "cached": False}


def _time_cuda_copy(cp: Any) -> dict:
    free, _ = cp.cuda.runtime.memGetInfo()
    size = min(GPU_COPY_BYTES, int(free // 4))  # two buffers and room to spare
    src = cp.ones(size, dtype=cp.uint8)
    dst = cp.empty_like(src)
    stream = cp.cuda.Stream(non_blocking=True)
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    try:
        best = math.inf
        for repeat in range(GPU_COPY_REPEATS + 1):
            start.record(stream)
            dst.data.copy_from_device_async(src.data, size, stream)
            stop.record(stream)
            stop.synchronize()
            if repeat:  # the first copy warms the allocation and the copy engine up
                best = min(best, cp.cuda.get_elapsed_time(start, stop))
    finally:
        del src, dst
        cp.get_default_memory_pool().free_all_blocks()
    return {"gbs": round(2 * size / (best * 1e6), 1), "bytes": size,
            "repeats": GPU_COPY_REPEATS}
