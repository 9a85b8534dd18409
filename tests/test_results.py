"""Result files are written atomically and read back as written."""

from __future__ import annotations

import math

import pytest

from mmsuite import results


def test_round_trip_and_non_finite_values(tmp_path) -> None:
    path = tmp_path / "sub" / "r.json"
    results.save(path, [{"kernel": "cpu.blas", "max_rel_err": math.inf}], {"cpu": "x"}, {})
    doc = results.load(path)
    assert doc["results"][0]["max_rel_err"] == math.inf and doc["environment"] == {"cpu": "x"}


def test_failed_write_keeps_the_old_file(tmp_path) -> None:
    path = tmp_path / "r.json"
    results.save(path, [], {}, {})
    before = path.read_text()
    with pytest.raises(TypeError):
        results.save(path, [{"bad": object()}], {}, {})
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_load_rejects_other_files(tmp_path) -> None:
    other = tmp_path / "x.json"
    other.write_text("{}")
    with pytest.raises(ValueError, match="not an mmsuite result file"):
        results.load(other)
