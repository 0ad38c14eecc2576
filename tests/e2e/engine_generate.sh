#!/usr/bin/env bash
# End-to-end checks of `cinfer-engine generate` and `cinfer-engine bench` on the stories260K models
# against llama.cpp's greedy continuations (../shared/testdata/llamacpp, see its README): text prompts
# through the tokenizer, token-id prompts, EOS handling, seeding, errors. Skips (passing nothing) when
# the shared data is absent. Ends with exactly one line: engine_generate: N passed, M failed
set -uo pipefail

# shellcheck source=tests/e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

root="$e2e_root"
bin="${CINFER_ENGINE_BIN:-$e2e_bin/cinfer-engine}"
shared="${CINFER_SHARED:-$root/../shared}"
models="$shared/models/tinyllamas"
refs="$shared/testdata/llamacpp"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

if [ ! -r "$models/stories260K.gguf" ] || [ ! -r "$refs/stories260K-F32.p1.json" ]; then
	echo "SKIP: $models or $refs not present (shared test data is optional)"
	finish
fi
if [ ! -x "$bin" ]; then
	not_ok "binary $bin not built"
	finish
fi

gen() { "$bin" generate --threads 2 --log-format text "$@" 2>"$tmp/stderr"; }

# The brief's check: empty prompt (BOS only), 100 greedy tokens == llama.cpp's text, byte for byte.
want="$(jq -j .greedy_text "$refs/stories260K-F32.p1.json")"
if gen --model "$models/stories260K.gguf" --prompt "" --max-tokens 100 --temperature 0 \
	>"$tmp/out"; then
	if [ "$(cat "$tmp/out")" == "$want" ] && [ "$(wc -c <"$tmp/out")" -eq "$(printf %s "$want" | wc -c)" ]; then
		ok "empty prompt: greedy text identical to llama.cpp"
	else
		not_ok "empty prompt: got '$(head -c 120 "$tmp/out")'"
	fi
else
	not_ok "empty prompt: exit status $? ($(tail -n 3 "$tmp/stderr"))"
fi
if grep -q "generated_tokens=100" "$tmp/stderr"; then
	ok "timings on stderr"
else
	not_ok "timings on stderr: $(tail -n 2 "$tmp/stderr")"
fi

# Text prompts through the tokenizer, and the same prompts as token ids.
for p in 0 2 3; do
	ref="$refs/stories260K-F32.p$p.json"
	prompt="$(jq -j .prompt "$ref")"
	want="$(jq -j .greedy_text "$ref")"
	n="$(jq '.greedy_tokens | length' "$ref")"
	got="$(gen --model "$models/stories260K.gguf" --prompt "$prompt" --max-tokens "$n" --temperature 0)"
	if [ "$got" == "$want" ]; then ok "p$p text prompt"; else not_ok "p$p text prompt: got '${got:0:80}'"; fi
	ids="$(jq -j '.prompt_tokens | map(tostring) | join(",")' "$ref")"
	want_ids="$(jq -j '.greedy_tokens | map(tostring) | join(",")' "$ref")"
	got="$(gen --model "$models/stories260K.gguf" --prompt-tokens "$ids" --max-tokens "$n" \
		--temperature 0 --output-ids)"
	if [ "$got" == "$want_ids" ]; then ok "p$p token-id prompt"; else not_ok "p$p token ids: got '${got:0:80}'"; fi
done

# Speculative decoding (prompt lookup): the same llama.cpp greedy tokens, in fewer steps (a fixed k:
# the adaptive controller may rightly find that proposals do not pay on a 260K model and make none);
# and the same sampled text as without it for a fixed seed (proposals are verified with the same draws).
ref="$refs/stories260K-F32.p2.json"
ids="$(jq -j '.prompt_tokens | map(tostring) | join(",")' "$ref")"
want_ids="$(jq -j '.greedy_tokens | map(tostring) | join(",")' "$ref")"
n="$(jq '.greedy_tokens | length' "$ref")"
got="$(gen --model "$models/stories260K.gguf" --prompt-tokens "$ids" --max-tokens "$n" \
	--temperature 0 --output-ids --spec ngram --ngram-min 1 --num-speculative-tokens 8 --no-spec-adaptive)"
