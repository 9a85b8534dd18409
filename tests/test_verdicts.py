"""Verdict files: the JSON and JUnit XML that `compare` (and any gate) writes, and the
geometric-mean summary line."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from mmsuite import verdicts
from mmsuite.verdicts import VerdictRow

ROWS = [
    VerdictRow("cpu.a", "512x512x512", "same", 1.01, "difference within 5%"),
    VerdictRow("cpu.b", "512x512x512", "slower", 1.25, "significant"),
    VerdictRow("cpu.c", "512x512x512", "faster", 0.5, "significant"),
    VerdictRow("cpu.d", "512x512x512", "unsure", 1.30, "noisy"),
    VerdictRow("cpu.e", "512x512x512", "broken", None, "failed in NEW"),
]


def test_the_gate_fails_on_slower_or_broken_and_with_strict_on_unsure() -> None:
    assert verdicts.exit_status(["same", "slower"]) == 1
    assert verdicts.exit_status(["faster", "broken"]) == 1
    assert verdicts.exit_status(["same", "faster", "unsure"]) == 0
    assert verdicts.exit_status(["same", "unsure"], strict=True) == 1


def test_geometric_mean_multiplies_ratios_and_skips_rows_without_one() -> None:
    mean, n = verdicts.geometric_mean_ratio(ROWS)
    assert n == 4
    assert mean == pytest.approx((1.01 * 1.25 * 0.5 * 1.30) ** 0.25)
    # Twice as slow and twice as fast average to no change.
    pair = [VerdictRow("k", "p", "slower", 2.0), VerdictRow("k", "q", "faster", 0.5)]
    assert verdicts.geometric_mean_ratio(pair) == (pytest.approx(1.0), 2)
    assert "no change" in verdicts.summary_line(pair)


def test_summary_line_names_the_direction_and_the_row_count() -> None:
    line = verdicts.summary_line(ROWS)
    mean = (1.01 * 1.25 * 0.5 * 1.30) ** 0.25
    assert line == (f"geometric mean NEW/BASE over 4 kernel x problem: {mean:.3f} "
                    f"({1 - mean:.1%} faster)")
    assert "no kernel x problem" in verdicts.summary_line([ROWS[-1]])


def test_an_unknown_verdict_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown verdict 'slow'"):
        VerdictRow("k", "p", "slow", 1.0)


def test_json_file_holds_every_row_and_the_gate(tmp_path: Path) -> None:
    path = tmp_path / "verdicts.json"
    verdicts.write_verdict_json(path, ROWS, threshold=0.05, extra={"base": "a.json"})
    doc = json.loads(path.read_text())
    assert doc["format"] == "mmsuite-verdicts/1" and doc["exit_status"] == 1
    assert doc["counts"] == {"slower": 1, "broken": 1, "faster": 1, "same": 1, "unsure": 1}
    assert doc["base"] == "a.json" and doc["threshold"] == 0.05 and doc["geomean_rows"] == 4
    assert doc["rows"][4] == {"kernel": "cpu.e", "problem": "512x512x512", "verdict": "broken",
                              "ratio": None, "reason": "failed in NEW"}
    passing = tmp_path / "pass.json"
    verdicts.write_verdict_json(passing, ROWS[:1], threshold=0.05)
    assert json.loads(passing.read_text())["exit_status"] == 0


def test_junit_fails_slower_and_broken_and_skips_unsure(tmp_path: Path) -> None:
    path = tmp_path / "verdicts.xml"
    verdicts.write_junit(path, ROWS, suite="mmsuite compare", threshold=0.05)
    root = ET.parse(path).getroot()
    suite = root.find("testsuite")
    assert suite.get("tests") == "5" and suite.get("failures") == "2"
    assert suite.get("skipped") == "1" and suite.get("errors") == "0"
    cases = {c.get("classname"): c for c in suite.iter("testcase")}
    assert cases["cpu.b"].find("failure").get("type") == "slower"
    assert "+25.0% kernel time" in cases["cpu.b"].find("failure").get("message")
    assert cases["cpu.e"].find("failure").get("message") == "broken; failed in NEW"
    assert cases["cpu.d"].find("skipped").get("message").endswith("noisy")
    assert cases["cpu.a"].find("failure") is None and cases["cpu.a"].find("skipped") is None
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert properties["threshold"] == "0.05"
    assert math.isclose(float(properties["geomean_ratio"]),
                        verdicts.geometric_mean_ratio(ROWS)[0], rel_tol=1e-5)
