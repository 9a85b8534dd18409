"""The families behind one interface: the manifest lists each once, a family's variants
and launches are its own, and the package keeps its layers (no GPU)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from mmsuite.cuda_dispatch import planners, variants
from mmsuite.cuda_dispatch.family import Family
from mmsuite.launch import DeviceFacts

H100 = DeviceFacts()
PACKAGE = Path(variants.__file__).resolve().parent
#: What the dispatcher may import from the rest of mmsuite: the launch types, the writer
#: of files, the call's type (everything it plans from and for sits below it).
ALLOWED_OUTSIDE = {"mmsuite.launch", "mmsuite.results", "mmsuite.layout"}
#: Problems that reach every family (a skinny side, K short, few outputs, K long).
PROBLEMS = [(3, 5000, 700, 1), (4096, 900, 6, 2), (7, 5, 40000, 1), (300, 1200, 3000, 1)]


def test_the_manifest_lists_each_family_once_and_each_variant_names_its_family() -> None:
    names = [family.name for family in variants.MANIFEST]
    assert len(set(names)) == len(names) == len(variants.FAMILIES)
    for family in variants.MANIFEST:
        assert isinstance(family, Family) and family.variants
        assert all(v.kind is family and v.source == family.source for v in family.variants)
    assert [v.key for v in variants.VARIANTS] == [
        v.key for family in variants.MANIFEST for v in family.variants]


@pytest.mark.parametrize("dims", PROBLEMS, ids=lambda d: "x".join(map(str, d)))
def test_a_candidates_launches_are_its_familys_own(dims: tuple[int, int, int, int]) -> None:
    found = variants.candidates(*dims, H100)
    assert {c.family for c in found} >= {"splitk"}
    for candidate in found:
        plan = planners.plan_of(planners.Decision(candidate, "forced"), *dims, H100)
        assert {step.source for step in plan.steps} == {candidate.variant.source}
        assert plan.steps[0].entry == candidate.variant.entry
        assert plan.info["dispatch"]["family"] == candidate.family


def test_every_family_is_offered_on_some_problem() -> None:
    offered = {c.family for dims in PROBLEMS for c in variants.candidates(*dims, H100)}
    assert offered == set(variants.FAMILIES)


def _imports(path: Path) -> set[str]:
    """The mmsuite modules a file of the package imports, by absolute name."""
    module = ".".join(path.relative_to(PACKAGE.parent.parent).with_suffix("").parts)
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = module.split(".")[:len(module.split(".")) - node.level]
            name = ".".join(base + ([node.module] if node.module else []))
            out.add(name if node.level else str(node.module))
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return {name for name in out if name.startswith("mmsuite")}


SOURCES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_the_dispatcher_imports_nothing_above_it(path: Path) -> None:
    outside = {name for name in _imports(path) if not name.startswith("mmsuite.cuda_dispatch")}
    assert outside <= ALLOWED_OUTSIDE


def test_families_depend_on_each_other_one_way() -> None:
    folder = PACKAGE / "families"
    graph = {p.stem: {name.rsplit(".", 1)[1] for name in _imports(p)
                      if name.startswith("mmsuite.cuda_dispatch.families.")}
             for p in folder.glob("*.py") if p.stem != "__init__"}
    assert graph["streamk"] == {"splitk"} and graph["splitk"] == set()

    def reaches(start: str, goal: str, seen: frozenset = frozenset()) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n}))
                   for n in graph[start])

    assert not [name for name in graph if reaches(name, name)]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_no_module_of_the_dispatcher_passes_500_lines_nor_a_function_60(path: Path) -> None:
    text = path.read_text()
    assert len(text.splitlines()) <= 500
    long = [node.name for node in ast.walk(ast.parse(text))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno is not None and node.end_lineno - node.lineno + 1 > 60]
    assert long == []
