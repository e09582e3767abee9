/* cli: shared helpers for subcommands. See cli.h. */
#include "cli.h"
#include "outfile.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_fail(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "vlmspec %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 1;
}

int cli_fail_err(const char *cmd, const vs_error *err) {
    return cli_fail(cmd, "%s", err && err->msg[0] ? err->msg : "failed");
}

bool cli_parse_i64(const char *cmd, const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "vlmspec %s: %s expects an integer in [%lld, %lld], got '%s'\n", cmd, flag,
                (long long)lo, (long long)hi, s);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_int(const char *cmd, const char *flag, const char *s, int lo, int hi, int *out) {
    int64_t v;
    if (!cli_parse_i64(cmd, flag, s, lo, hi, &v)) return false;
    *out = (int)v;
    return true;
}

bool cli_parse_kv_type(const char *cmd, const char *flag, const char *s, bool drafter, vs_type *out) {
    if (!strcmp(s, "f16") || !strcmp(s, "F16")) *out = VS_TYPE_F16;
    else if (!strcmp(s, "f32") || !strcmp(s, "F32")) *out = VS_TYPE_F32;
    else if (drafter && (!strcmp(s, "bf16") || !strcmp(s, "BF16"))) *out = VS_TYPE_BF16;
    else {
        fprintf(stderr, "vlmspec %s: %s expects %s, got '%s'\n", cmd, flag, drafter ? "bf16, f16 or f32" : "f16 or f32",
                s);
        return false;
    }
    return true;
}

bool cli_parse_f64(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "vlmspec %s: %s expects a number in [%g, %g], got '%s'\n", cmd, flag, lo, hi, s);
        return false;
    }
    *out = v;
    return true;
}

const char *cli_value(const char *cmd, int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "vlmspec %s: %s needs a value\n", cmd, argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

int cli_write_json(const char *cmd, const char *path, const char *text) {
    vs_error err = {0};
    vs_outfile f;
    if (vs_outfile_open(&f, path, &err)) return cli_fail_err(cmd, &err);
    fputs(text, f.f);
    fputc('\n', f.f);
    return vs_outfile_commit(&f, &err) ? cli_fail_err(cmd, &err) : 0; /* checks every write above */
}
