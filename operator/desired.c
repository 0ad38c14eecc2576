/* Desired Deployment, Service and NetworkPolicy for an InferenceService (see desired.h); sizes and
 * resources are desired_resources.c. */
#include "operator/desired.h"

#include "common/err.h"
#include "common/json_util.h"
#include "common/k8s/names.h"
#include "operator/model_uri.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GRACE_MARGIN_SECONDS 15 /* time for the engine to exit after its own drain deadline */
#define API_KEY_ENV          "CINFER_ENGINE_API_KEY" /* engine serve --api-key (cmd_serve.c) */
#define API_KEY_DEFAULT_KEY  "api-key"               /* the CRD's default secret key */

json_t *desired_labels(const char *name)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:s}", "app.kubernetes.io/name", "cinfer-engine",
                     "app.kubernetes.io/instance", name, "app.kubernetes.io/component", "engine",
                     "app.kubernetes.io/managed-by", "cinfer-operator",
                     "serving.cinfer.io/inferenceservice", name);
}

/* The selector is a stable subset of the labels: selectors of Deployments are immutable. */
static json_t *selector_labels(const char *name)
{
    return json_pack("{s:s, s:s}", "app.kubernetes.io/name", "cinfer-engine",
                     "serving.cinfer.io/inferenceservice", name);
}

int desired_selector(const char *name, char *out, size_t outlen)
{
    int n = snprintf(out, outlen,
                     "app.kubernetes.io/name=cinfer-engine,"
                     "serving.cinfer.io/inferenceservice=%s",
                     name);
    return n < 0 || (size_t)n >= outlen ? ERR_TOO_BIG : 0;
}

int desired_quantity_bytes(const json_t *q, unsigned long long *out)
{
    if (json_is_integer(q)) {
        if (json_integer_value(q) < 0) return ERR_RANGE;
        *out = (unsigned long long)json_integer_value(q);
        return 0;
    }
    const char *s = json_string_value(q);
    if (!s || !isdigit((unsigned char)s[0])) return ERR_INVAL;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno == ERANGE || !isfinite(v)) return ERR_RANGE;
    static const struct {
        const char *suffix;
        double mult;
    } units[] = {{"", 1},           {"k", 1e3},           {"M", 1e6},
                 {"G", 1e9},        {"T", 1e12},          {"Ki", 1024.0},
                 {"Mi", 1048576.0}, {"Gi", 1073741824.0}, {"Ti", 1099511627776.0}};
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(end, units[i].suffix) == 0) {
            double bytes = v * units[i].mult;
            if (bytes >= 1.8e19) return ERR_RANGE;
            *out = (unsigned long long)bytes;
            return 0;
        }
    }
    return ERR_INVAL;
}

/* Appends "--flag value" to args when spec.engine.<field> is an integer. */
static int add_int_flag(json_t *args, const json_t *engine, const char *field, const char *flag)
{
    json_t *v = json_object_get(engine, field);
    if (!json_is_integer(v)) return 0;
    char num[32];
    snprintf(num, sizeof(num), "%lld", (long long)json_integer_value(v));
    return json_array_append_new(args, json_string(flag)) ||
                   json_array_append_new(args, json_string(num))
               ? ERR_NOMEM
               : 0;
}

/* The engine's speculative-decoding flags from spec.engine.speculative (parsed): --speculative
 * whenever the field is set (so "none" stays none whatever the engine's default becomes),
 * --num-speculative-tokens when numTokens is, --draft-model with the draft's path in the pod. */
static int speculative_args(json_t *args, const struct desired_speculative *sp,
                            const char *draft_path)
{
    static const char *const names[] = {[DESIRED_SPEC_NONE] = "none",
                                        [DESIRED_SPEC_NGRAM] = "ngram",
                                        [DESIRED_SPEC_DRAFT] = "draft"};
    if (sp->method == DESIRED_SPEC_UNSET) return 0;
    if (json_array_append_new(args, json_string("--speculative")) ||
        json_array_append_new(args, json_string(names[sp->method])))
        return ERR_NOMEM;
    if (sp->method != DESIRED_SPEC_NONE && sp->num_tokens > 0) {
        char num[16];
        snprintf(num, sizeof(num), "%d", sp->num_tokens);
        if (json_array_append_new(args, json_string("--num-speculative-tokens")) ||
            json_array_append_new(args, json_string(num)))
            return ERR_NOMEM;
    }
    if (sp->method == DESIRED_SPEC_DRAFT &&
        (json_array_append_new(args, json_string("--draft-model")) ||
         json_array_append_new(args, json_string(draft_path))))
        return ERR_NOMEM;
    return 0;
}

