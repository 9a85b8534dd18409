"""The CUDA dispatcher: tile configs, the split-K heuristic and tuning files (no GPU needed)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from mmsuite import dispatch
from mmsuite.dispatch import CONFIGS, Choice, Config, Device
from mmsuite.launch import GEMM_ARGS
from mmsuite.sources import source_path

H100 = Device("NVIDIA H100 80GB HBM3", 132, 1980)
NVCC = shutil.which("nvcc")


@pytest.fixture(autouse=True)
def _tuning_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test reads and writes tuning files in its own folder, never the user's cache."""
    folder = tmp_path / "tuning"
    monkeypatch.setenv(dispatch.TUNING_ENV, str(folder))
    monkeypatch.setattr(dispatch, "BUNDLED_DIR", tmp_path / "shipped")  # none, unless a test says
    return folder


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
    for config in CONFIGS.values():
        assert Config.from_params(config.params()) is config
    fresh = Config.from_params({"BM": 128, "BN": 128, "BK": 8, "STAGES": 2})
    assert fresh.stages == 2 and fresh not in CONFIGS.values()
    assert fresh.defines["STAGES"] == 2 and fresh.name == "128x128x8_s2"


def test_buffers_over_48kb_are_dynamic_shared_memory_the_launch_sizes() -> None:
    big = CONFIGS["256x128x16_t8x8_lr2_s2"]  # two 16-deep buffers of 256 + 132 columns
    assert big.smem_bytes == 2 * 16 * (256 + 128 + 4) * 4 > 48 * 1024
    assert big.smem_dynamic and big.defines["SMEM_DYNAMIC"] == 1
    plan = dispatch.plan(Choice(big, 2), dispatch.SOURCE, 4096, 4096, 1)
    assert plan.steps[0].smem == big.smem_bytes and plan.steps[1].smem == 0  # reduction
    small = CONFIGS["256x128x16_t8x8_lr2"]
    assert not small.smem_dynamic and "SMEM_DYNAMIC" not in small.defines
    assert dispatch.plan(Choice(small, 1), dispatch.SOURCE, 4096, 4096, 1).steps[0].smem == 0


def test_occupancy_follows_registers_and_threads() -> None:
    assert CONFIGS["128x128x16"].blocks_per_sm == 2  # rung 20: 128 registers x 256 threads
    assert CONFIGS["128x256x16"].blocks_per_sm == 1
    assert CONFIGS["64x128x16_b3"].blocks_per_sm == 3


