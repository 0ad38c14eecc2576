#!/usr/bin/env python3
"""Generates engine/text/unicode_tables.c: the Unicode data the tokenizer's pre-tokenizers need.

    python3 hack/gen-unicode-tables.py > engine/text/unicode_tables.c

Tables (all compact ranges, searched with bsearch at run time):
  - general-category class per code point (L, N, P, M, S, Z, C, unassigned) as run starts,
  - simple lowercase mappings as runs of constant delta (the tokenizer's case folding),
  - Python's own case mappings for the chat-template interpreter: str.upper()/lower()/title() of
    one code point as runs of constant delta plus the few that expand to several code points, and
    the Lowercase, Uppercase, Cased and Case_Ignorable properties str.islower(), isupper(),
    title() and the final-sigma rule of lower() use,
  - the explicit character classes of the deepseek-llm pre-tokenizer regexes, expanded from the
    exact strings llama.cpp uses so the C matcher cannot drift from them.
White_Space is not in Python's unicodedata (it lives in PropList.txt); that property has been stable
since Unicode 6.0 and is written out in unicode.c instead.
Output depends only on the Python version's unicodedata (reported in the file header).
"""
import sys
import unicodedata

MAX_CPT = 0x110000

# Must match enum unicode_cat in engine/text/unicode.h.
CAT_CODES = {'L': 1, 'N': 2, 'P': 3, 'M': 4, 'S': 5, 'Z': 6, 'C': 7}
CAT_UNDEFINED = 0


def cat_of(cpt):
    gc = unicodedata.category(chr(cpt))
    if gc == 'Cn':
        return CAT_UNDEFINED
    return CAT_CODES[gc[0]]


def category_runs():
    runs = []
    prev = None
    for cpt in range(MAX_CPT):
        c = cat_of(cpt)
        if c != prev:
            runs.append((cpt, c))
            prev = c
    return runs


def lowercase_runs():
    """Runs (start, count, stride, delta): for i < count, start + i*stride lowers to itself + delta."""
    return case_runs(str.lower)


def case_runs(fn):
    """Runs (start, count, stride, delta) of the one-code-point results of fn (str.lower, ...)."""
    pairs = []
    for cpt in range(MAX_CPT):
        lo = fn(chr(cpt))
        if len(lo) == 1 and ord(lo) != cpt:
            pairs.append((cpt, ord(lo) - cpt))
    runs = []
    i = 0
    while i < len(pairs):
        start, delta = pairs[i]
        stride = 0
        count = 1
        if i + 1 < len(pairs) and pairs[i + 1][1] == delta and pairs[i + 1][0] - start in (1, 2):
            stride = pairs[i + 1][0] - start
            while (i + count < len(pairs) and pairs[i + count][1] == delta and
                   pairs[i + count][0] == start + count * stride):
                count += 1
        runs.append((start, count, stride if stride else 1, delta))
        i += count
    return runs


def special_cases():
    """(cpt, kind, mapped code points) for mappings to more than one code point; kind 0 lower,
    1 upper, 2 title (must match enum unicode_case in engine/text/unicode.h)."""
    out = []
    for cpt in range(MAX_CPT):
        for kind, fn in enumerate((str.lower, str.upper, str.title)):
            m = fn(chr(cpt))
            if len(m) > 1:
                assert len(m) <= 3, hex(cpt)
                out.append((cpt, kind, [ord(x) for x in m]))
    return out


def prop_ranges(pred):
    """Ranges of the code points where pred(chr(cpt)) holds."""
    ranges = []
    for cpt in range(MAX_CPT):
        if pred(chr(cpt)):
            if ranges and ranges[-1][1] == cpt - 1:
                ranges[-1] = (ranges[-1][0], cpt)
            else:
                ranges.append((cpt, cpt))
    return ranges


# Case_Ignorable (Unicode D136): Mn, Me, Cf, Lm, Sk, and Word_Break MidLetter, MidNumLet and
# Single_Quote, which unicodedata does not expose; these are their members (stable since 6.x).
WB_MID = {0x27, 0x2E, 0x3A, 0xB7, 0x387, 0x55F, 0x5F4, 0x2018, 0x2019, 0x2024, 0x2027, 0xFE13,
          0xFE52, 0xFE55, 0xFF07, 0xFF0E, 0xFF1A}


def is_case_ignorable(ch):
    return unicodedata.category(ch) in ('Mn', 'Me', 'Cf', 'Lm', 'Sk') or ord(ch) in WB_MID


def is_cased(ch):
    return ch.islower() or ch.isupper() or unicodedata.category(ch) == 'Lt'


def class_ranges(spec):
    """Expands a regex bracket body made of literal characters and a-b ranges (no escapes)."""
    ranges = []
    i = 0
    while i < len(spec):
        lo = ord(spec[i])
        if i + 2 < len(spec) and spec[i + 1] == '-':
            ranges.append((lo, ord(spec[i + 2])))
            i += 3
        else:
            ranges.append((lo, lo))
            i += 1
    ranges.sort()
    merged = []
    for lo, hi in ranges:
        assert lo <= hi, (hex(lo), hex(hi))
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return merged


