/* Parsing the engine's KV block event lines (see router_events.h). */
#include "router/router_events.h"

#include "common/err.h"

#include <jansson.h>
#include <string.h>

static int ev_hex64(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (strlen(s) != 16) return ERR_PARSE;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return ERR_PARSE;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return 0;
}

/* A non-negative integer member; 0 when absent and !required. */
static int ev_uint(const json_t *o, const char *key, bool required, uint64_t *out)
{
    const json_t *v = json_object_get(o, key);
    if (!v && !required) {
        *out = 0;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0) return ERR_PARSE;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int ev_string_into(const json_t *o, const char *key, char *dst, size_t cap)
{
    const char *s = json_string_value(json_object_get(o, key));
    if (!s || strlen(s) >= cap) return ERR_PARSE;
    memcpy(dst, s, strlen(s) + 1);
    return 0;
}

int router_events_parse(const char *line, size_t len, struct router_event *ev, uint64_t *hashes,
                        size_t cap, char *err, size_t errlen)
{
    json_error_t je;
    json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
    int rc = ERR_PARSE;
    memset(ev, 0, sizeof(*ev));
    ev->hashes = hashes;
    const char *what = "not a JSON object";
    if (!json_is_object(o)) goto out;
    const char *type = json_string_value(json_object_get(o, "type"));
    what = "missing or bad \"seq\"";
    if (ev_uint(o, "seq", type && strcmp(type, "hello") != 0, &ev->seq)) goto out;
    what = "missing \"type\"";
    if (!type) goto out;
    if (strcmp(type, "hello") == 0) {
        uint64_t bs;
        ev->type = ROUTER_EVENT_HELLO;
        what = "hello: bad block_size, hash, model or prefix_caching";
        if (ev_uint(o, "block_size", true, &bs) || bs < 1 || bs > 65536 ||
            ev_string_into(o, "hash", ev->hash, sizeof(ev->hash)) ||
            ev_string_into(o, "model", ev->model, sizeof(ev->model)) ||
            !json_is_boolean(json_object_get(o, "prefix_caching")))
            goto out;
        ev->block_size = (int)bs;
        ev->prefix_caching = json_is_true(json_object_get(o, "prefix_caching"));
        what = "hello: bad kv_blocks";
        if (ev_uint(o, "kv_blocks", false, &ev->kv_blocks) || ev->kv_blocks > (1u << 30)) goto out;
    } else if (strcmp(type, "snapshot") == 0) {
        ev->type = ROUTER_EVENT_SNAPSHOT;
        what = "snapshot: bad blocks";
        if (ev_uint(o, "blocks", true, &ev->blocks)) goto out;
    } else if (strcmp(type, "stored") == 0 || strcmp(type, "evicted") == 0) {
        ev->type = type[0] == 's' ? ROUTER_EVENT_STORED : ROUTER_EVENT_EVICTED;
        const json_t *a = json_object_get(o, "hashes");
        const char *tier = json_string_value(json_object_get(o, "tier"));
        what = "stored/evicted: bad tier";
        if (!tier) goto out;
        ev->tier = strcmp(tier, "device") == 0 ? ROUTER_TIER_DEVICE
                   : strcmp(tier, "host") == 0 ? ROUTER_TIER_HOST
                   : strcmp(tier, "disk") == 0 ? ROUTER_TIER_DISK
                                               : ROUTER_TIER_OTHER;
        what = "stored/evicted: \"hashes\" is not an array of at most the allowed size";
        if (!json_is_array(a) || json_array_size(a) > cap) goto out;
        what = "stored/evicted: a hash is not 16 lowercase hex digits";
        size_t i;
        json_t *h;
        json_array_foreach(a, i, h)
        {
            const char *s = json_string_value(h);
            if (!s || ev_hex64(s, &hashes[i])) goto out;
        }
        ev->n_hashes = json_array_size(a);
    } else if (strcmp(type, "load") == 0) {
        uint64_t r, w, t;
        ev->type = ROUTER_EVENT_LOAD;
        what = "load: bad running, waiting or prefill_waiting";
        if (ev_uint(o, "running", true, &r) || ev_uint(o, "waiting", true, &w) || r > 1u << 30 ||
            w > 1u << 30 || ev_uint(o, "prefill_waiting", false, &t) || t > (uint64_t)1 << 40)
            goto out;
        ev->running = (int)r;
        ev->waiting = (int)w;
        ev->prefill_waiting = json_object_get(o, "prefill_waiting") ? (long)t : -1;
    } else {
        rc = ERR_UNSUPPORTED;
        what = "unknown type";
        goto out;
    }
    rc = 0;
out:
    if (rc == ERR_PARSE && !o)
        err_fmt(err, errlen, rc, "line %d column %d: %s", je.line, je.column, je.text);
    else if (rc)
        err_fmt(err, errlen, rc, "%s", what);
    json_decref(o);
    return rc;
}

const char *router_tier_name(enum router_tier t)
{
    switch (t) {
    case ROUTER_TIER_DEVICE: return "device";
    case ROUTER_TIER_HOST: return "host";
    case ROUTER_TIER_DISK: return "disk";
    default: return "other";
    }
}

void router_lines_init(struct router_lines *l, size_t max_line)
{
    buf_init(&l->partial, max_line);
}

void router_lines_fini(struct router_lines *l)
{
    buf_fini(&l->partial);
}

static int lines_emit(const char *p, size_t n, router_lines_fn fn, void *ctx)
{
    if (n && p[n - 1] == '\r') n--;
    return n ? fn(ctx, p, n) : 0;
}

int router_lines_feed(struct router_lines *l, const char *data, size_t len, router_lines_fn fn,
                      void *ctx)
{
    int rc;
    while (len > 0) {
        const char *nl = memchr(data, '\n', len);
        size_t take = nl ? (size_t)(nl - data) : len;
        if (!nl) return buf_append(&l->partial, data, take) == 0 ? 0 : ERR_TOO_BIG;
        if (l->partial.len) {
            if (buf_append(&l->partial, data, take) != 0) return ERR_TOO_BIG;
            rc = lines_emit(l->partial.data, l->partial.len, fn, ctx);
            buf_reset(&l->partial);
        } else {
            if (take > l->partial.max) return ERR_TOO_BIG;
            rc = lines_emit(data, take, fn, ctx);
        }
        if (rc) return rc;
        data += take + 1;
        len -= take + 1;
    }
    return 0;
}
