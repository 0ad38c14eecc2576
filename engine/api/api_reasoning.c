/* The reasoning section of a thinking model's answer (DeepSeek-R1 distills, Qwen3, QwQ: a
 * <think>...</think> block before the answer) split from its content, incrementally, as
 * DeepSeek's API and vLLM's reasoning parsers return it (message.reasoning_content). Only the
 * first block at the start of the answer is reasoning; a prompt that already opened the block
 * (DeepSeek-R1's template ends with "<think>\n") starts inside it. Pure code (api.h). */
#include "engine/api/api.h"
#include "engine/api/api_priv.h"

#include "common/err.h"

#include <string.h>

#define API_THINK_OPEN  "<think>"
#define API_THINK_CLOSE "</think>"

void api_reasoning_init(struct api_reasoning *s, bool inside)
{
    memset(s, 0, sizeof(*s));
    s->state = inside ? API_REASONING_INSIDE : API_REASONING_START;
}

int api_reasoning_feed(struct api_reasoning *s, const char *text, size_t len, bool final,
                       struct buf *reasoning, struct buf *content)
{
    int rc = 0;
    /* pending = held bytes + text; at most sizeof(hold) are carried over between calls. */
    while (len || s->n_hold || final) {
        char tmp[sizeof(s->hold) + 256];
        size_t take = len < sizeof(tmp) - s->n_hold ? len : sizeof(tmp) - s->n_hold;
        memcpy(tmp, s->hold, s->n_hold);
        memcpy(tmp + s->n_hold, text, take);
        size_t n = s->n_hold + take;
        text += take;
        len -= take;
        s->n_hold = 0;
        bool last = final && len == 0;
        size_t used = 0; /* bytes of tmp consumed */
        while (used < n && rc == 0) {
            const char *p = tmp + used;
            size_t left = n - used;
            if (s->state == API_REASONING_START || s->state == API_REASONING_AFTER) {
                size_t w = 0;
                while (w < left && api_blank(p[w])) w++;
                if (s->state == API_REASONING_AFTER) { /* blanks after </think> are dropped */
                    used += w;
                    if (w < left) s->state = API_REASONING_CONTENT;
                    continue;
                }
                size_t k = strlen(API_THINK_OPEN), r = left - w;
                if (r >= k && !memcmp(p + w, API_THINK_OPEN, k)) {
                    used += w + k;
                    s->state = API_REASONING_INSIDE;
                } else if (!last && r < k && !memcmp(p + w, API_THINK_OPEN, r) &&
                           left <= sizeof(s->hold)) {
                    break; /* maybe the opening tag: hold */
                } else {
                    s->state = API_REASONING_CONTENT;
                }
            } else if (s->state == API_REASONING_INSIDE) {
                const char *close = api_find(p, left, API_THINK_CLOSE);
                if (close) {
                    rc = buf_append(reasoning, p, (size_t)(close - p));
                    used += (size_t)(close - p) + strlen(API_THINK_CLOSE);
                    s->state = API_REASONING_AFTER;
                } else {
                    size_t hold = last ? 0 : api_tag_tail(p, left, API_THINK_CLOSE);
                    rc = buf_append(reasoning, p, left - hold);
                    used += left - hold;
                    if (hold) break;
                }
            } else {
                rc = buf_append(content, p, left);
                used = n;
            }
        }
        if (rc) return rc;
        if (used < n) { /* held: a possible tag prefix, at most sizeof(hold) bytes */
            memcpy(s->hold, tmp + used, n - used);
            s->n_hold = n - used;
            if (!len) break;
        }
        if (last) {
            if (s->n_hold) { /* flush: a held prefix that never became a tag is text */
                struct buf *to = s->state == API_REASONING_INSIDE ? reasoning : content;
                rc = buf_append(to, s->hold, s->n_hold);
                s->n_hold = 0;
            }
            break;
        }
    }
    return rc;
}
