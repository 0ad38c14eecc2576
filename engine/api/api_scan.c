/* Text scanning shared by the API's incremental parsers (api_priv.h): the reasoning splitter
 * (api_reasoning.c) and the tool-call scanner (api_tool_stream.c) both hold back a suffix that may
 * still become a tag, and look for tags and blanks in text that arrives in pieces. Pure. */
#include "engine/api/api_priv.h"

#include <string.h>

bool api_blank(char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

size_t api_tag_tail(const char *s, size_t n, const char *tag)
{
    size_t k = strlen(tag) - 1;
    for (size_t m = k < n ? k : n; m > 0; m--)
        if (!memcmp(s + n - m, tag, m)) return m;
    return 0;
}

const char *api_find(const char *s, size_t n, const char *tag)
{
    size_t k = strlen(tag);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(s + i, tag, k)) return s + i;
    return NULL;
}
