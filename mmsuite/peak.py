"""The peak of the device a result ran on, in the result's precision class, and the flag
for results above it.

FP32 kernels are judged by the FP32 (SIMT) peak; tensor-core kernels (TF32 and
FP32-accurate) by the device's dense TF32 tensor peak: SMs x TF32 FLOPs per
cycle per SM (``GPU_TF32_FLOPS_PER_SM``, by compute capability) x the maximum
SM clock. An FP32-accurate kernel counts the FLOPs of the product it computes
(2·M·N·K), not the three tensor products it runs, so its % peak says how much
of the tensor peak the accurate product keeps.

The peak comes from the device's own figures, as the run's environment recorded
them (so a saved result file is judged by the machine that made it):

- NVIDIA GPU: SMs x FP32 lanes per SM (by compute capability) x 2 (an FMA is
  two FLOPs) x the maximum SM clock.
- CPU: what the FMA probe of :mod:`mmsuite.cpu_probe` measured at the threads the
  run used (independent vector FMA chains on every thread). Where it could not run,
  or in files recorded before it existed, the table: threads x the maximum clock x
  FP32 lanes per FMA x FMA units per core x 2, by vector extension. The table is
  wrong where a core runs its vectors on narrower units (Zen 1's AVX2 and Zen 4's
  AVX-512 reach half of it), so it is kept as a cross-check only.
- OpenCL runs on a CPU device take the CPU figure, on an NVIDIA GPU the GPU figure.

A result above 100% of its device's peak cannot be real: ``annotate`` turns its
status into ``invalid`` with a reason starting ``measurement error:``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

from . import cpu_probe
from .backend_table import BACKENDS, DEVICE_PEAK, GPU_BACKENDS, GPU_PEAK, HOST_PEAK
from .host import CPU_MODEL
from .machines import environment_of

#: FP32 lanes (CUDA cores) per SM by compute capability; a major version alone
#: covers every minor one not listed. sm_80 (A100) has 64, the rest of Ampere 128.
GPU_LANES_PER_SM: dict[tuple[int, ...], int] = {
    (3,): 192, (5,): 128, (6, 0): 64, (6,): 128, (7,): 64,
    (8, 0): 64, (8,): 128, (9,): 128, (10,): 128, (11,): 128, (12,): 128,
}
#: Dense TF32 tensor-core FLOPs per cycle per SM by compute capability (NVIDIA's
#: whitepapers: A100 156 TFLOP/s at 108 SMs x 1.41 GHz; GA10x and AD10x a quarter of
#: that per SM; H100 twice A100's, 495 TFLOP/s at 132 SMs x 1.83 GHz). No entry: no
#: tensor peak is claimed.
GPU_TF32_FLOPS_PER_SM: dict[tuple[int, int], int] = {
    (8, 0): 1024, (8, 6): 256, (8, 9): 256, (9, 0): 2048,
}
TENSOR_PRECISIONS = ("tf32", "fp32-accurate")

#: Lanes assumed for an NVIDIA GPU whose compute capability was not recorded (OpenCL
#: alone): the most any listed architecture has, so that no result is flagged by mistake.
GPU_LANES_UNKNOWN = 128

#: FP32 FLOPs per cycle per core by vector extension: lanes x FMA units x 2.
CPU_FLOPS_PER_CYCLE: dict[str, int] = {"avx512": 16 * 2 * 2, "avx2": 8 * 2 * 2}

INVALID_PREFIX = "measurement error:"


@dataclass(frozen=True)
class Peak:
    """A device's FP32 peak and how it was worked out (for the reason of a flagged row)."""

    gflops: float
    device: str
    how: str
    kind: str = "FP32"
    #: The most a correct figure can reach, where it is above ``gflops``: a measured CPU
    #: peak can read low (threads placed on one core's two hardware threads, a neighbour
    #: on a sibling), so only a figure above the table's as well is a measurement error.
    ceiling: float | None = None


def parse_compute_capability(value: object) -> tuple[int, int] | None:
    """(major, minor) from CuPy's "90", "86", "100" or a "9.0" / (9, 0) form; None if unreadable."""
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return int(value[0]), int(value[1])
    text = str(value or "").strip()
    if "." in text:
        major, _, minor = text.partition(".")
        return (int(major), int(minor)) if major.isdigit() and minor.isdigit() else None
    if text.isdigit() and len(text) >= 2:
        return int(text[:-1]), int(text[-1])
    return None


