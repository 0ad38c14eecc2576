/* `cinfer-engine bench` output -> the simulator's replica model (see calibrate.h). */
#include "autoscaler/sim/calibrate.h"

#include "common/err.h"
#include "engine/sched/spec.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define LINE_MAX_BYTES 4096

/* Reads a positive finite number field; false when absent or not one. */
static bool positive_number(const json_t *o, const char *k, double *out)
{
    const json_t *v = json_object_get(o, k);
    if (!json_is_number(v)) return false;
    double x = json_number_value(v);
    if (!isfinite(x) || x <= 0) return false;
    *out = x;
    return true;
}

/* The acceptance a in [0, 0.999] at which k proposals per step give `per_step` tokens per
 * sequence step: (1 - a^(k+1)) / (1 - a) = per_step, by bisection (the left side grows with a). */
static double accept_for(double per_step, int k)
{
    double lo = 0, hi = 0.999;
    for (int it = 0; it < 60; it++) {
        double a = (lo + hi) / 2, e = (1 - pow(a, k + 1)) / (1 - a);
        if (e < per_step)
            lo = a;
        else
            hi = a;
    }
    return (lo + hi) / 2;
}

/* A speculative bench line (one with "speculative"): its method, K and tokens per sequence step;
 * false when a field is missing or out of range. */
static bool spec_line(const json_t *o, bool *draft, int *k, double *per_step)
{
    const char *method = json_string_value(json_object_get(o, "speculative"));
    const json_t *kk = json_object_get(o, "num_speculative_tokens");
    if (!method || (strcmp(method, "ngram") && strcmp(method, "draft")) || !json_is_integer(kk) ||
        json_integer_value(kk) < 1 || json_integer_value(kk) > SPEC_MAX_TOKENS ||
        !positive_number(o, "spec_tokens_per_step", per_step) || *per_step < 1 ||
        *per_step > (double)json_integer_value(kk) + 1)
        return false;
    *draft = !strcmp(method, "draft");
    *k = (int)json_integer_value(kk);
    return true;
}

int calibrate_from_bench(const char *text, size_t len, struct sim_replica_model *m, char *desc,
                         size_t desclen, char *err, size_t errlen)
{
    if (len > CALIBRATE_MAX_BYTES) {
        snprintf(err, errlen, "bench output exceeds %u bytes", CALIBRATE_MAX_BYTES);
        return ERR_TOO_BIG;
    }
    double pp1 = 0, tg1 = 0, tgb = 0;
    int big = 0, lineno = 0;
    /* the speculative line of the smallest batch: batch, K, tokens per step, aggregate rate */
    int sb = 0, sk = 0;
    bool sdraft = false;
    double sper = 0, stg = 0;
    if (desc && desclen) desc[0] = '\0';
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        while (j < len && text[j] != '\n') j++;
        size_t n = j - i;
        const char *line = text + i;
        lineno++;
        i = j + 1;
        if (n > LINE_MAX_BYTES) {
            snprintf(err, errlen, "line %d: longer than %d bytes", lineno, LINE_MAX_BYTES);
            return ERR_PARSE;
        }
        if (n > 2 && line[0] == '#' && desc && desclen && !desc[0]) {
            snprintf(desc, desclen, "%.*s", (int)(n - 2), line + 2);
            continue;
        }
        if (n == 0 || line[0] != '{') continue;
        json_error_t je;
        json_t *o = json_loadb(line, n, 0, &je);
        double b = 0, pp = 0, tg = 0, per = 0;
        bool ok = o && positive_number(o, "batch", &b) && positive_number(o, "pp_tok_s", &pp) &&
                  positive_number(o, "tg_tok_s", &tg) && b == floor(b) && b <= 65536;
        bool spec = ok && json_object_get(o, "speculative"), draft = false;
        int k = 0;
        bool spec_ok = spec && spec_line(o, &draft, &k, &per);
        json_decref(o);
        if (!ok) {
            snprintf(err, errlen,
                     "line %d: not a bench result (want batch, pp_tok_s, tg_tok_s > 0)", lineno);
            return ERR_PARSE;
        }
        if (spec && !spec_ok) {
            snprintf(err, errlen,
                     "line %d: a speculative result needs speculative ngram|draft, "
                     "num_speculative_tokens 1..%d and spec_tokens_per_step in [1, K + 1]",
                     lineno, SPEC_MAX_TOKENS);
            return ERR_PARSE;
        }
        if (spec) { /* speculation's line: not a point of the plain batching curve */
            if (!sb || (int)b < sb) {
                sb = (int)b;
                sk = k;
                sdraft = draft;
                sper = per;
                stg = tg;
            }
            continue;
        }
        if (b == 1) {
            pp1 = pp;
            tg1 = tg;
        }
        if ((int)b > big) {
            big = (int)b;
            tgb = tg;
        }
    }
    if (!(tg1 > 0)) {
        snprintf(err, errlen, "no batch-1 result: run cinfer-engine bench with --batch 1,...");
        return ERR_INVAL;
    }
    if (tgb < tg1 || tgb > tg1 * big) {
        snprintf(err, errlen,
                 "batch %d decodes %.1f tok/s, outside [batch 1's %.1f, %d x that]: not one "
                 "replica's curve",
                 big, tgb, tg1, big);
        return ERR_INVAL;
    }
    m->prefill_tps = pp1;
    m->decode_tps = tg1;
    m->decode_batch = big;
    m->decode_batch_tps = tgb;
    if (sb) {
        m->spec_tokens = sk;
        m->spec_accept = accept_for(sper, sk);
        m->spec_draft_cost = 0;
        if (sdraft) {
            /* The draft's cost from the measured rate: each of sb sequences emits sper tokens per
             * step of T(sb (K + 1)) + K draft steps of c T(sb), on the plain curve above. */
            double kk = sim_decode_k(big, tg1, tgb);
            double t1 = (1 + (sb - 1) * kk) / tg1, tk = (1 + (sb * (sk + 1.0) - 1) * kk) / tg1;
            double c = (sper * sb / stg - tk) / (sk * t1);
            m->spec_draft_cost = c < 0 ? 0 : c > 100 ? 100 : c;
        }
    }
    return 0;
}
