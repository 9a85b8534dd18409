"""Locating kernel sources, in a source checkout and in an installed wheel alike.

In the repository the sources sit at the top (csrc/, cl/, cuda/); the wheel
carries them as package data of mmsuite.sources.csrc / .cl / .cuda.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

_LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$', re.MULTILINE)

_CHECKOUT = Path(__file__).resolve().parent.parent.parent


def source_path(relative: str) -> Path:
    """The file for a catalogue source such as ``cuda/07_blocktile_2d.cu``; an absolute path
    (a plugin's source) is itself."""
    if Path(relative).is_absolute():
        return Path(relative)
    folder, name = relative.split("/", 1)
    in_checkout = _CHECKOUT / folder / name
    if in_checkout.is_file():
        return in_checkout
    try:
        packaged = resources.files(f"mmsuite.sources.{folder}") / name
    except ModuleNotFoundError:  # a checkout without that folder
        return in_checkout
    return Path(str(packaged))


def expand_includes(text: str, folder: Path, seen: set[str] | None = None,
                    fallback: Path | None = None) -> str:
    """Inline ``#include "x"`` lines that name files of ``folder``, else of ``fallback``
    (recursively).

    Headers are inlined once each; ``.inc`` files are statement fragments,
    inlined at every include. Run-time compilers (NVRTC, OpenCL drivers) then
    need no include path, and a compiler cache keyed by the code notices an
    edited header.
    """
    seen = set() if seen is None else seen

    def replace(match: re.Match) -> str:
        name = match.group(1)
        path = folder / name
        if not path.is_file() and fallback is not None:
            path = fallback / name
        if not path.is_file():
            return match.group(0)
        if name in seen:
            return f"// {name} already included"
        if not name.endswith(".inc"):
            seen.add(name)
        body = expand_includes(path.read_text(), path.parent, seen, fallback)
        return f"// begin {name}\n{body}\n// end {name}"

    return _LOCAL_INCLUDE.sub(replace, text)


#: The ladder's folder whose headers a plugin's source of each kind may include.
LADDER_HEADERS = {".c": "csrc", ".h": "csrc", ".cl": "cl", ".cu": "cuda", ".cuh": "cuda"}


def ladder_folder(suffix: str) -> Path | None:
    """The folder of the ladder's sources of a file kind (``.cu``: ``cuda/``), if any."""
    folder = LADDER_HEADERS.get(suffix)
    return source_path(f"{folder}/mm.h").parent if folder else None


def read_source(relative: str) -> str:
    """A kernel source with the headers of its own folder inlined; a plugin's source (an
    absolute path) may also include the ladder's headers of its kind (``common.cuh``)."""
    path = source_path(relative)
    fallback = ladder_folder(path.suffix) if Path(relative).is_absolute() else None
    return expand_includes(path.read_text(), path.parent, fallback=fallback)
