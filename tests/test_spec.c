/* test_spec: the speculative engine and the draft-LM drafter.
 *   - statistics: vs_spec_stats_compute on hand-made logs with known answers;
 *   - lossless greedy: speculative output token-identical to target-only greedy output over >= 300
 *     combinations of prompt, model pair and gamma in {1, 3, 5, 8}: random pairs of several shapes and
 *     types (independent, same weights quantised, fewer layers), the parity models of ../shared with a
 *     random drafter sharing their tokenizer (skipped without ../shared), multimodal pairs (target
 *     mmproj with a tower + a projector-only drafter mmproj over the same features) in M and T mode;
 *     the engine's target-only mode is itself checked against a plain one-row-at-a-time decode;
 *     the random pairs and the multimodal same-seed pairs again with width-2 and width-3 token trees
 *     (draft_lm tree_width; a tree's first block never accepts less than the chain's);
 *   - the drafter never evaluates a row twice (its counter = rows kept + rejected drafts);
 *   - draft == target (the same file): every draft accepted, tau = gamma + 1;
 *   - bad input: other vocabulary / other tokenizer, gamma = 0, drafting near the context end (target
 *     and draft caches), EOS inside a block, malformed proposals (child before parent, parent range,
 *     depth, too many nodes, token range, q = 0, siblings with different q rows or one token), a valid
 *     hand-made tree, prompts;
 *   - the debug "reject" drafter: nothing accepted, output unchanged. */
#include <string.h>
#include <unistd.h>

#include "draft_ensemble.h"
#include "draft_lm.h"
#include "spec.h"
#include "spec_testutil.h"
#include "testutil.h"
#include "tokenizer.h"
#include "vision.h"

/* ------------------------------------------------------------------------------------------------
 * helpers */

static vs_lm_random_opts ropts(int E, int L, int H, int KVH, int F, int V, vs_type t, float std, bool tied,
                               uint64_t seed) {
    vs_lm_random_opts o;
    memset(&o, 0, sizeof(o));
    o.n_embd = E, o.n_layer = L, o.n_head = H, o.n_head_kv = KVH, o.n_ff = F, o.n_ctx = 512, o.n_vocab = V;
    o.type = t, o.init_std = std, o.tied = tied, o.seed = seed;
    return o;
}

static vs_lm *make_model(const vs_lm_random_opts *o, const char *name) {
    vs_error err = {0};
    const char *p = st_tmp_path(name);
    VT_REQUIRE(vs_lm_write_random(o, p, &err) == VS_OK, "writing %s: %s", p, err.msg);
    vs_lm *lm = vs_lm_load(p, &err);
    VT_REQUIRE(lm, "loading %s: %s", p, err.msg);
    return lm;
}

static vs_lm *load_model(const char *path) {
    vs_error err = {0};
    vs_lm *lm = vs_lm_load(path, &err);
    VT_REQUIRE(lm, "loading %s: %s", path, err.msg);
    return lm;
}

/* A draft-LM drafter drafting width-`width` trees (1 = chains). */
static vs_spec_drafter *make_drafter_wp(vs_lm *draft, vs_lm *target, vs_draft_lm_mode mode,
                                        const vs_vision_projector *proj, const vs_vision_tower *tower,
                                        int n_ctx, int width, float p_min) {
    vs_error err = {0};
    vs_draft_lm_opts o = {.mode = mode, .n_ctx = n_ctx, .proj = proj, .tower = tower, .tree_width = width,
                          .p_min = p_min};
    vs_spec_drafter *d = vs_draft_lm_new(draft, target, &o, &err);
    VT_REQUIRE(d, "drafter: %s", err.msg);
    return d;
}

static vs_spec_drafter *make_drafter_w(vs_lm *draft, vs_lm *target, vs_draft_lm_mode mode,
                                       const vs_vision_projector *proj, const vs_vision_tower *tower,
                                       int n_ctx, int width) {
    return make_drafter_wp(draft, target, mode, proj, tower, n_ctx, width, 0);
}

static vs_spec_drafter *make_drafter(vs_lm *draft, vs_lm *target, vs_draft_lm_mode mode,
                                     const vs_vision_projector *proj, const vs_vision_tower *tower,
                                     int n_ctx) {
    return make_drafter_w(draft, target, mode, proj, tower, n_ctx, 1);
}

/* Runs one request; VT_REQUIRE success. */
static void run(st_engine *e, vs_spec_drafter *d, const vs_spec_prompt *p, int gamma, int n_predict,
                bool ignore_eos, vs_spec_log *log) {
    vs_error err = {0};
    vs_spec_params pr = vs_spec_params_default();
    pr.gamma = gamma;
    pr.n_predict = n_predict;
    pr.sampling.temperature = 0;
    pr.ignore_eos = ignore_eos;
    vs_status st = vs_spec_generate(e->s, d, p, &pr, NULL, NULL, log, &err);
    VT_REQUIRE(st == VS_OK, "generate (gamma %d): %s", gamma, err.msg);
}

/* A text prompt of one or more segments of random tokens in [3, V) after BOS (1). */
typedef struct text_prompt {
    int32_t tok[96];
    vs_spec_segment seg[3];
    vs_spec_prompt p;
} text_prompt;

static void make_text_prompt(text_prompt *t, int n, int n_seg, int V, uint64_t seed) {
    vs_rng r;
    vs_rng_seed(&r, seed);
    VT_REQUIRE(n >= 1 && n <= 96 && n_seg >= 1 && n_seg <= 3 && n_seg <= n, "prompt shape");
    t->tok[0] = 1;
    for (int i = 1; i < n; i++) t->tok[i] = 3 + (int32_t)vs_rng_below(&r, (uint32_t)(V - 3));
    memset(t->seg, 0, sizeof(t->seg));
    int at = 0;
    for (int s = 0; s < n_seg; s++) {
        int len = s == n_seg - 1 ? n - at : (n / n_seg);
        t->seg[s].kind = VS_SPEC_SEG_TEXT;
        t->seg[s].tokens = t->tok + at;
        t->seg[s].n = len;
        at += len;
    }
    memset(&t->p, 0, sizeof(t->p));
    t->p.seg = t->seg;
    t->p.n_seg = n_seg;
}

/* Plain greedy decoding with vs_lm_forward directly: the whole prompt in one batch, then one row per
 * step. Independent of the engine; returns the number of tokens. tok: end-of-generation tokens are never
 * picked (the engine's ignore_eos; NULL: no EOS handling). */
static int plain_greedy(vs_lm *lm, const vs_tokenizer *tok, const int32_t *prompt, int n, int n_predict,
                        int32_t *out) {
    vs_error err = {0};
    const int V = vs_lm_cfg(lm)->n_vocab;
    vs_kv *kv = vs_lm_kv_new(lm, 1, n + n_predict + 1, VS_TYPE_F32, &err);
    VT_REQUIRE(kv, "%s", err.msg);
    vs_lm_row *rows = calloc((size_t)n, sizeof(vs_lm_row));
    float *lg = malloc(sizeof(float) * (size_t)V);
    for (int i = 0; i < n; i++) rows[i].token = prompt[i], rows[i].pos = i, rows[i].want_logits = i == n - 1;
    vs_lm_out o = {.logits = lg, .attn_layer = -1};
    VT_REQUIRE(vs_lm_forward(lm, kv, NULL, rows, n, &o, &err) == VS_OK, "%s", err.msg);
    for (int k = 0; k < n_predict; k++) {
        for (int t = 0; tok && t < V; t++)
            if (vs_tokenizer_is_eog(tok, t)) lg[t] = -INFINITY;
        out[k] = vs_argmax(lg, V);
        vs_lm_row r = {.token = out[k], .pos = n + k, .want_logits = true};
        VT_REQUIRE(vs_lm_forward(lm, kv, NULL, &r, 1, &o, &err) == VS_OK, "%s", err.msg);
    }
    free(rows), free(lg);
    vs_kv_free(kv);
    return n_predict;
}

/* Diagnosis of a greedy mismatch on a text prompt: the target's logit margin between the target-only
 * token and the speculative one at the first difference (a near-tie flipped by rounding is ~1e-6). */
static double mismatch_margin(vs_lm *lm, const vs_spec_prompt *p, const int32_t *ctx, int n_ctx_tok,
                              int32_t want, int32_t got) {
    vs_error err = {0};
    const int V = vs_lm_cfg(lm)->n_vocab;
    int n = 0;
    for (int i = 0; i < p->n_seg; i++) {
        if (p->seg[i].kind != VS_SPEC_SEG_TEXT) return -1;
        n += p->seg[i].n;
    }
    vs_kv *kv = vs_lm_kv_new(lm, 1, n + n_ctx_tok + 1, VS_TYPE_F32, &err);
    vs_lm_row *rows = calloc((size_t)(n + n_ctx_tok), sizeof(vs_lm_row));
    float *lg = malloc(sizeof(float) * (size_t)V);
    int k = 0;
    for (int i = 0; i < p->n_seg; i++)
        for (int j = 0; j < p->seg[i].n; j++) rows[k].token = p->seg[i].tokens[j], rows[k].pos = k, k++;
    for (int j = 0; j < n_ctx_tok; j++) rows[k].token = ctx[j], rows[k].pos = k, k++;
    rows[k - 1].want_logits = true;
    vs_lm_out o = {.logits = lg, .attn_layer = -1};
    double m = -1;
    if (kv && vs_lm_forward(lm, kv, NULL, rows, k, &o, &err) == VS_OK) m = lg[want] - lg[got];
    free(rows), free(lg);
    vs_kv_free(kv);
    return m;
}

/* Totals over the lossless runs. */
typedef struct tally {
    int combos, mismatches;
    int64_t drafted, accepted, partial_blocks, tree_blocks, tokens, blocks;
} tally;

static void tally_log(tally *t, const vs_spec_log *log) {
    t->tokens += log->n_tokens;
    t->blocks += log->n_blocks;
    for (int i = 0; i < log->n_blocks; i++) {
        t->drafted += log->blocks[i].n_draft;
        t->accepted += log->blocks[i].n_accept;
        t->partial_blocks += log->blocks[i].n_accept > 0 && log->blocks[i].n_accept < log->blocks[i].n_draft;
    }
}

/* One pair over a set of prompts and every gamma: output == target-only, drafter bookkeeping exact.
 * width: the drafter's tree width. first_acc[prompt * 4 + gamma index] (may be NULL): the first block's
 * accepted length; recorded for chains (width 1), and a tree's must not be shorter (its branch 0 IS the
 * chain's proposal, from the same state). */
static const int GAMMAS[4] = {1, 3, 5, 8};

static void check_pair(const char *what, st_engine *e, vs_spec_drafter *d,
                       const vs_spec_prompt *const *prompts, int n_prompts, const int *n_draft_rows,
                       int n_predict, tally *t, int width, int *first_acc) {
    vs_spec_log base, spec;
    vs_spec_log_init(&base);
    vs_spec_log_init(&spec);
    for (int pi = 0; pi < n_prompts; pi++) {
        bool ignore_eos = pi % 2 == 0;
        run(e, NULL, prompts[pi], 0, n_predict, ignore_eos, &base);
        VT_CHECK(base.n_blocks == base.n_tokens, "%s: target-only takes one step per token", what);
        int n_eog = 0; /* ignore_eos as llama.cpp's --ignore-eos: end-of-generation tokens are never chosen */
        for (int i = 0; ignore_eos && i < base.n_tokens; i++) n_eog += vs_tokenizer_is_eog(e->tok, base.tokens[i]);
        VT_CHECK(n_eog == 0, "%s: prompt %d: %d end-of-generation tokens generated with ignore_eos", what, pi, n_eog);
        for (int gi = 0; gi < 4; gi++) {
            int64_t ev0 = vs_draft_lm_rows_evaluated(d);
            run(e, d, prompts[pi], GAMMAS[gi], n_predict, ignore_eos, &spec);
            t->combos++;
            bool ok = st_same_tokens(&base, &spec, true);
            if (!ok) {
                t->mismatches++;
                int first = 0;
                while (first < VS_MIN(base.n_tokens, spec.n_tokens) &&
                       base.tokens[first] == spec.tokens[first])
                    first++;
                fprintf(stderr,
                        "  %s prompt %d gamma %d: %d vs %d tokens, first difference at %d (target logit "
                        "margin %.3g)\n",
                        what, pi, GAMMAS[gi], spec.n_tokens, base.n_tokens, first,
                        first < VS_MIN(base.n_tokens, spec.n_tokens)
                            ? mismatch_margin(e->lm, prompts[pi], base.tokens, first, base.tokens[first],
                                              spec.tokens[first])
                            : -1);
            }
            VT_CHECK(ok, "%s: prompt %d gamma %d: speculative output differs from target-only", what, pi,
                     GAMMAS[gi]);
            tally_log(t, &spec);
            /* Never re-evaluated: rows evaluated = rows kept in the draft cache + rolled-back drafts, and
             * the cache holds the context except at most its last three rows (the unevaluated last draft
             * and bonus of a fully accepted block, then the final token) - or all of it when the request
             * ended at an accepted EOS the drafter had evaluated. */
            int64_t ev = vs_draft_lm_rows_evaluated(d) - ev0;
            int kv_len = vs_kv_seq_len(vs_draft_lm_kv(d), 0);
            int ctx = n_draft_rows[pi] + spec.n_tokens;
            VT_CHECK(ev == kv_len + st_wasted_drafts(&spec),
                     "%s: drafter evaluated %lld rows, cache %d + wasted %lld", what, (long long)ev, kv_len,
                     (long long)st_wasted_drafts(&spec));
            VT_CHECK(kv_len <= ctx && kv_len >= ctx - 3, "%s: draft cache %d rows for a context of %d", what,
                     kv_len, ctx);
            for (int b = 0; b < spec.n_blocks; b++) {
                const vs_spec_block *k = &spec.blocks[b];
                VT_CHECK(k->n_depth <= GAMMAS[gi] && k->n_draft <= width * k->n_depth,
                         "block drafted %d nodes of depth %d (gamma %d, width %d)", k->n_draft, k->n_depth,
                         GAMMAS[gi], width);
                t->tree_blocks += k->n_draft > k->n_depth;
            }
            if (first_acc && spec.n_blocks > 0) {
                int *fa = &first_acc[pi * 4 + gi];
                if (width == 1)
                    *fa = spec.blocks[0].n_accept;
                else
                    VT_CHECK(spec.blocks[0].n_accept >= *fa,
                             "%s: prompt %d gamma %d: the width-%d tree accepted %d in its first block, the "
                             "chain %d",
                             what, pi, GAMMAS[gi], width, spec.blocks[0].n_accept, *fa);
            }
        }
    }
    vs_spec_log_free(&base);
    vs_spec_log_free(&spec);
}

