"""Code identity: equal hashes mean byte-identical measured code; a change to code that
takes part in measuring changes the hash, a change to presentation does not."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from mmsuite import catalogue, identity, launch
from mmsuite.backend_table import BACKENDS
from mmsuite.backends import cuda as cuda_backend


def code_of(kernel: catalogue.Kernel) -> dict[str, str]:
    return identity.code_identity(BACKENDS[kernel.backend].code, kernel.source, kernel.reference)


def test_a_kernel_has_one_identity_with_every_part() -> None:
    kernel = catalogue.get("opencl.tiled")
    if not kernel.available:  # no pyopencl, or no OpenCL platform: no toolchain to read
        pytest.skip(f"opencl.tiled cannot run here: {kernel.reason}")
    first = code_of(kernel)
    assert first == code_of(kernel)
    assert set(first) == {"kernel", "engine", "toolchain", "hash"}


def test_two_gpu_rungs_differ_by_their_sources() -> None:
    rungs = [k for k in catalogue.kernels("cuda") if not k.reference][:2]
    hashes = {identity._kernel_files_hash(BACKENDS[k.backend].code, k.source) for k in rungs}
    assert len(hashes) == 2


def test_each_c_rung_is_identified_by_its_own_built_extension() -> None:
    rungs = [k for k in catalogue.kernels("cpu") if not k.reference]
    if not all(k.available for k in rungs):
        pytest.skip("the C ladder is not built here")
    hashes = {identity._kernel_files_hash(BACKENDS["cpu"].code, k.source) for k in rungs}
    assert len(hashes) == len(rungs)


@pytest.fixture
def fresh_reads():
    """Kernel hashes read afresh: they are cached per process."""
    identity._kernel_files_hash.cache_clear()
    yield
    identity._kernel_files_hash.cache_clear()


def test_a_c_rung_is_read_from_its_own_shared_object(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_reads: None) -> None:
    ladder = tmp_path / identity.C_LADDER
    ladder.mkdir()
    for name in ("omp_tiled", "omp_packed"):
        (ladder / f"{name}.abi3.so").write_bytes(name.encode())
    monkeypatch.setattr(identity, "_package_dir", lambda: tmp_path)
    readers = BACKENDS["cpu"].code
    tiled = identity._kernel_files_hash(readers, "csrc/05_omp_tiled.c")
    packed = identity._kernel_files_hash(readers, "csrc/06_omp_packed.c")
    (ladder / "omp_packed.abi3.so").write_bytes(b"changed")
    identity._kernel_files_hash.cache_clear()
    assert identity._kernel_files_hash(readers, "csrc/05_omp_tiled.c") == tiled
    assert identity._kernel_files_hash(readers, "csrc/06_omp_packed.c") != packed


def test_an_older_build_of_the_whole_ladder_in_one_object_is_read_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_reads: None) -> None:
    (tmp_path / f"{identity.C_LADDER_WHOLE}.abi3.so").write_bytes(b"every rung")
    monkeypatch.setattr(identity, "_package_dir", lambda: tmp_path)
    readers = BACKENDS["cpu"].code
    both = {identity._kernel_files_hash(readers, source)
            for source in ("csrc/05_omp_tiled.c", "csrc/06_omp_packed.c")}
    assert len(both) == 1


def test_a_reference_row_is_identified_by_its_library() -> None:
    blas = catalogue.get("cpu.blas")
    parts = code_of(blas)
    assert "numpy" in parts["library"]


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "measure.py").write_text("x = 1\n")
    (tmp_path / "report.py").write_text("y = 1\n")
    (tmp_path / "commands").mkdir()
    (tmp_path / "commands" / "run.py").write_text("z = 1\n")
    monkeypatch.setattr(identity, "_package_dir", lambda: tmp_path)
    identity.engine_hash.cache_clear()
    yield tmp_path
    identity.engine_hash.cache_clear()


def fresh_engine_hash() -> str:
    identity.engine_hash.cache_clear()
    return identity.engine_hash()


def test_presentation_modules_do_not_change_the_engine_hash(package: Path) -> None:
    before = fresh_engine_hash()
    (package / "report.py").write_text("y = 2\n")
    (package / "commands" / "run.py").write_text("z = 2\n")
    assert fresh_engine_hash() == before


def test_a_measuring_module_changes_the_engine_hash(package: Path) -> None:
    before = fresh_engine_hash()
    (package / "measure.py").write_text("x = 2\n")
    assert fresh_engine_hash() != before


def test_the_cuda_toolchain_names_the_floating_point_flags_of_every_module(monkeypatch) -> None:
    """Two builds that differ only in -ftz compute different functions: the flags are part
    of a CUDA row's identity."""
    nvrtc = SimpleNamespace(getVersion=lambda: (13, 0))
    fake_cupy = SimpleNamespace(__version__="14.2.0", cuda=SimpleNamespace(nvrtc=nvrtc))
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    ieee = " ".join(cuda_backend.IEEE_FLAGS)
    identity.toolchain.cache_clear()
    try:
        with_flags = identity.toolchain(identity.NVRTC)
        monkeypatch.setattr(launch, "IEEE_FLAGS", ("-ftz=true",))
        identity.toolchain.cache_clear()
        flushing = identity.toolchain(identity.NVRTC)
    finally:
        identity.toolchain.cache_clear()
    assert "nvrtc (13, 0)" in with_flags and ieee in with_flags and "-ftz=false" in ieee
    assert flushing != with_flags and "-ftz=true" in flushing
