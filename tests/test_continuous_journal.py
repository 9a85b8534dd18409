"""`mmsuite continuous --json X`'s journal (X.jsonl): every finished row kept the moment it
is judged, so that a kill or Ctrl-C at any moment loses no finished row, and `--resume`
measures only the rows the journal lacks, refusing a journal of another gate."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from mmsuite import continuous_journal, results
from mmsuite.cli import main
from mmsuite.continuous import ContinuousRow, ContinuousSide, Settings
from tests.test_continuous import (  # noqa: F401  (fixtures, used by name)
    KERNEL,
    PROBLEM,
    FakeWorker,
    fake_builds,
    fake_workers,
    gate,
    halves,
    patch_fake_builds,
    rounds,
)

REPO = Path(__file__).resolve().parent.parent
KERNELS = ["cpu.seq_ikj", "cpu.seq_tiled", "cpu.omp_naive"]
GATE = [
    "continuous",
    "base-rev",
    "head-rev",
    *[a for k in KERNELS for a in ("--kernel", k)],
    "--shape",
    "64",
]


def opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The kernels the fake workers open, HEAD's side only (one entry a row opened)."""
    seen: list[str] = []
    answer = FakeWorker.request

    def request(self, message, timeout):
        if message["op"] == "open" and self.name == "head-rev":
            seen.append(message["kernel"])
        return answer(self, message, timeout)

    monkeypatch.setattr(FakeWorker, "request", request)
    return seen


def interrupt_in_row(monkeypatch: pytest.MonkeyPatch, row: int) -> None:
    """Ctrl-C in the first round of the ``row``-th row (1-based). Every row is opened
    before the first is measured (rows of identical code are settled first), so the row
    is known by the kernel last opened when a turn is asked for."""
    opened = [""]
    answer = FakeWorker.request

    def request(self, message, timeout):
        if message["op"] == "open":
            opened[0] = message["kernel"]
        if message["op"] == "turn" and opened[0] == KERNELS[row - 1]:
            raise KeyboardInterrupt
        return answer(self, message, timeout)

    monkeypatch.setattr(FakeWorker, "request", request)


# ------------------------------------------------------------------ the rows as lines
def test_a_row_reads_back_as_it_was_journaled() -> None:
    pair = ContinuousRow(
        KERNEL,
        PROBLEM,
        ContinuousSide("ok", rounds=rounds(1.0), code={"hash": "a"}),
        ContinuousSide("ok", rounds=rounds(1.3, seed=1), code={"hash": "b"}),
        worker_pair_starts=halves(20, 2),
    )
    from mmsuite.stats import paired_ratio

    pair.estimate = paired_ratio(pair.base.rounds[:3], pair.head.rounds[:3], 0.99)
    assert pair.estimate.high == float("inf")  # too few rounds: JSON writes it as null
    pair.verdict, pair.reason, pair.budget = "slower", "whole interval above", 8.0
    line = json.loads(json.dumps(results._clean(continuous_journal.pair_record(pair, 2.5))))
    back, unspent = continuous_journal.pair_from_record(line)
    assert unspent == 2.5
    assert back == pair


@pytest.mark.usefixtures("fake_workers")
def test_a_row_cut_short_is_never_judged_from_its_rounds(tmp_path) -> None:
    """Rounds that stop where a signal came, not at a look, give no verdict: at its last
    look's confidence this row's rounds, from two worker pairs, would read slower."""
    judge = gate(1.0, 1.5, tmp_path)
    pair = ContinuousRow(
        KERNEL,
        PROBLEM,
        ContinuousSide("ok", rounds=rounds(1.0, 40), code={"hash": "a"}),
        ContinuousSide("ok", rounds=rounds(1.5, 40, seed=1), code={"hash": "b"}),
        worker_pair_starts=halves(40, 2),
    )
    judge._judge(pair, final=True)
    assert pair.verdict == "slower"
    pair.interrupted = True
    judge._judge(pair, final=True)
    assert pair.verdict == "unsure"
    assert pair.reason.startswith("interrupted after 40 rounds: not judged")


