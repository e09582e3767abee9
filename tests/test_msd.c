/* test_msd: the MSD feature-level draft head (draft_msd.h) on random models.
 *   - the head's cache after a request equals a reference built from scratch: the target evaluated
 *     over the whole context, its post-norm features paired with the next row's input (image rows
 *     straight when decoupled), one head forward (chains and EAGLE-2 trees, decoupled or not, prompts
 *     with and without images, prefix reuse over two turns): the features reach the right slots and
 *     drafted slots never stay;
 *   - lossless greedy: output identical to target-only for chains (gamma 1 .. 6) and EAGLE-2 trees, with
 *     and without images and decoupling, and over chat turns with prefix reuse;
 *   - lossless sampling: the joint law of 3 sampled tokens (V = 16) with a sampled chain and a
 *     deterministic EAGLE-2 tree equals target-only sampling (chi-square), a broken residual is caught;
 *   - a request whose earlier rows the head never saw (the target reused them for another drafter)
 *     drafts nothing and stays lossless;
 *   - bad input: a head of another width, vocabulary or embedding; not a head file; a truncated file; a
 *     head without fc.bias; tree options out of range. */
#include <string.h>
#include <unistd.h>

#include "draft_msd.h"
#include "spec.h"
#include "spec_testutil.h"
#include "testutil.h"

static vs_lm *make_target(int E, int V, uint64_t seed, float std, const char *name) {
    vs_lm_random_opts o;
    memset(&o, 0, sizeof(o));
    o.n_embd = E, o.n_layer = 2, o.n_head = 2, o.n_head_kv = 1, o.n_ff = 2 * E, o.n_ctx = 256, o.n_vocab = V;
    o.type = VS_TYPE_F32, o.init_std = std, o.tied = false, o.seed = seed;
    vs_error err = {0};
    VT_REQUIRE(vs_lm_write_random(&o, st_tmp_path(name), &err) == VS_OK, "%s", err.msg);
    vs_lm *lm = vs_lm_load(st_tmp_path(name), &err);
    VT_REQUIRE(lm, "%s", err.msg);
    return lm;
}

static vs_msd_head *make_head_std(const vs_lm *target, bool decoupled, uint64_t seed, float std, const char *name) {
    vs_msd_random_opts o = {.n_head = 2, .n_head_kv = 1, .n_ff = 64, .n_ctx = 256, .std = std,
                            .decoupled = decoupled, .seed = seed};
    vs_error err = {0};
    VT_REQUIRE(vs_msd_head_write_random(&o, target, st_tmp_path(name), &err) == VS_OK, "%s", err.msg);
    vs_msd_head *h = vs_msd_head_load(st_tmp_path(name), &err);
    VT_REQUIRE(h, "%s", err.msg);
    return h;
}

static vs_msd_head *make_head(const vs_lm *target, bool decoupled, uint64_t seed, const char *name) {
    return make_head_std(target, decoupled, seed, 0.3f, name);
}

/* Prompts: text, text + image + text, two images. */
enum { NPR = 4, IMG_ROWS = 5 };
typedef struct prompts {
    int32_t tok[NPR][64];
    float *img; /* [2][IMG_ROWS][E] */
    vs_spec_segment seg[NPR][5];
    vs_spec_prompt p[NPR];
} prompts;

