/* cinfer-engine tokenize: prints the token ids of a text for a GGUF model's tokenizer, space
 * separated on one line (like llama.cpp's llama-tokenize --ids). Reads only the metadata, so
 * vocabulary-only GGUF files work; with --pieces prints one "id<TAB>piece" line per token instead.
 * --repeat N times the encoder (best of N, on stderr) for benchmarks. */
#include "engine/cmd/cmd.h"

#include "common/clock.h"
#include "common/buf.h"
#include "common/cli.h"
#include "common/err.h"
#include "engine/gguf/gguf.h"
#include "engine/text/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TOKENIZE_MAX_FILE (64u << 20) /* --text-file limit */

struct tokenize_cfg {
    const char *model;
    const char *text;
    const char *text_file;
    const char *log_level, *log_format;
    int repeat;
    bool bos, parse_special, pieces;
};

#define O(f) offsetof(struct tokenize_cfg, f)
static const struct cfg_opt tokenize_opts[] = {
    {"model", CFG_STRING, O(model), NULL, 1, 0, "GGUF model or vocabulary file", NULL,
     CFG_REQUIRED},
    {"text", CFG_STRING, O(text), NULL, 1, 0, "Text to tokenize", NULL, 0},
    {"text-file", CFG_STRING, O(text_file), NULL, 1, 0,
     "Read the text from this file instead (at most 64 MiB)", NULL, 0},
    {"bos", CFG_BOOL, O(bos), "true", 1, 0,
     "Add BOS/EOS as the model's add_bos/add_eos flags ask (--no-bos: never)", NULL, 0},
    {"parse-special", CFG_BOOL, O(parse_special), "true", 1, 0,
     "Turn control-token texts such as <s> into their ids", NULL, 0},
    {"pieces", CFG_BOOL, O(pieces), "false", 1, 0,
     "Print one \"id<TAB>piece\" line per token instead of the id list", NULL, 0},
    {"repeat", CFG_INT, O(repeat), "1", 1, 1000000,
     "Encode this many times and print the best time on stderr", NULL, 0},
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
    size_t n = 0, text_len;
    const char *text;
    struct buf file;
    char err[512];
    int status = 1, rc;

    enum cli_parse_result pr = cli_parse(&tokenize_spec, &c, argc, argv, &res);
    if (pr != CLI_RUN) return pr == CLI_EXIT_OK ? 0 : 2;
    buf_init(&file, TOKENIZE_MAX_FILE);
    cli_log_setup("engine", c.log_level, c.log_format);

    if (!c.text == !c.text_file) {
        fprintf(stderr, "cinfer-engine tokenize: give exactly one of --text and --text-file\n");
        return 2;
    }
    if (c.text_file) {
        if ((rc = buf_append_file(&file, c.text_file))) {
            fprintf(stderr, "cinfer-engine tokenize: %s: %s\n", c.text_file,
                    rc == ERR_TOO_BIG ? "larger than 64 MiB"
                    : rc == ERR_IO    ? strerror(errno)
                                      : err_str(rc));
            goto out;
        }
        text = file.data ? file.data : "";
        text_len = file.len;
    } else {
        text = c.text;
        text_len = strlen(c.text);
    }
    if ((rc = gguf_open(c.model, &g, err, sizeof(err)))) {
        fprintf(stderr, "cinfer-engine tokenize: %s: %s\n", c.model, err);
        goto out;
    }
    if ((rc = tokenizer_load(g, &t, err, sizeof(err)))) {
        fprintf(stderr, "cinfer-engine tokenize: %s: %s\n", c.model, err);
        goto out;
    }
    double best = 0;
    for (int r = 0; r < c.repeat; r++) {
        free(ids);
        ids = NULL;
        double t0 = clock_mono_s();
        if ((rc = tokenizer_encode(t, text, text_len, c.bos, c.parse_special, &ids, &n))) {
            fprintf(stderr, "cinfer-engine tokenize: %s\n", err_str(rc));
            goto out;
        }
        double dt = clock_mono_s() - t0;
        if (r == 0 || dt < best) best = dt;
    }
    if (c.repeat > 1)
        fprintf(stderr, "tokenize: %zu bytes -> %zu tokens in %.3f ms (best of %d)\n", text_len, n,
                best * 1e3, c.repeat);
    print_ids(t, ids, n, c.pieces);
    status = fflush(stdout) == 0 ? 0 : 1;
out:
    free(ids);
    tokenizer_free(t);
    gguf_close(g);
    buf_fini(&file);
    return status;
}
