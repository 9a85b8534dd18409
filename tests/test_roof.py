"""mmsuite.roof: the bytes a row moves, its intensity, achieved GB/s and % of its roof, the
bandwidth each backend's device is judged by, the GPU copy probe's cache, and the roof in
the tables and the HTML report."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from mmsuite import cpu_probe, report, report_html, roof

FIXTURES = Path(__file__).parent / "fixtures"
HOST = {"cpu": "AMD EPYC (test)", "cpu_cores": 2,
        "cpu_copy_probe": {"gbs_by_threads": {"1": 20.0, "2": 30.0}}}


def record(m: int, n: int, k: int, ms: float, backend: str = "cpu", batch: int = 1,
           beta: float = 0.0, peak: float | None = 200.0, **info) -> dict:
    flops = 2 * m * n * k * batch
    return {"kernel": f"{backend}.k", "backend": backend, "status": "ok",
            "problem": {"m": m, "n": n, "k": k, "batch": batch, "beta": beta},
            "flops": flops, "gflops": flops / (ms * 1e6), "kernel_ms": {"median": ms},
            "peak_gflops": peak, "info": info}


def test_bytes_are_a_b_and_c_once_c_twice_with_beta_and_the_workspace_twice() -> None:
    assert roof.bytes_moved(record(2, 3, 4, 1.0)) == 4 * (2 * 4 + 4 * 3 + 2 * 3)
    assert roof.bytes_moved(record(2, 3, 4, 1.0, beta=0.5)) == 4 * (8 + 12 + 2 * 6)
    assert roof.bytes_moved(record(2, 3, 4, 1.0, batch=5)) == 5 * 4 * (8 + 12 + 6)
    split = record(2, 3, 4, 1.0, workspace_bytes=1000)  # written, then read back
    assert roof.bytes_moved(split) == 4 * (8 + 12 + 6) + 2000


def test_a_gemv_like_row_is_held_by_memory_and_a_square_one_by_the_peak() -> None:
    # 1 x 8192 x 8192: 4 * (8192 + 8192^2 + 8192) bytes, 2 * 8192^2 FLOPs: 0.5 FLOP/B.
    gemv = record(1, 8192, 8192, ms=10.0, threads=2)
    square = record(2048, 2048, 2048, ms=200.0, threads=1)
    roof.annotate([gemv, square], HOST)
    assert gemv["intensity"] == pytest.approx(0.5, rel=1e-3)
    assert gemv["achieved_gbs"] == pytest.approx(4 * (8192**2 + 2 * 8192) / 10e6)
    assert gemv["bandwidth_gbs"] == 30.0  # two threads: the two-thread copy
    assert gemv["roof_bound"] == "memory"
    assert gemv["roof_gflops"] == pytest.approx(30.0 * gemv["intensity"])
    assert gemv["pct_roof"] == pytest.approx(100 * gemv["gflops"] / gemv["roof_gflops"])
    assert square["bandwidth_gbs"] == 20.0  # one thread: the one-thread copy
    assert square["roof_bound"] == "compute" and square["roof_gflops"] == 200.0
    assert square["pct_roof"] == pytest.approx(100 * square["gflops"] / 200.0)


def test_a_thread_count_whose_copy_a_neighbour_slowed_is_passed_over() -> None:
    slowed = {**HOST, "cpu_copy_probe": {"gbs_by_threads": {"1": 19.0, "2": 7.0}}}
    row = roof.annotate([record(1, 8192, 8192, 10.0, threads=2)], slowed)[0]
    assert row["bandwidth_gbs"] == 19.0


def test_each_backend_takes_its_own_device_bandwidth() -> None:
    environment = {**HOST, "backends": {
        "cuda": {"gpu": "NVIDIA H100", "copy_probe": {"gbs": 2900.0}},
        "opencl": {"opencl_device_type": "GPU", "opencl_device": "NVIDIA H100"}}}
    cuda = roof.bandwidth_for(record(8, 8, 8, 1.0, "cuda"), environment)
    assert cuda is not None and (cuda.gbs, cuda.device) == (2900.0, "NVIDIA H100")
    on_gpu = roof.bandwidth_for(record(8, 8, 8, 1.0, "opencl"), environment)
    assert on_gpu is not None and on_gpu.gbs == 2900.0
    on_cpu = {**HOST, "backends": {"opencl": {"opencl_device_type": "CPU", "compute_units": 1}}}
    host = roof.bandwidth_for(record(8, 8, 8, 1.0, "opencl"), on_cpu)
    assert host is not None and host.gbs == 20.0 and host.device.endswith("host memory")
    failed = {"backends": {"cuda": {"gpu": "X", "copy_probe": {"error": "out of memory"}}}}
    assert roof.bandwidth_for(record(8, 8, 8, 1.0, "cuda"), failed) is None


def test_a_file_without_a_probe_gets_bytes_and_intensity_but_no_roof() -> None:
    row = roof.annotate([record(64, 64, 64, 0.01)], {"cpu_cores": 2})[0]
    assert row["intensity"] > 0 and "pct_roof" not in row and "bandwidth_gbs" not in row


class FakeCupy:
    """Just what the copy probe asks of CuPy: each copy takes ``ms`` on the GPU."""

    uint8 = "uint8"

    def __init__(self, ms: float, fail: bool = False) -> None:
        self.ms, self.fail, self.copies = ms, fail, 0
        event = SimpleNamespace(record=lambda stream: None, synchronize=lambda: None)
        self.cuda = SimpleNamespace(
            runtime=SimpleNamespace(memGetInfo=lambda: (80 * 2**30, 80 * 2**30)),
            Event=lambda: event, Stream=lambda non_blocking: None,
            get_elapsed_time=lambda start, stop: self.ms)

    def _copy(self, src, size, stream) -> None:
        if self.fail:
            raise MemoryError("out of memory allocating 2 GiB")
        self.copies += 1

    def ones(self, size: int, dtype: str) -> SimpleNamespace:
        buffer = SimpleNamespace(size=size)
        buffer.data = SimpleNamespace(copy_from_device_async=self._copy)
        return buffer

    def empty_like(self, src: SimpleNamespace) -> SimpleNamespace:
        return self.ones(src.size, self.uint8)

    def get_default_memory_pool(self) -> SimpleNamespace:
        return SimpleNamespace(free_all_blocks=lambda: None)


def test_the_gpu_copy_probe_measures_once_per_gpu_and_driver(tmp_path: Path) -> None:
    fake = FakeCupy(ms=0.75)
    first = roof.cuda_copy_probe(fake, "NVIDIA H100", "0000:01:00.0", 13000, tmp_path)
    assert first["gbs"] == pytest.approx(2 * 2**30 / 0.75e6, rel=1e-3) and not first["cached"]
    assert fake.copies == roof.GPU_COPY_REPEATS + 1
    again = roof.cuda_copy_probe(fake, "NVIDIA H100", "0000:01:00.0", 13000, tmp_path)
    assert again["cached"] and again["gbs"] == first["gbs"] and fake.copies == 11
    newer_driver = roof.cuda_copy_probe(fake, "NVIDIA H100", "0000:01:00.0", 13010, tmp_path)
    assert not newer_driver["cached"] and fake.copies == 22
    failed = roof.cuda_copy_probe(FakeCupy(1.0, fail=True), "B", "x", 1, tmp_path)
    assert failed == {"error": "MemoryError: out of memory allocating 2 GiB"}


def test_the_host_copy_probe_measures_memory_bandwidth(tmp_path: Path) -> None:
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: the host probes cannot be built")
    figures = cpu_probe.load_or_measure(tmp_path)
    assert figures is not None
    copy = figures["copy_gbs"]
    assert set(copy) == {str(t) for t in cpu_probe.thread_counts(figures["cores"])}
    # DRAM copies run between about 1 GB/s (a loaded VM) and a few hundred (a big server):
    # a figure off by a factor of 1000 (ms for s, bits for bytes) lands outside.
    assert all(1.0 < gbs < 2000.0 for gbs in copy.values()), copy


def _with_roof(tmp_path: Path) -> Path:
    document = json.loads((FIXTURES / "report_cpu_opencl.json").read_text())
    document["environment"]["cpu_copy_probe"] = {"gbs_by_threads": {"1": 19.0, "2": 24.0}}
    roof.annotate(document["results"], document["environment"])
    path = tmp_path / "with_roof.json"
    path.write_text(json.dumps(document))
    return path


def test_wide_tables_show_gbs_intensity_and_pct_roof(tmp_path: Path) -> None:
    from rich.console import Console

    from mmsuite import results

    records = results.load(_with_roof(tmp_path))["results"]
    mine = [r for r in records if r["problem"]["m"] == 128 and r["backend"] == "cpu"]
    blas = next(r for r in report.table_rows(mine) if r["kernel"] == "cpu.blas")
    source = next(r for r in mine if r["kernel"] == "cpu.blas")
    assert blas["pct_roof"] == pytest.approx(source["pct_roof"]) and blas["pct_roof"] > 0
    console = Console(record=True, width=300, markup=False, file=io.StringIO())
    report.render_rich(mine, console, wide=True)
    wide = console.export_text()
    header = next(line for line in wide.splitlines() if " kernel " in line)
    assert "GB/s" in header and "FLOP/B" in header and "% roof" in header
    assert "% roof: of min(FP32 peak, copy-probe bandwidth x FLOP/B)" in " ".join(wide.split())
    console = Console(record=True, width=300, markup=False, file=io.StringIO())
    report.render_rich(mine, console, wide=False)
    assert "% roof" not in console.export_text()  # the compact table keeps to 80 columns


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def test_the_report_draws_a_roofline_per_device(tmp_path: Path) -> None:
    out = tmp_path / "report"
    report_html.build([_with_roof(tmp_path)], out)
    charts = sorted(p.name for p in (out / "figures").glob("roofline-*.svg"))
    assert len(charts) == 1  # the CPU ladder and PoCL on that CPU share its memory
    svg = (out / "figures" / charts[0]).read_text()
    assert "arithmetic intensity" in svg and "roof: 24 GB/s" in svg
    index = (out / "index.html").read_text()
    assert "Against the roof" in index and "min(FP32 peak, copy-probe bandwidth" in index
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium); the "
                    "browser check of the roofline needs it")
    import subprocess

    from PIL import Image, ImageStat

    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                          (out / "index.html").resolve().as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    assert f'<figure id="{charts[0][:-4]}"><svg' in dom
    shot = tmp_path / "shot.png"  # the chart itself, as the browser draws it
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                    f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
                    "--window-size=1000,620", (out / "figures" / charts[0]).resolve().as_uri()],
                   capture_output=True, timeout=120)
    with Image.open(shot) as image:
        # A blank page has no variance; axes, roof, points and labels have plenty.
        assert max(ImageStat.Stat(image.convert("L")).stddev[:1]) > 20


def test_a_run_records_each_rows_roof(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from mmsuite import results
    from mmsuite.cli import main

    if cpu_probe.figures() is None:
        pytest.skip("no C compiler: no copy probe, so no roof")
    out = tmp_path / "run.json"
    assert main(["run", "--backend", "cpu", "--kernel", "cpu.seq_ikj", "--shape", "32",
                 "--repeats", "2", "--warmup", "0", "--json", str(out), "--wide"]) == 0
    assert "% roof" in capsys.readouterr().out
    document = results.load(out)
    assert document["environment"]["cpu_copy_probe"]["gbs_by_threads"]
    (row,) = document["results"]
    assert row["bytes_moved"] == 4 * 3 * 32 * 32 and row["pct_roof"] > 0
    assert row["roof_device"] == f"{document['environment']['cpu']} host memory"
