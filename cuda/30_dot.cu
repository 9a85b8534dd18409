// Rung 30 (beyond the seeds), column-major: products with a handful of outputs and
// a long K (1x2x2273, 22x1x4378: each output a dot product of thousands of terms).
// Adds over rung 24 (lanes along the long side of C, warps along K): with M and N
// both tiny, rung 24 leaves 31 of 32 lanes idle and walks K in a chain of dependent
// loads, one round trip of memory after another, so that a 1x2x2273 product took
// 11 us (cuBLAS: 5). Here all 256 threads of a block walk K together, 256 apart and
// four steps unrolled (every thread's 32 loads in flight at once), each keeping a
// 4 x 4 tile of C in registers; the block adds its threads' sums by shuffles within
// each warp and then across the warps in shared memory, in a fixed order. When even
// that leaves too few loads in flight, K is split over blocks (blockIdx.y) and the
// last block of a tile to finish adds the slices, in order, in the same launch
// (cuda/slice_sum.cuh's last_slice: no second launch).
// Measured on the H100 (suite timer, L2 warm, cuBLAS in the same run; row-major
// shapes), us: 1x2x2273 3.7 (cuBLAS 4.7, rung 22 before it 7.2), 22x1x4378 5.0
// (5.1, 10.7), 1x9x30000 6.0 (6.6, 31.4), 1x1x65536 6.1 in 32 slices (6.0, 13.5),
// batch 60 x 1x5x9691 8.2 (14.8, 34.2), 16x16x9000 6.7 in 8 slices (12.3, 17.8).
// Edges: predicated scalar loads with zero fill; any M, N, K >= 1 and any batch
// (blockIdx.z); rung 22 offers it only where C has few 4 x 4 tiles.
#include "common.cuh"
#include "slice_sum.cuh"

#define DOT_THREADS 256
#define DT 4          // rows and columns of C per block
#define DOT_UNROLL 4  // K steps of a thread in flight

// C (or slice blockIdx.y of W) tile blockIdx.x = A rows x B columns over K slice
// [kchunk y, +kchunk); tiles run down M first.
extern "C" __global__ void __launch_bounds__(DOT_THREADS)
mm_30_dot(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
          float* C, float* W, int kchunk) {
    __shared__ float sums[DOT_THREADS / 32][DT * DT];
    const int tiles_m = (M + DT - 1) / DT;
    const int i0 = (blockIdx.x % tiles_m) * DT, j0 = (blockIdx.x / tiles_m) * DT;
    const size_t mat = blockIdx.z, mn = (size_t)M * N;
    const int splits = gridDim.y, slice = blockIdx.y;
    A += mat * (size_t)M * K;
    B += mat * (size_t)K * N;
    const int kb = min(K, slice * kchunk), ke = min(K, kb + kchunk);
    const int rows = min(DT, M - i0), cols = min(DT, N - j0);
    float acc[DT][DT] = {};
    for (int k = kb + threadIdx.x; k < ke; k += DOT_THREADS * DOT_UNROLL) {
        float a[DOT_UNROLL][DT], b[DOT_UNROLL][DT];
#pragma unroll
        for (int u = 0; u < DOT_UNROLL; ++u) {
            const int kk = k + u * DOT_THREADS;
            const bool in = kk < ke;
#pragma unroll
            for (int i = 0; i < DT; ++i)
                a[u][i] = in && i < rows ? A[(size_t)kk * M + i0 + i] : 0.0f;
#pragma unroll
            for (int j = 0; j < DT; ++j)
                b[u][j] = in && j < cols ? B[(size_t)(j0 + j) * K + kk] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < DOT_UNROLL; ++u)
#pragma unroll
            for (int i = 0; i < DT; ++i)
#pragma unroll
                for (int j = 0; j < DT; ++j) acc[i][j] += a[u][i] * b[u][j];
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < DT; ++i)
#pragma unroll
        for (int j = 0; j < DT; ++j) {
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
                acc[i][j] += __shfl_xor_sync(0xffffffffu, acc[i][j], o);
            if (lane == 0) sums[warp][i * DT + j] = acc[i][j];
        }
    __syncthreads();
    // One thread per output of the tile: the warps' sums in order.
    const int t = threadIdx.x, i = t / DT, j = t % DT;
    const bool mine = t < DT * DT && i < rows && j < cols;
    float s = 0.0f;
    if (t < DT * DT)
        for (int w = 0; w < DOT_THREADS / 32; ++w) s += sums[w][t];
    const size_t at = (size_t)(j0 + j) * M + i0 + i;
    if (splits == 1) {
        if (mine) mm_store(C + mat * mn + at, s, alpha, beta);
        return;
    }
    const float* slices = W + mat * splits * mn;
    if (mine) W[(mat * splits + slice) * mn + at] = s;
    int* counters = reinterpret_cast<int*>(W + (size_t)gridDim.z * splits * mn);
    if (!last_slice(counters + blockIdx.z * gridDim.x + blockIdx.x, splits)) return;
    if (!mine) return;
    s = __ldcg(slices + at);
    for (int u = 1; u < splits; ++u) s += __ldcg(slices + u * mn + at);
    mm_store(C + mat * mn + at, s, alpha, beta);
}
