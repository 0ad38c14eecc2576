/* Named failpoints for fault injection in tests: code consults failpoint_check("serve.step") where a
 * failure can be simulated, and the failpoint fires only when the environment variable
 * CINFER_FAILPOINTS arms it. Inert (one branch per check) when the variable is unset or empty.
 *
 *   CINFER_FAILPOINTS="serve.step=error"       every hit fails
 *   CINFER_FAILPOINTS="serve.step=error@5"     hits 5 and later fail (hits count from 1)
 *   CINFER_FAILPOINTS="a=error;b.c=error@2"    several, separated by ';'
 *
 * Names are 1..FAILPOINT_NAME_MAX-1 characters of [A-Za-z0-9._-]; "error" is the only action. A
 * malformed entry is logged once as a warning naming it and ignored; the others stay armed.
 * Not a production switch: an armed failpoint is logged at warn level when the variable is read. */
#ifndef CINFER_COMMON_FAILPOINT_H
#define CINFER_COMMON_FAILPOINT_H

#define FAILPOINT_ENV      "CINFER_FAILPOINTS"
#define FAILPOINT_MAX      16 /* failpoints armed at once; further entries are ignored */
#define FAILPOINT_NAME_MAX 64 /* bytes of a name including its terminator */

/* Counts one hit of failpoint `name` (borrowed) and returns 0, or ERR_IO when the failpoint is
 * armed and this hit fires. The first call reads CINFER_FAILPOINTS (once per process, pthread_once).
 * Any thread; hit counters are atomic. */
int failpoint_check(const char *name);

/* Hits counted so far for failpoint `name` (borrowed), or ERR_NOT_FOUND when no failpoint of that
 * name is armed. Any thread. */
long long failpoint_hits(const char *name);

/* Test-only entry point (production reads the environment variable alone): replaces the armed set
 * with `spec` (borrowed; NULL or "" disarms everything) and resets every counter, as if the
 * process had started with CINFER_FAILPOINTS=spec. Returns 0 when every entry was accepted, or
 * ERR_INVAL when some were ignored (each one logged; the valid ones are armed). Must not run
 * concurrently with failpoint_check or failpoint_hits: call it between test phases. */
int failpoint_configure(const char *spec);

#endif
