"""`cinfer-engine serve` under a load tool: NVIDIA's aiperf (PyPI), run by engine_serve.sh.

Usage: engine_serve_aiperf.py main=PORT
Runs two short aiperf profiles against the server, offline: streamed /v1/completions, and streamed
/v1/chat/completions with per-chunk usage (stream_options.continuous_usage_stats, which aiperf
injects on chat only), each a fixed number of requests at concurrency 4 over pooled (keep-alive)
connections, and checks that every request succeeded with the requested output length, as the
server itself counted it.

aiperf needs a Hugging Face tokenizer to synthesise prompts; with HF_HUB_OFFLINE=1 it only looks
in the HF cache. So this writes a byte-level tokenizer (256 tokens, made with the `tokenizers`
package aiperf depends on) into a private HF cache under a temp dir, as repo "cinfer/bytes". Its
counts do not match the model's tokenizer; --use-server-token-count makes aiperf use the usage
the server reports instead. (guidellm pulls torch and CUDA wheels, 5.9 GB; inference-perf needs
Python 3.12: aiperf is the one that installs here and runs offline.)
Prints `ok - NAME` / `not ok - NAME: DETAIL` per check.
"""

import json
import os
import subprocess
import sys
import tempfile

from engine_serve_lib import SLOW, Checks, finish, servers_from_argv

checks = Checks()
servers = servers_from_argv(sys.argv[1:])
MODEL = os.environ["ENGINE_SERVE_MODEL_NAME"]
URL = f"http://127.0.0.1:{servers['main'][0]}"
AIPERF = os.path.join(os.path.dirname(sys.executable), "aiperf")
REPO = "cinfer/bytes"
REV = "0" * 40


def write_tokenizer(hf_home):
    """A byte-level BPE with no merges, in the HF cache layout aiperf's offline mode reads."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    snap = os.path.join(hf_home, "hub", "models--" + REPO.replace("/", "--"))
    os.makedirs(os.path.join(snap, "refs"))
    files = os.path.join(snap, "snapshots", REV)
    os.makedirs(files)
    with open(os.path.join(snap, "refs", "main"), "w") as f:
        f.write(REV)
    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(os.path.join(files, "tokenizer.json"))
    with open(os.path.join(files, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 4096}, f)


def profile(name, tmp, extra, requests=12, osl=8):
    """Runs one aiperf profile; returns its summary JSON (or None after a failed check)."""
    art = os.path.join(tmp, name)
    cmd = [
        AIPERF, "profile", "--model", MODEL, "--url", URL, "--tokenizer", REPO,
        "--request-count", str(requests), "--concurrency", "4", "--isl", "24", "--osl", str(osl),
        "--use-server-token-count", "--extra-inputs", "ignore_eos:true", "--random-seed", "7",
        "--ui-type", "none", "--artifact-dir", art,
    ] + extra
    env = dict(os.environ, HF_HOME=os.path.join(tmp, "hf"), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1", NO_COLOR="1")
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240 * SLOW)
    except subprocess.TimeoutExpired:
        checks.not_ok(f"aiperf {name} finishes", f"timed out after {240 * SLOW} s")
        return None
    out = os.path.join(art, "profile_export_aiperf.json")
    if not checks.check(f"aiperf {name} exits 0 and writes its summary",
                        p.returncode == 0 and os.path.exists(out),
                        f"rc {p.returncode}: {(p.stdout + p.stderr)[-600:]}"):
        return None
    with open(out) as f:
        return json.load(f)


def expect(name, s, requests=12, osl=8):
    count = (s.get("request_count") or {}).get("avg")
    errors = (s.get("error_request_count") or {}).get("avg", 0)
    osl_stat = s.get("output_sequence_length") or {}
    checks.check(
        f"aiperf {name}: {requests} requests, none failed, each {osl} tokens by the server's usage",
        count == requests and not errors and osl_stat.get("min") == osl and osl_stat.get("max") == osl,
        f"count {count} errors {errors} osl {osl_stat} summary {s.get('error_summary')}",
    )


def main():
    with tempfile.TemporaryDirectory(prefix="cinfer-aiperf.") as tmp:
        write_tokenizer(os.path.join(tmp, "hf"))
        s = profile("completions-stream", tmp, ["--endpoint-type", "completions", "--streaming"])
        if s:
            expect("completions-stream", s)
            ttft = s.get("time_to_first_token") or {}
            checks.check("aiperf completions-stream: time to first token measured",
                         ttft.get("count") == 12 and ttft.get("avg", 0) > 0, f"{ttft}")
        s = profile("chat-stream", tmp,
                    ["--endpoint-type", "chat", "--streaming", "--per-chunk-usage"])
        if s:
            expect("chat-stream", s)


checks.run("aiperf", main)
sys.exit(finish(checks))
