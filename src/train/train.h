/* train: the layer operations vlmspec trains with, as explicit forward/backward pairs (llm.c style).
 * Owns: F32 matrix products for training (sgemm through OpenBLAS when built with it, a blocked
 * plain-C fallback and a naive reference twin), every layer's forward and backward, and the losses.
 * Optimiser, schedules and checkpoints live in train_optim.h; the VLM training model (ViT +
 * projector + LLaMA LM), its checkpoints and GGUF export in train_model.h.
 *
 * Conventions (the same in every function of the train_* modules):
 *   - outputs first, then inputs, then dimensions; `d` prefixes a gradient;
 *   - a forward OVERWRITES its outputs; a backward ACCUMULATES (+=) into its gradients, so the
 *     caller zeroes gradient buffers once per step and gradient accumulation comes for free;
 *   - a gradient pointer may be NULL when that gradient is not wanted (frozen weights, pixels);
 *   - all buffers are contiguous row-major F32; shapes are given in the comments as (dim, dim, ...).
 * Dimension letters, used with these meanings everywhere:
 *   N   rows (tokens) processed at once, N = B * T
 *   B   sequences (or images) in a batch; T positions per sequence (Tq queries, Tk keys for
 *       cross-attention)
 *   C   channels of a row (input width), OC output channels
 *   H   query heads, KVH key/value heads (H % KVH == 0: grouped-query attention), D head size
 *   F   hidden width of an MLP; V vocabulary size
 *   S   image side in pixels, P patch side, NP = (S / P)^2 patches per image, CH colour channels
 * Threading: ops that take a vs_threadpool split their work across it (NULL = caller's thread). The
 * OpenBLAS path uses OpenBLAS's own threads (OPENBLAS_NUM_THREADS). Results do not depend on the
 * number of pool threads (every output element is reduced in a fixed order by one thread). */
#ifndef VS_TRAIN_H
#define VS_TRAIN_H

#include "threadpool.h"

/* ---------------------------------------------------------------------------------------------- */
/* Matrix products. C(m, n) = alpha * op(A)(m, k) * op(B)(k, n) + beta * C, row-major; op(X) = X or
 * X^T (ta / tb); lda, ldb, ldc are row strides in elements. beta == 0 ignores C's old contents. */

/* One product's arguments, as the products' drivers pass them to their threads. */
typedef struct vs_gemm_job {
    bool ta, tb;
    int m, n, k;
    float alpha, beta;
    const float *A, *B;
    int lda, ldb, ldc;
    float *C;
} vs_gemm_job;

/* The product selected by vs_train_set_gemm: by default OpenBLAS's cblas_sgemm when the build has it,
 * else vs_train_sgemm_blocked. */
void vs_train_sgemm(vs_threadpool *tp, bool ta, bool tb, int m, int n, int k, float alpha,
                    const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
/* Selects vs_train_sgemm's product for the process: "openblas" (builds with OpenBLAS), "blocked",
 * "amx-bf16x3" (CPUs with AMX-BF16, vs_train_amx_available) or "avx512-bf16" (AVX-512 with BF16,
 * vs_train_bf16_available); "default" = openblas if built, else blocked. false (and no change) for an
 * unknown or unavailable name. */
bool vs_train_set_gemm(const char *name);
bool vs_train_amx_available(void);
bool vs_train_bf16_available(void);
/* AMX-BF16 tiles, each F32 input split into two bf16 halves and three of the four products kept
 * (arch/train_gemm_amx_avx512.c): about 2^-15 relative error per term (F32: 2^-24), 3-5x the F32
 * throughput; not bitwise equal to the other products. Only when vs_train_amx_available(). */
void vs_train_sgemm_amx(vs_threadpool *tp, bool ta, bool tb, int m, int n, int k, float alpha,
                        const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
/* AVX512-BF16 (arch/train_gemm_bf16_avx512.c): both operands rounded to bf16, one product per term
 * accumulated in f32 (VDPBF16PS): about 2^-8 relative error per term, the mixed precision of GPU
 * training; the bits do not depend on the thread count. Only when vs_train_bf16_available(). */
void vs_train_sgemm_bf16(vs_threadpool *tp, bool ta, bool tb, int m, int n, int k, float alpha,
                         const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
/* Plain-C cache-blocked product, rows of C split across tp. */
void vs_train_sgemm_blocked(vs_threadpool *tp, bool ta, bool tb, int m, int n, int k, float alpha,
                            const float *A, int lda, const float *B, int ldb, float beta, float *C,
                            int ldc);
/* Naive reference twin (double accumulation, single thread). */
void vs_train_sgemm_ref(bool ta, bool tb, int m, int n, int k, float alpha, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc);
/* "openblas", "blocked", "amx-bf16x3" or "avx512-bf16": what vs_train_sgemm uses now. */
const char *vs_train_sgemm_backend(void);
/* Threads OpenBLAS uses (process-wide OpenBLAS setting; no-op for the blocked backend, which uses the
 * pool it is given). */
void vs_train_set_blas_threads(int n);

/* ---------------------------------------------------------------------------------------------- */
/* Linear: out (N, OC) = inp (N, C) * w^T + b, w (OC, C) (GGUF ne = [C, OC]), b (OC) or NULL. */
void vs_train_linear_forward(vs_threadpool *tp, float *out, const float *inp, const float *w,
                             const float *b, int N, int C, int OC);
void vs_train_linear_backward(vs_threadpool *tp, float *dinp, float *dw, float *db, const float *dout,
                              const float *inp, const float *w, int N, int C, int OC);

/* Token embedding: out (N, C) row n = wte (V, C) row tok[n]. Rows with tok[n] < 0 are left untouched
 * (the VLM fills them with image rows). */
void vs_train_embed_forward(float *out, const int32_t *tok, const float *wte, int N, int C);
void vs_train_embed_backward(float *dwte, const float *dout, const int32_t *tok, int N, int C);

/* RMSNorm: out = inp / sqrt(mean(inp^2) + eps) * w; rstd (N) kept for backward. */
void vs_train_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                              float eps);
void vs_train_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                               const float *w, const float *rstd, int N, int C);

/* LayerNorm: out = (inp - mean) * rstd * w + b; mean, rstd (N) kept for backward. */
void vs_train_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                const float *b, int N, int C, float eps);
void vs_train_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                 const float *w, const float *mean, const float *rstd, int N, int C);

