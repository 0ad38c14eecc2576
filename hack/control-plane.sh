#!/usr/bin/env bash
# A real Kubernetes control plane for tests: etcd, kube-apiserver (RBAC on) and
# kube-controller-manager, on 127.0.0.1 only, built by hack/build-control-plane.sh.
# It has no nodes and no kubelet: pods stay Pending. Each run owns a state dir
# (certs, kubeconfigs, etcd data, logs, pid files) and its own free ports, so
# concurrent runs with different state dirs do not collide.
#
#   hack/control-plane.sh up       start; prints the `env` lines on stdout
#   hack/control-plane.sh env      export KUBECONFIG=... CINFER_CP_DIR=...
#   hack/control-plane.sh status   exit 0 and say so when up, exit 1 when not
#   hack/control-plane.sh down     stop everything, remove the state dir (idempotent)
#
# State dir: $CINFER_CP_DIR if set (created if missing; must be empty or a
# stopped control plane); else a new mktemp -d /tmp/cinfer-cp.XXXXXX that is
# recorded in ${CINFER_CACHE:-$HOME/.cache/cinfer}/control-plane/current for
# env/status/down without CINFER_CP_DIR. Tests should always set CINFER_CP_DIR.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${CINFER_CACHE:-$HOME/.cache/cinfer}/control-plane"
pointer="$cache_root/current"
marker="cinfer-cp.state" # present in every state dir this script created
components=(etcd kube-apiserver kube-controller-manager)
ready_timeout="${CINFER_CP_READY_TIMEOUT:-90}"

