/* Desired state: the Deployment and Service an InferenceService should own, as pure functions of the
 * InferenceService object and the operator's settings (no I/O, no clock). The reconciler applies them
 * with server-side apply, so the fields built here are exactly the fields the operator owns; anything
 * else on the live objects (fields set by people or other controllers) is left alone. */
#ifndef CINFER_OPERATOR_DESIRED_H
#define CINFER_OPERATOR_DESIRED_H

#include <jansson.h>
#include <stddef.h>

#define DESIRED_ENGINE_PORT   8000 /* engine container port "http" (ARCHITECTURE.md) */
#define DESIRED_SERVICE_PORT  80   /* the Service's port, so status.url needs no port */
#define DESIRED_MODEL_DIR     "/models"
#define DESIRED_FIELD_MANAGER "cinfer-operator"
#define DESIRED_API_VERSION   "serving.cinfer.io/v1alpha1"
#define DESIRED_KIND          "InferenceService"

struct desired_settings {
    const char *engine_image;      /* used when spec.engine.image is unset */
    const char *image_pull_policy; /* used when spec.engine.imagePullPolicy is unset */
    int shutdown_timeout_seconds; /* engine --shutdown-timeout; the pod's grace period adds margin */
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

/* Converts a Kubernetes quantity ("2Gi", "1500M", "123") or JSON integer to bytes.
 * Returns 0, ERR_INVAL or ERR_RANGE. */
int desired_quantity_bytes(const json_t *q, unsigned long long *out);

#endif
