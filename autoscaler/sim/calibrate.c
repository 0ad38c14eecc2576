/* `cinfer-engine bench` output -> the simulator's replica model (see calibrate.h). */
#include "autoscaler/sim/calibrate.h"

#include "common/err.h"

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

int calibrate_from_bench(const char *text, size_t len, struct sim_replica_model *m, char *desc,
                         size_t desclen, char *err, size_t errlen)
{
    if (len > CALIBRATE_MAX_BYTES) {
        snprintf(err, errlen, "bench output exceeds %u bytes", CALIBRATE_MAX_BYTES);
        return ERR_TOO_BIG;
    }
    double pp1 = 0, tg1 = 0, tgb = 0;
    int big = 0, lineno = 0;
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
        double b = 0, pp = 0, tg = 0;
        bool ok = o && positive_number(o, "batch", &b) && positive_number(o, "pp_tok_s", &pp) &&
                  positive_number(o, "tg_tok_s", &tg) && b == floor(b) && b <= 65536;
        json_decref(o);
        if (!ok) {
            snprintf(err, errlen,
                     "line %d: not a bench result (want batch, pp_tok_s, tg_tok_s > 0)", lineno);
            return ERR_PARSE;
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
    return 0;
}
