"""The CUDA backend: sources compile, availability is reported, and on a GPU the adapter's
transfers, profile, memory check, launch errors and TF32 setting behave as documented.

The compile checks need only nvcc (no GPU) and run in CI; the rest skips, with the
backend's reason, where CuPy or a CUDA device is missing.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mmsuite
from mmsuite import Problem, RunOptions, kernels
from mmsuite.backends import cuda as cuda_backend
from mmsuite.backends import get_backend
from mmsuite.catalogue import Kernel, get
from mmsuite.layout import GemmCall
from mmsuite.sources import source_path

CUDA_DIR = Path(source_path("cuda/common.cuh")).parent
NVCC = shutil.which("nvcc")


def _compile_cases() -> list:
    """Every cuda/*.cu once plain, plus every catalogue `defines` variant."""
    cases = {(path.name, ()): None for path in sorted(CUDA_DIR.glob("*.cu"))}
    for kernel in kernels("cuda"):
        defines = tuple(sorted(dict(kernel.launch.get("defines", {})).items()))
        if kernel.source and defines:
            cases.pop((Path(kernel.source).name, ()), None)
            cases[(Path(kernel.source).name, defines)] = None
    return [pytest.param(name, defines,
                         id=name + "".join(f"-{k}={v}" for k, v in defines))
            for name, defines in cases]


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH (install the CUDA toolkit)")
@pytest.mark.parametrize("name,defines", _compile_cases())
def test_source_compiles_for_sm90(name: str, defines: tuple, tmp_path: Path) -> None:
    flags = [f"-D{k}={v}" for k, v in defines]
    cmd = [NVCC, "-arch=sm_90", "-c", "-I", str(CUDA_DIR), *flags, "-o",
           str(tmp_path / "out.o"), str(CUDA_DIR / name)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stderr}"


def test_every_catalogue_source_exists_and_names_its_entry() -> None:
    for kernel in kernels("cuda"):
        if kernel.reference:
            continue
        text = source_path(kernel.source).read_text()
        assert f"{kernel.entry}(" in text, f"{kernel.id}: {kernel.entry} not in {kernel.source}"
        assert 'extern "C"' in text


def test_import_does_not_load_cupy() -> None:
    code = ("import sys, mmsuite; [k.id for k in mmsuite.kernels('cuda')]; "
            "print('cupy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_missing_cupy_gives_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuda_backend, "_cupy", None)
    monkeypatch.setattr(cuda_backend, "_cupy_error", "")
    monkeypatch.setitem(sys.modules, "cupy", None)  # makes `import cupy` raise ImportError
    reason = cuda_backend.CudaBackend(RunOptions()).probe()
    assert "pip install 'mmsuite[cuda]'" in reason


def test_geometry_follows_the_launch_convention() -> None:
    kernel = get("cuda.11_double_buffer")
    call = GemmCall(300, 129, 7, 3, "col", 1.0, 0.0, np.empty(0), np.empty(0), np.empty(0), False)
    grid, block, smem = cuda_backend.CudaBackend.geometry(kernel, call)
    assert grid == (3, 2, 3) and block == (256, 1) and smem == 0
    cols = Kernel("cuda.x", "cuda", 99, None, "", "", launch={"block": (16, 16), "tile": (32, 8),
                                                                "grid_x": "cols"})
    grid, block, _ = cuda_backend.CudaBackend.geometry(cols, call)
    assert grid == (5, 38, 3) and block == (16, 16)


# ------------------------------------------------------------------ availability
REASON = get_backend("cuda").probe()
needs_gpu = pytest.mark.skipif(bool(REASON), reason=REASON or "CUDA is available")


@pytest.mark.skipif(not REASON, reason="a CUDA device is present")
def test_without_gpu_kernels_are_unavailable_with_a_reason() -> None:
    for kernel in kernels("cuda"):
        assert not kernel.available
        assert kernel.reason == REASON
    assert "mmsuite[cuda]" in REASON or "no CUDA device" in REASON
    with pytest.raises(mmsuite.KernelUnavailable, match="unavailable"):
        mmsuite.run("cuda.01_naive", Problem(8, 8, 8))


# -------------------------------------------------------------------------- GPU
@needs_gpu
@pytest.mark.parametrize("pinned", [False, True], ids=["pageable", "pinned"])
def test_transfers_are_timed(pinned: bool) -> None:
    problem = Problem(256, 192, 160, beta=0.5, seed=3)
    m = mmsuite.run("cuda.11_double_buffer", problem, repeats=3, warmup=1,
                    options=RunOptions(pinned=pinned))
    assert m.ok, m.verdict.reason
    for phase in (m.h2d_ms, m.kernel_ms, m.d2h_ms):
        assert len(phase.samples) == 3 and phase.min > 0
    assert m.info["pinned"] is pinned


@needs_gpu
def test_profile_reports_registers_shared_and_spills() -> None:
    m = mmsuite.run("cuda.08_blocktile_128", Problem(64, 64, 64), repeats=1,
                    options=RunOptions(profile=True))
    profile = m.info["profile"]
    assert profile["registers"] > 0
    assert profile["static_shared_bytes"] > 0
    assert profile["local_bytes"] >= 0


@needs_gpu
def test_problem_too_large_for_the_gpu_is_a_clear_error() -> None:
    backend = get_backend("cuda")
    tiny = np.zeros(4, dtype=np.float32)
    call = GemmCall(400_000, 400_000, 1, 1, "col", 1.0, 0.0, tiny, tiny, tiny, False)
    with pytest.raises(cuda_backend.DeviceMemoryError, match="GiB of GPU memory"):
        backend.execute(get("cuda.01_naive"), call, repeats=1, warmup=0)


@needs_gpu
def test_bad_launch_raises_with_cuda_error_text() -> None:
    bad = Kernel("cuda.bad", "cuda", 99, None, "", "", source="cuda/01_naive.cu",
                 entry="mm_01_naive", layout="col",
                 launch={"block": (2048, 1), "tile": (2048, 1)})
    problem = Problem(64, 64, 64, layout="col")
    call = mmsuite.layout.plan_call(problem, problem.inputs(), "col")
    with pytest.raises(cuda_backend.CudaLaunchError, match="(?i)cuda|invalid"):
        get_backend("cuda").execute(bad, call, repeats=1, warmup=0)


@needs_gpu
def test_cublas_is_plain_fp32() -> None:
    # TF32 keeps 10 mantissa bits: its relative error at K=1024 is ~1e-4, FP32's ~1e-7.
    m = mmsuite.run("cuda.cublas", Problem(512, 512, 1024, seed=9), repeats=1)
    assert m.ok, m.verdict.reason
    assert m.max_rel_err < 1e-5
    env = get_backend("cuda").environment()
    assert env["tf32_override"] == "0" and not env["cupy_tf32"]


@needs_gpu
def test_environment_names_the_device() -> None:
    env = get_backend("cuda").environment()
    for key in ("gpu", "sm_count", "driver", "cuda_runtime", "cupy"):
        assert env[key], key
