#!/usr/bin/env bash
# What a tier-3 hit costs the other requests (issue #22): one stream decodes while a long prompt
# whose prefix is in --kv-offload-dir arrives at a cold engine. Reports, per binary and round, the
# long request's TTFT (prefill of the uncached rest + one token), its cached tokens, and the
# stream's largest inter-token gap while the long request was in flight (the stall the inference
# thread's step took) next to its median gap. The directory is filled once (an engine computes the
# long prompt, a graceful stop writes its blocks); every round starts cold engines on it, one per
# binary, alternating; the files are in the page cache (warm: SHA-256 and copies, not the device).
#
#   ./hack/bench-kv-offload-stall.sh [BIN ...]     (default build/bin/cinfer-engine)
#   a BIN written nodir:PATH runs PATH without --kv-offload-dir (the recompute baseline), and
#   pool:PATH asks the long prompt once before the stream starts, so that the timed one is a hit
#   in the KV pool (tier 1: the cost of the long request's last block alone, the control)
#   MODEL=../shared/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf LEN=2048 GEN=200 THREADS=1
#   REPS=3 PORT=18334 COLD=1 (before each engine, the block files leave the page cache: fsync +
#   posix_fadvise DONTNEED on those files only, so tier 3 reads come from the device)
set -euo pipefail
cd "$(dirname "$0")/.."

bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=(build/bin/cinfer-engine)
model="${MODEL:-../shared/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}"
len="${LEN:-2048}"
gen="${GEN:-200}"
threads="${THREADS:-1}"
reps="${REPS:-3}"
port="${PORT:-18334}"
work="$(mktemp -d /tmp/cinfer-bench-stall.XXXXXX)"
pid=""
cleanup() {
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

start() { # BIN
    local bin="$1" off=(--kv-offload-dir "$work/dir" --kv-offload-dir-bytes 4G)
    if [ "${bin#nodir:}" != "$bin" ]; then bin="${bin#nodir:}"; off=(); fi
    bin="${bin#pool:}"
    "$bin" serve --model "$model" --port "$port" --threads "$threads" --max-num-seqs 2 \
        --context-length "$((len + gen + 64))" --max-num-batched-tokens 4096 \
        "${off[@]}" --log-level warn > "$work/serve.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 300); do
        curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1 && return 0
        sleep 0.1
    done
    cat "$work/serve.log" >&2
    return 1
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""; }
# uncache: drops the directory's files from the page cache (COLD=1).
uncache() {
    [ "${COLD:-0}" = 1 ] || return 0
    python3 -c 'import os,sys
for n in os.listdir(sys.argv[1]):
    fd = os.open(os.path.join(sys.argv[1], n), os.O_RDONLY)
    os.fsync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)' "$work/dir"
}

# measure ROUND LABEL: prints "LABEL ttft_s cached max_gap_s median_gap_s" (or just fills the
# directory with ROUND -1).
measure() {
    python3 - "$port" "$len" "$gen" "$1" "$2" <<'PY'
import http.client, json, random, statistics, sys, threading, time
port, n, gen, rnd, label = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
r = random.Random(1)
long_prompt = [r.randrange(3, 20000) for _ in range(n)]
def post(body, stream=False):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    return c.getresponse()
def ask_long():
    t0 = time.monotonic()
    d = json.loads(post({"prompt": long_prompt, "max_tokens": 1, "temperature": 0}).read())
    return time.monotonic() - t0, d["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
if rnd < 0 or label.startswith("pool:"):
    ask_long()
if rnd < 0:
    sys.exit(0)
times = []
def stream():
    s = random.Random(1000 + rnd)
    body = {"prompt": [s.randrange(3, 20000) for _ in range(32)], "max_tokens": gen,
            "temperature": 0, "ignore_eos": True, "stream": True}
    resp = post(body)
    for line in resp:
        if line.startswith(b"data: {"):
            times.append(time.monotonic())
th = threading.Thread(target=stream)
th.start()
while len(times) < 20:
    time.sleep(0.01)
t_send = time.monotonic()
ttft, cached = ask_long()
t_done = time.monotonic()
th.join()
gaps = [(b - a, b) for a, b in zip(times[1:], times[2:])]
during = [g for g, at in gaps if t_send <= at <= t_done + 0.5]
print(label, f"{ttft:.3f}", cached, f"{max(during) if during else 0:.3f}",
      f"{statistics.median(g for g, _ in gaps):.3f}")
PY
}

start "${bins[0]}"
measure -1 fill
stop # graceful: the long prompt's blocks go to the directory
echo "# model=$(basename "$model") len=$len gen=$gen threads=$threads reps=$reps cold=${COLD:-0}"
echo "# binary ttft_s cached_tokens max_gap_s median_gap_s"
: > "$work/results"
for r in $(seq 1 "$reps"); do
    for b in "${bins[@]}"; do
        uncache
        start "$b"
        measure "$r" "$b" | tee -a "$work/results"
        stop
    done
done
echo "# medians"
for b in "${bins[@]}"; do
    awk -v b="$b" '$1 == b' "$work/results" | python3 -c 'import statistics,sys
rows = [l.split() for l in sys.stdin]
print(sys.argv[1], *(f"{statistics.median(float(r[i]) for r in rows):.3f}" for i in (1, 2, 3, 4)))' "$b"
done
