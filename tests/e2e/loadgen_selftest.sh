#!/usr/bin/env bash
# Self-test of hack/loadgen against a fake OpenAI SSE server (tests/e2e/loadgen_fixtures/
# fake_openai_server.py: max_tokens chunks with small delays, usage with cached_tokens from an exact
# block prefix cache, misbehaving requests chosen by seed): request and token counts, latency ordering,
# prefix hit rate against the known answer, failure accounting and exit codes, the JSON report, /metrics
# deltas, Ctrl-C, trace replay (a fixture, and the real ../shared traces when present), usage errors and
# --help. The parsers' malformed-input unit tests run first, one check each. Takes about 10 s.
# Ends with exactly one line: loadgen_selftest: N passed, M failed
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

loadgen="$e2e_root/hack/loadgen"
fixtures="$e2e_root/tests/e2e/loadgen_fixtures"
shared="${CINFER_SHARED:-$e2e_root/../shared}"
traces="$shared/traces"
tmp="$(mktemp -d)"
server_pids=()
export PYTHONDONTWRITEBYTECODE=1 # importing hack/loadgen in the unit tests must not leave __pycache__

cleanup() {
	local p
	for p in "${server_pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

# start_server NAME [server flags...]: starts a fake server logging requests to $tmp/NAME.log;
# sets url.
start_server() {
	local name="$1"
	shift
	python3 "$fixtures/fake_openai_server.py" --port-file "$tmp/$name.port" --log "$tmp/$name.log" "$@" \
		2>"$tmp/$name.stderr" &
	server_pids+=($!)
	: >"$tmp/$name.log"
	if ! wait_for 10 test -s "$tmp/$name.port"; then
		not_ok "fake server $name started: $(cat "$tmp/$name.stderr")"
		return 1
	fi
	url="http://127.0.0.1:$(cat "$tmp/$name.port")"
}

# lg NAME [loadgen flags...]: runs loadgen with stdout, stderr and exit status in $tmp/NAME.{out,err,rc}.
lg() {
	local name="$1"
	shift
	"$loadgen" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
	echo $? >"$tmp/$name.rc"
}

# rc_is NAME WANT: the exit status of run NAME was WANT.
rc_is() {
	local got
	got="$(cat "$tmp/$1.rc")"
	[ "$got" = "$2" ] || {
		echo "exit status $got, want $2"
		tail -n 20 "$tmp/$1.out" "$tmp/$1.err"
		return 1
	}
}

# jcheck NAME FILE EXPR: queues a check that the Python expression EXPR holds for the JSON document in
# FILE (bound to r); jflush runs the queued ones in one python3 (one per check would dominate the run
# time of this script on a loaded machine) and reports each in queue order.
j_names=() j_files=() j_exprs=()
jcheck() {
	j_names+=("$1") j_files+=("$2") j_exprs+=("$3")
}
jflush() {
	local args=() i line
	for i in "${!j_names[@]}"; do args+=("${j_names[$i]}" "${j_files[$i]}" "${j_exprs[$i]}"); done
	j_names=() j_files=() j_exprs=()
	[ ${#args[@]} -gt 0 ] || return 0
	while IFS= read -r line; do
		case "$line" in
		"ok "*) ok "${line#ok }" ;;
		"not_ok "*) not_ok "${line#not_ok }" ;;
		*) echo "    $line" ;;
		esac
	done < <(python3 - "${args[@]}" <<'EOF'
import json, sys
args = sys.argv[1:]
for name, path, expr in zip(args[::3], args[1::3], args[2::3]):
    r = None
    try:
        with open(path) as f:
            r = json.load(f)
        # The expression is written in the test script, not read from any input.
        good, why = bool(eval(f"({expr})", {"r": r})), "false"
    except Exception as e:  # a missing file or key fails this check only
        good, why = False, f"{type(e).__name__}: {e}"
    print(f"ok {name}" if good else f"not_ok {name}")
    if not good:
        print(f"{why}: {' '.join(expr.split())}")
        for line in json.dumps(r, indent=1, sort_keys=True)[:2000].splitlines():
            print(line)
EOF
	)
}

