/* Huge-page mappings and the packed-weight arena (see cpu_memory.h for why). */
#include "engine/backend/cpu/cpu_memory.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

struct cpu_arena_chunk {
    char *base;
    size_t size, used;
    int live; /* allocations not yet released */
    struct cpu_arena_chunk *next;
};

static size_t cpu_memory_page_round(size_t bytes)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (bytes + page - 1) & ~(page - 1);
}

void *cpu_memory_map(size_t bytes)
{
    if (bytes == 0 || bytes > SIZE_MAX - 2 * CPU_HUGE_PAGE) return NULL;
    size_t used = cpu_memory_page_round(bytes), len = used + CPU_HUGE_PAGE;
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    char *p = (char *)(((uintptr_t)m + CPU_HUGE_PAGE - 1) & ~(uintptr_t)(CPU_HUGE_PAGE - 1));
    /* keep [p, p + used): give back the unaligned head and what is left after it */
    size_t head = (size_t)(p - m);
    if (head) munmap(m, head);
    if (len - head > used) munmap(p + used, len - head - used);
#ifdef MADV_HUGEPAGE
    size_t huge = bytes & ~(CPU_HUGE_PAGE - 1);
    if (huge) (void)madvise(p, huge, MADV_HUGEPAGE);
#endif
    return p;
}

void cpu_memory_unmap(void *p, size_t bytes)
{
    if (p) munmap(p, cpu_memory_page_round(bytes));
}

/* One read and write of the same byte: faults the page in (writable) without changing it. */
static void cpu_memory_touch(uintptr_t a)
{
    volatile char *c = (volatile char *)a;
    *c = *c;
}

void cpu_memory_commit(void *p, size_t bytes)
{
    if (!p || bytes == 0) return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), lo = (uintptr_t)p, hi = lo + bytes;
    uintptr_t lo_in = (lo + page - 1) & ~(page - 1), hi_in = hi & ~(page - 1);
#ifdef MADV_POPULATE_WRITE
    /* whole pages in one call (Linux 5.14+); the partial pages at either end are touched */
    if (hi_in > lo_in && madvise((void *)lo_in, hi_in - lo_in, MADV_POPULATE_WRITE) == 0) {
        if (lo < lo_in) cpu_memory_touch(lo);
        if (hi_in < hi && hi_in >= lo_in) cpu_memory_touch(hi_in);
        return;
    }
#endif
    for (uintptr_t a = lo; a < hi; a = (a & ~(page - 1)) + page) cpu_memory_touch(a);
}

void *cpu_arena_alloc(struct cpu_arena *a, size_t bytes)
{
    size_t need = (bytes + 63) & ~(size_t)63;
    if (need < bytes || need > SIZE_MAX - CPU_ARENA_CHUNK) return NULL;
    struct cpu_arena_chunk *c = a->chunks;
    if (!c || c->size - c->used < need) {
        c = calloc(1, sizeof(*c));
        if (!c) return NULL;
        /* whole huge pages, so that every byte of the chunk is on one */
        size_t size = need > CPU_ARENA_CHUNK ? need : CPU_ARENA_CHUNK;
        c->size = (size + CPU_HUGE_PAGE - 1) & ~(CPU_HUGE_PAGE - 1);
        c->base = cpu_memory_map(c->size);
        if (!c->base) {
            free(c);
            return NULL;
        }
        c->next = a->chunks;
        a->chunks = c;
    }
    void *p = c->base + c->used;
    c->used += need;
    c->live++;
    return p;
}

void cpu_arena_release(struct cpu_arena *a, void *p)
{
    if (!p) return;
    for (struct cpu_arena_chunk **pc = &a->chunks; *pc; pc = &(*pc)->next) {
        struct cpu_arena_chunk *c = *pc;
        if ((char *)p < c->base || (char *)p >= c->base + c->size) continue;
        if (--c->live == 0) {
            *pc = c->next;
            cpu_memory_unmap(c->base, c->size);
            free(c);
        }
        return;
    }
}

int cpu_arena_chunk_count(const struct cpu_arena *a)
{
    int n = 0;
    for (const struct cpu_arena_chunk *c = a->chunks; c; c = c->next) n++;
    return n;
}

void cpu_arena_fini(struct cpu_arena *a)
{
    while (a->chunks) {
        struct cpu_arena_chunk *c = a->chunks;
        a->chunks = c->next;
        cpu_memory_unmap(c->base, c->size);
        free(c);
    }
}
