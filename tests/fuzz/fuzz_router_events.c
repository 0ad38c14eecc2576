/* Fuzz target for the router's KV event stream reading (router/router_events.c): the bytes are fed
 * to the line reader in two pieces and every line is parsed; nothing may crash, a parsed line must
 * have a known type and at most the allowed hashes. */
#include "router/router_events.h"

#include "common/err.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t hashes[16];

static int on_line(void *ctx, const char *line, size_t len)
{
    (void)ctx;
    struct router_event ev;
    char err[160];
    int rc = router_events_parse(line, len, &ev, hashes, 16, err, sizeof(err));
    if (rc == 0 &&
        (ev.type < ROUTER_EVENT_HELLO || ev.type > ROUTER_EVENT_LOAD || ev.n_hashes > 16)) {
        fprintf(stderr, "fuzz_router_events: bad event accepted\n");
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct router_lines l;
    router_lines_init(&l, 4096);
    size_t half = size / 2;
    if (router_lines_feed(&l, (const char *)data, half, on_line, NULL) == 0)
        (void)router_lines_feed(&l, (const char *)data + half, size - half, on_line, NULL);
    router_lines_fini(&l);
    return 0;
}
