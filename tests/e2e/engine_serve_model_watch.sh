#!/usr/bin/env bash
# End-to-end check of `cinfer-engine serve`'s model file watcher on stories260K (a copy in a temp
# dir): the file rewritten in place under a serving engine (same inode and size, new contents and
# modification time), and separately truncated, each ends as a fault and not as a crash or a lying
# probe: the change is logged once naming the file and what changed, /health and /live turn 503
# {"status":"faulted"} (the kubelet restarts the pod on the new file), new requests get 503
# engine_faulted, a request already in flight finishes on the weights loaded, SIGTERM exits 0.
# With --no-model-watch the same rewrite changes nothing. Skips when the shared model is absent.
# Ends with exactly one line: engine_serve_model_watch: N passed, M failed
set -uo pipefail

# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

root="$e2e_root"
bin="${CINFER_ENGINE_BIN:-$e2e_bin/cinfer-engine}"
shared="${CINFER_SHARED:-$root/../shared}"
model="$shared/models/tinyllamas/stories260K.gguf"
slow="$e2e_slow"
LONG_TOKENS=8000 # one forward step each: ~6 s at this context length on a quiet 2-core machine (1900 took
# 0.6 s once attention got fast, shorter than the watch interval), so in flight at the change

tmp="$(mktemp -d /tmp/cinfer-engine-serve-watch.XXXXXX)"
pid="" port=""

trap cleanup_pid_tmp EXIT

if [ ! -r "$model" ]; then
	echo "SKIP: $model not present (shared test data is optional)"
	finish
fi
if [ ! -x "$bin" ]; then
	not_ok "binary $bin not built"
	finish
fi

# start NAME [serve flags...]: serves a fresh copy $tmp/NAME.gguf of the model on a kernel-chosen
# port, checking the file every second; waits for its "serving ... port=N" line.
start() {
	local n="$1"
	shift
	cp "$model" "$tmp/$n.gguf"
	"$bin" serve --model "$tmp/$n.gguf" --port 0 --log-format text --threads 2 --served-model-name watch \
		--context-length 8192 --model-watch-interval 1 "$@" >"$tmp/$n.log" 2>&1 &
	pid=$!
	if ! port="$(engine_port "$tmp/$n.log" $((20 * slow)))"; then
		not_ok "server $n starts: $(tail -n 3 "$tmp/$n.log" | tr '\n' ' ')"
		return 1
	fi
}

# stop NAME: SIGTERM; the process must still be there (no crash) and exit 0.
stop() {
	local n="$1" rc
	check "$n: the process is still running (no crash)" kill -0 "$pid"
	kill -TERM "$pid"
	if ! wait_for $((15 * slow)) sh -c "! kill -0 $pid 2>/dev/null || grep -q '^State:.*Z' /proc/$pid/status"; then
		not_ok "server $n exits within $((15 * slow)) s of SIGTERM"
		kill -KILL "$pid" 2>/dev/null
	fi
	wait "$pid"
	rc=$?
	pid=""
	check "server $n exits 0 after SIGTERM (status $rc)" test "$rc" -eq 0
}

