"""The published report (mmsuite.report_html): files, content, figures, self-containment, and
what a real browser makes of it.

Fixtures: ``report_cpu_opencl.json`` is a real run of the CPU and OpenCL ladders at 64 and
128 on a 2-core machine; ``report_h100_synthetic.json`` holds synthetic records shaped like
an H100 run (every status, noisy rows, transfers with pageable and pinned memory).
"""

from __future__ import annotations

import csv
import html
import json
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from mmsuite import catalogue, report_html, runs
from mmsuite.cli import main
from mmsuite.problem import label_of
from tests.conftest import needs_asv

FIXTURES = Path(__file__).parent / "fixtures"
CPU = FIXTURES / "report_cpu_opencl.json"
H100 = FIXTURES / "report_h100_synthetic.json"


def _records(path: Path) -> list[dict]:
    return json.loads(path.read_text())["results"]


@pytest.fixture(scope="module")
def merged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("merged")
    report_html.build([CPU, H100], out)
    return out


def test_report_names_every_kernel_and_problem(tmp_path: Path) -> None:
    index = report_html.build([CPU], tmp_path)
    page = index.read_text()
    markdown = (tmp_path / "report.md").read_text()
    for record in _records(CPU):
        assert record["kernel"] in page and record["kernel"] in markdown
        label = label_of(record["problem"])
        assert label in page and label in markdown
    assert "Where it ran" in markdown and "AMD EPYC" in markdown  # the environment header


