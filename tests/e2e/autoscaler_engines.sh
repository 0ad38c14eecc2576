#!/usr/bin/env bash
# shellcheck disable=SC2016 # the bash -c scripts below take their arguments as $0, $1, ...
# cinfer-autoscaler driving an InferenceService from REAL engines: three `cinfer-engine serve`
# processes on stories260K (loopback ports, --max-num-seqs 2 so requests queue), a real API server and
# kube-controller-manager (hack/control-plane.sh), the autoscaler out of cluster with --target, and
# load from hack/loadgen. No operator runs: spec.replicas is what the autoscaler writes through
# /scale. Covers: closed-loop load queues requests (cinfer_requests_waiting) and raises spec.replicas
# to maxReplicas (kubectl get cisvc, status.autoscaling, a ScaledUp Event); load gone, replicas come
# back to minReplicas only after scaleDownDelaySeconds (ScaledDown Event); an engine killed while idle
# (scrape failure) holds replicas instead of scaling down; the autoscaler's /metrics counts the
# scrape errors; the engine back, scale-down resumes. status.autoscaling.conditions along the way
# (AbleToScale, ScalingActive, ScalingLimited TooManyReplicas at maxReplicas). Then the same service
# switched to an objective (spec.scaling.objectives.ttftSeconds 0.5, no targets): 6 clients on one
# engine queue behind its 2 sequences and miss it, the objective alone scales 1 -> 3 (ObjectiveMet
# False / ObjectiveMissed); the same 6 clients spread 2 per engine, as a router would once 3
# replicas exist, meet it (ObjectiveMet True). Skips when stories260K is absent.
set -uo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

model="${CINFER_SHARED:-$e2e_root/../shared}/models/tinyllamas/stories260K.gguf"
ns=cinfer-ase-e2e
window=15 # scaleDownDelaySeconds (long enough that a loaded machine's polling lag stays inside it)
engine_pids=()
as_pid=""
lg_pid=""
work=""
cleanup_extra() {
	local p
	for p in "${engine_pids[@]}" $as_pid $lg_pid; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	[[ -z "$work" ]] || rm -rf "$work"
}

if [ ! -r "$model" ]; then
	echo "SKIP: $model not present (shared test data is optional)"
	summary
	exit
fi
for b in cinfer-engine cinfer-autoscaler; do
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
work="$(mktemp -d /tmp/cinfer-ase-e2e.XXXXXX)"
# A timeout's SIGTERM (hack/run-tests.sh) or ^C still runs the EXIT trap: processes stopped, control
# plane down.
trap 'exit 143' TERM
trap 'exit 130' INT
k() { kubectl --request-timeout=20s "$@"; }
kn() { k -n "$ns" "$@"; }
jp() { kn get "$1" -o "jsonpath=$2" 2>/dev/null; }
jp_is() { [ "$(jp "$1" "$2")" = "$3" ]; }
replicas_is() { jp_is cisvc/stories '{.spec.replicas}' "$1"; }
has_event() {
	kn get events --field-selector "involvedObject.name=stories,reason=$1" -o name | grep -q .
}
step() { echo "# $(date +%T) $*"; }

# --- three real engines ---------------------------------------------------------------------------
engine_ports=()
start_engine() {
	"$e2e_bin/cinfer-engine" serve --model "$model" --host 127.0.0.1 --port "${engine_ports[$1]}" \
		--max-num-seqs 2 --threads 1 --context-length 2048 --log-format text >>"$work/engine$1.log" 2>&1 &
	engine_pids[$1]=$!
}
engine_healthy() { curl -sf "http://127.0.0.1:${engine_ports[$1]}/health" >/dev/null; }
# metric I NAME: the value of NAME (unlabelled sample or first series) on engine I's /metrics
metric() {
	curl -sf "http://127.0.0.1:${engine_ports[$1]}/metrics" |
		awk -v n="$2" '$1 == n || index($1, n "{") == 1 {print $2; exit}'
}
targets=""
step "starting 3 engines on $model"
for i in 0 1 2; do
	engine_ports[i]="$(free_port)"
	start_engine "$i"
	targets+="${targets:+,}stories=http://127.0.0.1:${engine_ports[i]}/metrics"
