#!/usr/bin/env bash
# cinfer-autoscaler against a real API server and kube-controller-manager (hack/control-plane.sh),
# with real kubectl. The engines are stand-ins (tests/testdata/autoscaler/fake_engine.py: Prometheus
# text with the contract metric names, values from a control file) reached through --target, so no
# pods or operator are needed. Covers: leader election on the Lease, scale-up through /scale on
# queue depth, status.autoscaling, ScaledUp/ScaledDown Events, scale-down only after the window,
# no scale-down while an engine's metrics are missing, pod discovery through status.selector with
# pod-deletion-cost annotations before a scale-down, hands off for policy external, an
# autoscaling/v2 HPA accepted against the InferenceService's scale subresource, the autoscaler's own
# /metrics, a follower taking over, and a clean SIGTERM.
set -uo pipefail
source "$(dirname "$0")/lib.sh"

ns=cinfer-as-e2e
pids=()
engine_pids=()
cleanup_extra() {
	local p
	for p in "${pids[@]}" "${engine_pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
}
if ! control_plane_up; then
	not_ok "control plane up"
	summary
	exit 1
fi
k() { kubectl --request-timeout=20s "$@"; }
kn() { k -n "$ns" "$@"; }
work="$(mktemp -d /tmp/cinfer-autoscaler-e2e.XXXXXX)"
jp() { kn get "$1" -o "jsonpath=$2" 2>/dev/null; }
jp_is() { [ "$(jp "$1" "$2")" = "$3" ]; }
replicas_is() { jp_is cisvc/chat '{.spec.replicas}' "$1"; }
readyz() { curl -sf "http://127.0.0.1:$1/readyz" >/dev/null; }
has_event() {
	kn get events --field-selector "involvedObject.name=chat,reason=$1" -o name | grep -q .
}

# --- fake engines ----------------------------------------------------------------------------
engine_ports=()
# set_load I WAITING: engine I reports WAITING queued requests from its next scrape on.
set_load() { printf '{"waiting": %s, "running": 1, "kv": 0.3}\n' "$2" >"$work/engine$1.json"; }
start_engine() {
	python3 "$e2e_root/tests/testdata/autoscaler/fake_engine.py" "${engine_ports[$1]}" \
		"$work/engine$1.json" 2>>"$work/engine$1.log" &
	engine_pids[$1]=$!
}
targets=""
for i in 0 1 2; do
	engine_ports[i]="$(free_port)"
	set_load "$i" 0
	start_engine "$i"
	targets+="${targets:+,}chat=http://127.0.0.1:${engine_ports[i]}/metrics"
done
all_load() { for i in 0 1 2; do set_load "$i" "$1"; done; }
engine_up() { curl -sf "http://127.0.0.1:${engine_ports[$1]}/metrics" | grep -q cinfer_requests_waiting; }
for i in 0 1 2; do check "fake engine $i serves /metrics" wait_for 10 engine_up "$i"; done

# --- CRD and InferenceService ------------------------------------------------------------------
check "CRD applies" k apply -f "$e2e_root/crds/serving.cinfer.io_inferenceservices.yaml"
check "CRD established" k wait --for=condition=Established --timeout=30s \
	crd/inferenceservices.serving.cinfer.io
k create namespace "$ns" >/dev/null
isvc() {
	cat <<EOF
apiVersion: serving.cinfer.io/v1alpha1
kind: InferenceService
metadata:
  name: chat
spec:
  replicas: 1
  model:
    uri: https://models.example.com/m.gguf
  scaling:
    policy: reactive
    minReplicas: 1
    maxReplicas: 5
    targetQueueDepth: 2
    scaleDownDelaySeconds: 10
EOF
}
check "InferenceService with policy reactive created" bash -c "$(declare -f isvc); isvc | kubectl -n $ns apply -f - >/dev/null"

# Fields the operator owns in status; the autoscaler's merge patch must leave them alone.
check "operator-owned status fields written" kn patch cisvc chat --subresource=status --type merge \
	-p '{"status":{"replicas":1,"selector":"serving.cinfer.io/inferenceservice=chat"}}'

