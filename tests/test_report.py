"""The ladder table's derived columns, from synthetic records with known times."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from mmsuite import Problem
from mmsuite.catalogue import BUILT_IN
from mmsuite.report import render_markdown, render_rich, table_rows, wrap_legend

FIXTURE = Path(__file__).parent / "fixtures" / "report_cpu_opencl.json"


def _record(kernel: str, backend: str, parent: str | None, ms: float | None,
            status: str = "ok", h2d: float = 0.0) -> dict:
    p = Problem(100, 100, 100)
    rec = {"kernel": kernel, "backend": backend, "parent": parent, "adds": "x",
           "problem": p.to_dict(), "status": status, "reason": "" if status == "ok" else "why"}
    if ms is not None:
        stats = {"median": ms, "min": ms, "max": ms, "spread": 0.0, "samples": [ms]}
        transfer = {**stats, "median": h2d, "samples": [h2d] if h2d else []}
        rec.update(kernel_ms=stats, h2d_ms=transfer, d2h_ms=transfer,
                   gflops=p.flops / (ms * 1e6), host_gflops=p.flops / ((ms + 2 * h2d) * 1e6),
                   max_rel_err=1e-7)
    return rec


def test_speedups_against_baseline_parent_and_reference() -> None:
    records = [
        _record("cpu.blas", "cpu", None, 1.0),
        _record("cpu.seq_naive", "cpu", None, 100.0),
        _record("cpu.seq_ikj", "cpu", "cpu.seq_naive", 10.0),
        _record("cpu.seq_tiled", "cpu", "cpu.seq_ikj", 5.0),
    ]
    rows = table_rows(records)
    assert "h2d ms" not in render_markdown(records)  # host backends move no data
    by_id = {r["kernel"]: r for r in rows}
    tiled = by_id["cpu.seq_tiled"]
    assert math.isclose(tiled["x_base"], 20.0) and math.isclose(tiled["x_parent"], 2.0)
    assert math.isclose(tiled["pct_ref"], 20.0)
    assert by_id["cpu.seq_naive"]["x_parent"] is None


def test_gpu_rows_fall_back_to_their_rung_one_and_show_transfers() -> None:
    records = [_record("cuda.cublas", "cuda", None, 1.0, h2d=3.0),
               _record("cuda.01_naive", "cuda", None, 40.0, h2d=3.0),
               _record("cuda.02_smem_tiles", "cuda", "cuda.01_naive", 10.0, h2d=3.0)]
    rows = {r["kernel"]: r for r in table_rows(records)}
    assert rows["cuda.02_smem_tiles"]["base"] == "cuda.01_naive"
    assert math.isclose(rows["cuda.02_smem_tiles"]["x_base"], 4.0)
    md = render_markdown(records)
    assert "h2d ms" in md and "% ref" in md


def test_failed_and_unavailable_rows_keep_their_reason() -> None:
    records = [_record("cpu.seq_naive", "cpu", None, None, status="unavailable")]
    md = render_markdown(records)
    assert "unavailable: why" in md


def test_opencl_without_clblast_is_compared_with_the_vendor_library_of_its_device() -> None:
    gpu = _record("opencl.regblock_vec", "opencl", "opencl.more_work", 4.0)
    gpu["info"] = {"device_type": "GPU"}
    cpu = _record("opencl.naive", "opencl", None, 50.0)
    cpu["info"] = {"device_type": "CPU"}
    rows = {r["kernel"]: r for r in table_rows([
        _record("cpu.blas", "cpu", None, 10.0), _record("cuda.cublas", "cuda", None, 2.0),
        gpu, cpu])}
    assert rows["opencl.regblock_vec"]["ref"] == "cuda.cublas"
    assert math.isclose(rows["opencl.regblock_vec"]["pct_ref"], 50.0)
    assert rows["opencl.naive"]["ref"] == "cpu.blas"
    assert math.isclose(rows["opencl.naive"]["pct_ref"], 20.0)


def test_profile_columns_add_static_and_dynamic_shared_memory() -> None:
    record = _record("cuda.19_async_pipeline", "cuda", "cuda.11_double_buffer", 3.0, h2d=1.0)
    record["info"] = {"profile": {"registers": 128, "static_shared_bytes": 0,
                                  "dynamic_shared_bytes": 55296, "local_bytes": 0}}
    row = table_rows([record])[0]
    assert (row["regs"], row["smem"], row["local"]) == (128, 55296, 0)
    assert "spill B" in render_markdown([record])


# ---------------------------------------------------------------- the terminal table
def _printed(records: list[dict], width: int, wide: bool = False) -> str:
    from rich.console import Console

    console = Console(width=width, record=True, markup=False, color_system=None)
    render_rich(records, console, wide=wide)
    return console.export_text()


H100_FIXTURE = Path(__file__).parent / "fixtures" / "report_h100_synthetic.json"


def test_default_table_fits_80_columns_and_never_folds_ids() -> None:
    for fixture in (FIXTURE, H100_FIXTURE):
        records = json.loads(fixture.read_text())["results"]
        lines = _printed(records, 80).splitlines()
        assert max(len(line.rstrip()) for line in lines) <= 80, fixture.name
        for record in records:  # every id whole, on its row
            assert any(line.startswith(record["kernel"] + " ") for line in lines)
        # The legend wraps between words: put back together, it is the whole caption.
        legend_start = next(i for i, line in enumerate(lines) if line.startswith("ms: median"))
        legend = " ".join(line.strip() for line in lines[legend_start:legend_start + 6])
        assert "% peak: of the device's FP32 peak" in legend


def _legends(text: str, first: str = "ms: median") -> list[list[str]]:
    """Each table's legend lines: from its ``first`` words to the blank line, footnote,
    unavailable kernels or next table's title after it."""
    legends: list[list[str]] = []
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith(first):
            current = []
            legends.append(current)
        elif not line.strip() or line.startswith("[") or re.match(r"\d+x\d+x\d+", line) \
                or " unavailable" in line:
            current = None
        if current is not None:
            current.append(line.rstrip())
    return legends


