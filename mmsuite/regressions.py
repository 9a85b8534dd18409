"""Steps in a history: the commits at which a kernel x problem became slower or faster.

Every series of a :data:`mmsuite.history.History` (asv's results, or saved result
files read by :func:`load_saved`) is searched for change points with E-Divisive
means (:mod:`mmsuite.changepoints`) on the logarithm of its per-commit values, so
that a step is judged by its relative size. A change point is reported when the
permutation test finds it at ``alpha`` and the step, the median after it over the
median before it (each up to the neighbouring change point), is beyond
``threshold``: a significant 1% drift is real but not a regression worth a gate.

What would make a step that is not the code's is kept apart before the search:
each machine (and device model) is its own series, and points measured while other
processes loaded the CPU or the GPU was throttled are left out and listed.
Every metric here is a time: higher is slower, as asv reads every benchmark.
"""

from __future__ import annotations

import math
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

from . import results
from .backend_table import runs_on_host
from .changepoints import DEFAULT_ALPHA, e_divisive
from .history import History, Point, Series, SeriesKey
from .load import DISTORTING_SHARE, others_share
from .machines import device_model
from .problem import label_of

DEFAULT_THRESHOLD = 0.05
#: The phases of a saved result whose history is kept (the ``kernel_ms`` metric and so on).
SAVED_METRICS = ("kernel_ms", "h2d_ms", "d2h_ms")
#: The benchmark name a saved result's series carries (``Series.metric`` reads the phase).
SAVED_PREFIX = "results."


@dataclass(frozen=True)
class SeriesStep:
    """One change point of one series."""

    series: Series
    commit: str  # the first commit measured after the change
    previous: str  # the last commit measured before it
    ratio: float  # median after / median before
    p_value: float

    @property
    def confidence(self) -> float:
        return 1.0 - self.p_value

    @property
    def slower(self) -> bool:
        return self.ratio > 1.0


@dataclass
class Finding:
    """The steps found in a history, and the points left out of the search."""

    steps: list[SeriesStep]
    left_out: list[tuple[Series, Point]]
    series_searched: int

    @property
    def regressions(self) -> list[SeriesStep]:
        return [s for s in self.steps if s.slower]


def per_commit(points: Iterable[Point]) -> list[Point]:
    """One point per commit, in order: the median of a commit measured several times."""
    grouped: dict[str, list[Point]] = {}
    for point in points:
        grouped.setdefault(point.commit, []).append(point)
    merged = [Point(c, min(p.date for p in ps), float(np.median([p.value for p in ps])))
              for c, ps in grouped.items()]
    return sorted(merged, key=lambda p: (p.date, p.commit))


def find_steps(series: Series, threshold: float = DEFAULT_THRESHOLD,
               alpha: float = DEFAULT_ALPHA, include_kept_apart: bool = False) -> list[SeriesStep]:
    """The steps of one series beyond ``threshold``, at level ``alpha`` (module docstring);
    points kept apart are judged only with ``include_kept_apart``."""
    points = per_commit(p for p in series.points
                        if (include_kept_apart or not p.kept_apart) and p.value > 0)
    if len(points) < 4:
        return []
    values = np.log([p.value for p in points])
    changes = e_divisive(values, alpha=alpha)
    bounds = [0, *(c.index for c in changes), len(points)]
    steps = []
    for number, change in enumerate(changes, start=1):
        before = values[bounds[number - 1]:change.index]
        after = values[change.index:bounds[number + 1]]
        ratio = math.exp(float(np.median(after)) - float(np.median(before)))
        if abs(math.log(ratio)) > math.log1p(threshold):
            steps.append(SeriesStep(series, points[change.index].commit,
                                    points[change.index - 1].commit, ratio, change.p_value))
    return steps


def find(history: History, kernel_ids: Iterable[str] | None = None, metric: str = "kernel_ms",
         threshold: float = DEFAULT_THRESHOLD, alpha: float = DEFAULT_ALPHA,
         include_kept_apart: bool = False) -> Finding:
    """Search every series of ``metric`` (of the given kernels) for steps. Points measured
    under load or throttled are left out, unless ``include_kept_apart`` (for a history
    measured under the same load throughout)."""
    wanted = set(kernel_ids) if kernel_ids is not None else None
    chosen = [s for s in history.values() if s.metric == metric and s.points
              and (wanted is None or s.kernel in wanted)]
    steps: list[SeriesStep] = []
    left_out: list[tuple[Series, Point]] = []
    for series in sorted(chosen, key=lambda s: s.key):
        steps.extend(find_steps(series, threshold, alpha, include_kept_apart))
        if not include_kept_apart:
            left_out.extend((series, p) for p in series.points if p.kept_apart)
    return Finding(steps, left_out, len(chosen))


def _where(series: Series) -> str:
    rest = ", ".join(f"{n}={v}" for n, v in series.params.items() if n != "kernel")
    return f"{series.kernel or series.key.benchmark} [{series.key.machine}] {rest or 'all'}"


def step_line(step: SeriesStep) -> str:
    """kernel [machine] problem: slower by +8.1% at commit (after previous), confidence."""
    how = "slower" if step.slower else "faster"
    return (f"{_where(step.series)}: {how} by {step.ratio - 1:+.1%} at {step.commit[:8]} "
            f"(after {step.previous[:8]}); confidence {step.confidence:.1%}")


