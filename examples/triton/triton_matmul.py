"""A Triton SGEMM as an mmsuite plugin: a CUDA callable on CuPy arrays.

    mmsuite run --plugin examples/triton/triton_matmul.py --kernel 'triton.*' --shape 4096

mmsuite knows nothing of Triton: it hands the callable CuPy arrays, which PyTorch takes
without a copy through DLPack, and times the work on CuPy's current stream, which the kernel
is launched on through ``torch.cuda.ExternalStream``. FP32 in, FP32 accumulation
(``allow_tf32=False``): the class mmsuite holds it to is ``fp32``.
"""

import mmsuite


def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def matmul(a, b, c, m, n, k, sam, sak, sbk, sbn, scm, scn, alpha, beta,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, USE_C: tl.constexpr):
        pid_m, pid_n = tl.program_id(0), tl.program_id(1)
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, k, BK):
            ka = k0 + rk
            tile_a = tl.load(a + rm[:, None] * sam + ka[None, :] * sak,
                             mask=(rm[:, None] < m) & (ka[None, :] < k), other=0.0)
            tile_b = tl.load(b + ka[:, None] * sbk + rn[None, :] * sbn,
                             mask=(ka[:, None] < k) & (rn[None, :] < n), other=0.0)
            acc = tl.dot(tile_a, tile_b, acc, allow_tf32=False)
        out = c + rm[:, None] * scm + rn[None, :] * scn
        mask = (rm[:, None] < m) & (rn[None, :] < n)
        result = alpha * acc
        if USE_C:  # beta == 0 never reads C, which may hold NaN
            result += beta * tl.load(out, mask=mask, other=0.0)
        tl.store(out, result, mask=mask)

    return matmul


_compiled = []


def triton_gemm(alpha, a, b, beta, c):
    import cupy
    import torch

    if not _compiled:
        _compiled.append(_kernel())
    matmul = _compiled[0]
    stream = torch.cuda.ExternalStream(cupy.cuda.get_current_stream().ptr)
    ta, tb, tc = (torch.from_dlpack(x) for x in (a, b, c))
    if ta.dim() == 2:
        ta, tb, tc = ta[None], tb[None], tc[None]
    with torch.cuda.stream(stream):
        for i in range(ta.shape[0]):
            x, y, z = ta[i], tb[i], tc[i]
            m, k = x.shape
            n = y.shape[1]
            grid = ((m + 63) // 64, (n + 63) // 64)
            matmul[grid](x, y, z, m, n, k, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
                         z.stride(0), z.stride(1), alpha, beta, BM=64, BN=64, BK=32,
                         USE_C=beta != 0.0)


mmsuite.register(id="triton.matmul", backend="python", device="cuda", function=triton_gemm,
                 parent="cuda.cublas", adds="Triton tl.dot on 64x64x32 tiles, FP32 (TF32 off)")
