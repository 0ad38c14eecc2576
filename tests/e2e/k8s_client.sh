#!/usr/bin/env bash
# Integration test of common/k8s against a real control plane: brings up
# hack/control-plane.sh (etcd + kube-apiserver + kube-controller-manager) in its
# own state dir, runs the Check suite tests/common/test_k8s_live.c against it
# (create/get/list/paging, merge/JSON/strategic/apply patches, 409 on a stale
# update, 422 messages, watch ADDED/MODIFIED/DELETED, ERROR 410 on a too-old
# resourceVersion, a custom resource, Deployment /scale and /status, Lease
# updates, anonymous refused), checks that the test namespace goes away, and
# brings the control plane down on exit.
# Ends with exactly one line: k8s_client: N passed, M failed
#
#   K8S_LIVE_BIN=path   test binary to run (default: $CINFER_BUILD/tests/common/test_k8s_live,
#                       built with make when missing)
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
cp_sh="$root/hack/control-plane.sh"
build="${CINFER_BUILD:-build}"
bin="${K8S_LIVE_BIN:-$build/tests/common/test_k8s_live}"
source "$root/tests/e2e/lib.sh"

if [[ ! -x "$bin" ]]; then
	make --no-print-directory -s "$bin" >/dev/null || {
		not_ok "build $bin"
		summary
		exit 1
	}
fi

state="$(mktemp -d /tmp/cinfer-cp-k8s.XXXXXX)"
export CINFER_CP_DIR="$state"
cleanup() {
	"$cp_sh" down >/dev/null 2>&1 || true
	rm -rf "$state"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

t0=$SECONDS
if env_lines="$("$cp_sh" up)"; then
	ok "control plane up in $((SECONDS - t0))s"
else
	not_ok "control plane up (see the control-plane lines above)"
	summary
	exit 1
fi
eval "$env_lines"

# The suite only touches a cluster named by this variable, never a plain KUBECONFIG.
out="$(mktemp /tmp/cinfer-k8s-live.XXXXXX)"
CINFER_K8S_LIVE_KUBECONFIG="$KUBECONFIG" "$bin" >"$out" 2>&1
rc=$?
# Indented so that hack/run-tests.sh counts this script's summary, not Check's line.
sed 's/^/  /' "$out"
line="$(grep -E '^[0-9]+%: Checks: [0-9]+, Failures: [0-9]+, Errors: [0-9]+' "$out" | tail -n1)"
rm -f "$out"
if [[ -n "$line" ]]; then
	c=$(sed -E 's/.*Checks: ([0-9]+).*/\1/' <<<"$line")
	f=$(sed -E 's/.*Failures: ([0-9]+).*/\1/' <<<"$line")
	e=$(sed -E 's/.*Errors: ([0-9]+).*/\1/' <<<"$line")
	passed=$((passed + c - f - e))
	failed=$((failed + f + e))
	[[ $rc -eq 0 ]] || [[ $((f + e)) -gt 0 ]] || not_ok "test_k8s_live exited with $rc"
else
	not_ok "test_k8s_live produced no Check summary (exit $rc)"
fi

# The suite deletes its namespace; the namespace controller then empties and removes it.
live_namespaces() {
	kubectl --request-timeout=20s get namespaces -o name 2>/dev/null | grep '^namespace/k8s-live-'
}
deadline=$((SECONDS + 90))
while live_namespaces >/dev/null && ((SECONDS < deadline)); do sleep 1; done
if live_namespaces >/dev/null; then
	not_ok "test namespace still present after 90s: $(live_namespaces | tr '\n' ' ')"
else
	ok "test namespace removed"
fi

if "$cp_sh" down >/dev/null 2>&1; then ok "control plane down"; else not_ok "control plane down"; fi
summary
[[ $failed -eq 0 ]]
