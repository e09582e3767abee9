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

static int plot_weights(int argc, char **argv) {
    const char *trace_path = NULL, *out = NULL, *input = NULL, *title = NULL;
    int request = 0, width = 720, height = 400;
    bool all = false;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--all-inputs")) {
            all = true;
            continue;
        }
        if (a[0] != '-') {
            if (trace_path) return cli_fail(CMD, "one trace file only ('%s' and '%s')", trace_path, a), 2;
            trace_path = a;
            continue;
        }
        if (!(v = cli_value(CMD, argc, argv, &i))) return 2;
        if (!strcmp(a, "-o") || !strcmp(a, "--output"))
            out = v;
        else if (!strcmp(a, "--input"))
            input = v;
        else if (!strcmp(a, "--title"))
            title = v;
        else if (!strcmp(a, "--request")) {
            if (!cli_parse_int(CMD, a, v, 0, INT32_MAX, &request)) return 2;
        } else if (!strcmp(a, "--size")) {
            if (sscanf(v, "%dx%d", &width, &height) != 2 || width < 160 || height < 120 || width > 20000 ||
                height > 20000)
                return cli_fail(CMD, "--size %s: expected WxH, at least 160x120", v), 2;
        } else {
            return cli_fail(CMD, "unknown option '%s' (see vlmspec plot --help)", a), 2;
        }
    }
    if (!trace_path) return cli_fail(CMD, "plot weights needs a trace file"), 2;
    if (!out) return cli_fail(CMD, "-o OUT.svg is required"), 2;

    vs_error err = {0};
    vs_ens_trace t;
    if (vs_ens_trace_read(trace_path, &t, &err)) return cli_fail_err(CMD, &err);
    int rc = 1;
    vs_plot *p = NULL;
    double *x = NULL, *y = NULL, *ax = NULL, *ay = NULL, *rx = NULL, *ry = NULL, *ly = NULL;
    int sel = -1;
    for (int r = 0; r < t.m; r++)
        if (input ? !strcmp(t.names[r], input) : !strcmp(t.names[r], "m")) sel = r;
    if (sel < 0 && input) {
        cli_fail(CMD, "%s has no input '%s'", trace_path, input);
        goto done;
    }
    if (sel < 0) sel = 0;
    int first = -1, nb = 0;
    int64_t n_acc = 0, n_rej = 0;
    for (int i = 0; i < t.n; i++)
        if (t.rec[i].request == request) {
            if (first < 0) first = i;
            nb++;
            n_acc += t.rec[i].n_accept;
            n_rej += t.rec[i].n_accept < t.rec[i].n_draft;
        }
    if (nb == 0) {
        cli_fail(CMD, "%s has no block of request %d", trace_path, request);
        goto done;
    }
    /* the step line: (step_b, w_b), (step_b + emitted_b, w_b) per block */
    x = malloc(sizeof(double) * 2 * (size_t)nb);
    y = malloc(sizeof(double) * 2 * (size_t)nb);
    ly = malloc(sizeof(double) * 2 * (size_t)nb);
    ax = malloc(sizeof(double) * (size_t)VS_MAX(n_acc, 1));
    ay = malloc(sizeof(double) * (size_t)VS_MAX(n_acc, 1));
    rx = malloc(sizeof(double) * (size_t)VS_MAX(n_rej, 1));
    ry = malloc(sizeof(double) * (size_t)VS_MAX(n_rej, 1));
    if (!x || !y || !ly || !ax || !ay || !rx || !ry) {
        cli_fail(CMD, "out of memory");
        goto done;
    }
    int n = 0, na = 0, nr = 0;
    double wsum = 0;
    int64_t drafted = 0;
    for (int i = first; i < t.n; i++) {
        const vs_ens_trace_rec *b = &t.rec[i];
        if (b->request != request) continue;
        const double w = b->w[sel];
        x[n] = b->step, y[n] = w, n++;
        x[n] = b->step + b->n_accept + 1, y[n] = w, n++;
        for (int k = 0; k < b->n_accept; k++) ax[na] = b->step + k, ay[na] = w, na++;
        if (b->n_accept < b->n_draft) rx[nr] = b->step + b->n_accept, ry[nr] = w, nr++;
        wsum += w;
        drafted += b->n_accept + (b->n_accept < b->n_draft);
    }
    if (!(p = vs_plot_new(VS_PLOT_LINES, &err))) goto fail;
    char buf[256], names[128] = "";
    for (int r = 0; r < t.m; r++) {
        size_t l = strlen(names);
        snprintf(names + l, sizeof(names) - l, "%s%s", r ? "," : "", t.names[r]);
    }
    if (!title) {
        snprintf(buf, sizeof(buf), "ensemble weights: inputs %s, policy %s, request %d", names,
                 t.policy[0] ? t.policy : "?", request);
        title = buf;
    }
    char ylabel[64];
    snprintf(ylabel, sizeof(ylabel), all ? "weight" : "share of %s's weight", t.names[sel]);
    if (vs_plot_title(p, title, &err) || vs_plot_labels(p, "decoding step (tokens generated)", ylabel, &err))
        goto fail;
    vs_plot_size(p, width, height);
    vs_plot_yrange(p, 0, 1);
    char sname[64];
    for (int r = 0; r < t.m; r++) {
        if (!all && r != sel) continue;
        int k = 0;
        for (int i = first; i < t.n; i++) {
            const vs_ens_trace_rec *b = &t.rec[i];
            if (b->request != request) continue;
            ly[k++] = b->w[r], ly[k++] = b->w[r];
        }
        snprintf(sname, sizeof(sname), "w_%s", t.names[r]);
        if (vs_plot_line(p, sname, x, ly, n, VS_PLOT_STYLE_LINE, &err)) goto fail;
    }
    if (na && vs_plot_line(p, "accepted draft", ax, ay, na, VS_PLOT_STYLE_MARKERS, &err)) goto fail;
    if (nr && vs_plot_line(p, "first rejected draft", rx, ry, nr, VS_PLOT_STYLE_MARKERS, &err)) goto fail;
    if (vs_plot_write(p, out, &err)) goto fail;
    printf("%s: request %d, %d blocks, %lld accepted of %lld decided drafts, mean share of %s %.3f -> %s\n",
           trace_path, request, nb, (long long)n_acc, (long long)drafted, t.names[sel], wsum / nb, out);
    rc = 0;
    goto done;
fail:
    cli_fail_err(CMD, &err);
done:
    vs_plot_free(p);
    free(x), free(y), free(ly), free(ax), free(ay), free(rx), free(ry);
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
