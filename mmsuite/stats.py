"""The statistics every part of mmsuite uses, written once.

- ``robust_noise``: how noisy one sample set is (1.4826 * MAD / median);
- ``mann_whitney_u``: whether two independent sample sets differ (``compare`` of two
  saved files), exact for small samples without ties;
- ``paired_ratio``: the ratio of two sides measured in alternating rounds (``continuous``),
  as a Hodges-Lehmann estimate with the exact Wilcoxon signed-rank interval.

Exact distributions are used up to ``EXACT_UP_TO`` samples: the normal approximation is
too coarse below about ten (5 against 5 fully separated gives p = 0.0122 by it, 0.0079
exactly), and where samples are few is where a gate must still be able to decide.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: 1.4826 * MAD estimates the standard deviation of normal noise, and ignores outliers.
MAD_TO_SIGMA = 1.4826


def robust_noise(samples: list[float] | tuple[float, ...] | np.ndarray) -> float | None:
    """1.4826 * MAD / median (relative); None with fewer than two samples."""
    if len(samples) < 2:
        return None
    values = np.asarray(samples, dtype=float)
    median = float(np.median(values))
    if median <= 0:
        return None
    return MAD_TO_SIGMA * float(np.median(np.abs(values - median))) / median


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks; tied values share the average of the ranks they span."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    last = np.cumsum(counts)
    return (last - (counts - 1) / 2.0)[inverse]


def mann_whitney_u(x: list[float] | np.ndarray, y: list[float] | np.ndarray
                   ) -> tuple[float, float]:
    """U statistic of ``x`` and the two-sided p-value.

    U counts the pairs in which x exceeds y (ties count one half), so U above
    len(x) * len(y) / 2 means x tends to be larger. Without ties and up to
    ``EXACT_UP_TO`` samples a side the p-value is exact; otherwise it is the normal
    approximation, whose variance carries the tie correction and whose z score a
    continuity correction of one half.
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        raise ValueError("the U test needs samples on both sides")
    both = np.concatenate([x, y])
    u = float(average_ranks(both)[:n1].sum()) - n1 * (n1 + 1) / 2.0
    n = n1 + n2
    _, counts = np.unique(both, return_counts=True)
    if counts.max() == 1 and max(n1, n2) <= EXACT_UP_TO:
        return u, _two_sided(_u_null_counts(n1, n2), int(round(u)))
    ties = float((counts.astype(float) ** 3 - counts).sum())
    variance = n1 * n2 / 12.0 * ((n + 1) - ties / (n * (n - 1)))
    if variance <= 0:  # every sample equal: nothing tells the sides apart
        return u, 1.0
    delta = u - n1 * n2 / 2.0
    z = (abs(delta) - 0.5) / math.sqrt(variance) if abs(delta) >= 0.5 else 0.0
    return u, math.erfc(z / math.sqrt(2.0))


#: The significance level at which ``compare``'s U test judges by default.
U_TEST_LEVEL = 0.01


def u_test_min_samples(level: float) -> int:
    """The fewest samples a side with which the exact two-sided U test can reach ``level``:
    n against n fully separated gives p = 2 / C(2n, n) (5 against 5: 2/252 = 0.0079)."""
    n = 1
    while 2 / math.comb(2 * n, n) > level:
        n += 1
    return n


#: The samples a side a verdict needs: with fewer, no difference is ever significant at
#: ``U_TEST_LEVEL``, so the sampling rule takes at least these and ``compare`` calls a
#: row with fewer unsure.
VERDICT_SAMPLES = u_test_min_samples(U_TEST_LEVEL)



#: Up to this many samples a side (or pairs), p-values and intervals are exact.
EXACT_UP_TO = 50


def _two_sided(counts: np.ndarray, statistic: int) -> float:
    """Two-sided p-value of ``statistic`` under a null distribution given as counts of each
    value 0, 1, ...: twice the smaller tail, at most 1."""
    total = counts.sum()
    lower = counts[: statistic + 1].sum() / total
    upper = counts[statistic:].sum() / total
    return float(min(1.0, 2.0 * min(lower, upper)))


def _u_null_counts(n1: int, n2: int) -> np.ndarray:
    """How many orderings of n1 x's and n2 y's (no ties) give each U = 0 .. n1*n2.

    The last of i x's and j y's is either an x, which exceeds all j y's (U grows by j),
    or a y (U unchanged): c(i, j) = shift(c(i-1, j), j) + c(i, j-1). Floats hold the
    counts (C(100, 50) overflows int64; only their ratios matter).
    """
    table = [[np.ones(1)] * (n2 + 1) for _ in range(n1 + 1)]
    for i in range(1, n1 + 1):
        for j in range(1, n2 + 1):
            counts = np.zeros(i * j + 1)
            counts[j: j + (i - 1) * j + 1] += table[i - 1][j]
            counts[: i * (j - 1) + 1] += table[i][j - 1]
            table[i][j] = counts
    return table[n1][n2]


