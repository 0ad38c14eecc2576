#!/usr/bin/env python3
"""HTTPS file server for tests/e2e/fetch_model.sh (loopback only).

Serves one file (--file) under several paths that each behave like a real-world server:
  /model.gguf                      plain, honours Range requests (206)
  /org/repo/resolve/main/m.gguf    Hugging Face-style path (hf:// URIs)
  /flaky/model.gguf                the first GET stops after half the bytes and drops the connection
  /redirect/model.gguf             302 to /model.gguf
  /norange/model.gguf              ignores Range (always 200 with the whole file)
  /token/model.gguf                401 unless "Authorization: Bearer secret-token"
  anything else                    404
A query string is ignored (URLs with ?token=... reach the same files).
Each request is logged to --log as "<path> <range header or ->".
Writes the bound port to --port-file, then serves until killed.
"""
import argparse
import http.server
import os
import ssl
import threading

ap = argparse.ArgumentParser()
ap.add_argument("--file", required=True)
ap.add_argument("--cert", required=True)
ap.add_argument("--key", required=True)
ap.add_argument("--port-file", required=True)
ap.add_argument("--log", required=True)
args = ap.parse_args()

data = open(args.file, "rb").read()
lock = threading.Lock()
flaky_done = False


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *a):
        pass

    def record(self):
        with lock, open(args.log, "a") as f:
            f.write("%s %s\n" % (self.path, self.headers.get("Range", "-")))

    def send_body(self, honour_range=True, cut=None):
        start = 0
        rng = self.headers.get("Range")
        if honour_range and rng and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[6:-1])
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % len(data))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, len(data) - 1, len(data)))
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes" if honour_range else "none")
        self.end_headers()
        if cut is not None:
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.wfile.write(body)

    def do_GET(self):
        global flaky_done
        self.record()
        p = self.path.split("?", 1)[0]
        if p in ("/model.gguf", "/org/repo/resolve/main/m.gguf"):
            self.send_body()
        elif p == "/flaky/model.gguf":
            with lock:
                first = not flaky_done
                flaky_done = True
            self.send_body(cut=len(data) // 2 if first else None)
        elif p == "/redirect/model.gguf":
            self.send_response(302)
            self.send_header("Location", "/model.gguf")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif p == "/norange/model.gguf":
            self.send_body(honour_range=False)
        elif p == "/token/model.gguf":
            if self.headers.get("Authorization") != "Bearer secret-token":
                self.send_response(401)
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                self.send_body()
        else:
            self.send_response(404)
            self.send_header("Content-Length", "9")
            self.end_headers()
            self.wfile.write(b"not found")


class Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # clients that abort on purpose (limits, cut transfers) are not errors here


srv = Server(("127.0.0.1", 0), Handler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(args.cert, args.key)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
with open(args.port_file + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(args.port_file + ".tmp", args.port_file)
srv.serve_forever()
