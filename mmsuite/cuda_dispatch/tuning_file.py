"""Per-device files: tuned entries (``mmsuite tune``) and fitted model parameters
(``mmsuite tune --fit-model``), the user's and the ones shipped with mmsuite.

Files live in ``$MMSUITE_TUNING_DIR`` when that is set, else in
``$XDG_CACHE_HOME/mmsuite/tuning`` (``~/.cache/mmsuite/tuning``), named after the
device (``nvidia-h100-80gb-hbm3.json`` for entries, ``...model.json`` for the
model). Where the user's folder has no file, the one shipped in
``mmsuite/tuning/`` is read; ``MMSUITE_BUNDLED_TUNING=0`` turns the shipped
files off. An entry names a candidate of the manifest (:mod:`.variants`), its family
and its parameters, for one problem's exact (column-major) sizes (entries of older
files name the family by a flag, and still read). Files are written atomically with the
project's writer, with the user's umask.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from ..results import write_atomically
from .family import Candidate
from .variants import BY_KEY, BY_NAME

TUNING_FORMAT = 1
MODEL_FORMAT = 1
TUNING_ENV = "MMSUITE_TUNING_DIR"
BUNDLED_ENV = "MMSUITE_BUNDLED_TUNING"
BUNDLED_DIR = Path(__file__).resolve().parent.parent / "tuning"


class TuningFileError(ValueError):
    """A tuning or model file that cannot be read as one."""


def tuning_dir() -> Path:
    """Where the user's files live: $MMSUITE_TUNING_DIR, else the user's cache folder."""
    if os.environ.get(TUNING_ENV):
        return Path(os.environ[TUNING_ENV])
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "mmsuite" / "tuning"


def device_slug(name: str) -> str:
    """A file name for a device name: 'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug or "unknown-device"


def tuning_path(device_name: str) -> Path:
    """The user's tuning file for a device (``mmsuite tune`` writes it)."""
    return tuning_dir() / f"{device_slug(device_name)}.json"


def model_path(device_name: str) -> Path:
    """The user's fitted model for a device (``mmsuite tune --fit-model`` writes it)."""
    return tuning_dir() / f"{device_slug(device_name)}.model.json"


def _bundled(file_name: str) -> Path | None:
    if os.environ.get(BUNDLED_ENV, "1") == "0":
        return None
    path = BUNDLED_DIR / file_name
    return path if path.is_file() else None


def bundled_tuning_path(device_name: str) -> Path | None:
    """The tuning file shipped for a device, or None (none shipped, or turned off)."""
    return _bundled(f"{device_slug(device_name)}.json")


def bundled_model_path(device_name: str) -> Path | None:
    """The model shipped for a device, or None."""
    return _bundled(f"{device_slug(device_name)}.model.json")


def shape_key(m: int, n: int, k: int, batch: int = 1) -> str:
    """The key of a problem in a tuning file: the kernel's own (column-major) sizes."""
    return f"{m}x{n}x{k}x{batch}"


def _read(path: Path, fmt: int, what: str, required: str) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise TuningFileError(f"cannot read {what} {path}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get(required), dict):
        raise TuningFileError(f"{path} is not an mmsuite {what} (no '{required}' mapping)")
    if data.get("format") != fmt:
        raise TuningFileError(f"{path} has format {data.get('format')!r}, this mmsuite reads "
                              f"format {fmt}")
    return data


def load_tuning(path: Path) -> dict:
    """A tuning file's content ({'device', 'entries': {shape_key: entry}}); empty if absent."""
    if not path.is_file():
        return {"format": TUNING_FORMAT, "device": None, "entries": {}}
    return _read(path, TUNING_FORMAT, "tuning file", "entries")


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def store_tuning(path: Path, device_name: str, entries: dict) -> dict:
    """Merge ``entries`` into the tuning file at ``path`` (atomically); returns its content.

    An entry of None removes that problem's entry: the model decides it again.
    """
    data = load_tuning(path)
    data["device"] = device_name
    merged = {**data["entries"], **entries}
    data["entries"] = {key: entry for key, entry in merged.items() if entry is not None}
    _write(path, data)
    return data


#: The flags by which files written before entries named their family said so (a split-K
#: entry had none).
_LEGACY_FLAGS = ("gemv", "dot", "shortk", "streamk")


def entry_of(candidate: Candidate[Any], **extra: Any) -> dict:
    """A tuning-file entry naming ``candidate`` and its family."""
    return {"params": candidate.config.params(), "config": candidate.config.name,
            "split": candidate.split, "family": candidate.family, **extra}


def _family_of(entry: dict) -> str:
    """The family an entry names: its ``family``, else the flag an older file set."""
    if "family" in entry:
        return str(entry["family"])
    return next((flag for flag in _LEGACY_FLAGS if entry.get(flag)), "splitk")


def candidate_of(entry: dict, path: Path | str) -> Candidate[Any]:
    """The candidate a tuning-file entry names (TuningFileError when it names none)."""
    try:
        split = int(entry["split"])
        family = BY_NAME[_family_of(entry)]
        config = family.config_of(entry["params"])
    except (KeyError, TypeError, ValueError) as exc:
        raise TuningFileError(f"bad entry in {path}: {entry!r} ({exc})") from exc
    if split < 1:
        raise TuningFileError(f"bad entry in {path}: split {split} < 1")
    row = BY_KEY.get(f"{family.name}:{config.name}")
    if row is None:
        known = ", ".join(v.config.name for v in family.variants)
        raise TuningFileError(f"bad entry in {path}: {config.name} is not one of the "
                              f"{family.name} variants ({known})")
    if family.splits_own_way and split != 1:
        raise TuningFileError(f"bad entry in {path}: a {family.name} entry has split 1")
    return Candidate(row, split)


def tuned(device_name: str, m: int, n: int, k: int,
          batch: int) -> tuple[Candidate[Any] | None, Path | None]:
    """The entry for these exact sizes (the user's file first, then the shipped one) and the
    file that decided; (None, the first file consulted) when none names the problem."""
    paths = [p for p in (tuning_path(device_name), bundled_tuning_path(device_name))
             if p is not None and p.is_file()]
    key = shape_key(m, n, k, batch)
    for path in paths:
        entry = load_tuning(path)["entries"].get(key)
        if entry is not None:
            return candidate_of(entry, path), path
    return None, (paths[0] if paths else None)


def load_model(path: Path) -> dict:
    """A model file's content ({'device', 'parameters', ...})."""
    return _read(path, MODEL_FORMAT, "model file", "parameters")


def store_model(path: Path, device_name: str, parameters: dict, **facts) -> dict:
    """Write a fitted model for a device (atomically); returns what was written."""
    data = {"format": MODEL_FORMAT, "device": device_name, "parameters": parameters, **facts}
    _write(path, data)
    return data


def model_file(device_name: str) -> Path | None:
    """The model file that applies to a device: the user's, else the shipped one."""
    user = model_path(device_name)
    return user if user.is_file() else bundled_model_path(device_name)
