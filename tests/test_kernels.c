/* test_kernels: every ISA path this CPU has (scalar, AVX2, AVX-512) against the scalar twins, and the
 * twins against a plain double-precision reference, for all five weight types, random shapes (n_in not
 * a multiple of the vector width, n_out not a multiple of 16, n_rows 1..64), 1 to 3 threads.
 *
 * Named tolerances (S = sum_i |w_i| |x_i| for that output, w dequantised, in double):
 *   TOL_TWIN   fast path vs vs_matmul_ref: |diff| <= 1e-5 * S. Both do the same math (for Q8_0/Q4_0 the
 *              same 8-bit activations and exact integer block dots); only the f32 summation order
 *              differs, so ~1e-7 * S is typical.
 *   TOL_FLOAT  F32/F16/BF16 vs the double reference: |diff| <= 1e-5 * S (f32 accumulation).
 *   TOL_QUANT  Q8_0/Q4_0 vs the double reference with UNquantised activations: the activation
 *              quantisation error bound sum_b (amax_b * (1/254 + 1/2048)) * sum_{i in b} |w_i| (half a
 *              step, plus the fp16 rounding of the scale), plus 1e-5 * S.
 *   TOL_SPLIT  extra allowance for F16/BF16 on the AMX-BF16 path (kernels_amxbf16_avx512.c): it
 *              multiplies bf16 parts, w = wh + wl exactly but x ~ xh + xl with |x - xh - xl| <= 2^-16
 *              |x|, so each product is off by at most 2^-16 |w x|: |diff| <= (TOL + 2^-16) * S.
 *   K-quants (Q4_K/Q5_K/Q6_K, test_kquant): every path (the scalar twin vs_matmul_ref, the threaded scalar
 *              path, AVX2; 1 and 2 threads; 1..65 rows) BITWISE equal (exact integer super-block parts,
 *              one shared float epilogue); and the twin vs a double reference with the dequantised
 *              weights and the dequantised 8-bit activations: |diff| <= TOL_KQ * S' (S' = sum |w| |xq|:
 *              only the f32 rounding of the epilogue and of the sum over super-blocks remains).
 *   Vector ops vs their scalar twins: dot 1e-5 * sum|a b|; axpy 1e-6 relative; rmsnorm 1e-5 relative;
 *   softmax 1e-6 absolute + 1e-5 relative (polynomial exp, ~2e-7 relative). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "arch/kernels_arch.h"
#include "kernels.h"
#include "testutil.h"

#define TOL_TWIN 1e-5
#define TOL_FLOAT 1e-5
#define TOL_QUANT_STEP (1.0 / 254.0 + 1.0 / 2048.0)
#define TOL_SPLIT (1.0 / 65536.0)
#define TOL_KQ 1e-5

static const vs_type k_types[] = {VS_TYPE_F32, VS_TYPE_F16, VS_TYPE_BF16, VS_TYPE_Q8_0, VS_TYPE_Q4_0};

typedef struct problem {
    vs_type t;
    int64_t n_out, n_in, n_rows;
    uint8_t *w;   /* (n_out, row_bytes) */
    float *wdq;   /* (n_out, n_in) dequantised */
    float *x;     /* (n_rows, n_in) */
    double *yd;   /* (n_rows, n_out) double reference with exact x */
    double *S;    /* (n_rows, n_out) sum |w||x| */
    double *Q;    /* (n_rows, n_out) activation-quantisation error bound */
} problem;

static void problem_make(problem *p, vs_type t, int64_t n_out, int64_t n_in, int64_t n_rows, vs_rng *rng) {
    p->t = t;
    p->n_out = n_out;
    p->n_in = n_in;
    p->n_rows = n_rows;
    size_t rb = vs_type_row_bytes(t, n_in);
    p->w = vs_malloc(rb * (size_t)n_out);
    p->wdq = malloc(sizeof(float) * (size_t)(n_out * n_in));
    p->x = malloc(sizeof(float) * (size_t)(n_rows * n_in));
    p->yd = malloc(sizeof(double) * (size_t)(n_rows * n_out));
    p->S = malloc(sizeof(double) * (size_t)(n_rows * n_out));
    p->Q = malloc(sizeof(double) * (size_t)(n_rows * n_out));
    float *tmp = malloc(sizeof(float) * (size_t)n_in);
    for (int64_t o = 0; o < n_out; o++) {
        for (int64_t i = 0; i < n_in; i++) tmp[i] = vs_rng_normal(rng) * (o % 7 == 3 ? 4.0f : 0.5f);
        if (o % 11 == 5) tmp[0] = 0.0f;
        vs_quantize_row(t, tmp, p->w + o * rb, n_in);
        vs_dequantize_row(t, p->w + o * rb, p->wdq + o * n_in, n_in);
    }
    for (int64_t r = 0; r < n_rows; r++) {
        float *xr = p->x + r * n_in;
        float scale = r % 5 == 4 ? 100.0f : 1.0f;
        for (int64_t i = 0; i < n_in; i++) xr[i] = vs_rng_normal(rng) * scale;
        if (r % 9 == 8) memset(xr, 0, sizeof(float) * (size_t)n_in);           /* an all-zero row */
        if (n_in >= 64 && r % 3 == 1) memset(xr + 32, 0, sizeof(float) * 32);  /* an all-zero block */
        if (r % 4 == 2) xr[n_in - 1] = 1e4f;                                  /* one outlier */
    }
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t o = 0; o < n_out; o++) {
            double s = 0, a = 0, q = 0;
            for (int64_t b = 0; b < (n_in + 31) / 32; b++) {
                double amax = 0, wsum = 0;
                for (int64_t i = b * 32; i < VS_MIN(n_in, b * 32 + 32); i++) {
                    double wv = p->wdq[o * n_in + i], xv = p->x[r * n_in + i];
                    s += wv * xv;
                    a += fabs(wv * xv);
                    amax = fmax(amax, fabs(xv));
                    wsum += fabs(wv);
                }
                q += amax * TOL_QUANT_STEP * wsum;
            }
            p->yd[r * n_out + o] = s;
            p->S[r * n_out + o] = a;
            p->Q[r * n_out + o] = q;
        }
    free(tmp);
}

static void problem_free(problem *p) {
    vs_free(p->w);
    free(p->wdq);
    free(p->x);
    free(p->yd);
    free(p->S);
    free(p->Q);
}

/* Worst |diff| / S against the twin, and worst |diff| / tolerance against the double reference; worst
 * |diff| / S against the double reference on the AMX-BF16 path. */
static double g_worst_twin, g_worst_ref, g_worst_split;

static bool is_quant(vs_type t) { return t == VS_TYPE_Q8_0 || t == VS_TYPE_Q4_0; }

/* The flags every matmul of the tests passes (the AMX ISA runs the suites with VS_MM_DEFAULT and with
 * VS_MM_AMX_BF16, which puts F16/BF16 of every size on the AMX-BF16 tiles). */
static unsigned g_mm_flags;

static void mm(vs_threadpool *tp, vs_type t, const void *w, int64_t n_out, int64_t n_in, const float *x,
               int64_t n_rows, float *y) {
    vs_matmul_ex(tp, t, w, n_out, n_in, x, n_rows, y, g_mm_flags);
}

/* Whether mm now runs this weight matrix on the AMX-BF16 path. */
static bool on_split_path(vs_type t, int64_t n_out, int64_t n_in) {
    return !strcmp(vs_matmul_path(t, n_out, n_in, 1, g_mm_flags), "amx-bf16");
}

/* Checks y against the twin (yr) and the double reference; returns the number of bad elements. */
static int check_y(const problem *p, const float *y, const float *yr, const char *what) {
    int bad = 0;
    double worst_twin = 0, worst_ref = 0;
    const bool split = y != yr && on_split_path(p->t, p->n_out, p->n_in);
    const double extra = split ? TOL_SPLIT : 0.0;
    for (int64_t k = 0; k < p->n_rows * p->n_out; k++) {
        double S = p->S[k] + 1e-30;
        double dt = fabs((double)y[k] - (double)yr[k]);
        double tol_ref = is_quant(p->t) ? p->Q[k] + TOL_FLOAT * S : (TOL_FLOAT + extra) * S;
        double dr = fabs((double)y[k] - p->yd[k]);
        worst_twin = fmax(worst_twin, dt / S);
        worst_ref = fmax(worst_ref, dr / (tol_ref + 1e-30));
        if (split) g_worst_split = fmax(g_worst_split, dr / S);
        if (!(dt <= (TOL_TWIN + extra) * S) || !(dr <= tol_ref)) {
            if (bad < 3)
                fprintf(stderr, "  %s %s out %lld x %lld rows %lld: elem %lld y %.9g twin %.9g ref %.9g S %.3g\n",
                        what, vs_type_name(p->t), (long long)p->n_out, (long long)p->n_in,
                        (long long)p->n_rows, (long long)k, y[k], yr[k], p->yd[k], S);
            bad++;
        }
    }
    if (worst_twin > g_worst_twin) g_worst_twin = worst_twin;
    if (worst_ref > g_worst_ref) g_worst_ref = worst_ref;
    return bad;
}

