"""Short K (cuda/27_shortk.cu): K short, C's stores the work; each block stages its rows
of A and columns of B once and stores whole columns (:class:`ShortKConfig`); its
whole-column variants (``cols``) give a thread one column of at most 32 rows, for small
M and tiny products. Its cost is a tile's form with split 1, its stores at its own share
of the store rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ...launch import GEMM_ARGS, CudaPlan, CudaStep
from ..family import Candidate, Family, Variant, defines_of
from ..occupancy import grid_problem, resident_blocks
from .gemv import MAX_SKINNY

if TYPE_CHECKING:
    from ...launch import DeviceFacts
    from ..costs import Parameters

# Rung 22 offers rung 27 up to these K, and the fitted model ranks it against the tiles (H100,
# same runs): with M a multiple of 4 the tiles store as fast from K = 12 or so
# (4096x4096x16: 34.5 us against 37.9), while with M not a multiple of 4 their scalar stores
# lose up to K = 60 (3562x988x42: 43.5 us against 18.8; 777x5000x60: 29.7 against 27.3) and,
# where no side is skinny, beyond it (1293x3602x74: rung 27 37.5 us, every tile of rungs
# 20-23 58 to 66, cuBLAS 28). With a side of at most 16, rung 27's blocks hold a few useful
# rows and K past 64 takes them three chunks (batch 51 of 9x2697x73: 2.2x rung 23's time).
MAX_K = 8
MAX_K_UNALIGNED = 64
MAX_K_UNALIGNED_WIDE = 96
THREADS = 256
KC = 32  # K staged per chunk (KC in the source)
COLS = 256  # columns of C per block of the whole-column variants (CW in the source)
# Rung 22 offers the whole-column variants where M fits one block's rows and K is at most
# this: past it each column's K loop is a GEMV's, which rung 24 streams. Of 17 calibration
# shapes with K from 65 to 128 (H100, every plan timed), none ran a whole-column variant
# within 3% of the fastest (median 2.4x), and the model had taken one for batch 38 of
# 31x5x95 (7.7 us, where gemv_m8 ran 4.6); from 17 to 64, 3 of 17 ran fastest so.
COLS_MAX_K = 64


@dataclass(frozen=True)
class ShortKConfig:
    """One variant of cuda/27_shortk.cu: BM rows of C per block (BM / 4 lanes down a
    column) and TN columns per lane; 256 threads. With ``cols`` (mm_27_shortk_cols) a block
    is BM = ROWS rows (8, 16 or 32) of 256 columns, one column a thread (TN 1).
    ``efficiency`` (share of the FP32 peak with K long enough for the FMAs to matter) and
    ``store`` (share of the model's store rate, against the tiles' 1.0) are the figures the
    cost model starts from."""

    bm: int
    tn: int
    regs: int = 64
    efficiency: float = 0.5
    unaligned: float = 0.8
    store: float = 3.0
    cols: bool = False

    def __post_init__(self) -> None:
        if self.cols:
            if self.bm not in (8, 16, 32) or self.tn != 1:
                raise ValueError(f"invalid whole-column short-K config {self.bm}/{self.tn}: "
                                 "ROWS is 8, 16 or 32 and TN 1")
        elif self.bm not in (32, 64, 128) or self.tn not in (4, 8, 16):
            raise ValueError(f"invalid short-K config {self.bm}/{self.tn}: BM is 32, 64 or "
                             "128 and TN 4, 8 or 16")

    @property
    def bn(self) -> int:
        return COLS if self.cols else 8 * (128 // self.bm) * self.tn

    bk = KC
    threads = THREADS
    smem_dynamic = False

    @property
    def name(self) -> str:
        return f"shortk_cols{self.bm}" if self.cols else f"shortk_{self.bm}x{self.bn}_t{self.tn}"

    @property
    def defines(self) -> dict[str, int]:
        return {"ROWS": self.bm} if self.cols else {"BM": self.bm, "TN": self.tn}

    @property
    def smem_bytes(self) -> int:
        if self.cols:  # A's chunk, and B's chunk (row stride 257) or C's block (padded)
            stage = max(KC * (self.bn + 1), self.bm * self.bn * 33 // 32)
            return 4 * (KC * self.bm + stage)
        return 4 * KC * (self.bm + self.bn)

    @property
    def blocks_per_sm(self) -> int:
        return resident_blocks(self.regs, self.threads, self.smem_bytes)

    @property
    def staging_rounds(self) -> int:
        """Rounds of dependent loads a block waits for per K chunk: the tiles' staging loops
        run one pass after another (BM / 4 x 32 floats of A, then BN x 32 of B, 256 a
        pass); the whole-column variant's loops are unrolled, a round for A and one for B."""
        return 2 if self.cols else self.bm // 32 + self.bn // 8

    def params(self) -> dict:
        return {"BM": self.bm, "TN": self.tn, **({"COLS": 1} if self.cols else {})}

    def figure_keys(self, table: str, key: str) -> tuple[str, ...]:
        return (key,)

    def starting_figure(self, table: str) -> float:
        return self.unaligned if table == "unaligned" else self.efficiency


