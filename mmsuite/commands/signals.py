"""Signals held off while a command writes what it measured."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator


class Terminated(BaseException):
    """SIGTERM: ends a command like Ctrl-C (run and continuous save what they finished,
    exit 143; worker stops the workers it started)."""


def raise_terminated(signum: int, frame: object) -> None:
    """The SIGTERM handler of a command that SIGTERM ends like Ctrl-C."""
    raise Terminated()


@contextlib.contextmanager
def deferred_signals() -> Iterator[list[int]]:
    """SIGINT and SIGTERM wait until the block ends (the results are shown and written);
    the list yielded names those that came."""
    came: list[int] = []

    def defer(signum: int, frame: object) -> None:
        if not came:
            print("mmsuite: saving the results first", file=sys.stderr, flush=True)
        came.append(signum)

    previous = {s: signal.signal(s, defer) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield came
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
