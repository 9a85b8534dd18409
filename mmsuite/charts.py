"""Figures of a report, drawn from result records with matplotlib (Agg, no display).

Every chart says what it measures on its axes, and none lets a kernel that did not
produce a trustworthy time look fast: failed, unavailable, errored and invalid
(above peak) kernels get a labelled marker instead of a bar, noisy ones a hatched bar.
Each chart function returns a :class:`matplotlib.figure.Figure`; :func:`save` writes it as
SVG (text kept as text, so a browser can search it) and PNG; :func:`plot` writes the
PNG figures of `--plots`.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable
from pathlib import Path
from typing import TypeGuard

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

from .backend_table import BACKENDS, UNKNOWN_COLOUR, in_ladder_order
from .catalogue import BASELINE_ID, BY_ID, ladder_rank
from .problem import label_of
from .report import flops_scale, group_by_problem, table_rows
from .results import write_atomically


def _colour(backend: str) -> str:
    return BACKENDS[backend].colour if backend in BACKENDS else UNKNOWN_COLOUR


def _title(backend: str) -> str:
    return BACKENDS[backend].title if backend in BACKENDS else backend

_MISSING_COLOUR = {"failed": "#d62728", "error": "#d62728", "crashed": "#d62728",
                   "invalid": "#9467bd", "unavailable": "#7f7f7f"}
_MISSING_TEXT = {"failed": "failed verification", "error": "error", "crashed": "crashed",
                 "invalid": "invalid: above peak", "unavailable": "unavailable"}


def write_figure(fig: Figure, path: Path, **savefig_kwargs) -> Path:
    """Render ``fig`` and write it through the atomic writer: a symlink planted at
    ``path`` is replaced, never followed, and a failed write leaves the old file."""
    buffer = io.BytesIO()
    fig.savefig(buffer, **savefig_kwargs)
    write_atomically(path, buffer.getvalue())
    return path


def save(fig: Figure, out_dir: Path, name: str) -> tuple[Path, Path]:
    """Write ``name.svg`` and ``name.png`` into ``out_dir``; returns both paths."""
    import matplotlib

    out_dir.mkdir(parents=True, exist_ok=True)
    svg, png = out_dir / f"{name}.svg", out_dir / f"{name}.png"
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": name}):
        # No date in the metadata: the same results give the same file.
        write_figure(fig, svg, format="svg", metadata={"Date": None})
    write_figure(fig, png, format="png", dpi=110)
    return svg, png


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _unit(records: Iterable[dict]) -> tuple[float, str]:
    best = max((r.get("gflops") or 0.0 for r in records if r.get("status") == "ok"
                and _finite(r.get("gflops"))), default=0.0)
    return flops_scale(best)


def _finite(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _throughput_range(record: dict) -> tuple[float, float] | None:
    """GFLOP/s at the slowest and fastest sample (the error bar)."""
    samples = [s for s in (record.get("kernel_ms") or {}).get("samples") or [] if s]
    if len(samples) < 2:
        return None
    flops = record.get("flops") or 0
    return flops / (max(samples) * 1e6), flops / (min(samples) * 1e6)


def _peak(records: Iterable[dict]) -> float | None:
    peaks = {r["peak_gflops"] for r in records if _finite(r.get("peak_gflops"))}
    return max(peaks) if peaks else None


def _fmt_value(value: float) -> str:
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def _times(value: float) -> str:
    """A speedup as text: x0.95, x21.4, x242, x28900."""
    return f"x{value:.2f}" if value < 10 else f"x{value:.1f}" if value < 100 else f"x{value:.0f}"


def _log_ticks(ax, axis: str, lo: float, hi: float) -> None:
    """Plain-number ticks (1, 2, 5, 10, 20, ...) on a log axis instead of 10^k."""
    ticks = []
    for exponent in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 2):
        for mantissa in (1, 2, 5):
            value = mantissa * 10.0 ** exponent
            if lo <= value <= hi:
                ticks.append(value)
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(FixedLocator(ticks))
    target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    target.set_minor_formatter(NullFormatter())


#: A label's character as a share of the ladder chart's axis width (8.5 pt on a 10 in
#: figure at its narrowest), to leave room for the labels right of the bars.
_CHAR_SHARE = 0.0068


def _label_places(lo: float, data_hi: float, labels: list[tuple[int, float, float, str]]
                  ) -> tuple[float, list[bool]]:
    """The upper end of a log axis from ``lo`` that holds ``data_hi`` and every bar's label,
    and for each label whether it sits inside its bar (where the bar is long enough) or
    right of it: the axis is fitted to the data, with room for the text and no more."""
    def share(text: str) -> float:
        return min(0.8, _CHAR_SHARE * (len(text) + 2))

    inside = [True] * len(labels)
    while True:
        need = math.log(data_hi * 1.15)
        for (_, _, start, text), within in zip(labels, inside):
            if not within:  # log(hi) - log(start) >= share * (log(hi) - log(lo))
                need = max(need, (math.log(start) - share(text) * math.log(lo))
                           / (1 - share(text)))
        span = need - math.log(lo)
        moved = False
        for i, (_, end, _, text) in enumerate(labels):
            if inside[i] and math.log(end / lo) < (share(text) + 0.03) * span:
                inside[i], moved = False, True
        if not moved:
            return math.exp(need), inside


# ---------------------------------------------------------------- the ladder
def ladder_chart(group: list[dict], title: str = "", context: list[dict] | None = None
                 ) -> Figure:
    """One backend's ladder on one problem: horizontal bars of kernel-only throughput.

    Rungs in ladder order from the top; error bars span the slowest to the fastest
    sample; each bar is labelled with its figure and its speedups over the parent
    rung and the base. The backend's reference is a dashed line, the device's FP32
    peak a dotted one; kernels without a valid time are labelled markers. ``context`` is
    the whole problem's records when ``group`` is one backend of it, so that speedups are
    those of the table (x base over cpu.seq_naive when it ran).
    """
    rows = {r["kernel"]: r for r in table_rows(context or group)}
    bases = sorted({r["base"] for r in rows.values() if r["base"]})
    scale, unit = _unit(group)
    records = [r for r in group if not (BY_ID.get(r["kernel"]) and BY_ID[r["kernel"]].reference)]
    refs = [r for r in group if BY_ID.get(r["kernel"]) and BY_ID[r["kernel"]].reference]
    if not records:  # a backend of references only: draw them as bars
        records, refs = group, []
    fig = _figure(10.0, 2.0 + 0.42 * len(records))
    ax = fig.add_subplot()
    values = [r["gflops"] / scale for r in group
              if r["status"] == "ok" and _finite(r.get("gflops")) and r["gflops"] > 0]
    lo = min(values) / 3 if values else 0.1
    labels: list[tuple[int, float, float, str]] = []  # (row, bar end, label start, text)
    y = list(range(len(records)))[::-1]
    for pos, record in zip(y, records):
        row = rows[record["kernel"]]
        colour = _colour(record["backend"])
        if record["status"] != "ok" or row["gflops"] is None or not row["gflops"] > 0:
            status = record["status"]
            ax.plot([lo * 1.05], [pos], marker="X", markersize=10, linestyle="none",
                    color=_MISSING_COLOUR.get(status, "#7f7f7f"))
            ax.text(lo * 1.2, pos, _MISSING_TEXT.get(status, status), va="center",
                    color=_MISSING_COLOUR.get(status, "#7f7f7f"), fontsize=9, style="italic")
            continue
        value = row["gflops"] / scale
        err = _throughput_range(record)
        xerr = [[max(value - err[0] / scale, 0)], [max(err[1] / scale - value, 0)]] \
            if err else None
        noisy = row["noisy"]
        ax.barh(pos, value, color=colour, alpha=0.55 if noisy else 0.9,
                hatch="///" if noisy else None, edgecolor="black" if noisy else colour,
                xerr=xerr, error_kw={"ecolor": "black", "capsize": 3, "lw": 1})
        ratios = []
        if row["x_parent"] is not None:
            ratios.append(f"{_times(row['x_parent'])} parent")
        if row["x_base"] is not None and row["base"] != record["kernel"]:
            ratios.append(f"{_times(row['x_base'])} base")
        if noisy:
            ratios.append("noisy")
        label = _fmt_value(value) + (f" ({', '.join(ratios)})" if ratios else "")
        right = err[1] / scale if err else value
        labels.append((pos, value, right * 1.08, label))
    for ref in refs:
        row = rows[ref["kernel"]]
        if ref["status"] == "ok" and row["gflops"]:
            value = row["gflops"] / scale
            # In the colour of its backend, so two references on one chart stay apart.
            colour = "black" if len(refs) == 1 else _colour(ref["backend"])
            ax.axvline(value, color=colour, linestyle="--", lw=1.5,
                       label=f"{ref['kernel']} (reference): {_fmt_value(value)} {unit}")
        else:
            ax.plot([], [], linestyle="none", marker="X", color="#7f7f7f",
                    label=f"{ref['kernel']} (reference): {ref['status']}")
    refs_drawn = [rows[r["kernel"]]["gflops"] / scale for r in refs
                  if r["status"] == "ok" and rows[r["kernel"]]["gflops"]]
    bar_ends = [start / 1.08 for _, _, start, _ in labels]  # error bars included
    data_hi = max(values + refs_drawn + bar_ends, default=10.0)
    hi, inside = _label_places(lo, data_hi, labels)
    peak = _peak(group)
    if peak and peak / scale <= 2 * hi:  # a peak near the data is worth a little more axis
        hi, inside = _label_places(lo, max(data_hi, peak / scale), labels)
    for (pos, _, start, label), within in zip(labels, inside):
        # A white box keeps the label readable where it crosses a line or an error bar;
        # a label that fits in its bar sits at the bar's foot, the others right of it.
        ax.text(lo * 1.08 if within else start, pos, label, va="center", fontsize=8.5,
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.0, "alpha": 0.85})
    if peak:
        text = f"FP32 peak: {_fmt_value(peak / scale)} {unit}"
        if peak / scale <= hi:
            ax.axvline(peak / scale, color="#444444", linestyle=":", lw=1.5, label=text)
        else:  # the axis fits the data: a far peak is named, not drawn
            ratio = peak / scale / max(values, default=1.0)
            ax.plot([], [], linestyle="none",
                    label=f"{text} (off the axis: {_fmt_value(ratio)}x the fastest bar)")
    backends = in_ladder_order(r["backend"] for r in records)
    if len(backends) > 1:  # a legend of the bars' colours
        for backend in backends:
            ax.barh([0], [0], color=_colour(backend), label=_title(backend))
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    _log_ticks(ax, "x", lo, hi)
    ax.set_yticks(y)
    ax.set_yticklabels([r["kernel"] for r in records], fontsize=9)
    ax.set_ylim(-0.7, len(records) - 0.3)
    ax.set_xlabel(f"{unit}, kernel only (median; error bar: slowest to fastest sample; "
                  f"base: {', '.join(bases) or '-'})")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(title or label_of(group[0]["problem"]), fontsize=11, loc="left")
    if ax.get_legend_handles_labels()[0]:
        fig.legend(loc="outside lower center", ncols=3, fontsize=8, frameon=False)
    return fig


# ---------------------------------------------------------------- size sweep
def size_key(problem: dict) -> tuple:
    """Orders problems by their work (m*n*k*batch), then by shape."""
    return (problem["m"] * problem["n"] * problem["k"] * problem["batch"],
            problem["m"], problem["n"], problem["k"])


#: The most problems a chart of throughput against size labels on its x axis.
SWEEP_TICKS = 16


def sweep_chart(records: list[dict], title: str = "") -> Figure | None:
    """Throughput against problem size, one line per kernel (references dashed black).

    Square problems go on a log2 axis labelled with their sizes (128, 256, ...);
    other shapes are placed in order of their FLOPs and labelled MxNxK. None when
    fewer than two sizes have an ok result."""
    ok = [r for r in records if r["status"] == "ok" and _finite(r.get("gflops"))]
    problems = sorted({tuple(sorted(r["problem"].items())) for r in ok},
                      key=lambda p: size_key(dict(p)))
    if len(problems) < 2:
        return None
    square = all(d["m"] == d["n"] == d["k"] and d["batch"] == 1
                 for d in (dict(p) for p in problems))
    position = {p: (dict(p)["m"] if square else i) for i, p in enumerate(problems)}
    scale, unit = _unit(ok)
    fig = _figure(10.0, 5.5)
    ax = fig.add_subplot()
    by_kernel: dict[str, list[tuple[float, float, dict]]] = {}
    for r in ok:
        by_kernel.setdefault(r["kernel"], []).append(
            (position[tuple(sorted(r["problem"].items()))], r["gflops"] / scale, r))
    order = ladder_rank()
    markers = "osD^vP<>*hX"
    for i, (kernel, points) in enumerate(sorted(by_kernel.items(),
                                                key=lambda kv: order.get(kv[0], 999))):
        points.sort(key=lambda t: t[0])
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        is_ref = BY_ID.get(kernel) is not None and BY_ID[kernel].reference
        if is_ref:
            line, = ax.plot(xs, ys, "--", color="black", lw=1.8, marker="s",
                            label=f"{kernel} (reference)")
        else:
            line, = ax.plot(xs, ys, "-", marker=markers[i % len(markers)], lw=1.4, label=kernel)
        noisy = [(p[0], p[1]) for p in points if p[2].get("noisy")]
        if noisy:
            # Noisy points are hollow: their median is less certain than the rest.
            ax.plot(*zip(*noisy), linestyle="none", marker=line.get_marker(), markersize=7,
                    markerfacecolor="white", markeredgecolor=line.get_color())
    missing = [r for r in records if r["status"] != "ok"
               and tuple(sorted(r["problem"].items())) in position]
    for r in missing:
        ax.annotate("x", (position[tuple(sorted(r["problem"].items()))], 0), fontsize=8,
                    color=_MISSING_COLOUR.get(r["status"], "#7f7f7f"))
    peak = _peak(records)
    if peak:
        ax.axhline(peak / scale, color="#444444", linestyle=":", lw=1.5,
                   label=f"FP32 peak {_fmt_value(peak / scale)} {unit}")
    if any(r.get("noisy") for r in ok):
        ax.plot([], [], linestyle="none", marker="o", markerfacecolor="white",
                markeredgecolor="black", label="hollow: noisy")
    values = [r["gflops"] / scale for r in ok if r["gflops"] > 0] + \
        ([peak / scale] if peak else [])
    ax.set_yscale("log")
    _log_ticks(ax, "y", min(values) / 1.5, max(values) * 1.5)
    ax.set_ylim(min(values) / 1.5, max(values) * 1.5)
    xs = sorted(position.values())
    if square:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("n (square n x n x n)")
    else:
        ax.set_xlabel("problem (M x N x K), in order of FLOPs")
    # A label for every problem of a sweep of thousands would overlap and take minutes to
    # lay out: at most SWEEP_TICKS of them, evenly spread, the first and last among them.
    shown = sorted({round(i * (len(xs) - 1) / (SWEEP_TICKS - 1))
                    for i in range(SWEEP_TICKS)}) if len(xs) > SWEEP_TICKS else range(len(xs))
    ticks = [xs[i] for i in shown]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    labels = [str(dict(problems[i])["m"]) if square else label_of(dict(problems[i]))
              for i in shown]
    ax.set_xticks(ticks, labels, rotation=0 if square else 20)
    ax.set_ylabel(f"{unit}, kernel only (median)")
    ax.grid(alpha=0.3)
    if missing:
        ax.set_title((title or "throughput against size")
                     + f"  ({len(missing)} results without a valid time are not drawn)",
                     fontsize=11, loc="left")
    else:
        ax.set_title(title or "throughput against size", fontsize=11, loc="left")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


# ---------------------------------------------------------------- transfers
def has_transfers(record: dict) -> bool:
    """Whether the record timed host-device copies (device backends). OpenCL on a CPU
    (PoCL) copies within host memory: microseconds that say nothing of a bus."""
    if str((record.get("info") or {}).get("device_type", "")).upper() == "CPU":
        return False
    return record.get("status") == "ok" and bool((record.get("h2d_ms") or {}).get("samples"))


def transfer_chart(group: list[dict], title: str = "") -> Figure | None:
    """Where the time goes between host and device: h2d, kernel and d2h stacked per kernel,
    with kernel-only and host-to-host throughput; pageable against pinned copy bandwidth
    beside it when the run recorded both. None when no kernel timed transfers."""
    rows = [r for r in group if has_transfers(r)]
    if not rows:
        return None
    scale, unit = _unit(rows)
    left_out = [r for r in group if r["status"] != "ok" and r["backend"] in {x["backend"]
                                                                            for x in rows}]
    pinned = next((r["transfers"] for r in rows if isinstance(r.get("transfers"), dict)
                   and r["transfers"]), None)
    fig = _figure(12.0 if pinned else 10.0, 1.6 + 0.42 * len(rows))
    if pinned:
        ax, bx = fig.subplots(1, 2, width_ratios=[3, 1])
    else:
        ax, bx = fig.add_subplot(), None
    y = list(range(len(rows)))[::-1]
    parts = [("h2d_ms", "h2d (A, B)", "#ff7f0e"), ("kernel_ms", "kernel", "#1f77b4"),
             ("d2h_ms", "d2h (C)", "#9467bd")]
    totals = []
    for pos, r in zip(y, rows):
        left = 0.0
        for key, label, colour in parts:
            value = (r.get(key) or {}).get("median") or 0.0
            ax.barh(pos, value, left=left, color=colour, label=label if pos == y[0] else None)
            left += value
        totals.append(left)
        kernel_only, h2h = r.get("gflops"), r.get("host_gflops")
        if _finite(kernel_only) and _finite(h2h):
            ax.text(left * 1.02, pos, f"{_fmt_value(kernel_only / scale)} {unit} kernel only, "
                    f"{_fmt_value(h2h / scale)} host-to-host", va="center", fontsize=8)
    ax.set_xlim(0, max(totals) * 1.9)
    ax.set_yticks(y)
    ax.set_yticklabels([r["kernel"] for r in rows], fontsize=9)
    ax.set_xlabel("ms (medians): h2d + kernel + d2h")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    note = f" ({len(left_out)} kernels without a valid time not shown)" if left_out else ""
    ax.set_title((title or label_of(group[0]["problem"])) + note, fontsize=11, loc="left")
    if bx is not None and pinned is not None:
        kinds = [k for k in ("pageable", "pinned") if isinstance(pinned.get(k), dict)]
        for j, (key, colour) in enumerate((("h2d_gbps", "#ff7f0e"), ("d2h_gbps", "#9467bd"))):
            values = [pinned[k].get(key) or 0.0 for k in kinds]
            bx.bar([i + 0.38 * j for i in range(len(kinds))], values, width=0.36,
                   color=colour, label=key.split("_")[0])
            for i, v in enumerate(values):
                bx.text(i + 0.38 * j, v, f"{v:.3g}", ha="center", va="bottom", fontsize=8)
        bx.set_xticks([i + 0.19 for i in range(len(kinds))], kinds)
        bx.set_ylabel("GB/s")
        bx.set_title("host memory", fontsize=10)
        bx.set_ylim(0, 1.3 * max(pinned[k].get(key) or 0.0 for k in kinds
                                 for key in ("h2d_gbps", "d2h_gbps")) or 1.0)
        bx.legend(fontsize=8, loc="upper left", ncols=2)
    return fig


# ---------------------------------------------------------------- summary
def best_of_backends(records: list[dict]) -> list[tuple[str, dict | None, dict | None]]:
    """Per backend: its fastest ok rung (references aside) and its reference, on one problem."""
    out = []
    for backend in in_ladder_order(r["backend"] for r in records):
        mine = [r for r in records if r["backend"] == backend and r["status"] == "ok"
                and _finite(r.get("gflops"))]
        rungs = [r for r in mine if not (BY_ID.get(r["kernel"]) and BY_ID[r["kernel"]].reference)]
        refs = [r for r in mine if BY_ID.get(r["kernel"]) and BY_ID[r["kernel"]].reference]
        if rungs or refs:
            out.append((backend, max(rungs, key=lambda r: r["gflops"], default=None),
                        max(refs, key=lambda r: r["gflops"], default=None)))
    return out


def summary_chart(records: list[dict], title: str = "") -> Figure | None:
    """The best kernel of each backend against sequential C (cpu.seq_naive), per problem:
    bars of throughput labelled with the kernel and its speedup; vendor references as
    black diamonds. None when nothing ran ok."""
    groups = [g for g in group_by_problem(records).values()
              if any(r["status"] == "ok" for r in g)]
    if not groups:
        return None
    groups.sort(key=lambda g: size_key(g[0]["problem"]))
    scale, unit = _unit(records)
    backends = in_ladder_order(r["backend"] for r in records)
    slots = ["seq"] + backends
    width = 0.8 / len(slots)
    fig = _figure(max(8.0, 2.2 + 1.2 * len(groups) * len(slots)), 5.5)
    ax = fig.add_subplot()
    values = []
    for gi, group in enumerate(groups):
        seq = next((r for r in group if r["kernel"] == BASELINE_ID and r["status"] == "ok"), None)
        best = {b: (rung, ref) for b, rung, ref in best_of_backends(group)}
        for si, slot in enumerate(slots):
            x = gi + (si - (len(slots) - 1) / 2) * width
            if slot == "seq":
                record, colour, ref = seq, "#bbbbbb", None
            else:
                record, ref = best.get(slot, (None, None))
                colour = _colour(slot)
            if record is not None:
                value = record["gflops"] / scale
                values.append(value)
                noisy = bool(record.get("noisy"))
                ax.bar(x, value, width=width * 0.92, color=colour, alpha=0.55 if noisy else 1.0,
                       hatch="///" if noisy else None, edgecolor="black" if noisy else colour)
                # The name runs up inside the bar, the speedup sits above it: neither can
                # reach a neighbour, however many bars stand side by side.
                ax.text(x, 0.02, record["kernel"].split(".", 1)[-1], rotation=90,
                        ha="center", va="bottom", fontsize=7.5,
                        transform=ax.get_xaxis_transform(),
                        bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.8,
                              "alpha": 0.75})
                if seq is not None and slot != "seq":
                    top = max(value, ref["gflops"] / scale if ref is not None else 0.0)
                    ax.text(x, top * 1.12, _times(seq["kernel_ms"]["median"]
                                                  / record["kernel_ms"]["median"]),
                            ha="center", va="bottom", fontsize=7.5)
            else:
                ax.text(x, 0, "none ok", ha="center", va="bottom", fontsize=7, rotation=90,
                        color="#7f7f7f", transform=ax.get_xaxis_transform())
            if ref is not None:
                values.append(ref["gflops"] / scale)
                ax.plot([x], [ref["gflops"] / scale], marker="D", color="black", markersize=6)
    if not values:
        return None
    ax.set_yscale("log")
    lo, hi = min(values) / 2, max(values) * 4
    ax.set_ylim(lo, hi)
    _log_ticks(ax, "y", lo, hi)
    ax.set_xticks(range(len(groups)), [label_of(g[0]["problem"]) for g in groups])
    ax.set_ylabel(f"{unit}, kernel only (median)")
    handles = [ax.bar([0], [0], color="#bbbbbb", label=f"{BASELINE_ID} (sequential C)")]
    handles += [ax.bar([0], [0], color=_colour(b), label=f"best {_title(b)} rung")
                for b in backends]
    ax.plot([], [], "D", color="black", label="vendor reference (OpenBLAS, CLBlast, cuBLAS)")
    if any(r.get("noisy") for r in records if r["status"] == "ok"):
        ax.bar([0], [0], color="white", hatch="///", edgecolor="black", label="hatched: noisy")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(title or "best of each backend against sequential C (x: speedup over it)",
                 fontsize=11, loc="left")
    return fig


# ---------------------------------------------------------------- machines
def machines_chart(by_machine: dict[str, list[dict]], title: str = "") -> Figure | None:
    """The same ladder on several machines: grouped horizontal bars, one colour per
    machine, kernels in ladder order. None with fewer than two machines with ok rows."""
    machines = [m for m, rows in by_machine.items() if any(r["status"] == "ok" for r in rows)]
    if len(machines) < 2:
        return None
    order = ladder_rank()
    kernels = sorted({r["kernel"] for m in machines for r in by_machine[m]},
                     key=lambda k: order.get(k, 999))
    all_ok = [r for m in machines for r in by_machine[m] if r["status"] == "ok"]
    scale, unit = _unit(all_ok)
    fig = _figure(10.0, 1.6 + 0.25 * len(kernels) * len(machines))
    ax = fig.add_subplot()
    height = 0.8 / len(machines)
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"]
    values = [r["gflops"] / scale for r in all_ok if _finite(r.get("gflops")) and r["gflops"] > 0]
    lo = min(values) / 3 if values else 0.1
    for mi, machine in enumerate(machines):
        rows = {r["kernel"]: r for r in by_machine[machine]}
        for ki, kernel in enumerate(kernels):
            y = len(kernels) - 1 - ki + ((len(machines) - 1) / 2 - mi) * height
            r = rows.get(kernel)
            if r is None:
                continue
            if r["status"] == "ok" and _finite(r.get("gflops")) and r["gflops"] > 0:
                value = r["gflops"] / scale
                ax.barh(y, value, height=height * 0.9, color=palette[mi % len(palette)],
                        label=machine if ki == 0 or not ax.get_legend_handles_labels()[1]
                        .count(machine) else None)
                ax.text(value * 1.05, y, _fmt_value(value), va="center", fontsize=7)
            else:
                ax.text(lo * 1.1, y, f"{machine}: {r['status']}", va="center", fontsize=7,
                        color=_MISSING_COLOUR.get(r["status"], "#7f7f7f"), style="italic")
    ax.set_xscale("log")
    hi = max(values) * 3 if values else 10.0
    ax.set_xlim(lo, hi)
    _log_ticks(ax, "x", lo, hi)
    ax.set_yticks(range(len(kernels))[::-1], kernels, fontsize=9)
    ax.set_xlabel(f"{unit}, kernel only (median)")
    ax.grid(axis="x", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), fontsize=8, loc="lower right")
    ax.set_title(title or "machines side by side", fontsize=11, loc="left")
    return fig


def plot(records: list[dict], out_dir: Path) -> list[Path]:
    """PNG figures for ``--plots``: each problem's ladder (``ladder_<i>.png``), throughput
    against size when several sizes ran (``sweep.png``) and the best of each backend
    (``summary.png``), drawn as in the HTML report. Returns the paths written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    figures: list[tuple[Figure | None, str]] = [
        (ladder_chart(group, title=label_of(group[0]["problem"])), f"ladder_{i}")
        for i, group in enumerate(group_by_problem(records).values())]
    figures += [(sweep_chart(records), "sweep"), (summary_chart(records), "summary")]
    written = []
    for fig, name in figures:
        if fig is not None:
            written.append(write_figure(fig, out_dir / f"{name}.png", format="png", dpi=110))
    return written