static int engine_args(const json_t *isvc, const char *model_path, const struct desired_settings *s,
                       const struct desired_speculative *sp, const char *draft_path, json_t **out,
                       char *err, size_t errlen)
{
    const json_t *spec = json_object_get(isvc, "spec");
    const json_t *engine = json_object_get(spec, "engine");
    const char *name = json_util_str_at(isvc, "metadata", "name");
    const char *served = json_util_str_at(json_object_get(spec, "model"), "servedName", NULL);
    char grace[16], delay[16];
    snprintf(grace, sizeof(grace), "%d", s->shutdown_timeout_seconds);
    snprintf(delay, sizeof(delay), "%d", s->shutdown_delay_seconds);
    char port[16];
    snprintf(port, sizeof(port), "%d", DESIRED_ENGINE_PORT);
    json_t *args =
        json_pack("[s, s,s, s,s, s,s, s,s, s,s, s,s]", "serve", "--model", model_path, "--host",
                  "0.0.0.0", "--port", port, "--served-model-name", served ? served : name,
                  "--shutdown-delay-seconds", delay, "--shutdown-timeout", grace);
    if (!args) return ERR_NOMEM;
    int rc = add_int_flag(args, engine, "threads", "--threads");
    if (!rc) rc = add_int_flag(args, engine, "maxNumSeqs", "--max-num-seqs");
    if (!rc) rc = add_int_flag(args, engine, "maxNumBatchedTokens", "--max-num-batched-tokens");
    if (!rc) rc = add_int_flag(args, engine, "blockSize", "--block-size");
    if (!rc) rc = add_int_flag(args, engine, "contextLength", "--context-length");
    json_t *kv = json_object_get(engine, "kvCacheBytes");
    if (!rc && kv) {
        unsigned long long bytes;
        if (desired_quantity_bytes(kv, &bytes) != 0) {
            snprintf(err, errlen, "spec.engine.kvCacheBytes is not a byte quantity (e.g. 2Gi)");
            rc = ERR_INVAL;
        } else {
            char num[32];
            snprintf(num, sizeof(num), "%llu", bytes);
            rc = json_array_append_new(args, json_string("--kv-cache-bytes")) ||
                         json_array_append_new(args, json_string(num))
                     ? ERR_NOMEM
                     : 0;
        }
    }
    if (!rc && json_is_false(json_object_get(engine, "prefixCaching")))
        rc = json_array_append_new(args, json_string("--no-prefix-caching")) ? ERR_NOMEM : 0;
    if (!rc) rc = speculative_args(args, sp, draft_path);
    size_t i;
    json_t *extra;
    json_array_foreach(json_object_get(engine, "extraArgs"), i, extra)
    {
        if (!rc && json_is_string(extra)) rc = json_array_append(args, extra) ? ERR_NOMEM : 0;
    }
    if (rc) {
        json_decref(args);
        return rc;
    }
    *out = args;
    return 0;
}

#define KV_OFFLOAD_DIR "/var/cache/cinfer/kv"

/* Appends "--flag <bytes>" to args. */
static int add_bytes_flag(json_t *args, const char *flag, unsigned long long bytes)
{
    char num[32];
    snprintf(num, sizeof(num), "%llu", bytes);
    return json_array_append_new(args, json_string(flag)) ||
                   json_array_append_new(args, json_string(num))
               ? ERR_NOMEM
               : 0;
}

/* spec.engine.kvOffload (validated by desired_sizes_compute): the engine's offload flags, and for
 * tier 3 the volume mounted at KV_OFFLOAD_DIR: a PVC (shared by the replicas when it is
 * ReadWriteMany) or an emptyDir limited to the size plus 10%. */
