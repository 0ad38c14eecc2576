#!/usr/bin/env bash
# The engine's request timeout, on by default (600 s, see --request-timeout in
# engine/cmd/cmd_serve.c): --help shows the default; a request that outlives a short timeout
# (CINFER_ENGINE_REQUEST_TIMEOUT, as a Deployment's env would set it) ends with what it generated
# (finish_reason "length", fewer tokens than asked, a log line) while the engine keeps serving; and
# with the default the same kind of request is not cut. The model is generated (no ../shared).
set -uo pipefail
source "$(dirname "$0")/lib.sh"

engine="$e2e_bin/cinfer-engine"
work="$(mktemp -d /tmp/cinfer-timeout-e2e.XXXXXX)"
model="$work/model.gguf"
pid=""
cleanup_extra() {
	[ -z "$pid" ] || kill -KILL "$pid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup_extra EXIT

check "--help: request-timeout defaults to 600 s" bash -c \
	'"$0" serve --help | grep -A1 -- "--request-timeout" | grep -qF "(default: 600)"' "$engine"
# A random-weight model with room for long answers (8192-token context; nothing from ../shared).
check "generate a model" "$engine" gen-model --out "$model" --type q8_0 --dim 512 --layers 8 \
	--heads 8 --kv-heads 8 --ffn 1024 --context-length 8192 --log-format text

# start LOG [env...]: the engine on a free port; sets pid and port.
start() {
	local log="$1"
	shift
	env "$@" "$engine" serve --model "$model" --port 0 --threads 2 --kv-cache-bytes 256M \
		--log-format text >"$log" 2>&1 &
	pid=$!
	port="$(engine_port "$log" $((60 * e2e_slow)))" || port=""
}
# complete N MAX_TOKENS: a completion with n choices, printing "finish_reason completion_tokens" per
# choice and the total.
complete() {
	curl -sf --max-time $((300 * e2e_slow)) "http://127.0.0.1:$port/v1/completions" \
		-H 'Content-Type: application/json' \
		-d "{\"prompt\":\"Once upon a time\",\"n\":$1,\"max_tokens\":$2,\"temperature\":1,\"seed\":7,\"ignore_eos\":true}" |
		python3 -c 'import json,sys; r=json.load(sys.stdin)
print(" ".join(c["finish_reason"] for c in r["choices"]), r["usage"]["completion_tokens"])'
}

# 8 choices of 4000 tokens (32,000 tokens of work) cannot finish in 2 s on any CPU this runs on.
start "$work/short.log" CINFER_ENGINE_REQUEST_TIMEOUT=2
if [ -z "$port" ]; then
	not_ok "engine with CINFER_ENGINE_REQUEST_TIMEOUT=2 serves"
	cat "$work/short.log"
	summary
	exit
fi
out="$(complete 8 4000)"
echo "# timed out: $out"
check "past the timeout: every choice ends with finish_reason length" \
	bash -c '[ "$(tr " " "\n" <<<"${0% *}" | sort -u)" = length ]' "$out"
check "past the timeout: fewer tokens than asked (8 x 4000)" [ "${out##* }" -lt 32000 ]
check "past the timeout: the log says why" grep -q "request timeout reached" "$work/short.log"
check "the engine serves on afterwards" bash -c '[ "$(curl -s -o /dev/null -w "%{http_code}" \
	"http://127.0.0.1:$0/health")" = 200 ]' "$port"
kill -TERM "$pid" && wait "$pid"
pid=""

# The default (600 s) does not cut a request that takes a few seconds.
start "$work/default.log"
out="$(complete 2 200)"
echo "# default: $out"
check "default timeout: a 2 x 200-token request runs to max_tokens" [ "$out" = "length length 400" ]
check "default timeout: nothing timed out" bash -c '! grep -q "request timeout reached" "$0"' \
	"$work/default.log"
kill -TERM "$pid" && wait "$pid"
pid=""
summary
