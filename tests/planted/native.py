"""The planted segfaulting C rung (segfault.c): built in a test's temporary folder and put
in place of one real rung's entry, in this process or in a worker (through
``sitecustomize``, which every Python process started with the folder on its path runs)."""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

SOURCE = Path(__file__).with_name("segfault.c")
MODULE = "_mmsuite_planted_segfault"
ARGS = ("long m, long n, long k, long batch, float alpha, const float *a, const float *b, "
        "float beta, float *c")


def build(folder: Path) -> Path:
    """Compile segfault.c into ``folder`` as a cffi extension; returns the folder."""
    from cffi import FFI

    ffi = FFI()
    ffi.cdef(f"void mm_planted_segfault({ARGS});")
    ffi.set_source(MODULE, SOURCE.read_text())
    ffi.compile(tmpdir=str(folder))
    return folder


class _Lib:
    """A real rung extension's functions, with ``entry`` answered by the planted one."""

    def __init__(self, real, planted, entry: str) -> None:
        self._real, self._planted, self._entry = real, planted, entry

    def __getattr__(self, name: str):
        return self._planted.mm_planted_segfault if name == self._entry else \
            getattr(self._real, name)


def plant(folder: Path, entry: str = "mm_seq_ikj") -> None:
    """Make the CPU backend of this process call the planted rung for ``entry``."""
    from mmsuite.backends import cpu

    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    planted = importlib.import_module(MODULE)
    real_load = cpu._load_rung

    def load(name: str):
        ext, reason = real_load(name)
        if ext is None:
            return ext, reason
        return types.SimpleNamespace(ffi=ext.ffi, lib=_Lib(ext.lib, planted.lib, entry)), ""

    cpu._load_rung = load


def sitecustomize(folder: Path, entry: str = "mm_seq_ikj") -> None:
    """Write ``folder/sitecustomize.py``: every process run with ``folder`` first on
    PYTHONPATH (the CLI and its workers) plants the rung before it measures anything."""
    (folder / "sitecustomize.py").write_text(
        "from tests.planted.native import plant\n"
        f"plant({str(folder)!r}, {entry!r})\n")
