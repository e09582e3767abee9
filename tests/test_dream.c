/* test_dream: the DREAM draft model (draft_dream.h) on random models.
 *   - lossless greedy: output identical to target-only for chains (gamma 1 .. 6) and EAGLE-2 trees, with
 *     0-2 images, and over a repeated request with prefix reuse;
 *   - the draft cache after a request equals the one a fresh drafter computes over the same context in
 *     one pass (the target's features reach the right rows, drafted slots never stay);
 *   - the tree mask inside the cross-attention: every fed node of an EAGLE-2 tree has the feature the
 *     same path gets as a chain; with the released code's fault switched on (nodes see other branches'
 *     drafted features) the check fails;
 *   - visual token compression (keep 50% / 75%): lossless greedy, chains and trees, with prefix reuse; the
 *     rows kept are those of highest last-layer attention in the target's prefill, as recomputed here
 *     with an attention observer;
 *   - lossless sampling: the joint law of 3 sampled tokens (V = 16) with a sampled chain and a
 *     deterministic EAGLE-2 tree equals target-only sampling (chi-square);
 *   - bad input: a model of another width, vocabulary or embedding, not a DREAM file, a truncated file,
 *     another block count, tree options out of range, keep ratios outside (0, 1]. */
#include <math.h>
#include <string.h>

#include "draft_dream.h"
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

/* gate 0.8: the cross-attention block matters (at 0 it is the identity) */
static vs_dream_head *make_head_std(const vs_lm *target, uint64_t seed, float std, const char *name) {
    vs_dream_random_opts o = {.n_head = 2, .n_head_kv = 1, .n_ff = 64, .n_ctx = 256, .std = std, .gate = 0.8f,
                              .seed = seed};
    vs_error err = {0};
    VT_REQUIRE(vs_dream_head_write_random(&o, target, st_tmp_path(name), &err) == VS_OK, "%s", err.msg);
    vs_dream_head *h = vs_dream_head_load(st_tmp_path(name), &err);
    VT_REQUIRE(h, "%s", err.msg);
    return h;
}

/* Prompts: text, text + image + text, two images, longer text. */
enum { NPR = 4, IMG_ROWS = 5 };
typedef struct prompts {
    int32_t tok[NPR][64];
    float *img; /* [2][IMG_ROWS][E] */
    vs_spec_segment seg[NPR][6];
    vs_spec_prompt p[NPR];
} prompts;

