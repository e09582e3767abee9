/* ens_weights: ensemble weight policies, the verified-position history, the weight trace (see
 * ens_weights.h). Sections: configuration, grid, distances, history (push), choice, trace. */
#include "ens_weights.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sample.h"

#define Q_FLOOR 1e-10

/* ------------------------------------------------------------------------------------------------
 * Configuration */

void vs_ens_weights_cfg_default(vs_ens_weights_cfg *c) {
    memset(c, 0, sizeof(*c));
    c->policy = VS_ENS_STATIC;
    c->grid_n = 10;
    c->tau = 1.0f;
    c->window = 0;
    c->topk = 64;
    c->adaboost_c = 1.0f;
}

static const char *const policy_names[] = {"static", "grid", "inv-kl", "inv-tvd", "random", "adaboost"};

const char *vs_ens_policy_name(vs_ens_policy p) {
    return (unsigned)p < VS_ARRAY_LEN(policy_names) ? policy_names[p] : "?";
}

vs_status vs_ens_weights_parse(const char *s, vs_ens_weights_cfg *c, vs_error *err) {
    if (!s || !*s) return vs_error_set(err, VS_ERR_INVALID, "weights: empty policy name");
    if (!strncmp(s, "static", 6) && (s[6] == 0 || s[6] == ':')) {
        c->policy = VS_ENS_STATIC;
        c->n_ratios = 0;
        if (s[6] == 0) return VS_OK;
        const char *p = s + 7;
        int32_t n = 0;
        float r[VS_ENS_MAX_ROWS];
        bool any = false;
        for (;;) {
            if (n == VS_ENS_MAX_ROWS)
                return vs_error_set(err, VS_ERR_INVALID, "weights '%s': more than %d ratios", s,
                                    VS_ENS_MAX_ROWS);
            char *end;
            errno = 0;
            double v = strtod(p, &end);
            if (end == p || errno || !isfinite(v) || v < 0 || (*end && *end != ',' && *end != ':'))
                return vs_error_set(err, VS_ERR_INVALID,
                                    "weights '%s': ratios must be numbers >= 0 separated "
                                    "by ',' or ':' (static:2,1)",
                                    s);
            r[n++] = (float)v;
            any |= v > 0;
            if (!*end) break;
            p = end + 1;
        }
        if (!any) return vs_error_set(err, VS_ERR_INVALID, "weights '%s': the ratios are all zero", s);
        c->n_ratios = n;
        memcpy(c->ratios, r, sizeof(float) * (size_t)n);
        return VS_OK;
    }
    for (size_t i = 1; i < VS_ARRAY_LEN(policy_names); i++)
        if (!strcmp(s, policy_names[i])) {
            c->policy = (vs_ens_policy)i;
            c->n_ratios = 0;
            return VS_OK;
        }
    return vs_error_set(err, VS_ERR_INVALID,
                        "unknown weight policy '%s': expected static[:r1,r2,..], grid, inv-kl, "
                        "inv-tvd, random or adaboost",
                        s);
}

vs_status vs_ens_weights_check(const vs_ens_weights_cfg *c, int32_t m, vs_error *err) {
    if (m < 1 || m > VS_ENS_MAX_ROWS)
        return vs_error_set(err, VS_ERR_INVALID, "weights: %d drafting inputs (1 .. %d supported)", m,
                            VS_ENS_MAX_ROWS);
    if ((unsigned)c->policy >= VS_ARRAY_LEN(policy_names))
        return vs_error_set(err, VS_ERR_INVALID, "weights: unknown policy %d", (int)c->policy);
    if (c->policy == VS_ENS_STATIC && c->n_ratios != 0) {
        if (c->n_ratios != m)
            return vs_error_set(err, VS_ERR_INVALID, "weights: %d static ratios given for %d drafting inputs",
                                c->n_ratios, m);
        bool any = false;
        for (int32_t i = 0; i < m; i++) {
            if (!(c->ratios[i] >= 0) || !isfinite(c->ratios[i]))
                return vs_error_set(err, VS_ERR_INVALID, "weights: ratio %d is %g", i, c->ratios[i]);
            any |= c->ratios[i] > 0;
        }
        if (!any) return vs_error_set(err, VS_ERR_INVALID, "weights: the static ratios are all zero");
    }
    if (c->policy == VS_ENS_GRID && vs_ens_grid_count(m, c->grid_n) < 0)
        return vs_error_set(err, VS_ERR_INVALID,
                            "weights: grid n = %d for %d inputs is out of range (n in "
                            "[1, 1000], at most 1e6 vectors)",
                            c->grid_n, m);
    if (!(c->tau >= 0) || !isfinite(c->tau))
        return vs_error_set(err, VS_ERR_INVALID, "weights: temperature %g must be >= 0", c->tau);
    if (c->window < 0) return vs_error_set(err, VS_ERR_INVALID, "weights: history window %d < 0", c->window);
    if (c->topk < 0) return vs_error_set(err, VS_ERR_INVALID, "weights: top-k %d < 0", c->topk);
    if (!isfinite(c->adaboost_c))
        return vs_error_set(err, VS_ERR_INVALID, "weights: AdaBoost C %g is not finite", c->adaboost_c);
    return VS_OK;
}

