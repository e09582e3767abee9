/* lm: the LLaMA-family decoder (general.architecture = "llama").
 * Owns: the model's configuration (read once from GGUF metadata), read-only weight pointers into the
 * GGUF mapping (plus small F32 copies of the norm vectors), and the forward scratch, allocated for
 * the largest batch seen so far and grown (never per call). The KV cache is a separate object
 * (kv.h) so one model can serve several caches (target, drafter rows).
 *
 * The one forward call evaluates a BATCH OF ROWS. Each row is a token id or an embedding vector
 * (image rows), a sequence id, a RoPE position, and flags. Semantics:
 *   - the rows of sequence s are appended to s's KV cache in batch order;
 *   - a row attends to every row of its sequence cached before this batch, plus
 *       causal (row.tree == false): the earlier rows of the same sequence in this batch and itself;
 *       tree  (row.tree == true):  only the listed ancestor rows (batch indices) and itself;
 *   - logits come back for the rows with want_logits set, in batch order.
 * All matrix products run over all n rows at once (vs_matmul), so verifying k drafted rows costs one
 * pass over the weights. Not thread-safe: one forward at a time per vs_lm (it owns the scratch);
 * parallelism comes from the thread pool passed in. */
#ifndef VS_LM_H
#define VS_LM_H

#include "gguf.h"
#include "kernels.h"
#include "kv.h"

/* general.architecture of a feature-level draft head (an EAGLE-style head: MSD): the same decoder
 * blocks under the key prefix "msd." (msd.embedding_length ..., msd.vocab_size = the target's), without
 * token_embd, output_norm and output (the drafter uses the target's embedding and LM head), blk.0's
 * attn_norm optional. Such a model takes embedding rows only and returns hidden states, no logits. The
 * drafter's own tensors (fc.weight, fc.bias) are read by the drafter (docs/formats.md). */
#define VS_LM_ARCH_HEAD "msd"
/* general.architecture of a DREAM draft model: its two self-attention decoder blocks are blk.0 and blk.1
 * under the prefix "dream." with the same rules as VS_LM_ARCH_HEAD; the cross-attention block between
 * them (xblk.*), the final norm and the target facts are read by the drafter (draft_dream.h), which runs
 * the cross-attention block through vs_lm_out.layer_fn. */
#define VS_LM_ARCH_DREAM "dream"

typedef struct vs_lm_config {
    int n_embd;       /* model width (llama.embedding_length) */
    int n_layer;      /* decoder blocks */
    int n_head;       /* query heads */
    int n_head_kv;    /* key/value heads (n_head % n_head_kv == 0; GQA when smaller) */
    int head_dim;     /* n_embd / n_head */
    int n_ff;         /* SwiGLU hidden width */
    int n_vocab;      /* rows of token_embd */
    int n_ctx_train;  /* llama.context_length: default and limit for a KV cache */
    float rms_eps;    /* llama.attention.layer_norm_rms_epsilon */
    float rope_base;  /* llama.rope.freq_base (default 10000) */
    int rope_dim;     /* llama.rope.dimension_count (default head_dim); rotates dims [0, rope_dim) */
    bool tied_output; /* no output.weight: logits use token_embd */
    vs_type wtype;    /* type of blk.0.attn_q.weight (what "an F16 model" means) */
} vs_lm_config;

/* A weight matrix: n_out rows of n_in values of `type`, row-major, pointing into the mapping; quantised
 * matrices (Q8_0, Q4_0, K-quants) on AVX-512 VNNI CPUs (Q4_K / Q5_K also on AVX2 CPUs with AVX-VNNI) also
 * have a repacked copy (kernels.h, x16, vs_x16_wanted) that the products read. */
typedef struct vs_lm_mat {
    vs_type type;
    int64_t n_out, n_in;
    const void *data;
    const void *packed; /* quantised types: the x16 copy (owned by the vs_lm), or NULL */
} vs_lm_mat;

typedef struct vs_lm_layer {
    const float *attn_norm; /* [n_embd] */
    vs_lm_mat wq;           /* [n_head * head_dim][n_embd] */
    vs_lm_mat wk;           /* [n_head_kv * head_dim][n_embd] */
    vs_lm_mat wv;           /* [n_head_kv * head_dim][n_embd] */
    vs_lm_mat wo;           /* [n_embd][n_head * head_dim] */
    const float *ffn_norm;  /* [n_embd] */
    vs_lm_mat w_gate;       /* [n_ff][n_embd] */
    vs_lm_mat w_up;         /* [n_ff][n_embd] */
    vs_lm_mat w_down;       /* [n_embd][n_ff] */
} vs_lm_layer;

