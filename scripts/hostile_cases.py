#!/usr/bin/env python3
"""A hostile user's battery: the defects of the gate, the cluster and the error paths, each
tried as a user would (a command, an input, a signal at a bad moment) and judged by what
must come of it: the exit status, one line on stderr and no traceback, the files intact.

    scripts/hostile_cases.py                 # every case; a table of case -> ok / bad
    scripts/hostile_cases.py -k continuous   # the cases whose name holds a word
    scripts/hostile_cases.py --list          # the cases, run none

Run it from a checkout (the gate's cases build its HEAD once, into a temporary cache, a
minute or two). A case that needs a GPU or a second host says so and is skipped; a few
scenarios that cannot be staged from the command line (a worker of other code, a kernel
that crashes in one revision only) run the test of the suite that stages them, and say so.
The exit status is 1 when a case is bad, else 0.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "report_cpu_opencl.json"
GATE_KERNELS = ["cpu.seq_naive", "cpu.seq_ikj", "cpu.seq_tiled", "cpu.omp_naive", "cpu.blas"]


class Bad(Exception):
    """What a case found wrong."""


class Skip(Exception):
    """Why a case cannot run here."""


@dataclass
class Case:
    name: str
    defect: str  # the number for it, or "minor"
    check: Callable[[Path], str]  # runs in a fresh folder; returns what it saw, or raises


CASES: list[Case] = []


def case(name: str, defect: str) -> Callable[[Callable[[Path], str]], Callable[[Path], str]]:
    def register(check: Callable[[Path], str]) -> Callable[[Path], str]:
        CASES.append(Case(name, defect, check))
        return check

    return register


# ------------------------------------------------------------------ helpers
def env_with(**extra: str) -> dict[str, str]:
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "COLUMNS": "100", **extra}


def mm(
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 600,
    stdout=subprocess.PIPE,
) -> subprocess.CompletedProcess:
    """``mmsuite ARGS`` in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "mmsuite.cli", *args],
        env=env or env_with(),
        cwd=cwd,
        timeout=timeout,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
    )


def start(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, log: Path | None = None
) -> subprocess.Popen:
    out = open(log, "w") if log else subprocess.PIPE
    return subprocess.Popen(
        [sys.executable, "-m", "mmsuite.cli", *args],
        env=env or env_with(),
        cwd=cwd,
        stdout=out,
        stderr=subprocess.STDOUT if log else subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_interruptible,
    )


