"""The sweep runner turns every outcome into a row and never stops early."""

from __future__ import annotations

from mmsuite import Problem, catalogue
from mmsuite.backends import RunOptions
from mmsuite.backends.cpu import CpuBackend
from mmsuite.sweep import sweep


def test_rows_for_every_kernel_and_problem_in_order() -> None:
    kernels = [catalogue.get("cpu.blas"), catalogue.get("cpu.seq_naive")]
    problems = [Problem(5, 6, 7), Problem(3, 3, 3, batch=2)]
    seen = []
    rows = sweep(kernels, problems, repeats=1, warmup=0, options=RunOptions(),
                 on_row=seen.append)
    assert [(r.kernel.id, r.problem) for r in rows] == [
        (k.id, p) for p in problems for k in kernels]
    assert seen == rows and all(r.status == "ok" for r in rows)


def test_a_raising_kernel_becomes_an_error_row(monkeypatch) -> None:
    def explode(self, kernel, call, repeats, warmup):
        raise RuntimeError("launch failed: illegal address")

    monkeypatch.setattr(CpuBackend, "execute", explode)
    rows = sweep([catalogue.get("cpu.seq_naive"), catalogue.get("cpu.blas")], [Problem(4, 4, 4)],
                 repeats=1, warmup=0, options=RunOptions())
    assert [r.status for r in rows] == ["error", "error"]
    assert "illegal address" in rows[0].reason


def test_wrong_output_becomes_a_failed_row(monkeypatch) -> None:
    original = CpuBackend.execute

    def corrupt(self, kernel, call, repeats, warmup):
        execution = original(self, kernel, call, repeats, warmup)
        execution.output[0] = 1e3
        return execution

    monkeypatch.setattr(CpuBackend, "execute", corrupt)
    rows = sweep([catalogue.get("cpu.seq_naive")], [Problem(8, 8, 8)], repeats=1, warmup=0,
                 options=RunOptions())
    assert rows[0].status == "failed" and "exceeds tolerance" in rows[0].reason
