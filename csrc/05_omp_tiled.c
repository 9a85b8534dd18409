/* Rung 5, omp_tiled: cache blocking plus OpenMP (seed 002).
 * Over seq_tiled: the tiles of C are shared among OpenMP threads. A tile is
 * written by one thread only, so no synchronisation is needed, and each core
 * keeps its own block of B in its own L2: cache reuse and core count multiply. */
#include "ladder.h"

void mm_omp_tiled(MM_ARGS) {
    const long tiles_i = (m + LADDER_TI - 1) / LADDER_TI, tiles_j = (n + LADDER_TJ - 1) / LADDER_TJ;
    for (long p = 0; p < batch; ++p) {
#pragma omp parallel for schedule(dynamic, 1) collapse(2)
        for (long ti = 0; ti < tiles_i; ++ti)
            for (long tj = 0; tj < tiles_j; ++tj)
                ladder_tile(m, n, k, alpha, MM_A(p), MM_B(p), beta, MM_C(p), ti * LADDER_TI,
                            tj * LADDER_TJ);
    }
}
