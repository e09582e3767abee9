/* test_sample: the sampler.
 * - exact small cases for greedy, temperature, top-k, top-p, min-p and their combination, ties,
 *   -inf masks, V = 1, top_k > V, top_p = 1, and errors for NaN / +inf / invalid parameters;
 * - the partial-selection implementation against a straightforward full-sort reference on V = 32000
 *   random logits (several parameter sets, peaked and flat distributions), with sums of 1;
 * - chi-square tests that sampled frequencies match the returned probability vector;
 * - determinism per seed; timing of one call at V = 32000 (printed, not asserted). */
#include <string.h>
#include <time.h>

#include "sample.h"
#include "testutil.h"

static vs_sampler *mk(int64_t V, float temp, int top_k, float top_p, float min_p, uint64_t seed) {
    vs_sampler_params p = {.temperature = temp, .top_k = top_k, .top_p = top_p, .min_p = min_p, .seed = seed};
    vs_error err = {0};
    vs_sampler *s = vs_sampler_new(V, &p, &err);
    VT_REQUIRE(s, "sampler_new: %s", err.msg);
    return s;
}

/* probs of a small case must equal want[] within 1e-6 */
static void expect_probs(const char *label, const float *logits, int V, float temp, int top_k, float top_p,
                         float min_p, const double *want) {
    vs_sampler *s = mk(V, temp, top_k, top_p, min_p, 1);
    float probs[16];
    vs_error err = {0};
    VT_CHECK(vs_sampler_probs(s, logits, probs, &err) == VS_OK, "%s: %s", label, err.msg);
    for (int i = 0; i < V; i++) VT_CHECK_NEAR(probs[i], want[i], 1e-6, "%s: token %d", label, i);
    vs_sampler_free(s);
}

