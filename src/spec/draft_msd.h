/* draft_msd: the MSD feature-level draft head (an EAGLE-1 style head with decoupled visual tokens) and
 * its drafter. docs/algorithms.md, 'MSD draft head'; the file layout in docs/formats.md.
 * Owns: the head file (its mapping, the decoder block as a vs_lm of architecture VS_LM_ARCH_HEAD, the fc
 * layer); per drafter: the head's KV cache (one sequence), a mirror of the request's context (each row's
 * key, token or image row, and the target's post-norm feature once the row is final), the sampler, the
 * logits / feature scratch. Borrowed: the target (its token embedding, final norm weight and LM head are
 * read, never its scratch, so drafting may overlap another engine's target forward).
 *
 * The head. With f_p the target's last hidden state at position p after its final RMSNorm (the released
 * code's features) and E_p the target's input row at p (token embedding, or the projected image row), the
 * head's input at position p is
 *     E_{p+1}                          when row p + 1 is an image row and the head decouples images;
 *     fc(concat(E_{p+1}, f_p)) + bias  otherwise (fc: 2H -> H);
 * then one LLaMA decoder block without the input RMSNorm (blk.0.attn_norm absent), no final norm; its
 * output at p predicts f_{p+1}, and the target's LM head applied to it (no norm) gives the distribution of
 * the token at p + 2. Drafting feeds the head its own predicted features: slot p = fc(E(d), f^_p).
 *
 * The drafter. After the target's prefill the engine hands over the features of the final rows
 * (target_rows: the prompt rows but the pending last one), after each block those of the pending row and
 * the accepted drafts. With the target cache holding rows 0 .. N - 1 and the pending token x_N, the head
 * holds slots 0 .. N - 1 computed from true features (slot N - 1 combines f_{N-1} with E(x_N)); slot
 * N - 1's output gives d_1. Each further draft is one head row on the previous prediction. propose feeds
 * the slots that became computable (one forward, chunks of 512 rows), then drafts; commit truncates the
 * head cache back to the true slots (drafted slots are never kept: their inputs were predictions).
 * Chains (deterministic greedy or sampled with the request's transforms, q = that distribution) or
 * EAGLE-2 trees (opts.tree_top_k: the K best children per beam, K beams per depth in one tree-masked
 * head forward, the best tree_nodes nodes; deterministic children, as draft_ensemble.h describes).
 *
 * Prefix reuse (params.reuse_prefix): the drafter keeps every row's feature (keeps_features), so the
 * engine reuses the target's cached prefix and delivers only the rows after it; the rows whose keys equal
 * the previous context keep their features and head slots. A request whose earlier rows never reached
 * this drafter (the target reused rows a target-only or another drafter's request evaluated) leaves the
 * head without those features: it then proposes nothing for that request (the engine decodes plainly).
 *
 * Compatibility (checked at creation, clear errors): the head's width and vocabulary equal the target's,
 * and the head was trained on this target's token embedding (msd.target.embd_probe: 32 values of the
 * embedding table, cosine >= 0.9 with the target's, which tolerates a quantised copy of the target). */
#ifndef VS_DRAFT_MSD_H
#define VS_DRAFT_MSD_H

#include "lm.h"
#include "spec.h"

typedef struct vs_msd_head vs_msd_head;

/* Opens a head file (docs/formats.md). NULL + err naming the file and the key or tensor. */
vs_msd_head *vs_msd_head_load(const char *path, vs_error *err);
/* The same over a file the caller keeps open (and closes after vs_msd_head_free). */
vs_msd_head *vs_msd_head_from_gguf(const vs_gguf *g, vs_error *err);
void vs_msd_head_free(vs_msd_head *h);
const vs_lm *vs_msd_head_lm(const vs_msd_head *h); /* the decoder block(s) */
bool vs_msd_head_decoupled(const vs_msd_head *h);   /* image rows bypass fc */
/* VS_OK when the head fits the target (width, vocabulary, embedding probe); else VS_ERR_INVALID. */
vs_status vs_msd_head_check(const vs_msd_head *h, const vs_lm *target, vs_error *err);

/* The 32 probe values of a model's token embedding (what a head file stores). */
#define VS_MSD_PROBE 32
void vs_msd_embd_probe(const vs_lm *target, float probe[VS_MSD_PROBE]);
/* Cosine between a stored probe and the target's (>= 0.9: trained on this target's embedding; the DREAM
 * drafter checks its files the same way). */
double vs_msd_probe_cosine(const float stored[VS_MSD_PROBE], const vs_lm *target);

/* Writing head files. The shape of a head: its block (width = the target's) and the target facts it
 * records. Tensors in file order: fc.weight, fc.bias, blk.0.attn_{q,k,v,output}.weight,
 * blk.0.ffn_norm.weight, blk.0.ffn_{gate,up,down}.weight. */
