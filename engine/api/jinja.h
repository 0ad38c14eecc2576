/* A Jinja2 template interpreter for chat templates: the subset of Jinja2 (3.1) that published
 * `tokenizer.chat_template` strings use, rendered the way Hugging Face transformers renders them
 * in apply_chat_template: an ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the
 * loopcontrols extension, transformers' `tojson` (json.dumps, ensure_ascii=False), and the globals
 * raise_exception and strftime_now. Values follow Python's semantics (str() and repr() of values,
 * integer and float arithmetic, code-point string indexing, Markup from `safe`), so the output is
 * byte for byte what Python's jinja2 produces (tests/engine/test_jinja_golden.c checks a corpus).
 *
 * Anything outside the subset is refused, never approximated: an unknown tag, filter or test is a
 * parse error (as in jinja2, which checks filters and tests when it compiles), and an unsupported
 * method or argument is a render error naming it. Rendering is bounded: output bytes, memory,
 * evaluation steps and call depth all have limits, so a hostile template cannot hang or exhaust
 * the process. Not here: include/import/extends (there is no loader), autoescaping, async. */
#ifndef CINFER_ENGINE_JINJA_H
#define CINFER_ENGINE_JINJA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "common/buf.h"

#define JINJA_SOURCE_MAX (1u << 20) /* template source bytes (real ones are under 20 KiB) */

struct jinja_template;

/* Bounds of one render. A limit that is hit ends the render with an error naming it. */
struct jinja_limits {
    size_t max_memory;  /* bytes of values and captured text the render may allocate */
    uint64_t max_steps; /* evaluation steps: nodes evaluated, loop iterations, builtin work */
    int max_depth;      /* nesting of macro calls (recursion included) */
};

/* Defaults sized for real templates over the largest chat requests: 64 MiB, 50M steps,
 * depth 64. */
void jinja_limits_default(struct jinja_limits *l);

/* Parses `len` bytes of template source (borrowed; copied as needed). On success writes a new
 * template to *out (jinja_free) and returns 0. Errors, with "line N: reason" in `err`:
 * ERR_PARSE (syntax error, unknown tag/filter/test, invalid UTF-8), ERR_UNSUPPORTED (a Jinja2
 * feature outside the subset, named), ERR_TOO_BIG (over JINJA_SOURCE_MAX), ERR_NOMEM.
 * Any thread. */
int jinja_parse(const char *src, size_t len, struct jinja_template **out, char *err, size_t errlen);

/* NULL-safe. */
void jinja_free(struct jinja_template *t);

/* Whether the template loops over some value's `content` attribute or item ("for part in
 * message['content']"): such templates take OpenAI's list-of-parts content as it is, others
 * want it joined into a string (vLLM's content-format detection). Pure; any thread. */
bool jinja_loops_over_content(const struct jinja_template *t);

/* Renders `t` (borrowed; immutable, so several threads may render it at once) with the members of
 * the JSON object `vars` (borrowed) as template variables: JSON arrays become lists, objects
 * dicts, integers int, reals float. `now` is the time strftime_now formats (local time, as
 * Python's datetime.now()); `lim` NULL means jinja_limits_default. Appends the text to `out`
 * (borrowed; its max bounds the output). Returns 0, or with a message in `err`: ERR_INVAL (the
 * template failed: raise_exception's message, an undefined value used, a type error, an
 * unsupported method), ERR_TOO_BIG (output, memory or step limit), ERR_RANGE (call depth),
 * ERR_NOMEM. On failure `out` keeps its previous length. Any thread. */
int jinja_render(const struct jinja_template *t, const json_t *vars, time_t now,
                 const struct jinja_limits *lim, struct buf *out, char *err, size_t errlen);

#endif
