/* Fuzz target for the API-key parser and bearer check (engine/serve/serve_auth.c). The first byte
 * picks the mode: 'K' parses the rest as a key list (serve_auth_add), anything else checks the rest
 * as an Authorization header against two fixed keys. Checks: a failed parse leaves the set empty;
 * a parsed set accepts "Bearer " + each key it reports by id only when that key is the token; a
 * header passes only when its token is exactly one of the keys. Any mismatch aborts. */
#include "engine/serve/serve_auth.h"

#include "common/err.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_serve_auth: check failed: %s (line %d)\n", #cond, __LINE__);     \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static const char *const fixed[] = {"k3y", "other-key"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    struct serve_auth *a;
    char err[512];
    if (serve_auth_new(&a) != 0) return 0;
    if (data[0] == 'K') {
        int rc = serve_auth_add(a, text, len, "fuzz", err, sizeof(err));
        if (rc) CHECK(serve_auth_count(a) == 0);
        CHECK(serve_auth_count(a) <= SERVE_AUTH_MAX_KEYS);
        for (size_t i = 0; i < serve_auth_count(a); i++) {
            CHECK(serve_auth_key_id(a, (int)i) && strlen(serve_auth_key_id(a, (int)i)) == 16);
            CHECK(strlen(serve_auth_key_digest(a, (int)i)) == 64);
        }
        /* the whole input as one token: accepted only if the list was exactly that one key */
        char *h = malloc(len + 8);
        if (h) {
            memcpy(h, "Bearer ", 7);
            memcpy(h + 7, text, len);
            int key = -1;
            if (serve_auth_check(a, h, len + 7, &key) == SERVE_AUTH_OK)
                CHECK(serve_auth_count(a) >= 1 && key >= 0 && (size_t)key < serve_auth_count(a));
            free(h);
        }
    } else {
        CHECK(serve_auth_add(a, "k3y\nother-key", 13, "fuzz", err, sizeof(err)) == 0);
        int key = -1;
        enum serve_auth_result r = serve_auth_check(a, text, len, &key);
        if (r == SERVE_AUTH_OK) {
            CHECK(key == 0 || key == 1);
            CHECK(len >= 7 && strncasecmp(text, "Bearer ", 7) == 0);
            size_t i = 7;
            while (i < len && text[i] == ' ') i++;
            CHECK(len - i == strlen(fixed[key]) && memcmp(text + i, fixed[key], len - i) == 0);
        }
        CHECK(serve_auth_check(a, NULL, 0, NULL) == SERVE_AUTH_MISSING);
    }
    serve_auth_free(a);
    return 0;
}
