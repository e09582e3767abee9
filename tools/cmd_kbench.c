/* vlmspec kbench: times vs_matmul for a weight shape (default the 953M reference model's FFN, 5632 x 2048)
 * over a list of activation-row counts, per weight type, and prints the median time, the weight
 * streaming rate, GFLOP/s and the ratio to one row, next to the measured memory read bandwidth.
 * Several copies of the matrix (--mem MB in all) are cycled so the weights come from DRAM as in a real
 * forward pass, not from the last-level cache; --mem 0 uses one copy (the cache-resident case of a
 * small model). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "kernels.h"

#define KB_MAX_ROWS 32

static void usage(FILE *f) {
    fprintf(f,
            "usage: vlmspec kbench [--threads N] [--type T[,T...]] [--out N] [--in N] [--rows 1,2,4,...]\n"
            "                      [--mem MB] [--reps N] [--isa scalar|avx2|avx512|amx]\n"
            "Times W (out x in) times n activation rows with vs_matmul.\n"
            "  -t, --threads N  worker threads (default: online CPUs)\n"
            "  --type T      F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, or a comma list (default\n"
            "                Q8_0,Q4_0,F16,BF16,F32)\n"
            "  --out N       output features (default 5632)\n"
            "  --in N        input features (default 2048; a multiple of 32 for Q8_0/Q4_0, 256 for Q*_K)\n"
            "  --rows LIST   activation-row counts (default 1,2,4,6,8,16,32,64)\n"
            "  --mem MB      total weight bytes cycled through, to defeat the caches (default 256; 0: one copy)\n"
            "  --reps N      timed calls per row count (default 30; the median is printed)\n"
            "  --isa I       cap the kernel ISA (default: the best this CPU has)\n"
            "Columns: median wall time per call; weight bytes / time; 2*out*in*rows / time; ratio to rows=1;\n"
            "weight streaming as a share of the measured bandwidth; cpu_us: median process CPU time per call\n"
            "(with --threads 1 the kernel's own compute time, robust when other processes share the cores);\n"
            "path: the kernel vs_matmul used (docs/kernels.md, \"vs_matmul paths\"); \"(x16)\": quantised weights read\n"
            "from the repacked copy the LM loader makes where a kernel reads it (AVX-512 VNNI CPUs; Q4_K / Q5_K also\n"
            "AVX2 CPUs with AVX-VNNI; VLMSPEC_REPACK=0: the GGUF rows).\n");
}

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int parse_list(const char *s, int64_t *out, int max, int64_t lo, int64_t hi) {
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < lo || v > hi || n >= max) return -1;
        out[n++] = v;
        if (*end == ',') end++;
        else if (*end) return -1;
        p = end;
    }
    return n;
}

/* One product as the LM computes it: quantised weights from their repacked copy when there is one. */
static void run_mm(vs_threadpool *tp, vs_type t, const uint8_t *w, const uint8_t *pk, int64_t n_out, int64_t n_in,
                   const float *x, int64_t n, float *y) {
    if (pk) vs_matmul_x16(tp, t, w, pk, n_out, n_in, x, n, y);
    else vs_matmul(tp, t, w, n_out, n_in, x, n, y);
}

