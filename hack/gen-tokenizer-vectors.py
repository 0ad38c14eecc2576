#!/usr/bin/env python3
"""Tokenizer test vectors from llama.cpp, for tests/engine/test_tokenizer_vectors.c.

    "$(hack/oracle.sh)" hack/gen-tokenizer-vectors.py --llama-models DIR

DIR is llama.cpp's models/ directory (ggml-vocab-*.gguf with .inp/.out test strings), e.g. from the
sdist the oracle is built from:
    pip download llama-cpp-python==0.3.36 --no-deps --no-binary :all: && tar xzf llama_cpp_python-*.tar.gz
    DIR=llama_cpp_python-0.3.36/vendor/llama.cpp/models

The real vocabularies are megabytes (128k-152k tokens, up to 280k merges), too big to commit, so
each is cut down to what its test strings can reach, keeping every token and merge in order:
  - byte-level BPE: a merge (a, b) can only ever be tried where a+b occurs in the byte-mapped text
    of some input, and a token only looked up where its text occurs, so the subset keeps those
    merges and tokens, every single-character token and every special (non-normal) token;
  - SentencePiece: the pieces occurring in the escaped text ("\u2581" for spaces, with the space
    prefix), every byte token and every special token.
Token ids are renumbered; the expected ids are llama.cpp's own tokenization of each string with the
subset vocabulary (llama_cpp.Llama(vocab_only=True).tokenize, add_special and parse_special off,
as llama.cpp's test-tokenizer-0 runs), and for the unmodified vocabularies they are checked against
the .out vectors (Hugging Face's tokenizers) mapped to the new ids, which proves the cut is faithful.
Variants swap tokenizer.ggml.pre (gpt-4o, tekken: no vocabulary of theirs ships with llama.cpp, so
llama-bpe's merges run under their pre-tokenizers) or add_space_prefix (Gemma-style SentencePiece).
The SmolLM2 model's full tokenizer (../shared/models/smollm2) is tokenized directly, its
special tokens parsed, since the test reads that model from ../shared.

Output: tests/testdata/tokenizer/<name>.gguf (the cut vocabulary) and <name>.json (strings, ids).
"""
import argparse
import json
import os
import sys

import gguf
import llama_cpp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, 'tests', 'testdata', 'tokenizer')
SHARED = os.path.join(os.path.dirname(ROOT), 'shared')
SEP = '\n__ggml_vocab_test__\n'

# Strings for the pre-tokenizers' corners: case runs (gpt-4o and tekken split CamelCase and treat
# non-ASCII letters as both cases), contractions, digit groups, slashes after punctuation,
# newline runs, marks, scripts without spaces, emoji, mixed whitespace.
EXTRA = [
    'Hello World', 'HELLO world', 'ÉCOLE normale supérieure', 'CamelCaseWord and XMLHttpRequest',
    'iPhone XR, macOS', "don't I'LL you're WE'VE it'S", '1234567 12 1 3.14159 1,000,000',
    'path/to/file.txt\n/next;\n// comment', 'a\n\n\nb\r\n\r\nc', '   leading spaces', 'trailing   ',
    'Grüße, Ἀθῆναι, Москва, Ελλάδα', '日本語のテキスト、中文文本。한국어', 'emoji 👋🏽 here 🇫🇷',
    'combining e\u0301 and n\u0303 marks', 'tabs\tand\u00a0nbsp\u3000ideographic space',
    'x = a+b*(c-d)/e; return x!=0 && y>=1', 'ALLCAPS.lowercase.MiXeD_case-hyphen', '<tag attr="v">',
    '$100 + 50% = ¿qué? ¡sí!', '\u2028line separator\u2029', 'ﬁ ligature ＡＢＣ fullwidth',
    'getHTTPResponseCode HTTPServer ABCdef', 'ÀÉÎõüÑ mixedÉtÉ', "l'Été dÉjà VU's", '12345678901234',
]