if [ "$got" == "$want_ids" ] && grep -q "spec_accepted=[1-9]" "$tmp/stderr"; then
	ok "--spec ngram: greedy tokens identical to llama.cpp, proposals accepted"
else
	not_ok "--spec ngram: got '${got:0:80}' ($(tail -n 1 "$tmp/stderr"))"
fi
plain="$(gen --model "$models/stories260K.gguf" --prompt "Once upon a time" --max-tokens 80 --seed 7)"
spec="$(gen --model "$models/stories260K.gguf" --prompt "Once upon a time" --max-tokens 80 --seed 7 \
	--spec ngram --ngram-min 1)"
if [ -n "$plain" ] && [ "$plain" == "$spec" ]; then
	ok "--spec ngram: sampled text identical for a fixed seed"
else
	not_ok "--spec ngram sampled: '${plain:0:60}' vs '${spec:0:60}'"
fi
# Draft model (its Q8_0 copy drafting, a fixed k so that it speculates): llama.cpp's greedy tokens.
got="$(gen --model "$models/stories260K.gguf" --prompt-tokens "$ids" --max-tokens "$n" \
	--temperature 0 --output-ids --speculative draft --draft-model "$models/stories260K-Q8_0.gguf" \
	--no-spec-adaptive)"
if [ "$got" == "$want_ids" ] && grep -q "spec_accepted=[1-9]" "$tmp/stderr"; then
	ok "--speculative draft: greedy tokens identical to llama.cpp, proposals accepted"
else
	not_ok "--speculative draft: got '${got:0:80}' ($(tail -n 1 "$tmp/stderr"))"
fi
if gen --model "$models/stories260K.gguf" --prompt "x" --draft-model "$models/stories260K.gguf" \
	>/dev/null; then
	not_ok "--draft-model without --speculative draft accepted"
else
	ok "--draft-model without --speculative draft refused"
fi
smol="$models/../smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -f "$smol" ]; then
	if gen --model "$models/stories260K.gguf" --prompt "x" --speculative draft --draft-model "$smol" \
		>/dev/null || ! grep -q "vocabulary is not the target's: the draft has 49152 tokens" "$tmp/stderr"; then
		not_ok "a draft with another vocabulary: $(tail -n 1 "$tmp/stderr")"
	else
		ok "a draft with another vocabulary is a load error naming the mismatch"
	fi
fi
if gen --model "$models/stories260K.gguf" --prompt "x" --spec ngram --ngram-min 4 --ngram-max 2 \
	>/dev/null; then
	not_ok "--ngram-min above --ngram-max accepted"
else
	ok "--ngram-min above --ngram-max refused"
fi

# F16 model: same greedy continuation as llama.cpp's F16 run.
want="$(jq -j .greedy_text "$refs/stories260K-F16.p0.json")"
got="$(gen --model "$models/stories260K-F16.gguf" --prompt "Once upon a time" --max-tokens 100 --temperature 0)"
if [ "$got" == "$want" ]; then ok "F16 greedy text"; else not_ok "F16 greedy text: got '${got:0:80}'"; fi

# Sampling: the same seed gives the same text, another seed (almost surely) another one.
a="$(gen --model "$models/stories260K.gguf" --prompt "Once" --max-tokens 40 --temperature 1 --seed 7)"
b="$(gen --model "$models/stories260K.gguf" --prompt "Once" --max-tokens 40 --temperature 1 --seed 7)"
c="$(gen --model "$models/stories260K.gguf" --prompt "Once" --max-tokens 40 --temperature 1 --seed 8)"
if [ -n "$a" ] && [ "$a" == "$b" ]; then ok "same seed, same text"; else not_ok "same seed: '$a' vs '$b'"; fi
if [ "$a" != "$c" ]; then ok "different seed, different text"; else not_ok "seeds 7 and 8 gave '$a'"; fi

# --max-tokens bounds the output and the stop reason is reported (stories260K never emits EOS
# greedily within 400 tokens, so EOS stopping is not exercised here).
gen --model "$models/stories260K.gguf" --prompt-tokens 1 --max-tokens 37 --temperature 0 --output-ids >"$tmp/ids"
if [ "$(awk -F, '{print NF}' "$tmp/ids")" -eq 37 ] && grep -q "stop=max_tokens" "$tmp/stderr"; then
	ok "max-tokens respected"
