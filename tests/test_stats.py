"""The shared statistics: the robust noise figure, the U test of two sample sets and the
paired ratio of alternating rounds. The exact distributions are checked against SciPy's."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from mmsuite import stats


def test_robust_noise_is_scaled_mad_over_median() -> None:
    assert stats.robust_noise([1.0, 2.0, 3.0]) == pytest.approx(1.4826 * 1.0 / 2.0)
    assert stats.robust_noise([1.0, 1.0, 1.0, 9.0]) == 0.0  # one outlier does not move it
    assert stats.robust_noise([1.0]) is None


# ---------------------------------------------------------------- the U test
def test_average_ranks_share_ties() -> None:
    assert list(stats.average_ranks(np.array([3.0, 1.0, 3.0, 2.0]))) == [3.5, 1.0, 3.5, 2.0]


def test_five_against_five_fully_apart_is_significant_at_one_percent() -> None:
    # The normal approximation gives 0.0122 here, so a gate at alpha = 0.01 could never
    # fire on five samples a side; the exact distribution gives 2 / C(10, 5).
    u, p = stats.mann_whitney_u([10, 11, 12, 13, 14], [1, 2, 3, 4, 5])
    assert u == 25.0 and p == pytest.approx(2 / 252) and p < 0.01


@pytest.mark.parametrize("level", [0.05, stats.U_TEST_LEVEL, 0.001])
def test_a_verdict_needs_the_fewest_samples_with_which_the_u_test_can_reach_its_level(
        level: float) -> None:
    """The samples a side below which even fully separated sides are not significant."""
    def best_p(n: int) -> float:
        return stats.mann_whitney_u(range(n, 2 * n), range(n))[1]

    n = stats.u_test_min_samples(level)
    assert best_p(n) <= level < best_p(n - 1)


def test_the_sampling_rule_and_compare_share_one_count_of_samples_for_a_verdict() -> None:
    from mmsuite import compare, measure

    assert stats.VERDICT_SAMPLES == 5
    assert compare.MIN_SAMPLES == measure.VERDICT_SAMPLES == stats.VERDICT_SAMPLES


@pytest.mark.parametrize("n1, n2, seed", [(3, 3, 0), (5, 5, 1), (4, 9, 2), (12, 7, 3),
                                          (30, 25, 4), (50, 50, 5)])
def test_u_test_without_ties_is_exact(n1: int, n2: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x, y = rng.normal(0.3, 1.0, n1), rng.normal(0.0, 1.0, n2)
    u, p = stats.mann_whitney_u(x, y)
    expected = scipy_stats.mannwhitneyu(x, y, method="exact")
    assert u == expected.statistic and p == pytest.approx(expected.pvalue, rel=1e-9)


def test_u_test_with_ties_uses_the_corrected_normal_approximation() -> None:
    x, y = [1, 2, 2, 3, 3, 3], [2, 3, 4, 4, 5]
    u, p = stats.mann_whitney_u(x, y)
    expected = scipy_stats.mannwhitneyu(x, y, method="asymptotic", use_continuity=True)
    assert u == expected.statistic and p == pytest.approx(expected.pvalue, rel=1e-9)


def test_u_test_on_identical_samples_finds_nothing() -> None:
    assert stats.mann_whitney_u([1.0] * 5, [1.0] * 5) == (12.5, 1.0)
    with pytest.raises(ValueError):
        stats.mann_whitney_u([], [1.0])


# ------------------------------------------------------ signed-rank and pairs
@pytest.mark.parametrize("n, seed", [(1, 0), (6, 1), (8, 2), (15, 3), (50, 4)])
def test_signed_rank_test_without_ties_is_exact(n: int, seed: int) -> None:
    d = np.random.default_rng(seed).normal(0.2, 1.0, n)
    w, p = stats.wilcoxon_signed_rank(d)
    expected = scipy_stats.wilcoxon(d, method="exact")
    assert w == pytest.approx(float(np.sum(np.argsort(np.argsort(np.abs(d)))[d > 0] + 1)))
    assert p == pytest.approx(expected.pvalue, rel=1e-9)


def test_signed_rank_test_with_many_values_matches_the_normal_approximation() -> None:
    d = np.random.default_rng(7).normal(0.1, 1.0, 80)
    _, p = stats.wilcoxon_signed_rank(d)
    expected = scipy_stats.wilcoxon(d, method="approx", correction=True)
    assert p == pytest.approx(expected.pvalue, rel=1e-6)


@pytest.mark.parametrize("n, seed", [(6, 0), (9, 1), (20, 2), (50, 3)])
def test_paired_interval_is_the_inversion_of_the_signed_rank_test(n: int, seed: int) -> None:
    """Shifting the log ratios by a value inside the interval leaves the test unable to
    reject at 1 - confidence; by a value outside, it rejects."""
    rng = np.random.default_rng(seed)
    base = rng.lognormal(0.0, 0.2, n)
    head = base * 1.08 * rng.lognormal(0.0, 0.03, n)
    result = stats.paired_ratio(base, head, confidence=0.95)
    assert result.bounded and result.low < result.ratio < result.high
    d = np.log(head) - np.log(base)
    for inside in (result.low * 1.0001, result.ratio, result.high / 1.0001):
        assert scipy_stats.wilcoxon(d - math.log(inside), method="exact").pvalue > 0.05 - 1e-9
    for outside in (result.low / 1.01, result.high * 1.01):
        assert scipy_stats.wilcoxon(d - math.log(outside), method="exact").pvalue <= 0.05 + 1e-9


def test_paired_interval_of_many_rounds_sits_at_the_approximate_test_level() -> None:
    rng = np.random.default_rng(3)
    base = rng.lognormal(0.0, 0.2, 80)
    head = base * 1.08 * rng.lognormal(0.0, 0.03, 80)
    result = stats.paired_ratio(base, head, confidence=0.95)
    d = np.log(head) - np.log(base)
    for bound in (result.low, result.high):
        p = scipy_stats.wilcoxon(d - math.log(bound), method="approx").pvalue
        assert p == pytest.approx(0.05, abs=0.01)


def test_paired_interval_covers_the_true_ratio_at_its_confidence() -> None:
    rng = np.random.default_rng(11)
    covered = 0
    for _ in range(400):
        base = rng.lognormal(0.0, 0.3, 10)
        head = base * 1.05 * rng.lognormal(0.0, 0.1, 10)
        result = stats.paired_ratio(base, head, confidence=0.9)
        covered += result.low <= 1.05 <= result.high
    assert covered / 400 >= 0.86  # 0.9 nominal, exact for symmetric noise


def test_too_few_rounds_leave_the_interval_open() -> None:
    result = stats.paired_ratio([1.0] * 7, [1.1] * 7, confidence=0.99)
    assert not result.bounded and result.ratio == pytest.approx(1.1)
    assert stats.paired_ratio([1.0] * 8, [1.1] * 8, confidence=0.99).bounded


def test_fewest_rounds_for_an_interval() -> None:
    assert stats.min_paired_rounds(0.95) == 6 and stats.min_paired_rounds(0.99) == 8


def test_paired_ratio_refuses_unpaired_or_nonpositive_times() -> None:
    with pytest.raises(ValueError):
        stats.paired_ratio([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        stats.paired_ratio([1.0, 0.0], [1.0, 1.0])
