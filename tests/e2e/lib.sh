# Shared helpers for tests/e2e/*.sh (source it). Each script counts its cases with check/ok/not_ok and
# ends with `summary`, which prints the "<name>: N passed, M failed" line hack/run-tests.sh reads.
# shellcheck shell=bash

e2e_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
e2e_name="$(basename "${0%.sh}")"
e2e_bin="$e2e_root/${CINFER_BUILD:-build}/bin"
# The sanitized binaries are several times slower: scripts stretch their timeouts by this factor.
e2e_slow=1
[[ "${CINFER_BUILD:-build}" == *-asan ]] && e2e_slow=4
passed=0
failed=0

ok() {
	passed=$((passed + 1))
	echo "ok - $*"
}
not_ok() {
	failed=$((failed + 1))
	echo "not ok - $*"
}
# check NAME CMD...: one test case that passes when CMD succeeds; CMD's output is shown only if it
# fails. CMD runs in a subshell, so it cannot set variables of the script.
check() {
	local name="$1" out
	shift
	if out="$("$@" 2>&1)"; then
		ok "$name"
	else
		not_ok "$name"
		[[ -z "$out" ]] || printf '%s\n' "$out" | sed 's/^/    /'
	fi
}
# wait_for SECONDS CMD...: polls CMD every 0.3 s until it succeeds; fails after SECONDS.
wait_for() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@" >/dev/null 2>&1; do
		((SECONDS < deadline)) || return 1
		sleep 0.3
	done
}
summary() {
	echo "$e2e_name: $passed passed, $failed failed"
	[ "$failed" -eq 0 ]
}
# finish: ends the script. After a failure it first shows the ERROR/WARN/sanitizer lines of every
# $tmp/*.log (when the script keeps its servers' logs there), then prints the summary line and exits
# with its status.
finish() {
	local f
	if [ "$failed" -gt 0 ] && [ -n "${tmp:-}" ] && [ -d "$tmp" ]; then
		for f in "$tmp"/*.log; do
			[ -e "$f" ] || continue
			grep -aE 'ERROR|WARN|Sanitizer|runtime error' "$f" | head -n 8 | sed "s|^|    $(basename "$f" .log): |"
		done
	fi
	summary
	exit
}
# cleanup_pid_tmp: the EXIT trap of a script that runs one process at a time (its pid in $pid) and
# keeps its files in $tmp: kills the process, reaps children, removes $tmp.
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup_pid_tmp() {
	[ -n "${pid:-}" ] && kill -KILL "$pid" 2>/dev/null
	wait 2>/dev/null
	[ -z "${tmp:-}" ] || rm -rf "$tmp"
}
# engine_port LOG SECONDS: waits for `cinfer-engine serve`'s "serving ... port=N" line in LOG and
# prints N (serve --port 0 logs the kernel's choice there); fails after SECONDS.
engine_port() {
	wait_for "$2" grep -qaE 'serving .*port=[0-9]+' "$1" || return 1
	grep -aoE 'serving .*port=[0-9]+' "$1" | head -n 1 | grep -oE '[0-9]+$'
}
# free_port: an unused TCP port on 127.0.0.1 (the kernel's choice).
free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# control_plane_up: a private control plane for this script, torn down on exit (with cleanup_extra).
control_plane_up() {
	export CINFER_CP_DIR
	CINFER_CP_DIR="$(mktemp -d "/tmp/cinfer-cp-$e2e_name.XXXXXX")"
	trap 'cleanup_extra 2>/dev/null; "$e2e_root/hack/control-plane.sh" down >/dev/null 2>&1' EXIT
	local env_lines
	env_lines="$("$e2e_root/hack/control-plane.sh" up)" || return 1
	eval "$env_lines"
}
cleanup_extra() { :; }