static void test_matmul(vs_isa isa, vs_threadpool **pools, int n_pools) {
    static const int64_t rows_list[] = {1, 2, 3, 5, 6, 7, 8, 16, 17, 33, 64, 130};
    static const int64_t out_list[] = {1, 5, 16, 17, 33, 100, 131};
    static const int64_t in_float[] = {1, 7, 16, 33, 100, 257, 320, 1000};
    static const int64_t in_quant[] = {32, 64, 96, 160, 288, 1056};
    vs_rng rng;
    vs_rng_seed(&rng, 1234 + (uint64_t)isa);
    int total_bad = 0, cases = 0;
    g_worst_twin = g_worst_ref = g_worst_split = 0;
    for (size_t ti = 0; ti < VS_ARRAY_LEN(k_types); ti++) {
        vs_type t = k_types[ti];
        for (size_t ri = 0; ri < VS_ARRAY_LEN(rows_list); ri++) {
            int64_t n_rows = rows_list[ri];
            int64_t n_out = out_list[vs_rng_below(&rng, VS_ARRAY_LEN(out_list))];
            int64_t n_in = is_quant(t) ? in_quant[vs_rng_below(&rng, VS_ARRAY_LEN(in_quant))]
                                       : in_float[vs_rng_below(&rng, VS_ARRAY_LEN(in_float))];
            if (n_rows >= 33 && n_in > 300) n_in = is_quant(t) ? 288 : 257; /* keep the test quick */
            if (n_rows >= 128) n_out = VS_MIN(n_out, 33);
            problem p;
            problem_make(&p, t, n_out, n_in, n_rows, &rng);
            size_t ny = (size_t)(n_rows * n_out);
            float *yr = malloc(sizeof(float) * ny), *y = malloc(sizeof(float) * ny);
            vs_matmul_ref(t, p.w, n_out, n_in, p.x, n_rows, yr);
            for (int pi = 0; pi < n_pools; pi++) {
                for (size_t k = 0; k < ny; k++) y[k] = NAN;
                mm(pools[pi], t, p.w, n_out, n_in, p.x, n_rows, y);
                char what[64];
                snprintf(what, sizeof(what), "%s/%dt", vs_isa_name(isa), vs_threadpool_size(pools[pi]));
                int bad = check_y(&p, y, yr, what);
                VT_CHECK(bad == 0, "%s %s: %d of %zu outputs out of tolerance", what, vs_type_name(t), bad, ny);
                total_bad += bad;
                cases++;
            }
            free(y);
            free(yr);
            problem_free(&p);
        }
    }
    printf("kernels: %s matmul: %d cases, %d bad outputs; worst |y - twin| / S = %.2g (tol %g), worst "
           "|y - double ref| / its tolerance = %.2g\n",
           vs_isa_name(isa), cases, total_bad, g_worst_twin, TOL_TWIN, g_worst_ref);
    if (g_worst_split > 0)
        printf("kernels: %s F16/BF16 on AMX-BF16 tiles: worst |y - double ref| / S = %.2g (tol %.2g)\n",
               vs_isa_name(isa), g_worst_split, TOL_FLOAT + TOL_SPLIT);
}

/* The twin itself against the double reference (once: it does not depend on the ISA). */
static void test_ref_against_double(void) {
    vs_rng rng;
    vs_rng_seed(&rng, 99);
    for (size_t ti = 0; ti < VS_ARRAY_LEN(k_types); ti++) {
        vs_type t = k_types[ti];
        problem p;
        problem_make(&p, t, 37, is_quant(t) ? 320 : 301, 5, &rng);
        float *y = malloc(sizeof(float) * 37 * 5);
        vs_matmul_ref(t, p.w, 37, p.n_in, p.x, 5, y);
        int bad = check_y(&p, y, y, "ref");
        VT_CHECK(bad == 0, "ref %s: %d outputs off the double reference", vs_type_name(t), bad);
        free(y);
        problem_free(&p);
    }
}

/* The quantised-activation layouts all hold the same q and d as the scalar quantiser. */
static void test_xq(vs_isa best) {
    vs_rng rng;
    vs_rng_seed(&rng, 5);
    for (int64_t n_in = 32; n_in <= 320; n_in += 32) {
        float x[320];
        for (int64_t i = 0; i < n_in; i++) x[i] = vs_rng_normal(&rng) * (i < 32 ? 1e-3f : 3.0f);
        x[5] = x[6] = 0.0f; /* zeros, and ties below */
        if (n_in >= 64) {
            x[32] = 127.0f;
            x[33] = 2.5f; /* q = 2.5 exactly: ties to even -> 2 */
            x[34] = -3.5f;
        }
        size_t rb = vs_xq_row_bytes_ref(n_in);
        uint8_t *ref = vs_malloc(rb), *a2 = vs_malloc(rb);
        vs_xq_quantize_row_ref(x, n_in, ref);
        int bad = 0;
        if (n_in >= 64) bad += ((int8_t *)ref)[33] != 2 || ((int8_t *)ref)[34] != -4;
        if (best >= VS_ISA_AVX2) {
            vs_xq_quantize_row_avx2(x, n_in, a2);
            bad += memcmp(ref, a2, (size_t)n_in) != 0;
            bad += memcmp(ref + (n_in + 63) / 64 * 64, a2 + (n_in + 63) / 64 * 64, (size_t)n_in / 32 * 4) != 0;
        }
        const int8_t *qref = (const int8_t *)ref;
        const float *dref = (const float *)(ref + (n_in + 63) / 64 * 64);
        /* the AMX layout by its documented rule: the AVX-512 quantiser, and the AVX2 one of AVX-VNNI CPUs */
        for (int qi = 0; qi < 2; qi++) {
            if (qi == 0 ? best < VS_ISA_AVX512 : !vs_cpu_avxvnni()) continue;
            for (int ti = 0; ti < 2; ti++) {
                bool q4 = ti == 1;
                int64_t n_rows = 5; /* N = 8, G = 1: this row is column 3, rows 5..7 are padding */
                int N = vs_xq_amx_N(n_rows);
                size_t chunk = vs_xq_amx_chunk(N);
                uint8_t *am = vs_malloc(vs_xq_amx_bytes(n_in, n_rows));
                memset(am, 0x5a, vs_xq_amx_bytes(n_in, n_rows));
                for (int64_t r = 0; r < N; r++)
                    (qi ? vs_xq_quantize_row_amx_avx2 : vs_xq_quantize_row_amx)(r == 3 ? x : NULL, n_in,
                                                                                q4 ? VS_TYPE_Q4_0 : VS_TYPE_Q8_0, n_rows, r, am);
                for (int64_t blk = 0; blk < n_in / 32; blk++) {
                    const uint8_t *ch = am + blk * chunk;
                    int sum = 0;
                    for (int k = 0; k < 32; k++) {
                        int v = k; /* Q8_0: a B tile ([k / 4][N][4]); Q4_0: an A tile (rows of 32) */
                        size_t at3 = q4 ? (size_t)(32 * 3 + k) : (size_t)((k / 4) * N + 3) * 4 + k % 4;
                        size_t at5 = q4 ? (size_t)(32 * 5 + k) : (size_t)((k / 4) * N + 5) * 4 + k % 4;
                        bad += (int8_t)ch[at3] != qref[blk * 32 + v];
                        bad += ch[at5] != 0; /* a padding row */
                        sum += qref[blk * 32 + v];
                    }
                    const float *dd = (const float *)(ch + 32 * N);
                    const int32_t *cc = (const int32_t *)(ch + 32 * N + 64);
                    bad += dd[3] != dref[blk] || dd[5] != 0.0f || dd[12] != 0.0f;
                    bad += cc[3] != (q4 ? -8 : -128) * sum || cc[5] != 0;
                }
                vs_free(am);
            }
        }
        VT_CHECK(bad == 0, "activation quantisers disagree for n_in %lld (%d)", (long long)n_in, bad);
        vs_free(ref);
        vs_free(a2);
    }
}

/* The exact fp16 split of the AMX-BF16 path: for every finite fp16 w, (hi + lo) * 2^102 == w with hi and
 * lo normal bf16 values (hi = w truncated to 8 significant bits, times 2^-102), and the AVX-512 split (fp16
 * arithmetic, an f32 route for |w| >= 64) gives the same bits. */
