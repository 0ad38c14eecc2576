#!/usr/bin/env python3
"""A stand-in for `cinfer-engine serve` in tests/e2e/autoscaler.sh: serves /metrics on 127.0.0.1:PORT
with the contract metric names (common/metric_names.h), reading the values on every scrape from a
JSON control file the test rewrites: {"running": 0, "waiting": 3, "kv": 0.2}. Finished requests grow
by `finish_per_scrape` (default 1) per scrape so that counters move like a serving engine's.

Usage: fake_engine.py PORT CONTROL_FILE [HOST]   (HOST defaults to 127.0.0.1)"""
import http.server
import json
import sys

PORT = int(sys.argv[1])
CONTROL = sys.argv[2]
HOST = sys.argv[3] if len(sys.argv) > 3 else "127.0.0.1"
state = {"requests": 0.0, "prompt": 0.0, "gen": 0.0, "ttft": [0, 0, 0]}


def render(ctl):
    state["requests"] += ctl.get("finish_per_scrape", 1)
    state["prompt"] += 100
    state["gen"] += 400
    state["ttft"] = [state["ttft"][0] + 1, state["ttft"][1] + 1, state["ttft"][2] + 1]
    m = 'model_name="fake"'
    b = state["ttft"]
    lines = [
        "# TYPE cinfer_requests_running gauge",
        f'cinfer_requests_running{{{m}}} {ctl.get("running", 0)}',
        "# TYPE cinfer_requests_waiting gauge",
        f'cinfer_requests_waiting{{{m}}} {ctl.get("waiting", 0)}',
        "# TYPE cinfer_kv_cache_usage_ratio gauge",
        f'cinfer_kv_cache_usage_ratio{{{m}}} {ctl.get("kv", 0.1)}',
        "# TYPE cinfer_requests_total counter",
        f'cinfer_requests_total{{{m},finished_reason="stop"}} {state["requests"]}',
        "# TYPE cinfer_prompt_tokens_total counter",
        f'cinfer_prompt_tokens_total{{{m}}} {state["prompt"]}',
        "# TYPE cinfer_generation_tokens_total counter",
        f'cinfer_generation_tokens_total{{{m}}} {state["gen"]}',
        "# TYPE cinfer_prefix_cache_queries_total counter",
        f'cinfer_prefix_cache_queries_total{{{m}}} {state["prompt"]}',
        "# TYPE cinfer_prefix_cache_hits_total counter",
        f'cinfer_prefix_cache_hits_total{{{m}}} {state["prompt"] / 2}',
        "# TYPE cinfer_time_to_first_token_seconds histogram",
        f'cinfer_time_to_first_token_seconds_bucket{{{m},le="0.1"}} {b[0]}',
        f'cinfer_time_to_first_token_seconds_bucket{{{m},le="1"}} {b[1]}',
        f'cinfer_time_to_first_token_seconds_bucket{{{m},le="+Inf"}} {b[2]}',
        f'cinfer_time_to_first_token_seconds_sum{{{m}}} {b[2] * 0.05}',
        f'cinfer_time_to_first_token_seconds_count{{{m}}} {b[2]}',
    ]
    return ("\n".join(lines) + "\n").encode()


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/metrics":
            self.send_error(404)
            return
        try:
            with open(CONTROL) as f:
                ctl = json.load(f)
        except (OSError, ValueError):
            ctl = {}
        body = render(ctl)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


http.server.HTTPServer((HOST, PORT), Handler).serve_forever()
