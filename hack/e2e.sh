#!/usr/bin/env bash
# shellcheck disable=SC2016 # the bash -c scripts below take their arguments as $0, $1, ...
# Whole-system end-to-end test (issue #7): the Helm chart, the operator, the autoscaler and a real
# engine on stories260K against a real API server + etcd + kube-controller-manager on loopback
# (hack/control-plane.sh). There is no kubelet and no container runtime, so this script plays the
# kubelet's part for the one engine pod: it reads the pod's command from the Deployment the operator
# wrote, runs it as a local process, probes its readiness path and reports the pod Running and Ready
# through pods/status. The operator and the autoscaler run out of cluster with the args of the
# Deployments Helm installed and the tokens of the chart's ServiceAccounts.
#
# Steps: helm install (CRD from the chart) -> crds/examples/minimal.yaml applied -> Deployment and
# Service -> engine settings and scaling patched in, the Deployment rolls out -> the engine runs the
# Deployment's command -> Pod Ready -> InferenceService Ready -> a completion (curl and the OpenAI
# SDK) -> hack/loadgen load -> the autoscaler raises spec.replicas and the operator the Deployment's
# -> helm upgrade changes the operator's Deployment, and the operator restarted with the new args
# changes the engine Deployment -> helm uninstall leaves the CRD and the InferenceService -> deleting
# the CRD removes the InferenceService and, by garbage collection, its Deployment and Service.
#
#   CINFER_BUILD=build CINFER_SHARED=/work/shared CINFER_VENV=build/venv hack/e2e.sh
#
# Prints one "ok - ..." / "not ok - ..." line per check and "# HH:MM:SS step" lines, then
# "e2e: N passed, M failed"; exits non-zero when anything failed. Skips (0 passed, 0 failed) when
# stories260K is absent.
set -uo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/../tests/e2e/lib.sh"

model="${CINFER_SHARED:-$e2e_root/../shared}/models/tinyllamas/stories260K.gguf"
venv="${CINFER_VENV:-$e2e_root/build/venv}"
chart="$e2e_root/charts/cinfer"
values="$e2e_root/tests/testdata/system/values.yaml"
ns=cinfer-system # release namespace
wns=llm          # namespace of the InferenceService
rel=r1
op_pid=""
as_pid=""
engine_pid=""
lg_pid=""
watch_pid=""
work=""
cleanup_extra() {
	local p
	for p in $op_pid $as_pid $engine_pid $lg_pid $watch_pid; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	[[ -z "$work" ]] || rm -rf "$work"
}
step() { echo "# $(date +%T) $*"; }

if [ ! -r "$model" ]; then
	echo "SKIP: $model not present (shared test data is optional)"
	summary
	exit
fi
for b in cinfer-engine cinfer-operator cinfer-autoscaler; do
	if [ ! -x "$e2e_bin/$b" ]; then
		not_ok "binary $e2e_bin/$b not built (make -j2)"
		summary
		exit 1
	fi
done
step "helm"
if ! helm_dir="$("$e2e_root/hack/build-helm.sh" --print-bin-dir)"; then
	not_ok "build helm (hack/build-helm.sh)"
	summary
	exit 1
fi
step "control plane"
if ! control_plane_up; then
	not_ok "control plane up"
	summary
	exit 1
