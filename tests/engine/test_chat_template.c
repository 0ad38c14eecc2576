/* Chat templates: the built-in families render llama.cpp's strings (tests/test-chat-template.cpp,
 * `expected_output`, its hand-written formatters, for the same conversation); the model's own
 * template renders through the Jinja interpreter with transformers' variables, including
 * chat_template_kwargs (Qwen3's enable_thinking) and tools; --chat-template resolves built-in
 * names, inline Jinja2 and files, and refuses unknown names; the BOS a template renders is
 * dropped when the tokenizer adds its own; content parts are joined unless the template iterates
 * them; template failures come back with the template's message. */
#include "engine/api/chat_template.h"

#include "common/err.h"
#include "tests/testutil.h"

#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char sys_[] = "You are a helpful assistant", u1[] = "Hello", a1[] = "Hi there",
            u2[] = "Who are you", a2[] = "   I am an assistant   ", u3[] = "Another question";

static const struct api_message convo[] = {
    {API_ROLE_SYSTEM, sys_}, {API_ROLE_USER, u1},      {API_ROLE_ASSISTANT, a1},
    {API_ROLE_USER, u2},     {API_ROLE_ASSISTANT, a2}, {API_ROLE_USER, u3},
};

static struct chat_template *builtin(const char *name)
{
    struct chat_template_config cfg = {.override = name};
    struct chat_template *ct = NULL;
    char err[256];
    ck_assert_msg(chat_template_new(&cfg, &ct, err, sizeof(err)) == 0, "%s: %s", name, err);
    ck_assert_int_eq(chat_template_origin(ct), CHAT_TEMPLATE_FROM_BUILTIN);
    ck_assert_str_eq(chat_template_describe(ct), name);
    return ct;
}

static const struct {
    const char *name;
    const char *want; /* add_generation_prompt = true */
} goldens[] = {
    {"chatml",
     "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>"
     "\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n"
     "<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother "
     "question<|im_end|>\n<|im_start|>assistant\n"},
    {"llama2",
     "[INST] You are a helpful assistant\nHello [/INST]Hi there</s>[INST] Who are you [/INST]   I "
     "am an assistant   </s>[INST] Another question [/INST]"},
    {"llama2-sys-bos",
     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s><s>[INST] "
     "Who are you [/INST]   I am an assistant   </s><s>[INST] Another question [/INST]"},
    {"llama2-sys-strip",
     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>[INST] Who "
     "are you [/INST]I am an assistant</s>[INST] Another question [/INST]"},
    {"llama2-sys",
     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>[INST] Who "
     "are you [/INST]   I am an assistant   </s>[INST] Another question [/INST]"},
    {"mistral-v1",
     " [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s> [INST] Who are you [/INST] "
     "   I am an assistant   </s> [INST] Another question [/INST]"},
    {"mistral-v3",
     "[INST] You are a helpful assistant\n\nHello[/INST] Hi there</s>[INST] Who are you[/INST] I "
     "am an assistant</s>[INST] Another question[/INST]"},
    {"mistral-v3-tekken",
     "[INST]You are a helpful assistant\n\nHello[/INST]Hi there</s>[INST]Who are you[/INST]   I am "
     "an assistant   </s>[INST]Another question[/INST]"},
    {"mistral-v7",
     "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi "
     "there</s>[INST] Who are you[/INST]    I am an assistant   </s>[INST] Another "
     "question[/INST]"},
    {"llama3",
     "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful "
     "assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_"
     "id|>assistant<|end_header_id|>\n\nHi "
     "there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are "
     "you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an "
     "assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother "
     "question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"zephyr",
     "<|system|>\nYou are a helpful assistant<|endoftext|>\n<|user|>\nHello<|endoftext|>\n"
     "<|assistant|>\nHi there<|endoftext|>\n<|user|>\nWho are you<|endoftext|>\n<|assistant|>\n   "
     "I am an assistant   <|endoftext|>\n<|user|>\nAnother question<|endoftext|>\n<|assistant|>\n"},
    {"zephyr-eos",
     "<|system|>\nYou are a helpful assistant</s>\n<|user|>\nHello</s>\n<|assistant|>\nHi "
     "there</s>\n<|user|>\nWho are you</s>\n<|assistant|>\n   I am an assistant   "
     "</s>\n<|user|>\nAnother question</s>\n<|assistant|>\n"},
};