/* ------------------------------------------------------------------------------------------------
 * Grid */

int64_t vs_ens_grid_count(int32_t m, int32_t n) {
    if (m < 1 || m > VS_ENS_MAX_ROWS || n < 1 || n > 1000) return -1;
    /* C(n + m - 1, m - 1), exact in 64 bits at these sizes: each partial product is a binomial */
    int64_t c = 1;
    for (int64_t i = 1; i <= m - 1; i++) {
        c = c * (n + i) / i;
        if (c > 1000000) return -1;
    }
    return c;
}

static void grid_rec(int32_t m, int32_t n, int32_t row, int32_t rem, int32_t *a, float *w, int64_t *k) {
    if (row == m - 1) {
        a[row] = rem;
        for (int32_t i = 0; i < m; i++) w[*k * m + i] = (float)a[i] / (float)n;
        (*k)++;
        return;
    }
    for (int32_t v = rem; v >= 0; v--) {
        a[row] = v;
        grid_rec(m, n, row + 1, rem - v, a, w, k);
    }
}

vs_status vs_ens_grid_build(int32_t m, int32_t n, float *w, int64_t count, vs_error *err) {
    int64_t c = vs_ens_grid_count(m, n);
    if (c < 0 || c != count)
        return vs_error_set(err, VS_ERR_INVALID, "weights: grid of m = %d, n = %d has %lld vectors, not %lld",
                            m, n, (long long)c, (long long)count);
    int32_t a[VS_ENS_MAX_ROWS];
    int64_t k = 0;
    grid_rec(m, n, 0, n, a, w, &k);
    return VS_OK;
}

/* ------------------------------------------------------------------------------------------------
 * Distances */

static inline double kl_term(double p, double q) {
    return p > 0 ? p * log(p / (q > Q_FLOOR ? q : Q_FLOOR)) : 0;
}

double vs_ens_kl(const float *p, const float *q, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += kl_term(p[i], q[i]);
    return s > 0 ? s : 0;
}

double vs_ens_tvd(const float *p, const float *q, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += fabs((double)p[i] - (double)q[i]);
    return 0.5 * s;
}

/* ------------------------------------------------------------------------------------------------
 * History */

struct vs_ens_hist {
    vs_ens_weights_cfg cfg;
    int32_t m, V;
    bool exact;    /* the union is the whole vocabulary */
    int32_t k;     /* top-k per distribution (when !exact) */
    int64_t J;     /* grid vectors (grid policy), else 0 */
    float *grid;   /* [J][m] */
    double *gridd; /* [J][m] the same as exact multiples of 1/n in double (mixtures sum to 1 within
                    * 1e-16, so equal mixtures tie in KL) */
    /* records: ring of cap; record i holds doubles rd[i][nd] = kl[m], tvd[m], kl_cand[J] and bytes
     * rb[i][nb] = hit[m], hit_cand[J] */
    int32_t nd, nb;
    double *rd;
    uint8_t *rb;
    int32_t cap, head, len; /* oldest record at head */
    int64_t total;
    /* push scratch */
    uint8_t *mark; /* [V] */
    int32_t *utok; /* [V] union tokens, ascending */
    float *uval;   /* [m + 1][V] values on the union: p, then each q_m */
    int32_t *heap; /* [k] */
    double *qw;    /* [V] a mixture on the union */
};

