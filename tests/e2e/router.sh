#!/usr/bin/env bash
# cinfer-router in --target mode in front of three REAL `cinfer-engine serve` processes on loopback
# (stories260K), checked from the outside (router_checks.py, OpenAI SDK and raw HTTP): shared
# prefixes land on the replica that holds them and report cached tokens the router predicted
# exactly; unrelated load spreads evenly; a hot prefix spills over under the bounded-load guard;
# the OpenAI SDK works as against an engine; malformed requests get the engine's own errors; a
# client leaving mid-stream cancels the engine's request; an engine killed under load fails only
# the requests that were already streaming from it (the others are retried on another replica); a
# restarted router rebuilds its index from the engines; a model with no engine up holds requests
# until one starts, then times out with 503 + Retry-After. Skips when stories260K is absent.
set -uo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

here="$(cd "$(dirname "$0")" && pwd)"
model="${CINFER_SHARED:-$e2e_root/../shared}/models/tinyllamas/stories260K.gguf"
py="${CINFER_VENV:-$e2e_root/build/venv}/bin/python"
engine_pids=()
router_pid=""
lg_pid=""
work=""
cleanup_extra() {
	local p
	for p in "${engine_pids[@]}" $router_pid $lg_pid ${hot_pid:-}; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	[[ -z "$work" ]] || rm -rf "$work"
}
trap 'cleanup_extra' EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

if [ ! -r "$model" ]; then
	echo "SKIP: $model not present (shared test data is optional)"
	summary
	exit
fi
for b in cinfer-engine cinfer-router; do
	if [ ! -x "$e2e_bin/$b" ]; then
		not_ok "binary $e2e_bin/$b not built"
		summary
		exit 1
	fi
done
if [ ! -x "$py" ]; then
	not_ok "python venv $py missing (make venv)"
	summary
	exit 1
fi
work="$(mktemp -d /tmp/cinfer-router-e2e.XXXXXX)"
step() { echo "# $(date +%T) $*"; }

# run_py GROUP [ROUTER_PORT PROBE_PORT]: one group of router_checks.py; its ok/not ok lines join
# the counts.
run_py() {
	local rc n_ok n_bad
	ENGINE_SERVE_SLOW="$e2e_slow" ROUTER_ENGINE_BIN="$e2e_bin/cinfer-engine" ROUTER_MODEL_PATH="$model" \
		ROUTER_COLD_LOG="$work/cold.log" PYTHONPATH="$here" \
		timeout --kill-after=5 $((300 * e2e_slow)) "$py" "$here/router_checks.py" "$1" \
		"router=${2:-$router_port}" "probe=${3:-$probe_port}" "e0=${engine_ports[0]}" "e1=${engine_ports[1]}" \
		"e2=${engine_ports[2]}" "cold=$cold_port" >"$work/py.out" 2>&1
	rc=$?
	cat "$work/py.out"
	n_ok="$(grep -c '^ok - ' "$work/py.out")"
	n_bad="$(grep -c '^not ok - ' "$work/py.out")"
	passed=$((passed + n_ok))
	failed=$((failed + n_bad))
	if [ "$rc" -ne 0 ] && [ "$n_bad" -eq 0 ]; then not_ok "router_checks.py $1 exited $rc without a failed check"; fi
}

# --- three engines --------------------------------------------------------------------------------
engine_ports=()
start_engine() {
	"$e2e_bin/cinfer-engine" serve --model "$model" --host 127.0.0.1 --port "${engine_ports[$1]}" \
		--max-num-seqs 4 --threads 1 --log-format text >>"$work/engine$1.log" 2>&1 &
	engine_pids[$1]=$!
}
engine_healthy() { curl -sf "http://127.0.0.1:${engine_ports[$1]}/health" >/dev/null; }
step "starting 3 engines on $model"
urls=()
for i in 0 1 2; do
	engine_ports[i]="$(free_port)"
	start_engine "$i"
	urls+=("http://127.0.0.1:${engine_ports[i]}")