# --- autoscaler ---------------------------------------------------------------------------------
# start_autoscaler NAME PORT: runs it in the background, logging to $work/NAME.log
start_autoscaler() {
	"$e2e_bin/cinfer-autoscaler" --kubeconfig "$KUBECONFIG" --namespace "$ns" \
		--leader-election-namespace "$ns" --identity "$1" --interval 1 --scrape-timeout 0.5 \
		--target "$targets" --probe-addr "127.0.0.1:$2" --log-format text \
		>"$work/$1.log" 2>&1 &
	pids+=($!)
}
check "invalid --target rejected (exit 2)" bash -c \
	"\"$e2e_bin/cinfer-autoscaler\" --target chat=ftp://x >/dev/null 2>&1; [ \$? -eq 2 ]"
json_logs() {
	local out
	out="$("$e2e_bin/cinfer-autoscaler" --kubeconfig /nonexistent --probe-addr 127.0.0.1:0 2>&1)"
	[ $? -eq 1 ] && python3 -c 'import json, sys
lines = [json.loads(l) for l in sys.stdin.read().splitlines()]
assert any(l["msg"] == "cannot create Kubernetes client" and l["level"] == "error" for l in lines)' <<<"$out"
}
check "JSON logs by default; a bad kubeconfig exits 1 with a clear error" json_logs
port1="$(free_port)"
start_autoscaler as1 "$port1"
check "autoscaler ready (leader, cache synced)" wait_for 30 readyz "$port1"
check "Lease cinfer-autoscaler held" jp_is lease/cinfer-autoscaler '{.spec.holderIdentity}' as1
port2="$(free_port)"
start_autoscaler as2 "$port2"
sleep 3
check "second replica is a follower (not ready)" bash -c "! curl -sf http://127.0.0.1:$port2/readyz"

sleep 3
check "idle engines: replicas stay at 1" replicas_is 1

# --- scale up on queue depth --------------------------------------------------------------------
all_load 3 # 9 waiting / target 2 per replica -> 5 (max)
check "queue depth raises spec.replicas to 5" wait_for 30 replicas_is 5
check "kubectl get cisvc shows it" bash -c \
	"kubectl -n $ns get cisvc chat -o custom-columns=R:.spec.replicas --no-headers | grep -qx 5"
check "status.autoscaling.desiredReplicas" wait_for 10 jp_is cisvc/chat '{.status.autoscaling.desiredReplicas}' 5
check "status.autoscaling.lastScaleTime set" bash -c \
	"[ -n \"\$(kubectl -n $ns get cisvc chat -o jsonpath='{.status.autoscaling.lastScaleTime}')\" ]"
check "status.autoscaling.reason set" bash -c \
	"[ -n \"\$(kubectl -n $ns get cisvc chat -o jsonpath='{.status.autoscaling.reason}')\" ]"
check "status.autoscaling.signals.waiting is the queue" wait_for 10 \
	jp_is cisvc/chat '{.status.autoscaling.signals.waiting}' 9
check "status.autoscaling.signals.readyPods" jp_is cisvc/chat '{.status.autoscaling.signals.readyPods}' 3
check "ScaledUp Event" wait_for 10 has_event ScaledUp
check "operator-owned status fields untouched" jp_is cisvc/chat '{.status.replicas}/{.status.selector}' \
	"1/serving.cinfer.io/inferenceservice=chat"
check "Event message names from and to" bash -c \
	"kubectl -n $ns get events --field-selector involvedObject.name=chat,reason=ScaledUp -o jsonpath='{.items[*].message}' | grep -q 'from 1 to 5'"

# --- scale down after the window ----------------------------------------------------------------
all_load 0
sleep 4
check "no scale-down inside the 10 s window" replicas_is 5
check "load gone: scale-down to 1 after the window" wait_for 40 replicas_is 1
check "ScaledDown Event" wait_for 10 has_event ScaledDown

