"""FP32 peak from the recorded device figures, and the flag on results above it."""

from __future__ import annotations

import math
import shutil

import pytest

from mmsuite import peak

H100 = {"gpu": "NVIDIA H100 80GB HBM3", "compute_capability": "90", "sm_count": 132,
        "sm_clock_mhz": 1980}
HOST = {"cpu": "AMD EPYC", "cpu_cores": 2, "cpu_max_mhz": 3300.0, "cpu_simd": "avx512"}


def env(**backends: dict) -> dict:
    return {**HOST, "backends": backends}


def record(backend: str, gflops: float, status: str = "ok", **extra) -> dict:
    return {"kernel": f"{backend}.k", "backend": backend, "status": status, "reason": "",
            "gflops": gflops, **extra}


@pytest.mark.parametrize(("value", "expected"), [
    ("90", (9, 0)), ("86", (8, 6)), ("100", (10, 0)), ("8.9", (8, 9)), ((12, 0), (12, 0)),
    ("", None), (None, None), ("sm", None),
])
def test_compute_capability_forms(value, expected) -> None:
    assert peak.parse_compute_capability(value) == expected


def test_h100_peak_is_sms_lanes_fma_clock() -> None:
    p = peak.gpu_peak(132, 1980, (9, 0), "H100")
    assert p.gflops == pytest.approx(66_908.16)
    assert "132 SMs x 128 lanes (sm_90) x 2 x 1980 MHz" in p.how


def test_a100_has_64_lanes_per_sm_and_ada_128() -> None:
    assert peak.gpu_peak(108, 1410, (8, 0)).gflops == pytest.approx(19_491.84)
    assert peak.gpu_lanes_per_sm((8, 6)) == peak.gpu_lanes_per_sm((8, 9)) == 128


def test_gpu_peak_unknown_when_a_figure_is_missing() -> None:
    assert peak.gpu_peak(0, 1980, (9, 0)) is None
    assert peak.gpu_peak(132, 0, (9, 0)) is None
    assert peak.gpu_peak(132, 1980, (2, 0)) is None  # architecture not in the table


def test_cpu_peak_by_vector_extension() -> None:
    assert peak.cpu_peak(2, 3300, "avx512").gflops == pytest.approx(2 * 3.3 * 64)
    assert peak.cpu_peak(4, 3000, "avx2").gflops == pytest.approx(4 * 3.0 * 32)
    assert peak.cpu_peak(2, 3300, None) is None


MEASURED = {"gflops_by_threads": {"1": 100.0, "2": 196.0}, "lanes": 8, "chains": 12}


def measured_env(**backends: dict) -> dict:
    return {**env(**backends), "cpu_fma_probe": MEASURED,
            "cpu_peak_source": peak.PEAK_MEASURED, "cpu_simd": "avx2",
            "cpu_peak_table_gflops_per_core": 105.6}


def test_cpu_peak_is_the_fma_probe_at_the_threads_the_row_used() -> None:
    rows = [record("cpu", 49.0, info={"threads": 1}), record("cpu", 98.0, info={"threads": 2}),
            record("cpu", 98.0, info={"threads": 8})]  # more threads than cores: all cores
    peak.annotate(rows, measured_env(cpu={"omp_threads": 2}))
    assert [r["peak_gflops"] for r in rows] == [100.0, 196.0, 196.0]
    assert [r["pct_peak"] for r in rows] == pytest.approx([49.0, 50.0, 50.0])
    how = peak.peak_for(rows[1], measured_env()).how
    assert how.startswith("measured: 196 GFLOP/s on 2 threads (FMA probe)")


def test_above_the_measured_peak_but_below_the_table_is_no_measurement_error() -> None:
    """A measured peak can read low (two threads placed on one core's hardware threads):
    only a figure above the table's peak too is flagged."""
    rows = [record("cpu", 205.0, info={"threads": 2}), record("cpu", 800.0, info={"threads": 2})]
    peak.annotate(rows, measured_env(cpu={"omp_threads": 2}))  # table: 2 x 3.3 GHz x 32
    assert rows[0]["status"] == "ok" and rows[0]["pct_peak"] == pytest.approx(205 / 1.96)
    assert rows[1]["status"] == "invalid" and "the table's 211.2" in rows[1]["reason"]


def test_a_thread_count_between_probed_ones_scales_the_count_below() -> None:
    probe = {"gflops_by_threads": {"1": 50.0, "2": 98.0, "4": 190.0, "8": 360.0}}
    environment = {"cpu_fma_probe": probe, "cpu_peak_source": peak.PEAK_MEASURED}
    p = peak.peak_for(record("cpu", 1.0, info={"threads": 6}), environment)
    assert p.gflops == pytest.approx(190.0 * 6 / 4) and p.how.endswith("x 6/4")


