"""`mmsuite tune`: candidates, Kernel Tuner's parameters, verification and the stored entry.

Kernel Tuner and the GPU are replaced by stand-ins here; the search itself runs on a GPU host.
"""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mmsuite import dispatch, tune
from mmsuite.cli import main
from mmsuite.dispatch import CONFIGS, Choice, Device
from mmsuite.problem import Problem

H100 = Device("NVIDIA H100 80GB HBM3", 132, 1980)


@pytest.fixture(autouse=True)
def _tuning_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "tuning"
    monkeypatch.setenv(dispatch.TUNING_ENV, str(folder))
    monkeypatch.setattr(dispatch, "BUNDLED_DIR", tmp_path / "shipped")  # none shipped here
    return folder


# --------------------------------------------------------------- candidates
@pytest.mark.parametrize("shape", [(512, 512, 512, 1), (128, 128, 65536, 1),
                                   (1000, 1000, 1000, 100), (35, 79, 19, 3)])
def test_candidates_hold_the_heuristic_and_fit(shape: tuple) -> None:
    m, n, k, batch = shape
    found = tune.candidates(m, n, k, batch, H100, limit=12)
    assert 1 <= len(found) <= 12
    pairs = [(c.config, c.split) for c in found]
    assert len(set(pairs)) == len(pairs)
    heuristic = dispatch.heuristic(m, n, k, batch, H100)
    assert (heuristic.config, heuristic.split) in pairs
    assert all(dispatch.fits(c.config, c.split, m, n, batch) for c in found)
    assert all(split in dispatch._splits(k, config.bk) for config, split in pairs)


def test_candidates_search_beyond_the_dispatchers_configs() -> None:
    found = tune.candidates(4096, 4096, 4096, 1, H100, limit=40)
    assert any(c.config not in CONFIGS.values() for c in found)  # stages 2, BK 8 at 512 threads
    assert len({c.config for c in found}) > 5


def test_restricted_rung_searches_only_its_tile() -> None:
    found = tune.candidates(512, 512, 512, 1, H100, [dispatch.RUNG21_CONFIG], limit=8)
    assert {c.config for c in found} == {dispatch.RUNG21_CONFIG}


def test_kernel_tuner_space_admits_exactly_the_candidates() -> None:
    found = tune.candidates(1024, 1024, 1024, 1, H100, limit=10)
    params, restrict = tune.kernel_tuner_params(found)
    assert list(params) == list(tune.PARAM_ORDER)
    admitted = set()
    for values in itertools.product(*params.values()):
        point = dict(zip(params, values))
        if restrict(point):
            admitted.add(tune.config_of(point))
    assert admitted == {c.config for c in found}
    for config in admitted:  # the block size Kernel Tuner launches is the config's
        assert restrict({**config.params(), "block_size_x": config.threads})
        assert not restrict({**config.params(), "block_size_x": config.threads * 2})


