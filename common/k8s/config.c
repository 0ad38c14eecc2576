/* Kubernetes connection config from a kubeconfig file or the in-cluster environment (config.h).
 * The kubeconfig is converted to JSON by yaml.c and then walked with explicit checks, so every
 * malformed input ends in a message that names the context, cluster or user and the field. */
#include "common/k8s/config.h"

#include "common/buf.h"
#include "common/err.h"
#include "common/k8s/yaml.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define K8S_PEM_FILE_MAX   ((size_t)1 << 20)
#define K8S_TOKEN_FILE_MAX ((size_t)64 << 10)

static int cfg_fail(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int cfg_fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_vfmt(err, errlen, rc, fmt, ap);
    va_end(ap);
    return rc;
}

static int cfg_strdup(const char *s, char **out)
{
    *out = strdup(s);
    return *out ? 0 : ERR_NOMEM;
}

/* Reads a whole regular file into `out` (bounded by max). Only regular files (or symlinks to them,
 * as in projected volumes): a FIFO or device named in a kubeconfig must not block or stream. */
static int cfg_read_file(const char *path, size_t max, struct buf *out, char *err, size_t errlen)
{
    char chunk[8192];
    struct stat st;
    ssize_t n;
    int rc = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

    buf_init(out, max);
    if (fd < 0) return cfg_fail(err, errlen, ERR_IO, "cannot open %s: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return cfg_fail(err, errlen, ERR_IO, "%s is not a regular file", path);
    }
    while ((n = read(fd, chunk, sizeof(chunk))) != 0) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            rc = cfg_fail(err, errlen, ERR_IO, "cannot read %s: %s", path, strerror(errno));
            break;
        }
        rc = buf_append(out, chunk, (size_t)n);
        if (rc == ERR_TOO_BIG)
            cfg_fail(err, errlen, rc, "%s is larger than %zu bytes", path, max);
        else if (rc)
            cfg_fail(err, errlen, rc, "reading %s: %s", path, err_str(rc));
        if (rc) break;
    }
    close(fd);
    if (rc) buf_fini(out);
    return rc;
}

static int b64_value(unsigned char ch)
{
    if (ch >= 'A' && ch <= 'Z') return ch - 'A';
    if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9') return ch - '0' + 52;
    if (ch == '+') return 62;
    if (ch == '/') return 63;
    return -1;
}

/* Strict standard base64 (RFC 4648 section 4) with padding; whitespace is skipped since some tools
 * wrap long lines. Returns 0, ERR_INVAL, or ERR_TOO_BIG / ERR_NOMEM from `out`. */
static int cfg_b64_decode(const char *in, struct buf *out)
{
    unsigned acc = 0;
    int bits = 0, pad = 0;
    size_t digits = 0;

    for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
        if (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') continue;
        if (*p == '=') {
            pad++;
            continue;
        }
        int v = b64_value(*p);
        if (v < 0 || pad) return ERR_INVAL; /* bad character, or data after padding */
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        digits++;
        if (bits >= 8) {
            bits -= 8;
            int rc = buf_putc(out, (char)((acc >> bits) & 0xff));
            if (rc) return rc;
        }
    }
    if ((digits + (size_t)pad) % 4 != 0 || pad > 2 || digits % 4 == 1) return ERR_INVAL;
    if ((acc & ((1u << bits) - 1)) != 0) return ERR_INVAL; /* non-canonical trailing bits */
    return 0;
}

/* A decoded or file-read PEM must at least look like PEM, so a wrong field fails here with a
 * clear message rather than inside the TLS handshake. */
static bool cfg_looks_like_pem(const char *s)
{
    return strstr(s, "-----BEGIN ") != NULL;
}

/* Context for messages: "cluster \"x\"". */
struct cfg_where {
    const char *kind, *name;
    const char *base_dir;
    char *err;
    size_t errlen;
};

static int cfg_get_str(const struct cfg_where *w, const json_t *obj, const char *key,
                       const char **out)
{
    const json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v))
        return cfg_fail(w->err, w->errlen, ERR_INVAL, "kubeconfig: %s \"%s\": %s must be a string",
                        w->kind, w->name, key);
    *out = json_string_value(v);
    if (!**out) *out = NULL; /* an empty string means unset, as in client-go */
    return 0;
}

