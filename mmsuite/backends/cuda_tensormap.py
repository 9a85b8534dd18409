"""Tensor maps for the bulk tensor copy engine (TMA), built through the CUDA driver.

``cuTensorMapEncodeTiled`` (libcuda, CUDA 12+) writes a 128-byte descriptor of a
tiled copy: the tensor's address, sizes and strides, the box one copy moves and the
shared-memory swizzle. CuPy does not wrap it, so it is called through ``ctypes``.
A kernel takes the descriptors by value (``const __grid_constant__``); CuPy passes a
one-element numpy array by value, so ``kernel_argument`` packs the maps of one
``TensorMaps`` argument into one such array.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Mapping
from functools import cache
from typing import Any

import numpy as np

from ..launch import TensorMap, TensorMaps

MAP_BYTES = 128  # sizeof(CUtensorMap)
_MAP_ALIGN = 64  # alignof(CUtensorMap)
# cuda.h enumerations.
_DATA_TYPES = {"float32": 7, "bfloat16": 9}  # CU_TENSOR_MAP_DATA_TYPE_FLOAT32, _BFLOAT16
_INTERLEAVE_NONE = 0
_SWIZZLE_128B = 3
_L2_PROMOTION_256B = 3
_OOB_FILL_ZEROS = 0  # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: elements out of bounds read as 0


class TensorMapError(RuntimeError):
    """The driver refused a tensor map (or has no cuTensorMapEncodeTiled)."""


@cache
def _encoder() -> Any:
    name = ctypes.util.find_library("cuda") or "libcuda.so.1"
    try:
        encode = ctypes.CDLL(name).cuTensorMapEncodeTiled
    except (OSError, AttributeError) as exc:
        raise TensorMapError(f"the CUDA driver has no cuTensorMapEncodeTiled ({exc}); "
                             "the bulk tensor copy engine needs CUDA 12 or newer") from exc
    encode.restype = ctypes.c_int
    u64p, u32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
    encode.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p,
                       u64p, u32p, u32p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    return encode


def encode(address: int, tensor: TensorMap) -> bytes:
    """The 128-byte descriptor of ``tensor`` whose buffer starts at device ``address``."""
    storage = np.zeros(MAP_BYTES + _MAP_ALIGN, dtype=np.uint8)
    start = -storage.ctypes.data % _MAP_ALIGN
    out = storage[start:start + MAP_BYTES]
    dims = (ctypes.c_uint64 * 3)(tensor.k, tensor.rows, tensor.matrices)
    size = tensor.element_bytes
    strides = (ctypes.c_uint64 * 2)(size * tensor.row_stride, size * tensor.matrix_stride)
    box = (ctypes.c_uint32 * 3)(tensor.box_k, tensor.box_rows, 1)
    steps = (ctypes.c_uint32 * 3)(1, 1, 1)
    status = _encoder()(out.ctypes.data, _DATA_TYPES[tensor.dtype], 3, ctypes.c_void_p(address),
                        dims, strides, box, steps, _INTERLEAVE_NONE, _SWIZZLE_128B,
                        _L2_PROMOTION_256B, _OOB_FILL_ZEROS)
    if status != 0:
        raise TensorMapError(f"cuTensorMapEncodeTiled returned CUresult {status} for {tensor} "
                             f"at 0x{address:x}")
    return out.tobytes()


def kernel_argument(maps: TensorMaps, buffers: Mapping[str, Any]) -> np.ndarray:
    """The maps over ``buffers`` (name -> CuPy float32 array), as one by-value argument."""
    blob = b"".join(encode(buffers[m.buffer].data.ptr + 4 * m.offset, m) for m in maps.maps)
    argument = np.zeros(1, dtype=np.dtype((np.void, len(blob))))
    argument.view(np.uint8)[:] = np.frombuffer(blob, dtype=np.uint8)
    return argument
