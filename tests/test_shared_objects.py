"""A built extension is judged whole or truncated from its ELF headers, without loading it
(loading a truncated one kills the process with SIGBUS)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from mmsuite import shared_objects

BUILT = sorted((Path(__file__).resolve().parent.parent / "mmsuite" / "_cladder").glob("*.so"))
pytestmark = [pytest.mark.skipif(not BUILT, reason="needs the built C ladder"),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF: Linux")]


def test_a_built_extension_is_whole() -> None:
    assert [shared_objects.damage(path) for path in BUILT] == [""] * len(BUILT)


@pytest.mark.parametrize("keep", [0.9, 0.5, 0.1, 30])  # a share of the file, or bytes
def test_a_truncated_extension_is_named_damaged(tmp_path, keep) -> None:
    copy = tmp_path / BUILT[0].name
    shutil.copyfile(BUILT[0], copy)
    data = copy.read_bytes()
    copy.write_bytes(data[:keep if isinstance(keep, int) else int(len(data) * keep)])
    reason = shared_objects.damage(copy)
    assert reason.startswith(f"{copy} is truncated"), reason


def test_a_file_that_is_no_shared_object_is_named(tmp_path) -> None:
    text = tmp_path / "x.so"
    text.write_text("not a library\n")
    assert shared_objects.damage(text) == f"{text} is not an ELF shared object"


def test_a_damaged_rung_is_a_reason_and_is_never_loaded(tmp_path, monkeypatch) -> None:
    import importlib.machinery

    from mmsuite.backends import cpu

    truncated = tmp_path / "seq_ikj.abi3.so"
    truncated.write_bytes(BUILT[0].read_bytes()[:4096])
    spec = importlib.machinery.ModuleSpec("mmsuite._cladder.planted", None,
                                          origin=str(truncated))
    monkeypatch.setattr(cpu.importlib.util, "find_spec", lambda name: spec)
    monkeypatch.setattr(cpu.importlib, "import_module",
                        lambda name: pytest.fail(f"{name} was loaded"))
    extension, reason = cpu._load_rung("planted")
    assert extension is None
    assert reason.startswith(f"the C extension of planted is damaged: {truncated} is "
                             "truncated")