static void make_prompts(prompts *P, int E, int V, uint64_t seed) {
    vs_rng rng;
    vs_rng_seed(&rng, seed);
    P->img = malloc(sizeof(float) * 2 * IMG_ROWS * (size_t)E);
    for (int i = 0; i < 2 * IMG_ROWS * E; i++) P->img[i] = 0.5f * vs_rng_normal(&rng);
    for (int k = 0; k < NPR; k++)
        for (int i = 0; i < 64; i++) P->tok[k][i] = 3 + (int32_t)vs_rng_below(&rng, (uint32_t)(V - 3));
    const int shapes[NPR][5] = {{9, 0}, {3, -1, 6, 0}, {2, -1, 4, -2, 3}, {14, 0}};
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

/* max |draft cache of d - the cache a fresh drafter computes in one pass over the same context|: the
 * fresh drafter gets the prompt of the request plus the generated tokens that reached d's cache as ONE
 * prompt and drafts once (its pending row is d's last true slot). */
static double cache_vs_fresh(vs_lm *target, const vs_dream_head *h, vs_spec_drafter *d, const vs_spec_prompt *p,
                             const vs_spec_log *log) {
    vs_error err = {0};
    vs_kv *kv = vs_draft_dream_kv(d);
    const int len = vs_kv_seq_len(kv, 0);
    const int n_prompt = (int)vs_spec_prompt_rows(p), n_gen = len - n_prompt;
    VT_REQUIRE(n_gen >= 0 && n_gen <= log->n_tokens, "draft cache %d slots, prompt %d, generated %d", len, n_prompt,
               log->n_tokens);
    vs_spec_segment seg[8];
    memcpy(seg, p->seg, sizeof(vs_spec_segment) * (size_t)p->n_seg);
    int ns = p->n_seg;
    if (n_gen > 0) seg[ns++] = (vs_spec_segment){.kind = VS_SPEC_SEG_TEXT, .n = n_gen, .tokens = log->tokens};
    vs_spec_prompt all = {.seg = seg, .n_seg = ns};
    st_engine e = st_make_engine(target, 256);
    vs_spec_drafter *f = vs_draft_dream_new(h, target, NULL, &err);
    VT_REQUIRE(f, "%s", err.msg);
    vs_spec_log l2;
    vs_spec_log_init(&l2);
    VT_REQUIRE(gen(&e, f, &all, 1, 2, false, &l2, &err) == VS_OK, "%s", err.msg);
    vs_kv *ref = vs_draft_dream_kv(f);
    VT_REQUIRE(vs_kv_seq_len(ref, 0) >= len, "the fresh drafter holds %d slots, not %d", vs_kv_seq_len(ref, 0), len);
    const vs_lm_config *hc = vs_lm_cfg(vs_dream_head_lm(h));
    double worst = 0;
    const size_t m = (size_t)len * (size_t)hc->head_dim;
    for (int l = 0; l < 2; l++)
        for (int hh = 0; hh < hc->n_head_kv; hh++) {
            worst = VS_MAX(worst, vt_max_abs_diff(vs_kv_k_const(kv, 0, l, hh), vs_kv_k_const(ref, 0, l, hh), m));
            worst = VS_MAX(worst, vt_max_abs_diff(vs_kv_v_const(kv, 0, l, hh), vs_kv_v_const(ref, 0, l, hh), m));
        }
    vs_spec_log_free(&l2);
    vs_spec_drafter_free(f);
    st_free_engine(&e);
    return worst;
}

/* What the greedy tests share: a random target (E = 32, V = 96), the four prompts, an engine, each
 * prompt's target-only output (24 tokens) and a random DREAM model with open gates. */
typedef struct fixture {
    vs_lm *target;
    prompts P;
    st_engine e;
    vs_spec_log base[NPR], log;
    vs_dream_head *h;
} fixture;

static void fixture_open(fixture *f) {
    vs_error err = {0};
    f->target = make_target(32, 96, 7, 0.2f, "dream-target.gguf");
    make_prompts(&f->P, 32, 96, 99);
    f->e = st_make_engine(f->target, 256);
    for (int k = 0; k < NPR; k++) {
        vs_spec_log_init(&f->base[k]);
        VT_REQUIRE(gen(&f->e, NULL, &f->P.p[k], 0, 24, false, &f->base[k], &err) == VS_OK, "%s", err.msg);
    }
    vs_spec_log_init(&f->log);
    f->h = make_head_std(f->target, 5, 0.3f, "dream-head.gguf");
}

static void fixture_close(fixture *f) {
    vs_dream_head_free(f->h);
    for (int k = 0; k < NPR; k++) vs_spec_log_free(&f->base[k]);
    vs_spec_log_free(&f->log);
    free(f->P.img);
    st_free_engine(&f->e);
    vs_lm_free(f->target);
}

static void test_lossless_and_cache(void) {
    vs_error err = {0};
    fixture F;
    fixture_open(&F);
    vs_lm *target = F.target;
    prompts P = F.P;
    st_engine e = F.e;
    vs_spec_log *base = F.base, log = F.log;
    vs_dream_head *h = F.h;
    int runs = 0, mism = 0, tree_blocks = 0;
    int64_t drafted = 0, accepted = 0;
    double worst = 0;
    for (int topk = 0; topk <= 3; topk += 3) {
        vs_draft_dream_opts o = {.tree_top_k = topk, .tree_nodes = topk ? 10 : 0};
        vs_spec_drafter *d = vs_draft_dream_new(h, target, &o, &err);
        VT_REQUIRE(d, "%s", err.msg);
        for (int k = 0; k < NPR; k++)
            for (int gamma = 1; gamma <= 6; gamma += (topk ? 2 : 1))
                for (int reuse = 0; reuse < 2; reuse++) { /* reuse: the same request again, its prefix kept */
                    VT_REQUIRE(gen(&e, d, &P.p[k], gamma, 24, reuse, &log, &err) == VS_OK, "%s", err.msg);
                    runs++;
                    if (!st_same_tokens(&log, &base[k], false)) {
                        mism++;
                        VT_CHECK(false, "top-k %d prompt %d gamma %d reuse %d: output differs from target-only",
                                 topk, k, gamma, reuse);
                    }
                    for (int b = 0; b < log.n_blocks; b++) {
                        drafted += log.blocks[b].n_eval, accepted += log.blocks[b].n_accept;
                        tree_blocks += log.blocks[b].n_draft > log.blocks[b].n_depth;
                    }
                    if (!reuse) worst = VS_MAX(worst, cache_vs_fresh(target, h, d, &P.p[k], &log));
                }
        const vs_draft_dream_stats *ds = vs_draft_dream_get_stats(d);
        VT_CHECK(ds && ds->n_starved == 0 && ds->true_rows > 0, "stats: %d starved requests",
                 ds ? ds->n_starved : -1);
        vs_spec_drafter_free(d);
    }
    printf("  lossless greedy: %d runs (chains gamma 1..6, EAGLE-2 top-k 3 / 10 nodes; 0-2 images; prefix reuse), "
           "%d mismatches, %d tree blocks, acceptance %.3f; draft cache vs one pass: max |diff| %.3g\n",
           runs, mism, tree_blocks, (double)accepted / (double)VS_MAX(drafted, 1), worst);
    VT_CHECK(mism == 0, "%d runs differ from target-only", mism);
    VT_CHECK(tree_blocks > 20, "only %d tree blocks", tree_blocks);
    VT_CHECK(accepted > 0 && accepted < drafted, "acceptance %lld of %lld exercises both branches",
             (long long)accepted, (long long)drafted);
    VT_CHECK(worst < 1e-5, "the draft cache differs from a one-pass computation (%g)", worst);

    /* a draft cache smaller than the context: drafting stops when it is full, decoding goes on plainly */
    {
        vs_draft_dream_opts so = {.n_ctx = 18};
        vs_spec_drafter *d = vs_draft_dream_new(h, target, &so, &err);
        VT_REQUIRE(d, "%s", err.msg);
        VT_REQUIRE(gen(&e, d, &P.p[3], 4, 24, false, &log, &err) == VS_OK, "small draft cache: %s", err.msg);
        int early = 0;
        for (int b = 0; b < log.n_blocks && b < 2; b++) early += log.blocks[b].n_draft;
        VT_CHECK(st_same_tokens(&log, &base[3], false) && early > 0 && log.blocks[log.n_blocks - 1].n_draft == 0,
                 "a full draft cache: lossless, drafts first (%d), none at the end", early);
        vs_spec_drafter_free(d);
    }
    /* a request whose earlier rows the drafter never saw (the target reused them for target-only
     * decoding): it drafts nothing and stays lossless */
    {
        vs_draft_dream_opts so = {0};
        vs_spec_drafter *d = vs_draft_dream_new(h, target, &so, &err);
        VT_REQUIRE(d, "%s", err.msg);
        VT_REQUIRE(gen(&e, NULL, &P.p[1], 0, 4, true, &log, &err) == VS_OK, "%s", err.msg);
        VT_REQUIRE(gen(&e, d, &P.p[1], 4, 24, true, &log, &err) == VS_OK, "%s", err.msg);
        const vs_draft_dream_stats *ds = vs_draft_dream_get_stats(d);
        VT_CHECK(st_same_tokens(&log, &base[1], false) && ds->n_starved == 1,
                 "unseen rows: lossless, one starved request (%d)", ds->n_starved);
        vs_spec_drafter_free(d);
    }
    F.log = log;
    fixture_close(&F);
}

/* ------------------------------------------------------------------------------------------------
 * visual token compression */

typedef struct attn_acc {
    double *sum; /* [keys] */
    int n_head;
} attn_acc;

static void acc_cb(void *ctx, int layer, int row, int head, const float *p, int n_keys) {
    attn_acc *a = ctx;
    (void)layer, (void)row, (void)head;
    for (int k = 0; k < n_keys; k++) a->sum[k] += (double)p[k] / a->n_head; /* single-threaded forward */
}

/* Checks the drafter's choice after a request over prompt p: per image, the kept rows are the
 * ceil(keep n) of highest attention received in the target's last layer from the prefill's queries (rows
 * 0 .. n - 2); returns the number of wrong rows (a kept row scoring below a dropped one of its image). */
static int check_selection(vs_lm *target, vs_spec_drafter *d, const vs_spec_prompt *p, float keep, int *n_dropped) {
    vs_error err = {0};
    const vs_lm_config *tc = vs_lm_cfg(target);
    const int E = tc->n_embd, n = (int)vs_spec_prompt_rows(p);
    float *emb = malloc(sizeof(float) * (size_t)n * E);
    vs_lm_row rows[64];
    memset(rows, 0, sizeof(rows));
    int seg_of[64], r = 0;
    for (int s = 0; s < p->n_seg; s++)
        for (int j = 0; j < p->seg[s].n; j++, r++) {
            const vs_spec_segment *g = &p->seg[s];
            seg_of[r] = g->kind == VS_SPEC_SEG_IMAGE ? s : -1;
            if (seg_of[r] >= 0) memcpy(emb + (size_t)r * E, g->embd + (size_t)j * E, sizeof(float) * (size_t)E);
            else vs_lm_embed(target, g->tokens[j], emb + (size_t)r * E, NULL);
            rows[r].embd = emb + (size_t)r * E, rows[r].pos = r;
        }
    double sum[64] = {0};
    attn_acc acc = {.sum = sum, .n_head = tc->n_head};
    vs_kv *kv = vs_lm_kv_new(target, 1, 64, VS_TYPE_F32, &err);
    vs_lm_out out = {.attn_fn = acc_cb, .attn_ctx = &acc, .attn_layer = tc->n_layer - 1};
    VT_REQUIRE(vs_lm_forward(target, kv, NULL, rows, n - 1, &out, &err) == VS_OK, "%s", err.msg);
    int wrong = 0;
    *n_dropped = 0;
    for (int a = 0; a < n;) {
        if (seg_of[a] < 0) {
            VT_CHECK(vs_draft_dream_row_kept(d, a) == 1, "text row %d dropped", a);
            a++;
            continue;
        }
        int b = a, kept = 0;
        while (b < n && seg_of[b] == seg_of[a]) kept += vs_draft_dream_row_kept(d, b++) == 1;
        const int want = (int)ceil((double)keep * (b - a) - 1e-9);
        VT_CHECK(kept == want, "image at row %d: %d of %d rows kept, want %d", a, kept, b - a, want);
        for (int i = a; i < b; i++)
            for (int j = a; j < b; j++)
                wrong += vs_draft_dream_row_kept(d, i) == 1 && vs_draft_dream_row_kept(d, j) == 0 &&
                         sum[i] < sum[j] - 1e-6;
        *n_dropped += (b - a) - kept;
        a = b;
    }
    vs_kv_free(kv);
    free(emb);
    return wrong;
}

static void test_compression(void) {
    vs_error err = {0};
    fixture F;
    fixture_open(&F);
    vs_lm *target = F.target;
    prompts P = F.P;
    st_engine e = F.e;
    vs_spec_log *base = F.base, log = F.log;
    vs_dream_head *h = F.h;
    int runs = 0, mism = 0, wrong = 0, dropped = 0;
    for (int kk = 0; kk < 2; kk++)
        for (int topk = 0; topk <= 3; topk += 3) {
            const float keep = kk ? 0.75f : 0.5f;
            vs_draft_dream_opts o = {.tree_top_k = topk, .tree_nodes = topk ? 10 : 0, .visual_keep = keep};
            vs_spec_drafter *d = vs_draft_dream_new(h, target, &o, &err);
            VT_REQUIRE(d, "%s", err.msg);
            VT_CHECK(d->want_attn_recv, "a compressing drafter asks for the attention scores");
            for (int k = 0; k < NPR; k++)
                for (int reuse = 0; reuse < 2; reuse++) {
                    VT_REQUIRE(gen(&e, d, &P.p[k], 4, 24, reuse, &log, &err) == VS_OK, "%s", err.msg);
                    runs++;
                    if (!st_same_tokens(&log, &base[k], false)) {
                        mism++;
                        VT_CHECK(false, "keep %g top-k %d prompt %d reuse %d: output differs from target-only", keep,
                                 topk, k, reuse);
                    }
                    int nd;
                    wrong += check_selection(target, d, &P.p[k], keep, &nd);
                    dropped += nd;
                }
            vs_spec_drafter_free(d);
        }
    printf("  visual token compression (keep 50%%, 75%%; chains, EAGLE-2): %d runs, %d mismatches, %d image rows "
           "dropped, %d rows out of attention order\n", runs, mism, dropped, wrong);
    VT_CHECK(mism == 0 && wrong == 0 && dropped > 0, "compression: %d mismatches, %d misordered, %d dropped", mism,
             wrong, dropped);
    /* a prompt that ends with image rows: the pending row is an image row without a score; it stays in the
     * stream, and a request that ends before any block (no drafting) still decides the image */
    {
        vs_spec_segment seg[2] = {{.kind = VS_SPEC_SEG_TEXT, .n = 4, .tokens = P.tok[0]},
                                  {.kind = VS_SPEC_SEG_IMAGE, .n = IMG_ROWS, .embd = P.img, .image = -1, .image_id = 7}};
        vs_spec_prompt pr = {.seg = seg, .n_seg = 2};
        vs_spec_log b2;
        vs_spec_log_init(&b2);
        VT_REQUIRE(gen(&e, NULL, &pr, 0, 16, false, &b2, &err) == VS_OK, "%s", err.msg);
        vs_draft_dream_opts o = {.visual_keep = 0.4f};
        vs_spec_drafter *d = vs_draft_dream_new(h, target, &o, &err);
        VT_REQUIRE(d, "%s", err.msg);
        VT_REQUIRE(gen(&e, d, &pr, 4, 16, false, &log, &err) == VS_OK, "a prompt ending with an image: %s", err.msg);
        const int last = 4 + IMG_ROWS - 1;
        int kept = 0;
        for (int r = 4; r < last; r++) kept += vs_draft_dream_row_kept(d, r) == 1;
        VT_CHECK(st_same_tokens(&log, &b2, false) && vs_draft_dream_row_kept(d, last) == 1 && kept == 2,
                 "ending with an image: lossless, the pending row kept, 2 of the 4 scored rows kept (%d)", kept);
        VT_REQUIRE(gen(&e, d, &pr, 4, 0, false, &log, &err) == VS_OK, "prefill only: %s", err.msg);
        kept = 0;
        for (int r = 4; r < last; r++) kept += vs_draft_dream_row_kept(d, r) == 1;
        VT_CHECK(kept == 2, "a request without blocks decides its image at the end (%d kept)", kept);
        vs_spec_log_free(&b2);
        vs_spec_drafter_free(d);
    }
    vs_draft_dream_opts bad = {.visual_keep = 1.5f};
    VT_CHECK(!vs_draft_dream_new(h, target, &bad, &err) && strstr(err.msg, "outside (0, 1]"), "keep 1.5: %s", err.msg);
    bad.visual_keep = -0.25f;
    VT_CHECK(!vs_draft_dream_new(h, target, &bad, &err) && strstr(err.msg, "outside (0, 1]"), "keep -0.25: %s",
             err.msg);
    bad.visual_keep = NAN;
    VT_CHECK(!vs_draft_dream_new(h, target, &bad, &err) && strstr(err.msg, "outside (0, 1]"), "keep NaN: %s", err.msg);
    F.log = log;
    fixture_close(&F);
}

/* ------------------------------------------------------------------------------------------------
 * the tree mask inside the cross-attention */

/* Drives a drafter by hand over prompt p: the target's features of rows 0 .. P - 1, one EAGLE-2
 * proposal, then every fed node's feature against the same path drafted as a chain. Returns the worst
 * difference; *checked = nodes compared. */
static double tree_vs_paths(vs_lm *target, const vs_dream_head *h, const vs_spec_prompt *p, bool leak,
                            int *checked) {
    vs_error err = {0};
    const int E = vs_lm_cfg(target)->n_embd, V = vs_lm_cfg(target)->n_vocab;
    vs_draft_dream_opts o = {.tree_top_k = 3, .tree_nodes = 24, .debug_leak_tree = leak};
    vs_spec_drafter *d = vs_draft_dream_new(h, target, &o, &err);
    VT_REQUIRE(d, "%s", err.msg);
    vs_spec_params par = vs_spec_params_default();
    par.sampling.temperature = 0;
    vs_spec_begin_info bi = {.prompt = p, .params = &par, .n_ctx_target = 256};
    VT_REQUIRE(d->vt->begin(d, &bi, &err) == VS_OK, "%s", err.msg);
    /* the target over rows 0 .. n - 2 (the last one stays pending) */
    const int n = (int)vs_spec_prompt_rows(p);
    float *emb = malloc(sizeof(float) * (size_t)n * E), *hid = malloc(sizeof(float) * (size_t)n * E);
    vs_lm_row rows[64];
    int32_t toks[64];
    memset(rows, 0, sizeof(rows));
    for (int s = 0, i = 0; s < p->n_seg; s++)
        for (int j = 0; j < p->seg[s].n; j++, i++) {
            const vs_spec_segment *g = &p->seg[s];
            toks[i] = g->kind == VS_SPEC_SEG_TEXT ? g->tokens[j] : -1;
            if (toks[i] < 0) memcpy(emb + (size_t)i * E, g->embd + (size_t)j * E, sizeof(float) * (size_t)E);
            else vs_lm_embed(target, toks[i], emb + (size_t)i * E, NULL);
            rows[i].embd = emb + (size_t)i * E, rows[i].pos = i;
        }
    vs_kv *tkv = vs_lm_kv_new(target, 1, 64, VS_TYPE_F32, &err);
    vs_lm_out out = {.hidden = hid, .attn_layer = -1};
    VT_REQUIRE(vs_lm_forward(target, tkv, NULL, rows, n - 1, &out, &err) == VS_OK, "%s", err.msg);
    vs_spec_features f = {.pos0 = 0, .n = n - 1, .n_embd = E, .tokens = toks, .hidden = hid};
    VT_REQUIRE(d->vt->target_rows(d, &f, &err) == VS_OK, "%s", err.msg);
    /* one proposal */
    enum { CAP = 32 };
    int32_t tok[CAP], par_[CAP], dep[CAP], qr[CAP];
    float *q = malloc(sizeof(float) * CAP * (size_t)V);
    vs_spec_proposal prop = {.cap = CAP, .n_vocab = V, .token = tok, .parent = par_, .depth = dep, .q_row = qr, .q = q};
    vs_spec_limits lim = {.max_depth = 4, .max_nodes = 24};
    VT_REQUIRE(d->vt->propose(d, &lim, &prop, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(prop.n > 6, "a tree of %d nodes", prop.n);
    /* copy the fed nodes' features first: the path computations reuse the drafter's store */
    float *nf = malloc(sizeof(float) * (size_t)prop.n * E);
    bool fed[CAP];
    for (int i = 0; i < prop.n; i++) {
        const float *x = vs_draft_dream_node_feature(d, i);
        fed[i] = x != NULL;
        if (x) memcpy(nf + (size_t)i * E, x, sizeof(float) * (size_t)E);
    }
    double worst = 0;
    *checked = 0;
    float *pf = malloc(sizeof(float) * (size_t)E);
    for (int i = 0; i < prop.n; i++) {
        if (!fed[i]) continue;
        int32_t path[8], len = 0;
        for (int a = i; a >= 0; a = par_[a]) path[len++] = tok[a];
        for (int a = 0; a < len / 2; a++) {
            const int32_t t = path[a];
            path[a] = path[len - 1 - a], path[len - 1 - a] = t;
        }
        VT_REQUIRE(vs_draft_dream_path_feature(d, path, len, pf, &err) == VS_OK, "%s", err.msg);
        worst = VS_MAX(worst, vt_max_abs_diff(pf, nf + (size_t)i * E, (size_t)E));
        ++*checked;
    }
    vs_spec_commit c = {.n_proposed = prop.n, .next = 3};
    VT_REQUIRE(d->vt->commit(d, &c, &err) == VS_OK, "%s", err.msg);
    d->vt->end(d);
    vs_kv_free(tkv);
    free(emb), free(hid), free(q), free(nf), free(pf);
    vs_spec_drafter_free(d);
    return worst;
}

static void test_tree_mask(void) {
    const int E = 32, V = 96;
    vs_lm *target = make_target(E, V, 11, 0.2f, "dream-mask-target.gguf");
    vs_dream_head *h = make_head_std(target, 12, 0.3f, "dream-mask-head.gguf");
    prompts P;
    make_prompts(&P, E, V, 5);
    double good = 0, bad = 0;
    int n_good = 0, n_bad = 0;
    for (int k = 0; k < NPR; k++) {
        int c;
        good = VS_MAX(good, tree_vs_paths(target, h, &P.p[k], false, &c));
        n_good += c;
        bad = VS_MAX(bad, tree_vs_paths(target, h, &P.p[k], true, &c));
        n_bad += c;
    }
    printf("  tree mask: %d fed nodes, max |tree feature - path as a chain| %.3g; with other branches visible "
           "(the released code's fault): %.3g over %d nodes\n", n_good, good, bad, n_bad);
    VT_CHECK(n_good > 4 * NPR, "only %d nodes compared", n_good);
    VT_CHECK(good < 1e-5, "a tree node's feature differs from its path's (%g)", good);
    VT_CHECK(bad > 1e-3, "the leaking mask was not detected (%g)", bad);
    vs_dream_head_free(h);
    free(P.img);
    vs_lm_free(target);
}

/* ------------------------------------------------------------------------------------------------
 * lossless sampling (V = 16) */

static double run_sampling(vs_lm *target, const vs_dream_head *h, const vs_spec_prompt *pr, int topk, int n,
                           double *acc) {
    vs_error err = {0};
    vs_sampler_params sp = vs_sampler_params_default();
    sp.temperature = 1.0f, sp.top_p = 1.0f;
    double *pd = malloc(sizeof(double) * ST_NCAT);
    st_exact_distribution(target, &sp, pr, pd);
    st_engine e = st_make_engine(target, 64);
    vs_draft_dream_opts o = {.tree_top_k = topk, .tree_nodes = topk ? 5 : 0};
    vs_spec_drafter *d = vs_draft_dream_new(h, target, &o, &err);
    VT_REQUIRE(d, "%s", err.msg);
    vs_spec_params par = vs_spec_params_default();
    par.gamma = 2, par.n_predict = 3, par.sampling = sp, par.reuse_prefix = true;
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
           topk ? "EAGLE-2 tree top-k 2, 5 nodes" : "sampled chain", n, bins, chi2, p, *acc);
    vs_spec_log_free(&log);
    free(cnt), free(pd);
    vs_spec_drafter_free(d);
    st_free_engine(&e);
    return p;
}

static void test_sampling(void) {
    const int N = 30000;
    vs_lm *target = make_target(32, ST_SV, 21, 0.6f, "dream-t16.gguf");
    /* a small model: its distributions overlap the target's, so the residual matters */
    vs_dream_head *h = make_head_std(target, 22, 0.02f, "dream-h16.gguf");
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
    double p = run_sampling(target, h, &pr, 0, N, &acc);
    VT_CHECK(p > 0.001 && acc > 0.02 && acc < 0.98, "sampled chain: p = %g, acceptance %g", p, acc);
    p = run_sampling(target, h, &pr, 2, N, &acc);
    VT_CHECK(p > 0.001 && acc > 0.02 && acc < 0.98, "EAGLE-2 tree: p = %g, acceptance %g", p, acc);
    vs_dream_head_free(h);
    vs_lm_free(target);
}

/* ------------------------------------------------------------------------------------------------
 * bad input */

static void test_bad_input(void) {
    vs_error err = {0};
    vs_lm *t32 = make_target(32, 96, 7, 0.2f, "dream-bad-t32.gguf");
    vs_lm *t64 = make_target(64, 96, 7, 0.2f, "dream-bad-t64.gguf");
    vs_lm *v80 = make_target(32, 80, 7, 0.2f, "dream-bad-v80.gguf");
    vs_lm *other = make_target(32, 96, 8, 0.2f, "dream-bad-other.gguf");
    vs_dream_head *h = make_head_std(t32, 1, 0.3f, "dream-bad-h.gguf");
    VT_CHECK(vs_dream_head_check(h, t32, &err) == VS_OK, "the model fits its target: %s", err.msg);
    VT_CHECK(!vs_draft_dream_new(h, t64, NULL, &err) && strstr(err.msg, "width"), "width: %s", err.msg);
    VT_CHECK(!vs_draft_dream_new(h, v80, NULL, &err) && strstr(err.msg, "vocabulary"), "vocabulary: %s", err.msg);
    VT_CHECK(!vs_draft_dream_new(h, other, NULL, &err) && strstr(err.msg, "embedding"), "embedding: %s", err.msg);
    vs_draft_dream_opts o = {.tree_top_k = 99};
    VT_CHECK(!vs_draft_dream_new(h, t32, &o, &err) && strstr(err.msg, "top-k"), "top-k: %s", err.msg);
    o = (vs_draft_dream_opts){.tree_top_k = 2, .tree_nodes = 999};
    VT_CHECK(!vs_draft_dream_new(h, t32, &o, &err) && strstr(err.msg, "tree nodes"), "nodes: %s", err.msg);
    VT_CHECK(!vs_dream_head_load(st_tmp_path("dream-bad-t32.gguf"), &err) && strstr(err.msg, "not a DREAM model"),
             "a target is no DREAM model: %s", err.msg);
    /* truncated files */
    const char *hp = st_tmp_path("dream-bad-h.gguf");
    FILE *f = fopen(hp, "rb");
    VT_REQUIRE(f, "model file");
    fseek(f, 0, SEEK_END);
    const long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)size);
    VT_REQUIRE(fread(buf, 1, (size_t)size, f) == (size_t)size, "read");
    fclose(f);
    const long cuts[3] = {16, size / 2, size - 7};
    for (int i = 0; i < 3; i++) {
        FILE *g = fopen(st_tmp_path("dream-cut.gguf"), "wb");
        fwrite(buf, 1, (size_t)cuts[i], g);
        fclose(g);
        vs_dream_head *x = vs_dream_head_load(st_tmp_path("dream-cut.gguf"), &err);
        VT_CHECK(!x && err.msg[0], "a model cut at %ld of %ld bytes is refused: %s", cuts[i], size, err.msg);
        vs_dream_head_free(x);
    }
    /* another block count: dream.block_count patched from 2 to 1 and to 3 */
    const char key[] = "dream.block_count";
    char *at = NULL;
    for (long i = 0; i + (long)sizeof(key) < size && !at; i++)
        if (!memcmp(buf + i, key, sizeof(key) - 1)) at = buf + i + sizeof(key) - 1 + 4; /* after the value type */
    VT_REQUIRE(at, "dream.block_count in the file");
    for (uint32_t bc = 1; bc <= 3; bc += 2) {
        memcpy(at, &bc, 4);
        FILE *g = fopen(st_tmp_path("dream-blocks.gguf"), "wb");
        fwrite(buf, 1, (size_t)size, g);
        fclose(g);
        vs_dream_head *x = vs_dream_head_load(st_tmp_path("dream-blocks.gguf"), &err);
        VT_CHECK(!x && (strstr(err.msg, "2 self-attention blocks") || strstr(err.msg, "blk.2")),
                 "a DREAM file of %u blocks is refused: %s", bc, err.msg);
        vs_dream_head_free(x);
    }
    free(buf);
    vs_dream_head_free(h);
    vs_lm_free(t32), vs_lm_free(t64), vs_lm_free(v80), vs_lm_free(other);
}

