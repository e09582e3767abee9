/* sample: logits -> processed distribution -> token. See sample.h for the processing order.
 *
 * Candidates live in two pairs of scratch arrays (token ids, values): (idx_a, val_a) holds every
 * token with a finite logit; a selection (top-k, or the growing prefix of top-p) writes its result,
 * sorted best first, into (idx_b, val_b). "Best" is the larger value, then the lower token id, so
 * every cut is deterministic. Sums are accumulated in double. */
#include "sample.h"

#include "kernels.h"

#include <assert.h>
#include <math.h>
#include <string.h>

struct vs_sampler {
    int64_t n_vocab; /* V */
    vs_sampler_params p;
    vs_rng rng;
    int32_t *idx_a; /* [V] candidate token ids */
    float *val_a;   /* [V] candidate logits, then unnormalised probabilities */
    int32_t *idx_b; /* [V] selection output, best first */
    float *val_b;   /* [V] */
    float *probs;   /* [V] scratch for vs_sampler_sample without a caller buffer */
    int32_t greedy_token; /* set by vs_sampler_probs at temperature 0 */
};

vs_sampler_params vs_sampler_params_default(void) {
    return (vs_sampler_params){.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 0};
}

static vs_status check_params(const vs_sampler_params *p, vs_error *err) {
    if (!(p->temperature >= 0) || isinf(p->temperature))
        return vs_error_set(err, VS_ERR_INVALID, "sampler: temperature %g must be finite and >= 0", p->temperature);
    if (!(p->top_p >= 0 && p->top_p <= 1))
        return vs_error_set(err, VS_ERR_INVALID, "sampler: top_p %g must be in [0, 1]", p->top_p);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        return vs_error_set(err, VS_ERR_INVALID, "sampler: min_p %g must be in [0, 1]", p->min_p);
    return VS_OK;
}

vs_sampler *vs_sampler_new(int64_t n_vocab, const vs_sampler_params *params, vs_error *err) {
    if (n_vocab < 1 || n_vocab > INT32_MAX) {
        vs_error_set(err, VS_ERR_INVALID, "sampler: vocabulary size %lld must be in [1, 2^31)", (long long)n_vocab);
        return NULL;
    }
    vs_sampler_params p = params ? *params : vs_sampler_params_default();
    if (check_params(&p, err) != VS_OK) return NULL;
    vs_sampler *s = vs_calloc(1, sizeof(vs_sampler));
    if (!s) {
        vs_error_set(err, VS_ERR_NOMEM, "sampler: out of memory");
        return NULL;
    }
    s->n_vocab = n_vocab;
    s->p = p;
    vs_rng_seed(&s->rng, p.seed);
    size_t V = (size_t)n_vocab;
    s->idx_a = vs_malloc(V * sizeof(int32_t));
    s->val_a = vs_malloc(V * sizeof(float));
    s->idx_b = vs_malloc(V * sizeof(int32_t));
    s->val_b = vs_malloc(V * sizeof(float));
    s->probs = vs_malloc(V * sizeof(float));
    if (!s->idx_a || !s->val_a || !s->idx_b || !s->val_b || !s->probs) {
        vs_sampler_free(s);
        vs_error_set(err, VS_ERR_NOMEM, "sampler: out of memory for a vocabulary of %lld", (long long)n_vocab);
        return NULL;
    }
    return s;
}

void vs_sampler_free(vs_sampler *s) {
    if (!s) return;
    vs_free(s->idx_a);
    vs_free(s->val_a);
    vs_free(s->idx_b);
    vs_free(s->val_b);
    vs_free(s->probs);
    vs_free(s);
}

vs_status vs_sampler_set_params(vs_sampler *s, const vs_sampler_params *params, vs_error *err) {
    vs_status st = check_params(params, err);
    if (st == VS_OK) s->p = *params;
    return st;
}

vs_sampler_params vs_sampler_get_params(const vs_sampler *s) { return s->p; }
int64_t vs_sampler_n_vocab(const vs_sampler *s) { return s->n_vocab; }
void vs_sampler_seed(vs_sampler *s, uint64_t seed) { vs_rng_seed(&s->rng, seed); }
double vs_sampler_uniform(vs_sampler *s) { return vs_rng_uniform(&s->rng); }

int32_t vs_argmax(const float *x, int64_t n) {
    assert(n <= INT32_MAX);
    return (int32_t)vs_argmax_f32(x, n);
}

/* --- selection ---------------------------------------------------------------------------------- */

static inline bool better(float va, int32_t ia, float vb, int32_t ib) { return va > vb || (va == vb && ia < ib); }