done
for i in 0 1 2; do check "engine $i healthy (port ${engine_ports[i]})" wait_for 60 engine_healthy "$i"; done
check "engine 0 exports cinfer_requests_waiting" bash -c "curl -sf http://127.0.0.1:${engine_ports[0]}/metrics |
	grep -q '^cinfer_requests_waiting{'"

# --- CRD and InferenceService -------------------------------------------------------------------
step "CRD and InferenceService"
check "CRD applies" k apply -f "$e2e_root/crds/serving.cinfer.io_inferenceservices.yaml"
check "CRD established" k wait --for=condition=Established --timeout=30s \
	crd/inferenceservices.serving.cinfer.io
k create namespace "$ns" >/dev/null
cat >"$work/isvc.yaml" <<EOF
apiVersion: serving.cinfer.io/v1alpha1
kind: InferenceService
metadata:
  name: stories
spec:
  replicas: 1
  model:
    uri: file:///models/stories260K.gguf
  engine:
    maxNumSeqs: 2
  scaling:
    policy: reactive
    minReplicas: 1
    maxReplicas: 3
    targetQueueDepth: 1
    scaleDownDelaySeconds: $window
EOF
check "InferenceService (reactive, 1..3, targetQueueDepth 1) created" kn apply -f "$work/isvc.yaml"

# --- autoscaler, out of cluster -------------------------------------------------------------------
as_port="$(free_port)"
"$e2e_bin/cinfer-autoscaler" --kubeconfig "$KUBECONFIG" --namespace "$ns" \
	--leader-election-namespace "$ns" --identity ase --interval 1 --scrape-timeout 1 \
	--target "$targets" --probe-addr "127.0.0.1:$as_port" --log-format text >"$work/autoscaler.log" 2>&1 &
as_pid=$!
check "autoscaler ready (leader, caches synced)" wait_for 60 curl -sf "http://127.0.0.1:$as_port/readyz"
check "autoscaler manages the InferenceService" wait_for 30 grep -q "managing" "$work/autoscaler.log"
sleep 3
check "idle engines: replicas stay at 1" replicas_is 1

# --- load: queued requests scale up --------------------------------------------------------------
# start_load: closed loop on engine 0, 8 clients against 2 sequences, so ~6 requests wait.
start_load() {
	"$e2e_root/hack/loadgen" --url "http://127.0.0.1:${engine_ports[0]}" --concurrency 8 \
		--requests 1000000 --prompt-tokens 16 --max-tokens 256 --ignore-eos --timeout 600 \
		>"$work/loadgen$1.log" 2>&1 &
	lg_pid=$!
}
stop_load() {
	kill -TERM "$lg_pid" 2>/dev/null
	wait "$lg_pid" 2>/dev/null
	lg_pid=""
}
waiting_above() { local w; w="$(metric 0 cinfer_requests_waiting)"; [ "${w%.*}" -ge "$1" ] 2>/dev/null; }
waiting_is_zero() { local w; w="$(metric 0 cinfer_requests_waiting)"; [ "${w%.*}" = 0 ]; }

step "load on engine 0"
t_load=$SECONDS
start_load 1
check "load queues requests on engine 0 (cinfer_requests_waiting >= 3)" wait_for 60 waiting_above 3
check "engine 0 runs at most --max-num-seqs 2" bash -c \
	"[ \"\$(curl -sf http://127.0.0.1:${engine_ports[0]}/metrics | awk '/^cinfer_requests_running\\{/ {print \$2; exit}')\" -le 2 ]"
check "queue depth raises spec.replicas to maxReplicas 3" wait_for 60 replicas_is 3
echo "# measured: spec.replicas 1 -> 3 $((SECONDS - t_load)) s after the load started (interval 1 s)"
check "kubectl get cisvc: REPLICAS column shows 3" bash -c \
	"kubectl -n $ns get cisvc stories --no-headers -o custom-columns=R:.spec.replicas | grep -qx 3"
