"""Where a row ran: a cluster row names its own host and device; a local row's file does."""

from __future__ import annotations

from mmsuite import machines

FILE_ENV = {"cpu": "client CPU",
            "backends": {"cuda": {"gpu": "NVIDIA A100", "devices": [
                {"index": 0, "gpu": "NVIDIA A100"}, {"index": 1, "gpu": "NVIDIA L4"}]},
                "opencl": {"opencl_device": "pthread-AMD EPYC"}},
            "workers": {"b-gpu0": {"cpu": "Xeon", "backends": {"cuda": {"gpu": "NVIDIA H100"}}}}}


def test_a_local_rows_device_model_comes_from_its_files_environment() -> None:
    assert machines.device_model({"backend": "cpu"}, FILE_ENV) == "client CPU"
    assert machines.device_model({"backend": "opencl"}, FILE_ENV) == "pthread-AMD EPYC"
    assert machines.device_model({"backend": "cuda", "device": 1}, FILE_ENV) == "NVIDIA L4"
    assert machines.device_model({"backend": "cuda"}, {}) == ""


def test_a_cluster_row_names_its_device_and_its_workers_environment_describes_it() -> None:
    row = {"backend": "cuda", "worker": "b-gpu0", "host": "b"}
    assert machines.environment_of(row, FILE_ENV)["cpu"] == "Xeon"
    assert machines.device_model(row, FILE_ENV) == "NVIDIA H100"  # from its worker's record
    assert machines.device_model({**row, "device_model": "H100 SXM"}, FILE_ENV) == "H100 SXM"
    # A worker whose environment was not recorded falls back to the file's.
    assert machines.environment_of({"worker": "gone"}, FILE_ENV) is FILE_ENV


def test_only_cluster_rows_carry_their_own_machine_label() -> None:
    assert machines.row_machine({"host": "b", "device_model": "NVIDIA H100"}) == \
        "NVIDIA H100 on b"
    assert machines.row_machine({"host": "b"}) == "unknown device on b"
    assert machines.row_machine({"backend": "cpu"}) is None
