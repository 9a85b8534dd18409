"""``mmsuite compare BASE.json NEW.json``: did a kernel get faster or slower between two runs?

For every kernel x problem present in both result files the kernel-time samples
are compared with a two-sided Mann-Whitney U test (exact for small samples without
ties, else the normal approximation with tie and continuity corrections; it assumes
nothing about the shape of timing noise, which is skewed and heavy-tailed) and the
ratio of medians NEW / BASE:

- ``slower`` / ``faster``: the test rejects "same distribution" at ``--alpha``
  and the ratio is beyond the threshold (``--threshold 0.05``: 5%);
- ``same``: the difference is within the threshold, and either the test finds
  it or both sides' noise is below the threshold (so a difference above it
  would have shown);
- ``same (identical code)``: both rows ran byte-identical code (``mmsuite.identity``);
  a difference between them is the environment's, never a regression;
- ``unsure``: too few samples, a difference above the threshold that the
  noise does not let the test confirm, or a CPU row whose two runs saw different
  load (other processes' share of the CPU, measured from /proc, apart by more than
  10 points; for older files without it, a 1-minute load average above cores + 1):
  load that changes between two runs moves whole sample sets, which no test on them
  can tell from a change of the code; a GPU row throttled (power, thermal: NVML's
  clock-event reasons) on one side and not on the other is unsure for the same reason.
  ``mmsuite continuous`` measures both revisions in the same window instead;
- ``broken``: the kernel passed in BASE and fails, errs or reads above peak in NEW
  (one that is unavailable in NEW is ``unsure``: that is more often the machine).

Exit status: 1 when any row is ``slower`` or ``broken`` (a CI gate), 0
otherwise, 2 for bad input (an unreadable file, a file without samples).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import results, verdicts
from .backend_table import runs_on_host
from .host import CPU_MODEL
from .load import CHANGED_SHARE, others_share
from .machines import device_model
from .problem import label_of
from .report import TERMINAL_ROWS
from .stats import U_TEST_LEVEL, VERDICT_SAMPLES, mann_whitney_u, robust_noise
from .verdicts import DEFAULT_THRESHOLD, VERDICTS, VerdictRow, summary_line

DEFAULT_ALPHA = U_TEST_LEVEL
#: Below this many samples a side the test cannot reach ``DEFAULT_ALPHA`` however far
#: apart the samples are.
MIN_SAMPLES = VERDICT_SAMPLES
#: A host is loaded when its 1-minute load average exceeds its cores by more than
#: this: the run's own threads count in the load, a second program's do not fit.
LOAD_MARGIN = 1.0


@dataclass
class CompareSide:
    """One file's figures for a kernel x problem."""

    status: str
    median: float | None
    samples: list[float]
    noise: float | None
    noisy: bool
    load: float | None = None  # 1-minute load average of a CPU row's host when overloaded
    others_share: float | None = None  # other processes' share of the CPU (host rows)
    code_hash: str | None = None  # identity of the code that ran (mmsuite.identity)
    #: What throttled the GPU while the row was sampled (empty: nothing); None where the
    #: row does not say (a CPU row, an older file, no NVML).
    throttled: tuple[str, ...] | None = None

    @classmethod
    def of(cls, record: dict, cores: int | None = None) -> CompareSide:
        """One record's figures; ``cores`` (the host's) lets a CPU row note a loaded host."""
        stats = record.get("kernel_ms") or {}
        samples = [float(s) for s in stats.get("samples") or [] if s is not None]
        median = stats.get("median")
        if median is None and samples:
            median = float(np.median(samples))
        noise = stats.get("noise")
        if noise is None:
            noise = robust_noise(samples)
        code = record.get("code")
        code = code if isinstance(code, dict) else {}
        throttled = record.get("throttled")
        return cls(str(record.get("status", "ok")), median, samples, noise,
                   bool(record.get("noisy")), _overload(record, cores),
                   others_share(record) if runs_on_host(record) else None,
                   code.get("hash") if isinstance(code.get("hash"), str) else None,
                   tuple(map(str, throttled)) if isinstance(throttled, list) else None)


def _overload(record: dict, cores: int | None) -> float | None:
    """The load average when ``record`` ran on the host's CPU while it was overloaded (for
    files without the measured share of other processes)."""
    on_host = runs_on_host(record)
    load = record.get("load_avg")
    load = load if isinstance(load, dict) else {}
    minute = [v[0] for v in (load.get("before"), load.get("after"))
              if isinstance(v, (list, tuple)) and v and isinstance(v[0], (int, float))]
    if not on_host or not cores or not minute or max(minute) <= cores + LOAD_MARGIN:
        return None
    return float(max(minute))