def _interruptible() -> None:
    """Ctrl-C as a terminal gives it: a shell's background job starts with SIGINT ignored,
    which Python keeps (no KeyboardInterrupt would ever come)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _exited_cleanly(done: subprocess.CompletedProcess, status: int) -> str:
    """The command ended with ``status`` and no traceback; its stderr, stripped."""
    err = done.stderr.strip()
    if "Traceback" in err or "internal error" in err:
        raise Bad(f"traceback (exit {done.returncode}): {err.splitlines()[-1][:90]}")
    if done.returncode != status:
        raise Bad(f"exit {done.returncode}, not {status}: {err[-120:]}")
    return err


def one_line(done: subprocess.CompletedProcess, status: int = 2, says: str = "") -> str:
    """The command failed with ``status`` and one line on stderr, no traceback."""
    err = _exited_cleanly(done, status)
    lines = err.splitlines()
    if len(lines) != 1 or not lines[0].startswith("mmsuite: error: "):
        raise Bad(f"{len(lines)} lines on stderr: {err[:120]!r}")
    if says and says not in lines[0]:
        raise Bad(f"the line does not say {says!r}: {lines[0][:120]}")
    return f"exit {status}: {lines[0][16:96]}"


def last_line(done: subprocess.CompletedProcess, status: int = 2, says: str = "") -> str:
    """For a command that reports progress on stderr: it failed with ``status``, its last
    line is the one error line, and no traceback."""
    err = _exited_cleanly(done, status)
    errors = [ln for ln in err.splitlines() if ln.startswith("mmsuite: error: ")]
    if len(errors) != 1 or (says and says not in errors[0]):
        raise Bad(f"{len(errors)} error lines: {err[-160:]!r}")
    return f"exit {status}: {errors[0][16:96]}"


def no_traceback(done: subprocess.CompletedProcess, statuses: tuple[int, ...] = (0,)) -> str:
    if "Traceback" in done.stderr or "internal error" in done.stderr:
        raise Bad(f"traceback: {done.stderr.strip().splitlines()[-1][:100]}")
    if done.returncode not in statuses:
        raise Bad(f"exit {done.returncode}: {done.stderr.strip()[-120:]}")
    return f"exit {done.returncode}, no traceback"


def by_test(node: str) -> str:
    """A scenario staged by a test of the suite."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"tests/{node}"],
        cwd=ROOT,
        env=env_with(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    last = (done.stdout.strip().splitlines() or ["no output"])[-1]
    if done.returncode != 0 or " passed" not in last:
        raise Bad(f"tests/{node}: {last}")
    return f"by its test: {node.split('::')[-1][:60]} ({last})"


def staged_by_test(name: str, defect: str, node: str, dask: bool = False) -> None:
    """Registers the case ``name`` as the scenario the test ``node`` stages (one that needs
    the cluster extra when ``dask``)."""

    def check(tmp: Path) -> str:
        if dask:
            _needs_dask()
        return by_test(node)

    case(name, defect)(check)


def results_file(
    path: Path, change: Callable[[dict], None] | None = None, rows: int | None = None
) -> Path:
    """The CPU fixture's rows (``rows`` of them over growing sizes), changed by ``change``."""
    document = json.loads(FIXTURE.read_text())
    if rows is not None:
        seed = [r for r in document["results"] if r["problem"] == document["results"][0]["problem"]]
        document["results"] = [
            {
                **seed[i % len(seed)],
                "problem": {
                    **seed[i % len(seed)]["problem"],
                    "m": 8 + i // len(seed),
                    "n": 8 + i // len(seed),
                    "k": 8 + i // len(seed),
                },
            }
            for i in range(rows)
        ]
    if change is not None:
        change(document)
    path.write_text(json.dumps(document))
    return path


def timed(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess, float, float]:
    """``mmsuite ARGS``, its wall seconds and its own peak resident memory (MiB)."""
    started = time.monotonic()
    with open(cwd / "timed.out", "w") as out, open(cwd / "timed.err", "w") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "mmsuite.cli", *args],
            env=env_with(),
            cwd=cwd,
            stdout=out,
            stderr=err,
        )
        _, status, usage = os.wait4(process.pid, 0)  # this child's rusage alone
    seconds = time.monotonic() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    done = subprocess.CompletedProcess(
        process.args,
        process.returncode,
        (cwd / "timed.out").read_text(),
        (cwd / "timed.err").read_text(),
    )
    return done, seconds, usage.ru_maxrss / 1024


_CACHE: list[Path] = []


def gate_cache() -> Path:
    """A build cache holding this checkout's HEAD, built once for every gate case."""
    if not _CACHE:
        _CACHE.append(Path(tempfile.mkdtemp(prefix="mmsuite-battery-cache-")))
    return _CACHE[0]


def head_commit() -> str:
    """This checkout's HEAD, the commit a gate of HEAD builds."""
    return subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()


def gate_of(
    *extra: str,
    repo: Path = ROOT,
    cache: Path | None = None,
    kernels: Sequence[str] = ("cpu.seq_ikj",),
) -> list[str]:
    """``continuous HEAD HEAD`` of ``repo`` (into ``cache``, else the default cache) for
    ``kernels``, then ``extra``."""
    return [
        "continuous",
        "HEAD",
        "HEAD",
        "--repo",
        str(repo),
        *(["--cache-dir", str(cache)] if cache is not None else []),
        *[a for k in kernels for a in ("--kernel", k)],
        *extra,
    ]


