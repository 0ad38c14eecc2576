/* CLOCK_MONOTONIC as a double; see clock.h. */
#include "common/clock.h"

#include <time.h>

double clock_mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