def _assert_terms_whole(lines: list[str], terms: set[str]) -> None:
    """Each of ``terms`` (and every other) on one line with its definition's first word."""
    assert max(len(line) for line in lines) <= 80
    heads = re.findall(r"(?:^|; )([^;:]+): (\S+)", " ".join(lines))
    assert terms <= {t for t, _ in heads}
    for term, first_word in heads:
        assert any(f"{term}: {first_word}" in line for line in lines), (term, lines)


def test_the_legend_at_80_columns_never_splits_a_term_from_its_definition() -> None:
    for fixture in (FIXTURE, H100_FIXTURE):
        records = json.loads(fixture.read_text())["results"]
        problems = len({json.dumps(r["problem"]) for r in records})
        legends = _legends(_printed(records, 80))
        assert len(legends) == problems
        for lines in legends:
            _assert_terms_whole(lines, {"ms", "noise", "x parent", "% ref", "% peak"})
        # --wide: every column, and the same wrapping (rich's caption would split a term).
        legends = _legends(_printed(records, 80, wide=True), first="x base:")
        assert len(legends) == problems
        for lines in legends:
            _assert_terms_whole(lines, {"x base", "x parent", "% ref", "spread", "noise",
                                        "err/ref"})
    cpu_legend = " ".join(_legends(_printed(json.loads(FIXTURE.read_text())["results"], 80))[0])
    assert "% ref of CPU rungs: against" in cpu_legend