def gate_args(*extra: str, kernels: list[str] = GATE_KERNELS) -> list[str]:
    """The battery's gate of HEAD: built once into :func:`gate_cache`, two small shapes."""
    return gate_of(
        "--shape", "40,48", "--max-time", "2", *extra, cache=gate_cache(), kernels=kernels
    )


SMALL_RUN = ("run", "--kernel", "cpu.seq_ikj", "--shape", "16")  # one kernel, one small shape


def journal_rows(path: Path) -> int:
    try:
        return max(0, len([ln for ln in path.read_text().splitlines() if ln.strip()]) - 1)
    except OSError:
        return 0


def wait_until(
    what: str, check: Callable[[], bool], process: subprocess.Popen, timeout: float = 600
) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if process.poll() is not None:
            raise Bad(f"the command ended (exit {process.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise Bad(f"{what} did not happen within {timeout:.0f} s")
        time.sleep(0.1)


# ------------------------------------------------------------------ 1: the build cache
@case("continuous: a build whose site/ was deleted is rebuilt, not reused", "1")
def damaged_cache(tmp: Path) -> str:
    first = mm(*gate_args(kernels=["cpu.seq_ikj"]), "--shape", "32")
    no_traceback(first)
    commit = head_commit()
    shutil.rmtree(gate_cache() / commit / "site")
    again = mm(*gate_args(kernels=["cpu.seq_ikj"]), "--shape", "32")
    no_traceback(again)
    if "is damaged" not in again.stderr or "building it again" not in again.stderr:
        raise Bad("the damaged build was reused")
    return "rebuilt: " + [ln for ln in again.stderr.splitlines() if "damaged" in ln][0][9:80]


# ------------------------------------------------------------------ 2: worker ports
def _scheduler(tmp: Path, host: str = "127.0.0.1") -> tuple[subprocess.Popen, str]:
    pytest_free = tmp / "scheduler.json"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "distributed.cli.dask_scheduler",
            "--scheduler-file",
            str(pytest_free),
            "--host",
            host,
            "--port",
            "0",
            "--no-dashboard",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tmp,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while not pytest_free.exists():
        if time.monotonic() > deadline:
            raise Bad("the scheduler did not start")
        time.sleep(0.1)
    time.sleep(0.5)
    return process, json.loads(pytest_free.read_text())["address"]


def _needs_dask() -> None:
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise Skip("needs the cluster extra (Dask distributed)") from None


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=20)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()


def _listening(pids: set[int]) -> list[str]:
    import psutil

    return sorted(
        {
            f"{c.laddr.ip}:{c.laddr.port}"
            for c in psutil.net_connections("tcp")
            if c.status == psutil.CONN_LISTEN and c.pid in pids
        }
    )


@case("worker: listens only on the scheduler's interface (127.0.0.1)", "2")
def worker_binds(tmp: Path) -> str:
    _needs_dask()
    import psutil

    scheduler, address = _scheduler(tmp)
    worker = start(
        "worker", address, "--gpus", "none", "--name", "battery", cwd=tmp, log=tmp / "worker.log"
    )
    try:
        time.sleep(8)
        pids = {worker.pid, *(p.pid for p in psutil.Process(worker.pid).children(True))}
        ports = _listening(pids)
        if not ports:
            raise Bad(f"no listening port found: {(tmp / 'worker.log').read_text()[-200:]}")
        wrong = [p for p in ports if not p.startswith("127.0.0.1:")]
        if wrong:
            raise Bad(f"listens on {', '.join(wrong)}")
        return f"{len(ports)} ports, all on 127.0.0.1"
    finally:
        _stop(worker)
        _stop(scheduler)


@case("worker: code run through its port from another host", "2")
def worker_other_host(tmp: Path) -> str:
    raise Skip("needs a second host to connect from")


# ------------------------------------------------------------------ 3: matched by code
staged_by_test(
    "run --cluster: a worker of other measuring code is refused, naming both",
    "3",
    "test_cluster.py::test_a_worker_with_other_measuring_code_is_refused_naming_both",
    dask=True,
)


