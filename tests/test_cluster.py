"""Sweeps on a Dask cluster: a real scheduler and two workers on this machine.

One worker is started by `mmsuite worker` (a nanny that replaces a dead worker),
the other by a plain `dask worker` with the documented resources. Jobs are CPU
kernels on small problems, so the module runs without a GPU; the GPU slot is
exercised on the GPU host.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from mmsuite import Problem, catalogue, cli, identity, peak, results, workers
from mmsuite.backends import RunOptions
from mmsuite.host import cpu_model
from mmsuite.runs import load_runs, merge
from mmsuite.sweep import RunContext, SweepHooks, SweepRow, sweep

distributed = pytest.importorskip("distributed", reason="needs the cluster extra (Dask)")

from mmsuite import cluster  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SHAPE = "24x17x9"
QUICK = ["--repeats", "2", "--warmup", "0"]
LADDER = ["cpu.blas", "cpu.seq_naive", "cpu.seq_ikj", "cpu.omp_tiled"]
START_S = 60.0
#: The commit the workers report (MMSUITE_GIT_COMMIT): not the client's, with the same code.
WORKER_COMMIT = "0123abcd" * 5


def _environ(**extra: str) -> dict:
    # The workers import the planted jobs of this module from the checkout (and keep any
    # path the environment already gives, where the site's packages may live).
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), **extra}


def _wait_for(what: str, check, timeout: float = START_S) -> None:
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            raise TimeoutError(f"{what} did not happen within {timeout:.0f} s")
        time.sleep(0.2)


_WATCHERS: dict[Path, distributed.Client] = {}  # one client per scheduler, to poll it


def _worker_names(scheduler_file: Path) -> set[str]:
    client = _WATCHERS.get(scheduler_file)
    if client is None:
        client = _WATCHERS[scheduler_file] = distributed.Client(
            scheduler_file=str(scheduler_file), timeout=10, set_as_default=False)
    return {str(w["name"]) for w in client.scheduler_info(n_workers=-1)["workers"].values()}


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory):
    """A scheduler with `mmsuite worker` (w1-host, under a nanny) and a plain `dask worker`
    (w2-host); yields the scheduler file."""
    folder = tmp_path_factory.mktemp("cluster")
    scheduler_file = folder / "scheduler.json"
    logs = open(folder / "cluster.log", "w")
    processes = [subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--scheduler-file",
         str(scheduler_file), "--port", "0", "--no-dashboard"],
        env=_environ(), stdout=logs, stderr=subprocess.STDOUT, cwd=folder)]
    try:
        _wait_for("the scheduler file", scheduler_file.exists)
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "mmsuite.cli", "worker", str(scheduler_file),
             "--gpus", "none", "--name", "w1"],
            env=_environ(MMSUITE_GIT_COMMIT=WORKER_COMMIT), stdout=logs,
            stderr=subprocess.STDOUT, cwd=folder))
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file",
             str(scheduler_file), "--nthreads", "1", "--resources", "HOST=1", "--name",
             "w2-host", "--no-nanny", "--no-dashboard"],
            env=_environ(MMSUITE_GIT_COMMIT=WORKER_COMMIT), stdout=logs,
            stderr=subprocess.STDOUT, cwd=folder))
        _wait_for("two workers", lambda: _worker_names(scheduler_file) >= {"w1-host",
                                                                             "w2-host"})
        yield scheduler_file
    finally:
        watcher = _WATCHERS.pop(scheduler_file, None)
        if watcher is not None:
            watcher.close()
        workers_first = processes[1:]  # all at once (each takes a moment), the scheduler last
        for process in workers_first:
            if process.poll() is None:
                process.terminate()
        for process in [*workers_first, processes[0]]:
            _stop(process)
        logs.close()


def _run(argv: list[str], capsys) -> tuple[int, str]:
    code = cli.main(argv)
    return code, capsys.readouterr().err


# ---------------------------------------------------------------- the sweep
def test_a_cpu_sweep_through_the_cluster_gives_the_local_rows_each_naming_its_worker(
        scheduler, tmp_path, capsys) -> None:
    selection = ["--backend", "cpu", "--shape", SHAPE, *QUICK]
    local, remote = tmp_path / "local.json", tmp_path / "cluster.json"
    assert _run(["run", *selection, "--json", str(local)], capsys)[0] == 0
    started = time.monotonic()
    code, err = _run(["run", *selection, "--cluster", str(scheduler), "--json", str(remote)],
                     capsys)
    assert code == 0, err
    assert time.monotonic() - started < 60

    def rows(path: Path) -> list[tuple]:
        return [(r["kernel"], json.dumps(r["problem"], sort_keys=True), r["status"])
                for r in results.load(path)["results"]]

    assert rows(remote) == rows(local)  # the same rows, in ladder order, all ok
    assert {status for *_, status in rows(remote)} == {"ok"}
    document = results.load(remote)
    for record in document["results"]:
        assert record["worker"] in ("w1-host", "w2-host")
        assert record["host"] == socket.gethostname()
        assert record["device_model"] == cpu_model()
        assert "device_uuid" not in record  # a CPU has none
        assert record["max_rel_err"] < record["tolerance"]
        assert 0 < record["pct_peak"] <= 100  # judged by its worker's recorded environment
        # Same code, another commit: accepted, and the row names the commit that ran it.
        assert record["git_commit"] == WORKER_COMMIT
    assert document["environment"]["git_commit"] != WORKER_COMMIT
    # Each worker that ran a row recorded its host's environment in the one file.
    assert set(document["environment"]["workers"]) == {r["worker"]
                                                       for r in document["results"]}


def test_mmsuite_worker_keeps_the_hosts_thread_settings(scheduler) -> None:
    # A Dask nanny sets OMP_NUM_THREADS, MKL_NUM_THREADS and OPENBLAS_NUM_THREADS to 1 in
    # its worker; `mmsuite worker` (w1, under a nanny) must leave the host's own settings.
    _worker_names(scheduler)
    client = _WATCHERS[scheduler]
    answers = client.run(cluster.worker_check)
    names = {a: w["name"] for a, w in client.scheduler_info(n_workers=-1)["workers"].items()}
    (w1,) = [answer for address, answer in answers.items() if names[address] == "w1-host"]
    assert w1["threads"] == {k: os.environ[k] for k in cluster.THREAD_VARIABLES
                             if k in os.environ}
    assert w1["daemon"] is False


def test_a_second_worker_of_a_connected_workers_name_is_one_line_exit_2(scheduler) -> None:
    """Dask's own refusal was some 70 lines of tracebacks from the nanny and its worker."""
    done = subprocess.run([sys.executable, "-m", "mmsuite.cli", "worker", str(scheduler),
                           "--gpus", "none", "--name", "w1"], env=_environ(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("mmsuite: error: a worker named w1-host is already connected to "
                           "the scheduler at tcp://")
    assert line.endswith("give this host's workers another --name")
    assert "w1-host" in _worker_names(scheduler)  # the first one is untouched


def test_a_host_worker_limited_to_fewer_threads_than_cores_is_named() -> None:
    answer = {"host": "n1", "cores": 16, "threads": {"OMP_NUM_THREADS": "1"}}
    assert cluster.thread_warning("n1-host", answer, {"HOST": 1}).startswith(
        "worker n1-host on host n1 has OMP_NUM_THREADS=1 on 16 cores")
    assert cluster.thread_warning("n1-gpu0", answer, {"GPU": 1}) == ""  # its CPU times nothing
    assert cluster.thread_warning("n1-host", {**answer, "threads": {"OMP_NUM_THREADS": "16"}},
                                  {"HOST": 1}) == ""


def test_cuda_rows_without_a_gpu_worker_are_unavailable_with_the_reason(
        scheduler, tmp_path, capsys) -> None:
    out = tmp_path / "cuda.json"
    started = time.monotonic()
    code, err = _run(["run", "--kernel", "cuda.01*", "--backend", "cuda", "--shape", SHAPE,
                      "--cluster", str(scheduler), "--json", str(out), *QUICK], capsys)
    assert time.monotonic() - started < 30  # not hung waiting for a GPU
    assert code == 2 and "nothing requested could run here" in err
    (record,) = results.load(out)["results"]
    assert record["status"] == "unavailable"
    assert record["reason"] == cluster.NO_WORKER[cluster.GPU]


def test_a_worker_with_other_measuring_code_is_refused_naming_both(
        scheduler, tmp_path, capsys) -> None:
    """The version number is the same at every commit: the code is what must match."""
    preload = tmp_path / "other_code.py"
    preload.write_text("import mmsuite.identity\n"
                       "mmsuite.identity.engine_hash = lambda: 'e' * 16\n")
    other = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file",
         str(scheduler), "--nthreads", "1", "--resources", "HOST=1", "--name", "w3-host",
         "--no-nanny", "--no-dashboard", "--preload", str(preload)],
        env=_environ(MMSUITE_GIT_COMMIT="f" * 40), stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        _wait_for("the third worker", lambda: "w3-host" in _worker_names(scheduler))
        code, err = _run(["run", "--kernel", "cpu.blas", "--shape", SHAPE, "--cluster",
                          str(scheduler), *QUICK], capsys)
    finally:
        _stop(other)
    _wait_for("the third worker to leave", lambda: "w3-host" not in _worker_names(scheduler))
    assert code == 2
    ours = identity.engine_hash()
    assert err.strip() == (
        f"mmsuite: error: worker w3-host on host {socket.gethostname()} runs other code "
        f"(mmsuite {cluster.__version__}, engine {'e' * 16} at commit {'f' * 40}); this "
        f"client runs mmsuite {cluster.__version__}, engine {ours} at commit "
        f"{cluster.worker_commit() or 'unknown'}: install the same commit on every host")


class _FakeDaskWorker:
    name, address = "n2-host", "tcp://10.0.0.2:4000"

    class state:  # noqa: N801 - the attribute Dask's worker has
        total_resources = {"HOST": 1}


def test_a_job_whose_code_differs_on_its_worker_is_refused_naming_both(monkeypatch) -> None:
    monkeypatch.setattr(cluster, "_dask_worker", lambda: _FakeDaskWorker)
    spec = cluster.JobSpec(0, "cpu.seq_ikj", Problem(8, 8, 8), RunOptions(), {}, None,
                           "claim", "topic", code="engine-of-the-client",
                           client_commit="c" * 40)
    outcome = cluster.run_job(spec)
    assert outcome.status == "error" and outcome.record is None
    assert outcome.reason == (
        f"worker n2-host on host {socket.gethostname()} runs other code for cpu.seq_ikj "
        f"({cluster.job_code('cpu.seq_ikj')} at commit {cluster.worker_commit() or 'unknown'})"
        f"; this client runs engine-of-the-client at commit {'c' * 40}: install the same "
        "commit on every host")


def test_a_jobs_code_is_its_kernels_source_and_the_measuring_modules() -> None:
    assert cluster.job_code("cpu.seq_ikj") != cluster.job_code("cpu.seq_tiled")
    assert cluster.job_code("cpu.seq_ikj").startswith(identity.engine_hash() + "-")


@dataclass
class LocalScheduler:
    address: str
    scheduler_file: Path
    process: subprocess.Popen


@pytest.fixture
def local_scheduler(tmp_path):
    """A scheduler of its own that listens on 127.0.0.1 only."""
    scheduler_file = tmp_path / "scheduler.json"
    process = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
         "--port", "0", "--scheduler-file", str(scheduler_file), "--no-dashboard"],
        env=_environ(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for("the scheduler file", lambda: scheduler_file.exists() and
                  "address" in scheduler_file.read_text())
        yield LocalScheduler(json.loads(scheduler_file.read_text())["address"],
                             scheduler_file, process)
    finally:
        watcher = _WATCHERS.pop(scheduler_file, None)
        if watcher is not None:
            watcher.close()
        _stop(process)


def _listening(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every socket that ``pid`` and its children listen on."""
    import psutil

    root = psutil.Process(pid)
    sockets = []
    for process in [root, *root.children(recursive=True)]:
        try:
            sockets += [(c.laddr.ip, c.laddr.port) for c in
                        process.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
        except psutil.NoSuchProcess:
            continue
    return sockets


def test_mmsuite_worker_listens_only_where_the_scheduler_is(local_scheduler) -> None:
    """A Dask worker runs any pickled call that reaches its port: with the scheduler on
    127.0.0.1 no other host may reach the workers either."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "mmsuite.cli", "worker", local_scheduler.address, "--gpus",
         "none", "--name", "wl"], env=_environ(), stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        # The nanny's port and its worker's: Dask's default put the worker's on 0.0.0.0.
        _wait_for("the nanny's and the worker's ports",
                  lambda: len({port for _, port in _listening(worker.pid)}) >= 2)
        assert {address for address, _ in _listening(worker.pid)} == {"127.0.0.1"}
    finally:
        _stop(worker)


def test_mmsuite_worker_listens_where_it_is_told() -> None:
    from mmsuite.commands import worker

    scheduler = "tcp://127.0.0.1:8786"
    assert worker.listen_options(scheduler, None, None) == [
        "--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0"]
    assert worker.listen_options(scheduler, "tcp://10.1.2.3:9000", None) == [
        "--listen-address", "tcp://10.1.2.3:9000", "--dashboard-address", "10.1.2.3:0"]
    assert worker.listen_options(scheduler, None, "lo") == [
        "--interface", "lo", "--dashboard-address", "127.0.0.1:0"]
    with pytest.raises(cli.UsageError, match="^--interface nosuch0: .*not a valid network"):
        worker.listen_options(scheduler, None, "nosuch0")


def slow_job(plan: dict, kernel_id: str, problem: Problem, options: RunOptions,
             run_kwargs: dict) -> workers.Result:
    """Runs in a worker's job process: for the job named in ``plan`` (``kernel@m``), write
    the Dask worker's pid to the file named there and wait (until that worker is gone)."""
    marker = plan.get(f"{kernel_id}@{problem.m}")
    if marker:
        Path(marker).write_text(str(os.getppid()))
        parent = os.getppid()
        for _ in range(600):  # ends with its orphaned process once the worker is killed
            if os.getppid() != parent:
                os._exit(0)
            time.sleep(0.1)
    return cluster.measure_here(kernel_id, problem, options, run_kwargs)


def test_a_worker_killed_mid_job_fails_that_row_and_resume_completes_the_set(
        scheduler, tmp_path, capsys) -> None:
    marker = tmp_path / "running"
    kernels = [catalogue.get(k) for k in LADDER]
    problems = [Problem(24, 17, 9), Problem(5, 3, 2)]
    killed: list[int] = []

    def kill_when_running() -> None:
        _wait_for("the planted job", marker.exists)
        time.sleep(0.2)
        pid = int(marker.read_text())
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    killer = threading.Thread(target=kill_when_running, daemon=True)
    killer.start()
    with cluster.Cluster(str(scheduler)) as session:
        names = session.client.run(os.getpid)  # address -> pid of each Dask worker
        planned: list[int] = []
        starts: list[tuple[str, int]] = []
        arrived: list = []  # rows as they come back: what `run` appends to its journal
        rows = session.sweep(RunContext(kernels, problems, repeats=2, warmup=0),
                             hooks=SweepHooks(on_plan=planned.append, on_row=arrived.append,
                                              on_start=lambda k, p: starts.append((k.id, p.m))),
                             job=functools.partial(slow_job, {"cpu.seq_ikj@24": str(marker)}))
    killer.join(timeout=5)
    assert killed and killed[0] in names.values()
    victim = next(a for a, pid in names.items() if pid == killed[0])
    statuses = [(r.kernel.id, r.problem.m, r.status) for r in rows]
    assert len(rows) == len(kernels) * len(problems)  # the sweep finished
    # Progress: every job was planned, and each job a worker started was announced.
    assert planned == [len(kernels) * len(problems)]
    assert {(r.kernel.id, r.problem.m) for r in rows} == set(starts)
    assert sorted(arrived, key=rows.index) == rows  # each row once, as it came back
    lost = [r for r in rows if r.status != "ok"]
    assert [(r.kernel.id, r.problem.m, r.status) for r in lost] == [
        ("cpu.seq_ikj", 24, "error")], statuses
    reason = lost[0].reason
    assert reason.startswith("worker lost: worker w") and victim in reason
    assert socket.gethostname() in reason and reason.endswith("died while running it")
    record = lost[0].to_record()
    assert record["host"] == socket.gethostname() and record["worker"] in ("w1-host",
                                                                          "w2-host")

    # --resume through the command line reruns only the lost row.
    saved = tmp_path / "killed.json"
    results.save(saved, [r.to_record() for r in rows], {}, {})
    out = tmp_path / "resumed.json"
    _wait_for("a worker to serve the resumed sweep",
              lambda: bool(_worker_names(scheduler)))
    code, err = _run(["run", "--kernel", "cpu.blas", "--kernel", "cpu.seq_[ni]*", "--kernel",
                      "cpu.omp_tiled", "--shape", f"{SHAPE},5x3x2", *QUICK,
                      "--cluster", str(scheduler), "--resume", str(saved), "--json", str(out)],
                     capsys)
    assert code == 0, err
    before = {(r.kernel.id, r.problem.m): r.to_record() for r in rows}
    after = {(r["kernel"], r["problem"]["m"]): r for r in results.load(out)["results"]}
    assert set(after) == set(before) and {r["status"] for r in after.values()} == {"ok"}
    for key, record in after.items():
        if key != ("cpu.seq_ikj", 24):  # kept as measured, not run again
            assert record["kernel_ms"]["samples"] == before[key]["kernel_ms"]["samples"]
    assert after[("cpu.seq_ikj", 24)]["worker"] in ("w1-host", "w2-host")


def test_losing_the_scheduler_mid_sweep_gives_back_the_finished_rows(local_scheduler,
                                                                     tmp_path) -> None:
    marker = tmp_path / "running"
    worker = subprocess.Popen(
        [sys.executable, "-m", "mmsuite.cli", "worker", local_scheduler.address, "--gpus",
         "none", "--name", "wk"], env=_environ(), stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)

    def kill_the_scheduler_when_running() -> None:
        _wait_for("the planted job", marker.exists)
        local_scheduler.process.kill()

    try:
        _wait_for("the worker", lambda: "wk-host" in
                  _worker_names(local_scheduler.scheduler_file))
        killer = threading.Thread(target=kill_the_scheduler_when_running, daemon=True)
        killer.start()
        session = cluster.Cluster(local_scheduler.address)
        try:
            with pytest.raises(cluster.SchedulerLost) as lost:
                session.sweep(RunContext([catalogue.get("cpu.seq_naive"),
                                          catalogue.get("cpu.seq_ikj")], [Problem(24, 17, 9)],
                                         repeats=2, warmup=0),
                              job=functools.partial(slow_job, {"cpu.seq_ikj@24": str(marker)}))
        finally:
            session.close()
    finally:
        _stop(worker)
    assert str(lost.value).startswith(f"lost the Dask scheduler at {local_scheduler.address} "
                                      "after 1 of 2 jobs: ")
    assert [(r.kernel.id, r.status) for r in lost.value.rows] == [("cpu.seq_naive", "ok")]


def test_run_shows_and_saves_the_rows_finished_before_the_scheduler_was_lost(
        monkeypatch, tmp_path, capsys) -> None:
    from mmsuite.commands import run as run_command

    (finished,) = sweep(RunContext([catalogue.get("cpu.seq_naive")], [Problem(24, 17, 9)],
                                   repeats=2, warmup=0))

    class LostSession:
        environments: dict = {}

        def sweep(self, context, *, hooks, **kwargs):
            hooks.on_row(finished)
            raise cluster.SchedulerLost("lost the Dask scheduler at tcp://n1:8786 after 1 "
                                        "of 2 jobs: the connection closed", [finished])

        def close(self) -> None:
            pass

    monkeypatch.setattr(run_command, "_connect", lambda target: LostSession())
    out = tmp_path / "fleet.json"
    code = cli.main(["run", "--kernel", "cpu.seq_naive", "--kernel", "cpu.seq_ikj",
                     "--shape", SHAPE, *QUICK, "--cluster", "n1:8786", "--json", str(out)])
    captured = capsys.readouterr()
    assert code == 2
    assert "cpu.seq_naive" in captured.out  # the table of the finished rows
    assert [r["kernel"] for r in results.load(out)["results"]] == ["cpu.seq_naive"]
    assert captured.err.strip().splitlines()[-1] == (
        "mmsuite: error: lost the Dask scheduler at tcp://n1:8786 after 1 of 2 jobs: the "
        f"connection closed; run the same command with --resume {out} to finish")


def test_resume_on_the_cluster_keeps_and_reruns_the_rows_a_local_resume_does(
        scheduler, tmp_path, capsys) -> None:
    problem = Problem(24, 17, 9)
    kernels = [catalogue.get(k) for k in LADDER]
    measured = sweep(RunContext(kernels[:1], [problem], repeats=1, warmup=0))[0].to_record()
    crashed = SweepRow(kernels[1], problem, "crashed", "its worker process died").to_record()
    lost = SweepRow(kernels[2], problem, "error", "worker lost: worker w9 died").to_record()
    earlier = [measured, crashed, lost]  # cpu.omp_tiled has no row yet

    def kept(rows: list) -> list[str]:
        return [r.kernel.id for r in rows if any(r.to_record() is e for e in earlier)]

    planned: dict[str, list[int]] = {"local": [], "cluster": []}
    local = sweep(RunContext(kernels, [problem], repeats=1, warmup=0), resume=earlier,
                  hooks=SweepHooks(on_plan=planned["local"].append))
    with cluster.Cluster(str(scheduler)) as session:
        remote = session.sweep(RunContext(kernels, [problem], repeats=1, warmup=0),
                               resume=earlier, hooks=SweepHooks(on_plan=planned["cluster"].append))
    assert kept(remote) == kept(local) == ["cpu.blas", "cpu.seq_naive"]
    assert [r.status for r in remote] == [r.status for r in local] == [
        "ok", "crashed", "ok", "ok"]
    assert planned == {"local": [2], "cluster": [2]}
    assert {r.to_record()["worker"] for r in remote[2:]} <= {"w1-host", "w2-host"}

    # --retry-crashed reaches the cluster path through the command line too.
    saved, out = tmp_path / "earlier.json", tmp_path / "retried.json"
    results.save(saved, [r.to_record() for r in remote], {}, {})
    code, err = _run(["run", *(f"--kernel={k}" for k in LADDER), "--shape", SHAPE,
                      *QUICK, "--cluster", str(scheduler), "--resume", str(saved),
                      "--retry-crashed", "--json", str(out)], capsys)
    assert code == 0, err
    after = {r["kernel"]: r for r in results.load(out)["results"]}
    assert {r["status"] for r in after.values()} == {"ok"}
    assert after["cpu.seq_naive"]["worker"] in ("w1-host", "w2-host")  # run, not kept
    assert after["cpu.blas"]["kernel_ms"] == measured["kernel_ms"]  # kept as measured


# ------------------------------------------------------------------ bad input
def test_an_unreachable_scheduler_is_one_line_exit_2(monkeypatch, capsys) -> None:
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 1.0)
    with socket.socket() as probe:  # a port where nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, err = _run(["run", "--backend", "cpu", "--cluster", f"127.0.0.1:{port}"], capsys)
    assert code == 2
    assert err.startswith(f"mmsuite: error: cannot reach the Dask scheduler at "
                          f"tcp://127.0.0.1:{port}: ")
    assert len(err.strip().splitlines()) == 1


