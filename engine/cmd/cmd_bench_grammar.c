/* cinfer-engine bench-grammar: the cost of one token mask (engine/grammar/grammar.h) per token per
 * sequence on a model's vocabulary, for a GBNF grammar or a JSON schema. Walks: --replay tokenizes
 * documents of the language (one per line of the file) and replays their tokens, the way a model
 * that writes them would drive the matcher; otherwise random walks pick uniformly among the
 * allowed tokens (a worst case: states a model rarely visits). Prints p50 / p99 / max of the mask
 * time, first request (cold cache) and later ones apart, one JSON line per phase.
 *   cinfer-engine bench-grammar --model vocab.gguf --schema-file s.json --replay docs.jsonl
 * For coverage (hack/schema-coverage.py): --emit writes each random walk's text, and
 * --finish-after makes a walk head for the end of the document after that many tokens (it prefers
 * allowed tokens that close a string, object or array, then one-byte ones, and stops as soon as
 * the grammar accepts), so that walks of open-ended schemas end as complete instances. Whatever a
 * walk emits was chosen by the mask alone: every complete one must be valid. */
#include "engine/cmd/cmd.h"

#include "common/buf.h"
#include "common/cli.h"
#include "common/clock.h"
#include "common/err.h"
#include "engine/gguf/gguf.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/grammar_schema.h"
#include "engine/text/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_GRAMMAR_MAX_FILE (16u << 20)

struct bench_grammar_cfg {
    const char *model, *grammar_file, *schema_file, *replay, *emit;
    const char *log_level, *log_format;
    int walks, steps, seed, finish_after;
};

#define O(f) offsetof(struct bench_grammar_cfg, f)
static const struct cfg_opt bench_grammar_opts[] = {
    {"model", CFG_STRING, O(model), NULL, 1, 0, "GGUF model or vocabulary file", NULL,
     CFG_REQUIRED},
    {"grammar-file", CFG_STRING, O(grammar_file), NULL, 1, 0, "GBNF grammar", NULL, 0},
    {"schema-file", CFG_STRING, O(schema_file), NULL, 1, 0, "JSON schema", NULL, 0},
    {"replay", CFG_STRING, O(replay), NULL, 1, 0,
     "Documents to replay, one per line (else random walks)", NULL, 0},
    {"walks", CFG_INT, O(walks), "20", 1, 1000000, "Walks (documents replayed per round)", NULL, 0},
    {"steps", CFG_INT, O(steps), "200", 1, 1000000, "Most tokens per random walk", NULL, 0},
    {"seed", CFG_INT, O(seed), "1", 0, 1 << 30, "Random walk seed", NULL, 0},
    {"finish-after", CFG_INT, O(finish_after), "0", 0, 1000000,
     "Random walks: after this many tokens prefer closing tokens and stop once the grammar accepts "
     "(0 = never)",
     NULL, 0},
    {"emit", CFG_STRING, O(emit), NULL, 1, 0,
     "Random walks: write each walk's text to this file, one JSON object per line "
     "({\"complete\", \"tokens\", \"text\"})",
     NULL, 0},
    CLI_LOG_OPTS(struct bench_grammar_cfg),
};
#undef O

static const struct cfg_spec bench_grammar_spec = {
    .program = "cinfer-engine bench-grammar",
    .summary = "Measure token-mask computation of constrained decoding",
    .env_prefix = "CINFER_ENGINE_",
    .opts = bench_grammar_opts,
    .n_opts = sizeof(bench_grammar_opts) / sizeof(bench_grammar_opts[0]),
};

struct samples {
    double *v;
    size_t n, cap;
};

static void samples_add(struct samples *s, double x)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 1024;
        double *v = realloc(s->v, cap * sizeof(*v));
        if (!v) return;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = x;
}

