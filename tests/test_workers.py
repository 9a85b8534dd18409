"""Worker processes: a job that aborts, hangs or raises costs one row, and the sweep goes on.

The machinery is the one GPU kernels use; here it runs CPU kernels in the
workers (``isolated=("cpu",)``) with planted jobs, so it is tested without a GPU.
"""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from mmsuite import Problem, catalogue, workers
from mmsuite import sweep as sweep_module
from mmsuite.backends import KernelFailed, RunOptions, is_kernel_failure
from mmsuite.catalogue import Kernel
from mmsuite.launch import CudaLaunch, LaunchLimit
from mmsuite.sweep import Lanes, RunContext, sweep
from tests.planted.native import build, plant

QUICK = {"repeats": 1, "warmup": 0}
LADDER = ["cpu.blas", "cpu.seq_naive", "cpu.seq_ikj", "cpu.seq_tiled"]


def planted_job(plan: dict, kernel_id, problem, options, run_kwargs):
    """Runs in the worker: does what ``plan`` says for a kernel, else measures it."""
    action = plan.get(kernel_id)
    if action == "abort":
        os.abort()
    if action == "hang":
        time.sleep(3600)
    if action == "exit":
        os._exit(3)
    if action == "bug":  # mmsuite's engine raises what no kernel failure raises
        workers.run = _engine_bug
    return workers.measure_job(kernel_id, problem, options, run_kwargs)


def _engine_bug(*args, **kwargs):
    return {}["an engine bug"]


SMALL = Problem(9, 7, 5)


def _isolated_sweep(plan: dict, problems=(SMALL,), **kwargs):
    return sweep(RunContext([catalogue.get(k) for k in LADDER], list(problems), **QUICK, **kwargs),
                 lanes=Lanes(isolated=("cpu",), job=functools.partial(planted_job, plan)))


def test_a_worker_that_aborts_fails_one_row_and_is_replaced() -> None:
    rows = _isolated_sweep({"cpu.seq_naive": "abort"})
    assert [r.status for r in rows] == ["ok", "crashed", "ok", "ok"]
    assert rows[1].reason == "its worker process died: Fatal Python error: Aborted"


def test_a_worker_that_exits_fails_one_row() -> None:
    rows = _isolated_sweep({"cpu.seq_ikj": "exit"})
    assert [r.status for r in rows] == ["ok", "ok", "crashed", "ok"]
    assert rows[2].reason.startswith("its worker process died (")


def test_a_job_past_its_timeout_is_killed_and_the_sweep_goes_on() -> None:
    rows = _isolated_sweep({"cpu.blas": "hang"}, timeout=5)
    assert [r.status for r in rows] == ["error", "ok", "ok", "ok"]
    assert rows[0].reason == "timed out after 5 s; its worker was killed"


def test_a_bug_in_mmsuite_is_a_row_that_keeps_its_traceback(capfd) -> None:
    """A worker's bug: the row names it a bug, and the traceback reaches standard error."""
    rows = _isolated_sweep({"cpu.seq_tiled": "bug"})
    assert [r.status for r in rows] == ["ok", "ok", "ok", "error"]
    assert rows[3].reason == ("internal error (a bug in mmsuite; traceback on stderr): "
                              "KeyError: 'an engine bug'")
    err = capfd.readouterr().err
    assert "mmsuite: a bug while measuring cpu.seq_tiled on 9x7x5:" in err
    assert "Traceback (most recent call last)" in err and "in _engine_bug" in err


def test_a_bug_in_this_process_keeps_its_traceback_too(monkeypatch, capfd) -> None:
    monkeypatch.setattr(workers, "run", _engine_bug)
    status, reason, _ = workers.measure_job("cpu.blas", SMALL, RunOptions(), {})
    assert status == "error" and reason.startswith("internal error (a bug in mmsuite")
    assert "in _engine_bug" in capfd.readouterr().err


def test_a_workers_crash_log_is_removed_when_closed_or_dropped() -> None:
    closed, dropped = workers.Worker(None), workers.Worker(None)
    closed_log, dropped_log = Path(closed._crash_log), Path(dropped._crash_log)
    assert closed_log.exists() and dropped_log.exists()
    closed.close()
    del dropped
    assert not closed_log.exists()
    assert not dropped_log.exists()


