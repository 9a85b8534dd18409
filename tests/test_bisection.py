"""`mmsuite bisect`: the first slower commit found by halving, with `continuous`'s verdicts
(faked here: each commit's speed is planted), unsure steps measured longer, and the command
over a real git history."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from mmsuite import builds, catalogue, continuous
from mmsuite.bisection import MAX_LONGER, search
from mmsuite.cli import main
from mmsuite.continuous import ContinuousRow, Settings
from mmsuite.problem import Problem
from mmsuite.stats import PairedRatio
from tests.test_plugins import GOOD_C

KERNEL = catalogue.get("cpu.seq_ikj")
COMMITS = [f"{i:040x}" for i in range(1, 9)]  # eight commits after GOOD
GOOD = "0" * 40


class PlantedJudge:
    """``continuous`` on commits whose speeds are planted: a commit at or after ``slow``
    is 10% slower; ``unsure_until`` seconds of rounds are too few to tell."""

    def __init__(self, slow: int | None, unsure_until: float = 0.0,
                 broken: str | None = None) -> None:
        self.slow, self.unsure_until, self.broken = slow, unsure_until, broken
        self.calls: list[tuple[str, str, float]] = []

    def _ms(self, commit: str) -> float:
        if commit == GOOD or self.slow is None:
            return 1.0
        return 1.1 if COMMITS.index(commit) >= self.slow else 1.0

    def __call__(self, good: str, candidate: str, settings: Settings) -> ContinuousRow:
        self.calls.append((good, candidate, settings.max_seconds))
        pair = ContinuousRow(KERNEL, Problem(64, 64, 64))
        ratio = self._ms(candidate) / self._ms(good)
        pair.estimate = PairedRatio(ratio, ratio * 0.98, ratio * 1.02, 0.001, 40, 0.99)
        if candidate == self.broken:
            pair.verdict, pair.reason = "broken", "failed in HEAD: wrong output"
        elif settings.max_seconds < self.unsure_until:
            pair.verdict, pair.reason = "unsure", "interval straddles ±5%"
        else:
            pair.verdict = "slower" if ratio > 1.05 else "same"
        return pair


@pytest.mark.parametrize("slow", range(len(COMMITS)))
def test_a_planted_slow_commit_among_eight_is_found_in_four_runs(slow: int) -> None:
    judge = PlantedJudge(slow)
    outcome = search(COMMITS, GOOD, judge, Settings(max_seconds=2.0))
    assert outcome.first_bad == COMMITS[slow]
    assert outcome.last_good == (COMMITS[slow - 1] if slow else GOOD)
    assert outcome.runs == len(judge.calls) <= 4
    assert judge.calls[0] == (GOOD, COMMITS[-1], 2.0)  # the ends first
    assert [s.verdict for s in outcome.steps][0] == "slower"


def test_each_step_is_measured_against_the_last_commit_known_good() -> None:
    judge = PlantedJudge(5)
    search(COMMITS, GOOD, judge, Settings())
    for good, candidate, _ in judge.calls:
        before = -1 if good == GOOD else COMMITS.index(good)
        assert before < 5  # fast: the slowdown came after it
        assert before < COMMITS.index(candidate)


def test_an_unsure_step_is_measured_longer_not_guessed() -> None:
    judge = PlantedJudge(3, unsure_until=4.0)  # 2 s is too short, 4 s decides
    outcome = search(COMMITS, GOOD, judge, Settings(max_seconds=2.0))
    assert outcome.first_bad == COMMITS[3]
    assert [seconds for _, _, seconds in judge.calls[:2]] == [2.0, 4.0]
    assert [s.verdict for s in outcome.steps[:2]] == ["unsure", "slower"]


def test_a_step_that_stays_unsure_ends_the_search_and_says_where() -> None:
    judge = PlantedJudge(3, unsure_until=1e9)
    outcome = search(COMMITS, GOOD, judge, Settings(max_seconds=2.0))
    assert outcome.first_bad is None and outcome.runs == MAX_LONGER + 1
    assert [s.seconds for s in outcome.steps] == [2.0, 4.0, 8.0]
    assert "BAD against GOOD stayed unsure after 3 runs, the last of 8 s" in outcome.why


def test_nothing_to_find_where_bad_is_not_slower() -> None:
    outcome = search(COMMITS, GOOD, PlantedJudge(None), Settings())
    assert outcome.first_bad is None and outcome.runs == 1
    assert outcome.why == "BAD against GOOD is same, not slower: nothing to find"


def test_a_broken_commit_in_the_middle_stops_the_search() -> None:
    judge = PlantedJudge(6, broken=COMMITS[3])
    outcome = search(COMMITS, GOOD, judge, Settings())
    assert outcome.first_bad is None and outcome.runs == 2
    assert outcome.why.startswith(f"{COMMITS[3][:10]} against {GOOD[:10]} is broken")
    assert outcome.why.endswith(f"lies after {GOOD[:10]}, up to {COMMITS[-1][:10]}")


# ------------------------------------------------------------------ the command
@pytest.fixture
def history(tmp_path: Path) -> list[str]:
    """A git repository of GOOD and eight commits after it; returns their hashes."""
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org",
           "PATH": "/usr/bin:/bin"}

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], check=True, text=True,
                              capture_output=True, env=env).stdout.strip()

    git("init", "-q")
    hashes = []
    for number in range(9):
        git("commit", "-q", "--allow-empty", "-m", f"change {number}")
        hashes.append(git("rev-parse", "HEAD"))
    return hashes


def test_the_command_names_the_first_slower_commit(history, tmp_path, monkeypatch,
                                                   capsys) -> None:
    slow_from = history[6]  # "change 6"
    order = {commit: i for i, commit in enumerate(history)}

    def build(repo, revision, cache, log=None):
        return SimpleNamespace(revision=revision, commit=revision, root=tmp_path,
                               short=revision[:10])

    class FakeGate:
        def __init__(self, base, head, options, settings, logs) -> None:
            self.base, self.head = base.commit, head.commit

        def measure(self, pair: ContinuousRow) -> ContinuousRow:
            slower = order[self.head] >= order[slow_from] > order[self.base]
            pair.verdict, pair.reason = ("slower" if slower else "same"), "planted"
            ratio = 1.1 if slower else 1.0
            pair.estimate = PairedRatio(ratio, ratio - 0.01, ratio + 0.01, 0.001, 40, 0.99)
            return pair

        def close(self) -> None:
            pass

    monkeypatch.setattr(builds, "build", build)
    monkeypatch.setattr(continuous, "Gate", FakeGate)
    repo = str(tmp_path / "repo")
    assert main(["bisect", history[0], history[-1], "--repo", repo, "--kernel",
                 "cpu.seq_ikj", "--shape", "64"]) == 0
    out = capsys.readouterr().out
    assert f"first slower commit: {slow_from} change 6 (after {history[5][:10]}" in out
    assert "1. " in out and "slower 1.100 [1.090-1.110]" in out
    assert f"{history[-1][:10]} against {history[0][:10]}: slower" in out


def test_bad_input_is_one_line(history, tmp_path, capsys) -> None:
    repo = str(tmp_path / "repo")
    assert main(["bisect", history[-1], history[0], "--repo", repo, "--kernel",
                 "cpu.seq_ikj", "--shape", "64"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"mmsuite: error: GOOD {history[-1][:10]} is not an ancestor of BAD "
        f"{history[0][:10]}")
    assert main(["bisect", history[0], "nowhere", "--repo", repo, "--kernel",
                 "cpu.seq_ikj"]) == 2
    assert "BAD: unknown revision 'nowhere'" in capsys.readouterr().err
    assert main(["bisect", history[0], history[-1], "--repo", repo, "--kernel",
                 "cpu.seq_ikj", "--shape", "32,64"]) == 2
    assert "give one --shape" in capsys.readouterr().err


# ------------------------------------------------------------------ a user's plugin repository


@pytest.fixture
def plugin_history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A user's repository of one C plugin kernel (mine.gemm): GOOD and eight commits that
    edit its source, the sixth marking it ``SLOW``; the catalogue and plugin registry are
    restored afterwards. Returns the repository and its nine hashes."""
    from mmsuite import plugins

    monkeypatch.delenv(plugins.ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    ids, loaded = set(catalogue.BY_ID), dict(plugins._loaded)
    repo = tmp_path / "mine"
    repo.mkdir()

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c",
                               "user.email=t@example.org", *args], check=True, text=True,
                              capture_output=True).stdout.strip()

    (repo / "kernels.py").write_text(
        'import mmsuite\nmmsuite.register(id="mine.gemm", backend="cpu", source="gemm.c", '
        'entry="mine_gemm")\n')
    source = GOOD_C
    git("init", "-q")
    hashes = []
    for number in range(9):
        source += "/* SLOW */\n" if number == 6 else f"/* note {number} */\n"
        (repo / "gemm.c").write_text(source)
        git("add", "-A")
        git("commit", "-qm", f"change {number}")
        hashes.append(git("rev-parse", "HEAD"))
    yield repo, hashes
    for kernel_id in set(catalogue.BY_ID) - ids:
        del catalogue._BY_ID[kernel_id]
    plugins._loaded.clear()
    plugins._loaded.update(loaded)


