#!/usr/bin/env bash
# Step time of constrained decoding with masks computed during the forward pass (the default) and
# after it (serve --grammar-inline-masks): one `cinfer-engine serve` per mode on SmolLM2, rounds of
# N concurrent chat completions under hack/bench-grammar/person.schema.json alternating between the
# modes, and per round the mean seconds per decode step (wall time / the longest completion's
# tokens) and the generated tokens per second of the round. MODES="during none" compares with
# the same requests unconstrained (no response_format, ignore_eos, GEN tokens each): issue 21's
# "throughput within 10% of unconstrained at 16 streams". engine/BENCHMARKS.md records the numbers.
#
#   hack/bench-grammar/serve-masks.sh [ROUNDS]      (default 3)
#   STREAMS=8 GEN=128 THREADS=1 PORT=18095 MODEL=path.gguf MODES="during after" 
set -euo pipefail
cd "$(dirname "$0")/../.."

bin=build/bin/cinfer-engine
rounds="${1:-3}"
streams="${STREAMS:-8}"
gen="${GEN:-128}"
threads="${THREADS:-1}"
port="${PORT:-18095}"
shared="${CINFER_SHARED:-$(cd .. && pwd)/shared}"
model="${MODEL:-$shared/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}"
[ -x "$bin" ] || { echo "serve-masks: $bin not built (run make)" >&2; exit 1; }
[ -r "$model" ] || { echo "serve-masks: SKIP: no $model" >&2; exit 0; }
work="$(mktemp -d /tmp/cinfer-serve-masks.XXXXXX)"
srv=""
cleanup() {
	[ -z "$srv" ] || kill "$srv" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
jq -n --slurpfile s hack/bench-grammar/person.schema.json --argjson gen "$gen" \
	'{model:"m",max_tokens:$gen,temperature:1.0,
	  messages:[{role:"user",content:"Describe a person as JSON."}],
	  response_format:{type:"json_schema",json_schema:{name:"person",schema:$s[0],strict:true}}}' \
	>"$work/req.json"
jq 'del(.response_format) + {ignore_eos: true}' "$work/req.json" >"$work/req-none.json"
modes="${MODES:-during after}"

start() { # start [FLAG]: a server in the given mode
	"$bin" serve --model "$model" --served-model-name m --port "$port" --threads "$threads" --max-num-seqs "$streams" \
		--context-length 1024 --log-format text "$@" >"$work/serve.log" 2>&1 &
	srv=$!
	for _ in $(seq 600); do
		curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "serve-masks: server did not start" >&2
	cat "$work/serve.log" >&2
	exit 1
}
stop() {
	kill "$srv"
	wait "$srv" 2>/dev/null || true
	srv=""
}
round() { # one round of $streams concurrent requests (body $1): prints "ms_per_step tok_per_s"
	local t0 t1 i max=0 sum=0 n pids=()
	t0=$(date +%s.%N)
	for i in $(seq "$streams"); do
		curl -fsS "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
			-d @"$1" >"$work/out.$i" &
		pids+=($!)
	done
	wait "${pids[@]}" # not the server
	t1=$(date +%s.%N)
	for i in $(seq "$streams"); do
		n=$(jq '.usage.completion_tokens' "$work/out.$i")
		sum=$((sum + n))
		if [ "$n" -gt "$max" ]; then max=$n; fi
	done
	echo "$t0 $t1 $max $sum" | awk '{printf "%.2f %.1f\n", ($2 - $1) * 1000 / $3, $4 / ($2 - $1)}'
}
declare -A ms tps
for r in $(seq "$rounds"); do
	for mode in $modes; do
		body="$work/req.json"
		if [ "$mode" = after ]; then start --grammar-inline-masks; else start; fi
		[ "$mode" = none ] && body="$work/req-none.json"
		round "$body" >/dev/null # warm: the schema's masks enter the grammar's cache
		read -r m t < <(round "$body")
		stop
		echo "round $r mode $mode: $m ms/step, $t tok/s ($streams streams)"
		ms[$mode]+="$m "
		tps[$mode]+="$t "
	done
done
med() { printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
for mode in $modes; do
	# shellcheck disable=SC2086 # the lists are space-separated words
	echo "median $mode: $(med ${ms[$mode]}) ms/step, $(med ${tps[$mode]}) tok/s"
done
