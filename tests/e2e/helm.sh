#!/usr/bin/env bash
# shellcheck disable=SC2016 # the bash -c scripts below take their arguments as $0, $1, ...
# The Helm chart charts/cinfer with a real helm (hack/build-helm.sh, pinned in hack/helm/go.mod) and a
# real API server (hack/control-plane.sh): lint, rendering with every values file in
# tests/testdata/helm/, bad values rejected by values.schema.json naming the field, the chart's CRD
# identical to crds/, server-side dry runs, `helm install`, the installed RBAC checked verb by verb
# with the ServiceAccounts' own tokens (what they may do and what they must not), the admission policy
# that narrows the autoscaler's pod patches to the deletion-cost annotation (enforced by this API
# server, checked change by change), cinfer-operator and cinfer-autoscaler run out of cluster with
# only those tokens (the operator reconciles an example InferenceService into a Deployment and its
# NetworkPolicy: checked as an object, since no CNI runs here to enforce it), RBAC confined to a list
# of namespaces, and `helm uninstall` removing everything but the CRD.
set -uo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

chart="$e2e_root/charts/cinfer"
testdata="$e2e_root/tests/testdata/helm"
ns=cinfer-system  # release namespace
wns=models        # namespace the InferenceServices live in
wns2=models2      # and a second one
proc_pids=()
cleanup_extra() {
	local p
	for p in "${proc_pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	[[ -z "${work:-}" ]] || rm -rf "$work"
}
work="$(mktemp -d /tmp/cinfer-helm-e2e.XXXXXX)"
trap cleanup_extra EXIT

# --- helm ----------------------------------------------------------------------------------------
if ! helm_dir="$("$e2e_root/hack/build-helm.sh" --print-bin-dir)"; then
	not_ok "build helm (hack/build-helm.sh)"
	summary
	exit 1
fi
helm_bin="$helm_dir/helm"
ok "helm built: $("$helm_bin" version --short 2>&1)"
# Keep helm's own state (repositories, cache, registry config) out of $HOME.
export HELM_CACHE_HOME="$work/helm/cache" HELM_CONFIG_HOME="$work/helm/config" HELM_DATA_HOME="$work/helm/data"
h() { "$helm_bin" "$@"; }

# render NAME [VALUES_FILE...]: helm template into $work/NAME.yaml
render() {
	local name="$1" args=() f
	shift
	for f in "$@"; do args+=(-f "$f"); done
	h template r1 "$chart" -n "$ns" "${args[@]}" >"$work/$name.yaml"
}
# has NAME TEXT...: every TEXT occurs (as a fixed string) in rendering NAME
has() {
	local name="$1" t
	shift
	for t in "$@"; do
		grep -qF -- "$t" "$work/$name.yaml" || {
			echo "missing in $name: $t"
			return 1
		}
	done
}
# lacks NAME TEXT...: no TEXT occurs in rendering NAME
lacks() {
	local name="$1" t
	shift
	for t in "$@"; do
		if grep -qF -- "$t" "$work/$name.yaml"; then
			echo "unexpected in $name: $t"
			return 1
		fi
	done
}
# kinds NAME: "count kind" per kind in rendering NAME, one line
kinds() { grep '^kind: ' "$work/$1.yaml" | sort | uniq -c | awk '{printf "%s%s=%s", sep, $3, $1; sep=" "}'; }
kinds_are() {
	local name="$1" got
	got="$(kinds "$name")"
	[ "$got" = "$2" ] || {
		echo "kinds of $name: got '$got', want '$2'"
		return 1
	}
}