# no_traceback NAME: loadgen reported its trouble in words, not with a Python traceback.
no_traceback() {
	! grep -q Traceback "$tmp/$1.err" "$tmp/$1.out" || {
		cat "$tmp/$1.err"
		return 1
	}
}

# --- unit tests of the parsers: one check per test ------------------------------------------------
(cd "$fixtures" && python3 -m unittest -v test_loadgen_units) >"$tmp/units.txt" 2>&1
units=0
while read -r line; do
	case "$line" in
	*" ... ok") ok "unit: ${line%% ...*}" ;;
	*" ... FAIL" | *" ... ERROR") not_ok "unit: ${line%% ...*}" ;;
	*) continue ;;
	esac
	units=$((units + 1))
done <"$tmp/units.txt"
if [ "$units" -lt 30 ] || ! grep -q '^OK$' "$tmp/units.txt"; then
	not_ok "unit tests ran and passed ($units found)"
	sed 's/^/    /' "$tmp/units.txt" | tail -n 40
fi

# --- --help and usage errors ---------------------------------------------------------------------
lg help --help
check "--help exits 0" rc_is help 0
help_documents_every_flag() {
	local flag missing=()
	for flag in --url --concurrency --requests --prompt-tokens --max-tokens --vocab --shared-prefix-tokens \
		--seed --model --warmup --trace --format --time-scale --token-scale --max-prompt-tokens \
		--max-requests --start-offset --json --metrics --timeout --dry-run; do
		grep -q -- "$flag" "$tmp/help.out" || missing+=("$flag")
	done
	grep -q '^examples:' "$tmp/help.out" || missing+=("examples")
	grep -q '^exit status:' "$tmp/help.out" || missing+=("exit status")
	[ ${#missing[@]} -eq 0 ] || {
		echo "missing from --help: ${missing[*]}"
		return 1
	}
}
check "--help documents every flag, examples and exit statuses" help_documents_every_flag

usage_error() { # usage_error NAME PATTERN FLAGS...: exit status 2 and PATTERN on stderr
	local name="$1" pattern="$2"
	shift 2
	lg "$name" "$@"
	rc_is "$name" 2 && no_traceback "$name" || return 1
	if ! grep -q -- "$pattern" "$tmp/$name.err"; then
		cat "$tmp/$name.err"
		return 1
	fi
}
check "unknown flag: exit 2" usage_error u1 "unrecognized arguments" --bogus
check "--prompt-tokens 0: exit 2" usage_error u2 "must be at least 1" --prompt-tokens 0 --dry-run
check "shared prefix longer than the prompt: exit 2" usage_error u3 "cannot exceed" \
	--prompt-tokens 8 --shared-prefix-tokens 9 --dry-run
check "--url ftp://: exit 2" usage_error u4 "expected http://" --url ftp://x:1 --requests 1
check "--time-scale -1: exit 2" usage_error u5 "positive number" --trace x.csv --time-scale -1
check "trace flag without --trace: exit 2" usage_error u6 "only apply with --trace" --max-requests 3
check "closed-loop flag with --trace: exit 2" usage_error u6b "only apply to the closed loop" \
	--trace x.csv --requests 3
check "missing trace file: exit 2" usage_error u7 "No such file" --trace "$tmp/none.csv" --dry-run
printf 'TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00.1,10,2\n2023-11-16 18:00:01,ten,2\n' \
	>"$tmp/bad.csv"
check "malformed Azure row: exit 2 naming line 3" usage_error u8 "bad.csv:3: ContextTokens 'ten'" \
	--trace "$tmp/bad.csv" --dry-run
printf '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1,\n' >"$tmp/bad.jsonl"
check "malformed Mooncake line: exit 2 naming line 2" usage_error u9 "bad.jsonl:2:" \
	--trace "$tmp/bad.jsonl" --dry-run

# --- closed loop against a well-behaved server -----------------------------------------------------
start_server good --ttft-ms 5 --chunk-delay-ms 2 || {
	summary
	exit
}
good_url="$url"
# 20 requests of 64 ids whose first 32 are shared: every request but the first finds those 32 ids (two
# 16-id blocks) cached, so the hit rate is 19 * 32 / (20 * 64) = 0.475 whatever the interleaving.
lg closed --url "$url" --concurrency 4 --requests 20 --prompt-tokens 64 --shared-prefix-tokens 32 \
	--max-tokens 8 --seed 100 --json "$tmp/closed.json"
check "closed loop: exit 0" rc_is closed 0
jcheck "closed loop: 20 ok, 0 failed, 160 tokens" "$tmp/closed.json" \
	'r["requests_ok"] == 20 and r["requests_failed"] == 0 and r["generated_tokens"] == 160'
jcheck "closed loop: prefix hit rate 0.475 from usage" "$tmp/closed.json" \
	'abs(r["prefix_hit_rate"] - 0.475) < 1e-9 and r["cached_tokens"] == 608 and r["prompt_tokens"] == 1280'
jcheck "closed loop: TTFT p50 <= p90 <= p99, at least the server's 5 ms" "$tmp/closed.json" \
	'5 <= r["ttft_ms"]["p50"] <= r["ttft_ms"]["p90"] <= r["ttft_ms"]["p99"] and r["ttft_ms"]["count"] == 20'
jcheck "closed loop: 7 inter-token gaps per request, at least the server's 2 ms" "$tmp/closed.json" \
	'r["itl_ms"]["count"] == 140 and 2 <= r["itl_ms"]["p50"] <= r["itl_ms"]["p99"]
	 and r["content_chunks"] == 160'
jcheck "closed loop: e2e p50 <= p99 and above TTFT" "$tmp/closed.json" \
	'r["ttft_ms"]["p50"] < r["e2e_ms"]["p50"] <= r["e2e_ms"]["p99"]'
jcheck "closed loop: throughput = tokens / wall" "$tmp/closed.json" \
	'r["wall_s"] > 0 and abs(r["tokens_per_s"] - 160 / r["wall_s"]) < 1e-6 and r["requests_per_s"] > 0'
jcheck "JSON report has every field" "$tmp/closed.json" \
	'all(k in r for k in ("requests_ok", "requests_failed", "failed_by", "wall_s", "tokens_per_s",
	 "requests_per_s", "ttft_ms", "itl_ms", "e2e_ms", "prefix_hit_rate", "errors", "finish_reasons",
	 "config", "interrupted")) and r["finish_reasons"] == {"length": 20} and r["errors"] == []
	 and r["interrupted"] is False and r["config"]["mode"] == "closed"'