check "kubectl get cisvc: default table has the REPLICAS and READY columns" bash -c \
	"kubectl -n $ns get cisvc stories | head -n1 | grep -q 'REPLICAS.*READY'"
check "status.autoscaling.desiredReplicas is 3" wait_for 10 \
	jp_is cisvc/stories '{.status.autoscaling.desiredReplicas}' 3
check "status.autoscaling.lastScaleTime set" bash -c \
	"[ -n \"\$(kubectl -n $ns get cisvc stories -o jsonpath='{.status.autoscaling.lastScaleTime}')\" ]"
check "status.autoscaling.signals: 3 ready engines" \
	jp_is cisvc/stories '{.status.autoscaling.signals.readyPods}' 3
w="$(jp cisvc/stories '{.status.autoscaling.signals.waiting}')"
check "status.autoscaling.signals.waiting saw the queue ($w)" bash -c "[ \"\${0%.*}\" -ge 1 ]" "${w:-0}"
check "status.autoscaling.reason names the queue" bash -c \
	"kubectl -n $ns get cisvc stories -o jsonpath='{.status.autoscaling.reason}' | grep -qi 'queue\\|waiting'"
check "ScaledUp Event" wait_for 10 has_event ScaledUp
cond_is() { jp_is cisvc/stories "{.status.autoscaling.conditions[?(@.type==\"$1\")].status}/{.status.autoscaling.conditions[?(@.type==\"$1\")].reason}" "$2"; }
check "condition AbleToScale True/ReadyForNewScale" cond_is AbleToScale True/ReadyForNewScale
check "condition ScalingActive True/ValidMetricFound" cond_is ScalingActive True/ValidMetricFound
check "condition ScalingLimited True/TooManyReplicas (the queue asks for more than 3)" wait_for 10 \
	cond_is ScalingLimited True/TooManyReplicas
check "no ObjectiveMet condition without an objective" bash -c \
	"[ -z \"\$(kubectl -n $ns get cisvc stories -o jsonpath='{.status.autoscaling.conditions[?(@.type==\"ObjectiveMet\")].status}')\" ]"
check "ScaledUp Event message names from 1 to 3" bash -c \
	"kubectl -n $ns get events --field-selector involvedObject.name=stories,reason=ScaledUp \
	-o jsonpath='{.items[*].message}' | grep -q 'to 3'"

# --- load gone: back to minReplicas after the window ---------------------------------------------
step "load stopped"
t0=$SECONDS
stop_load
check "load generator served requests without errors" grep -q 'errors: *none' "$work/loadgen1.log"
check "queue drains on engine 0" wait_for 60 waiting_is_zero
sleep 3 # the window runs from the last high recommendation, about when the queue drained
check "no scale-down inside the ${window} s window" replicas_is 3
check "load gone: scale-down to 1 after the window" wait_for 60 replicas_is 1
echo "# measured: scale-down $((SECONDS - t0)) s after the load stopped (window ${window} s, interval 1 s)"
check "ScaledDown Event" wait_for 10 has_event ScaledDown

# --- a dead engine is missing metrics, never a reason to scale down --------------------------------
step "load again, then engine 2 killed"
start_load 2
check "load back: replicas 3 again" wait_for 60 replicas_is 3
kill "${engine_pids[2]}"
wait "${engine_pids[2]}" 2>/dev/null
stop_load
check "queue drains on engine 0 (again)" wait_for 60 waiting_is_zero
sleep $((window + 6)) # longer than the window plus a few rounds
check "engine 2 down and load gone: replicas held at 3" replicas_is 3
check "status reason says metrics are missing" bash -c \
	"kubectl -n $ns get cisvc stories -o jsonpath='{.status.autoscaling.reason}' | grep -q 'missing\\|unavailable'"
check "autoscaler logs the failed scrape" grep -q "scrape failed" "$work/autoscaler.log"
metrics="$(curl -sf "http://127.0.0.1:$as_port/metrics")"
check "autoscaler /metrics counts scrape errors" grep -Eq \
	'cinfer_autoscaler_scrapes_total\{result="error"\} [1-9]' <<<"$metrics"
