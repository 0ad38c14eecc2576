#!/usr/bin/env bash
# The cross-request n-gram pool (--ngram-pool-bytes) for engine/BENCHMARKS.md: `cinfer-engine
# serve --spec ngram` with the pool off (0) and at each size given, in turn, ROUNDS rounds. Each run
# is a fresh server and a repeated-request workload: CLIENTS clients each send the same prompt
# from hack/bench_spec/ REQS times one after the other (max_tokens 200; code_edit and json_copy
# greedy, story sampled at T 0.8 with a seed per request: free text). Prints each run's generated
# tok/s (wall, all clients), the server's proposal, acceptance and pool-hit counters, whether the
# outputs equal the pool-off run's, then the medians per prompt and size.
#
#   hack/bench_spec_pool.sh [ROUNDS] [SIZES]   MODEL=... BIN=... PORT=18095 THREADS=2 CLIENTS=3 REQS=3
#   e.g. hack/bench_spec_pool.sh 3 "1M"        (SIZES: space-separated --ngram-pool-bytes values)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
sizes="${2:-1M}"
bin="${BIN:-build/bin/cinfer-engine}"
model="${MODEL:-../shared/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}"
port="${PORT:-18095}"
threads="${THREADS:-2}"
clients="${CLIENTS:-3}"
reqs="${REQS:-3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

run() { # run PROMPT POOL_BYTES -> "tok/s proposed accepted pool_hits" (outputs in $work/out.PROMPT.POOL)
	"$bin" serve --model "$model" --port "$port" --threads "$threads" --log-format text \
		--spec ngram --ngram-pool-bytes "$2" >"$work/log" 2>&1 &
	local pid=$! i
	for i in $(seq 600); do
		curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
		sleep 0.1
	done
	python3 - "$port" "hack/bench_spec/$1.txt" "$1" "$clients" "$reqs" "$work/out.$1.$2" <<'PY'
import json, sys, threading, time, urllib.request
port, path, name, clients, reqs, out = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
prompt = open(path).read()
texts, tokens = {}, [0]
lock = threading.Lock()
def client(c):
    for r in range(reqs):
        body = {"prompt": prompt, "max_tokens": 200, "temperature": 0.8 if name == "story" else 0,
                "seed": 1 + r}
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        resp = json.load(urllib.request.urlopen(req, timeout=600))
        with lock:
            texts[(c, r)] = resp["choices"][0]["text"]
            tokens[0] += resp["usage"]["completion_tokens"]
t0 = time.monotonic()
ts = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
for t in ts: t.start()
for t in ts: t.join()
dt = time.monotonic() - t0
json.dump({f"{c},{r}": v for (c, r), v in sorted(texts.items())}, open(out, "w"))
print("%.2f" % (tokens[0] / dt))
PY
	local m
	m="$(curl -sf "http://127.0.0.1:$port/metrics")"
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	metric() { echo "$m" | sed -n "s/^$1{[^}]*} \\([0-9.e+]*\\)$/\\1/p" | head -n 1; }
	echo "$(metric cinfer_spec_decode_num_draft_tokens_total) $(metric cinfer_spec_decode_num_accepted_tokens_total) $(metric cinfer_spec_decode_ngram_pool_hits_total)"
}

for r in $(seq "$rounds"); do
	for p in code_edit json_copy story; do
		for s in 0 $sizes; do
			tps="$(run "$p" "$s" | tr '\n' ' ')"
			same=same
			[ "$s" == 0 ] || cmp -s "$work/out.$p.0" "$work/out.$p.$s" || same=DIFFERENT
			echo "$(date -u +%H:%M:%S) round $r, $p, --ngram-pool-bytes $s: tok/s proposed accepted pool_hits = $tps(outputs $same)"
			echo "$p $s $tps" >>"$work/res"
		done
	done
done
python3 - "$work/res" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
for p in ("code_edit", "json_copy", "story"):
    base = [float(r[2]) for r in rows if r[0] == p and r[1] == "0"]
    for s in dict.fromkeys(r[1] for r in rows if r[0] == p):
        sel = [r for r in rows if r[0] == p and r[1] == s]
        tps = statistics.median(float(r[2]) for r in sel)
        prop = sum(float(r[3] or 0) for r in sel)
        acc = sum(float(r[4] or 0) for r in sel)
        hits = sum(float(r[5] or 0) for r in sel)
        print("%s, pool %s: median tok/s %.1f (%.2fx off), proposed %d, accepted %d (%.2f), pool hits %d"
              % (p, s, tps, tps / statistics.median(base), prop, acc, acc / prop if prop else 0, hits))
PY
