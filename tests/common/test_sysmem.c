/* Unit tests of the memory limit: cgroup v2 and v1 layouts (leaf, ancestors, a container's own
 * cgroup at the mount point), "no limit" spellings, and malformed /proc/self/cgroup and limit files,
 * all on fake trees in a temporary directory. */
#include "common/sysmem.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmp[64];

static void make_dirs(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        mkdir(buf, 0755);
        *p = '/';
    }
    mkdir(buf, 0755);
}

/* Writes `text` to tmp/rel, creating directories. */
static void put(const char *rel, const char *text)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", tmp, rel);
    char *slash = strrchr(path, '/');
    *slash = '\0';
    make_dirs(path);
    *slash = '/';
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static uint64_t limit_of(const char *proc_text)
{
    put("proc_cgroup", proc_text);
    char proc[128], root[128];
    snprintf(proc, sizeof(proc), "%s/proc_cgroup", tmp);
    snprintf(root, sizeof(root), "%s/cg", tmp);
    return sysmem_cgroup_limit(proc, root);
}

static void setup(void)
{
    snprintf(tmp, sizeof(tmp), "/tmp/cinfer-sysmem-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_sysmem_v2_takes_the_lowest_limit_up_the_tree)
{
    ck_assert_uint_eq(limit_of("0::/kubepods/pod1/c1\n"), UINT64_MAX); /* no files: no limit */
    put("cg/kubepods/pod1/c1/memory.max", "max\n");
    ck_assert_uint_eq(limit_of("0::/kubepods/pod1/c1\n"), UINT64_MAX);
    put("cg/kubepods/pod1/memory.max", "536870912\n"); /* the pod's limit bounds the container */
    ck_assert_uint_eq(limit_of("0::/kubepods/pod1/c1\n"), 536870912u);
    put("cg/kubepods/pod1/c1/memory.max", "268435456\n");
    ck_assert_uint_eq(limit_of("0::/kubepods/pod1/c1\n"), 268435456u);
    put("cg/memory.max", "134217728"); /* no newline is fine too */
    ck_assert_uint_eq(limit_of("0::/kubepods/pod1/c1\n"), 134217728u);
}
END_TEST

START_TEST(test_sysmem_v2_container_sees_its_cgroup_at_the_mount_point)
{
    put("cg/memory.max", "1073741824\n");
    ck_assert_uint_eq(limit_of("0::/\n"), 1073741824u); /* cgroup namespace */
    /* no namespace: /proc names the host's path, which this mount does not have */
    ck_assert_uint_eq(limit_of("0::/kubepods/burstable/pod9/abc\n"), 1073741824u);
}
END_TEST

START_TEST(test_sysmem_v1_reads_the_memory_controller_only)
{
    put("cg/memory/docker/abc/memory.limit_in_bytes", "9223372036854771712\n"); /* v1 "unlimited" */
    put("cg/cpu/docker/abc/memory.limit_in_bytes", "1000\n"); /* another controller's tree */
    const char *proc = "12:cpu,cpuacct:/docker/abc\n11:blkio:/docker/abc\n"
                       "4:memory:/docker/abc\n1:name=systemd:/docker/abc\n";
    ck_assert_uint_eq(limit_of(proc), 9223372036854771712u);
    put("cg/memory/docker/memory.limit_in_bytes", "2147483648\n");
    ck_assert_uint_eq(limit_of(proc), 2147483648u);
    ck_assert_uint_eq(limit_of("4:cpu,memory,io:/docker/abc\n"), 2147483648u); /* co-mounted */
    ck_assert_uint_eq(limit_of("4:memoryx:/docker/abc\n"), UINT64_MAX);
}
END_TEST

START_TEST(test_sysmem_malformed_limit_files_mean_no_limit)
{
    const char *bad[] = {"",    "\n",    "12abc\n", "-5\n",    "99999999999999999999999\n",
                         "0\n", " 12\n", "1e9\n",   "max 5\n", "12\n13\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        put("cg/a/memory.max", bad[i]);
        ck_assert_msg(limit_of("0::/a\n") == UINT64_MAX, "value %zu (\"%s\") was trusted", i,
                      bad[i]);
    }
}
END_TEST

START_TEST(test_sysmem_malformed_proc_cgroup_is_ignored)
{
    put("cg/memory.max", "4096\n");
    put("cg/memory/memory.limit_in_bytes", "8192\n");
    const char *bad[] = {
        "",       "garbage",  ":::",   "0::", "0::relative/path\n", "0:x:/\n", "\x01\x02\xff:\xfe:",
        "memory", ":memory:", "1::/\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(limit_of(bad[i]) == UINT64_MAX, "input %zu gave a limit", i);
    /* a path longer than any buffer: no crash, and the limits that can be read still count */
    size_t n = 20000;
    char *longp = malloc(n + 8);
    ck_assert_ptr_nonnull(longp);
    memcpy(longp, "0::", 3);
    for (size_t i = 3; i < n; i++) longp[i] = i % 10 == 3 ? '/' : 'x';
    longp[n] = '\0';
    ck_assert_uint_eq(limit_of(longp), 4096u);
    free(longp);
    /* a missing /proc file */
    ck_assert_uint_eq(sysmem_cgroup_limit("/nonexistent/cgroup", tmp), UINT64_MAX);
}
END_TEST

START_TEST(test_sysmem_limit_is_at_most_ram)
{
    uint64_t ram = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t lim = sysmem_limit_bytes();
    ck_assert(lim > 0);
    ck_assert(lim <= ram);
}
END_TEST

Suite *sysmem_suite(void);
Suite *sysmem_suite(void)
{
    Suite *s = suite_create("sysmem");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_sysmem_v2_takes_the_lowest_limit_up_the_tree);
    tcase_add_test(tc, test_sysmem_v2_container_sees_its_cgroup_at_the_mount_point);
    tcase_add_test(tc, test_sysmem_v1_reads_the_memory_controller_only);
    tcase_add_test(tc, test_sysmem_malformed_limit_files_mean_no_limit);
    tcase_add_test(tc, test_sysmem_malformed_proc_cgroup_is_ignored);
    tcase_add_test(tc, test_sysmem_limit_is_at_most_ram);
    suite_add_tcase(s, tc);
    return s;
}
