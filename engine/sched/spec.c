/* Speculative decoding: names, settings and the acceptance record (see spec.h). */
#include "engine/sched/spec.h"

#include <string.h>

static const char *const spec_method_names[] = {
    [SPEC_METHOD_NONE] = "none",
    [SPEC_METHOD_NGRAM] = "ngram",
    [SPEC_METHOD_DRAFT] = "draft",
};

static const char *const spec_skip_names[SPEC_SKIP_COUNT] = {
    [SPEC_SKIP_NO_PROPOSAL] = "no_proposal",
    [SPEC_SKIP_COST] = "cost",
    [SPEC_SKIP_KV] = "kv_full",
    [SPEC_SKIP_BUDGET] = "budget",
    [SPEC_SKIP_CATCHUP] = "draft_catchup",
};

bool spec_method_parse(const char *name, enum spec_method *out)
{
    for (size_t i = 0; name && i < sizeof(spec_method_names) / sizeof(spec_method_names[0]); i++)
        if (strcmp(name, spec_method_names[i]) == 0) {
            *out = (enum spec_method)i;
            return true;
        }
    return false;
}

const char *spec_method_name(enum spec_method m)
{
    return (unsigned)m <= SPEC_METHOD_DRAFT ? spec_method_names[m] : "?";
}

const char *spec_skip_name(enum spec_skip why)
{
    return (unsigned)why < SPEC_SKIP_COUNT ? spec_skip_names[why] : "?";
}

void spec_config_default(struct spec_config *c)
{
    memset(c, 0, sizeof(*c));
    c->method = SPEC_METHOD_NONE;
    c->num_tokens = 5;
    c->ngram_min = 2;
    c->ngram_max = 5;
    c->adaptive = true;
}

bool spec_config_valid(const struct spec_config *c)
{
    if ((unsigned)c->method > SPEC_METHOD_DRAFT) return false;
    if (c->method == SPEC_METHOD_NONE) return true;
    if (c->num_tokens < 1 || c->num_tokens > SPEC_MAX_TOKENS) return false;
    if (c->method == SPEC_METHOD_NGRAM &&
        (c->ngram_min < 1 || c->ngram_max < c->ngram_min || c->ngram_max > 64))
        return false;
    if (c->ngram_pool_bytes != 0 &&
        (c->method != SPEC_METHOD_NGRAM || c->ngram_pool_bytes < SPEC_POOL_MIN_BYTES))
        return false;
    return true;
}

/* Per run, old evidence keeps this share: about the last 16 runs count. */
#define SPEC_ACCEPT_DECAY 0.94f

void spec_accept_update(struct spec_accept *a, int proposed, int accepted)
{
    if (proposed <= 0) return;
    a->hits = a->hits * SPEC_ACCEPT_DECAY + (float)accepted;
    a->misses = a->misses * SPEC_ACCEPT_DECAY + (accepted < proposed ? 1.0f : 0.0f);
}

void spec_accept_decay(struct spec_accept *a)
{
    a->hits *= SPEC_ACCEPT_DECAY;
    a->misses *= SPEC_ACCEPT_DECAY;
}

float spec_accept_estimate(const struct spec_accept *a, float prior)
{
    const float w = 2.0f; /* the prior weighs as much as two runs */
    return (a->hits + w * prior) / (a->hits + a->misses + w);
}