def test_device_runtime_errors_and_launch_limits_are_the_kernels_failures() -> None:
    class CompileError(Exception):  # as the device's runtime package defines its errors
        __module__ = "pyopencl._cl"

    assert is_kernel_failure(CompileError("build failed"), ("pyopencl",))
    assert not is_kernel_failure(CompileError("build failed"), ("cupy",))
    assert is_kernel_failure(KernelFailed("timer refused"), ())
    assert is_kernel_failure(MemoryError("4 GiB"), ())
    assert not is_kernel_failure(TypeError("bad argument"), ("pyopencl",))
    too_many_matrices = SimpleNamespace(m=1, n=1, k=1, batch=70000)
    with pytest.raises(LaunchLimit, match="65535"):
        CudaLaunch(block=(16, 16)).grid(too_many_matrices, "row")


def test_rows_record_their_device_and_keep_ladder_order() -> None:
    problems = [Problem(9, 7, 5), Problem(3, 4, 5, batch=2)]
    rows = _isolated_sweep({}, problems=problems, devices=[0, 1])
    assert [(r.kernel.id, r.problem) for r in rows] == [(k, p) for p in problems for k in LADDER]
    assert all(r.status == "ok" for r in rows)
    assert {r.to_record()["device"] for r in rows} <= {0, 1}


def test_a_worker_sees_only_its_gpu() -> None:
    assert workers.visible_device(1, None) == "1"
    assert workers.visible_device(1, "2,3") == "3"  # an index into the parent's own list


def pid_job(kernel_id, problem, options, run_kwargs):
    """Records which process ran the job, and nothing else."""
    return "ok", "", {"kernel": kernel_id, "pid": os.getpid()}


@pytest.mark.skipif(not catalogue.get("opencl.naive").available, reason="no OpenCL device")
def test_opencl_on_a_gpu_runs_in_a_worker_of_its_own(monkeypatch) -> None:
    monkeypatch.setattr(sweep_module, "_selected_gpu", lambda backend, options: backend == "opencl")
    rows = sweep(RunContext([catalogue.get("cpu.blas"), catalogue.get("opencl.naive")], [SMALL]),
                 lanes=Lanes(job=pid_job))
    host, cl = (r.to_record()["pid"] for r in rows)
    assert len({host, cl, os.getpid()}) == 3  # the host worker, the GPU's, this process
    assert "device" not in rows[1].to_record()  # bound to no CUDA device


def test_each_device_worker_first_builds_its_share_of_the_sweep(monkeypatch) -> None:
    order: list[tuple] = []

    def warm(self, pairs, options) -> None:
        order.append(("warm", self.device, [kernel for kernel, _ in pairs]))

    def run(self, kernel_id, problem, options, run_kwargs, timeout):
        order.append(("run", self.device, kernel_id))
        return "ok", "", {"kernel": kernel_id}

    monkeypatch.setattr(workers.Worker, "warm", warm)
    monkeypatch.setattr(workers.Worker, "run", run)
    jobs = [workers.Job(i, f"cuda.k{i}", SMALL) for i in range(5)]
    workers.run_on_devices(jobs, [0, 1], RunOptions(), {}, None, lambda *result: None)
    shares = {device: kernels for what, device, kernels in order if what == "warm"}
    assert shares == {0: ["cuda.k0", "cuda.k2", "cuda.k4"], 1: ["cuda.k1", "cuda.k3"]}
    for device in (0, 1):  # a worker builds before it runs anything
        mine = [what for what, d, _ in order if d == device]
        assert mine[0] == "warm" and mine.count("warm") == 1
    assert sorted(k for what, _, k in order if what == "run") == [j.kernel_id for j in jobs]


def test_warm_job_hands_each_backend_its_jobs_with_sizes_only(monkeypatch) -> None:
    handed: dict[str, list] = {}

    class Recorder:
        def __init__(self, name: str) -> None:
            self.name = name

        def warm(self, jobs) -> None:
            handed[self.name] = [(kernel.id, call.m, call.n, call.a.size) for kernel, call in jobs]

    monkeypatch.setattr(workers, "get_backend", lambda name, options: Recorder(name))
    problem = Problem(9, 7, 5)
    workers.warm_job([("cpu.seq_naive", problem), ("opencl.naive", problem),
                      ("cpu.blas", problem)], RunOptions())
    assert handed == {"cpu": [("cpu.seq_naive", 9, 7, 0), ("cpu.blas", 9, 7, 0)],
                      "opencl": [("opencl.naive", 9, 7, 0)]}


