"""The cost model: the modelled time of every candidate plan, with parameters fitted per GPU.

The model's form counts what the hardware does: waves of blocks on the SMs
(blocks per SM from registers, threads and shared memory), how full the last
wave leaves them (an SM with a share f of 16 warps runs at f ** fill_exponent
of its rate), each block's K work at a tile's FMA rate (its ``efficiency``
of the FP32 peak, times ``unaligned`` when M or K is not a multiple of 4 and
loads go scalar), a block's prologue and epilogue, and the second kernel of
split-K (the reduction) and stream-K (the fix-up) as bytes over a bandwidth
that few blocks reach only in part. Rung 24 (GEMV) is the bytes it moves over
a share of the memory's bandwidth, which a grid of few blocks does not reach.

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
from dataclasses import dataclass, field

import numpy as np

from .device import H100_SXM, DeviceFacts
from .variants import (
    VARIANTS,
    Candidate,
    Config,
    GemvConfig,
    gemv_grid,
    gemv_groups,
    streamk_split,
)

#: The constants shared by every variant, and their starting figures (H100 fits of the
#: hand-set model: a block's prologue, latency hiding at partial fill, the reduction's
#: bandwidth from L2 and one reduction block's rate, a second kernel's launch gap).
SHARED_DEFAULTS: dict[str, float] = {
    "block_latency_s": 1.0e-6,
    "fill_exponent": 0.3,
    "reduce_bytes_per_s": 2.5e12,
    "reduce_bytes_per_block_s": 50e9,
    "launch_gap_s": 2e-6,
    "streamk_fixup_factor": 1.0,  # the fix-up's bytes against the reduction's
    "gemv_bandwidth": 0.85,  # share of the memory's peak bandwidth rung 24 streams at
    "gemv_blocks_per_sm": 3.0,  # blocks per SM rung 24 needs in flight for that share
    "gemv_latency_s": 3e-6,
    "launch_s": 2e-6,  # a kernel's start and end, however small (the timer's floor included)
    "store_bytes_per_s": 2.0e12,  # C written by the tiles (small K: the stores dominate)
    "load_bytes_per_s": 6.0e12,  # A and B tiles loaded, mostly from L2, once per block
}
#: The per-variant tables of :class:`Parameters`.
PER_VARIANT = ("efficiency", "unaligned", "latency", "store")
_SOFT_MAX_POWER = 4.0  # compute and memory overlap: the time is near the larger of the two


@dataclass(frozen=True)
class Parameters:
    """The model's parameters: shared constants and per-variant rates (variant key ->
    share of the FP32 peak; for rung 24, a factor on ``gemv_bandwidth``)."""

    shared: dict[str, float] = field(default_factory=lambda: dict(SHARED_DEFAULTS))
    efficiency: dict[str, float] = field(default_factory=dict)
    unaligned: dict[str, float] = field(default_factory=dict)
    latency: dict[str, float] = field(default_factory=dict)  # a block's prologue and epilogue
    # Share of ``store_bytes_per_s`` a variant's epilogue reaches: how a tile's threads lay
    # out their stores decides it, and with K short the stores are nearly all the time
    # (on the H100 at 15443x1914x1, rung 23's 128x64 tile beat the 128x256 one by 1.6x
    # while the shared rate modelled them as equal).
    store: dict[str, float] = field(default_factory=dict)
    source: str = "starting figures"  # or the model file they were read from

    def rate(self, key: str, config: Config | GemvConfig) -> float:
        default = config.efficiency if isinstance(config, Config) else 1.0
        return self.efficiency.get(key, default)

    def misaligned(self, key: str, config: Config | GemvConfig) -> float:
        default = config.unaligned if isinstance(config, Config) else 0.9
        return self.unaligned.get(key, default)

    def block_latency(self, key: str) -> float:
        return self.latency.get(key, self["block_latency_s"])

    def store_share(self, key: str) -> float:
        return self.store.get(key, 1.0)

    def __getitem__(self, name: str) -> float:
        return self.shared.get(name, SHARED_DEFAULTS[name])

    def to_dict(self) -> dict:
        return {"shared": dict(self.shared),
                **{name: dict(getattr(self, name)) for name in PER_VARIANT}}

    @classmethod
    def from_dict(cls, data: dict, source: str = "") -> Parameters:
        shared = {**SHARED_DEFAULTS, **{k: float(v) for k, v in data.get("shared", {}).items()
                                        if k in SHARED_DEFAULTS}}
        efficiency, unaligned, latency, store = (
            {k: float(v) for k, v in data.get(name, {}).items()}
            for name in PER_VARIANT)
        return cls(shared, efficiency, unaligned, latency, store, source)



STARTING = Parameters()


def _fill(per_sm: int, threads: int, exponent: float) -> float:
    return min(1.0, per_sm * threads / 32 / 16) ** exponent


def _reduce_seconds(partial_bytes: float, out_bytes: float, blocks: int, p: Parameters) -> float:
    """The second kernel: partial sums written by the first and read back, C once, at a
    rate few blocks reach only in part, behind a launch gap."""
    rate = min(p["reduce_bytes_per_s"], blocks * p["reduce_bytes_per_block_s"])
    return (partial_bytes / p["reduce_bytes_per_s"] + (partial_bytes + out_bytes) / rate
            + p["launch_gap_s"])


def reduce_blocks(m: int, n: int, batch: int, device: DeviceFacts) -> int:
    """Blocks of a slice reduction: enough to cover C once in float4s, at most 16 per SM."""
    quads = -(-(batch * m * n) // 4)
    return max(1, min(-(-quads // 256), 16 * device.sms))


def _splitk_seconds(c: Candidate, m: int, n: int, k: int, batch: int, device: DeviceFacts,
                    p: Parameters) -> float:
    config, split = c.config, c.split
    assert isinstance(config, Config)
    tiles = -(-m // config.bm) * -(-n // config.bn) * batch
    blocks = tiles * split
    k_tiles = -(-k // config.bk)
    k_slice = -(-k_tiles // split) * config.bk
    fma_per_block = config.bm * config.bn * k_slice
    sm_rate = 128 * device.clock_mhz * 1e6 * p.rate(c.variant.key, config)
    if m % 4 or k % 4:  # A or B columns not 16-byte aligned: scalar loads
        sm_rate *= p.misaligned(c.variant.key, config)
    occupancy = config.blocks_per_sm
    full_waves, rest = divmod(blocks, device.sms * occupancy)

    def wave(per_sm: int) -> float:
        fill = _fill(per_sm, config.threads, p["fill_exponent"])
        return per_sm * fma_per_block / (sm_rate * fill) + p.block_latency(c.variant.key)

    seconds = full_waves * wave(occupancy)
    if rest:
        seconds += wave(-(-rest // device.sms))
    seconds = _with_traffic(seconds, c, m, n, k, batch, split, p) + p["launch_s"]
    if split > 1:
        seconds += _reduce_seconds(4 * batch * m * n * split, 8 * batch * m * n,
                                   reduce_blocks(m, n, batch, device), p)
    return seconds


def _with_traffic(compute_s: float, c: Candidate, m: int, n: int, k: int, batch: int,
                  split: int, p: Parameters) -> float:
    """Compute time and memory time, overlapped: C (or the slices' partial sums) stored
    once at the variant's share of the store rate, each block's A and B panels loaded once."""
    config = c.config
    assert isinstance(config, Config)
    stored = 4.0 * batch * m * n * split
    loaded = 4.0 * batch * k * (m * -(-n // config.bn) + n * -(-m // config.bm))
    memory_s = (stored / (p["store_bytes_per_s"] * p.store_share(c.variant.key))
                + loaded / p["load_bytes_per_s"])
    power = _SOFT_MAX_POWER
    return (compute_s ** power + memory_s ** power) ** (1 / power)


def _streamk_seconds(c: Candidate, m: int, n: int, k: int, batch: int, device: DeviceFacts,
                     p: Parameters) -> float:
    config = c.config
    assert isinstance(config, Config)
    split = streamk_split(config, m, n, k, batch, device)
    sm_rate = 128 * device.clock_mhz * 1e6 * p.rate(c.variant.key, config)
    if m % 4 or k % 4:
        sm_rate *= p.misaligned(c.variant.key, config)
    fma_iter = config.bm * config.bn * config.bk
    occupancy = config.blocks_per_sm
    latency = p.block_latency(c.variant.key)
    seconds = split.dp_tiles // split.slots * (occupancy * split.ipt * fma_iter / sm_rate
                                               + latency)
    if split.sk_ctas:
        per_sm = -(-split.sk_ctas // device.sms)
        fill = _fill(per_sm, config.threads, p["fill_exponent"])
        share = -(-(split.sk_tiles * split.ipt) // split.sk_ctas)
        seconds += per_sm * share * fma_iter / (sm_rate * fill) + 2 * latency
        partials = 4 * split.workspace_elems * p["streamk_fixup_factor"]
        blocks = split.fixup_grid[0] * split.fixup_grid[1]
        seconds += _reduce_seconds(partials, 8 * split.sk_tiles * config.bm * config.bn,
                                   max(1, blocks // 2), p)
    return _with_traffic(seconds, c, m, n, k, batch, 1, p) + p["launch_s"]


def _gemv_seconds(c: Candidate, m: int, n: int, k: int, batch: int, device: DeviceFacts,
                  p: Parameters) -> float:
    config, split = c.config, c.split
    assert isinstance(config, GemvConfig)
    grid = gemv_grid(config, m, n, batch, split)
    blocks = grid[0] * grid[1] * grid[2]
    fill = min(1.0, blocks / (p["gemv_blocks_per_sm"] * device.sms))
    rate = device.memory_bytes_per_s * p["gemv_bandwidth"] * p.rate(c.variant.key, config)
    rate *= fill  # fewer blocks than that: fewer loads in flight, proportionally
    if (m % 4 if config.side == "n" else k % 4):
        rate *= p.misaligned(c.variant.key, config)
    moved = 4.0 * batch * (m * k * gemv_groups(config, n) + k * n + m * n)
    seconds = moved / rate + p["gemv_latency_s"]
    if split > 1:
        seconds += _reduce_seconds(4 * batch * m * n * split, 8 * batch * m * n,
                                   reduce_blocks(m, n, batch, device), p)
    return seconds


_BY_FAMILY = {"splitk": _splitk_seconds, "streamk": _streamk_seconds, "gemv": _gemv_seconds}


def estimate_seconds(candidate: Candidate, m: int, n: int, k: int, batch: int = 1,
                     device: DeviceFacts = H100_SXM, params: Parameters = STARTING) -> float:
    """Modelled time of one call of ``candidate`` on the (column-major) problem."""
    return _BY_FAMILY[candidate.family](candidate, m, n, k, batch, device, params)


def ranked(found: Iterable[Candidate], m: int, n: int, k: int, batch: int = 1,
           device: DeviceFacts = H100_SXM,
           params: Parameters = STARTING) -> list[tuple[float, Candidate]]:
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
    candidate: Candidate
    seconds: float


def _free_names(timings: Sequence[Timing]) -> list[tuple[str, str]]:
    """The parameters the timings can inform: shared ones, each timed variant's rate, and
    its unaligned share where some timed problem is misaligned."""
    names = [("shared", name) for name in SHARED_DEFAULTS]
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
        side = getattr(t.candidate.config, "side", "n")
        misaligned = bool(t.k % 4) if side == "m" else bool(t.m % 4 or
                                                            (t.k % 4 and
                                                             t.candidate.family != "gemv"))
        seen[key] = seen.get(key, False) or misaligned
    for key, misaligned in seen.items():
        if key in compute_bound or key.startswith("gemv:"):
            names.append(("efficiency", key))
        if not key.startswith("gemv:"):
            names.append(("latency", key))
            if key in store_bound:
                names.append(("store", key))
        if misaligned and key in compute_bound:
            names.append(("unaligned", key))
    return names


#: What the fit may not leave: no tile past the FP32 peak, no memory past what the H100's
#: L2 and HBM move (the sample's small problems cannot tell those apart from latency).
BOUNDS: dict[str, tuple[float, float]] = {
    "efficiency": (0.05, 0.8), "unaligned": (0.3, 1.0), "latency": (1e-8, 2e-5),
    "store_bytes_per_s": (2e11, 4e12), "load_bytes_per_s": (1e12, 2e13),
    "reduce_bytes_per_s": (5e11, 1e13), "gemv_bandwidth": (0.3, 1.0), "store": (0.2, 5.0),
}
COMPUTE_BOUND_FMAS = 2**28
STORE_BOUND_K = 64
STORE_BOUND_OUTPUTS = 2**20  # a C of a million floats: the stores outlast the launch


def _with(start: Parameters, names: list[tuple[str, str]], values: np.ndarray) -> Parameters:
    tables = start.to_dict()  # copies of every table
    for (table, name), value in zip(names, values):
        low, high = BOUNDS.get(table if table != "shared" else name, (0.0, math.inf))
        tables[table][name] = min(high, max(low, float(value)))
    return Parameters.from_dict(tables, "fitted")


def _start_value(start: Parameters, table: str, name: str) -> float:
    if table == "shared":
        return start[name]
    if table == "latency":
        return start.block_latency(name)
    if table == "store":
        return start.store_share(name)
    config = next(v.config for v in VARIANTS if v.key == name)
    return start.rate(name, config) if table == "efficiency" else start.misaligned(name, config)


def fit(timings: Sequence[Timing], device: DeviceFacts, start: Parameters = STARTING,
        prior_weight: float = 0.05, iterations: int = 40) -> Parameters:
    """Parameters that fit ``timings``: Levenberg-Marquardt on log(modelled / measured),
    in the logarithm of each parameter (all are positive), with a residual of
    ``prior_weight`` x log(value / starting value) per parameter so that a parameter the
    sample does not inform stays where it started."""
    if not timings:
        raise ValueError("no timings to fit")
    names = _free_names(timings)
    theta0 = np.log([_start_value(start, t, n) for t, n in names])
    measured = np.log([t.seconds for t in timings])
    # A variant's own parameters move only its timings: the Jacobian's other rows stay 0.
    rows_of = {key: np.array([i for i, t in enumerate(timings)
                              if t.candidate.variant.key == key])
               for key in {t.candidate.variant.key for t in timings}}
    everything = np.arange(len(timings))

    def modelled(theta: np.ndarray, rows: np.ndarray) -> np.ndarray:
        params = _with(start, names, np.exp(theta))
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
    return extrapolated(_with(start, names, np.exp(theta)), start)


def extrapolated(fitted: Parameters, start: Parameters = STARTING) -> Parameters:
    """``fitted`` with a rate and a block latency for every variant of the manifest: those
    the timings never covered get their starting rate times the median ratio of fitted to
    starting rates, and the median fitted latency, so that an unmeasured variant is
    neither favoured nor shunned by the shared constants having moved. A store share the
    timings did not tell is the median of those they did."""
    eff, lat, store = dict(fitted.efficiency), dict(fitted.latency), dict(fitted.store)
    ratios = [eff[v.key] / start.rate(v.key, v.config) for v in VARIANTS
              if v.key in eff and v.family != "gemv"]
    latencies = [lat[v.key] for v in VARIANTS if v.key in lat]
    shares = [store[v.key] for v in VARIANTS if v.key in store]
    for v in VARIANTS:
        if v.family == "gemv":
            continue
        if v.key not in eff and ratios:
            eff[v.key] = start.rate(v.key, v.config) * float(np.median(ratios))
        if v.key not in lat and latencies:
            lat[v.key] = float(np.median(latencies))
        if v.key not in store and shares:
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
