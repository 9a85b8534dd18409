"""Plans of the tensor-core rungs (cuda/25_tf32_mma.cu, cuda/26_fp32_accurate.cu).

A sample is: ``mm_25_pack`` on A and on B (each rounded to TF32, or split into
big and small TF32 parts for rung 26, written k-contiguous and zero-padded to
whole tiles into the workspace), the main kernel on 128 x 128 tiles, and,
where K is cut into slices, rung 21's ``mm_21_reduce``. The workspace holds,
in order: the slices' partial sums (``batch x slices x M x N``), then A's
parts, then B's, each start rounded up to 32 floats (128 bytes).

Slices: only where the tiles leave SMs idle, as many as fill them once,
with at least ``MIN_SLICE_TILES`` K tiles each.

Rung 26 runs rung 22's FP32 SIMT kernels (``cuda_dispatch.planners.plan_adaptive``) where K
is below ``ACCURATE_MIN_K`` or M or N below ``ACCURATE_MIN_MN``: there the
split's own error is larger than what chunked accumulation saves, and the
padded tensor tiles gain little.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .cuda_dispatch import planners
from .cuda_dispatch.device import DeviceFacts
from .launch import CudaPlan, CudaStep

if TYPE_CHECKING:
    from .layout import GemmCall

TILE_MN = 128
TILE_K = 32
THREADS = 256
PACK_THREADS = 256
PACK_TILE = 32
SOURCE_25 = "cuda/25_tf32_mma.cu"
PACK_ENTRY = "mm_25_pack"
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
STAGES = {1: 3, 2: 3}  # TF32_STAGES and ACCURATE_STAGES in the sources


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _align(x: int) -> int:
    return _ceil(x, _ALIGN) * _ALIGN


@dataclass(frozen=True)
class TensorPlan:
    """Sizes of one problem on the tensor tiles: padded sizes, slices and workspace offsets."""

    m: int
    n: int
    k: int
    batch: int
    parts: int
    slices: int
    kt_per_slice: int

    @property
    def mp(self) -> int:
        return _ceil(self.m, TILE_MN) * TILE_MN

    @property
    def np_(self) -> int:
        return _ceil(self.n, TILE_MN) * TILE_MN

    @property
    def kp(self) -> int:
        return _ceil(self.k, TILE_K) * TILE_K

    @property
    def partials(self) -> int:
        return self.batch * self.slices * self.m * self.n if self.slices > 1 else 0

    @property
    def a_offset(self) -> int:
        return _align(self.partials)

    @property
    def b_offset(self) -> int:
        return self.a_offset + _align(self.parts * self.batch * self.mp * self.kp)

    @property
    def workspace(self) -> int:
        return self.b_offset + _align(self.parts * self.batch * self.np_ * self.kp)

    @property
    def smem(self) -> int:
        return STAGES[self.parts] * 2 * self.parts * _TILE_BYTES


def slices_for(m: int, n: int, k: int, batch: int, sm_count: int) -> tuple[int, int]:
    """(slices, K tiles per slice): one slice unless the tiles leave SMs idle."""
    k_tiles = _ceil(k, TILE_K)
    tiles = _ceil(m, TILE_MN) * _ceil(n, TILE_MN) * batch
    slices = 1
    if tiles < sm_count:
        slices = max(1, min(sm_count // tiles, k_tiles // MIN_SLICE_TILES, MAX_SLICES))
    per = _ceil(k_tiles, slices)
    return _ceil(k_tiles, per), per


def tensor_plan(m: int, n: int, k: int, batch: int, parts: int, sm_count: int) -> TensorPlan:
    slices, per = slices_for(m, n, k, batch, sm_count)
    plan = TensorPlan(m, n, k, batch, parts, slices, per)
    if plan.workspace > _INT32_MAX:  # the kernels take offsets as 32-bit integers
        raise ValueError(f"{batch}x{m}x{n}x{k} needs a workspace of {plan.workspace} floats, "
                         f"more than the tensor-core rungs address ({_INT32_MAX})")
    return plan


def _steps(plan: TensorPlan) -> tuple[CudaStep, ...]:
    """The packs, the main kernel and the reduction; the main kernel and the packs are the
    rung's own source (``source``/``entry`` None), the reduction is rung 21's."""
    pack_block = (PACK_THREADS,)

    def pack(operand: str, rows: int, rows_p: int, offset: int, r_stride: int,
             k_stride: int) -> CudaStep:
        grid = (plan.kp // PACK_TILE, rows_p // PACK_TILE, plan.batch)
        lo = plan.batch * rows_p * plan.kp
        return CudaStep(grid, pack_block, PACK_ENTRY, None, args=(
            operand, "work", offset, lo, rows, plan.k, rows_p, plan.kp, r_stride, k_stride,
            plan.parts))

    # Column-major: A(m, k) at m + k * M; B(k, n) at k + n * K, read as rows n.
    steps = [pack("a", plan.m, plan.mp, plan.a_offset, 1, plan.m),
             pack("b", plan.n, plan.np_, plan.b_offset, plan.k, 1)]
    grid = (plan.mp // TILE_MN, plan.np_ // TILE_MN, plan.batch * plan.slices)
    if grid[1] > 65535 or grid[2] > 65535:
        raise ValueError(f"grid {grid} exceeds CUDA's y/z limit of 65535")
    steps.append(CudaStep(grid, (THREADS,), None, None, smem=plan.smem, args=(
        "m", "n", plan.kp, "alpha", "beta", "c", "work", plan.a_offset, plan.b_offset,
        plan.mp, plan.np_, plan.kt_per_slice, plan.slices)))
    if plan.slices > 1:
        reduce_grid = min(_ceil(plan.batch * plan.m * plan.n, 4 * 256), 65535)
        steps.append(CudaStep((reduce_grid, 1, 1), (256,), REDUCE_ENTRY, REDUCE_SOURCE,
                              args=("m", "n", "batch", "alpha", "work", "beta", "c",
                                    plan.slices)))
    return tuple(steps)


def _info(plan: TensorPlan, path: str) -> dict:
    return {"tensorcore": {"path": path, "slices": plan.slices, "parts": plan.parts,
                           "padded": [plan.mp, plan.np_, plan.kp]}}


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
    """Rung 26: big and small parts packed, three products with FP32 accumulation outside
    the tensor cores; rung 22's FP32 SIMT plan where the shape gains nothing from them."""
    if not force_tensor and not uses_tensor_cores(call.m, call.n, call.k):
        simt = planners.plan_adaptive(call, device)
        return CudaPlan(simt.steps, simt.workspace,
                        {**dict(simt.info), "tensorcore": {"path": "fp32 simt (rung 22)"}})
    plan = tensor_plan(call.m, call.n, call.k, call.batch, 2, device.sms)
    return CudaPlan(_steps(plan), plan.workspace, _info(plan, "tensor"))


def plan_accurate_tensor(call: GemmCall, device: DeviceFacts, override: object = None
                         ) -> CudaPlan:
    """Rung 26's tensor path on every shape (for tests of its edges)."""
    return plan_accurate(call, device, override, force_tensor=True)
