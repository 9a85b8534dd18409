"""mmsuite.run: phases, derived rates and verification in one Measurement."""

from __future__ import annotations

import numpy as np
import pytest

import mmsuite
from mmsuite import Problem
from mmsuite.measure import PhaseStats


def test_run_returns_output_times_rates_and_verdict() -> None:
    p = Problem(64, 32, 48)
    m = mmsuite.run("cpu.seq_naive", p, repeats=3, warmup=1)
    assert m.output.shape == (64, 32) and m.ok and m.max_rel_err < 1e-5
    assert len(m.kernel_ms.samples) == 3 and m.kernel_ms.min <= m.kernel_ms.median
    assert m.h2d_ms.median == 0 and m.d2h_ms.median == 0  # host backend: no transfers
    assert m.gflops == pytest.approx(p.flops / (m.kernel_ms.median * 1e6))
    assert m.host_gflops == pytest.approx(m.gflops)
    a, b, _ = p.inputs()
    np.testing.assert_allclose(m.output, a @ b, rtol=1e-4, atol=1e-5)


def test_record_is_json_ready() -> None:
    record = mmsuite.run("cpu.blas", Problem(8, 8, 8), repeats=2).to_record()
    assert record["status"] == "ok" and record["kernel"] == "cpu.blas"
    assert set(record["kernel_ms"]) >= {"median", "min", "max", "spread", "samples"}


def test_bad_repeats_and_unknown_kernel() -> None:
    with pytest.raises(ValueError, match="repeats"):
        mmsuite.run("cpu.blas", Problem(2, 2, 2), repeats=0)
    with pytest.raises(KeyError, match="did you mean"):
        mmsuite.run("cpu.bla", Problem(2, 2, 2))


def test_phase_stats() -> None:
    s = PhaseStats.of([3.0, 1.0, 2.0])
    assert (s.median, s.min, s.max) == (2.0, 1.0, 3.0) and s.spread == pytest.approx(1.0)
    assert PhaseStats.of([]).median == 0.0
