#!/usr/bin/env bash
# End-to-end checks of the HTTP layer (common/http_server) under a real `cinfer-engine serve` on a tiny
# generated model (no shared data needed): keep-alive with the official OpenAI SDK (connections
# reused), pipelining, 100-continue, HTTP/1.0, CORS (--allowed-origins), malformed heads, and the
# denial-of-service shapes of issue 24: 300 idle upgrade attempts (WebSocket and h2c) plus 300
# unfinished request heads held open while /health and a completion must still answer, on a server
# with default limits and on one with small limits (where new connections evict idle ones).
# Latencies are measured and printed, never asserted tighter than a generous timeout.
# Ends with exactly one line: engine_http: N passed, M failed
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${CINFER_BUILD:-build}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
bin="$build/bin/cinfer-engine"
venv="${CINFER_VENV:-$root/build/venv}"
py="$venv/bin/python"
tmp="$(mktemp -d)"
source "$root/tests/e2e/lib.sh"
slow="$e2e_slow"
export ENGINE_SERVE_SLOW="$slow" ENGINE_SERVE_MODEL_NAME="tiny-http"
declare -A pids ports

cleanup() {
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT

if [ ! -x "$bin" ]; then
	not_ok "engine binary $bin exists (run make first)"
	finish
fi
if ! "$py" -c 'import openai' 2>/dev/null; then
	not_ok "no OpenAI SDK in $venv (run make venv)"
	finish
fi
# 600 held connections and more: the client needs the descriptors.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

model="$tmp/tiny.gguf"
if ! "$bin" gen-model --out "$model" --type f32 --dim 64 --layers 2 --heads 2 --kv-heads 2 \
	--ffn 128 --vocab-size 512 --context-length 512 --log-format text >"$tmp/gen.log" 2>&1; then
	not_ok "gen-model: $(tail -n 2 "$tmp/gen.log" | tr '\n' ' ')"
	finish
fi

start_engine() {
	local n="$1" port
	shift
	"$bin" serve --model "$model" --port 0 --log-format text --threads 1 \
		--served-model-name "$ENGINE_SERVE_MODEL_NAME" "$@" >"$tmp/$n.log" 2>&1 &
	pids[$n]=$!
	if ! port="$(engine_port "$tmp/$n.log" $((20 * slow)))"; then
		not_ok "server $n started ($*): $(tail -n 3 "$tmp/$n.log" | tr '\n' ' ')"
		return 1
	fi
	ports[$n]="$port"
}

start_engine main --allowed-origins "http://app.example, https://ui.example" || finish
start_engine small --max-connections 64 --max-connections-per-client 32 --http-header-timeout 3 \
	--http-keep-alive-timeout 5 || finish

timeout --kill-after=5 $((300 * slow)) "$py" "$here/engine_http.py" "main=${ports[main]}" \
	"small=${ports[small]}" >"$tmp/py.out" 2>&1
rc=$?
cat "$tmp/py.out"
passed=$((passed + $(grep -c '^ok - ' "$tmp/py.out")))
n_bad="$(grep -c '^not ok - ' "$tmp/py.out")"
failed=$((failed + n_bad))
if [ "$rc" -ne 0 ] && [ "$n_bad" -eq 0 ]; then
	not_ok "engine_http.py exited $rc without a failed check"
fi

# Both servers drain and exit 0 after all of it.
for n in main small; do
	kill -TERM "${pids[$n]}"
	code=""
	for _ in $(seq 1 $((100 * slow))); do
		if ! kill -0 "${pids[$n]}" 2>/dev/null; then
			wait "${pids[$n]}"
			code=$?
			break
		fi
		sleep 0.2
	done
	if [ "$code" = 0 ]; then ok "server $n drains and exits 0 on SIGTERM"; else
		not_ok "server $n exit status '$code' after SIGTERM: $(tail -n 3 "$tmp/$n.log" | tr '\n' ' ')"
	fi
	unset "pids[$n]"
done
if grep -qE 'AddressSanitizer|runtime error' "$tmp"/*.log; then
	not_ok "sanitizer reports in the server logs: $(grep -hE 'AddressSanitizer|runtime error' "$tmp"/*.log | head -n 3)"
else
	ok "no sanitizer reports in the server logs"
fi
finish