/* Min-heap on "better": the root is the worst kept candidate. */
static void sift_down(int32_t *hi, float *hv, int64_t n, int64_t i) {
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && better(hv[w], hi[w], hv[l], hi[l])) w = l;
        if (r < n && better(hv[w], hi[w], hv[r], hi[r])) w = r;
        if (w == i) return;
        int32_t ti = hi[i];
        float tv = hv[i];
        hi[i] = hi[w], hv[i] = hv[w];
        hi[w] = ti, hv[w] = tv;
        i = w;
    }
}

/* The k best of (idx, val)[n] into (oi, ov)[k], sorted best first. O(n log k); 1 <= k <= n. */
static void select_top(const int32_t *idx, const float *val, int64_t n, int64_t k, int32_t *oi, float *ov) {
    assert(k >= 1 && k <= n);
    memcpy(oi, idx, (size_t)k * sizeof(int32_t));
    memcpy(ov, val, (size_t)k * sizeof(float));
    for (int64_t i = k / 2 - 1; i >= 0; i--) sift_down(oi, ov, k, i);
    for (int64_t j = k; j < n; j++)
        if (better(val[j], idx[j], ov[0], oi[0])) {
            oi[0] = idx[j];
            ov[0] = val[j];
            sift_down(oi, ov, k, 0);
        }
    for (int64_t end = k - 1; end > 0; end--) { /* heap sort: the worst goes last */
        int32_t ti = oi[0];
        float tv = ov[0];
        oi[0] = oi[end], ov[0] = ov[end];
        oi[end] = ti, ov[end] = tv;
        sift_down(oi, ov, end, 0);
    }
}

static inline void swap_at(int32_t *idx, float *val, int64_t a, int64_t b) {
    int32_t ti = idx[a];
    float tv = val[a];
    idx[a] = idx[b], val[a] = val[b];
    idx[b] = ti, val[b] = tv;
}

/* Top-p without sorting: reorders (idx, val)[n] so that its first `keep` entries are exactly the
 * shortest best-first prefix whose mass reaches target (all n if none does), and returns keep.
 * Quickselect on the mass: partition around a pivot; if the better side already reaches the target
 * the cut lies inside it, else it is kept whole and the search continues on the worse side. Expected
 * O(n); after too many rounds (bad pivots) the rest is finished with a heap sort. */
static int64_t nucleus_select(int32_t *idx, float *val, int64_t n, double target) {
    if (!(target > 0)) { /* top_p = 0: only the best token */
        int64_t b = 0;
        for (int64_t j = 1; j < n; j++)
            if (better(val[j], idx[j], val[b], idx[b])) b = j;
        swap_at(idx, val, 0, b);
        return 1;
    }
    int64_t lo = 0, hi = n; /* [0, lo) kept; the cut lies in [lo, hi) */
    double acc = 0;         /* mass of [0, lo) */
    int rounds = 0;
    while (hi - lo > 32 && rounds++ < 64) {
        int64_t a = lo, b = lo + (hi - lo) / 2, c = hi - 1; /* median of three as the pivot */
        if (better(val[b], idx[b], val[a], idx[a])) swap_at(idx, val, a, b);
        if (better(val[c], idx[c], val[b], idx[b])) swap_at(idx, val, b, c);
        if (better(val[b], idx[b], val[a], idx[a])) swap_at(idx, val, a, b);
        swap_at(idx, val, b, hi - 1);
        const float pv = val[hi - 1];
        const int32_t pi = idx[hi - 1];
        int64_t m = lo;
        double up = 0; /* mass of the entries better than the pivot */
        for (int64_t j = lo; j < hi - 1; j++)
            if (better(val[j], idx[j], pv, pi)) {
                up += val[j];
                swap_at(idx, val, j, m++);
            }
        swap_at(idx, val, m, hi - 1); /* pivot at m: [lo, m) better, (m, hi) worse */
        if (acc + up >= target) {
            hi = m;
        } else if (acc + up + pv >= target) {
            return m + 1;
        } else {
            acc += up + pv;
            lo = m + 1;
        }
    }
    if (hi > lo) {
        /* finish: heap-sort what is left, best first, and walk it */
        int64_t len = hi - lo;
        int32_t *ri = idx + lo;
        float *rv = val + lo;
        for (int64_t i = len / 2 - 1; i >= 0; i--) sift_down(ri, rv, len, i);
        for (int64_t end = len - 1; end > 0; end--) {
            swap_at(ri, rv, 0, end);
            sift_down(ri, rv, end, 0);
        }
        for (int64_t j = 0; j < len; j++) {
            acc += rv[j];
            if (acc >= target) return lo + j + 1;
        }
    }
    return hi; /* rounding kept the walk just short of the target: keep the whole range */
}

/* --- processing --------------------------------------------------------------------------------- */

