#!/usr/bin/env bash
# Step time of constrained decoding with masks computed during the forward pass (the default) and
# after it (serve --grammar-inline-masks): one `cinfer-engine serve` per mode on SmolLM2, rounds of
# N concurrent chat completions under hack/bench-grammar/person.schema.json alternating between the
# modes, and per round the mean seconds per decode step (wall time / the longest completion's
# tokens). engine/BENCHMARKS.md records the numbers.
#
#   hack/bench-grammar/serve-masks.sh [ROUNDS]      (default 3)
#   STREAMS=8 GEN=128 THREADS=1 PORT=18095 MODEL=path.gguf
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
round() { # one round of $streams concurrent requests: prints ms per step
	local t0 t1 i max=0 n pids=()
	t0=$(date +%s.%N)
	for i in $(seq "$streams"); do
		curl -fsS "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
			-d @"$work/req.json" >"$work/out.$i" &
		pids+=($!)
	done
	wait "${pids[@]}" # not the server
	t1=$(date +%s.%N)
	for i in $(seq "$streams"); do
		n=$(jq '.usage.completion_tokens' "$work/out.$i")
		if [ "$n" -gt "$max" ]; then max=$n; fi
	done
	echo "$t0 $t1 $max" | awk '{printf "%.2f\n", ($2 - $1) * 1000 / $3}'
}
declare -a during after
for r in $(seq "$rounds"); do
	for mode in during after; do
		if [ "$mode" = after ]; then start --grammar-inline-masks; else start; fi
		round >/dev/null # warm: the schema's masks enter the grammar's cache
		ms=$(round)
		stop
		echo "round $r masks $mode the forward pass: $ms ms/step ($streams streams)"
		if [ "$mode" = during ]; then during+=("$ms"); else after+=("$ms"); fi
	done
done
med() { printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo "median ms/step: during $(med "${during[@]}"), after $(med "${after[@]}")"