def test_csv_has_one_row_per_kernel_problem_and_machine(merged: Path) -> None:
    with (merged / "results.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(_records(CPU)) + len(_records(H100))
    assert {r["machine"] for r in rows} == {"AMD EPYC (2 cores)", "NVIDIA H100 80GB HBM3"}
    keys = {(r["machine"], r["kernel"], r["m"]) for r in rows}
    assert len(keys) == len(rows)
    invalid = next(r for r in rows if r["status"] == "invalid")
    assert invalid["gflops"] == "" and invalid["reason"].startswith("measurement error:")
    assert float(invalid["pct_peak"]) > 100


def test_figures_are_valid_png_and_svg(merged: Path) -> None:
    from PIL import Image

    pngs = sorted((merged / "figures").glob("*.png"))
    svgs = sorted((merged / "figures").glob("*.svg"))
    assert pngs and [p.stem for p in pngs] == [s.stem for s in svgs]
    for png in pngs:
        with Image.open(png) as image:
            image.verify()
            assert image.format == "PNG"
    for svg in svgs:
        assert ET.parse(svg).getroot().tag == "{http://www.w3.org/2000/svg}svg"
    names = " ".join(p.stem for p in pngs)
    for kind in ("ladder", "sweep", "transfers", "summary"):
        assert kind in names
    # The Markdown links each PNG, by a path relative to report.md.
    markdown = (merged / "report.md").read_text()
    for png in pngs:
        assert f"](figures/{png.name})" in markdown


def test_html_is_self_contained(merged: Path) -> None:
    page = (merged / "index.html").read_text()
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", page, re.IGNORECASE)
    assert "@import" not in page and "<link" not in page.lower()
    assert "url(http" not in page and "<script" not in page.lower()
    # Every figure is inlined.
    assert page.count("<svg") == len(list((merged / "figures").glob("*.svg")))


def test_merged_report_shows_the_gpu_ladder_transfers_and_statuses(merged: Path) -> None:
    markdown = (merged / "report.md").read_text()
    assert "## Ladders on NVIDIA H100 80GB HBM3" in markdown
    assert "## Ladders on AMD EPYC (2 cores)" in markdown
    assert "transfers-nvidia-h100-80gb-hbm3-4096x4096x4096" in markdown
    assert "summary-nvidia-h100-80gb-hbm3" in markdown
    # Statuses point to their reasons, listed under each table.
    assert re.search(r"\| invalid \[(\d)\] \|", markdown)
    number = re.search(r"\| invalid \[(\d)\] \|", markdown).group(1)
    assert f"\n{number}. measurement error: 80000 GFLOP/s" in markdown
    assert re.search(r"\n\d\. CUDADriverError: CUDA_ERROR_ILLEGAL_ADDRESS", markdown)
    assert "SM clock (MHz) | 1980" in markdown


def test_machines_side_by_side(tmp_path: Path) -> None:
    other = json.loads(CPU.read_text())
    other["environment"]["cpu"] = "Other CPU"
    for record in other["results"]:
        if record["status"] == "ok":
            record["kernel_ms"]["median"] *= 2
            record["gflops"] /= 2
    copy = tmp_path / "other.json"
    copy.write_text(json.dumps(other))
    report_html.build([CPU, copy], tmp_path / "out")
    figures = {p.stem for p in (tmp_path / "out" / "figures").glob("*.svg")}
    assert "machines-cpu-64x64x64" in figures
    assert "machines-opencl-128x128x128" in figures


def test_newer_file_wins_for_the_same_machine_kernel_and_problem(tmp_path: Path) -> None:
    newer = json.loads(CPU.read_text())
    newer["environment"]["created"] = "2099-01-01T00:00:00+00:00"
    newer["results"] = [r for r in newer["results"] if r["kernel"] == "cpu.seq_naive"]
    newer["results"][0]["kernel_ms"]["samples"] = [123.0]  # the median comes from the samples
    path = tmp_path / "newer.json"
    path.write_text(json.dumps(newer))
    records = runs.merge(runs.load_runs([path, CPU]))
    naive = [r for r in records if r["kernel"] == "cpu.seq_naive"]
    assert len(naive) == 2  # two problems
    assert sorted(r["kernel_ms"]["median"] for r in naive)[-1] == 123.0
    assert len(records) == len(_records(CPU))


def _variant(path: Path, created: str, packed_ms: float, drop: tuple[str, int] | None = None
             ) -> Path:
    """The CPU fixture with cpu.omp_packed's timings at 64^3 set to ten samples around
    ``packed_ms``, and the row ``drop`` (kernel, m) left out."""
    document = json.loads(CPU.read_text())
    document["results"] = [r for r in document["results"]
                           if (r["kernel"], r["problem"]["m"]) != drop]
    for record in document["results"]:
        if (record["kernel"], record["problem"]["m"]) == ("cpu.omp_packed", 64):
            samples = [packed_ms * (1 + i / 1000) for i in range(10)]
            record["kernel_ms"].update(samples=samples, median=samples[5], noise=None)
    document["environment"]["created"] = created
    out = path / f"{created[:4]}.json"
    out.write_text(json.dumps(document))
    return out


def test_baseline_adds_compare_verdicts_and_one_sided_rows(tmp_path: Path) -> None:
    """BASE and NEW differ: a kernel x problem in one file only is listed as such, and the
    kernel twice as slow in NEW is ``slower``."""
    base = _variant(tmp_path, "2025-01-01T00:00:00+00:00", 1.0)
    new = _variant(tmp_path, "2026-01-01T00:00:00+00:00", 2.0, drop=("cpu.seq_ikj", 64))
    report_html.build([new], tmp_path / "out", baseline=base)
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "## Against the baseline 2025.json" in markdown
    assert "| verdict |" in markdown
    assert re.search(r"\| cpu\.omp_packed \| 64x64x64 \|.*\| slower \|", markdown)
    assert "only in BASE: cpu.seq_ikj @ 64x64x64" in markdown


@needs_asv
def test_asv_history_through_asv_results(tmp_path: Path) -> None:
    from tests.test_history import C1, C2, D1, D2, _benchmarks_json, _result_file, _write

    root = tmp_path / "results"
    root.mkdir()
    (root / "benchmarks.json").write_text(json.dumps(_benchmarks_json()))
    name = "sgemm_cpu.CpuKernels.track_kernel_ms"
    params = [["'cpu.blas'", "'cpu.seq_naive'"], ["256", "512"]]
    _write(root, "box", C1, _result_file(C1, D1, {name: [[0.2, 1.4, 13.0, None], params, "1"]}))
    _write(root, "box", C2, _result_file(C2, D2, {name: [[0.3, 1.5, 14.0, 270.0], params, "1"]}))
    report_html.build([CPU], tmp_path / "out", asv_dir=root)
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "](figures/history-cpu.png)" in markdown
    assert "cpu.seq_naive [box] size=512: 1 commits 2026-11-21 .. 2026-11-21" in markdown
    assert "failed at aaaaaaaa (2026-11-20)" in markdown


def test_report_command_writes_the_directory(tmp_path: Path,
                                             capsys: pytest.CaptureFixture) -> None:
    assert main(["report", str(CPU), str(H100), "--out", str(tmp_path / "r")]) == 0
    assert "report written to" in capsys.readouterr().out
    for name in ("index.html", "report.md", "results.csv"):
        assert (tmp_path / "r" / name).stat().st_size > 1000
    assert main(["report", str(CPU), "--out", str(tmp_path / "r"),
                 "--baseline", str(tmp_path / "missing.json")]) == 2
    assert "no such result file" in capsys.readouterr().err


def test_report_asv_without_the_bench_extra_is_one_line_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "asv", None)  # as if asv were not installed
    assert main(["report", str(CPU), "--out", str(tmp_path / "r"), "--asv", str(tmp_path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "mmsuite: error: reading asv results needs asv, which is not installed: "
        "pip install 'mmsuite[bench]'"]
    assert not (tmp_path / "r" / "index.html").exists()


def test_run_report_writes_results_and_report(tmp_path: Path,
                                              capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "rep"
    assert main(["run", "--backend", "cpu", "--kernel", "cpu.seq_*", "--shape", "8,16",
                 "--repeats", "2", "--warmup", "0", "--report", str(out)]) == 0
    capsys.readouterr()
    saved = json.loads((out / "results.json").read_text())
    assert sorted({r["problem"]["m"] for r in saved["results"]}) == [8, 16]
    assert (out / "figures" / "sweep-{}-cpu.svg".format(
        report_html._slug(runs.machine_label(saved["environment"])))).is_file()


# ---------------------------------------------------------------- a real browser
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}", *args],
        capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get "
                    "install chromium); the browser check of the HTML report needs it")
def test_chromium_renders_the_report(merged: Path, tmp_path: Path) -> None:
    from PIL import Image, ImageStat

    url = (merged / "index.html").resolve().as_uri()
    shot = tmp_path / "shot.png"
    proc = _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1200,2000", url)
    assert shot.is_file(), proc.stderr[-2000:]
    with Image.open(shot) as image:
        assert image.size == (1200, 2000)
        # A blank page has no variance; the report's text, tables and charts have plenty.
        assert max(ImageStat.Stat(image.convert("L")).stddev[:1]) > 20
    dom = _chromium(tmp_path, "--dump-dom", url).stdout
    assert dom.count("<svg") == len(list((merged / "figures").glob("*.svg")))
    assert "cuda.20_tuned" in dom and "opencl.regblock_vec" in dom


def test_a_run_under_load_is_flagged(tmp_path: Path) -> None:
    report_html.build([CPU], tmp_path / "quiet")
    assert "Warning:" not in (tmp_path / "quiet" / "report.md").read_text()  # load 1.6, 2 cores
    busy = json.loads(CPU.read_text())
    busy["results"][0]["load_avg"]["after"] = [5.5, 3.0, 2.0]
    path = tmp_path / "busy.json"
    path.write_text(json.dumps(busy))
    report_html.build([path], tmp_path / "busy")
    assert ("Warning: busy.json was measured while the 1-minute load average reached 5.5 on "
            "2 cores") in (tmp_path / "busy" / "report.md").read_text()


def test_best_of_each_backend_table(merged: Path) -> None:
    markdown = (merged / "report.md").read_text()
    assert ("| 4096x4096x4096 | cuda | cuda.20_tuned | 2.975 | 46.19 | 28931x | 89% "
            "| cuda.cublas |") in markdown
    assert "| 4096x4096x4096 | cpu | cpu.seq_naive | 86084.0 | 0.0016 | 1.00x |" \
        in markdown


def test_report_without_out_prints_tables_per_machine(capsys: pytest.CaptureFixture) -> None:
    assert main(["report", str(CPU), str(H100)]) == 0
    out = capsys.readouterr().out
    assert "4096x4096x4096 on NVIDIA H100 80GB HBM3" in out
    assert "64x64x64 on AMD EPYC (2 cores)" in out
    assert max(len(line) for line in out.splitlines()) <= 100


def test_kernels_unavailable_for_one_reason_are_one_line_not_rows(tmp_path: Path) -> None:
    data = json.loads(CPU.read_text())
    problem = data["results"][0]["problem"]
    no_cupy = "CuPy is not installed (pip install 'mmsuite[cuda]')"
    cuda = [k for k in catalogue.kernels() if k.backend == "cuda"]
    data["results"] += [{"kernel": k.id, "backend": "cuda", "rung": k.rung, "parent": k.parent,
                         "adds": k.adds, "problem": problem, "status": "unavailable",
                         "reason": no_cupy} for k in cuda]
    data["results"] = [r if r["kernel"] != "opencl.clblast" else {
        **{key: r[key] for key in ("kernel", "backend", "rung", "parent", "adds", "problem")},
        "status": "unavailable", "reason": "pyclblast is not installed"}
        for r in data["results"]]
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(data))
    page = report_html.build([path], tmp_path / "out").read_text()
    markdown = (tmp_path / "out" / "report.md").read_text()
    lines = [f"{len(cuda)} kernels unavailable: {no_cupy} \N{EM DASH} "
             + ", ".join(k.id for k in cuda),
             "1 kernel unavailable: pyclblast is not installed \N{EM DASH} opencl.clblast"]
    for line in lines:
        assert f"\n{line}\n" in markdown and f"<p>{html.escape(line)}</p>" in page
    assert markdown.count(no_cupy) == 1 and page.count(html.escape(no_cupy)) == 1
    assert not re.search(r"^\| (cuda\.|opencl\.clblast )", markdown, re.MULTILINE)
    assert "| opencl.naive |" in markdown  # the kernels that ran keep their rows