# The bracket bodies of llama.cpp's deepseek-llm pre-tokenizer regexes (LLAMA_VOCAB_PRE_TYPE_DEEPSEEK_LLM),
# which list characters explicitly instead of using \p{..} classes.
DEEPSEEK_LLM_LETTERS = (
    'A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅ'
    'ὐ-ὗὙὛὝὟ-\u1f7dᾀ-ᾴᾶ-ᾼ\u1fbeῂ-ῄῆ-ῌῐ-\u1fd3ῖ-\u1fdbῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u2126ℨ\u212a-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯ'
    'ꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ\U00010400-\U0001044f𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃')
DEEPSEEK_LLM_PUNCT = '!-/:-~！-／：-～‘-‟　-。'
CJK = '一-龥ࠀ-一가-퟿'


def emit_ranges(out, name, ranges, comment):
    out.append('/* %s */' % comment)
    out.append('const struct unicode_range %s[] = {' % name)
    line = '   '
    for lo, hi in ranges:
        item = ' {0x%X, 0x%X},' % (lo, hi)
        if len(line) + len(item) > 98:
            out.append(line)
            line = '   '
        line += item
    out.append(line)
    out.append('};')
    out.append('const size_t %s_len = sizeof(%s) / sizeof(%s[0]);' % (name, name, name))
    out.append('')


def main():
    out = []
    out.append('/* Generated by hack/gen-unicode-tables.py from Python %s unicodedata (Unicode %s).'
               % (sys.version.split()[0], unicodedata.unidata_version))
    out.append(' * Do not edit: change the generator and re-run it. */')
    out.append('#include "engine/text/unicode_tables.h"')
    out.append('')
    out.append('/* clang-format off */')
    out.append('')

    runs = category_runs()
    out.append('/* General-category class runs: (start << 3) | enum unicode_cat, sorted by start; each run')
    out.append(' * extends to the next start. */')
    out.append('const uint32_t unicode_cat_runs[] = {')
    line = '   '
    for start, c in runs:
        item = ' 0x%X,' % ((start << 3) | c)
        if len(line) + len(item) > 98:
            out.append(line)
            line = '   '
        line += item
    out.append(line)
    out.append('};')
    out.append('const size_t unicode_cat_runs_len = sizeof(unicode_cat_runs) / sizeof(unicode_cat_runs[0]);')
    out.append('')

    lruns = lowercase_runs()
    out.append('/* Simple lowercase mappings: {start, count, stride, delta}, sorted by start. */')
    out.append('const struct unicode_case_run unicode_lower_runs[] = {')
    line = '   '
    for start, count, stride, delta in lruns:
        item = ' {0x%X, %d, %d, %d},' % (start, count, stride, delta)
        if len(line) + len(item) > 98:
            out.append(line)
            line = '   '
        line += item
    out.append(line)
    out.append('};')
    out.append('const size_t unicode_lower_runs_len = '
               'sizeof(unicode_lower_runs) / sizeof(unicode_lower_runs[0]);')
    out.append('')

    for name, fn, what in (('unicode_upper_runs', str.upper, 'upper'),
                           ('unicode_title_runs', str.title, 'title')):
        out.append('/* Python str.%s() of one code point, where it is one code point: {start, count, '
                   'stride, delta}. */' % what)
        out.append('const struct unicode_case_run %s[] = {' % name)
        line = '   '
        for start, count, stride, delta in case_runs(fn):
            item = ' {0x%X, %d, %d, %d},' % (start, count, stride, delta)
            if len(line) + len(item) > 98:
                out.append(line)
                line = '   '
            line += item
        out.append(line)
        out.append('};')
        out.append('const size_t %s_len = sizeof(%s) / sizeof(%s[0]);' % (name, name, name))
        out.append('')

    out.append('/* Python case mappings to several code points: {cpt, kind (0 lower, 1 upper, 2 title), '
               'n, {cpts}}, sorted by cpt then kind. */')
    out.append('const struct unicode_special_case unicode_special_cases[] = {')
    for cpt, kind, m in special_cases():
        out.append('    {0x%X, %d, %d, {%s}},' % (cpt, kind, len(m), ', '.join('0x%X' % x for x in m)))
    out.append('};')
    out.append('const size_t unicode_special_cases_len = '
               'sizeof(unicode_special_cases) / sizeof(unicode_special_cases[0]);')
    out.append('')
    emit_ranges(out, 'unicode_lowercase', prop_ranges(str.islower), 'Lowercase: str.islower() of one code point')
    emit_ranges(out, 'unicode_uppercase', prop_ranges(str.isupper), 'Uppercase: str.isupper() of one code point')
    emit_ranges(out, 'unicode_cased', prop_ranges(is_cased), 'Cased (D135): Lowercase, Uppercase or Lt')
    emit_ranges(out, 'unicode_case_ignorable', prop_ranges(is_case_ignorable), 'Case_Ignorable (D136)')

    emit_ranges(out, 'unicode_deepseek_letters', class_ranges(DEEPSEEK_LLM_LETTERS),
                'deepseek-llm letter class [A-Za-zµÀ-Ö...𞤀-𞥃]')
    emit_ranges(out, 'unicode_deepseek_punct', class_ranges(DEEPSEEK_LLM_PUNCT),
                'deepseek-llm punctuation class [!-/:-~！-／：-～‘-‟　-。]')
    emit_ranges(out, 'unicode_cjk', class_ranges(CJK), 'deepseek CJK class [一-龥ࠀ-一가-퟿]')
    out.append('/* clang-format on */')
    sys.stdout.write('\n'.join(out).rstrip('\n') + '\n')


if __name__ == '__main__':
    main()
