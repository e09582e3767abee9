/* test_ens_weights: the ensemble weight policies as pure functions over hand-made histories, with
 * hand-computed answers: grid enumeration (11 vectors for m = 2, 286 for m = 4 at n = 10), the grid's
 * tie-break by smallest sum KL (and to the vector closest to uniform), the window, inverse KL / TVD with
 * temperature limits, AdaBoost's formula, random weights on the simplex, static ratios, the fallbacks,
 * the top-k approximation (a lower bound of the exact KL, exact hits), bounded memory, the parser, and
 * the weight-trace file format (round trip and malformed files). */
#include <string.h>

#include "ens_weights.h"
#include "testutil.h"

static vs_ens_weights_cfg cfg_of(vs_ens_policy p, int32_t topk) {
    vs_ens_weights_cfg c;
    vs_ens_weights_cfg_default(&c);
    c.policy = p;
    c.topk = topk;
    return c;
}

static vs_ens_hist *hist_new(const vs_ens_weights_cfg *c, int m, int V) {
    vs_error err = {0};
    vs_ens_hist *h = vs_ens_hist_new(c, m, V, &err);
    VT_REQUIRE(h, "%s", err.msg);
    return h;
}

static void push2(vs_ens_hist *h, const float *p, const float *q1, const float *q2) {
    vs_error err = {0};
    const float *q[2] = {q1, q2};
    VT_REQUIRE(vs_ens_hist_push(h, p, q, &err) == VS_OK, "%s", err.msg);
}

static vs_ens_choice choose(const vs_ens_hist *h, vs_rng *rng) {
    vs_error err = {0};
    vs_ens_choice c;
    VT_REQUIRE(vs_ens_weights_choose(h, rng, &c, &err) == VS_OK, "%s", err.msg);
    return c;
}

static void test_grid_enumeration(void) {
    vs_error err = {0};
    VT_CHECK(vs_ens_grid_count(2, 10) == 11, "m 2 n 10: %lld", (long long)vs_ens_grid_count(2, 10));
    VT_CHECK(vs_ens_grid_count(4, 10) == 286, "m 4 n 10: %lld", (long long)vs_ens_grid_count(4, 10));
    VT_CHECK(vs_ens_grid_count(3, 2) == 6, "m 3 n 2");
    VT_CHECK(vs_ens_grid_count(1, 10) == 1, "m 1");
    VT_CHECK(vs_ens_grid_count(0, 10) == -1 && vs_ens_grid_count(2, 0) == -1 &&
                 vs_ens_grid_count(9, 10) == -1,
             "out of range");
    VT_CHECK(vs_ens_grid_count(8, 1000) == -1, "too many vectors");
    float w2[11 * 2];
    VT_REQUIRE(vs_ens_grid_build(2, 10, w2, 11, &err) == VS_OK, "%s", err.msg);
    for (int j = 0; j <= 10; j++) /* TABED app. B.2: w_j = [1 - j/n, j/n] */
        VT_CHECK(fabsf(w2[2 * j] - (1 - j / 10.0f)) < 1e-6f && fabsf(w2[2 * j + 1] - j / 10.0f) < 1e-6f,
                 "vector %d", j);
    float *w4 = malloc(sizeof(float) * 286 * 4);
    VT_REQUIRE(vs_ens_grid_build(4, 10, w4, 286, &err) == VS_OK, "%s", err.msg);
    int bad = 0, dup = 0;
    for (int j = 0; j < 286; j++) {
        float s = 0;
        for (int r = 0; r < 4; r++) {
            float x = w4[j * 4 + r] * 10;
            bad += fabsf(x - roundf(x)) > 1e-4f || x < 0;
            s += w4[j * 4 + r];
        }
        bad += fabsf(s - 1) > 1e-5f;
        for (int i = 0; i < j; i++) dup += !memcmp(&w4[i * 4], &w4[j * 4], sizeof(float) * 4);
    }
    VT_CHECK(bad == 0 && dup == 0, "m 4 grid: %d bad, %d duplicate vectors", bad, dup);
    VT_CHECK(w4[0] == 1 && w4[286 * 4 - 1] == 1, "enumeration order: first (1,0,0,0), last (0,0,0,1)");
    free(w4);
    VT_CHECK(vs_ens_grid_build(2, 10, w2, 10, &err) == VS_ERR_INVALID, "wrong count refused");
}

