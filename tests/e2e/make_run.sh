#!/usr/bin/env bash
# End-to-end check of `make run`: starts hack/run-engine.sh (what `make run` executes) with the
# engine of the current build (CINFER_BUILD, so `make asan` checks the sanitized binary) on a free
# port (the default model, stories260K shipped in models/), then checks /health, /live, /metrics
# (Prometheus text), that a completion is English, routing errors and the SIGTERM drain.
# Ends with exactly one line: make_run: N passed, M failed
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${CINFER_BUILD:-build}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
bin="$build/bin/cinfer-engine"
tmp="$(mktemp -d)"
pid=""
source "$root/tests/e2e/lib.sh"

trap cleanup_pid_tmp EXIT

if [ ! -x "$bin" ]; then
	not_ok "engine binary $bin exists (run make first)"
	finish
fi

# start LOGFILE [serve flags...]: starts the engine on a free port and waits until it serves (the
# port opens before the model is loaded, with /health at 503); sets pid and port.
start() {
	local log="$1"
	shift
	: >"$log"
	PORT=0 "$root/hack/run-engine.sh" "$bin" "$@" 2>"$log" &
	pid=$!
	port=""
	for _ in $(seq 1 100); do
		port="$(sed -n 's/.*engine: serving .*port=\([0-9][0-9]*\).*/\1/p' "$log" | head -n1)"
		[ -n "$port" ] && return 0
		kill -0 "$pid" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

# status PATH [curl args...]: prints the HTTP status code.
status() {
	local path="$1"
	shift
	curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$@" "http://127.0.0.1:$port$path"
}

# stop_and_wait: SIGTERM, then the exit status (waits up to 20 s).
stop_and_wait() {
	kill -TERM "$pid"
	for _ in $(seq 1 200); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	wait "$pid"
	local rc=$?
	pid=""
	return $rc
}

"$bin" serve --help >"$tmp/help"
check "serve --help exits 0" test $? -eq 0
check "serve --help documents --port and CINFER_ENGINE_PORT" grep -q 'CINFER_ENGINE_PORT' "$tmp/help"
"$bin" serve --port 70000 >/dev/null 2>&1
check "an out-of-range port is a usage error (exit 2)" test $? -eq 2

if ! start "$tmp/engine.log"; then
	not_ok "engine starts and logs its port"
	cat "$tmp/engine.log"
	finish
fi
ok "engine starts and logs its port ($port)"

check "GET /health is 200" test "$(status /health)" = 200
check "GET /health body is {\"status\":\"ok\"}" \
	test "$(curl -s --max-time 5 "http://127.0.0.1:$port/health")" = '{"status":"ok"}'
check "GET /live is 200" test "$(status /live)" = 200
check "GET /nope is 404" test "$(status /nope)" = 404
check "POST /health is 405" test "$(status /health -X POST)" = 405
check "the log says it serves the shipped stories260K model" grep -q 'shipped stories260K' \
	"$tmp/engine.log"
curl -s --max-time 30 "http://127.0.0.1:$port/v1/completions" \
	-d '{"prompt":"Once upon a time","max_tokens":24,"temperature":0,"ignore_eos":true}' \
	>"$tmp/completion.json"
check "a completion on the default model generates 24 tokens" \
	grep -q '"completion_tokens":24' "$tmp/completion.json"
# stories260K's greedy story (llama2.c's documented output begins the same way)
check "the default model answers in English" \
	grep -q 'there was a little girl named Lily' "$tmp/completion.json"
check "GET /v1/models lists the default model" \
	grep -q '"id":"stories260K-Q8_0"' <(curl -s --max-time 5 "http://127.0.0.1:$port/v1/models")
check "405 names the allowed method" \
	grep -qi '^allow: GET' <(curl -s -D - -o /dev/null -X POST "http://127.0.0.1:$port/health")

curl -s -D "$tmp/metrics.head" -o "$tmp/metrics" --max-time 5 "http://127.0.0.1:$port/metrics"
check "GET /metrics has the Prometheus text content type" \
	grep -qi '^content-type: text/plain; version=0.0.4' "$tmp/metrics.head"
check "/metrics has process_start_time_seconds" \
	grep -qE '^process_start_time_seconds [0-9.e+]+$' "$tmp/metrics"
for m in cinfer_requests_running cinfer_requests_waiting cinfer_kv_cache_usage_ratio \
	'vllm:num_requests_running' 'vllm:num_requests_waiting'; do
	check "/metrics has gauge $m at 0" grep -qE "^$m\\{model_name=\"stories260K-Q8_0\"\\} 0$" "$tmp/metrics"
	check "/metrics types $m as a gauge" grep -qxF "# TYPE $m gauge" "$tmp/metrics"
done
# Every line is a comment or "name{labels} value": the text format's grammar, loosely.
sample_re='^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? ([-+]?[0-9.eE+-]+|NaN|[+-]Inf)( -?[0-9]+)?$'
check "/metrics lines are all comments or samples" \
	test -z "$(grep -vE '^# (HELP|TYPE) ' "$tmp/metrics" | grep -vE "$sample_re")"

# SIGTERM with a shutdown delay: /health turns 503 at once while the process still serves.
if stop_and_wait; then ok "SIGTERM exits 0"; else not_ok "SIGTERM exits 0"; fi
check "the log says it drained" grep -q 'draining' "$tmp/engine.log"

if start "$tmp/engine2.log" --shutdown-delay-seconds 3; then
	check "second engine /health is 200" test "$(status /health)" = 200
	kill -TERM "$pid"
	for _ in $(seq 1 50); do
		grep -q draining "$tmp/engine2.log" && break
		sleep 0.05
	done
	check "after SIGTERM /health is 503" test "$(status /health)" = 503
	check "after SIGTERM /health says draining" \
		test "$(curl -s --max-time 5 "http://127.0.0.1:$port/health")" = '{"status":"draining"}'
	check "after SIGTERM /live is still 200 during the delay" test "$(status /live)" = 200
	wait "$pid"
	rc=$?
	pid=""
	check "SIGTERM after the delay exits 0" test "$rc" -eq 0
else
	not_ok "second engine starts"
fi

# The port in use: a clear error and exit 1.
if start "$tmp/engine3.log"; then
	"$bin" serve --model "$root/models/stories260K/stories260K-Q8_0.gguf" --port "$port" --log-format text \
		2>"$tmp/clash.log"
	check "a port in use exits 1" test $? -eq 1
	check "a port in use is logged" grep -q 'cannot listen' "$tmp/clash.log"
	stop_and_wait
fi

finish
