"""`mmsuite history --regressions`: steps found in a history of saved result files (and of
asv's results), at the commit that made them, and nothing where there is none."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from mmsuite import cli, regressions, results
from mmsuite.regressions import find, load_saved
from tests.conftest import needs_asv

KERNELS = ("cpu.seq_naive", "cpu.omp_tiled", "cpu.blas")
SIZES = (256, 512)
BASE_MS = {"cpu.seq_naive": 40.0, "cpu.omp_tiled": 6.0, "cpu.blas": 1.5}
COMMITS = [f"{i:02d}" + "c0ffee" * 6 + "ab" for i in range(1, 13)]  # 40 hex digits each
START = datetime(2026, 11, 1, tzinfo=timezone.utc)
CPU_A, CPU_B = "AMD EPYC 7B13 (test)", "AMD EPYC 9R14 (test)"


def row(kernel: str, size: int, median: float, seed: int, share: float = 0.0) -> dict:
    """A row of 15 samples with 2% log-normal noise around ``median``."""
    samples = list(median * np.exp(np.random.default_rng(seed).normal(0.0, 0.02, 15)))
    flops = 2 * size**3
    middle = float(np.median(samples))
    return {"kernel": kernel, "backend": "cpu", "status": "ok", "reason": "",
            "problem": {"m": size, "n": size, "k": size, "batch": 1},
            "flops": flops, "kernel_ms": {"median": middle, "samples": samples},
            "gflops": flops / (middle * 1e6), "max_rel_err": 1e-7,
            "host_load": {"others_share": share}}


def write_history(folder: Path, step_at: int | None = None, loaded: tuple[int, ...] = (),
                  load_marked: bool = True, machine_b_from: int | None = None) -> list[Path]:
    """Twelve result files, one per commit: every row flat with 2% noise within a run and
    1% between runs; with ``step_at`` the omp_tiled 512 row is 8% slower from that commit
    (1-based) on. Commits in ``loaded`` ran 30% slower under load (recorded as such when
    ``load_marked``); from ``machine_b_from`` on, the files come from a slower CPU."""
    folder.mkdir(exist_ok=True)
    rng = np.random.default_rng(2026)
    paths = []
    for number, commit in enumerate(COMMITS, start=1):
        records = []
        for kernel in KERNELS:
            for size in SIZES:
                level = BASE_MS[kernel] * (size / 256) ** 3 * np.exp(rng.normal(0.0, 0.01))
                if step_at is not None and number >= step_at and \
                        (kernel, size) == ("cpu.omp_tiled", 512):
                    level *= 1.08
                share = 0.0
                if number in loaded:
                    level *= 1.3
                    share = 0.5 if load_marked else 0.0
                if machine_b_from is not None and number >= machine_b_from:
                    level *= 1.15
                records.append(row(kernel, size, level, int(rng.integers(1 << 30)), share))
        cpu = CPU_B if machine_b_from is not None and number >= machine_b_from else CPU_A
        environment = {"git_commit": commit, "cpu": cpu, "cpu_cores": 2,
                       "created": (START + timedelta(days=number)).isoformat()}
        path = folder / f"run-{13 - number:02d}.json"  # names out of commit order
        results.save(path, records, environment, {})
        paths.append(path)
    return paths


def test_an_eight_percent_step_at_commit_7_is_found_there_and_nowhere_else(
        tmp_path: Path) -> None:
    finding = find(load_saved(write_history(tmp_path / "r", step_at=7)))
    assert finding.series_searched == len(KERNELS) * len(SIZES)
    assert len(finding.steps) == 1
    step = finding.steps[0]
    assert step.series.params == {"kernel": "cpu.omp_tiled", "problem": "512x512x512"}
    assert (step.commit, step.previous) == (COMMITS[6], COMMITS[5])
    assert step.slower and step.ratio == pytest.approx(1.08, abs=0.02)
    assert step.confidence >= 0.99
    assert finding.regressions == [step]


def test_twelve_flat_commits_flag_nothing(tmp_path: Path) -> None:
    finding = find(load_saved(write_history(tmp_path / "r")))
    assert finding.series_searched == 6 and finding.steps == [] and finding.left_out == []


def test_commits_measured_under_load_are_left_out_not_judged(tmp_path: Path) -> None:
    # A busy neighbour from commit 8 on: every row 30% slower, and the load on record.
    busy = tuple(range(8, 13))
    marked = find(load_saved(write_history(tmp_path / "marked", loaded=busy)))
    assert marked.steps == []
    assert {point.commit for _, point in marked.left_out} == set(COMMITS[7:])
    assert all(p.kept_apart == "measured under load (other processes used 50% of the CPU)"
               for _, p in marked.left_out)
    # The same times without the load on record read as steps: the record is what saves them.
    unmarked = find(load_saved(write_history(tmp_path / "unmarked", loaded=busy,
                                             load_marked=False)))
    assert {s.commit for s in unmarked.steps} == {COMMITS[7]}
    assert len(unmarked.steps) == 6
    # Asked to, the loaded rows are judged like the rest (a history loaded throughout).
    included = find(load_saved(sorted((tmp_path / "marked").glob("*.json"))),
                    include_kept_apart=True)
    assert {s.commit for s in included.steps} == {COMMITS[7]} and not included.left_out


def test_another_machine_is_another_series(tmp_path: Path) -> None:
    finding = find(load_saved(write_history(tmp_path / "r", machine_b_from=7)))
    assert finding.steps == []
    assert finding.series_searched == 12  # six rows on each CPU
    machines = {s.key.machine for s in load_saved(sorted((tmp_path / "r").glob("*.json")))
                .values()}
    assert machines == {CPU_A, CPU_B}


def test_saved_files_follow_their_commits_order_in_git(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}

    def git(*args: str, when: int = 0) -> str:
        stamp = {"GIT_COMMITTER_DATE": f"{1_700_000_000 + when} +0000",
                 "GIT_AUTHOR_DATE": f"{1_700_000_000 + when} +0000"}
        return subprocess.run(["git", "-C", str(repo), *args], check=True, text=True,
                              capture_output=True, env={**env, **stamp,
                                                        "PATH": "/usr/bin:/bin"}).stdout.strip()

    git("init", "-q")
    commits = []
    for day in range(3):
        git("commit", "-q", "--allow-empty", "-m", f"c{day}", when=day * 86400)
        commits.append(git("rev-parse", "HEAD"))
    paths = []
    for number, commit in enumerate(commits):
        # Each file created in the reverse order of its commit (measured later, backwards).
        environment = {"git_commit": commit, "cpu": CPU_A,
                       "created": (START - timedelta(days=number)).isoformat()}
        path = tmp_path / f"{number}.json"
        results.save(path, [row("cpu.blas", 256, 1.5, number)], environment, {})
        paths.append(path)
    series = next(iter(load_saved(paths, repo=repo).values()))
    assert series.commits == commits
    without_git = next(iter(load_saved(paths, repo=None).values()))
    assert without_git.commits == commits[::-1]


def commits_of_one_second(repo: Path, count: int) -> list[str]:
    """A new repository of ``count`` empty commits all made in one second (their dates cannot
    order them), oldest first."""
    repo.mkdir()
    stamp = "1700000000 +0000"
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org",
           "GIT_COMMITTER_DATE": stamp, "GIT_AUTHOR_DATE": stamp, "PATH": "/usr/bin:/bin"}

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], check=True, text=True,
                              capture_output=True, env=env).stdout.strip()

    git("init", "-q")
    commits = []
    for number in range(count):
        git("commit", "-q", "--allow-empty", "-m", f"c{number}")
        commits.append(git("rev-parse", "HEAD"))
    return commits


def test_commits_of_one_second_keep_git_order(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    commits = commits_of_one_second(repo, 6)
    dates = regressions.commit_dates([*commits, "f" * 40], repo)
    assert sorted(dates, key=dates.__getitem__) == commits  # an unknown commit: no date
    short = regressions.commit_dates([c[:12] for c in commits], repo)
    assert sorted(short, key=short.__getitem__) == [c[:12] for c in commits]


def test_the_command_lists_the_regression_and_fails_the_gate(tmp_path: Path, capsys) -> None:
    write_history(tmp_path / "r", step_at=7)
    plot = tmp_path / "history.png"
    status = cli.main(["history", "--results", str(tmp_path / "r"), "--repo", str(tmp_path),
                       "--fail-on-regression", "--kernel", "cpu.omp*", "--out", str(plot)])
    out = capsys.readouterr().out
    assert status == 1
    assert (f"cpu.omp_tiled [{CPU_A}] problem=512x512x512: slower by +" in out
            and f"at {COMMITS[6][:8]} (after {COMMITS[5][:8]}); confidence 99.5%" in out)
    assert "1 regressions, 0 improvements beyond 5% in 2 series" in out
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_the_gate_passes_a_flat_history(tmp_path: Path, capsys) -> None:
    write_history(tmp_path / "r")
    assert cli.main(["history", "--results", str(tmp_path / "r"), "--repo", str(tmp_path),
                     "--fail-on-regression"]) == 0
    assert "0 regressions, 0 improvements beyond 5% in 6 series" in capsys.readouterr().out


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    assert cli.main(["history", "--results", str(tmp_path / "none"), "--regressions"]) == 2
    assert capsys.readouterr().err.strip().endswith(f"no such file or folder: {tmp_path}/none")
    path = tmp_path / "nocommit.json"
    results.save(path, [row("cpu.blas", 256, 1.5, 0)], {"cpu": CPU_A}, {})
    assert cli.main(["history", "--results", str(path), "--regressions"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"mmsuite: error: {path} records no git commit: its place in the "
                   "history is unknown"]
    assert cli.main(["history", "--results", str(path), "--threshold", "2"]) == 2


ASV_NAME = "sgemm_cpu.CpuKernels.time_kernel"


def write_asv(root: Path, commits: list[str], dates: list[datetime], step_at: int) -> None:
    """asv results of ``commits`` on machine ``box``, each recorded at its date: omp_tiled
    at 512 10% slower from commit ``step_at`` (1-based) on, blas flat, 1.5% noise."""
    params = [["'cpu.omp_tiled'", "'cpu.blas'"], ["512"]]
    (root / "box").mkdir(parents=True)
    (root / "benchmarks.json").write_text(json.dumps({ASV_NAME: {
        "name": ASV_NAME, "type": "time", "unit": "seconds", "version": "1",
        "param_names": ["kernel", "size"], "params": params}, "version": 2}))
    (root / "box" / "machine.json").write_text(json.dumps({"machine": "box", "version": 1}))
    rng = np.random.default_rng(5)
    for number, (commit, date) in enumerate(zip(commits, dates), start=1):
        tiled = 0.006 * (1.10 if number >= step_at else 1.0) * np.exp(rng.normal(0, 0.015))
        blas = 0.0015 * np.exp(rng.normal(0, 0.015))
        (root / "box" / f"{commit[:8]}-env.json").write_text(json.dumps({
            "commit_hash": commit, "env_name": "env", "params": {"machine": "box"},
            "date": int(date.timestamp() * 1000),
            "python": "3.11", "requirements": {}, "env_vars": {}, "durations": {},
            "result_columns": ["result", "params", "version", "started_at", "duration"],
            "results": {ASV_NAME: [[tiled, blas], params, "1", 0, 1.0]}, "version": 2}))


@needs_asv
def test_a_step_in_asv_results_is_found(tmp_path: Path) -> None:
    root = tmp_path / "results"
    write_asv(root, COMMITS, [START + timedelta(days=n) for n in range(1, 13)], step_at=9)
    from mmsuite.history import load_history

    finding = find(load_history(root))
    assert [(s.series.kernel, s.commit) for s in finding.steps] == [("cpu.omp_tiled",
                                                                      COMMITS[8])]
    assert regressions.step_line(finding.steps[0]).startswith(
        "cpu.omp_tiled [box] size=512: slower by +")


@needs_asv
def test_asv_commits_of_one_second_follow_git(tmp_path: Path, capsys) -> None:
    """asv records each commit's date to the second: a series of commits made at once share
    it, and only the repository knows their order."""
    repo = tmp_path / "repo"
    commits = commits_of_one_second(repo, 12)
    assert sorted(commits) != commits  # else the hashes alone would order them
    root = tmp_path / "results"
    write_asv(root, commits, [datetime.fromtimestamp(1700000000, timezone.utc)] * 12,
              step_at=7)
    assert cli.main(["history", "--results-dir", str(root), "--repo", str(repo),
                     "--fail-on-regression"]) == 1
    out = capsys.readouterr().out
    summary = next(line for line in out.splitlines() if line.startswith("cpu.omp_tiled"))
    assert f" ms at {commits[0][:8]} -> " in summary, summary  # first and last in git's order
    assert summary.endswith(f" ms at {commits[-1][:8]}"), summary
    steps = [line for line in out.splitlines() if ": slower by" in line or ": faster by" in line]
    assert len(steps) == 1 and f"at {commits[6][:8]} (after {commits[5][:8]})" in steps[0]
    assert steps[0].startswith("cpu.omp_tiled [box] size=512: slower by +")


def test_a_throttled_gpu_row_is_kept_apart_like_a_loaded_one() -> None:
    gpu = {**row("cuda.k", 512, 1.0, 0), "backend": "cuda", "throttled": ["sw_power_cap"]}
    assert regressions.kept_apart_reason(gpu) == ("measured while the GPU was throttled "
                                                  "(sw_power_cap)")
    assert regressions.kept_apart_reason({**gpu, "throttled": []}) == ""
    assert regressions.kept_apart_reason(row("cpu.blas", 256, 1.0, 0, share=0.05)) == ""
