/* vlmspec plot: figures from files vlmspec writes.
 *   plot weights TRACE -o OUT.svg   the ensemble weights of a weight trace (generate --trace-weights):
 *                                   the share of one drafting input's weight (M by default) per decoding
 *                                   step as a step line, with the block's accepted drafts and its first
 *                                   rejected draft marked, like TABED fig. 3 / fig. 4.
 * Charts are drawn with src/measure/plot.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ens_weights.h"
#include "plot.h"

#define CMD "plot"

static void usage(FILE *f) {
    fprintf(f,
            "usage: vlmspec plot weights TRACE -o OUT.svg [options]\n"
            "Draws the ensemble weights of a weight trace (vlmspec generate --trace-weights TRACE): the "
            "share of\n"
            "one drafting input's weight per decoding step (a step line: a block's weights hold for its\n"
            "tokens), its accepted drafts (dots) and first rejected draft (crosses), like TABED fig. 3.\n\n"
            "options:\n"
            "  -o, --output FILE    the SVG to write (required)\n"
            "  --request N          which request of the trace (default 0)\n"
            "  --input NAME         the input whose share is drawn (default m if present, else the first)\n"
            "  --all-inputs         draw every input's weight as its own line\n"
            "  --title TEXT         chart title (default: inputs, policy and request)\n"
            "  --size WxH           canvas size in pixels (default 720x400)\n"
            "  -h, --help           this help\n");
}

typedef struct plot_size {
    int w, h;
} plot_size;

typedef struct plot_opts {
    const char *trace_path, *out, *input, *title;
    int request;
    plot_size size;
    bool all;
} plot_opts;

/* --size WxH: dst is a plot_size. */
static bool parse_size(const char *cmd, const char *flag, const char *v, void *dst) {
    int w, h;
    if (sscanf(v, "%dx%d", &w, &h) != 2 || w < 160 || h < 120 || w > 20000 || h > 20000) {
        cli_fail(cmd, "%s %s: expected WxH, at least 160x120", flag, v);
        return false;
    }
    *(plot_size *)dst = (plot_size){w, h};
    return true;
}

/* Parses argv[2..argc) of `plot weights` into o: the flags and the trace file (the one positional
 * argument). -1 to go on, else the exit status (0 after --help, 2 on a usage error). */
static int weights_parse(int argc, char **argv, plot_opts *o) {
    *o = (plot_opts){.size = {720, 400}};
    cli_flags fs = {0};
    cli_flag_add(&fs, "-o|--output", CLI_STR, &o->out, 0, 0);
    cli_flag_add(&fs, "--request", CLI_INT, &o->request, 0, INT32_MAX);
    cli_flag_add(&fs, "--input", CLI_STR, &o->input, 0, 0);
    cli_flag_add(&fs, "--all-inputs", CLI_BOOL, &o->all, 0, 0);
    cli_flag_add(&fs, "--title", CLI_STR, &o->title, 0, 0);
    cli_flag_fn_add(&fs, "--size", parse_size, &o->size);
    int n_pos = 0;
    cli_flags_positional(&fs, &o->trace_path, &n_pos, 1);
    const int r = cli_flags_parse(CMD, argc - 1, argv + 1, &fs, usage); /* argv[1] stands in for the name */
    if (r >= 0) return r;
    if (!o->trace_path) return cli_fail(CMD, "plot weights needs a trace file"), 2;
    if (!o->out) return cli_fail(CMD, "-o OUT.svg is required"), 2;
    return -1;
}

/* The input whose share is drawn: --input, else m if present, else the first; -1 after an error. */
static int select_input(const vs_ens_trace *t, const plot_opts *o) {
    int sel = -1;
    for (int r = 0; r < t->m; r++)
        if (o->input ? !strcmp(t->names[r], o->input) : !strcmp(t->names[r], "m")) sel = r;
    if (sel < 0 && o->input) {
        cli_fail(CMD, "%s has no input '%s'", o->trace_path, o->input);
        return -1;
    }
    return sel < 0 ? 0 : sel;
}

/* The blocks of one request as chart series. */
typedef struct weight_series {
    int first, nb;               /* the request's first block (index in the trace), its blocks */
    int64_t n_acc, n_rej;        /* accepted drafts; blocks with a rejected draft */
    double *x, *y, *ly;          /* [2 nb]: the step line of the drawn input; ly: room for any input's */
    double *ax, *ay, *rx, *ry;   /* accepted drafts [n_acc], first rejected drafts [n_rej] */
    int n, na, nr;               /* points in x / y, ax / ay, rx / ry */
    double wsum;                 /* the drawn input's weights summed over the blocks */
    int64_t drafted;             /* decided drafts: accepted and first rejected */
} weight_series;

static void series_free(weight_series *s) {
    free(s->x), free(s->y), free(s->ly), free(s->ax), free(s->ay), free(s->rx), free(s->ry);
}