def test_a_cluster_target_that_is_neither_address_nor_file_is_refused(capsys) -> None:
    code, err = _run(["run", "--backend", "cpu", "--cluster", "no-such-file.json"], capsys)
    assert code == 2
    assert err.strip() == ("mmsuite: error: --cluster no-such-file.json: not a scheduler "
                           "address (tcp://HOST:PORT) nor an existing scheduler file")


def test_devices_is_refused_with_cluster(capsys) -> None:
    code, err = _run(["run", "--devices", "0", "--cluster", "127.0.0.1:1"], capsys)
    assert code == 2 and "--devices picks this host's GPUs" in err


def test_mmsuite_worker_refuses_an_unreachable_scheduler(monkeypatch, capsys) -> None:
    from mmsuite.commands import worker

    monkeypatch.setattr(worker, "PROBE_TIMEOUT_S", 1.0)
    code, err = _run(["worker", "127.0.0.1:1", "--gpus", "none"], capsys)
    assert code == 2 and err.startswith("mmsuite: error: cannot reach the Dask scheduler at "
                                        "tcp://127.0.0.1:1: ")


@pytest.mark.parametrize("target, says", [
    ("foo://bar:1", "'foo://bar:1' is not a scheduler address: unknown protocol foo://"),
    ("tcp://[::1", "'tcp://[::1' is not a scheduler address"),
    ("file:{\"address\": 123}", "is not a Dask scheduler file: no \"address\" text in it"),
    ("file:garbage{", "is not a Dask scheduler file: Expecting value"),
    ("file:", "is not a Dask scheduler file: Expecting value"),
    ("file:{\"address\": \"nope://x:1\"}", "'s address 'nope://x:1' is not a scheduler "
                                           "address: unknown protocol nope://"),
])
@pytest.mark.parametrize("command", ["run", "worker"])
def test_a_bad_address_or_scheduler_file_is_one_line(command, target, says, tmp_path,
                                                      capsys) -> None:
    if target.startswith("file:"):
        path = tmp_path / "scheduler.json"
        path.write_text(target[len("file:"):])
        target = str(path)
    argv = ["run", "--backend", "cpu", "--cluster", target] if command == "run" else \
        ["worker", target, "--gpus", "none"]
    code, err = _run(argv, capsys)
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line.startswith("mmsuite: error: ") and says in line


