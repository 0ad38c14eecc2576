#!/usr/bin/env bash
# Speculation under load for engine/BENCHMARKS.md: `cinfer-engine serve` with --spec none and
# --spec ngram (adaptive) in turn at 1, 4 and 16 closed-loop clients (hack/loadgen: random token-id
# prompts, ignore_eos), ROUNDS rounds; prints each run's generated tok/s, the server's proposal and
# acceptance counters, then the medians per level. Random prompts give lookup little to find: the
# check is that speculation on never costs throughput where it does not pay.
#
#   hack/bench_spec_load.sh [ROUNDS]     MODEL=... BIN=... PORT=18094 THREADS=2 VOCAB=49152
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
bin="${BIN:-build/bin/cinfer-engine}"
model="${MODEL:-../shared/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}"
port="${PORT:-18094}"
threads="${THREADS:-2}"
vocab="${VOCAB:-49152}"
log="$(mktemp)"
res="$(mktemp)"
trap 'rm -f "$log" "$res"' EXIT

run() { # run CLIENTS SPEC -> "tok/s drafts draft_tokens accepted"
	"$bin" serve --model "$model" --port "$port" --threads "$threads" --log-format text \
		--spec "$2" >"$log" 2>&1 &
	local pid=$! i
	for i in $(seq 600); do
		curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
		sleep 0.1
	done
	local n=$((4 * $1)) w=$1
	local tps
	tps="$(hack/loadgen --url "http://127.0.0.1:$port" --vocab "$vocab" --concurrency "$1" \
		--requests "$n" --warmup "$w" --prompt-tokens 128 --max-tokens 64 --seed 5 2>&1 |
		sed -n 's/.*req\/s, \([0-9.]*\) generated tok\/s.*/\1/p')"
	local m
	m="$(curl -sf "http://127.0.0.1:$port/metrics")"
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	metric() { echo "$m" | sed -n "s/^$1{[^}]*} \\([0-9.e+]*\\)$/\\1/p" | head -n 1; }
	echo "$tps $(metric cinfer_spec_decode_num_draft_tokens_total) $(metric cinfer_spec_decode_num_accepted_tokens_total)"
}

for r in $(seq "$rounds"); do
	for c in 1 4 16; do
		for s in none ngram; do
			out="$(run "$c" "$s")"
			echo "$(date -u +%H:%M:%S) round $r, $c clients, --spec $s: $out"
			echo "$c $s $out" >>"$res"
		done
	done
done
python3 - "$res" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
for c in ("1", "4", "16"):
    off = [float(r[2]) for r in rows if r[0] == c and r[1] == "none"]
    on = [float(r[2]) for r in rows if r[0] == c and r[1] == "ngram"]
    prop = sum(float(r[3] or 0) for r in rows if r[0] == c and r[1] == "ngram" and len(r) > 3)
    acc = sum(float(r[4] or 0) for r in rows if r[0] == c and r[1] == "ngram" and len(r) > 4)
    print("%s clients: median tok/s none %.1f, ngram %.1f (%.3fx); proposed %d, accepted %d"
          % (c, statistics.median(off), statistics.median(on),
             statistics.median(on) / statistics.median(off), prop, acc))
PY