typedef struct vs_msd_shape {
    int width, n_head, n_head_kv, n_ff, n_ctx, n_vocab;
    float rms_eps, rope_base;
    bool decoupled; /* msd.decoupled_images */
} vs_msd_shape;
#define VS_MSD_N_TENSORS 10
const char *vs_msd_tensor_name(int i); /* NULL outside 0 .. VS_MSD_N_TENSORS - 1 */
/* Tensor i's GGUF shape: ne[0] inputs (fastest), ne[1] outputs (1 for a vector); n_dims 1 or 2. */
void vs_msd_tensor_ne(const vs_msd_shape *s, int i, int64_t ne[2], int *n_dims);
vs_status vs_msd_shape_check(const vs_msd_shape *s, vs_error *err);
/* The shape of a head for `target` (its width, vocabulary, norm epsilon and RoPE base). */
vs_msd_shape vs_msd_shape_for(const vs_lm *target, int n_head, int n_head_kv, int n_ff, int n_ctx, bool decoupled);
/* What the feature-drafter files (this head, the DREAM model of draft_dream.h) write alike: the decoder
 * blocks' keys under the prefix `arch` (context_length, embedding_length, block_count, feed_forward_length,
 * head counts, norm epsilon, RoPE base), vocab_size, target.embd_probe and general.name; and one tensor
 * from F32 data, a matrix (n_dims 2) stored as mat_type (F32, F16 or BF16, rounded to nearest even), a
 * vector as F32. `what` names the file kind in errors. */
void vs_head_file_keys(vs_gguf_writer *w, const char *arch, const char *name, int n_ctx, int width, int blocks,
                       int n_ff, int n_head, int n_head_kv, float rms_eps, float rope_base, int n_vocab,
                       const float probe[VS_MSD_PROBE]);
vs_status vs_head_file_tensor(vs_gguf_writer *w, const char *tensor, int n_dims, const int64_t ne[2],
                              const float *data, vs_type mat_type, const char *what, vs_error *err);

/* Writes a head file: s's keys, the target's embedding probe, the tensors (data[i] holds ne[1] rows of
 * ne[0] values): the matrices as mat_type (F32, F16 or BF16, rounded to nearest even), the vectors as
 * F32. */
vs_status vs_msd_head_write(const vs_msd_shape *s, const float probe[VS_MSD_PROBE],
                            const float *const data[VS_MSD_N_TENSORS], vs_type mat_type, const char *name,
                            const char *path, vs_error *err);

/* A random head for `target` (tests, benchmarks): F32 weights ~ N(0, std^2) (fc: std / 2), norms 1. */
typedef struct vs_msd_random_opts {
    int n_head, n_head_kv, n_ff, n_ctx; /* the block's shape (width = the target's) */
    float std;                          /* 0 = 0.02 */
    bool decoupled;                     /* msd.decoupled_images */
    uint64_t seed;
} vs_msd_random_opts;
vs_status vs_msd_head_write_random(const vs_msd_random_opts *o, const vs_lm *target, const char *path,
                                   vs_error *err);

typedef struct vs_draft_msd_opts {
    int32_t n_ctx;      /* head cache rows; <= 0: the target's n_ctx_train */
    vs_type kv_type;    /* VS_TYPE_F32 (0), F16 or BF16 */
    vs_threadpool *tp;  /* borrowed; NULL = caller's thread */
    bool greedy;        /* draft greedily even when the request samples */
    int32_t tree_top_k; /* EAGLE-2 trees (1 .. VS_TREE_MAX_TOP_K); 0 = chains */
    int32_t tree_nodes; /* their nodes (0 = 8 K) */
} vs_draft_msd_opts;

/* A drafter over head h for target (both borrowed, must outlive it). NULL + err when they do not fit
 * or an option is invalid. Free with vs_spec_drafter_free. */
vs_spec_drafter *vs_draft_msd_new(const vs_msd_head *h, vs_lm *target, const vs_draft_msd_opts *o,
                                  vs_error *err);

typedef struct vs_draft_msd_stats {
    int64_t head_rows;     /* rows the head evaluated since creation (true slots + drafted) */
    int64_t true_rows;     /* of them, slots computed from the target's features */
    int64_t forwards;      /* head forwards */
    int64_t features;      /* feature rows received */
    int32_t n_starved;     /* requests the head could not draft for (features missing) */
} vs_draft_msd_stats;
/* NULL when d is no MSD drafter. */
const vs_draft_msd_stats *vs_draft_msd_get_stats(const vs_spec_drafter *d);
vs_kv *vs_draft_msd_kv(vs_spec_drafter *d);

#endif
