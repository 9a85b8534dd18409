"""The OpenCL adapter: failure reasons, device limits, environment and timing samples.

Runs wherever an OpenCL platform exists (PoCL on any CPU, NVIDIA's driver on a
GPU host); the parts that need a device skip with a reason elsewhere. The
numerical agreement of the ladder is covered by tests/test_agreement.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import mmsuite
from mmsuite import Problem, RunOptions, catalogue
from mmsuite.backends import unavailable_reason
from mmsuite.sources import read_source

cl = pytest.importorskip("pyopencl", reason="pyopencl is not installed")

from mmsuite.backends import cl_devices, opencl  # noqa: E402

DEVICES = cl_devices.list_devices()
needs_device = pytest.mark.skipif(not DEVICES, reason="no OpenCL device here")


def _fake_entry(index: int, kind: int, name: str, **limits) -> cl_devices.DeviceEntry:
    device = SimpleNamespace(
        name=name, vendor="Vendor", type=kind,
        max_work_group_size=limits.get("max_work_group_size", 1024),
        max_work_item_sizes=limits.get("max_work_item_sizes", [1024, 1024, 64]),
        local_mem_size=limits.get("local_mem_size", 48 * 1024))
    platform = SimpleNamespace(name="Fake Platform", vendor="Fake")
    return cl_devices.DeviceEntry(index, platform, device)


FAKES = [_fake_entry(0, cl.device_type.CPU, "Some CPU"),
         _fake_entry(1, cl.device_type.GPU, "Some GPU 80GB")]


def test_clblast_reference_is_optional() -> None:
    reason = opencl._clblast_reason()
    try:
        import pyclblast  # noqa: F401
    except ImportError:
        assert "pyclblast" in reason
    else:
        assert reason == ""


@needs_device
def test_backend_selects_by_index_and_by_name() -> None:
    last = DEVICES[-1]
    by_index = opencl.OpenCLBackend(RunOptions(cl_device=str(last.index)))
    assert by_index.entry.label == last.label
    by_name = opencl.OpenCLBackend(RunOptions(cl_device=last.name.upper()))
    assert by_name.entry.name == last.name


@needs_device
def test_bad_selector_makes_every_kernel_unavailable_with_the_listing() -> None:
    options = RunOptions(cl_device="no-such-device")
    with pytest.raises(ValueError, match="devices: 0: "):
        opencl.OpenCLBackend(options)
    reason = unavailable_reason(mmsuite.get("opencl.naive"), options)
    assert "no OpenCL device matches 'no-such-device'" in reason
    assert DEVICES[0].label in reason


def test_a_device_that_cannot_build_is_unavailable_with_the_compiler_reason(
        monkeypatch: pytest.MonkeyPatch) -> None:
    reason = "0: Old CPU [PoCL, CPU] cannot build a trivial program: error: unknown target CPU"
    monkeypatch.setattr(opencl, "smoke_test", lambda entry: reason)
    backend = opencl.OpenCLBackend(RunOptions())
    backend._entry = FAKES[0]
    assert backend.probe() == reason


def test_no_platform_reason_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cl_devices, "platforms", lambda cl: [])
    reason = opencl.OpenCLBackend(RunOptions()).probe()
    assert "no OpenCL platform" in reason
    assert "pocl-opencl-icd" in reason and "mmsuite[pocl]" in reason


def test_missing_pyopencl_reason_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(opencl, "import_pyopencl", lambda: (None, "pyopencl is not installed; "
                                                            + cl_devices.INSTALL_HINT))
    assert "pip install 'mmsuite[opencl]'" in opencl.OpenCLBackend(RunOptions()).probe()


# ---------------------------------------------------------- device limits
def test_geometries_respect_device_limits() -> None:
    backend = opencl.OpenCLBackend(RunOptions())
    backend._entry = _fake_entry(0, cl.device_type.GPU, "Tiny", max_work_group_size=64,
                                 max_work_item_sizes=[64, 8, 1], local_mem_size=2048)
    assert "work-group of 1024" in backend._fits(catalogue.tiled_geometry(32))
    assert "axis 1" in backend._fits(catalogue.naive_geometry(4, 16))
    assert "local memory" in backend._fits(catalogue.regblock_geometry(32, 32, 8, 4, 4))
    assert backend._fits(catalogue.tiled_geometry(8)) == ""
    assert backend.kernel_reason(mmsuite.get("opencl.tiled")) == ""
    reason = backend.kernel_reason(mmsuite.get("opencl.regblock_vec"))
    assert "refuses every geometry" in reason and "local memory" in reason


def test_cpu_builds_avoid_slow_fma_and_gpu_builds_keep_it() -> None:
    backend = opencl.OpenCLBackend(RunOptions())
    backend._entry = FAKES[0]
    assert "-DFAST_MAD=1" in backend.device_options
    assert all("STAGE=0" in " ".join(g.options)
               for g in backend.candidates(mmsuite.get("opencl.regblock_vec")))
    backend._entry = FAKES[1]
    assert backend.device_options == []


def test_rung4_slices_must_split_evenly() -> None:
    assert catalogue.regblock_geometry(64, 64, 8, 4, 4, vec=1).shape_error()
    assert catalogue.regblock_geometry(64, 64, 8, 4, 4, vec=0).shape_error() == ""
    assert catalogue.regblock_geometry(64, 64, 8, 4, 4, vec=1, stage=0).shape_error() == ""


# ------------------------------------------------------- running on a device
@needs_device
def test_environment_is_recorded() -> None:
    env = opencl.OpenCLBackend(RunOptions()).environment()
    for key in ("opencl_platform", "opencl_platform_version", "opencl_device",
                "opencl_device_version", "opencl_driver", "opencl_c_version", "pyopencl"):
        assert env[key], key
    if "pocl" in env["opencl_platform_version"].lower():
        assert env["pocl"]


@needs_device
@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_transfers_and_kernel_are_timed_apart(beta: float) -> None:
    m = mmsuite.run("opencl.naive", Problem(40, 24, 16, beta=beta), repeats=2, warmup=1)
    assert m.ok
    assert len(m.kernel_ms.samples) == 2 and all(s > 0 for s in m.kernel_ms.samples)
    for kind in ("pageable", "pinned"):
        phase = m.transfers[kind]
        assert phase["h2d_ms"]["median"] > 0 and phase["d2h_ms"]["median"] > 0
    assert m.info["geometry"].startswith("local ")


def test_the_gate_keeps_the_hosts_delay_out_of_a_sample() -> None:
    if not DEVICES:
        pytest.skip("no OpenCL device here")
    import time

    backend = opencl.OpenCLBackend(RunOptions())
    problem = Problem(64, 64, 64)
    call = mmsuite.layout.plan_call(problem, problem.inputs(), "row")
    with backend.prepare(mmsuite.get("opencl.naive"), call) as session:
        session.reset_c()
        session.launch()
        session.synchronize()
        timer = session.timer()
        session.reset_c()
        timer.start()
        session.launch()
        time.sleep(0.2)  # the host dawdles between enqueue and release
        timer.stop()
        assert 0 < timer.elapsed_ms() < 150


@needs_device
def test_builds_are_cached() -> None:
    backend = opencl.OpenCLBackend(RunOptions())
    kernel = mmsuite.get("opencl.tiled")
    first = backend.build(kernel)
    assert backend.build(kernel) is first
    source = read_source(kernel.source)
    program = opencl.build_program(backend.context, source, first.geometry.options)
    assert opencl.build_program(backend.context, source, first.geometry.options) is program
    # A program belongs to its context: a second context builds its own, once.
    other = opencl.OpenCLBackend(RunOptions())
    other.build(kernel)
    mine = [key for key in opencl._PROGRAMS if key[0] == other.context.int_ptr]
    other.build(kernel)
    assert [key for key in opencl._PROGRAMS if key[0] == other.context.int_ptr] == mine
    assert opencl.build_program(other.context, source, first.geometry.options) is not program


@pytest.mark.parametrize("fake", FAKES, ids=["CPU", "GPU"])
def test_no_build_flushes_subnormals_or_assumes_finite_values(fake) -> None:
    """Subnormals, NaN and Inf are part of what the kernels must compute (the ``tiny`` and
    ``special`` input classes): no build of any rung on any device type asks for less."""
    unsafe = ("-cl-denorms-are-zero", "-cl-fast-relaxed-math", "-cl-finite-math-only",
              "-cl-unsafe-math-optimizations", "-cl-no-signed-zeros")
    backend = opencl.OpenCLBackend(RunOptions())
    backend._entry = fake
    for kernel in mmsuite.kernels("opencl"):
        if kernel.reference:
            continue
        for geometry in backend.candidates(kernel):
            options = [*backend.device_options, *geometry.options]
            assert not set(options) & set(unsafe), (kernel.id, options)
