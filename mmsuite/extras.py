"""The optional extras of pyproject.toml (``bench``, ``tune``, ``cuda``, ...): a command that
needs one which is not installed says so in one line, naming the extra to install."""

from __future__ import annotations


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message names the extra that brings it.

    The command line reports it as bad input (one line, exit status 2): the user's
    installation lacks a part, mmsuite has no bug."""

    def __init__(self, purpose: str, module: str, extra: str) -> None:
        super().__init__(f"{purpose} needs {module}, which is not installed: "
                         f"pip install 'mmsuite[{extra}]'", name=module)
        self.extra = extra
