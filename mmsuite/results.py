"""Result files: one JSON document per run, written atomically, its row journal and its lock.

While a run goes on, every finished row is appended to a JSON Lines journal
beside the final file (``X.json`` -> ``X.jsonl``): a header line with the
settings, then one record a line. It goes once ``X.json`` holds every row; a run
that is killed or cannot write ``X.json`` keeps every row it finished there, and
``--resume`` reads either file.
One run at a time owns ``X.json``: :class:`Lock` holds an OS file lock on
``X.json.lock`` for the run's life.

Every reader goes through ``load`` (or ``load_rows``): one JSON Schema
(:data:`RECORD_SCHEMA`, :data:`DOCUMENT_SCHEMA`) checked with ``jsonschema``,
field types included, samples finite and positive; the medians are then
recomputed from the samples, never taken from the file. A damaged file is refused
in one line naming the file, the record and the field.
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import secrets
import stat
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import fastjsonschema
import jsonschema

from .host import CPU_MODEL
from .problem import DISTRIBUTIONS, FLOAT32_MAX, INPUTS_KEY, INT32_MAX, LAYOUTS

FORMAT = "mmsuite-results/1"
JOURNAL_FORMAT = "mmsuite-journal/1"
STATUSES = ("ok", "failed", "error", "crashed", "unavailable", "invalid")
# Statuses whose row carries measured figures (kernel time, GFLOP/s).
MEASURED = ("ok", "failed", "invalid")
# A readable results file is far below this; a bigger one (or /dev/zero) is refused unread.
MAX_BYTES = 256 * 2**20


class ResultsError(ValueError):
    """A results file that cannot be read: the message names the file, record and field."""


class ResultsLocked(ResultsError):
    """Another run owns this results file."""


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


def lock_path(path: Path) -> Path:
    """The lock file of a results file: ``X.json`` -> ``X.json.lock`` (while a run owns it)."""
    path = Path(path)
    return path.with_name(path.name + ".lock")


# ------------------------------------------------------------------ writing
def _create(path: Path) -> tuple[int, Path]:
    """A new hidden file beside ``path``, created with the user's umask (mkstemp's is 0600)."""
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue


def write_atomically(path: Path, content: str | bytes) -> None:
    """Write ``content`` to a new file beside ``path``, then rename it over ``path``.

    Every output goes through here: a reader never sees half a file, a failed
    write (disk full) leaves the old one, and a symlink planted at ``path`` is
    replaced, never followed. An OSError names the temporary file's target.
    """
    path = Path(path)
    data = content.encode() if isinstance(content, str) else content
    try:
        fd, tmp = _create(path)
    except OSError as exc:  # named as the file the caller asked for, not its temporary one
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
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


class Lock:
    """An OS file lock (``flock``) on ``X.json.lock``: one run at a time writes ``X.json``.

    The kernel drops the lock when its holder exits, however it exits, so a killed
    run never blocks the next. The file holds the holder's pid, for the refusal.
    """

    def __init__(self, path: Path) -> None:
        self.results = Path(path)
        self.path = lock_path(path)
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or raise ResultsLocked naming the holder's pid."""
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise ResultsLocked(
                    f"{self.results} is being written by another mmsuite run (pid {holder}); "
                    "wait for it to finish or choose another --json") from None
            try:  # the holder we waited on may have removed the file: lock the current one
                same = os.stat(self.path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Remove the lock file, then drop the lock (in this order: see ``acquire``)."""
        if self._fd is None:
            return
        self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> Lock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class Journal:
    """The JSON Lines journal of a run: a header, then one finished row a line.

    Each line is flushed and synced as it is written, so a kill loses at most
    the row being written (and ``load_rows`` skips a torn last line). A write
    that fails (disk full) is kept in ``error`` and ends the journaling, not the
    run: the rows are still saved at the end, or that save names the error.
    """

    def __init__(self, path: Path, settings: dict, records: Iterable[dict] = (),
                 format: str = JOURNAL_FORMAT) -> None:
        self.path = Path(path)
        self.error: OSError | None = None
        header = {"format": format, "settings": settings, "pid": os.getpid()}
        lines = [header, *records]
        write_atomically(self.path, "".join(json.dumps(_clean(x)) + "\n" for x in lines))
        self._fh = open(self.path, "a")  # kept open for the whole run

    def _write(self, line: dict) -> None:
        if self.error is not None or self._fh.closed:
            return
        try:
            self._fh.write(json.dumps(_clean(line)) + "\n")
            self._fh.flush()
            os.fsync(self._fh.fileno())
        except OSError as exc:
            self.error = OSError(exc.errno, exc.strerror, str(self.path))

    def append(self, record: dict) -> None:
        self._write(record)

    def close(self) -> None:
        try:
            self._fh.close()
        except OSError as exc:  # the last buffered write failed
            self.error = self.error or OSError(exc.errno, exc.strerror, str(self.path))


def unfinished_rows(path: Path) -> int:
    """How many rows a journal left by a run that never saved its results holds (0: none)."""
    path = Path(path)
    try:
        lines = _read_text(path).splitlines()
    except ResultsError:
        return 1 if path.exists() else 0  # damaged or unreadable: never wiped either
    return sum(1 for line in lines[1:] if line.strip())


# ------------------------------------------------------------------ the schema
def _nullable(schema: dict) -> dict:
    return {"anyOf": [{"type": "null"}, schema]}


_TEXT = {"type": "string"}
_NUMBER = {"type": "number"}
_POSITIVE = {"type": "number", "exclusiveMinimum": 0}
_COUNT = {"type": "integer", "minimum": 1}
# What a problem can be (mmsuite.problem.Problem): sizes kernels take as 32-bit integers,
# scalars finite in float32; a reader formats what it is given.
_SIZE = {"type": "integer", "minimum": 1, "maximum": INT32_MAX}
_SCALAR = {"type": "number", "minimum": -FLOAT32_MAX, "maximum": FLOAT32_MAX}
_LOAD_READING = _nullable({"type": "array", "items": _NUMBER})
_PHASE = _nullable({
    "type": "object",
    "properties": {
        "median": _nullable(_NUMBER), "min": _nullable(_NUMBER), "max": _nullable(_NUMBER),
        "spread": _nullable(_NUMBER), "noise": _nullable(_NUMBER),
        "samples": {"type": "array", "items": _POSITIVE},
    },
})
PHASES = ("kernel_ms", "h2d_ms", "d2h_ms", "reference_ms")
# Fields a reader uses; others are left to their readers (files from newer versions).
RECORD_SCHEMA: dict = {
    "type": "object",
    "required": ["kernel", "backend", "status", "problem"],
    "properties": {
        "kernel": {"type": "string", "minLength": 1},
        "backend": {"type": "string", "minLength": 1},
        "status": {"enum": list(STATUSES)},
        "reason": _TEXT, "adds": _TEXT, "origin": _TEXT, "seed": _TEXT, "l2": _TEXT,
        "precision": _TEXT, "peak_kind": _TEXT, "ref_library": _TEXT,
        # Where a cluster run's row ran (mmsuite.machines).
        "host": _TEXT, "worker": _TEXT, "device_model": _TEXT, "device_uuid": _TEXT,
        "parent": _nullable(_TEXT),
        "rung": _nullable({"type": "integer"}),
        "device": {"anyOf": [{"type": "null"}, {"type": "integer"}, {"type": "string"}]},
        "noisy": {"type": "boolean"},
        # What throttled the GPU while the row was sampled (backends.cuda_timing.throttled).
        "throttled": _nullable({"type": "array", "items": _TEXT}),
        "problem": {
            "type": "object",
            "required": ["m", "n", "k", "batch"],
            "properties": {
                "m": _SIZE, "n": _SIZE, "k": _SIZE, "batch": _SIZE,
                "layout": {"enum": list(LAYOUTS)},
                "alpha": _SCALAR, "beta": _SCALAR,
                "seed": {"type": "integer", "minimum": 0},
                INPUTS_KEY: {"enum": list(DISTRIBUTIONS)},
            },
        },
        **{name: _nullable(_NUMBER) for name in (
            "flops", "gflops", "host_gflops", "host_to_host_ms", "max_rel_err", "tolerance",
            "pct_peak", "peak_gflops", "ref_max_rel_err", "err_vs_ref", "err_bound",
            "ref_err_bound",
            # The row's roof (mmsuite.roof).
            "bytes_moved", "intensity", "achieved_gbs", "bandwidth_gbs", "roof_gflops",
            "pct_roof")},
        **{name: _PHASE for name in PHASES},
        **{name: _nullable({"type": "object"}) for name in ("info", "transfers")},
        "sampling": _nullable({"type": "object", "properties": {
            "seconds": _nullable(_NUMBER), "stopped_by": _nullable(_TEXT)}}),
        "load_avg": _nullable({"type": "object", "properties": {
            "before": _LOAD_READING, "after": _LOAD_READING}}),
        "energy": _nullable({"type": "object", "properties": {
            **{name: _nullable(_NUMBER) for name in (
                "joules", "gflop_per_joule", "window_s", "busy_w", "idle_w")},
            "launches": _nullable({"type": "integer", "minimum": 0}),
            "counter": _TEXT, "reason": _TEXT}}),
    },
    "allOf": [
        {"if": {"properties": {"status": {"enum": list(MEASURED)}}},
         "then": {"required": ["kernel_ms"], "properties": {"kernel_ms": {
             "type": "object", "required": ["samples"],
             "properties": {"samples": {"minItems": 1}}}}}},
        {"if": {"properties": {"status": {"const": "ok"}}},
         "then": {"required": ["gflops", "max_rel_err"],
                  "properties": {"gflops": _POSITIVE, "max_rel_err": _NUMBER}}},
    ],
}
_BACKEND_FACTS = _nullable({
    "type": "object",
    "properties": {
        "omp_threads": _nullable(_COUNT), "compute_units": _nullable(_COUNT),
        "sm_count": _nullable({"type": "integer", "minimum": 0}),
        "sm_clock_mhz": _nullable(_NUMBER), "max_clock_mhz": _nullable(_NUMBER),
        "gpu": _nullable(_TEXT), "opencl_device": _nullable(_TEXT),
        "opencl_platform": _nullable(_TEXT), "opencl_device_type": _nullable(_TEXT),
        "compute_capability": {"anyOf": [{"type": "null"}, _TEXT, {"type": "integer"}]},
        "unavailable": _TEXT,
        "devices": {"type": "array", "items": {"type": "object", "properties": {
            "index": {"type": "integer", "minimum": 0}, "gpu": _TEXT,
            "sm_count": {"type": "integer", "minimum": 0}, "sm_clock_mhz": _NUMBER}}},
    },
})
ENVIRONMENT_SCHEMA: dict = {
    "type": "object",
    "properties": {
        "created": _TEXT, "mmsuite": _TEXT, "git_commit": _nullable(_TEXT),
        "python": _TEXT, "numpy": _TEXT, "platform": _TEXT, CPU_MODEL: _nullable(_TEXT),
        "cpu_cores": _nullable(_COUNT), "cpu_avx512": {"type": "boolean"},
        "cpu_max_mhz": _nullable(_POSITIVE), "cpu_simd": _nullable(_TEXT),
        "backends": {"type": "object", "additionalProperties": _BACKEND_FACTS},
    },
}
DOCUMENT_SCHEMA: dict = {
    "type": "object",
    "required": ["format", "results"],
    "properties": {
        "format": {"const": FORMAT},
        "environment": ENVIRONMENT_SCHEMA,
        "settings": {"type": "object"},
        "results": {"type": "array"},  # each record is checked on its own, to name it
    },
}
# An integer is an int in the file, never 1.0 (jsonschema's default takes both) or true.
_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda checker, value: isinstance(value, int) and not isinstance(value, bool)))
_RECORD = _Validator(RECORD_SCHEMA)
_DOCUMENT = _Validator(DOCUMENT_SCHEMA)
# The same schema compiled to Python: ten times faster on a sound record (a report of
# 10,000 rows spent half a minute in jsonschema alone), so jsonschema runs only to say
# what is wrong with a record this refuses.
_RECORD_IS_SOUND = fastjsonschema.compile(RECORD_SCHEMA, use_default=False)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _field(error: jsonschema.ValidationError) -> str:
    """The dotted path of the field at fault: ``kernel_ms.samples[2]``."""
    parts: list[str] = []
    for part in error.absolute_path:
        parts.append(f"[{part}]" if isinstance(part, int) else ("." if parts else "") + part)
    if error.validator == "required":
        missing = next((name for name in error.validator_value
                        if isinstance(error.instance, dict) and name not in error.instance), "")
        parts.append(("." if parts else "") + missing)
    return "".join(parts)


def _describe(error: jsonschema.ValidationError) -> str:
    """One line for the deepest, most specific failure of ``error``."""
    while error.context:  # anyOf: the branch that got furthest says the most
        deepest = max(len(e.absolute_path) for e in error.context)
        branch = [e for e in error.context if len(e.absolute_path) == deepest]
        specific = [e for e in branch if e.validator != "type"]
        if deepest == len(error.absolute_path) and not specific:  # null or a number, ...
            types = [t for e in branch for t in (e.validator_value if isinstance(
                e.validator_value, list) else [e.validator_value])]
            return f"field {_field(error)!r} is {_short(error.instance)}, expected " \
                + " or ".join(dict.fromkeys(types))
        error = (specific or branch)[0]
    field = _field(error)
    value, how = error.instance, error.validator
    if how == "required":
        return f"field {field!r} is missing"
    if how == "type":
        types = error.validator_value
        expected = " or ".join(types) if isinstance(types, list) else types
        return f"field {field!r} is {_short(value)}, expected {expected}"
    if how in ("exclusiveMinimum", "minimum", "maximum"):
        bound = {"exclusiveMinimum": "above", "minimum": "at least", "maximum": "at most"}[how]
        return f"field {field!r} is {_short(value)}, expected a number {bound} " \
               f"{error.validator_value}"
    if how == "minItems":
        return f"field {field!r} is empty"
    if how in ("enum", "const"):
        choices = error.validator_value if how == "enum" else [error.validator_value]
        return f"field {field!r} is {_short(value)}, expected one of " \
               + ", ".join(map(repr, choices))
    return f"field {field!r}: {error.message[:120]}"


def _record_error(path: Path, which: str, record: Any, message: str) -> ResultsError:
    name = record.get("kernel") if isinstance(record, dict) else None
    return ResultsError(f"{path}: {which}" + (f" ({name})" if isinstance(name, str) and name
                                               else "") + f": {message}")


def _integer_paths(schema: dict, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The paths of object fields that ``schema`` types as integers."""
    branches = [schema, *schema.get("anyOf", ())]
    paths = [path] if any(branch.get("type") == "integer" for branch in branches) else []
    for branch in branches:
        for key, field_schema in branch.get("properties", {}).items():
            paths += _integer_paths(field_schema, (*path, key))
    return paths


def _float_for_integer(record: Any) -> bool:
    """Whether ``record`` holds a float where the schema asks for an integer: the one rule
    of ``_Validator`` the compiled check does not keep (it takes 4.0 for an integer, as
    JSON Schema does). A yes only sends the record on to jsonschema, which decides."""
    for path in _RECORD_INTEGERS:
        value = record
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, float):
            return True
    return False


