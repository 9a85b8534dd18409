"""The tuner's search: seeded shapes, the noise rule, what tune stores (a fake GPU)."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest

from mmsuite import tuner
from mmsuite.cuda_dispatch import model, planners, tuning_file
from mmsuite.cuda_dispatch.planners import decide
from mmsuite.cuda_dispatch.variants import candidates
from mmsuite.launch import CudaPlan, DeviceFacts
from mmsuite.problem import Problem

H100 = DeviceFacts()


@pytest.fixture(autouse=True)
def _tuning_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's folder is the test's own; nothing is shipped."""
    folder = tmp_path / "tuning"
    monkeypatch.setenv(tuning_file.TUNING_ENV, str(folder))
    monkeypatch.setattr(tuning_file, "BUNDLED_DIR", tmp_path / "shipped")
    return folder


def test_sampled_shapes_are_seeded_bounded_and_end_with_the_batched_ones() -> None:
    shapes = tuner.sample_shapes(5, 40, 8)
    assert shapes == tuner.sample_shapes(5, 40, 8) != tuner.sample_shapes(6, 40, 8)
    assert len(shapes) == 48 and all(p.batch == 1 for p in shapes[:40])
    assert all(p.batch > 1 for p in shapes[40:])
    for p in shapes:
        assert 1 <= min(p.m, p.n, p.k) and max(p.m, p.n, p.k) <= 16384
        assert math.log2(p.m * p.n * p.k * p.batch) <= 37 + 1e-9


@pytest.mark.parametrize("samples,baseline,wins", [
    ([0.90] * 15, [1.00] * 15, True),  # 10% faster every round
    ([0.997] * 15, [1.00] * 15, False),  # faster, but less than the margin
    ([0.9, 1.1] * 7 + [0.9], [1.0] * 15, False),  # as often slower as faster
])
def test_an_entry_must_beat_the_models_choice_beyond_the_noise(samples: list, baseline: list,
                                                              wins: bool) -> None:
    assert tuner.beats(samples, baseline)[0] is wins


class FakeTimer:
    """PlanTimer's interface on a made-up GPU: each candidate's time from ``times`` (by
    label, default 1 ms), optionally failing verification."""

    times: dict[str, float] = {}
    failing: set[str] = set()
    noise = itertools.cycle([1.0, 1.002, 0.998])
    keep = tuner.KEPT_SESSIONS

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.device = H100
        self.current = None

    @property
    def dims(self):
        p = self.problem
        return (p.n, p.m, p.k, p.batch) if p.layout == "row" else (p.m, p.n, p.k, p.batch)

    def decision(self, override=None, **choice):
        return decide(*self.dims, self.device, override, **choice)

    def select(self, decision) -> None:
        self.current = decision.candidate.label

    def use(self, decision) -> float:
        self.select(decision)
        if self.current in self.failing:
            raise RuntimeError(f"{self.current} failed verification: relative error 1")
        return 0.0

    def time(self, sampling) -> list[float]:
        return [self.sample() for _ in range(5)]

    def sample(self) -> float:
        return self.times.get(self.current, 1.0) * next(self.noise)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(tuner, "PlanTimer", FakeTimer)
    FakeTimer.times, FakeTimer.failing = {}, set()
    return FakeTimer


def _model_choice(problem: Problem):
    return FakeTimer(problem).decision(use_tuning=False).candidate


def test_a_clearly_faster_candidate_is_stored_and_the_model_choice_recorded(fake) -> None:
    problem = Problem(512, 512, 512)
    chosen = _model_choice(problem)
    other = model.ranked(candidates(512, 512, 512, 1, H100), 512, 512, 512)[3][1]
    fake.times = {other.label: 0.8}
    done = tuner.tune_problem(problem, limit=6, confirm=2, progress=lambda _: None)
    entry = done["entry"]
    assert entry is not None and done["best"] == other.label
    assert tuning_file.candidate_of(entry, "f") == other
    assert entry["model"]["config"] == chosen.config.name and entry["ratio_to_model"] < 0.85
    stored = tuning_file.load_tuning(tuning_file.tuning_path(H100.name))["entries"]
    assert stored[done["key"]] == entry


def test_within_the_noise_no_entry_is_stored_and_an_old_one_goes(fake) -> None:
    problem = Problem(512, 512, 512)
    path = tuning_file.tuning_path(H100.name)
    key = tuning_file.shape_key(512, 512, 512)
    tuning_file.store_tuning(path, H100.name, {key: tuning_file.entry_of(
        _model_choice(Problem(64, 64, 64)))})
    done = tuner.tune_problem(problem, limit=6, confirm=2, progress=lambda _: None)
    assert done["entry"] is None
    assert key not in tuning_file.load_tuning(path)["entries"]