@pytest.mark.usefixtures("fake_workers")
def test_sigterm_cuts_a_row_short_as_ctrl_c_does(tmp_path, monkeypatch) -> None:
    class Terminated(BaseException):
        pass

    answer = FakeWorker.request

    def terminated(self, message, timeout):
        if message["op"] == "turn" and len(FakeWorker.log) > 30:
            raise Terminated
        return answer(self, message, timeout)

    monkeypatch.setattr(FakeWorker, "request", terminated)
    pair = ContinuousRow(KERNEL, PROBLEM)
    with pytest.raises(Terminated):
        gate(1.0, 1.0, tmp_path, max_seconds=60).measure(pair)
    assert pair.interrupted and pair.verdict == "unsure"


# ------------------------------------------------------------------ the command
@pytest.mark.usefixtures("fake_builds")
def test_the_journal_goes_once_the_files_hold_every_row(tmp_path) -> None:
    out = tmp_path / "gate.json"
    assert main([*GATE, "--json", str(out)]) == 1
    assert len(results.load(out)["results"]) == 3
    assert not results.journal_path(out).exists()


@pytest.mark.usefixtures("fake_builds")
def test_ctrl_c_keeps_the_journal_and_resume_measures_only_the_rest(
    monkeypatch, tmp_path, capsys
) -> None:
    out = tmp_path / "gate.json"
    interrupt_in_row(monkeypatch, 2)
    assert main([*GATE, "--json", str(out)]) == 130
    err = capsys.readouterr().err
    assert "run the same command with --resume to finish" in err
    journal = results.journal_path(out)
    assert results.unfinished_rows(journal) == 1  # the row cut short is not journaled
    # The same command without --resume would wipe the finished row: refused.
    monkeypatch.undo()
    patch_fake_builds(monkeypatch, tmp_path)
    assert main([*GATE, "--json", str(out)]) == 2
    line = capsys.readouterr().err.strip()
    assert line == (
        f"mmsuite: error: {journal} holds 1 rows of a gate that was cut short; "
        f"finish it with --resume, or move {journal} away to start over"
    )
    seen = opened(monkeypatch)
    assert main([*GATE, "--json", str(out), "--resume"]) == 1
    assert list(dict.fromkeys(seen)) == KERNELS[1:]  # the finished row is not measured again
    assert "resumed: 1 of 3 rows finished before" in capsys.readouterr().err
    rows = results.load(out)["results"]
    assert [r["kernel"] for r in rows] == KERNELS
    assert all(r["paired"]["verdict"] == "slower" for r in rows)
    assert len(results.load(tmp_path / "gate.base.json")["results"]) == 3
    assert not journal.exists()