@dataclass
class CompareRow:
    kernel: str
    problem: str
    base: CompareSide
    new: CompareSide
    verdict: str
    why: str
    ratio: float | None = None
    p_value: float | None = None
    key: tuple = ()
    changed: list[str] = field(default_factory=list)  # settings that differ ("threads 2 → 1")

    @property
    def environment_note(self) -> str:
        """Why identical code moved ("+124% is the environment's: threads 2 → 1"); empty
        where it did not move beyond the threshold or the code differs."""
        if not self.why.startswith("identical code") or "environment's" not in self.why:
            return ""
        return self.why.split("; ", 1)[1]


@dataclass
class Comparison:
    rows: list[CompareRow]
    only_base: list[tuple[str, str, str]] = field(default_factory=list)
    only_new: list[tuple[str, str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def count(self, verdict: str) -> int:
        return sum(r.verdict == verdict for r in self.rows)

    @property
    def exit_status(self) -> int:
        return verdicts.exit_status(r.verdict for r in self.rows)

    def verdict_rows(self) -> list[VerdictRow]:
        """The rows as :mod:`mmsuite.verdicts` writes them (JSON, JUnit XML)."""
        return [VerdictRow(r.kernel, r.problem, r.verdict, r.ratio, r.why) for r in self.rows]


def judge(base: CompareSide, new: CompareSide, threshold: float = DEFAULT_THRESHOLD,
          alpha: float = DEFAULT_ALPHA, changed: list[str] | None = None
          ) -> tuple[str, str, float | None, float | None]:
    """(verdict, why, ratio of medians NEW / BASE, p-value) for one kernel x problem;
    ``changed`` names the settings that differ between the two rows ("threads 2 → 1"),
    which a change of identical code is put down to."""
    changed = changed or []
    if base.status == "ok" and new.status not in ("ok", "unavailable"):
        return "broken", f"{new.status} in NEW", None, None
    if base.status != "ok" or new.status != "ok":  # no pair of timings to compare
        sides = [f"{s.status} in {name}" for name, s in (("BASE", base), ("NEW", new))
                 if s.status != "ok"]
        return "unsure", ", ".join(sides), None, None
    ratio = new.median / base.median if base.median and new.median else None
    if ratio is None:
        return "unsure", "no median", None, None
    beyond = abs(math.log(ratio)) > math.log1p(threshold)
    if base.code_hash is not None and base.code_hash == new.code_hash:
        # Byte-identical code: whatever moved the times was the machine, never the commit.
        return "same", "identical code" + (
            f"; {ratio - 1:+.0%} is the environment's: " + (", ".join(changed) or
                                                          "no recorded setting differs")
            if beyond else ""), ratio, None
    fewest = min(len(base.samples), len(new.samples))
    if fewest < MIN_SAMPLES:
        return "unsure", f"{fewest} samples", ratio, None
    _, p = mann_whitney_u(new.samples, base.samples)
    if base.others_share is not None and new.others_share is not None:
        if abs(base.others_share - new.others_share) > CHANGED_SHARE:
            return "unsure", (f"load changed: other processes used {base.others_share:.0%} "
                              f"then {new.others_share:.0%} of the CPU"), ratio, p
    elif base.load is not None or new.load is not None:
        return "unsure", "loaded", ratio, p
    if base.throttled is not None and new.throttled is not None \
            and set(base.throttled) != set(new.throttled):
        # Like a change of load: a clock held down on one side only moves its whole
        # sample set, which no test on the samples can tell from a change of the code.
        return "unsure", (f"throttling changed: {', '.join(base.throttled) or 'none'} in "
                          f"BASE, {', '.join(new.throttled) or 'none'} in NEW"), ratio, p
    if p < alpha:
        if not beyond:
            return "same", f"difference within {threshold:.0%}", ratio, p
        return ("slower" if ratio > 1 else "faster"), "significant", ratio, p
    if beyond:
        return "unsure", "noisy", ratio, p  # a large change the test cannot confirm
    noises = [s.noise for s in (base, new)]
    if any(n is None or n > threshold for n in noises):
        worst = max((n for n in noises if n is not None), default=math.nan)
        return "unsure", f"noise {worst:.0%}", ratio, p
    return "same", f"difference within {threshold:.0%}", ratio, p


Key = tuple[str, str, str]


def _key(record: dict, environment: dict) -> Key:
    """(kernel, problem as shown, device): rows on different devices are not compared, nor
    rows timed on different device models (a cluster file holds several).

    A GPU index is shown with the problem; a device named by a label (OpenCL) and the
    device model are only shown for rows found on one side."""
    label = label_of(record["problem"])
    device = record.get("device")
    if isinstance(device, int) and not isinstance(device, bool):
        label += f" @ device {device}"
    if record.get("l2") not in (None, "warm"):
        label += f" (L2 {record['l2']})"
    where = " ".join(x for x in ("" if device is None else str(device),
                                 device_model(record, environment)) if x)
    return str(record.get("kernel")), label, where


def load_records(path: Path) -> tuple[dict[Key, dict], dict]:
    """The records of one result file keyed by kernel x problem x device model, and the
    document.

    Raises ValueError naming the file when it is unreadable or holds no samples.
    """
    document = results.load(path)
    environment = document.get("environment") or {}
    keyed = {_key(r, environment): r for r in document.get("results") or []}
    if not any((r.get("kernel_ms") or {}).get("samples") for r in keyed.values()):
        raise ValueError(f"{path}: no kernel timing samples to compare "
                         f"(not one result has kernel_ms.samples)")
    return keyed, document


def _setting_notes(base: dict, new: dict) -> list[str]:
    notes = []
    b_set, n_set = base.get("settings") or {}, new.get("settings") or {}
    for key in sorted(set(b_set) | set(n_set)):
        if key != "problems" and b_set.get(key) != n_set.get(key):
            notes.append(f"setting {key}: {b_set.get(key)!r} in BASE, {n_set.get(key)!r} in NEW")
    b_env, n_env = base.get("environment") or {}, new.get("environment") or {}
    for key in (CPU_MODEL, "cpu_cores"):
        if b_env.get(key) != n_env.get(key):
            notes.append(f"{key}: {b_env.get(key)!r} in BASE, {n_env.get(key)!r} in NEW")
    for name in sorted(set(b_env.get("backends") or {}) & set(n_env.get("backends") or {})):
        b_gpu = (b_env["backends"][name] or {}).get("gpu")
        n_gpu = (n_env["backends"][name] or {}).get("gpu")
        if b_gpu != n_gpu:
            notes.append(f"{name} GPU: {b_gpu!r} in BASE, {n_gpu!r} in NEW")
    return notes


def _shown(value: object) -> str:
    return "-" if value is None else str(value)


def changed_settings(base_doc: dict, new_doc: dict, base: dict, new: dict) -> list[str]:
    """What differs between two rows' runs, in a few words each ("threads 2 → 1"): the
    run's settings, the machine, and the row's own threads and others' share of the CPU."""
    changes = []
    b_set, n_set = base_doc.get("settings") or {}, new_doc.get("settings") or {}
    for key in sorted(set(b_set) | set(n_set)):
        before, after = b_set.get(key), n_set.get(key)
        if key in ("problems", "interrupted") or before == after:
            continue
        simple = all(v is None or isinstance(v, (int, float, str)) for v in (before, after))
        changes.append(f"{key} {_shown(before)} → {_shown(after)}" if simple else key)
    b_env, n_env = base_doc.get("environment") or {}, new_doc.get("environment") or {}
    for key, name in ((CPU_MODEL, "CPU"), ("cpu_cores", "cores")):
        if b_env.get(key) != n_env.get(key):
            changes.append(f"{name} {_shown(b_env.get(key))} → {_shown(n_env.get(key))}")
    b_threads = (base.get("info") or {}).get("threads")
    n_threads = (new.get("info") or {}).get("threads")
    if b_threads != n_threads and not any(c.startswith("threads ") for c in changes):
        changes.append(f"threads used {_shown(b_threads)} → {_shown(n_threads)}")
    b_share = others_share(base) if runs_on_host(base) else None
    n_share = others_share(new) if runs_on_host(new) else None
    if b_share is not None and n_share is not None and \
            abs(b_share - n_share) > CHANGED_SHARE:
        changes.append(f"others' CPU share {b_share:.0%} → {n_share:.0%}")
    return changes


def compare(base_path: Path, new_path: Path, threshold: float = DEFAULT_THRESHOLD,
            alpha: float = DEFAULT_ALPHA) -> Comparison:
    """Compare two result files; raises ValueError (naming the file) for bad input."""
    base, base_doc = load_records(base_path)
    new, new_doc = load_records(new_path)
    b_cores = (base_doc.get("environment") or {}).get("cpu_cores")
    n_cores = (new_doc.get("environment") or {}).get("cpu_cores")
    rows = []
    for key in base.keys() & new.keys():
        b, n = CompareSide.of(base[key], b_cores), CompareSide.of(new[key], n_cores)
        if b.status == n.status == "unavailable":
            continue
        changed = changed_settings(base_doc, new_doc, base[key], new[key])
        verdict, why, ratio, p = judge(b, n, threshold, alpha, changed)
        rows.append(CompareRow(key[0], key[1], b, n, verdict, why, ratio, p, key, changed))
    order = {k: i for i, k in enumerate(list(base) + list(new))}
    rows.sort(key=lambda r: order[r.key])
    if not rows:
        raise ValueError(f"{base_path} and {new_path} share no measured kernel x problem")
    notes = _setting_notes(base_doc, new_doc)
    for name, side_load, cores in (("BASE", [r.base.load for r in rows], b_cores),
                                   ("NEW", [r.new.load for r in rows], n_cores)):
        worst = max((v for v in side_load if v is not None), default=None)
        if worst is not None:
            notes.append(f"host loaded in {name}: 1-minute load average up to {worst:.1f} on "
                         f"{cores} cores; its CPU rows are unsure (rerun on a quiet host)")
    return Comparison(rows, sorted(base.keys() - new.keys()), sorted(new.keys() - base.keys()),
                      notes)


# ------------------------------------------------------------------ rendering
HEADERS = ("kernel", "problem", "BASE ms", "NEW ms", "change", "p", "n", "noise", "verdict")


def _fmt_ms(side: CompareSide) -> str:
    if side.status != "ok" or side.median is None:
        return "n/a" if side.status == "unavailable" else side.status
    return f"{side.median:.4g}" + ("!" if side.noisy else "")


def _fmt_noise(side: CompareSide) -> str:
    return "-" if side.noise is None else f"{100 * side.noise:.1f}"


def verdict_cell(row: CompareRow, notes: dict[str, int] | None = None) -> str:
    """The verdict as a table shows it: "same (identical code)", "unsure (noisy)"; with
    ``notes``, why identical code moved goes to a numbered footnote ("[1]")."""
    if row.verdict in ("unsure", "broken"):
        return f"{row.verdict} ({row.why})"
    if not row.why.startswith("identical code"):
        return row.verdict
    note = row.environment_note
    if not note:
        return f"{row.verdict} (identical code)"
    if notes is None:
        return f"{row.verdict} ({row.why})"
    return f"{row.verdict} (identical code) [{notes.setdefault(note, len(notes) + 1)}]"


def footnotes(notes: dict[str, int]) -> list[str]:
    return [f"[{number}] {text}" for text, number in notes.items()]


def cells(row: CompareRow, notes: dict[str, int] | None = None) -> list[str]:
    """One table row; change is NEW/BASE - 1 of the medians, noise BASE/NEW in percent."""
    change = "-" if row.ratio is None else f"{row.ratio - 1:+.1%}"
    p = "-" if row.p_value is None else f"{row.p_value:.1g}"
    verdict = verdict_cell(row, notes)
    return [row.kernel, row.problem, _fmt_ms(row.base), _fmt_ms(row.new), change, p,
            f"{len(row.base.samples)}/{len(row.new.samples)}",
            f"{_fmt_noise(row.base)}/{_fmt_noise(row.new)}", verdict]


def summary(result: Comparison, threshold: float) -> str:
    counts = ", ".join(f"{result.count(v)} {v}" for v in VERDICTS if result.count(v))
    gate = ("FAIL: slower than the threshold or broken" if result.exit_status
            else "pass: nothing significantly slower")
    return f"{counts} (threshold {threshold:.0%}) -- {gate}"


def missing_lines(result: Comparison) -> list[str]:
    """One line per kernel x problem found in one file only."""
    lines = []
    for side, keys in (("BASE", result.only_base), ("NEW", result.only_new)):
        for kernel, problem, device in keys:
            shown = f" on {device}" if device and device not in problem else ""
            lines.append(f"only in {side}: {kernel} @ {problem}{shown}")
    return lines


#: Columns a narrow terminal drops first, in order: the sample counts, the noise, p.
_EXPENDABLE = ("n", "noise", "p")


def _fit_columns(rows: list[CompareRow], body: list[list[str]],
                 width: int) -> tuple[dict[int, int], int]:
    """The columns (index: width) of a terminal table ``width`` wide, and the gap between
    them: two spaces where everything fits, else one, else the expendable columns go. A
    verdict that is a phrase ("same (identical code) [1]") is never wrapped; an unsure
    one's reason may be."""
    phrase = max((len(values[-1]) for row, values in zip(rows, body)
                  if row.verdict not in ("unsure", "broken")), default=0)
    widths = {i: max([len(title)] + ([phrase] if title == "verdict" else
                                     [len(values[i]) for values in body]))
              for i, title in enumerate(HEADERS) if title != "problem"}

    def total(gap: int) -> int:
        return sum(widths.values()) + gap * (len(widths) - 1)

    if total(2) <= width:
        return widths, 2
    for title in _EXPENDABLE:
        if total(1) <= width:
            break
        del widths[HEADERS.index(title)]
    return widths, 1


#: The verdicts a terminal shows first when a comparison has more rows than it prints.
_FIRST_SHOWN = ("broken", "slower", "unsure", "faster")


def terminal_rows(rows: list[CompareRow], limit: int | None) -> list[CompareRow]:
    """The rows a terminal shows, in their order: every one where there are at most
    ``limit`` (or ``limit`` is None); else ``limit`` of them, the findings first (broken,
    slower, unsure, faster), then same rows."""
    if limit is None or len(rows) <= limit:
        return rows
    ranked = sorted(range(len(rows)), key=lambda i: (
        _FIRST_SHOWN.index(rows[i].verdict) if rows[i].verdict in _FIRST_SHOWN
        else len(_FIRST_SHOWN), i))
    return [rows[i] for i in sorted(ranked[:limit])]


def render_rich(result: Comparison, threshold: float, console,
                limit: int | None = TERMINAL_ROWS) -> None:
    """One table per problem, the footnotes, the legend and the summary. Beyond ``limit``
    rows, the findings are shown first and a line counts what is left out (None: every
    row)."""
    from rich import box
    from rich.table import Table

    styles = {"slower": "bold red", "broken": "bold red", "faster": "green", "unsure": "yellow"}
    problems: dict[str, list[CompareRow]] = {}
    printed = terminal_rows(result.rows, limit)
    for row in printed:
        problems.setdefault(row.problem, []).append(row)
    notes: dict[str, int] = {}
    for problem, rows in problems.items():  # one table per problem, as the run's report
        body = [cells(row, notes) for row in rows]
        shown, gap = _fit_columns(rows, body, console.width)
        table = Table(title=f"{problem}: NEW against BASE, kernel time (median ms; ! = noisy)",
                      title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                      show_edge=False, padding=(0, gap - 1, 0, 0), collapse_padding=True)
        for i, width in shown.items():
            verdict = HEADERS[i] == "verdict"
            # Only an unsure or broken verdict's reason may wrap.
            table.add_column(HEADERS[i], justify="left" if i == 0 or verdict else "right",
                             no_wrap=not verdict, min_width=width if verdict else None)
        for row, values in zip(rows, body):
            table.add_row(*(values[i] for i in shown), style=styles.get(row.verdict))
        console.print(table)
    for line in footnotes(notes):
        console.print(line, markup=False, highlight=False)
    if len(printed) < len(result.rows):
        left_out = Counter(row.verdict for row in result.rows) - \
            Counter(row.verdict for row in printed)
        counts = ", ".join(f"{n} {verdict}" for verdict, n in left_out.items())
        console.print(f"... {len(result.rows) - len(printed)} more rows not shown ({counts}), "
                      f"of {len(result.rows)}: --all-rows prints every row; --markdown FILE "
                      f"writes them all", markup=False, highlight=False)
    console.print("change: NEW/BASE - 1; p: two-sided Mann-Whitney U on the samples; "
                  "n and noise (1.4826*MAD/median, %): BASE/NEW", style="dim")
    for line in missing_lines(result) + result.notes:
        console.print(line, style="dim")
    console.print(summary_line(result.verdict_rows()))
    console.print(summary(result, threshold))


def render_markdown(result: Comparison, threshold: float) -> str:
    def line(values) -> str:
        return "| " + " | ".join(str(v).replace("|", "\\|") for v in values) + " |"

    out = ["### mmsuite compare: NEW against BASE", "",
           "Kernel time, median ms (`!` = noisy). change: NEW/BASE - 1; p: two-sided "
           "Mann-Whitney U test on the samples; n and noise (1.4826·MAD/median, %): "
           "BASE/NEW.", "",
           line(HEADERS), line(["---"] * 2 + ["---:"] * 6 + ["---"])]
    notes: dict[str, int] = {}
    out += [line(cells(row, notes)) for row in result.rows]
    extra = footnotes(notes) + missing_lines(result) + result.notes
    if extra:
        out += [""] + [f"- {text}" for text in extra]
    out += ["", summary_line(result.verdict_rows()), "",
            f"**{summary(result, threshold)}**", ""]
    return "\n".join(out)


# ------------------------------------------------------------------ command line