static void make_prompts(prompts *P, int E, int V, uint64_t seed) {
    vs_rng rng;
    vs_rng_seed(&rng, seed);
    P->img = malloc(sizeof(float) * 2 * IMG_ROWS * (size_t)E);
    for (int i = 0; i < 2 * IMG_ROWS * E; i++) P->img[i] = 0.5f * vs_rng_normal(&rng);
    for (int k = 0; k < NPR; k++)
        for (int i = 0; i < 64; i++) P->tok[k][i] = 3 + (int32_t)vs_rng_below(&rng, (uint32_t)(V - 3));
    const int shapes[NPR][5] = {/* segment lengths; negative: image (index -1 - i) */
                                {9, 0}, {3, -1, 6, 0}, {2, -1, 4, -2, 3}, {14, 0}};
    for (int k = 0; k < NPR; k++) {
        int ns = 0, t = 0;
        for (int s = 0; s < 5 && shapes[k][s]; s++, ns++) {
            vs_spec_segment *g = &P->seg[k][s];
            memset(g, 0, sizeof(*g));
            if (shapes[k][s] > 0) {
                g->kind = VS_SPEC_SEG_TEXT, g->n = shapes[k][s], g->tokens = &P->tok[k][t];
                t += g->n;
            } else {
                const int im = -1 - shapes[k][s];
                g->kind = VS_SPEC_SEG_IMAGE, g->n = IMG_ROWS, g->embd = P->img + (size_t)im * IMG_ROWS * E;
                g->image = -1, g->image_id = 100 + im;
            }
        }
        P->p[k] = (vs_spec_prompt){.seg = P->seg[k], .n_seg = ns};
    }
}

static vs_status gen(st_engine *e, vs_spec_drafter *d, const vs_spec_prompt *p, int gamma, int n, bool reuse,
                     vs_spec_log *log, vs_error *err) {
    vs_spec_params pr = vs_spec_params_default();
    pr.gamma = gamma, pr.n_predict = n, pr.sampling.temperature = 0, pr.ignore_eos = true;
    pr.reuse_prefix = reuse;
    return vs_spec_generate(e->s, d, p, &pr, NULL, NULL, log, err);
}

/* The context rows of prompt p followed by `gen` tokens: input embeddings [n][E], and whether each is an
 * image row. Returns n. */
static int context_rows(const vs_lm *target, const vs_spec_prompt *p, const int32_t *gen, int n_gen, float *emb,
                        bool *is_img, int32_t *tok) {
    const int E = vs_lm_cfg(target)->n_embd;
    int n = 0;
    for (int s = 0; s < p->n_seg; s++)
        for (int j = 0; j < p->seg[s].n; j++, n++) {
            const vs_spec_segment *g = &p->seg[s];
            is_img[n] = g->kind == VS_SPEC_SEG_IMAGE;
            tok[n] = is_img[n] ? -1 : g->tokens[j];
            if (is_img[n]) memcpy(emb + (size_t)n * E, g->embd + (size_t)j * E, sizeof(float) * (size_t)E);
            else vs_lm_embed(target, g->tokens[j], emb + (size_t)n * E, NULL);
        }
    for (int i = 0; i < n_gen; i++, n++) {
        is_img[n] = false;
        tok[n] = gen[i];
        vs_lm_embed(target, gen[i], emb + (size_t)n * E, NULL);
    }
    return n;
}

/* max |head cache - reference| over the first len slots: the reference evaluates the target over the
 * context rows 0 .. len, normalises the hidden states with its final norm, builds each slot's input
 * from the head file's weights (read back through a second head forward with fc computed here) and
 * runs the head once. */
