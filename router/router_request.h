/* What the router reads of a request itself, before any engine code sees it: the top-level "model"
 * field of the JSON body (a single pass that skips every other value without building it), and the
 * X-Request-Id it passes on. Everything else in the body is parsed by the engine's own code
 * (engine/api/api_request.c), in the router for prefix hashing and in the engine for serving.
 * Pure; any thread. */
#ifndef CINFER_ROUTER_REQUEST_H
#define CINFER_ROUTER_REQUEST_H

#include <stdbool.h>
#include <stddef.h>

#define ROUTER_MODEL_MAX      256 /* bytes of a model name, as the engine bounds it */
#define ROUTER_REQUEST_ID_MAX 65  /* 64 characters and the NUL */

/* Finds the top-level "model" member of the JSON object body[0..len) (borrowed; need not be
 * NUL-terminated) and copies its string value, UTF-8, NUL-terminated, into out (outlen bytes).
 * Returns 0; ERR_NOT_FOUND when the object has no "model" or it is null; ERR_INVAL when it is not
 * a string, is empty, is not valid UTF-8 or contains a NUL; ERR_TOO_BIG when it does not fit;
 * ERR_PARSE when the body is not one JSON object (truncated, trailing bytes, a key twice, nesting
 * deeper than 2048, control characters or bad escapes in a string). Linear in len. */
int router_request_model(const char *body, size_t len, char *out, size_t outlen);

/* True when `id` (NUL-terminated) is 1..64 characters of [A-Za-z0-9._:-]: a client's X-Request-Id
 * the router passes on (anything else is replaced by a generated one, so logs stay parseable). */
bool router_request_id_valid(const char *id);

/* Writes a new random request id (32 hex digits) into out (ROUTER_REQUEST_ID_MAX bytes). */
void router_request_id_new(char out[ROUTER_REQUEST_ID_MAX]);

#endif
