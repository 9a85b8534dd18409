"""The ``mmsuite`` command line: the parser assembled from one module per subcommand
(:mod:`mmsuite.commands`), and the error policy every subcommand shares."""

from __future__ import annotations

import argparse
import errno
import faulthandler
import os
import sys
import traceback
from pathlib import Path

from rich.console import Console

from . import __version__, plugins, results
from .commands import COMMANDS
from .commands.common import UsageError
from .extras import MissingExtra

__all__ = ["UsageError", "build_parser", "main"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage dump
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mmsuite", description="Run, verify and compare SGEMM kernel "
                     "ladders (C, OpenMP, OpenCL, CUDA) and catch performance regressions.")
    parser.add_argument("--version", action="version", version=f"mmsuite {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in COMMANDS.values():
        command.add_parser(sub)
    for subparser in sub.choices.values():  # every command sees the same catalogue
        subparser.add_argument(
            "--plugin", action="append", default=[], metavar="PATH",
            help="a Python file of your kernels (mmsuite.register); repeatable; joins "
                 f"{plugins.ENV_VAR}, which this command's workers read too")
    return parser


#: The widest output COLUMNS may ask for: a table is laid out in memory at its width, and
#: COLUMNS=99999999999999 ran out of it.
MAX_COLUMNS = 1000


def _console() -> Console:
    """The terminal's width on a terminal; in logs and pipes COLUMNS, else 100 characters;
    never more than MAX_COLUMNS."""
    columns = os.environ.get("COLUMNS", "")
    width = min(int(columns), MAX_COLUMNS) if columns.isdigit() and int(columns) > 0 else None
    # No markup: reasons and device names contain brackets ("mmsuite[cuda]", "[GPU]").
    console = Console(markup=False, width=width)
    if console.is_terminal or width is not None:
        return console
    return Console(width=100, markup=False)


def _tolerant_streams() -> None:
    """Characters the output's encoding lacks (PYTHONIOENCODING=ascii, a Latin-1 locale)
    become '?' instead of failing the command; rich draws its tables in ASCII there."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")


class OutputLost(OSError):
    """Standard output cannot be written (a full disk, a closed pipe)."""


class _SafeStdout:
    """Standard output, whose write errors are told apart from any other OSError: they
    name no file, so nothing else says where they came from."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise OutputLost(exc.errno, exc.strerror) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise OutputLost(exc.errno, exc.strerror) from None

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _silence_stdout() -> None:
    """Standard output is broken: send what is left to /dev/null, so that the interpreter's
    own flush at exit does not fail again."""
    try:
        target = sys.stdout.fileno()
    except (OSError, ValueError):  # not a file (captured): nothing flushes it at exit
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, target)
    os.close(devnull)


def _attach_values(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``--shape -3x4x4`` as ``--shape=-3x4x4``: argparse would take a value that starts with
    '-' (and is not a plain negative number) for an option and say "expected one argument"."""
    takes_value: set[str] = set()
    flags: set[str] = set()
    stack = [parser]
    while stack:
        p = stack.pop()
        for action in p._actions:
            flags.update(action.option_strings)
            if action.option_strings and action.nargs is None:
                takes_value.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(action.choices.values())
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        following = argv[i + 1] if i + 1 < len(argv) else None
        if token in takes_value and following is not None and following.startswith("-") \
                and following.split("=", 1)[0] not in flags and following != "--":
            out.append(f"{token}={following}")
            i += 2
            continue
        out.append(token)
        i += 1
    return out


def _named_paths(args: argparse.Namespace | None) -> list[Path]:
    """The files and folders the user named (or took by default) on the command line."""
    paths: list[Path] = []
    for value in vars(args or argparse.Namespace()).values():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, Path):
                paths.append(item.absolute())
    return paths


def _derived_from(path: Path, named: Path) -> bool:
    """Whether ``path`` is one mmsuite makes beside a file the user named: its journal
    (``X.jsonl``), its lock (``X.json.lock``), a temporary file (``.X.json.*.tmp``)."""
    return path.parent == named.parent and (path.name.startswith(named.name) or
                                            path.name.startswith(f".{named.name}."))


def _users_file(exc: OSError, args: argparse.Namespace | None) -> str | None:
    """How to name the file ``exc`` is about, where it is one the user named, one inside a
    folder the user named (``--out DIR``'s index.html) or one made beside a file the user
    named (its lock, journal or temporary file: named with the user's); None for any other
    file, which is mmsuite's, with a traceback."""
    named = _named_paths(args)
    for filename in (exc.filename, exc.filename2):
        if filename is None or isinstance(filename, int):
            continue
        path = Path(os.fsdecode(filename)).absolute()
        if any(path == p or p in path.parents for p in named):
            return os.fsdecode(filename)
        beside = [p for p in named if _derived_from(path, p)]
        if beside:
            return f"{os.fsdecode(filename)} (made beside {beside[0]})"
    return None


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 ok, 1 a kernel failed (or a bug: with its traceback; 3 in the commands
    whose 1 is a verdict), 2 bad input, 130/143 interrupted by Ctrl-C/SIGTERM (finished
    rows saved)."""
    if not faulthandler.is_enabled() and sys.__stderr__ is not None:
        faulthandler.enable(sys.__stderr__)  # a native crash here names where it happened
    _tolerant_streams()
    stdout, sys.stdout = sys.stdout, _SafeStdout(sys.stdout)
    try:
        return _main(argv)
    finally:
        sys.stdout = stdout


def _main(argv: list[str] | None) -> int:
    console = _console()
    args = None
    try:
        parser = build_parser()
        args = parser.parse_args(_attach_values(parser, sys.argv[1:] if argv is None else argv))
        command = COMMANDS[args.command]
        if not getattr(command, "READS_PLUGIN_PATHS", False):  # continuous: its --repo's
            plugins.use(args.plugin)
        plugins.load_configured()  # before any work: a broken plugin is one line, exit 2
        status = command.run(args, console)
        sys.stdout.flush()  # a full disk or a closed pipe is found here, not at exit
        return status
    except (UsageError, results.ResultsError, MissingExtra, plugins.PluginError) as exc:
        print(f"mmsuite: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mmsuite: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if isinstance(exc, OutputLost):
            _silence_stdout()
            if exc.errno != errno.EPIPE:  # `| head` closing early is no error of the user's
                print(f"mmsuite: error: cannot write the output: {exc.strerror}",
                      file=sys.stderr)
                return 2
            return 0
        users = _users_file(exc, args) if isinstance(exc, OSError) else None
        if isinstance(exc, OSError) and users is not None:
            # A file the user named cannot be read or written (missing, permissions, disk full).
            print(f"mmsuite: error: {users}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        traceback.print_exc()
        print("mmsuite: internal error: this is a bug; please report it with the traceback above",
              file=sys.stderr)
        # A gate's 1 is its verdict ("slower"): its bugs must not read as one.
        failed = COMMANDS.get(getattr(args, "command", None) or "")
        return getattr(failed, "EXIT_ON_BUG", 1)


if __name__ == "__main__":
    sys.exit(main())