/* Residual add: out = a + b over n values (out may alias a or b). */
void vs_train_add_forward(float *out, const float *a, const float *b, size_t n);
void vs_train_add_backward(float *da, float *db, const float *dout, size_t n);

/* RoPE on ADJACENT pairs, as llama.cpp's "llama" architecture computes it: for head h and pair i,
 * (x[2i], x[2i+1]) rotates by angle pos * base^(-2i / D). cs (n_pos, D / 2, 2) holds (cos, sin) for
 * positions 0..n_pos-1 (vs_train_rope_table); pos (N) are row positions (< n_pos). inp/out (N, H*D);
 * out may alias inp. The backward is the inverse rotation (dinp += R^T dout). */
void vs_train_rope_table(float *cs, int n_pos, int D, float base);
void vs_train_rope_forward(float *out, const float *inp, const float *cs, const int32_t *pos, int N,
                           int H, int D);
void vs_train_rope_backward(float *dinp, const float *dout, const float *cs, const int32_t *pos, int N,
                            int H, int D);

/* Scaled dot-product attention, softmax(q k^T / sqrt(D)) v, with grouped-query heads: query head h
 * reads key/value head h / (H / KVH). Layouts: q and out (B, Tq, H*D); k, v (B, Tk, KVH*D);
 * att (B, H, Tq, Tk) the softmax probabilities, kept for backward (masked entries are 0).
 * Backward: datt is scratch of att's shape (overwritten); dq, dk, dv accumulate.
 * Self-attention (Tq == Tk == T): causal (query t sees keys 0..t: the LM) or bidirectional
 * (every key: the ViT). */
void vs_train_self_attention_forward(vs_threadpool *tp, float *out, float *att, const float *q,
                                     const float *k, const float *v, int B, int T, int H, int KVH,
                                     int D, bool causal);
void vs_train_self_attention_backward(vs_threadpool *tp, float *dq, float *dk, float *dv, float *datt,
                                      const float *dout, const float *att, const float *q,
                                      const float *k, const float *v, int B, int T, int H, int KVH,
                                      int D, bool causal);
/* Which attention path the four functions here use, process-wide: "direct" (row by row, F32; the plain
 * and AVX kernels give the same bits), "gemm" (per head and block of query rows, matrix products on the
 * AMX-BF16 tiles through vs_train_sgemm_amx: about 2^-15 relative error per product term, several
 * times faster on long sequences; only when vs_train_amx_available()), or "auto" (the default: gemm
 * when vs_train_sgemm's backend is amx-bf16x3, else direct). false (and no change) for an unknown or
 * unavailable name. Neither path's bits depend on the thread count. */
bool vs_train_set_attention(const char *name);
/* "direct" or "gemm": what the attention functions use now. */
const char *vs_train_attention_backend(void);
/* Cross-attention: queries of one stream (Tq rows) over keys/values of another (Tk rows). kv_len
 * (B, Tq), or NULL for "all Tk keys": query (b, t) sees keys 0..kv_len[b*Tq+t]-1 (0 gives a zero
 * output row). DREAM's "features of positions < j" is kv_len[j] = j. */
