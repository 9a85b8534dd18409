"""Builds of revisions for ``continuous``: reused only while the package they installed is
whole and unchanged, exported and cached without a traceback or a followed link."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from mmsuite import builds

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "setup.py").write_text("# the package's build\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "one")
    return repo


@pytest.fixture
def installs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """pip install replaced by writing a two-file package; the list of the builds made."""
    made: list[str] = []

    def install(root: Path, revision: str, commit: str) -> None:
        package = root / "site" / "mmsuite"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(f"COMMIT = {commit!r}\n")
        (package / "kernels.so").write_bytes(b"\x7fELF" + bytes(64))
        made.append(commit)

    monkeypatch.setattr(builds, "_install", install)
    return made


def test_a_whole_build_is_reused(repo, tmp_path, installs) -> None:
    first = builds.build(repo, "HEAD", tmp_path / "cache")
    again = builds.build(repo, "HEAD", tmp_path / "cache")
    assert again == first and len(installs) == 1
    assert builds.damage(again) == ""


@pytest.mark.parametrize("harm", ["site deleted", "package deleted", "file truncated",
                                  "file added", "stamp without a hash"])
def test_a_damaged_build_is_built_again_not_reused(repo, tmp_path, installs, harm) -> None:
    built = builds.build(repo, "HEAD", tmp_path / "cache")
    if harm == "site deleted":
        shutil.rmtree(built.site)
    elif harm == "package deleted":
        shutil.rmtree(built.package)
    elif harm == "file truncated":
        (built.package / "kernels.so").write_bytes(b"\x7fELF")
    elif harm == "file added":
        (built.package / "planted.py").write_text("import os\n")
    else:  # a build of an older mmsuite, whose stamp hashed nothing
        (built.root / "built.json").write_text(f'{{"commit": "{built.commit}"}}\n')
    assert builds.damage(built) != ""
    messages: list[str] = []
    builds.build(repo, "HEAD", tmp_path / "cache", log=messages.append)
    assert len(installs) == 2
    assert "is damaged" in messages[0] and "building it again" in messages[0]
    assert builds.damage(built) == ""
    assert not (built.package / "planted.py").exists()


def test_a_build_that_installs_no_package_is_a_build_error(repo, tmp_path,
                                                           monkeypatch) -> None:
    monkeypatch.setattr(builds, "_install", lambda root, revision, commit:
                        (root / "site").mkdir())
    with pytest.raises(builds.BuildError, match="installed no mmsuite package"):
        builds.build(repo, "HEAD", tmp_path / "cache")


def test_a_link_at_the_cache_lock_is_not_followed(repo, tmp_path, installs) -> None:
    cache = tmp_path / "cache"
    commit = builds.resolve(repo, "HEAD")
    (cache / commit).mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (cache / commit / ".lock").symlink_to(victim)
    with pytest.raises(builds.BuildError, match="cannot use the build cache"):
        builds.build(repo, "HEAD", cache)
    assert victim.read_text() == "keep me\n"


def test_a_link_at_the_stamp_is_replaced_not_written_through(repo, tmp_path,
                                                             installs) -> None:
    cache = tmp_path / "cache"
    commit = builds.resolve(repo, "HEAD")
    (cache / commit).mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (cache / commit / "built.json").symlink_to(victim)
    built = builds.build(repo, "HEAD", cache)
    assert victim.read_text() == "keep me\n"
    assert not (built.root / "built.json").is_symlink() and builds.damage(built) == ""


def test_an_unwritable_cache_is_a_build_error(repo, tmp_path, installs) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    with pytest.raises(builds.BuildError, match="cannot use the build cache"):
        builds.build(repo, "HEAD", blocked / "cache")


def test_a_commit_with_an_absolute_link_is_a_build_error(repo, tmp_path, installs) -> None:
    os.symlink("/etc/passwd", repo / "escape")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "link")
    with pytest.raises(builds.BuildError, match="cannot be exported"):
        builds.build(repo, "HEAD", tmp_path / "cache")
    assert installs == []


def test_an_empty_tree_is_a_build_error(tmp_path, installs) -> None:
    repo = tmp_path / "empty"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "commit", "-q", "--allow-empty", "-m", "nothing")
    with pytest.raises(builds.BuildError, match="empty tree|cannot be exported"):
        builds.build(repo, "HEAD", tmp_path / "cache")
    assert installs == []


# ------------------------------------------------------------ a build's processes
def _group(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``."""
    alive = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                alive.append(int(entry.name))
    return alive


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_a_build_killed_by_sigkill_leaves_no_process_behind(tmp_path) -> None:
    """A CI timeout's SIGKILL of `continuous` during a build left pip and gcc compiling on:
    the build's processes, a child and a grandchild here, die with it."""
    import signal
    import sys
    import time

    marker = tmp_path / "started"
    step = ["sh", "-c", f"sleep 300 & echo $$ > {marker}; sleep 300; wait"]
    driver = subprocess.Popen([sys.executable, "-c",
                               "import sys; from mmsuite import builds; "
                               "builds.run_supervised(sys.argv[1:], sys.stdout)", *step],
                              stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not marker.exists() or not marker.read_text().strip():
        assert driver.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    pgid = os.getpgid(int(marker.read_text()))
    assert pgid != os.getpgrp() and len(_group(pgid)) >= 3  # supervisor, sh, two sleeps
    try:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        deadline = time.monotonic() + 10
        while _group(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _group(pgid) == []
    finally:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_build_step_reports_its_exit_status_and_output(tmp_path) -> None:
    log = tmp_path / "build.log"
    with open(log, "w") as out:
        assert builds.run_supervised(["sh", "-c", "echo compiling; exit 3"], out) == 3
    assert log.read_text() == "compiling\n"


def test_pip_runs_supervised(repo, tmp_path, monkeypatch) -> None:
    steps: list[list[str]] = []

    def supervised(command, log) -> int:
        steps.append(command)
        return 1

    monkeypatch.setattr(builds, "run_supervised", supervised)
    with pytest.raises(builds.BuildError, match="failed to build"):
        builds.build(repo, "HEAD", tmp_path / "cache")
    assert steps and all(step[1:4] == ["-m", "pip", "install"] for step in steps)
