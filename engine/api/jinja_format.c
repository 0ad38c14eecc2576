/* Python's two string formatters for templates: printf-style str % args (the `format` filter
 * and the % operator) and str.format with the common part of the format-spec mini-language
 * (fill, align, sign, width, grouping, precision; s, d, x, o, b, e, f, g, %). Fields and specs
 * outside that are refused with a message, never approximated. */
#include "engine/api/jinja_priv.h"

#include "common/err.h"
#include "engine/text/unicode.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- str % args */

/* One %-conversion with flags, width and precision as Python applies them. */
struct pct_spec {
    bool left, plus, space, alt, zero;
    int64_t width, prec; /* -1: none */
    char type;
};

static int pad(struct jinja_ctx *c, struct jinja_sb *sb, const char *p, size_t n, size_t ncp,
               const struct pct_spec *sp)
{
    int rc = 0;
    size_t fill = sp->width > 0 && (size_t)sp->width > ncp ? (size_t)sp->width - ncp : 0;
    for (size_t i = 0; i < fill && !sp->left && !rc; i++) rc = jinja_sb_putc(c, sb, ' ');
    if (!rc) rc = jinja_sb_put(c, sb, p, n);
    for (size_t i = 0; i < fill && sp->left && !rc; i++) rc = jinja_sb_putc(c, sb, ' ');
    return rc;
}