done
cold_port="$(free_port)"
never_port="$(free_port)"
targets="stories260K=$(IFS=,; echo "${urls[*]}"),cold=http://127.0.0.1:$cold_port,never=http://127.0.0.1:$never_port"
for i in 0 1 2; do check "engine $i healthy (port ${engine_ports[i]})" wait_for $((60 * e2e_slow)) engine_healthy "$i"; done

# --- the router -----------------------------------------------------------------------------------
router_port="$(free_port)"
probe_port="$(free_port)"
start_router() {
	"$e2e_bin/cinfer-router" --port "$router_port" --probe-addr "127.0.0.1:$probe_port" \
		--target "$targets" --health-interval 0.2 --hold-timeout $((2 * e2e_slow)) --log-format text \
		"$@" >>"$work/router.log" 2>&1 &
	router_pid=$!
}
# (the page is read whole first: a reader stopping early would fail the pipeline under pipefail)
router_metric() {
	local m
	m="$(curl -sf "http://127.0.0.1:$probe_port/metrics")" && awk -v n="$1" 'index($0, n) == 1 {print $2; exit}' <<<"$m"
}
# Requests the router has sent upstream, over every replica and attempt.
routed_total() {
	curl -sf "http://127.0.0.1:$probe_port/metrics" |
		awk 'index($0, "cinfer_router_upstream_requests_total{") == 1 {n += $NF} END {printf "%d\n", n}'
}
routed_at_least() { [ "$(routed_total)" -ge "$1" ]; }
eligible_is() { [ "$(router_metric 'cinfer_router_replicas{model_name="stories260K",state="eligible"}')" = "$1" ]; }
tokenizer_loaded() { grep -q 'model tokenizer loaded model=stories260K' "$work/router.log"; }
step "router --target $targets"
start_router
check "router ready (/readyz)" wait_for 30 curl -sf "http://127.0.0.1:$probe_port/readyz"
check "router /healthz" curl -sf "http://127.0.0.1:$probe_port/healthz"
check "router sees 3 eligible replicas" wait_for 30 eligible_is 3
check "router loaded the model's tokenizer from an engine" wait_for 30 tokenizer_loaded
check "router /metrics exports the held-requests gauge" \
	[ "$(router_metric 'cinfer_router_requests_held{model_name="stories260K"}')" = 0 ]

run_py prefix
run_py spread
run_py sdk
run_py malformed
run_py disconnect

# --- a hot prefix, with only the bounded-load guard to spread it ---------------------------------
# A second router whose cost ignores load (--load-weight 0 --prefill-weight 0: neither requests
# nor queued prefill) would pile every request sharing a cached prefix onto one engine; the guard
# (--load-factor 1.25, --load-floor 2) must not let it.
step "second router, --load-weight 0 --prefill-weight 0: the guard alone"
hot_port="$(free_port)"
hot_probe="$(free_port)"
"$e2e_bin/cinfer-router" --port "$hot_port" --probe-addr "127.0.0.1:$hot_probe" \
	--target "$(IFS=,; echo "stories260K=${urls[*]}")" --health-interval 0.2 --load-weight 0 \
	--prefill-weight 0 --load-floor 2 --log-format text >"$work/router-hot.log" 2>&1 &
hot_pid=$!
check "second router ready" wait_for 30 curl -sf "http://127.0.0.1:$hot_probe/readyz"
check "second router loaded the tokenizer" wait_for 30 grep -q 'model tokenizer loaded' "$work/router-hot.log"
run_py hot "$hot_port" "$hot_probe"
kill -TERM "$hot_pid"
wait "$hot_pid"
check "second router exits 0 on SIGTERM" [ $? -eq 0 ]

# --- an engine killed under load ----------------------------------------------------------------------
step "load through the router; engine 2 killed mid-load"
broken0="$(router_metric 'cinfer_router_upstream_broken_total{model_name="stories260K"}')"
routed0="$(routed_total)"
"$e2e_root/hack/loadgen" --url "http://127.0.0.1:$router_port" --model stories260K --concurrency 8 \
	--requests 600 --prompt-tokens 48 --max-tokens 64 --ignore-eos --timeout $((120 * e2e_slow)) \
	>"$work/loadgen.log" 2>&1 &