# --- a dead engine (missing metrics) never causes a scale-down ----------------------------------
all_load 3
check "load back: replicas 5 again" wait_for 30 replicas_is 5
kill "${engine_pids[2]}"
wait "${engine_pids[2]}" 2>/dev/null
set_load 0 0
set_load 1 0
sleep 16 # longer than the scale-down window plus rounds
check "engine 2 down and load gone: replicas held at 5" replicas_is 5
check "status reason says metrics are missing" bash -c \
	"kubectl -n $ns get cisvc chat -o jsonpath='{.status.autoscaling.reason}' | grep -q 'metrics missing'"
check "scrape failures logged" grep -q "scrape failed" "$work/as1.log"
set_load 2 0
start_engine 2
check "engine 2 back" wait_for 10 engine_up 2
check "all metrics back: scale-down to 1" wait_for 40 replicas_is 1

# --- in-cluster discovery: pods through status.selector, deletion costs before a scale-down ------
# No kubelet runs here, so the test writes pod status as a kubelet would; the "pods" are two fake
# engines on their own loopback addresses at the contract port 8000.
pod_ip=(127.0.0.42 127.0.0.43)
port_free() { python3 -c "import socket; s=socket.socket(); s.bind(('$1', 8000))" 2>/dev/null; }
cost() { jp "pod/pods-$1" '{.metadata.annotations.controller\.kubernetes\.io/pod-deletion-cost}'; }
if port_free "${pod_ip[0]}" && port_free "${pod_ip[1]}"; then
	for j in 0 1; do
		printf '{"waiting": 0, "running": 1}\n' >"$work/pod$j.json"
		python3 "$e2e_root/tests/testdata/autoscaler/fake_engine.py" 8000 "$work/pod$j.json" \
			"${pod_ip[j]}" 2>>"$work/pod$j.log" &
		engine_pids+=($!)
	done
	cat <<EOF | kn apply -f - >/dev/null
apiVersion: serving.cinfer.io/v1alpha1
kind: InferenceService
metadata:
  name: pods
spec:
  replicas: 1
  model:
    uri: https://models.example.com/m.gguf
  scaling:
    policy: reactive
    minReplicas: 1
    maxReplicas: 4
    targetQueueDepth: 2
    scaleDownDelaySeconds: 5
EOF
	check "selector published in status (as the operator does)" kn patch cisvc pods \
		--subresource=status --type merge \
		-p '{"status":{"selector":"serving.cinfer.io/inferenceservice=pods"}}'
	for j in 0 1 2; do
		cat <<EOF | kn apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata:
  name: pods-$j
  labels: {serving.cinfer.io/inferenceservice: pods}
spec:
  containers: [{name: engine, image: "cinfer-engine:e2e"}]
EOF
	done
	for j in 0 1; do
		check "pod $j reported Running and Ready at ${pod_ip[j]}" kn patch pod "pods-$j" \
			--subresource=status --type merge -p "{\"status\":{\"phase\":\"Running\",
			\"podIP\":\"${pod_ip[j]}\",\"podIPs\":[{\"ip\":\"${pod_ip[j]}\"}],
			\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"}]}}"
	done
	# pods-2 stays Pending: counted as not ready, never scraped.
	printf '{"waiting": 8, "running": 1}\n' >"$work/pod0.json"
	printf '{"waiting": 4, "running": 1}\n' >"$work/pod1.json"
	check "pods: queue depth scales up to max 4" wait_for 30 jp_is cisvc/pods '{.spec.replicas}' 4
	check "pods: signals see 2 ready, 1 not ready" wait_for 10 jp_is cisvc/pods \
		'{.status.autoscaling.signals.readyPods}/{.status.autoscaling.signals.unreadyPods}' 2/1
	printf '{"waiting": 0, "running": 1}\n' >"$work/pod0.json"
	printf '{"waiting": 1, "running": 1}\n' >"$work/pod1.json"
	check "pods: load gone, scale-down after the window" wait_for 40 bash -c \
		"[ \"\$(kubectl -n $ns get cisvc pods -o jsonpath='{.spec.replicas}')\" -lt 4 ]"
	c0="$(cost 0)"
	c1="$(cost 1)"
	check "pod-deletion-cost annotated on both ready pods ($c0, $c1)" [ -n "$c0" -a -n "$c1" ]
	check "the idler pod is the cheaper victim" [ "${c0:-0}" -lt "${c1:-0}" ]
	check "the Pending pod is not annotated (the ReplicaSet removes it first anyway)" \
		[ -z "$(cost 2)" ]
	kn delete cisvc pods --wait=false >/dev/null