static double head_cache_diff(vs_lm *target, const vs_msd_head *h, const char *head_path, vs_kv *kv,
                              const vs_spec_prompt *p, const vs_spec_log *log) {
    vs_error err = {0};
    const vs_lm_config *tc = vs_lm_cfg(target);
    const int E = tc->n_embd, len = vs_kv_seq_len(kv, 0);
    float *emb = malloc(sizeof(float) * 256 * (size_t)E), *hid = malloc(sizeof(float) * 256 * (size_t)E);
    float *in = malloc(sizeof(float) * 256 * (size_t)E), *cat = malloc(sizeof(float) * 2 * (size_t)E);
    bool img[256];
    int32_t tok[256];
    const int n = context_rows(target, p, log->tokens, log->n_tokens, emb, img, tok);
    VT_REQUIRE(len + 1 <= n, "head cache %d slots, context %d rows", len, n);
    /* target features of rows 0 .. len - 1 */
    vs_kv *tkv = vs_lm_kv_new(target, 1, 256, VS_TYPE_F32, &err);
    vs_lm_row rows[256];
    memset(rows, 0, sizeof(rows));
    for (int i = 0; i < len; i++) rows[i].embd = emb + (size_t)i * E, rows[i].pos = i;
    vs_lm_out o = {.hidden = hid, .attn_layer = -1};
    if (len > 0) VT_REQUIRE(vs_lm_forward(target, tkv, NULL, rows, len, &o, &err) == VS_OK, "%s", err.msg);
    /* fc by hand from the file's tensors */
    vs_gguf *g = vs_gguf_open(head_path, &err);
    VT_REQUIRE(g, "%s", err.msg);
    const vs_gguf_tensor *W = vs_gguf_find_tensor(g, "fc.weight"), *B = vs_gguf_find_tensor(g, "fc.bias");
    VT_REQUIRE(W && B && W->type == VS_TYPE_F32 && B->type == VS_TYPE_F32, "fc tensors");
    const float *w = W->data, *b = B->data, *nw = vs_lm_w(target)->output_norm;
    for (int i = 0; i < len; i++) {
        float *x = in + (size_t)i * E;
        if (vs_msd_head_decoupled(h) && img[i + 1]) {
            memcpy(x, emb + (size_t)(i + 1) * E, sizeof(float) * (size_t)E);
            continue;
        }
        memcpy(cat, emb + (size_t)(i + 1) * E, sizeof(float) * (size_t)E);
        vs_rmsnorm(cat + E, hid + (size_t)i * E, nw, E, tc->rms_eps);
        for (int r = 0; r < E; r++) {
            double s = b[r];
            for (int c = 0; c < 2 * E; c++) s += (double)w[(size_t)r * 2 * E + c] * cat[c];
            x[r] = (float)s;
        }
    }
    vs_kv *ref = vs_lm_kv_new(vs_msd_head_lm(h), 1, 256, VS_TYPE_F32, &err);
    for (int i = 0; i < len; i++) rows[i].embd = in + (size_t)i * E, rows[i].pos = i;
    if (len > 0)
        VT_REQUIRE(vs_lm_forward((vs_lm *)vs_msd_head_lm(h), ref, NULL, rows, len, NULL, &err) == VS_OK, "%s", err.msg);
    const vs_lm_config *hc = vs_lm_cfg(vs_msd_head_lm(h));
    double worst = 0;
    for (int hh = 0; hh < hc->n_head_kv; hh++) {
        const size_t m = (size_t)len * (size_t)hc->head_dim;
        worst = VS_MAX(worst, vt_max_abs_diff(vs_kv_k_const(kv, 0, 0, hh), vs_kv_k_const(ref, 0, 0, hh), m));
        worst = VS_MAX(worst, vt_max_abs_diff(vs_kv_v_const(kv, 0, 0, hh), vs_kv_v_const(ref, 0, 0, hh), m));
    }
    vs_kv_free(ref);
    vs_kv_free(tkv);
    vs_gguf_close(g);
    free(emb), free(hid), free(in), free(cat);
    return worst;
}