def gpu_lanes_per_sm(cc: tuple[int, int]) -> int | None:
    return GPU_LANES_PER_SM.get(cc) or GPU_LANES_PER_SM.get(cc[:1])


def gpu_peak(sm_count: int, clock_mhz: float, cc: tuple[int, int] | None,
             name: str = "GPU") -> Peak | None:
    """SMs x lanes x 2 x clock; None when a figure is missing or the architecture unknown."""
    lanes = gpu_lanes_per_sm(cc) if cc else GPU_LANES_UNKNOWN
    if not sm_count or not clock_mhz or not lanes:
        return None
    arch = f"sm_{cc[0]}{cc[1]}" if cc else "compute capability not recorded"
    how = f"{sm_count} SMs x {lanes} lanes ({arch}) x 2 x {clock_mhz:g} MHz"
    return Peak(sm_count * lanes * 2 * clock_mhz / 1e3, name, how)


def gpu_tensor_peak(sm_count: int, clock_mhz: float, cc: tuple[int, int] | None,
                    name: str = "GPU") -> Peak | None:
    """SMs x dense TF32 FLOPs per cycle per SM x clock; None where the table has no entry."""
    per_sm = GPU_TF32_FLOPS_PER_SM.get(cc) if cc else None
    if cc is None or not sm_count or not clock_mhz or not per_sm:
        return None
    how = (f"{sm_count} SMs x {per_sm} dense TF32 FLOP/cycle (sm_{cc[0]}{cc[1]}) x "
           f"{clock_mhz:g} MHz")
    return Peak(sm_count * per_sm * clock_mhz / 1e3, name, how, "TF32 tensor")


def device_peaks(sm_count: int, clock_mhz: float, cc: tuple[int, int] | None,
                 name: str = "GPU") -> dict[str, Peak | None]:
    """Both peaks of a GPU: FP32 SIMT and dense TF32 tensor (for ``mmsuite list``)."""
    return {"FP32": gpu_peak(sm_count, clock_mhz, cc, name),
            "TF32 tensor": gpu_tensor_peak(sm_count, clock_mhz, cc, name)}


def cpu_peak(cores: int, clock_mhz: float, simd: str | None, name: str = "CPU") -> Peak | None:
    """cores x clock x FLOPs per cycle; None when the vector extension has no entry."""
    per_cycle = CPU_FLOPS_PER_CYCLE.get(simd or "")
    if not cores or not clock_mhz or not per_cycle:
        return None
    how = f"{cores} cores x {clock_mhz:g} MHz x {per_cycle} FLOP/cycle ({simd})"
    return Peak(cores * clock_mhz * per_cycle / 1e3, name, how)


# ----------------------------------------------------------- what the host records
def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def cpu_simd(cpuinfo: str | None = None) -> str | None:
    """The widest FMA vector extension the CPU has: "avx512", "avx2" or None."""
    for line in (_cpuinfo() if cpuinfo is None else cpuinfo).splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            if "avx512f" in flags:
                return "avx512"
            if {"avx2", "fma"} <= flags:
                return "avx2"
            return None
    return None


def _sysfs_max_mhz() -> float | None:
    try:
        return int(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
                   .read_text()) / 1e3
    except (OSError, ValueError):
        return None


def _cpuinfo_mhz(cpuinfo: str) -> float | None:
    values = []
    for line in cpuinfo.splitlines():
        if line.startswith("cpu MHz"):
            try:
                values.append(float(line.split(":", 1)[1]))
            except ValueError:
                pass
    return max(values) if values else None


def measured_clock_mhz() -> float | None:
    """The core clock measured with a dependent-add chain (:mod:`mmsuite.cpu_probe`)."""
    probe = cpu_probe.figures()
    return probe.get("clock_mhz") if probe else None


def measured_fma() -> dict | None:
    """The FMA probe's figures (:mod:`mmsuite.cpu_probe`); None without a C compiler."""
    probe = cpu_probe.figures()
    if not probe:
        return None
    return {"gflops_by_threads": probe["fma_gflops"], "lanes": probe.get("lanes"),
            "chains": probe.get("chains"), "cached": probe.get("cached", False)}


