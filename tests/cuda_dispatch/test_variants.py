"""The manifest of compiled variants: each named once, offered where it applies, refused in
one place, and compiled as the manifest says (no GPU; nvcc where it is installed)."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest

from mmsuite.cuda_dispatch import variants
from mmsuite.cuda_dispatch.families import shortk, streamk
from mmsuite.cuda_dispatch.families.gemv import GEMV_CONFIGS, GemvConfig
from mmsuite.cuda_dispatch.families.shortk import SHORTK_CONFIGS
from mmsuite.cuda_dispatch.families.splitk import CONFIGS, FUSED_CONFIGS, SEARCH
from mmsuite.cuda_dispatch.families.streamk import STREAMK_CONFIGS
from mmsuite.cuda_dispatch.family import Candidate
from mmsuite.cuda_dispatch.variants import VARIANTS, variant, why_not
from mmsuite.launch import DeviceFacts
from mmsuite.sources import source_path

H100 = DeviceFacts()
NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH (install the CUDA "
                                "toolkit)")


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
