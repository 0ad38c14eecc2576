#!/usr/bin/env bash
# Smoke test for hack/control-plane.sh: brings up a real etcd + kube-apiserver +
# kube-controller-manager in its own state dir, checks that the API server is
# ready, that RBAC is enforced and that the namespace, serviceaccount,
# deployment, replicaset and garbage-collector controllers act, then brings it
# down. Ends with exactly one line: control_plane_smoke: N passed, K failed
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cp_sh="$root/hack/control-plane.sh"
suffix="$$-$RANDOM"
source "$root/tests/e2e/lib.sh"

state="$(mktemp -d /tmp/cinfer-cp-smoke.XXXXXX)"
export CINFER_CP_DIR="$state"
cleanup() {
	"$cp_sh" down >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'not_ok "interrupted"; summary; exit 130' INT TERM

t0=$SECONDS
if env_lines="$("$cp_sh" up)"; then
	ok "control plane up in $((SECONDS - t0))s"
else
	not_ok "control plane up"
	summary
	exit 1
fi
eval "$env_lines"
k() { kubectl --request-timeout=20s "$@"; }

check "env prints the same KUBECONFIG" test "$("$cp_sh" env)" = "$env_lines"
check "status says up" "$cp_sh" status
check "kubectl get --raw /readyz is ok" test "$(k get --raw /readyz 2>&1)" = ok
check "server version is the pinned release" \
	bash -c 'kubectl version -o json | grep -q "\"gitVersion\": \"v1\.32\."'

# RBAC, not AlwaysAllow: an ordinary service account may not create deployments.
check "RBAC denies an unprivileged service account" \
	test "$(k auth can-i create deployments --as=system:serviceaccount:default:default 2>/dev/null)" = no

ns="smoke-$suffix"
check "create namespace" k create namespace "$ns"
check "serviceaccount controller creates default SA" \
	wait_for 60 k -n "$ns" get serviceaccount default

# Deployment -> ReplicaSet -> Pods (Pending: there are no nodes).
check "create deployment" k -n "$ns" create deployment web --image=registry.invalid/none:0 --replicas=2
check "deployment controller creates a ReplicaSet" \
	wait_for 60 bash -c "kubectl -n '$ns' get rs -l app=web -o name | grep -q ."
check "replicaset controller creates 2 pods" \
	wait_for 60 bash -c "test \"\$(kubectl -n '$ns' get pods -l app=web -o name | wc -l)\" -eq 2"
check "delete deployment" k -n "$ns" delete deployment web --wait=true --timeout=60s
check "garbage collector removes the ReplicaSet" \
	wait_for 60 bash -c "test -z \"\$(kubectl -n '$ns' get rs -l app=web -o name)\""

# Namespace deletion finishes only when the namespace controller has emptied it
# and removed the kubernetes finalizer.
check "namespace deletion completes" k delete namespace "$ns" --wait=true --timeout=90s
check "namespace is gone" \
	bash -c "kubectl get namespace '$ns' 2>&1 | grep -q NotFound"

pids="$(cat "$state"/pids/* 2>/dev/null | tr '\n' ' ')"
check "down" "$cp_sh" down
check "no process left" bash -c "for p in $pids; do ! kill -0 \$p 2>/dev/null || exit 1; done"
check "state dir removed" test ! -e "$state"
check "status says down" bash -c "! '$cp_sh' status >/dev/null"

summary
[[ $failed -eq 0 ]]
