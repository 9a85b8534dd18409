"""The planners the catalogue names: from a problem to the launches (no GPU)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from mmsuite import catalogue, tensorcore
from mmsuite.cuda_dispatch import planners, tuning_file, variants
from mmsuite.cuda_dispatch.families import dot, shortk, splitk
from mmsuite.cuda_dispatch.families.gemv import GemvConfig
from mmsuite.cuda_dispatch.families.splitk import CONFIGS, RUNG21_CONFIG
from mmsuite.cuda_dispatch.families.streamk import STREAMK_CONFIGS
from mmsuite.cuda_dispatch.family import Candidate
from mmsuite.cuda_dispatch.tuning_file import entry_of, shape_key
from mmsuite.cuda_dispatch.variants import variant
from mmsuite.launch import GEMM_ARGS, DeviceFacts

H100 = DeviceFacts()


def _call(m: int, n: int, k: int, batch: int = 1) -> SimpleNamespace:
    return SimpleNamespace(m=m, n=n, k=k, batch=batch)


def _store(m: int, n: int, k: int, candidate: Candidate, batch: int = 1) -> Path:
    path = tuning_file.tuning_path(H100.name)
    tuning_file.store_tuning(path, H100.name, {shape_key(m, n, k, batch): entry_of(candidate)})
    return path


def test_the_catalogue_names_planners_as_functions_of_one_signature() -> None:
    named = {k.id: k.launch.planner for k in catalogue.kernels("cuda")
             if getattr(k.launch, "planner", None) is not None}
    assert named == {"cuda.21_splitk": planners.plan_splitk,
                     "cuda.22_adaptive": planners.plan_adaptive,
                     "cuda.23_streamk": planners.plan_streamk,
                     "cuda.24_gemv": planners.plan_gemv,
                     "cuda.25_tf32_mma": tensorcore.plan_tf32,
                     "cuda.26_fp32_accurate": tensorcore.plan_accurate,
                     "cuda.28_tf32_wgmma": tensorcore.plan_tf32_wgmma,
                     "cuda.29_fp32_accurate_wgmma": tensorcore.plan_accurate_wgmma,
                     "cuda.27_shortk": planners.plan_shortk,
                     "cuda.30_dot": planners.plan_dot}
    for planner in named.values():  # called as planner(call, device, override)
        parameters = inspect.signature(planner).parameters
        assert list(parameters)[:3] == ["call", "device", "override"]
        assert all(p.kind == p.KEYWORD_ONLY for p in list(parameters.values())[3:])


def test_split_plan_is_main_kernel_then_reduction_over_one_workspace() -> None:
    plan = planners.plan_splitk(_call(512, 512, 512), H100)
    info = plan.info["dispatch"]
    split = info["split"]
    assert split > 1 and len(plan.steps) == 2 and info["config"] == RUNG21_CONFIG.name
    main, reduce = plan.steps
    assert (main.entry, reduce.entry) == ("mm_21_splitk", "mm_21_reduce")
    assert main.grid == (4, 4, split) and main.block == (RUNG21_CONFIG.threads,)
    assert main.args == GEMM_ARGS + ("work", split)
    assert reduce.args == ("m", "n", "batch", "alpha", "work", "beta", "c", split)
    assert plan.workspace == split * 512 * 512 and info["choice"] == "model"


def test_unsplit_plan_is_one_launch_without_workspace() -> None:
    plan = planners.plan_splitk(_call(4096, 4096, 4096), H100)
    assert len(plan.steps) == 1 and plan.workspace == 0 and plan.steps[0].grid == (32, 32, 1)


def test_dynamic_shared_memory_is_passed_to_the_launch() -> None:
    big = CONFIGS["256x128x16_t8x8_lr2_s2"]
    plan = planners.plan_adaptive(_call(4096, 4096, 4096), H100,
                                  Candidate(variant("splitk", big), 2))
    assert plan.steps[0].smem == big.smem_bytes and plan.steps[1].smem == 0


def test_rung_22_follows_the_tuning_file_for_that_shape_only() -> None:
    tuned = Candidate(variant("splitk", CONFIGS["128x64x16_b3"]), 96)
    path = _store(128, 128, 65536, tuned)
    info = planners.plan_adaptive(_call(128, 128, 65536), H100).info["dispatch"]
    assert (info["config"], info["split"], info["choice"]) == ("128x64x16_b3", 96, "tuned")
    assert info["tuning_file"] == str(path)
    other = planners.plan_adaptive(_call(1024, 1024, 1024), H100).info["dispatch"]
    assert other["choice"] == "model" and other["tuning_file"] == str(path)
    # Rung 21 keeps its own tile and the model's split: the file belongs to rung 22.
    assert planners.plan_splitk(_call(128, 128, 65536), H100).info["dispatch"]["choice"] == (
        "model")


def test_a_tuned_streamk_entry_launches_rung_23s_kernels_and_fixup() -> None:
    _store(4097, 4097, 4097, Candidate(variant("streamk", STREAMK_CONFIGS[-1])))
    plan = planners.plan_adaptive(_call(4097, 4097, 4097), H100)
    main, fixup = plan.steps
    info = plan.info["dispatch"]
    assert (main.entry, fixup.entry) == ("mm_23_streamk", "mm_23_fixup")
    assert main.source == fixup.source == "cuda/23_streamk.cu"
    assert main.args == GEMM_ARGS + ("work", info["sk_ctas"], info["sk_tiles"])
    assert main.grid == (info["sk_ctas"] + info["dp_tiles"], 1, 1)
    assert fixup.grid[0] == info["sk_tiles"] and info["choice"] == "tuned"


def test_streamk_has_no_fixup_when_tiles_fill_whole_waves() -> None:
    config = STREAMK_CONFIGS[0]
    slots = H100.sms * config.blocks_per_sm
    plan = planners.plan_streamk(_call(config.bm * slots, config.bn, 64), H100)
    assert len(plan.steps) == 1 and plan.info["dispatch"]["sk_ctas"] == 0


@pytest.mark.parametrize(("m", "name", "staged"), [
    (4097, "256x128x16", True), (4097, "128x64x16_b3", True), (4096, "256x128x16", False),
    (4097, "64x64x16_t4x8_lr8", False)])
def test_rung_23_is_built_to_stage_c_where_m_is_misaligned_and_its_tiles_are_tall(
        m: int, name: str, staged: bool) -> None:
    """Rung 23's tiles of 128 rows or more store a misaligned C through shared memory: a
    build of their own (STAGED_STORE), both of the plan's launches, so that the aligned
    build stays as it was."""
    config = next(c for c in STREAMK_CONFIGS if c.name == name)
    plan = planners.plan_adaptive(_call(m, 1000, 300), H100,
                                  Candidate(variant("streamk", config)))
    for step in plan.steps:
        assert (("STAGED_STORE", 1) in step.defines) == staged
        assert dict(step.defines).items() >= config.defines.items()


def test_an_override_is_forced_by_argument_and_checked() -> None:
    forced = Candidate(variant("splitk", CONFIGS["32x32x16_t4x4_lr4"]), 3)
    info = planners.plan_adaptive(_call(512, 512, 512), H100, forced).info["dispatch"]
    assert (info["config"], info["split"], info["choice"]) == ("32x32x16_t4x4_lr4", 3, "forced")
    with pytest.raises(ValueError, match="cannot run"):
        planners.plan_adaptive(_call(512, 512, 512), H100,
                               Candidate(variant("gemv", GemvConfig("n", 1)), 1))


@pytest.mark.parametrize("m,n,entry", [(8192, 1, "mm_24_gemv_n"), (4, 8192, "mm_24_gemv_m")])
def test_rung_22_sends_skinny_products_to_rung_24(m: int, n: int, entry: str) -> None:
    plan = planners.plan_adaptive(_call(m, n, 8192), H100)
    assert plan.steps[0].entry == entry and plan.steps[0].source == "cuda/24_gemv.cu"
    split, fused = plan.info["dispatch"]["split"], "FUSED" in dict(plan.steps[0].defines)
    assert plan.steps[0].grid[1] == split
    assert len(plan.steps) == (2 if split > 1 and not fused else 1)


def test_a_fused_gemv_plan_is_one_launch_with_its_counters_after_the_slices() -> None:
    plan = planners.plan_adaptive(_call(8192, 1, 8192), H100, Candidate(
        variant("gemv", GemvConfig("n", 1, fused=True)), 8))
    (step,) = plan.steps
    assert dict(step.defines) == {"SKINNY": 1, "FUSED": 1} and step.grid == (64, 8, 1)
    assert plan.workspace == 8 * 8192 + 64  # the slices, then one counter per tile


def test_rung_22_sends_short_k_to_rung_27_where_the_model_ranks_it_first() -> None:
    plan = planners.plan_adaptive(_call(3021, 292, 2), H100,
                                  Candidate(variant("shortk", shortk.SHORTK_CONFIGS[0])))
    (step,) = plan.steps
    assert step.entry == "mm_27_shortk" and step.source == "cuda/27_shortk.cu"
    assert step.grid == (-(-3021 // 128), -(-292 // 64), 1) and step.block == (256,)
    assert plan.workspace == 0 and step.args == GEMM_ARGS
    alone = planners.plan_shortk(_call(3021, 292, 2), H100)
    assert alone.steps[0].entry == "mm_27_shortk"


def test_a_dot_plan_is_one_launch_a_block_per_tile_and_slice() -> None:
    plan = planners.plan_adaptive(_call(22, 1, 4378, 3), H100,
                                  Candidate(variant("dot", dot.DOT_CONFIG), 8))
    (step,) = plan.steps
    assert step.entry == "mm_30_dot" and step.grid == (6, 8, 3) and step.block == (256,)
    assert step.args == GEMM_ARGS + ("work", 548)  # K per slice
    assert plan.workspace == 3 * 8 * 22 + 6 * 3  # the slices, then a counter per tile
    whole = planners.plan_dot(_call(2, 1, 300), H100)
    assert whole.info["dispatch"]["split"] == 1 and whole.workspace == 0


def test_rung_24_alone_covers_wide_products_sixteen_columns_at_a_time() -> None:
    plan = planners.plan_gemv(_call(35, 79, 19, 3), H100)
    grid, config = plan.steps[0].grid, plan.info["dispatch"]["config"]
    assert config in ("gemv_n16", "gemv_n16f", "gemv_n16_r32", "gemv_n16_r32f")
    rows = 32 if "_r32" in config else 128
    assert plan.steps[0].entry == "mm_24_gemv_n" and (grid[0], grid[2]) == (-(-35 // rows), 3 * 5)


def test_nothing_in_the_dispatcher_or_tune_writes_the_environment() -> None:
    package = Path(planners.__file__).parent
    sources = [*package.glob("*.py"), package.parent / "commands" / "tune.py"]
    writes = re.compile(r"os\.environ\[[^]]+\]\s*=|os\.environ\.(pop|update|setdefault)|putenv")
    for path in sources:
        assert not writes.search(path.read_text()), path


def test_a_problem_no_plan_can_launch_is_a_launch_limit_not_a_bug() -> None:
    from mmsuite.launch import LaunchLimit

    with pytest.raises(LaunchLimit, match="grid limits"):
        planners.plan_splitk(_call(1, 128 * 70000, 64, 1), H100)


@pytest.mark.parametrize("m,n,k,family", [(4051, 2049, 1, "shortk"), (2, 1, 9000, "dot"),
                                          (8192, 1, 8192, "gemv")])
def test_rung_22_ranks_every_family_of_the_manifest(m: int, n: int, k: int,
                                                    family: str) -> None:
    """The model's choice among all of them: each family wins somewhere (here with the
    starting figures, which already favour rung 27 on stores and rung 30 on few outputs)."""
    assert planners.decide(m, n, k, 1, H100).candidate.family == family
    assert variants.FAMILIES == ("splitk", "streamk", "gemv", "shortk", "dot")


_SHIPPED = Path(planners.__file__).resolve().parent.parent / "tuning"


@pytest.mark.parametrize("m,n,k", [(4051, 2049, 1), (10467, 6132, 5), (4072, 711, 3)])
def test_with_the_shipped_h100_model_rung_22_sends_short_k_to_rung_27(
        m: int, n: int, k: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Column-major sizes of row-major problems drawn by a judge, where C's stores were the
    work, M was not a multiple of 4 and every tile of rungs 20-23 ran at 23% to 76% of
    cuBLAS on the H100 (2049x4051x1: 53 to 75 us, cuBLAS 17) while they stored scalars:
    with K this short rung 27, which stores whole columns, still leads."""
    monkeypatch.setattr(tuning_file, "BUNDLED_DIR", _SHIPPED)
    decision = planners.decide(m, n, k, 1, H100)
    assert decision.source == "model" and decision.candidate.family == "shortk"


