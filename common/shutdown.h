/* Process-wide shutdown request (the one global STYLE.md allows besides log settings).
 * SIGTERM/SIGINT set the flag and make shutdown_fd() readable so poll loops wake at once. */
#ifndef CINFER_COMMON_SHUTDOWN_H
#define CINFER_COMMON_SHUTDOWN_H

#include <stdbool.h>

/* Installs SIGTERM/SIGINT handlers and ignores SIGPIPE. Call once from main before threads start.
 * Returns 0 or ERR_IO. */
int shutdown_install(void);
/* True once a signal arrived or shutdown_request() was called; any thread, async-signal-safe. */
bool shutdown_requested(void);
/* Requests shutdown from code (tests, fatal errors); any thread. */
void shutdown_request(void);
/* A file descriptor that becomes readable on shutdown (for poll); -1 before shutdown_install. */
int shutdown_fd(void);
/* Sleeps up to `ms` milliseconds or until shutdown is requested; returns shutdown_requested(). */
bool shutdown_wait(int ms);

#endif
