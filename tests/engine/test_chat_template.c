/* Golden tests of chat template recognition and rendering. The conversation and the expected
 * strings are llama.cpp's (tests/test-chat-template.cpp, `expected_output`, the non-Jinja path),
 * so prompts built here tokenize as llama.cpp's do; the templates are the distinctive parts of the
 * models' real `tokenizer.chat_template` strings. */
#include "engine/api/chat_template.h"

#include "common/err.h"

#include <check.h>
#include <stdbool.h>
#include <string.h>

static char sys_[] = "You are a helpful assistant", u1[] = "Hello", a1[] = "Hi there",
            u2[] = "Who are you", a2[] = "   I am an assistant   ", u3[] = "Another question";

static const struct api_message convo[] = {
    {API_ROLE_SYSTEM, sys_}, {API_ROLE_USER, u1},      {API_ROLE_ASSISTANT, a1},
    {API_ROLE_USER, u2},     {API_ROLE_ASSISTANT, a2}, {API_ROLE_USER, u3},
};

struct golden {
    const char *model;
    const char *tmpl; /* an excerpt of the model's chat template */
    enum chat_template_kind kind;
    const char *want; /* add_generation_prompt = true */
};

static const struct golden goldens[] = {
    {"teknium/OpenHermes-2.5-Mistral-7B",
     "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
     "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
     "'<|im_start|>assistant\\n' }}{% endif %}",
     CHAT_TEMPLATE_CHATML,
     "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>"
     "\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n"
     "<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother "
     "question<|im_end|>\n<|im_start|>assistant\n"},
    {"mistralai/Mistral-7B-Instruct-v0.2 (pre-v1, no system prompt)",
     "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' "
     "+ message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ "
     "message['content'] + eos_token}}{% endif %}{% endfor %}",
     CHAT_TEMPLATE_LLAMA2,
     "[INST] You are a helpful assistant\nHello [/INST]Hi there</s>[INST] Who are you [/INST]   I "
     "am an assistant   </s>[INST] Another question [/INST]"},
    {"TheBloke/FusionNet_34Bx2_MoE-AWQ",
     "{%- for idx in range(0, messages|length) -%}{%- if messages[idx]['role'] == 'user' -%}{%- if "
     "idx > 1 -%}{{- bos_token + '[INST] ' + messages[idx]['content'] + ' [/INST]' -}}{%- else "
     "-%}{{- messages[idx]['content'] + ' [/INST]' -}}{%- endif -%}{% elif messages[idx]['role'] "
     "== 'system' %}{{- '[INST] <<SYS>>\\n' + messages[idx]['content'] + '\\n<</SYS>>\\n\\n' -}}",
     CHAT_TEMPLATE_LLAMA2_SYS_BOS,
     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s><s>[INST] "
     "Who are you [/INST]   I am an assistant   </s><s>[INST] Another question [/INST]"},
    {"bofenghuang/vigogne-2-70b-chat",
     "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + "
     "system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% endif %}{% if "
     "message['role'] == 'user' %}{{ '[INST] ' + content.strip() + ' [/INST]' }}",
     CHAT_TEMPLATE_LLAMA2_SYS_STRIP,
     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>[INST] Who "
     "are you [/INST]I am an assistant</s>[INST] Another question [/INST]"},
    {"meta-llama/Llama-2-7b-chat (sys, no strip)",
     "{% if message['role'] == 'system' %}{{ '<<SYS>>\\n' + message['content'] + "
     "'\\n<</SYS>>\\n\\n' }}{% elif message['role'] == 'user' %}{{ '[INST] ' + message['content'] "
     "+ ' [/INST]' }}{% endif %}",
     CHAT_TEMPLATE_LLAMA2_SYS,
     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>[INST] Who "
     "are you [/INST]   I am an assistant   </s>[INST] Another question [/INST]"},
    {"mistralai/Mistral-7B-Instruct-v0.2 (mistralai 'v1' template with a system prompt)",
     "{%- if loop.first and system_message is defined %}{{- ' [INST] ' + system_message + "
     "'\\n\\n' + message['content'] + ' [/INST]' }}{%- else %}{{- ' [INST] ' + message['content'] "
     "+ ' [/INST]' }}{%- endif %}",
     CHAT_TEMPLATE_MISTRAL_V1,
     " [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s> [INST] Who are you [/INST] "
     " "
     "  I am an assistant   </s> [INST] Another question [/INST]"},
    {"Mistral-Large-Instruct-2407 (mistralai 'v3' template)",
     "{%- if tools is not none and (message == user_messages[-1]) %}{{- \"[AVAILABLE_TOOLS] [\" "
     "}}{%- endif %}{{- \"[INST] \" + system_message + \"\\n\\n\" + message[\"content\"] + "
     "\"[/INST]\" }}",
     CHAT_TEMPLATE_MISTRAL_V3,
     "[INST] You are a helpful assistant\n\nHello[/INST] Hi there</s>[INST] Who are you[/INST] I "
     "am "
     "an assistant</s>[INST] Another question[/INST]"},
    {"Mistral-Nemo-Instruct-2407 (mistralai 'v3-tekken' template)",
     "{%- if tools is not none and (message == user_messages[-1]) %}{{- \"[AVAILABLE_TOOLS][\" "
     "}}{%- endif %}{{- \"[INST]\" + system_message + \"\\n\\n\" + message[\"content\"] + "
     "\"[/INST]\" }}",
     CHAT_TEMPLATE_MISTRAL_V3_TEKKEN,
     "[INST]You are a helpful assistant\n\nHello[/INST]Hi there</s>[INST]Who are you[/INST]   I am "
     "an assistant   </s>[INST]Another question[/INST]"},
    {"mistralai/Mistral-Large-Instruct-2411 (mistralai 'v7' template)",
     "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
     "message['content'] + '[/INST]' }}{% elif message['role'] == 'system' %}{{ '[SYSTEM_PROMPT] ' "
     "+ message['content'] + '[/SYSTEM_PROMPT]' }}{% endif %}{% endfor %}",
     CHAT_TEMPLATE_MISTRAL_V7,
     "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi "
     "there</s>[INST] Who are you[/INST]    I am an assistant   </s>[INST] Another "
     "question[/INST]"},
    {"meta-llama/Meta-Llama-3-8B-Instruct",
     "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
     "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | "
     "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% "
     "endif %}{{ content }}{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}",
     CHAT_TEMPLATE_LLAMA3,
     "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful "
     "assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_"
     "id|>assistant<|end_header_id|>\n\nHi "
     "there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are "
     "you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an "
     "assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother "
     "question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"zephyr with turns ended by a literal <|endoftext|> (llama.cpp's 'zephyr')",
     "{% for message in messages %}{{ '<|' + message['role'] + '|>\n' + message['content'] + "
     "'<|endoftext|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|user|>' if false "
     "}}{{ '<|assistant|>\n' }}{% endif %}",
     CHAT_TEMPLATE_ZEPHYR,
     "<|system|>\nYou are a helpful assistant<|endoftext|>\n<|user|>\nHello<|endoftext|>\n"
     "<|assistant|>\nHi there<|endoftext|>\n<|user|>\nWho are you<|endoftext|>\n<|assistant|>\n   "
     "I am an assistant   <|endoftext|>\n<|user|>\nAnother question<|endoftext|>\n<|assistant|>\n"},
    {"HuggingFaceH4/zephyr-7b-beta",
     "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + "
     "message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ "
     "'<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n{% endfor %}",
     CHAT_TEMPLATE_ZEPHYR_EOS,
     "<|system|>\nYou are a helpful assistant</s>\n<|user|>\nHello</s>\n<|assistant|>\nHi "
     "there</s>\n<|user|>\nWho are you</s>\n<|assistant|>\n   I am an assistant   "
     "</s>\n<|user|>\nAnother question</s>\n<|assistant|>\n"},
};

START_TEST(test_chat_template_render_golden)
{
    const struct golden *g = &goldens[_i];
    bool known = false;
    enum chat_template_kind k = chat_template_detect(g->tmpl, &known);
    ck_assert_msg(known, "%s: not recognised", g->model);
    ck_assert_msg(k == g->kind, "%s: detected %s, want %s", g->model, chat_template_name(k),
                  chat_template_name(g->kind));
    struct buf out;
    buf_init(&out, 1 << 16);
    ck_assert_int_eq(chat_template_render(k, convo, 6, true, &out), 0);
    ck_assert_str_eq(buf_cstr(&out), g->want);
    /* The name round-trips through detection (a command-line override). */
    ck_assert_int_eq(chat_template_detect(chat_template_name(k), &known), k);
    ck_assert(known);
    buf_fini(&out);
}
END_TEST

START_TEST(test_chat_template_render_without_generation_prompt)
{
    struct buf out;
    buf_init(&out, 0);
    ck_assert_int_eq(chat_template_render(CHAT_TEMPLATE_CHATML, convo + 1, 1, false, &out), 0);
    ck_assert_str_eq(buf_cstr(&out), "<|im_start|>user\nHello<|im_end|>\n");
    buf_reset(&out);
    ck_assert_int_eq(chat_template_render(CHAT_TEMPLATE_LLAMA3, convo + 1, 1, false, &out), 0);
    ck_assert_str_eq(buf_cstr(&out), "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>");
    buf_reset(&out);
    /* [INST] families end a user turn with [/INST]: the flag changes nothing. */
    ck_assert_int_eq(chat_template_render(CHAT_TEMPLATE_LLAMA2_SYS, convo, 2, false, &out), 0);
    ck_assert_str_eq(buf_cstr(&out),
                     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]");
    buf_fini(&out);
}
END_TEST

START_TEST(test_chat_template_detect_unknown_falls_back_to_chatml)
{
    bool known = true;
    ck_assert_int_eq(chat_template_detect(NULL, &known), CHAT_TEMPLATE_CHATML);
    ck_assert(!known);
    known = true;
    ck_assert_int_eq(chat_template_detect("", &known), CHAT_TEMPLATE_CHATML);
    ck_assert(!known);
    known = true; /* Gemma: a family not implemented here */
    ck_assert_int_eq(chat_template_detect("{{ '<start_of_turn>' + role + '\\n' }}", &known),
                     CHAT_TEMPLATE_CHATML);
    ck_assert(!known);
    known = true; /* Phi-3 uses <|user|> and <|assistant|> but <|end|>: not zephyr */
    ck_assert_int_eq(chat_template_detect("{{'<|user|>' + '\\n' + message['content'] + '<|end|>' + "
                                          "'\\n' + '<|assistant|>' + eos_token}}",
                                          &known),
                     CHAT_TEMPLATE_CHATML);
    ck_assert(!known);
    known = true; /* Phi-4 is ChatML with <|im_sep|>: a different format */
    ck_assert_int_eq(chat_template_detect("<|im_start|>user<|im_sep|>", &known),
                     CHAT_TEMPLATE_CHATML);
    ck_assert(!known);
    ck_assert_str_eq(chat_template_name(CHAT_TEMPLATE_COUNT), "unknown");
}
END_TEST

START_TEST(test_chat_template_render_tool_role_and_empty_content)
{
    char empty[] = "", tool[] = "42";
    struct api_message m[] = {
        {API_ROLE_USER, u1}, {API_ROLE_ASSISTANT, empty}, {API_ROLE_TOOL, tool}};
    struct buf out;
    buf_init(&out, 0);
    ck_assert_int_eq(chat_template_render(CHAT_TEMPLATE_CHATML, m, 3, true, &out), 0);
    ck_assert_str_eq(buf_cstr(&out), "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
                                     "<|im_end|>\n<|im_start|>tool\n42<|im_end|>\n"
                                     "<|im_start|>assistant\n");
    buf_fini(&out);
}
END_TEST

START_TEST(test_chat_template_render_rejects_bad_args_and_bounds)
{
    struct buf out;
    buf_init(&out, 16);
    ck_assert_int_eq(chat_template_render(CHAT_TEMPLATE_CHATML, convo, 0, true, &out), ERR_INVAL);
    ck_assert_int_eq(chat_template_render(CHAT_TEMPLATE_COUNT, convo, 1, true, &out), ERR_INVAL);
    ck_assert_int_eq(buf_puts(&out, "keep"), 0);
    /* Too big for the buffer: ERR_TOO_BIG and the earlier contents are kept intact. */
    ck_assert_int_eq(chat_template_render(CHAT_TEMPLATE_LLAMA3, convo, 6, true, &out), ERR_TOO_BIG);
    ck_assert_str_eq(buf_cstr(&out), "keep");
    buf_fini(&out);
}
END_TEST

Suite *chat_template_suite(void)
{
    Suite *s = suite_create("chat_template");
    TCase *tc = tcase_create("core");
    tcase_add_loop_test(tc, test_chat_template_render_golden, 0,
                        (int)(sizeof(goldens) / sizeof(goldens[0])));
    tcase_add_test(tc, test_chat_template_render_without_generation_prompt);
    tcase_add_test(tc, test_chat_template_detect_unknown_falls_back_to_chatml);
    tcase_add_test(tc, test_chat_template_render_tool_role_and_empty_content);
    tcase_add_test(tc, test_chat_template_render_rejects_bad_args_and_bounds);
    suite_add_tcase(s, tc);
    return s;
}
