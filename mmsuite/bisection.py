"""``mmsuite bisect GOOD BAD``: the first commit that made one kernel x problem slower, found
by ``continuous``'s paired verdicts.

The commits from GOOD (excluded) to BAD (included) along BAD's first-parent line are
searched by halving, as ``git bisect`` does. Each step measures one commit against the
last commit known good with :class:`mmsuite.continuous.Gate` (both in the same window,
alternate rounds, the interval of the per-round ratio) and reads its verdict:

- ``slower``: the slowdown is there: the commit is the new bad end;
- ``same`` or ``faster``: it is not: the commit is the new good end;
- ``unsure``: measured again with twice the time, up to ``MAX_LONGER`` times; a row
  that stays unsure ends the search there, saying between which commits it stopped,
  rather than guessing a side;
- ``broken``: the kernel fails at that commit, which no time will settle: the search
  ends there too.

The first step checks BAD against GOOD: where BAD is not slower there is nothing to
find. Builds are cached per commit (:mod:`mmsuite.builds`), so a commit measured twice
is built once. Eight commits take at most four ``continuous`` runs when none stays
unsure: one for the ends, then three halvings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from .continuous import ContinuousRow, Settings

#: How many times an unsure step is measured again, each time with twice the time.
MAX_LONGER = 2


@dataclass(frozen=True)
class BisectStep:
    """One ``continuous`` run: ``candidate`` against ``good``, and what it said."""

    good: str
    candidate: str
    verdict: str
    reason: str
    ratio: float | None
    low: float | None
    high: float | None
    seconds: float  # the row's --max-time this run had


@dataclass
class BisectOutcome:
    """Where the search ended, and every run that took it there."""

    first_bad: str | None  # the commit that made the row slower; None where not found
    last_good: str
    steps: list[BisectStep] = field(default_factory=list)
    why: str = ""  # why no commit was named

    @property
    def runs(self) -> int:
        return len(self.steps)


#: Measures a candidate commit against a good one, with these settings: the judged pair.
Judge = Callable[[str, str, Settings], ContinuousRow]


def step_of(good: str, candidate: str, settings: Settings, pair: ContinuousRow) -> BisectStep:
    """One run's record, from the pair ``continuous`` judged."""
    estimate = pair.estimate
    if estimate is None:
        return BisectStep(good, candidate, pair.verdict, pair.reason, None, None, None,
                          settings.max_seconds)
    return BisectStep(good, candidate, pair.verdict, pair.reason, estimate.ratio,
                      estimate.low if estimate.bounded else None,
                      estimate.high if estimate.bounded else None, settings.max_seconds)


def _judge_firmly(judge: Judge, good: str, candidate: str, settings: Settings,
                  steps: list[BisectStep]) -> BisectStep:
    """The candidate's verdict against ``good``, measured longer while it is unsure."""
    for attempt in range(MAX_LONGER + 1):
        longer = replace(settings, max_seconds=settings.max_seconds * 2**attempt)
        step = step_of(good, candidate, longer, judge(good, candidate, longer))
        steps.append(step)
        if step.verdict != "unsure":
            break
    return step


def search(commits: list[str], good: str, judge: Judge, settings: Settings) -> BisectOutcome:
    """The first of ``commits`` (oldest first, BAD last) that is slower than ``good``.

    Assumes one step: once a commit is slower, every later one is.
    """
    if not commits:
        return BisectOutcome(None, good, why="no commit between GOOD and BAD")
    steps: list[BisectStep] = []
    ends = _judge_firmly(judge, good, commits[-1], settings, steps)
    if ends.verdict != "slower":
        return BisectOutcome(None, good, steps, _stopped(ends, "BAD against GOOD"))
    low, high = -1, len(commits) - 1  # commits[high] is slower; commits[low] (or GOOD) not
    while high - low > 1:
        middle = (low + high) // 2
        last_good = commits[low] if low >= 0 else good
        step = _judge_firmly(judge, last_good, commits[middle], settings, steps)
        if step.verdict == "slower":
            high = middle
        elif step.verdict in ("same", "faster"):
            low = middle
        else:
            return BisectOutcome(None, last_good, steps,
                                 _stopped(step, f"{commits[middle][:10]} against {last_good[:10]}")
                                 + f"; the first slower commit lies after {last_good[:10]}, up to "
                                 f"{commits[high][:10]}")
    return BisectOutcome(commits[high], commits[low] if low >= 0 else good, steps)


def _stopped(step: BisectStep, what: str) -> str:
    if step.verdict == "unsure":
        return (f"{what} stayed unsure after {MAX_LONGER + 1} runs, the last of "
                f"{step.seconds:g} s: {step.reason}")
    if step.verdict == "broken":
        return f"{what} is broken: {step.reason}"
    return f"{what} is {step.verdict}, not slower: nothing to find"


def step_line(step: BisectStep) -> str:
    """``abc1234567 against 0123456789: slower 1.081 [1.062-1.101] (8 s)``"""
    ratio = "-" if step.ratio is None else f"{step.ratio:.3f}"
    interval = f" [{step.low:.3f}-{step.high:.3f}]" if step.low is not None \
        and step.high is not None else ""
    reason = f": {step.reason}" if step.verdict in ("unsure", "broken") else ""
    return (f"{step.candidate[:10]} against {step.good[:10]}: {step.verdict} {ratio}{interval} "
            f"({step.seconds:g} s){reason}")
