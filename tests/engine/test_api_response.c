/* Unit tests of response building (engine/api/api_response.c): exact JSON of completion and
 * chat.completion objects, both logprobs shapes, the streamed chunk sequence as OpenAI frames it
 * (role delta, content deltas, finish chunk, usage chunk, [DONE]), the logprobs value of every
 * chunk as OpenAI sends it, echo's unscored first token, continuous usage, the model object and
 * the SSE framing. */
#include "engine/api/api.h"

#include "common/err.h"
#include "common/json_util.h"

#include <check.h>
#include <math.h>
#include <string.h>

static const struct api_usage usage = {
    .prompt_tokens = 3, .completion_tokens = 2, .cached_tokens = 1};

#define USAGE_JSON                                                                                 \
    "{\"prompt_tokens\":3,\"completion_tokens\":2,\"total_tokens\":5,\"prompt_tokens_details\":{"  \
    "\"cached_tokens\":1}}"

/* Dumps `j` (taken) compactly and compares with `want`. */
static void assert_json(json_t *j, const char *want)
{
    ck_assert_ptr_nonnull(j);
    struct buf b;
    buf_init(&b, 1 << 16);
    ck_assert_int_eq(json_util_dump(j, &b), 0);
    ck_assert_str_eq(buf_cstr(&b), want);
    buf_fini(&b);
    json_decref(j);
}

START_TEST(test_api_response_id_format)
{
    char id[32];
    ck_assert_int_eq(api_response_id(API_KIND_COMPLETION, 0xabcULL, id, sizeof(id)), 0);
    ck_assert_str_eq(id, "cmpl-0000000000000abc");
    ck_assert_int_eq(api_response_id(API_KIND_CHAT, UINT64_MAX, id, sizeof(id)), 0);
    ck_assert_str_eq(id, "chatcmpl-ffffffffffffffff");
    ck_assert_int_eq(api_response_id(API_KIND_CHAT, 1, id, 10), ERR_INVAL);
}
END_TEST

START_TEST(test_api_response_json_completion)
{
    struct api_response_meta m = {API_KIND_COMPLETION, "cmpl-1", "stories",
                                  1700000000,          false,    false};
    struct api_choice c[2] = {
        {.index = 0, .text = "Once", .len = 4, .finish = API_FINISH_LENGTH},
        {.index = 1, .text = "The end", .len = 3, .finish = API_FINISH_STOP},
    };
    assert_json(
        api_response_json(&m, c, 2, &usage),
        "{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1700000000,"
        "\"model\":\"stories\",\"choices\":[{\"text\":\"Once\",\"index\":0,\"logprobs\":null,"
        "\"finish_reason\":\"length\"},{\"text\":\"The\",\"index\":1,\"logprobs\":null,"
        "\"finish_reason\":\"stop\"}],\"usage\":" USAGE_JSON "}");
}
END_TEST

START_TEST(test_api_response_json_chat_with_logprobs)
{
    struct api_response_meta m = {API_KIND_CHAT, "chatcmpl-1", "m", 5, false, false};
    struct api_top_logprob tops[2] = {{"Hi", 2, -0.5f}, {"Hey", 3, -1.25f}};
    struct api_token_logprob lp[1] = {{"Hi", 2, -0.5f, 2, tops, false}};
    struct api_choice c = {.index = 0,
                           .text = "Hi",
                           .len = 2,
                           .finish = API_FINISH_STOP,
                           .logprobs = lp,
                           .n_logprobs = 1};
    assert_json(
        api_response_json(&m, &c, 1, &usage),
        "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"created\":5,\"model\":\"m\","
        "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"Hi\","
        "\"refusal\":null},\"logprobs\":{\"content\":[{\"token\":\"Hi\",\"logprob\":-0.5,"
        "\"bytes\":[72,105],\"top_logprobs\":[{\"token\":\"Hi\",\"logprob\":-0.5,\"bytes\":"
        "[72,105]},{\"token\":\"Hey\",\"logprob\":-1.25,\"bytes\":[72,101,121]}]}],"
        "\"refusal\":null},\"finish_reason\":\"stop\"}],\"usage\":" USAGE_JSON "}");
}
END_TEST

