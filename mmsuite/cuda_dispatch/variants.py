"""The one table of compiled variants the CUDA dispatcher can launch, and what applies where.

Like the CUTLASS profiler's manifest: every variant is one row of
:data:`VARIANTS`, naming its family, its source, its entries and its compile-time
parameters; :func:`why_not` decides in one place whether a :class:`Candidate`
(a variant and its split factor) can run a problem, and :func:`candidates` lists
every one that can.

Families
    ``splitk``  cuda/21_splitk.cu: one block per tile of C and K slice; with
                more than one slice, ``mm_21_reduce`` adds the slices, or (small
                tiles compiled ``fused``) the last block of each tile adds them in
                the same launch. A
                :class:`Config` is its -D defines (block tile BM x BN x BK, TM x TN
                outputs per thread, LR lanes along a warp tile's rows, STAGES
                shared buffers, MINB blocks per SM in the launch bounds).
    ``streamk`` cuda/23_streamk.cu: resident blocks share the MAC-loop iterations
                of the tiles that would leave a wave part empty, then
                ``mm_23_fixup`` (see :func:`streamk_split`).
    ``gemv``    cuda/24_gemv.cu: at most 16 rows or columns of C; the big operand
                streamed once, K split over blocks when the grid is small, then
                ``mm_24_reduce``, or (``fused``) the last block of each tile adds
                the slices in the same launch (:class:`GemvConfig`).
    ``shortk``  cuda/27_shortk.cu: K short, C's stores the work; each block stages
                its rows of A and columns of B once and stores whole columns
                (:class:`ShortKConfig`); its whole-column variants (``cols``) give
                a thread one column of at most 32 rows, for small M and tiny products.
    ``dot``     cuda/30_dot.cu: a handful of outputs, K long; a block's 256 threads
                walk K together for one 4 x 4 tile of C, K split over blocks whose
                last adds the slices in the same launch (:class:`DotConfig`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..launch import MAX_STATIC_SMEM
from .device import H100_SXM, DeviceFacts

SPLITK_SOURCE = "cuda/21_splitk.cu"
STREAMK_SOURCE = "cuda/23_streamk.cu"
GEMV_SOURCE = "cuda/24_gemv.cu"
SHORTK_SOURCE = "cuda/27_shortk.cu"
DOT_SOURCE = "cuda/30_dot.cu"
REDUCE_THREADS = 256  # mm_21_reduce and mm_24_reduce: one float4 of C a thread
FIXUP_THREADS = 128  # FIX_THREADS in cuda/23_streamk.cu: one float4 of a partial tile each

_REGS_PER_SM = 65536
_THREADS_PER_SM = 2048
_SMEM_PER_SM = 228 * 1024
_MAX_SMEM_PER_BLOCK = 227 * 1024  # sm_90's opt-in limit for one block
MAX_WORKSPACE_BYTES = 512 * 2**20
MAX_GRID_YZ = 65535
GEMV_PANEL_BYTES = 4 * 8192  # cuda/24_gemv.cu's PANEL_FLOATS: static shared memory
GEMV_TAIL_OUTPUTS = 4  # cuda/24_gemv.cu's TAIL_OUTPUTS: a thread's outputs summed at once


MAX_ITERATIONS = 2**31 - 1  # rung 23's kernels count MAC-loop iterations in ints
GEMV_MAX_SKINNY = 16
# Rung 22 offers rung 27 up to these K, and the fitted model ranks it against the tiles (H100,
# same runs): with M a multiple of 4 the tiles store as fast from K = 12 or so
# (4096x4096x16: 34.5 us against 37.9), while with M not a multiple of 4 their scalar stores
# lose up to K = 60 (3562x988x42: 43.5 us against 18.8; 777x5000x60: 29.7 against 27.3) and,
# where no side is skinny, beyond it (1293x3602x74: rung 27 37.5 us, every tile of rungs
# 20-23 58 to 66, cuBLAS 28). With a side of at most 16, rung 27's blocks hold a few useful
# rows and K past 64 takes them three chunks (batch 51 of 9x2697x73: 2.2x rung 23's time).
SHORTK_MAX_K = 8
SHORTK_MAX_K_UNALIGNED = 64
SHORTK_MAX_K_UNALIGNED_WIDE = 96
SHORTK_THREADS = 256
SHORTK_KC = 32  # K staged per chunk (KC in the source)
SHORTK_COLS = 256  # columns of C per block of the whole-column variants (CW in the source)
# Rung 22 offers the whole-column variants where M fits one block's rows and K is at most
# this: past it each column's K loop is a GEMV's, which rung 24 streams. Of 17 calibration
# shapes with K from 65 to 128 (H100, every plan timed), none ran a whole-column variant
# within 3% of the fastest (median 2.4x), and the model had taken one for batch 38 of
# 31x5x95 (7.7 us, where gemv_m8 ran 4.6); from 17 to 64, 3 of 17 ran fastest so.
SHORTK_COLS_MAX_K = 64
DOT_TILE = 4  # DT in cuda/30_dot.cu: a block's tile of C is DOT_TILE x DOT_TILE
DOT_THREADS = 256
DOT_MAX_TILES = 16  # rung 22 offers rung 30 where C has at most this many tiles (per matrix)
# Rung 22 offers rung 23 from this K up. Below it a tile's K loop is a few iterations, and the
# stream-K tail's fix-up (partial sums written, waited for, read back) costs more than its
# balance gains: on the H100 (suite timer) no stream-K plan was the fastest timed on any of the
# 298 calibration shapes of K up to 400 (up to 768: on 3 of 342, by at most 2.4%), and at K up
# to 176 rung 23 ran a tile in a median 1.3 to 1.8 times rung 21's time with the same tile in
# one slice (batch 20 of 11965x400x30: 64x128x16_b3 313.0 us against 274.9). Rung 23 alone
# still runs any K.
STREAMK_MIN_K = 256


def resident_blocks(regs: int, threads: int, smem_bytes: int) -> int:
    """Blocks of ``threads`` that fit on one SM at once. An SM's registers are four
    quarters of 16384, one per warp scheduler, and a warp takes its registers (in 256s)
    from one quarter: 112 registers give 4 warps a quarter, so 8 blocks of 64 threads, not
    the 9 that the whole file's 65536 would hold (the H100's occupancy query agrees)."""
    regs_per_warp = -(-regs * 32 // 256) * 256
    warps = 4 * (_REGS_PER_SM // 4 // regs_per_warp)
    by_regs = warps // max(1, threads // 32)
    by_smem = _SMEM_PER_SM // (smem_bytes + 1024)
    return max(1, min(by_regs, _THREADS_PER_SM // threads, by_smem, 32))


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
        if self.smem_bytes > _MAX_SMEM_PER_BLOCK:
            return (f"{self.smem_bytes} bytes of shared memory (at most "
                    f"{_MAX_SMEM_PER_BLOCK} per block)")
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
        its outputs, ``GEMV_TAIL_OUTPUTS`` at a time."""
        return -(-self.rows * self.skinny // (GEMV_TAIL_OUTPUTS * self.threads))

    def params(self) -> dict:
        return {"SIDE": self.side, **self.defines}

    @property
    def blocks_per_sm(self) -> int:
        """Resident blocks per SM, with the static 32 KB panel in shared memory."""
        return resident_blocks(self.regs, self.threads, GEMV_PANEL_BYTES)

    smem_dynamic = False
    smem_bytes = 0  # the panel is static (the launch passes no dynamic shared memory)


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
        return SHORTK_COLS if self.cols else 8 * (128 // self.bm) * self.tn

    bk = SHORTK_KC
    threads = SHORTK_THREADS
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
            stage = max(SHORTK_KC * (self.bn + 1), self.bm * self.bn * 33 // 32)
            return 4 * (SHORTK_KC * self.bm + stage)
        return 4 * SHORTK_KC * (self.bm + self.bn)

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


@dataclass(frozen=True)
class DotConfig:
    """cuda/30_dot.cu's one variant: 256 threads, a 4 x 4 tile of C per block."""

    regs: int = 73
    tile: int = DOT_TILE
    threads: int = DOT_THREADS
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


DOT_CONFIG = DotConfig()


@dataclass(frozen=True)
class Variant:
    """One compiled variant: a row of the manifest."""

    family: str  # "splitk", "streamk", "gemv", "shortk" or "dot"
    config: Config | GemvConfig | ShortKConfig | DotConfig
    source: str
    entry: str
    second_entry: str  # the reduction or fix-up launched after it when K is shared ('': none)

    @property
    def key(self) -> str:
        """The variant's name across families: the cost model's parameters are keyed by it."""
        return f"{self.family}:{self.config.name}"


def _splitk(config: Config) -> Variant:
    return Variant("splitk", config, SPLITK_SOURCE, "mm_21_splitk",
                   "" if config.fused else "mm_21_reduce")


VARIANTS: tuple[Variant, ...] = (
    tuple(_splitk(c) for c in SEARCH + FUSED_CONFIGS)
    + tuple(Variant("streamk", c, STREAMK_SOURCE, "mm_23_streamk", "mm_23_fixup")
            for c in STREAMK_CONFIGS)
    + tuple(Variant("gemv", c, GEMV_SOURCE, f"mm_24_gemv_{c.side}",
                    "" if c.fused else "mm_24_reduce") for c in GEMV_CONFIGS)
    + tuple(Variant("shortk", c, SHORTK_SOURCE,
                    "mm_27_shortk_cols" if c.cols else "mm_27_shortk", "")
            for c in SHORTK_CONFIGS)
    + (Variant("dot", DOT_CONFIG, DOT_SOURCE, "mm_30_dot", ""),))
BY_KEY = {v.key: v for v in VARIANTS}
#: Every family of the manifest: what rung 22 chooses among.
FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(v.family for v in VARIANTS))


def variant(family: str, config: Config | GemvConfig | ShortKConfig | DotConfig) -> Variant:
    """The manifest's row of a config in a family (KeyError when it has none)."""
    return BY_KEY[f"{family}:{config.name}"]


@dataclass(frozen=True)
class Candidate:
    """A plan rung 22 may launch: a variant and how many slices K is cut into (split-K
    and GEMV; stream-K splits its own way, :func:`streamk_split`, and has split 1)."""

    variant: Variant
    split: int = 1

    @property
    def family(self) -> str:
        return self.variant.family

    @property
    def config(self) -> Config | GemvConfig | ShortKConfig | DotConfig:
        return self.variant.config

    @property
    def label(self) -> str:
        if self.family in ("streamk", "shortk"):
            return f"{self.config.name}/" + ("stream-K" if self.family == "streamk" else "1")
        return f"{self.config.name}/{self.split}"


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
    return sorted(s for s in out if s <= 512 and _whole_slices(tiles, s))


def fused_split_factors(k: int, bk: int) -> list[int]:
    """Split factors of a fused variant: :func:`split_factors` past 1 (a fused tile is
    launched only split)."""
    return [s for s in split_factors(k, bk) if s > 1]


# ------------------------------------------------------------------- stream-K
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


def dot_tiles(m: int, n: int) -> int:
    """Tiles of C per matrix, each one block (times the K split)."""
    return -(-m // DOT_TILE) * -(-n // DOT_TILE)


def dot_splits(k: int) -> list[int]:
    """Split factors of rung 30: every slice gets at least one K step per thread and
    none is empty."""
    out = [1]
    for s in (2, 4, 8, 16, 32, 64, 128):
        per = -(-k // s)
        if per < DOT_THREADS or (s - 1) * per >= k:
            break
        out.append(s)
    return out


def dot_kchunk(k: int, split: int) -> int:
    return -(-k // split)


# ----------------------------------------------------------------------- GEMV
def gemv_side(m: int, n: int) -> str:
    """Which operand rung 24 streams: "m" (B streamed) when M is at most 16 and below N,
    else "n" (A streamed, SKINNY columns of B per grid z: any N)."""
    return "m" if m < n and m <= GEMV_MAX_SKINNY else "n"


def gemv_config(m: int, n: int, fused: bool = False, column_lanes: int = 32) -> GemvConfig:
    """The least GEMV variant that holds the skinny side (16 columns at a time when both
    sides pass 16: rung 24 alone is right for every shape, if slow there), of the N side's
    ``column_lanes`` (the M side has one width)."""
    side = gemv_side(m, n)
    skinny = min(GEMV_MAX_SKINNY, n if side == "n" else m)
    lanes = column_lanes if side == "n" else 32
    return next(c for c in GEMV_CONFIGS if c.side == side and c.skinny >= skinny
                and c.fused == fused and c.column_lanes == lanes)


def gemv_runs(config: GemvConfig, m: int, n: int) -> bool:
    """Whether rung 24 runs ``config`` on an M x N product: the least variant that holds the
    skinny side (:func:`gemv_config`) or, where N is the skinny side, the one of half its
    columns in two column groups (grid z), which reads A twice, the second time mostly from
    L2, with blocks of fewer registers and twice their number."""
    least = gemv_config(m, n, config.fused, config.column_lanes)
    return config == least or (least.side == config.side == "n" and n <= GEMV_MAX_SKINNY
                               and 2 * config.skinny == least.skinny
                               and (config.fused, config.column_lanes)
                               == (least.fused, least.column_lanes))


def gemv_counters(config: GemvConfig, m: int, n: int, batch: int, split: int) -> int:
    """Ints after the slices in the workspace: one arrival counter per tile of C (FUSED)."""
    if not config.fused or split == 1:
        return 0
    grid = gemv_grid(config, m, n, batch, split)
    return grid[0] * grid[2]


def shortk_grid(config: ShortKConfig, m: int, n: int, batch: int) -> tuple[int, int, int]:
    return (-(-m // config.bm), -(-n // config.bn), batch)


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


# ------------------------------------------------------------- applicability
def why_not(candidate: Candidate, m: int, n: int, k: int, batch: int,
            device: DeviceFacts = H100_SXM) -> str:
    """Why ``candidate`` cannot launch this problem (grid limits, workspace, stream-K's int
    counters, GEMV's skinny side), or '' when it can: the one place that decides."""
    config, split = candidate.config, candidate.split
    workspace = 4 * batch * split * m * n if split > 1 else 0
    if workspace > MAX_WORKSPACE_BYTES:
        return f"{workspace} bytes of partial sums (at most {MAX_WORKSPACE_BYTES})"
    if candidate.family == "dot":
        if split not in dot_splits(k):
            return f"split {split} leaves a K slice empty or short"
        grid = (dot_tiles(m, n), split, batch)
        return "" if max(grid[1:]) <= MAX_GRID_YZ else f"grid {grid} passes CUDA's y/z limit"
    if candidate.family == "shortk":
        assert isinstance(config, ShortKConfig)
        grid = shortk_grid(config, m, n, batch)
        if split != 1:
            return "rung 27 does not split K (split 1)"
        return "" if max(grid[1:]) <= MAX_GRID_YZ else f"grid {grid} passes CUDA's y/z limit"
    if candidate.family == "gemv":
        assert isinstance(config, GemvConfig)
        if not gemv_runs(config, m, n):
            return f"{config.name} is not rung 24's variant for {m}x{n}"
        if config.fused and split == 1:
            return "one K slice needs no fused sum (the plain variant)"
        grid = gemv_grid(config, m, n, batch, split)
        if split not in gemv_splits(k):
            return f"split {split} leaves a K slice empty"
        return "" if max(grid[1:]) <= MAX_GRID_YZ else f"grid {grid} passes CUDA's y/z limit"
    assert isinstance(config, Config)
    if candidate.family == "streamk":
        if split != 1:
            return "stream-K splits its own way (split 1)"
        try:
            streamk_split(config, m, n, k, batch, device)
        except ValueError as exc:
            return str(exc)
        return ""
    grid = (-(-m // config.bm), -(-n // config.bn), batch * split)
    if grid[1] > MAX_GRID_YZ or grid[2] > MAX_GRID_YZ:
        return f"grid {grid} passes CUDA's y/z limit"
    if config.fused and split == 1:
        return "one K slice needs no fused sum (the plain variant)"
    packed = 4 * splitk_workspace(config, m, n, batch, split)
    if config.fused and packed > MAX_WORKSPACE_BYTES:
        return f"{packed} bytes of packed partial tiles (at most {MAX_WORKSPACE_BYTES})"
    if not _whole_slices(-(-k // config.bk), split):
        return f"split {split} leaves a K slice empty"
    return ""


def _whole_slices(k_tiles: int, split: int) -> bool:
    """Whether ``split`` slices of ceil(k_tiles / split) K tiles leave none empty."""
    return 1 <= split <= k_tiles and -(-k_tiles // -(-k_tiles // split)) == split


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


def shortk_max_k(m: int, n: int) -> int:
    """The longest K for which rung 22 offers rung 27: :data:`SHORTK_MAX_K` where M is a
    multiple of 4, else :data:`SHORTK_MAX_K_UNALIGNED_WIDE` where neither side is skinny
    and :data:`SHORTK_MAX_K_UNALIGNED` where one is."""
    if m % 4 == 0:
        return SHORTK_MAX_K
    return SHORTK_MAX_K_UNALIGNED_WIDE if min(m, n) > GEMV_MAX_SKINNY else SHORTK_MAX_K_UNALIGNED


def candidates(m: int, n: int, k: int, batch: int = 1, device: DeviceFacts = H100_SXM,
               families: tuple[str, ...] | None = None,
               configs: tuple[Config, ...] | None = None) -> list[Candidate]:
    """Every candidate of the manifest that can run the problem: each split-K variant with
    each of its :func:`tile_split_factors` (a fused one with each past 1), each
    stream-K variant (beside split-K only from :data:`STREAMK_MIN_K` up), rung 24's
    variants that run the shape (:func:`gemv_runs`) with each of their splits (a fused one
    with each split past 1), rung 27's variants where K is at most :func:`shortk_max_k` (its
    whole-column variants where M fits their rows and K is at most
    :data:`SHORTK_COLS_MAX_K`), rung 30 with each of its splits where C has at most
    :data:`DOT_MAX_TILES` tiles. ``configs`` keeps only those
    tile shapes (rung 21 keeps its own)."""
    families = FAMILIES if families is None else families
    out = []
    for row in VARIANTS:
        if row.family not in families:
            continue
        if configs is not None and row.config not in configs:
            continue
        if row.family == "splitk":
            assert isinstance(row.config, Config)
            if row.config.bm == 32 and row.config.bn > 32 and m > 32:
                continue  # taller C: taller tiles (this one is for C of at most 32 rows)
            splits = tile_split_factors(row.config, m, n, k, batch, device)
        elif row.family == "gemv":  # only where a side is skinny: elsewhere tiles win
            assert isinstance(row.config, GemvConfig)
            fused = row.config.fused
            if min(m, n) > GEMV_MAX_SKINNY or not gemv_runs(row.config, m, n):
                continue
            splits = [s for s in gemv_splits(k) if s > 1 or not fused]
        elif row.family == "shortk":
            assert isinstance(row.config, ShortKConfig)
            if row.config.cols:
                if m > row.config.bm or k > SHORTK_COLS_MAX_K:
                    continue
            elif k > shortk_max_k(m, n):
                continue
            splits = [1]
        elif row.family == "dot":
            if dot_tiles(m, n) > DOT_MAX_TILES:
                continue
            splits = dot_splits(k)
        elif row.family == "streamk" and k < STREAMK_MIN_K and "splitk" in families:
            continue  # rung 21's plan of the same tile is as fast or faster
        else:
            splits = [1]
        for split in splits:
            candidate = Candidate(row, split)
            if not why_not(candidate, m, n, k, batch, device):
                out.append(candidate)
    return out
