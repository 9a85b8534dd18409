"""scripts/tile_calibration.py: which of the model's figures each ``fit`` flag frees (the
timings and the fit itself need a GPU's measurements)."""

from __future__ import annotations

from mmsuite.cuda_dispatch.variants import BY_KEY

from . import load_script

calibration = load_script("tile_calibration")


def test_the_narrow_refit_frees_the_32_and_64_row_blocks_own_figures_and_nothing_else() -> None:
    freed = set(calibration.FREE_SETS["gemv_narrow"])
    narrow = {key for key in calibration.N_SIDE if BY_KEY[key].config.rows in (32, 64)}
    assert len(narrow) == 20  # five widths, plain and fused, of each
    assert freed == {(table, key) for key in narrow for table in calibration.VARIANT_FIGURES}


def test_the_n_side_refit_frees_every_n_side_variant_but_no_m_side_one() -> None:
    freed = {key for _, key in calibration.FREE_SETS["gemv_n"]}
    assert set(calibration.N_SIDE) <= freed
    assert not freed & set(calibration.M_SIDE)


def test_the_sums_refit_frees_the_slice_sums_shared_figures_only() -> None:
    freed = calibration.FREE_SETS["sums"]
    assert {table for table, _ in freed} == {"shared"}
    assert {name for _, name in freed} == {"reduce_bytes_per_block_s", "launch_gap_s",
                                           "gemv_fuse_s", "fuse_slice_s"}
    assert "sums" in calibration.FREE_SET_HELP
