"""Per-commit history of every benchmark, read from airspeed velocity's results directory.

asv stores one file per (machine, commit, environment) under
``<results_dir>/<machine>/<commit[:8]>-<env>.json`` and a description of every
benchmark (parameters, unit, version) in ``<results_dir>/benchmarks.json``.
:func:`load_history` turns them into one series of (commit, date, value) per
benchmark, parameter combination, machine and environment, ordered by commit
date; :func:`plot_history` draws the series of some kernels to a PNG.

Only results whose benchmark version matches the one in ``benchmarks.json``
are kept, as ``asv publish`` does: a new version means the numbers measure
something else. Failed runs (asv stores ``null``) are listed in
:attr:`Series.failed`; skipped ones (``NaN``: kernel unavailable there) are
left out.
"""

from __future__ import annotations

import ast
import itertools
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from .extras import MissingExtra

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class Point:
    """One measured value: the commit, its date (UTC) and the number recorded there."""

    commit: str
    date: datetime
    value: float
    #: Why the value is not comparable with its neighbours' (measured under load, on a
    #: throttled GPU); empty when it is. Such points are drawn hollow and never judged.
    kept_apart: str = ""


class SeriesKey(NamedTuple):
    """What one series is the history of."""

    benchmark: str  # e.g. "sgemm_cpu.CpuKernels.track_kernel_ms"
    params: tuple[str, ...]  # parameter values, in the benchmark's param_names order
    machine: str
    env: str


@dataclass
class Series:
    """The history of one benchmark with one parameter combination on one machine and env."""

    key: SeriesKey
    param_names: tuple[str, ...] = ()
    unit: str = ""
    points: list[Point] = field(default_factory=list)
    failed: list[tuple[str, datetime]] = field(default_factory=list)

    def sort(self) -> None:
        """Points and failed commits in time order: by date, then by commit."""
        self.points.sort(key=lambda p: (p.date, p.commit))
        self.failed.sort(key=lambda f: (f[1], f[0]))

    @property
    def params(self) -> dict[str, str]:
        """Parameter name -> value, e.g. {"kernel": "cpu.seq_naive", "size": "512"}."""
        return dict(zip(self.param_names, self.key.params))

    @property
    def kernel(self) -> str | None:
        """The kernel id of a kernel benchmark, else None."""
        return self.params.get("kernel")

    @property
    def metric(self) -> str:
        """The measured quantity: the method name without its asv prefix (``kernel_ms``).
        A ``time_`` benchmark's seconds are read as ms (``time_kernel`` -> ``kernel_ms``),
        so that its history continues the ``track_*_ms`` series of older versions."""
        name = self.key.benchmark.rsplit(".", 1)[-1]
        if name.startswith(("time_", "timeraw_")):
            return name.split("_", 1)[1] + "_ms"
        for prefix in ("track_", "peakmem_", "mem_"):
            if name.startswith(prefix):
                return name[len(prefix):]
        return name

    @property
    def commits(self) -> list[str]:
        return [p.commit for p in self.points]

    @property
    def values(self) -> list[float]:
        return [p.value for p in self.points]


History = dict[SeriesKey, Series]


# A parameter's repr is a kernel id or a size; a longer one is not parsed (literal_eval of a
# crafted string, deeply nested or of huge literals, can exhaust memory or the stack).
MAX_PARAM_REPR = 200


def _unquote(value: Any) -> str:
    """asv stores parameter values as their repr: "'cpu.blas'" -> "cpu.blas", "512" -> "512"."""
    text = str(value)
    if len(text) > MAX_PARAM_REPR:
        return text[:MAX_PARAM_REPR]
    try:
        parsed = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text
    return str(parsed) if isinstance(parsed, (str, int, float)) else text


def _load_json(path: Path) -> Any:
    with path.open(encoding="utf-8") as fd:
        return json.load(fd)


