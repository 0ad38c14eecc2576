#!/usr/bin/env bash
# `make bench`: generates the benchmark models with `cinfer-engine gen-model` (llama architecture,
# dim 768, 12 layers, 12 heads, ffn 2048, the llama-spm vocabulary: 32000 tokens) in F16, Q8_0, Q4_0
# and F32, runs `cinfer-engine bench` on each and prints a summary with the ratios to llama.cpp's
# figures on the reference machine (2 threads). Results: $BENCH_DIR/results.jsonl. See
# engine/BENCHMARKS.md for the numbers and how they were taken.
#
#   ./hack/bench.sh [path/to/cinfer-engine]
#   THREADS=2 REPS=3 TYPES="f16 q8_0 q4_0 f32" BATCH=1,4,16 PROMPT=512 GEN=128 BENCH_DIR=build/bench
set -euo pipefail
cd "$(dirname "$0")/.."

bin="${1:-build/bin/cinfer-engine}"
shared="${CINFER_SHARED:-$(cd .. && pwd)/shared}"
vocab="$shared/testdata/tokenizer/ggml-vocab-llama-spm.gguf"
dir="${BENCH_DIR:-build/bench}"
threads="${THREADS:-2}"
reps="${REPS:-3}"
types="${TYPES:-f16 q8_0 q4_0 f32}"
batch="${BATCH:-1,4,16}"
prompt="${PROMPT:-512}"
gen="${GEN:-128}"

if [ ! -x "$bin" ]; then
	echo "bench: $bin not built (run make)" >&2
	exit 1
fi
if ! "$bin" gen-model --help >/dev/null 2>&1; then
	echo "bench: this cinfer-engine has no gen-model command" >&2
	exit 1
fi
vocab_args=()
if [ -r "$vocab" ]; then
	vocab_args=(--vocab-from "$vocab")
else
	echo "bench: $vocab not present; using a generated 32000-token vocabulary" >&2
	vocab_args=(--vocab-size 32000)
fi
mkdir -p "$dir"

# llama.cpp on the reference machine, 2 threads: decode tok/s at batch 1, and pp512 tok/s.
declare -A ref_tg=([f16]=66 [q8_0]=196 [q4_0]=305 [f32]=54)
declare -A ref_pp=([f16]=478 [q8_0]=815 [q4_0]=947 [f32]=708)

results="$dir/results.jsonl"
: >"$results"
for t in $types; do
	model="$dir/bench-$t.gguf"
	if [ ! -s "$model" ]; then
		echo "== generating $model"
		"$bin" gen-model --out "$model" --type "$t" "${vocab_args[@]}" --log-format text
	fi
	echo "== $t"
	"$bin" bench --model "$model" --prompt-tokens "$prompt" --gen-tokens "$gen" --batch "$batch" \
		--threads "$threads" --repetitions "$reps" --log-format text | tee "$dir/bench-$t.txt"
	grep '^{' "$dir/bench-$t.txt" | jq -c --arg type "$t" '. + {type: $type}' >>"$results"
done

echo
echo "== summary (ratios to llama.cpp, $threads threads; batch 1 decode, pp$prompt)"
printf '%-6s %10s %8s %10s %8s %14s\n' type tg_tok_s tg_ratio pp_tok_s pp_ratio tg_b16_tok_s
for t in $types; do
	tg1="$(jq -r --arg t "$t" 'select(.type == $t and .batch == 1) | .tg_tok_s' "$results")"
	pp1="$(jq -r --arg t "$t" 'select(.type == $t and .batch == 1) | .pp_tok_s' "$results")"
	tg16="$(jq -r --arg t "$t" 'select(.type == $t and .batch == 16) | .tg_tok_s' "$results")"
	awk -v t="$t" -v tg="${tg1:-0}" -v pp="${pp1:-0}" -v tg16="${tg16:--}" \
		-v rtg="${ref_tg[$t]:-0}" -v rpp="${ref_pp[$t]:-0}" 'BEGIN {
		printf "%-6s %10.1f %8s %10.1f %8s %14s\n", t, tg, rtg ? sprintf("%.2fx", tg / rtg) : "-",
			pp, rpp ? sprintf("%.2fx", pp / rpp) : "-", tg16
	}'
done