check "helm lint" h lint --strict "$chart"
for f in "$testdata"/*.yaml; do
	check "helm lint with $(basename "$f")" h lint --strict "$chart" -f "$f"
done

# --- rendering: defaults -------------------------------------------------------------------------
check "template: default values" render default
vap="ValidatingAdmissionPolicy=1 ValidatingAdmissionPolicyBinding=1"
check "default: objects" kinds_are default \
	"ClusterRole=3 ClusterRoleBinding=3 Deployment=3 Role=2 RoleBinding=2 Service=4 ServiceAccount=3 $vap"
check "default: operator flags" has default '"--engine-image=ghcr.io/cinfer/cinfer-engine:0.1.0"' \
	'"--engine-image-pull-policy=IfNotPresent"' '"--workers=2"' '"--leader-elect=true"' \
	"\"--leader-election-namespace=$ns\"" '"--probe-addr=0.0.0.0:8081"' '"--log-format=json"'
check "default: engines drain 10 s after SIGTERM, downloads limited" has default \
	'"--engine-shutdown-timeout=30"' '"--engine-shutdown-delay=10"' '"--model-download-limit=64GiB"'
check "default: NetworkPolicies on, peers in the release namespace" has default \
	'"--network-policy=true"' "\"--network-policy-namespace=$ns\""
check "default: no extra namespaces admitted" lacks default '--network-policy-allow-namespaces'
check "default: operator may manage NetworkPolicies" has default 'networking.k8s.io' 'networkpolicies'
check "default: admission policy matches only the autoscaler's ServiceAccount" has default \
	"request.userInfo.username == 'system:serviceaccount:$ns:r1-cinfer-autoscaler'" \
	"'controller.kubernetes.io/pod-deletion-cost'" 'policyName: r1-cinfer-autoscaler-pod-patch' \
	'validationActions: [Deny]' 'failurePolicy: Fail'
check "default: images follow appVersion" has default '"ghcr.io/cinfer/cinfer-operator:0.1.0"' \
	'"ghcr.io/cinfer/cinfer-autoscaler:0.1.0"' '"ghcr.io/cinfer/cinfer-router:0.1.0"'
check "default: router API Service and flags, no leader election for it" has default \
	'name: r1-cinfer-router' 'targetPort: http' 'containerPort: 8080' '"--port=8080"' \
	'"--policy=prefix"' '"--hold-timeout=120"' '"--shutdown-delay-seconds=5"' \
	'terminationGracePeriodSeconds: 40'
check "default: the autoscaler reads the router's pods" has default \
	'"--router-selector=app.kubernetes.io/instance=r1,app.kubernetes.io/component=router"' \
	'"--router-port=8081"'
check "default: no Lease Role for the router" lacks default 'r1-cinfer-router-leader-election'
check "router disabled: no router, no --router flags" bash -c '! "$0" template r1 "$1" \
	--set router.enabled=false | grep -qE "router"' "$helm_bin" "$chart"
check "default: no --namespace (all namespaces)" lacks default '"--namespace='
check "default: probes on /healthz and /readyz" has default 'path: /healthz' 'path: /readyz' \
	'port: http-metrics' 'containerPort: 8081'
check "default: hardened securityContext" has default 'runAsNonRoot: true' \
	'readOnlyRootFilesystem: true' 'allowPrivilegeEscalation: false' 'drop: ["ALL"]' \
	'type: RuntimeDefault'
check "default: standard labels" has default 'app.kubernetes.io/name: cinfer' \
	'app.kubernetes.io/instance: r1' 'app.kubernetes.io/version: "0.1.0"' \
	'app.kubernetes.io/component: operator' 'app.kubernetes.io/component: autoscaler' \
	'app.kubernetes.io/managed-by: Helm' 'helm.sh/chart: cinfer-0.1.0'
check "default: Lease Roles name their Lease" has default 'resourceNames: ["cinfer-operator"]' \
	'resourceNames: ["cinfer-autoscaler"]'
check "default: no wildcard RBAC" lacks default '"*"' "- '*'" '- "*"'
check "default: optional objects off" lacks default 'kind: ServiceMonitor' \
	'kind: PodDisruptionBudget' 'kind: ConfigMap'
# --- rendering: each values file -----------------------------------------------------------------
check "template: watch-namespace.yaml" render watch "$testdata/watch-namespace.yaml"
check "watch-namespace: Roles only, no cluster-wide RBAC" kinds_are watch \
	"Deployment=3 Role=5 RoleBinding=5 Service=4 ServiceAccount=3 $vap"
check "watch-namespace: --namespace=models, Roles in models" has watch '"--namespace=models"' \
	"namespace: $wns"
check "template: watch-namespaces.yaml" render watch2 "$testdata/watch-namespaces.yaml"
check "watch-namespaces: a Role and a RoleBinding per program and namespace" kinds_are watch2 \
	"Deployment=2 Role=6 RoleBinding=6 Service=2 ServiceAccount=2 $vap"
check "watch-namespaces: both programs get --namespace=models,models2" bash -c \
	'[ "$(grep -c -- "\"--namespace=models,models2\"" "$0")" = 2 ]' "$work/watch2.yaml"
check "watch-namespaces: Roles in models2" has watch2 "namespace: models2"
check "template: network-policy-off.yaml" render netoff "$testdata/network-policy-off.yaml"
check "network-policy-off: --network-policy=false, no admission policy" has netoff '"--network-policy=false"'
check "network-policy-off: objects" kinds_are netoff \
	"ClusterRole=2 ClusterRoleBinding=2 Deployment=2 Role=2 RoleBinding=2 Service=2 ServiceAccount=2"
check "podPatchPolicy on a cluster older than 1.30: refused, naming the value" bash -c \
	'! out="$("$0" template r1 "$1" --kube-version 1.29.4 2>&1)" && grep -q "autoscaler.podPatchPolicy=false" <<<"$out"' \
	"$helm_bin" "$chart"

check "template: monitoring.yaml" render mon "$testdata/monitoring.yaml"
check "monitoring: ServiceMonitors, PDBs, dashboard" kinds_are mon \
	"ClusterRole=3 ClusterRoleBinding=3 ConfigMap=1 Deployment=3 PodDisruptionBudget=2 Role=2 RoleBinding=2 Service=4 ServiceAccount=3 ServiceMonitor=3 $vap"
check "monitoring: ServiceMonitor settings" has mon 'apiVersion: monitoring.coreos.com/v1' \
	'interval: 15s' 'release: prometheus' 'port: http-metrics' 'minAvailable: 50%' \
	'grafana_dashboard: "1"'
check "dashboard: engine metrics panels" has mon cinfer_requests_waiting cinfer_requests_running \
	cinfer_kv_cache_usage_ratio cinfer_prefix_cache_hits_total cinfer_prefix_cache_queries_total \
	cinfer_time_to_first_token_seconds_bucket cinfer_inter_token_latency_seconds_bucket \
	cinfer_generation_tokens_total cinfer_prompt_tokens_total histogram_quantile \
	cinfer_autoscaler_desired_replicas
check "dashboard: valid JSON" python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["panels"]) >= 7' \
	"$chart/dashboards/cinfer-engines.json"

check "template: replicas-2.yaml" render rep2 "$testdata/replicas-2.yaml"
check "replicas-2: two replicas with leader election" has rep2 'replicas: 2' '"--leader-elect=true"'
check "replicas-2: no single replica left" lacks rep2 'replicas: 1'
# leaderElect=false is honoured with one replica, forced back on with more.
check "leaderElect=false, 1 replica" bash -c '"$0" template r1 "$1" --set operator.leaderElect=false \
	--show-only templates/operator.yaml | grep -qF -- "\"--leader-elect=false\""' "$helm_bin" "$chart"
check "leaderElect=false, 2 replicas: still elects" bash -c '"$0" template r1 "$1" \
	--set operator.leaderElect=false,operator.replicas=2 --show-only templates/operator.yaml |
	grep -qF -- "\"--leader-elect=true\""' "$helm_bin" "$chart"

check "template: overrides.yaml" render over "$testdata/overrides.yaml"
check "overrides: names, images, flags" has over 'name: llm-operator' 'name: llm-autoscaler' \
	'"registry.example.com/cinfer/operator:0.2.0-rc1"' \
	'"--engine-image=registry.example.com/cinfer/engine:0.2.0-rc1"' \
	'"--engine-image-pull-policy=Always"' '"--engine-shutdown-timeout=120"' '"--workers=8"' \
	'"--log-level=debug"' '"--log-format=text"' '"--identity=fixed"' '"--interval=2.5"' \
	'"--probe-addr=0.0.0.0:9090"' 'name: CINFER_OPERATOR_RESYNC_PERIOD' '"--engine-shutdown-delay=20"' \
	'"--model-download-limit=200GiB"' '"--network-policy-allow-namespaces=monitoring,ingress-nginx"'
check "overrides: scheduling, pull secrets, ServiceAccounts" has over 'kubernetes.io/os: linux' \
	'key: dedicated' 'key: kubernetes.io/arch' 'priorityClassName: system-cluster-critical' \
	'- name: regcred' 'serviceAccountName: cinfer-op' 'serviceAccountName: cinfer-as' \
	'example.com/role: operator'
check "overrides: no default names left" lacks over 'r1-cinfer'

check "template: existing-serviceaccounts.yaml" render exsa "$testdata/existing-serviceaccounts.yaml"
check "existing-serviceaccounts: the router's ServiceAccount only, autoscaler and router RBAC" kinds_are exsa \
	"ClusterRole=2 ClusterRoleBinding=2 Deployment=3 Role=1 RoleBinding=1 Service=4 ServiceAccount=1 $vap"
check "existing-serviceaccounts: the admission policy names the existing ServiceAccount" has exsa \
	"system:serviceaccount:$ns:cinfer-as-existing"
check "existing-serviceaccounts: pods and bindings use them" has exsa \
	'serviceAccountName: cinfer-op-existing' 'serviceAccountName: cinfer-as-existing' \
	'name: cinfer-as-existing'
check "existing-serviceaccounts: no operator RBAC" lacks exsa 'name: r1-cinfer-operator-leader-election'

check "template: autoscaler-disabled.yaml" render noas "$testdata/autoscaler-disabled.yaml"
check "autoscaler-disabled: operator and router objects only" kinds_are noas \
	"ClusterRole=2 ClusterRoleBinding=2 Deployment=2 Role=1 RoleBinding=1 Service=3 ServiceAccount=2"
check "autoscaler-disabled: nothing of the autoscaler" lacks noas autoscaler

# --- bad values: the schema rejects them, naming the field ---------------------------------------
for f in "$testdata"/bad/*.yaml; do
	want="$(sed -n 's/^# expect: //p' "$f")"
	if [ -z "$want" ]; then
		not_ok "bad $(basename "$f"): no '# expect: ' line"
		continue
	fi
	if out="$(h template r1 "$chart" -f "$f" 2>&1)"; then
		not_ok "bad $(basename "$f") rendered: it should fail"
	elif grep -qF -- "$want" <<<"$out" && grep -qF 'values don'"'"'t meet the specifications of the schema' <<<"$out"; then
		ok "bad $(basename "$f") rejected naming $want"
	else
		not_ok "bad $(basename "$f") rejected but not naming $want: $out"
	fi
done

# --- CRD ---------------------------------------------------------------------------------------
check "chart CRD identical to crds/" cmp "$e2e_root/crds/serving.cinfer.io_inferenceservices.yaml" \
	"$chart/crds/serving.cinfer.io_inferenceservices.yaml"
check "chart carries exactly one CRD" test "$(find "$chart/crds" -type f | wc -l)" -eq 1

# --- against the control plane -------------------------------------------------------------------
if ! control_plane_up; then
	not_ok "control plane up"
	summary
	exit 1
fi
k() { kubectl --request-timeout=20s "$@"; }
k create namespace "$ns" >/dev/null
k create namespace "$wns" >/dev/null
k create namespace "$wns2" >/dev/null # the second of tests/testdata/helm/watch-namespaces.yaml
check "CRD applies from the chart" k apply -f "$chart/crds/serving.cinfer.io_inferenceservices.yaml"
check "CRD established" k wait --for=condition=Established --timeout=30s \
	crd/inferenceservices.serving.cinfer.io

# server-side dry run of every rendering; ServiceMonitor needs the Prometheus Operator's CRD, which
# this control plane does not have, so those documents are left out of the dry run.
if k get crd servicemonitors.monitoring.coreos.com >/dev/null 2>&1; then
	sm_installed=1
else
	sm_installed=0
	echo "# ServiceMonitor CRD not installed: ServiceMonitor documents skipped in the server dry runs"
fi
# drop_kind KIND < multi-document YAML: the documents that are not of KIND
drop_kind() {
	awk -v kind="$1" '
		function flush() { if (doc != "" && !skip) printf "---\n%s", doc; doc = ""; skip = 0 }
		/^---/ { flush(); next }
		$0 == "kind: " kind { skip = 1 }
		{ doc = doc $0 "\n" }
		END { flush() }'
}
dry_run() {
	local f="$work/$1.yaml"
	if ((sm_installed)); then
		k apply --dry-run=server -f "$f"
	else
		drop_kind ServiceMonitor <"$f" | k apply --dry-run=server -f -
	fi
}
for r in default watch watch2 netoff mon rep2 over exsa noas; do
	check "kubectl apply --dry-run=server: $r" dry_run "$r"
done
if [ "$(drop_kind ServiceMonitor <"$work/mon.yaml" | grep -c '^kind: \(PodDisruptionBudget\|ConfigMap\|ServiceMonitor\)')" = 3 ]; then
	ok "ServiceMonitor filter keeps the PDBs and the dashboard, drops only ServiceMonitors"
else
	not_ok "ServiceMonitor filter keeps the PDBs and the dashboard, drops only ServiceMonitors"
fi

# --- helm install --------------------------------------------------------------------------------
if out="$(h install r1 "$chart" -n "$ns" --kubeconfig "$KUBECONFIG" 2>&1)"; then
	ok "helm install (cluster-wide)"
else
	not_ok "helm install (cluster-wide): $out"
fi
if grep -q 'kubectl get cisvc' <<<"$out" && grep -q 'crds/examples/minimal.yaml' <<<"$out"; then
	ok "NOTES: apply an example, kubectl get cisvc"
else
	not_ok "NOTES: apply an example, kubectl get cisvc: $out"
fi
check "helm list shows r1 deployed" bash -c '"$0" list -n "$1" --kubeconfig "$2" -o json |
	grep -q "\"name\":\"r1\".*\"status\":\"deployed\""' "$helm_bin" "$ns" "$KUBECONFIG"
for o in deploy/r1-cinfer-operator deploy/r1-cinfer-autoscaler sa/r1-cinfer-operator \
	sa/r1-cinfer-autoscaler svc/r1-cinfer-operator-metrics svc/r1-cinfer-autoscaler-metrics \
	role/r1-cinfer-operator-leader-election role/r1-cinfer-autoscaler-leader-election \
	rolebinding/r1-cinfer-operator-leader-election rolebinding/r1-cinfer-autoscaler-leader-election \
	deploy/r1-cinfer-router sa/r1-cinfer-router svc/r1-cinfer-router svc/r1-cinfer-router-metrics; do
	check "installed: $o" k -n "$ns" get "$o"
done
for o in clusterrole/r1-cinfer-operator clusterrole/r1-cinfer-autoscaler clusterrole/r1-cinfer-router \
	clusterrolebinding/r1-cinfer-operator clusterrolebinding/r1-cinfer-autoscaler \
	clusterrolebinding/r1-cinfer-router \
	validatingadmissionpolicy/r1-cinfer-autoscaler-pod-patch \
	validatingadmissionpolicybinding/r1-cinfer-autoscaler-pod-patch; do
	check "installed: $o" k get "$o"
done
# The API server compiled the policy's expressions: no type-checking warnings in its status.
vap_checked() {
	[ "$(k get validatingadmissionpolicy r1-cinfer-autoscaler-pod-patch -o jsonpath='{.status.observedGeneration}')" = 1 ] &&
		[ -z "$(k get validatingadmissionpolicy r1-cinfer-autoscaler-pod-patch -o jsonpath='{.status.typeChecking.expressionWarnings}')" ]
}
check "admission policy type-checks" wait_for 20 vap_checked
check "operator Deployment creates its ReplicaSet and pod (Pending: no kubelet)" wait_for 30 \
	bash -c '[ -n "$(kubectl -n "$0" get pods -l app.kubernetes.io/component=operator,app.kubernetes.io/instance=r1 -o name)" ]' "$ns"

# token_kubeconfig SA NS FILE: a kubeconfig that authenticates with SA's token (kubectl create token),
# server and CA taken from the admin kubeconfig.
token_kubeconfig() {
	local sa="$1" sans="$2" file="$3" token server ca
	token="$(k -n "$sans" create token "$sa" --duration=1h)" || return 1
	server="$(k config view --minify --raw -o jsonpath='{.clusters[0].cluster.server}')"
	ca="$(k config view --minify --raw --flatten -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')"
	[ -n "$token" ] && [ -n "$server" ] && [ -n "$ca" ] || return 1
	cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: cp
    cluster:
      server: $server
      certificate-authority-data: $ca
users:
  - name: $sa
    user:
      token: $token
contexts:
  - name: $sa
    context: {cluster: cp, user: $sa, namespace: $sans}
current-context: $sa
EOF
	chmod 600 "$file"
}
# can KUBECONFIG yes|no VERB RESOURCE [ARGS...]: kubectl auth can-i as that kubeconfig's user
can() {
	local kc="$1" want="$2" got
	shift 2
	got="$(kubectl --kubeconfig "$kc" --request-timeout=20s auth can-i "$@" 2>/dev/null)"
	[ "$got" = "$want" ] || {
		echo "auth can-i $*: got '$got', want '$want'"
		return 1
	}
}
# can_list KUBECONFIG WANT NAMESPACE_ARGS WHO < LINES: one check per "verb resource[/name]
# [subresource]" line
can_list() {
	local kc="$1" want="$2" nsargs="$3" who="$4" verb res sub sargs
	while read -r verb res sub; do
		[ -n "$verb" ] || continue
		sargs=()
		[ -z "$sub" ] || sargs=(--subresource="$sub")
		# shellcheck disable=SC2086
		check "$who $want: $verb $res${sub:+ $sub} $nsargs" can "$kc" "$want" "$verb" "$res" \
			"${sargs[@]}" $nsargs
	done
}

op_kc="$work/operator.kubeconfig"
as_kc="$work/autoscaler.kubeconfig"
rt_kc="$work/router.kubeconfig"
check "router ServiceAccount token kubeconfig" token_kubeconfig r1-cinfer-router "$ns" "$rt_kc"
check "operator ServiceAccount token kubeconfig" token_kubeconfig r1-cinfer-operator "$ns" "$op_kc"
check "autoscaler ServiceAccount token kubeconfig" token_kubeconfig r1-cinfer-autoscaler "$ns" "$as_kc"
check "operator token authenticates as its ServiceAccount" bash -c \
	'kubectl --kubeconfig "$0" auth whoami -o jsonpath="{.status.userInfo.username}" |
	grep -qx "system:serviceaccount:$1:r1-cinfer-operator"' "$op_kc" "$ns"

can_list "$op_kc" yes "-n $wns" operator <<'EOF'
get inferenceservices.serving.cinfer.io
list inferenceservices.serving.cinfer.io
watch inferenceservices.serving.cinfer.io
update inferenceservices.serving.cinfer.io status
patch inferenceservices.serving.cinfer.io status
get deployments.apps
list deployments.apps
watch deployments.apps
create deployments.apps
update deployments.apps
patch deployments.apps
delete deployments.apps
get services
create services
patch services
delete services
get networkpolicies.networking.k8s.io
list networkpolicies.networking.k8s.io
watch networkpolicies.networking.k8s.io
create networkpolicies.networking.k8s.io
patch networkpolicies.networking.k8s.io
delete networkpolicies.networking.k8s.io
list pods
watch pods
create events
patch events
EOF
can_list "$op_kc" yes "-A" operator <<'EOF'
list inferenceservices.serving.cinfer.io
watch deployments.apps
watch networkpolicies.networking.k8s.io
EOF
can_list "$op_kc" yes "-n $ns" operator <<'EOF'
create leases.coordination.k8s.io
get leases.coordination.k8s.io/cinfer-operator
update leases.coordination.k8s.io/cinfer-operator
EOF
can_list "$op_kc" no "-n $wns" operator <<'EOF'
delete pods
create pods
get secrets
list secrets
get configmaps
update inferenceservices.serving.cinfer.io
delete inferenceservices.serving.cinfer.io
update inferenceservices.serving.cinfer.io scale
create clusterrolebindings.rbac.authorization.k8s.io
create rolebindings.rbac.authorization.k8s.io
delete namespaces
EOF
can_list "$op_kc" no "-n $ns" operator <<'EOF'
update leases.coordination.k8s.io/cinfer-autoscaler
delete leases.coordination.k8s.io/cinfer-operator
list leases.coordination.k8s.io
EOF
can_list "$as_kc" yes "-n $wns" autoscaler <<'EOF'
get inferenceservices.serving.cinfer.io
list inferenceservices.serving.cinfer.io
watch inferenceservices.serving.cinfer.io
get inferenceservices.serving.cinfer.io scale
update inferenceservices.serving.cinfer.io scale
patch inferenceservices.serving.cinfer.io scale
patch inferenceservices.serving.cinfer.io status
get pods
list pods
watch pods
patch pods
create events
patch events
EOF
can_list "$as_kc" yes "-n $ns" autoscaler <<'EOF'
create leases.coordination.k8s.io
get leases.coordination.k8s.io/cinfer-autoscaler
update leases.coordination.k8s.io/cinfer-autoscaler
EOF
can_list "$as_kc" no "-n $wns" autoscaler <<'EOF'
delete pods
create pods
get secrets
update inferenceservices.serving.cinfer.io
update inferenceservices.serving.cinfer.io status
create deployments.apps
patch deployments.apps
delete services
create networkpolicies.networking.k8s.io
delete networkpolicies.networking.k8s.io
update pods
patch pods status
patch pods ephemeralcontainers
create pods eviction
create clusterrolebindings.rbac.authorization.k8s.io
create validatingadmissionpolicybindings.admissionregistration.k8s.io
delete validatingadmissionpolicies.admissionregistration.k8s.io
EOF
can_list "$as_kc" no "-n $ns" autoscaler <<'EOF'
update leases.coordination.k8s.io/cinfer-operator
EOF
can_list "$as_kc" yes "-n $ns" autoscaler <<'EOF'
list pods
EOF
can_list "$rt_kc" yes "-n $wns" router <<'EOF'
get inferenceservices.serving.cinfer.io
list inferenceservices.serving.cinfer.io
watch inferenceservices.serving.cinfer.io
get pods
list pods
watch pods
EOF
can_list "$rt_kc" yes "-A" router <<'EOF'
list inferenceservices.serving.cinfer.io
watch pods
EOF
can_list "$rt_kc" no "-n $wns" router <<'EOF'
create pods
delete pods
patch pods
update pods status
get secrets
list secrets
get configmaps
update inferenceservices.serving.cinfer.io
patch inferenceservices.serving.cinfer.io status
update inferenceservices.serving.cinfer.io scale
get inferenceservices.serving.cinfer.io scale
list deployments.apps
create events
get services
create rolebindings.rbac.authorization.k8s.io
EOF
can_list "$rt_kc" no "-n $ns" router <<'EOF'
create leases.coordination.k8s.io
get leases.coordination.k8s.io/cinfer-operator
EOF
# The same answers through impersonation from the admin kubeconfig.
check "impersonated operator: yes create deployments" can "$KUBECONFIG" yes create deployments.apps \
	-n "$wns" --as="system:serviceaccount:$ns:r1-cinfer-operator"
check "impersonated operator: no get secrets" can "$KUBECONFIG" no get secrets \
	-n "$wns" --as="system:serviceaccount:$ns:r1-cinfer-operator"
check "impersonated autoscaler: no delete pods" can "$KUBECONFIG" no delete pods \
	-n "$wns" --as="system:serviceaccount:$ns:r1-cinfer-autoscaler"
check "impersonated router: no get secrets" can "$KUBECONFIG" no get secrets \
	-n "$wns" --as="system:serviceaccount:$ns:r1-cinfer-router"

# --- the programs run with nothing but these tokens ----------------------------------------------
readyz() { curl -sf "http://127.0.0.1:$1/readyz" >/dev/null; }
jp() { k -n "$wns" get "$1" -o "jsonpath=$2" 2>/dev/null; }
# chart_args COMPONENT PORT [RELEASE NAMESPACE HELM_ARGS...]: the container args the chart renders
# (default: release r1 in $ns, default values), one per line, with the probe address moved to
# 127.0.0.1:PORT; the programs run with exactly these flags.
chart_args() {
	local comp="$1" port="$2" rel="${3:-r1}" rns="${4:-$ns}"
	shift $(($# < 4 ? $# : 4))
	h template "$rel" "$chart" -n "$rns" "$@" --show-only "templates/$comp.yaml" |
		sed -n 's/^            - "\(--.*\)"$/\1/p' |
		sed "s/^--probe-addr=.*/--probe-addr=127.0.0.1:$port/"
}
op_port="$(free_port)"
mapfile -t op_args < <(chart_args operator "$op_port")
as_port="$(free_port)"
mapfile -t as_args < <(chart_args autoscaler "$as_port")
check "chart's operator args extracted" test "${#op_args[@]}" -ge 8
check "chart's autoscaler args extracted" test "${#as_args[@]}" -ge 6
"$e2e_bin/cinfer-operator" --kubeconfig "$op_kc" "${op_args[@]}" >"$work/operator.log" 2>&1 &
proc_pids+=($!)
"$e2e_bin/cinfer-autoscaler" --kubeconfig "$as_kc" "${as_args[@]}" >"$work/autoscaler.log" 2>&1 &
proc_pids+=($!)
check "operator with its token and the chart's args: ready (Lease taken, caches synced)" wait_for 30 readyz "$op_port"
check "autoscaler with its token and the chart's args: ready (Lease taken)" wait_for 30 readyz "$as_port"
check "example InferenceService applies" k -n "$wns" apply -f "$e2e_root/crds/examples/minimal.yaml"
check "operator reconciles it into a Deployment" wait_for 30 k -n "$wns" get deploy/stories
check "operator creates its Service" wait_for 30 k -n "$wns" get svc/stories
check "operator writes its status" wait_for 30 bash -c \
	'[ -n "$(kubectl -n "$0" get cisvc/stories -o jsonpath="{.status.conditions}")" ]' "$wns"
