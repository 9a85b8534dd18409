"""`mmsuite continuous BASE HEAD`: verdicts from paired rounds, the rounds' schedule and
stopping rule, code identity, and bad input. The statistics have their own tests
(tests/test_stats.py); the false-alarm and detection rates under load are measured by
scripts/gate_trials.py, not here."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from mmsuite import builds, catalogue, continuous, results
from mmsuite.cli import main
from mmsuite.continuous import ContinuousRow, ContinuousSide, Settings, WorkerLost, decide
from mmsuite.problem import Problem
from mmsuite.stats import paired_ratio

REPO = Path(__file__).resolve().parent.parent
KERNEL = catalogue.get("cpu.seq_ikj")
PROBLEM = Problem(64, 64, 64)


DEFAULTS = Settings()


def judged(base_ms: list[float], head_ms: list[float], settings: Settings = DEFAULTS,
           code: tuple[str, str] = ("a", "b")) -> ContinuousRow:
    pair = ContinuousRow(KERNEL, PROBLEM,
                         ContinuousSide("ok", rounds=base_ms, code={"hash": code[0]}),
                         ContinuousSide("ok", rounds=head_ms, code={"hash": code[1]}),
                         worker_pair_starts=halves(len(base_ms), settings.min_worker_pairs))
    pair.estimate = paired_ratio(base_ms, head_ms, settings.confidence)
    pair.verdict, pair.reason = decide(pair, settings)
    return pair


def halves(n: int, pairs: int) -> list[int]:
    """Where each of ``pairs`` worker pairs began, sharing ``n`` rounds equally."""
    return [n * i // pairs for i in range(pairs)]


def rounds(ms: float, n: int = 20, noise: float = 0.01, seed: int = 0) -> list[float]:
    return list(ms * np.random.default_rng(seed).lognormal(0.0, noise, n))


# ------------------------------------------------------------------ verdicts
def test_slower_only_when_the_whole_interval_is_beyond_the_threshold() -> None:
    pair = judged(rounds(1.0, seed=1), rounds(1.10, seed=2))
    assert pair.verdict == "slower" and pair.estimate.low > 1.05


def test_a_slowdown_below_the_threshold_is_same_not_slower() -> None:
    pair = judged(rounds(1.0, seed=1), rounds(1.02, seed=2))
    assert pair.verdict == "same" and pair.reason.startswith("whole interval within")


def test_faster() -> None:
    assert judged(rounds(1.0, seed=1), rounds(0.8, seed=2)).verdict == "faster"


def test_an_interval_across_the_threshold_is_unsure_and_says_what_would_settle_it() -> None:
    pair = judged(rounds(1.0, noise=0.2, seed=1), rounds(1.06, noise=0.2, seed=2))
    assert pair.verdict == "unsure" and "straddles" in pair.reason
    assert "--max-time" in pair.reason


def test_too_few_rounds_are_unsure() -> None:
    pair = judged([1.0] * 4, [1.5] * 4)
    assert pair.verdict == "unsure" and "too few" in pair.reason


def test_identical_code_is_same_whatever_the_times() -> None:
    pair = judged(rounds(1.0, seed=1), rounds(1.5, seed=2), code=("x", "x"))
    assert (pair.verdict, pair.reason) == ("same", "identical code")
    judged_anyway = judged(rounds(1.0, seed=1), rounds(1.5, seed=2), code=("x", "x"),
                           settings=Settings(judge_identical=True))
    assert judged_anyway.verdict == "slower"


def test_a_kernel_that_breaks_in_head_is_broken_and_one_missing_is_unsure() -> None:
    broken = ContinuousRow(KERNEL, PROBLEM, ContinuousSide("ok", rounds=[1.0]),
                           ContinuousSide("failed", reason="err 0.5"))
    assert decide(broken, Settings())[0] == "broken"
    new = ContinuousRow(KERNEL, PROBLEM, ContinuousSide("missing"),
                        ContinuousSide("ok", rounds=[1.0]))
    assert decide(new, Settings()) == ("unsure", "not in BASE: nothing to compare")


def test_exit_status_fails_on_slower_and_broken_and_with_strict_on_unsure() -> None:
    slower = ContinuousRow(KERNEL, PROBLEM, verdict="slower")
    unsure = ContinuousRow(KERNEL, PROBLEM)
    assert continuous.exit_status([slower], strict=False) == 1
    assert continuous.exit_status([unsure], strict=False) == 0
    assert continuous.exit_status([unsure], strict=True) == 1


# ----------------------------------------------------- the rounds, with fakes
class FakeWorker:
    """A side whose kernel takes ``ms`` per sample, scaled by a drift both sides share."""

    log: list[str] = []
    messages: list[str] = []  # "send OP" and "receive OP", in the order they happened
    sent: list[dict] = []  # every message sent, whole
    drift = [1.0]

    def __init__(self, build, log_path) -> None:
        self.name, self.ms = build.revision, build.ms

    def request(self, message: dict, timeout: float) -> dict:
        if message["op"] == "open":
            return {"status": "ok", "code": {"hash": self.name}, "max_rel_err": 1e-7}
        if message["op"] == "turn":
            FakeWorker.log.append(self.name)
            FakeWorker.drift[0] *= 1.01  # the machine slows down steadily
            return {"samples": [self.ms * FakeWorker.drift[0]], "host_load": {}}
        return {"status": "closed"}

    def send(self, message: dict) -> None:
        FakeWorker.messages.append(f"send {message['op']}")
        FakeWorker.sent.append(message)
        self.last = message

    def pin(self, cpus: set[int]) -> None:
        FakeWorker.log.append(f"pin {self.name} {sorted(cpus)}")

    def receive(self, timeout: float) -> dict:
        FakeWorker.messages.append(f"receive {self.last['op']}")
        return self.request(self.last, timeout)

    def close(self) -> None:
        pass


class FakeBuild:
    def __init__(self, revision: str, ms: float) -> None:
        self.revision, self.ms = revision, ms


@pytest.fixture
def fake_workers(monkeypatch: pytest.MonkeyPatch) -> type[FakeWorker]:
    FakeWorker.log, FakeWorker.messages, FakeWorker.sent, FakeWorker.drift = [], [], [], [1.0]
    monkeypatch.setattr(continuous, "SideWorker", FakeWorker)
    quiet(monkeypatch)
    return FakeWorker


def quiet(monkeypatch: pytest.MonkeyPatch, free: float | None = None,
          share: float = 0.0) -> None:
    """The load meter reads ``free`` cores (default: all) and others at ``share``."""
    monkeypatch.setattr(continuous.load, "free_cores",
                        lambda cores, seconds=0.25: (cores if free is None else free, share))


def turns_take(monkeypatch: pytest.MonkeyPatch, seconds: float) -> list[float]:
    """The gate's clock, advanced by ``seconds`` with every turn a fake worker takes."""
    clock = [0.0]
    monkeypatch.setattr(continuous.time, "monotonic", lambda: clock[0])
    answer = FakeWorker.request

    def timed(self, message, timeout):
        if message["op"] == "turn":
            clock[0] += seconds
        return answer(self, message, timeout)

    monkeypatch.setattr(FakeWorker, "request", timed)
    return clock


