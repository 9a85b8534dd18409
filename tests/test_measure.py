"""The measurement engine: the stopping rule, robust noise, the L2 policy, interleaving and
mmsuite.run's Measurement. The rule is driven by a fake session whose samples and clock
are scripted, so that every stop is exact."""

from __future__ import annotations

import json

import numpy as np
import pytest

import mmsuite
from mmsuite import Problem, stats, verify
from mmsuite.backends.base import Session, Timer
from mmsuite.layout import plan_call
from mmsuite.measure import (
    DEFAULT_SAMPLING,
    MAX_LAUNCHES_PER_SAMPLE,
    KernelSampler,
    PhaseStats,
    Sampling,
    VerificationFailed,
    sample_session,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeTimer(Timer):
    """Reads the scripted times of the launches between start and stop, summed."""

    def __init__(self, session: FakeSession, floor_ms: float = 0.0) -> None:
        self.session, self.floor_ms = session, floor_ms

    def start(self) -> None:
        self.session.log.append("start")
        self.session.bracketed = 0.0

    def stop(self) -> None:
        self.session.log.append("stop")

    def elapsed_ms(self) -> float:
        return self.session.bracketed

    def disturbed(self) -> bool:
        return self.session.launches in self.session.disturbed_at


class FakeSession(Session):
    """Each launch takes ``step`` seconds of the fake clock and yields the next scripted time."""

    def __init__(self, times: list[float], clock: FakeClock, step: float = 0.01,
                 name: str = "k", log: list | None = None) -> None:
        problem = Problem(2, 2, 2)
        super().__init__(mmsuite.get("cpu.blas"), plan_call(problem, problem.inputs(), "row"))
        self.times, self.clock, self.step, self.name = times, clock, step, name
        self.log = [] if log is None else log
        self.launches = 0
        self.bracketed = 0.0  # scripted time of the launches since the timer's start
        self.timer_floor_ms = 0.0
        self.disturbed_at: set[int] = set()  # launch counts whose sample was disturbed

    def reset_c(self) -> None:
        self.log.append("reset")

    def launch(self) -> None:
        self.log.append(f"launch {self.name}")
        self.bracketed += self.times[min(self.launches, len(self.times) - 1)]
        self.launches += 1
        self.clock.now += self.step

    def timer(self) -> Timer:
        return FakeTimer(self, self.timer_floor_ms)

    def scrub_l2(self) -> None:
        self.log.append("scrub")

    def output(self) -> np.ndarray:
        return np.zeros(4, dtype=np.float32)


def test_quiet_samples_stop_at_the_noise_target_once_minimums_are_met() -> None:
    clock = FakeClock()
    rule = Sampling(min_samples=10, min_seconds=0.5, noise_target=0.005, max_seconds=15.0)
    session = FakeSession([1.0], clock, step=0.01)
    result = sample_session(session, rule, warmup=0, clock=clock)
    # 0.5 s at 0.01 s a sample: the rule first holds at the 50th sample.
    assert result.stopped_by == "noise_target" and len(result.kernel_ms) == 50
    assert not result.noisy


def test_minimum_sample_count_holds_for_slow_kernels() -> None:
    clock = FakeClock()
    session = FakeSession([5.0], clock, step=1.0)
    result = sample_session(session, Sampling(min_samples=10, min_seconds=0.5), 0, clock=clock)
    assert result.stopped_by == "noise_target" and len(result.kernel_ms) == 10


def test_noise_above_target_runs_to_the_time_cap_and_is_flagged() -> None:
    clock = FakeClock()
    session = FakeSession([1.0, 1.2, 1.4] * 1000, clock, step=0.01)
    rule = Sampling(min_samples=10, min_seconds=0.5, noise_target=0.005, max_seconds=3.0)
    result = sample_session(session, rule, warmup=0, clock=clock)
    assert result.stopped_by == "max_seconds" and result.noisy
    assert len(result.kernel_ms) == pytest.approx(300, abs=1)
    record = result.record()
    assert record["stopped_by"] == "max_seconds" and record["samples"] == len(result.kernel_ms)
    assert {"min_samples", "min_seconds", "noise_target", "max_seconds", "seconds"} <= set(record)


def test_noise_that_settles_stops_early() -> None:
    clock = FakeClock()
    session = FakeSession([1.0, 3.0] * 5 + [1.0] * 1000, clock, step=0.01)
    result = sample_session(session, Sampling(min_samples=10, min_seconds=0.0), 0, clock=clock)
    assert result.stopped_by == "noise_target" and 10 < len(result.kernel_ms) < 40


def test_a_steady_but_mostly_disturbed_run_is_noisy() -> None:
    clock = FakeClock()
    session = FakeSession([1.0], clock)
    session.disturbed_at = {1, 2, 3, 4, 5, 6}
    result = sample_session(session, Sampling.fixed(10), warmup=0, clock=clock)
    assert stats.robust_noise(result.kernel_ms) == 0.0 and result.noisy
    assert result.record()["disturbed"] == 6
    session = FakeSession([1.0], FakeClock())
    session.disturbed_at = {1, 2}
    assert not sample_session(session, Sampling.fixed(10), warmup=0, clock=clock).noisy


def test_a_disturbed_reference_is_flagged_apart_from_the_rung() -> None:
    clock = FakeClock()
    rung = FakeSession([2.0], clock, name="rung")
    ref = FakeSession([1.0], clock, name="ref")
    ref.disturbed_at = {1, 2, 3}
    result = sample_session(rung, Sampling.fixed(4), warmup=0, partner=ref, clock=clock)
    assert not result.noisy and result.reference_noisy
    assert result.record()["reference_disturbed"] == 3


def test_fixed_sampling_takes_exactly_that_many_and_still_records_noise() -> None:
    clock = FakeClock()
    session = FakeSession([1.0, 2.0, 1.5, 9.0], clock)
    result = sample_session(session, Sampling.fixed(3), warmup=0, clock=clock)
    assert result.kernel_ms == [1.0, 2.0, 1.5] and result.stopped_by == "max_samples"
    assert result.noisy
    with pytest.raises(ValueError, match="repeats"):
        Sampling.fixed(0)


def test_every_sample_resets_c_outside_the_timer_and_warm_up_is_untimed() -> None:
    clock = FakeClock()
    session = FakeSession([1.0], clock)
    sample_session(session, Sampling.fixed(2), warmup=2, clock=clock)
    assert session.log == ["reset", "launch k"] * 2 + [
        "reset", "start", "launch k", "stop"] * 2


def test_cold_l2_scrubs_before_each_sample_outside_the_timer() -> None:
    clock = FakeClock()
    session = FakeSession([1.0], clock)
    sample_session(session, Sampling.fixed(2), warmup=0, l2="cold", clock=clock)
    assert session.log == ["reset", "scrub", "start", "launch k", "stop"] * 2


def test_a_short_kernel_is_timed_in_back_to_back_launches_when_the_timer_has_a_floor() -> None:
    clock = FakeClock()
    session = FakeSession([0.01], clock)  # ms a launch, beside a timer's 0.001 ms
    session.timer_floor_ms = 0.001
    result = sample_session(session, Sampling.fixed(3), warmup=0, clock=clock)
    # 0.001 / (0.5 % of 0.01) = 20 launches a sample; each sample is their mean
    assert result.launches_per_sample == 20 and result.record()["launches_per_sample"] == 20
    assert result.kernel_ms == pytest.approx([0.01] * 3)
    probe = ["reset", "start", "launch k", "stop"]
    sample = ["reset", "start"] + ["launch k"] * 20 + ["stop"]
    # C is reset once a sample, and left as one call leaves it (beta != 0 accumulates)
    assert session.log == probe + sample * 3 + ["reset", "launch k"]


def test_long_kernels_cold_l2_and_floorless_timers_keep_one_launch_a_sample() -> None:
    clock = FakeClock()
    long = FakeSession([1.0], clock)
    long.timer_floor_ms = 0.001
    assert sample_session(long, Sampling.fixed(2), 0, clock=clock).launches_per_sample == 1
    cold = FakeSession([0.01], clock)
    cold.timer_floor_ms = 0.001
    result = sample_session(cold, Sampling.fixed(2), 0, l2="cold", clock=clock)
    assert result.launches_per_sample == 1
    assert cold.log == ["reset", "scrub", "start", "launch k", "stop"] * 2
    floorless = FakeSession([0.0001], clock)
    assert sample_session(floorless, Sampling.fixed(2), 0, clock=clock).launches_per_sample == 1


def test_launches_per_sample_are_capped() -> None:
    clock = FakeClock()
    session = FakeSession([1e-6], clock)
    session.timer_floor_ms = 0.001
    result = sample_session(session, Sampling.fixed(2), 0, clock=clock)
    assert result.launches_per_sample == MAX_LAUNCHES_PER_SAMPLE


def _runs(log: list[str]) -> list[tuple[str, int]]:
    """Launch log as (name, count) runs: ["a", "a", "b"] -> [("a", 2), ("b", 1)]."""
    runs: list[tuple[str, int]] = []
    for entry in log:
        if entry.startswith("launch"):
            name = entry.split()[1]
            runs[-1:] = [(name, runs[-1][1] + 1)] if runs and runs[-1][0] == name else \
                runs[-1:] + [(name, 1)]
    return runs


def test_partner_takes_turns_in_blocks_of_equal_count() -> None:
    clock, log = FakeClock(), []
    rung = FakeSession([2.0], clock, name="rung", log=log)
    ref = FakeSession([1.0], clock, name="ref", log=log)
    rule = Sampling(min_samples=10, min_seconds=0.5, max_seconds=15.0, block_seconds=0.2)
    result = sample_session(rung, rule, warmup=0, partner=ref, clock=clock)
    # 0.01 s a launch: turns of 20; the partner's turns count towards the 0.5 s too, and
    # within a turn so does the partner's turn to come: after 0.4 s, the rule (checked
    # every second sample past 20) holds at 0.4 + 2 x 0.06 s, six samples into the turn.
    assert _runs(log) == [("rung", 20), ("ref", 20), ("rung", 6), ("ref", 6)]
    assert result.kernel_ms == [2.0] * 26 and result.reference_ms == [1.0] * 26


def test_the_time_cap_bounds_the_rung_and_its_partner_together() -> None:
    clock, log = FakeClock(), []
    rung = FakeSession([1.0, 1.3, 1.6] * 1000, clock, name="rung", log=log)  # never quiet
    ref = FakeSession([1.0], clock, name="ref", log=log)
    rule = Sampling(min_samples=5, min_seconds=0.1, max_seconds=0.5, block_seconds=0.5,
                    verdict_samples=5)
    result = sample_session(rung, rule, warmup=0, partner=ref, clock=clock)
    assert result.stopped_by == "max_seconds"
    assert result.seconds == pytest.approx(0.5, abs=0.03)  # was 1.0: a turn each of 0.5 s


def test_each_turn_starts_with_an_untimed_warm_up_that_outlasts_spinning_threads() -> None:
    clock, log = FakeClock(), []
    # Noisy, so that only max_samples stops it; quarter seconds add up exactly.
    rung = FakeSession([2.0, 2.4, 2.8] * 10, clock, step=0.25, name="rung", log=log)
    ref = FakeSession([1.0], clock, step=0.25, name="ref", log=log)
    rung.warmup_floor_s = ref.warmup_floor_s = 1.0
    rule = Sampling(min_samples=4, min_seconds=0.0, max_seconds=None, max_samples=8,
                    block_seconds=1.0)
    sample_session(rung, rule, warmup=1, partner=ref, clock=clock)
    timed = {"rung": 0, "ref": 0}
    for before, entry in zip(log, log[1:]):
        if entry.startswith("launch") and before == "start":
            timed[entry.split()[1]] += 1
    assert timed == {"rung": 8, "ref": 8}
    # warm-up (4 launches: 1 s) then a turn of 4 timed (1 s), for each session in turn
    assert _runs(log) == [("rung", 4 + 4), ("ref", 4 + 4), ("rung", 4 + 4), ("ref", 4 + 4)]


def test_a_slow_rung_waits_out_the_floor_idle_between_turns(monkeypatch) -> None:
    """A rung whose one sample outlasts the warm-up floor needs no launch to warm its caches
    after the reference's turn: it sleeps the floor (the reference's threads stop spinning)
    instead of spending a whole slow launch on it."""
    from mmsuite import measure

    clock, log = FakeClock(), []
    naps: list[float] = []

    def nap(seconds: float) -> None:
        naps.append(seconds)
        clock.now += seconds

    monkeypatch.setattr(measure.time, "sleep", nap)
    rung = FakeSession([500.0, 600.0, 700.0] * 4, clock, step=0.5, name="rung", log=log)
    ref = FakeSession([10.0], clock, step=0.01, name="ref", log=log)
    rung.warmup_floor_s = ref.warmup_floor_s = 0.15
    rule = Sampling(min_samples=5, min_seconds=0.0, max_seconds=None, max_samples=5,
                    block_seconds=0.5)
    result = sample_session(rung, rule, warmup=1, partner=ref, clock=clock)
    assert len(result.kernel_ms) == 5 and len(result.reference_ms) == 5
    # one warm-up launch before the first turn, none between turns: 1 + 5 launches
    assert sum(n for name, n in _runs(log) if name == "rung") == 6
    assert naps == [0.15] * 4


def test_the_time_cap_waits_for_the_samples_a_verdict_needs() -> None:
    clock = FakeClock()
    slow = FakeSession([400.0, 500.0, 450.0], clock, step=0.4)
    rule = Sampling(min_samples=5, min_seconds=0.1, max_seconds=0.5, verdict_samples=5)
    result = sample_session(slow, rule, warmup=0, clock=clock)
    assert result.stopped_by == "max_seconds" and len(result.kernel_ms) == 5
    # A fast kernel still stops at the cap, with many more samples.
    fast = FakeSession([1.0, 1.2, 1.4] * 1000, FakeClock(), step=0.01)
    result = sample_session(fast, rule, warmup=0, clock=fast.clock)
    assert result.stopped_by == "max_seconds" and len(result.kernel_ms) == pytest.approx(50, abs=1)


def test_a_cpu_device_takes_its_own_noise_target() -> None:
    rule = Sampling(noise_target=0.005, cpu_noise_target=0.02, max_seconds=1.0)
    assert rule.for_device("CPU").noise_target == 0.02
    assert rule.for_device("GPU") is rule
    assert Sampling(noise_target=0.005).for_device("CPU").noise_target == 0.005
    # 1% noise: steady for a CPU's wall clock, noisy for a GPU's device clock.
    times = list(np.exp(np.random.default_rng(0).normal(0.0, 0.01, 200)))
    for kind, noisy in (("CPU", False), ("GPU", True)):
        clock = FakeClock()
        result = sample_session(FakeSession(times, clock), rule.for_device(kind), 0,
                                clock=clock)
        assert result.noisy is noisy, kind


def test_the_command_line_rule_is_quick_and_keeps_a_verdict() -> None:
    from mmsuite.compare import MIN_SAMPLES
    from mmsuite.measure import CLI_SAMPLING

    assert CLI_SAMPLING.verdict_samples == CLI_SAMPLING.min_samples == MIN_SAMPLES
    assert CLI_SAMPLING.noise_target == 0.005 and CLI_SAMPLING.cpu_noise_target == 0.02
    assert CLI_SAMPLING.max_seconds <= 1.0


def test_default_rule_is_nvbench() -> None:
    rule = DEFAULT_SAMPLING
    assert (rule.min_samples, rule.min_seconds, rule.noise_target, rule.max_seconds) == (
        10, 0.5, 0.005, 15.0)


def test_bad_l2_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="l2"):
        mmsuite.RunOptions(l2="lukewarm")


