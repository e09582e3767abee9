/* testutil: see testutil.h. */
#if !defined(_GNU_SOURCE) && !defined(_XOPEN_SOURCE)
#define _XOPEN_SOURCE 700 /* nftw */
#endif
#include "testutil.h"

#include <ftw.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int vt_failures = 0;
int vt_checks = 0;

int vt_finish(const char *name) {
    if (vt_failures) {
        fprintf(stderr, "%s: %d of %d checks FAILED\n", name, vt_failures, vt_checks);
        return 1;
    }
    printf("%s: all %d checks passed\n", name, vt_checks);
    return 0;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

const char *vt_shared_dir(void) {
    static char buf[4096];
    const char *env = getenv("VLMSPEC_SHARED");
    if (env && *env) {
        snprintf(buf, sizeof(buf), "%s/testdata", env);
        if (is_dir(buf)) return buf;
    }
    if (is_dir("../shared/testdata")) return "../shared/testdata";
    return NULL;
}

const char *vt_shared_or_skip(const char *what) {
    const char *d = vt_shared_dir();
    if (!d) printf("SKIP: %s needs ../shared/testdata (not found beside the project root)\n", what);
    return d;
}

static char g_tmp[256];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path) == 0 ? 0 : -1;
}

/* At exit: the directory goes when every check passed, stays (and is named) when one failed. */
static void tmp_cleanup(void) {
    if (!g_tmp[0]) return;
    const char *keep = getenv("VLMSPEC_KEEP_TMP");
    if (vt_failures || (keep && *keep && strcmp(keep, "0"))) {
        fprintf(stderr, "test files kept in %s\n", g_tmp);
        return;
    }
    if (nftw(g_tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0) fprintf(stderr, "could not remove %s\n", g_tmp);
}

const char *vt_tmpdir(void) {
    if (!g_tmp[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(g_tmp, sizeof(g_tmp), "%s/vlmspec-test-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(g_tmp)) {
            perror("mkdtemp");
            exit(1);
        }
        atexit(tmp_cleanup);
    }
    return g_tmp;
}

bool vt_file_has(const char *path, const char *needle) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    enum { CAP = 1 << 20 };
    char *buf = malloc(CAP);
    size_t n = buf ? fread(buf, 1, CAP - 1, f) : 0;
    fclose(f);
    if (!buf) return false;
    buf[n] = 0;
    bool found = strstr(buf, needle) != NULL;
    free(buf);
    return found;
}

const char *vt_cli(void) {
    const char *b = getenv("VLMSPEC_BIN");
    return b && *b ? b : "build/vlmspec";
}

int vt_run(const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    if (rc == -1 || !WIFEXITED(rc)) return -1;
    return WEXITSTATUS(rc);
}

double vt_max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > m || d != d) m = d != d ? INFINITY : d;
    }
    return m;
}

double vt_max_rel_diff(const float *got, const float *ref, size_t n) {
    double mr = 0;
    for (size_t i = 0; i < n; i++) mr = fabs((double)ref[i]) > mr ? fabs((double)ref[i]) : mr;
    return vt_max_abs_diff(got, ref, n) / (mr > 0 ? mr : 1);
}

static double gamma_p_series(double a, double x) {
    double sum = 1.0 / a, term = sum;
    for (int n = 1; n < 100000; n++) {
        term *= x / (a + n);
        sum += term;
        if (fabs(term) < fabs(sum) * 1e-15) break;
    }
    return sum * exp(-x + a * log(x) - lgamma(a));
}

/* modified Lentz evaluation of the continued fraction for Q(a, x) */
static double gamma_q_cfrac(double a, double x) {
    const double tiny = 1e-300;
    double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
    for (int i = 1; i < 100000; i++) {
        double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        if (fabs(d) < tiny) d = tiny;
        c = b + an / c;
        if (fabs(c) < tiny) c = tiny;
        d = 1 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-15) break;
    }
    return exp(-x + a * log(x) - lgamma(a)) * h;
}

double vt_chi2_pvalue(double chi2, int df) {
    double a = df / 2.0, x = chi2 / 2.0;
    if (x <= 0) return 1;
    return x < a + 1 ? 1 - gamma_p_series(a, x) : gamma_q_cfrac(a, x);
}
