"""OpenCL device discovery: the flat device list, selection, and the smoke test that
decides whether a device is usable at all."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

cl = pytest.importorskip("pyopencl", reason="pyopencl is not installed")

from mmsuite.backends import cl_devices  # noqa: E402

DEVICES = cl_devices.list_devices()
needs_device = pytest.mark.skipif(not DEVICES, reason="no OpenCL device here")


def _fake_entry(index: int, kind: int, name: str) -> cl_devices.DeviceEntry:
    device = SimpleNamespace(name=name, vendor="Vendor", type=kind)
    platform = SimpleNamespace(name="Fake Platform", vendor="Fake")
    return cl_devices.DeviceEntry(index, platform, device)


FAKES = [_fake_entry(0, cl.device_type.CPU, "Some CPU"),
         _fake_entry(1, cl.device_type.GPU, "Some GPU 80GB"),
         _fake_entry(2, cl.device_type.GPU, "Other GPU")]


def works(entry: cl_devices.DeviceEntry) -> str:
    return ""


# ------------------------------------------------------------------ selection
def test_default_prefers_a_gpu_then_a_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYOPENCL_CTX", raising=False)
    assert cl_devices.select_device(None, FAKES, works).name == "Some GPU 80GB"
    assert cl_devices.select_device(None, FAKES[:1], works).name == "Some CPU"


def test_default_skips_devices_that_cannot_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYOPENCL_CTX", raising=False)
    broken = {"Some GPU 80GB": "1: Some GPU 80GB cannot build a trivial program: error: x"}
    chosen = cl_devices.select_device(None, FAKES, lambda e: broken.get(e.name, ""))
    assert chosen.name == "Other GPU"


def test_no_working_device_gives_the_first_compiler_reason_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYOPENCL_CTX", raising=False)
    with pytest.raises(LookupError) as err:
        cl_devices.select_device(None, FAKES, lambda e: f"{e.name}: error: unknown target CPU")
    message = str(err.value)
    assert message.startswith("Some GPU 80GB: error: unknown target CPU")
    assert message.count("unknown target CPU") == 1
    assert "2 more device(s) failed" in message


def test_selection_by_index_into_the_flat_list() -> None:
    assert cl_devices.select_device("2", FAKES, works) is FAKES[2]
    assert cl_devices.select_device(0, FAKES, works) is FAKES[0]


def test_selection_by_case_insensitive_name_substring() -> None:
    assert cl_devices.select_device("gpu 80", FAKES, works) is FAKES[1]
    assert cl_devices.select_device("OTHER", FAKES, works) is FAKES[2]


def test_a_selector_matching_nothing_lists_the_devices() -> None:
    with pytest.raises(ValueError) as err:
        cl_devices.select_device("no-such-device", FAKES, works)
    message = str(err.value)
    assert "\n" not in message
    assert "'no-such-device'" in message
    for entry in FAKES:
        assert entry.label in message
    with pytest.raises(ValueError):
        cl_devices.select_device("7", FAKES, works)


def test_pyopencl_ctx_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYOPENCL_CTX", "0:2")
    assert cl_devices.select_device(None, FAKES, works) is FAKES[2]
    monkeypatch.setenv("PYOPENCL_CTX", "fake:other")
    assert cl_devices.select_device(None, FAKES, works) is FAKES[2]
    monkeypatch.setenv("PYOPENCL_CTX", "5")
    with pytest.raises(ValueError, match="PYOPENCL_CTX"):
        cl_devices.select_device(None, FAKES, works)


# ---------------------------------------------------------------- smoke test
def test_first_error_line_skips_pyopencls_repeated_status() -> None:
    log = ("clBuildProgram failed: BUILD_PROGRAM_FAILURE - clBuildProgram failed: "
           "BUILD_PROGRAM_FAILURE\n\nBuild on <pyopencl.Device 'pthread' at 0x1>:\n\n"
           "error: unknown target CPU 'generic'\nDevice pthread failed to build the program\n")
    assert cl_devices.first_error_line(log) == "error: unknown target CPU 'generic'"
    assert cl_devices.first_error_line("") == "unknown build failure"


@needs_device
def test_real_devices_keep_their_indices() -> None:
    again = cl_devices.list_devices()
    assert [e.label for e in again] == [e.label for e in DEVICES]
    assert [e.index for e in again] == list(range(len(again)))


@needs_device
def test_smoke_test_result_is_a_reason_or_empty() -> None:
    for entry in DEVICES:
        reason = cl_devices.smoke_test(entry)
        assert reason == "" or (entry.label in reason and "\n" not in reason)
    assert any(cl_devices.smoke_test(e) == "" for e in DEVICES), "no working OpenCL device"


# ------------------------------------------------------------ missing drivers
def test_no_platform_reason_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cl_devices, "nvidia_icd_hint", lambda: "")
    reason = cl_devices.no_platform_reason()
    assert "pocl-opencl-icd" in reason


def test_unregistered_nvidia_driver_is_explained(tmp_path) -> None:
    lib = tmp_path / "libnvidia-opencl.so.1"
    lib.write_text("")
    vendors = tmp_path / "vendors"
    vendors.mkdir()
    (vendors / "pocl.icd").write_text("libpocl.so.2\n")
    hint = cl_devices.nvidia_icd_hint([str(vendors)], libs=[str(lib)])
    assert str(lib) in hint and "OCL_ICD_VENDORS" in hint and "no ICD file" in hint
    (vendors / "nvidia.icd").write_text(f"{lib}\n")
    assert cl_devices.nvidia_icd_hint([str(vendors)], libs=[str(lib)]) == ""
    assert cl_devices.nvidia_icd_hint([str(vendors)], libs=[str(tmp_path / "absent.so")]) == ""


def test_no_platform_reason_mentions_an_unregistered_nvidia_driver(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cl_devices, "nvidia_icd_hint", lambda: "NVIDIA's OpenCL driver X is "
                        "installed but no ICD file names it; ... OCL_ICD_VENDORS")
    assert "OCL_ICD_VENDORS" in cl_devices.no_platform_reason()
