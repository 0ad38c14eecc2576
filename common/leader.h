/* Leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics: a candidate takes
 * the lease when it is free or its holder has not renewed it for leaseDurationSeconds (measured on
 * the candidate's own clock from when it last saw the record change, so clock skew between
 * replicas does not matter); the leader renews every retry period and gives up leadership when it
 * could not renew within the renew deadline. Only one replica of the operator or autoscaler acts
 * at a time. Runs its own thread; the callbacks run on it. */
#ifndef CINFER_COMMON_LEADER_H
#define CINFER_COMMON_LEADER_H

#include "common/k8s/client.h"

#include <stdbool.h>

struct leader;

struct leader_opts {
    const char *ns;        /* Lease namespace (borrowed during leader_start) */
    const char *name;      /* Lease name, e.g. "cinfer-operator" */
    const char *identity;  /* this replica; NULL = "<hostname>_<pid>_<random>" */
    int lease_duration_ms; /* 0 = 15000 */
    int renew_deadline_ms; /* 0 = 10000 */
    int retry_period_ms;   /* 0 = 2000 */
    int (*new_client)(void *ctx, struct k8s_client **out);
    void *client_ctx;
    void (*on_started)(void *ctx); /* became leader */
    void (*on_stopped)(void *ctx); /* lost the lease (or released it on stop) after leading */
    void *cb_ctx;
};

/* Starts campaigning. *out is new; leader_free stops (releasing a held lease) and frees. */
int leader_start(const struct leader_opts *opts, struct leader **out);
/* Stops campaigning; a held lease is released (holder cleared) so a successor need not wait. */
void leader_stop(struct leader *l);
void leader_free(struct leader *l); /* NULL-safe */
/* True while this replica holds the lease; any thread. */
bool leader_is_leader(struct leader *l);
/* Identity used in the Lease (borrowed). */
const char *leader_identity(struct leader *l);

/* Pure decision, exposed for tests: may `me` take or renew a lease whose holder is `holder`, last
 * observed to change at `observed_ms` (monotonic), with `duration_ms`, at `now_ms`? */
bool leader_can_acquire(const char *holder, const char *me, long long observed_ms,
                        long long duration_ms, long long now_ms);

#endif