# ------------------------------------------------------------------ 4: BASE as measured
staged_by_test(
    "continuous: a kernel that breaks in HEAD keeps BASE's timed row",
    "4",
    "test_continuous.py::"
    "test_a_kernel_that_breaks_in_head_keeps_bases_timed_row_so_compare_agrees",
)


# ------------------------------------------------------------------ 5: derived paths
@case("run --json /proc/x", "5")
def json_proc(tmp: Path) -> str:
    return one_line(mm(*SMALL_RUN, "--json", "/proc/x.json"))


@case("run --json X with a directory at X.json.lock", "5")
def lock_dir(tmp: Path) -> str:
    (tmp / "x.json.lock").mkdir()
    return one_line(mm(*SMALL_RUN, "--json", str(tmp / "x.json")))


@case("run --json X with a symlink at X.json.lock", "5")
def lock_link(tmp: Path) -> str:
    (tmp / "x.json.lock").symlink_to(tmp / "elsewhere")
    done = one_line(mm(*SMALL_RUN, "--json", str(tmp / "x.json")))
    if (tmp / "elsewhere").exists():
        raise Bad("the link was followed")
    return done


@case("compare --junit /proc/x (never exit 1)", "5")
def compare_junit(tmp: Path) -> str:
    base = results_file(tmp / "a.json")
    return one_line(mm("compare", str(base), str(base), "--junit", "/proc/x.xml"))


@case("continuous --verdict-json /proc/x, after the whole gate", "5")
def gate_verdict_proc(tmp: Path) -> str:
    # As root /proc passes the up-front check (it is a writable folder to root): the write
    # fails after the gate, and must be one error line, exit 2, never a traceback.
    done = mm(
        *gate_args("--verdict-json", "/proc/x.json", kernels=["cpu.seq_ikj"]), "--shape", "32"
    )
    return last_line(done, says="/proc/x.json")


@case("history --out /proc/x.png", "5")
def history_proc(tmp: Path) -> str:
    a = results_file(tmp / "a.json")
    done = mm("history", "--results", str(a), "--out", "/proc/x.png")
    if "needs" in done.stderr and "pip install" in done.stderr:
        raise Skip("needs the plots extra")
    return one_line(done)


staged_by_test(
    "run --json on a full disk before the first row",
    "5",
    "test_cli_results.py::test_a_full_disk_is_one_line_naming_the_path",
)
staged_by_test(
    "run --json past a file size limit (ulimit -f)",
    "5",
    "test_cli_results.py::"
    "test_a_file_size_limit_is_one_line_after_the_table_with_the_journal_kept",
)


# ------------------------------------------------------------------ 6: scheduler lost
staged_by_test(
    "run --cluster: the scheduler lost mid-sweep keeps the finished rows",
    "6",
    "test_cluster.py::test_run_shows_and_saves_the_rows_finished_before_the_scheduler_was_lost",
    dask=True,
)


# ------------------------------------------------------------------ 7: the gate's journal
@case("continuous: SIGKILL mid-gate keeps the finished rows; --resume completes", "7")
def gate_sigkill(tmp: Path) -> str:
    out = tmp / "gate.json"
    warm = mm(*gate_args(kernels=["cpu.seq_ikj"]), "--shape", "32")  # the build, once
    no_traceback(warm)
    gate = start(*gate_args("--json", str(out), "--judge-identical"), cwd=tmp, log=tmp / "gate.log")
    journal = tmp / "gate.jsonl"
    wait_until("a row was journaled", lambda: journal_rows(journal) >= 2, gate)
    os.killpg(gate.pid, signal.SIGKILL)  # a CI timeout
    gate.wait()
    kept = journal_rows(journal)
    if out.exists():
        raise Bad("the gate finished before the kill: nothing was tried")
    resumed = mm(*gate_args("--json", str(out), "--judge-identical", "--resume"), cwd=tmp)
    no_traceback(resumed)
    rows = json.loads(out.read_text())["results"]
    if len(rows) != 2 * len(GATE_KERNELS):
        raise Bad(f"{len(rows)} rows after --resume")
    if f"resumed: {kept} of {len(rows)} rows finished before" not in resumed.stderr:
        raise Bad("--resume measured the finished rows again")
    if journal.exists():
        raise Bad("the journal stayed after the files held every row")
    return f"{kept} rows kept by the kill, {len(rows) - kept} measured by --resume"


