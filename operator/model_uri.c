/* Parsing and validation of model URIs (see model_uri.h). */
#include "operator/model_uri.h"

#include "common/err.h"
#include "common/k8s/names.h"

#include <stdio.h>
#include <string.h>

static int has_space_or_ctl(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s <= ' ' || *s == 0x7f) return 1;
    return 0;
}

static int has_dotdot_segment(const char *p)
{
    for (const char *s = p; (s = strstr(s, "..")); s += 2) {
        int starts = s == p || s[-1] == '/';
        int ends = s[2] == 0 || s[2] == '/';
        if (starts && ends) return 1;
    }
    return 0;
}

int model_uri_parse(const char *uri, struct model_uri *out, char *err, size_t errlen)
{
    return model_uri_parse_field(uri, "spec.model.uri", out, err, errlen);
}

int model_uri_parse_field(const char *uri, const char *field, struct model_uri *out, char *err,
                          size_t errlen)
{
    if (!uri || !*uri) {
        snprintf(err, errlen, "%s is empty", field);
        return ERR_INVAL;
    }
    if (has_space_or_ctl(uri)) {
        snprintf(err, errlen, "%s contains whitespace or control characters", field);
        return ERR_INVAL;
    }
    memset(out, 0, sizeof(*out));
    if (strncmp(uri, "file://", 7) == 0) {
        const char *path = uri + 7;
        if (path[0] != '/' || path[1] == 0) {
            snprintf(err, errlen,
                     "file:// URI needs an absolute path, as in file:///models/m.gguf");
            return ERR_INVAL;
        }
        if (has_dotdot_segment(path)) {
            snprintf(err, errlen, "file:// path must not contain '..' segments");
            return ERR_INVAL;
        }
        out->kind = MODEL_URI_FILE;
        out->path = path;
        return 0;
    }
    if (strncmp(uri, "pvc://", 6) == 0) {
        const char *claim = uri + 6, *slash = strchr(claim, '/');
        size_t n = slash ? (size_t)(slash - claim) : strlen(claim);
        if (!k8s_name_is_dns_subdomain(claim, n) || n >= sizeof(out->claim)) {
            snprintf(err, errlen, "pvc:// URI needs a valid claim name, as in pvc://models/m.gguf");
            return ERR_INVAL;
        }
        if (!slash || slash[1] == 0) {
            snprintf(err, errlen, "pvc:// URI needs a file path inside the claim");
            return ERR_INVAL;
        }
        if (has_dotdot_segment(slash + 1)) {
            snprintf(err, errlen, "pvc:// path must not contain '..' segments");
            return ERR_INVAL;
        }
        out->kind = MODEL_URI_PVC;
        memcpy(out->claim, claim, n);
        out->claim[n] = 0;
        out->path = slash + 1;
        return 0;
    }
    if (strncmp(uri, "https://", 8) == 0) {
        const char *host = uri + 8, *slash = strchr(host, '/');
        if (!slash || slash == host || slash[1] == 0) {
            snprintf(err, errlen, "https:// URI needs a host and a file path");
            return ERR_INVAL;
        }
        out->kind = MODEL_URI_HTTPS;
        out->url = uri;
        return 0;
    }
    if (strncmp(uri, "hf://", 5) == 0) {
        /* hf://org/repo/path/to/file.gguf: three non-empty parts at least. */
        const char *org = uri + 5, *repo = strchr(org, '/');
        const char *file = repo ? strchr(repo + 1, '/') : NULL;
        if (!repo || repo == org || !file || file == repo + 1 || file[1] == 0) {
            snprintf(err, errlen, "hf:// URI must be hf://org/repo/file.gguf");
            return ERR_INVAL;
        }
        out->kind = MODEL_URI_HF;
        out->url = uri;
        return 0;
    }
    if (strncmp(uri, "http://", 7) == 0) {
        snprintf(err, errlen, "plain http:// model URIs are not allowed; use https://");
        return ERR_INVAL;
    }
    snprintf(err, errlen, "unsupported model URI scheme (use file://, pvc://, https:// or hf://)");
    return ERR_INVAL;
}

int model_uri_is_download(const struct model_uri *m)
{
    return m->kind == MODEL_URI_HTTPS || m->kind == MODEL_URI_HF;
}
