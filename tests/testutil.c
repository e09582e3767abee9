/* testutil: see testutil.h. */
#include "testutil.h"

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

const char *vt_tmpdir(void) {
    static char buf[256];
    if (!buf[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(buf, sizeof(buf), "%s/vlmspec-test-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(buf)) {
            perror("mkdtemp");
            exit(1);
        }
    }
    return buf;
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
