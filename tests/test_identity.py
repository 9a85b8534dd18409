"""Code identity: equal hashes mean byte-identical measured code; a change to code that
takes part in measuring changes the hash, a change to presentation or prose does not, and
a refit of the dispatcher's figures changes the rows they steer and no other."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from mmsuite import catalogue, identity, launch
from mmsuite.backend_table import BACKENDS
from mmsuite.backends import cuda as cuda_backend
from mmsuite.cuda_dispatch import tuning_file
from mmsuite.cuda_dispatch.tuning_file import shape_key
from mmsuite.launch import DeviceFacts


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
    """A package of one measuring module, one presentation module, one subcommand and a
    shipped data file, with a README beside it."""
    root = tmp_path / "mmsuite"
    (root / "commands").mkdir(parents=True)
    (root / "tuning").mkdir()
    (root / "measure.py").write_text("x = 1\n")
    (root / "report.py").write_text("y = 1\n")
    (root / "commands" / "run.py").write_text("z = 1\n")
    (root / "tuning" / "gpu.model.json").write_text('{"provenance": "first"}\n')
    (tmp_path / "README.md").write_text("# mmsuite\n")
    monkeypatch.setattr(identity, "_package_dir", lambda: root)
    identity.engine_hash.cache_clear()
    yield root
    identity.engine_hash.cache_clear()


def fresh_engine_hash() -> str:
    identity.engine_hash.cache_clear()
    return identity.engine_hash()


def test_presentation_modules_do_not_change_the_engine_hash(package: Path) -> None:
    before = fresh_engine_hash()
    (package / "report.py").write_text("y = 2\n")
    (package / "commands" / "run.py").write_text("z = 2\n")
    assert fresh_engine_hash() == before


def test_the_gates_worker_file_does_not_change_the_engine_hash(package: Path) -> None:
    """Both sides of a gate run the driver's worker file: a revision's own copy never
    measures anything, so editing it leaves that revision's rows identical code."""
    (package / "continuous_worker.py").write_text("w = 1\n")
    before = fresh_engine_hash()
    (package / "continuous_worker.py").write_text("w = 2\n")
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


def test_prose_and_data_files_do_not_change_the_engine_hash(package: Path) -> None:
    before = fresh_engine_hash()
    (package.parent / "README.md").write_text("# mmsuite, rewritten\n")
    (package / "tuning" / "gpu.model.json").write_text('{"provenance": "second"}\n')
    assert fresh_engine_hash() == before


# What measures: the engine, the workers that run it (locally and on Dask; the gate's
# worker is always the driver's file), and the adapters the table of backends names by
# string.
MEASURING = ("mmsuite.measure", "mmsuite.workers", "mmsuite.sweep", "mmsuite.cluster",
             *(backend.adapter.split(":")[0] for backend in BACKENDS.values()))


def _module_path(root: Path, name: str) -> Path | None:
    parts = name.split(".")[1:]
    for path in (root.joinpath(*parts).with_suffix(".py"), root.joinpath(*parts, "__init__.py")):
        if parts and path.is_file():
            return path
    return root / "__init__.py" if not parts else None


def _mmsuite_imports(root: Path, name: str) -> set[str]:
    """The mmsuite modules that module ``name`` imports, at its top or inside functions."""
    path = _module_path(root, name)
    assert path is not None, name
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] \
                if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {n for n in found if n.split(".")[0] == "mmsuite" and _module_path(root, n)}


def test_every_module_listed_as_not_measuring_exists() -> None:
    root = identity._package_dir()
    assert [name for name in identity.NOT_MEASURING if not (root / name).exists()] == []


def test_no_module_that_measuring_imports_is_left_out_of_the_engine_hash() -> None:
    root = identity._package_dir()
    imported, todo = set(), list(MEASURING)
    while todo:
        name = todo.pop()
        if name not in imported:
            imported.add(name)
            todo.extend(_mmsuite_imports(root, name))
    assert {"mmsuite.measure", "mmsuite.cuda_dispatch.planners"} <= imported  # it did walk
    left_out = sorted(name for name in imported
                      if _module_path(root, name).relative_to(root).parts[0]
                      in identity.NOT_MEASURING)
    assert left_out == []


