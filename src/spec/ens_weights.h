/* ens_weights: how an ensemble drafter weighs its m drafting inputs (docs/algorithms.md,
 * 'TABED adaptive weights'; TABED sec. 5 and app. B, IbED sec. 6.2).
 * Owns: the weight-policy configuration and its parser ("static[:r1,r2,..]", "grid", "inv-kl",
 * "inv-tvd", "random", "adaboost"), the w-grid enumeration, the verified-position history (a bounded
 * record per position, see below), the pure choice of the weights for the next block from that history,
 * and the per-block weight trace (in memory, and its text file format, reader and writer).
 *
 * History. After each block the drafter pushes, for every verified position (min(accepted + 1, gamma)),
 * the target's distribution p_t and each row's own distribution q_{m,t} (dense, V values each). The
 * push does not keep the distributions: it reduces them at once to the numbers the policies sum over
 * the window, so memory per position is small and independent of V:
 *   per row m:        KL(p_t || q_{m,t}), TVD(p_t, q_{m,t}), hit_m = [argmax q_{m,t} == argmax p_t];
 *   per grid vector j: hit_j = [argmax sum_m w_jm q_{m,t} == argmax p_t], KL(p_t || sum_m w_jm q_{m,t}).
 * (The paper caches the distributions and recomputes q_w over the window at every block; reducing at
 * push time gives the same sums because the candidate set of every policy here is fixed per request.)
 * The window h keeps the last h positions (a ring of h records); h = 0 keeps every position of the
 * current request (records only; about (2m + J) * 8 + m + J bytes each, J = grid vectors).
 *
 * Top-k approximation (cfg.topk = k > 0, default 64; 0 = exact). For large vocabularies the distances
 * are computed on the union U of the k most likely tokens of p and of every q_m (their exact values),
 * plus ONE "other" bin holding each distribution's remaining mass: KL and TVD of these coarsened
 * distributions. By the log-sum inequality the coarsened KL is a lower bound of the exact KL (likewise
 * TVD); the terms it loses are those of tokens outside every top-k. The argmax of a mixture is taken
 * over U: exact whenever the mixture's most likely token is in some distribution's top-k (each row's
 * and the target's own argmax always are). Row hits and the target's argmax are always exact (dense).
 * When (m + 1) * k >= V the union is the whole vocabulary and everything is exact.
 *
 * Distances: KL(p || q) = sum_{p(x) > 0} p(x) ln(p(x) / max(q(x), 1e-10)) (forward KL, target to
 * draft; the floor keeps a truncated draft finite), TVD = 0.5 sum |p - q|.
 *
 * Policies (the first block of a request, an empty window, or weights that all come out zero give
 * uniform weights; vs_ens_choice.fallback says so):
 *   static   uniform, or the given ratios normalised (IbED's 1:1, 2:1 ...);
 *   grid     every w in {0, 1/n, .., 1}^m with sum 1 (n = 10: 11 vectors for m = 2, 286 for m = 4);
 *            most hits wins; ties: smallest sum KL (equal within 1e-9 relative), then the vector closest
 *            to uniform, then the first in enumeration order (row 0's weight descending);
 *   inv-kl / inv-tvd  e_m = sum_t KL or TVD; w_m = (1/e_m) / sum_k (1/e_k), then the temperature
 *            w_m <- w_m^(1/tau) / sum_k w_k^(1/tau) (tau = 1 keeps w; tau -> 0 picks the best row;
 *            tau = 0 is that limit; rows with e_m = 0 share all the weight);
 *   random   uniform on the simplex (normalised exponentials), drawn per block (ablation);
 *   adaboost TABED app. B.4: w_m = ln(1/eps_m - 1) + C ln(K - 1), K = V, eps_m = row m's hard-label
 *            error rate on the window smoothed as (errors + 0.5) / (positions + 1) so it stays in
 *            (0, 1); negative weights become 0.
 * Not thread-safe per history; the functions without a history are pure. */
#ifndef VS_ENS_WEIGHTS_H
#define VS_ENS_WEIGHTS_H

#include <stdio.h>

#include "common.h"

#define VS_ENS_MAX_ROWS 8

typedef enum vs_ens_policy {
    VS_ENS_STATIC = 0,
    VS_ENS_GRID = 1,
    VS_ENS_INV_KL = 2,
    VS_ENS_INV_TVD = 3,
    VS_ENS_RANDOM = 4,
    VS_ENS_ADABOOST = 5,
} vs_ens_policy;

typedef struct vs_ens_weights_cfg {
    vs_ens_policy policy;
    int32_t n_ratios;              /* static: number of given ratios (0 = uniform; else == m) */
    float ratios[VS_ENS_MAX_ROWS]; /* static: ratios >= 0, not all 0 */
    int32_t grid_n;                /* grid resolution n (>= 1; default 10) */
    float tau;                     /* inverse-distance temperature (>= 0; default 1) */
    int32_t window;                /* h: positions used (0 = all of the request) */
    int32_t topk;                  /* tokens kept per distribution for distances (0 = exact; default 64) */
    float adaboost_c;              /* AdaBoost's C (default 1) */
} vs_ens_weights_cfg;

