"""The worker of one side of ``mmsuite continuous``: it identifies the code it opens with the
readers the driver sends, and samples the kernel on request."""

from __future__ import annotations

import runpy
from dataclasses import asdict
from pathlib import Path

from mmsuite import catalogue, continuous_worker, identity, load
from mmsuite.backend_table import BACKENDS
from mmsuite.problem import Problem


def worker_with(sampler=None, damage: str = "") -> continuous_worker._Worker:
    """A worker as the driver starts it (its identity and load helpers given by path),
    sampling ``sampler`` where given."""
    worker = continuous_worker._Worker(runpy.run_path(identity.__file__),
                                       runpy.run_path(load.__file__), damage)
    worker.sampler = sampler
    return worker


class FakeSampler:
    """What a turn needs of a sampler besides its samples."""

    def close(self) -> None:
        pass


def test_an_open_row_is_identified_by_the_drivers_readers() -> None:
    worker = worker_with()
    kernel = catalogue.get("cpu.seq_naive")
    try:
        answer = worker.open({"kernel": kernel.id, "problem": Problem(35, 79, 19).to_dict(),
                              "options": {}, "code": asdict(BACKENDS[kernel.backend].code)})
        assert answer["status"] == "ok", answer
        assert answer["code"] == identity.code_identity(BACKENDS[kernel.backend].code,
                                                        kernel.source, kernel.reference)
        assert 0.0 < answer["launch_s"] < 60.0  # the checked launch, for the budget
        assert len(worker.turn({"seconds": 0.0})["samples"]) >= 1
    finally:
        worker.close()


def test_a_turn_counts_its_first_sample_in_its_time() -> None:
    """A kernel slower than the turn takes one sample, not two: rounds of slow rows
    would otherwise cost twice what they must."""
    import time

    class SlowSampler(FakeSampler):
        def kernel_ms(self) -> float:
            time.sleep(0.03)
            return 30.0

    worker = worker_with(SlowSampler())
    assert worker.turn({"seconds": 0.01})["samples"] == [30.0]
    assert len(worker.turn({"seconds": 0.1})["samples"]) >= 3


def test_each_sample_says_how_much_of_its_wall_time_the_worker_ran() -> None:
    """A kernel that computes runs (near) all of its sample; one that waits, none of it."""
    import time

    class Sampler(FakeSampler):
        def __init__(self, busy: bool) -> None:
            self.busy = busy

        def kernel_ms(self) -> float:
            until = time.perf_counter() + 0.02
            while time.perf_counter() < until:
                if not self.busy:
                    time.sleep(until - time.perf_counter())
            return 20.0

    worker = worker_with()
    shares = {}
    for busy in (True, False):
        worker.sampler = Sampler(busy)  # type: ignore[assignment]
        answer = worker.turn({"seconds": 0.05})
        assert len(answer["on_cpu"]) == len(answer["samples"])
        shares[busy] = max(answer["on_cpu"])
    # a neighbour may take most of the busy one's time, but not all of it
    assert shares[False] < 0.1 and 2 * shares[False] < shares[True] <= 1.1


def test_a_turn_in_a_shared_window_keeps_the_samples_that_end_within_it(monkeypatch) -> None:
    """Both sides at once: a sample that runs past the window's end may have run alone
    (the other side stopped), so it is left out; one is kept where none ends in time."""
    clock = [100.0]

    class StepSampler(FakeSampler):  # each sample takes 1 s of a fake clock
        def kernel_ms(self) -> float:
            clock[0] += 1.0
            return 1000.0

    worker = worker_with(StepSampler())
    monkeypatch.setattr(continuous_worker.time, "monotonic", lambda: clock[0])
    # from 100 until 103.5: samples end at 101, 102, 103 (kept) and 104 (left out)
    answer = worker.turn({"seconds": 3.5, "window": [100.0, 103.5]})
    assert answer["samples"] == [1000.0] * 3 and clock[0] == 104.0
    answer = worker.turn({"seconds": 0.5, "window": [104.0, 104.5]})
    assert answer["samples"] == [1000.0]  # the first, though it ends at 105


def test_a_worker_whose_build_is_not_what_it_imports_refuses_every_open(tmp_path) -> None:
    """A build whose package went missing would measure the driver's own mmsuite under the
    revision's name: the worker sees where mmsuite came from and refuses."""
    import mmsuite

    own_site = str(Path(mmsuite.__file__).resolve().parent.parent)
    assert continuous_worker.foreign_import(own_site) == ""
    reason = continuous_worker.foreign_import(str(tmp_path / "site"))
    assert reason.startswith("the worker imports mmsuite from ") and str(tmp_path) in reason
    worker = worker_with(damage=reason)
    answer = worker.open({"kernel": "cpu.seq_naive", "problem": Problem(8, 8, 8).to_dict(),
                          "options": {}, "code": {}})
    assert answer == {"status": "damaged", "reason": reason}
    assert worker.sampler is None


def test_a_gpu_turn_reports_nvml_at_both_ends() -> None:
    """A session with an NVML reader (a CUDA row) is read before and after each turn, so
    that the driver sees whether the GPU was throttled while it sampled."""
    reads = iter([{"throttle_reasons": []}, {"throttle_reasons": ["sw_power_cap"]}])

    class GpuSampler(FakeSampler):
        session = type("Session", (), {"device_state": staticmethod(lambda: next(reads))})()

        def kernel_ms(self) -> float:
            return 1.0

    worker = worker_with(GpuSampler())
    answer = worker.turn({"seconds": 0.0})
    assert answer["gpu"] == {"before": {"throttle_reasons": []},
                             "after": {"throttle_reasons": ["sw_power_cap"]}}
