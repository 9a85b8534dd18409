"""An example mmsuite plugin: one SGEMM kernel per backend, each a real (if simple) step over
its parent rung of mmsuite's ladder, which the `x parent` column then measures.

Installed (``pip install ./examples/plugin``), mmsuite finds it through the entry point
``example`` of the group ``mmsuite.kernels``; as a file, ``mmsuite run --plugin
examples/plugin/mmsuite_example_plugin/__init__.py`` loads it the same way.
"""

import numpy as np

import mmsuite

# C: the ladder's ABI (mm.h), built with the C ladder's own flags.
mmsuite.register(
    id="example.c_ikj_omp", backend="cpu", source="ikj_omp.c", entry="example_ikj_omp",
    parent="cpu.seq_ikj", threaded=True,
    adds="rows of C shared among OpenMP threads over seq_ikj's stride-1 inner loop")

# OpenCL: the ladder's arguments (common.h); 16x16 work-groups, one element of C each.
mmsuite.register(
    id="example.cl_tiled", backend="opencl", source="tiled.cl", entry="example_tiled",
    parent="opencl.naive", local=(16, 16), defines={"TS": 16},
    adds="16x16 tiles of A and B staged in local memory")

# CUDA: the ladder's arguments (common.cuh); a 64x64 tile of C per 256-thread block,
# 4x4 outputs per thread.
mmsuite.register(
    id="example.cu_reg4x4", backend="cuda", source="reg4x4.cu", entry="example_reg4x4",
    parent="cuda.12_tiled16", block=(16, 16), tile=(64, 64), grid_x="cols",
    adds="4x4 outputs per thread from 64x64x16 shared tiles")


def numpy_gemm(alpha, a, b, beta, c):
    """C = alpha*A*B + beta*C with numpy: C is a view of mmsuite's buffer, so write into it."""
    product = np.matmul(a, b)
    if alpha != 1.0:
        product *= np.float32(alpha)
    if beta != 0.0:
        product += np.float32(beta) * c
    c[...] = product


mmsuite.register(id="example.numpy", backend="python", function=numpy_gemm,
                 parent="cpu.blas", adds="numpy.matmul with a separate epilogue")


def cupy_gemm(alpha, a, b, beta, c):
    """The same on the GPU: CuPy arrays in, work enqueued on CuPy's current stream (the one
    mmsuite times)."""
    import cupy

    product = cupy.matmul(a, b)
    if alpha != 1.0:
        product *= cupy.float32(alpha)
    if beta != 0.0:
        product += cupy.float32(beta) * c
    c[...] = product


mmsuite.register(id="example.cupy", backend="python", device="cuda", function=cupy_gemm,
                 parent="cuda.cublas", adds="cupy.matmul with a separate epilogue")
