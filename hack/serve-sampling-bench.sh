#!/usr/bin/env bash
# Serving at the API's default temperature next to greedy (issue 23): one `cinfer-engine serve` on
# the benchmark model (build/bench/bench-q8_0.gguf, written here with gen-model when absent, as
# `make bench` does), then hack/loadgen with keep-alive clients, rounds of temperature 0 and 1.0
# alternating run by run at each concurrency, and the medians with their ratio.
#
#   hack/serve-sampling-bench.sh [ROUNDS]     (default 3)
#   CONCURRENCY="16 64" REQUESTS=64 PROMPT=128 GEN=128 THREADS=2 PORT=18094
#   MODEL=path.gguf VOCAB=N    another model (prompt ids are drawn from [3, VOCAB))
#
# Prints one line per run and a summary; engine/BENCHMARKS.md records the numbers.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=build/bin/cinfer-engine
rounds="${1:-3}"
conc="${CONCURRENCY:-16 64}"
requests="${REQUESTS:-64}"
prompt="${PROMPT:-128}"
gen="${GEN:-128}"
threads="${THREADS:-2}"
port="${PORT:-18094}"
model="${MODEL:-build/bench/bench-q8_0.gguf}"
vocab_n="${VOCAB:-32000}"
shared="${CINFER_SHARED:-$(cd .. && pwd)/shared}"
vocab="$shared/testdata/tokenizer/ggml-vocab-llama-spm.gguf"

[ -x "$bin" ] || { echo "serve-sampling-bench: $bin not built (run make)" >&2; exit 1; }
if [ ! -r "$model" ] && [ -z "${MODEL:-}" ]; then
	mkdir -p build/bench
	vocab_args=()
	[ -r "$vocab" ] && vocab_args=(--vocab-from "$vocab")
	"$bin" gen-model --out "$model" --type q8_0 "${vocab_args[@]}" --log-format text
fi
work="$(mktemp -d /tmp/cinfer-sampling-bench.XXXXXX)"
srv=""
cleanup() {
	[ -z "$srv" ] || kill "$srv" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
"$bin" serve --model "$model" --port "$port" --threads "$threads" --max-num-seqs 64 \
	--context-length 512 --kv-cache-bytes 1G \
	--log-format text >"$work/serve.log" 2>&1 &
srv=$!
for _ in $(seq 1200); do
	curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
	sleep 0.1
done
curl -fsS "http://127.0.0.1:$port/health" >/dev/null

run() { # run C TEMP: one measured run; prints its generated tok/s
	hack/loadgen --url "http://127.0.0.1:$port" --vocab "$vocab_n" --keep-alive --concurrency "$1" \
		--requests "$requests" --prompt-tokens "$prompt" --max-tokens "$gen" --warmup "$1" \
		--temperature "$2" --seed 5 --json "$work/run.json" >/dev/null
	jq -r '.tokens_per_s' "$work/run.json"
}
for c in $conc; do
	for r in $(seq "$rounds"); do
		for t in 0 1.0; do
			v="$(run "$c" "$t")"
			echo "clients $c round $r temperature $t: $v generated tok/s"
			echo "$c $t $v" >>"$work/all.txt"
		done
	done
done
echo "== medians (generated tok/s), keep-alive clients, $prompt-token prompts, $gen generated"
for c in $conc; do
	g="$(awk -v c="$c" '$1 == c && $2 == "0" { print $3 }' "$work/all.txt" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')"
	s="$(awk -v c="$c" '$1 == c && $2 == "1.0" { print $3 }' "$work/all.txt" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')"
	awk -v c="$c" -v g="$g" -v s="$s" 'BEGIN { printf "clients %s: greedy %.1f, temperature 1.0 %.1f (%.3fx)\n", c, g, s, s / g }'
done