START_TEST(test_chat_template_builtin_golden)
{
    struct chat_template *ct = builtin(goldens[_i].name);
    struct buf out;
    char err[256];
    buf_init(&out, 1 << 16);
    ck_assert_msg(chat_template_render(ct, convo, 6, true, &out, err, sizeof(err)) == 0, "%s", err);
    ck_assert_str_eq(buf_cstr(&out), goldens[_i].want);
    buf_fini(&out);
    chat_template_free(ct);
}
END_TEST

START_TEST(test_chat_template_builtins_all_tested)
{
    size_t n = 0;
    while (chat_template_builtin_name(n)) n++;
    ck_assert_uint_eq(n, sizeof(goldens) / sizeof(goldens[0]));
}
END_TEST

START_TEST(test_chat_template_builtin_without_generation_prompt)
{
    struct buf out;
    char err[256];
    buf_init(&out, 0);
    struct chat_template *ct = builtin("chatml");
    ck_assert_int_eq(chat_template_render(ct, convo + 1, 1, false, &out, err, sizeof(err)), 0);
    ck_assert_str_eq(buf_cstr(&out), "<|im_start|>user\nHello<|im_end|>\n");
    chat_template_free(ct);
    buf_reset(&out);
    ct = builtin("llama2-sys");
    ck_assert_int_eq(chat_template_render(ct, convo, 2, false, &out, err, sizeof(err)), 0);
    ck_assert_str_eq(buf_cstr(&out),
                     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]");
    chat_template_free(ct);
    buf_fini(&out);
}
END_TEST

START_TEST(test_chat_template_tool_role_and_empty_content)
{
    char empty[] = "", tool[] = "42";
    struct api_message m[] = {
        {API_ROLE_USER, u1}, {API_ROLE_ASSISTANT, empty}, {API_ROLE_TOOL, tool}};
    struct buf out;
    char err[256];
    buf_init(&out, 0);
    struct chat_template *ct = builtin("chatml");
    ck_assert_int_eq(chat_template_render(ct, m, 3, true, &out, err, sizeof(err)), 0);
    ck_assert_str_eq(buf_cstr(&out), "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
                                     "<|im_end|>\n<|im_start|>tool\n42<|im_end|>\n"
                                     "<|im_start|>assistant\n");
    chat_template_free(ct);
    buf_fini(&out);
}
END_TEST

START_TEST(test_chat_template_unknown_name_is_an_error)
{
    struct chat_template_config cfg = {.override = "chatlm", .model_template = "{{ x }}"};
    struct chat_template *ct = NULL;
    char err[512];
    ck_assert_int_eq(chat_template_new(&cfg, &ct, err, sizeof(err)), ERR_NOT_FOUND);
    ck_assert_ptr_null(ct);
    ck_assert_ptr_nonnull(strstr(err, "unknown chat template 'chatlm'"));
    ck_assert_ptr_nonnull(strstr(err, "chatml"));
    cfg.override = "/nonexistent/template.jinja";
    ck_assert_int_eq(chat_template_new(&cfg, &ct, err, sizeof(err)), ERR_IO);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/template.jinja"));
}
END_TEST

START_TEST(test_chat_template_override_inline_and_file)
{
    struct chat_template_config cfg = {
        .override = "{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}",
        .model_template = "ignored {{ messages }}"};
    struct chat_template *ct = NULL;
    struct buf out;
    char err[256], path[512];
    buf_init(&out, 0);
    ck_assert_int_eq(chat_template_new(&cfg, &ct, err, sizeof(err)), 0);
    ck_assert_int_eq(chat_template_origin(ct), CHAT_TEMPLATE_FROM_INLINE);
    ck_assert_int_eq(chat_template_render(ct, convo, 2, true, &out, err, sizeof(err)), 0);
    ck_assert_str_eq(buf_cstr(&out), "[system:You are a helpful assistant][user:Hello]");
    chat_template_free(ct);

    snprintf(path, sizeof(path), "%s/cinfer-chat-%d.jinja", test_tmpdir(), (int)getpid());
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{{ messages | length }} message(s)\n", f);
    fclose(f);
    cfg.override = path;
    ck_assert_int_eq(chat_template_new(&cfg, &ct, err, sizeof(err)), 0);
    ck_assert_int_eq(chat_template_origin(ct), CHAT_TEMPLATE_FROM_FILE);
    ck_assert_str_eq(chat_template_describe(ct), path);
    buf_reset(&out);
    ck_assert_int_eq(chat_template_render(ct, convo, 3, true, &out, err, sizeof(err)), 0);
    ck_assert_str_eq(buf_cstr(&out), "3 message(s)"); /* jinja2 drops the final newline */
    chat_template_free(ct);
    unlink(path);
    buf_fini(&out);
}
END_TEST