static int kv_offload_spec(const json_t *engine, const struct desired_sizes *sz, json_t *args,
                           json_t *volumes, json_t *mounts)
{
    int rc = 0;
    if (sz->offload_host_bytes)
        rc = add_bytes_flag(args, "--kv-offload-bytes", sz->offload_host_bytes);
    if (rc || !sz->offload_disk_bytes) return rc;
    const json_t *vol =
        json_object_get(json_object_get(json_object_get(engine, "kvOffload"), "disk"), "volume");
    const char *claim = json_util_str_at(vol, "claimName", NULL);
    json_t *v;
    if (claim) {
        v = json_pack("{s:s, s:{s:s}}", "name", "kv-offload", "persistentVolumeClaim", "claimName",
                      claim);
    } else {
        char limit[32];
        unsigned long long b = sz->offload_disk_bytes + sz->offload_disk_bytes / 10;
        snprintf(limit, sizeof(limit), "%lluMi", (b + (1ull << 20) - 1) >> 20);
        v = json_pack("{s:s, s:{s:s}}", "name", "kv-offload", "emptyDir", "sizeLimit", limit);
    }
    if (json_array_append_new(volumes, v) ||
        json_array_append_new(
            mounts, json_pack("{s:s, s:s}", "name", "kv-offload", "mountPath", KV_OFFLOAD_DIR)) ||
        json_array_append_new(args, json_string("--kv-offload-dir")) ||
        json_array_append_new(args, json_string(KV_OFFLOAD_DIR)))
        return ERR_NOMEM;
    return add_bytes_flag(args, "--kv-offload-dir-bytes", sz->offload_disk_bytes);
}

static json_t *container_security_context(void)
{
    return json_pack("{s:b, s:b, s:b, s:{s:[s]}}", "allowPrivilegeEscalation", 0,
                     "readOnlyRootFilesystem", 1, "runAsNonRoot", 1, "capabilities", "drop", "ALL");
}

static json_t *http_probe(const char *path, int period, int failures)
{
    return json_pack("{s:{s:s, s:s}, s:i, s:i, s:i}", "httpGet", "path", path, "port", "http",
                     "periodSeconds", period, "failureThreshold", failures, "timeoutSeconds", 2);
}

/* A fetch-model init container for an https:// or hf:// model: `src` (borrowed) is spec.model or
 * spec.engine.speculative.draftModel (uri, sha256, tokenSecretRef); it writes `path` in the
 * emptyDir `volume` mounted at `dir`, at most `max_bytes`. */
static json_t *fetch_container(const char *name, const json_t *src, const char *volume,
                               const char *dir, const char *path, unsigned long long max_bytes,
                               const char *image, const char *pull)
{
    char max[32];
    snprintf(max, sizeof(max), "%llu", max_bytes);
    json_t *args =
        json_pack("[s, s, s, s, s]", "fetch-model", json_string_value(json_object_get(src, "uri")),
                  path, "--max-bytes", max);
    const char *sha = json_util_str_at(src, "sha256", NULL);
    if (args && sha) {
        json_array_append_new(args, json_string("--sha256"));
        json_array_append_new(args, json_string(sha));
    }
    json_t *env = json_array();
    const json_t *ref = json_object_get(src, "tokenSecretRef");
    if (env && ref) {
        const char *key = json_util_str_at(ref, "key", NULL);
        json_array_append_new(env,
                              json_pack("{s:s, s:{s:{s:s, s:s}}}", "name", "HF_TOKEN", "valueFrom",
                                        "secretKeyRef", "name", json_util_str_at(ref, "name", NULL),
                                        "key", key ? key : "HF_TOKEN"));
    }
    return json_pack("{s:s, s:s, s:s, s:[s], s:o, s:o, s:[{s:s, s:s}, {s:s, s:s}], s:o}", "name",
                     name, "image", image, "imagePullPolicy", pull, "command", "cinfer-engine",
                     "args", args, "env", env, "volumeMounts", "name", volume, "mountPath", dir,
                     "name", "tmp", "mountPath", "/tmp", "securityContext",
                     container_security_context());
}

/* A verify-model init container (`name`) for a model that is not downloaded (file://, pvc://) when
 * the spec gives its sha256: fetch-model --verify hashes the file the engine is about to map and
 * fails the pod (reason ModelVerifyFailed) on a mismatch. `mounts` (borrowed) are the engine's. */
