"""The CUDA backend: sources compile, launch data maps to grids and steps, the spin timer
refuses samples it cannot vouch for, and on a GPU the adapter's transfers, profile, memory
check, launch errors, multi-kernel plans and TF32 setting behave as documented.

The compile checks need only nvcc (no GPU) and the timer and plan checks nothing at all;
they run in CI. The rest skips, with the backend's reason, where CuPy or a CUDA device is
missing.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import mmsuite
from mmsuite import Problem, RunOptions, kernels, tensorcore, verify
from mmsuite.backends import cuda as cuda_backend
from mmsuite.backends import cuda_session, cuda_timing, get_backend
from mmsuite.catalogue import Kernel, get
from mmsuite.cuda_dispatch.variants import VARIANTS
from mmsuite.launch import CudaLaunch, CudaPlan, CudaStep, DeviceFacts, LaunchLimit, TensorMaps
from mmsuite.layout import GemmCall, sized_call
from mmsuite.measure import Sampling, sample_session
from mmsuite.sources import source_path

from ..conftest import ODD_SHAPES

CUDA_DIR = Path(source_path("cuda/common.cuh")).parent
NVCC = shutil.which("nvcc")


def _targets() -> dict[str, str]:
    """The architecture-specific target of each source a rung names one for ("sm_90a")."""
    return {Path(kernel.source).name: cuda_backend.launch_of(kernel).arch
            for kernel in kernels("cuda") if kernel.source and cuda_backend.launch_of(kernel).arch}


def _compile_cases() -> list:
    """Every cuda/*.cu once plain, plus every catalogue `defines` variant."""
    cases = {(path.name, ()): None for path in sorted(CUDA_DIR.glob("*.cu"))}
    for kernel in kernels("cuda"):
        defines = tuple(sorted(cuda_backend.launch_of(kernel).defines))
        if kernel.source and defines:
            cases.pop((Path(kernel.source).name, ()), None)
            cases[(Path(kernel.source).name, defines)] = None
    return [pytest.param(name, defines,
                         id=name + "".join(f"-{k}={v}" for k, v in defines))
            for name, defines in cases]


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH (install the CUDA toolkit)")
@pytest.mark.parametrize("name,defines", _compile_cases())
def test_source_compiles_for_sm90_with_ieee_arithmetic(name: str, defines: tuple,
                                                        tmp_path: Path) -> None:
    """For the GPU's own target, or for the architecture-specific one its rung names (its
    own -gencode: the -arch=sm_90a shorthand also runs a plain sm_90 pass), with the
    adapter's floating-point flags (nvcc spells them as NVRTC does): the PTX flushes no
    subnormal (no ``.ftz`` instruction)."""
    flags = [f"-D{k}={v}" for k, v in defines]
    arch = _targets().get(name, "")
    target = f"-gencode=arch=compute_{arch[3:]},code={arch}" if arch else "-arch=sm_90"
    cmd = [NVCC, target, "-c", "-I", str(CUDA_DIR), *cuda_backend.IEEE_FLAGS, *flags,
           "--keep", "--keep-dir", str(tmp_path), "-o", str(tmp_path / "out.o"),
           str(CUDA_DIR / name)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stderr}"
    (ptx,) = tmp_path.glob("*.ptx")
    flushing = [line.strip() for line in ptx.read_text().splitlines() if ".ftz" in line]
    assert not flushing, f"{name}: {len(flushing)} flushing instructions, e.g. {flushing[0]}"


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


def test_devices_environment_names_each_gpu_by_its_index(monkeypatch) -> None:
    class Device:
        def __init__(self, index):
            self.compute_capability, self.pci_bus_id = "90", f"0000:0{index}:00.0"

    runtime = type("Runtime", (), {
        "getDeviceProperties": staticmethod(lambda i: {"name": b"H200", "multiProcessorCount":
                                                       132, "totalGlobalMem": 141 * 2**30}),
        "deviceGetAttribute": staticmethod(lambda attr, i: 1980000 if attr == 13 else 0),
        "getDeviceCount": staticmethod(lambda: 2)})
    fake = type("cupy", (), {"cuda": type("cuda", (), {"runtime": runtime, "Device": Device})})
    monkeypatch.setattr(cuda_backend, "_cupy", fake)
    adapter = cuda_backend.CudaBackend(RunOptions())
    assert adapter.device_count() == 2
    facts = adapter.devices_environment([0, 1])
    assert [f["index"] for f in facts] == [0, 1] and facts[1]["pci_bus_id"] == "0000:01:00.0"
    assert facts[0] | {"pci_bus_id": None} == {
        "index": 0, "gpu": "H200", "compute_capability": "90", "pci_bus_id": None,
        "sm_count": 132, "memory_gib": 141.0, "l2_bytes": 0, "sm_clock_mhz": 1980,
        "memory_clock_mhz": None, "memory_bus_bits": None}


def _fake_cupy(capability: str, sms: int, clock_mhz: int) -> type:
    """Just enough of CuPy for the adapter to read one GPU's environment."""
    class Device:
        id = 0

        def __init__(self, index: int = 0) -> None:
            self.compute_capability, self.pci_bus_id = capability, "0000:01:00.0"

    runtime = type("Runtime", (), {
        "getDeviceProperties": staticmethod(lambda i: {"name": b"GPU",
                                                       "multiProcessorCount": sms}),
        "deviceGetAttribute": staticmethod(lambda attr, i: clock_mhz * 1000 if attr == 13
                                           else 0),
        "driverGetVersion": staticmethod(lambda: 13000),
        "runtimeGetVersion": staticmethod(lambda: 13000)})
    cuda = type("cuda", (), {"runtime": runtime, "Device": Device, "nvrtc": None})
    return type("cupy", (), {"cuda": cuda, "__version__": "14.2"})


@pytest.mark.parametrize("capability,sms,clock_mhz,tflops", [
    ("80", 108, 1410, 19.5),  # A100: 64 FP32 lanes an SM
    ("70", 80, 1530, 15.7),   # V100: 64
    ("90", 132, 1980, 66.9),  # H100: 128
])
def test_the_recorded_fp32_peak_counts_the_lanes_of_the_gpus_architecture(
        capability: str, sms: int, clock_mhz: int, tflops: float,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuda_backend, "_cupy", _fake_cupy(capability, sms, clock_mhz))
    env = cuda_backend.CudaBackend(RunOptions())._env
    assert env["fp32_peak_tflops"] == tflops


def test_grid_follows_the_launch_convention() -> None:
    call = GemmCall(300, 129, 7, 3, "col", 1.0, 0.0, np.empty(0), np.empty(0), np.empty(0))
    kernel = get("cuda.11_double_buffer")
    (step,) = cuda_backend.launch_of(kernel).plan(call, kernel.layout).steps
    assert step.grid == (3, 2, 3) and step.block == (256, 1) and step.smem == 0
    assert step.args == ("m", "n", "k", "alpha", "a", "b", "beta", "c")
    cols = CudaLaunch(block=(16, 16), tile=(32, 8), grid_x="cols")
    assert cols.grid(call, "col") == (5, 38, 3)
    assert CudaLaunch(block=(16, 16), split_k=4).grid(call, "row") == (9, 19, 12)


def test_catalogue_launch_data_is_typed() -> None:
    for kernel in kernels("cuda"):
        if not kernel.reference:
            assert isinstance(kernel.launch, CudaLaunch), kernel.id
    assert dict(get("cuda.19_async_pipeline").launch.defines) == {"BK": 16, "STAGES": 3}
    with pytest.raises(ValueError, match="grid_x"):
        CudaLaunch(grid_x="diagonal")
    with pytest.raises(ValueError, match="unknown kernel argument"):
        CudaStep((1, 1, 1), (1,), args=("m", "workspace"))


def two_step_plan(call: GemmCall, device: DeviceFacts, override=None) -> CudaPlan:
    """A planner for the tests: the rung, then the rung again leaving C as it is
    (alpha 0, beta 1), with literal arguments and a workspace."""
    grid = CudaLaunch(block=(32, 32), tile=(32, 32), grid_x="rows").grid(call, "col")
    keep = ("m", "n", "k", 0.0, "a", "b", 1.0, "c")
    return CudaPlan((CudaStep(grid, (32, 32)), CudaStep(grid, (32, 32), args=keep)),
                    workspace=16, info={"planned_for": device.name})


def test_a_planner_gives_the_steps_of_a_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = cuda_backend.CudaBackend(RunOptions())
    monkeypatch.setitem(backend.__dict__, "device_facts", DeviceFacts("test GPU", 2))
    kernel = Kernel("cuda.planned", "cuda", 99, None, "", "", source="cuda/01_naive.cu",
                    entry="mm_01_naive", layout="col", launch=CudaLaunch(planner=two_step_plan))
    call = GemmCall(70, 40, 9, 2, "col", 1.0, 0.0, np.empty(0), np.empty(0), np.empty(0))
    plan = backend.plan(kernel, call)
    assert [s.grid for s in plan.steps] == [(3, 2, 2)] * 2
    assert plan.workspace == 16 and plan.info["planned_for"] == "test GPU"


def test_warm_compiles_each_module_the_plans_launch_once(monkeypatch) -> None:
    backend = cuda_backend.CudaBackend(RunOptions())
    monkeypatch.setitem(backend.__dict__, "device_facts", DeviceFacts("test GPU", 2))
    monkeypatch.setattr(cuda_backend, "_MODULES", {})
    compiled: list[tuple] = []

    def compile_module(source: str, defines: tuple, arch: str) -> None:
        compiled.append((source, defines, arch))
        if "bad" in dict(defines):  # the job would report this one; warm goes on
            raise cuda_session.CudaLaunchError("NVRTC failed")

    def plans(kernel, call) -> CudaPlan:
        if call.m == 13:
            raise LaunchLimit("too many matrices")
        return CudaPlan((CudaStep((1, 1, 1), (32,), defines=(("TILE", call.k),)),
                         CudaStep((1, 1, 1), (32,), source="cuda/21_splitk.cu"),
                         CudaStep((1, 1, 1), (32,), defines=(("bad", 1),))))

    monkeypatch.setattr(backend, "_module", compile_module)
    monkeypatch.setattr(backend, "plan", plans)
    naive = get("cuda.01_naive")
    call = GemmCall(70, 40, 9, 1, "row", 1.0, 0.0, np.empty(0), np.empty(0), np.empty(0))
    jobs = [(naive, call), (naive, call), (get("cuda.cublas"), call),
            (naive, GemmCall(13, 1, 1, 1, "row", 1.0, 0.0, *[np.empty(0)] * 3))]
    backend.warm(jobs)
    assert sorted(compiled) == sorted([(naive.source, (("TILE", "9"),), ""),
                                       ("cuda/21_splitk.cu", (), ""),
                                       (naive.source, (("bad", "1"),), "")])


def test_a_job_warmed_ahead_is_planned_once(monkeypatch) -> None:
    """The plan ``warm`` decided for a job (to compile its modules ahead) is the one that
    job's ``prepare`` launches: rung 22's dispatcher decides once per job, not twice; a
    job ``warm`` never saw, or one prepared a second time, is planned afresh."""
    from mmsuite.cuda_dispatch import planners

    decided: list[tuple[int, int, int]] = []
    real_decide = planners.decide

    def counting_decide(m: int, n: int, k: int, *args, **kwargs):
        decided.append((m, n, k))
        return real_decide(m, n, k, *args, **kwargs)

    launched: list[CudaPlan] = []

    class FakeSession:  # what prepare builds, without a GPU's buffers
        def __init__(self, kernel, call, cp, stream, env) -> None:
            self.info: dict = {}
            self.steps: list = []

    def steps_of(session, plan: CudaPlan, function, profile) -> list:
        launched.append(plan)
        return []

    monkeypatch.setattr(planners, "decide", counting_decide)
    monkeypatch.setattr(cuda_backend, "CudaSession", FakeSession)
    monkeypatch.setattr(cuda_backend, "kernel_steps", steps_of)
    fake_cupy = SimpleNamespace(cuda=SimpleNamespace(Stream=lambda non_blocking: None))
    monkeypatch.setattr(cuda_backend.CudaBackend, "_cupy", property(lambda self: fake_cupy))
    backend = cuda_backend.CudaBackend(RunOptions())
    monkeypatch.setitem(backend.__dict__, "device_facts", DeviceFacts("test GPU", 132))
    monkeypatch.setitem(backend.__dict__, "_env", {})
    monkeypatch.setattr(backend, "_check_memory", lambda nbytes, what: None)
    monkeypatch.setattr(backend, "_module", lambda source, defines, arch: None)
    adaptive = get("cuda.22_adaptive")
    problems = [Problem(300, 200, 700), Problem(64, 4096, 64)]
    backend.warm([(adaptive, sized_call(p, adaptive.layout)) for p in problems])
    warmed = list(decided)
    assert sorted(warmed) == sorted((p.n, p.m, p.k) for p in problems)  # col-major rung

    for problem in problems:
        backend.prepare(adaptive, sized_call(problem, adaptive.layout))
    assert decided == warmed  # no job decided again
    assert len(launched) == 2 and launched[0] is not launched[1]
    backend.prepare(adaptive, sized_call(problems[0], adaptive.layout))
    assert len(decided) == len(warmed) + 1  # a plan launches once; another prepare decides
    assert launched[2] is not launched[0]


@pytest.mark.parametrize("kernel_id", ["cuda.25_tf32_mma", "cuda.26_fp32_accurate"])
def test_tensor_rungs_plan_through_the_dispatchers_seam(kernel_id: str, monkeypatch) -> None:
    """A planner is a function of (call, device facts, forced plan), for every rung; the
    tensor plans' packs and main kernel are the rung's own source and entry."""
    backend = cuda_backend.CudaBackend(RunOptions())
    monkeypatch.setitem(backend.__dict__, "device_facts", DeviceFacts("test GPU", 132))
    call = GemmCall(300, 200, 700, 2, "col", 1.0, 0.0, *[np.empty(0)] * 3)
    plan = backend.plan(get(kernel_id), call)
    pack_a, pack_b, main = plan.steps[:3]
    pack = "mm_25_pack" if kernel_id == "cuda.25_tf32_mma" else "mm_26_split"
    assert (pack_a.entry, pack_b.entry, main.entry) == (pack, pack, None)
    assert pack_a.source is pack_b.source is main.source is None
    assert main.grid == (3, 2, 2 * plan.info["tensorcore"]["slices"])


def test_rung_26_splits_both_operands_into_three_bf16_parts_and_shares_one_flag() -> None:
    call = GemmCall(300, 200, 700, 2, "col", 1.0, 0.0, *[np.empty(0)] * 3)
    plan = tensorcore.plan_accurate_tensor(call, DeviceFacts("test GPU", 132))
    split_a, split_b, main = plan.steps[:3]
    # K padded to whole 64-k tiles; three parts of 2 x 384 (and 2 x 256) rows of 704 BF16.
    assert split_a.args[3] == 2 * 384 * 704 and split_b.args[3] == 2 * 256 * 704
    assert main.args[3] == 704 and {"a", "b"} <= set(main.args)
    a_offset, b_offset, flag = main.args[10], main.args[11], main.args[-1]
    assert b_offset >= a_offset + 3 * 2 * 384 * 704 // 2 and flag >= b_offset + 3 * 256 * 704
    assert split_a.args[-1] == split_b.args[-1] == flag and flag + 2 <= plan.workspace
    assert main.smem == 2 * 2 * 3 * 128 * 36 * 4  # two stages of A's and B's parts


@pytest.mark.parametrize("k,b_in_place", [(700, True), (701, False)])
def test_wgmma_tf32_plan_reads_b_in_place_where_its_rows_are_16_byte_multiples(
        k: int, b_in_place: bool) -> None:
    """Rung 28: A packed, B packed only where K % 4 != 0; the main kernel for sm_90a with
    one by-value argument of tensor maps (A packed; B in place or packed)."""
    call = GemmCall(300, 200, k, 2, "col", 1.0, 0.0, *[np.empty(0)] * 3)
    plan = tensorcore.plan_tf32_wgmma(call, DeviceFacts("test GPU", 132))
    entries = [step.entry for step in plan.steps]
    assert entries[:2] == (["mm_25_pack", None] if b_in_place else ["mm_25_pack"] * 2)
    main = plan.steps[entries.index(None)]
    maps = main.args[0]
    assert isinstance(maps, TensorMaps) and main.arch == "sm_90a" and main.block == (384,)
    assert [m.buffer for m in maps.maps] == ["work", "b" if b_in_place else "work"]
    assert maps.maps[0].box_rows == 128 and maps.maps[1].box_rows == 256
    assert main.grid == (3, 1, 2 * plan.info["tensorcore"]["slices"])
    assert all(step.arch == "sm_90a" for step in plan.steps if step.entry != "mm_21_reduce")


def test_wgmma_accurate_plan_maps_three_bf16_parts_of_both_operands() -> None:
    call = GemmCall(300, 200, 700, 2, "col", 1.0, 0.0, *[np.empty(0)] * 3)
    plan = tensorcore.plan_accurate_wgmma(call, DeviceFacts("test GPU", 132))
    main = plan.steps[2]
    assert [s.entry for s in plan.steps[:2]] == ["mm_26_split"] * 2 and main.entry is None
    maps = main.args[0].maps
    assert len(maps) == 6 and {m.buffer for m in maps} == {"work"}
    assert {(m.dtype, m.box_k) for m in maps} == {("bfloat16", 64)}
    assert [m.box_rows for m in maps] == [128] * 6
    # K padded to whole 64-k tiles; each part (two BF16 per float of the workspace) starts
    # where the previous one ends, inside the workspace.
    assert main.args[4] == 704
    assert maps[1].offset - maps[0].offset == 2 * 384 * 704 // 2
    assert maps[3].offset >= maps[2].offset + 2 * 384 * 704 // 2
    assert maps[5].offset + 2 * 256 * 704 // 2 <= plan.workspace
    # The splits write their three parts that far apart, in BF16 elements, and share one
    # flag with the main kernel, past the parts, which also reads A and B themselves.
    assert [s.args[3] for s in plan.steps[:2]] == [2 * 384 * 704, 2 * 256 * 704]
    flag = plan.steps[0].args[-1]
    assert plan.steps[1].args[-1] == main.args[-1] == flag and flag >= maps[5].offset + 256 * 704
    assert flag + 2 <= plan.workspace and {"a", "b"} <= set(main.args)
    short = tensorcore.plan_accurate_wgmma(GemmCall(35, 79, 19, 1, "col", 1.0, 0.0,
                                                    *[np.empty(0)] * 3), DeviceFacts("x", 132))
    assert short.info["tensorcore"]["path"] == "fp32 simt (rung 22)"


def test_rungs_built_for_sm90a_are_unavailable_on_other_gpus(monkeypatch) -> None:
    backend = cuda_backend.CudaBackend(RunOptions())
    kernel = get("cuda.28_tf32_wgmma")
    monkeypatch.setattr(backend, "_compute_capability", lambda: "80")
    assert "sm_90a" in backend.kernel_reason(kernel)
    assert backend.kernel_reason(get("cuda.25_tf32_mma")) == ""
    monkeypatch.setattr(backend, "_compute_capability", lambda: "90")
    assert backend.kernel_reason(kernel) == ""


class _FakeSession:
    def __init__(self) -> None:
        self.call = GemmCall(70, 40, 9, 2, "col", 0.5, 0.0, np.empty(0), np.empty(0),
                             np.empty(0))
        self.kernel = get("cuda.01_naive")
        self.cp = np
        self.a, self.b, self.c = "A", "B", "C"
        self.keep: list = []
        self.info: dict = {}


def test_steps_pass_named_and_literal_arguments_in_order() -> None:
    launched = []

    def function(source, entry, defines, smem, arch):
        return lambda grid, block, args, shared_mem: launched.append((entry, grid, args))

    session = _FakeSession()
    plan = two_step_plan(session.call, DeviceFacts("x"))
    steps = cuda_session.kernel_steps(session, plan, function, profile=False)
    for step in steps:
        step()
    (e1, g1, args1), (_, _, args2) = launched
    assert e1 == "mm_01_naive" and g1 == (3, 2, 2)
    assert args1[:3] == (70, 40, 9) and args1[4:6] == ("A", "B") and args1[7] == "C"
    assert args1[3].dtype == np.float32 and args1[3] == 0.5
    assert args2[3] == 0.0 and args2[6] == 1.0 and args2[6].dtype == np.float32
    assert session.info["grid"] == [3, 2, 2] and len(session.info["steps"]) == 2
    assert session.keep[0].size == 16  # the workspace lives as long as the session


class _FakeEvent:
    def __init__(self, clock: dict) -> None:
        self.clock, self.done, self.at = clock, False, 0.0

    def record(self, stream=None) -> None:
        self.at = self.clock["now"]

    def synchronize(self) -> None:
        pass


class _FakeCupy:
    """Just enough of CuPy for SpinTimer: events, a stream, elapsed time, a kernel."""

    def __init__(self) -> None:
        self.clock = {"now": 0.0}
        self.spins: list[int] = []
        clock = self.clock
        self.cuda = type("cuda", (), {
            "Event": staticmethod(lambda: _FakeEvent(clock)),
            "get_elapsed_time": staticmethod(lambda a, b: b.at - a.at)})

    def RawKernel(self, code, name):  # noqa: N802 (CuPy's name)
        spins = self.spins
        return type("K", (), {"compile": lambda self: None,
                              "__call__": lambda self, g, b, args: spins.append(int(args[0]))})()


class _Stream:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_spin_timer_retakes_uncovered_samples_with_a_longer_spin(monkeypatch) -> None:
    fake = _FakeCupy()
    monkeypatch.setattr(cuda_timing, "_spin_kernel", None)
    timer = cuda_timing.SpinTimer(fake, _Stream(), spin_ns=1000)

    def sample(spin_still_running: bool) -> float | None:
        timer.start()
        fake.clock["now"] += 2.5
        timer._spun.done = not spin_still_running
        timer.stop()
        return timer.elapsed_ms()

    assert sample(spin_still_running=True) == 2.5 and timer.spin_ns == 1000
    assert sample(spin_still_running=False) is None and timer.spin_ns == 2000
    assert sample(spin_still_running=True) == 2.5
    assert fake.spins == [1000, 1000, 2000]
    timer.spin_ns = cuda_timing.MAX_SPIN_NS  # at the cap the sample is kept, and counted
    assert sample(spin_still_running=False) == 2.5
    assert timer.report() == {"spin_us": cuda_timing.MAX_SPIN_NS / 1e3, "retakes": 1,
                              "uncovered": 1}


# ------------------------------------------------------------------ availability
REASON = get_backend("cuda").probe()
needs_gpu = pytest.mark.skipif(bool(REASON), reason=REASON or "CUDA is available")


@pytest.mark.skipif(not REASON, reason="a CUDA device is present")
def test_without_gpu_kernels_are_unavailable_with_a_reason() -> None:
    for kernel in kernels("cuda"):
        assert not kernel.available
        assert kernel.reason == REASON
    assert "mmsuite[cuda]" in REASON or "no CUDA device" in REASON
    with pytest.raises(mmsuite.KernelUnavailable) as caught:
        mmsuite.run("cuda.01_naive", Problem(8, 8, 8))
    assert str(caught.value) == REASON  # the reason alone: a row names the kernel


# -------------------------------------------------------------------------- GPU
@needs_gpu
def test_every_dispatch_variant_gets_the_occupancy_the_cost_model_assumes() -> None:
    """The driver's occupancy query on each compiled variant of rung 22 against the
    manifest's blocks per SM (registers as NVRTC allots them, threads, shared memory)."""
    import cupy


    backend = get_backend("cuda")
    wrong = []
    for row in VARIANTS:
        config = row.config
        if not hasattr(config, "blocks_per_sm"):
            continue
        smem = config.smem_bytes if config.smem_dynamic else 0
        fn = backend.function(row.source, row.entry, tuple(config.defines.items()), smem)
        got = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
            fn.kernel.ptr, config.threads, smem)
        if got != config.blocks_per_sm:
            wrong.append(f"{row.key}: {got} blocks an SM ({fn.attributes['num_regs']} "
                         f"registers), manifest {config.blocks_per_sm}")
    assert not wrong, wrong


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
@pytest.mark.parametrize("kernel_id", ["cuda.cublas", "cuda.22_adaptive"])
def test_short_kernels_are_sampled_in_batches_and_c_is_one_calls(kernel_id: str) -> None:
    # beta != 0: C as several back-to-back calls leave it would fail verification.
    problem = Problem(96, 80, 72, alpha=1.5, beta=0.5, seed=5)
    m = mmsuite.run(kernel_id, problem, repeats=3)
    assert m.ok, m.verdict.reason
    assert m.sampled.launches_per_sample > 1
    cold = mmsuite.run(kernel_id, problem, repeats=3, options=RunOptions(l2="cold"))
    assert cold.ok and cold.sampled.launches_per_sample == 1


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
    call = GemmCall(400_000, 400_000, 1, 1, "col", 1.0, 0.0, tiny, tiny, tiny)
    with pytest.raises(cuda_backend.DeviceMemoryError, match="GiB of GPU memory"):
        backend.prepare(get("cuda.01_naive"), call)


@needs_gpu
def test_bad_launch_raises_with_cuda_error_text() -> None:
    bad = Kernel("cuda.bad", "cuda", 99, None, "", "", source="cuda/01_naive.cu",
                 entry="mm_01_naive", layout="col",
                 launch=CudaLaunch(block=(2048, 1), tile=(2048, 1)))
    problem = Problem(64, 64, 64, layout="col")
    call = mmsuite.layout.plan_call(problem, problem.inputs(), "col")
    with get_backend("cuda").prepare(bad, call) as session:
        with pytest.raises(cuda_backend.CudaLaunchError, match="(?i)cuda|invalid"):
            sample_session(session, Sampling.fixed(1), warmup=0)


@needs_gpu
def test_a_planned_sequence_runs_every_step_in_one_sample() -> None:
    kernel = Kernel("cuda.planned", "cuda", 99, None, "", "", source="cuda/01_naive.cu",
                    entry="mm_01_naive", layout="col",
                    launch=CudaLaunch(planner=two_step_plan))
    problem = Problem(70, 40, 9, batch=2, layout="col", alpha=0.5, seed=4)
    inputs = problem.inputs()
    call = mmsuite.layout.plan_call(problem, inputs, "col")
    with get_backend("cuda").prepare(kernel, call) as session:
        result = sample_session(session, Sampling.fixed(3), warmup=1)
        out = mmsuite.layout.from_storage(session.output(), problem)
        info = session.info
    assert len(result.kernel_ms) == 3 and len(info["steps"]) == 2
    assert verify.check(out, verify.reference(problem, inputs), problem.k).ok


@needs_gpu
def test_samples_exclude_the_hosts_dispatch() -> None:
    # A sample is one launch behind the spin kernel; a burst of launches enqueued back to
    # back between two events (also behind a spin) costs at least as much per launch on the
    # GPU. Were the host's dispatch inside a sample (tens of microseconds through
    # cupy.matmul), the per-launch figure would be several times the burst's.
    problem = Problem(512, 512, 512)
    m = mmsuite.run("cuda.cublas", problem, sampling=Sampling(20, 0.2, 0.005, 5.0))
    assert m.info["timer"]["uncovered"] == 0
    call = mmsuite.layout.plan_call(problem, problem.inputs(), "row")
    with get_backend("cuda").prepare(get("cuda.cublas"), call) as session:
        timer = session.timer()
        for _ in range(12):  # the spin doubles until it covers the burst's enqueue
            timer.start()
            for _ in range(50):
                session.launch()
            timer.stop()
            burst = timer.elapsed_ms()
            if burst is not None:
                break
    assert burst is not None
    assert m.kernel_ms.median <= 1.25 * burst / 50 + 0.005


@needs_gpu
def test_record_has_transfers_clocks_and_cold_l2() -> None:
    m = mmsuite.run("cuda.20_tuned", Problem(256, 256, 256), repeats=3,
                    options=RunOptions(l2="cold"))
    record = m.to_record()
    assert m.ok and record["l2"] == "cold"
    for kind in ("pageable", "pinned"):
        figures = record["transfers"][kind]
        assert figures["h2d_gbps"] > 0 and figures["d2h_gbps"] > 0
    gpu = record["info"]["gpu"]
    assert gpu["before"].get("sm_clock_mhz", 0) > 0 or "nvml" in gpu["before"]
    assert set(gpu) == {"before", "after"}


@needs_gpu
def test_cublas_is_plain_fp32() -> None:
    # TF32 keeps 10 mantissa bits: its relative error at K=1024 is ~1e-4, FP32's ~1e-7.
    m = mmsuite.run("cuda.cublas", Problem(512, 512, 1024, seed=9), repeats=1)
    assert m.ok, m.verdict.reason
    assert m.max_rel_err < 1e-5
    assert m.info["math_mode"] == "default (FP32)"


@needs_gpu
def test_cublas_tf32_row_runs_on_tensor_cores_and_fp32_row_after_it_does_not() -> None:
    # Set through the handle's math mode: the TF32 error (~1e-4) proves the tensor cores ran,
    # and cuBLAS FP32 on the same inputs afterwards proves the mode was restored. (On tiny
    # shapes cuBLAS may pick a SIMT kernel in either mode: no error gap to see there.)
    problem = Problem(512, 512, 1024, seed=9)
    tf32 = mmsuite.run("cuda.cublas_tf32", problem, repeats=1)
    fp32 = mmsuite.run("cuda.cublas", problem, repeats=1)
    assert tf32.ok and fp32.ok, (tf32.verdict.reason, fp32.verdict.reason)
    assert tf32.max_rel_err > 10 * fp32.max_rel_err
    assert fp32.max_rel_err < 1e-5 and tf32.info["math_mode"] == "TF32 tensor op"
    batched = mmsuite.run("cuda.cublas_tf32", Problem(35, 79, 19, batch=3, alpha=0.5, beta=2.0),
                          repeats=1)
    assert batched.ok, batched.verdict.reason


@needs_gpu
def test_gpu_facts_agree_with_cupys_own_device_attributes() -> None:
    """The one reader of GPU facts, held against CuPy's named attributes of the same GPU:
    the attribute numbers it queries for the clocks and the bus are the right ones."""
    import cupy

    index = cupy.cuda.Device().id
    facts = cuda_backend.GpuFacts.read(cupy, index)
    device = cupy.cuda.Device(index)
    named = device.attributes  # CuPy's dict: each cudaDevAttr* by its name
    assert facts.index == index and facts.gpu
    assert facts.sm_count == named["MultiProcessorCount"]
    assert facts.sm_clock_mhz == named["ClockRate"] // 1000
    assert facts.memory_clock_mhz == named["MemoryClockRate"] // 1000
    assert facts.memory_bus_bits == named["GlobalMemoryBusWidth"]
    assert facts.l2_bytes == named["L2CacheSize"]
    assert facts.compute_capability == device.compute_capability
    assert facts.pci_bus_id == device.pci_bus_id
    assert facts.memory_gib == pytest.approx(device.mem_info[1] / 2**30, abs=0.05)


@needs_gpu
def test_environment_names_the_device() -> None:
    env = get_backend("cuda").environment()
    for key in ("gpu", "sm_count", "driver", "cuda_runtime", "cupy"):
        assert env[key], key


# Shapes no tile divides, both layouts, a batch, alpha and beta: what every variant of
# the dispatcher's manifest, forced as rung 22's plan, must get right.
NO_TILE_DIVIDES = (Problem(1, 1, 1), Problem(35, 79, 19, batch=3),
                   Problem(131, 257, 139, batch=2, layout="col", alpha=0.5, beta=2.0),
                   Problem(600, 520, 1031, beta=1.0),
                   # M not a multiple of 4 over several row tiles (the kernels see 518 x 263):
                   # the staging's spread rows and the tiles' stores through shared memory.
                   Problem(263, 518, 45, alpha=0.5, beta=0.5))


def _gemv_problems(config) -> list[Problem]:
    """Odd problems whose skinny side is rung 24's variant ``config`` (column-major sizes
    as the kernels see them; the row-major one has M and N swapped)."""
    skinny = config.skinny
    if config.side == "n":
        sizes = [(131, skinny, 139), (37, max(1, skinny - 1), 1031)]
    else:
        sizes = [(skinny, 257, 139), (max(1, skinny - 1), 263, 1031)]
    (m0, n0, k0), (m1, n1, k1) = sizes
    problems = [Problem(m0, n0, k0, batch=2, layout="col", alpha=0.5, beta=2.0),
                Problem(n1, m1, k1, layout="row", beta=1.0),  # the kernel sees m1 x n1
                Problem(m1, n1, 4096 + 3, layout="col")]
    if config.side == "n":  # M a multiple of 4 over three row blocks: the 16-byte loads
        problems.append(Problem(260, max(1, skinny - 1), 77, layout="col", beta=0.5))
        if skinny < 16:  # twice its columns, less one: two column groups, the last short
            problems.append(Problem(67, 2 * skinny - 1, 301, batch=2, layout="col",
                                    alpha=0.5, beta=2.0))
    else:  # K a multiple of 4 (the 16-byte loads of B) in slices of 124, 64, 32 and 16
        problems.append(Problem(max(1, skinny - 1), 300, 4 * 61, layout="col", beta=0.5))
    return problems


def _agreeing(variant) -> list[tuple[Problem, int]]:
    """(problem, split) pairs a variant is checked on: the odd grid, whole and split in K."""
    from mmsuite.cuda_dispatch.families.gemv import gemv_runs, gemv_splits
    from mmsuite.cuda_dispatch.family import Candidate
    from mmsuite.cuda_dispatch.variants import why_not

    problems = _gemv_problems(variant.config) if variant.family == "gemv" else list(
        NO_TILE_DIVIDES)
    if variant.family == "dot":  # few outputs, long K, split up to 16 ways
        problems += [Problem(1, 2, 2273), Problem(22, 1, 4378 + 4096, batch=2, layout="col",
                                                  alpha=0.5, beta=2.0)]
    if variant.family == "shortk":  # M within one whole-column block, N past 256, K chunks
        problems += [Problem(513, 3, 56, batch=3),  # the kernel sees 3 x 513
                     Problem(7, 263, 73, batch=2, layout="col", alpha=0.5, beta=2.0),
                     Problem(700, 31, 8, beta=1.0), Problem(16, 257, 32, layout="col"),
                     Problem(600, 12, 40, batch=2, beta=0.5),
                     Problem(5, 3, 1, batch=4)]
    out = []
    for problem in problems:
        m, n = (problem.n, problem.m) if problem.layout == "row" else (problem.m, problem.n)
        if variant.family == "gemv" and not gemv_runs(variant.config, m, n):
            continue
        many = variant.family == "dot" or getattr(variant.config, "fused", False)
        splits = (1, 2, 3) + ((4, 8, 16) if many else ())
        if variant.family == "gemv":  # and its finest split: the most slices to add
            splits += (gemv_splits(problem.k)[-1],)
        for split in dict.fromkeys(splits):
            if not why_not(Candidate(variant, split), m, n, problem.k, problem.batch):
                out.append((problem, split))
    return out


@needs_gpu
@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.key)
def test_every_variant_agrees_on_shapes_no_tile_divides(variant) -> None:
    """Each compiled variant of rungs 21, 23, 24, 27 and 30, forced as rung 22's plan on odd
    shapes, whole and split in K, agrees with float64 (the partial sums, the fix-up, the
    fused sums of rungs 21 and 24 and dynamic shared memory included), and so does its
    second launch (the fused sums' arrival counters are left zero for it)."""
    from mmsuite.cuda_dispatch.family import Candidate
    from mmsuite.tuner import PlanTimer

    cases = _agreeing(variant)
    assert cases, f"no odd problem exercises {variant.key}"
    for problem, split in cases:
        with PlanTimer(problem) as timer:
            decision = timer.decision(Candidate(variant, split))
            timer.use(decision)  # raises when the output disagrees with float64
            timer.check(f"{variant.key} launched again")
            info = dict(timer.session.info.get("dispatch", {}))
            assert (info["config"], info["split"], info["choice"]) == (
                variant.config.name, split, "forced")


# ---------------------------------------------------------------- tensor cores
def accurate_tensor_only(rung_id: str = "cuda.26_fp32_accurate") -> Kernel:
    """Rung 26 (or 29) with its tensor path on every shape (no FP32 SIMT fallback on short
    K)."""
    rung = get(rung_id)
    planner = (tensorcore.plan_accurate_tensor if rung.rung == 26
               else tensorcore.plan_accurate_wgmma_tensor)
    return Kernel(f"cuda.{rung.rung}_tensor_only", "cuda", rung.rung, None, "", "",
                  source=rung.source, entry=rung.entry, layout="col", precision=rung.precision,
                  launch=CudaLaunch(planner=planner, arch=cuda_backend.launch_of(rung).arch))


TENSOR_ONLY = {"cuda.26_tensor_only": "cuda.26_fp32_accurate",
               "cuda.29_tensor_only": "cuda.29_fp32_accurate_wgmma"}
TENSOR_SHAPES = NO_TILE_DIVIDES + (Problem(300, 200, 700, batch=2, layout="col", beta=0.5),
                                   Problem(256, 128, 65536 + 3))


@needs_gpu
@pytest.mark.parametrize("kernel_id", ["cuda.25_tf32_mma", "cuda.26_fp32_accurate",
                                       "cuda.26_tensor_only", "cuda.28_tf32_wgmma",
                                       "cuda.29_fp32_accurate_wgmma", "cuda.29_tensor_only"])
def test_tensor_rungs_agree_with_float64_in_their_precision_class(kernel_id: str) -> None:
    """Padding, slices and their reduction, batch, both layouts, alpha and beta: every shape
    within the kernel's class tolerance (rungs 26 and 29, tensor path forced included:
    FP32's). The sm_90a rungs skip on GPUs of other architectures."""
    kernel = (accurate_tensor_only(TENSOR_ONLY[kernel_id]) if kernel_id in TENSOR_ONLY
              else get(kernel_id))
    reason = get_backend("cuda").kernel_reason(kernel)
    if reason:
        pytest.skip(reason)
    for problem in TENSOR_SHAPES:
        inputs = problem.inputs()
        call = mmsuite.layout.plan_call(problem, inputs, kernel.layout)
        with get_backend("cuda").prepare(kernel, call) as session:
            sample_session(session, Sampling.fixed(1), warmup=1)
            out = mmsuite.layout.from_storage(session.output(), problem)
        verdict = verify.check(out, verify.reference(problem, inputs), problem.k,
                               kernel.precision)
        assert verdict.ok, f"{kernel_id} on {problem}: {verdict.reason}"


@needs_gpu
def test_warm_leaves_every_module_of_a_plan_compiled() -> None:
    backend = get_backend("cuda")
    kernel = get("cuda.22_adaptive")
    call = sized_call(Problem(3000, 1500, 700), kernel.layout)
    backend.warm([(kernel, call)])
    for step in backend.plan(kernel, call).steps:
        key = (step.source or kernel.source, cuda_backend._define_key(step.defines), step.arch)
        assert key in cuda_backend._MODULES


# ------------------------------------------------------------- IEEE arithmetic
def test_every_module_is_compiled_by_nvrtc_with_the_ieee_flags_for_its_target() -> None:
    options = cuda_backend.nvrtc_options("cuda/01_naive.cu", (("TILE", "16"),), "sm_90")
    assert set(cuda_backend.IEEE_FLAGS) <= set(options)
    assert {"-ftz=false", "-prec-div=true", "-prec-sqrt=true", "-fmad=true"} <= set(options)
    assert "-DTILE=16" in options and options[-1] == "-arch=sm_90"


def test_the_adapter_never_compiles_through_cupys_own_path() -> None:
    """CuPy's compile (``RawModule(code=...)``, ``RawKernel`` with arithmetic) appends
    -ftz=true whatever the options say: no rung, pack or reduction may go through it."""
    text = Path(cuda_backend.__file__).read_text()
    assert "RawModule(code=" not in text and "RawModule(path=compile_cubin(" in text


@needs_gpu
@pytest.mark.parametrize("kernel_id", [k.id for k in kernels("cuda")])
def test_a_sum_of_subnormal_products_is_kept(kernel_id: str) -> None:
    """64 products of 1e-20 * 1e-20 (1e-40, below FP32's smallest normal) sum to 6.4e-39,
    scaled by alpha = 1e30 before the store: IEEE arithmetic gives 6.4e-9, a flush to zero
    gives 0 (CuPy's own compile path did that for every SIMT rung)."""
    problem = Problem(1, 1, 64, alpha=1e30)
    inputs = (np.full((1, 64), 1e-20, np.float32), np.full((64, 1), 1e-20, np.float32),
              np.ones((1, 1), np.float32))
    m = mmsuite.run(kernel_id, problem, repeats=1, warmup=0, inputs=inputs)
    expected = verify.reference(problem, inputs).value[0, 0]
    assert expected == pytest.approx(6.4e-9, rel=1e-3)
    # TF32 rounds 1e-20 to 10 mantissa bits: a relative error near 2^-10 in each product.
    assert m.output[0, 0] == pytest.approx(expected, rel=2e-3), m.verdict.reason


def _split_on_gpu(x: np.ndarray) -> tuple[np.ndarray, int]:
    """mm_26_split (rungs 26 and 29) of 64 k-contiguous rows of 64: (x0, x1, x2) in float64,
    and the inexact flag it leaves."""
    backend = get_backend("cuda")
    reason = backend.kernel_reason(get("cuda.26_fp32_accurate"))
    if reason:
        pytest.skip(reason)
    cp = cuda_backend._import_cupy()
    rows = k = 64
    part = rows * k
    work = cp.zeros(3 * part // 2 + 32, dtype=cp.float32)
    fn = backend.function(tensorcore.SOURCE_26, tensorcore.SPLIT_ENTRY)
    fn((k // 32, rows // 32, 1), (256,),
       (cp.asarray(x), work, *(np.int32(v) for v in (0, part, rows, k, rows, k, k, 1,
                                                       3 * part // 2))))
    host = cp.asnumpy(work)
    halves = host[:3 * part // 2].view(np.uint16).reshape(3, part)
    parts = (halves.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return parts, int(host[3 * part // 2:].view(np.int32)[0])


@needs_gpu
def test_the_three_bf16_parts_sum_to_each_fp32_operand_exactly() -> None:
    """Normal FP32 values of every exponent down to 2^-100, values that round up past BF16's
    largest finite one, zeros: each x is x0 + x1 + x2 exactly (in float64), every part a
    BF16. Inf and NaN stay whole in x0. No flag is raised."""
    rng = np.random.default_rng(29)
    x = (rng.uniform(1, 2, 64 * 64) * 2.0 ** rng.integers(-100, 127, 64 * 64)
         * rng.choice([-1, 1], 64 * 64)).astype(np.float32)
    x[:9] = [np.finfo(np.float32).max, -np.finfo(np.float32).max, 3.3961e38, 0.0, -0.0,
             1.0 + 2**-23, np.inf, -np.inf, np.nan]
    parts, inexact = _split_on_gpu(x)
    finite = np.isfinite(x)
    assert np.array_equal(parts.sum(axis=0)[finite], x[finite].astype(np.float64))
    assert np.array_equal(parts[0][~finite], x[~finite].astype(np.float64), equal_nan=True)
    assert not parts[1:, ~finite].any() and inexact == 0


@needs_gpu
def test_an_operand_too_small_for_the_split_raises_the_flag() -> None:
    x = np.ones(64 * 64, np.float32)
    x[1234] = 2.0**-120 * 1.2345  # its low bits lie under BF16's smallest subnormal
    assert _split_on_gpu(x)[1] == 1


@needs_gpu
@pytest.mark.parametrize("rung_id", ["cuda.26_fp32_accurate", "cuda.29_fp32_accurate_wgmma"])
def test_the_accurate_rungs_take_their_fp32_simt_path_where_the_split_is_inexact(
        rung_id: str) -> None:
    """A of magnitude 2^-120 (products still normal): the split cannot carry it, so the
    tensor path's blocks sum in FP32 from A and B; sliced and batched, with beta. Each
    sample leaves the flag cleared for the next."""
    kernel = accurate_tensor_only(rung_id)
    reason = get_backend("cuda").kernel_reason(kernel)
    if reason:
        pytest.skip(reason)
    problem = Problem(300, 200, 2100, batch=2, layout="col", beta=0.5, seed=3)
    normal = problem.inputs()
    small = (normal[0] * np.float32(2.0**-120), normal[1] * np.float32(2.0**40), normal[2])
    backend = get_backend("cuda")
    call = mmsuite.layout.plan_call(problem, small, kernel.layout)
    plan = backend.plan(kernel, call)
    with backend.prepare(kernel, call) as session:
        sample_session(session, Sampling.fixed(2), warmup=1)
        out = mmsuite.layout.from_storage(session.output(), problem)
        # After each sample the last block has cleared the flag and its count.
        (work,) = [a for a in session.keep if getattr(a, "size", 0) == plan.workspace]
        flags = work[plan.steps[0].args[-1]:][:2].get().view(np.int32)
        assert flags.tolist() == [0, 0]
    verdict = verify.check(out, verify.reference(problem, small), problem.k, kernel.precision)
    assert verdict.ok, verdict.reason


@pytest.mark.skipif(cuda_backend._import_cupy() is None, reason=cuda_backend._cupy_error)
def test_no_module_of_any_plan_carries_a_flushing_instruction(monkeypatch) -> None:
    """Every module a rung's plans launch (packs, reductions and fix-ups included), over
    shapes that take every planner's branches, compiled to PTX by NVRTC with the adapter's
    own options: no ``.ftz``."""
    backend = cuda_backend.CudaBackend(RunOptions())
    monkeypatch.setitem(backend.__dict__, "device_facts", DeviceFacts())
    shapes = [Problem(*shape) for shape in ODD_SHAPES] + [
        Problem(4096, 4096, 4096), Problem(128, 128, 65536), Problem(8192, 128, 8192),
        Problem(1, 8192, 8192), Problem(1000, 1000, 1000, batch=100),
        Problem(35, 79, 19, batch=3, layout="col", alpha=0.5, beta=2.0)]
    modules: dict[tuple, None] = {}
    for kernel in kernels("cuda"):
        if kernel.reference:
            continue
        for problem in shapes:
            try:
                steps = backend.plan(kernel, sized_call(problem, kernel.layout)).steps
            except LaunchLimit:
                continue
            for step in steps:
                modules[(step.source or kernel.source, cuda_backend._define_key(step.defines),
                         step.arch or "sm_90")] = None
    assert len(modules) > len(kernels("cuda")) // 2
    for source, defines, arch in modules:
        ptx = cuda_backend.module_ptx(source, defines, arch)
        assert ".entry" in ptx and ".ftz" not in ptx, (source, defines, arch)


def test_compile_cubin_keys_its_disk_cache_by_source_options_and_nvrtc(monkeypatch,
                                                                       tmp_path: Path) -> None:
    """The one compile path hands NVRTC exactly the module's options, and a second process
    (a second call here) loads the cached cubin instead of compiling again."""
    compiles: list[list[str]] = []

    class FakeNvrtc:
        getVersion = staticmethod(lambda: (13, 0))
        createProgram = staticmethod(lambda text, name, headers, names: name)
        destroyProgram = staticmethod(lambda program: None)
        getProgramLog = staticmethod(lambda program: "")
        getCUBIN = staticmethod(lambda program: b"cubin of " + program.encode())

        @staticmethod
        def compileProgram(program, options):
            compiles.append(list(options))

    libs = SimpleNamespace(nvrtc=FakeNvrtc)
    for name, module in (("cupy_backends", SimpleNamespace()), ("cupy_backends.cuda",
                         SimpleNamespace()), ("cupy_backends.cuda.libs", libs)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    options = cuda_backend.nvrtc_options("cuda/01_naive.cu", (), "sm_90")
    first = cuda_backend.compile_cubin("cuda/01_naive.cu", options)
    again = cuda_backend.compile_cubin("cuda/01_naive.cu", options)
    assert first == again and Path(first).parent == tmp_path / "mmsuite" / "cuda"
    assert Path(first).read_bytes() == b"cubin of cuda/01_naive.cu"
    assert compiles == [list(options)]
    other = cuda_backend.nvrtc_options("cuda/01_naive.cu", (), "sm_100")
    assert cuda_backend.compile_cubin("cuda/01_naive.cu", other) != first
    assert len(compiles) == 2