def _signed_rank_null_counts(n: int) -> np.ndarray:
    """How many of the 2^n sign patterns of ranks 1..n give each W+ = 0 .. n(n+1)/2."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1.0
    for rank in range(1, n + 1):
        counts[rank:] = counts[rank:] + counts[:-rank].copy()
    return counts


def wilcoxon_signed_rank(d: list[float] | np.ndarray) -> tuple[float, float]:
    """W+ (the sum of the ranks of |d| where d > 0) and the two-sided p-value of
    "d is symmetric about 0". Zeros are dropped (Wilcoxon's rule); exact without ties up
    to ``EXACT_UP_TO`` values, else the normal approximation with tie correction."""
    values = np.asarray(d, dtype=float)
    values = values[values != 0]
    n = len(values)
    if n == 0:
        return 0.0, 1.0
    ranks = average_ranks(np.abs(values))
    w_plus = float(ranks[values > 0].sum())
    _, counts = np.unique(np.abs(values), return_counts=True)
    if counts.max() == 1 and n <= EXACT_UP_TO:
        return w_plus, _two_sided(_signed_rank_null_counts(n), int(round(w_plus)))
    mean = n * (n + 1) / 4.0
    variance = n * (n + 1) * (2 * n + 1) / 24.0 - float((counts**3 - counts).sum()) / 48.0
    if variance <= 0:
        return w_plus, 1.0
    z = max(abs(w_plus - mean) - 0.5, 0.0) / math.sqrt(variance)
    return w_plus, math.erfc(z / math.sqrt(2.0))


@dataclass(frozen=True)
class PairedRatio:
    """HEAD / BASE from alternating rounds: the estimate and its confidence interval.

    ``low`` and ``high`` are 0 and infinity when the rounds are too few for the
    interval at the asked confidence (fewer than 6 at 95%, 8 at 99%).
    """

    ratio: float
    low: float
    high: float
    p_value: float
    rounds: int
    confidence: float

    @property
    def bounded(self) -> bool:
        return 0.0 < self.low and math.isfinite(self.high)


def paired_ratio(base: list[float] | np.ndarray, head: list[float] | np.ndarray,
                 confidence: float = 0.99) -> PairedRatio:
    """The ratio head/base of times taken in paired rounds (round i of each side measured
    back to back, in random order), from the per-round log ratios.

    The estimate is the Hodges-Lehmann one (the median of the Walsh averages of the log
    ratios): robust to a round that a neighbour disturbed, unlike the mean, and tighter
    than the median of the ratios. The interval is the matching one of the Wilcoxon
    signed-rank test, exact up to ``EXACT_UP_TO`` rounds: it needs only that the log
    ratios be symmetric about their centre, which alternating the sides' order in each
    round makes so when nothing but noise tells them apart.
    """
    base, head = np.asarray(base, dtype=float), np.asarray(head, dtype=float)
    if base.shape != head.shape or base.ndim != 1:
        raise ValueError("paired rounds need one time per round on each side")
    if len(base) == 0 or (base <= 0).any() or (head <= 0).any():
        raise ValueError("paired rounds need positive times")
    d = np.log(head) - np.log(base)
    n = len(d)
    i, j = np.triu_indices(n)
    walsh = np.sort((d[i] + d[j]) / 2.0)
    estimate = float(np.median(walsh))
    _, p_value = wilcoxon_signed_rank(d)
    k = _signed_rank_rank(n, 1.0 - confidence)
    if k < 1:
        low, high = 0.0, math.inf
    else:
        low, high = math.exp(walsh[k - 1]), math.exp(walsh[len(walsh) - k])
    return PairedRatio(math.exp(estimate), low, high, p_value, n, confidence)


def min_paired_rounds(confidence: float) -> int:
    """The fewest rounds whose signed-rank interval is bounded at ``confidence``: 6 at
    95%, 8 at 99% (all 2^n sign patterns but the two extremes must carry 1 - confidence)."""
    n = 1
    while _signed_rank_rank(n, 1.0 - confidence) < 1:
        n += 1
    return n


def _signed_rank_rank(n: int, alpha: float) -> int:
    """The k of the Wilcoxon interval [W(k), W(N+1-k)] over the N sorted Walsh averages:
    the largest k with P(W+ <= k-1) <= alpha/2, so that the interval covers the centre
    with probability at least 1 - alpha; 0 when no k qualifies (too few rounds)."""
    if n <= EXACT_UP_TO:
        cdf = np.cumsum(_signed_rank_null_counts(n))
        cdf /= cdf[-1]
        return int(np.searchsorted(cdf, alpha / 2.0, side="right"))
    total = n * (n + 1) / 2.0
    z = _normal_quantile(1.0 - alpha / 2.0)
    return max(0, int(math.floor(total / 2.0 - z * math.sqrt(n * (n + 1) * (2 * n + 1) / 24.0))))


def _normal_quantile(p: float) -> float:
    """The standard normal quantile, by bisection on erfc (no scipy at run time)."""
    low, high = -10.0, 10.0
    for _ in range(100):
        mid = (low + high) / 2.0
        if 0.5 * math.erfc(-mid / math.sqrt(2.0)) < p:
            low = mid
        else:
            high = mid
    return (low + high) / 2.0
