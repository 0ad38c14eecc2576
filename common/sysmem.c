/* Physical memory and the cgroup memory limit (see sysmem.h). */
#include "common/sysmem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SYSMEM_CGROUP_FILE_MAX 65536 /* /proc/self/cgroup is a few lines */
#define SYSMEM_PATH_MAX        4096

/* Reads a whole small file into a new NUL-terminated buffer (free it), or NULL. */
static char *sysmem_read(const char *path, size_t max)
{
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char *buf = malloc(max + 1);
    size_t n = buf ? fread(buf, 1, max, f) : 0;
    fclose(f);
    if (!buf) return NULL;
    buf[n] = '\0';
    return buf;
}

/* A limit file's value: decimal bytes, then optional whitespace; "max" and anything malformed are no
 * limit. */
static uint64_t sysmem_limit_value(const char *path)
{
    char *text = sysmem_read(path, 64);
    if (!text) return UINT64_MAX;
    uint64_t v = 0;
    const char *p = text;
    int digits = 0;
    for (; *p >= '0' && *p <= '9'; p++, digits++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) {
            digits = 0; /* overflow: not a number we trust */
            break;
        }
        v = v * 10 + d;
    }
    while (*p == '\n' || *p == ' ' || *p == '\t') p++;
    int ok = digits > 0 && *p == '\0' && v > 0; /* no process runs under a limit of 0 */
    free(text);
    return ok ? v : UINT64_MAX;
}

/* The lowest `file` limit of cgroup `cg` (a path starting with '/') and its ancestors under `dir`.
 * Ancestors' limits bound their descendants; `dir` alone also covers a container that sees its own
 * cgroup at the mount point while /proc/self/cgroup names the host's path. */
static uint64_t sysmem_tree_limit(const char *dir, const char *cg, size_t cg_len, const char *file)
{
    uint64_t best = UINT64_MAX;
    char path[SYSMEM_PATH_MAX];
    for (size_t len = cg_len;;) {
        int n = snprintf(path, sizeof(path), "%s%.*s/%s", dir, (int)len, cg, file);
        if (n > 0 && (size_t)n < sizeof(path)) {
            uint64_t v = sysmem_limit_value(path);
            if (v < best) best = v;
        }
        if (len == 0) break;
        while (len > 0 && cg[len - 1] != '/') len--; /* up one level */
        if (len > 0) len--;                          /* drop the '/' itself */
    }
    return best;
}

/* Whether the comma-separated controller list [s, s + n) names "memory". */
static int sysmem_has_memory_controller(const char *s, size_t n)
{
    while (n > 0) {
        const char *comma = memchr(s, ',', n);
        size_t len = comma ? (size_t)(comma - s) : n;
        if (len == 6 && memcmp(s, "memory", 6) == 0) return 1;
        if (!comma) break;
        n -= len + 1;
        s = comma + 1;
    }
    return 0;
}

uint64_t sysmem_cgroup_limit(const char *proc_cgroup, const char *root)
{
    char *text = sysmem_read(proc_cgroup, SYSMEM_CGROUP_FILE_MAX);
    if (!text) return UINT64_MAX;
    uint64_t best = UINT64_MAX;
    char v1_dir[SYSMEM_PATH_MAX];
    int v1_ok = snprintf(v1_dir, sizeof(v1_dir), "%s/memory", root);
    v1_ok = v1_ok > 0 && (size_t)v1_ok < sizeof(v1_dir);
    /* lines: hierarchy-id:controllers:path */
    for (char *line = text; *line;) {
        char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char *c1 = memchr(line, ':', len);
        char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - line)) : NULL;
        if (c2 && c2 + 1 < line + len && c2[1] == '/') {
            const char *cg = c2 + 1;
            size_t cg_len = (size_t)(line + len - cg);
            while (cg_len > 0 && cg[cg_len - 1] == '/') cg_len--; /* "/" is the root itself */
            uint64_t v = UINT64_MAX;
            if (c1 - line == 1 && line[0] == '0' && c2 == c1 + 1) /* v2: "0::/path" */
                v = sysmem_tree_limit(root, cg, cg_len, "memory.max");
            else if (v1_ok && sysmem_has_memory_controller(c1 + 1, (size_t)(c2 - c1 - 1)))
                v = sysmem_tree_limit(v1_dir, cg, cg_len, "memory.limit_in_bytes");
            if (v < best) best = v;
        }
        if (!end) break;
        line = end + 1;
    }
    free(text);
    return best;
}

uint64_t sysmem_limit_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return 0;
    uint64_t ram = (uint64_t)pages * (uint64_t)page;
    uint64_t cg = sysmem_cgroup_limit("/proc/self/cgroup", "/sys/fs/cgroup");
    return cg < ram ? cg : ram;
}
