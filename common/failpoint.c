/* Fault injection by name (common/failpoint.h): the CINFER_FAILPOINTS parser and the armed set.
 * The armed set is process-wide state, like the log settings STYLE.md allows: it mirrors one
 * environment variable of the process, read once, and every thread that consults a failpoint must
 * see the same set. It is written only before it is published (failpoint_n, release/acquire). */
#include "common/failpoint.h"

#include "common/assert.h"
#include "common/err.h"
#include "common/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define FAILPOINT_ENTRY_MAX   160 /* bytes of one "name=error@N" entry */
#define FAILPOINT_WARN_MAX    8  /* malformed entries logged one by one; further ones are counted */
#define FAILPOINT_EXCERPT_MAX 48 /* bytes of a malformed entry quoted in its warning */
#define FAILPOINT_NAME_CHARS  "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"

struct failpoint {
    char name[FAILPOINT_NAME_MAX];
    long long from; /* the first hit that fires (1-based) */
    atomic_llong hits;
};

static pthread_once_t failpoint_once = PTHREAD_ONCE_INIT;
static atomic_int failpoint_n; /* armed entries at the start of failpoint_set; 0 = inert */
static struct failpoint failpoint_set[FAILPOINT_MAX];

/* One parse of a spec into failpoint_set. */
struct failpoint_parse {
    int n;     /* entries accepted so far */
    int n_bad; /* entries ignored */
};

/* Logs (the first FAILPOINT_WARN_MAX of) the ignored entries, quoting the start of each. */
static void failpoint_reject(struct failpoint_parse *p, const char *entry, size_t len,
                             const char *why)
{
    if (p->n_bad++ >= FAILPOINT_WARN_MAX) return;
    char quoted[FAILPOINT_EXCERPT_MAX + 4];
    size_t n = len < FAILPOINT_EXCERPT_MAX ? len : FAILPOINT_EXCERPT_MAX;
    memcpy(quoted, entry, n);
    if (n < len)
        memcpy(quoted + n, "...", 4);
    else
        quoted[n] = '\0';
    log_warn("ignoring a malformed failpoint", LOG_S("env", FAILPOINT_ENV), LOG_S("entry", quoted),
             LOG_S("reason", why));
}

/* "@N": N >= 1 in decimal digits only (no sign, no spaces, no suffix). */
static bool failpoint_parse_from(const char *s, long long *out)
{
    if (!*s || strspn(s, "0123456789") != strlen(s)) return false;
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (errno == ERANGE || *end || v < 1) return false;
    *out = v;
    return true;
}

static struct failpoint *failpoint_find(const char *name, int n)
{
    ASSERT(name != NULL);
    for (int i = 0; i < n; i++)
        if (strcmp(failpoint_set[i].name, name) == 0) return &failpoint_set[i];
    return NULL;
}

/* Parses one entry (s, len: trimmed, not NUL-terminated) and arms it, or rejects it. */
static void failpoint_parse_entry(struct failpoint_parse *p, const char *s, size_t len)
{
    if (len == 0) {
        failpoint_reject(p, s, len, "empty entry (two ';' in a row, or one at an end)");
        return;
    }
    if (len >= FAILPOINT_ENTRY_MAX) {
        failpoint_reject(p, s, len, "entry too long");
        return;
    }
    char e[FAILPOINT_ENTRY_MAX];
    memcpy(e, s, len);
    e[len] = '\0';
    char *eq = strchr(e, '=');
    if (!eq) {
        failpoint_reject(p, s, len, "missing '=' (want name=error or name=error@N)");
        return;
    }
    size_t name_len = (size_t)(eq - e);
    *eq = '\0';
    char *action = eq + 1;
    char *at = strchr(action, '@');
    if (at) *at = '\0';
    long long from = 1;
    const char *why = NULL;
    if (name_len == 0)
        why = "empty name";
    else if (name_len >= FAILPOINT_NAME_MAX)
        why = "name too long";
    else if (strspn(e, FAILPOINT_NAME_CHARS) != name_len)
        why = "name has a character outside [A-Za-z0-9._-]";
    else if (strcmp(action, "error") != 0)
        why = "unknown action (the only action is 'error')";
    else if (at && !failpoint_parse_from(at + 1, &from))
        why = "bad @N (want the first failing hit, a whole number >= 1)";
    else if (failpoint_find(e, p->n))
        why = "duplicate name (the first entry stays)";
    else if (p->n == FAILPOINT_MAX)
        why = "too many failpoints";
    if (why) {
        failpoint_reject(p, s, len, why);
        return;
    }
    struct failpoint *f = &failpoint_set[p->n++];
    memcpy(f->name, e, name_len + 1);
    f->from = from;
    atomic_store_explicit(&f->hits, 0, memory_order_relaxed);
    log_warn("failpoint armed (fault injection)", LOG_S("failpoint", f->name),
             LOG_S("action", "error"), LOG_I("from_hit", f->from));
}

static bool failpoint_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* Replaces the armed set with `spec` (NULL: nothing armed). 0, or ERR_INVAL when some entry was
 * ignored. */
static int failpoint_load(const char *spec)
{
    struct failpoint_parse p = {0};
    atomic_store_explicit(&failpoint_n, 0, memory_order_release);
    bool blank = true;
    for (const char *c = spec; c && *c && blank; c++) blank = failpoint_blank(*c);
    for (const char *s = spec; !blank;) {
        const char *end = strchr(s, ';');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        const char *t = s;
        while (len && failpoint_blank(*t)) t++, len--;
        while (len && failpoint_blank(t[len - 1])) len--;
        failpoint_parse_entry(&p, t, len);
        if (!end) break;
        s = end + 1;
    }
    if (p.n_bad > FAILPOINT_WARN_MAX)
        log_warn("further malformed failpoints ignored", LOG_S("env", FAILPOINT_ENV),
                 LOG_I("count", p.n_bad - FAILPOINT_WARN_MAX));
    atomic_store_explicit(&failpoint_n, p.n, memory_order_release);
    return p.n_bad ? ERR_INVAL : 0;
}

static void failpoint_init_env(void)
{
    (void)failpoint_load(getenv(FAILPOINT_ENV));
}

int failpoint_check(const char *name)
{
    pthread_once(&failpoint_once, failpoint_init_env);
    int n = atomic_load_explicit(&failpoint_n, memory_order_acquire);
    if (n == 0) return 0; /* the common case: nothing armed */
    struct failpoint *f = failpoint_find(name, n);
    if (!f) return 0;
    long long hit = atomic_fetch_add_explicit(&f->hits, 1, memory_order_relaxed) + 1;
    return hit >= f->from ? ERR_IO : 0;
}

long long failpoint_hits(const char *name)
{
    pthread_once(&failpoint_once, failpoint_init_env);
    struct failpoint *f =
        failpoint_find(name, atomic_load_explicit(&failpoint_n, memory_order_acquire));
    return f ? atomic_load_explicit(&f->hits, memory_order_relaxed) : ERR_NOT_FOUND;
}

int failpoint_configure(const char *spec)
{
    /* Read the environment first, so that it cannot replace this set on a later first check. */
    pthread_once(&failpoint_once, failpoint_init_env);
    return failpoint_load(spec);
}
