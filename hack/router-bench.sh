#!/usr/bin/env bash
# The router benchmarks of router/BENCHMARKS.md.
#
#   hack/router-bench.sh overhead [ROUNDS]    router alone, in front of a trivial upstream
#                                             (hack/router-bench-upstream.c): added latency one
#                                             request at a time, and CPU per request at load (ab);
#                                             POLICY=least-loaded: without prompt hashing
#   hack/router-bench.sh trace [N] [SCALE]    the Mooncake conversation trace's first N requests
#                                             (default 600) replayed at SCALE x speed (default 1),
#                                             a 512-token hash block as 16 ids (one KV block),
#                                             prompts capped at MAXP (384) ids, outputs at MAXT (16)
#                                             through the router to three real engines, once per
#                                             policy (random, least-loaded, prefix), fresh engines
#                                             each time: hit rate vs the ideal, TTFT, throughput;
#                                             then the autoscaler's simulator on the same trace;
#                                             POLICIES="prefix ..." runs only those, KV_BYTES sets
#                                             each engine's --kv-cache-bytes (16M), ROUTER_ARGS
#                                             adds cinfer-router flags
#
# Needs a release build (make), ab (apache2-utils), python3 and ../shared (stories260K, the trace).
# CPU time per request is read from /proc (utime + stime of the router process): the number a busy
# shared machine disturbs least. Prints one line per measurement.
set -euo pipefail
cd "$(dirname "$0")/.."

bin="${ROUTER_BENCH_BIN:-build/bin}" # the programs under test (A/B: a saved build's bin)
shared="${CINFER_SHARED:-../shared}"
model="$shared/models/tinyllamas/stories260K.gguf"
trace="$shared/traces/mooncake_conversation_trace.jsonl"
work="$(mktemp -d /tmp/cinfer-router-bench.XXXXXX)"
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_for() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@" >/dev/null 2>&1; do
		((SECONDS < deadline)) || return 1
		sleep 0.2
	done
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz="$(getconf CLK_TCK)"

start_router() { # start_router PORT PROBE TARGETS ARGS...
	local port="$1" probe="$2" targets="$3"
	shift 3
	"$bin/cinfer-router" --port "$port" --probe-addr "127.0.0.1:$probe" --target "$targets" \
		--log-level warn "$@" >>"$work/router.log" 2>&1 &
	router_pid=$!
	pids+=("$router_pid")
	wait_for 30 curl -sf "http://127.0.0.1:$probe/readyz"
}