fi
work="$(mktemp -d /tmp/cinfer-system-e2e.XXXXXX)"
# A timeout's SIGTERM (hack/run-tests.sh) or ^C still runs the EXIT trap: processes stopped, control
# plane down.
trap 'exit 143' TERM
trap 'exit 130' INT
export HELM_CACHE_HOME="$work/helm/cache" HELM_CONFIG_HOME="$work/helm/config" HELM_DATA_HOME="$work/helm/data"
h() { "$helm_dir/helm" --kubeconfig "$KUBECONFIG" "$@"; }
k() { kubectl --request-timeout=20s "$@"; }
kw() { k -n "$wns" "$@"; }
jp() { kw get "$1" -o "jsonpath=$2" 2>/dev/null; }
jp_is() { [ "$(jp "$1" "$2")" = "$3" ]; }
gone() { ! k "$@" >/dev/null 2>&1; }
readyz() { curl -sf "http://127.0.0.1:$1/readyz" >/dev/null; }
# json_of OBJ... > FILE: kubectl get -o json
json_of() { k get "$@" -o json; }
# deploy_args FILE CONTAINER: that container's args (one a line), --probe-addr moved to loopback
# port $3, as the program would run in its pod.
deploy_args() {
	python3 - "$@" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
c = [c for c in d["spec"]["template"]["spec"]["containers"] if c["name"] == sys.argv[2]][0]
for a in c.get("args", []):
    if a.startswith("--probe-addr="):
        a = "--probe-addr=127.0.0.1:" + sys.argv[3]
    print(a)
EOF
}

# --- helm install ----------------------------------------------------------------------------------
step "helm install $rel (values: tests/testdata/system/values.yaml)"
if out="$(h install "$rel" "$chart" -n "$ns" --create-namespace -f "$values" 2>&1)"; then
	ok "helm install $rel"
else
	not_ok "helm install $rel: $out"
fi
check "CRD installed from the chart's crds/" k wait --for=condition=Established --timeout=30s \
	crd/inferenceservices.serving.cinfer.io
check "helm list: $rel deployed, revision 1" bash -c '"$0" --kubeconfig "$1" list -n "$2" -o json |
	grep -q "\"name\":\"r1\".*\"revision\":\"1\".*\"status\":\"deployed\""' "$helm_dir/helm" "$KUBECONFIG" "$ns"
for o in deploy/$rel-cinfer-operator deploy/$rel-cinfer-autoscaler sa/$rel-cinfer-operator \
	sa/$rel-cinfer-autoscaler; do
	check "installed: $o" k -n "$ns" get "$o"
done
check "kube-controller-manager creates the operator's Pod (Pending: no kubelet)" wait_for 30 bash -c \
	'[ -n "$(kubectl -n "$0" get pods -l app.kubernetes.io/component=operator -o name)" ]' "$ns"

# token_kubeconfig SA FILE: a kubeconfig with SA's token (from the release namespace)
token_kubeconfig() {
	local token server ca
	token="$(k -n "$ns" create token "$1" --duration=1h)" || return 1
	server="$(k config view --minify --raw -o jsonpath='{.clusters[0].cluster.server}')"
	ca="$(k config view --minify --raw --flatten -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')"
	[ -n "$token" ] && [ -n "$server" ] && [ -n "$ca" ] || return 1
	(
		umask 077
		cat >"$2" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: cp, cluster: {server: "$server", certificate-authority-data: "$ca"}}]
users: [{name: "$1", user: {token: "$token"}}]
contexts: [{name: "$1", context: {cluster: cp, user: "$1", namespace: "$ns"}}]
current-context: "$1"
EOF
	)
}
check "operator ServiceAccount token" token_kubeconfig "$rel-cinfer-operator" "$work/operator.kubeconfig"
check "autoscaler ServiceAccount token" token_kubeconfig "$rel-cinfer-autoscaler" "$work/autoscaler.kubeconfig"

# start_operator: the operator with the args of the installed Deployment and its token.
op_port="$(free_port)"
start_operator() {
	local args
	json_of -n "$ns" deploy/$rel-cinfer-operator >"$work/op-deploy.json" || return 1
	mapfile -t args < <(deploy_args "$work/op-deploy.json" operator "$op_port")
	[ "${#args[@]}" -ge 5 ] || return 1
	printf '%s\n' "${args[@]}" >"$work/operator.args"
	"$e2e_bin/cinfer-operator" --kubeconfig "$work/operator.kubeconfig" "${args[@]}" \
		>>"$work/operator.log" 2>&1 &
	op_pid=$!
}
stop_operator() {
	kill -TERM "$op_pid" 2>/dev/null
	wait "$op_pid" 2>/dev/null
	local rc=$?
	op_pid=""
	return $rc
}
step "operator out of cluster"
# start_operator sets op_pid, so it runs in this shell, not under check (a subshell).
if start_operator; then ok "operator started with the installed Deployment's args"; else not_ok "operator started with the installed Deployment's args"; fi
check "operator ready (Lease, caches synced)" wait_for 60 readyz "$op_port"

