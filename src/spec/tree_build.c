/* tree_build: EAGLE-2 tree bookkeeping shared by the drafters. See tree_build.h. */
#include "tree_build.h"

#include <math.h>
#include <stdlib.h>

int32_t vs_tree_top_k(const float *x, int32_t V, int32_t K, bool probs, int32_t *tok) {
    int32_t n = 0;
    for (int32_t i = 0; i < V; i++) {
        const float v = x[i];
        if (probs ? !(v > 0) : !(v > -INFINITY)) continue;
        if (n == K && !(v > x[tok[K - 1]])) continue;
        int32_t j = n < K ? n++ : K - 1;
        for (; j > 0 && v > x[tok[j - 1]]; j--) tok[j] = tok[j - 1];
        tok[j] = i;
    }
    return n;
}

void vs_tree_add_children(vs_tree_cand *c, int32_t *nc, int32_t parent, const int32_t *tok, const double *logp,
                          int32_t n) {
    const double base = parent < 0 ? 0 : c[parent].score;
    const int32_t depth = parent < 0 ? 1 : c[parent].depth + 1;
    for (int32_t i = 0; i < n; i++) /* log q <= 0 (a sum of weighted probabilities may round above 1) */
        c[(*nc)++] = (vs_tree_cand){.score = base + (logp[i] < 0 ? logp[i] : 0.0), .token = tok[i], .parent = parent,
                                    .depth = depth, .slot = -1, .qid = -1, .node = -1};
}

int32_t vs_tree_next_beams(const vs_tree_cand *c, int32_t c0, int32_t nc, int32_t K, int32_t *beams) {
    int32_t nb = 0;
    for (int32_t i = c0; i < nc; i++) {
        if (nb == K && !(c[i].score > c[beams[K - 1]].score)) continue;
        int32_t p = nb < K ? nb++ : K - 1;
        for (; p > 0 && c[i].score > c[beams[p - 1]].score; p--) beams[p] = beams[p - 1];
        beams[p] = i;
    }
    return nb;
}

typedef struct cand_key {
    double score;
    int32_t depth, idx;
} cand_key;

/* best first: score descending, then shallower, then created earlier */
static int best_first(const void *a, const void *b) {
    const cand_key *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    if (x->depth != y->depth) return x->depth < y->depth ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

/* proposal order: by depth (parents first), then best first */
static int by_depth(const void *a, const void *b) {
    const cand_key *x = a, *y = b;
    if (x->depth != y->depth) return x->depth < y->depth ? -1 : 1;
    return best_first(a, b);
}

vs_status vs_tree_emit(vs_tree_cand *c, int32_t nc, int32_t N, vs_spec_proposal *out, int32_t *order,
                       vs_error *err) {
    out->n = 0;
    if (nc <= 0 || N <= 0) return VS_OK;
    cand_key *keys = vs_malloc(sizeof(cand_key) * (size_t)nc);
    if (!keys) return vs_error_set(err, VS_ERR_NOMEM, "token tree: out of memory for %d candidates", nc);
    for (int32_t i = 0; i < nc; i++) {
        keys[i] = (cand_key){.score = c[i].score, .depth = c[i].depth, .idx = i};
        c[i].node = -1;
    }
    qsort(keys, (size_t)nc, sizeof(*keys), best_first);
    const int32_t n = nc < N ? nc : N;
    qsort(keys, (size_t)n, sizeof(*keys), by_depth);
    for (int32_t i = 0; i < n; i++) {
        vs_tree_cand *x = &c[keys[i].idx];
        if (x->parent >= 0 && c[x->parent].node < 0) {
            vs_free(keys);
            return vs_error_set(err, VS_ERR_INVALID, "token tree: node %d kept without its parent", keys[i].idx);
        }
        x->node = i;
        order[i] = keys[i].idx;
        out->token[i] = x->token;
        out->parent[i] = x->parent < 0 ? -1 : c[x->parent].node;
        out->depth[i] = x->depth;
        out->q_row[i] = -1;
    }
    vs_free(keys);
    out->n = n;
    return VS_OK;
}
