/* The router's reading of an engine's KV block event stream (GET /cinfer/kv-events, described in
 * engine/serve/serve_router.h): newline-delimited JSON, one object per line, split from the
 * transfer's bytes by a bounded line reader and parsed one line at a time. Pure; any thread (a
 * reader belongs to one stream). */
#ifndef CINFER_ROUTER_EVENTS_H
#define CINFER_ROUTER_EVENTS_H

#include "common/buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ROUTER_EVENTS_MAX_HASHES 4096       /* hashes on one line (engines send 256) */
#define ROUTER_EVENTS_MAX_LINE   (1u << 20) /* bytes of one line */

/* Where an engine holds a block: its KV pool, or an offload tier below it (a request whose prefix
 * is there loads it instead of computing it); a tier this router does not know is OTHER. */
enum router_tier { ROUTER_TIER_DEVICE = 0, ROUTER_TIER_HOST, ROUTER_TIER_DISK, ROUTER_TIER_OTHER };
/* "device", "host", "disk", "other"; static. */
const char *router_tier_name(enum router_tier t);

enum router_event_type {
    ROUTER_EVENT_HELLO = 1, /* block_size, hash, prefix_caching, model */
    ROUTER_EVENT_SNAPSHOT,  /* forget the replica's blocks; `blocks` stored hashes follow */
    ROUTER_EVENT_STORED,    /* hashes[0..n_hashes) entered the prefix cache */
    ROUTER_EVENT_EVICTED,   /* hashes[0..n_hashes) left it */
    ROUTER_EVENT_LOAD,      /* running, waiting, prefill_waiting */
};

struct router_event {
    enum router_event_type type;
    uint64_t seq;
    int block_size;
    bool prefix_caching;
    char hash[32];   /* hello: the engine's PREFIX_CACHE_HASH_NAME */
    char model[256]; /* hello: the served model name */
    uint64_t blocks;
    uint64_t kv_blocks; /* hello: the engine's KV pool in blocks; 0 when it does not say */
    uint64_t *hashes;   /* the caller's array (see router_events_parse) */
    size_t n_hashes;
    int running, waiting;
    long prefill_waiting;  /* load: prompt tokens not yet prefilled; -1 when the engine does not
                           * say (an engine older than the field) */
    enum router_tier tier; /* stored / evicted: "device", "host", "disk"; else OTHER */
};

/* Parses one line (borrowed, len bytes, without its newline) into *ev; hashes go to hashes[0..cap)
 * (caller's array, ev->hashes points to it). Returns 0, ERR_UNSUPPORTED for a well-formed line of
 * a type this router does not know (skip it: newer engines may add some), or ERR_PARSE with a
 * reason in err (malformed JSON, missing or mistyped fields, a hash that is not 16 hex digits, more
 * than cap hashes, negative counts). */
int router_events_parse(const char *line, size_t len, struct router_event *ev, uint64_t *hashes,
                        size_t cap, char *err, size_t errlen);

/* Splits a byte stream into lines of at most max_line bytes. */
struct router_lines {
    struct buf partial; /* the unfinished last line */
};
typedef int (*router_lines_fn)(void *ctx, const char *line, size_t len);

void router_lines_init(struct router_lines *l, size_t max_line);
void router_lines_fini(struct router_lines *l);
/* Feeds data[0..len) (borrowed) and calls fn for every complete line (without "\n"; a "\r"
 * before it is dropped; empty lines are skipped). Returns 0, the first non-zero value fn returned
 * (the rest of data is dropped), or ERR_TOO_BIG when a line exceeds the bound. */
int router_lines_feed(struct router_lines *l, const char *data, size_t len, router_lines_fn fn,
                      void *ctx);

#endif
