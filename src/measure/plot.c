/* plot: small hand-written SVG charts. See plot.h. */
#include "plot.h"
#include "outfile.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TICKS 64

typedef struct series {
    char *name;
    double *x, *y; /* LINES: [n] points; BARS: y = [n] values; HIST: y = [n] samples */
    int64_t n;
    int style;
} series;

struct vs_plot {
    vs_plot_kind kind;
    char *title, *xlabel, *ylabel;
    int width, height;
    bool fix_x, fix_y, log_y;
    double fxlo, fxhi, fylo, fyhi;
    series *s;
    int n_series, cap_series;
    char **cats;
    int n_cats;
    bool bins_set, normalize;
    double blo, bhi;
    int n_bins;
    bool have_frame;
    vs_plot_frame frame;
};

/* Okabe-Ito-like qualitative palette (distinguishable, also in grey). */
static const char *const palette[] = {"#0072b2", "#e69f00", "#009e73", "#d55e00", "#cc79a7",
                                      "#56b4e9", "#f0e442", "#000000", "#999999", "#8c564b"};

/* ------------------------------------------------------------------------------------------------
 * A growing text buffer */

typedef struct sbuf {
    char *buf;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_reserve(sbuf *b, size_t more) {
    if (b->oom || b->len + more + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more + 1) cap *= 2;
    char *nb = vs_realloc(b->buf, cap);
    if (!nb) {
        b->oom = true;
        return;
    }
    b->buf = nb, b->cap = cap;
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    sb_reserve(b, (size_t)n);
    if (b->oom) return;
    va_start(ap, fmt);
    vsnprintf(b->buf + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* XML-escaped text. */
static void sb_text(sbuf *b, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '&': sb_printf(b, "&amp;"); break;
        case '<': sb_printf(b, "&lt;"); break;
        case '>': sb_printf(b, "&gt;"); break;
        case '"': sb_printf(b, "&quot;"); break;
        default:
            if ((unsigned char)*s < 0x20) break; /* control characters are not allowed in XML 1.0 */
            sb_reserve(b, 1);
            if (!b->oom) b->buf[b->len++] = *s, b->buf[b->len] = 0;
        }
    }
}

/* ------------------------------------------------------------------------------------------------
 * Construction */

vs_plot *vs_plot_new(vs_plot_kind kind, vs_error *err) {
    if (kind != VS_PLOT_LINES && kind != VS_PLOT_BARS && kind != VS_PLOT_HIST) {
        vs_error_set(err, VS_ERR_INVALID, "plot: unknown kind %d", (int)kind);
        return NULL;
    }
    vs_plot *p = vs_calloc(1, sizeof(*p));
    if (!p) {
        vs_error_set(err, VS_ERR_NOMEM, "plot: out of memory");
        return NULL;
    }
    p->kind = kind;
    p->width = 640, p->height = 400;
    p->n_bins = 20;
    return p;
}

void vs_plot_free(vs_plot *p) {
    if (!p) return;
    for (int i = 0; i < p->n_series; i++) {
        vs_free(p->s[i].name);
        vs_free(p->s[i].x);
        vs_free(p->s[i].y);
    }
    vs_free(p->s);
    for (int i = 0; i < p->n_cats; i++) vs_free(p->cats[i]);
    vs_free(p->cats);
    vs_free(p->title);
    vs_free(p->xlabel);
    vs_free(p->ylabel);
    vs_free(p);
}

static vs_status set_str(char **dst, const char *s, vs_error *err) {
    char *c = NULL;
    if (s && !(c = vs_strdup(s))) return vs_error_set(err, VS_ERR_NOMEM, "plot: out of memory");
    vs_free(*dst);
    *dst = c;
    return VS_OK;
}

vs_status vs_plot_title(vs_plot *p, const char *title, vs_error *err) {
    return set_str(&p->title, title, err);
}

vs_status vs_plot_labels(vs_plot *p, const char *xlabel, const char *ylabel, vs_error *err) {
    vs_status st = set_str(&p->xlabel, xlabel, err);
    return st ? st : set_str(&p->ylabel, ylabel, err);
}

void vs_plot_size(vs_plot *p, int width, int height) {
    p->width = VS_MAX(width, 160);
    p->height = VS_MAX(height, 120);
}

void vs_plot_xrange(vs_plot *p, double lo, double hi) {
    if (!(hi > lo) || !isfinite(lo) || !isfinite(hi)) return;
    p->fix_x = true, p->fxlo = lo, p->fxhi = hi;
}

void vs_plot_yrange(vs_plot *p, double lo, double hi) {
    if (!(hi > lo) || !isfinite(lo) || !isfinite(hi)) return;
    p->fix_y = true, p->fylo = lo, p->fyhi = hi;
}

void vs_plot_log_y(vs_plot *p, bool on) { p->log_y = on; }

static vs_status add_series(vs_plot *p, const char *name, const double *x, const double *y, int64_t n,
                            int style, vs_error *err) {
    if (n < 0 || (n > 0 && !y))
        return vs_error_set(err, VS_ERR_INVALID, "plot: series '%s' without data", name ? name : "");
    if (p->n_series == p->cap_series) {
        int cap = p->cap_series ? 2 * p->cap_series : 8;
        series *ns = vs_realloc(p->s, sizeof(*ns) * (size_t)cap);
        if (!ns) return vs_error_set(err, VS_ERR_NOMEM, "plot: out of memory");
        p->s = ns, p->cap_series = cap;
    }
    series s = {.n = n, .style = style ? style : VS_PLOT_STYLE_LINE};
    size_t bytes = sizeof(double) * (size_t)VS_MAX(n, 1);
    s.name = vs_strdup(name ? name : "");
    s.y = vs_malloc(bytes);
    if (x) s.x = vs_malloc(bytes);
    if (!s.name || !s.y || (x && !s.x)) {
        vs_free(s.name), vs_free(s.y), vs_free(s.x);
        return vs_error_set(err, VS_ERR_NOMEM, "plot: out of memory");
    }
    if (n > 0) {
        memcpy(s.y, y, sizeof(double) * (size_t)n);
        if (x) memcpy(s.x, x, sizeof(double) * (size_t)n);
    }
    p->s[p->n_series++] = s;
    return VS_OK;
}

vs_status vs_plot_line(vs_plot *p, const char *name, const double *x, const double *y, int64_t n, int style,
                       vs_error *err) {
    if (p->kind != VS_PLOT_LINES)
        return vs_error_set(err, VS_ERR_INVALID, "plot: line series on a non-line plot");
    return add_series(p, name, x, y, n, style, err);
}

vs_status vs_plot_categories(vs_plot *p, const char *const *names, int n, vs_error *err) {
    if (p->kind != VS_PLOT_BARS)
        return vs_error_set(err, VS_ERR_INVALID, "plot: categories on a non-bar plot");
    if (n < 1 || !names) return vs_error_set(err, VS_ERR_INVALID, "plot: %d categories", n);
    char **c = vs_calloc((size_t)n, sizeof(char *));
    if (!c) return vs_error_set(err, VS_ERR_NOMEM, "plot: out of memory");
    for (int i = 0; i < n; i++) {
        if (!(c[i] = vs_strdup(names[i] ? names[i] : ""))) {
            for (int j = 0; j < i; j++) vs_free(c[j]);
            vs_free(c);
            return vs_error_set(err, VS_ERR_NOMEM, "plot: out of memory");
        }
    }
    for (int i = 0; i < p->n_cats; i++) vs_free(p->cats[i]);
    vs_free(p->cats);
    p->cats = c, p->n_cats = n;
    return VS_OK;
}

vs_status vs_plot_bars(vs_plot *p, const char *name, const double *values, int n, vs_error *err) {
    if (p->kind != VS_PLOT_BARS)
        return vs_error_set(err, VS_ERR_INVALID, "plot: bar series on a non-bar plot");
    return add_series(p, name, NULL, values, n, 0, err);
}

void vs_plot_bins(vs_plot *p, double lo, double hi, int n_bins, bool normalize) {
    p->normalize = normalize;
    if (!(hi > lo) || !isfinite(lo) || !isfinite(hi) || n_bins < 1) return;
    p->bins_set = true, p->blo = lo, p->bhi = hi, p->n_bins = n_bins;
}

vs_status vs_plot_hist(vs_plot *p, const char *name, const double *samples, int64_t n, vs_error *err) {
    if (p->kind != VS_PLOT_HIST)
        return vs_error_set(err, VS_ERR_INVALID, "plot: histogram series on a non-histogram plot");
    return add_series(p, name, NULL, samples, n, 0, err);
}

/* ------------------------------------------------------------------------------------------------
 * Ticks and mapping */

int vs_plot_nice_ticks(double *lo, double *hi, int max_ticks, double *ticks, int cap, double *step) {
    double a = *lo, b = *hi;
    if (!isfinite(a) || !isfinite(b)) a = 0, b = 1;
    if (a > b) {
        double t = a;
        a = b, b = t;
    }
    if (b == a) {
        double d = a == 0 ? 1 : fabs(a) * 0.5;
        a -= d, b += d;
    }
    if (max_ticks < 2) max_ticks = 2;
    double raw = (b - a) / (max_ticks - 1);
    double mag = pow(10, floor(log10(raw)));
    static const double mult[] = {1, 2, 5, 10, 20};
    double st = mag * 10;
    for (size_t i = 0; i < VS_ARRAY_LEN(mult); i++) {
        double s = mag * mult[i];
        double nlo = floor(a / s + 1e-9), nhi = ceil(b / s - 1e-9);
        if (nhi - nlo + 1 <= max_ticks) {
            st = s;
            break;
        }
    }
    double nlo = floor(a / st + 1e-9), nhi = ceil(b / st - 1e-9);
    *lo = nlo * st, *hi = nhi * st;
    if (step) *step = st;
    int n = (int)llround(nhi - nlo) + 1;
    for (int i = 0; i < n && i < cap; i++) {
        double t = (nlo + i) * st;
        if (fabs(t) < st * 1e-9) t = 0;
        ticks[i] = t;
    }
    return VS_MIN(n, cap);
}

double vs_plot_px_x(const vs_plot_frame *f, double x) {
    return f->x0 + (x - f->xlo) / (f->xhi - f->xlo) * (f->x1 - f->x0);
}

double vs_plot_px_y(const vs_plot_frame *f, double y) {
    double t;
    if (f->log_y)
        t = (log10(y) - log10(f->ylo)) / (log10(f->yhi) - log10(f->ylo));
    else
        t = (y - f->ylo) / (f->yhi - f->ylo);
    return f->y1 - t * (f->y1 - f->y0);
}

bool vs_plot_get_frame(const vs_plot *p, vs_plot_frame *f) {
    if (!p->have_frame) return false;
    *f = p->frame;
    return true;
}

/* Label of a tick value given the tick spacing: enough decimals to tell ticks apart. */
static void fmt_tick(char *buf, size_t cap, double v, double step) {
    if (fabs(v) >= 1e6 || (v != 0 && fabs(v) < 1e-4)) {
        snprintf(buf, cap, "%.3g", v);
        return;
    }
    int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (dec > 6) dec = 6;
    snprintf(buf, cap, "%.*f", dec, v);
}

/* Ticks of a fixed range: the nice ticks of a copy, kept when inside [lo, hi]. */
static int fixed_ticks(double lo, double hi, int max_ticks, double *ticks, double *step) {
    double a = lo, b = hi, t[MAX_TICKS];
    int n = vs_plot_nice_ticks(&a, &b, max_ticks, t, MAX_TICKS, step), k = 0;
    double eps = (hi - lo) * 1e-9;
    for (int i = 0; i < n; i++)
        if (t[i] >= lo - eps && t[i] <= hi + eps) ticks[k++] = t[i];
    return k;
}

/* Decade ticks of a log axis over [lo, hi] (both > 0), widened to powers of ten; 2 and 5 multiples
 * too when the range spans fewer than three decades. */
static int log_ticks(double *lo, double *hi, double *ticks, bool fixed) {
    double e0 = floor(log10(*lo) + 1e-9), e1 = ceil(log10(*hi) - 1e-9);
    if (e1 <= e0) e1 = e0 + 1;
    if (!fixed) *lo = pow(10, e0), *hi = pow(10, e1);
    bool fine = e1 - e0 < 3;
    int n = 0;
    for (double e = e0; e <= e1 && n < MAX_TICKS - 3; e++) {
        static const double m[] = {1, 2, 5};
        for (int j = 0; j < (fine ? 3 : 1); j++) {
            double v = m[j] * pow(10, e);
            if (v >= *lo * (1 - 1e-9) && v <= *hi * (1 + 1e-9)) ticks[n++] = v;
        }
    }
    return n;
}

/* ------------------------------------------------------------------------------------------------
 * Rendering */

/* Per-series histogram counts over the plot's bins. */
static void hist_counts(const vs_plot *p, const series *s, double lo, double hi, int nb, double *out) {
    for (int b = 0; b < nb; b++) out[b] = 0;
    int64_t total = 0;
    for (int64_t i = 0; i < s->n; i++) {
        double v = s->y[i];
        if (!(v >= lo && v <= hi)) continue;
        int b = (int)floor((v - lo) / (hi - lo) * nb);
        if (b >= nb) b = nb - 1;
        if (b < 0) b = 0;
        out[b] += 1;
        total++;
    }
    if (p->normalize && total > 0)
        for (int b = 0; b < nb; b++) out[b] /= (double)total;
}

static double text_w(const char *s, double px_per_char) { return s ? (double)strlen(s) * px_per_char : 0; }

char *vs_plot_svg(vs_plot *p, size_t *len, vs_error *err) {
    p->have_frame = false;
    if (p->n_series == 0) {
        vs_error_set(err, VS_ERR_INVALID, "plot '%s': no series", p->title ? p->title : "");
        return NULL;
    }
    const bool lines = p->kind == VS_PLOT_LINES, bars = p->kind == VS_PLOT_BARS,
               hist = p->kind == VS_PLOT_HIST;
    const bool logy = lines && p->log_y;
    if (bars) {
        if (p->n_cats < 1) {
            vs_error_set(err, VS_ERR_INVALID, "plot '%s': bar chart without categories",
                         p->title ? p->title : "");
            return NULL;
        }
        for (int i = 0; i < p->n_series; i++)
            if (p->s[i].n != p->n_cats) {
                vs_error_set(err, VS_ERR_INVALID, "plot '%s': series '%s' has %lld values for %d categories",
                             p->title ? p->title : "", p->s[i].name, (long long)p->s[i].n, p->n_cats);
                return NULL;
            }
    }

    /* data ranges */
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    int nb = p->n_bins;
    double blo = p->blo, bhi = p->bhi;
    double *counts = NULL; /* HIST: [n_series][nb] */
    if (hist) {
        if (!p->bins_set) {
            blo = INFINITY, bhi = -INFINITY;
            for (int i = 0; i < p->n_series; i++)
                for (int64_t j = 0; j < p->s[i].n; j++)
                    if (isfinite(p->s[i].y[j]))
                        blo = VS_MIN(blo, p->s[i].y[j]), bhi = VS_MAX(bhi, p->s[i].y[j]);
            if (!isfinite(blo)) blo = 0, bhi = 1;
            if (bhi <= blo) blo -= 0.5, bhi += 0.5;
        }
        counts = vs_malloc(sizeof(double) * (size_t)p->n_series * (size_t)nb);
        if (!counts) {
            vs_error_set(err, VS_ERR_NOMEM, "plot: out of memory");
            return NULL;
        }
        ymin = 0, ymax = 0;
        for (int i = 0; i < p->n_series; i++) {
            hist_counts(p, &p->s[i], blo, bhi, nb, counts + (size_t)i * nb);
            for (int b = 0; b < nb; b++) ymax = VS_MAX(ymax, counts[(size_t)i * nb + b]);
        }
        xmin = blo, xmax = bhi;
    } else {
        for (int i = 0; i < p->n_series; i++) {
            const series *s = &p->s[i];
            for (int64_t j = 0; j < s->n; j++) {
                double x = s->x ? s->x[j] : (double)j, y = s->y[j];
                if (!isfinite(x) || !isfinite(y) || (logy && y <= 0)) continue;
                xmin = VS_MIN(xmin, x), xmax = VS_MAX(xmax, x);
                ymin = VS_MIN(ymin, y), ymax = VS_MAX(ymax, y);
            }
        }
        if (!isfinite(ymin)) {
            if (!p->fix_y) {
                vs_error_set(err, VS_ERR_INVALID, "plot '%s': no finite values to draw",
                             p->title ? p->title : "");
                return NULL;
            }
            xmin = 0, xmax = 1, ymin = p->fylo, ymax = p->fyhi;
        }
        if (bars) ymin = VS_MIN(ymin, 0), ymax = VS_MAX(ymax, 0);
    }

    /* axes */
    vs_plot_frame f = {.log_y = logy};
    double xt[MAX_TICKS], yt[MAX_TICKS], xstep = 1, ystep = 1;
    int nxt = 0, nyt;
    if (bars) {
        f.xlo = 0, f.xhi = p->n_cats;
    } else if (p->fix_x) {
        f.xlo = p->fxlo, f.xhi = p->fxhi;
        nxt = fixed_ticks(f.xlo, f.xhi, 8, xt, &xstep);
    } else if (hist) {
        f.xlo = blo, f.xhi = bhi;
        nxt = fixed_ticks(f.xlo, f.xhi, 8, xt, &xstep);
    } else {
        f.xlo = xmin, f.xhi = xmax;
        nxt = vs_plot_nice_ticks(&f.xlo, &f.xhi, 8, xt, MAX_TICKS, &xstep);
    }
    if (logy) {
        f.ylo = p->fix_y && p->fylo > 0 ? p->fylo : ymin;
        f.yhi = p->fix_y && p->fylo > 0 ? p->fyhi : ymax;
        nyt = log_ticks(&f.ylo, &f.yhi, yt, p->fix_y && p->fylo > 0);
    } else if (p->fix_y) {
        f.ylo = p->fylo, f.yhi = p->fyhi;
        nyt = fixed_ticks(f.ylo, f.yhi, 7, yt, &ystep);
    } else {
        f.ylo = ymin, f.yhi = ymax;
        nyt = vs_plot_nice_ticks(&f.ylo, &f.yhi, 7, yt, MAX_TICKS, &ystep);
    }

    /* layout */
    const double cw = 7.0; /* approximate width of a 12 px sans-serif character */
    char lab[64];
    double ytw = 0;
    for (int i = 0; i < nyt; i++) {
        if (logy)
            snprintf(lab, sizeof(lab), "%g", yt[i]);
        else
            fmt_tick(lab, sizeof(lab), yt[i], ystep);
        ytw = VS_MAX(ytw, text_w(lab, cw));
    }
    bool legend = p->n_series > 1;
    double legw = 0;
    for (int i = 0; legend && i < p->n_series; i++) legw = VS_MAX(legw, text_w(p->s[i].name, cw) + 26);
    legw = VS_MIN(legw, p->width * 0.35);
    bool rotate = false;
    if (bars) {
        double lw = 0;
        for (int i = 0; i < p->n_cats; i++) lw += text_w(p->cats[i], cw) + 8;
        rotate = lw > p->width - ytw - legw - 60;
    }
    double catdrop = 0;
    for (int i = 0; rotate && i < p->n_cats; i++) catdrop = VS_MAX(catdrop, text_w(p->cats[i], cw) * 0.6);
    f.x0 = 12 + (p->ylabel ? 20 : 0) + ytw + 6;
    f.x1 = p->width - 16 - (legend ? legw + 8 : 0);
    f.y0 = p->title ? 36 : 14;
    f.y1 = p->height - 26 - (p->xlabel ? 18 : 0) - catdrop;
    if (f.x1 - f.x0 < 40 || f.y1 - f.y0 < 40) {
        vs_free(counts);
        vs_error_set(err, VS_ERR_INVALID, "plot '%s': canvas %d x %d too small for its labels",
                     p->title ? p->title : "", p->width, p->height);
        return NULL;
    }

    sbuf b = {0};
    sb_printf(&b,
              "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
              "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
              "font-family=\"sans-serif\" font-size=\"12\">\n",
              p->width, p->height, p->width, p->height);
    sb_printf(&b, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"white\"/>\n", p->width, p->height);
    sb_printf(&b,
              "<defs><clipPath id=\"area\"><rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" "
              "height=\"%.2f\"/></clipPath></defs>\n",
              f.x0, f.y0, f.x1 - f.x0, f.y1 - f.y0);
    if (p->title) {
        sb_printf(&b,
                  "<text x=\"%.2f\" y=\"22\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">",
                  0.5 * p->width);
        sb_text(&b, p->title);
        sb_printf(&b, "</text>\n");
    }

    /* grid and y ticks */
    sb_printf(&b, "<g class=\"yaxis\">\n");
    for (int i = 0; i < nyt; i++) {
        double y = vs_plot_px_y(&f, yt[i]);
        if (logy)
            snprintf(lab, sizeof(lab), "%g", yt[i]);
        else
            fmt_tick(lab, sizeof(lab), yt[i], ystep);
        sb_printf(&b, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#e0e0e0\"/>", f.x0, y,
                  f.x1, y);
        sb_printf(&b, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\">%s</text>\n", f.x0 - 5, y + 4, lab);
    }
    sb_printf(&b, "</g>\n<g class=\"xaxis\">\n");
    if (bars) {
        double slot = (f.x1 - f.x0) / p->n_cats;
        for (int i = 0; i < p->n_cats; i++) {
            double x = f.x0 + (i + 0.5) * slot;
            if (rotate)
                sb_printf(
                    &b,
                    "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\" transform=\"rotate(-35 %.2f %.2f)\">", x,
                    f.y1 + 14, x, f.y1 + 14);
            else
                sb_printf(&b, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">", x, f.y1 + 16);
            sb_text(&b, p->cats[i]);
            sb_printf(&b, "</text>\n");
        }
    } else {
        for (int i = 0; i < nxt; i++) {
            double x = vs_plot_px_x(&f, xt[i]);
            fmt_tick(lab, sizeof(lab), xt[i], xstep);
            sb_printf(&b, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#000\"/>", x, f.y1,
                      x, f.y1 + 4);
            sb_printf(&b, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">%s</text>\n", x, f.y1 + 16,
                      lab);
        }
    }
    sb_printf(&b, "</g>\n");
    if (p->xlabel) {
        sb_printf(&b, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">", 0.5 * (f.x0 + f.x1),
                  (double)p->height - 8);
        sb_text(&b, p->xlabel);
        sb_printf(&b, "</text>\n");
    }
    if (p->ylabel) {
        double cy = 0.5 * (f.y0 + f.y1);
        sb_printf(&b, "<text x=\"16\" y=\"%.2f\" text-anchor=\"middle\" transform=\"rotate(-90 16 %.2f)\">",
                  cy, cy);
        sb_text(&b, p->ylabel);
        sb_printf(&b, "</text>\n");
    }

    /* data */
    sb_printf(&b, "<g class=\"data\" clip-path=\"url(#area)\">\n");
    if (lines) {
        for (int i = 0; i < p->n_series; i++) {
            const series *s = &p->s[i];
            const char *col = palette[i % VS_ARRAY_LEN(palette)];
            if (s->style & VS_PLOT_STYLE_LINE) {
                bool open = false;
                for (int64_t j = 0; j < s->n; j++) {
                    double x = s->x ? s->x[j] : (double)j, y = s->y[j];
                    bool ok = isfinite(x) && isfinite(y) && (!logy || y > 0);
                    if (!ok) {
                        if (open) sb_printf(&b, "\"/>\n"), open = false;
                        continue;
                    }
                    if (!open)
                        sb_printf(&b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\" points=\"",
                                  col),
                            open = true;
                    else
                        sb_printf(&b, " ");
                    sb_printf(&b, "%.2f,%.2f", vs_plot_px_x(&f, x), vs_plot_px_y(&f, y));
                }
                if (open) sb_printf(&b, "\"/>\n");
            }
            if (s->style & VS_PLOT_STYLE_MARKERS) {
                for (int64_t j = 0; j < s->n; j++) {
                    double x = s->x ? s->x[j] : (double)j, y = s->y[j];
                    if (!isfinite(x) || !isfinite(y) || (logy && y <= 0)) continue;
                    sb_printf(&b, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\" fill=\"%s\"/>\n",
                              vs_plot_px_x(&f, x), vs_plot_px_y(&f, y), col);
                }
            }
        }
    } else if (bars) {
        double slot = (f.x1 - f.x0) / p->n_cats, bw = 0.8 * slot / p->n_series;
        double zero = vs_plot_px_y(&f, VS_MIN(VS_MAX(0.0, f.ylo), f.yhi));
        for (int c = 0; c < p->n_cats; c++) {
            for (int i = 0; i < p->n_series; i++) {
                double v = p->s[i].y[c];
                if (!isfinite(v)) continue;
                double x = f.x0 + c * slot + 0.1 * slot + i * bw, y = vs_plot_px_y(&f, v);
                double top = VS_MIN(y, zero), h = fabs(zero - y);
                sb_printf(&b,
                          "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"><title>", x,
                          top, bw, h, palette[i % VS_ARRAY_LEN(palette)]);
                sb_text(&b, p->s[i].name);
                sb_printf(&b, " / ");
                sb_text(&b, p->cats[c]);
                sb_printf(&b, ": %g</title></rect>\n", v);
                if (bw >= 32)
                    sb_printf(
                        &b,
                        "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"10\">%.3g</text>\n",
                        x + 0.5 * bw, v >= 0 ? top - 3 : top + h + 11, v);
            }
        }
    } else {
        double bwid = (bhi - blo) / nb;
        for (int i = 0; i < p->n_series; i++) {
            const char *col = palette[i % VS_ARRAY_LEN(palette)];
            const double *cnt = counts + (size_t)i * nb;
            double op = p->n_series > 1 ? 0.35 : 0.7;
            for (int k = 0; k < nb; k++) {
                if (cnt[k] <= 0) continue;
                double xa = vs_plot_px_x(&f, blo + k * bwid), xb = vs_plot_px_x(&f, blo + (k + 1) * bwid);
                double y = vs_plot_px_y(&f, cnt[k]);
                sb_printf(&b,
                          "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\" "
                          "fill-opacity=\"%.2f\"/>\n",
                          xa, y, xb - xa, vs_plot_px_y(&f, 0) - y, col, op);
            }
            sb_printf(&b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", col);
            double y0 = vs_plot_px_y(&f, 0);
            sb_printf(&b, "%.2f,%.2f", vs_plot_px_x(&f, blo), y0);
            for (int k = 0; k < nb; k++) {
                double y = vs_plot_px_y(&f, cnt[k]);
                sb_printf(&b, " %.2f,%.2f %.2f,%.2f", vs_plot_px_x(&f, blo + k * bwid), y,
                          vs_plot_px_x(&f, blo + (k + 1) * bwid), y);
            }
            sb_printf(&b, " %.2f,%.2f\"/>\n", vs_plot_px_x(&f, bhi), y0);
        }
    }
    sb_printf(&b, "</g>\n");
    /* frame on top of the data */
    sb_printf(&b,
              "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"none\" stroke=\"#000\"/>\n",
              f.x0, f.y0, f.x1 - f.x0, f.y1 - f.y0);
    if (legend) {
        sb_printf(&b, "<g class=\"legend\">\n");
        for (int i = 0; i < p->n_series; i++) {
            double x = f.x1 + 12, y = f.y0 + 6 + 18 * i;
            sb_printf(&b, "<rect x=\"%.2f\" y=\"%.2f\" width=\"12\" height=\"12\" fill=\"%s\"/>", x, y,
                      palette[i % VS_ARRAY_LEN(palette)]);
            sb_printf(&b, "<text x=\"%.2f\" y=\"%.2f\">", x + 17, y + 10);
            sb_text(&b, p->s[i].name);
            sb_printf(&b, "</text>\n");
        }
        sb_printf(&b, "</g>\n");
    }
    sb_printf(&b, "</svg>\n");
    vs_free(counts);
    if (b.oom) {
        vs_free(b.buf);
        vs_error_set(err, VS_ERR_NOMEM, "plot: out of memory");
        return NULL;
    }
    p->frame = f;
    p->have_frame = true;
    if (len) *len = b.len;
    return b.buf;
}

vs_status vs_plot_write(vs_plot *p, const char *path, vs_error *err) {
    size_t len = 0;
    char *svg = vs_plot_svg(p, &len, err);
    if (!svg) return err ? err->code : VS_ERR_INVALID;
    vs_status s = vs_write_file(path, svg, len, err);
    vs_free(svg);
    return s;
}
