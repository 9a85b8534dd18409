"""The cost model: the modelled time of every candidate plan, with parameters fitted per GPU.

The model's form counts what the hardware does: waves of blocks on the SMs
(blocks per SM from registers, threads and shared memory), how full the last
wave leaves them (an SM with a share f of 16 warps runs at f ** fill_exponent
of its rate), each block's K work at a tile's FMA rate (its ``efficiency``
of the FP32 peak, times ``unaligned`` when M or K is not a multiple of 4 and
loads go scalar), C's stores (where M is not a multiple of 4, rung 21's plain
tiles store through shared memory at ``staged_store`` over the turns their
warps take, and each of their blocks spends ``staged_epilogue_s`` of the SM's
time per output doing so; the other tiles store scalars at ``unaligned_store``),
a block's prologue and epilogue, and the second kernel of
split-K (the reduction) and stream-K (the fix-up) as bytes over a bandwidth
that few blocks reach only in part. Rung 24 (GEMV) is the bytes it moves over
a share of the memory's bandwidth, which a grid of few blocks does not reach, in waves
of the blocks the SMs hold (each wave waits for its blocks' rounds of loads);
its fused variants add the slices in the same launch (no launch gap), and a
block whose K slice takes many dependent rounds of loads is bound by their
latency instead. Rung 27 (short K) is a tile's form with split 1, its stores at
its own share of the store rate. Rung 30 (few outputs, long K) is a launch, a
chain of K rounds per block and the bytes its few blocks move.

Its parameters (:class:`Parameters`: per variant of the manifest an efficiency, an
unaligned share, a block latency and a store share, and the shared constants) start from figures
measured by hand on the H100 and are fitted by :func:`fit` to timings of
every candidate on a sample of shapes (``mmsuite tune --fit-model``), least
squares on the logarithm of the time, pulled gently towards the starting
figures where the sample says little. A fitted set is stored per GPU model
beside the tuning files (:mod:`.tuning_file`), and :func:`parameters_for`
reads the user's, else the one shipped, else the starting figures.
"""


from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..launch import H100_SXM, DeviceFacts
from .costs import HARD_BEND, SHARED_DEFAULTS, STARTING, Parameters
from .family import Candidate
from .variants import BY_KEY, MANIFEST, VARIANTS


def estimate_seconds(candidate: Candidate[Any], m: int, n: int, k: int, batch: int = 1,
                     device: DeviceFacts = H100_SXM, params: Parameters = STARTING) -> float:
    """Modelled time of one call of ``candidate`` on the (column-major) problem."""
    return candidate.variant.kind.cost(candidate, m, n, k, batch, device, params)


def ranked(found: Iterable[Candidate[Any]], m: int, n: int, k: int, batch: int = 1,
           device: DeviceFacts = H100_SXM,
           params: Parameters = STARTING) -> list[tuple[float, Candidate[Any]]]:
    """(modelled seconds, candidate), fastest first; ties keep the manifest's order."""
    out = [(estimate_seconds(c, m, n, k, batch, device, params), i, c)
           for i, c in enumerate(found)]
    out.sort(key=lambda item: (item[0], item[1]))
    return [(seconds, c) for seconds, _, c in out]


# ------------------------------------------------------------------ fitting
@dataclass(frozen=True)
class Timing:
    """One measurement: a candidate's median time on a (column-major) problem."""

    m: int
    n: int
    k: int
    batch: int
    candidate: Candidate[Any]
    seconds: float


