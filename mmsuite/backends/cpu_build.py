"""A plugin's C kernel built as the C ladder's rungs are: the same ABI (``csrc/mm.h``), the
same runtime helpers, and the flags the installed ladder was built with, read back from one
of its extensions (``mm_cflags``), so that a plugin rung and a ladder rung differ only in
their code.

Each build is a cffi extension of its own, cached under ``$XDG_CACHE_HOME/mmsuite/c-plugins``
by a hash of everything that goes into it (the source with its headers inlined, the entry,
the flags, the runtime, cffi's and the interpreter's ABI): an unchanged kernel is never
rebuilt, and an edited one never runs stale. A compiler error is the kernel's, not
mmsuite's: ``CBuildError`` carries its first lines.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import shutil
import sysconfig
import tempfile
from functools import cache
from pathlib import Path
from types import ModuleType

from ..sources import ladder_folder, read_source

#: Lines of the compiler's output a failed build's reason keeps.
ERROR_LINES = 6


class CBuildError(RuntimeError):
    """A plugin's C source did not build; the message holds the compiler's first lines."""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mmsuite" / "c-plugins"


def build_key(source: str, entry: str, cflags: str) -> str:
    """The hash that names a build: equal keys, byte-identical inputs to the compiler."""
    import cffi

    from .. import _cbuild

    runtime = (ladder_folder(".c") or Path()) / _cbuild.RUNTIME
    parts = [read_source(source), entry, cflags, runtime.read_text(), cffi.__version__,
             sysconfig.get_config_var("EXT_SUFFIX") or ""]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:20]


@cache
def load(source: str, entry: str, cflags: str) -> ModuleType:
    """The extension of C kernel ``entry`` in ``source`` built with ``cflags`` (cached on
    disk and in this process); CBuildError when the compiler refuses it."""
    key = build_key(source, entry, cflags)
    name = f"mmsuite_cplugin_{key}"
    folder = cache_dir() / key
    built = sorted(folder.glob(f"{name}.*.so")) + sorted(folder.glob(f"{name}.so"))
    if not built:
        built = [_build(source, entry, cflags, name, folder)]
    spec = importlib.util.spec_from_file_location(name, built[0])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build(source: str, entry: str, cflags: str, name: str, folder: Path) -> Path:
    """Compile into a fresh folder, then move it into place whole: two processes building
    the same key at once both succeed, and a killed build leaves no half-written extension."""
    from cffi import FFI

    from .. import _cbuild

    ladder = ladder_folder(".c")
    if ladder is None:
        raise CBuildError("the C ladder's headers are not in this installation")
    declarations = f"void {entry}({_cbuild.ARGS});" + _cbuild.RUNTIME_DECLARATIONS
    ffi = FFI()
    ffi.cdef(declarations)
    path = Path(source)
    ffi.set_source(
        name, declarations + f'const char *mm_cflags(void) {{ return "{cflags}"; }}',
        sources=[str(path), str(ladder / _cbuild.RUNTIME)],
        include_dirs=[str(path.parent), str(ladder)],
        extra_compile_args=cflags.split() + [f"-ffile-prefix-map={path.parent}=."],
        extra_link_args=["-fopenmp"])
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=folder.parent))
    try:
        with _captured_output() as output:
            try:
                built = Path(ffi.compile(tmpdir=str(work), verbose=False))
            except Exception as exc:
                log = output.read()
                lines = [line for line in log.splitlines() if "error" in line.lower()] or \
                    log.splitlines() or [str(exc)]
                raise CBuildError(f"{path.name} does not build with the C ladder's flags "
                                  f"({cflags}): " + " | ".join(lines[:ERROR_LINES])) from None
        for leftover in work.iterdir():  # keep the extension only
            if leftover != built:
                (shutil.rmtree if leftover.is_dir() else os.remove)(leftover)
        with contextlib.suppress(OSError):  # another process got there first: use its build
            os.rename(work, folder)
        return next(folder.glob(f"{name}*.so"))
    finally:
        shutil.rmtree(work, ignore_errors=True)


class _CapturedOutput:
    def __init__(self, file) -> None:
        self._file = file

    def read(self) -> str:
        self._file.seek(0)
        return self._file.read().decode(errors="replace")


@contextlib.contextmanager
def _captured_output():
    """The compiler's stdout and stderr (file descriptors 1 and 2, where distutils' child
    processes write) into a file, for the failure's reason."""
    with tempfile.TemporaryFile() as sink:
        saved = [os.dup(fd) for fd in (1, 2)]
        try:
            for fd in (1, 2):
                os.dup2(sink.fileno(), fd)
            yield _CapturedOutput(sink)
        finally:
            for fd, copy in zip((1, 2), saved):
                os.dup2(copy, fd)
                os.close(copy)