static int bench_type(vs_threadpool *tp, vs_type t, int64_t n_out, int64_t n_in, const int64_t *rows,
                      int n_rows_list, double mem_mb, int reps, double bw) {
    size_t rb = vs_type_row_bytes(t, n_in), mat = rb * (size_t)n_out;
    if (rb == 0) {
        fprintf(stderr, "vlmspec kbench: --in %lld is not a multiple of %s's block size\n", (long long)n_in,
                vs_type_name(t));
        return 1;
    }
    int copies = mem_mb > 0 ? (int)VS_MAX(1.0, mem_mb * 1e6 / (double)mat + 0.999) : 1;
    int64_t max_rows = 1;
    for (int i = 0; i < n_rows_list; i++) max_rows = VS_MAX(max_rows, rows[i]);
    uint8_t *w = vs_malloc(mat * (size_t)copies);
    float *x = vs_malloc(sizeof(float) * (size_t)(max_rows * n_in));
    float *y = vs_malloc(sizeof(float) * (size_t)(max_rows * n_out));
    float *tmp = vs_malloc(sizeof(float) * (size_t)n_in);
    if (!w || !x || !y || !tmp) {
        vs_free(w), vs_free(x), vs_free(y), vs_free(tmp);
        fprintf(stderr, "vlmspec kbench: out of memory for %d copies of %zu bytes\n", copies, mat);
        return 1;
    }
    vs_rng rng;
    vs_rng_seed(&rng, 42);
    for (int64_t o = 0; o < n_out; o++) {
        for (int64_t i = 0; i < n_in; i++) tmp[i] = vs_rng_normal(&rng) * 0.02f;
        vs_quantize_row(t, tmp, w + (size_t)o * rb, n_in);
    }
    for (int c = 1; c < copies; c++) memcpy(w + (size_t)c * mat, w, mat);
    /* quantised weights as the LM runs them: repacked when the kernels read that (VLMSPEC_REPACK=0: not) */
    size_t pmat = vs_x16_wanted(t) ? vs_x16_bytes(t, n_out, n_in) : 0;
    uint8_t *pk = pmat ? vs_malloc(pmat * (size_t)copies) : NULL;
    if (pmat && !pk) {
        vs_free(w), vs_free(x), vs_free(y), vs_free(tmp);
        fprintf(stderr, "vlmspec kbench: out of memory for %d repacked copies of %zu bytes\n", copies, pmat);
        return 1;
    }
    for (int c = 0; pk && c < copies; c++) vs_x16_pack(t, w, n_out, n_in, pk + (size_t)c * pmat);
    for (int64_t i = 0; i < max_rows * n_in; i++) x[i] = vs_rng_normal(&rng);

    printf("\n%s  W %lld x %lld (%.2f MB), %d cop%s cycled (%.0f MB), %d threads, isa %s\n", vs_type_name(t),
           (long long)n_out, (long long)n_in, (double)mat / 1e6, copies, copies == 1 ? "y" : "ies",
           (double)mat * copies / 1e6, vs_threadpool_size(tp), vs_isa_name(vs_isa_active()));
    printf("%6s %12s %10s %10s %10s %9s %10s  %s\n", "rows", "median_us", "GB/s", "GFLOP/s", "T/T(1)",
           "roof%", "cpu_us", "path");
    double t1 = 0.0;
    double *times = vs_malloc(sizeof(double) * (size_t)reps), *cpu = vs_malloc(sizeof(double) * (size_t)reps);
    int next = 0;
    for (int ri = 0; ri < n_rows_list; ri++) {
        int64_t n = rows[ri];
        for (int k = 0; k < 2; k++, next = (next + 1) % copies) /* warm-up */
            run_mm(tp, t, w + (size_t)next * mat, pk ? pk + (size_t)next * pmat : NULL, n_out, n_in, x, n, y);
        for (int k = 0; k < reps; k++, next = (next + 1) % copies) {
            double c0 = cpu_now(), t0 = vs_time_now();
            run_mm(tp, t, w + (size_t)next * mat, pk ? pk + (size_t)next * pmat : NULL, n_out, n_in, x, n, y);
            times[k] = vs_time_now() - t0;
            cpu[k] = cpu_now() - c0;
        }
        qsort(times, (size_t)reps, sizeof(double), cmp_double);
        qsort(cpu, (size_t)reps, sizeof(double), cmp_double);
        double med = times[reps / 2];
        if (n == 1) t1 = med;
        double gbs = (double)(pk ? pmat : mat) / med / 1e9; /* the bytes the kernel streams */
        double gflops = 2.0 * (double)n_out * (double)n_in * (double)n / med / 1e9;
        char ratio[32] = "-";
        if (t1 > 0) snprintf(ratio, sizeof(ratio), "%.2f", med / t1);
        printf("%6lld %12.1f %10.1f %10.1f %10s %8.0f%% %10.1f  %s%s\n", (long long)n, med * 1e6, gbs, gflops,
               ratio, bw > 0 ? 100.0 * gbs / bw : 0.0, cpu[reps / 2] * 1e6,
               pk ? vs_matmul_x16_path(t, n_out, n_in, n) : vs_matmul_path(t, n_out, n_in, n, VS_MM_DEFAULT),
               pk ? " (x16)" : "");
    }
    printf("roofline at %.1f GB/s: %.1f us per call\n", bw, (double)mat / (bw * 1e9) * 1e6);
    vs_free(times);
    vs_free(cpu);
    vs_free(w), vs_free(x), vs_free(y), vs_free(tmp), vs_free(pk);
    return 0;
}

