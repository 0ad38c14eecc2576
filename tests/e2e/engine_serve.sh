#!/usr/bin/env bash
# End-to-end checks of `cinfer-engine serve` on stories260K with real clients: the official OpenAI
# Python SDK (engine_serve_sdk.py), LangChain (engine_serve_langchain.py), the aiperf load tool
# (engine_serve_aiperf.py) and raw sockets (engine_serve_behaviour.py): greedy outputs equal
# to `cinfer-engine generate`, 64 concurrent streams (also on a generated Q8_0 model whose steps
# split into lanes), prefix caching, preemption, disconnects, SIGTERM draining, malformed input and
# the /metrics page. Every engine runs on a kernel-chosen port
# (--port 0, read from its "serving ... port=N" log line) with its log in a temp dir, and is killed on
# exit. The Python checks print `ok - NAME` / `not ok - NAME: DETAIL`; this script counts them with
# its own. Skips (passing nothing) when the shared model is absent. Ends with exactly one line:
# engine_serve: N passed, M failed
set -uo pipefail

# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

root="$e2e_root"
here="$root/tests/e2e"
bin="${CINFER_ENGINE_BIN:-$e2e_bin/cinfer-engine}"
shared="${CINFER_SHARED:-$root/../shared}"
model="$shared/models/tinyllamas/stories260K.gguf"
venv="${CINFER_VENV:-$root/build/venv}"
py="$venv/bin/python"
name="stories-e2e"
slow="$e2e_slow"
export ENGINE_SERVE_SLOW="$slow" ENGINE_SERVE_MODEL="$model" ENGINE_SERVE_BIN="$bin"
export ENGINE_SERVE_ROOT="$root" ENGINE_SERVE_MODEL_NAME="$name"
export PYTHONDONTWRITEBYTECODE=1

tmp="$(mktemp -d /tmp/cinfer-engine-serve.XXXXXX)"
declare -A pids=() ports=()

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	local n
	for n in "${!pids[@]}"; do
		kill -KILL "${pids[$n]}" 2>/dev/null
	done
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

if [ ! -r "$model" ]; then
	echo "SKIP: $model not present (shared test data is optional)"
	finish
fi
if [ ! -x "$bin" ]; then
	not_ok "binary $bin not built"
	finish
fi
if ! "$py" -c 'import openai, langchain_openai, aiperf' 2>/dev/null; then
	not_ok "no OpenAI SDK, langchain-openai or aiperf in $venv (run make venv)"
	finish
fi
# 1000 concurrent connections in the malformed-input suite: client and servers need the descriptors.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# start_engine NAME [serve flags...]: starts a server, waits for its port; failure is a failed check.
start_engine() {
	local n="$1" port
	shift
	"$bin" serve --model "$model" --port 0 --log-format text --threads 2 --served-model-name "$name" \
		"$@" >"$tmp/$n.log" 2>&1 &
	pids[$n]=$!
	if ! port="$(engine_port "$tmp/$n.log" $((20 * slow)))"; then
		not_ok "server $n started ($*): $(tail -n 3 "$tmp/$n.log" | tr '\n' ' ')"
		return 1
	fi
	ports[$n]="$port"
}

# run_py FILE ARGS...: runs one Python check file and adds its ok/not ok lines to the counts. A file
# that dies without reporting a failure (a traceback, a timeout) counts as one failure.
# run_py FILE ARGS...: one Python client script, its ok/not ok lines counted; it may run for
# $py_limit seconds (stretched under ASan).
py_limit=240
run_py() {
	local f="$1" rc n_ok n_bad
	shift
	timeout --kill-after=5 $((py_limit * slow)) "$py" "$here/$f" "$@" >"$tmp/py.out" 2>&1
	rc=$?
	cat "$tmp/py.out"
	n_ok="$(grep -c '^ok - ' "$tmp/py.out")"
	n_bad="$(grep -c '^not ok - ' "$tmp/py.out")"
	passed=$((passed + n_ok))
	failed=$((failed + n_bad))
	if [ "$rc" -ne 0 ] && [ "$n_bad" -eq 0 ]; then
		not_ok "$f $* exited $rc without a failed check"
	fi
}

# stop_engine NAME WANT_RC: SIGTERM, then the exit status must be WANT_RC within the drain timeout
# (under ASan this is also where leaks are reported).
stop_engine() {
	local n="$1" want="$2" pid="${pids[$1]}"
	if ! kill -0 "$pid" 2>/dev/null; then
		wait "$pid"
		not_ok "server $n alive until the end (died with status $?): $(tail -n 5 "$tmp/$n.log" | tr '\n' ' ')"
		unset "pids[$n]"
		return
	fi
	kill -TERM "$pid"
	reap_engine "$n" "$want" $((30 * slow))
}

# reap_engine NAME WANT_RC SECONDS: waits for a server that was told to stop.
reap_engine() {
	local n="$1" want="$2" pid="${pids[$1]}" rc
	if ! wait_for "$3" sh -c "! kill -0 $pid 2>/dev/null || grep -q '^State:.*Z' /proc/$pid/status"; then
		not_ok "server $n exits within $3 s of SIGTERM"
		kill -KILL "$pid" 2>/dev/null
	fi
	wait "$pid"
	rc=$?
	unset "pids[$n]"
	if [ "$rc" -eq "$want" ]; then
		ok "server $n exits with status $want after SIGTERM"
	else
		not_ok "server $n exit status $rc, want $want: $(grep -aE 'ERROR|Sanitizer|leak' "$tmp/$n.log" | head -n 5 | tr '\n' ' ')"
	fi
}