_RECORD_INTEGERS = _integer_paths(RECORD_SCHEMA)


def check_record(record: Any) -> str:
    """What is wrong with one result record; empty when it is sound."""
    try:
        _RECORD_IS_SOUND(record)
        if not _float_for_integer(record):
            return ""
    except fastjsonschema.JsonSchemaException:
        pass  # jsonschema says what, in the words of every other refusal
    error = jsonschema.exceptions.best_match(_RECORD.iter_errors(record))
    return "" if error is None else _describe(error)


# What a record read without these fields gets (a hand-made or older file): the defaults
# of a sweep's rows and of Problem, so that every reader may index them.
DEFAULTS = {"reason": "", "adds": ""}
PROBLEM_DEFAULTS = {"layout": "row", "alpha": 1.0, "beta": 0.0}


#: Control characters a terminal acts on (ESC above all: colours, titles, clearing the
#: screen); a results file's text must not reach a terminal with them. Newlines and tabs
#: stay.
_CONTROLS = {code: "\N{REPLACEMENT CHARACTER}" for code in [*range(0x09), *range(0x0b, 0x20),
                                                          0x7f, *range(0x80, 0xa0)]}


def _printable(value: Any) -> Any:
    """``value`` with the control characters of its text replaced, in lists and objects too."""
    if isinstance(value, str):
        return value.translate(_CONTROLS)
    if isinstance(value, list):
        return [_printable(item) for item in value]
    if isinstance(value, dict):
        return {_printable(key): _printable(item) for key, item in value.items()}
    return value


