#!/usr/bin/env python3
"""Reference renderings of chat templates, for tests/engine/test_jinja_golden.c and test_jinja.c.

    hack/gen-chat-golden.py                 rewrite tests/testdata/chat/golden/*.json and probes.json
    hack/gen-chat-golden.py --dir DIR --render BIN
                                            compare a C renderer (BIN TEMPLATE VARS.json prints the
                                            output) with jinja2 on every DIR/*.jinja; writes nothing

Renders each template of ../shared/testdata/chat-templates/ and tests/testdata/chat/templates/
with every message list of tests/testdata/chat/cases.json, the way Hugging Face transformers'
apply_chat_template does (transformers/utils/chat_template_utils.py, _compile_jinja_template and
render_jinja_template): jinja2's ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and
the loopcontrols extension plus transformers' AssistantTracker ({% generation %}), its tojson
(json.dumps with ensure_ascii=False), raise_exception and strftime_now, and the variables
messages, tools, documents (None unless given), add_generation_prompt, bos_token, eos_token and
the case's extra keyword arguments. strftime_now formats the fixed time NOW in UTC, so outputs are
reproducible; the C test renders with the same time and TZ=UTC.

probes.txt holds small templates (separated by lines "###"), one per feature or corner of Jinja2
and Python semantics; probes.json gets each one's rendering with PROBE_VARS. A rendering Python
cannot reproduce itself (it prints an object address: a generator, a bound method) is recorded as
an expected error: the C interpreter refuses to print those.

Run it with the oracle's python (hack/oracle.sh prints it) or any python with jinja2 >= 3.1;
the golden files record the jinja2 version. Outputs are stored whole, errors as the exception's
class and message (the C side must fail too, and for raise_exception with the same message).
"""
import argparse
import glob
import hashlib
import json
import os
import re
import subprocess
import sys
from datetime import datetime, timezone

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), 'shared', 'testdata', 'chat-templates')
LOCAL = os.path.join(ROOT, 'tests', 'testdata', 'chat', 'templates')
CASES = os.path.join(ROOT, 'tests', 'testdata', 'chat', 'cases.json')
GOLDEN = os.path.join(ROOT, 'tests', 'testdata', 'chat', 'golden')
PROBES = os.path.join(ROOT, 'tests', 'testdata', 'chat', 'probes.txt')
NOW = 1721995200  # 2024-07-26 12:00:00 UTC
PROBE_VARS = {'messages': [{'role': 'user', 'content': 'hi'}, {'role': 'assistant', 'content': 'yo'}],
              'x': [1, 2], 'd': {'a': 1, 'items': 5}, 'add_generation_prompt': True}

# Special tokens the models' tokenizer_config.json define (transformers passes the
# special_tokens_map; a model without a bos_token leaves it undefined in the template).
TOKENS = {
    'meta-llama': {'bos_token': '<|begin_of_text|>', 'eos_token': '<|eot_id|>'},
    'NousResearch-Hermes': {'bos_token': '<|begin_of_text|>', 'eos_token': '<|im_end|>'},
    'Qwen': {'eos_token': '<|im_end|>'},
    'SmolLM2': {'bos_token': '<|im_start|>', 'eos_token': '<|im_end|>'},
    'google-gemma': {'bos_token': '<bos>', 'eos_token': '<eos>'},
    'microsoft-Phi': {'bos_token': '<s>', 'eos_token': '<|endoftext|>'},
    'mistralai': {'bos_token': '<s>', 'eos_token': '</s>'},
    'deepseek-ai-DeepSeek-R1-Distill-Llama': {'bos_token': '<｜begin▁of▁sentence｜>',
                                              'eos_token': '<｜end▁of▁sentence｜>'},
    'deepseek-ai-DeepSeek-R1-Distill-Qwen': {'bos_token': '<｜begin▁of▁sentence｜>',
                                             'eos_token': '<｜end▁of▁sentence｜>'},
    'llama-cpp-deepseek-r1': {'bos_token': '<｜begin▁of▁sentence｜>',
                              'eos_token': '<｜end▁of▁sentence｜>'},
    'meetkai-functionary': {'bos_token': '<|begin_of_text|>', 'eos_token': '<|eot_id|>'},
    'CohereForAI': {'bos_token': '<BOS_TOKEN>', 'eos_token': '<|END_OF_TURN_TOKEN|>'},
    'ibm-granite': {'bos_token': '<|end_of_text|>', 'eos_token': '<|end_of_text|>'},
    'HuggingFaceTB-SmolLM3': {'bos_token': '<|im_start|>', 'eos_token': '<|im_end|>'},
}


def tokens_for(name):
    best = ''
    for prefix in TOKENS:
        if name.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    return dict(TOKENS.get(best, {'bos_token': '<s>', 'eos_token': '</s>'}))


