"""Verification catches wrong, partial, non-finite and TF32-grade results."""

from __future__ import annotations

import numpy as np
import pytest

from mmsuite import Problem
from mmsuite.verify import Reference, check, exact_in_fp32, reference, tolerance


def _exact(p: Problem) -> tuple[np.ndarray, Reference]:
    ref = reference(p, p.inputs())
    return ref.value.astype(np.float32), ref


def _tf32(x: np.ndarray) -> np.ndarray:
    """x rounded to TF32 (10 mantissa bits, to nearest), as tensor cores read it."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x1000) & ~np.uint64(0x1FFF)).astype(np.uint32).view(np.float32)


def test_fp32_result_passes() -> None:
    out, ref = _exact(Problem(64, 48, 300))
    v = check(out, ref, 300)
    assert v.ok and v.max_rel_err < 1e-6 and v.err_bound < tolerance(300)


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
    assert not v.ok and v.max_rel_err > 5e-3 and "componentwise error" in v.reason


def test_tolerance_is_highams_worst_case_for_k_plus_2_roundings() -> None:
    u = 2.0**-24
    for k in (1, 19, 4096):
        assert tolerance(k) == pytest.approx((k + 2) * u / (1 - (k + 2) * u))
    assert tolerance(2**30) == 1.0


def test_tf32_rounded_inputs_fail_the_fp32_class_and_pass_the_tf32_class() -> None:
    p = Problem(64, 64, 64)
    a, b, c0 = p.inputs()
    ref = reference(p, (a, b, c0))
    tf32 = np.matmul(_tf32(a), _tf32(b))
    assert not check(tf32, ref, 64).ok
    assert not check(tf32, ref, 64, "fp32-accurate").ok
    assert check(tf32, ref, 64, "tf32").ok
    assert tolerance(64, "fp32-accurate") == tolerance(64)
    assert not check(tf32 * np.float32(1.01), ref, 64, "tf32").ok


def test_the_bound_is_componentwise_where_relative_error_breaks_down() -> None:
    """On cancelling sums an FP32 answer has a large relative error and a small bound, and
    an error of the operands' size shows in the bound."""
    p = Problem(32, 32, 64, distribution="cancel")
    a, b, c0 = p.inputs()
    ref = reference(p, (a, b, c0))
    fp32 = np.matmul(a, b)
    v = check(fp32, ref, 64)
    assert v.ok and v.max_rel_err > 10 * v.err_bound
    wrong = fp32.copy()
    wrong[5, 6] += np.float32(1e-3) * np.float32(ref.scale[5, 6])
    assert not check(wrong, ref, 64).ok


def test_products_flushed_to_zero_fail_and_subnormal_products_pass() -> None:
    p = Problem(16, 16, 16, distribution="tiny")
    a, b, c0 = p.inputs()
    ref = reference(p, (a, b, c0))
    assert check(np.matmul(a, b), ref, 16).ok
    flushed = np.zeros_like(ref.value, dtype=np.float32)
    v = check(flushed, ref, 16)
    assert not v.ok and v.err_bound > 0.1


def test_integer_inputs_are_held_to_the_exact_answer() -> None:
    p = Problem(16, 16, 40, alpha=-0.75, beta=1.5, distribution="integers")
    out, ref = _exact(p)
    assert ref.exact and check(out, ref, 40).ok
    out[0, 0] = np.nextafter(out[0, 0], np.float32(np.inf))
    v = check(out, ref, 40)
    assert not v.ok and v.tolerance == 0.0 and "exact" in v.reason
    assert not exact_in_fp32(Problem(16, 16, 2**17, distribution="integers"))
    assert not exact_in_fp32(Problem(16, 16, 40, alpha=0.1, distribution="integers"))
    assert not exact_in_fp32(Problem(16, 16, 40))


@pytest.mark.parametrize("beta", [0.0, 1.5])
def test_special_outputs_follow_ieee_and_the_rest_the_bound(beta: float) -> None:
    p = Problem(40, 30, 20, beta=beta, distribution="special")
    out, ref = _exact(p)
    assert np.isnan(ref.value).any() and np.isinf(ref.value).any() and \
        np.isfinite(ref.value).any()
    assert check(out, ref, 20).ok
    nan_at = np.argwhere(np.isnan(ref.value))[0]
    inf_at = np.argwhere(np.isinf(ref.value))[0]
    finite_at = np.argwhere(np.isfinite(ref.value))[0]
    for at, value, says in ((nan_at, 1.0, "not NaN"), (inf_at, np.float32(-out[tuple(inf_at)]),
                                                        "not Inf of the sign"),
                            (finite_at, np.inf, "where the reference is finite")):
        wrong = out.copy()
        wrong[tuple(at)] = value
        v = check(wrong, ref, 20)
        assert not v.ok and says in v.reason, v.reason


def test_a_reference_beyond_fp32_range_is_said_in_the_verdict() -> None:
    p = Problem(1, 2, 2**15, distribution="huge")
    a, b, c0 = p.inputs()
    ref = reference(p, (a, b, c0))
    with np.errstate(over="ignore"):  # the FP32 product overflows, as it must
        out = np.matmul(a, b)
    v = check(out, ref, p.k)
    assert np.isinf(out).all() and not v.ok and "reference leaves FP32's range" in v.reason


def test_shape_mismatch_fails() -> None:
    out, ref = _exact(Problem(4, 5, 6))
    assert not check(out.T, ref, 6).ok


def test_reference_applies_alpha_and_beta_and_scales_the_error_bound() -> None:
    p = Problem(3, 4, 5, alpha=2.0, beta=-1.0)
    a, b, c = p.inputs()
    ref = reference(p, (a, b, c))
    np.testing.assert_allclose(ref.value, 2.0 * (a.astype(float) @ b) - c)
    np.testing.assert_allclose(ref.scale, 2.0 * (np.abs(a.astype(float)) @ np.abs(b)) + np.abs(c))
    unread = reference(Problem(3, 4, 5, beta=0.0), (a, b, np.full_like(c, np.nan)))
    assert np.isfinite(unread.value).all()  # beta == 0: C0 is not read, as BLAS has it
