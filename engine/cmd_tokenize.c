/* cinfer-engine tokenize: prints the token ids of a text for a GGUF model's tokenizer, space
 * separated on one line (like llama.cpp's llama-tokenize --ids). Reads only the metadata, so
 * vocabulary-only GGUF files work; with --pieces prints one "id<TAB>piece" line per token instead. */
#include "engine/cmd.h"

#include "common/cli.h"
#include "common/err.h"
#include "engine/gguf.h"
#include "engine/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tokenize_cfg {
    const char *model;
    const char *text;
    const char *log_level, *log_format;
    bool bos, parse_special, pieces;
};

#define O(f) offsetof(struct tokenize_cfg, f)
static const struct cfg_opt tokenize_opts[] = {
    {"model", CFG_STRING, O(model), NULL, 1, 0, "GGUF model or vocabulary file", NULL,
     CFG_REQUIRED},
    {"text", CFG_STRING, O(text), NULL, 1, 0, "Text to tokenize", NULL, CFG_REQUIRED},
    {"bos", CFG_BOOL, O(bos), "true", 1, 0,
     "Add BOS/EOS as the model's add_bos/add_eos flags ask (--no-bos: never)", NULL, 0},
    {"parse-special", CFG_BOOL, O(parse_special), "true", 1, 0,
     "Turn control-token texts such as <s> into their ids", NULL, 0},
    {"pieces", CFG_BOOL, O(pieces), "false", 1, 0,
     "Print one \"id<TAB>piece\" line per token instead of the id list", NULL, 0},
    CLI_LOG_OPTS(struct tokenize_cfg),
};
#undef O

static const struct cfg_spec tokenize_spec = {
    .program = "cinfer-engine tokenize",
    .summary = "Print the token ids of a text for a GGUF model's tokenizer",
    .env_prefix = "CINFER_ENGINE_",
    .opts = tokenize_opts,
    .n_opts = sizeof(tokenize_opts) / sizeof(tokenize_opts[0]),
};

static void print_ids(const struct tokenizer *t, const int32_t *ids, size_t n, bool pieces)
{
    for (size_t i = 0; i < n; i++) {
        if (!pieces) {
            printf(i ? " %d" : "%d", ids[i]);
            continue;
        }
        size_t len;
        const char *p = tokenizer_token_piece(t, ids[i], true, &len);
        printf("%d\t", ids[i]);
        fwrite(p, 1, len, stdout);
        putchar('\n');
    }
    if (!pieces) putchar('\n');
}

int cmd_tokenize_main(int argc, char **argv)
{
    struct tokenize_cfg c;
    struct cfg_result res;
    struct gguf *g = NULL;
    struct tokenizer *t = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    char err[512];
    int status = 1, rc;

    enum cli_parse_result pr = cli_parse(&tokenize_spec, &c, argc, argv, &res);
    if (pr != CLI_RUN) return pr == CLI_EXIT_OK ? 0 : 2;
    cli_log_setup("engine", c.log_level, c.log_format);

    if ((rc = gguf_open(c.model, &g, err, sizeof(err)))) {
        fprintf(stderr, "cinfer-engine tokenize: %s: %s\n", c.model, err);
        goto out;
    }
    if ((rc = tokenizer_load(g, &t, err, sizeof(err)))) {
        fprintf(stderr, "cinfer-engine tokenize: %s: %s\n", c.model, err);
        goto out;
    }
    if ((rc = tokenizer_encode(t, c.text, strlen(c.text), c.bos, c.parse_special, &ids, &n))) {
        fprintf(stderr, "cinfer-engine tokenize: %s\n", err_str(rc));
        goto out;
    }
    print_ids(t, ids, n, c.pieces);
    status = fflush(stdout) == 0 ? 0 : 1;
out:
    free(ids);
    tokenizer_free(t);
    gguf_close(g);
    return status;
}
