#!/usr/bin/env bash
# cinfer-engine fetch-model against a local HTTPS server with its own CA (loopback only): full
# download with sha256, resume of an interrupted transfer and of a partial file, redirects, hf://
# resolution, bearer tokens, sha256 mismatch, 404, TLS verification, bad arguments; credentials in
# URLs never logged, a full disk reported as such, the --max-bytes limit, --verify of a file on disk.
set -uo pipefail
source "$(dirname "$0")/lib.sh"

work="$(mktemp -d /tmp/cinfer-fetch-e2e.XXXXXX)"
srv_pid=""
cleanup_extra() {
	[ -n "$srv_pid" ] && kill "$srv_pid" 2>/dev/null
	rm -rf "$work"
}
trap 'cleanup_extra' EXIT
fetch="$e2e_bin/cinfer-engine"

# A CA and a server certificate for 127.0.0.1, made for this run.
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=cinfer test CA" \
	-keyout "$work/ca.key" -out "$work/ca.crt" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$work/srv.key" \
	-out "$work/srv.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$work/san.ext"
openssl x509 -req -in "$work/srv.csr" -CA "$work/ca.crt" -CAkey "$work/ca.key" -CAcreateserial \
	-days 1 -extfile "$work/san.ext" -out "$work/srv.crt" 2>/dev/null
head -c 3000000 /dev/urandom >"$work/model.gguf"
sha="$(sha256sum "$work/model.gguf" | cut -d' ' -f1)"
python3 "$e2e_root/tests/testdata/fetch/https_server.py" --file "$work/model.gguf" \
	--cert "$work/srv.crt" --key "$work/srv.key" --port-file "$work/port" --log "$work/requests" &
srv_pid=$!
if ! wait_for 10 test -s "$work/port"; then
	not_ok "test HTTPS server started"
	summary
	exit 1
fi
base="https://127.0.0.1:$(cat "$work/port")"
run() { "$fetch" fetch-model "$@" --cacert "$work/ca.crt" --log-format text --progress-seconds 1; }
same() { cmp -s "$work/model.gguf" "$1"; }

run "$base/model.gguf" "$work/a.gguf" --sha256 "$sha" >"$work/a.log" 2>&1
check "full download succeeds" [ $? -eq 0 ]
check "downloaded bytes are identical" same "$work/a.gguf"
check "no partial file left" [ ! -e "$work/a.gguf.part" ]
run "$base/model.gguf" "$work/a.gguf" --sha256 "$sha" >"$work/a2.log" 2>&1
check "present and verified file is not fetched again" grep -q "already present" "$work/a2.log"

run "$base/flaky/model.gguf" "$work/b.gguf" --sha256 "$sha" --retries 3 >"$work/b.log" 2>&1
check "interrupted transfer resumes and completes" [ $? -eq 0 ]
check "resumed file is identical" same "$work/b.gguf"
check "second request asked for the rest with Range" grep -qE '^/flaky/model.gguf bytes=[1-9][0-9]*-$' "$work/requests"
check "the retry was logged" grep -q "retrying" "$work/b.log"

head -c 1000000 "$work/model.gguf" >"$work/c.gguf.part"
run "$base/model.gguf" "$work/c.gguf" --sha256 "$sha" >"$work/c.log" 2>&1
check "existing partial file is resumed" grep -q '^/model.gguf bytes=1000000-$' "$work/requests"
check "resumed partial file is identical" same "$work/c.gguf"

head -c 1000000 "$work/model.gguf" >"$work/d.gguf.part"
run "$base/norange/model.gguf" "$work/d.gguf" --sha256 "$sha" --retries 2 >"$work/d.log" 2>&1
check "server without Range support: restart, still correct" same "$work/d.gguf"

run "$base/redirect/model.gguf" "$work/e.gguf" --sha256 "$sha" >"$work/e.log" 2>&1
check "redirect followed" same "$work/e.gguf"

run "hf://org/repo/m.gguf" "$work/f.gguf" --hf-endpoint "$base" --sha256 "$sha" >"$work/f.log" 2>&1
check "hf:// resolves to <endpoint>/org/repo/resolve/main/<file>" same "$work/f.gguf"

run "$base/token/model.gguf" "$work/g.gguf" --retries 2 >"$work/g.log" 2>&1
rc=$?
check "missing token: exit 1" [ $rc -eq 1 ]
check "missing token: says HTTP 401" grep -q "HTTP 401" "$work/g.log"
HF_TOKEN=secret-token run "$base/token/model.gguf" "$work/g.gguf" >"$work/g2.log" 2>&1
check "HF_TOKEN is sent as a bearer token" same "$work/g.gguf"
check "token never logged" bash -c "! grep -q secret-token $work/g2.log"

bad_sha="$(printf '%064d' 0)"
run "$base/model.gguf" "$work/h.gguf" --sha256 "$bad_sha" >"$work/h.log" 2>&1
rc=$?
check "sha256 mismatch: exit 1" [ $rc -eq 1 ]
check "sha256 mismatch: says so with both digests" grep -q "sha256 mismatch: expected $bad_sha, got $sha" "$work/h.log"
check "sha256 mismatch: nothing left behind" bash -c "[ ! -e $work/h.gguf ] && [ ! -e $work/h.gguf.part ]"

n_before="$(wc -l <"$work/requests")"
run "$base/missing.gguf" "$work/i.gguf" --retries 5 >"$work/i.log" 2>&1
rc=$?
check "404: exit 1 with the status" bash -c "[ $rc -eq 1 ] && grep -q 'HTTP 404' $work/i.log"
check "404 is not retried" [ $(($(wc -l <"$work/requests") - n_before)) -eq 1 ]

