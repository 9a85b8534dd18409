"""Result files: one JSON document per run, written atomically, and its row journal.

While a run goes on, every finished row is appended to a JSON Lines journal
beside the final file (``X.json`` -> ``X.jsonl``): a header line with the
settings, then one record a line. A run that is interrupted or killed keeps
every row it finished there; ``--resume`` reads either file.

Every reader goes through ``load`` (or ``load_rows``), which checks each record
and names the file, the record and the field at fault: a damaged file is
refused, never shown with an ``ok`` row that lost its figures.
"""

from __future__ import annotations

import json
import math
import os
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Any

FORMAT = "mmsuite-results/1"
JOURNAL_FORMAT = "mmsuite-journal/1"
STATUSES = ("ok", "failed", "error", "unavailable", "invalid")
# Statuses whose row carries measured figures (kernel time, GFLOP/s).
MEASURED = ("ok", "failed", "invalid")


class ResultsError(ValueError):
    """A results file that cannot be read: the message names the file, record and field."""


def _clean(value: Any) -> Any:
    """JSON has no NaN/Inf: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def journal_path(path: Path) -> Path:
    """The JSON Lines journal kept beside the final file: ``X.json`` -> ``X.jsonl``."""
    path = Path(path)
    return path.with_name(path.name + ("l" if path.suffix == ".json" else ".jsonl"))


def _create(path: Path) -> tuple[int, Path]:
    """A new hidden file beside ``path``, created with the user's umask (mkstemp's is 0600)."""
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue


def write_atomically(path: Path, text: str) -> None:
    fd, tmp = _create(path)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def save(path: Path, records: list[dict], environment: dict, settings: dict) -> None:
    """Write the run atomically: a reader never sees half a file, a crash never leaves one.

    The folder must exist: no directory is created that the user did not name.
    """
    document = {"format": FORMAT, "environment": environment, "settings": settings,
                "results": records}
    write_atomically(Path(path), json.dumps(_clean(document), indent=1))


def check_writable(path: Path, what: str = "output file") -> None:
    """Refuse an output path that cannot be written, before any work is done (ValueError)."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{what} {path} is a directory")
    if path.exists() and not path.is_file():  # a device or pipe would be replaced by a file
        raise ValueError(f"{what} {path} is not a regular file")
    folder = path.parent
    if not folder.is_dir():
        raise ValueError(f"{what} {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"{what} {path}: folder {folder} is not writable")
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"{what} {path} is not writable")