static void test_f16_split(void) {
    static uint16_t w[65536], hi[65536], lo[65536], hi2[65536], lo2[65536];
    int n = 0, bad = 0;
    for (uint32_t h = 0; h < 65536; h++)
        if ((h & 0x7c00) != 0x7c00) w[n++] = (uint16_t)h; /* finite values */
    vs_f16_split_bf16_ref(w, n, hi, lo);
    for (int i = 0; i < n; i++) {
        double wv = vs_fp16_to_fp32(w[i]);
        double hv = ldexp(vs_bf16_to_fp32(hi[i]), 102), lv = ldexp(vs_bf16_to_fp32(lo[i]), 102);
        bad += hv + lv != wv;                                   /* exact (no rounding in double either) */
        bad += fabs(lv) > ldexp(fabs(wv), -7);                  /* the low part is small */
        bad += wv != 0 && (hv == 0 || (hv > 0) != (wv > 0));    /* hi carries the value and its sign */
        bad += lv != 0 && fabs(lv) < ldexp(1.0, -24);           /* no bf16 denormals (AMX reads them as 0) */
        bad += (hi[i] & 0x7f80) == 0 && (hi[i] & 0x7f) != 0;    /* ... in the scaled bits either */
        bad += (lo[i] & 0x7f80) == 0 && (lo[i] & 0x7f) != 0;
    }
    VT_CHECK(bad == 0, "fp16 -> bf16 hi + lo split is not exact for %d values", bad);
    if (vs_cpu_amx_bf16()) {
        vs_f16_split_bf16_avx512(w, n, hi2, lo2);
        size_t nb = sizeof(uint16_t) * (size_t)n;
        VT_CHECK(!memcmp(hi, hi2, nb) && !memcmp(lo, lo2, nb),
                 "AVX-512 fp16 split differs from the scalar twin");
    }
    printf("kernels: fp16 -> bf16 hi + lo split exact for all %d finite fp16 values\n", n);
}

/* The AMX-BF16 activation layout ("xb"): the AVX-512 converter equals the scalar twin bit for bit (both
 * weight types, tails of n_in, padding rows, denormals, ties), and xh + xl is within 2^-16 |x|. */
static void test_xb(void) {
    static const int64_t ins[] = {1, 7, 16, 31, 32, 33, 100, 320};
    static const vs_type types[] = {VS_TYPE_F16, VS_TYPE_BF16};
    vs_rng rng;
    vs_rng_seed(&rng, 17);
    int bad = 0;
    double worst = 0;
    for (size_t ii = 0; ii < VS_ARRAY_LEN(ins); ii++) {
        int64_t n_in = ins[ii], n_rows = 11; /* G = 2: rows 11..15 are padding */
        float *x = malloc(sizeof(float) * (size_t)(n_rows * n_in));
        for (int64_t i = 0; i < n_rows * n_in; i++) x[i] = vs_rng_normal(&rng) * (i % 5 == 0 ? 1e3f : 1.0f);
        x[0] = 1e-40f;                         /* an f32 denormal: read as 0 */
        if (n_in > 3) x[3] = 1.0f + 0x1p-8f; /* ties for the hi rounding: to 1, and to 1 + 2^-6 */
        if (n_in > 4) x[4] = 1.0f + 0x3p-8f;
        if (n_in > 5) x[5] = -0.0f;
        for (size_t ti = 0; ti < VS_ARRAY_LEN(types); ti++) {
            vs_type t = types[ti];
            size_t bytes = vs_xb_bytes(t, n_in, n_rows);
            uint8_t *a = vs_malloc(bytes), *b = vs_malloc(bytes);
            memset(a, 0x5a, bytes);
            memset(b, 0xa5, bytes);
            for (int64_t r = 0; r < vs_xb_G(n_rows) * 8; r++)
                vs_xb_convert_row_ref(r < n_rows ? x + r * n_in : NULL, n_in, t, n_rows, r, a);
            for (int64_t g = 0; vs_cpu_amx_bf16() && g < vs_xb_G(n_rows); g++)
                vs_xb_convert_group_avx512(x, n_in, t, n_rows, g, b);
            if (vs_cpu_amx_bf16()) bad += memcmp(a, b, bytes) != 0;
            /* read row 9 (group 1, column pair 2, 3) back from the twin's layout */
            const size_t chunk = vs_xb_chunk(t);
            const int64_t G = vs_xb_G(n_rows);
            const int scale = t == VS_TYPE_F16 ? -62 : 0; /* F16: stored times 2^62 */
            for (int64_t i = 0; i < vs_xb_steps(n_in) * 32; i++) {
                const uint16_t *ch = (const uint16_t *)(a + (size_t)((i / 32) * G + 1) * chunk);
                int k = (int)(i % 32);
                size_t at = (size_t)((k / 2) * 32 + 4 + k % 2);
                double xh = ldexp(vs_bf16_to_fp32(ch[at]), scale);
                double xl = ldexp(vs_bf16_to_fp32(ch[at + 2]), scale);
                double xv = i < n_in ? x[9 * n_in + i] : 0.0;
                double err = fabs(xv - xh - xl);
                bad += !(err <= ldexp(fabs(xv), -16));
                if (xv != 0) worst = fmax(worst, err / fabs(xv));
                /* a padding row (15) is zero */
                bad += ch[at + 24] != 0 || ch[at + 26] != 0;
            }
            vs_free(a);
            vs_free(b);
        }
        free(x);
    }
    VT_CHECK(bad == 0, "AMX-BF16 activation layout: %d mismatches", bad);
    printf("kernels: AMX-BF16 activation split: worst |x - xh - xl| / |x| = %.2g (bound 2^-16 = %.2g)\n",
           worst,
           ldexp(1.0, -16));
}

/* F16 weights of magnitude >= 64 take the AMX-BF16 kernel's f32 conversion route (the fp16 one would
 * overflow): against the twin, and one row alone against a batch. Runs on every ISA (cheap). */
static void test_f16_large_weights(vs_threadpool *tp) {
    const int64_t n_out = 37, n_in = 100, n_rows = 9;
    vs_rng rng;
    vs_rng_seed(&rng, 64);
    size_t rb = vs_type_row_bytes(VS_TYPE_F16, n_in);
    uint8_t *w = vs_malloc(rb * n_out);
    float tmp[100], x[9 * 100], y[9 * 37], yr[9 * 37], y1[37];
    for (int64_t o = 0; o < n_out; o++) {
        for (int64_t i = 0; i < n_in; i++) tmp[i] = vs_rng_normal(&rng) * (o % 3 == 0 ? 3000.0f : 0.7f);
        vs_quantize_row(VS_TYPE_F16, tmp, w + o * rb, n_in);
    }
    for (int64_t i = 0; i < n_rows * n_in; i++) x[i] = vs_rng_normal(&rng);
    mm(tp, VS_TYPE_F16, w, n_out, n_in, x, n_rows, y);
    vs_matmul_ref(VS_TYPE_F16, w, n_out, n_in, x, n_rows, yr);
    int bad = 0;
    for (int64_t r = 0; r < n_rows; r++) {
        for (int64_t o = 0; o < n_out; o++) {
            double S = 0;
            for (int64_t i = 0; i < n_in; i++) {
                uint16_t h;
                memcpy(&h, w + o * rb + 2 * i, 2);
                S += fabs((double)vs_fp16_to_fp32(h) * x[r * n_in + i]);
            }
            bad += !(fabs((double)y[r * n_out + o] - yr[r * n_out + o]) <= (TOL_TWIN + TOL_SPLIT) * S);
        }
        mm(tp, VS_TYPE_F16, w, n_out, n_in, x + r * n_in, 1, y1);
        bad += memcmp(y1, y + r * n_out, sizeof(y1)) != 0;
    }
    VT_CHECK(bad == 0, "%s: F16 weights up to ~1e4: %d mismatches", vs_isa_name(vs_isa_active()), bad);
    vs_free(w);
}

/* ---- batch invariance ----
 * The guarantee in kernels.h: for a fixed ISA, row r of vs_matmul over n rows is BITWISE equal to
 * vs_matmul over that row alone, for any thread count (speculative decoding verifies k drafted rows in
 * one batch and must reproduce single-row decoding exactly). F32/F16/BF16 with BLAS (n >= 128) are the
 * documented exception, checked here with BLAS off. Returns the number of differing rows. */