static void test_exact(void) {
    const float l4[4] = {logf(1), logf(2), logf(3), logf(4)};
    expect_probs("softmax", l4, 4, 1, 0, 1, 0, (double[]){.1, .2, .3, .4});
    expect_probs("greedy", l4, 4, 0, 0, 1, 0, (double[]){0, 0, 0, 1});
    expect_probs("greedy ignores filters", l4, 4, 0, 1, 0.1f, 0.9f, (double[]){0, 0, 0, 1});
    expect_probs("top-k 2", l4, 4, 1, 2, 1, 0, (double[]){0, 0, 3. / 7, 4. / 7});
    expect_probs("top-k 1", l4, 4, 1, 1, 1, 0, (double[]){0, 0, 0, 1});
    expect_probs("top-k > V", l4, 4, 1, 10, 1, 0, (double[]){.1, .2, .3, .4});
    expect_probs("top-k = V", l4, 4, 1, 4, 1, 0, (double[]){.1, .2, .3, .4});
    expect_probs("top-p .5", l4, 4, 1, 0, 0.5f, 0, (double[]){0, 0, 3. / 7, 4. / 7});
    expect_probs("top-p .75", l4, 4, 1, 0, 0.75f, 0, (double[]){0, 2. / 9, 3. / 9, 4. / 9});
    expect_probs("top-p 0", l4, 4, 1, 0, 0.0f, 0, (double[]){0, 0, 0, 1});
    expect_probs("top-p 1", l4, 4, 1, 0, 1.0f, 0, (double[]){.1, .2, .3, .4});
    expect_probs("min-p .6", l4, 4, 1, 0, 1, 0.6f, (double[]){0, 0, 3. / 7, 4. / 7});
    expect_probs("min-p .45", l4, 4, 1, 0, 1, 0.45f, (double[]){0, 2. / 9, 3. / 9, 4. / 9});
    expect_probs("min-p 1", l4, 4, 1, 0, 1, 1.0f, (double[]){0, 0, 0, 1});
    /* temperature 2: p ~ sqrt(1, 2, 3, 4) */
    double z = 1 + sqrt(2) + sqrt(3) + 2;
    expect_probs("temp 2", l4, 4, 2, 0, 1, 0, (double[]){1 / z, sqrt(2) / z, sqrt(3) / z, 2 / z});
    /* temperature 0.5: p ~ (1, 4, 9, 16) */
    expect_probs("temp .5", l4, 4, 0.5f, 0, 1, 0, (double[]){1. / 30, 4. / 30, 9. / 30, 16. / 30});
    /* order: top-k 3 -> temp 0.5 -> (4, 9, 16)/29 -> top-p .5: 16/29 = .55 >= .5 -> one token */
    expect_probs("k3 t.5 p.5", l4, 4, 0.5f, 3, 0.5f, 0, (double[]){0, 0, 0, 1});
    /* top-k 3 -> (4, 9, 16)/29 -> min-p .3: 16 * .3 = 4.8 drops 4 -> (9, 16)/25 */
    expect_probs("k3 t.5 m.3", l4, 4, 0.5f, 3, 1, 0.3f, (double[]){0, 0, 9. / 25, 16. / 25});
    /* top-p .6 keeps (16, 9) = 25/30 then min-p .6 (thr 9.6) drops 9 */
    expect_probs("t.5 p.6 m.6", l4, 4, 0.5f, 0, 0.6f, 0.6f, (double[]){0, 0, 0, 1});

    /* ties: lowest id wins every cut */
    const float tie[5] = {1, 2, 2, 2, 0};
    expect_probs("top-k ties", tie, 5, 1, 2, 1, 0, (double[]){0, .5, .5, 0, 0});
    expect_probs("greedy ties", tie, 5, 0, 0, 1, 0, (double[]){0, 1, 0, 0, 0});
    const float flat[10] = {0};
    expect_probs("top-p flat", flat, 10, 1, 0, 0.25f, 0, (double[]){1. / 3, 1. / 3, 1. / 3, 0, 0, 0, 0, 0, 0, 0});

    /* -inf masks */
    const float masked[4] = {-INFINITY, 0, -INFINITY, 0};
    expect_probs("-inf", masked, 4, 1, 0, 1, 0, (double[]){0, .5, 0, .5});
    expect_probs("-inf top-k 3", masked, 4, 1, 3, 1, 0, (double[]){0, .5, 0, .5});
    expect_probs("-inf greedy", masked, 4, 0, 0, 1, 0, (double[]){0, 1, 0, 0});
    const float one[1] = {-3};
    expect_probs("V=1", one, 1, 1, 5, 0.5f, 0.5f, (double[]){1});
    expect_probs("V=1 greedy", one, 1, 0, 0, 1, 0, (double[]){1});
    /* huge logit differences do not overflow */
    const float big[3] = {-1e30f, 1e30f, 0};
    expect_probs("big", big, 3, 1, 0, 1, 0, (double[]){0, 1, 0});
}

