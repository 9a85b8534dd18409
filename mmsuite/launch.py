"""Typed launch data: how an adapter launches a catalogue rung.

The catalogue holds one of these per rung; the adapters read them. Neither this
module nor the adapters import the catalogue, so the catalogue can ask the
backend registry whether a kernel is available without an import circle.

OpenCL
    ``ClGeometry``: -D options, local size and the block of C one work-group
    covers. A rung lists geometries per device type, best first; the adapter
    uses the first the device accepts.

CUDA
    ``CudaLaunch`` describes a rung launched once per sample on a grid that
    follows from the problem (see ``CudaLaunch.steps``). A rung that picks its
    kernels per problem (a tile shape, a split-K factor and its reduction) names
    a ``planner`` instead: a function of ``mmsuite.cuda_dispatch.planners`` (or
    ``mmsuite.tensorcore`` for the tensor-core rungs),
    called as ``planner(call, device, override) -> CudaPlan`` with the
    ``GemmCall``, the device's ``DeviceFacts`` and a candidate plan to force (or
    None). The plan's steps run in order on one stream, and one sample times
    them all together.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .layout import GemmCall

#: The floating-point flags of every CUDA module: IEEE FP32, as the C, OpenCL and cuBLAS
#: rows compute it. Subnormals are kept (not flushed to zero), division and square root
#: are correctly rounded, and a * b + c may contract into one FMA, which rounds once (as
#: every FP32 BLAS does). Spelled out, not left to NVRTC's defaults, since they are part
#: of what a row computes (``mmsuite.identity`` records them). The CUDA adapter
#: compiles every module with them (``mmsuite.backends.cuda.nvrtc_options``).
IEEE_FLAGS = ("-ftz=false", "-prec-div=true", "-prec-sqrt=true", "-fmad=true")

#: Arguments of every rung (cuda/common.cuh): (M, N, K, alpha, A, B, beta, C).
GEMM_ARGS = ("m", "n", "k", "alpha", "a", "b", "beta", "c")
#: Names a step's arguments may use; other ints are passed as int32, floats as float32.
ARG_NAMES = frozenset(GEMM_ARGS + ("batch", "work"))
#: The names among them that are device buffers of float32.
BUFFER_NAMES = frozenset(("a", "b", "c", "work"))
#: Shared memory a kernel may declare statically; a launch asking for more dynamic
#: shared memory first raises the kernel's ``MaxDynamicSharedMemorySize``.
MAX_STATIC_SMEM = 48 * 1024


class LaunchLimit(ValueError):
    """The problem needs a launch beyond the device's limits (CUDA's grid y/z at 65535): the
    rung cannot run it, which is no bug."""



@dataclass(frozen=True)
class DeviceFacts:
    """The GPU as the planners and the dispatcher's model see it: one typed value, which
    the CUDA adapter fills from its one reader of the device's facts. Defaults: an H100
    SXM, the figures the model starts from when a device reports none."""

    name: str = "NVIDIA H100 80GB HBM3"
    sms: int = 132
    clock_mhz: int = 1980
    memory_clock_mhz: int = 2619
    memory_bus_bits: int = 5120
    l2_bytes: int = 50 * 2**20

    @property
    def memory_bytes_per_s(self) -> float:
        """Peak device-memory bandwidth: double data rate over the bus."""
        return 2.0 * self.memory_clock_mhz * 1e6 * self.memory_bus_bits / 8

    @property
    def fp32_peak_flops(self) -> float:
        """SMs x 128 FP32 lanes x 2 flops (FMA) x clock."""
        return self.sms * 128 * 2 * self.clock_mhz * 1e6


#: The facts the model assumes when it is given none: an H100 SXM.
H100_SXM = DeviceFacts()

def arch_capability(arch: str) -> str:
    """The compute capability an architecture-specific target runs on: "sm_90a" -> "90"."""
    return "".join(ch for ch in arch if ch.isdigit())


def ceil_div(a: int, b: int) -> int:
    """a / b rounded up, for positive integers: tiles, blocks and work-groups that cover a size."""
    return -(-a // b)


#: Element sizes of the types a tensor map may hold.
TENSOR_MAP_BYTES = {"float32": 4, "bfloat16": 2}


@dataclass(frozen=True)
class TensorMap:
    """A 3-D tensor (k, rows, matrix) of ``dtype`` in one of the step's buffers, read in
    boxes of ``box_k`` x ``box_rows`` x 1 with the 128-byte swizzle; elements past the
    edges read as zero. ``offset`` (floats: 4-byte units) is where it starts in
    ``buffer``; strides in elements of ``dtype``, each a whole number of 16 bytes."""

    buffer: str
    offset: int
    k: int
    rows: int
    matrices: int
    row_stride: int
    matrix_stride: int
    box_rows: int
    box_k: int = 32
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.buffer not in BUFFER_NAMES:
            raise ValueError(f"unknown buffer {self.buffer!r}; use {sorted(BUFFER_NAMES)}")
        if self.dtype not in TENSOR_MAP_BYTES:
            raise ValueError(f"unknown tensor map dtype {self.dtype!r}; use "
                             f"{sorted(TENSOR_MAP_BYTES)}")
        size = self.element_bytes
        if (self.row_stride * size) % 16 or (self.matrix_stride * size) % 16 or self.offset % 4:
            raise ValueError(f"tensor map strides and offset must be multiples of 16 bytes: "
                             f"{self}")

    @property
    def element_bytes(self) -> int:
        return TENSOR_MAP_BYTES[self.dtype]


@dataclass(frozen=True)
class TensorMaps:
    """One kernel argument: the maps, by value, one after another (128 bytes each)."""

    maps: tuple[TensorMap, ...]


@dataclass(frozen=True)
class CudaStep:
    """One kernel launch of a sample.

    ``args`` are names from ``ARG_NAMES`` (sizes, scalars, the A, B and C
    buffers, ``work``: the plan's float32 workspace), literal numbers or
    ``TensorMaps``. ``source`` and ``entry`` default to the rung's own; ``arch``
    names the architecture-specific target the source needs ("" for the device's
    own).
    """

    grid: tuple[int, int, int]
    block: tuple[int, ...]
    entry: str | None = None
    source: str | None = None
    defines: tuple[tuple[str, int | str], ...] = ()
    smem: int = 0
    args: tuple[str | int | float | TensorMaps, ...] = GEMM_ARGS
    arch: str = ""

    def __post_init__(self) -> None:
        unknown = [a for a in self.args if isinstance(a, str) and a not in ARG_NAMES]
        if unknown:
            raise ValueError(f"unknown kernel argument names {unknown}; use {sorted(ARG_NAMES)}")


@dataclass(frozen=True)
class CudaPlan:
    """The steps of one sample, the workspace they share and facts for the record."""

    steps: tuple[CudaStep, ...]
    workspace: int = 0  # float32 elements
    info: Mapping = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class CudaLaunch:
    """A rung's launch geometry.

    ``block``    threads per block, (x, y).
    ``tile``     (tile_x, tile_y): output elements one block covers along grid x
                 and grid y; default ``block`` (one output per thread).
    ``grid_x``   "rows" (grid.x walks M, grid.y walks N) or "cols" (grid.x walks
                 N, grid.y walks M); default "rows" for column-major rungs,
                 "cols" for row-major ones.
    ``smem``     dynamic shared memory in bytes. Above 48 KB the kernel's
                 ``MaxDynamicSharedMemorySize`` attribute is raised.
    ``defines``  (NAME, value) pairs passed as ``-DNAME=value``: one source file
                 serves several rungs.
    ``split_k``  slices the K loop is cut into; the grid gets ``batch * split_k``
                 blocks along z. Only for kernels written for it.
    ``planner``  a function returning a ``CudaPlan`` per problem (module
                 docstring); the other fields are then unused.
    ``arch``     the architecture-specific target the rung's source needs
                 (``"sm_90a"``: compute capability 9.0 only), "" for none. The
                 adapter reports the rung unavailable on other GPUs.
    """

    block: tuple[int, ...] = (16, 16)
    tile: tuple[int, int] | None = None
    grid_x: str | None = None
    smem: int = 0
    defines: tuple[tuple[str, int | str], ...] = ()
    split_k: int = 1
    planner: Callable[..., CudaPlan] | None = None
    arch: str = ""

    def __post_init__(self) -> None:
        if self.grid_x not in (None, "rows", "cols"):
            raise ValueError(f"grid_x must be 'rows' or 'cols', got {self.grid_x!r}")
        if isinstance(self.defines, Mapping):
            object.__setattr__(self, "defines", tuple(sorted(self.defines.items())))

    def grid(self, call: GemmCall, layout: str) -> tuple[int, int, int]:
        """The grid for ``call`` on a rung written for ``layout``."""
        block = tuple(self.block) + (1,) * (2 - len(self.block))
        tile = self.tile or (block[0], block[1])
        walk = self.grid_x or ("rows" if layout == "col" else "cols")
        dim_x, dim_y = (call.m, call.n) if walk == "rows" else (call.n, call.m)
        grid = (ceil_div(dim_x, tile[0]), ceil_div(dim_y, tile[1]), call.batch * self.split_k)
        if grid[1] > 65535 or grid[2] > 65535:
            raise LaunchLimit(f"grid {grid} exceeds CUDA's y/z limit of 65535")
        return grid

    def plan(self, call: GemmCall, layout: str) -> CudaPlan:
        """One step: the rung's own kernel on its grid."""
        return CudaPlan((CudaStep(self.grid(call, layout), tuple(self.block),
                                  defines=self.defines, smem=self.smem),))


# --------------------------------------------------------------------- OpenCL
@dataclass(frozen=True)
class ClGeometry:
    """How an OpenCL rung is built and launched: -D options, local size, C block per group."""

    defines: tuple[tuple[str, int], ...]
    local: tuple[int, int]
    block: tuple[int, int]  # (columns, rows) of C per work-group
    local_mem: int = 0  # bytes of local memory the kernel declares

    @property
    def options(self) -> list[str]:
        return [f"-D{name}={value}" for name, value in self.defines]

    @property
    def work_group_size(self) -> int:
        return self.local[0] * self.local[1]

    def global_size(self, m: int, n: int, batch: int) -> tuple[int, int, int]:
        groups_x = ceil_div(n, self.block[0])
        groups_y = ceil_div(m, self.block[1])
        return (groups_x * self.local[0], groups_y * self.local[1], batch)

    def with_define(self, name: str, value: int) -> ClGeometry:
        defines = tuple((n, value if n == name else v) for n, v in self.defines)
        return ClGeometry(defines, self.local, self.block, self.local_mem)

    def shape_error(self) -> str:
        """Why the -D values are inconsistent (rung 4's slices must split evenly), else ''."""
        d = dict(self.defines)
        if d.get("STAGE", 0):
            width = 4 if d.get("VEC") else 1
            items = self.work_group_size
            if (d["BM"] * d["BK"] // width) % items or (d["BK"] * d["BN"] // width) % items:
                return f"{self.describe()}: slices do not split evenly over {items} work-items"
        return ""

    def describe(self) -> str:
        defs = " ".join(f"{n}={v}" for n, v in self.defines)
        return f"local {self.local[0]}x{self.local[1]}" + (f", {defs}" if defs else "")


def _pair(values: Sequence[int], what: str) -> tuple[int, int]:
    pair = tuple(int(v) for v in values)
    if len(pair) != 2 or min(pair) < 1:
        raise ValueError(f"{what} must be two positive integers, got {tuple(values)}")
    return pair[0], pair[1]


def declared_cl_launch(local: Sequence[int] | None = None, block: Sequence[int] | None = None,
                       defines: Mapping[str, int] | None = None,
                       local_mem: int = 0) -> Mapping[str, tuple[ClGeometry, ...]]:
    """A plugin's OpenCL kernel's launch: its one geometry, for every device type."""
    if local is None:
        raise ValueError("an OpenCL kernel needs local=(x, y), its work-group size")
    geometry = ClGeometry(tuple(sorted((str(k), v) for k, v in (defines or {}).items())),
                          _pair(local, "local"), _pair(block or local, "block"), local_mem)
    return MappingProxyType({"GPU": (geometry,), "CPU": (geometry,)})


def declared_cuda_launch(block: Sequence[int] = (16, 16), tile: Sequence[int] | None = None,
                         grid_x: str | None = None, smem: int = 0,
                         defines: Mapping[str, int | str] | None = None) -> CudaLaunch:
    """A plugin's CUDA kernel's launch: one step on the grid its block and tile give."""
    return CudaLaunch(block=tuple(int(b) for b in block),
                      tile=_pair(tile, "tile") if tile else None, grid_x=grid_x, smem=smem,
                      defines=tuple(sorted((defines or {}).items())))


def naive_geometry(lx: int, ly: int) -> ClGeometry:
    return ClGeometry((), (lx, ly), (lx, ly))


def tiled_geometry(ts: int) -> ClGeometry:
    return ClGeometry((("TS", ts),), (ts, ts), (ts, ts), 2 * ts * ts * 4)


def more_work_geometry(ts: int, wpt: int) -> ClGeometry:
    return ClGeometry((("TS", ts), ("WPT", wpt)), (ts, ts // wpt), (ts, ts), 2 * ts * ts * 4)


def regblock_geometry(bm: int, bn: int, bk: int, tm: int, tn: int, pad: int = 4,
                      vec: int = 0, stage: int = 1) -> ClGeometry:
    defines = (("BM", bm), ("BN", bn), ("BK", bk), ("TM", tm), ("TN", tn), ("PAD", pad),
               ("VEC", vec), ("STAGE", stage))
    local_mem = (2 * bk * (bm + pad) * 4 + 2 * bk * bn * 4) if stage else 0
    return ClGeometry(defines, (bn // tn, bm // tm), (bn, bm), local_mem)