VARIANTS = [
    # name, source file in --llama-models (or shared:...), overrides
    ('llama-bpe', 'ggml-vocab-llama-bpe.gguf', {}),
    ('qwen2', 'ggml-vocab-qwen2.gguf', {}),
    ('qwen35', 'ggml-vocab-qwen35.gguf', {}),
    ('command-r', 'ggml-vocab-command-r.gguf', {}),
    ('refact', 'ggml-vocab-refact.gguf', {}),
    ('mpt', 'ggml-vocab-mpt.gguf', {}),
    ('gpt-4o', 'ggml-vocab-llama-bpe.gguf', {'tokenizer.ggml.pre': 'gpt-4o'}),
    ('tekken', 'ggml-vocab-llama-bpe.gguf', {'tokenizer.ggml.pre': 'tekken'}),
    ('spm-no-prefix', 'shared:testdata/tokenizer/ggml-vocab-llama-spm.gguf',
     {'tokenizer.ggml.add_space_prefix': False}),
]

ID_KEYS = ('bos_token_id', 'eos_token_id', 'unknown_token_id', 'padding_token_id', 'eot_token_id',
           'eom_token_id', 'seperator_token_id', 'cls_token_id', 'mask_token_id')


def bytes_to_unicode():
    """GPT-2's byte -> printable code point table."""
    bs = list(range(ord('!'), ord('~') + 1)) + list(range(ord('¡'), ord('¬') + 1)) + \
        list(range(ord('®'), ord('ÿ') + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = bytes_to_unicode()


def field(reader, key):
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def substrings(texts, max_len=48):
    out = set()
    for t in texts:
        for i in range(len(t)):
            for j in range(i + 1, min(len(t), i + max_len) + 1):
                out.add(t[i:j])
    return out


def cut_vocab(reader, inputs, overrides):
    """The tokens and merges the inputs can reach: (keep: old ids in order, merges)."""
    model = field(reader, 'tokenizer.ggml.model')
    tokens = field(reader, 'tokenizer.ggml.tokens')
    types = field(reader, 'tokenizer.ggml.token_type') or [1] * len(tokens)
    if model == 'gpt2':
        mapped = [''.join(B2U[b] for b in s.encode('utf-8')) for s in inputs]
    else:
        prefix = overrides.get('tokenizer.ggml.add_space_prefix',
                               field(reader, 'tokenizer.ggml.add_space_prefix'))
        prefix = True if prefix is None else prefix
        mapped = [('▁' if prefix else '') + s.replace(' ', '▁') for s in inputs] + \
                 [s.replace(' ', '▁') for s in inputs]
    subs = substrings(mapped)
    keep = []
    for i, (tok, ty) in enumerate(zip(tokens, types)):
        if ty not in (1, 0) or len(tok) == 1 or tok in subs or (model != 'gpt2' and tok.startswith('<0x')):
            keep.append(i)
    merges = []
    for m in field(reader, 'tokenizer.ggml.merges') or []:
        left, _, right = m.partition(' ')
        if left + right in subs:
            merges.append(m)
    return keep, merges


def write_cut(reader, path, keep, merges, overrides):
    arch = field(reader, 'general.architecture')
    w = gguf.GGUFWriter(path, arch)
    old_to_new = {old: new for new, old in enumerate(keep)}
    tokens = field(reader, 'tokenizer.ggml.tokens')
    types = field(reader, 'tokenizer.ggml.token_type')
    scores = field(reader, 'tokenizer.ggml.scores')
    for key, f in reader.fields.items():
        if key.startswith('GGUF.') or key in ('general.architecture',) or key in overrides:
            continue
        if key.startswith('tokenizer.ggml.') and key[len('tokenizer.ggml.'):] in (
                'tokens', 'token_type', 'merges', 'scores') + ID_KEYS:
            continue
        if key.endswith('.vocab_size'):
            w.add_uint32(key, len(keep))
            continue
        vtype = gguf.GGUFValueType(f.types[0])
        if vtype == gguf.GGUFValueType.ARRAY:
            continue  # no other arrays matter to the tokenizer
        w.add_key_value(key, f.contents(), vtype)
    for key, value in overrides.items():
        if isinstance(value, bool):
            w.add_bool(key, value)
        else:
            w.add_string(key, value)
    w.add_token_list([tokens[i] for i in keep])
    if types is not None:
        w.add_token_types([types[i] for i in keep])
    if scores is not None:
        w.add_token_scores([scores[i] for i in keep])
    if merges:
        w.add_token_merges(merges)
    for k in ID_KEYS:
        v = field(reader, 'tokenizer.ggml.' + k)
        if v is not None and v in old_to_new:
            w.add_uint32('tokenizer.ggml.' + k, old_to_new[v])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return old_to_new


def tokenize_all(path, inputs, special=False):
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    return [llm.tokenize(s.encode('utf-8'), add_bos=False, special=special) for s in inputs]


def read_inp_out(models, name):
    base = os.path.join(models, 'ggml-vocab-%s.gguf' % name)
    if not os.path.exists(base + '.inp'):
        return [], []
    with open(base + '.inp', encoding='utf-8', newline='') as f:
        inp = f.read().split(SEP)[:-1]  # every string is followed by the separator line
    with open(base + '.out', encoding='utf-8') as f:
        out = [[int(x) for x in line.split()] for line in f.read().split('\n')[:len(inp)]]
    return inp, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--llama-models', required=True, help="llama.cpp's models/ directory")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    for name, src, overrides in VARIANTS:
        path = os.path.join(SHARED, src[7:]) if src.startswith('shared:') else \
            os.path.join(args.llama_models, src)
        vocab_name = os.path.basename(path)[len('ggml-vocab-'):-len('.gguf')]
        inp, out = read_inp_out(os.path.dirname(path), vocab_name)
        inputs = inp + EXTRA
        reader = gguf.GGUFReader(path)
        keep, merges = cut_vocab(reader, inputs, overrides)
        gguf_path = os.path.join(OUT, name + '.gguf')
        old_to_new = write_cut(reader, gguf_path, keep, merges, overrides)
        ids = tokenize_all(gguf_path, inputs)
        if not overrides and inp:  # the cut reproduces the full vocabulary's vectors
            full = tokenize_all(path, inp)
            for s, want, got_full, got in zip(inp, out, full, ids):
                if got_full != want:
                    print('note: %s: llama.cpp differs from the .out vector for %r' % (name, s))
                mapped = [old_to_new[i] for i in got_full]
                if mapped != got:
                    sys.exit('%s: the cut vocabulary tokenizes %r differently' % (name, s))
        doc = {'vocab': name + '.gguf', 'source': os.path.basename(path), 'overrides': overrides,
               'llama_cpp_python': llama_cpp.__version__, 'parse_special': False,
               'cases': [{'text': s, 'ids': i} for s, i in zip(inputs, ids)]}
        with open(os.path.join(OUT, name + '.json'), 'w', encoding='utf-8') as f:
            json.dump(doc, f, ensure_ascii=False, indent=0)
            f.write('\n')
        print('%-14s %6d tokens %6d merges %3d strings %7d bytes' % (
            name, len(keep), len(merges), len(inputs), os.path.getsize(gguf_path)))

    # SmolLM2's own tokenizer, from ../shared: chat prompts with special tokens parsed, and text.
    smol = os.path.join(SHARED, 'models', 'smollm2', 'SmolLM2-135M-Instruct.Q4_1.gguf')
    if os.path.exists(smol):
        with open(os.path.join(ROOT, 'tests', 'testdata', 'chat', 'golden',
                               'HuggingFaceTB-SmolLM2-135M-Instruct.json'), encoding='utf-8') as f:
            prompts = [r['output'] for r in json.load(f)['results'] if 'output' in r]
        inp, _ = read_inp_out(os.path.join(SHARED, 'testdata', 'tokenizer'), 'starcoder')
        texts = inp + EXTRA
        cases = [{'text': s, 'ids': i, 'parse_special': True}
                 for s, i in zip(prompts, tokenize_all(smol, prompts, special=True))]
        cases += [{'text': s, 'ids': i, 'parse_special': False}
                  for s, i in zip(texts, tokenize_all(smol, texts))]
        doc = {'model': 'models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf',
               'llama_cpp_python': llama_cpp.__version__, 'cases': cases}
        with open(os.path.join(OUT, 'smollm2.json'), 'w', encoding='utf-8') as f:
            json.dump(doc, f, ensure_ascii=False, indent=0)
            f.write('\n')
        print('smollm2: %d strings' % len(cases))
    return 0


if __name__ == '__main__':
    sys.exit(main())