def _free_names(timings: Sequence[Timing]) -> list[tuple[str, str]]:
    """The parameters the timings can inform: shared ones, each timed variant's rate, and
    its unaligned share where some timed problem is misaligned."""
    families = {t.candidate.family for t in timings}
    # A constant of rungs 24, 27 and 30 alone is free only where they were timed; the tiles'
    # store shares for a misaligned M only where such a tile (scalar or staged) stored C with
    # K short.
    misaligned_stores = [t for t in timings if t.m % 4 and t.k <= STORE_BOUND_K
                         and t.candidate.variant.kind.tile]
    staged = [t.candidate.variant.kind.staged(t.candidate.config, t.m)
              for t in misaligned_stores]
    told = {"unaligned_store": not all(staged), "staged_store": any(staged),
            "staged_epilogue_s": any(staged)}
    names = [("shared", name) for name in SHARED_DEFAULTS
             if families & set(_SHARED_OF.get(name, families)) and told.get(name, True)]
    seen: dict[str, bool] = {}
    # A rate is only told by problems big enough for the FMAs to matter.
    compute_bound = {t.candidate.variant.key for t in timings
                     if t.m * t.n * t.k * t.batch >= COMPUTE_BOUND_FMAS}
    # A store share is only told by problems whose K is short enough for C's stores to
    # be most of the time.
    store_bound = {t.candidate.variant.key for t in timings
                   if t.k <= STORE_BOUND_K and t.m * t.n * t.batch >= STORE_BOUND_OUTPUTS}
    for t in timings:
        key = t.candidate.variant.key
        misaligned = t.candidate.variant.kind.misaligned(t.candidate.config, t.m, t.k)
        seen[key] = seen.get(key, False) or misaligned
    for key, misaligned in seen.items():
        streams = BY_KEY[key].kind.streams  # rung 24: a bandwidth share, no store share
        if key in compute_bound or streams:
            names.append(("efficiency", key))
        names.append(("latency", key))  # rung 24's: its round's time
        if key in store_bound and not streams:
            names.append(("store", key))
        if misaligned and key in compute_bound:
            names.append(("unaligned", key))
    return names


#: The constants that only some families' timings inform, and which families' those are.
_SHARED_OF: dict[str, tuple[str, ...]] = {
    name: tuple(family.name for family in MANIFEST if name in family.informs)
    for name in SHARED_DEFAULTS if any(name in family.informs for family in MANIFEST)}
#: What the fit may not leave: no tile past the FP32 peak, no memory past what the H100's
#: L2 and HBM move (the sample's small problems cannot tell those apart from latency).
BOUNDS: dict[str, tuple[float, float]] = {
    "efficiency": (0.05, 0.8), "unaligned": (0.3, 1.0), "latency": (1e-8, 2e-5),
    # Rung 24's is a share of gemv_bandwidth, not of FLOPs: up to about the memory's peak.
    "efficiency:gemv": (0.05, 1.15),
    "store_bytes_per_s": (2e11, 4e12), "load_bytes_per_s": (1e12, 2e13),
    "reduce_bytes_per_s": (5e11, 1e13), "gemv_bandwidth": (0.3, 1.0), "store": (0.2, 5.0),
    "unaligned_store": (0.1, 1.0), "staged_store": (0.1, 1.5), "gemv_round_s": (1e-8, 1e-5),
    "gemv_wave_s": (1e-9, 2e-5), "gemv_m_wave_s": (1e-9, 2e-5), "gemv_sm_blocks": (0.5, 64.0),
    "gemv_m_sm_blocks": (0.5, 64.0), "gemv_narrow_crowd": (0.0, 2.0),
    "gemv_fill_power": (0.5, HARD_BEND),
    "gemv_m_fill_power": (0.5, HARD_BEND),
    "dot_round_s": (1e-8, 1e-5),
    "dot_latency_s": (1e-9, 1e-5), "gemv_fuse_s": (1e-8, 2e-5), "fuse_slice_s": (1e-10, 1e-6),
    "fuse_bytes_per_thread_s": (1e7, 1e11), "tile_round_s": (1e-8, 2e-6),
    "shortk_round_s": (1e-9, 5e-6), "dot_block_s": (1e-10, 5e-6),
    "staged_epilogue_s": (1e-12, 1e-9),
}
COMPUTE_BOUND_FMAS = 2**28
STORE_BOUND_K = 64
STORE_BOUND_OUTPUTS = 2**20  # a C of a million floats: the stores outlast the launch


def _bounds(table: str, name: str) -> tuple[float, float]:
    """A parameter's bounds: a shared one's own, else its table's for the variant's family
    ("efficiency:gemv"), else its table's."""
    if table == "shared":
        return BOUNDS.get(name, (0.0, math.inf))
    family = name.split(":", 1)[0]
    return BOUNDS.get(f"{table}:{family}", BOUNDS.get(table, (0.0, math.inf)))