def gate(base_ms: float, head_ms: float, tmp_path: Path, **settings) -> continuous.Gate:
    return continuous.Gate(FakeBuild("base", base_ms), FakeBuild("head", head_ms), {},
                           Settings(**settings), tmp_path)


def test_rounds_alternate_so_that_drift_hits_both_sides(fake_workers, tmp_path) -> None:
    """A machine that slows down 1% per turn would make the later side look slower in
    sequential runs; paired rounds in random order see equal sides."""
    pair = gate(1.0, 1.0, tmp_path, max_seconds=60, max_rounds=40).measure(
        ContinuousRow(KERNEL, PROBLEM))
    assert pair.verdict == "same" and 0.98 < pair.estimate.ratio < 1.02
    firsts = fake_workers.log[::2]
    assert 0 < firsts.count("base") < len(firsts)  # both sides went first sometimes


def test_abba_order(fake_workers, tmp_path) -> None:
    gate(1.0, 1.0, tmp_path, order="abba", max_seconds=60, max_rounds=4).measure(
        ContinuousRow(KERNEL, PROBLEM))
    assert fake_workers.log[:8] == ["base", "head", "head", "base"] * 2


def test_a_row_is_looked_at_a_few_times_each_at_a_share_of_the_error() -> None:
    """Half the error goes to the early looks, a ninth of it each; half to the last."""
    settings = Settings(confidence=0.99)
    looks = settings.looks()
    assert len(looks) == continuous.MAX_LOOKS - 1  # the last look is when the time is up
    assert looks[0] == settings.min_rounds == 12 and looks == sorted(set(looks))
    assert settings.look_confidence == pytest.approx(1 - 0.01 / 2 / 9)
    assert settings.final_confidence == pytest.approx(0.995)
    spent = (1 - settings.final_confidence) + len(looks) * (1 - settings.look_confidence)
    assert spent == pytest.approx(1 - settings.confidence)


def test_the_last_look_may_decide_what_the_early_ones_could_not(tmp_path) -> None:
    rng = np.random.default_rng(2)  # 20 rounds, HEAD 12% slower, 6% noise a side
    base, head = list(rng.lognormal(0, 0.06, 20)), list(1.12 * rng.lognormal(0, 0.06, 20))
    pair = ContinuousRow(KERNEL, PROBLEM, ContinuousSide("ok", rounds=base, code={"hash": "a"}),
                         ContinuousSide("ok", rounds=head, code={"hash": "b"}),
                         worker_pair_starts=[0, 10])
    judge = gate(1.0, 1.0, tmp_path)
    judge._judge(pair)
    assert pair.verdict == "unsure" and pair.estimate.low < 1.05
    judge._judge(pair, final=True)
    assert pair.verdict == "slower" and pair.estimate.low > 1.05


def test_a_decided_row_stops_at_the_first_look_with_two_worker_pairs(fake_workers,
                                                                      tmp_path) -> None:
    pair = gate(1.0, 1.5, tmp_path, max_seconds=60).measure(ContinuousRow(KERNEL, PROBLEM))
    assert pair.verdict == "slower" and pair.worker_pairs == 2
    assert len(pair.base.rounds) == Settings().looks()[1]


def test_undecided_looks_open_fresh_workers_until_enough_pairs(fake_workers, tmp_path,
                                                               monkeypatch) -> None:
    """A worker process may carry its own bias, so the rounds of one pair of processes
    never decide a row alone: an undecided look opens a fresh pair until there are
    ``min_worker_pairs`` of them; later looks keep the pair (each open costs seconds)."""
    started: list[str] = []
    make = FakeWorker.__init__

    def counted(self, build, log_path) -> None:
        started.append(build.revision)
        make(self, build, log_path)

    answer = FakeWorker.request
    swing = iter([0.8, 1.25] * 100)

    def noisy(self, message, timeout):  # HEAD swings ±25%: the row stays unsure
        reply = answer(self, message, timeout)
        if self.name == "head" and message["op"] == "turn":
            reply["samples"] = [ms * next(swing) for ms in reply["samples"]]
        return reply

    monkeypatch.setattr(FakeWorker, "__init__", counted)
    monkeypatch.setattr(FakeWorker, "request", noisy)
    for wanted in (2, 3):
        started.clear()
        pair = gate(1.0, 1.0, tmp_path, max_seconds=60, max_rounds=30,
                    min_worker_pairs=wanted).measure(ContinuousRow(KERNEL, PROBLEM))
        assert pair.verdict == "unsure" and len(pair.base.rounds) == 30
        assert pair.worker_pairs == wanted
        assert sorted(started) == ["base"] * wanted + ["head"] * wanted


