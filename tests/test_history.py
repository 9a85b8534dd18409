"""mmsuite.history on a small results directory written here in asv 0.6's format
(unparameterised results are one-element lists there, as asv writes them)."""

from __future__ import annotations

import json
import math
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from mmsuite import history
from mmsuite.cli import main
from mmsuite.history import (
    SeriesKey,
    kernel_ids,
    load_history,
    machines,
    metrics,
    plot_history,
    select,
    summary,
)
from tests.conftest import needs_asv

KERNEL_MS = "sgemm_cpu.CpuKernels.track_kernel_ms"
H2D_MS = "sgemm_cuda.CudaKernels.track_h2d_ms"
PLAIN = "misc.track_plain"
COLUMNS = ["result", "params", "version", "started_at", "duration"]
CPU_PARAMS = [["'cpu.blas'", "'cpu.seq_naive'"], ["256", "512"]]
CUDA_PARAMS = [["'cuda.cublas'"], ["1024"]]
ENV = "virtualenv-py3.11-cffi-numpy-setuptools-wheel"


def _benchmarks_json() -> dict:
    def entry(name: str, params: list, version: str) -> dict:
        return {"name": name, "type": "track", "unit": "ms", "version": version,
                "param_names": ["kernel", "size"] if params else [], "params": params}

    return {
        KERNEL_MS: entry(KERNEL_MS, CPU_PARAMS, "1"),
        H2D_MS: entry(H2D_MS, CUDA_PARAMS, "1"),
        PLAIN: entry(PLAIN, [], "7"),
        "version": 2,
    }


def _result_file(commit: str, date: datetime, results: dict, machine: str = "box",
                 env: str = ENV) -> dict:
    return {
        "commit_hash": commit, "env_name": env, "date": int(date.timestamp() * 1000),
        "params": {"machine": machine, "python": "3.11"}, "python": "3.11",
        "requirements": {}, "env_vars": {}, "result_columns": COLUMNS,
        "results": results, "durations": {}, "version": 2,
    }


def _write(results_dir: Path, machine: str, commit: str, data: dict, env: str = ENV) -> None:
    folder = results_dir / machine
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "machine.json").write_text(json.dumps({"machine": machine, "version": 1}))
    (folder / f"{commit[:8]}-{env}.json").write_text(json.dumps(data))


C1, C2, C3 = "a" * 40, "b" * 40, "c" * 40
D1 = datetime(2026, 11, 20, 10, tzinfo=timezone.utc)
D2 = datetime(2026, 11, 21, 10, tzinfo=timezone.utc)
D3 = datetime(2026, 11, 22, 10, tzinfo=timezone.utc)


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    root.mkdir()
    (root / "benchmarks.json").write_text(json.dumps(_benchmarks_json()))
    # Written out of date order on purpose: the newest commit first.
    _write(root, "box", C3, _result_file(C3, D3, {
        # blas 256, blas 512, naive 256 (failed: null), naive 512 (skipped: NaN)
        KERNEL_MS: [[0.30, 2.0, None, math.nan], CPU_PARAMS, "1", 0, 1.0],
        PLAIN: [[5.0], [], "7", 0, 1.0],
    }))
    _write(root, "box", C1, _result_file(C1, D1, {
        KERNEL_MS: [[0.25, 1.5, 14.0, 280.0], CPU_PARAMS, "1", 0, 1.0],
        PLAIN: [[4.0], [], "7", 0, 1.0],
    }))
    _write(root, "box", C2, _result_file(C2, D2, {
        KERNEL_MS: [[0.20, 1.4, 13.0, 270.0], CPU_PARAMS, "1", 0, 1.0],
        # An older version of the benchmark: other units of measure, not history.
        PLAIN: [[999.0], [], "6", 0, 1.0],
    }))
    _write(root, "gpu", C3, _result_file(C3, D3, {
        H2D_MS: [[0.9], CUDA_PARAMS, "1", 0, 1.0],
    }, machine="gpu", env="existing-py_python3"), env="existing-py_python3")
    (root / "box" / "notes.json").write_text("not asv")
    return root


@needs_asv
def test_load_history_orders_each_series_by_commit_date(results_dir: Path) -> None:
    history = load_history(results_dir)
    blas = history[SeriesKey(KERNEL_MS, ("cpu.blas", "256"), "box", ENV)]
    assert blas.commits == [C1, C2, C3]
    assert blas.values == [0.25, 0.20, 0.30]
    assert [p.date for p in blas.points] == [D1, D2, D3]
    assert blas.kernel == "cpu.blas"
    assert blas.params == {"kernel": "cpu.blas", "size": "256"}
    assert blas.metric == "kernel_ms"
    assert blas.unit == "ms"


@needs_asv
def test_failed_and_skipped_results_are_not_points(results_dir: Path) -> None:
    history = load_history(results_dir)
    naive256 = history[SeriesKey(KERNEL_MS, ("cpu.seq_naive", "256"), "box", ENV)]
    assert naive256.values == [14.0, 13.0]
    assert naive256.failed == [(C3, D3)]
    naive512 = history[SeriesKey(KERNEL_MS, ("cpu.seq_naive", "512"), "box", ENV)]
    assert naive512.values == [280.0, 270.0]
    assert naive512.failed == []


@needs_asv
def test_other_versions_are_dropped_unless_asked(results_dir: Path) -> None:
    plain = load_history(results_dir)[SeriesKey(PLAIN, (), "box", ENV)]
    assert plain.values == [4.0, 5.0]
    assert plain.kernel is None and plain.metric == "plain"
    everything = load_history(results_dir, any_version=True)[SeriesKey(PLAIN, (), "box", ENV)]
    assert everything.values == [4.0, 999.0, 5.0]