check "autoscaler /metrics counts successful scrapes" grep -Eq \
	'cinfer_autoscaler_scrapes_total\{result="success"\} [1-9]' <<<"$metrics"
check "autoscaler /metrics: desired replicas 3" grep -q \
	"cinfer_autoscaler_desired_replicas{namespace=\"$ns\",inferenceservice=\"stories\"} 3" <<<"$metrics"
check "autoscaler /metrics: scale-ups and scale-downs counted" bash -c \
	'grep -Eq "cinfer_autoscaler_scale_total\{direction=\"up\"\} [1-9]" <<<"$0" &&
	grep -Eq "cinfer_autoscaler_scale_total\{direction=\"down\"\} [1-9]" <<<"$0"' "$metrics"

step "engine 2 restarted"
start_engine 2
check "engine 2 healthy again" wait_for 60 engine_healthy 2
check "all metrics back: scale-down to 1" wait_for 60 replicas_is 1

# --- the objective alone: missed on one engine, scale-up, met once spread --------------------------
step "objective-driven: ttftSeconds 0.5, no targets"
check "switch to an objective (targetQueueDepth removed)" kn patch cisvc stories --type merge -p \
	'{"spec":{"scaling":{"targetQueueDepth":null,"objectives":{"ttftSeconds":0.5}}}}'
check "status echoes the objective" wait_for 15 jp_is cisvc/stories '{.status.autoscaling.objective.ttftSeconds}' 0.5
check "status: percentile 0.99 (written as 0.99)" bash -c \
	"kubectl -n $ns get cisvc stories -o json | grep -q '\"percentile\": 0.99,'"
check "idle: replicas 1" replicas_is 1
# load_on N C: C closed-loop clients on engine N. Requests of 1536 tokens: a waiter queues behind
# about two of them, which must be well above 0.5 s however fast the engine is (256-token requests
# queued for 0.23 s at p99 once stories260K's attention got fast, and met the objective unscaled).
load_on() {
	"$e2e_root/hack/loadgen" --url "http://127.0.0.1:${engine_ports[$1]}" --concurrency "$2" \
		--requests 1000000 --prompt-tokens 16 --max-tokens 1536 --ignore-eos --timeout 600 \
		>"$work/loadgen-obj$1.log" 2>&1 &
	obj_pids+=($!)
}
stop_obj_load() {
	local p
	for p in "${obj_pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for p in "${obj_pids[@]}"; do wait "$p" 2>/dev/null; done
	obj_pids=()
}
obj_pids=()
t_obj=$SECONDS
load_on 0 6
lg_pid="${obj_pids[*]}" # killed by the cleanup on failure
check "6 clients on one engine queue (cinfer_requests_waiting >= 3)" wait_for 60 waiting_above 3
check "objective missed: status.autoscaling.objective.state Missed" wait_for 240 \
	jp_is cisvc/stories '{.status.autoscaling.objective.state}' Missed
check "condition ObjectiveMet False/ObjectiveMissed" wait_for 10 cond_is ObjectiveMet False/ObjectiveMissed
check "the objective alone raises spec.replicas to 3" wait_for 90 replicas_is 3
echo "# measured: objective-driven 1 -> 3 $((SECONDS - t_obj)) s after the load started (interval 1 s)"
check "status.autoscaling.reason names the objective" bash -c \
	"kubectl -n $ns get cisvc stories -o jsonpath='{.status.autoscaling.reason}' | grep -q 'objective'"
check "status.autoscaling.capacity.workPerReplica learned" bash -c \
	"[ -n \"\$(kubectl -n $ns get cisvc stories -o jsonpath='{.status.autoscaling.capacity.workPerReplica}')\" ]"
o="$(jp cisvc/stories '{.status.autoscaling.objective.observedTTFTSeconds}')"
f="$(jp cisvc/stories '{.status.autoscaling.objective.ttftAboveFraction}')"
check "status reports the observed TTFT ($o s at p99) and the share above ($f, over the 0.01 budget)" \
	bash -c 'awk -v v="$0" -v f="$1" "BEGIN { exit !(v > 0 && f > 0.01) }"' "${o:-0}" "${f:-0}"