def test_a_contended_row_is_marked_in_the_html_markdown_and_csv(tmp_path: Path) -> None:
    busy = json.loads(CPU.read_text())
    marked = busy["results"][5]  # cpu.omp_tiled on the first problem
    marked["host_load"] = {"others_share": 0.6, "cores": 2, "seconds": 1.0}
    path = tmp_path / "busy.json"
    path.write_text(json.dumps(busy))
    out = tmp_path / "report"
    html = report_html.build([path], out).read_text()
    assert html.count('<tr class="contended">') == 1
    assert "rows were measured while other processes took 60% of the CPU" in html
    markdown = (out / "report.md").read_text()
    assert "Warning: busy.json: other processes used up to 60% of this machine's CPU" in markdown
    with (out / "results.csv").open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["contended"] == "True"]
    assert [(r["kernel"], r["others_share"]) for r in rows] == [("cpu.omp_tiled", "0.6")]


def test_every_figure_has_its_own_caption_and_the_reading_is_said_once(merged: Path) -> None:
    html = (merged / "index.html").read_text()
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", html)
    assert len(captions) > 2 and len(set(captions)) == len(captions)
    assert html.count("Each ladder figure: kernel-only throughput per rung") == 1


def test_no_unset_setting_is_shown_as_none_and_cpu_opencl_has_no_transfers(
        tmp_path: Path) -> None:
    run = json.loads(CPU.read_text())
    run["settings"]["sampling"] = {"min_samples": 5, "max_samples": None}
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(run))
    report_html.build([path], tmp_path / "out")
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "min_samples=5" in markdown and "None" not in markdown
    # PoCL on the CPU copies within host memory: no h2d/d2h columns in its ladder tables.
    assert any(r["backend"] == "opencl" and (r.get("h2d_ms") or {}).get("samples")
               for r in run["results"])
    assert "h2d ms" not in markdown