typedef struct kb_rows {
    int64_t *rows;
    int *n;
} kb_rows;

static bool parse_rows(const char *cmd, const char *flag, const char *v, void *dst) {
    kb_rows *r = dst;
    *r->n = parse_list(v, r->rows, KB_MAX_ROWS, 1, 4096);
    if (*r->n > 0) return true;
    cli_fail(cmd, "%s expects a comma list of 1..4096, got '%s'", flag, v);
    return false;
}

/* --isa caps the kernels' instruction set for the whole process (as VLMSPEC_ISA does). */
static bool parse_isa(const char *cmd, const char *flag, const char *v, void *dst) {
    (void)dst;
    static const struct {
        const char *name;
        vs_isa isa;
    } isas[] = {{"scalar", VS_ISA_SCALAR}, {"avx2", VS_ISA_AVX2}, {"avx512", VS_ISA_AVX512}, {"amx", VS_ISA_AMX}};
    for (size_t k = 0; k < VS_ARRAY_LEN(isas); k++)
        if (!strcmp(v, isas[k].name)) {
            vs_isa_set_max(isas[k].isa);
            return true;
        }
    cli_fail(cmd, "%s expects scalar, avx2, avx512 or amx, got '%s'", flag, v);
    return false;
}

int vs_cmd_kbench(int argc, char **argv) {
    const char *cmd = "kbench";
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN), reps = 30;
    if (threads < 1) threads = 1;
    int64_t n_out = 5632, n_in = 2048;
    int64_t rows[KB_MAX_ROWS] = {1, 2, 4, 6, 8, 16, 32, 64};
    int n_rows_list = 8;
    double mem_mb = 256;
    const char *types = "Q8_0,Q4_0,F16,BF16,F32";
    kb_rows rl = {.rows = rows, .n = &n_rows_list};
    cli_flags fs = {0};
    cli_flag_add(&fs, "-t|--threads", CLI_INT, &threads, 1, 256);
    cli_flag_add(&fs, "--reps", CLI_INT, &reps, 1, 100000);
    cli_flag_add(&fs, "--out", CLI_I64, &n_out, 1, 1 << 20);
    cli_flag_add(&fs, "--in", CLI_I64, &n_in, 1, 1 << 20);
    cli_flag_add(&fs, "--mem", CLI_F64, &mem_mb, 0, 16384);
    cli_flag_add(&fs, "--type", CLI_STR, &types, 0, 0);
    cli_flag_fn_add(&fs, "--rows", parse_rows, &rl);
    cli_flag_fn_add(&fs, "--isa", parse_isa, NULL);
    const int r = cli_flags_parse(cmd, argc, argv, &fs, usage);
    if (r >= 0) return r;
    vs_type tl[8];
    int nt = 0;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", types);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int t = vs_type_from_name(tok);
        if (t < 0 || nt >= 8) {
            fprintf(stderr, "vlmspec kbench: unknown --type '%s'\n", tok);
            return 2;
        }
        if (vs_type_row_bytes((vs_type)t, n_in) == 0) {
            fprintf(stderr, "vlmspec kbench: --in %lld is not a multiple of %s's block size (%lld)\n", (long long)n_in,
                    vs_type_name(t), (long long)vs_type_block_size((vs_type)t));
            return 2;
        }
        tl[nt++] = (vs_type)t;
    }
    vs_error err;
    vs_threadpool *tp = vs_threadpool_new(threads, &err);
    if (!tp) return cli_fail_err(cmd, &err);
    double bw = vs_measure_read_bandwidth(tp, (size_t)512 << 20);
    printf("vlmspec kbench: %d threads, isa %s, measured read bandwidth %.1f GB/s (512 MB buffer, best of 5)\n",
           threads, vs_isa_name(vs_isa_active()), bw);
    printf("(timings are noisy when other processes share the cores)\n");
    int rc = 0;
    for (int i = 0; i < nt && rc == 0; i++) rc = bench_type(tp, tl[i], n_out, n_in, rows, n_rows_list, mem_mb, reps, bw);
    vs_threadpool_free(tp);
    return rc;
}
