/* The monotonic clock in seconds, for measuring durations (latencies, timeouts, benchmark spans).
 * Not wall time: never for timestamps shown to people or sent to an API. */
#ifndef CINFER_COMMON_CLOCK_H
#define CINFER_COMMON_CLOCK_H

/* Seconds on CLOCK_MONOTONIC (arbitrary origin, never goes back). Any thread. */
double clock_mono_s(void);
/* CPU seconds the calling thread has used (CLOCK_THREAD_CPUTIME_ID): benchmarks on a shared
 * machine, where wall time includes other processes' turns. */
double clock_thread_cpu_s(void);

#endif