def cpu_figures() -> dict:
    """What the CPU's peak needs, for the run's environment: the FMA probe's figures and
    the table's (max clock, where it came from, vector extension), and which is used.

    The measured figure is the peak wherever the probe ran; the table (clock x FLOPs a
    cycle of the vector extension) is kept as a cross-check and for hosts without a C
    compiler.

    The kernel's maximum clock (sysfs) is used where it exists. Virtual machines often
    have no cpufreq and report the base clock in /proc/cpuinfo while the cores boost
    higher, which would put a real result above a peak that is too low: there the
    clock is measured, and the higher of the two is kept.
    """
    figures = _table_figures()
    fma = measured_fma()
    table = cpu_peak(1, figures.get("cpu_max_mhz") or 0, figures.get("cpu_simd"))
    figures.update(cpu_fma_probe=fma,
                   cpu_peak_table_gflops_per_core=round(table.gflops, 2) if table else None,
                   cpu_peak_source=PEAK_MEASURED if fma else PEAK_TABLE if table else None)
    return figures


#: ``cpu_peak_source`` of a run's environment: which CPU peak its rows are judged by.
PEAK_MEASURED = "measured (FMA probe)"
PEAK_TABLE = "table (clock x FLOP/cycle of the vector extension)"


def _table_figures() -> dict:
    cpuinfo = _cpuinfo()
    figures: dict = {"cpu_simd": cpu_simd(cpuinfo)}
    sysfs = _sysfs_max_mhz()
    if sysfs:
        figures.update(cpu_max_mhz=sysfs, cpu_clock_source="sysfs cpuinfo_max_freq")
        return figures
    listed, measured = _cpuinfo_mhz(cpuinfo), measured_clock_mhz()
    candidates = {"/proc/cpuinfo cpu MHz": listed, "measured (dependent adds)": measured}
    source, mhz = max(((s, v) for s, v in candidates.items() if v),
                      key=lambda item: item[1], default=(None, None))
    figures.update(cpu_max_mhz=mhz, cpu_clock_source=source,
                   cpu_clock_candidates={s: v for s, v in candidates.items() if v})
    return figures


# ------------------------------------------------------------- result annotation
def _measured_peak(probe: dict, cores: int, name: str) -> Peak | None:
    """The FMA probe's figure at ``cores`` threads: measured at that count, or scaled from
    the nearest count below it (a clock that falls with more active cores makes this an
    upper bound); above the host's cores, the all-core figure."""
    try:
        by_threads = {int(k): float(v) for k, v in probe["gflops_by_threads"].items()
                      if float(v) > 0}
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if not by_threads:
        return None
    cores = min(max(cores, 1), max(by_threads))
    base = max((k for k in by_threads if k <= cores), default=min(by_threads))
    gflops = by_threads[base] * cores / base
    how = f"measured: {by_threads[base]:.4g} GFLOP/s on {base} threads (FMA probe)"
    if base != cores:
        how += f" x {cores}/{base}"
    return Peak(gflops, name, how)


def _host_peak(environment: dict, cores: int | None) -> Peak | None:
    threads = int(cores or environment.get("cpu_cores") or os.cpu_count() or 1)
    name = environment.get(CPU_MODEL) or "CPU"
    probe = environment.get("cpu_fma_probe")
    clock = environment.get("cpu_max_mhz")
    simd = environment.get("cpu_simd")
    if simd is None and environment.get("cpu_avx512"):
        simd = "avx512"
    table = cpu_peak(threads, float(clock), simd, name) if clock else None
    if environment.get("cpu_peak_source") == PEAK_MEASURED and isinstance(probe, dict):
        measured = _measured_peak(probe, threads, name)
        if measured is not None:
            if table is not None and table.gflops > measured.gflops:
                return replace(measured, ceiling=table.gflops,
                               how=f"{measured.how}; the table's {table.gflops:.4g}: "
                                   f"{table.how}")
            return measured
    return table


#: Measured and table peaks further apart than this make the environment say so.
CROSS_CHECK_RATIO = 1.25


def cross_check(environment: dict) -> str | None:
    """A line when the measured CPU peak and the table's disagree by more than 25%: the
    table does not know how wide a core's FMA units are (Zen 1, Zen 4), or a clock is off."""
    probe = environment.get("cpu_fma_probe")
    table = environment.get("cpu_peak_table_gflops_per_core")
    measured = _measured_peak(probe, 1, "CPU") if isinstance(probe, dict) else None
    if not measured or not table:
        return None
    ratio = measured.gflops / table
    if 1 / CROSS_CHECK_RATIO <= ratio <= CROSS_CHECK_RATIO:
        return None
    return (f"CPU peak: the FMA probe measured {measured.gflops:.4g} GFLOP/s a core, "
            f"{ratio:.2g}x the {table:.4g} of the {environment.get('cpu_simd')} table at "
            f"{environment.get('cpu_max_mhz')} MHz; % peak uses the measured figure")