@case("continuous: Ctrl-C mid-row: finished rows saved, the cut row not judged", "7")
def gate_sigint(tmp: Path) -> str:
    out = tmp / "gate.json"
    no_traceback(mm(*gate_args(kernels=["cpu.seq_ikj"]), "--shape", "32"))
    gate = start(*gate_args("--json", str(out), "--judge-identical"), cwd=tmp)
    journal = tmp / "gate.jsonl"
    wait_until("a row was journaled", lambda: journal_rows(journal) >= 2, gate)
    time.sleep(0.3)
    os.killpg(gate.pid, signal.SIGINT)
    _, err = gate.communicate(timeout=120)
    if "Traceback" in err or gate.returncode != 130:
        raise Bad(f"exit {gate.returncode}: {err.strip()[-150:]}")
    rows = json.loads(out.read_text())["results"]
    cut = [r for r in rows if "interrupted" in ((r.get("paired") or {}).get("reason") or "")]
    if any(r["paired"]["verdict"] != "unsure" for r in cut):
        raise Bad("a row cut short was given a verdict")
    if "--resume" not in err:
        raise Bad("no --resume hint")
    return f"exit 130, {len(rows)} rows saved ({len(cut)} cut short, unsure), journal kept"


@case("continuous --resume of another gate's journal (other settings)", "7")
def gate_other_journal(tmp: Path) -> str:
    out = tmp / "gate.json"
    header = {
        "format": "mmsuite-continuous-journal/1",
        "pid": 1,
        "settings": {"base": "0" * 40, "head": "0" * 40, "settings": {}, "options": {}, "rows": []},
    }
    (tmp / "gate.jsonl").write_text(json.dumps(header) + "\n")
    return one_line(
        mm(*gate_args("--json", str(out), "--resume"), cwd=tmp),
        says="is the journal of another gate",
    )


staged_by_test(
    "continuous: Ctrl-C just after the last row still shows and saves every row",
    "7",
    "test_continuous_journal.py::"
    "test_ctrl_c_just_after_the_last_row_still_shows_and_saves_every_row",
)


# ------------------------------------------------------------------ 8: the schema
def _first(change: Callable[[dict], None]) -> Callable[[dict], None]:
    def apply(document: dict) -> None:
        change(document["results"][0])

    return apply


SCHEMA = {
    "m = 10^30": lambda r: r["problem"].update(m=10**30),
    "m = 2^31": lambda r: r["problem"].update(m=2**31),
    "alpha = 1e300": lambda r: r["problem"].update(alpha=1e300),
    'inputs "bogus"': lambda r: r["problem"].update(inputs="bogus"),
    'energy.joules "x"': lambda r: r.update(energy={"joules": "x"}),
    'load_avg.before "x"': lambda r: r.update(load_avg={"before": "x"}),
}
for _label, _change in SCHEMA.items():

    def _schema_case(tmp: Path, change=_change) -> str:
        bad = results_file(tmp / "bad.json", _first(change))
        return one_line(mm("report", str(bad)), says="bad.json")

    case(f"report of a file with {_label}", "8")(_schema_case)


# ------------------------------------------------------------------ 9: the gate's checks
@case("continuous: a problem beyond host memory is refused", "9")
def gate_memory(tmp: Path) -> str:
    return one_line(mm(*gate_of("--shape", "100000", cache=tmp / "cache")), says="needs about")


@case("continuous: OMP_NUM_THREADS=64000 is refused", "9")
def gate_omp(tmp: Path) -> str:
    return one_line(
        mm(*gate_of(cache=tmp / "cache"), env=env_with(OMP_NUM_THREADS="64000")),
        says="OMP_NUM_THREADS",
    )


