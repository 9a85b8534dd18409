"""Dot (families/dot.py): where rung 22 offers it, with which splits (no GPU)."""

from __future__ import annotations

from mmsuite.cuda_dispatch import variants
from mmsuite.cuda_dispatch.families import dot
from mmsuite.cuda_dispatch.family import Candidate
from mmsuite.cuda_dispatch.variants import variant, why_not
from mmsuite.launch import DeviceFacts

H100 = DeviceFacts()


def test_rung_30_is_offered_where_c_has_few_tiles_with_slices_of_a_step_per_thread() -> None:
    assert dot.dot_splits(2273) == [1, 2, 4, 8]  # 285 K per slice; 16 would leave 143
    assert dot.dot_splits(300) == [1] and dot.dot_splits(1) == [1]
    offered = [c for c in variants.candidates(22, 1, 4378, 1, H100) if c.family == "dot"]
    assert [c.split for c in offered] == [1, 2, 4, 8, 16]
    assert dot.dot_tiles(17, 16) == 20 > dot.MAX_TILES
    assert not [c for c in variants.candidates(17, 16, 4378, 1, H100) if c.family == "dot"]
    assert "K slice" in why_not(Candidate(variant("dot", dot.DOT_CONFIG), 3), 2, 1, 2273, 1)