static void test_lossless_and_cache(void) {
    vs_error err = {0};
    const int E = 32, V = 96;
    vs_lm *target = make_target(E, V, 7, 0.2f, "msd-target.gguf");
    prompts P;
    make_prompts(&P, E, V, 99);
    st_engine e = st_make_engine(target, 256);
    vs_spec_log base[NPR], log;
    for (int k = 0; k < NPR; k++) {
        vs_spec_log_init(&base[k]);
        VT_REQUIRE(gen(&e, NULL, &P.p[k], 0, 24, false, &base[k], &err) == VS_OK, "%s", err.msg);
    }
    vs_spec_log_init(&log);
    int runs = 0, mism = 0, tree_blocks = 0;
    int64_t drafted = 0, accepted = 0;
    double worst = 0;
    for (int dec = 0; dec < 2; dec++) {
        char hp[64];
        snprintf(hp, sizeof(hp), "msd-head-%d.gguf", dec);
        vs_msd_head *h = make_head(target, dec, 5 + dec, hp);
        char hpath[512];
        snprintf(hpath, sizeof(hpath), "%s", st_tmp_path(hp));
        for (int topk = 0; topk <= 3; topk += 3) {
            vs_draft_msd_opts o = {.tree_top_k = topk, .tree_nodes = topk ? 10 : 0};
            vs_spec_drafter *d = vs_draft_msd_new(h, target, &o, &err);
            VT_REQUIRE(d, "%s", err.msg);
            for (int k = 0; k < NPR; k++)
                for (int gamma = 1; gamma <= 6; gamma += (topk ? 2 : 1)) {
                    VT_REQUIRE(gen(&e, d, &P.p[k], gamma, 24, false, &log, &err) == VS_OK, "%s", err.msg);
                    runs++;
                    if (!st_same_tokens(&log, &base[k], false)) {
                        mism++;
                        VT_CHECK(false, "decoupled %d top-k %d prompt %d gamma %d: output differs from target-only",
                                 dec, topk, k, gamma);
                    }
                    for (int b = 0; b < log.n_blocks; b++) {
                        drafted += log.blocks[b].n_eval, accepted += log.blocks[b].n_accept;
                        tree_blocks += log.blocks[b].n_draft > log.blocks[b].n_depth;
                    }
                    worst = VS_MAX(worst, head_cache_diff(target, h, hpath, vs_draft_msd_kv(d), &P.p[k], &log));
                }
            vs_spec_drafter_free(d);
        }
        vs_msd_head_free(h);
    }
    printf("  lossless greedy: %d runs (chains gamma 1..6, EAGLE-2 top-k 3 / 10 nodes; decoupled or not; 0-2 "
           "images), %d mismatches, %d tree blocks, acceptance %.3f; head cache vs reference: max |diff| %.3g\n",
           runs, mism, tree_blocks, (double)accepted / (double)VS_MAX(drafted, 1), worst);
    VT_CHECK(mism == 0, "%d runs differ from target-only", mism);
    VT_CHECK(tree_blocks > 20, "only %d tree blocks", tree_blocks);
    VT_CHECK(accepted > 0 && accepted < drafted, "acceptance %lld of %lld exercises both branches", (long long)accepted,
             (long long)drafted);
    VT_CHECK(worst < 1e-5, "the head cache differs from the reference (%g)", worst);

    /* a head cache smaller than the context: drafting stops when it is full, decoding goes on plainly */
    {
        vs_msd_head *hs = make_head(target, true, 5, "msd-head-small.gguf");
        vs_draft_msd_opts so = {.n_ctx = 18};
        vs_spec_drafter *d = vs_draft_msd_new(hs, target, &so, &err);
        VT_REQUIRE(d, "%s", err.msg);
        VT_REQUIRE(gen(&e, d, &P.p[3], 4, 24, false, &log, &err) == VS_OK, "small head cache: %s", err.msg);
        int early = 0;
        for (int b = 0; b < log.n_blocks && b < 2; b++) early += log.blocks[b].n_draft;
        VT_CHECK(st_same_tokens(&log, &base[3], false) && early > 0 && log.blocks[log.n_blocks - 1].n_draft == 0,
                 "a full head cache: lossless, drafts first (%d), none at the end", early);
        vs_spec_drafter_free(d);
        vs_msd_head_free(hs);
    }

    /* chat turns with prefix reuse: turn 2 = turn 1's prompt + its reply + new tokens */
    vs_msd_head *h = make_head(target, true, 5, "msd-head-1.gguf");
    vs_draft_msd_opts o = {.tree_top_k = 2};
    vs_spec_drafter *d = vs_draft_msd_new(h, target, &o, &err);
    VT_REQUIRE(d, "%s", err.msg);
    st_engine e2 = st_make_engine(target, 256);
    int turns_ok = 0;
    for (int k = 0; k < NPR; k++) {
        vs_spec_log l1, l2, r2;
        vs_spec_log_init(&l1), vs_spec_log_init(&l2), vs_spec_log_init(&r2);
        VT_REQUIRE(gen(&e, d, &P.p[k], 4, 12, true, &l1, &err) == VS_OK, "%s", err.msg);
        vs_spec_segment seg[7];
        int ns = P.p[k].n_seg;
        memcpy(seg, P.seg[k], sizeof(vs_spec_segment) * (size_t)ns);
        seg[ns++] = (vs_spec_segment){.kind = VS_SPEC_SEG_TEXT, .n = l1.n_tokens, .tokens = l1.tokens};
        seg[ns++] = (vs_spec_segment){.kind = VS_SPEC_SEG_TEXT, .n = 4, .tokens = &P.tok[(k + 1) % NPR][20]};
        vs_spec_prompt p2 = {.seg = seg, .n_seg = ns};
        VT_REQUIRE(gen(&e, d, &p2, 4, 12, true, &l2, &err) == VS_OK, "%s", err.msg);
        VT_REQUIRE(gen(&e2, NULL, &p2, 0, 12, false, &r2, &err) == VS_OK, "%s", err.msg);
        const double dd = head_cache_diff(target, h, st_tmp_path("msd-head-1.gguf"), vs_draft_msd_kv(d), &p2, &l2);
        turns_ok += st_same_tokens(&l2, &r2, false) && dd < 1e-5 && l2.n_prefilled < vs_spec_prompt_rows(&p2);
        vs_spec_log_free(&l1), vs_spec_log_free(&l2), vs_spec_log_free(&r2);
    }
    VT_CHECK(turns_ok == NPR, "prefix reuse over two turns: %d of %d lossless with a matching head cache", turns_ok,
             NPR);
    /* a turn whose prefix the head never saw (its last context began with prompt 3's rows): the target
     * reuses rows a target-only request evaluated */
    {
        vs_spec_log l1, l2, r2;
        vs_spec_log_init(&l1), vs_spec_log_init(&l2), vs_spec_log_init(&r2);
        VT_REQUIRE(gen(&e, NULL, &P.p[0], 0, 6, true, &l1, &err) == VS_OK, "%s", err.msg);
        vs_spec_segment seg[3] = {P.seg[0][0], {.kind = VS_SPEC_SEG_TEXT, .n = l1.n_tokens, .tokens = l1.tokens},
                                  {.kind = VS_SPEC_SEG_TEXT, .n = 5, .tokens = &P.tok[0][30]}};
        vs_spec_prompt p2 = {.seg = seg, .n_seg = 3};
        const int starved0 = vs_draft_msd_get_stats(d)->n_starved;
        VT_REQUIRE(gen(&e, d, &p2, 4, 12, true, &l2, &err) == VS_OK, "%s", err.msg);
        VT_REQUIRE(gen(&e2, NULL, &p2, 0, 12, false, &r2, &err) == VS_OK, "%s", err.msg);
        int drafted2 = 0;
        for (int b = 0; b < l2.n_blocks; b++) drafted2 += l2.blocks[b].n_draft;
        VT_CHECK(st_same_tokens(&l2, &r2, false) && drafted2 == 0 &&
                     vs_draft_msd_get_stats(d)->n_starved == starved0 + 1,
                 "a head without the prefix's features drafts nothing (drafted %d) and stays lossless", drafted2);
        /* and the next request with a fresh context drafts again */
        VT_REQUIRE(gen(&e, d, &P.p[1], 4, 12, false, &l1, &err) == VS_OK, "%s", err.msg);
        drafted2 = 0;
        for (int b = 0; b < l1.n_blocks; b++) drafted2 += l1.blocks[b].n_draft;
        VT_CHECK(drafted2 > 0 && st_same_tokens(&l1, &base[1], false) == (l1.n_tokens == base[1].n_tokens) ,
                 "drafting resumes after a starved request");
        vs_spec_log_free(&l1), vs_spec_log_free(&l2), vs_spec_log_free(&r2);
    }
    st_free_engine(&e2);
    vs_spec_drafter_free(d);
    vs_msd_head_free(h);
    for (int k = 0; k < NPR; k++) vs_spec_log_free(&base[k]);
    vs_spec_log_free(&log);
    free(P.img);
    st_free_engine(&e);
    vs_lm_free(target);
}