/* ------------------------------------------------------------------------------------------------
 * batch invariance of the target: greedy speculative output equals target-only output only if a row's
 * logits do not depend on how many rows are verified with it (1 row per step in target-only decoding,
 * gamma + 1 in a verify pass). Float reassociation would be tolerable in practice; a different numeric
 * path (another activation quantisation) is not: it flips near-ties. Checked on Q8_0 / Q4_0 / F16 / Q6_K
 * models whose ffn_down has n_in = 5632 (the 953M benchmark target's width) and on small ones. */

static void test_batch_invariance(void) {
    vs_error err = {0};
    struct {
        const char *name;
        vs_lm_random_opts o;
    } ms[5] = {
        {"q8_0 ffn 5632", ropts(256, 1, 4, 4, 5632, 64, VS_TYPE_Q8_0, 0.1f, true, 5)},
        {"q4_0 ffn 5632", ropts(256, 1, 4, 4, 5632, 64, VS_TYPE_Q4_0, 0.1f, true, 6)},
        {"f16 ffn 5632", ropts(256, 1, 4, 4, 5632, 64, VS_TYPE_F16, 0.1f, true, 7)},
        {"q8_0 small", ropts(128, 2, 4, 4, 256, 128, VS_TYPE_Q8_0, 0.1f, true, 8)},
        {"q6_k ffn 5632", ropts(256, 1, 4, 4, 5632, 64, VS_TYPE_Q6_K, 0.1f, true, 9)},
    };
    for (int m = 0; m < 5; m++) {
        char fname[64];
        snprintf(fname, sizeof(fname), "inv-%d.gguf", m);
        vs_lm *lm = make_model(&ms[m].o, fname);
        const int V = ms[m].o.n_vocab;
        vs_kv *kv = vs_lm_kv_new(lm, 1, 32, VS_TYPE_F32, &err);
        VT_REQUIRE(kv, "%s", err.msg);
        vs_lm_row rows[10];
        memset(rows, 0, sizeof(rows));
        for (int i = 0; i < 7; i++) rows[i].token = 3 + (i * 5) % (V - 3), rows[i].pos = i;
        VT_REQUIRE(vs_lm_forward(lm, kv, NULL, rows, 7, NULL, &err) == VS_OK, "%s", err.msg);
        float *ref = malloc(sizeof(float) * (size_t)V), *lg = malloc(sizeof(float) * (size_t)V * 9);
        double worst = 0;
        for (int n = 1; n <= 9; n++) {
            memset(rows, 0, sizeof(rows));
            for (int i = 0; i < n; i++)
                rows[i].token = 3 + (i * 7 + 1) % (V - 3), rows[i].pos = 7 + i, rows[i].want_logits = true;
            vs_lm_out o = {.logits = lg, .attn_layer = -1};
            VT_REQUIRE(vs_lm_forward(lm, kv, NULL, rows, n, &o, &err) == VS_OK, "%s", err.msg);
            VT_REQUIRE(vs_kv_seq_truncate(kv, 0, 7, &err) == VS_OK, "%s", err.msg);
            if (n == 1) memcpy(ref, lg, sizeof(float) * (size_t)V);
            double d = vt_max_abs_diff(ref, lg, (size_t)V);
            worst = d > worst ? d : worst;
        }
        printf("  batch invariance %-14s: max |logit(row 0 of n rows) - logit(1 row)| = %.3g\n", ms[m].name,
               worst);
        VT_CHECK(worst <= 1e-4,
                 "%s: the target's logits depend on the number of rows in the batch (max diff %g): "
                 "verification then disagrees with one-row decoding and greedy speculative output can differ "
                 "from target-only output; vs_matmul must compute each row the same way for any n_rows",
                 ms[m].name, worst);
        free(ref), free(lg);
        vs_kv_free(kv);
        vs_lm_free(lm);
    }
}

/* Tree rows: a node verified inside a tree batch (tree mask: the cache, the pending row, its ancestors)
 * gets exactly the logits of the same path verified as a causal chain; nodes of other branches do not
 * leak in. Also the drafter's form (lm.h mask_past): nodes of earlier depths already cached, other
 * branches' cached nodes masked. Exact, not within a tolerance: with masked keys left in place the
 * lane-wise softmax sums shift, and a Q8_0 target's activation quantisation turned that into logit
 * differences of 0.05 and a greedy mismatch; lm.c gathers the visible keys instead. */
static void test_tree_rows(void) {
    vs_error err = {0};
    struct {
        const char *name;
        vs_lm_random_opts o;
    } ms[3] = {
        {"f32 gqa", ropts(64, 2, 4, 2, 128, 96, VS_TYPE_F32, 0.15f, true, 11)},
        {"q8_0", ropts(128, 2, 4, 4, 256, 128, VS_TYPE_Q8_0, 0.1f, true, 31)},
        {"f16", ropts(32, 1, 2, 1, 64, 64, VS_TYPE_F16, 0.3f, false, 21)},
    };
    /* pending row + 8 nodes: branch A 0-1-2-3, branch B 4-5-6, node 7 a second child of node 0 */
    const int NN = 8, par[8] = {-1, 0, 1, 2, -1, 4, 5, 0};
    for (int m = 0; m < 3; m++) {
        char fname[64];
        snprintf(fname, sizeof(fname), "tree-rows-%d.gguf", m);
        vs_lm *lm = make_model(&ms[m].o, fname);
        const int V = ms[m].o.n_vocab;
        vs_kv *kv = vs_lm_kv_new(lm, 1, 128, VS_TYPE_F32, &err);
        VT_REQUIRE(kv, "%s", err.msg);
        vs_lm_row rows[64];
        memset(rows, 0, sizeof(rows));
        const int P = 21; /* keys cross 8- and 16-lane boundaries */
        for (int i = 0; i < P; i++) rows[i].token = 3 + (i * 5) % (V - 3), rows[i].pos = i;
        VT_REQUIRE(vs_lm_forward(lm, kv, NULL, rows, P, NULL, &err) == VS_OK, "%s", err.msg);
        int depth[8], anc[9][9], n_anc[9];
        float *tl = malloc(sizeof(float) * (size_t)V * 9), *cl = malloc(sizeof(float) * (size_t)V * 9);
        memset(rows, 0, sizeof(rows));
        rows[0].token = 7, rows[0].pos = P, rows[0].want_logits = true;
        for (int i = 0; i < NN; i++) {
            depth[i] = par[i] < 0 ? 1 : depth[par[i]] + 1;
            n_anc[i + 1] = 0;
            for (int a = par[i]; a >= 0; a = par[a]) anc[i + 1][n_anc[i + 1]++] = a + 1;
            anc[i + 1][n_anc[i + 1]++] = 0;
            rows[i + 1].token = 3 + (i * 11 + 2) % (V - 3);
            rows[i + 1].pos = P + depth[i];
            rows[i + 1].want_logits = true;
            rows[i + 1].tree = true;
            rows[i + 1].n_anc = n_anc[i + 1];
            rows[i + 1].anc = anc[i + 1];
        }
        vs_lm_out o = {.logits = tl, .attn_layer = -1};
        VT_REQUIRE(vs_lm_forward(lm, kv, NULL, rows, NN + 1, &o, &err) == VS_OK, "%s", err.msg);
        VT_REQUIRE(vs_kv_seq_truncate(kv, 0, P, &err) == VS_OK, "%s", err.msg);
        double worst = 0, worst_past = 0;
        for (int i = 0; i < NN; i++) {
            /* the causal chain pending, path to node i */
            vs_lm_row ch[9];
            memset(ch, 0, sizeof(ch));
            int path[8], np = 0;
            for (int a = i; a >= 0; a = par[a]) path[np++] = a;
            ch[0] = rows[0];
            for (int j = 0; j < np; j++) {
                ch[j + 1].token = rows[path[np - 1 - j] + 1].token;
                ch[j + 1].pos = P + j + 1;
                ch[j + 1].want_logits = true;
            }
            vs_lm_out oc = {.logits = cl, .attn_layer = -1};
            VT_REQUIRE(vs_lm_forward(lm, kv, NULL, ch, np + 1, &oc, &err) == VS_OK, "%s", err.msg);
            VT_REQUIRE(vs_kv_seq_truncate(kv, 0, P, &err) == VS_OK, "%s", err.msg);
            double dd = vt_max_abs_diff(tl + (size_t)(i + 1) * V, cl + (size_t)np * V, (size_t)V);
            worst = dd > worst ? dd : worst;
        }
        /* drafter form: depth by depth, one forward each, mask_past hiding other branches' cached nodes:
         * branches A (0-1-2) and B (4-5-6) side by side; slot P + 1 + 2 (j - 1) + b holds depth j of b */
        VT_REQUIRE(vs_lm_forward(lm, kv, NULL, rows, 1, NULL, &err) == VS_OK, "%s", err.msg);
        const int br[2][3] = {{0, 1, 2}, {4, 5, 6}};
        for (int j = 0; j < 3; j++) {
            vs_lm_row dr[2];
            int32_t pa[2][3];
            memset(dr, 0, sizeof(dr));
            for (int b = 0; b < 2; b++) {
                for (int i = 0; i < j; i++) pa[b][i] = P + 1 + 2 * i + b;
                dr[b].token = rows[br[b][j] + 1].token;
                dr[b].pos = P + 1 + j;
                dr[b].want_logits = true;
                dr[b].tree = true;
                dr[b].mask_past = true;
                dr[b].past_len = P + 1;
                dr[b].n_past_anc = j;
                dr[b].past_anc = pa[b];
            }
            vs_lm_out od = {.logits = cl, .attn_layer = -1};
            VT_REQUIRE(vs_lm_forward(lm, kv, NULL, dr, 2, &od, &err) == VS_OK, "%s", err.msg);
            for (int b = 0; b < 2; b++) {
                double dd = vt_max_abs_diff(tl + (size_t)(br[b][j] + 1) * V, cl + (size_t)b * V, (size_t)V);
                worst_past = dd > worst_past ? dd : worst_past;
            }
        }
        /* a cached ancestor outside the cache is refused */
        vs_lm_row bad = {.token = 3, .pos = P + 4, .tree = true, .mask_past = true, .past_len = P + 1,
                         .n_past_anc = 1, .past_anc = (const int32_t[]){P + 40}};
        VT_CHECK(vs_lm_forward(lm, kv, NULL, &bad, 1, NULL, &err) == VS_ERR_INVALID, "bad cached ancestor");
        printf("  tree rows %-8s: max |logit(tree node) - logit(its path as a chain)| = %.3g; drafted depth "
               "by depth (mask_past) %.3g\n",
               ms[m].name, worst, worst_past);
        /* bit-identical: the attention softmaxes a tree row's visible keys gathered at their chain offsets */
        VT_CHECK(worst == 0 && worst_past == 0, "%s: tree rows differ from their chains (%g, %g)", ms[m].name,
                 worst, worst_past);
        free(tl), free(cl);
        vs_kv_free(kv);
        vs_lm_free(lm);
    }
}

/* ------------------------------------------------------------------------------------------------
 * statistics with known answers */