START_TEST(test_chat_template_fallback_and_broken_model_template)
{
    struct chat_template_config cfg = {0};
    struct chat_template *ct = NULL;
    char err[256];
    ck_assert_int_eq(chat_template_new(&cfg, &ct, err, sizeof(err)), 0);
    ck_assert_int_eq(chat_template_origin(ct), CHAT_TEMPLATE_FROM_FALLBACK);
    ck_assert_str_eq(chat_template_describe(ct), "chatml");
    chat_template_free(ct);
    /* a broken model template fails at load with the interpreter's reason */
    cfg.model_template = "{% for m in messages %}{{ m.content | nosuch }}{% endfor %}";
    ck_assert_int_eq(chat_template_new(&cfg, &ct, err, sizeof(err)), ERR_PARSE);
    ck_assert_ptr_nonnull(strstr(err, "no filter named 'nosuch'"));
    cfg.model_template = "{% for m in messages %}";
    ck_assert_int_eq(chat_template_new(&cfg, &ct, err, sizeof(err)), ERR_PARSE);
    ck_assert_ptr_nonnull(strstr(err, "endfor"));
}
END_TEST

/* A Llama-3-style template emits the BOS text: dropped when the tokenizer adds BOS, kept when it
 * does not (then the text's BOS is the prompt's only one). */
START_TEST(test_chat_template_bos_once)
{
    const char *tmpl = "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}"
                       "{% endfor %}{{ eos_token }}";
    struct chat_template_config cfg = {.model_template = tmpl,
                                       .bos_token = "<|begin_of_text|>",
                                       .eos_token = "<|eot_id|>",
                                       .add_bos = true};
    struct chat_template *ct = NULL;
    struct buf out;
    char err[256];
    buf_init(&out, 0);
    ck_assert_int_eq(chat_template_new(&cfg, &ct, err, sizeof(err)), 0);
    ck_assert_int_eq(chat_template_origin(ct), CHAT_TEMPLATE_FROM_MODEL);
    ck_assert_int_eq(chat_template_render(ct, convo + 1, 1, true, &out, err, sizeof(err)), 0);
    ck_assert_str_eq(buf_cstr(&out), "<user>Hello<|eot_id|>");
    chat_template_free(ct);
    cfg.add_bos = false;
    cfg.add_eos = true;
    ck_assert_int_eq(chat_template_new(&cfg, &ct, err, sizeof(err)), 0);
    buf_reset(&out);
    ck_assert_int_eq(chat_template_render(ct, convo + 1, 1, true, &out, err, sizeof(err)), 0);
    ck_assert_str_eq(buf_cstr(&out), "<|begin_of_text|><user>Hello");
    chat_template_free(ct);
    /* no bos_token known: the variable is undefined (renders empty), as transformers leaves it */
    cfg = (struct chat_template_config){.model_template = tmpl};
    ck_assert_int_eq(chat_template_new(&cfg, &ct, err, sizeof(err)), 0);
    buf_reset(&out);
    ck_assert_int_eq(chat_template_render(ct, convo + 1, 1, true, &out, err, sizeof(err)), 0);
    ck_assert_str_eq(buf_cstr(&out), "<user>Hello");
    chat_template_free(ct);
    buf_fini(&out);
}
END_TEST

static struct chat_template *from_file(const char *path, const char *bos, const char *eos)
{
    size_t len;
    char *src = test_read_file(path, &len);
    ck_assert_msg(src, "cannot read %s", path);
    struct chat_template_config cfg = {.model_template = src, .bos_token = bos, .eos_token = eos};
    struct chat_template *ct = NULL;
    char err[256];
    ck_assert_msg(chat_template_new(&cfg, &ct, err, sizeof(err)) == 0, "%s: %s", path, err);
    free(src);
    return ct;
}

static json_t *parse_json(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    ck_assert_msg(j, "%s: %s", text, je.text);
    return j;
}