/* ------------------------------------------------------------------------------------------------
 * lossless sampling (V = 16) */

static double run_sampling(vs_lm *target, const vs_msd_head *h, const vs_spec_prompt *pr, int topk, bool broken,
                           float temp, float top_p, int n, double *acc) {
    vs_error err = {0};
    vs_sampler_params sp = vs_sampler_params_default();
    sp.temperature = temp, sp.top_p = top_p;
    double *pd = malloc(sizeof(double) * ST_NCAT);
    st_exact_distribution(target, &sp, pr, pd);
    st_engine e = st_make_engine(target, 64);
    vs_draft_msd_opts o = {.tree_top_k = topk, .tree_nodes = topk ? 5 : 0};
    vs_spec_drafter *d = vs_draft_msd_new(h, target, &o, &err);
    VT_REQUIRE(d, "%s", err.msg);
    vs_spec_params par = vs_spec_params_default();
    par.gamma = 2, par.n_predict = 3, par.sampling = sp, par.reuse_prefix = true, par.debug_break_residual = broken;
    int64_t *cnt = calloc(ST_NCAT, sizeof(int64_t)), dr = 0, ac = 0;
    vs_spec_log log;
    vs_spec_log_init(&log);
    for (int i = 0; i < n; i++) {
        par.sampling.seed = 0x5A5A0000ull + (uint64_t)i * 7919u;
        VT_REQUIRE(vs_spec_generate(e.s, d, pr, &par, NULL, NULL, &log, &err) == VS_OK, "%s", err.msg);
        cnt[st_cat_of(log.tokens, log.n_tokens)]++;
        for (int b = 0; b < log.n_blocks; b++) dr += log.blocks[b].n_eval, ac += log.blocks[b].n_accept;
    }
    *acc = dr ? (double)ac / (double)dr : 0;
    double chi2;
    int bins;
    int64_t imp;
    const double p = st_chi2_test(pd, cnt, n, &chi2, &bins, &imp);
    printf("  %-40s n %d, %d bins, chi2 %.1f, p = %.3g, acceptance %.3f\n",
           broken ? "BROKEN residual (must fail)" : topk ? "EAGLE-2 tree top-k 2, 5 nodes" : "sampled chain", n, bins,
           chi2, p, *acc);
    vs_spec_log_free(&log);
    free(cnt), free(pd);
    vs_spec_drafter_free(d);
    st_free_engine(&e);
    return p;
}

