/* test_ensemble: the in-batch ensemble drafter (draft_ensemble.h) and captions (caption.h).
 *   - lossless greedy: for every drafting input alone (M, T, C, P) and the ensembles MT, TC, MP, MTCP
 *     under every weight policy, on prompts with 0, 1 and 2 images, with two drafters (a related
 *     1-layer model and an unrelated narrower one) at gamma 1 .. 8: output token-identical to target-only
 *     greedy decoding (>= 200 prompt x input x policy combinations per drafter), and no row ever
 *     evaluates a token twice (rows evaluated == final cache lengths + rejected drafts); the unrelated
 *     drafter's rows (and the width-3 trees below) keep their cache in the BF16 layout of kv.h;
 *   - m = 1 is draft_lm: the T and M single-row ensembles make the same blocks as draft_lm;
 *   - TABED adapts: a self-drafting pair whose M row sees exactly what the target sees and whose T row
 *     does not: grid and inverse-KL weights move to M and acceptance rises to (nearly) every draft;
 *   - lossless sampling: the joint distribution of 3 generated tokens with q_ens drafters (MT, MTP,
 *     several policies and sampling settings, sampled and greedy drafts, width-2 and width-3 token trees)
 *     matches the exact target-only distribution (chi-square, V = 16, image rows in the prompt), and a
 *     broken residual is detected (chains and trees);
 *   - token trees (tree_width 2 and 3): lossless greedy with 1 to 4 rows (m, t, mt, mtp, mtcp) under
 *     static, grid and inverse-KL weights (the history follows the accepted branch), exact row counts;
 *   - captions: a captioner (the drafter VLM) on another thread gives the same blocks as the same
 *     captions given as texts; the captions file format and its errors;
 *   - bad input: missing caption, empty caption (documented fallback), pool size larger than the grid,
 *     unknown / repeated inputs, unknown policy, missing projector or features, vocabulary mismatch;
 *   - the weight trace matches the engine's blocks.
 * `test_ensemble bench [THREADS [WIDTH LAYERS [f32|f16|bf16 [KV [HEADS KV_HEADS FFN [mm [MODEL]]]]]]]` times a batched
 * 4-row draft step against a 1-row step instead (report only): text prompts of 16-600 positions (caches F32,
 * F16, BF16), and the draft steps of the ensemble drafter (cache KV: f32, f16 or bf16, the default) with
 * multimodal prompts whose M row is 600 (one 576-row image as TABED's setting, and 9 images of 64 rows);
 * `mm`: those alone; MODEL: a GGUF with the bench's vocabulary of 2048 (models/draft-llava.gguf, the shipped
 * drafter) instead of random weights of the given shape. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "caption.h"
#include "draft_ensemble.h"
#include "draft_lm.h"
#include "spec.h"
#include "spec_testutil.h"
#include "testutil.h"
#include "tokenizer.h"
#include "vision.h"

/* ------------------------------------------------------------------------------------------------
 * helpers */

static vs_type g_model_type = VS_TYPE_F32; /* the bench's F16 / BF16 runs change it */
static vs_type g_bench_kv = VS_TYPE_BF16;  /* the bench's ensemble drafters' cache */
static int g_bench_heads = 4, g_bench_kv_heads = 0, g_bench_ffn = 0; /* bench shape (0: H / 2, 4 x width) */
static bool g_bench_mm_only = false; /* bench ... mm: the multimodal draft steps alone */
static const char *g_bench_model;    /* bench ... mm FILE: this GGUF (the shipped drafter) instead of random weights */

static vs_lm *make_model(int E, int L, int H, int F, int V, float std, uint64_t seed, int n_ctx,
                         const char *name) {
    vs_lm_random_opts o;
    memset(&o, 0, sizeof(o));
    o.n_embd = E, o.n_layer = L, o.n_head = H, o.n_head_kv = H / 2 > 0 ? H / 2 : 1, o.n_ff = F,
    o.n_head_kv = g_bench_kv_heads > 0 ? g_bench_kv_heads : o.n_head_kv;
    o.n_ctx = n_ctx;
    o.n_vocab = V, o.type = g_model_type, o.init_std = std, o.tied = true, o.seed = seed;
    vs_error err = {0};
    VT_REQUIRE(vs_lm_write_random(&o, st_tmp_path(name), &err) == VS_OK, "%s", err.msg);
    vs_lm *lm = vs_lm_load(st_tmp_path(name), &err);
    VT_REQUIRE(lm, "%s", err.msg);
    return lm;
}

static vs_mmproj *make_proj(int width, int hidden, int proj_out, bool tower, uint64_t tower_hash,
                            uint64_t seed, const char *name) {
    vs_vision_config c;
    memset(&c, 0, sizeof(c));
    c.image_size = 42, c.patch_size = 14, c.width = width, c.ffn = 2 * width, c.n_heads = 2, c.n_blocks = 1;
    c.projection_dim = width, c.proj_hidden = hidden, c.proj_out = proj_out, c.eps = 1e-5f;
    for (int i = 0; i < 3; i++) c.mean[i] = 0.5f, c.std[i] = 0.25f;
    c.has_tower = tower;
    vs_error err = {0};
    vs_vision_weights w;
    VT_REQUIRE(vs_vision_weights_alloc(&w, &c, &err) == VS_OK, "%s", err.msg);
    vs_vision_weights_randomize(&w, &c, seed);
    vs_mmproj_write_opts wo = {.mat_type = VS_TYPE_F32, .tower_hash = tower_hash};
    VT_REQUIRE(vs_mmproj_write(st_tmp_path(name), &c, &w, &wo, &err) == VS_OK, "%s", err.msg);
    vs_vision_weights_free(&w, &c);
    vs_mmproj *m = vs_mmproj_open(st_tmp_path(name), &err);
    VT_REQUIRE(m, "%s", err.msg);
    return m;
}

static vs_status gen(st_engine *e, vs_spec_drafter *d, const vs_spec_prompt *p, int gamma, int n_predict,
                     vs_spec_log *log, vs_error *err) {
    vs_spec_params pr = vs_spec_params_default();
    pr.gamma = gamma;
    pr.n_predict = n_predict;
    pr.sampling.temperature = 0;
    pr.ignore_eos = true;
    return vs_spec_generate(e->s, d, p, &pr, NULL, NULL, log, err);
}

/* The drafters' cache type in make_ens_w (F32 by default; some lossless passes run the BF16 layout). */
static vs_type g_ens_kv = VS_TYPE_F32;
/* EAGLE-2 trees in make_ens_w: top-k (0 = off) and nodes (0 = the default 8 K). */
static int g_ens_topk = 0, g_ens_nodes = 0;

