// Not a rung: the timer's spin kernel. It keeps the stream busy for a bounded
// time while the host enqueues a sample (start event, the launches, stop event),
// so that the events bracket the sample's kernels and none of the host's
// dispatch. It reads the global nanosecond timer, so its length does not depend
// on the SM clock, and it always ends: a profiler that serialises launches
// (Nsight Compute) waits for it instead of hanging.
extern "C" __global__ void mm_timing_spin(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