# ------------------------------------------------------------------ mmsuite.run
def test_run_returns_output_times_rates_and_verdict() -> None:
    p = Problem(64, 32, 48)
    m = mmsuite.run("cpu.seq_naive", p, repeats=3, warmup=1)
    assert m.output.shape == (64, 32) and m.ok and m.max_rel_err < 1e-5
    assert len(m.kernel_ms.samples) == 3 and m.kernel_ms.min <= m.kernel_ms.median
    assert m.h2d_ms.median == 0 and m.d2h_ms.median == 0  # host backend: no transfers
    assert m.gflops == pytest.approx(p.flops / (m.kernel_ms.median * 1e6))
    assert m.host_gflops == pytest.approx(m.gflops)
    a, b, _ = p.inputs()
    np.testing.assert_allclose(m.output, a @ b, rtol=1e-4, atol=1e-5)


def test_a_cpu_rung_carries_its_interleaved_reference() -> None:
    m = mmsuite.run("cpu.seq_ikj", Problem(40, 30, 20), repeats=4)
    assert m.reference_ms is not None and len(m.reference_ms.samples) == 4
    assert mmsuite.run("cpu.blas", Problem(8, 8, 8), repeats=2).reference_ms is None


def test_stopping_rule_runs_through_mmsuite_run() -> None:
    rule = Sampling(min_samples=3, min_seconds=0.0, noise_target=1.0, max_seconds=5.0)
    m = mmsuite.run("cpu.blas", Problem(16, 16, 16), sampling=rule, warmup=0)
    assert m.sampled.stopped_by == "noise_target" and len(m.kernel_ms.samples) >= 3
    with pytest.raises(ValueError, match="not both"):
        mmsuite.run("cpu.blas", Problem(2, 2, 2), repeats=2, sampling=rule)


