"""The published report: ``DIR/index.html``, ``DIR/report.md``, ``DIR/results.csv`` and the
figures under ``DIR/figures/`` (SVG and PNG), from one or more result files.

Result files from several machines, sizes and commits merge: every record is labelled
with the machine it ran on (its GPU, else its CPU, from the file's environment). Where
two files hold the same kernel x problem on the same machine, the newer file's row is
kept. ``index.html`` is self-contained (figures inlined as SVG, styles inline, no
network reference); ``report.md`` links the PNGs beside it.

The report is built as a list of blocks (headings, paragraphs, tables, figures) that
render to HTML and to Markdown alike, so both say the same.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from . import charts
from .backend_table import HOST_BACKEND, in_ladder_order
from .catalogue import BASELINE_ID, BY_ID
from .environment_table import environment_table, max_load
from .load import contention_footnote, distortion_warning
from .problem import label_of
from .report import (
    TERMINAL_ROWS,
    flops_scale,
    fmt,
    group_by_problem,
    ladder_table,
    table_rows,
    unavailable_by_reason,
)
from .results import write_atomically
from .results_csv import write_csv
from .runs import Run, by_machine, load_runs, merge, problem_key

if TYPE_CHECKING:
    from rich.console import Console

FIGURES = "figures"


def render_terminal(paths: list[Path], console: Console, wide: bool = False,
                    limit: int | None = TERMINAL_ROWS) -> None:
    """The ladder tables of merged result files, one set per machine; each machine's
    tables until ``limit`` rows (None: all), the rest counted in a line."""
    from .report import render_rich

    machines = by_machine(merge(load_runs([Path(p) for p in paths])))
    for machine, records in machines.items():
        render_rich(records, console, wide=wide, limit=limit,
                    title_suffix=f" on {machine}" if len(machines) > 1 else "")


# ---------------------------------------------------------------- blocks
@dataclass
class Heading:
    level: int
    text: str


@dataclass
class Para:
    text: str
    pre: bool = False


@dataclass
class TableBlock:
    headers: list[str]
    rows: list[list[str]]
    justify: list[str] = field(default_factory=list)
    caption: str = ""
    styles: list[str] = field(default_factory=list)  # a status per row, for colour
    notes: list[str] = field(default_factory=list)  # what "[1]", "[2]" in cells stand for


@dataclass
class FigureBlock:
    name: str  # figures/<name>.svg and .png
    caption: str


Block = Heading | Para | TableBlock | FigureBlock


def _slug(*parts: str) -> str:
    text = "-".join(parts).lower()
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")[:80]


# ---------------------------------------------------------------- content
#: Problems drawn in figures of their own (ladder, transfers, machines) and in the summary
#: chart. A sweep of thousands of problems would otherwise draw for many minutes and a
#: summary chart thousands of bars wide; its tables and the charts of throughput against
#: size still show every problem.
FIGURED_PROBLEMS = 12


def figured_problems(records: list[dict]) -> set[tuple]:
    """The ``problem_key`` of at most ``FIGURED_PROBLEMS`` problems, spread evenly over the
    sizes, the smallest and the largest among them: every problem where there are few."""
    keys = sorted({problem_key(r): r["problem"] for r in records}.items(),
                  key=lambda item: charts.size_key(item[1]))
    if len(keys) <= FIGURED_PROBLEMS:
        return {key for key, _ in keys}
    step = (len(keys) - 1) / (FIGURED_PROBLEMS - 1)
    return {keys[round(i * step)][0] for i in range(FIGURED_PROBLEMS)}


def _figured_note(records: list[dict]) -> Para | None:
    problems = len({problem_key(r) for r in records})
    if problems <= FIGURED_PROBLEMS:
        return None
    return Para(f"Figures of single problems are drawn for {FIGURED_PROBLEMS} of the "
                f"{problems} problems, spread evenly over the sizes (the smallest and the "
                "largest among them); every problem has its table, and the charts of "
                "throughput against size show them all.")


def _by_backend(records: list[dict]) -> dict[str, list[dict]]:
    return {backend: [r for r in records if r["backend"] == backend]
            for backend in in_ladder_order(r["backend"] for r in records)}


def _is_reference(kernel_id: str) -> bool:
    kernel = BY_ID.get(kernel_id)
    return kernel is not None and kernel.reference


class _Figures:
    """Saves figures and remembers them in the order written."""

    def __init__(self, out_dir: Path) -> None:
        self.dir = out_dir / FIGURES
        self.written: list[Path] = []

    def add(self, fig, name: str, caption: str) -> FigureBlock | None:
        if fig is None:
            return None
        svg, png = charts.save(fig, self.dir, name)
        self.written += [svg, png]
        return FigureBlock(name, caption)


#: How to read the ladder and transfer figures, said once above them.
LADDER_FIGURES = ("Each ladder figure: kernel-only throughput per rung (error bar: slowest to "
                  "fastest sample), speedup over the parent rung and the base; the reference "
                  "as a dashed line, the FP32 peak dotted where it lies near the data, else "
                  "named in the legend; kernels without a valid time are marked, not drawn as "
                  "bars. Each transfer figure: h2d, kernel and d2h medians stacked per device "
                  "kernel, with kernel-only and host-to-host throughput.")


def _ladder_blocks(records: list[dict], figures: _Figures, machine: str,
                   several_machines: bool) -> list[Block]:
    blocks: list[Block] = []
    figured = figured_problems(records)
    for group in sorted(group_by_problem(records).values(),
                        key=lambda g: charts.size_key(g[0]["problem"])):
        label = label_of(group[0]["problem"])
        drawn = problem_key(group[0]) in figured
        blocks.append(Heading(3, label + (f" on {machine}" if several_machines else "")))
        # Kernels that could not run here are no rows: one line a reason names them.
        ran = [r for r in group if r["status"] != "unavailable"]
        if ran:
            headers, justify, cells, caption, notes = ladder_table(ran)
            blocks.append(TableBlock(headers, cells, justify, caption,
                                     ["contended" if r["contended"] and r["status"] == "ok"
                                      else r["status"] for r in table_rows(ran)], notes))
            contention = contention_footnote(ran)
            if contention:
                blocks.append(Para(contention))
        blocks += [Para(line) for line in unavailable_lines(group)]
        derived = {r["kernel"]: r for r in table_rows(ran)}
        for backend, mine in _by_backend(ran).items() if drawn else ():
            refs = {derived[r["kernel"]]["ref"] for r in mine} - {None}
            # A stand-in reference from another backend (OpenBLAS for OpenCL on a CPU).
            extra = [r for r in ran if r["kernel"] in refs and r["backend"] != backend]
            title = f"{backend} ladder, {label}" + (f", {machine}" if several_machines else "")
            fig = charts.ladder_chart(mine + extra, title=title, context=ran)
            block = figures.add(fig, _slug("ladder", machine, backend, label),
                                f"The {backend} ladder on {label}.")
            if block:
                blocks.append(block)
        transfers = charts.transfer_chart(ran, title=f"transfers, {label}") if drawn else None
        block = figures.add(transfers, _slug("transfers", machine, label),
                            f"Host-device transfers on {label}.")
        if block:
            blocks.append(block)
    return blocks


def unavailable_lines(records: list[dict]) -> list[str]:
    """The kernels that could not run, one line a reason: how many, the reason once, their
    ids (29 CUDA kernels without CuPy are one line, not 29 rows)."""
    return [f"{len(mine)} {'kernel' if len(mine) == 1 else 'kernels'} unavailable: {reason} "
            f"\N{EM DASH} {', '.join(r['kernel'] for r in mine)}"
            for reason, mine in unavailable_by_reason(records).items()]


def _sweep_blocks(records: list[dict], figures: _Figures, machine: str) -> list[Block]:
    blocks: list[Block] = []
    for backend, mine in _by_backend(records).items():
        own_refs_ok = any(_is_reference(r["kernel"]) and r["status"] == "ok" for r in mine)
        extra = [] if own_refs_ok or backend == HOST_BACKEND.name else \
            [r for r in records if r["kernel"] == HOST_BACKEND.reference]
        fig = charts.sweep_chart(mine + extra, title=f"{backend}: throughput against size")
        block = figures.add(fig, _slug("sweep", machine, backend),
                            f"{backend} kernels across problem sizes on {machine} "
                            "(kernel-only throughput; references dashed).")
        if block:
            blocks.append(block)
    return blocks


def _baseline_blocks(baseline: Path, runs: list[Run]) -> list[Block]:
    from . import compare

    blocks: list[Block] = [Heading(2, f"Against the baseline {baseline.name}")]
    blocks.append(Para("Verdicts from mmsuite compare: a two-sided Mann-Whitney U test on the "
                       "kernel-time samples and the ratio of medians, against a 5% threshold."))
    for run in runs:
        try:
            result = compare.compare(baseline, run.path)
        except ValueError as exc:
            blocks.append(Para(f"{run.path.name}: not compared: {exc}"))
            continue
        rows = [compare.cells(row) for row in result.rows]
        blocks.append(TableBlock(list(compare.HEADERS), rows,
                                 ["left", "left"] + ["right"] * 6 + ["left"],
                                 f"{run.path.name} (NEW) against {baseline.name} (BASE): "
                                 + compare.summary(result, compare.DEFAULT_THRESHOLD),
                                 [_verdict_style(row.verdict) for row in result.rows]))
        for line in compare.missing_lines(result) + result.notes:
            blocks.append(Para(line))
    return blocks


def _roofline_blocks(records: list[dict], figures: _Figures) -> list[Block]:
    """A roofline chart per machine and device whose rows have a roof (mmsuite.roof)."""
    devices: dict[tuple[str, str], list[dict]] = {}
    for r in records:
        if r.get("roof_device") and r["status"] == "ok":
            devices.setdefault((r.get("machine", ""), str(r["roof_device"])), []).append(r)
    blocks: list[Block] = []
    for (machine, device), mine in devices.items():
        block = figures.add(charts.roofline_chart(mine, title=f"roofline, {device}"),
                            _slug("roofline", machine, device),
                            f"On {machine}, {device}: each verified row at its arithmetic "
                            "intensity (FLOPs over the bytes of A, B and C, C twice with "
                            "beta != 0, and a split plan's workspace) under its roof, "
                            "min(FP32 peak, copy-probe bandwidth x intensity); the label gives "
                            "% roof. Rows whose inputs stay in cache can pass the memory roof.")
        if block:
            blocks.append(block)
    return blocks


def _verdict_style(verdict: str) -> str:
    return {"slower": "failed", "broken": "failed", "unsure": "noisy"}.get(verdict, "ok")


def _history_blocks(asv_dir: Path, records: list[dict], figures: _Figures) -> list[Block]:
    from . import history

    blocks: list[Block] = [Heading(2, "History across commits (asv)")]
    data = history.load_history(asv_dir)
    present = {r["kernel"] for r in records}
    known = history.kernel_ids(data, metric="kernel_ms")
    for backend in in_ladder_order(k.split(".", 1)[0] for k in known):
        ids = [k for k in known if k.split(".", 1)[0] == backend and (k in present or not present)]
        if not ids:
            continue
        fig = history.history_figure(data, ids, "kernel_ms")
        block = figures.add(fig, _slug("history", backend),
                            f"{backend} kernels' kernel time across commits, from asv's results "
                            "(lower is better; x: the benchmark failed at that commit).")
        if block:
            blocks.append(block)
        text = history.summary(data, ids, "kernel_ms")
        if text:
            blocks.append(Para(text, pre=True))
    if len(blocks) == 1:
        blocks.append(Para(f"No kernel_ms history for these kernels in {asv_dir}."))
    return blocks


def best_rows(records: list[dict]) -> tuple[list[list[str]], str]:
    """Per problem and backend: the fastest ok rung, its time, throughput, speedup over
    cpu.seq_naive and % of the reference, as table cells; and the throughput's unit."""
    scale, unit = flops_scale(max((r.get("gflops") or 0.0 for r in records
                                   if r["status"] == "ok"), default=0.0))
    out = []
    for group in sorted(group_by_problem(records).values(),
                        key=lambda g: charts.size_key(g[0]["problem"])):
        derived = {r["kernel"]: r for r in table_rows(group)}
        base = derived.get(BASELINE_ID)
        base_ms = base["kernel_ms"] if base and base["status"] == "ok" else None
        for backend, rung, _ in charts.best_of_backends(group):
            if rung is None:
                continue
            row = derived[rung["kernel"]]
            ms = row["kernel_ms"]
            # Marked as the ladder tables mark them: * a time others distorted, ? a ratio on one.
            x_base = base_ms / ms if base_ms and ms else None
            unsure = row["contended"] or (base is not None and base["contended"])
            out.append([label_of(group[0]["problem"]), backend, rung["kernel"],
                        fmt("kernel_ms", ms) + ("*" if row["contended"] else ""),
                        fmt("gflops", row["gflops"], scale),
                        fmt("x_base", x_base) + ("?" if unsure and x_base else ""),
                        fmt("pct_ref", row["pct_ref"])
                        + ("?" if "pct_ref" in row["unsure"] else ""), row["ref"] or "-"])
    return out, unit


