#!/usr/bin/env bash
# The CUDA backend's check on a GPU host: the op-by-op suite against the CPU backend (and under
# compute-sanitizer memcheck when the host has it), then whole-model greedy generation on both
# backends compared token for token, on random-weight models made here with gen-model (so nothing
# large travels), then decode/prefill benchmarks into bench.json. Runs from a bundle made by hack/gpu-bundle.sh (bin/, lib/) or from a checkout
# whose build-cuda/ is built; writes everything to RESULTS_DIR and a one-line verdict per step to
# RESULTS_DIR/summary.txt. Exit status 0 only when every step passed.
#
#   hack/gpu-check.sh RESULTS_DIR          (bundle: ./gpu-check.sh RESULTS_DIR)
#
# What passing means: the op suite's "N passed, 0 failed" with nothing skipped (a skip here means
# no device was found), and equal greedy tokens where the model's top-2 margin is wide; random
# models have narrow margins, so a difference is reported with the first diverging position for a
# person to judge rather than hidden.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
res="${1:?usage: gpu-check.sh RESULTS_DIR}"
mkdir -p "$res"
res="$(cd "$res" && pwd)"
if [ -x "$here/bin/cinfer-engine" ]; then
	bin="$here/bin"
	suite="$bin/test_backend_cuda"
	export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
	root="$(cd "$here/.." && pwd)"
	bin="$root/build-cuda/bin"
	suite="$root/build-cuda/tests/engine/test_backend_cuda"
fi
engine="$bin/cinfer-engine"
# the generated models stay out of the results (they are large and made again in seconds)
work="$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")"
trap 'rm -rf "$work"' EXIT
status=0
say() { echo "$*" | tee -a "$res/summary.txt"; }
: >"$res/summary.txt"
t0=$(date +%s)

say "gpu-check: $(date -u +%FT%TZ) host $(hostname)"
if command -v nvidia-smi >/dev/null; then
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$res/gpu.txt" 2>&1
	say "gpu: $(head -n1 "$res/gpu.txt")"
else
	say "gpu: nvidia-smi not found"
fi

# 1. the op suite
CK_VERBOSITY=verbose CK_DEFAULT_TIMEOUT=600 timeout 420 "$suite" >"$res/op-suite.log" 2>&1
rc=$?
line=$(grep -E '^[0-9]+%: Checks:' "$res/op-suite.log" | tail -n1)
skips=$(grep -c '^SKIP:' "$res/op-suite.log")
if [ $rc -eq 0 ] && [ "$skips" -eq 0 ]; then
	say "op-suite: PASS ($line)"
else
	say "op-suite: FAIL rc=$rc skips=$skips ($line); see op-suite.log"
	status=1
fi
grep -h '"cuda backend"\|cuBLAS' "$res/op-suite.log" | head -n2 >>"$res/summary.txt"

# 2. compute-sanitizer memcheck over the op suite (the toolkit's; skipped where absent)
if command -v compute-sanitizer >/dev/null; then
	CK_DEFAULT_TIMEOUT=1200 CK_FORK=no timeout 300 compute-sanitizer --tool memcheck \
		--error-exitcode 9 "$suite" >"$res/memcheck.log" 2>&1
	rc=$?
	if [ $rc -eq 0 ]; then say "memcheck: PASS"; else
		say "memcheck: FAIL rc=$rc; see memcheck.log"
		status=1
	fi
else
	say "memcheck: SKIP (compute-sanitizer not on PATH)"
fi

# 3. whole model: greedy tokens on CPU and CUDA, per weight type and KV type
gen() { # name type kv args...
	local name="$1" type="$2" kv="$3"
	shift 3
	local m="$work/model-$name.gguf"
	[ -e "$m" ] || "$engine" gen-model --out "$m" --type "$type" "$@" >"$res/gen-$name.log" 2>&1 ||
		{
			say "generate $name: FAIL (gen-model; see gen-$name.log)"
			status=1
			return
		}
	local ids=() b
	for b in cpu cuda; do
		timeout 120 "$engine" generate --model "$m" --backend "$b" --kv-type "$kv" \
			--prompt-tokens 1,15,27,300,42,7,99,5 --max-tokens 48 --temperature 0 --ignore-eos \
			--output-ids --log-level warn >"$res/generate-$name-$b.txt" 2>"$res/generate-$name-$b.log"
		[ $? -eq 0 ] || {
			say "generate $name: FAIL ($b; see generate-$name-$b.log)"
			status=1
			return
		}
		ids+=("$(tr -d '\n' <"$res/generate-$name-$b.txt")")
	done
	if [ "${ids[0]}" = "${ids[1]}" ]; then
		say "generate $name kv=$kv: PASS (48 greedy tokens equal)"
	else
		local first
		first=$(paste -d' ' <(tr ',' '\n' <<<"${ids[0]}") <(tr ',' '\n' <<<"${ids[1]}") |
			awk '$1 != $2 { print NR - 1; exit }')
		say "generate $name kv=$kv: DIFF (first differing generated token at $first; cpu and cuda ids in generate-$name-*.txt)"
		status=1
	fi
}
small=(--dim 512 --layers 4 --heads 8 --kv-heads 2 --ffn 1408 --vocab-size 4096 --std 0.05)
gen f32 f32 f32 "${small[@]}"
gen f16 f16 f16 "${small[@]}"
gen q8_0 q8_0 q8_0 "${small[@]}"
gen q4_K q4_K f16 "${small[@]}"
gen qwen3-bf16 bf16 f16 --arch qwen3 "${small[@]}"
gen gemma2-q6_K q6_K f16 --arch gemma2 --head-dim 64 "${small[@]}"

# 4. benchmarks, CUDA only, one JSON object per line in bench.json (fields as `cinfer-engine bench`
# prints them, plus model and backend): the 134M shape (gen-model's defaults) in F16 and Q8_0.
: >"$res/bench.json"
for t in f16 q8_0; do
	m="$work/model-134m-$t.gguf"
	if ! "$engine" gen-model --out "$m" --type "$t" >"$res/gen-134m-$t.log" 2>&1 ||
		! timeout 150 "$engine" bench --model "$m" --backend cuda --prompt-tokens 512 \
			--gen-tokens 64 --batch 1,16,64 --repetitions 3 --log-level warn \
			>"$res/bench-134m-$t.txt" 2>&1; then
		say "bench 134m $t: FAIL (see gen-134m-$t.log, bench-134m-$t.txt)"
		status=1
		continue
	fi
	grep '^{' "$res/bench-134m-$t.txt" |
		sed "s/^{/{\"model\":\"134m-$t\",\"backend\":\"cuda\",/" >>"$res/bench.json"
	say "bench 134m $t: $(grep -v '^{' "$res/bench-134m-$t.txt" | tail -n +3 | tr -s ' ' | tr '\n' ';')"
done

say "gpu-check: done in $(($(date +%s) - t0)) s, status $status"
exit $status
