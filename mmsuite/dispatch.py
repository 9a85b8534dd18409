"""Tile shape and split-K factor per problem for the CUDA rungs built on cuda/21_splitk.cu.

One source, many compiled variants: a :class:`Config` is a set of ``-D``
defines (block tile BM x BN x BK, TM x TN outputs per thread, LR lanes along a
warp tile's rows, MINB blocks per SM in the launch bounds). A :class:`Choice`
is a config plus a split factor: the number of slices K is cut into, each slice
summed by its own blocks into a workspace that ``mm_21_reduce`` adds up.

The choice comes from a tuning file when it holds an entry for the problem's
exact sizes on this device (written by ``mmsuite tune``), else from
:func:`heuristic`: a small model of the GPU that counts waves of blocks on the
SMs, how full the last wave leaves them, the K work each block does and what
the extra reduction pass costs. It needs no measurement, so the rungs work
untuned on any device.

Tuning files live in ``$MMSUITE_TUNING_DIR`` when that is set, else in
``$XDG_CACHE_HOME/mmsuite/tuning`` (``~/.cache/mmsuite/tuning``), one JSON file
per device name. For problems the user's file does not name, a file shipped
with mmsuite (``mmsuite/tuning/``, written by ``mmsuite tune`` on that device)
is read next; ``MMSUITE_BUNDLED_TUNING=0`` turns the shipped files off. An
entry names a config and a split factor, or (``"streamk": true``) one of rung
23's stream-K variants.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from .launch import MAX_STATIC_SMEM

SOURCE = "cuda/21_splitk.cu"
MAIN_ENTRY = "mm_21_splitk"
REDUCE_ENTRY = "mm_21_reduce"
REDUCE_THREADS = 256
TUNING_FORMAT = 1
TUNING_ENV = "MMSUITE_TUNING_DIR"
BUNDLED_ENV = "MMSUITE_BUNDLED_TUNING"
BUNDLED_DIR = Path(__file__).with_name("tuning")

# Hopper (H100 SXM) figures the model starts from when the device reports none.
DEFAULT_SMS = 132
DEFAULT_CLOCK_MHZ = 1980
_REGS_PER_SM = 65536
_THREADS_PER_SM = 2048
_SMEM_PER_SM = 228 * 1024
_MAX_SMEM_PER_BLOCK = 227 * 1024  # sm_90's opt-in limit for one block
# Device-memory bandwidth the reduction pass sees (partial sums mostly come from L2).
_REDUCE_BYTES_PER_S = 2.5e12
_REDUCE_BYTES_PER_BLOCK_S = 50e9  # one reduction block's rate when few run (H100 fit, tall K)
_LAUNCH_GAP_S = 2e-6  # a second kernel's start behind the first on one stream
_BLOCK_LATENCY_S = 1.0e-6  # a block's prologue (first tile's loads) and epilogue
_FILL_EXPONENT = 0.3  # an SM with a share f of its warps runs at f ** 0.3 of its rate (H100 fit)
_MAX_WORKSPACE_BYTES = 512 * 2**20
_MAX_GRID_YZ = 65535


@dataclass(frozen=True)
class Config:
    """One compiled variant of cuda/21_splitk.cu: its tile shape and launch bounds.

    ``regs`` is the register count the variant compiles to for sm_90 (nvcc 13);
    it sets how many blocks share an SM. ``efficiency`` is the fraction of the
    FP32 peak a full SM reaches with this tile (from rung 20's 69% at 128x128 on
    the H100; smaller tiles load more per FMA). ``unaligned`` is the share of it
    left when M or K is not a multiple of 4 and loads go scalar (4097^3 against
    4096^3 on the H100, split 1: 0.735 to 0.845 for blocks of 256 or 512 threads,
    0.84 to 0.925 for 64 or 128).
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
        return out

    @property
    def smem_dynamic(self) -> bool:
        """The buffers pass the 48 KiB a kernel may declare: the launch passes their size."""
        return self.smem_bytes > MAX_STATIC_SMEM

    @property
    def smem_bytes(self) -> int:
        return 4 * self.stages * self.bk * (self.bm + self.bn + 4)

    @property
    def blocks_per_sm(self) -> int:
        """Resident blocks per SM: registers (allocated per warp in 256s), threads, shared."""
        regs_per_warp = -(-self.regs * 32 // 256) * 256
        by_regs = _REGS_PER_SM // (regs_per_warp * (self.threads // 32))
        by_threads = _THREADS_PER_SM // self.threads
        by_smem = _SMEM_PER_SM // (self.smem_bytes + 1024)
        return max(1, min(by_regs, by_threads, by_smem, 32))

    def params(self) -> dict[str, int]:
        """The tunable parameters, as stored in tuning files."""
        return {"BM": self.bm, "BN": self.bn, "BK": self.bk, "TM": self.tm, "TN": self.tn,
                "LR": self.lr, "STAGES": self.stages, "MINB": self.minb}

    @classmethod
    def from_params(cls, params: dict) -> Config:
        """A config from tuning-file parameters; known shapes keep their measured figures."""
        args = {"bm": int(params["BM"]), "bn": int(params["BN"]), "bk": int(params.get("BK", 16)),
                "tm": int(params.get("TM", 8)), "tn": int(params.get("TN", 8)),
                "lr": int(params.get("LR", 4)), "stages": int(params.get("STAGES", 1)),
                "minb": int(params.get("MINB", 0))}
        for known in SEARCH:
            if all(getattr(known, key) == value for key, value in args.items()):
                return known
        return cls(**args)


# The variants the heuristic chooses from. Registers from `nvcc -arch=sm_90 -Xptxas -v`;
# efficiency = TFLOP/s at 4096^3 on the H100 (split 1, every SM full, two rounds)
# over the 66.9 TFLOP/s FP32 peak, measured with each tile's FMA order of
# cuda/mac_loop.inc. That order moved the 8 x 8 tiles by 1-3% (256x128 LR 2: 0.715
# to 0.725) and 128x128x16 from 0.60 to 0.70; 256x128 LR 2 with both of its
# 24.8 KB buffers (dynamic shared memory, one barrier per K tile) reaches 0.736,
# 1.5% more (49.6 against 48.9 TFLOP/s in one run; 4097^3 keeps 0.74 of it).
# 128x256x16 with two buffers was faster still on 8192x128x8192 (93.5% of cuBLAS
# against 91%) but spills 32 bytes under nvcc 13.0, so it is left out.
CONFIGS: dict[str, Config] = {c.name: c for c in (
    Config(256, 128, lr=2, stages=2, regs=128, efficiency=0.736, unaligned=0.74),
    Config(256, 128, lr=2, regs=128, efficiency=0.725, unaligned=0.735),
    Config(256, 128, regs=128, efficiency=0.72, unaligned=0.735),
    Config(128, 256, regs=128, efficiency=0.696, unaligned=0.755),
    Config(128, 128, bk=8, lr=2, regs=128, efficiency=0.708, unaligned=0.81),
    Config(128, 128, bk=8, regs=128, efficiency=0.705, unaligned=0.74),
    Config(128, 128, regs=128, efficiency=0.70, unaligned=0.845),
    Config(64, 128, minb=3, regs=149, efficiency=0.654, unaligned=0.915),
    Config(128, 64, minb=3, regs=149, efficiency=0.673, unaligned=0.84),
    Config(64, 64, minb=6, regs=159, efficiency=0.633, unaligned=0.925),
    Config(64, 64, tm=4, tn=8, lr=8, regs=101, efficiency=0.591, unaligned=0.89),
    Config(64, 64, tm=4, tn=4, regs=79, efficiency=0.479, unaligned=0.85),
    Config(32, 32, tm=4, tn=4, regs=89, efficiency=0.417, unaligned=0.87),
)}
RUNG21_CONFIG = CONFIGS["128x128x8"]
# What `mmsuite tune` searches beyond them: double-buffered shared memory,
# 512-thread tiles with BK 8, taller 256x64 and 512x64 tiles. Efficiencies as
# above; none beats the dispatcher's best tiles at 4096^3 (256x128x8 LR 2
# double-buffered comes closest, 0.716 against 0.736 and 0.725), which is why the
# heuristic leaves them to the tuner.
SEARCH: tuple[Config, ...] = tuple(CONFIGS.values()) + (
    Config(256, 128, bk=8, lr=2, stages=2, regs=128, efficiency=0.716, unaligned=0.745),
    Config(256, 128, bk=8, lr=2, regs=128, efficiency=0.696, unaligned=0.75),
    Config(128, 256, bk=8, stages=2, regs=128, efficiency=0.636, unaligned=0.775),
    Config(128, 128, bk=8, stages=2, regs=128, efficiency=0.668, unaligned=0.765),
    Config(64, 128, bk=8, stages=2, minb=3, regs=141, efficiency=0.534, unaligned=0.9),
    Config(128, 64, stages=2, minb=3, regs=149, efficiency=0.669, unaligned=0.835),
    Config(128, 64, bk=8, minb=3, regs=136, efficiency=0.585, unaligned=0.875),
    Config(256, 64, regs=128, efficiency=0.677, unaligned=0.83),
    Config(256, 64, lr=8, regs=128, efficiency=0.678, unaligned=0.835),
    Config(512, 64, lr=8, regs=128, efficiency=0.62, unaligned=0.755),
)


@dataclass(frozen=True)
class Device:
    """What the model needs to know about the GPU."""

    name: str = "NVIDIA H100 80GB HBM3"
    sms: int = DEFAULT_SMS
    clock_mhz: int = DEFAULT_CLOCK_MHZ


@dataclass(frozen=True)
class Choice:
    """A config and a split factor for one problem, and where they came from."""

    config: Config
    split: int
    source: str = "heuristic"  # or "tuned"
    tuning_file: str | None = None
    estimate_ms: float | None = None
    extra: dict = field(default_factory=dict, compare=False)
    streamk: bool = False  # rung 23's stream-K kernels with this tile instead (split 1)

    def grid(self, m: int, n: int, batch: int) -> tuple[int, int, int]:
        return (-(-m // self.config.bm), -(-n // self.config.bn), batch * self.split)

    def workspace_elems(self, m: int, n: int, batch: int) -> int:
        return batch * self.split * m * n if self.split > 1 else 0

    def reduce_grid(self, m: int, n: int, batch: int) -> int:
        """Blocks of the reduction: enough to cover C once in float4s, at most 16 per SM."""
        quads = -(-(batch * m * n) // 4)
        return max(1, min(-(-quads // REDUCE_THREADS), 16 * DEFAULT_SMS))

    def info(self) -> dict:
        """What the result record's ``info`` says about the choice."""
        out = {"config": self.config.name, "params": self.config.params(), "split": self.split,
               "threads": self.config.threads, "choice": self.source}
        if self.streamk:
            out["streamk"] = True
        if self.tuning_file:
            out["tuning_file"] = self.tuning_file
        if self.estimate_ms is not None:
            out["estimate_ms"] = round(self.estimate_ms, 4)
        return {**out, **self.extra}


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _splits(k: int, bk: int) -> list[int]:
    """Split factors worth trying: each leaves no slice empty."""
    tiles = -(-k // bk)
    out = []
    for s in (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512):
        if s > tiles:
            break
        per = -(-tiles // s)
        if -(-tiles // per) == s:  # otherwise the last slices would be empty
            out.append(s)
    return out


def estimate_seconds(config: Config, split: int, m: int, n: int, k: int, batch: int,
                     device: Device = Device()) -> float:
    """Modelled time of one call: waves of blocks on the SMs plus the reduction pass."""
    tiles = -(-m // config.bm) * -(-n // config.bn) * batch
    blocks = tiles * split
    k_slice = _ceil(_ceil(k, config.bk), split) * config.bk
    fma_per_block = config.bm * config.bn * k_slice
    sm_rate = 128 * device.clock_mhz * 1e6 * config.efficiency  # FMA/s of a full SM
    if m % 4 or k % 4:  # A or B columns not 16-byte aligned: scalar loads
        sm_rate *= config.unaligned
    occupancy = config.blocks_per_sm
    slots = device.sms * occupancy
    full_waves, rest = divmod(blocks, slots)

    def wave(per_sm: int) -> float:
        # An SM holding fewer warps than 16 hides less latency: throughput ~ sqrt(fill).
        fill = min(1.0, per_sm * config.threads / 32 / 16)
        return per_sm * fma_per_block / (sm_rate * fill ** _FILL_EXPONENT) + _BLOCK_LATENCY_S

    seconds = full_waves * wave(occupancy)
    if rest:
        seconds += wave(-(-rest // device.sms))
    if split > 1:
        # The main kernel writes split partial tiles; the reduction reads them and C once,
        # one float4 of C per thread: a small C keeps it on few SMs, each of which moves
        # only so many bytes a second.
        partials = 4 * batch * m * n * split
        blocks = Choice(config, split).reduce_grid(m, n, batch)
        reduce_rate = min(_REDUCE_BYTES_PER_S, blocks * _REDUCE_BYTES_PER_BLOCK_S)
        seconds += (partials / _REDUCE_BYTES_PER_S + (partials + 8 * batch * m * n) / reduce_rate
                    + _LAUNCH_GAP_S)
    return seconds


def fits(config: Config, split: int, m: int, n: int, batch: int) -> bool:
    """The launch stays inside CUDA's grid limits and the workspace cap."""
    grid = (-(-m // config.bm), -(-n // config.bn), batch * split)
    workspace = 4 * batch * split * m * n if split > 1 else 0
    return grid[1] <= _MAX_GRID_YZ and grid[2] <= _MAX_GRID_YZ and (
        workspace <= _MAX_WORKSPACE_BYTES)


def heuristic(m: int, n: int, k: int, batch: int = 1, device: Device = Device(),
              configs: list[Config] | None = None) -> Choice:
    """The config and split factor with the least modelled time (see the module docstring)."""
    best: tuple[float, Config, int] | None = None
    for config in configs or list(CONFIGS.values()):
        for split in _splits(k, config.bk):
            if not fits(config, split, m, n, batch):
                continue
            seconds = estimate_seconds(config, split, m, n, k, batch, device)
            if best is None or seconds < best[0] * (1 - 1e-9):
                best = (seconds, config, split)
    if best is None:  # nothing fits the grid limits: let the launch report it
        config = (configs or [RUNG21_CONFIG])[0]
        return Choice(config, 1)
    return Choice(best[1], best[2], estimate_ms=best[0] * 1e3)


# ---------------------------------------------------------------- tuning files
def tuning_dir() -> Path:
    """Where tuning files live: $MMSUITE_TUNING_DIR, else the user's cache folder."""
    if os.environ.get(TUNING_ENV):
        return Path(os.environ[TUNING_ENV])
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "mmsuite" / "tuning"


def device_slug(name: str) -> str:
    """A file name for a device name: 'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug or "unknown-device"


def tuning_path(device_name: str) -> Path:
    """The user's tuning file for a device (``mmsuite tune`` writes it)."""
    return tuning_dir() / f"{device_slug(device_name)}.json"


def bundled_tuning_path(device_name: str) -> Path | None:
    """The tuning file shipped for a device, or None (none shipped, or turned off)."""
    if os.environ.get(BUNDLED_ENV, "1") == "0":
        return None
    path = BUNDLED_DIR / f"{device_slug(device_name)}.json"
    return path if path.is_file() else None


def shape_key(m: int, n: int, k: int, batch: int = 1) -> str:
    """The key of a problem in a tuning file: the kernel's own (column-major) sizes."""
    return f"{m}x{n}x{k}x{batch}"


class TuningFileError(ValueError):
    """A tuning file that cannot be read as one."""


def load_tuning(path: Path) -> dict:
    """A tuning file's content ({'device', 'entries': {shape_key: entry}}); empty if absent."""
    if not path.is_file():
        return {"format": TUNING_FORMAT, "device": None, "entries": {}}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise TuningFileError(f"cannot read tuning file {path}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("entries"), dict):
        raise TuningFileError(f"{path} is not an mmsuite tuning file (no 'entries' mapping)")
    if data.get("format") != TUNING_FORMAT:
        raise TuningFileError(f"{path} has format {data.get('format')!r}, this mmsuite reads "
                              f"format {TUNING_FORMAT}")
    return data


def store_tuning(path: Path, device_name: str, entries: dict) -> dict:
    """Merge ``entries`` into the tuning file at ``path`` (atomically); returns its content.

    An entry of None removes that problem's entry: the heuristic decides it again.
    """
    data = load_tuning(path)
    data["device"] = device_name
    merged = {**data["entries"], **entries}
    data["entries"] = {key: entry for key, entry in merged.items() if entry is not None}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as out:
        json.dump(data, out, indent=1, sort_keys=True)
        out.write("\n")
    os.replace(tmp, path)
    return data


def tuned_choice(entry: dict, path: Path) -> Choice:
    """The choice a tuning-file entry holds."""
    try:
        config = Config.from_params(entry["params"])
        split = int(entry["split"])
    except (KeyError, TypeError, ValueError) as exc:
        raise TuningFileError(f"bad entry in {path}: {entry!r} ({exc})") from exc
    if split < 1:
        raise TuningFileError(f"bad entry in {path}: split {split} < 1")
    if entry.get("streamk"):
        known = {c.name: c for c in STREAMK_CONFIGS}
        if config.name not in known or split != 1:
            raise TuningFileError(f"bad entry in {path}: {config.name} split {split} is not one "
                                  f"of rung 23's stream-K variants ({', '.join(known)})")
        return Choice(known[config.name], 1, source="tuned", tuning_file=str(path), streamk=True)
    return Choice(config, split, source="tuned", tuning_file=str(path))


def applies(choice: Choice, m: int, n: int, k: int, batch: int,
            device: Device = Device()) -> bool:
    """The choice can launch this problem: grid limits, workspace, stream-K's int counters."""
    if not choice.streamk:
        return fits(choice.config, choice.split, m, n, batch)
    try:
        streamk_split(choice.config, m, n, k, batch, device)
    except ValueError:
        return False
    return True


def choose(m: int, n: int, k: int, batch: int = 1, device: Device = Device(),
           configs: list[Config] | None = None) -> Choice:
    """The tuned entry for these exact sizes on this device if there is one, else the heuristic.

    The user's tuning file is read first, then the one shipped for the device.
    ``configs`` restricts the heuristic (rung 21 keeps its 128x128 tile); a
    tuned entry applies only when its config is among them.
    """
    paths = [p for p in (tuning_path(device.name), bundled_tuning_path(device.name))
             if p is not None and p.is_file()]
    key = shape_key(m, n, k, batch)
    for path in paths:
        entry = load_tuning(path)["entries"].get(key)
        if entry is None:
            continue
        choice = tuned_choice(entry, path)
        if (configs is None or (choice.config in configs and not choice.streamk)) and applies(
                choice, m, n, k, batch, device):
            return choice
        break  # the first file naming the problem decides; its entry does not apply here
    choice = heuristic(m, n, k, batch, device, configs)
    if paths:  # the record names the file that was consulted
        return Choice(choice.config, choice.split, choice.source, str(paths[0]),
                      choice.estimate_ms)
    return choice


def as_dict(choice: Choice) -> dict:
    """A JSON-ready form of a choice (for logs and the tuner's output)."""
    return {"config": asdict(choice.config), "split": choice.split, "source": choice.source}


# --------------------------------------------------------------------- launch
def plan(choice: Choice, source: str, m: int, n: int, batch: int):
    """The ``CudaPlan`` of a choice: the main kernel, then the reduction when K is split."""
    from .launch import GEMM_ARGS, CudaPlan, CudaStep

    defines = tuple(sorted(choice.config.defines.items()))
    smem = choice.config.smem_bytes if choice.config.smem_dynamic else 0
    steps = [CudaStep(choice.grid(m, n, batch), (choice.config.threads,), MAIN_ENTRY, source,
                      defines, smem=smem, args=GEMM_ARGS + ("work", choice.split))]
    if choice.split > 1:
        steps.append(CudaStep((choice.reduce_grid(m, n, batch), 1, 1), (REDUCE_THREADS,),
                              REDUCE_ENTRY, source, defines,
                              args=("m", "n", "batch", "alpha", "work", "beta", "c",
                                    choice.split)))
    return CudaPlan(tuple(steps), workspace=choice.workspace_elems(m, n, batch),
                    info={"dispatch": choice.info()})


def _device(facts: dict) -> Device:
    return Device(str(facts.get("name") or "unknown GPU"),
                  int(facts.get("sm_count") or DEFAULT_SMS),
                  int(facts.get("sm_clock_mhz") or DEFAULT_CLOCK_MHZ))


def plan_splitk(entry: str, source: str, call, device: dict):
    """Planner of rung 21: its 128x128 tile, the heuristic's split factor (no tuning file:
    tuned entries belong to rung 22, and one problem has one entry per device)."""
    choice = heuristic(call.m, call.n, call.k, call.batch, _device(device), [RUNG21_CONFIG])
    return plan(choice, source, call.m, call.n, call.batch)


def plan_adaptive(entry: str, source: str, call, device: dict):
    """Planner of the dispatching rung: tile config and split factor per problem, or
    rung 23's stream-K where the model finds it clearly faster (``adaptive_streamk``)."""
    choice = choose(call.m, call.n, call.k, call.batch, _device(device))
    if choice.streamk:  # a tuned stream-K entry
        split = streamk_split(choice.config, call.m, call.n, call.k, call.batch, _device(device))
        return plan_streamk_split(split, STREAMK_SOURCE, extra={
            "choice": choice.source, "tuning_file": choice.tuning_file})
    streamk = adaptive_streamk(choice, call.m, call.n, call.k, call.batch, _device(device))
    if streamk is not None:
        consulted = {"tuning_file": choice.tuning_file} if choice.tuning_file else {}
        return plan_streamk_split(streamk[0], STREAMK_SOURCE, streamk[1],
                                  {"splitk_estimate_ms": choice.estimate_ms, **consulted})
    return plan(choice, source, call.m, call.n, call.batch)


# ------------------------------------------------------------------- stream-K
# Rung 23 (cuda/23_streamk.cu): a grid of SMs x resident blocks shares the
# MAC-loop iterations (BK steps of one tile) of the tiles that do not fill whole
# waves; the other tiles run data-parallel, one block each. The split below uses
# the same integer arithmetic as the kernels.
STREAMK_SOURCE = "cuda/23_streamk.cu"
STREAMK_ENTRY = "mm_23_streamk"
FIXUP_ENTRY = "mm_23_fixup"
FIXUP_THREADS = 128  # FIX_THREADS in the source: one float4 of a partial tile each
_MAX_ITERATIONS = 2**31 - 1  # the kernels count iterations in ints
# Rung 22's variants as rung 23 compiles them (nvcc 13, sm_90; registers as
# ptxas reports them, every one without spills). 128x128x16 spilled in this
# source and was left out; it compiles without spills since the FMA orders of
# cuda/mac_loop.inc, but has not been measured as a stream-K variant.
_STREAMK_REGS = {"256x128x16_t8x8_lr2": 127, "256x128x16": 127, "128x256x16": 128,
                 "128x128x8": 124, "64x128x16_b3": 144, "128x64x16_b3": 168,
                 "64x64x16_b6": 153, "64x64x16_t4x8_lr8": 95, "64x64x16_t4x4_lr4": 77,
                 "32x32x16_t4x4_lr4": 89}
STREAMK_CONFIGS: tuple[Config, ...] = tuple(
    replace(CONFIGS[name], regs=regs) for name, regs in _STREAMK_REGS.items())


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
        return {"config": self.config.name, "params": self.config.params(),
                "threads": self.config.threads, "tiles": self.tiles, "slots": self.slots,
                "sk_ctas": self.sk_ctas, "sk_tiles": self.sk_tiles, "dp_tiles": self.dp_tiles}


def streamk_split(config: Config, m: int, n: int, k: int, batch: int = 1,
                  device: Device = Device()) -> StreamK:
    """The two-tile stream-K + data-parallel split (Osama et al., PPoPP'23).

    With ``slots`` resident blocks and ``tiles`` tiles: when the tiles fill whole
    waves, every tile is data-parallel. Otherwise the first ``slots + tiles mod
    slots`` tiles (all of them when there are fewer than ``slots``) are shared
    evenly by ``slots`` blocks, between one and two tiles each, and the rest,
    whole waves, stay data-parallel. Never more stream-K blocks than iterations.
    """
    tiles = _ceil(m, config.bm) * _ceil(n, config.bn) * batch
    ipt = _ceil(k, config.bk)
    if tiles * ipt > _MAX_ITERATIONS:
        raise ValueError(f"{batch}x{m}x{n}x{k} has {tiles * ipt} MAC-loop iterations of "
                         f"{config.name}; rung 23 counts at most {_MAX_ITERATIONS}")
    slots = device.sms * config.blocks_per_sm
    rest = tiles % slots
    sk_tiles = 0 if rest == 0 else min(tiles, slots + rest)
    sk_ctas = min(slots, sk_tiles * ipt)
    return StreamK(config, tiles, ipt, slots, sk_ctas, sk_tiles)


def estimate_streamk_seconds(split: StreamK, m: int, n: int, k: int, batch: int,
                             device: Device = Device()) -> float:
    """Modelled time of rung 23: full data-parallel waves, the stream-K wave, the fix-up."""
    config = split.config
    sm_rate = 128 * device.clock_mhz * 1e6 * config.efficiency
    if m % 4 or k % 4:
        sm_rate *= config.unaligned
    fma_iter = config.bm * config.bn * config.bk
    occupancy = config.blocks_per_sm
    seconds = split.dp_tiles // split.slots * (
        occupancy * split.ipt * fma_iter / sm_rate + _BLOCK_LATENCY_S)
    if split.sk_ctas:
        per_sm = _ceil(split.sk_ctas, device.sms)
        fill = min(1.0, per_sm * config.threads / 32 / 16)
        share = _ceil(split.sk_tiles * split.ipt, split.sk_ctas)
        seconds += (per_sm * share * fma_iter / (sm_rate * fill ** _FILL_EXPONENT)
                    + 2 * _BLOCK_LATENCY_S)
        # Partials written and read back (at most two per block), C of the shared tiles.
        partials = 4 * split.workspace_elems
        blocks = split.fixup_grid[0] * split.fixup_grid[1]
        rate = min(_REDUCE_BYTES_PER_S, blocks * _REDUCE_BYTES_PER_BLOCK_S / 2)
        seconds += (partials / _REDUCE_BYTES_PER_S
                    + (partials + 8 * split.sk_tiles * config.bm * config.bn) / rate
                    + _LAUNCH_GAP_S)
    return seconds


def streamk_choice(m: int, n: int, k: int, batch: int = 1,
                   device: Device = Device()) -> tuple[StreamK, float]:
    """The stream-K variant with the least modelled time, and that time in seconds."""
    best: tuple[float, StreamK] | None = None
    for config in STREAMK_CONFIGS:
        split = streamk_split(config, m, n, k, batch, device)
        seconds = estimate_streamk_seconds(split, m, n, k, batch, device)
        if best is None or seconds < best[0] * (1 - 1e-9):
            best = (seconds, split)
    assert best is not None
    return best[1], best[0]


def plan_streamk_split(split: StreamK, source: str, estimate_s: float | None = None,
                       extra: dict | None = None):
    """The ``CudaPlan`` of a stream-K split: the main kernel, then the fix-up when
    some tile is shared. ``extra`` joins the record's ``dispatch`` info."""
    from .launch import GEMM_ARGS, CudaPlan, CudaStep

    defines = tuple(sorted(split.config.defines.items()))
    counts = (split.sk_ctas, split.sk_tiles)
    steps = [CudaStep(split.grid, (split.config.threads,), STREAMK_ENTRY, source, defines,
                      args=GEMM_ARGS + ("work",) + counts)]
    if split.sk_ctas:
        steps.append(CudaStep(split.fixup_grid, (FIXUP_THREADS,), FIXUP_ENTRY, source, defines,
                              args=("m", "n", "k", "alpha", "work", "beta", "c") + counts))
    info = {"choice": "heuristic", "streamk": True, **split.info()}
    if estimate_s is not None:
        info["estimate_ms"] = round(estimate_s * 1e3, 4)
    for key, value in (extra or {}).items():
        info[key] = round(value, 4) if isinstance(value, float) else value
    return CudaPlan(tuple(steps), workspace=split.workspace_elems, info={"dispatch": info})


def plan_streamk(entry: str, source: str, call, device: dict):
    """Planner of rung 23: the stream-K variant the model prefers for the problem."""
    split, seconds = streamk_choice(call.m, call.n, call.k, call.batch, _device(device))
    return plan_streamk_split(split, source, seconds)


# The stream-K variants rung 22 may take, and by how much the model must prefer
# them. Measured on the H100 against rung 22's own choice: rung 23 with 64x128
# tiles of 3 blocks per SM was 4% faster at 4097^3 (the model said 10%), with
# 64x64 tiles of 6 blocks 3% faster at 2053^3 (model 6%); with the 512-thread
# tiles it was 2-8% slower at 2048^3 to 8192^3 and on batch 100 x 1000^3 (its
# 128 KB partial tiles cost more than the last wave they fill; against rung 22's
# double-buffered tile in the last table), and slower on
# every small, skinny or tall-K shape measured. So only the high-occupancy 128-
# and 64-thread tiles, and only where the model gains 8% or more. Since the FMA
# orders of cuda/mac_loop.inc, split-K's 128x128x16 tile closed the gap at
# 4097^3 (3.430 ms against stream-K's 3.409; the model says 7%), and the rule
# leaves it there; the shipped tuning file names stream-K with 128x64 tiles
# (3.315 ms).
ADAPTIVE_STREAMK_CONFIGS: tuple[Config, ...] = tuple(
    c for c in STREAMK_CONFIGS if c.minb and c.blocks_per_sm >= 3)
_ADAPTIVE_STREAMK_GAIN = 0.92


def adaptive_streamk(choice: Choice, m: int, n: int, k: int, batch: int = 1,
                     device: Device = Device()) -> tuple[StreamK, float] | None:
    """Rung 23's split and modelled seconds when rung 22 should take it instead of
    ``choice`` (the heuristic's; a tuned entry is measured and always kept), else None."""
    if choice.source != "heuristic" or choice.estimate_ms is None:
        return None
    best: tuple[float, StreamK] | None = None
    for config in ADAPTIVE_STREAMK_CONFIGS:
        try:
            split = streamk_split(config, m, n, k, batch, device)
        except ValueError:  # more iterations than the kernels count
            continue
        if split.sk_ctas == 0:  # whole waves: the same blocks as rung 21's split 1
            continue
        seconds = estimate_streamk_seconds(split, m, n, k, batch, device)
        if best is None or seconds < best[0]:
            best = (seconds, split)
    if best is None or best[0] * 1e3 >= choice.estimate_ms * _ADAPTIVE_STREAMK_GAIN:
        return None
    return best[1], best[0]