vs_ens_hist *vs_ens_hist_new(const vs_ens_weights_cfg *c, int32_t m, int32_t n_vocab, vs_error *err) {
    if (!c || vs_ens_weights_check(c, m, err)) return NULL;
    if (n_vocab < 1) {
        vs_error_set(err, VS_ERR_INVALID, "weights: vocabulary of %d tokens", n_vocab);
        return NULL;
    }
    vs_ens_hist *h = vs_calloc(1, sizeof(*h));
    if (!h) goto oom;
    h->cfg = *c;
    h->m = m;
    h->V = n_vocab;
    h->exact = c->topk == 0 || (int64_t)(m + 1) * c->topk >= n_vocab;
    h->k = h->exact ? 0 : c->topk;
    if (c->policy == VS_ENS_GRID) {
        h->J = vs_ens_grid_count(m, c->grid_n);
        h->grid = vs_malloc(sizeof(float) * (size_t)(h->J * m));
        if (!h->grid) goto oom;
        if (vs_ens_grid_build(m, c->grid_n, h->grid, h->J, err)) goto fail;
        h->gridd = vs_malloc(sizeof(double) * (size_t)(h->J * m));
        if (!h->gridd) goto oom;
        for (int64_t i = 0; i < h->J * m; i++)
            h->gridd[i] = round((double)h->grid[i] * c->grid_n) / c->grid_n;
    }
    h->nd = 2 * m + (int32_t)h->J;
    h->nb = m + (int32_t)h->J;
    h->mark = vs_calloc((size_t)n_vocab, 1);
    h->utok = vs_malloc(sizeof(int32_t) * (size_t)n_vocab);
    h->uval = vs_malloc(sizeof(float) * (size_t)n_vocab * (size_t)(m + 1));
    h->qw = vs_malloc(sizeof(double) * (size_t)n_vocab);
    h->heap = vs_malloc(sizeof(int32_t) * (size_t)VS_MAX(h->k, 1));
    if (!h->mark || !h->utok || !h->uval || !h->qw || !h->heap) goto oom;
    if (c->window > 0) {
        h->cap = c->window;
        h->rd = vs_malloc(sizeof(double) * (size_t)h->cap * (size_t)h->nd);
        h->rb = vs_malloc((size_t)h->cap * (size_t)h->nb);
        if (!h->rd || !h->rb) goto oom;
    }
    return h;
oom:
    vs_error_set(err, VS_ERR_NOMEM, "weights: out of memory for the history");
fail:
    vs_ens_hist_free(h);
    return NULL;
}

void vs_ens_hist_free(vs_ens_hist *h) {
    if (!h) return;
    vs_free(h->grid), vs_free(h->gridd), vs_free(h->rd), vs_free(h->rb), vs_free(h->mark), vs_free(h->utok),
        vs_free(h->uval);
    vs_free(h->qw), vs_free(h->heap);
    vs_free(h);
}

void vs_ens_hist_clear(vs_ens_hist *h) {
    if (!h) return;
    h->head = h->len = 0;
    h->total = 0;
}

int32_t vs_ens_hist_len(const vs_ens_hist *h) { return h ? h->len : 0; }
int64_t vs_ens_hist_total(const vs_ens_hist *h) { return h ? h->total : 0; }

size_t vs_ens_hist_bytes(const vs_ens_hist *h) {
    if (!h) return 0;
    size_t s = sizeof(*h) + (size_t)h->cap * ((size_t)h->nd * sizeof(double) + (size_t)h->nb);
    s += (size_t)h->V * (1 + sizeof(int32_t) + sizeof(double) + sizeof(float) * (size_t)(h->m + 1));
    return s + (sizeof(float) + sizeof(double)) * (size_t)(h->J * h->m) + sizeof(int32_t) * (size_t)h->k;
}

