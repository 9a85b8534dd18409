/* Runtime helpers shared by every rung: OpenMP thread control. */
#include <omp.h>

void mm_set_threads(int threads) { if (threads > 0) omp_set_num_threads(threads); }
int mm_max_threads(void) { return omp_get_max_threads(); }

/* The threads a parallel region gets now: fewer than mm_max_threads() where the runtime
   may give less (OMP_DYNAMIC, OMP_THREAD_LIMIT). */
int mm_team_threads(void) {
    int team = 1;
#pragma omp parallel
    {
#pragma omp single
        team = omp_get_num_threads();
    }
    return team;
}