overhead() {
	local rounds="${1:-3}"
	local pkgs="libcurl jansson openssl yaml-0.1 zlib" # the Makefile's PKGS, less check
	cc -std=c11 -D_GNU_SOURCE -O2 -pthread -I. $(pkg-config --cflags $pkgs) -o "$work/upstream" \
		hack/router-bench-upstream.c build/lib/libengine.a build/lib/libcommon.a \
		$(pkg-config --libs $pkgs) -lm -lpthread
	local up rp rprobe
	up="$(free_port)"
	rp="$(free_port)"
	rprobe="$(free_port)"
	"$work/upstream" "$model" "$up" &
	pids+=($!)
	wait_for 10 curl -sf "http://127.0.0.1:$up/health"
	start_router "$rp" "$rprobe" "bench=http://127.0.0.1:$up" --policy "${POLICY:-prefix}"
	wait_for 10 bash -c "curl -sf http://127.0.0.1:$rprobe/metrics | grep -q 'cinfer_router_replicas{model_name=\"bench\",state=\"eligible\"} 1'"
	sleep 1 # the tokenizer document
	python3 - "$work" <<'EOF'
import json, sys
w = sys.argv[1]
story = "Once upon a time there was a little girl named Lily who loved to play in the park. "
json.dump({"model": "bench", "prompt": "Once upon a time", "max_tokens": 1}, open(f"{w}/small.json", "w"))
json.dump({"model": "bench", "prompt": [3 + (i * 7919) % 509 for i in range(1000)], "max_tokens": 1},
          open(f"{w}/ids1000.json", "w"))
json.dump({"model": "bench", "max_tokens": 1, "messages": [{"role": "system", "content": story * 48},
          {"role": "user", "content": "And then?"}]}, open(f"{w}/chat4k.json", "w"))
EOF
	local body
	for body in small ids1000 chat4k; do
		echo "== latency, one request at a time, body $body ($(wc -c <"$work/$body.json") bytes)"
		local path=/v1/completions
		[ "$body" = chat4k ] && path=/v1/chat/completions
		python3 hack/router-bench-latency.py "$rounds" 500 "$work/$body.json" "$path" \
			"direct=$up" "router=$rp"
	done
	for body in small ids1000 chat4k; do
		local path=/v1/completions n=6000 t0 t1
		[ "$body" = chat4k ] && path=/v1/chat/completions
		t0="$(cpu_ticks "$router_pid")"
		ab -q -n "$n" -c 16 -p "$work/$body.json" -T application/json "http://127.0.0.1:$rp$path" \
			>"$work/ab.txt" 2>&1
		t1="$(cpu_ticks "$router_pid")"
		echo "== throughput, ab -c 16, body $body: $(awk '/^Requests per second/ {print $4}' "$work/ab.txt") req/s," \
			"failed $(awk '/^Failed requests/ {print $3}' "$work/ab.txt"), router CPU" \
			"$(python3 -c "print(f'{($t1 - $t0) / $hz / $n * 1e6:.0f}')") us/request" \
			"=> $(python3 -c "print(f'{$n / max(($t1 - $t0) / $hz, 1e-9):.0f}')") requests/s per router core"
	done
}

