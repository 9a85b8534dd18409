"""The cffi build of the CPU ladder: what it declares comes from the files in csrc/."""

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


def test_config_functions_are_declared_only_where_a_rung_defines_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "01_plain.c").write_text("void mm_plain(void) {}\n")
    (tmp_path / "02_tuned.c").write_text(
        'const char *mm_tuned_config(void) { return "x"; }\n')
    (tmp_path / "03_other.c").write_text("/* mentions mm_tuned_config(void) only */\n")
    monkeypatch.setattr(_cbuild, "CSRC", tmp_path)
    assert _cbuild.config_functions() == ["mm_tuned_config"]


def test_the_blis_rung_says_how_it_was_built_and_blocked() -> None:
    ext = pytest.importorskip("mmsuite._ckernels")
    text = ext.ffi.string(ext.lib.mm_omp_blis_config()).decode()
    match = re.fullmatch(r"(avx512|avx2|generic) MRxNR=(\d+)x(\d+) KC=(\d+) MC=(\d+) NC=(\d+)",
                         text)
    assert match, text
    mr, nr, kc, mc, nc = map(int, match.groups()[1:])
    # The blocks are whole micro-tiles, and deep enough to amortise C's write-back.
    assert mc % mr == 0 and nc % nr == 0 and kc % 16 == 0 and kc >= 64
