#!/usr/bin/env bash
# The serving benchmark of engine/BENCHMARKS.md ("Serving"), as pairs: each pair is a 16-client run
# and then a `--max-num-seqs 1` run of the same server flags, so that both see the same minute of a
# shared machine; prints every pair's throughputs and ratio, then the medians.
#
#   hack/serve-pairs.sh [N_PAIRS] [extra serve flags...]      (default 4 pairs)
#   BIN=build/bin/cinfer-engine MODEL=build/bench/bench-q8_0.gguf PORT=18093 THREADS=2
#
# The model comes from `make bench` (the random-weight 110M llama in Q8_0). Needs curl and python3.
set -euo pipefail
cd "$(dirname "$0")/.."

pairs="${1:-4}"
shift || true
bin="${BIN:-build/bin/cinfer-engine}"
model="${MODEL:-build/bench/bench-q8_0.gguf}"
port="${PORT:-18093}"
threads="${THREADS:-2}"
if [ ! -x "$bin" ] || [ ! -f "$model" ]; then
	echo "serve-pairs: needs $bin (make) and $model (make bench)" >&2
	exit 1
fi
log="$(mktemp)"
trap 'rm -f "$log"' EXIT

# One server run: starts `serve` with the given flags, drives it with hack/loadgen, stops it, and
# prints loadgen's generated tokens/s.
run() {
	"$bin" serve --model "$model" --port "$port" --threads "$threads" --log-format text "$@" \
		>"$log" 2>&1 &
	local pid=$! i
	for i in $(seq 600); do
		curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "serve-pairs: the server exited: $(tail -n 3 "$log")" >&2
			exit 1
		fi
		sleep 0.1
	done
	local load=(--requests 64 --warmup 16)
	case " $* " in *" --max-num-seqs 1 "*) load=(--requests 32 --warmup 4) ;; esac
	hack/loadgen --url "http://127.0.0.1:$port" --vocab 32000 --concurrency 16 "${load[@]}" \
		--prompt-tokens 128 --max-tokens 128 --seed 5 2>&1 |
		sed -n 's/.*req\/s, \([0-9.]*\) generated tok\/s.*/\1/p'
	kill "$pid"
	wait "$pid" 2>/dev/null || true
}

results=()
for p in $(seq "$pairs"); do
	b16="$(run "$@")"
	b1="$(run --max-num-seqs 1 "$@")"
	echo "$(date -u +%H:%M:%S) pair $p: 16 clients $b16 tok/s, --max-num-seqs 1 $b1 tok/s"
	results+=("$b16 $b1")
done
printf '%s\n' "${results[@]}" | python3 -c '
import statistics, sys
rows = [tuple(map(float, l.split())) for l in sys.stdin if l.strip()]
ratios = [a / b for a, b in rows]
print("ratios: " + " ".join("%.2f" % r for r in ratios))
print("medians: 16 clients %.1f, --max-num-seqs 1 %.1f, ratio of medians %.2fx, median ratio %.2fx"
      % (statistics.median(a for a, _ in rows), statistics.median(b for _, b in rows),
         statistics.median(a for a, _ in rows) / statistics.median(b for _, b in rows),
         statistics.median(ratios)))'