def test_record_is_json_ready_with_samples_noise_and_load() -> None:
    record = mmsuite.run("cpu.seq_naive", Problem(8, 8, 8), repeats=2,
                         options=mmsuite.RunOptions(l2="cold")).to_record()
    json.dumps(record, allow_nan=False)
    assert record["status"] == "ok" and record["kernel"] == "cpu.seq_naive"
    assert set(record["kernel_ms"]) >= {"median", "min", "max", "spread", "noise", "samples"}
    assert len(record["kernel_ms"]["samples"]) == 2 and record["l2"] == "cold"
    assert record["sampling"]["stopped_by"] == "max_samples"
    assert isinstance(record["noisy"], bool)
    assert set(record["load_avg"]) == {"before", "after"}
    assert len(record["reference_ms"]["samples"]) == 2
    assert isinstance(record["reference_noisy"], bool)


def test_bad_repeats_and_unknown_kernel() -> None:
    with pytest.raises(ValueError, match="repeats"):
        mmsuite.run("cpu.blas", Problem(2, 2, 2), repeats=0)
    with pytest.raises(KeyError, match="did you mean"):
        mmsuite.run("cpu.bla", Problem(2, 2, 2))


def test_phase_stats() -> None:
    s = PhaseStats.of([3.0, 1.0, 2.0])
    assert (s.median, s.min, s.max) == (2.0, 1.0, 3.0) and s.spread == pytest.approx(1.0)
    assert s.noise == pytest.approx(1.4826 / 2.0)
    assert PhaseStats.of([]).median == 0.0 and PhaseStats.of([]).noise is None