text_report() {
	local want
	for want in '^requests: *20 ok, 0 failed' '^TTFT ms: *p50 [0-9.]* *p90 [0-9.]* *p99 [0-9.]*' \
		'^ITL ms: *p50 [0-9.]* *p99 [0-9.]*' '^prefix hit rate: *47.5 %' '^errors: *none'; do
		if ! grep -q "$want" "$tmp/closed.out"; then
			echo "no line matching $want in:"
			cat "$tmp/closed.out"
			return 1
		fi
	done
}
check "text report on stdout" text_report
requests_as_specified() {
	python3 - "$tmp/good.log" <<'EOF'
import json, sys
reqs = [json.loads(line) for line in open(sys.argv[1])]
assert len(reqs) == 20, len(reqs)
assert sorted(q["seed"] for q in reqs) == list(range(100, 120))
for q in reqs:
    assert q["stream"] is True and q["ignore_eos"] is True and q["max_tokens"] == 8, q
    assert q["stream_options"] == {"include_usage": True} and "model" not in q, q
    assert len(q["prompt"]) == 64 and all(3 <= t < 512 for t in q["prompt"]), q["prompt"]
assert len({tuple(q["prompt"][:32]) for q in reqs}) == 1, "shared prefix differs"
assert len({tuple(q["prompt"][32:]) for q in reqs}) == 20, "private parts repeat"
EOF
}
check "requests: token ids in [3, 512), 32 shared ids, distinct tails, seeds SEED+i" requests_as_specified

# The same seed again gives the same prompts; another seed other ones, with --vocab and --model applied.
mv "$tmp/good.log" "$tmp/closed.log"
: >"$tmp/good.log"
lg again --url "$url" --concurrency 2 --requests 20 --prompt-tokens 64 --shared-prefix-tokens 32 \
	--max-tokens 8 --seed 100