@pytest.mark.parametrize("command", ["run", "worker"])
def test_a_tls_address_without_dasks_tls_settings_is_one_line(command, capsys) -> None:
    argv = ["run", "--backend", "cpu", "--cluster", "tls://127.0.0.1:1"] \
        if command == "run" else ["worker", "tls://127.0.0.1:1", "--gpus", "none"]
    code, err = _run(argv, capsys)
    role = "client" if command == "run" else "worker"
    assert code == 2
    assert err.strip() == ("mmsuite: error: tls://127.0.0.1:1 takes TLS: set Dask's "
                           f"distributed.comm.tls settings (the CA file, and the {role}'s "
                           "certificate and key; see docs/cluster-security.md)")


# ------------------------------------------------------------ pieces, no cluster
def test_jobs_take_a_gpu_slot_for_cuda_and_the_host_slot_otherwise() -> None:
    assert {k.backend: cluster.resource_for(k) for k in catalogue.kernels()} == {
        "cpu": "HOST", "opencl": "HOST", "cuda": "GPU"}


def test_targets_are_addresses_or_scheduler_files(tmp_path) -> None:
    assert cluster.parse_target("tcp://10.0.0.5:8786") == ("tcp://10.0.0.5:8786", None)
    assert cluster.parse_target("node7:8786") == ("tcp://node7:8786", None)
    scheduler_file = tmp_path / "scheduler.json"
    scheduler_file.write_text("{}")
    assert cluster.parse_target(str(scheduler_file)) == (None, scheduler_file)
    with pytest.raises(cluster.ClusterError, match="not a scheduler address"):
        cluster.parse_target("node7")


