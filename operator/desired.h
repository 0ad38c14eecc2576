/* Desired state: the Deployment and Service an InferenceService should own, as pure functions of the
 * InferenceService object and the operator's settings (no I/O, no clock). The reconciler applies them
 * with server-side apply, so the fields built here are exactly the fields the operator owns; anything
 * else on the live objects (fields set by people or other controllers) is left alone. */
#ifndef CINFER_OPERATOR_DESIRED_H
#define CINFER_OPERATOR_DESIRED_H

#include "operator/model_uri.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define DESIRED_ENGINE_PORT   8000 /* engine container port "http" (ARCHITECTURE.md) */
#define DESIRED_SERVICE_PORT  80   /* the Service's port, so status.url needs no port */
#define DESIRED_MODEL_DIR     "/models"
#define DESIRED_BYTES_MAX     (1ull << 50)   /* 1 PiB: any size above is a typo */
#define DESIRED_DRAFT_DIR     "/draft-model" /* the draft model's own volume, when it has one */
#define DESIRED_DRAFT_FILE    "draft.gguf"   /* a downloaded draft model, in DESIRED_DRAFT_DIR */
#define DESIRED_FIELD_MANAGER "cinfer-operator"
#define DESIRED_API_VERSION   "serving.cinfer.io/v1alpha1"
#define DESIRED_KIND          "InferenceService"

struct desired_settings {
    const char *engine_image;      /* used when spec.engine.image is unset */
    const char *image_pull_policy; /* used when spec.engine.imagePullPolicy is unset */
    int shutdown_timeout_seconds; /* engine --shutdown-timeout; the pod's grace period adds margin */
    /* Engine --shutdown-delay-seconds: after SIGTERM the engine keeps serving (with /health at 503)
     * while the pod's removal from EndpointSlices reaches kube-proxy, the router and ingresses;
     * the grace period is delay + timeout + margin. It plays the part of a preStop sleep, which
     * would only add to it (see desired_deployment). */
    int shutdown_delay_seconds;
    bool network_policy;            /* a NetworkPolicy per InferenceService (else delete ours) */
    const char *system_namespace;   /* namespace of the router and the autoscaler (policy peers) */
    const char *allowed_namespaces; /* "a,b": namespaces every service admits, or NULL/"" */
    unsigned long long download_limit_bytes; /* a download's limit without spec.model.sizeBytes */
};

/* An engine pod's sizes from spec.model.sizeBytes and spec.engine.kvCacheBytes. */
struct desired_sizes {
    unsigned long long model_bytes;           /* 0 = unknown */
    unsigned long long kv_bytes;              /* 0 = the engine's automatic budget */
    unsigned long long download_max_bytes;    /* fetch-model --max-bytes */
    unsigned long long download_volume_bytes; /* its emptyDir's sizeLimit (+10%) */
    unsigned long long offload_host_bytes;    /* spec.engine.kvOffload.hostBytes (0 = none) */
    unsigned long long offload_disk_bytes;    /* spec.engine.kvOffload.disk.sizeBytes (0 = none) */
    /* spec.engine.speculative.draftModel (all 0 without a draft model) */
    bool draft;                                     /* a draft model is configured */
    bool draft_download;                            /* ... and fetched at pod start */
    unsigned long long draft_model_bytes;           /* its sizeBytes (0 = unknown) */
    unsigned long long draft_download_max_bytes;    /* its fetch-model --max-bytes */
    unsigned long long draft_download_volume_bytes; /* its emptyDir's sizeLimit (+10%) */
};

/* spec.engine.speculative, parsed and validated (issue #17): the engine's --speculative,
 * --num-speculative-tokens and --draft-model. */
enum desired_spec_method {
    DESIRED_SPEC_UNSET, /* no spec.engine.speculative: no flags, the engine's default */
    DESIRED_SPEC_NONE,
    DESIRED_SPEC_NGRAM,
    DESIRED_SPEC_DRAFT,
};