mv "$tmp/good.log" "$tmp/again.log"
: >"$tmp/good.log"
lg other --url "$url" --requests 3 --prompt-tokens 64 --max-tokens 2 --seed 7 --vocab 32000 --model m1
prompts_by_seed() {
	python3 - "$tmp/closed.log" "$tmp/again.log" "$tmp/good.log" <<'EOF'
import json, sys
def prompts(path):
    return {q["seed"]: q["prompt"] for q in map(json.loads, open(path))}
first, again, other = map(prompts, sys.argv[1:])
assert first == again, "same seed, different prompts"
assert len(other) == 3 and all(max(p) >= 512 for p in other.values()), "--vocab 32000 ignored"
assert not set(map(tuple, first.values())) & set(map(tuple, other.values())), "other seed, same prompts"
assert all(json.loads(line)["model"] == "m1" for line in open(sys.argv[3])), "--model ignored"
EOF
}
check "same seed: same prompts; other seed: other prompts; --vocab and --model sent" prompts_by_seed

# --metrics: the server's own counters move by what the run sent.
lg metrics --url "$url" --requests 6 --prompt-tokens 48 --shared-prefix-tokens 16 --max-tokens 2 \
	--seed 500 --metrics --json "$tmp/metrics.json"
check "--metrics: exit 0" rc_is metrics 0
jcheck "--metrics: counter deltas match the run (6 requests, 288 queried, 80 hit)" "$tmp/metrics.json" \
	'r["metrics"]["delta"]["cinfer_requests_total"] == 6
	 and r["metrics"]["delta"]["cinfer_prefix_cache_queries_total"] == 288
	 and r["metrics"]["delta"]["cinfer_prefix_cache_hits_total"] == 80
	 and r["metrics"]["delta"]["cinfer_preemptions_total"] == 0
	 and abs(r["metrics"]["prefix_hit_rate"] - r["prefix_hit_rate"]) < 1e-9'
check "--metrics: deltas in the text report" grep -q 'prefix_cache_hits_total +80' "$tmp/metrics.out"

# --warmup: warmup requests are sent but not counted.
: >"$tmp/good.log"
lg warm --url "$url" --requests 4 --warmup 3 --max-tokens 2 --json "$tmp/warm.json"
warmup_sent() {
	if [ "$(wc -l <"$tmp/good.log")" -ne 7 ] || ! grep -q 'warmup: 3 requests, 0 failed' "$tmp/warm.err"; then
		echo "$(wc -l <"$tmp/good.log") requests sent"
		cat "$tmp/warm.err"
		return 1
	fi
}
check "--warmup 3: 7 sent, the warmup line on stderr" warmup_sent
jcheck "--warmup 3: report counts the measured 4" "$tmp/warm.json" \
	'r["requests_ok"] == 4 and r["requests_planned"] == 4'

jflush

# --- failure accounting ----------------------------------------------------------------------------
start_server bad --ttft-ms 1 --chunk-delay-ms 1 --misbehave 3:429 --misbehave 4:429 --misbehave 5:drop \
	--misbehave 6:badjson --misbehave 7:badchunk --misbehave 8:badstatus --misbehave 9:errorevent \
	--misbehave 10:nousage --misbehave 11:503 --misbehave 12:stall
lg fail --url "$url" --concurrency 3 --requests 12 --max-tokens 4 --seed 1 --timeout 1 --json "$tmp/fail.json"
check "some failed: exit 1" rc_is fail 1
jcheck "failures: 9 failed, 3 ok (one without usage), nothing lost" "$tmp/fail.json" \
	'r["requests_failed"] == 9 and r["requests_ok"] == 3 and r["ok_without_usage"] == 1
	 and r["requests_done"] == 12 and r["generated_tokens"] == 12'
jcheck "failures grouped by status and error" "$tmp/fail.json" \
	'r["failed_by"] == {"429": 2, "503": 1, "truncated response": 1, "bad SSE event": 1,
	 "bad chunked body": 1, "bad response head": 1, "stream error server_error": 1, "timeout": 1}'