# --- the example InferenceService ----------------------------------------------------------------
step "crds/examples/minimal.yaml in namespace $wns"
k create namespace "$wns" >/dev/null
check "crds/examples/minimal.yaml applies" kw apply -f "$e2e_root/crds/examples/minimal.yaml"
check "operator creates Deployment stories" wait_for 60 kw get deploy/stories
check "operator creates Service stories" wait_for 30 kw get svc/stories
check "Deployment runs the chart's engine image" wait_for 10 jp_is deploy/stories \
	'{.spec.template.spec.containers[0].image}' cinfer-engine:e2e-local
check "Deployment serves the file:// model path" bash -c \
	'kubectl -n "$0" get deploy/stories -o jsonpath="{.spec.template.spec.containers[0].args}" |
	grep -qF "\"--model\",\"/models/stories260K.gguf\""' "$wns"
check "InferenceService not Ready yet (no pod ready)" wait_for 30 jp_is cisvc/stories \
	'{.status.conditions[?(@.type=="Ready")].status}' False

# Settings the engine on 2 shared cores needs, and the autoscaler's bounds: a spec change the
# operator rolls out.
check "spec.engine and spec.scaling patched" kw patch cisvc stories --type merge -p \
	'{"spec":{"engine":{"threads":1,"maxNumSeqs":2},"scaling":{"policy":"reactive","minReplicas":1,
	"maxReplicas":3,"targetQueueDepth":1,"scaleDownDelaySeconds":30}}}'
args_have() {
	kw get deploy/stories -o jsonpath='{.spec.template.spec.containers[0].args}' | grep -qF "$1"
}
check "operator rolls the engine settings into the Deployment" wait_for 30 args_have '"--max-num-seqs","2"'
check "... and --threads 1" args_have '"--threads","1"'
deploy_settled() {
	[ "$(jp deploy/stories '{.metadata.generation}')" = "$(jp deploy/stories '{.status.observedGeneration}')" ]
}
check "deployment controller observed the new template" wait_for 30 deploy_settled

