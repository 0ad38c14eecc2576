#!/usr/bin/env bash
# cinfer-operator against a real API server and kube-controller-manager (hack/control-plane.sh), with
# real kubectl: CRD install and validation, examples reconciled into Deployments and Services,
# printer columns, spec edits rolling out, kubectl scale through the /scale subresource, manual edits
# of owned fields reverted while other fields are left alone, readiness and Degraded reasons from pod
# status (no kubelet runs here, so the test writes pod status through the API as a kubelet would),
# Events, garbage collection on delete, and leader election between two replicas. Hardening: bad
# specs refused naming the field, the API key from a Secret in the environment, verify-model for a
# checksum on a volume model, sizes and resources, the shutdown delay and grace period, the
# NetworkPolicy per InferenceService (as objects: no CNI enforces them here) and its removal with
# --network-policy=false, a namespace list.
set -uo pipefail
source "$(dirname "$0")/lib.sh"

ns=cinfer-e2e
op_pids=()
cleanup_extra() {
	local p
	for p in "${op_pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
}
if ! control_plane_up; then
	not_ok "control plane up"
	summary
	exit 1
fi
k() { kubectl --request-timeout=20s "$@"; }
kn() { k -n "$ns" "$@"; }
logdir="$(mktemp -d /tmp/cinfer-operator-e2e.XXXXXX)"

# start_operator NAME PORT [ARGS...]: runs the operator in the background, logging to $logdir/NAME.log
start_operator() {
	local name="$1" port="$2"
	shift 2
	"$e2e_bin/cinfer-operator" --kubeconfig "$KUBECONFIG" --namespace "$ns" \
		--probe-addr "127.0.0.1:$port" --engine-image cinfer-engine:e2e --log-format text \
		--leader-election-namespace "$ns" "$@" >"$logdir/$name.log" 2>&1 &
	op_pids+=($!)
}
readyz() { curl -sf "http://127.0.0.1:$1/readyz" >/dev/null; }
jp() { kn get "$1" -o "jsonpath=$2" 2>/dev/null; }
jp_is() { [ "$(jp "$1" "$2")" = "$3" ]; }
jp_has() { jp "$1" "$2" | grep -qF -- "$3"; }
cond() { jp "cisvc/$1" "{.status.conditions[?(@.type==\"$2\")].status}/{.status.conditions[?(@.type==\"$2\")].reason}"; }
cond_is() { [ "$(cond "$1" "$2")" = "$3" ]; }

# --- CRD ---------------------------------------------------------------------------------------
check "CRD applies" k apply -f "$e2e_root/crds/serving.cinfer.io_inferenceservices.yaml"
check "CRD established" k wait --for=condition=Established --timeout=30s \
	crd/inferenceservices.serving.cinfer.io
k create namespace "$ns" >/dev/null
for bad in "$e2e_root"/tests/testdata/crd-invalid/*.yaml; do
	field="$(sed -n 's/^# expect: //p' "$bad")"
	if [ -z "$field" ]; then
		not_ok "invalid $(basename "$bad"): no '# expect: ' line"
		continue
	fi
	out="$(kn apply -f "$bad" 2>&1)"
	if [ $? -ne 0 ] && grep -qF "$field" <<<"$out"; then
		ok "invalid $(basename "$bad") rejected naming $field"
	else
		not_ok "invalid $(basename "$bad") rejected naming $field: $out"
	fi
done

# The checksum applies to every source now (verify-model for file:// and pvc://).
check "sha256 on a file:// model accepted" bash -c 'sed "s/^# expect: .*//; s/name: sha-uppercase/name: sha-file/; s/sha256: .*/sha256: $1/" \
	"$0" | kubectl -n "$2" apply --dry-run=server -f -' "$e2e_root/tests/testdata/crd-invalid/sha-uppercase.yaml" \
	"$(printf 'ab%.0s' {1..32})" "$ns"
check "speculative ngram with numTokens accepted" bash -c 'kubectl -n "$0" apply --dry-run=server -f - <<YAML
apiVersion: serving.cinfer.io/v1alpha1
kind: InferenceService
metadata: {name: spec-ngram}
spec: {model: {uri: "file:///models/m.gguf"}, engine: {speculative: {method: ngram, numTokens: 16}}}
YAML' "$ns"
check "speculative draftModel.tokenSecretRef.key defaults to HF_TOKEN" bash -c 'kubectl -n "$0" apply --dry-run=server \
	-o jsonpath="{.spec.engine.speculative.draftModel.tokenSecretRef.key}" -f - <<YAML | grep -qx HF_TOKEN