def test_a_row_too_slow_for_its_budget_stops_when_opened_and_says_what_would_do(
        fake_workers, tmp_path, monkeypatch) -> None:
    """A kernel whose checked launch took 2 s cannot give the 18 rounds of 2 launches a
    verdict needs in 6 s: no round is taken, and the reason names the budget that would
    do (half the launch is assumed, since both sides opened at once)."""
    answer = FakeWorker.request

    def slow_open(self, message, timeout):
        reply = answer(self, message, timeout)
        if message["op"] == "open":
            reply["launch_s"] = 2.0
        return reply

    monkeypatch.setattr(FakeWorker, "request", slow_open)
    settings = Settings(max_seconds=6)
    pair = gate(1.0, 1.5, tmp_path, max_seconds=6).measure(ContinuousRow(KERNEL, PROBLEM))
    assert fake_workers.log == [] and pair.verdict == "unsure"
    needed = settings.rounds_to_verdict() * 2 * 1.0
    assert settings.rounds_to_verdict() == settings.looks()[1] == 18
    assert pair.needs_seconds == pytest.approx(needed)
    assert f"raise --max-time to {needed:.0f}" in pair.reason
    record = continuous.side_record(pair, "head", builds.Build("HEAD", "f" * 40, tmp_path))
    assert record["status"] == "unavailable" and "kernel_ms" not in record
    assert record["reason"] == f"verified, not timed: {pair.reason}"
    assert results.check_record(record) == ""
    enough = gate(1.0, 1.5, tmp_path, max_seconds=needed + 10).measure(
        ContinuousRow(KERNEL, PROBLEM))
    assert enough.verdict == "slower"  # the fakes take no time: the budget suffices


def test_a_row_whose_rounds_show_it_too_slow_stops_early(fake_workers, tmp_path,
                                                         monkeypatch) -> None:
    """Where the open gives no launch time (an older revision), the first rounds do, once
    they show a verdict would take more than twice the budget."""
    turns_take(monkeypatch, 1.0)  # 36 s for 18 rounds
    pair = gate(1.0, 1.5, tmp_path, max_seconds=6).measure(ContinuousRow(KERNEL, PROBLEM))
    assert len(pair.base.rounds) == continuous.HOPELESS_AFTER_ROUNDS
    assert pair.verdict == "unsure"
    assert pair.needs_seconds == pytest.approx(36.0)
    assert "raise --max-time to 36" in pair.reason
    near = gate(1.0, 1.5, tmp_path, max_seconds=20).measure(ContinuousRow(KERNEL, PROBLEM))
    assert len(near.base.rounds) > 3 and near.needs_seconds is None  # 36 s is within 2x


def test_rows_of_identical_code_are_settled_first_and_the_changed_rows_share_the_pool(
        fake_workers, tmp_path, monkeypatch) -> None:
    """The selection's time is fixed up front (every row's own, pooled); rows of identical
    code take their short check first, and each changed row then gets an equal share of
    what is left. Each turn takes 0.1 s and HEAD's samples scatter by 2x, so a changed row
    stays unsure and spends its whole share."""
    clock = [0.0]
    monkeypatch.setattr(continuous.time, "monotonic", lambda: clock[0])
    answer = FakeWorker.request
    swing = iter(np.random.default_rng(1).lognormal(0.0, 0.7, 5000))
    changed = {"cpu.seq_ikj", "cpu.seq_tiled"}
    opened: list[str] = []

    def timed(self, message, timeout):
        reply = answer(self, message, timeout)
        if message["op"] == "open" and self.name == "base":
            opened.append(message["kernel"])
        if message["op"] == "open":
            same = message["kernel"] not in changed
            reply["code"] = {"hash": "same" if same else self.name}
        if message["op"] == "turn":
            clock[0] += 0.1
            if self.name == "head":
                reply["samples"] = [ms * next(swing) for ms in reply["samples"]]
        return reply

    monkeypatch.setattr(FakeWorker, "request", timed)
    ids = ["cpu.seq_ikj", "cpu.omp_naive", "cpu.seq_tiled", "cpu.omp_tiled"]
    todo = [ContinuousRow(catalogue.get(k), PROBLEM) for k in ids]
    judge = gate(1.0, 1.0, tmp_path, max_seconds=6, max_rounds=400)
    done = list(judge.measure_all(todo))
    assert [p.kernel.id for p in done] == ["cpu.omp_naive", "cpu.omp_tiled", "cpu.seq_ikj",
                                           "cpu.seq_tiled"]
    # Every row opened once first; the changed ones again (then on a fresh pair of workers)
    assert [k for i, k in enumerate(opened) if i == 0 or opened[i - 1] != k] == \
        [*ids, "cpu.seq_ikj", "cpu.seq_tiled"]
    settled, first, second = done[:2], done[2], done[3]
    for pair in settled:  # their first look: 12 rounds of 0.2 s
        assert pair.reason == "identical code" and pair.settled_first
        assert pair.rounds_seconds == pytest.approx(2.4)
    left = 4 * 6 - 2 * 2.4
    assert first.budget == pytest.approx(left / 2)
    assert first.verdict == "unsure" and first.rounds_seconds >= first.budget
    assert second.budget == pytest.approx(left - first.rounds_seconds)
    assert not first.settled_first and first.worker_pairs == 2
    assert judge.current is None
    measured = first.verdict_row().measured
    assert measured["budget"] == pytest.approx(first.budget, abs=0.01)
    assert measured["rounds"] == len(first.base.rounds)
    assert measured["seconds"] >= measured["rounds_seconds"] > 0


def test_a_changed_row_decided_early_leaves_its_time_to_the_next(fake_workers, tmp_path,
                                                                 monkeypatch) -> None:
    turns_take(monkeypatch, 0.1)
    todo = [ContinuousRow(KERNEL, PROBLEM), ContinuousRow(KERNEL, Problem(32, 32, 32))]
    first, second = gate(1.0, 1.5, tmp_path, max_seconds=6).measure_all(todo)
    assert first.verdict == "slower" and first.budget == pytest.approx(6)
    assert second.budget == pytest.approx(12 - first.rounds_seconds)
    assert second.budget > 6


def test_on_a_busy_machine_c_rows_run_on_the_free_cores_threads_in_turns(
        fake_workers, tmp_path, monkeypatch) -> None:
    """One of two cores free: each side opens the kernel with 1 thread and the sides take
    turns; the row's verdict record says what was done."""
    monkeypatch.setattr(continuous.os, "sched_getaffinity", lambda pid: {0, 1})
    quiet(monkeypatch, free=1.0, share=0.5)
    pair = gate(1.0, 1.5, tmp_path, max_seconds=60).measure(
        ContinuousRow(catalogue.get("cpu.omp_tiled"), PROBLEM))
    assert {m["options"]["threads"] for m in fake_workers.sent if m["op"] == "open"} == {1}
    turns = [c for c in fake_workers.messages if c.endswith(" turn")]
    assert turns[:4] == ["send turn", "receive turn"] * 2
    assert pair.verdict == "slower" and not pair.together
    assert pair.how() == "threads 2 → 1 (1.0 of 2 cores free)"
    measured = pair.verdict_row().measured
    assert measured["threads"] == 1 and measured["threads_asked"] is None
    assert measured["mode"] == "turns" and measured["free_cores"] == 1.0