static void test_distances(void) {
    const float p[2] = {0.5f, 0.5f}, q[2] = {0.25f, 0.75f};
    VT_CHECK_NEAR(vs_ens_kl(p, q, 2), 0.5 * log(2.0) + 0.5 * log(2.0 / 3.0), 1e-7, "KL");
    VT_CHECK_NEAR(vs_ens_kl(p, p, 2), 0, 1e-12, "KL(p||p)");
    VT_CHECK_NEAR(vs_ens_tvd(p, q, 2), 0.25, 1e-7, "TVD");
    const float z[2] = {1.0f, 0.0f};
    VT_CHECK_NEAR(vs_ens_kl(p, z, 2), 0.5 * log(0.5) + 0.5 * log(0.5 / 1e-10), 1e-4,
                  "KL with a zero in q: floored at 1e-10");
}

static void test_grid_choice(void) {
    vs_ens_weights_cfg c = cfg_of(VS_ENS_GRID, 0);
    vs_ens_hist *h = hist_new(&c, 2, 3);
    /* empty history: uniform fallback */
    vs_ens_choice ch = choose(h, NULL);
    VT_CHECK(ch.fallback && ch.w[0] == 0.5f && ch.w[1] == 0.5f, "empty history: uniform");
    /* p argmax 0; q1 argmax 0, q2 argmax 1. With a = weight on q2 the mixture's token 0 wins iff a < 1/6:
     * vectors j = 0, 1 score 1. KL(p || q_a): a = 0: 0.6 ln 1.2 + 0.3 ln 0.75 = 0.023088;
     * a = 0.1: q = (0.47, 0.43, 0.1): 0.038529. The tie goes to a = 0: w = (1, 0). */
    const float p[3] = {0.6f, 0.3f, 0.1f}, q1[3] = {0.5f, 0.4f, 0.1f}, q2[3] = {0.2f, 0.7f, 0.1f};
    push2(h, p, q1, q2);
    ch = choose(h, NULL);
    VT_CHECK(!ch.fallback && ch.score == 1 && ch.grid_index == 0, "score %d index %d", ch.score,
             ch.grid_index);
    VT_CHECK(ch.w[0] == 1 && ch.w[1] == 0, "w (%g, %g)", ch.w[0], ch.w[1]);
    VT_CHECK_NEAR(ch.dist, 0.6 * log(1.2) + 0.3 * log(0.75), 1e-6, "winner's sum KL");
    vs_ens_hist_free(h);

    /* p = (0.5, 0.4, 0.1) lies between q1 = (0.7, 0.2, 0.1) and q2 = (0.3, 0.6, 0.1): token 0 wins for
     * a < 0.625 (j = 0..6 all score 1); q_a = p exactly at a = 0.5, KL 0: w = (0.5, 0.5). */
    h = hist_new(&c, 2, 3);
    const float pb[3] = {0.5f, 0.4f, 0.1f}, qb1[3] = {0.7f, 0.2f, 0.1f}, qb2[3] = {0.3f, 0.6f, 0.1f};
    push2(h, pb, qb1, qb2);
    ch = choose(h, NULL);
    VT_CHECK(ch.score == 1 && ch.grid_index == 5 && fabsf(ch.w[0] - 0.5f) < 1e-6f,
             "interior winner: index %d, w0 %g", ch.grid_index, ch.w[0]);
    VT_CHECK(ch.dist < 1e-6, "KL at the winner %g", ch.dist);
    /* a second position where only q2 is right (p argmax 1, q1 argmax 0): the mixture's token 1 wins iff
     * 0.2 + 0.4a > 0.7 - 0.4a, a > 0.625: positions scored: j <= 6 get 1 + 0, j >= 7 get 0 + 1: still a
     * tie between the two groups -> smallest sum KL decides */
    const float pc[3] = {0.3f, 0.6f, 0.1f};
    push2(h, pc, qb1, qb2);
    ch = choose(h, NULL);
    /* brute force of the same rule */
    int best = -1, bs = -1;
    double bk = 0;
    for (int j = 0; j <= 10; j++) {
        double a = j / 10.0;
        int score = 0;
        double kl = 0;
        const float *ps[2] = {pb, pc};
        for (int t = 0; t < 2; t++) {
            float qm[3];
            for (int x = 0; x < 3; x++) qm[x] = (float)((1 - a) * qb1[x] + a * qb2[x]);
            int am = 0, ap = 0;
            for (int x = 1; x < 3; x++) am = qm[x] > qm[am] ? x : am, ap = ps[t][x] > ps[t][ap] ? x : ap;
            score += am == ap;
            kl += vs_ens_kl(ps[t], qm, 3);
        }
        if (score > bs || (score == bs && kl < bk - 1e-9)) best = j, bs = score, bk = kl;
    }
    VT_CHECK(ch.grid_index == best && ch.score == bs,
             "two positions: index %d (brute force %d), score %d (%d)", ch.grid_index, best, ch.score, bs);
    VT_CHECK_NEAR(ch.dist, bk, 1e-5, "sum KL");
    vs_ens_hist_free(h);

    /* identical rows: every vector has the same score and KL: the one closest to uniform wins */
    h = hist_new(&c, 2, 3);
    push2(h, p, q1, q1);
    ch = choose(h, NULL);
    VT_CHECK(ch.grid_index == 5, "identical rows: closest to uniform (index %d)", ch.grid_index);
    vs_ens_hist_free(h);

    /* window h = 1: only the last position counts */
    c.window = 1;
    h = hist_new(&c, 2, 3);
    push2(h, pc, qb1, qb2); /* favours q2 */
    push2(h, p, q1, q2);    /* favours q1: (1, 0) */
    ch = choose(h, NULL);
    VT_CHECK(ch.n_positions == 1 && ch.w[0] == 1, "window 1: %d positions, w0 %g", ch.n_positions, ch.w[0]);
    vs_ens_hist_free(h);
}

