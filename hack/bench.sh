#!/usr/bin/env bash
# `make bench`: generates the benchmark models with `cinfer-engine gen-model` (llama architecture,
# dim 768, 12 layers, 12 heads, ffn 2048, the llama-spm vocabulary: 32000 tokens) in F16, Q8_0, Q4_0
# and F32, runs `cinfer-engine bench` on each and prints a summary with the ratios to llama.cpp's
# figures on the reference machine (2 threads). Results: $BENCH_DIR/results.jsonl. See
# engine/BENCHMARKS.md for the numbers and how they were taken.
#
#   ./hack/bench.sh [path/to/cinfer-engine]
#   THREADS=2 REPS=3 TYPES="f16 q8_0 q4_0 f32" BATCH=1,4,16 PROMPT=512 GEN=128 BENCH_DIR=build/bench
#
# Side by side with llama.cpp (the oracle venv, hack/oracle.sh): QUANT="Q4_K_M Q5_K_M Q6_K Q4_1
# Q5_0" quantizes bench-f16.gguf with llama.cpp's own quantizer into each of those file types
# (hack/llamacpp-quantize.py), then runs REPS alternations of `cinfer-engine bench` (b1, b16 and
# pp, one repetition each) and hack/bench-llamacpp.py (b1 and pp) on the same file, and prints
# the medians and their ratios. TYPES="" skips the generated-model runs.
set -euo pipefail
cd "$(dirname "$0")/.."

bin="${1:-build/bin/cinfer-engine}"
shared="${CINFER_SHARED:-$(cd .. && pwd)/shared}"
vocab="$shared/testdata/tokenizer/ggml-vocab-llama-spm.gguf"
dir="${BENCH_DIR:-build/bench}"
threads="${THREADS:-2}"
reps="${REPS:-3}"
types="${TYPES-f16 q8_0 q4_0 f32}"
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

[ -z "$types" ] || echo
[ -z "$types" ] || echo "== summary (ratios to llama.cpp, $threads threads; batch 1 decode, pp$prompt)"
[ -z "$types" ] || printf '%-6s %10s %8s %10s %8s %14s\n' type tg_tok_s tg_ratio pp_tok_s pp_ratio tg_b16_tok_s
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

# ---- side by side with llama.cpp on llama.cpp-quantized files ---------------------------------
quant="${QUANT:-}"
[ -n "$quant" ] || exit 0
py="$(hack/oracle.sh)"
src="$dir/bench-f16.gguf"
if [ ! -s "$src" ]; then
	echo "== generating $src"
	"$bin" gen-model --out "$src" --type f16 "${vocab_args[@]}" --log-format text
fi
peer="$dir/peer.jsonl"
: >"$peer"
for q in $quant; do
	model="$dir/bench-$q.gguf"
	if [ ! -s "$model" ]; then
		echo "== llama.cpp quantizes $src to $q"
		"$py" hack/llamacpp-quantize.py "$src" "$model" "$q" --threads "$threads"
	fi
	for rep in $(seq "$reps"); do
		echo "== $q run $rep: cinfer-engine"
		# the table's CPU-time columns (pp_cpu_tok_s, tg_cpu_tok_s) joined to the JSON lines
		"$bin" bench --model "$model" --prompt-tokens "$prompt" --gen-tokens "$gen" --batch 1,16 \
			--threads "$threads" --repetitions 1 --log-format text >"$dir/peer-run.txt"
		awk '$2 ~ /^[0-9]+$/ && NF == 9 { printf "{\"batch\":%d,\"pp_cpu_tok_s\":%s,\"tg_cpu_tok_s\":%s}\n", $2, $8, $9 }' \
			"$dir/peer-run.txt" >"$dir/peer-cpu.jsonl"
		grep '^{' "$dir/peer-run.txt" | while read -r line; do
			b="$(jq -r .batch <<<"$line")"
			jq -c --arg q "$q" --argjson cpu "$(jq -c "select(.batch == $b)" "$dir/peer-cpu.jsonl")" \
				'. + $cpu + {engine: "cinfer", file: $q}' <<<"$line"
		done | tee -a "$peer"
		echo "== $q run $rep: llama.cpp"
		"$py" hack/bench-llamacpp.py "$model" --threads "$threads" --prompt-tokens "$prompt" \
			--gen-tokens "$gen" --repetitions 1 |
			jq -c --arg q "$q" '. + {file: $q, batch: 1}' | tee -a "$peer"
	done
done

echo
echo "== side by side, medians of $reps alternations ($threads threads; tg at batch 1, pp$prompt)"
echo "   wall clock tok/s, then tokens per CPU-second x threads (the quiet-machine estimate)"
printf '%-8s %9s %9s %7s %9s %9s %7s %9s %7s | %8s %8s %7s %8s %8s %7s\n' file c_tg l_tg ratio \
	c_pp l_pp ratio c_tg_b16 b16/b1 c_tgcpu l_tgcpu ratio c_ppcpu l_ppcpu ratio
med() { jq -s -r "$1"' | sort | if length == 0 then 0 else .[(length - 1) / 2 | floor] end' "$peer"; }
for q in $quant; do
	sel() { echo "map(select(.file == \"$q\" and $1) | .$2)"; }
	c='.engine == "cinfer" and .batch == 1'
	l='.engine == "llama.cpp"'
	awk -v q="$q" -v ctg="$(med "$(sel "$c" tg_tok_s)")" -v ltg="$(med "$(sel "$l" tg_tok_s)")" \
		-v cpp="$(med "$(sel "$c" pp_tok_s)")" -v lpp="$(med "$(sel "$l" pp_tok_s)")" \
		-v c16="$(med "$(sel '.engine == "cinfer" and .batch == 16' tg_tok_s)")" \
		-v ctc="$(med "$(sel "$c" tg_cpu_tok_s)")" -v ltc="$(med "$(sel "$l" tg_cpu_tok_s)")" \
		-v cpc="$(med "$(sel "$c" pp_cpu_tok_s)")" -v lpc="$(med "$(sel "$l" pp_cpu_tok_s)")" 'BEGIN {
		printf "%-8s %9.1f %9.1f %6.2fx %9.1f %9.1f %6.2fx %9.1f %6.2fx | %8.1f %8.1f %6.2fx %8.1f %8.1f %6.2fx\n",
			q, ctg, ltg, ltg ? ctg / ltg : 0, cpp, lpp, lpp ? cpp / lpp : 0, c16, ctg ? c16 / ctg : 0,
			ctc, ltc, ltc ? ctc / ltc : 0, cpc, lpc, lpc ? cpc / lpc : 0
	}'
done