def test_the_markdown_legend_is_a_list_of_terms() -> None:
    records = json.loads(FIXTURE.read_text())["results"]
    markdown = render_markdown(records).splitlines()
    legend = [line for line in markdown if line.startswith("- ")]
    assert legend[:3] == ["- **x base**: speedup over cpu.seq_naive",
                          "- **x parent**: over the parent rung",
                          "- **% ref**: reference kernel time (cpu.blas, opencl.clblast) over "
                          "this kernel's"]
    # An asterisk of a formula is escaped, not taken to open emphasis.
    assert "- **noise**: 1.4826\\*MAD/median of the kernel samples, ! where above target or " \
        "disturbed" in legend
    assert len(legend) == 2 * len(set(legend))  # one list under each of the two tables


def test_wrap_legend_breaks_between_definitions_not_inside_a_term() -> None:
    caption = "ms: median time; % ref of CPU rungs: against OpenBLAS; x parent: speedup"
    assert wrap_legend(caption, 30) == ["ms: median time;", "% ref of CPU rungs: against",
                                        "OpenBLAS; x parent: speedup"]


NO_CUPY = ("CuPy is not importable (ModuleNotFoundError: No module named 'cupy'); install "
           "CuPy with `pip install 'mmsuite[cuda]'`")
NO_CLBLAST = "pyclblast is not installed (optional: `pip install pyclblast`, needs CLBlast)"


def _unavailable(record: dict, reason: str) -> dict:
    keep = ("kernel", "backend", "rung", "parent", "adds", "problem")
    return {**{key: record.get(key) for key in keep}, "status": "unavailable", "reason": reason}


def _without_cupy_and_clblast() -> list[dict]:
    """The CPU and OpenCL fixture as a machine without CuPy saves it: every CUDA kernel
    unavailable on both problems, and CLBlast missing on the first (as after --resume)."""
    records = json.loads(FIXTURE.read_text())["results"]
    first = records[0]["problem"]
    records = [_unavailable(r, NO_CLBLAST)
               if r["kernel"] == "opencl.clblast" and r["problem"] == first else r
               for r in records]
    for problem in {json.dumps(r["problem"]): r["problem"] for r in records}.values():
        records += [_unavailable({"kernel": k.id, "backend": k.backend, "rung": k.rung,
                                  "parent": k.parent, "adds": k.adds, "problem": problem},
                                 NO_CUPY)
                    for k in BUILT_IN if k.backend == "cuda"]
    return records


def test_the_80_column_layout() -> None:
    """The layout pinned: titles wider than their figures fold between words, two spaces
    between columns, short status words, the legend wrapped between definitions, and the
    kernels that could not run one line a reason under the table (under the last table
    where every problem shares it), ids in a few words."""
    lines = [line.rstrip() for line in _printed(_without_cupy_and_clblast(), 80).splitlines()]
    assert lines[:5] == [
        "64x64x64",
        "                                                 x     %     %",
        "kernel                  ms  GFLOP/s  noise  parent   ref  peak  status",
        "─" * 70,
        "cpu.blas             0.008    68.79  7.0%!       -  100%   14%  ok",
    ]
    assert lines[15:22] == [
        "ms: median kernel time; noise: 1.4826*MAD/median, ! above the device's",
        "target or most samples disturbed; x parent: speedup over the parent",
        "rung; % ref: reference (cpu.blas) time over this kernel's; % peak: of",
        "the device's FP32 peak; % ref of CPU rungs: against OpenBLAS samples",
        "taken in turns with the rung's",
        "opencl.clblast unavailable: pyclblast is not installed (optional:",
        "  `pip install pyclblast`, needs CLBlast)",
    ]
    assert lines[22] == "128x128x128"
    assert lines[-3:] == [
        f"cuda.* ({sum(k.backend == 'cuda' for k in BUILT_IN)}) unavailable on every problem: "
        "CuPy is not importable",
        "  (ModuleNotFoundError: No module named 'cupy'); install CuPy with",
        "  `pip install 'mmsuite[cuda]'`",
    ]
    assert not [line for line in lines if line.startswith("cuda.") and "unavailable" not in line]
    assert max(len(line) for line in lines) <= 80