START_TEST(test_api_response_json_completion_logprobs)
{
    /* Two tokens; the second is "é" whose alternatives include a duplicate text (kept once) and a
     * byte-fallback half character (U+FFFD). text_offset counts characters from text_offset. */
    struct api_response_meta m = {API_KIND_COMPLETION, "cmpl-2", "m", 5, false, false};
    struct api_top_logprob t0[1] = {{" a", 2, -0.25f}};
    struct api_top_logprob t1[3] = {
        {"\xC3\xA9", 2, -0.5f}, {"\xC3\xA9", 2, -3.0f}, {"\xC3", 1, -4.0f}};
    struct api_token_logprob lp[2] = {{" a", 2, -0.25f, 1, t0, false},
                                      {"\xC3\xA9", 2, -0.5f, 3, t1, false}};
    struct api_choice c = {.index = 0,
                           .text = " a\xC3\xA9",
                           .len = 4,
                           .finish = API_FINISH_LENGTH,
                           .logprobs = lp,
                           .n_logprobs = 2,
                           .text_offset = 10};
    assert_json(
        api_response_json(&m, &c, 1, &usage),
        "{\"id\":\"cmpl-2\",\"object\":\"text_completion\",\"created\":5,\"model\":\"m\","
        "\"choices\":[{\"text\":\" a\xC3\xA9\",\"index\":0,\"logprobs\":{\"tokens\":[\" a\","
        "\"\xC3\xA9\"],\"token_logprobs\":[-0.25,-0.5],\"top_logprobs\":[{\" a\":-0.25},"
        "{\"\xC3\xA9\":-0.5,\"\xEF\xBF\xBD\":-4.0}],\"text_offset\":[10,12]},"
        "\"finish_reason\":\"length\"}],\"usage\":" USAGE_JSON "}");
}
END_TEST

START_TEST(test_api_response_json_sanitises_text_and_logprobs)
{
    struct api_response_meta m = {API_KIND_CHAT, "c", "m", 0, false, false};
    struct api_token_logprob lp[1] = {{"\xF0\x9F", 2, -INFINITY, 0, NULL, false}};
    struct api_choice c = {.index = 0,
                           .text = "ok\xFFok\xF0\x9F",
                           .len = 7,
                           .finish = API_FINISH_STOP,
                           .logprobs = lp,
                           .n_logprobs = 1};
    assert_json(api_response_json(&m, &c, 1, &usage),
                "{\"id\":\"c\",\"object\":\"chat.completion\",\"created\":0,\"model\":\"m\","
                "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":"
                "\"ok\xEF\xBF\xBDok\xEF\xBF\xBD\xEF\xBF\xBD\",\"refusal\":null},\"logprobs\":{"
                "\"content\":[{\"token\":\"\xEF\xBF\xBD\xEF\xBF\xBD\",\"logprob\":-9999.0,"
                "\"bytes\":[240,159],\"top_logprobs\":[]}],\"refusal\":null},\"finish_reason\":"
                "\"stop\"}],\"usage\":" USAGE_JSON "}");
}
END_TEST

START_TEST(test_api_response_chunk_chat_stream_sequence)
{
    struct api_response_meta m = {API_KIND_CHAT, "chatcmpl-9", "m", 7, true, false};
    struct buf sse;
    buf_init(&sse, 1 << 16);
    struct api_choice c = {.index = 0};
    json_t *j = api_response_chunk(&m, &c, true);
    ck_assert_int_eq(api_response_sse(j, &sse), 0);
    json_decref(j);
    c.text = "Hel", c.len = 3;
    j = api_response_chunk(&m, &c, false);
    ck_assert_int_eq(api_response_sse(j, &sse), 0);
    json_decref(j);
    c.text = NULL, c.len = 0, c.finish = API_FINISH_LENGTH;
    j = api_response_chunk(&m, &c, false);
    ck_assert_int_eq(api_response_sse(j, &sse), 0);
    json_decref(j);
    j = api_response_usage_chunk(&m, &usage);
    ck_assert_int_eq(api_response_sse(j, &sse), 0);
    json_decref(j);
    ck_assert_int_eq(api_response_sse_done(&sse), 0);
#define HEAD                                                                                       \
    "data: "                                                                                       \
    "{\"id\":\"chatcmpl-9\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"m\","
    ck_assert_str_eq(buf_cstr(&sse), HEAD
                     "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\","
                     "\"refusal\":null},"
                     "\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n" HEAD
                     "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"logprobs\":null,"
                     "\"finish_reason\":null}],\"usage\":null}\n\n" HEAD
                     "\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":"
                     "\"length\"}],\"usage\":null}\n\n" HEAD "\"choices\":[],\"usage\":" USAGE_JSON
                     "}\n\ndata: [DONE]\n\n");
#undef HEAD
    buf_fini(&sse);
}
END_TEST

