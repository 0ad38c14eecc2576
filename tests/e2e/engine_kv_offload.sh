#!/usr/bin/env bash
# KV offload tiers through the real server (issue #22): with a KV pool of one context, a prompt
# whose blocks a second prompt evicted comes back from tier 2 (--kv-offload-bytes) as cached
# tokens with the same text, and the metrics say which tier; a second engine started on the same
# --kv-offload-dir (a cold replica on a shared volume) serves the prefix from tier 3, and a third
# finds what the second still cached when it stopped; a damaged
# block file is recomputed, never served. The model is generated (no ../shared).
set -uo pipefail
source "$(dirname "$0")/lib.sh"

engine="$e2e_bin/cinfer-engine"
work="$(mktemp -d /tmp/cinfer-kvoff-e2e.XXXXXX)"
model="$work/model.gguf"
pid=""
cleanup_extra() {
	[ -z "$pid" ] || kill -KILL "$pid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup_extra EXIT

check "generate a model" "$engine" gen-model --out "$model" --type q8_0 --dim 128 --layers 4 \
	--heads 4 --kv-heads 2 --ffn 256 --context-length 1024 --log-format text

# start LOG flags...: one context of 256 tokens in the pool (--max-num-seqs 1); sets pid, port.
start() {
	local log="$1"
	shift
	"$engine" serve --model "$model" --port 0 --threads 1 --max-num-seqs 1 --context-length 256 \
		--log-format text "$@" >"$log" 2>&1 &
	pid=$!
	port="$(engine_port "$log" $((60 * e2e_slow)))" || port=""
}
stop() {
	kill "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	pid=""
}
# ask SEED [N]: N (200) token ids from SEED, 8 greedy tokens; prints "cached_tokens text".
ask() {
	python3 -c 'import json,random,sys; r=random.Random(int(sys.argv[1]))
print(json.dumps({"prompt":[r.randrange(3,200) for _ in range(int(sys.argv[2]))],"max_tokens":8,"temperature":0}))' "$1" "${2:-200}" |
		curl -sf --max-time $((120 * e2e_slow)) "http://127.0.0.1:$port/v1/completions" \
			-H 'Content-Type: application/json' --data-binary @- |
		python3 -c 'import json,sys; r=json.load(sys.stdin)
print(r["usage"]["prompt_tokens_details"]["cached_tokens"], json.dumps(r["choices"][0]["text"]))'
}
# events FILE: the first two seconds of the engine's block event stream (hello, snapshot, ...).
events() {
	timeout 2 curl -sN "http://127.0.0.1:$port/cinfer/kv-events" >"$1" 2>/dev/null
	true
}
metric() { # NAME TIER
	curl -s "http://127.0.0.1:$port/metrics" | awk -v n="$1" -v t="tier=\"$2\"" \
		'index($0, n "{") == 1 && index($0, t) { print $2 }'
}
# A block reaches the tiers when the pool evicts it or the engine stops gracefully; a cold engine
# started beside a running one finds a prefix only once that one has evicted all of it.

dir="$work/kv"
start "$work/a.log" --kv-offload-bytes 16M --kv-offload-dir "$dir"
if [ -z "$port" ]; then
	not_ok "engine with --kv-offload-bytes and --kv-offload-dir serves"
	cat "$work/a.log"
	summary
	exit
fi
first="$(ask 1)"
ask 2 240 >/dev/null # 240 + 8 tokens: all 16 blocks of the pool, so prompt 1 is evicted
# The offload thread takes prompt 1's 12 full blocks into tier 2; an idle engine refreshes the
# offload counters every second.
for _ in $(seq 1 $((20 * e2e_slow))); do
	v="$(metric cinfer_kv_offload_stored_blocks_total host)"
	[ "${v%.*}" -ge 12 ] 2>/dev/null && break
	sleep 0.5
done
again="$(ask 1)"
echo "# first: $first; again: $again"
check "prompt 1 computed the first time" [ "${first%% *}" = 0 ]
check "prompt 1 again: 192 cached tokens from the offload tiers" [ "${again%% *}" = 192 ]
check "the same text either way" [ "${first#* }" = "${again#* }" ]
check "metrics: 192 tokens hit in tier 2 (host)" [ "$(metric cinfer_kv_offload_hit_tokens_total host)" = 192 ]
# Tier 3 takes a block seen twice: prompt 1's blocks, loaded back from tier 2, are written now.
for _ in $(seq 1 $((20 * e2e_slow))); do
	[ "$(metric cinfer_kv_offload_stored_blocks_total disk)" = 0 ] || break
	sleep 0.5
done
check "metrics: blocks reused from tier 2 stored in tier 3 (disk)" \
	bash -c '[ "${0%.*}" -gt 0 ]' "$(metric cinfer_kv_offload_stored_blocks_total disk)"
# The block events a router reads name every tier: the snapshot lists the offloaded blocks too.
events "$work/ev-a.txt"
check "block events: the snapshot lists blocks in tier 2 (\"tier\":\"host\")" \
	grep -q '"type":"stored".*"tier":"host"' "$work/ev-a.txt"
check "block events: and the blocks written to tier 3 (\"tier\":\"disk\")" \
	grep -q '"type":"stored".*"tier":"disk"' "$work/ev-a.txt"
stop

start "$work/b.log" --kv-offload-dir "$dir"
events "$work/ev-b.txt"
check "block events: a cold engine lists the shared directory's blocks as tier 3, none in its pool" \
	python3 -c 'import json,sys
n = {}
for line in open(sys.argv[1]):
    try: e = json.loads(line)
    except ValueError: continue  # the line the 2 s cut
    if e["type"] == "stored": n[e["tier"]] = n.get(e["tier"], 0) + len(e["hashes"])
sys.exit(not (n.get("disk", 0) >= 12 and n.get("device", 0) == 0))' "$work/ev-b.txt"
cold="$(ask 1)"
echo "# cold engine on the same directory: $cold"
check "a cold engine on the shared directory serves 192 cached tokens" [ "${cold%% *}" = 192 ]
check "the same text from tier 3" [ "${cold#* }" = "${first#* }" ]
check "metrics: 192 tokens hit in tier 3 (disk)" [ "$(metric cinfer_kv_offload_hit_tokens_total disk)" = 192 ]
three="$(ask 3)" # computed, and still in the pool when the engine stops
stop # a graceful stop offers the pool's cached blocks to the tiers

start "$work/b2.log" --kv-offload-dir "$dir"
restarted="$(ask 3)"
check "after a graceful stop, the next engine finds the pool's prefixes" [ "${restarted%% *}" = 192 ]
check "with the same text" [ "${restarted#* }" = "${three#* }" ]
stop

for f in "$dir"/*.kvb; do printf 'X' | dd of="$f" bs=1 seek=500 conv=notrunc status=none; done
start "$work/c.log" --kv-offload-dir "$dir"
bad="$(ask 1)"
echo "# damaged files: $bad"
check "damaged block files are recomputed, not served" [ "${bad%% *}" = 0 ]
check "the same text after recomputing" [ "${bad#* }" = "${first#* }" ]
check "the log names the damaged file" grep -q "failed its check" "$work/c.log"
stop
summary