# ------------------------------------------------------------------ 10: cluster addresses
ADDRESSES = {
    'a file of {"address": 123}': '{"address": 123}',
    "garbage{": "garbage{",
    "an empty file": "",
}
for _label, _text in ADDRESSES.items():

    def _file_case(tmp: Path, text=_text) -> str:
        _needs_dask()
        target = tmp / "scheduler.json"
        target.write_text(text)
        return one_line(mm(*SMALL_RUN, "--cluster", str(target)))

    case(f"run --cluster with {_label}", "10")(_file_case)

for _address in ("foo://bar:1", "tcp://[::1"):

    def _address_case(tmp: Path, address=_address) -> str:
        _needs_dask()
        return one_line(mm(*SMALL_RUN, "--cluster", address, timeout=120))

    case(f"run --cluster {_address}", "10")(_address_case)

    def _worker_case(tmp: Path, address=_address) -> str:
        _needs_dask()
        return one_line(mm("worker", address, "--gpus", "none", timeout=120))

    case(f"worker {_address}", "10")(_worker_case)


# ------------------------------------------------------------------ 11: build exports
def _repo(tmp: Path, fill: Callable[[Path], None]) -> Path:
    repo = tmp / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    fill(repo)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "one"], check=True)
    return repo


@case("continuous of a commit with an absolute symlink", "11")
def abs_link(tmp: Path) -> str:
    repo = _repo(
        tmp, lambda r: (r / "setup.py").write_text("") or (r / "link").symlink_to("/etc/passwd")
    )
    return last_line(mm(*gate_of(repo=repo, cache=tmp / "cache")))


@case("continuous of an empty tree", "11")
def empty_tree(tmp: Path) -> str:
    repo = _repo(tmp, lambda r: None)
    return last_line(mm(*gate_of(repo=repo, cache=tmp / "cache")))


@case("continuous with an unwritable default cache", "11")
def unwritable_cache(tmp: Path) -> str:
    return one_line(mm(*gate_of(), env=env_with(XDG_CACHE_HOME="/proc/nope")))


# ------------------------------------------------------------------ 12: report at scale
@case("report --out of 10,000 rows: < 60 s and < 1 GB", "12")
def report_scale(tmp: Path) -> str:
    big = results_file(tmp / "big.json", rows=10_000)
    done, seconds, peak = timed("report", str(big), "--out", str(tmp / "out"), cwd=tmp)
    no_traceback(done)
    if seconds >= 60 or peak >= 1024:
        raise Bad(f"{seconds:.1f} s, {peak:.0f} MiB")
    return f"{seconds:.1f} s, peak RSS {peak:.0f} MiB"


@case("report / compare of 10,000 rows print a bounded number of lines", "12")
def report_terminal(tmp: Path) -> str:
    big = results_file(tmp / "big.json", rows=10_000)
    shown = mm("report", str(big))
    no_traceback(shown)
    compared = mm("compare", str(big), str(big))
    no_traceback(compared)
    lines = len(shown.stdout.splitlines()), len(compared.stdout.splitlines())
    if max(lines) > 1000 or "--all-rows" not in shown.stdout + compared.stdout:
        raise Bad(f"{lines} lines")
    return f"report {lines[0]} lines, compare {lines[1]} lines, each saying --all-rows"


# ------------------------------------------------------------------ 13: the terminal
@case("PYTHONIOENCODING=ascii mmsuite list", "13")
def ascii_list(tmp: Path) -> str:
    return no_traceback(mm("list", env=env_with(PYTHONIOENCODING="ascii")))


@case("a Latin-1 terminal: mmsuite list", "13")
def latin1_list(tmp: Path) -> str:
    return no_traceback(mm("list", env=env_with(PYTHONIOENCODING="latin-1")))


@case("mmsuite list > /dev/full", "13")
def dev_full(tmp: Path) -> str:
    if not Path("/dev/full").exists():
        raise Skip("no /dev/full here")
    with open("/dev/full", "w") as full:
        return one_line(mm("list", stdout=full))