START_TEST(test_api_response_chunk_completion)
{
    /* Without include_usage there is no "usage" key in the chunks. */
    struct api_response_meta m = {API_KIND_COMPLETION, "cmpl-9", "m", 7, false, false};
    struct api_choice c = {.index = 1, .text = " upon", .len = 5};
    assert_json(api_response_chunk(&m, &c, true),
                "{\"id\":\"cmpl-9\",\"object\":\"text_completion\",\"created\":7,\"model\":\"m\","
                "\"choices\":[{\"text\":\" upon\",\"index\":1,\"logprobs\":null,"
                "\"finish_reason\":null}]}");
    c.text = "", c.len = 0, c.finish = API_FINISH_STOP;
    assert_json(api_response_chunk(&m, &c, false),
                "{\"id\":\"cmpl-9\",\"object\":\"text_completion\",\"created\":7,\"model\":\"m\","
                "\"choices\":[{\"text\":\"\",\"index\":1,\"logprobs\":null,"
                "\"finish_reason\":\"stop\"}]}");
    assert_json(api_response_usage_chunk(&m, &usage),
                "{\"id\":\"cmpl-9\",\"object\":\"text_completion\",\"created\":7,\"model\":\"m\","
                "\"choices\":[],\"usage\":" USAGE_JSON "}");
}
END_TEST

/* With logprobs asked for, every chunk carries a logprobs object as OpenAI's do: chat's role chunk
 * {"content":[],"refusal":null}, content chunks their tokens (or none), the closing chunk null;
 * completions an object with empty lists on a chunk without tokens. */
START_TEST(test_api_response_chunk_logprobs_shapes)
{
    struct api_response_meta m = {API_KIND_CHAT, "c", "m", 1, false, true};
    struct api_top_logprob tops[1] = {{"Hi", 2, -0.5f}};
    struct api_token_logprob lp[1] = {{"Hi", 2, -0.5f, 1, tops, false}};
    struct api_choice c = {.index = 2};
#define CHAT_HEAD                                                                                  \
    "{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\","
    assert_json(api_response_chunk(&m, &c, true),
                CHAT_HEAD "\"choices\":[{\"index\":2,\"delta\":{\"role\":\"assistant\","
                          "\"content\":\"\",\"refusal\":null},\"logprobs\":{\"content\":[],"
                          "\"refusal\":null},\"finish_reason\":null}]}");
    c.text = "Hi", c.len = 2, c.logprobs = lp, c.n_logprobs = 1;
    assert_json(api_response_chunk(&m, &c, false), CHAT_HEAD
                "\"choices\":[{\"index\":2,\"delta\":{\"content\":\"Hi\"},"
                "\"logprobs\":{\"content\":[{\"token\":\"Hi\",\"logprob\":-0.5,"
                "\"bytes\":[72,105],\"top_logprobs\":[{\"token\":\"Hi\",\"logprob\":"
                "-0.5,\"bytes\":[72,105]}]}],\"refusal\":null},\"finish_reason\":null}]}");
    c.logprobs = NULL, c.n_logprobs = 0;
    assert_json(api_response_chunk(&m, &c, false),
                CHAT_HEAD "\"choices\":[{\"index\":2,\"delta\":{\"content\":\"Hi\"},"
                          "\"logprobs\":{\"content\":[],\"refusal\":null},\"finish_reason\":"
                          "null}]}");
    c.text = NULL, c.len = 0, c.finish = API_FINISH_STOP;
    assert_json(api_response_chunk(&m, &c, false),
                CHAT_HEAD "\"choices\":[{\"index\":2,\"delta\":{},\"logprobs\":null,"
                          "\"finish_reason\":\"stop\"}]}");
#undef CHAT_HEAD
    m.kind = API_KIND_COMPLETION;
    struct api_choice f = {.index = 0, .text = "", .finish = API_FINISH_LENGTH};
    assert_json(api_response_chunk(&m, &f, false),
                "{\"id\":\"c\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\","
                "\"choices\":[{\"text\":\"\",\"index\":0,\"logprobs\":{\"tokens\":[],"
                "\"token_logprobs\":[],\"top_logprobs\":[],\"text_offset\":[]},"
                "\"finish_reason\":\"length\"}]}");
    /* Non-streamed, a choice without tokens still has the (empty) object. */
    assert_json(api_response_json(&m, &f, 1, &usage),
                "{\"id\":\"c\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\","
                "\"choices\":[{\"text\":\"\",\"index\":0,\"logprobs\":{\"tokens\":[],"
                "\"token_logprobs\":[],\"top_logprobs\":[],\"text_offset\":[]},"
                "\"finish_reason\":\"length\"}],\"usage\":" USAGE_JSON "}");
}
END_TEST

/* Echo: the first prompt token has null logprob and top_logprobs (OpenAI returns no logprob for
 * it); a token missing from its own alternatives is added to them ("up to logprobs + 1"). */