# ---------------------------------------------------------------- roofline
def roofline_chart(records: list[dict], title: str = "") -> Figure | None:
    """Each verified row of one device at its arithmetic intensity (FLOP per byte moved)
    and throughput, under its roof: the measured copy bandwidth x intensity up to the
    FP32 peak (:mod:`mmsuite.roof`). A roof per distinct (bandwidth, peak) pair (thread
    counts differ); the fastest row of each backend on each problem is labelled with its
    kernel, problem and % roof (the tables give every row's). None when no row has a roof."""
    ok = [r for r in records if r["status"] == "ok" and _finite(r.get("intensity"))
          and _finite(r.get("bandwidth_gbs")) and _finite(r.get("gflops"))]
    if not ok:
        return None
    scale, unit = _unit(ok)
    fig = _figure(10.0, 6.0)
    ax = fig.add_subplot()
    intensities = [r["intensity"] for r in ok]
    lo, hi = min(intensities) / 3, max(intensities) * 3
    roofs = sorted({(r["bandwidth_gbs"], r.get("peak_gflops")) for r in ok},
                   key=lambda roof: (roof[0], roof[1] or 0.0))
    ceilings = []
    for bandwidth, peak in roofs:
        if _finite(peak):
            ridge = peak / bandwidth  # where the memory roof meets the FLOP roof
            hi = max(hi, ridge * 3)
            xs = [lo, ridge, hi] if lo < ridge < hi else [lo, hi]
        else:
            xs = [lo, hi]
        ys = [min(bandwidth * x, peak if _finite(peak) else math.inf) / scale for x in xs]
        ceilings += ys
        ax.plot(xs, ys, color="#444444", lw=1.6,
                label=f"roof: {bandwidth:.3g} GB/s" + (f", {_fmt_value(peak / scale)} {unit}"
                                                       if _finite(peak) else ""))
    fastest: dict[tuple, dict] = {}
    for r in ok:
        key = (r["backend"], tuple(sorted(r["problem"].items())))
        if key not in fastest or r["gflops"] > fastest[key]["gflops"]:
            fastest[key] = r
    for r in ok:
        x, y = r["intensity"], r["gflops"] / scale
        colour = _colour(r["backend"])
        noisy = bool(r.get("noisy"))
        ax.plot([x], [y], "o", color=colour, markerfacecolor="white" if noisy else colour,
                markersize=7)
        if r is not fastest[(r["backend"], tuple(sorted(r["problem"].items())))]:
            continue
        ax.annotate(f"{r['kernel']} {label_of(r['problem'])}"
                    + (f" {r['pct_roof']:.0f}%" if _finite(r.get("pct_roof")) else ""),
                    (x, y), textcoords="offset points", xytext=(5, 3), fontsize=7)
    for backend in in_ladder_order(r["backend"] for r in ok):
        ax.plot([], [], "o", color=_colour(backend), label=_title(backend))
    if any(r.get("noisy") for r in ok):
        ax.plot([], [], "o", markerfacecolor="white", markeredgecolor="black",
                label="hollow: noisy")
    values = [r["gflops"] / scale for r in ok] + [c for c in ceilings if c > 0]
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(min(values) / 2, max(values) * 2)
    _log_ticks(ax, "x", lo, hi)
    _log_ticks(ax, "y", min(values) / 2, max(values) * 2)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of A, B and C moved)")
    ax.set_ylabel(f"kernel {unit}")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize="small", loc="lower right")
    ax.set_title(title or "roofline")
    return fig
