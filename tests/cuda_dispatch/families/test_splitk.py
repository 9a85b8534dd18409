"""Split-K (families/splitk.py): its tile configs, the split factors it is offered with, and
its applicability (no GPU)."""

from __future__ import annotations

import pytest

from mmsuite.cuda_dispatch import variants
from mmsuite.cuda_dispatch.families import splitk
from mmsuite.cuda_dispatch.families.splitk import CONFIGS, SEARCH, Config
from mmsuite.cuda_dispatch.family import Candidate
from mmsuite.cuda_dispatch.variants import variant, why_not
from mmsuite.launch import DeviceFacts

H100 = DeviceFacts()


# ----------------------------------------------------------------- configs
def test_config_names_and_defines() -> None:
    config = Config(64, 64, tm=4, tn=8, lr=8)
    assert config.name == "64x64x16_t4x8_lr8"
    assert config.defines == {"BM": 64, "BN": 64, "BK": 16, "TM": 4, "TN": 8, "LR": 8}
    assert config.threads == 128
    assert Config(128, 128).threads == 256 and Config(128, 256).threads == 512


@pytest.mark.parametrize("kwargs,why", [
    ({"bm": 128, "bn": 128, "tm": 6}, "TM and TN"),
    ({"bm": 48, "bn": 128}, "warp tiles"),
    ({"bm": 256, "bn": 256, "tm": 4}, "threads per block"),
    ({"bm": 32, "bn": 32, "tm": 8, "tn": 8}, "warp tiles"),
    ({"bm": 256, "bn": 128, "bk": 128, "lr": 2, "stages": 2}, "shared memory"),
    ({"bm": 128, "bn": 128, "stages": 3}, "STAGES"),
])
def test_configs_the_source_rejects_are_refused(kwargs: dict, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        Config(**kwargs)


def test_params_round_trip_keeps_the_measured_figures() -> None:
    for config in SEARCH:
        assert Config.from_params(config.params()) is config
    fresh = Config.from_params({"BM": 128, "BN": 128, "BK": 8, "STAGES": 2, "LR": 2})
    assert fresh.stages == 2 and fresh.defines["STAGES"] == 2


def test_buffers_over_48kb_are_dynamic_shared_memory() -> None:
    big = CONFIGS["256x128x16_t8x8_lr2_s2"]
    assert big.smem_bytes == 2 * 16 * (256 + 128 + 4) * 4 > 48 * 1024
    assert big.smem_dynamic and big.defines["SMEM_DYNAMIC"] == 1
    assert "SMEM_DYNAMIC" not in CONFIGS["256x128x16_t8x8_lr2"].defines


def test_tiles_store_a_misaligned_c_in_turns_where_their_buffers_hold_too_few_warps() -> None:
    """store_rounds mirrors EPI_ROUNDS of cuda/21_splitk.cu: a warp's part of the tile
    (WM rows padded to 8 mod 32 a quarter, times 32 / LR columns at a pitch of LR mod 32)
    against the STAGES x BK x (BM + BN + 4) floats of the block's shared buffers."""
    assert CONFIGS["128x128x16"].store_rounds == 1  # 8 parts of 36 x 8 floats in 4160
    assert CONFIGS["128x128x8"].store_rounds == 2  # ... in 2080: 7 at a time
    assert CONFIGS["256x128x16_t8x8_lr2_s2"].store_rounds == 1
    assert CONFIGS["256x128x16_t8x8_lr2"].store_rounds == 2  # 16 parts of 34 x 16 in 6208
    for config in splitk.SEARCH:
        assert 1 <= config.store_rounds <= config.threads // 32


def _k_slices(k: int, bk: int, split: int) -> list[tuple[int, int]]:
    """The K range of every slice, computed as cuda/21_splitk.cu does."""
    tiles = -(-k // bk)
    per = -(-tiles // split)
    out = []
    for s in range(split):
        kb = min(k, s * per * bk)
        out.append((kb, min(k, kb + per * bk)))
    return out


@pytest.mark.parametrize("k", [1, 15, 16, 17, 100, 1031, 4096, 65536])
def test_offered_splits_cover_k_once_with_no_empty_slice(k: int) -> None:
    for split in splitk.split_factors(k, 16):
        slices = _k_slices(k, 16, split)
        assert slices[0][0] == 0 and slices[-1][1] == k
        assert all(a < b for a, b in slices), f"empty slice at split {split}"


def test_plain_tiles_are_offered_slices_of_a_few_k_tiles_like_fused_ones() -> None:
    """804 K tiles: past 48 slices the round factors leave slices empty up to 128; slices of
    12 to 16 K tiles (67, 58 and 51 of them) are offered to plain and fused tiles alike."""
    plain = splitk.split_factors(12855, 16)
    assert {51, 58, 67} <= set(plain)
    assert splitk.fused_split_factors(12855, 16) == [s for s in plain if s > 1]


def test_filling_splits_put_a_block_on_every_sm_or_fill_their_slots() -> None:
    """126x112 column-major has 2 tiles of 128x64: 132 SMs take 66 slices a tile, which 804
    K tiles cannot split evenly, so 62 slices of 13 (124 blocks); three blocks an SM take
    198, so 161 slices of 5."""
    tile = CONFIGS["128x64x16_b3"]
    assert tile.blocks_per_sm == 3
    assert splitk.filling_splits(tile, 126, 112, 12855, 1, H100) == [62, 161]
    offered = {c.split for c in variants.candidates(126, 112, 12855, 1, H100)
               if c.variant.key == "splitk:128x64x16_b3"}
    assert {62, 161} <= offered
    # C of 16 tiles or more a wave fills alone: nothing to add.
    assert splitk.filling_splits(tile, 4096, 4096, 4096, 1, H100) == []


def test_any_split_with_no_empty_slice_is_runnable() -> None:
    ok = Candidate(variant("splitk", CONFIGS["128x64x16_b3"]), 62)
    assert 62 not in splitk.split_factors(12855, 16)
    assert why_not(ok, 126, 112, 12855, 1, H100) == ""
    empty = Candidate(ok.variant, 64)  # 13 K tiles a slice fill 62 slices: two left empty
    assert "empty" in why_not(empty, 126, 112, 12855, 1, H100)
