"""The asv configuration and suites: discovery, a dry run of the CPU suite, history over commits.

Every asv call runs in the interpreter that runs pytest (``-E existing`` /
``--python=same``), with a copy of asv.conf.json whose directories point into a
temporary folder, so nothing is written into the checkout. The history test
records two commits the way a GPU host without a package index does
(``--python=same --set-commit-hash``, once per commit) and reads them back with
``mmsuite.history``; the build-every-commit path (``asv run A..B``) needs a
package index and runs only when ``MMSUITE_ASV_BUILD=1``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("asv", reason="asv is not installed: pip install -e '.[bench]'")
pytest.importorskip("asv_runner", reason="asv_runner is not installed: pip install -e '.[bench]'")

from mmsuite.history import load_history  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MACHINE = "mmsuite-test"
# One kernel, one metric: enough to prove that both commits are recorded.
TINY = r"sgemm_cpu\.CpuKernels\.time_kernel\('cpu\.blas'"


def _asv_conf() -> dict:
    from asv import util

    return util.load_json(str(ROOT / "asv.conf.json"), js_comments=True)


def _write_conf(path: Path, repo: Path, work: Path) -> Path:
    """The project's asv.conf.json with its directories moved under ``work``."""
    conf = _asv_conf()
    conf.update(
        repo=str(repo),
        benchmark_dir=str(repo / "benchmarks"),
        env_dir=str(work / "env"),
        results_dir=str(work / "results"),
        html_dir=str(work / "html"),
    )
    path.write_text(json.dumps(conf, indent=2))
    return path


@pytest.fixture(scope="module")
def asv_env(tmp_path_factory) -> dict[str, str]:
    """Environment for asv: a private HOME holding a machine description (no prompt)."""
    home = tmp_path_factory.mktemp("asv-home")
    env = dict(os.environ, HOME=str(home))
    if env.get("PYTHONPATH"):  # asv clears PYTHONPATH in its benchmark processes
        env["ASV_PYTHONPATH"] = env["PYTHONPATH"]
    _asv(["machine", "--yes", "--machine", MACHINE], cwd=ROOT, env=env)
    return env