def report_blocks(runs: list[Run], records: list[dict], figures: _Figures,
                  baseline: Path | None = None, asv_dir: Path | None = None) -> list[Block]:
    """The whole report as blocks, in reading order."""
    machines = by_machine(records)
    several = len(machines) > 1
    problems = {problem_key(r) for r in records}
    blocks: list[Block] = [Heading(1, "mmsuite SGEMM report")]
    blocks.append(Para(
        f"{len(records)} results ({len({r['kernel'] for r in records})} kernels, "
        f"{len(problems)} problems) from {len(runs)} result file(s), on "
        + "; ".join(machines) + ". Throughput is 2·M·N·K·batch over the median kernel-only "
        "time; x parent is the speedup over the rung a kernel improves on, x base over "
        "cpu.seq_naive (else the backend's first rung); % ref is the reference's time "
        "over the kernel's; noise is 1.4826·MAD/median of the samples."))
    status_counts: dict[str, int] = {}
    for r in records:
        status_counts[r["status"]] = status_counts.get(r["status"], 0) + 1
    noisy = sum(1 for r in records if r["status"] == "ok" and r.get("noisy"))
    blocks.append(Para(
        "Statuses: " + ", ".join(f"{n} {s}" for s, n in sorted(status_counts.items()))
        + (f"; {noisy} of the ok results are noisy (their noise stayed above the sampling "
           "target; marked ! in tables, hatched or hollow in figures)" if noisy else "")
        + "."))

    for run in runs:
        distorted = distortion_warning(run.records)
        if distorted:
            blocks.append(Para(f"Warning: {run.path.name}: {distorted}; its rows are marked * "
                               "in the ladder tables."))
        worst = max_load(run.records)
        cores = run.environment.get("cpu_cores")
        if worst is not None and cores and worst > cores:
            blocks.append(Para(
                f"Warning: {run.path.name} was measured while the 1-minute load average "
                f"reached {worst:.1f} on {cores} cores: other processes competed for the "
                "CPU, so host times (multi-threaded kernels above all) are unreliable."))
    blocks.append(Heading(2, "Where it ran"))
    # One column per machine, so that several machines read side by side.
    columns = {m: dict((k, v) for k, v in environment_table([r for r in runs
                                                              if r.machine == m]))
               for m in machines}
    keys: list[str] = []
    for values in columns.values():
        keys += [k for k in values if k not in keys]
    blocks.append(TableBlock(["what"] + list(machines),
                             [[k] + [columns[m].get(k, "-") for m in machines] for k in keys],
                             ["left"] * (1 + len(machines)),
                             "environment recorded in " + ", ".join(r.path.name for r in runs)))

    blocks.append(Heading(2, "Best of each backend against sequential C"))
    note = _figured_note(records)
    if note is not None:
        blocks.append(note)
    for machine, mine in machines.items():
        figured = figured_problems(mine)
        block = figures.add(charts.summary_chart([r for r in mine if problem_key(r) in figured],
                                                 title=f"best of each backend against "
                                                 f"sequential C, {machine}"),
                            _slug("summary", machine),
                            f"On {machine}: the fastest rung of each backend and the "
                            "sequential C baseline (cpu.seq_naive), per problem, with the "
                            "speedup over it; vendor references as black diamonds.")
        if block:
            blocks.append(block)
        rows, unit = best_rows(mine)
        if rows:
            blocks.append(TableBlock(
                ["problem", "backend", "best rung", "ms", unit, "x cpu.seq_naive",
                 "% ref", "reference"], rows, ["left"] * 3 + ["right"] * 4 + ["left"],
                f"On {machine}: the fastest verified rung of each backend (references aside); "
                "% ref as in the ladder tables."))

    if several:
        blocks.append(Heading(2, "Machines side by side"))
        before = len(blocks)
        figured = figured_problems(records)
        for backend, mine in _by_backend(records).items():
            for group in group_by_problem(mine).values():
                if problem_key(group[0]) not in figured:
                    continue
                per_machine = by_machine(group)
                label = label_of(group[0]["problem"])
                block = figures.add(charts.machines_chart(per_machine,
                                                          title=f"{backend}, {label}"),
                                    _slug("machines", backend, label),
                                    f"The {backend} ladder on {label} on each machine.")
                if block:
                    blocks.append(block)
        if len(blocks) == before:
            blocks.append(Para("No problem ran on more than one machine: there is nothing to "
                               "set side by side."))

    roofs = _roofline_blocks(records, figures)
    if roofs:
        blocks.append(Heading(2, "Against the roof"))
        blocks += roofs

    sweeps = [b for machine, mine in machines.items() for b in _sweep_blocks(mine, figures,
                                                                               machine)]
    if sweeps:
        blocks.append(Heading(2, "Throughput against size"))
        blocks += sweeps

    for machine, mine in machines.items():
        blocks.append(Heading(2, f"Ladders on {machine}" if several else "Ladders"))
        if machine == next(iter(machines)):
            blocks.append(Para(LADDER_FIGURES))  # once, not under every figure
        blocks += _ladder_blocks(mine, figures, machine, several)

    if baseline is not None:
        blocks += _baseline_blocks(baseline, runs)
    if asv_dir is not None:
        blocks += _history_blocks(asv_dir, records, figures)
    return blocks