def _with(start: Parameters, names: list[tuple[str, str]], values: np.ndarray) -> Parameters:
    tables = start.to_dict()  # copies of every table
    for (table, name), value in zip(names, values):
        low, high = _bounds(table, name)
        tables[table][name] = min(high, max(low, float(value)))
    return Parameters.from_dict(tables, "fitted")


def _exp(theta: np.ndarray) -> np.ndarray:
    """Parameters from their logarithms; a damped step far past a bound (which ``_with``
    clamps to anyway) would otherwise overflow."""
    return np.exp(np.clip(theta, -700.0, 700.0))


def _start_value(start: Parameters, table: str, name: str) -> float:
    if table == "shared":
        return start[name]
    row = BY_KEY[name]
    config = row.config
    if table == "latency":
        return row.kind.starting_latency(start, config, name)
    if table == "store":
        return start.store_share(name, config)
    return start.rate(name, config) if table == "efficiency" else start.misaligned(name, config)


def fit(timings: Sequence[Timing], device: DeviceFacts, start: Parameters = STARTING,
        prior_weight: float = 0.05, iterations: int = 40,
        only: Iterable[tuple[str, str]] | None = None) -> Parameters:
    """Parameters that fit ``timings``: Levenberg-Marquardt on log(modelled / measured),
    in the logarithm of each parameter (all are positive), with a residual of
    ``prior_weight`` x log(value / starting value) per parameter so that a parameter the
    sample does not inform stays where it started. ``only`` frees just those (table,
    name) pairs, every other figure held at ``start`` (a partial refit)."""
    if not timings:
        raise ValueError("no timings to fit")
    names = _free_names(timings)
    if only is not None:
        keep = set(only)
        names = [name for name in names if name in keep]
        if not names:
            raise ValueError("the timings inform none of the parameters to fit")
    theta0 = np.log([_start_value(start, t, n) for t, n in names])
    measured = np.log([t.seconds for t in timings])
    # A variant's own parameters move only its timings: the Jacobian's other rows stay 0.
    rows_of = {key: np.array([i for i, t in enumerate(timings)
                              if t.candidate.variant.key == key])
               for key in {t.candidate.variant.key for t in timings}}
    everything = np.arange(len(timings))

    def modelled(theta: np.ndarray, rows: np.ndarray) -> np.ndarray:
        params = _with(start, names, _exp(theta))
        return np.log([estimate_seconds(timings[i].candidate, timings[i].m, timings[i].n,
                                        timings[i].k, timings[i].batch, device, params)
                       for i in rows])

    def residuals(theta: np.ndarray) -> np.ndarray:
        return np.concatenate([modelled(theta, everything) - measured,
                               prior_weight * (theta - theta0)])

    theta, damping = theta0.copy(), 1e-2
    current = residuals(theta)
    count = len(timings)
    for _ in range(iterations):
        step = 1e-4
        jacobian = np.zeros((current.size, theta.size))
        for i, (table, name) in enumerate(names):
            shifted = theta.copy()
            shifted[i] += step
            rows = everything if table == "shared" else rows_of[name]
            jacobian[rows, i] = (modelled(shifted, rows) - (current[rows] + measured[rows])
                                 ) / step
            jacobian[count + i, i] = prior_weight
        normal = jacobian.T @ jacobian
        gradient = jacobian.T @ current
        improved = False
        for _ in range(10):
            delta = np.linalg.solve(normal + damping * np.diag(np.diag(normal) + 1e-9), -gradient)
            trial = residuals(theta + delta)
            if trial @ trial < current @ current:
                theta, current, damping, improved = theta + delta, trial, damping / 3, True
                break
            damping *= 4
        if not improved or np.abs(delta).max() < 1e-5:
            break
    return extrapolated(_with(start, names, _exp(theta)), start)


