"""The environment record says where a result was measured."""

from __future__ import annotations

from mmsuite import environment
from mmsuite.backends import RunOptions


def test_host_record_has_cpu_cores_versions_and_commit_override(monkeypatch) -> None:
    monkeypatch.setenv("MMSUITE_GIT_COMMIT", "abc123")
    env = environment.host_environment()
    assert env["cpu"] and env["cpu_cores"] >= 1 and env["mmsuite"] and env["numpy"]
    assert env["git_commit"] == "abc123"


def test_unavailable_backends_are_recorded_not_raised() -> None:
    env = environment.collect(["cpu", "opencl", "cuda"], RunOptions())
    assert set(env["backends"]) == {"cpu", "opencl", "cuda"}
    assert env["backends"]["cpu"]["omp_threads"] >= 1


def test_commit_is_read_from_the_working_directorys_repository(monkeypatch, tmp_path) -> None:
    import subprocess

    monkeypatch.delenv("MMSUITE_GIT_COMMIT", raising=False)
    monkeypatch.setattr(environment, "_PACKAGE_ROOT", tmp_path / "site-packages")
    repo = tmp_path / "clone"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert environment.git_commit(cwd=repo) == head
    assert environment.git_commit(cwd=tmp_path / "site-packages") is None


def test_the_cpu_record_names_the_blas_its_threads_and_architecture() -> None:
    blas = environment.collect(["cpu"], RunOptions(threads=1))["backends"]["cpu"]["blas"]
    assert blas["library"] and blas["version"] and blas["architecture"]
    assert blas["threads"] == 1


def test_a_forced_lower_blas_architecture_is_a_warning() -> None:
    env = {"backends": {"cpu": {"blas": {"warning": "OpenBLAS runs its Haswell kernels"}},
                        "opencl": {"unavailable": "no platform"}}}
    assert environment.warnings(env) == ["cpu: OpenBLAS runs its Haswell kernels"]
    assert environment.warnings({"backends": {"cpu": {"blas": {"architecture": "SkylakeX"}}}}) == []