apiVersion: serving.cinfer.io/v1alpha1
kind: InferenceService
metadata: {name: spec-draft}
spec:
  model: {uri: "file:///models/m.gguf"}
  engine: {speculative: {method: draft, draftModel: {uri: "hf://o/r/d.gguf", tokenSecretRef: {name: t}}}}
YAML' "$ns"
check "apiKeySecretRef.key defaults to api-key" bash -c 'kubectl -n "$0" apply --dry-run=server -o jsonpath="{.spec.security.apiKeySecretRef.key}" \
	-f "$1" | grep -qx api-key' "$ns" "$e2e_root/crds/examples/secured.yaml"

# --- reconcile against the live API server: 409 on a stale cache is reported, then converges ----
live_test="$e2e_root/${CINFER_BUILD:-build}/tests/operator/test_reconcile_live"
if out="$(CINFER_K8S_LIVE_KUBECONFIG="$KUBECONFIG" "$live_test" 2>&1)" &&
	grep -q "100%: Checks: 2, Failures: 0, Errors: 0" <<<"$out"; then
	ok "reconcile: stale-cache status write gets 409 Conflict and is retried; namespace lists and NetworkPolicies"
else
	not_ok "reconcile: stale-cache conflict: $out"
fi

# --- operator reconciles the examples ----------------------------------------------------------
port1="$(free_port)"
start_operator op1 "$port1" --identity op1
check "operator ready (leader, caches synced)" wait_for 30 readyz "$port1"
check "examples apply" kn apply -f "$e2e_root/crds/examples/"
for name in stories qwen-gpu llama-pvc chat secured qwen-spec; do
	check "$name: Deployment created" wait_for 30 kn get "deploy/$name"
	check "$name: Service created" wait_for 30 kn get "svc/$name"
	check "$name: NetworkPolicy created, owned" wait_for 30 jp_is "networkpolicy/$name" \
		'{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}' "InferenceService/$name"
done
check "Deployment owned by its InferenceService" \
	jp_is deploy/stories '{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].controller}' \
	"InferenceService/true"
check "contract labels" jp_is deploy/stories \
	'{.metadata.labels.app\.kubernetes\.io/managed-by},{.metadata.labels.serving\.cinfer\.io/inferenceservice}' \
	"cinfer-operator,stories"
check "engine args carry the model path" jp_has deploy/stories '{.spec.template.spec.containers[0].args}' \
	'"--model","/models/stories260K.gguf"'
check "engine image from the operator flag" jp_is deploy/stories \
	'{.spec.template.spec.containers[0].image}' "cinfer-engine:e2e"
check "readiness probe on /health" jp_is deploy/stories \
	'{.spec.template.spec.containers[0].readinessProbe.httpGet.path}' "/health"
check "GPU resources passed through" jp_is deploy/qwen-gpu \
	'{.spec.template.spec.containers[0].resources.limits.nvidia\.com/gpu}' "1"
check "hf:// model fetched by an init container" jp_is deploy/qwen-gpu \
	'{.spec.template.spec.initContainers[0].name}' "fetch-model"
check "pvc:// model mounted read-only" jp_is deploy/llama-pvc \
	'{.spec.template.spec.volumes[0].persistentVolumeClaim.claimName}/{.spec.template.spec.volumes[0].persistentVolumeClaim.readOnly}' \
	"models/true"
check "speculative: the engine gets --speculative, --num-speculative-tokens, --draft-model" jp_has deploy/qwen-spec \
	'{.spec.template.spec.containers[0].args}' '"--speculative","draft","--num-speculative-tokens","4","--draft-model","/draft-model/draft.gguf"'
check "speculative: the draft model fetched after the model, into its own volume" jp_is deploy/qwen-spec \
	'{.spec.template.spec.initContainers[*].name} {.spec.template.spec.initContainers[1].args} {.spec.template.spec.volumes[?(@.name=="draft-model")].emptyDir.sizeLimit}' \
	'fetch-model fetch-draft-model ["fetch-model","hf://Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q8_0.gguf","/draft-model/draft.gguf","--max-bytes","734003200"] 770Mi'