check "Deployment uses the operator's engine image" wait_for 10 bash -c \
	'kubectl -n "$0" get deploy/stories -o jsonpath="{.spec.template.spec.containers[*].image}" |
	grep -qF ghcr.io/cinfer/cinfer-engine:0.1.0' "$wns"
check "Deployment: the chart's shutdown delay, grace period 10 + 30 + 15" wait_for 10 bash -c \
	'[ "$(kubectl -n "$0" get deploy/stories -o jsonpath="{.spec.template.spec.terminationGracePeriodSeconds}")" = 55 ]' "$wns"

# The NetworkPolicy, made with the operator's token and the chart's args. No CNI runs in this
# control plane, so nothing enforces it here: what is checked is that it exists, selects the engine
# pods of this InferenceService, and admits exactly the router and the autoscaler of the release
# namespace on the engine port (a request from an unlisted namespace cannot be shown to be refused
# without a network plugin).
np_is() { [ "$(k -n "$wns" get networkpolicy/stories -o "jsonpath=$1" 2>/dev/null)" = "$2" ]; }
check "operator creates the NetworkPolicy" wait_for 30 k -n "$wns" get networkpolicy/stories
check "NetworkPolicy selects the engine pods of stories" np_is \
	'{.spec.podSelector.matchLabels.app\.kubernetes\.io/name}/{.spec.podSelector.matchLabels.serving\.cinfer\.io/inferenceservice}/{.spec.policyTypes}' \
	'cinfer-engine/stories/["Ingress"]'
