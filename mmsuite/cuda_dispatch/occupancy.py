"""What an SM holds and what CUDA lets one launch ask: the limits every family is held to."""

from __future__ import annotations

REGS_PER_SM = 65536
THREADS_PER_SM = 2048
SMEM_PER_SM = 228 * 1024
MAX_SMEM_PER_BLOCK = 227 * 1024  # sm_90's opt-in limit for one block
MAX_WORKSPACE_BYTES = 512 * 2**20
MAX_GRID_YZ = 65535


def resident_blocks(regs: int, threads: int, smem_bytes: int) -> int:
    """Blocks of ``threads`` that fit on one SM at once. An SM's registers are four
    quarters of 16384, one per warp scheduler, and a warp takes its registers (in 256s)
    from one quarter: 112 registers give 4 warps a quarter, so 8 blocks of 64 threads, not
    the 9 that the whole file's 65536 would hold (the H100's occupancy query agrees)."""
    regs_per_warp = -(-regs * 32 // 256) * 256
    warps = 4 * (REGS_PER_SM // 4 // regs_per_warp)
    by_regs = warps // max(1, threads // 32)
    by_smem = SMEM_PER_SM // (smem_bytes + 1024)
    return max(1, min(by_regs, THREADS_PER_SM // threads, by_smem, 32))


def grid_problem(grid: tuple[int, int, int]) -> str:
    """Why CUDA refuses ``grid`` (its y and z at most 65535), or ''."""
    return f"grid {grid} passes CUDA's y/z limit" if max(grid[1:]) > MAX_GRID_YZ else ""


def workspace_problem(split: int, m: int, n: int, batch: int) -> str:
    """Why ``split`` slices of partial sums of C do not fit the workspace cap, or ''."""
    workspace = 4 * batch * split * m * n if split > 1 else 0
    if workspace > MAX_WORKSPACE_BYTES:
        return f"{workspace} bytes of partial sums (at most {MAX_WORKSPACE_BYTES})"
    return ""


def whole_slices(k_tiles: int, split: int) -> bool:
    """Whether ``split`` slices of ceil(k_tiles / split) K tiles leave none empty."""
    return 1 <= split <= k_tiles and -(-k_tiles // -(-k_tiles // split)) == split
