"""Host facts: which BLAS numpy runs, and whether its kernels are below what the CPU offers."""

from __future__ import annotations

import pytest

from mmsuite import host

OPENBLAS = {"user_api": "blas", "internal_api": "openblas", "num_threads": 2,
            "version": "0.3.31", "architecture": "Haswell", "filepath": "/x/libopenblas.so",
            "threading_layer": "pthreads"}


@pytest.fixture
def fake_pool(monkeypatch: pytest.MonkeyPatch):
    import threadpoolctl

    def use(pool: dict, flags: set[str], env: dict[str, str]) -> None:
        monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda: [pool])
        monkeypatch.setattr(host, "cpu_flags", lambda: flags)
        for key in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
            monkeypatch.delenv(key, raising=False)
        for key, value in env.items():
            monkeypatch.setenv(key, value)

    return use


def test_haswell_kernels_on_an_avx512_cpu_are_flagged_with_the_cause(fake_pool) -> None:
    fake_pool(OPENBLAS, {"avx2", "avx512f"}, {"OPENBLAS_CORETYPE": "Haswell"})
    info = host.blas_info()
    assert (info["library"], info["version"], info["threads"], info["architecture"]) == (
        "openblas", "0.3.31", 2, "Haswell")
    assert info["forced_by"] == {"OPENBLAS_CORETYPE": "Haswell"}
    assert "OPENBLAS_CORETYPE=Haswell" in info["warning"] and "AVX-512" in info["warning"]


def test_avx512_kernels_on_an_avx512_cpu_are_not_flagged(fake_pool) -> None:
    fake_pool({**OPENBLAS, "architecture": "SkylakeX"}, {"avx512f"}, {})
    assert "warning" not in host.blas_info()


def test_haswell_kernels_on_an_avx2_cpu_are_what_it_offers(fake_pool) -> None:
    fake_pool(OPENBLAS, {"avx2"}, {})
    assert "warning" not in host.blas_info()