@needs_asv
def test_machines_are_kept_apart(results_dir: Path) -> None:
    history = load_history(results_dir)
    gpu = history[SeriesKey(H2D_MS, ("cuda.cublas", "1024"), "gpu", "existing-py_python3")]
    assert gpu.values == [0.9] and gpu.metric == "h2d_ms"
    only_box = load_history(results_dir, machine="box")
    assert {k.machine for k in only_box} == {"box"}
    assert [s.key.machine for s in select(history, ["cuda.cublas"])] == ["gpu"]
    assert len(select(history, ["cpu.blas", "cpu.seq_naive"], metric="kernel_ms")) == 4
    assert kernel_ids(history) == ["cpu.blas", "cpu.seq_naive", "cuda.cublas"]
    assert kernel_ids(history, metric="h2d_ms") == ["cuda.cublas"]


@needs_asv
def test_a_time_benchmark_reads_as_milliseconds_of_the_same_metric(tmp_path: Path) -> None:
    """asv's time_ benchmarks record seconds; history shows them as the ms series they
    continue (time_kernel -> kernel_ms)."""
    name = "sgemm_cpu.CpuKernels.time_kernel"
    root = tmp_path / "results"
    root.mkdir()
    (root / "benchmarks.json").write_text(json.dumps({name: {
        "name": name, "type": "time", "unit": "seconds", "version": "3",
        "param_names": ["kernel", "size"], "params": CUDA_PARAMS}, "version": 2}))
    _write(root, "box", C1, _result_file(C1, D1, {name: [[0.0025], CUDA_PARAMS, "3", 0, 1.0]}))
    series = load_history(root)[SeriesKey(name, ("cuda.cublas", "1024"), "box", ENV)]
    assert series.metric == "kernel_ms" and series.unit == "ms"
    assert series.values == [pytest.approx(2.5)]


def test_missing_results_dir_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="asv run"):
        load_history(tmp_path / "nowhere")


@needs_asv
def test_plot_history_writes_a_png(results_dir: Path, tmp_path: Path) -> None:
    history = load_history(results_dir)
    out = plot_history(history, ["cpu.blas", "cpu.seq_naive"], tmp_path / "plots" / "h.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 5000


@needs_asv
def test_plot_history_of_a_single_commit(results_dir: Path, tmp_path: Path) -> None:
    history = load_history(results_dir)
    out = plot_history(history, ["cuda.cublas"], tmp_path / "gpu.png", metric="h2d_ms")
    assert out.read_bytes()[:4] == b"\x89PNG"


@needs_asv
def test_plot_history_without_data_raises(results_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no kernel_ms history"):
        plot_history(load_history(results_dir), ["cuda.99_none"], tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


@needs_asv
def test_summary_names_dates_values_and_failed_commits(results_dir: Path) -> None:
    history = load_history(results_dir)
    text = summary(history, ["cpu.seq_naive"], "kernel_ms")
    lines = text.splitlines()
    assert len(lines) == 2  # sizes 256 and 512
    assert lines[0].startswith("cpu.seq_naive [box] size=256: 2 commits 2026-11-20 .. 2026-11-21")
    assert "failed at cccccccc (2026-11-22)" in lines[0]
    assert "failed" not in lines[1]


@needs_asv
def test_metrics_and_machines(results_dir: Path) -> None:
    history = load_history(results_dir)
    assert metrics(history) == ["h2d_ms", "kernel_ms", "plain"]
    assert machines(results_dir) == ["box", "gpu"]
    assert metrics(load_history(results_dir, machine="gpu")) == ["h2d_ms"]
    assert load_history(results_dir, machine="nobody") == {}


@needs_asv
def test_plot_history_marks_failed_commits(results_dir: Path, tmp_path: Path) -> None:
    history = load_history(results_dir)
    out = plot_history(history, ["cpu.seq_naive"], tmp_path / "failed.png")
    assert out.read_bytes()[:4] == b"\x89PNG"


@needs_asv
def test_history_command_takes_metric_and_machine(results_dir: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "h2d.png"
    assert main(["history", "--results-dir", str(results_dir), "--metric", "h2d_ms",
                 "--machine", "gpu", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "cuda.cublas [gpu] size=1024: 1 commits 2026-11-22" in printed
    assert out.read_bytes()[:4] == b"\x89PNG"
    # Without --out: the summary only, no file anywhere.
    here = sorted(Path.cwd().iterdir())
    assert main(["history", "--results-dir", str(results_dir), "--machine", "gpu",
                 "--metric", "h2d_ms"]) == 0
    assert "add --out FILE.png to draw it" in capsys.readouterr().out
    assert sorted(Path.cwd().iterdir()) == here
    assert main(["history", "--results-dir", str(results_dir), "--metric", "gflops"]) == 2
    assert "no gflops history; recorded: h2d_ms, kernel_ms, plain" in capsys.readouterr().err
    assert main(["history", "--results-dir", str(results_dir), "--machine", "tpu"]) == 2
    assert "machines: box, gpu" in capsys.readouterr().err


def test_history_without_the_bench_extra_is_one_line_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "asv", None)  # as if asv were not installed
    assert main(["history", "--results-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "mmsuite: error: reading asv results needs asv, which is not installed: "
        "pip install 'mmsuite[bench]'"]


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, "1" * 10**6,
                                  "(" * 99 + ")" * 99])
def test_a_crafted_parameter_string_is_not_evaluated(text) -> None:
    assert history._unquote(text) == text[:history.MAX_PARAM_REPR]


def test_a_machine_name_must_stay_inside_the_results_dir(tmp_path) -> None:
    for name in ("../../..", "..", "a/b", ""):
        with pytest.raises(ValueError, match="is not an asv machine name"):
            history.load_history(tmp_path, machine=name)