jcheck "429 group: count 2, the server message and Retry-After" "$tmp/fail.json" \
	'r["errors"][0]["error"] == "http 429 rate_limit_error" and r["errors"][0]["count"] == 2
	 and "Retry-After: 1" in r["errors"][0]["example"] and "fake 429" in r["errors"][0]["example"]'
jcheck "stalled request fails as a timeout" "$tmp/fail.json" \
	'any(e["error"] == "timeout" and "1 s" in e["example"] for e in r["errors"])'
jcheck "hit rate counts only answers that carried usage" "$tmp/fail.json" \
	'r["prompt_tokens"] == 2 * 64'
check "failures: errors listed in the text report" grep -q '2 x http 429 rate_limit_error: fake 429' \
	"$tmp/fail.out"
check "failures: no traceback" no_traceback fail

lg allbad --url "$url" --requests 2 --max-tokens 2 --seed 3 --json "$tmp/allbad.json"
check "every request failed: exit 1" rc_is allbad 1
refused_port="$(free_port)" # nothing listens there
lg refused --url "http://127.0.0.1:$refused_port" --concurrency 2 --requests 5 --json "$tmp/refused.json"
jcheck "connection refused: exit 1, counted, not fatal" "$tmp/refused.json" \
	'r["requests_failed"] == 5 and r["failed_by"] == {"connect: connection refused": 5}'
check "connection refused: no traceback" no_traceback refused

jflush

# --- Ctrl-C ----------------------------------------------------------------------------------------
# Interrupted once the server has received 5 requests: with 2 clients, at least 3 have been answered.
: >"$tmp/good.log"
"$loadgen" --url "$good_url" --concurrency 2 --requests 100000 \
	--max-tokens 20 --json "$tmp/int.json" >"$tmp/int.out" 2>"$tmp/int.err" &
lg_pid=$!
logged_at_least() { [ "$(wc -l <"$tmp/good.log")" -ge "$1" ]; }
wait_for 10 logged_at_least 5
kill -INT "$lg_pid"
wait "$lg_pid"
echo $? >"$tmp/int.rc"
check "Ctrl-C: exit 130" rc_is int 130
jcheck "Ctrl-C: partial report printed and written" "$tmp/int.json" \
	'r["interrupted"] is True and 0 < r["requests_ok"] < 100000 and r["requests_failed"] == 0'
check "Ctrl-C: text report says partial" grep -q 'INTERRUPTED: partial' "$tmp/int.out"

jflush

# --- trace replay: a fixture with known prefix sharing ---------------------------------------------
# token-scale 1/32 turns each 512-token hash block into 16 ids, the fake server's block: the server's
# cache then finds exactly the ideal leading-block hits, 112 of 272 prompt tokens.
mini="$fixtures/mini_mooncake.jsonl"
lg minidry --trace "$mini" --token-scale 0.03125 --time-scale 2 --dry-run --json "$tmp/minidry.json"
jcheck "fixture dry run: 5 requests over 0.4 s, ideal hit rate 112/272" "$tmp/minidry.json" \
	'r["requests"] == 5 and abs(r["span_s"] - 0.4) < 1e-9 and r["prompt_tokens"] == 272
	 and abs(r["ideal_prefix_hit_rate"] - 112 / 272) < 1e-9'
: >"$tmp/good.log"
lg mini --url "$good_url" --trace "$mini" --token-scale 0.03125 --time-scale 2 --metrics --json "$tmp/mini.json"
jcheck "fixture replay: exit 0, 5 ok, 3 tokens each" "$tmp/mini.json" \
	'r["requests_ok"] == 5 and r["generated_tokens"] == 15 and r["config"]["mode"] == "trace"'
jcheck "fixture replay: equal hash ids gave equal blocks (hit rate 112/272)" "$tmp/mini.json" \
	'r["cached_tokens"] == 112 and r["prompt_tokens"] == 272
	 and abs(r["metrics"]["prefix_hit_rate"] - 112 / 272) < 1e-9'
jcheck "fixture replay: sent on schedule (wall >= 0.4 s, send lag reported)" "$tmp/mini.json" \
	'r["wall_s"] >= 0.4 and r["send_lag_ms"]["count"] == 5'
