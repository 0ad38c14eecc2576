/* Minimal PNG charts for the simulator: an 8-bit palette canvas, lines, rectangles and a 5x7
 * bitmap font, written as a PNG with stored (uncompressed) deflate blocks, so no zlib and no
 * runtime dependency. Not a general plotting library: three stacked time-series panels. */
#ifndef CINFER_AUTOSCALER_PLOT_H
#define CINFER_AUTOSCALER_PLOT_H

#include "autoscaler/sim/sim.h"

#include <stddef.h>
#include <stdint.h>

enum plot_color {
    PLOT_WHITE = 0,
    PLOT_BLACK,
    PLOT_GREY,
    PLOT_BLUE,
    PLOT_RED,
    PLOT_GREEN,
    PLOT_ORANGE,
    PLOT_N_COLORS
};

struct plot_canvas {
    int w, h;
    uint8_t *px; /* w*h palette indices, row-major */
};

/* Returns 0 or ERR_NOMEM / ERR_RANGE (w, h in [1, 8192]); the canvas starts white. */
int plot_canvas_init(struct plot_canvas *c, int w, int h);
void plot_canvas_fini(struct plot_canvas *c);
void plot_line(struct plot_canvas *c, int x0, int y0, int x1, int y1, enum plot_color col);
/* Upper-case letters, digits and . - / ( ) , : ; other characters draw as blanks. */
void plot_text(struct plot_canvas *c, int x, int y, const char *s, enum plot_color col);

/* Encodes the canvas as PNG into a new buffer (*out, *len; caller frees). Returns 0 or
 * ERR_NOMEM. */
int plot_png_encode(const struct plot_canvas *c, uint8_t **out, size_t *len);

/* Draws arrival rate, replicas (desired and ready) and interval TTFT p99 (with the objective)
 * against time from `r->samples` and writes the PNG to `path`. Returns 0, ERR_INVAL (no samples),
 * ERR_IO (message in err) or ERR_NOMEM. */
int plot_sim_png(const char *path, const struct sim_result *r, double slo_s, char *err,
                 size_t errlen);

struct frontier_point;

/* Draws the static frontier (`statics`, any order: the envelope as a line, every fleet as a dot
 * labelled with its replica count) and the policy points (`policies` with `names`, coloured
 * markers) as violations (%) against replica-seconds and writes the PNG to `path`. Returns 0,
 * ERR_INVAL (no static point), ERR_IO (message in err) or ERR_NOMEM. */
int plot_frontier_png(const char *path, const struct frontier_point *statics, size_t n_static,
                      const struct frontier_point *policies, const char *const *names,
                      size_t n_policies, const char *title, char *err, size_t errlen);

#endif
