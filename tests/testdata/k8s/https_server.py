#!/usr/bin/env python3
"""Tiny HTTPS server on 127.0.0.1 for tests/common/test_http_client.c.

Usage: https_server.py CERT KEY CLIENT_CA
Binds an ephemeral port, prints "PORT <n>" on stdout, then serves until killed.
Client certificates signed by CLIENT_CA are accepted but optional.

  /hello              200 "hello"
  /big?n=N            200, N bytes of "x"
  /slow?ms=N          sleeps N ms, then 200 "slow"
  /status?code=N      status N, body "status N"
  /echo               200, "METHOD|authorization|content-type|body"
  /stream?lines=N&delay_ms=M&split=1
                      200 chunked, N lines "line <i>\n", M ms apart; split=1 sends each line
                      in two chunks cut mid-line
  /whoami             200, the client certificate's CN or "anonymous"
  /api(s)/.../namespaces/NS/...   a fake Kubernetes API for the k8s client tests; NS picks the answer:
      echo: 200/201 JSON describing the request (method, path, query, content type, auth, body)
      exists/conflict/invalid/gone/forbidden/missing: the matching metav1.Status error
      text: 500 with a non-JSON body
      watch, watch410, watchlong, watchcut: watch streams (normal, ERROR 410, over-long line,
      cut mid-event), chunks split in the middle of lines
"""
import json
import http.server
import socketserver
import ssl
import sys
import time
import urllib.parse


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def reply(self, code, body, ctype="text/plain"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def handle_any(self):
        url = urllib.parse.urlparse(self.path)
        q = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        if url.path.startswith(("/api/", "/apis/")):
            self.k8s_fake(url, body)
        elif url.path == "/hello":
            self.reply(200, b"hello")
        elif url.path == "/big":
            self.reply(200, b"x" * int(q.get("n", "0")))
        elif url.path == "/slow":
            time.sleep(int(q.get("ms", "1000")) / 1000.0)
            self.reply(200, b"slow")
        elif url.path == "/status":
            code = int(q.get("code", "500"))
            self.reply(code, b"status %d" % code)
        elif url.path == "/echo":
            out = "%s|%s|%s|" % (self.command, self.headers.get("Authorization", ""),
                                 self.headers.get("Content-Type", ""))
            self.reply(200, out.encode() + body)
        elif url.path == "/stream":
            self.stream(int(q.get("lines", "3")), int(q.get("delay_ms", "0")), q.get("split") == "1")
        elif url.path == "/whoami":
            cert = self.connection.getpeercert()
            cn = "anonymous"
            for rdn in (cert or {}).get("subject", ()):
                for k, v in rdn:
                    if k == "commonName":
                        cn = v
            self.reply(200, cn.encode())
        else:
            self.reply(404, b"not found")

    def stream(self, lines, delay_ms, split):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for i in range(lines):
                line = b"line %d\n" % i
                parts = [line[:3], line[3:]] if split else [line]
                for p in parts:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(p), p))
                    self.wfile.flush()
                    if delay_ms:
                        time.sleep(delay_ms / 1000.0)
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass

    def k8s_status(self, code, reason, message):
        st = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
              "message": message, "reason": reason, "code": code}
        self.reply(code, json.dumps(st).encode(), "application/json")

    def k8s_fake(self, url, body):
        parts = url.path.split("/")
        i = parts.index("namespaces") if "namespaces" in parts else -1
        ns = parts[i + 1] if 0 <= i < len(parts) - 1 else ""
        errors = {
            "exists": (409, "AlreadyExists", 'configmaps "a" already exists'),
            "conflict": (409, "Conflict", 'Operation cannot be fulfilled on configmaps "a": '
                         'the object has been modified; please apply your changes to the latest '
                         'version and try again'),
            "invalid": (422, "Invalid", 'ConfigMap "a" is invalid: metadata.name: Invalid value: '
                        '"A": a lowercase RFC 1123 subdomain must consist of lower case '
                        'alphanumeric characters'),
            "gone": (410, "Expired", "too old resource version: 1 (2)"),
            "forbidden": (403, "Forbidden", 'configmaps is forbidden: User "x" cannot list'),
            "missing": (404, "NotFound", 'configmaps "a" not found'),
        }
        if ns in errors:
            self.k8s_status(*errors[ns])
        elif ns == "text":
            self.reply(500, b"boom\n\x01", "text/plain")
        elif ns.startswith("watch"):
            self.k8s_watch(ns)
        else:
            try:
                parsed = json.loads(body) if body else None
            except ValueError:
                parsed = body.decode("latin-1")
            out = {"method": self.command, "path": url.path, "query": url.query,
                   "contentType": self.headers.get("Content-Type", ""),
                   "accept": self.headers.get("Accept", ""),
                   "auth": self.headers.get("Authorization", ""), "body": parsed}
            self.reply(201 if self.command == "POST" else 200, json.dumps(out).encode(),
                       "application/json")

    def k8s_watch(self, ns):
        def ev(t, name, rv):
            return json.dumps({"type": t, "object": {"kind": "ConfigMap", "metadata": {
                "name": name, "resourceVersion": rv}}}).encode() + b"\n"
        if ns == "watch":
            data = ev("ADDED", "a", "1") + b"\n" + ev("MODIFIED", "a", "2") + \
                ev("BOOKMARK", "", "3") + ev("DELETED", "a", "4")
        elif ns == "watch410":
            data = ev("ADDED", "a", "1") + json.dumps({"type": "ERROR", "object": {
                "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired",
                "message": "too old resource version: 1 (5)", "code": 410}}).encode() + b"\n"
        elif ns == "watchlong":
            data = ev("ADDED", "a" * 10000, "1")
        else:  # watchcut
            data = ev("ADDED", "a", "1") + ev("MODIFIED", "a", "2")[:20]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for i in range(0, len(data), 37):  # chunks cut mid-line
                p = data[i:i + 37]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(p), p))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = handle_any


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        pass  # clients that hang up early (size-limit and stop tests) are expected


def main():
    cert, key, client_ca = sys.argv[1:4]
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.load_verify_locations(client_ca)
    ctx.verify_mode = ssl.CERT_OPTIONAL
    srv = Server(("127.0.0.1", 0), Handler)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    print("PORT %d" % srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