/* Marks the k largest entries of x[V] in mark (a size-k min-heap of indices; ties: lower index kept). */
static void mark_topk(vs_ens_hist *h, const float *x) {
    const int32_t k = h->k, V = h->V;
    int32_t *hp = h->heap, n = 0;
#define LESS(a, b) (x[a] < x[b] || (x[a] == x[b] && (a) > (b))) /* "a ranks below b" */
    for (int32_t i = 0; i < V; i++) {
        if (n < k) {
            int32_t j = n++;
            hp[j] = i;
            while (j > 0 && LESS(hp[j], hp[(j - 1) / 2])) {
                int32_t t = hp[j];
                hp[j] = hp[(j - 1) / 2], hp[(j - 1) / 2] = t, j = (j - 1) / 2;
            }
        } else if (LESS(hp[0], i)) {
            hp[0] = i;
            int32_t j = 0;
            for (;;) {
                int32_t l = 2 * j + 1, r = l + 1, s = j;
                if (l < k && LESS(hp[l], hp[s])) s = l;
                if (r < k && LESS(hp[r], hp[s])) s = r;
                if (s == j) break;
                int32_t t = hp[j];
                hp[j] = hp[s], hp[s] = t, j = s;
            }
        }
    }
#undef LESS
    for (int32_t i = 0; i < n; i++) h->mark[hp[i]] = 1;
}

/* KL of coarsened distributions: values on the union plus one "other" bin each. */
static double kl_union(const float *p, const double *q, int32_t n, double p_o, double q_o) {
    double s = 0;
    for (int32_t i = 0; i < n; i++) s += kl_term(p[i], q[i]);
    s += kl_term(p_o, q_o);
    return s > 0 ? s : 0;
}

vs_status vs_ens_hist_push(vs_ens_hist *h, const float *p, const float *const *q, vs_error *err) {
    if (!h || !p || !q)
        return vs_error_set(err, VS_ERR_INVALID, "weights: history push without distributions");
    const int32_t m = h->m, V = h->V;
    for (int32_t r = 0; r < m; r++)
        if (!q[r]) return vs_error_set(err, VS_ERR_INVALID, "weights: history push without row %d", r);
    /* the record slot */
    if (h->cfg.window > 0) {
        if (h->len == h->cap) h->head = (h->head + 1) % h->cap, h->len--;
    } else if (h->len == h->cap) {
        int32_t cap = h->cap ? h->cap * 2 : 64;
        double *rd = vs_realloc(h->rd, sizeof(double) * (size_t)cap * (size_t)h->nd);
        if (!rd) return vs_error_set(err, VS_ERR_NOMEM, "weights: out of memory for the history");
        h->rd = rd;
        uint8_t *rb = vs_realloc(h->rb, (size_t)cap * (size_t)h->nb);
        if (!rb) return vs_error_set(err, VS_ERR_NOMEM, "weights: out of memory for the history");
        h->rb = rb;
        h->cap = cap;
    }
    const int32_t slot = (h->head + h->len) % h->cap;
    double *rd = h->rd + (size_t)slot * (size_t)h->nd;
    uint8_t *rb = h->rb + (size_t)slot * (size_t)h->nb;

    /* exact argmaxes (dense) */
    const int32_t ap = vs_argmax(p, V);
    for (int32_t r = 0; r < m; r++) rb[r] = vs_argmax(q[r], V) == ap;

    /* the union and the values on it */
    int32_t n = 0;
    if (h->exact) {
        for (int32_t i = 0; i < V; i++) h->utok[i] = i;
        n = V;
    } else {
        mark_topk(h, p);
        for (int32_t r = 0; r < m; r++) mark_topk(h, q[r]);
        for (int32_t i = 0; i < V; i++)
            if (h->mark[i]) h->utok[n++] = i, h->mark[i] = 0;
    }
    double other[VS_ENS_MAX_ROWS + 1];
    for (int32_t d = 0; d <= m; d++) {
        const float *x = d == 0 ? p : q[d - 1];
        float *u = h->uval + (size_t)d * (size_t)V;
        double s = 0;
        for (int32_t i = 0; i < n; i++) u[i] = x[h->utok[i]], s += u[i];
        other[d] = h->exact || s >= 1 ? 0 : 1 - s;
    }
    const float *pu = h->uval;

    /* per row */
    for (int32_t r = 0; r < m; r++) {
        const float *qu = h->uval + (size_t)(r + 1) * (size_t)V;
        for (int32_t i = 0; i < n; i++) h->qw[i] = qu[i];
        rd[r] = kl_union(pu, h->qw, n, other[0], other[r + 1]);
        double t = fabs(other[0] - other[r + 1]);
        for (int32_t i = 0; i < n; i++) t += fabs((double)pu[i] - (double)qu[i]);
        rd[m + r] = 0.5 * t;
    }
    /* per grid vector */
    for (int64_t j = 0; j < h->J; j++) {
        const double *w = h->gridd + j * m;
        double qo = 0;
        for (int32_t i = 0; i < n; i++) h->qw[i] = 0;
        for (int32_t r = 0; r < m; r++) {
            if (w[r] == 0) continue;
            const float *qu = h->uval + (size_t)(r + 1) * (size_t)V;
            for (int32_t i = 0; i < n; i++) h->qw[i] += w[r] * qu[i];
            qo += w[r] * other[r + 1];
        }
        int32_t best = 0;
        for (int32_t i = 1; i < n; i++)
            if (h->qw[i] > h->qw[best]) best = i;
        rb[m + j] = h->utok[best] == ap;
        rd[2 * m + j] = kl_union(pu, h->qw, n, other[0], qo);
    }
    h->len++;
    h->total++;
    return VS_OK;
}

