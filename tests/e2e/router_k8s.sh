#!/usr/bin/env bash
# cinfer-router's in-cluster path and scale from zero, end to end, against the real control plane
# (hack/control-plane.sh: kube-apiserver, etcd, kube-controller-manager): the operator turns two
# InferenceServices into Deployments, kube-controller-manager makes their pods, and this script
# plays the kubelet (there is none): for each new pod it starts a real `cinfer-engine serve` on a
# loopback address of its own at the contract port 8000 and reports the pod Running and Ready; a
# pod being deleted gets its engine stopped and is then removed. The router discovers models and
# pods through its informers; the autoscaler reads the router's held requests.
# Covers: the CRD refuses minReplicas 0 with policy external; one URL serves both models
# (/v1/models, a request to each); a request to the service at 0 replicas is held, the autoscaler
# scales it to 1 (ScaledUp, "scale from zero"), the request completes once the engine is ready;
# idle for scaleToZeroSeconds, the service goes back to 0 (the router stops using the pod; pod GC
# removes an unscheduled terminating pod at once, so the fake kubelet's drain path rarely runs)
# and a second request brings it back again. Skips without stories260K
# or when port 8000 is taken on the loopback addresses.
set -uo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

model="${CINFER_SHARED:-$e2e_root/../shared}/models/tinyllamas/stories260K.gguf"
ns=cinfer-router-e2e
idle=8 # scaleToZeroSeconds
pids=()
work=""
cleanup_extra() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	if [ -n "$work" ]; then
		for p in "$work"/pids/* "$work"/stopping-*; do [ -f "$p" ] && kill "$(cat "$p")" 2>/dev/null; done
	fi
	wait 2>/dev/null
	[[ -z "$work" ]] || rm -rf "$work"
}

if [ ! -r "$model" ]; then
	echo "SKIP: $model not present (shared test data is optional)"
	summary
	exit
fi
port_free() { python3 -c "import socket; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('$1', 8000))" 2>/dev/null; }
for i in $(seq 60 75); do
	if ! port_free "127.0.0.$i"; then
		echo "SKIP: port 8000 on 127.0.0.$i is in use; the fake pods need it"
		summary
		exit
	fi
done
for b in cinfer-engine cinfer-router cinfer-operator cinfer-autoscaler; do
	if [ ! -x "$e2e_bin/$b" ]; then
		not_ok "binary $e2e_bin/$b not built"
		summary
		exit 1
	fi
done
if ! control_plane_up; then
	not_ok "control plane up"
	summary
	exit 1
fi
work="$(mktemp -d /tmp/cinfer-router-k8s.XXXXXX)"
mkdir -p "$work/pids"
trap 'exit 143' TERM
trap 'exit 130' INT
k() { kubectl --request-timeout=20s "$@"; }
kn() { k -n "$ns" "$@"; }
jp() { kn get "$1" -o "jsonpath=$2" 2>/dev/null; }
replicas_is() { [ "$(jp "cisvc/$1" '{.spec.replicas}')" = "$2" ]; }
has_event() { kn get events --field-selector "involvedObject.name=$1,reason=$2" -o name | grep -q .; }
step() { echo "# $(date +%T) $*"; }

check "CRD applies" k apply -f "$e2e_root/crds/serving.cinfer.io_inferenceservices.yaml"
check "CRD established" k wait --for=condition=Established --timeout=30s \
	crd/inferenceservices.serving.cinfer.io
k create namespace "$ns" >/dev/null

# --- the CRD's rule ---------------------------------------------------------------------------------
out="$(cat <<EOF | kn apply -f - 2>&1
apiVersion: serving.cinfer.io/v1alpha1
kind: InferenceService
metadata: {name: bad}
spec:
  model: {uri: file:///models/stories260K.gguf}
  scaling: {policy: external, minReplicas: 0, maxReplicas: 2}
EOF
)"
check "CRD refuses minReplicas 0 with policy external" bash -c \
	'grep -q "minReplicas 0 needs a policy that owns replicas" <<<"$0"' "$out"

# --- the fake kubelet -------------------------------------------------------------------------------
# Every 0.3 s: a pod without an IP gets an engine on 127.0.0.N:8000 and a Running/Ready status; a
# pod with a deletionTimestamp gets its engine stopped (SIGTERM: it drains) and is removed.
kubelet() {
	local next=60 name isvc ip del
	declare -A addr
	while :; do
		kn get pods -o jsonpath='{range .items[*]}{.metadata.name}|{.metadata.labels.serving\.cinfer\.io/inferenceservice}|{.status.podIP}|{.metadata.deletionTimestamp}{"\n"}{end}' \
			>"$work/pods.txt" 2>/dev/null
		while IFS='|' read -r name isvc ip del; do
			[ -n "$name" ] || continue
			if [ -n "$del" ]; then
				# As a kubelet: SIGTERM (the engine keeps serving for its shutdown delay, then
				# drains), and the pod object goes only once the process has exited.
				if [ -f "$work/pids/$name" ]; then
					echo "$(date +%T) kubelet: stopping $name" >>"$work/kubelet.log"
					kill -TERM "$(cat "$work/pids/$name")" 2>/dev/null
					mv "$work/pids/$name" "$work/stopping-$name"
				fi
				if [ -f "$work/stopping-$name" ] && kill -0 "$(cat "$work/stopping-$name")" 2>/dev/null; then
					continue
				fi
				rm -f "$work/stopping-$name"
				kn delete pod "$name" --grace-period=0 --force >/dev/null 2>&1
			elif [ -z "$ip" ] && [ -z "${addr[$name]:-}" ]; then
				addr[$name]="127.0.0.$next"
				next=$((next + 1))
				echo "$(date +%T) kubelet: starting $name ($isvc) at ${addr[$name]}" >>"$work/kubelet.log"
				"$e2e_bin/cinfer-engine" serve --model "$model" --host "${addr[$name]}" --port 8000 \
					--served-model-name "$isvc" --threads 1 --shutdown-delay-seconds 2 --log-format text \
					>"$work/engine-$name.log" 2>&1 &
				echo $! >"$work/pids/$name"
				wait_for 60 curl -sf "http://${addr[$name]}:8000/health"
				kn patch pod "$name" --subresource=status --type merge -p "{\"status\":{\"phase\":\"Running\",
					\"podIP\":\"${addr[$name]}\",\"podIPs\":[{\"ip\":\"${addr[$name]}\"}],
					\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"}]}}" >/dev/null
				echo "$(date +%T) kubelet: $name ready" >>"$work/kubelet.log"
			fi
		done <"$work/pods.txt"
		sleep 0.3
	done
}
kubelet &
pids+=($!)

# --- operator, autoscaler, router -------------------------------------------------------------------
op_probe="$(free_port)"
as_probe="$(free_port)"
r_port="$(free_port)"
r_probe="$(free_port)"
"$e2e_bin/cinfer-operator" --kubeconfig "$KUBECONFIG" --namespace "$ns" --probe-addr "127.0.0.1:$op_probe" \
	--engine-image cinfer-engine:e2e --leader-election-namespace "$ns" --log-format text \
	>"$work/operator.log" 2>&1 &
pids+=($!)
"$e2e_bin/cinfer-router" --kubeconfig "$KUBECONFIG" --namespace "$ns" --port "$r_port" \
	--probe-addr "127.0.0.1:$r_probe" --health-interval 0.2 --hold-timeout 120 --log-format text \
	>"$work/router.log" 2>&1 &
router_pid=$!
"$e2e_bin/cinfer-autoscaler" --kubeconfig "$KUBECONFIG" --namespace "$ns" --leader-election-namespace "$ns" \
	--identity e2e --interval 1 --scrape-timeout 1 --router-url "http://127.0.0.1:$r_probe" \
	--probe-addr "127.0.0.1:$as_probe" --log-format text >"$work/autoscaler.log" 2>&1 &
as_pid=$!
check "operator ready" wait_for 30 curl -sf "http://127.0.0.1:$op_probe/readyz"
check "router ready (informers synced)" wait_for 30 curl -sf "http://127.0.0.1:$r_probe/readyz"
check "autoscaler ready" wait_for 30 curl -sf "http://127.0.0.1:$as_probe/readyz"

# --- two models behind one URL ----------------------------------------------------------------------
step "two InferenceServices: stories (minReplicas 0, at 0) and story-b (1 replica)"
cat <<EOF | kn apply -f - >/dev/null
apiVersion: serving.cinfer.io/v1alpha1
kind: InferenceService
metadata: {name: stories}
spec:
  replicas: 0
  model: {uri: file:///models/stories260K.gguf}
  scaling: {policy: reactive, minReplicas: 0, maxReplicas: 2, targetQueueDepth: 4,
            scaleDownDelaySeconds: $idle, scaleToZeroSeconds: $idle}
---
apiVersion: serving.cinfer.io/v1alpha1
kind: InferenceService
metadata: {name: story-b}
spec:
  replicas: 1
  model: {uri: file:///models/stories260K.gguf}
  scaling: {policy: external}
EOF
check "both InferenceServices created" kn get cisvc stories story-b
check "router /v1/models lists both models (one at zero replicas)" wait_for 30 bash -c \
	'm="$(curl -sf http://127.0.0.1:'"$r_port"'/v1/models)"; grep -q "\"stories\"" <<<"$m" && grep -q "\"story-b\"" <<<"$m"'
# (the page is read whole first: grep -q stopping early would fail the pipeline under pipefail)
rmetrics() { curl -sf "http://127.0.0.1:$r_probe/metrics"; }
eligible() { local m; m="$(rmetrics)" && grep -q "^cinfer_router_replicas{model_name=\"$1\",state=\"eligible\"} $2" <<<"$m"; }
check "story-b: its pod discovered and eligible" wait_for 90 eligible story-b 1
ask() {
	curl -s -o "$work/$1.out" -w '%{http_code}' --max-time "$3" "http://127.0.0.1:$r_port/v1/completions" \
		-H 'Content-Type: application/json' -d "{\"model\":\"$2\",\"prompt\":\"Once upon a time\",\"max_tokens\":8}"
}
code="$(ask b story-b 60)"
check "story-b answers through the router ($code)" [ "$code" = 200 ]
check "story-b's answer names its model" grep -q '"model":"story-b"' "$work/b.out"

# --- scale from zero --------------------------------------------------------------------------------
step "a request for stories, at 0 replicas"
held() { local m; m="$(rmetrics)" && grep -q "^cinfer_router_requests_held{model_name=\"stories\"} $1" <<<"$m"; }
t0=$SECONDS
(ask s1 stories 180 >"$work/s1.code") &
req_pid=$!
check "the router holds it (held gauge 1)" wait_for 10 held 1
check "the autoscaler scales stories 0 -> 1 on the held request" wait_for 30 replicas_is stories 1
check "ScaledUp Event" wait_for 10 has_event stories ScaledUp
check "status.autoscaling.reason: scale from zero" bash -c \
	"kubectl -n $ns get events --field-selector involvedObject.name=stories,reason=ScaledUp -o jsonpath='{.items[*].message}' | grep -q 'scale from zero'"
wait "$req_pid"
code="$(cat "$work/s1.code")"
echo "# measured: held request answered $((SECONDS - t0)) s after it arrived (autoscaler interval 1 s, engine start included)"
check "the held request completes with 200 once the engine is ready" [ "$code" = 200 ]
check "its answer came from stories" grep -q '"model":"stories"' "$work/s1.out"
check "held gauge back to 0" held 0

# --- and back to zero --------------------------------------------------------------------------------
step "idle: back to zero after ${idle} s"
t0=$SECONDS
check "idle for scaleToZeroSeconds: spec.replicas 0" wait_for $((idle + 30)) replicas_is stories 0
echo "# measured: scaled to zero $((SECONDS - t0)) s after the last request (scaleToZeroSeconds $idle)"
check "ScaledDown Event says scale to zero" wait_for 10 bash -c \
	"kubectl -n $ns get events --field-selector involvedObject.name=stories,reason=ScaledDown -o jsonpath='{.items[*].message}' | grep -q 'scale to zero'"
check "the router saw the pod terminating and stopped using it" wait_for 30 eligible stories 0
# With no kubelet and no scheduler the pod has no node, and kube-controller-manager's pod GC force-
# deletes an unscheduled pod as soon as it is terminating (~0.1 s later, before this script's fake
# kubelet sees it), so the router may see the removal without the terminating state in between:
# either is a correct end (tests/router/test_router_discovery.c covers deletionTimestamp itself).
check "router logged the pod terminating or removed" \
	grep -qE 'replica (state model=stories .*terminating=true|removed model=stories )' "$work/router.log"
code="$(ask b2 story-b 60)"
check "story-b unaffected ($code)" [ "$code" = 200 ]

step "a second request: from zero again"
t0=$SECONDS
code="$(ask s2 stories 180)"
check "second request after scale to zero completes ($code)" [ "$code" = 200 ]
echo "# measured: second scale from zero answered in $((SECONDS - t0)) s"
check "spec.replicas back to 1" replicas_is stories 1

# --- shutdown -----------------------------------------------------------------------------------------
kill -TERM "$router_pid"
wait "$router_pid"
check "router exits 0 on SIGTERM" [ $? -eq 0 ]
kill -TERM "$as_pid"
wait "$as_pid"
check "autoscaler exits 0 on SIGTERM" [ $? -eq 0 ]
if [ "$failed" -ne 0 ]; then
	for f in "$work"/router.log "$work"/autoscaler.log "$work"/operator.log "$work"/kubelet.log "$work"/engine-*.log; do
		[ -f "$f" ] || continue
		echo "--- $f (last 25 lines)"
		tail -n 25 "$f"
	done
fi
summary