# The main server: small context (prompts over it are rejected), prefix caching on.
start_engine main --context-length 256 || finish
start_engine nocache --context-length 256 --no-prefix-caching
# One sequence at a time, one waiting: the rest of a burst must get 429. A long context, so one
# request can keep the only slot busy for seconds.
start_engine queue --context-length 2048 --max-num-seqs 1 --max-queue 1
# KV for 1.5 contexts of 256 tokens (640 bytes a token in f16 for stories260K): 16 requests of ~160
# tokens each cannot all fit, so the scheduler must preempt.
start_engine preempt --context-length 256 --block-size 16 --kv-cache-bytes $((384 * 640))
start_engine nocompat --context-length 256 --metrics-compat none --spec ngram
# Speculation served: n-gram with its cross-request pool; a draft model (the Q8_0 copy) whose KV
# pool shares a budget of 1.5 contexts per pool, so 24 streams must be preempted. A fixed k
# (--no-spec-adaptive): on this tiny model the controller would not speculate at 24 streams, and
# these checks are about verification inside the batch.
start_engine ngram --context-length 256 --spec ngram --ngram-pool-bytes 1M --no-spec-adaptive
draft_model="$shared/models/tinyllamas/stories260K-Q8_0.gguf"
if [ -r "$draft_model" ] && start_engine draft --context-length 256 --block-size 16 \
	--speculative draft --draft-model "$draft_model" --kv-cache-bytes $((2 * 384 * 640)) \
	--no-spec-adaptive; then
	# both pools get the same blocks, the budget split by K/V bytes per token: within it
	if wait_for $((10 * slow)) grep -q 'kv cache .*draft_bytes=[1-9]' "$tmp/draft.log" &&
		awk -v max=$((2 * 384 * 640)) 'match($0, /kv cache .* total_bytes=[0-9]+/) {
			t = substr($0, RSTART, RLENGTH); sub(/.*total_bytes=/, "", t); found = 1
			exit !(t + 0 <= max) } END { if (!found) exit 1 }' "$tmp/draft.log"; then
		ok "--speculative draft: the draft's KV pool is inside --kv-cache-bytes"
	else
		not_ok "--speculative draft: kv cache line $(grep '"kv cache"' "$tmp/draft.log" | head -n 1)"
	fi
fi
start_engine bad --context-length 256 --max-body-bytes 65536
# The API key from the environment, as a Secret would provide it.
CINFER_ENGINE_API_KEY=s3cret-key start_engine auth --context-length 256

run_py engine_serve_sdk.py "main=${ports[main]}" "queue=${ports[queue]}" "auth=${ports[auth]}"
run_py engine_serve_langchain.py "main=${ports[main]}"
# aiperf runs two profiles of up to 240 s each (its own limits) and starts slowly on a busy machine.
py_limit=600 run_py engine_serve_aiperf.py "main=${ports[main]}"
run_py engine_serve_structured.py "main=${ports[main]}"
run_py engine_serve_behaviour.py metrics "main=${ports[main]}" "nocompat=${ports[nocompat]}"
run_py engine_serve_behaviour.py greedy "main=${ports[main]}"
run_py engine_serve_behaviour.py concurrency "main=${ports[main]}"
run_py engine_serve_behaviour.py prefix "main=${ports[main]}" "nocache=${ports[nocache]}"
run_py engine_serve_behaviour.py preemption "preempt=${ports[preempt]}"
if [ -n "${ports[draft]:-}" ]; then
	run_py engine_serve_behaviour.py speculation "main=${ports[main]}" "ngram=${ports[ngram]}" \
		"draft=${ports[draft]}"
fi
run_py engine_serve_behaviour.py disconnect "main=${ports[main]}" "queue=${ports[queue]}"
run_py engine_serve_behaviour.py malformed "bad=${ports[bad]}"

# Lanes (model_lanes.c): stories260K keeps its ffn_down in F32, so its steps never split. A small
# generated Q8_0 model, every matrix on the integer kernels, with stories260K's tokenizer: its
# decode steps of 16+ requests run as one lane per thread, and the concurrency checks must hold
# there too (64 streams equal to the same requests alone, metrics, KV back to zero).
lanes_model="$tmp/lanes-q8_0.gguf"
if "$bin" gen-model --out "$lanes_model" --type q8_0 --dim 64 --layers 2 --heads 2 --kv-heads 2 \
	--ffn 128 --vocab-from "$model" --log-format text >"$tmp/gen-model.log" 2>&1; then
	if model="$lanes_model" start_engine lanes --context-length 256; then
		run_py engine_serve_behaviour.py concurrency "lanes=${ports[lanes]}"
	fi
else
	not_ok "gen-model for the lanes server: $(tail -n 2 "$tmp/gen-model.log" | tr '\n' ' ')"
fi

# Every long-lived server survived all of the above and drains cleanly.
for n in main nocache queue preempt nocompat ngram draft bad auth lanes; do
	[ -n "${pids[$n]:-}" ] && stop_engine "$n" 0
done

# SIGTERM under load: the Python side sends the signal and watches the drain; the process is ours
# to reap, so the exit status is checked here.
if start_engine drain --context-length 1024 --max-num-seqs 8; then
	run_py engine_serve_behaviour.py sigterm "drain=${ports[drain]}:${pids[drain]}"
	reap_engine drain 0 $((40 * slow))
fi
# --shutdown-timeout 1 with requests that need far longer: they are cut at the deadline.
if start_engine cut --shutdown-timeout 1 --context-length 16384 --max-num-seqs 4; then
	run_py engine_serve_behaviour.py shutdown_timeout "cut=${ports[cut]}:${pids[cut]}"
	reap_engine cut 0 $((15 * slow))
fi

finish
