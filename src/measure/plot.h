/* plot: small hand-written SVG charts for reports (benchmark figures, training loss curves, TABED weight
 * traces, MASSV TVD histograms).
 * Owns: one chart description (kind, title, axis labels, fixed ranges, its series with copies of their
 * data) and its rendering to a standalone SVG document (axes, 1-2-5 ticks, grid, legend, title).
 *
 * Three kinds, one series type:
 *   VS_PLOT_LINES  each series is n (x, y) points drawn as a polyline (and/or markers); NaN breaks a line.
 *                  The y axis may be logarithmic (loss curves).
 *   VS_PLOT_BARS   grouped bar chart: categories along x (vs_plot_categories), each series gives one value
 *                  per category; the bars of a category sit side by side in series order.
 *   VS_PLOT_HIST   each series is a list of samples binned into the same equal-width bins (vs_plot_bins,
 *                  default: 20 bins over all samples' range), drawn as translucent overlapping bars with a
 *                  step outline; counts or fractions (normalize).
 * Colours come from a fixed palette in series order. Axis ranges come from the data (extended to tick
 * multiples) unless fixed with vs_plot_xrange / vs_plot_yrange.
 *
 * Coordinates: after vs_plot_svg the data-to-pixel mapping used is available (vs_plot_get_frame), so
 * tests and callers can check or overlay positions: px = x0 + (x - xlo) / (xhi - xlo) * (x1 - x0),
 * py = y1 - (y - ylo) / (yhi - ylo) * (y1 - y0) (log10 of both sides on a log axis); numbers in the SVG
 * are written with two decimals. A plot is not thread-safe; separate plots are independent. */
#ifndef VS_PLOT_H
#define VS_PLOT_H

#include "common.h"

typedef enum vs_plot_kind {
    VS_PLOT_LINES = 0,
    VS_PLOT_BARS = 1,
    VS_PLOT_HIST = 2,
} vs_plot_kind;

/* Line series drawing style (bit flags; 0 means VS_PLOT_STYLE_LINE). */
enum { VS_PLOT_STYLE_LINE = 1, VS_PLOT_STYLE_MARKERS = 2 };

typedef struct vs_plot vs_plot;

vs_plot *vs_plot_new(vs_plot_kind kind, vs_error *err);
void vs_plot_free(vs_plot *p); /* NULL ok */

/* Text (copied; NULL clears). Setters fail only on out of memory (VS_ERR_NOMEM). */
vs_status vs_plot_title(vs_plot *p, const char *title, vs_error *err);
vs_status vs_plot_labels(vs_plot *p, const char *xlabel, const char *ylabel, vs_error *err);
/* Canvas size in pixels (default 640 x 400; at least 160 x 120). */
void vs_plot_size(vs_plot *p, int width, int height);
/* Fixed axis ranges (lo < hi); otherwise taken from the data. Ignored x range for bar charts. */
void vs_plot_xrange(vs_plot *p, double lo, double hi);
void vs_plot_yrange(vs_plot *p, double lo, double hi);
/* Logarithmic y axis (lines only; values <= 0 are skipped). */
void vs_plot_log_y(vs_plot *p, bool on);

/* LINES: a series of n points (x may be NULL: x = 0, 1, ..., n - 1). style: VS_PLOT_STYLE_* bits. */
vs_status vs_plot_line(vs_plot *p, const char *name, const double *x, const double *y, int64_t n, int style,
                       vs_error *err);
/* BARS: the category names (once, before or after the series); each series gives one value per category
 * (NaN: no bar). */
vs_status vs_plot_categories(vs_plot *p, const char *const *names, int n, vs_error *err);
vs_status vs_plot_bars(vs_plot *p, const char *name, const double *values, int n, vs_error *err);
/* HIST: bins over [lo, hi) with the last bin closed (n_bins >= 1); normalize: fractions of each series'
 * sample count instead of counts. Samples outside [lo, hi] and NaN are not counted. */
void vs_plot_bins(vs_plot *p, double lo, double hi, int n_bins, bool normalize);
vs_status vs_plot_hist(vs_plot *p, const char *name, const double *samples, int64_t n, vs_error *err);

/* Renders the SVG document (vs_malloc'd, NUL-terminated; *len may be NULL). VS_ERR_INVALID when the plot
 * has nothing to draw (no series, bar chart without categories or with a length mismatch). */
char *vs_plot_svg(vs_plot *p, size_t *len, vs_error *err);
vs_status vs_plot_write(vs_plot *p, const char *path, vs_error *err);

/* The mapping of the last render: plotting area (pixels, y grows downwards) and the axis ranges. */
typedef struct vs_plot_frame {
    double x0, y0, x1, y1; /* plot area: left, top, right, bottom */
    double xlo, xhi;       /* x axis range (bar charts: 0 .. n_categories, category i centred at i + 0.5) */
    double ylo, yhi;       /* y axis range (data units, also on a log axis) */
    bool log_y;
} vs_plot_frame;
/* False before the first successful render. */
bool vs_plot_get_frame(const vs_plot *p, vs_plot_frame *f);
double vs_plot_px_x(const vs_plot_frame *f, double x);
double vs_plot_px_y(const vs_plot_frame *f, double y);

/* Tick helper: "nice" ticks (1, 2 or 5 times a power of ten) for [lo, hi] with at most max_ticks
 * (>= 2) of them, extending the range to multiples of the step: *lo and *hi are updated, ticks[] gets the
 * values (cap entries at most), the return value is their number, *step the spacing. */
int vs_plot_nice_ticks(double *lo, double *hi, int max_ticks, double *ticks, int cap, double *step);

#endif