/* Record i of the window (0 = oldest). */
static const double *rec_d(const vs_ens_hist *h, int32_t i) {
    return h->rd + (size_t)((h->head + i) % h->cap) * (size_t)h->nd;
}
static const uint8_t *rec_b(const vs_ens_hist *h, int32_t i) {
    return h->rb + (size_t)((h->head + i) % h->cap) * (size_t)h->nb;
}

void vs_ens_hist_row_sums(const vs_ens_hist *h, double *kl, double *tvd, int32_t *hits) {
    const int32_t m = h->m;
    for (int32_t r = 0; r < m; r++) {
        double a = 0, b = 0;
        int32_t c = 0;
        for (int32_t i = 0; i < h->len; i++) {
            a += rec_d(h, i)[r], b += rec_d(h, i)[m + r], c += rec_b(h, i)[r];
        }
        if (kl) kl[r] = a;
        if (tvd) tvd[r] = b;
        if (hits) hits[r] = c;
    }
}

/* ------------------------------------------------------------------------------------------------
 * Choice */

static void uniform(vs_ens_choice *o, int32_t m) {
    for (int32_t r = 0; r < m; r++) o->w[r] = 1.0f / (float)m;
}

/* Normalises w[m] (>= 0) to sum 1; false when they are all zero. */
static bool normalise(const double *w, int32_t m, vs_ens_choice *o) {
    double s = 0;
    for (int32_t r = 0; r < m; r++) s += w[r];
    if (!(s > 0) || !isfinite(s)) return false;
    for (int32_t r = 0; r < m; r++) o->w[r] = (float)(w[r] / s);
    return true;
}

static vs_status choose_grid(const vs_ens_hist *h, vs_ens_choice *o) {
    const int32_t m = h->m;
    int64_t best = -1;
    int32_t best_score = -1;
    double best_kl = 0, best_u = 0;
    for (int64_t j = 0; j < h->J; j++) {
        int32_t score = 0;
        double kl = 0;
        for (int32_t i = 0; i < h->len; i++) {
            score += rec_b(h, i)[m + j];
            kl += rec_d(h, i)[2 * m + j];
        }
        double u = 0; /* squared distance to uniform */
        for (int32_t r = 0; r < m; r++) {
            double d = h->gridd[j * m + r] - 1.0 / m;
            u += d * d;
        }
        bool better;
        if (best < 0 || score != best_score) {
            better = best < 0 || score > best_score;
        } else {
            double tol = 1e-9 * fmax(fabs(kl), fabs(best_kl));
            if (kl < best_kl - tol)
                better = true;
            else if (kl > best_kl + tol)
                better = false;
            else
                better = u < best_u - 1e-12;
        }
        if (better) best = j, best_score = score, best_kl = kl, best_u = u;
    }
    for (int32_t r = 0; r < m; r++) o->w[r] = h->grid[best * m + r];
    o->grid_index = (int32_t)best;
    o->score = best_score;
    o->dist = best_kl;
    return VS_OK;
}

