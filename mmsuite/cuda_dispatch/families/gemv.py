"""GEMV (cuda/24_gemv.cu): at most 16 rows or columns of C; the big operand streamed once,
K split over blocks when the grid is small, then ``mm_24_reduce``, or (``fused``) the
last block of each tile adds the slices in the same launch (:class:`GemvConfig`).
Its cost is the bytes it moves over a share of the memory's bandwidth, which a grid
of few blocks does not reach, in waves of the blocks the SMs hold (each wave waits
for its blocks' rounds of loads); a block whose K slice takes many dependent rounds of
loads is bound by their latency instead.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ...launch import GEMM_ARGS, CudaPlan, CudaStep
from ..costs import M_SIDE_OF, figure, soft_fill, soft_max
from ..family import Candidate, Family, Variant, defines_of
from ..occupancy import grid_problem, resident_blocks
from ..slices import fused_sum_seconds, reduce_step, slices_reduced_seconds

if TYPE_CHECKING:
    from ...launch import DeviceFacts
    from ..costs import Parameters

PANEL_BYTES = 4 * 8192  # cuda/24_gemv.cu's PANEL_FLOATS: static shared memory
TAIL_OUTPUTS = 4  # cuda/24_gemv.cu's TAIL_OUTPUTS: a thread's outputs summed at once
MAX_SKINNY = 16


@dataclass(frozen=True)
class GemvConfig:
    """One variant of cuda/24_gemv.cu: which operand is skinny (``side`` "n": N <= skinny,
    A streamed; "m": M <= skinny, B streamed) and the registers it holds (``skinny``)."""

    side: str
    skinny: int
    regs: int = 64
    fused: bool = False  # with K split, the slices are added in the same launch (FUSED=1)
    # N side: lanes across one column of A (N_LANES). 32 give a block 128 rows; 16 give it
    # 64 and 8 give it 32: two or four times the blocks of a short M, each warp on two or
    # four columns at once.
    column_lanes: int = 32

    @property
    def narrow(self) -> bool:
        """An N-side block of fewer than 32 lanes a column of A: 32 or 64 rows, not 128."""
        return self.side == "n" and self.column_lanes != 32

    @property
    def name(self) -> str:
        rows = f"_r{self.rows}" if self.narrow else ""
        return f"gemv_{self.side}{self.skinny}{rows}" + ("f" if self.fused else "")

    @property
    def defines(self) -> dict[str, int]:
        lanes = {"N_LANES": self.column_lanes} if self.narrow else {}
        return {"SKINNY": self.skinny, **lanes, **({"FUSED": 1} if self.fused else {})}

    @property
    def warps(self) -> int:
        return self.threads // 32

    @property
    def threads(self) -> int:
        return 256 if self.side == "m" or self.skinny < 16 or self.narrow else 128

    @property
    def lanes(self) -> int:
        """M side: lanes reading one column of B (M_LANES): 4 from 8 rows of A up, else 8."""
        return 4 if self.skinny >= 8 else 8

    @property
    def columns_per_lane(self) -> int:
        """M side: columns of B a lane reads (M_CPL): 2 from 8 rows of A up, else 1."""
        return 2 if self.skinny >= 8 else 1

    @property
    def loads_per_round(self) -> int:
        """A round of loads, of which a block keeps two in flight: M side, a lane's 16-byte
        loads of each of its columns (M_UNROLL), 2 from 8 rows of A up, else 4; N side, the
        columns of A a warp loads (N_UNROLL), 4."""
        if self.side == "n":
            return 4
        return 2 if self.skinny >= 8 else 4

    @property
    def k_per_round(self) -> int:
        """K a block's round of loads covers: N side, ``loads_per_round`` columns of each
        warp (N_UNROLL); M side, a column's lanes' 16-byte loads, ``loads_per_round`` each
        (M_ROUND)."""
        if self.side == "n":
            return self.loads_per_round * self.warps * (32 // self.column_lanes)
        return 4 * self.loads_per_round * self.lanes

    @property
    def rows(self) -> int:
        """Columns (side "m": the threads over a column's lanes, times a lane's columns) or
        rows (side "n") of C one block covers."""
        if self.side == "m":
            return self.threads // self.lanes * self.columns_per_lane
        return 4 * self.column_lanes

    @property
    def tail_rounds(self) -> int:
        """Rounds of loads a slice costs a thread of a tile's last block in the fused sum:
        its outputs, ``TAIL_OUTPUTS`` at a time."""
        return -(-self.rows * self.skinny // (TAIL_OUTPUTS * self.threads))

    def params(self) -> dict:
        return {"SIDE": self.side, **self.defines}

    @cached_property
    def stand_ins(self) -> tuple[str, ...]:
        """The keys whose figures it takes, in order: its own, its plain variant's (a fused
        one streams as it does), then those of the 128-row block of its width (where the
        narrow blocks were not fitted: the H200's file)."""
        plain = replace(self, fused=False)
        return tuple(dict.fromkeys(
            f"gemv:{c.name}" for c in (self, plain, replace(self, column_lanes=32),
                                       replace(plain, column_lanes=32))))

    def figure_keys(self, table: str, key: str) -> tuple[str, ...]:
        return self.stand_ins

    def starting_figure(self, table: str) -> float:
        return 0.9 if table == "unaligned" else 1.0

    @property
    def blocks_per_sm(self) -> int:
        """Resident blocks per SM, with the static 32 KB panel in shared memory."""
        return resident_blocks(self.regs, self.threads, PANEL_BYTES)

    smem_dynamic = False
    smem_bytes = 0  # the panel is static (the launch passes no dynamic shared memory)


# Rung 24: registers as NVRTC compiles them for the H100 (the suite's own compile), none
# spills. Both sides hold a second round of loads in registers: below 8 rows the M side keeps
# 4 blocks an SM, from 8 rows up 2 (gemv_m8f 3); the N side 4 up to 4 columns (its fused
# 4-column variants 3), 3 with 8 (fused: 2), and 4 of the 16-column block's 128 threads (its
# 32-row block's 256: 2).
_GEMV_REGS = {("n", 1): 61, ("n", 2): 64, ("n", 4): 64, ("n", 8): 80, ("n", 16): 124,
              ("m", 1): 56, ("m", 2): 56, ("m", 4): 64, ("m", 8): 86, ("m", 16): 121}
_GEMV_FUSED_REGS = {("n", 1): 61, ("n", 2): 64, ("n", 4): 75, ("n", 8): 96, ("n", 16): 128,
                    ("m", 1): 47, ("m", 2): 62, ("m", 4): 64, ("m", 8): 74, ("m", 16): 103}
# The N side's narrow blocks, by lanes a column of A: 8 lanes give a block 32 rows, 16 give
# it 64. A short M's grid has four (two) times the blocks, and a block's rounds walk K four
# (two) times as fast.
_GEMV_NARROW_REGS = {
    8: {(1, False): 63, (2, False): 64, (4, False): 64, (8, False): 80, (16, False): 123,
        (1, True): 61, (2, True): 64, (4, True): 75, (8, True): 116, (16, True): 128},
    16: {(1, False): 57, (2, False): 64, (4, False): 64, (8, False): 80, (16, False): 123,
         (1, True): 61, (2, True): 64, (4, True): 75, (8, True): 109, (16, True): 126}}
GEMV_CONFIGS: tuple[GemvConfig, ...] = tuple(
    GemvConfig(side, skinny, regs, fused)
    for fused, table in ((False, _GEMV_REGS), (True, _GEMV_FUSED_REGS))
    for (side, skinny), regs in table.items()) + tuple(
    GemvConfig("n", skinny, regs, fused, column_lanes=lanes)
    for lanes, table in _GEMV_NARROW_REGS.items()
    for (skinny, fused), regs in table.items())


def gemv_side(m: int, n: int) -> str:
    """Which operand rung 24 streams: "m" (B streamed) when M is at most 16 and below N,
    else "n" (A streamed, SKINNY columns of B per grid z: any N)."""
    return "m" if m < n and m <= MAX_SKINNY else "n"


def gemv_config(m: int, n: int, fused: bool = False, column_lanes: int = 32) -> GemvConfig:
    """The least GEMV variant that holds the skinny side (16 columns at a time when both
    sides pass 16: rung 24 alone is right for every shape, if slow there), of the N side's
    ``column_lanes`` (the M side has one width)."""
    side = gemv_side(m, n)
    skinny = min(MAX_SKINNY, n if side == "n" else m)
    lanes = column_lanes if side == "n" else 32
    return next(c for c in GEMV_CONFIGS if c.side == side and c.skinny >= skinny
                and c.fused == fused and c.column_lanes == lanes)


def gemv_runs(config: GemvConfig, m: int, n: int) -> bool:
    """Whether rung 24 runs ``config`` on an M x N product: the least variant that holds the
    skinny side (:func:`gemv_config`) or, where N is the skinny side, the one of half its
    columns in two column groups (grid z), which reads A twice, the second time mostly from
    L2, with blocks of fewer registers and twice their number."""
    least = gemv_config(m, n, config.fused, config.column_lanes)
    return config == least or (least.side == config.side == "n" and n <= MAX_SKINNY
                               and 2 * config.skinny == least.skinny
                               and (config.fused, config.column_lanes)
                               == (least.fused, least.column_lanes))


def gemv_counters(config: GemvConfig, m: int, n: int, batch: int, split: int) -> int:
    """Ints after the slices in the workspace: one arrival counter per tile of C (FUSED)."""
    if not config.fused or split == 1:
        return 0
    grid = gemv_grid(config, m, n, batch, split)
    return grid[0] * grid[2]



def gemv_kchunk(k: int, split: int) -> int:
    """K per slice: whole 4s, so that the M-side kernel's 16-byte loads of B's columns stay
    aligned (the N-side kernel takes any K per slice; one rule serves both)."""
    per_slice = -(-k // split)
    return -(-per_slice // 4) * 4


def gemv_splits(k: int) -> list[int]:
    """Split factors of rung 24 that leave no K slice empty."""
    out = []
    for s in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        if s > 1 and (s - 1) * gemv_kchunk(k, s) >= k:
            break
        out.append(s)
    return out


def gemv_groups(config: GemvConfig, n: int) -> int:
    """Column groups of the "n" kernel (grid z per matrix); 1 for the "m" kernel."""
    return -(-n // config.skinny) if config.side == "n" else 1


def gemv_grid(config: GemvConfig, m: int, n: int, batch: int, split: int) -> tuple[int, int, int]:
    wide = n if config.side == "m" else m
    return (-(-wide // config.rows), split, batch * gemv_groups(config, n))



# ------------------------------------------------------------------- cost terms
def side_figure(p: Parameters, name: str, side: str) -> float:
    """Rung 24's figure ``name`` for its ``side`` ("m": the M side's own)."""
    return p[M_SIDE_OF[name]] if side == "m" else p[name]


def round_seconds(p: Parameters, config: GemvConfig) -> float:
    """One round of a variant's K loop (its ``latency`` entry where fitted: a round holds
    2-4x the FMAs and shared-memory reads per load as the skinny side grows, on either
    side, so one shared figure cannot serve them all)."""
    return figure(p.latency, config.stand_ins, p["gemv_round_s"])


def _in_flight(config: GemvConfig) -> float:
    """Loads in flight per block against a 256-thread block of one column a lane and four
    loads: the M side keeps two rounds in flight (from 8 rows of A up, two loads of each
    of two columns a round). The N side issues its next round before this one's FMAs, but
    moving that round into this round's registers at the top of the K loop waits for its
    loads (SASS of gemv_n4_r64, nvcc 13: sixteen moves of the loaded registers before the
    next loads go out), so a block has one round on the way when it waits: counted as one
    (on 48 N-side shapes timed on the H100 the pick came within 3% of the fastest on 33,
    26 counting two; on 143 timed before the 64-row blocks, 106 and 107). The 16-column
    N-side block has 128 threads, and its round holds half the K steps of A in flight
    that the others' do: its grid needs twice the blocks to keep as many bytes on the way
    (a 32-row block has as many lanes and loads as the 128-row one of its width; its round
    is its groups' columns, not more loads)."""
    in_flight = config.threads / 256 * (1 if config.side == "n" else 2)
    if config.side == "n":
        in_flight *= config.loads_per_round * config.warps / 32
    return in_flight


def _waves_seconds(c: Candidate[GemvConfig], m: int, n: int, k: int, batch: int,
                   blocks: int, device: DeviceFacts, p: Parameters) -> float:
    """The blocks in waves of what the SMs hold, the last one short (gemv_n16 holds 4
    blocks an SM, 528 on the H100: 74 row blocks with K 6144 took 121.5 us in 4 slices,
    one wave, and 140.1 in 8, two)."""
    config, split = c.config, c.split
    rate = device.memory_bytes_per_s * p["gemv_bandwidth"] * p.rate(c.variant.key, config)
    if (m % 4 if config.side == "n" else k % 4):
        rate *= p.misaligned(c.variant.key, config)
    moved = 4.0 * batch * (m * k * gemv_groups(config, n) + k * n + m * n)
    # A block's K slice in rounds of loads (N side: each warp's loads_per_round columns of
    # A; M side: loads_per_round loads of each column).
    per_round = config.k_per_round
    rounds = -(-gemv_kchunk(k, split) // per_round) if split > 1 else -(-k // per_round)
    in_flight, round_s = _in_flight(config), round_seconds(p, config)
    needed = side_figure(p, "gemv_blocks_per_sm", config.side)
    fill_power = side_figure(p, "gemv_fill_power", config.side)
    sm_blocks = side_figure(p, "gemv_sm_blocks", config.side)

    def wave(count: int) -> float:
        """``count`` blocks at once: their bytes at the rate their loads in flight reach
        (fewer blocks than ``gemv_blocks_per_sm`` an SM: proportionally less, bending as
        softly as ``gemv_fill_power``), or their rounds of loads, whichever is longer."""
        fill = soft_fill(count * in_flight / (needed * device.sms), fill_power)
        stream_s = moved * count / blocks / (rate * fill)
        crowd = max(1.0, -(-count // device.sms) / sm_blocks)
        return soft_max(stream_s, rounds * round_s * crowd)

    full_waves, rest = divmod(blocks, device.sms * config.blocks_per_sm)
    return full_waves * wave(device.sms * config.blocks_per_sm) + (wave(rest) if rest else 0)


# ---------------------------------------------------------------------- family
class Gemv(Family[GemvConfig]):
    name = "gemv"
    source = "cuda/24_gemv.cu"
    streams = True
    own_rates = True
    informs = ("gemv_round_s", "gemv_wave_s", "gemv_m_wave_s", "gemv_sm_blocks",
               "gemv_m_sm_blocks", "gemv_narrow_crowd", "gemv_m_blocks_per_sm",
               "gemv_fill_power", "gemv_m_fill_power", "gemv_fuse_s", "fuse_slice_s",
               "gemv_bandwidth", "gemv_blocks_per_sm", "gemv_latency_s")

    @cached_property
    def variants(self) -> tuple[Variant[GemvConfig], ...]:
        return tuple(Variant(self, c, f"mm_24_gemv_{c.side}", "" if c.fused else "mm_24_reduce")
                     for c in GEMV_CONFIGS)

    def splits(self, config: GemvConfig, m: int, n: int, k: int, batch: int,
               device: DeviceFacts, among: tuple[str, ...]) -> list[int]:
        if min(m, n) > MAX_SKINNY or not gemv_runs(config, m, n):
            return []  # only where a side is skinny: elsewhere tiles win
        return [s for s in gemv_splits(k) if s > 1 or not config.fused]

    def why_not(self, config: GemvConfig, split: int, m: int, n: int, k: int, batch: int,
                device: DeviceFacts) -> str:
        if not gemv_runs(config, m, n):
            return f"{config.name} is not rung 24's variant for {m}x{n}"
        if config.fused and split == 1:
            return "one K slice needs no fused sum (the plain variant)"
        if split not in gemv_splits(k):
            return f"split {split} leaves a K slice empty"
        return grid_problem(gemv_grid(config, m, n, batch, split))

    def cost(self, candidate: Candidate[GemvConfig], m: int, n: int, k: int, batch: int,
             device: DeviceFacts, p: Parameters) -> float:
        config, split = candidate.config, candidate.split
        grid = gemv_grid(config, m, n, batch, split)
        blocks = grid[0] * grid[1] * grid[2]
        seconds = _waves_seconds(candidate, m, n, k, batch, blocks, device, p)
        full_waves, rest = divmod(blocks, device.sms * config.blocks_per_sm)
        seconds += (full_waves + bool(rest)) * side_figure(p, "gemv_wave_s", config.side)
        seconds += p["gemv_latency_s"]
        if split > 1 and config.fused:  # each slice written and read back once, one launch
            seconds += fused_sum_seconds(batch * m * n, split, p, config.tail_rounds)
        elif split > 1:
            seconds += slices_reduced_seconds(m, n, batch, split, device, p)
        if config.narrow:
            seconds *= 1.0 + p["gemv_narrow_crowd"] * (-(-blocks // device.sms) - 1)
        return seconds

    def plan(self, candidate: Candidate[GemvConfig], m: int, n: int, k: int, batch: int,
             device: DeviceFacts, info: dict[str, Any]) -> CudaPlan:
        config, split, row = candidate.config, candidate.split, candidate.variant
        defines = defines_of(config)
        steps = [CudaStep(gemv_grid(config, m, n, batch, split), (config.threads,), row.entry,
                          row.source, defines, args=GEMM_ARGS + ("work", gemv_kchunk(k, split)))]
        workspace = 0
        if split > 1 and config.fused:
            # The slices are added in the same launch; the arrival counters follow them, the
            # workspace starts zeroed and each launch leaves them zero.
            workspace = batch * split * m * n + gemv_counters(config, m, n, batch, split)
        elif split > 1:
            workspace = batch * split * m * n
            steps.append(reduce_step(row.second_entry, row.source, defines, m, n, batch, split,
                                     device))
        return CudaPlan(tuple(steps), workspace=workspace, info={"dispatch": info})

    def config_of(self, params: dict) -> GemvConfig:
        return GemvConfig(str(params["SIDE"]), int(params["SKINNY"]),
                          fused=bool(params.get("FUSED", 0)),
                          column_lanes=int(params.get("N_LANES", 32)))

    def own_candidates(self, m: int, n: int, k: int) -> list[Candidate[GemvConfig]]:
        """Rung 24's own offer on any shape: the variants that run it, with every split."""
        return [Candidate(row, s) for row in self.variants if gemv_runs(row.config, m, n)
                for s in gemv_splits(k)]

    def starting_latency(self, p: Parameters, config: GemvConfig, key: str) -> float:
        """Its ``latency`` figure is a round of its K loop."""
        return round_seconds(p, config)

    def misaligned(self, config: GemvConfig, m: int, k: int) -> bool:
        """The M side loads B's columns in 16 bytes (K), the N side stores C's (M)."""
        return bool(k % 4) if config.side == "m" else bool(m % 4)


GEMV = Gemv()
