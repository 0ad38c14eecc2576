#!/usr/bin/env bash
# Single-stream draft-model speculative decoding A/B for engine/BENCHMARKS.md: `cinfer-engine
# generate` with --speculative none, draft (adaptive k) and draft with a fixed k
# (--no-spec-adaptive) alternating on one prompt, greedy; prints per run, then the medians of
# decode tok/s (wall), of the process's user CPU seconds and the acceptance; greedy outputs must
# match. Usage: hack/bench_spec_draft.sh [target] [draft] [runs] [threads] [k]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${CINFER_ENGINE_BIN:-$root/build/bin/cinfer-engine}"
target="${1:-$root/../shared/models/tinyllamas/stories260K.gguf}"
draft="${2:-$root/../shared/models/tinyllamas/stories260K-Q8_0.gguf}"
runs="${3:-5}"
threads="${4:-1}"
k="${5:-5}"
prompt="${BENCH_PROMPT:-Once upon a time, there was a little girl named Lily. She loved to play}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
field() { grep -o " $1=[^ ]*" "$2" | tail -n 1 | cut -d= -f2; }
modes=(none draft fixed)
for r in $(seq "$runs"); do
	for m in "${modes[@]}"; do
		args=(--speculative none)
		[ "$m" != none ] && args=(--speculative draft --draft-model "$draft" --num-speculative-tokens "$k")
		[ "$m" == fixed ] && args+=(--no-spec-adaptive)
		TIMEFORMAT=%U
		{ time "$bin" generate --model "$target" --prompt "$prompt" --temperature 0 --max-tokens 200 \
			--ignore-eos --threads "$threads" "${args[@]}" --log-format text \
			>"$tmp/$m.out" 2>"$tmp/err"; } 2>"$tmp/time"
		tps="$(field decode_tok_s "$tmp/err")"
		acc="$(field spec_acceptance "$tmp/err")"
		echo "$tps" >>"$tmp/$m.tps"
		echo "$acc" >>"$tmp/$m.acc"
		cat "$tmp/time" >>"$tmp/$m.cpu"
		echo "run $r $m: decode $tps tok/s, user $(cat "$tmp/time") s, steps $(field steps "$tmp/err"), proposed $(field spec_proposed "$tmp/err"), acceptance $acc"
	done
	for m in draft fixed; do cmp -s "$tmp/none.out" "$tmp/$m.out" || echo "run $r: $m OUTPUT DIFFERS"; done
done
off="$(median <"$tmp/none.tps")"
for m in draft fixed; do
	on="$(median <"$tmp/$m.tps")"
	echo "== $m: median decode tok/s none $off, $m $on ($(awk "BEGIN{printf \"%.2f\", $on/$off}")x); median user s none $(median <"$tmp/none.cpu"), $m $(median <"$tmp/$m.cpu"); median acceptance $(median <"$tmp/$m.acc")"
done