H100 = DeviceFacts()
SHIPPED_H100_MODEL = tuning_file.BUNDLED_DIR / "nvidia-h100-80gb-hbm3.model.json"
SHORT_K, LONG_K = (256, 192, 32), (1024, 1024, 1024)  # rungs 26 and 29 hand short K to 22
#: The rows whose plans the fitted figures choose, and those a tuning entry does.
MODEL_STEERED = {"cuda.21_splitk", "cuda.22_adaptive", "cuda.23_streamk", "cuda.24_gemv",
                 "cuda.27_shortk", "cuda.30_dot"}
TUNING_STEERED = {"cuda.22_adaptive"}
HANDED_TO_22 = {"cuda.26_fp32_accurate", "cuda.29_fp32_accurate_wgmma"}


@pytest.fixture
def model_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's model file for the H100, a copy of the shipped one; nothing shipped."""
    monkeypatch.setenv(tuning_file.TUNING_ENV, str(tmp_path / "tuning"))
    monkeypatch.setattr(tuning_file, "BUNDLED_DIR", tmp_path / "shipped")
    user = tuning_file.model_path(H100.name)
    user.parent.mkdir(parents=True)
    user.write_text(SHIPPED_H100_MODEL.read_text())
    # No GPU is needed to read the identity of a GPU row: its toolchain and library are
    # what a fake of each says.
    monkeypatch.setattr(identity, "toolchain", lambda kind: f"{kind} (fake)")
    monkeypatch.setattr(identity, "reference_library", lambda library: f"{library} (fake)")
    return user


def identity_of_every_row(m: int, n: int, k: int) -> dict[str, str]:
    """Each kernel's code identity on an m x n x k problem, with the dispatch info its
    planner gives (planned for an H100; no GPU needed)."""
    call = SimpleNamespace(m=m, n=n, k=k, batch=1)
    hashes = {}
    for kernel in catalogue.kernels():
        if kernel.backend == "cpu" and not kernel.reference and not kernel.available:
            continue  # the C ladder is not built here: no object to read
        planner = getattr(kernel.launch, "planner", None)
        dispatch = planner(call, H100).info.get("dispatch") if planner else None
        own = identity.plugin_kernel_hash(kernel) if kernel.plugin else None
        parts = identity.code_identity(BACKENDS[kernel.backend].code, kernel.source,
                                       kernel.reference, own, dispatch=dispatch)
        hashes[kernel.id] = parts["hash"]
    return hashes


def changed_rows(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {kernel for kernel, code in before.items() if after[kernel] != code}


def _rewrite(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def test_a_model_files_provenance_is_no_rows_identity(model_files: Path) -> None:
    before = identity_of_every_row(*SHORT_K)
    _rewrite(model_files, lambda data: data["provenance"].update(log="elsewhere"))
    assert changed_rows(before, identity_of_every_row(*SHORT_K)) == set()


def test_a_refit_changes_the_identity_of_the_rows_it_steers_and_no_other(
        model_files: Path) -> None:
    short, long = identity_of_every_row(*SHORT_K), identity_of_every_row(*LONG_K)

    def refit(data: dict) -> None:
        data["parameters"]["shared"]["launch_s"] *= 1.5

    _rewrite(model_files, refit)
    assert changed_rows(short, identity_of_every_row(*SHORT_K)) == MODEL_STEERED | HANDED_TO_22
    assert changed_rows(long, identity_of_every_row(*LONG_K)) == MODEL_STEERED


def test_a_tuning_entry_changes_the_identity_of_the_rows_it_steers_and_no_other(
        model_files: Path) -> None:
    shipped = json.loads((SHIPPED_H100_MODEL.parent / "nvidia-h100-80gb-hbm3.json").read_text())
    (key, entry), *_ = shipped["entries"].items()
    user = tuning_file.tuning_path(H100.name)
    tuning_file.store_tuning(user, H100.name, {key: entry})
    before = identity_of_every_row(*SHORT_K)
    tuning_file.store_tuning(user, H100.name, {shape_key(4096, 4096, 4096, 1): entry})
    assert changed_rows(before, identity_of_every_row(*SHORT_K)) == TUNING_STEERED | HANDED_TO_22