static int cfg_get_bool(const struct cfg_where *w, const json_t *obj, const char *key, bool *out)
{
    const char *s;
    int rc = cfg_get_str(w, obj, key, &s);
    *out = false;
    if (rc || !s) return rc;
    if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE"))
        *out = true;
    else if (strcmp(s, "false") && strcmp(s, "False") && strcmp(s, "FALSE"))
        return cfg_fail(w->err, w->errlen, ERR_INVAL,
                        "kubeconfig: %s \"%s\": %s must be true or false, not \"%.40s\"", w->kind,
                        w->name, key, s);
    return 0;
}

/* Resolves `file` (named by `key`) against the kubeconfig's directory, as kubectl does. */
static int cfg_path(const struct cfg_where *w, const char *key, const char *file, char *path,
                    size_t size)
{
    int n = file[0] != '/' && w->base_dir ? snprintf(path, size, "%s/%s", w->base_dir, file)
                                          : snprintf(path, size, "%s", file);
    if (n < 0 || (size_t)n >= size)
        return cfg_fail(w->err, w->errlen, ERR_TOO_BIG, "kubeconfig: %s \"%s\": %s: path too long",
                        w->kind, w->name, key);
    return 0;
}

/* Resolves a PEM from "<key>-data" (base64) or "<key>" (a file path); *out is new or NULL. */
static int cfg_get_pem(const struct cfg_where *w, const json_t *obj, const char *key, char **out)
{
    char data_key[64], path[4096];
    const char *data, *file;
    struct buf pem;
    int rc;

    *out = NULL;
    snprintf(data_key, sizeof(data_key), "%s-data", key);
    if ((rc = cfg_get_str(w, obj, data_key, &data)) || (rc = cfg_get_str(w, obj, key, &file)))
        return rc;
    if (!data && !file) return 0;
    if (data && file)
        return cfg_fail(w->err, w->errlen, ERR_INVAL, "kubeconfig: %s \"%s\": both %s and %s set",
                        w->kind, w->name, key, data_key);
    if (data) {
        buf_init(&pem, K8S_PEM_FILE_MAX);
        if ((rc = cfg_b64_decode(data, &pem))) {
            buf_fini(&pem);
            return cfg_fail(w->err, w->errlen, rc, "kubeconfig: %s \"%s\": %s is %s", w->kind,
                            w->name, data_key, rc == ERR_INVAL ? "not valid base64" : err_str(rc));
        }
    } else {
        char ferr[K8S_ERRMSG_MAX];
        if ((rc = cfg_path(w, key, file, path, sizeof(path)))) return rc;
        rc = cfg_read_file(path, K8S_PEM_FILE_MAX, &pem, ferr, sizeof(ferr));
        if (rc)
            return cfg_fail(w->err, w->errlen, rc, "kubeconfig: %s \"%s\": %s: %s", w->kind,
                            w->name, key, ferr);
    }
    if (!pem.data || !cfg_looks_like_pem(pem.data)) {
        buf_fini(&pem);
        return cfg_fail(w->err, w->errlen, ERR_INVAL, "kubeconfig: %s \"%s\": %s is not PEM",
                        w->kind, w->name, data ? data_key : key);
    }
    *out = buf_steal(&pem);
    return *out ? 0 : ERR_NOMEM;
}

/* Finds the entry called `name` in the named list `list_key` ("clusters") and returns its
 * `item_key` ("cluster") mapping. */
static int cfg_find_named(const json_t *root, const char *list_key, const char *item_key,
                          const char *name, const json_t **out, char *err, size_t errlen)
{
    const json_t *list = json_object_get(root, list_key), *e;
    size_t i;

    if (list && !json_is_array(list) && !json_is_null(list))
        return cfg_fail(err, errlen, ERR_PARSE, "kubeconfig: %s must be a list", list_key);
    json_array_foreach(list, i, e)
    {
        const json_t *n = json_object_get(e, "name");
        if (!json_is_object(e) || !json_is_string(n))
            return cfg_fail(err, errlen, ERR_PARSE, "kubeconfig: %s[%zu] has no name", list_key, i);
        if (strcmp(json_string_value(n), name) != 0) continue;
        *out = json_object_get(e, item_key);
        if (!json_is_object(*out))
            return cfg_fail(err, errlen, ERR_PARSE, "kubeconfig: %s \"%s\" has no %s mapping",
                            item_key, name, item_key);
        return 0;
    }
    return cfg_fail(err, errlen, ERR_NOT_FOUND, "kubeconfig: %s \"%s\" is not defined", item_key,
                    name);
}

