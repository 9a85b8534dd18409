"""OpenCL device discovery: list, select and smoke-test devices.

Devices are numbered in one flat list, platform by platform in the order the ICD
loader reports them; that order (and so every index) stays the same for a given
installation. A device is chosen by a selector (an index into that list, or a
case-insensitive substring of the platform or device name), else by
``PYOPENCL_CTX`` (pyopencl's ``platform[:device]`` syntax), else the first GPU,
accelerator or CPU that builds and runs a trivial program.

A device counts as usable only after that trivial program has built and run on
it: an ICD can register a driver whose compiler rejects this CPU (PoCL 3.0 with
LLVM 14 says ``unknown target CPU 'generic'`` on Zen 5), and listing it as
available would turn every kernel into an error row. The reason then carries the
compiler's own first error line, once, and the package that fixes it.
"""

from __future__ import annotations

import contextlib
import os
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

INSTALL_HINT = "pip install 'mmsuite[opencl]'"
SYSTEM_POCL_HINT = ("install a system OpenCL driver for the CPU: Debian's or Ubuntu's "
                    "`apt-get install pocl-opencl-icd` (./setup.sh does this), or "
                    "`pip install 'mmsuite[pocl]'` on CPUs older than Zen 5")
POCL_WHEEL_HINT = ("this PoCL cannot build for this CPU; install Debian's or Ubuntu's "
                   "`apt-get install pocl-opencl-icd` (./setup.sh does this) and "
                   "`pip uninstall pocl-binary-distribution`")

# Where NVIDIA's driver puts its OpenCL library (distribution packages, containers).
NVIDIA_OPENCL_LIBS = (
    "/usr/lib/x86_64-linux-gnu/libnvidia-opencl.so.1",
    "/usr/lib64/libnvidia-opencl.so.1",
    "/usr/lib/libnvidia-opencl.so.1",
    "/usr/local/nvidia/lib64/libnvidia-opencl.so.1",
    "/usr/lib/aarch64-linux-gnu/libnvidia-opencl.so.1",
)
DEFAULT_ICD_DIR = "/etc/OpenCL/vendors"

_SMOKE_SOURCE = """
__kernel void mmsuite_smoke(__global float *x) {
    size_t i = get_global_id(0);
    x[i] = 2.0f * x[i] + 1.0f;
}
"""


def import_pyopencl() -> tuple[Any, str]:
    """(pyopencl, "") or (None, why not)."""
    try:
        import pyopencl
    except ImportError as exc:
        return None, f"pyopencl is not installed ({exc}); {INSTALL_HINT}"
    return pyopencl, ""


@dataclass(frozen=True)
class DeviceEntry:
    """One OpenCL device and its stable index in the flat list of all devices."""

    index: int
    platform: Any  # pyopencl.Platform
    device: Any  # pyopencl.Device

    @property
    def name(self) -> str:
        return self.device.name.strip()

    @property
    def platform_name(self) -> str:
        return self.platform.name.strip()

    @property
    def type_name(self) -> str:
        import pyopencl as cl

        kind = self.device.type
        for bit in ("GPU", "ACCELERATOR", "CPU", "CUSTOM"):
            if kind & getattr(cl.device_type, bit, 0):
                return bit
        return "OTHER"

    @property
    def label(self) -> str:
        return f"{self.index}: {self.name} [{self.platform_name}, {self.type_name}]"

    def matches(self, text: str) -> bool:
        needle = text.strip().lower()
        haystack = " ".join((self.name, self.platform_name, self.platform.vendor,
                             self.device.vendor)).lower()
        return bool(needle) and needle in haystack