lg_pid=$!
# Kill once the load is under way (40 of its 600 requests sent), not after a fixed pause: on a
# quiet machine the whole load finished within 3 s, before the kill.
wait_for $((60 * e2e_slow)) routed_at_least $((routed0 + 40))
check "killed engine: the load is still running when the engine dies" kill -0 "$lg_pid"
kill -9 "${engine_pids[2]}"
wait "${engine_pids[2]}" 2>/dev/null
engine_pids[2]=""
wait "$lg_pid"
lg_rc=$?
lg_pid=""
broken1="$(router_metric 'cinfer_router_upstream_broken_total{model_name="stories260K"}')"
failed_n="$(awk '/^requests:/ {for (i = 1; i <= NF; i++) if ($i == "failed") print $(i - 1)}' "$work/loadgen.log" | tr -d ',')"
[ -n "$failed_n" ] || failed_n="$(grep -oE '[0-9]+ failed' "$work/loadgen.log" | head -n1 | grep -oE '^[0-9]+')"
echo "# loadgen exit $lg_rc, failed ${failed_n:-?}; router broken streams $broken0 -> $broken1"
check "killed engine: loadgen finished its 600 requests" grep -q '^requests: .*of 600 planned' "$work/loadgen.log"
check "killed engine: every failed request had started streaming (failed == broken streams)" \
	bash -c "[ \"${failed_n:-x}\" = \"\$(( ${broken1%.*} - ${broken0%.*} ))\" ]"
check "killed engine: at most the requests streaming from it were cut (<= 8 clients)" bash -c "[ \"${failed_n:-99}\" -le 8 ]"
check "killed engine: the router stops using it (2 eligible)" wait_for 10 eligible_is 2
retried="$(router_metric 'cinfer_router_retries_total{model_name="stories260K",reason="connect"}')"
check "killed engine: requests in its queue were retried on another replica (${retried:-0})" \
	[ "${retried%.*}" -ge 1 ]
step "engine 2 back"
start_engine 2
check "engine 2 healthy again" wait_for $((60 * e2e_slow)) engine_healthy 2
check "router uses it again (3 eligible)" wait_for 30 eligible_is 3

# --- router restart: index rebuilt from the engines ----------------------------------------------------
run_py warm
step "router restarted"
kill -TERM "$router_pid"
wait "$router_pid"
rc=$?
router_pid=""
check "router exits 0 on SIGTERM" [ "$rc" -eq 0 ]
start_router
check "restarted router ready" wait_for 30 curl -sf "http://127.0.0.1:$probe_port/readyz"
check "restarted router sees 3 eligible replicas" wait_for 30 eligible_is 3
check "restarted router loaded the tokenizer" wait_for 30 bash -c \
	"[ \"\$(grep -c 'model tokenizer loaded model=stories260K' $work/router.log)\" -ge 2 ]"
run_py rebuilt

# --- scale from zero, as the router sees it: hold until an engine is up ---------------------------------
run_py hold

# --- shutdown ---------------------------------------------------------------------------------------
kill -TERM "$router_pid"
wait "$router_pid"
rc=$?
router_pid=""
check "router exits 0 on SIGTERM (again)" [ "$rc" -eq 0 ]
for i in 0 1 2; do
	kill -TERM "${engine_pids[i]}"
	wait "${engine_pids[i]}"
done
engine_pids=()
check "no sanitizer reports in the router or engine logs" bash -c \
	'! grep -l "ERROR: AddressSanitizer\|runtime error:\|LeakSanitizer" "$0"/*.log' "$work"
if [ "$failed" -ne 0 ]; then
	for f in "$work"/router.log "$work"/engine*.log "$work"/loadgen.log "$work"/cold.log; do
		[ -f "$f" ] || continue
		echo "--- $f (last 30 lines)"
		tail -n 30 "$f"
	done
fi
summary