static int cfg_apply_cluster(struct k8s_config *c, const json_t *cl, struct cfg_where *w)
{
    const char *server;
    int rc;

    if ((rc = cfg_get_str(w, cl, "server", &server))) return rc;
    if (!server)
        return cfg_fail(w->err, w->errlen, ERR_INVAL, "kubeconfig: cluster \"%s\" has no server",
                        w->name);
    if (strncmp(server, "https://", 8) != 0 && strncmp(server, "http://", 7) != 0)
        return cfg_fail(w->err, w->errlen, ERR_INVAL,
                        "kubeconfig: cluster \"%s\": server \"%.200s\" is not an http(s) URL",
                        w->name, server);
    if ((rc = cfg_strdup(server, &c->server))) return rc;
    size_t n = strlen(c->server);
    while (n > 0 && c->server[n - 1] == '/') c->server[--n] = 0;
    if ((rc = cfg_get_bool(w, cl, "insecure-skip-tls-verify", &c->insecure_skip_verify)) ||
        (rc = cfg_get_pem(w, cl, "certificate-authority", &c->ca_pem)))
        return rc;
    if (c->ca_pem && c->insecure_skip_verify)
        return cfg_fail(w->err, w->errlen, ERR_INVAL,
                        "kubeconfig: cluster \"%s\": a certificate authority together with "
                        "insecure-skip-tls-verify is not allowed",
                        w->name);
    return 0;
}

static int cfg_apply_user(struct k8s_config *c, const json_t *u, struct cfg_where *w)
{
    static const char *const unsupported[] = {"exec", "auth-provider", "username", "password"};
    const char *token, *token_file;
    int rc;

    for (size_t i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++)
        if (json_object_get(u, unsupported[i]))
            return cfg_fail(w->err, w->errlen, ERR_UNSUPPORTED,
                            "kubeconfig: user \"%s\": %s is not supported (use a token or a "
                            "client certificate)",
                            w->name, unsupported[i]);
    if ((rc = cfg_get_str(w, u, "token", &token)) ||
        (rc = cfg_get_str(w, u, "tokenFile", &token_file)) ||
        (rc = cfg_get_pem(w, u, "client-certificate", &c->cert_pem)) ||
        (rc = cfg_get_pem(w, u, "client-key", &c->key_pem)))
        return rc;
    if (!c->cert_pem != !c->key_pem)
        return cfg_fail(w->err, w->errlen, ERR_INVAL,
                        "kubeconfig: user \"%s\": a client certificate needs a client key and a "
                        "key needs a certificate",
                        w->name);
    if (token && (rc = cfg_strdup(token, &c->token))) return rc;
    if (token_file) {
        char path[4096], terr[K8S_ERRMSG_MAX];
        if ((rc = cfg_path(w, "tokenFile", token_file, path, sizeof(path)))) return rc;
        if ((rc = cfg_strdup(path, &c->token_file))) return rc;
        if (!c->token) { /* a static token wins over the file, as in client-go */
            rc = k8s_config_read_token(path, &c->token, terr, sizeof(terr));
            if (rc)
                return cfg_fail(w->err, w->errlen, rc, "kubeconfig: user \"%s\": tokenFile: %s",
                                w->name, terr);
        }
    }
    return 0;
}

static int cfg_resolve(const json_t *root, const char *context, const char *base_dir,
                       struct k8s_config *c, char *err, size_t errlen)
{
    struct cfg_where w = {.kind = "context", .base_dir = base_dir, .err = err, .errlen = errlen};
    const json_t *ctx, *cl, *u;
    const char *cluster, *user, *ns;
    int rc;

    if (!json_is_object(root))
        return cfg_fail(err, errlen, ERR_PARSE, "kubeconfig: top level is not a mapping");
    if (!context) {
        w.kind = "file";
        w.name = "current-context";
        if ((rc = cfg_get_str(&w, root, "current-context", &context))) return rc;
        if (!context)
            return cfg_fail(err, errlen, ERR_INVAL,
                            "kubeconfig: current-context is not set and no context was given");
    }
    if ((rc = cfg_find_named(root, "contexts", "context", context, &ctx, err, errlen))) return rc;
    w.kind = "context";
    w.name = context;
    if ((rc = cfg_get_str(&w, ctx, "cluster", &cluster)) ||
        (rc = cfg_get_str(&w, ctx, "user", &user)) || (rc = cfg_get_str(&w, ctx, "namespace", &ns)))
        return rc;
    if (!cluster)
        return cfg_fail(err, errlen, ERR_INVAL, "kubeconfig: context \"%s\" names no cluster",
                        context);
    if ((rc = cfg_strdup(context, &c->context)) || (rc = cfg_strdup(ns ? ns : "default", &c->ns)))
        return rc;
    if ((rc = cfg_find_named(root, "clusters", "cluster", cluster, &cl, err, errlen))) {
        if (rc == ERR_NOT_FOUND)
            cfg_fail(err, errlen, rc,
                     "kubeconfig: context \"%s\" refers to cluster \"%s\", which is not defined",
                     context, cluster);
        return rc;
    }
    w.kind = "cluster";
    w.name = cluster;
    if ((rc = cfg_apply_cluster(c, cl, &w))) return rc;
    if (!user) return 0; /* anonymous */
    if ((rc = cfg_find_named(root, "users", "user", user, &u, err, errlen))) {
        if (rc == ERR_NOT_FOUND)
            cfg_fail(err, errlen, rc,
                     "kubeconfig: context \"%s\" refers to user \"%s\", which is not defined",
                     context, user);
        return rc;
    }
    w.kind = "user";
    w.name = user;
    return cfg_apply_user(c, u, &w);
}

