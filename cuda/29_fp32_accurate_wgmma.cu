// Rung 29 (beyond the seeds), column-major: FP32 accuracy from TF32 wgmma
// (precision class FP32-accurate; needs sm_90a).
// Adds over rung 26 (the same split and the same accumulation on mma.sync, about
// 150 TFLOP/s of tensor work, 0.88-0.99x cuBLAS FP32): rung 28's Hopper pipeline
// (TMA loads into 128-byte-swizzled tiles, a producer and two consumer warpgroups,
// wgmma from shared memory) carrying both TF32 parts of both operands (mm_25_pack
// with parts = 2 writes them; 3 stages of 4 x 16 KB), 128 x 128 block tiles.
// Per 32-k stage each consumer warpgroup issues, as two groups:
// - big*big, 4 x m64n128k8 into a chunk accumulator started from zero (the first
//   product's scale-d off), so that the tensor core's truncating adds span 32 k only;
// - big*small and small*big, 8 products into one correction accumulator for the
//   whole K (2^-11 of the result: its truncation is invisible);
// then waits for the first group alone (wgmma.wait_group 1: the corrections keep the
// tensor core busy meanwhile) and adds the chunk into FP32 register accumulators,
// rounded to nearest, outside the tensor core. 3 x 64 accumulators per thread fit
// after setmaxnreg gives the consumers 232 registers. At the end C = acc + corr / 2^11.
// Short K (below 512) or M or N below 64: rung 22's FP32 SIMT kernels, as rung 26.
// Launch (mmsuite/tensorcore.py): mm_25_pack on A and on B (parts = 2), then
// mm_29_fp32_accurate_wgmma(maps, M, N, Kp, alpha, beta, C, W, kt_per_slice, slices)
// with four tensor maps (A big, A small, B big, B small), then mm_21_reduce when K is
// sliced. Any M, N, K >= 1, any batch.
// Measured on the H100 (mmsuite run, same run as cuBLAS FP32, L2 warm), packs included,
// two runs; error as max_rel_err over cuBLAS FP32's on the same inputs (uniform):
//   2048^3  95.6 / 94.9 TFLOP/s, 1.93x / 1.91x cuBLAS FP32 (49.4 / 49.7); error 0.24x
//   4096^3   115 / 112 TFLOP/s,  2.22x / 2.17x (51.6 / 51.6);             0.21x
//   8192^3   123 / 120 TFLOP/s,  2.38x / 2.35x (51.7 / 51.7);             0.19x
// Energy per GEMM at 4096^3: 0.76-0.78 J, 0.52x-0.56x cuBLAS FP32's. Errors on other
// inputs and shapes, and where the time goes, are in docs/kernel-log.md.
#include "28_tf32_wgmma.cu"

#ifndef ACC_BN
#define ACC_BN 128
#endif
#ifndef ACC_STAGES
#define ACC_STAGES 3
#endif

extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
mm_29_fp32_accurate_wgmma(const __grid_constant__ WgMaps<2> maps, int M, int N, int Kp,
                          float alpha, float beta, float* C, float* W, int kt_per_slice,
                          int slices) {
    wg_gemm<2, ACC_BN, ACC_STAGES>(maps.map, M, N, Kp, alpha, beta, C, W, kt_per_slice,
                                   slices);
}
