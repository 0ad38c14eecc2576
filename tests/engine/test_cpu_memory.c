/* Unit tests of the CPU backend's host memory: huge-page mappings (aligned, zeroed), committing a
 * range (every page resident, contents kept) and the packed-weight arena (aligned, adjacent, chunks released with their last weight,
 * oversized requests, overflow). */
#include "engine/backend/cpu/cpu_memory.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

START_TEST(test_cpu_memory_map_gives_zeroed_aligned_pages)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t bytes = 2 * CPU_HUGE_PAGE + 3 * page + 5; /* huge pages and a small-page tail */
    char *p = cpu_memory_map(bytes);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq((uintptr_t)p % CPU_HUGE_PAGE, 0);
    for (size_t i = 0; i < bytes; i++)
        if (p[i]) ck_abort_msg("byte %zu is not zero", i);
    memset(p, 0xab, bytes); /* all of it writable */
    cpu_memory_unmap(p, bytes);
    cpu_memory_unmap(NULL, bytes);
}
END_TEST

/* Resident pages of [p, p + bytes) (p page-aligned) by mincore(2). */
static size_t resident_pages(void *p, size_t bytes)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), n = (bytes + page - 1) / page, r = 0;
    unsigned char *vec = malloc(n);
    ck_assert_ptr_nonnull(vec);
    ck_assert_int_eq(mincore(p, bytes, vec), 0);
    for (size_t i = 0; i < n; i++) r += vec[i] & 1;
    free(vec);
    return r;
}

START_TEST(test_cpu_memory_commit_faults_in_without_changing)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), n_pages = 64;
    /* a mapping of 4 KiB pages, none touched yet; the range committed starts and ends mid-page */
    char *m =
        mmap(NULL, n_pages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(m, MAP_FAILED);
    (void)madvise(m, n_pages * page, MADV_NOHUGEPAGE);
    m[3 * page + 7] = 42; /* one page already there, with data */
    ck_assert_uint_le(resident_pages(m, n_pages * page), 1);
    char *lo = m + page + 100, *hi = m + (n_pages - 1) * page - 5;
    cpu_memory_commit(lo, (size_t)(hi - lo));
    /* pages 1 .. n_pages - 2 hold the range: all resident now, page 0 and the last untouched */
    ck_assert_uint_eq(resident_pages(m + page, (n_pages - 2) * page), n_pages - 2);
    ck_assert_uint_eq(resident_pages(m, page), 0);
    ck_assert_uint_eq(resident_pages(m + (n_pages - 1) * page, page), 0);
    for (size_t i = page; i < (n_pages - 1) * page; i++)
        if (m[i] != (i == 3 * page + 7 ? 42 : 0)) ck_abort_msg("byte %zu changed", i);
    cpu_memory_commit(NULL, 10);
    cpu_memory_commit(lo, 0);
    munmap(m, n_pages * page);
}
END_TEST

START_TEST(test_cpu_memory_map_rejects_impossible_sizes)
{
    ck_assert_ptr_null(cpu_memory_map(0));
    ck_assert_ptr_null(cpu_memory_map(SIZE_MAX));
    ck_assert_ptr_null(cpu_memory_map(SIZE_MAX - CPU_HUGE_PAGE));
}
END_TEST

START_TEST(test_cpu_arena_packs_weights_adjacently)
{
    struct cpu_arena a = {0};
    char *p1 = cpu_arena_alloc(&a, 100), *p2 = cpu_arena_alloc(&a, 64),
         *p3 = cpu_arena_alloc(&a, 1);
    ck_assert_ptr_nonnull(p1);
    ck_assert_uint_eq((uintptr_t)p1 % CPU_HUGE_PAGE, 0); /* a chunk starts on a huge page */
    ck_assert_ptr_eq(p2, p1 + 128);                      /* 64-byte aligned, in load order */
    ck_assert_ptr_eq(p3, p2 + 64);
    for (int i = 0; i < 100; i++) ck_assert_int_eq(p1[i], 0);
    memset(p1, 1, 100);
    memset(p2, 2, 64);
    ck_assert_int_eq(p3[0], 0); /* neighbours do not overlap */
    ck_assert_int_eq(cpu_arena_chunk_count(&a), 1);
    cpu_arena_fini(&a);
    ck_assert_int_eq(cpu_arena_chunk_count(&a), 0);
}
END_TEST

START_TEST(test_cpu_arena_releases_a_chunk_with_its_last_weight)
{
    struct cpu_arena a = {0};
    char *small = cpu_arena_alloc(&a, 4096);
    char *big = cpu_arena_alloc(&a, CPU_ARENA_CHUNK + 1); /* does not fit: a chunk of its own */
    ck_assert_ptr_nonnull(small);
    ck_assert_ptr_nonnull(big);
    ck_assert_uint_eq((uintptr_t)big % CPU_HUGE_PAGE, 0);
    big[CPU_ARENA_CHUNK] = 7;              /* its last byte is there */
    char *after = cpu_arena_alloc(&a, 64); /* from the newest chunk, right after `big` */
    ck_assert_ptr_eq(after, big + CPU_ARENA_CHUNK + 64);

    ck_assert_int_eq(cpu_arena_chunk_count(&a), 2);
    cpu_arena_release(&a, big);
    ck_assert_int_eq(cpu_arena_chunk_count(&a), 2); /* `after` still lives there */
    cpu_arena_release(&a, after);
    ck_assert_int_eq(cpu_arena_chunk_count(&a), 1); /* the first chunk, holding `small` */
    cpu_arena_release(&a, NULL);
    cpu_arena_release(&a, small);
    ck_assert_int_eq(cpu_arena_chunk_count(&a), 0);

    /* after everything went, the arena starts over */
    char *again = cpu_arena_alloc(&a, 10);
    ck_assert_ptr_nonnull(again);
    ck_assert_int_eq(again[0], 0);
    cpu_arena_fini(&a);
    cpu_arena_fini(&a); /* idempotent */
}
END_TEST

START_TEST(test_cpu_arena_rejects_overflowing_sizes)
{
    struct cpu_arena a = {0};
    ck_assert_ptr_null(cpu_arena_alloc(&a, SIZE_MAX));
    ck_assert_ptr_null(cpu_arena_alloc(&a, SIZE_MAX - CPU_ARENA_CHUNK));
    ck_assert_int_eq(cpu_arena_chunk_count(&a), 0); /* nothing half-made */
}
END_TEST

Suite *cpu_memory_suite(void);
Suite *cpu_memory_suite(void)
{
    Suite *s = suite_create("cpu_memory");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_cpu_memory_map_gives_zeroed_aligned_pages);
    tcase_add_test(tc, test_cpu_memory_map_rejects_impossible_sizes);
    tcase_add_test(tc, test_cpu_memory_commit_faults_in_without_changing);
    tcase_add_test(tc, test_cpu_arena_packs_weights_adjacently);
    tcase_add_test(tc, test_cpu_arena_releases_a_chunk_with_its_last_weight);
    tcase_add_test(tc, test_cpu_arena_rejects_overflowing_sizes);
    suite_add_tcase(s, tc);
    return s;
}
