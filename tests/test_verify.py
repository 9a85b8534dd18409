"""Verification catches wrong, partial, non-finite and TF32-grade results."""

from __future__ import annotations

import numpy as np

from mmsuite import Problem
from mmsuite.verify import check, reference, tolerance


def _exact(p: Problem) -> tuple[np.ndarray, np.ndarray]:
    ref = reference(p, p.inputs())
    return ref.astype(np.float32), ref


def test_fp32_result_passes() -> None:
    out, ref = _exact(Problem(64, 48, 300))
    v = check(out, ref, 300)
    assert v.ok and v.max_rel_err < 1e-6


def test_one_unwritten_element_fails() -> None:
    out, ref = _exact(Problem(16, 16, 16))
    out[3, 7] = np.nan
    v = check(out, ref, 16)
    assert not v.ok and "NaN" in v.reason


def test_inf_fails() -> None:
    out, ref = _exact(Problem(8, 8, 8))
    out[0, 0] = np.inf
    assert not check(out, ref, 8).ok


def test_wrong_values_fail_and_worst_batch_item_decides() -> None:
    out, ref = _exact(Problem(16, 16, 16, batch=3))
    out[2] *= 1.01
    v = check(out, ref, 16)
    assert not v.ok and v.max_rel_err > 5e-3


def test_tf32_grade_error_fails_at_benchmark_sizes() -> None:
    out, ref = _exact(Problem(64, 64, 4096))
    rng = np.random.default_rng(0)
    noisy = out * (1 + 3e-4 * rng.standard_normal(out.shape)).astype(np.float32)
    assert not check(noisy, ref, 4096).ok


def test_tolerance_grows_with_k() -> None:
    assert tolerance(1) < tolerance(1024) < tolerance(1 << 16) < 1e-3


def test_tf32_class_passes_tf32_grade_error_and_fp32_accurate_class_does_not() -> None:
    out, ref = _exact(Problem(64, 64, 4096))
    rng = np.random.default_rng(0)
    noisy = out * (1 + 3e-4 * rng.standard_normal(out.shape)).astype(np.float32)
    assert check(noisy, ref, 4096, "tf32").ok
    assert not check(noisy, ref, 4096, "fp32-accurate").ok
    assert tolerance(4096, "fp32-accurate") == tolerance(4096)
    wrong = out * np.float32(1.01)
    assert not check(wrong, ref, 4096, "tf32").ok


def test_shape_mismatch_fails() -> None:
    out, ref = _exact(Problem(4, 5, 6))
    assert not check(out.T, ref, 6).ok


def test_reference_applies_alpha_and_beta() -> None:
    p = Problem(3, 4, 5, alpha=2.0, beta=-1.0)
    a, b, c = p.inputs()
    np.testing.assert_allclose(reference(p, (a, b, c)), 2.0 * (a.astype(float) @ b) - c)
