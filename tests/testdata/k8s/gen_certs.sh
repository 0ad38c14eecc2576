#!/usr/bin/env bash
# Generates throw-away TLS material for the HTTP client and k8s tests in DIR:
#   ca.crt/ca.key            test CA
#   server.crt/server.key    server certificate for 127.0.0.1 and localhost, signed by the CA
#   client.crt/client.key    client certificate (CN=cinfer-test-client), signed by the CA
#   other-ca.crt             an unrelated CA (for "wrong CA" tests)
# Usage: gen_certs.sh DIR
set -euo pipefail
dir="$1"
mkdir -p "$dir"
cd "$dir"
umask 077
q() { "$@" >/dev/null 2>&1 || { echo "gen_certs.sh: failed: $*" >&2; exit 1; }; }
q openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=cinfer-test-ca
q openssl req -x509 -newkey rsa:2048 -nodes -keyout other-ca.key -out other-ca.crt -days 2 \
	-subj /CN=cinfer-other-ca
# sign NAME CN EXT
sign() {
	q openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "/CN=$2"
	printf '%s\n' "$3" >"$1.ext"
	q openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -out "$1.crt" \
		-extfile "$1.ext"
	rm -f "$1.csr" "$1.ext"
}
sign server cinfer-test-server "$(printf '%s\n' basicConstraints=CA:FALSE extendedKeyUsage=serverAuth \
	subjectAltName=IP:127.0.0.1,DNS:localhost)"
sign client cinfer-test-client "$(printf '%s\n' basicConstraints=CA:FALSE extendedKeyUsage=clientAuth)"
rm -f ca.srl other-ca.key
