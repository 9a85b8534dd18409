// Rung 22 (beyond the seeds), column-major: rung 21's kernels, tile shape and
// split factor chosen per problem, or rung 23's, 24's, 27's or 30's kernels instead.
// Adds over rung 21 (always 128x128x8 tiles, split factor per problem): the
// plan is chosen per problem among every candidate of mmsuite/cuda_dispatch's
// manifest: rung 21's tile variants (32x32 up to 256x128, 128x256 and 512x64,
// 64 to 512 threads, one or two shared buffers) with each split factor that
// leaves no K slice empty (small tiles also FUSED, their slices added by each
// tile's last block), rung 23's stream-K tiles, where min(M, N) <= 16 rung 24's
// bandwidth-bound kernels, where K is short rung 27's kernels, and where C is a
// few 4 x 4 tiles rung 30. A cost model fitted to the GPU ranks them
// (`mmsuite tune --fit-model`; docs/dispatcher.md), and a device's tuning file
// (`mmsuite tune`) names the plan for the exact problems it lists.
// Why it is faster: no one tile suits every shape. Small tiles fill the SMs on
// small problems (64x64 at 512^3), 256x128 tiles of 512 threads load less per
// FMA on large ones, split-K and stream-K fill the last wave where tiles leave
// it part empty, and GEMV-like and short-K products take kernels built for them.
// The 256x128x16 tile reaches 49.2-49.6 TFLOP/s at 4096^3 from the order of its
// FMAs (cuda/mac_loop.inc: operands reused from the register cache) and two
// shared buffers (one barrier per K tile).
// The launches are rung 21's extern "C" entries, included below:
// mm_21_splitk(M, N, K, alpha, A, B, beta, C, W, splits), then, when K is
// split, mm_21_reduce(M, N, batch, alpha, W, beta, C, splits); or rung 23's,
// 24's, 27's and 30's (their own files).
// Measured on the H100 (spin kernel ahead of each sample, L2 warm, cuBLAS in
// the same run, the shipped tuning file), % of cuBLAS: 95% at 512^3, 97% at
// 1024^3, 96% at 2048^3, 95.5% at 4096^3, 96% at 8192^3, 94% at 4097^3, 92% on
// 8192x128x8192, 83% on 128x128x65536, 97.6% on batch 100 x 1000^3; on 48
// random shapes a geometric mean of 136-144% (docs/dispatcher.md). What was
// tried on the way is in docs/kernel-log.md.
#include "21_splitk.cu"