/* static uniform, n 10, tau 1, window 0, top-k 64, C 1. */
void vs_ens_weights_cfg_default(vs_ens_weights_cfg *c);
/* Parses a policy name ("static", "static:2,1", "grid", "inv-kl", "inv-tvd", "random", "adaboost")
 * into c->policy (and the ratios); other fields are left as they are. VS_ERR_INVALID naming the
 * accepted names for anything else. */
vs_status vs_ens_weights_parse(const char *s, vs_ens_weights_cfg *c, vs_error *err);
const char *vs_ens_policy_name(vs_ens_policy p);
/* Checks c for m rows (1 <= m <= VS_ENS_MAX_ROWS; ratios count; ranges). */
vs_status vs_ens_weights_check(const vs_ens_weights_cfg *c, int32_t m, vs_error *err);

/* Number of vectors in {0, 1/n, .., 1}^m summing to 1: C(n + m - 1, m - 1); -1 when m or n is out of
 * range or the count exceeds 1e6. */
int64_t vs_ens_grid_count(int32_t m, int32_t n);
/* Writes them into w[count][m] in enumeration order (row 0's weight descending, then row 1's ...). */
vs_status vs_ens_grid_build(int32_t m, int32_t n, float *w, int64_t count, vs_error *err);

/* Distances between dense distributions of n values (see the top). */
double vs_ens_kl(const float *p, const float *q, int64_t n);
double vs_ens_tvd(const float *p, const float *q, int64_t n);

/* ------------------------------------------------------------------------------------------------
 * History and choice */

typedef struct vs_ens_hist vs_ens_hist;

/* A history for m rows over a vocabulary of n_vocab, for the policy c (copied). NULL + err on bad
 * configuration. */
vs_ens_hist *vs_ens_hist_new(const vs_ens_weights_cfg *c, int32_t m, int32_t n_vocab, vs_error *err);
void vs_ens_hist_free(vs_ens_hist *h);
/* Forgets every position (a new request). */
void vs_ens_hist_clear(vs_ens_hist *h);
/* Records one verified position: p [n_vocab] the target's distribution, q[m] pointers to each row's
 * [n_vocab] distribution. */
vs_status vs_ens_hist_push(vs_ens_hist *h, const float *p, const float *const *q, vs_error *err);
int32_t vs_ens_hist_len(const vs_ens_hist *h);   /* positions in the window */
int64_t vs_ens_hist_total(const vs_ens_hist *h); /* positions pushed since the last clear */
size_t vs_ens_hist_bytes(const vs_ens_hist *h);  /* memory held */
/* Sums over the window (tests, reports): per row e_KL, e_TVD, hits; NULL outputs are skipped. */
void vs_ens_hist_row_sums(const vs_ens_hist *h, double *kl, double *tvd, int32_t *hits);

typedef struct vs_ens_choice {
    float w[VS_ENS_MAX_ROWS]; /* weights, sum 1 */
    bool fallback;            /* uniform because nothing could be learnt (empty window, all zero) */
    int32_t n_positions;      /* window positions the choice used */
    int32_t grid_index;       /* grid: the winning vector's index; -1 otherwise */
    int32_t score;            /* grid: its hits; -1 otherwise */
    double dist;              /* grid: its sum KL; inverse distance: the chosen row's e; else 0 */
} vs_ens_choice;

/* The weights for the next block. rng: the random policy's generator (others ignore it; may be NULL
 * for them). */
vs_status vs_ens_weights_choose(const vs_ens_hist *h, vs_rng *rng, vs_ens_choice *out, vs_error *err);

/* ------------------------------------------------------------------------------------------------
 * Weight trace: one record per block.
 * File format (text, tab-separated, written by vs_ens_trace_write):
 *   # vlmspec weight trace 1
 *   # inputs m t            (the rows' names, in order)
 *   # policy grid
 *   request  block  step  n_draft  n_accept  w_m  w_t       (header: one w_<name> column per row)
 *   0        0      0     5        2         0.5  0.5
 * step = tokens generated in the request before the block; weights have 6 decimals. */

typedef struct vs_ens_trace_rec {
    int32_t request, block, step, n_draft, n_accept;
    float w[VS_ENS_MAX_ROWS];
} vs_ens_trace_rec;

typedef struct vs_ens_trace {
    int32_t m;
    char names[VS_ENS_MAX_ROWS][16]; /* row names ("m", "t", "c", "p") */
    char policy[32];
    vs_ens_trace_rec *rec; /* [n] (owned) */
    int32_t n, cap;
} vs_ens_trace;

void vs_ens_trace_init(vs_ens_trace *t);
void vs_ens_trace_free(vs_ens_trace *t);
vs_status vs_ens_trace_add(vs_ens_trace *t, const vs_ens_trace_rec *r, vs_error *err);
vs_status vs_ens_trace_write(const vs_ens_trace *t, FILE *f, vs_error *err);
/* Strict reader: every size and number is checked; errors name the file and line. */
vs_status vs_ens_trace_read(const char *path, vs_ens_trace *t, vs_error *err);
vs_status vs_ens_trace_parse(const char *text, size_t len, const char *name, vs_ens_trace *t, vs_error *err);

#endif