@pytest.mark.parametrize("m,n,k", [(9977, 131, 6), (65, 3244, 2)])
def test_with_the_shipped_h100_model_a_misaligned_c_with_k_a_few_goes_to_rung_27(
        m: int, n: int, k: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """M not a multiple of 4 and K of a few: a tile's outputs go through shared memory and
    out in scalar stores after its FMAs, time the SM spends on each, and rung 27 was faster
    (H100, suite timer, cuBLAS in the same run: 131x9977x6 row-major shortk_128x32_t4 5.2
    us, the 64x64x16_t4x8_lr8 tile the model had picked 6.4, cuBLAS 6.5; 3244x65x2 3.1 us
    against the same tile's 3.6, cuBLAS 3.6)."""
    monkeypatch.setattr(tuning_file, "BUNDLED_DIR", _SHIPPED)
    decision = planners.decide(m, n, k, 1, H100)
    assert decision.source == "model" and decision.candidate.family == "shortk"


@pytest.mark.parametrize("m,n,k", [(1293, 3602, 74), (234, 13780, 79), (445, 15002, 221)])
def test_with_the_shipped_h100_model_a_misaligned_c_with_k_moderate_takes_a_tile(
        m: int, n: int, k: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """M not a multiple of 4, K moderate, C large: rung 21's tiles store C through shared
    memory, and one of them leads (H100, suite timer, cuBLAS in the same run: 1293x3602x74
    128x64x16_s2_b3 30.9 us against rung 27's 37.7, cuBLAS 28.4; 234x13780x79 128x128x16
    21.9 us, cuBLAS 21.1, where the tiles' scalar stores took 35 to 51)."""
    monkeypatch.setattr(tuning_file, "BUNDLED_DIR", _SHIPPED)
    decision = planners.decide(m, n, k, 1, H100)
    assert decision.source == "model" and decision.candidate.family == "splitk"


@pytest.mark.parametrize("m,n,k,batch", [(4242, 2352, 15, 4), (2470, 347, 25, 25)])
def test_with_the_shipped_h100_model_short_k_batches_leave_the_largest_tiles(
        m: int, n: int, k: int, batch: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batched products with K short, C of many waves: the 256x128 and 128x256 tiles' one or
    two blocks an SM lost to smaller ones on the H100 (suite timer: batch 4 of 2352x4242x15
    86.3 us against 77.8 for 128x128x16; batch 25 of 347x2470x25 71.0 against 66.0)."""
    monkeypatch.setattr(tuning_file, "BUNDLED_DIR", _SHIPPED)
    config = planners.decide(m, n, k, batch, H100).candidate.config
    assert config.bm * config.bn < 256 * 128


def test_with_the_shipped_h100_model_a_short_k_tile_grid_covers_the_sms(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """1989x1020x16 row-major (M a multiple of 4, K = 16: the tiles store as fast as rung
    27): the 128x256 tile's 64 blocks took 10 us on the H100 where rung 21's 128 took 7.
    Once stores are modelled at the rate aligned tiles reach, the pick fills every SM."""
    monkeypatch.setattr(tuning_file, "BUNDLED_DIR", _SHIPPED)
    candidate = planners.decide(1020, 1989, 16, 1, H100).candidate
    config = candidate.config
    assert candidate.family in ("splitk", "streamk") and isinstance(config, splitk.Config)
    assert -(-1020 // config.bm) * -(-1989 // config.bn) * candidate.split >= H100.sms


def test_with_the_shipped_h100_model_k_past_64_stays_off_rung_27_with_a_skinny_side(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Batch 51 of 2697x9x73 row-major: rung 27's blocks hold 9 useful rows and take K in
    three chunks; it ran 2.2x slower than rung 23 on the H100, so K past 64 is offered to
    it only where no side is skinny."""
    monkeypatch.setattr(tuning_file, "BUNDLED_DIR", _SHIPPED)
    assert shortk.shortk_max_k(9, 2697) == shortk.MAX_K_UNALIGNED < 73
    assert planners.decide(9, 2697, 73, 51, H100).candidate.family != "shortk"


@pytest.mark.parametrize("m,n,k,batch,config", [
    (13, 1, 39, 1, "dot_4x4"),  # tiny: rung 30's one block, 2.7 us
    (1, 2, 68, 3, "dot_4x4"),
    (15, 8994, 6, 23, "shortk_cols16"),  # M of 15, C wide and batched
    (7, 12000, 120, 64, None),
])
def test_with_the_shipped_h100_model_tiny_and_small_m_products_leave_rung_27s_tiles(
        m: int, n: int, k: int, batch: int, config: str | None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Column-major sizes of calibration shapes timed on the H100: a tiny product took 2.7
    us with rung 30 (cuBLAS 3.0) and 5.7 to 7.9 with rung 27's 128-row tiles, whose staging
    passes lie on the one block's path; with M of 15 or 7 and N wide, the whole-column
    variants took 11.3 and 202 us (cuBLAS 13.7 and 204, the 128-row tiles 30 and 935)."""
    monkeypatch.setattr(tuning_file, "BUNDLED_DIR", _SHIPPED)
    chosen = planners.decide(m, n, k, batch, H100).candidate.config
    assert not (isinstance(chosen, shortk.ShortKConfig) and not chosen.cols)
    assert config is None or chosen.name == config