def _ptxas(source: Path, config: Config, tmp_path: Path) -> dict[str, tuple[int, str]]:
    """(registers, spill line) of each kernel nvcc compiles from ``source`` with the config."""
    cmd = [NVCC, "-arch=sm_90", "-c", "-Xptxas", "-v", "-I", str(source.parent),
           *[f"-D{k}={v}" for k, v in config.defines.items()], "-o", str(tmp_path / "o.o"),
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


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH (install the CUDA toolkit)")
@pytest.mark.parametrize("config", dispatch.SEARCH, ids=lambda c: c.name)
def test_every_config_compiles_for_sm90_without_spills_at_its_occupancy(config: Config,
                                                                      tmp_path: Path) -> None:
    regs, spills = _ptxas(source_path(dispatch.SOURCE), config, tmp_path)[dispatch.MAIN_ENTRY]
    assert spills.startswith("0 bytes stack frame, 0 bytes spill"), spills
    # The model's occupancy holds for what the compiler allocated.
    compiled = dataclasses.replace(config, regs=regs)
    assert compiled.blocks_per_sm == config.blocks_per_sm, f"{config.name}: {regs} registers"


# --------------------------------------------------------------- heuristic
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
    for split in dispatch._splits(k, 16):
        slices = _k_slices(k, 16, split)
        assert slices[0][0] == 0 and slices[-1][1] == k
        assert all(a < b for a, b in slices), f"empty slice at split {split}"
        assert all(slices[i][1] == slices[i + 1][0] for i in range(split - 1))


def test_big_squares_take_big_tiles_and_no_split() -> None:
    for size in (2048, 4096, 8192):
        choice = dispatch.heuristic(size, size, size, 1, H100)
        assert choice.split == 1
        assert choice.config.bm * choice.config.bn >= 128 * 128


def test_tall_k_is_split_until_every_sm_has_work() -> None:
    choice = dispatch.heuristic(128, 128, 65536, 1, H100)
    blocks = -(-128 // choice.config.bm) * -(-128 // choice.config.bn) * choice.split
    assert blocks >= H100.sms


@pytest.mark.parametrize("m,n,k", [(512, 512, 512), (1024, 1024, 1024), (128, 8192, 8192)])
def test_small_grids_fill_the_sms(m: int, n: int, k: int) -> None:
    choice = dispatch.heuristic(m, n, k, 1, H100)
    blocks = -(-m // choice.config.bm) * -(-n // choice.config.bn) * choice.split
    # Rung 20 launches 16, 64 and 64 blocks here: at most half the SMs busy.
    assert min(blocks, H100.sms) >= 0.9 * H100.sms


def test_a_big_batch_needs_no_split() -> None:
    assert dispatch.heuristic(1000, 1000, 1000, 100, H100).split == 1


def test_fewer_sms_need_fewer_slices() -> None:
    small = Device("small", 16, 1500)
    assert dispatch.heuristic(128, 128, 65536, 1, small).split < dispatch.heuristic(
        128, 128, 65536, 1, H100).split


def test_workspace_cap_and_grid_limits_are_respected() -> None:
    assert not dispatch.fits(CONFIGS["128x128x16"], 2, 16384, 16384, 1)  # 2 GiB of partials
    assert not dispatch.fits(CONFIGS["128x128x16"], 1, 1, 128 * 70000, 1)  # grid y
    choice = dispatch.heuristic(8192, 8192, 8192, 4, H100)
    assert dispatch.fits(choice.config, choice.split, 8192, 8192, 4)


def test_restricted_heuristic_keeps_rung_21_tile() -> None:
    choice = dispatch.heuristic(512, 512, 512, 1, H100, [dispatch.RUNG21_CONFIG])
    assert choice.config is dispatch.RUNG21_CONFIG and choice.split > 1


def test_choice_geometry_and_info() -> None:
    choice = Choice(CONFIGS["128x128x16"], 4)
    assert choice.grid(130, 129, 3) == (2, 2, 12)
    assert choice.workspace_elems(130, 129, 3) == 3 * 4 * 130 * 129
    assert Choice(CONFIGS["128x128x16"], 1).workspace_elems(130, 129, 3) == 0
    info = choice.info()
    assert info["config"] == "128x128x16" and info["split"] == 4 and info["choice"] == "heuristic"
    assert info["params"]["BM"] == 128


# ------------------------------------------------------------- tuning files
def test_tuning_path_follows_the_environment(_tuning_dir: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    assert dispatch.tuning_path("NVIDIA H100 80GB HBM3") == (
        _tuning_dir / "nvidia-h100-80gb-hbm3.json")
    monkeypatch.delenv(dispatch.TUNING_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", "/somewhere")
    assert dispatch.tuning_dir() == Path("/somewhere/mmsuite/tuning")


def test_tuned_entry_overrides_the_heuristic_for_its_shape_only() -> None:
    untuned = dispatch.choose(512, 512, 512, 1, H100)
    assert untuned.source == "heuristic" and untuned.tuning_file is None
    other = next(c for c in CONFIGS.values() if c != untuned.config)
    path = dispatch.tuning_path(H100.name)
    dispatch.store_tuning(path, H100.name, {
        dispatch.shape_key(512, 512, 512, 1): {"params": other.params(), "split": 3}})
    tuned = dispatch.choose(512, 512, 512, 1, H100)
    assert (tuned.config, tuned.split, tuned.source) == (other, 3, "tuned")
    assert tuned.tuning_file == str(path)
    assert tuned.info()["tuning_file"] == str(path)
    elsewhere = dispatch.choose(1024, 1024, 1024, 1, H100)
    assert elsewhere.source == "heuristic" and elsewhere.tuning_file == str(path)
    # Another device reads its own file.
    assert dispatch.choose(512, 512, 512, 1, Device("Other GPU")).source == "heuristic"


def _ship(tmp_path: Path, entries: dict) -> Path:
    """A tuning file shipped for the H100 (in the test's stand-in for mmsuite/tuning/)."""
    path = dispatch.BUNDLED_DIR / "nvidia-h100-80gb-hbm3.json"
    dispatch.store_tuning(path, H100.name, entries)
    return path


def test_shipped_entry_applies_where_the_user_file_names_nothing(tmp_path: Path) -> None:
    shipped = _ship(tmp_path, {dispatch.shape_key(512, 512, 512, 1): {
        "params": CONFIGS["64x64x16_t4x8_lr8"].params(), "split": 4}})
    choice = dispatch.choose(512, 512, 512, 1, H100)
    assert (choice.config.name, choice.split, choice.source) == ("64x64x16_t4x8_lr8", 4, "tuned")
    assert choice.tuning_file == str(shipped)
    # A problem neither file names: the heuristic, and the record says which file was read.
    other = dispatch.choose(1024, 1024, 1024, 1, H100)
    assert other.source == "heuristic" and other.tuning_file == str(shipped)


def test_user_entry_wins_over_the_shipped_one(tmp_path: Path) -> None:
    key = dispatch.shape_key(512, 512, 512, 1)
    _ship(tmp_path, {key: {"params": CONFIGS["64x64x16_t4x8_lr8"].params(), "split": 4}})
    user = dispatch.tuning_path(H100.name)
    dispatch.store_tuning(user, H100.name, {key: {"params": CONFIGS["32x32x16_t4x4_lr4"].params(),
                                                  "split": 1}})
    choice = dispatch.choose(512, 512, 512, 1, H100)
    assert (choice.config.name, choice.split) == ("32x32x16_t4x4_lr4", 1)
    assert choice.tuning_file == str(user)


def test_shipped_files_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _ship(tmp_path, {dispatch.shape_key(512, 512, 512, 1): {
        "params": CONFIGS["64x64x16_t4x8_lr8"].params(), "split": 4}})
    monkeypatch.setenv(dispatch.BUNDLED_ENV, "0")
    choice = dispatch.choose(512, 512, 512, 1, H100)
    assert choice.source == "heuristic" and choice.tuning_file is None


def test_every_shipped_tuning_file_is_valid_for_its_device() -> None:
    folder = Path(dispatch.__file__).with_name("tuning")
    files = sorted(folder.glob("*.json"))
    assert files, f"no tuning file ships in {folder}"
    for path in files:
        data = dispatch.load_tuning(path)
        assert path.stem == dispatch.device_slug(data["device"])
        assert data["entries"], f"{path} has no entries"
        for key, entry in data["entries"].items():
            m, n, k, batch = (int(x) for x in key.split("x"))
            choice = dispatch.tuned_choice(entry, path)
            assert dispatch.fits(choice.config, choice.split, m, n, batch), (path, key)
            assert entry["confirmed_ms"] <= entry["heuristic"]["ms"], (path, key)


def test_tuned_streamk_entry_launches_rung_23s_kernels() -> None:
    path = dispatch.tuning_path(H100.name)
    variant = dispatch.STREAMK_CONFIGS[-1]
    dispatch.store_tuning(path, H100.name, {dispatch.shape_key(4097, 4097, 4097, 1): {
        "params": variant.params(), "split": 1, "streamk": True}})
    plan = dispatch.plan_adaptive("mm_21_splitk", dispatch.SOURCE, _call(4097, 4097, 4097),
                                  FACTS)
    assert plan.steps[0].entry == dispatch.STREAMK_ENTRY
    assert plan.steps[0].source == dispatch.STREAMK_SOURCE
    info = plan.info["dispatch"]
    assert (info["config"], info["choice"], info["tuning_file"]) == (variant.name, "tuned",
                                                                     str(path))
    # Rung 21 keeps its own tile: a stream-K entry does not apply to it.
    assert not dispatch.choose(4097, 4097, 4097, 1, H100, [dispatch.RUNG21_CONFIG]).streamk


def test_streamk_entry_must_name_a_streamk_variant() -> None:
    path = dispatch.tuning_path(H100.name)
    dispatch.store_tuning(path, H100.name, {"64x64x64x1": {
        "params": CONFIGS["128x128x16"].params(), "split": 1, "streamk": True}})
    with pytest.raises(dispatch.TuningFileError, match="stream-K variants"):
        dispatch.choose(64, 64, 64, 1, H100)


def test_tuned_entry_outside_a_restricted_rung_is_ignored() -> None:
    path = dispatch.tuning_path(H100.name)
    dispatch.store_tuning(path, H100.name, {dispatch.shape_key(512, 512, 512, 1): {
        "params": CONFIGS["64x64x16_t4x4_lr4"].params(), "split": 2}})
    choice = dispatch.choose(512, 512, 512, 1, H100, [dispatch.RUNG21_CONFIG])
    assert choice.config is dispatch.RUNG21_CONFIG and choice.source == "heuristic"


def test_store_merges_and_keeps_other_entries(_tuning_dir: Path) -> None:
    path = _tuning_dir / "gpu.json"
    dispatch.store_tuning(path, "gpu", {"1x1x1x1": {"params": {"BM": 32, "BN": 32, "TM": 4,
                                                                "TN": 4}, "split": 1}})
    data = dispatch.store_tuning(path, "gpu", {"2x2x2x1": {"params": {"BM": 64, "BN": 64,
                                                                       "TM": 4, "TN": 4},
                                                            "split": 1}})
    assert set(data["entries"]) == {"1x1x1x1", "2x2x2x1"}
    assert json.loads(path.read_text()) == data
    data = dispatch.store_tuning(path, "gpu", {"1x1x1x1": None})
    assert set(data["entries"]) == {"2x2x2x1"}
    assert list(_tuning_dir.glob("*.tmp")) == []


@pytest.mark.parametrize("content,match", [
    ("not json", "cannot read"),
    ('{"format": 1}', "no 'entries'"),
    ('{"format": 99, "entries": {}}', "format 99"),
])
def test_broken_tuning_files_say_what_is_wrong(_tuning_dir: Path, content: str,
                                              match: str) -> None:
    path = dispatch.tuning_path(H100.name)
    path.parent.mkdir(parents=True)
    path.write_text(content)
    with pytest.raises(dispatch.TuningFileError, match=match):
        dispatch.choose(64, 64, 64, 1, H100)


def test_bad_tuned_entry_is_an_error_not_a_silent_fallback() -> None:
    path = dispatch.tuning_path(H100.name)
    dispatch.store_tuning(path, H100.name, {"64x64x64x1": {"params": {"BM": 64}, "split": 1}})
    with pytest.raises(dispatch.TuningFileError, match="bad entry"):
        dispatch.choose(64, 64, 64, 1, H100)


# ------------------------------------------------------------------ planners
def _call(m: int, n: int, k: int, batch: int = 1) -> SimpleNamespace:
    return SimpleNamespace(m=m, n=n, k=k, batch=batch)


FACTS = {"name": H100.name, "sm_count": H100.sms, "sm_clock_mhz": H100.clock_mhz}


def test_split_plan_is_main_kernel_then_reduction_over_one_workspace() -> None:
    plan = dispatch.plan_adaptive("mm_21_splitk", dispatch.SOURCE, _call(512, 512, 512), FACTS)
    info = plan.info["dispatch"]
    split = info["split"]
    assert split > 1 and len(plan.steps) == 2
    main, reduce = plan.steps
    config = Config.from_params(info["params"])
    assert main.entry == dispatch.MAIN_ENTRY and reduce.entry == dispatch.REDUCE_ENTRY
    assert main.grid == (-(-512 // config.bm), -(-512 // config.bn), split)
    assert main.block == (config.threads,) and dict(main.defines) == config.defines
    assert main.args[-2:] == ("work", split) and main.args[:8] == GEMM_ARGS
    assert reduce.args == ("m", "n", "batch", "alpha", "work", "beta", "c", split)
    assert plan.workspace == split * 512 * 512
    assert info["choice"] == "heuristic"


def test_unsplit_plan_is_one_launch_without_workspace() -> None:
    plan = dispatch.plan_splitk("mm_21_splitk", dispatch.SOURCE, _call(4096, 4096, 4096),
                                FACTS)
    assert len(plan.steps) == 1 and plan.workspace == 0
    assert plan.info["dispatch"]["config"] == dispatch.RUNG21_CONFIG.name
    assert plan.steps[0].grid == (32, 32, 1)


def test_planner_follows_the_device_tuning_file() -> None:
    path = dispatch.tuning_path(H100.name)
    tuned = CONFIGS["128x64x16_b3"]
    dispatch.store_tuning(path, H100.name, {dispatch.shape_key(128, 128, 65536, 1): {
        "params": tuned.params(), "split": 96}})
    plan = dispatch.plan_adaptive("mm_21_splitk", dispatch.SOURCE, _call(128, 128, 65536),
                                  FACTS)
    info = plan.info["dispatch"]
    assert (info["config"], info["split"], info["choice"]) == (tuned.name, 96, "tuned")
    assert info["tuning_file"] == str(path)
    assert plan.steps[0].grid == (1, 2, 96)


def test_sizes_that_force_scalar_loads_cost_large_blocks_more() -> None:
    # At 4097^3 every A column is misaligned and loads go scalar: on the H100 the
    # 512-thread tile kept 74% of its 4096^3 speed, the 128-thread 64x128 tile 92%.
    def slowdown(name: str) -> float:
        config = CONFIGS[name]
        return (dispatch.estimate_seconds(config, 1, 4097, 4097, 4097, 1, H100)
                / dispatch.estimate_seconds(config, 1, 4096, 4096, 4096, 1, H100))
    assert slowdown("256x128x16_t8x8_lr2") > slowdown("64x128x16_b3") > 1.0


def test_misaligned_4097_cube_gets_a_plan_the_h100_measured_among_the_fastest() -> None:
    # Split-K plans timed by `mmsuite tune` on the H100 at 4097^3: 128x128x16 split 2
    # 3.407 ms, split 3 3.430, 64x128x16_b3 split 1 3.426; 64x64x16_b6 split 1 3.499.
    choice = dispatch.heuristic(4097, 4097, 4097, 1, H100)
    assert (choice.config.name, choice.split) in {
        ("128x128x16", 2), ("128x128x16", 3), ("64x128x16_b3", 1)}
    assert dispatch.heuristic(4096, 4096, 4096, 1, H100).config.threads >= 256


def test_rung_21_ignores_the_tuning_file() -> None:
    path = dispatch.tuning_path(H100.name)
    dispatch.store_tuning(path, H100.name, {dispatch.shape_key(512, 512, 512, 1): {
        "params": dispatch.RUNG21_CONFIG.params(), "split": 2}})
    plan = dispatch.plan_splitk("mm_21_splitk", dispatch.SOURCE, _call(512, 512, 512), FACTS)
    untuned = dispatch.heuristic(512, 512, 512, 1, H100, [dispatch.RUNG21_CONFIG])
    assert plan.info["dispatch"]["choice"] == "heuristic"
    assert plan.info["dispatch"]["split"] == untuned.split != 2


def test_a_small_output_is_not_cut_into_the_most_slices() -> None:
    # The reduction of a 128x128 C runs on 16 blocks: 256 slices cost more than they save.
    choice = dispatch.heuristic(128, 128, 65536, 1, H100, [dispatch.RUNG21_CONFIG])
    assert 256 in dispatch._splits(65536, 8)
    assert 0.9 * H100.sms <= choice.split < 256


# ----------------------------------------------------------------- stream-K
def _streamk_work(split: dispatch.StreamK) -> dict[int, list[tuple[int, int, int]]]:
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
                    (128, 128, 65536, 1), (1000, 1000, 1000, 100), (4096, 4096, 4096, 1),
                    (131, 257, 139, 2)]


@pytest.mark.parametrize("config", dispatch.STREAMK_CONFIGS, ids=lambda c: c.name)
@pytest.mark.parametrize("m,n,k,batch", STREAMK_PROBLEMS)
def test_streamk_assigns_every_tile_iteration_exactly_once(config: Config, m: int, n: int,
                                                           k: int, batch: int) -> None:
    split = dispatch.streamk_split(config, m, n, k, batch, H100)
    seen = [0] * (split.tiles * split.ipt)
    for runs in _streamk_work(split).values():
        for _, first, end in runs:
            for it in range(first, end):
                seen[it] += 1
    assert set(seen) == {1}


@pytest.mark.parametrize("config", dispatch.STREAMK_CONFIGS, ids=lambda c: c.name)
@pytest.mark.parametrize("m,n,k,batch", STREAMK_PROBLEMS)
def test_streamk_shares_are_even_and_waves_full(config: Config, m: int, n: int, k: int,
                                               batch: int) -> None:
    split = dispatch.streamk_split(config, m, n, k, batch, H100)
    assert split.sk_ctas <= split.slots  # never more stream-K blocks than can be resident
    assert split.dp_tiles % split.slots == 0  # data-parallel tiles fill whole waves
    if split.sk_ctas:
        shares = [split.begin(c + 1) - split.begin(c) for c in range(split.sk_ctas)]
        assert max(shares) - min(shares) <= 1 and min(shares) >= 1
        assert sum(shares) == split.sk_tiles * split.ipt
        if split.tiles >= split.slots:  # the two-tile hybrid: one to two tiles a block
            assert split.ipt <= min(shares) and max(shares) <= 2 * split.ipt
    else:
        assert split.tiles % split.slots == 0


@pytest.mark.parametrize("config", dispatch.STREAMK_CONFIGS, ids=lambda c: c.name)
@pytest.mark.parametrize("m,n,k,batch", STREAMK_PROBLEMS)
def test_streamk_fixup_finds_each_partial_in_its_own_slot(config: Config, m: int, n: int,
                                                          k: int, batch: int) -> None:
    split = dispatch.streamk_split(config, m, n, k, batch, H100)
    work = _streamk_work(split)
    written = {}  # (block, slot) -> tile whose raw partial sums the block wrote there
    for block, runs in work.items():
        for tile, first, end in runs:
            if (first, end) != (tile * split.ipt, (tile + 1) * split.ipt):
                slot = 0 if tile == runs[0][0] else 1
                assert (block, slot) not in written, "two partials in one slot"
                written[(block, slot)] = tile
    for tile in range(split.sk_tiles):  # what mm_23_fixup reads for each shared tile
        lo = split.owner(tile * split.ipt)
        hi = split.owner((tile + 1) * split.ipt - 1)
        wrote = sorted(block for (block, _), t in written.items() if t == tile)
        assert wrote == (list(range(lo, hi + 1)) if lo != hi else [])
        for c in range(lo, hi + 1 if lo != hi else lo):
            slot = 0 if split.begin(c) // split.ipt == tile else 1
            assert written[(c, slot)] == tile
    assert all(2 * block + slot < split.workspace_elems // (config.bm * config.bn)
               for block, slot in written)


def test_streamk_fills_the_partial_wave_of_4097_cubed() -> None:
    split = dispatch.streamk_split(dispatch.STREAMK_CONFIGS[0], 4097, 4097, 4097, 1, H100)
    assert split.tiles % split.slots != 0  # data-parallel alone would leave a wave part empty
    assert split.sk_ctas == split.slots
    assert split.sk_tiles == split.slots + split.tiles % split.slots


def test_streamk_plan_launches_the_kernel_then_the_fixup() -> None:
    call = SimpleNamespace(m=4097, n=4097, k=4097, batch=1)
    device = {"name": H100.name, "sm_count": H100.sms, "sm_clock_mhz": H100.clock_mhz}
    plan = dispatch.plan_streamk("mm_23_streamk", dispatch.STREAMK_SOURCE, call, device)
    main, fixup = plan.steps
    info = plan.info["dispatch"]
    assert main.entry == "mm_23_streamk" and fixup.entry == "mm_23_fixup"
    assert main.args == GEMM_ARGS + ("work", info["sk_ctas"], info["sk_tiles"])
    assert main.grid == (info["sk_ctas"] + info["dp_tiles"], 1, 1)
    assert fixup.grid[0] == info["sk_tiles"]
    assert plan.workspace == 2 * info["sk_ctas"] * info["params"]["BM"] * info["params"]["BN"]


def test_streamk_plan_has_no_fixup_when_tiles_fill_whole_waves() -> None:
    config = dispatch.STREAMK_CONFIGS[0]
    slots = H100.sms * config.blocks_per_sm
    split = dispatch.streamk_split(config, config.bm * slots, config.bn, 64, 1, H100)
    assert split.sk_ctas == 0
    assert len(dispatch.plan_streamk_split(split, dispatch.STREAMK_SOURCE).steps) == 1


def test_streamk_refuses_more_iterations_than_an_int_counts() -> None:
    with pytest.raises(ValueError, match="iterations"):
        dispatch.streamk_split(dispatch.STREAMK_CONFIGS[-1], 2**16, 2**16, 2**16, 1, H100)


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH (install the CUDA toolkit)")
@pytest.mark.parametrize("config", dispatch.STREAMK_CONFIGS, ids=lambda c: c.name)
def test_every_streamk_config_compiles_without_spills_at_its_occupancy(config: Config,
                                                                       tmp_path: Path) -> None:
    regs, spills = _ptxas(source_path(dispatch.STREAMK_SOURCE), config,
                          tmp_path)[dispatch.STREAMK_ENTRY]
    assert spills.startswith("0 bytes stack frame, 0 bytes spill"), spills
    compiled = dataclasses.replace(config, regs=regs)
    assert compiled.blocks_per_sm == config.blocks_per_sm, f"{config.name}: {regs} registers"


H100_FACTS = {"name": H100.name, "sm_count": H100.sms, "sm_clock_mhz": H100.clock_mhz}


def _adaptive(m: int, n: int, k: int, batch: int = 1):
    call = SimpleNamespace(m=m, n=n, k=k, batch=batch)
    return dispatch.plan_adaptive("mm_21_splitk", "cuda/22_adaptive.cu", call, H100_FACTS)


def test_adaptive_takes_streamk_where_the_model_gains_enough(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # With any gain accepted, 4097^3 (the model's largest stream-K gain, 7%) goes to
    # rung 23's kernels with the 64x128 tile of 3 blocks per SM.
    monkeypatch.setattr(dispatch, "_ADAPTIVE_STREAMK_GAIN", 1.0)
    plan = _adaptive(4097, 4097, 4097)
    info = plan.info["dispatch"]
    assert [s.entry for s in plan.steps] == ["mm_23_streamk", "mm_23_fixup"]
    assert all(s.source == dispatch.STREAMK_SOURCE for s in plan.steps)
    assert (info["config"], info["sk_ctas"], info["sk_tiles"]) == ("64x128x16_b3", 396, 561)
    assert info["estimate_ms"] < info["splitk_estimate_ms"]
    assert "tuning_file" not in info  # none was read


def test_adaptive_keeps_splitk_at_4097_where_streamk_measured_level() -> None:
    # H100, suite timer: stream-K 64x128x16_b3 3.409 ms against split-K 3.430 ms (0.6%),
    # while the model promised 7%: under the 8% it asks for.
    assert [s.entry for s in _adaptive(4097, 4097, 4097).steps][0] == dispatch.MAIN_ENTRY


def test_heuristic_streamk_plan_names_the_tuning_file_it_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dispatch, "_ADAPTIVE_STREAMK_GAIN", 1.0)
    path = dispatch.tuning_path(H100.name)
    dispatch.store_tuning(path, H100.name, {"64x64x64x1": {
        "params": CONFIGS["64x64x16_t4x4_lr4"].params(), "split": 1}})
    info = _adaptive(4097, 4097, 4097).info["dispatch"]
    assert info["streamk"] and info["choice"] == "heuristic" and info["tuning_file"] == str(path)


@pytest.mark.parametrize("m,n,k,batch", [
    (512, 512, 512, 1), (1024, 1024, 1024, 1), (2048, 2048, 2048, 1), (3072, 3072, 3072, 1),
    (4096, 4096, 4096, 1), (5000, 5000, 5000, 1), (8192, 8192, 8192, 1), (128, 8192, 8192, 1),
    (128, 128, 65536, 1), (1000, 1000, 1000, 100)])
def test_adaptive_keeps_splitk_where_streamk_measured_slower(m: int, n: int, k: int,
                                                           batch: int) -> None:
    assert [s.entry for s in _adaptive(m, n, k, batch).steps][0] == dispatch.MAIN_ENTRY


def test_a_tuned_entry_keeps_the_adaptive_rung_off_streamk() -> None:
    entry = {"params": CONFIGS["64x64x16_b6"].params(), "split": 1}
    dispatch.store_tuning(dispatch.tuning_path(H100.name), H100.name,
                          {dispatch.shape_key(4097, 4097, 4097): entry})
    plan = _adaptive(4097, 4097, 4097)
    assert [s.entry for s in plan.steps] == [dispatch.MAIN_ENTRY]
    assert plan.info["dispatch"]["choice"] == "tuned"
