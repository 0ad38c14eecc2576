/* Host memory for the packed weights, which decode streams in full every step: 2 MiB pages where
 * the kernel grants them (transparent huge pages, "madvise" mode included).
 *
 * Why: on 4 KiB pages every 4 KiB of weights is a TLB miss and the hardware prefetchers stop at each
 * page boundary. Small matrices (a 768x768 Q8_0 weight packs to 0.6 MiB) never fill a huge page of
 * their own, so the packed weights are carved out of shared chunks (the weight arena): on the 110M
 * Q8_0 model that made batch-1 decode 29% and 16-way decode 14% faster (engine/BENCHMARKS.md).
 *
 * The KV pool stays on 4 KiB pages (calloc) but is committed when it is allocated
 * (cpu_memory_commit), as llama.cpp clears its KV buffer at start: a pod that cannot hold its KV
 * cache fails at start-up instead of under load, and serving never pays a page fault (on a fresh
 * pool, 16-way decode spent 4% of its time faulting in new blocks). Huge pages did not pay off
 * there: attention was no faster on them, and faulting in 2 MiB pages took 10.6 s per 4.5 GiB on
 * the development VM against 3.9 s for 4 KiB ones. */
#ifndef CINFER_ENGINE_BACKEND_CPU_CPU_MEMORY_H
#define CINFER_ENGINE_BACKEND_CPU_CPU_MEMORY_H

#include <stddef.h>

#define CPU_HUGE_PAGE ((size_t)2 << 20)

/* Returns new zeroed anonymous memory of `bytes`, 2 MiB aligned, its whole 2 MiB pages advised to be
 * huge (the tail stays on small pages); NULL when out of address space. Pages are faulted in on
 * first touch. Free with cpu_memory_unmap(p, bytes). Any thread. */
void *cpu_memory_map(size_t bytes);
void cpu_memory_unmap(void *p, size_t bytes);

/* Faults in every page of [p, p + bytes) now, contents unchanged. Any thread. */
void cpu_memory_commit(void *p, size_t bytes);

/* Packed weights: chunks of at least CPU_ARENA_CHUNK bytes, handed out in order, 64-byte aligned, so
 * consecutive weights (a model loads layer by layer) are adjacent in memory and share huge pages. A
 * chunk is unmapped when the last weight carved from it is released. Untouched pages of the last
 * chunk cost address space only. Single-threaded: the backend's caller thread. */
#define CPU_ARENA_CHUNK ((size_t)64 << 20)

struct cpu_arena_chunk;
struct cpu_arena {
    struct cpu_arena_chunk *chunks; /* newest first; allocations come from the newest */
};

/* Returns `bytes` of zeroed memory in the arena, or NULL when out of memory. */
void *cpu_arena_alloc(struct cpu_arena *a, size_t bytes);
/* Gives back an allocation of cpu_arena_alloc (NULL: no-op); its chunk goes once empty. */
void cpu_arena_release(struct cpu_arena *a, void *p);
/* Chunks now mapped. */
int cpu_arena_chunk_count(const struct cpu_arena *a);
/* Unmaps every chunk, whatever is still allocated from them. */
void cpu_arena_fini(struct cpu_arena *a);

#endif