static void choose_inverse(const vs_ens_hist *h, bool tvd, vs_ens_choice *o) {
    const int32_t m = h->m;
    double e[VS_ENS_MAX_ROWS], w[VS_ENS_MAX_ROWS], emin = INFINITY;
    vs_ens_hist_row_sums(h, tvd ? NULL : e, tvd ? e : NULL, NULL);
    for (int32_t r = 0; r < m; r++) emin = fmin(emin, e[r]);
    o->dist = emin;
    const double tau = h->cfg.tau;
    if (emin <= 0 || tau == 0) {
        /* the limit: the best rows (e = 0, or the smallest e at tau = 0) share the weight */
        for (int32_t r = 0; r < m; r++) w[r] = e[r] <= emin ? 1 : 0;
        normalise(w, m, o);
        return;
    }
    /* w_m proportional to (1/e_m)^(1/tau), computed in the log domain */
    double l[VS_ENS_MAX_ROWS], lmax = -INFINITY;
    for (int32_t r = 0; r < m; r++) l[r] = -log(e[r]) / tau, lmax = fmax(lmax, l[r]);
    for (int32_t r = 0; r < m; r++) w[r] = exp(l[r] - lmax);
    normalise(w, m, o);
}

vs_status vs_ens_weights_choose(const vs_ens_hist *h, vs_rng *rng, vs_ens_choice *o, vs_error *err) {
    if (!h || !o) return vs_error_set(err, VS_ERR_INVALID, "weights: no history");
    const int32_t m = h->m;
    memset(o, 0, sizeof(*o));
    o->grid_index = -1;
    o->score = -1;
    o->n_positions = h->len;
    double w[VS_ENS_MAX_ROWS] = {0};
    switch (h->cfg.policy) {
    case VS_ENS_STATIC:
        if (h->cfg.n_ratios == 0) {
            uniform(o, m);
        } else {
            for (int32_t r = 0; r < m; r++) w[r] = h->cfg.ratios[r];
            if (!normalise(w, m, o)) uniform(o, m), o->fallback = true;
        }
        o->n_positions = 0;
        return VS_OK;
    case VS_ENS_RANDOM:
        if (!rng) return vs_error_set(err, VS_ERR_INVALID, "weights: the random policy needs a generator");
        for (int32_t r = 0; r < m; r++) w[r] = -log(1.0 - vs_rng_uniform(rng));
        if (!normalise(w, m, o)) uniform(o, m), o->fallback = true;
        o->n_positions = 0;
        return VS_OK;
    default: break;
    }
    if (h->len == 0) {
        uniform(o, m);
        o->fallback = true;
        return VS_OK;
    }
    switch (h->cfg.policy) {
    case VS_ENS_GRID: return choose_grid(h, o);
    case VS_ENS_INV_KL:
    case VS_ENS_INV_TVD: choose_inverse(h, h->cfg.policy == VS_ENS_INV_TVD, o); return VS_OK;
    case VS_ENS_ADABOOST: {
        int32_t hits[VS_ENS_MAX_ROWS];
        vs_ens_hist_row_sums(h, NULL, NULL, hits);
        const double N = h->len, lk = h->V > 1 ? log((double)h->V - 1) : 0;
        for (int32_t r = 0; r < m; r++) {
            double eps = (N - hits[r] + 0.5) / (N + 1);
            double a = log(1 / eps - 1) + h->cfg.adaboost_c * lk;
            w[r] = a > 0 ? a : 0;
        }
        if (!normalise(w, m, o)) uniform(o, m), o->fallback = true;
        return VS_OK;
    }
    default: return vs_error_set(err, VS_ERR_INVALID, "weights: unknown policy %d", (int)h->cfg.policy);
    }
}

/* ------------------------------------------------------------------------------------------------
 * Trace */

void vs_ens_trace_init(vs_ens_trace *t) { memset(t, 0, sizeof(*t)); }