def test_mmsuite_worker_plans_a_host_worker_and_one_pinned_worker_per_gpu() -> None:
    plans = cluster.worker_plans(["GPU-aa", "GPU-bb"], host_slot=True, prefix="n1")
    assert [(p.name, p.resources, p.environ["CUDA_VISIBLE_DEVICES"]) for p in plans] == [
        ("n1-host", {"HOST": 1}, ""), ("n1-gpu0", {"GPU": 1}, "GPU-aa"),
        ("n1-gpu1", {"GPU": 1}, "GPU-bb")]
    assert [p.name for p in cluster.worker_plans([], host_slot=True, prefix="n")] == ["n-host"]


def test_gpu_uuids_read_as_nvidia_smi_writes_them() -> None:
    raw = bytes(range(16))
    assert cluster.gpu_uuid(raw) == "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"


CLUSTER_ENV = {"cpu": "client CPU", "cpu_cores": 4, "created": "2026-01-01T00:00:00+00:00",
               "workers": {
                   "a-host": {"cpu": "EPYC 9654", "cpu_cores": 2, "cpu_max_mhz": 1000.0,
                              "cpu_simd": "avx2", "created": "2026-01-01T00:00:01+00:00"},
                   "b-gpu0": {"cpu": "Xeon", "created": "2026-01-01T00:00:02+00:00",
                              "backends": {"cuda": {"gpu": "NVIDIA H100", "sm_count": 132,
                                                    "sm_clock_mhz": 1980,
                                                    "compute_capability": "90"}}}}}