/* Counts the blocks of the request and allocates the series; false after an error. */
static bool series_alloc(const vs_ens_trace *t, const plot_opts *o, weight_series *s) {
    s->first = -1;
    for (int i = 0; i < t->n; i++)
        if (t->rec[i].request == o->request) {
            if (s->first < 0) s->first = i;
            s->nb++;
            s->n_acc += t->rec[i].n_accept;
            s->n_rej += t->rec[i].n_accept < t->rec[i].n_draft;
        }
    if (s->nb == 0) {
        cli_fail(CMD, "%s has no block of request %d", o->trace_path, o->request);
        return false;
    }
    s->x = malloc(sizeof(double) * 2 * (size_t)s->nb);
    s->y = malloc(sizeof(double) * 2 * (size_t)s->nb);
    s->ly = malloc(sizeof(double) * 2 * (size_t)s->nb);
    s->ax = malloc(sizeof(double) * (size_t)VS_MAX(s->n_acc, 1));
    s->ay = malloc(sizeof(double) * (size_t)VS_MAX(s->n_acc, 1));
    s->rx = malloc(sizeof(double) * (size_t)VS_MAX(s->n_rej, 1));
    s->ry = malloc(sizeof(double) * (size_t)VS_MAX(s->n_rej, 1));
    if (!s->x || !s->y || !s->ly || !s->ax || !s->ay || !s->rx || !s->ry) {
        cli_fail(CMD, "out of memory");
        return false;
    }
    return true;
}

/* Fills the series of input sel: the step line (step_b, w_b), (step_b + emitted_b, w_b) per block, its
 * accepted drafts and first rejected draft. */
static void series_fill(const vs_ens_trace *t, int request, int sel, weight_series *s) {
    for (int i = s->first; i < t->n; i++) {
        const vs_ens_trace_rec *b = &t->rec[i];
        if (b->request != request) continue;
        const double w = b->w[sel];
        s->x[s->n] = b->step, s->y[s->n] = w, s->n++;
        s->x[s->n] = b->step + b->n_accept + 1, s->y[s->n] = w, s->n++;
        for (int k = 0; k < b->n_accept; k++) s->ax[s->na] = b->step + k, s->ay[s->na] = w, s->na++;
        if (b->n_accept < b->n_draft) s->rx[s->nr] = b->step + b->n_accept, s->ry[s->nr] = w, s->nr++;
        s->wsum += w;
        s->drafted += b->n_accept + (b->n_accept < b->n_draft);
    }
}

/* Sets the chart's title (--title, else the inputs, policy and request), labels, size and range. */
static bool chart_setup(vs_plot *p, const vs_ens_trace *t, const plot_opts *o, int sel, vs_error *err) {
    char buf[256], names[128] = "", ylabel[64];
    for (int r = 0; r < t->m; r++) {
        size_t l = strlen(names);
        snprintf(names + l, sizeof(names) - l, "%s%s", r ? "," : "", t->names[r]);
    }
    const char *title = o->title;
    if (!title) {
        snprintf(buf, sizeof(buf), "ensemble weights: inputs %s, policy %s, request %d", names,
                 t->policy[0] ? t->policy : "?", o->request);
        title = buf;
    }
    snprintf(ylabel, sizeof(ylabel), o->all ? "weight" : "share of %s's weight", t->names[sel]);
    if (vs_plot_title(p, title, err) || vs_plot_labels(p, "decoding step (tokens generated)", ylabel, err))
        return false;
    vs_plot_size(p, o->size.w, o->size.h);
    vs_plot_yrange(p, 0, 1);
    return true;
}

/* Draws the weight lines (input sel's, or every input's with --all-inputs) and the draft markers into
 * o->out; false on error (in err). */
static bool draw(const vs_ens_trace *t, const plot_opts *o, int sel, weight_series *s, vs_error *err) {
    vs_plot *p = vs_plot_new(VS_PLOT_LINES, err);
    bool ok = p && chart_setup(p, t, o, sel, err);
    char sname[64];
    for (int r = 0; r < t->m && ok; r++) {
        if (!o->all && r != sel) continue;
        int k = 0;
        for (int i = s->first; i < t->n; i++) {
            const vs_ens_trace_rec *b = &t->rec[i];
            if (b->request != o->request) continue;
            s->ly[k++] = b->w[r], s->ly[k++] = b->w[r];
        }
        snprintf(sname, sizeof(sname), "w_%s", t->names[r]);
        ok = !vs_plot_line(p, sname, s->x, s->ly, s->n, VS_PLOT_STYLE_LINE, err);
    }
    ok = ok && !(s->na && vs_plot_line(p, "accepted draft", s->ax, s->ay, s->na, VS_PLOT_STYLE_MARKERS, err));
    ok = ok && !(s->nr && vs_plot_line(p, "first rejected draft", s->rx, s->ry, s->nr, VS_PLOT_STYLE_MARKERS, err));
    ok = ok && !vs_plot_write(p, o->out, err);
    vs_plot_free(p);
    return ok;
}

static int plot_weights(int argc, char **argv) {
    plot_opts o;
    int rc = weights_parse(argc, argv, &o);
    if (rc >= 0) return rc;
    vs_error err = {0};
    vs_ens_trace t;
    if (vs_ens_trace_read(o.trace_path, &t, &err)) return cli_fail_err(CMD, &err);
    rc = 1;
    weight_series s = {0};
    const int sel = select_input(&t, &o);
    if (sel >= 0 && series_alloc(&t, &o, &s)) {
        series_fill(&t, o.request, sel, &s);
        if (!draw(&t, &o, sel, &s, &err)) {
            cli_fail_err(CMD, &err);
        } else {
            printf("%s: request %d, %d blocks, %lld accepted of %lld decided drafts, mean share of %s %.3f -> %s\n",
                   o.trace_path, o.request, s.nb, (long long)s.n_acc, (long long)s.drafted, t.names[sel],
                   s.wsum / s.nb, o.out);
            rc = 0;
        }
    }
    series_free(&s);
    vs_ens_trace_free(&t);
    return rc;
}

int vs_cmd_plot(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "weights")) return plot_weights(argc, argv);
    cli_fail(CMD, "unknown figure '%s' (expected: weights)", argv[1]);
    return 2;
}