trace_run() {
	local n="${1:-600}" scale="${2:-1}" policy
	local lg_args=(--trace "$trace" --token-scale 0.03125 --max-prompt-tokens "${MAXP:-384}"
		--max-tokens "${MAXT:-16}" --max-requests "$n" --time-scale "$scale" --timeout 600 --metrics)
	echo "== workload: $(hack/loadgen "${lg_args[@]}" --dry-run 2>/dev/null | python3 -c \
		'import json,sys; d=json.load(sys.stdin); print(d["requests"], "requests over", round(d["span_s"]), "s,",
		d["prompt_tokens"], "prompt tokens, ideal prefix hit rate", round(d["ideal_prefix_hit_rate"] * 100, 1), "%")')"
	for policy in ${POLICIES:-random least-loaded prefix}; do
		local eps=() urls=() i
		for i in 0 1 2; do
			eps[i]="$(free_port)"
			"$bin/cinfer-engine" serve --model "$model" --host 127.0.0.1 --port "${eps[i]}" --threads 1 \
				--max-num-seqs 16 --kv-cache-bytes "${KV_BYTES:-16M}" --log-level info >>"$work/engine-$policy-$i.log" 2>&1 &
			pids+=($!)
			urls+=("http://127.0.0.1:${eps[i]}")
		done
		for i in 0 1 2; do wait_for 60 curl -sf "http://127.0.0.1:${eps[i]}/health"; done
		local rp rprobe
		rp="$(free_port)"
		rprobe="$(free_port)"
		start_router "$rp" "$rprobe" "stories260K=$(IFS=,; echo "${urls[*]}")" --policy "$policy" ${ROUTER_ARGS:-}
		sleep 1
		local t0 t1
		t0="$(cpu_ticks "$router_pid")"
		hack/loadgen --url "http://127.0.0.1:$rp" --model stories260K "${lg_args[@]}" >"$work/lg-$policy.txt" 2>&1 || true
		t1="$(cpu_ticks "$router_pid")"
		local m
		m="$(curl -sf "http://127.0.0.1:$rprobe/metrics")"
		echo "== policy $policy: $(grep -E '^(requests|throughput|TTFT ms|prefix hit rate):' "$work/lg-$policy.txt" | tr -s ' ' | paste -sd';')" \
			"; router: predicted $(awk '/^cinfer_router_cached_tokens_total\{.*source="predicted"/ {print $2}' <<<"$m")" \
			"delivered $(awk '/^cinfer_router_cached_tokens_total\{.*source="delivered"/ {print $2}' <<<"$m") cached tokens," \
			"CPU $(python3 -c "print(f'{($t1 - $t0) / $hz:.2f}')") s;" \
			"decisions $(awk -F'[{}]' '/^cinfer_router_routing_decisions_total\{/ {split($2, a, "reason=\""); sub(/".*/, "", a[2]); printf "%s=%s ", a[2], $3 + 0}' <<<"$m")" \
			"requests per replica $(awk '/^cinfer_router_upstream_requests_total\{/ {printf "%s ", $2}' <<<"$m")"
		[ -n "${ROUTER_BENCH_OUT:-}" ] && mkdir -p "$ROUTER_BENCH_OUT" && cp "$work/lg-$policy.txt" "$ROUTER_BENCH_OUT/"
		kill "$router_pid" 2>/dev/null || true
		for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
		wait 2>/dev/null || true
		pids=()
	done
	# The simulator on the same requests: the first N rows, prompts and outputs capped at what
	# loadgen sent (MAXP and MAXT scaled back by the token scale), KV and prefix cache per replica
	# as the engines had them, the replica model calibrated by a bench run of the same engine.
	python3 - "$trace" "$n" "${MAXP:-384}" "${MAXT:-16}" >"$work/sim-trace.jsonl" <<'EOF'
import json, math, sys
path, n, maxp, maxt = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
with open(path) as f:
    for _, line in zip(range(n), f):
        r = json.loads(line)
        r["input_length"] = min(r["input_length"], maxp * 32)
        r["hash_ids"] = r["hash_ids"][: math.ceil(r["input_length"] / 512)]
        r["output_length"] = min(r["output_length"], maxt * 32)
        print(json.dumps(r))
EOF
	# A tiny model gains nothing from batching (1 MiB of weights stays in cache): its batch-16
	# decode rate measures at or just under batch 1's, which --calibrate-from refuses as not one
	# replica's curve. So the rates go in as flags, batch 16's raised to batch 1's.
	local rates
	rates="$("$bin/cinfer-engine" bench --model "$model" --threads 1 --batch 1,16 2>/dev/null | python3 -c '
import json, sys
r = {d["batch"]: d for d in (json.loads(l) for l in sys.stdin if l.startswith("{"))}
pp, b1, b16 = r[1]["pp_tok_s"], r[1]["tg_tok_s"], r[16]["tg_tok_s"]
print(f"--prefill-tps {pp:.1f} --decode-tps {b1:.1f} --decode-batch-tps {max(b16, b1):.1f}")')"
	echo "== replica model from cinfer-engine bench --threads 1 --batch 1,16: $rates"
	# The engines' KV cache in tokens (16 MiB of f16 blocks), from their start-up log line.
	local kv r routing prefix
	kv="$(grep -ho '"msg":"kv cache".*"tokens":[0-9]*' "$work"/engine-prefix-0.log | sed 's/.*"tokens"://' | head -n 1)"
	kv="${kv:-26208}"
	for r in random least-requests least-prefill+prefix; do
		routing="${r%+prefix}"
		prefix=false
		[ "$routing" != "$r" ] && prefix=true
		echo "== simulator, 3 static replicas, routing $r (KV $kv tokens):" \
			"$("$bin/cinfer-autoscaler" simulate --trace "$work/sim-trace.jsonl" --policy static \
				--replicas 3 --routing "$routing" --prefix-routing="$prefix" --token-scale 0.03125 \
				--kv-tokens "$kv" --cache-tokens "$kv" $rates \
				--time-scale "$(python3 -c "print(1 / $scale)")" 2>&1 | tail -n 1)"
	done
}

case "${1:-}" in
overhead) overhead "${2:-3}" ;;
trace) trace_run "${2:-600}" "${3:-1}" ;;
*)
	sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac
