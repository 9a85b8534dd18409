"""Result files: one JSON document per run, written atomically."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

FORMAT = "mmsuite-results/1"


def _clean(value):
    """JSON has no NaN/Inf: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def save(path: Path, records: list[dict], environment: dict, settings: dict) -> None:
    """Write the run atomically: a reader never sees half a file, a crash never leaves one."""
    document = {"format": FORMAT, "environment": environment, "settings": settings,
                "results": records}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(_clean(document), fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load(path: Path) -> dict:
    """Read a result file written by ``save``; raises ValueError if it is not one."""
    try:
        document = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"no such result file: {path}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ValueError(f"{path} is not an mmsuite result file")
    for record in document["results"]:
        if record.get("max_rel_err") is None and "max_rel_err" in record:
            record["max_rel_err"] = math.inf
    return document
