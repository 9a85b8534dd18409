"""The one catalogue of kernels: every rung of every backend, in ladder order, then the
kernels that plugins declare (``mmsuite.plugins``).

A kernel is data plus a source file (or, for a plugin, a Python callable). Backends read
their entries from here; the CLI, the tests and the asv suite enumerate them from here.
Nothing else lists kernels.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from . import tensorcore
from .backend_table import BACKENDS
from .cuda_dispatch import planners
from .launch import (
    ClGeometry,
    CudaLaunch,
    more_work_geometry,
    naive_geometry,
    regblock_geometry,
    tiled_geometry,
)

ANY_SIZE = "any M, N, K >= 1; any batch; row and col layouts"

#: Precision classes. ``fp32``: FP32 inputs, FP32 accumulation (the SIMT ladders and the
#: FP32 libraries). ``tf32``: tensor cores on inputs rounded to TF32's 10 mantissa bits, a
#: class of its own with a looser tolerance and the tensor peak. ``fp32-accurate``: tensor
#: cores on error-corrected splits that must meet the FP32 tolerance.
FP32, TF32, FP32_ACCURATE = "fp32", "tf32", "fp32-accurate"
PRECISIONS = (FP32, TF32, FP32_ACCURATE)


@dataclass(frozen=True)
class Kernel:
    """One rung of a ladder.

    ``layout`` is the layout the kernel is written for; the adapter serves the
    other one by swapping operands. ``launch`` is the backend's typed launch
    data (``mmsuite.launch.CudaLaunch`` for CUDA rungs; OpenCL geometries per
    device type), read by that backend only.
    """

    id: str
    backend: str
    rung: int
    parent: str | None
    adds: str
    origin: str  # the ladder a rung comes from: its source document ("001"), beyond, reference
    source: str | None = None
    entry: str | None = None
    layout: str = "row"
    constraints: str = ANY_SIZE
    reference: bool = False
    launch: Mapping | CudaLaunch = field(default_factory=lambda: MappingProxyType({}))
    precision: str = FP32
    threaded: bool = False  # runs on several host threads (OpenMP, or the BLAS's own)
    #: Where a plugin kernel was declared (its file or entry point); "" for the built-ins.
    plugin: str = ""
    #: A plugin's Python callable ``f(alpha, A, B, beta, C)`` updating C in place, launched
    #: instead of a source: numpy arrays on the host, CuPy arrays for a CUDA kernel.
    function: Callable[..., object] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"{self.id}: precision must be one of {PRECISIONS}, "
                             f"got {self.precision!r}")

    @property
    def tensor_cores(self) -> bool:
        """Whether the kernel's FLOPs run on tensor cores (its % peak is the tensor peak's)."""
        return self.precision in (TF32, FP32_ACCURATE)

    @property
    def name(self) -> str:
        return self.id.split(".", 1)[1]

    @property
    def available(self) -> bool:
        return self.reason == ""

    @property
    def reason(self) -> str:
        """Why the kernel cannot run here; empty when it can. Never raises."""
        from .backends import unavailable_reason

        return unavailable_reason(self)


def _k(id: str, rung: int, parent: str | None, adds: str, origin: str, **kw) -> Kernel:
    backend = id.split(".", 1)[0]
    if isinstance(kw.get("launch"), Mapping):
        kw["launch"] = MappingProxyType(dict(kw["launch"]))
    return Kernel(id=id, backend=backend, rung=rung, parent=parent, adds=adds, origin=origin, **kw)


def _c(id: str, rung: int, parent: str | None, adds: str, origin: str, source: str,
       threaded: bool = False) -> Kernel:
    return _k(id, rung, parent, adds, origin, source=f"csrc/{source}.c", entry=f"mm_{id[4:]}",
              threaded=threaded)


# ----------------------------------------------------------------------- CPU
CPU = [
    _k("cpu.blas", 0, None, "reference: numpy.matmul (OpenBLAS sgemm)", "reference",
       reference=True, threaded=True),
    _c("cpu.seq_naive", 1, None, "textbook i-j-k loop, dot product along k", "001",
       "01_seq_naive"),
    _c("cpu.seq_ikj", 2, "cpu.seq_naive", "loop interchange: stride-1 inner loop", "002",
       "02_seq_ikj"),
    _c("cpu.seq_tiled", 3, "cpu.seq_ikj", "cache blocking of i, j and k", "002",
       "03_seq_tiled"),
    _c("cpu.omp_naive", 4, "cpu.seq_naive", "OpenMP parallel for schedule(dynamic,1) collapse(2)",
       "001", "04_omp_naive", threaded=True),
    _c("cpu.omp_tiled", 5, "cpu.seq_tiled", "cache blocking + OpenMP over tiles", "002",
       "05_omp_tiled", threaded=True),
    _c("cpu.omp_packed", 6, "cpu.omp_tiled",
       "packed panels + register-blocked micro-kernel the compiler vectorises", "beyond",
       "06_omp_packed", threaded=True),
    _c("cpu.omp_blis", 7, "cpu.omp_packed",
       "intrinsics micro-kernel (AVX-512 14x32, AVX2 6x16), C prefetched, exact-size edges, "
       "blocking from the cache sizes, balanced threads", "beyond", "07_omp_blis",
       threaded=True),
]

# -------------------------------------------------------------------- OpenCL
def _cl(id: str, rung: int, parent: str | None, adds: str, origin: str, source: str,
        gpu: list[ClGeometry], cpu: list[ClGeometry]) -> Kernel:
    """An OpenCL rung; its launch holds geometries per device type, best first: the
    adapter uses the first the device accepts."""
    return _k(id, rung, parent, adds, origin, source=f"cl/{source}.cl", entry=f"mm_{id[7:]}",
              launch={"GPU": tuple(gpu), "CPU": tuple(cpu)})


# GPU geometries were tuned on an H100 through NVIDIA's driver, CPU ones on PoCL (x86-64).
OPENCL = [
    _k("opencl.clblast", 0, None, "reference: CLBlast sgemm (pyclblast)", "reference",
       reference=True),
    _cl("opencl.naive", 1, None, "one work-item per element of C", "001", "01_naive",
        gpu=[naive_geometry(32, 8), naive_geometry(16, 16), naive_geometry(8, 8),
             naive_geometry(1, 1)],
        cpu=[naive_geometry(64, 4), naive_geometry(16, 16), naive_geometry(8, 8),
             naive_geometry(1, 1)]),
    _cl("opencl.tiled", 2, "opencl.naive", "square tiles of A and B staged in local memory",
        "001", "02_tiled",
        gpu=[tiled_geometry(32), tiled_geometry(16), tiled_geometry(8), tiled_geometry(4)],
        cpu=[tiled_geometry(8), tiled_geometry(16), tiled_geometry(4)]),
    _cl("opencl.more_work", 3, "opencl.tiled",
        "each work-item computes several elements of a column strip", "beyond", "03_more_work",
        gpu=[more_work_geometry(32, 8), more_work_geometry(32, 4), more_work_geometry(16, 4),
             more_work_geometry(8, 2)],
        cpu=[more_work_geometry(16, 4), more_work_geometry(32, 8), more_work_geometry(8, 2)]),
    # H100, 4096^3: 64x128 block 45.0 TFLOP/s (167 registers, 128 work-items);
    # 128x128x16 39.4; 128x128x8 39.1; 64x64x16 with 4x4 per work-item 32.6.
    # x86-64 (2 cores, AVX2), PoCL 3.0, 1024^3: unstaged 32x64 block, 4x8 per
    # work-item 40 GFLOP/s; staged 64x64x16 with 4x4 per work-item 16.
    _cl("opencl.regblock_vec", 4, "opencl.more_work",
        "2D register blocking with float4 vector loads", "beyond", "04_regblock_vec",
        gpu=[regblock_geometry(64, 128, 16, 8, 8), regblock_geometry(128, 128, 16, 8, 8),
             regblock_geometry(128, 128, 8, 8, 8), regblock_geometry(64, 64, 16, 4, 4),
             regblock_geometry(32, 32, 8, 4, 4)],
        cpu=[regblock_geometry(32, 64, 8, 4, 8, stage=0),
             regblock_geometry(32, 32, 8, 4, 8, stage=0),
             regblock_geometry(16, 16, 8, 4, 4, stage=0)]),
]

# ---------------------------------------------------------------------- CUDA
# Strip kernels put the columns of C on grid y (at most 65535 blocks), as seed 002 does.
STRIP_SIZES = ("any M, K >= 1; N up to 65535 x the columns a block covers; any batch; "
               "row and col layouts (for row-major problems the limit applies to M)")


def _cu(id: str, rung: int, parent: str | None, adds: str, origin: str, source: str,
        launch: CudaLaunch | Mapping | None = None, **kw) -> Kernel:
    """A CUDA rung; ``launch`` is a ``CudaLaunch`` or the keyword arguments of one."""
    kw.setdefault("entry", f"mm_{id[5:]}")
    if not isinstance(launch, CudaLaunch):
        launch = CudaLaunch(**dict(launch or {}))
    return _k(id, rung, parent, adds, origin, source=f"cuda/{source}.cu", launch=launch, **kw)


def _strip(id: str, rung: int, parent: str, adds: str, source: str, width: int,
           tile: tuple[int, int] | None = None, defines: dict | None = None, **kw) -> Kernel:
    """A seed-002 strip rung: column-major, ``width`` threads per block along the rows of C."""
    launch = {"block": (width, 1), "tile": tile or (width, 1), "grid_x": "rows",
              "defines": {"WIDTH": width, **(defines or {})}}
    return _cu(id, rung, parent, adds, "002", source, layout="col", constraints=STRIP_SIZES,
               launch=launch, **kw)


def _async_launch(bk: int, stages: int) -> dict:
    """Launch of the cp.async pipeline rung: 128x128 tiles, ``stages`` x (A + padded B) tiles."""
    smem = 4 * stages * (bk * 128 + 128 * (bk + 4))
    return {"block": (256, 1), "tile": (128, 128), "grid_x": "rows", "smem": smem,
            "defines": {"BK": bk, "STAGES": stages}}


CUDA = [
    _k("cuda.cublas", 0, None, "reference: cuBLAS sgemm via cupy.matmul, TF32 off", "reference",
       reference=True),
    _k("cuda.cublas_tf32", 0, None,
       "reference: cuBLAS sgemm with its TF32 tensor-op math mode (cublasSetMathMode)",
       "reference", reference=True, precision=TF32),
    # Seed 004: column-major ladder, eleven rungs (grid.x walks the rows of C).
    _cu("cuda.01_naive", 1, None, "one thread per element of C", "004", "01_naive",
        layout="col", launch={"block": (32, 32), "tile": (32, 32), "grid_x": "rows"}),
    _cu("cuda.02_smem_tiles", 2, "cuda.01_naive", "32x32x32 tiles staged in shared memory",
        "004", "02_smem_tiles", layout="col",
        launch={"block": (32, 32), "tile": (32, 32), "grid_x": "rows"}),
    _cu("cuda.03_hoisted_index", 3, "cuda.02_smem_tiles",
        "thread index hoisted, 1D thread block", "004", "03_hoisted_index", layout="col",
        launch={"block": (1024, 1), "tile": (32, 32), "grid_x": "rows"}),
    _cu("cuda.04_no_bank_conflicts", 4, "cuda.03_hoisted_index",
        "A tile stored k-major in shared memory: no bank conflicts", "004",
        "04_no_bank_conflicts", layout="col",
        launch={"block": (1024, 1), "tile": (32, 32), "grid_x": "rows"}),
    _cu("cuda.05_micro_4x1", 5, "cuda.04_no_bank_conflicts", "4x1 micro-kernel per thread",
        "004", "05_micro_4x1", layout="col",
        launch={"block": (256, 1), "tile": (32, 32), "grid_x": "rows"}),
    _cu("cuda.06_float4", 6, "cuda.05_micro_4x1", "float4 global and shared loads and stores",
        "004", "06_float4", layout="col",
        launch={"block": (256, 1), "tile": (32, 32), "grid_x": "rows"}),
    _cu("cuda.07_blocktile_2d", 7, "cuda.06_float4", "64x64x16 block, 4x4 outputs per thread",
        "004", "07_blocktile_2d", layout="col",
        launch={"block": (256, 1), "tile": (64, 64), "grid_x": "rows"}),
    _cu("cuda.08_blocktile_128", 8, "cuda.07_blocktile_2d",
        "128x128x8 block, 8x8 outputs per thread", "004", "08_blocktile_128", layout="col",
        launch={"block": (256, 1), "tile": (128, 128), "grid_x": "rows"}),
    _cu("cuda.09_warptile", 9, "cuda.08_blocktile_128",
        "warp tiling: 64x32 warp tiles, conflict-free shared loads", "004", "09_warptile",
        layout="col", launch={"block": (256, 1), "tile": (128, 128), "grid_x": "rows"}),
    _cu("cuda.10_prefetch", 10, "cuda.09_warptile",
        "next tile prefetched into registers during compute", "004", "10_prefetch",
        layout="col", launch={"block": (256, 1), "tile": (128, 128), "grid_x": "rows"}),
    _cu("cuda.11_double_buffer", 11, "cuda.10_prefetch",
        "double-buffered shared memory: one barrier per k-step", "004", "11_double_buffer",
        layout="col", launch={"block": (256, 1), "tile": (128, 128), "grid_x": "rows"}),
    # Seed 000.
    _cu("cuda.12_tiled16", 12, "cuda.01_naive", "16x16 shared-memory tiles (row-major)", "000",
        "12_tiled16", launch={"block": (16, 16), "tile": (16, 16), "grid_x": "cols"}),
    # Seed 002: the strip-mined family, column-major like the seed's loop nest.
    _strip("cuda.13_strip32", 13, "cuda.01_naive",
           "one output per thread along a 32-row strip, one column per block", "13_strip", 32,
           entry="mm_strip"),
    _strip("cuda.13_strip64", 13, "cuda.13_strip32", "64-row strips: two warps per block",
           "13_strip", 64, entry="mm_strip"),
    _strip("cuda.13_strip128", 13, "cuda.13_strip64", "128-row strips: four warps per block",
           "13_strip", 128, entry="mm_strip"),
    _strip("cuda.14_strip_smem", 14, "cuda.13_strip64",
           "right operand's column strip cached in shared memory (64 wide)", "14_strip_smem", 64),
    _strip("cuda.15_strip_unroll_i", 15, "cuda.14_strip_smem",
           "i loop unrolled: two rows per thread, 128 rows per 64-thread block",
           "15_strip_unroll_i", 64, tile=(128, 1), defines={"UNROLL_I": 2}),
    _strip("cuda.16_strip_unroll_j2", 16, "cuda.14_strip_smem",
           "j unrolled by 2 (two partial sums share each A load), k unrolled by 4, 128 wide",
           "16_strip_unroll_j", 128, tile=(128, 2), defines={"UNROLL_J": 2},
           entry="mm_strip_unroll_j"),
    _strip("cuda.16_strip_unroll_j4", 16, "cuda.16_strip_unroll_j2",
           "j unrolled by 4 (four partial sums), k unrolled by 4, 128 wide",
           "16_strip_unroll_j", 128, tile=(128, 4), defines={"UNROLL_J": 4},
           entry="mm_strip_unroll_j"),
    _cu("cuda.17_strip_tiled16", 17, "cuda.16_strip_unroll_j4",
        "16x16 tiles of both operands in shared memory, one output per thread", "002",
        "17_strip_tiled16", layout="col",
        launch={"block": (16, 16), "tile": (16, 16), "grid_x": "rows"}),
    # Seed 003: batched kernel.
    _cu("cuda.18_batched_tmtn", 18, "cuda.07_blocktile_2d",
        "batched fast path: 8x8 outputs per thread, 128x128x16 shared tiles, float4 loads",
        "003", "18_batched_tmtn",
        launch={"block": (256, 1), "tile": (128, 128), "grid_x": "cols",
                "defines": {"PREFETCH": 0}}),
    _cu("cuda.18_batched_prefetch", 18, "cuda.18_batched_tmtn",
        "next k-tile's global loads in flight in registers during the current tile's math",
        "003", "18_batched_tmtn", entry="mm_18_batched_tmtn",
        launch={"block": (256, 1), "tile": (128, 128), "grid_x": "cols",
                "defines": {"PREFETCH": 1}}),
    # Beyond the seeds: closing on cuBLAS on Hopper (column-major, like seed 004).
    _cu("cuda.19_async_pipeline", 19, "cuda.11_double_buffer",
        "cp.async multi-stage pipeline (3 stages, 128x128x16), zero-fill edges", "beyond",
        "19_async_pipeline", layout="col", launch=_async_launch(bk=16, stages=3)),
    _cu("cuda.20_tuned", 20, "cuda.10_prefetch",
        "rung 10 tuned for Hopper: K step 16, 32x64 warp tiles with 4x8 lanes", "beyond",
        "20_tuned", layout="col",
        launch={"block": (256, 1), "tile": (128, 128), "grid_x": "rows"}),
    # Beyond rung 20: shapes other than big squares. Rung 21's source holds the kernels,
    # with the tile shape as -D defines (rung 22's file includes it); the planners of
    # mmsuite.cuda_dispatch plan each problem's launches.
    _cu("cuda.21_splitk", 21, "cuda.20_tuned",
        "split-K: slices of K summed into a workspace, then a deterministic reduction kernel "
        "(128x128x8 tiles)", "beyond", "21_splitk", layout="col",
        launch={"planner": planners.plan_splitk}),
    _cu("cuda.22_adaptive", 22, "cuda.21_splitk",
        "plan per problem among rungs 21, 23 and 24's kernels: a cost model fitted to the "
        "device, or its tuning file (mmsuite tune)", "beyond", "22_adaptive",
        entry="mm_21_splitk", layout="col", launch={"planner": planners.plan_adaptive}),
    _cu("cuda.23_streamk", 23, "cuda.21_splitk",
        "stream-K: SMs x resident blocks share the MAC-loop iterations of the tiles that "
        "would leave a wave partly empty, then a deterministic fix-up kernel", "beyond",
        "23_streamk", layout="col", launch={"planner": planners.plan_streamk}),
    _cu("cuda.24_gemv", 24, "cuda.21_splitk",
        "min(M, N) <= 16: the big operand streamed once in 16-byte loads, the skinny one in "
        "shared memory, K split over blocks when the grid is small, a short M in blocks of "
        "32 rows", "beyond", "24_gemv",
        entry="mm_24_gemv_n", layout="col", launch={"planner": planners.plan_gemv}),
    _cu("cuda.27_shortk", 27, "cuda.21_splitk",
        "short K: each block stages its rows of A and columns of B once and stores whole "
        "columns of C in float4s, no K-loop pipeline", "beyond", "27_shortk", layout="col",
        launch={"planner": planners.plan_shortk}),
    _cu("cuda.30_dot", 30, "cuda.24_gemv",
        "few outputs, long K: a block's 256 threads walk K together for a 4x4 tile of C, "
        "shuffle and shared-memory sums, K slices added by the last block in the same launch",
        "beyond", "30_dot", layout="col", launch={"planner": planners.plan_dot}),
    # Tensor cores (mmsuite/tensorcore.py plans the operand packing, slices and reduction).
    _cu("cuda.25_tf32_mma", 25, "cuda.22_adaptive",
        "TF32 tensor cores: mma.sync m16n8k8 on operands rounded to TF32 and packed into "
        "tiles, 128x128x32 blocks, 3-stage cp.async pipeline, two blocks per SM", "beyond",
        "25_tf32_mma", layout="col", precision=TF32,
        launch={"planner": tensorcore.plan_tf32}),
    _cu("cuda.26_fp32_accurate", 26, "cuda.25_tf32_mma",
        "FP32 accuracy on BF16 tensor cores: an exact three-part BF16 split, six mma.sync "
        "products, each 32-k chunk of the main one accumulated outside the tensor core in "
        "FP32; FP32 SIMT where an operand is too small to split, rung 22 on short K",
        "beyond", "26_fp32_accurate", layout="col", precision=FP32_ACCURATE,
        launch={"planner": tensorcore.plan_accurate}),
    # Hopper (sm_90a): wgmma on tiles the bulk tensor copy engine loads, warp-specialised.
    _cu("cuda.28_tf32_wgmma", 28, "cuda.25_tf32_mma",
        "TF32 on Hopper: wgmma.mma_async m64n256k8 from 128-byte-swizzled shared tiles that "
        "TMA loads (B in place), a producer and two consumer warpgroups, 4 mbarrier stages",
        "beyond", "28_tf32_wgmma", layout="col", precision=TF32,
        launch={"planner": tensorcore.plan_tf32_wgmma, "arch": tensorcore.WGMMA_ARCH}),
    _cu("cuda.29_fp32_accurate_wgmma", 29, "cuda.26_fp32_accurate",
        "rung 26's exact BF16 split and six products on rung 28's wgmma pipeline (TMA, "
        "a producer and two consumer warpgroups), each 32-k chunk of the main product "
        "added in FP32 outside the tensor core",
        "beyond", "29_fp32_accurate_wgmma", layout="col", precision=FP32_ACCURATE,
        launch={"planner": tensorcore.plan_accurate_wgmma, "arch": tensorcore.WGMMA_ARCH}),
]

BUILT_IN: tuple[Kernel, ...] = tuple(CPU + OPENCL + CUDA)
#: The kernels of this process by id: the built-ins, then each plugin's as it is added. A
#: read-only view; ``add`` is the one way in.
_BY_ID: dict[str, Kernel] = {k.id: k for k in BUILT_IN}
BY_ID: Mapping[str, Kernel] = MappingProxyType(_BY_ID)
BASELINE_ID = "cpu.seq_naive"

assert len(_BY_ID) == len(BUILT_IN), "duplicate kernel id in the catalogue"
assert all(k.parent is None or k.parent in BY_ID for k in BUILT_IN), "unknown parent rung"
assert all(k.backend in BACKENDS for k in BUILT_IN), "a kernel of a backend not in BACKENDS"
assert all(BY_ID[b.reference].reference and BY_ID[b.reference].backend == b.name
           and BY_ID[b.reference].precision == FP32 for b in BACKENDS.values()), \
    "a backend's reference is not its FP32 reference row"


class CatalogueError(ValueError):
    """Kernels that cannot join the catalogue: an id taken, a parent unknown, a backend
    unknown. The message names each."""


def add(new: Iterable[Kernel]) -> None:
    """Add plugin kernels, all or none: ids new and unique, parents known (a built-in, an
    earlier plugin's or one of ``new``), backends in the table."""
    new = list(new)
    ids = [k.id for k in new]
    taken = sorted({i for i in ids if i in _BY_ID or ids.count(i) > 1})
    if taken:
        raise CatalogueError(f"kernel id {', '.join(taken)} is taken"
                             + "".join(f" (by {_BY_ID[i].plugin or 'mmsuite'})"
                                       for i in taken[:1] if i in _BY_ID))
    known = set(_BY_ID) | set(ids)
    for kernel in new:
        if kernel.parent is not None and kernel.parent not in known:
            raise CatalogueError(f"{kernel.id}: unknown parent {kernel.parent!r}; a parent "
                                 "is any kernel id `mmsuite list` shows")
        if kernel.backend not in BACKENDS:
            raise CatalogueError(f"{kernel.id}: unknown backend {kernel.backend!r}")
        if kernel.reference:
            raise CatalogueError(f"{kernel.id}: a plugin kernel cannot be a reference row")
    _BY_ID.update((k.id, k) for k in new)


def kernels(backend: str | None = None) -> list[Kernel]:
    """Every kernel of the catalogue (of one backend if given): the built-ins in ladder
    order, then plugin kernels in the order they were added."""
    return [k for k in _BY_ID.values() if backend is None or k.backend == backend]


def get(kernel_id: str) -> Kernel:
    """The kernel with this id; an unknown id raises KeyError naming close matches."""
    try:
        return BY_ID[kernel_id]
    except KeyError:
        close = difflib.get_close_matches(kernel_id, list(BY_ID), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see `mmsuite list`"
        raise KeyError(f"unknown kernel {kernel_id!r}{hint}") from None


def ladder_rank() -> dict[str, int]:
    """Each kernel's place in the catalogue, for sorting rows in ladder order."""
    return {kernel_id: i for i, kernel_id in enumerate(_BY_ID)}


def reference_of(backend: str, precision: str = FP32) -> Kernel | None:
    """The reference (vendor library) row of a backend in a precision class, if it has one."""
    if precision == FP32 and backend in BACKENDS:
        return BY_ID[BACKENDS[backend].reference]
    return next((k for k in BUILT_IN if k.backend == backend and k.reference
                 and k.precision == precision), None)