void vs_train_cross_attention_forward(vs_threadpool *tp, float *out, float *att, const float *q,
                                      const float *k, const float *v, const int32_t *kv_len, int B,
                                      int Tq, int Tk, int H, int KVH, int D);
void vs_train_cross_attention_backward(vs_threadpool *tp, float *dq, float *dk, float *dv, float *datt,
                                       const float *dout, const float *att, const float *q,
                                       const float *k, const float *v, const int32_t *kv_len, int B,
                                       int Tq, int Tk, int H, int KVH, int D);

/* Element-wise activations over n values (out may alias inp in forwards). */
/* SwiGLU gate: out = silu(gate) * up, silu(x) = x * sigmoid(x). */
void vs_train_swiglu_forward(float *out, const float *gate, const float *up, size_t n);
void vs_train_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                              const float *up, size_t n);
/* GELU, tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (ggml_gelu's formula). */
void vs_train_gelu_forward(float *out, const float *inp, size_t n);
void vs_train_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n);
/* GELU, exact: 0.5 x (1 + erf(x / sqrt 2)) (torch.nn.GELU()). */
void vs_train_gelu_erf_forward(float *out, const float *inp, size_t n);
void vs_train_gelu_erf_backward(float *dinp, const float *dout, const float *inp, size_t n);
/* Quick-GELU (OpenAI CLIP): x * sigmoid(1.702 x). */
void vs_train_quick_gelu_forward(float *out, const float *inp, size_t n);
void vs_train_quick_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n);

/* Patch embedding, a convolution with stride = kernel = P and no bias: img (B, CH, S, S) planar ->
 * col (B*NP, CH*P*P) (im2col, patches in raster order, each patch's values ordered (ch, y, x)) ->
 * out (B*NP, C) = col * w^T with w (C, CH*P*P) (GGUF ne = [P, P, CH, C]). col is kept for backward;
 * dimg may be NULL (pixels are data). */
void vs_train_patch_embed_forward(vs_threadpool *tp, float *out, float *col, const float *img,
                                  const float *w, int B, int CH, int S, int P, int C);
void vs_train_patch_embed_backward(vs_threadpool *tp, float *dimg, float *dw, const float *dout,
                                   const float *col, const float *w, int B, int CH, int S, int P,
                                   int C);

/* ViT token assembly: out (B, NP + 1, C): row 0 = cls + pos[0], row 1 + p = patches[b, p] + pos[1 + p];
 * patches (B, NP, C), cls (C), pos (NP + 1, C). */
void vs_train_vit_embed_forward(float *out, const float *patches, const float *cls, const float *pos,
                                int B, int NP, int C);
void vs_train_vit_embed_backward(float *dpatches, float *dcls, float *dpos, const float *dout, int B,
                                 int NP, int C);
/* Drops the class token: out (B, NP, C) = inp (B, NP + 1, C) rows 1..NP. */
void vs_train_drop_cls_forward(float *out, const float *inp, int B, int NP, int C);
void vs_train_drop_cls_backward(float *dinp, const float *dout, int B, int NP, int C);
/* k x k average pooling of each image's G x G patch grid, as the engine pools a drafter's features
 * (image.h's vs_pool_grid_avg: row-major windows, those at the edge average what is inside):
 * out (B, Gk * Gk, C), Gk = ceil(G / k), from inp (B, G * G, C). The backward accumulates into dinp. */
void vs_train_pool_grid_forward(float *out, const float *inp, int B, int G, int k, int C);
void vs_train_pool_grid_backward(float *dinp, const float *dout, int B, int G, int k, int C);

/* ---------------------------------------------------------------------------------------------- */
/* Losses. Every loss is a weighted sum over rows, loss = sum_n w[n] * l_n, with w (N) given by the
 * caller (a loss mask divided by the number of counted rows gives the masked mean; w[n] == 0 skips
 * the row). They return the loss (accumulated in double) and their backward takes dloss, the
 * gradient flowing into the loss (1 for the final loss, a mixing weight inside a combined loss). */

/* Softmax cross-entropy: l_n = -log softmax(logits_n)[targets[n]]. probs (N, V) kept for backward
 * (rows with w[n] == 0 are not written). targets in [0, V). */
double vs_train_xent_forward(float *probs, const float *logits, const int32_t *targets, const float *w,
                             int N, int V);
void vs_train_xent_backward(float *dlogits, const float *probs, const int32_t *targets, const float *w,
                            float dloss, int N, int V);
/* Soft cross-entropy to a given distribution p (N, V): l_n = -sum_v p[n,v] log q[n,v], q = softmax
 * of logits (kept in probs). */
double vs_train_soft_xent_forward(float *probs, const float *logits, const float *p, const float *w,
                                  int N, int V);
void vs_train_soft_xent_backward(float *dlogits, const float *probs, const float *p, const float *w,
                                 float dloss, int N, int V);
