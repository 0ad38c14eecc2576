/* Where the Kubernetes API server is and how to authenticate to it: from a kubeconfig file
 * (https://kubernetes.io/docs/concepts/configuration/organize-cluster-access-kubeconfig/) or from
 * the in-cluster service-account environment. Loading only; requests live in client.h.
 *
 * Supported kubeconfig subset: clusters[].cluster.{server, certificate-authority(-data),
 * insecure-skip-tls-verify}, users[].user.{token, tokenFile, client-certificate(-data),
 * client-key(-data)}, contexts[].context.{cluster, user, namespace}, current-context. Exec and
 * auth-provider plugins and basic auth are rejected with ERR_UNSUPPORTED; merging several files
 * from a KUBECONFIG list is not done (the first file is used, and a warning is logged). */
#ifndef CINFER_COMMON_K8S_CONFIG_H
#define CINFER_COMMON_K8S_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#define K8S_ERRMSG_MAX          512
#define K8S_KUBECONFIG_MAX      ((size_t)4 << 20) /* larger kubeconfig files are refused */
#define K8S_INCLUSTER_DIR       "/var/run/secrets/kubernetes.io/serviceaccount"
#define K8S_TOKEN_REFRESH_S_DEF 60 /* projected service-account tokens rotate; re-read this often */

/* A resolved connection config. Every pointer is owned by the struct (NULL = not set); PEM blobs
 * are NUL-terminated. Files named in a kubeconfig (CA, client cert, key) are read at load time;
 * a token file is read at load time and again by the client every token_refresh_s seconds. */
struct k8s_config {
    char *server;              /* "https://host:port" without trailing slash */
    char *ca_pem;              /* trusted CA bundle (PEM) or NULL for the system store */
    bool insecure_skip_verify; /* no server certificate check */
    char *token;               /* bearer token (static, or the last read of token_file) */
    char *token_file;          /* re-read periodically when set */
    int token_refresh_s;       /* seconds between token_file reads */
    char *cert_pem, *key_pem;  /* client certificate and key (PEM), both or neither */
    char *ns;                  /* default namespace ("default" when none is configured) */
    char *context;             /* kubeconfig context used; NULL for in-cluster */
};

/* File locations for the in-cluster config; NULL members (or a NULL struct) mean the standard
 * K8S_INCLUSTER_DIR paths. For tests. */
struct k8s_incluster_paths {
    const char *token_file;
    const char *ca_file;
    const char *namespace_file;
};

/* Parses kubeconfig text (`data`, `len` bytes, borrowed) and resolves `context` (borrowed; NULL =
 * current-context). Relative file paths are resolved against `base_dir` (NULL = the working
 * directory). On success *out is new (k8s_config_free). Returns ERR_PARSE (not YAML / wrong
 * shape), ERR_INVAL (missing or inconsistent field), ERR_NOT_FOUND (context, cluster or user not
 * defined), ERR_UNSUPPORTED, ERR_IO (a referenced file cannot be read), ERR_TOO_BIG, ERR_NOMEM;
 * `err` (errlen bytes) names what is wrong and where. Any thread. */
int k8s_config_parse_kubeconfig(const char *data, size_t len, const char *context,
                                const char *base_dir, struct k8s_config **out, char *err,
                                size_t errlen);

/* Reads the kubeconfig file at `path` (borrowed) and parses it as above, with base_dir = the
 * file's directory. */
int k8s_config_load_kubeconfig(const char *path, const char *context, struct k8s_config **out,
                               char *err, size_t errlen);

/* In-cluster config: server from KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, token and CA
 * from the service-account files (`paths` borrowed, may be NULL). The namespace file is optional.
 * Returns ERR_NOT_FOUND when the environment variables are unset, ERR_IO / ERR_INVAL for missing
 * or bad files, ERR_NOMEM. */
int k8s_config_load_incluster(const struct k8s_incluster_paths *paths, struct k8s_config **out,
                              char *err, size_t errlen);

/* The usual discovery order: $KUBECONFIG (first entry), else in-cluster when
 * KUBERNETES_SERVICE_HOST is set, else ~/.kube/config. `context` as above (ignored in-cluster). */
int k8s_config_load_default(const char *context, struct k8s_config **out, char *err, size_t errlen);

/* Reads a bearer token file (borrowed path): at most 64 KiB, surrounding whitespace stripped,
 * must be non-empty printable ASCII. *out is new (free()). Returns 0, ERR_IO, ERR_INVAL,
 * ERR_TOO_BIG or ERR_NOMEM with a message in `err`. */
int k8s_config_read_token(const char *path, char **out, char *err, size_t errlen);

/* Frees `c` and wipes its secrets (token, key). NULL-safe. */
void k8s_config_free(struct k8s_config *c);

#endif
