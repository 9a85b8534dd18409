"""Plans of the tensor-core rungs (cuda/25_tf32_mma.cu, cuda/26_fp32_accurate.cu, and the
Hopper rungs cuda/28_tf32_wgmma.cu, cuda/29_fp32_accurate_wgmma.cu).

A sample is: ``mm_25_pack`` on A and on B (each rounded to TF32; for the
FP32-accurate rungs 26 and 29 ``mm_26_split`` instead, three BF16 parts whose sum
is the operand exactly), written k-contiguous and zero-padded to whole tiles
into the workspace, the main kernel on 128 x 128 tiles, and, where K is cut
into slices, rung 21's ``mm_21_reduce``. The workspace holds, in order: the
slices' partial sums (``batch x slices x M x N``), then A's parts, then B's,
each start rounded up to 32 floats (128 bytes), then for the split two flag
words (``cuda/exact_split.cuh``).

Slices: only where the tiles leave SMs idle, as many as fill them once,
with at least ``MIN_SLICE_TILES`` K tiles each.

Rungs 28 and 29 (sm_90a) read the packed operands through tensor maps
(``mmsuite.launch.TensorMap``) in tiles of 128 x ``WGMMA_TILE_N`` with 384 threads.
Rung 28 packs as rung 25 does, and reads B in place (no B pack) where its rows are
whole 16-byte multiples (K % 4 == 0). Rung 29 splits as rung 26 does, into whole
64-k tiles.

Rungs 26 and 29 run rung 22's FP32 SIMT kernels (``cuda_dispatch.planners.plan_adaptive``) where K
is below ``ACCURATE_MIN_K`` or M or N below ``ACCURATE_MIN_MN``: there the
split's own error is larger than what chunked accumulation saves, and the
padded tensor tiles gain little.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .cuda_dispatch import planners
from .launch import TENSOR_MAP_BYTES, CudaPlan, CudaStep, DeviceFacts, TensorMap, TensorMaps

if TYPE_CHECKING:
    from .layout import GemmCall

TILE_MN = 128
TILE_K = 32
THREADS = 256
PACK_THREADS = 256
PACK_TILE = 32
SOURCE_26 = "cuda/26_fp32_accurate.cu"
PACK_ENTRY = "mm_25_pack"
SPLIT_ENTRY = "mm_26_split"
SPLIT_PARTS = 3  # rungs 26 and 29: the BF16 parts of each operand
SPLIT_TILE_K = 64  # their stages: 64 BF16 = 128 bytes, a row of the tiles (and the swizzle)
REDUCE_SOURCE = "cuda/21_splitk.cu"
REDUCE_ENTRY = "mm_21_reduce"
MIN_SLICE_TILES = 8  # K tiles of 32 per slice at least
MAX_SLICES = 64
ACCURATE_MIN_K = 512
ACCURATE_MIN_MN = 64
_ALIGN = 32  # floats
_INT32_MAX = 2**31 - 1
# Shared memory of the main kernels: stages x (A and B) x parts x 128 rows x 36 words.
_TILE_BYTES = TILE_MN * (TILE_K + 4) * 4
STAGES = {1: 3, 3: 2}  # TF32_STAGES and ACCURATE_STAGES in the sources
# The wgmma rungs (parts 1: rung 28, parts 3: rung 29): the sources' WG_BN / ACC_BN and
# WG_STAGES / ACC_STAGES defaults, and the target their source is compiled for.
WGMMA_ARCH = "sm_90a"
WGMMA_THREADS = 384
WGMMA_TILE_N = {1: 256, 3: 128}
WGMMA_STAGES = {1: 4, 3: 2}


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _align(x: int) -> int:
    return _ceil(x, _ALIGN) * _ALIGN


def _tile_k(parts: int) -> int:
    """K of a tile: ``SPLIT_TILE_K`` BF16 for the split (rungs 26 and 29), else ``TILE_K``."""
    return SPLIT_TILE_K if parts == SPLIT_PARTS else TILE_K


@dataclass(frozen=True)
class TensorPlan:
    """Sizes of one problem on the tensor tiles: padded sizes, slices and workspace offsets.
    ``parts`` is 1 (TF32 values in FP32) or ``SPLIT_PARTS`` (the BF16 split); the tile's K
    and the packed parts' type follow from it."""

    m: int
    n: int
    k: int
    batch: int
    parts: int
    slices: int
    kt_per_slice: int
    tile_n: int = TILE_MN
    b_packed: bool = True  # else B is read in place

    @property
    def split(self) -> bool:
        """Whether the operands are split into BF16 parts (rungs 26 and 29)."""
        return self.parts == SPLIT_PARTS

    @property
    def tile_k(self) -> int:
        return _tile_k(self.parts)

    @property
    def dtype(self) -> str:
        """Of the packed parts: FP32 (TF32 values) or BF16."""
        return "bfloat16" if self.split else "float32"

    @property
    def element_bytes(self) -> int:
        return TENSOR_MAP_BYTES[self.dtype]

    @property
    def mp(self) -> int:
        return _ceil(self.m, TILE_MN) * TILE_MN

    @property
    def np_(self) -> int:
        return _ceil(self.n, TILE_MN) * TILE_MN

    @property
    def kp(self) -> int:
        return _ceil(self.k, self.tile_k) * self.tile_k

    def part_elements(self, rows_p: int) -> int:
        """Elements of one packed part of an operand with ``rows_p`` padded rows."""
        return self.batch * rows_p * self.kp

    def part_floats(self, rows_p: int) -> int:
        """Floats (4-byte units) of the workspace one packed part takes."""
        return self.part_elements(rows_p) * self.element_bytes // 4

    @property
    def partials(self) -> int:
        return self.batch * self.slices * self.m * self.n if self.slices > 1 else 0

    @property
    def a_offset(self) -> int:
        return _align(self.partials)

    @property
    def b_offset(self) -> int:
        return self.a_offset + _align(self.parts * self.part_floats(self.mp))

    @property
    def flag_offset(self) -> int:
        """Where the split's two flag words sit (rungs 26 and 29), after the parts; for
        rungs 25 and 28, where the parts end."""
        if not self.b_packed:
            return self.b_offset
        return self.b_offset + _align(self.parts * self.part_floats(self.np_))

    @property
    def workspace(self) -> int:
        return self.flag_offset + (_ALIGN if self.split else 0)

    @property
    def smem(self) -> int:
        return STAGES[self.parts] * 2 * self.parts * _TILE_BYTES

    @property
    def wgmma_smem(self) -> int:
        """The wgmma kernels' stages of A and B tiles, and 1024 bytes to align them."""
        stage = self.parts * (TILE_MN + self.tile_n) * self.tile_k * self.element_bytes
        return WGMMA_STAGES[self.parts] * stage + 1024


