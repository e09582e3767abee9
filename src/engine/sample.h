/* sample: turning a row of logits into a token, and into the probability vector it was drawn from.
 * Owns: the sampler (its parameters, its own seeded vs_rng, and scratch for one vocabulary of V
 * tokens allocated once at creation, so sampling never allocates). Generation calls
 * vs_sampler_sample; stochastic speculative verification needs the FINAL processed distribution of
 * the target (and of the drafter), which vs_sampler_probs returns, then draws with vs_sampler_pick
 * (which also accepts unnormalised weights such as the residual max(0, p - q)) and
 * vs_sampler_uniform (the acceptance test).
 *
 * Processing order of vs_sampler_probs (logits -> probabilities):
 *   0. validation: a NaN or +inf logit is an error; -inf logits are masked tokens (probability 0);
 *      all logits -inf is an error.
 *   1. temperature == 0: greedy, a one-hot vector at vs_argmax (lowest id among equal maxima);
 *      the other parameters are ignored.
 *   2. top-k (0 < k < V): keep the k largest logits; ties broken by the lowest token id.
 *   3. softmax of logit / temperature over the kept tokens.
 *   4. top-p (< 1): sort by probability (ties by id), keep the shortest prefix whose mass is >= top_p
 *      (always at least one token).
 *   5. min-p (> 0): drop tokens whose probability is < min_p * (largest probability); this uses the
 *      temperature-scaled probabilities of step 3.
 *   6. renormalise the kept tokens to sum 1; every other entry is exactly 0.
 * Neither step 2 nor step 4 sorts the whole vocabulary: top-k is a bounded heap (O(V log k)); top-p
 * without top-k is a quickselect on the probability mass (expected O(V)); top-p after top-k walks
 * the k sorted survivors. */
#ifndef VS_SAMPLE_H
#define VS_SAMPLE_H

#include "common.h"

typedef struct vs_sampler_params {
    float temperature; /* >= 0; 0 = greedy */
    int32_t top_k;     /* <= 0 or >= V: off */
    float top_p;       /* in [0, 1]; 1: off (0 keeps only the most likely token) */
    float min_p;       /* in [0, 1]; 0: off */
    uint64_t seed;     /* seeds the sampler's vs_rng at creation (and at vs_sampler_seed) */
} vs_sampler_params;

/* temperature 1, no top-k / top-p / min-p, seed 0: plain sampling from softmax(logits). */
vs_sampler_params vs_sampler_params_default(void);

typedef struct vs_sampler vs_sampler;

/* A sampler for vocabularies of n_vocab tokens (1 <= n_vocab <= INT32_MAX). NULL + err if the
 * parameters are invalid (NaN, negative temperature, top_p or min_p outside [0, 1]). */
vs_sampler *vs_sampler_new(int64_t n_vocab, const vs_sampler_params *params, vs_error *err);
void vs_sampler_free(vs_sampler *s);

/* Changes the parameters (validated as in _new; the RNG state is kept). */
vs_status vs_sampler_set_params(vs_sampler *s, const vs_sampler_params *params, vs_error *err);
vs_sampler_params vs_sampler_get_params(const vs_sampler *s);
int64_t vs_sampler_n_vocab(const vs_sampler *s);
/* Restarts the RNG from a seed. */
void vs_sampler_seed(vs_sampler *s, uint64_t seed);

/* logits[V] -> probs[V]: the final processed distribution (see the order above). probs may not
 * alias logits. VS_ERR_INVALID naming the token for NaN / +inf logits, or when all are -inf. */
vs_status vs_sampler_probs(vs_sampler *s, const float *logits, float *probs, vs_error *err);

/* Draws a token from weights[V] (finite, >= 0, positive sum; need not sum to 1) with the sampler's
 * RNG. Exactly one RNG draw per call, so a seed fixes the whole sequence. A token of weight 0 is
 * never returned. */
vs_status vs_sampler_pick(vs_sampler *s, const float *weights, int32_t *token, vs_error *err);

/* vs_sampler_probs then vs_sampler_pick: the same token as calling both. probs[V] receives the
 * distribution if non-NULL (else the sampler's scratch is used). */
vs_status vs_sampler_sample(vs_sampler *s, const float *logits, float *probs, int32_t *token, vs_error *err);

/* A uniform double in [0, 1) from the sampler's RNG (speculative acceptance tests). */
double vs_sampler_uniform(vs_sampler *s);

/* Draws from weights[n] (as vs_sampler_pick) with a caller-owned RNG. */
vs_status vs_sample_weights(const float *weights, int64_t n, vs_rng *rng, int32_t *token, vs_error *err);

/* Index of the largest of x[n], the lowest index among equal maxima; NaN entries are skipped.
 * -1 if n <= 0 or every entry is NaN. */
int32_t vs_argmax(const float *x, int64_t n);

#endif