def _asv(args: list[str], cwd: Path, env: dict[str, str], check: bool = True,
         timeout: float = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "asv", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        pytest.fail(f"asv {' '.join(args)} exited {proc.returncode}\n"
                    f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
    return proc


def _git(args: list[str], cwd: Path) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=mmsuite tests", "-c", "user.email=tests@mmsuite.invalid",
         *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def test_config_matches_the_layout() -> None:
    conf = _asv_conf()
    assert conf["repo"] == "."
    assert conf["branches"] == ["main"]
    assert conf["benchmark_dir"] == "benchmarks"
    assert (conf["env_dir"], conf["results_dir"], conf["html_dir"]) == (
        ".asv/env", ".asv/results", ".asv/html")
    assert conf["environment_type"] == "virtualenv"
    assert conf["launch_method"] == "spawn"
    assert any("pip wheel" in cmd and "{build_cache_dir}" in cmd for cmd in conf["build_command"])
    assert any("{wheel_file}" in cmd for cmd in conf["install_command"])
    req = conf["matrix"]["req"]
    assert {"setuptools", "wheel", "cffi"} <= set(req)
    # numpy (and so OpenBLAS, the CPU reference) is pinned; OpenCL is tracked by default.
    assert len(req["numpy"]) == 1 and req["numpy"][0][:1].isdigit()
    assert "pyopencl" in req


def _import_benchmarks():
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks import _suite, sgemm_cpu, sgemm_cuda, sgemm_opencl
    finally:
        sys.path.remove(str(ROOT))
    return _suite, sgemm_cpu, sgemm_opencl, sgemm_cuda


def test_suites_cover_the_catalogue() -> None:
    import mmsuite

    _suite, sgemm_cpu, sgemm_opencl, sgemm_cuda = _import_benchmarks()
    for module, cls, backend in ((sgemm_cpu, "CpuKernels", "cpu"),
                                 (sgemm_opencl, "OpenclKernels", "opencl"),
                                 (sgemm_cuda, "CudaKernels", "cuda")):
        suite = getattr(module, cls)
        assert suite.params[0] == [k.id for k in mmsuite.kernels(backend)]
        assert suite.version, f"{cls} needs an explicit version"
        # asv reads device time, and gets enough samples for its test to reach p < 0.002
        assert suite.timer is _suite.DEVICE_CLOCK
        assert suite.rounds * suite.repeat[0] >= 12
        methods = {m for m in dir(suite) if m.startswith(("time_", "track_"))}
        expected = {"time_kernel"} | ({"time_h2d", "time_d2h"} if backend != "cpu" else set())
        assert methods == expected


def test_the_device_clock_advances_by_the_samples_alone() -> None:
    import timeit

    _suite = _import_benchmarks()[0]
    clock = _suite.DeviceClock()
    # asv times its samples through timeit with the suite's clock: host work is invisible
    work = timeit.Timer(stmt=lambda: (sum(range(10_000)), clock.advance(2.0)), timer=clock)
    assert work.timeit(3) == pytest.approx(0.006)


def test_an_asv_sample_is_the_fastest_of_a_short_window() -> None:
    _suite = _import_benchmarks()[0]
    now = [0.0]

    def sampled(times: list[float], step: float):
        queue = iter(times)

        def sample() -> float:
            now[0] += step
            return next(queue)
        return sample

    # 0.01 s a sample over a 0.035 s window: four samples, the fastest wins
    fast = sampled([5.0, 3.0, 4.0, 2.0, 9.0], 0.01)
    assert _suite.fastest_ms(fast, window_s=0.035, least=2, clock=lambda: now[0]) == 2.0
    # a slow kernel still gives at least `least` samples
    now[0] = 0.0
    slow = sampled([5.0, 3.0, 4.0, 1.0], 1.0)
    assert _suite.fastest_ms(slow, window_s=0.02, least=3, clock=lambda: now[0]) == 3.0


@pytest.fixture
def suite_module():
    _suite = _import_benchmarks()[0]
    _suite.sampler.cache_clear()
    yield _suite
    _suite.sampler.cache_clear()


def test_a_kernel_is_prepared_and_verified_once_per_process(suite_module) -> None:
    _, sgemm_cpu, _, _ = _import_benchmarks()
    suite = sgemm_cpu.CpuKernels()
    suite.setup("cpu.omp_tiled", 256)
    first = suite.sampler
    before = suite_module.DEVICE_CLOCK()
    suite.time_kernel("cpu.omp_tiled", 256)
    assert suite_module.DEVICE_CLOCK() > before
    suite.setup("cpu.omp_tiled", 256)  # asv runs setup again before every sample
    assert suite.sampler is first


def test_a_wrong_result_fails_and_is_never_timed(suite_module, monkeypatch) -> None:
    from mmsuite import verify

    def wrong(output, ref, k, *precision):
        return verify.Verdict(0.5, 1e-5, False, "error above tolerance")

    monkeypatch.setattr(verify, "check", wrong)
    with pytest.raises(RuntimeError, match="failed verification.*error above tolerance"):
        suite_module.sampler("cpu", "cpu.blas", 256)


def test_only_a_missing_backend_or_library_skips(suite_module, monkeypatch) -> None:
    """A rung that fails to build fails in asv; a backend this machine lacks is skipped."""
    import mmsuite
    from mmsuite import measure
    from mmsuite.backends.cpu import CpuBackend

    def not_built(self, kernel):
        return f"{kernel.entry} is not in the built extension"

    monkeypatch.setattr(CpuBackend, "kernel_reason", not_built)
    with pytest.raises(RuntimeError, match="not in the built extension"):
        suite_module.sampler("cpu", "cpu.omp_packed", 256)

    def build_error(kernel_id, problem, **kwargs):
        raise mmsuite.KernelUnavailable(f"{kernel_id}: build failed: error: expected ';'")

    monkeypatch.undo()
    monkeypatch.setattr(measure, "KernelSampler", build_error)
    with pytest.raises(RuntimeError, match="build failed"):
        suite_module.sampler("cpu", "cpu.omp_packed", 256)

    missing = [k for k in mmsuite.kernels() if k.backend != "cpu" and not k.available
               and suite_module.skip_reason(k)]
    if not missing:
        pytest.skip("every backend runs here: nothing to skip")
    kernel = missing[0]
    with pytest.raises(NotImplementedError):
        suite_module.sampler(kernel.backend, kernel.id, suite_module.SIZES[kernel.backend][0])


def test_transfers_on_a_cpu_opencl_device_are_skipped(suite_module) -> None:
    """PoCL's h2d and d2h are memcpy within host memory: noise for the gate, not tracked."""
    import mmsuite

    kernel = mmsuite.get("opencl.regblock_vec")
    if not kernel.available:
        pytest.skip(f"no OpenCL here: {kernel.reason}")
    _, _, sgemm_opencl, _ = _import_benchmarks()
    suite = sgemm_opencl.OpenclKernels()
    suite.setup(kernel.id, 256)
    before = suite_module.DEVICE_CLOCK()
    suite.time_kernel(kernel.id, 256)
    assert suite_module.DEVICE_CLOCK() > before
    if str(suite.sampler.info.get("device_type", "")).upper() != "CPU":
        suite.time_h2d(kernel.id, 256)  # a GPU: tracked
        assert suite_module.DEVICE_CLOCK() > before
        return
    for metric in (suite.time_h2d, suite.time_d2h):
        with pytest.raises(NotImplementedError, match="copies within host memory"):
            metric(kernel.id, 256)


def test_asv_check(tmp_path: Path, asv_env: dict[str, str]) -> None:
    conf = _write_conf(tmp_path / "asv.conf.json", ROOT, tmp_path)
    proc = _asv(["check", "--config", str(conf), "-E", "existing"], cwd=ROOT, env=asv_env)
    assert "No problems found" in proc.stdout + proc.stderr


def test_quick_dry_run_of_cpu_suite(tmp_path: Path, asv_env: dict[str, str]) -> None:
    conf = _write_conf(tmp_path / "asv.conf.json", ROOT, tmp_path)
    proc = _asv(["run", "--config", str(conf), "--quick", "--dry-run", "-E", "existing",
                 "--bench", "cpu", "--machine", MACHINE, "--show-stderr"],
                cwd=ROOT, env=asv_env, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "sgemm_cpu.CpuKernels.time_kernel" in out, out
    assert "Running 1 total benchmarks" in out, out
    assert not [line for line in out.splitlines() if line.rstrip().endswith("failed")], out
    # The reference row always runs: its numbers are in the table.
    assert any(line.strip().startswith("cpu.blas") and "n/a" not in line
               for line in out.splitlines()), out
    # --dry-run: nothing saved.
    assert not list((tmp_path / "results").glob(f"{MACHINE}/*-*.json"))


@pytest.fixture
def two_commit_clone(tmp_path: Path) -> tuple[Path, list[str]]:
    """A clone of the repository with this checkout's asv files and two more commits."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    if not (ROOT / ".git").exists():
        pytest.skip("the project is not a git checkout: nothing to clone")
    clone = tmp_path / "repo"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(clone)],
                   check=True, capture_output=True)
    # asv.conf.json measures the branch main: a checkout on another branch clones without one.
    _git(["checkout", "--quiet", "-B", "main"], clone)
    shutil.copy2(ROOT / "asv.conf.json", clone / "asv.conf.json")
    shutil.rmtree(clone / "benchmarks", ignore_errors=True)
    shutil.copytree(ROOT / "benchmarks", clone / "benchmarks",
                    ignore=shutil.ignore_patterns("__pycache__"))
    _git(["add", "asv.conf.json", "benchmarks"], clone)
    _git(["commit", "--quiet", "--allow-empty", "-m", "first measured commit"], clone)
    first = _git(["rev-parse", "HEAD"], clone)
    _git(["commit", "--quiet", "--allow-empty", "-m", "second measured commit"], clone)
    second = _git(["rev-parse", "HEAD"], clone)
    return clone, [first, second]


@pytest.mark.slow
def test_history_over_two_commits(two_commit_clone, asv_env: dict[str, str]) -> None:
    """The documented offline-host loop: check out, run with --set-commit-hash, repeat."""
    clone, commits = two_commit_clone
    for commit in commits:
        _git(["checkout", "--quiet", commit], clone)
        _asv(["run", "--python=same", "--set-commit-hash", commit, "--quick",
              "--bench", TINY, "--machine", MACHINE, "--show-stderr"], cwd=clone, env=asv_env)
    results = clone / ".asv" / "results"
    for commit in commits:
        assert list((results / MACHINE).glob(f"{commit[:8]}-*.json")), commit

    history = load_history(results)
    series = [s for s in history.values()
              if s.kernel == "cpu.blas" and s.metric == "kernel_ms" and s.points]
    assert {s.params["size"] for s in series} >= {"256", "512"}
    for s in series:
        assert set(s.commits) == set(commits)
        assert all(p.value > 0 for p in s.points)

    _asv(["publish"], cwd=clone, env=asv_env)
    assert (clone / ".asv" / "html" / "index.html").is_file()


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("MMSUITE_ASV_BUILD") != "1",
                    reason="builds a virtualenv and a wheel per commit from a package index; "
                           "set MMSUITE_ASV_BUILD=1 to run")
def test_build_and_run_each_commit(two_commit_clone, asv_env: dict[str, str]) -> None:
    """`asv run A..B`: each commit built into a wheel and installed into asv's virtualenv."""
    clone, commits = two_commit_clone
    _asv(["run", f"{commits[0]}^..{commits[1]}", "--bench", TINY, "--machine", MACHINE,
          "--show-stderr"], cwd=clone, env=asv_env, timeout=1800)
    results = clone / ".asv" / "results" / MACHINE
    for commit in commits:
        files = [p for p in results.glob(f"{commit[:8]}-*.json")]
        assert files, commit
        data = json.loads(files[0].read_text())
        assert data["env_name"].startswith("virtualenv-")
