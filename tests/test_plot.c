/* test_plot: the SVG plotting module: nice ticks, well-formed documents, data mapped to the right
 * pixels (lines, log axis, bars, histograms), escaping, errors. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot.h"
#include "testutil.h"

/* A small XML well-formedness checker: balanced tags, quoted attributes, escaped text; no NaN / inf. */
static bool xml_ok(const char *s, char *why, size_t cap) {
    const char *stack[256];
    size_t lens[256];
    int depth = 0, roots = 0;
    if (strstr(s, "nan") || strstr(s, "inf")) return snprintf(why, cap, "non-finite number"), false;
    if (!strncmp(s, "<?xml", 5)) {
        const char *e = strstr(s, "?>");
        if (!e) return snprintf(why, cap, "unterminated declaration"), false;
        s = e + 2;
    }
    while (*s) {
        if (*s == '&') {
            const char *ents[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
            bool ok = false;
            for (size_t i = 0; i < 5; i++) ok |= !strncmp(s, ents[i], strlen(ents[i]));
            if (!ok) return snprintf(why, cap, "bare & in text"), false;
            s++;
            continue;
        }
        if (*s == '>') return snprintf(why, cap, "bare > in text"), false;
        if (*s != '<') {
            if (depth == 0 && *s != '\n' && *s != ' ')
                return snprintf(why, cap, "text outside the root"), false;
            s++;
            continue;
        }
        s++;
        bool closing = *s == '/';
        if (closing) s++;
        const char *name = s;
        while (*s && (isalnum((unsigned char)*s) || *s == '-' || *s == ':' || *s == '_')) s++;
        size_t nl = (size_t)(s - name);
        if (nl == 0) return snprintf(why, cap, "empty tag name"), false;
        if (closing) {
            if (*s != '>') return snprintf(why, cap, "bad closing tag"), false;
            if (depth == 0 || lens[depth - 1] != nl || strncmp(stack[depth - 1], name, nl))
                return snprintf(why, cap, "mismatched </%.*s>", (int)nl, name), false;
            depth--;
            s++;
            continue;
        }
        /* attributes */
        for (;;) {
            while (*s == ' ' || *s == '\n') s++;
            if (*s == '/' && s[1] == '>') {
                s += 2;
                if (depth == 0) roots++;
                break;
            }
            if (*s == '>') {
                s++;
                if (depth == 0) roots++;
                if (depth == 256) return snprintf(why, cap, "too deep"), false;
                stack[depth] = name, lens[depth] = nl, depth++;
                break;
            }
            const char *an = s;
            while (*s && (isalnum((unsigned char)*s) || *s == '-' || *s == ':' || *s == '_')) s++;
            if (s == an || *s != '=' || s[1] != '"')
                return snprintf(why, cap, "bad attribute in <%.*s>", (int)nl, name), false;
            s += 2;
            while (*s && *s != '"') {
                if (*s == '<') return snprintf(why, cap, "< in attribute"), false;
                s++;
            }
            if (!*s) return snprintf(why, cap, "unterminated attribute"), false;
            s++;
        }
    }
    if (depth != 0) return snprintf(why, cap, "%d unclosed tags", depth), false;
    if (roots != 1) return snprintf(why, cap, "%d root elements", roots), false;
    return true;
}

/* Parses the n-th "points" attribute of a polyline into xs/ys; returns the number of points. */
static int polyline_points(const char *svg, int nth, double *xs, double *ys, int cap) {
    const char *s = svg;
    for (int i = 0; i <= nth; i++) {
        s = strstr(s, "<polyline");
        if (!s) return -1;
        if (i < nth) s++;
    }
    s = strstr(s, "points=\"");
    if (!s) return -1;
    s += 8;
    int n = 0;
    while (*s != '"' && n < cap) {
        char *e;
        xs[n] = strtod(s, &e);
        if (*e != ',') return -1;
        ys[n] = strtod(e + 1, &e);
        n++;
        while (*e == ' ') e++;
        s = e;
    }
    return n;
}

typedef struct rect {
    double x, y, w, h;
} rect;

/* The data rects (inside <g class="data">) in order. */
static int data_rects(const char *svg, rect *r, int cap) {
    const char *s = strstr(svg, "<g class=\"data\"");
    const char *end = s ? strstr(s, "</g>") : NULL;
    int n = 0;
    while (s && (s = strstr(s, "<rect ")) && s < end && n < cap) {
        if (sscanf(s, "<rect x=\"%lf\" y=\"%lf\" width=\"%lf\" height=\"%lf\"", &r[n].x, &r[n].y, &r[n].w,
                   &r[n].h) == 4)
            n++;
        s++;
    }
    return n;
}

static void test_ticks(void) {
    double t[64], st, lo = 0.3, hi = 7.2;
    int n = vs_plot_nice_ticks(&lo, &hi, 7, t, 64, &st);
    VT_CHECK(n == 5 && st == 2 && lo == 0 && hi == 8, "n %d step %g [%g, %g]", n, st, lo, hi);
    for (int i = 0; i < n; i++) VT_CHECK(t[i] == 2.0 * i, "tick %d = %g", i, t[i]);
    lo = -1.3, hi = 2.1;
    n = vs_plot_nice_ticks(&lo, &hi, 5, t, 64, &st);
    VT_CHECK(n == 4 && st == 2 && lo == -2 && hi == 4 && t[1] == 0, "n %d step %g [%g, %g]", n, st, lo, hi);
    lo = 0.012, hi = 0.047;
    n = vs_plot_nice_ticks(&lo, &hi, 6, t, 64, &st);
    VT_CHECK(fabs(st - 0.01) < 1e-12 && fabs(lo - 0.01) < 1e-12 && fabs(hi - 0.05) < 1e-12 && n == 5,
             "n %d step %g [%g, %g]", n, st, lo, hi);
    lo = hi = 3; /* degenerate range widens */
    n = vs_plot_nice_ticks(&lo, &hi, 6, t, 64, &st);
    VT_CHECK(lo < 3 && hi > 3 && n >= 2, "[%g, %g] %d ticks", lo, hi, n);
    lo = 0, hi = 1000;
    n = vs_plot_nice_ticks(&lo, &hi, 6, t, 64, &st);
    VT_CHECK(st == 200 && n == 6 && hi == 1000, "step %g n %d", st, n);
}

static void test_lines(void) {
    vs_error err = {0};
    vs_plot *p = vs_plot_new(VS_PLOT_LINES, &err);
    VT_REQUIRE(p, "%s", err.msg);
    vs_plot_size(p, 400, 300);
    vs_plot_xrange(p, 0, 10);
    vs_plot_yrange(p, 0, 100);
    VT_CHECK(vs_plot_title(p, "loss <train> & \"eval\"", &err) == VS_OK, "%s", err.msg);
    VT_CHECK(vs_plot_labels(p, "step", "loss", &err) == VS_OK, "%s", err.msg);
    double x[] = {0, 5, 10, 2.5}, y[] = {0, 50, 100, 20};
    VT_CHECK(vs_plot_line(p, "train", x, y, 4, VS_PLOT_STYLE_LINE | VS_PLOT_STYLE_MARKERS, &err) == VS_OK,
             "%s", err.msg);
    double y2[] = {10, NAN, 30, 40, 50};
    VT_CHECK(vs_plot_line(p, "eval", NULL, y2, 5, 0, &err) == VS_OK, "%s", err.msg);
    size_t len = 0;
    char *svg = vs_plot_svg(p, &len, &err);
    VT_REQUIRE(svg, "%s", err.msg);
    VT_CHECK(len == strlen(svg), "length %zu vs %zu", len, strlen(svg));
    char why[128] = "";
    VT_CHECK(xml_ok(svg, why, sizeof(why)), "not well-formed: %s", why);
    VT_CHECK(strstr(svg, "loss &lt;train&gt; &amp; &quot;eval&quot;") != NULL, "title not escaped");
    VT_CHECK(strstr(svg, ">train</text>") && strstr(svg, ">eval</text>"), "legend missing");
    vs_plot_frame f;
    VT_REQUIRE(vs_plot_get_frame(p, &f), "no frame after a render");
    VT_CHECK(f.xlo == 0 && f.xhi == 10 && f.ylo == 0 && f.yhi == 100, "ranges [%g %g] [%g %g]", f.xlo, f.xhi,
             f.ylo, f.yhi);
    VT_CHECK(f.x0 > 0 && f.x1 < 400 && f.y0 > 0 && f.y1 < 300 && f.x0 < f.x1 && f.y0 < f.y1, "area");
    double px[8], py[8];
    int n = polyline_points(svg, 0, px, py, 8);
    VT_REQUIRE(n == 4, "first polyline has %d points", n);
    for (int i = 0; i < 4; i++) {
        /* the mapping computed here, independently of the module */
        double ex = f.x0 + x[i] / 10.0 * (f.x1 - f.x0), ey = f.y1 - y[i] / 100.0 * (f.y1 - f.y0);
        VT_CHECK_NEAR(px[i], ex, 0.006, "x of point %d", i);
        VT_CHECK_NEAR(py[i], ey, 0.006, "y of point %d", i);
    }
    VT_CHECK_NEAR(px[0], f.x0, 0.006, "origin x");
    VT_CHECK_NEAR(py[0], f.y1, 0.006, "origin y at the bottom");
    VT_CHECK_NEAR(px[2], f.x1, 0.006, "right end");
    VT_CHECK_NEAR(py[2], f.y0, 0.006, "top end");
    /* the NaN breaks the second series into two polylines: [0] and [2..4] */
    VT_CHECK(polyline_points(svg, 1, px, py, 8) == 1, "segment before NaN");
    n = polyline_points(svg, 2, px, py, 8);
    VT_CHECK(n == 3, "segment after NaN has %d points", n);
    VT_CHECK_NEAR(px[0], f.x0 + 0.2 * (f.x1 - f.x0), 0.006, "implicit x = index");
    /* markers: 4 circles at the points */
    int circles = 0;
    for (const char *s = svg; (s = strstr(s, "<circle")); s++) circles++;
    VT_CHECK(circles == 4, "%d markers", circles);
    vs_free(svg);

    /* data-derived ranges extend to ticks */
    vs_plot *q = vs_plot_new(VS_PLOT_LINES, &err);
    double yy[] = {0.3, 7.2};
    VT_CHECK(vs_plot_line(q, "a", NULL, yy, 2, 0, &err) == VS_OK, "%s", err.msg);
    svg = vs_plot_svg(q, NULL, &err);
    VT_REQUIRE(svg, "%s", err.msg);
    VT_CHECK(vs_plot_get_frame(q, &f) && f.ylo == 0 && f.yhi == 8 && f.xlo == 0 && f.xhi == 1,
             "auto [%g %g] [%g %g]", f.xlo, f.xhi, f.ylo, f.yhi);
    VT_CHECK(strstr(svg, "class=\"legend\"") == NULL, "one series: no legend");
    VT_CHECK(xml_ok(svg, why, sizeof(why)), "%s", why);
    vs_free(svg);
    vs_plot_free(q);

    /* log axis: 1, 10, 100 are equally spaced */
    q = vs_plot_new(VS_PLOT_LINES, &err);
    vs_plot_log_y(q, true);
    double ly[] = {1, 10, 100, 0 /* skipped */};
    VT_CHECK(vs_plot_line(q, "loss", NULL, ly, 4, 0, &err) == VS_OK, "%s", err.msg);
    svg = vs_plot_svg(q, NULL, &err);
    VT_REQUIRE(svg, "%s", err.msg);
    VT_CHECK(xml_ok(svg, why, sizeof(why)), "%s", why);
    VT_REQUIRE(vs_plot_get_frame(q, &f) && f.log_y, "frame");
    n = polyline_points(svg, 0, px, py, 8);
    VT_REQUIRE(n == 3, "%d log points", n);
    VT_CHECK_NEAR(py[0], f.y1, 0.006, "1 at the bottom");
    VT_CHECK_NEAR(py[2], f.y0, 0.006, "100 at the top");
    VT_CHECK_NEAR(py[1], 0.5 * (f.y0 + f.y1), 0.006, "10 in the middle");
    vs_free(svg);
    vs_plot_free(q);
    vs_plot_free(p);
}

static void test_bars(void) {
    vs_error err = {0};
    vs_plot *p = vs_plot_new(VS_PLOT_BARS, &err);
    VT_REQUIRE(p, "%s", err.msg);
    vs_plot_size(p, 500, 320);
    const char *cats[] = {"vqa", "pope & ocr"};
    double a[] = {1, 2}, b[] = {3, NAN};
    VT_CHECK(vs_plot_bars(p, "M", a, 2, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(vs_plot_svg(p, NULL, &err) == NULL && err.code == VS_ERR_INVALID,
             "bars without categories accepted");
    VT_CHECK(vs_plot_categories(p, cats, 2, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(vs_plot_bars(p, "T", b, 2, &err) == VS_OK, "%s", err.msg);
    char *svg = vs_plot_svg(p, NULL, &err);
    VT_REQUIRE(svg, "%s", err.msg);
    char why[128] = "";
    VT_CHECK(xml_ok(svg, why, sizeof(why)), "%s", why);
    VT_CHECK(strstr(svg, "pope &amp; ocr") != NULL, "category not escaped");
    vs_plot_frame f;
    VT_REQUIRE(vs_plot_get_frame(p, &f), "frame");
    VT_CHECK(f.ylo == 0 && f.yhi >= 3, "y range [%g %g]", f.ylo, f.yhi);
    rect r[8];
    int n = data_rects(svg, r, 8);
    VT_REQUIRE(n == 3, "%d bars (NaN must be skipped)", n);
    /* order: category 0 (M=1, T=3), category 1 (M=2) */
    double unit = (f.y1 - f.y0) / (f.yhi - f.ylo);
    VT_CHECK_NEAR(r[0].h, 1 * unit, 0.011, "height of 1");
    VT_CHECK_NEAR(r[1].h, 3 * unit, 0.011, "height of 3");
    VT_CHECK_NEAR(r[2].h, 2 * unit, 0.011, "height of 2");
    for (int i = 0; i < 3; i++) VT_CHECK_NEAR(r[i].y + r[i].h, f.y1, 0.011, "bar %d stands on zero", i);
    double slot = (f.x1 - f.x0) / 2;
    VT_CHECK(r[0].x >= f.x0 && r[0].x + r[0].w <= r[1].x + 0.011 && r[1].x + r[1].w <= f.x0 + slot + 0.011,
             "category 0 bars side by side in its slot");
    VT_CHECK(r[2].x >= f.x0 + slot - 0.011, "category 1 bar in the second slot");
    vs_free(svg);
    /* a length mismatch is an error */
    double c3[] = {1, 2, 3};
    VT_CHECK(vs_plot_bars(p, "X", c3, 3, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(vs_plot_svg(p, NULL, &err) == NULL && err.code == VS_ERR_INVALID, "mismatch accepted");
    vs_plot_free(p);

    /* negative values hang from zero */
    p = vs_plot_new(VS_PLOT_BARS, &err);
    const char *c2[] = {"a", "b"};
    double v[] = {-1, 2};
    vs_plot_categories(p, c2, 2, &err);
    vs_plot_bars(p, "s", v, 2, &err);
    svg = vs_plot_svg(p, NULL, &err);
    VT_REQUIRE(svg, "%s", err.msg);
    VT_REQUIRE(vs_plot_get_frame(p, &f), "frame");
    n = data_rects(svg, r, 8);
    VT_REQUIRE(n == 2, "%d bars", n);
    double zero = vs_plot_px_y(&f, 0);
    VT_CHECK(f.ylo < 0 && f.yhi > 0, "range spans zero");
    VT_CHECK_NEAR(r[0].y, zero, 0.011, "negative bar starts at zero");
    VT_CHECK_NEAR(r[1].y + r[1].h, zero, 0.011, "positive bar ends at zero");
    vs_free(svg);
    vs_plot_free(p);
}

static void test_hist(void) {
    vs_error err = {0};
    vs_plot *p = vs_plot_new(VS_PLOT_HIST, &err);
    VT_REQUIRE(p, "%s", err.msg);
    vs_plot_bins(p, 0, 1, 2, false);
    double s1[] = {0.1, 0.2, 0.6, 0.9, 1.0, 1.5 /* outside */, NAN};
    double s2[] = {0.7};
    VT_CHECK(vs_plot_hist(p, "drafter A", s1, 7, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(vs_plot_hist(p, "drafter B", s2, 1, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(vs_plot_line(p, "x", NULL, s2, 1, 0, &err) == VS_ERR_INVALID,
             "line series on a histogram accepted");
    char *svg = vs_plot_svg(p, NULL, &err);
    VT_REQUIRE(svg, "%s", err.msg);
    char why[128] = "";
    VT_CHECK(xml_ok(svg, why, sizeof(why)), "%s", why);
    vs_plot_frame f;
    VT_REQUIRE(vs_plot_get_frame(p, &f), "frame");
    VT_CHECK(f.xlo == 0 && f.xhi == 1 && f.ylo == 0 && f.yhi >= 3, "ranges [%g %g] [%g %g]", f.xlo, f.xhi,
             f.ylo, f.yhi);
    rect r[8];
    int n = data_rects(svg, r, 8);
    VT_REQUIRE(n == 3, "%d bins drawn", n); /* A: 2 and 3; B: 0 (not drawn) and 1 */
    double unit = (f.y1 - f.y0) / (f.yhi - f.ylo);
    VT_CHECK_NEAR(r[0].h, 2 * unit, 0.011, "bin [0, 0.5) holds 2");
    VT_CHECK_NEAR(r[1].h, 3 * unit, 0.011, "bin [0.5, 1] holds 3 (1.0 in the last bin)");
    VT_CHECK_NEAR(r[2].h, 1 * unit, 0.011, "B's bin");
    VT_CHECK_NEAR(r[0].x, f.x0, 0.011, "first bin at the left edge");
    VT_CHECK_NEAR(r[1].x, 0.5 * (f.x0 + f.x1), 0.011, "second bin at the middle");
    vs_free(svg);
    /* normalised: fractions 0.4 / 0.6 */
    vs_plot_bins(p, 0, 1, 2, true);
    vs_plot_yrange(p, 0, 1);
    svg = vs_plot_svg(p, NULL, &err);
    VT_REQUIRE(svg, "%s", err.msg);
    VT_REQUIRE(vs_plot_get_frame(p, &f), "frame");
    n = data_rects(svg, r, 8);
    unit = f.y1 - f.y0;
    VT_CHECK(n == 3, "%d", n);
    VT_CHECK_NEAR(r[0].h, 0.4 * unit, 0.011, "fraction 0.4");
    VT_CHECK_NEAR(r[1].h, 0.6 * unit, 0.011, "fraction 0.6");
    VT_CHECK_NEAR(r[2].h, 1.0 * unit, 0.011, "fraction 1");
    vs_free(svg);
    /* written to a file */
    char path[512];
    snprintf(path, sizeof(path), "%s/hist.svg", vt_tmpdir());
    VT_CHECK(vs_plot_write(p, path, &err) == VS_OK, "%s", err.msg);
    FILE *fp = fopen(path, "rb");
    VT_REQUIRE(fp, "cannot reopen %s", path);
    char head[6] = {0};
    VT_CHECK(fread(head, 1, 5, fp) == 5 && !strcmp(head, "<?xml"), "file content");
    fclose(fp);
    snprintf(path, sizeof(path), "%s/no/such/dir/x.svg", vt_tmpdir());
    VT_CHECK(vs_plot_write(p, path, &err) == VS_ERR_IO, "write into a missing directory");
    vs_plot_free(p);
}

static void test_errors(void) {
    vs_error err = {0};
    VT_CHECK(vs_plot_new((vs_plot_kind)7, &err) == NULL && err.code == VS_ERR_INVALID, "bad kind");
    vs_plot *p = vs_plot_new(VS_PLOT_LINES, &err);
    VT_CHECK(vs_plot_svg(p, NULL, &err) == NULL && err.code == VS_ERR_INVALID, "empty plot rendered");
    vs_plot_frame f;
    VT_CHECK(!vs_plot_get_frame(p, &f), "frame before a render");
    double y[] = {NAN, NAN};
    vs_plot_line(p, "nan", NULL, y, 2, 0, &err);
    VT_CHECK(vs_plot_svg(p, NULL, &err) == NULL && err.code == VS_ERR_INVALID, "all-NaN plot rendered");
    const char *c[] = {"a"};
    VT_CHECK(vs_plot_categories(p, c, 1, &err) == VS_ERR_INVALID, "categories on a line plot");
    VT_CHECK(vs_plot_line(p, "x", NULL, NULL, 3, 0, &err) == VS_ERR_INVALID, "NULL data");
    vs_plot_free(p);
    vs_plot_free(NULL);
    /* a tiny canvas is refused rather than drawn inside out */
    p = vs_plot_new(VS_PLOT_LINES, &err);
    double v[] = {1, 2};
    vs_plot_line(p, "a very long series name that needs a wide legend", NULL, v, 2, 0, &err);
    vs_plot_line(p, "another series with a long name for the legend area", NULL, v, 2, 0, &err);
    vs_plot_size(p, 160, 120);
    char *svg = vs_plot_svg(p, NULL, &err);
    char why[128];
    VT_CHECK(svg == NULL || xml_ok(svg, why, sizeof(why)), "tiny canvas");
    vs_free(svg);
    vs_plot_free(p);
}

int main(void) {
    test_ticks();
    test_lines();
    test_bars();
    test_hist();
    test_errors();
    return vt_finish("plot");
}
