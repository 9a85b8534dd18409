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
from dataclasses import dataclass, field, replace

import numpy as np

from .device import H100_SXM, DeviceFacts
from .variants import (
    VARIANTS,
    Candidate,
    Config,
    DotConfig,
    GemvConfig,
    ShortKConfig,
    dot_kchunk,
    dot_tiles,
    gemv_grid,
    gemv_groups,
    gemv_kchunk,
    streamk_split,
    streamk_staged_store,
)

AnyConfig = Config | GemvConfig | ShortKConfig | DotConfig

#: A fill power this large is the hard bend (``_soft_fill``), and the fit's bound.
_HARD_BEND = 1000.0
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
    "gemv_fuse_s": 1e-6,  # a fused variant's last block of a tile: the fence, count, re-read
    "fuse_slice_s": 2e-8,  # and per slice: the arrivals on one counter, the slices re-read
    # A fused split-K tile's last block re-reads its tile's slices: bytes per second per thread.
    "fuse_bytes_per_thread_s": 1e9,
    # One K tile of a split-K block when latency, not the FMAs, bounds it (a small tile, few
    # blocks on an SM): its loads' round trip.
    "tile_round_s": 3e-7,
    "gemv_round_s": 0.5e-6,  # one round of a rung 24 block's K loop: loads, then their FMAs
    # A wave of rung 24's blocks beyond its rounds: staging the skinny operand's panel, the
    # block's sums and their store (what makes a split past the SMs' fill cost time).
    "gemv_wave_s": 1e-9,
    # The same two for the M side, whose blocks stage A and hold two rounds of loads (a file
    # without them gives the M side the shared ones: _M_SIDE_OF).
    "gemv_m_wave_s": 1e-9,
    "gemv_m_blocks_per_sm": 3.0,
    # Blocks of rung 24 an SM runs at once at full pace (their FMAs and shared-memory reads
    # of the panel): an SM given more of a wave's blocks (its share rounded up) takes that
    # much longer over their rounds (138 blocks of gemv_m8 on 132 SMs: six SMs run two). The
    # default is past any SM's blocks: no effect, where the N side's fit left it.
    "gemv_sm_blocks": 64.0,
    "gemv_m_sm_blocks": 64.0,
    # The N side's 32- and 64-row blocks share an SM badly: each block an SM is given past
    # the first (the grid's share rounded up) adds this share of the whole time. On the H100
    # (45 N-side shapes, suite timer) 9000x5x80 column-major ran 141 blocks of gemv_n8_r64 in
    # 5.96 us, modelled 5.16, while 70 blocks of gemv_n8 ran 5.27; set by hand, not fitted:
    # 0.15 to 0.5 pick alike on those shapes.
    "gemv_narrow_crowd": 0.3,
    # How sharply rung 24's rate reaches its full share as blocks are added. The M side's
    # grids keep gaining past the blocks-per-SM need (2514x1x7498 row-major on the H100: 79
    # blocks 48.0 us, 4x as many 37.5, 8x 34.6), as a latency-bound stream does. The default
    # (the N side's) is the hard bend, min(1, blocks in flight / need).
    "gemv_fill_power": _HARD_BEND,
    "gemv_m_fill_power": _HARD_BEND,
    "dot_latency_s": 1.5e-6,  # rung 30's launch, block sum and store beyond launch_s
    "dot_round_s": 1.0e-6,  # one round of rung 30's K loop (every thread's loads in flight)
    "launch_s": 2e-6,  # a kernel's start and end, however small (the timer's floor included)
    "store_bytes_per_s": 2.0e12,  # C written by the tiles (small K: the stores dominate)
    "unaligned_store": 1.0,  # the tiles' share of it when M is not a multiple of 4 (scalars)
    # ... and rung 21's plain tiles' share then: C goes out through shared memory, with
    # consecutive lanes on consecutive rows (cuda/21_splitk.cu's store_tile_rows).
    "staged_store": 1.0,
    # ... and the SM's own time for it, per output: each goes to shared memory, back, and out
    # in a scalar store (three instructions a warp per 32 outputs, one a cycle at 1.98 GHz,
    # where an aligned tile stores four outputs a lane in one), after the block's FMAs.
    "staged_epilogue_s": 4.7e-11,
    "load_bytes_per_s": 6.0e12,  # A and B tiles loaded, mostly from L2, once per block
    "shortk_round_s": 1e-8,  # rung 27: a round of a block's staging loads, per K chunk
    # A round of rung 30's blocks past the first (blocks / SMs, rounded up): each block's
    # start, barriers and sums (a batch of tiny products is thousands of short blocks).
    "dot_block_s": 1e-9,
}
#: Rung 24's figures that its M side has its own of; a model file without the M side's (one
#: fitted before the M side had them) gives it the shared ones.
_M_SIDE_OF = {"gemv_wave_s": "gemv_m_wave_s", "gemv_blocks_per_sm": "gemv_m_blocks_per_sm",
              "gemv_sm_blocks": "gemv_m_sm_blocks", "gemv_fill_power": "gemv_m_fill_power"}
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
    # A block's prologue and epilogue; for rung 24's M-side variants, one round of their K loop.
    latency: dict[str, float] = field(default_factory=dict)
    # Share of ``store_bytes_per_s`` a variant's epilogue reaches: how a tile's threads lay
    # out their stores decides it, and with K short the stores are nearly all the time
    # (on the H100 at 15443x1914x1, rung 23's 128x64 tile beat the 128x256 one by 1.6x
    # while the shared rate modelled them as equal).
    store: dict[str, float] = field(default_factory=dict)
    source: str = "starting figures"  # or the model file they were read from

    def rate(self, key: str, config: AnyConfig) -> float:
        if isinstance(config, DotConfig):
            return self.efficiency.get(key, 1.0)
        if isinstance(config, GemvConfig):
            return _gemv_figure(self.efficiency, key, 1.0)
        # A fused split-K tile runs its K loop as its plain variant does.
        return self.efficiency.get(key, self.efficiency.get(key.removesuffix("_f"),
                                                            config.efficiency))

    def misaligned(self, key: str, config: AnyConfig) -> float:
        if isinstance(config, DotConfig):
            return 1.0
        if isinstance(config, GemvConfig):
            return _gemv_figure(self.unaligned, key, 0.9)
        return self.unaligned.get(key, self.unaligned.get(key.removesuffix("_f"),
                                                          config.unaligned))

    def block_latency(self, key: str) -> float:
        return self.latency.get(key, self["block_latency_s"])

    def gemv_round(self, key: str) -> float:
        """One round of a rung 24 variant's K loop (its ``latency`` entry where fitted: a
        round holds 2-4x the FMAs and shared-memory reads per load as the skinny side grows,
        on either side, so one shared figure cannot serve them all)."""
        return _gemv_figure(self.latency, key, self["gemv_round_s"])

    def gemv_figure(self, name: str, side: str) -> float:
        """Rung 24's figure ``name`` for its ``side`` ("m": the M side's own)."""
        return self[_M_SIDE_OF[name]] if side == "m" else self[name]

    def store_share(self, key: str, config: AnyConfig | None = None) -> float:
        return self.store.get(key, getattr(config, "store", 1.0))

    def __getitem__(self, name: str) -> float:
        return self.shared.get(name, SHARED_DEFAULTS[name])

    def to_dict(self) -> dict:
        return {"shared": dict(self.shared),
                **{name: dict(getattr(self, name)) for name in PER_VARIANT}}

    @classmethod
    def from_dict(cls, data: dict, source: str = "") -> Parameters:
        given = {k: float(v) for k, v in data.get("shared", {}).items() if k in SHARED_DEFAULTS}
        shared = {**SHARED_DEFAULTS, **given}
        for name, m_side in _M_SIDE_OF.items():
            if m_side not in given:
                shared[m_side] = shared[name]
        efficiency, unaligned, latency, store = (
            {k: float(v) for k, v in data.get(name, {}).items()}
            for name in PER_VARIANT)
        return cls(shared, efficiency, unaligned, latency, store, source)