def extrapolated(fitted: Parameters, start: Parameters = STARTING) -> Parameters:
    """``fitted`` with a rate and a block latency for every variant of the manifest: those
    the timings never covered get their starting rate times the median ratio of fitted to
    starting rates, and the median fitted latency, so that an unmeasured variant is
    neither favoured nor shunned by the shared constants having moved. A store share the
    timings did not tell is the median of those they did (rung 27's keeps its own starting
    share: its stores are laid out unlike any tile's)."""
    eff, lat, store = dict(fitted.efficiency), dict(fitted.latency), dict(fitted.store)
    ratios = [eff[v.key] / start.rate(v.key, v.config) for v in VARIANTS
              if v.key in eff and v.kind.tile]
    latencies = [lat[v.key] for v in VARIANTS if v.key in lat and not v.kind.streams]
    shares = [store[v.key] for v in VARIANTS if v.key in store and v.kind.tile]
    for v in VARIANTS:
        if v.kind.own_rates:
            continue
        if v.key not in eff and ratios:
            eff[v.key] = start.rate(v.key, v.config) * float(np.median(ratios))
        if v.key not in lat and latencies:
            lat[v.key] = float(np.median(latencies))
        if v.key not in store and shares and v.kind.tile:
            store[v.key] = float(np.median(shares))
    return Parameters(dict(fitted.shared), eff, dict(fitted.unaligned), lat, store, "fitted")


@dataclass(frozen=True)
class RankingAccuracy:
    """How well a model ranks the candidates of problems it was not fitted on."""

    problems: int
    top1: float  # share of problems where the model's pick is the measured fastest
    within_3pct: float  # share where the pick is within 3% of the measured fastest
    worst_loss: float  # the pick's largest slowdown against the measured fastest
    mean_loss: float
    pair_order: float  # share of candidate pairs the model orders as measured

    def to_dict(self) -> dict:
        return {k: (round(v, 4) if isinstance(v, float) else v)
                for k, v in self.__dict__.items()}


def ranking_accuracy(timings: Sequence[Timing], device: DeviceFacts,
                     params: Parameters) -> RankingAccuracy:
    """The model's picks on each problem of ``timings`` against the measured fastest."""
    problems: dict[tuple, list[Timing]] = {}
    for t in timings:
        problems.setdefault((t.m, t.n, t.k, t.batch), []).append(t)
    top1 = within = 0
    losses, pairs_right, pairs = [], 0, 0
    for (m, n, k, batch), rows in problems.items():
        modelled = [estimate_seconds(t.candidate, m, n, k, batch, device, params) for t in rows]
        pick = rows[int(np.argmin(modelled))]
        fastest = min(t.seconds for t in rows)
        loss = pick.seconds / fastest - 1
        losses.append(loss)
        top1 += pick.seconds == fastest
        within += loss <= 0.03
        for i in range(len(rows)):
            for j in range(i + 1, len(rows)):
                if rows[i].seconds != rows[j].seconds:
                    pairs += 1
                    pairs_right += ((modelled[i] < modelled[j])
                                    == (rows[i].seconds < rows[j].seconds))
    count = len(problems)
    return RankingAccuracy(count, top1 / count, within / count, max(losses),
                           float(np.mean(losses)), pairs_right / max(1, pairs))


def log_error(timings: Sequence[Timing], device: DeviceFacts, params: Parameters) -> float:
    """Root mean square of log(modelled / measured): how far the times themselves are off."""
    errors = [math.log(estimate_seconds(t.candidate, t.m, t.n, t.k, t.batch, device, params)
                       / t.seconds) for t in timings]
    return float(np.sqrt(np.mean(np.square(errors))))


_LOADED: dict[tuple, Parameters] = {}


def parameters_for(device_name: str) -> Parameters:
    """The device's fitted parameters (the user's model file, else the shipped one), or the
    starting figures where neither exists. Read once per file version."""
    from .tuning_file import load_model, model_file

    path = model_file(device_name)
    if path is None:
        return STARTING
    key = (str(path), path.stat().st_mtime_ns)
    if key not in _LOADED:
        _LOADED[key] = Parameters.from_dict(load_model(path)["parameters"], str(path))
    return _LOADED[key]