static json_t *verify_container(const char *name, const char *sha, const char *image,
                                const char *pull, const char *model_path, const json_t *mounts)
{
    return json_pack("{s:s, s:s, s:s, s:[s], s:[s, s, s, s, s], s:O, s:o}", "name", name, "image",
                     image, "imagePullPolicy", pull, "command", "cinfer-engine", "args",
                     "fetch-model", "--verify", model_path, "--sha256", sha, "volumeMounts", mounts,
                     "securityContext", container_security_context());
}

/* The engine's environment: spec.engine.env, then the API key from its Secret
 * (spec.security.apiKeySecretRef) as CINFER_ENGINE_API_KEY, never in args (args show in ps and in
 * the pod spec; the kubelet resolves the Secret, the operator never reads it). *out is new. */
static int engine_env(const json_t *spec, json_t **out, char *err, size_t errlen)
{
    const json_t *user = json_object_get(json_object_get(spec, "engine"), "env");
    const json_t *ref = json_object_get(json_object_get(spec, "security"), "apiKeySecretRef");
    const char *ref_name = json_string_value(json_object_get(ref, "name"));
    const char *ref_key = json_string_value(json_object_get(ref, "key"));
    size_t i;
    json_t *e;
    if (ref && (!ref_name || !*ref_name)) {
        snprintf(err, errlen, "spec.security.apiKeySecretRef.name is missing");
        return ERR_INVAL;
    }
    json_array_foreach(user, i, e)
    {
        const char *n = json_string_value(json_object_get(e, "name"));
        if (ref && n && strcmp(n, API_KEY_ENV) == 0) {
            snprintf(err, errlen,
                     "spec.engine.env sets %s, which spec.security.apiKeySecretRef provides",
                     API_KEY_ENV);
            return ERR_INVAL;
        }
    }
    json_t *env = json_is_array(user) ? json_deep_copy(user) : json_array();
    if (env && ref &&
        json_array_append_new(env, json_pack("{s:s, s:{s:{s:s, s:s, s:b}}}", "name", API_KEY_ENV,
                                             "valueFrom", "secretKeyRef", "name", ref_name, "key",
                                             ref_key ? ref_key : API_KEY_DEFAULT_KEY, "optional",
                                             0)) != 0) {
        json_decref(env);
        env = NULL;
    }
    if (!env) return ERR_NOMEM;
    *out = env;
    return 0;
}

/* Volumes and the engine's mounts for the model source; sets *model_path (static or in `path`). */
static int model_volumes(const struct model_uri *m, const struct desired_sizes *sz, json_t *volumes,
                         json_t *mounts, char *path, size_t pathlen)
{
    int rc = 0;
    switch (m->kind) {
    case MODEL_URI_FILE: snprintf(path, pathlen, "%s", m->path); break;
    case MODEL_URI_PVC:
        rc |= json_array_append_new(volumes, json_pack("{s:s, s:{s:s, s:b}}", "name", "model",
                                                       "persistentVolumeClaim", "claimName",
                                                       m->claim, "readOnly", 1));
        rc |=
            json_array_append_new(mounts, json_pack("{s:s, s:s, s:b}", "name", "model", "mountPath",
                                                    DESIRED_MODEL_DIR, "readOnly", 1));
        snprintf(path, pathlen, "%s/%s", DESIRED_MODEL_DIR, m->path);
        break;
    case MODEL_URI_HTTPS:
    case MODEL_URI_HF:
        rc |= json_array_append_new(volumes, desired_download_volume(sz));
        rc |=
            json_array_append_new(mounts, json_pack("{s:s, s:s, s:b}", "name", "model", "mountPath",
                                                    DESIRED_MODEL_DIR, "readOnly", 1));
        snprintf(path, pathlen, "%s/model.gguf", DESIRED_MODEL_DIR);
        break;
    }
    rc |= json_array_append_new(volumes, desired_tmp_volume());
    rc |=
        json_array_append_new(mounts, json_pack("{s:s, s:s}", "name", "tmp", "mountPath", "/tmp"));
    return rc ? ERR_NOMEM : 0;
}

static bool path_under(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == 0);
}

/* A file:// model or draft inside the directory where the other one's volume is mounted would be
 * hidden by that mount and missing when the engine starts: refused with the reason. */