vs_status vs_sampler_probs(vs_sampler *s, const float *logits, float *probs, vs_error *err) {
    const int64_t V = s->n_vocab;
    const vs_sampler_params *p = &s->p;
    /* branch-free gather of the finite logits; -inf are masked tokens, NaN / +inf are errors */
    int64_t n = 0;
    int bad = 0;
    for (int64_t i = 0; i < V; i++) {
        float x = logits[i];
        s->idx_a[n] = (int32_t)i;
        s->val_a[n] = x;
        n += x > -INFINITY;
        bad |= !(x < INFINITY);
    }
    if (bad)
        for (int64_t i = 0; i < V; i++)
            if (!(logits[i] < INFINITY))
                return vs_error_set(err, VS_ERR_INVALID, "sampler: logit of token %lld is %s", (long long)i,
                                    isnan(logits[i]) ? "NaN" : "+inf");
    if (n == 0) return vs_error_set(err, VS_ERR_INVALID, "sampler: all %lld logits are -inf", (long long)V);
    memset(probs, 0, (size_t)V * sizeof(float));
    if (p->temperature == 0) {
        s->greedy_token = vs_argmax(logits, V);
        probs[s->greedy_token] = 1.0f;
        return VS_OK;
    }

    int32_t *ci = s->idx_a;
    float *cv = s->val_a;
    bool sorted = false;
    if (p->top_k > 0 && p->top_k < n) {
        select_top(s->idx_a, s->val_a, n, p->top_k, s->idx_b, s->val_b);
        ci = s->idx_b, cv = s->val_b;
        n = p->top_k;
        sorted = true;
    }

    /* softmax(logit / T), unnormalised: the best token gets exactly 1 */
    float m = cv[0];
    for (int64_t j = 1; j < n; j++) m = cv[j] > m ? cv[j] : m;
    const float T = p->temperature;
    double Z = 0;
    for (int64_t j = 0; j < n; j++) {
        cv[j] = expf((cv[j] - m) / T);
        Z += cv[j];
    }

    if (p->top_p < 1) {
        const double target = (double)p->top_p * Z;
        if (!sorted) {
            n = nucleus_select(ci, cv, n, target);
        } else {
            double cum = 0;
            for (int64_t j = 0; j < n; j++) {
                cum += cv[j];
                if (cum >= target) {
                    n = j + 1;
                    break;
                }
            }
        }
    }

    if (p->min_p > 0) {
        float pmax = cv[0];
        for (int64_t j = 1; j < n; j++) pmax = cv[j] > pmax ? cv[j] : pmax;
        const float thr = p->min_p * pmax;
        int64_t w = 0;
        for (int64_t j = 0; j < n; j++)
            if (cv[j] >= thr) {
                ci[w] = ci[j];
                cv[w] = cv[j];
                w++;
            }
        n = w; /* >= 1: pmax itself passes since min_p <= 1 */
    }

    double sum = 0;
    for (int64_t j = 0; j < n; j++) sum += cv[j];
    for (int64_t j = 0; j < n; j++) probs[ci[j]] = (float)(cv[j] / sum);
    return VS_OK;
}

vs_status vs_sample_weights(const float *weights, int64_t n, vs_rng *rng, int32_t *token, vs_error *err) {
    if (n < 1 || n > INT32_MAX)
        return vs_error_set(err, VS_ERR_INVALID, "sampler: %lld weights (must be 1..2^31-1)", (long long)n);
    double total = 0;
    for (int64_t i = 0; i < n; i++) {
        float w = weights[i];
        if (!(w >= 0) || isinf(w))
            return vs_error_set(err, VS_ERR_INVALID, "sampler: weight of token %lld is %g (must be finite, >= 0)",
                                (long long)i, w);
        total += w;
    }
    if (!(total > 0)) return vs_error_set(err, VS_ERR_INVALID, "sampler: all %lld weights are zero", (long long)n);
    const double u = vs_rng_uniform(rng) * total;
    double cum = 0;
    int64_t last = -1;
    for (int64_t i = 0; i < n; i++) {
        if (weights[i] > 0) {
            cum += weights[i];
            last = i;
            if (u < cum) break;
        }
    }
    *token = (int32_t)last; /* the last positive weight if rounding left u == total */
    return VS_OK;
}

vs_status vs_sampler_pick(vs_sampler *s, const float *weights, int32_t *token, vs_error *err) {
    return vs_sample_weights(weights, s->n_vocab, &s->rng, token, err);
}

vs_status vs_sampler_sample(vs_sampler *s, const float *logits, float *probs, int32_t *token, vs_error *err) {
    float *pr = probs ? probs : s->probs;
    vs_status st = vs_sampler_probs(s, logits, pr, err);
    if (st != VS_OK) return st;
    if (s->p.temperature == 0) {
        /* one-hot: pick would return this token; skip its two passes but keep its single draw */
        (void)vs_rng_u64(&s->rng);
        *token = s->greedy_token;
        return VS_OK;
    }
    return vs_sampler_pick(s, pr, token, err);
}
