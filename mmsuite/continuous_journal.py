"""The journal of ``mmsuite continuous --json X``: each row in ``X.jsonl`` as it finishes.

A gate takes minutes a row, and a CI job's timeout ends it with SIGKILL, which leaves no
chance to save anything: so every finished row (both sides' rounds, the verdict) is
appended to the journal, flushed and synced, the moment it is judged. The first line
says which gate it belongs to (:func:`gate_identity`: the two commits, the settings,
the workers' options and the rows selected); ``continuous --resume`` reads the rows back
(:func:`read`), refuses a journal of another gate, and measures only the rows it lacks.
A row cut short by Ctrl-C or a kill is never journaled: it is measured again.

The journal goes once the results files hold every row; a gate that was interrupted,
killed or could not write its files keeps it for ``--resume``.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, fields
from pathlib import Path

from . import catalogue, results
from .continuous import ContinuousRow, ContinuousSide, Settings
from .continuous_plan import RowPlan
from .problem import Problem
from .stats import PairedRatio

FORMAT = "mmsuite-continuous-journal/1"


class JournalError(ValueError):
    """A journal that cannot be resumed here: the message says why, in one line."""


def gate_identity(
    base_commit: str, head_commit: str, settings: Settings, options: dict, rows: list[ContinuousRow]
) -> dict:
    """What a journal's rows depend on: a journal is resumed only by the same gate."""
    return {
        "base": base_commit,
        "head": head_commit,
        "settings": asdict(settings),
        "options": dict(options),
        "rows": [p.label for p in rows],
    }


def open_journal(
    path: Path, identity: dict, done: list[tuple[ContinuousRow, float]]
) -> results.Journal:
    """A new journal at ``path`` (written atomically) holding ``identity`` and the rows
    already ``done``, kept open for appending (:func:`append`)."""
    return results.Journal(
        path, identity, [pair_record(p, unspent) for p, unspent in done], format=FORMAT
    )


def append(journal: results.Journal, pair: ContinuousRow, unspent: float) -> None:
    """Journal a finished row, with the seconds the rows so far left unspent."""
    journal.append(pair_record(pair, unspent))


def pair_record(pair: ContinuousRow, unspent: float) -> dict:
    """A finished row as a journal line."""
    record = {f.name: getattr(pair, f.name) for f in fields(ContinuousRow)}
    record.update(
        kernel=pair.kernel.id,
        problem=pair.problem.to_dict(),
        base=asdict(pair.base),
        head=asdict(pair.head),
        estimate=asdict(pair.estimate) if pair.estimate is not None else None,
        measurement=asdict(pair.measurement) if pair.measurement is not None else None,
        unspent=unspent,
    )
    return record


def _number(value: object, missing: float) -> float:
    """A figure written as null (JSON has no infinity or NaN) read back."""
    return missing if value is None else float(value)  # type: ignore[arg-type]


def pair_from_record(record: dict) -> tuple[ContinuousRow, float]:
    """A journal line read back: the row, and the seconds unspent after it. KeyError,
    TypeError or ValueError where the line is not one."""
    names = {f.name for f in fields(ContinuousRow)}
    kernel = catalogue.get(record["kernel"])
    problem = Problem.from_dict(record["problem"])
    sides = {}
    for side in ("base", "head"):
        given = record[side]
        sides[side] = ContinuousSide(
            **{f.name: given[f.name] for f in fields(ContinuousSide) if f.name in given}
        )
    estimate = None
    if record.get("estimate") is not None:
        e = record["estimate"]
        estimate = PairedRatio(
            ratio=_number(e["ratio"], math.nan),
            low=_number(e["low"], 0.0),
            high=_number(e["high"], math.inf),
            p_value=_number(e["p_value"], math.nan),
            rounds=int(e["rounds"]),
            confidence=float(e["confidence"]),
        )
    rest = {
        k: v
        for k, v in record.items()
        if k in names and k not in ("kernel", "problem", "base", "head", "estimate",
                                    "measurement")
    }
    if record.get("measurement") is not None:  # how a busy machine's row was measured
        rest["measurement"] = RowPlan(**record["measurement"])
    pair = ContinuousRow(kernel, problem, sides["base"], sides["head"], estimate, **rest)
    return pair, float(record.get("unspent") or 0.0)


def _differences(found: dict, expected: dict) -> str:
    """What differs between two gates' identities, in a few words."""
    said = []
    for key, name in (("base", "BASE"), ("head", "HEAD")):
        if found.get(key) != expected[key]:
            said.append(f"{name} {str(found.get(key))[:10]}, not {expected[key][:10]}")
    given = found.get("settings")
    settings: dict = given if isinstance(given, dict) else {}
    changed = sorted(k for k in expected["settings"] if settings.get(k) != expected["settings"][k])
    if changed:
        said.append(f"other settings ({', '.join(changed)})")
    if found.get("options") != expected["options"]:
        said.append("other options (--threads, --cl-device, --l2)")
    if found.get("rows") != expected["rows"]:
        said.append("other rows (the kernels and problems selected)")
    return "; ".join(said)


def read(path: Path, identity: dict) -> list[tuple[ContinuousRow, float]]:
    """The finished rows of the journal at ``path``, in order, each with the seconds
    unspent after it; JournalError where the file is not a journal of this gate (a torn
    last line, the row a kill cut off, is skipped)."""
    try:
        if os.path.getsize(path) > results.MAX_BYTES:
            raise JournalError(f"{path} is too large to be a journal")
        with open(path, "rb") as fh:
            text = fh.read().decode("utf-8", errors="replace")
    except OSError as exc:
        raise JournalError(f"cannot read {path}: {exc.strerror or exc}") from None
    lines = text.splitlines()
    try:
        header = json.loads(lines[0]) if lines else None
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise JournalError(f"{path} is not the journal of an mmsuite continuous gate")
    found = header.get("settings")
    differs = _differences(found if isinstance(found, dict) else {}, identity)
    if differs:
        raise JournalError(
            f"{path} is the journal of another gate ({differs}); run the "
            f"same command as the one interrupted, or move {path} away"
        )
    done = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            done.append(pair_from_record(json.loads(line)))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            if number == len(lines) and isinstance(exc, ValueError):
                break  # the row being written when the gate was killed
            raise JournalError(
                f"{path}: line {number} is not a row of the gate: {type(exc).__name__}: {exc}"
            ) from None
    return done
