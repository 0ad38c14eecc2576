/* Helpers shared by the api_*.c files only; not part of the API layer's public surface. */
#ifndef CINFER_ENGINE_API_PRIV_H
#define CINFER_ENGINE_API_PRIV_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "engine/api/api.h"

/* Parse state shared by the request parsers (api_request.c, api_request_chat.c). */
struct api_parse {
    const json_t *root;
    struct api_request *r;
    struct api_error *err;
    const struct api_limits *lim;
};

/* api_parse.c. Error helpers: each fills p->err (400 naming `param`, or 500) and returns
 * ERR_INVAL / ERR_NOMEM. */
int api_nomem(struct api_parse *p);
int api_invalid(struct api_parse *p, const char *param, const char *msg);
/* "'<param>' must be <want>, got <type of v>". */
int api_wrong_type(struct api_parse *p, const char *param, const char *want, const json_t *v);
/* "an object", "a string", ... for messages; static. */
const char *api_json_type_name(const json_t *v);

/* Parses response_format and vLLM's guided_* / structured_outputs into p->r->grammar
 * (api_request_format.c). 0, ERR_INVAL or ERR_NOMEM. */
int api_parse_format(struct api_parse *p);

/* Parses tools, tool_choice and parallel_tool_calls into p->r (api_request_tools.c), after
 * api_parse_format (a forced tool_choice refuses another constraint). 0, ERR_INVAL, ERR_NOMEM. */
int api_parse_tools(struct api_parse *p);

/* Parses "messages" into p->r (api_request_chat.c). 0, ERR_INVAL or ERR_NOMEM. */
int api_parse_messages(struct api_parse *p);

/* A JSON string from raw decoded bytes: invalid UTF-8 becomes U+FFFD per bad byte (api_response.c).
 * New or NULL on ERR_NOMEM. */
json_t *api_json_text(const char *p, size_t len);

/* api_scan.c: text scanning of the incremental parsers. A blank (space, tab, CR, LF); the length
 * of the longest suffix of s[0..n) that is a proper prefix of tag (what must be held back while
 * it may still become the tag); the first tag in s[0..n), or NULL. */
bool api_blank(char c);
size_t api_tag_tail(const char *s, size_t n, const char *tag);
const char *api_find(const char *s, size_t n, const char *tag);

#endif
