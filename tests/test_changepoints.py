"""E-Divisive means on known series: a step is found where it is, a flat series and a lone
outlier give nothing, and Q is the energy statistic of Matteson and James."""

from __future__ import annotations

import numpy as np
import pytest

from mmsuite.changepoints import e_divisive, split_statistics


def noisy(level: float, n: int, noise: float, seed: int) -> np.ndarray:
    return level * np.exp(np.random.default_rng(seed).normal(0.0, noise, n))


def test_the_statistic_of_one_split_is_the_weighted_energy_distance() -> None:
    values = np.array([1.0, 2.0, 10.0, 12.0])
    # L = {1, 2}, R = {10, 12}: mean|L-R| = (9+11+8+10)/4 = 9.5; within: 1 and 2.
    expected = 2 * 2 / 4 * (2 * 9.5 - 1.0 - 2.0)
    assert split_statistics(values, min_size=2)[2] == pytest.approx(expected)
    assert np.isnan(split_statistics(values, min_size=2)[1])  # a side of one point


def test_a_step_is_found_at_its_index() -> None:
    values = np.concatenate([noisy(10.0, 6, 0.015, 1), noisy(10.8, 6, 0.015, 2)])
    changes = e_divisive(np.log(values))
    assert [c.index for c in changes] == [6]
    assert changes[0].p_value <= 0.01


def test_two_steps_are_both_found() -> None:
    values = np.concatenate([noisy(1.0, 8, 0.01, 3), noisy(1.2, 8, 0.01, 4),
                             noisy(0.9, 8, 0.01, 5)])
    assert [c.index for c in e_divisive(np.log(values))] == [8, 16]


def test_a_flat_series_has_no_change() -> None:
    assert e_divisive(np.log(noisy(5.0, 12, 0.02, 6))) == []


def test_a_lone_outlier_is_not_a_change() -> None:
    values = noisy(5.0, 12, 0.01, 7)
    values[5] *= 1.5  # one commit measured while something else ran
    assert e_divisive(np.log(values)) == []


def test_the_same_series_gives_the_same_answer() -> None:
    values = np.log(np.concatenate([noisy(1.0, 5, 0.02, 8), noisy(1.1, 5, 0.02, 9)]))
    assert e_divisive(values) == e_divisive(values)


def test_non_finite_values_are_refused() -> None:
    with pytest.raises(ValueError, match="finite"):
        e_divisive([1.0, float("nan"), 1.0, 1.0])