check "NetworkPolicy admits the router of $ns" np_is \
	'{.spec.ingress[0].from[0].namespaceSelector.matchLabels.kubernetes\.io/metadata\.name}/{.spec.ingress[0].from[0].podSelector.matchLabels.app\.kubernetes\.io/name}' \
	"$ns/cinfer-router"
check "NetworkPolicy admits the autoscaler of $ns (it scrapes /metrics)" np_is \
	'{.spec.ingress[0].from[1].namespaceSelector.matchLabels.kubernetes\.io/metadata\.name}/{.spec.ingress[0].from[1].podSelector.matchLabels.app\.kubernetes\.io/component}/{.spec.ingress[0].from[1].podSelector.matchLabels.app\.kubernetes\.io/part-of}' \
	"$ns/autoscaler/cinfer"
check "NetworkPolicy: the autoscaler pods of the chart carry those labels" bash -c \
	'kubectl -n "$0" get pods -l app.kubernetes.io/component=autoscaler,app.kubernetes.io/part-of=cinfer -o name | grep -q .' "$ns"
check "NetworkPolicy: nothing else, engine port only" bash -c 'kubectl -n "$0" get networkpolicy/stories -o json |
	python3 -c "import json,sys; s=json.load(sys.stdin)[\"spec\"]; r=s[\"ingress\"]
