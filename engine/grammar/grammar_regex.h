/* Regular expressions -> GBNF (engine/grammar/grammar.h compiles the result), for JSON Schema's
 * `pattern` (inside a JSON string) and vLLM's guided_regex / structured_outputs.regex (the whole
 * output). The subset of ECMA-262 that real schemas use: literals (UTF-8) and escapes (\t \n \r
 * \v \f \0 \xHH \uHHHH \u{H..} and any escaped punctuation), `.`, classes [...] with ranges and
 * negation, \d \w \s \D \W \S, groups ( ) (?: ) (?<name> ), alternation, * + ? {n} {n,} {n,m}
 * (lazy forms too: the language is the same), and ^ / $ at the ends. Backreferences, lookaround,
 * word boundaries, inline flags and \p{..} are refused with ERR_UNSUPPORTED naming the construct.
 *
 * Whole-string semantics: a pattern describes the whole string (as llama.cpp, outlines and
 * XGrammar treat it), with or without ^ and $. JSON Schema's patterns are unanchored searches,
 * so what is generated is a subset of the strings the pattern accepts, never a superset.
 * Pure code, any thread. */
#ifndef CINFER_ENGINE_GRAMMAR_REGEX_H
#define CINFER_ENGINE_GRAMMAR_REGEX_H

#include <stdbool.h>
#include <stddef.h>

struct buf;

#define GRAMMAR_REGEX_MAX_LEN   (64u << 10) /* bytes of a regular expression */
#define GRAMMAR_REGEX_MAX_DEPTH 64          /* nesting of groups */
#define GRAMMAR_REGEX_MAX_NODES 65536       /* characters, classes, groups and repetitions */

struct grammar_regex_opts {
    /* Each character the regex matches is written as JSON string content: '"', '\' and control
     * characters as escapes (\" \\ \n \u001f ...), everything else as itself. */
    bool json_string;
    /* Bounds on the length in characters (minLength / maxLength; -1: none). Honoured when every
     * string of the regex already fits, or when the regex is one repetition of a single
     * character (its bounds are intersected); otherwise ERR_UNSUPPORTED. */
    long long min_chars, max_chars;
};

/* Appends to `out` (borrowed; its bound limits the size) one parenthesised GBNF expression that
 * matches exactly the strings of regular expression re[0..len) (borrowed, UTF-8). 0, or ERR_PARSE
 * (malformed: message with the byte offset), ERR_UNSUPPORTED (a construct not supported, named),
 * ERR_TOO_BIG (over a GRAMMAR_REGEX_MAX_* bound or a repetition count above GRAMMAR_MAX_REPEAT,
 * or the text over out's bound), ERR_NOMEM; a message in err. */
int grammar_regex_gbnf(const char *re, size_t len, const struct grammar_regex_opts *o,
                       struct buf *out, char *err, size_t errlen);

/* Appends a whole grammar "root ::= <expression>" for re (guided_regex). Errors as above. */
int grammar_regex_root_gbnf(const char *re, size_t len, struct buf *out, char *err, size_t errlen);

#endif
