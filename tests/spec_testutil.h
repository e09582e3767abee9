/* spec_testutil: helpers shared by the speculative-decoding tests (test_spec.c, test_spec_sampling.c,
 * test_ensemble.c), header-only (static inline: a test that does not use one gets no warning).
 *   - scratch paths, an engine with its tokenizer, log comparison, file search;
 *   - the rows a drafter evaluated and rolled back (chains and width-d trees);
 *   - the sampling harness: the exact target-only law of the first 3 tokens on a V = 16 model
 *     (enumerating all 16^3 paths; EOS ends a path) and the chi-square test of sampled counts against it. */
#ifndef VS_SPEC_TESTUTIL_H
#define VS_SPEC_TESTUTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spec.h"
#include "testutil.h"
#include "tokenizer.h"

/* ------------------------------------------------------------------------------------------------
 * scratch files, engine, logs */

/* name inside the test's scratch directory (16 rotating buffers) */
static inline const char *st_tmp_path(const char *name) {
    static char buf[16][512];
    static int k;
    char *p = buf[k++ % 16];
    snprintf(p, 512, "%s/%s", vt_tmpdir(), name);
    return p;
}

/* An engine over a target with its tokenizer (EOS) and a cache of n_ctx rows. */
typedef struct st_engine {
    vs_spec *s;
    vs_tokenizer *tok;
    vs_lm *lm; /* the target (borrowed) */
} st_engine;

static inline st_engine st_make_engine(vs_lm *target, int n_ctx) {
    vs_error err = {0};
    st_engine e;
    e.tok = vs_tokenizer_from_gguf(vs_lm_gguf(target), &err);
    VT_REQUIRE(e.tok, "tokenizer: %s", err.msg);
    vs_spec_config c = {.n_ctx = n_ctx, .kv_type = VS_TYPE_F32, .tok = e.tok};
    e.s = vs_spec_new(target, &c, &err);
    VT_REQUIRE(e.s, "engine: %s", err.msg);
    e.lm = target;
    return e;
}

static inline void st_free_engine(st_engine *e) {
    vs_spec_free(e->s);
    vs_tokenizer_free(e->tok);
}

/* The same generated tokens (and, with check_stop, the same stop reason). */
static inline bool st_same_tokens(const vs_spec_log *a, const vs_spec_log *b, bool check_stop) {
    return a->n_tokens == b->n_tokens && (!check_stop || a->stop == b->stop) &&
           (a->n_tokens == 0 || memcmp(a->tokens, b->tokens, sizeof(int32_t) * (size_t)a->n_tokens) == 0);
}

static inline bool st_file_has(const char *path, const char *needle) { return vt_file_has(path, needle); }

/* Drafted rows a drafter evaluated and then rolled back, per drafting row: a block of W branches of depth
 * k feeds W (k - 1) nodes (never the last depth) and keeps min(accepted, k - 1) (chain: W = 1). A chain
 * whose drafting stopped early (adaptive draft length) fed all its k nodes: its drafter steps (step 0, the
 * pending rows, then one per fed depth) say which. */
static inline int64_t st_wasted_drafts(const vs_spec_log *log) {
    int64_t w = 0;
    for (int i = 0; i < log->n_blocks; i++) {
        const vs_spec_block *b = &log->blocks[i];
        if (b->n_draft == 0) continue;
        const int k = b->n_depth > 0 ? b->n_depth : b->n_draft, W = b->n_draft / k;
        VT_CHECK(W * k == b->n_draft, "block %d: %d nodes are not %d full branches", i, b->n_draft, k);
        const int fed = W == 1 ? VS_MIN(k, b->n_steps - 1) : k - 1; /* depths fed */
        w += W * fed - VS_MIN(b->n_accept, fed);
    }
    return w;
}

/* ------------------------------------------------------------------------------------------------
 * the sampling harness (V = 16, 3 generated tokens) */

#define ST_SV 16
#define ST_NCAT (ST_SV * ST_SV * ST_SV)
#define ST_EOS 2

/* The category of a generated path of n <= 3 tokens; tokens after an EOS are 0: (EOS, 0, 0) cannot be a
 * real path, so the code is unique. */
static inline int st_cat_of(const int32_t *t, int n) {
    int c = 0;
    for (int i = 0; i < 3; i++) c = c * ST_SV + (i < n ? t[i] : 0);
    return c;
}