# ------------------------------------------------------------- verification
def _product(batch: int, m: int, n: int, k: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((batch, m, k))
    b = rng.standard_normal((batch, k, n))
    c = a @ b
    # column-major storage, one matrix after another
    return a, b, c.transpose(0, 2, 1).reshape(-1)


def test_verifier_accepts_c_or_the_slices_that_add_up_to_it() -> None:
    batch, m, n, k = 2, 5, 3, 40
    _, _, ref = _product(batch, m, n, k)
    verifier = tune.Verifier(ref, batch, k)
    assert verifier.verdict(ref.astype(np.float32), np.zeros(1))["verified"] == 1
    # Split 4 inside a workspace sized for 6 slices: the last two stay zero.
    slices = np.zeros((batch, 6, m * n))
    parts = np.random.default_rng(1).dirichlet(np.ones(4), size=m * n).T  # weights sum to 1
    slices[:, :4] = ref.reshape(batch, 1, -1) * parts[None]
    nan_c = np.full(batch * m * n, np.nan, dtype=np.float32)
    verdict = verifier.verdict(nan_c, slices.astype(np.float32).reshape(-1))
    assert verdict["verified"] == 1 and verdict["rel_err"] < 1e-6


def test_verifier_rejects_wrong_and_unwritten_output() -> None:
    batch, m, n, k = 1, 4, 4, 16
    _, _, ref = _product(batch, m, n, k)
    verifier = tune.Verifier(ref, batch, k)
    wrong = verifier.verdict((ref * 1.01).astype(np.float32), np.zeros(1))
    assert wrong["verified"] == 0 and wrong["rel_err"] == pytest.approx(0.01, rel=1e-3)
    partly = ref.astype(np.float32).copy()
    partly[3] = np.nan
    assert verifier.verdict(partly, np.zeros(1)) == {"verified": 0, "rel_err": math.inf}


def test_verify_always_lets_kernel_tuner_go_on_and_files_the_verdict() -> None:
    _, _, ref = _product(1, 4, 4, 8)
    verifier = tune.Verifier(ref, 1, 8)
    args = [None] * 10
    args[tune.C_ARG], args[tune.W_ARG] = (ref * 2).astype(np.float32), np.zeros(1)
    assert verifier.verify([], args, atol=1e-6) is True
    assert verifier.last["verified"] == 0


@pytest.mark.parametrize("row,expect", [
    ({"time": 0.5, "verified": 1, "rel_err": 1e-7}, ""),
    ({"time": 0.5, "verified": 0, "rel_err": 0.2}, "failed verification"),
    ({"time": "CompilationFailedConfig"}, "failed to compile"),
    ({"time": 1e20, "__error__": "RuntimeFailedConfig"}, "failed to launch"),
    ({"time": "InvalidConfig"}, "invalid launch"),
    ({"time": math.nan, "verified": 1}, "no time"),
])
def test_skip_reasons(row: dict, expect: str) -> None:
    reason = tune.skip_reason(row, 1e-4)
    assert (reason == "") if expect == "" else reason.startswith(expect)


# ------------------------------------------------------------ tuning a shape
def _fake_search(monkeypatch: pytest.MonkeyPatch, kt_ms: dict, suite_ms: dict) -> list:
    """Kernel Tuner and the suite's timer replaced: times by (config name, split)."""
    confirmed = []

    def fake_kernel_tuner(choices, m, n, k, batch, device, progress, iterations=7):
        out = []
        for c in choices:
            ms = kt_ms.get((c.config.name, c.split))
            out.append(tune.Outcome(c, kernel_tuner_ms=ms,
                                    skipped="" if ms else "failed verification (fake)"))
        return out

    def fake_confirm(kernel_id, problem, device_name, key, choice):
        # What the rung would run: the forced entry, or its heuristic.
        chosen = choice or dispatch.heuristic(*tune.kernel_dims(problem), H100)
        confirmed.append(chosen)
        if chosen.streamk:
            name = (chosen.config.name, "stream-K")
            return suite_ms.get(name, 9.0), {"config": name[0], "split": 1, "streamk": True}
        name = (chosen.config.name, chosen.split)
        return suite_ms.get(name, 9.0), {"config": name[0], "split": name[1]}

    monkeypatch.setattr(tune, "run_kernel_tuner", fake_kernel_tuner)
    monkeypatch.setattr(tune, "confirm", fake_confirm)
    return confirmed


def test_winner_is_the_fastest_by_the_suites_timer_and_is_stored(
        monkeypatch: pytest.MonkeyPatch) -> None:
    problem = Problem(512, 512, 512)
    m, n, k, batch = tune.kernel_dims(problem)
    found = tune.candidates(m, n, k, batch, H100, limit=6)
    # Kernel Tuner ranks found[0] first, but the suite's timer prefers found[1].
    kt_ms = {(c.config.name, c.split): 1.0 + i for i, c in enumerate(found)}
    kt_ms[(found[-1].config.name, found[-1].split)] = None  # this one fails verification
    suite_ms = {(found[0].config.name, found[0].split): 2.0,
                (found[1].config.name, found[1].split): 1.5}
    _fake_search(monkeypatch, kt_ms, suite_ms)
    lines = []
    done = tune.tune_problem("cuda.22_adaptive", problem, H100, 6, 2, lines.append)
    entry = done["entry"]
    assert (entry["config"], entry["split"]) == (found[1].config.name, found[1].split)
    heuristic = dispatch.heuristic(m, n, k, batch, H100)
    assert entry["confirmed_ms"] == 1.5
    assert entry["heuristic"]["ms"] == suite_ms.get((heuristic.config.name, heuristic.split), 9)
    assert list(entry["skipped"].values()) == ["failed verification (fake)"]
    assert entry["kept_heuristic"] is False
    stored = dispatch.load_tuning(dispatch.tuning_path(H100.name))["entries"][done["key"]]
    assert stored == entry
    choice = dispatch.choose(m, n, k, batch, H100)
    assert (choice.config, choice.split, choice.source) == (found[1].config, found[1].split,
                                                              "tuned")
    assert any("heuristic" in line for line in lines)


def test_heuristic_is_kept_when_no_candidate_beats_it(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = Problem(1024, 1024, 1024)
    m, n, k, batch = tune.kernel_dims(problem)
    heuristic = dispatch.heuristic(m, n, k, batch, H100)
    found = tune.candidates(m, n, k, batch, H100, limit=4)
    kt_ms = {(c.config.name, c.split): 1.0 for c in found}
    suite_ms = {(c.config.name, c.split): 5.0 for c in found}
    suite_ms[(heuristic.config.name, heuristic.split)] = 1.0
    _fake_search(monkeypatch, kt_ms, suite_ms)
    entry = tune.tune_problem("cuda.22_adaptive", problem, H100, 4, 4, lambda _: None)["entry"]
    assert (entry["config"], entry["split"]) == (heuristic.config.name, heuristic.split)


def test_a_heuristic_plan_no_entry_can_name_wins_by_leaving_no_entry(
        monkeypatch: pytest.MonkeyPatch) -> None:
    problem = Problem(1024, 1024, 1024)
    m, n, k, batch = tune.kernel_dims(problem)
    found = tune.candidates(m, n, k, batch, H100, limit=4)
    _fake_search(monkeypatch, {(c.config.name, c.split): 1.0 for c in found},
                 {(c.config.name, c.split): 2.0 for c in found})
    forced = tune.confirm

    def confirm(kernel_id, problem, device_name, key, choice):
        ms, info = forced(kernel_id, problem, device_name, key, choice)
        return (0.5, {"streamk": True}) if choice is None else (ms, info)  # e.g. stream-K

    monkeypatch.setattr(tune, "confirm", confirm)
    key = dispatch.shape_key(m, n, k, batch)
    path = dispatch.tuning_path(H100.name)
    dispatch.store_tuning(path, H100.name, {key: tune.entry_of(found[0], confirmed_ms=9.0)})
    entry = tune.tune_problem("cuda.22_adaptive", problem, H100, 4, 4, lambda _: None)["entry"]
    assert entry["kept_heuristic"] is True and entry["heuristic"]["streamk"] is True
    # No entry pins a split-K config with the heuristic's time, and the stale one is gone:
    # the rung goes on choosing as the heuristic does.
    assert key not in dispatch.load_tuning(path)["entries"]
    assert dispatch.choose(m, n, k, batch, H100).source != "tuned"


def test_streamk_variants_are_confirmed_and_a_winner_is_stored(
        monkeypatch: pytest.MonkeyPatch) -> None:
    problem = Problem(4097, 4097, 4097)  # 4.1 waves of 128x128 tiles: stream-K shares a wave
    m, n, k, batch = tune.kernel_dims(problem)
    variants = tune.streamk_candidates(m, n, k, batch, H100)
    assert variants and all(c.streamk and c.split == 1 for c in variants)
    found = tune.candidates(m, n, k, batch, H100, limit=4)
    confirmed = _fake_search(monkeypatch, {(c.config.name, c.split): 1.0 for c in found},
                             {(variants[-1].config.name, "stream-K"): 2.0})
    lines: list[str] = []
    entry = tune.tune_problem("cuda.22_adaptive", problem, H100, 4, 2, lines.append)["entry"]
    assert all(v in confirmed for v in variants)  # by the suite's run, never Kernel Tuner
    assert (entry["config"], entry["streamk"], entry["kept_heuristic"]) == (
        variants[-1].config.name, True, False)
    assert any("stream-K" in line for line in lines)
    choice = dispatch.choose(m, n, k, batch, H100)
    assert choice.streamk and choice.source == "tuned"


def test_candidates_over_48kb_of_shared_memory_skip_kernel_tuner_for_the_suites_timer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    problem = Problem(4096, 4096, 4096)
    m, n, k, batch = tune.kernel_dims(problem)
    found = tune.candidates(m, n, k, batch, H100, limit=6)
    big = [c for c in found if c.config.smem_dynamic]
    assert big  # the double-buffered 256x128x16 tile ranks among the best here
    searched: list = []

    def fake_kernel_tuner(choices, m, n, k, batch, device, progress, iterations=7):
        searched.extend(choices)
        return [tune.Outcome(c, kernel_tuner_ms=1.0) for c in choices]

    confirmed = _fake_search(monkeypatch, {}, {(big[0].config.name, big[0].split): 0.5})
    monkeypatch.setattr(tune, "run_kernel_tuner", fake_kernel_tuner)
    lines: list[str] = []
    entry = tune.tune_problem("cuda.22_adaptive", problem, H100, 6, 2, lines.append)["entry"]
    assert not any(c.config.smem_dynamic for c in searched)
    assert all(c in confirmed for c in big)
    assert (entry["config"], entry["split"]) == (big[0].config.name, big[0].split)
    assert entry["candidates"] == len(found) + len(tune.streamk_candidates(m, n, k, batch, H100))
    assert any("over 48 KB of shared memory" in line for line in lines)


@pytest.mark.parametrize("limit", [0, 5])
def test_streamk_option_sets_how_many_streamk_variants_the_suite_confirms(
        monkeypatch: pytest.MonkeyPatch, limit: int) -> None:
    problem = Problem(4097, 4097, 4097)
    m, n, k, batch = tune.kernel_dims(problem)
    found = tune.candidates(m, n, k, batch, H100, limit=4)
    confirmed = _fake_search(monkeypatch, {(c.config.name, c.split): 1.0 for c in found}, {})
    tune.tune_problem("cuda.22_adaptive", problem, H100, 4, 2, lambda _: None, limit)
    forced = confirmed[1:]  # the first run is the heuristic's own plan
    assert sum(c.streamk for c in forced) == limit
    assert sum(not c.streamk for c in forced) == 2  # --confirm's split-K candidates


def test_every_candidate_skipped_is_an_error_with_the_reasons(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_search(monkeypatch, {}, {})
    with pytest.raises(RuntimeError, match="every candidate .* skipped: .*fake"):
        tune.tune_problem("cuda.22_adaptive", Problem(64, 64, 64), H100, 3, 1, lambda _: None)
    assert not dispatch.tuning_path(H100.name).exists()


def test_forced_entry_lives_in_a_private_folder_for_the_confirmation(
        _tuning_dir: Path) -> None:
    choice = Choice(CONFIGS["64x64x16_t4x4_lr4"], 2)
    with tune._only_entry(H100.name, "64x64x64x1", choice):
        assert os.environ[dispatch.TUNING_ENV] != str(_tuning_dir)
        assert dispatch.choose(64, 64, 64, 1, H100).split == 2
    assert os.environ[dispatch.TUNING_ENV] == str(_tuning_dir)
    assert not dispatch.tuning_path(H100.name).exists()


def test_row_major_problems_are_keyed_by_the_kernels_own_sizes() -> None:
    assert tune.kernel_dims(Problem(8192, 128, 4096)) == (128, 8192, 4096, 1)
    assert tune.kernel_dims(Problem(8192, 128, 4096, 2, "col")) == (8192, 128, 4096, 2)


# ---------------------------------------------------------------------- CLI
@pytest.mark.parametrize("argv,message", [
    (["tune", "cuda.20_tuned", "--shape", "64x64x64"], "cannot be tuned"),
    (["tune", "cuda.22_adaptive", "--shape", "64x0x64"], "--shape"),
    (["tune", "cuda.22_adaptive", "--shape", "64x64x64", "--candidates", "0"], "positive"),
    (["tune", "cuda.22_adaptive", "--shape", "64x64x64", "--streamk", "-1"], "negative"),
    (["tune", "cuda.22_adaptive"], "--shape"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list, message: str,
                                         capsys: pytest.CaptureFixture) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_without_a_gpu_tune_says_why_in_one_line() -> None:
    pytest.importorskip("mmsuite")
    code = "import sys; from mmsuite.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", code, "tune", "cuda.22_adaptive", "--shape",
                           "64x64x64"], capture_output=True, text=True)
    try:
        import cupy  # noqa: F401
        has_gpu = cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        has_gpu = False
    if has_gpu:
        pytest.skip("a GPU is present: tune would run")
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "cannot run here" in done.stderr


def test_candidate_failing_the_suites_run_is_skipped_with_the_reason(
        monkeypatch: pytest.MonkeyPatch) -> None:
    problem = Problem(512, 512, 512)
    m, n, k, batch = tune.kernel_dims(problem)
    found = tune.candidates(m, n, k, batch, H100, limit=3)
    _fake_search(monkeypatch, {(c.config.name, c.split): 1.0 for c in found}, {})
    real = tune.confirm
    bad = (found[0].config, found[0].split)

    def confirm(kernel_id, problem, device_name, key, choice):
        if choice is not None and (choice.config, choice.split) == bad:
            raise RuntimeError("cuda.22_adaptive failed verification: relative error 1")
        return real(kernel_id, problem, device_name, key, choice)

    monkeypatch.setattr(tune, "confirm", confirm)
    entry = tune.tune_problem("cuda.22_adaptive", problem, H100, 3, 3, lambda _: None)["entry"]
    name = f"{bad[0].name}/{bad[1]}"
    assert entry["skipped"][name].startswith("suite run: cuda.22_adaptive failed verification")
    assert (entry["config"], entry["split"]) != (bad[0].name, bad[1])


# ------------------------------------------------- Kernel Tuner's side, faked
class _FakeKernelTuner:
    """tune_kernel as Kernel Tuner calls it back: one admitted config per call, its output
    checked by ``verify`` and the verdict collected by the observer."""

    def __init__(self, failing: set, wrong: set) -> None:
        self.failing, self.wrong, self.calls = failing, wrong, []

    def tune_kernel(self, name, code, problem_size, args, tune_params, *, restrictions,
                    answer, verify, observers, cache, **options):
        points = [dict(zip(tune_params, values))
                  for values in itertools.product(*tune_params.values())]
        admitted = [p for p in points if restrictions(p)]
        assert len(admitted) == 1  # one candidate per call
        params = admitted[0]
        config = tune.config_of(params)
        m, n, k = (int(x) for x in args[:3])
        split = int(args[9])
        self.calls.append((config.name, split, problem_size, Path(cache).name))
        assert "mm_21_splitk(" in code and name == dispatch.MAIN_ENTRY
        assert answer[tune.C_ARG] is not None and answer[tune.W_ARG] is not None
        if config.name in self.failing:
            raise RuntimeError("NVRTC error: static assertion failed\nmore")
        batch = problem_size[2] // split
        c = tune.column_major_product(args[4], args[5], m, n, k, batch)
        if config.name in self.wrong:
            c = c * 1.5
        result = [None] * len(args)
        if split == 1:
            result[tune.C_ARG], result[tune.W_ARG] = c.astype(np.float32), args[tune.W_ARG]
        else:  # C untouched; the slices hold halves of the product
            result[tune.C_ARG] = np.full(c.size, np.nan, dtype=np.float32)
            slices = np.zeros((batch, split, m * n))
            slices[:, 0] = slices[:, 1] = c.reshape(batch, -1) / 2
            result[tune.W_ARG] = slices.astype(np.float32).reshape(-1)
        assert verify(answer, result, atol=1e-6) is True
        row = {**params, "time": 0.25}
        for observer in observers:
            row.update(observer.get_results())
        return [row], {}


@pytest.fixture
def fake_kernel_tuner(monkeypatch: pytest.MonkeyPatch):
    import types

    class BenchmarkObserver:  # Kernel Tuner's base class, as far as the verifier uses it
        pass

    fake = _FakeKernelTuner(set(), set())
    module = types.ModuleType("kernel_tuner")
    module.tune_kernel = fake.tune_kernel
    observer_module = types.ModuleType("kernel_tuner.observers.observer")
    observer_module.BenchmarkObserver = BenchmarkObserver
    monkeypatch.setitem(sys.modules, "kernel_tuner", module)
    monkeypatch.setitem(sys.modules, "kernel_tuner.observers",
                        types.ModuleType("kernel_tuner.observers"))
    monkeypatch.setitem(sys.modules, "kernel_tuner.observers.observer", observer_module)
    return fake


def test_each_candidate_is_one_verified_kernel_tuner_call(fake_kernel_tuner,
                                                        _tuning_dir: Path) -> None:
    m, n, k, batch = 40, 24, 300, 2
    found = tune.candidates(m, n, k, batch, H100, limit=6) + [Choice(CONFIGS["128x128x8"], 1)]
    fake_kernel_tuner.failing = {found[0].config.name}
    fake_kernel_tuner.wrong = {found[1].config.name} - fake_kernel_tuner.failing
    lines = []
    outcomes = tune.run_kernel_tuner(found, m, n, k, batch, H100, lines.append)
    assert [(o.choice.config, o.choice.split) for o in outcomes] == sorted(
        [(c.config, c.split) for c in found], key=lambda pair: pair[1])
    assert len(fake_kernel_tuner.calls) == len(found) and len(lines) == len(found)
    for (name, split, size, cache), outcome in zip(fake_kernel_tuner.calls, outcomes):
        assert size == (m, n, batch * split)
        assert cache == f"{dispatch.shape_key(m, n, k, batch)}-split{split}.json"
        if name in fake_kernel_tuner.failing:
            assert outcome.skipped.startswith("failed to compile or run: RuntimeError: NVRTC")
        elif name in fake_kernel_tuner.wrong:
            assert outcome.skipped.startswith("failed verification")
        else:
            assert outcome.skipped == "" and outcome.kernel_tuner_ms == 0.25
    # Both ways of checking ran: C itself (one slice) and the slices added up.
    assert {o.choice.split > 1 for o in outcomes if not o.skipped} == {True, False}