# current_pod: the Pod of the Deployment's current ReplicaSet (the revision the rollout wants).
current_pod() {
	json_of -n "$wns" deploy/stories >"$work/deploy.json" &&
		json_of -n "$wns" replicasets,pods -l serving.cinfer.io/inferenceservice=stories >"$work/rs-pods.json" &&
		python3 - "$work/deploy.json" "$work/rs-pods.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
items = json.load(open(sys.argv[2]))["items"]
rev = d["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
rs = [o for o in items if o["kind"] == "ReplicaSet"
      and o["metadata"].get("annotations", {}).get("deployment.kubernetes.io/revision") == rev]
h = rs[0]["metadata"]["labels"]["pod-template-hash"]
pods = [o for o in items if o["kind"] == "Pod" and o["metadata"]["labels"].get("pod-template-hash") == h
        and not o["metadata"].get("deletionTimestamp")]
print(sorted(p["metadata"]["name"] for p in pods)[0])
EOF
}
step "kubelet's part: run the pod's command"
check "kube-controller-manager creates the engine Pod of the current ReplicaSet" wait_for 60 current_pod
pod="$(current_pod 2>/dev/null)"
echo "# engine pod: ${pod:-none}"

# The engine runs the container's command and args from the Deployment, with the model path, the
# port and the listen address moved to this machine (the pod's /models and port 8000 do not exist
# here).
engine_port="$(free_port)"
python3 - "$work/deploy.json" "$model" "$engine_port" "$e2e_bin/cinfer-engine" >"$work/engine.argv" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
c = [c for c in d["spec"]["template"]["spec"]["containers"] if c["name"] == "engine"][0]
argv = list(c["command"]) + list(c.get("args", []))
assert argv[0] == "cinfer-engine", argv
argv[0] = sys.argv[4]
repl = {"--model": sys.argv[2], "--port": sys.argv[3], "--host": "127.0.0.1"}
for i, a in enumerate(argv[:-1]):
    if a in repl:
        argv[i + 1] = repl[a]
print("\n".join(argv))
EOF
mapfile -t engine_argv <"$work/engine.argv"
echo "# engine argv: ${engine_argv[*]}"
check "engine argv from the Deployment (serve, --served-model-name stories, --max-num-seqs 2)" bash -c \
	'[ "$1" = serve ] && grep -qx -- "--served-model-name" "$2" && grep -qx -- "--max-num-seqs" "$2"' \
	_ "${engine_argv[1]:-}" "$work/engine.argv"
"${engine_argv[@]}" --log-format text >"$work/engine.log" 2>&1 &
engine_pid=$!
probe_path="$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
print(d["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"])' "$work/deploy.json")"
check "engine answers the Deployment's readinessProbe ($probe_path)" wait_for 60 \
	curl -sf "http://127.0.0.1:$engine_port$probe_path"

now="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
pod_status() {
	cat <<EOF
{"status": {"phase": "Running", "hostIP": "127.0.0.1", "podIP": "127.0.0.1",
 "podIPs": [{"ip": "127.0.0.1"}], "startTime": "$now",
 "conditions": [
  {"type": "PodScheduled", "status": "True", "lastTransitionTime": "$now"},
  {"type": "Initialized", "status": "True", "lastTransitionTime": "$now"},
  {"type": "ContainersReady", "status": "True", "lastTransitionTime": "$now"},
  {"type": "Ready", "status": "True", "lastTransitionTime": "$now"}],
 "containerStatuses": [{"name": "engine", "ready": true, "started": true, "restartCount": 0,
  "image": "cinfer-engine:e2e-local", "imageID": "", "state": {"running": {"startedAt": "$now"}}}]}}
EOF
}
check "Pod $pod reported Running and Ready through pods/status (as a kubelet)" \
	kw patch pod "$pod" --subresource=status --type merge -p "$(pod_status)"
check "Deployment: 1 ready replica" wait_for 60 jp_is deploy/stories '{.status.readyReplicas}' 1
check "old ReplicaSet's Pod removed by the rollout" wait_for 60 bash -c \
	'[ "$(kubectl -n "$0" get pods -l serving.cinfer.io/inferenceservice=stories -o name | wc -l)" = 1 ]' "$wns"
check "InferenceService Ready=True (reason Serving)" wait_for 60 jp_is cisvc/stories \
	'{.status.conditions[?(@.type=="Ready")].status}/{.status.conditions[?(@.type=="Ready")].reason}' True/Serving
check "InferenceService status: readyReplicas 1, url" jp_is cisvc/stories \
	'{.status.readyReplicas} {.status.url}' "1 http://stories.$wns.svc.cluster.local"
check "status.observedGeneration is the current generation" bash -c \
	'[ "$(kubectl -n "$0" get cisvc stories -o jsonpath="{.metadata.generation}")" = \
	"$(kubectl -n "$0" get cisvc stories -o jsonpath="{.status.observedGeneration}")" ]' "$wns"
check "operator records a Normal Event 'Serving' for the Ready transition" wait_for 30 bash -c \
	'kubectl -n "$0" get events --field-selector involvedObject.name=stories,reason=Serving \
	-o jsonpath="{.items[*].type}" | grep -qw Normal' "$wns"
check "kubectl get cisvc: READY 1" bash -c \
	'kubectl -n "$0" get cisvc stories --no-headers -o custom-columns=READY:.status.readyReplicas | grep -qx 1' "$wns"

# --- a completion ------------------------------------------------------------------------------------
step "completions"
completion() {
	curl -sf "http://127.0.0.1:$engine_port/v1/completions" -H 'Content-Type: application/json' \
		-d '{"model":"stories","prompt":"Once upon a time","max_tokens":16,"temperature":0}' |
		python3 -c 'import json,sys; r=json.load(sys.stdin)
assert r["object"] == "text_completion" and r["model"] == "stories", r
assert r["choices"][0]["text"].strip() and r["usage"]["completion_tokens"] == 16, r
print(r["choices"][0]["text"])'
}
check "curl /v1/completions with the served name 'stories'" completion
if "$venv/bin/python" -c 'import openai' 2>/dev/null; then
	sdk() {
		"$venv/bin/python" - "http://127.0.0.1:$engine_port/v1" <<'EOF'
import sys
from openai import OpenAI
c = OpenAI(base_url=sys.argv[1], api_key="none", max_retries=0, timeout=60)
assert [m.id for m in c.models.list().data] == ["stories"]
r = c.chat.completions.create(model="stories", max_tokens=12, temperature=0,
                              messages=[{"role": "user", "content": "Tell me a story."}])
assert r.choices[0].message.content and r.usage.completion_tokens > 0, r
s = c.completions.create(model="stories", prompt="Lily", max_tokens=8, stream=True)
text = "".join(ch.choices[0].text for ch in s if ch.choices)
assert text, "empty stream"
EOF
	}
	check "OpenAI SDK: models.list, chat completion, streamed completion" sdk
else
	echo "# OpenAI SDK not installed in $venv (make venv): SDK check skipped"
fi

# --- autoscaling --------------------------------------------------------------------------------------
step "autoscaler out of cluster, --target stories=engine"
as_port="$(free_port)"
json_of -n "$ns" deploy/$rel-cinfer-autoscaler >"$work/as-deploy.json"
mapfile -t as_args < <(deploy_args "$work/as-deploy.json" autoscaler "$as_port")
check "autoscaler args from the installed Deployment (--interval=1)" bash -c \
	'printf "%s\n" "$@" | grep -qx -- --interval=1' _ "${as_args[@]}"
"$e2e_bin/cinfer-autoscaler" --kubeconfig "$work/autoscaler.kubeconfig" "${as_args[@]}" \
	--target "stories=http://127.0.0.1:$engine_port/metrics" >"$work/autoscaler.log" 2>&1 &
as_pid=$!
check "autoscaler ready (Lease)" wait_for 60 readyz "$as_port"
sleep 2
check "idle: spec.replicas 1" jp_is cisvc/stories '{.spec.replicas}' 1
# Every version of the InferenceService from here on, for the status.autoscaling diagnosis below.
kw get cisvc stories -w -o jsonpath='{.metadata.resourceVersion} autoscaling={.status.autoscaling.desiredReplicas}{"\n"}' \
	>"$work/cisvc.watch" 2>&1 &
watch_pid=$!
"$e2e_root/hack/loadgen" --url "http://127.0.0.1:$engine_port" --concurrency 8 --requests 1000000 \
	--prompt-tokens 16 --max-tokens 256 --ignore-eos --timeout 600 >"$work/loadgen.log" 2>&1 &
lg_pid=$!
replicas_above_1() { [ "$(jp cisvc/stories '{.spec.replicas}')" -gt 1 ] 2>/dev/null; }
check "loadgen's queue makes the autoscaler raise spec.replicas" wait_for 90 replicas_above_1
r="$(jp cisvc/stories '{.spec.replicas}')"
echo "# spec.replicas now ${r:-?}"
check "ScaledUp Event on the InferenceService" wait_for 20 bash -c \
	'kubectl -n "$0" get events --field-selector involvedObject.name=stories,reason=ScaledUp -o name | grep -q .' "$wns"
# status.autoscaling belongs to the autoscaler; the operator's status writes must keep it. On
# failure the watch started before the load shows which versions of the object carried it.
desired_above_1() { [ "$(jp cisvc/stories '{.status.autoscaling.desiredReplicas}')" -gt 1 ] 2>/dev/null; }
autoscaling_kept() {
	local i
	if ! wait_for 20 desired_above_1; then
		echo "status.autoscaling.desiredReplicas > 1 not seen in 20 s"
	else
		for i in 1 2 3 4 5 6 7 8 9 10; do
			desired_above_1 || break
			sleep 0.5
		done
		[ "$i" = 10 ] && desired_above_1 && return 0
		echo "seen, then gone at sample $i"
	fi
	echo "versions seen by a watch (resourceVersion autoscaling=desiredReplicas):"
	sed 's/^/  /' "$work/cisvc.watch"
	return 1
}
check "status.autoscaling.desiredReplicas > 1, kept across the operator's status writes (10 samples, 5 s)" \
	autoscaling_kept
kill "$watch_pid" 2>/dev/null
wait "$watch_pid" 2>/dev/null
deploy_follows() {
	local want
	want="$(jp cisvc/stories '{.spec.replicas}')"
	[ -n "$want" ] && [ "$(jp deploy/stories '{.spec.replicas}')" = "$want" ]
}
check "operator carries spec.replicas into the Deployment" wait_for 60 deploy_follows
check "InferenceService still Ready with the extra replicas Pending" jp_is cisvc/stories \
	'{.status.conditions[?(@.type=="Ready")].status}' True
kill -TERM "$lg_pid" 2>/dev/null
wait "$lg_pid" 2>/dev/null
lg_pid=""
check "loadgen: no failed requests" grep -q 'errors: *none' "$work/loadgen.log"
grep -E '^(requests|throughput):' "$work/loadgen.log" | sed 's/^/# loadgen /'
kill -TERM "$as_pid" 2>/dev/null
wait "$as_pid"
check "autoscaler exits 0 on SIGTERM" [ $? -eq 0 ]
as_pid=""
check "autoscaler released its Lease on SIGTERM (holderIdentity cleared)" bash -c \
	'[ -z "$(kubectl -n "$0" get lease cinfer-autoscaler -o jsonpath="{.spec.holderIdentity}")" ]' "$ns"

# --- helm upgrade ------------------------------------------------------------------------------------
step "helm upgrade: operator.logLevel=debug, engine.shutdownTimeout=45"
check "helm upgrade" h upgrade "$rel" "$chart" -n "$ns" -f "$values" \
	--set operator.logLevel=debug,engine.shutdownTimeout=45
check "helm history: revision 2 deployed" bash -c '"$0" --kubeconfig "$1" history r1 -n "$2" -o json |
	grep -q "\"revision\":2,[^}]*\"status\":\"deployed\""' "$helm_dir/helm" "$KUBECONFIG" "$ns"
op_args_have() {
	k -n "$ns" get deploy/$rel-cinfer-operator -o jsonpath='{.spec.template.spec.containers[0].args}' |
		grep -qF "$1"
}
check "operator Deployment: --log-level=debug" op_args_have '"--log-level=debug"'
check "operator Deployment: --engine-shutdown-timeout=45" op_args_have '"--engine-shutdown-timeout=45"'
check "autoscaler Deployment unchanged (generation 1)" bash -c \
	'[ "$(kubectl -n "$0" get deploy/r1-cinfer-autoscaler -o jsonpath="{.metadata.generation}")" = 1 ]' "$ns"
# The rollout a kubelet would do: the operator restarts with the new args.
stop_operator
check "operator exits 0 on SIGTERM" [ $? -eq 0 ]
check "operator released its Lease on SIGTERM (holderIdentity cleared)" bash -c \
	'[ -z "$(kubectl -n "$0" get lease cinfer-operator -o jsonpath="{.spec.holderIdentity}")" ]' "$ns"
if start_operator; then ok "operator restarted with the upgraded args"; else not_ok "operator restarted with the upgraded args"; fi
check "restarted operator runs with --log-level=debug" grep -qx -- --log-level=debug "$work/operator.args"
check "restarted operator ready" wait_for 60 readyz "$op_port"
check "restarted operator logs at debug level" wait_for 30 grep -q 'DEBUG' "$work/operator.log"
check "engine Deployment now drains for 45 s (--shutdown-timeout 45)" wait_for 60 \
	args_have '"--shutdown-timeout","45"'

# --- helm uninstall and the CRD ------------------------------------------------------------------------
step "helm uninstall"
stop_operator
check "operator exits 0 on SIGTERM" [ $? -eq 0 ]
kill -TERM "$engine_pid" 2>/dev/null
wait "$engine_pid"
check "engine exits 0 on SIGTERM" [ $? -eq 0 ]
engine_pid=""
check "helm uninstall $rel" h uninstall "$rel" -n "$ns"
for o in deploy/$rel-cinfer-operator deploy/$rel-cinfer-autoscaler sa/$rel-cinfer-operator \
	sa/$rel-cinfer-autoscaler svc/$rel-cinfer-operator-metrics role/$rel-cinfer-operator-leader-election; do
	check "uninstalled: $o" wait_for 30 gone -n "$ns" get "$o"
done
check "uninstalled: clusterrole/$rel-cinfer-operator" wait_for 30 gone get clusterrole/$rel-cinfer-operator
check "no objects of the release left" bash -c \
	'[ -z "$(kubectl -n "$0" get all,sa,role,rolebinding -l app.kubernetes.io/instance=r1 -o name 2>/dev/null)" ]' "$ns"
check "CRD kept (Helm never deletes crds/)" k get crd inferenceservices.serving.cinfer.io
check "InferenceService kept" kw get cisvc/stories
step "CRD deleted"
# kube-controller-manager's garbage collector starts watching a new resource type on its discovery
# resync (every 30 s). Only if it watched InferenceServices does it see them deleted with the CRD
# and collect their Deployments and Services; an owner kind it never watched leaves dependents it
# can no longer resolve. So the CRD must have existed for one resync before it is deleted.
crd_created="$(kubectl get crd inferenceservices.serving.cinfer.io -o jsonpath='{.metadata.creationTimestamp}')"
crd_age=$(($(date +%s) - $(date -d "$crd_created" +%s 2>/dev/null || date +%s)))
if [ "$crd_age" -lt 40 ]; then
	echo "# waiting $((40 - crd_age)) s: the garbage collector must have watched the CRD's kind"
	sleep $((40 - crd_age))
fi
check "kubectl delete crd" k delete crd inferenceservices.serving.cinfer.io --timeout=60s
check "InferenceServices gone with the CRD" wait_for 30 bash -c \
	'! kubectl api-resources --api-group=serving.cinfer.io -o name | grep -q inferenceservices &&
	! kubectl get --raw /apis/serving.cinfer.io/v1alpha1/namespaces/"$0"/inferenceservices/stories >/dev/null 2>&1' "$wns"
check "its Deployment garbage-collected (ownerReference)" wait_for 60 gone -n "$wns" get deploy/stories
check "its Service garbage-collected (ownerReference)" wait_for 60 gone -n "$wns" get svc/stories
check "no sanitizer reports in the program logs" bash -c \
	'! grep -l "ERROR: AddressSanitizer\|runtime error:\|LeakSanitizer" "$0"/*.log' "$work"

if [ "$failed" -ne 0 ]; then
	for f in "$work"/operator.log "$work"/autoscaler.log "$work"/engine.log "$work"/loadgen.log; do
		[ -f "$f" ] || continue
		echo "--- $f (last 25 lines)"
		tail -n 25 "$f"
	done
fi
summary
