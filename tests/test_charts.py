"""The report's charts read cleanly: no label over another, axes fitted to the data with
the peak named in the legend, no transfer chart where nothing crossed a bus."""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from mmsuite import charts  # noqa: E402
from mmsuite.report import group_by_problem  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"
CPU = json.loads((FIXTURES / "report_cpu_opencl.json").read_text())["results"]
H100 = json.loads((FIXTURES / "report_h100_synthetic.json").read_text())["results"]


def _text_boxes(fig) -> list:
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return [(t.get_text(), t.get_window_extent(renderer)) for ax in fig.axes for t in ax.texts
            if t.get_text().strip() and t.get_visible()]


@pytest.mark.parametrize("records", [CPU, H100, CPU + H100], ids=["cpu", "h100", "both"])
def test_summary_labels_never_overlap(records) -> None:
    fig = charts.summary_chart(records)
    boxes = _text_boxes(fig)
    assert len(boxes) >= 3
    for (a, box_a), (b, box_b) in combinations(boxes, 2):
        assert not box_a.overlaps(box_b), f"{a!r} overlaps {b!r}"


def test_ladder_axis_fits_the_data_and_names_a_far_peak_in_the_legend() -> None:
    group = [json.loads(json.dumps(r)) for r in CPU if r["backend"] == "cpu"
             and r["problem"] == CPU[0]["problem"]]
    for record in group:  # a quiet machine: samples within 2% of the median
        median = record["kernel_ms"]["median"]
        record["kernel_ms"]["samples"] = [median * f for f in (0.99, 1.0, 1.0, 1.01, 1.02)]
    fig = charts.ladder_chart(group)
    ax = fig.axes[0]
    fastest = max(r["gflops"] for r in group if r["status"] == "ok")
    peak = group[0]["peak_gflops"]
    low, high = ax.get_xlim()
    assert high < peak and high < 20 * fastest  # was peak x 12: 5800 for data near 100
    legend = " ".join(t.get_text() for t in fig.legends[0].get_texts())
    assert "FP32 peak: 481 GFLOP/s (off the axis: " in legend
    # Every bar's label ends inside the axes.
    fig.canvas.draw()
    right = ax.get_window_extent().x1
    for text, box in _text_boxes(fig):
        assert box.x1 <= right + 1, text


def test_a_near_peak_is_drawn_as_a_line() -> None:
    group = [r for r in H100 if r["backend"] == "cuda"]
    group = next(g for g in group_by_problem(group).values()
                 if any(r["status"] == "ok" for r in g))
    ax = charts.ladder_chart(group).axes[0]
    assert any(line.get_linestyle() == ":" and line.get_xdata()[0] > 0 for line in ax.lines)


def test_no_transfer_chart_for_opencl_on_a_cpu() -> None:
    pocl = [r for r in CPU if r["backend"] == "opencl"]
    assert any((r.get("h2d_ms") or {}).get("samples") for r in pocl)  # timed, yet no bus
    assert charts.transfer_chart(pocl) is None
    gpu = [r for r in H100 if r["backend"] == "cuda"]
    assert charts.transfer_chart(gpu) is not None


def _sweep_of(problems: int) -> list[dict]:
    """cpu.seq_ikj's first fixture row, once per problem of a square sweep of ``problems``."""
    row = next(r for r in CPU if r["kernel"] == "cpu.seq_ikj" and r["status"] == "ok")
    rows = []
    for m in range(8, 8 + problems):
        copy = json.loads(json.dumps(row))
        copy["problem"] = {**copy["problem"], "m": m, "n": m, "k": m, "batch": 1}
        rows.append(copy)
    return rows


def test_a_sweep_of_hundreds_of_sizes_labels_a_few_of_them_first_and_last_included() -> None:
    fig = charts.sweep_chart(_sweep_of(300))
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert len(labels) == charts.SWEEP_TICKS
    assert labels[0] == "8" and labels[-1] == "307"
    few = [t.get_text() for t in charts.sweep_chart(_sweep_of(5)).axes[0].get_xticklabels()]
    assert few == ["8", "9", "10", "11", "12"]  # every size where there are few
