"""The command line's results files end to end, in real processes where it matters: one
writer per file, nothing lost to a kill, a full disk, a crashing kernel or a second
Ctrl-C, and every damaged or special input refused in one line."""

from __future__ import annotations

import errno
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mmsuite import results
from mmsuite.cli import main
from tests.planted import native
from tests.test_cli import _asv_tree

ROOT = Path(__file__).resolve().parent.parent
QUICK = ["run", "--shape", "37x29x41", "--repeats", "2", "--warmup", "0"]
SEQ = ["--kernel", "cpu.seq_naive", "--kernel", "cpu.seq_ikj", "--kernel", "cpu.seq_tiled"]
# A CPU sweep of a few seconds a row: a second process or a kill lands mid-run.
SLOW = ["run", "--kernel", "cpu.blas", "--kernel", "cpu.seq_naive", "--kernel", "cpu.seq_ikj",
        "--kernel", "cpu.seq_tiled", "--shape", "700", "--repeats", "3", "--warmup", "0"]


def _start(argv: list[str], **kwargs) -> subprocess.Popen:
    # A child of a non-interactive shell inherits SIGINT ignored; restore the default.
    return subprocess.Popen([sys.executable, "-m", "mmsuite.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                            **kwargs)


def _cli(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mmsuite.cli", *argv], capture_output=True,
                          text=True, timeout=600, **kwargs)


def _journaled_rows(path: Path) -> int:
    journal = results.journal_path(path)
    return len(journal.read_text().splitlines()) - 1 if journal.exists() else 0


def _wait_for_rows(proc: subprocess.Popen, path: Path, rows: int) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if _journaled_rows(path) >= rows:
            return
        time.sleep(0.02)
    raise AssertionError(f"no {rows} journaled rows; {proc.poll()=}")


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("mmsuite: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ------------------------------------------------------------ 1: one writer a file
def test_a_second_writer_is_refused_naming_the_first_and_loses_nothing(tmp_path) -> None:
    path = tmp_path / "r.json"
    first = _start(SLOW + ["--json", str(path)])
    try:
        _wait_for_rows(first, path, 1)
        second = _cli(SLOW + ["--json", str(path)])
        assert second.returncode == 2
        assert _one_error_line(second.stderr) == (
            f"mmsuite: error: {path} is being written by another mmsuite run (pid {first.pid}); "
            "wait for it to finish or choose another --json")
    finally:
        out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err
    saved = results.load(path)["results"]
    assert [r["kernel"] for r in saved] == ["cpu.blas", "cpu.seq_naive", "cpu.seq_ikj",
                                            "cpu.seq_tiled"]
    assert not results.journal_path(path).exists()  # saved: the journal went
    assert not results.lock_path(path).exists()


# --------------------------------------------- 2: a killed run's journal is never wiped
def test_after_sigkill_a_rerun_refuses_and_resume_finishes_with_every_row(tmp_path) -> None:
    path = tmp_path / "r.json"
    proc = _start(SLOW + ["--json", str(path)])
    _wait_for_rows(proc, path, 2)
    proc.kill()
    proc.communicate(timeout=60)
    journal = results.journal_path(path)
    before = journal.read_text()
    killed = results.load_rows(journal)
    assert 2 <= len(killed) < 4 and results.lock_path(path).exists()  # left, but not locked

    again = _cli(SLOW + ["--json", str(path)])
    assert again.returncode == 2
    assert _one_error_line(again.stderr) == (
        f"mmsuite: error: {journal} holds {len(killed)} rows of an interrupted run; finish it "
        f"with --resume {path}, or move {journal} away to start over")
    assert journal.read_text() == before  # not wiped, not touched

    resumed = _cli(SLOW + ["--resume", str(path)])
    assert resumed.returncode == 0, resumed.stderr
    final = results.load(path)["results"]
    assert [r["kernel"] for r in final] == ["cpu.blas", "cpu.seq_naive", "cpu.seq_ikj",
                                            "cpu.seq_tiled"]
    for row in killed:  # taken over, not measured again
        assert final[[r["kernel"] for r in final].index(row["kernel"])]["kernel_ms"] == \
            row["kernel_ms"]
    assert results.unfinished_rows(journal) == 0  # complete: a plain rerun may start over
    assert _cli(QUICK + ["--kernel", "cpu.blas", "--json", str(path)]).returncode == 0


def test_a_resume_killed_in_turn_loses_nothing(tmp_path) -> None:
    path = tmp_path / "r.json"
    proc = _start(SLOW + ["--json", str(path)])
    _wait_for_rows(proc, path, 1)
    proc.send_signal(signal.SIGINT)  # saves r.json with the finished rows
    proc.communicate(timeout=120)
    first = results.load(path)["results"]
    proc = _start(SLOW + ["--resume", str(path)])
    _wait_for_rows(proc, path, len(first) + 1)
    proc.kill()
    proc.communicate(timeout=60)
    journaled = results.load_rows(results.journal_path(path))
    assert len(journaled) > len(first)
    assert _cli(SLOW + ["--resume", str(path)]).returncode == 0
    final = {r["kernel"]: r for r in results.load(path)["results"]}
    for row in journaled:  # the second run's rows were taken over, not measured again
        assert final[row["kernel"]]["kernel_ms"] == row["kernel_ms"]


# ------------------------------------------------ 3: --resume keeps every row of FILE
def test_resume_with_another_selection_keeps_every_row_of_the_file(tmp_path, capsys) -> None:
    path = tmp_path / "keep.json"
    assert main(QUICK + SEQ + ["--json", str(path)]) == 0
    before = results.load(path)["results"]
    assert main(["run", "--kernel", "cpu.blas", "--shape", "8x8x8", "--repeats", "2",
                 "--warmup", "0", "--resume", str(path)]) == 0
    after = results.load(path)["results"]
    assert len(after) == len(before) + 1
    assert [r["kernel_ms"] for r in after[1:]] == [r["kernel_ms"] for r in before]
    assert after[0]["kernel"] == "cpu.blas" and after[0]["problem"]["m"] == 8


# ------------------------------------------------------- 4: disk full, file too big
def test_a_file_size_limit_is_one_line_after_the_table_with_the_journal_kept(tmp_path) -> None:
    path = tmp_path / "r.json"

    def limit() -> None:  # like `ulimit -f 4`: the journal's header fits, the rest does not
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    proc = subprocess.run([sys.executable, "-m", "mmsuite.cli", *QUICK, *SEQ, "--json",
                           str(path)], capture_output=True, text=True, timeout=600,
                          preexec_fn=limit)
    assert proc.returncode == 2, proc.stderr
    assert "cpu.seq_tiled" in proc.stdout  # the table is printed
    assert f"mmsuite: error: cannot write {path}: File too large" in proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert f"run the same command with --resume {path}" in proc.stderr
    journal = results.journal_path(path)
    assert journal.exists() and results.unfinished_rows(journal) > 0
    assert not path.exists() and not list(tmp_path.glob(".r.json.*"))


def test_a_full_disk_is_one_line_naming_the_path(tmp_path, capsys, monkeypatch) -> None:
    path = tmp_path / "r.json"

    def full(target, *args):
        raise OSError(errno.ENOSPC, "No space left on device", str(target))

    monkeypatch.setattr(results, "save", full)
    assert main(QUICK + ["--kernel", "cpu.blas", "--json", str(path)]) == 2
    out, err = capsys.readouterr()
    assert "cpu.blas" in out
    assert _one_error_line(err) == f"mmsuite: error: cannot write {path}: No space left on device"
    assert results.unfinished_rows(results.journal_path(path)) == 1


# ---------------------------------------------------- 8: a segfaulting CPU kernel
def test_a_planted_segfault_costs_one_row_and_resume_does_not_rerun_it(tmp_path) -> None:
    planted = tmp_path / "planted"
    planted.mkdir()
    native.sitecustomize(native.build(planted))
    paths = [str(planted), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    path = tmp_path / "r.json"
    proc = _cli(QUICK + SEQ + ["--json", str(path)], env=env)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    rows = {r["kernel"]: r for r in results.load(path)["results"]}
    assert [r["status"] for r in rows.values()] == ["ok", "crashed", "ok"]
    assert rows["cpu.seq_ikj"]["reason"] == \
        "its worker process died: Fatal Python error: Segmentation fault"

    again = _cli(QUICK + SEQ + ["--resume", str(path)], env=env)  # not run again
    assert again.returncode == 1 and "cpu.seq_ikj @ 37x29x41: crashed" in again.stderr
    retried = _cli(QUICK + SEQ + ["--resume", str(path), "--retry-crashed"])  # fixed build
    assert retried.returncode == 0, retried.stderr
    assert results.load(path)["results"][1]["status"] == "ok"


# ------------------------------------------------------ 9, 10: limits checked up front
@pytest.mark.parametrize("value", ["64000", "20000"])
def test_omp_num_threads_obeys_the_threads_cap(value, monkeypatch, capsys) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert main(QUICK + ["--kernel", "cpu.blas"]) == 2
    err = capsys.readouterr().err
    assert _one_error_line(err).startswith(
        f"mmsuite: error: OMP_NUM_THREADS={value}: {value} is more than 4 threads per core")


@pytest.mark.parametrize("option,value,what", [("--alpha", "1e-50", "0"),
                                               ("--beta", "-1e-50", "0"),
                                               ("--alpha", "1e-40", "a subnormal")])
def test_alpha_and_beta_that_vanish_in_float32_are_refused(option, value, what, capsys) -> None:
    assert main(QUICK + ["--kernel", "cpu.blas", option, value]) == 2
    assert _one_error_line(capsys.readouterr().err) == (
        f"mmsuite: error: argument {option}: {value} is {what} in float32; "
        "expected 0 or |x| >= 1.2e-38")


# ---------------------------------------------- 11: a second Ctrl-C while saving
def test_ctrl_c_while_saving_waits_for_the_results_file(tmp_path, capsys, monkeypatch) -> None:
    path = tmp_path / "r.json"
    real_save = results.save

    def interrupted_save(*args):
        os.kill(os.getpid(), signal.SIGINT)  # the user presses Ctrl-C as the file is written
        time.sleep(0.05)
        real_save(*args)

    monkeypatch.setattr(results, "save", interrupted_save)
    assert main(QUICK + ["--kernel", "cpu.blas", "--json", str(path)]) == 130
    assert results.load(path)["results"][0]["status"] == "ok"
    assert "mmsuite: interrupted while saving; every row was saved" in capsys.readouterr().err


# ------------------------------------------------------- 13: odd inputs and outputs
def test_a_fifo_as_input_is_refused_at_once(tmp_path, capsys) -> None:
    fifo = tmp_path / "r.json"
    os.mkfifo(fifo)
    for argv in (["report", str(fifo)], ["compare", str(fifo), str(fifo)],
                 QUICK + ["--resume", str(fifo), "--json", str(tmp_path / "x.json")]):
        assert main(argv) == 2
        assert f"{fifo} is not a regular file" in _one_error_line(capsys.readouterr().err)


def test_json_naming_a_folder_is_refused(tmp_path, capsys) -> None:
    assert main(QUICK + ["--json", f"{tmp_path}/dir/"]) == 2
    assert "names a folder; give a file name" in _one_error_line(capsys.readouterr().err)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("option", ["--baseline", "--asv"])
def test_report_baseline_and_asv_need_out(tmp_path, capsys, option) -> None:
    path = tmp_path / "r.json"
    results.save(path, [], {}, {})
    assert main(["report", str(path), option, str(path)]) == 2
    assert _one_error_line(capsys.readouterr().err) == \
        f"mmsuite: error: {option} goes into the report: give --out DIR too"


def test_history_machine_outside_the_results_dir_is_refused(tmp_path, capsys) -> None:
    pytest.importorskip("asv")
    root = tmp_path / "results"
    _asv_tree(root)
    assert main(["history", "--results-dir", str(root), "--machine", "../../..",
                 "--out", str(tmp_path / "h.png")]) == 2
    assert _one_error_line(capsys.readouterr().err) == (
        "mmsuite: error: --machine: '../../..' is not an asv machine name (a folder of the "
        "results directory)")


# ------------------------------------------ 12: report --asv on a damaged asv folder
def test_report_asv_with_a_damaged_benchmarks_json_is_one_line(tmp_path, capsys) -> None:
    pytest.importorskip("asv")
    root = tmp_path / "results"
    _asv_tree(root)
    (root / "benchmarks.json").write_text("{")
    path = tmp_path / "r.json"
    results.save(path, [], {}, {})
    assert main(["report", str(path), "--asv", str(root), "--out", str(tmp_path / "out")]) == 2
    assert _one_error_line(capsys.readouterr().err).startswith(
        f"mmsuite: error: {root / 'benchmarks.json'} is not JSON")
    (root / "benchmarks.json").write_text("[" * 100_000 + "]" * 100_000)
    assert main(["report", str(path), "--asv", str(root), "--out", str(tmp_path / "out")]) == 2
    assert "nested too deeply" in _one_error_line(capsys.readouterr().err)


# ------------------------------------------------------------- 14: planted symlinks
def _planted_links(folder: Path, names: list[str], target: Path) -> list[Path]:
    folder.mkdir(exist_ok=True)
    links = [folder / name for name in names]
    for link in links:
        link.symlink_to(target)
    return links


def test_outputs_never_follow_a_symlink_planted_at_their_path(tmp_path, capsys) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    path = tmp_path / "r.json"
    markdown, = _planted_links(tmp_path, ["r.md"], target)
    assert main(QUICK + ["--kernel", "cpu.blas", "--json", str(path), "--markdown",
                         str(markdown)]) == 0
    out = tmp_path / "out"
    links = _planted_links(out, ["report.md", "results.csv", "index.html"], target)
    plots = _planted_links(tmp_path / "plots", ["ladder_0.png"], target)
    compared, = _planted_links(tmp_path, ["c.md"], target)
    assert main(["report", str(path), "--out", str(out), "--plots", str(tmp_path / "plots")]) == 0
    assert main(["compare", str(path), str(path), "--markdown", str(compared)]) == 0
    assert target.read_text() == "keep me"
    for link in [markdown, *links, *plots, compared]:
        assert not link.is_symlink() and link.stat().st_size > 0, link


def test_csv_cells_that_a_spreadsheet_would_run_are_escaped(tmp_path, capsys) -> None:
    path = tmp_path / "r.json"
    row = {"kernel": "cpu.seq_naive", "backend": "cpu", "status": "error", "adds": "naive",
           "reason": '=HYPERLINK("http://example.com","x")',
           "problem": {"m": 4, "n": 4, "k": 4, "batch": 1, "layout": "row", "alpha": 1.0,
                       "beta": 0.0}}
    reasons = ['=HYPERLINK("http://example.com","x")', "@SUM(1)", "+1", "-1", "fine"]
    results.save(path, [{**row, "kernel": f"cpu.k{i}", "reason": reason}
                        for i, reason in enumerate(reasons)], {}, {})
    assert main(["report", str(path), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "results.csv").read_text()
    assert "'=HYPERLINK(" in text and "'@SUM(1)" in text and ",'+1," in text
    assert ",'-1," in text and ",fine," in text
    assert ",=" not in text and ",@" not in text


def test_the_main_process_reports_a_native_crash() -> None:
    proc = subprocess.run([sys.executable, "-c", "import faulthandler, sys\n"
                           "from mmsuite.cli import main\n"
                           "main(['list'])\n"
                           "print('enabled' if faulthandler.is_enabled() else 'off')\n"
                           "import ctypes; ctypes.string_at(0)"],
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.splitlines()[-1] == "enabled"
    assert proc.returncode == -signal.SIGSEGV
    assert "Fatal Python error: Segmentation fault" in proc.stderr


# ----------------------------------------------- 5, 6, 7: damaged files, every reader
def _damaged(path: Path, how: str) -> None:
    document = json.loads(path.read_text())
    if how == "negative samples":
        for record in document["results"]:
            record["kernel_ms"]["samples"] = [-1.0] * len(record["kernel_ms"]["samples"])
        path.write_text(json.dumps(document))
    elif how == "deep nesting":
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif how == "typed environment":
        document["environment"]["cpu_cores"] = "two"
        path.write_text(json.dumps(document))
    elif how == "no backend":
        del document["results"][0]["backend"]
        path.write_text(json.dumps(document))


@pytest.mark.parametrize("how,message", [
    ("negative samples", "record 0 (cpu.blas): field 'kernel_ms.samples[0]' is -1.0, "
                         "expected a number above 0"),
    ("deep nesting", "is nested too deeply to be a results file"),
    ("typed environment", "field 'environment.cpu_cores' is 'two', expected null or integer"),
    ("no backend", "record 0 (cpu.blas): field 'backend' is missing"),
])
def test_compare_report_and_resume_refuse_a_damaged_file_in_one_line(tmp_path, capsys, how,
                                                                      message) -> None:
    base = tmp_path / "base.json"
    assert main(QUICK + ["--kernel", "cpu.blas", "--json", str(base)]) == 0
    damaged = tmp_path / "damaged.json"
    damaged.write_text(base.read_text())
    _damaged(damaged, how)
    capsys.readouterr()
    for argv in (["compare", str(base), str(damaged)], ["report", str(damaged)],
                 QUICK + ["--kernel", "cpu.blas", "--resume", str(damaged)]):
        assert main(argv) == 2, argv
        line = _one_error_line(capsys.readouterr().err)
        assert str(damaged) in line and message in line, line


# ------------------------------------------------- files mmsuite makes beside the user's
@pytest.mark.parametrize("planted", ["link", "folder"])
def test_a_link_or_folder_at_the_lock_is_one_line_naming_it(tmp_path, capsys,
                                                             planted) -> None:
    out, victim = tmp_path / "r.json", tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    lock = results.lock_path(out)
    if planted == "link":
        lock.symlink_to(victim)
    else:
        lock.mkdir()
    assert main([*QUICK, "--kernel", "cpu.seq_ikj", "--json", str(out)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"mmsuite: error: {lock} (made beside {out}): ")
    assert victim.read_text() == "keep me\n" and not out.exists()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_an_output_whose_temporary_file_cannot_be_made_names_the_output(capsys) -> None:
    with pytest.raises(OSError) as raised:
        results.write_atomically(Path("/proc/no-such-output.json"), "{}")
    assert raised.value.filename == "/proc/no-such-output.json"
    assert main([*QUICK, "--kernel", "cpu.seq_ikj", "--json", "/proc/x.json"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("mmsuite: error: /proc/x.json")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_compare_exits_2_not_1_when_its_junit_cannot_be_written(tmp_path, capsys) -> None:
    """1 is the gate's "slower": a file it cannot write must not read as one."""
    out = tmp_path / "r.json"
    assert main([*QUICK, "--kernel", "cpu.seq_ikj", "--json", str(out)]) == 0
    capsys.readouterr()
    assert main(["compare", str(out), str(out), "--junit", "/proc/x.xml"]) == 2
    assert capsys.readouterr().err.strip() == ("mmsuite: error: /proc/x.xml: "
                                               "No such file or directory")


@pytest.mark.parametrize("command", ["compare", "continuous"])
def test_a_bug_in_a_gate_exits_3_never_its_verdicts_1(command, monkeypatch, capsys) -> None:
    from mmsuite.commands import COMMANDS

    def broken(args, console):
        raise ValueError("an internal inconsistency")

    monkeypatch.setattr(COMMANDS[command], "run", broken)
    argv = ["compare", "a.json", "b.json"] if command == "compare" else \
        ["continuous", "a", "b"]
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert "ValueError: an internal inconsistency" in err and "internal error" in err
