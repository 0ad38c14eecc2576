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

# Resolve the state dir for env/status/down. Prints nothing if none is known.
state_dir_lookup() {
	if [[ -n "${CINFER_CP_DIR:-}" ]]; then
		echo "$CINFER_CP_DIR"
	elif [[ -f "$pointer" ]]; then
		cat "$pointer"
	fi
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

# stop_all DIR: TERM, wait up to 15 s, then KILL; in reverse start order.
stop_all() {
	local dir="$1" c pid i
	for c in kube-controller-manager kube-apiserver etcd; do
		pid="$(pid_alive "$dir" "$c")" || continue
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < 150; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			log "$c (pid $pid) ignored SIGTERM; sending SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			for ((i = 0; i < 50; i++)); do
				kill -0 "$pid" 2>/dev/null || break
				sleep 0.1
			done
		fi
		rm -f "$dir/pids/$c"
	done
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
		# name CN O EXT
		sign() {
			local subj="/CN=$2"
			[[ -n "$3" ]] && subj="/O=$3$subj"
			openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$subj" 2>/dev/null
			printf '%s\n' "$4" >"$1.ext"
			openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
				-days 3650 -out "$1.crt" -extfile "$1.ext" 2>/dev/null
			rm -f "$1.csr" "$1.ext"
		}
		sign apiserver kube-apiserver "" \
			"$(printf '%s\n' 'basicConstraints=CA:FALSE' 'keyUsage=critical,digitalSignature,keyEncipherment' \
				'extendedKeyUsage=serverAuth' \
				'subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local')"
		client_ext="$(printf '%s\n' 'basicConstraints=CA:FALSE' \
			'keyUsage=critical,digitalSignature,keyEncipherment' 'extendedKeyUsage=clientAuth')"
		sign admin cinfer-admin system:masters "$client_ext"
		sign kcm system:kube-controller-manager "" "$client_ext"
		rm -f ca.srl
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
	setsid "$bin_dir/$name" "$@" </dev/null >"$dir/logs/$name.log" 2>&1 &
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

# up_once DIR: 0 = ready, 3 = port taken (retry with new ports), 1 = failure.
up_once() {
	local dir="$1" p_etcd p_peer p_api p_kcm c deadline ports
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
	rm -rf "$dir/etcd"

	start "$dir" etcd --name=cinfer-test --data-dir="$dir/etcd" \
		--listen-client-urls="http://127.0.0.1:$p_etcd" --advertise-client-urls="http://127.0.0.1:$p_etcd" \
		--listen-peer-urls="http://127.0.0.1:$p_peer" --initial-advertise-peer-urls="http://127.0.0.1:$p_peer" \
		--initial-cluster="cinfer-test=http://127.0.0.1:$p_peer" --initial-cluster-state=new \
		--unsafe-no-fsync --log-level=warn

	start "$dir" kube-apiserver \
		--bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$p_api" \
		--cert-dir="$dir/pki" --tls-cert-file="$dir/pki/apiserver.crt" --tls-private-key-file="$dir/pki/apiserver.key" \
		--client-ca-file="$dir/pki/ca.crt" \
		--etcd-servers="http://127.0.0.1:$p_etcd" \
		--authorization-mode=Node,RBAC --allow-privileged=true \
		--service-cluster-ip-range=10.0.0.0/24 \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="$dir/pki/sa.pub" --service-account-signing-key-file="$dir/pki/sa.key"

	start "$dir" kube-controller-manager \
		--bind-address=127.0.0.1 --secure-port="$p_kcm" \
		--kubeconfig="$dir/kcm.kubeconfig" \
		--authentication-kubeconfig="$dir/kcm.kubeconfig" --authorization-kubeconfig="$dir/kcm.kubeconfig" \
		--controllers='*' --use-service-account-credentials=true --leader-elect=false \
		--root-ca-file="$dir/pki/ca.crt" --service-account-private-key-file="$dir/pki/sa.key" \
		--cluster-signing-cert-file="$dir/pki/ca.crt" --cluster-signing-key-file="$dir/pki/ca.key" \
		--service-cluster-ip-range=10.0.0.0/24

	deadline=$((SECONDS + ready_timeout))
	while :; do
		for c in "${components[@]}"; do
			if ! pid_alive "$dir" "$c" >/dev/null; then
				if grep -q 'address already in use' "$dir/logs/$c.log" 2>/dev/null; then
					log "$c: port taken by someone else; retrying with new ports"
					stop_all "$dir"
					return 3
				fi
				fail_with_logs "$dir" "$c" "$c exited during start-up"
				return 1
			fi
		done
		if [[ "$(kubectl --kubeconfig="$dir/admin.kubeconfig" --request-timeout=5s get --raw /readyz 2>/dev/null)" == ok ]] &&
			curl -skf --max-time 5 "https://127.0.0.1:$p_kcm/healthz" >/dev/null 2>&1; then
			return 0
		fi
		if ((SECONDS >= deadline)); then
			if ! kubectl --kubeconfig="$dir/admin.kubeconfig" --request-timeout=5s get --raw /readyz >/dev/null 2>&1; then
				fail_with_logs "$dir" kube-apiserver "kube-apiserver not ready after ${ready_timeout}s"
				kubectl --kubeconfig="$dir/admin.kubeconfig" --request-timeout=5s get --raw '/readyz?verbose' 2>&1 |
					grep -v '\[+\]' >&2 || true
			else
				fail_with_logs "$dir" kube-controller-manager "kube-controller-manager not healthy after ${ready_timeout}s"
			fi
			return 1
		fi
		sleep 0.5
	done
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
		exec 8>>"$dir/.lock"
		flock -n 8 || die "another 'up' or 'down' is running on $dir"
		if [[ -f "$dir/$marker" ]]; then
			any_alive "$dir" && die "a control plane is already up in $dir (run: CINFER_CP_DIR=$dir $0 down)"
			log "removing the stopped control plane left in $dir"
			find "$dir" -mindepth 1 -maxdepth 1 ! -name .lock -exec rm -rf {} +
		elif [[ -n "$(find "$dir" -mindepth 1 -maxdepth 1 ! -name .lock -print -quit)" ]]; then
			die "CINFER_CP_DIR=$dir is not empty and is not a control-plane state dir"
		fi
	else
		dir="$(mktemp -d /tmp/cinfer-cp.XXXXXX)"
		exec 8>>"$dir/.lock"
		flock -n 8
		mkdir -p "$cache_root"
		echo "$dir" >"$pointer.tmp.$$" && mv "$pointer.tmp.$$" "$pointer"
	fi
	touch "$dir/$marker"
	mkdir -p "$dir/logs" "$dir/pids"
	gen_pki "$dir"

	for attempt in 1 2 3; do
		rc=0
		up_once "$dir" || rc=$?
		[[ $rc -eq 3 ]] || break
		log "attempt $attempt: port clash"
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
	flock -w 120 8 || die "timed out waiting for another up/down on $dir"
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