static void test_stats(void) {
    vs_spec_log log, base;
    vs_spec_log_init(&log);
    vs_spec_log_init(&base);
    vs_error err = {0};
    log.gamma = 3;
    /* (n_draft, n_eval, n_accept, n_emit, n_steps, t_draft, t_verify, n_depth) */
    vs_spec_block b[4] = {{3, 1, 0, 1, 3, 0.003, 0.020, 0},
                          {3, 3, 3, 4, 3, 0.003, 0.016, 0},
                          {3, 2, 1, 2, 3, 0.003, 0.014, 0},
                          {3, 3, 2, 3, 3, 0.003, 0.010, 0}};
    for (int i = 0; i < 4; i++) VT_REQUIRE(vs_spec_log_add_block(&log, &b[i], &err) == VS_OK, "%s", err.msg);
    int32_t toks[10] = {0};
    VT_REQUIRE(vs_spec_log_add_tokens(&log, toks, 10, &err) == VS_OK, "%s", err.msg);
    log.t_prefill = 0.05, log.t_draft_prefill = 0.01, log.t_decode = 0.1, log.t_vision = 0.04;
    log.t_total = 0.2;
    log.tp_step = 0.01;
    log.tp_verify = 0.015;
    vs_spec_stats s;
    vs_spec_stats_compute(&log, NULL, &s);
    VT_CHECK_NEAR(s.tau, 2.5, 1e-12, "tau");
    VT_CHECK_NEAR(s.n_alpha[0], 0.75, 1e-12, "1-alpha");
    VT_CHECK_NEAR(s.n_alpha[1], 2.0 / 3.0, 1e-12, "2-alpha");
    VT_CHECK_NEAR(s.n_alpha[2], 0.5, 1e-12, "3-alpha");
    VT_CHECK(s.n_alpha[3] == -1, "4-alpha has no data: %g", s.n_alpha[3]);
    VT_CHECK_NEAR(s.accept_rate, 6.0 / 9.0, 1e-12, "acceptance");
    VT_CHECK_NEAR(s.draft_accept_rate, 6.0 / 12.0, 1e-12, "acceptance of all drafted");
    for (int i = 0; i < 4; i++) VT_CHECK(s.hist[i] == 1, "hist[%d] = %lld", i, (long long)s.hist[i]);
    VT_CHECK_NEAR(s.tq, 0.001, 1e-12, "Tq");
    VT_CHECK_NEAR(s.tp, 0.01, 1e-12, "Tp");
    VT_CHECK_NEAR(s.t_draft, 0.012, 1e-12, "drafting time");
    VT_CHECK_NEAR(s.t_verify, 0.060, 1e-12, "verification time");
    VT_CHECK_NEAR(s.est_tabed, 2.5 / (3 * 0.1 + 1), 1e-12, "TABED eq. 1");
    VT_CHECK_NEAR(s.est_tabed_cpu, 2.5 / (3 * 0.1 + 1.5), 1e-12, "TABED eq. 1, CPU variant");
    VT_CHECK_NEAR(s.tok_s_decode, 100, 1e-9, "tokens/s");
    VT_CHECK_NEAR(s.tok_s_total, 50, 1e-9, "tokens/s end-to-end");
    VT_CHECK(!s.has_baseline, "no baseline");
    /* without a measured verify pass: the mean over blocks that verified gamma drafts */
    log.tp_verify = 0;
    vs_spec_stats_compute(&log, NULL, &s);
    VT_CHECK_NEAR(s.tp_verify, 0.015, 1e-12, "mean full-block verify");
    /* baseline: Tp from its steps, speedups */
    log.tp_step = 0;
    base.gamma = 0;
    for (int i = 0; i < 10; i++) {
        vs_spec_block bb = {0, 0, 0, 1, 0, 0, 0.02, 0};
        VT_REQUIRE(vs_spec_log_add_block(&base, &bb, &err) == VS_OK, "%s", err.msg);
    }
    VT_REQUIRE(vs_spec_log_add_tokens(&base, toks, 10, &err) == VS_OK, "%s", err.msg);
    base.t_decode = 0.2, base.t_total = 0.3;
    vs_spec_stats_compute(&log, &base, &s);
    VT_CHECK_NEAR(s.tp, 0.02, 1e-12, "Tp from the baseline");
    VT_CHECK_NEAR(s.speedup_decode, 2.0, 1e-12, "decode speedup");
    VT_CHECK_NEAR(s.speedup_total, 1.5, 1e-12, "end-to-end speedup");
    VT_CHECK_NEAR(s.base_tok_s_decode, 50, 1e-9, "baseline tokens/s");
    /* empty log: zeros, no division by zero */
    vs_spec_log empty;
    vs_spec_log_init(&empty);
    vs_spec_stats_compute(&empty, NULL, &s);
    VT_CHECK(s.tau == 0 && s.accept_rate == 0 && s.tq == 0 && s.est_tabed == 0, "empty log");
    /* the report writers run */
    FILE *f = fopen(st_tmp_path("stats.txt"), "w");
    VT_REQUIRE(f, "tmp file");
    vs_spec_stats_compute(&log, &base, &s);
    vs_spec_stats_print(&s, f);
    fclose(f);
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_spec_stats_json(&s, &w);
    VT_CHECK(!w.oom && w.buf, "json written");
    vs_json_doc *doc = vs_json_parse(w.buf, w.len, "stats", &err);
    VT_CHECK(doc != NULL, "stats JSON parses: %s", err.msg);
    if (doc) {
        const vs_json *root = vs_json_root(doc);
        VT_CHECK_NEAR(vs_json_get_num(root, "tau", 0), 2.5, 1e-12, "JSON tau");
        VT_CHECK_NEAR(vs_json_get_num(root, "speedup_decode", 0), 2.0, 1e-12, "JSON speedup");
        const vs_json *na = vs_json_get(root, "n_alpha");
        VT_CHECK(na && na->type == VS_JSON_ARRAY && na->len == 3, "JSON n_alpha");
        vs_json_doc_free(doc);
    }
    vs_json_writer_free(&w);
    vs_spec_log_free(&log);
    vs_spec_log_free(&base);
}

/* ------------------------------------------------------------------------------------------------
 * lossless greedy on random pairs */

typedef struct pair_spec {
    const char *name;
    vs_lm_random_opts draft;
    int same; /* 1: the target's own vs_lm, 2: the target's file loaded again */
} pair_spec;

static void test_random_pairs(tally *t) {
    enum { NP = 10 };
    struct {
        const char *name;
        vs_lm_random_opts o;
    } targets[4] = {
        {"t1-f32-gqa", ropts(64, 2, 4, 2, 128, 96, VS_TYPE_F32, 0.15f, true, 11)},
        {"t2-f16", ropts(32, 1, 2, 1, 64, 64, VS_TYPE_F16, 0.3f, false, 21)},
        {"t3-q8", ropts(128, 2, 4, 4, 256, 128, VS_TYPE_Q8_0, 0.1f, true, 31)},
        /* K-quants: token embeddings, every matrix and the drafter in Q4_K / Q6_K / Q5_K */
        {"t4-q4_k", ropts(256, 2, 4, 2, 512, 128, VS_TYPE_Q4_K, 0.1f, false, 41)},
    };
    pair_spec pairs[4][4] = {
        {{"same file", ropts(0, 0, 0, 0, 0, 0, 0, 0, 0, 0), 2},
         {"same seed q8_0", ropts(64, 2, 4, 2, 128, 96, VS_TYPE_Q8_0, 0.15f, true, 11), 0},
         {"same seed 1 layer", ropts(64, 1, 4, 2, 128, 96, VS_TYPE_F32, 0.15f, true, 11), 0},
         {"independent", ropts(32, 1, 2, 2, 64, 96, VS_TYPE_F32, 0.15f, true, 12), 0}},
        {{"same seed f32", ropts(32, 1, 2, 1, 64, 64, VS_TYPE_F32, 0.3f, false, 21), 0},
         {"independent 2 layers", ropts(32, 2, 4, 4, 64, 64, VS_TYPE_F32, 0.3f, false, 22), 0},
         {NULL, {0}, 0},
         {NULL, {0}, 0}},
        {{"same seed q4_0", ropts(128, 2, 4, 4, 256, 128, VS_TYPE_Q4_0, 0.1f, true, 31), 0},
         {"same seed 1 layer f32", ropts(128, 1, 4, 4, 256, 128, VS_TYPE_F32, 0.1f, true, 31), 0},
         {NULL, {0}, 0},
         {NULL, {0}, 0}},
        {{"same seed q6_k", ropts(256, 2, 4, 2, 512, 128, VS_TYPE_Q6_K, 0.1f, false, 41), 0},
         {"same seed 1 layer q5_k", ropts(256, 1, 4, 2, 512, 128, VS_TYPE_Q5_K, 0.1f, false, 41), 0},
         {NULL, {0}, 0},
         {NULL, {0}, 0}},
    };
    for (int ti = 0; ti < 4; ti++) {
        char fname[64];
        snprintf(fname, sizeof(fname), "%s.gguf", targets[ti].name);
        vs_lm *target = make_model(&targets[ti].o, fname);
        const int V = targets[ti].o.n_vocab;
        st_engine e = st_make_engine(target, 256);
        text_prompt tp[NP];
        const vs_spec_prompt *pp[NP];
        int rows[NP];
        const int lens[NP] = {1, 2, 3, 5, 8, 13, 21, 30, 47, 64};
        for (int i = 0; i < NP; i++) {
            make_text_prompt(&tp[i], lens[i], VS_MIN(1 + i % 3, lens[i]), V, 1000 * ti + i);
            pp[i] = &tp[i].p;
            rows[i] = lens[i];
        }
        /* the engine's target-only decode equals a plain decode written against vs_lm_forward */
        for (int i = 0; i < NP; i += 3) {
            int32_t ref[40];
            vs_spec_log log;
            vs_spec_log_init(&log);
            plain_greedy(target, e.tok, tp[i].tok, lens[i], 40, ref);
            run(&e, NULL, pp[i], 0, 40, true, &log);
            VT_CHECK(log.n_tokens == 40 && memcmp(log.tokens, ref, sizeof(ref)) == 0,
                     "%s prompt %d: engine target-only decode differs from a plain decode", targets[ti].name,
                     i);
            vs_spec_log_free(&log);
        }
        for (int pi = 0; pi < 4; pi++) {
            pair_spec *ps = &pairs[ti][pi];
            if (!ps->name) continue;
            vs_lm *draft;
            if (ps->same == 2)
                draft = load_model(st_tmp_path(fname));
            else {
                char dname[96];
                snprintf(dname, sizeof(dname), "%s-draft%d.gguf", targets[ti].name, pi);
                draft = make_model(&ps->draft, dname);
            }
            int first_acc[NP * 4];
            /* chains, chains with the adaptive draft length (p_min 0.1: on these random drafters a third to
             * nine tenths of the fixed length's drafts, blocks stopping at every depth), trees */
            int64_t drafted[2] = {0, 0};
            for (int v = 0; v < 4; v++) {
                const int width = v < 2 ? 1 : v;
                const float p_min = v == 1 ? 0.1f : 0.0f;
                vs_spec_drafter *d = make_drafter_wp(draft, target, VS_DRAFT_LM_TEXT, NULL, NULL, 0, width, p_min);
                char what[128];
                snprintf(what, sizeof(what), "%s / %s / width %d%s", targets[ti].name, ps->name, width,
                         p_min > 0 ? " p-min 0.1" : "");
                tally before = *t;
                check_pair(what, &e, d, pp, NP, rows, 32, t, width, p_min > 0 ? NULL : first_acc);
                printf("  %-46s %3d combos, %5lld drafted, %5lld accepted, tau %.3f\n", what,
                       t->combos - before.combos, (long long)(t->drafted - before.drafted),
                       (long long)(t->accepted - before.accepted),
                       (double)(t->tokens - before.tokens) / (double)VS_MAX(t->blocks - before.blocks, 1));
                if (v < 2) drafted[v] = t->drafted - before.drafted;
                vs_spec_drafter_free(d);
            }
            VT_CHECK(drafted[1] > 0 && drafted[1] < drafted[0], "%s / %s: p-min 0.1 drafted %lld of the fixed %lld",
                     targets[ti].name, ps->name, (long long)drafted[1], (long long)drafted[0]);
            vs_lm_free(draft);
        }
        st_free_engine(&e);
        vs_lm_free(target);
    }
}

/* draft == target: every draft accepted, tau = gamma + 1 (n_predict a multiple of gamma + 1). */
static void test_self_draft(void) {
    vs_lm_random_opts o = ropts(64, 2, 4, 2, 128, 96, VS_TYPE_F32, 0.15f, true, 41);
    vs_lm *target = make_model(&o, "self.gguf");
    vs_lm *same_file = load_model(st_tmp_path("self.gguf"));
    st_engine e = st_make_engine(target, 256);
    text_prompt tp;
    make_text_prompt(&tp, 12, 2, 96, 77);
    vs_lm *drafts[2] = {target, same_file};
    /* chains, and trees of width 2 and 3 (the drafter's cache after each commit must hold exactly the
     * accepted path, or its branch 0 would stop matching the target) */
    for (int di = 0; di < 4; di++) {
        const int width = di < 2 ? 1 : di;
        vs_spec_drafter *d = make_drafter_w(drafts[di % 2], target, VS_DRAFT_LM_TEXT, NULL, NULL, 0, width);
        for (int gi = 0; gi < 4; gi++) {
            int g = GAMMAS[gi];
            vs_spec_log log;
            vs_spec_log_init(&log);
            run(&e, d, &tp.p, g, 4 * (g + 1), true, &log);
            vs_spec_stats s;
            vs_spec_stats_compute(&log, NULL, &s);
            VT_CHECK(s.tau == g + 1, "self draft (%s, width %d), gamma %d: tau %g",
                     di % 2 ? "same file" : "same model", width, g, s.tau);
            VT_CHECK(s.n_accepted == 4 * g && s.n_drafted == 4 * g * width,
                     "gamma %d width %d: %lld of %lld accepted", g, width, (long long)s.n_accepted,
                     (long long)s.n_drafted);
            for (int n = 0; n < g; n++)
                VT_CHECK(s.n_alpha[n] == 1, "gamma %d: %d-alpha %g", g, n + 1, s.n_alpha[n]);
            VT_CHECK(s.hist[g] == 4, "gamma %d: histogram", g);
            vs_spec_log_free(&log);
        }
        vs_spec_drafter_free(d);
    }
    st_free_engine(&e);
    vs_lm_free(same_file);
    vs_lm_free(target);
}

/* After tree blocks the drafter's cache holds exactly the context's rows: compacted accepted paths
 * equal a plain causal evaluation of the prompt and the generated tokens (bit for bit: F32 cache, a
 * batch-invariant draft model, tree rows gathered exactly). */