def _benchmarks_meta(results_dir: Path) -> dict[str, Mapping[str, Any]]:
    path = results_dir / "benchmarks.json"
    if not path.is_file():
        return {}
    data = _load_json(path)
    return {name: meta for name, meta in data.items() if isinstance(meta, Mapping)}


def _date(ms: Any) -> datetime:
    return datetime.fromtimestamp(float(ms or 0) / 1000.0, tz=timezone.utc)


def asv_reader():
    """asv's own results reader (the ``bench`` extra); MissingExtra where asv is absent."""
    try:
        from asv import results as asv_results
    except ImportError as exc:
        raise MissingExtra("reading asv results", "asv", "bench") from exc
    return asv_results


def machines(results_dir: str | Path) -> list[str]:
    """The machine names that have results under an asv results directory."""
    root = Path(results_dir)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "machine.json").is_file())


def check_machine_name(name: str) -> None:
    """Refuse a machine name that is not one folder directly under the results directory
    (``../..`` would read outside it): ValueError."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise ValueError(f"{name!r} is not an asv machine name (a folder of the results "
                         "directory)")


def load_history(results_dir: str | Path, machine: str | None = None,
                 any_version: bool = False) -> History:
    """Read an asv results directory into one :class:`Series` per benchmark and parameters.

    ``results_dir`` is asv's ``results_dir`` (``.asv/results``). ``machine``
    keeps one machine's results only. With ``any_version`` results of every
    benchmark version are kept, else only those matching ``benchmarks.json``.
    Points are ordered by commit date. Raises FileNotFoundError if the
    directory does not exist; files that are not asv results are ignored.
    The files are read through asv's results API, so its format is asv's business.
    """
    root = Path(results_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"no asv results directory at {root}; run `asv run` first")
    if machine is not None:
        check_machine_name(machine)
    asv_results = asv_reader()
    meta = _benchmarks_meta(root)
    history: History = {}
    folder = root / machine if machine is not None else root
    found = asv_results.iter_results(str(folder)) if folder.is_dir() else []
    for result in found:
        if result.commit_hash is None:
            continue
        commit, date = str(result.commit_hash), _date(result.date)
        env = str(result.env_name or "")
        machine_name = str(result.params.get("machine", ""))
        keys = set(result.get_all_result_keys())
        if not any_version:
            # asv's own version check; benchmarks it no longer lists are kept as they are.
            keys = set(result.get_result_keys(meta)) | {k for k in keys if k not in meta}
        for name in sorted(keys):
            params = result.get_result_params(name) or []
            _add_result(history, meta.get(name, {}), name, params,
                        result.get_result_value(name, params), machine_name, env, commit, date)
    for series in history.values():
        series.sort()
    return history


def _add_result(history: History, meta: Mapping[str, Any], name: str, params: list,
                values: Any, machine: str, env: str, commit: str, date: datetime) -> None:
    param_names = tuple(meta.get("param_names") or (f"param{i + 1}" for i in range(len(params))))
    combos = [tuple(_unquote(v) for v in combo) for combo in itertools.product(*params)]
    if not isinstance(values, list):  # asv returns a list, one value per parameter combination
        values = [values] * len(combos)
    unit = str(meta.get("unit", ""))
    scale = 1e3 if unit == "seconds" else 1.0  # time_ benchmarks: shown in ms
    for combo, value in zip(combos, values):
        key = SeriesKey(name, combo, machine, env)
        series = history.get(key)
        if series is None:
            series = history[key] = Series(key, param_names, "ms" if scale != 1.0 else unit)
        if value is None:
            series.failed.append((commit, date))
            continue
        try:
            number = float(value) * scale
        except (TypeError, ValueError):
            continue
        if math.isfinite(number):
            series.points.append(Point(commit, date, number))


def select(history: History, kernel_ids: Iterable[str] | None = None,
           metric: str | None = None, machine: str | None = None) -> list[Series]:
    """The series with points of the given kernels, metric and machine (None: any)."""
    wanted = set(kernel_ids) if kernel_ids is not None else None
    return [
        s for s in history.values()
        if s.points
        and (wanted is None or s.kernel in wanted)
        and (metric is None or s.metric == metric)
        and (machine is None or s.key.machine == machine)
    ]


def kernel_ids(history: History, metric: str | None = None) -> list[str]:
    """Kernel ids that have at least one point (of ``metric`` if given).

    In catalogue (ladder) order; ids the catalogue no longer lists come last.
    """
    from .catalogue import ladder_rank

    rank = ladder_rank()
    seen: dict[str, None] = {}
    for series in select(history, metric=metric):
        if series.kernel is not None:
            seen.setdefault(series.kernel, None)
    return sorted(seen, key=lambda kid: (rank.get(kid, len(rank)), kid))


def metrics(history: History) -> list[str]:
    """The metrics with at least one point, sorted (``kernel_ms``, ``h2d_ms``, ...)."""
    return sorted({s.metric for s in history.values() if s.points})


def _day(date: datetime) -> str:
    return date.strftime("%Y-%m-%d")


def summary(history: History, kernel_ids: Iterable[str], metric: str = "kernel_ms",
            machine: str | None = None) -> str:
    """One line per series: its commits' date range, first and last value, failed commits."""
    kernel_ids = list(kernel_ids)
    wanted = set(kernel_ids)
    chosen = [s for s in history.values()
              if s.kernel in wanted and s.metric == metric and (s.points or s.failed)
              and (machine is None or s.key.machine == machine)]
    chosen.sort(key=lambda s: (kernel_ids.index(s.kernel) if s.kernel in kernel_ids else 0,
                               _panel_sort_key((_panel(s), [])), s.key))
    lines = []
    for series in chosen:
        head = f"{series.kernel} [{series.key.machine}] {_panel(series)}:"
        unit = f" {series.unit}" if series.unit else ""
        if series.points:
            first, last = series.points[0], series.points[-1]
            head += (f" {len(series.points)} commits {_day(first.date)} .. {_day(last.date)};"
                     f" {first.value:.4g}{unit} at {first.commit[:8]} -> {last.value:.4g}{unit}"
                     f" at {last.commit[:8]}")
        if series.failed:
            head += "; failed at " + ", ".join(f"{c[:8]} ({_day(d)})" for c, d in series.failed)
        lines.append(head)
    return "\n".join(lines)