def test_best_of_each_backend_marks_a_baseline_measured_under_contention() -> None:
    records = _records(CPU)
    first = records[0]["problem"]
    for record in records:
        if record["kernel"] == "cpu.seq_naive" and record["problem"] == first:
            record["host_load"] = {"others_share": 0.6, "cores": 2, "seconds": 1.0}
    rows = [r for r in report_html.best_rows(records)[0] if r[0] == label_of(first)]
    assert rows and all(r[5].endswith("x?") for r in rows)  # x cpu.seq_naive divides by it
    assert not any(r[3].endswith("*") for r in rows)  # the best rungs themselves were quiet


def _sweep_file(path: Path, problems: int) -> Path:
    """The CPU fixture's cpu.seq_ikj and cpu.blas rows, over a square sweep of ``problems``."""
    document = json.loads(CPU.read_text())
    seed = [r for r in document["results"] if r["kernel"] in ("cpu.seq_ikj", "cpu.blas")
            and r["problem"] == document["results"][0]["problem"]]
    rows = []
    for m in range(8, 8 + problems):
        for row in seed:
            rows.append({**json.loads(json.dumps(row)),
                         "problem": {**row["problem"], "m": m, "n": m, "k": m, "batch": 1}})
    document["results"] = rows
    path.write_text(json.dumps(document))
    return path


def test_a_report_of_many_problems_draws_figures_for_a_few_and_tables_for_all(
        tmp_path: Path) -> None:
    """A sweep of thousands of problems once took minutes a hundred and a chart millions of
    pixels wide: single-problem figures are drawn for a spread of them, each problem keeps
    its table."""
    problems = report_html.FIGURED_PROBLEMS * 3
    index = report_html.build([_sweep_file(tmp_path / "sweep.json", problems)],
                              tmp_path / "out")
    page = index.read_text()
    figures = sorted(p.name for p in (tmp_path / "out" / "figures").glob("ladder-*.svg"))
    assert len(figures) == report_html.FIGURED_PROBLEMS
    assert any("8x8x8" in name for name in figures)  # the smallest
    assert any(f"{7 + problems}x{7 + problems}" in name for name in figures)  # the largest
    assert page.count("<table>") >= problems  # a ladder table for every problem
    assert (f"drawn for {report_html.FIGURED_PROBLEMS} of the {problems} problems"
            in html.unescape(page))


def test_figures_are_drawn_for_every_problem_where_there_are_few() -> None:
    records = _records(CPU)
    assert report_html.figured_problems(records) == {runs.problem_key(r) for r in records}
