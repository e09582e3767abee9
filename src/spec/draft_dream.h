/* draft_dream: the DREAM draft model (three blocks: self-attention, cross-attention to the target's
 * features, self-attention) and its drafter. docs/algorithms.md, 'DREAM draft model'; the file layout
 * in docs/formats.md.
 * Owns: the draft model file (its mapping; blocks 1 and 3 as a vs_lm of architecture VS_LM_ARCH_DREAM,
 * the cross-attention block's and the final norm's tensors); per drafter: the draft's KV cache (blocks
 * 1 and 3, one sequence), a mirror of the request's context (each row's key, token or image row), the
 * cross-attention keys and values of every final context row (from the target's features), the keys and
 * values of the drafted nodes' own features, the sampler and the scratch. Borrowed: the target (its token
 * embedding, final norm weight and LM head are read, never its scratch).
 *
 * The model. E_p is the target's input row at position p (token embedding, or the projected image row),
 * f_p the target's last hidden state at p after its final RMSNorm. The draft's input at p is E_p;
 *   block 1: a LLaMA decoder block (RoPE self-attention over the draft's own rows, SwiGLU);
 *   block 2: x += tanh(g_a) * CrossAttn(RMSNorm(x)); x += tanh(g_f) * SwiGLU(RMSNorm(x)); the query of row
 *            p attends to keys/values projected from f_0 .. f_{p-1} (no RoPE; per-head RMSNorm of q and k);
 *   block 3: a LLaMA decoder block;
 * then the draft's own final RMSNorm, whose output at p (the draft's feature, trained towards f_p) goes
 * through the target's LM head (no further norm) to give the distribution of the token at p + 1.
 *
 * The drafter. With the target cache holding rows 0 .. P - 1 and the pending token x_P, the draft holds
 * slots 0 .. P (slot P sees the target features of rows < P: all of them are final), and slot P's output
 * gives d_1. A drafted node at depth j (position P + j) cross-attends to f_0 .. f_{P-1} and to the drafted
 * features of its path: slot P's output and its ancestors' outputs, never another branch's (the released
 * code lets tree nodes see every drafted feature; tests/test_dream.c checks the mask). Chains (greedy or
 * sampled with the request's transforms) or EAGLE-2 trees (opts.tree_top_k), as the MSD drafter. commit
 * drops the drafted slots; the accepted rows are recomputed from true features at the next propose.
 *
 * Prefix reuse and compatibility as the MSD drafter (draft_msd.h): the drafter keeps the keys and values
 * of every row it saw (keeps_features); the model's width, vocabulary and embedding probe must match the
 * target's. */
#ifndef VS_DRAFT_DREAM_H
#define VS_DRAFT_DREAM_H

#include "draft_msd.h"
#include "lm.h"
#include "spec.h"

typedef struct vs_dream_head vs_dream_head;

/* Opens a DREAM file (docs/formats.md). NULL + err naming the file and the key or tensor. */
vs_dream_head *vs_dream_head_load(const char *path, vs_error *err);
/* The same over a file the caller keeps open (and closes after vs_dream_head_free). */
vs_dream_head *vs_dream_head_from_gguf(const vs_gguf *g, vs_error *err);
void vs_dream_head_free(vs_dream_head *h);
const vs_lm *vs_dream_head_lm(const vs_dream_head *h); /* blocks 1 and 3 */
/* VS_OK when the model fits the target (width, vocabulary, embedding probe); else VS_ERR_INVALID. */
vs_status vs_dream_head_check(const vs_dream_head *h, const vs_lm *target, vs_error *err);

/* The shape of a DREAM model: width = the target's; the three blocks share heads and FFN size. */
typedef struct vs_dream_shape {
    int width, n_head, n_head_kv, n_ff, n_ctx, n_vocab;
    float rms_eps, rope_base;
} vs_dream_shape;

/* Tensors in file order (docs/formats.md): blk.0.* (block 1: attn_norm, attn_{q,k,v,output}, ffn_norm,
 * ffn_{gate,up,down}), xblk.* (block 2: attn_norm, attn_{q,k,v,output}, attn_q_norm, attn_k_norm,
 * attn_tanh_gate, ffn_norm, ffn_{gate,up,down}, ffn_tanh_gate), blk.1.* (block 3), final_norm.weight. */