def test_at_once_on_a_busy_machine_both_sides_share_each_window(fake_workers, tmp_path,
                                                                 monkeypatch) -> None:
    """``--on-busy-machine at-once``: both turns of a round are asked for before either
    answer is awaited, in one window of time (no CPU pinned)."""
    monkeypatch.setattr(continuous.os, "sched_getaffinity", lambda pid: {0, 1})
    quiet(monkeypatch, free=1.0, share=0.5)
    pair = gate(1.0, 1.5, tmp_path, max_seconds=60, busy="at-once").measure(
        ContinuousRow(catalogue.get("cpu.omp_tiled"), PROBLEM))
    assert {m["options"]["threads"] for m in fake_workers.sent if m["op"] == "open"} == {1}
    turns = [c for c in fake_workers.messages if c.endswith(" turn")]
    assert turns[:4] == ["send turn", "send turn", "receive turn", "receive turn"]
    windows = [m["window"] for m in fake_workers.sent if m["op"] == "turn"]
    assert windows[0] == windows[1] and windows[2] == windows[3] != windows[0]
    assert not any(entry.startswith("pin") for entry in fake_workers.log)
    assert pair.verdict == "slower" and pair.together
    assert pair.how() == "threads 2 → 1 (1.0 of 2 cores free), both sides at once"
    assert pair.verdict_row().measured["mode"] == "at once"


