/* test_spec_sampling: speculative SAMPLING is lossless. On a tiny-vocabulary pair (V = 16: a target and
 * a related draft, dim 32, 1 layer each), the joint distribution of the first 3 generated tokens under
 * speculative sampling is compared with the exact distribution of target-only sampling, computed by
 * enumerating all 16^3 paths with the target's processed probabilities (EOS ends a path). A chi-square
 * goodness-of-fit test (bins with expected count < 5 pooled) must give p > 0.001 (fixed seeds) with 200k
 * samples at each of T 1.0, T 0.7 / top-p 0.9, T 1.5 / top-p 0.8, and 100k with top-k 6 and with
 * deterministic (greedy) drafts. The same test run with the engine's test-only
 * debug_break_residual switch (correction drawn from p instead of norm(max(0, p - q))) must be REJECTED
 * (p < 1e-6, with 50k samples), proving the test can fail.
 * The draft shares the target's seed with its weights scaled (0.45 vs 0.6), so drafts are accepted about
 * 80% of the time and every branch (acceptance, residual, bonus, EOS) is exercised. A 1M-sample run of
 * the first configuration gave p = 0.07 (no bias visible at that size).
 * Token trees (draft_lm tree_width 2 and 3, 50k samples each): siblings drawn without replacement from
 * the draft's distribution (the SpecInfer / MCSD walk of spec.h), with top-p and top-k, and deterministic
 * top-w siblings (EAGLE's rule), and an unrelated draft model (acceptance ~0.3, so later siblings are
 * tried often); the broken residual is rejected in the tree walk too. Checked by hand: skipping the tree
 * walk's residual update fails every tree configuration (p < 1e-138), and skipping the sibling update of
 * q (q(x) = 0, renormalised) fails the unrelated-draft one (p = 3e-45; the related draft accepts its first
 * sibling ~90% of the time, so it cannot see that bug).
 * K-quant weights: a Q4_K target and a Q6_K draft of width 256 (20k samples each, a chain and a width-3
 * tree, and the broken residual rejected on them too). */
#include <string.h>

#include "draft_lm.h"
#include "spec.h"
#include "spec_testutil.h"
#include "testutil.h"
#include "tokenizer.h"

#define V ST_SV
#define NCAT ST_NCAT
#define EOS ST_EOS

static vs_lm *make_model_t(int E, int F, float std, uint64_t seed, const char *name, vs_type type) {
    vs_lm_random_opts o;
    memset(&o, 0, sizeof(o));
    o.n_embd = E, o.n_layer = 1, o.n_head = 2, o.n_head_kv = 2, o.n_ff = F, o.n_ctx = 64, o.n_vocab = V;
    o.type = type, o.init_std = std, o.tied = true, o.seed = seed;
    vs_error err = {0};
    VT_REQUIRE(vs_lm_write_random(&o, st_tmp_path(name), &err) == VS_OK, "%s", err.msg);
    vs_lm *lm = vs_lm_load(st_tmp_path(name), &err);
    VT_REQUIRE(lm, "%s", err.msg);
    return lm;
}

static vs_lm *make_model(int E, int F, float std, uint64_t seed, const char *name) {
    return make_model_t(E, F, std, seed, name, VS_TYPE_F32);
}

/* --- speculative sampling counts and the test --- */

typedef struct config {
    const char *name;
    float temperature, top_p;
    int top_k;
    int gamma;
    bool greedy_draft;
    bool broken;
    int width; /* token-tree width (0 / 1: chains) */
    bool far;  /* draft with the unrelated model (low acceptance: later siblings are reached often) */
    float p_min; /* adaptive draft length (chains): drafting stops before a token of q below it */
} config;