static void test_tree_draft_cache(void) {
    vs_error err = {0};
    vs_lm_random_opts to = ropts(64, 2, 4, 2, 128, 96, VS_TYPE_F32, 0.15f, true, 11);
    vs_lm_random_opts dop = ropts(64, 1, 4, 2, 128, 96, VS_TYPE_F32, 0.15f, true, 11); /* related, 1 layer */
    vs_lm *target = make_model(&to, "tc-target.gguf");
    vs_lm *draft = make_model(&dop, "tc-draft.gguf");
    st_engine e = st_make_engine(target, 256);
    const vs_lm_config *dc = vs_lm_cfg(draft);
    int checked = 0, tree_blocks = 0, accepted_tree = 0;
    double worst = 0;
    for (int width = 2; width <= 3; width++) {
        vs_spec_drafter *d = make_drafter_w(draft, target, VS_DRAFT_LM_TEXT, NULL, NULL, 0, width);
        for (int pi = 0; pi < 4; pi++) {
            text_prompt tp;
            make_text_prompt(&tp, 5 + 7 * pi, 1 + pi % 3, 96, 500 + pi);
            const int n_prompt = 5 + 7 * pi;
            for (int gi = 0; gi < 4; gi++) {
                vs_spec_log log;
                vs_spec_log_init(&log);
                run(&e, d, &tp.p, GAMMAS[gi], 30, true, &log);
                for (int b = 0; b < log.n_blocks; b++) {
                    tree_blocks += log.blocks[b].n_draft > log.blocks[b].n_depth;
                    accepted_tree +=
                        log.blocks[b].n_draft > log.blocks[b].n_depth && log.blocks[b].n_accept > 1;
                }
                vs_kv *kv = vs_draft_lm_kv(d);
                const int len = vs_kv_seq_len(kv, 0);
                VT_REQUIRE(len <= n_prompt + log.n_tokens, "draft cache %d rows", len);
                vs_kv *ref = vs_lm_kv_new(draft, 1, 256, VS_TYPE_F32, &err);
                VT_REQUIRE(ref, "%s", err.msg);
                vs_lm_row rows[128];
                memset(rows, 0, sizeof(rows));
                for (int i = 0; i < len; i++) {
                    rows[i].token = i < n_prompt ? tp.tok[i] : log.tokens[i - n_prompt];
                    rows[i].pos = i;
                }
                const int pre = VS_MIN(len, n_prompt - 1); /* the drafter's prefill: one batch */
                if (pre > 0)
                    VT_REQUIRE(vs_lm_forward(draft, ref, NULL, rows, pre, NULL, &err) == VS_OK, "%s",
                               err.msg);
                for (int i = pre; i < len; i++)
                    VT_REQUIRE(vs_lm_forward(draft, ref, NULL, &rows[i], 1, NULL, &err) == VS_OK, "%s",
                               err.msg);
                for (int l = 0; l < dc->n_layer; l++)
                    for (int h = 0; h < dc->n_head_kv; h++) {
                        const size_t n = (size_t)len * (size_t)dc->head_dim;
                        double dk =
                            vt_max_abs_diff(vs_kv_k_const(kv, 0, l, h), vs_kv_k_const(ref, 0, l, h), n);
                        double dv =
                            vt_max_abs_diff(vs_kv_v_const(kv, 0, l, h), vs_kv_v_const(ref, 0, l, h), n);
                        worst = VS_MAX(worst, VS_MAX(dk, dv));
                    }
                checked++;
                vs_kv_free(ref);
                vs_spec_log_free(&log);
            }
        }
        vs_spec_drafter_free(d);
    }
    printf("  tree drafter cache: %d runs, %d tree blocks (%d accepting 2+ drafts), max |row - causal row| = "
           "%.3g\n",
           checked, tree_blocks, accepted_tree, worst);
    VT_CHECK(worst == 0, "the tree drafter's cache differs from a causal evaluation of the context (%g)",
             worst);
    VT_CHECK(accepted_tree > 20, "too few tree blocks accepting 2+ drafts (%d)", accepted_tree);
    st_free_engine(&e);
    vs_lm_free(draft);
    vs_lm_free(target);
}

/* ------------------------------------------------------------------------------------------------
 * parity models with random drafters sharing their tokenizer */

static void test_parity_pairs(tally *t) {
    const char *dir = vt_shared_or_skip("lossless greedy on the parity models");
    if (!dir) return;
    const char *names[4] = {"llama-d64-l2-gqa-tied-f32", "llama-d128-l2-f16", "llama-d128-l2-q8_0",
                            "llama-d128-l2-q4_0"};
    /* prompts in the LLaMA-2 vocabulary: the parity prompt's tokens, and random tokens */
    static const int32_t parity_prompt[19] = {1,   3148, 1001, 29901, 1724, 2927, 338,  278,   2919, 8607,
                                              297, 278,  7623, 29973, 319,  1799, 9047, 13566, 29901};
    enum { NP = 3 };
    text_prompt tp[NP];
    const vs_spec_prompt *pp[NP];
    int rows[NP] = {19, 7, 25};
    memcpy(tp[0].tok, parity_prompt, sizeof(parity_prompt));
    memset(tp[0].seg, 0, sizeof(tp[0].seg));
    tp[0].seg[0] = (vs_spec_segment){.kind = VS_SPEC_SEG_TEXT, .n = 19, .tokens = tp[0].tok};
    memset(&tp[0].p, 0, sizeof(tp[0].p));
    tp[0].p.seg = tp[0].seg, tp[0].p.n_seg = 1;
    make_text_prompt(&tp[1], 7, 1, 32000, 5);
    make_text_prompt(&tp[2], 25, 2, 32000, 6);
    for (int i = 0; i < NP; i++) pp[i] = &tp[i].p;

    vs_lm *targets[4];
    char path[4][512];
    for (int i = 0; i < 4; i++) {
        snprintf(path[i], sizeof(path[i]), "%s/parity/%s.gguf", dir, names[i]);
        targets[i] = load_model(path[i]);
    }
    /* one random drafter with the LLaMA-2 tokenizer copied from the parity file */
    vs_error err = {0};
    vs_gguf *g = vs_gguf_open(path[0], &err);
    VT_REQUIRE(g, "%s", err.msg);
    vs_lm_random_opts o = ropts(32, 1, 2, 2, 64, 0, VS_TYPE_F32, 0.05f, true, 51);
    o.tok_from = g;
    vs_lm *rnd = make_model(&o, "parity-draft.gguf");
    vs_gguf_close(g);
    for (int i = 0; i < 4; i++) {
        st_engine e = st_make_engine(targets[i], 128);
        /* the random drafter, and for the Q8_0 target the Q4_0 model (same weights before quantisation) */
        vs_lm *drafts[2] = {rnd, i == 2 ? targets[3] : NULL};
        for (int di = 0; di < 2; di++) {
            if (!drafts[di]) continue;
            vs_spec_drafter *d = make_drafter(drafts[di], targets[i], VS_DRAFT_LM_TEXT, NULL, NULL, 0);
            char what[128];
            snprintf(what, sizeof(what), "%s / %s", names[i], di ? "q4_0 twin" : "random drafter");
            tally before = *t;
            check_pair(what, &e, d, pp, NP, rows, 24, t, 1, NULL);
            printf("  %-50s %3d combos, acceptance %.3f\n", what, t->combos - before.combos,
                   (double)(t->accepted - before.accepted) / (double)VS_MAX(t->drafted - before.drafted, 1));
            vs_spec_drafter_free(d);
        }
        st_free_engine(&e);
    }
    vs_lm_free(rnd);
    for (int i = 0; i < 4; i++) vs_lm_free(targets[i]);
}

/* ------------------------------------------------------------------------------------------------
 * multimodal pairs: the target's mmproj (tower + projector) and a projector-only drafter mmproj that
 * records the tower's hash; features computed once per image and shared */

static void tiny_vision(vs_vision_config *c, int proj_out, bool tower) {
    memset(c, 0, sizeof(*c));
    c->image_size = 42, c->patch_size = 14, c->width = 32, c->ffn = 64, c->n_heads = 2, c->n_blocks = 1;
    c->projection_dim = 32, c->proj_hidden = 64, c->proj_out = proj_out, c->eps = 1e-5f;
    for (int i = 0; i < 3; i++) c->mean[i] = 0.5f, c->std[i] = 0.25f;
    c->has_tower = tower;
}


/* Prefix reuse with images (chat turns): request A = [text, image 0, text]; B = A + [text, image 1,
 * text]. With reuse, running A then B gives B's fresh output, the target evaluates only B's rows after
 * A's prompt, and so do the drafters (draft-LM in M and T mode, a 2-row M + T ensemble). An image
 * segment with another image_id (or 0) is not reused: evaluation restarts at that image. */
static void test_multimodal_reuse(st_engine *e, vs_lm *draft, vs_lm *target, const vs_vision_projector *proj,
                                  const vs_vision_tower *tower, const vs_vision_features *const *fp,
                                  float *const *trows, const int64_t *n_trows) {
    vs_error err = {0};
    int32_t tok[24];
    vs_rng r;
    vs_rng_seed(&r, 4242);
    for (int j = 0; j < 24; j++) tok[j] = j == 0 ? 1 : 3 + (int32_t)vs_rng_below(&r, 93);
    const int32_t n0 = 4, n1 = 5, n2 = 6, n3 = 5; /* text lengths */
    vs_spec_segment seg[6] = {
        {.kind = VS_SPEC_SEG_TEXT, .n = n0, .tokens = tok},
        {.kind = VS_SPEC_SEG_IMAGE, .n = (int32_t)n_trows[0], .embd = trows[0], .image = 0, .image_id = 7},
        {.kind = VS_SPEC_SEG_TEXT, .n = n1, .tokens = tok + n0},
        {.kind = VS_SPEC_SEG_TEXT, .n = n2, .tokens = tok + n0 + n1},
        {.kind = VS_SPEC_SEG_IMAGE, .n = (int32_t)n_trows[1], .embd = trows[1], .image = 1, .image_id = 8},
        {.kind = VS_SPEC_SEG_TEXT, .n = n3, .tokens = tok + n0 + n1 + n2}};
    vs_spec_prompt A = {.seg = seg, .n_seg = 3, .images = fp, .n_images = 2};
    vs_spec_prompt B = {.seg = seg, .n_seg = 6, .images = fp, .n_images = 2};
    const int32_t rA = (int32_t)vs_spec_prompt_rows(&A), rB = (int32_t)vs_spec_prompt_rows(&B);
    VT_CHECK(vs_spec_key_image(7, 3) != vs_spec_key_image(8, 3) && vs_spec_key_image(7, 3) < 0 &&
                 vs_spec_key_image(0, 3) == VS_SPEC_KEY_NONE,
             "image keys");

    vs_draft_ens_opts eo;
    vs_draft_ens_opts_default(&eo);
    eo.n_inputs = 2, eo.inputs[0] = VS_ENS_IN_M, eo.inputs[1] = VS_ENS_IN_T;
    eo.proj = proj, eo.tower = tower, eo.n_ctx = 256;
    vs_spec_drafter *ds[3] = {make_drafter(draft, target, VS_DRAFT_LM_MM, proj, tower, 0),
                              make_drafter(draft, target, VS_DRAFT_LM_TEXT, NULL, NULL, 0),
                              vs_draft_ens_new(draft, target, &eo, &err)};
    VT_REQUIRE(ds[2], "ensemble drafter: %s", err.msg);
    const char *names[3] = {"draft-lm M", "draft-lm T", "ensemble M+T"};
    vs_spec_log ref, log;
    vs_spec_log_init(&ref);
    vs_spec_log_init(&log);
    vs_spec_params pr = vs_spec_params_default();
    pr.gamma = 3, pr.n_predict = 10, pr.sampling.temperature = 0, pr.ignore_eos = true;
    for (int di = 0; di < 3; di++) {
        vs_spec_drafter *d = ds[di];
        const bool ens = di == 2;
        /* drafter rows evaluated by a request: draft-lm's counter, or the ensemble's */
#define ROWS_EVAL(d) (ens ? vs_draft_ens_get_stats(d)->rows_evaluated : vs_draft_lm_rows_evaluated(d))
        /* fresh B (no reuse: both caches start empty) */
        pr.reuse_prefix = false;
        int64_t r0 = ROWS_EVAL(d);
        VT_REQUIRE(vs_spec_generate(e->s, d, &B, &pr, NULL, NULL, &ref, &err) == VS_OK, "%s", err.msg);
        const int64_t fresh_rows = ROWS_EVAL(d) - r0;
        VT_CHECK(ref.n_prefilled == rB - 1, "%s: fresh B prefills %d of %d rows", names[di], ref.n_prefilled,
                 rB);
        const int32_t fresh_prefill = ens ? 0 : vs_draft_lm_prefilled(d);
        /* A, then B with reuse */
        VT_REQUIRE(vs_spec_generate(e->s, d, &A, &pr, NULL, NULL, &log, &err) == VS_OK, "%s", err.msg);
        int32_t pa[VS_ENS_MAX_ROWS] = {0}, pa_sum = 0;
        if (ens)
            for (int k = 0; k < 2; k++) pa_sum += pa[k] = vs_draft_ens_get_stats(d)->prefix_rows[k];
        pr.reuse_prefix = true;
        VT_REQUIRE(vs_spec_generate(e->s, d, &A, &pr, NULL, NULL, &log, &err) == VS_OK, "%s", err.msg);
        VT_CHECK(log.n_prefilled == 0, "%s: A again: prefilled %d rows", names[di], log.n_prefilled);
        r0 = ROWS_EVAL(d);
        VT_REQUIRE(vs_spec_generate(e->s, d, &B, &pr, NULL, NULL, &log, &err) == VS_OK, "%s", err.msg);
        const int64_t reuse_rows = ROWS_EVAL(d) - r0;
        VT_CHECK(st_same_tokens(&log, &ref, true), "%s: B after A with reuse (images kept) = fresh B",
                 names[di]);
        VT_CHECK(log.n_prefilled <= rB - 1 - rA, "%s: B after A prefilled %d rows (new: %d)", names[di],
                 log.n_prefilled, rB - 1 - rA);
        if (!ens)
            VT_CHECK(vs_draft_lm_prefilled(d) <= fresh_prefill - (di == 0 ? rA : n0 + n1 + 1),
                     "%s: the drafter prefilled %d rows after A (fresh: %d)", names[di],
                     vs_draft_lm_prefilled(d), fresh_prefill);
        else
            VT_CHECK(reuse_rows <= fresh_rows - pa_sum,
                     "%s: the drafter evaluated %lld rows for B after A (fresh %lld, A's prefixes %d)",
                     names[di], (long long)reuse_rows, (long long)fresh_rows, pa_sum);
        /* image 0 under another identity (9, then 0 = unknown): not reused, same output */
        const int32_t ids[2] = {9, 0};
        for (int k = 0; k < 2; k++) {
            VT_REQUIRE(vs_spec_generate(e->s, d, &A, &pr, NULL, NULL, &log, &err) == VS_OK, "%s", err.msg);
            seg[1].image_id = ids[k];
            r0 = ROWS_EVAL(d);
            VT_REQUIRE(vs_spec_generate(e->s, d, &B, &pr, NULL, NULL, &log, &err) == VS_OK, "%s", err.msg);
            const int64_t other_rows = ROWS_EVAL(d) - r0;
            VT_CHECK(st_same_tokens(&log, &ref, true), "%s: image_id %d: same output", names[di], ids[k]);
            VT_CHECK(log.n_prefilled == rB - 1 - n0, "%s: image_id %d: prefilled %d rows (expected %d)",
                     names[di], ids[k], log.n_prefilled, rB - 1 - n0);
            if (di == 0)
                VT_CHECK(vs_draft_lm_prefilled(d) == fresh_prefill - n0,
                         "%s: image_id %d: the drafter prefilled %d rows (expected %d)", names[di], ids[k],
                         vs_draft_lm_prefilled(d), fresh_prefill - n0);
            if (ens)
                VT_CHECK(other_rows > reuse_rows, "%s: image_id %d: the M row evaluates image 0 again",
                         names[di], ids[k]);
            seg[1].image_id = 7;
        }
#undef ROWS_EVAL
        (void)pa;
    }
    vs_spec_log_free(&ref);
    vs_spec_log_free(&log);
    for (int di = 0; di < 3; di++) vs_spec_drafter_free(ds[di]);
}