static int invariance_case(vs_type t, int64_t n_out, int64_t n_in, const int64_t *ns, size_t n_ns,
                           vs_threadpool **pools, int n_pools, vs_rng *rng) {
    int64_t max_rows = 0;
    for (size_t k = 0; k < n_ns; k++) max_rows = VS_MAX(max_rows, ns[k]);
    size_t rb = vs_type_row_bytes(t, n_in);
    uint8_t *w = vs_malloc(rb * (size_t)n_out);
    float *x = malloc(sizeof(float) * (size_t)(max_rows * n_in));
    float *single = malloc(sizeof(float) * (size_t)(max_rows * n_out));
    float *y = malloc(sizeof(float) * (size_t)(max_rows * n_out));
    float *tmp = malloc(sizeof(float) * (size_t)n_in);
    for (int64_t o = 0; o < n_out; o++) {
        for (int64_t i = 0; i < n_in; i++) tmp[i] = vs_rng_normal(rng) * (o % 7 == 3 ? 4.0f : 0.5f);
        vs_quantize_row(t, tmp, w + o * rb, n_in);
    }
    for (int64_t r = 0; r < max_rows; r++)
        for (int64_t i = 0; i < n_in; i++) {
            float v = vs_rng_normal(rng) * (r % 5 == 4 ? 30.0f : 1.0f);
            if (i % 32 == 7) v = (float)(int)(v * 4) * 0.5f; /* values that quantise to ties */
            x[r * n_in + i] = v;
        }
    for (int64_t r = 0; r < max_rows; r++) mm(NULL, t, w, n_out, n_in, x + r * n_in, 1, single + r * n_out);
    int bad = 0;
    for (int pi = 0; pi < n_pools; pi++) {
        /* the single rows again on this pool: thread count does not matter either */
        for (int64_t r = 0; r < max_rows && pi > 0; r += 7) {
            mm(pools[pi], t, w, n_out, n_in, x + r * n_in, 1, y);
            bad += memcmp(y, single + r * n_out, sizeof(float) * (size_t)n_out) != 0;
        }
        for (size_t k = 0; k < n_ns; k++) {
            int64_t n = ns[k];
            mm(pools[pi], t, w, n_out, n_in, x, n, y);
            for (int64_t r = 0; r < n; r++) {
                if (memcmp(y + r * n_out, single + r * n_out, sizeof(float) * (size_t)n_out) == 0) continue;
                if (bad < 4) {
                    int64_t o = 0;
                    while (y[r * n_out + o] == single[r * n_out + o]) o++;
                    fprintf(stderr, "  %s %s %lld x %lld, %d threads: row %lld of %lld, out %lld: %.9g vs single %.9g\n",
                            vs_isa_name(vs_isa_active()), vs_type_name(t), (long long)n_out, (long long)n_in,
                            vs_threadpool_size(pools[pi]), (long long)r, (long long)n, (long long)o,
                            y[r * n_out + o], single[r * n_out + o]);
                }
                bad++;
            }
        }
    }
    vs_free(w);
    free(x);
    free(single);
    free(y);
    free(tmp);
    return bad;
}

static void test_batch_invariance(vs_isa isa, vs_threadpool **pools, int n_pools) {
    static const int64_t ns_all[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 24, 32, 33, 64, 65};
    static const int64_t ns_big[] = {1, 2, 4, 6, 16, 17, 33, 65};
    static const int64_t ns_large[] = {130}; /* the many-row paths (AMX groups; BLAS off for float) */
    vs_rng rng;
    vs_rng_seed(&rng, 4321 + (uint64_t)isa);
    bool blas = vs_matmul_set_blas(false);
    int bad = 0, cases = 0;
    for (size_t ti = 0; ti < VS_ARRAY_LEN(k_types); ti++) {
        vs_type t = k_types[ti];
        int64_t in_odd = is_quant(t) ? 288 : 301;
        bad += invariance_case(t, 131, in_odd, ns_all, VS_ARRAY_LEN(ns_all), pools, n_pools, &rng);
        bad += invariance_case(t, 37, 2 * in_odd, ns_large, 1, pools, n_pools, &rng);
        cases += 2;
        /* the reference model's FFN shape on the fast paths (the scalar path would take too long) */
        if (isa >= VS_ISA_AVX2 && t != VS_TYPE_F32 && t != VS_TYPE_BF16) {
            bad += invariance_case(t, 5632, 2048, ns_big, VS_ARRAY_LEN(ns_big), pools, n_pools, &rng);
            cases++;
        }
    }
    vs_matmul_set_blas(blas);
    /* F16 / BF16 on AMX-BF16 tiles never go to BLAS: invariant for every row count, BLAS on or off */
    static const int64_t ns_prefill[] = {1, 130, 600}; /* 600: more than 512 rows, done in pieces */
    for (int ti = 0; ti < 2; ti++) {
        vs_type t = ti == 0 ? VS_TYPE_F16 : VS_TYPE_BF16;
        if (!on_split_path(t, 33, 301)) continue;
        bad += invariance_case(t, 33, 301, ns_prefill, VS_ARRAY_LEN(ns_prefill), pools, n_pools, &rng);
        cases++;
    }
    /* the largest matrix the AMX-BF16 path takes by default (4 MiB of F16), long rows */
    if (on_split_path(VS_TYPE_F16, 1024, 2048)) {
        bad += invariance_case(VS_TYPE_F16, 1024, 2048, ns_big, VS_ARRAY_LEN(ns_big), pools, n_pools, &rng);
        cases++;
    }
    VT_CHECK(bad == 0, "%s: %d rows of a batch differ from the same row alone (batch invariance)",
             vs_isa_name(isa), bad);
    printf("kernels: %s batch invariance: %d shapes x %d pools, %d differing rows\n", vs_isa_name(isa), cases,
           n_pools, bad);
}

/* vs_matmul_multi (several matrices over the same activations, one conversion on the tiles) is BITWISE the
 * separate vs_matmul_ex calls: every weight type (the quantised ones and F32 take separate calls), part
 * shapes of a layer's q / k / v and odd ones, row counts on both sides of the tiles' group and panel sizes,
 * one thread and two. `tiles` counts the cases where every part ran on the tiles (the shared conversion). */
static void test_matmul_multi(vs_isa isa, vs_threadpool **pools, int n_pools) {
    static const int64_t shapes[][4] = {{192, 192, 64, 64}, {301, 37, 130, 5}, {512, 512, 512, 0}};
    static const int64_t ns[] = {1, 3, 4, 8, 9, 33, 130, 600};
    vs_rng rng;
    vs_rng_seed(&rng, 777 + (uint64_t)isa);
    int bad = 0, cases = 0, tiles = 0;
    for (size_t ti = 0; ti < VS_ARRAY_LEN(k_types); ti++) {
        const vs_type t = k_types[ti];
        for (size_t si = 0; si < VS_ARRAY_LEN(shapes); si++) {
            const int64_t n_in = is_quant(t) && shapes[si][0] % 32 ? 288 : shapes[si][0]; /* whole blocks */
            if (isa == VS_ISA_SCALAR && n_in > 301) continue; /* slow, and nothing the other shapes miss */
            int np = 0;
            while (np < 3 && shapes[si][1 + np] > 0) np++;
            const size_t rb = vs_type_row_bytes(t, n_in);
            uint8_t *w[3];
            float *y[3], *ys[3];
            float *x = malloc(sizeof(float) * (size_t)(600 * n_in)), *tmp = malloc(sizeof(float) * (size_t)n_in);
            for (int64_t i = 0; i < 600 * n_in; i++) x[i] = vs_rng_normal(&rng) * (i % 97 == 5 ? 50.0f : 1.0f);
            vs_mm_part parts[3];
            bool all_tiles = true;
            for (int k = 0; k < np; k++) {
                const int64_t no = shapes[si][1 + k];
                w[k] = vs_malloc(rb * (size_t)no);
                for (int64_t o = 0; o < no; o++) {
                    for (int64_t i = 0; i < n_in; i++) tmp[i] = vs_rng_normal(&rng) * 0.5f;
                    vs_quantize_row(t, tmp, w[k] + o * rb, n_in);
                }
                y[k] = malloc(sizeof(float) * (size_t)(600 * no));
                ys[k] = malloc(sizeof(float) * (size_t)(600 * no));
                parts[k] = (vs_mm_part){w[k], no, y[k]};
                all_tiles &= on_split_path(t, no, n_in);
            }
            for (int pi = 0; pi < n_pools; pi++)
                for (size_t ni = 0; ni < VS_ARRAY_LEN(ns); ni++) {
                    const int64_t n = ns[ni];
                    if (isa == VS_ISA_SCALAR && n > 33) continue;
                    for (int k = 0; k < np; k++) {
                        mm(pools[pi], t, w[k], parts[k].n_out, n_in, x, n, ys[k]);
                        memset(y[k], 0xff, sizeof(float) * (size_t)(n * parts[k].n_out)); /* NaN: must be written */
                    }
                    /* other activations through the same scratch first: stale conversions must not pass */
                    mm(pools[pi], t, w[0], parts[0].n_out, n_in, x + (600 - n) * n_in, n, y[0]);
                    memset(y[0], 0xff, sizeof(float) * (size_t)(n * parts[0].n_out));
                    vs_matmul_multi(pools[pi], t, n_in, parts, np, x, n, g_mm_flags);
                    for (int k = 0; k < np; k++)
                        bad += memcmp(y[k], ys[k], sizeof(float) * (size_t)(n * parts[k].n_out)) != 0;
                    cases++;
                    tiles += all_tiles && np > 1 && n <= 512;
                }
            for (int k = 0; k < np; k++) vs_free(w[k]), free(y[k]), free(ys[k]);
            free(x), free(tmp);
        }
    }
    VT_CHECK(bad == 0, "%s: %d parts of vs_matmul_multi differ from separate products", vs_isa_name(isa), bad);
    if (isa == VS_ISA_AMX && vs_cpu_amx_bf16() && (g_mm_flags & VS_MM_AMX_BF16) && !getenv("VLMSPEC_AMX_BF16"))
        VT_CHECK(tiles > 0, "vs_matmul_multi: no case took the shared conversion on the tiles");
    printf("kernels: %s vs_matmul_multi: %d cases (%d with one shared conversion), %d differing parts\n",
           vs_isa_name(isa), cases, tiles, bad);
}