static void test_inverse(void) {
    /* p = (0.5, 0.5); q1 = (0.25, 0.75): KL e1 = 0.143841, TVD 0.25; q2 = (0.4, 0.6): KL e2 = 0.020411,
     * TVD 0.1. w ~ 1/e: w1 = e2 / (e1 + e2) */
    const float p[2] = {0.5f, 0.5f}, q1[2] = {0.25f, 0.75f}, q2[2] = {0.4f, 0.6f};
    const double e1 = 0.5 * log(2.0) + 0.5 * log(2.0 / 3.0), e2 = 0.5 * log(1.25) + 0.5 * log(5.0 / 6.0);
    VT_CHECK_NEAR(e1, 0.143841, 1e-6, "hand value e1");
    VT_CHECK_NEAR(e2, 0.020411, 1e-6, "hand value e2");
    vs_ens_weights_cfg c = cfg_of(VS_ENS_INV_KL, 0);
    vs_ens_hist *h = hist_new(&c, 2, 2);
    vs_ens_choice ch = choose(h, NULL);
    VT_CHECK(ch.fallback && ch.w[0] == 0.5f, "empty: uniform");
    push2(h, p, q1, q2);
    ch = choose(h, NULL);
    VT_CHECK_NEAR(ch.w[0], 0.124267, 1e-5, "inv-kl w1");
    VT_CHECK_NEAR(ch.w[1], 0.875733, 1e-5, "inv-kl w2");
    VT_CHECK_NEAR(ch.w[0], e2 / (e1 + e2), 1e-6, "inv-kl w1 formula");
    vs_ens_hist_free(h);
    /* temperature 0.5: w ~ (1/e)^2 */
    c.tau = 0.5f;
    h = hist_new(&c, 2, 2);
    push2(h, p, q1, q2);
    ch = choose(h, NULL);
    VT_CHECK_NEAR(ch.w[0], e2 * e2 / (e1 * e1 + e2 * e2), 1e-6, "tau 0.5");
    VT_CHECK_NEAR(ch.w[0], 0.019737, 1e-5, "tau 0.5 hand value");
    vs_ens_hist_free(h);
    /* tau -> 0 picks the best row; tau = 0 is exactly that; large tau -> uniform */
    float prev = 1;
    const float taus[4] = {0.3f, 0.1f, 0.03f, 0.01f};
    for (int i = 0; i < 4; i++) {
        c.tau = taus[i];
        h = hist_new(&c, 2, 2);
        push2(h, p, q1, q2);
        ch = choose(h, NULL);
        VT_CHECK(ch.w[0] < prev, "w1 decreases as tau falls (%g at tau %g)", ch.w[0], taus[i]);
        prev = ch.w[0];
        vs_ens_hist_free(h);
    }
    VT_CHECK(prev < 1e-6f, "tau 0.01: w1 %g", prev);
    c.tau = 0;
    h = hist_new(&c, 2, 2);
    push2(h, p, q1, q2);
    ch = choose(h, NULL);
    VT_CHECK(ch.w[0] == 0 && ch.w[1] == 1, "tau 0: the best row");
    vs_ens_hist_free(h);
    c.tau = 1000;
    h = hist_new(&c, 2, 2);
    push2(h, p, q1, q2);
    ch = choose(h, NULL);
    VT_CHECK(fabsf(ch.w[0] - 0.5f) < 0.001f, "tau 1000: nearly uniform (%g)", ch.w[0]);
    vs_ens_hist_free(h);
    /* TVD */
    c = cfg_of(VS_ENS_INV_TVD, 0);
    h = hist_new(&c, 2, 2);
    push2(h, p, q1, q2);
    ch = choose(h, NULL);
    VT_CHECK_NEAR(ch.w[0], 0.1 / 0.35, 1e-6, "inv-tvd w1");
    double tv[2];
    vs_ens_hist_row_sums(h, NULL, tv, NULL);
    VT_CHECK_NEAR(tv[0], 0.25, 1e-7, "TVD row 1");
    VT_CHECK_NEAR(tv[1], 0.1, 1e-7, "TVD row 2");
    vs_ens_hist_free(h);
    /* a perfect row (e = 0) takes all the weight */
    c = cfg_of(VS_ENS_INV_KL, 0);
    h = hist_new(&c, 2, 2);
    push2(h, p, q1, p);
    ch = choose(h, NULL);
    VT_CHECK(ch.w[0] == 0 && ch.w[1] == 1, "e = 0 row wins: (%g, %g)", ch.w[0], ch.w[1]);
    vs_ens_hist_free(h);
    /* m = 4: sums over positions, w ~ 1/e */
    h = hist_new(&c, 4, 2);
    const float r3[2] = {0.6f, 0.4f}, r4[2] = {0.1f, 0.9f};
    const float *qs[4] = {q1, q2, r3, r4};
    vs_error err = {0};
    VT_REQUIRE(vs_ens_hist_push(h, p, qs, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_ens_hist_push(h, p, qs, &err) == VS_OK, "%s", err.msg);
    ch = choose(h, NULL);
    double inv = 0, e[4];
    for (int r = 0; r < 4; r++) e[r] = 2 * vs_ens_kl(p, qs[r], 2), inv += 1 / e[r];
    for (int r = 0; r < 4; r++) VT_CHECK_NEAR(ch.w[r], (1 / e[r]) / inv, 1e-5, "m 4 row %d", r);
    vs_ens_hist_free(h);
}

static void test_adaboost(void) {
    /* V = 3 (ln(K - 1) = ln 2); 4 positions: row 1 right 3 times, row 2 once.
     * eps1 = (1 + 0.5) / 5 = 0.3: w1 = ln(7/3) + C ln 2; eps2 = (3 + 0.5) / 5 = 0.7: w2 = ln(3/7) + C ln 2.
     * C = 1: w2 = -0.154151 -> 0: w = (1, 0). C = 2: w1 = 2.233592, w2 = 0.538997: w1 = 0.805599. */
    const float pa[3] = {0.7f, 0.2f, 0.1f}, pb[3] = {0.1f, 0.7f, 0.2f};
    const float right[3] = {0.6f, 0.3f, 0.1f}, wrong[3] = {0.2f, 0.2f, 0.6f};
    const float rb[3] = {0.2f, 0.6f, 0.2f};
    vs_ens_weights_cfg c = cfg_of(VS_ENS_ADABOOST, 0);
    for (int pass = 0; pass < 2; pass++) {
        c.adaboost_c = pass == 0 ? 1.0f : 2.0f;
        vs_ens_hist *h = hist_new(&c, 2, 3);
        push2(h, pa, right, right); /* both right */
        push2(h, pa, right, wrong); /* row 1 right */
        push2(h, pb, rb, wrong);    /* row 1 right */
        push2(h, pb, wrong, wrong); /* both wrong */
        int32_t hits[2];
        vs_ens_hist_row_sums(h, NULL, NULL, hits);
        VT_CHECK(hits[0] == 3 && hits[1] == 1, "hits %d %d", hits[0], hits[1]);
        vs_ens_choice ch = choose(h, NULL);
        if (pass == 0) {
            VT_CHECK(ch.w[0] == 1 && ch.w[1] == 0 && !ch.fallback, "C 1: (%g, %g)", ch.w[0], ch.w[1]);
        } else {
            double w1 = log(7.0 / 3.0) + 2 * log(2.0), w2 = log(3.0 / 7.0) + 2 * log(2.0);
            VT_CHECK_NEAR(w1, 2.233592, 1e-6, "hand w1");
            VT_CHECK_NEAR(w2, 0.538997, 1e-6, "hand w2");
            VT_CHECK_NEAR(ch.w[0], 0.805599, 1e-5, "C 2: w1");
        }
        vs_ens_hist_free(h);
    }
    /* every weight negative (C = 0, both rows mostly wrong): uniform fallback */
    c.adaboost_c = 0;
    vs_ens_hist *h = hist_new(&c, 2, 3);
    push2(h, pa, wrong, wrong);
    push2(h, pa, wrong, wrong);
    vs_ens_choice ch = choose(h, NULL);
    VT_CHECK(ch.fallback && ch.w[0] == 0.5f, "all zero: uniform fallback");
    vs_ens_hist_free(h);
}

static void test_static_random(void) {
    vs_error err = {0};
    vs_ens_weights_cfg c = cfg_of(VS_ENS_STATIC, 64);
    VT_REQUIRE(vs_ens_weights_parse("static:2,1", &c, &err) == VS_OK, "%s", err.msg);
    vs_ens_hist *h = hist_new(&c, 2, 16);
    vs_ens_choice ch = choose(h, NULL);
    VT_CHECK_NEAR(ch.w[0], 2.0 / 3.0, 1e-6, "static 2:1");
    VT_CHECK(!ch.fallback, "static is no fallback");
    vs_ens_hist_free(h);
    VT_CHECK(!vs_ens_hist_new(&c, 3, 16, &err) && strstr(err.msg, "ratios"), "2 ratios for 3 inputs: %s",
             err.msg);
    c = cfg_of(VS_ENS_STATIC, 64);
    h = hist_new(&c, 4, 16);
    ch = choose(h, NULL);
    VT_CHECK(ch.w[0] == 0.25f && ch.w[3] == 0.25f, "static uniform");
    vs_ens_hist_free(h);

    c = cfg_of(VS_ENS_RANDOM, 64);
    h = hist_new(&c, 2, 16);
    VT_CHECK(vs_ens_weights_choose(h, NULL, &ch, &err) == VS_ERR_INVALID, "random needs a generator");
    vs_rng rng, rng2;
    vs_rng_seed(&rng, 5);
    vs_rng_seed(&rng2, 5);
    int below = 0;
    double mean = 0;
    const int N = 20000;
    for (int i = 0; i < N; i++) {
        ch = choose(h, &rng);
        vs_ens_choice c2 = choose(h, &rng2);
        VT_REQUIRE(ch.w[0] == c2.w[0], "random: same seed, same weights");
        VT_REQUIRE(fabsf(ch.w[0] + ch.w[1] - 1) < 1e-6f && ch.w[0] >= 0 && ch.w[1] >= 0, "on the simplex");
        mean += ch.w[0];
        below += ch.w[0] < 0.25f;
    }
    /* uniform on the 1-simplex: w1 ~ U(0, 1) */
    VT_CHECK_NEAR(mean / N, 0.5, 0.01, "random: mean");
    VT_CHECK_NEAR((double)below / N, 0.25, 0.01, "random: P(w1 < 0.25)");
    vs_ens_hist_free(h);
    /* m = 3: uniform on the simplex has E[w_1^2] = 2 / ((m)(m + 1)) = 1/6 */
    h = hist_new(&c, 3, 16);
    double m2 = 0;
    for (int i = 0; i < N; i++) {
        ch = choose(h, &rng);
        m2 += (double)ch.w[0] * ch.w[0];
    }
    VT_CHECK_NEAR(m2 / N, 1.0 / 6.0, 0.006, "random m 3: second moment");
    vs_ens_hist_free(h);
}

static void test_parse(void) {
    vs_error err = {0};
    vs_ens_weights_cfg c;
    vs_ens_weights_cfg_default(&c);
    const char *ok[] = {"static", "grid",     "inv-kl",       "inv-tvd",
                        "random", "adaboost", "static:1,2,3", "static:2:1"};
    const vs_ens_policy pol[] = {VS_ENS_STATIC, VS_ENS_GRID,     VS_ENS_INV_KL, VS_ENS_INV_TVD,
                                 VS_ENS_RANDOM, VS_ENS_ADABOOST, VS_ENS_STATIC, VS_ENS_STATIC};
    for (size_t i = 0; i < VS_ARRAY_LEN(ok); i++) {
        VT_CHECK(vs_ens_weights_parse(ok[i], &c, &err) == VS_OK && c.policy == pol[i], "%s: %s", ok[i],
                 err.msg);
        VT_CHECK(!strcmp(vs_ens_policy_name(c.policy), i < 6 ? ok[i] : "static"), "name of %s", ok[i]);
    }
    VT_CHECK(c.n_ratios == 2 && c.ratios[0] == 2 && c.ratios[1] == 1, "static:2:1 ratios");
    const char *bad[] = {"",
                         "tabed",
                         "GRID",
                         "static:",
                         "static:a",
                         "static:0,0",
                         "static:1,,2",
                         "static:-1,2",
                         "static:1,2,3,4,5,6,7,8,9",
                         "inv-kl2"};
    for (size_t i = 0; i < VS_ARRAY_LEN(bad); i++) {
        vs_error_clear(&err);
        VT_CHECK(vs_ens_weights_parse(bad[i], &c, &err) == VS_ERR_INVALID && err.msg[0], "'%s' refused",
                 bad[i]);
    }
    VT_CHECK(vs_ens_weights_parse("tabed", &c, &err) && strstr(err.msg, "unknown weight policy 'tabed'") &&
                 strstr(err.msg, "inv-kl"),
             "unknown policy message names the choices: %s", err.msg);
    vs_ens_weights_cfg_default(&c);
    c.tau = -1;
    VT_CHECK(vs_ens_weights_check(&c, 2, &err) && strstr(err.msg, "temperature"), "negative tau");
    vs_ens_weights_cfg_default(&c);
    c.window = -2;
    VT_CHECK(vs_ens_weights_check(&c, 2, &err) && strstr(err.msg, "window"), "negative window");
    vs_ens_weights_cfg_default(&c);
    VT_CHECK(vs_ens_weights_check(&c, 0, &err) && vs_ens_weights_check(&c, 9, &err), "m out of range");
}

/* Random peaked distribution over V (softmax of scaled normals). */
static void rand_dist(vs_rng *r, float *x, int V, float scale) {
    double s = 0;
    for (int i = 0; i < V; i++) s += x[i] = expf(scale * vs_rng_normal(r));
    for (int i = 0; i < V; i++) x[i] = (float)(x[i] / s);
}

static void test_topk_and_memory(void) {
    enum { V = 2048, M = 2, N = 40 };
    vs_ens_weights_cfg ce = cfg_of(VS_ENS_GRID, 0), ca = cfg_of(VS_ENS_GRID, 64);
    vs_ens_hist *he = hist_new(&ce, M, V), *ha = hist_new(&ca, M, V);
    float *p = malloc(sizeof(float) * V), *q1 = malloc(sizeof(float) * V), *q2 = malloc(sizeof(float) * V);
    vs_rng r;
    vs_rng_seed(&r, 11);
    int same = 0;
    for (int i = 0; i < N; i++) {
        rand_dist(&r, p, V, 3.0f);
        /* drafts: the target's distribution perturbed */
        for (int pass = 0; pass < 2; pass++) {
            float *q = pass ? q2 : q1;
            double s = 0;
            for (int j = 0; j < V; j++) s += q[j] = p[j] * expf((pass ? 1.5f : 0.7f) * vs_rng_normal(&r));
            for (int j = 0; j < V; j++) q[j] = (float)(q[j] / s);
        }
        push2(he, p, q1, q2);
        push2(ha, p, q1, q2);
        vs_ens_choice a = choose(he, NULL), b = choose(ha, NULL);
        same += a.grid_index == b.grid_index;
    }
    double kle[M], kla[M];
    int32_t hie[M], hia[M];
    vs_ens_hist_row_sums(he, kle, NULL, hie);
    vs_ens_hist_row_sums(ha, kla, NULL, hia);
    for (int m = 0; m < M; m++) {
        VT_CHECK(hie[m] == hia[m], "row %d: hits are exact under top-k (%d vs %d)", m, hie[m], hia[m]);
        VT_CHECK(kla[m] <= kle[m] + 1e-6, "row %d: top-k KL %g is a lower bound of %g", m, kla[m], kle[m]);
        VT_CHECK(kla[m] > 0.5 * kle[m], "row %d: top-k KL %g close to the exact %g", m, kla[m], kle[m]);
    }
    VT_CHECK(same >= N * 3 / 4, "grid choices agree with the exact ones in %d of %d blocks", same, N);
    printf("  top-64 vs exact (V %d): row KL %.4f / %.4f and %.4f / %.4f, grid choice equal in %d/%d\n", V,
           kla[0], kle[0], kla[1], kle[1], same, N);
    vs_ens_hist_free(he);
    vs_ens_hist_free(ha);

    /* a window keeps memory constant and equals a fresh history of the last h positions */
    vs_ens_weights_cfg cw = cfg_of(VS_ENS_INV_KL, 16);
    cw.window = 3;
    vs_ens_hist *hw = hist_new(&cw, M, V);
    size_t b0 = vs_ens_hist_bytes(hw);
    float *ps[8], *q1s[8], *q2s[8];
    for (int i = 0; i < 8; i++) {
        ps[i] = malloc(sizeof(float) * V), q1s[i] = malloc(sizeof(float) * V),
        q2s[i] = malloc(sizeof(float) * V);
        rand_dist(&r, ps[i], V, 2.0f);
        rand_dist(&r, q1s[i], V, 2.0f);
        rand_dist(&r, q2s[i], V, 2.0f);
        push2(hw, ps[i], q1s[i], q2s[i]);
    }
    VT_CHECK(vs_ens_hist_bytes(hw) == b0, "window: memory constant (%zu vs %zu)", vs_ens_hist_bytes(hw), b0);
    VT_CHECK(vs_ens_hist_len(hw) == 3 && vs_ens_hist_total(hw) == 8, "window: %d of %lld",
             vs_ens_hist_len(hw), (long long)vs_ens_hist_total(hw));
    cw.window = 0;
    vs_ens_hist *hf = hist_new(&cw, M, V);
    for (int i = 5; i < 8; i++) push2(hf, ps[i], q1s[i], q2s[i]);
    vs_ens_choice a = choose(hw, NULL), b = choose(hf, NULL);
    VT_CHECK(a.w[0] == b.w[0] && a.n_positions == 3, "window 3 == the last 3 positions (%g vs %g)", a.w[0],
             b.w[0]);
    /* all positions: records only, about (2m + J) doubles each */
    size_t before = vs_ens_hist_bytes(hf);
    for (int i = 0; i < 1000; i++) push2(hf, ps[i % 8], q1s[i % 8], q2s[i % 8]);
    size_t per = (vs_ens_hist_bytes(hf) - before) / 1000;
    VT_CHECK(per < 64, "history bytes per position %zu (no distributions are stored)", per);
    vs_ens_hist_clear(hf);
    VT_CHECK(vs_ens_hist_len(hf) == 0, "clear");
    for (int i = 0; i < 8; i++) free(ps[i]), free(q1s[i]), free(q2s[i]);
    vs_ens_hist_free(hw);
    vs_ens_hist_free(hf);
    free(p), free(q1), free(q2);
}

static void test_trace(void) {
    vs_error err = {0};
    vs_ens_trace t;
    vs_ens_trace_init(&t);
    t.m = 2;
    strcpy(t.names[0], "m");
    strcpy(t.names[1], "t");
    strcpy(t.policy, "grid");
    for (int i = 0; i < 5; i++) {
        vs_ens_trace_rec r = {.request = i / 3, .block = i % 3, .step = 3 * i, .n_draft = 5, .n_accept = i};
        r.w[0] = 0.1f * (float)i, r.w[1] = 1 - r.w[0];
        VT_REQUIRE(vs_ens_trace_add(&t, &r, &err) == VS_OK, "%s", err.msg);
    }
    char path[512];
    snprintf(path, sizeof(path), "%s/trace.tsv", vt_tmpdir());
    FILE *f = fopen(path, "w");
    VT_REQUIRE(f, "open %s", path);
    VT_CHECK(vs_ens_trace_write(&t, f, &err) == VS_OK, "%s", err.msg);
    fclose(f);
    vs_ens_trace u;
    VT_REQUIRE(vs_ens_trace_read(path, &u, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(u.m == 2 && u.n == 5 && !strcmp(u.names[1], "t") && !strcmp(u.policy, "grid"),
             "round trip header");
    for (int i = 0; i < 5; i++)
        VT_CHECK(u.rec[i].step == 3 * i && u.rec[i].n_accept == i &&
                     fabsf(u.rec[i].w[0] - t.rec[i].w[0]) < 1e-6f,
                 "record %d", i);
    vs_ens_trace_free(&u);
    vs_ens_trace_free(&t);

    const char *head =
        "# vlmspec weight trace 1\n# inputs m t\nrequest\tblock\tstep\tn_draft\tn_accept\tw_m\tw_t\n";
    struct {
        const char *text, *needle;
    } bad[] = {
        {"", "empty"},
        {"hello\n", "not a vlmspec weight trace"},
        {"# vlmspec weight trace 1\nrequest\tblock\tstep\tn_draft\tn_accept\tw_m\n", "inputs"},
        {"# vlmspec weight trace 1\n# inputs m t\n", "no header"},
        {"# vlmspec weight trace 1\n# inputs m t\nrequest block step n_draft n_accept w_m w_p\n", "header"},
        {"# vlmspec weight trace 1\n# inputs m t\n# inputs c\n", "inputs"},
        {NULL, NULL},
    };
    char buf[1024];
    for (int i = 0; bad[i].text; i++) {
        vs_error_clear(&err);
        VT_CHECK(vs_ens_trace_parse(bad[i].text, strlen(bad[i].text), "x.tsv", &u, &err) == VS_ERR_FORMAT &&
                     strstr(err.msg, bad[i].needle),
                 "bad trace %d: %s", i, err.msg);
    }
    const char *rows[] = {"0\t0\t0\t5\t2\t0.5\n",        "0\t0\t0\t5\t6\t0.5\t0.5\n",
                          "0\t0\t-1\t5\t2\t0.5\t0.5\n",  "0\t0\t0\t5\t2\t1.5\t0.5\n",
                          "0\t0\t0\t5\t2\tnan\t0.5\n",   "0\t0\t0\t5\t2\t0.5\t0.5\t1\n",
                          "0\t0\t0x1\t5\t2\t0.5\t0.5\n", "0\t0\t99999999999\t5\t2\t0.5\t0.5\n"};
    for (size_t i = 0; i < VS_ARRAY_LEN(rows); i++) {
        snprintf(buf, sizeof(buf), "%s%s", head, rows[i]);
        vs_error_clear(&err);
        VT_CHECK(vs_ens_trace_parse(buf, strlen(buf), "x.tsv", &u, &err) == VS_ERR_FORMAT &&
                     strstr(err.msg, "x.tsv:4"),
                 "bad row %zu: %s", i, err.msg);
    }
    /* a long line, a NUL byte */
    char longl[2000];
    memset(longl, '1', sizeof(longl));
    memcpy(longl, head, strlen(head));
    VT_CHECK(vs_ens_trace_parse(longl, sizeof(longl), "x.tsv", &u, &err) == VS_ERR_FORMAT, "long line");
    snprintf(buf, sizeof(buf), "%s0\t0\t0\t5\t2\t0.5\t0.5\n", head);
    size_t bl = strlen(buf);
    buf[bl - 3] = 0;
    VT_CHECK(vs_ens_trace_parse(buf, bl, "x.tsv", &u, &err) == VS_ERR_FORMAT, "NUL byte");
    VT_CHECK(vs_ens_trace_read("/nonexistent/trace.tsv", &u, &err) == VS_ERR_IO, "missing file");
}

int main(void) {
    test_grid_enumeration();
    test_distances();
    test_grid_choice();
    test_inverse();
    test_adaboost();
    test_static_random();
    test_parse();
    test_topk_and_memory();
    test_trace();
    return vt_finish("ens_weights");
}
