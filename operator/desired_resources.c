/* Sizes of an engine pod from its InferenceService (see desired.h): the model's size, the download
 * volume's limit and the default container resources. Pure: the spec and the settings in, JSON out.
 *
 * Memory: the weights are memory-mapped, so their page cache is charged to the container, next to
 * the KV cache (committed at start-up) and a working set for activations, buffers and the tokenizer.
 * An explicit spec.engine.kvCacheBytes K gives model + K + overhead. Without it the engine sizes the
 * KV cache itself, at most a quarter of the container's memory limit (kv_cache_ram_budget), so a
 * limit of (model + overhead) * 4/3 leaves exactly that quarter for it. No CPU limit: CFS quota
 * throttles the compute threads, and one throttled thread stalls the step of every sequence. */
#include "common/err.h"
#include "operator/desired.h"

#include <stdio.h>
#include <string.h>

#define MIB                (1ull << 20)
#define GIB                (1ull << 30)
#define MODEL_BYTES_MAX    DESIRED_BYTES_MAX
#define OVERHEAD_FIXED     (512 * MIB) /* activations, HTTP buffers, tokenizer, allocator slack */
#define OVERHEAD_MODEL_DIV 16          /* plus 1/16 of the model (dequantized scratch rows etc.) */
#define DOWNLOAD_SLACK_DIV 10          /* emptyDir sizeLimit = the byte limit + 10% */
#define TMP_VOLUME_LIMIT   "64Mi"      /* /tmp: the engine and fetch-model write nothing there */

/* Bytes as the API server writes a quantity: whole Gi when exact, else Mi rounded up. */
static void format_bytes(unsigned long long b, char *out, size_t outlen)
{
    if (b % GIB == 0)
        snprintf(out, outlen, "%lluGi", b / GIB);
    else
        snprintf(out, outlen, "%lluMi", (b + MIB - 1) / MIB);
}

int desired_sizes_compute(const json_t *isvc, const struct desired_settings *s,
                          struct desired_sizes *out, char *err, size_t errlen)
{
    const json_t *spec = json_object_get(isvc, "spec");
    const json_t *size = json_object_get(json_object_get(spec, "model"), "sizeBytes");
    const json_t *kv = json_object_get(json_object_get(spec, "engine"), "kvCacheBytes");
    struct desired_sizes sz = {0};
    if (size && (desired_quantity_bytes(size, &sz.model_bytes) != 0 || sz.model_bytes == 0 ||
                 sz.model_bytes > MODEL_BYTES_MAX)) {
        snprintf(err, errlen,
                 "spec.model.sizeBytes must be a byte quantity above 0 and at most "
                 "1Pi (e.g. 4Gi or 4294967296)");
        return ERR_INVAL;
    }
    if (kv && (desired_quantity_bytes(kv, &sz.kv_bytes) != 0 || sz.kv_bytes > MODEL_BYTES_MAX)) {
        snprintf(err, errlen,
                 "spec.engine.kvCacheBytes is not a byte quantity of at most 1Pi "
                 "(e.g. 2Gi)");
        return ERR_INVAL;
    }
    /* spec.engine.kvOffload (issue #22): tier-2 host memory counts as memory, like the KV cache. */
    const json_t *ko = json_object_get(json_object_get(spec, "engine"), "kvOffload");
    const json_t *host = json_object_get(ko, "hostBytes");
    const json_t *disk = json_object_get(ko, "disk");
    if (ko && !json_is_object(ko)) {
        snprintf(err, errlen, "spec.engine.kvOffload must be an object");
        return ERR_INVAL;
    }
    if (host && (desired_quantity_bytes(host, &sz.offload_host_bytes) != 0 ||
                 sz.offload_host_bytes > MODEL_BYTES_MAX)) {
        snprintf(err, errlen,
                 "spec.engine.kvOffload.hostBytes is not a byte quantity of at most 1Pi "
                 "(e.g. 8Gi)");
        return ERR_INVAL;
    }
    if (disk) {
        const json_t *db = json_object_get(disk, "sizeBytes");
        if (!json_is_object(disk) || !db || desired_quantity_bytes(db, &sz.offload_disk_bytes) ||
            sz.offload_disk_bytes < MIB || sz.offload_disk_bytes > MODEL_BYTES_MAX) {
            snprintf(err, errlen,
                     "spec.engine.kvOffload.disk.sizeBytes must be a byte quantity of 1Mi to 1Pi "
                     "(e.g. 50Gi)");
            return ERR_INVAL;
        }
        const json_t *vol = json_object_get(disk, "volume");
        const json_t *claim = json_object_get(vol, "claimName");
        if (vol && (!json_is_object(vol) ||
                    (claim && (!json_is_string(claim) || !*json_string_value(claim))) ||
                    (claim && json_object_get(vol, "emptyDir")))) {
            snprintf(err, errlen,
                     "spec.engine.kvOffload.disk.volume is either {\"emptyDir\": {}} or "
                     "{\"claimName\": \"<pvc>\"}");
            return ERR_INVAL;
        }
    }
    /* spec.engine.speculative.draftModel (issue #17): a second file, fetched like the model into
     * its own volume and mapped next to it. */
    struct desired_speculative sp;
    int rc = desired_speculative_parse(isvc, &sp, err, errlen);
    if (rc) return rc;
    if (sp.draft) {
        sz.draft = true;
        sz.draft_download = model_uri_is_download(&sp.draft_uri);
        sz.draft_model_bytes = sp.draft_bytes;
        if (sz.draft_download) {
            sz.draft_download_max_bytes = sp.draft_bytes ? sp.draft_bytes : s->download_limit_bytes;
            sz.draft_download_volume_bytes =
                sz.draft_download_max_bytes + sz.draft_download_max_bytes / DOWNLOAD_SLACK_DIV;
        }
    }
    sz.download_max_bytes = sz.model_bytes ? sz.model_bytes : s->download_limit_bytes;
    sz.download_volume_bytes = sz.download_max_bytes + sz.download_max_bytes / DOWNLOAD_SLACK_DIV;
    *out = sz;
    return 0;
}

