"""Change points in a series of numbers: E-Divisive with means (Matteson and James, 2014).

The method MongoDB runs over its CI performance history (Daly et al., "The Use of
Change Point Detection to Identify Software Performance Regressions in a Continuous
Integration System", ICPE 2020) and that Apache Otava (formerly Hunter) builds on:

1. For a segment of the series and every split ``tau`` of it into a left part
   ``L`` (m points) and a right part ``R`` (k points), the energy statistic

       Q(tau) = m k / (m + k) * (2 mean|L - R| - mean|L - L'| - mean|R - R'|)

   grows with how differently the two parts are distributed. It uses absolute
   differences, not squares, so one wild point moves it by a bounded amount.
2. The split of largest Q over all current segments is the candidate.
3. A permutation test decides whether it is real: the candidate's segment is
   shuffled many times and its best Q recomputed; the p-value is the share of
   shuffles that reach the observed Q. A shuffle keeps outliers (they are in
   every shuffle), so an outlier alone does not make a change point.
4. A significant candidate splits its segment and the search goes on; the first
   candidate that is not significant ends it.

The permutations use a fixed random seed: the same history gives the same answer.
Kept libraries were considered: MongoDB's ``signal-processing-algorithms`` pins
Python 3.11 only, numpy < 2 and gevent; ``ruptures`` has no significance test
(its penalty must be tuned per series). The method is short, so it lives here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_PERMUTATIONS = 199
DEFAULT_ALPHA = 0.05
#: The fewest points on either side of a change: one point alone is an outlier as often
#: as it is a change, and no test on one point tells which.
DEFAULT_MIN_SIZE = 2


@dataclass(frozen=True)
class ChangePoint:
    """A change between ``values[index - 1]`` and ``values[index]``."""

    index: int
    p_value: float
    statistic: float


def split_statistics(values: np.ndarray, min_size: int = DEFAULT_MIN_SIZE) -> np.ndarray:
    """Q(tau) for every split of ``values`` (NaN where a side is shorter than ``min_size``):
    ``result[tau]`` splits into ``values[:tau]`` and ``values[tau:]``."""
    n = len(values)
    q = np.full(n + 1, np.nan)
    if n < 2 * min_size:
        return q
    distances = np.abs(values[:, None] - values[None, :])
    # Two-dimensional prefix sums: the sum of any block of distances without a loop.
    prefix = np.zeros((n + 1, n + 1))
    prefix[1:, 1:] = distances.cumsum(0).cumsum(1)
    tau = np.arange(min_size, n - min_size + 1)
    m, k = tau.astype(float), (n - tau).astype(float)
    between = 2.0 * (prefix[tau, n] - prefix[tau, tau]) / (m * k)
    # A block over one part counts each pair twice: /(m(m-1)) is the mean over its pairs.
    left = prefix[tau, tau]
    right = prefix[n, n] - prefix[tau, n] - prefix[n, tau] + prefix[tau, tau]
    with np.errstate(invalid="ignore", divide="ignore"):
        within_left = np.where(m > 1, left / (m * (m - 1)), 0.0)
        within_right = np.where(k > 1, right / (k * (k - 1)), 0.0)
    q[tau] = m * k / (m + k) * (between - within_left - within_right)
    return q


def _best_split(values: np.ndarray, min_size: int) -> tuple[int, float] | None:
    q = split_statistics(values, min_size)
    if np.all(np.isnan(q)):
        return None
    tau = int(np.nanargmax(q))
    return tau, float(q[tau])


def e_divisive(values: Sequence[float] | np.ndarray, permutations: int = DEFAULT_PERMUTATIONS,
               alpha: float = DEFAULT_ALPHA, min_size: int = DEFAULT_MIN_SIZE,
               seed: int = 0) -> list[ChangePoint]:
    """The significant change points of ``values``, in index order (module docstring).

    ``alpha`` is the permutation test's level: with 199 permutations the smallest
    p-value is 1/200, so ``alpha`` below 0.005 finds nothing.
    """
    series = np.asarray(values, dtype=float)
    if min_size < 1:
        raise ValueError(f"min_size must be >= 1, got {min_size}")
    if not np.all(np.isfinite(series)):
        raise ValueError("change points need finite values")
    rng = np.random.default_rng(seed)
    bounds = [0, len(series)]
    found: list[ChangePoint] = []
    while True:
        candidates = []
        for start, end in zip(bounds, bounds[1:]):
            best = _best_split(series[start:end], min_size)
            if best is not None:
                candidates.append((best[1], start, end, best[0]))
        if not candidates:
            break
        statistic, start, end, tau = max(candidates)
        segment = series[start:end].copy()
        reached = 0
        for _ in range(permutations):
            rng.shuffle(segment)
            shuffled = _best_split(segment, min_size)
            if shuffled is not None and shuffled[1] >= statistic:
                reached += 1
        p_value = (reached + 1) / (permutations + 1)
        if p_value > alpha:
            break
        found.append(ChangePoint(start + tau, p_value, statistic))
        bounds = sorted(bounds + [start + tau])
    return sorted(found, key=lambda c: c.index)