void vs_ens_trace_free(vs_ens_trace *t) {
    if (!t) return;
    vs_free(t->rec);
    vs_ens_trace_init(t);
}

vs_status vs_ens_trace_add(vs_ens_trace *t, const vs_ens_trace_rec *r, vs_error *err) {
    if (t->n == t->cap) {
        int32_t cap = t->cap ? t->cap * 2 : 64;
        vs_ens_trace_rec *n = vs_realloc(t->rec, sizeof(*n) * (size_t)cap);
        if (!n) return vs_error_set(err, VS_ERR_NOMEM, "weight trace: out of memory");
        t->rec = n, t->cap = cap;
    }
    t->rec[t->n++] = *r;
    return VS_OK;
}

#define TRACE_MAGIC "# vlmspec weight trace 1"

vs_status vs_ens_trace_write(const vs_ens_trace *t, FILE *f, vs_error *err) {
    if (t->m < 1 || t->m > VS_ENS_MAX_ROWS)
        return vs_error_set(err, VS_ERR_INVALID, "weight trace: %d rows", t->m);
    fprintf(f, "%s\n# inputs", TRACE_MAGIC);
    for (int32_t r = 0; r < t->m; r++) fprintf(f, " %s", t->names[r]);
    fprintf(f, "\n# policy %s\nrequest\tblock\tstep\tn_draft\tn_accept", t->policy[0] ? t->policy : "?");
    for (int32_t r = 0; r < t->m; r++) fprintf(f, "\tw_%s", t->names[r]);
    fputc('\n', f);
    for (int32_t i = 0; i < t->n; i++) {
        const vs_ens_trace_rec *x = &t->rec[i];
        fprintf(f, "%d\t%d\t%d\t%d\t%d", x->request, x->block, x->step, x->n_draft, x->n_accept);
        for (int32_t r = 0; r < t->m; r++) fprintf(f, "\t%.6f", x->w[r]);
        fputc('\n', f);
    }
    if (ferror(f)) return vs_error_set(err, VS_ERR_IO, "weight trace: write failed: %s", strerror(errno));
    return VS_OK;
}

/* Splits line (NUL-terminated, modified) at tabs / spaces into at most cap fields; returns the count
 * or cap + 1 when there are more. */
static int split_fields(char *line, char **f, int cap) {
    int n = 0;
    char *p = line;
    for (;;) {
        while (*p == ' ' || *p == '\t') p++;
        if (!*p) return n;
        if (n == cap) return cap + 1;
        f[n++] = p;
        while (*p && *p != ' ' && *p != '\t') p++;
        if (*p) *p++ = 0;
    }
}

static bool parse_i32(const char *s, int32_t *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < 0 || v > INT32_MAX) return false;
    *out = (int32_t)v;
    return true;
}