check "speculative: the draft's size counts in memory ((1100 + 700 + 512 + 112.5) + 1024 -> 3449Mi)" jp_is deploy/qwen-spec \
	'{.spec.template.spec.containers[0].resources.limits.memory}' "3449Mi"
# --- hardening: shutdown, API key, checksum, sizes, NetworkPolicy ---------------------------------
check "engines serve on 10 s after SIGTERM (--shutdown-delay-seconds)" jp_has deploy/stories \
	'{.spec.template.spec.containers[0].args}' '"--shutdown-delay-seconds","10","--shutdown-timeout","30"'
check "grace period covers delay + timeout + margin (55 s), no preStop" jp_is deploy/stories \
	'{.spec.template.spec.terminationGracePeriodSeconds}/{.spec.template.spec.containers[0].lifecycle}' "55/"
check "API key from its Secret, in the environment" jp_is deploy/secured \
	'{.spec.template.spec.containers[0].env[?(@.name=="CINFER_ENGINE_API_KEY")].valueFrom.secretKeyRef.name}/{.spec.template.spec.containers[0].env[?(@.name=="CINFER_ENGINE_API_KEY")].valueFrom.secretKeyRef.key}' \
	"secured-api-key/api-key"
check "API key never in the args" bash -c '! kubectl -n "$0" get deploy/secured -o jsonpath="{.spec.template.spec.containers[0].args}" | grep -qi "api.key"' "$ns"
check "pvc:// model with sha256: verify-model runs before the engine" jp_is deploy/secured \
	'{.spec.template.spec.initContainers[0].name} {.spec.template.spec.initContainers[0].args}' \
	'verify-model ["fetch-model","--verify","/models/llama-3.2-1b-instruct-q4_k_m.gguf","--sha256","6f85a640a97cf2bf5b8e764087b1e83da0fdb51d7c9fab7d0fece9385611df83"]'
check "memory from sizeBytes + kvCacheBytes + overhead (808 + 1024 + 562.5 -> 2395Mi)" jp_is deploy/secured \
	'{.spec.template.spec.containers[0].resources.requests.memory}/{.spec.template.spec.containers[0].resources.limits.memory}/{.spec.template.spec.containers[0].resources.requests.cpu}' \
	"2395Mi/2395Mi/1"
check "the user's resources win (llama-pvc: cpu 4, memory 4Gi, no defaults)" jp_is deploy/llama-pvc \
	'{.spec.template.spec.containers[0].resources}' '{"requests":{"cpu":"4","memory":"4Gi"}}'
check "download volume limited (qwen-gpu: no sizeBytes: 64Gi + 10%)" jp_is deploy/qwen-gpu \
	'{.spec.template.spec.volumes[?(@.name=="model")].emptyDir.sizeLimit}' "72090Mi"
check "fetch-model gets the same byte limit" jp_has deploy/qwen-gpu \
	'{.spec.template.spec.initContainers[0].args}' '"--max-bytes","68719476736"'
check "NetworkPolicy selects the engine pods, ingress only" jp_is networkpolicy/secured \
	'{.spec.podSelector.matchLabels.serving\.cinfer\.io/inferenceservice}/{.spec.policyTypes}' 'secured/["Ingress"]'
# The operator's own namespace: out of cluster, its kubeconfig's ("default"); the chart passes the
# release namespace (tests/e2e/helm.sh).
check "NetworkPolicy admits the router and autoscaler of the operator's namespace" jp_is networkpolicy/secured \
	'{.spec.ingress[0].from[0].namespaceSelector.matchLabels.kubernetes\.io/metadata\.name}/{.spec.ingress[0].from[0].podSelector.matchLabels.app\.kubernetes\.io/name} {.spec.ingress[0].from[1].namespaceSelector.matchLabels.kubernetes\.io/metadata\.name}/{.spec.ingress[0].from[1].podSelector.matchLabels.app\.kubernetes\.io/component}' \
	"default/cinfer-router default/autoscaler"
check "NetworkPolicy admits the listed namespace, on the engine port only" jp_is networkpolicy/secured \
	'{.spec.ingress[0].from[2].namespaceSelector.matchLabels.kubernetes\.io/metadata\.name} {.spec.ingress[0].ports[0].port}' "apps 8000"