def _row(kernel: str, worker: str, host: str, model: str, gflops: float) -> dict:
    samples = [1.0, 1.0, 1.0]
    return {"kernel": kernel, "backend": kernel.split(".")[0], "status": "ok", "reason": "",
            "problem": {"m": 64, "n": 64, "k": 64, "batch": 1, "layout": "row",
                        "alpha": 1.0, "beta": 0.0, "seed": 0}, "flops": 2 * 64**3,
            "kernel_ms": {"median": 1.0, "min": 1.0, "max": 1.0, "samples": samples},
            "gflops": gflops, "max_rel_err": 1e-7, "host": host, "worker": worker,
            "device_model": model}


def test_a_cluster_row_is_judged_by_its_own_workers_device() -> None:
    cpu_row = _row("cpu.seq_naive", "a-host", "a", "EPYC 9654", 8.0)
    gpu_row = _row("cuda.01_naive", "b-gpu0", "b", "NVIDIA H100", 1000.0)
    peak.annotate([cpu_row, gpu_row], CLUSTER_ENV)
    assert cpu_row["peak_gflops"] == pytest.approx(2 * 1000.0 * 32 / 1e3)  # a-host's CPU
    assert gpu_row["peak_gflops"] == pytest.approx(132 * 128 * 2 * 1980 / 1e3)


