"""How `mmsuite continuous` spends its time and cores: the pooled budget, the threads and
mode a row is measured with given the load meter's reading, and the window both sides
share. The gate's use of them is tested in tests/test_continuous.py."""

from __future__ import annotations

import pytest

from mmsuite import continuous_plan
from mmsuite.continuous_plan import RowPlan, TimePool, choose


def test_the_pool_is_every_rows_own_time_and_each_row_gets_an_equal_share_of_what_is_left() -> None:
    pool = TimePool.for_rows(4, 8.0)
    assert pool.total == 32.0 and pool.share(4) == 8.0
    pool.spend(2.0)  # a row of identical code took its short check
    pool.spend(3.0)
    assert pool.left == 27.0 and pool.share(2) == 13.5
    pool.spend(5.0)  # the first changed row was decided early: the last gets the rest
    assert pool.share(1) == 22.0
    pool.spend(40.0)
    assert pool.left == 0.0 and pool.share(1) == 0.0


def test_a_quiet_machine_measures_as_asked_in_turns() -> None:
    plan = choose(threaded=True, asked=None, cpus=2, reading=(1.96, 0.02))
    assert plan == RowPlan(None, None, 2, 1.96, 0.02, together=False)
    assert plan.note() == "" and plan.record()["mode"] == "turns"


def test_one_core_of_two_busy_one_thread_each_side_in_turns_by_default() -> None:
    plan = choose(threaded=True, asked=None, cpus=2, reading=(1.0, 0.5))
    assert plan.threads == 1 and not plan.together and plan.fitted
    assert plan.note() == "threads 2 → 1 (1.0 of 2 cores free)"
    assert plan.record()["mode"] == "turns"


def test_at_once_one_thread_each_side_both_sides_at_once() -> None:
    plan = choose(threaded=True, asked=None, cpus=2, reading=(1.0, 0.5), mode="at-once")
    assert plan.threads == 1 and plan.together and plan.fitted
    assert plan.note() == "threads 2 → 1 (1.0 of 2 cores free), both sides at once"
    assert plan.record() == {
        "threads": 1,
        "threads_asked": None,
        "cpus": 2,
        "free_cores": 1.0,
        "others_share": 0.5,
        "mode": "at once",
    }


def test_threads_asked_for_are_lowered_to_the_free_cores_and_never_below_one() -> None:
    assert choose(True, 2, 2, (0.1, 0.95)).threads == 1  # nothing free: still one
    assert choose(True, 8, 8, (5.8, 0.27)).threads == 6  # 0.8 of a core counts
    assert choose(True, 8, 8, (5.7, 0.29)).threads == 5
    plan = choose(True, 4, 8, (3.0, 0.62))
    assert plan.threads == 3 and plan.note().startswith("threads 4 → 3 (3.0 of 8 cores free)")
    assert choose(True, 4, 8, (3.9, 0.51)).threads == 4  # enough free: as asked, in turns
    assert not choose(True, 4, 8, (3.9, 0.51)).together


def test_a_sequential_rung_keeps_its_thread_and_at_once_runs_both_sides_when_no_core_is_free() -> (
    None
):
    plan = choose(threaded=False, asked=None, cpus=2, reading=(0.6, 0.7), mode="at-once")
    assert plan.threads is None and not plan.fitted and plan.together
    assert plan.note() == "both sides at once"
    assert not choose(False, None, 2, (1.0, 0.5), "at-once").together  # its core is free
    assert not choose(False, None, 2, (0.6, 0.7)).together  # in turns


@pytest.mark.parametrize("reading, mode", [(None, "at-once"), ((1.0, 0.5), "as-asked")])
def test_without_a_reading_or_as_asked_rows_run_as_asked(reading, mode) -> None:
    plan = choose(True, 2, 2, reading, mode)
    assert plan.threads == 2 and not plan.together and plan.note() == ""


def test_a_shared_window_holds_a_few_of_the_slower_sides_samples(monkeypatch) -> None:
    monkeypatch.setattr(continuous_plan.time, "monotonic", lambda: 50.0)
    start, seconds = continuous_plan.window(0.05, [0.04, 0.06])
    assert start == 50.0 + continuous_plan.WINDOW_DELAY
    assert seconds == pytest.approx(continuous_plan.WINDOW_SAMPLES * 0.06)
    assert continuous_plan.window(0.05, [0.001])[1] == 0.05  # short kernels: the round's time
    assert continuous_plan.window(0.05, [])[1] == 0.05
