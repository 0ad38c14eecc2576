/* The speculative-decoding flags shared by serve, generate and bench (see cmd_spec.h). */
#include "engine/cmd/cmd_spec.h"

#include "common/err.h"
#include "engine/model/model.h"

#include <string.h>

int cmd_spec_resolve(struct cmd_spec_flags *f, struct spec_config *out, char *err, size_t errlen)
{
    /* --spec is the older name of --speculative; from here on f->spec is the method */
    if (f->spec && strcmp(f->spec, f->speculative) != 0 && strcmp(f->speculative, "none") != 0)
        return err_fmt(err, errlen, ERR_INVAL, "--spec %s and --speculative %s disagree", f->spec,
                       f->speculative);
    if (!f->spec) f->spec = f->speculative;
    if ((f->draft_model != NULL) != (strcmp(f->spec, "draft") == 0))
        return err_fmt(err, errlen, ERR_INVAL, "%s",
                       f->draft_model ? "--draft-model needs --speculative draft"
                                      : "--speculative draft needs --draft-model");
    if (f->ngram_min > f->ngram_max)
        return err_fmt(err, errlen, ERR_INVAL, "--ngram-min %d exceeds --ngram-max %d",
                       f->ngram_min, f->ngram_max);
    if (f->ngram_pool_bytes != 0 && f->ngram_pool_bytes < SPEC_POOL_MIN_BYTES)
        return err_fmt(err, errlen, ERR_INVAL,
                       "--ngram-pool-bytes %llu is below %u (0 turns it off)",
                       (unsigned long long)f->ngram_pool_bytes, SPEC_POOL_MIN_BYTES);
    struct spec_config sc;
    spec_config_default(&sc);
    if (!spec_method_parse(f->spec, &sc.method))
        return err_fmt(err, errlen, ERR_INVAL, "unknown speculative method %s", f->spec);
    sc.num_tokens = f->num_tokens;
    sc.ngram_min = f->ngram_min;
    sc.ngram_max = f->ngram_max;
    sc.adaptive = !f->no_adaptive;
    sc.ngram_pool_bytes = sc.method == SPEC_METHOD_NGRAM ? f->ngram_pool_bytes : 0;
    if (!spec_config_valid(&sc))
        return err_fmt(err, errlen, ERR_INVAL, "invalid speculative decoding settings");
    *out = sc;
    return 0;
}

int cmd_spec_draft_load(const struct cmd_spec_flags *f, const struct model_options *mo,
                        const struct model *target, struct model **out, char *err, size_t errlen)
{
    struct model_options dmo = *mo;
    dmo.sha256 = NULL; /* --model-sha256 is the target's */
    struct model *d = NULL;
    char why[400] = "";
    int rc = model_load(f->draft_model, &dmo, &d, why, sizeof(why));
    if (rc) return err_fmt(err, errlen, rc, "draft model %s: %s", f->draft_model, why);
    if ((rc = spec_draft_check_vocab(target, d, why, sizeof(why))) != 0) {
        model_free(d);
        return err_fmt(err, errlen, rc, "the draft model's vocabulary is not the target's: %s",
                       why);
    }
    *out = d;
    return 0;
}
