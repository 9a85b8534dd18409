"""Revisions of a git repository, each built once into its own install folder.

``continuous`` measures two revisions side by side. Each is exported from git (``git
archive``: the committed tree, never the working tree's edits) and installed with pip
into ``<cache>/<commit>/site``, where a worker process imports it ahead of anything
else. Dependencies are not installed again: the worker runs this interpreter, whose
environment already has them, so a build costs one compile of the C ladder. A finished
build is marked by ``built.json``, which records a hash of the package it installed; it
is reused on the next call only if the package is still there, whole and unchanged
(else it is built again), and a lock makes concurrent calls wait for one build instead
of racing. Files of the cache are opened without following symbolic links: a shared
cache folder must not let another user's link redirect a write. pip and the compilers
it starts run in a process group of their own that dies with the command, even when the
command is killed (``run_supervised``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO


class RevisionError(ValueError):
    """A revision that does not name a commit of the repository (bad input)."""


class BuildError(RuntimeError):
    """A revision that does not build; the message names it and the log."""


@dataclass(frozen=True)
class Build:
    """One revision, installed: ``site`` goes first on a worker's import path. A revision of
    a user's plugin repository (``export_plugins``) runs the driver's own mmsuite
    (``site_dir``) with its revision's ``plugin_paths``."""

    revision: str  # as the user wrote it
    commit: str  # full hash
    root: Path
    site_dir: Path | None = None
    plugin_paths: tuple[str, ...] = ()

    @property
    def site(self) -> Path:
        return self.site_dir or self.root / "site"

    @property
    def package(self) -> Path:
        """The installed package a worker must import: ``site/mmsuite``."""
        return self.site / "mmsuite"

    @property
    def short(self) -> str:
        return self.commit[:10]


def package_hash(package: Path) -> str:
    """A hash of every file of an installed package (bytecode caches aside), with their
    relative paths; "" where the folder is missing."""
    if not package.is_dir() or package.is_symlink():
        return ""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*")):
        rel = path.relative_to(package)
        if "__pycache__" in rel.parts or path.is_dir() and not path.is_symlink():
            continue
        digest.update(rel.as_posix().encode() + b"\0")
        # A link inside the package is recorded as a link (its target), never followed.
        data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
        digest.update(hashlib.sha256(data).digest())
    return digest.hexdigest()


def damage(build: Build) -> str:
    """What is wrong with a finished build, or "" where its package is the one it
    installed: ``built.json`` readable and of this commit, the package present and
    hashing as it did when built."""
    try:
        stamp = json.loads((build.root / "built.json").read_text())
    except (OSError, ValueError) as exc:
        return f"built.json unreadable ({exc})"
    if not isinstance(stamp, dict) or stamp.get("commit") != build.commit:
        return "built.json names another commit"
    if not stamp.get("package_sha256"):
        return "built.json records no package hash (an older build)"
    if not (build.package / "__init__.py").is_file():
        return f"{build.package} is missing"
    if package_hash(build.package) != stamp["package_sha256"]:
        return f"{build.package} changed since it was built"
    return ""


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "mmsuite" / "builds"


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RevisionError(done.stderr.strip().splitlines()[-1] if done.stderr.strip()
                            else f"git {' '.join(args)} failed")
    return done.stdout.strip()


