"""The catalogue: one list of every kernel, with ladders that hang together."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import mmsuite
from mmsuite import catalogue
from mmsuite.sources import source_path


def test_every_backend_has_a_ladder_and_at_most_one_reference_per_precision() -> None:
    for backend in ("cpu", "opencl", "cuda"):
        ladder = catalogue.kernels(backend)
        assert len([k for k in ladder if not k.reference]) >= 4
        for precision in catalogue.PRECISIONS:
            assert len([k for k in ladder if k.reference and k.precision == precision]) <= 1
    assert catalogue.reference_of("cuda").id == "cuda.cublas"
    assert catalogue.reference_of("cuda", catalogue.TF32).id == "cuda.cublas_tf32"


def test_every_kernel_has_a_precision_class_and_tensor_cores_only_on_cuda() -> None:
    for kernel in mmsuite.kernels():
        assert kernel.precision in catalogue.PRECISIONS, kernel.id
        assert not kernel.tensor_cores or kernel.backend == "cuda", kernel.id
    assert catalogue.get("cuda.cublas").precision == catalogue.FP32
    assert catalogue.get("cuda.cublas_tf32").tensor_cores
    with pytest.raises(ValueError, match="precision"):
        catalogue.Kernel("cuda.x", "cuda", 1, None, "", "", precision="fp16")


def test_every_kernel_offers_what_the_adapters_read() -> None:
    """The adapters type kernels by ``KernelSpec`` and never import the catalogue."""
    from mmsuite.backends.base import KernelSpec

    wanted = [name for name, value in vars(KernelSpec).items() if isinstance(value, property)]
    assert {"id", "source", "entry", "launch"} <= set(wanted)
    for kernel in mmsuite.kernels():
        assert all(hasattr(kernel, name) for name in wanted), kernel.id
    backends = Path(catalogue.__file__).parent / "backends"
    for path in backends.glob("*.py"):
        assert "catalogue import" not in path.read_text(), path.name


def test_ids_are_unique_and_prefixed_by_backend() -> None:
    ids = [k.id for k in mmsuite.kernels()]
    assert len(ids) == len(set(ids))
    assert all(k.id.startswith(k.backend + ".") for k in mmsuite.kernels())


def test_parents_are_earlier_rungs_of_the_same_backend() -> None:
    order = catalogue.ladder_rank()
    for k in mmsuite.kernels():
        if k.parent:
            parent = catalogue.get(k.parent)
            assert parent.backend == k.backend and order[parent.id] < order[k.id]


def test_every_rung_has_a_source_file_that_ships() -> None:
    for k in mmsuite.kernels():
        if not k.reference:
            assert k.source and source_path(k.source).is_file(), k.id
            assert k.entry and k.adds


# What an unavailable kernel's reason names: its backend's runtime or device, or the file or
# entry the kernel needs.
CAUSES = {"cpu": ("extension", "compiler", "OpenMP"),
          "opencl": ("OpenCL", "pyopencl", "pyclblast", "CLBlast", "PoCL", "device", "local size"),
          "cuda": ("CuPy", "CUDA", "GPU", "NVIDIA", "device")}


def test_every_unavailable_kernel_names_why_in_one_line() -> None:
    unavailable = [k for k in mmsuite.kernels() if not k.available]
    if not unavailable:
        pytest.skip("every kernel is available on this machine")
    for k in unavailable:
        reason = k.reason
        assert "\n" not in reason and len(reason.split()) >= 4, (k.id, reason)
        # A bare exception is a probe's bug, not a reason.
        assert not re.match(r"\w+(Error|Exception): ", reason), (k.id, reason)
        named = CAUSES[k.backend] + tuple(filter(None, (k.source, k.entry)))
        assert any(word in reason for word in named), (k.id, reason)


def test_unknown_id_names_close_matches() -> None:
    with pytest.raises(KeyError, match="cpu.seq_naive"):
        catalogue.get("cpu.seq_naiv")


def test_unavailable_kernel_raises_with_its_reason() -> None:
    unavailable = [k for k in mmsuite.kernels() if not k.available]
    if not unavailable:
        pytest.skip("every kernel is available on this machine")
    k = unavailable[0]
    with pytest.raises(mmsuite.KernelUnavailable) as caught:
        mmsuite.run(k.id, mmsuite.Problem(4, 4, 4))
    # The reason alone: a row already says "<id> unavailable: ", and says it once.
    assert str(caught.value) == k.reason


def test_launch_data_and_engine_adapters_do_not_import_the_catalogue() -> None:
    # The catalogue asks the backend registry about availability (Kernel.reason); the
    # registry, the launch types and these adapters take Kernel for type hints only, so
    # the import graph has no circle.
    root = Path(catalogue.__file__).parent
    for name in ("launch.py", "backends/__init__.py", "backends/base.py", "backends/cpu.py",
                 "backends/cuda.py", "backends/cuda_session.py", "backends/cuda_timing.py",
                 "backends/opencl.py", "backends/opencl_session.py", "backends/cl_devices.py"):
        tree = ast.parse((root / name).read_text())
        for node in tree.body:  # module level, outside `if TYPE_CHECKING:`
            if isinstance(node, ast.ImportFrom):
                assert not (node.module or "").endswith("catalogue"), name