static void test_errors(void) {
    vs_error err = {0};
    vs_sampler *s = mk(4, 1, 0, 1, 0, 1);
    float probs[4];
    int32_t tok = -5;
    const float nan_l[4] = {0, NAN, 1, 2};
    VT_CHECK(vs_sampler_probs(s, nan_l, probs, &err) == VS_ERR_INVALID, "NaN logit");
    VT_CHECK(strstr(err.msg, "NaN") && strstr(err.msg, "token 1"), "%s", err.msg);
    VT_CHECK(vs_sampler_sample(s, nan_l, NULL, &tok, &err) == VS_ERR_INVALID && tok == -5, "NaN in sample");
    const float inf_l[4] = {0, 1, INFINITY, 2};
    VT_CHECK(vs_sampler_probs(s, inf_l, probs, &err) == VS_ERR_INVALID && strstr(err.msg, "+inf"), "%s", err.msg);
    const float ninf[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    VT_CHECK(vs_sampler_probs(s, ninf, probs, &err) == VS_ERR_INVALID && strstr(err.msg, "-inf"), "%s", err.msg);
    vs_sampler_params g = {.temperature = 0, .top_p = 1};
    VT_CHECK(vs_sampler_set_params(s, &g, &err) == VS_OK, "greedy params");
    VT_CHECK(vs_sampler_probs(s, nan_l, probs, &err) == VS_ERR_INVALID, "NaN rejected in greedy too");

    const float bad_w[4] = {0.5f, -0.1f, 0.5f, 0};
    VT_CHECK(vs_sampler_pick(s, bad_w, &tok, &err) == VS_ERR_INVALID, "negative weight");
    const float zero_w[4] = {0, 0, 0, 0};
    VT_CHECK(vs_sampler_pick(s, zero_w, &tok, &err) == VS_ERR_INVALID, "zero weights");
    const float nan_w[4] = {0.5f, NAN, 0, 0};
    VT_CHECK(vs_sampler_pick(s, nan_w, &tok, &err) == VS_ERR_INVALID, "NaN weight");
    const float inf_w[4] = {0.5f, INFINITY, 0, 0};
    VT_CHECK(vs_sampler_pick(s, inf_w, &tok, &err) == VS_ERR_INVALID, "inf weight");
    const float unnorm[4] = {0, 3, 0, 0};
    VT_CHECK(vs_sampler_pick(s, unnorm, &tok, &err) == VS_OK && tok == 1, "unnormalised one-hot");

    vs_sampler_params bad[] = {{.temperature = -1, .top_p = 1},
                               {.temperature = NAN, .top_p = 1},
                               {.temperature = INFINITY, .top_p = 1},
                               {.temperature = 1, .top_p = 1.5f},
                               {.temperature = 1, .top_p = NAN},
                               {.temperature = 1, .top_p = 1, .min_p = 2},
                               {.temperature = 1, .top_p = 1, .min_p = -0.1f}};
    for (size_t i = 0; i < VS_ARRAY_LEN(bad); i++) {
        VT_CHECK(vs_sampler_new(4, &bad[i], &err) == NULL, "bad params %zu accepted", i);
        VT_CHECK(vs_sampler_set_params(s, &bad[i], &err) == VS_ERR_INVALID, "bad params %zu set", i);
    }
    VT_CHECK(vs_sampler_get_params(s).temperature == 0, "params unchanged after a rejected set");
    VT_CHECK(vs_sampler_new(0, NULL, &err) == NULL, "V = 0");
    VT_CHECK(vs_sampler_new(-3, NULL, &err) == NULL, "V < 0");
    vs_sampler_free(s);

    const float a[6] = {1, NAN, 3, 3, -INFINITY, 2};
    VT_CHECK(vs_argmax(a, 6) == 2, "argmax lowest id of ties, NaN skipped");
    const float an[2] = {NAN, NAN};
    VT_CHECK(vs_argmax(an, 2) == -1 && vs_argmax(a, 0) == -1, "argmax of nothing");
    const float ai[3] = {-INFINITY, -INFINITY, -INFINITY};
    VT_CHECK(vs_argmax(ai, 3) == 0, "argmax of all -inf");
}

/* --- reference: full sort --------------------------------------------------------------------- */

typedef struct ref_item {
    double v;
    int32_t id;
} ref_item;

static int ref_cmp(const void *a, const void *b) {
    const ref_item *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static void ref_probs(const float *logits, int V, const vs_sampler_params *p, double *out) {
    ref_item *it = malloc((size_t)V * sizeof(ref_item));
    int n = 0;
    for (int i = 0; i < V; i++)
        if (logits[i] != -INFINITY) it[n++] = (ref_item){logits[i], i};
    qsort(it, (size_t)n, sizeof(ref_item), ref_cmp);
    for (int i = 0; i < V; i++) out[i] = 0;
    if (p->temperature == 0) {
        out[it[0].id] = 1;
        free(it);
        return;
    }
    if (p->top_k > 0 && p->top_k < n) n = p->top_k;
    double m = it[0].v, z = 0;
    /* same float exponentials as the sampler, so the cuts compare identical numbers */
    for (int j = 0; j < n; j++) z += it[j].v = expf(((float)it[j].v - (float)m) / p->temperature);
    if (p->top_p < 1) {
        double cum = 0;
        for (int j = 0; j < n; j++)
            if ((cum += it[j].v) >= p->top_p * z) {
                n = j + 1;
                break;
            }
    }
    int w = 0;
    for (int j = 0; j < n; j++)
        if (it[j].v >= p->min_p * it[0].v) it[w++] = it[j];
    n = w;
    z = 0;
    for (int j = 0; j < n; j++) z += it[j].v;
    for (int j = 0; j < n; j++) out[it[j].id] = it[j].v / z;
    free(it);
}

static void test_against_reference(void) {
    const int V = 32000;
    float *logits = malloc(V * sizeof(float)), *probs = malloc(V * sizeof(float));
    double *want = malloc(V * sizeof(double));
    vs_rng rng;
    vs_rng_seed(&rng, 77);
    vs_sampler_params ps[] = {
        {1.0f, 0, 1.0f, 0.0f, 0},   {0.8f, 40, 0.95f, 0.05f, 0}, {1.0f, 40, 1.0f, 0.0f, 0},
        {1.0f, 0, 0.9f, 0.0f, 0},   {1.5f, 0, 0.5f, 0.0f, 0},    {0.7f, 0, 1.0f, 0.1f, 0},
        {1.0f, 1000, 0.99f, 0, 0},  {0.0f, 0, 1.0f, 0.0f, 0},    {1.0f, 5, 0.0f, 0.0f, 0},
        {2.0f, 0, 0.999f, 0.0f, 0},
    };
    /* scales: peaked (large logit spread) and nearly flat */
    const float scales[] = {4.0f, 0.05f};
    for (size_t si = 0; si < VS_ARRAY_LEN(scales); si++) {
        for (int i = 0; i < V; i++) logits[i] = scales[si] * vs_rng_normal(&rng);
        for (int i = 0; i < V; i += 97) logits[i] = -INFINITY; /* some masked tokens */
        logits[123] = logits[456] = logits[789] = 50; /* a triple tie at the top in the peaked case */
        if (si == 1) logits[123] = logits[456] = logits[789] = 0.2f;
        for (size_t k = 0; k < VS_ARRAY_LEN(ps); k++) {
            vs_error err = {0};
            vs_sampler *s = vs_sampler_new(V, &ps[k], &err);
            VT_REQUIRE(s, "%s", err.msg);
            VT_CHECK(vs_sampler_probs(s, logits, probs, &err) == VS_OK, "%s", err.msg);
            ref_probs(logits, V, &ps[k], want);
            double sum = 0, maxd = 0;
            int nz = 0, nz_ref = 0, neg = 0;
            for (int i = 0; i < V; i++) {
                sum += probs[i];
                maxd = fmax(maxd, fabs(probs[i] - want[i]));
                nz += probs[i] > 0;
                nz_ref += want[i] > 0;
                neg += probs[i] < 0 || (logits[i] == -INFINITY && probs[i] != 0);
            }
            VT_CHECK(fabs(sum - 1) < 1e-5, "scale %g params %zu: sum %.9f", scales[si], k, sum);
            VT_CHECK(maxd < 1e-6, "scale %g params %zu: max diff to reference %g", scales[si], k, maxd);
            VT_CHECK(nz == nz_ref, "scale %g params %zu: %d kept vs reference %d", scales[si], k, nz, nz_ref);
            VT_CHECK(neg == 0, "negative or masked probabilities");
            if (ps[k].top_k > 0) VT_CHECK(nz <= ps[k].top_k, "top-k bound");
            vs_sampler_free(s);
        }
    }
    free(logits);
    free(probs);
    free(want);
}

/* --- distribution ------------------------------------------------------------------------------- */

/* chi-square critical values at alpha = 0.001: a table for 1..10 degrees of freedom, the
 * Wilson-Hilferty approximation above (z = 3.0902) */
static double chi2_critical(int dof) {
    static const double tab[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59};
    if (dof <= 10) return tab[dof];
    double k = dof, c = 1 - 2 / (9 * k) + 3.0902 * sqrt(2 / (9 * k));
    return k * c * c * c;
}

static void chi_square(const char *label, const float *logits, int V, float temp, int top_k, float top_p,
                       float min_p, uint64_t seed, long N) {
    vs_sampler *s = mk(V, temp, top_k, top_p, min_p, seed);
    float *probs = malloc((size_t)V * sizeof(float));
    long *count = calloc((size_t)V, sizeof(long));
    vs_error err = {0};
    for (long t = 0; t < N; t++) {
        int32_t tok;
        VT_REQUIRE(vs_sampler_sample(s, logits, probs, &tok, &err) == VS_OK, "%s", err.msg);
        VT_REQUIRE(tok >= 0 && tok < V, "token %d", tok);
        count[tok]++;
    }
    /* tokens expected fewer than 5 times are pooled into one category */
    double chi2 = 0, pool_e = 0;
    long pool_n = 0, zero_hits = 0;
    int cats = 0;
    for (int i = 0; i < V; i++) {
        if (probs[i] == 0) {
            zero_hits += count[i];
            continue;
        }
        double e = (double)N * probs[i];
        if (e < 5) {
            pool_e += e, pool_n += count[i];
            continue;
        }
        chi2 += (count[i] - e) * (count[i] - e) / e;
        cats++;
    }
    if (pool_e > 0) {
        chi2 += (pool_n - pool_e) * (pool_n - pool_e) / pool_e;
        cats++;
    }
    VT_CHECK(zero_hits == 0, "%s: %ld draws of zero-probability tokens", label, zero_hits);
    VT_REQUIRE(cats >= 2, "%s: %d categories", label, cats);
    double crit = chi2_critical(cats - 1);
    VT_CHECK(chi2 < crit, "%s: chi2 %.2f with %d dof (critical %.2f)", label, chi2, cats - 1, crit);
    printf("chi-square %-28s %7.2f (dof %d, critical %.2f at alpha 0.001)\n", label, chi2, cats - 1, crit);
    free(probs);
    free(count);
    vs_sampler_free(s);
}

static void test_distribution(void) {
    const float l5[5] = {logf(0.5f), logf(0.2f), logf(0.15f), logf(0.1f), logf(0.05f)};
    chi_square("plain V=5", l5, 5, 1, 0, 1, 0, 1, 200000);
    chi_square("temp 1.7 V=5", l5, 5, 1.7f, 0, 1, 0, 2, 200000);
    /* with filters: V = 1000, top-k 8 / top-p / min-p leave a handful of categories */
    float *l = malloc(1000 * sizeof(float));
    vs_rng rng;
    vs_rng_seed(&rng, 5);
    for (int i = 0; i < 1000; i++) l[i] = 2.0f * vs_rng_normal(&rng);
    chi_square("top-k 8 V=1000", l, 1000, 1, 8, 1, 0, 3, 60000);
    chi_square("top-k 10 top-p .9 V=1000", l, 1000, 0.9f, 10, 0.9f, 0, 4, 60000);
    chi_square("top-k 10 min-p .2 V=1000", l, 1000, 1.2f, 10, 1, 0.2f, 5, 60000);
    chi_square("top-p .8 V=1000", l, 1000, 1.0f, 0, 0.8f, 0, 6, 60000);
    free(l);
    /* residual-style unnormalised weights through vs_sample_weights with a caller RNG */
    const float w[4] = {3, 0, 1, 6};
    long cnt[4] = {0};
    vs_rng r;
    vs_rng_seed(&r, 9);
    const long N = 100000;
    for (long t = 0; t < N; t++) {
        int32_t tok;
        VT_REQUIRE(vs_sample_weights(w, 4, &r, &tok, NULL) == VS_OK, "weights");
        cnt[tok]++;
    }
    double chi2 = 0;
    for (int i = 0; i < 4; i++)
        if (w[i] > 0) chi2 += pow(cnt[i] - N * w[i] / 10.0, 2) / (N * w[i] / 10.0);
    VT_CHECK(cnt[1] == 0 && chi2 < chi2_critical(2), "weights: chi2 %.2f, zero-weight hits %ld", chi2, cnt[1]);
}

static void test_determinism(void) {
    const int V = 500, T = 1000;
    float *l = malloc(V * sizeof(float));
    vs_rng rng;
    vs_rng_seed(&rng, 11);
    for (int i = 0; i < V; i++) l[i] = vs_rng_normal(&rng);
    int32_t *a = malloc(T * sizeof(int32_t)), *b = malloc(T * sizeof(int32_t));
    vs_sampler *s1 = mk(V, 1, 50, 0.95f, 0.01f, 1234), *s2 = mk(V, 1, 50, 0.95f, 0.01f, 1234);
    vs_sampler *s3 = mk(V, 1, 50, 0.95f, 0.01f, 1235);
    int same = 1, diff = 0;
    for (int t = 0; t < T; t++) {
        int32_t c;
        VT_REQUIRE(vs_sampler_sample(s1, l, NULL, &a[t], NULL) == VS_OK, "s1");
        VT_REQUIRE(vs_sampler_sample(s2, l, NULL, &b[t], NULL) == VS_OK, "s2");
        VT_REQUIRE(vs_sampler_sample(s3, l, NULL, &c, NULL) == VS_OK, "s3");
        same &= a[t] == b[t];
        diff += a[t] != c;
    }
    VT_CHECK(same, "same seed, same tokens");
    VT_CHECK(diff > T / 2, "another seed differs (%d of %d)", diff, T);
    vs_sampler_seed(s1, 1234);
    int again = 1;
    for (int t = 0; t < T; t++) {
        int32_t c;
        VT_REQUIRE(vs_sampler_sample(s1, l, NULL, &c, NULL) == VS_OK, "reseed");
        again &= c == a[t];
    }
    VT_CHECK(again, "reseeding replays the sequence");
    /* sample == probs + pick with the same RNG state */
    float *p = malloc(V * sizeof(float));
    vs_sampler_seed(s1, 99);
    vs_sampler_seed(s2, 99);
    int eq = 1;
    for (int t = 0; t < 200; t++) {
        int32_t x, y;
        VT_REQUIRE(vs_sampler_sample(s1, l, NULL, &x, NULL) == VS_OK, "sample");
        VT_REQUIRE(vs_sampler_probs(s2, l, p, NULL) == VS_OK && vs_sampler_pick(s2, p, &y, NULL) == VS_OK, "pp");
        eq &= x == y;
    }
    VT_CHECK(eq, "sample equals probs + pick");
    /* greedy never depends on the seed */
    vs_sampler *g1 = mk(V, 0, 0, 1, 0, 1), *g2 = mk(V, 0, 0, 1, 0, 2);
    int32_t x, y;
    VT_CHECK(vs_sampler_sample(g1, l, NULL, &x, NULL) == VS_OK && vs_sampler_sample(g2, l, NULL, &y, NULL) == VS_OK &&
                 x == y && x == vs_argmax(l, V),
             "greedy");
    vs_sampler_free(g1);
    vs_sampler_free(g2);
    vs_sampler_free(s1);
    vs_sampler_free(s2);
    vs_sampler_free(s3);
    free(p);
    free(a);
    free(b);
    free(l);
}

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_timing(void) {
    const int V = 32000, R = 200;
    float *l = malloc(V * sizeof(float)), *p = malloc(V * sizeof(float));
    vs_rng rng;
    vs_rng_seed(&rng, 3);
    for (int i = 0; i < V; i++) l[i] = 3.0f * vs_rng_normal(&rng);
    struct {
        const char *name;
        vs_sampler_params p;
    } cases[] = {
        {"greedy", {0, 0, 1, 0, 0}},         {"plain", {1, 0, 1, 0, 0}},
        {"top-k 40", {0.8f, 40, 1, 0, 0}},   {"top-k 40 top-p .95 min-p .05", {0.8f, 40, 0.95f, 0.05f, 0}},
        {"top-p .9 (no top-k)", {1, 0, 0.9f, 0, 0}}, {"top-p .99 (no top-k)", {1, 0, 0.99f, 0, 0}},
    };
    for (size_t c = 0; c < VS_ARRAY_LEN(cases); c++) {
        vs_error err = {0};
        vs_sampler *s = vs_sampler_new(V, &cases[c].p, &err);
        VT_REQUIRE(s, "%s", err.msg);
        double t0 = vs_time_now(), c0 = cpu_now();
        for (int r = 0; r < R; r++) {
            int32_t tok;
            VT_REQUIRE(vs_sampler_sample(s, l, p, &tok, &err) == VS_OK, "%s", err.msg);
        }
        printf("timing V=32000 %-30s %8.1f us CPU, %8.1f us wall per sample (shared machine)\n", cases[c].name,
               1e6 * (cpu_now() - c0) / R, 1e6 * (vs_time_now() - t0) / R);
        vs_sampler_free(s);
    }
    free(l);
    free(p);
}

int main(void) {
    test_exact();
    test_errors();
    test_against_reference();
    test_distribution();
    test_determinism();
    test_timing();
    return vt_finish("sample");
}