/* Q8_0 / Q4_0 repacked (the x16 layout of kernels.h): the layout read back by its documented rule gives
 * every weight and scale of the GGUF rows; vs_matmul_x16 is BITWISE equal to vs_matmul on the GGUF rows (on
 * AVX-512 and AMX the lane kernels read the copy, elsewhere the rows), for every row count and thread count. */
static void test_x16(vs_isa isa, vs_threadpool **pools, int n_pools) {
    /* last tiles of 3, 5, 16, 8 (one half) and 12 outputs (a partial second half) */
    static const int64_t shapes[][2] = {{131, 288}, {37, 576}, {16, 32}, {24, 96}, {300, 128}, {5632, 2048}};
    static const int64_t ns[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 24, 33, 65};
    vs_rng rng;
    vs_rng_seed(&rng, 99);
    int bad_layout = 0, bad = 0;
    for (int ti = 0; ti < 2; ti++) {
        const vs_type t = ti ? VS_TYPE_Q8_0 : VS_TYPE_Q4_0;
        const bool q8 = t == VS_TYPE_Q8_0;
        const size_t B = q8 ? 544 : 288, bbytes = q8 ? 34 : 18;
        for (size_t si = 0; si < VS_ARRAY_LEN(shapes); si++) {
            const int64_t n_out = shapes[si][0], n_in = shapes[si][1], nb = n_in / 32;
            /* the big shape only where a lane kernel runs (on the scalar and plain AVX2 paths it takes too long) */
            if (n_out > 1000 && isa < VS_ISA_AVX512 && !vs_x16_wanted(t)) continue;
            const size_t rb = vs_type_row_bytes(t, n_in), pb = vs_x16_bytes(t, n_out, n_in);
            VT_CHECK(pb == (size_t)((n_out + 15) / 16 * nb) * B, "x16 bytes %zu", pb);
            uint8_t *w = vs_malloc(rb * (size_t)n_out), *pk = vs_malloc(pb);
            float *tmp = malloc(sizeof(float) * (size_t)n_in);
            for (int64_t o = 0; o < n_out; o++) {
                for (int64_t i = 0; i < n_in; i++) tmp[i] = vs_rng_normal(&rng) * (o % 7 == 3 ? 4.0f : 0.5f);
                vs_quantize_row(t, tmp, w + o * rb, n_in);
            }
            memset(pk, 0xa5, pb);
            vs_x16_pack(t, w, n_out, n_in, pk);
            for (int64_t o = 0; o < (n_out + 15) / 16 * 16; o++)
                for (int64_t b = 0; b < nb; b++) {
                    const uint8_t *tile = pk + (size_t)(o / 16 * nb) * B, *blk = w + o * rb + b * (int64_t)bbytes;
                    uint16_t d, dw = 0;
                    memcpy(&d, tile + nb * (B - 32) + 32 * b + 2 * (o % 16), 2);
                    if (o < n_out) memcpy(&dw, blk, 2);
                    bad_layout += d != dw;
                    for (int v = 0; v < 32; v++) {
                        int q, want;
                        if (q8) {
                            q = (int8_t)tile[512 * b + 64 * (v / 4) + 4 * (o % 16) + v % 4];
                            want = o < n_out ? (int8_t)blk[2 + v] : 0;
                        } else {
                            uint8_t byte = tile[256 * b + 64 * ((v % 16) / 4) + 4 * (o % 16) + v % 4];
                            q = v < 16 ? byte & 15 : byte >> 4;
                            want = o < n_out ? (v < 16 ? blk[2 + v] & 15 : blk[2 + v - 16] >> 4) : 0;
                        }
                        bad_layout += q != want;
                    }
                }
            const int64_t max_rows = n_out > 1000 ? 17 : 65;
            float *x = malloc(sizeof(float) * (size_t)(max_rows * n_in));
            float *y = malloc(sizeof(float) * (size_t)(max_rows * n_out)), *yw = malloc(sizeof(float) * (size_t)(max_rows * n_out));
            for (int64_t i = 0; i < max_rows * n_in; i++) x[i] = vs_rng_normal(&rng) * (i % 97 == 5 ? 30.0f : 1.0f);
            for (int pi = 0; pi < n_pools; pi++)
                for (size_t k = 0; k < VS_ARRAY_LEN(ns); k++) {
                    const int64_t n = ns[k];
                    if (n > max_rows) continue;
                    vs_matmul(pools[pi], t, w, n_out, n_in, x, n, yw);
                    vs_matmul_x16(pools[pi], t, w, pk, n_out, n_in, x, n, y);
                    if (memcmp(y, yw, sizeof(float) * (size_t)(n * n_out))) {
                        if (bad < 4)
                            fprintf(stderr, "  %s %s x16 %lld x %lld, %lld rows, %d threads differs from the GGUF rows\n",
                                    vs_isa_name(isa), vs_type_name(t), (long long)n_out, (long long)n_in, (long long)n,
                                    vs_threadpool_size(pools[pi]));
                        bad++;
                    }
                }
            vs_free(w);
            vs_free(pk);
            free(tmp);
            free(x);
            free(y);
            free(yw);
        }
    }
    VT_CHECK(bad_layout == 0, "x16 layout: %d values differ from the documented rule", bad_layout);
    VT_CHECK(bad == 0, "%s: %d x16 products differ from the GGUF rows' (must be bitwise equal)", vs_isa_name(isa), bad);
    printf("kernels: %s x16 (repacked Q8_0 / Q4_0) bitwise equal to the GGUF rows: %d differing products\n",
           vs_isa_name(isa), bad);
}

/* Q8_0 / Q4_0 on AVX2 with AVX-VNNI: the path names, and the lane kernel bitwise equal to the AVX-512 one (the
 * same integers and float steps) on CPUs with both, from the GGUF rows and from the x16 copy. */
