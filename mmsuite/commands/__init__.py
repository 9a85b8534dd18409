"""One module per subcommand, each with ``add_parser(sub)`` and ``run(args, console)``.

The table below is the command line: :mod:`mmsuite.cli` builds its parser from it, in
this order, and applies one error policy to all of them.
"""

from __future__ import annotations

from types import ModuleType

from . import bisect, compare, continuous, history, listing, report, run, tune, worker

COMMANDS: dict[str, ModuleType] = {
    "list": listing,
    "run": run,
    "report": report,
    "compare": compare,
    "continuous": continuous,
    "bisect": bisect,
    "tune": tune,
    "history": history,
    "worker": worker,
}