def nvidia_icd_hint(icd_dirs: Sequence[str] | None = None,
                    libs: Sequence[str] = NVIDIA_OPENCL_LIBS) -> str:
    """Why NVIDIA's OpenCL is invisible: its library is installed but no ICD file names it.

    Empty when there is no such library or when it is registered.
    """
    lib = next((p for p in libs if os.path.exists(p)), None)
    if lib is None:
        return ""
    if icd_dirs is None:
        vendors = os.environ.get("OCL_ICD_VENDORS")
        icd_dirs = [vendors] if vendors else [DEFAULT_ICD_DIR]
    for entry in icd_dirs:
        path = Path(entry)
        files = [path] if path.is_file() else sorted(path.glob("*.icd")) if path.is_dir() else []
        for icd in files:
            try:
                if "nvidia" in icd.read_text().lower():
                    return ""
            except OSError:
                continue
    where = ", ".join(icd_dirs)
    return (f"NVIDIA's OpenCL driver {lib} is installed but no ICD file in {where} names it; "
            f"register it with `mkdir -p ~/icd && cp {DEFAULT_ICD_DIR}/*.icd ~/icd/; "
            f"echo {lib} > ~/icd/nvidia.icd; export OCL_ICD_VENDORS=~/icd`")


def platforms(cl: Any) -> list:
    """The ICD loader's platforms; empty when it finds none."""
    try:
        return list(cl.get_platforms())
    except cl.Error:  # PLATFORM_NOT_FOUND_KHR from the ICD loader
        return []


def list_devices() -> list[DeviceEntry]:
    """Every OpenCL device of every platform, numbered in one flat list (empty if none)."""
    cl, _ = import_pyopencl()
    if cl is None:
        return []
    entries: list[DeviceEntry] = []
    for platform in platforms(cl):
        try:
            devices = platform.get_devices()
        except cl.Error:  # a platform with no device
            continue
        for device in devices:
            entries.append(DeviceEntry(len(entries), platform, device))
    return entries


def no_platform_reason() -> str:
    """The reason given when no OpenCL device is found at all."""
    reason = f"no OpenCL platform found; {SYSTEM_POCL_HINT}"
    hint = nvidia_icd_hint()
    return f"{reason}; {hint}" if hint else reason


