#!/usr/bin/env bash
# Issue 16's real-model table: every GGUF in ../shared/models/ (or the files named) measured by
# `cinfer-engine bench` and by llama.cpp (hack/bench-llamacpp.py in the oracle venv) on the same
# file, alternated run by run, medians of ROUNDS: decode b1 and pp (llama.cpp runs one sequence),
# and our decode b16.
#
#   hack/bench-real.sh [MODEL.gguf ...]
#   ROUNDS=3 THREADS=2 GEN=64 PROMPT=512 (capped at the model's context less GEN)
#
# Prints one line per run and a table. Needs a release build (make) and the oracle (hack/oracle.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

bin=build/bin/cinfer-engine
shared="${CINFER_SHARED:-$(cd .. && pwd)/shared}"
rounds="${ROUNDS:-3}"
threads="${THREADS:-2}"
gen="${GEN:-64}"
prompt="${PROMPT:-512}"
[ -x "$bin" ] || { echo "bench-real: $bin not built (run make)" >&2; exit 1; }
py="$(hack/oracle.sh)"
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
	mapfile -t models < <(find "$shared/models" -name '*.gguf' | sort)
fi
work="$(mktemp -d /tmp/cinfer-bench-real.XXXXXX)"
trap 'rm -rf "$work"' EXIT

median() { sort -g | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)]; else print "nan" }'; }

printf '| file | decode b1 tok/s: cinfer / llama.cpp | pp%s tok/s: cinfer / llama.cpp | decode b16 tok/s (x b1) |\n' "$prompt"
printf '|---|---|---|---|\n' >"$work/table"
for m in "${models[@]}"; do
	name="$(basename "$m")"
	ctx="$("$py" - "$m" <<'PY'
import sys, gguf
r = gguf.GGUFReader(sys.argv[1])
arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
f = r.fields.get(arch + ".context_length")
print(int(f.parts[-1][0]) if f else "")
PY
)"
	p="$prompt"
	if [ -n "$ctx" ] && [ $((p + gen + 8)) -gt "$ctx" ]; then p=$((ctx - gen - 8)); fi
	for r in $(seq "$rounds"); do
		"$bin" bench --model "$m" --prompt-tokens "$p" --gen-tokens "$gen" --batch 1,16 \
			--threads "$threads" --repetitions 1 --log-format text 2>/dev/null |
			grep '^{' >"$work/ours.jsonl"
		jq -r 'select(.batch == 1) | .tg_tok_s' "$work/ours.jsonl" >>"$work/$name.b1"
		jq -r 'select(.batch == 16) | .tg_tok_s' "$work/ours.jsonl" >>"$work/$name.b16"
		jq -r 'select(.batch == 1) | .pp_tok_s' "$work/ours.jsonl" >>"$work/$name.pp"
		"$py" hack/bench-llamacpp.py "$m" --threads "$threads" --prompt-tokens "$p" \
			--gen-tokens "$gen" --repetitions 1 >"$work/theirs.json"
		jq -r '.tg_tok_s' "$work/theirs.json" >>"$work/$name.lb1"
		jq -r '.pp_tok_s' "$work/theirs.json" >>"$work/$name.lpp"
		echo "$name round $r: ours b1 $(tail -n1 "$work/$name.b1") pp $(tail -n1 "$work/$name.pp")" \
			"b16 $(tail -n1 "$work/$name.b16"); llama.cpp b1 $(tail -n1 "$work/$name.lb1")" \
			"pp $(tail -n1 "$work/$name.lpp")" >&2
	done
	b1="$(median <"$work/$name.b1")" lb1="$(median <"$work/$name.lb1")"
	pp="$(median <"$work/$name.pp")" lpp="$(median <"$work/$name.lpp")"
	b16="$(median <"$work/$name.b16")"
	awk -v n="$name" -v b1="$b1" -v lb1="$lb1" -v pp="$pp" -v lpp="$lpp" -v b16="$b16" -v p="$p" \
		'BEGIN { printf "| %s (pp%d) | %.1f / %.1f (%.2fx) | %.1f / %.1f (%.2fx) | %.1f (%.2fx) |\n",
		         n, p, b1, lb1, b1 / lb1, pp, lpp, pp / lpp, b16, b16 / b1 }' >>"$work/table"
done
cat "$work/table"