static json_t *download_volume(const char *name, unsigned long long bytes)
{
    char limit[32];
    format_bytes(bytes, limit, sizeof(limit));
    return json_pack("{s:s, s:{s:s}}", "name", name, "emptyDir", "sizeLimit", limit);
}

json_t *desired_download_volume(const struct desired_sizes *sz)
{
    return download_volume("model", sz->download_volume_bytes);
}

json_t *desired_draft_download_volume(const struct desired_sizes *sz)
{
    return download_volume("draft-model", sz->draft_download_volume_bytes);
}

json_t *desired_tmp_volume(void)
{
    return json_pack("{s:s, s:{s:s}}", "name", "tmp", "emptyDir", "sizeLimit", TMP_VOLUME_LIMIT);
}

/* True when the user's resources name `res` under requests or limits: then no default for it, as a
 * default request above the user's limit (or the reverse) would make the pod invalid. */
static int user_sets(const json_t *user, const char *res)
{
    return json_object_get(json_object_get(user, "requests"), res) ||
           json_object_get(json_object_get(user, "limits"), res);
}

/* Sets requests[res] (and limits[res] when `limit`) to `value`, creating the maps as needed. */
static int set_default(json_t *r, const char *res, const char *value, int limit)
{
    static const char *const maps[] = {"requests", "limits"};
    for (int i = 0; i < (limit ? 2 : 1); i++) {
        json_t *m = json_object_get(r, maps[i]);
        if (!m) {
            m = json_object();
            if (!m || json_object_set_new(r, maps[i], m) != 0) return ERR_NOMEM;
        }
        if (json_object_set_new(m, res, json_string(value)) != 0) return ERR_NOMEM;
    }
    return 0;
}

int desired_resources(const json_t *isvc, const struct desired_sizes *sz, int downloads,
                      json_t **out)
{
    const json_t *spec = json_object_get(isvc, "spec");
    const json_t *user = json_object_get(spec, "resources");
    const json_t *threads = json_object_get(json_object_get(spec, "engine"), "threads");
    json_t *r = json_is_object(user) ? json_deep_copy(user) : json_object();
    if (!r) return ERR_NOMEM;
    int rc = 0;
    char q[32];
    if (!user_sets(user, "cpu")) {
        long long t = json_is_integer(threads) ? json_integer_value(threads) : 0;
        snprintf(q, sizeof(q), "%lld", t > 0 ? t : 1);
        rc = set_default(r, "cpu", q, 0);
    }
    /* A draft model's weights are mapped like the model's and count with them; a draft of unknown
     * size leaves memory without a default, as the model of unknown size does. */
    if (!rc && sz->model_bytes && (!sz->draft || sz->draft_model_bytes) &&
        !user_sets(user, "memory")) {
        unsigned long long m = sz->model_bytes + sz->draft_model_bytes,
                           overhead = OVERHEAD_FIXED + m / OVERHEAD_MODEL_DIV,
                           mem =
                               sz->kv_bytes ? m + sz->kv_bytes + overhead : (m + overhead) * 4 / 3;
        mem += sz->offload_host_bytes;
        format_bytes(mem, q, sizeof(q));
        rc = set_default(r, "memory", q, 1);
    }
    /* A download lands in an emptyDir, which counts as ephemeral storage: ask the scheduler for a
     * node with room for each download (the model's, the draft model's) whose size is known (the
     * operator's fallback limit is a backstop, far above most models, and would make pods
     * unschedulable). */
    unsigned long long disk =
        (downloads && sz->model_bytes ? sz->download_volume_bytes : 0) +
        (sz->draft_download && sz->draft_model_bytes ? sz->draft_download_volume_bytes : 0);
    if (!rc && disk && !user_sets(user, "ephemeral-storage")) {
        format_bytes(disk, q, sizeof(q));
        rc = set_default(r, "ephemeral-storage", q, 0);
    }
    if (rc) {
        json_decref(r);
        return rc;
    }
    *out = r;
    return 0;
}
