"""scripts/dispatch_snapshot.py: the dispatcher decides today what it decided when the
snapshot in tests/fixtures/ was recorded, candidate by candidate and plan by plan."""

from __future__ import annotations

from pathlib import Path

from mmsuite.cuda_dispatch.variants import FAMILIES

from . import load_script

snapshot = load_script("dispatch_snapshot")
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "dispatch_snapshot.json.gz"


def test_every_candidate_estimate_and_plan_is_as_recorded() -> None:
    recorded = snapshot.read(FIXTURE)
    now = snapshot.canonical(snapshot.snapshot())
    assert snapshot.differences(recorded, now) == []
    assert now == recorded


def test_the_recorded_shapes_reach_every_family_and_both_shipped_models() -> None:
    recorded = snapshot.read(FIXTURE)
    models = {device["model"] for device in recorded["devices"].values()}
    assert {"nvidia-h100-80gb-hbm3.model.json", "nvidia-h200.model.json"} <= models
    chosen = {rung["info"]["dispatch"]["family"]
              for device in recorded["devices"].values() for shape in device["shapes"]
              for rung in shape["rungs"].values() if isinstance(rung, dict)}
    assert chosen == set(FAMILIES)
    assert sum(len(device["shapes"]) for device in recorded["devices"].values()) >= 2 * 200


def test_a_changed_estimate_is_a_difference_named_by_its_place() -> None:
    recorded = snapshot.read(FIXTURE)
    changed = snapshot.read(FIXTURE)
    first = changed["devices"]["NVIDIA H100 80GB HBM3"]["shapes"][0]
    first["candidates"]["fastest"][0][1] *= 1 + 1e-15
    found = snapshot.differences(recorded, changed)
    assert len(found) == 1 and "/devices/NVIDIA H100 80GB HBM3/shapes[0]" in found[0]