def _normalise(record: dict) -> dict:
    """Recompute what the samples determine; a stored median is never trusted. Text is
    made printable (``_printable``)."""
    for key, value in record.items():
        if isinstance(value, (str, dict)) and key not in PHASES:
            record[key] = _printable(value)
    if isinstance(record.get("seed"), str) and "origin" not in record:
        # Files before 0.2 called a rung's origin "seed", beside the problem's RNG seed.
        record["origin"] = record.pop("seed")
    for key, value in DEFAULTS.items():
        record.setdefault(key, value)
    for key, default in PROBLEM_DEFAULTS.items():
        record["problem"].setdefault(key, default)
    for key in ("max_rel_err", "err_bound"):
        if record.get(key) is None and key in record:
            record[key] = math.inf  # written as null: NaN/Inf output
    for phase in PHASES:
        stats = record.get(phase)
        if isinstance(stats, dict) and stats.get("samples"):
            samples = stats["samples"]
            stats.update(median=statistics.median(samples), min=min(samples), max=max(samples))
    flops = record.get("flops")
    if record["status"] in MEASURED and isinstance(flops, (int, float)) and flops > 0:
        record["gflops"] = flops / (record["kernel_ms"]["median"] * 1e6)
    return record


# ------------------------------------------------------------------ reading
def _read_text(path: Path) -> str:
    """A regular file's text, at most MAX_BYTES: a FIFO, a device or a folder is refused
    unread (opening a FIFO for reading would wait for a writer; /dev/zero never ends)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ResultsError(f"no such result file: {path}") from None
    except OSError as exc:
        raise ResultsError(f"{path} cannot be read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ResultsError(f"{path} is a directory, not a results file")
        if not stat.S_ISREG(info.st_mode):
            raise ResultsError(f"{path} is not a regular file")
        if info.st_size > MAX_BYTES:
            raise ResultsError(f"{path} is {info.st_size / 2**20:.0f} MiB, more than a "
                               f"results file can be ({MAX_BYTES // 2**20} MiB)")
        chunks, size = [], 0
        while size <= MAX_BYTES:  # the file may grow while it is read
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_BYTES:
            raise ResultsError(f"{path} grew past {MAX_BYTES // 2**20} MiB while being read")
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ResultsError(f"{path} is not UTF-8 text: {exc}") from None
    except OSError as exc:
        raise ResultsError(f"{path} cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number in a results file")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is beyond a float's range")
    return value


def _parse(text: str) -> Any:
    """JSON without NaN or Infinity (a sample must be a finite number). ValueError, or
    RecursionError/MemoryError for a crafted file, propagate."""
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)


def _parse_or_refuse(path: Path, text: str, where: str = "") -> Any:
    try:
        return _parse(text)
    except RecursionError:
        raise ResultsError(f"{path}{where} is nested too deeply to be a results file") from None
    except MemoryError:
        raise ResultsError(f"{path}{where} is too large to read") from None
    except ValueError as exc:  # JSONDecodeError, or NaN, Infinity, 1e999
        raise ResultsError(f"{path}{where} is not JSON: {exc}") from None


def load(path: Path) -> dict:
    """Read a result file written by ``save``; ``ResultsError`` (a ValueError) names what is
    wrong with a file that is not one or is damaged."""
    path = Path(path)
    document = _parse_or_refuse(path, _read_text(path))
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ResultsError(f"{path} is not an mmsuite result file")
    error = jsonschema.exceptions.best_match(_DOCUMENT.iter_errors(document))
    if error is not None:
        raise ResultsError(f"{path}: {_describe(error)}")
    for index, record in enumerate(document["results"]):
        problem = check_record(record)
        if problem:
            raise _record_error(path, f"record {index}", record, problem)
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
    lines = _read_text(path).splitlines()
    try:
        header = _parse(lines[0]) if lines else None
    except (ValueError, RecursionError):
        header = None
    if not isinstance(header, dict) or header.get("format") != JOURNAL_FORMAT:
        raise ResultsError(f"{path} is not an mmsuite journal")
    records = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            record = _parse(line)
        except (ValueError, RecursionError, MemoryError) as exc:
            if number == len(lines) and isinstance(exc, ValueError):
                break  # the row being written when the run was killed
            raise _parse_error(path, number, exc) from None
        problem = check_record(record)
        if problem:
            raise _record_error(path, f"line {number}", record, problem)
        records.append(_normalise(record))
    return records


def _parse_error(path: Path, number: int, exc: BaseException) -> ResultsError:
    if isinstance(exc, RecursionError):
        return ResultsError(f"{path}: line {number} is nested too deeply to be a record")
    if isinstance(exc, MemoryError):
        return ResultsError(f"{path}: line {number} is too large to read")
    return ResultsError(f"{path}: line {number} is not JSON: {exc}")


def write_error(exc: OSError) -> str:
    """One line for an OSError while writing an output: the path and the cause."""
    where = exc.filename if exc.filename is not None else "output"
    code = errno.errorcode.get(exc.errno) if exc.errno is not None else None
    return f"cannot write {where}: {exc.strerror or code or exc}"
