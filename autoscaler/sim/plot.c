/* PNG encoding (RFC 2083: signature, IHDR, PLTE, IDAT holding the scanlines compressed by zlib,
 * IEND; zlib's CRC-32 per chunk) and the simulator's charts. */
#include "autoscaler/sim/plot.h"
#include "autoscaler/sim/frontier.h"

#include "common/err.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static const uint8_t palette[PLOT_N_COLORS][3] = {{255, 255, 255}, {0, 0, 0},     {215, 215, 215},
                                                  {31, 119, 180},  {214, 39, 40}, {44, 160, 44},
                                                  {255, 127, 14}};

int plot_canvas_init(struct plot_canvas *c, int w, int h)
{
    memset(c, 0, sizeof(*c));
    if (w < 1 || h < 1 || w > 8192 || h > 8192) return ERR_RANGE;
    c->px = calloc((size_t)w * (size_t)h, 1);
    if (!c->px) return ERR_NOMEM;
    c->w = w;
    c->h = h;
    return 0;
}

void plot_canvas_fini(struct plot_canvas *c)
{
    free(c->px);
    c->px = NULL;
}

static void put(struct plot_canvas *c, int x, int y, enum plot_color col)
{
    if (x >= 0 && y >= 0 && x < c->w && y < c->h)
        c->px[(size_t)y * (size_t)c->w + (size_t)x] = (uint8_t)col;
}

void plot_line(struct plot_canvas *c, int x0, int y0, int x1, int y1, enum plot_color col)
{
    int dx = abs(x1 - x0), dy = -abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    int e = dx + dy;
    for (int guard = 0; guard < 100000; guard++) { /* Bresenham */
        put(c, x0, y0, col);
        if (x0 == x1 && y0 == y1) break;
        int e2 = 2 * e;
        if (e2 >= dy) {
            e += dy;
            x0 += sx;
        }
        if (e2 <= dx) {
            e += dx;
            y0 += sy;
        }
    }
}

struct glyph {
    char ch;
    uint8_t rows[7];
};

static const struct glyph font[] = {
    {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}},
    {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}},
    {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}},
    {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}},
    {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
    {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}},
    {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}},
    {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
    {'.', {0, 0, 0, 0, 0, 0x0C, 0x0C}},
    {'-', {0, 0, 0, 0x1F, 0, 0, 0}},
    {'/', {0x01, 0x01, 0x02, 0x04, 0x08, 0x10, 0x10}},
    {'(', {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}},
    {')', {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}},
    {',', {0, 0, 0, 0, 0x0C, 0x04, 0x08}},
    {':', {0, 0x0C, 0x0C, 0, 0x0C, 0x0C, 0}},
    {';', {0, 0x0C, 0x0C, 0, 0x0C, 0x04, 0x08}},
    {'A', {0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}},
    {'B', {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E}},
    {'C', {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E}},
    {'D', {0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C}},
    {'E', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F}},
    {'F', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10}},
    {'G', {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F}},
    {'H', {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}},
    {'I', {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'J', {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C}},
    {'K', {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11}},
    {'L', {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F}},
    {'M', {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11}},
    {'N', {0x11, 0x19, 0x15, 0x13, 0x11, 0x11, 0x11}},
    {'O', {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}},
    {'P', {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10}},
    {'Q', {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D}},
    {'R', {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11}},
    {'S', {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E}},
    {'T', {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}},
    {'U', {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}},
    {'V', {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04}},
    {'W', {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A}},
    {'Z', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F}},
    {'Y', {0x11, 0x11, 0x0A, 0x04, 0x04, 0x04, 0x04}},
};

void plot_text(struct plot_canvas *c, int x, int y, const char *s, enum plot_color col)
{
    for (; *s; s++, x += 6) {
        for (size_t g = 0; g < sizeof(font) / sizeof(font[0]); g++) {
            if (font[g].ch != *s) continue;
            for (int r = 0; r < 7; r++)
                for (int b = 0; b < 5; b++)
                    if (font[g].rows[r] & (0x10 >> b)) put(c, x + b, y + r, col);
            break;
        }
    }
}

/* ---- PNG ---- */