static int dbl_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void samples_print(const char *phase, struct samples *s, struct samples *cpu,
                          const struct grammar *g)
{
    if (!s->n || cpu->n != s->n) return;
    qsort(s->v, s->n, sizeof(*s->v), dbl_cmp);
    qsort(cpu->v, cpu->n, sizeof(*cpu->v), dbl_cmp);
    double sum = 0;
    for (size_t i = 0; i < s->n; i++) sum += s->v[i];
    struct grammar_cache_stats cs;
    grammar_cache_stats(g, &cs);
    printf("{\"phase\":\"%s\",\"masks\":%zu,\"p50_us\":%.1f,\"p99_us\":%.1f,\"max_us\":%.1f,"
           "\"mean_us\":%.1f,\"cpu_p50_us\":%.1f,\"cpu_p99_us\":%.1f,\"cpu_max_us\":%.1f,"
           "\"cache_entries\":%zu,\"cache_mib\":%.1f}\n",
           phase, s->n, s->v[s->n / 2] * 1e6, s->v[(size_t)((double)s->n * 0.99)] * 1e6,
           s->v[s->n - 1] * 1e6, sum / (double)s->n * 1e6, cpu->v[cpu->n / 2] * 1e6,
           cpu->v[(size_t)((double)cpu->n * 0.99)] * 1e6, cpu->v[cpu->n - 1] * 1e6, cs.entries,
           (double)cs.bytes / (1 << 20));
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A token's class for a walk that heads for the end, in order of preference: one whose text
 * starts with a quote (ends a string, or starts the key an object still needs), one that starts
 * by closing an object or array, one byte otherwise, anything else. */
enum tok_class { TOK_QUOTE = 0, TOK_CLOSE, TOK_BYTE, TOK_OTHER, TOK_N_CLASSES };

static uint8_t *token_classes(const struct tokenizer *tok, int32_t n_vocab)
{
    uint8_t *cls = malloc((size_t)n_vocab);
    for (int32_t i = 0; cls && i < n_vocab; i++) {
        size_t len = 0;
        const char *p = tokenizer_token_piece(tok, i, false, &len);
        cls[i] = !len || !p                   ? TOK_OTHER
                 : p[0] == '"'                ? TOK_QUOTE
                 : p[0] == '}' || p[0] == ']' ? TOK_CLOSE
                 : len == 1                   ? TOK_BYTE
                                              : TOK_OTHER;
    }
    return cls;
}

/* The pick-th allowed token of class `want` (TOK_N_CLASSES: any), or -1. */
static int32_t nth_allowed(const uint32_t *mask, int32_t n_vocab, const uint8_t *cls, int want,
                           int pick)
{
    for (int32_t i = 0; i < n_vocab; i++)
        if ((mask[i >> 5] >> (i & 31)) & 1 && (want == TOK_N_CLASSES || cls[i] == want) &&
            pick-- == 0)
            return i;
    return -1;
}

/* A random allowed token (n of them): uniform, or, when `finishing`, uniform within the first
 * class (enum tok_class) that has one. */
static int32_t pick_token(const uint32_t *mask, int32_t n_vocab, int n, const uint8_t *cls,
                          bool finishing, uint64_t *seed)
{
    if (finishing) {
        int count[TOK_N_CLASSES] = {0};
        for (int32_t i = 0; i < n_vocab; i++)
            if ((mask[i >> 5] >> (i & 31)) & 1) count[cls[i]]++;
        for (int k = 0; k < TOK_OTHER; k++)
            if (count[k])
                return nth_allowed(mask, n_vocab, cls, k,
                                   (int)(rng_next(seed) % (uint64_t)count[k]));
    }
    return nth_allowed(mask, n_vocab, cls, TOK_N_CLASSES, (int)(rng_next(seed) % (uint64_t)n));
}

struct walk_out {
    int32_t *ids; /* the walk's tokens (steps of them at most) */
    size_t n;
    bool complete; /* ended with the grammar accepting */
};

/* One walk: a mask per step, timed, then the next token (the document's, or a random allowed
 * one; after finish_after steps (> 0) one that heads for the end, stopping once the grammar
 * accepts). Returns 0, or 1 when a replayed token was refused (the document is not in the
 * language). With `out`, records the tokens (random walks). */
static int walk(struct grammar *g, struct grammar_arena *a, uint32_t *mask, int32_t n_vocab,
                const int32_t *ids, size_t n_ids, int steps, int finish_after, const uint8_t *cls,
                uint64_t *seed, struct samples *s, struct samples *cpu, struct walk_out *out)
{
    struct grammar_matcher *m = NULL;
    if (grammar_matcher_new(g, a, &m)) return 1;
    int rc = 0;
    if (out) out->n = 0;
    for (int step = 0; ids ? (size_t)step < n_ids : step < steps; step++) {
        bool finishing = !ids && finish_after > 0 && step >= finish_after;
        if (finishing && grammar_matcher_accepting(m)) break;
        double t0 = clock_mono_s(), c0 = clock_thread_cpu_s();
        int n = grammar_matcher_mask(m, a, mask);
        samples_add(s, clock_mono_s() - t0);
        samples_add(cpu, clock_thread_cpu_s() - c0);
        if (n <= 0) break;
        int32_t t = ids ? ids[step] : pick_token(mask, n_vocab, n, cls, finishing, seed);
        if (t < 0 || t >= n_vocab || !((mask[t >> 5] >> (t & 31)) & 1) ||
            grammar_matcher_accept(m, a, t)) {
            rc = 1;
            break;
        }
        if (out) out->ids[out->n++] = t;
        if (grammar_matcher_finished(m)) break;
    }
    if (out) out->complete = grammar_matcher_accepting(m);
    grammar_matcher_free(m);
    return rc;
}

/* One line of --emit: the walk's text as a JSON string (null when its bytes are not UTF-8, as a
 * cut-off walk may end inside a character). */
static int emit_walk(FILE *f, const struct tokenizer *tok, const struct walk_out *w)
{
    struct buf text;
    buf_init(&text, BENCH_GRAMMAR_MAX_FILE);
    int rc = tokenizer_decode(tok, w->ids, w->n, false, &text);
    json_t *o = json_object();
    json_t *str = rc ? NULL : json_stringn(text.len ? buf_cstr(&text) : "", text.len);
    if (!o || json_object_set_new(o, "complete", json_boolean(w->complete)) ||
        json_object_set_new(o, "tokens", json_integer((json_int_t)w->n)) ||
        json_object_set_new(o, "text", str ? str : json_null()))
        rc = ERR_NOMEM;
    char *line = rc ? NULL : json_dumps(o, JSON_COMPACT);
    if (!rc && (!line || fprintf(f, "%s\n", line) < 0)) rc = ERR_IO;
    free(line);
    json_decref(o);
    buf_fini(&text);
    return rc;
}

int cmd_bench_grammar_main(int argc, char **argv)
{
    struct bench_grammar_cfg c;
    struct cfg_result res;
    enum cli_parse_result pr = cli_parse(&bench_grammar_spec, &c, argc, argv, &res);
    if (pr != CLI_RUN) return pr == CLI_EXIT_OK ? 0 : 2;
    cli_log_setup("engine", c.log_level, c.log_format);
    if (!c.grammar_file == !c.schema_file) {
        fprintf(stderr, "cinfer-engine bench-grammar: give one of --grammar-file, --schema-file\n");
        return 2;
    }
    struct gguf *gg = NULL;
    struct tokenizer *tok = NULL;
    struct grammar_vocab *v = NULL;
    struct grammar *g = NULL;
    struct grammar_arena *a = grammar_arena_new();
    struct buf text, docs;
    buf_init(&text, BENCH_GRAMMAR_MAX_FILE);
    buf_init(&docs, BENCH_GRAMMAR_MAX_FILE);
    struct samples cold = {0}, warm = {0}, cold_cpu = {0}, warm_cpu = {0};
    uint32_t *mask = NULL;
    uint8_t *cls = NULL;
    struct walk_out wo = {0};
    FILE *emit = NULL;
    char err[512];
    int status = 1, rc;
    if ((rc = gguf_open(c.model, &gg, err, sizeof(err))) ||
        (rc = tokenizer_load(gg, &tok, err, sizeof(err)))) {
        fprintf(stderr, "cinfer-engine bench-grammar: %s: %s\n", c.model, err);
        goto out;
    }
    double t0 = clock_mono_s();
    if ((rc = grammar_vocab_new(tok, &v))) {
        fprintf(stderr, "cinfer-engine bench-grammar: vocabulary: %s\n", err_str(rc));
        goto out;
    }
    double t_vocab = clock_mono_s() - t0;
    const char *path = c.grammar_file ? c.grammar_file : c.schema_file;
    if ((rc = buf_append_file(&text, path))) {
        fprintf(stderr, "cinfer-engine bench-grammar: %s: %s\n", path, err_str(rc));
        goto out;
    }
    t0 = clock_mono_s();
    if (c.grammar_file)
        rc = grammar_compile(buf_cstr(&text), text.len, v, &g, err, sizeof(err));
    else
        rc = grammar_schema_compile_text(buf_cstr(&text), text.len, v, &g, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "cinfer-engine bench-grammar: %s: %s\n", path, err);
        goto out;
    }
    double t_compile = clock_mono_s() - t0;
    printf("{\"vocab\":%d,\"trie_nodes\":%zu,\"vocab_ms\":%.1f,\"compile_ms\":%.2f,"
           "\"elements\":%zu}\n",
           grammar_vocab_size(v), grammar_vocab_nodes(v), t_vocab * 1e3, t_compile * 1e3,
           grammar_size(g));
    mask = calloc(grammar_mask_words(v), sizeof(*mask));
    cls = token_classes(tok, grammar_vocab_size(v));
    wo.ids = malloc((size_t)c.steps * sizeof(*wo.ids));
    if (!a || !mask || !cls || !wo.ids) goto out;
    if (c.emit && !(emit = fopen(c.emit, "w"))) {
        fprintf(stderr, "cinfer-engine bench-grammar: cannot write %s\n", c.emit);
        goto out;
    }
    uint64_t seed = (uint64_t)c.seed;
    if (c.replay && (rc = buf_append_file(&docs, c.replay))) {
        fprintf(stderr, "cinfer-engine bench-grammar: %s: %s\n", c.replay, err_str(rc));
        goto out;
    }
    int refused = 0;
    for (int w = 0; w < c.walks; w++) {
        struct samples *s = w == 0 ? &cold : &warm, *cpu = w == 0 ? &cold_cpu : &warm_cpu;
        if (!c.replay) {
            refused += walk(g, a, mask, grammar_vocab_size(v), NULL, 0, c.steps, c.finish_after,
                            cls, &seed, s, cpu, &wo);
            if (emit && (rc = emit_walk(emit, tok, &wo)) != 0) {
                fprintf(stderr, "cinfer-engine bench-grammar: %s: %s\n", c.emit, err_str(rc));
                goto out;
            }
            continue;
        }
        const char *p = buf_cstr(&docs), *end = p + docs.len;
        while (p < end) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
            int32_t *ids = NULL;
            size_t n = 0;
            if (len && tokenizer_encode(tok, p, len, false, false, &ids, &n) == 0)
                refused +=
                    walk(g, a, mask, grammar_vocab_size(v), ids, n, 0, 0, cls, &seed, s, cpu, NULL);
            free(ids);
            p += len + 1;
        }
    }
    samples_print("first", &cold, &cold_cpu, g);
    samples_print("later", &warm, &warm_cpu, g);
    if (refused) fprintf(stderr, "bench-grammar: %d walks refused a token\n", refused);
    status = refused ? 1 : 0;
out:
    if (emit && fclose(emit) != 0 && status == 0) status = 1;
    free(wo.ids);
    free(cls);
    free(cold.v);
    free(warm.v);
    free(cold_cpu.v);
    free(warm_cpu.v);
    free(mask);
    grammar_unref(g);
    grammar_arena_free(a);
    grammar_vocab_free(v);
    tokenizer_free(tok);
    gguf_close(gg);
    buf_fini(&text);
    buf_fini(&docs);
    return status;
}
