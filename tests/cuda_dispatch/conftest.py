"""Every dispatcher test reads and writes tuning and model files in its own folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmsuite.cuda_dispatch import tuning_file


@pytest.fixture(autouse=True)
def _tuning_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's folder is the test's own; nothing is shipped unless a test says so."""
    folder = tmp_path / "tuning"
    monkeypatch.setenv(tuning_file.TUNING_ENV, str(folder))
    monkeypatch.setattr(tuning_file, "BUNDLED_DIR", tmp_path / "shipped")
    return folder
