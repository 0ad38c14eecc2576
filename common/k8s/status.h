/* API server errors: parsing a metav1.Status body and mapping HTTP status codes to err.h codes
 * (https://kubernetes.io/docs/reference/using-api/api-concepts/ and
 * k8s.io/apimachinery/pkg/api/errors). Pure functions, any thread. */
#ifndef CINFER_COMMON_K8S_STATUS_H
#define CINFER_COMMON_K8S_STATUS_H

#include <stddef.h>

#define K8S_STATUS_MSG_MAX 1024

struct k8s_status {
    long code;                        /* HTTP status (or Status.code of a watch ERROR event) */
    char reason[64];                  /* Status.reason: NotFound, AlreadyExists, Conflict, ... */
    char message[K8S_STATUS_MSG_MAX]; /* Status.message (names the failing field for 422), or the
                                         start of a non-Status body; printable ASCII/UTF-8 only */
};

/* Fills `st` from an error answer: `http_status` and the body (`len` bytes, borrowed, need not be
 * NUL-terminated). A metav1.Status body gives reason, message and (when present) code; any other
 * body gives its first bytes as the message, with control characters replaced. Never fails. */
void k8s_status_parse(long http_status, const char *body, size_t len, struct k8s_status *st);

/* Maps an HTTP status and Status.reason (may be NULL) to an err.h code: 2xx 0, 400 and 422
 * ERR_INVAL, 401/403 ERR_AUTH, 404 ERR_NOT_FOUND, 409 ERR_EXISTS for reason AlreadyExists else
 * ERR_CONFLICT, 410 ERR_GONE, 413 ERR_TOO_BIG, 405/415 ERR_UNSUPPORTED, 429/503 ERR_AGAIN,
 * 504 ERR_TIMEOUT, anything else ERR_HTTP. */
int k8s_status_to_err(long code, const char *reason);

#endif