@case("COLUMNS=99999999999999 mmsuite list", "13")
def absurd_columns(tmp: Path) -> str:
    return no_traceback(mm("list", env=env_with(COLUMNS="99999999999999")))


# ------------------------------------------------------------------ 14: a damaged C ladder
@case("a truncated C-ladder .so: named damaged, never loaded (no SIGBUS)", "14")
def truncated_so(tmp: Path) -> str:
    built = sorted((ROOT / "mmsuite" / "_cladder").glob("*.so"))
    if not built:
        raise Skip("the C ladder is not built here")
    copy = tmp / "pkg" / "mmsuite"
    shutil.copytree(ROOT / "mmsuite", copy, ignore=shutil.ignore_patterns("__pycache__"))
    victim = copy / "_cladder" / built[0].name
    victim.write_bytes(victim.read_bytes()[:4096])
    env = {**env_with(), "PYTHONPATH": str(tmp / "pkg")}
    done = mm("run", "--backend", "cpu", "--shape", "16", "--repeats", "1", env=env, cwd=tmp)
    if done.returncode < 0 or done.returncode > 128:
        raise Bad(f"killed: exit {done.returncode}")
    no_traceback(done, (0, 1, 2))
    if "damaged" not in done.stdout + done.stderr:
        raise Bad("the damaged extension is not named")
    return f"exit {done.returncode}, the rung named damaged, the others measured"


# ------------------------------------------------------------------ the minor ones
@case("continuous --json dir/", "minor")
def gate_json_dir(tmp: Path) -> str:
    done = one_line(
        mm("continuous", "HEAD", "HEAD", "--json", f"{tmp}/new/"), says="names a folder"
    )
    if (tmp / "new").exists():
        raise Bad("a file or folder was made")
    return done


@case("continuous --json X --junit X", "minor")
def gate_same_file(tmp: Path) -> str:
    same = tmp / "x.json"
    return one_line(
        mm(*gate_of("--json", str(same), "--junit", str(same))), says="name the same file"
    )


@case("a second mmsuite worker with a connected worker's --name", "minor")
def worker_same_name(tmp: Path) -> str:
    _needs_dask()
    scheduler, address = _scheduler(tmp)
    first = start(
        "worker", address, "--gpus", "none", "--name", "twin", cwd=tmp, log=tmp / "first.log"
    )
    try:
        deadline = time.monotonic() + 60
        while "Registered to" not in (tmp / "first.log").read_text():
            if time.monotonic() > deadline or first.poll() is not None:
                raise Bad("the first worker did not register")
            time.sleep(0.2)
        return one_line(
            mm("worker", address, "--gpus", "none", "--name", "twin", timeout=120),
            says="already connected",
        )
    finally:
        _stop(first)
        _stop(scheduler)


staged_by_test(
    "kill -9 of the only host worker: rows are errors, not unavailable",
    "minor",
    "test_cluster.py::test_jobs_whose_last_worker_left_mid_sweep_are_errors_not_unavailable",
    dask=True,
)


@case("terminal escape sequences in kernel names never reach the terminal", "minor")
def escapes(tmp: Path) -> str:
    def plant(document: dict) -> None:
        document["results"][0]["kernel"] = "cpu.x\x1b]0;pwned\x07\x1b[2J"
        document["results"][0]["reason"] = "a\x1b[31mred"

    bad = results_file(tmp / "esc.json", plant)
    done = mm("report", str(bad))
    no_traceback(done, (0, 2))
    if "\x1b]" in done.stdout + done.stderr or "\x1b[2J" in done.stdout + done.stderr:
        raise Bad("an escape sequence was printed")
    return f"exit {done.returncode}, no escape sequence printed"


