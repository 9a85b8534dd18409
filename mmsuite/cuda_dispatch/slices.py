"""Adding the K slices: the reduction kernel that follows a split plan (rungs 21 and 24's
``*_reduce``), and the fused sum in which a tile's last block adds them (rungs 21 and 24
FUSED, rung 30), with their launches and cost terms."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..launch import CudaStep

if TYPE_CHECKING:
    from ..launch import DeviceFacts
    from .costs import Parameters

REDUCE_THREADS = 256  # mm_21_reduce and mm_24_reduce: one float4 of C a thread


def reduce_blocks(m: int, n: int, batch: int, device: DeviceFacts) -> int:
    """Blocks of a slice reduction: enough to cover C once in float4s, at most 16 per SM."""
    quads = -(-(batch * m * n) // 4)
    return max(1, min(-(-quads // 256), 16 * device.sms))


def reduce_step(entry: str, source: str, defines: tuple[tuple[str, int], ...], m: int, n: int,
                batch: int, split: int, device: DeviceFacts) -> CudaStep:
    """The launch that adds ``split`` slices of partial sums in the workspace into C."""
    return CudaStep((reduce_blocks(m, n, batch, device), 1, 1), (REDUCE_THREADS,), entry,
                    source, defines,
                    args=("m", "n", "batch", "alpha", "work", "beta", "c", split))


def reduce_seconds(partial_bytes: float, out_bytes: float, blocks: int, p: Parameters) -> float:
    """The second kernel: partial sums written by the first and read back, C once, at a
    rate few blocks reach only in part, behind a launch gap."""
    rate = min(p["reduce_bytes_per_s"], blocks * p["reduce_bytes_per_block_s"])
    return (partial_bytes / p["reduce_bytes_per_s"] + (partial_bytes + out_bytes) / rate
            + p["launch_gap_s"])


def slices_reduced_seconds(m: int, n: int, batch: int, split: int, device: DeviceFacts,
                           p: Parameters) -> float:
    """The reduction of ``split`` slices of C (each M x N) after the main kernel."""
    return reduce_seconds(4 * batch * m * n * split, 8 * batch * m * n,
                          reduce_blocks(m, n, batch, device), p)


def fused_sum_seconds(outputs: int, split: int, p: Parameters, rounds: int = 1) -> float:
    """The last block of each tile adding the slices (rungs 24 FUSED and 30): their bytes,
    and a wait for L2 per slice for each of a thread's ``rounds`` of loads (rung 24's
    16-column block has 16 outputs a thread, four at a time). Rung 24's last block loads up
    to eight slices' words at once; ``fuse_slice_s``, which rung 30 and rung 21's fused
    tiles share, was last refitted with the other figures of the slice sums
    (``fit --sums``)."""
    return (8.0 * outputs * split / p["reduce_bytes_per_s"] + p["gemv_fuse_s"]
            + rounds * split * p["fuse_slice_s"])