def test_wide_and_markdown_keep_a_row_for_every_unavailable_kernel() -> None:
    records = _without_cupy_and_clblast()
    cuda = [k.id for k in BUILT_IN if k.backend == "cuda"]
    wide = _printed(records, 250, wide=True)
    markdown = render_markdown(records)
    for kernel in cuda + ["opencl.clblast"]:
        assert re.search(rf"│ {re.escape(kernel)} +│", wide), kernel
        assert f"| {kernel} |" in markdown, kernel
    assert wide.count("unavailable: CuPy is not importable") == 2 * len(cuda)  # folded
    assert markdown.count(f"unavailable: {NO_CUPY}") == 2 * len(cuda)


def test_unavailable_ids_in_a_few_words() -> None:
    records = [_record("cpu.blas", "cpu", None, 1.0)] + [
        _unavailable(_record(kernel, backend, None, None), reason)
        for kernel, backend, reason in [
            ("cpu.seq_naive", "cpu", "too big"), ("cpu.seq_ikj", "cpu", "too big"),
            ("opencl.naive", "opencl", "no device"), ("opencl.tiled", "opencl", "no device"),
            ("opencl.more_work", "opencl", "no device"),
            ("opencl.regblock_vec", "opencl", "no device"),
            ("cuda.01_naive", "cuda", "no device")]]
    lines = [line.rstrip() for line in _printed(records, 80).splitlines()]
    # A backend's every kernel as one pattern once there are more than three; fewer, and
    # part of a backend, by id with their number.
    assert lines[-2:] == ["cpu.seq_naive, cpu.seq_ikj (2) unavailable: too big",
                          "opencl.* (4), cuda.01_naive unavailable: no device"]


def test_a_narrow_terminal_closes_the_gaps_first() -> None:
    records = json.loads(H100_FIXTURE.read_text())["results"]
    records = [r for r in records if r["problem"] == records[0]["problem"]]
    at_80 = _printed(records, 80).splitlines()
    narrow = max(len(line.rstrip()) for line in at_80 if line.startswith("cuda.")) - 3
    lines = _printed(records, narrow).splitlines()
    header = next(line for line in lines if line.startswith("kernel"))
    assert "ms TFLOP/s noise parent" in " ".join(header.split()) and "  TFLOP/s" not in header
    assert all(len(line.rstrip()) <= narrow for line in lines if line.startswith("cuda."))


def test_long_reasons_become_footnotes_and_wide_keeps_them_inline() -> None:
    reason = ("max rel err 3.1e-02 above the tolerance 1.0e-05 of float32 on k=100 "
              "(`mmsuite run --kernel opencl.naive --shape 100` reproduces it)")
    records = [_record("cpu.blas", "cpu", None, 1.0),
               _record("opencl.tiled", "opencl", None, 2.0, status="failed"),
               _record("opencl.naive", "opencl", None, 3.0, status="failed")]
    for record in records[1:]:
        record["reason"] = reason
    lines = [line.rstrip() for line in _printed(records, 80).splitlines()]
    assert [line.split()[-2:] for line in lines if line.startswith("opencl.")] == \
        [["failed", "[1]"]] * 2  # one note for one reason
    # At the legend's width, broken between words, continued indented, the command whole.
    assert lines[-3:] == [
        "[1] failed: max rel err 3.1e-02 above the tolerance 1.0e-05 of",
        "  float32 on k=100 (`mmsuite run --kernel opencl.naive --shape 100`",
        "  reproduces it)"]
    assert "failed: max rel err" in _printed(records, 250, wide=True)