# ---------------------------------------------------------------- rendering
_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2em auto;
       max-width: 1200px; padding: 0 1em; color: #222; line-height: 1.45; }
h1 { font-size: 1.7em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em;
margin-top: 2em; }
table { border-collapse: collapse; margin: .8em 0; font-size: .85em; }
th, td { border: 1px solid #ddd; padding: .25em .4em; vertical-align: top; }
th { background: #f3f3f3; } td.r { text-align: right; font-variant-numeric: tabular-nums; }
td.r, td:first-child { white-space: nowrap; }  /* 1.2e-07 and kernel ids stay whole */
tr.failed td, tr.error td, tr.invalid td { color: #b00020; }
tr.unavailable td { color: #888; } tr.noisy td { background: #fff8e1; }
tr.contended td { background: #fdecea; }
caption { caption-side: bottom; text-align: left; color: #555; font-size: .9em;
          padding-top: .3em; }
figure { margin: 1.2em 0; } figure svg { max-width: 100%; height: auto; }
figcaption { color: #555; font-size: .9em; }
div.scroll { overflow-x: auto; } ul.toc { columns: 2; font-size: .9em; }
ul.toc li.l3 { margin-left: 1.2em; list-style: circle; }
ol.notes { font-size: .85em; color: #444; margin-top: 0; }
pre { background: #f7f7f7; padding: .6em; overflow-x: auto; font-size: .85em; }
"""


def _inline_svg(path: Path) -> str:
    """An SVG file as markup to put inside HTML: no XML prolog, DOCTYPE or metadata."""
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"<\?xml[^>]*\?>", "", text)
    text = re.sub(r"<!DOCTYPE[^>]*>", "", text)
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.DOTALL)
    return text.strip()


def render_html(blocks: list[Block], figures_dir: Path) -> str:
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           "<title>mmsuite SGEMM report</title>", f"<style>{_CSS}</style></head><body>"]
    esc = html.escape
    anchors = {id(b): f"s{i}" for i, b in enumerate(blocks) if isinstance(b, Heading)}
    toc = [b for b in blocks if isinstance(b, Heading) and b.level in (2, 3)]
    for block in blocks:
        if isinstance(block, Heading):
            out.append(f'<h{block.level} id="{anchors[id(block)]}">{esc(block.text)}'
                       f"</h{block.level}>")
            if block.level == 1 and toc:
                # Contents: in-page links only.
                out.append('<nav><details open><summary>Contents</summary><ul class="toc">'
                           + "".join(f'<li class="l{b.level}"><a href="#{anchors[id(b)]}">'
                                     f"{esc(b.text)}</a></li>" for b in toc)
                           + "</ul></details></nav>")
        elif isinstance(block, Para):
            out.append(f"<pre>{esc(block.text)}</pre>" if block.pre
                       else f"<p>{esc(block.text)}</p>")
        elif isinstance(block, TableBlock):
            out.append('<div class="scroll"><table>')
            if block.caption:
                out.append(f"<caption>{esc(block.caption)}</caption>")
            out.append("<thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in block.headers)
                       + "</tr></thead><tbody>")
            for i, row in enumerate(block.rows):
                style = block.styles[i] if i < len(block.styles) else ""
                if style == "ok" and any(c.endswith("!") for c in row):
                    style = "noisy"
                cells = "".join(
                    f'<td class="r">{esc(c)}</td>' if i_c < len(block.justify)
                    and block.justify[i_c] == "right" else f"<td>{esc(c)}</td>"
                    for i_c, c in enumerate(row))
                out.append(f'<tr class="{esc(style)}">{cells}</tr>')
            out.append("</tbody></table></div>")
            if block.notes:
                out.append('<ol class="notes">' + "".join(f"<li>{esc(n)}</li>"
                                                          for n in block.notes) + "</ol>")
        elif isinstance(block, FigureBlock):
            svg = _inline_svg(figures_dir / f"{block.name}.svg")
            out.append(f'<figure id="{esc(block.name)}">{svg}'
                       f"<figcaption>{esc(block.caption)}</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def render_md(blocks: list[Block]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    out: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            out += ["#" * block.level + " " + block.text, ""]
        elif isinstance(block, Para):
            out += (["```", block.text, "```", ""] if block.pre else [block.text, ""])
        elif isinstance(block, TableBlock):
            out.append("| " + " | ".join(cell(h) for h in block.headers) + " |")
            out.append("|" + "|".join("---:" if j == "right" else "---" for j in
                                      (block.justify or ["left"] * len(block.headers))) + "|")
            out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in block.rows]
            out.append("")
            out += [f"{i}. {note}" for i, note in enumerate(block.notes, 1)]
            if block.notes:
                out.append("")
            if block.caption:
                out += [f"*{block.caption}*", ""]
        elif isinstance(block, FigureBlock):
            out += [f"![{block.name}]({FIGURES}/{block.name}.png)", "",
                    f"*{block.caption}* ([SVG]({FIGURES}/{block.name}.svg))", ""]
    return "\n".join(out)


def build(paths: list[Path], out_dir: Path, baseline: Path | None = None,
          asv_dir: Path | None = None) -> Path:
    """Write the report for ``paths`` into ``out_dir``; returns the path of index.html.

    Raises ValueError for an unreadable result file (naming it)."""
    runs = load_runs([Path(p) for p in paths])
    records = merge(runs)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = _Figures(out_dir)
    blocks = report_blocks(runs, records, figures, baseline=baseline, asv_dir=asv_dir)
    write_atomically(out_dir / "report.md", render_md(blocks))
    write_csv(records, out_dir / "results.csv")
    index = out_dir / "index.html"
    write_atomically(index, render_html(blocks, figures.dir))
    return index
