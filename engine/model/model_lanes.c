/* How a step splits into lanes (model_priv.h: model_lanes_plan). Pure arithmetic on the entries. */
#include "engine/model/model_priv.h"

#include <stdbool.h>
#include <stdint.h>

/* A token's matmuls cost about as much as attending over this many positions of context: on the
 * 110M Q8_0 model at 16-token decode steps, 0.4 ms of matmuls per token against 1.8 us of
 * attention per position per token (`cinfer-engine bench --profile --batch 16 --depth 192`). It
 * only weighs entries of different lengths against each other; a plan of alike decodes does not
 * depend on it. */
#define LANE_TOKEN_COST 256

static int64_t entry_cost(const struct model_batch_entry *e)
{
    int64_t ctx = (int64_t)e->pos + e->n_tokens; /* the last token's context */
    return (int64_t)e->n_tokens * (LANE_TOKEN_COST + ctx);
}

/* The plan that does not split: one lane of every entry. */
static int one_lane(int n_en, int *first)
{
    first[0] = 0;
    first[1] = n_en;
    return 1;
}

int model_lanes_plan(const struct model_batch_entry *en, int n_en, int lanes_max, int *first)
{
    if (lanes_max < 2 || n_en < lanes_max) return one_lane(n_en, first);
    int64_t total = 0, tokens = 0;
    for (int i = 0; i < n_en; i++) {
        total += entry_cost(&en[i]);
        tokens += en[i].n_tokens;
    }
    if (tokens < (int64_t)lanes_max * MODEL_LANE_MIN_TOKENS) return one_lane(n_en, first);

    /* Cut where the running cost is nearest each multiple of total / lanes_max. */
    int lane = 1;
    int64_t run = 0;
    first[0] = 0;
    for (int i = 0; i < n_en && lane < lanes_max; i++) {
        int64_t target = total * lane / lanes_max, c = entry_cost(&en[i]);
        if (run + c > target && i > first[lane - 1]) {
            /* entry i goes here or to the next lane, whichever leaves the cut nearer the target */
            bool before = target - run <= run + c - target;
            first[lane++] = before ? i : i + 1;
        }
        run += c;
    }
    if (lane < lanes_max) return one_lane(n_en, first); /* one entry spans several shares */
    first[lanes_max] = n_en;

    int64_t worst = 0;
    for (int l = 0, i = 0; l < lanes_max; l++) {
        int64_t cost = 0, tok = 0;
        for (; i < first[l + 1]; i++) {
            cost += entry_cost(&en[i]);
            tok += en[i].n_tokens;
        }
        if (tok < MODEL_LANE_MIN_TOKENS) return one_lane(n_en, first);
        if (cost > worst) worst = cost;
    }
    if ((double)worst > MODEL_LANE_MAX_SKEW * (double)total / lanes_max)
        return one_lane(n_en, first);
    return lanes_max;
}
