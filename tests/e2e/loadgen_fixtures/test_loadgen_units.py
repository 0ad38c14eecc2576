#!/usr/bin/env python3
"""Unit tests of hack/loadgen's parsers and arithmetic, malformed input first: the HTTP head and chunked
decoders, the SSE parser, completion events, traces, Prometheus text, percentiles and prompt building.
Run by tests/e2e/loadgen_selftest.sh (one check per test); standalone: python3 -m unittest -v FILE."""

from __future__ import annotations

import argparse
import asyncio
import importlib.machinery
import importlib.util
import json
import os
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def load_loadgen():
    """hack/loadgen has no .py suffix, so it is loaded by path."""
    path = os.path.join(ROOT, "hack", "loadgen")
    loader = importlib.machinery.SourceFileLoader("loadgen", path)
    spec = importlib.util.spec_from_loader("loadgen", loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules["loadgen"] = module  # dataclasses look their module up while the class is built
    loader.exec_module(module)
    return module


lg = load_loadgen()


def with_reader(data: bytes, use):
    """Runs `await use(reader)` on a stream that holds `data` and then EOF (a reader needs a loop)."""

    async def run():
        r = asyncio.StreamReader(limit=lg.MAX_HEAD_BYTES)
        r.feed_data(data)
        r.feed_eof()
        return await use(r)

    return asyncio.run(run())


def collect_chunked(data: bytes) -> list[bytes]:
    async def use(r):
        return [piece async for piece in lg.iter_chunked(r)]

    return with_reader(data, use)


def collect_body(data: bytes, headers: dict[str, str]) -> bytes:
    async def use(r):
        return b"".join([piece async for piece in lg.iter_body(r, headers)])

    return with_reader(data, use)


class HttpTests(unittest.TestCase):
    def test_head_parsed_with_lowercase_names_and_joined_repeats(self):
        status, headers = lg.parse_head(b"HTTP/1.1 429 Too Many\r\nRetry-After: 3\r\nX-A: 1\r\nx-a: 2\r\n\r\n")
        self.assertEqual(status, 429)
        self.assertEqual(headers, {"retry-after": "3", "x-a": "1, 2"})

    def test_head_malformed(self):
        for raw in (b"HTTX/1.1 200 OK\r\n\r\n", b"HTTP/1.1 20 OK\r\n\r\n", b"\r\n\r\n",
                    b"HTTP/1.1 200\r\nNoColon\r\n\r\n", b"HTTP/1.1 200 OK\r\n: empty name\r\n\r\n",
                    b"HTTP/1.1 200 OK\r\nSpace : x\r\n\r\n"):
            with self.subTest(raw=raw), self.assertRaises(lg.RequestError) as cm:
                lg.parse_head(raw)
            self.assertEqual(cm.exception.kind, "bad response head")

    def test_chunked_with_extensions_and_trailers(self):
        data = b"5;name=v\r\nhello\r\n1\r\n!\r\n0\r\nX-Trailer: 1\r\n\r\n"
        self.assertEqual(collect_chunked(data), [b"hello", b"!"])

    def test_chunked_malformed(self):
        cases = {
            b"zz\r\nab\r\n0\r\n\r\n": "bad chunked body",  # not hex
            b"-1\r\n\r\n": "bad chunked body",
            b"0x2\r\nab\r\n0\r\n\r\n": "bad chunked body",  # int(..., 16) would accept it
            b"123456789\r\n": "bad chunked body",  # more than 8 hex digits
            b"%x\r\n" % (lg.MAX_CHUNK_BYTES + 1): "bad chunked body",
            b"2\r\nabXY0\r\n\r\n": "bad chunked body",  # no CRLF after the data
            b"5\r\nab": "truncated response",
            b"2\r\nab\r\n": "truncated response",  # no last chunk
            b"": "truncated response",
        }
        for data, kind in cases.items():
            with self.subTest(data=data[:20]), self.assertRaises(lg.RequestError) as cm:
                collect_chunked(data)
            self.assertEqual(cm.exception.kind, kind)

    def test_chunk_size_line_over_the_limit(self):
        with self.assertRaises(lg.RequestError) as cm:
            collect_chunked(b"1" * (lg.MAX_HEAD_BYTES + 10))
        self.assertEqual(cm.exception.kind, "bad chunked body")

    def test_content_length_body_and_truncation(self):
        self.assertEqual(collect_body(b"abcdef", {"content-length": "4"}), b"abcd")
        self.assertEqual(collect_body(b"until eof", {}), b"until eof")
        with self.assertRaises(lg.RequestError) as cm:
            collect_body(b"ab", {"content-length": "4"})
        self.assertEqual(cm.exception.kind, "truncated response")
        with self.assertRaises(lg.RequestError):
            collect_body(b"ab", {"content-length": "-4"})

    def test_read_body_keeps_at_most_the_limit(self):
        body, cut = with_reader(b"x" * 100, lambda r: lg.read_body(r, {}, 10))
        self.assertEqual((body, cut), (b"x" * 10, True))
        body, cut = with_reader(b"x" * 5, lambda r: lg.read_body(r, {}, 10))
        self.assertEqual((body, cut), (b"x" * 5, False))

    def test_error_body(self):
        body = json.dumps({"error": {"message": "slow down", "type": "rate_limit_error"}}).encode()
        self.assertEqual(lg.parse_error_body(body), ("rate_limit_error", "slow down"))
        self.assertEqual(lg.parse_error_body(b"<html>oops</html>"), ("", "<html>oops</html>"))
        self.assertEqual(lg.parse_error_body(b'{"error": "flat"}'), ("", '{"error": "flat"}'))
        self.assertEqual(lg.parse_error_body(b'{"error": {"type": 5}}'), ("", ""))
        self.assertEqual(lg.parse_error_body(b"\xff\xfe"), ("", "\ufffd\ufffd"))
        self.assertEqual(lg.parse_error_body(b"[" * 50_000)[0], "")  # too deep: no crash

    def test_target_parse(self):
        t = lg.Target.parse("http://127.0.0.1:8000/")
        self.assertEqual((t.host, t.port, t.base_path, t.tls), ("127.0.0.1", 8000, "", False))
        self.assertEqual(lg.Target.parse("https://example.com/api").port, 443)
        self.assertEqual(lg.Target.parse("https://example.com/api").base_path, "/api")
        self.assertEqual(lg.Target.parse("http://[::1]:9/").host_header(), "[::1]:9")
        for bad in ("ftp://x:1", "127.0.0.1:8000", "http://:80", "http://h:99999", "http://h:port",
                    "http://h:1/a b", "http://h\u00e9:1/", "http://h:1/\r\nX: y"):
            with self.subTest(url=bad), self.assertRaises(lg.UsageError):
                lg.Target.parse(bad)


class SseTests(unittest.TestCase):
    STREAM = b": comment\r\ndata: one\r\n\r\nevent: x\nid: 7\ndata: two\ndata:three\n\ndata: [DONE]\n\n"

    def test_events_whole_and_byte_by_byte(self):
        want = ["one", "two\nthree", "[DONE]"]
        self.assertEqual(lg.SseParser().feed(self.STREAM), want)
        p = lg.SseParser()
        got = [e for i in range(len(self.STREAM)) for e in p.feed(self.STREAM[i:i + 1])]
        self.assertEqual(got, want)
        self.assertFalse(p.pending())

    def test_unfinished_event_is_pending_not_returned(self):
        p = lg.SseParser()
        self.assertEqual(p.feed(b"data: half"), [])
        self.assertTrue(p.pending())
        self.assertEqual(p.feed(b"\n"), [])
        self.assertTrue(p.pending())
        self.assertEqual(p.feed(b"\n"), ["half"])

    def test_event_over_the_limit(self):
        p = lg.SseParser(max_event_bytes=64)
        p.feed(b"data: " + b"x" * 30 + b"\n")
        with self.assertRaises(lg.RequestError) as cm:
            p.feed(b"data: " + b"y" * 40 + b"\n")
        self.assertEqual(cm.exception.kind, "bad SSE event")
        with self.assertRaises(lg.RequestError):  # an endless line is bounded too
            lg.SseParser(max_event_bytes=64).feed(b"data: " + b"z" * 100)

    def test_invalid_utf8_is_replaced(self):
        self.assertEqual(lg.SseParser().feed(b"data: \xff\n\n"), ["\ufffd"])


def chunk_json(text, reason=None):
    return json.dumps({"choices": [{"index": 0, "text": text, "finish_reason": reason}]})


class EventTests(unittest.TestCase):
    def test_content_chunks_timed_and_usage_taken(self):
        res = lg.Result(index=0, start=10.0)
        lg.handle_event(chunk_json("a"), 10.5, res)
        lg.handle_event(chunk_json(""), 10.7, res)  # an incomplete UTF-8 character: still a token
        lg.handle_event(chunk_json("c"), 11.0, res)
        lg.handle_event(chunk_json("", "length"), 11.1, res)  # finish only: no token
        usage = {"prompt_tokens": 8, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 4}}
        lg.handle_event(json.dumps({"choices": [], "usage": usage}), 11.2, res)
        self.assertEqual(res.ttft, 0.5)
        self.assertEqual([round(g, 6) for g in res.gaps], [0.2, 0.3])
        self.assertEqual((res.chunks, res.finish_reason), (3, "length"))
        self.assertEqual((res.prompt_tokens, res.completion_tokens, res.cached_tokens), (8, 3, 4))
        self.assertTrue(res.usage_seen)

    def test_usage_without_details_means_no_cached_tokens(self):
        res = lg.Result(index=0, start=0.0)
        lg.handle_event(json.dumps({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 1}}), 1, res)
        self.assertEqual((res.prompt_tokens, res.cached_tokens), (5, 0))

    def test_malformed_events(self):
        cases = {
            "{nope": "bad SSE event",
            "[1,2]": "bad SSE event",
            "{}": "bad SSE event",
            '{"choices": 5}': "bad SSE event",
            '{"choices": [7]}': "bad SSE event",
            '{"choices": [], "usage": {"prompt_tokens": -1}}': "bad usage",
            '{"choices": [], "usage": {"prompt_tokens": true}}': "bad usage",
            '{"choices": [], "usage": {"completion_tokens": "3"}}': "bad usage",
            '{"choices": [], "usage": {"prompt_tokens_details": {"cached_tokens": 1.5}}}': "bad usage",
            '{"error": {"message": "boom", "type": "server_error"}}': "stream error server_error",
            '{"error": "flat"}': "stream error",
            "[" * 100_000 + "]" * 100_000: "bad SSE event",  # deeper than the decoder's recursion limit
        }
        for data, kind in cases.items():
            with self.subTest(data=data), self.assertRaises(lg.RequestError) as cm:
                lg.handle_event(data, 0.0, lg.Result(index=0, start=0.0))
            self.assertEqual(cm.exception.kind, kind)

    def test_stream_rules(self):
        def run(body: bytes, headers=None):
            res = lg.Result(index=0, start=0.0)
            with_reader(body, lambda r: lg.consume_stream(r, headers or {}, res))
            return res

        res = run(b"data: " + chunk_json("a").encode() + b"\n\ndata: [DONE]\n\n")
        self.assertEqual((res.chunks, res.completion_tokens, res.usage_seen), (1, 1, False))
        for body, headers, kind in (
            (b"data: " + chunk_json("a").encode() + b"\n\n", {}, "incomplete stream"),
            (b"data: [DONE]\n\ndata: {}\n\n", {}, "bad SSE event"),
            (b"data: [DONE]\n\n", {"content-type": "application/json"}, "bad response head"),
        ):
            with self.subTest(body=body), self.assertRaises(lg.RequestError) as cm:
                run(body, headers)
            self.assertEqual(cm.exception.kind, kind)