static void test_sampling(double scale) {
    const int N = (int)(30000 * scale);
    vs_lm *target = make_target(32, ST_SV, 21, 0.6f, "msd-t16.gguf");
    /* a small head: its distributions are close to uniform, so they overlap the target's and the
     * residual matters (a random head of normal scale is confidently wrong: almost nothing accepted) */
    vs_msd_head *h = make_head_std(target, true, 22, 0.02f, "msd-h16.gguf");
    float img[3 * 32];
    vs_rng rng;
    vs_rng_seed(&rng, 3);
    for (int i = 0; i < 3 * 32; i++) img[i] = 0.5f * vs_rng_normal(&rng);
    int32_t t1[3] = {5, 9, 3}, t2[2] = {7, 11};
    vs_spec_segment seg[3] = {{.kind = VS_SPEC_SEG_TEXT, .n = 3, .tokens = t1},
                              {.kind = VS_SPEC_SEG_IMAGE, .n = 3, .embd = img, .image = -1, .image_id = 9},
                              {.kind = VS_SPEC_SEG_TEXT, .n = 2, .tokens = t2}};
    vs_spec_prompt pr = {.seg = seg, .n_seg = 3};
    double acc;
    double p = run_sampling(target, h, &pr, 0, false, 1.0f, 1.0f, N, &acc);
    VT_CHECK(p > 0.001 && acc > 0.02 && acc < 0.98, "sampled chain: p = %g, acceptance %g", p, acc);
    p = run_sampling(target, h, &pr, 2, false, 1.0f, 1.0f, N, &acc);
    VT_CHECK(p > 0.001 && acc > 0.02 && acc < 0.98, "EAGLE-2 tree: p = %g, acceptance %g", p, acc);
    p = run_sampling(target, h, &pr, 2, true, 1.0f, 1.0f, N / 2, &acc);
    VT_CHECK(p < 1e-6, "the broken residual was not detected (p = %g)", p);
    vs_msd_head_free(h);
    vs_lm_free(target);
}

