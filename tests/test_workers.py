"""Worker processes: a job that aborts, hangs or raises costs one row, and the sweep goes on.

The machinery is the one GPU kernels use; here it runs CPU kernels in the
workers (``isolated=("cpu",)``) with planted jobs, so it is tested without a GPU.
"""

from __future__ import annotations

import functools
import os
import time

import pytest

from mmsuite import Problem, catalogue, workers
from mmsuite.backends import RunOptions
from mmsuite.sweep import sweep

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
    return workers.measure_job(kernel_id, problem, options, run_kwargs)


SMALL = Problem(9, 7, 5)


def _isolated_sweep(plan: dict, problems=(SMALL,), **kwargs):
    return sweep([catalogue.get(k) for k in LADDER], list(problems), options=RunOptions(),
                 isolated=("cpu",), job=functools.partial(planted_job, plan), **QUICK, **kwargs)


def test_a_worker_that_aborts_fails_one_row_and_is_replaced() -> None:
    rows = _isolated_sweep({"cpu.seq_naive": "abort"})
    assert [r.status for r in rows] == ["ok", "error", "ok", "ok"]
    assert rows[1].reason == "its worker process died: Fatal Python error: Aborted"


def test_a_worker_that_exits_fails_one_row() -> None:
    rows = _isolated_sweep({"cpu.seq_ikj": "exit"})
    assert [r.status for r in rows] == ["ok", "ok", "error", "ok"]
    assert rows[2].reason == "its worker process died"


def test_a_job_past_its_timeout_is_killed_and_the_sweep_goes_on() -> None:
    rows = _isolated_sweep({"cpu.blas": "hang"}, timeout=5)
    assert [r.status for r in rows] == ["error", "ok", "ok", "ok"]
    assert rows[0].reason == "timed out after 5 s; its worker was killed"


def test_rows_record_their_device_and_keep_ladder_order() -> None:
    problems = [Problem(9, 7, 5), Problem(3, 4, 5, batch=2)]
    rows = _isolated_sweep({}, problems=problems, devices=[0, 1])
    assert [(r.kernel.id, r.problem) for r in rows] == [(k, p) for p in problems for k in LADDER]
    assert all(r.status == "ok" for r in rows)
    assert {r.to_record()["device"] for r in rows} <= {0, 1}


def test_a_worker_sees_only_its_gpu() -> None:
    assert workers.visible_device(1, None) == "1"
    assert workers.visible_device(1, "2,3") == "3"  # an index into the parent's own list


def test_default_timeout_grows_with_the_work() -> None:
    small, big = Problem(64, 64, 64), Problem(8192, 8192, 8192)
    assert workers.default_timeout(small) == pytest.approx(workers.TIMEOUT_FLOOR_S, rel=1e-3)
    assert workers.default_timeout(big) > workers.TIMEOUT_FLOOR_S + 1000


def test_available_host_memory_is_read_here() -> None:
    available = workers.available_host_memory()
    assert available is not None and available > 2**20


def test_check_host_memory_refuses_what_does_not_fit(monkeypatch) -> None:
    monkeypatch.setattr(workers, "available_host_memory", lambda: 4 * 2**30)
    workers.check_host_memory(Problem(512, 512, 512))
    with pytest.raises(workers.HostMemoryError, match=r"20000x20000x20000 needs about \d+"):
        workers.check_host_memory(Problem(20000, 20000, 20000))
