"""The command line end to end: list, run, --json, report, one-line errors, interrupts."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import signal
import stat
import subprocess
import sys
import time

import pytest

from mmsuite import catalogue, results, workers
from mmsuite import sweep as sweep_module
from mmsuite.backends import KernelUnavailable
from mmsuite.cli import build_parser, main
from mmsuite.commands import COMMANDS, common, listing
from mmsuite.commands import run as run_command
from mmsuite.commands.common import problems_from_args, warn

CPU_QUICK = ["run", "--backend", "cpu", "--shape", "37x29x41", "--repeats", "2", "--warmup", "0"]


def test_list_shows_every_kernel_and_reasons(capsys: pytest.CaptureFixture) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for kernel_id in ("cpu.seq_naive", "cpu.blas", "opencl.naive", "cuda.cublas"):
        assert kernel_id in out
    assert "presets:" in out


def test_list_is_one_line_a_kernel_with_each_reason_once(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    reasons = {"cuda": "no GPU here (a long reason " + "y" * 120 + ")", "opencl": ""}
    monkeypatch.setattr(listing, "unavailable_reason",
                        lambda kernel, options: reasons.get(kernel.backend, ""))
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    for kernel in catalogue.kernels():  # its id whole, at the start of exactly one line
        assert sum(line.startswith(kernel.id + " ") for line in lines) == 1, kernel.id
    cuda = len(catalogue.kernels("cuda"))
    assert sum("no GPU here" in line for line in lines) == 1
    assert any(line.startswith(f"unavailable here ({cuda}): no GPU here") for line in lines)
    assert len(lines) < len(catalogue.kernels()) + 20


def test_list_long_shows_every_field(monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["list", "--long", "--backend", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "cpu.seq_ikj  rung 2, after cpu.seq_naive; available" in out
    assert "origin: 002; precision: fp32; sizes: any; file: csrc/02_seq_ikj.c" in out
    assert "origin: 000 to 004 are the published SGEMM ladders" in out  # what 002 means


def test_list_long_reads_at_100_columns(monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    reason = "no GPU here (" + " ".join(["a long reason"] * 20) + ")"
    monkeypatch.setattr(listing, "unavailable_reason",
                        lambda kernel, options: reason if kernel.backend == "cuda" else "")
    assert main(["list", "--long"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 100
    every = catalogue.kernels()
    assert len(lines) < 4 * len(every) + 40  # a few lines a kernel, not a folded table
    words = {w for k in every for w in k.adds.split()}
    # No word folded mid-way: every word of every "adds" appears whole on some line.
    text = set(" ".join(lines).split())
    assert words <= text
    assert sum("no GPU here" in line for line in lines) == 1  # each reason once, numbered
    assert any(line.startswith("cuda.01_naive  rung 1; unavailable [1]") for line in lines)


def test_list_keeps_kernel_ids_whole_when_a_reason_is_long(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setattr(listing, "unavailable_reason", lambda kernel, options: "x" * 400)
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for kernel in catalogue.kernels():
        assert kernel.id in out, kernel.id


def test_run_prints_the_ladder_table_and_writes_json(tmp_path, capsys) -> None:
    (tmp_path / "out").mkdir()
    path = tmp_path / "out" / "results.json"
    assert main(CPU_QUICK + ["--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "cpu.seq_naive" in out and "x parent" in out and "% ref" in out
    document = json.loads(path.read_text())
    assert document["format"] == "mmsuite-results/1"
    env = document["environment"]
    assert env["cpu"] and env["cpu_cores"] and "cpu" in env["backends"]
    assert env["backends"]["cpu"]["omp_threads"] >= 1
    rows = {r["kernel"]: r for r in document["results"]}
    assert rows["cpu.seq_naive"]["status"] == "ok"
    assert rows["cpu.seq_naive"]["problem"]["m"] == 37
    assert not list(tmp_path.glob("out/.results.json.*")), "temporary file left behind"


def test_report_rerenders_a_saved_run(tmp_path, capsys) -> None:
    path = tmp_path / "r.json"
    main(CPU_QUICK + ["--kernel", "cpu.seq_*", "--json", str(path)])
    capsys.readouterr()
    assert main(["report", str(path), "--print-markdown", "--plots", str(tmp_path / "plots")]) == 0
    out = capsys.readouterr().out
    assert "| cpu.seq_naive |" in out
    assert (tmp_path / "plots" / "ladder_0.png").stat().st_size > 1000


def test_unavailable_kernels_become_rows_and_the_run_goes_on(tmp_path, capsys) -> None:
    path = tmp_path / "results.json"
    assert main(["run", "--kernel", "cpu.seq_naive", "--kernel", "cuda.01_naive",
                 "--backend", "cpu", "--backend", "cuda", "--shape", "8", "--repeats", "1",
                 "--json", str(path)]) in (0, 1)
    out = capsys.readouterr().out
    assert "cpu.seq_naive" in out and "cuda.01_naive" in out
    reason = catalogue.get("cuda.01_naive").reason
    if reason:  # a row of the results file; under the table, one line with its reason
        rows = {r["kernel"]: r for r in json.loads(path.read_text())["results"]}
        assert (rows["cuda.01_naive"]["status"], rows["cuda.01_naive"]["reason"]) == \
            ("unavailable", reason)
        assert " ".join(out.split()).count(f"cuda.01_naive unavailable: {reason}") == 1
    if "mmsuite[cuda]" in reason:  # printed verbatim: brackets are not markup
        assert "mmsuite[cuda]" in out


@pytest.mark.parametrize("argv,message", [
    (["run", "--shape", "0x4x4"], "positive"),
    (["run", "--shape", "banana"], "MxNxK"),
    (["run", "--kernel", "nope.*"], "matches no kernel"),
    (["run", "--kernel", "cpu.omp_pakced"], "matches no kernel; did you mean cpu.omp_packed"),
    (["run", "--kernel", "omp_packed"], "did you mean cpu.omp_packed?"),
    (["run", "--kernel", "cuda.07_blocktile"], "did you mean cuda.07_blocktile_2d?"),
    (["run", "--shape", "512:128"], "range '512:128' is empty: it needs 1 <= START <= STOP"),
    (["run", "--shape", "128:512:x1"], "never advances: its step must be at least x2"),
    (["run", "--shape", "128:512:0"], "never advances: its step must be at least 1"),
    (["run", "--shape", "128:x2"], "a range's START, STOP and STEP are integers"),
    (["run", "--shape", "1:100000:1"], "gives more than 256 sizes"),
    (["run", "--backend", "tpu"], "invalid choice"),
    (["run", "--threads", "0"], "positive integer"),
    (["run", "--preset", "square2048", "--shape", "8x8x8"], "--preset"),
    (["run", "--alpha", "nan", "--shape", "4"], "finite in float32"),
    (["report", "/nonexistent/results.json"], "no such result file"),
    (["frobnicate"], "invalid choice"),
    (["run", "--seed", "-1"], "argument --seed: expected an integer >= 0, got -1"),
    (["run", "--shape", ""], "argument --shape: nothing given"),
    (["run", "--sizes", " , "], "argument --sizes: nothing given"),
    (["run", "--shape", "4x4x3000000000"], "k must be at most 2147483647"),
    (["run", "--shape", "-3x4x4"], "shape sizes must be positive, got '-3x4x4'"),
    (["run", "--alpha", "1e39"], "argument --alpha: expected a number that is finite in float32"),
    (["run", "--beta", "-1e39"], "argument --beta: expected a number that is finite in float32"),
    (["run", "--threads", "10000"], "10000 is more than 4 threads per core"),
    (["run", "--inputs", "lognormal"], "argument --inputs: invalid choice: 'lognormal' (choose "
     "from 'uniform', 'normal', 'wide', 'tiny', 'huge', 'cancel', 'scaled', 'integers', "
     "'special')"),
    (["run", "--timeout", "0"], "expected a number > 0"),
    (["run", "--devices", "zero"], "expected 'all' or indices"),
    (["run", "--backend", "cpu", "--json", "/nonexistent/dir/x.json"],
     "folder /nonexistent/dir does not exist"),
    (["run", "--backend", "cpu", "--plots", "/nonexistent/dir/plots"],
     "folder /nonexistent/dir does not exist"),
    (["run", "--backend", "cpu", "--resume", "/nonexistent/x.json"], "--resume: no such result"),
    (["history", "--results-dir", ".", "--out", "/nonexistent/dir/h.png"],
     "folder /nonexistent/dir does not exist"),
])
def test_bad_arguments_give_one_line_and_nonzero_exit(argv, message, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mmsuite: error:") and message in err and "\n" not in err


def test_a_file_the_user_named_is_one_line_but_an_internal_io_failure_a_traceback(
        tmp_path, monkeypatch, capsys) -> None:
    def read_named_file(args, console):
        return (args.results[0]).read_text()

    def write_inside_named_folder(args, console):
        return (args.out / "figures" / "a.svg").write_text("")

    def read_internal_file(args, console):  # mmsuite's own file, not one the user named
        return (tmp_path / "mmsuite-internal" / "table.json").read_text()

    argv = ["report", str(tmp_path / "r.json"), "--out", str(tmp_path / "out")]
    for job in (read_named_file, write_inside_named_folder):
        monkeypatch.setattr(COMMANDS["report"], "run", job)
        assert main(argv) == 2
        assert capsys.readouterr().err.startswith(f"mmsuite: error: {tmp_path}")
    monkeypatch.setattr(COMMANDS["report"], "run", read_internal_file)
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "read_internal_file" in err
    assert "internal error: this is a bug" in err


def _problems(argv: list[str]) -> list:
    return problems_from_args(build_parser().parse_args(["run"] + argv))


def test_one_repeatable_shape_takes_mxnxk_a_cube_or_a_comma_list() -> None:
    shapes = [(p.m, p.n, p.k) for p in _problems(["--shape", "8", "--shape", "4x5x6,16"])]
    assert shapes == [(8, 8, 8), (4, 5, 6), (16, 16, 16)]
    assert [(p.m, p.batch) for p in _problems(["--preset", "batch100"])] == [(1000, 100)]
    assert [p.m for p in _problems([])] == [512]


def test_each_shape_given_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The argument's type parses the text; the problems are made of what it parsed."""
    parsed: list[str] = []
    real_parse = common.parse_shape

    def counting_parse(text: str) -> tuple[int, int, int]:
        parsed.append(text)
        return real_parse(text)

    monkeypatch.setattr(common, "parse_shape", counting_parse)
    problems = _problems(["--shape", "4x5x6,16", "--shape", "32:64"])
    assert [(p.m, p.n, p.k) for p in problems] == [(4, 5, 6), (16, 16, 16), (32, 32, 32),
                                                   (64, 64, 64)]
    assert parsed == ["4x5x6", "16"]


