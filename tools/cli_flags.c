/* cli_flags: the typed flag table of every subcommand. See cli.h. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static cli_flag *add(cli_flags *s, const char *names, cli_kind kind, void *dst) {
    if (s->n == CLI_MAX_FLAGS) { /* a programmer error: the table is fixed */
        fprintf(stderr, "vlmspec: internal error: more than %d flags\n", CLI_MAX_FLAGS);
        abort();
    }
    cli_flag *f = &s->f[s->n++];
    *f = (cli_flag){.names = names, .kind = kind, .dst = dst};
    return f;
}

cli_flag *cli_flag_add(cli_flags *s, const char *names, cli_kind kind, void *dst, double lo, double hi) {
    cli_flag *f = add(s, names, kind, dst);
    f->lo = lo, f->hi = hi;
    return f;
}

cli_flag *cli_flag_list(cli_flags *s, const char *names, const char **dst, int *count, int max) {
    cli_flag *f = add(s, names, CLI_STRS, (void *)dst);
    f->count = count, f->max = max;
    return f;
}

cli_flag *cli_flag_fn_add(cli_flags *s, const char *names, cli_flag_fn fn, void *dst) {
    cli_flag *f = add(s, names, CLI_FN, dst);
    f->fn = fn;
    return f;
}

bool cli_flag_weight_type(const char *cmd, const char *flag, const char *v, void *dst) {
    const int t = vs_type_from_name(v);
    if (t < 0 || !vs_type_supported(t)) {
        cli_fail(cmd, "%s %s: expected F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K or Q6_K", flag, v);
        return false;
    }
    *(int *)dst = t;
    return true;
}

void cli_flags_positional(cli_flags *s, const char **dst, int *count, int max) {
    s->pos = dst, s->n_pos = count, s->max_pos = max;
}

static const cli_flag *by_dst(const cli_flags *s, const void *dst) {
    for (int i = 0; i < s->n; i++)
        if (s->f[i].dst == dst && s->f[i].given) return &s->f[i];
    return NULL;
}

bool cli_flag_given(const cli_flags *s, const void *dst) { return by_dst(s, dst) != NULL; }

const char *cli_flag_seen(const cli_flags *s, const void *dst) {
    const cli_flag *f = by_dst(s, dst);
    return f ? f->seen : NULL;
}

/* Whether arg is one of the '|'-separated spellings. */
static bool spelled(const char *names, const char *arg) {
    const size_t n = strlen(arg);
    for (const char *p = names; *p;) {
        const char *e = strchr(p, '|');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, arg, n)) return true;
        p += len + (e != NULL);
    }
    return false;
}

static bool set_value(const char *cmd, cli_flag *f, const char *a, const char *v) {
    double d;
    int64_t i64;
    switch (f->kind) {
    case CLI_INT: return cli_parse_int(cmd, a, v, (int)f->lo, (int)f->hi, (int *)f->dst);
    /* a bound at or past 2^63 (INT64_MAX as a double) means INT64_MAX: the conversion itself would overflow */
    case CLI_I64:
        return cli_parse_i64(cmd, a, v, (int64_t)f->lo, f->hi >= 9.2e18 ? INT64_MAX : (int64_t)f->hi,
                             (int64_t *)f->dst);
    case CLI_U64:
        if (!cli_parse_i64(cmd, a, v, (int64_t)f->lo, f->hi >= 9.2e18 ? INT64_MAX : (int64_t)f->hi, &i64))
            return false;
        *(uint64_t *)f->dst = (uint64_t)i64;
        return true;
    case CLI_F64: return cli_parse_f64(cmd, a, v, f->lo, f->hi, (double *)f->dst);
    case CLI_F32:
        if (!cli_parse_f64(cmd, a, v, f->lo, f->hi, &d)) return false;
        *(float *)f->dst = (float)d;
        return true;
    case CLI_STR: *(const char **)f->dst = v; return true;
    case CLI_STRS:
        if (*f->count == f->max) {
            fprintf(stderr, "vlmspec %s: more than %d %s\n", cmd, f->max, a);
            return false;
        }
        ((const char **)f->dst)[(*f->count)++] = v;
        return true;
    case CLI_KV: return cli_parse_kv_type(cmd, a, v, false, (vs_type *)f->dst);
    case CLI_KV_DRAFT: return cli_parse_kv_type(cmd, a, v, true, (vs_type *)f->dst);
    case CLI_FN: return f->fn(cmd, a, v, f->dst);
    case CLI_BOOL: break;
    }
    return false;
}

int cli_flags_parse(const char *cmd, int argc, char **argv, cli_flags *s, void (*usage)(FILE *)) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (a[0] != '-' || !strcmp(a, "-")) { /* a positional argument */
            if (!s->pos || *s->n_pos == s->max_pos) {
                fprintf(stderr, "vlmspec %s: unexpected argument '%s' (see vlmspec %s --help)\n", cmd, a, cmd);
                return 2;
            }
            s->pos[(*s->n_pos)++] = a;
            continue;
        }
        cli_flag *f = NULL;
        for (int k = 0; k < s->n && !f; k++)
            if (spelled(s->f[k].names, a)) f = &s->f[k];
        if (!f) {
            fprintf(stderr, "vlmspec %s: unknown option '%s' (see vlmspec %s --help)\n", cmd, a, cmd);
            return 2;
        }
        f->given = true;
        f->seen = a;
        if (f->kind == CLI_BOOL) {
            *(bool *)f->dst = true;
            continue;
        }
        const char *v = cli_value(cmd, argc, argv, &i);
        if (!v || !set_value(cmd, f, a, v)) return 2;
    }
    return -1;
}
