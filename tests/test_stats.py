"""The shared statistics: the robust noise figure and the rank test."""

from __future__ import annotations

import numpy as np
import pytest

from mmsuite import stats


def test_robust_noise_is_scaled_mad_over_median() -> None:
    assert stats.robust_noise([1.0, 2.0, 3.0]) == pytest.approx(1.4826 * 1.0 / 2.0)
    assert stats.robust_noise([1.0, 1.0, 1.0, 9.0]) == 0.0  # one outlier does not move it
    assert stats.robust_noise([1.0]) is None


def test_average_ranks_share_ties() -> None:
    assert list(stats.average_ranks(np.array([3.0, 1.0, 3.0, 2.0]))) == [3.5, 1.0, 3.5, 2.0]


def test_u_test_on_separated_samples() -> None:
    # Reference values: SciPy's mannwhitneyu(method="asymptotic", use_continuity=True).
    u, p = stats.mann_whitney_u([4, 5, 6], [1, 2, 3])
    assert u == 9.0 and p == pytest.approx(0.080856, abs=1e-6)
    u, p = stats.mann_whitney_u([1, 2, 3], [4, 5, 6])
    assert u == 0.0 and p == pytest.approx(0.080856, abs=1e-6)


def test_u_test_with_ties() -> None:
    u, p = stats.mann_whitney_u([1, 2, 2, 3, 3, 3], [2, 3, 4, 4, 5])
    assert u == 5.5 and p == pytest.approx(0.0887137, abs=1e-6)


def test_u_test_on_identical_samples_finds_nothing() -> None:
    assert stats.mann_whitney_u([1.0] * 5, [1.0] * 5) == (12.5, 1.0)
    with pytest.raises(ValueError):
        stats.mann_whitney_u([], [1.0])
