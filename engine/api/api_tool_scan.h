/* The two parts of the tool-call scanner (api.h api_tool_stream_*): api_tool_stream.c reads the
 * forms (markers, content, Hermes blocks) and sends the events, api_tool_json.c reads the JSON value
 * a form holds, byte by byte, and finds the calls in it. What one calls in the other, and the state
 * they share beyond struct api_tool_stream. Included by those two files only. */
#ifndef CINFER_ENGINE_API_TOOL_SCAN_H
#define CINFER_ENGINE_API_TOOL_SCAN_H

#include <stdbool.h>

#include "engine/api/api.h"

/* struct api_tool_stream's mode: what the scanner is reading. */
enum {
    API_TOOL_M_START,
    API_TOOL_M_CONTENT,
    API_TOOL_M_DEAD,
    API_TOOL_M_BODY,
    API_TOOL_M_JSON,
    API_TOOL_M_SKIP,
    API_TOOL_M_DROP
};
/* ... and its form: Hermes blocks, one anchored value, the forced value. */
enum { API_TOOL_F_HERMES, API_TOOL_F_ANCHORED, API_TOOL_F_FORCED };

/* One feed (api_tool_stream_feed): the scanner, where its events go, the first error. */
struct api_tool_scan {
    struct api_tool_stream *s;
    api_tool_stream_fn fn;
    void *ud;
    int rc;
};

/* api_tool_stream.c: sends what is certain (api_tool_stream_flush); the text broke the form
 * (api_tool_stream_fail); the call being read is committed (api_tool_stream_commit). */
void api_tool_stream_flush(struct api_tool_scan *c, bool all);
void api_tool_stream_fail(struct api_tool_scan *c);
void api_tool_stream_commit(struct api_tool_scan *c);

/* api_tool_json.c: starts reading a JSON value (api_tool_json_reset); reads its next byte
 * (api_tool_json_char), in mode API_TOOL_M_JSON, which it leaves when the value ends or breaks. */
void api_tool_json_reset(struct api_tool_stream *s);
void api_tool_json_char(struct api_tool_scan *c, char ch);

#endif