else
	not_ok "max-tokens: $(cat "$tmp/ids"); $(tail -n 1 "$tmp/stderr")"
fi

# Errors: usage errors exit 2, runtime errors exit 1, each with a message on stderr.
expect_status() {
	local want="$1" name="$2"
	shift 2
	"$bin" "$@" >"$tmp/out" 2>"$tmp/err"
	local rc=$?
	if [ "$rc" -eq "$want" ] && [ -s "$tmp/err" ] && [ ! -s "$tmp/out" ]; then
		ok "$name (exit $rc: $(head -n 1 "$tmp/err" | cut -c1-100))"
	else
		not_ok "$name: exit $rc, want $want; stderr '$(head -n 1 "$tmp/err")'"
	fi
}
expect_status 2 "missing --model" generate --prompt hi
expect_status 2 "both prompt kinds" generate --model "$models/stories260K.gguf" --prompt a --prompt-tokens 1
expect_status 2 "bad token id" generate --model "$models/stories260K.gguf" --prompt-tokens 1,99999
expect_status 2 "malformed token list" generate --model "$models/stories260K.gguf" --prompt-tokens "1;2"
expect_status 1 "missing model file" generate --model "$tmp/nope.gguf" --prompt hi
printf 'GGUF\3\0\0\0garbage' >"$tmp/bad.gguf"
expect_status 1 "malformed model file" generate --model "$tmp/bad.gguf" --prompt hi
expect_status 2 "bench: bad batch list" bench --model "$models/stories260K.gguf" --batch 0,x
expect_status 2 "unknown KV cache type" generate --model "$models/stories260K.gguf" --prompt hi \
	--kv-type q4_0
# stories260K's heads are 8 wide: a Q8_0 cache needs whole blocks of 32, and says so.
if "$bin" generate --model "$models/stories260K.gguf" --prompt hi --kv-type q8_0 >/dev/null 2>"$tmp/err"; then
	not_ok "q8_0 cache on 8-wide heads: accepted"
elif grep -q "multiple of 32" "$tmp/err"; then
	ok "q8_0 cache on 8-wide heads: refused with the reason"
else
	not_ok "q8_0 cache on 8-wide heads: $(head -n 1 "$tmp/err")"
fi
# A Q8_0 cache on 64-wide heads (a generated model): generation runs and gives the requested tokens.
"$bin" gen-model --out "$tmp/h64.gguf" --type q8_0 --dim 128 --layers 2 --heads 2 --kv-heads 2 \
	--ffn 256 --vocab-size 300 --log-level error
if "$bin" generate --model "$tmp/h64.gguf" --prompt-tokens 1,5,9,200 --max-tokens 12 --temperature 0 \
	--kv-type q8_0 --log-format text >"$tmp/q8out" 2>"$tmp/err"; then
	ok "generate with a q8_0 KV cache"
else
	not_ok "generate with a q8_0 KV cache: $(tail -n 1 "$tmp/err")"
fi

# bench: one JSON line per configuration with the documented fields.
if "$bin" bench --model "$models/stories260K.gguf" --prompt-tokens 32 --gen-tokens 8 --batch 1,3 \
	--threads 2 --repetitions 1 --log-format text >"$tmp/bench" 2>"$tmp/err"; then
	n="$(grep -c '^{' "$tmp/bench")"
	good="$(grep '^{' "$tmp/bench" | jq -s 'map(select(.batch and .prompt_tokens == 32 and .pp_tok_s > 0 and .tg_tok_s > 0 and .rss_bytes > 0)) | length')"
	if [ "$n" -eq 2 ] && [ "$good" -eq 2 ]; then ok "bench JSON lines"; else not_ok "bench output: $(cat "$tmp/bench")"; fi
else
	not_ok "bench failed: $(tail -n 2 "$tmp/err")"
fi