vs_status vs_ens_trace_parse(const char *text, size_t len, const char *name, vs_ens_trace *t, vs_error *err) {
    vs_ens_trace_init(t);
    if (!name) name = "weight trace";
    char line[1024];
    size_t pos = 0;
    int lineno = 0;
    bool have_inputs = false, have_header = false;
    vs_status st = VS_OK;
    while (pos < len) {
        size_t e = pos;
        while (e < len && text[e] != '\n') e++;
        size_t ll = e - pos;
        lineno++;
        if (ll && text[pos + ll - 1] == '\r') ll--;
        if (ll >= sizeof(line)) {
            st = vs_error_set(err, VS_ERR_FORMAT, "%s:%d: line longer than %zu bytes", name, lineno,
                              sizeof(line) - 1);
            goto fail;
        }
        memcpy(line, text + pos, ll);
        line[ll] = 0;
        pos = e + 1;
        if (memchr(line, 0, ll)) {
            st = vs_error_set(err, VS_ERR_FORMAT, "%s:%d: NUL byte", name, lineno);
            goto fail;
        }
        if (lineno == 1) {
            if (strcmp(line, TRACE_MAGIC)) {
                st = vs_error_set(err, VS_ERR_FORMAT,
                                  "%s: not a vlmspec weight trace (first line must be '%s')", name,
                                  TRACE_MAGIC);
                goto fail;
            }
            continue;
        }
        char *f[VS_ENS_MAX_ROWS + 8];
        const int cap = VS_ENS_MAX_ROWS + 6;
        if (line[0] == '#') {
            int n = split_fields(line + 1, f, cap);
            if (n >= 1 && !strcmp(f[0], "inputs")) {
                if (have_inputs || n < 2 || n > VS_ENS_MAX_ROWS + 1) {
                    st = vs_error_set(err, VS_ERR_FORMAT,
                                      "%s:%d: expected one '# inputs' line with 1 .. %d names", name, lineno,
                                      VS_ENS_MAX_ROWS);
                    goto fail;
                }
                t->m = n - 1;
                for (int i = 1; i < n; i++) {
                    if (strlen(f[i]) >= sizeof(t->names[0])) {
                        st = vs_error_set(err, VS_ERR_FORMAT, "%s:%d: input name too long", name, lineno);
                        goto fail;
                    }
                    strcpy(t->names[i - 1], f[i]);
                }
                have_inputs = true;
            } else if (n == 2 && !strcmp(f[0], "policy") && strlen(f[1]) < sizeof(t->policy)) {
                strcpy(t->policy, f[1]);
            }
            continue;
        }
        int n = split_fields(line, f, cap);
        if (n == 0) continue;
        if (!have_header) {
            bool ok = have_inputs && n == 5 + t->m && !strcmp(f[0], "request") && !strcmp(f[1], "block") &&
                      !strcmp(f[2], "step") && !strcmp(f[3], "n_draft") && !strcmp(f[4], "n_accept");
            for (int r = 0; ok && r < t->m; r++)
                ok = !strncmp(f[5 + r], "w_", 2) && !strcmp(f[5 + r] + 2, t->names[r]);
            if (!ok) {
                st = vs_error_set(err, VS_ERR_FORMAT,
                                  "%s:%d: expected the '# inputs' line and then the header "
                                  "'request block step n_draft n_accept w_<input>...'",
                                  name, lineno);
                goto fail;
            }
            have_header = true;
            continue;
        }
        if (n != 5 + t->m) {
            st = vs_error_set(err, VS_ERR_FORMAT, "%s:%d: %d fields, expected %d", name, lineno,
                              n > cap ? cap + 1 : n, 5 + t->m);
            goto fail;
        }
        vs_ens_trace_rec r;
        memset(&r, 0, sizeof(r));
        if (!parse_i32(f[0], &r.request) || !parse_i32(f[1], &r.block) || !parse_i32(f[2], &r.step) ||
            !parse_i32(f[3], &r.n_draft) || !parse_i32(f[4], &r.n_accept) || r.n_accept > r.n_draft) {
            st = vs_error_set(err, VS_ERR_FORMAT,
                              "%s:%d: request, block, step, n_draft, n_accept must be integers "
                              ">= 0 with n_accept <= n_draft",
                              name, lineno);
            goto fail;
        }
        for (int k = 0; k < t->m; k++) {
            char *end;
            errno = 0;
            double v = strtod(f[5 + k], &end);
            if (end == f[5 + k] || *end || errno || !isfinite(v) || v < 0 || v > 1.0001) {
                st = vs_error_set(err, VS_ERR_FORMAT, "%s:%d: weight '%s' is not a number in [0, 1]", name,
                                  lineno, f[5 + k]);
                goto fail;
            }
            r.w[k] = (float)v;
        }
        if ((st = vs_ens_trace_add(t, &r, err))) goto fail;
    }
    if (lineno == 0) {
        st = vs_error_set(err, VS_ERR_FORMAT, "%s: empty file", name);
        goto fail;
    }
    if (!have_header) {
        st = vs_error_set(err, VS_ERR_FORMAT, "%s: no header line", name);
        goto fail;
    }
    return VS_OK;
fail:
    vs_ens_trace_free(t);
    return st;
}

vs_status vs_ens_trace_read(const char *path, vs_ens_trace *t, vs_error *err) {
    uint8_t *data = NULL;
    size_t size = 0;
    vs_ens_trace_init(t);
    vs_status st = vs_read_file(path, &data, &size, err);
    if (st) return st;
    st = vs_ens_trace_parse((const char *)data, size, path, t, err);
    vs_free(data);
    return st;
}