/* ------------------------------------------------------------------------------------------------
 * bad input */

static void test_bad_input(void) {
    vs_error err = {0};
    vs_lm *t32 = make_target(32, 96, 7, 0.2f, "msd-bad-t32.gguf");
    vs_lm *t64 = make_target(64, 96, 7, 0.2f, "msd-bad-t64.gguf");
    vs_lm *v80 = make_target(32, 80, 7, 0.2f, "msd-bad-v80.gguf");
    vs_lm *other = make_target(32, 96, 8, 0.2f, "msd-bad-other.gguf");
    vs_msd_head *h = make_head(t32, true, 1, "msd-bad-h.gguf");
    VT_CHECK(vs_msd_head_check(h, t32, &err) == VS_OK, "the head fits its target: %s", err.msg);
    VT_CHECK(!vs_draft_msd_new(h, t64, NULL, &err) && strstr(err.msg, "width"), "width: %s", err.msg);
    VT_CHECK(!vs_draft_msd_new(h, v80, NULL, &err) && strstr(err.msg, "vocabulary"), "vocabulary: %s", err.msg);
    VT_CHECK(!vs_draft_msd_new(h, other, NULL, &err) && strstr(err.msg, "embedding"), "embedding: %s", err.msg);
    vs_draft_msd_opts o = {.tree_top_k = 99};
    VT_CHECK(!vs_draft_msd_new(h, t32, &o, &err) && strstr(err.msg, "top-k"), "top-k: %s", err.msg);
    o = (vs_draft_msd_opts){.tree_top_k = 2, .tree_nodes = 999};
    VT_CHECK(!vs_draft_msd_new(h, t32, &o, &err) && strstr(err.msg, "tree nodes"), "nodes: %s", err.msg);
    /* the head's block takes embedding rows only and has no LM head */
    {
        vs_lm *hl = (vs_lm *)vs_msd_head_lm(h);
        vs_kv *kv = vs_lm_kv_new(hl, 1, 16, VS_TYPE_F32, &err);
        float x[32] = {0}, lg[96];
        vs_lm_row row = {.token = 3};
        VT_CHECK(vs_lm_forward(hl, kv, NULL, &row, 1, NULL, &err) && strstr(err.msg, "embedding rows"), "%s", err.msg);
        row = (vs_lm_row){.embd = x, .want_logits = true};
        vs_lm_out out = {.logits = lg, .attn_layer = -1};
        VT_CHECK(vs_lm_forward(hl, kv, NULL, &row, 1, &out, &err) && strstr(err.msg, "no LM head"), "%s", err.msg);
        VT_CHECK(vs_lm_head(hl, NULL, x, 1, false, lg, &err) && strstr(err.msg, "no LM head"), "%s", err.msg);
        VT_CHECK(vs_lm_embed(hl, 3, x, &err) && strstr(err.msg, "no token embeddings"), "%s", err.msg);
        VT_CHECK(vs_kv_seq_len(kv, 0) == 0, "nothing cached after refused forwards");
        vs_kv_free(kv);
    }
    /* not a head; truncated; missing tensors */
    VT_CHECK(!vs_msd_head_load(st_tmp_path("msd-bad-t32.gguf"), &err) && strstr(err.msg, "not an MSD head"), "%s",
             err.msg);
    const char *hp = st_tmp_path("msd-bad-h.gguf");
    FILE *f = fopen(hp, "rb");
    VT_REQUIRE(f, "head file");
    fseek(f, 0, SEEK_END);
    const long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)size);
    VT_REQUIRE(fread(buf, 1, (size_t)size, f) == (size_t)size, "read");
    fclose(f);
    const long cuts[3] = {16, size / 2, size - 7};
    for (int i = 0; i < 3; i++) {
        FILE *g = fopen(st_tmp_path("msd-cut.gguf"), "wb");
        fwrite(buf, 1, (size_t)cuts[i], g);
        fclose(g);
        vs_msd_head *x = vs_msd_head_load(st_tmp_path("msd-cut.gguf"), &err);
        VT_CHECK(!x && err.msg[0], "a head cut at %ld of %ld bytes is refused: %s", cuts[i], size, err.msg);
        vs_msd_head_free(x);
    }
    free(buf);
    vs_msd_head_free(h);
    vs_lm_free(t32), vs_lm_free(t64), vs_lm_free(v80), vs_lm_free(other);
}