check "without allowedNamespaces: router and autoscaler only" jp_is networkpolicy/stories \
	'{.spec.ingress[0].from[*].podSelector.matchLabels.app\.kubernetes\.io/name}' "cinfer-router"
echo "# NetworkPolicies are checked as objects: this control plane has no CNI to enforce them"
check "Service selects the engine pods on port 80" jp_is svc/stories \
	'{.spec.ports[0].port}/{.spec.selector.serving\.cinfer\.io/inferenceservice}' "80/stories"
check "status url and selector" wait_for 30 jp_is cisvc/stories '{.status.url}' \
	"http://stories.$ns.svc.cluster.local"
check "status selector" jp_is cisvc/stories '{.status.selector}' \
	"app.kubernetes.io/name=cinfer-engine,serving.cinfer.io/inferenceservice=stories"
check "Ready=False while no pod is ready" wait_for 30 cond_is stories Ready "False/WaitingForReplicas"
header="$(kn get cisvc 2>&1 | head -1)"
check "printer columns" grep -qE 'NAME +MODEL +REPLICAS +READY +URL +REASON +AGE' <<<"$header"
check "category 'cinfer' lists it" wait_for 10 sh -c "kubectl -n $ns get cinfer | grep -q stories"

# --- spec edits roll out; /scale drives replicas ------------------------------------------------
gen_before="$(jp deploy/stories '{.metadata.generation}')"
kn patch cisvc stories --type merge -p '{"spec":{"engine":{"maxNumSeqs":7}}}' >/dev/null
check "spec edit reaches the Deployment" wait_for 30 jp_has deploy/stories \
	'{.spec.template.spec.containers[0].args}' '"--max-num-seqs","7"'
check "spec edit rolls the Deployment" [ "$(jp deploy/stories '{.metadata.generation}')" -gt "$gen_before" ]
check "kubectl scale cisvc" kn scale cisvc/stories --replicas=3
check "Deployment follows /scale" wait_for 30 jp_is deploy/stories '{.spec.replicas}' 3
check "scale subresource reads back" wait_for 30 sh -c \
	"kubectl -n $ns get --raw /apis/serving.cinfer.io/v1alpha1/namespaces/$ns/inferenceservices/stories/scale | grep -q '\"replicas\":3'"

# --- owned fields are reverted, others left alone -----------------------------------------------
kn annotate deploy/stories example.com/keep=yes >/dev/null
kn patch deploy/stories --type strategic -p \
	'{"spec":{"template":{"spec":{"containers":[{"name":"engine","image":"tampered:1"}]}}}}' >/dev/null
check "manual image edit reverted" wait_for 30 jp_is deploy/stories \
	'{.spec.template.spec.containers[0].image}' "cinfer-engine:e2e"
check "foreign annotation left alone" jp_is deploy/stories '{.metadata.annotations.example\.com/keep}' yes

# --- readiness and degradation from pod status (written as a kubelet would) ---------------------
pods_of() { kn get pods -l "serving.cinfer.io/inferenceservice=$1" -o name 2>/dev/null; }
have_pods() { [ "$(pods_of "$1" | wc -l)" -ge "$2" ]; }
check "ReplicaSet created the pods" wait_for 60 have_pods stories 3
now="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
for p in $(pods_of stories); do
	kn patch "$p" --subresource=status --type merge -p "{\"status\":{\"phase\":\"Running\",
	  \"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"lastTransitionTime\":\"$now\"},
	  {\"type\":\"ContainersReady\",\"status\":\"True\",\"lastTransitionTime\":\"$now\"},
	  {\"type\":\"PodScheduled\",\"status\":\"True\",\"lastTransitionTime\":\"$now\"}]}}" \
		>/dev/null 2>&1 # pods of the replaced ReplicaSet may vanish meanwhile
done
check "Ready=True once pods are ready" wait_for 60 cond_is stories Ready "True/Serving"
check "readyReplicas counted" wait_for 30 jp_is cisvc/stories '{.status.readyReplicas}' 3
check "Degraded=False" cond_is stories Degraded "False/AsExpected"
check "Ready event recorded" wait_for 30 sh -c \
	"kubectl -n $ns get events --field-selector involvedObject.name=stories,reason=Serving -o name | grep -q ."

check "chat pod created" wait_for 60 have_pods chat 1
p="$(pods_of chat | head -1)"
kn patch "$p" --subresource=status --type merge -p '{"status":{"phase":"Pending",
  "initContainerStatuses":[{"name":"fetch-model","ready":false,"restartCount":0,"image":"x","imageID":"",
    "state":{"waiting":{"reason":"ImagePullBackOff","message":"Back-off pulling image \"cinfer-engine:e2e\""}}}]}}' \
	>/dev/null
