// Rung 22 (beyond the seeds), column-major: rung 21's kernels, tile shape and
// split factor chosen per problem, or rung 23's or rung 24's kernels instead.
// Adds over rung 21 (always 128x128x8 tiles, split factor per problem): the
// plan is chosen per problem among every candidate of mmsuite/cuda_dispatch's
// manifest: rung 21's tile variants (32x32 up to 256x128, 128x256 and 512x64,
// 64 to 512 threads, one or two shared buffers) with each split factor that
// leaves no K slice empty (four small tiles also FUSED, their slices added by
// each tile's last block: skinny products with a long K, 10x75x5228 at 72% of
// cuBLAS with the reduction's launch, 100% fused in slices of 8 K tiles), rung
// 23's stream-K tile variants, and, where
// min(M, N) <= 16, rung 24's bandwidth-bound kernels with their K splits,
// where K is short rung 27's kernels, where C is a few 4 x 4 tiles rung 30. A
// cost model of the GPU ranks them: waves of blocks on the SMs, how full the
// last one leaves them, each block's K work at the tile's rate or, for small
// blocks, a K tile's round trip, scalar loads
// when M or K is not a multiple of 4, the stores of C and loads of the
// panels, the reduction or fix-up pass, and for rung 24 the bytes over the
// memory's bandwidth. Its parameters are fitted per GPU model to timings of
// the candidates on a seeded sample of shapes (`mmsuite tune --fit-model`;
// mmsuite ships the H100's), and a device's tuning file (`mmsuite tune`: the
// user's, else the one shipped) names the plan for the exact problems it
// lists. Small tiles fill the SMs on small problems (64x64 at 512^3), 256x128
// tiles of 512 threads load less per FMA on large ones, 128-thread tiles lose
// least to misaligned columns, stream-K fills the last wave where tiles leave
// it part empty (3000x1500x700: 94.7% of cuBLAS, against 71.6% when only
// hand-set constants chose), and GEMV-like products stream the big operand once.
// The launches are rung 21's extern "C" entries, included below:
// mm_21_splitk(M, N, K, alpha, A, B, beta, C, W, splits), then, when K is
// split, mm_21_reduce(M, N, batch, alpha, W, beta, C, splits); or rung 23's
// and rung 24's (their own files).
// Measured on the H100 (spin kernel ahead of each sample, L2 warm, cuBLAS in
// the same run, the shipped tuning file), % of cuBLAS: 95% at 512^3, 97% at
// 1024^3 (rung 21: 98%), 96% at 2048^3, 95.5% at 4096^3, 96% at 8192^3, 94%
// at 4097^3, 92% on 8192x128x8192, 83% on 128x128x65536, 97.6% on batch 100
// x 1000^3. With the whole manifest to choose from (starting parameters, same
// run): 95.4% at 4096^3, 96.6% at 2048^3, 94.5% at 8192^3, 91.6% on
// 8192x128x8192, 97.4% at 512^3, 97.6% at 1024^3, 91.5% at 4097^3 (its tuned
// entry: 94%), 98.5% at 2560^3, 108% at 1536^3, 94.5% on 3000x1500x700 and
// 96.5% on 1x8192x8192 (rung 24); the fitted model's picks there, timed as
// candidates in that run, were the same plans or faster (8192^3: 96.7%,
// 777x555x3333: 89%, against 77%), except at 512^3 (3% slower).
// What moved the large squares from 92% to 95-96%: first the order of the
// FMAs in cuda/mac_loop.inc (column pairs with the rows snaking; 256x128x16
// LR 2: 48.5 against 47.5 TFLOP/s at 4096^3), then two shared buffers for
// that tile (one barrier per K tile; 49.2-49.6), which pass the 48 KB a
// kernel may declare and so take dynamic shared memory. Before the new FMA
// order the two buffers had made it slower (45.1). cuBLAS's SASS for this
// problem takes both FFMA operands from the operand reuse cache in 47% of its
// FFMAs and neither in 4%; in ptxas's main loop for the one-buffer tile it is
// now 12% and 13% (1% and 19% before). No other order or layout tried did
// better: LR 4, 8 or 16, the pairs in another order, row pairs, fragments
// double-buffered in registers (all level or slower), 8 x 16 or 16 x 8
// outputs per thread in 256-thread blocks (47.1 at best), B rows unpadded to
// fit two buffers in 48 KB (1.2% slower than padded). 128x256x16 with two
// buffers reached 93.5% on 8192x128x8192 but spills under nvcc, so it is not
// offered.
// Tried on the H100 against the 256x128x16 tile of 512 threads with one
// buffer (47.3 TFLOP/s at 4096^3 before the FMA orders), all slower: 16 x 8
// outputs per thread in 256-thread blocks, cuBLAS's own tile and warp layout
// there (46.8), a
// cp.async pipeline of three stages (43.5; 40.7 with B kept k-contiguous per
// column, untransposed, and one barrier per K tile, 38.8 with two or four
// stages), cuBLAS's whole kernel as its SASS shows it (256x128x8, warps 4 x 2,
// 8 x 16 outputs per thread, three stages of 4-byte cp.async, fragments
// double-buffered in registers, one barrier per K tile ahead of the last
// k-step: 36.7-37.9, ptxas clustering its shared loads where cuBLAS issues
// one per 16 FFMAs), the same pipelined loop on this source's tiles (37.2
// at 256x128x16 with spills, 41.8 at 128x128x8 with 8 warps per SM), one
// buffer at BK 32 (43.7; 45.0 with the new FMA order),
// unpredicated loads for interior tiles or the next tile's loads moved after
// the first k-steps (within 0.5% either way), the split-K reduction fused
// into the main kernel (the last slice of a tile to finish adds the slices:
// 4% slower on 8192x128x8192, 25% at 1024^3, 49% at 512^3; the plain
// reduction costs 6.1 us of 0.387 ms there), and stream-K with this tile
// (rung 23: level at 8192^3, 1% slower at 4096^3, 6% at 2048^3, where its
// 128 KB partial tiles cost more than the last wave they fill). Nsight
// Compute put the gap in issue: cuBLAS issued on 91% of cycles with 8 warps
// per SM, this tile on 82% with 16 (83% with the FMA orders), its warps
// stalled at the two barriers per K tile and on dispatch, no warp of a
// scheduler eligible on 17% of cycles (cuBLAS: 9%); the second buffer halves
// those barriers (not profiled since).
#include "21_splitk.cu"
