"""The problem spec: validation, inputs, flops and presets."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mmsuite import PRESETS, Problem, preset
from mmsuite.problem import (
    DEPRECATED_PRESETS,
    DISTRIBUTIONS,
    LAYOUTS,
    PRESET_HELP,
    SPECIAL_EVERY,
    label_of,
    parse_shape,
)
from mmsuite.verify import FLOAT32_MAX, FP32_TINY


def test_inputs_have_logical_shapes_and_float32() -> None:
    a, b, c = Problem(3, 5, 7).inputs()
    assert (a.shape, b.shape, c.shape) == ((3, 7), (7, 5), (3, 5))
    assert {x.dtype for x in (a, b, c)} == {np.dtype(np.float32)}


def test_batch_axis_only_when_batched() -> None:
    a, b, c = Problem(3, 5, 7, batch=4).inputs()
    assert (a.shape, b.shape, c.shape) == ((4, 3, 7), (4, 7, 5), (4, 3, 5))


def test_row_layout_is_c_order_and_col_layout_is_column_major_per_matrix() -> None:
    a_row = Problem(3, 5, 7).inputs()[0]
    a_col = Problem(3, 5, 7, layout="col").inputs()[0]
    assert a_row.flags.c_contiguous and a_col.flags.f_contiguous
    np.testing.assert_array_equal(a_row, a_col)  # same values, other storage
    batched = Problem(3, 5, 7, batch=2, layout="col").inputs()[0]
    assert batched.strides == (4 * 3 * 7, 4, 4 * 3)  # batch outermost, columns contiguous


def test_inputs_are_uniform_nonzero_and_reproducible() -> None:
    p = Problem(64, 64, 64, seed=3)
    first, again = p.inputs(), p.inputs()
    for x, y in zip(first, again):
        np.testing.assert_array_equal(x, y)
        assert np.all(x != 0) and x.min() >= -1 and x.max() <= 1
    other = Problem(64, 64, 64, seed=4).inputs()[0]
    assert not np.array_equal(first[0], other)


def test_flops() -> None:
    assert Problem(2, 3, 4, batch=5).flops == 2 * 2 * 3 * 4 * 5


@pytest.mark.parametrize("kwargs,message", [
    ({"m": 0}, "m must be a positive integer"),
    ({"n": -3}, "n must be a positive integer"),
    ({"k": 2.5}, "k must be a positive integer"),
    ({"batch": 0}, "batch must be a positive integer"),
    ({"layout": "diag"}, "layout must be one of"),
    ({"alpha": math.nan}, "alpha must be finite"),
    ({"beta": math.inf}, "beta must be finite"),
    ({"m": True}, "m must be a positive integer"),
    ({"seed": -1}, "seed must be a non-negative integer, got -1"),
    ({"m": 2**31}, "m must be at most 2147483647"),
    ({"alpha": 1e39}, r"alpha must be finite in float32 \(\|alpha\| <= 3.403e\+38\), got 1e\+39"),
    ({"beta": -4e38}, "beta must be finite in float32"),
])
def test_bad_fields_raise_clear_value_errors(kwargs: dict, message: str) -> None:
    fields = {"m": 4, "n": 4, "k": 4} | kwargs
    with pytest.raises(ValueError, match=message):
        Problem(**fields)


def test_numpy_integers_are_accepted() -> None:
    assert Problem(np.int64(4), 4, 4).m == 4


def test_presets_name_their_problems() -> None:
    assert preset("square2048") == [Problem(2048, 2048, 2048)]
    assert preset("wide2000x6000") == [Problem(2000, 6000, 2000)]
    assert preset("square4096") == [Problem(4096, 4096, 4096)]
    assert preset("batch100") == [Problem(1000, 1000, 1000, batch=100)]
    assert len(preset("sweep")) > 3 and set(PRESETS) >= {"sweep"}
    with pytest.raises(KeyError, match="unknown preset"):
        preset("nope")


@pytest.mark.parametrize("old,new", list(DEPRECATED_PRESETS.items()))
def test_old_preset_names_still_give_the_same_problems_with_a_warning(old, new) -> None:
    assert old not in PRESETS and old not in PRESET_HELP
    with pytest.warns(DeprecationWarning, match=f"preset {old} is deprecated.*use {new}$"):
        assert preset(old) == preset(new)


@pytest.mark.parametrize("text,expected", [("4x5x6", (4, 5, 6)), ("128", (128, 128, 128)),
                                           ("2X3x4", (2, 3, 4))])
def test_parse_shape(text: str, expected: tuple) -> None:
    assert parse_shape(text) == expected


@pytest.mark.parametrize("text,message", [
    ("4x5", "MxNxK"), ("axbxc", "integer sizes"), ("0x1x1", "positive"), ("1x2x3x4", "MxNxK"),
    ("", "shape is empty"), ("  ", "shape is empty"), ("-3x4x4", "positive, got '-3x4x4'"),
])
def test_parse_shape_rejects_bad_text(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_shape(text)


def test_float32_extremes_are_accepted() -> None:
    largest = float(np.finfo(np.float32).max)
    assert Problem(2, 2, 2, alpha=largest, beta=-largest).alpha == largest


def test_host_bytes_covers_inputs_and_the_float64_reference() -> None:
    p = Problem(100, 200, 300, batch=2)
    float32_inputs = p.nbytes
    float64_reference = 2 * 8 * 2 * 100 * 200  # the product and the scaled sum
    assert p.host_bytes >= 3 * float32_inputs + float64_reference
    assert Problem(20000, 20000, 20000).host_bytes > 16 * 2**30


def test_one_label_names_the_problem_and_what_differs_from_the_defaults() -> None:
    assert Problem(35, 79, 19).shape_label == "35x79x19"
    assert Problem(8, 8, 8, batch=3, layout="col").shape_label == "batch 3 of 8x8x8 (col-major)"
    assert Problem(2, 3, 4, alpha=2.0, beta=0.5, seed=7).shape_label == \
        "2x3x4 (alpha=2 beta=0.5, seed 7)"


def test_a_record_problem_reads_back_as_the_problem() -> None:
    problem = Problem(5, 6, 7, batch=2, layout="col", alpha=0.5, beta=1.0, seed=3)
    assert Problem.from_dict(problem.to_dict()) == problem
    assert label_of({"m": 4, "n": 4, "k": 4, "batch": 1}) == "4x4x4"
    wide = Problem(5, 6, 7, distribution="wide")
    assert Problem.from_dict(wide.to_dict()) == wide
    assert wide.shape_label == "5x6x7 (wide inputs)"


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_input_class_is_seeded_float32_and_without_zeros(distribution: str,
                                                                layout: str) -> None:
    problem = Problem(40, 30, 51, batch=2, layout=layout, seed=4, distribution=distribution)
    first, again = problem.inputs(), problem.inputs()
    for name, x, y in zip("ABC", first, again):
        assert x.shape == problem.logical_shape(name)
        assert x.dtype == np.float32 and np.array_equal(x, y, equal_nan=True)
        assert (x != 0).all()
        assert np.isfinite(x).all() == (distribution != "special")
    reseeded = Problem(40, 30, 51, batch=2, layout=layout, seed=5, distribution=distribution)
    assert not np.array_equal(first[0], reseeded.inputs()[0], equal_nan=True)
    assert problem.to_dict().get("inputs", "uniform") == distribution
    assert Problem.from_dict(problem.to_dict()) == problem


def _products(problem: Problem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every product a[i, p] * b[p, j] (float64, exact), and the float64 sums."""
    a, b, _ = (x.astype(np.float64) for x in problem.inputs())
    return a[:, :, None] * b[None, :, :], a @ b, np.abs(a) @ np.abs(b)