# bench --depth: decoding sequences start from a prefilled context (reported in the JSON line).
expect_status 2 "bench: negative depth" bench --model "$models/stories260K.gguf" --depth -1
if "$bin" bench --model "$models/stories260K.gguf" --prompt-tokens 16 --gen-tokens 8 --batch 2 \
	--depth 40 --threads 2 --repetitions 1 --log-format text >"$tmp/bench" 2>"$tmp/err"; then
	good="$(grep '^{' "$tmp/bench" | jq -s 'map(select(.batch == 2 and .depth == 40 and .tg_tok_s > 0)) | length')"
	if [ "$good" -eq 1 ]; then ok "bench --depth"; else not_ok "bench --depth output: $(cat "$tmp/bench")"; fi
else
	not_ok "bench --depth failed: $(tail -n 2 "$tmp/err")"
fi

# bench --profile: per configuration, every op kind of a prefill and of a decode step, whose times
# add up to the step (what none accounts for is listed as unattributed, and is small).
if "$bin" bench --model "$models/stories260K.gguf" --prompt-tokens 16 --gen-tokens 8 --batch 2 \
	--threads 2 --repetitions 1 --profile --log-format text >"$tmp/bench" 2>"$tmp/err"; then
	rows="$(grep -cE '^#   (embed|norm|qkv|rope|kv_store|attention|attn_out|residual|ffn_gate_up|silu_mul|ffn_down|output) ' "$tmp/bench")"
	share="$(awk '/^#   [a-z_]+ / && $2 != "op" { gsub("%", "", $6); s += $6 } END { printf "%d", s + 0.5 }' "$tmp/bench")"
	if grep -q '^# profile, batch 2: prefill step' "$tmp/bench" && [ "$rows" -eq 12 ] &&
		[ "$share" -ge 99 ] && [ "$share" -le 101 ]; then
		ok "bench --profile"
	else
		not_ok "bench --profile output (rows $rows, decode shares sum to $share%): $(cat "$tmp/bench")"
	fi
else
	not_ok "bench --profile failed: $(tail -n 2 "$tmp/err")"
fi

# bench --speculative: the decode runs through the scheduler with the serve/generate speculation
# flags; each JSON line keeps the fields above and adds the acceptance of its timed runs.
expect_status 2 "bench: --draft-model without --speculative draft" bench \
	--model "$models/stories260K.gguf" --draft-model "$models/stories260K-Q8_0.gguf"
expect_status 2 "bench: --speculative with one generated token" bench \
	--model "$models/stories260K.gguf" --speculative ngram --gen-tokens 1
expect_status 2 "bench: --ngram-min above --ngram-max" bench --model "$models/stories260K.gguf" \
	--speculative ngram --ngram-min 4 --ngram-max 2
spec_json='map(select(.pp_tok_s > 0 and .tg_tok_s > 0 and .rss_bytes > 0 and .depth == 16
	and .speculative == $m and .num_speculative_tokens == 4 and .spec_adaptive == false
	and .spec_accepted <= .spec_proposed and .spec_tokens_per_step >= 1
	and (.spec_proposed == 0 or ((.spec_accept_rate - .spec_accepted / .spec_proposed) | fabs) < 1e-3)))'
for m in ngram draft; do
	extra=()
	[ "$m" == draft ] && extra=(--draft-model "$models/stories260K-Q8_0.gguf")
	if "$bin" bench --model "$models/stories260K.gguf" --prompt-tokens 16 --gen-tokens 48 --batch 1,4 \
		--depth 16 --threads 2 --repetitions 1 --speculative "$m" --num-speculative-tokens 4 \
		--no-spec-adaptive "${extra[@]}" --log-format text >"$tmp/bench" 2>"$tmp/err"; then
		good="$(grep '^{' "$tmp/bench" | jq -s --arg m "$m" "$spec_json | length")"
		acc="$(grep '^{' "$tmp/bench" | jq -s 'map(.spec_accepted) | add')"
		lines="$(grep -c "^# speculative $m, batch" "$tmp/bench")"
		if [ "$good" -eq 2 ] && [ "$lines" -eq 2 ] && [ "$acc" -gt 0 ]; then
			ok "bench --speculative $m: acceptance in the text and JSON output ($acc accepted)"
		else
			not_ok "bench --speculative $m output: $(cat "$tmp/bench")"
		fi
	else
		not_ok "bench --speculative $m failed: $(tail -n 2 "$tmp/err")"
	fi
done

finish
