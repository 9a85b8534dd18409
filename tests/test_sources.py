"""Kernel sources are found in a checkout and in the wheel, with their local headers inlined."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmsuite.sources import expand_includes, read_source


def test_local_includes_are_inlined(tmp_path: Path) -> None:
    (tmp_path / "h.cuh").write_text("#pragma once\n#define X 3\n")
    text = '#include "h.cuh"\n#include "h.cuh"\n#include <cstdio>\nint y = X;\n'
    out = expand_includes(text, tmp_path)
    assert out.count("#define X 3") == 1 and "#include <cstdio>" in out


def test_fragments_are_inlined_at_every_include(tmp_path: Path) -> None:
    (tmp_path / "body.inc").write_text("x += 1;\n")
    text = 'void f() {\n#include "body.inc"\n}\nvoid g() {\n#include "body.inc"\n}\n'
    assert expand_includes(text, tmp_path).count("x += 1;") == 2


def test_rungs_21_and_23_share_one_mac_loop() -> None:
    loop = (Path(__file__).parent.parent / "cuda" / "mac_loop.inc").read_text()
    body = loop[loop.index("float4 av[A_CHUNKS]"):]
    assert body in read_source("cuda/21_splitk.cu")
    streamk = read_source("cuda/23_streamk.cu")
    assert streamk.count(body) == 2  # rung 21's kernels (included) and rung 23's mac_loop


def test_read_source_inlines_the_shared_headers() -> None:
    assert "mm_store" in read_source("cuda/07_blocktile_2d.cu")  # from common.cuh
    assert '#include "common.h"' not in read_source("cl/01_naive.cl")


def test_the_wheel_lists_every_package_of_mmsuite() -> None:
    """setuptools packs only the packages pyproject.toml lists: one left out is missing from
    the wheel (and from asv's installs) while an editable checkout works."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib comes with Python 3.11")
    root = Path(__file__).parent.parent
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    listed = set(pyproject["tool"]["setuptools"]["packages"])
    on_disk = {".".join(init.parent.relative_to(root).parts)
               for init in (root / "mmsuite").rglob("__init__.py")}
    assert on_disk - listed == set()
