#!/usr/bin/env bash
# 500 InferenceServices created at once are all reconciled (Deployment, Service and status each)
# by one operator against the real control plane. Prints the time and the operator's peak RSS;
# operator/BENCHMARKS.md records them. N overrides the count (N=50 for a quick look).
set -uo pipefail
source "$(dirname "$0")/lib.sh"

n="${N:-500}"
ns=cinfer-scale
op_pid=""
cleanup_extra() { [ -n "$op_pid" ] && kill "$op_pid" 2>/dev/null; }
if ! control_plane_up; then
	not_ok "control plane up"
	summary
	exit 1
fi
k() { kubectl --request-timeout=60s "$@"; }
k apply -f "$e2e_root/crds/serving.cinfer.io_inferenceservices.yaml" >/dev/null
k wait --for=condition=Established --timeout=30s crd/inferenceservices.serving.cinfer.io >/dev/null
k create namespace "$ns" >/dev/null
port="$(free_port)"
log="$(mktemp /tmp/cinfer-operator-scale.XXXXXX.log)"
"$e2e_bin/cinfer-operator" --kubeconfig "$KUBECONFIG" --namespace "$ns" --workers 4 \
	--probe-addr "127.0.0.1:$port" --leader-election-namespace "$ns" --log-level info \
	>"$log" 2>&1 &
op_pid=$!
check "operator ready" wait_for 30 curl -sf "http://127.0.0.1:$port/readyz"

# One List document with every object, applied in one kubectl call (replicas 0: no pods needed).
manifest="$(mktemp /tmp/cinfer-scale.XXXXXX.yaml)"
{
	echo "apiVersion: v1"
	echo "kind: List"
	echo "items:"
	for i in $(seq 1 "$n"); do
		printf -- '- apiVersion: serving.cinfer.io/v1alpha1\n  kind: InferenceService\n'
		printf '  metadata: {name: m%04d, namespace: %s}\n' "$i" "$ns"
		printf '  spec: {replicas: 0, model: {uri: "file:///models/m%04d.gguf"}}\n' "$i"
	done
} >"$manifest"
t0=$(date +%s.%N)
check "$n InferenceServices created" k create -f "$manifest" -o name --request-timeout=300s >/dev/null
t_created=$(date +%s.%N)
count() { k -n "$ns" get "$1" -o name 2>/dev/null | wc -l; }
reconciled() {
	# every object has a status written for its generation and its Deployment and Service exist
	local with_status
	with_status=$(k -n "$ns" get cisvc -o jsonpath='{range .items[*]}{.status.observedGeneration}{"\n"}{end}' |
		grep -c '^1$')
	[ "$with_status" -eq "$n" ] && [ "$(count deploy)" -eq "$n" ] && [ "$(count svc)" -eq "$n" ]
}
check "all $n reconciled" wait_for 600 reconciled
t1=$(date +%s.%N)
rss_kb=$(awk '/VmHWM/ {print $2}' "/proc/$op_pid/status")
errors=$(curl -sf "http://127.0.0.1:$port/metrics" | awk '/^cinfer_operator_reconcile_total\{result="error"\}/ {print $2}')
echo "operator_scale: n=$n create_s=$(awk "BEGIN{print $t_created - $t0}") reconciled_s=$(awk "BEGIN{print $t1 - $t0}") peak_rss_mib=$((rss_kb / 1024)) reconcile_errors=${errors:-?}"
check "operator still healthy" curl -sf "http://127.0.0.1:$port/healthz"
rm -f "$manifest"
[ "$failed" -eq 0 ] && rm -f "$log" || echo "operator log: $log"
summary
