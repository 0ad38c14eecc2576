/* ASSERT: always-on checks for programmer errors (never for input from outside; validate that).
 * A failed assertion logs the expression and location and aborts, so the core dump shows the bug. */
#ifndef CINFER_COMMON_ASSERT_H
#define CINFER_COMMON_ASSERT_H

#define ASSERT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) assert_fail(#cond, __FILE__, __LINE__);                                       \
    } while (0)

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Prints "file:line: assertion failed: expr" to stderr and aborts; never returns. */
_Noreturn void assert_fail(const char *expr, const char *file, int line);

#endif
