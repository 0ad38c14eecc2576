/* The speculative-decoding flags `serve`, `generate` and `bench` share: one struct, one set of cfg
 * table rows (CMD_SPEC_OPTS), one check that turns them into the scheduler's spec_config, and the
 * draft model's loading (vocabulary checked). Each command embeds struct cmd_spec_flags in its
 * config struct; nothing here keeps state. Main thread, before any inference thread starts. */
#ifndef CINFER_ENGINE_CMD_SPEC_H
#define CINFER_ENGINE_CMD_SPEC_H

#include "common/cfg.h"
#include "engine/sched/spec.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct model;
struct model_options;

struct cmd_spec_flags {
    const char *speculative; /* --speculative: none|ngram|draft */
    const char *spec;        /* --spec, its older name; cmd_spec_resolve leaves the method here */
    const char *draft_model; /* --draft-model */
    int num_tokens;          /* --num-speculative-tokens */
    int ngram_min, ngram_max;
    bool no_adaptive;          /* --no-spec-adaptive */
    uint64_t ngram_pool_bytes; /* --ngram-pool-bytes (serve only: CMD_SPEC_POOL_OPT) */
};

/* cfg table rows for the flags, `member` being the struct cmd_spec_flags field of `type`. */
#define CMD_SPEC_OPTS(type, member)                                                                \
    {"speculative",                                                                                \
     CFG_STRING,                                                                                   \
     offsetof(type, member.speculative),                                                           \
     "none",                                                                                       \
     1,                                                                                            \
     0,                                                                                            \
     "Speculative decoding: ngram = verify prompt-lookup proposals (the sequence's own earlier "   \
     "tokens) in each decode step, draft = proposals of --draft-model; greedy output is the "      \
     "same, sampled output has the same distribution",                                             \
     SPEC_METHOD_NAMES,                                                                            \
     0},                                                                                           \
        {"spec", CFG_STRING, offsetof(type, member.spec), NULL,                                    \
         1,      0,          "Alias of --speculative",    SPEC_METHOD_NAMES,                       \
         0},                                                                                       \
        {"draft-model",                                                                            \
         CFG_STRING,                                                                               \
         offsetof(type, member.draft_model),                                                       \
         NULL,                                                                                     \
         1,                                                                                        \
         0,                                                                                        \
         "GGUF draft model for --speculative draft: the target's vocabulary (checked at load), "   \
         "run on the same backend with a KV pool of its own",                                      \
         NULL,                                                                                     \
         0},                                                                                       \
        {"num-speculative-tokens",                                                                 \
         CFG_INT,                                                                                  \
         offsetof(type, member.num_tokens),                                                        \
         "5",                                                                                      \
         1,                                                                                        \
         SPEC_MAX_TOKENS,                                                                          \
         "Proposals per sequence per step at most",                                                \
         NULL,                                                                                     \
         0},                                                                                       \
        {"ngram-min",                                                                              \
         CFG_INT,                                                                                  \
         offsetof(type, member.ngram_min),                                                         \
         "2",                                                                                      \
         1,                                                                                        \
         64,                                                                                       \
         "Shortest suffix prompt lookup matches",                                                  \
         NULL,                                                                                     \
         0},                                                                                       \
        {"ngram-max",                                                                              \
         CFG_INT,                                                                                  \
         offsetof(type, member.ngram_max),                                                         \
         "5",                                                                                      \
         1,                                                                                        \
         64,                                                                                       \
         "Longest suffix prompt lookup matches",                                                   \
         NULL,                                                                                     \
         0},                                                                                       \
    {                                                                                              \
        "no-spec-adaptive", CFG_BOOL, offsetof(type, member.no_adaptive), "false", 1, 0,           \
            "Always propose all that is found, up to --num-speculative-tokens, instead of "        \
            "choosing per sequence and step from measured acceptance and step cost",               \
            NULL, 0                                                                                \
    }

/* The cross-request n-gram pool's row (serve: the pool outlives requests). */
#define CMD_SPEC_POOL_OPT(type, member)                                                            \
    {                                                                                              \
        "ngram-pool-bytes", CFG_SIZE, offsetof(type, member.ngram_pool_bytes), "1M", 0, 1 << 30,   \
            "--speculative ngram: memory for n-grams of recently finished requests' tokens, "      \
            "consulted when a sequence's own tokens hold no match (agent and code-edit traffic "   \
            "repeats across requests); 0 = off",                                                   \
            NULL, 0                                                                                \
    }

/* Checks the flags together (--spec agrees with --speculative, --draft-model goes with draft and
 * only with it, --ngram-min <= --ngram-max), leaves the method's name in f->spec and writes the
 * scheduler's settings to *out. 0, or ERR_INVAL with the reason in err (a usage error). */
int cmd_spec_resolve(struct cmd_spec_flags *f, struct spec_config *out, char *err, size_t errlen);

/* Loads f->draft_model with the target's options `mo` (borrowed; its sha256 is not applied) and
 * checks its vocabulary against `target` (borrowed). Writes the new model to *out (model_free);
 * otherwise the model's or the vocabulary check's error, the reason in err. */
int cmd_spec_draft_load(const struct cmd_spec_flags *f, const struct model_options *mo,
                        const struct model *target, struct model **out, char *err, size_t errlen);

#endif
