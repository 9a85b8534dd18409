"""scripts/hostile_cases.py: a case for each numbered defect and the minor ones, judged by
what must come of it (one line, exit 2, no traceback). Running the whole battery takes
minutes and builds a revision; here its judges and a few quick cases run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from . import load_script

battery = load_script("hostile_cases")


def test_every_numbered_defect_has_a_case() -> None:
    numbers = {c.defect for c in battery.CASES}
    assert {str(n) for n in range(1, 15)} <= numbers and "minor" in numbers
    names = [c.name for c in battery.CASES]
    assert len(names) == len(set(names))


def _done(code: int, err: str) -> subprocess.CompletedProcess:
    return subprocess.CompletedProcess([], code, "", err)


def test_one_line_judges_the_status_the_line_and_tracebacks() -> None:
    assert battery.one_line(_done(2, "mmsuite: error: no such file x\n")).startswith("exit 2")
    for bad in (
        _done(1, "mmsuite: error: x\n"),
        _done(2, "mmsuite: error: x\nmore\n"),
        _done(2, "Traceback (most recent call last):\nmmsuite: error: x\n"),
    ):
        with pytest.raises(battery.Bad):
            battery.one_line(bad)


@pytest.mark.parametrize("word", ["/dev/full", "COLUMNS", "m = 2^31"])
def test_quick_cases_are_ok_here(word: str, tmp_path: Path) -> None:
    (case,) = [c for c in battery.CASES if word in c.name]
    try:
        assert case.check(tmp_path)
    except battery.Skip as exc:
        pytest.skip(str(exc))


def test_the_list_names_each_case_with_its_defect() -> None:
    script = Path(battery.__file__)
    done = subprocess.run(
        [sys.executable, str(script), "--list"], capture_output=True, text=True, check=True
    )
    assert len(done.stdout.splitlines()) == len(battery.CASES)