/* Returns the chi-square p-value of n speculative samples against the exact distribution. */
static double run_config(vs_lm *target, vs_lm *draft, const config *c, int n, const int32_t *prompt, int np,
                         double *accept_rate) {
    vs_error err = {0};
    vs_sampler_params sp = vs_sampler_params_default();
    sp.temperature = c->temperature, sp.top_p = c->top_p, sp.top_k = c->top_k;
    vs_spec_segment seg = {.kind = VS_SPEC_SEG_TEXT, .n = np, .tokens = prompt};
    vs_spec_prompt pr = {.seg = &seg, .n_seg = 1};
    double *pd = malloc(sizeof(double) * NCAT);
    st_exact_distribution(target, &sp, &pr, pd);

    vs_tokenizer *tok = vs_tokenizer_from_gguf(vs_lm_gguf(target), &err);
    VT_REQUIRE(tok && vs_tokenizer_eos(tok) == EOS, "tokenizer with EOS %d", EOS);
    vs_spec_config ec = {.n_ctx = 32, .tok = tok};
    vs_spec *eng = vs_spec_new(target, &ec, &err);
    VT_REQUIRE(eng, "%s", err.msg);
    vs_draft_lm_opts dopt = {.greedy = c->greedy_draft, .n_ctx = 32, .tree_width = c->width, .p_min = c->p_min};
    vs_spec_drafter *d = vs_draft_lm_new(draft, target, &dopt, &err);
    VT_REQUIRE(d, "%s", err.msg);
    vs_spec_params par = vs_spec_params_default();
    par.gamma = c->gamma;
    par.n_predict = 3;
    par.sampling = sp;
    par.reuse_prefix = true; /* the prompt stays cached: each sample costs only its blocks */
    par.debug_break_residual = c->broken;

    int64_t *cnt = calloc(NCAT, sizeof(int64_t));
    int64_t drafted = 0, accepted = 0, tree_blocks = 0, short_blocks = 0;
    vs_spec_log log;
    vs_spec_log_init(&log);
    for (int i = 0; i < n; i++) {
        par.sampling.seed = 0x5eed0000ull + (uint64_t)i * 7919u;
        VT_REQUIRE(vs_spec_generate(eng, d, &pr, &par, NULL, NULL, &log, &err) == VS_OK, "%s", err.msg);
        VT_REQUIRE(log.n_tokens >= 1 && log.n_tokens <= 3, "sample %d has %d tokens", i, log.n_tokens);
        VT_REQUIRE(log.n_tokens == 3 || log.tokens[log.n_tokens - 1] == EOS, "short path without EOS");
        cnt[st_cat_of(log.tokens, log.n_tokens)]++;
        for (int b = 0; b < log.n_blocks; b++) {
            drafted += log.blocks[b].n_eval, accepted += log.blocks[b].n_accept;
            tree_blocks += log.blocks[b].n_draft > log.blocks[b].n_depth;
            short_blocks += log.blocks[b].n_draft < VS_MIN(c->gamma, 3 - log.blocks[b].n_accept);
        }
    }
    *accept_rate = drafted ? (double)accepted / (double)drafted : 0;
    if (c->width > 1)
        VT_CHECK(tree_blocks > n / 2, "%s: only %lld tree blocks in %d samples", c->name,
                 (long long)tree_blocks, n);
    if (c->p_min > 0)
        VT_CHECK(short_blocks > n / 10, "%s: only %lld blocks stopped early in %d samples", c->name,
                 (long long)short_blocks, n);

    /* chi-square over bins with expected count >= 5; the rest pooled into one bin */
    double chi2;
    int bins;
    int64_t impossible;
    double p = st_chi2_test(pd, cnt, n, &chi2, &bins, &impossible);
    printf("  %-44s n %d, %d bins, chi2 %.1f, p = %.3g, impossible paths %lld, acceptance %.3f\n", c->name, n,
           bins, chi2, p, (long long)impossible, *accept_rate);
    vs_spec_log_free(&log);
    free(cnt);
    free(pd);
    vs_spec_drafter_free(d);
    vs_spec_free(eng);
    vs_tokenizer_free(tok);
    return p;
}

static void test_chi2_function(void) {
    /* known values: P(chi2_1 > 3.841) = 0.05, P(chi2_10 > 18.307) = 0.05, P(chi2_100 > 124.342) = 0.05,
     * P(chi2_2 > x) = exp(-x / 2) */
    VT_CHECK_NEAR(vt_chi2_pvalue(3.841459, 1), 0.05, 1e-5, "df 1");
    VT_CHECK_NEAR(vt_chi2_pvalue(18.307038, 10), 0.05, 1e-5, "df 10");
    VT_CHECK_NEAR(vt_chi2_pvalue(124.342113, 100), 0.05, 1e-5, "df 100");
    VT_CHECK_NEAR(vt_chi2_pvalue(7.0, 2), exp(-3.5), 1e-9, "df 2");
}