def test_on_a_quiet_machine_or_as_asked_rows_run_as_asked_in_turns(
        fake_workers, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(continuous.os, "sched_getaffinity", lambda pid: {0, 1})
    for free, busy in ((1.97, "at-once"), (1.0, "as-asked")):
        quiet(monkeypatch, free=free, share=1 - free / 2)
        fake_workers.messages.clear()
        pair = gate(1.0, 1.5, tmp_path, max_seconds=60, busy=busy).measure(
            ContinuousRow(catalogue.get("cpu.omp_tiled"), PROBLEM))
        turns = [c for c in fake_workers.messages if c.endswith(" turn")]
        assert turns[:4] == ["send turn", "receive turn"] * 2
        assert not pair.together and pair.how() == ""
        assert pair.verdict_row().measured["mode"] == "turns"


def test_rows_off_the_host_are_measured_in_turns_whatever_the_load(fake_workers, tmp_path,
                                                                   monkeypatch) -> None:
    def unread(cores, seconds=0.25):
        raise AssertionError("the load is read for C rows only")

    monkeypatch.setattr(continuous.load, "free_cores", unread)
    pair = gate(1.0, 1.0, tmp_path, max_seconds=60, max_rounds=4).measure(
        ContinuousRow(catalogue.get("cuda.01_naive"), PROBLEM))
    assert pair.measurement is None and not pair.together


def test_both_sides_open_at_once(fake_workers, tmp_path) -> None:
    """Opening (preparing and verifying against float64) is untimed and most of a row's
    fixed cost, so both sides are asked before either answer is awaited."""
    gate(1.0, 1.0, tmp_path, max_seconds=60, max_rounds=4).measure(ContinuousRow(KERNEL, PROBLEM))
    opens = [c for c in fake_workers.messages if c.endswith(" open")]
    assert opens[:4] == ["send open", "send open", "receive open", "receive open"]


def test_rows_on_one_thread_are_the_sequential_cpu_rungs_or_any_cpu_rung_on_one_thread(
) -> None:
    one_thread = continuous.runs_on_one_thread
    assert one_thread(catalogue.get("cpu.seq_ikj"), None)
    assert not one_thread(catalogue.get("cpu.omp_tiled"), None)
    assert one_thread(catalogue.get("cpu.omp_tiled"), 1)
    assert not one_thread(catalogue.get("cpu.omp_tiled"), 2)
    assert not one_thread(catalogue.get("cpu.blas"), None)
    assert not one_thread(catalogue.get("cuda.01_naive"), 1)
    # A plugin's Python callable declares no threads, but numpy's BLAS takes every CPU.
    callable_kernel = dataclasses.replace(catalogue.get("cpu.seq_ikj"), id="mine.np",
                                          function=lambda alpha, a, b, beta, c: None)
    assert not one_thread(callable_kernel, None) and one_thread(callable_kernel, 1)


def test_duet_measures_both_sides_at_once_on_cpus_drawn_per_round(fake_workers, tmp_path,
                                                                   monkeypatch) -> None:
    """In duet both turns are asked for before either answer is awaited, each side pinned
    to a CPU of its own; which side gets which CPU is drawn every round; afterwards both
    workers may run anywhere again."""
    monkeypatch.setattr(continuous, "duet_cpus", lambda: (4, 7))
    pair = gate(1.0, 1.0, tmp_path, duet=True, max_seconds=60, max_rounds=20).measure(
        ContinuousRow(KERNEL, PROBLEM))
    assert pair.duet and pair.verdict == "same"
    turns = [c for c in fake_workers.messages if c.endswith(" turn")]
    assert turns[:4] == ["send turn", "send turn", "receive turn", "receive turn"]
    pins = [entry.split(" ", 1)[1] for entry in fake_workers.log if entry.startswith("pin")]
    rounds = list(zip(pins[0:-2:2], pins[1:-2:2]))
    assert len(rounds) == len(pair.base.rounds)
    for first, second in rounds:  # one CPU each
        assert {first.split()[1], second.split()[1]} == {"[4]", "[7]"}
    base_on_4 = sum("base [4]" in (first, second) for first, second in rounds)
    assert 0 < base_on_4 < len(rounds)
    anywhere = str(sorted(os.sched_getaffinity(0)))
    assert pins[-2:] == [f"base {anywhere}", f"head {anywhere}"]


def test_a_threaded_row_is_measured_in_turns_even_in_duet(fake_workers, tmp_path,
                                                          monkeypatch) -> None:
    monkeypatch.setattr(continuous, "duet_cpus", lambda: (0, 1))
    pair = gate(1.0, 1.0, tmp_path, duet=True, max_seconds=60, max_rounds=4).measure(
        ContinuousRow(catalogue.get("cpu.omp_tiled"), PROBLEM))
    assert not pair.duet
    assert not any(entry.startswith("pin") for entry in fake_workers.log)


def test_a_duet_round_costs_one_turn_when_judging_a_row_against_its_budget(tmp_path,
                                                                            monkeypatch) -> None:
    monkeypatch.setattr(continuous, "duet_cpus", lambda: (0, 1))
    settings = Settings(max_seconds=8.0)
    launch = 1.5 * settings.max_seconds / settings.rounds_to_verdict()  # s, per side
    for duet, affordable in ((False, False), (True, True)):
        pair = ContinuousRow(KERNEL, PROBLEM,
                             ContinuousSide("ok", code={"hash": "a"}, launch_s=launch),
                             ContinuousSide("ok", code={"hash": "b"}, launch_s=launch), duet=duet,
                             budget=settings.max_seconds)
        judge = gate(1.0, 1.0, tmp_path, duet=True, max_seconds=settings.max_seconds)
        assert (judge._unaffordable(pair) is None) == affordable


def test_duet_needs_two_cpus(monkeypatch, capsys) -> None:
    monkeypatch.setattr(continuous, "duet_cpus", lambda: None)
    assert main(["continuous", "HEAD", "HEAD", "--repo", str(REPO), "--duet",
                 "--kernel", "cpu.seq_ikj"]) == 2
    assert "--duet needs two CPUs" in capsys.readouterr().err


def test_one_worker_pair_is_never_enough_for_a_verdict() -> None:
    pair = judged(rounds(1.0, seed=1), rounds(1.5, seed=2))
    pair.worker_pair_starts = [0]
    verdict, reason = decide(pair, DEFAULTS)
    assert verdict == "unsure" and "1 pair of worker processes" in reason


def test_a_slowdown_must_move_each_worker_pairs_own_rounds() -> None:
    """One pair of processes may carry a bias through all its rounds; pooled with an
    unbiased pair it can put the whole interval past the threshold. Where another pair's
    own rounds point the other way, the row is unsure, naming each pair's ratio; a
    slowdown that moves every pair's rounds, even one by less than the threshold, is
    slower."""
    base = rounds(1.0, n=40, seed=1)
    biased = rounds(0.97, n=20, seed=2) + rounds(1.30, n=20, seed=3)
    pair = judged(base, biased)
    assert pair.estimate.low > 1.05  # the pooled interval alone would call it slower
    assert pair.verdict == "unsure" and "point both ways" in pair.reason
    assert "0.97" in pair.reason and "1.30" in pair.reason
    assert judged(base, rounds(1.15, n=40, seed=4)).verdict == "slower"
    unequal = judged(base, rounds(1.03, n=20, seed=2) + rounds(1.30, n=20, seed=3))
    assert unequal.worker_pair_ratios()[0] < 1.05 and unequal.verdict == "slower"
    faster = judged(base, rounds(1.03, n=20, seed=2) + rounds(0.7, n=20, seed=3))
    assert faster.estimate.high < 1 / 1.05 and faster.verdict == "unsure"


def test_a_pair_with_too_few_rounds_has_no_say() -> None:
    base, head = rounds(1.0, n=40, seed=1), rounds(1.15, n=40, seed=4)
    few = continuous.AGREEING_PAIR_ROUNDS - 1
    pair = ContinuousRow(KERNEL, PROBLEM, ContinuousSide("ok", rounds=base, code={"hash": "a"}),
                         ContinuousSide("ok", rounds=head[:40 - few] + base[40 - few:],
                                        code={"hash": "b"}),
                         worker_pair_starts=[0, 16, 40 - few])
    assert len(pair.worker_pair_ratios()) == 2
    pair.estimate = paired_ratio(pair.base.rounds, pair.head.rounds, DEFAULTS.confidence)
    assert decide(pair, DEFAULTS)[0] == "slower"


def test_a_biased_worker_pair_cannot_call_a_row_slower(fake_workers, tmp_path,
                                                      monkeypatch) -> None:
    """HEAD's first worker runs 5% fast, the second 30% slow: once the second
    pair's rounds carry the pooled interval past +5%, the first pair still disagrees, so
    the row stays unsure to the end of its time."""
    answer = FakeWorker.request
    heads = []

    def biased(self, message, timeout):
        reply = answer(self, message, timeout)
        if message["op"] == "open" and self.name == "head":
            heads.append(self)
        if self.name == "head" and message["op"] == "turn":
            reply["samples"] = [ms * (1.3 if self is not heads[0] else 0.95)
                                for ms in reply["samples"]]
        return reply

    monkeypatch.setattr(FakeWorker, "request", biased)
    pair = gate(1.0, 1.0, tmp_path, max_seconds=60, max_rounds=80).measure(
        ContinuousRow(KERNEL, PROBLEM))
    assert pair.estimate.low > 1.05  # the pooled interval alone would call it slower
    assert pair.verdict == "unsure" and "point both ways" in pair.reason
    first, second = pair.worker_pair_ratios()
    assert first < 1.0 < 1.25 < second and len(pair.base.rounds) == 80


def test_a_sample_on_one_thread_counts_the_time_its_thread_ran() -> None:
    assert continuous.on_cpu_times([20.0, 40.0, 10.0], [1.0, 0.5, 1.3]) == [20.0, 20.0, 10.0]


def preempted(monkeypatch: pytest.MonkeyPatch, shares: dict[str, float]) -> None:
    """Each side's worker ran ``shares`` of its samples' wall time, which is stretched to
    match: the kernel itself takes its ``ms`` on the CPU."""
    answer = FakeWorker.request

    def stretched(self, message, timeout):
        reply = answer(self, message, timeout)
        if message["op"] == "turn":
            share = shares[self.name]
            reply["samples"] = [ms / share for ms in reply["samples"]]
            reply["on_cpu"] = [share] * len(reply["samples"])
        return reply

    monkeypatch.setattr(FakeWorker, "request", stretched)


def test_a_row_on_one_host_thread_is_timed_by_cpu_time_and_says_so(fake_workers, tmp_path,
                                                                 monkeypatch) -> None:
    """HEAD's worker shares its core with a neighbour and runs half the wall time: by the
    wall clock it is twice as slow, by the time its thread ran it is the same."""
    preempted(monkeypatch, {"base": 1.0, "head": 0.5})
    pair = gate(1.0, 1.0, tmp_path, max_seconds=60).measure(ContinuousRow(KERNEL, PROBLEM))
    assert pair.clock == "thread" and pair.verdict == "same"
    assert pair.head.samples[0][0] == pytest.approx(2 * pair.head.rounds[0])
    assert pair.spent()["clock"] == "thread" and pair.spent()["on_cpu"] == pytest.approx(0.75)
    assert "CPU time" in pair.how()


def test_a_threaded_row_keeps_the_wall_clock(fake_workers, tmp_path, monkeypatch) -> None:
    """On two threads a preempted thread holds the other up at every barrier: the time
    the kernel took is the wall time."""
    preempted(monkeypatch, {"base": 1.0, "head": 0.5})
    pair = gate(1.0, 1.0, tmp_path, max_seconds=60).measure(
        ContinuousRow(catalogue.get("cpu.omp_tiled"), PROBLEM))
    assert pair.clock == "wall" and pair.verdict == "slower"
    assert "CPU time" not in pair.how()


def test_a_row_never_preempted_does_not_mention_the_clock(fake_workers, tmp_path,
                                                        monkeypatch) -> None:
    preempted(monkeypatch, {"base": 1.0, "head": 1.0})
    pair = gate(1.0, 1.0, tmp_path, max_seconds=60).measure(ContinuousRow(KERNEL, PROBLEM))
    assert pair.clock == "thread" and pair.how() == ""


def test_a_worker_that_dies_makes_an_error_row(fake_workers, tmp_path, monkeypatch) -> None:
    answer = FakeWorker.request

    def dies(self, message, timeout):
        if self.name == "head" and message["op"] == "turn":
            raise WorkerLost("worker died of SIGSEGV")
        return answer(self, message, timeout)

    monkeypatch.setattr(FakeWorker, "request", dies)
    pair = gate(1.0, 1.0, tmp_path).measure(ContinuousRow(KERNEL, PROBLEM))
    assert pair.verdict == "broken" and "SIGSEGV" in pair.reason


# -------------------------------------------------------- through the CLI
def in_git_checkout() -> bool:
    return shutil.which("git") is not None and (REPO / ".git").exists()


needs_checkout = pytest.mark.skipif(not in_git_checkout(),
                                    reason="needs mmsuite's own git checkout and git")


@needs_checkout
def test_unknown_revision_is_one_line(capsys) -> None:
    assert main(["continuous", "no-such-rev", "HEAD", "--repo", str(REPO)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"mmsuite: error: BASE: unknown revision 'no-such-rev' in {REPO}"


def test_not_a_repository_is_one_line(tmp_path, capsys) -> None:
    assert main(["continuous", "a", "b", "--repo", str(tmp_path)]) == 2
    assert "is not a git repository" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_base_that_fails_to_build_is_named(tmp_path, capsys) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pyproject.toml").write_text("[project]\nname = 'broken'\nversion = 'x y'\n")

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c",
                        "user.email=t@t", *args], check=True, capture_output=True)

    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "broken")
    code = main(["continuous", "HEAD", "HEAD", "--repo", str(repo), "--cache-dir",
                 str(tmp_path / "cache"), "--kernel", "cpu.seq_ikj"])
    err = capsys.readouterr().err
    assert code == 2
    last = err.strip().splitlines()[-1]
    assert last.startswith("mmsuite: error: BASE: HEAD (") and "failed to build" in last
    assert "build.log" in last


