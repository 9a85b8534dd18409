"""The command line end to end: list, run, --json, report, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mmsuite import catalogue
from mmsuite.cli import main

CPU_QUICK = ["run", "--backend", "cpu", "--shape", "37x29x41", "--repeats", "2", "--warmup", "0"]


def test_list_shows_every_kernel_and_reasons(capsys: pytest.CaptureFixture) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for kernel_id in ("cpu.seq_naive", "cpu.blas", "opencl.naive", "cuda.cublas"):
        assert kernel_id in out
    assert "presets:" in out


def test_run_prints_the_ladder_table_and_writes_json(tmp_path, capsys) -> None:
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
    assert main(["report", str(path), "--markdown", "--plots", str(tmp_path / "plots")]) == 0
    out = capsys.readouterr().out
    assert "| cpu.seq_naive |" in out
    assert (tmp_path / "plots" / "ladder_0.png").stat().st_size > 1000


def test_unavailable_kernels_become_rows_and_the_run_goes_on(capsys) -> None:
    assert main(["run", "--kernel", "cpu.seq_naive", "--kernel", "cuda.01_naive",
                 "--backend", "cpu", "--backend", "cuda", "--shape", "8", "--repeats", "1"]) \
        in (0, 1)
    out = capsys.readouterr().out
    assert "cpu.seq_naive" in out and "cuda.01_naive" in out
    reason = catalogue.get("cuda.01_naive").reason
    if "mmsuite[cuda]" in reason:  # printed verbatim: brackets are not markup
        assert "mmsuite[cuda]" in out


@pytest.mark.parametrize("argv,message", [
    (["run", "--shape", "0x4x4"], "positive"),
    (["run", "--shape", "banana"], "MxNxK"),
    (["run", "--kernel", "nope.*"], "matches no kernel"),
    (["run", "--backend", "tpu"], "invalid choice"),
    (["run", "--threads", "0"], "positive integer"),
    (["run", "--preset", "seed000", "--shape", "8x8x8"], "--preset"),
    (["run", "--alpha", "nan", "--shape", "4"], "alpha must be finite"),
    (["report", "/nonexistent/results.json"], "no such result file"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_arguments_give_one_line_and_nonzero_exit(argv, message, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mmsuite: error:") and message in err and "\n" not in err


def test_console_script_runs_as_a_process() -> None:
    proc = subprocess.run([sys.executable, "-m", "mmsuite.cli", "run", "--shape", "9x8x7",
                           "--backend", "cpu", "--repeats", "1"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "cpu.blas" in proc.stdout and "Traceback" not in proc.stderr