static void test_q_lanes_avxvnni(vs_isa best, vs_threadpool *tp) {
    if (!vs_cpu_avxvnni()) {
        printf("kernels: no AVX-VNNI on this CPU (or VLMSPEC_AVXVNNI=0): its Q8_0 / Q4_0 lane kernel not run\n");
        return;
    }
    vs_isa_set_max(VS_ISA_AVX2);
    const char *rp = getenv("VLMSPEC_REPACK");
    const bool copies = !(rp && !strcmp(rp, "0"));
    VT_CHECK(!strcmp(vs_matmul_path(VS_TYPE_Q8_0, 64, 64, 3, 0), "avx-vnni") &&
                 !strcmp(vs_matmul_path(VS_TYPE_Q4_0, 64, 64, 1, 0), "avx-vnni") &&
                 vs_x16_wanted(VS_TYPE_Q8_0) == copies && vs_x16_wanted(VS_TYPE_Q4_0) == copies,
             "AVX2 + AVX-VNNI: Q8_0 / Q4_0 path %s, copies %d %d", vs_matmul_path(VS_TYPE_Q8_0, 64, 64, 3, 0),
             vs_x16_wanted(VS_TYPE_Q8_0), vs_x16_wanted(VS_TYPE_Q4_0));
    vs_avxvnni_allow(false);
    VT_CHECK(!strcmp(vs_matmul_path(VS_TYPE_Q8_0, 64, 64, 3, 0), "avx2") && !vs_x16_wanted(VS_TYPE_Q4_0),
             "AVX-VNNI off: Q8_0 path %s", vs_matmul_path(VS_TYPE_Q8_0, 64, 64, 3, 0));
    vs_avxvnni_allow(true);
    vs_isa_set_max(best);
    if (best < VS_ISA_AVX512) return;
    static const int64_t shapes[][2] = {{131, 288}, {37, 576}, {300, 2048}};
    static const int64_t ns[] = {1, 2, 3, 4, 5, 8, 9, 16, 17, 33};
    vs_rng rng;
    vs_rng_seed(&rng, 123);
    int bad = 0, runs = 0;
    for (int ti = 0; ti < 2; ti++) {
        const vs_type t = ti ? VS_TYPE_Q8_0 : VS_TYPE_Q4_0;
        for (size_t si = 0; si < VS_ARRAY_LEN(shapes); si++) {
            const int64_t n_out = shapes[si][0], n_in = shapes[si][1], max_rows = 33;
            const size_t rb = vs_type_row_bytes(t, n_in), ny = (size_t)(max_rows * n_out);
            uint8_t *w = vs_malloc(rb * (size_t)n_out), *pk = vs_malloc(vs_x16_bytes(t, n_out, n_in));
            float *x = malloc(sizeof(float) * (size_t)(max_rows * n_in)), *tmp = malloc(sizeof(float) * (size_t)n_in);
            float *y[4];
            for (int k = 0; k < 4; k++) y[k] = malloc(sizeof(float) * ny);
            for (int64_t o = 0; o < n_out; o++) {
                for (int64_t i = 0; i < n_in; i++) tmp[i] = vs_rng_normal(&rng) * (o % 5 == 1 ? 3.0f : 0.4f);
                vs_quantize_row(t, tmp, w + o * rb, n_in);
            }
            vs_x16_pack(t, w, n_out, n_in, pk);
            for (int64_t i = 0; i < max_rows * n_in; i++) x[i] = vs_rng_normal(&rng) * (i % 89 == 7 ? 20.0f : 1.0f);
            for (size_t k = 0; k < VS_ARRAY_LEN(ns); k++) {
                const int64_t n = ns[k];
                for (int isa = 0; isa < 2; isa++) { /* AVX-512, then AVX2 + AVX-VNNI; rows, then the copy */
                    vs_isa_set_max(isa ? VS_ISA_AVX2 : VS_ISA_AVX512);
                    vs_matmul(tp, t, w, n_out, n_in, x, n, y[2 * isa]);
                    vs_matmul_x16(tp, t, w, pk, n_out, n_in, x, n, y[2 * isa + 1]);
                }
                for (int k2 = 1; k2 < 4; k2++) bad += memcmp(y[0], y[k2], sizeof(float) * (size_t)(n * n_out)) != 0;
                runs += 3;
            }
            vs_free(w);
            vs_free(pk);
            free(x);
            free(tmp);
            for (int k = 0; k < 4; k++) free(y[k]);
        }
    }
    vs_isa_set_max(best);
    VT_CHECK(bad == 0, "Q8_0 / Q4_0 on AVX2 + AVX-VNNI: %d of %d runs differ from the AVX-512 lane kernel", bad, runs);
    printf("kernels: Q8_0 / Q4_0 on AVX2 + AVX-VNNI (rows and copy): %d runs bitwise equal to the AVX-512 lane "
           "kernel (%d differ)\n", runs, bad);
}

static void test_vector_ops(vs_isa isa) {
    static const int64_t ns[] = {0, 1, 7, 15, 16, 17, 100, 1000, 4099};
    vs_rng rng;
    vs_rng_seed(&rng, 77);
    int bad = 0;
    for (size_t k = 0; k < VS_ARRAY_LEN(ns); k++) {
        int64_t n = ns[k];
        float *a = malloc(sizeof(float) * (size_t)(n + 1)), *b = malloc(sizeof(float) * (size_t)(n + 1));
        float *o1 = malloc(sizeof(float) * (size_t)(n + 1)), *o2 = malloc(sizeof(float) * (size_t)(n + 1));
        double sab = 0;
        for (int64_t i = 0; i < n; i++) {
            a[i] = vs_rng_normal(&rng) * 3;
            b[i] = vs_rng_normal(&rng);
            sab += fabs((double)a[i] * b[i]);
        }
        float d1 = vs_dot_f32(a, b, n), d2 = vs_dot_f32_ref(a, b, n);
        bad += !(fabs((double)d1 - d2) <= 1e-5 * sab);
        memcpy(o1, b, sizeof(float) * (size_t)n);
        memcpy(o2, b, sizeof(float) * (size_t)n);
        vs_axpy_f32(o1, 0.37f, a, n);
        vs_axpy_f32_ref(o2, 0.37f, a, n);
        for (int64_t i = 0; i < n; i++) bad += !(fabs(o1[i] - o2[i]) <= 1e-6 * (fabs(b[i]) + fabs(0.37 * a[i])));
        if (n > 0) {
            vs_rmsnorm(o1, a, b, n, 1e-5f);
            vs_rmsnorm_ref(o2, a, b, n, 1e-5f);
            for (int64_t i = 0; i < n; i++) bad += !(fabs(o1[i] - o2[i]) <= 1e-5 * fabs(o2[i]) + 1e-30);
            memcpy(o1, a, sizeof(float) * (size_t)n);
            vs_rmsnorm(o1, o1, NULL, n, 1e-5f); /* in place, no weight */
            vs_rmsnorm_ref(o2, a, NULL, n, 1e-5f);
            for (int64_t i = 0; i < n; i++) bad += !(fabs(o1[i] - o2[i]) <= 1e-5 * fabs(o2[i]) + 1e-30);
            for (int64_t i = 0; i < n; i++) o1[i] = o2[i] = a[i] * 10;
            if (n > 3) o1[2] = o2[2] = -INFINITY; /* a masked position */
            vs_softmax_inplace(o1, n);
            vs_softmax_inplace_ref(o2, n);
            double s = 0;
            for (int64_t i = 0; i < n; i++) {
                bad += !(fabs(o1[i] - o2[i]) <= 1e-6 + 1e-5 * o2[i]);
                s += o1[i];
            }
            bad += fabs(s - 1.0) > 1e-5;
            if (n > 3) bad += o1[2] != 0.0f;
        }
        free(a);
        free(b);
        free(o1);
        free(o2);
    }
    VT_CHECK(bad == 0, "%s vector ops: %d mismatches", vs_isa_name(isa), bad);
    /* argmax: the same index as the scalar loop (NaN skipped, the first of equal maxima, -0 == +0, all NaN
     * -> -1), the maximum at every position of every length up to 70 and in long rows */
    int abad = 0, acases = 0;
    float *x = malloc(sizeof(float) * 4099);
    for (int64_t n = 0; n <= 4099; n = n < 70 ? n + 1 : n * 2 + 1) {
        for (int64_t at = 0; at < n || (n == 0 && at == 0); at += n < 70 ? 1 : 37) {
            for (int kind = 0; kind < 6; kind++) {
                for (int64_t i = 0; i < n; i++) {
                    x[i] = vs_rng_normal(&rng);
                    if (kind == 1 && i % 3 == 0) x[i] = NAN;
                    if (kind == 2) x[i] = -INFINITY;
                    if (kind == 3) x[i] = i % 2 ? 0.0f : -0.0f;
                    if (kind == 4) x[i] = NAN;
                    if (kind == 5) x[i] = (float)(i % 5); /* ties everywhere */
                }
                if (n > 0 && kind != 4) x[at] = kind == 2 ? -INFINITY : kind == 3 ? -0.0f : 9.0f;
                if (n > 1 && kind == 0) x[n - 1 - at] = 9.0f; /* two equal maxima */
                abad += vs_argmax_f32(x, n) != vs_argmax_f32_ref(x, n);
                acases++;
            }
            if (n == 0) break;
        }
    }
    x[0] = NAN, x[1] = 1.0f;
    abad += vs_argmax_f32(x, 2) != 1 || vs_argmax_f32_ref(x, 2) != 1;
    free(x);
    VT_CHECK(abad == 0, "%s argmax: %d of %d cases differ from the scalar loop", vs_isa_name(isa), abad, acases);
}

/* K-quants: activations, the twin against a double reference, and every path bitwise against the twin
 * on every row count 1..65 (which is also batch invariance: row r of any batch equals the twin's row r,
 * and the twin computes rows independently), checked once more directly: the row alone. */