class AssistantTracker(Extension):
    """transformers' {% generation %} tag: renders its body (it only tracks offsets)."""
    tags = {'generation'}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(['name:endgeneration'], drop_needle=True)
        return nodes.CallBlock(self.call_method('_generation_support'), [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.fromtimestamp(NOW, tz=timezone.utc).strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters['tojson'] = tojson
    env.globals['raise_exception'] = raise_exception
    env.globals['strftime_now'] = strftime_now
    return env


def case_vars(case, tokens):
    """The keyword arguments render() gets: transformers' fixed ones, tokens, then extras."""
    v = {'messages': case['messages'], 'tools': case.get('tools'), 'documents': None,
         'add_generation_prompt': case.get('add_generation_prompt', True)}
    v.update(tokens)
    v.update(case.get('kwargs', {}))
    return v


def render(env, source, case, tokens):
    try:
        tmpl = env.from_string(source)
    except Exception as e:  # noqa: BLE001 - any compile failure is an expected error
        return {'error': type(e).__name__, 'message': str(e), 'at': 'parse'}
    try:
        return {'output': tmpl.render(**case_vars(case, tokens))}
    except Exception as e:  # noqa: BLE001
        return {'error': type(e).__name__, 'message': str(e)}


def write_probes(env):
    with open(PROBES, encoding='utf-8', newline='') as f:
        sources = f.read().split('\n###\n')
    results = []
    for src in sources:
        try:
            r = {'output': env.from_string(src).render(**PROBE_VARS)}
            if re.search(r'<[^<>]* at 0x[0-9a-f]+>', r['output']):
                r = {'error': 'Unreproducible',
                     'message': re.sub(r' at 0x[0-9a-f]+', ' at 0x...', r['output'])}
        except Exception as e:  # noqa: BLE001
            r = {'error': type(e).__name__, 'message': str(e)}
        r['source'] = src
        results.append(r)
    doc = {'jinja2': jinja2.__version__, 'now': NOW, 'vars': PROBE_VARS, 'results': results}
    with open(os.path.join(os.path.dirname(PROBES), 'probes.json'), 'w', encoding='utf-8') as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write('\n')
    print('probes: %d, %d errors' % (len(results), sum(1 for r in results if 'error' in r)))


def templates():
    """(name, source path, reference as the C test finds it) for every committed template."""
    out = []
    for p in sorted(glob.glob(os.path.join(SHARED, '*.jinja'))):
        out.append((os.path.basename(p)[:-6], p, 'shared:testdata/chat-templates/' + os.path.basename(p)))
    for p in sorted(glob.glob(os.path.join(LOCAL, '*.jinja'))):
        out.append((os.path.basename(p)[:-6], p, 'local:tests/testdata/chat/templates/' + os.path.basename(p)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--dir', help='render these templates too and compare with --render (no files written)')
    ap.add_argument('--render', help='a C renderer: RENDER TEMPLATE VARS.json prints the output')
    args = ap.parse_args()
    with open(CASES, encoding='utf-8') as f:
        cases = json.load(f)['cases']
    env = make_env()
    if args.dir:
        return explore(env, cases, args.dir, args.render)
    write_probes(env)
    os.makedirs(GOLDEN, exist_ok=True)
    for name, path, ref in templates():
        with open(path, encoding='utf-8', newline='') as f:
            source = f.read()
        tokens = tokens_for(name)
        results = []
        for case in cases:
            r = render(env, source, case, tokens)
            r['case'] = case['name']
            results.append(r)
        doc = {'template': ref, 'sha256': hashlib.sha256(source.encode('utf-8')).hexdigest(),
               'jinja2': jinja2.__version__, 'now': NOW, 'tokens': tokens, 'results': results}
        with open(os.path.join(GOLDEN, name + '.json'), 'w', encoding='utf-8') as f:
            json.dump(doc, f, ensure_ascii=False, indent=1)
            f.write('\n')
        errors = sum(1 for r in results if 'error' in r)
        print('%-60s %2d cases, %2d errors' % (name, len(results), errors))
    return 0


def explore(env, cases, directory, renderer):
    """Development aid: compare a C renderer with jinja2 on every template of a directory."""
    import tempfile
    bad = 0
    for p in sorted(glob.glob(os.path.join(directory, '*.jinja'))):
        name = os.path.basename(p)[:-6]
        with open(p, encoding='utf-8', newline='') as f:
            source = f.read()
        tokens = tokens_for(name)
        for case in cases:
            want = render(env, source, case, tokens)
            if not renderer:
                continue
            with tempfile.NamedTemporaryFile('w', suffix='.json', delete=False, encoding='utf-8') as t:
                json.dump(case_vars(case, tokens), t, ensure_ascii=False)
            r = subprocess.run([renderer, p, t.name], capture_output=True,
                               env=dict(os.environ, TZ='UTC'))
            os.unlink(t.name)
            got = r.stdout.decode('utf-8', 'replace')
            if 'output' in want:
                ok = r.returncode == 0 and got == want['output']
            else:
                ok = r.returncode != 0
            if not ok:
                bad += 1
                print('MISMATCH %s / %s' % (name, case['name']))
                print('  want:', repr(want.get('output', want))[:400])
                print('  got: ', repr(got)[:400])
    print('%d mismatches' % bad)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
