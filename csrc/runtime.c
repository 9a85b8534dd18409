/* Runtime helpers shared by every rung: OpenMP thread control. */
#include <omp.h>

void mm_set_threads(int threads) { if (threads > 0) omp_set_num_threads(threads); }
int mm_max_threads(void) { return omp_get_max_threads(); }