check "ImagePullBackOff surfaces as Degraded" wait_for 30 cond_is chat Degraded "True/ImagePullBackOff"
check "Degraded message names the pod" jp_has cisvc/chat \
	'{.status.conditions[?(@.type=="Degraded")].message}' "${p#pod/}"
check "Warning event recorded" wait_for 30 sh -c \
	"kubectl -n $ns get events --field-selector involvedObject.name=chat,type=Warning -o name | grep -q ."
# The download runs and fails: the init container crash-loops.
kn patch "$p" --subresource=status --type merge -p '{"status":{"phase":"Pending",
  "initContainerStatuses":[{"name":"fetch-model","ready":false,"restartCount":3,"image":"x","imageID":"",
    "lastState":{"terminated":{"exitCode":1,"reason":"Error"}},
    "state":{"waiting":{"reason":"CrashLoopBackOff","message":"back-off 40s restarting failed container"}}}]}}' \
	>/dev/null
check "failing download surfaces as ModelFetchFailed" wait_for 30 cond_is chat Degraded "True/ModelFetchFailed"
check "pod still not ready: Ready names the cause" cond_is chat Ready "False/ModelFetchFailed"
check "llama-pvc pod created" wait_for 60 have_pods llama-pvc 1
p2="$(pods_of llama-pvc | head -1)"
kn patch "$p2" --subresource=status --type merge -p '{"status":{"phase":"Running",
  "containerStatuses":[{"name":"engine","ready":false,"restartCount":5,"image":"x","imageID":"",
    "state":{"waiting":{"reason":"CrashLoopBackOff","message":"back-off 5m0s restarting failed container"}}}]}}' \
	>/dev/null
check "CrashLoopBackOff surfaces as Degraded" wait_for 30 cond_is llama-pvc Degraded "True/CrashLoopBackOff"

# --- leader election: a second replica waits, then takes over ------------------------------------
port2="$(free_port)"
start_operator op2 "$port2" --identity op2
sleep 3
check "second replica is not ready while the first leads" bash -c "! curl -sf http://127.0.0.1:$port2/readyz"
check "lease held by the first replica" jp_is lease/cinfer-operator '{.spec.holderIdentity}' op1
check "follower waits without starting its controller" bash -c \
	"grep -q 'waiting for leadership' $logdir/op2.log && ! grep -q 'controller started' $logdir/op2.log"
kill -TERM "${op_pids[0]}"
wait "${op_pids[0]}"
check "first replica exits 0 on SIGTERM" [ $? -eq 0 ]
check "second replica takes over" wait_for 30 readyz "$port2"
check "lease held by the second replica" jp_is lease/cinfer-operator '{.spec.holderIdentity}' op2
kn patch cisvc stories --type merge -p '{"spec":{"engine":{"maxNumSeqs":9}}}' >/dev/null
check "new leader reconciles" wait_for 30 jp_has deploy/stories \
	'{.spec.template.spec.containers[0].args}' '"--max-num-seqs","9"'

# --- the API server restarts: watches recover and later changes are still reconciled -----------
restart_apiserver() {
	local pidfile="$CINFER_CP_DIR/pids/kube-apiserver" pid args
	pid="$(cat "$pidfile")"
	mapfile -d '' args <"/proc/$pid/cmdline"
	# A graceful stop waits for open watches to drain; after 10 s it is a crash, which is fine too.
	kill -TERM "$pid"
	wait_for 10 bash -c "! kill -0 $pid 2>/dev/null" || kill -KILL "$pid"
	wait_for 10 bash -c "! kill -0 $pid 2>/dev/null" || return 1
	sleep 11 # longer than the 10 s renew deadline: watches break, reconnects fail, leases lapse
	"${args[@]}" >>"$CINFER_CP_DIR/logs/kube-apiserver.log" 2>&1 &
	echo $! >"$pidfile"
	disown
	wait_for 60 kubectl get --raw /readyz || {
		tail -n 20 "$CINFER_CP_DIR/logs/kube-apiserver.log"
		return 1
	}
}
# op3 runs without leader election, so it keeps reconciling across an outage longer than the renew
# deadline; op2 (the elected leader) must give up instead, exiting non-zero (client-go semantics).
port3="$(free_port)"
start_operator op3 "$port3" --leader-elect=false
check "operator without election ready" wait_for 30 readyz "$port3"
check "API server restarted" restart_apiserver
kn patch cisvc stories --type merge -p '{"spec":{"engine":{"maxNumSeqs":11}}}' >/dev/null
check "change after the restart reconciled" wait_for 60 jp_has deploy/stories \
	'{.spec.template.spec.containers[0].args}' '"--max-num-seqs","11"'