/* The target's processed distribution after the prompt's rows (text and image rows) + a path, in a fresh
 * cache each time (independent of the engine). */
static inline void st_target_probs(vs_lm *lm, vs_sampler *smp, const vs_spec_prompt *p, const int32_t *path,
                                   int np, float *probs) {
    vs_error err = {0};
    vs_kv *kv = vs_lm_kv_new(lm, 1, 64, VS_TYPE_F32, &err);
    VT_REQUIRE(kv, "%s", err.msg);
    vs_lm_row rows[64];
    memset(rows, 0, sizeof(rows));
    const int E = vs_lm_cfg(lm)->n_embd;
    int m = 0;
    for (int s = 0; s < p->n_seg; s++)
        for (int j = 0; j < p->seg[s].n; j++, m++) {
            VT_REQUIRE(m < 60, "sampling harness: prompt too long");
            if (p->seg[s].kind == VS_SPEC_SEG_TEXT)
                rows[m].token = p->seg[s].tokens[j];
            else
                rows[m].embd = p->seg[s].embd + (size_t)j * E;
            rows[m].pos = m;
        }
    for (int i = 0; i < np; i++) rows[m].token = path[i], rows[m].pos = m, m++;
    rows[m - 1].want_logits = true;
    float logits[ST_SV];
    vs_lm_out o = {.logits = logits, .attn_layer = -1};
    VT_REQUIRE(vs_lm_forward(lm, kv, NULL, rows, m, &o, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_sampler_probs(smp, logits, probs, &err) == VS_OK, "%s", err.msg);
    vs_kv_free(kv);
}

/* pd[ST_NCAT]: the exact law of target-only sampling's first 3 tokens after prompt p. */
static inline void st_exact_distribution(vs_lm *lm, const vs_sampler_params *sp, const vs_spec_prompt *p,
                                         double *pd) {
    vs_error err = {0};
    vs_sampler *smp = vs_sampler_new(ST_SV, sp, &err);
    VT_REQUIRE(smp, "%s", err.msg);
    memset(pd, 0, sizeof(double) * ST_NCAT);
    float p1[ST_SV], p2[ST_SV], p3[ST_SV];
    st_target_probs(lm, smp, p, NULL, 0, p1);
    for (int a = 0; a < ST_SV; a++) {
        if (p1[a] == 0) continue;
        int32_t path[3] = {a, 0, 0};
        if (a == ST_EOS) {
            pd[st_cat_of(path, 1)] += p1[a];
            continue;
        }
        st_target_probs(lm, smp, p, path, 1, p2);
        for (int b = 0; b < ST_SV; b++) {
            if (p2[b] == 0) continue;
            path[1] = b;
            if (b == ST_EOS) {
                pd[st_cat_of(path, 2)] += (double)p1[a] * p2[b];
                continue;
            }
            st_target_probs(lm, smp, p, path, 2, p3);
            for (int c = 0; c < ST_SV; c++) {
                path[2] = c;
                pd[st_cat_of(path, 3)] += (double)p1[a] * p2[b] * p3[c];
            }
        }
    }
    double s = 0;
    for (int i = 0; i < ST_NCAT; i++) s += pd[i];
    VT_CHECK(fabs(s - 1) < 1e-4, "exact distribution sums to %g", s);
    vs_sampler_free(smp);
}

/* Chi-square goodness of fit of n sampled counts cnt[ST_NCAT] against pd: bins with an expected count
 * >= 5, the rest pooled into one bin. Returns the p-value (0 when a path of probability 0 was sampled);
 * *chi2, *bins, *impossible receive the details. */
static inline double st_chi2_test(const double *pd, const int64_t *cnt, int n, double *chi2, int *bins,
                                  int64_t *impossible) {
    double c2 = 0, pool_e = 0, pool_o = 0;
    int nb = 0;
    int64_t imp = 0;
    for (int i = 0; i < ST_NCAT; i++) {
        double e = pd[i] * n;
        if (pd[i] == 0) {
            imp += cnt[i];
            continue;
        }
        if (e >= 5) {
            c2 += (cnt[i] - e) * (cnt[i] - e) / e;
            nb++;
        } else {
            pool_e += e;
            pool_o += (double)cnt[i];
        }
    }
    if (pool_e > 0) {
        c2 += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        nb++;
    }
    *chi2 = c2, *bins = nb, *impossible = imp;
    return imp ? 0 : vt_chi2_pvalue(c2, nb - 1);
}

#endif
