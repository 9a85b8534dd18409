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
