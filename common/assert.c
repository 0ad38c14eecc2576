/* The slow path of ASSERT(). */
#include "common/assert.h"

#include <stdio.h>
#include <stdlib.h>

void assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "%s:%d: assertion failed: %s\n", file, line, expr);
    fflush(stderr);
    abort();
}