struct out {
    uint8_t *p;
    size_t n;
};

static void be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* Appends a chunk; `o` was sized for everything in advance. */
static void chunk(struct out *o, const char *type, const uint8_t *data, size_t len)
{
    be32(o->p + o->n, (uint32_t)len);
    memcpy(o->p + o->n + 4, type, 4);
    if (len) memcpy(o->p + o->n + 8, data, len);
    uLong crc = crc32(0L, o->p + o->n + 4, (uInt)(len + 4));
    be32(o->p + o->n + 8 + len, (uint32_t)crc);
    o->n += len + 12;
}

int plot_png_encode(const struct plot_canvas *c, uint8_t **out, size_t *len)
{
    size_t row = (size_t)c->w + 1, raw_n = row * (size_t)c->h;
    uLongf zlen = compressBound((uLong)raw_n);
    uint8_t *raw = malloc(raw_n), *z = malloc(zlen);
    struct out o = {NULL, 0};
    int rc = ERR_NOMEM;
    if (!raw || !z) goto out;
    for (int y = 0; y < c->h; y++) {
        raw[(size_t)y * row] = 0; /* filter: none (palette images compress well without) */
        memcpy(raw + (size_t)y * row + 1, c->px + (size_t)y * (size_t)c->w, (size_t)c->w);
    }
    int zrc = compress2(z, &zlen, raw, (uLong)raw_n, Z_BEST_COMPRESSION);
    if (zrc != Z_OK) {
        rc = zrc == Z_MEM_ERROR ? ERR_NOMEM : ERR_INTERNAL;
        goto out;
    }
    size_t total = 8 + (12 + 13) + (12 + 3 * PLOT_N_COLORS) + (12 + zlen) + 12;
    if (!(o.p = malloc(total))) goto out;
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    memcpy(o.p, sig, 8);
    o.n = 8;
    uint8_t ihdr[13];
    be32(ihdr, (uint32_t)c->w);
    be32(ihdr + 4, (uint32_t)c->h);
    ihdr[8] = 8;  /* bit depth */
    ihdr[9] = 3;  /* palette */
    ihdr[10] = 0; /* deflate */
    ihdr[11] = 0; /* adaptive filtering */
    ihdr[12] = 0; /* no interlace */
    chunk(&o, "IHDR", ihdr, sizeof(ihdr));
    chunk(&o, "PLTE", &palette[0][0], sizeof(palette));
    chunk(&o, "IDAT", z, zlen);
    chunk(&o, "IEND", NULL, 0);
    *out = o.p;
    *len = o.n;
    o.p = NULL;
    rc = 0;
out:
    free(raw);
    free(z);
    free(o.p);
    return rc;
}

/* ---- the simulator chart ---- */

struct panel {
    int x0, y0, w, h;
    double tmax, ymax;
};

static int px_x(const struct panel *p, double t)
{
    return p->x0 + (int)lround(t / p->tmax * (p->w - 1));
}

static int px_y(const struct panel *p, double v)
{
    if (v > p->ymax) v = p->ymax;
    if (v < 0) v = 0;
    return p->y0 + p->h - 1 - (int)lround(v / p->ymax * (p->h - 1));
}

/* A "nice" axis maximum: 1, 2 or 5 x 10^k at or above v. */
static double nice_max(double v)
{
    if (!(v > 0)) return 1;
    double e = pow(10, floor(log10(v)));
    double m = v / e;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * e;
}

static void frame(struct plot_canvas *c, const struct panel *p, const char *title)
{
    for (int k = 1; k < 4; k++) { /* grid at quarters */
        int y = p->y0 + k * p->h / 4;
        plot_line(c, p->x0, y, p->x0 + p->w - 1, y, PLOT_GREY);
    }
    plot_line(c, p->x0, p->y0, p->x0, p->y0 + p->h - 1, PLOT_BLACK);
    plot_line(c, p->x0, p->y0 + p->h - 1, p->x0 + p->w - 1, p->y0 + p->h - 1, PLOT_BLACK);
    char lab[32];
    snprintf(lab, sizeof(lab), "%.4g", p->ymax);
    plot_text(c, p->x0 - 6 * (int)strlen(lab) - 4, p->y0, lab, PLOT_BLACK);
    plot_text(c, p->x0 - 10, p->y0 + p->h - 8, "0", PLOT_BLACK);
    plot_text(c, p->x0 + 4, p->y0 - 10, title, PLOT_BLACK);
}

