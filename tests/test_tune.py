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