else
	echo "SKIP: port 8000 on ${pod_ip[*]} is in use; in-cluster discovery not tested this run"
fi

# --- the autoscaler's own metrics ---------------------------------------------------------------
metrics="$(curl -sf "http://127.0.0.1:$port1/metrics")"
check "/metrics: desired replicas per InferenceService" grep -q \
	"cinfer_autoscaler_desired_replicas{namespace=\"$ns\",inferenceservice=\"chat\"} 1" <<<"$metrics"
check "/metrics: scale-ups counted" grep -Eq 'cinfer_autoscaler_scale_total\{direction="up"\} [1-9]' <<<"$metrics"
check "/metrics: scrape errors counted" grep -Eq 'cinfer_autoscaler_scrapes_total\{result="error"\} [1-9]' <<<"$metrics"
check "/metrics: leader" grep -q '^cinfer_autoscaler_leader 1' <<<"$metrics"
check "/healthz" curl -sf "http://127.0.0.1:$port1/healthz"
# A measurement, not a test: the mean decision round (list, scrape, decide, write) seen so far.
awk '/^cinfer_autoscaler_round_duration_seconds_sum/ {s=$2} /^cinfer_autoscaler_round_duration_seconds_count/ {n=$2}
	END {if (n > 0) printf "# measured: %d rounds, mean %.1f ms per round\n", n, 1000 * s / n}' <<<"$metrics"

# --- policy external: hands off ----------------------------------------------------------------
check "policy set to external" kn patch cisvc chat --type merge -p '{"spec":{"scaling":{"policy":"external"}}}'
check "kubectl scale (a person owns replicas now)" kn scale cisvc/chat --replicas=2
all_load 5
sleep 5
check "external: replicas left at 2 under load" replicas_is 2
check "external: autoscaler log says it stopped managing" grep -q "stopped managing" "$work/as1.log"

# --- an HPA can own the InferenceService through /scale -------------------------------------------
hpa() {
	cat <<EOF
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: chat
spec:
  scaleTargetRef:
    apiVersion: serving.cinfer.io/v1alpha1
    kind: InferenceService
    name: chat
  minReplicas: 1
  maxReplicas: 3
  metrics:
    - type: Resource
      resource:
        name: cpu
        target:
          type: Utilization
          averageUtilization: 80
EOF
}
check "autoscaling/v2 HPA targeting the InferenceService accepted" bash -c \
	"$(declare -f hpa); hpa | kubectl -n $ns apply -f - >/dev/null"
check "scale subresource answers a Scale" bash -c \
	"kubectl -n $ns get --raw /apis/serving.cinfer.io/v1alpha1/namespaces/$ns/inferenceservices/chat/scale | grep -q '\"kind\":\"Scale\"'"
check "HPA controller reads the scale subresource (AbleToScale)" wait_for 60 bash -c \
	"kubectl -n $ns get hpa chat -o jsonpath='{.status.conditions[?(@.type==\"AbleToScale\")].status}' | grep -qx True"

# --- leadership hand-over and clean SIGTERM -----------------------------------------------------
kill -TERM "${pids[0]}"
wait "${pids[0]}"
rc=$?
check "SIGTERM: exit 0" [ "$rc" -eq 0 ]
check "SIGTERM: logged shutting down" grep -q "shutting down" "$work/as1.log"
check "follower takes over the Lease" wait_for 30 jp_is lease/cinfer-autoscaler '{.spec.holderIdentity}' as2
check "follower becomes ready" wait_for 30 readyz "$port2"
kill -TERM "${pids[1]}"
wait "${pids[1]}"
check "second replica exits 0 on SIGTERM" [ $? -eq 0 ]
pids=()

if [ "$failed" -ne 0 ]; then
	for f in "$work"/as*.log; do
		echo "--- $f (last 30 lines)"
		tail -n 30 "$f"
	done
fi
summary