/* The CLI: a random model from `model random --arch dream`, `model info`, `generate --method dream` (and an
 * EAGLE-2 shape) identical to target-only, a model for another target refused. */
static void test_cli(void) {
    char T[512], H[512], O[512], X[512];
    snprintf(T, sizeof(T), "%s", st_tmp_path("dream-bad-t32.gguf")); /* written by test_bad_input */
    snprintf(H, sizeof(H), "%s", st_tmp_path("dream-cli.gguf"));
    snprintf(O, sizeof(O), "%s", st_tmp_path("dream-cli-out.txt"));
    snprintf(X, sizeof(X), "%s", st_tmp_path("dream-bad-t64.gguf"));
    int rc = vt_run("%s model random --arch dream --target %s --heads 2 --ffn 64 --ctx 256 -o %s > %s 2>&1", vt_cli(),
                    T, H, O);
    VT_CHECK(rc == 0 && st_file_has(O, "dream model"), "model random --arch dream (rc %d)", rc);
    rc = vt_run("%s model info -m %s > %s 2>&1", vt_cli(), H, O);
    VT_CHECK(rc == 0 && st_file_has(O, "architecture   dream") && st_file_has(O, "cross-attention"),
             "model info of a DREAM model (rc %d)", rc);
    rc = vt_run("%s model random --arch dream --target %s --layers 3 --heads 2 --ffn 64 --ctx 256 -o %s > %s 2>&1",
                vt_cli(), T, H, O);
    VT_CHECK(rc == 2 && st_file_has(O, "comes from --target"), "--layers with --arch dream (rc %d)", rc);
    rc = vt_run("%s model random --arch dream --target %s --heads 2 --ffn 64 --ctx 256 -o %s > %s 2>&1", vt_cli(), T,
                H, O);
    for (int k = 0; k < 2; k++) {
        /* the random model's text may hold NUL bytes: only the statistics (standard error) are searched */
        rc = vt_run("%s generate -m %s -md %s --method %s --draft 4 --raw -p 'abc de' -n 16 --temp 0 --compare > /dev/null 2> %s",
                    vt_cli(), T, H, k ? "dream@k3n9" : "dream", O);
        VT_CHECK(rc == 0 && st_file_has(O, "is identical to"), "generate --method %s (rc %d)", k ? "dream@k3n9" : "dream",
                 rc);
    }
    rc = vt_run("%s generate -m %s -md %s --method dream --raw -p 'abc' -n 4 > %s 2>&1", vt_cli(), X, H, O);
    VT_CHECK(rc == 1 && st_file_has(O, "width"), "a DREAM model for another target (rc %d)", rc);
    rc = vt_run("%s generate -m %s -md %s --method dream@w2 --raw -p 'abc' -n 4 > %s 2>&1", vt_cli(), T, H, O);
    VT_CHECK(rc != 0 && st_file_has(O, "not width trees"), "dream@w2 refused (rc %d)", rc);
    rc = vt_run("%s generate -m %s -md %s --method dream@k2v50 --draft 3 --raw -p 'abc de' -n 12 --temp 0 --compare "
                "> /dev/null 2> %s", vt_cli(), T, H, O);
    VT_CHECK(rc == 0 && st_file_has(O, "is identical to"), "generate --method dream@k2v50 (rc %d)", rc);
    const char *bad[] = {"dream@v0", "dream@v101", "dream@k2v", "dream@vv50"};
    for (size_t i = 0; i < VS_ARRAY_LEN(bad); i++) {
        rc = vt_run("%s generate -m %s -md %s --method %s --raw -p 'abc' -n 4 > %s 2>&1", vt_cli(), T, H, bad[i], O);
        VT_CHECK(rc != 0 && st_file_has(O, "unknown"), "--method %s refused (rc %d)", bad[i], rc);
    }
}

int main(int argc, char **argv) {
    (void)argc, (void)argv;
    const double t0 = vs_time_now();
    test_bad_input();
    test_lossless_and_cache();
    test_compression();
    test_tree_mask();
    test_sampling();
    test_cli();
    printf("dream: %.1f s\n", vs_time_now() - t0);
    return vt_finish("dream");
}