def resolve(repo: Path, revision: str) -> str:
    """The full commit hash ``revision`` names in ``repo``; RevisionError if none."""
    if shutil.which("git") is None:
        raise RevisionError("git is not installed")
    try:
        _git(repo, "rev-parse", "--git-dir")
    except RevisionError:
        raise RevisionError(f"{repo} is not a git repository (give --repo)") from None
    try:
        return _git(repo, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
    except RevisionError:
        raise RevisionError(f"unknown revision {revision!r} in {repo}") from None


def first_parent_line(repo: Path, good: str, bad: str) -> list[str] | None:
    """The commits after ``good`` up to ``bad`` on ``bad``'s first-parent line, oldest
    first; None where ``good`` is not an ancestor of ``bad``."""
    try:
        _git(repo, "merge-base", "--is-ancestor", good, bad)
    except RevisionError:
        return None
    return _git(repo, "rev-list", "--first-parent", "--reverse", f"{good}..{bad}").split()


def subject(repo: Path, commit: str) -> str:
    """The first line of ``commit``'s message."""
    return _git(repo, "log", "-1", "--format=%s", commit)


def uncommitted_changes(repo: Path) -> list[str]:
    """Paths with uncommitted changes that would be built if committed (not ignored)."""
    out = _git(repo, "status", "--porcelain", "--untracked-files=no")
    return [line[3:] for line in out.splitlines() if line.strip()]


def build(repo: Path, revision: str, cache: Path, log=None) -> Build:
    """The revision's build, made now unless the cache has it. ``log(text)`` hears of a
    build that starts and how long it took."""
    commit = resolve(repo, revision)
    root = cache / commit
    result = Build(revision, commit, root)
    stamp = root / "built.json"
    try:
        root.mkdir(parents=True, exist_ok=True)
        if root.is_symlink() or not root.is_dir():
            raise BuildError(f"{root} is not a folder of the build cache (a link or a file)")
        lock = os.fdopen(_open_nofollow(root / ".lock", os.O_WRONLY | os.O_CREAT), "w")
    except OSError as exc:
        raise BuildError(f"cannot use the build cache {cache}: {exc.strerror or exc} "
                         f"({exc.filename or root}); give --cache-dir") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent call builds, this one waits
        if stamp.exists() or stamp.is_symlink():
            wrong = damage(result)
            if not wrong:
                return result
            if log:
                log(f"the build of {revision} ({commit[:10]}) is damaged: {wrong}; "
                    f"building it again")
            stamp.unlink()
        started = time.monotonic()
        if log:
            log(f"building {revision} ({commit[:10]}) into {root}")
        try:
            for part in ("src", "site"):
                _remove(root / part)
            _export(repo, commit, root / "src")
            _install(root, revision, commit)
            package = package_hash(result.package)
            if not package:
                raise BuildError(f"{revision} ({commit[:10]}) built, but installed no "
                                 f"mmsuite package under {result.site}")
            _write_new(stamp, json.dumps({"commit": commit, "package_sha256": package,
                                          "seconds": round(time.monotonic() - started, 1)})
                       + "\n")
        except OSError as exc:
            raise BuildError(f"{revision} ({commit[:10]}) cannot be built in {root}: "
                             f"{exc.strerror or exc} ({exc.filename or root})") from None
        if log:
            log(f"built {revision} in {time.monotonic() - started:.0f} s")
    return result


def export_plugins(repo: Path, revision: str, cache: Path, relpaths: list[str]) -> Build:
    """The revision of a user's repository holding plugin files ``relpaths``, exported
    (committed files only) into ``<cache>/plugins/<commit>/src``; its kernels run on this
    mmsuite, on both sides of a gate. Nothing is built here: a plugin's C kernel is built
    by its worker, cached by content."""
    commit = resolve(repo, revision)
    root = cache / "plugins" / commit
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "exported.json").is_file():
            shutil.rmtree(root / "src", ignore_errors=True)
            _export(repo, commit, root / "src")
            (root / "exported.json").write_text(json.dumps({"commit": commit}) + "\n")
    missing = [p for p in relpaths if not (root / "src" / p).is_file()]
    if missing:
        raise RevisionError(f"{revision} ({commit[:10]}) has no plugin file {missing[0]} "
                            "(give --plugin relative to --repo, and commit it)")
    return Build(revision, commit, root, site_dir=Path(__file__).resolve().parent.parent,
                 plugin_paths=tuple(str(root / "src" / p) for p in relpaths))


def _open_nofollow(path: Path, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)