"$fetch" fetch-model "$base/model.gguf" "$work/j.gguf" --retries 0 --log-format text >"$work/j.log" 2>&1
rc=$?
check "unknown CA: TLS verification fails" bash -c "[ $rc -eq 1 ] && [ ! -e $work/j.gguf ]"

# --- credentials in URLs: userinfo and query values never reach the log --------------------------
secret_url="https://user:pw-secret@127.0.0.1:$(cat "$work/port")/missing.gguf?token=tok-secret&sig=sig-secret"
run "$secret_url" "$work/s.gguf" --retries 0 >"$work/s.log" 2>&1
check "URL with credentials: 404 reported" grep -q "HTTP 404" "$work/s.log"
check "URL with credentials: none of them logged" bash -c "! grep -E 'pw-secret|tok-secret|sig-secret' $work/s.log"
check "URL with credentials: the redacted URL names the file" grep -qF \
	"https://REDACTED@127.0.0.1:$(cat "$work/port")/missing.gguf?token=REDACTED&sig=REDACTED" "$work/s.log"
run "$base/model.gguf?token=tok-secret" "$work/s2.gguf" --sha256 "$sha" >"$work/s2.log" 2>&1
check "URL with a token in the query downloads" same "$work/s2.gguf"
check "... and logs it as token=REDACTED" bash -c "grep -q 'token=REDACTED' $work/s2.log && ! grep -q tok-secret $work/s2.log"

# --- a full disk: the error names it (it said "failed: Success" when errno was lost) -------------
ln -s /dev/full "$work/n.gguf.part" # every write to it fails with ENOSPC
run "$base/model.gguf" "$work/n.gguf" --retries 0 >"$work/n.log" 2>&1
rc=$?
check "disk full: exit 1" [ $rc -eq 1 ]
check "disk full: says No space left on device" grep -q "No space left on device" "$work/n.log"
check "disk full: never 'Success'" bash -c "! grep -q 'failed: Success' $work/n.log"
rm -f "$work/n.gguf.part"

# --- --max-bytes: a model larger than the limit is refused and nothing is left -------------------
size="$(stat -c %s "$work/model.gguf")"
n_before="$(wc -l <"$work/requests")"
run "$base/model.gguf" "$work/o.gguf" --max-bytes $((size - 1)) --retries 3 >"$work/o.log" 2>&1
rc=$?
check "over --max-bytes: exit 1, says so" bash -c "[ $rc -eq 1 ] && grep -q 'larger than the $((size - 1))-byte limit' $work/o.log"
check "over --max-bytes: nothing left behind" bash -c "[ ! -e $work/o.gguf ] && [ ! -e $work/o.gguf.part ]"
check "over --max-bytes: not retried" [ $(($(wc -l <"$work/requests") - n_before)) -eq 1 ]
head -c $((size / 2)) "$work/model.gguf" >"$work/o2.gguf.part"
run "$base/norange/model.gguf" "$work/o2.gguf" --max-bytes $((size - 1)) >"$work/o2.log" 2>&1
rc=$?
check "over --max-bytes without Range (a 200 after a partial file): refused" bash -c \
	"[ $rc -eq 1 ] && grep -q 'larger than the' $work/o2.log && [ ! -e $work/o2.gguf ]"
run "$base/model.gguf" "$work/o3.gguf" --max-bytes "$size" --sha256 "$sha" >"$work/o3.log" 2>&1
check "exactly --max-bytes: downloads" same "$work/o3.gguf"
head -c $((size / 2)) "$work/model.gguf" >"$work/o4.gguf.part"
run "$base/model.gguf" "$work/o4.gguf" --max-bytes "$size" --sha256 "$sha" >"$work/o4.log" 2>&1
check "resumed under --max-bytes: the limit counts the whole file" same "$work/o4.gguf"

# --- --verify: a model on disk (file://, pvc://) checked before the engine loads it -------------
"$fetch" fetch-model --verify "$work/a.gguf" --sha256 "$sha" --log-format text >"$work/v.log" 2>&1
check "--verify: matching file, exit 0" bash -c "[ $? -eq 0 ] && grep -q 'model verified' $work/v.log"
"$fetch" fetch-model --verify "$work/a.gguf" --sha256 "$bad_sha" --log-format text >"$work/v2.log" 2>&1
rc=$?
check "--verify: mismatch, exit 1 with both digests" bash -c \
	"[ $rc -eq 1 ] && grep -q 'sha256 mismatch: $work/a.gguf: expected $bad_sha, got $sha' $work/v2.log"
"$fetch" fetch-model --verify "$work/nonexistent.gguf" --sha256 "$sha" >"$work/v3.log" 2>&1
rc=$?
check "--verify: missing file, exit 1 naming it" bash -c "[ $rc -eq 1 ] && grep -q 'No such file' $work/v3.log"
"$fetch" fetch-model --verify "$work/a.gguf" >"$work/v4.log" 2>&1
check "--verify without --sha256: usage error (exit 2)" [ $? -eq 2 ]
"$fetch" fetch-model --verify "$work/a.gguf" --sha256 "$sha" "$base/model.gguf" "$work/x.gguf" >"$work/v5.log" 2>&1
check "--verify with URI DEST: usage error (exit 2)" [ $? -eq 2 ]

"$fetch" fetch-model "http://127.0.0.1:1/model.gguf" "$work/k.gguf" >"$work/k.log" 2>&1
check "plain http:// refused as bad input (exit 2)" [ $? -eq 2 ]
"$fetch" fetch-model "$base/model.gguf" >"$work/l.log" 2>&1
check "missing DEST: usage error (exit 2)" [ $? -eq 2 ]
"$fetch" fetch-model "$base/model.gguf" "$work/m.gguf" --sha256 xyz >"$work/m.log" 2>&1
check "malformed --sha256 rejected (exit 2)" [ $? -eq 2 ]

summary