int k8s_config_parse_kubeconfig(const char *data, size_t len, const char *context,
                                const char *base_dir, struct k8s_config **out, char *err,
                                size_t errlen)
{
    struct k8s_config *c = NULL;
    json_t *root = NULL;
    char yerr[K8S_ERRMSG_MAX];
    int rc;

    if (len > K8S_KUBECONFIG_MAX)
        return cfg_fail(err, errlen, ERR_TOO_BIG, "kubeconfig: larger than %zu bytes",
                        K8S_KUBECONFIG_MAX);
    rc = k8s_yaml_to_json(data, len, &root, yerr, sizeof(yerr));
    if (rc) {
        cfg_fail(err, errlen, rc, "kubeconfig: %s", yerr);
        goto out;
    }
    rc = ERR_NOMEM;
    if (!(c = calloc(1, sizeof(*c)))) goto out;
    c->token_refresh_s = K8S_TOKEN_REFRESH_S_DEF;
    rc = cfg_resolve(root, context, base_dir, c, err, errlen);
    if (rc == ERR_NOMEM) cfg_fail(err, errlen, rc, "kubeconfig: out of memory");
    if (rc) goto out;
    *out = c;
    c = NULL;
out:
    json_decref(root);
    k8s_config_free(c);
    return rc;
}

int k8s_config_load_kubeconfig(const char *path, const char *context, struct k8s_config **out,
                               char *err, size_t errlen)
{
    struct buf text;
    char dir[4096];
    int rc = cfg_read_file(path, K8S_KUBECONFIG_MAX, &text, err, errlen);
    if (rc) return rc;
    const char *slash = strrchr(path, '/');
    if (slash) snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
    rc = k8s_config_parse_kubeconfig(text.data ? text.data : "", text.len, context,
                                     slash ? (slash == path ? "/" : dir) : NULL, out, err, errlen);
    buf_fini(&text);
    return rc;
}

int k8s_config_read_token(const char *path, char **out, char *err, size_t errlen)
{
    struct buf t;
    int rc = cfg_read_file(path, K8S_TOKEN_FILE_MAX, &t, err, errlen);
    if (rc) return rc;
    size_t b = 0, e = t.len;
    while (b < e &&
           (t.data[b] == ' ' || t.data[b] == '\n' || t.data[b] == '\r' || t.data[b] == '\t'))
        b++;
    while (e > b && (t.data[e - 1] == ' ' || t.data[e - 1] == '\n' || t.data[e - 1] == '\r' ||
                     t.data[e - 1] == '\t'))
        e--;
    rc = ERR_INVAL;
    if (b == e) {
        cfg_fail(err, errlen, rc, "token file %s is empty", path);
        goto out;
    }
    for (size_t i = b; i < e; i++) {
        if (t.data[i] < 0x21 || t.data[i] > 0x7e) {
            cfg_fail(err, errlen, rc, "token file %s contains a non-printable character", path);
            goto out;
        }
    }
    rc = ERR_NOMEM;
    if (!(*out = strndup(t.data + b, e - b))) goto out;
    rc = 0;
out:
    if (t.data) memset(t.data, 0, t.cap);
    buf_fini(&t);
    return rc;
}

