"""Tensor maps: the launch data checks its strides, and one kernel argument packs a plan's
maps in order over the session's buffers. (Encoding itself needs the CUDA driver: the
sm_90a rungs' agreement tests in test_cuda.py exercise it on a Hopper GPU.)"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from mmsuite.backends import cuda_tensormap
from mmsuite.launch import TensorMap, TensorMaps


def test_a_tensor_map_names_a_buffer_and_16_byte_strides() -> None:
    TensorMap("work", 32, 700, 384, 2, 704, 384 * 704, 128)
    with pytest.raises(ValueError, match="unknown buffer"):
        TensorMap("m", 0, 8, 8, 1, 8, 64, 8)
    with pytest.raises(ValueError, match="multiples of 16 bytes"):
        TensorMap("b", 0, 19, 79, 1, 19, 79 * 19, 256)  # K = 19: rows of 76 bytes
    # BF16 rows need 8 elements to a 16-byte multiple, where FP32 ones need 4.
    TensorMap("work", 32, 704, 384, 1, 704, 384 * 704, 128, 64, "bfloat16")
    with pytest.raises(ValueError, match="multiples of 16 bytes"):
        TensorMap("work", 32, 700, 384, 1, 700, 384 * 700, 128, 64, "bfloat16")
    with pytest.raises(ValueError, match="unknown tensor map dtype"):
        TensorMap("work", 32, 704, 384, 1, 704, 384 * 704, 128, 64, "float16")


def test_one_argument_holds_every_map_in_order_at_its_buffers_address(monkeypatch) -> None:
    encoded: list[tuple[int, TensorMap]] = []

    def encode(address: int, tensor: TensorMap) -> bytes:
        encoded.append((address, tensor))
        return bytes([len(encoded)]) * cuda_tensormap.MAP_BYTES

    monkeypatch.setattr(cuda_tensormap, "encode", encode)
    buffers = {"work": SimpleNamespace(data=SimpleNamespace(ptr=4096)),
               "b": SimpleNamespace(data=SimpleNamespace(ptr=65536))}
    maps = TensorMaps((TensorMap("work", 64, 32, 128, 1, 32, 4096, 128),
                       TensorMap("b", 0, 32, 200, 1, 32, 6400, 256)))
    argument = cuda_tensormap.kernel_argument(maps, buffers)
    assert argument.shape == (1,) and argument.dtype.itemsize == 2 * cuda_tensormap.MAP_BYTES
    raw = argument.view(np.uint8)
    assert set(raw[:128]) == {1} and set(raw[128:]) == {2}
    assert [address for address, _ in encoded] == [4096 + 4 * 64, 65536]
