#!/usr/bin/env bash
# The HTTP-layer benchmark of engine/BENCHMARKS.md ("HTTP layer"): for each engine binary given, on a
# tiny generated model (so the HTTP work is what is measured), alternating binaries round by round:
#   1. GET /health requests/s and latency with ab, one connection per request and keep-alive (-k);
#   2. streamed completions (max_tokens 8) with hack/loadgen, connect-per-request and --keep-alive;
#   3. /health latency while 300 idle upgrade attempts and 300 unfinished heads are held open.
#
#   hack/http-bench.sh [ROUNDS] BIN...          (default: build/bin/cinfer-engine, 3 rounds)
#   e.g. hack/http-bench.sh 3 /tmp/cinfer-engine-lws build/bin/cinfer-engine
#
# Needs ab (Debian: apache2-utils) and python3. Prints one line per measurement, with the server's
# CPU time per request (utime + stime from /proc, the number that a busy shared machine disturbs
# least); BENCHMARKS.md quotes the medians.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then
	rounds="$1"
	shift
fi
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=(build/bin/cinfer-engine)
command -v ab >/dev/null || {
	echo "http-bench: needs ab (apt-get install apache2-utils)" >&2
	exit 1
}
tmp="$(mktemp -d)"
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
model="$tmp/tiny.gguf"
"${bins[0]}" gen-model --out "$model" --type f32 --dim 64 --layers 2 --heads 2 --kv-heads 2 --ffn 128 \
	--vocab-size 512 --context-length 512 --log-format text >/dev/null 2>&1
port=18477

start() {
	"$1" serve --model "$model" --port "$port" --threads 1 --log-format text >"$tmp/srv.log" 2>&1 &
	pid=$!
	for _ in $(seq 200); do
		curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
		sleep 0.05
	done
	echo "http-bench: $1 did not start: $(tail -n 3 "$tmp/srv.log")" >&2
	exit 1
}
stop() {
	kill "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null || true
	pid=""
}

cpu_ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
# us_per_req TICKS0 N: server CPU microseconds per request since TICKS0.
us_per_req() { echo $((($(cpu_ticks) - $1) * 1000000 / $(getconf CLK_TCK) / $2)); }

# ab_line LABEL ARGS: requests/s, mean and p99 latency (ms) of one ab run (20000 requests).
ab_line() {
	local label="$1" out t0
	shift
	t0="$(cpu_ticks)"
	out="$(ab -q -r -s 10 -n 20000 "$@" "http://127.0.0.1:$port/health" 2>&1)" || true
	printf '%-44s %8s req/s  mean %6s ms  p99 %5s ms  failed %s  server %s us/req\n' "$label" \
		"$(awk '/Requests per second/ {print $4}' <<<"$out")" \
		"$(awk '/Time per request.*\(mean\)$/ {print $4}' <<<"$out")" \
		"$(awk '$1 == "99%" {print $2}' <<<"$out")" \
		"$(awk '/Failed requests/ {print $3}' <<<"$out")" "$(us_per_req "$t0" 20000)"
}

attack() {
	python3 - "$port" <<'EOF'
import socket, sys, time
port = int(sys.argv[1])
socks = []
for i in range(300):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    up = b"Upgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n" \
        if i % 2 else b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n"
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n" + up + b"\r\n")
    socks.append(s)
for _ in range(300):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    socks.append(s)
lat = []
for _ in range(3):
    t0 = time.monotonic()
    try:
        c = socket.create_connection(("127.0.0.1", port), timeout=10)
        c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        ok = c.recv(64).startswith(b"HTTP/1.1 200")
        c.close()
    except OSError:
        ok = False
    lat.append((time.monotonic() - t0) * 1000 if ok else float("inf"))
print(f"{'/health under 300 upgrades + 300 heads':<44} max {max(lat):8.1f} ms  ({', '.join(f'{x:.1f}' for x in lat)})")
for s in socks:
    s.close()
EOF
}

for r in $(seq 1 "$rounds"); do
	for b in "${bins[@]}"; do
		echo "== round $r: $b"
		start "$b"
		ab_line "/health, connect per request (c=16)" -c 16
		ab_line "/health, keep-alive (c=16)" -c 16 -k
		for ka in "" --keep-alive; do
			t0="$(cpu_ticks)"
			out="$(python3 hack/loadgen --url "http://127.0.0.1:$port" --concurrency 16 --requests 800 \
				--max-tokens 8 --prompt-tokens 16 $ka 2>&1)"
			printf '%-44s %s | e2e %s | server %s us/req\n' "completions c=16 ${ka:-connect-per-request}" \
				"$(grep '^throughput:' <<<"$out" | sed 's/throughput: *//; s/,.*//')" \
				"$(grep '^e2e ms:' <<<"$out" | sed 's/e2e ms: *//; s/ *(n=.*//')" "$(us_per_req "$t0" 800)"
		done
		attack
		stop
	done
done
