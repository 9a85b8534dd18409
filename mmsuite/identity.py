"""Which code a result ran: hashes that tell a change of the code from a change of the
machine.

A row's identity has three parts, and a fourth where a fitted model or a tuning file
chose the row's plan:

- ``kernel``: the kernel's own code. For the C ladder, the rung's built shared object
  (one per rung, so a change to one rung leaves the others' identities alone); for
  OpenCL and CUDA, the rung's source with its headers inlined, as the run-time
  compiler gets it (its options are the adapter's, in ``engine``); for a reference
  library, its name and version.
- ``engine``: the Python code that measures: every module of the installed mmsuite but
  the ones listed in ``NOT_MEASURING``, which present, compare or build and are imported
  by nothing that measures. Code only: prose and data files are no part of it.
- ``toolchain``: what turns source into a binary at run time (NVRTC, the OpenCL
  platforms), and the interpreter's numpy.
- ``steering``: for a row whose planner read a model file or a tuning file (the files
  its ``info["dispatch"]`` names), that model's fitted ``parameters`` and that tuning
  file's ``entries``. A file's provenance is no part of it, and a row no file steered
  has no such part, so a refit changes the identity of the rows it steers and of no
  other.

``hash`` covers them all. Two rows with equal hashes ran byte-identical code, so a
difference between their times is the environment's. A hash that differs says only
that something which could matter changed.

This module imports nothing of mmsuite by a relative name and finds the code through
the import system, so that ``continuous`` can load it by path into the worker of another
revision's build and hash that build's code, not its own.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

#: The package's modules (and folders of modules) that nothing measuring imports: editing
#: them cannot change a timing. ``tests/test_identity.py`` checks each exists and that no
#: module the engine imports is among them.
NOT_MEASURING = frozenset({
    # the command line
    "cli.py", "commands",
    # results read back, presented and compared
    "runs.py", "report.py", "report_html.py", "charts.py", "results_csv.py",
    "environment_table.py", "history.py", "compare.py", "verdicts.py",
    # the gate's driver and its builds (its workers measure through ``measure``; the
    # worker's own file is always the driver's, for both sides, so a revision's copy never
    # runs), the bisection that drives it, the regressions found in a history, the
    # dispatcher's tuner
    "continuous.py", "continuous_journal.py", "continuous_plan.py", "side_worker.py",
    "continuous_worker.py",
    "builds.py", "bisection.py", "regressions.py",
    "changepoints.py",
    "tuner.py",
    # the pytest suite that checks plugin kernels, and the hints for missing extras
    "testing", "extras.py",
})


def _digest(chunks: list[tuple[str, bytes]]) -> str:
    h = hashlib.sha256()
    for name, data in sorted(chunks):
        h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()[:16]


def _package_dir() -> Path:
    spec = importlib.util.find_spec("mmsuite")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("mmsuite is not importable here")
    return Path(next(iter(spec.submodule_search_locations)))


@functools.cache
def engine_hash() -> str:
    """The measuring Python code of the importable mmsuite."""
    root = _package_dir()
    chunks = [(rel.as_posix(), path.read_bytes())
              for path in sorted(root.rglob("*.py"))
              if (rel := path.relative_to(root)).parts[0] not in NOT_MEASURING
              and "__pycache__" not in rel.parts]
    return _digest(chunks)


#: What of each file a dispatched row's ``info["dispatch"]`` names chooses its plan: the
#: fitted figures of the model file (``model``) and the entries of the tuning file
#: consulted (``tuning_file``).
STEERING_SECTIONS = {"model": "parameters", "tuning_file": "entries"}


def steering_hash(dispatch: Mapping | None) -> str | None:
    """The figures and entries that chose a row's plan, from the files its dispatch info
    names; None for a row that no file steered (no dispatch info, or the model's starting
    figures, which are code in ``engine``). Files are read by content, not by path, so
    two builds in different folders with the same figures agree."""
    chunks = []
    for key, section in STEERING_SECTIONS.items():
        named = (dispatch or {}).get(key)
        path = Path(named) if isinstance(named, str) else None
        if path is not None and path.is_file():
            figures = json.loads(path.read_text()).get(section)
            chunks.append((key, json.dumps(figures, sort_keys=True).encode()))
    return _digest(chunks) if chunks else None


#: What compiles a backend's rungs at run time, read for the ``toolchain`` part (the table
#: of backends names one for each): nothing (only numpy), NVRTC through CuPy, or the OpenCL
#: platforms through pyopencl.
NO_TOOLCHAIN, NVRTC, OPENCL_PLATFORMS = "numpy", "nvrtc", "opencl-platforms"
#: The library a backend's reference row runs: numpy's BLAS, cuBLAS through CuPy, CLBlast.
HOST_BLAS, CUBLAS, CLBLAST = "numpy-blas", "cupy-cublas", "pyclblast"


#: The package of the C ladder's built extensions, one per rung (``mmsuite._cbuild``).
C_LADDER = "_cladder"
#: Where revisions before one extension per rung built the whole ladder into one; read
#: only when ``continuous`` hashes such a revision's build.
C_LADDER_WHOLE = "_ckernels"


def built_rung(source: str) -> str:
    """The name of the built extension of the C rung in ``source`` (``csrc/NN_<name>.c``)."""
    return Path(source).stem.split("_", 1)[1]


@dataclass(frozen=True)
class CodeReaders:
    """Where one backend's code identity is read (its row in the table of backends names
    these). ``built``: the package of the built extensions, one per rung (``built_rung``),
    or None where each rung is compiled at run time from its source; ``toolchain`` and
    ``library``: one of the kinds above."""

    built: str | None
    toolchain: str
    library: str


def _shared_objects(directory: Path, stem: str) -> list[tuple[str, bytes]]:
    return [(p.name, p.read_bytes()) for p in sorted(directory.glob(stem + ".*"))
            if p.suffix in (".so", ".pyd")]


@functools.cache
def _kernel_files_hash(readers: CodeReaders, source: str | None) -> str:
    if source is None:
        raise RuntimeError("a kernel without a source file")
    if readers.built:  # the rung's built extension, with the flags it was built with
        root = _package_dir()
        chunks = (_shared_objects(root / readers.built, built_rung(source))
                  or _shared_objects(root, C_LADDER_WHOLE))
        if not chunks:
            raise RuntimeError(f"no built extension for {source} under {root}")
        return _digest(chunks)
    # The text the run-time compiler gets: the rung with its headers inlined. Imported
    # by name, so that it is the importable build's reader (and sources), not this file's.
    sources = importlib.import_module("mmsuite.sources")
    return _digest([(source, sources.read_source(source).encode())])


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


@functools.cache
def reference_library(library: str) -> str:
    """The reference library of kind ``library`` (HOST_BLAS, CUBLAS, CLBLAST), with its
    version."""
    if library == HOST_BLAS:
        from threadpoolctl import threadpool_info

        blas = [f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')}"
                for i in threadpool_info() if i.get("user_api") == "blas"]
        return "numpy " + _version("numpy") + "; " + (", ".join(blas) or "no BLAS found")
    if library == CUBLAS:
        import cupy

        runtime = cupy.cuda.runtime
        return (f"cupy {cupy.__version__}; CUDA runtime {runtime.runtimeGetVersion()}; "
                f"driver {runtime.driverGetVersion()}")
    if library == CLBLAST:
        return f"pyclblast {_version('pyclblast')}"
    raise ValueError(f"no reader for the reference library {library!r}")


@functools.cache
def toolchain(kind: str) -> str:
    """What compiles kernels at run time (NO_TOOLCHAIN, NVRTC, OPENCL_PLATFORMS), with
    versions."""
    if kind == NVRTC:
        import cupy

        # The floating-point flags every module is compiled with: part of what a row computes.
        # Read from the importable build (a revision before them has none).
        flags = getattr(importlib.import_module("mmsuite.launch"), "IEEE_FLAGS", ())
        return (f"cupy {cupy.__version__}; nvrtc {cupy.cuda.nvrtc.getVersion()}; "
                f"flags {' '.join(flags) or 'none'}")
    if kind == OPENCL_PLATFORMS:
        import pyopencl as cl

        platforms = "; ".join(f"{p.name} {p.version}" for p in cl.get_platforms())
        return f"pyopencl {cl.VERSION_TEXT}; {platforms}"
    if kind == NO_TOOLCHAIN:
        return f"numpy {_version('numpy')}"
    raise ValueError(f"no reader for the toolchain {kind!r}")


def plugin_kernel_hash(kernel: object, extra: str = "") -> str:
    """The hash of a plugin kernel's own code (``mmsuite.plugins``), its part of a row's code
    identity: the source as its compiler gets it (headers inlined) and ``extra``, what its
    backend builds it with (``Backend.build_flags``: a C kernel's flags); for a callable,
    its source and that of the module-level functions it calls, so that editing one kernel
    of a plugin leaves its neighbours' identities alone."""
    function, source = getattr(kernel, "function", None), getattr(kernel, "source", None)
    h = hashlib.sha256(extra.encode())
    if function is not None:
        h.update(_function_source(function).encode())
    elif source:
        h.update(importlib.import_module("mmsuite.sources").read_source(source).encode())
    return h.hexdigest()[:16]


def _function_source(function: Callable[..., object], seen: set | None = None) -> str:
    """``function``'s source and, recursively, that of the functions of its own module it
    names."""
    seen = set() if seen is None else seen
    target = inspect.unwrap(function)
    if target in seen:
        return ""
    seen.add(target)
    try:
        text = inspect.getsource(target)
    except (OSError, TypeError):  # a builtin or C function: its name stands for it
        return getattr(target, "__qualname__", repr(target))
    code = getattr(target, "__code__", None)
    module = getattr(target, "__globals__", {})
    for name in sorted(set(code.co_names) if code else ()):
        helper = module.get(name)
        if inspect.isfunction(helper) and helper.__module__ == target.__module__:
            text += "\n" + _function_source(helper, seen)
    return text


def code_identity(readers: CodeReaders, source: str | None, reference: bool,
                  kernel_hash: str | None = None, dispatch: Mapping | None = None
                  ) -> dict[str, str]:
    """The identity of one kernel's code in the importable mmsuite: its parts and their
    combined ``hash``. ``readers`` are its backend's (``BackendInfo.code``); ``source`` is
    the catalogue's source path of the kernel; ``kernel_hash``, where given, is the hash of
    a plugin kernel's own code (``plugin_kernel_hash``), which mmsuite's files do not
    hold; ``dispatch`` is the row's ``info["dispatch"]``, where a planner chose its
    plan."""
    library = reference_library(readers.library) if reference else ""
    if reference:
        kernel = hashlib.sha256(library.encode()).hexdigest()[:16]
    else:
        kernel = kernel_hash or _kernel_files_hash(readers, source)
    parts = {"kernel": kernel, "engine": engine_hash(), "toolchain": toolchain(readers.toolchain)}
    steering = steering_hash(dispatch)
    if steering is not None:
        parts["steering"] = steering
    parts["hash"] = _digest([(k, v.encode()) for k, v in parts.items()])
    if reference:
        parts["library"] = library
    return parts
