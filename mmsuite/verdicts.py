"""Machine-readable verdicts: a JSON file and JUnit XML, and the geometric-mean summary line.

Whatever decides "slower / faster / same" (``mmsuite compare`` on two files, a paired
gate that measures both revisions side by side) hands its rows here as
:class:`VerdictRow` values, so that every verdict file has one shape:

- JSON (``--verdict-json``): ``{"format": "mmsuite-verdicts/1", "exit_status", "threshold",
  "counts", "geomean_ratio", "rows": [{kernel, problem, verdict, ratio, reason}]}``, and
  where the gate measured the row, ``measured``: its rounds, seconds, budget, threads and
  how both sides ran (``continuous.ContinuousRow.spent``);
- JUnit XML (``--junit``): one ``testcase`` per kernel x problem, named ``problem`` in the
  class ``kernel``; ``slower`` and ``broken`` are failures, ``unsure`` is skipped with its
  reason (no decision either way), ``same`` and ``faster`` pass. CI systems (GitLab,
  Jenkins, GitHub test reporters) show such a file as a test report.

The ratio is NEW / BASE of the kernel times (below 1: faster).
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from .results import write_atomically

FORMAT = "mmsuite-verdicts/1"
#: Every verdict, most urgent first; the first two fail a gate.
VERDICTS = ("slower", "broken", "faster", "same", "unsure")
FAILING = ("slower", "broken")
#: The smallest change that counts, as a fraction of BASE's time (``compare`` and
#: ``continuous``; ``--threshold``).
DEFAULT_THRESHOLD = 0.05


@dataclass(frozen=True)
class VerdictRow:
    """One kernel x problem's verdict; ``ratio`` is NEW / BASE of the kernel times."""

    kernel: str
    problem: str
    verdict: str
    ratio: float | None
    reason: str = ""
    measured: dict | None = None  # how a gate that measured the row did it, and for how long

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"unknown verdict {self.verdict!r} (one of {', '.join(VERDICTS)})")


def exit_status(verdicts: Iterable[str], strict: bool = False) -> int:
    """The gate's exit status: 1 when a row is slower or broken (with ``strict`` also
    unsure, so that an always-loaded host cannot pass forever), else 0."""
    failing = FAILING + (("unsure",) if strict else ())
    return int(any(verdict in failing for verdict in verdicts))


def counts(rows: Iterable[VerdictRow]) -> dict[str, int]:
    """How many rows carry each verdict, in the order of :data:`VERDICTS`, zeros left out."""
    found = [r.verdict for r in rows]
    return {v: found.count(v) for v in VERDICTS if v in found}


def geometric_mean_ratio(rows: Iterable[VerdictRow]) -> tuple[float | None, int]:
    """The geometric mean of NEW / BASE over the rows that have a ratio, and how many do.

    A geometric mean, because ratios multiply: 2x slower and 2x faster average to 1."""
    ratios = [r.ratio for r in rows if r.ratio is not None and r.ratio > 0
              and math.isfinite(r.ratio)]
    if not ratios:
        return None, 0
    return math.exp(sum(math.log(x) for x in ratios) / len(ratios)), len(ratios)


def summary_line(rows: Sequence[VerdictRow]) -> str:
    """``geometric mean NEW/BASE over 12 kernel x problem: 0.970 (3.0% faster)``."""
    mean, n = geometric_mean_ratio(rows)
    if mean is None:
        return "geometric mean NEW/BASE: no kernel x problem timed on both sides"
    change = mean - 1
    direction = "no change" if abs(change) < 5e-4 else \
        f"{abs(change):.1%} {'slower' if change > 0 else 'faster'}"
    return f"geometric mean NEW/BASE over {n} kernel x problem: {mean:.3f} ({direction})"


def write_verdict_json(path: Path, rows: Sequence[VerdictRow], *, threshold: float,
                       extra: dict | None = None) -> None:
    """Write the verdicts as JSON (atomically); ``extra`` adds top-level fields (the inputs)."""
    mean, n = geometric_mean_ratio(rows)
    document = {"format": FORMAT, "exit_status": exit_status(r.verdict for r in rows),
                "threshold": threshold, "counts": counts(rows), "geomean_ratio": mean,
                "geomean_rows": n, **(extra or {}), "rows": [_row_record(r) for r in rows]}
    write_atomically(Path(path), json.dumps(document, indent=1) + "\n")


def _row_record(row: VerdictRow) -> dict:
    record = asdict(row)
    if record["measured"] is None:  # compare measured nothing: the field is the gate's
        del record["measured"]
    return record


def _message(row: VerdictRow) -> str:
    change = "" if row.ratio is None else f"{row.ratio - 1:+.1%} kernel time"
    return "; ".join(x for x in (row.verdict, change, row.reason) if x)


def write_junit(path: Path, rows: Sequence[VerdictRow], *, suite: str = "mmsuite",
                threshold: float | None = None) -> None:
    """Write the verdicts as JUnit XML (atomically): slower/broken fail, unsure is skipped."""
    failures = sum(r.verdict in FAILING for r in rows)
    skipped = sum(r.verdict == "unsure" for r in rows)
    root = ET.Element("testsuites", name=suite, tests=str(len(rows)),
                      failures=str(failures), errors="0", skipped=str(skipped))
    node = ET.SubElement(root, "testsuite", name=suite, tests=str(len(rows)),
                         failures=str(failures), errors="0", skipped=str(skipped))
    properties = ET.SubElement(node, "properties")
    mean, n = geometric_mean_ratio(rows)
    for name, value in (("threshold", threshold), ("geomean_ratio", mean),
                        ("geomean_rows", n)):
        if value is not None:
            ET.SubElement(properties, "property", name=name, value=f"{value:g}")
    for row in rows:
        case = ET.SubElement(node, "testcase", classname=row.kernel, name=row.problem)
        if row.verdict in FAILING:
            failure = ET.SubElement(case, "failure", message=_message(row), type=row.verdict)
            failure.text = _message(row)
        elif row.verdict == "unsure":
            ET.SubElement(case, "skipped", message=_message(row))
        else:
            ET.SubElement(case, "system-out").text = _message(row)
    ET.indent(root)
    write_atomically(Path(path), ET.tostring(root, encoding="unicode",
                                             xml_declaration=True) + "\n")