def test_the_table_judges_files_without_a_probe_and_hosts_without_a_compiler() -> None:
    row = record("cpu", 211.2, info={"threads": 2})
    peak.annotate([row], {**measured_env(), "cpu_peak_source": peak.PEAK_TABLE})
    assert row["peak_gflops"] == pytest.approx(2 * 3.3 * 32)


def test_opencl_on_a_cpu_takes_the_measured_figure_at_its_compute_units() -> None:
    row = record("opencl", 50.0)
    peak.annotate([row], measured_env(opencl={"opencl_device_type": "CPU",
                                               "compute_units": 2}))
    assert row["peak_gflops"] == 196.0


def test_cross_check_speaks_only_when_table_and_probe_disagree() -> None:
    assert peak.cross_check(measured_env()) is None  # 100 against 105.6: the table holds
    zen1 = {**measured_env(), "cpu_peak_table_gflops_per_core": 211.2}  # AVX2 on 128-bit units
    line = peak.cross_check(zen1)
    assert line.startswith("CPU peak: the FMA probe measured 100 GFLOP/s a core, 0.47x")
    assert "avx2 table" in line and "uses the measured figure" in line
    assert peak.cross_check(env()) is None  # an old file: nothing to cross-check


def test_simd_from_cpu_flags() -> None:
    assert peak.cpu_simd("flags\t: fpu sse2 avx2 fma avx512f\n") == "avx512"
    assert peak.cpu_simd("flags\t: fpu sse2 avx avx2 fma\n") == "avx2"
    assert peak.cpu_simd("flags\t: fpu sse2 avx\n") is None
    assert peak.cpu_simd("processor : 0\n") is None


def test_cpu_clock_prefers_sysfs_max(monkeypatch) -> None:
    monkeypatch.setattr(peak, "_sysfs_max_mhz", lambda: 3700.0)
    monkeypatch.setattr(peak, "measured_clock_mhz", lambda: pytest.fail("sysfs is enough"))
    figures = peak.cpu_figures()
    assert figures["cpu_max_mhz"] == 3700.0
    assert figures["cpu_clock_source"] == "sysfs cpuinfo_max_freq"


def test_cpu_clock_without_sysfs_keeps_the_higher_of_listed_and_measured(monkeypatch) -> None:
    monkeypatch.setattr(peak, "_sysfs_max_mhz", lambda: None)
    monkeypatch.setattr(peak, "_cpuinfo", lambda: "cpu MHz\t\t: 2596.1\nflags\t: avx512f\n")
    monkeypatch.setattr(peak, "measured_clock_mhz", lambda: 3650)
    figures = peak.cpu_figures()
    assert (figures["cpu_max_mhz"], figures["cpu_simd"]) == (3650, "avx512")
    assert figures["cpu_clock_source"].startswith("measured")
    monkeypatch.setattr(peak, "measured_clock_mhz", lambda: None)  # no compiler
    figures = peak.cpu_figures()
    assert figures["cpu_max_mhz"] == 2596.1
    assert figures["cpu_clock_source"] == "/proc/cpuinfo cpu MHz"


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="measuring the clock needs a C compiler")
def test_measured_clock_is_a_plausible_core_clock() -> None:
    mhz = peak.measured_clock_mhz()
    assert mhz is not None and 300 < mhz < 7000


def test_annotate_adds_percent_of_peak() -> None:
    records = [record("cpu", 211.2, info={"threads": 2}),
               record("cuda", 51_600.0)]
    peak.annotate(records, env(cpu={"omp_threads": 2}, cuda=H100))
    cpu, cuda = records
    assert cpu["peak_gflops"] == pytest.approx(422.4)
    assert cpu["pct_peak"] == pytest.approx(50.0)
    assert cuda["pct_peak"] == pytest.approx(100 * 51_600 / 66_908.16)
    assert cpu["status"] == cuda["status"] == "ok"


def test_cpu_peak_counts_the_threads_the_row_used() -> None:
    one_thread = record("cpu", 100.0, info={"threads": 1})
    peak.annotate([one_thread], env(cpu={"omp_threads": 2}))
    assert one_thread["peak_gflops"] == pytest.approx(211.2)


def test_a_result_above_peak_is_a_measurement_error() -> None:
    planted = record("cuda", 120_000.0)  # 1.8x an H100's FP32 peak
    failed = record("cuda", 90_000.0, status="failed", reason="error above tolerance")
    peak.annotate([planted, failed], env(cuda=H100))
    assert planted["status"] == "invalid"
    assert planted["reason"].startswith("measurement error:")
    assert "179%" in planted["reason"] and "NVIDIA H100" in planted["reason"]
    assert planted["pct_peak"] > 100
    # A verification failure stays one: it says more than the clock does.
    assert failed["status"] == "failed" and failed["reason"] == "error above tolerance"