class Journal:
    """The JSON Lines journal of a run: a header, then one finished row a line.

    Each line is flushed and synced as it is written, so a kill loses at most
    the row being written (and ``load_rows`` skips a torn last line).
    """

    def __init__(self, path: Path, settings: dict, records: Iterable[dict] = ()) -> None:
        self.path = Path(path)
        header = {"format": JOURNAL_FORMAT, "settings": settings}
        lines = [header, *records]
        write_atomically(self.path, "".join(json.dumps(_clean(x)) + "\n" for x in lines))
        self._fh = open(self.path, "a")  # kept open for the whole run

    def append(self, record: dict) -> None:
        self._fh.write(json.dumps(_clean(record)) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()


def _record_error(path: Path, index: int, record: Any, message: str) -> ResultsError:
    name = record.get("kernel") if isinstance(record, dict) else None
    which = f"record {index}" + (f" ({name})" if isinstance(name, str) else "")
    return ResultsError(f"{path}: {which}: {message}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# The type of every field a reader uses; NaN and Inf are written as null, so numbers may
# be null. Fields not listed are left to their readers (files from newer versions).
_NUMBER_OR_NULL = ("a number or null", lambda v: v is None or _is_number(v))
_TEXT = ("a string", lambda v: isinstance(v, str))
_TEXT_OR_NULL = ("a string or null", lambda v: v is None or isinstance(v, str))
_OBJECT_OR_NULL = ("an object or null", lambda v: v is None or isinstance(v, dict))
FIELD_TYPES: dict[str, tuple[str, Any]] = {
    "backend": _TEXT, "adds": _TEXT, "origin": _TEXT, "reason": _TEXT, "l2": _TEXT,
    "precision": _TEXT, "peak_kind": _TEXT, "ref_library": _TEXT,
    # Where a cluster run's row ran (mmsuite.machines).
    "host": _TEXT, "worker": _TEXT, "device_model": _TEXT, "device_uuid": _TEXT,
    "parent": _TEXT_OR_NULL,
    "rung": ("an integer or null", lambda v: v is None or _is_int(v)),
    "device": ("an integer, a string or null", lambda v: v is None or _is_int(v)
               or isinstance(v, str)),
    "noisy": ("true or false", lambda v: isinstance(v, bool)),
    **{name: _NUMBER_OR_NULL for name in (
        "flops", "gflops", "host_gflops", "host_to_host_ms", "max_rel_err", "tolerance",
        "pct_peak", "peak_gflops", "ref_max_rel_err", "err_vs_ref")},
    **{name: _OBJECT_OR_NULL for name in (
        "kernel_ms", "h2d_ms", "d2h_ms", "reference_ms", "info", "sampling", "load_avg",
        "transfers", "energy")},
}
PHASES = ("kernel_ms", "h2d_ms", "d2h_ms", "reference_ms")
PROBLEM_TYPES: dict[str, tuple[str, Any]] = {
    "layout": ("'row' or 'col'", lambda v: v in ("row", "col")),
    "alpha": ("a number", _is_number), "beta": ("a number", _is_number),
    "seed": ("an integer", _is_int),
}


def check_record(record: Any) -> str:
    """What is wrong with one result record; empty when it is sound."""
    if not isinstance(record, dict):
        return f"expected an object, got {type(record).__name__}"
    if not isinstance(record.get("kernel"), str) or not record["kernel"]:
        return "field 'kernel' is missing or not a string"
    status = record.get("status")
    if status not in STATUSES:
        return f"field 'status' is {status!r}, expected one of {', '.join(STATUSES)}"
    problem = record.get("problem")
    if not isinstance(problem, dict):
        return "field 'problem' is missing or not an object"
    for key in ("m", "n", "k", "batch"):
        if not _is_int(problem.get(key)) or problem[key] < 1:
            return f"field 'problem.{key}' is missing or not a positive integer"
    for key, (what, ok) in PROBLEM_TYPES.items():
        if key in problem and not ok(problem[key]):
            return f"field 'problem.{key}' is {problem[key]!r}, expected {what}"
    for key, (what, ok) in FIELD_TYPES.items():
        if key in record and not ok(record[key]):
            return f"field {key!r} is {record[key]!r}, expected {what}"
    for phase in PHASES:
        stats = record.get(phase) or {}
        for key in ("median", "min", "max", "spread", "noise"):
            if key in stats and not _NUMBER_OR_NULL[1](stats[key]):
                return f"field '{phase}.{key}' is {stats[key]!r}, expected a number or null"
        samples = stats.get("samples", [])
        if not isinstance(samples, list) or not all(_NUMBER_OR_NULL[1](x) for x in samples):
            return f"field '{phase}.samples' is not a list of numbers"
    if status in MEASURED:
        stats = record.get("kernel_ms")
        if not isinstance(stats, dict):
            return f"field 'kernel_ms' is missing on a row with status {status!r}"
        median = stats.get("median")
        if not _is_number(median) or not math.isfinite(median) or median <= 0:
            return f"field 'kernel_ms.median' is {median!r}, expected a positive number"
        if not stats.get("samples"):
            return f"field 'kernel_ms.samples' is empty on a row with status {status!r}"
    if status == "ok":
        gflops = record.get("gflops")
        if not _is_number(gflops) or not math.isfinite(gflops) or gflops <= 0:
            return f"field 'gflops' is {gflops!r}, expected a positive number"
        err = record.get("max_rel_err")
        if not _is_number(err) or not math.isfinite(err):
            return f"field 'max_rel_err' is {err!r}, expected a number"
    return ""


def _normalise(record: dict) -> dict:
    if isinstance(record.get("seed"), str) and "origin" not in record:
        # Files before 0.2 called a rung's origin "seed", beside the problem's RNG seed.
        record["origin"] = record.pop("seed")
    if record.get("max_rel_err") is None and "max_rel_err" in record:
        record["max_rel_err"] = math.inf  # written as null: NaN/Inf output
    return record


def load(path: Path) -> dict:
    """Read a result file written by ``save``; ``ResultsError`` (a ValueError) names what is
    wrong with a file that is not one or is damaged."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ResultsError(f"no such result file: {path}") from None
    except IsADirectoryError:
        raise ResultsError(f"{path} is a directory, not a result file") from None
    except (PermissionError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path} cannot be read: {exc}") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path} is not JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ResultsError(f"{path} is not an mmsuite result file")
    records = document.get("results")
    if not isinstance(records, list):
        raise ResultsError(f"{path}: field 'results' is missing or not a list")
    for name in ("environment", "settings"):
        if not isinstance(document.get(name, {}), dict):
            raise ResultsError(f"{path}: field {name!r} is not an object")
    for index, record in enumerate(records):
        problem = check_record(record)
        if problem:
            raise _record_error(path, index, record, problem)
        _normalise(record)
    return document


def load_rows(path: Path) -> list[dict]:
    """The records of a final result file or of a run's journal (for ``--resume``).

    A journal's last line may be torn by a kill: it is skipped. Any other
    damaged line is refused with its line number.
    """
    path = Path(path)
    if path.suffix != ".jsonl":
        return load(path)["results"]
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        raise ResultsError(f"no such journal: {path}") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path} cannot be read: {exc}") from None
    try:
        header = json.loads(lines[0]) if lines else None
    except json.JSONDecodeError:
        header = None
    if not isinstance(header, dict) or header.get("format") != JOURNAL_FORMAT:
        raise ResultsError(f"{path} is not an mmsuite journal")
    records = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines):
                break  # the row being written when the run was killed
            raise ResultsError(f"{path}: line {number} is not JSON: {exc}") from None
        problem = check_record(record)
        if problem:
            raise _record_error(path, number - 2, record, problem)
        records.append(_normalise(record))
    return records
