/* Rung 3, seq_tiled: cache blocking (seed 002).
 * Over seq_ikj: C is computed tile by tile (TI x TJ) and k is walked in
 * TK-deep steps, so the TK x TJ block of B a tile needs is reused from cache
 * by all TI rows of the tile instead of being streamed from memory once per
 * row of C. seq_ikj reads all of B once per row of C; here once per TI rows. */
#include "ladder.h"

void mm_seq_tiled(MM_ARGS) {
    for (long p = 0; p < batch; ++p)
        for (long i0 = 0; i0 < m; i0 += LADDER_TI)
            for (long j0 = 0; j0 < n; j0 += LADDER_TJ)
                ladder_tile(m, n, k, alpha, MM_A(p), MM_B(p), beta, MM_C(p), i0, j0);
}
