"""Locating kernel sources, in a source checkout and in an installed wheel alike.

In the repository the sources sit at the top (csrc/, cl/, cuda/); the wheel
carries them as package data of mmsuite.sources.csrc / .cl / .cuda.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parent.parent.parent


def source_path(relative: str) -> Path:
    """The file for a catalogue source such as ``cuda/07_blocktile_2d.cu``."""
    folder, name = relative.split("/", 1)
    in_checkout = _CHECKOUT / folder / name
    if in_checkout.is_file():
        return in_checkout
    try:
        packaged = resources.files(f"mmsuite.sources.{folder}") / name
    except ModuleNotFoundError:  # a checkout without that folder
        return in_checkout
    return Path(str(packaged))


def read_source(relative: str) -> str:
    return source_path(relative).read_text()
