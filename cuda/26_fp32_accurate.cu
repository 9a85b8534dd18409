// Rung 26 (beyond the seeds), column-major: FP32 accuracy from TF32 tensor cores
// (precision class FP32-accurate: held to the FP32 tolerance).
// Adds over rung 25 (one TF32 product, about 200x FP32's error): each input x is
// split into big = x rounded to nearest TF32 (cvt.rna) and small = (x - big)
// scaled by 2^11 and rounded to TF32 again, so that big + small / 2^11 carries
// about 22 of FP32's 24 bits; C = big*big + (big*small + small*big) / 2^11, the
// small*small term (2^-22 of the product) left out (Ootomo and Yokota, 2022).
// Three tensor products for one: at about 7x the FP32 peak per product the
// rung can still pass FP32 SIMT (rung 22, cuBLAS FP32) by up to 2x.
// Where the error goes, and what this rung does about it:
// - the split: round to nearest, not truncation (truncation leaves a biased
//   remainder); the small parts scaled by 2^11 so they stay normal numbers;
// - accumulation: Hopper's tensor cores add inside the MMA with truncation, and
//   over a long K that, not the split, dominates (three cuBLAS TF32 calls on such
//   a split: 8-25x cuBLAS FP32's error). Here the big products of each chunk of
//   16 k are summed in the tensor core from zero and the chunk's sum is added
//   into FP32 register accumulators outside it, rounded to nearest; the two
//   correction products go to accumulators of their own (2^-11 of the result, so
//   their truncation costs nothing visible), added to the main sum once, at the
//   end;
// - long K is also cut into slices (mmsuite/tensorcore.py) when the tiles do
//   not fill the SMs, which shortens every FP32 sum; rung 21's mm_21_reduce adds
//   the slices in a fixed order.
// Rung 25's pipeline carries both parts of both operands (mm_25_pack with parts
// = 2 writes them; 221 KB of shared memory in three stages), and the launches
// are mm_25_pack(...) twice, then mm_26_fp32_accurate(M, N, Kp, alpha, beta, C,
// W, a_offset, b_offset, Mp, Np, kt_per_slice, slices), then mm_21_reduce when
// K is split. Where K is short (below 512) or M or N below 64, the split's own
// error outweighs what the accumulation saves and the tensor cores gain little:
// the planner runs rung 22's FP32 SIMT kernels there instead.
// Any M, N, K >= 1, any batch, as rung 25.
// Measured on the H100 (same run as cuBLAS FP32, L2 warm), error as max_rel_err
// over cuBLAS FP32's on the same inputs (uniform / normal / wide):
//   2048^3  43.9 TFLOP/s, 0.88x cuBLAS FP32; error 0.28x / 0.28x / 0.37x
//   4096^3  49.1 TFLOP/s, 0.95x;             0.27x / 0.27x / 0.35x
//   8192^3  51.4 TFLOP/s, 0.99x;             0.26x / 0.26x / 0.35x
//   256x256x65536 (33 slices) 0.42x-0.53x, batch 20 x 1000^3 0.31x-0.40x;
//   35x79x19 and 1x1x1 (rung 22's path) 1.0x-1.16x.
// Energy at 4096^3 (NVML, idle power off): 1.57-1.60 J against cuBLAS FP32's
// 1.39-1.41 J. FP32 accuracy, better than cuBLAS's, is there; the speed is not:
// three mma.sync products run at about 150 TFLOP/s of tensor work (rung 29 takes
// them to wgmma); more in docs/kernel-log.md.
#include "25_tf32_mma.cu"

#ifndef ACCURATE_STAGES
#define ACCURATE_STAGES 3
#endif

extern "C" __global__ void __launch_bounds__(TC_THREADS, 1)
mm_26_fp32_accurate(int M, int N, int Kp, float alpha, float beta, float* C, float* W,
                    int a_offset, int b_offset, int Mp, int Np, int kt_per_slice, int slices) {
    tc_gemm<2, ACCURATE_STAGES>(M, N, Kp, alpha, beta, C, W, a_offset, b_offset, Mp, Np,
                                kt_per_slice, slices);
}