def test_noise_peak_and_invalid_rows() -> None:
    ok = _record("cuda.cublas", "cuda", None, 2.0)
    ok["kernel_ms"]["samples"] = [1.9, 2.0, 2.0, 2.1, 2.6]  # no recorded noise: from samples
    ok["peak_gflops"] = ok["gflops"] * 4
    over = _record("cuda.01_naive", "cuda", None, 0.5, status="invalid")
    over["reason"] = "measurement error: above peak"
    over["pct_peak"] = 150.0
    rows = {r["kernel"]: r for r in table_rows([ok, over])}
    assert math.isclose(rows["cuda.cublas"]["noise"], 1.4826 * 0.1 / 2.0)
    assert math.isclose(rows["cuda.cublas"]["pct_peak"], 25.0)
    invalid = rows["cuda.01_naive"]
    assert invalid["kernel_ms"] == 0.5 and invalid["pct_peak"] == 150.0
    # A time above peak is never shown as throughput or as a speedup.
    assert invalid["gflops"] is None and invalid["x_base"] is None and invalid["pct_ref"] is None
    assert rows["cuda.cublas"]["base"] is None  # nor as the base of anything


def test_console_width_in_a_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    from mmsuite.cli import _console

    monkeypatch.delenv("COLUMNS", raising=False)
    assert _console().width == 100
    monkeypatch.setenv("COLUMNS", "132")
    assert _console().width == 132


def test_pct_ref_uses_the_interleaved_reference_samples_when_recorded() -> None:
    blas = _record("cpu.blas", "cpu", None, 1.0)
    rung = _record("cpu.seq_ikj", "cpu", "cpu.seq_naive", 10.0)
    rung["reference_ms"] = {"median": 4.0, "min": 4.0, "max": 4.0, "samples": [4.0, 4.0]}
    other = _record("cpu.seq_tiled", "cpu", "cpu.seq_ikj", 5.0)
    rows = {r["kernel"]: r for r in table_rows([blas, rung, other])}
    assert math.isclose(rows["cpu.seq_ikj"]["pct_ref"], 40.0)  # 4 ms (alternated) over 10 ms
    assert math.isclose(rows["cpu.seq_tiled"]["pct_ref"], 20.0)  # the cpu.blas row's 1 ms
    assert "alternately" in render_markdown([blas, rung, other])


def test_a_failed_kernel_keeps_its_time_but_gets_no_speedup() -> None:
    records = [_record("cpu.blas", "cpu", None, 1.0),
               _record("cpu.seq_naive", "cpu", None, 100.0),
               _record("cpu.seq_ikj", "cpu", "cpu.seq_naive", 0.5, status="failed")]
    failed = {r["kernel"]: r for r in table_rows(records)}["cpu.seq_ikj"]
    assert failed["kernel_ms"] == 0.5
    assert (failed["gflops"], failed["x_parent"], failed["x_base"], failed["pct_ref"]) == \
        (None, None, None, None)


def test_rows_with_the_componentwise_bound_show_it_and_define_err_ref_on_it() -> None:
    records = json.loads(FIXTURE.read_text())["results"]
    old = _printed(records, 250, wide=True)
    assert "err bound" not in old and "err/ref: max rel err" in " ".join(old.split())
    for record in records:
        record["err_bound"] = 1.25e-8
    wide = _printed(records, 250, wide=True)
    assert "err bound" in wide and "1.2e-08" in wide
    assert "err/ref: err bound over the FP32" in " ".join(wide.split())


# ------------------------------------------------------------------ contention
def _loaded(record: dict, share: float) -> dict:
    return {**record, "host_load": {"others_share": share, "cores": 2, "seconds": 1.0}}


def _contended_ladder() -> list[dict]:
    """A quiet parent and reference, one rung measured while others took 60% of the CPU."""
    return [_loaded(_record("cpu.blas", "cpu", None, 1.0), 0.02),
            _loaded(_record("cpu.seq_naive", "cpu", None, 100.0), 0.02),
            _loaded(_record("cpu.seq_ikj", "cpu", "cpu.seq_naive", 10.0), 0.6),
            _loaded(_record("cpu.seq_tiled", "cpu", "cpu.seq_ikj", 5.0), 0.02)]


