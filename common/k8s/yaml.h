/* YAML -> jansson conversion for small configuration documents (kubeconfig), on libyaml's event
 * parser. Deliberately narrow: one document; mappings, sequences and scalars only. Every scalar
 * becomes a JSON string except a plain empty/"~"/"null" scalar, which becomes JSON null, so callers
 * interpret "true" or "8080" themselves. Aliases and anchors are rejected (no alias bombs, no
 * cycles), as are duplicate keys, non-scalar keys, NUL bytes and nesting deeper than 64. */
#ifndef CINFER_COMMON_K8S_YAML_H
#define CINFER_COMMON_K8S_YAML_H

#include <jansson.h>
#include <stddef.h>

#define K8S_YAML_MAX_DEPTH 64

/* Parses `len` bytes at `data` (borrowed, need not be NUL-terminated). On success *out is a new
 * reference (object, array, string or null). On failure returns ERR_PARSE (syntax or a rejected
 * construct), ERR_UNSUPPORTED (anchors/aliases) or ERR_NOMEM, and writes a message with the line
 * and column into `err` (errlen bytes). Any thread; no shared state. */
int k8s_yaml_to_json(const char *data, size_t len, json_t **out, char *err, size_t errlen);

#endif