def test_default_timeout_grows_with_the_work() -> None:
    small, big = Problem(64, 64, 64), Problem(8192, 8192, 8192)
    assert workers.default_timeout(small) == pytest.approx(workers.TIMEOUT_FLOOR_S, rel=1e-3)
    assert workers.default_timeout(big) > workers.TIMEOUT_FLOOR_S + 1000


def test_available_host_memory_is_read_here() -> None:
    available = workers.available_host_memory()
    assert available is not None and available > 2**20


def _cgroup_tree(tmp_path, files: dict) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)


def test_cgroup_v2_limit_of_an_ancestor_counts(tmp_path) -> None:
    _cgroup_tree(tmp_path, {
        "proc": "0::/jobs/one\n",
        "fs/jobs/memory.max": str(4 * 2**30), "fs/jobs/memory.current": str(2**30),
        "fs/jobs/one/memory.max": "max", "fs/jobs/one/memory.current": str(2**30)})
    assert workers.cgroup_free_memory(tmp_path / "proc", tmp_path / "fs") == 3 * 2**30


def test_cgroup_v1_memory_controller(tmp_path) -> None:
    _cgroup_tree(tmp_path, {
        "proc": "5:cpu,cpuacct:/x\n4:memory:/box\n",
        "fs/memory/box/memory.limit_in_bytes": str(2**30),
        "fs/memory/box/memory.usage_in_bytes": str(2**28),
        "fs/memory/memory.limit_in_bytes": str(2**63 - 4096),
        "fs/memory/memory.usage_in_bytes": str(2**32)})
    assert workers.cgroup_free_memory(tmp_path / "proc", tmp_path / "fs") == 2**30 - 2**28


def test_no_cgroup_limit(tmp_path) -> None:
    _cgroup_tree(tmp_path, {"proc": "0::/\n", "fs/memory.max": "max",
                            "fs/memory.current": "5"})
    assert workers.cgroup_free_memory(tmp_path / "proc", tmp_path / "fs") is None
    assert workers.cgroup_free_memory(tmp_path / "missing", tmp_path / "fs") is None


def test_check_host_memory_refuses_what_does_not_fit(monkeypatch) -> None:
    monkeypatch.setattr(workers, "available_host_memory", lambda: 4 * 2**30)
    workers.check_host_memory(Problem(512, 512, 512))
    with pytest.raises(workers.HostMemoryError, match=r"20000x20000x20000 needs about \d+"):
        workers.check_host_memory(Problem(20000, 20000, 20000))


# ----------------------------------------------------------- planted CUDA kernels
# Test-only kernels (tests/planted/*.cu), never in the built-in catalogue: the worker job
# below adds them to the catalogue of the worker process.
def _planted(name: str, adds: str) -> Kernel:
    return Kernel(id=f"cuda.planted_{name}", backend="cuda", rung=90, parent=None, adds=adds,
                  origin="test", source=f"tests/planted/{name}.cu", entry=f"mm_planted_{name}",
                  layout="col", launch=CudaLaunch(block=(16, 16)))


PLANTED = {k.id: k for k in (_planted("illegal_address", "writes 2^40 floats past C"),
                              _planted("spin_forever", "never returns"))}


def measure_with_planted(kernel_id, problem, options, run_kwargs):
    """The real job, in a worker whose catalogue also holds the planted kernels (added as a
    plugin's are)."""
    catalogue.add(k for k in PLANTED.values() if k.id not in catalogue.BY_ID)
    return workers.measure_job(kernel_id, problem, options, run_kwargs)