def _panel(series: Series) -> str:
    rest = [f"{n}={v}" for n, v in series.params.items() if n != "kernel"]
    return ", ".join(rest) or "all"


#: Steps to mark on a history figure: per series, (first commit after the step, its label).
Marks = Mapping[SeriesKey, list[tuple[str, str]]]


def plot_history(history: History, kernel_ids: Iterable[str], out_png: str | Path,
                 metric: str = "kernel_ms", machine: str | None = None,
                 marks: Marks | None = None) -> Path:
    """Draw each kernel's ``metric`` across commits to a PNG, one panel per problem size.

    The x axis lists the commits in date order (short hashes and dates); a kernel
    that was not measured at some commit has a gap there, one that failed a cross.
    Returns the PNG's path. Raises ValueError when none of ``kernel_ids`` has a
    point for ``metric``. ``marks`` draws a labelled triangle at each step found there.
    """
    from .charts import write_figure

    fig = history_figure(history, kernel_ids, metric, machine, marks)
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    return write_figure(fig, out, format="png", dpi=110)


def history_figure(history: History, kernel_ids: Iterable[str], metric: str = "kernel_ms",
                   machine: str | None = None, marks: Marks | None = None) -> Figure:
    """The figure :func:`plot_history` saves (a matplotlib Figure)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    kernel_ids = list(kernel_ids)
    chosen = select(history, kernel_ids, metric, machine)
    if not chosen:
        raise ValueError(f"no {metric} history for {', '.join(kernel_ids) or 'no kernels'}"
                         + (f" on machine {machine}" if machine else ""))

    commits: dict[str, datetime] = {}
    for series in chosen:
        for point in series.points:
            commits.setdefault(point.commit, point.date)
        for commit, date in series.failed:
            commits.setdefault(commit, date)
    order = sorted(commits, key=lambda c: (commits[c], c))
    position = {c: i for i, c in enumerate(order)}

    panels: dict[str, list[Series]] = {}
    for series in sorted(chosen, key=lambda s: (kernel_ids.index(s.kernel) if s.kernel in
                                                  kernel_ids else 0, s.key)):
        panels.setdefault(_panel(series), []).append(series)
    several_machines = len({s.key.machine for s in chosen}) > 1
    several_envs = len({s.key.env for s in chosen}) > 1

    width = max(9.0, min(20.0, 5.0 + 0.5 * len(order)))
    # Each panel is tall enough for its legend (one line per series).
    ordered = sorted(panels.items(), key=_panel_sort_key)
    heights = [max(3.2, 0.8 + 0.22 * len(members)) for _, members in ordered]
    fig = Figure(figsize=(width, sum(heights)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False,
                        gridspec_kw={"height_ratios": heights})[:, 0]
    for ax, (panel, members) in zip(axes, ordered):
        values: list[float] = []
        for index, series in enumerate(members):
            label = series.kernel or series.key.benchmark
            if several_machines:
                label += f" [{series.key.machine}]"
            if several_envs:
                label += f" ({series.key.env})"
            judged = [p for p in series.points if not p.kept_apart]
            xs = [position[p.commit] for p in judged]
            ys = [p.value for p in judged]
            values.extend(p.value for p in series.points)
            # Ten colours cycle; the marker changes with each cycle.
            marker = _MARKERS[index // 10 % len(_MARKERS)]
            line, = ax.plot(xs, ys, marker=marker, label=label)
            apart = [p for p in series.points if p.kept_apart]
            if apart:  # hollow, off the line: measured under load or throttled
                ax.plot([position[p.commit] for p in apart], [p.value for p in apart],
                        linestyle="none", marker=marker, markerfacecolor="none",
                        color=line.get_color(), label=f"{label}: kept apart (load)")
            for commit, text in (marks or {}).get(series.key, []):
                at = [p.value for p in series.points if p.commit == commit]
                if commit in position and at:
                    ax.plot([position[commit]], at[:1], marker="v", markersize=14,
                            color="red", linestyle="none", zorder=5)
                    ax.annotate(text, (position[commit], at[0]), textcoords="offset points",
                                xytext=(0, 12), ha="center", color="red", fontsize="small")
            if series.failed:
                # A failed commit is a cross on the panel's floor, in the series' colour.
                ax.plot([position[c] for c, _ in series.failed], [0.02] * len(series.failed),
                        "x", color=line.get_color(), markersize=9, mew=2,
                        transform=ax.get_xaxis_transform(), label=f"{label}: failed")
        unit = members[0].unit or ""
        ax.set_ylabel(f"{metric} ({unit})" if unit and unit not in metric else metric)
        ax.set_title(panel, fontsize="medium")
        positive = [v for v in values if v > 0]
        if positive and max(positive) / min(positive) > 20:
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(NullFormatter())
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes[-1].set_xticks(range(len(order)))
    axes[-1].set_xticklabels([f"{c[:8]}\n{_day(commits[c])}" for c in order], rotation=45,
                             ha="right", fontsize="small")
    axes[-1].set_xlabel("commit and its date (x: the benchmark failed there)")
    if len(order) == 1:
        axes[-1].set_xlim(-0.5, 0.5)
    fig.suptitle(f"{metric} across commits (lower is better)")
    return fig


_MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def _panel_sort_key(item: tuple[str, list[Series]]) -> tuple:
    """Panels in numeric order of their parameters (size=256 before size=1024)."""
    parts = []
    for part in item[0].split(", "):
        value = part.split("=", 1)[-1]
        parts.append((0, float(value), "") if _is_number(value) else (1, 0.0, value))
    return tuple(parts)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
