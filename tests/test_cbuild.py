"""The cffi build of the CPU ladder: one extension per rung file in csrc/, declaring what
that file defines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mmsuite import _cbuild


def test_every_numbered_rung_file_is_a_rung(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("01_first.c", "07_seventh.c", "runtime.c", "ladder.h", "7_short.c"):
        (tmp_path / name).write_text("\n")
    monkeypatch.setattr(_cbuild, "CSRC", tmp_path)
    assert _cbuild.rung_names() == ["first", "seventh"]


def test_a_config_function_is_declared_only_where_its_rung_defines_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "01_plain.c").write_text("/* mentions mm_tuned_config(void) only */\n")
    (tmp_path / "02_tuned.c").write_text(
        'const char *mm_tuned_config(void) { return "x"; }\n')
    monkeypatch.setattr(_cbuild, "CSRC", tmp_path)
    assert _cbuild.config_function("tuned") == "mm_tuned_config"
    assert _cbuild.config_function("plain") is None


def test_each_rung_is_an_extension_of_its_own_file_and_the_runtime() -> None:
    assert _cbuild.CFFI_MODULES == [f"mmsuite/_cbuild.py:{name}_builder"
                                    for name in _cbuild.rung_names()]
    module, _, _, options = _cbuild.BUILDERS["omp_tiled_builder"]._assigned_source
    assert module == "mmsuite._cladder.omp_tiled"
    assert options["sources"] == ["csrc/05_omp_tiled.c", "csrc/runtime.c"]
    # Two checkouts of one source must build the same bytes: their paths are mapped out.
    assert f"-ffile-prefix-map={_cbuild.ROOT}=." in options["extra_compile_args"]


def test_an_installed_rung_says_which_flags_built_it() -> None:
    ext = pytest.importorskip("mmsuite._cladder.omp_tiled")
    flags = ext.ffi.string(ext.lib.mm_cflags()).decode().split()
    assert flags == _cbuild.compile_flags()  # without the build's own paths


def test_the_blis_rung_says_how_it_was_built_and_blocked() -> None:
    ext = pytest.importorskip("mmsuite._cladder.omp_blis")
    text = ext.ffi.string(ext.lib.mm_omp_blis_config()).decode()
    match = re.fullmatch(r"(avx512|avx2|generic) MRxNR=(\d+)x(\d+) KC=(\d+) MC=(\d+) NC=(\d+)",
                         text)
    assert match, text
    mr, nr, kc, mc, nc = map(int, match.groups()[1:])
    # The blocks are whole micro-tiles, and deep enough to amortise C's write-back.
    assert mc % mr == 0 and nc % nr == 0 and kc % 16 == 0 and kc >= 64


def test_the_default_flags_keep_ieee_arithmetic(monkeypatch: pytest.MonkeyPatch) -> None:
    """Subnormals, NaN and Inf are part of what the kernels must compute (the ``tiny`` and
    ``special`` input classes): no flag that flushes, assumes finite values or reorders
    beyond FMA contraction."""
    unsafe = ("-ffast-math", "-Ofast", "-ffinite-math-only", "-funsafe-math-optimizations",
              "-fno-signed-zeros", "-freciprocal-math", "-fassociative-math")
    monkeypatch.delenv("MMSUITE_CFLAGS", raising=False)
    flags = _cbuild.compile_flags()
    assert "-O3" in flags and not set(flags) & set(unsafe)
