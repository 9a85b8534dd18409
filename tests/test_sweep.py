"""The sweep runner turns every outcome into a row, keeps ladder order and never stops early."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from mmsuite import Problem, catalogue, verify, workers
from mmsuite.backends import KernelFailed, KernelUnavailable, RunOptions
from mmsuite.sweep import Ladder, Lanes, RunContext, SweepHooks, SweepRow, row_key, sweep

QUICK = {"repeats": 1, "warmup": 0}
# Tests that patch this process's functions run the host kernels here, not in the host worker.
HERE = Lanes(in_process=("cpu",))


def _kernels(*ids: str) -> list:
    return [catalogue.get(i) for i in ids]


def test_rows_for_every_kernel_and_problem_in_order() -> None:
    kernels = _kernels("cpu.blas", "cpu.seq_naive")
    problems = [Problem(5, 6, 7), Problem(3, 3, 3, batch=2)]
    seen = []
    rows = sweep(RunContext(kernels, problems, **QUICK), hooks=SweepHooks(on_row=seen.append))
    assert [(r.kernel.id, r.problem) for r in rows] == [
        (k.id, p) for p in problems for k in kernels]
    assert seen == rows and all(r.status == "ok" for r in rows)
    assert rows[1].to_record()["kernel_ms"]["median"] > 0


def test_a_raising_kernel_becomes_an_error_row_and_the_sweep_goes_on(monkeypatch) -> None:
    real_run = workers.run

    def run(kernel_id, *args, **kwargs):
        if kernel_id == "cpu.seq_naive":
            raise KernelFailed("launch failed: illegal address")
        return real_run(kernel_id, *args, **kwargs)

    monkeypatch.setattr(workers, "run", run)
    rows = sweep(RunContext(_kernels("cpu.seq_naive", "cpu.blas"), [Problem(4, 4, 4)], **QUICK),
                 lanes=HERE)
    assert [r.status for r in rows] == ["error", "ok"]
    assert rows[0].reason == "KernelFailed: launch failed: illegal address"


def test_measure_job_turns_a_kernel_failure_into_an_error_result(monkeypatch, capfd) -> None:
    def explode(*args, **kwargs):
        raise KernelFailed("kernel exploded")

    monkeypatch.setattr(workers, "run", explode)
    status, reason, record = workers.measure_job("cpu.blas", Problem(4, 4, 4), RunOptions(), {})
    assert (status, record) == ("error", None) and reason == "KernelFailed: kernel exploded"
    assert capfd.readouterr().err == ""  # the kernel's fault: the reason is all there is


def test_a_kernel_found_unavailable_at_run_time_is_an_unavailable_row(monkeypatch) -> None:
    def run(kernel_id, *args, **kwargs):
        raise KernelUnavailable(f"{kernel_id} cannot run on this device: 2 KiB local memory")

    monkeypatch.setattr(workers, "run", run)
    rows = sweep(RunContext(_kernels("cpu.blas"), [Problem(4, 4, 4)], **QUICK), lanes=HERE)
    assert rows[0].status == "unavailable" and "2 KiB local memory" in rows[0].reason


def test_wrong_output_becomes_a_failed_row(monkeypatch) -> None:
    original = verify.check

    def corrupt(output, ref, k, precision="fp32"):
        output = np.array(output, copy=True)
        output.flat[0] = 1e3
        return original(output, ref, k, precision)

    monkeypatch.setattr(verify, "check", corrupt)
    rows = sweep(RunContext(_kernels("cpu.seq_naive"), [Problem(8, 8, 8)], **QUICK), lanes=HERE)
    assert rows[0].status == "failed" and "exceeds tolerance" in rows[0].reason


def test_unavailable_kernels_become_rows_with_their_reason() -> None:
    kernel = catalogue.get("cuda.01_naive")
    if kernel.available:
        pytest.skip("CUDA is available here")
    rows = sweep(RunContext([kernel], [Problem(4, 4, 4)], **QUICK))
    assert rows[0].status == "unavailable" and rows[0].reason == kernel.reason


def test_resume_skips_what_is_already_measured() -> None:
    problem = Problem(6, 5, 4)
    first = sweep(RunContext(_kernels("cpu.blas"), [problem], **QUICK))
    calls = []

    def job(kernel_id, problem, options, run_kwargs):
        calls.append(kernel_id)
        return workers.measure_job(kernel_id, problem, options, run_kwargs)

    rows = sweep(RunContext(_kernels("cpu.blas", "cpu.seq_naive"), [problem], **QUICK),
                 resume=[r.to_record() for r in first], lanes=replace(HERE, job=job))
    assert calls == ["cpu.seq_naive"]
    assert [r.kernel.id for r in rows] == ["cpu.blas", "cpu.seq_naive"]
    assert rows[0].to_record() is first[0].to_record()


def test_progress_hooks_plan_only_the_pairs_that_run_and_see_each_start() -> None:
    """on_plan counts neither unavailable nor resumed pairs; on_start precedes each row."""
    problem = Problem(6, 5, 4)
    first = sweep(RunContext(_kernels("cpu.blas"), [problem], **QUICK))
    unavailable = next(k for k in catalogue.kernels() if not k.available)
    events: list[tuple] = []
    rows = sweep(RunContext(_kernels("cpu.blas", "cpu.seq_naive", "cpu.seq_ikj") + [unavailable],
                            [problem], **QUICK), resume=[r.to_record() for r in first],
                 hooks=SweepHooks(on_plan=lambda n: events.append(("plan", n)),
                                  on_start=lambda k, p: events.append(("start", k.id)),
                                  on_row=lambda r: events.append(("row", r.kernel.id))))
    assert len(rows) == 4
    plan = events.index(("plan", 2))
    assert {e for e in events[:plan]} == {("row", "cpu.blas"), ("row", unavailable.id)}
    assert events[plan + 1:] == [("start", "cpu.seq_naive"), ("row", "cpu.seq_naive"),
                                 ("start", "cpu.seq_ikj"), ("row", "cpu.seq_ikj")]


def test_resume_reruns_errors_and_other_problems() -> None:
    error = {"kernel": "cpu.blas", "status": "error", "reason": "timed out",
             "problem": Problem(4, 4, 4).to_dict()}
    other_seed = sweep(RunContext(_kernels("cpu.blas"), [Problem(4, 4, 4, seed=1)],
                                  **QUICK))[0].to_record()
    rows = sweep(RunContext(_kernels("cpu.blas"), [Problem(4, 4, 4)], **QUICK),
                 resume=[error, other_seed])
    assert rows[0].status == "ok" and rows[0].to_record() is not other_seed


# What an earlier run's row of each status becomes on --resume (cpu.omp_packed has none).
EARLIER = {"cpu.blas": "ok", "cpu.seq_naive": "failed", "cpu.seq_ikj": "invalid",
           "cpu.seq_tiled": "crashed", "cpu.omp_naive": "error", "cpu.omp_tiled": "unavailable"}


@pytest.mark.parametrize("retry_crashed", [False, True])
def test_the_ladder_keeps_measured_rows_and_leaves_errors_unavailable_and_missing_to_run(
        retry_crashed: bool) -> None:
    """The one rule for --resume, on one host and on a cluster alike."""
    problem = Problem(4, 4, 4)
    kernels = _kernels(*EARLIER, "cpu.omp_packed", "cpu.omp_blis")
    earlier = {k: {"kernel": k, "backend": "cpu", "status": status, "reason": f"was {status}",
                   "problem": problem.to_dict()} for k, status in EARLIER.items()}
    events: list[tuple] = []
    ladder = Ladder(kernels, [problem], resume=earlier.values(), retry_crashed=retry_crashed,
                    on_row=lambda r: events.append(("row", r.kernel.id, r.status)),
                    on_start=lambda k, p: events.append(("start", k.id, p)),
                    on_plan=lambda n: events.append(("plan", n)))
    to_run = ladder.plan(lambda k: "no such runtime" if k.id == "cpu.omp_blis" else "")

    kept = ["cpu.blas", "cpu.seq_naive", "cpu.seq_ikj"] + ([] if retry_crashed
                                                          else ["cpu.seq_tiled"])
    rerun = (["cpu.seq_tiled"] if retry_crashed else []) + [
        "cpu.omp_naive", "cpu.omp_tiled", "cpu.omp_packed"]
    assert [(p.kernel.id, p.problem) for p in to_run] == [(k, problem) for k in rerun]
    assert [kernels[p.index].id for p in to_run] == rerun
    # Kept and unavailable rows are reported in ladder order before the plan counts the rest.
    assert events == [("row", k, EARLIER[k]) for k in kept] + [
        ("row", "cpu.omp_blis", "unavailable"), ("plan", len(rerun))]
    assert all(r.to_record() is earlier[r.kernel.id] for r in ladder.rows()[:len(kept)])

    events.clear()
    for pair in reversed(to_run):  # rows may finish in any order ...
        ladder.start(pair.index)
        ladder.finish(pair.index, SweepRow(pair.kernel, pair.problem, "ok"))
    assert events == [e for pair in reversed(to_run) for e in (
        ("start", pair.kernel.id, problem), ("row", pair.kernel.id, "ok"))]
    # ... and come back in ladder order.
    assert [r.kernel.id for r in ladder.rows()] == [k.id for k in kernels]


def test_row_key_ignores_field_order() -> None:
    assert row_key("k", {"m": 1, "n": 2}) == row_key("k", {"n": 2, "m": 1})


def test_a_problem_too_big_for_host_memory_is_an_error_row(monkeypatch) -> None:
    monkeypatch.setattr(workers, "available_host_memory", lambda: 4 * 2**30)
    rows = sweep(RunContext(_kernels("cpu.blas", "cpu.seq_naive"), [Problem(20000, 20000, 20000)],
                            **QUICK), lanes=HERE)
    assert [r.status for r in rows] == ["error", "error"]
    assert "GiB of host memory" in rows[0].reason and "4.0 GiB is available" in rows[0].reason


def test_resume_keeps_crashed_rows_unless_asked_to_retry_them() -> None:
    crashed = {"kernel": "cpu.seq_naive", "backend": "cpu", "status": "crashed",
               "reason": "its worker process died: Fatal Python error: Segmentation fault",
               "problem": Problem(4, 4, 4).to_dict()}
    rows = sweep(RunContext(_kernels("cpu.seq_naive"), [Problem(4, 4, 4)], **QUICK),
                 resume=[crashed])
    assert rows[0].status == "crashed" and rows[0].to_record() is crashed  # not run again
    rows = sweep(RunContext(_kernels("cpu.seq_naive"), [Problem(4, 4, 4)], retry_crashed=True,
                            **QUICK), resume=[crashed])
    assert rows[0].status == "ok"