def slices_for(m: int, n: int, k: int, batch: int, sm_count: int,
               tile_n: int = TILE_MN, tile_k: int = TILE_K) -> tuple[int, int]:
    """(slices, K tiles per slice): one slice unless the tiles leave SMs idle; a slice is
    at least ``MIN_SLICE_TILES`` x ``TILE_K`` deep whatever the tile."""
    k_tiles = _ceil(k, tile_k)
    tiles = _ceil(m, TILE_MN) * _ceil(n, tile_n) * batch
    slices = 1
    if tiles < sm_count:
        min_tiles = max(1, MIN_SLICE_TILES * TILE_K // tile_k)
        slices = max(1, min(sm_count // tiles, k_tiles // min_tiles, MAX_SLICES))
    per = _ceil(k_tiles, slices)
    return _ceil(k_tiles, per), per


def tensor_plan(m: int, n: int, k: int, batch: int, parts: int, sm_count: int,
                tile_n: int = TILE_MN, b_packed: bool = True) -> TensorPlan:
    slices, per = slices_for(m, n, k, batch, sm_count, tile_n, _tile_k(parts))
    plan = TensorPlan(m, n, k, batch, parts, slices, per, tile_n, b_packed)
    # The kernels take offsets and part strides as 32-bit integers.
    if max(plan.workspace, plan.part_elements(max(plan.mp, plan.np_))) > _INT32_MAX:
        raise ValueError(f"{batch}x{m}x{n}x{k} needs a workspace of {plan.workspace} floats, "
                         f"more than the tensor-core rungs address ({_INT32_MAX})")
    return plan


def _operand(plan: TensorPlan, operand: str) -> tuple[int, int, int, int, int]:
    """(rows, padded rows, workspace offset, row stride, k stride) of A or B. Column-major:
    A(m, k) at m + k * M; B(k, n) at k + n * K, read as rows n."""
    if operand == "a":
        return plan.m, plan.mp, plan.a_offset, 1, plan.m
    return plan.n, plan.np_, plan.b_offset, plan.k, 1


def _pack(plan: TensorPlan, operand: str, arch: str = "") -> CudaStep:
    """mm_25_pack of A or B into the workspace; for the split (rungs 26 and 29) mm_26_split,
    into its three BF16 parts, which raises the flag where a split is inexact. Both are the
    rung's own source (mm_26_split through cuda/exact_split.cuh)."""
    rows, rows_p, offset, r_stride, k_stride = _operand(plan, operand)
    grid = (plan.kp // PACK_TILE, rows_p // PACK_TILE, plan.batch)
    shape = (rows, plan.k, rows_p, plan.kp, r_stride, k_stride)
    if plan.split:
        entry = SPLIT_ENTRY
        args: tuple = (operand, "work", offset, plan.part_elements(rows_p), *shape,
                       plan.flag_offset)
    else:
        entry, args = PACK_ENTRY, (operand, "work", offset, *shape)
    return CudaStep(grid, (PACK_THREADS,), entry, None, arch=arch, args=args)


def _check_grid(grid: tuple[int, int, int]) -> None:
    if grid[1] > 65535 or grid[2] > 65535:
        raise ValueError(f"grid {grid} exceeds CUDA's y/z limit of 65535")


def _reduce(plan: TensorPlan) -> list[CudaStep]:
    """Rung 21's reduction of the slices' partial sums, where K is sliced."""
    if plan.slices == 1:
        return []
    reduce_grid = min(_ceil(plan.batch * plan.m * plan.n, 4 * 256), 65535)
    return [CudaStep((reduce_grid, 1, 1), (256,), REDUCE_ENTRY, REDUCE_SOURCE,
                     args=("m", "n", "batch", "alpha", "work", "beta", "c", plan.slices))]


def _steps(plan: TensorPlan) -> tuple[CudaStep, ...]:
    """The packs (rung 26: the splits), the main kernel and the reduction; the main kernel
    and the packs are the rung's own source (``source``/``entry`` None), the reduction is
    rung 21's."""
    grid = (plan.mp // TILE_MN, plan.np_ // TILE_MN, plan.batch * plan.slices)
    _check_grid(grid)
    steps = [_pack(plan, "a"), _pack(plan, "b")]
    if plan.split:  # A and B themselves too, for the FP32 SIMT path
        args: tuple = ("m", "n", "k", plan.kp, "alpha", "beta", "a", "b", "c", "work",
                       plan.a_offset, plan.b_offset, plan.mp, plan.np_, plan.kt_per_slice,
                       plan.slices, plan.flag_offset)
    else:
        args = ("m", "n", plan.kp, "alpha", "beta", "c", "work", plan.a_offset, plan.b_offset,
                plan.mp, plan.np_, plan.kt_per_slice, plan.slices)
    steps.append(CudaStep(grid, (THREADS,), None, None, smem=plan.smem, args=args))
    return tuple(steps + _reduce(plan))


def _wgmma_maps(plan: TensorPlan) -> TensorMaps:
    """A's parts, then B's: packed k-contiguous in the workspace, or B in place."""
    a_part, b_part = plan.part_floats(plan.mp), plan.part_floats(plan.np_)
    maps = [TensorMap("work", plan.a_offset + p * a_part, plan.kp, plan.mp, plan.batch, plan.kp,
                      plan.mp * plan.kp, TILE_MN, plan.tile_k, plan.dtype)
            for p in range(plan.parts)]
    if plan.b_packed:
        maps += [TensorMap("work", plan.b_offset + p * b_part, plan.kp, plan.np_, plan.batch,
                           plan.kp, plan.np_ * plan.kp, plan.tile_n, plan.tile_k, plan.dtype)
                 for p in range(plan.parts)]
    else:
        maps.append(TensorMap("b", 0, plan.k, plan.n, plan.batch, plan.k, plan.n * plan.k,
                              plan.tile_n))
    return TensorMaps(tuple(maps))


def _wgmma_steps(plan: TensorPlan) -> tuple[CudaStep, ...]:
    """Rungs 28 and 29: the packs (rung 29: the splits), the wgmma kernel (sm_90a) on tensor
    maps, the reduction."""
    steps = [_pack(plan, "a", WGMMA_ARCH)] + ([_pack(plan, "b", WGMMA_ARCH)]
                                              if plan.b_packed else [])
    grid = (plan.mp // TILE_MN, _ceil(plan.n, plan.tile_n), plan.batch * plan.slices)
    _check_grid(grid)
    if plan.split:  # A and B themselves too, for the FP32 SIMT path
        args: tuple = (_wgmma_maps(plan), "m", "n", "k", plan.kp, "alpha", "beta", "a", "b",
                       "c", "work", plan.kt_per_slice, plan.slices, plan.flag_offset)
    else:
        args = (_wgmma_maps(plan), "m", "n", plan.kp, "alpha", "beta", "c", "work",
                plan.kt_per_slice, plan.slices)
    steps.append(CudaStep(grid, (WGMMA_THREADS,), None, None, smem=plan.wgmma_smem,
                          arch=WGMMA_ARCH, args=args))
    return tuple(steps + _reduce(plan))


def _info(plan: TensorPlan, path: str) -> dict:
    return {"tensorcore": {"path": path, "slices": plan.slices, "parts": plan.parts,
                           "part_type": plan.dtype,
                           "padded": [plan.mp, plan.np_, plan.kp],
                           "b": "packed" if plan.b_packed else "in place"}}


def plan_tf32(call: GemmCall, device: DeviceFacts, override: object = None) -> CudaPlan:
    """Rung 25: TF32 operands packed, the TF32 tensor kernel, the reduction when sliced.
    (``override``, the dispatcher's forced candidate, means nothing here.)"""
    plan = tensor_plan(call.m, call.n, call.k, call.batch, 1, device.sms)
    return CudaPlan(_steps(plan), plan.workspace, _info(plan, "tensor"))


def uses_tensor_cores(m: int, n: int, k: int) -> bool:
    """Whether rung 26 runs its tensor path on this shape (else rung 22's FP32 kernels)."""
    return k >= ACCURATE_MIN_K and min(m, n) >= ACCURATE_MIN_MN


def plan_accurate(call: GemmCall, device: DeviceFacts, override: object = None, *,
                  force_tensor: bool = False) -> CudaPlan:
    """Rung 26: the exact three-part BF16 split, six products with FP32 accumulation outside
    the tensor cores; rung 22's FP32 SIMT plan where the shape gains nothing from them."""
    if not force_tensor and not uses_tensor_cores(call.m, call.n, call.k):
        simt = planners.plan_adaptive(call, device)
        return CudaPlan(simt.steps, simt.workspace,
                        {**dict(simt.info), "tensorcore": {"path": "fp32 simt (rung 22)"}})
    plan = tensor_plan(call.m, call.n, call.k, call.batch, SPLIT_PARTS, device.sms)
    return CudaPlan(_steps(plan), plan.workspace, _info(plan, "tensor"))


def plan_accurate_tensor(call: GemmCall, device: DeviceFacts, override: object = None
                         ) -> CudaPlan:
    """Rung 26's tensor path on every shape (for tests of its edges)."""
    return plan_accurate(call, device, override, force_tensor=True)


def plan_tf32_wgmma(call: GemmCall, device: DeviceFacts, override: object = None) -> CudaPlan:
    """Rung 28: A packed (B too where K % 4 != 0), the wgmma kernel, the reduction when
    sliced."""
    plan = tensor_plan(call.m, call.n, call.k, call.batch, 1, device.sms, WGMMA_TILE_N[1],
                       b_packed=call.k % 4 != 0)
    return CudaPlan(_wgmma_steps(plan), plan.workspace, _info(plan, "wgmma"))


def plan_accurate_wgmma(call: GemmCall, device: DeviceFacts, override: object = None, *,
                        force_tensor: bool = False) -> CudaPlan:
    """Rung 29: the exact three-part BF16 split and chunked FP32 accumulation on the wgmma
    kernel; rung 22's FP32 SIMT plan where the shape gains nothing from the tensor cores."""
    if not force_tensor and not uses_tensor_cores(call.m, call.n, call.k):
        simt = planners.plan_adaptive(call, device)
        return CudaPlan(simt.steps, simt.workspace,
                        {**dict(simt.info), "tensorcore": {"path": "fp32 simt (rung 22)"}})
    plan = tensor_plan(call.m, call.n, call.k, call.batch, SPLIT_PARTS, device.sms,
                       WGMMA_TILE_N[SPLIT_PARTS])
    return CudaPlan(_wgmma_steps(plan), plan.workspace, _info(plan, "wgmma"))


def plan_accurate_wgmma_tensor(call: GemmCall, device: DeviceFacts, override: object = None
                               ) -> CudaPlan:
    """Rung 29's wgmma path on every shape (for tests of its edges)."""
    return plan_accurate_wgmma(call, device, override, force_tensor=True)