CUDA = catalogue.get("cuda.01_naive").available
PLANTED_TIMEOUT_S = 20


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("shape", [(35, 79, 19), (257, 129, 65)])
def test_planted_crash_and_hang_cost_one_row_each_on_the_gpu(shape) -> None:
    real = ["cuda.01_naive", "cuda.07_blocktile_2d", "cuda.10_prefetch", "cuda.20_tuned",
            "cuda.cublas"]
    kernels = [catalogue.get(real[0]), PLANTED["cuda.planted_illegal_address"],
               catalogue.get(real[1]), catalogue.get(real[2]),
               PLANTED["cuda.planted_spin_forever"], catalogue.get(real[3]),
               catalogue.get(real[4])]
    rows = sweep(RunContext(kernels, [Problem(*shape)], timeout=PLANTED_TIMEOUT_S, repeats=3,
                            warmup=1), lanes=Lanes(job=measure_with_planted))
    by_id = {r.kernel.id: r for r in rows}
    for row in rows:  # shown when the test fails, and with -s
        print(f"{row.kernel.id:32} {row.status:6} {row.reason}")
    assert [r.kernel.id for r in rows] == [k.id for k in kernels]
    crash, hang = by_id["cuda.planted_illegal_address"], by_id["cuda.planted_spin_forever"]
    assert crash.status == "error" and "illegal" in crash.reason.lower()
    assert hang.status == "error"
    assert hang.reason == f"timed out after {PLANTED_TIMEOUT_S} s; its worker was killed"
    assert all(by_id[k].status == "ok" for k in real), [(k, by_id[k].reason) for k in real]


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_the_cuda_ladder_spreads_over_every_gpu() -> None:
    import cupy

    count = cupy.cuda.runtime.getDeviceCount()
    if count < 2:
        pytest.skip("needs two GPUs")
    kernels = catalogue.kernels("cuda")
    problems = [Problem(s, s, s) for s in (256, 384, 512, 640)]
    rows = sweep(RunContext(kernels, problems, devices=list(range(count)), repeats=3, warmup=1))
    assert [(r.kernel.id, r.problem) for r in rows] == [(k.id, p) for p in problems
                                                        for k in kernels]
    measured = [r for r in rows if r.status != "unavailable"]
    assert all(r.status == "ok" for r in measured), [(r.kernel.id, r.reason) for r in measured
                                                     if r.status != "ok"]
    assert {r.to_record()["device"] for r in measured} == set(range(count))


# ----------------------------------------------------------- the host worker
def test_host_kernels_share_one_long_lived_worker() -> None:
    rows = sweep(RunContext([catalogue.get(k) for k in LADDER], [SMALL, Problem(3, 4, 5)]),
                 lanes=Lanes(job=pid_job))
    pids = {r.to_record()["pid"] for r in rows}
    assert len(pids) == 1 and os.getpid() not in pids  # one worker, not this process


def measure_with_planted_segfault(folder: str, kernel_id, problem, options, run_kwargs):
    """The real job, in a worker whose CPU backend calls the planted segfault for
    cpu.seq_ikj."""
    plant(Path(folder))
    return workers.measure_job(kernel_id, problem, options, run_kwargs)


def test_a_segfaulting_c_rung_costs_one_crashed_row(tmp_path) -> None:
    build(tmp_path)
    kernels = [catalogue.get(k) for k in ["cpu.blas", "cpu.seq_naive", "cpu.seq_ikj",
                                          "cpu.seq_tiled"]]
    rows = sweep(RunContext(kernels, [Problem(35, 79, 19)], **QUICK),
                 lanes=Lanes(job=functools.partial(measure_with_planted_segfault, str(tmp_path))))
    assert [r.status for r in rows] == ["ok", "ok", "crashed", "ok"]
    assert rows[2].reason == "its worker process died: Fatal Python error: Segmentation fault"
    assert rows[2].to_record()["status"] == "crashed"


def test_an_unavailable_kernel_is_a_row_whose_reason_does_not_repeat_it() -> None:
    """A cluster worker's row read "opencl.clblast unavailable: opencl.clblast is unavailable:
    ..."; the reason is the reason alone."""
    unavailable = [k for k in catalogue.kernels() if not k.available]
    if not unavailable:
        pytest.skip("every kernel is available on this machine")
    kernel = unavailable[0]
    status, reason, record = workers.measure_job(kernel.id, Problem(4, 4, 4), RunOptions(), {})
    assert (status, reason, record) == ("unavailable", kernel.reason, None)