STARTING = Parameters()


def _gemv_stand_ins(config: GemvConfig) -> tuple[str, ...]:
    """The keys whose figures a rung 24 variant takes, in order: its own, its plain
    variant's (a fused one streams as it does), then those of the 128-row block of its width
    (where the narrow blocks were not fitted: the H200's file)."""
    plain = replace(config, fused=False)
    return tuple(dict.fromkeys(
        f"gemv:{c.name}" for c in (config, plain, replace(config, column_lanes=32),
                                   replace(plain, column_lanes=32))))


#: Each rung 24 variant's stand-ins, worked out once: the model looks them up per estimate.
_GEMV_STAND_INS = {v.key: _gemv_stand_ins(v.config) for v in VARIANTS
                   if isinstance(v.config, GemvConfig)}


def _gemv_figure(table: dict[str, float], key: str, default: float) -> float:
    """A rung 24 variant's figure in ``table``: its own or its first stand-in's (else
    ``default``)."""
    return next((table[name] for name in _GEMV_STAND_INS[key] if name in table), default)


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
    assert isinstance(config, (Config, ShortKConfig))
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

    rounds_s = k_slice / config.bk * p["tile_round_s"]  # the blocks of a wave wait together
    staged_s = _staged_epilogue_seconds(c, m, p)

    def wave(per_sm: int) -> float:
        fill = _fill(per_sm, config.threads, p["fill_exponent"])
        compute_s = per_sm * fma_per_block / (sm_rate * fill)
        compute_s = (compute_s ** _SOFT_MAX_POWER + rounds_s ** _SOFT_MAX_POWER) ** (
            1 / _SOFT_MAX_POWER)
        return compute_s + per_sm * staged_s + p.block_latency(c.variant.key)

    seconds = full_waves * wave(occupancy)
    if rest:
        seconds += wave(-(-rest // device.sms))
    seconds = _with_traffic(seconds, c, m, n, k, batch, split, p) + p["launch_s"]
    if split > 1 and isinstance(config, Config) and config.fused:
        seconds += _fused_tiles_seconds(config, tiles, split, p)
    elif split > 1:
        seconds += _reduce_seconds(4 * batch * m * n * split, 8 * batch * m * n,
                                   reduce_blocks(m, n, batch, device), p)
    return seconds


def _fused_tiles_seconds(config: Config, tiles: int, split: int, p: Parameters) -> float:
    """A fused split-K plan's tail: the last block of each tile (all tiles at once) reads
    the tile's ``split`` packed slices with its threads, after the fence and the count."""
    tile_bytes = 4.0 * config.bm * config.bn * split
    return (tile_bytes / (config.threads * p["fuse_bytes_per_thread_s"])
            + tiles * tile_bytes / p["reduce_bytes_per_s"] + p["gemv_fuse_s"]
            + split * p["fuse_slice_s"])


def _with_traffic(compute_s: float, c: Candidate, m: int, n: int, k: int, batch: int,
                  split: int, p: Parameters) -> float:
    """Compute time and memory time, overlapped: C (or the slices' partial sums) stored
    once at the variant's share of the store rate, each block's A and B panels loaded once."""
    config = c.config
    assert isinstance(config, (Config, ShortKConfig))
    stored = 4.0 * batch * m * n * split
    loaded = 4.0 * batch * k * (m * -(-n // config.bn) + n * -(-m // config.bm))
    store_rate = p["store_bytes_per_s"] * p.store_share(c.variant.key, config)
    if _staged(c, m):  # the warps take turns at the shared buffers
        assert isinstance(config, Config)
        store_rate *= p["staged_store"] / config.store_rounds
    elif m % 4:
        store_rate *= p["unaligned_store"]
    memory_s = stored / store_rate + loaded / p["load_bytes_per_s"]
    power = _SOFT_MAX_POWER
    return (compute_s ** power + memory_s ** power) ** (1 / power)


def _staged(c: Candidate, m: int) -> bool:
    """Whether a tile stores C of this M through shared memory: where M is not a multiple
    of 4, rung 21's plain tiles and rung 23's tiles of its STAGED_STORE build (the planner's
    :func:`streamk_staged_store`); rung 23's other tiles, its fix-up and the fused tiles'
    last blocks store scalars."""
    config = c.config
    if not isinstance(config, Config):
        return False
    if c.family == "streamk":
        return streamk_staged_store(config, m)
    return m % 4 != 0 and c.family == "splitk" and not config.fused


def _staged_epilogue_seconds(c: Candidate, m: int, p: Parameters) -> float:
    """An SM's time for one block's outputs where C goes out through shared memory (the SM
    passes each block's outputs one after another through its load/store unit), else 0."""
    if not _staged(c, m):
        return 0.0
    assert isinstance(c.config, Config)
    return p["staged_epilogue_s"] * c.config.bm * c.config.bn


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
    staged_s = _staged_epilogue_seconds(c, m, p)
    seconds = split.dp_tiles // split.slots * (occupancy * (split.ipt * fma_iter / sm_rate
                                                            + staged_s) + latency)
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
    # Loads in flight per block against a 256-thread block of one column a lane and four
    # loads: the M side keeps two rounds in flight (from 8 rows of A up, two loads of each of
    # two columns a round). The N side issues its next round before this one's FMAs, but
    # moving that round into this round's registers at the top of the K loop waits for its
    # loads (SASS of gemv_n4_r64, nvcc 13: sixteen moves of the loaded registers before the
    # next loads go out), so a block has one round on the way when it waits: counted as one
    # (on 48 N-side shapes timed on the H100 the pick came within 3% of the fastest on 33,
    # 26 counting two; on 143 timed before the 64-row blocks, 106 and 107). The 16-column
    # N-side block has 128 threads.
    in_flight = config.threads / 256 * (1 if config.side == "n" else 2)
    rate = device.memory_bytes_per_s * p["gemv_bandwidth"] * p.rate(c.variant.key, config)
    if (m % 4 if config.side == "n" else k % 4):
        rate *= p.misaligned(c.variant.key, config)
    moved = 4.0 * batch * (m * k * gemv_groups(config, n) + k * n + m * n)
    # A block's K slice in rounds of loads (N side: each warp's loads_per_round columns of
    # A; M side: loads_per_round loads of each column): N-side, its warps step
    # loads_per_round x warps along K; M-side, its lanes 4 x loads_per_round x lanes.
    per_round = config.k_per_round
    if config.side == "n":
        # The 16-column block's round holds half the K steps of A in flight that the others'
        # do: its grid needs twice the blocks to keep as many bytes on the way (a 32-row
        # block has as many lanes and loads as the 128-row one of its width; its round is
        # its groups' columns, not more loads).
        in_flight *= config.loads_per_round * config.warps / 32
    rounds = -(-gemv_kchunk(k, split) // per_round) if split > 1 else -(-k // per_round)
    power = _SOFT_MAX_POWER
    round_s = p.gemv_round(c.variant.key)
    needed = p.gemv_figure("gemv_blocks_per_sm", config.side)
    fill_power = p.gemv_figure("gemv_fill_power", config.side)
    sm_blocks = p.gemv_figure("gemv_sm_blocks", config.side)

    def wave(count: int) -> float:
        """``count`` blocks at once: their bytes at the rate their loads in flight reach
        (fewer blocks than ``gemv_blocks_per_sm`` an SM: proportionally less, bending as
        softly as ``gemv_fill_power``), or their rounds of loads, whichever is longer."""
        fill = _soft_fill(count * in_flight / (needed * device.sms), fill_power)
        stream_s = moved * count / blocks / (rate * fill)
        crowd = max(1.0, -(-count // device.sms) / sm_blocks)
        return (stream_s ** power + (rounds * round_s * crowd) ** power) ** (1 / power)

    # More blocks than the SMs hold run in waves, the last one short (gemv_n16 holds 4 blocks
    # an SM, 528 on the H100: 74 row blocks with K 6144 took 121.5 us in 4 slices, one wave,
    # and 140.1 in 8, two).
    full_waves, rest = divmod(blocks, device.sms * config.blocks_per_sm)
    seconds = full_waves * wave(device.sms * config.blocks_per_sm) + (wave(rest) if rest else 0)
    seconds += (full_waves + bool(rest)) * p.gemv_figure("gemv_wave_s", config.side)
    seconds += p["gemv_latency_s"]
    if split > 1 and config.fused:  # each slice written and read back once, no second launch
        seconds += _fused_sum_seconds(batch * m * n, split, p, config.tail_rounds)
    elif split > 1:
        seconds += _reduce_seconds(4 * batch * m * n * split, 8 * batch * m * n,
                                   reduce_blocks(m, n, batch, device), p)
    if config.narrow:
        seconds *= 1.0 + p["gemv_narrow_crowd"] * (-(-blocks // device.sms) - 1)
    return seconds


def _soft_fill(share: float, power: float) -> float:
    """``share`` of the loads in flight a full rate needs, as a share of that rate: near
    ``share`` below 1 and near 1 above, the bend as sharp as ``power`` is large (from
    ``_HARD_BEND`` up: min(1, share))."""
    if power >= _HARD_BEND:
        return min(1.0, share)
    if share <= 1.0:  # written so that neither branch overflows
        return share / (1.0 + share ** power) ** (1.0 / power)
    return (1.0 + share ** -power) ** (-1.0 / power)


def _fused_sum_seconds(outputs: int, split: int, p: Parameters, rounds: int = 1) -> float:
    """The last block of each tile adding the slices (rungs 24 FUSED and 30): their bytes,
    and a wait for L2 per slice for each of a thread's ``rounds`` of loads (rung 24's
    16-column block has 16 outputs a thread, four at a time). Rung 24's last block loads up
    to eight slices' words at once; ``fuse_slice_s``, which rung 30 and rung 21's fused
    tiles share, was last refitted with the other figures of the slice sums
    (``fit --sums``)."""
    return (8.0 * outputs * split / p["reduce_bytes_per_s"] + p["gemv_fuse_s"]
            + rounds * split * p["fuse_slice_s"])


def _shortk_seconds(c: Candidate, m: int, n: int, k: int, batch: int, device: DeviceFacts,
                    p: Parameters) -> float:
    """Rung 27: each block loads, computes, then stores, and its blocks are short-lived, so
    the FMAs and the stores of C add up rather than overlap. Each K chunk puts the
    variant's rounds of staging loads on a block's path (:attr:`ShortKConfig.staging_rounds`).
    A block computes all its rows, padding included (M = 7 in a 128-row block is 128 rows
    of FMAs), and the tiles' threads all their columns (the whole-column variants' warps
    past N skip theirs); a block alone on an SM runs at the SM's rate."""
    config = c.config
    assert isinstance(config, ShortKConfig)
    row_blocks, col_blocks = -(-m // config.bm), -(-n // config.bn)
    blocks = row_blocks * col_blocks * batch
    fill = min(1.0, blocks / device.sms)
    rate = 128 * device.clock_mhz * 1e6 * device.sms * p.rate(c.variant.key, config) * fill
    if m % 4:
        rate *= p.misaligned(c.variant.key, config)
    columns = -(-n // 32) * 32 if config.cols else col_blocks * config.bn
    compute_s = batch * row_blocks * config.bm * columns * k / rate
    stored = 4.0 * batch * m * n / (p["store_bytes_per_s"] * p.store_share(c.variant.key, config))
    loaded = 4.0 * batch * k * (m * -(-n // config.bn) + n * -(-m // config.bm))
    rounds = -(-k // config.bk) * config.staging_rounds
    return (p["launch_s"] + p.block_latency(c.variant.key) + compute_s + stored
            + loaded / p["load_bytes_per_s"] + rounds * p["shortk_round_s"])


def _dot_seconds(c: Candidate, m: int, n: int, k: int, batch: int, device: DeviceFacts,
                 p: Parameters) -> float:
    config, split = c.config, c.split
    assert isinstance(config, DotConfig)
    tiles = dot_tiles(m, n)
    blocks = tiles * split * batch
    rounds = -(-dot_kchunk(k, split) // (config.threads * 4))
    tiles_m, tiles_n = -(-m // config.tile), -(-n // config.tile)
    moved = 4.0 * batch * (m * k * tiles_n + k * n * tiles_m + m * n)
    # A block's loads are all in flight at once (one round): its bandwidth is its bytes
    # over a round's latency, so that the grid's rate grows with its blocks.
    rate = min(device.memory_bytes_per_s * p.rate(c.variant.key, config),
               blocks * config.threads * 4 * 8 * 4 / p["dot_round_s"])
    seconds = (p["launch_s"] + p["dot_latency_s"] + rounds * p["dot_round_s"] + moved / rate
               + (-(-blocks // device.sms) - 1) * p["dot_block_s"])
    if split > 1:
        seconds += _fused_sum_seconds(batch * m * n, split, p)
    return seconds


_BY_FAMILY = {"splitk": _splitk_seconds, "streamk": _streamk_seconds, "gemv": _gemv_seconds,
              "shortk": _shortk_seconds, "dot": _dot_seconds}


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
    families = {t.candidate.family for t in timings}
    # A constant of rungs 24, 27 and 30 alone is free only where they were timed; the tiles'
    # store shares for a misaligned M only where such a tile (scalar or staged) stored C with
    # K short.
    misaligned_stores = [t for t in timings if t.m % 4 and t.k <= STORE_BOUND_K
                         and t.candidate.family in ("splitk", "streamk")]
    told = {"unaligned_store": any(not _staged(t.candidate, t.m) for t in misaligned_stores),
            "staged_store": any(_staged(t.candidate, t.m) for t in misaligned_stores),
            "staged_epilogue_s": any(_staged(t.candidate, t.m) for t in misaligned_stores)}
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
        side = getattr(t.candidate.config, "side", "n")
        misaligned = bool(t.k % 4) if side == "m" else bool(t.m % 4 or
                                                            (t.k % 4 and
                                                             t.candidate.family != "gemv"))
        seen[key] = seen.get(key, False) or misaligned
    for key, misaligned in seen.items():
        if key in compute_bound or key.startswith("gemv:"):
            names.append(("efficiency", key))
        names.append(("latency", key))  # rung 24's: its round's time
        if key in store_bound and not key.startswith("gemv:"):
            names.append(("store", key))
        if misaligned and key in compute_bound:
            names.append(("unaligned", key))
    return names


#: The constants that only some families' timings inform.
_SHARED_OF: dict[str, tuple[str, ...]] = {
    "gemv_round_s": ("gemv",), "gemv_wave_s": ("gemv",), "gemv_m_wave_s": ("gemv",),
    "gemv_sm_blocks": ("gemv",), "gemv_m_sm_blocks": ("gemv",), "gemv_narrow_crowd": ("gemv",),
    "gemv_m_blocks_per_sm": ("gemv",), "gemv_fill_power": ("gemv",),
    "gemv_m_fill_power": ("gemv",),
    "gemv_fuse_s": ("gemv", "dot", "splitk"),  # rung 21's fused tiles pay them too
    "fuse_slice_s": ("gemv", "dot", "splitk"),
    "fuse_bytes_per_thread_s": ("splitk",), "tile_round_s": ("splitk",),
    "dot_latency_s": ("dot",), "dot_round_s": ("dot",), "gemv_bandwidth": ("gemv",),
    "gemv_blocks_per_sm": ("gemv", "dot"), "gemv_latency_s": ("gemv",),
    "shortk_round_s": ("shortk",), "dot_block_s": ("dot",), "staged_store": ("splitk",),
    "staged_epilogue_s": ("splitk",),
}
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
    "gemv_fill_power": (0.5, _HARD_BEND),
    "gemv_m_fill_power": (0.5, _HARD_BEND),
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
    if table == "latency":
        return start.gemv_round(name) if name.startswith("gemv:") else start.block_latency(name)
    config = next(v.config for v in VARIANTS if v.key == name)
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
    tiles = ("splitk", "streamk")  # rung 27's and 30's rates are their own
    ratios = [eff[v.key] / start.rate(v.key, v.config) for v in VARIANTS
              if v.key in eff and v.family in tiles]
    latencies = [lat[v.key] for v in VARIANTS if v.key in lat and v.family != "gemv"]
    shares = [store[v.key] for v in VARIANTS if v.key in store and v.family in tiles]
    for v in VARIANTS:
        if v.family in ("gemv", "dot"):
            continue
        if v.key not in eff and ratios:
            eff[v.key] = start.rate(v.key, v.config) * float(np.median(ratios))
        if v.key not in lat and latencies:
            lat[v.key] = float(np.median(latencies))
        if v.key not in store and shares and v.family != "shortk":
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