static int check_shadowing(const struct model_uri *m, const struct desired_speculative *sp,
                           char *err, size_t errlen)
{
    const struct model_uri *d = &sp->draft_uri;
    bool draft_own_volume = model_uri_is_download(d) ||
                            (d->kind == MODEL_URI_PVC &&
                             !(m->kind == MODEL_URI_PVC && strcmp(m->claim, d->claim) == 0));
    if (d->kind == MODEL_URI_FILE && m->kind != MODEL_URI_FILE &&
        path_under(d->path, DESIRED_MODEL_DIR)) {
        snprintf(err, errlen,
                 "spec.engine.speculative.draftModel.uri: %s is hidden by the model's volume at "
                 "%s; use a path outside it (or pvc:// on the model's claim)",
                 d->path, DESIRED_MODEL_DIR);
        return ERR_INVAL;
    }
    if (m->kind == MODEL_URI_FILE && draft_own_volume && path_under(m->path, DESIRED_DRAFT_DIR)) {
        snprintf(err, errlen,
                 "spec.model.uri: %s is hidden by the draft model's volume at %s; use a path "
                 "outside it",
                 m->path, DESIRED_DRAFT_DIR);
        return ERR_INVAL;
    }
    return 0;
}

/* Volumes and the engine's mounts for the draft model; sets *path. A pvc:// draft on the model's
 * own claim is read through the model's mount, anything else gets the volume "draft-model" at
 * DESIRED_DRAFT_DIR: its claim read-only, or the emptyDir fetch-model downloads into. */
static int draft_volumes(const struct desired_speculative *sp, const struct model_uri *model,
                         const struct desired_sizes *sz, json_t *volumes, json_t *mounts,
                         char *path, size_t pathlen)
{
    const struct model_uri *d = &sp->draft_uri;
    int rc = 0;
    switch (d->kind) {
    case MODEL_URI_FILE: snprintf(path, pathlen, "%s", d->path); return 0;
    case MODEL_URI_PVC:
        if (model->kind == MODEL_URI_PVC && strcmp(model->claim, d->claim) == 0) {
            snprintf(path, pathlen, "%s/%s", DESIRED_MODEL_DIR, d->path);
            return 0;
        }
        rc |= json_array_append_new(volumes, json_pack("{s:s, s:{s:s, s:b}}", "name", "draft-model",
                                                       "persistentVolumeClaim", "claimName",
                                                       d->claim, "readOnly", 1));
        snprintf(path, pathlen, "%s/%s", DESIRED_DRAFT_DIR, d->path);
        break;
    case MODEL_URI_HTTPS:
    case MODEL_URI_HF:
        rc |= json_array_append_new(volumes, desired_draft_download_volume(sz));
        snprintf(path, pathlen, "%s/%s", DESIRED_DRAFT_DIR, DESIRED_DRAFT_FILE);
        break;
    }
    rc |= json_array_append_new(mounts, json_pack("{s:s, s:s, s:b}", "name", "draft-model",
                                                  "mountPath", DESIRED_DRAFT_DIR, "readOnly", 1));
    return rc ? ERR_NOMEM : 0;
}

/* Copies spec.<field> into the pod spec when present (fields the operator passes through as-is). */
static void copy_field(json_t *dst, const json_t *spec, const char *field)
{
    json_t *v = json_object_get(spec, field);
    if (v) json_object_set(dst, field, v);
}

/* labels/annotations for the pod template: the user's, then ours (ours win). */
static json_t *merged_map(const json_t *user, json_t *ours)
{
    json_t *m = json_object();
    if (!m || !ours) {
        json_decref(m);
        json_decref(ours);
        return NULL;
    }
    if (json_is_object(user)) json_object_update(m, (json_t *)user);
    json_object_update(m, ours);
    json_decref(ours);
    return m;
}

static json_t *owner_references(const json_t *isvc)
{
    return json_pack(
        "[{s:s, s:s, s:s, s:s, s:b, s:b}]", "apiVersion", DESIRED_API_VERSION, "kind", DESIRED_KIND,
        "name", json_util_str_at(isvc, "metadata", "name"), "uid",
        json_util_str_at(isvc, "metadata", "uid") ? json_util_str_at(isvc, "metadata", "uid") : "",
        "controller", 1, "blockOwnerDeletion", 1);
}

