"""Stream-K (families/streamk.py): where it is offered, and its work split walked as the
kernel walks it (no GPU)."""

from __future__ import annotations

import pytest

from mmsuite.cuda_dispatch import variants
from mmsuite.cuda_dispatch.families import streamk
from mmsuite.cuda_dispatch.families.splitk import Config
from mmsuite.cuda_dispatch.families.streamk import STREAMK_CONFIGS
from mmsuite.launch import DeviceFacts

H100 = DeviceFacts()


def test_stream_k_is_offered_beside_split_k_only_from_its_least_k() -> None:
    """Below STREAMK_MIN_K rung 21's plan of the same tile is as fast or faster: rung 22 does
    not weigh stream-K there, while rung 23 alone (stream-K the only family) still runs."""
    short, least = streamk.STREAMK_MIN_K - 1, streamk.STREAMK_MIN_K

    def families(k: int, **choice) -> set[str]:
        return {c.family for c in variants.candidates(4000, 3000, k, 2, H100, **choice)}

    assert "streamk" not in families(short) and "splitk" in families(short)
    assert "streamk" in families(least)
    assert families(short, families=("streamk",)) == {"streamk"}


# ----------------------------------------------------------------- stream-K
def _streamk_work(split: streamk.StreamK) -> dict[int, list[tuple[int, int, int]]]:
    """Per block of rung 23's grid, the (tile, first, end) iteration runs it computes,
    walked as cuda/23_streamk.cu walks them."""
    work = {}
    for block in range(split.grid[0]):
        if block < split.sk_ctas:
            it, end = split.begin(block), split.begin(block + 1)
        else:
            it = (split.sk_tiles + block - split.sk_ctas) * split.ipt
            end = it + split.ipt
        runs = []
        while it < end:
            tile = it // split.ipt
            stop = min(end, (tile + 1) * split.ipt)
            runs.append((tile, it, stop))
            it = stop
        work[block] = runs
    return work


STREAMK_PROBLEMS = [(1, 1, 1, 1), (35, 79, 19, 3), (4097, 4097, 4097, 1), (8192, 128, 8192, 1),
                    (128, 128, 65536, 1), (1000, 1000, 1000, 100), (131, 257, 139, 2)]


@pytest.mark.parametrize("config", STREAMK_CONFIGS, ids=lambda c: c.name)
@pytest.mark.parametrize("m,n,k,batch", STREAMK_PROBLEMS)
def test_streamk_assigns_every_tile_iteration_exactly_once_in_even_shares(
        config: Config, m: int, n: int, k: int, batch: int) -> None:
    split = streamk.streamk_split(config, m, n, k, batch, H100)
    seen = [0] * (split.tiles * split.ipt)
    for runs in _streamk_work(split).values():
        for _, first, end in runs:
            for it in range(first, end):
                seen[it] += 1
    assert set(seen) == {1}
    assert split.sk_ctas <= split.slots and split.dp_tiles % split.slots == 0
    if split.sk_ctas:
        shares = [split.begin(c + 1) - split.begin(c) for c in range(split.sk_ctas)]
        assert max(shares) - min(shares) <= 1 and min(shares) >= 1
        if split.tiles >= split.slots:  # the two-tile hybrid: one to two tiles a block
            assert split.ipt <= min(shares) and max(shares) <= 2 * split.ipt


@pytest.mark.parametrize("config", STREAMK_CONFIGS, ids=lambda c: c.name)
@pytest.mark.parametrize("m,n,k,batch", STREAMK_PROBLEMS)
def test_streamk_fixup_finds_each_partial_in_its_own_slot(config: Config, m: int, n: int,
                                                          k: int, batch: int) -> None:
    split = streamk.streamk_split(config, m, n, k, batch, H100)
    written = {}  # (block, slot) -> tile whose raw partial sums the block wrote there
    for block, runs in _streamk_work(split).items():
        for tile, first, end in runs:
            if (first, end) != (tile * split.ipt, (tile + 1) * split.ipt):
                slot = 0 if tile == runs[0][0] else 1
                assert (block, slot) not in written, "two partials in one slot"
                written[(block, slot)] = tile
    for tile in range(split.sk_tiles):  # what mm_23_fixup reads for each shared tile
        lo, hi = split.owner(tile * split.ipt), split.owner((tile + 1) * split.ipt - 1)
        wrote = sorted(block for (block, _), t in written.items() if t == tile)
        assert wrote == (list(range(lo, hi + 1)) if lo != hi else [])
    assert all(2 * block + slot < split.workspace_elems // (config.bm * config.bn)
               for block, slot in written)


def test_streamk_fills_the_partial_wave_of_4097_cubed() -> None:
    split = streamk.streamk_split(STREAMK_CONFIGS[0], 4097, 4097, 4097, 1, H100)
    assert split.tiles % split.slots != 0
    assert split.sk_ctas == split.slots
    assert split.sk_tiles == split.slots + split.tiles % split.slots