def test_tiny_products_are_all_subnormal_and_their_sums_normal() -> None:
    products, sums, _ = _products(Problem(20, 30, 8, distribution="tiny"))
    assert (np.abs(products) < FP32_TINY).all() and (np.abs(products) >= FP32_TINY / 4).all()
    assert (np.abs(sums) >= FP32_TINY).all()
    assert (sums > 0).any() and (sums < 0).any()


def test_huge_products_are_near_1e34_and_their_sums_below_fp32_max_up_to_k_2_to_14() -> None:
    products, sums, _ = _products(Problem(10, 12, 64, distribution="huge"))
    assert (np.abs(products) > 5e33).all() and (np.abs(products) < 2.1e34).all()
    assert (np.abs(sums) < FLOAT32_MAX).all()
    a, b, _ = Problem(1, 1, 2**15, distribution="huge").inputs()
    assert abs(a.astype(np.float64) @ b) > FLOAT32_MAX


def test_cancel_sums_are_far_smaller_than_their_terms() -> None:
    for k in (2, 19, 64):
        _, sums, magnitudes = _products(Problem(30, 20, k, seed=k, distribution="cancel"))
        assert (np.abs(sums) < magnitudes / 100).all()
        assert np.median(magnitudes) > 100 * np.sqrt(k)


def test_scaled_rows_and_columns_span_plus_minus_2_to_40() -> None:
    a, b, c0 = Problem(200, 200, 64, distribution="scaled").inputs()
    # Each row of A (column of B) holds 64 values of [-1, 1] times its power of two.
    row_binades = np.log2(np.abs(a).max(axis=1))
    column_binades = np.log2(np.abs(b).max(axis=0))
    for binades in (row_binades, column_binades):
        assert binades.max() <= 40 and binades.min() > -41 and np.ptp(binades) > 70
    assert np.isfinite(c0).all()


def test_integers_are_small_nonzero_integers() -> None:
    for x in Problem(30, 30, 30, distribution="integers").inputs():
        assert (x == np.round(x)).all() and np.abs(x).max() == 8 and np.abs(x).min() == 1


def test_special_inputs_hold_a_few_nan_and_both_infinities() -> None:
    a, b, c0 = Problem(64, 64, 64, distribution="special").inputs()
    for x in (a, b, c0):
        assert 1 <= (~np.isfinite(x)).sum() <= 1 + x.size // SPECIAL_EVERY
    values = np.concatenate([x.ravel() for x in (a, b, c0)])
    assert np.isnan(values).any() and (values == np.inf).any() and (values == -np.inf).any()


def test_wide_inputs_span_many_binades_with_both_signs() -> None:
    a, _, _ = Problem(200, 10, 200, distribution="wide").inputs()
    exponents = np.unique(np.floor(np.log2(np.abs(a))))
    assert len(exponents) >= 20
    assert (a < 0).mean() == pytest.approx(0.5, abs=0.05)
    uniform, _, _ = Problem(200, 10, 200).inputs()
    assert np.abs(a).max() / np.abs(a).min() > 1e6 > np.abs(uniform).max() / 1e-3


def test_an_unknown_distribution_is_refused() -> None:
    with pytest.raises(ValueError, match="inputs must be one of uniform, normal, wide, tiny, "
                       "huge, cancel, scaled, integers, special, got 'lognormal'"):
        Problem(4, 4, 4, distribution="lognormal")
