"""GEMV (families/gemv.py): its variants, which runs a shape, its slices and column groups
(no GPU)."""

from __future__ import annotations

import pytest

from mmsuite.cuda_dispatch import family, occupancy, variants
from mmsuite.cuda_dispatch.families import gemv
from mmsuite.cuda_dispatch.families.gemv import GEMV_CONFIGS, GemvConfig
from mmsuite.cuda_dispatch.family import Candidate
from mmsuite.cuda_dispatch.variants import variant, why_not


def test_the_narrow_gemv_blocks_cover_a_quarter_of_the_rows_in_twice_the_warps() -> None:
    """8 lanes a column of A: 32 rows a block, four columns of A a warp at once, so a round of
    loads walks four times the K; the 16-column block has the 8 warps the others have, since
    its sums of 32 rows fit the panel 8 times."""
    wide, narrow = (gemv.gemv_config(1000, 16, column_lanes=lanes) for lanes in (32, 8))
    assert (wide.name, narrow.name) == ("gemv_n16", "gemv_n16_r32")
    assert (wide.rows, narrow.rows) == (128, 32)
    assert (wide.threads, narrow.threads) == (128, 256)
    assert (wide.k_per_round, narrow.k_per_round) == (16, 128)
    assert narrow.defines == {"SKINNY": 16, "N_LANES": 8}
    assert gemv.gemv_grid(narrow, 1000, 16, 3, 2) == (32, 2, 3)
    # The M side has one width: asked for narrow blocks, it gives its own.
    assert gemv.gemv_config(4, 1000, column_lanes=8).name == "gemv_m4"


def test_the_n_side_also_runs_half_its_columns_in_two_groups() -> None:
    """9-16 columns of B run on the 16-column variant or, in two column groups (grid z) that
    each read A, on the 8-column one; the M side, and products wider than 16 both ways,
    keep to the least variant that holds them."""
    def runs(m: int, n: int) -> set[str]:
        return {c.name for c in GEMV_CONFIGS if gemv.gemv_runs(c, m, n)
                and c.column_lanes == 32 and not c.fused}

    assert runs(338, 11) == {"gemv_n16", "gemv_n8"}
    assert runs(3486, 8) == {"gemv_n8", "gemv_n4"}
    assert runs(8192, 1) == {"gemv_n1"}
    assert runs(11, 338) == {"gemv_m16"}
    assert runs(1000, 40) == {"gemv_n16"}  # 16 columns at a time, rung 24 alone
    n8 = next(c for c in GEMV_CONFIGS if c.name == "gemv_n8")
    assert gemv.gemv_grid(n8, 338, 11, 15, 1) == (3, 1, 30)  # 15 matrices x 2 groups
    keys = {c.variant.key for c in variants.candidates(338, 11, 436, 15)}
    assert {"gemv:gemv_n8", "gemv:gemv_n8_r32f", "gemv:gemv_n16"} <= keys
    assert "gemv:gemv_n4" not in keys
    assert variants.why_not(family.Candidate(variants.variant("gemv", n8), 1), 338, 40, 436, 1)


def test_gemv_blocks_hold_their_32kb_panel_and_registers() -> None:
    """A block's second round of loads in registers bounds the N side's blocks an SM below
    what the 32 KB panel allows (6 blocks of 256 threads)."""
    n1, n16, n16f = (next(c for c in GEMV_CONFIGS if c.name == name)
                     for name in ("gemv_n1", "gemv_n16", "gemv_n16f"))
    assert (n16.regs, n16.blocks_per_sm) == (124, 4)  # as NVRTC compiles them
    assert (n16f.regs, n16f.blocks_per_sm) == (128, 4)
    assert (n1.regs, n1.blocks_per_sm) == (61, 4)
    assert occupancy.resident_blocks(32, 256, gemv.PANEL_BYTES) == 6  # the panel


def test_a_fused_gemv_variant_is_offered_only_with_k_split() -> None:
    fused = variant("gemv", GemvConfig("n", 1, fused=True))
    assert "plain variant" in why_not(Candidate(fused, 1), 8192, 1, 8192, 1)
    assert not why_not(Candidate(fused, 4), 8192, 1, 8192, 1)
    assert fused.config.defines == {"SKINNY": 1, "FUSED": 1} and fused.second_entry == ""
    assert gemv.gemv_counters(fused.config, 8192, 1, 3, 4) == 64 * 3


@pytest.mark.parametrize("m,n,name", [(8192, 1, "gemv_n1"), (8192, 3, "gemv_n4"),
                                      (4096, 16, "gemv_n16"), (16, 4096, "gemv_m16"),
                                      (4, 8192, "gemv_m4"), (7, 7, "gemv_n8"),
                                      (35, 79, "gemv_n16")])
def test_rung_24_takes_the_least_variant_that_holds_the_skinny_side(m: int, n: int,
                                                                    name: str) -> None:
    assert gemv.gemv_config(m, n).name == name


@pytest.mark.parametrize("k", [1, 127, 128, 129, 1031, 4099, 8192, 65536])
def test_gemv_slices_cover_k_in_whole_4s_with_none_empty(k: int) -> None:
    for split in gemv.gemv_splits(k):
        chunk = gemv.gemv_kchunk(k, split)
        assert chunk % 4 == 0  # 16-byte loads of B's columns stay aligned
        assert split * chunk >= k and (split - 1) * chunk < k  # the last slice not empty


def test_gemv_groups_cover_every_column() -> None:
    config = GemvConfig("n", 16)
    assert gemv.gemv_grid(config, 35, 79, 3, 2) == (1, 2, 3 * 5)
    assert gemv.gemv_grid(GemvConfig("m", 4), 4, 8192, 1, 8) == (256, 8, 1)
