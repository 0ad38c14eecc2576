/* spec.engine.speculative (see desired.h): the typed form of the speculative-decoding settings and
 * their validation. The API server's schema checks the same (crds/, CEL for draftModel); the
 * operator checks again because an object can reach it without that schema (an older CRD still
 * installed, a test), and its reasons name the field for the InvalidSpec condition. */
#include "common/err.h"
#include "common/json_util.h"
#include "operator/desired.h"

#include <stdio.h>
#include <string.h>

#define SPEC_FIELD  "spec.engine.speculative"
#define DRAFT_FIELD SPEC_FIELD ".draftModel"
#define TOKENS_MAX  16 /* the engine's SPEC_MAX_TOKENS (engine/sched/spec.h) */

static bool is_sha256_hex(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f'))) return false;
    return n == 64;
}

/* draftModel: {uri, sha256?, sizeBytes?, tokenSecretRef?}, as spec.model less servedName. */
static int parse_draft(const json_t *d, struct desired_speculative *out, char *err, size_t errlen)
{
    if (!json_is_object(d)) {
        snprintf(err, errlen, DRAFT_FIELD " must be an object with a uri");
        return ERR_INVAL;
    }
    const json_t *uri = json_object_get(d, "uri");
    if (!json_is_string(uri)) {
        snprintf(err, errlen, DRAFT_FIELD ".uri is missing");
        return ERR_INVAL;
    }
    char why[256];
    if (model_uri_parse_field(json_string_value(uri), DRAFT_FIELD ".uri", &out->draft_uri, why,
                              sizeof(why)) != 0) {
        if (strncmp(why, DRAFT_FIELD, strlen(DRAFT_FIELD)) == 0)
            snprintf(err, errlen, "%s", why);
        else
            snprintf(err, errlen, DRAFT_FIELD ".uri: %s", why);
        return ERR_INVAL;
    }
    const json_t *sha = json_object_get(d, "sha256");
    if (sha && (!json_is_string(sha) || !is_sha256_hex(json_string_value(sha)))) {
        snprintf(err, errlen, DRAFT_FIELD ".sha256 must be 64 lowercase hex digits");
        return ERR_INVAL;
    }
    const json_t *size = json_object_get(d, "sizeBytes");
    if (size && (desired_quantity_bytes(size, &out->draft_bytes) != 0 || out->draft_bytes == 0 ||
                 out->draft_bytes > DESIRED_BYTES_MAX)) {
        snprintf(err, errlen,
                 DRAFT_FIELD ".sizeBytes must be a byte quantity above 0 and at most 1Pi "
                             "(e.g. 200Mi)");
        return ERR_INVAL;
    }
    const json_t *ref = json_object_get(d, "tokenSecretRef");
    const json_t *ref_key = json_object_get(ref, "key");
    if (ref && (!json_is_object(ref) || !json_is_string(json_object_get(ref, "name")) ||
                (ref_key && !json_is_string(ref_key)))) {
        snprintf(err, errlen, DRAFT_FIELD ".tokenSecretRef needs a Secret name (and a key)");
        return ERR_INVAL;
    }
    out->draft = d;
    return 0;
}

int desired_speculative_parse(const json_t *isvc, struct desired_speculative *out, char *err,
                              size_t errlen)
{
    const json_t *sp = json_util_at(isvc, "spec", "engine");
    sp = json_is_object(sp) ? json_object_get(sp, "speculative") : NULL;
    struct desired_speculative r = {.method = DESIRED_SPEC_UNSET};
    if (!sp || json_is_null(sp)) {
        *out = r;
        return 0;
    }
    if (!json_is_object(sp)) {
        snprintf(err, errlen, SPEC_FIELD " must be an object");
        return ERR_INVAL;
    }
    const char *method = json_string_value(json_object_get(sp, "method"));
    if (!method) {
        snprintf(err, errlen, SPEC_FIELD ".method is missing (none, ngram or draft)");
        return ERR_INVAL;
    }
    if (strcmp(method, "none") == 0) {
        r.method = DESIRED_SPEC_NONE;
    } else if (strcmp(method, "ngram") == 0) {
        r.method = DESIRED_SPEC_NGRAM;
    } else if (strcmp(method, "draft") == 0) {
        r.method = DESIRED_SPEC_DRAFT;
    } else {
        snprintf(err, errlen, SPEC_FIELD ".method must be none, ngram or draft, not \"%.32s\"",
                 method);
        return ERR_INVAL;
    }
    const json_t *k = json_object_get(sp, "numTokens");
    if (k) {
        if (!json_is_integer(k) || json_integer_value(k) < 1 ||
            json_integer_value(k) > TOKENS_MAX) {
            snprintf(err, errlen, SPEC_FIELD ".numTokens must be an integer from 1 to %d",
                     TOKENS_MAX);
            return ERR_INVAL;
        }
        r.num_tokens = (int)json_integer_value(k);
    }
    const json_t *d = json_object_get(sp, "draftModel");
    if (d && json_is_null(d)) d = NULL;
    if (r.method == DESIRED_SPEC_DRAFT && !d) {
        snprintf(err, errlen, DRAFT_FIELD " is required with method draft");
        return ERR_INVAL;
    }
    if (r.method != DESIRED_SPEC_DRAFT && d) {
        snprintf(err, errlen, DRAFT_FIELD " is only allowed with method draft (method is %s)",
                 method);
        return ERR_INVAL;
    }
    if (d) {
        int rc = parse_draft(d, &r, err, errlen);
        if (rc) return rc;
    }
    *out = r;
    return 0;
}