@pytest.mark.parametrize(
    "change, said",
    [
        (["--max-time", "3"], "other settings (max_seconds)"),
        (["--kernel", "cpu.blas"], "other rows"),
    ],
)
@pytest.mark.usefixtures("fake_builds")
def test_resume_refuses_the_journal_of_another_gate(
    monkeypatch, tmp_path, capsys, change, said
) -> None:
    out = tmp_path / "gate.json"
    interrupt_in_row(monkeypatch, 2)
    assert main([*GATE, "--json", str(out)]) == 130
    monkeypatch.undo()
    patch_fake_builds(monkeypatch, tmp_path)
    capsys.readouterr()
    assert main([*GATE, *change, "--json", str(out), "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and said in err
    assert err.startswith(
        f"mmsuite: error: --resume: {results.journal_path(out)} is the journal of another gate"
    )
    assert results.unfinished_rows(results.journal_path(out)) == 1  # kept


def test_resume_refuses_a_journal_of_other_revisions(tmp_path) -> None:
    pair = ContinuousRow(KERNEL, PROBLEM)
    mine = continuous_journal.gate_identity("a" * 40, "b" * 40, Settings(), {}, [pair])
    theirs = continuous_journal.gate_identity("a" * 40, "c" * 40, Settings(), {}, [pair])
    path = tmp_path / "gate.jsonl"
    continuous_journal.open_journal(path, theirs, []).close()
    with pytest.raises(continuous_journal.JournalError, match="HEAD cccccccccc, not bbbbbbbbbb"):
        continuous_journal.read(path, mine)


@pytest.mark.usefixtures("fake_builds")
def test_resume_needs_json_and_a_journal(tmp_path, capsys) -> None:
    assert main([*GATE, "--resume"]) == 2
    assert "--resume finishes the gate whose journal is beside --json" in capsys.readouterr().err
    assert main([*GATE, "--json", str(tmp_path / "gate.json"), "--resume"]) == 2
    assert "--resume: no journal at " in capsys.readouterr().err


def test_a_journal_line_torn_by_a_kill_is_skipped(tmp_path) -> None:
    pair = ContinuousRow(
        KERNEL, PROBLEM, ContinuousSide("ok", rounds=[1.0]), ContinuousSide("ok", rounds=[1.1])
    )
    identity = continuous_journal.gate_identity("a", "b", Settings(), {}, [pair])
    path = tmp_path / "gate.jsonl"
    journal = continuous_journal.open_journal(path, identity, [])
    continuous_journal.append(journal, pair, 1.0)
    journal.close()
    with open(path, "a") as fh:
        fh.write('{"kernel": "cpu.seq_ti')
    ((back, _),) = continuous_journal.read(path, identity)
    assert back.kernel.id == KERNEL.id


# ------------------------------------------------------------------ real signals
DRIVER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from mmsuite import builds, continuous
    from mmsuite.cli import main
    from tests.test_continuous import FakeBuild, FakeWorker

    tmp, hook = Path(sys.argv[1]), os.environ.get("GATE_HOOK", "")
    speeds = {"base-rev": 1.0, "head-rev": 1.3}

    def build(repo, revision, cache, log=None):
        fake = FakeBuild(revision, speeds[revision])
        fake.root, fake.commit, fake.short = tmp, revision * 2, revision
        return fake

    builds.build, builds.uncommitted_changes = build, lambda repo: []
    builds.resolve = lambda repo, revision: revision
    continuous.SideWorker = FakeWorker
    answer, finished = FakeWorker.request, [0]

    def request(self, message, timeout):
        if message["op"] == "open" and self.name == "head-rev":
            with open(tmp / "opened", "a") as fh:
                fh.write(message["kernel"] + "\\n")
            # Its second open: the first only learns its code's identity, before row 1
            # is measured (rows of identical code are settled first).
            if hook == "kill-in-row-2" and message["kernel"] == "cpu.seq_tiled" and \\
                    (tmp / "opened").read_text().split().count("cpu.seq_tiled") == 2:
                (tmp / "ready").touch()
                time.sleep(60)
        return answer(self, message, timeout)

    FakeWorker.request = request
    measure, close = continuous.Gate.measure, continuous.Gate.close

    def counted(self, pair, budget=None):
        measure(self, pair, budget)
        finished[0] += 1
        return pair

    def slow_close(self):  # after the last row: the window a Ctrl-C once lost it all in
        if hook == "int-after-last-row" and finished[0] == 3:
            (tmp / "ready").touch()
            time.sleep(3)
        close(self)

    continuous.Gate.measure, continuous.Gate.close = counted, slow_close
    sys.exit(main(sys.argv[2:]))
""")


def gate_process(tmp_path: Path, hook: str, *args: str) -> subprocess.Popen:
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "GATE_HOOK": hook, "PYTHONPATH": path}
    return subprocess.Popen(
        [
            sys.executable,
            str(driver),
            str(tmp_path),
            *GATE,
            "--json",
            str(tmp_path / "gate.json"),
            *args,
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(path: Path, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the driver never reached the hook"
        time.sleep(0.05)


def test_sigkill_keeps_the_finished_rows_and_resume_completes(tmp_path) -> None:
    killed = gate_process(tmp_path, "kill-in-row-2")
    wait_for(tmp_path / "ready", killed)
    killed.kill()  # a CI job's timeout: no chance to save anything
    killed.communicate()
    journal = tmp_path / "gate.jsonl"
    assert not (tmp_path / "gate.json").exists()
    assert results.unfinished_rows(journal) == 1
    (tmp_path / "opened").unlink()
    resumed = gate_process(tmp_path, "", "--resume")
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 1, err
    assert list(dict.fromkeys((tmp_path / "opened").read_text().split())) == KERNELS[1:]
    assert [r["kernel"] for r in results.load(tmp_path / "gate.json")["results"]] == KERNELS
    assert not journal.exists()


def test_ctrl_c_just_after_the_last_row_still_shows_and_saves_every_row(tmp_path) -> None:
    process = gate_process(tmp_path, "int-after-last-row")
    wait_for(tmp_path / "ready", process)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert "Traceback" not in err
    assert "interrupted while saving; every row was saved" in err
    assert [r["kernel"] for r in results.load(tmp_path / "gate.json")["results"]] == KERNELS
    assert "slower" in out
    assert not (tmp_path / "gate.jsonl").exists()
    assert np.isfinite(results.load(tmp_path / "gate.base.json")["results"][0]["gflops"])