def test_opencl_on_a_cpu_takes_the_cpu_figure() -> None:
    pocl = {"opencl_device": "pthread-skylake-avx512-AMD EPYC", "opencl_device_type": "CPU",
            "compute_units": 2, "max_clock_mhz": 2596}
    row = record("opencl", 500.0)
    peak.annotate([row], env(opencl=pocl))
    assert row["peak_gflops"] == pytest.approx(422.4)  # HOST's clock, not the device's 2596
    assert row["status"] == "invalid"


def test_opencl_on_an_nvidia_gpu_takes_the_gpu_figure() -> None:
    nv = {"opencl_device": "NVIDIA H100 80GB HBM3", "opencl_platform": "NVIDIA CUDA",
          "opencl_device_type": "GPU", "compute_units": 132, "max_clock_mhz": 1980}
    row = record("opencl", 30_000.0)
    peak.annotate([row], env(opencl=nv, cuda=H100))
    assert row["peak_gflops"] == pytest.approx(66_908.16)
    alone = record("opencl", 30_000.0)  # no CUDA record: lanes assumed, not guessed low
    peak.annotate([alone], env(opencl=nv))
    assert alone["peak_gflops"] == pytest.approx(66_908.16)


def test_records_without_figures_are_left_alone() -> None:
    old = {"backends": {"cpu": {}}}  # a file from before the clock was recorded
    rows = [record("cpu", 1e9), record("cuda", math.nan), record("cpu", 5.0, status="error"),
            {"kernel": "cpu.x", "backend": "cpu", "status": "unavailable", "reason": "no"}]
    peak.annotate(rows, old)
    assert all("pct_peak" not in r for r in rows)
    assert rows[0]["status"] == "ok"


def test_multi_gpu_rows_take_their_device() -> None:
    cuda = {**H100, "devices": [{"index": 0, "sm_count": 132}, {"index": 1, "sm_count": 66}]}
    row = record("cuda", 1000.0, device=1)
    peak.annotate([row], env(cuda=cuda))
    assert row["peak_gflops"] == pytest.approx(66_908.16 / 2)


def test_the_run_environment_records_the_cpu_figures() -> None:
    from mmsuite import environment

    host = environment.host_environment()
    assert {"cpu_max_mhz", "cpu_simd", "cpu_clock_source", "cpu_fma_probe",
            "cpu_peak_table_gflops_per_core", "cpu_peak_source"} <= set(host)
    if host["cpu_fma_probe"]:
        assert host["cpu_peak_source"] == peak.PEAK_MEASURED
        assert peak.peak_for(record("cpu", 1.0), {**host, "backends": {}}).how.startswith(
            "measured:")
    elif host["cpu_max_mhz"] and host["cpu_simd"]:
        assert host["cpu_peak_source"] == peak.PEAK_TABLE
        assert peak.peak_for(record("cpu", 1.0), {**host, "backends": {}}) is not None


def test_run_records_percent_of_peak(tmp_path) -> None:
    import json

    from mmsuite import cli

    out = tmp_path / "run.json"
    assert cli.main(["run", "--kernel", "cpu.blas", "--shape", "64x64x64", "--repeats", "3",
                     "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    (row,) = document["results"]
    expected = peak.peak_for(row, document["environment"])
    if expected is None:
        pytest.skip("this CPU's clock or vector width is unknown: no peak to record")
    assert row["peak_gflops"] == pytest.approx(expected.gflops)
    assert 0 < row["pct_peak"] <= 100 and row["status"] == "ok"


def test_tensor_core_rows_are_judged_by_the_tf32_tensor_peak() -> None:
    tf32 = record("cuda", 350_000.0, precision="tf32")
    accurate = record("cuda", 100_000.0, precision="fp32-accurate")
    fp32 = record("cuda", 51_600.0, precision="fp32")
    peak.annotate([tf32, accurate, fp32], env(cuda=H100))
    tensor = 132 * 2048 * 1980 / 1e3  # 535 TFLOP/s at the maximum clock
    assert tf32["peak_gflops"] == pytest.approx(tensor) == accurate["peak_gflops"]
    assert tf32["peak_kind"] == "TF32 tensor" and fp32["peak_kind"] == "FP32"
    assert tf32["status"] == accurate["status"] == "ok"  # above the FP32 peak, below this one
    planted = record("cuda", 600_000.0, precision="tf32")
    peak.annotate([planted], env(cuda=H100))
    assert planted["status"] == "invalid" and "TF32 tensor peak" in planted["reason"]


def test_no_tensor_peak_is_claimed_for_an_unknown_architecture() -> None:
    row = record("cuda", 1000.0, precision="tf32")
    peak.annotate([row], env(cuda={**H100, "compute_capability": "75"}))
    assert "peak_gflops" not in row
    both = peak.device_peaks(132, 1980, (9, 0))
    assert both["FP32"].gflops == pytest.approx(66_908.16)
    assert both["TF32 tensor"].gflops == pytest.approx(535_265.28)
