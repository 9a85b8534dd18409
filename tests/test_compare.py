"""`mmsuite compare`: verdicts from the recorded samples, the gate's exit status, bad input."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from mmsuite import cli, compare, results

PROBLEM = {"m": 512, "n": 512, "k": 512, "batch": 1, "layout": "row", "alpha": 1.0,
           "beta": 0.0, "seed": 0}


def timings(median: float, noise: float, n: int = 30, seed: int = 0) -> list[float]:
    """Skewed timing-like samples: ``median`` times log-normal noise of relative width ``noise``."""
    rng = np.random.default_rng(seed)
    return list(median * np.exp(rng.normal(0.0, noise, n)))


def record(kernel: str, samples: list[float], status: str = "ok", **problem) -> dict:
    median = float(np.median(samples)) if samples else 1.0
    return {"kernel": kernel, "backend": kernel.split(".")[0], "status": status, "reason": "",
            "problem": {**PROBLEM, **problem}, "flops": 2 * 512**3,
            "kernel_ms": {"median": median, "min": min(samples, default=median),
                          "max": max(samples, default=median), "samples": samples},
            "gflops": 2 * 512**3 / (median * 1e6), "max_rel_err": 1e-7}


def write(path: Path, records: list[dict], **settings) -> Path:
    results.save(path, records, {"cpu": "test CPU", "cpu_cores": 2}, settings)
    return path


def loaded(row: dict, one_minute: float) -> dict:
    return {**row, "load_avg": {"before": [one_minute, 1.0, 1.0], "after": [2.0, 1.0, 1.0]}}


def side(samples: list[float], status: str = "ok") -> compare.CompareSide:
    return compare.CompareSide.of(record("cpu.k", samples, status))


# ------------------------------------------------------------------ verdicts
def test_same_distribution_is_same() -> None:
    verdict, _, ratio, p = compare.judge(side(timings(2.0, 0.01, seed=1)),
                                         side(timings(2.0, 0.01, seed=2)))
    assert verdict == "same" and ratio == pytest.approx(1.0, abs=0.01) and p > 0.01


def test_planted_twenty_percent_slowdown_is_slower() -> None:
    verdict, _, ratio, p = compare.judge(side(timings(2.0, 0.02, seed=1)),
                                         side(timings(2.4, 0.02, seed=2)))
    assert verdict == "slower" and ratio == pytest.approx(1.2, rel=0.02) and p < 1e-6


def test_speedup_is_faster() -> None:
    verdict, *_ = compare.judge(side(timings(2.4, 0.02, seed=1)), side(timings(2.0, 0.02, seed=2)))
    assert verdict == "faster"


def test_significant_but_small_change_is_same() -> None:
    verdict, why, ratio, p = compare.judge(side(timings(2.0, 0.002, seed=1)),
                                           side(timings(2.04, 0.002, seed=2)))
    assert p < 0.01 and ratio == pytest.approx(1.02, rel=0.005)
    assert verdict == "same" and "within 5%" in why


def test_noisy_samples_are_unsure() -> None:
    base, new = timings(2.0, 0.4, n=8, seed=3), timings(2.3, 0.4, n=8, seed=4)
    verdict, why, _, p = compare.judge(side(base), side(new))
    assert verdict == "unsure" and p > 0.01 and why == "noisy"
    # A ratio near 1 proves nothing either when the noise could hide the threshold.
    verdict, why, *_ = compare.judge(side(base), side(timings(2.0, 0.4, n=8, seed=5)))
    assert verdict == "unsure"


def test_too_few_samples_are_unsure() -> None:
    verdict, why, ratio, p = compare.judge(side([1.0, 1.0, 1.0]), side([3.0, 3.0, 3.0]))
    assert verdict == "unsure" and "3 samples" in why and ratio == 3.0 and p is None


def test_a_kernel_that_stops_working_is_broken() -> None:
    good = side(timings(2.0, 0.01))
    for status in ("failed", "error", "invalid"):
        assert compare.judge(good, side(timings(2.0, 0.01), status))[0] == "broken"
    assert compare.judge(side([], "error"), good)[0] == "unsure"
    assert compare.judge(good, side([], "unavailable"))[:2] == (
        "unsure", "unavailable in NEW")


# -------------------------------------------------------------- whole files
def test_rows_from_different_device_models_are_never_paired(tmp_path: Path) -> None:
    # A cluster run's file holds rows of several machines, each naming its device.
    def on(model: str, host: str, samples: list[float]) -> dict:
        return {**record("cuda.k", samples), "host": host, "worker": f"{host}-gpu0",
                "device_model": model}

    base = write(tmp_path / "base.json", [on("NVIDIA H100", "a", timings(1.0, 0.01, seed=1)),
                                          on("NVIDIA A100", "b", timings(2.0, 0.01, seed=2))])
    new = write(tmp_path / "new.json", [on("NVIDIA H100", "c", timings(1.0, 0.01, seed=3)),
                                        on("NVIDIA L4", "d", timings(9.0, 0.01, seed=4))])
    result = compare.compare(base, new)
    assert [(r.kernel, r.verdict) for r in result.rows] == [("cuda.k", "same")]
    assert result.only_base == [("cuda.k", "512x512x512", "NVIDIA A100")]
    assert result.only_new == [("cuda.k", "512x512x512", "NVIDIA L4")]
    # A local run's rows take the model from their file: a CPU row meets another CPU's.
    other_cpu = tmp_path / "other.json"
    results.save(other_cpu, [record("cpu.a", timings(1.0, 0.01))], {"cpu": "other CPU"}, {})
    with pytest.raises(ValueError, match="share no measured kernel x problem"):
        compare.compare(write(tmp_path / "cpu.json", [record("cpu.a", timings(1.0, 0.01))]),
                        other_cpu)


def test_files_compare_row_by_row(tmp_path: Path) -> None:
    base = write(tmp_path / "base.json", [
        record("cpu.a", timings(1.0, 0.01, seed=1)),
        record("cpu.b", timings(1.0, 0.01, seed=2)),
        record("cpu.gone", timings(1.0, 0.01, seed=3)),
        record("cpu.a", timings(8.0, 0.01, seed=4), m=1024, n=1024, k=1024),
    ], threads=2)
    new = write(tmp_path / "new.json", [
        record("cpu.a", timings(1.0, 0.01, seed=5)),
        record("cpu.b", timings(1.3, 0.01, seed=6)),
        record("cpu.added", timings(1.0, 0.01, seed=7)),
        record("cpu.a", timings(6.0, 0.01, seed=8), m=1024, n=1024, k=1024),
    ], threads=1)
    result = compare.compare(base, new)
    assert [(r.kernel, r.problem, r.verdict) for r in result.rows] == [
        ("cpu.a", "512x512x512", "same"), ("cpu.b", "512x512x512", "slower"),
        ("cpu.a", "1024x1024x1024", "faster")]
    assert result.only_base == [("cpu.gone", "512x512x512", "test CPU")]
    assert result.only_new == [("cpu.added", "512x512x512", "test CPU")]
    assert "setting threads: 2 in BASE, 1 in NEW" in result.notes
    assert result.exit_status == 1


def test_cli_gate_exit_status_and_markdown(tmp_path: Path, capsys) -> None:
    base = write(tmp_path / "base.json", [record("cpu.a", timings(1.0, 0.01, seed=1))])
    same = write(tmp_path / "same.json", [record("cpu.a", timings(1.0, 0.01, seed=2))])
    slow = write(tmp_path / "slow.json", [record("cpu.a", timings(1.2, 0.01, seed=3))])
    md = tmp_path / "compare.md"
    assert cli.main(["compare", str(base), str(same)]) == 0
    assert "pass: nothing significantly slower" in capsys.readouterr().out
    assert cli.main(["compare", str(base), str(slow), "--markdown", str(md)]) == 1
    out = capsys.readouterr().out
    assert "slower" in out and "FAIL" in out
    text = md.read_text()
    assert "| cpu.a | 512x512x512 |" in text and "| slower |" in text
    assert "**1 slower (threshold 5%) -- FAIL" in text
    # A threshold above the slowdown lets it pass.
    assert cli.main(["compare", str(base), str(slow), "--threshold", "0.25"]) == 0


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_bad_input_is_one_line_naming_the_file(tmp_path: Path, capsys) -> None:
    base = write(tmp_path / "base.json", [record("cpu.a", timings(1.0, 0.01))])
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    no_samples = write(tmp_path / "empty.json", [
        {"kernel": "cpu.a", "backend": "cpu", "status": "unavailable", "reason": "no",
         "problem": PROBLEM}])
    elsewhere = write(tmp_path / "other.json", [record("cpu.z", timings(1.0, 0.01))])
    cases = [(garbage, "garbage.json is not JSON"), (tmp_path / "missing.json", "missing.json"),
             (no_samples, "empty.json: no kernel timing samples")]
    for path, message in cases:
        assert cli.main(["compare", str(base), str(path)]) == 2
        assert message in _one_error_line(capsys)
    assert cli.main(["compare", str(base), str(elsewhere)]) == 2
    assert "share no measured kernel" in _one_error_line(capsys)
    assert cli.main(["compare", str(base), str(base), "--threshold", "5"]) == 2
    assert "between 0 and 1" in _one_error_line(capsys)


def test_old_files_without_noise_fields_compare(tmp_path: Path) -> None:
    old = record("cpu.a", timings(1.0, 0.01, seed=1))
    new = {**record("cpu.a", timings(1.0, 0.01, seed=2)), "noisy": False}
    new["kernel_ms"]["noise"] = 0.01
    result = compare.compare(write(tmp_path / "old.json", [old]),
                             write(tmp_path / "new.json", [new]))
    assert result.rows[0].verdict == "same"
    assert result.rows[0].base.noise == pytest.approx(0.01, rel=0.5)  # from the samples


def test_rows_on_different_devices_are_not_compared(tmp_path: Path) -> None:
    pocl = {**record("opencl.naive", timings(1.0, 0.01, seed=1)), "device": "0: PoCL CPU"}
    nvidia = {**record("opencl.naive", timings(0.1, 0.01, seed=2)), "device": "1: NVIDIA H100"}
    gpu0 = {**record("cuda.k", timings(1.0, 0.01, seed=3)), "device": 0}
    result = compare.compare(write(tmp_path / "a.json", [pocl, gpu0]),
                             write(tmp_path / "b.json", [nvidia, gpu0]))
    assert [(r.kernel, r.problem, r.verdict) for r in result.rows] == [
        ("cuda.k", "512x512x512 @ device 0", "same")]
    assert "only in BASE: opencl.naive @ 512x512x512 on 0: PoCL CPU" in \
        compare.render_markdown(result, 0.05)


def test_cpu_rows_measured_on_an_overloaded_host_are_unsure(tmp_path: Path) -> None:
    """Load that changes between runs moves every sample: no verdict from such samples."""
    fast, slow = timings(1.0, 0.01, seed=1), timings(1.5, 0.01, seed=2)
    base = write(tmp_path / "base.json", [
        loaded(record("cpu.a", fast), 2.9),   # its own two threads and a little more: fine
        loaded(record("cpu.b", fast), 2.9),
        loaded(record("cuda.c", fast), 2.9)])
    new = write(tmp_path / "new.json", [
        loaded(record("cpu.a", slow), 2.9),
        loaded(record("cpu.b", slow), 5.6),   # 5.6 on 2 cores: other programs ran too
        loaded(record("cuda.c", slow), 5.6)])  # device timers do not see the host's load
    result = compare.compare(base, new)
    assert [(r.kernel, r.verdict, r.why) for r in result.rows] == [
        ("cpu.a", "slower", "significant"), ("cpu.b", "unsure", "loaded"),
        ("cuda.c", "slower", "significant")]
    assert any(n.startswith("host loaded in NEW: 1-minute load average up to 5.6 on 2 cores")
               for n in result.notes)
    assert not any("in BASE" in n and "loaded" in n for n in result.notes)


def test_cli_writes_verdict_json_and_junit_with_a_geomean_line(tmp_path: Path, capsys) -> None:
    import json
    import xml.etree.ElementTree as ET

    base = write(tmp_path / "base.json", [record("cpu.a", timings(1.0, 0.01, seed=1)),
                                          record("cpu.b", timings(1.0, 0.01, seed=2))])
    new = write(tmp_path / "new.json", [record("cpu.a", timings(1.0, 0.01, seed=3)),
                                        record("cpu.b", timings(1.3, 0.01, seed=4))])
    as_json, as_xml = tmp_path / "v.json", tmp_path / "v.xml"
    assert cli.main(["compare", str(base), str(new), "--verdict-json", str(as_json),
                     "--junit", str(as_xml)]) == 1
    out = capsys.readouterr().out
    assert "geometric mean NEW/BASE over 2 kernel x problem: 1.1" in out
    doc = json.loads(as_json.read_text())
    assert [(r["kernel"], r["verdict"]) for r in doc["rows"]] == [("cpu.a", "same"),
                                                                  ("cpu.b", "slower")]
    assert doc["exit_status"] == 1 and doc["new"] == str(new)
    assert doc["rows"][1]["ratio"] == pytest.approx(1.3, rel=0.02)
    failures = ET.parse(as_xml).getroot().find("testsuite").get("failures")
    assert failures == "1"
    # An output path in a missing folder is refused before anything is compared.
    assert cli.main(["compare", str(base), str(new), "--junit",
                     str(tmp_path / "nowhere" / "v.xml")]) == 2
    assert "--junit" in capsys.readouterr().err


# ------------------------------------------------------- code identity and load
def with_code(row: dict, code_hash: str) -> dict:
    return {**row, "code": {"hash": code_hash, "kernel": code_hash, "engine": "e"}}


def with_share(row: dict, share: float) -> dict:
    return {**row, "host_load": {"others_share": share, "cores": 2, "seconds": 1.0}}


def compared(tmp_path: Path, base: tuple[float, str, float], new: tuple[float, str, float],
             noise: float = 0.01) -> tuple[compare.CompareRow, compare.Comparison]:
    """One row compared: each side is (median ms, code hash, others' share of the CPU)."""
    paths = []
    for name, (ms, code_hash, share), seed in (("a", base, 1), ("b", new, 2)):
        row = with_share(with_code(record("cpu.k", timings(ms, noise, seed=seed)), code_hash),
                         share)
        paths.append(write(tmp_path / f"{name}.json", [row]))
    result = compare.compare(*paths)
    return result.rows[0], result


def test_identical_code_is_same_whatever_the_times(tmp_path: Path) -> None:
    """A quiet run and a loaded run of byte-identical code: the 30% is the machine's."""
    row, result = compared(tmp_path, (1.0, "abc", 0.01), (1.3, "abc", 0.5), noise=0.2)
    assert row.verdict == "same" and row.why.startswith("identical code")
    assert "environment" in row.why and result.exit_status == 0


def test_changed_code_under_changed_load_is_unsure(tmp_path: Path) -> None:
    row, result = compared(tmp_path, (1.0, "abc", 0.01), (1.3, "abd", 0.5))
    assert row.verdict == "unsure" and row.why.startswith("load changed")
    assert "1%" in row.why and "50%" in row.why and result.exit_status == 0


def test_changed_code_under_the_same_load_is_judged(tmp_path: Path) -> None:
    row, result = compared(tmp_path, (1.0, "abc", 0.4), (1.3, "abd", 0.45))
    assert row.verdict == "slower" and result.exit_status == 1


def test_identical_code_names_the_setting_that_moved_it(tmp_path: Path) -> None:
    rows = [with_code(record("cpu.omp_tiled", timings(ms, 0.01, seed=i)), "abc")
            for i, ms in enumerate((1.0, 2.24))]
    base = write(tmp_path / "two.json", [rows[0]], threads=2, l2="warm")
    new = write(tmp_path / "one.json", [rows[1]], threads=1, l2="warm")
    row = compare.compare(base, new).rows[0]
    assert row.verdict == "same" and row.changed == ["threads 2 → 1"]
    assert row.environment_note == "+124% is the environment's: threads 2 → 1"


def test_identical_code_with_nothing_recorded_apart_says_so(tmp_path: Path) -> None:
    row, _ = compared(tmp_path, (1.0, "abc", 0.01), (1.3, "abc", 0.05), noise=0.01)
    assert row.environment_note.endswith("is the environment's: no recorded setting differs")


def test_terminal_table_at_80_columns_gives_the_verdict_and_its_reason(
        tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    rows = [with_code(record("cpu.omp_packed", timings(ms, 0.01, seed=i)), "abc")
            for i, ms in enumerate((1.0, 2.24))]
    base = write(tmp_path / "two.json", [rows[0]], threads=2)
    new = write(tmp_path / "one.json", [rows[1]], threads=1)
    assert cli.main(["compare", str(base), str(new)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 80
    row = next(line for line in lines if line.lstrip().startswith("cpu.omp_packed"))
    assert "same (identical code) [1]" in row
    assert "[1] +124% is the environment's: threads 2 → 1" in lines


def test_markdown_gives_the_footnote_too(tmp_path: Path) -> None:
    rows = [with_code(record("cpu.k", timings(ms, 0.01, seed=i)), "abc")
            for i, ms in enumerate((1.0, 2.0))]
    result = compare.compare(write(tmp_path / "a.json", [rows[0]], threads=2),
                             write(tmp_path / "b.json", [rows[1]], threads=1))
    text = compare.render_markdown(result, compare.DEFAULT_THRESHOLD)
    assert "| same (identical code) [1] |" in text
    assert "- [1] +100% is the environment's: threads 2 → 1" in text


def test_two_outputs_naming_one_file_are_refused(tmp_path, capsys) -> None:
    from mmsuite.cli import main

    same = tmp_path / "out.xml"
    assert main(["compare", "a.json", "b.json", "--junit", str(same), "--markdown",
                 str(same)]) == 2
    assert capsys.readouterr().err.strip() == (f"mmsuite: error: --markdown and --junit name "
                                               f"the same file {same}")


def throttled_side(samples: list[float], reasons: list[str] | None) -> compare.CompareSide:
    return compare.CompareSide.of({**record("cuda.k", samples), "throttled": reasons})


def test_a_throttle_change_between_runs_is_unsure_like_a_load_change() -> None:
    base, new = timings(2.0, 0.01, seed=1), timings(2.4, 0.01, seed=2)
    verdict, why, *_ = compare.judge(throttled_side(base, []),
                                     throttled_side(new, ["sw_power_cap"]))
    assert (verdict, why) == ("unsure", "throttling changed: none in BASE, sw_power_cap in NEW")
    # Throttled alike on both sides, or not recorded on one: the samples decide.
    assert compare.judge(throttled_side(base, ["hw_thermal"]),
                         throttled_side(new, ["hw_thermal"]))[0] == "slower"
    assert compare.judge(throttled_side(base, None),
                         throttled_side(new, ["sw_power_cap"]))[0] == "slower"


def test_a_large_comparison_prints_its_findings_first_and_counts_the_rest(
        tmp_path: Path, capsys) -> None:
    """Thousands of rows once printed for minutes: a terminal gets about TERMINAL_ROWS of
    them, the slower and broken ones first, and a line counting the rest by verdict."""
    from mmsuite.report import TERMINAL_ROWS

    sizes = range(8, 8 + 3 * TERMINAL_ROWS)
    base = [record("cpu.a", timings(1.0, 0.01, seed=m), m=m, n=m, k=m) for m in sizes]
    new = [record("cpu.a", timings(1.5 if m == 500 else 1.0, 0.01, seed=m + 1), m=m, n=m, k=m)
           for m in sizes]
    base_path, new_path = write(tmp_path / "b.json", base), write(tmp_path / "n.json", new)
    assert cli.main(["compare", str(base_path), str(new_path)]) == 1
    out = capsys.readouterr().out
    assert out.count("NEW against BASE") <= TERMINAL_ROWS
    assert "500x500x500" in out  # the one slower row, far beyond the first tables
    assert f"of {3 * TERMINAL_ROWS}: --all-rows prints every row" in out
    assert cli.main(["compare", str(base_path), str(new_path), "--all-rows"]) == 1
    out = capsys.readouterr().out
    assert out.count("NEW against BASE") == 3 * TERMINAL_ROWS and "not shown" not in out


def test_terminal_rows_keep_their_order_with_findings_first() -> None:
    rows = [SimpleNamespace(verdict=v) for v in ("same", "slower", "same", "faster", "broken")]
    assert [r.verdict for r in compare.terminal_rows(rows, 3)] == ["slower", "faster", "broken"]
    assert compare.terminal_rows(rows, None) == rows and compare.terminal_rows(rows, 5) == rows