def _remove(path: Path) -> None:
    """Remove a folder of the build, or a link or file in its place (not what it names)."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)


def _write_new(path: Path, text: str) -> None:
    """Write ``path`` through a fresh file renamed over it: a link there is replaced,
    never followed."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    if temporary.is_symlink() or temporary.exists():
        temporary.unlink()
    with os.fdopen(_open_nofollow(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "w") as f:
        f.write(text)
    os.replace(temporary, path)


def _export(repo: Path, commit: str, target: Path) -> None:
    target.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(repo), "archive", "--format=tar", commit],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert archive.stdout is not None and archive.stderr is not None  # asked for both
    try:
        with tarfile.open(fileobj=archive.stdout, mode="r|") as tar:
            if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12: refuse odd members
                tar.extractall(target, filter="data")
            else:
                tar.extractall(target)
    except tarfile.TarError as exc:
        # A member the data filter refuses (a link out of the tree, an absolute link), or
        # no archive at all (an empty tree).
        archive.kill()
        archive.wait()
        raise BuildError(f"{commit[:10]} cannot be exported: {exc or type(exc).__name__}") \
            from None
    finally:
        archive.stdout.close()
    if archive.wait() != 0:
        error = archive.stderr.read().decode(errors="replace").strip().splitlines()
        raise BuildError(f"git archive {commit[:10]} failed"
                         + (f": {error[-1]}" if error else ""))
    if not any(target.iterdir()):
        raise BuildError(f"{commit[:10]} has an empty tree: nothing to build")


#: Runs a build's command (argv[1:]) in the process group it leads, and kills the whole
#: group (pip, setuptools, gcc) the moment its standard input reaches its end: when the
#: process that started it closes the pipe or dies, even by SIGKILL, which no handler sees.
#: A pipe's end is portable; Linux's PR_SET_PDEATHSIG would reach the first child only.
SUPERVISOR = """
import os, signal, subprocess, sys, threading
command = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL)
def watch():
    while os.read(0, 4096):
        pass
    os.killpg(os.getpgrp(), signal.SIGKILL)
threading.Thread(target=watch, daemon=True).start()
code = command.wait()
os._exit(code if code >= 0 else 128 - code)
"""


def run_supervised(command: list[str], log: IO) -> int:
    """Run a build step, its output to ``log``; its exit status. It and every process it
    starts die with this process, however this one ends (a Ctrl-C here, a SIGKILL of a CI
    timeout): none is left to go on compiling into the cache. See ``SUPERVISOR``."""
    process = subprocess.Popen([sys.executable, "-c", SUPERVISOR, *command],
                               stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        return process.wait()
    except BaseException:
        try:  # the group's leader is not reaped yet: its id is still this group's
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        raise
    finally:
        assert process.stdin is not None  # asked for
        process.stdin.close()
        process.wait()


def _install(root: Path, revision: str, commit: str) -> None:
    """pip install the exported tree into ``site`` without its dependencies (this
    interpreter has them). First without a build environment, with the setuptools and
    cffi at hand, which needs no package index (offline GPU hosts); where those are too
    old for the project's metadata, in pip's isolated build environment."""
    log_path = root / "build.log"
    base = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile",
            "--disable-pip-version-check", "--target", str(root / "site"), str(root / "src")]
    with open(log_path, "w") as log:
        for extra in (["--no-build-isolation", "--no-index"], []):
            command = base[:4] + extra + base[4:]
            log.write(f"$ {' '.join(command)}\n")
            log.flush()
            if run_supervised(command, log) == 0:
                return
            shutil.rmtree(root / "site", ignore_errors=True)
    lines = [ln for ln in log_path.read_text().splitlines()
             if ln.strip() and not ln.startswith(("WARNING", "hint:", "note:"))]
    errors = [ln.strip() for ln in lines if "error" in ln.lower()]
    last = (errors or lines or ["no output"])[-1]
    raise BuildError(f"{revision} ({commit[:10]}) failed to build: {last} "
                     f"(full log: {log_path})")