# Rung 27: registers as NVRTC compiles them for the H100 (nvcc 13 gives the TN 8 tiles 94 and
# shortk_cols8 40), none spills (TN 16 spilled, and 32x128 with TN 4 was never the fastest
# on the H100: both left out); efficiency and store share as measured on the H100.
SHORTK_CONFIGS: tuple[ShortKConfig, ...] = (
    ShortKConfig(128, 8, regs=80, efficiency=0.5, store=3.0),
    ShortKConfig(128, 4, regs=48, efficiency=0.4, store=3.0),
    ShortKConfig(64, 8, regs=80, efficiency=0.5, store=3.0),
    # Whole columns: efficiency counts the padded rows' FMAs too; stores coalesced for
    # any M, so no unaligned penalty.
    ShortKConfig(8, 1, regs=48, efficiency=0.5, unaligned=1.0, store=1.5, cols=True),
    ShortKConfig(16, 1, regs=59, efficiency=0.5, unaligned=1.0, store=1.5, cols=True),
    ShortKConfig(32, 1, regs=80, efficiency=0.5, unaligned=1.0, store=1.5, cols=True),
)



def shortk_max_k(m: int, n: int) -> int:
    """The longest K for which rung 22 offers rung 27: :data:`MAX_K` where M is a
    multiple of 4, else :data:`MAX_K_UNALIGNED_WIDE` where neither side is skinny
    and :data:`MAX_K_UNALIGNED` where one is."""
    if m % 4 == 0:
        return MAX_K
    return MAX_K_UNALIGNED_WIDE if min(m, n) > MAX_SKINNY else MAX_K_UNALIGNED



def shortk_grid(config: ShortKConfig, m: int, n: int, batch: int) -> tuple[int, int, int]:
    return (-(-m // config.bm), -(-n // config.bn), batch)


class ShortK(Family[ShortKConfig]):
    name = "shortk"
    source = "cuda/27_shortk.cu"
    informs = ("shortk_round_s",)

    @cached_property
    def variants(self) -> tuple[Variant[ShortKConfig], ...]:
        return tuple(Variant(self, c, "mm_27_shortk_cols" if c.cols else "mm_27_shortk")
                     for c in SHORTK_CONFIGS)

    def splits(self, config: ShortKConfig, m: int, n: int, k: int, batch: int,
               device: DeviceFacts, among: tuple[str, ...]) -> list[int]:
        if config.cols:
            return [] if m > config.bm or k > COLS_MAX_K else [1]
        return [] if k > shortk_max_k(m, n) else [1]

    def why_not(self, config: ShortKConfig, split: int, m: int, n: int, k: int, batch: int,
                device: DeviceFacts) -> str:
        if split != 1:
            return "rung 27 does not split K (split 1)"
        return grid_problem(shortk_grid(config, m, n, batch))

    def cost(self, candidate: Candidate[ShortKConfig], m: int, n: int, k: int, batch: int,
             device: DeviceFacts, p: Parameters) -> float:
        """Rung 27: each block loads, computes, then stores, and its blocks are short-lived, so
        the FMAs and the stores of C add up rather than overlap. Each K chunk puts the
        variant's rounds of staging loads on a block's path (:attr:`ShortKConfig.staging_rounds`).
        A block computes all its rows, padding included (M = 7 in a 128-row block is 128 rows
        of FMAs), and the tiles' threads all their columns (the whole-column variants' warps
        past N skip theirs); a block alone on an SM runs at the SM's rate."""
        config, key = candidate.config, candidate.variant.key
        row_blocks, col_blocks = -(-m // config.bm), -(-n // config.bn)
        blocks = row_blocks * col_blocks * batch
        fill = min(1.0, blocks / device.sms)
        rate = 128 * device.clock_mhz * 1e6 * device.sms * p.rate(key, config) * fill
        if m % 4:
            rate *= p.misaligned(key, config)
        columns = -(-n // 32) * 32 if config.cols else col_blocks * config.bn
        compute_s = batch * row_blocks * config.bm * columns * k / rate
        stored = 4.0 * batch * m * n / (p["store_bytes_per_s"] * p.store_share(key, config))
        loaded = 4.0 * batch * k * (m * -(-n // config.bn) + n * -(-m // config.bm))
        rounds = -(-k // config.bk) * config.staging_rounds
        return (p["launch_s"] + p.block_latency(key) + compute_s + stored
                + loaded / p["load_bytes_per_s"] + rounds * p["shortk_round_s"])

    def plan(self, candidate: Candidate[ShortKConfig], m: int, n: int, k: int, batch: int,
             device: DeviceFacts, info: dict[str, Any]) -> CudaPlan:
        config, row = candidate.config, candidate.variant
        return CudaPlan((CudaStep(shortk_grid(config, m, n, batch), (config.threads,),
                                  row.entry, row.source, defines_of(config), args=GEMM_ARGS),),
                        info={"dispatch": info})

    def config_of(self, params: dict) -> ShortKConfig:
        return ShortKConfig(int(params["BM"]), int(params["TN"]), cols=bool(params.get("COLS", 0)))

    def own_candidates(self) -> list[Candidate[ShortKConfig]]:
        """Rung 27's own offer: every variant (any K: rung 22 offers it only on short ones)."""
        return [Candidate(row) for row in self.variants]

    def label(self, candidate: Candidate[ShortKConfig]) -> str:
        return f"{candidate.config.name}/1"


SHORTK = ShortK()
