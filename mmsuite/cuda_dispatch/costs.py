"""The cost model's parameters and the terms every family's cost is built from.

:class:`Parameters` holds the shared constants and, per variant of the manifest, an
efficiency, an unaligned share, a block latency and a store share; they start from
figures measured by hand on the H100 and are fitted per GPU model
(:func:`.model.fit`). A variant's config says which fitted figures stand for its own
where it has none (``figure_keys``) and where they start (``starting_figure``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


class Figured(Protocol):
    """What the parameters ask of a variant's config: which fitted figures stand for its
    own in a table (its own key first) and where its figures start."""

    def figure_keys(self, table: str, key: str) -> tuple[str, ...]: ...

    def starting_figure(self, table: str) -> float: ...


#: A fill power this large is the hard bend (``soft_fill``), and the fit's bound.
HARD_BEND = 1000.0
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
    # without them gives the M side the shared ones: M_SIDE_OF).
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
    "gemv_fill_power": HARD_BEND,
    "gemv_m_fill_power": HARD_BEND,
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
M_SIDE_OF = {"gemv_wave_s": "gemv_m_wave_s", "gemv_blocks_per_sm": "gemv_m_blocks_per_sm",
             "gemv_sm_blocks": "gemv_m_sm_blocks", "gemv_fill_power": "gemv_m_fill_power"}
#: The per-variant tables of :class:`Parameters`.
PER_VARIANT = ("efficiency", "unaligned", "latency", "store")
SOFT_MAX_POWER = 4.0  # compute and memory overlap: the time is near the larger of the two


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

    def rate(self, key: str, config: Figured) -> float:
        """The variant's share of the FP32 peak (rung 24: a factor on ``gemv_bandwidth``)."""
        return figure(self.efficiency, config.figure_keys("efficiency", key),
                      config.starting_figure("efficiency"))

    def misaligned(self, key: str, config: Figured) -> float:
        """The share of its rate the variant keeps where loads go scalar."""
        return figure(self.unaligned, config.figure_keys("unaligned", key),
                      config.starting_figure("unaligned"))

    def block_latency(self, key: str) -> float:
        return self.latency.get(key, self["block_latency_s"])

    def store_share(self, key: str, config: Figured | None = None) -> float:
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
        for name, m_side in M_SIDE_OF.items():
            if m_side not in given:
                shared[m_side] = shared[name]
        efficiency, unaligned, latency, store = (
            {k: float(v) for k, v in data.get(name, {}).items()}
            for name in PER_VARIANT)
        return cls(shared, efficiency, unaligned, latency, store, source)


STARTING = Parameters()


def figure(table: dict[str, float], keys: tuple[str, ...], default: float) -> float:
    """The first of ``keys`` that ``table`` holds a figure for, else ``default``."""
    return next((table[key] for key in keys if key in table), default)


def soft_fill(share: float, power: float) -> float:
    """``share`` of the loads in flight a full rate needs, as a share of that rate: near
    ``share`` below 1 and near 1 above, the bend as sharp as ``power`` is large (from
    ``HARD_BEND`` up: min(1, share))."""
    if power >= HARD_BEND:
        return min(1.0, share)
    if share <= 1.0:  # written so that neither branch overflows
        return share / (1.0 + share ** power) ** (1.0 / power)
    return (1.0 + share ** -power) ** (-1.0 / power)



def fill(per_sm: int, threads: int, exponent: float) -> float:
    """The share of an SM's rate ``per_sm`` blocks of ``threads`` reach: a share f of 16
    warps runs at f ** ``exponent``."""
    return min(1.0, per_sm * threads / 32 / 16) ** exponent


def soft_max(*seconds: float) -> float:
    """Times that overlap: near the larger of them (a soft maximum)."""
    return sum(s ** SOFT_MAX_POWER for s in seconds) ** (1 / SOFT_MAX_POWER)
