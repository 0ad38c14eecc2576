/* Model URIs of InferenceService.spec.model.uri: where the engine pod finds its GGUF file.
 *   file:///path            a path already in the image or a mounted volume
 *   pvc://claim/path        a PersistentVolumeClaim, mounted read-only
 *   https://host/path       downloaded by the fetch-model init container
 *   hf://org/repo/file      a Hugging Face file, downloaded by the init container
 * Pure parsing; the API server's schema checks the same shapes, this gives the operator precise
 * reasons for its status conditions. */
#ifndef CINFER_OPERATOR_MODEL_URI_H
#define CINFER_OPERATOR_MODEL_URI_H

#include <stddef.h>

enum model_uri_kind { MODEL_URI_FILE, MODEL_URI_PVC, MODEL_URI_HTTPS, MODEL_URI_HF };

#define MODEL_URI_CLAIM_MAX 254

struct model_uri {
    enum model_uri_kind kind;
    char claim[MODEL_URI_CLAIM_MAX]; /* PVC: claim name */
    const char *path; /* FILE: absolute path; PVC: path inside the claim (borrowed) */
    const char *url;  /* HTTPS/HF: the URI itself (borrowed) */
};

/* Parses `uri` (borrowed; must outlive *out). Returns 0, or ERR_INVAL with a reason in `err`. */
int model_uri_parse(const char *uri, struct model_uri *out, char *err, size_t errlen);
/* The same for the URI at `field` (e.g. "spec.engine.speculative.draftModel.uri"), which the
 * reasons name where they name the field. */
int model_uri_parse_field(const char *uri, const char *field, struct model_uri *out, char *err,
                          size_t errlen);

/* True when the model is downloaded at pod start (needs the fetch-model init container). */
int model_uri_is_download(const struct model_uri *m);

#endif