url() { echo "http://127.0.0.1:$port$1"; }
status() { curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$(url "$1")"; }
body() { curl -s --max-time 5 "$(url "$1")"; }
complete() {
	printf '{"prompt":"Once upon a time","max_tokens":%d,"temperature":0,"ignore_eos":true}' "$1"
}
json_get() {
	python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2" 2>&1
}
# request NAME TOKENS: a completion's HTTP status, the body in $tmp/NAME.json.
request() {
	curl -s -o "$tmp/$1.json" -w '%{http_code}' --max-time $((120 * slow)) \
		"$(url /v1/completions)" -d "$(complete "$2")"
}

# faulted NAME CHANGE: the checks after a change of the file; CHANGE is a regex of the log's change=.
faulted() {
	local n="$1" change="$2" code
	if wait_for $((10 * slow)) sh -c "test \"\$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 $(url /live))\" = 503"; then
		ok "$n: /live turns 503 after the change"
	else
		not_ok "$n: /live turns 503 after the change (still $(status /live))"
	fi
	check "$n: /live says faulted" test "$(body /live)" = '{"status":"faulted"}'
	check "$n: /health is 503" test "$(status /health)" = 503
	check "$n: /health says faulted" test "$(body /health)" = '{"status":"faulted"}'
	code="$(request "$n-new" 5)"
	check "$n: a new request is 503 (got $code)" test "$code" = 503
	check "$n: the 503 is server_error / engine_faulted" \
		test "$(json_get "$tmp/$n-new.json" 'j["error"]["type"] + "/" + j["error"]["code"]')" = server_error/engine_faulted
	check "$n: the change is logged once, naming the file and what changed" \
		test "$(grep -caE " ERROR +engine: model file changed while serving.*path=[^ ]*$n\.gguf.*change=\"?$change" "$tmp/$n.log")" -eq 1
	check "$n: the log has exactly one error line" test "$(grep -caE ' ERROR ' "$tmp/$n.log")" -eq 1
}

unset CINFER_FAILPOINTS

# ---------------------------------------------------------------- rewritten in place
if start rewrite; then
	check "rewrite: before the change, /live is 200" test "$(status /live)" = 200
	code="$(request rewrite-before 5)"
	check "rewrite: before the change, a request is 200 (got $code)" test "$code" = 200
	request rewrite-long "$LONG_TOKENS" >"$tmp/rewrite-long.code" &
	long_pid=$!
	sleep 0.5
	# Same inode and size, other bytes: every tensor byte after the header flipped; mtime moves.
	sz="$(stat -c %s "$tmp/rewrite.gguf")"
	python3 - "$tmp/rewrite.gguf" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
for i in range(4096, len(b)):
    b[i] ^= 0xFF
with open(p, "r+b") as f:
    f.write(b)
PY
	touch -d '+2 seconds' "$tmp/rewrite.gguf" # a later mtime even on a coarse-grained clock
	check "rewrite: same size after the rewrite" test "$(stat -c %s "$tmp/rewrite.gguf")" = "$sz"
	faulted rewrite 'rewritten in place'
	check "rewrite: the long request was still in flight when the fault was seen" kill -0 "$long_pid"
	wait "$long_pid"
	check "rewrite: the request in flight at the change finished 200 (got $(cat "$tmp/rewrite-long.code"))" \
		test "$(cat "$tmp/rewrite-long.code")" = 200
	check "rewrite: it generated all $LONG_TOKENS tokens on the weights loaded" \
		test "$(json_get "$tmp/rewrite-long.json" 'j["usage"]["completion_tokens"]')" = "$LONG_TOKENS"
	check "rewrite: its text is the one an unchanged engine gives (same start as before)" \
		test "$(json_get "$tmp/rewrite-long.json" 'j["choices"][0]["text"][:20]')" = \
		"$(json_get "$tmp/rewrite-before.json" 'j["choices"][0]["text"][:20]')"
	stop rewrite
fi

# ---------------------------------------------------------------- truncated
if start truncate; then
	check "truncate: before the change, a request is 200" test "$(request truncate-before 5)" = 200
	sz="$(stat -c %s "$tmp/truncate.gguf")"
	truncate -s 0 "$tmp/truncate.gguf"
	faulted truncate "size 0 bytes, was $sz"
	stop truncate
fi

# ---------------------------------------------------------------- --no-model-watch
if start nowatch --no-model-watch; then
	truncate -s 0 "$tmp/nowatch.gguf"
	sleep 3
	check "--no-model-watch: /live stays 200 after a truncation" test "$(status /live)" = 200
	check "--no-model-watch: /health stays 200" test "$(status /health)" = 200
	code="$(request nowatch-after 20)"
	check "--no-model-watch: a request is 200 on the weights loaded (got $code)" test "$code" = 200
	check "--no-model-watch: nothing logged as an error" sh -c "! grep -qaE 'ERROR|faulted' \"$tmp/nowatch.log\""
	stop nowatch
fi

finish