def test_a_contended_row_and_every_ratio_built_on_its_time_are_marked() -> None:
    ladder = _contended_ladder()
    ladder[2]["pct_roof"] = 40.0  # the share of the roof, as mmsuite.roof records it
    rows = {r["kernel"]: r for r in table_rows(ladder)}
    assert rows["cpu.seq_ikj"]["contended"]
    assert rows["cpu.seq_ikj"]["unsure"] >= {"x_base", "x_parent", "pct_ref", "pct_roof"}
    # Quiet itself, but its speedup over the parent divides by the contended time.
    assert not rows["cpu.seq_tiled"]["contended"]
    assert rows["cpu.seq_tiled"]["unsure"] == {"x_parent"}
    assert not rows["cpu.seq_naive"]["unsure"] and not rows["cpu.blas"]["unsure"]


def test_terminal_table_marks_contended_rows_and_explains_the_marks() -> None:
    from rich.console import Console

    console = Console(width=80, record=True, markup=False)
    render_rich(_contended_ladder(), console)
    text = console.export_text()
    ikj = next(line for line in text.splitlines() if line.startswith("cpu.seq_ikj"))
    tiled = next(line for line in text.splitlines() if line.startswith("cpu.seq_tiled"))
    assert "10.000*" in ikj and "10.00x?" in ikj and "10%?" in ikj
    assert "5.000*" not in tiled and "2.00x?" in tiled and "20%?" not in tiled
    flowing = " ".join(text.split())
    assert "* 1 of 4 rows were measured while other processes took 60% of the CPU" in flowing
    assert "*: measured while other processes held the machine" in flowing


def test_markdown_escapes_the_mark_and_keeps_the_footnote() -> None:
    md = render_markdown(_contended_ladder())
    assert "| 10.000\\* |" in md and "| 10.00x? |" in md
    assert "- **\\***: measured while other processes held the machine" in md
    assert "\\* 1 of 4 rows were measured while" in md


def test_a_quiet_run_has_no_marks() -> None:
    records = [_loaded(r, 0.02) for r in _contended_ladder()]
    md = render_markdown(records)
    assert "?" not in md and "\\*" not in md.replace("1.4826\\*MAD", "")


def _sweep(path: Path, rows: int) -> Path:
    """The fixture's first problem's rows, over square sizes from 8 up, ``rows`` in all."""
    document = json.loads(FIXTURE.read_text())
    seed = [r for r in document["results"] if r["problem"] == document["results"][0]["problem"]]
    out = []
    for index in range(rows):
        size = 8 + index // len(seed)
        row = seed[index % len(seed)]
        out.append({**row, "problem": {**row["problem"], "m": size, "n": size, "k": size}})
    document["results"] = out
    path.write_text(json.dumps(document))
    return path


def test_a_terminal_is_shown_whole_tables_up_to_a_bound_and_the_rest_counted(
        tmp_path: Path, capsys) -> None:
    """A file of 10,000 rows once printed 18,000 lines: now a few hundred, and a line saying
    what was left out and how to see it; --all-rows prints every table."""
    from mmsuite import report
    from mmsuite.cli import main

    big = _sweep(tmp_path / "big.json", 10_000)
    assert main(["report", str(big)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) < 3 * report.TERMINAL_ROWS
    assert sum(line.startswith("cpu.blas") for line in lines) == report.TERMINAL_ROWS // 12
    start = max(i for i, line in enumerate(lines) if line.startswith("... and"))
    left_out = " ".join(" ".join(lines[start:]).split())  # however the terminal folds it
    assert re.search(r"\.\.\. and 818 more problems \(9808 rows\) not shown, of 834: "
                     r"--all-rows prints every table", left_out)
    small = _sweep(tmp_path / "small.json", 12 * 30)
    assert main(["report", str(small), "--all-rows"]) == 0
    every = capsys.readouterr().out
    assert sum(line.startswith("cpu.blas") for line in every.splitlines()) == 30
    assert "not shown" not in every


def test_a_file_within_the_bound_is_printed_whole(capsys) -> None:
    from rich.console import Console

    records = json.loads(FIXTURE.read_text())["results"]
    console = Console(width=80)
    render_rich(records, console)
    assert "not shown" not in capsys.readouterr().out