def test_a_candidate_failing_verification_is_skipped_with_the_reason(fake) -> None:
    problem = Problem(512, 512, 512)
    ranked = model.ranked(candidates(512, 512, 512, 1, H100), 512, 512, 512)
    bad = ranked[1][1]
    fake.failing = {bad.label}
    fake.times = {bad.label: 0.1}
    lines: list[str] = []
    done = tuner.tune_problem(problem, limit=6, confirm=2, progress=lines.append)
    assert any(line.startswith(f"skipped {bad.label}: ") for line in lines)
    assert done["best"] != bad.label


def test_the_models_choice_failing_is_an_error(fake) -> None:
    problem = Problem(512, 512, 512)
    fake.failing = {_model_choice(problem).label}
    with pytest.raises(RuntimeError, match="the model's choice"):
        tuner.tune_problem(problem, limit=4, confirm=2, progress=lambda _: None)


def test_row_major_problems_are_keyed_by_the_kernels_own_sizes(fake) -> None:
    done = tuner.tune_problem(Problem(300, 20, 64), limit=3, confirm=1,
                               progress=lambda _: None)
    assert done["key"] == "20x300x64x1"


def test_timed_plans_skip_a_failing_one_and_give_a_calibration_row(fake) -> None:
    """The calibration scripts and ``--fit-model`` time plans the same way: each verified
    and timed, one that fails skipped with its reason, cuBLAS last where asked."""
    timer = FakeTimer(Problem(300, 20, 64))
    m, n, k, batch = timer.dims
    ranked = [c for _, c in model.ranked(candidates(m, n, k, batch, H100),
                                                m, n, k, batch)]
    good, bad = ranked[0], ranked[1]
    fake.times, fake.failing = {good.label: 2.0}, {bad.label}
    timer.cublas = lambda sampling: [0.5, 0.5, 0.5]
    lines: list[str] = []
    timed = tuner.time_plans(timer, [good, bad], sampling=None, with_cublas=True,
                              progress=lines.append)
    assert [t.candidate for t in timed.timings] == [good]
    assert timed.timings[0].seconds == pytest.approx(2.0e-3, rel=0.01)
    assert list(timed.skipped) == [bad.label] and lines[0].startswith(f"  skipped {bad.label}")
    row = timed.as_row()
    assert row["timings"] == [{"key": good.variant.key, "split": good.split,
                               "ms": pytest.approx(2.0, rel=0.01)}]
    assert row["rungs_ms"] == {"cuda.cublas": 0.5} and row["failed"] == [bad.label]


class FakeSession:
    def __init__(self, plan) -> None:
        self.plan, self.closed = plan, False
        self.info = dict(plan.info)  # as kernel_steps records a plan

    def close(self) -> None:
        self.closed = True


class FakeBackend:
    """The CUDA adapter's part the timer uses: facts, the rung's own plan, and sessions
    prepared with a given plan."""

    device_facts = H100

    def __init__(self) -> None:
        self.sessions: list[FakeSession] = []

    def probe(self) -> str:
        return ""

    def plan(self, kernel, call) -> CudaPlan:
        return planners.plan_adaptive(call, H100)

    def prepare(self, kernel, call, plan=None) -> FakeSession:
        assert plan is not None, "the timer always names the plan"
        self.sessions.append(FakeSession(plan))
        return self.sessions[-1]


def test_each_plan_is_timed_in_a_session_prepared_with_it_and_few_stay_open() -> None:
    backend = FakeBackend()
    timer = tuner.PlanTimer(Problem(300, 20, 64), backend=backend)  # type: ignore[arg-type]
    m, n, k, batch = timer.dims
    chosen = timer.decision()
    assert backend.sessions[0].plan == planners.plan_of(chosen, m, n, k, batch, H100)
    others = [c for _, c in model.ranked(candidates(m, n, k, batch, H100), m, n, k, batch)
              if c != chosen.candidate][:tuner.KEPT_SESSIONS + 2]
    for candidate in others:
        timer.select(timer.decision(candidate))
        assert timer.session.plan.steps == planners.plan_of(
            timer.decision(candidate), m, n, k, batch, H100).steps
    assert len(backend.sessions) == 1 + len(others)
    assert sum(not s.closed for s in backend.sessions) == tuner.KEPT_SESSIONS
    timer.select(timer.decision(others[-2]))  # still open: no new session
    assert len(backend.sessions) == 1 + len(others)
    timer.close()
    assert all(s.closed for s in backend.sessions)


def test_a_plan_decided_anew_with_the_same_launches_is_recorded_as_decided() -> None:
    """Forcing the model's own choice reuses its session (same launches), whose record must
    then say the plan was forced, not the model's."""
    backend = FakeBackend()
    timer = tuner.PlanTimer(Problem(300, 20, 64), backend=backend)  # type: ignore[arg-type]
    assert timer.session.info["dispatch"]["choice"] == "model"
    timer.select(timer.decision(timer.decision().candidate))
    assert len(backend.sessions) == 1
    assert timer.session.info["dispatch"]["choice"] == "forced"
