"""Stream-K (cuda/23_streamk.cu): resident blocks share the MAC-loop iterations of the
tiles that would leave a wave part empty, then ``mm_23_fixup`` adds the partial tiles
(:func:`streamk_split`). Its tiles are split-K's (:mod:`.splitk`), compiled in its own
source, and so are their cost terms; split-K knows nothing of stream-K.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ...launch import GEMM_ARGS, H100_SXM, CudaPlan, CudaStep, DeviceFacts
from ..costs import fill
from ..family import Candidate, Family, Variant, defines_of
from ..slices import reduce_seconds
from .splitk import CONFIGS, SPLITK, Config, staged_epilogue_seconds, tile_rate, with_traffic

if TYPE_CHECKING:
    from ..costs import Parameters

FIXUP_THREADS = 128  # FIX_THREADS in cuda/23_streamk.cu: one float4 of a partial tile each
MAX_ITERATIONS = 2**31 - 1  # rung 23's kernels count MAC-loop iterations in ints
# Rung 22 offers rung 23 from this K up. Below it a tile's K loop is a few iterations, and the
# stream-K tail's fix-up (partial sums written, waited for, read back) costs more than its
# balance gains: on the H100 (suite timer) no stream-K plan was the fastest timed on any of the
# 298 calibration shapes of K up to 400 (up to 768: on 3 of 342, by at most 2.4%), and at K up
# to 176 rung 23 ran a tile in a median 1.3 to 1.8 times rung 21's time with the same tile in
# one slice (batch 20 of 11965x400x30: 64x128x16_b3 313.0 us against 274.9). Rung 23 alone
# still runs any K.
STREAMK_MIN_K = 256

# The tiles as rung 23 compiles them (registers as ptxas reports them, none spills).
# 128x128x16 spilled in that source before the FMA orders of cuda/mac_loop.inc and has
# not been measured there since.
_STREAMK_REGS = {"256x128x16_t8x8_lr2": 127, "256x128x16": 127, "128x256x16": 128,
                 "128x128x8": 124, "64x128x16_b3": 144, "128x64x16_b3": 143,
                 "64x64x16_b6": 153, "64x64x16_t4x8_lr8": 95, "64x64x16_t4x4_lr4": 77,
                 "32x32x16_t4x4_lr4": 89}
STREAMK_CONFIGS: tuple[Config, ...] = tuple(
    replace(CONFIGS[name], regs=regs) for name, regs in _STREAMK_REGS.items())
# Rung 23's tiles of this many rows or more are built with STAGED_STORE where M is not a
# multiple of 4: whole tiles go out through shared memory (nvcc 13: 128 registers, 167 for
# 128x64x16_b3; the same blocks an SM, none spills).
STREAMK_STAGED_ROWS = 128


def streamk_staged_store(config: Config, m: int) -> bool:
    """Whether rung 23 builds ``config`` with STAGED_STORE for an M x ... problem."""
    return m % 4 != 0 and config.bm >= STREAMK_STAGED_ROWS



@dataclass(frozen=True)
class StreamK:
    """The work split of one problem: ``sk_ctas`` stream-K blocks share the
    iterations of the first ``sk_tiles`` tiles, then one block per remaining tile."""

    config: Config
    tiles: int  # tiles of C over the whole batch
    ipt: int  # MAC-loop iterations per tile: ceil(K / BK)
    slots: int  # resident blocks on the device: SMs x blocks per SM
    sk_ctas: int
    sk_tiles: int

    @property
    def dp_tiles(self) -> int:
        return self.tiles - self.sk_tiles

    @property
    def grid(self) -> tuple[int, int, int]:
        return (self.sk_ctas + self.dp_tiles, 1, 1)

    @property
    def workspace_elems(self) -> int:
        """Two partial tiles per stream-K block (its first and its last tile)."""
        return 2 * self.sk_ctas * self.config.bm * self.config.bn

    @property
    def fixup_grid(self) -> tuple[int, int, int]:
        return (self.sk_tiles, self.config.bm * self.config.bn // (4 * FIXUP_THREADS), 1)

    def begin(self, cta: int) -> int:
        """First iteration of stream-K block ``cta`` (``sk_begin`` in the source)."""
        total = self.sk_tiles * self.ipt
        base, extra = divmod(total, self.sk_ctas)
        return cta * base + min(cta, extra)

    def owner(self, iteration: int) -> int:
        """The stream-K block whose share holds ``iteration`` (``sk_owner``)."""
        base, extra = divmod(self.sk_tiles * self.ipt, self.sk_ctas)
        big = extra * (base + 1)
        return iteration // (base + 1) if iteration < big else extra + (iteration - big) // base

    def info(self) -> dict:
        return {"tiles": self.tiles, "slots": self.slots, "sk_ctas": self.sk_ctas,
                "sk_tiles": self.sk_tiles, "dp_tiles": self.dp_tiles}


def streamk_split(config: Config, m: int, n: int, k: int, batch: int = 1,
                  device: DeviceFacts = H100_SXM) -> StreamK:
    """The two-tile stream-K + data-parallel split (Osama et al., PPoPP'23), with the same
    integer arithmetic as cuda/23_streamk.cu.

    With ``slots`` resident blocks and ``tiles`` tiles: when the tiles fill whole
    waves, every tile is data-parallel. Otherwise the first ``slots + tiles mod
    slots`` tiles (all of them when there are fewer than ``slots``) are shared
    evenly by ``slots`` blocks, between one and two tiles each, and the rest,
    whole waves, stay data-parallel. Never more stream-K blocks than iterations.
    """
    tiles = -(-m // config.bm) * -(-n // config.bn) * batch
    ipt = -(-k // config.bk)
    if tiles * ipt > MAX_ITERATIONS:
        raise ValueError(f"{batch}x{m}x{n}x{k} has {tiles * ipt} MAC-loop iterations of "
                         f"{config.name}; rung 23 counts at most {MAX_ITERATIONS}")
    slots = device.sms * config.blocks_per_sm
    rest = tiles % slots
    sk_tiles = 0 if rest == 0 else min(tiles, slots + rest)
    sk_ctas = min(slots, sk_tiles * ipt)
    return StreamK(config, tiles, ipt, slots, sk_ctas, sk_tiles)



class StreamKFamily(Family[Config]):
    name = "streamk"
    source = "cuda/23_streamk.cu"
    splits_own_way = True
    tile = True

    @cached_property
    def variants(self) -> tuple[Variant[Config], ...]:
        return tuple(Variant(self, c, "mm_23_streamk", "mm_23_fixup") for c in STREAMK_CONFIGS)

    def splits(self, config: Config, m: int, n: int, k: int, batch: int, device: DeviceFacts,
               among: tuple[str, ...]) -> list[int]:
        if k < STREAMK_MIN_K and SPLITK.name in among:
            return []  # rung 21's plan of the same tile is as fast or faster
        return [1]

    def why_not(self, config: Config, split: int, m: int, n: int, k: int, batch: int,
                device: DeviceFacts) -> str:
        if split != 1:
            return "stream-K splits its own way (split 1)"
        try:
            streamk_split(config, m, n, k, batch, device)
        except ValueError as exc:
            return str(exc)
        return ""

    def cost(self, candidate: Candidate[Config], m: int, n: int, k: int, batch: int,
             device: DeviceFacts, p: Parameters) -> float:
        config = candidate.config
        split = streamk_split(config, m, n, k, batch, device)
        sm_rate = tile_rate(candidate, m, k, device, p)
        fma_iter = config.bm * config.bn * config.bk
        latency = p.block_latency(candidate.variant.key)
        staged_s = staged_epilogue_seconds(candidate, m, p)
        seconds = split.dp_tiles // split.slots * (
            config.blocks_per_sm * (split.ipt * fma_iter / sm_rate + staged_s) + latency)
        if split.sk_ctas:
            seconds += _shared_tiles_seconds(split, sm_rate, latency, device, p)
            seconds += _fixup_seconds(split, p)
        return with_traffic(seconds, candidate, m, n, k, batch, 1, p) + p["launch_s"]

    def plan(self, candidate: Candidate[Config], m: int, n: int, k: int, batch: int,
             device: DeviceFacts, info: dict[str, Any]) -> CudaPlan:
        config, row = candidate.config, candidate.variant
        split = streamk_split(config, m, n, k, batch, device)
        counts = (split.sk_ctas, split.sk_tiles)
        staged = (("STAGED_STORE", 1),) if streamk_staged_store(config, m) else ()
        defines = defines_of(config, *staged)
        steps = [CudaStep(split.grid, (config.threads,), row.entry, row.source, defines,
                          args=GEMM_ARGS + ("work",) + counts)]
        if split.sk_ctas:
            steps.append(CudaStep(split.fixup_grid, (FIXUP_THREADS,), row.second_entry,
                                  row.source, defines,
                                  args=("m", "n", "k", "alpha", "work", "beta", "c") + counts))
        return CudaPlan(tuple(steps), workspace=split.workspace_elems,
                        info={"dispatch": {**info, "streamk": True, **split.info()}})

    def config_of(self, params: dict) -> Config:
        return Config.from_params(params)

    def label(self, candidate: Candidate[Config]) -> str:
        return f"{candidate.config.name}/stream-K"

    def staged(self, config: Config, m: int) -> bool:
        return streamk_staged_store(config, m)


def _shared_tiles_seconds(split: StreamK, sm_rate: float, latency: float,
                          device: DeviceFacts, p: Parameters) -> float:
    """The stream-K blocks' shares of the shared tiles, a first and a last tile's latency."""
    config = split.config
    fma_iter = config.bm * config.bn * config.bk
    per_sm = -(-split.sk_ctas // device.sms)
    share = -(-(split.sk_tiles * split.ipt) // split.sk_ctas)
    return per_sm * share * fma_iter / (
        sm_rate * fill(per_sm, config.threads, p["fill_exponent"])) + 2 * latency


def _fixup_seconds(split: StreamK, p: Parameters) -> float:
    """The fix-up of the partial tiles: a reduction's cost, its bytes scaled by
    ``streamk_fixup_factor``."""
    config = split.config
    partials = 4 * split.workspace_elems * p["streamk_fixup_factor"]
    blocks = split.fixup_grid[0] * split.fixup_grid[1]
    return reduce_seconds(partials, 8 * split.sk_tiles * config.bm * config.bn,
                          max(1, blocks // 2), p)


STREAMK = StreamKFamily()
