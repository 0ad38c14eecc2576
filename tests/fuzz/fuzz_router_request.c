/* Fuzz target for the router's request scanner (router/router_request.c): arbitrary bytes must
 * never crash it, and whenever jansson (the engine's parser) reads the input as an object without
 * duplicate keys whose "model" is a string, the scanner must find exactly that string (or say it
 * does not fit). A disagreement aborts, so libFuzzer reports it. One exception: jansson stops at a
 * NUL byte outside a string as if the input ended there, where the scanner calls the body
 * unreadable (ERR_PARSE); the router then asks the engine's own parser (pick_model), so the
 * request still goes where the engine would take it. */
#include "router/router_request.h"

#include "common/err.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char model[64];
    int rc = router_request_model((const char *)data, size, model, sizeof(model));
    json_t *o = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
    bool nul_parse = rc == ERR_PARSE && memchr(data, '\0', size) != NULL;
    const json_t *m = json_object_get(o, "model");
    if (json_is_string(m)) {
        const char *want = json_string_value(m);
        size_t wl = json_string_length(m);
        bool fits = wl < sizeof(model);
        bool valid = wl > 0 && strlen(want) == wl;
        int expect = !fits ? ERR_TOO_BIG : valid ? 0 : ERR_INVAL;
        if (!nul_parse && (rc != expect || (rc == 0 && strcmp(model, want) != 0))) {
            fprintf(stderr, "fuzz_router_request: scanner %d vs jansson \"%s\"\n", rc, want);
            abort();
        }
    } else if (json_is_object(o) && (!m || json_is_null(m)) && rc != ERR_NOT_FOUND && !nul_parse) {
        fprintf(stderr, "fuzz_router_request: scanner %d, jansson: no model\n", rc);
        abort();
    }
    json_decref(o);
    return 0;
}
