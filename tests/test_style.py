"""The code base stays ruff clean and mypy clean."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_clean() -> None:
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed (it comes with the `test` extra)")
    proc = subprocess.run([ruff, "check", "mmsuite", "tests", "benchmarks"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_clean() -> None:
    """mypy passes on every module of mmsuite/ with pyproject.toml's configuration."""
    mypy = shutil.which("mypy") or str(Path(sys.executable).parent / "mypy")
    if not Path(mypy).exists():
        pytest.skip("mypy is not installed (it comes with the `test` extra)")
    proc = subprocess.run([mypy], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _type_names(tree: ast.Module) -> list[tuple[str, int]]:
    """The types a module defines: every class (nested ones too) and every module-level
    name in CapWords bound by assignment (a type alias, a TypeVar, a NamedTuple or
    TypedDict made by a call, a validator class built at import)."""
    names = [(node.name, node.lineno) for node in ast.walk(tree)
             if isinstance(node, ast.ClassDef)]
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        names += [(t.id, node.lineno) for t in targets
                  if isinstance(t, ast.Name) and re.fullmatch(r"_?[A-Z][a-z]\w*", t.id)]
    return names


def test_every_type_name_in_the_package_is_unique() -> None:
    """One name, one meaning: no two classes (or type aliases) anywhere in mmsuite/ share a
    name, private ones included, so that a name read in a traceback, a signature or a
    review says which type it is without the module beside it."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted((ROOT / "mmsuite").rglob("*.py")):
        for name, line in _type_names(ast.parse(path.read_text(), str(path))):
            where[name].append(f"{path.relative_to(ROOT)}:{line}")
    assert len(where) > 100  # the walk found the package's types
    shared = {name: places for name, places in where.items() if len(places) > 1}
    assert not shared, shared