static void test_multimodal_pairs(tally *t) {
    vs_error err = {0};
    vs_lm_random_opts to = ropts(64, 2, 4, 2, 128, 96, VS_TYPE_F32, 0.15f, true, 61);
    vs_lm_random_opts dopt = ropts(32, 1, 2, 2, 64, 96, VS_TYPE_F32, 0.15f, true, 62);
    vs_lm_random_opts dopt2 = ropts(64, 1, 4, 2, 128, 96, VS_TYPE_F32, 0.15f, true, 61); /* target's seed */
    vs_lm *target = make_model(&to, "mm-target.gguf");
    vs_lm *draft = make_model(&dopt, "mm-draft.gguf");
    vs_lm *draft2 = make_model(&dopt2, "mm-draft2.gguf");
    vs_vision_config tc, dc, dc2;
    tiny_vision(&tc, 64, true);
    tiny_vision(&dc, 32, false);
    tiny_vision(&dc2, 64, false);
    VT_REQUIRE(vs_mmproj_write_random(st_tmp_path("mm-target-mmproj.gguf"), &tc, VS_TYPE_F32, 5, &err) ==
                   VS_OK,
               "%s", err.msg);
    vs_mmproj *tm = vs_mmproj_open(st_tmp_path("mm-target-mmproj.gguf"), &err);
    VT_REQUIRE(tm, "%s", err.msg);
    const vs_vision_tower *tower = vs_mmproj_tower(tm);
    VT_REQUIRE(tower, "target mmproj has a tower");
    vs_vision_weights dw;
    VT_REQUIRE(vs_vision_weights_alloc(&dw, &dc, &err) == VS_OK, "%s", err.msg);
    vs_vision_weights_randomize(&dw, &dc, 6);
    vs_mmproj_write_opts wo = {.mat_type = VS_TYPE_F32, .tower_hash = vs_vision_tower_hash(tower)};
    VT_REQUIRE(vs_mmproj_write(st_tmp_path("mm-draft-mmproj.gguf"), &dc, &dw, &wo, &err) == VS_OK, "%s",
               err.msg);
    vs_vision_weights_free(&dw, &dc);
    VT_REQUIRE(vs_vision_weights_alloc(&dw, &dc2, &err) == VS_OK, "%s", err.msg);
    vs_vision_weights_randomize(&dw, &dc2, 7);
    VT_REQUIRE(vs_mmproj_write(st_tmp_path("mm-draft2-mmproj.gguf"), &dc2, &dw, &wo, &err) == VS_OK, "%s",
               err.msg);
    vs_vision_weights_free(&dw, &dc2);
    vs_mmproj *dm = vs_mmproj_open(st_tmp_path("mm-draft-mmproj.gguf"), &err);
    VT_REQUIRE(dm, "%s", err.msg);
    vs_mmproj *dm2 = vs_mmproj_open(st_tmp_path("mm-draft2-mmproj.gguf"), &err);
    VT_REQUIRE(dm2, "%s", err.msg);

    /* three images: ViT features once each, the target's rows from its projector */
    enum { NI = 3, NP = 6 };
    vs_vision_features feat[NI];
    const vs_vision_features *fp[NI];
    float *trows[NI];
    int64_t n_trows[NI];
    const int S = tc.image_size;
    float *pix = malloc(sizeof(float) * 3 * S * S);
    vs_rng r;
    vs_rng_seed(&r, 9);
    for (int i = 0; i < NI; i++) {
        for (int j = 0; j < 3 * S * S; j++) pix[j] = (float)(vs_rng_uniform(&r) * 2 - 1);
        VT_REQUIRE(vs_vision_encode(tower, NULL, pix, NULL, &feat[i], &err) == VS_OK, "%s", err.msg);
        VT_REQUIRE(vs_vision_embed(vs_mmproj_projector(tm), NULL, &feat[i], 1, &trows[i], &n_trows[i],
                                   &err) == VS_OK,
                   "%s", err.msg);
        fp[i] = &feat[i];
    }
    free(pix);
    /* prompts: text, image, text [, image, text] */
    struct {
        int32_t tok[64];
        vs_spec_segment seg[5];
        vs_spec_prompt p;
    } mp[NP];
    const vs_spec_prompt *pp[NP];
    int rows_m[NP], rows_t[NP];
    for (int i = 0; i < NP; i++) {
        vs_rng_seed(&r, 300 + i);
        int n_img = 1 + i % 2, at = 0, ns = 0, nt = 0;
        memset(&mp[i], 0, sizeof(mp[i]));
        for (int k = 0; k <= n_img; k++) {
            int len = 1 + (int)vs_rng_below(&r, 6) + (k == n_img ? 3 : 0);
            for (int j = 0; j < len; j++)
                mp[i].tok[at + j] = at + j == 0 ? 1 : 3 + (int32_t)vs_rng_below(&r, 93);
            mp[i].seg[ns++] = (vs_spec_segment){.kind = VS_SPEC_SEG_TEXT, .n = len, .tokens = mp[i].tok + at};
            at += len, nt += len;
            if (k < n_img) {
                int im = (i + k) % NI;
                mp[i].seg[ns++] = (vs_spec_segment){
                    .kind = VS_SPEC_SEG_IMAGE, .n = (int32_t)n_trows[im], .embd = trows[im], .image = im};
            }
        }
        mp[i].p.seg = mp[i].seg, mp[i].p.n_seg = ns, mp[i].p.images = fp, mp[i].p.n_images = NI;
        pp[i] = &mp[i].p;
        rows_m[i] = nt + n_img * (int)n_trows[0]; /* the drafter's projector gives as many rows */
        rows_t[i] = nt;                           /* filled below with the newline token count */
    }
    st_engine e = st_make_engine(target, 256);
    vs_spec_drafter *dm_d = make_drafter(draft, target, VS_DRAFT_LM_MM, vs_mmproj_projector(dm), tower, 0);
    vs_spec_drafter *dt_d = make_drafter(draft, target, VS_DRAFT_LM_TEXT, NULL, NULL, 0);
    /* T mode rows: count the newline tokens the drafter uses via a tokenizer */
    vs_tokenizer *tok = vs_tokenizer_from_gguf(vs_lm_gguf(draft), &err);
    int64_t n_nl = 0;
    int32_t nl[8];
    VT_REQUIRE(vs_tokenize(tok, "\n", 1, false, false, nl, 8, &n_nl, &err) == VS_OK, "%s", err.msg);
    size_t plen = 0;
    const char *piece = n_nl > 1 ? vs_tokenizer_token_piece(tok, nl[0], &plen) : NULL;
    if (piece && plen == 1 && piece[0] == ' ') n_nl--;
    VT_CHECK(n_nl >= 1, "\"\\n\" has tokens");
    for (int i = 0; i < NP; i++) rows_t[i] += (int)n_nl * (1 + i % 2);
    vs_tokenizer_free(tok);
    tally before = *t;
    check_pair("multimodal M", &e, dm_d, pp, NP, rows_m, 24, t, 1, NULL);
    check_pair("multimodal T", &e, dt_d, pp, NP, rows_t, 24, t, 1, NULL);
    int first_m[NP * 4], first_t[NP * 4];
    for (int width = 1; width <= 3; width++) {
        vs_spec_drafter *dm2_d =
            make_drafter_w(draft2, target, VS_DRAFT_LM_MM, vs_mmproj_projector(dm2), tower, 0, width);
        vs_spec_drafter *dt2_d = make_drafter_w(draft2, target, VS_DRAFT_LM_TEXT, NULL, NULL, 0, width);
        char wm[96], wt[96];
        snprintf(wm, sizeof(wm), "multimodal M (same-seed 1-layer drafter), width %d", width);
        snprintf(wt, sizeof(wt), "multimodal T (same-seed 1-layer drafter), width %d", width);
        check_pair(wm, &e, dm2_d, pp, NP, rows_m, 24, t, width, first_m);
        check_pair(wt, &e, dt2_d, pp, NP, rows_t, 24, t, width, first_t);
        vs_spec_drafter_free(dm2_d);
        vs_spec_drafter_free(dt2_d);
    }
    printf("  %-36s %3d combos, acceptance %.3f\n", "multimodal pairs (M and T, 2 drafters)",
           t->combos - before.combos,
           (double)(t->accepted - before.accepted) / (double)VS_MAX(t->drafted - before.drafted, 1));

    /* a self-drafting multimodal pair: the target drafting for itself in M mode with its own projector
     * accepts everything (same rows as the target sees) */
    vs_spec_drafter *self = make_drafter(target, target, VS_DRAFT_LM_MM, vs_mmproj_projector(tm), tower, 0);
    vs_spec_log log;
    vs_spec_log_init(&log);
    run(&e, self, pp[1], 4, 20, true, &log);
    vs_spec_stats s;
    vs_spec_stats_compute(&log, NULL, &s);
    VT_CHECK(s.tau == 5, "M-mode self drafting: tau %g", s.tau);
    vs_spec_log_free(&log);

    /* M mode without features in the request: a clear error */
    vs_spec_segment nofeat[2] = {
        {.kind = VS_SPEC_SEG_TEXT, .n = 2, .tokens = mp[0].tok},
        {.kind = VS_SPEC_SEG_IMAGE, .n = (int32_t)n_trows[0], .embd = trows[0], .image = -1}};
    vs_spec_segment nf3[3] = {nofeat[0], nofeat[1], {.kind = VS_SPEC_SEG_TEXT, .n = 2, .tokens = mp[0].tok}};
    vs_spec_prompt np = {.seg = nf3, .n_seg = 3};
    vs_spec_params pr = vs_spec_params_default();
    pr.gamma = 3, pr.n_predict = 5, pr.sampling.temperature = 0;
    VT_CHECK(vs_spec_generate(e.s, dm_d, &np, &pr, NULL, NULL, &log, &err) == VS_ERR_INVALID &&
                 strstr(err.msg, "features"),
             "M mode without features: %s", err.msg);
    /* a drafter projector of the wrong width */
    vs_draft_lm_opts bad = {.mode = VS_DRAFT_LM_MM, .proj = vs_mmproj_projector(tm)};
    VT_CHECK(!vs_draft_lm_new(draft, target, &bad, &err) && strstr(err.msg, "wide"), "width check: %s",
             err.msg);
    bad.proj = NULL;
    VT_CHECK(!vs_draft_lm_new(draft, target, &bad, &err) && strstr(err.msg, "projector"), "no projector: %s",
             err.msg);
    vs_spec_log_free(&log);
    test_multimodal_reuse(&e, draft, target, vs_mmproj_projector(dm), tower, fp, trows, n_trows);

    vs_spec_drafter_free(self);
    vs_spec_drafter_free(dm_d);
    vs_spec_drafter_free(dt_d);
    st_free_engine(&e);
    for (int i = 0; i < NI; i++) {
        vs_free(trows[i]);
        vs_vision_features_free(&feat[i]);
    }
    vs_mmproj_free(dm);
    vs_mmproj_free(dm2);
    vs_mmproj_free(tm);
    vs_lm_free(draft2);
    vs_lm_free(draft);
    vs_lm_free(target);
}

/* ------------------------------------------------------------------------------------------------
 * bad input and edges */

/* A drafter made by the test: proposes what `mode` says. */
typedef struct test_drafter {
    vs_spec_drafter hdr;
    int mode; /* see TD_MODES */
    int calls;
} test_drafter;

