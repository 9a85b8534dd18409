"""An SM's limits: how many blocks of a variant it holds (no GPU)."""

from __future__ import annotations

from mmsuite.cuda_dispatch import occupancy
from mmsuite.cuda_dispatch.families.splitk import CONFIGS


def test_occupancy_follows_registers_and_threads() -> None:
    assert CONFIGS["128x128x16"].blocks_per_sm == 2  # rung 20: 128 registers x 256 threads
    assert CONFIGS["128x256x16"].blocks_per_sm == 1
    assert CONFIGS["64x128x16_b3"].blocks_per_sm == 3


def test_a_warps_registers_come_from_one_quarter_of_the_register_file() -> None:
    """112 registers: 4 warps fit a quarter of 16384, so 8 blocks of 2 warps, where the
    whole file's 65536 would take 9 (the H100's occupancy query said 8 for a 112-register
    build of the fused 32x32 tile)."""
    assert occupancy.resident_blocks(112, 64, 4352) == 8
    assert occupancy.resident_blocks(89, 64, 4352) == 10  # 5 warps a quarter
    assert occupancy.resident_blocks(32, 1024, 0) == 2  # threads bound it
    assert occupancy.resident_blocks(32, 64, 60 * 1024) == 3  # shared memory bounds it