#define VS_DREAM_N_TENSORS 32
const char *vs_dream_tensor_name(int i); /* NULL outside 0 .. VS_DREAM_N_TENSORS - 1 */
/* Tensor i's GGUF shape: ne[0] inputs (fastest), ne[1] outputs (1 for a vector); n_dims 1 or 2. */
void vs_dream_tensor_ne(const vs_dream_shape *s, int i, int64_t ne[2], int *n_dims);
bool vs_dream_tensor_is_norm(int i); /* RMSNorm weights (initialised to 1) */
vs_status vs_dream_shape_check(const vs_dream_shape *s, vs_error *err);
/* The shape of a model for `target` (its width, vocabulary, norm epsilon and RoPE base). */
vs_dream_shape vs_dream_shape_for(const vs_lm *target, int n_head, int n_head_kv, int n_ff, int n_ctx);
/* Writes a DREAM file: s's keys, the target's embedding probe, the tensors (data[i] holds ne[1] rows of
 * ne[0] values): the matrices as mat_type (F32, F16 or BF16), the vectors as F32. */
vs_status vs_dream_head_write(const vs_dream_shape *s, const float probe[VS_MSD_PROBE],
                              const float *const data[VS_DREAM_N_TENSORS], vs_type mat_type, const char *name,
                              const char *path, vs_error *err);

/* A random model for `target` (tests, benchmarks): F32 matrices ~ N(0, std^2), norms 1, the two gates g
 * (0 = the cross-attention block is the identity, as a trained model starts). */
typedef struct vs_dream_random_opts {
    int n_head, n_head_kv, n_ff, n_ctx;
    float std;    /* 0 = 0.02 */
    float gate;   /* g of both gates (tanh(g) scales the branches) */
    uint64_t seed;
} vs_dream_random_opts;
vs_status vs_dream_head_write_random(const vs_dream_random_opts *o, const vs_lm *target, const char *path,
                                     vs_error *err);

typedef struct vs_draft_dream_opts {
    int32_t n_ctx;      /* draft cache rows; <= 0: the target's n_ctx_train */
    vs_type kv_type;    /* VS_TYPE_F32 (0), F16 or BF16 */
    vs_threadpool *tp;  /* borrowed; NULL = caller's thread */
    bool greedy;        /* draft greedily even when the request samples */
    int32_t tree_top_k; /* EAGLE-2 trees (1 .. VS_TREE_MAX_TOP_K); 0 = chains */
    int32_t tree_nodes; /* their nodes (0 = 8 K) */
    /* Visual token compression (DREAM sec. 3.3): the fraction of each image's rows the draft keeps, those
     * that received the most attention in the target's last layer during the prefill (summed over the
     * prefill's queries, averaged over heads); the others leave the draft's stream (its self-attention
     * and its cross-attention keys). 0 or 1: every row; otherwise in (0, 1). */
    float visual_keep;
    /* TEST ONLY: tree nodes cross-attend to every drafted feature of the proposal so far (other branches
     * included), the released code's fault; tests/test_dream.c proves its mask test detects it. */
    bool debug_leak_tree;
} vs_draft_dream_opts;

/* A drafter over model h for target (both borrowed, must outlive it). NULL + err when they do not fit
 * or an option is invalid. Free with vs_spec_drafter_free. */
vs_spec_drafter *vs_draft_dream_new(const vs_dream_head *h, vs_lm *target, const vs_draft_dream_opts *o,
                                    vs_error *err);

typedef struct vs_draft_dream_stats {
    int64_t draft_rows; /* rows the draft evaluated since creation (true slots + drafted) */
    int64_t true_rows;  /* of them, slots computed from the target's features */
    int64_t forwards;   /* draft forwards */
    int64_t features;   /* feature rows received */
    int32_t n_starved;  /* requests the drafter could not draft for (features missing) */
    int64_t dropped_rows; /* image rows compression left out */
} vs_draft_dream_stats;
/* NULL when d is no DREAM drafter. */
const vs_draft_dream_stats *vs_draft_dream_get_stats(const vs_spec_drafter *d);

vs_kv *vs_draft_dream_kv(vs_spec_drafter *d); /* the draft's cache (blocks 1 and 3); NULL: no DREAM drafter */
/* Whether context row `row` of the current request is in the draft's stream (1), left out by compression
 * (0); -1: no such row or no DREAM drafter. */
int vs_draft_dream_row_kept(const vs_spec_drafter *d, int32_t row);

/* TEST ONLY. The draft feature (final-norm output, [width]) of node i of the last proposal (-1: the
 * pending row's, which the proposal starts from), or NULL. */
const float *vs_draft_dream_node_feature(const vs_spec_drafter *d, int32_t i);
/* TEST ONLY. After a propose and before its commit: the draft feature of the last token of `path`
 * (tokens at depths 1 .. n under the pending row) computed as a chain, one row per token, into out
 * [width]; the drafted slots are dropped again. */
vs_status vs_draft_dream_path_feature(vs_spec_drafter *d, const int32_t *path, int32_t n, float *out,
                                      vs_error *err);

#endif