static vs_spec_drafter *make_ens_w(vs_lm *draft, vs_lm *target, const char *inputs, const char *policy,
                                   const vs_vision_projector *proj, vs_caption_src *caps, bool trace,
                                   int width) {
    vs_error err = {0};
    vs_draft_ens_opts o;
    vs_draft_ens_opts_default(&o);
    o.kv_type = g_ens_kv;
    VT_REQUIRE(vs_ens_inputs_parse(inputs, o.inputs, &o.n_inputs, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_ens_weights_parse(policy, &o.weights, &err) == VS_OK, "%s", err.msg);
    o.proj = proj;
    o.captions = caps;
    o.trace = trace;
    o.tree_width = width;
    o.tree_top_k = g_ens_topk, o.tree_nodes = g_ens_nodes;
    vs_spec_drafter *d = vs_draft_ens_new(draft, target, &o, &err);
    VT_REQUIRE(d, "ensemble %s / %s: %s", inputs, policy, err.msg);
    return d;
}

static vs_spec_drafter *make_ens(vs_lm *draft, vs_lm *target, const char *inputs, const char *policy,
                                 const vs_vision_projector *proj, vs_caption_src *caps, bool trace) {
    return make_ens_w(draft, target, inputs, policy, proj, caps, trace, 1);
}

/* ------------------------------------------------------------------------------------------------
 * The multimodal fixture: a target (tower + projector), two drafters with projectors over the same
 * features, three images, prompts with 0 .. 2 images, fixed captions. */

enum { NI = 3, NP = 8, V96 = 96 };

typedef struct fixture {
    vs_lm *target, *draft_rel, *draft_far;
    vs_mmproj *tm, *dm_rel, *dm_far;
    vs_vision_features feat[NI];
    const vs_vision_features *fp[NI];
    float *trows[NI];
    int64_t n_trows[NI];
    struct {
        int32_t tok[64];
        vs_spec_segment seg[5];
        vs_spec_prompt p;
        int n_img;
    } mp[NP];
    vs_caption_src *caps;
} fixture;

static const char *const CAPTIONS[NI] = {"a red square on grass", "two blue circles", "a small yellow house"};

static void fixture_init(fixture *f) {
    vs_error err = {0};
    memset(f, 0, sizeof(*f));
    f->target = make_model(64, 2, 4, 128, V96, 0.15f, 61, 512, "ens-target.gguf");
    /* the target's seed and shape with smaller weights: related, accepted often */
    f->draft_rel = make_model(64, 2, 4, 128, V96, 0.12f, 61, 512, "ens-draft-rel.gguf");
    f->draft_far = make_model(32, 1, 2, 64, V96, 0.15f, 62, 512, "ens-draft-far.gguf");
    f->tm = make_proj(32, 64, 64, true, 0, 5, "ens-target-mmproj.gguf");
    const vs_vision_tower *tower = vs_mmproj_tower(f->tm);
    uint64_t th = vs_vision_tower_hash(tower);
    f->dm_rel = make_proj(32, 64, 64, false, th, 6, "ens-draft-rel-mmproj.gguf");
    f->dm_far = make_proj(32, 64, 32, false, th, 7, "ens-draft-far-mmproj.gguf");
    const int S = 42;
    float *pix = malloc(sizeof(float) * 3 * S * S);
    vs_rng r;
    vs_rng_seed(&r, 9);
    for (int i = 0; i < NI; i++) {
        for (int j = 0; j < 3 * S * S; j++) pix[j] = (float)(vs_rng_uniform(&r) * 2 - 1);
        VT_REQUIRE(vs_vision_encode(tower, NULL, pix, NULL, &f->feat[i], &err) == VS_OK, "%s", err.msg);
        VT_REQUIRE(vs_vision_embed(vs_mmproj_projector(f->tm), NULL, &f->feat[i], 1, &f->trows[i],
                                   &f->n_trows[i], &err) == VS_OK,
                   "%s", err.msg);
        f->fp[i] = &f->feat[i];
    }
    free(pix);
    VT_REQUIRE(f->feat[0].grid_h == 3 && f->feat[0].grid_w == 3, "3 x 3 patch grid");
    for (int i = 0; i < NP; i++) {
        vs_rng_seed(&r, 300 + i);
        int n_img = i % 3, at = 0, ns = 0;
        for (int k = 0; k <= n_img; k++) {
            int len = 1 + (int)vs_rng_below(&r, 6) + (k == n_img ? 3 : 0);
            for (int j = 0; j < len; j++)
                f->mp[i].tok[at + j] = at + j == 0 ? 1 : 3 + (int32_t)vs_rng_below(&r, 93);
            f->mp[i].seg[ns++] =
                (vs_spec_segment){.kind = VS_SPEC_SEG_TEXT, .n = len, .tokens = f->mp[i].tok + at};
            at += len;
            if (k < n_img) {
                int im = (i + k) % NI;
                f->mp[i].seg[ns++] = (vs_spec_segment){.kind = VS_SPEC_SEG_IMAGE,
                                                       .n = (int32_t)f->n_trows[im],
                                                       .embd = f->trows[im],
                                                       .image = im};
            }
        }
        f->mp[i].p.seg = f->mp[i].seg, f->mp[i].p.n_seg = ns, f->mp[i].p.images = f->fp,
        f->mp[i].p.n_images = NI;
        f->mp[i].n_img = n_img;
    }
    f->caps = vs_caption_src_new_texts(CAPTIONS, NI, &err);
    VT_REQUIRE(f->caps, "%s", err.msg);
}

static void fixture_free(fixture *f) {
    vs_caption_src_free(f->caps);
    for (int i = 0; i < NI; i++) {
        vs_free(f->trows[i]);
        vs_vision_features_free(&f->feat[i]);
    }
    vs_mmproj_free(f->tm), vs_mmproj_free(f->dm_rel), vs_mmproj_free(f->dm_far);
    vs_lm_free(f->target), vs_lm_free(f->draft_rel), vs_lm_free(f->draft_far);
}

/* ------------------------------------------------------------------------------------------------
 * lossless greedy over inputs x policies x prompts */

static const char *const SETS[] = {"m", "t", "c", "p", "mt", "tc", "mp", "mtcp"};
static const char *const POLICIES[] = {"static", "ratios", "grid", "inv-kl", "inv-tvd", "random", "adaboost"};
static const int GAMMAS[4] = {1, 3, 5, 8};

typedef struct tally {
    int combos, mismatches, eval_errors;
    int64_t drafted, accepted, tree_blocks;
} tally;

static void run_lossless(fixture *f, vs_lm *draft, const vs_vision_projector *proj, const char *label,
                         tally *t, const char *const *sets, int n_sets, const char *const *policies,
                         int n_policies, int width) {
    vs_error err = {0};
    st_engine e = st_make_engine(f->target, 256);
    vs_spec_log base[NP], log;
    for (int i = 0; i < NP; i++) {
        vs_spec_log_init(&base[i]);
        VT_REQUIRE(gen(&e, NULL, &f->mp[i].p, 0, 20, &base[i], &err) == VS_OK, "%s", err.msg);
    }
    vs_spec_log_init(&log);
    int64_t acc_by_set[8] = {0}, dr_by_set[8] = {0};
    const char *const *SETS_ = sets, *const *POLICIES_ = policies;
    for (int s = 0; s < n_sets; s++) {
        const int m = (int)strlen(SETS_[s]);
        for (int pi = 0; pi < n_policies; pi++) {
            if (m == 1 && pi > 0) continue; /* one row: the weight is 1 whatever the policy */
            char pol[64];
            if (!strcmp(POLICIES_[pi], "ratios")) {
                snprintf(pol, sizeof(pol), "static:2");
                for (int r = 1; r < m; r++) strcat(pol, ",1");
            } else {
                snprintf(pol, sizeof(pol), "%s", POLICIES_[pi]);
            }
            vs_spec_drafter *d = make_ens_w(draft, f->target, SETS_[s], pol, proj, f->caps, false, width);
            vs_kv *kv = vs_draft_ens_kv(d);
            for (int i = 0; i < NP; i++) {
                const int gamma = GAMMAS[(i + s + pi) % 4];
                const int64_t before = vs_draft_ens_get_stats(d)->rows_evaluated;
                const int64_t disc0 = vs_draft_ens_get_stats(d)->rows_discarded;
                vs_status st = gen(&e, d, &f->mp[i].p, gamma, 20, &log, &err);
                VT_REQUIRE(st == VS_OK, "%s %s %s prompt %d: %s", label, SETS_[s], pol, i, err.msg);
                t->combos++;
                if (!st_same_tokens(&log, &base[i], false)) {
                    t->mismatches++;
                    VT_CHECK(
                        false,
                        "%s: inputs %s, weights %s, prompt %d, gamma %d, width %d: output differs from "
                        "target-only",
                        label, SETS_[s], pol, i, gamma, width);
                }
                int64_t cached = 0;
                for (int r = 0; r < m; r++) cached += vs_kv_seq_len(kv, r);
                const int64_t evaluated = vs_draft_ens_get_stats(d)->rows_evaluated - before;
                const int64_t discarded = vs_draft_ens_get_stats(d)->rows_discarded - disc0;
                /* EAGLE-2 trees: which nodes were fed depends on the scores; every evaluated row is cached
                 * or was removed by a rollback, and at most K (gamma - 1) were fed per block and row */
                int64_t fed_max = 0;
                for (int b = 0; b < log.n_blocks; b++)
                    fed_max += (int64_t)g_ens_topk * VS_MAX(log.blocks[b].n_steps - 1, 0);
                if (g_ens_topk ? evaluated != cached + discarded || discarded > m * fed_max
                               : evaluated != cached + m * st_wasted_drafts(&log)) {
                    t->eval_errors++;
                    VT_CHECK(
                        false,
                        "%s %s %s prompt %d: %lld rows evaluated, %lld cached + %lld x %d rejected drafts (discarded %lld, fed at most %lld x m)",
                        label, SETS_[s], pol, i, (long long)evaluated, (long long)cached,
                        (long long)st_wasted_drafts(&log), m, (long long)discarded, (long long)fed_max);
                }
                for (int b = 0; b < log.n_blocks; b++) {
                    const vs_spec_block *k = &log.blocks[b];
                    const int nodes = g_ens_topk ? (g_ens_nodes ? g_ens_nodes : 8 * g_ens_topk) : width * k->n_depth;
                    VT_CHECK(k->n_depth <= gamma && k->n_draft <= nodes,
                             "%s %s: block of %d nodes, depth %d (gamma %d, width %d)", label, SETS_[s],
                             k->n_draft, k->n_depth, gamma, width);
                    t->tree_blocks += k->n_draft > k->n_depth;
                }
                for (int b = 0; b < log.n_blocks; b++) {
                    t->drafted += log.blocks[b].n_eval, t->accepted += log.blocks[b].n_accept;
                    dr_by_set[s] += log.blocks[b].n_eval, acc_by_set[s] += log.blocks[b].n_accept;
                }
            }
            vs_spec_drafter_free(d);
        }
    }
    printf("  %-30s acceptance by input set:", label);
    for (int s = 0; s < n_sets; s++)
        printf(" %s %.2f", SETS_[s], (double)acc_by_set[s] / (double)VS_MAX(dr_by_set[s], 1));
    printf("\n");
    for (int i = 0; i < NP; i++) vs_spec_log_free(&base[i]);
    vs_spec_log_free(&log);
    st_free_engine(&e);
}

static void test_lossless(fixture *f) {
    tally t = {0};
    const int ns = (int)VS_ARRAY_LEN(SETS), np = (int)VS_ARRAY_LEN(POLICIES);
    run_lossless(f, f->draft_rel, vs_mmproj_projector(f->dm_rel), "related drafter", &t, SETS, ns, POLICIES,
                 np, 1);
    const int first = t.combos;
    g_ens_kv = VS_TYPE_BF16; /* the drafters' cache layout: rollbacks of every row */
    run_lossless(f, f->draft_far, vs_mmproj_projector(f->dm_far), "unrelated drafter, BF16 cache", &t, SETS, ns,
                 POLICIES, np, 1);
    g_ens_kv = VS_TYPE_F32;
    printf(
        "  lossless greedy: %d + %d prompt x input x policy combinations, %d mismatches, acceptance %.3f\n",
        first, t.combos - first, t.mismatches, (double)t.accepted / (double)VS_MAX(t.drafted, 1));
    VT_CHECK(first >= 200, "%d combinations per drafter", first);
    VT_CHECK(t.mismatches == 0 && t.eval_errors == 0, "%d mismatches, %d evaluation-count errors",
             t.mismatches, t.eval_errors);
    const double acc = (double)t.accepted / (double)VS_MAX(t.drafted, 1);
    VT_CHECK(acc > 0.05 && acc < 0.95, "acceptance %g exercises both branches", acc);

    /* width-2 and width-3 token trees: one to four rows (m, t, mt, mtp, mtcp), three policies, the related
     * drafter */
    static const char *const TSETS[] = {"m", "t", "mt", "mtp", "mtcp"};
    static const char *const TPOLS[] = {"static", "grid", "inv-kl"};
    tally tt = {0};
    for (int width = 2; width <= 3; width++) {
        char label[64];
        snprintf(label, sizeof(label), "related drafter, width %d%s", width, width == 3 ? ", BF16 cache" : "");
        g_ens_kv = width == 3 ? VS_TYPE_BF16 : VS_TYPE_F32; /* BF16: tree forks and compaction */
        run_lossless(f, f->draft_rel, vs_mmproj_projector(f->dm_rel), label, &tt, TSETS, 5, TPOLS, 3, width);
    }
    g_ens_kv = VS_TYPE_F32;
    printf(
        "  lossless greedy with trees: %d combinations, %d mismatches, %lld tree blocks, acceptance %.3f\n",
        tt.combos, tt.mismatches, (long long)tt.tree_blocks,
        (double)tt.accepted / (double)VS_MAX(tt.drafted, 1));
    VT_CHECK(tt.mismatches == 0 && tt.eval_errors == 0, "trees: %d mismatches, %d evaluation-count errors",
             tt.mismatches, tt.eval_errors);
    VT_CHECK(tt.tree_blocks > 200, "trees: only %lld tree blocks", (long long)tt.tree_blocks);

    /* EAGLE-2 dynamic trees: top-k 2 with 6 nodes, top-k 3 with the default 24 (BF16 cache), the same
     * input sets and policies */
    tally te = {0};
    for (int kk = 2; kk <= 3; kk++) {
        char label[64];
        snprintf(label, sizeof(label), "related drafter, EAGLE-2 top-k %d%s", kk, kk == 3 ? ", BF16 cache" : "");
        g_ens_kv = kk == 3 ? VS_TYPE_BF16 : VS_TYPE_F32;
        g_ens_topk = kk, g_ens_nodes = kk == 2 ? 6 : 0;
        run_lossless(f, f->draft_rel, vs_mmproj_projector(f->dm_rel), label, &te, TSETS, 5, TPOLS, 3, 1);
    }
    g_ens_kv = VS_TYPE_F32;
    g_ens_topk = g_ens_nodes = 0;
    printf("  lossless greedy with EAGLE-2 trees: %d combinations, %d mismatches, %lld tree blocks, "
           "acceptance %.3f\n",
           te.combos, te.mismatches, (long long)te.tree_blocks, (double)te.accepted / (double)VS_MAX(te.drafted, 1));
    VT_CHECK(te.mismatches == 0 && te.eval_errors == 0, "EAGLE-2 trees: %d mismatches, %d evaluation-count errors",
             te.mismatches, te.eval_errors);
    VT_CHECK(te.tree_blocks > 200, "EAGLE-2 trees: only %lld tree blocks", (long long)te.tree_blocks);
}

/* An EAGLE-2 tree drafted by the target itself (M row through the target's own projector: it sees exactly
 * the target's rows) holds the target's greedy continuation wherever the beams kept it, so (nearly) every
 * block is accepted to its full depth: the beams' cached rows, their ancestor masks and the compaction of
 * the accepted path into place are what keep the drafter's cache equal to the target's; a wrong slot shows
 * up as rejections in the following blocks. */
static void test_eagle2_self(fixture *f) {
    vs_error err = {0};
    st_engine e = st_make_engine(f->target, 256);
    g_ens_topk = 3, g_ens_nodes = 12;
    vs_spec_drafter *d = make_ens(f->target, f->target, "m", "static", vs_mmproj_projector(f->tm), NULL, false);
    g_ens_topk = g_ens_nodes = 0;
    vs_spec_log log;
    vs_spec_log_init(&log);
    int64_t blocks = 0, full = 0, nodes = 0, acc = 0, depth = 0;
    for (int i = 0; i < NP; i++) {
        VT_REQUIRE(gen(&e, d, &f->mp[i].p, 4, 24, &log, &err) == VS_OK, "%s", err.msg);
        for (int b = 0; b + 1 < log.n_blocks; b++) { /* the last block may stop at the token limit */
            blocks++;
            full += log.blocks[b].n_accept == log.blocks[b].n_depth;
            nodes += log.blocks[b].n_draft;
            acc += log.blocks[b].n_accept, depth += log.blocks[b].n_depth;
        }
    }
    printf("  EAGLE-2 self-drafting (top-k 3, 12 nodes, depth 4): %lld of %lld blocks accepted to full depth, "
           "%lld of %lld drafted positions, %.1f nodes per block\n",
           (long long)full, (long long)blocks, (long long)acc, (long long)depth,
           (double)nodes / (double)VS_MAX(blocks, 1));
    VT_CHECK(blocks > 20 && acc >= 0.9 * (double)depth,
             "self-drafting EAGLE-2 tree: %lld of %lld drafted positions accepted", (long long)acc, (long long)depth);
    VT_CHECK(nodes > 4 * blocks, "the trees have more nodes than a chain (%lld in %lld blocks)", (long long)nodes,
             (long long)blocks);
    vs_spec_log_free(&log);
    vs_spec_drafter_free(d);
    st_free_engine(&e);
}

/* ------------------------------------------------------------------------------------------------
 * m = 1 is draft_lm; TABED adapts; trace; captioner thread */

/* draft_lm is a wrapper over the 1-row ensemble (vs_draft_lm_new -> vs_draft_ens_new): this checks that
 * its option mapping gives the same drafter as an ensemble made directly (before the wrapper it checked
 * that the two implementations agreed block by block and row by row). */
static void test_single_is_draft_lm(fixture *f) {
    vs_error err = {0};
    st_engine e = st_make_engine(f->target, 256);
    const vs_vision_projector *proj = vs_mmproj_projector(f->dm_rel);
    int same = 0, total = 0;
    for (int mode = 0; mode < 2; mode++) {
        vs_draft_lm_opts lo = {.mode = mode ? VS_DRAFT_LM_MM : VS_DRAFT_LM_TEXT, .proj = mode ? proj : NULL};
        vs_spec_drafter *dl = vs_draft_lm_new(f->draft_rel, f->target, &lo, &err);
        VT_REQUIRE(dl, "%s", err.msg);
        vs_spec_drafter *de =
            make_ens(f->draft_rel, f->target, mode ? "m" : "t", "static", proj, NULL, false);
        vs_spec_log a, b;
        vs_spec_log_init(&a), vs_spec_log_init(&b);
        for (int i = 0; i < NP; i++) {
            VT_REQUIRE(gen(&e, dl, &f->mp[i].p, 4, 24, &a, &err) == VS_OK, "%s", err.msg);
            VT_REQUIRE(gen(&e, de, &f->mp[i].p, 4, 24, &b, &err) == VS_OK, "%s", err.msg);
            bool eq = a.n_blocks == b.n_blocks && st_same_tokens(&a, &b, false);
            for (int k = 0; eq && k < a.n_blocks; k++)
                eq = a.blocks[k].n_draft == b.blocks[k].n_draft &&
                     a.blocks[k].n_accept == b.blocks[k].n_accept;
            same += eq;
            total++;
        }
        VT_CHECK(vs_draft_lm_rows_evaluated(dl) == vs_draft_ens_get_stats(de)->rows_evaluated,
                 "%s: draft_lm evaluated %lld rows, the 1-row ensemble %lld", mode ? "M" : "T",
                 (long long)vs_draft_lm_rows_evaluated(dl),
                 (long long)vs_draft_ens_get_stats(de)->rows_evaluated);
        vs_spec_log_free(&a), vs_spec_log_free(&b);
        vs_spec_drafter_free(dl);
        vs_spec_drafter_free(de);
    }
    VT_CHECK(same == total, "1-row ensemble == draft_lm block by block on %d of %d requests", same, total);
    st_free_engine(&e);
}

static void test_adaptation(fixture *f) {
    /* the target drafting for itself: the M row (target's own projector) sees exactly the target's rows,
     * the T row sees "\n" instead of each image */
    vs_error err = {0};
    st_engine e = st_make_engine(f->target, 256);
    const vs_vision_projector *tp = vs_mmproj_projector(f->tm);
    const char *pols[3] = {"static", "grid", "inv-kl"};
    double acc[3] = {0};
    float wm_last[3] = {0};
    for (int k = 0; k < 3; k++) {
        vs_spec_drafter *d = make_ens(f->target, f->target, "tm", pols[k], tp, NULL, true);
        vs_spec_log log;
        vs_spec_log_init(&log);
        int64_t dr = 0, ac = 0;
        /* prompts with two images: T's view differs most */
        for (int i = 2; i < NP; i += 3) {
            VT_REQUIRE(gen(&e, d, &f->mp[i].p, 5, 60, &log, &err) == VS_OK, "%s", err.msg);
            for (int b = log.n_blocks / 2; b < log.n_blocks; b++) /* the second half: after adapting */
                dr += log.blocks[b].n_eval, ac += log.blocks[b].n_accept;
            const vs_ens_trace *tr = vs_draft_ens_trace(d);
            int nb = 0;
            for (int b = 0; b < log.n_blocks; b++) nb += log.blocks[b].n_draft > 0;
            int from = tr->n - nb;
            VT_CHECK(from >= 0, "trace has the request's blocks");
            for (int b = 0, j = from; b < log.n_blocks && j < tr->n; b++) {
                if (log.blocks[b].n_draft == 0) continue;
                VT_CHECK(tr->rec[j].n_draft == log.blocks[b].n_draft &&
                             tr->rec[j].n_accept == log.blocks[b].n_accept,
                         "trace block %d matches the engine's", b);
                VT_CHECK(fabsf(tr->rec[j].w[0] + tr->rec[j].w[1] - 1) < 1e-5f, "weights sum to 1");
                j++;
            }
            wm_last[k] = tr->rec[tr->n - 1].w[1];
            VT_CHECK(tr->rec[from].w[0] == 0.5f, "%s: the first block is uniform", pols[k]);
        }
        acc[k] = (double)ac / (double)VS_MAX(dr, 1);
        vs_spec_log_free(&log);
        vs_spec_drafter_free(d);
    }
    printf("  adaptation (self drafting, rows T and M): acceptance static %.3f, grid %.3f, inv-kl %.3f; last "
           "w_M: "
           "grid %.3f, inv-kl %.3f\n",
           acc[0], acc[1], acc[2], wm_last[1], wm_last[2]);
    VT_CHECK(wm_last[1] >= 0.9f, "grid weights move to the M row (%g)", wm_last[1]);
    VT_CHECK(wm_last[2] >= 0.99f, "inverse-KL weights move to the M row (%g)", wm_last[2]);
    VT_CHECK(acc[1] >= 0.97 && acc[2] >= 0.97, "adaptive acceptance %g / %g", acc[1], acc[2]);
    VT_CHECK(acc[1] >= acc[0] && acc[2] >= acc[0], "adaptive weights do at least as well as static ones");
    st_free_engine(&e);
}

static void test_captioner(fixture *f) {
    vs_error err = {0};
    const vs_vision_projector *proj = vs_mmproj_projector(f->dm_rel);
    vs_captioner_opts co = {.max_tokens = 8};
    vs_captioner *cap = vs_captioner_new(f->draft_rel, proj, &co, &err);
    VT_REQUIRE(cap, "%s", err.msg);
    char *text[NI];
    for (int i = 0; i < NI; i++) {
        VT_REQUIRE(vs_captioner_caption(cap, &f->feat[i], &text[i], &err) == VS_OK, "%s", err.msg);
        char *again = NULL;
        VT_REQUIRE(vs_captioner_caption(cap, &f->feat[i], &again, &err) == VS_OK, "%s", err.msg);
        VT_CHECK(!strcmp(text[i], again), "captioning is deterministic");
        VT_CHECK(!strchr(text[i], '\n'), "a caption has no newline");
        vs_free(again);
    }
    printf("  captions of the random drafter: '%s' | '%s' | '%s'\n", text[0], text[1], text[2]);
    vs_caption_src *fixed = vs_caption_src_new_texts((const char *const *)text, NI, &err);
    VT_REQUIRE(fixed, "%s", err.msg);
    vs_caption_src *gen_src = vs_caption_src_new_captioner(cap, &err);
    VT_REQUIRE(gen_src, "%s", err.msg);
    st_engine e = st_make_engine(f->target, 256);
    vs_spec_drafter *da = make_ens(f->draft_rel, f->target, "mtc", "inv-kl", proj, gen_src, false);
    vs_spec_drafter *db = make_ens(f->draft_rel, f->target, "mtc", "inv-kl", proj, fixed, false);
    vs_spec_log a, b, base;
    vs_spec_log_init(&a), vs_spec_log_init(&b), vs_spec_log_init(&base);
    int same = 0;
    double t_cap = 0;
    for (int i = 0; i < NP; i++) {
        VT_REQUIRE(gen(&e, da, &f->mp[i].p, 4, 16, &a, &err) == VS_OK, "%s", err.msg);
        t_cap += vs_draft_ens_get_stats(da)->t_caption;
        VT_REQUIRE(gen(&e, db, &f->mp[i].p, 4, 16, &b, &err) == VS_OK, "%s", err.msg);
        VT_REQUIRE(gen(&e, NULL, &f->mp[i].p, 0, 16, &base, &err) == VS_OK, "%s", err.msg);
        VT_CHECK(st_same_tokens(&a, &base, false), "captioner ensemble is lossless (prompt %d)", i);
        bool eq = a.n_blocks == b.n_blocks;
        for (int k = 0; eq && k < a.n_blocks; k++) eq = a.blocks[k].n_accept == b.blocks[k].n_accept;
        same += eq;
    }
    VT_CHECK(same == NP, "captions from the thread == the same captions as texts (%d of %d)", same, NP);
    VT_CHECK(t_cap > 0, "caption time reported");
    printf("  captioner thread: %d/%d requests identical to fixed captions, caption time %.4f s in all\n",
           same, NP, t_cap);
    /* an error in begin after the thread started must not leave it running: pool too large for the P row */
    vs_draft_ens_opts o;
    vs_draft_ens_opts_default(&o);
    VT_REQUIRE(vs_ens_inputs_parse("cp", o.inputs, &o.n_inputs, &err) == VS_OK, "%s", err.msg);
    o.proj = proj, o.captions = gen_src, o.pool_k = 5;
    vs_spec_drafter *dc = vs_draft_ens_new(f->draft_rel, f->target, &o, &err);
    VT_REQUIRE(dc, "%s", err.msg);
    VT_CHECK(gen(&e, dc, &f->mp[1].p, 3, 8, &a, &err) == VS_ERR_INVALID && strstr(err.msg, "pool size 5"),
             "pool error with a captioner: %s", err.msg);
    vs_spec_drafter_free(dc);
    vs_spec_log_free(&a), vs_spec_log_free(&b), vs_spec_log_free(&base);
    vs_spec_drafter_free(da), vs_spec_drafter_free(db);
    vs_caption_src_free(gen_src);
    vs_caption_src_free(fixed);
    for (int i = 0; i < NI; i++) vs_free(text[i]);
    /* bad captioner set-ups */
    vs_captioner_opts bad = {.prompt = "no marker here"};
    VT_CHECK(!vs_captioner_new(f->draft_rel, proj, &bad, &err) && strstr(err.msg, "marker"), "%s", err.msg);
    VT_CHECK(!vs_captioner_new(f->draft_far, proj, NULL, &err) && strstr(err.msg, "wide"), "%s", err.msg);
    vs_captioner_free(cap);
    st_free_engine(&e);
}

static void write_file(const char *path, const char *text) {
    FILE *fp = fopen(path, "w");
    VT_REQUIRE(fp, "open %s", path);
    fputs(text, fp);
    fclose(fp);
}

static void test_captions_file(void) {
    vs_error err = {0};
    const char *keys[2] = {"imgs/a.png", "imgs/b.png"};
    const char *p = st_tmp_path("caps.txt");
    write_file(p, "# captions\n\na red square\n  two blue circles  \n");
    vs_caption_src *s = vs_caption_src_from_file(p, keys, 2, &err);
    VT_REQUIRE(s, "%s", err.msg);
    VT_CHECK(!strcmp(vs_caption_src_get(s, 1), "two blue circles") && !vs_caption_src_get(s, 2),
             "positional");
    vs_caption_src_free(s);
    write_file(p, "b.png\tthe second\nimgs/a.png\tthe first\n");
    s = vs_caption_src_from_file(p, keys, 2, &err);
    VT_REQUIRE(s, "%s", err.msg);
    VT_CHECK(!strcmp(vs_caption_src_get(s, 0), "the first") &&
                 !strcmp(vs_caption_src_get(s, 1), "the second"),
             "keyed by path and by file name");
    vs_caption_src_free(s);
    struct {
        const char *text, *needle;
    } bad[] = {
        {"only one\n", "no caption for image 1 (imgs/b.png)"},
        {"one\ntwo\nthree\n", "more captions than the 2 images"},
        {"a.png\tx\na.png\ty\nb.png\tz\n", "second caption for image 0"},
        {"c.png\tx\n", "not one of the request's images"},
        {"a.png\tx\nplain line\n", "mixes"},
        {"a.png\t   \nb.png\tz\n", "empty caption for image 0"},
        {"", "no caption for image 0"},
        {NULL, NULL},
    };
    for (int i = 0; bad[i].text; i++) {
        write_file(p, bad[i].text);
        vs_error_clear(&err);
        s = vs_caption_src_from_file(p, keys, 2, &err);
        VT_CHECK(!s && strstr(err.msg, bad[i].needle), "captions file %d: %s", i, err.msg);
        vs_caption_src_free(s);
    }
    VT_CHECK(!vs_caption_src_from_file(st_tmp_path("nonexistent.txt"), keys, 2, &err), "missing file: %s",
             err.msg);
}

/* ------------------------------------------------------------------------------------------------
 * bad input */

static void test_bad_input(fixture *f) {
    vs_error err = {0};
    const vs_vision_projector *proj = vs_mmproj_projector(f->dm_rel);
    vs_ens_input in[8];
    int32_t n;
    VT_CHECK(vs_ens_inputs_parse("m,x", in, &n, &err) && strstr(err.msg, "unknown input 'x'"), "%s", err.msg);
    VT_CHECK(vs_ens_inputs_parse("mtm", in, &n, &err) && strstr(err.msg, "twice"), "%s", err.msg);
    VT_CHECK(vs_ens_inputs_parse("", in, &n, &err) && vs_ens_inputs_parse(",", in, &n, &err), "empty lists");
    VT_CHECK(vs_ens_inputs_parse("M,T,C,P", in, &n, &err) == VS_OK && n == 4 && in[3] == VS_ENS_IN_P,
             "upper case");

    vs_draft_ens_opts o;
    vs_draft_ens_opts_default(&o);
    o.n_inputs = 2, o.inputs[0] = VS_ENS_IN_M, o.inputs[1] = VS_ENS_IN_C;
    o.proj = proj;
    VT_CHECK(!vs_draft_ens_new(f->draft_rel, f->target, &o, &err) && strstr(err.msg, "captions"),
             "C without captions: %s", err.msg);
    o.captions = f->caps, o.proj = NULL;
    VT_CHECK(!vs_draft_ens_new(f->draft_rel, f->target, &o, &err) && strstr(err.msg, "projector"),
             "M without "
             "projector: %s",
             err.msg);
    o.proj = vs_mmproj_projector(f->dm_far);
    VT_CHECK(!vs_draft_ens_new(f->draft_rel, f->target, &o, &err) && strstr(err.msg, "wide"), "width: %s",
             err.msg);
    o.proj = proj;
    o.inputs[1] = VS_ENS_IN_M;
    VT_CHECK(!vs_draft_ens_new(f->draft_rel, f->target, &o, &err) && strstr(err.msg, "twice"), "repeat: %s",
             err.msg);
    o.inputs[1] = (vs_ens_input)7;
    VT_CHECK(!vs_draft_ens_new(f->draft_rel, f->target, &o, &err) &&
                 strstr(err.msg, "unknown drafting input"),
             "%s", err.msg);
    o.inputs[1] = VS_ENS_IN_P;
    o.pool_k = 0;
    VT_CHECK(!vs_draft_ens_new(f->draft_rel, f->target, &o, &err) && strstr(err.msg, "pool size 0"), "%s",
             err.msg);
    o.pool_k = 2;
    const int bad_width[2] = {-1, VS_DRAFT_ENS_MAX_WIDTH + 1};
    for (int k = 0; k < 2; k++) {
        o.tree_width = bad_width[k];
        VT_CHECK(!vs_draft_ens_new(f->draft_rel, f->target, &o, &err) && strstr(err.msg, "tree width"), "%s",
                 err.msg);
    }
    o.tree_width = 0;
    const int bad_topk[2] = {-1, VS_TREE_MAX_TOP_K + 1}, bad_nodes[2] = {-1, VS_TREE_MAX_NODES + 1};
    for (int k = 0; k < 2; k++) {
        o.tree_top_k = bad_topk[k];
        VT_CHECK(!vs_draft_ens_new(f->draft_rel, f->target, &o, &err) && strstr(err.msg, "top-k"), "%s", err.msg);
        o.tree_top_k = 2, o.tree_nodes = bad_nodes[k];
        VT_CHECK(!vs_draft_ens_new(f->draft_rel, f->target, &o, &err) && strstr(err.msg, "tree nodes"), "%s",
                 err.msg);
        o.tree_nodes = 0;
    }
    o.tree_width = 2;
    VT_CHECK(!vs_draft_ens_new(f->draft_rel, f->target, &o, &err) && strstr(err.msg, "exclude"), "%s", err.msg);
    o.tree_width = 0, o.debug_reject = true;
    VT_CHECK(!vs_draft_ens_new(f->draft_rel, f->target, &o, &err) && strstr(err.msg, "reject"), "%s", err.msg);
    o.tree_top_k = 0, o.debug_reject = false;
    o.weights.policy = (vs_ens_policy)42;
    VT_CHECK(!vs_draft_ens_new(f->draft_rel, f->target, &o, &err) && strstr(err.msg, "unknown policy"), "%s",
             err.msg);
    vs_ens_weights_cfg_default(&o.weights);
    VT_CHECK(vs_ens_weights_parse("tabed", &o.weights, &err) && strstr(err.msg, "unknown weight policy"),
             "%s", err.msg);
    o.weights.policy = VS_ENS_STATIC, o.weights.n_ratios = 3, o.weights.ratios[0] = 1;
    VT_CHECK(!vs_draft_ens_new(f->draft_rel, f->target, &o, &err) && strstr(err.msg, "ratios"), "%s",
             err.msg);
    vs_ens_weights_cfg_default(&o.weights);
    o.n_inputs = 0;
    VT_CHECK(!vs_draft_ens_new(f->draft_rel, f->target, &o, &err), "no inputs");
    vs_lm *v16 = make_model(32, 1, 2, 64, 16, 0.1f, 3, 64, "ens-v16.gguf");
    o.n_inputs = 1, o.inputs[0] = VS_ENS_IN_T;
    VT_CHECK(!vs_draft_ens_new(v16, f->target, &o, &err) && strstr(err.msg, "vocabulary"), "%s", err.msg);
    vs_lm_free(v16);

    st_engine e = st_make_engine(f->target, 256);
    vs_spec_log log;
    vs_spec_log_init(&log);
    const vs_spec_prompt *two = &f->mp[2].p; /* two images */
    VT_REQUIRE(f->mp[2].n_img == 2, "prompt 2 has two images");
    /* a caption missing for an image */
    const char *partial[NI] = {CAPTIONS[0], NULL, NULL};
    vs_caption_src *miss = vs_caption_src_new_texts(partial, NI, &err);
    VT_REQUIRE(miss, "%s", err.msg);
    vs_spec_drafter *d = make_ens(f->draft_rel, f->target, "tc", "static", proj, miss, false);
    VT_CHECK(gen(&e, d, two, 3, 8, &log, &err) == VS_ERR_INVALID && strstr(err.msg, "no caption for image"),
             "%s", err.msg);
    vs_spec_drafter_free(d);
    vs_caption_src_free(miss);
    /* an empty caption: documented fallback ("image: " alone), still lossless */
    const char *empty[NI] = {"", "", ""};
    vs_caption_src *emp = vs_caption_src_new_texts(empty, NI, &err);
    VT_REQUIRE(emp, "%s", err.msg);
    d = make_ens(f->draft_rel, f->target, "c", "static", proj, emp, false);
    vs_spec_log base;
    vs_spec_log_init(&base);
    VT_REQUIRE(gen(&e, d, two, 3, 12, &log, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(gen(&e, NULL, two, 0, 12, &base, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(st_same_tokens(&log, &base, false), "empty captions: lossless");
    VT_CHECK(vs_draft_ens_get_stats(d)->n_empty_captions == 2, "empty captions counted (%d)",
             vs_draft_ens_get_stats(d)->n_empty_captions);
    vs_spec_drafter_free(d);
    vs_caption_src_free(emp);
    /* pool size larger than the 3 x 3 grid; equal to it is one row */
    vs_draft_ens_opts_default(&o);
    o.inputs[0] = VS_ENS_IN_P, o.proj = proj, o.pool_k = 4;
    d = vs_draft_ens_new(f->draft_rel, f->target, &o, &err);
    VT_REQUIRE(d, "%s", err.msg);
    VT_CHECK(gen(&e, d, two, 3, 8, &log, &err) == VS_ERR_INVALID &&
                 strstr(err.msg, "pool size 4 is larger than image"),
             "%s", err.msg);
    vs_spec_drafter_free(d);
    o.pool_k = 3;
    d = vs_draft_ens_new(f->draft_rel, f->target, &o, &err);
    VT_REQUIRE(d && gen(&e, d, two, 3, 12, &log, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(st_same_tokens(&log, &base, false), "pool 3: lossless");
    int text_rows = 0;
    for (int s = 0; s < two->n_seg; s++)
        text_rows += two->seg[s].kind == VS_SPEC_SEG_TEXT ? two->seg[s].n : 0;
    VT_CHECK(vs_draft_ens_get_stats(d)->prefix_rows[0] == text_rows + 2,
             "pool 3 x 3: one row per image (%d rows)", vs_draft_ens_get_stats(d)->prefix_rows[0]);
    vs_spec_drafter_free(d);
    /* pool 2: a 3 x 3 grid becomes 2 x 2 (edge windows average what is inside) */
    o.pool_k = 2;
    d = vs_draft_ens_new(f->draft_rel, f->target, &o, &err);
    VT_REQUIRE(d && gen(&e, d, two, 3, 12, &log, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(vs_draft_ens_get_stats(d)->prefix_rows[0] == text_rows + 8, "pool 2: 4 rows per image");
    vs_spec_drafter_free(d);
    /* M / P without features in the request */
    vs_spec_segment segs[3] = {two->seg[0], two->seg[1], two->seg[2]};
    segs[1].image = -1;
    vs_spec_prompt nof = {.seg = segs, .n_seg = 3};
    d = make_ens(f->draft_rel, f->target, "mt", "grid", proj, NULL, false);
    VT_CHECK(gen(&e, d, &nof, 3, 8, &log, &err) == VS_ERR_INVALID && strstr(err.msg, "features"), "%s",
             err.msg);
    /* T alone does not need them */
    vs_spec_drafter_free(d);
    d = make_ens(f->draft_rel, f->target, "t", "static", NULL, NULL, false);
    VT_CHECK(gen(&e, d, &nof, 3, 8, &log, &err) == VS_OK, "T without features: %s", err.msg);
    vs_spec_drafter_free(d);
    vs_spec_log_free(&log);
    vs_spec_log_free(&base);
    st_free_engine(&e);
}

/* Small caches: a row whose cache fills proposes nothing; output stays lossless. */
static void test_small_cache(fixture *f) {
    vs_error err = {0};
    st_engine e = st_make_engine(f->target, 256);
    vs_draft_ens_opts o;
    vs_draft_ens_opts_default(&o);
    VT_REQUIRE(vs_ens_inputs_parse("mt", o.inputs, &o.n_inputs, &err) == VS_OK, "%s", err.msg);
    o.proj = vs_mmproj_projector(f->dm_rel);
    o.weights.policy = VS_ENS_INV_KL;
    const vs_spec_prompt *p = &f->mp[1].p; /* one image: M's prompt is the longest */
    o.n_ctx = (int32_t)vs_spec_prompt_rows(p) + 6;
    vs_spec_drafter *d = vs_draft_ens_new(f->draft_rel, f->target, &o, &err);
    VT_REQUIRE(d, "%s", err.msg);
    vs_spec_log log, base;
    vs_spec_log_init(&log), vs_spec_log_init(&base);
    VT_REQUIRE(gen(&e, d, p, 5, 30, &log, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(gen(&e, NULL, p, 0, 30, &base, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(st_same_tokens(&log, &base, false), "full draft cache: lossless");
    int empty = 0;
    for (int b = 0; b < log.n_blocks; b++) empty += log.blocks[b].n_draft == 0;
    VT_CHECK(empty > 0, "blocks without drafts once the cache is full (%d)", empty);
    vs_spec_drafter_free(d);
    vs_spec_log_free(&log), vs_spec_log_free(&base);
    st_free_engine(&e);
}

/* ------------------------------------------------------------------------------------------------
 * CLI: generate with ensembles (captions file, captioner thread, trace), plot weights, bad input */

static void test_cli(void) {
    if (access(vt_cli(), X_OK) != 0) {
        printf("SKIP: CLI checks: %s not found (set VLMSPEC_BIN)\n", vt_cli());
        return;
    }
    vs_lm *t = make_model(64, 2, 4, 128, V96, 0.15f, 111, 512, "cli-t.gguf");
    vs_lm *d = make_model(64, 2, 4, 128, V96, 0.12f, 111, 512, "cli-d.gguf");
    vs_lm_free(t), vs_lm_free(d);
    vs_mmproj *tm = make_proj(32, 64, 64, true, 0, 3, "cli-t-mmproj.gguf");
    vs_mmproj *dm =
        make_proj(32, 64, 64, false, vs_vision_tower_hash(vs_mmproj_tower(tm)), 4, "cli-d-mmproj.gguf");
    vs_mmproj_free(tm), vs_mmproj_free(dm);
    char T[512], D[512], TM[512], DM[512], I0[512], I1[512], CAP[512], TR[512], SVG[512], OUT[512];
    snprintf(T, sizeof(T), "%s", st_tmp_path("cli-t.gguf"));
    snprintf(D, sizeof(D), "%s", st_tmp_path("cli-d.gguf"));
    snprintf(TM, sizeof(TM), "%s", st_tmp_path("cli-t-mmproj.gguf"));
    snprintf(DM, sizeof(DM), "%s", st_tmp_path("cli-d-mmproj.gguf"));
    snprintf(CAP, sizeof(CAP), "%s", st_tmp_path("cli-captions.txt"));
    snprintf(TR, sizeof(TR), "%s", st_tmp_path("cli-trace.tsv"));
    snprintf(SVG, sizeof(SVG), "%s", st_tmp_path("cli-weights.svg"));
    snprintf(OUT, sizeof(OUT), "%s", st_tmp_path("cli-out.txt"));
    for (int k = 0; k < 2; k++) {
        char *p = k ? I1 : I0, name[32];
        snprintf(name, sizeof(name), "cli-img%d.ppm", k);
        snprintf(p, 512, "%s", st_tmp_path(name));
        FILE *fp = fopen(p, "wb");
        VT_REQUIRE(fp, "image file");
        fprintf(fp, "P6\n20 17\n255\n");
        for (int i = 0; i < 20 * 17 * 3; i++) fputc((i * (7 + 5 * k)) % 251, fp);
        fclose(fp);
    }
    write_file(CAP, "cli-img1.ppm\tsome dots\ncli-img0.ppm\ta gradient\n");
    const char *P = "'USER: <image>\nwhat <image> is it? ASSISTANT:'";
    /* MTCP, inverse KL, captions from a file, trace; a fixed draft length (these random models are never as
     * sure as the default adaptive length wants, and would draft nothing) */
    int rc =
        vt_run("%s generate --raw -m %s --mmproj %s -md %s --mmproj-draft %s --draft 4 --draft-p-min 0 "
               "--draft-mode m,t,c,p --weights inv-kl --weights-tau 0.5 --history 8 --pool 2 --captions %s --trace-weights %s "
               "--image %s --image %s -p %s -n 24 --temp 0 --compare --json - > %s 2>&1",
               vt_cli(), T, TM, D, DM, CAP, TR, I0, I1, P, OUT);
    VT_CHECK(rc == 0 && st_file_has(OUT, "\"identical\":true") &&
                 st_file_has(OUT, "\"draft_mode\":\"m,t,c,p\"") && st_file_has(OUT, "\"last_weights\"") &&
                 st_file_has(OUT, "\"weights\":\"inv-kl\""),
             "CLI MTCP run (rc %d)", rc);
    VT_CHECK(st_file_has(TR, "# vlmspec weight trace 1") && st_file_has(TR, "w_p"), "trace written");
    rc = vt_run("%s plot weights %s -o %s > %s 2>&1", vt_cli(), TR, SVG, OUT);
    VT_CHECK(rc == 0 && st_file_has(SVG, "<svg") && st_file_has(SVG, "w_m") && st_file_has(OUT, "blocks"),
             "plot weights (rc %d)", rc);
    rc = vt_run("%s plot weights %s -o %s --all-inputs --input t > %s 2>&1", vt_cli(), TR, SVG, OUT);
    VT_CHECK(rc == 0 && st_file_has(SVG, "w_c"), "plot weights --all-inputs (rc %d)", rc);
    /* MTC with the drafter captioning on its own thread, grid weights, text statistics */
    rc = vt_run(
        "%s generate --raw -m %s --mmproj %s -md %s --mmproj-draft %s --draft 3 --draft-p-min 0 --draft-mode mtc --weights grid "
        "--image %s --image %s -p %s -n 16 --temp 0 --compare > %s 2>&1",
        vt_cli(), T, TM, D, DM, I0, I1, P, OUT);
    VT_CHECK(rc == 0 && st_file_has(OUT, "is identical to") && st_file_has(OUT, "captions:") &&
                 st_file_has(OUT, "own thread"),
             "CLI MTC captioner run (rc %d)", rc);
    /* sampling with an ensemble */
    rc =
        vt_run("%s generate --raw -m %s --mmproj %s -md %s --mmproj-draft %s --draft-p-min 0 --draft-mode m,t --weights static:2,1 "
               "--image %s --image %s -p %s -n 12 --temp 0.8 --seed 3 > %s 2>&1",
               vt_cli(), T, TM, D, DM, I0, I1, P, OUT);
    VT_CHECK(rc == 0 && st_file_has(OUT, "tau"), "CLI sampling ensemble run (rc %d)", rc);
    /* EAGLE-2 trees: by flags over an ensemble, by a method name with a shape */
    rc = vt_run("%s generate --raw -m %s --mmproj %s -md %s --mmproj-draft %s --draft 4 --draft-mode m,t "
                "--tree-top-k 3 --tree-nodes 12 --image %s --image %s -p %s -n 16 --temp 0 --compare > %s 2>&1",
                vt_cli(), T, TM, D, DM, I0, I1, P, OUT);
    VT_CHECK(rc == 0 && st_file_has(OUT, "is identical to") && st_file_has(OUT, "tree:"),
             "CLI EAGLE-2 ensemble run (rc %d)", rc);
    rc = vt_run("%s generate --raw -m %s --mmproj %s -md %s --mmproj-draft %s --draft 3 --method tabed-mt@k2n6 "
                "--image %s --image %s -p %s -n 16 --temp 0 --compare > %s 2>&1",
                vt_cli(), T, TM, D, DM, I0, I1, P, OUT);
    VT_CHECK(rc == 0 && st_file_has(OUT, "is identical to") && st_file_has(OUT, "tree:"),
             "CLI --method tabed-mt@k2n6 (rc %d)", rc);
    const char *bad_tree[][2] = {{"--draft-mode m,t --tree-nodes 5", "give --tree-top-k"},
                                 {"--draft-mode m,t --tree-top-k 2 --tree-width 2", "exclude each other"},
                                 {"--method mt@k2 --tree-width 2", "names its tree shape"},
                                 {"--method mt@k0", "unknown"}};
    for (size_t k = 0; k < VS_ARRAY_LEN(bad_tree); k++) {
        rc = vt_run("%s generate --raw -m %s -md %s %s -p x > %s 2>&1", vt_cli(), T, D, bad_tree[k][0], OUT);
        VT_CHECK(rc == 2 && st_file_has(OUT, bad_tree[k][1]), "CLI %s (rc %d)", bad_tree[k][0], rc);
    }
    /* the adaptive draft length is for chains; out of range is a usage error */
    rc = vt_run("%s generate --raw -m %s -md %s --tree-width 2 --draft-p-min 0.5 -p x > %s 2>&1", vt_cli(), T, D, OUT);
    VT_CHECK(rc == 2 && st_file_has(OUT, "for chains"), "CLI --draft-p-min with a tree (rc %d)", rc);
    rc = vt_run("%s generate --raw -m %s -md %s --method t@k2p50 -p x -n 2 > %s 2>&1", vt_cli(), T, D, OUT);
    VT_CHECK(rc != 0 && st_file_has(OUT, "chains"), "CLI t@k2p50 (rc %d)", rc);
    rc = vt_run("%s generate --raw -m %s -md %s --draft-p-min 1.5 -p x > %s 2>&1", vt_cli(), T, D, OUT);
    VT_CHECK(rc == 2 && st_file_has(OUT, "--draft-p-min"), "CLI --draft-p-min 1.5 (rc %d)", rc);
    rc = vt_run("%s generate --raw -m %s --draft-p-min 0.3 -p x > %s 2>&1", vt_cli(), T, OUT);
    VT_CHECK(rc == 2 && st_file_has(OUT, "-md"), "CLI --draft-p-min without a drafter (rc %d)", rc);
    /* bad input */
    rc = vt_run("%s generate --raw -m %s -md %s --draft-mode m,t --weights tabed -p x > %s 2>&1", vt_cli(), T, D,
                OUT);
    VT_CHECK(rc == 2 && st_file_has(OUT, "unknown weight policy 'tabed'"), "CLI unknown policy (rc %d)", rc);
    rc = vt_run("%s generate --raw -m %s --draft-mode m,t,x -md %s -p x > %s 2>&1", vt_cli(), T, D, OUT);
    VT_CHECK(rc == 2 && st_file_has(OUT, "unknown input 'x'"), "CLI unknown input (rc %d)", rc);
    rc = vt_run("%s generate --raw -m %s --draft-mode m,t -p x > %s 2>&1", vt_cli(), T, OUT);
    VT_CHECK(rc == 2 && st_file_has(OUT, "draft model"), "CLI ensemble without a draft model (rc %d)", rc);
    rc = vt_run("%s generate --raw -m %s --mmproj %s -md %s --mmproj-draft %s --draft-mode t,p --pool 9 --image %s "
                "-p '<image> x' -n 4 > %s 2>&1",
                vt_cli(), T, TM, D, DM, I0, OUT);
    VT_CHECK(rc == 1 && st_file_has(OUT, "pool size 9 is larger"), "CLI pool larger than the grid (rc %d)",
             rc);
    write_file(CAP, "cli-img0.ppm\ta gradient\n");
    rc = vt_run(
        "%s generate --raw -m %s --mmproj %s -md %s --draft-mode t,c --captions %s --image %s " /* no projector read */
        "--image %s -p %s -n 4 > %s 2>&1",
        vt_cli(), T, TM, D, CAP, I0, I1, P, OUT);
    VT_CHECK(rc == 1 && st_file_has(OUT, "no caption for image 1"), "CLI missing caption (rc %d)", rc);
    rc = vt_run(
        "%s generate --raw -m %s --mmproj %s -md %s --draft-mode t,c --image %s -p '<image> x' -n 4 > %s 2>&1",
        vt_cli(), T, TM, D, I0, OUT);
    /* a flag combination that cannot work: a usage error before anything loads */
    VT_CHECK(rc == 2 && st_file_has(OUT, "--captions"), "CLI captions without a source (rc %d)", rc);
    rc = vt_run("%s plot weights %s > %s 2>&1", vt_cli(), TR, OUT);
    VT_CHECK(rc == 2 && st_file_has(OUT, "-o"), "plot without -o (rc %d)", rc);
    rc = vt_run("%s plot weights %s -o %s > %s 2>&1", vt_cli(), CAP, SVG, OUT);
    VT_CHECK(rc == 1 && st_file_has(OUT, "not a vlmspec weight trace"), "plot of a non-trace (rc %d)", rc);
    rc = vt_run("%s plot weights %s -o %s --request 7 > %s 2>&1", vt_cli(), TR, SVG, OUT);
    VT_CHECK(rc == 1 && st_file_has(OUT, "no block of request 7"), "plot of a missing request (rc %d)", rc);
    rc = vt_run("%s plot --help > %s 2>&1", vt_cli(), OUT);
    VT_CHECK(rc == 0 && st_file_has(OUT, "--all-inputs"), "plot --help");
    rc = vt_run("%s generate --help > %s 2>&1", vt_cli(), OUT);
    VT_CHECK(rc == 0 && st_file_has(OUT, "--weights POLICY") && st_file_has(OUT, "--trace-weights"),
             "generate --help lists the ensemble flags");
}

/* ------------------------------------------------------------------------------------------------
 * lossless sampling: q_ens drafters against the exact target-only distribution (V = 16) */

#define SV ST_SV
#define NCAT ST_NCAT
#define EOS ST_EOS

typedef struct sconfig {
    const char *name, *inputs, *policy;
    float temperature, top_p;
    int top_k, gamma;
    bool greedy_draft, broken;
    int width; /* token-tree width (0 / 1: chains) */
    int topk, nodes; /* EAGLE-2 trees (0: off) */
} sconfig;

static double run_sampling(vs_lm *target, vs_lm *draft, const vs_vision_projector *dproj,
                           const vs_spec_prompt *pr, const sconfig *c, int n, double *accept_rate) {
    vs_error err = {0};
    vs_sampler_params sp = vs_sampler_params_default();
    sp.temperature = c->temperature, sp.top_p = c->top_p, sp.top_k = c->top_k;
    double *pd = malloc(sizeof(double) * NCAT);
    st_exact_distribution(target, &sp, pr, pd);
    vs_tokenizer *tok = vs_tokenizer_from_gguf(vs_lm_gguf(target), &err);
    VT_REQUIRE(tok && vs_tokenizer_eos(tok) == EOS, "tokenizer with EOS %d", EOS);
    vs_spec_config ec = {.n_ctx = 48, .tok = tok};
    vs_spec *eng = vs_spec_new(target, &ec, &err);
    VT_REQUIRE(eng, "%s", err.msg);
    vs_draft_ens_opts o;
    vs_draft_ens_opts_default(&o);
    VT_REQUIRE(vs_ens_inputs_parse(c->inputs, o.inputs, &o.n_inputs, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_ens_weights_parse(c->policy, &o.weights, &err) == VS_OK, "%s", err.msg);
    o.proj = dproj, o.pool_k = 2, o.greedy = c->greedy_draft, o.n_ctx = 48, o.tree_width = c->width;
    o.tree_top_k = c->topk, o.tree_nodes = c->nodes;
    vs_spec_drafter *d = vs_draft_ens_new(draft, target, &o, &err);
    VT_REQUIRE(d, "%s", err.msg);
    vs_spec_params par = vs_spec_params_default();
    par.gamma = c->gamma;
    par.n_predict = 3;
    par.sampling = sp;
    par.reuse_prefix = true;
    par.debug_break_residual = c->broken;
    int64_t *cnt = calloc(NCAT, sizeof(int64_t));
    int64_t drafted = 0, accepted = 0;
    vs_spec_log log;
    vs_spec_log_init(&log);
    for (int i = 0; i < n; i++) {
        par.sampling.seed = 0xE45E0000ull + (uint64_t)i * 7919u;
        VT_REQUIRE(vs_spec_generate(eng, d, pr, &par, NULL, NULL, &log, &err) == VS_OK, "%s", err.msg);
        VT_REQUIRE(log.n_tokens >= 1 && log.n_tokens <= 3, "sample %d has %d tokens", i, log.n_tokens);
        VT_REQUIRE(log.n_tokens == 3 || log.tokens[log.n_tokens - 1] == EOS, "short path without EOS");
        cnt[st_cat_of(log.tokens, log.n_tokens)]++;
        for (int b = 0; b < log.n_blocks; b++)
            drafted += log.blocks[b].n_eval, accepted += log.blocks[b].n_accept;
    }
    *accept_rate = drafted ? (double)accepted / (double)drafted : 0;
    double chi2;
    int bins;
    int64_t impossible;
    double p = st_chi2_test(pd, cnt, n, &chi2, &bins, &impossible);
    printf("  %-44s n %d, %d bins, chi2 %.1f, p = %.3g, impossible %lld, acceptance %.3f\n", c->name, n, bins,
           chi2, p, (long long)impossible, *accept_rate);
    vs_spec_log_free(&log);
    free(cnt);
    free(pd);
    vs_spec_drafter_free(d);
    vs_spec_free(eng);
    vs_tokenizer_free(tok);
    return p;
}

static void test_sampling(double scale) {
    const int N = (int)(40000 * scale);
    vs_lm *target = make_model(32, 1, 2, 64, SV, 0.6f, 101, 64, "ens-target16.gguf");
    vs_lm *draft = make_model(32, 1, 2, 64, SV, 0.45f, 101, 64, "ens-draft16.gguf");
    /* one projector-only mmproj, shared by the target and the drafter (as a drafter trained to the target's
     * features would be): M sees nearly the target's view, P a pooled one, T none */
    vs_mmproj *tproj = make_proj(16, 32, 32, false, 0, 21, "ens-t16-mmproj.gguf");
    vs_mmproj *dproj = tproj;
    vs_vision_features feat;
    memset(&feat, 0, sizeof(feat));
    feat.grid_h = feat.grid_w = 2, feat.width = 16;
    feat.data = vs_malloc(sizeof(float) * 4 * 16);
    vs_rng r;
    vs_rng_seed(&r, 77);
    for (int i = 0; i < 64; i++) feat.data[i] = vs_rng_normal(&r);
    const vs_vision_features *fp[1] = {&feat};
    float *trows = NULL;
    int64_t n_trows = 0;
    vs_error err = {0};
    VT_REQUIRE(vs_vision_embed(vs_mmproj_projector(tproj), NULL, &feat, 1, &trows, &n_trows, &err) == VS_OK,
               "%s", err.msg);
    const int32_t t0[2] = {1, 7}, t1[2] = {11, 4};
    vs_spec_segment seg[3] = {{.kind = VS_SPEC_SEG_TEXT, .n = 2, .tokens = t0},
                              {.kind = VS_SPEC_SEG_IMAGE, .n = (int32_t)n_trows, .embd = trows, .image = 0},
                              {.kind = VS_SPEC_SEG_TEXT, .n = 2, .tokens = t1}};
    vs_spec_prompt pr = {.seg = seg, .n_seg = 3, .images = fp, .n_images = 1};
    const sconfig cfgs[] = {
        {"MT static, T 1.0, gamma 2", "mt", "static", 1.0f, 1.0f, 0, 2, false, false, 1, 0, 0},
        {"MTP inv-kl, T 0.7, top-p 0.9, gamma 2", "mtp", "inv-kl", 0.7f, 0.9f, 0, 2, false, false, 1, 0, 0},
        {"MT grid, T 1.0, top-k 6, gamma 3", "mt", "grid", 1.0f, 1.0f, 6, 3, false, false, 1, 0, 0},
        {"MTP random, T 1.5, top-p 0.8, gamma 1", "mtp", "random", 1.5f, 0.8f, 0, 1, false, false, 1, 0, 0},
        {"MT static 3:1, greedy drafts, T 1.0, gamma 2", "mt", "static:3,1", 1.0f, 1.0f, 0, 2, true, false,
         1, 0, 0},
        /* token trees over q_ens: sampled siblings without replacement, deterministic top-w siblings */
        {"MT static, tree width 2, T 1.0, gamma 2", "mt", "static", 1.0f, 1.0f, 0, 2, false, false, 2, 0, 0},
        {"MTP inv-kl, tree width 3, T 0.7, top-p 0.9", "mtp", "inv-kl", 0.7f, 0.9f, 0, 2, false, false, 3, 0, 0},
        {"MT grid, tree width 3, greedy drafts, gamma 2", "mt", "grid", 1.0f, 1.0f, 0, 2, true, false, 3, 0, 0},
        /* EAGLE-2 trees: deterministic top-k children, pruned by score */
        {"MT static, EAGLE-2 top-k 3, 5 nodes, T 1.0", "mt", "static", 1.0f, 1.0f, 0, 2, false, false, 1, 3, 5},
        {"MTP inv-kl, EAGLE-2 top-k 2, T 0.7, top-p 0.9", "mtp", "inv-kl", 0.7f, 0.9f, 0, 3, false, false, 1, 2, 0},
    };
    for (size_t i = 0; i < VS_ARRAY_LEN(cfgs); i++) {
        double acc;
        /* the width-3 trees with half the samples (time) */
        const int n = cfgs[i].width > 2 || cfgs[i].topk > 2 ? N / 2 : N;
        double p = run_sampling(target, draft, vs_mmproj_projector(dproj), &pr, &cfgs[i], n, &acc);
        VT_CHECK(p > 0.001, "%s: speculative sampling differs from target-only sampling (p = %g)",
                 cfgs[i].name, p);
        VT_CHECK(acc > 0.05 && acc < 0.95, "%s: acceptance %g does not exercise both branches", cfgs[i].name,
                 acc);
    }
    const sconfig broken = {
        "BROKEN residual (must fail), MT static", "mt", "static", 1.0f, 1.0f, 0, 2, false, true, 1, 0, 0};
    double acc;
    double p = run_sampling(target, draft, vs_mmproj_projector(dproj), &pr, &broken, N / 3, &acc);
    VT_CHECK(p < 1e-6, "the test did not detect the broken residual (p = %g)", p);
    const sconfig broken_tree = {
        "BROKEN residual (must fail), MT tree width 3", "mt", "static", 1.0f, 1.0f, 0, 2, false, true, 3, 0, 0};
    p = run_sampling(target, draft, vs_mmproj_projector(dproj), &pr, &broken_tree, N / 3, &acc);
    VT_CHECK(p < 1e-6, "the test did not detect the broken tree residual (p = %g)", p);
    const sconfig broken_e2 = {"BROKEN residual (must fail), MT EAGLE-2 top-k 3", "mt", "static", 1.0f, 1.0f, 0, 2,
                               false, true, 1, 3, 5};
    p = run_sampling(target, draft, vs_mmproj_projector(dproj), &pr, &broken_e2, N / 3, &acc);
    VT_CHECK(p < 1e-6, "the test did not detect the broken residual in an EAGLE-2 tree (p = %g)", p);
    vs_free(trows);
    vs_vision_features_free(&feat);
    vs_mmproj_free(tproj);
    vs_lm_free(draft), vs_lm_free(target);
}

/* ------------------------------------------------------------------------------------------------
 * benchmark (report only): one batched draft step of 4 rows vs 1 row after a 600-position prompt */

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Seconds (10th percentile) of one forward of m rows, row s the next position of its own sequence after
 * P[s] cached rows; flags: the products' vs_lm_out.mm_flags (the ensemble's for m rows, see
 * draft_ensemble.c). */
static double step_time_rows(vs_lm *lm, vs_threadpool *tp, int m, const int *P, vs_type kvt, int reps,
                             unsigned flags) {
    vs_error err = {0};
    const int V = vs_lm_cfg(lm)->n_vocab;
    int pmax = 0;
    for (int s = 0; s < m; s++) pmax = VS_MAX(pmax, P[s]);
    vs_kv *kv = vs_lm_kv_new(lm, 4, pmax + 8, kvt, &err);
    VT_REQUIRE(kv, "%s", err.msg);
    vs_lm_row *rows = calloc((size_t)pmax, sizeof(vs_lm_row));
    vs_rng r;
    vs_rng_seed(&r, 1);
    for (int s = 0; s < m; s++) {
        for (int i = 0; i < P[s]; i++)
            rows[i] = (vs_lm_row){.token = 3 + (int32_t)vs_rng_below(&r, V - 3), .seq = s, .pos = i};
        VT_REQUIRE(vs_lm_forward(lm, kv, tp, rows, P[s], NULL, &err) == VS_OK, "%s", err.msg);
    }
    float *logits = malloc(sizeof(float) * 4 * V);
    double *t = malloc(sizeof(double) * (size_t)reps);
    for (int k = 0; k < reps; k++) {
        vs_lm_row st[4];
        for (int s = 0; s < m; s++)
            st[s] = (vs_lm_row){.token = 5 + k % 50, .seq = s, .pos = P[s], .want_logits = true};
        vs_lm_out o = {.logits = logits, .attn_layer = -1, .mm_flags = flags};
        double a = vs_time_now();
        VT_REQUIRE(vs_lm_forward(lm, kv, tp, st, m, &o, &err) == VS_OK, "%s", err.msg);
        t[k] = vs_time_now() - a;
        for (int s = 0; s < m; s++) vs_kv_seq_truncate(kv, s, P[s], &err);
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_d);
    double med = t[reps / 10]; /* 10th percentile: the machine is shared, slower runs are other load */
    free(t);
    free(logits);
    free(rows);
    vs_kv_free(kv);
    return med;
}

/* step_time_rows with every row after P cached rows and the default products */
static double step_time(vs_lm *lm, vs_threadpool *tp, int m, int P, vs_type kvt, int reps) {
    const int Ps[4] = {P, P, P, P};
    return step_time_rows(lm, tp, m, Ps, kvt, reps, VS_MM_DEFAULT);
}

/* One ensemble drafter of `set` over lm (self-drafting: the target is lm too), greedy, gamma 5, 120 tokens
 * of prompt pr, the fastest of `reps` runs (other load only adds time): its mean draft step and what
 * the last run did. caps: the caption source (the caller's). */
typedef struct bench_result {
    double tq, tau, tp, t_draft;
    int blocks;
    int64_t steps, forwards;
    int32_t rows, plen[VS_ENS_MAX_ROWS]; /* cached positions per row after the request */
} bench_result;

static bench_result bench_ens(vs_lm *lm, const char *set, const vs_vision_projector *proj, vs_caption_src *caps,
                              vs_threadpool *tp, const vs_spec_prompt *pr, int reps) {
    vs_error err = {0};
    vs_draft_ens_opts o;
    vs_draft_ens_opts_default(&o);
    VT_REQUIRE(vs_ens_inputs_parse(set, o.inputs, &o.n_inputs, &err) == VS_OK, "%s", err.msg);
    o.captions = caps, o.proj = proj, o.tp = tp, o.n_ctx = 1024;
    o.kv_type = g_bench_kv;
    vs_spec_drafter *d = vs_draft_ens_new(lm, lm, &o, &err);
    VT_REQUIRE(d, "%s", err.msg);
    vs_tokenizer *tok = vs_tokenizer_from_gguf(vs_lm_gguf(lm), &err);
    vs_spec_config ec = {.n_ctx = 1024, .tp = tp, .tok = tok};
    vs_spec *eng = vs_spec_new(lm, &ec, &err);
    VT_REQUIRE(eng, "%s", err.msg);
    vs_spec_params par = vs_spec_params_default();
    par.gamma = 5, par.n_predict = 120, par.sampling.temperature = 0, par.ignore_eos = true;
    bench_result b = {0};
    for (int rep = 0; rep < reps; rep++) {
        vs_spec_log log;
        vs_spec_log_init(&log);
        VT_REQUIRE(vs_spec_generate(eng, d, pr, &par, NULL, NULL, &log, &err) == VS_OK, "%s", err.msg);
        vs_spec_stats st;
        vs_spec_stats_compute(&log, NULL, &st);
        b.tq = rep == 0 || st.tq < b.tq ? st.tq : b.tq;
        b.tau = st.tau, b.tp = st.tp, b.blocks = log.n_blocks, b.t_draft = 0, b.steps = 0;
        for (int i = 0; i < log.n_blocks; i++) {
            b.t_draft += log.blocks[i].t_draft;
            b.steps += log.blocks[i].n_steps;
        }
        vs_spec_log_free(&log);
    }
    b.forwards = vs_draft_ens_get_stats(d)->forwards;
    b.rows = vs_draft_ens_rows(d);
    for (int32_t i = 0; i < b.rows; i++) b.plen[i] = vs_kv_seq_len(vs_draft_ens_kv(d), i);
    vs_spec_free(eng);
    vs_tokenizer_free(tok);
    vs_spec_drafter_free(d);
    return b;
}

/* The draft step of M alone against the batch M, T, C, P on a multimodal prompt whose M row is 600
 * positions: NIMG images of GRID x GRID patches and 24 text tokens. TABED's setting is one LLaVA image of
 * 576 rows (NIMG 1, GRID 24); the world's pictures are 64 rows each, so 9 images of 8 x 8 patches give
 * the same M row with longer T, C and P rows. T turns each image into "\n", C into "image: " + a caption,
 * P pools 2 x 2 (GRID^2 / 4 rows per image); self-drafting, greedy, gamma 5. */
static void bench_multimodal(vs_lm *lm, vs_mmproj *bp, vs_threadpool *tp, const int NIMG, const int GRID) {
    enum { NTXT = 24, MAXIMG = 9 };
    vs_error err = {0};
    const vs_vision_projector *proj = vs_mmproj_projector(bp);
    const int V = vs_lm_cfg(lm)->n_vocab, fw = 32; /* make_proj(32, ...): feature width 32 */
    vs_vision_features feat[MAXIMG];
    const vs_vision_features *fp[MAXIMG];
    float *rows[MAXIMG];
    int64_t n_rows[MAXIMG];
    const char *caps_txt[MAXIMG];
    vs_rng r;
    vs_rng_seed(&r, 5);
    for (int i = 0; i < NIMG; i++) {
        memset(&feat[i], 0, sizeof(feat[i]));
        feat[i].grid_h = feat[i].grid_w = GRID, feat[i].width = fw;
        feat[i].data = vs_malloc(sizeof(float) * GRID * GRID * fw);
        for (int j = 0; j < GRID * GRID * fw; j++) feat[i].data[j] = vs_rng_normal(&r);
        fp[i] = &feat[i];
        VT_REQUIRE(vs_vision_embed(proj, NULL, &feat[i], 1, &rows[i], &n_rows[i], &err) == VS_OK, "%s",
                   err.msg);
        caps_txt[i] = "red circle, blue squares";
    }
    int32_t txt[NTXT];
    for (int i = 0; i < NTXT; i++) txt[i] = i == 0 ? 1 : 3 + (int32_t)vs_rng_below(&r, (uint32_t)V - 3);
    vs_spec_segment seg[2 * MAXIMG + 1];
    int ns = 0;
    seg[ns++] = (vs_spec_segment){.kind = VS_SPEC_SEG_TEXT, .n = NTXT / 2, .tokens = txt};
    for (int i = 0; i < NIMG; i++)
        seg[ns++] = (vs_spec_segment){.kind = VS_SPEC_SEG_IMAGE, .n = (int32_t)n_rows[i], .embd = rows[i],
                                      .image = i};
    seg[ns++] = (vs_spec_segment){.kind = VS_SPEC_SEG_TEXT, .n = NTXT - NTXT / 2, .tokens = txt + NTXT / 2};
    vs_spec_prompt pr = {.seg = seg, .n_seg = ns, .images = fp, .n_images = NIMG};
    /* M and MTCP alternate for ROUNDS rounds (the machine's speed drifts), then T once: the fastest run of
     * each (other load only adds time) and the median of the rounds' own ratios */
    enum { ROUNDS = 7 };
    static const char *const sets[3] = {"m", "mtcp", "t"};
    double tq[3] = {1e9, 1e9, 1e9}, rr[ROUNDS];
    int plen[2][4] = {{0}};
    for (int round = 0; round < ROUNDS; round++) {
        double t[2];
        for (int k = 0; k < 3; k++) {
            if (k == 2 && round < ROUNDS - 1) continue;
            vs_caption_src *caps = vs_caption_src_new_texts(caps_txt, NIMG, &err);
            VT_REQUIRE(caps, "%s", err.msg);
            bench_result r = bench_ens(lm, sets[k], proj, caps, tp, &pr, 1);
            vs_caption_src_free(caps);
            tq[k] = VS_MIN(tq[k], r.tq);
            if (k < 2) t[k] = r.tq;
            if (round < ROUNDS - 1) continue;
            printf("  [%s] rows %d, cached positions per row after the request:", sets[k], r.rows);
            for (int32_t i = 0; i < r.rows; i++) printf(" %d", r.plen[i]);
            printf("\n");
            for (int32_t i = 0; k < 2 && i < r.rows && i < 4; i++) plen[k][i] = r.plen[i];
        }
        rr[round] = t[1] / t[0];
    }
    qsort(rr, ROUNDS, sizeof(double), cmp_d);
    /* the forward alone at the rows' final lengths, 1 and 4 rows alternating, with the products the ensemble
     * uses (one thread and m >= 2: the AMX tiles) */
    const unsigned f4 = vs_threadpool_size(tp) == 1 ? VS_MM_AMX_BF16 : VS_MM_DEFAULT;
    double f[2] = {1e9, 1e9}, fr[5];
    for (int round = 0; round < 5; round++) {
        double a = step_time_rows(lm, tp, 1, plen[0], g_bench_kv, 200, VS_MM_DEFAULT);
        double b = step_time_rows(lm, tp, 4, plen[1], g_bench_kv, 200, f4);
        f[0] = VS_MIN(f[0], a), f[1] = VS_MIN(f[1], b), fr[round] = b / a;
    }
    qsort(fr, 5, sizeof(double), cmp_d);
    printf("  forward alone at those lengths: 4 rows / 1 row: median of 5 rounds %.2f (range %.2f-%.2f; fastest: "
           "1 row %.3f ms, 4 rows %.3f ms)\n",
           fr[2], fr[0], fr[4], f[0] * 1e3, f[1] * 1e3);
    printf("  multimodal prompt (%d image%s of %d x %d, M row %d positions, %s drafter cache): draft step MTCP / M: "
           "median of %d rounds %.2f (range %.2f-%.2f; fastest runs: M %.3f ms, MTCP %.3f ms, T alone %.3f ms)\n",
           NIMG, NIMG > 1 ? "s" : "", GRID, GRID, NTXT + NIMG * GRID * GRID, vs_type_name(g_bench_kv), ROUNDS,
           rr[ROUNDS / 2], rr[0], rr[ROUNDS - 1], tq[0] * 1e3, tq[1] * 1e3, tq[2] * 1e3);
    for (int i = 0; i < NIMG; i++) vs_free(rows[i]), vs_vision_features_free(&feat[i]);
}

static int bench(int threads, int E, int L) {
    vs_error err = {0};
    vs_threadpool *tp = threads > 1 ? vs_threadpool_new(threads, &err) : NULL;
    const int V = 2048, P = 600, REPS = E > 256 ? 60 : 300;
    vs_lm *lm = NULL;
    if (g_bench_model) {
        lm = vs_lm_load(g_bench_model, &err);
        VT_REQUIRE(lm, "bench model: %s", err.msg);
        const vs_lm_config *mc = vs_lm_cfg(lm);
        VT_REQUIRE(mc->n_vocab == V, "bench model %s: vocabulary %d, the bench's prompts need %d", g_bench_model,
                   mc->n_vocab, V);
        E = mc->n_embd, L = mc->n_layer;
        g_model_type = mc->wtype;
    } else {
        lm = make_model(E, L, g_bench_heads, g_bench_ffn > 0 ? g_bench_ffn : 4 * E, V, 0.05f, 5, 1024,
                        "ens-bench.gguf");
    }
    vs_rng r;
    const vs_lm_config *bc = vs_lm_cfg(lm);
    printf("bench (threads %d; shared machine: noisy): %s (width %d, %d layers, %d / %d heads, "
           "SwiGLU %d, vocab %d, %s)\n",
           threads, g_bench_model ? g_bench_model : "random drafter-sized model", E, L, bc->n_head, bc->n_head_kv,
           bc->n_ff, V, vs_type_name(g_model_type));
    const int plens[3] = {16, 200, 600};
    const bool wide = E > 256; /* a wide model: only 600 positions, F16 KV, one pass (prefills are costly) */
    for (int pi = wide ? 2 : 0; !g_bench_mm_only && pi < 3; pi++)
        for (int kt = wide ? 1 : 0; kt < 3; kt++) {
            vs_type kvt = kt == 2 ? VS_TYPE_BF16 : kt ? VS_TYPE_F16 : VS_TYPE_F32;
            /* interleave to cancel drift: 1, 4, 1, 4 */
            double t1 = step_time(lm, tp, 1, plens[pi], kvt, REPS), t4 = step_time(lm, tp, 4, plens[pi], kvt, REPS);
            if (!wide) {
                t1 = VS_MIN(t1, step_time(lm, tp, 1, plens[pi], kvt, REPS));
                t4 = VS_MIN(t4, step_time(lm, tp, 4, plens[pi], kvt, REPS));
            }
            printf("  forward step after %3d positions, KV %-4s: 1 row %.3f ms, 4 rows %.3f ms: ratio %.2f\n",
                   plens[pi], vs_type_name(kvt), t1 * 1e3, t4 * 1e3, t4 / t1);
        }
    if (wide && !g_bench_mm_only) {
        vs_lm_free(lm);
        vs_threadpool_free(tp);
        return 0;
    }
    /* the whole draft step of the drafter (forward + per-row softmax + mixing), self-drafting so every block
     * drafts gamma tokens: T alone vs M, T, C, P on a text prompt (no images: four rows of 600 positions) */
    double tq[2] = {0, 0};
    vs_mmproj *bp = make_proj(32, 64, E, false, 0, 3, "ens-bench-mmproj.gguf");
    int32_t *pt = malloc(sizeof(int32_t) * P);
    vs_rng_seed(&r, 2);
    for (int i = 0; i < P; i++) pt[i] = 3 + (int32_t)vs_rng_below(&r, V - 3);
    vs_spec_segment seg = {.kind = VS_SPEC_SEG_TEXT, .n = P, .tokens = pt};
    vs_spec_prompt pr = {.seg = &seg, .n_seg = 1};
    for (int k = 0; !g_bench_mm_only && k < 2; k++) {
        vs_caption_src *caps = vs_caption_src_new_texts(NULL, 0, &err);
        VT_REQUIRE(caps, "%s", err.msg);
        bench_result b = bench_ens(lm, k ? "mtcp" : "t", vs_mmproj_projector(bp), caps, tp, &pr, 1);
        vs_caption_src_free(caps);
        tq[k] = b.tq;
        printf("  [%s] blocks %d, draft steps %lld, t_draft %.3f s, forwards %lld, tau %.2f, tp %.3f ms\n",
               k ? "mtcp" : "t", b.blocks, (long long)b.steps, b.t_draft, (long long)b.forwards, b.tau,
               b.tp * 1e3);
    }
    free(pt);
    if (!g_bench_mm_only)
        printf("  drafter step (forward + softmax + mix, greedy): 1 row %.3f ms, 4 rows %.3f ms: ratio %.2f\n",
               tq[0] * 1e3, tq[1] * 1e3, tq[1] / tq[0]);
    bench_multimodal(lm, bp, tp, 1, 24);
    bench_multimodal(lm, bp, tp, 9, 8);
    vs_mmproj_free(bp);
    vs_lm_free(lm);
    vs_threadpool_free(tp);
    return 0;
}

int main(int argc, char **argv) {
    /* bench [THREADS [WIDTH LAYERS [TYPE [KV [HEADS KV_HEADS FFN [mm]]]]]]: default 1 thread, width 160, 3 layers,
     * F32 weights, BF16 cache, 4 heads / 2 KV heads, SwiGLU 4 x width (the shipped drafter: 192 4 bf16 bf16
     * 6 2 512) */
    if (argc > 1 && !strcmp(argv[1], "bench")) {
        if (argc > 9)
            g_bench_heads = atoi(argv[7]), g_bench_kv_heads = atoi(argv[8]), g_bench_ffn = atoi(argv[9]);
        g_bench_mm_only = argc > 10 && !strcmp(argv[10], "mm");
        g_bench_model = g_bench_mm_only && argc > 11 ? argv[11] : NULL;
        static const char *const names[3] = {"f32", "f16", "bf16"};
        static const vs_type types[3] = {VS_TYPE_F32, VS_TYPE_F16, VS_TYPE_BF16};
        for (int i = 0; i < 3; i++) {
            if (argc > 5 && !strcmp(argv[5], names[i])) g_model_type = types[i];
            if (argc > 6 && !strcmp(argv[6], names[i])) g_bench_kv = types[i];
        }
        return bench(argc > 2 ? atoi(argv[2]) : 1, argc > 4 ? atoi(argv[3]) : 160, argc > 4 ? atoi(argv[4]) : 3);
    }
    /* an optional number scales the sampling test's sample count (the suite runs 1.0) */
    const double scale = argc > 1 ? atof(argv[1]) : 1.0;
    const double t0 = vs_time_now();
    fixture f;
    fixture_init(&f);
    test_lossless(&f);
    test_single_is_draft_lm(&f);
    test_adaptation(&f);
    test_eagle2_self(&f);
    test_captioner(&f);
    test_captions_file();
    test_bad_input(&f);
    test_small_cache(&f);
    fixture_free(&f);
    test_cli();
    printf("  greedy parts: %.1f s\n", vs_time_now() - t0);
    test_sampling(scale > 0 ? scale : 1.0);
    printf("ensemble: %.1f s\n", vs_time_now() - t0);
    return vt_finish("ensemble");
}
