"""The manifest of compiled variants: configs, applicability, split arithmetic (no GPU)."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest

from mmsuite.cuda_dispatch import family, occupancy, variants
from mmsuite.cuda_dispatch.families import dot, gemv, shortk, splitk, streamk
from mmsuite.cuda_dispatch.families.gemv import GEMV_CONFIGS, GemvConfig
from mmsuite.cuda_dispatch.families.shortk import SHORTK_CONFIGS, ShortKConfig
from mmsuite.cuda_dispatch.families.splitk import CONFIGS, FUSED_CONFIGS, SEARCH, Config
from mmsuite.cuda_dispatch.families.streamk import STREAMK_CONFIGS
from mmsuite.cuda_dispatch.family import Candidate
from mmsuite.cuda_dispatch.variants import VARIANTS, variant, why_not
from mmsuite.launch import DeviceFacts
from mmsuite.sources import source_path

H100 = DeviceFacts()
NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH (install the CUDA "
                                "toolkit)")


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


# ----------------------------------------------------------------- manifest
def test_the_manifest_names_each_variant_once_with_its_source_and_entries() -> None:
    keys = [v.key for v in VARIANTS]
    assert len(keys) == len(set(keys))
    assert {v.family for v in VARIANTS} == {"splitk", "streamk", "gemv", "shortk", "dot"}
    for row in VARIANTS:
        text = source_path(row.source).read_text()
        assert f"\n{row.entry}(" in text, row.key
        fused = getattr(row.config, "fused", False)
        assert (row.second_entry == "") == (row.family in ("shortk", "dot") or fused), row.key
        assert not row.second_entry or f"\n{row.second_entry}(" in text, row.key
    assert len([v for v in VARIANTS if v.family == "splitk"]) == len(SEARCH) + len(FUSED_CONFIGS)
    # Rung 24: both sides' five widths, plain and fused, and the N side's narrow blocks of
    # 32 and 64 rows.
    assert len([v for v in VARIANTS if v.family == "gemv"]) == len(GEMV_CONFIGS) == 40
    assert len([v for v in VARIANTS if v.family == "shortk"]) == len(SHORTK_CONFIGS)


def test_stream_k_is_offered_beside_split_k_only_from_its_least_k() -> None:
    """Below STREAMK_MIN_K rung 21's plan of the same tile is as fast or faster: rung 22 does
    not weigh stream-K there, while rung 23 alone (stream-K the only family) still runs."""
    short, least = streamk.STREAMK_MIN_K - 1, streamk.STREAMK_MIN_K

    def families(k: int, **choice) -> set[str]:
        return {c.family for c in variants.candidates(4000, 3000, k, 2, H100, **choice)}

    assert "streamk" not in families(short) and "splitk" in families(short)
    assert "streamk" in families(least)
    assert families(short, families=("streamk",)) == {"streamk"}


def test_every_family_is_a_candidate_where_it_applies() -> None:
    families = {c.family for c in variants.candidates(4097, 4097, 4097, 1, H100)}
    assert families == {"splitk", "streamk"}  # no side skinny, K long: rungs 24, 27 are not
    skinny = variants.candidates(8192, 1, 8192, 1, H100)
    gemv = [c for c in skinny if c.family == "gemv"]
    assert {c.config.name for c in gemv} == {"gemv_n1", "gemv_n1f", "gemv_n1_r32",
                                             "gemv_n1_r32f", "gemv_n1_r64",
                                             "gemv_n1_r64f"} and len(gemv) > 16
    assert all(c.split > 1 for c in gemv if c.config.fused)
    assert {c.family for c in skinny} == {"splitk", "streamk", "gemv"}
    for m, n, k_max in ((4096, 4097, shortk.MAX_K),
                        (4097, 4097, shortk.MAX_K_UNALIGNED_WIDE),
                        (4097, 9, shortk.MAX_K_UNALIGNED)):
        assert shortk.shortk_max_k(m, n) == k_max
        short = variants.candidates(m, n, k_max, 1, H100)
        tiles = {c for c in SHORTK_CONFIGS if not c.cols}
        assert {c.config for c in short if c.family == "shortk"} == tiles
        assert not [c for c in variants.candidates(m, n, k_max + 1, 1, H100)
                    if c.family == "shortk"]


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


def test_rung_30_is_offered_where_c_has_few_tiles_with_slices_of_a_step_per_thread() -> None:
    assert dot.dot_splits(2273) == [1, 2, 4, 8]  # 285 K per slice; 16 would leave 143
    assert dot.dot_splits(300) == [1] and dot.dot_splits(1) == [1]
    offered = [c for c in variants.candidates(22, 1, 4378, 1, H100) if c.family == "dot"]
    assert [c.split for c in offered] == [1, 2, 4, 8, 16]
    assert dot.dot_tiles(17, 16) == 20 > dot.MAX_TILES
    assert not [c for c in variants.candidates(17, 16, 4378, 1, H100) if c.family == "dot"]
    assert "K slice" in why_not(Candidate(variant("dot", dot.DOT_CONFIG), 3), 2, 1, 2273, 1)


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


def test_why_not_is_the_one_place_that_refuses_a_plan() -> None:
    tile = variant("splitk", CONFIGS["128x128x16"])
    assert "partial sums" in why_not(Candidate(tile, 2), 16384, 16384, 4096, 1)  # 2 GiB
    assert "y/z limit" in why_not(Candidate(tile, 1), 1, 128 * 70000, 64, 1)
    assert "empty" in why_not(Candidate(tile, 5), 128, 128, 64, 1)  # 4 K tiles
    streamk = variant("streamk", STREAMK_CONFIGS[0])
    assert "split 1" in why_not(Candidate(streamk, 2), 512, 512, 512, 1)
    assert "iterations" in why_not(Candidate(variant("streamk", STREAMK_CONFIGS[-1])),
                                   2**16, 2**16, 2**16, 1)
    gemv = variant("gemv", GemvConfig("n", 1, 37))
    assert "not rung 24's variant" in why_not(Candidate(gemv), 8192, 3, 8192, 1)
    assert why_not(Candidate(gemv, 8), 8192, 1, 8192, 1) == ""
    assert all(why_not(c, 8192, 1, 8192, 1, H100) == ""
               for c in variants.candidates(8192, 1, 8192, 1, H100))


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


# ------------------------------------------------------------ compiled code
def _ptxas(source: Path, defines: dict, tmp_path: Path) -> dict[str, tuple[int, str]]:
    """(registers, spill line) of each kernel nvcc compiles from ``source``."""
    cmd = [NVCC, "-arch=sm_90", "-c", "-Xptxas", "-v", "-I", str(source.parent),
           *[f"-D{k}={v}" for k, v in defines.items()], "-o", str(tmp_path / "o.o"),
           str(source)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    kernels: dict[str, tuple[int, str]] = {}
    entry, spills = None, ""
    for line in done.stderr.splitlines():
        if "Compiling entry function" in line:
            entry = line.split("'")[1]
        elif "spill stores" in line:
            spills = line.strip()
        elif "Used " in line and entry is not None:
            kernels[entry] = (int(line.split("Used ")[1].split()[0]), spills)
            entry = None
    return kernels


#: Where nvcc 13 allocates other registers than NVRTC, which compiles the suite's kernels
#: on the GPU host (the manifest holds NVRTC's: they set the occupancy the kernels get).
NVCC_REGS = {"gemv:gemv_n16": 128, "shortk:shortk_128x64_t8": 94,
             "shortk:shortk_64x128_t8": 94, "shortk:shortk_cols8": 40}


@needs_nvcc
@pytest.mark.parametrize("row", VARIANTS, ids=lambda v: v.key)
def test_every_variant_compiles_for_sm90_without_spills_at_its_occupancy(row,
                                                                         tmp_path: Path) -> None:
    regs, spills = _ptxas(source_path(row.source), row.config.defines, tmp_path)[row.entry]
    assert spills.startswith("0 bytes stack frame, 0 bytes spill"), spills
    expected = NVCC_REGS.get(row.key, row.config.regs)
    assert regs == expected or (
        hasattr(row.config, "blocks_per_sm")
        and dataclasses.replace(row.config, regs=regs).blocks_per_sm
        == row.config.blocks_per_sm), f"{row.key}: {regs} registers"


@needs_nvcc
@pytest.mark.parametrize("config", [c for c in STREAMK_CONFIGS
                                    if c.bm >= streamk.STREAMK_STAGED_ROWS],
                         ids=lambda c: c.name)
def test_rung_23s_staged_store_build_keeps_its_occupancy_without_spills(config,
                                                                       tmp_path: Path) -> None:
    defines = {**config.defines, "STAGED_STORE": 1}
    regs, spills = _ptxas(source_path("cuda/23_streamk.cu"), defines, tmp_path)["mm_23_streamk"]
    assert spills.startswith("0 bytes stack frame, 0 bytes spill"), spills
    assert dataclasses.replace(config, regs=regs).blocks_per_sm == config.blocks_per_sm, regs


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
