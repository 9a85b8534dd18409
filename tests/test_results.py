"""Result files are written atomically, read back as written, and refused when damaged."""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path

import pytest

from mmsuite import results


def _ok_record(**changes) -> dict:
    record = {"kernel": "cpu.blas", "backend": "cpu", "status": "ok", "reason": "",
              "problem": {"m": 4, "n": 4, "k": 4, "batch": 1},
              "kernel_ms": {"median": 0.5, "min": 0.4, "max": 0.6, "samples": [0.4, 0.5, 0.6]},
              "gflops": 0.25, "max_rel_err": 1e-7}
    record.update(changes)
    return record


def test_round_trip_and_non_finite_values(tmp_path) -> None:
    path = tmp_path / "r.json"
    failed = _ok_record(status="failed", reason="NaN", max_rel_err=math.inf)
    results.save(path, [failed], {"cpu": "x"}, {})
    doc = results.load(path)
    assert doc["results"][0]["max_rel_err"] == math.inf and doc["environment"] == {"cpu": "x"}


def test_a_rungs_origin_reads_from_files_that_called_it_seed(tmp_path) -> None:
    path = tmp_path / "old.json"
    results.save(path, [_ok_record(seed="002"), _ok_record(origin="beyond")], {}, {})
    old, new = results.load(path)["results"]
    assert old["origin"] == "002" and "seed" not in old and new["origin"] == "beyond"


def test_save_creates_no_folder(tmp_path) -> None:
    with pytest.raises(FileNotFoundError):
        results.save(tmp_path / "missing" / "r.json", [], {}, {})
    assert not (tmp_path / "missing").exists()


def test_files_get_the_users_umask(tmp_path) -> None:
    old = os.umask(0o022)
    try:
        results.save(tmp_path / "r.json", [], {}, {})
        journal = results.Journal(tmp_path / "r.jsonl", {})
        journal.close()
    finally:
        os.umask(old)
    for name in ("r.json", "r.jsonl"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644


def test_failed_write_keeps_the_old_file(tmp_path) -> None:
    path = tmp_path / "r.json"
    results.save(path, [], {}, {})
    before = path.read_text()
    with pytest.raises(TypeError):
        results.save(path, [{"bad": object()}], {}, {})
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_load_rejects_other_files(tmp_path) -> None:
    other = tmp_path / "x.json"
    other.write_text("{}")
    with pytest.raises(results.ResultsError, match="not an mmsuite result file"):
        results.load(other)


@pytest.mark.parametrize("change,message", [
    ({"kernel_ms": None}, r"record 0 \(cpu.blas\): field 'kernel_ms' is missing"),
    ({"kernel_ms": {"median": None}}, r"field 'kernel_ms.median' is None"),
    ({"gflops": "fast"}, r"field 'gflops' is 'fast'"),
    ({"status": "great"}, r"field 'status' is 'great'"),
    ({"kernel": 7}, r"record 0: field 'kernel' is missing or not a string"),
    ({"problem": {"m": 4}}, r"field 'problem.n'"),
    ({"kernel_ms": {"median": 0.5, "samples": []}}, r"field 'kernel_ms.samples' is empty"),
    ({"h2d_ms": "fast"}, r"field 'h2d_ms' is 'fast', expected an object or null"),
    ({"info": 3}, r"field 'info' is 3, expected an object or null"),
    ({"parent": []}, r"field 'parent' is \[\], expected a string or null"),
    ({"problem": {"m": 4, "n": 4, "k": 4, "batch": 1, "layout": None}},
     r"field 'problem.layout' is None, expected 'row' or 'col'"),
    ({"kernel_ms": {"median": 0.5, "samples": [0.5], "noise": "low"}},
     r"field 'kernel_ms.noise' is 'low'"),
    ({"d2h_ms": {"samples": ["a"]}}, r"field 'd2h_ms.samples' is not a list of numbers"),
])
def test_load_names_the_file_record_and_field_at_fault(tmp_path, change, message) -> None:
    path = tmp_path / "r.json"
    results.save(path, [_ok_record(**change)], {}, {})
    with pytest.raises(results.ResultsError, match=message) as info:
        results.load(path)
    assert str(path) in str(info.value)


def test_an_ok_row_without_its_figures_is_refused(tmp_path) -> None:
    path = tmp_path / "r.json"
    record = _ok_record()
    del record["kernel_ms"], record["gflops"]
    results.save(path, [record], {}, {})
    with pytest.raises(results.ResultsError, match="kernel_ms"):
        results.load(path)


def test_rows_without_figures_are_fine_when_not_measured(tmp_path) -> None:
    path = tmp_path / "r.json"
    rows = [{"kernel": "cuda.01_naive", "status": s, "reason": "no GPU",
             "problem": {"m": 4, "n": 4, "k": 4, "batch": 1}} for s in ("unavailable", "error")]
    results.save(path, rows, {}, {})
    assert [r["status"] for r in results.load(path)["results"]] == ["unavailable", "error"]


def test_load_refuses_a_truncated_file(tmp_path) -> None:
    path = tmp_path / "r.json"
    results.save(path, [_ok_record()], {}, {})
    path.write_text(path.read_text()[:-40])
    with pytest.raises(results.ResultsError, match="is not JSON"):
        results.load(path)


def test_journal_keeps_rows_and_skips_a_torn_last_line(tmp_path) -> None:
    path = results.journal_path(tmp_path / "r.json")
    assert path.name == "r.jsonl"
    journal = results.Journal(path, {"repeats": 1}, [_ok_record(kernel="cpu.seq_naive")])
    journal.append(_ok_record())
    journal.close()
    with open(path, "a") as fh:
        fh.write('{"kernel": "cpu.seq_ik')  # killed while writing
    assert [r["kernel"] for r in results.load_rows(path)] == ["cpu.seq_naive", "cpu.blas"]


def test_journal_refuses_damage_before_the_last_line(tmp_path) -> None:
    path = tmp_path / "r.jsonl"
    results.Journal(path, {}).close()
    with open(path, "a") as fh:
        fh.write("garbage\n" + json.dumps(_ok_record()) + "\n")
    with pytest.raises(results.ResultsError, match="line 2 is not JSON"):
        results.load_rows(path)


def test_load_rows_reads_a_final_file_too(tmp_path) -> None:
    path = tmp_path / "r.json"
    results.save(path, [_ok_record()], {}, {})
    assert results.load_rows(path)[0]["kernel"] == "cpu.blas"


def test_check_writable(tmp_path) -> None:
    results.check_writable(tmp_path / "new.json")
    with pytest.raises(ValueError, match="does not exist"):
        results.check_writable(tmp_path / "no" / "x.json")
    with pytest.raises(ValueError, match="is a directory"):
        results.check_writable(tmp_path)
    with pytest.raises(ValueError, match="/dev/null is not a regular file"):
        results.check_writable(Path("/dev/null"))
