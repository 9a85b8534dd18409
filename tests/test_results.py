"""Result files are written atomically, read back as written, and refused when damaged."""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path

import pytest

from mmsuite import results

PROBLEM = {"m": 4, "n": 4, "k": 4, "batch": 1, "layout": "row", "alpha": 1.0, "beta": 0.0}


def _ok_record(**changes) -> dict:
    record = {"kernel": "cpu.blas", "backend": "cpu", "status": "ok", "reason": "",
              "adds": "OpenBLAS", "problem": PROBLEM,
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
    ({"kernel_ms": None}, r"record 0 \(cpu.blas\): field 'kernel_ms' is None, expected object"),
    ({"kernel_ms": {"median": None}}, r"field 'kernel_ms.samples' is missing"),
    ({"gflops": "fast"}, r"field 'gflops' is 'fast', expected number"),
    ({"status": "great"}, r"field 'status' is 'great', expected one of 'ok'"),
    ({"kernel": 7}, r"record 0: field 'kernel' is 7, expected string"),
    ({"problem": {"m": 4}}, r"field 'problem.n' is missing"),
    ({"problem": {**PROBLEM, "m": 4.0}},
     r"field 'problem.m' is 4.0, expected integer"),
    ({"kernel_ms": {"median": 0.5, "samples": []}}, r"field 'kernel_ms.samples' is empty"),
    ({"h2d_ms": "fast"}, r"field 'h2d_ms' is 'fast', expected null or object"),
    ({"info": 3}, r"field 'info' is 3, expected null or object"),
    ({"parent": []}, r"field 'parent' is \[\], expected null or string"),
    ({"problem": {**PROBLEM, "layout": None}},
     r"field 'problem.layout' is None, expected one of 'row', 'col'"),
    ({"kernel_ms": {"median": 0.5, "samples": [0.5], "noise": "low"}},
     r"field 'kernel_ms.noise' is 'low', expected null or number"),
    ({"d2h_ms": {"samples": ["a"]}}, r"field 'd2h_ms.samples\[0\]' is 'a', expected number"),
    # Table row 5: a negative, zero or missing sample is refused, whatever the median says.
    ({"kernel_ms": {"median": 0.5, "samples": [-1.0, -1.0]}},
     r"field 'kernel_ms.samples\[0\]' is -1.0, expected a number above 0"),
    ({"kernel_ms": {"median": 0.5, "samples": [0.5, 0]}},
     r"field 'kernel_ms.samples\[1\]' is 0, expected a number above 0"),
    ({"kernel_ms": {"median": 0.5, "samples": [0.5, None]}},
     r"field 'kernel_ms.samples\[1\]' is None, expected a number above 0|expected number"),
    # Table row 7: a record without its backend (charts group by it) or what tables show.
    ({"backend": None}, r"field 'backend' is None, expected string"),
    ({"adds": 3}, r"field 'adds' is 3, expected string"),
    ({"problem": {**PROBLEM, "alpha": "one"}}, r"field 'problem.alpha' is 'one'"),
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
    rows = [{"kernel": "cuda.01_naive", "backend": "cuda", "status": s, "reason": "no GPU",
             "adds": "", "problem": PROBLEM} for s in ("unavailable", "error")]
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


# ------------------------------------------------------- the schema and its limits
@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_non_finite_sample_is_refused(tmp_path, token) -> None:
    path = tmp_path / "r.json"
    results.save(path, [_ok_record()], {}, {})
    path.write_text(path.read_text().replace('"samples": [\n     0.4', f'"samples": [{token}'))
    with pytest.raises(results.ResultsError, match=rf"{path} is not JSON: .*{token[-8:]}"):
        results.load(path)


def test_the_median_is_recomputed_from_the_samples(tmp_path) -> None:
    path = tmp_path / "r.json"
    record = _ok_record(flops=128, gflops=99.0)
    record["kernel_ms"] = {"median": 0.001, "min": 0.001, "max": 0.001, "samples": [2.0, 4.0, 3.0]}
    results.save(path, [record], {}, {})
    stats = results.load(path)["results"][0]["kernel_ms"]
    assert (stats["median"], stats["min"], stats["max"]) == (3.0, 2.0, 4.0)
    assert results.load(path)["results"][0]["gflops"] == pytest.approx(128 / 3e6)


def test_deep_nesting_is_refused_in_one_line(tmp_path) -> None:
    path = tmp_path / "r.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(results.ResultsError, match="nested too deeply"):
        results.load(path)
    journal = tmp_path / "r.jsonl"
    results.Journal(journal, {}).close()
    with open(journal, "a") as fh:
        fh.write("[" * 100_000 + "]" * 100_000 + "\n" + json.dumps(_ok_record()) + "\n")
    with pytest.raises(results.ResultsError, match="line 2 is nested too deeply"):
        results.load_rows(journal)


@pytest.mark.parametrize("field,value,message", [
    ("cpu_cores", "two", r"field 'environment.cpu_cores' is 'two', expected null or integer"),
    ("cpu_max_mhz", -5, r"field 'environment.cpu_max_mhz' is -5, expected a number above 0"),
    ("backends", {"cuda": {"sm_count": "many"}},
     r"field 'environment.backends.cuda.sm_count' is 'many'"),
    ("backends", {"cpu": 3}, r"field 'environment.backends.cpu' is 3, expected null or object"),
])
def test_wrongly_typed_environment_fields_are_refused(tmp_path, field, value, message) -> None:
    path = tmp_path / "r.json"
    results.save(path, [_ok_record()], {field: value}, {})
    with pytest.raises(results.ResultsError, match=rf"{path}: {message}"):
        results.load(path)


def test_special_files_are_refused_unread(tmp_path) -> None:
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer forever
    with pytest.raises(results.ResultsError, match=f"{fifo} is not a regular file"):
        results.load(fifo)
    with pytest.raises(results.ResultsError, match="/dev/zero is not a regular file"):
        results.load(Path("/dev/zero"))
    with pytest.raises(results.ResultsError, match="is a directory"):
        results.load_rows(tmp_path)
    journal = tmp_path / "x.jsonl"
    os.mkfifo(journal)
    with pytest.raises(results.ResultsError, match="is not a regular file"):
        results.load_rows(journal)


def test_a_file_beyond_the_size_cap_is_refused_unread(tmp_path, monkeypatch) -> None:
    path = tmp_path / "r.json"
    results.save(path, [_ok_record()], {}, {})
    monkeypatch.setattr(results, "MAX_BYTES", 100)
    with pytest.raises(results.ResultsError, match="more than a results file can be"):
        results.load(path)


def test_outputs_replace_a_planted_symlink_and_never_write_its_target(tmp_path) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    link = tmp_path / "r.json"
    link.symlink_to(target)
    results.save(link, [_ok_record()], {}, {})
    assert target.read_text() == "keep me"
    assert not link.is_symlink() and results.load(link)["results"][0]["kernel"] == "cpu.blas"
    results.write_atomically(link, b"\x89PNG")  # figures are bytes
    assert link.read_bytes() == b"\x89PNG"


def test_a_failed_write_names_the_path(tmp_path, monkeypatch) -> None:
    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as info:
        results.save(tmp_path / "r.json", [], {}, {})
    assert info.value.filename == str(tmp_path / "r.json") and info.value.errno == 28
    assert results.write_error(info.value) == \
        f"cannot write {tmp_path / 'r.json'}: No space left on device"
    assert list(tmp_path.iterdir()) == []  # no temporary file left


# ------------------------------------------------------------- owner and journal
def test_a_second_owner_is_refused_naming_the_holders_pid(tmp_path) -> None:
    path = tmp_path / "r.json"
    first = results.Lock(path)
    first.acquire()
    with pytest.raises(results.ResultsLocked,
                       match=rf"{path} is being written by another mmsuite run "
                             rf"\(pid {os.getpid()}\)"):
        results.Lock(path).acquire()
    first.release()
    assert not results.lock_path(path).exists()
    with results.Lock(path):  # free again
        pass


def test_a_lock_left_by_a_killed_run_is_free(tmp_path) -> None:
    path = tmp_path / "r.json"
    results.lock_path(path).write_text("12345\n")  # the file stays, the OS lock went
    with results.Lock(path) as lock:
        assert lock.path.read_text() == f"{os.getpid()}\n"


def test_unfinished_rows_of_a_journal(tmp_path) -> None:
    path = tmp_path / "r.jsonl"
    assert results.unfinished_rows(path) == 0
    journal = results.Journal(path, {})
    assert results.unfinished_rows(path) == 0  # a header only: nothing to lose
    journal.append(_ok_record())
    journal.append(_ok_record(kernel="cpu.seq_naive"))
    journal.close()
    assert results.unfinished_rows(path) == 2
    assert [r["kernel"] for r in results.load_rows(path)] == ["cpu.blas", "cpu.seq_naive"]


def test_a_journal_write_that_fails_is_kept_not_raised(tmp_path, monkeypatch) -> None:
    path = tmp_path / "r.jsonl"
    journal = results.Journal(path, {})
    journal.append(_ok_record())

    def full(fd):
        raise OSError(27, "File too large")

    monkeypatch.setattr(os, "fsync", full)
    journal.append(_ok_record(kernel="cpu.seq_naive"))
    journal.append(_ok_record(kernel="cpu.seq_ikj"))
    journal.close()
    assert journal.error is not None and journal.error.filename == str(path)
    assert results.load_rows(path)[0]["kernel"] == "cpu.blas"


def test_a_record_without_its_backend_is_refused(tmp_path) -> None:
    path = tmp_path / "r.json"
    record = _ok_record()
    del record["backend"]  # charts and tables group by it
    results.save(path, [record], {}, {})
    with pytest.raises(results.ResultsError,
                       match=r"record 0 \(cpu.blas\): field 'backend' is missing"):
        results.load(path)


def test_fields_every_reader_indexes_get_their_defaults(tmp_path) -> None:
    path = tmp_path / "r.json"
    record = _ok_record(problem={"m": 4, "n": 4, "k": 4, "batch": 1})
    del record["adds"], record["reason"]
    results.save(path, [record], {}, {})
    loaded = results.load(path)["results"][0]
    assert (loaded["adds"], loaded["reason"]) == ("", "")
    assert loaded["problem"] == PROBLEM


def test_the_fixtures_and_a_fresh_run_pass_the_schema() -> None:
    fixtures = Path(__file__).parent / "fixtures"
    for path in sorted(fixtures.glob("*.json")):
        assert results.load(path)["results"], path


@pytest.mark.parametrize("change,message", [
    ({"problem": {**PROBLEM, "m": 10**30}},
     r"field 'problem.m' is 1000000000000000000000000000000, expected a number at most "
     r"2147483647"),
    ({"problem": {**PROBLEM, "n": 2**31}}, r"field 'problem.n' is 2147483648, expected a "
                                           r"number at most 2147483647"),
    ({"problem": {**PROBLEM, "alpha": 1e300}},
     r"field 'problem.alpha' is 1e\+300, expected a number at most 3.40282"),
    ({"problem": {**PROBLEM, "beta": -1e39}},
     r"field 'problem.beta' is -1e\+39, expected a number at least -3.40282"),
    ({"problem": {**PROBLEM, "inputs": "bogus"}},
     r"field 'problem.inputs' is 'bogus', expected one of 'uniform', 'normal', 'wide'"),
    ({"energy": {"joules": "x"}}, r"field 'energy.joules' is 'x', expected null or number"),
    ({"load_avg": {"before": "x"}}, r"field 'load_avg.before' is 'x', expected null or "
                                    "array"),
    ({"load_avg": {"after": ["x"]}}, r"field 'load_avg.after\[0\]' is 'x', expected number"),
    ({"sampling": {"seconds": "long"}}, r"field 'sampling.seconds' is 'long'"),
])
def test_the_schema_bounds_what_the_readers_format(tmp_path, change, message) -> None:
    """Values a problem cannot have, or fields of the wrong type, once crashed `report`."""
    path = tmp_path / "r.json"
    results.save(path, [_ok_record(**change)], {}, {})
    with pytest.raises(results.ResultsError,
                       match=f"^{re.escape(str(path))}: record 0 \\(cpu.blas\\): {message}"):
        results.load(path)


def test_the_largest_problem_and_scalars_are_sound(tmp_path) -> None:
    path = tmp_path / "r.json"
    edge = {**PROBLEM, "m": 2**31 - 1, "alpha": -3.4e38, "beta": 3.4e38, "inputs": "wide"}
    results.save(path, [_ok_record(problem=edge, load_avg={"before": [0.5, 0.4, 0.3]},
                                   energy={"joules": 0.3, "launches": 100})], {}, {})
    assert results.load(path)["results"][0]["problem"]["m"] == 2**31 - 1


def test_text_a_terminal_would_act_on_is_made_printable(tmp_path) -> None:
    """An escape sequence in a kernel's name or reason must not reach the terminal."""
    path = tmp_path / "r.json"
    results.save(path, [_ok_record(kernel="cpu.x\x1b]0;title\x07\x1b[2J",
                                   reason="line one\nline\x1b[31m two\tend",
                                   info={"device": "gpu\x9b1m"})], {}, {})
    (record,) = results.load(path)["results"]
    assert record["kernel"] == "cpu.x\ufffd]0;title\ufffd\ufffd[2J"
    assert record["reason"] == "line one\nline\ufffd[31m two\tend"  # newlines and tabs stay
    assert record["info"] == {"device": "gpu\ufffd1m"}
