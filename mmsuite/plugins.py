"""Your own kernels beside the ladder: plugins that join the one catalogue.

A plugin is a Python file, or an installed package announcing itself in the entry-point
group ``mmsuite.kernels``, that calls :func:`register` once per kernel::

    import mmsuite

    mmsuite.register(id="mine.tiled", backend="cuda", source="tiled.cu", entry="mm_tiled",
                     block=(16, 16), parent="cuda.12_tiled16")
    mmsuite.register(id="mine.numpy", backend="python", function=my_gemm)

Each registered kernel is a :class:`mmsuite.catalogue.Kernel` like a rung's, so the engine,
the verifier, the report, ``compare``, ``continuous``, asv and the workers treat it as they
treat a rung. What a backend needs to launch it:

- ``cpu``: a C file defining ``void ENTRY(long m, long n, long k, long batch, float alpha,
  const float *a, const float *b, float beta, float *c)`` (the ladder's ABI, ``csrc/mm.h``),
  built with the C ladder's own flags and cached by content hash;
- ``opencl``: a source and its kernel name, with the ladder's arguments (``cl/common.h``),
  its local size and the block of C a work-group covers;
- ``cuda``: a source and its ``extern "C"`` entry, with the ladder's arguments
  (``cuda/common.cuh``), its block, the tile of C a block covers, the grid's walk and its
  shared memory, compiled through the same path and options as the CUDA rungs;
- ``python``: a callable ``f(alpha, A, B, beta, C)`` updating C in place; numpy arrays on the
  host, or with ``device="cuda"`` CuPy arrays, timed by the GPU's events (enqueue on CuPy's
  current stream: a Triton or PyTorch kernel takes the arrays through ``torch.from_dlpack``
  and that stream through ``torch.cuda.ExternalStream``).

Sources may include the ladder's headers (``mm.h``, ``common.h``, ``common.cuh``) beside
their own. Which plugins a process has: the files in ``MMSUITE_PLUGINS`` (paths separated by
``:``) and every installed entry point; ``--plugin PATH`` adds a file for one command and for
every process it starts (it joins ``MMSUITE_PLUGINS``). A plugin that cannot be loaded is a
:class:`PluginError`: one line that names the plugin and the fix, before any work.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import sys
import traceback
import types
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import catalogue
from .backend_table import BACKENDS, HOST
from .catalogue import PRECISIONS, Kernel
from .problem import LAYOUTS

ENTRY_POINT_GROUP = "mmsuite.kernels"
ENV_VAR = "MMSUITE_PLUGINS"
#: The backends a plugin names: the table's, and ``python`` for a callable, which runs on
#: the backend whose ``callable_device`` its ``device=`` names.
PYTHON = "python"


class PluginError(Exception):
    """A plugin that cannot join the catalogue; the message names the plugin and the fix."""


@dataclass(frozen=True)
class Plugin:
    """One loaded plugin: what to call it (its file or entry point) and the ids it added."""

    label: str
    kernels: tuple[str, ...]


@dataclass
class _Loading:
    """The plugin being loaded: registrations wait here until it has loaded whole."""

    label: str
    folder: Path | None
    namespace: str | None = None  # an entry point's name: its kernels' ids start with it
    kernels: list[Kernel] | None = None


_current: _Loading | None = None
_loaded: dict[str, Plugin] = {}  # by the file's resolved path or "entry point NAME"
_entry_points_loaded = False


# -------------------------------------------------------------------- declaring
def register(id: str, backend: str, *, parent: str | None = None, adds: str = "",
             layout: str = "row", precision: str = "fp32", source: str | os.PathLike | None = None,
             entry: str | None = None, function: Callable[..., object] | None = None,
             device: str = HOST, threaded: bool = False,
             block: Sequence[int] | None = None, tile: Sequence[int] | None = None,
             grid_x: str | None = None, smem: int = 0,
             defines: dict[str, int | str] | None = None,
             local: Sequence[int] | None = None, local_mem: int = 0) -> Kernel:
    """Declare a kernel; it joins the catalogue once its plugin has loaded (at once when
    called outside a plugin's loading, e.g. from a script or a notebook).

    ``id``: ``NAMESPACE.NAME``, the namespace the plugin's own (an installed plugin's is its
    entry point's name), never a built-in backend's. ``backend``: ``cpu``, ``opencl``,
    ``cuda`` or ``python``. ``parent``: any kernel id, the row its ``x parent`` column
    compares with. ``layout``: the layout the kernel is written for (the engine serves the
    other by swapping operands). ``precision``: ``fp32``, ``tf32`` or ``fp32-accurate``, the
    class whose tolerance and peak it is held to. ``source`` (relative to the plugin's file)
    and ``entry`` for the compiled backends; ``function`` and ``device`` for ``python``.
    OpenCL: ``local`` (work-group size, x along columns of C), ``block`` (columns and rows of
    C one work-group covers; default ``local``), ``defines``, ``local_mem``. CUDA: ``block``
    (threads), ``tile`` (outputs a block covers along grid x and y; default ``block``),
    ``grid_x`` ("rows" or "cols"), ``smem`` (dynamic shared bytes), ``defines``. C:
    ``threaded`` when it runs on several OpenMP threads.
    """
    label, folder = _caller()
    loading = _current or _Loading(label, folder)
    if loading.folder is None:  # an entry point's module: its sources sit beside it
        loading = _Loading(loading.label, folder, loading.namespace)
    kernel = _declare(loading, id=id, backend=backend, parent=parent, adds=adds, layout=layout,
                      precision=precision, source=source, entry=entry, function=function,
                      device=device, threaded=threaded, block=block, tile=tile,
                      grid_x=grid_x, smem=smem, defines=defines or {}, local=local,
                      local_mem=local_mem)
    if _current is not None:
        assert _current.kernels is not None
        _current.kernels.append(kernel)
    else:
        _add(loading.label, [kernel])
    return kernel


def _declare(loading: _Loading, *, id: str, backend: str, parent: str | None, adds: str,
             layout: str, precision: str, source: str | os.PathLike | None,
             entry: str | None, function: Callable[..., object] | None, device: str,
             threaded: bool, block: Sequence[int] | None, tile: Sequence[int] | None,
             grid_x: str | None, smem: int, defines: dict[str, int | str],
             local: Sequence[int] | None, local_mem: int) -> Kernel:
    """The catalogue entry of one declaration, or PluginError saying what is wrong."""
    where = loading.label

    def fail(message: str) -> PluginError:
        return PluginError(f"plugin {where}: {id}: {message}")

    namespace, _, name = str(id).partition(".")
    if not namespace or not name or not str(id).replace(".", "").replace("_", "").isalnum():
        raise PluginError(f"plugin {where}: kernel id {id!r} must be NAMESPACE.NAME in "
                          "letters, digits and '_' (e.g. 'mine.tiled')")
    if namespace in BACKENDS:
        raise fail(f"the namespace {namespace!r} is mmsuite's own; name your kernels "
                   "after your plugin (e.g. 'mine.tiled')")
    if loading.namespace and namespace != loading.namespace:
        raise fail(f"an id of entry point {loading.namespace!r} starts with "
                   f"'{loading.namespace}.'")
    if backend not in (*BACKENDS, PYTHON):
        raise fail(f"unknown backend {backend!r}; choose from {', '.join((*BACKENDS, PYTHON))}")
    if layout not in LAYOUTS:
        raise fail(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if precision not in PRECISIONS:
        raise fail(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    given = {"block": block, "tile": tile, "grid_x": grid_x, "smem": smem or None,
             "local": local, "local_mem": local_mem or None, "defines": defines or None,
             "threaded": threaded or None}
    options = {k: v for k, v in given.items() if v is not None}
    info = BACKENDS.get(backend)
    stray = sorted(set(options) - set(info.declares if info else ()))
    if stray:
        raise fail(f"{', '.join(stray)} {'does' if len(stray) == 1 else 'do'} not apply to "
                   f"{backend} kernels")
    common: dict[str, Any] = {"id": id, "rung": _rung_after(parent), "parent": parent,
              "adds": adds or f"plugin kernel ({backend})", "origin": "plugin",
              "layout": layout, "precision": precision, "plugin": where,
              "constraints": "as its plugin declares"}
    if info is None:  # a Python callable, run by the backend of its device
        devices = {b.callable_device: b.name for b in BACKENDS.values() if b.callable_device}
        if source is not None or entry is not None:
            raise fail("a python kernel is a function=, not a source")
        if not callable(function):
            raise fail("backend='python' needs function=f, called as f(alpha, A, B, beta, C)")
        if device not in devices:
            raise fail(f"device must be one of {', '.join(devices)}, got {device!r}")
        return Kernel(backend=devices[device], function=function, **common)
    if function is not None:
        raise fail(f"function= is for backend='python'; a {backend} kernel is a source")
    if device != HOST:
        raise fail("device= is for backend='python'")
    if source is None or not entry:
        raise fail(f"a {backend} kernel needs source= (its file) and entry= (its function)")
    path = Path(source)
    if not path.is_absolute():
        path = (loading.folder or Path.cwd()) / path
    if not path.is_file():
        raise fail(f"source {path} does not exist; give a path relative to the plugin's file")
    threaded = bool(options.pop("threaded", False))
    try:
        launch = info.declared_launch(**options) if info.declared_launch else None
    except (TypeError, ValueError) as exc:
        raise fail(str(exc)) from None
    if launch is not None:
        common["launch"] = launch
    return Kernel(backend=backend, source=str(path.resolve()), entry=entry, threaded=threaded,
                  **common)


def _rung_after(parent: str | None) -> int:
    """A plugin kernel's rung: one above its parent's (where its parent is known yet)."""
    known = catalogue.BY_ID.get(parent or "")
    return known.rung + 1 if known else 1


def _caller() -> tuple[str, Path | None]:
    """Who called ``register`` outside a plugin's loading: its file and folder."""
    frame = sys._getframe(2)
    file = Path(frame.f_code.co_filename)
    return (str(file), file.resolve().parent) if file.is_file() else ("<python>", None)


# -------------------------------------------------------------------- loading
@contextmanager
def _loading(label: str, folder: Path | None, namespace: str | None = None) -> Iterator[_Loading]:
    global _current
    if _current is not None:
        raise PluginError(f"plugin {label} is loaded from inside plugin {_current.label}")
    _current = _Loading(label, folder, namespace, [])
    try:
        yield _current
    finally:
        _current = None


def _add(label: str, kernels: list[Kernel]) -> Plugin:
    try:
        catalogue.add(kernels)
    except catalogue.CatalogueError as exc:
        raise PluginError(f"plugin {label}: {exc}") from None
    return Plugin(label, tuple(k.id for k in kernels))


def load_file(path: str | os.PathLike) -> Plugin:
    """Load the plugin file at ``path`` (once per process); PluginError if it cannot be."""
    file = Path(path).expanduser()
    label = str(path)
    if not file.is_file():
        raise PluginError(f"plugin {label}: no such file; give the path of a Python file "
                          "that calls mmsuite.register")
    key = str(file.resolve())
    if key in _loaded:
        return _loaded[key]
    # A stable module name per path: functions pickled in one process load in another.
    name = "mmsuite_plugin_" + hashlib.sha256(key.encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise PluginError(f"plugin {label}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    with _loading(label, file.resolve().parent) as loading:
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except PluginError:
            sys.modules.pop(name, None)
            raise
        except Exception as exc:  # the user's code: its first line is the whole story
            sys.modules.pop(name, None)
            raise PluginError(f"plugin {label} failed to import: {_where(exc, file)}"
                              f"{type(exc).__name__}: {exc}; fix it or drop it") from None
        kernels = list(loading.kernels or [])
    if not kernels:
        raise PluginError(f"plugin {label} registered no kernel; call mmsuite.register(...)")
    _loaded[key] = plugin = _add(label, kernels)
    return plugin


def _where(exc: BaseException, file: Path) -> str:
    """``line N: `` of the innermost frame of ``exc`` in the plugin's own file."""
    if isinstance(exc, SyntaxError) and exc.lineno:
        return f"line {exc.lineno}: "
    own = [f.lineno for f in traceback.extract_tb(exc.__traceback__)
           if Path(f.filename).resolve() == file.resolve()]
    return f"line {own[-1]}: " if own else ""


def load_entry_points() -> list[Plugin]:
    """Load every installed plugin of the entry-point group (once per process)."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return []
    _entry_points_loaded = True
    plugins = []
    for point in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP),
                        key=lambda p: p.name):
        label = f"entry point {point.name} ({point.value})"
        if label in _loaded:
            continue
        with _loading(label, None, namespace=point.name) as loading:
            try:
                loaded = point.load()
                if callable(loaded) and not isinstance(loaded, types.ModuleType):
                    loaded()  # a function that registers
            except PluginError:
                raise
            except Exception as exc:
                raise PluginError(f"plugin {label} failed to import: {type(exc).__name__}: "
                                  f"{exc}; fix it, or uninstall its package") from None
            kernels = list(loading.kernels or [])
        if kernels:
            _loaded[label] = _add(label, kernels)
            plugins.append(_loaded[label])
    return plugins


def configured_paths() -> list[str]:
    """The plugin files ``MMSUITE_PLUGINS`` names, in order."""
    return [p for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p.strip()]


def use(paths: Iterable[str | os.PathLike]) -> None:
    """Add plugin files for this process and every process it starts (``--plugin``): their
    absolute paths join ``MMSUITE_PLUGINS``."""
    absolute = [str(Path(p).expanduser().absolute()) for p in paths]
    for path in absolute:
        if not Path(path).is_file():
            raise PluginError(f"plugin {path}: no such file; give the path of a Python file "
                              "that calls mmsuite.register")
    current = configured_paths()
    os.environ[ENV_VAR] = os.pathsep.join(current + [p for p in absolute if p not in current])


def load_configured() -> list[Plugin]:
    """Load this process's plugins: every installed entry point, then each file of
    ``MMSUITE_PLUGINS``. Idempotent; PluginError for the first that cannot load."""
    plugins = load_entry_points()
    for path in configured_paths():
        plugins.append(load_file(path))
    return plugins