/* The CLI: a random head from `model random --arch msd`, `model info`, `generate --method msd` (and an
 * EAGLE-2 shape) identical to target-only, a head for another target refused. */
static void test_cli(void) {
    char T[512], H[512], O[512], X[512];
    snprintf(T, sizeof(T), "%s", st_tmp_path("msd-bad-t32.gguf")); /* written by test_bad_input */
    snprintf(H, sizeof(H), "%s", st_tmp_path("msd-cli-head.gguf"));
    snprintf(O, sizeof(O), "%s", st_tmp_path("msd-cli-out.txt"));
    snprintf(X, sizeof(X), "%s", st_tmp_path("msd-bad-t64.gguf"));
    int rc = vt_run("%s model random --arch msd --target %s --heads 2 --ffn 64 --ctx 256 -o %s > %s 2>&1", vt_cli(), T,
                    H, O);
    VT_CHECK(rc == 0 && st_file_has(O, "msd head"), "model random --arch msd (rc %d)", rc);
    rc = vt_run("%s model info -m %s > %s 2>&1", vt_cli(), H, O);
    VT_CHECK(rc == 0 && st_file_has(O, "architecture   msd"), "model info of a head (rc %d)", rc);
    rc = vt_run("%s model random --arch msd --target %s --dim 64 --heads 2 --ffn 64 --ctx 256 -o %s > %s 2>&1", vt_cli(),
                T, H, O);
    VT_CHECK(rc == 2 && st_file_has(O, "comes from --target"), "--dim with --arch msd (rc %d)", rc);
    for (int k = 0; k < 2; k++) {
        /* the random model's text may hold NUL bytes: only the statistics (standard error) are searched */
        rc = vt_run("%s generate -m %s -md %s --method %s --draft 4 --raw -p 'abc de' -n 16 --temp 0 --compare > /dev/null 2> %s",
                    vt_cli(), T, H, k ? "msd@k3n9" : "msd", O);
        VT_CHECK(rc == 0 && st_file_has(O, "is identical to"), "generate --method %s (rc %d)", k ? "msd@k3n9" : "msd", rc);
    }
    rc = vt_run("%s generate -m %s -md %s --method msd --raw -p 'abc' -n 4 > %s 2>&1", vt_cli(), X, H, O);
    VT_CHECK(rc == 1 && st_file_has(O, "width"), "a head for another target (rc %d)", rc);
}

int main(int argc, char **argv) {
    (void)argc, (void)argv;
    const double t0 = vs_time_now();
    test_bad_input();
    test_lossless_and_cache();
    test_sampling(1.0);
    test_cli();
    printf("msd: %.1f s\n", vs_time_now() - t0);
    return vt_finish("msd");
}