static json_t *object_meta(const json_t *isvc)
{
    const char *name = json_util_str_at(isvc, "metadata", "name");
    return json_pack("{s:s, s:s*, s:o, s:o}", "name", name, "namespace",
                     json_util_str_at(isvc, "metadata", "namespace"), "labels",
                     desired_labels(name), "ownerReferences", owner_references(isvc));
}

int desired_deployment(const json_t *isvc, const struct desired_settings *s, json_t **out,
                       char *err, size_t errlen)
{
    const json_t *spec = json_object_get(isvc, "spec");
    const json_t *model = json_object_get(spec, "model");
    const json_t *engine = json_object_get(spec, "engine");
    const char *name = json_util_str_at(isvc, "metadata", "name");
    if (!name) {
        snprintf(err, errlen, "metadata.name is missing");
        return ERR_INVAL;
    }
    struct model_uri m;
    int rc = model_uri_parse(json_util_str_at(model, "uri", NULL), &m, err, errlen);
    if (rc) return rc;

    const char *image = json_util_str_at(engine, "image", NULL);
    const char *pull = json_util_str_at(engine, "imagePullPolicy", NULL);
    if (!image) image = s->engine_image;
    if (!pull) pull = s->image_pull_policy ? s->image_pull_policy : "IfNotPresent";

    struct desired_sizes sz;
    struct desired_speculative sp;
    json_t *volumes = json_array(), *mounts = json_array(), *args = NULL, *env = NULL;
    json_t *resources = NULL, *init = NULL, *dep = NULL;
    char model_path[4200], draft_path[4200] = "";
    rc = desired_sizes_compute(isvc, s, &sz, err, errlen);
    if (!rc) rc = desired_speculative_parse(isvc, &sp, err, errlen);
    if (!rc)
        rc = volumes && mounts
                 ? model_volumes(&m, &sz, volumes, mounts, model_path, sizeof(model_path))
                 : ERR_NOMEM;
    if (!rc && sp.draft) rc = check_shadowing(&m, &sp, err, errlen);
    if (!rc && sp.draft)
        rc = draft_volumes(&sp, &m, &sz, volumes, mounts, draft_path, sizeof(draft_path));
    if (!rc) rc = engine_args(isvc, model_path, s, &sp, draft_path, &args, err, errlen);
    if (!rc) rc = kv_offload_spec(engine, &sz, args, volumes, mounts);
    if (!rc) rc = engine_env(spec, &env, err, errlen);
    if (!rc) rc = desired_resources(isvc, &sz, model_uri_is_download(&m), &resources);
    if (rc) goto out;
    /* Downloads are verified by fetch-model; a model already on disk by verify-model. The draft
     * model the same way, after the model. */
    const char *sha = json_string_value(json_object_get(model, "sha256"));
    const char *dsha = sp.draft ? json_string_value(json_object_get(sp.draft, "sha256")) : NULL;
    init = json_array();
    rc = init ? 0 : ERR_NOMEM;
    if (!rc && model_uri_is_download(&m))
        rc = json_array_append_new(init,
                                   fetch_container("fetch-model", model, "model", DESIRED_MODEL_DIR,
                                                   model_path, sz.download_max_bytes, image, pull));
    else if (!rc && sha)
        rc = json_array_append_new(
            init, verify_container("verify-model", sha, image, pull, model_path, mounts));
    if (!rc && sz.draft_download)
        rc = json_array_append_new(
            init, fetch_container("fetch-draft-model", sp.draft, "draft-model", DESIRED_DRAFT_DIR,
                                  draft_path, sz.draft_download_max_bytes, image, pull));
    else if (!rc && dsha)
        rc = json_array_append_new(
            init, verify_container("verify-draft-model", dsha, image, pull, draft_path, mounts));
    if (rc) { /* never a pod that skips its check */
        rc = ERR_NOMEM;
        snprintf(err, errlen, "out of memory building the init containers");
        goto out;
    }
    if (json_array_size(init) == 0) {
        json_decref(init);
        init = NULL;
    }

    json_t *container = json_pack(
        "{s:s, s:s, s:s, s:[s], s:o, s:[{s:s, s:i, s:s}], s:o, s:o, s:o, s:o, s:o, s:o}", "name",
        "engine", "image", image, "imagePullPolicy", pull, "command", "cinfer-engine", "args", args,
        "ports", "name", "http", "containerPort", DESIRED_ENGINE_PORT, "protocol", "TCP", "env",
        env, "volumeMounts", mounts, "readinessProbe", http_probe("/health", 5, 3), "livenessProbe",
        http_probe("/live", 10, 6), "resources", resources, "securityContext",
        container_security_context());
    args = mounts = env = resources = NULL; /* stolen by json_pack, even on failure */

    json_t *pod_labels = merged_map(json_object_get(spec, "labels"), desired_labels(name));
    json_t *pod_annotations =
        merged_map(json_object_get(spec, "annotations"),
                   json_pack("{s:s, s:s, s:s}", "prometheus.io/scrape", "true",
                             "prometheus.io/port", "8000", "prometheus.io/path", "/metrics"));
    /* Termination: the pod leaves its Service's EndpointSlices as soon as it is deleted, while the
     * kubelet sends SIGTERM at the same time; the engine then serves on for the shutdown delay
     * (with /health at 503, so consumers of terminating-but-serving endpoints stop too) until
     * kube-proxy, the router and ingresses have caught up, then refuses new requests and drains
     * in-flight ones for the shutdown timeout. The grace period covers both plus a margin to exit.
     * There is no preStop hook: a preStop sleep would do the delay's job without the 503 and only
     * add to the time; its exec form needs a sleep binary in whatever spec.engine.image is, and
     * the lifecycle sleep action is on by default only from Kubernetes 1.30. */
    json_t *pod_spec = json_pack(
        "{s:[o], s:o, s:I, s:{s:b, s:i, s:i, s:i, s:{s:s}}, s:b}", "containers", container,
        "volumes", volumes, "terminationGracePeriodSeconds",
        (json_int_t)s->shutdown_delay_seconds + s->shutdown_timeout_seconds + GRACE_MARGIN_SECONDS,
        "securityContext", "runAsNonRoot", 1, "runAsUser", 65532, "runAsGroup", 65532, "fsGroup",
        65532, "seccompProfile", "type", "RuntimeDefault", "automountServiceAccountToken", 0);
    volumes = NULL;
    if (pod_spec && init) {
        json_object_set_new(pod_spec, "initContainers", init);
        init = NULL;
    }
    if (pod_spec) {
        static const char *const passthrough[] = {"nodeSelector",      "tolerations",
                                                  "affinity",          "serviceAccountName",
                                                  "priorityClassName", "imagePullSecrets"};
        for (size_t i = 0; i < sizeof(passthrough) / sizeof(passthrough[0]); i++)
            copy_field(pod_spec, spec, passthrough[i]);
    }
    json_t *replicas = json_object_get(spec, "replicas");
    dep = json_pack(
        "{s:s, s:s, s:o, s:{s:I, s:I, s:I, s:{s:o}, s:{s:s, s:{s:i, s:i}}, "
        "s:{s:{s:o, s:o}, s:o}}}",
        "apiVersion", "apps/v1", "kind", "Deployment", "metadata", object_meta(isvc), "spec",
        "replicas", json_is_integer(replicas) ? json_integer_value(replicas) : 1,
        "revisionHistoryLimit", (json_int_t)3, "progressDeadlineSeconds", (json_int_t)900,
        "selector", "matchLabels", selector_labels(name), "strategy", "type", "RollingUpdate",
        "rollingUpdate", "maxSurge", 1, "maxUnavailable", 0, "template", "metadata", "labels",
        pod_labels, "annotations", pod_annotations, "spec", pod_spec);
    rc = dep ? 0 : ERR_NOMEM;
    if (rc) snprintf(err, errlen, "out of memory building the Deployment");
out:
    json_decref(volumes);
    json_decref(mounts);
    json_decref(args);
    json_decref(env);
    json_decref(resources);
    json_decref(init);
    if (!rc) *out = dep;
    return rc;
}