@case("a symlink planted in a shared --cache-dir is not followed", "minor")
def cache_link(tmp: Path) -> str:
    commit = head_commit()
    cache, target = tmp / "cache", tmp / "theirs"
    cache.mkdir()
    target.mkdir()
    (cache / commit).symlink_to(target)
    done = one_line(mm(*gate_of(cache=cache)), says="link")
    if any(target.iterdir()):
        raise Bad("the build wrote through the link")
    return done


@case("SIGKILL during a build leaves no pip or gcc behind", "minor")
def build_orphans(tmp: Path) -> str:
    cache = tmp / "fresh-cache"
    gate = start(*gate_of("--shape", "32", cache=cache), cwd=tmp, log=tmp / "gate.log")

    def compiling() -> bool:
        return any("cc1" in p or "gcc" in p for p in _build_processes(tmp))

    wait_until("a compiler started", compiling, gate, timeout=300)
    running = _build_processes(tmp)
    os.kill(gate.pid, signal.SIGKILL)  # the command alone, as `timeout -s KILL` does
    gate.wait()
    deadline = time.monotonic() + 15
    while _build_processes(tmp) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = _build_processes(tmp)
    if left:
        raise Bad(f"{len(left)} left: {left[0]}")
    return f"{len(running)} build processes (pip, a compiler) died with the command"


def _build_processes(tmp: Path) -> list[str]:
    """The live processes of a build under ``tmp``: pip and what it started (their command
    lines or working folders name the build's folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if (
            state != "Z"
            and "continuous" not in cmdline
            and (str(tmp) in cmdline or cwd.startswith(str(tmp) + "/fresh-cache"))
        ):
            found.append(f"{entry.name}: {cmdline[:70]}")
    return found


@case("continuous --resume without --json", "minor")
def resume_without_json(tmp: Path) -> str:
    return one_line(mm(*gate_of("--resume")), says="--resume")


@case("CUDA: a GPU worker's rows and a GPU gate", "minor")
def gpu_cases(tmp: Path) -> str:
    if shutil.which("nvidia-smi") is None:
        raise Skip("needs a GPU")
    raise Skip("the GPU cases run on the GPU host's suite (tests/backends)")


# ------------------------------------------------------------------ the table
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "-k",
        metavar="WORD",
        action="append",
        help="only the cases whose name holds WORD (repeatable)",
    )
    parser.add_argument("--list", action="store_true", help="list the cases, run none")
    args = parser.parse_args()
    chosen = [
        c for c in CASES if not args.k or any(word.lower() in c.name.lower() for word in args.k)
    ]
    if args.list:
        for c in chosen:
            print(f"{c.defect:>5}  {c.name}")
        return 0
    outcomes = []
    try:
        for c in chosen:
            folder = Path(tempfile.mkdtemp(prefix="mmsuite-battery-"))
            started = time.monotonic()
            try:
                verdict, detail = "ok", c.check(folder)
            except Skip as exc:
                verdict, detail = "skip", str(exc)
            except Bad as exc:
                verdict, detail = "bad", str(exc)
            except Exception as exc:  # the battery's own failure is the case's too
                verdict, detail = "bad", f"{type(exc).__name__}: {exc}"
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            outcomes.append((c, verdict, detail))
            print(
                f"{verdict:>4}  [{c.defect}] {c.name}  ({time.monotonic() - started:.0f} s)"
                f"\n      {detail}",
                file=sys.stderr,
                flush=True,
            )
    finally:
        for cache in _CACHE:
            shutil.rmtree(cache, ignore_errors=True)
    print("| # | case | outcome | what it saw |")
    print("|---|---|---|---|")
    for c, verdict, detail in outcomes:
        print(f"| {c.defect} | {c.name} | {verdict} | {detail.replace('|', '/')} |")
    counts = {v: sum(1 for _, o, _ in outcomes if o == v) for v in ("ok", "bad", "skip")}
    print(
        f"\n{counts['ok']} ok, {counts['bad']} bad, {counts['skip']} skipped "
        f"(host {socket.gethostname()}, {os.cpu_count()} CPUs)"
    )
    return 1 if counts["bad"] else 0


if __name__ == "__main__":
    sys.exit(main())