int main(int argc, char **argv) {
    /* an optional argument (or VLMSPEC_SAMPLING_SCALE) scales the sample count (e.g. 0.1 for a quick look);
     * the suite runs 1.0, sanitizer builds 0.25 (tests/spec_sampling.cmake) */
    const char *env_scale = getenv("VLMSPEC_SAMPLING_SCALE");
    double scale = argc > 1 ? atof(argv[1]) : env_scale ? atof(env_scale) : 1.0;
    const int N = (int)(200000 * (scale > 0 ? scale : 1.0));
    double t0 = vs_time_now();
    test_chi2_function();
    vs_lm *target = make_model(32, 64, 0.6f, 101, "target16.gguf");
    vs_lm *draft =
        make_model(32, 64, 0.45f, 101, "draft16.gguf"); /* the target's seed, weights scaled: related */
    vs_lm *far = make_model(32, 64, 0.6f, 202, "far16.gguf"); /* unrelated weights */
    const int32_t prompt[4] = {1, 7, 11, 4};
    /* the temperature / top-p sweep with 200k samples each; two further configurations (top-k, greedy
     * drafts) with 100k to keep the test near half a minute of CPU */
    const config cfgs[] = {
        {"T 1.0, gamma 2", 1.0f, 1.0f, 0, 2, false, false, 1, false, 0},
        {"T 0.7, top-p 0.9, gamma 2", 0.7f, 0.9f, 0, 2, false, false, 1, false, 0},
        {"T 1.5, top-p 0.8, gamma 1", 1.5f, 0.8f, 0, 1, false, false, 1, false, 0},
        {"T 1.0, top-k 6, gamma 3", 1.0f, 1.0f, 6, 3, false, false, 1, false, 0},
        {"T 1.0, greedy drafts, gamma 2", 1.0f, 1.0f, 0, 2, true, false, 1, false, 0},
        /* the adaptive draft length: blocks that stop before an unconfident token */
        {"T 1.0, p-min 0.3, gamma 3", 1.0f, 1.0f, 0, 3, false, false, 1, false, 0.3f},
        /* token trees: siblings drawn without replacement (SpecInfer / MCSD walk), deterministic top-w
         * siblings (EAGLE's rule) */
        {"tree width 2, T 1.0, gamma 2", 1.0f, 1.0f, 0, 2, false, false, 2, false, 0},
        {"tree width 3, T 0.7, top-p 0.9, gamma 2", 0.7f, 0.9f, 0, 2, false, false, 3, false, 0},
        {"tree width 3, T 1.0, top-k 6, gamma 1", 1.0f, 1.0f, 6, 1, false, false, 3, false, 0},
        {"tree width 3, greedy drafts, T 1.0, gamma 2", 1.0f, 1.0f, 0, 2, true, false, 3, false, 0},
        {"tree width 3, unrelated draft, T 1.0, gamma 2", 1.0f, 1.0f, 0, 2, false, false, 3, true, 0},
    };
    for (size_t i = 0; i < VS_ARRAY_LEN(cfgs); i++) {
        double acc;
        const bool tree = cfgs[i].width > 1;
        double p = run_config(target, cfgs[i].far ? far : draft, &cfgs[i], i < 3 ? N : tree || cfgs[i].p_min > 0 ? N / 4 : N / 2,
                              prompt, 4, &acc);
        VT_CHECK(p > 0.001, "%s: speculative sampling differs from target-only sampling (p = %g)",
                 cfgs[i].name, p);
        /* trees accept more (a rejected first sibling leaves the others) */
        VT_CHECK(acc > 0.05 && acc < (tree ? 0.99 : 0.95),
                 "%s: acceptance %g does not exercise both branches", cfgs[i].name, acc);
    }
    /* K-quant weights (the types of the GGUFs people download): a Q4_K target and a Q6_K draft of width 256
     * (the K-quant block size), the same seeds as above and the weights scaled by sqrt(32 / 256) so that
     * the logits keep the scale of the width-32 pair */
    {
        const float k = sqrtf(32.0f / 256.0f);
        vs_lm *kt = make_model_t(256, 256, 0.6f * k, 101, "target16-q4k.gguf", VS_TYPE_Q4_K);
        vs_lm *kd = make_model_t(256, 256, 0.45f * k, 101, "draft16-q6k.gguf", VS_TYPE_Q6_K);
        VT_REQUIRE(vs_lm_cfg(kt)->wtype == VS_TYPE_Q4_K && vs_lm_cfg(kd)->wtype == VS_TYPE_Q6_K, "K-quant pair");
        const config kc[] = {
            {"Q4_K target, Q6_K draft, T 1.0, gamma 2", 1.0f, 1.0f, 0, 2, false, false, 1, false, 0},
            {"Q4_K / Q6_K, tree width 3, T 1.0, gamma 2", 1.0f, 1.0f, 0, 2, false, false, 3, false, 0},
        };
        for (size_t i = 0; i < VS_ARRAY_LEN(kc); i++) {
            double acc;
            double p = run_config(kt, kd, &kc[i], N / 10, prompt, 4, &acc);
            VT_CHECK(p > 0.001, "%s: speculative sampling differs from target-only sampling (p = %g)", kc[i].name, p);
            VT_CHECK(acc > 0.05 && acc < 0.99, "%s: acceptance %g does not exercise both branches", kc[i].name, acc);
        }
        const config kb = {"BROKEN residual (must fail), Q4_K / Q6_K", 1.0f, 1.0f, 0, 2, false, true, 1, false, 0};
        double acc;
        double p = run_config(kt, kd, &kb, N / 10, prompt, 4, &acc);
        VT_CHECK(p < 1e-6, "the test did not detect the broken residual on the K-quant pair (p = %g)", p);
        vs_lm_free(kd);
        vs_lm_free(kt);
    }
    /* the deliberately broken residual must be caught */
    const config broken = {"BROKEN residual (must fail), T 1.0", 1.0f, 1.0f, 0, 2, false, true, 1, false, 0};
    double acc;
    double p = run_config(target, draft, &broken, N / 4, prompt, 4, &acc);
    VT_CHECK(p < 1e-6, "the test did not detect the broken residual (p = %g)", p);
    /* and in the tree walk (the residual update after a rejected sibling skipped) */
    const config broken_tree = {
        "BROKEN residual (must fail), tree width 3", 1.0f, 1.0f, 0, 2, false, true, 3, false, 0};
    p = run_config(target, draft, &broken_tree, N / 4, prompt, 4, &acc);
    VT_CHECK(p < 1e-6, "the test did not detect the broken tree residual (p = %g)", p);
    vs_lm_free(far);
    vs_lm_free(draft);
    vs_lm_free(target);
    printf("spec_sampling: %.1f s\n", vs_time_now() - t0);
    return vt_finish("spec_sampling");
}