static vs_status td_begin(vs_spec_drafter *d, const vs_spec_begin_info *r, vs_error *e) {
    (void)d, (void)r, (void)e;
    return VS_OK;
}
static vs_status td_propose(vs_spec_drafter *base, const vs_spec_limits *lim, vs_spec_proposal *out,
                            vs_error *e) {
    test_drafter *d = (test_drafter *)base;
    (void)e;
    d->calls++;
    out->n = VS_MIN(3, lim->max_nodes);
    for (int i = 0; i < out->n; i++) {
        out->token[i] = 5 + i;
        out->parent[i] = i - 1;
        out->depth[i] = i + 1;
        out->q_row[i] = -1;
    }
    if (out->n < 3) return VS_OK;
    switch (d->mode) {
    case 0: out->parent[0] = 1; break; /* child before its parent */
    case 1: out->token[1] = base->n_vocab; break;
    case 2:
        memset(out->q, 0, sizeof(float) * (size_t)out->n_vocab);
        out->q[0] = 1;
        out->q_row[0] = 0;
        break;
    case 3: out->depth[1] = 5; break;               /* wrong depth (chain) */
    case 4: out->n = lim->max_nodes + 1; break;     /* too many nodes (arrays untouched past n) */
    case 5: out->parent[2] = -1; break;             /* tree: node 2 at depth 3 under the root */
    case 6: out->parent[1] = -2; break;             /* parent out of range */
    case 7:                                         /* siblings 0 and 2 drawn from different q rows */
        out->parent[2] = -1, out->depth[2] = 1;
        for (int i = 0; i < 2; i++) {
            memset(out->q + (size_t)i * out->n_vocab, 0, sizeof(float) * (size_t)out->n_vocab);
            out->q[(size_t)i * out->n_vocab + 5 + 2 * i] = 1;
        }
        out->q_row[0] = 0, out->q_row[2] = 1, out->q_row[1] = -1;
        break;
    case 8: out->parent[2] = -1, out->depth[2] = 1, out->token[2] = 5; break; /* repeated sibling token */
    case 9: out->token[0] = -3; break;
    case 10: out->parent[2] = -1, out->depth[2] = 1; break; /* a valid tree: nodes 0 and 2 siblings */
    }
    return VS_OK;
}
static vs_status td_commit(vs_spec_drafter *d, const vs_spec_commit *c, vs_error *e) {
    (void)d, (void)c, (void)e;
    return VS_OK;
}
static const vs_spec_drafter_vt td_vt = {"test-drafter", td_begin, NULL, td_propose, td_commit, NULL, NULL};

static void test_bad_input(void) {
    vs_error err = {0};
    vs_lm_random_opts o96 = ropts(32, 1, 2, 2, 64, 96, VS_TYPE_F32, 0.3f, true, 71);
    vs_lm_random_opts o64 = ropts(32, 1, 2, 2, 64, 64, VS_TYPE_F32, 0.3f, true, 72);
    vs_lm *target = make_model(&o96, "bad-target.gguf");
    vs_lm *other = make_model(&o64, "bad-other-vocab.gguf");

    /* another vocabulary size: refused at creation, with both names */
    VT_CHECK(!vs_draft_lm_new(other, target, NULL, &err) && strstr(err.msg, "bad-other-vocab") &&
                 strstr(err.msg, "96"),
             "vocabulary size: %s", err.msg);
    /* same size, different tokenizer (LLaMA-2 vs a synthetic 32000-token vocabulary) */
    const char *dir = vt_shared_dir();
    if (dir) {
        char p[512];
        snprintf(p, sizeof(p), "%s/parity/llama-d64-l2-gqa-tied-f32.gguf", dir);
        vs_lm *llama = load_model(p);
        vs_lm_random_opts os = ropts(32, 1, 2, 2, 64, 32000, VS_TYPE_F32, 0.02f, true, 73);
        vs_lm *synth = make_model(&os, "synthetic-32000.gguf");
        VT_CHECK(!vs_draft_lm_new(synth, llama, NULL, &err) && strstr(err.msg, "tokenizers differ"),
                 "tokenizer mismatch: %s", err.msg);
        printf("  tokenizer mismatch: %s\n", err.msg);
        vs_lm_free(synth);
        vs_lm_free(llama);
    }

    st_engine e = st_make_engine(target, 64);
    text_prompt tp;
    make_text_prompt(&tp, 10, 2, 96, 3);
    vs_spec_log log, base;
    vs_spec_log_init(&log);
    vs_spec_log_init(&base);
    vs_spec_params pr = vs_spec_params_default();
    pr.sampling.temperature = 0;
    pr.n_predict = 8;

    /* engine-level vocabulary check and malformed proposals from a custom drafter */
    test_drafter td = {.hdr = {.vt = &td_vt, .n_vocab = 64}};
    pr.gamma = 3;
    VT_CHECK(vs_spec_generate(e.s, &td.hdr, &tp.p, &pr, NULL, NULL, &log, &err) == VS_ERR_INVALID &&
                 strstr(err.msg, "vocabulary"),
             "engine vocabulary check: %s", err.msg);
    td.hdr.n_vocab = 96;
    const char *what[10] = {"child before parent", "token range",     "q = 0",          "depth",
                            "too many nodes",      "tree depth",      "parent range",   "sibling q rows",
                            "sibling repeat",      "negative token"};
    for (int m = 0; m < 10; m++) {
        td.mode = m;
        pr.sampling.temperature = m == 2 || m == 7 ? 1.0f : 0.0f; /* q is only read when sampling */
        vs_status st = vs_spec_generate(e.s, &td.hdr, &tp.p, &pr, NULL, NULL, &log, &err);
        VT_CHECK(st == VS_ERR_INVALID, "%s: got %s (%s)", what[m], vs_status_name(st), err.msg);
        printf("  bad proposal (%s): %s\n", what[m], err.msg);
        VT_CHECK(vs_kv_seq_len(vs_spec_kv(e.s), 0) == 9, "%s: the failed block's rows are dropped (%d cached)",
                 what[m], vs_kv_seq_len(vs_spec_kv(e.s), 0));
    }
    /* a valid hand-made tree (two siblings at depth 1) is verified: target-only output */
    td.mode = 10;
    pr.sampling.temperature = 0;
    pr.ignore_eos = true;
    VT_CHECK(vs_spec_generate(e.s, &td.hdr, &tp.p, &pr, NULL, NULL, &log, &err) == VS_OK, "tree: %s",
             err.msg);
    run(&e, NULL, &tp.p, 0, 8, true, &base);
    VT_CHECK(st_same_tokens(&log, &base, true), "a hand-made tree keeps the output");
    VT_CHECK(log.blocks[0].n_draft == 3 && log.blocks[0].n_depth == 2, "tree block: %d nodes, depth %d",
             log.blocks[0].n_draft, log.blocks[0].n_depth);
    /* gamma > 0 without a drafter; bad gamma; bad limit; prompts */
    VT_CHECK(vs_spec_generate(e.s, NULL, &tp.p, &pr, NULL, NULL, &log, &err) == VS_ERR_INVALID, "no drafter");
    pr.gamma = VS_SPEC_MAX_GAMMA + 1;
    VT_CHECK(vs_spec_generate(e.s, &td.hdr, &tp.p, &pr, NULL, NULL, &log, &err) == VS_ERR_INVALID,
             "gamma range");
    pr.gamma = -1;
    VT_CHECK(vs_spec_generate(e.s, &td.hdr, &tp.p, &pr, NULL, NULL, &log, &err) == VS_ERR_INVALID,
             "gamma < 0");
    pr.gamma = 0, pr.n_predict = -1;
    VT_CHECK(vs_spec_generate(e.s, NULL, &tp.p, &pr, NULL, NULL, &log, &err) == VS_ERR_INVALID &&
                 strstr(err.msg, "token limit -1"),
             "n_predict -1: %s", err.msg);
    pr.n_predict = 8;
    vs_spec_prompt empty = {0};
    VT_CHECK(vs_spec_generate(e.s, NULL, &empty, &pr, NULL, NULL, &log, &err) == VS_ERR_INVALID,
             "empty prompt");
    int32_t badtok[2] = {1, 96};
    vs_spec_segment bs = {.kind = VS_SPEC_SEG_TEXT, .n = 2, .tokens = badtok};
    vs_spec_prompt bp = {.seg = &bs, .n_seg = 1};
    VT_CHECK(vs_spec_generate(e.s, NULL, &bp, &pr, NULL, NULL, &log, &err) == VS_ERR_INVALID &&
                 strstr(err.msg, "vocabulary"),
             "token out of range: %s", err.msg);
    text_prompt longp;
    make_text_prompt(&longp, 65, 1, 96, 4);
    VT_CHECK(vs_spec_generate(e.s, NULL, &longp.p, &pr, NULL, NULL, &log, &err) == VS_ERR_RANGE,
             "prompt > context");

    /* gamma = 0 with a drafter: plain decoding, the drafter is not used */
    vs_spec_drafter *d = make_drafter(target, target, VS_DRAFT_LM_TEXT, NULL, NULL, 0);
    run(&e, d, &tp.p, 0, 20, true, &log);
    run(&e, NULL, &tp.p, 0, 20, true, &base);
    VT_CHECK(st_same_tokens(&log, &base, true) && vs_draft_lm_rows_evaluated(d) == 0,
             "gamma 0 ignores the drafter");
    VT_CHECK(log.n_blocks == 20, "gamma 0: one verify pass per token (%d)", log.n_blocks);

    /* near the context end (64 rows): drafts shrink so nothing goes past the cache; the output equals
     * target-only up to the context stop */
    make_text_prompt(&tp, 40, 1, 96, 5);
    run(&e, NULL, &tp.p, 0, 100, true, &base);
    VT_CHECK(base.stop == VS_SPEC_STOP_CONTEXT && base.n_tokens == 64 - 40 + 1,
             "context stop after %d tokens (%s)", base.n_tokens, vs_spec_stop_name(base.stop));
    for (int gi = 0; gi < 4; gi++) {
        run(&e, d, &tp.p, GAMMAS[gi], 100, true, &log);
        VT_CHECK(st_same_tokens(&log, &base, true), "gamma %d near the context end", GAMMAS[gi]);
        int L = 40 - 1; /* cache length before each block */
        for (int b = 0; b < log.n_blocks; b++) {
            VT_CHECK(L + 1 + log.blocks[b].n_draft <= 64, "block %d verifies past the cache", b);
            L += log.blocks[b].n_emit;
        }
        VT_CHECK(vs_kv_seq_len(vs_spec_kv(e.s), 0) <= 64, "target cache within its size");
    }
    vs_spec_drafter_free(d);
    /* a draft cache smaller than the target's: the drafter shrinks, then proposes nothing */
    d = make_drafter(target, target, VS_DRAFT_LM_TEXT, NULL, NULL, 48);
    for (int gi = 0; gi < 4; gi++) {
        run(&e, d, &tp.p, GAMMAS[gi], 100, true, &log);
        VT_CHECK(st_same_tokens(&log, &base, true), "gamma %d with a small draft cache", GAMMAS[gi]);
        VT_CHECK(vs_kv_seq_len(vs_draft_lm_kv(d), 0) <= 48, "draft cache within its size");
        VT_CHECK(log.blocks[log.n_blocks - 1].n_draft == 0, "a full draft cache proposes nothing");
    }
    vs_spec_drafter_free(d);
    /* a prompt that does not fit the draft cache: a clear error */
    d = make_drafter(target, target, VS_DRAFT_LM_TEXT, NULL, NULL, 16);
    pr.gamma = 3;
    VT_CHECK(vs_spec_generate(e.s, d, &tp.p, &pr, NULL, NULL, &log, &err) == VS_ERR_RANGE &&
                 strstr(err.msg, "draft cache"),
             "prompt > draft cache: %s", err.msg);
    vs_spec_drafter_free(d);

    /* the token limit: the chain shrinks to the tokens left, the count is exact */
    d = make_drafter(target, target, VS_DRAFT_LM_TEXT, NULL, NULL, 0);
    make_text_prompt(&tp, 6, 1, 96, 6);
    /* limit 0 (generate -n 0): the prompt is prefilled up to its pending last row, no block runs, no
     * token is made; with and without a drafter */
    for (int g = 0; g <= 8; g += 8) {
        vs_spec_params zp = vs_spec_params_default();
        zp.gamma = g, zp.n_predict = 0, zp.sampling.temperature = 0;
        vs_status zs = vs_spec_generate(e.s, g ? d : NULL, &tp.p, &zp, NULL, NULL, &log, &err);
        VT_CHECK(zs == VS_OK && log.n_tokens == 0 && log.n_blocks == 0 && log.stop == VS_SPEC_STOP_LIMIT &&
                     vs_kv_seq_len(vs_spec_kv(e.s), 0) == 5,
                 "limit 0, gamma %d: %s (%s; %d tokens, %d blocks, stop %s, %d rows cached)", g,
                 vs_status_name(zs), err.msg, log.n_tokens, log.n_blocks, vs_spec_stop_name(log.stop),
                 vs_kv_seq_len(vs_spec_kv(e.s), 0));
    }
    for (int n = 1; n <= 10; n++) {
        run(&e, d, &tp.p, 8, n, true, &log);
        VT_CHECK(log.n_tokens == n && log.stop == VS_SPEC_STOP_LIMIT, "limit %d: %d tokens", n, log.n_tokens);
    }
    vs_spec_drafter_free(d);
    st_free_engine(&e);
    vs_spec_log_free(&log);
    vs_spec_log_free(&base);
    vs_lm_free(other);
    vs_lm_free(target);
}

/* EOS inside a block: a V = 16 model emits EOS (id 2) under greedy decoding for some prompt; with a
 * self drafter (everything accepted) the EOS falls inside a block: output = target-only output, which
 * stops at the EOS (inclusive), and the drafts after it are discarded. */
