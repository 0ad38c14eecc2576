#!/usr/bin/env bash
# End-to-end checks of chat templates in `cinfer-engine serve`: an unknown --chat-template name and
# a malformed template stop start-up with the reason (exit 2, before listening); a model's real
# template given as a file renders the conversation (usage.prompt_tokens is the rendered prompt's
# token count, counted by `cinfer-engine tokenize` with special tokens parsed); a template's own
# raise_exception answers 400 with its message; a model without a template gets chatml and a
# warning. Uses stories260K from ../shared (skips without it).
# Ends with exactly one line: engine_chat_template: N passed, M failed
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

bin="$e2e_bin/cinfer-engine"
shared="${CINFER_SHARED:-$e2e_root/../shared}"
model="$shared/models/tinyllamas/stories260K.gguf"
tmpl_dir="$e2e_root/tests/testdata/chat/templates"
tmp="$(mktemp -d)"
pid=""
cleanup() {
	[[ -z "$pid" ]] || kill "$pid" 2>/dev/null
	[[ -z "$pid" ]] || wait "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

if [ ! -r "$model" ]; then
	echo "SKIP: $model not present (shared test data is optional)"
	summary
	exit
fi

serve() { "$bin" serve --model "$model" --port 0 --log-format text --threads 1 "$@"; }

# start-up refusals: exit status 2 and the reason, and no port opened
refused() {
	local want="$1"
	shift
	serve "$@" >"$tmp/refused.log" 2>&1
	local rc=$?
	[[ $rc -eq 2 ]] || { echo "exit status $rc"; cat "$tmp/refused.log"; return 1; }
	grep -q "$want" "$tmp/refused.log" || { cat "$tmp/refused.log"; return 1; }
	! grep -q "listening" "$tmp/refused.log" || { echo "the port was opened"; return 1; }
}
check "unknown --chat-template name: exit 2 before listening, names the built-ins" \
	refused "unknown chat template 'chatlm'.*chatml" --chat-template chatlm
check "malformed inline template: exit 2 with the line" \
	refused "line 1: unexpected end of template" --chat-template '{% for m in messages %}'
check "unsupported Jinja2 feature: exit 2 naming it" \
	refused "the 'include' tag is not supported" --chat-template "{% include 'x' %}"

# start NAME [flags]: serves in the background, sets $port; failure is a failed check
start() {
	# the binary itself in the background, not the serve function: $! must be the engine, or
	# stop would kill a subshell and leave the engine running
	"$bin" serve --model "$model" --port 0 --log-format text --threads 1 "$@" >"$tmp/serve.log" 2>&1 &
	pid=$!
	port="$(engine_port "$tmp/serve.log" $((30 * e2e_slow)))" || {
		cat "$tmp/serve.log"
		stop
		return 1
	}
}
stop() {
	kill "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	pid=""
}
chat() { curl -s -o "$tmp/resp" -w '%{http_code}' "localhost:$port/v1/chat/completions" -d "$1"; }

if start --chat-template "$tmpl_dir/Qwen-Qwen3-0.6B.jinja"; then
	ok "serve with a template file"
	check "the template is logged" grep -q "chat template template=.*Qwen-Qwen3-0.6B.jinja" "$tmp/serve.log"
	# the prompt Qwen3's template renders for this conversation (enable_thinking unset)
	prompt=$'<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n'
	want="$("$bin" tokenize --model "$model" --text "$prompt" 2>/dev/null | wc -w)"
	code="$(chat '{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi there"}],"max_tokens":2}')"
	got="$(jq -r .usage.prompt_tokens "$tmp/resp" 2>/dev/null)"
	check "chat renders the model template: prompt_tokens $got == $want tokens of the rendered text" \
		test "$code" = 200 -a "$got" = "$want" -a "$want" -gt 20
	stop
else
	not_ok "serve with a template file"
fi

if start --chat-template "$shared/testdata/chat-templates/google-gemma-2-2b-it.jinja"; then
	code="$(chat '{"messages":[{"role":"system","content":"S"},{"role":"user","content":"Hi"}],"max_tokens":2}')"
	check "the template's raise_exception: 400 with its message" \
		bash -c "[ '$code' = 400 ] && jq -e '.error.message | test(\"System role not supported\")' '$tmp/resp'"
	code="$(chat '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2}')"
	check "and a conversation it accepts: 200" test "$code" = 200
	stop
else
	not_ok "serve with gemma's template"
fi

if start; then
	check "no template in the model: chatml, with a warning" \
		grep -q "the model has no chat template; using chatml" "$tmp/serve.log"
	stop
else
	not_ok "serve without a template"
fi

summary
