// Rung 22 (beyond the seeds), column-major: rung 21's kernels, tile shape and
// split factor chosen per problem.
// Adds over rung 21 (always 128x128x8 tiles, split factor per problem): the
// tile shape is chosen per problem too, by mmsuite/dispatch.py, among the
// variants this source compiles to (32x32 up to 256x128 and 128x256, 64 to
// 512 threads, 8 or 4 outputs per thread along each side). A model of the GPU
// counts the waves of blocks on the SMs, how full the last one leaves them,
// each block's K work, what scalar loads cost when M or K is not a multiple
// of 4, and the reduction pass; a device's tuning file, written by
// `mmsuite tune` after a Kernel Tuner search (the user's, else the one mmsuite
// ships for the device), overrides it for the problems it names. Small tiles fill the SMs on small problems (64x64 at 512^3), 256x128
// tiles of 512 threads load less per FMA on large ones, 128-thread tiles lose
// least to misaligned columns (4097^3).
// Where the model finds the last wave clearly emptier than rung 23's even
// share would leave it (4097^3: 92% of cuBLAS with stream-K, 88% without), the
// planner launches rung 23's stream-K kernels instead; a tuned entry wins.
// The launches are rung 21's extern "C" entries, included below:
// mm_21_splitk(M, N, K, alpha, A, B, beta, C, W, splits), then, when K is
// split, mm_21_reduce(M, N, batch, alpha, W, beta, C, splits).
// Measured on the H100 (spin kernel ahead of each sample, L2 warm, cuBLAS in
// the same run, the shipped tuning file), % of cuBLAS: 95% at 512^3, 97% at
// 1024^3, 93-94% at 2048^3, 92% at 4096^3, 93% at 8192^3, 93% at 4097^3
// (tuned stream-K, 128x64 tiles), 89-90% on 8192x128x8192, 78% on
// 128x128x65536, 95% on batch 100 x 1000^3.
// Tried on the H100 against the 256x128x16 tile of 512 threads (47.3 TFLOP/s
// at 4096^3, 92% of cuBLAS; 48.0 since its FMAs run columns outer), all
// slower: 16 x 8 outputs per thread in 256-thread blocks, cuBLAS's own tile
// and warp layout there (46.8), a cp.async pipeline of three stages (43.5;
// 40.7 with B kept k-contiguous per column, untransposed, and one barrier
// per K tile, 38.8 with two or four stages), shared memory double-buffered
// at BK 16 (45.1 with dynamic shared memory; 45.1 again with static memory
// and unpadded B rows to fit 48 KB), one buffer at BK 32 (43.7), the split-K
// reduction fused into the main kernel (the
// last slice of a tile to finish adds the slices: 4% slower on
// 8192x128x8192, 25% at 1024^3, 49% at 512^3), and stream-K with this tile
// (rung 23: level at 8192^3, 1% slower at 4096^3, 6% at 2048^3, where its
// 128 KB partial tiles cost more than the last wave they fill). Nsight
// Compute puts the gap in issue: cuBLAS issues on 91% of cycles with 8 warps
// per SM, this tile on 82% with 16, its warps stalled at the two barriers per
// K tile and on dispatch.
#include "21_splitk.cu"