static void test_eos_mid_block(void) {
    vs_lm_random_opts o = ropts(32, 1, 2, 2, 64, 16, VS_TYPE_F32, 0.5f, true, 81);
    vs_lm *target = make_model(&o, "eos16.gguf");
    st_engine e = st_make_engine(target, 128);
    vs_spec_drafter *d = make_drafter(target, target, VS_DRAFT_LM_TEXT, NULL, NULL, 0);
    vs_spec_drafter *other = NULL;
    vs_lm_random_opts od = ropts(32, 1, 2, 2, 64, 16, VS_TYPE_F32, 0.5f, true, 82);
    vs_lm *dl = make_model(&od, "eos16-draft.gguf");
    other = make_drafter(dl, target, VS_DRAFT_LM_TEXT, NULL, NULL, 0);
    vs_spec_log log, base;
    vs_spec_log_init(&log);
    vs_spec_log_init(&base);
    int found = 0, mid = 0;
    for (int seed = 0; seed < 400 && found < 12; seed++) {
        text_prompt tp;
        make_text_prompt(&tp, 4 + seed % 7, 1, 16, 5000 + seed);
        run(&e, NULL, &tp.p, 0, 24, false, &base);
        if (base.stop != VS_SPEC_STOP_EOS || base.n_tokens < 2) continue;
        found++;
        VT_CHECK(base.tokens[base.n_tokens - 1] == 2, "target-only output ends with EOS");
        for (int gi = 0; gi < 4; gi++) {
            run(&e, d, &tp.p, GAMMAS[gi], 24, false, &log);
            VT_CHECK(st_same_tokens(&log, &base, true), "EOS: self drafter gamma %d", GAMMAS[gi]);
            const vs_spec_block *lb = &log.blocks[log.n_blocks - 1];
            if (lb->n_accept < lb->n_draft) mid++;
            run(&e, other, &tp.p, GAMMAS[gi], 24, false, &log);
            VT_CHECK(st_same_tokens(&log, &base, true), "EOS: other drafter gamma %d", GAMMAS[gi]);
        }
    }
    printf("  EOS: %d prompts end at EOS; %d self-drafted runs stopped inside a block\n", found, mid);
    VT_CHECK(found >= 3, "found only %d prompts whose greedy output reaches EOS", found);
    VT_CHECK(mid >= 1, "no run stopped at an EOS inside a block");
    vs_spec_log_free(&log);
    vs_spec_log_free(&base);
    vs_spec_drafter_free(other);
    vs_spec_drafter_free(d);
    st_free_engine(&e);
    vs_lm_free(dl);
    vs_lm_free(target);
}

/* The debug reject drafter: nothing accepted (a draft equal to the target's argmax would be the draft's
 * least likely token: possible but rare), output unchanged, every block emits one token. */
static void test_reject_drafter(void) {
    vs_error err = {0};
    vs_lm_random_opts o = ropts(64, 2, 4, 2, 128, 96, VS_TYPE_F32, 0.15f, true, 91);
    vs_lm *target = make_model(&o, "rej.gguf");
    st_engine e = st_make_engine(target, 256);
    vs_draft_lm_opts dopt = {.debug_reject = true};
    vs_spec_drafter *d = vs_draft_lm_new(target, target, &dopt, &err);
    VT_REQUIRE(d, "%s", err.msg);
    text_prompt tp;
    make_text_prompt(&tp, 9, 1, 96, 8);
    vs_spec_log log, base;
    vs_spec_log_init(&log);
    vs_spec_log_init(&base);
    run(&e, NULL, &tp.p, 0, 30, true, &base);
    run(&e, d, &tp.p, 5, 30, true, &log);
    vs_spec_stats s;
    vs_spec_stats_compute(&log, &base, &s);
    VT_CHECK(st_same_tokens(&log, &base, true), "reject drafter keeps the output");
    VT_CHECK(s.n_accepted == 0 && s.tau == 1, "reject drafter: %lld accepted, tau %g",
             (long long)s.n_accepted, s.tau);
    vs_spec_log_free(&log);
    vs_spec_log_free(&base);
    vs_spec_drafter_free(d);
    st_free_engine(&e);
    vs_lm_free(target);
}