int desired_service(const json_t *isvc, json_t **out)
{
    const char *name = json_util_str_at(isvc, "metadata", "name");
    if (!name) return ERR_INVAL;
    json_t *svc = json_pack("{s:s, s:s, s:o, s:{s:s, s:o, s:[{s:s, s:i, s:s, s:s}]}}", "apiVersion",
                            "v1", "kind", "Service", "metadata", object_meta(isvc), "spec", "type",
                            "ClusterIP", "selector", selector_labels(name), "ports", "name", "http",
                            "port", DESIRED_SERVICE_PORT, "targetPort", "http", "protocol", "TCP");
    if (!svc) return ERR_NOMEM;
    *out = svc;
    return 0;
}

/* Appends namespace s[0..n) to the array `names` unless it is there; ERR_INVAL when malformed. */
static int add_namespace(json_t *names, const char *s, size_t n, const char *what, char *err,
                         size_t errlen)
{
    if (!k8s_name_is_dns_label(s, n)) {
        snprintf(err, errlen, "%s: \"%.*s\" is not a namespace name", what, (int)(n > 63 ? 63 : n),
                 s);
        return ERR_INVAL;
    }
    size_t i;
    json_t *v;
    json_array_foreach(names, i, v)
    {
        if (strlen(json_string_value(v)) == n && memcmp(json_string_value(v), s, n) == 0) return 0;
    }
    return json_array_append_new(names, json_stringn(s, n)) ? ERR_NOMEM : 0;
}

