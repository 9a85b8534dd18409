"""The cost model: what it prefers, how it is fitted and scored (no GPU)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from mmsuite.cuda_dispatch import costs, model, tuning_file, variants
from mmsuite.cuda_dispatch.costs import Parameters
from mmsuite.cuda_dispatch.families import gemv, shortk, splitk, streamk
from mmsuite.cuda_dispatch.families.splitk import CONFIGS, RUNG21_CONFIG
from mmsuite.cuda_dispatch.family import Candidate
from mmsuite.cuda_dispatch.model import Timing, estimate_seconds
from mmsuite.cuda_dispatch.variants import variant
from mmsuite.launch import DeviceFacts

H100 = DeviceFacts()
SHIPPED = Path(model.__file__).parent.parent / "tuning"  # the model files mmsuite ships


def _shipped_h100() -> Parameters:
    path = SHIPPED / "nvidia-h100-80gb-hbm3.model.json"
    return Parameters.from_dict(tuning_file.load_model(path)["parameters"], str(path))


def _best(m: int, n: int, k: int, batch: int = 1, device: DeviceFacts = H100,
          **choice) -> Candidate:
    found = variants.candidates(m, n, k, batch, device, **choice)
    return model.ranked(found, m, n, k, batch, device, costs.STARTING)[0][1]


def test_big_squares_take_big_tiles_and_no_split() -> None:
    for size in (2048, 4096, 8192):
        best = _best(size, size, size)
        assert best.split == 1 and best.config.bm * best.config.bn >= 128 * 128


def test_tall_k_is_split_until_every_sm_has_work() -> None:
    best = _best(128, 128, 65536, families=("splitk",))
    assert -(-128 // best.config.bm) * -(-128 // best.config.bn) * best.split >= H100.sms


def test_fewer_sms_need_fewer_slices() -> None:
    small = DeviceFacts("small", 16, 1500)
    rung21 = {"families": ("splitk",), "configs": (RUNG21_CONFIG,)}
    assert (_best(128, 128, 65536, 1, small, **rung21).split
            < _best(128, 128, 65536, 1, H100, **rung21).split)


def test_sizes_that_force_scalar_loads_cost_large_blocks_more() -> None:
    # At 4097^3 every A column is misaligned and loads go scalar: on the H100 the
    # 512-thread tile kept 74% of its 4096^3 speed, the 128-thread 64x128 tile 92%.
    def slowdown(name: str) -> float:
        c = Candidate(variant("splitk", CONFIGS[name]))
        return estimate_seconds(c, 4097, 4097, 4097) / estimate_seconds(c, 4096, 4096, 4096)

    assert slowdown("256x128x16_t8x8_lr2") > slowdown("64x128x16_b3") > 1.0


def test_skinny_products_go_to_rung_24_and_others_never_do() -> None:
    for m, n in ((8192, 1), (4, 8192), (8192, 8)):
        assert _best(m, n, 8192).family == "gemv"
    assert all(c.family != "gemv" for c in variants.candidates(4096, 17, 4096))


def test_a_split_pays_for_its_reduction() -> None:
    tile = variant("splitk", CONFIGS["128x128x16"])
    one, two = Candidate(tile, 1), Candidate(tile, 2)
    # 256 tiles of 8192^2 fill the SMs: a second slice only adds the reduction's bytes.
    assert estimate_seconds(two, 2048, 2048, 8192) > estimate_seconds(one, 2048, 2048, 8192)


def _synthetic(truth: Parameters, shapes: list[tuple[int, int, int, int]],
               **choice) -> list[Timing]:
    out = []
    for m, n, k, batch in shapes:
        for c in variants.candidates(m, n, k, batch, H100, **choice)[::7]:
            out.append(Timing(m, n, k, batch, c, estimate_seconds(c, m, n, k, batch, H100,
                                                                   truth)))
    return out


SHAPES = [(4096, 4096, 4096, 1), (512, 512, 512, 1), (128, 128, 65536, 1), (8192, 1, 8192, 1),
          (4097, 4097, 4097, 1), (1000, 1000, 1000, 8), (300, 7000, 90, 1), (6, 3000, 5000, 1)]


def test_fit_recovers_the_parameters_that_made_the_timings() -> None:
    truth = dataclasses.replace(costs.STARTING, shared={**costs.SHARED_DEFAULTS,
                                                       "launch_s": 4e-6, "gemv_bandwidth": 0.7,
                                                       "store_bytes_per_s": 1.5e12})
    timings = _synthetic(truth, SHAPES)
    assert model.log_error(timings, H100, costs.STARTING) > 0.02
    fitted = model.fit(timings, H100, prior_weight=0.0, iterations=30)
    assert model.log_error(timings, H100, fitted) < 0.2 * model.log_error(
        timings, H100, costs.STARTING)
    assert fitted.source == "fitted"


def test_a_tile_whose_stores_are_slow_loses_short_k_once_fitted() -> None:
    """With K short, C's stores are nearly all the time, and a shared store rate models
    every tile alike: the pick falls to whatever computes fastest. A fitted store share
    per variant tells them apart (on the H100 the 128x256 tile stored 1.6x slower than
    rung 23's 128x64 one at 15443x1914x1)."""
    held_out = (1914, 15443, 1, 1)
    tiles = {"families": ("splitk", "streamk")}  # rung 27 aside: the tiles' own shares
    big = _best(*held_out, **tiles).variant.key  # the tile the starting figures pick
    truth = dataclasses.replace(costs.STARTING, store={big: 0.3})
    fitting = [(1500, 9000, 2, 1), (3000, 3000, 16, 1), (900, 20000, 8, 1),
               (4096, 2048, 32, 1), (2000, 6000, 4, 2)]
    timings = _synthetic(truth, fitting, **tiles) + [
        Timing(*shape, c, estimate_seconds(c, *shape, H100, truth))
        for shape in fitting for c in variants.candidates(*shape, H100)
        if c.variant.key == big]
    fitted = model.fit(timings, H100, prior_weight=0.0, iterations=30)
    assert fitted.store_share(big) < 0.6
    found = variants.candidates(*held_out, H100, **tiles)
    pick = model.ranked(found, *held_out, H100, fitted)[0][1]
    assert pick.variant.key != big


def test_plain_and_large_stream_k_tiles_store_a_misaligned_c_at_the_staged_share() -> None:
    """Where M is not a multiple of 4, rung 21's plain tiles and rung 23's tiles of 128 rows
    or more store C through shared memory (``staged_store``, over their turns at the
    buffers); rung 23's smaller tiles and the fused tiles' last blocks store scalars
    (``unaligned_store``)."""
    params = dataclasses.replace(costs.STARTING, shared={
        **costs.SHARED_DEFAULTS, "staged_store": 1.0, "unaligned_store": 0.2})
    store_bound = (4097, 8192, 1)  # K 1: C's stores are the time

    def seconds(family: str, name: str, m: int) -> float:
        config = next(c for c in splitk.SEARCH + streamk.STREAMK_CONFIGS
                      + splitk.FUSED_CONFIGS if c.name == name)
        split = 2 if config.fused else 1
        return estimate_seconds(Candidate(variant(family, config), split), m,
                                *store_bound[1:], 1, H100, params)

    for family, name, slowed in (("splitk", "128x128x16", False),
                                 ("streamk", "128x128x8", False),
                                 ("streamk", "64x64x16_t4x8_lr8", True),
                                 ("splitk", "64x64x16_t4x8_lr8_f", True)):
        ratio = seconds(family, name, 4097) / seconds(family, name, 4096)
        assert (ratio > 3) == slowed, (family, name, ratio)
    turns = seconds("splitk", "128x128x8", 4097) / seconds("splitk", "128x128x8", 4096)
    assert 1.5 < turns < 2.5  # two turns at the shared buffers: half the store rate


def test_a_staged_store_costs_the_sm_time_per_output_of_the_staging_tiles() -> None:
    """Where M is not a multiple of 4, rung 21's plain tiles (and rung 23's of 128 rows or
    more, in their whole tiles) pass each output through shared memory and out in a scalar
    store after their FMAs: ``staged_epilogue_s`` of an SM's time per output of each block
    (padding included). An aligned M, rung 23's smaller tiles and the fused tiles (scalar
    stores of C) pay none of it."""
    def params(per_output: float) -> Parameters:
        return dataclasses.replace(costs.STARTING, shared={
            **costs.SHARED_DEFAULTS, "staged_epilogue_s": per_output})

    dims = (8192, 256, 1)  # N, K, batch: K long enough that the SMs' time is the work

    def extra(family: str, name: str, m: int) -> float:
        config = next(c for c in splitk.SEARCH + streamk.STREAMK_CONFIGS
                      + splitk.FUSED_CONFIGS if c.name == name)
        candidate = Candidate(variant(family, config), 2 if config.fused else 1)
        return (estimate_seconds(candidate, m, *dims, H100, params(1e-10))
                - estimate_seconds(candidate, m, *dims, H100, params(1e-13)))

    tile = CONFIGS["128x128x16"]  # 33 x 64 blocks, two an SM: eight whole waves
    outputs = -(-4097 // tile.bm) * tile.bm * 8192
    assert 0.8 < extra("splitk", "128x128x16", 4097) / (outputs * 1e-10 / H100.sms) < 1.05
    assert extra("splitk", "128x128x16", 4096) == 0.0
    assert extra("streamk", "128x128x8", 4097) > 0.0
    assert extra("streamk", "128x128x8", 4096) == 0.0
    assert extra("streamk", "64x64x16_t4x8_lr8", 4097) == 0.0
    assert extra("splitk", "64x64x16_t4x8_lr8_f", 4097) == 0.0


def test_ranking_accuracy_compares_the_pick_with_the_measured_fastest() -> None:
    fast, slow = (Candidate(variant("splitk", CONFIGS[name]))
                  for name in ("256x128x16_t8x8_lr2_s2", "32x32x16_t4x4_lr4"))
    # The model picks the big tile at 4096^3; say it measured 10% slower than the small one.
    rows = [Timing(4096, 4096, 4096, 1, fast, 1.1e-3), Timing(4096, 4096, 4096, 1, slow, 1e-3)]
    score = model.ranking_accuracy(rows, H100, costs.STARTING)
    assert (score.problems, score.top1, score.within_3pct) == (1, 0.0, 0.0)
    assert score.worst_loss == pytest.approx(0.1) and score.pair_order == 0.0
    rows[0] = Timing(4096, 4096, 4096, 1, fast, 0.9e-3)
    assert model.ranking_accuracy(rows, H100, costs.STARTING).top1 == 1.0


def test_parameters_round_trip_and_the_users_model_wins(_tuning_dir: Path) -> None:
    fitted = dataclasses.replace(costs.STARTING, efficiency={"splitk:128x128x16": 0.5},
                                 latency={"splitk:128x128x16": 2e-6},
                                 store={"splitk:128x128x16": 0.7})
    again = Parameters.from_dict(json.loads(json.dumps(fitted.to_dict())))
    assert again.to_dict() == fitted.to_dict()
    assert model.parameters_for(H100.name) is costs.STARTING  # no file anywhere
    shipped = tuning_file.BUNDLED_DIR / "nvidia-h100-80gb-hbm3.model.json"
    tuning_file.store_model(shipped, H100.name, {"shared": {"launch_s": 5e-6}})
    assert model.parameters_for(H100.name)["launch_s"] == 5e-6
    user = tuning_file.model_path(H100.name)
    tuning_file.store_model(user, H100.name, fitted.to_dict())
    read = model.parameters_for(H100.name)
    assert read.efficiency == {"splitk:128x128x16": 0.5} and read.source == str(user)


@pytest.mark.parametrize("dims,family", [
    ((1914, 15443, 1, 1), "shortk"),  # C's stores the work, M misaligned: rung 27
    # K 42, M misaligned: the tiles since they store C through shared memory (H100, suite
    # timer: 256x64x16 16.6 us, 128x128x16 16.6, rung 27's best 18.8; scalar stores: 43.5).
    ((3562, 988, 42, 1), "splitk"),
    ((2, 1, 2273, 1), "dot"),  # two outputs, K long: rung 30
    ((1, 22, 4378, 1), "dot"),
    ((4096, 4096, 4096, 1), "splitk"),
])
def test_the_shipped_h100_model_sends_short_k_to_rung_27_and_few_outputs_to_rung_30(
        dims: tuple[int, int, int, int], family: str) -> None:
    params = _shipped_h100()
    found = variants.candidates(*dims, H100)
    assert model.ranked(found, *dims, H100, params)[0][1].family == family


@pytest.mark.parametrize("config,dims,measured_us", [
    # M misaligned: C through shared memory (scalar stores took 230.6, 43.4, 76.2, 69.9 us)
    ("128x128x8_s2", (1914, 15443, 1), 50.9),
    ("128x128x8", (483, 9384, 1), 22.1),  # two turns at the shared buffers
    ("128x128x8_s2", (2999, 3001, 7), 20.1),
    ("256x128x16", (4093, 2047, 16), 22.1),
    ("128x256x8_s2", (8192, 8192, 4), 91.5),  # M a multiple of 4: float4 stores
    ("128x256x16", (4096, 4096, 16), 34.5),
])
def test_the_shipped_h100_model_stores_c_at_the_rate_the_tiles_reached(
        config: str, dims: tuple[int, int, int], measured_us: float) -> None:
    """With K short the tiles' time is C's stores, which take a path of their own where M is
    not a multiple of 4 (through shared memory, the warps in turns where the buffers hold
    too few): the shipped model is within 40% of what the H100 measured (suite timer) on
    both sides."""
    params = _shipped_h100()
    tile = next(c for c in splitk.SEARCH if c.name == config)
    modelled = estimate_seconds(Candidate(variant("splitk", tile)), *dims, 1, H100, params)
    assert 1 / 1.4 < modelled * 1e6 / measured_us < 1.4


def test_rung_27s_blocks_compute_their_padding_and_wait_for_their_staging_rounds() -> None:
    """M = 7 in a 128-row block is 128 rows of FMAs: the 8-row whole-column variant is
    modelled several times faster (on the H100, 202 us against 935 at batch 64 of
    7x12000x120); and each K chunk adds the variant's rounds of staging loads, more for the
    tiles (passes one after another) than for the whole-column variant (unrolled)."""
    tile = Candidate(variant("shortk", shortk.SHORTK_CONFIGS[1]))  # 128 x 32
    cols = Candidate(variant("shortk", next(c for c in shortk.SHORTK_CONFIGS
                                            if c.cols and c.bm == 8)))
    assert estimate_seconds(tile, 7, 12000, 120, 64) > 3 * estimate_seconds(
        cols, 7, 12000, 120, 64)
    params = Parameters(shared={**costs.SHARED_DEFAULTS, "shortk_round_s": 1e-6})
    for candidate in (tile, cols):
        extra = (estimate_seconds(candidate, 3, 5, 33, 1, params=params)
                 - estimate_seconds(candidate, 3, 5, 32, 1, params=params))
        assert extra == pytest.approx(candidate.config.staging_rounds * 1e-6, rel=0.05)
    assert tile.config.staging_rounds == 8 and cols.config.staging_rounds == 2


def test_rung_24s_blocks_past_what_the_sms_hold_run_in_a_second_wave() -> None:
    """gemv_n16 and gemv_n16f hold 4 blocks an SM (528 on the H100): 66 row blocks of 128
    in 8 slices fill one wave; 67 leave 8 blocks for a second wave, whose rounds of loads
    cost as the first's (on the H100, 74 row blocks with K 6144: gemv_n16 in 4 slices
    121.5 us, in 8 140.1)."""
    params = model.parameters_for(H100.name)
    n16, n16f = (next(c for c in gemv.GEMV_CONFIGS if c.name == name)
                 for name in ("gemv_n16", "gemv_n16f"))

    def seconds(config: gemv.GemvConfig, m: int, split: int = 8) -> float:
        return estimate_seconds(Candidate(variant("gemv", config), split), m, 16, 6144, 1,
                                H100, params)

    for config in (n16, n16f):
        assert config.blocks_per_sm == 4
        assert seconds(config, 67 * 128) > 1.25 * seconds(config, 66 * 128)
    assert seconds(n16, 74 * 128, 4) < seconds(n16, 74 * 128, 8)


@pytest.mark.parametrize(("m", "n", "k", "faster", "slower"), [
    # (column-major sizes; H100, suite timer: the faster plan's us, then the slower's)
    (9732, 14, 13315, ("gemv_n16", 4, 250.2), ("gemv_n16", 8, 278.1)),
    (9426, 16, 6010, ("gemv_n16", 4, 119.9), ("gemv_n16", 8, 137.2)),
    (4096, 16, 4096, ("gemv_n16", 16, 39.7), ("gemv_n16", 8, 44.7)),
    (14277, 16, 1813, ("gemv_n16", 4, 55.1), ("gemv_n16", 2, 67.1)),
])
def test_rung_24s_16_column_blocks_need_twice_the_grid_to_stream_as_fast(
        m: int, n: int, k: int, faster: tuple, slower: tuple) -> None:
    """gemv_n16's round of loads steps K 16 at a time, the narrower variants' 32: a grid of
    its blocks holds half the bytes in flight, so it streams A at full rate only with twice
    the blocks (more slices), up to the 528 blocks one wave holds (9732 and 9426 rows in 8
    slices are 616 and 592 blocks), as the H100 measured (the plans' times in the
    parameters): the shipped model orders each pair so."""
    params = _shipped_h100()

    def seconds(plan: tuple) -> float:
        config = next(c for c in gemv.GEMV_CONFIGS if c.name == plan[0])
        return estimate_seconds(Candidate(variant("gemv", config), plan[1]), m, n, k, 1, H100,
                                params)

    assert faster[2] < slower[2]
    assert seconds(faster) < seconds(slower)


def test_the_shipped_h100_model_takes_a_two_warp_tile_for_a_few_hundred_thousand_outputs(
        ) -> None:
    """Batch 12 of 24x3742x1244 (column-major 3742 x 24): C has 90 thousand outputs a
    matrix and K is long. On the H100 (suite timer) the unsplit 64x32 tile of two warps took
    131.7 us and the 32x32 tile in 3 slices, the pick before it existed, 167.7: the shipped
    model orders them so."""
    params = _shipped_h100()
    two_warps = Candidate(variants.BY_KEY["splitk:64x32x16_t4x8_lr8"], 1)
    small = Candidate(variants.BY_KEY["splitk:32x32x16_t4x4_lr4"], 3)
    dims = (3742, 24, 1244, 12)
    assert two_warps.config.threads == 64 and two_warps.config.blocks_per_sm == 8
    assert estimate_seconds(two_warps, *dims, H100, params) < estimate_seconds(
        small, *dims, H100, params)


def test_an_h200_reads_its_own_shipped_model_fitted_to_its_timings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The H200 has the H100's SMs and clock but faster memory and a larger L2: its model
    was fitted to its own timings, starting from the H100's figures. On 3068 x 14 x 419
    (column-major; a held-back shape) the H200 took 13.5 us with gemv_n16f in 8 slices, the
    H100 figures' pick then, and 9.6 with the fused 32x32 tile in 4: the H200's figures
    order them so."""
    h200 = DeviceFacts("NVIDIA H200", memory_clock_mhz=3201, memory_bus_bits=6016,
                       l2_bytes=60 * 2**20)
    monkeypatch.setattr(tuning_file, "BUNDLED_DIR", SHIPPED)
    params = model.parameters_for(h200.name)
    assert params.source.endswith("nvidia-h200.model.json")
    assert params is not model.parameters_for(H100.name)
    gemv = Candidate(variants.BY_KEY["gemv:gemv_n16f"], 8)
    tile = Candidate(variants.BY_KEY["splitk:32x32x16_t4x4_lr4_f"], 4)
    dims = (3068, 14, 419, 1)
    assert estimate_seconds(tile, *dims, h200, params) < estimate_seconds(
        gemv, *dims, h200, params)


def test_the_shipped_h100_model_keeps_the_32x128_tile_for_16_rows_with_long_k() -> None:
    """4096x16x4096 row-major (column-major 16 x 4096): on the H100 (suite timer, two runs)
    the 32x128 tile in 16 slices took 43.8-44.5 us and the fused 32x64 tile in 16 took
    47.0-47.1. Fitted without shapes of so few rows and long K, the model had taken the
    latter; the shipped one takes the former."""
    params = _shipped_h100()
    wide = Candidate(variants.BY_KEY["splitk:32x128x16_t4x8_lr8"], 16)
    two_warps = Candidate(variants.BY_KEY["splitk:32x64x16_t4x8_lr8_f"], 16)
    dims = (16, 4096, 4096, 1)
    assert estimate_seconds(wide, *dims, H100, params) < estimate_seconds(
        two_warps, *dims, H100, params)


def test_a_narrow_gemv_block_without_figures_of_its_own_takes_its_wide_siblings() -> None:
    """A model file fitted before the N side's 32-row blocks (the H200's) ranks them with the
    figures of the 128-row block of their width; their own figures, where fitted, come first."""
    wide = dataclasses.replace(costs.STARTING, efficiency={"gemv:gemv_n8": 0.7},
                               latency={"gemv:gemv_n8f": 2e-6}, unaligned={"gemv:gemv_n8": 0.5})
    narrow_f = variants.BY_KEY["gemv:gemv_n8_r32f"].config
    assert wide.rate("gemv:gemv_n8_r32f", narrow_f) == 0.7
    assert wide.misaligned("gemv:gemv_n8_r32f", narrow_f) == 0.5
    assert gemv.round_seconds(wide, variants.BY_KEY["gemv:gemv_n8_r32f"].config) == 2e-6
    plain_r32 = variants.BY_KEY["gemv:gemv_n8_r32"].config
    assert gemv.round_seconds(wide, plain_r32) == wide["gemv_round_s"]  # the plain one's
    own = dataclasses.replace(wide, efficiency={**wide.efficiency, "gemv:gemv_n8_r32": 0.9})
    assert own.rate("gemv:gemv_n8_r32f", narrow_f) == 0.9


def test_a_narrow_gemv_block_pays_for_each_block_an_sm_runs_past_the_first() -> None:
    """The N side's 32- and 64-row blocks share an SM badly: with the crowding share at 0.3,
    a grid of two blocks an SM (rounded up) costs 1.3 times the estimate without it, a grid
    within one block an SM nothing; the 128-row blocks never pay it."""
    free = dataclasses.replace(costs.STARTING,
                               shared={**costs.STARTING.shared, "gemv_narrow_crowd": 0.0})
    crowded = dataclasses.replace(costs.STARTING,
                                  shared={**costs.STARTING.shared, "gemv_narrow_crowd": 0.3})

    def ratio(key: str, m: int) -> float:
        c = Candidate(variants.BY_KEY[key], 1)
        return (estimate_seconds(c, m, 8, 256, 1, H100, crowded)
                / estimate_seconds(c, m, 8, 256, 1, H100, free))

    assert gemv.gemv_grid(variants.BY_KEY["gemv:gemv_n8_r64"].config, 8892, 8, 1, 1) == (
        139, 1, 1)  # past the 132 SMs: two blocks on some
    assert ratio("gemv:gemv_n8_r64", 8892) == pytest.approx(1.3)
    assert ratio("gemv:gemv_n8_r32", 8892) == pytest.approx(1.6)  # 278 blocks: three
    assert ratio("gemv:gemv_n8_r64", 6207) == pytest.approx(1.0)  # 97 blocks
    assert ratio("gemv:gemv_n8", 8892) == pytest.approx(1.0)


def test_rung_24s_m_side_rounds_take_the_time_fitted_for_their_variant() -> None:
    """An M-side round of 16 rows holds four times the FMAs and reads of A per load that one
    of 4 rows does: a variant's own round time (its latency entry) replaces the shared one,
    and a fused variant without one takes its plain variant's."""
    shared = dataclasses.replace(costs.STARTING, latency={})
    own = dataclasses.replace(costs.STARTING, latency={"gemv:gemv_m16": 4e-6})
    fused = Candidate(variants.BY_KEY["gemv:gemv_m16f"], 8)
    plain = Candidate(variants.BY_KEY["gemv:gemv_m16"], 8)
    dims = (12, 2000, 16000, 1)  # few blocks, long slices: the rounds are the time
    assert gemv.round_seconds(own, variants.BY_KEY["gemv:gemv_m16f"].config) == 4e-6
    plain_m16 = variants.BY_KEY["gemv:gemv_m16"].config
    assert gemv.round_seconds(shared, plain_m16) == shared["gemv_round_s"]
    for plan in (plain, fused):
        assert estimate_seconds(plan, *dims, H100, own) > 1.5 * estimate_seconds(
            plan, *dims, H100, shared)


def test_an_sm_given_more_m_side_blocks_than_it_runs_at_pace_stretches_their_rounds() -> None:
    """138 blocks on 132 SMs leave six SMs two: with ``gemv_m_sm_blocks`` 1 the wave lasts two
    blocks' rounds where 132 blocks last one; the N side, and the default, see no crowd."""
    crowded = dataclasses.replace(costs.STARTING, shared={
        **costs.STARTING.shared, "gemv_m_sm_blocks": 1.0, "gemv_round_s": 1e-5})
    roomy = dataclasses.replace(crowded, shared={**crowded.shared, "gemv_m_sm_blocks": 64.0})
    m8 = Candidate(variants.BY_KEY["gemv:gemv_m8"], 1)
    # 128 columns a block: 132 and 138 blocks, rounds the whole time (K long, bytes few).
    full, over = (estimate_seconds(m8, 8, 128 * blocks, 8192, 1, H100, crowded)
                  for blocks in (H100.sms, H100.sms + 6))
    assert over > 1.8 * full
    assert estimate_seconds(m8, 8, 128 * (H100.sms + 6), 8192, 1, H100, roomy) < 1.1 * full
    n8 = Candidate(variants.BY_KEY["gemv:gemv_n8"], 1)
    assert estimate_seconds(n8, 128 * (H100.sms + 6), 8, 8192, 1, H100, crowded) == (
        estimate_seconds(n8, 128 * (H100.sms + 6), 8, 8192, 1, H100, roomy))


def test_the_m_side_rate_bends_towards_full_as_sharply_as_its_fill_power() -> None:
    """Past the blocks-per-SM need the M side keeps gaining (a soft bend, power 2), below it
    the rate is the share of the loads in flight; an infinite power is the hard min(1, share)
    and the default is within 0.1% of it."""
    shares = [0.05, 0.5, 0.9, 1.0, 1.1, 2.0, 5.0, 50.0]
    assert [costs.soft_fill(s, math.inf) for s in shares] == [min(1.0, s) for s in shares]
    for s in shares:
        assert costs.soft_fill(s, costs.SHARED_DEFAULTS["gemv_m_fill_power"]) == (
            pytest.approx(min(1.0, s), rel=1e-3))
    soft = [costs.soft_fill(s, 2.0) for s in shares]
    assert soft == sorted(soft) and all(f < min(1.0, s) for f, s in zip(soft, shares))
    assert costs.soft_fill(1.0, 2.0) == pytest.approx(2 ** -0.5)
    assert costs.soft_fill(50.0, 2.0) == pytest.approx(1.0, rel=1e-3)
    assert costs.soft_fill(1e-3, 2.0) == pytest.approx(1e-3, rel=1e-3)


def test_a_model_file_without_m_side_figures_gives_the_m_side_the_shared_ones() -> None:
    """Files fitted before the M side had a wave time and a blocks-per-SM figure of its own
    (the H200's) keep ranking its plans as they did."""
    old = Parameters.from_dict({"shared": {"gemv_wave_s": 3e-7, "gemv_blocks_per_sm": 0.5}})
    assert (old["gemv_m_wave_s"], old["gemv_m_blocks_per_sm"]) == (3e-7, 0.5)
    own = Parameters.from_dict({"shared": {"gemv_wave_s": 3e-7, "gemv_m_wave_s": 1e-6}})
    assert (own["gemv_wave_s"], own["gemv_m_wave_s"]) == (3e-7, 1e-6)


def test_rung_30_pays_for_each_round_of_blocks_past_the_first() -> None:
    """A batch of tiny products is thousands of short blocks: each round of them past what
    the SMs take at once costs ``dot_block_s``; a grid the SMs take in one round does not."""
    dot = Candidate(variants.BY_KEY["dot:dot_4x4"], 1)
    slow = dataclasses.replace(costs.STARTING,
                               shared={**costs.STARTING.shared, "dot_block_s": 1e-6})
    one_round = (8, 8, 64, H100.sms // 4)  # four tiles a matrix
    rounds = -(-(4 * 43) // H100.sms)
    assert estimate_seconds(dot, *one_round, H100, slow) == pytest.approx(
        estimate_seconds(dot, *one_round, H100, costs.STARTING), abs=1e-8)
    assert estimate_seconds(dot, 8, 8, 64, 43, H100, slow) == pytest.approx(
        estimate_seconds(dot, 8, 8, 64, 43, H100, costs.STARTING) + (rounds - 1) * 1e-6,
        rel=1e-3)


@pytest.mark.parametrize(("dims", "faster", "slower"), [
    # (column-major m, n, k, batch; H100, suite timer, rung 24's M side pipelined: the
    # faster plan and its us, then the slower: the pick of the model fitted before the M
    # side kept two rounds of loads in flight, or, for the named 8192x4x8192 and
    # 4096x16x4096, the plan a refit that freed their variants alone took)
    ((7, 6927, 7262, 1), ("gemv:gemv_m8f", 4, 103.1), ("splitk:32x128x16_t4x8_lr8", 24, 157.8)),
    ((8, 8717, 4589, 1), ("gemv:gemv_m8f", 16, 91.1), ("splitk:32x128x16_t4x8_lr8", 32, 124.5)),
    ((6, 3240, 161, 28), ("gemv:gemv_m8", 1, 35.2), ("splitk:32x128x16_t4x8_lr8", 1, 54.4)),
    ((13, 1818, 13878, 1), ("gemv:gemv_m16", 16, 72.2), ("splitk:32x128x16_t4x8_lr8", 24, 79.6)),
    ((13, 154, 8720, 1), ("splitk:32x32x16_t4x4_lr4_f", 46, 14.8), ("gemv:gemv_m16f", 32, 23.3)),
    ((4, 8192, 8192, 1), ("gemv:gemv_m4f", 2, 100.0), ("gemv:gemv_m4", 1, 105.9)),
    ((16, 4096, 4096, 1), ("splitk:32x128x16_t4x8_lr8", 16, 44.0), ("gemv:gemv_m16f", 8, 49.2)),
    ((31, 7, 3, 43), ("splitk:32x32x16_t4x4_lr4", 1, 2.9), ("dot:dot_4x4", 1, 5.1)),
    # The M side's grids keep gaining past their blocks-per-SM need (gemv_m_fill_power):
    # the pick of the model fitted with a hard bend (min(1, blocks in flight / need)) slower.
    ((1, 2514, 7498, 1), ("gemv:gemv_m1f", 8, 34.6), ("gemv:gemv_m1f", 4, 37.5)),
    ((4, 5000, 6000, 1), ("gemv:gemv_m4f", 2, 54.3), ("gemv:gemv_m4", 1, 61.0)),
    ((7, 6001, 4317, 44), ("gemv:gemv_m8", 1, 1890.2), ("splitk:32x128x16_t4x8_lr8", 3, 2496.4)),
])
def test_the_shipped_h100_model_orders_m_side_and_batched_plans_as_measured(
        dims: tuple, faster: tuple, slower: tuple) -> None:
    """Products whose skinny side is M (B streamed by rung 24's M-side kernel) and batches of
    tiny products, which no earlier fit had timed: draws of the skinny_m and batched sets
    (the first had run at 80% of cuBLAS). The shipped model, refitted on them, orders each
    pair as the H100 ran it."""
    params = _shipped_h100()

    def seconds(plan: tuple) -> float:
        return estimate_seconds(Candidate(variants.BY_KEY[plan[0]], plan[1]), *dims, H100,
                                params)

    assert faster[2] < slower[2]
    assert seconds(faster) < seconds(slower)