START_TEST(test_api_response_echo_logprobs)
{
    struct api_response_meta m = {API_KIND_COMPLETION, "e", "m", 1, false, true};
    struct api_top_logprob t1[1] = {{" the", 4, -0.25f}};
    struct api_token_logprob lp[3] = {
        {"Once", 4, 0.0f, 0, NULL, true},
        {" upon", 5, -2.5f, 1, t1, false}, /* not its own best alternative */
        {" a", 2, -0.125f, 0, NULL, false},
    };
    struct api_choice c = {.index = 0,
                           .text = "Once upon a",
                           .len = 11,
                           .finish = API_FINISH_LENGTH,
                           .logprobs = lp,
                           .n_logprobs = 3};
    assert_json(api_response_json(&m, &c, 1, &usage),
                "{\"id\":\"e\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\","
                "\"choices\":[{\"text\":\"Once upon a\",\"index\":0,\"logprobs\":{\"tokens\":"
                "[\"Once\",\" upon\",\" a\"],\"token_logprobs\":[null,-2.5,-0.125],"
                "\"top_logprobs\":[null,{\" the\":-0.25,\" upon\":-2.5},{\" a\":-0.125}],"
                "\"text_offset\":[0,4,9]},\"finish_reason\":\"length\"}],\"usage\":" USAGE_JSON
                "}");
}
END_TEST

/* continuous_usage_stats: a chunk's own usage replaces "usage": null. */
START_TEST(test_api_response_chunk_continuous_usage)
{
    struct api_response_meta m = {API_KIND_COMPLETION, "u", "m", 1, true, false};
    struct api_usage u = {.prompt_tokens = 4, .completion_tokens = 1};
    struct api_choice c = {.index = 3, .text = "x", .len = 1, .usage = &u};
    assert_json(api_response_chunk(&m, &c, false),
                "{\"id\":\"u\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\","
                "\"choices\":[{\"text\":\"x\",\"index\":3,\"logprobs\":null,\"finish_reason\":"
                "null}],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":1,\"total_tokens\":5,"
                "\"prompt_tokens_details\":{\"cached_tokens\":0}}}");
    m.include_usage = false; /* continuous usage alone */
    m.kind = API_KIND_CHAT;
    assert_json(api_response_chunk(&m, &c, true),
                "{\"id\":\"u\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":"
                "\"m\",\"choices\":[{\"index\":3,\"delta\":{\"role\":\"assistant\",\"content\":"
                "\"\",\"refusal\":null},\"logprobs\":null,\"finish_reason\":null}],\"usage\":{"
                "\"prompt_tokens\":4,\"completion_tokens\":1,\"total_tokens\":5,"
                "\"prompt_tokens_details\":{\"cached_tokens\":0}}}");
}
END_TEST

START_TEST(test_api_model_json_shape)
{
    assert_json(api_model_json("stories", 1700000000, 256),
                "{\"id\":\"stories\",\"object\":\"model\",\"created\":1700000000,"
                "\"owned_by\":\"cinfer\",\"max_model_len\":256}");
}
END_TEST

START_TEST(test_api_response_sse_bounded)
{
    struct buf b;
    buf_init(&b, 24);
    ck_assert_int_eq(buf_puts(&b, "x"), 0);
    json_t *j = json_pack("{s:s}", "k", "a long enough value to overflow");
    ck_assert_int_eq(api_response_sse(j, &b), ERR_TOO_BIG);
    ck_assert_str_eq(buf_cstr(&b), "x"); /* restored */
    ck_assert_int_eq(api_response_sse(NULL, &b), ERR_INVAL);
    json_decref(j);
    buf_fini(&b);
    ck_assert_ptr_null(api_finish_name(API_FINISH_NONE));
    ck_assert_str_eq(api_finish_name(API_FINISH_STOP), "stop");
}
END_TEST

Suite *api_response_suite(void)
{
    Suite *s = suite_create("api_response");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_api_response_id_format);
    tcase_add_test(tc, test_api_response_json_completion);
    tcase_add_test(tc, test_api_response_json_chat_with_logprobs);
    tcase_add_test(tc, test_api_response_json_completion_logprobs);
    tcase_add_test(tc, test_api_response_json_sanitises_text_and_logprobs);
    tcase_add_test(tc, test_api_response_chunk_chat_stream_sequence);
    tcase_add_test(tc, test_api_response_chunk_completion);
    tcase_add_test(tc, test_api_response_chunk_logprobs_shapes);
    tcase_add_test(tc, test_api_response_echo_logprobs);
    tcase_add_test(tc, test_api_response_chunk_continuous_usage);
    tcase_add_test(tc, test_api_model_json_shape);
    tcase_add_test(tc, test_api_response_sse_bounded);
    suite_add_tcase(s, tc);
    return s;
}