def first_error_line(log: str) -> str:
    """The compiler's first error line of a build log (pyopencl repeats its own status)."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for line in lines:
        if re.search(r"\berror\b", line, re.IGNORECASE) and "clBuildProgram failed" not in line:
            return line
    return lines[0] if lines else "unknown build failure"


_SMOKE_RESULTS: dict[str, str] = {}


def smoke_test(entry: DeviceEntry) -> str:
    """Build and run a trivial program on ``entry``; empty when it works, else why not.

    Cached per device for the life of the process: a build costs PoCL a second.
    """
    if entry.label not in _SMOKE_RESULTS:
        _SMOKE_RESULTS[entry.label] = _run_smoke_test(entry)
    return _SMOKE_RESULTS[entry.label]


def _run_smoke_test(entry: DeviceEntry) -> str:
    import pyopencl as cl

    try:
        context = cl.Context([entry.device])
        queue = cl.CommandQueue(context, entry.device)
        with warnings.catch_warnings():
            # NVIDIA's compiler prints notes that pyopencl turns into a CompilerWarning:
            # the first thing a run printed on a GPU host; the notes carry nothing here.
            warnings.simplefilter("ignore", cl.CompilerWarning)
            program = cl.Program(context, _SMOKE_SOURCE).build()
        host = np.arange(4, dtype=np.float32)
        buf = cl.Buffer(context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                        hostbuf=host)
        program.mmsuite_smoke(queue, (4,), None, buf)
        cl.enqueue_copy(queue, host, buf, is_blocking=True)
    except cl.Error as exc:
        line = first_error_line(str(exc))
        hint = POCL_WHEEL_HINT if "unknown target cpu" in line.lower() else (
            "check the driver of this device or pick another with --cl-device")
        return f"{entry.label} cannot build a trivial program: {line}; {hint}"
    if not np.array_equal(host, 2 * np.arange(4, dtype=np.float32) + 1):
        return f"{entry.label} ran a trivial program and returned wrong values {host.tolist()}"
    return ""


def _listing(entries: Sequence[DeviceEntry]) -> str:
    return "; ".join(e.label for e in entries) if entries else "none"


def _by_index_or_name(items: list, text: str, named: Callable[[Any], bool]) -> list:
    """``[items[int(text)]]`` when ``text`` is a number (empty past the end), else the
    items that ``named`` accepts: how a selector and both parts of PYOPENCL_CTX pick."""
    text = text.strip()
    if re.fullmatch(r"\d+", text):
        index = int(text)
        return [items[index]] if index < len(items) else []
    return [item for item in items if named(item)]


def select_device(selector: str | int | None = None,
                  entries: list[DeviceEntry] | None = None,
                  works: Callable[[DeviceEntry], str] = smoke_test) -> DeviceEntry:
    """The device named by ``selector``, else by PYOPENCL_CTX, else the first that works.

    Raises ValueError (listing the devices) when the selector or PYOPENCL_CTX matches
    nothing, LookupError when there is no device or no default device passes ``works``.
    A device chosen by name is returned as it is: the backend's probe reports its failure.
    """
    entries = list_devices() if entries is None else entries
    if not entries:
        raise LookupError(no_platform_reason())
    text = "" if selector is None else str(selector)
    if text.strip():
        found = _by_index_or_name(entries, text, lambda e: e.matches(text))
        if not found:
            hint = nvidia_icd_hint()
            extra = f" ({hint})" if hint and "nvidia" in text.lower() else ""
            raise ValueError(f"no OpenCL device matches {text!r}{extra}; "
                             f"devices: {_listing(entries)}")
        return found[0]
    ctx_env = os.environ.get("PYOPENCL_CTX", "").strip()
    if ctx_env:
        return _select_pyopencl_ctx(ctx_env, entries)
    order = {"GPU": 0, "ACCELERATOR": 1, "CPU": 2}
    candidates = sorted(entries, key=lambda e: (order.get(e.type_name, 3), e.index))
    failures = []
    for entry in candidates:
        reason = works(entry)
        if not reason:
            return entry
        failures.append(reason)
    raise LookupError(failures[0] + (f" (and {len(failures) - 1} more device(s) failed)"
                                     if len(failures) > 1 else ""))


def _select_pyopencl_ctx(value: str, entries: list[DeviceEntry]) -> DeviceEntry:
    platform_part, _, device_part = value.partition(":")
    distinct: list = []
    for e in entries:
        if e.platform not in distinct:
            distinct.append(e.platform)
    needle, part = platform_part.strip().lower(), device_part.strip()
    chosen = _by_index_or_name(distinct, platform_part, lambda p: needle in p.name.lower())
    candidates = [e for e in entries if chosen and e.platform == chosen[0]]
    if candidates and part:
        candidates = _by_index_or_name(candidates, part,
                                       lambda e: part.lower() in e.name.lower())
    if not candidates:
        raise ValueError(f"PYOPENCL_CTX={value!r} matches no OpenCL device; "
                         f"devices: {_listing(entries)}")
    return candidates[0]


def device_facts(entry: DeviceEntry) -> dict:
    """What a result records about the OpenCL device it ran on (PoCL's version included)."""
    dev, platform = entry.device, entry.platform
    facts = {
        "opencl_platform": entry.platform_name,
        "opencl_platform_version": platform.version.strip(),
        "opencl_device": entry.name,
        "opencl_device_index": entry.index,
        "opencl_device_type": entry.type_name,
        "opencl_device_version": dev.version.strip(),
        "opencl_c_version": dev.opencl_c_version.strip(),
        "opencl_driver": dev.driver_version.strip(),
        "compute_units": dev.max_compute_units,
        "max_clock_mhz": dev.max_clock_frequency,
        "max_work_group_size": dev.max_work_group_size,
        "local_mem_bytes": dev.local_mem_size,
        "global_mem_bytes": dev.global_mem_size,
    }
    pocl = re.search(r"PoCL\s+([0-9][^\s]*)", platform.version, re.IGNORECASE)
    if pocl:
        facts["pocl"] = pocl.group(1)
        with contextlib.suppress(PackageNotFoundError):
            facts["pocl_binary_distribution"] = version("pocl-binary-distribution")
    return facts