kn apply -f - >/dev/null <<'YAML'
apiVersion: serving.cinfer.io/v1alpha1
kind: InferenceService
metadata:
  name: after-restart
spec:
  model:
    uri: file:///models/m.gguf
YAML
check "object created after the restart reconciled" wait_for 60 kn get deploy/after-restart
wait_for 30 bash -c "! kill -0 ${op_pids[1]} 2>/dev/null"
wait "${op_pids[1]}"
rc=$?
check "leader that could not renew its lease exited non-zero" [ "$rc" -ne 0 ]
check "its log says why" grep -q "lost leader lease" "$logdir/op2.log"
check "operator without election still serving" readyz "$port3"

# --- --network-policy=false: the operator removes the policies it made, and only those ----------
kill -TERM "${op_pids[2]}"
wait "${op_pids[2]}"
kn apply -f - >/dev/null <<'YAML'
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: someone-elses
spec:
  podSelector: {}
YAML
port4="$(free_port)"
start_operator op4 "$port4" --leader-elect=false --network-policy=false
check "operator with --network-policy=false ready" wait_for 30 readyz "$port4"
check "its NetworkPolicies deleted" wait_for 30 bash -c \
	'[ -z "$(kubectl -n "$0" get networkpolicy -l app.kubernetes.io/managed-by=cinfer-operator -o name)" ]' "$ns"
check "a NetworkPolicy it did not make stays" kn get networkpolicy/someone-elses
check "Deployments stay" kn get deploy/stories deploy/secured
kill -TERM "${op_pids[3]}"
wait "${op_pids[3]}"

# --- a namespace list: --namespace a,b reconciles both and nothing elsewhere ---------------------
ns2="$ns-two" ns3="$ns-three" ns4="$ns-four"
for n in "$ns2" "$ns3" "$ns4"; do
	k create namespace "$n" >/dev/null
	sed "s/name: stories/name: in-$n/" "$e2e_root/crds/examples/minimal.yaml" | k -n "$n" apply -f - >/dev/null
done
port5="$(free_port)"
start_operator op5 "$port5" --leader-elect=false --namespace "$ns2,$ns3"
check "operator watching $ns2,$ns3 ready" wait_for 30 readyz "$port5"
check "it reconciles in $ns2" wait_for 30 k -n "$ns2" get "deploy/in-$ns2" "networkpolicy/in-$ns2"
check "it reconciles in $ns3" wait_for 30 k -n "$ns3" get "deploy/in-$ns3"
check "it leaves $ns4 alone" bash -c '! kubectl -n "$0" get "deploy/in-$0" 2>/dev/null' "$ns4"
check "it logs the list" grep -q "namespace=$ns2,$ns3" "$logdir/op5.log"
kill -TERM "${op_pids[4]}"
wait "${op_pids[4]}"
"$e2e_bin/cinfer-operator" --kubeconfig "$KUBECONFIG" --namespace "$ns2,,$ns3" >"$logdir/bad-ns.log" 2>&1
check "a malformed namespace list is refused (exit 2)" [ $? -eq 2 ]

# --- delete: garbage collection removes owned objects -------------------------------------------
kn delete cisvc stories secured --wait=false >/dev/null
check "Deployment garbage-collected" wait_for 60 bash -c "! kubectl -n $ns get deploy/stories 2>/dev/null"
check "Service garbage-collected" wait_for 60 bash -c "! kubectl -n $ns get svc/stories 2>/dev/null"

if [ "$failed" -gt 0 ]; then
	for f in "$logdir"/*.log; do
		echo "--- $f (tail)"
		tail -n 30 "$f"
	done
fi
rm -rf "$logdir"
summary