def test_a_kernel_sampler_verifies_once_then_gives_the_engines_samples() -> None:
    with KernelSampler("cpu.omp_tiled", Problem(35, 79, 19, beta=0.5)) as sampler:
        samples = [sampler.kernel_ms() for _ in range(3)]
        assert all(ms > 0 for ms in samples)
        assert sampler.launches_per_sample == 1  # a wall clock has no floor to amortise
        assert sampler.transfer_ms() == (0.0, 0.0)  # the CPU has no transfers


def test_a_kernel_sampler_takes_a_long_checked_launch_as_its_warm_up(monkeypatch) -> None:
    """A slow kernel is not launched again before its first sample: the checked launch
    warmed it, and its time is kept for callers that budget their samples."""
    import mmsuite.measure as measure

    extra: list[str] = []
    monkeypatch.setattr(measure, "_warm_up", lambda *a, **k: extra.append("warm-up"))
    monkeypatch.setattr(measure, "_launches_per_sample",
                        lambda *a, **k: extra.append("probe") or 1)
    monkeypatch.setattr(measure, "LONG_LAUNCH_S", 0.0)  # every launch counts as long
    with KernelSampler("cpu.seq_naive", Problem(35, 79, 19)) as sampler:
        assert extra == [] and sampler.launches_per_sample == 1
        assert sampler.launch_seconds > 0 and sampler.kernel_ms() > 0
    monkeypatch.setattr(measure, "LONG_LAUNCH_S", 1e9)
    with KernelSampler("cpu.seq_naive", Problem(35, 79, 19)):
        assert extra == ["warm-up", "probe"]