typedef double (*sample_value)(const struct sim_sample *s);
static double v_load(const struct sim_sample *s)
{
    return s->arrival_rps;
}
static double v_replicas(const struct sim_sample *s)
{
    return s->replicas;
}
static double v_ready(const struct sim_sample *s)
{
    return s->ready;
}
static double v_ttft(const struct sim_sample *s)
{
    return s->ttft_p99_s;
}
static double v_forecast(const struct sim_sample *s)
{
    return s->forecast_rps > 0 ? s->forecast_rps : -1;
}

static void series(struct plot_canvas *c, const struct panel *p, const struct sim_result *r,
                   sample_value f, enum plot_color col, bool steps)
{
    int px = -1, py = -1;
    for (size_t i = 0; i < r->n_samples; i++) {
        double v = f(&r->samples[i]);
        if (v < 0) { /* no data in this interval: break the line */
            px = -1;
            continue;
        }
        int x = px_x(p, r->samples[i].t_s), y = px_y(p, v);
        if (px >= 0) {
            if (steps) {
                plot_line(c, px, py, x, py, col);
                plot_line(c, x, py, x, y, col);
            } else {
                plot_line(c, px, py, x, y, col);
            }
        }
        px = x;
        py = y;
    }
}

/* Encodes `c` and writes it to `path`. Returns 0, ERR_IO (message in err) or ERR_NOMEM. */
static int write_png(const char *path, const struct plot_canvas *c, char *err, size_t errlen)
{
    uint8_t *png = NULL;
    size_t len = 0;
    int rc = plot_png_encode(c, &png, &len);
    if (rc) return rc;
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(png, 1, len, f) == len;
    if (f && fclose(f) != 0) ok = false;
    if (!ok) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        rc = ERR_IO;
    }
    free(png);
    return rc;
}

int plot_sim_png(const char *path, const struct sim_result *r, double slo_s, char *err,
                 size_t errlen)
{
    if (!r->n_samples) {
        snprintf(err, errlen, "no samples to plot");
        return ERR_INVAL;
    }
    struct plot_canvas c;
    int rc = plot_canvas_init(&c, 960, 720);
    if (rc) goto out;
    double tmax = r->samples[r->n_samples - 1].t_s, lmax = 0, rmax = 0, ymax = slo_s * 2;
    for (size_t i = 0; i < r->n_samples; i++) {
        lmax = fmax(lmax, fmax(r->samples[i].arrival_rps, r->samples[i].forecast_rps));
        rmax = fmax(rmax, r->samples[i].replicas);
        ymax = fmax(ymax, fmin(r->samples[i].ttft_p99_s, slo_s * 10));
    }
    if (!(tmax > 0)) tmax = 1;
    const int left = 70, width = 960 - left - 20, ph = 190;
    struct panel load = {left, 30, width, ph, tmax, nice_max(lmax)};
    struct panel reps = {left, 260, width, ph, tmax, nice_max(rmax + 1)};
    struct panel ttft = {left, 490, width, ph, tmax, nice_max(ymax)};
    frame(&c, &load, "ARRIVALS (REQ/S, ORANGE); FORECAST AT THE HORIZON (BLUE)");
    frame(&c, &reps, "REPLICAS: DESIRED (BLUE), READY (GREEN)");
    frame(&c, &ttft, "TTFT P99 PER INTERVAL (S); OBJECTIVE (RED)");
    series(&c, &load, r, v_load, PLOT_ORANGE, false);
    series(&c, &load, r, v_forecast, PLOT_BLUE, false);
    series(&c, &reps, r, v_ready, PLOT_GREEN, true);
    series(&c, &reps, r, v_replicas, PLOT_BLUE, true);
    int ys = px_y(&ttft, slo_s);
    plot_line(&c, ttft.x0, ys, ttft.x0 + ttft.w - 1, ys, PLOT_RED);
    series(&c, &ttft, r, v_ttft, PLOT_BLUE, false);
    char lab[64];
    snprintf(lab, sizeof(lab), "TIME (S), 0 - %.0f", tmax);
    plot_text(&c, left + width / 2 - 60, 700, lab, PLOT_BLACK);
    rc = write_png(path, &c, err, errlen);
out:
    plot_canvas_fini(&c);
    return rc;
}

