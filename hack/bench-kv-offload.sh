#!/usr/bin/env bash
# TTFT of one request by where its prompt prefix lives (issue #22): tier 1 (the KV pool's prefix
# cache), tier 2 (--kv-offload-bytes), tier 3 (--kv-offload-dir, page cache warm) or nowhere
# (recomputed), by prompt length. Each engine gets a KV pool of exactly one context
# (--max-num-seqs 1, --context-length LEN+16), so a second prompt of the same length evicts the first; the timed request
# is the first prompt again with max_tokens 1 (its time is the prefill plus one sampled token).
# Prints one line per length and tier: median of REPS seconds and the cached tokens reported
# (and the blocks the offload queue dropped).
#
#   ./hack/bench-kv-offload.sh [path/to/cinfer-engine]
#   MODEL=../shared/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf LENS="512 1024 2048"
#   THREADS=1 REPS=3 PORT=18333 MAX_ID=20000 (prompt ids below it) TIERS="recompute tier1 tier2 tier3"
#
# UNIQUE=N instead measures the overhead without reuse: N requests of distinct prompts of the first
# of LENS tokens (max_tokens 1) back to back, seconds in all, with offload off, tier 2, tiers 2+3;
# REPS alternations, medians.
set -euo pipefail
cd "$(dirname "$0")/.."

bin="${1:-build/bin/cinfer-engine}"
model="${MODEL:-../shared/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}"
lens="${LENS:-512 1024 2048}"
threads="${THREADS:-1}"
reps="${REPS:-3}"
tiers="${TIERS:-recompute tier1 tier2 tier3}"
port="${PORT:-18333}"
work="$(mktemp -d /tmp/cinfer-bench-kvoff.XXXXXX)"
pid=""
cleanup() {
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

# body FILE SEED LEN: a completion request of LEN pseudo-random token ids.
body() {
    python3 - "$1" "$2" "$3" <<'PY'
import json, random, sys
path, seed, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r = random.Random(seed)
ids = [r.randrange(3, int(__import__("os").environ.get("MAX_ID", "20000"))) for _ in range(n)]
json.dump({"prompt": ids, "max_tokens": 1, "temperature": 0}, open(path, "w"))
PY
}

# post FILE: prints "seconds cached_tokens".
post() {
    curl -s -o "$work/resp.json" -w '%{time_total}' -H 'content-type: application/json' -H 'Expect:' \
        --data-binary @"$1" "http://127.0.0.1:$port/v1/completions" > "$work/t"
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(open(sys.argv[2]).read(), d["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0))' \
        "$work/resp.json" "$work/t"
}

start() { # LEN extra-flags...
    local len="$1"; shift
    "$bin" serve --model "$model" --port "$port" --threads "$threads" --max-num-seqs 1 \
        --context-length "$((len + 16))" --max-num-batched-tokens 4096 --log-level warn "$@" \
        > "$work/serve.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 200); do
        curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1 && return 0
        sleep 0.1
    done
    cat "$work/serve.log" >&2
    return 1
}

stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""; }

# The engine's CPU seconds so far (user + system, all threads: the offload thread's work too).
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.3f\n", ($14 + $15) / hz}' "/proc/$pid/stat"; }

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# The offload tiers' stored and dropped block counts, summed over tiers.
offload_counts() {
    curl -s "http://127.0.0.1:$port/metrics" | awk '
        /^cinfer_kv_offload_stored_blocks_total/ {s += $NF}
        /^cinfer_kv_offload_dropped_blocks_total/ {d += $NF}
        END {printf "%d %d\n", s, d}'
}

# Waits until the offload thread has written what eviction gave it: the stored count still for
# half a second (30 s at most). A fixed pause was too short at 4k tokens (256 blocks to seal and
# write), and the timed request then missed tier 3 and competed with the writes.
settle() {
    local last now same=0
    last="$(offload_counts)"
    for _ in $(seq 1 300); do
        sleep 0.1
        now="$(offload_counts)"
        if [ "$now" = "$last" ]; then same=$((same + 1)); else same=0; last="$now"; fi
        [ "$same" -ge 5 ] && return 0
    done
}

if [ -n "${UNIQUE:-}" ]; then
    len="${lens%% *}"
    for i in $(seq 1 "$UNIQUE"); do body "$work/u$i.json" "$((100 + i))" "$len"; done
    echo "# model=$(basename "$model") threads=$threads reps=$reps unique=$UNIQUE len=$len"
    echo "# mode wall_s_median engine_cpu_s_median (user+system of every engine thread)"
    for mode in off tier2 tier23; do : > "$work/times-$mode"; : > "$work/cpu-$mode"; done
    for _ in $(seq 1 "$reps"); do
        for mode in off tier2 tier23; do
            flags=()
            case $mode in
                tier2) flags=(--kv-offload-bytes 2G) ;;
                tier23) rm -rf "$work/dir"
                        flags=(--kv-offload-bytes 2G --kv-offload-dir "$work/dir") ;;
            esac
            start "$len" "${flags[@]}"
            c0=$(cpu_s)
            t0=$(date +%s.%N)
            for i in $(seq 1 "$UNIQUE"); do post "$work/u$i.json" > /dev/null; done
            echo "$(date +%s.%N) - $t0" | bc >> "$work/times-$mode"
            echo "$(cpu_s) - $c0" | bc >> "$work/cpu-$mode"
            stop
        done
    done
    for mode in off tier2 tier23; do
        echo "$mode $(median < "$work/times-$mode") $(median < "$work/cpu-$mode")"
    done
    exit 0
fi

echo "# model=$(basename "$model") threads=$threads reps=$reps"
echo "# len tier ttft_median_s cached_tokens"
for len in $lens; do
    body "$work/p.json" 1 "$len"
    body "$work/f.json" 2 "$((len + 8))" # one block more than the first: evicts all of it
    for tier in $tiers; do
        flags=()
        case $tier in
            tier2) flags=(--kv-offload-bytes 2G) ;;
            tier3) rm -rf "$work/dir"; flags=(--kv-offload-dir "$work/dir" --kv-offload-dir-bytes 4G) ;;
        esac
        start "$len" "${flags[@]}"
        post "$work/p.json" > /dev/null # computed once
        # tier 3 takes only blocks seen twice (a pool hit before eviction): ask once more
        [ "$tier" = tier3 ] && post "$work/p.json" > /dev/null
        : > "$work/times"
        cached=0
        for _ in $(seq 1 "$reps"); do
            [ "$tier" != tier1 ] && post "$work/f.json" > /dev/null # evicts the prefix
            settle                                                     # the offload thread writes
            read -r t cached < <(post "$work/p.json")
            echo "$t" >> "$work/times"
        done
        read -r _ dropped < <(offload_counts)
        echo "$len $tier $(median < "$work/times") $cached${dropped:+ dropped=$dropped}"
        stop
    done
done