def test_a_kernel_sampler_refuses_a_wrong_kernel(monkeypatch) -> None:
    def wrong(output, ref, k, *precision):
        return verify.Verdict(0.5, 1e-5, False, "error above tolerance")

    monkeypatch.setattr(verify, "check", wrong)
    with pytest.raises(VerificationFailed, match="cpu.blas failed verification on 8x8x8"):
        KernelSampler("cpu.blas", Problem(8, 8, 8))
    with pytest.raises(KeyError, match="did you mean"):
        KernelSampler("cpu.bla", Problem(2, 2, 2))


def test_a_row_sampled_on_a_throttled_gpu_is_recorded_so_and_marked_noisy() -> None:
    from mmsuite.measure import run

    measured = run("cpu.seq_ikj", Problem(8, 8, 8), repeats=2, warmup=0)
    measured.sampled = None  # its own samples count as quiet, whatever this machine did
    assert "throttled" not in measured.to_record()  # no GPU window: nothing to say
    quiet = {"sm_clock_mhz": 1980, "throttle_reasons": []}
    measured.info["gpu"] = {"before": quiet, "after": quiet}
    assert measured.to_record()["throttled"] == [] and measured.to_record()["noisy"] is False
    capped = {"sm_clock_mhz": 1410, "throttle_reasons": ["sw_power_cap"]}
    measured.info["gpu"] = {"before": quiet, "after": capped}
    record = measured.to_record()
    assert record["throttled"] == ["sw_power_cap"] and record["noisy"] is True