log() { echo "control-plane: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}

usage() {
	echo "usage: $0 up|down|env|status" >&2
	exit 2
}

# Resolve the state dir for env/status/down, as an absolute path (the pid
# check matches it against command lines). Prints nothing if none is known.
state_dir_lookup() {
	local dir=""
	if [[ -n "${CINFER_CP_DIR:-}" ]]; then
		dir="$CINFER_CP_DIR"
	elif [[ -f "$pointer" ]]; then
		dir="$(cat "$pointer")"
	fi
	if [[ -n "$dir" && -d "$dir" ]]; then
		dir="$(cd "$dir" && pwd)"
	fi
	echo "$dir"
}

# pid_alive DIR NAME: the component's pid file names a live process that was
# started for DIR (guards against pid reuse after a crash).
pid_alive() {
	local dir="$1" name="$2" pid
	[[ -f "$dir/pids/$name" ]] || return 1
	pid="$(cat "$dir/pids/$name")"
	[[ "$pid" =~ ^[0-9]+$ ]] || return 1
	[[ -r "/proc/$pid/cmdline" ]] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$dir/" || return 1
	echo "$pid"
}

any_alive() {
	local c
	for c in "${components[@]}"; do
		pid_alive "$1" "$c" >/dev/null && return 0
	done
	return 1
}

# stop_all DIR: TERM to all at once (the state is thrown away, so there is no
# order to respect; in sequence it takes ~7 s, at once ~2 s), wait up to 15 s,
# then KILL what is left.
stop_all() {
	local dir="$1" c pid i pids=()
	for c in "${components[@]}"; do
		pid="$(pid_alive "$dir" "$c")" || continue
		kill -TERM "$pid" 2>/dev/null || true
		pids+=("$pid")
	done
	for pid in "${pids[@]}"; do
		for ((i = 0; i < 150; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			log "pid $pid ignored SIGTERM; sending SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			for ((i = 0; i < 50; i++)); do
				kill -0 "$pid" 2>/dev/null || break
				sleep 0.1
			done
		fi
	done
	rm -f "$dir/pids/"*
}

# pick_ports N: N distinct free loopback TCP ports, one a line. They come from
# 20000-32767, below the kernel's ephemeral range, so outgoing connections do
# not take them; a rare race with another run is caught by up's retry.
pick_ports() {
	python3 - "$1" <<'EOF'
import random, socket, sys
n, socks, ports = int(sys.argv[1]), [], []
while len(ports) < n:
    p = random.randint(20000, 32767)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        s.close()
        continue
    socks.append(s)
    ports.append(p)
print("\n".join(map(str, ports)))
EOF
}

gen_pki() {
	local d="$1/pki"
	mkdir -p "$d"
	(
		cd "$d"
		umask 077
		openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
			-subj "/CN=cinfer-test-ca" 2>/dev/null
		openssl genrsa -out sa.key 2048 2>/dev/null
		openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
		# The aggregation layer's request-header CA is a separate CA, as in
		# kubeadm: a cert it signs is trusted to assert any user name.
		openssl req -x509 -newkey rsa:2048 -nodes -keyout front-proxy-ca.key -out front-proxy-ca.crt \
			-days 3650 -subj "/CN=cinfer-test-front-proxy-ca" 2>/dev/null
		# sign NAME CN O EXT [CA]
		sign() {
			local subj="/CN=$2" ca="${5:-ca}"
			[[ -n "$3" ]] && subj="/O=$3$subj"
			openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$subj" 2>/dev/null
			printf '%s\n' "$4" >"$1.ext"
			openssl x509 -req -in "$1.csr" -CA "$ca.crt" -CAkey "$ca.key" -CAcreateserial \
				-days 3650 -out "$1.crt" -extfile "$1.ext" 2>/dev/null
			rm -f "$1.csr" "$1.ext"
		}
		sign apiserver kube-apiserver "" \
			"$(printf '%s\n' 'basicConstraints=CA:FALSE' 'keyUsage=critical,digitalSignature,keyEncipherment' \
				'extendedKeyUsage=serverAuth' \
				'subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local')"
		client_ext="$(printf '%s\n' 'basicConstraints=CA:FALSE' \
			'keyUsage=critical,digitalSignature,keyEncipherment' 'extendedKeyUsage=clientAuth')"
		sign admin cinfer-admin system:masters "$client_ext"
		sign kcm system:kube-controller-manager "" "$client_ext"
		sign front-proxy-client front-proxy-client "" "$client_ext" front-proxy-ca
		rm -f ./*.srl
	)
}

# write_kubeconfig FILE SERVER CERTNAME USER
write_kubeconfig() {
	local pki
	pki="$(dirname "$1")/pki"
	(
		umask 077
		cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: cinfer-test
  cluster:
    server: $2
    certificate-authority-data: $(base64 -w0 <"$pki/ca.crt")
users:
- name: $4
  user:
    client-certificate-data: $(base64 -w0 <"$pki/$3.crt")
    client-key-data: $(base64 -w0 <"$pki/$3.key")
contexts:
- name: cinfer-test
  context:
    cluster: cinfer-test
    user: $4
current-context: cinfer-test
EOF
	)
}

# start DIR NAME ARGS...: run a component detached (own session, so a ^C in
# the calling shell does not reach it), logging to DIR/logs/NAME.log.
start() {
	local dir="$1" name="$2"
	shift 2
	# 8>&-: the flock on DIR/.lock is ours; a daemon must not inherit it.
	setsid "$bin_dir/$name" "$@" </dev/null >"$dir/logs/$name.log" 2>&1 8>&- &
	echo $! >"$dir/pids/$name"
}

print_env() {
	printf 'export KUBECONFIG=%q\n' "$1/admin.kubeconfig"
	printf 'export CINFER_CP_DIR=%q\n' "$1"
}

# fail_with_logs DIR NAME MSG
fail_with_logs() {
	log "error: $3"
	log "last lines of $1/logs/$2.log:"
	tail -n 25 "$1/logs/$2.log" >&2 || true
}

# wait_ready DIR DEADLINE WHAT PROBE...: poll PROBE until it succeeds. Every
# component started so far must stay alive. Returns 0 when ready, 3 when a
# component lost its port to someone else (retry with new ports), 1 otherwise.
wait_ready() {
	local dir="$1" deadline="$2" what="$3" c
	shift 3
	while :; do
		"$@" && return 0
		for c in "${components[@]}"; do
			[[ -f "$dir/pids/$c" ]] || continue
			pid_alive "$dir" "$c" >/dev/null && continue
			if grep -q 'address already in use' "$dir/logs/$c.log" 2>/dev/null; then
				log "$c: port taken by another process; retrying with new ports"
				return 3
			fi
			fail_with_logs "$dir" "$c" "$c exited during start-up"
			return 1
		done
		if ((SECONDS >= deadline)); then
			fail_with_logs "$dir" "$what" "$what not ready after ${ready_timeout}s"
			return 1
		fi
		sleep 0.3
	done
}

etcd_healthy() { curl -sf --max-time 2 "http://127.0.0.1:$1/health" 2>/dev/null | grep -q '"health":"true"'; }
apiserver_ready() {
	[[ "$(kubectl --kubeconfig="$1/admin.kubeconfig" --request-timeout=5s get --raw /readyz 2>/dev/null)" == ok ]]
}
kcm_healthy() { curl -skf --max-time 2 "https://127.0.0.1:$1/healthz" >/dev/null 2>&1; }

# up_once DIR: start the three components in order, each once the one it
# needs is ready (kube-controller-manager exits if the RBAC bootstrap roles do
# not exist yet). 0 = ready, 3 = port clash (retry), 1 = failure.
up_once() {
	local dir="$1" p_etcd p_peer p_api p_kcm deadline ports
	mapfile -t ports < <(pick_ports 4)
	[[ ${#ports[@]} -eq 4 ]] || { log "error: could not pick free ports"; return 1; }
	p_etcd=${ports[0]} p_peer=${ports[1]} p_api=${ports[2]} p_kcm=${ports[3]}
	cat >"$dir/ports.env" <<EOF
ETCD_PORT=$p_etcd
ETCD_PEER_PORT=$p_peer
APISERVER_PORT=$p_api
KCM_PORT=$p_kcm
EOF
	write_kubeconfig "$dir/admin.kubeconfig" "https://127.0.0.1:$p_api" admin cinfer-admin
	write_kubeconfig "$dir/kcm.kubeconfig" "https://127.0.0.1:$p_api" kcm system:kube-controller-manager
	rm -rf "${dir:?}/etcd"
	rm -f "${dir:?}/pids/"*
	deadline=$((SECONDS + ready_timeout))

	start "$dir" etcd --name=cinfer-test --data-dir="$dir/etcd" \
		--listen-client-urls="http://127.0.0.1:$p_etcd" --advertise-client-urls="http://127.0.0.1:$p_etcd" \
		--listen-peer-urls="http://127.0.0.1:$p_peer" --initial-advertise-peer-urls="http://127.0.0.1:$p_peer" \
		--initial-cluster="cinfer-test=http://127.0.0.1:$p_peer" --initial-cluster-state=new \
		--unsafe-no-fsync --log-level=warn
	wait_ready "$dir" "$deadline" etcd etcd_healthy "$p_etcd" || return

	# --endpoint-reconciler-type=none: the default reconciler would publish
	# 127.0.0.1 as the endpoint of service/kubernetes, which validation rejects
	# (loopback) and logs as an error every 10 s. Nothing here runs pods.
	start "$dir" kube-apiserver \
		--bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$p_api" \
		--cert-dir="$dir/pki" --tls-cert-file="$dir/pki/apiserver.crt" --tls-private-key-file="$dir/pki/apiserver.key" \
		--client-ca-file="$dir/pki/ca.crt" \
		--etcd-servers="http://127.0.0.1:$p_etcd" \
		--authorization-mode=Node,RBAC --allow-privileged=true \
		--service-cluster-ip-range=10.96.0.0/16 \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="$dir/pki/sa.pub" --service-account-signing-key-file="$dir/pki/sa.key" \
		--requestheader-client-ca-file="$dir/pki/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
		--requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
		--requestheader-extra-headers-prefix=X-Remote-Extra- \
		--proxy-client-cert-file="$dir/pki/front-proxy-client.crt" --proxy-client-key-file="$dir/pki/front-proxy-client.key" \
		--endpoint-reconciler-type=none
	wait_ready "$dir" "$deadline" kube-apiserver apiserver_ready "$dir" || return

	# --flex-volume-plugin-dir: the default is under /usr/libexec, which it
	# would create; keep every file this run writes inside DIR.
	start "$dir" kube-controller-manager \
		--bind-address=127.0.0.1 --secure-port="$p_kcm" \
		--kubeconfig="$dir/kcm.kubeconfig" \
		--authentication-kubeconfig="$dir/kcm.kubeconfig" --authorization-kubeconfig="$dir/kcm.kubeconfig" \
		--controllers='*' --use-service-account-credentials=true --leader-elect=false \
		--root-ca-file="$dir/pki/ca.crt" --service-account-private-key-file="$dir/pki/sa.key" \
		--cluster-signing-cert-file="$dir/pki/ca.crt" --cluster-signing-key-file="$dir/pki/ca.key" \
		--service-cluster-ip-range=10.96.0.0/16 --flex-volume-plugin-dir="$dir/flexvolume"
	wait_ready "$dir" "$deadline" kube-controller-manager kcm_healthy "$p_kcm"
}

cmd_up() {
	local dir attempt rc tool t0=$SECONDS
	for tool in kubectl openssl python3 curl setsid; do
		command -v "$tool" >/dev/null || die "$tool not found on PATH"
	done
	bin_dir="$("$here/build-control-plane.sh" --print-bin-dir)" || die "building the control plane failed"

	if [[ -n "${CINFER_CP_DIR:-}" ]]; then
		dir="$CINFER_CP_DIR"
		mkdir -p "$dir"
		dir="$(cd "$dir" && pwd)"
		if [[ ! -f "$dir/$marker" && -n "$(find "$dir" -mindepth 1 -maxdepth 1 ! -name .lock -print -quit)" ]]; then
			die "CINFER_CP_DIR=$dir is not empty and is not a control-plane state dir"
		fi
		exec 8>>"$dir/.lock"
		flock -n 8 || die "another 'up' or 'down' is running on $dir"
		if [[ -f "$dir/$marker" ]]; then
			any_alive "$dir" && die "a control plane is already up in $dir (run: CINFER_CP_DIR=$dir $0 down)"
			log "removing the stopped control plane left in $dir"
			find "$dir" -mindepth 1 -maxdepth 1 ! -name .lock -exec rm -rf {} +
		fi
	else
		# Without CINFER_CP_DIR there is one "current" control plane per
		# CINFER_CACHE; starting a second would orphan the first.
		if [[ -f "$pointer" ]]; then
			dir="$(cat "$pointer")"
			if [[ -f "$dir/$marker" ]] && any_alive "$dir"; then
				die "a control plane is already up in $dir (run '$0 down' first, or set CINFER_CP_DIR for another one)"
			fi
		fi
		dir="$(mktemp -d /tmp/cinfer-cp.XXXXXX)"
		exec 8>>"$dir/.lock"
		flock -n 8
		mkdir -p "$cache_root"
		echo "$dir" >"$pointer.tmp.$$" && mv "$pointer.tmp.$$" "$pointer"
	fi
	touch "$dir/$marker"
	mkdir -p "$dir/logs" "$dir/pids"
	# Interrupted (^C reaches us, not the setsid'ed daemons): stop what started.
	trap 'log "interrupted; stopping"; stop_all "$dir"; exit 130' INT TERM
	gen_pki "$dir"

	for attempt in 1 2 3; do
		rc=0
		up_once "$dir" || rc=$?
		[[ $rc -eq 3 ]] || break
		log "attempt $attempt: port clash"
		stop_all "$dir"
	done
	if [[ $rc -ne 0 ]]; then
		log "stopping what was started; logs stay in $dir/logs"
		stop_all "$dir"
		exit 1
	fi
	log "up in $((SECONDS - t0))s: $dir (apiserver https://127.0.0.1:$(grep APISERVER_PORT "$dir/ports.env" | cut -d= -f2))"
	print_env "$dir"
}

cmd_down() {
	local dir
	dir="$(state_dir_lookup)"
	[[ -n "$dir" && -d "$dir" ]] || {
		[[ -z "${CINFER_CP_DIR:-}" ]] && rm -f "$pointer"
		return 0
	}
	if [[ ! -f "$dir/$marker" ]]; then
		# Never rm -rf a directory this script did not create.
		die "$dir is not a control-plane state dir; not touching it"
	fi
	exec 8>>"$dir/.lock"
	# Wait for a concurrent up/down on DIR, but not forever: down must work
	# even if the lock holder is stuck (or is an `up` that a ^C interrupted).
	flock -w 30 8 || log "warning: $dir is locked by another up/down; stopping it anyway"
	stop_all "$dir"
	rm -rf "$dir"
	if [[ -f "$pointer" && "$(cat "$pointer")" == "$dir" ]]; then
		rm -f "$pointer"
	fi
	log "down: $dir removed"
}

cmd_env() {
	local dir
	dir="$(state_dir_lookup)"
	[[ -n "$dir" && -f "$dir/admin.kubeconfig" ]] || die "no control plane is up (run: $0 up)"
	print_env "$dir"
}

cmd_status() {
	local dir c pid state=up
	dir="$(state_dir_lookup)"
	if [[ -z "$dir" || ! -f "$dir/$marker" ]]; then
		echo "down"
		exit 1
	fi
	for c in "${components[@]}"; do
		if pid="$(pid_alive "$dir" "$c")"; then
			echo "$c: running (pid $pid)"
		else
			echo "$c: not running"
			state=down
		fi
	done
	if [[ $state == up ]] &&
		[[ "$(kubectl --kubeconfig="$dir/admin.kubeconfig" --request-timeout=5s get --raw /readyz 2>/dev/null)" == ok ]]; then
		echo "up: $dir"
		exit 0
	fi
	echo "down: $dir (not ready)"
	exit 1
}

case "${1:-}" in
up) cmd_up ;;
down) cmd_down ;;
env) cmd_env ;;
status) cmd_status ;;
*) usage ;;
esac