/* A peer: pods matching `pod_labels` (new; NULL = every pod) in namespace `ns`. */
static json_t *peer_in(const char *ns, json_t *pod_labels)
{
    json_t *p = json_pack("{s:{s:{s:s}}}", "namespaceSelector", "matchLabels",
                          "kubernetes.io/metadata.name", ns);
    if (p && pod_labels)
        json_object_set_new(p, "podSelector", json_pack("{s:o}", "matchLabels", pod_labels));
    else
        json_decref(pod_labels);
    return p;
}

int desired_network_policy(const json_t *isvc, const struct desired_settings *s, json_t **out,
                           char *err, size_t errlen)
{
    const json_t *meta = json_object_get(isvc, "metadata");
    const char *name = json_string_value(json_object_get(meta, "name"));
    const char *sys = s->system_namespace;
    if (!name) {
        snprintf(err, errlen, "metadata.name is missing");
        return ERR_INVAL;
    }
    if (!sys || !k8s_name_is_dns_label(sys, strlen(sys))) {
        snprintf(err, errlen, "the operator's --network-policy-namespace is not a namespace");
        return ERR_INVAL;
    }
    json_t *names = json_array(), *from = NULL, *np = NULL;
    int rc = names ? 0 : ERR_NOMEM;
    const char *list = s->allowed_namespaces;
    for (const char *p = list && *list ? list : NULL; !rc && p;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        rc = add_namespace(names, p, n, "the operator's --network-policy-allow-namespaces", err,
                           errlen);
        p = comma ? comma + 1 : NULL;
    }
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(json_object_get(json_object_get(isvc, "spec"), "security"),
                                       "allowedNamespaces"),
                       i, v)
    {
        const char *ns = json_string_value(v);
        if (!rc)
            rc = add_namespace(names, ns ? ns : "", ns ? strlen(ns) : 0,
                               "spec.security.allowedNamespaces", err, errlen);
    }
    if (rc) goto out;
    from = json_pack("[o, o]",
                     peer_in(sys, json_pack("{s:s}", "app.kubernetes.io/name", "cinfer-router")),
                     peer_in(sys, json_pack("{s:s, s:s}", "app.kubernetes.io/component",
                                            "autoscaler", "app.kubernetes.io/part-of", "cinfer")));
    json_array_foreach(names, i, v)
    {
        if (from && json_array_append_new(from, peer_in(json_string_value(v), NULL)) != 0) {
            json_decref(from);
            from = NULL;
        }
    }
    np = from
             ? json_pack("{s:s, s:s, s:o, s:{s:{s:o}, s:[s], s:[{s:o, s:[{s:s, s:i}]}]}}",
                         "apiVersion", "networking.k8s.io/v1", "kind", "NetworkPolicy", "metadata",
                         object_meta(isvc), "spec", "podSelector", "matchLabels",
                         selector_labels(name), "policyTypes", "Ingress", "ingress", "from",
                         json_incref(from), "ports", "protocol", "TCP", "port", DESIRED_ENGINE_PORT)
             : NULL;
    rc = np ? 0 : ERR_NOMEM;
out:
    json_decref(names);
    json_decref(from);
    if (!rc) *out = np;
    return rc;
}