typedef struct vs_lm_weights {
    vs_lm_mat tok_embd;       /* [n_vocab][n_embd] */
    vs_lm_layer *layers;      /* [n_layer] */
    const float *output_norm; /* [n_embd] */
    vs_lm_mat output;         /* [n_vocab][n_embd]; == tok_embd when tied */
} vs_lm_weights;

typedef struct vs_lm vs_lm;

/* Opens a GGUF file and loads the model; the vs_lm owns the mapping. Every required key and tensor
 * shape is validated; errors name the file and the key or tensor. */
vs_lm *vs_lm_load(const char *path, vs_error *err);
/* Loads from an open file the caller keeps open (and closes) after vs_lm_free. */
vs_lm *vs_lm_from_gguf(const vs_gguf *g, vs_error *err);
void vs_lm_free(vs_lm *lm);

const vs_lm_config *vs_lm_cfg(const vs_lm *lm);
const vs_lm_weights *vs_lm_w(const vs_lm *lm);
const vs_gguf *vs_lm_gguf(const vs_lm *lm); /* the file (for the tokenizer keys) */
const char *vs_lm_arch(const vs_lm *lm);    /* "llama", VS_LM_ARCH_HEAD or VS_LM_ARCH_DREAM */
int64_t vs_lm_n_params(const vs_lm *lm);    /* values in all weight tensors (tied counted once) */
size_t vs_lm_weight_bytes(const vs_lm *lm); /* bytes of all weight tensors (tied counted once) */

/* A KV cache shaped for this model. n_ctx <= 0 means cfg.n_ctx_train. */
vs_kv *vs_lm_kv_new(const vs_lm *lm, int n_seq, int n_ctx, vs_type type, vs_error *err);

/* One input row of a batch. Zero-initialise and set what you need: the default is a causal row of
 * sequence 0 without logits. */
typedef struct vs_lm_row {
    int32_t token;      /* token id in [0, n_vocab), used when embd == NULL */
    const float *embd;  /* [n_embd] input embedding (e.g. a projected image patch), or NULL */
    int32_t seq;        /* KV sequence, in [0, vs_kv_n_seq) */
    int32_t pos;        /* RoPE position (>= 0); callers normally pass the slot this row lands in */
    bool want_logits;   /* return this row's logits */
    bool tree;          /* false: causal within the batch; true: attend to anc[] (+ cache + self) */
    int32_t n_anc;      /* tree only: number of ancestors */
    const int32_t *anc; /* tree only: batch indices of ancestor rows; each < this row's index and of
                         * the same sequence */
    /* Tree only, for trees drafted over several forwards (earlier depths' nodes of other branches are
     * already cached): when mask_past is set, of the rows cached before this batch the row attends only
     * to slots [0, past_len) and to the slots listed in past_anc (each in [past_len, cached length)). */
    bool mask_past;
    int32_t past_len;
    int32_t n_past_anc;
    const int32_t *past_anc;
} vs_lm_row;

/* Attention probabilities, for drafters that score keys (DREAM: attention entropy per layer and the
 * attention each image row receives). Called for every (layer, row, head) after the softmax, with
 * p[0..n_keys) over the row's sequence slots 0 .. n_keys - 1 (n_keys = rows cached before the batch
 * + this row's slot offset + 1; masked slots hold 0). Called CONCURRENTLY from the pool's threads,
 * each (layer, row, head) exactly once: write to disjoint places or aggregate per thread. p is only
 * valid during the call. */
typedef void (*vs_lm_attn_fn)(void *ctx, int layer, int row, int head, const float *p, int n_keys);

/* A block of the caller's between two decoder blocks (DREAM's cross-attention block): called after
 * block `layer` (every layer but the last) with the residual stream x [n][n_embd] of the batch's rows,
 * which it may change in place; the next block's input norm is then taken of the changed rows. Called on
 * the forward's own thread outside the pool's jobs (it may run jobs on the pool itself). It cannot fail:
 * whatever it needs is prepared before the forward. */