# --concurrency 1 in trace mode: one request in flight, so the later ones leave late (by at least the
# four requests before them, 9 ms each at the server's delays) and the lag says so.
lg miniserial --url "$good_url" --trace "$mini" --token-scale 0.03125 --time-scale 1000 --concurrency 1 \
	--json "$tmp/miniserial.json"
jcheck "trace --concurrency 1: all ok, the wait shows as send lag" "$tmp/miniserial.json" \
	'r["requests_ok"] == 5 and r["send_lag_ms"]["max"] >= 30 and r["config"]["concurrency"] == 1'
lg minicap --trace "$mini" --token-scale 0.03125 --max-tokens 2 --max-prompt-tokens 40 --dry-run \
	--json "$tmp/minicap.json"
jcheck "fixture: --max-tokens caps outputs, --max-prompt-tokens caps prompts" "$tmp/minicap.json" \
	'r["output_tokens"] == 10 and r["max_prompt_tokens"] == 40 and r["prompt_tokens"] == 40 * 4 + 32'

jflush

# --- the real traces in ../shared ------------------------------------------------------------------
if [ -r "$traces/AzureLLMInferenceTrace_conv.csv" ] && [ -r "$traces/mooncake_conversation_trace.jsonl" ] &&
	[ -r "$traces/mooncake_synthetic_trace.jsonl" ]; then
	# The numbers traces/SOURCE.md documents for each file.
	lg azdry --trace "$traces/AzureLLMInferenceTrace_conv.csv" --dry-run --json "$tmp/azdry.json"
	jcheck "Azure conv trace: 19366 requests over 3501.7 s" "$tmp/azdry.json" \
		'r["requests"] == 19366 and round(r["span_s"], 1) == 3501.7 and r["max_prompt_tokens"] == 14050'
	lg mcdry --trace "$traces/mooncake_conversation_trace.jsonl" --dry-run --json "$tmp/mcdry.json"
	jcheck "Mooncake conversation: 12031 requests, ideal prefix hit rate 37.4 % of tokens" \
		"$tmp/mcdry.json" 'r["requests"] == 12031 and round(r["ideal_prefix_hit_rate"], 3) == 0.374'
	lg msdry --trace "$traces/mooncake_synthetic_trace.jsonl" --dry-run --json "$tmp/msdry.json"
	jcheck "Mooncake synthetic: 3993 requests, ideal prefix hit rate 65.1 % of tokens" \
		"$tmp/msdry.json" 'r["requests"] == 3993 and round(r["ideal_prefix_hit_rate"], 3) == 0.651'
	lg azoff --trace "$traces/AzureLLMInferenceTrace_conv.csv" --start-offset 600 --max-requests 50 \
		--dry-run --json "$tmp/azoff.json"
	jcheck "Azure: --start-offset 600 --max-requests 50" "$tmp/azoff.json" \
		'r["requests"] == 50 and r["span_s"] < 60'

	lg azrun --url "$good_url" --trace "$traces/AzureLLMInferenceTrace_conv.csv" --max-requests 30 \
		--time-scale 200 --token-scale 0.02 --max-prompt-tokens 64 --max-tokens 4 --seed 900 --json "$tmp/azrun.json"
	jcheck "Azure replay (30 requests, 200x): exit 0, all ok" "$tmp/azrun.json" \
		'r["requests_ok"] == 30 and r["requests_failed"] == 0 and r["config"]["format"] == "azure"'
	lg mcrun --url "$good_url" --trace "$traces/mooncake_conversation_trace.jsonl" --max-requests 40 \
		--time-scale 100 --token-scale 0.03125 --max-prompt-tokens 256 --max-tokens 4 --seed 900 --json "$tmp/mcrun.json"
	jcheck "Mooncake replay (40 requests, 100x): exit 0, shared hash blocks hit the cache" \
		"$tmp/mcrun.json" 'r["requests_ok"] == 40 and r["prefix_hit_rate"] > 0.05'
else
	echo "SKIP: $traces not present (shared trace data is optional): real-trace checks skipped"
fi

jflush
summary
