"""Split-K (cuda/21_splitk.cu): one block per tile of C and K slice; with more than one
slice, ``mm_21_reduce`` adds the slices, or (small tiles compiled ``fused``) the last
block of each tile adds them in the same launch. A :class:`Config` is its -D defines
(block tile BM x BN x BK, TM x TN outputs per thread, LR lanes along a warp tile's
rows, STAGES shared buffers, MINB blocks per SM in the launch bounds). Its tiles, and
their cost terms, are also stream-K's (:mod:`.streamk`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ...launch import GEMM_ARGS, MAX_STATIC_SMEM, CudaPlan, CudaStep
from ..costs import fill, soft_max
from ..family import Candidate, Family, Variant, defines_of
from ..occupancy import (
    MAX_SMEM_PER_BLOCK,
    MAX_WORKSPACE_BYTES,
    grid_problem,
    resident_blocks,
    whole_slices,
)
from ..slices import reduce_step, slices_reduced_seconds

if TYPE_CHECKING:
    from ...launch import DeviceFacts
    from ..costs import Parameters


@dataclass(frozen=True)
class Config:
    """One tile shape of cuda/21_splitk.cu (and of rung 23, which includes it).

    ``regs`` is the register count the variant compiles to for sm_90 (nvcc 13);
    it sets how many blocks share an SM. ``efficiency`` (the fraction of the FP32
    peak a full SM reaches with this tile, H100 at 4096^3) and ``unaligned`` (the
    share of it left when M or K is not a multiple of 4 and loads go scalar) are
    the measured figures the cost model starts from before it is fitted.
    """

    bm: int
    bn: int
    bk: int = 16
    tm: int = 8
    tn: int = 8
    lr: int = 4
    stages: int = 1  # shared-memory buffers (2: one barrier per K tile instead of two)
    minb: int = 0  # 0: the source's default, 16 warps per SM
    regs: int = 128
    fused: bool = False  # with K split, the last block of a tile adds the slices (FUSED=1)
    efficiency: float = 0.69
    unaligned: float = 0.80

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ValueError(f"invalid tile config {self.name}: {problems}")

    def problems(self) -> str:
        """Why these defines do not compile (the source's static_asserts), or ''."""
        if self.tm not in (4, 8) or self.tn not in (4, 8):
            return "TM and TN must be 4 or 8"
        if self.lr not in (1, 2, 4, 8, 16, 32) or self.bk % 4 or self.bk < 4:
            return "LR must divide 32 and BK be a multiple of 4"
        wm, wn = self.lr * self.tm, (32 // self.lr) * self.tn
        if self.bm % wm or self.bn % wn:
            return f"{self.bm}x{self.bn} does not hold whole {wm}x{wn} warp tiles"
        threads = 32 * (self.bm // wm) * (self.bn // wn)
        if threads > 1024:
            return f"{threads} threads per block (at most 1024)"
        if self.stages not in (1, 2):
            return "STAGES must be 1 or 2"
        a_pass, b_pass = threads // (self.bm // 4), threads // max(1, self.bk // 4)
        if threads % (self.bm // 4) or (self.bk % a_pass and a_pass % self.bk):
            return "A staging does not tile BM x BK"
        if threads % (self.bk // 4) or (self.bn % b_pass and b_pass % self.bn):
            return "B staging does not tile BK x BN"
        if self.smem_bytes > MAX_SMEM_PER_BLOCK:
            return (f"{self.smem_bytes} bytes of shared memory (at most "
                    f"{MAX_SMEM_PER_BLOCK} per block)")
        return ""

    @property
    def threads(self) -> int:
        return 32 * (self.bm // (self.lr * self.tm)) * (self.bn // ((32 // self.lr) * self.tn))

    @property
    def name(self) -> str:
        text = f"{self.bm}x{self.bn}x{self.bk}"
        if (self.tm, self.tn, self.lr) != (8, 8, 4):
            text += f"_t{self.tm}x{self.tn}_lr{self.lr}"
        if self.stages != 1:
            text += f"_s{self.stages}"
        if self.minb:
            text += f"_b{self.minb}"
        if self.fused:
            text += "_f"
        return text

    @property
    def defines(self) -> dict[str, int]:
        out = {"BM": self.bm, "BN": self.bn, "BK": self.bk, "TM": self.tm, "TN": self.tn,
               "LR": self.lr}
        if self.stages != 1:
            out["STAGES"] = self.stages
        if self.minb:
            out["MINB"] = self.minb
        if self.smem_dynamic:
            out["SMEM_DYNAMIC"] = 1
        if self.fused:
            out["FUSED"] = 1
        return out

    @property
    def smem_dynamic(self) -> bool:
        """The buffers pass the 48 KiB a kernel may declare: the launch passes their size."""
        return self.smem_bytes > MAX_STATIC_SMEM

    @property
    def smem_bytes(self) -> int:
        return 4 * self.stages * self.bk * (self.bm + self.bn + 4)

    @property
    def store_rounds(self) -> int:
        """Turns the warps take to store C through the shared buffers where M is not a
        multiple of 4 (EPI_ROUNDS in cuda/21_splitk.cu): each warp's part is its WM rows
        (padded to 8 mod 32 a quarter) by 32 / LR columns, at a pitch of LR mod 32."""
        wm = self.lr * self.tm
        quarter = wm // 4 + (8 - wm // 4) % 32
        pitch = 4 * quarter + (self.lr - 4 * quarter) % 32
        slots = self.stages * self.bk * (self.bm + self.bn + 4) // (pitch * (32 // self.lr))
        return -(-(self.threads // 32) // slots)

    @property
    def blocks_per_sm(self) -> int:
        """Resident blocks per SM: registers, threads, shared (:func:`resident_blocks`)."""
        return resident_blocks(self.regs, self.threads, self.smem_bytes)

    def figure_keys(self, table: str, key: str) -> tuple[str, ...]:
        """Its own figures, else its plain variant's (a fused tile runs its K loop as the
        plain one does)."""
        return (key, key.removesuffix("_f"))

    def starting_figure(self, table: str) -> float:
        return self.unaligned if table == "unaligned" else self.efficiency

    def params(self) -> dict[str, int]:
        """The tunable parameters, as stored in tuning files."""
        return {"BM": self.bm, "BN": self.bn, "BK": self.bk, "TM": self.tm, "TN": self.tn,
                "LR": self.lr, "STAGES": self.stages, "MINB": self.minb,
                **({"FUSED": 1} if self.fused else {})}

    @classmethod
    def from_params(cls, params: dict) -> Config:
        """A config from tuning-file parameters; known shapes keep their measured figures."""
        args = {"bm": int(params["BM"]), "bn": int(params["BN"]), "bk": int(params.get("BK", 16)),
                "tm": int(params.get("TM", 8)), "tn": int(params.get("TN", 8)),
                "lr": int(params.get("LR", 4)), "stages": int(params.get("STAGES", 1)),
                "minb": int(params.get("MINB", 0))}
        fused = bool(params.get("FUSED", 0))
        for known in SEARCH + FUSED_CONFIGS:
            if known.fused == fused and all(getattr(known, key) == value
                                            for key, value in args.items()):
                return known
        return cls(**args, fused=fused)



# The split-K variants the dispatcher offered before the model was fitted. Registers from
# `nvcc -arch=sm_90 -Xptxas -v`; efficiency = TFLOP/s at 4096^3 on the H100 (split 1,
# every SM full, two rounds) over the 66.9 TFLOP/s FP32 peak, measured with each tile's
# FMA order of cuda/mac_loop.inc. 128x256x16 with two buffers was faster on
# 8192x128x8192 (93.5% of cuBLAS against 91%) but spills 32 bytes under nvcc 13.0, so
# it is left out.
CONFIGS: dict[str, Config] = {c.name: c for c in (
    Config(256, 128, lr=2, stages=2, regs=128, efficiency=0.736, unaligned=0.74),
    Config(256, 128, lr=2, regs=128, efficiency=0.725, unaligned=0.735),
    Config(256, 128, regs=128, efficiency=0.72, unaligned=0.735),
    Config(128, 256, regs=128, efficiency=0.696, unaligned=0.755),
    Config(128, 128, bk=8, lr=2, regs=126, efficiency=0.708, unaligned=0.81),
    Config(128, 128, bk=8, regs=128, efficiency=0.705, unaligned=0.74),
    Config(128, 128, regs=128, efficiency=0.70, unaligned=0.845),
    Config(64, 128, minb=3, regs=154, efficiency=0.654, unaligned=0.915),
    Config(128, 64, minb=3, regs=154, efficiency=0.673, unaligned=0.84),
    Config(64, 64, minb=6, regs=160, efficiency=0.633, unaligned=0.925),
    Config(64, 64, tm=4, tn=8, lr=8, regs=101, efficiency=0.591, unaligned=0.89),
    Config(64, 64, tm=4, tn=4, regs=79, efficiency=0.479, unaligned=0.85),
    Config(32, 32, tm=4, tn=4, regs=89, efficiency=0.417, unaligned=0.87),
)}
RUNG21_CONFIG = CONFIGS["128x128x8"]
# Beyond them, tiles only the tuner tried at first: double-buffered shared memory,
# 512-thread tiles with BK 8, taller 256x64 and 512x64 tiles; none beat the best at
# 4096^3 on the H100 (256x128x8 LR 2 double-buffered came closest, 0.716 against 0.736).
SEARCH: tuple[Config, ...] = tuple(CONFIGS.values()) + (
    Config(256, 128, bk=8, lr=2, stages=2, regs=128, efficiency=0.716, unaligned=0.745),
    Config(256, 128, bk=8, lr=2, regs=128, efficiency=0.696, unaligned=0.75),
    Config(128, 256, bk=8, stages=2, regs=128, efficiency=0.636, unaligned=0.775),
    Config(128, 128, bk=8, stages=2, regs=128, efficiency=0.668, unaligned=0.765),
    Config(64, 128, bk=8, stages=2, minb=3, regs=140, efficiency=0.534, unaligned=0.9),
    Config(128, 64, stages=2, minb=3, regs=155, efficiency=0.669, unaligned=0.835),
    Config(128, 64, bk=8, minb=3, regs=144, efficiency=0.585, unaligned=0.875),
    Config(256, 64, regs=128, efficiency=0.677, unaligned=0.83),
    Config(256, 64, lr=8, regs=128, efficiency=0.678, unaligned=0.835),
    Config(512, 64, lr=8, regs=128, efficiency=0.62, unaligned=0.755),
    # 32 rows of C a block and 128 columns: C 32 rows tall with a long K (batch 39 of
    # 32x2137x11410), where 32x32 tiles run at 0.42 of the peak and 64-row tiles waste half.
    Config(32, 128, tm=4, tn=8, lr=8, regs=107, efficiency=0.55, unaligned=0.85),
    # Two warps a block, 32 outputs a thread, eight blocks an SM: C of a few hundred
    # thousand outputs with K in the hundreds (3042x136x643), where cuBLAS runs 64x32
    # tiles of 64 threads unsplit and the 64x64 tiles need seven slices to fill the SMs.
    # Rates start as 32x128's; the fit sets them.
    Config(32, 64, tm=4, tn=8, lr=8, regs=119, efficiency=0.55, unaligned=0.85),
    Config(64, 32, tm=4, tn=8, lr=8, regs=119, efficiency=0.55, unaligned=0.85),
)
# Small tiles compiled FUSED: their K slices are added by the last block of each tile, in
# the same launch. Skinny products with a long K (75x10x5228) run best in many short
# slices, where mm_21_reduce's launch was a third of the time. Registers from ptxas (nvcc
# 13, sm_90), none spills; the rates start as the plain tiles'.
FUSED_CONFIGS: tuple[Config, ...] = (
    Config(32, 32, tm=4, tn=4, regs=106, efficiency=0.417, unaligned=0.87, fused=True),
    Config(64, 64, tm=4, tn=4, regs=106, efficiency=0.479, unaligned=0.85, fused=True),
    Config(64, 64, tm=4, tn=8, lr=8, regs=115, efficiency=0.591, unaligned=0.89, fused=True),
    Config(32, 128, tm=4, tn=8, lr=8, regs=116, efficiency=0.55, unaligned=0.85, fused=True),
    Config(32, 64, tm=4, tn=8, lr=8, regs=116, efficiency=0.55, unaligned=0.85, fused=True),
    Config(64, 32, tm=4, tn=8, lr=8, regs=117, efficiency=0.55, unaligned=0.85, fused=True),
)
# The tiles as rung 23 compiles them (registers as ptxas reports them, none spills).
# 128x128x16 spilled in that source before the FMA orders of cuda/mac_loop.inc and has


def splitk_workspace(config: Config, m: int, n: int, batch: int, split: int) -> int:
    """Floats of a split-K plan's workspace: the slices' partial sums (M x N each; fused, a
    packed BM x BN tile per tile of C), then, fused, one int counter per tile of C."""
    if split == 1:
        return 0
    if not config.fused:
        return batch * split * m * n
    tiles = -(-m // config.bm) * -(-n // config.bn)
    return batch * tiles * (split * config.bm * config.bn + 1)


#: K tiles per slice that split-K tiles are also offered with: a skinny product with a long K
#: runs fastest in slices of a few K tiles, which the factors of :func:`split_factors` often
#: skip (327 K tiles: 24 slices of 14, then nothing valid up to 256; 804 K tiles: 48 slices,
#: then nothing up to 128, where cuBLAS ran 126x112x12855 in 66 slices of its 128x64 tile).
SLICE_TILES = (2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 32)


def split_factors(k: int, bk: int) -> list[int]:
    """Split factors worth trying: a ladder of round factors, and the least split that
    gives slices of each of :data:`SLICE_TILES` K tiles; each leaves no slice empty."""
    tiles = -(-k // bk)
    out = {1}
    for s in (2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512):
        if s > tiles:
            break
        out.add(s)
    out |= {-(-tiles // per) for per in SLICE_TILES}
    return sorted(s for s in out if s <= 512 and whole_slices(tiles, s))


def fused_split_factors(k: int, bk: int) -> list[int]:
    """Split factors of a fused variant: :func:`split_factors` past 1 (a fused tile is
    launched only split)."""
    return [s for s in split_factors(k, bk) if s > 1]



def tile_split_factors(config: Config, m: int, n: int, k: int, batch: int,
                       device: DeviceFacts) -> list[int]:
    """The split factors a split-K tile is offered with for a problem: :func:`split_factors`
    (a fused tile's :func:`fused_split_factors`) and its :func:`filling_splits`."""
    ladder = fused_split_factors(k, config.bk) if config.fused else split_factors(k, config.bk)
    return sorted(set(ladder) | set(filling_splits(config, m, n, k, batch, device)))


def filling_splits(config: Config, m: int, n: int, k: int, batch: int,
                   device: DeviceFacts) -> list[int]:
    """The largest splits (none empty) that put at most one block on each SM, and at most
    the blocks an SM holds: where C has few tiles, the factors of :func:`split_factors` may
    leave many SMs idle (126x112x12855 column-major: 128x64 tiles in 48 slices ran on 96 of
    132 SMs, where cuBLAS runs its 128x64 tile in 66)."""
    tiles = -(-m // config.bm) * -(-n // config.bn) * batch
    k_tiles = -(-k // config.bk)
    out = set()
    for slots in (device.sms, device.sms * config.blocks_per_sm):
        most = min(slots // tiles, k_tiles, 512)
        if most >= 2:
            out.add(-(-k_tiles // -(-k_tiles // most)))
    return sorted(out)



# ------------------------------------------------------------------- cost terms
def tile_rate(c: Candidate[Config], m: int, k: int, device: DeviceFacts,
              p: Parameters) -> float:
    """An SM's FMA rate on the tile: its efficiency of the peak, its unaligned share where
    A's or B's columns are not 16-byte aligned (scalar loads)."""
    sm_rate = 128 * device.clock_mhz * 1e6 * p.rate(c.variant.key, c.config)
    if m % 4 or k % 4:
        sm_rate *= p.misaligned(c.variant.key, c.config)
    return sm_rate


def with_traffic(compute_s: float, c: Candidate[Config], m: int, n: int, k: int, batch: int,
                 split: int, p: Parameters) -> float:
    """Compute time and memory time, overlapped: C (or the slices' partial sums) stored
    once at the variant's share of the store rate, each block's A and B panels loaded once."""
    config = c.config
    stored = 4.0 * batch * m * n * split
    loaded = 4.0 * batch * k * (m * -(-n // config.bn) + n * -(-m // config.bm))
    store_rate = p["store_bytes_per_s"] * p.store_share(c.variant.key, config)
    if c.variant.kind.staged(config, m):  # the warps take turns at the shared buffers
        store_rate *= p["staged_store"] / config.store_rounds
    elif m % 4:
        store_rate *= p["unaligned_store"]
    return soft_max(compute_s, stored / store_rate + loaded / p["load_bytes_per_s"])


def staged_epilogue_seconds(c: Candidate[Config], m: int, p: Parameters) -> float:
    """An SM's time for one block's outputs where C goes out through shared memory (the SM
    passes each block's outputs one after another through its load/store unit), else 0."""
    if not c.variant.kind.staged(c.config, m):
        return 0.0
    return p["staged_epilogue_s"] * c.config.bm * c.config.bn


def _fused_tiles_seconds(config: Config, tiles: int, split: int, p: Parameters) -> float:
    """A fused split-K plan's tail: the last block of each tile (all tiles at once) reads
    the tile's ``split`` packed slices with its threads, after the fence and the count."""
    tile_bytes = 4.0 * config.bm * config.bn * split
    return (tile_bytes / (config.threads * p["fuse_bytes_per_thread_s"])
            + tiles * tile_bytes / p["reduce_bytes_per_s"] + p["gemv_fuse_s"]
            + split * p["fuse_slice_s"])


def _waves_seconds(c: Candidate[Config], m: int, k: int, blocks: int, device: DeviceFacts,
                   p: Parameters) -> float:
    """The blocks in waves of what the SMs hold, the last wave short; a block's FMAs at the
    SM's rate as filled, or its K tiles' round trips, whichever is longer."""
    config, split = c.config, c.split
    k_tiles = -(-k // config.bk)
    k_slice = -(-k_tiles // split) * config.bk
    fma_per_block = config.bm * config.bn * k_slice
    sm_rate = tile_rate(c, m, k, device, p)
    rounds_s = k_slice / config.bk * p["tile_round_s"]  # the blocks of a wave wait together
    staged_s = staged_epilogue_seconds(c, m, p)

    def wave(per_sm: int) -> float:
        compute_s = per_sm * fma_per_block / (
            sm_rate * fill(per_sm, config.threads, p["fill_exponent"]))
        compute_s = soft_max(compute_s, rounds_s)
        return compute_s + per_sm * staged_s + p.block_latency(c.variant.key)

    full_waves, rest = divmod(blocks, device.sms * config.blocks_per_sm)
    seconds = full_waves * wave(config.blocks_per_sm)
    if rest:
        seconds += wave(-(-rest // device.sms))
    return seconds


# ---------------------------------------------------------------------- family
def _launch_grid(config: Config, m: int, n: int, batch: int, split: int) -> tuple[int, int, int]:
    return (-(-m // config.bm), -(-n // config.bn), batch * split)


class SplitK(Family[Config]):
    name = "splitk"
    source = "cuda/21_splitk.cu"
    tile = True
    informs = ("gemv_fuse_s", "fuse_slice_s", "fuse_bytes_per_thread_s", "tile_round_s",
               "staged_store", "staged_epilogue_s")

    @cached_property
    def variants(self) -> tuple[Variant[Config], ...]:
        return tuple(Variant(self, c, "mm_21_splitk", "" if c.fused else "mm_21_reduce")
                     for c in SEARCH + FUSED_CONFIGS)

    def splits(self, config: Config, m: int, n: int, k: int, batch: int, device: DeviceFacts,
               among: tuple[str, ...]) -> list[int]:
        if config.bm == 32 and config.bn > 32 and m > 32:
            return []  # taller C: taller tiles (this one is for C of at most 32 rows)
        return tile_split_factors(config, m, n, k, batch, device)

    def why_not(self, config: Config, split: int, m: int, n: int, k: int, batch: int,
                device: DeviceFacts) -> str:
        grid_reason = grid_problem(_launch_grid(config, m, n, batch, split))
        if grid_reason:
            return grid_reason
        if config.fused and split == 1:
            return "one K slice needs no fused sum (the plain variant)"
        packed = 4 * splitk_workspace(config, m, n, batch, split)
        if config.fused and packed > MAX_WORKSPACE_BYTES:
            return f"{packed} bytes of packed partial tiles (at most {MAX_WORKSPACE_BYTES})"
        if not whole_slices(-(-k // config.bk), split):
            return f"split {split} leaves a K slice empty"
        return ""

    def cost(self, candidate: Candidate[Config], m: int, n: int, k: int, batch: int,
             device: DeviceFacts, p: Parameters) -> float:
        config, split = candidate.config, candidate.split
        tiles = -(-m // config.bm) * -(-n // config.bn) * batch
        seconds = _waves_seconds(candidate, m, k, tiles * split, device, p)
        seconds = with_traffic(seconds, candidate, m, n, k, batch, split, p) + p["launch_s"]
        if split > 1 and config.fused:
            seconds += _fused_tiles_seconds(config, tiles, split, p)
        elif split > 1:
            seconds += slices_reduced_seconds(m, n, batch, split, device, p)
        return seconds

    def plan(self, candidate: Candidate[Config], m: int, n: int, k: int, batch: int,
             device: DeviceFacts, info: dict[str, Any]) -> CudaPlan:
        config, split, row = candidate.config, candidate.split, candidate.variant
        defines = defines_of(config)
        smem = config.smem_bytes if config.smem_dynamic else 0
        steps = [CudaStep(_launch_grid(config, m, n, batch, split), (config.threads,),
                          row.entry, row.source, defines, smem=smem,
                          args=GEMM_ARGS + ("work", split))]
        workspace = 0
        if split > 1 and config.fused:
            # The last block of each tile adds the slices: no second launch. The counters
            # follow the packed tiles; the workspace starts zeroed and each launch leaves
            # them 0.
            workspace = splitk_workspace(config, m, n, batch, split)
        elif split > 1:
            workspace = batch * split * m * n
            steps.append(reduce_step(row.second_entry, row.source, defines, m, n, batch, split,
                                     device))
        return CudaPlan(tuple(steps), workspace=workspace, info={"dispatch": info})

    def config_of(self, params: dict) -> Config:
        return Config.from_params(params)

    def staged(self, config: Config, m: int) -> bool:
        """Where M is not a multiple of 4, the plain tiles store C through shared memory
        (cuda/21_splitk.cu's store_tile_rows); the fused tiles' last blocks store scalars."""
        return m % 4 != 0 and not config.fused


SPLITK = SplitK()