step "the same 6 clients, 2 per engine (as a router spreads them over 3 replicas)"
stop_obj_load
load_on 0 2
load_on 1 2
load_on 2 2
lg_pid="${obj_pids[*]}"
# The judgement is smoothed over ~45 s: from a heavy miss it takes about three minutes to come back.
t_met=$SECONDS
# Whether 2 clients per engine meet 0.5 s depends on how busy the machine is: on a loaded one they
# do not, and then Missed is the right judgement. What is checked is that the judgement follows
# the TTFT the autoscaler observed; the Met transition itself only where the machine allows it.
if wait_for 300 jp_is cisvc/stories '{.status.autoscaling.objective.state}' Met; then
	ok "spread over 3 engines: objective Met"
	echo "# measured: Missed -> Met $((SECONDS - t_met)) s after the load was spread"
	check "condition ObjectiveMet True/ObjectiveMet" wait_for 10 cond_is ObjectiveMet True/ObjectiveMet
else
	# One status write holds the state and the numbers it was judged on (it lags by up to 30 s).
	state="$(jp cisvc/stories '{.status.autoscaling.objective.state}')"
	o="$(jp cisvc/stories '{.status.autoscaling.objective.observedTTFTSeconds}')"
	f="$(jp cisvc/stories '{.status.autoscaling.objective.ttftAboveFraction}')"
	echo "# status.autoscaling.objective: $(jp cisvc/stories '{.status.autoscaling.objective}')"
	echo "# capacity: $(jp cisvc/stories '{.status.autoscaling.capacity}')"
	echo "# condition: $(jp cisvc/stories '{.status.autoscaling.conditions[?(@.type=="ObjectiveMet")]}')"
	case "$state" in
	Missed)
		check "still Missed after 300 s: the observed TTFT ($o s at p99, $f above 0.5 s) misses the objective" \
			bash -c 'awk -v v="$0" -v f="$1" "BEGIN { exit !(v > 0.5 && f > 0.01) }"' "${o:-0}" "${f:-0}"
		echo "SKIP: spread over 3 engines: objective Met (this machine is too loaded for 2 clients per engine to meet 0.5 s)"
		;;
	Unknown)
		# Too few first tokens per smoothing window to judge (a loaded machine finishes few of the
		# 1536-token requests).
		echo "SKIP: spread over 3 engines: objective Met (state $state with $f above 0.5 s: this machine is too loaded to judge)"
		;;
	Infeasible)
		# The misses of requests that waited for a slot are no floor (b0aad65: CI saw this state).
		not_ok "objective Infeasible after 300 s with $f above 0.5 s: queued requests' misses became the floor"
		;;
	*) not_ok "objective state after 300 s is '$state' (TTFT $o s at p99, $f above 0.5 s)" ;;
	esac
	echo "SKIP: condition ObjectiveMet True/ObjectiveMet"
fi
stop_obj_load
lg_pid=""
for i in 0 1 2; do
	check "objective load on engine $i served without errors" grep -q 'errors: *none' "$work/loadgen-obj$i.log"
done

# --- clean shutdown -------------------------------------------------------------------------------
kill -TERM "$as_pid"
wait "$as_pid"
rc=$?
as_pid=""
check "autoscaler exits 0 on SIGTERM" [ "$rc" -eq 0 ]
for i in 0 1 2; do
	kill -TERM "${engine_pids[i]}"
	wait "${engine_pids[i]}"
	rc=$?
	check "engine $i exits 0 on SIGTERM" [ "$rc" -eq 0 ]
done
engine_pids=()
check "no sanitizer reports in the engine logs" bash -c '! grep -l "ERROR: AddressSanitizer\|runtime error:\|LeakSanitizer" "$0"/engine*.log' "$work"

if [ "$failed" -ne 0 ]; then
	for f in "$work"/autoscaler.log "$work"/engine*.log "$work"/loadgen*.log; do
		echo "--- $f (last 25 lines)"
		tail -n 25 "$f"
	done
fi
summary