@pytest.mark.parametrize("old,new,argv", [
    ("--sizes", "--shape", ["run", "OPTION", "8,16"]),
    ("--shapes", "--shape", ["run", "OPTION", "4x5x6"]),
    ("--alpha", "--significance", ["compare", "a.json", "b.json", "OPTION", "0.05"]),
    ("--markdown", "--print-markdown", ["report", "r.json", "OPTION"]),
])
def test_old_options_still_work_for_a_release_with_a_warning(old, new, argv, capsys) -> None:
    with_old = build_parser().parse_args([old if a == "OPTION" else a for a in argv])
    assert capsys.readouterr().err.splitlines() == [
        f"mmsuite: warning: {old} is deprecated and goes in the next release; use {new}"]
    assert vars(with_old) == vars(build_parser().parse_args([new if a == "OPTION" else a
                                                             for a in argv]))


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_warning_wraps_between_words_on_a_terminal_and_is_one_line_in_a_log(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    message = ("other processes used up to 57% of this machine's CPU while it measured "
               "(opencl.tiled): CPU times are distorted; measure on a quiet machine")
    warn(message)
    assert capsys.readouterr().err == f"mmsuite: warning: {message}\n"
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setenv("COLUMNS", "60")
    warn(message)
    assert terminal.getvalue().splitlines() == [
        "mmsuite: warning: other processes used up to 57% of this",
        "  machine's CPU while it measured (opencl.tiled): CPU times",
        "  are distorted; measure on a quiet machine"]


def test_old_preset_names_still_work_for_a_release_with_a_warning(capsys) -> None:
    with_old = build_parser().parse_args(["run", "--preset", "seed001"])
    assert capsys.readouterr().err.splitlines() == [
        "mmsuite: warning: preset seed001 is deprecated and goes in the next release; "
        "use wide2000x6000"]
    assert vars(with_old) == vars(build_parser().parse_args(["run", "--preset", "wide2000x6000"]))
    assert [(p.m, p.n, p.k) for p in problems_from_args(with_old)] == [(2000, 6000, 2000)]


def test_help_names_the_new_presets_only(capsys) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    out = capsys.readouterr().out
    assert "square2048" in out and "batch100" in out and "seed00" not in out
    assert main(["list"]) == 0
    assert "seed00" not in capsys.readouterr().out


def test_a_json_path_in_a_missing_folder_creates_nothing(capsys) -> None:
    assert main(["run", "--backend", "cpu", "--json", "/nonexistent/dir/x.json"]) == 2
    assert not os.path.exists("/nonexistent")


def test_a_directory_as_markdown_is_refused_before_running(tmp_path, capsys) -> None:
    assert main(CPU_QUICK + ["--markdown", str(tmp_path)]) == 2
    err = capsys.readouterr()
    assert "is a directory" in err.err and "cpu.blas" not in err.out  # nothing ran


def test_cl_device_is_only_checked_when_opencl_runs(capsys) -> None:
    assert main(CPU_QUICK + ["--kernel", "cpu.blas", "--cl-device", "99"]) == 0


def _opencl_available() -> bool:
    return catalogue.get("opencl.naive").available


@pytest.mark.skipif(not _opencl_available(), reason="no OpenCL device here")
@pytest.mark.parametrize("how", ["option", "environment"])
def test_a_bad_opencl_selector_is_refused_either_way(how, monkeypatch, capsys) -> None:
    argv = ["run", "--backend", "opencl", "--shape", "8", "--repeats", "1"]
    if how == "option":
        argv += ["--cl-device", "zzz"]
    else:
        monkeypatch.setenv("PYOPENCL_CTX", "zzz")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mmsuite: error:") and "'zzz'" in err and "OpenCL device" in err
    assert "\n" not in err


@pytest.mark.skipif(not _opencl_available(), reason="no OpenCL device here")
def test_list_refuses_an_opencl_selector_that_matches_nothing(capsys) -> None:
    assert main(["list", "--cl-device", "zzz"]) == 2
    assert "'zzz'" in capsys.readouterr().err
    assert main(["list", "--backend", "cpu", "--cl-device", "zzz"]) == 0


@pytest.mark.skipif(catalogue.get("cuda.01_naive").available, reason="CUDA can run here")
def test_nothing_that_can_run_exits_2(capsys) -> None:
    assert main(["run", "--kernel", "cuda.*", "--shape", "8"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mmsuite: error: nothing requested can run here: cuda.")


def test_kernels_found_unavailable_when_they_run_exit_2(monkeypatch, capsys) -> None:
    def unavailable(kernel_id, *args, **kwargs):
        raise KernelUnavailable(f"{kernel_id} cannot run on this device")

    monkeypatch.setattr(workers, "run", unavailable)
    monkeypatch.setattr(sweep_module, "IN_PROCESS", ("cpu",))  # the patch is this process's
    assert main(CPU_QUICK + ["--kernel", "cpu.blas"]) == 2
    assert "nothing requested could run here" in capsys.readouterr().err


def test_a_problem_beyond_host_memory_is_refused_up_front(monkeypatch, capsys) -> None:
    monkeypatch.setattr(workers, "available_host_memory", lambda: 4 * 2**30)
    assert main(["run", "--backend", "cpu", "--shape", "20000"]) == 2
    err = capsys.readouterr().err
    assert "20000x20000x20000 needs about" in err and "4.0 GiB is available" in err


def test_run_hands_one_context_built_from_its_arguments_to_the_sweep_and_the_report(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    seen: list = []
    real_sweep, real_report = run_command.sweep, run_command._report_and_save

    def sweep(context, **kwargs):
        seen.append(context)
        return real_sweep(context, **kwargs)

    def report_and_save(context, *args):
        seen.append(context)
        return real_report(context, *args)

    monkeypatch.setattr(run_command, "sweep", sweep)
    monkeypatch.setattr(run_command, "_report_and_save", report_and_save)
    path = tmp_path / "r.json"
    assert main(CPU_QUICK + ["--kernel", "cpu.seq_naive", "--json", str(path), "--wide"]) == 0
    context = seen[0]
    assert len(seen) == 2 and seen[1] is context
    assert [k.id for k in context.kernels] == ["cpu.seq_naive"]
    assert [(p.m, p.n, p.k) for p in context.problems] == [(37, 29, 41)]
    assert (context.repeats, context.warmup, context.sampling) == (2, 0, None)
    assert (context.json, context.wide, context.backends, context.cluster) == (
        path, True, ("cpu",), None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        context.json = None  # type: ignore[misc]


def test_a_bug_shows_its_traceback_and_exits_1(monkeypatch, capsys) -> None:
    def broken(*args, **kwargs):
        raise ValueError("an internal inconsistency")

    monkeypatch.setattr(run_command, "sweep", broken)
    assert main(CPU_QUICK) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "ValueError: an internal inconsistency" in err
    assert "mmsuite: internal error" in err


def _saved_run(tmp_path, capsys) -> tuple:
    path = tmp_path / "r.json"
    assert main(CPU_QUICK + ["--kernel", "cpu.seq_*", "--json", str(path)]) == 0
    capsys.readouterr()
    return path, json.loads(path.read_text())


@pytest.mark.parametrize("damage,message", [
    (lambda doc: doc["results"][0].pop("kernel_ms"),
     "record 0 (cpu.seq_naive): field 'kernel_ms' is missing"),
    (lambda doc: doc["results"][1].pop("kernel"), "record 1: field 'kernel' is missing"),
    (lambda doc: doc["results"][2].update(gflops=None), "record 2 (cpu.seq_tiled): field "
     "'gflops' is None"),
    (lambda doc: doc.pop("results"), "field 'results' is missing"),
])
def test_report_on_a_damaged_file_names_file_record_and_field(tmp_path, capsys, damage,
                                                             message) -> None:
    path, document = _saved_run(tmp_path, capsys)
    damage(document)
    path.write_text(json.dumps(document))
    assert main(["report", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"mmsuite: error: {path}: {message}" or (
        err.startswith(f"mmsuite: error: {path}: ") and message in err)


def test_report_creates_no_folder_outside_what_was_named(tmp_path, capsys) -> None:
    path, _ = _saved_run(tmp_path, capsys)
    for option in ("--out", "--plots"):
        assert main(["report", str(path), option, str(tmp_path / "no" / "site")]) == 2
        assert f"folder {tmp_path / 'no'} does not exist" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()


def test_report_on_a_truncated_file(tmp_path, capsys) -> None:
    path, _ = _saved_run(tmp_path, capsys)
    path.write_text(path.read_text()[:100])
    assert main(["report", str(path)]) == 2
    assert f"{path} is not JSON" in capsys.readouterr().err


def test_results_keep_the_users_umask(tmp_path, capsys) -> None:
    old = os.umask(0o022)
    try:
        path, _ = _saved_run(tmp_path, capsys)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_the_journal_goes_once_the_results_are_saved_and_stays_when_saving_fails(
        tmp_path, capsys, monkeypatch) -> None:
    path, document = _saved_run(tmp_path, capsys)
    assert not results.journal_path(path).exists()
    failing = tmp_path / "failing.json"

    def disk_full(*args, **kwargs) -> None:
        raise OSError(28, "No space left on device", str(failing))

    monkeypatch.setattr(results, "save", disk_full)
    assert main(CPU_QUICK + ["--kernel", "cpu.seq_*", "--json", str(failing)]) == 2
    assert "No space left on device" in capsys.readouterr().err
    journal = results.load_rows(results.journal_path(failing))
    assert [r["kernel"] for r in journal] == [r["kernel"] for r in document["results"]]


def test_resume_reads_the_journal_of_a_killed_run(tmp_path, capsys) -> None:
    path, document = _saved_run(tmp_path, capsys)
    # As if killed before the final file was written: the journal alone holds the rows.
    path.unlink()
    results.Journal(results.journal_path(path), document["settings"],
                    document["results"]).close()
    first = document["results"][0]
    assert main(CPU_QUICK + ["--kernel", "cpu.seq_*", "--resume", str(path)]) == 0
    again = results.load(path)["results"]
    assert again[0]["kernel_ms"] == first["kernel_ms"]


def _asv_tree(root) -> None:
    """An asv results tree with one sound result file of cpu.blas's kernel time."""
    name = "sgemm_cpu.CpuKernels.track_kernel_ms"
    params = [["'cpu.blas'"], ["256"]]
    (root / "box").mkdir(parents=True)
    (root / "benchmarks.json").write_text(json.dumps({name: {
        "name": name, "type": "track", "unit": "ms", "version": "1",
        "param_names": ["kernel", "size"], "params": params}, "version": 2}))
    (root / "box" / "machine.json").write_text(json.dumps({"machine": "box", "version": 1}))
    (root / "box" / f"{'a' * 8}-env.json").write_text(json.dumps({
        "commit_hash": "a" * 40, "env_name": "env", "date": 1763632800000,
        "params": {"machine": "box"}, "python": "3.11", "requirements": {}, "env_vars": {},
        "result_columns": ["result", "params", "version", "started_at", "duration"],
        "results": {name: [[0.3], params, "1", 0, 1.0]}, "durations": {}, "version": 2}))


def test_history_names_damaged_asv_files(tmp_path, capsys) -> None:
    pytest.importorskip("asv")
    root = tmp_path / "results"
    _asv_tree(root)
    (root / "box" / f"{'b' * 8}-env.json").write_text('{"commit_hash": "b')
    (root / "box" / f"{'c' * 8}-env.json").write_text(json.dumps({"commit_hash": "c" * 40}))
    assert main(["history", "--results-dir", str(root), "--out", str(tmp_path / "h.png")]) == 0
    err = capsys.readouterr().err
    assert f"mmsuite: warning: {root / 'box' / 'bbbbbbbb-env.json'} is not JSON" in err
    assert f"{root / 'box' / 'cccccccc-env.json'}: field 'results' is missing" in err
    (root / "benchmarks.json").write_text("{")
    assert main(["history", "--results-dir", str(root), "--out", str(tmp_path / "h.png")]) == 2
    assert f"mmsuite: error: {root / 'benchmarks.json'} is not JSON" in capsys.readouterr().err


# A CPU sweep whose second row takes a while: the signal lands in it.
SLOW = ["run", "--kernel", "cpu.blas", "--kernel", "cpu.seq_naive", "--kernel", "cpu.seq_ikj",
        "--shape", "700", "--repeats", "3", "--warmup", "0"]


def _start(argv: list[str]) -> subprocess.Popen:
    # A child of a non-interactive shell inherits SIGINT ignored; Python then installs no
    # KeyboardInterrupt handler. Restore the default so that Ctrl-C reaches it.
    return subprocess.Popen([sys.executable, "-m", "mmsuite.cli", *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


@pytest.mark.parametrize("signum,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_mid_run_keeps_every_finished_row_and_resume_completes_it(
        tmp_path, signum, status) -> None:
    path = tmp_path / "r.json"
    journal = results.journal_path(path)
    proc = _start(SLOW + ["--json", str(path)])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if journal.exists() and len(journal.read_text().splitlines()) >= 2:  # header + a row
            break
        time.sleep(0.02)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == status, err
    assert "--resume" in err and "Traceback" not in err
    document = results.load(path)
    saved = document["results"]
    assert document["settings"]["interrupted"] == signal.Signals(signum).name
    assert 1 <= len(saved) < 3 and all(r["status"] == "ok" for r in saved)
    assert not journal.exists()  # the saved file holds every finished row

    resumed = subprocess.run([sys.executable, "-m", "mmsuite.cli", *SLOW, "--resume", str(path)],
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    final = results.load(path)["results"]
    assert [r["kernel"] for r in final] == ["cpu.blas", "cpu.seq_naive", "cpu.seq_ikj"]
    assert final[0]["kernel_ms"] == saved[0]["kernel_ms"]  # taken over, not measured again


def test_console_script_runs_as_a_process() -> None:
    proc = subprocess.run([sys.executable, "-m", "mmsuite.cli", "run", "--shape", "9x8x7",
                           "--backend", "cpu", "--repeats", "1"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "cpu.blas" in proc.stdout and "Traceback" not in proc.stderr


def test_version_names_the_package_version(capsys: pytest.CaptureFixture) -> None:
    import mmsuite

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"mmsuite {mmsuite.__version__}"


def test_run_samples_by_the_stopping_rule_unless_repeats_is_given(tmp_path) -> None:
    by_rule, fixed = tmp_path / "rule.json", tmp_path / "fixed.json"
    base = ["run", "--kernel", "cpu.seq_ikj", "--shape", "17x9x5", "--warmup", "0"]
    # A cap far above what 3 samples take, even with a cold-cache scrub before each on
    # a loaded host (the cap is a hard stop: 0.5 s there once left 2 samples).
    assert main([*base, "--min-samples", "3", "--min-time", "0", "--max-time", "30",
                 "--max-noise", "50", "--l2", "cold", "--json", str(by_rule)]) == 0
    assert main([*base, "--repeats", "4", "--json", str(fixed)]) == 0
    rule = json.loads(by_rule.read_text())
    assert rule["settings"]["sampling"]["min_samples"] == 3
    assert rule["settings"]["sampling"]["noise_target"] == 0.5
    assert rule["settings"]["l2"] == "cold" and rule["results"][0]["l2"] == "cold"
    assert len(rule["results"][0]["kernel_ms"]["samples"]) >= 3
    record = json.loads(fixed.read_text())["results"][0]
    assert len(record["kernel_ms"]["samples"]) == 4 and record["sampling"]["name"] == "fixed"


def test_default_rule_gives_cpu_rows_the_cpu_noise_target(tmp_path) -> None:
    from mmsuite.measure import CLI_SAMPLING

    out = tmp_path / "default.json"
    assert main(["run", "--kernel", "cpu.seq_ikj", "--shape", "17x9x5", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    assert document["settings"]["sampling"]["cpu_noise_target"] == CLI_SAMPLING.cpu_noise_target
    (row,) = document["results"]
    assert row["sampling"]["noise_target"] == CLI_SAMPLING.cpu_noise_target
    assert len(row["kernel_ms"]["samples"]) >= CLI_SAMPLING.verdict_samples


@pytest.mark.parametrize("argv", [["--max-noise", "-1"], ["--max-time", "0"],
                                  ["--min-time", "nan"], ["--min-time", "5", "--max-time", "1"],
                                  ["--l2", "lukewarm"]])
def test_bad_sampling_options_give_one_line(argv: list[str], capsys) -> None:
    assert main([*CPU_QUICK[:4], *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("mmsuite")


def test_a_reference_beyond_fp32_range_is_a_failed_row_that_says_so(tmp_path, capsys) -> None:
    out = tmp_path / "huge.json"
    argv = ["run", "--kernel", "cpu.seq_naive", "--shape", "1x2x32768", "--inputs", "huge",
            "--repeats", "1", "--warmup", "0", "--json", str(out)]
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    (row,) = json.loads(out.read_text())["results"]
    assert row["status"] == "failed" and "reference leaves FP32's range" in row["reason"]
    assert row["problem"]["inputs"] == "huge"


def test_a_result_above_peak_makes_the_run_fail(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from mmsuite import peak

    def flag_all(records: list[dict], env: dict) -> None:
        for record in records:
            record.update(status="invalid", reason="measurement error: 250% of FP32 peak")

    monkeypatch.setattr(peak, "annotate", flag_all)
    assert main(CPU_QUICK[:1] + ["--kernel", "cpu.seq_ikj", *CPU_QUICK[3:]]) == 1
    assert "invalid" in capsys.readouterr().out


def test_every_option_has_plain_text_help() -> None:
    """--help is read in a terminal: every argument says what it is, without reStructuredText
    markup."""
    import argparse

    from mmsuite.cli import build_parser

    (commands,) = [a for a in build_parser()._actions
                   if isinstance(a, argparse._SubParsersAction)]
    for name, parser in commands.choices.items():
        texts = [parser.description or ""]
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help, f"mmsuite {name} {action.option_strings or action.dest}"
            texts.append(action.help)
        assert not any("``" in text or ":func:" in text for text in texts), name


def test_run_records_the_input_distribution_and_the_accuracy_column(tmp_path, capsys) -> None:
    path = tmp_path / "wide.json"
    assert main(["run", "--kernel", "cpu.blas", "--kernel", "cpu.seq_ikj", "--shape", "24x20x16",
                 "--inputs", "wide", "--repeats", "2", "--wide", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "wide inputs" in out and "err/ref" in out
    rows = {r["kernel"]: r for r in json.loads(path.read_text())["results"]}
    for row in rows.values():
        assert row["problem"]["inputs"] == "wide"
        assert row["ref_library"] == "cpu.blas" and row["err_vs_ref"] >= 0
    assert rows["cpu.blas"]["err_vs_ref"] == pytest.approx(1.0)
    assert main(["run", "--kernel", "cpu.blas", "--inputs", "lognormal"]) == 2


# ------------------------------------------------------------------ threads used
def _threaded_row(kernel: str, threads: int) -> dict:
    return {"kernel": kernel, "status": "ok", "info": {"threads": threads}}


def test_threads_note_names_rows_that_ran_on_fewer_threads_than_asked() -> None:
    rows = [_threaded_row("cpu.omp_tiled", 1), _threaded_row("cpu.omp_packed", 2),
            _threaded_row("cpu.seq_naive", 1)]  # sequential: its thread count means nothing
    note = run_command.threads_note(rows, asked=2)
    assert note == "cpu.omp_tiled ran on 1 thread, not the 2 --threads asked for"


def test_threads_note_without_threads_compares_with_the_cpus_allowed(monkeypatch) -> None:
    monkeypatch.setattr(run_command, "allowed_cpus", lambda: 2)
    assert run_command.threads_note([_threaded_row("cpu.omp_tiled", 2)], asked=None) is None
    note = run_command.threads_note([_threaded_row("cpu.omp_tiled", 1)], asked=None)
    assert note is not None and note.endswith("not the 2 CPUs mmsuite may use")


def test_run_says_before_measuring_when_fewer_cores_are_free_than_threads(
        monkeypatch, capsys) -> None:
    from mmsuite import load

    monkeypatch.setattr(load, "free_cores", lambda cores, seconds=0.25: (cores / 2, 0.5))
    monkeypatch.setattr(run_command, "allowed_cpus", lambda: 2)
    assert main(["run", "--kernel", "cpu.omp_packed", "--shape", "16", "--repeats", "2",
                 "--threads", "2"]) == 0
    out = capsys.readouterr()
    assert "about 1.0 of its 2 cores are free for 2 threads" in out.err
    assert "cpu.omp_packed" in out.out  # the run went on: a busy machine still gets a table
    monkeypatch.setattr(load, "free_cores", lambda cores, seconds=0.25: (cores * 0.98, 0.02))
    assert main(["run", "--kernel", "cpu.omp_packed", "--shape", "16", "--repeats", "2",
                 "--threads", "2"]) == 0
    assert "cores are free" not in capsys.readouterr().err


@pytest.mark.parametrize("text,sizes", [
    ("128:4096:x2", [128, 256, 512, 1024, 2048, 4096]),
    ("128:1024:128", [128, 256, 384, 512, 640, 768, 896, 1024]),
    ("128:1000:+300", [128, 428, 728]),  # the stop is a bound, not a size
    ("128:512", [128, 256, 512]),  # x2 when no step is given
    ("100:100", [100]),
])
def test_shape_ranges_sweep_cubes(text: str, sizes: list[int]) -> None:
    args = build_parser().parse_args(["run", "--shape", text + ",7x8x9"])
    problems = problems_from_args(args)
    assert [(p.m, p.n, p.k) for p in problems] == [(s, s, s) for s in sizes] + [(7, 8, 9)]


@pytest.mark.parametrize("argv", [["list"], ["list", "--long"]])
def test_a_closed_pipe_ends_quietly_with_status_0(argv: list[str]) -> None:
    """`mmsuite list | head -1`: the reader is gone before mmsuite writes its first line."""
    proc = subprocess.Popen([sys.executable, "-m", "mmsuite.cli", *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and err == b""


# ------------------------------------------------------------ terminals and streams
def _mmsuite(argv: list[str], stdout=subprocess.PIPE, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mmsuite.cli", *argv], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, env={**os.environ, **env},
                          timeout=120)


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_an_output_encoding_without_unicode_degrades_the_text_not_the_command(
        encoding) -> None:
    done = _mmsuite(["list"], PYTHONIOENCODING=encoding)
    assert done.returncode == 0, done.stderr
    assert "cpu.seq_naive" in done.stdout and "Traceback" not in done.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_output_is_one_line_exit_2() -> None:
    with open("/dev/full", "w") as full:
        done = _mmsuite(["list"], stdout=full)
    assert done.returncode == 2
    assert done.stderr == "mmsuite: error: cannot write the output: No space left on device\n"


def test_an_output_closed_early_ends_quietly() -> None:
    """`mmsuite list | head -1`: the reader is gone, and that is no error."""
    process = subprocess.Popen([sys.executable, "-m", "mmsuite.cli", "list", "--long"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.readline()
    process.stdout.close()
    assert process.wait(timeout=120) == 0
    assert process.stderr.read() == b""


def test_an_absurd_columns_is_held_to_the_widest_table(monkeypatch) -> None:
    from mmsuite import cli

    monkeypatch.setenv("COLUMNS", "99999999999999")
    assert cli._console().width == cli.MAX_COLUMNS
    done = _mmsuite(["list"], COLUMNS="99999999999999")
    assert done.returncode == 0 and "cpu.seq_naive" in done.stdout, done.stderr