struct desired_speculative {
    enum desired_spec_method method;
    int num_tokens;                 /* 1..16; 0 = unset (the engine's default) */
    const json_t *draft;            /* spec.engine.speculative.draftModel (borrowed), or NULL */
    struct model_uri draft_uri;     /* parsed draftModel.uri (borrows from the isvc) */
    unsigned long long draft_bytes; /* draftModel.sizeBytes; 0 = unknown */
};

/* The label set every owned object carries (ARCHITECTURE.md "Labels"); returns new or NULL. */
json_t *desired_labels(const char *isvc_name);
/* Writes the engine pods' label selector ("k=v,k=v") for status.selector / the scale subresource.
 * Returns 0 or ERR_TOO_BIG. */
int desired_selector(const char *isvc_name, char *out, size_t outlen);

/* Builds the Deployment for `isvc` (borrowed). *out is new. ERR_INVAL with a reason in `err` when
 * the spec cannot be turned into pods (bad model URI, bad quantity); ERR_NOMEM otherwise. */
int desired_deployment(const json_t *isvc, const struct desired_settings *s, json_t **out,
                       char *err, size_t errlen);
/* Builds the ClusterIP Service for `isvc` (borrowed). *out is new. */
int desired_service(const json_t *isvc, json_t **out);

/* Builds the NetworkPolicy for `isvc` (borrowed): ingress to its engine pods' port only from the
 * router (app.kubernetes.io/name=cinfer-router) and the autoscaler (app.kubernetes.io/component=
 * autoscaler, part-of=cinfer, scraping /metrics) in s->system_namespace, and from every pod of
 * the namespaces in spec.security.allowedNamespaces and s->allowed_namespaces. The kubelet's
 * probes come from the pod's own node, which NetworkPolicy implementations admit (Kubernetes:
 * "traffic to and from the node where a Pod is running is always allowed"). Egress is not
 * limited (downloads). *out is new. ERR_INVAL with a reason in `err` for a bad namespace name. */
int desired_network_policy(const json_t *isvc, const struct desired_settings *s, json_t **out,
                           char *err, size_t errlen);

/* Fills *out from the spec (validated: ERR_INVAL with a reason in `err`) and the settings. */
int desired_sizes_compute(const json_t *isvc, const struct desired_settings *s,
                          struct desired_sizes *out, char *err, size_t errlen);
/* The engine container's resources: spec.resources (borrowed, copied) plus a default for each of
 * cpu, memory and ephemeral-storage that it names under neither requests nor limits: cpu request
 * spec.engine.threads (or 1), no cpu limit; memory request = limit from the model and KV sizes
 * (only when sizeBytes is known, and a draft model's too: its weights count with the model's);
 * ephemeral-storage request = the download volumes of known size (the model's when `downloads`,
 * the draft model's). *out is new; ERR_NOMEM. */
int desired_resources(const json_t *isvc, const struct desired_sizes *sz, int downloads,
                      json_t **out);
/* The download emptyDir "model" with its sizeLimit, and the "tmp" emptyDir; new or NULL. */
json_t *desired_download_volume(const struct desired_sizes *sz);
/* The draft model's download emptyDir "draft-model" with its sizeLimit; new or NULL. */
json_t *desired_draft_download_volume(const struct desired_sizes *sz);
json_t *desired_tmp_volume(void);

/* Parses spec.engine.speculative of `isvc` (borrowed; *out borrows from it and must not outlive it).
 * Checks what the CRD checks (method none|ngram|draft, numTokens 1..16, draftModel present exactly
 * with method draft, its uri, sha256, sizeBytes and tokenSecretRef) so that an object that skipped
 * the API server's validation still gets a reason naming the field. Returns 0, or ERR_INVAL with
 * the reason in `err`. Pure; any thread. */
int desired_speculative_parse(const json_t *isvc, struct desired_speculative *out, char *err,
                              size_t errlen);

/* Converts a Kubernetes quantity ("2Gi", "1500M", "123") or JSON integer to bytes.
 * Returns 0, ERR_INVAL or ERR_RANGE. */
int desired_quantity_bytes(const json_t *q, unsigned long long *out);

#endif