typedef void (*vs_lm_layer_fn)(void *ctx, int layer, float *x, int n);

/* What a forward returns besides filling the cache. Any pointer may be NULL (not wanted). */
typedef struct vs_lm_out {
    float *logits;           /* [n_want][n_vocab]: rows with want_logits, in batch order */
    float *hidden;           /* [n][n_embd]: every row's last-layer output before the final norm */
    int n_layer_out;         /* layers whose outputs to return */
    const int *layer_ids;    /* [n_layer_out]: layer l's output = residual stream after block l */
    float **layer_hidden;    /* [n_layer_out] buffers of [n][n_embd] */
    vs_lm_attn_fn attn_fn;   /* optional attention observer, see above */
    void *attn_ctx;
    int attn_layer;          /* call attn_fn for this layer only; -1 = every layer */
    vs_lm_layer_fn layer_fn; /* optional block between layers, see above */
    void *layer_ctx;
    unsigned mm_flags;       /* vs_matmul_ex flags of this forward's F16/BF16 products (0: the size rule);
                              * a user that keeps them the same on every forward keeps batch invariance */
} vs_lm_out;

/* Evaluates rows[0..n) (see the top of this file), appends them to kv, and fills out (may be NULL).
 * Validates everything first (token range, sequence ids, ancestors, context room): on error nothing
 * is written to the cache. n >= 1. */
vs_status vs_lm_forward(vs_lm *lm, vs_kv *kv, vs_threadpool *tp, const vs_lm_row *rows, int n,
                        const vs_lm_out *out, vs_error *err);

/* Final RMSNorm (when apply_norm) and the output matrix applied to n hidden rows:
 * logits [n][n_vocab] from h [n][n_embd]. For draft heads that reuse the target's LM head. */
vs_status vs_lm_head(vs_lm *lm, vs_threadpool *tp, const float *h, int n, bool apply_norm, float *logits,
                     vs_error *err);
/* Token embedding (dequantised row of token_embd) into out [n_embd]. */
vs_status vs_lm_embed(const vs_lm *lm, int32_t token, float *out, vs_error *err);

/* --- random-weight models (tests, benchmarks, `vlmspec model random`) --- */
typedef struct vs_lm_random_opts {
    int n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx;
    int n_vocab;              /* synthetic vocabulary size (>= 8) when tok_from is NULL */
    const vs_gguf *tok_from;  /* copy every tokenizer.* key from this file (vocab size from it), or NULL */
    vs_type type;             /* type of the 2-D weights (token_embd included); norms are F32 */
    float rope_base;          /* 0 = 10000 */
    float rms_eps;            /* 0 = 1e-5 */
    float init_std;           /* 0 = 0.02: weights ~ N(0, std^2); norm weights are 1 */
    bool tied;                /* no output.weight */
    uint64_t seed;
    const char *omit;         /* tests: leave out this key or tensor (NULL = none) */
} vs_lm_random_opts;

/* Builds a random-weight "llama" model (metadata + tensors) into a writer the caller may still amend
 * (tests corrupt it) and then writes with vs_gguf_write. With no tok_from the vocabulary is synthetic:
 * "<unk>", "<s>", "</s>", then single characters and byte tokens, SentencePiece model "llama". */
vs_gguf_writer *vs_lm_random_writer(const vs_lm_random_opts *o, vs_error *err);
/* vs_lm_random_writer + vs_gguf_write. */
vs_status vs_lm_write_random(const vs_lm_random_opts *o, const char *path, vs_error *err);

/* Writes a copy of the LLaMA model file `in` whose 2-D weight matrices are stored as `type` (F32, F16,
 * BF16, Q8_0, Q4_0; rows must be a multiple of its block), every other tensor and all metadata as they
 * are (general.file_type updated), like llama.cpp's quantize. The written file is loaded once as a check.
 * BF16 suits drafters on AMX CPUs: their batched products then run on the tiles without conversion. */
typedef struct vs_lm_convert_stats {
    int converted, kept;          /* tensors */
    uint64_t bytes_in, bytes_out; /* tensor data */
} vs_lm_convert_stats;
vs_status vs_lm_convert(const char *in, const char *out, vs_type type, vs_lm_convert_stats *stats, vs_error *err);

#endif
