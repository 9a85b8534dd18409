"""`mmsuite tune`: its arguments, and what it says without a GPU (the search itself is
specified in tests/cuda_dispatch/test_search.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mmsuite.cli import main


@pytest.mark.parametrize("argv,message", [
    (["tune", "cuda.20_tuned", "--shape", "64x64x64"], "cannot be tuned"),
    (["tune", "cuda.22_adaptive", "--shape", "64x0x64"], "--shape"),
    (["tune", "--shape", "64x64x64", "--candidates", "0"], "positive"),
    (["tune", "--shape", "64x64x64", "--rounds", "0"], "positive"),
    (["tune", "cuda.22_adaptive"], "--fit-model"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list, message: str,
                                         capsys: pytest.CaptureFixture) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def _has_gpu() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


@pytest.mark.parametrize("args", [["--shape", "64x64x64"], ["--fit-model"]])
def test_without_a_gpu_tune_says_why_in_one_line(args: list) -> None:
    if _has_gpu():
        pytest.skip("a GPU is present: tune would run")
    code = "import sys; from mmsuite.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", code, "tune", *args], capture_output=True,
                          text=True)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "cannot run here" in done.stderr


def test_the_json_outcome_names_the_models_plan_and_the_fastest_found() -> None:
    from types import SimpleNamespace

    from mmsuite.commands.tune import outcome_record
    from mmsuite.problem import Problem

    model = {"config": "64x64x16_t4x8_lr8", "split": 1, "family": "splitk", "ms": 0.03}
    done = {"key": "7207x250x182x1", "model": model, "model_ms": 0.0295, "best": "128x64/1",
            "best_ms": 0.0301, "ratio": 1.02, "entry": None,
            "outcomes": [SimpleNamespace(skipped=""), SimpleNamespace(skipped="failed")]}
    record = outcome_record(Problem(250, 7207, 182), done)
    assert record["problem"] == {"m": 250, "n": 7207, "k": 182, "batch": 1, "layout": "row"}
    # The finalists were slower than the model's plan: it is the fastest found.
    assert record["best"] == "64x64x16_t4x8_lr8/1" and record["best_ms"] == 0.0295
    assert (record["stored"], record["candidates"], record["skipped"]) == (False, 2, 1)
    faster = outcome_record(Problem(250, 7207, 182), {**done, "best_ms": 0.025, "entry": {}})
    assert (faster["best"], faster["best_ms"], faster["stored"]) == ("128x64/1", 0.025, True)