/* Qwen3's template with enable_thinking false adds the empty think block; tools go in the
 * system prompt as JSON; a tool result becomes a <tool_response> user turn. */
START_TEST(test_chat_template_kwargs_and_tools)
{
    struct chat_template *ct =
        from_file("tests/testdata/chat/templates/Qwen-Qwen3-0.6B.jinja", NULL, "<|im_end|>");
    json_t *msgs = parse_json("[{\"role\":\"user\",\"content\":\"Hi\"}]");
    json_t *kw = parse_json("{\"enable_thinking\": false}");
    struct chat_template_input in = {.messages = msgs, .kwargs = kw, .add_generation_prompt = true};
    struct buf out;
    char err[256];
    buf_init(&out, 0);
    ck_assert_msg(chat_template_apply(ct, &in, &out, err, sizeof(err)) == 0, "%s", err);
    ck_assert_str_eq(buf_cstr(&out), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
                                     "<think>\n\n</think>\n\n");
    buf_reset(&out);
    in.kwargs = NULL;
    ck_assert_int_eq(chat_template_apply(ct, &in, &out, err, sizeof(err)), 0);
    ck_assert_str_eq(buf_cstr(&out), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");

    json_t *tools = parse_json("[{\"type\":\"function\",\"function\":{\"name\":\"f\","
                               "\"parameters\":{\"type\":\"object\"}}}]");
    json_t *msgs2 = parse_json(
        "[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"content\":\"\","
        "\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
        "{\"a\":1}}}]},{\"role\":\"tool\",\"content\":\"ok\"}]");
    in = (struct chat_template_input){
        .messages = msgs2, .tools = tools, .add_generation_prompt = true};
    buf_reset(&out);
    ck_assert_msg(chat_template_apply(ct, &in, &out, err, sizeof(err)) == 0, "%s", err);
    ck_assert_ptr_nonnull(strstr(buf_cstr(&out), "<tools>\n{\"type\": \"function\", \"function\": "
                                                 "{\"name\": \"f\""));
    ck_assert_ptr_nonnull(strstr(buf_cstr(&out), "<tool_call>\n{\"name\": \"f\", \"arguments\": "
                                                 "{\"a\": 1}}\n</tool_call>"));
    ck_assert_ptr_nonnull(strstr(buf_cstr(&out), "<|im_start|>user\n<tool_response>\nok\n"
                                                 "</tool_response><|im_end|>"));
    /* kwargs may not replace the request's own variables */
    json_t *bad = parse_json("{\"messages\": []}");
    in.kwargs = bad;
    ck_assert_int_eq(chat_template_apply(ct, &in, &out, err, sizeof(err)), ERR_INVAL);
    ck_assert_ptr_nonnull(strstr(err, "'messages'"));
    json_decref(bad);
    json_decref(tools);
    json_decref(msgs2);
    json_decref(kw);
    json_decref(msgs);
    chat_template_free(ct);
    buf_fini(&out);
}
END_TEST

/* Lists of parts are joined for templates that read content as a string (Qwen2.5's would print
 * a Python list otherwise) and passed whole to templates that iterate them. */
START_TEST(test_chat_template_content_parts)
{
    json_t *msgs = parse_json("[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                              "{\"type\":\"text\",\"text\":\"b\"}]}]");
    struct chat_template_input in = {.messages = msgs};
    struct buf out;
    char err[256];
    buf_init(&out, 0);
    struct chat_template *ct = builtin("chatml");
    ck_assert_int_eq(chat_template_apply(ct, &in, &out, err, sizeof(err)), 0);
    ck_assert_str_eq(buf_cstr(&out), "<|im_start|>user\na\nb<|im_end|>\n");
    chat_template_free(ct);
    struct chat_template_config cfg = {
        .model_template = "{% for m in messages %}{% for p in m.content %}({{ p.text }})"
                          "{% endfor %}{% endfor %}"};
    ck_assert_int_eq(chat_template_new(&cfg, &ct, err, sizeof(err)), 0);
    buf_reset(&out);
    ck_assert_int_eq(chat_template_apply(ct, &in, &out, err, sizeof(err)), 0);
    ck_assert_str_eq(buf_cstr(&out), "(a)(b)");
    chat_template_free(ct);
    json_t *img = parse_json("[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]");
    in.messages = img;
    ct = builtin("chatml");
    ck_assert_int_eq(chat_template_apply(ct, &in, &out, err, sizeof(err)), ERR_INVAL);
    ck_assert_ptr_nonnull(strstr(err, "messages[0].content[0]"));
    chat_template_free(ct);
    json_decref(img);
    json_decref(msgs);
    buf_fini(&out);
}
END_TEST

/* OpenAI clients send tool-call arguments as a JSON string; templates get the object. */
START_TEST(test_chat_template_tool_arguments_parsed)
{
    struct chat_template_config cfg = {
        .model_template = "{% for m in messages %}{% for tc in m.tool_calls %}"
                          "{{ tc.function.arguments | tojson }}{% endfor %}{% endfor %}"};
    struct chat_template *ct = NULL;
    char err[256];
    ck_assert_int_eq(chat_template_new(&cfg, &ct, err, sizeof(err)), 0);
    json_t *msgs = parse_json(
        "[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"type\":\"function\","
        "\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":{\"n\":1}}}]}]");
    struct chat_template_input in = {.messages = msgs};
    struct buf out;
    buf_init(&out, 0);
    ck_assert_msg(chat_template_apply(ct, &in, &out, err, sizeof(err)) == 0, "%s", err);
    ck_assert_str_eq(buf_cstr(&out), "{\"city\": \"Paris\"}{\"n\": 1}");
    /* the caller's JSON is left as it was */
    ck_assert(json_is_string(json_object_get(
        json_object_get(json_array_get(json_object_get(json_array_get(msgs, 0), "tool_calls"), 0),
                        "function"),
        "arguments")));
    json_t *bad = parse_json("[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":"
                             "{\"name\":\"f\",\"arguments\":\"{not json\"}}]}]");
    in.messages = bad;
    ck_assert_int_eq(chat_template_apply(ct, &in, &out, err, sizeof(err)), ERR_INVAL);
    ck_assert_ptr_nonnull(strstr(err, "messages[0].tool_calls[0].function.arguments is not JSON"));
    json_decref(bad);
    json_decref(msgs);
    chat_template_free(ct);
    buf_fini(&out);
}
END_TEST

/* Gemma 2's template refuses a system message with raise_exception: the message comes back. */
START_TEST(test_chat_template_raise_exception_message)
{
    const char *path = test_shared_path("testdata/chat-templates/google-gemma-2-2b-it.jinja");
    if (!path) return;
    struct chat_template *ct = from_file(path, "<bos>", "<eos>");
    struct buf out;
    char err[256];
    buf_init(&out, 0);
    ck_assert_int_eq(buf_puts(&out, "keep"), 0);
    ck_assert_int_eq(chat_template_render(ct, convo, 2, true, &out, err, sizeof(err)), ERR_INVAL);
    ck_assert_ptr_nonnull(strstr(err, "System role not supported"));
    ck_assert_str_eq(buf_cstr(&out), "keep");
    buf_reset(&out);
    ck_assert_int_eq(chat_template_render(ct, convo + 1, 1, true, &out, err, sizeof(err)), 0);
    ck_assert_str_eq(buf_cstr(&out), "<bos><start_of_turn>user\nHello<end_of_turn>\n"
                                     "<start_of_turn>model\n");
    chat_template_free(ct);
    buf_fini(&out);
}
END_TEST

/* The SmolLM2 model's own template (extracted from the shared GGUF) adds its default system
 * prompt when the conversation has none. */
START_TEST(test_chat_template_smollm2)
{
    struct chat_template *ct =
        from_file("tests/testdata/chat/templates/HuggingFaceTB-SmolLM2-135M-Instruct.jinja",
                  "<|im_start|>", "<|im_end|>");
    struct buf out;
    char err[256];
    buf_init(&out, 0);
    ck_assert_int_eq(chat_template_render(ct, convo + 1, 1, true, &out, err, sizeof(err)), 0);
    ck_assert_str_eq(buf_cstr(&out), "<|im_start|>system\nYou are a helpful AI assistant named "
                                     "SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user"
                                     "\nHello<|im_end|>\n<|im_start|>assistant\n");
    chat_template_free(ct);
    buf_fini(&out);
}
END_TEST

START_TEST(test_chat_template_rejects_bad_args_and_bounds)
{
    struct buf out;
    char err[256];
    buf_init(&out, 16);
    struct chat_template *ct = builtin("llama3");
    ck_assert_int_eq(chat_template_render(ct, convo, 0, true, &out, err, sizeof(err)), ERR_INVAL);
    ck_assert_int_eq(buf_puts(&out, "keep"), 0);
    /* Too big for the buffer: ERR_TOO_BIG and the earlier contents are kept intact. */
    ck_assert_int_eq(chat_template_render(ct, convo, 6, true, &out, err, sizeof(err)), ERR_TOO_BIG);
    ck_assert_str_eq(buf_cstr(&out), "keep");
    struct chat_template_input in = {.messages = json_object()};
    ck_assert_int_eq(chat_template_apply(ct, &in, &out, err, sizeof(err)), ERR_INVAL);
    json_decref((json_t *)in.messages);
    chat_template_free(ct);
    chat_template_free(NULL);
    buf_fini(&out);
}
END_TEST

/* The tool-call form each template names decides tool_choice auto's call trigger. */
START_TEST(test_chat_template_tool_format)
{
    static const struct {
        const char *file;
        enum api_tool_format want;
    } cases[] = {
        {"Qwen-Qwen3-0.6B.jinja", API_TOOL_FORMAT_HERMES},
        {"Qwen-QwQ-32B.jinja", API_TOOL_FORMAT_HERMES},
        {"Qwen3-Coder.jinja", API_TOOL_FORMAT_OTHER},
        {"GLM-4.6.jinja", API_TOOL_FORMAT_OTHER},
        {"Mistral-Small-3.2-24B-Instruct-2506.jinja", API_TOOL_FORMAT_OTHER},
        {"HuggingFaceTB-SmolLM2-135M-Instruct.jinja", API_TOOL_FORMAT_JSON},
    };
    char path[256];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(path, sizeof(path), "tests/testdata/chat/templates/%s", cases[i].file);
        struct chat_template *ct = from_file(path, NULL, NULL);
        ck_assert_msg(chat_template_tool_format(ct) == cases[i].want, "%s", cases[i].file);
        chat_template_free(ct);
    }
    static const struct {
        const char *src;
        enum api_tool_format want;
    } inl[] = {
        {"{{ '[TOOL_CALLS]' }}{{ tools | tojson }}", API_TOOL_FORMAT_MISTRAL},
        {"{{ '<|python_tag|>' }}", API_TOOL_FORMAT_LLAMA3},
        {"{{ messages[0].content }}", API_TOOL_FORMAT_JSON},
    };
    for (size_t i = 0; i < sizeof(inl) / sizeof(inl[0]); i++) {
        struct chat_template_config cfg = {.model_template = inl[i].src};
        struct chat_template *ct = NULL;
        char err[256];
        ck_assert_msg(chat_template_new(&cfg, &ct, err, sizeof(err)) == 0, "%s", err);
        ck_assert_msg(chat_template_tool_format(ct) == inl[i].want, "%s", inl[i].src);
        chat_template_free(ct);
    }
}
END_TEST

Suite *chat_template_suite(void)
{
    Suite *s = suite_create("chat_template");
    TCase *tc = tcase_create("core");
    tcase_add_loop_test(tc, test_chat_template_builtin_golden, 0,
                        (int)(sizeof(goldens) / sizeof(goldens[0])));
    tcase_add_test(tc, test_chat_template_builtins_all_tested);
    tcase_add_test(tc, test_chat_template_builtin_without_generation_prompt);
    tcase_add_test(tc, test_chat_template_tool_role_and_empty_content);
    tcase_add_test(tc, test_chat_template_unknown_name_is_an_error);
    tcase_add_test(tc, test_chat_template_override_inline_and_file);
    tcase_add_test(tc, test_chat_template_tool_format);
    tcase_add_test(tc, test_chat_template_fallback_and_broken_model_template);
    tcase_add_test(tc, test_chat_template_bos_once);
    tcase_add_test(tc, test_chat_template_kwargs_and_tools);
    tcase_add_test(tc, test_chat_template_content_parts);
    tcase_add_test(tc, test_chat_template_tool_arguments_parsed);
    tcase_add_test(tc, test_chat_template_raise_exception_message);
    tcase_add_test(tc, test_chat_template_smollm2);
    tcase_add_test(tc, test_chat_template_rejects_bad_args_and_bounds);
    suite_add_tcase(s, tc);
    return s;
}
