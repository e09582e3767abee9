/* attn_arch: the decoder's attention inner loops (and a row's RoPE, SwiGLU and BF16 cache stores), one set
 * per ISA (scalar twins in lm.c, AVX2 in arch/attn_avx2.c, AVX-512 in arch/attn_avx512.c). Internal to lm.c
 * and its tests.
 *
 * Shapes: a task holds nq <= VS_ATTN_QMAX queries (rows x heads of one KV head group) that read the
 * same keys k and values v ([T][hd] blocks, F32 or F16 as f16 says; or the BF16 layout of kv.h for the
 * _bf16 kernels). Scores s are [nq][ld].
 *
 * Batch invariance (speculative decoding's greedy guarantee depends on it): the score of query i
 * against key t, a row's softmax and a row's output depend only on that query, the keys / values it
 * reads and its own T[i], never on which other queries share the task or how many there are: every
 * lane of the blocked reductions is computed by the same fixed sequence of operations. */
#ifndef VS_ATTN_ARCH_H
#define VS_ATTN_ARCH_H

#include <stdint.h>

#define VS_ATTN_QMAX 16

/* s[i * ld + t] = scale * dot(q[i], k[t]) for t < T[i]; ld >= max T[i]. vpf (may be NULL): the values
 * the task reads next, prefetched towards the cache while the scores run. */
typedef void vs_attn_scores_fn(float *s, int ld, const float *const *q, const int *T, int nq, const void *k,
                               int f16, int hd, float scale, const void *vpf);
/* In place over s[0..T): entries equal to -INFINITY become exactly 0, the rest exp(s - max) / sum. */
typedef void vs_attn_softmax_fn(float *s, int T);
/* o[i][d] = sum_{t < T} p[i * ld + t] * v[t][d] (o overwritten); p rows are zero beyond their own length. */
typedef void vs_attn_pv_fn(float *const *o, const float *p, int ld, int nq, int T, const void *v, int f16,
                           int hd);
/* y[i] = e^x[i] for x <= 0 (the softmax's range; 0 below -87.3), the same polynomial in every ISA. */
typedef void vs_attn_exp_fn(float *y, const float *x, int n);

vs_attn_scores_fn vs_attn_scores_ref, vs_attn_scores_avx2, vs_attn_scores_avx512;
vs_attn_softmax_fn vs_attn_softmax_ref, vs_attn_softmax_avx2, vs_attn_softmax_avx512;
vs_attn_pv_fn vs_attn_pv_ref, vs_attn_pv_avx2, vs_attn_pv_avx512;
vs_attn_exp_fn vs_attn_exp_ref, vs_attn_exp_avx2, vs_attn_exp_avx512;
/* The feed-forward's SwiGLU, g[i] = silu(g[i]) * u[i] over n values, silu(x) = x * sigmoid(x) with
 * sigmoid(x) = 1 / (1 + e) for x >= 0 and e / (1 + e) for x < 0, e = exp(-|x|) by the polynomial above. */
typedef void vs_attn_swiglu_fn(float *g, const float *u, int64_t n);
vs_attn_swiglu_fn vs_attn_swiglu_ref, vs_attn_swiglu_avx2, vs_attn_swiglu_avx512;
/* RoPE of one row: each of the n_heads heads (hd apart) has its pairs (x[2i], x[2i+1]), i < rope_dim / 2,
 * rotated by (c, s) = (cs[2i], cs[2i + 1]): x[2i] = a c - b s, x[2i + 1] = a s + b c, each product and the
 * sum rounded on its own (no fused multiply-add), so the twins are bitwise equal. */
typedef void vs_attn_rope_fn(float *x, int n_heads, int hd, int rope_dim, const float *cs);
vs_attn_rope_fn vs_attn_rope_ref, vs_attn_rope_avx512;

/* BF16 caches (kv.h's interleaved layout; drafters). Every score and output element is a fixed
 * sequence of f32 fused multiply-adds on exact bf16 values, the same in every ISA, so the twins are
 * BITWISE equal to the scalar references (not just batch-invariant):
 *   s[i * ld + t] = scale * acc, acc = fma(q[hd-1], k[t][hd-1], ... fma(q[0], k[t][0], 0))  (t < T[i]);
 *   o[i][d] = fma(p[T-1], v[T-1][d], ... fma(p[0], v[0][d], 0)): one chain in position order, so a zero
 *   p (a masked key of a tree row) changes nothing and a tree row gets the bits of its causal path.
 * The vector loops need no reductions: 16 keys' pairs of dimensions, or two positions' values, are side
 * by side in memory. Whole 16-key blocks are computed; lanes past T[i] are not stored. */
typedef void vs_attn_scores_bf16_fn(float *s, int ld, const float *const *q, const int *T, int nq,
                                    const uint16_t *k, int hd, float scale);
typedef void vs_attn_pv_bf16_fn(float *const *o, const float *p, int ld, int nq, int T, const uint16_t *v,
                                int hd);
vs_attn_scores_bf16_fn vs_attn_scores_bf16_ref, vs_attn_scores_bf16_avx2, vs_attn_scores_bf16_avx512;
vs_attn_pv_bf16_fn vs_attn_pv_bf16_ref, vs_attn_pv_bf16_avx2, vs_attn_pv_bf16_avx512;
/* One row's key k and value v (hd values each, hd even) into a BF16 block at its slot t, rounded to
 * nearest even (vs_fp32_to_bf16, NaN kept): kd = the block's keys + vs_kv_bf16_key_index(hd, t, 0),
 * vd = its values + vs_kv_bf16_value_index(hd, t, 0), t_odd = t & 1. */
typedef void vs_attn_store_bf16_fn(uint16_t *kd, uint16_t *vd, const float *k, const float *v, int hd,
                                   int t_odd);
vs_attn_store_bf16_fn vs_attn_store_bf16_ref, vs_attn_store_bf16_avx512;

/* dst[i] = src[i] as F32 or F16 (round to nearest even), n values. */
void vs_attn_store_avx2(void *dst, const float *src, int f16, int n);

/* exp polynomial (Cephes-style expf: e^x = 2^n * P(r), r = x - n ln2, |r| <= ln2 / 2) */
#define VS_ATTN_EXP_LO (-87.33654f) /* below: 0 */
#define VS_ATTN_LOG2E 1.44269504088896341f
#define VS_ATTN_LN2_HI 0.693359375f
#define VS_ATTN_LN2_LO (-2.12194440e-4f)
#define VS_ATTN_P0 1.9875691500e-4f
#define VS_ATTN_P1 1.3981999507e-3f
#define VS_ATTN_P2 8.3334519073e-3f
#define VS_ATTN_P3 4.1665795894e-2f
#define VS_ATTN_P4 1.6666665459e-1f
#define VS_ATTN_P5 5.0000001201e-1f

#endif