static int pct_one(struct jinja_ctx *c, struct jinja_sb *sb, const struct pct_spec *sp,
                   const struct jinja_val *v)
{
    char fmt[32], buf[512];
    int rc;
    if (v->type == JV_UNDEF && sp->type != 's') return jinja_fail_undef(c, v);
    switch (sp->type) {
    case 's':
    case 'r': {
        struct jinja_sb tmp = {0};
        if ((rc = sp->type == 's' ? jinja_to_str(c, &tmp, v) : jinja_repr(c, &tmp, v))) return rc;
        size_t n = tmp.len;
        if (sp->prec >= 0) n = jinja_utf8_offset(tmp.p, tmp.len, (size_t)sp->prec);
        return pad(c, sb, tmp.p, n, jinja_utf8_count(tmp.p, n), sp);
    }
    case 'd':
    case 'i':
    case 'u':
    case 'x':
    case 'X':
    case 'o': {
        int64_t x;
        if (v->type == JV_INT || v->type == JV_BOOL)
            x = v->type == JV_BOOL ? v->b : v->i;
        else if (v->type == JV_FLOAT && isfinite(v->f) && fabs(v->f) < 9.2e18)
            x = (int64_t)v->f;
        else
            return jinja_fail(c, ERR_INVAL, "%%%c format: a real number is required, not %s",
                              sp->type, jinja_type_name(v));
        char t = sp->type == 'i' || sp->type == 'u' ? 'd' : sp->type;
        snprintf(fmt, sizeof(fmt), "%%%s%s%s%s%s*.*" PRId64, sp->left ? "-" : "",
                 sp->plus ? "+" : "", sp->space ? " " : "", sp->alt ? "#" : "",
                 sp->zero && !sp->left ? "0" : "");
        fmt[strlen(fmt) - 1] = t; /* replace PRId64's last letter */
        if (t != 'd') {           /* x / o take the magnitude; Python prints the sign itself */
            bool neg = x < 0;
            uint64_t mag = neg ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
            char digits[80];
            snprintf(digits, sizeof(digits),
                     t == 'x'   ? "%" PRIx64
                     : t == 'X' ? "%" PRIX64
                                : "%" PRIo64,
                     mag);
            const char *prefix = sp->alt ? (t == 'x' ? "0x" : t == 'X' ? "0X" : "0o") : "";
            snprintf(buf, sizeof(buf), "%s%s%s",
                     neg         ? "-"
                     : sp->plus  ? "+"
                     : sp->space ? " "
                                 : "",
                     prefix, digits);
            return pad(c, sb, buf, strlen(buf), strlen(buf), sp);
        }
        int n = snprintf(buf, sizeof(buf), fmt, (int)(sp->width > 400 ? 400 : sp->width),
                         (int)(sp->prec > 400 ? 400 : sp->prec), x);
        return jinja_sb_put(c, sb, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
    }
    case 'e':
    case 'E':
    case 'f':
    case 'F':
    case 'g':
    case 'G': {
        double x;
        if (v->type == JV_FLOAT)
            x = v->f;
        else if (v->type == JV_INT || v->type == JV_BOOL)
            x = v->type == JV_BOOL ? v->b : (double)v->i;
        else
            return jinja_fail(c, ERR_INVAL, "must be real number, not %s", jinja_type_name(v));
        snprintf(fmt, sizeof(fmt), "%%%s%s%s%s%s*.*%c", sp->left ? "-" : "", sp->plus ? "+" : "",
                 sp->space ? " " : "", sp->alt ? "#" : "", sp->zero && !sp->left ? "0" : "",
                 sp->type);
        int n = snprintf(buf, sizeof(buf), fmt, (int)(sp->width > 400 ? 400 : sp->width),
                         (int)(sp->prec < 0     ? 6
                               : sp->prec > 100 ? 100
                                                : sp->prec),
                         x);
        return jinja_sb_put(c, sb, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
    }
    case 'c': {
        if (v->type == JV_STR && jinja_utf8_count(v->s, v->len) == 1)
            return pad(c, sb, v->s, v->len, 1, sp);
        if (v->type != JV_INT || v->i < 0 || v->i > 0x10FFFF)
            return jinja_fail(c, ERR_INVAL, "%%c requires int or char");
        char b[4];
        size_t n = unicode_encode((uint32_t)v->i, b);
        return pad(c, sb, b, n, 1, sp);
    }
    default:
        return jinja_fail(c, ERR_UNSUPPORTED, "the %%%c conversion is not supported", sp->type);
    }
}

int jinja_str_percent(struct jinja_ctx *c, const struct jinja_val *fmt,
                      const struct jinja_val *args, struct jinja_val *out)
{
    bool tuple = args->type == JV_TUPLE, mapping = args->type == JV_DICT;
    size_t next = 0, n_args = tuple ? args->l->n : 1;
    bool used_mapping = false;
    struct jinja_sb sb = {0};
    const char *s = fmt->s;
    size_t len = fmt->len;
    int rc = 0;
    for (size_t i = 0; i < len && !rc;) {
        const char *pc = memchr(s + i, '%', len - i);
        size_t stop = pc ? (size_t)(pc - s) : len;
        if ((rc = jinja_sb_put(c, &sb, s + i, stop - i)) || !pc) break;
        i = stop + 1;
        if (i >= len) return jinja_fail(c, ERR_INVAL, "incomplete format");
        struct pct_spec sp = {.width = -1, .prec = -1};
        const struct jinja_val *v = NULL;
        struct jinja_val key_val;
        if (s[i] == '(') { /* %(name)s */
            size_t e = i + 1;
            while (e < len && s[e] != ')') e++;
            if (e >= len) return jinja_fail(c, ERR_INVAL, "incomplete format key");
            if (!mapping) return jinja_fail(c, ERR_INVAL, "format requires a mapping");
            key_val = jinja_str(s + i + 1, e - i - 1);
            v = jinja_dict_get(args->d, &key_val);
            if (!v)
                return jinja_fail(c, ERR_INVAL, "KeyError: '%.*s'", (int)(e - i - 1), s + i + 1);
            used_mapping = true;
            i = e + 1;
        }
        for (; i < len && strchr("-+ #0", s[i]); i++) {
            if (s[i] == '-')
                sp.left = true;
            else if (s[i] == '+')
                sp.plus = true;
            else if (s[i] == ' ')
                sp.space = true;
            else if (s[i] == '#')
                sp.alt = true;
            else
                sp.zero = true;
        }
        for (; i < len && s[i] >= '0' && s[i] <= '9'; i++)
            sp.width = (sp.width < 0 ? 0 : sp.width) * 10 + (s[i] - '0');
        if (i < len && s[i] == '*')
            return jinja_fail(c, ERR_UNSUPPORTED, "'*' widths are not supported");
        if (i < len && s[i] == '.') {
            sp.prec = 0;
            for (i++; i < len && s[i] >= '0' && s[i] <= '9'; i++)
                sp.prec = sp.prec * 10 + (s[i] - '0');
        }
        while (i < len && (s[i] == 'h' || s[i] == 'l' || s[i] == 'L')) i++;
        if (i >= len) return jinja_fail(c, ERR_INVAL, "incomplete format");
        sp.type = s[i++];
        if (sp.width > 100000 || sp.prec > 100000)
            return jinja_fail(c, ERR_TOO_BIG, "width too large");
        if (sp.type == '%') {
            rc = jinja_sb_putc(c, &sb, '%');
            continue;
        }
        if (!v) {
            if (next >= n_args && !(mapping && !tuple && next == 0))
                return jinja_fail(c, ERR_INVAL, "not enough arguments for format string");
            v = tuple ? &args->l->v[next] : args;
            next++;
        }
        rc = pct_one(c, &sb, &sp, v);
    }
    if (rc) return rc;
    if (!used_mapping && !mapping && next < n_args)
        return jinja_fail(c, ERR_INVAL, "not all arguments converted during string formatting");
    *out = jinja_sb_val(&sb);
    out->flags = fmt->flags & JV_F_SAFE;
    return 0;
}

/* ---------------------------------------------------------------- str.format */

/* format(value, spec) for the spec mini-language's common subset. */
static int format_spec(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_val *v,
                       const char *sp, size_t n)
{
    if (n == 0) return jinja_to_str(c, sb, v);
    uint32_t fill = ' ';
    char align = 0, sign = '-', type = 0;
    bool alt = false, zero = false;
    int64_t width = -1, prec = -1;
    char group = 0;
    size_t i = 0, q = 0;
    if (n >= 2) { /* fill then align? */
        q = 0;
        uint32_t f = unicode_decode(sp, n, &q);
        if (q < n && strchr("<>=^", sp[q])) {
            fill = f;
            align = sp[q];
            i = q + 1;
        }
    }
    if (!align && i < n && strchr("<>=^", sp[i])) align = sp[i++];
    if (i < n && strchr("+- ", sp[i])) sign = sp[i++];
    if (i < n && sp[i] == '#') alt = true, i++;
    if (i < n && sp[i] == '0') zero = true, i++;
    for (; i < n && sp[i] >= '0' && sp[i] <= '9'; i++)
        width = (width < 0 ? 0 : width) * 10 + (sp[i] - '0');
    if (i < n && (sp[i] == ',' || sp[i] == '_')) group = sp[i++];
    if (i < n && sp[i] == '.') {
        prec = 0;
        for (i++; i < n && sp[i] >= '0' && sp[i] <= '9'; i++) prec = prec * 10 + (sp[i] - '0');
    }
    if (i < n) type = sp[i++];
    if (i != n || width > 100000 || prec > 100000)
        return jinja_fail(c, ERR_INVAL, "Invalid format specifier '%.*s'", (int)n, sp);
    if (zero && !align) fill = '0', align = '=';
    char buf[512];
    struct jinja_sb body = {0};
    int rc = 0;
    bool numeric = false;
    if (v->type == JV_STR && (type == 0 || type == 's')) {
        size_t len = v->len;
        if (prec >= 0) len = jinja_utf8_offset(v->s, v->len, (size_t)prec);
        rc = jinja_sb_put(c, &body, v->s, len);
        if (!align) align = '<';
    } else if ((v->type == JV_INT || v->type == JV_BOOL) && type != 'e' && type != 'f' &&
               type != 'g' && type != '%' && type != 'E' && type != 'F' && type != 'G' &&
               !(v->type == JV_BOOL && type == 0)) {
        int64_t x = v->type == JV_BOOL ? v->b : v->i;
        if (prec >= 0)
            return jinja_fail(c, ERR_INVAL, "Precision not allowed in integer format specifier");
        uint64_t mag = x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
        const char *pre = "";
        switch (type) {
        case 0:
        case 'd':
        case 'n': snprintf(buf, sizeof(buf), "%" PRIu64, mag); break;
        case 'x': snprintf(buf, sizeof(buf), "%" PRIx64, mag), pre = alt ? "0x" : ""; break;
        case 'X': snprintf(buf, sizeof(buf), "%" PRIX64, mag), pre = alt ? "0X" : ""; break;
        case 'o': snprintf(buf, sizeof(buf), "%" PRIo64, mag), pre = alt ? "0o" : ""; break;
        case 'b': {
            size_t k = 0;
            char tmp[70];
            do tmp[k++] = (char)('0' + (mag & 1));
            while (mag >>= 1);
            for (size_t j = 0; j < k; j++) buf[j] = tmp[k - 1 - j];
            buf[k] = '\0';
            pre = alt ? "0b" : "";
            break;
        }
        default:
            return jinja_fail(c, ERR_UNSUPPORTED, "format type '%c' is not supported for int",
                              type);
        }
        if (x < 0)
            rc = jinja_sb_putc(c, &body, '-');
        else if (sign == '+' || sign == ' ')
            rc = jinja_sb_putc(c, &body, sign);
        if (!rc) rc = jinja_sb_put(c, &body, pre, strlen(pre));
        size_t nd = strlen(buf);
        for (size_t k = 0; k < nd && !rc; k++) {
            if (group && k &&
                (nd - k) % (type == 'x' || type == 'X' || type == 'o' || type == 'b' ? 4 : 3) == 0)
                rc = jinja_sb_putc(c, &body, group);
            if (!rc) rc = jinja_sb_putc(c, &body, buf[k]);
        }
        numeric = true;
    } else if ((v->type == JV_FLOAT || v->type == JV_INT || v->type == JV_BOOL) && type &&
               strchr("eEfFgG%", type)) {
        double x = v->type == JV_FLOAT ? v->f : v->type == JV_BOOL ? v->b : (double)v->i;
        if (group)
            return jinja_fail(c, ERR_UNSUPPORTED, "grouping in float formats is not supported");
        char f[16];
        if (type == '%') x *= 100;
        snprintf(f, sizeof(f), "%%%s%s.*%c",
                 sign == '+'   ? "+"
                 : sign == ' ' ? " "
                               : "",
                 alt ? "#" : "", type == '%' ? 'f' : type);
        snprintf(buf, sizeof(buf), f, (int)(prec < 0 ? 6 : prec > 100 ? 100 : prec), x);
        rc = jinja_sb_put(c, &body, buf, strlen(buf));
        if (!rc && type == '%') rc = jinja_sb_putc(c, &body, '%');
        numeric = true;
    } else {
        return jinja_fail(c, ERR_UNSUPPORTED, "format spec '%.*s' for a %s value is not supported",
                          (int)n, sp, jinja_type_name(v));
    }
    if (rc) return rc;
    if (!align) align = numeric ? '>' : '<';
    size_t ncp = jinja_utf8_count(body.p ? body.p : "", body.len);
    size_t fillc = width > 0 && (size_t)width > ncp ? (size_t)width - ncp : 0;
    size_t left = align == '<' ? 0 : align == '^' ? fillc / 2 : fillc;
    size_t sign_len = 0;
    if (align == '=' && numeric && body.len && strchr("+- ", body.p[0])) sign_len = 1;
    if (sign_len && (rc = jinja_sb_put(c, sb, body.p, 1))) return rc;
    for (size_t k = 0; k < left && !rc; k++) rc = jinja_sb_cpt(c, sb, fill);
    if (!rc) rc = jinja_sb_put(c, sb, body.p + sign_len, body.len - sign_len);
    for (size_t k = left; k < fillc && !rc; k++) rc = jinja_sb_cpt(c, sb, fill);
    return rc;
}

static bool is_ident_start(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
}

int jinja_str_format(struct jinja_ctx *c, const struct jinja_val *fmt, const struct jinja_val *args,
                     size_t n_args, const struct jinja_sv *kw, const struct jinja_val *kwv,
                     size_t n_kw, int depth, struct jinja_sb *sb)
{
    const char *s = fmt->s;
    size_t len = fmt->len, auto_idx = 0;
    int numbering = 0; /* 1 auto, 2 manual */
    int rc = 0;
    if (depth > 2) return jinja_fail(c, ERR_INVAL, "Max string recursion exceeded");
    for (size_t i = 0; i < len && !rc;) {
        char ch = s[i];
        if (ch == '}') {
            if (i + 1 < len && s[i + 1] == '}') {
                rc = jinja_sb_putc(c, sb, '}');
                i += 2;
                continue;
            }
            return jinja_fail(c, ERR_INVAL, "Single '}' encountered in format string");
        }
        if (ch != '{') {
            rc = jinja_sb_putc(c, sb, ch);
            i++;
            continue;
        }
        if (i + 1 < len && s[i + 1] == '{') {
            rc = jinja_sb_putc(c, sb, '{');
            i += 2;
            continue;
        }
        /* the field up to its matching brace */
        size_t e = i + 1;
        int nest = 1;
        while (e < len && nest) {
            if (s[e] == '{')
                nest++;
            else if (s[e] == '}')
                nest--;
            if (nest) e++;
        }
        if (e >= len) return jinja_fail(c, ERR_INVAL, "expected '}' before end of string");
        const char *f = s + i + 1;
        size_t flen = e - i - 1, k = 0;
        while (k < flen && f[k] != '.' && f[k] != '[' && f[k] != '!' && f[k] != ':') k++;
        struct jinja_val v;
        if (k == 0) {
            if (numbering == 2)
                return jinja_fail(c, ERR_INVAL,
                                  "cannot switch from manual field specification to "
                                  "automatic field numbering");
            numbering = 1;
            if (auto_idx >= n_args)
                return jinja_fail(c, ERR_INVAL,
                                  "Replacement index %zu out of range for positional "
                                  "args tuple",
                                  auto_idx);
            v = args[auto_idx++];
        } else if (f[0] >= '0' && f[0] <= '9') {
            if (numbering == 1)
                return jinja_fail(c, ERR_INVAL,
                                  "cannot switch from automatic field numbering to "
                                  "manual field specification");
            numbering = 2;
            size_t idx = 0;
            for (size_t j = 0; j < k; j++) {
                if (f[j] < '0' || f[j] > '9' || idx > 1000000)
                    return jinja_fail(c, ERR_INVAL, "bad field name in format string");
                idx = idx * 10 + (size_t)(f[j] - '0');
            }
            if (idx >= n_args)
                return jinja_fail(c, ERR_INVAL,
                                  "Replacement index %zu out of range for positional "
                                  "args tuple",
                                  idx);
            v = args[idx];
        } else {
            size_t j = 0;
            while (j < n_kw && !(kw[j].len == k && memcmp(kw[j].p, f, k) == 0)) j++;
            if (j == n_kw) return jinja_fail(c, ERR_INVAL, "KeyError: '%.*s'", (int)k, f);
            v = kwv[j];
        }
        while (k < flen && (f[k] == '.' || f[k] == '[')) { /* .attr and [key] chains */
            if (f[k] == '.') {
                size_t a = ++k;
                while (k < flen && f[k] != '.' && f[k] != '[' && f[k] != '!' && f[k] != ':') k++;
                if (k == a || !is_ident_start(f[a]))
                    return jinja_fail(c, ERR_INVAL, "Empty attribute in format string");
                if ((rc = jinja_getattr(c, &v, (struct jinja_sv){f + a, (uint32_t)(k - a)}, &v)))
                    return rc;
            } else {
                size_t a = ++k;
                while (k < flen && f[k] != ']') k++;
                if (k >= flen) return jinja_fail(c, ERR_INVAL, "Missing ']' in format string");
                struct jinja_val key = jinja_str(f + a, k - a);
                bool digits = k > a;
                int64_t num = 0;
                for (size_t d = a; d < k && digits; d++)
                    digits =
                        f[d] >= '0' && f[d] <= '9' && (num = num * 10 + (f[d] - '0')) < 1000000000;
                if (digits) key = jinja_int(num);
                if ((rc = jinja_getitem(c, &v, &key, &v))) return rc;
                k++;
            }
        }
        char conv = 0;
        if (k < flen && f[k] == '!') {
            if (k + 1 >= flen)
                return jinja_fail(c, ERR_INVAL,
                                  "end of string while looking for conversion specifier");
            conv = f[k + 1];
            k += 2;
            if (conv != 's' && conv != 'r')
                return jinja_fail(c, ERR_UNSUPPORTED, "format conversion '!%c' is not supported",
                                  conv);
        }
        if (k < flen && f[k] != ':')
            return jinja_fail(c, ERR_INVAL, "expected ':' after conversion specifier");
        struct jinja_sb spec = {0};
        if (k < flen) { /* the spec may hold nested fields */
            struct jinja_val inner = jinja_str(f + k + 1, flen - k - 1);
            if ((rc = jinja_str_format(c, &inner, args, n_args, kw, kwv, n_kw, depth + 1, &spec)))
                return rc;
        }
        if (v.type == JV_UNDEF && (v.flags & JV_F_UNSAFE)) return jinja_fail_undef(c, &v);
        if (conv) {
            struct jinja_sb t = {0};
            if ((rc = conv == 's' ? jinja_to_str(c, &t, &v) : jinja_repr(c, &t, &v))) return rc;
            v = jinja_sb_val(&t);
        }
        rc = format_spec(c, sb, &v, spec.p ? spec.p : "", spec.len);
        i = e + 1;
    }
    return rc;
}