static void test_kquant(vs_isa best, vs_threadpool **pools) {
    static const vs_type kt[] = {VS_TYPE_Q4_K, VS_TYPE_Q5_K, VS_TYPE_Q6_K};
    vs_rng rng;
    vs_rng_seed(&rng, 4242);
    int twin_bad = 0, inv_bad = 0, runs = 0, xk_bad = 0, x16_layout_bad = 0, x16_bad = 0, x16_runs = 0;
    double worst_ref = 0, worst_x16 = 0;
    for (size_t ti = 0; ti < VS_ARRAY_LEN(kt); ti++) {
        const vs_type t = kt[ti];
        /* last 16-output tiles of 13, 13 and 5 outputs (so the AVX-VNNI kernel's second half is partial too) */
        const int64_t n_out = ti == 0 ? 45 : ti == 1 ? 29 : 37, n_in = 256 * (int64_t)(1 + ti), R = 65;
        problem p;
        problem_make(&p, t, n_out, n_in, R, &rng);
        /* the activations: AVX2 quantiser vs the twin, bitwise; then dequantised for the double check */
        const size_t xrb = vs_xk_row_bytes(n_in);
        uint8_t *xq = calloc((size_t)R, xrb), *xq2 = calloc((size_t)R, xrb);
        for (int64_t r = 0; r < R; r++) {
            vs_xk_quantize_row_ref(p.x + r * n_in, n_in, xq + r * xrb);
            if (best >= VS_ISA_AVX2) vs_xk_quantize_row_avx2(p.x + r * n_in, n_in, xq2 + r * xrb);
        }
        if (best >= VS_ISA_AVX2) xk_bad += memcmp(xq, xq2, (size_t)R * xrb) != 0;
        float *yr = malloc(sizeof(float) * (size_t)(R * n_out)), *y = malloc(sizeof(float) * (size_t)(R * n_out));
        float *yx = malloc(sizeof(float) * (size_t)(R * n_out));
        vs_matmul_ref(t, p.w, n_out, n_in, p.x, R, yr);
        vs_matmul_x16_ref(t, p.w, n_out, n_in, p.x, R, yx);
        for (int64_t r = 0; r < R; r++) {
            const int8_t *q = (const int8_t *)(xq + r * xrb);
            const float *d = (const float *)(xq + r * xrb + vs_xk_d_offset(n_in));
            const int16_t *bs = (const int16_t *)(xq + r * xrb + vs_xk_bsum_offset(n_in));
            for (int64_t b = 0; b < n_in / 256; b++)
                for (int k = 0; k < 16; k++) {
                    int s = 0;
                    for (int j = 0; j < 16; j++) s += q[b * 256 + 16 * k + j];
                    xk_bad += s != bs[b * 16 + k];
                }
            for (int64_t o = 0; o < n_out; o++) {
                double s = 0, a = 0;
                for (int64_t i = 0; i < n_in; i++) {
                    double xv = (double)q[i] * d[i / 256], wv = p.wdq[o * n_in + i];
                    s += wv * xv;
                    a += fabs(wv * xv);
                }
                double e = fabs((double)yr[r * n_out + o] - s) / (TOL_KQ * a + 1e-30);
                worst_ref = fmax(worst_ref, e);
                VT_CHECK(e <= 1.0, "%s twin row %lld out %lld: %.9g vs double %.9g (S' %g)", vs_type_name(t),
                         (long long)r, (long long)o, yr[r * n_out + o], s, a);
                e = fabs((double)yx[r * n_out + o] - s) / (TOL_KQ * a + 1e-30); /* the x16 kernels' steps */
                worst_x16 = fmax(worst_x16, e);
                VT_CHECK(e <= 1.0, "%s x16 twin row %lld out %lld: %.9g vs double %.9g (S' %g)", vs_type_name(t),
                         (long long)r, (long long)o, yx[r * n_out + o], s, a);
            }
        }
        for (int isa = VS_ISA_SCALAR; isa <= (int)best; isa++) {
            vs_isa_set_max((vs_isa)isa);
            for (int pi = 0; pi < 2; pi++)
                for (int64_t n = 1; n <= R; n++) {
                    for (int64_t k = 0; k < n * n_out; k++) y[k] = NAN;
                    vs_matmul(pools[pi], t, p.w, n_out, n_in, p.x, n, y);
                    twin_bad += memcmp(y, yr, sizeof(float) * (size_t)(n * n_out)) != 0;
                    runs++;
                }
            for (int64_t r = 0; r < R; r += 7) { /* the row alone, at every place it held in the batches */
                vs_matmul(pools[1], t, p.w, n_out, n_in, p.x + r * n_in, 1, y);
                inv_bad += memcmp(y, yr + r * n_out, sizeof(float) * (size_t)n_out) != 0;
            }
            const char *want = isa >= VS_ISA_AVX2 ? "avx2" : "scalar"; /* vs_matmul: the GGUF rows */
            const char *want16 = !vs_x16_wanted(t) ? want : isa >= VS_ISA_AVX512 ? "avx512-vnni" : "avx-vnni";
            VT_CHECK(!strcmp(vs_matmul_path(t, n_out, n_in, 3, 0), want) &&
                         !strcmp(vs_matmul_x16_path(t, n_out, n_in, 3), want16),
                     "%s paths on %s: %s, x16 %s", vs_type_name(t), vs_isa_name((vs_isa)isa),
                     vs_matmul_path(t, n_out, n_in, 3, 0), vs_matmul_x16_path(t, n_out, n_in, 3));
            if (!vs_x16_wanted(t)) continue; /* AVX-512 VNNI, or AVX2 with AVX-VNNI */
            /* the x16 copy: its documented layout (values dequantised from it equal the GGUF rows'), then the
             * kernel that reads it bitwise against vs_matmul_x16_ref, batched and alone */
            const size_t pb = vs_x16_bytes(t, n_out, n_in), B = pb / (size_t)((n_out + 15) / 16 * (n_in / 256));
            uint8_t *pk = vs_malloc(pb);
            memset(pk, 0xa5, pb);
            vs_x16_pack(t, p.w, n_out, n_in, pk);
            for (int64_t o = 0; o < (n_out + 15) / 16 * 16; o++)
                for (int64_t i = 0; i < n_in; i++) {
                    const uint8_t *sb = pk + (size_t)(o / 16 * (n_in / 256) + i / 256) * B;
                    const int l = (int)(o % 16), v = (int)(i % 256), c = v / 32, k = (v % 32) / 4, e4 = v % 4;
                    uint16_t h16;
                    float val;
                    if (t == VS_TYPE_Q6_K) {
                        const int h = c / 4, kk = c % 4;
                        const uint8_t qlb = sb[1024 * h + 512 * (kk & 1) + 64 * k + 4 * l + e4];
                        const uint8_t qhb = sb[2048 + 512 * h + 64 * k + 4 * l + e4];
                        const int code = ((qlb >> (4 * (kk / 2))) & 15) | (((qhb >> (2 * kk)) & 3) << 4);
                        memcpy(&h16, sb + 3328 + 2 * l, 2);
                        val = vs_fp16_to_fp32(h16) * (float)(int8_t)sb[3072 + 32 * c + 2 * l + (v % 32) / 16] *
                              (float)(code - 32);
                    } else {
                        const size_t off = t == VS_TYPE_Q5_K ? 2560 : 2048;
                        int code = (sb[512 * (c / 2) + 64 * k + 4 * l + e4] >> (4 * (c % 2))) & 15;
                        if (t == VS_TYPE_Q5_K) code |= ((sb[2048 + 64 * k + 4 * l + e4] >> c) & 1) << 4;
                        uint16_t m16;
                        memcpy(&h16, sb + off + 256 + 2 * l, 2);
                        memcpy(&m16, sb + off + 288 + 2 * l, 2);
                        val = vs_fp16_to_fp32(h16) * (float)sb[off + 16 * c + l] * (float)code -
                              vs_fp16_to_fp32(m16) * (float)sb[off + 128 + 16 * c + l];
                    }
                    const float want_v = o < n_out ? p.wdq[o * n_in + i] : 0.0f;
                    x16_layout_bad += fabsf(val - want_v) > 1e-6f * (1.0f + fabsf(want_v));
                }
            for (int pi = 0; pi < 2; pi++)
                for (int64_t n = 1; n <= R; n++) {
                    for (int64_t k = 0; k < n * n_out; k++) y[k] = NAN;
                    vs_matmul_x16(pools[pi], t, p.w, pk, n_out, n_in, p.x, n, y);
                    x16_bad += memcmp(y, yx, sizeof(float) * (size_t)(n * n_out)) != 0;
                    x16_runs++;
                }
            for (int64_t r = 0; r < R; r += 7) {
                vs_matmul_x16(pools[1], t, p.w, pk, n_out, n_in, p.x + r * n_in, 1, y);
                inv_bad += memcmp(y, yx + r * n_out, sizeof(float) * (size_t)n_out) != 0;
            }
            vs_free(pk);
        }
        vs_isa_set_max(VS_ISA_AMX);
        free(y);
        free(yr);
        free(yx);
        free(xq);
        free(xq2);
        problem_free(&p);
    }
    VT_CHECK(xk_bad == 0, "K activations: %d AVX2/twin or block-sum mismatches", xk_bad);
    VT_CHECK(twin_bad == 0, "K-quant matmul: %d of %d runs (1..65 rows, 1 and 2 threads, each ISA) differ "
             "bitwise from the twin", twin_bad, runs);
    VT_CHECK(inv_bad == 0, "K-quant matmul: %d single rows differ from their batched results", inv_bad);
    VT_CHECK(x16_layout_bad == 0, "K-quant x16 copy: %d values differ from the documented layout", x16_layout_bad);
    VT_CHECK(x16_bad == 0, "K-quant x16 kernel: %d of %d runs differ bitwise from vs_matmul_x16_ref", x16_bad,
             x16_runs);
    printf("kernels: K-quant x16 kernel: %d runs bitwise equal to its twin (%d differ); its twin vs double: worst "
           "|diff| / (%g S') = %.2g\n", x16_runs, x16_bad, TOL_KQ, worst_x16);
    printf("kernels: K-quants (Q4_K/Q5_K/Q6_K): %d runs bitwise equal to the twin (%d differ), single rows %s; "
           "twin vs double with dequantised activations: worst |diff| / (%g S') = %.2g\n",
           runs, twin_bad, inv_bad ? "DIFFER" : "equal", TOL_KQ, worst_ref);
}

