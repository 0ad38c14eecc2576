/* How much memory this process may use: the machine's physical memory, or the memory limit of the
 * control group it runs in (a Kubernetes container's `resources.limits.memory`) when that is lower.
 * Sizing anything "as a fraction of RAM" by the node's RAM alone gets a pod OOM-killed. */
#ifndef CINFER_COMMON_SYSMEM_H
#define CINFER_COMMON_SYSMEM_H

#include <stdint.h>

/* Bytes of physical memory, capped by the cgroup limit (v2 memory.max of this process's cgroup and
 * its ancestors, or v1 memory.limit_in_bytes); 0 when not even the RAM size is known. Reads
 * /proc/self/cgroup and /sys/fs/cgroup. Any thread. */
uint64_t sysmem_limit_bytes(void);

/* The cgroup part, for tests: the lowest memory limit in bytes found for the process whose
 * /proc/<pid>/cgroup text is at `proc_cgroup`, with the cgroup file system mounted at `root`
 * (v2 unified, or v1 with the controller under root/memory). UINT64_MAX when there is no limit, the
 * files are missing, or they cannot be parsed (a malformed value is ignored, never trusted). */
uint64_t sysmem_cgroup_limit(const char *proc_cgroup, const char *root);

#endif
