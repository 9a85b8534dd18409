"""CPU backend behaviour beyond agreement: threads, determinism, the GIL, block edges."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import mmsuite
from mmsuite import Problem, RunOptions, verify
from mmsuite.backends import cpu
from mmsuite.layout import from_storage, plan_call

from ..conftest import kernel_ids

C_RUNGS = [p for p in kernel_ids("cpu") if p.values[0] != "cpu.blas"]
OMP_RUNGS = [p for p in C_RUNGS if ".omp_" in p.values[0]]


def _needs_extension() -> None:
    if mmsuite.get("cpu.seq_naive").reason:
        pytest.skip(mmsuite.get("cpu.seq_naive").reason)


@pytest.mark.parametrize("kernel_id", OMP_RUNGS)
def test_thread_option_is_honoured_and_recorded(kernel_id: str) -> None:
    p = Problem(35, 79, 19)
    for threads in (1, 2, 3):
        m = mmsuite.run(kernel_id, p, repeats=1, options=RunOptions(threads=threads))
        assert m.ok and m.info["threads"] == threads


def test_thread_option_does_not_leak_into_later_runs() -> None:
    _needs_extension()
    p = Problem(16, 16, 16)
    one = RunOptions(threads=1)
    assert mmsuite.run("cpu.omp_packed", p, repeats=2, options=one).info["threads"] == 1
    default = mmsuite.run("cpu.omp_packed", p, repeats=2).info["threads"]
    assert default == cpu._DEFAULT_THREADS and default >= 1


def test_thread_option_holds_in_any_calling_thread() -> None:
    # OpenMP's thread count is per calling thread: the adapter must set it where it launches.
    _needs_extension()
    seen: list[int] = []

    def work() -> None:
        m = mmsuite.run("cpu.omp_packed", Problem(16, 16, 16), repeats=2,
                        options=RunOptions(threads=1))
        seen.append(m.info["threads"])

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    assert seen == [1]


def test_bad_thread_count_is_refused() -> None:
    with pytest.raises(mmsuite.KernelUnavailable, match="threads must be >= 1"):
        mmsuite.run("cpu.omp_packed", Problem(4, 4, 4), options=RunOptions(threads=0))


@pytest.mark.parametrize("kernel_id", OMP_RUNGS)
@pytest.mark.parametrize("problem", [
    Problem(35, 79, 19, seed=1),
    Problem(131, 257, 300, batch=2, alpha=-0.75, beta=1.5, seed=2),
    Problem(300, 67, 45, layout="col", seed=3),
], ids=lambda p: f"{p.shape_label}-{p.layout}-beta{p.beta:g}")
def test_omp_rungs_agree_with_one_and_two_threads(kernel_id: str, problem: Problem) -> None:
    # Every element is computed by one thread in a fixed order, whatever the
    # thread count, so the results are identical, not just close.
    one = mmsuite.run(kernel_id, problem, repeats=1, options=RunOptions(threads=1))
    two = mmsuite.run(kernel_id, problem, repeats=1, options=RunOptions(threads=2))
    assert one.ok and two.ok, (one.verdict.reason, two.verdict.reason)
    np.testing.assert_array_equal(one.output, two.output)


@pytest.mark.parametrize("kernel_id", C_RUNGS)
def test_shapes_crossing_every_block_boundary(kernel_id: str) -> None:
    # Wider than one NC panel of omp_packed, deeper than two of its KC steps,
    # and not a multiple of any tile of the tiled rungs.
    for seed, shape in enumerate([(13, 4133, 531), (203, 37, 1031)]):
        m = mmsuite.run(kernel_id, Problem(*shape, beta=0.5, seed=seed), repeats=1, warmup=0)
        assert m.ok, f"{kernel_id} on {shape}: {m.verdict.reason}"


@pytest.mark.parametrize("kernel_id", ["cpu.seq_naive", "cpu.blas"])
def test_session_resets_c_to_nan_or_c0_and_scrubs_without_changing_results(
        kernel_id: str) -> None:
    if mmsuite.get(kernel_id).reason:
        pytest.skip(mmsuite.get(kernel_id).reason)
    backend = mmsuite.backends.get_backend("cpu")
    for beta in (0.0, 0.5):
        problem = Problem(9, 7, 5, beta=beta, seed=2)
        inputs = problem.inputs()
        call = plan_call(problem, inputs, "row")
        with backend.prepare(mmsuite.get(kernel_id), call) as session:
            session.reset_c()
            if beta == 0.0:
                assert np.isnan(session.output()).all()
            else:
                np.testing.assert_array_equal(session.output(), call.c0)
            session.scrub_l2()
            session.launch()
            out = from_storage(session.output(), problem)
        assert verify.check(out, verify.reference(problem, inputs), problem.k).ok
        assert session.has_transfers is False


@pytest.mark.parametrize("kernel_id", ["cpu.seq_naive", "cpu.blas"])
def test_session_buffers_start_on_their_own_huge_page_boundary(kernel_id: str) -> None:
    """Where the heap put A, B and C changed the timings from process to process."""
    if mmsuite.get(kernel_id).reason:
        pytest.skip(mmsuite.get(kernel_id).reason)
    problem = Problem(33, 17, 9, beta=0.5, seed=3)
    call = plan_call(problem, problem.inputs(), "row")
    with mmsuite.backends.get_backend("cpu").prepare(mmsuite.get(kernel_id), call) as session:
        for placed_array, given in ((session.call.a, call.a), (session.call.b, call.b)):
            assert placed_array.ctypes.data % cpu.HUGE_PAGE == 0
            np.testing.assert_array_equal(placed_array, given)
        assert session.c.ctypes.data % cpu.HUGE_PAGE == 0 and session.c.size == 33 * 17
        session.reset_c()
        session.launch()
        out = from_storage(session.output(), problem)
    assert verify.check(out, verify.reference(problem, problem.inputs()), problem.k).ok


def test_placed_copies_are_flat_writable_and_apart() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    first, second = cpu.placed(x), cpu.placed(x)
    np.testing.assert_array_equal(first, x.reshape(-1))
    assert first.dtype == np.float32 and first.flags.writeable
    first[0] = 99.0
    assert second[0] == 0.0 and x[0, 0] == 0.0
    assert cpu.placed_empty(0).size == 0


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs Linux's /proc")
def test_placed_memory_is_private_so_that_huge_pages_may_back_it() -> None:
    """Shared anonymous memory (mmap's default) is shmem, which transparent huge pages
    leave out: operands placed there sat on scattered small pages after all."""
    array = cpu.placed_empty(3 * cpu.HUGE_PAGE // 4)
    address = array.ctypes.data
    for line in Path("/proc/self/maps").read_text().splitlines():
        span, permissions = line.split()[:2]
        low, high = (int(bound, 16) for bound in span.split("-"))
        if low <= address < high:
            assert permissions.endswith("p"), line  # private, not shared
            break
    else:
        raise AssertionError("the placed array is in no mapping")


def test_preemption_timer_flags_samples_another_process_interrupted(monkeypatch) -> None:
    counts = iter([10, 10, 10, 30])  # involuntary switches before and after two samples
    monkeypatch.setattr(cpu, "_involuntary_switches", lambda: next(counts))
    timer = cpu.PreemptionTimer()
    timer.start()
    timer.stop()
    timer._start, timer._stop = 0.0, 0.1  # no switch in 0.1 s
    assert not timer.disturbed()
    timer.start()
    timer.stop()
    timer._start, timer._stop = 0.0, 0.1  # 20 switches in 0.1 s: a busy neighbour
    assert timer.disturbed()


def test_last_level_cache_size_is_read_or_defaulted() -> None:
    assert cpu._last_level_cache_bytes() >= 2**20


def test_c_call_releases_the_gil() -> None:
    # A Python thread keeps ticking while a long C call runs in another thread.
    # Were the GIL held, no tick could land inside the call; the check only
    # counts ticks in the middle half of the call, whatever its length.
    _needs_extension()
    extension, _ = cpu._load_rung("seq_naive")
    ffi, lib = extension.ffi, extension.lib
    size = 640
    a = np.ones(size * size, dtype=np.float32)
    b = np.ones(size * size, dtype=np.float32)
    c = np.empty(size * size, dtype=np.float32)
    ptr = {name: ffi.cast("float *", ffi.from_buffer(x)) for name, x in zip("abc", (a, b, c))}
    ticks: list[float] = []
    stop = threading.Event()

    def ticker() -> None:
        while not stop.is_set():
            ticks.append(time.perf_counter())

    thread = threading.Thread(target=ticker)
    thread.start()
    try:
        while not ticks:  # the ticker is running before the call starts
            time.sleep(0.001)
        start = time.perf_counter()
        lib.mm_seq_naive(size, size, size, 1, 1.0, ptr["a"], ptr["b"], 0.0, ptr["c"])
        end = time.perf_counter()
    finally:
        stop.set()
        thread.join()
    assert np.all(c == size)
    quarter = (end - start) / 4
    inside = [t for t in ticks if start + quarter < t < end - quarter]
    assert inside, f"no Python progress during a {1e3 * (end - start):.0f} ms C call"


@pytest.mark.parametrize("problem", [
    Problem(3, 700, 1000, seed=6),
    Problem(2, 97, 37, batch=3, alpha=0.5, beta=-1.25, seed=7),
], ids=lambda p: f"{p.shape_label}-batch{p.batch}")
def test_omp_blis_splits_columns_when_rows_are_too_few(problem: Problem) -> None:
    # With fewer rows than would keep every thread's micro-kernel busy, omp_blis's
    # threads share the packed rows of A and split the columns of B instead; the
    # sums keep their order, so any thread count gives the same bits.
    if mmsuite.get("cpu.omp_blis").reason:
        pytest.skip(mmsuite.get("cpu.omp_blis").reason)
    runs = [mmsuite.run("cpu.omp_blis", problem, repeats=1, options=RunOptions(threads=t))
            for t in (1, 2, 3)]
    assert all(m.ok for m in runs), [m.verdict.reason for m in runs]
    for m in runs[1:]:
        np.testing.assert_array_equal(runs[0].output, m.output)


# ----------------------------------------------------------------- affinity
BOUND = {"OMP_PROC_BIND": "close", "OMP_PLACES": "threads"}  # what Slurm and modules export


def _needs_two_cpus() -> set[int]:
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    if len(allowed) < 2:
        pytest.skip("needs Linux and at least 2 CPUs in this process's mask to see one taken")
    return allowed


def test_loading_the_openmp_runtime_under_binding_keeps_the_callers_cpu_set() -> None:
    # libgomp binds the thread that loads it to the first place; a fresh process is the only
    # one where the runtime is not loaded yet.
    allowed = _needs_two_cpus()
    _needs_extension()
    script = ("import os; from mmsuite.backends import cpu; cpu._load_rung('omp_tiled'); "
              "print(sorted(os.sched_getaffinity(0)))")
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, **BOUND},
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == str(sorted(allowed))


def test_run_under_openmp_binding_records_every_allowed_cpu_as_a_thread(tmp_path: Path) -> None:
    allowed = _needs_two_cpus()
    _needs_extension()
    out = tmp_path / "bound.json"
    subprocess.run([sys.executable, "-m", "mmsuite.cli", "run", "--backend", "cpu", "--shape",
                    "48", "--repeats", "2", "--warmup", "0", "--json", str(out)],
                   env={**os.environ, **BOUND}, capture_output=True, text=True, check=True)
    rows = json.loads(out.read_text())["results"]
    omp = [r for r in rows if ".omp_" in r["kernel"]]
    assert omp and {r["info"]["threads"] for r in omp} == {len(allowed)}
    blas = [r for r in rows if r["kernel"] == "cpu.blas"]
    assert blas and blas[0]["info"]["threads"] == len(allowed)
