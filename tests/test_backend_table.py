"""The table of backends: one row a backend, and the rest of mmsuite reads it."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from mmsuite import catalogue
from mmsuite.backend_table import BACKENDS, HOST_BACKEND, in_ladder_order, runs_on_host

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


def test_every_kernel_belongs_to_a_backend_of_the_table() -> None:
    assert {k.backend for k in catalogue.kernels()} == set(BACKENDS)


def test_ladder_order_puts_known_backends_first_in_table_order() -> None:
    assert in_ladder_order(["cuda", "zz", "cpu", "cuda", "aa"]) == ["cpu", "cuda", "aa", "zz"]


def test_a_row_runs_on_the_host_by_its_backend_or_its_device() -> None:
    assert runs_on_host({"backend": HOST_BACKEND.name})
    assert runs_on_host({"backend": "opencl", "info": {"device_type": "CPU"}})
    assert not runs_on_host({"backend": "opencl", "info": {"device_type": "GPU"}})
    assert not runs_on_host({"backend": "cuda"}) and not runs_on_host({"backend": "tpu"})


def test_no_module_outside_the_adapters_names_the_backends_in_a_row() -> None:
    """A new backend touches its adapter, the table and its kernels: nothing else lists the
    three backends."""
    listed = ('("cpu", "opencl", "cuda")', "('cpu', 'opencl', 'cuda')")
    for path in (ROOT / "mmsuite").rglob("*.py"):
        text = path.read_text()
        assert not any(row in text for row in listed), path.relative_to(ROOT)