int k8s_config_load_incluster(const struct k8s_incluster_paths *paths, struct k8s_config **out,
                              char *err, size_t errlen)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST"), *port = getenv("KUBERNETES_SERVICE_PORT");
    const struct k8s_incluster_paths none = {0};
    struct k8s_config *c = NULL;
    struct buf ca, ns;
    int rc;

    buf_init(&ca, 0);
    buf_init(&ns, 0);
    if (!paths) paths = &none;
    const char *token_file = paths->token_file ? paths->token_file : K8S_INCLUSTER_DIR "/token";
    const char *ca_file = paths->ca_file ? paths->ca_file : K8S_INCLUSTER_DIR "/ca.crt";
    const char *ns_file =
        paths->namespace_file ? paths->namespace_file : K8S_INCLUSTER_DIR "/namespace";
    if (!host || !*host || !port || !*port)
        return cfg_fail(err, errlen, ERR_NOT_FOUND,
                        "in-cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be "
                        "set (not running in a pod?)");
    if (strspn(port, "0123456789") != strlen(port) || strlen(port) > 5)
        return cfg_fail(err, errlen, ERR_INVAL,
                        "in-cluster: KUBERNETES_SERVICE_PORT \"%.20s\" "
                        "is not a port number",
                        port);
    if (strpbrk(host, "/?#@ ") || strlen(host) > 253)
        return cfg_fail(err, errlen, ERR_INVAL,
                        "in-cluster: KUBERNETES_SERVICE_HOST is not a host");
    rc = ERR_NOMEM;
    if (!(c = calloc(1, sizeof(*c)))) goto out;
    c->token_refresh_s = K8S_TOKEN_REFRESH_S_DEF;
    struct buf server;
    buf_init(&server, 0);
    /* An IPv6 service address needs brackets in a URL. */
    rc = buf_printf(&server, strchr(host, ':') ? "https://[%s]:%s" : "https://%s:%s", host, port);
    c->server = buf_steal(&server);
    if (rc || !c->server) goto nomem;
    if ((rc = cfg_strdup(token_file, &c->token_file))) goto nomem;
    if ((rc = k8s_config_read_token(token_file, &c->token, err, errlen))) goto out;
    if ((rc = cfg_read_file(ca_file, K8S_PEM_FILE_MAX, &ca, err, errlen))) goto out;
    if (!ca.data || !cfg_looks_like_pem(ca.data)) {
        rc = cfg_fail(err, errlen, ERR_INVAL, "in-cluster: %s is not a PEM file", ca_file);
        goto out;
    }
    if (!(c->ca_pem = buf_steal(&ca))) goto nomem;
    /* The namespace file is optional (a token mounted without it); default to "default". */
    char nerr[K8S_ERRMSG_MAX];
    if (cfg_read_file(ns_file, 256, &ns, nerr, sizeof(nerr)) == 0 && ns.len) {
        size_t n = strcspn(ns.data, " \t\r\n");
        if (n == 0) n = ns.len;
        c->ns = strndup(ns.data, n);
    } else {
        c->ns = strdup("default");
    }
    if (!c->ns) goto nomem;
    *out = c;
    c = NULL;
    rc = 0;
    goto out;
nomem:
    rc = cfg_fail(err, errlen, ERR_NOMEM, "in-cluster: out of memory");
out:
    buf_fini(&ca);
    buf_fini(&ns);
    k8s_config_free(c);
    return rc;
}

int k8s_config_load_default(const char *context, struct k8s_config **out, char *err, size_t errlen)
{
    const char *kc = getenv("KUBECONFIG"), *home = getenv("HOME");
    char path[4096];

    if (kc && *kc) {
        size_t n = strcspn(kc, ":");
        if (kc[n])
            log_warn("KUBECONFIG lists several files; only the first is used",
                     LOG_S("kubeconfig", kc));
        snprintf(path, sizeof(path), "%.*s", (int)n, kc);
        return k8s_config_load_kubeconfig(path, context, out, err, errlen);
    }
    if (getenv("KUBERNETES_SERVICE_HOST")) return k8s_config_load_incluster(NULL, out, err, errlen);
    if (!home || !*home)
        return cfg_fail(err, errlen, ERR_NOT_FOUND,
                        "no Kubernetes config: KUBECONFIG, in-cluster environment and HOME unset");
    snprintf(path, sizeof(path), "%s/.kube/config", home);
    return k8s_config_load_kubeconfig(path, context, out, err, errlen);
}

static void cfg_wipe_free(char *s)
{
    if (s) memset(s, 0, strlen(s));
    free(s);
}

void k8s_config_free(struct k8s_config *c)
{
    if (!c) return;
    free(c->server);
    free(c->ca_pem);
    cfg_wipe_free(c->token);
    free(c->token_file);
    free(c->cert_pem);
    cfg_wipe_free(c->key_pem);
    free(c->ns);
    free(c->context);
    free(c);
}