def write(dirname: str, name: str, text: str | bytes) -> str:
    path = os.path.join(dirname, name)
    with open(path, "wb") as f:
        f.write(text.encode() if isinstance(text, str) else text)
    return path


class TraceTests(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def test_azure_time_keeps_all_seven_digits(self):
        a = lg.parse_azure_time("2023-11-16 18:15:46.6805900")
        b = lg.parse_azure_time("2023-11-16 18:15:46.6805901")
        self.assertEqual(b - a, 100)
        self.assertEqual(lg.parse_azure_time("2023-11-16 18:15:47") - a, 319_410_000)
        for bad in ("2023-11-16T18:15:46", "yesterday", "2023-13-16 18:15:46.1", "2023-11-16 24:00:00", ""):
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                lg.parse_azure_time(bad)

    def test_azure_rows_relative_and_sorted(self):
        path = write(self.dir, "t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2023-11-16 18:00:01.5,10,2\n2023-11-16 18:00:00.0,20,3")
        rows = lg.read_trace(path, None)
        self.assertEqual([(r.time_s, r.prompt_tokens, r.output_tokens) for r in rows], [(0.0, 20, 3), (1.5, 10, 2)])

    def test_azure_malformed(self):
        cases = {
            "": "empty file",
            "a,b,c\n1,2,3": "lacks column",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,1": ":2: 2 fields",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,1,2\nbad,1,2": ":3: bad TIMESTAMP",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,-1,2": "ContextTokens '-1'",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,1,2.5": "GeneratedTokens '2.5'",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n": "no requests",
        }
        for text, message in cases.items():
            with self.subTest(text=text), self.assertRaises(lg.UsageError) as cm:
                lg.read_trace(write(self.dir, "bad.csv", text), "azure")
            self.assertIn(message, str(cm.exception))

    def test_mooncake_rows(self):
        path = write(self.dir, "t.jsonl", '{"timestamp": 1500, "input_length": 600, "output_length": 3, '
                     '"hash_ids": [0, 1]}\n\n{"timestamp": 0, "input_length": 5, "output_length": 0}\n')
        rows = lg.read_trace(path, None)
        self.assertEqual(rows[0], lg.TraceRow(0.0, 5, 0, ()))
        self.assertEqual(rows[1], lg.TraceRow(1.5, 600, 3, (0, 1)))

    def test_mooncake_malformed(self):
        good = '{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [0]}\n'
        cases = {
            "{nope": ":1: Expecting property name",
            "[1]": ":1: not a JSON object",
            good + '{"input_length": 1, "output_length": 1}': ":2: 'timestamp'",
            '{"timestamp": -5, "input_length": 1, "output_length": 1}': "'timestamp' must be",
            '{"timestamp": 0, "input_length": true, "output_length": 1}': "'input_length' must be",
            '{"timestamp": 0, "input_length": 1}': "'output_length' must be",
            '{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1.5]}': "'hash_ids' must be",
            '{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": 3}': "'hash_ids' must be",
            "\n\n": "no requests",
            "[" * 100_000: ":1: JSON nested too deeply",
        }
        for text, message in cases.items():
            with self.subTest(text=text), self.assertRaises(lg.UsageError) as cm:
                lg.read_trace(write(self.dir, "bad.jsonl", text), "mooncake")
            self.assertIn(message, str(cm.exception))

    def test_unreadable_files(self):
        with self.assertRaisesRegex(lg.UsageError, "No such file"):
            lg.read_trace(os.path.join(self.dir, "missing.csv"), None)
        with self.assertRaisesRegex(lg.UsageError, "--format"):
            lg.read_trace(write(self.dir, "trace.txt", "x"), None)
        with self.assertRaisesRegex(lg.UsageError, "not UTF-8"):
            lg.read_trace(write(self.dir, "bin.jsonl", b"\xff\xfe\x00"), None)

    def test_spread_ticks(self):
        rows = [lg.TraceRow(t, 1, 1) for t in (0, 0, 0, 3, 6, 6)]
        self.assertEqual([r.time_s for r in lg.spread_ticks(rows)], [0, 1, 2, 3, 6, 7.5])
        self.assertEqual([r.time_s for r in lg.spread_ticks([lg.TraceRow(5, 1, 1)] * 2)], [5, 5])

    def test_selection_and_scaling(self):
        rows = [lg.TraceRow(float(t), 1000, 10 * t + 1) for t in range(10)]
        args = argparse.Namespace(spread_ticks=True, start_offset=2.0, max_requests=3, time_scale=2.0,
                                  token_scale=0.01, max_prompt_tokens=None, max_tokens=None)
        jobs = lg.trace_jobs(rows, args)
        self.assertEqual([(j.arrival, j.prompt_tokens, j.max_tokens) for j in jobs],
                         [(0.0, 10, 1), (0.5, 10, 1), (1.0, 10, 1)])  # 21 * 0.01 rounds to 0: at least 1
        args.token_scale, args.max_prompt_tokens, args.max_tokens = 1.0, 500, 25
        self.assertEqual([(j.prompt_tokens, j.max_tokens) for j in lg.trace_jobs(rows, args)],
                         [(500, 21), (500, 25), (500, 25)])
        args.start_offset = 10.0
        with self.assertRaisesRegex(lg.UsageError, "past the end"):
            lg.trace_jobs(rows, args)


class PromptTests(unittest.TestCase):
    def test_closed_loop_prompts(self):
        f = lg.PromptFactory(seed=7, vocab=10, shared_prefix=4, block_tokens=4)
        a, b = f.build(lg.Job(0, 12, 1)), f.build(lg.Job(1, 12, 1))
        self.assertEqual((len(a), len(b)), (12, 12))
        self.assertEqual(a[:4], b[:4])
        self.assertNotEqual(a[4:], b[4:])
        self.assertTrue(all(3 <= t < 10 for t in a + b))
        again = lg.PromptFactory(seed=7, vocab=10, shared_prefix=4, block_tokens=4)
        self.assertEqual(again.build(lg.Job(1, 12, 1)), b)
        self.assertNotEqual(lg.PromptFactory(8, 10, 4, 4).build(lg.Job(1, 12, 1)), b)
        self.assertEqual(len(f.build(lg.Job(2, 2, 1))), 2)  # shorter than the shared prefix

    def test_hash_id_blocks(self):
        f = lg.PromptFactory(seed=1, vocab=32000, shared_prefix=0, block_tokens=4)
        a = f.build(lg.Job(0, 10, 1, hash_ids=(5, 6, 7)))
        b = f.build(lg.Job(1, 9, 1, hash_ids=(5, 6, 8)))
        c = f.build(lg.Job(2, 14, 1, hash_ids=(9, 6)))  # longer than its blocks: filled from the index
        self.assertEqual((len(a), len(b), len(c)), (10, 9, 14))
        self.assertEqual(a[:8], b[:8])
        self.assertNotEqual(a[8:10], b[8:10])
        self.assertEqual(c[4:8], a[4:8])  # block 6 is the same block wherever it stands
        self.assertNotEqual(c[:4], a[:4])

    def test_ideal_prefix_hits(self):
        jobs = [lg.Job(0, 10, 1, hash_ids=(1, 2, 3)), lg.Job(1, 9, 1, hash_ids=(1, 2, 4)),
                lg.Job(2, 12, 1, hash_ids=(5, 2, 3)), lg.Job(3, 6, 1, hash_ids=(1, 2, 3))]
        # job 1: blocks 1,2 (8 tokens); job 2: none (same ids after a different first block); job 3: 4 + 2
        self.assertEqual(lg.ideal_prefix_hits(jobs, 4), 14)

    def test_request_body(self):
        args = argparse.Namespace(temperature=0.0, ignore_eos=True, seed=5, model=None)
        body = json.loads(lg.request_body(lg.Job(3, 2, 9), [4, 5], args))
        self.assertEqual(body, {"prompt": [4, 5], "max_tokens": 9, "temperature": 0.0, "stream": True,
                                "stream_options": {"include_usage": True}, "ignore_eos": True, "seed": 8})
        args.model = "m"
        self.assertEqual(json.loads(lg.request_body(lg.Job(0, 1, 1), [3], args))["model"], "m")


class StatsTests(unittest.TestCase):
    def test_percentile(self):
        xs = [1.0, 2.0, 3.0, 4.0, 5.0]
        self.assertEqual(lg.percentile(xs, 0.5), 3.0)
        self.assertAlmostEqual(lg.percentile(xs, 0.9), 4.6)
        self.assertAlmostEqual(lg.percentile(xs, 0.99), 4.96)
        self.assertEqual(lg.percentile([7.0], 0.99), 7.0)
        self.assertIsNone(lg.percentile([], 0.5))

    def test_summary_counts_and_groups(self):
        ok = lg.Result(index=0, start=0.0, ok=True, ttft=0.1, e2e=0.5, gaps=[0.1, 0.2], chunks=3,
                       prompt_tokens=10, completion_tokens=3, cached_tokens=5, usage_seen=True, finish_reason="length")
        bad = [lg.Result(index=i, start=0.0, status=429, error_kind="http 429", error_detail="x") for i in (1, 2)]
        refused = lg.Result(index=3, start=0.0, error_kind="connect: connection refused")
        rep = lg.summarize([ok, *bad, refused], wall=2.0, planned=5, cancelled=1)
        self.assertEqual((rep["requests_ok"], rep["requests_failed"], rep["requests_cancelled"]), (1, 3, 1))
        self.assertEqual(rep["failed_by"], {"429": 2, "connect: connection refused": 1})
        self.assertEqual(rep["errors"][0], {"error": "http 429", "count": 2, "example": "x"})
        self.assertEqual((rep["generated_tokens"], rep["tokens_per_s"], rep["prefix_hit_rate"]), (3, 1.5, 0.5))
        self.assertEqual(rep["itl_ms"]["count"], 2)
        self.assertAlmostEqual(rep["ttft_ms"]["p50"], 100.0)

    def test_prometheus_text(self):
        text = ('# HELP x y\n# TYPE cinfer_a_total counter\ncinfer_a_total{m="a b",q="}"} 3\n'
                'cinfer_a_total{m="c\\"d"} 4 1700000000000\ncinfer_b 2.5e1\nnot a sample line at all\n'
                'cinfer_c{unterminated="x} 1\ncinfer_d NaN\ncinfer_e abc\n')
        got = lg.parse_prometheus(text)
        self.assertEqual(got["cinfer_a_total"], 7.0)
        self.assertEqual(got["cinfer_b"], 25.0)
        self.assertNotIn("cinfer_c", got)
        self.assertNotIn("cinfer_e", got)
        self.assertTrue(got["cinfer_d"] != got["cinfer_d"])  # NaN

    def test_metrics_report(self):
        before = {"samples": {"cinfer_prefix_cache_hits_total": 10, "cinfer_prefix_cache_queries_total": 20}}
        after = {"samples": {"cinfer_prefix_cache_hits_total": 40, "cinfer_prefix_cache_queries_total": 80,
                             "cinfer_preemptions_total": 2}}
        rep = lg.metrics_report(before, after)
        self.assertEqual(rep["delta"], {"cinfer_prefix_cache_hits_total": 30, "cinfer_prefix_cache_queries_total": 60,
                                        "cinfer_preemptions_total": 2})
        self.assertEqual(rep["prefix_hit_rate"], 0.5)
        self.assertIn("before", lg.metrics_report({"error": "GET /metrics: HTTP 404"}, after)["error"])
        self.assertIn("after", lg.metrics_report(before, None)["error"])


if __name__ == "__main__":
    unittest.main()
