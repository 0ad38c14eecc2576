#!/usr/bin/env bash
# Runs every test binary given on the command line, then every tests/e2e/*.sh script, and prints one
# summary line per suite plus a closing "tests: N passed, M failed, K skipped" line. Exit status is
# non-zero when anything failed. Each test is bounded by a timeout so a hang fails instead of
# stalling CI.
#
# Skips (a check that cannot run here: no ../shared data, no live cluster, no IPv6) are counted
# once each and never as passed. The convention:
#   - Check suites: the check calls test_skip() (tests/testutil.h) and returns. It prints
#     "SKIP: <reason>" for people and marks the check, whose verbose result line (CK_VERBOSITY=
#     verbose, set here) then reads "(skipped):1:P:..."; the runner counts those lines and takes
#     them off the suite's passed count. SKIP reason lines are not counted (a check may print
#     several).
#   - Other runners (tests/e2e scripts) count only what ran in "N passed, M failed" and print one
#     "SKIP: <reason>" line, at the start of a line, per check or group of checks they skip; the
#     runner counts each such line as one skipped test.
#
#   TESTS=regex   run only suites whose path matches (e.g. TESTS=prom make test)
#   E2E=0         skip tests/e2e scripts (unit suites only)
set -uo pipefail
cd "$(dirname "$0")/.."

export CINFER_BUILD="${CINFER_BUILD:-build}"
export CINFER_SHARED="${CINFER_SHARED:-$(cd .. && pwd)/shared}"
export CINFER_ROOT="$PWD"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export CK_VERBOSITY="${CK_VERBOSITY:-verbose}" # one result line per check: skips are counted
filter="${TESTS:-.}"
timeout_s="${TEST_TIMEOUT:-900}"

passed=0 failed=0 skipped=0 failed_suites=()
log_dir="$CINFER_BUILD/test-logs"
mkdir -p "$log_dir"

# Check prints "NN%: Checks: C, Failures: F, Errors: E" (skipped checks are among the passed ones:
# "(skipped):" result lines); other runners print "N passed, M failed" and "SKIP:" lines.
count_output() {
  local out="$1" rc="$2" name="$3" c f e s line
  line=$(grep -E '^[0-9]+%: Checks: [0-9]+, Failures: [0-9]+, Errors: [0-9]+' "$out" | tail -n1)
  if [ -n "$line" ]; then
    c=$(sed -E 's/.*Checks: ([0-9]+).*/\1/' <<<"$line")
    f=$(sed -E 's/.*Failures: ([0-9]+).*/\1/' <<<"$line")
    e=$(sed -E 's/.*Errors: ([0-9]+).*/\1/' <<<"$line")
    s=$(grep -cE '^\(skipped\):[0-9]+:P:' "$out")
    passed=$((passed + c - f - e - s)); failed=$((failed + f + e)); skipped=$((skipped + s))
    [ "$s" -gt 0 ] && echo "$name: $s of $c checks skipped"
  else
    line=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$out" | tail -n1)
    s=$(grep -cE '^SKIP:' "$out")
    skipped=$((skipped + s))
    if [ -n "$line" ]; then
      passed=$((passed + $(sed -E 's/.*\b([0-9]+) passed.*/\1/' <<<"$line")))
      failed=$((failed + $(sed -E 's/.*\b([0-9]+) failed.*/\1/' <<<"$line")))
    elif [ "$rc" -ne 0 ]; then
      failed=$((failed + 1))
    fi
  fi
  if [ "$rc" -ne 0 ]; then
    failed_suites+=("$name")
    # A crash or timeout may leave no failure in the counts: make sure it is counted once.
    grep -qE 'Failures: [1-9]|Errors: [1-9]|[1-9][0-9]* failed' "$out" || failed=$((failed + 1))
  fi
}

run_one() {
  local name="$1"; shift
  local out="$log_dir/$(echo "$name" | tr '/' '_').log"
  timeout --kill-after=10 "$timeout_s" "$@" >"$out" 2>&1
  local rc=$?
  [ $rc -eq 124 ] && echo "$name: TIMEOUT after ${timeout_s}s" >>"$out"
  # A failure shows the whole log but the per-check "Passed" lines (CK_VERBOSITY=verbose).
  if [ $rc -ne 0 ]; then
    grep -vE '^[^ ]+:[0-9]+:P:[^:]*:[^:]*:[0-9]+: Passed$' "$out"
  else
    grep -E 'Checks:|passed, [0-9]+ failed|SKIP' "$out"
  fi
  count_output "$out" "$rc" "$name"
}

for t in "$@"; do
  [[ "$t" =~ $filter ]] || continue
  case "$t" in
    */tests/fuzz/corpus_*) run_one "$t" "$t" "tests/fuzz/corpus/${t##*/corpus_}" ;;
    *) run_one "$t" "$t" ;;
  esac
done

# The tools some e2e scripts build on first use (the control plane: ~5 min cold on 2 cores, more on
# a busy machine; helm) are built here, before any script's timeout starts, so a fresh machine's
# first script is not failed for the build's time. A failed build is not fatal here: the scripts
# that need it then fail and say why.
prepare_e2e() {
  local scripts=("$@") needs_cp=0 needs_helm=0 s
  for s in "${scripts[@]}"; do
    grep -q '^[^#]*control_plane_up' "$s" && needs_cp=1
    grep -q 'build-helm.sh' "$s" && needs_helm=1
  done
  if [ $needs_cp = 1 ]; then
    echo "== prepare: hack/build-control-plane.sh"
    hack/build-control-plane.sh || echo "prepare: the control plane did not build (above)"
  fi
  if [ $needs_helm = 1 ]; then
    echo "== prepare: hack/build-helm.sh"
    hack/build-helm.sh || echo "prepare: helm did not build (above)"
  fi
}

if [ "${E2E:-1}" != 0 ]; then
  e2e_scripts=()
  for s in tests/e2e/*.sh; do
    [ -e "$s" ] || continue
    [ "$s" = tests/e2e/lib.sh ] && continue # helpers the scripts source, not a test
    [[ "$s" =~ $filter ]] || continue
    e2e_scripts+=("$s")
  done
  [ ${#e2e_scripts[@]} -gt 0 ] && prepare_e2e "${e2e_scripts[@]}"
  for s in "${e2e_scripts[@]}"; do
    echo "== $s"
    run_one "$s" bash "$s"
  done
fi

if [ ${#failed_suites[@]} -gt 0 ]; then
  echo "failed: ${failed_suites[*]} (logs in $log_dir/)"
fi
echo "tests: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ ${#failed_suites[@]} -eq 0 ]