int main(void) {
    vs_isa best = vs_isa_detect();
    printf("kernels: best ISA on this CPU: %s\n", vs_isa_name(best));
    vs_error err;
    vs_threadpool *pools[3] = {NULL, vs_threadpool_new(2, &err), vs_threadpool_new(3, &err)};
    VT_REQUIRE(pools[1] && pools[2], "thread pools: %s", err.msg);
    test_ref_against_double();
    test_kquant(best, pools);
    test_xq(best);
    test_f16_split(); /* the AVX-512 sides only where the AMX-BF16 kernels run (AVX512-FP16 instructions) */
    test_xb();
    for (int isa = VS_ISA_SCALAR; isa <= (int)best; isa++) {
        VT_CHECK(vs_isa_set_max((vs_isa)isa) == (vs_isa)isa, "ISA cap %d", isa);
        VT_CHECK(vs_isa_active() == (vs_isa)isa, "active ISA");
        for (int pass = 0; pass < (isa == VS_ISA_AMX && vs_cpu_amx_bf16() ? 2 : 1); pass++) {
            g_mm_flags = pass ? VS_MM_AMX_BF16 : VS_MM_DEFAULT;
            if (pass) printf("kernels: amx again, F16/BF16 of every size on AMX-BF16 tiles\n");
            test_matmul((vs_isa)isa, pools, 3);
            test_batch_invariance((vs_isa)isa, pools, 2);
            test_matmul_multi((vs_isa)isa, pools, 2);
            test_f16_large_weights(pools[1]);
        }
        g_mm_flags = VS_MM_DEFAULT;
        test_x16((vs_isa)isa, pools, 2);
        test_vector_ops((vs_isa)isa);
    }
    test_q_lanes_avxvnni(best, pools[1]);
    if (best >= VS_ISA_AVX2 && vs_cpu_avxvnni()) { /* the AVX2 kernels that AVX-VNNI CPUs no longer run */
        printf("kernels: avx2 again without AVX-VNNI\n");
        vs_isa_set_max(VS_ISA_AVX2);
        vs_avxvnni_allow(false);
        test_matmul(VS_ISA_AVX2, pools, 3);
        test_batch_invariance(VS_ISA_AVX2, pools, 2);
        test_x16(VS_ISA_AVX2, pools, 2);
        vs_avxvnni_allow(true);
        vs_isa_set_max(best);
    }
    /* F32/F16/BF16 with 128+ rows go to OpenBLAS when the build has it: the built-in path again */
    if (vs_matmul_set_blas(false) == false) {
        printf("kernels: again without BLAS (built-in kernels for many rows)\n");
        test_matmul(best, pools, 3);
        if (best == VS_ISA_AMX && vs_cpu_amx_bf16()) {
            g_mm_flags = VS_MM_AMX_BF16;
            test_matmul(best, pools, 3);
            g_mm_flags = VS_MM_DEFAULT;
        }
        vs_matmul_set_blas(true);
    }
    vs_isa_set_max(VS_ISA_AMX);
    VT_CHECK(vs_isa_active() == best, "cap above the CPU gives the CPU's best");
    const char *want = vs_cpu_amx_bf16() ? "amx-bf16" : best >= VS_ISA_AVX512 ? "avx512-fma"
                       : best == VS_ISA_AVX2 ? "avx2" : "scalar";
    if (!getenv("VLMSPEC_AMX_BF16"))
        VT_CHECK(!strcmp(vs_matmul_path(VS_TYPE_F16, 1408, 512, 6, 0), want), "path(F16 1408 x 512, 6) = %s",
                 vs_matmul_path(VS_TYPE_F16, 1408, 512, 6, 0));
    if (vs_cpu_amx_bf16() && !getenv("VLMSPEC_AMX_BF16")) { /* the flags, and the default size window */
        VT_CHECK(!strcmp(vs_matmul_path(VS_TYPE_F16, 100, 100, 1, 0), "avx512-fma"), "small F16: %s",
                 vs_matmul_path(VS_TYPE_F16, 100, 100, 1, 0));
        VT_CHECK(!strcmp(vs_matmul_path(VS_TYPE_BF16, 100, 100, 1, VS_MM_AMX_BF16), "amx-bf16"), "forced");
        VT_CHECK(!strcmp(vs_matmul_path(VS_TYPE_F16, 1408, 512, 200, VS_MM_NO_AMX_BF16), "blas") ||
                     !strcmp(vs_matmul_path(VS_TYPE_F16, 1408, 512, 200, VS_MM_NO_AMX_BF16), "avx512-fma"),
                 "no AMX-BF16: %s", vs_matmul_path(VS_TYPE_F16, 1408, 512, 200, VS_MM_NO_AMX_BF16));
        VT_CHECK(!strcmp(vs_matmul_path(VS_TYPE_F32, 1408, 512, 1, VS_MM_AMX_BF16), "avx512-fma"),
                 "F32 forced");
    }
    if (best >= VS_ISA_AVX512 && !vs_cpu_amx_bf16()) {
        /* F16 / BF16 never go to BLAS on AVX-512 (the tiles are faster), so a prompt-sized batch keeps every
         * row's bits; F32 does from 128 rows when BLAS is built in and allowed */
        VT_CHECK(!strcmp(vs_matmul_path(VS_TYPE_F16, 1408, 512, 200, 0), "avx512-fma") &&
                     !strcmp(vs_matmul_path(VS_TYPE_BF16, 1408, 512, 600, 0), "avx512-fma"),
                 "F16 / BF16 with 200 / 600 rows on AVX-512: %s", vs_matmul_path(VS_TYPE_F16, 1408, 512, 200, 0));
        const int64_t n_out = 37, n_in = 96, n = 130;
        uint16_t *w = malloc(sizeof(uint16_t) * n_out * n_in);
        float *x = malloc(sizeof(float) * n * n_in), *y = malloc(sizeof(float) * n * n_out), y1[37];
        vs_rng rng;
        vs_rng_seed(&rng, 5);
        for (int64_t i = 0; i < n_out * n_in; i++) w[i] = vs_fp32_to_fp16(vs_rng_normal(&rng));
        for (int64_t i = 0; i < n * n_in; i++) x[i] = vs_rng_normal(&rng);
        vs_matmul(pools[1], VS_TYPE_F16, w, n_out, n_in, x, n, y);
        int bad = 0;
        for (int64_t r = 0; r < n; r += 43) {
            vs_matmul(pools[1], VS_TYPE_F16, w, n_out, n_in, x + r * n_in, 1, y1);
            bad += memcmp(y1, y + r * n_out, sizeof(y1)) != 0;
        }
        VT_CHECK(bad == 0, "F16 on AVX-512, 130 rows with BLAS allowed: %d rows differ from the row alone", bad);
        free(w), free(x), free(y);
    }
    if (vs_cpu_amx_bf16() && !getenv("VLMSPEC_AMX_BF16")) /* bigger matrices keep the FMA kernel by default */
        VT_CHECK(!strcmp(vs_matmul_path(VS_TYPE_F16, 5632, 2048, 6, 0), "avx512-fma"),
                 "path(F16 5632 x 2048) = %s",
                 vs_matmul_path(VS_TYPE_F16, 5632, 2048, 6, 0));
    vs_threadpool_free(pools[1]);
    vs_threadpool_free(pools[2]);
    return vt_finish("kernels");
}