/* A filled square marker centred on (x, y). */
static void marker(struct plot_canvas *c, int x, int y, int r, enum plot_color col)
{
    for (int d = -r; d <= r; d++) plot_line(c, x - r, y + d, x + r, y + d, col);
}

int plot_frontier_png(const char *path, const struct frontier_point *statics, size_t n_static,
                      const struct frontier_point *policies, const char *const *names,
                      size_t n_policies, const char *title, char *err, size_t errlen)
{
    if (n_static == 0) {
        snprintf(err, errlen, "no static fleets to plot");
        return ERR_INVAL;
    }
    struct frontier_point *env = malloc(n_static * sizeof(*env));
    struct plot_canvas c = {0};
    int rc = ERR_NOMEM;
    if (!env) goto out;
    memcpy(env, statics, n_static * sizeof(*env));
    size_t k = frontier_envelope(env, n_static);
    if ((rc = plot_canvas_init(&c, 960, 600)) != 0) goto out;
    double xmax = 0, ymax = 0;
    for (size_t i = 0; i < n_policies; i++) {
        xmax = fmax(xmax, policies[i].replica_seconds);
        ymax = fmax(ymax, policies[i].violations);
    }
    /* The interesting part: up to 4x the worst policy point or 1%, not a 1-replica fleet's 99%. */
    ymax = fmax(0.01, fmin(1, ymax * 4 + 0.002));
    for (size_t i = 0; i < n_static; i++)
        if (statics[i].violations <= ymax) xmax = fmax(xmax, statics[i].replica_seconds);
    struct panel p = {
        80, 40, 960 - 80 - 30, 600 - 40 - 70, ceil(xmax * 1.1 / 1000) * 1000, nice_max(ymax * 100)};
    frame(&c, &p, title ? title : "VIOLATIONS (PERCENT OF REQUESTS) AGAINST REPLICA-SECONDS");
    int px = -1, py = -1;
    for (size_t i = 0; i < k; i++) { /* the envelope */
        int x = px_x(&p, env[i].replica_seconds), y = px_y(&p, env[i].violations * 100);
        if (px >= 0) plot_line(&c, px, py, x, y, PLOT_BLACK);
        px = x;
        py = y;
    }
    for (size_t i = 0; i < n_static; i++) {
        int x = px_x(&p, statics[i].replica_seconds), y = px_y(&p, statics[i].violations * 100);
        marker(&c, x, y, 2, PLOT_BLACK);
        if (statics[i].violations * 100 <= p.ymax) {
            char lab[16];
            snprintf(lab, sizeof(lab), "%d", statics[i].replicas);
            plot_text(&c, x + 3, y - 10, lab, PLOT_GREY);
        }
    }
    static const enum plot_color cols[] = {PLOT_RED, PLOT_BLUE, PLOT_GREEN, PLOT_ORANGE};
    for (size_t i = 0; i < n_policies; i++) {
        enum plot_color col = cols[i % 4];
        int x = px_x(&p, policies[i].replica_seconds), y = px_y(&p, policies[i].violations * 100);
        marker(&c, x, y, 4, col);
        plot_text(&c, p.x0 + 10, p.y0 + 10 + 12 * (int)i, names ? names[i] : "", col);
    }
    char lab[80];
    snprintf(lab, sizeof(lab), "REPLICA-SECONDS, 0 - %.0f; STATIC FLEETS (BLACK, LABEL: REPLICAS)",
             p.tmax);
    plot_text(&c, p.x0 + 40, 600 - 30, lab, PLOT_BLACK);
    rc = write_png(path, &c, err, errlen);
out:
    free(env);
    plot_canvas_fini(&c);
    return rc;
}
