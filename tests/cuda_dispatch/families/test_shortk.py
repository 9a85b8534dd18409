"""Short K (families/shortk.py): its configs and where rung 22 offers them (no GPU)."""

from __future__ import annotations

import pytest

from mmsuite.cuda_dispatch import variants
from mmsuite.cuda_dispatch.families import shortk
from mmsuite.cuda_dispatch.families.shortk import SHORTK_CONFIGS, ShortKConfig
from mmsuite.cuda_dispatch.family import Candidate
from mmsuite.cuda_dispatch.variants import variant, why_not
from mmsuite.launch import DeviceFacts

H100 = DeviceFacts()


@pytest.mark.parametrize("m,k,offered", [
    (1, 1, {"shortk_cols8", "shortk_cols16", "shortk_cols32"}),
    (9, 63, {"shortk_cols16", "shortk_cols32"}),  # past the tiles' K, not past 64
    (31, 64, {"shortk_cols32"}),
    (33, 8, set()),  # M fits no whole-column block
    (3, 65, set()),  # K past 64: rung 24's GEMV streams it
])
def test_whole_column_variants_are_offered_where_m_fits_their_rows_and_k_is_short(
        m: int, k: int, offered: set[str]) -> None:
    found = variants.candidates(m, 2697, k, 51, H100)
    assert {c.config.name for c in found if c.family == "shortk"
            and c.config.cols} == offered


def test_whole_column_variants_name_their_own_entry_and_rows() -> None:
    cols = [c for c in SHORTK_CONFIGS if c.cols]
    assert [(c.bm, c.bn, c.name) for c in cols] == [
        (8, 256, "shortk_cols8"), (16, 256, "shortk_cols16"), (32, 256, "shortk_cols32")]
    for config in cols:
        row = variant("shortk", config)
        assert row.entry == "mm_27_shortk_cols" and config.defines == {"ROWS": config.bm}
        # A's chunk and the larger of B's chunk (stride 257) and C's padded block.
        assert config.smem_bytes == 4 * (32 * config.bm + max(32 * 257, config.bm * 264))
        assert shortk.shortk_grid(config, 40, 513, 3) == (-(-40 // config.bm), 3, 3)
    with pytest.raises(ValueError, match="ROWS is 8, 16 or 32"):
        ShortKConfig(64, 1, cols=True)


def test_short_k_configs_tile_c_with_256_threads_and_refuse_what_the_source_does() -> None:
    tiles = [c for c in SHORTK_CONFIGS if not c.cols]
    assert [(c.bm, c.bn) for c in tiles] == [(128, 64), (128, 32), (64, 128)]
    assert all(c.threads == 256 and c.smem_bytes == 4 * 32 * (c.bm + c.bn) for c in tiles)
    with pytest.raises(ValueError, match="BM is 32, 64 or 128"):
        ShortKConfig(48, 8)
    row = variant("shortk", SHORTK_CONFIGS[0])
    assert "split 1" in why_not(Candidate(row, 2), 100, 100, 10, 1)
    assert "y/z limit" in why_not(Candidate(row), 4, 64 * 65536, 4, 1)