/* Prefix reuse across requests gives the same output and prefills only the new rows. */
static void test_prefix_reuse(void) {
    vs_lm_random_opts o = ropts(64, 2, 4, 2, 128, 96, VS_TYPE_F32, 0.15f, true, 95);
    vs_lm *target = make_model(&o, "reuse.gguf");
    st_engine e = st_make_engine(target, 256);
    vs_spec_drafter *d = make_drafter(target, target, VS_DRAFT_LM_TEXT, NULL, NULL, 0);
    text_prompt a, b;
    make_text_prompt(&a, 20, 1, 96, 1);
    b = a;
    b.seg[0].tokens = b.tok;
    b.p.seg = b.seg;
    b.tok[15] = (b.tok[15] + 1) % 96; /* shares 15 rows */
    vs_spec_log log, ref;
    vs_spec_log_init(&log);
    vs_spec_log_init(&ref);
    vs_error err = {0};
    vs_spec_params pr = vs_spec_params_default();
    pr.gamma = 3, pr.n_predict = 12, pr.sampling.temperature = 0, pr.ignore_eos = true;
    run(&e, d, &b.p, 3, 12, true, &ref);
    pr.reuse_prefix = true;
    VT_REQUIRE(vs_spec_generate(e.s, d, &a.p, &pr, NULL, NULL, &log, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_spec_generate(e.s, d, &b.p, &pr, NULL, NULL, &log, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(st_same_tokens(&log, &ref, true), "reuse gives the same output");
    VT_CHECK(log.n_prefilled == 19 - 15, "prefilled %d rows after reuse", log.n_prefilled);
    vs_spec_log_free(&log);
    vs_spec_log_free(&ref);
    vs_spec_drafter_free(d);
    st_free_engine(&e);
    vs_lm_free(target);
}

/* ------------------------------------------------------------------------------------------------
 * target features for feature-level drafters: a drafter that wants the last hidden state and layer 0's
 * output records what target_rows delivers (and drafts a fixed token); positions must be contiguous
 * and cover every row the target cached, the values must equal a direct forward of the sequence */

typedef struct feat_drafter {
    vs_spec_drafter hdr;
    int E;
    int n_rows;        /* rows received */
    float *hid, *lay0; /* [cap][E] */
    int32_t tok[256];
    bool contiguous;
    /* tree mode: knows the target-only output (truth) and proposes two branches per block, a wrong one
     * first and the right one second, so the accepted path is never the first nodes of the batch */
    const int32_t *truth;
    int n_truth, pos;
} feat_drafter;

static vs_status fd_rows(vs_spec_drafter *base, const vs_spec_features *f, vs_error *e) {
    feat_drafter *d = (feat_drafter *)base;
    (void)e;
    if (f->pos0 != d->n_rows || f->n_layer_out != 1 || f->n_embd != d->E) d->contiguous = false;
    for (int i = 0; i < f->n && d->n_rows < 256; i++, d->n_rows++) {
        memcpy(d->hid + (size_t)d->n_rows * d->E, f->hidden + (size_t)i * d->E, sizeof(float) * d->E);
        memcpy(d->lay0 + (size_t)d->n_rows * d->E, f->layer_hidden[0] + (size_t)i * d->E,
               sizeof(float) * d->E);
        d->tok[d->n_rows] = f->tokens[i];
    }
    return VS_OK;
}
static vs_status fd_propose(vs_spec_drafter *base, const vs_spec_limits *lim, vs_spec_proposal *out,
                            vs_error *e) {
    feat_drafter *d = (feat_drafter *)base;
    (void)e;
    if (!d->truth) {
        out->n = lim->max_depth;
        for (int i = 0; i < out->n; i++)
            out->token[i] = 7, out->parent[i] = i - 1, out->depth[i] = i + 1, out->q_row[i] = -1;
        return VS_OK;
    }
    const int k = VS_MIN(VS_MIN(lim->max_depth, lim->max_nodes / 2), d->n_truth - d->pos);
    for (int j = 0; j < k; j++)
        for (int b = 0; b < 2; b++) {
            const int n = 2 * j + b, t = d->truth[d->pos + j];
            out->token[n] = b == 0 ? (t + 1) % base->n_vocab : t;
            out->parent[n] = j == 0 ? -1 : n - 2;
            out->depth[n] = j + 1;
            out->q_row[n] = -1;
        }
    out->n = 2 * VS_MAX(k, 0);
    return VS_OK;
}
static vs_status fd_commit(vs_spec_drafter *base, const vs_spec_commit *c, vs_error *e) {
    feat_drafter *d = (feat_drafter *)base;
    (void)e;
    d->pos += c->n_accepted + (c->next >= 0);
    return VS_OK;
}
static const vs_spec_drafter_vt fd_vt = {"feature-drafter", td_begin, fd_rows, fd_propose,
                                         fd_commit,         NULL,     NULL};

static void test_features(void) {
    vs_error err = {0};
    vs_lm_random_opts o = ropts(64, 2, 4, 2, 128, 96, VS_TYPE_F32, 0.15f, true, 121);
    vs_lm *lm = make_model(&o, "feat.gguf");
    st_engine e = st_make_engine(lm, 128);
    static const int layer0[1] = {0};
    feat_drafter fd = {
        .hdr = {.vt = &fd_vt, .n_vocab = 96, .want_hidden = true, .n_want_layers = 1, .want_layers = layer0},
        .E = 64,
        .contiguous = true};
    fd.hid = malloc(sizeof(float) * 256 * 64);
    fd.lay0 = malloc(sizeof(float) * 256 * 64);
    text_prompt tp;
    make_text_prompt(&tp, 11, 2, 96, 12);
    vs_spec_log log;
    vs_spec_log_init(&log);
    run(&e, &fd.hdr, &tp.p, 3, 20, true, &log);
    int cached = vs_kv_seq_len(vs_spec_kv(e.s), 0);
    VT_CHECK(fd.contiguous && fd.n_rows == cached, "features: contiguous %d, %d rows delivered, %d cached",
             fd.contiguous, fd.n_rows, cached);
    /* a direct forward of the same rows */
    int32_t seq[256];
    for (int i = 0; i < 11; i++) seq[i] = tp.tok[i];
    for (int i = 0; i < log.n_tokens; i++) seq[11 + i] = log.tokens[i];
    bool toks_ok = true;
    for (int i = 0; i < fd.n_rows; i++) toks_ok &= fd.tok[i] == seq[i];
    VT_CHECK(toks_ok, "feature rows carry the context's tokens");
    vs_kv *kv = vs_lm_kv_new(lm, 1, 128, VS_TYPE_F32, &err);
    vs_lm_row rows[256];
    memset(rows, 0, sizeof(rows));
    for (int i = 0; i < fd.n_rows; i++) rows[i].token = seq[i], rows[i].pos = i;
    float *h = malloc(sizeof(float) * 256 * 64), *h0 = malloc(sizeof(float) * 256 * 64);
    float *lh[1] = {h0};
    vs_lm_out out = {
        .hidden = h, .n_layer_out = 1, .layer_ids = layer0, .layer_hidden = lh, .attn_layer = -1};
    VT_REQUIRE(vs_lm_forward(lm, kv, NULL, rows, fd.n_rows, &out, &err) == VS_OK, "%s", err.msg);
    double dh = vt_max_abs_diff(h, fd.hid, (size_t)fd.n_rows * 64),
           d0 = vt_max_abs_diff(h0, fd.lay0, (size_t)fd.n_rows * 64);
    VT_CHECK(dh < 1e-4 && d0 < 1e-4, "delivered features vs a direct forward: %g (last), %g (layer 0)", dh,
             d0);
    /* features turn prefix reuse off: a second request still delivers every row */
    vs_spec_params pr = vs_spec_params_default();
    pr.gamma = 3, pr.n_predict = 10, pr.sampling.temperature = 0, pr.reuse_prefix = true;
    fd.n_rows = 0;
    VT_REQUIRE(vs_spec_generate(e.s, &fd.hdr, &tp.p, &pr, NULL, NULL, &log, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(fd.contiguous && fd.n_rows == vs_kv_seq_len(vs_spec_kv(e.s), 0), "features after reuse");

    /* trees: the accepted path is always the second branch; the delivered rows are gathered along it */
    vs_spec_log base;
    vs_spec_log_init(&base);
    run(&e, NULL, &tp.p, 0, 20, true, &base);
    fd.truth = base.tokens, fd.n_truth = base.n_tokens, fd.pos = 0, fd.n_rows = 0, fd.contiguous = true;
    fd.hdr.max_nodes = 8;
    run(&e, &fd.hdr, &tp.p, 4, 20, true, &log);
    VT_CHECK(st_same_tokens(&log, &base, true), "oracle tree drafter: target-only output");
    vs_spec_stats ts;
    vs_spec_stats_compute(&log, NULL, &ts);
    VT_CHECK(ts.tau == 5 && ts.nodes_per_block == 8 && ts.max_depth == 4, "oracle tree: tau %g, %g nodes",
             ts.tau, ts.nodes_per_block);
    cached = vs_kv_seq_len(vs_spec_kv(e.s), 0);
    VT_CHECK(fd.contiguous && fd.n_rows == cached,
             "tree features: contiguous %d, %d rows delivered, %d cached", fd.contiguous, fd.n_rows, cached);
    toks_ok = true;
    for (int i = 0; i < fd.n_rows; i++)
        toks_ok &= fd.tok[i] == seq[i];
    VT_CHECK(toks_ok, "tree feature rows carry the context's tokens");
    dh = vt_max_abs_diff(h, fd.hid, (size_t)fd.n_rows * 64),
    d0 = vt_max_abs_diff(h0, fd.lay0, (size_t)fd.n_rows * 64);
    VT_CHECK(dh < 1e-4 && d0 < 1e-4, "tree features vs a direct forward: %g (last), %g (layer 0)", dh, d0);
    vs_spec_log_free(&base);
    free(h), free(h0), free(fd.hid), free(fd.lay0);
    vs_kv_free(kv);
    vs_spec_log_free(&log);
    st_free_engine(&e);
    vs_lm_free(lm);
}

/* ------------------------------------------------------------------------------------------------
 * the CLI: vlmspec generate -md ... with text and with images (m and t drafting), --compare --json */

/* Whether a file holds exactly `text`. */
static bool file_is(const char *path, const char *text) {
    uint8_t *d = NULL;
    size_t n = 0;
    bool same = vs_read_file(path, &d, &n, NULL) == VS_OK && n == strlen(text) && !memcmp(d, text, n);
    vs_free(d);
    return same;
}

static void test_cli(void) {
    if (access(vt_cli(), X_OK) != 0) {
        printf("SKIP: CLI checks: %s not found (set VLMSPEC_BIN)\n", vt_cli());
        return;
    }
    vs_error err = {0};
    vs_lm_random_opts to = ropts(64, 2, 4, 2, 128, 96, VS_TYPE_Q8_0, 0.15f, true, 111);
    vs_lm_random_opts dq = ropts(64, 2, 4, 2, 128, 96, VS_TYPE_Q4_0, 0.15f, true, 111); /* the twin */
    vs_lm_random_opts dv = ropts(32, 1, 2, 2, 64, 64, VS_TYPE_F32, 0.15f, true, 112);   /* other vocab */
    VT_REQUIRE(vs_lm_write_random(&to, st_tmp_path("cli-t.gguf"), &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_lm_write_random(&dq, st_tmp_path("cli-d.gguf"), &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_lm_write_random(&dv, st_tmp_path("cli-v.gguf"), &err) == VS_OK, "%s", err.msg);
    vs_vision_config tc, dc;
    tiny_vision(&tc, 64, true);
    tiny_vision(&dc, 64, false);
    VT_REQUIRE(vs_mmproj_write_random(st_tmp_path("cli-t-mmproj.gguf"), &tc, VS_TYPE_F32, 3, &err) == VS_OK,
               "%s", err.msg);
    vs_mmproj *tm = vs_mmproj_open(st_tmp_path("cli-t-mmproj.gguf"), &err);
    VT_REQUIRE(tm, "%s", err.msg);
    vs_vision_weights dw;
    VT_REQUIRE(vs_vision_weights_alloc(&dw, &dc, &err) == VS_OK, "%s", err.msg);
    vs_vision_weights_randomize(&dw, &dc, 4);
    vs_mmproj_write_opts wo = {.mat_type = VS_TYPE_F32,
                               .tower_hash = vs_vision_tower_hash(vs_mmproj_tower(tm))};
    VT_REQUIRE(vs_mmproj_write(st_tmp_path("cli-d-mmproj.gguf"), &dc, &dw, &wo, &err) == VS_OK, "%s",
               err.msg);
    vs_vision_weights_free(&dw, &dc);
    vs_mmproj_free(tm);
    /* two small PPM images */
    for (int k = 0; k < 2; k++) {
        char name[32];
        snprintf(name, sizeof(name), "cli-img%d.ppm", k);
        FILE *f = fopen(st_tmp_path(name), "wb");
        VT_REQUIRE(f, "image file");
        fprintf(f, "P6\n20 17\n255\n");
        for (int i = 0; i < 20 * 17 * 3; i++) fputc((i * (7 + 5 * k)) % 251, f);
        fclose(f);
    }
    const char *out = st_tmp_path("cli-out.json");
    const char *T = st_tmp_path("cli-t.gguf"), *D = st_tmp_path("cli-d.gguf");
    char tm_path[512], dm_path[512], i0[512], i1[512];
    snprintf(tm_path, sizeof(tm_path), "%s", st_tmp_path("cli-t-mmproj.gguf"));
    snprintf(dm_path, sizeof(dm_path), "%s", st_tmp_path("cli-d-mmproj.gguf"));
    snprintf(i0, sizeof(i0), "%s", st_tmp_path("cli-img0.ppm"));
    snprintf(i1, sizeof(i1), "%s", st_tmp_path("cli-img1.ppm"));
    /* text */
    int rc =
        vt_run("%s generate --raw -m %s -md %s --draft 3 -p 'abc def' -n 20 --temp 0 --compare --json - > %s 2>&1",
               vt_cli(), T, D, out);
    VT_CHECK(rc == 0 && st_file_has(out, "\"identical\":true") && st_file_has(out, "\"tau\""),
             "CLI text run (rc %d)", rc);
    /* images, m and t drafting */
    const char *modes[2] = {"m", "t"};
    for (int m = 0; m < 2; m++) {
        rc = vt_run("%s generate --raw -m %s --mmproj %s -md %s %s %s --draft 4 --draft-mode %s "
                    "--image %s --image %s -p 'USER: <image>\nwhat <image> is it? ASSISTANT:' -n 16 --temp 0 "
                    "--compare --json - > %s 2>&1", /* t drafting reads no drafter projector */
                    vt_cli(), T, tm_path, D, m ? "" : "--mmproj-draft", m ? "" : dm_path, modes[m], i0, i1, out);
        VT_CHECK(rc == 0 && st_file_has(out, "\"identical\":true") && st_file_has(out, "\"images\":2"),
                 "CLI image run, %s mode (rc %d)", modes[m], rc);
    }
    /* token trees: --tree-width, text and images, greedy identical; sampling reports the tree */
    rc = vt_run("%s generate --raw -m %s -md %s --draft 3 --tree-width 3 -p 'abc def' -n 20 --temp 0 --compare "
                "--json - > %s 2>&1",
                vt_cli(), T, D, out);
    VT_CHECK(rc == 0 && st_file_has(out, "\"identical\":true") && st_file_has(out, "\"nodes_per_block\""),
             "CLI tree run (rc %d)", rc);
    rc = vt_run(
        "%s generate --raw -m %s --mmproj %s -md %s --mmproj-draft %s --draft 4 --draft-mode m --tree-width 2 "
        "--image %s -p 'USER: <image>\nwhat is it? ASSISTANT:' -n 16 --temp 0 --compare --json - > %s 2>&1",
        vt_cli(), T, tm_path, D, dm_path, i0, out);
    VT_CHECK(rc == 0 && st_file_has(out, "\"identical\":true"), "CLI tree image run (rc %d)", rc);
    rc = vt_run(
        "%s generate --raw -m %s -md %s --draft 2 --tree-width 2 -p 'abc' -n 8 --temp 0.8 --seed 5 > %s 2>&1",
        vt_cli(), T, D, out);
    VT_CHECK(rc == 0 && st_file_has(out, "nodes drafted per block"), "CLI tree sampling run (rc %d)", rc);
    const char *bad_widths[4] = {"0", "9", "-1", "two"};
    for (int k = 0; k < 4; k++) {
        rc = vt_run("%s generate --raw -m %s -md %s --tree-width %s -p x > %s 2>&1", vt_cli(), T, D, bad_widths[k],
                    out);
        VT_CHECK(rc == 2 && st_file_has(out, "--tree-width"), "CLI --tree-width %s refused (rc %d)",
                 bad_widths[k], rc);
    }
    /* no flag is silently ignored: drafter flags without -md, a projector m/p drafting would not read */
    const char *drafter_only[6] = {"--tree-width 2",     "--compare",      "--draft 3",
                                   "--draft-greedy",     "--draft-kv-type f16", "--draft-mode t"};
    for (int k = 0; k < 6; k++) {
        rc = vt_run("%s generate --raw -m %s %s -p x -n 2 > %s 2>&1", vt_cli(), T, drafter_only[k], out);
        VT_CHECK(rc == 2 && st_file_has(out, "needs a draft model"), "CLI %s without -md refused (rc %d)",
                 drafter_only[k], rc);
    }
    rc = vt_run("%s generate --raw -m %s --mmproj %s -md %s --mmproj-draft %s --draft-mode t --image %s -p '<image> x' "
                "-n 2 > %s 2>&1", vt_cli(), T, tm_path, D, dm_path, i0, out);
    VT_CHECK(rc == 2 && st_file_has(out, "does not use it"), "CLI --mmproj-draft with t drafting refused (rc %d)", rc);
    /* --json without a drafter: target-only decoding, as JSON */
    rc = vt_run("%s generate --raw -m %s -p 'abc' -n 3 --temp 0 --json - > %s 2>&1", vt_cli(), T, out);
    VT_CHECK(rc == 0 && st_file_has(out, "\"tokens\":[") && st_file_has(out, "\"gamma\":0"),
             "CLI target-only --json (rc %d)", rc);
    /* sampling prints statistics after the text */
    rc = vt_run("%s generate --raw -m %s -md %s --draft 2 -p 'abc' -n 8 --temp 0.8 --seed 5 > %s 2>&1", vt_cli(), T,
                D, out);
    VT_CHECK(rc == 0 && st_file_has(out, "tau") && st_file_has(out, "TABED"), "CLI sampling run (rc %d)", rc);
    /* -n 0 evaluates the prompt and generates nothing (as llama.cpp), target-only and speculative alike
     * (stdout: the prompt and a newline); --compare agrees; a negative -n is a usage error */
    const char *err_out = st_tmp_path("cli-err.txt");
    const char *zero_runs[3] = {"", "--draft 3", "--draft 3 --tree-width 2"};
    for (int k = 0; k < 3; k++) {
        rc = vt_run("%s generate --raw -m %s %s%s %s -p 'abc def' -n 0 --temp 0 > %s 2> %s", vt_cli(), T,
                    k ? "-md " : "", k ? D : "", zero_runs[k], out, err_out);
        VT_CHECK(rc == 0 && file_is(out, "abc def\n"), "CLI -n 0 (%s): rc %d, stdout/stderr in %s / %s",
                 k ? zero_runs[k] : "target only", rc, out, err_out);
    }
    rc = vt_run("%s generate --raw -m %s -md %s --draft 3 -p 'abc def' -n 0 --temp 0 --compare --json - > %s 2>&1",
                vt_cli(), T, D, out);
    VT_CHECK(rc == 0 && st_file_has(out, "\"tokens\":[]") && st_file_has(out, "\"identical\":true"),
             "CLI -n 0 --compare --json (rc %d)", rc);
    for (int k = 0; k < 2; k++) {
        rc = vt_run("%s generate --raw -m %s %s%s -p 'abc def' -n -1 > %s 2>&1", vt_cli(), T, k ? "-md " : "",
                    k ? D : "", out);
        VT_CHECK(rc == 2 && st_file_has(out, "-n expects an integer in [0,"), "CLI -n -1%s: rc %d",
                 k ? " with a drafter" : "", rc);
    }
    /* a context of exactly the prompt: both paths make the one token the prefill's logits give */
    char got[2][64];
    for (int k = 0; k < 2; k++) {
        rc = vt_run("%s generate --raw -m %s %s%s --tokens 1,5,7 -c 3 -n 4 --ids --temp 0 > %s 2> %s", vt_cli(), T,
                    k ? "-md " : "", k ? D : "", out, err_out);
        FILE *f = fopen(out, "r");
        got[k][0] = 0;
        if (f) {
            if (!fgets(got[k], sizeof(got[k]), f)) got[k][0] = 0;
            fclose(f);
        }
        VT_CHECK(rc == 0 && got[k][0] && !strchr(got[k], ' '), "CLI -c = prompt%s: rc %d, output '%s'",
                 k ? " with a drafter" : "", rc, got[k]);
    }
    VT_CHECK(!strcmp(got[0], got[1]), "CLI -c = prompt: target-only '%s', speculative '%s'", got[0], got[1]);
    /* bad input: another vocabulary, missing projector, markers without images, bad mode */
    rc = vt_run("%s generate --raw -m %s -md %s -p x -n 4 > %s 2>&1", vt_cli(), T, st_tmp_path("cli-v.gguf"), out);
    VT_CHECK(rc == 1 && st_file_has(out, "vocabulary"), "CLI other vocabulary (rc %d)", rc);
    rc =
        vt_run("%s generate --raw -m %s --mmproj %s -md %s --draft-mode m --image %s -p '<image> x' -n 4 > %s 2>&1",
               vt_cli(), T, tm_path, D, i0, out);
    VT_CHECK(rc == 2 && st_file_has(out, "mmproj-draft"), "CLI m mode without a projector: usage error (rc %d)",
             rc);
    rc = vt_run("%s generate --raw -m %s --mmproj %s -md %s --image %s -p 'no marker' -n 4 > %s 2>&1", vt_cli(), T,
                tm_path, D, i0, out);
    VT_CHECK(rc == 1, "CLI image without a marker (rc %d)", rc);
    rc = vt_run("%s generate --raw -m %s -md %s --draft-mode q -p x > %s 2>&1", vt_cli(), T, D, out);
    VT_CHECK(rc == 2, "CLI bad draft mode (rc %d)", rc);
    rc = vt_run("%s generate --help > %s 2>&1", vt_cli(), out);
    VT_CHECK(rc == 0 && st_file_has(out, "--draft-mode") && st_file_has(out, "--compare") &&
                 st_file_has(out, "--tree-width"),
             "generate --help lists the flags");
}

int main(void) {
    double t0 = vs_time_now();
    test_stats();
    test_batch_invariance();
    test_tree_rows();
    tally t = {0};
    test_random_pairs(&t);
    test_parity_pairs(&t);
    test_multimodal_pairs(&t);
    printf(
        "lossless greedy: %d combinations, %d mismatches; %lld drafted, %lld accepted, %lld partly accepted "
        "blocks, %lld tree blocks\n",
        t.combos, t.mismatches, (long long)t.drafted, (long long)t.accepted, (long long)t.partial_blocks,
        (long long)t.tree_blocks);
    VT_CHECK(t.tree_blocks > 1000, "too few tree blocks (%lld)", (long long)t.tree_blocks);
    VT_CHECK(t.combos >= 300, "only %d combinations", t.combos);
    VT_CHECK(t.partial_blocks > 100, "too few partly accepted blocks (%lld) to exercise rollbacks",
             (long long)t.partial_blocks);
    test_self_draft();
    test_tree_draft_cache();
    test_bad_input();
    test_eos_mid_block();
    test_reject_drafter();
    test_prefix_reuse();
    test_features();
    test_cli();
    printf("spec: %.1f s\n", vs_time_now() - t0);
    return vt_finish("spec");
}
