"""Tuning and model files: where they live, how they are written and read (no GPU)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from mmsuite.cuda_dispatch import tuning_file
from mmsuite.cuda_dispatch.family import Candidate
from mmsuite.cuda_dispatch.tuning_file import TuningFileError, candidate_of, entry_of, shape_key
from mmsuite.cuda_dispatch.variants import MANIFEST, VARIANTS, why_not
from mmsuite.launch import DeviceFacts

H100 = DeviceFacts()
SHIPPED = Path(tuning_file.__file__).resolve().parent.parent / "tuning"


def test_tuning_path_follows_the_environment(_tuning_dir: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    assert tuning_file.tuning_path(H100.name) == _tuning_dir / "nvidia-h100-80gb-hbm3.json"
    assert tuning_file.model_path(H100.name).name == "nvidia-h100-80gb-hbm3.model.json"
    monkeypatch.delenv(tuning_file.TUNING_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", "/somewhere")
    assert tuning_file.tuning_dir() == Path("/somewhere/mmsuite/tuning")


@pytest.mark.parametrize("row", VARIANTS, ids=lambda v: v.key)
def test_every_candidate_round_trips_through_an_entry(row) -> None:
    candidate = Candidate(row, 1)
    assert candidate_of(json.loads(json.dumps(entry_of(candidate))), "f") == candidate


def test_an_entry_names_its_family() -> None:
    for family in MANIFEST:
        entry = entry_of(Candidate(family.variants[0], 1))
        assert entry["family"] == family.name


@pytest.mark.parametrize("flags,family", [
    ({}, "splitk"), ({"streamk": True}, "streamk"), ({"gemv": True}, "gemv"),
    ({"shortk": True}, "shortk"), ({"dot": True}, "dot")])
def test_an_older_entry_naming_its_family_by_a_flag_still_reads(flags: dict,
                                                                family: str) -> None:
    row = next(v for v in VARIANTS if v.family == family)
    entry = {k: v for k, v in entry_of(Candidate(row, 1)).items() if k != "family"}
    assert candidate_of({**entry, **flags}, "old.json") == Candidate(row, 1)


def test_an_entry_of_an_unknown_family_is_a_bad_entry() -> None:
    entry = {**entry_of(Candidate(VARIANTS[0], 1)), "family": "winograd"}
    with pytest.raises(TuningFileError, match="bad entry in f.json"):
        candidate_of(entry, "f.json")


def test_store_merges_removes_and_leaves_no_temporary(_tuning_dir: Path) -> None:
    path = _tuning_dir / "gpu.json"
    first = entry_of(Candidate(VARIANTS[0], 2))
    tuning_file.store_tuning(path, "gpu", {"1x1x1x1": first})
    data = tuning_file.store_tuning(path, "gpu", {"2x2x2x1": first})
    assert set(data["entries"]) == {"1x1x1x1", "2x2x2x1"}
    assert json.loads(path.read_text()) == data
    data = tuning_file.store_tuning(path, "gpu", {"1x1x1x1": None})
    assert set(data["entries"]) == {"2x2x2x1"}
    assert [p.name for p in _tuning_dir.iterdir()] == ["gpu.json"]


def test_files_get_the_users_umask_not_0600(_tuning_dir: Path) -> None:
    old = os.umask(0o022)
    try:
        tuning_file.store_tuning(_tuning_dir / "gpu.json", "gpu", {})
        tuning_file.store_model(_tuning_dir / "gpu.model.json", "gpu", {})
    finally:
        os.umask(old)
    for name in ("gpu.json", "gpu.model.json"):
        assert stat.S_IMODE((_tuning_dir / name).stat().st_mode) == 0o644


@pytest.mark.parametrize("content,match", [
    ("not json", "cannot read"),
    ('{"format": 1}', "no 'entries'"),
    ('{"format": 99, "entries": {}}', "format 99"),
])
def test_broken_tuning_files_say_what_is_wrong(_tuning_dir: Path, content: str,
                                              match: str) -> None:
    path = tuning_file.tuning_path(H100.name)
    path.parent.mkdir(parents=True)
    path.write_text(content)
    with pytest.raises(TuningFileError, match=match):
        tuning_file.tuned(H100.name, 64, 64, 64, 1)


@pytest.mark.parametrize("entry,match", [
    ({"params": {"BM": 64}, "split": 1}, "bad entry"),
    ({"params": {"BM": 128, "BN": 128}, "split": 1, "streamk": True}, "stream-K|streamk"),
    ({"params": {"SIDE": "n", "SKINNY": 3}, "split": 1, "gemv": True}, "gemv variants"),
    ({"params": {"BM": 128, "BN": 128, "BK": 8}, "split": 0}, "split 0"),
])
def test_bad_entries_are_errors_not_silent_fallbacks(entry: dict, match: str) -> None:
    with pytest.raises(TuningFileError, match=match):
        candidate_of(entry, "file")


def test_the_users_entry_wins_over_the_shipped_one_which_can_be_turned_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    key = shape_key(512, 512, 512)
    shipped = tuning_file.BUNDLED_DIR / "nvidia-h100-80gb-hbm3.json"
    tuning_file.store_tuning(shipped, H100.name, {key: entry_of(Candidate(VARIANTS[3], 4))})
    assert tuning_file.tuned(H100.name, 512, 512, 512, 1) == (Candidate(VARIANTS[3], 4),
                                                              shipped)
    user = tuning_file.tuning_path(H100.name)
    tuning_file.store_tuning(user, H100.name, {key: entry_of(Candidate(VARIANTS[5], 1))})
    assert tuning_file.tuned(H100.name, 512, 512, 512, 1) == (Candidate(VARIANTS[5], 1), user)
    assert tuning_file.tuned(H100.name, 1024, 1024, 1024, 1) == (None, user)
    monkeypatch.setenv(tuning_file.BUNDLED_ENV, "0")
    tuning_file.store_tuning(user, H100.name, {key: None})
    assert tuning_file.tuned(H100.name, 512, 512, 512, 1) == (None, user)


def test_every_shipped_tuning_file_is_valid_for_its_device() -> None:
    files = sorted(p for p in SHIPPED.glob("*.json") if not p.name.endswith(".model.json"))
    assert files, f"no tuning file ships in {SHIPPED}"
    for path in files:
        data = tuning_file.load_tuning(path)
        assert path.stem == tuning_file.device_slug(data["device"])
        for key, entry in data["entries"].items():
            m, n, k, batch = (int(x) for x in key.split("x"))
            assert why_not(candidate_of(entry, path), m, n, k, batch) == "", (path, key)
            baseline = entry.get("model") or entry["heuristic"]
            assert entry["confirmed_ms"] <= baseline["ms"], (path, key)


def test_every_shipped_model_is_fitted_and_scored_for_its_device() -> None:
    files = sorted(SHIPPED.glob("*.model.json"))
    assert files, f"no fitted model ships in {SHIPPED}"
    for path in files:
        data = tuning_file.load_model(path)
        assert path.name == f"{tuning_file.device_slug(data['device'])}.model.json"
        assert data["parameters"]["efficiency"]
        fits = data["provenance"]["fits"]
        assert fits and all({"seeds", "shapes", "date", "held_back"} <= set(fit) for fit in fits)


def test_a_shipped_model_holds_its_figures_and_a_short_provenance_only() -> None:
    """The history of a fit is prose for the docs; a shipped model file is data."""
    for path in sorted(SHIPPED.glob("*.model.json")):
        assert set(tuning_file.load_model(path)) == {"format", "device", "parameters",
                                                     "provenance"}, path
        assert path.stat().st_size < 20_000, path