assert len(r) == 1 and len(r[0][\"from\"]) == 2 and r[0][\"ports\"] == [{\"port\": 8000, \"protocol\": \"TCP\"}], s"' "$wns"

# --- the autoscaler's pod patches: the admission policy, change by change ---------------------------
# RBAC gives it "patch pods" for the deletion-cost annotation; the ValidatingAdmissionPolicy lets
# nothing else through (this API server enforces it).
engine_pod() { k -n "$wns" get pods -l serving.cinfer.io/inferenceservice=stories -o name | head -n1; }
check "engine pod created by the Deployment" wait_for 60 bash -c '[ -n "$(kubectl -n "$0" get pods \
	-l serving.cinfer.io/inferenceservice=stories -o name)" ]' "$wns"
epod="$(engine_pod)"
as() { kubectl --kubeconfig "$as_kc" --request-timeout=20s -n "$wns" "$@"; }
# denied CMD...: CMD fails and the API server names the policy
denied() {
	local out
	if out="$("$@" 2>&1)"; then
		echo "allowed: $*"
		return 1
	fi
	grep -q "ValidatingAdmissionPolicy 'r1-cinfer-autoscaler-pod-patch'" <<<"$out" || {
		echo "refused, but not by the policy: $out"
		return 1
	}
}
check "autoscaler may set the deletion cost of an engine pod" as annotate "$epod" \
	controller.kubernetes.io/pod-deletion-cost=1000 --overwrite
check "... and change it" as annotate "$epod" controller.kubernetes.io/pod-deletion-cost=-2000 --overwrite
check "... (the value is there)" bash -c '[ "$(kubectl -n "$0" get "$1" -o jsonpath="{.metadata.annotations.controller\.kubernetes\.io/pod-deletion-cost}")" = -2000 ]' \
	"$wns" "$epod"
# (the API server validates the value itself before admission; the policy says the same)
check "autoscaler may not set a deletion cost that is not an integer" bash -c \
	'! kubectl --kubeconfig "$0" -n "$1" annotate "$2" controller.kubernetes.io/pod-deletion-cost=lowest --overwrite' \
	"$as_kc" "$wns" "$epod"
check "autoscaler may not change a pod's labels" denied as label "$epod" \
	serving.cinfer.io/inferenceservice=hijacked --overwrite
check "autoscaler may not add a label" denied as label "$epod" example.com/x=y
check "autoscaler may not set other annotations" denied as annotate "$epod" example.com/x=y
check "autoscaler may not change a container image" denied as patch "$epod" --type strategic -p \
	'{"spec":{"containers":[{"name":"engine","image":"attacker/evil:1"}]}}'
check "autoscaler may not add a finalizer" denied as patch "$epod" --type merge -p \
	'{"metadata":{"finalizers":["example.com/stuck"]}}'
check "autoscaler may not drop the owner reference (orphan the pod)" denied as patch "$epod" \
	--type json -p '[{"op":"remove","path":"/metadata/ownerReferences"}]'
k -n "$wns" run not-an-engine --image=registry.example.com/app:1 --restart=Never >/dev/null
check "autoscaler may not annotate a pod that is not an engine pod" denied as annotate \
	pod/not-an-engine controller.kubernetes.io/pod-deletion-cost=5
check "others are not bound by it (admin labels the engine pod)" k -n "$wns" label "$epod" example.com/x=y
k -n "$wns" delete pod not-an-engine --wait=false >/dev/null

# The autoscaler sees the autoscaled example through its InferenceService informer (list/watch
# under its ClusterRole). Whether it writes status.autoscaling without engine metrics depends on
# its policy timing, so that is left to tests/e2e/autoscaler.sh; the verbs it needs for it are
# checked above with auth can-i.
check "autoscaled example applies" k -n "$wns" apply -f "$e2e_root/crds/examples/autoscaled.yaml"
if wait_for 30 grep -q '"msg":"managing","inferenceservice":"models/chat"' "$work/autoscaler.log"; then
	ok "autoscaler manages the autoscaled example"
else
	not_ok "autoscaler manages the autoscaled example"
	tail -n 20 "$work/autoscaler.log" | sed 's/^/    /'
fi
check "Leases held in the release namespace" bash -c \
	'kubectl -n "$0" get lease cinfer-operator && kubectl -n "$0" get lease cinfer-autoscaler' "$ns"
# A 403 is logged as "unauthorized" with the API server's "... is forbidden: ..." message.
check "no RBAC denials in the operator log" bash -c '! grep -iE "forbidden|unauthorized" "$0"' "$work/operator.log"
check "no RBAC denials in the autoscaler log" bash -c '! grep -iE "forbidden|unauthorized" "$0"' "$work/autoscaler.log"
# The router with its token and the chart's args (API on a free loopback port): its informers
# sync and the InferenceServices applied above are its models.
rt_port="$(free_port)"
rt_api="$(free_port)"
mapfile -t rt_args < <(chart_args router "$rt_port" | sed "s/^--port=.*/--port=$rt_api/; s/^--host=.*/--host=127.0.0.1/")
check "chart's router args extracted" test "${#rt_args[@]}" -ge 6
"$e2e_bin/cinfer-router" --kubeconfig "$rt_kc" "${rt_args[@]}" >"$work/router.log" 2>&1 &
proc_pids+=($!)
check "router with its token and the chart's args: ready (informers synced)" wait_for 30 readyz "$rt_port"
check "router serves the InferenceServices as models (/v1/models)" wait_for 30 bash -c \
	'm="$(curl -sf "http://127.0.0.1:$0/v1/models")" && grep -q "\"stories\"" <<<"$m" && grep -q "\"chat\"" <<<"$m"' "$rt_api"
check "no RBAC denials in the router log" bash -c '! grep -iE "forbidden|unauthorized" "$0"' "$work/router.log"
for p in "${proc_pids[@]}"; do kill "$p" 2>/dev/null; done
wait 2>/dev/null
proc_pids=()

# Control: with the token of a ServiceAccount the chart did not bind, the same operator is denied,
# says so in its log (what the two checks above look for) and never becomes ready.
nobody_kc="$work/nobody.kubeconfig"
k -n "$ns" create serviceaccount nobody >/dev/null
check "unbound ServiceAccount token kubeconfig" token_kubeconfig nobody "$ns" "$nobody_kc"
nb_port="$(free_port)"
mapfile -t nb_args < <(chart_args operator "$nb_port")
"$e2e_bin/cinfer-operator" --kubeconfig "$nobody_kc" "${nb_args[@]}" >"$work/nobody.log" 2>&1 &
proc_pids+=($!)
check "control: unbound ServiceAccount is denied and the log says so" wait_for 20 \
	grep -qiE "forbidden|unauthorized" "$work/nobody.log"
check "control: its operator is alive (/healthz) but not ready (/readyz)" bash -c \
	'curl -sf "http://127.0.0.1:$0/healthz" >/dev/null && ! curl -sf "http://127.0.0.1:$0/readyz"' "$nb_port"
for p in "${proc_pids[@]}"; do kill "$p" 2>/dev/null; done
wait 2>/dev/null
proc_pids=()

# --- a namespaced install: RBAC confined to the watchNamespaces list ------------------------------
sns=cinfer-scoped
k create namespace "$sns" >/dev/null
check "helm install (watchNamespaces=[$wns, $wns2])" h install r2 "$chart" -n "$sns" --kubeconfig "$KUBECONFIG" \
	-f "$testdata/watch-namespaces.yaml"
check "scoped: no ClusterRole" bash -c '! kubectl get clusterrole r2-cinfer-operator r2-cinfer-autoscaler 2>/dev/null'
for n in "$wns" "$wns2"; do
	check "scoped: Roles and RoleBindings in $n" k -n "$n" get role/r2-cinfer-operator \
		rolebinding/r2-cinfer-operator role/r2-cinfer-autoscaler rolebinding/r2-cinfer-autoscaler
done
sc_kc="$work/scoped.kubeconfig"
sa_kc="$work/scoped-autoscaler.kubeconfig"
check "scoped operator token kubeconfig" token_kubeconfig r2-cinfer-operator "$sns" "$sc_kc"
check "scoped autoscaler token kubeconfig" token_kubeconfig r2-cinfer-autoscaler "$sns" "$sa_kc"
for n in "$wns" "$wns2"; do
	can_list "$sc_kc" yes "-n $n" "scoped operator" <<'EOF'
list inferenceservices.serving.cinfer.io
create deployments.apps
create networkpolicies.networking.k8s.io
EOF
	can_list "$sa_kc" yes "-n $n" "scoped autoscaler" <<'EOF'
list inferenceservices.serving.cinfer.io
patch inferenceservices.serving.cinfer.io scale
patch pods
EOF
done
can_list "$sc_kc" yes "-n $sns" "scoped operator" <<'EOF'
create leases.coordination.k8s.io
EOF
can_list "$sc_kc" no "-n default" "scoped operator" <<'EOF'
list inferenceservices.serving.cinfer.io
create deployments.apps
create networkpolicies.networking.k8s.io
EOF
can_list "$sa_kc" no "-n default" "scoped autoscaler" <<'EOF'
list inferenceservices.serving.cinfer.io
patch pods
EOF
can_list "$sc_kc" no "-A" "scoped operator" <<'EOF'
list inferenceservices.serving.cinfer.io
EOF
can_list "$sa_kc" no "-A" "scoped autoscaler" <<'EOF'
list pods
EOF
# Both programs, with their tokens and the chart's args (--namespace=models,models2), work in both.
sc_port="$(free_port)"
mapfile -t sc_args < <(chart_args operator "$sc_port" r2 "$sns" -f "$testdata/watch-namespaces.yaml")
sa_port="$(free_port)"
mapfile -t sa_args < <(chart_args autoscaler "$sa_port" r2 "$sns" -f "$testdata/watch-namespaces.yaml")
check "scoped args carry --namespace=$wns,$wns2" bash -c \
	'printf "%s\n" "$@" | grep -qx -- "--namespace=$0"' "$wns,$wns2" "${sc_args[@]}" "${sa_args[@]}"
"$e2e_bin/cinfer-operator" --kubeconfig "$sc_kc" "${sc_args[@]}" >"$work/scoped.log" 2>&1 &
proc_pids+=($!)
"$e2e_bin/cinfer-autoscaler" --kubeconfig "$sa_kc" "${sa_args[@]}" >"$work/scoped-autoscaler.log" 2>&1 &
proc_pids+=($!)
check "scoped operator with its token: ready" wait_for 30 readyz "$sc_port"
check "scoped autoscaler with its token: ready" wait_for 30 readyz "$sa_port"
check "second example applies" bash -c 'sed "s/name: stories/name: scoped/" "$0" |
	kubectl -n "$1" apply -f -' "$e2e_root/crds/examples/minimal.yaml" "$wns"
check "an example in $wns2 applies" bash -c 'sed "s/name: chat/name: chat2/" "$0" |
	kubectl -n "$1" apply -f -' "$e2e_root/crds/examples/autoscaled.yaml" "$wns2"
check "scoped operator reconciles in $wns" wait_for 30 k -n "$wns" get deploy/scoped networkpolicy/scoped
check "scoped operator reconciles in $wns2" wait_for 30 k -n "$wns2" get deploy/chat2 networkpolicy/chat2
if wait_for 30 grep -q "\"msg\":\"managing\",\"inferenceservice\":\"$wns2/chat2\"" "$work/scoped-autoscaler.log"; then
	ok "scoped autoscaler manages the example in $wns2"
else
	not_ok "scoped autoscaler manages the example in $wns2"
	tail -n 20 "$work/scoped-autoscaler.log" | sed 's/^/    /'
fi
check "no RBAC denials in the scoped operator log" bash -c '! grep -iE "forbidden|unauthorized" "$0"' \
	"$work/scoped.log"
check "no RBAC denials in the scoped autoscaler log" bash -c '! grep -iE "forbidden|unauthorized" "$0"' \
	"$work/scoped-autoscaler.log"
for p in "${proc_pids[@]}"; do kill "$p" 2>/dev/null; done
wait 2>/dev/null
proc_pids=()
check "helm uninstall r2" h uninstall r2 -n "$sns" --kubeconfig "$KUBECONFIG"
for n in "$wns" "$wns2"; do
	check "r2 Roles in $n removed" wait_for 30 bash -c \
		'! kubectl -n "$0" get role/r2-cinfer-operator 2>/dev/null && ! kubectl -n "$0" get role/r2-cinfer-autoscaler 2>/dev/null' "$n"
done
check "r2 admission policy removed" wait_for 30 bash -c \
	'! kubectl get validatingadmissionpolicy/r2-cinfer-autoscaler-pod-patch 2>/dev/null'

# --- helm uninstall ------------------------------------------------------------------------------
check "helm uninstall r1" h uninstall r1 -n "$ns" --kubeconfig "$KUBECONFIG"
gone() { ! k "$@" >/dev/null 2>&1; }
for o in deploy/r1-cinfer-operator deploy/r1-cinfer-autoscaler sa/r1-cinfer-operator \
	sa/r1-cinfer-autoscaler svc/r1-cinfer-operator-metrics role/r1-cinfer-operator-leader-election \
	rolebinding/r1-cinfer-autoscaler-leader-election deploy/r1-cinfer-router svc/r1-cinfer-router; do
	check "uninstalled: $o" wait_for 30 gone -n "$ns" get "$o"
done
for o in clusterrole/r1-cinfer-operator clusterrolebinding/r1-cinfer-autoscaler clusterrole/r1-cinfer-router \
	validatingadmissionpolicy/r1-cinfer-autoscaler-pod-patch \
	validatingadmissionpolicybinding/r1-cinfer-autoscaler-pod-patch; do
	check "uninstalled: $o" wait_for 30 gone get "$o"
done
check "no objects of the release left" bash -c \
	'[ -z "$(kubectl -n "$0" get all,sa,role,rolebinding -l app.kubernetes.io/instance=r1 -o name 2>/dev/null)" ]' "$ns"
check "CRD kept after uninstall" k get crd inferenceservices.serving.cinfer.io
check "InferenceServices kept after uninstall" k -n "$wns" get cisvc/stories

summary