@needs_checkout
def test_head_against_itself_end_to_end(tmp_path, capsys) -> None:
    """One real build of this checkout's HEAD, two worker processes, identical code."""
    out = tmp_path / "gate.json"
    code = main(["continuous", "HEAD", "HEAD", "--repo", str(REPO), "--cache-dir",
                 str(tmp_path / "cache"), "--kernel", "cpu.seq_ikj", "--kernel", "cpu.blas",
                 "--shape", "48x40x32", "--max-time", "1", "--json", str(out),
                 "--junit", str(tmp_path / "gate.xml")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.out.count("same (identical code)") == 2
    head, base = results.load(out), results.load(tmp_path / "gate.base.json")
    assert [r["kernel"] for r in head["results"]] == ["cpu.blas", "cpu.seq_ikj"]
    for record in head["results"] + base["results"]:
        assert record["status"] == "ok" and record["code"]["hash"]
        assert record["kernel_ms"]["samples"]  # one median per round
    assert json.loads(json.dumps(head["results"][1]["paired"]))["identical_code"] is True
    # compare reads both files, and knows the code was identical.
    verdicts = tmp_path / "compare.json"
    assert main(["compare", str(tmp_path / "gate.base.json"), str(out), "--verdict-json",
                 str(verdicts)]) == 0
    rows = json.loads(verdicts.read_text())["rows"]
    assert len(rows) == 2 and all(r["reason"].startswith("identical code") for r in rows)


@pytest.fixture
def fake_builds(monkeypatch: pytest.MonkeyPatch, fake_workers, tmp_path: Path):
    return patch_fake_builds(monkeypatch, tmp_path)


def patch_fake_builds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, float]:
    """The CLI over fake builds (BASE 1.0 ms, HEAD 1.3 ms a sample), fake workers and a
    quiet load meter."""
    speeds = {"base-rev": 1.0, "head-rev": 1.3}

    def build(repo, revision, cache, log=None):
        fake = FakeBuild(revision, speeds[revision])
        fake.root, fake.commit, fake.short = tmp_path, revision * 2, revision
        return fake

    monkeypatch.setattr(continuous, "SideWorker", FakeWorker)
    quiet(monkeypatch)
    monkeypatch.setattr(builds, "build", build)
    monkeypatch.setattr(builds, "resolve", lambda repo, revision: revision)
    monkeypatch.setattr(builds, "uncommitted_changes", lambda repo: [])
    return speeds


def test_the_gate_fails_on_a_slower_row_and_writes_its_files(fake_builds, tmp_path,
                                                             capsys) -> None:
    out = tmp_path / "gate.json"
    code = main(["continuous", "base-rev", "head-rev", "--kernel", "cpu.seq_ikj",
                 "--shape", "64", "--json", str(out), "--verdict-json",
                 str(tmp_path / "v.json")])
    captured = capsys.readouterr()
    assert code == 1 and "slower" in captured.out
    assert "geometric mean NEW/BASE over 1 kernel x problem: 1.3" in captured.out
    (row,) = json.loads((tmp_path / "v.json").read_text())["rows"]
    assert row["verdict"] == "slower" and row["ratio"] == pytest.approx(1.3, rel=0.02)
    base = results.load(tmp_path / "gate.base.json")["results"][0]
    # 1% drift a turn over the 36 turns of the first decisive look: the median near 1.2
    assert base["kernel_ms"]["median"] == pytest.approx(1.2, rel=0.1)


def test_the_gate_says_how_a_busy_machine_was_measured_and_where_the_time_went(
        fake_builds, monkeypatch, tmp_path, capsys) -> None:
    """The table's last lines and the verdict file say what was done: the threads lowered
    to the free cores, the rows of identical code settled first, each row's rounds and
    seconds."""
    monkeypatch.setattr(continuous.os, "sched_getaffinity", lambda pid: {0, 1})
    quiet(monkeypatch, free=1.0, share=0.5)
    answer = FakeWorker.request

    def packed_unchanged(self, message, timeout):
        reply = answer(self, message, timeout)
        if message["op"] == "open" and message["kernel"] == "cpu.omp_packed":
            reply["code"] = {"hash": "same"}
        return reply

    monkeypatch.setattr(FakeWorker, "request", packed_unchanged)
    code = main(["continuous", "base-rev", "head-rev", "--kernel", "cpu.omp_tiled",
                 "--kernel", "cpu.omp_packed", "--shape", "64", "--verdict-json",
                 str(tmp_path / "v.json")])
    captured = capsys.readouterr()
    assert code == 1
    out = " ".join(captured.out.split())
    assert ("measured with threads 2 → 1 (1.0 of 2 cores free): cpu.omp_tiled @ 64x64x64, "
            "cpu.omp_packed @ 64x64x64") in out  # the selection's order
    assert "time: 1 rows settled first" in out and "cpu.omp_tiled @ 64x64x64 18 rounds" in out
    assert "threads 2 → 1 (1.0 of 2 cores free)" in captured.err  # the progress lines
    rows = {r["kernel"]: r for r in json.loads((tmp_path / "v.json").read_text())["rows"]}
    assert rows["cpu.omp_packed"]["measured"]["settled_first"]
    tiled = rows["cpu.omp_tiled"]["measured"]
    assert tiled["threads"] == 1 and tiled["mode"] == "turns" and tiled["rounds"] == 18
    assert not tiled["settled_first"] and tiled["budget"] > Settings().max_seconds


def test_ctrl_c_keeps_the_finished_rounds(fake_builds, monkeypatch, tmp_path, capsys) -> None:
    turns = [0]
    answer = FakeWorker.request

    def interrupted_later(self, message, timeout):
        if message["op"] == "turn":
            turns[0] += 1
            if turns[0] == 2 * Settings().looks()[1] + 10:  # in the second row
                raise KeyboardInterrupt
        return answer(self, message, timeout)

    monkeypatch.setattr(FakeWorker, "request", interrupted_later)
    out = tmp_path / "gate.json"
    code = main(["continuous", "base-rev", "head-rev", "--kernel", "cpu.seq_ikj",
                 "--kernel", "cpu.seq_tiled", "--kernel", "cpu.omp_naive", "--shape", "64",
                 "--json", str(out), "--max-time", "60"])
    captured = capsys.readouterr()
    assert code == 130 and "interrupted after 2 of 3 rows" in captured.err
    rows = results.load(out)["results"]
    assert [r["kernel"] for r in rows] == ["cpu.seq_ikj", "cpu.seq_tiled"]
    # The row cut short is shown with its rounds, never judged from them.
    assert rows[1]["paired"]["verdict"] == "unsure"
    assert rows[1]["paired"]["reason"].startswith("interrupted after ")


def test_the_table_fits_80_columns_a_table_per_problem_verdicts_whole() -> None:
    import dataclasses
    import io

    from rich.console import Console

    from mmsuite.commands.continuous import render

    identical = judged(rounds(1.0), rounds(1.0, seed=1), code=("a", "a"))
    slower = dataclasses.replace(judged(rounds(1.0), rounds(1.5, seed=2)),
                                 kernel=catalogue.get("cpu.omp_packed"))
    other = dataclasses.replace(identical, problem=Problem(1024, 1024, 1024))
    out = io.StringIO()
    render([identical, slower, other], DEFAULTS, Console(file=out, width=80))
    lines = out.getvalue().splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    assert [line.strip() for line in lines if "x" in line and " " not in line.strip()] == [
        PROBLEM.shape_label, "1024x1024x1024"]  # one table per problem, titled by it
    assert sum("same (identical code)" in line for line in lines) == 2
    assert any(line.startswith("cpu.omp_packed") and "slower [1]" in line for line in lines)


def test_a_side_whose_worker_imports_another_mmsuite_stops_the_gate_in_one_line(
        fake_builds, monkeypatch, tmp_path, capsys) -> None:
    answer = FakeWorker.request

    def foreign_head(self, message, timeout):
        if message["op"] == "open" and self.name == "head-rev":
            return {"status": "damaged", "reason": "the worker imports mmsuite from /x, "
                    "not from the build's /cache/h/site"}
        return answer(self, message, timeout)

    monkeypatch.setattr(FakeWorker, "request", foreign_head)
    code = main(["continuous", "base-rev", "head-rev", "--kernel", "cpu.seq_ikj",
                 "--shape", "64", "--json", str(tmp_path / "gate.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1] == ("mmsuite: error: the worker imports mmsuite from /x, not from the "
                       "build's /cache/h/site: delete the build's folder, or give --cache-dir")
    assert not (tmp_path / "gate.json").exists()  # nothing measured is saved under its name


def test_a_kernel_that_breaks_in_head_keeps_bases_timed_row_so_compare_agrees(
        fake_builds, monkeypatch, tmp_path, capsys) -> None:
    """BASE's file holds the row as BASE ran it (ok, timed), not an error it never had:
    ``compare`` of the two files must find the break the gate found."""
    answer = FakeWorker.request

    def head_crashes(self, message, timeout):
        if message["op"] == "open" and self.name == "head-rev" and \
                message["kernel"] == "cpu.seq_ikj":
            return {"status": "error", "reason": "worker died of SIGSEGV"}
        return answer(self, message, timeout)

    monkeypatch.setattr(FakeWorker, "request", head_crashes)
    out, verdicts = tmp_path / "gate.json", tmp_path / "compare.json"
    code = main(["continuous", "base-rev", "head-rev", "--kernel", "cpu.seq_ikj",
                 "--kernel", "cpu.seq_tiled", "--shape", "64", "--json", str(out)])
    assert code == 1 and "broken" in capsys.readouterr().out
    base = results.load(tmp_path / "gate.base.json")["results"][0]
    head = results.load(out)["results"][0]
    assert base["kernel"] == head["kernel"] == "cpu.seq_ikj"
    assert base["status"] == "ok" and base["kernel_ms"]["samples"]
    assert head["status"] == "error" and "SIGSEGV" in head["reason"]
    assert main(["compare", str(tmp_path / "gate.base.json"), str(out), "--verdict-json",
                 str(verdicts)]) == 1
    rows = {row["kernel"]: row for row in json.loads(verdicts.read_text())["rows"]}
    assert rows["cpu.seq_ikj"]["verdict"] == "broken"


def test_a_problem_beyond_host_memory_is_refused_before_anything_is_built(
        fake_builds, monkeypatch, capsys) -> None:
    from mmsuite import workers

    monkeypatch.setattr(workers, "available_host_memory", lambda: 4 * 2**30)
    monkeypatch.setattr(builds, "build", lambda *a, **k: pytest.fail("built"))
    assert main(["continuous", "base-rev", "head-rev", "--kernel", "cpu.seq_ikj",
                 "--shape", "20000"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mmsuite: error: ") and "20000x20000x20000 needs about" in err
    assert len(err.splitlines()) == 1


def test_an_absurd_omp_num_threads_is_refused_before_anything_is_built(
        fake_builds, monkeypatch, capsys) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "64000")
    monkeypatch.setattr(builds, "build", lambda *a, **k: pytest.fail("built"))
    assert main(["continuous", "base-rev", "head-rev", "--kernel", "cpu.seq_ikj",
                 "--shape", "64"]) == 2
    assert capsys.readouterr().err.startswith("mmsuite: error: OMP_NUM_THREADS=64000: ")


def test_a_worker_pair_opened_but_cut_off_before_its_first_round_does_not_count() -> None:
    """Ctrl-C while a row's second pair of workers opened left one pair's rounds judged as
    two pairs'."""
    pair = judged(rounds(1.0, seed=1), rounds(1.5, seed=2))
    assert pair.verdict == "slower"
    pair.worker_pair_starts = [0, len(pair.base.rounds)]  # the second pair: no round yet
    verdict, reason = decide(pair, DEFAULTS)
    assert verdict == "unsure" and "1 pair of worker processes" in reason


def test_ctrl_c_while_the_results_are_shown_and_saved_waits_for_the_files(
        fake_builds, monkeypatch, tmp_path, capsys) -> None:
    """A Ctrl-C just after the last row once lost every row."""
    import os
    import signal

    from mmsuite.commands import continuous as continuous_command

    table = continuous_command.render

    def interrupted_while_rendering(*args, **kwargs) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        table(*args, **kwargs)

    monkeypatch.setattr(continuous_command, "render", interrupted_while_rendering)
    out = tmp_path / "gate.json"
    code = main(["continuous", "base-rev", "head-rev", "--kernel", "cpu.seq_ikj",
                 "--shape", "64", "--json", str(out)])
    assert code == 130
    assert "interrupted while saving; every row was saved" in capsys.readouterr().err
    assert [r["kernel"] for r in results.load(out)["results"]] == ["cpu.seq_ikj"]


def test_outputs_that_name_a_folder_or_one_file_twice_are_refused(fake_builds, tmp_path,
                                                                   capsys) -> None:
    gate = ["continuous", "base-rev", "head-rev", "--kernel", "cpu.seq_ikj", "--shape", "64"]
    assert main([*gate, "--json", f"{tmp_path}/new/"]) == 2
    assert "names a folder; give a file name" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
    same = tmp_path / "gate.json"
    assert main([*gate, "--json", str(same), "--junit", str(same)]) == 2
    assert capsys.readouterr().err.strip() == (f"mmsuite: error: --json and --junit name the "
                                               f"same file {same}")
    assert main([*gate, "--json", str(same), "--verdict-json",
                 str(tmp_path / "gate.base.json")]) == 2
    assert "--json's BASE file and --verdict-json name the same file" in \
        capsys.readouterr().err


def test_a_throttle_change_between_the_sides_is_unsure() -> None:
    base_ms, head_ms = rounds(1.0, seed=1), rounds(1.10, seed=2)
    pair = ContinuousRow(KERNEL, PROBLEM, ContinuousSide("ok", rounds=base_ms, code={"hash": "a"},
                                                         throttles=[[], []]),
                         ContinuousSide("ok", rounds=head_ms, code={"hash": "b"},
                                        throttles=[[], ["sw_power_cap"]]),
                         worker_pair_starts=halves(len(base_ms), DEFAULTS.min_worker_pairs))
    pair.estimate = paired_ratio(base_ms, head_ms, DEFAULTS.confidence)
    verdict, reason = decide(pair, DEFAULTS)
    assert verdict == "unsure"
    assert reason.startswith("throttling changed: none in BASE, sw_power_cap in HEAD")
    pair.base.throttles = [["sw_power_cap"]]  # throttled alike: the rounds decide
    assert decide(pair, DEFAULTS)[0] == "slower"


def test_turns_read_throttled_are_recorded_and_marked_noisy(fake_workers, tmp_path,
                                                            monkeypatch) -> None:
    window = {"before": {"throttle_reasons": []}, "after": {"throttle_reasons": ["hw_slowdown"]}}
    answer = FakeWorker.request

    def with_gpu(self, message: dict, timeout: float) -> dict:
        reply = answer(self, message, timeout)
        return {**reply, "gpu": window} if message["op"] == "turn" else reply

    monkeypatch.setattr(FakeWorker, "request", with_gpu)
    g = gate(1.0, 1.0, tmp_path, max_seconds=2.0)
    pair = g.measure(ContinuousRow(KERNEL, PROBLEM))
    build = SimpleNamespace(revision="head", commit="c0ffee")
    record = continuous.side_record(pair, "head", build)  # type: ignore[arg-type]
    assert record["throttled"] == ["hw_slowdown"] and record["noisy"] is True