def test_the_report_groups_a_cluster_file_by_machine_and_device_model(tmp_path) -> None:
    path = tmp_path / "cluster.json"
    results.save(path, [_row("cpu.seq_naive", "a-host", "a", "EPYC 9654", 8.0),
                        _row("cuda.01_naive", "b-gpu0", "b", "NVIDIA H100", 1000.0),
                        _row("cpu.seq_naive", "c-host", "c", "EPYC 9654", 9.0)],
                 CLUSTER_ENV, {})
    runs = load_runs([path])
    assert sorted((r.machine, len(r.records)) for r in runs) == [
        ("EPYC 9654 on a", 1), ("EPYC 9654 on c", 1), ("NVIDIA H100 on b", 1)]
    by_machine = {r.machine: r for r in runs}
    # Each machine is described by its own worker's environment; one without a recorded
    # environment falls back to the file's.
    assert by_machine["EPYC 9654 on a"].environment["cpu"] == "EPYC 9654"
    assert by_machine["EPYC 9654 on c"].environment["cpu"] == "client CPU"
    merged = merge(runs)
    assert len(merged) == 3  # the same kernel on two hosts stays two rows


def test_jobs_whose_last_worker_left_mid_sweep_are_errors_not_unavailable(monkeypatch) -> None:
    """kill -9 of the only host worker once turned the rows left into "unavailable" rows,
    and the run passed."""
    class Client:
        def cancel(self, futures) -> None:
            pass

    session = cluster.Cluster.__new__(cluster.Cluster)
    session.client = Client()
    monkeypatch.setattr(session, "resources", lambda: set())
    spec = cluster.JobSpec(3, "cpu.seq_ikj", Problem(8, 8, 8), RunOptions(), {}, None,
                           "claim", "topic")
    pending = {"future": (spec, catalogue.get("cpu.seq_ikj"))}
    finished: list[tuple[int, SweepRow]] = []
    since = {cluster.HOST: time.monotonic() - cluster.RESOURCE_GRACE_S - 1}
    session._give_up_without(pending, since, lambda index, row: finished.append((index, row)))
    ((index, row),) = finished
    assert index == 3 and not pending
    assert row.status == "error" and row.reason.startswith("worker lost: ")
