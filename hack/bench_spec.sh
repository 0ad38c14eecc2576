#!/usr/bin/env bash
# Single-stream speculative decoding A/B for engine/BENCHMARKS.md: `cinfer-engine generate` with
# --spec none and --spec ngram alternating on prompts from hack/bench_spec/ (an input-grounded
# JSON copy and code edit, greedy; free text, sampled at T 0.8 with a fixed seed, since a 135M
# model's greedy story loops). Prints per run, then the medians of decode tok/s (wall), of the
# process's user CPU seconds (steadier on a shared machine) and the acceptance; outputs must match.
# Usage: hack/bench_spec.sh [model] [runs] [threads]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${CINFER_ENGINE_BIN:-$root/build/bin/cinfer-engine}"
model="${1:-$root/../shared/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}"
runs="${2:-5}"
threads="${3:-1}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
field() { grep -o " $1=[^ ]*" "$2" | tail -n 1 | cut -d= -f2; }
for p in "$root"/hack/bench_spec/*.txt; do
	name="$(basename "$p" .txt)"
	for r in $(seq "$runs"); do
		temp=0
		[ "$name" == story ] && temp=0.8
		for s in none ngram; do
			TIMEFORMAT=%U
			{ time "$bin" generate --model "$model" --prompt "$(cat "$p")" --temperature "$temp" \
				--seed 1 --max-tokens 200 --threads "$threads" --spec "$s" --log-format text \
				>"$tmp/$name.$s.out" 2>"$tmp/err"; } 2>"$tmp/time"
			tps="$(field decode_tok_s "$tmp/err")"
			acc="$(field spec_acceptance "$tmp/err")"
			echo "$tps" >>"$tmp/$name.$s.tps"
			echo "$acc" >>"$tmp/$name.$s.acc"
			cat "$tmp/time" >>"$tmp/$name.$s.cpu"
			echo "$name run $r $s: decode $tps tok/s, user $(cat "$tmp/time") s, generated $(field generated_tokens "$tmp/err"), steps $(field steps "$tmp/err"), acceptance $acc"
		done
		cmp -s "$tmp/$name.none.out" "$tmp/$name.ngram.out" || echo "$name: OUTPUTS DIFFER"
	done
	off="$(median <"$tmp/$name.none.tps")"
	on="$(median <"$tmp/$name.ngram.tps")"
	coff="$(median <"$tmp/$name.none.cpu")"
	con="$(median <"$tmp/$name.ngram.cpu")"
	echo "== $name: median decode tok/s none $off, ngram $on ($(awk "BEGIN{printf \"%.2f\", $on/$off}")x); median user s none $coff, ngram $con ($(awk "BEGIN{printf \"%.2f\", $coff/$con}")x); median acceptance $(median <"$tmp/$name.ngram.acc")"
done
