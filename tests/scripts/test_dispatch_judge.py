"""scripts/dispatch_judge.py: the drawn shapes, the commands it runs and the tables it
prints (the timings themselves need a GPU)."""

from __future__ import annotations

from pathlib import Path

from . import load_script

judge_script = load_script("dispatch_judge")


def test_a_seed_draws_the_same_shapes_within_the_bounds() -> None:
    shapes = judge_script.draw(918273, 40, 8)
    assert shapes == judge_script.draw(918273, 40, 8)
    assert len(shapes) == 48 and all(b == 1 for b, *_ in shapes[:40])
    for batch, m, n, k in shapes:
        assert 1 <= min(m, n, k) and max(m, n, k) <= judge_script.LIMIT
        assert m * n * k * batch <= (2**37 if batch == 1 else 2**35)
    assert shapes[5] == (1, 10, 75, 5228)  # the draw the closing note judged


def test_tune_runs_with_the_cheap_search_and_writes_its_outcomes(tmp_path: Path) -> None:
    command = judge_script.tune_command(3, ["10x75x5228", "9x5x4"], 6, 5, tmp_path / "t.json")
    assert command[1:4] == ["-m", "mmsuite.cli", "tune"]
    pairs = dict(zip(command[4::2], command[5::2]))
    assert pairs["--batch"] == "3" and pairs["--candidates"] == "6"
    assert pairs["--rounds"] == "5" and pairs["--json"] == str(tmp_path / "t.json")
    assert [command[i + 1] for i, a in enumerate(command) if a == "--shape"] == [
        "10x75x5228", "9x5x4"]


def _outcome(batch: int, m: int, n: int, k: int, model_ms: float, best_ms: float) -> dict:
    return {"problem": {"m": m, "n": n, "k": k, "batch": batch, "layout": "row"},
            "model": {"config": "32x32x16_t4x4_lr4_f", "split": 41, "family": "splitk"},
            "model_ms": model_ms, "best": "32x32x16_t4x4_lr4_f/52", "best_ms": best_ms}


def test_the_tune_table_counts_the_model_within_3_percent_of_the_fastest_found() -> None:
    shapes = [(1, 10, 75, 5228), (1, 9, 51, 5765), (2, 7, 7, 7), (1, 1, 1, 1)]
    outcomes = [_outcome(1, 10, 75, 5228, 0.0108, 0.0108),  # the model's plan was fastest
                _outcome(1, 9, 51, 5765, 0.0125, 0.0115),  # 8.7% slower
                _outcome(2, 7, 7, 7, 0.00515, 0.005)]  # 3.0% slower: counts
    lines, summary = judge_script.tune_table(shapes, outcomes)
    assert len(lines) == 2 + 4
    assert "| 1.000 |" in lines[2] and "| 1.087 |" in lines[3] and "| 1.030 |" in lines[4]
    assert "not tuned" in lines[5]
    assert summary == ["model's plan within 3% of a fresh tune's fastest: 2 of 3; worst 1.087"]


def test_the_tune_table_of_nothing_tuned_has_no_summary() -> None:
    lines, summary = judge_script.tune_table([(1, 4, 4, 4)], [])
    assert "not tuned" in lines[-1] and summary == []


def test_the_tune_table_labels_a_stream_k_plan_apart_from_the_same_tile_split_k() -> None:
    """tune labels a stream-K plan "config/stream-K" and a split-K one "config/split": the
    model's plan is labelled alike, so that the two are never read as the same plan."""
    outcome = _outcome(1, 4664, 334, 699, 0.0804, 0.0767)
    outcome["model"] = {"config": "128x64x16_b3", "split": 1, "family": "streamk"}
    outcome["best"] = "128x64x16_b3/1"
    lines, _ = judge_script.tune_table([(1, 4664, 334, 699)], [outcome])
    assert "| 128x64x16_b3/stream-K | 80.4 | 128x64x16_b3/1 | 76.7 |" in lines[2]