/* KL divergence KL(p || q) = sum_v p log(p / q), q = softmax(logits) (0 log 0 = 0). Same gradient as
 * the soft cross-entropy (they differ by p's entropy, a constant). */
double vs_train_kl_forward(float *probs, const float *logits, const float *p, const float *w, int N,
                           int V);
void vs_train_kl_backward(float *dlogits, const float *probs, const float *p, const float *w,
                          float dloss, int N, int V);
/* Smooth L1 (Huber, PyTorch's smooth_l1_loss): l_n = (1/C) sum_c h(pred - target), h(d) = 0.5 d^2 /
 * beta for |d| < beta, |d| - 0.5 beta otherwise. dtarget may be NULL. */
double vs_train_smooth_l1_forward(const float *pred, const float *target, const float *w, int N, int C,
                                  float beta);
void vs_train_smooth_l1_backward(float *dpred, float *dtarget, const float *pred, const float *target,
                                 const float *w, float dloss, int N, int C, float beta);

/* Norm cap: l = (1/N) sum_n max(0, |x_n| / tau - 1)^2 over the L2 norms of N rows of C (rows louder
 * than tau are pulled back, quieter ones are free). Keeps a projector's image rows on the scale of
 * the LM's token embeddings (docs/target.md). tau > 0. */
double vs_train_norm_cap_forward(const float *x, int N, int C, float tau);
void vs_train_norm_cap_backward(float *dx, const float *x, float dloss, int N, int C, float tau);

/* Attention grounding (`train target --ground`): one supervised query row of a causal self-attention.
 * Sequence b, query row q, and the key rows k0 + p for the set bits p of mask (every one <= q). */
typedef struct vs_train_ground {
    int32_t b, q, k0;
    uint64_t mask;
} vs_train_ground;
/* l = (1/n) sum_i -log(sum_{s in G_i} att[b_i, head, q_i, s]) over n grounds, att the probabilities
 * (B, H, T, T) of vs_train_self_attention_forward (a sum under 1e-30 counts as 1e-30): the share of
 * head `head`'s attention that falls on the rows the answer lies in. The backward ACCUMULATES
 * dloss * dl/dq and dl/dk into dq (B, T, H*D) and dk (B, T, KVH*D) through the softmax of the scores
 * q.k / sqrt(D) (per score s of query i: (att_s - [s in G_i] att_s / sum_G att) / n; where every
 * att_s of G_i is 0, the uniform distribution over G_i stands for att_s / sum_G att). */
double vs_train_attn_ground_forward(const float *att, int B, int T, int H, int head, const vs_train_ground *g,
                                    int n);
void vs_train_attn_ground_backward(float *dq, float *dk, const float *att, const float *q, const float *k,
                                   int B, int T, int H, int KVH, int D, int head, const vs_train_ground *g,
                                   int n, float dloss);

/* ---------------------------------------------------------------------------------------------- */
/* Threaded twins: the same results, bit for bit, as the plain functions above (each thread runs the
 * plain function on a slice of independent outputs; sums over rows keep their order), on tp's
 * threads (tp may be NULL: one thread). */
void vs_train_swiglu_forward_tp(vs_threadpool *tp, float *out, const float *gate, const float *up,
                                size_t n);
void vs_train_swiglu_backward_tp(vs_threadpool *tp, float *dgate, float *dup, const float *dout,
                                 const float *gate, const float *up, size_t n);
void vs_train_add_forward_tp(vs_threadpool *tp, float *out, const float *a, const float *b, size_t n);
void vs_train_rmsnorm_forward_tp(vs_threadpool *tp, float *out, float *rstd, const float *inp,
                                 const float *w, int N, int C, float eps);
void vs_train_rmsnorm_backward_tp(vs_threadpool *tp, float *dinp, float *dw, const float *dout,
                                  const float *inp, const float *w, const float *rstd, int N, int C);
void vs_train_rope_forward_tp(vs_threadpool *tp, float *out, const float *inp, const float *cs,
                              const int32_t *pos, int N, int H, int D);
void vs_train_rope_backward_tp(vs_threadpool *tp, float *dinp, const float *dout, const float *cs,
                               const int32_t *pos, int N, int H, int D);
/* x[0..n) = 0 */
void vs_train_zero_tp(vs_threadpool *tp, float *x, size_t n);
/* Softmax cross-entropy (vs_train_xent_*): rows split across threads; the loss is still summed over
 * rows in increasing n. */
double vs_train_xent_forward_tp(vs_threadpool *tp, float *probs, const float *logits,
                                const int32_t *targets, const float *w, int N, int V);
void vs_train_xent_backward_tp(vs_threadpool *tp, float *dlogits, const float *probs,
                               const int32_t *targets, const float *w, float dloss, int N, int V);

#endif
