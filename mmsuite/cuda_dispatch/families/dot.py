"""Dot (cuda/30_dot.cu): a handful of outputs, K long; a block's 256 threads walk K
together for one 4 x 4 tile of C, K split over blocks whose last adds the slices in the
same launch (:class:`DotConfig`). Its cost is a launch, a chain of K rounds per block
and the bytes its few blocks move.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ...launch import GEMM_ARGS, CudaPlan, CudaStep
from ..family import Candidate, Family, Variant, defines_of
from ..occupancy import grid_problem
from ..slices import fused_sum_seconds

if TYPE_CHECKING:
    from ...launch import DeviceFacts
    from ..costs import Parameters

TILE = 4  # DT in cuda/30_dot.cu: a block's tile of C is TILE x TILE
THREADS = 256
MAX_TILES = 16  # rung 22 offers rung 30 where C has at most this many tiles (per matrix)


@dataclass(frozen=True)
class DotConfig:
    """cuda/30_dot.cu's one variant: 256 threads, a 4 x 4 tile of C per block."""

    regs: int = 73
    tile: int = TILE
    threads: int = THREADS
    smem_dynamic = False
    smem_bytes = 0

    @property
    def name(self) -> str:
        return f"dot_{self.tile}x{self.tile}"

    @property
    def defines(self) -> dict[str, int]:
        return {}

    def params(self) -> dict:
        return {"TILE": self.tile}

    def figure_keys(self, table: str, key: str) -> tuple[str, ...]:
        """Its fitted rate; it loads nothing unaligned (no unaligned share)."""
        return () if table == "unaligned" else (key,)

    def starting_figure(self, table: str) -> float:
        return 1.0


DOT_CONFIG = DotConfig()


def dot_tiles(m: int, n: int) -> int:
    """Tiles of C per matrix, each one block (times the K split)."""
    return -(-m // TILE) * -(-n // TILE)


def dot_splits(k: int) -> list[int]:
    """Split factors of rung 30: every slice gets at least one K step per thread and
    none is empty."""
    out = [1]
    for s in (2, 4, 8, 16, 32, 64, 128):
        per = -(-k // s)
        if per < THREADS or (s - 1) * per >= k:
            break
        out.append(s)
    return out


def dot_kchunk(k: int, split: int) -> int:
    return -(-k // split)


class Dot(Family[DotConfig]):
    name = "dot"
    source = "cuda/30_dot.cu"
    own_rates = True
    informs = ("gemv_fuse_s", "fuse_slice_s", "dot_latency_s", "dot_round_s",
               "gemv_blocks_per_sm", "dot_block_s")

    @cached_property
    def variants(self) -> tuple[Variant[DotConfig], ...]:
        return (Variant(self, DOT_CONFIG, "mm_30_dot"),)

    def splits(self, config: DotConfig, m: int, n: int, k: int, batch: int,
               device: DeviceFacts, among: tuple[str, ...]) -> list[int]:
        return [] if dot_tiles(m, n) > MAX_TILES else dot_splits(k)

    def why_not(self, config: DotConfig, split: int, m: int, n: int, k: int, batch: int,
                device: DeviceFacts) -> str:
        if split not in dot_splits(k):
            return f"split {split} leaves a K slice empty or short"
        return grid_problem((dot_tiles(m, n), split, batch))

    def cost(self, candidate: Candidate[DotConfig], m: int, n: int, k: int, batch: int,
             device: DeviceFacts, p: Parameters) -> float:
        config, split = candidate.config, candidate.split
        blocks = dot_tiles(m, n) * split * batch
        rounds = -(-dot_kchunk(k, split) // (config.threads * 4))
        tiles_m, tiles_n = -(-m // config.tile), -(-n // config.tile)
        moved = 4.0 * batch * (m * k * tiles_n + k * n * tiles_m + m * n)
        # A block's loads are all in flight at once (one round): its bandwidth is its bytes
        # over a round's latency, so that the grid's rate grows with its blocks.
        rate = min(device.memory_bytes_per_s * p.rate(candidate.variant.key, config),
                   blocks * config.threads * 4 * 8 * 4 / p["dot_round_s"])
        seconds = (p["launch_s"] + p["dot_latency_s"] + rounds * p["dot_round_s"] + moved / rate
                   + (-(-blocks // device.sms) - 1) * p["dot_block_s"])
        if split > 1:
            seconds += fused_sum_seconds(batch * m * n, split, p)
        return seconds

    def plan(self, candidate: Candidate[DotConfig], m: int, n: int, k: int, batch: int,
             device: DeviceFacts, info: dict[str, Any]) -> CudaPlan:
        config, slices, row = candidate.config, candidate.split, candidate.variant
        step = CudaStep((dot_tiles(m, n), slices, batch), (config.threads,), row.entry,
                        row.source, defines_of(config),
                        args=GEMM_ARGS + ("work", dot_kchunk(k, slices)))
        # The slices, then one arrival counter per tile (the workspace starts zeroed).
        workspace = batch * slices * m * n + dot_tiles(m, n) * batch if slices > 1 else 0
        return CudaPlan((step,), workspace=workspace, info={"dispatch": info})

    def config_of(self, params: dict) -> DotConfig:
        return DOT_CONFIG

    def own_candidates(self, k: int) -> list[Candidate[DotConfig]]:
        """Rung 30's own offer: its one variant with each split (any shape: rung 22 offers
        it only where C has few tiles)."""
        return [Candidate(self.variants[0], s) for s in dot_splits(k)]


DOT = Dot()
