"""The table of backends: one row a backend, and the rest of mmsuite reads it."""

from __future__ import annotations

import ast
import importlib
import json
from dataclasses import asdict
from pathlib import Path

import pytest

from mmsuite import catalogue, identity
from mmsuite.backend_table import (
    BACKENDS,
    DEVICE_PEAK,
    GPU,
    GPU_BACKENDS,
    GPU_PEAK,
    HOST,
    HOST_BACKEND,
    HOST_PEAK,
    SELECTED,
    in_ladder_order,
    runs_on_host,
)

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", list(BACKENDS))
def test_each_row_names_its_adapter_and_its_fp32_reference(name: str) -> None:
    backend = BACKENDS[name]
    module, _, cls = backend.adapter.partition(":")
    assert getattr(importlib.import_module(module), cls).name == name
    reference = catalogue.get(backend.reference)
    assert reference.reference and reference.backend == name
    assert catalogue.reference_of(name) is reference
    assert catalogue.kernels(name), f"{name} has no kernels"


@pytest.mark.parametrize("name", list(BACKENDS))
def test_each_row_has_what_the_engine_and_the_report_read(name: str) -> None:
    backend = BACKENDS[name]
    assert backend.device in (HOST, GPU, SELECTED)
    assert backend.peak in (HOST_PEAK, GPU_PEAK, DEVICE_PEAK)
    assert backend.title and backend.colour.startswith("#")
    assert all(key and title for key, title in backend.environment)
    # The device is named by a field the report shows, except the host CPU's (its own).
    shown = {key for key, _ in backend.environment}
    assert (backend.device_field is None) == (backend.device == HOST)
    assert backend.device_field is None or backend.device_field in shown
    assert (backend.device_type_field is not None) == (backend.device == SELECTED)
    assert backend.device_type_field is None or backend.device_type_field in shown
    # Its code identity has a reader for each part, and travels to a continuous worker.
    code = backend.code
    assert code.toolchain in (identity.NO_TOOLCHAIN, identity.NVRTC, identity.OPENCL_PLATFORMS)
    assert code.library in (identity.HOST_BLAS, identity.CUBLAS, identity.CLBLAST)
    assert identity.CodeReaders(**json.loads(json.dumps(asdict(code)))) == code


def test_a_backend_built_ahead_names_the_package_of_its_built_rungs() -> None:
    package = ROOT / "mmsuite"
    for backend in BACKENDS.values():
        if backend.code.built:
            built = {p.name.split(".")[0] for p in (package / backend.code.built).iterdir()
                     if p.suffix in (".so", ".pyd")}
            rungs = {identity.built_rung(k.source or "")
                     for k in catalogue.kernels(backend.name) if not k.reference}
            assert built == rungs, backend.name


def test_every_kernel_belongs_to_a_backend_of_the_table() -> None:
    assert {k.backend for k in catalogue.kernels()} == set(BACKENDS)


def test_ladder_order_puts_known_backends_first_in_table_order() -> None:
    assert in_ladder_order(["cuda", "zz", "cpu", "cuda", "aa"]) == ["cpu", "cuda", "aa", "zz"]


def test_a_row_runs_on_the_host_by_its_backend_or_its_device() -> None:
    assert runs_on_host({"backend": HOST_BACKEND.name})
    assert runs_on_host({"backend": "opencl", "info": {"device_type": "CPU"}})
    assert not runs_on_host({"backend": "opencl", "info": {"device_type": "GPU"}})
    assert not runs_on_host({"backend": "cuda"}) and not runs_on_host({"backend": "tpu"})


def test_a_gpu_is_named_by_a_gpu_backend_or_a_selected_gpu() -> None:
    assert BACKENDS["cuda"].gpu_name({"gpu": "H100"}) == "H100"
    assert BACKENDS["cuda"].gpu_name({"unavailable": "no CUDA device"}) is None
    opencl = BACKENDS["opencl"]
    assert opencl.gpu_name({"opencl_device": "H100", "opencl_device_type": "GPU"}) == "H100"
    assert opencl.gpu_name({"opencl_device": "pthread-x86", "opencl_device_type": "CPU"}) is None
    assert HOST_BACKEND.gpu_name({"gpu": "H100"}) is None
    assert GPU_BACKENDS == ("cuda",)


#: The one place outside the table and the adapters where a backend's name is spelled: the
#: environment's field of the CPU model, which is the same word as the C backend's name.
SAME_WORD = {("host.py", "CPU_MODEL"),
             ("__init__.py", "LADDER_HEADERS")}  # sources/: the folder cuda/, not the backend


def _spelled_backend_names(path: Path) -> list[str]:
    """Where a module spells a backend's name as a string, apart from the assignments of
    SAME_WORD."""
    tree = ast.parse(path.read_text())
    allowed = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and (path.name, t.id) in SAME_WORD for t in node.targets):
            allowed.update(id(part) for part in ast.walk(node.value))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in allowed and node.value in BACKENDS:
            found.append(f"{path.name}:{node.lineno}: {node.value!r}")
    return found


def test_only_the_table_and_the_adapters_spell_a_backend_name() -> None:
    """A new backend touches its adapter, the table and its kernels: no other module names a
    backend or branches on one."""
    package = ROOT / "mmsuite"
    own = {package / "backend_table.py"}
    spelled = [hit for path in sorted(package.rglob("*.py"))
               if path not in own and package / "backends" not in path.parents
               for hit in _spelled_backend_names(path)]
    assert spelled == []


def test_the_check_for_spelled_names_sees_a_branch(tmp_path: Path) -> None:
    planted = tmp_path / "host.py"
    planted.write_text('CPU_MODEL = "cpu"\nif backend == "cuda":\n    kind = "cpu"\n')
    assert _spelled_backend_names(planted) == ["host.py:2: 'cuda'", "host.py:3: 'cpu'"]


def test_no_module_outside_the_adapters_names_the_backends_in_a_row() -> None:
    """A new backend touches its adapter, the table and its kernels: nothing else lists the
    three backends."""
    listed = ('("cpu", "opencl", "cuda")', "('cpu', 'opencl', 'cuda')")
    for path in (ROOT / "mmsuite").rglob("*.py"):
        text = path.read_text()
        assert not any(row in text for row in listed), path.relative_to(ROOT)
