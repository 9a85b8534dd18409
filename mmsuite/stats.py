"""The statistics every part of mmsuite uses, written once: the robust noise of a sample
set and the rank test that compares two of them."""

from __future__ import annotations

import math

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
    """U statistic of ``x`` and the two-sided p-value (normal approximation).

    U counts the pairs in which x exceeds y (ties count one half), so U above
    len(x) * len(y) / 2 means x tends to be larger. The variance carries the tie
    correction; the z score a continuity correction of one half.
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        raise ValueError("the U test needs samples on both sides")
    both = np.concatenate([x, y])
    u = float(average_ranks(both)[:n1].sum()) - n1 * (n1 + 1) / 2.0
    n = n1 + n2
    _, counts = np.unique(both, return_counts=True)
    ties = float((counts.astype(float) ** 3 - counts).sum())
    variance = n1 * n2 / 12.0 * ((n + 1) - ties / (n * (n - 1)))
    if variance <= 0:  # every sample equal: nothing tells the sides apart
        return u, 1.0
    delta = u - n1 * n2 / 2.0
    z = (abs(delta) - 0.5) / math.sqrt(variance) if abs(delta) >= 0.5 else 0.0
    return u, math.erfc(z / math.sqrt(2.0))


# ----------------------------------------------------------------- comparison