def report_lines(finding: Finding, threshold: float) -> list[str]:
    """The text list: regressions first, then improvements, then what was left out."""
    ordered = finding.regressions + [s for s in finding.steps if not s.slower]
    lines = [step_line(s) for s in ordered]
    for series, point in finding.left_out:
        lines.append(f"left out: {_where(series)} at {point.commit[:8]}: {point.kept_apart}")
    lines.append(f"{len(finding.regressions)} regressions, "
                 f"{len(finding.steps) - len(finding.regressions)} improvements beyond "
                 f"{threshold:.0%} in {finding.series_searched} series (E-Divisive means)")
    return lines


# ------------------------------------------------------------ saved result files
def kept_apart_reason(record: dict) -> str:
    """Why a saved row's time is not comparable with its neighbours' (empty: it is)."""
    share = others_share(record)
    if runs_on_host(record) and share is not None and share > DISTORTING_SHARE:
        return f"measured under load (other processes used {share:.0%} of the CPU)"
    throttled = record.get("throttled")
    if isinstance(throttled, list) and throttled:
        return "measured while the GPU was throttled (" + ", ".join(map(str, throttled)) + ")"
    return ""


def _created(environment: dict) -> datetime:
    try:
        date = datetime.fromisoformat(str(environment.get("created")))
    except ValueError:
        return datetime.fromtimestamp(0, tz=timezone.utc)
    return date if date.tzinfo else date.replace(tzinfo=timezone.utc)


def commit_dates(commits: Iterable[str], repo: Path | None) -> dict[str, datetime]:
    """A date for each commit that the git repository at ``repo`` knows, in git's order: the
    committer date, moved on by a microsecond where an earlier commit (in topological
    order) has the same or a later one, so that commits of one second keep their order."""
    wanted = sorted(set(commits))
    if repo is None or not wanted:
        return {}
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-list", "--topo-order", "--reverse",
                              "--format=%ct", "--ignore-missing", *wanted],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return {}
    if out.returncode != 0:  # not a repository, or a name git cannot read
        return {}
    found: dict[str, datetime] = {}
    last: datetime | None = None
    lines = out.stdout.splitlines()  # "commit <hash>", then its date, for each commit
    for header, seconds in zip(lines[::2], lines[1::2]):
        full = header.removeprefix("commit ").strip()
        date = datetime.fromtimestamp(int(seconds), tz=timezone.utc)
        if last is not None and date <= last:
            date = last + timedelta(microseconds=1)
        last = date
        for commit in wanted:  # a file may name its commit by a short hash
            if full.startswith(commit):
                found[commit] = date
    return found


def in_git_order(history: History, repo: Path | None) -> None:
    """Place each point (and failed commit) of ``history`` at its commit's date in the git
    repository at ``repo`` (:func:`commit_dates`), where git knows the commit, and sort the
    series again. asv records a commit's author date to the second, so the commits of a
    series applied or rebased at once share one date, and would otherwise fall in the
    order of their hashes; a commit git does not know keeps the date it came with."""
    commits = {p.commit for s in history.values() for p in s.points}
    commits |= {c for s in history.values() for c, _ in s.failed}
    dates = commit_dates(commits, repo)
    for series in history.values():
        series.points = [replace(p, date=dates.get(p.commit, p.date)) for p in series.points]
        series.failed = [(c, dates.get(c, d)) for c, d in series.failed]
        series.sort()


def load_saved(paths: Iterable[Path], repo: Path | None = None) -> History:
    """Saved result files as a history: one series per kernel x problem x device model and
    phase, ordered by each file's commit (its date in the git repository at ``repo``, or
    the file's creation time where git does not know it).

    Raises :class:`mmsuite.results.ResultsError` (a ValueError) for an unreadable file or
    one that records no git commit.
    """
    documents = []
    for path in paths:
        document = results.load(path)
        environment = document.get("environment") or {}
        commit = environment.get("git_commit")
        if not isinstance(commit, str) or not commit:
            raise results.ResultsError(f"{path} records no git commit: its place in the "
                                       "history is unknown")
        documents.append((commit, environment, document["results"]))
    history: History = {}
    for commit, environment, records in documents:
        for record in records:
            _add_saved(history, record, environment, commit, _created(environment))
    in_git_order(history, repo)
    return history


def _add_saved(history: History, record: dict, environment: dict, commit: str,
               date: datetime) -> None:
    problem = label_of(record["problem"])
    if record.get("l2") not in (None, "warm"):
        problem += f" (L2 {record['l2']})"
    machine = device_model(record, environment) or "unknown device"
    if isinstance(record.get("device"), int):
        machine += f" #{record['device']}"
    reason = kept_apart_reason(record)
    for metric in SAVED_METRICS:
        key = SeriesKey(SAVED_PREFIX + metric, (record["kernel"], problem), machine, "")
        series = history.get(key)
        stats = record.get(metric)
        median = stats.get("median") if isinstance(stats, dict) else None
        if record["status"] in ("ok", "unavailable") and not isinstance(median, (int, float)):
            continue  # not measured in this phase (or not at all): no point, no failure
        if series is None:
            series = history[key] = Series(key, ("kernel", "problem"), "ms")
        if record["status"] != "ok":
            series.failed.append((commit, date))
        else:
            assert isinstance(median, (int, float))  # an ok row without one was skipped above
            series.points.append(Point(commit, date, float(median), reason))


def marks(finding: Finding) -> dict[SeriesKey, list[tuple[str, str]]]:
    """The steps as :func:`mmsuite.history.plot_history` marks them."""
    found: dict[SeriesKey, list[tuple[str, str]]] = {}
    for step in finding.steps:
        found.setdefault(step.series.key, []).append((step.commit, f"{step.ratio - 1:+.1%}"))
    return found