def _gpu_figures(environment: dict, record: dict) -> dict:
    """The GPU figures a GPU backend recorded, with those of the row's own device."""
    cuda = (environment.get("backends") or {}).get(record.get("backend")) or {}
    devices = cuda.get("devices")
    if isinstance(devices, list) and record.get("device") is not None:
        for entry in devices:  # a multi-GPU sweep records one entry per device
            if isinstance(entry, dict) and entry.get("index") == record["device"]:
                return {**cuda, **entry}
    return cuda


def peak_for(record: dict, environment: dict) -> Peak | None:
    """The peak of the device ``record`` ran on in the record's precision class (FP32, or
    the TF32 tensor peak for tensor-core kernels); None when the environment lacks it.
    A cluster row is judged by its worker's environment, where the file recorded it."""
    environment = environment_of(record, environment)
    backends = environment.get("backends") or {}
    backend = record.get("backend")
    source = BACKENDS[backend].peak if isinstance(backend, str) and backend in BACKENDS else None
    if record.get("precision") in TENSOR_PRECISIONS:
        if source != GPU_PEAK:
            return None
        cuda = _gpu_figures(environment, record)
        return gpu_tensor_peak(int(cuda.get("sm_count") or 0),
                               float(cuda.get("sm_clock_mhz") or 0),
                               parse_compute_capability(cuda.get("compute_capability")),
                               cuda.get("gpu") or "GPU")
    if source == HOST_PEAK:
        threads = (record.get("info") or {}).get("threads") \
            or (backends.get(backend) or {}).get("omp_threads")
        return _host_peak(environment, threads)
    if source == GPU_PEAK:
        cuda = _gpu_figures(environment, record)
        return gpu_peak(int(cuda.get("sm_count") or 0), float(cuda.get("sm_clock_mhz") or 0),
                        parse_compute_capability(cuda.get("compute_capability")),
                        cuda.get("gpu") or "GPU")
    if source == DEVICE_PEAK:  # the selected device's figures, as the OpenCL adapter records them
        cl = backends.get(backend) or {}
        kind = str(cl.get("opencl_device_type") or "").upper()
        if kind == "CPU":
            # PoCL spreads work-groups over every core it reports as a compute unit.
            return _host_peak(environment, cl.get("compute_units"))
        name = str(cl.get("opencl_device") or "")
        vendor = f"{name} {cl.get('opencl_platform') or ''}".lower()
        if kind == "GPU" and "nvidia" in vendor:
            # A GPU backend that saw the same GPU knows its compute capability.
            same = [facts for gpu_backend in GPU_BACKENDS
                    if name and (facts := backends.get(gpu_backend) or {}).get("gpu") == name]
            cc = parse_compute_capability(same[0].get("compute_capability")) if same else None
            return gpu_peak(int(cl.get("compute_units") or 0),
                            float(cl.get("max_clock_mhz") or 0), cc, name)
    return None


def annotate(records: list[dict], environment: dict) -> list[dict]:
    """Add ``peak_gflops``, ``pct_peak`` and ``peak_kind`` to each timed record, in place; a
    record above 100% of its device's peak becomes ``invalid`` with a ``measurement
    error:`` reason."""
    for record in records:
        gflops = record.get("gflops")
        if gflops is None or not math.isfinite(gflops) or gflops <= 0:
            continue
        peak = peak_for(record, environment)
        if peak is None:
            continue
        pct = 100.0 * gflops / peak.gflops
        record["peak_gflops"] = peak.gflops
        record["pct_peak"] = pct
        record["peak_kind"] = peak.kind
        if gflops > max(peak.gflops, peak.ceiling or 0.0) and record.get("status") == "ok":
            record["status"] = "invalid"
            record["reason"] = (f"{INVALID_PREFIX} {gflops:.4g} GFLOP/s is {pct:.0f}% of the "
                                f"{peak.kind} peak of {peak.device} ({peak.gflops:.4g} GFLOP/s: "
                                f"{peak.how})")
    return records