def test_the_command_bisects_a_users_plugin_repository(plugin_history, tmp_path, monkeypatch,
                                                       capsys) -> None:
    """With --plugin each commit of --repo is exported, never built, and runs on this
    mmsuite with that commit's own plugin file; the kernel is the plugin's."""
    import mmsuite

    repo, hashes = plugin_history
    site = Path(mmsuite.__file__).resolve().parent.parent
    measured: list[tuple[str, str]] = []

    def no_build(*args, **kwargs):
        raise AssertionError("a plugin repository's commit is exported, not built")

    class FakeGate:
        def __init__(self, base, head, options, settings, logs) -> None:
            for side in (base, head):
                assert side.site == site and len(side.plugin_paths) == 1
                assert Path(side.plugin_paths[0]).parent == side.root / "src"
            self.base, self.head = base, head

        def _slow(self, side) -> bool:  # what the side's own exported source says
            return "SLOW" in (Path(side.plugin_paths[0]).parent / "gemm.c").read_text()

        def measure(self, pair: ContinuousRow) -> ContinuousRow:
            assert pair.kernel.id == "mine.gemm"
            measured.append((self.base.commit, self.head.commit))
            slower = self._slow(self.head) and not self._slow(self.base)
            ratio = 1.3 if slower else 1.0
            pair.verdict, pair.reason = ("slower" if slower else "same"), "planted"
            pair.estimate = PairedRatio(ratio, ratio - 0.01, ratio + 0.01, 0.001, 40, 0.99)
            return pair

        def close(self) -> None:
            pass

    monkeypatch.setattr(builds, "build", no_build)
    monkeypatch.setattr(continuous, "Gate", FakeGate)
    assert main(["bisect", hashes[0], hashes[-1], "--repo", str(repo), "--plugin",
                 "kernels.py", "--kernel", "mine.gemm", "--shape", "64",
                 "--cache-dir", str(tmp_path / "builds")]) == 0
    out = capsys.readouterr().out
    assert f"first slower commit: {hashes[6]} change 6 (after {hashes[5][:10]}; 4 " in out
    assert len(measured) == 4 and measured[0] == (hashes[0], hashes[-1])


def test_a_plugin_path_is_one_of_the_repositorys_files(plugin_history, tmp_path,
                                                       capsys) -> None:
    repo, hashes = plugin_history
    common = ["bisect", hashes[0], hashes[-1], "--repo", str(repo), "--kernel", "mine.gemm",
              "--shape", "64", "--cache-dir", str(tmp_path / "builds")]
    assert main([*common, "--plugin", str(repo / "kernels.py")]) == 2
    assert capsys.readouterr().err.strip() == (
        "mmsuite: error: --plugin with bisect names a file of --repo's commits: give its "
        "path relative to the repository's root")
    assert main([*common, "--plugin", "other.py"]) == 2
    err = capsys.readouterr().err
    assert "BAD: " in err and "has no plugin file other.py" in err
