/* lm: LLaMA-family decoder: loading, the batched forward, the LM head. See lm.h.
 * Sections: loading (config, weights), scratch, attention kernels, forward steps, forward. */
#include "lm.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "arch/attn_arch.h"

/* Queries (rows x heads of one KV head group) handled by one attention task: VS_ATTN_QMAX. */

struct vs_lm {
    vs_lm_config cfg;
    vs_lm_weights w;
    const vs_gguf *g;
    vs_gguf *owned;  /* set when vs_lm_load opened the file */
    float *norms;    /* [2 * n_layer + 1][n_embd]: F32 copies of every norm vector */
    double *inv_freq; /* [rope_dim / 2]: rope_base^(-2i / rope_dim) */
    int64_t n_params;
    size_t n_bytes;
    uint8_t *packed;  /* the x16 copies of the quantised matrices (VS_LM_MAT.packed points in), or NULL */
    int attn_isa;     /* ISA of the attention kernels in this forward: 0 scalar, 1 AVX2, 2 AVX-512 */
    const char *arch; /* "llama", or VS_LM_ARCH_HEAD / VS_LM_ARCH_DREAM (embedding rows in, hidden states out) */

    /* scratch, grown to the largest batch / context seen (never shrunk) */
    int cap_rows;     /* rows the buffers below hold */
    float *x;         /* [rows][n_embd] residual stream */
    float *xn;        /* [rows][n_embd] normed input of a sub-block */
    float *q;         /* [rows][n_head * head_dim] */
    float *k, *v;     /* [rows][n_head_kv * head_dim] */
    float *att;       /* [rows][n_head * head_dim] attention output */
    float *tmp;       /* [rows][n_embd] */
    float *gate, *up; /* [rows][n_ff] */
    float *rope_cs;   /* [rows][rope_dim / 2][2] cos, sin */
    int *slot;        /* [rows] cache slot of each row in its sequence */
    int *off;         /* [rows] index among this batch's rows of its sequence */
    int *order;       /* [rows] row indices grouped by sequence, batch order within a sequence */
    int *groups;      /* [2][rows + 1]: start of each sequence's run in order; first task of each */
    int cap_mask;     /* rows the tree mask holds */
    uint8_t *mask;    /* [rows][rows] mask[r][j]: row r may attend to its sequence's batch row j */
    int cap_seq;
    int *seq_len0;    /* [n_seq] cache length before this batch */
    int *seq_cnt;     /* [n_seq] rows of this batch per sequence */
    int cap_ctx, cap_thr;
    float *attn_buf;  /* [threads][VS_ATTN_QMAX][cap_ctx + 16] per-thread scores */
};

/* ------------------------------------------------------------------------------------------------ */
/* loading */

static vs_status get_dim(const vs_gguf *g, const char *key, int64_t lo, int64_t hi, int *out, vs_error *err) {
    int64_t v;
    vs_status st = vs_gguf_require_int(g, key, &v, err);
    if (st) return st;
    if (v < lo || v > hi)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: %s = %lld is outside [%lld, %lld]", vs_gguf_name(g), key,
                            (long long)v, (long long)lo, (long long)hi);
    *out = (int)v;
    return VS_OK;
}

/* "PREFIX.key" into buf (the architecture's metadata keys). */
static const char *akey(char *buf, size_t cap, const char *arch, const char *key) {
    snprintf(buf, cap, "%s.%s", arch, key);
    return buf;
}

static vs_status load_config(const vs_gguf *g, vs_lm_config *c, const char **arch_out, vs_error *err) {
    const char *name = vs_gguf_name(g);
    vs_gguf_str arch;
    vs_status st = vs_gguf_require_str(g, "general.architecture", &arch, err);
    if (st) return st;
    const char *A = vs_gguf_str_eq(arch, "llama")           ? "llama"
                    : vs_gguf_str_eq(arch, VS_LM_ARCH_HEAD)  ? VS_LM_ARCH_HEAD
                    : vs_gguf_str_eq(arch, VS_LM_ARCH_DREAM) ? VS_LM_ARCH_DREAM
                                                             : NULL;
    if (!A)
        return vs_error_set(err, VS_ERR_UNSUPPORTED, "%s: general.architecture is '%.*s', expected 'llama'", name,
                            (int)VS_MIN(arch.len, 64), arch.ptr);
    *arch_out = A;
    char k[96];
    const int64_t big = 1 << 20;
    if ((st = get_dim(g, akey(k, sizeof(k), A, "embedding_length"), 1, big, &c->n_embd, err))) return st;
    if ((st = get_dim(g, akey(k, sizeof(k), A, "block_count"), 1, 4096, &c->n_layer, err))) return st;
    if ((st = get_dim(g, akey(k, sizeof(k), A, "feed_forward_length"), 1, big, &c->n_ff, err))) return st;
    if ((st = get_dim(g, akey(k, sizeof(k), A, "attention.head_count"), 1, 4096, &c->n_head, err))) return st;
    if ((st = get_dim(g, akey(k, sizeof(k), A, "context_length"), 1, 1 << 24, &c->n_ctx_train, err))) return st;
    int64_t v;
    int r = vs_gguf_get_int(g, akey(k, sizeof(k), A, "attention.head_count_kv"), &v);
    if (r < 0)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: %s is not an integer", name, k);
    c->n_head_kv = r ? (int)VS_MAX(VS_MIN(v, 1 << 20), 0) : c->n_head;
    if (c->n_head_kv < 1 || c->n_head % c->n_head_kv)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: head_count %d is not a multiple of head_count_kv %lld", name,
                            c->n_head, r ? (long long)v : (long long)c->n_head);
    if (c->n_embd % c->n_head || (c->n_embd / c->n_head) % 2)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: embedding_length %d is not an even multiple of %d heads", name,
                            c->n_embd, c->n_head);
    c->head_dim = c->n_embd / c->n_head;
    double d;
    if ((st = vs_gguf_require_float(g, akey(k, sizeof(k), A, "attention.layer_norm_rms_epsilon"), &d, err))) return st;
    if (!(d > 0 && d < 1))
        return vs_error_set(err, VS_ERR_FORMAT, "%s: layer_norm_rms_epsilon %g is not in (0, 1)", name, d);
    c->rms_eps = (float)d;
    r = vs_gguf_get_float(g, akey(k, sizeof(k), A, "rope.freq_base"), &d);
    if (r < 0) return vs_error_set(err, VS_ERR_FORMAT, "%s: %s is not a number", name, k);
    c->rope_base = r ? (float)d : 10000.0f;
    if (!(c->rope_base > 1.0f && isfinite(c->rope_base)))
        return vs_error_set(err, VS_ERR_FORMAT, "%s: %s %g must be > 1", name, k, c->rope_base);
    r = vs_gguf_get_int(g, akey(k, sizeof(k), A, "rope.dimension_count"), &v);
    if (r < 0) return vs_error_set(err, VS_ERR_FORMAT, "%s: %s is not an integer", name, k);
    c->rope_dim = r ? (int)VS_MAX(VS_MIN(v, 1 << 20), -1) : c->head_dim;
    if (c->rope_dim < 2 || c->rope_dim > c->head_dim || c->rope_dim % 2)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: rope.dimension_count %d must be even and in [2, head_dim %d]",
                            name, c->rope_dim, c->head_dim);
    return VS_OK;
}

static vs_status load_mat(vs_lm *lm, const char *tname, int64_t n_in, int64_t n_out, vs_lm_mat *m,
                          vs_error *err) {
    const vs_gguf_tensor *t;
    int64_t ne[2] = {n_in, n_out};
    vs_status st = vs_gguf_require_tensor(lm->g, tname, 2, ne, &t, err);
    if (st) return st;
    if (n_in % vs_type_block_size((vs_type)t->type))
        return vs_error_set(err, VS_ERR_FORMAT, "%s: tensor %s: row length %lld is not a multiple of the %s block",
                            vs_gguf_name(lm->g), tname, (long long)n_in, vs_type_name(t->type));
    if (t->nbytes < vs_type_row_bytes((vs_type)t->type, n_in) * (size_t)n_out)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: tensor %s holds %llu bytes, fewer than its shape needs",
                            vs_gguf_name(lm->g), tname, (unsigned long long)t->nbytes);
    m->type = (vs_type)t->type;
    m->n_in = n_in;
    m->n_out = n_out;
    m->data = t->data;
    lm->n_params += n_in * n_out;
    lm->n_bytes += vs_type_row_bytes(m->type, n_in) * (size_t)n_out;
    return VS_OK;
}

/* A norm vector of n values, dequantised into dst (so any float type works). */
static vs_status load_norm(vs_lm *lm, const char *tname, int64_t n, float *dst, vs_error *err) {
    const vs_gguf_tensor *t;
    vs_status st = vs_gguf_require_tensor(lm->g, tname, 1, &n, &t, err);
    if (st) return st;
    if (n % vs_type_block_size((vs_type)t->type) || t->nbytes < vs_type_row_bytes((vs_type)t->type, n))
        return vs_error_set(err, VS_ERR_FORMAT, "%s: tensor %s: %s data does not hold %lld values",
                            vs_gguf_name(lm->g), tname, vs_type_name(t->type), (long long)n);
    vs_dequantize_row((vs_type)t->type, t->data, dst, n);
    lm->n_params += n;
    lm->n_bytes += vs_type_row_bytes((vs_type)t->type, n);
    return VS_OK;
}

/* The decoder blocks (and room for the output norm in lm->norms). first_norm_optional: blk.0's
 * attn_norm may be absent (attn_norm NULL: the block reads its input as it is). */
static vs_status load_layers(vs_lm *lm, bool first_norm_optional, vs_error *err) {
    const vs_lm_config *c = &lm->cfg;
    const int64_t E = c->n_embd, Q = (int64_t)c->n_head * c->head_dim, KV = (int64_t)c->n_head_kv * c->head_dim;
    /* the F32 norm copies: a file's blocks hold at least their norms' values (and far more in matrices), so
     * more than 8 bytes of copies per file byte is a file whose keys claim tensors it does not have (or
     * whose tensors overlap): refused before allocating */
    const double norm_bytes = sizeof(float) * (double)(2 * c->n_layer + 1) * (double)E;
    if (norm_bytes > 8.0 * (double)vs_gguf_size(lm->g) + 65536.0)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: %d blocks of width %lld do not fit a file of %zu bytes",
                            vs_gguf_name(lm->g), c->n_layer, (long long)E, vs_gguf_size(lm->g));
    lm->norms = vs_malloc(sizeof(float) * (size_t)(2 * c->n_layer + 1) * (size_t)E);
    lm->w.layers = vs_calloc((size_t)c->n_layer, sizeof(vs_lm_layer));
    if (!lm->norms || !lm->w.layers) return vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", vs_gguf_name(lm->g));
    vs_status st;
    char tn[64];
    for (int l = 0; l < c->n_layer; l++) {
        vs_lm_layer *L = &lm->w.layers[l];
        float *an = lm->norms + (size_t)(2 * l) * E, *fn = an + E;
#define TN(suffix) (snprintf(tn, sizeof(tn), "blk.%d." suffix, l), tn)
        const bool has_an = !(l == 0 && first_norm_optional) || vs_gguf_find_tensor(lm->g, TN("attn_norm.weight"));
        if (has_an && (st = load_norm(lm, TN("attn_norm.weight"), E, an, err))) return st;
        if ((st = load_mat(lm, TN("attn_q.weight"), E, Q, &L->wq, err))) return st;
        if ((st = load_mat(lm, TN("attn_k.weight"), E, KV, &L->wk, err))) return st;
        if ((st = load_mat(lm, TN("attn_v.weight"), E, KV, &L->wv, err))) return st;
        if ((st = load_mat(lm, TN("attn_output.weight"), Q, E, &L->wo, err))) return st;
        if ((st = load_norm(lm, TN("ffn_norm.weight"), E, fn, err))) return st;
        if ((st = load_mat(lm, TN("ffn_gate.weight"), E, c->n_ff, &L->w_gate, err))) return st;
        if ((st = load_mat(lm, TN("ffn_up.weight"), E, c->n_ff, &L->w_up, err))) return st;
        if ((st = load_mat(lm, TN("ffn_down.weight"), c->n_ff, E, &L->w_down, err))) return st;
#undef TN
        L->attn_norm = has_an ? an : NULL;
        L->ffn_norm = fn;
    }
    return VS_OK;
}

/* A head (VS_LM_ARCH_HEAD, VS_LM_ARCH_DREAM): decoder blocks only. The vocabulary size comes from HEAD.vocab_size (the
 * target's; the drafter uses the target's embedding and LM head); blk.0.attn_norm.weight may be absent
 * (EAGLE: the first block reads its input unnormalised); no token_embd, output_norm or output. */
static vs_status load_head_layers(vs_lm *lm, vs_error *err) {
    vs_lm_config *c = &lm->cfg;
    const char *name = vs_gguf_name(lm->g);
    char k[96];
    int64_t nv;
    int r = vs_gguf_get_int(lm->g, akey(k, sizeof(k), lm->arch, "vocab_size"), &nv);
    if (r != 1 || nv < 1 || nv > (1 << 24))
        return vs_error_set(err, VS_ERR_FORMAT, "%s: %s is missing or outside [1, 2^24]", name, k);
    c->n_vocab = (int)nv;
    static const char *const none[] = {"token_embd.weight", "output_norm.weight", "output.weight"};
    for (size_t i = 0; i < VS_ARRAY_LEN(none); i++)
        if (vs_gguf_find_tensor(lm->g, none[i]))
            return vs_error_set(err, VS_ERR_FORMAT, "%s: a %s file has no %s (it uses the target's)", name, lm->arch,
                                none[i]);
    vs_status st = load_layers(lm, true, err);
    if (st) return st;
    c->tied_output = false;
    c->wtype = lm->w.layers[0].wq.type;
    return VS_OK;
}

static vs_status load_weights(vs_lm *lm, vs_error *err) {
    vs_lm_config *c = &lm->cfg;
    const char *name = vs_gguf_name(lm->g);
    if (strcmp(lm->arch, "llama")) return load_head_layers(lm, err);
    const vs_gguf_tensor *te = vs_gguf_find_tensor(lm->g, "token_embd.weight");
    if (!te) return vs_error_set(err, VS_ERR_FORMAT, "%s: missing tensor token_embd.weight", name);
    if (te->n_dims != 2 || te->ne[0] != c->n_embd || te->ne[1] < 1 || te->ne[1] > (1 << 24))
        return vs_error_set(err, VS_ERR_FORMAT,
                            "%s: tensor token_embd.weight has shape [%lld, %lld], expected [%d, n_vocab]", name,
                            (long long)te->ne[0], (long long)te->ne[1], c->n_embd);
    c->n_vocab = (int)te->ne[1];
    int64_t nv;
    int r = vs_gguf_get_int(lm->g, "llama.vocab_size", &nv);
    if (r > 0 && nv != c->n_vocab)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: llama.vocab_size %lld differs from token_embd rows %d", name,
                            (long long)nv, c->n_vocab);
    uint64_t ntok = 0;
    int64_t ki = vs_gguf_find_key(lm->g, "tokenizer.ggml.tokens");
    if (ki >= 0 && vs_gguf_kv_type(lm->g, ki) == VS_GGUF_ARRAY) ntok = vs_gguf_arr_len(lm->g, ki);
    if (ntok && ntok != (uint64_t)c->n_vocab)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: tokenizer has %llu tokens but token_embd has %d rows", name,
                            (unsigned long long)ntok, c->n_vocab);

    vs_status st;
    if ((st = load_mat(lm, "token_embd.weight", c->n_embd, c->n_vocab, &lm->w.tok_embd, err))) return st;
    if ((st = load_layers(lm, false, err))) return st;
    const int64_t E = c->n_embd;
    float *on = lm->norms + (size_t)(2 * c->n_layer) * E;
    if ((st = load_norm(lm, "output_norm.weight", E, on, err))) return st;
    lm->w.output_norm = on;
    if (vs_gguf_find_tensor(lm->g, "output.weight")) {
        if ((st = load_mat(lm, "output.weight", E, c->n_vocab, &lm->w.output, err))) return st;
        c->tied_output = false;
    } else {
        lm->w.output = lm->w.tok_embd;
        c->tied_output = true;
    }
    c->wtype = lm->w.layers[0].wq.type;
    return VS_OK;
}

/* The matrices the products read, for repacking (the output once even when tied to token_embd). */
static int lm_mats(vs_lm *lm, vs_lm_mat **out) {
    int n = 0;
    for (int l = 0; l < lm->cfg.n_layer; l++) {
        vs_lm_layer *L = &lm->w.layers[l];
        vs_lm_mat *m[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < VS_ARRAY_LEN(m); i++) out[n++] = m[i];
    }
    if (lm->w.output.data) out[n++] = &lm->w.output;
    return n;
}

/* Quantised matrices read by the output-lane kernels (vs_x16_wanted: AVX-512 VNNI and AMX CPUs; Q8_0,
 * Q4_0, Q4_K and Q5_K also on AVX2 CPUs with AVX-VNNI): one
 * x16 copy each (kernels.h; each tile one linear stream, no transpose or scale gather per block), and the
 * mapped GGUF pages released (token_embd's rows are still read by the embedding lookup: a tied output
 * keeps them). VLMSPEC_REPACK=0 turns it off. */
typedef struct pack_job {
    vs_lm *lm;
    vs_lm_mat **mats;
} pack_job;

/* Share i of the pool's job: matrix i's copy (where it has one), then its mapped rows released. */
static void pack_task(void *p, int i, int n) {
    (void)n;
    pack_job *j = p;
    vs_lm_mat *m = j->mats[i];
    if (!m->packed) return;
    uint8_t *dst = j->lm->packed + ((const uint8_t *)m->packed - j->lm->packed); /* writable, the same bytes */
    vs_x16_pack(m->type, m->data, m->n_out, m->n_in, dst);
    if (m->data != j->lm->w.tok_embd.data)
        vs_gguf_release(j->lm->g, m->data, vs_type_row_bytes(m->type, m->n_in) * (size_t)m->n_out);
}

static vs_status pack_weights(vs_lm *lm, vs_error *err) {
    if (!vs_x16_wanted(VS_TYPE_Q8_0) && !vs_x16_wanted(VS_TYPE_Q4_0) && !vs_x16_wanted(VS_TYPE_Q4_K)) return VS_OK;
    vs_lm_mat **mats = vs_malloc(sizeof(vs_lm_mat *) * (size_t)(7 * lm->cfg.n_layer + 1));
    if (!mats) return vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", vs_gguf_name(lm->g));
    int n = lm_mats(lm, mats);
    size_t total = 0;
    for (int i = 0; i < n; i++)
        if (vs_x16_wanted(mats[i]->type)) total += vs_x16_bytes(mats[i]->type, mats[i]->n_out, mats[i]->n_in);
    if (total && !(lm->packed = vs_malloc(total))) {
        vs_free(mats);
        return vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory for the %zu MB repacked weight copy "
                            "(VLMSPEC_REPACK=0 runs without it)", vs_gguf_name(lm->g), total >> 20);
    }
    size_t off = 0;
    for (int i = 0; i < n && total; i++) {
        vs_lm_mat *m = mats[i];
        if (!vs_x16_wanted(m->type)) continue;
        m->packed = lm->packed + off;
        off += vs_x16_bytes(m->type, m->n_out, m->n_in);
    }
    /* the copies on every CPU of the machine, a matrix per share (about 1 s per GB on one thread); without
     * a pool (one CPU, or no memory for one) the caller makes them all */
    pack_job job = {.lm = lm, .mats = mats};
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    vs_error perr = {0};
    vs_threadpool *tp = total && cpus > 1 && n > 1 ? vs_threadpool_new((int)VS_MIN(cpus, 8), &perr) : NULL;
    if (total) vs_threadpool_run_shares(tp, pack_task, &job, n);
    vs_threadpool_free(tp);
    vs_free(mats);
    return VS_OK;
}

vs_lm *vs_lm_from_gguf(const vs_gguf *g, vs_error *err) {
    vs_lm *lm = vs_calloc(1, sizeof(*lm));
    if (!lm) {
        vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", vs_gguf_name(g));
        return NULL;
    }
    lm->g = g;
    vs_status st = load_config(g, &lm->cfg, &lm->arch, err);
    if (!st) st = vs_gguf_check_finite(g, err);
    if (!st) st = load_weights(lm, err);
    if (!st) st = pack_weights(lm, err);
    if (!st) {
        int half = lm->cfg.rope_dim / 2;
        lm->inv_freq = vs_malloc(sizeof(double) * (size_t)half);
        if (!lm->inv_freq) st = vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", vs_gguf_name(g));
        for (int i = 0; st == VS_OK && i < half; i++)
            lm->inv_freq[i] = pow((double)lm->cfg.rope_base, -2.0 * i / (double)lm->cfg.rope_dim);
    }
    if (st) {
        vs_lm_free(lm);
        return NULL;
    }
    return lm;
}

vs_lm *vs_lm_load(const char *path, vs_error *err) {
    vs_gguf *g = vs_gguf_open(path, err);
    if (!g) return NULL;
    vs_lm *lm = vs_lm_from_gguf(g, err);
    if (!lm) {
        vs_gguf_close(g);
        return NULL;
    }
    lm->owned = g;
    return lm;
}

static void free_scratch(vs_lm *lm) {
    float **bufs[] = {&lm->x, &lm->xn, &lm->q, &lm->k, &lm->v, &lm->att, &lm->tmp, &lm->gate, &lm->up,
                      &lm->rope_cs, &lm->attn_buf};
    for (size_t i = 0; i < VS_ARRAY_LEN(bufs); i++) {
        vs_free(*bufs[i]);
        *bufs[i] = NULL;
    }
    vs_free(lm->slot);
    vs_free(lm->off);
    vs_free(lm->order);
    vs_free(lm->groups);
    vs_free(lm->mask);
    vs_free(lm->seq_len0);
    vs_free(lm->seq_cnt);
    lm->slot = lm->off = lm->order = lm->groups = lm->seq_len0 = lm->seq_cnt = NULL;
    lm->mask = NULL;
    lm->cap_rows = lm->cap_mask = lm->cap_seq = lm->cap_ctx = lm->cap_thr = 0;
}

void vs_lm_free(vs_lm *lm) {
    if (!lm) return;
    free_scratch(lm);
    vs_free(lm->w.layers);
    vs_free(lm->norms);
    vs_free(lm->inv_freq);
    vs_free(lm->packed);
    if (lm->owned) vs_gguf_close(lm->owned);
    vs_free(lm);
}

const vs_lm_config *vs_lm_cfg(const vs_lm *lm) { return &lm->cfg; }
const vs_lm_weights *vs_lm_w(const vs_lm *lm) { return &lm->w; }
const vs_gguf *vs_lm_gguf(const vs_lm *lm) { return lm->g; }
const char *vs_lm_arch(const vs_lm *lm) { return lm->arch; }
int64_t vs_lm_n_params(const vs_lm *lm) { return lm->n_params; }
size_t vs_lm_weight_bytes(const vs_lm *lm) { return lm->n_bytes; }

vs_kv *vs_lm_kv_new(const vs_lm *lm, int n_seq, int n_ctx, vs_type type, vs_error *err) {
    const vs_lm_config *c = &lm->cfg;
    return vs_kv_new(c->n_layer, c->n_head_kv, c->head_dim, n_seq, n_ctx > 0 ? n_ctx : c->n_ctx_train, type, err);
}

vs_status vs_lm_embed(const vs_lm *lm, int32_t token, float *out, vs_error *err) {
    const vs_lm_mat *e = &lm->w.tok_embd;
    if (!e->data)
        return vs_error_set(err, VS_ERR_INVALID, "%s has no token embeddings (a %s file)", vs_gguf_name(lm->g),
                            lm->arch);
    if (token < 0 || token >= e->n_out)
        return vs_error_set(err, VS_ERR_INVALID, "token %d outside the vocabulary [0, %lld)", token,
                            (long long)e->n_out);
    size_t rb = vs_type_row_bytes(e->type, e->n_in);
    vs_dequantize_row(e->type, (const uint8_t *)e->data + (size_t)token * rb, out, e->n_in);
    return VS_OK;
}

/* ------------------------------------------------------------------------------------------------ */
/* scratch */

static bool grow(void **p, size_t bytes) {
    void *n = vs_malloc(bytes);
    if (!n) return false;
    vs_free(*p);
    *p = n;
    return true;
}

/* Makes the scratch hold rows rows, contexts of n_ctx keys for threads threads, n_seq sequences, and
 * (when need_mask) a rows x rows tree mask. Contents are not preserved. */
static vs_status ensure_scratch(vs_lm *lm, int rows, int n_ctx, int threads, int n_seq, bool need_mask,
                                vs_error *err) {
    const vs_lm_config *c = &lm->cfg;
    bool ok = true;
    if (rows > lm->cap_rows) {
        size_t R = (size_t)rows, E = (size_t)c->n_embd, Q = (size_t)c->n_head * c->head_dim;
        size_t KV = (size_t)c->n_head_kv * c->head_dim, F = (size_t)c->n_ff, f = sizeof(float);
        ok = grow((void **)&lm->x, R * E * f) && grow((void **)&lm->xn, R * E * f) &&
             grow((void **)&lm->q, R * Q * f) && grow((void **)&lm->k, R * KV * f) &&
             grow((void **)&lm->v, R * KV * f) && grow((void **)&lm->att, R * Q * f) &&
             grow((void **)&lm->tmp, R * E * f) && grow((void **)&lm->gate, R * F * f) &&
             grow((void **)&lm->up, R * F * f) && grow((void **)&lm->rope_cs, R * (size_t)c->rope_dim * f) &&
             grow((void **)&lm->slot, R * sizeof(int)) && grow((void **)&lm->off, R * sizeof(int)) &&
             grow((void **)&lm->order, R * sizeof(int)) && grow((void **)&lm->groups, 2 * (R + 1) * sizeof(int));
        if (ok) lm->cap_rows = rows;
        else lm->cap_rows = 0; /* some buffers may be stale: force a full regrow next time */
    }
    if (ok && need_mask && rows > lm->cap_mask) {
        ok = grow((void **)&lm->mask, (size_t)rows * (size_t)rows);
        if (ok) lm->cap_mask = rows;
    }
    if (ok && n_seq > lm->cap_seq) {
        ok = grow((void **)&lm->seq_len0, (size_t)n_seq * sizeof(int)) &&
             grow((void **)&lm->seq_cnt, (size_t)n_seq * sizeof(int));
        lm->cap_seq = ok ? n_seq : 0;
    }
    if (ok && (n_ctx > lm->cap_ctx || threads > lm->cap_thr)) {
        int nc = VS_MAX(n_ctx, lm->cap_ctx), nt = VS_MAX(threads, lm->cap_thr);
        ok = grow((void **)&lm->attn_buf, (size_t)nt * VS_ATTN_QMAX * ((size_t)nc + 16) * sizeof(float));
        if (ok) {
            lm->cap_ctx = nc;
            lm->cap_thr = nt;
        } else {
            lm->cap_ctx = lm->cap_thr = 0;
        }
    }
    if (!ok)
        return vs_error_set(err, VS_ERR_NOMEM, "%s: cannot allocate forward scratch for %d rows",
                            vs_gguf_name(lm->g), rows);
    return VS_OK;
}

/* ------------------------------------------------------------------------------------------------ */
/* attention kernels: scalar references (twins in arch/attn_avx2.c, arch/attn_avx512.c; attn_arch.h) */

static inline float kv_get(const void *base, bool f16, int64_t i) {
    return f16 ? vs_fp16_to_fp32(((const uint16_t *)base)[i]) : ((const float *)base)[i];
}

void vs_attn_scores_ref(float *s, int ld, const float *const *q, const int *T, int nq, const void *k, int f16,
                        int hd, float scale, const void *vpf) {
    (void)vpf;
    for (int i = 0; i < nq; i++)
        for (int t = 0; t < T[i]; t++) {
            float acc = 0.0f;
            for (int d = 0; d < hd; d++) acc += q[i][d] * kv_get(k, f16, (int64_t)t * hd + d);
            s[(size_t)i * ld + t] = acc * scale;
        }
}

void vs_attn_pv_ref(float *const *o, const float *p, int ld, int nq, int T, const void *v, int f16, int hd) {
    for (int i = 0; i < nq; i++) {
        const float *pi = p + (size_t)i * ld;
        for (int d = 0; d < hd; d++) o[i][d] = 0.0f;
        for (int t = 0; t < T; t++) {
            if (pi[t] == 0.0f) continue;
            for (int d = 0; d < hd; d++) o[i][d] += pi[t] * kv_get(v, f16, (int64_t)t * hd + d);
        }
    }
}

void vs_attn_scores_bf16_ref(float *s, int ld, const float *const *q, const int *T, int nq, const uint16_t *k,
                             int hd, float scale) {
    for (int i = 0; i < nq; i++)
        for (int t = 0; t < T[i]; t++) {
            float acc = 0.0f;
            for (int d = 0; d < hd; d++) acc = fmaf(q[i][d], vs_bf16_to_fp32(k[vs_kv_bf16_key_index(hd, t, d)]), acc);
            s[(size_t)i * ld + t] = acc * scale;
        }
}

void vs_attn_pv_bf16_ref(float *const *o, const float *p, int ld, int nq, int T, const uint16_t *v, int hd) {
    for (int i = 0; i < nq; i++) {
        const float *pi = p + (size_t)i * ld;
        for (int d = 0; d < hd; d++) {
            float acc = 0.0f;
            for (int t = 0; t < T; t++) acc = fmaf(pi[t], vs_bf16_to_fp32(v[vs_kv_bf16_value_index(hd, t, d)]), acc);
            o[i][d] = acc;
        }
    }
}

/* The vector kernels' exp polynomial, one value at a time (x <= 0; 0 below VS_ATTN_EXP_LO). */
static inline float exp_poly(float x) {
    if (!(x >= VS_ATTN_EXP_LO)) return 0.0f;
    float n = nearbyintf(x * VS_ATTN_LOG2E);
    float r = x - n * VS_ATTN_LN2_HI;
    r = r - n * VS_ATTN_LN2_LO;
    float p = VS_ATTN_P0;
    p = p * r + VS_ATTN_P1;
    p = p * r + VS_ATTN_P2;
    p = p * r + VS_ATTN_P3;
    p = p * r + VS_ATTN_P4;
    p = p * r + VS_ATTN_P5;
    float y = p * (r * r) + r + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float sc;
    memcpy(&sc, &bits, sizeof(sc));
    return y * sc;
}

void vs_attn_exp_ref(float *y, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] = exp_poly(x[i]);
}

void vs_attn_swiglu_ref(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float x = g[i], e = exp_poly(-fabsf(x));
        float sig = (x >= 0 ? 1.0f : e) / (1.0f + e);
        g[i] = x * sig * u[i];
    }
}

void vs_attn_softmax_ref(float *s, int T) {
    float mx = -INFINITY;
    for (int t = 0; t < T; t++) mx = s[t] > mx ? s[t] : mx;
    double sum = 0.0;
    for (int t = 0; t < T; t++) {
        float e = s[t] == -INFINITY ? 0.0f : exp_poly(s[t] - mx);
        s[t] = e;
        sum += e;
    }
    float inv = (float)(1.0 / sum);
    for (int t = 0; t < T; t++) s[t] *= inv;
}

static void attn_store_ref(void *dst, const float *src, bool f16, int n) {
    if (f16)
        for (int i = 0; i < n; i++) ((uint16_t *)dst)[i] = vs_fp32_to_fp16(src[i]);
    else
        memcpy(dst, src, (size_t)n * sizeof(float));
}

/* ------------------------------------------------------------------------------------------------ */
/* forward steps (each a job over the thread pool) */

/* Everything a forward's jobs read; lives on vs_lm_forward's stack. */
typedef struct fwd_ctx {
    vs_lm *lm;
    vs_kv *kv;
    const vs_lm_row *rows;
    int n;
    int layer;
    const vs_lm_out *out;
    /* attention tasks: (sequence group, head, block of rows); groups are runs of `order` */
    int n_groups;
    int *group_start; /* [n_groups + 1] into order */
    int n_tasks;
    int *task_first;  /* [n_tasks + 1]: first task of each group (prefix sums) */
    int attn_hb;      /* query heads of one KV head group per task: min(G, VS_ATTN_QMAX) */
    int attn_nhs;     /* head sub-blocks per KV head group: ceil(G / attn_hb) */
    int attn_rb;      /* rows per task: max(1, VS_ATTN_QMAX / attn_hb) */
    bool any_tree;
} fwd_ctx;

/* RMSNorm (or a plain copy when w is NULL) of n rows. */
typedef struct norm_job {
    vs_lm *lm;
    int n;
    const float *src; /* [n][n_embd] */
    float *dst;       /* [n][n_embd] */
    const float *w;   /* [n_embd] or NULL (no weight) */
} norm_job;

static void job_norm(void *p, int ith, int nth) {
    norm_job *j = p;
    const vs_lm_config *c = &j->lm->cfg;
    int64_t lo, hi;
    vs_split_range(j->n, ith, nth, 1, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        size_t o = (size_t)r * c->n_embd;
        if (j->w) {
            vs_rmsnorm(j->dst + o, j->src + o, j->w, c->n_embd, c->rms_eps);
        } else {
            memmove(j->dst + o, j->src + o, (size_t)c->n_embd * sizeof(float));
        }
    }
}

/* Jobs smaller than this many values (a few rows of a narrow model, e.g. a drafter's step) run on the
 * calling thread: waking the pool costs more than the work. The split never changes a result. */
#define SMALL_JOB 32768

static void run_job(vs_threadpool *tp, vs_task_fn fn, void *ctx, int64_t work) {
    if (!tp || work < SMALL_JOB) fn(ctx, 0, 1);
    else vs_threadpool_run(tp, fn, ctx);
}

static void norm_rows(vs_lm *lm, vs_threadpool *tp, const float *src, float *dst, const float *w, int n) {
    norm_job j = {lm, n, src, dst, w};
    run_job(tp, job_norm, &j, (int64_t)n * lm->cfg.n_embd);
}

/* The residual add x += y, then (when w is set) xn = RMSNorm(x) * w, row by row: one pass, one dispatch. */
typedef struct add_norm_job {
    vs_lm *lm;
    int n;
    float *x;        /* [n][n_embd] */
    const float *y;  /* [n][n_embd] */
    float *xn;       /* [n][n_embd] */
    const float *w;  /* [n_embd] or NULL: add only */
} add_norm_job;

static void job_add_norm(void *p, int ith, int nth) {
    add_norm_job *j = p;
    const vs_lm_config *c = &j->lm->cfg;
    int64_t lo, hi;
    vs_split_range(j->n, ith, nth, 1, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        size_t o = (size_t)r * c->n_embd;
        float *x = j->x + o;
        const float *y = j->y + o;
        vs_axpy_f32(x, 1.0f, y, c->n_embd); /* x += y: 1 * y is exact, so one rounding either way */
        if (j->w) vs_rmsnorm(j->xn + o, x, j->w, c->n_embd, c->rms_eps);
    }
}

/* Rotates adjacent pairs (x[2i], x[2i+1]) of each head's first rope_dim values by pos * inv_freq[i]
 * (attn_arch.h; C11 mode does not contract a * c - b * s into a fused multiply-add). */
void vs_attn_rope_ref(float *x, int n_heads, int hd, int rope_dim, const float *cs) {
    for (int h = 0; h < n_heads; h++) {
        float *xh = x + (size_t)h * hd;
        for (int i = 0; i < rope_dim / 2; i++) {
            float c = cs[2 * i], s = cs[2 * i + 1];
            float a = xh[2 * i], b = xh[2 * i + 1];
            xh[2 * i] = a * c - b * s;
            xh[2 * i + 1] = a * s + b * c;
        }
    }
}

/* The interleaved BF16 layout of kv.h: dimension d of the key at kd[16 d] (pairs 32 apart), of the value at
 * vd[2 d] (attn_arch.h). */
void vs_attn_store_bf16_ref(uint16_t *kd, uint16_t *vd, const float *k, const float *v, int hd, int t_odd) {
    (void)t_odd;
    for (int d = 0; d < hd; d += 2) {
        kd[16 * d] = vs_fp32_to_bf16(k[d]), kd[16 * d + 1] = vs_fp32_to_bf16(k[d + 1]);
        vd[2 * d] = vs_fp32_to_bf16(v[d]), vd[2 * d + 2] = vs_fp32_to_bf16(v[d + 1]);
    }
}

/* RoPE on q and k of each row, then k and v stored into the cache slot of the row. */
static void job_rope_store(void *p, int ith, int nth) {
    fwd_ctx *f = p;
    vs_lm *lm = f->lm;
    const vs_lm_config *c = &lm->cfg;
    const int hd = c->head_dim, Q = c->n_head * hd, KV = c->n_head_kv * hd;
    const bool f16 = vs_kv_type(f->kv) == VS_TYPE_F16, bf16 = vs_kv_type(f->kv) == VS_TYPE_BF16;
    int64_t lo, hi;
    vs_split_range(f->n, ith, nth, 1, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const float *cs = lm->rope_cs + (size_t)r * c->rope_dim;
        float *q = lm->q + (size_t)r * Q, *k = lm->k + (size_t)r * KV, *v = lm->v + (size_t)r * KV;
        vs_attn_rope_fn *rope = lm->attn_isa >= 2 ? vs_attn_rope_avx512 : vs_attn_rope_ref;
        rope(q, c->n_head, hd, c->rope_dim, cs);
        rope(k, c->n_head_kv, hd, c->rope_dim, cs);
        int seq = f->rows[r].seq;
        size_t el = f16 ? 2 : 4, at = (size_t)lm->slot[r] * hd * el;
        if (bf16) { /* the interleaved layout of kv.h; hd is even */
            const int t = lm->slot[r];
            vs_attn_store_bf16_fn *store = lm->attn_isa >= 2 ? vs_attn_store_bf16_avx512 : vs_attn_store_bf16_ref;
            for (int h = 0; h < c->n_head_kv; h++) {
                uint16_t *kd = (uint16_t *)vs_kv_k(f->kv, seq, f->layer, h) + vs_kv_bf16_key_index(hd, t, 0);
                uint16_t *vd = (uint16_t *)vs_kv_v(f->kv, seq, f->layer, h) + vs_kv_bf16_value_index(hd, t, 0);
                store(kd, vd, k + (size_t)h * hd, v + (size_t)h * hd, hd, t & 1);
            }
            continue;
        }
        for (int h = 0; h < c->n_head_kv; h++) {
            uint8_t *kd = (uint8_t *)vs_kv_k(f->kv, seq, f->layer, h) + at;
            uint8_t *vd = (uint8_t *)vs_kv_v(f->kv, seq, f->layer, h) + at;
            if (lm->attn_isa >= 1) {
                vs_attn_store_avx2(kd, k + (size_t)h * hd, f16, hd);
                vs_attn_store_avx2(vd, v + (size_t)h * hd, f16, hd);
            } else {
                attn_store_ref(kd, k + (size_t)h * hd, f16, hd);
                attn_store_ref(vd, v + (size_t)h * hd, f16, hd);
            }
        }
    }
}

/* Whether tree row w (batch offset self_off in its sequence, mask = its row of the batch mask) sees key
 * j of its sequence, len0 rows having been cached before the batch. */
static inline bool tree_visible(const vs_lm_row *w, const uint8_t *mask, int len0, int self_off, int j) {
    if (j >= len0) return j - len0 == self_off || mask[j - len0];
    if (!w->mask_past || j < w->past_len) return true;
    for (int a = 0; a < w->n_past_anc; a++)
        if (w->past_anc[a] == j) return true;
    return false;
}

/* One attention task: the query heads [hs * hb, ...) of KV head group hk for the rows [blk * rb, ...) of a
 * sequence group (indices into order): every key and value row is read once for all of them. */
static void attn_task(fwd_ctx *f, int g, int hk, int hs, int blk, float *s) {
    vs_lm *lm = f->lm;
    const vs_lm_config *c = &lm->cfg;
    const int hd = c->head_dim, Q = c->n_head * hd, G = c->n_head / c->n_head_kv;
    const int f16 = vs_kv_type(f->kv) == VS_TYPE_F16;
    const float scale = 1.0f / sqrtf((float)hd);
    const int *grp = lm->order + f->group_start[g];
    const int cnt = f->group_start[g + 1] - f->group_start[g];
    const int seq = f->rows[grp[0]].seq, len0 = lm->seq_len0[seq];
    const void *kb = vs_kv_k_const(f->kv, seq, f->layer, hk), *vb = vs_kv_v_const(f->kv, seq, f->layer, hk);
    const bool want_cb =
        f->out && f->out->attn_fn && (f->out->attn_layer < 0 || f->out->attn_layer == f->layer);
    const int h0 = hk * G + hs * f->attn_hb, nh = VS_MIN(f->attn_hb, G - hs * f->attn_hb);
    const int b0 = blk * f->attn_rb, b1 = VS_MIN(cnt, b0 + f->attn_rb);
    const float *qp[VS_ATTN_QMAX];
    float *op[VS_ATTN_QMAX];
    int T[VS_ATTN_QMAX], rowof[VS_ATTN_QMAX], headof[VS_ATTN_QMAX], nq = 0, tmax = 0;
    for (int b = b0; b < b1; b++)
        for (int j = 0; j < nh; j++) {
            int r = grp[b], h = h0 + j;
            qp[nq] = lm->q + (size_t)r * Q + (size_t)h * hd;
            op[nq] = lm->att + (size_t)r * Q + (size_t)h * hd;
            T[nq] = len0 + lm->off[r] + 1;
            rowof[nq] = r, headof[nq] = h;
            tmax = VS_MAX(tmax, T[nq]);
            nq++;
        }
    const int ld = (tmax + 15) & ~15;
    vs_attn_scores_fn *scores = vs_attn_scores_ref;
    vs_attn_softmax_fn *softmax = vs_attn_softmax_ref;
    vs_attn_pv_fn *pv = vs_attn_pv_ref;
    if (lm->attn_isa >= 2) {
        softmax = vs_attn_softmax_avx512, pv = vs_attn_pv_avx512;
        /* head dims that are not a multiple of 16 (40, 72...) waste lanes of 512-bit key chunks: the 8-key
         * 256-bit blocks score them faster. Chosen by the model's shape, never by the batch, so a row's
         * scores do not depend on the rows beside it. */
        scores = hd % 16 ? vs_attn_scores_avx2 : vs_attn_scores_avx512;
    } else if (lm->attn_isa == 1)
        scores = vs_attn_scores_avx2, softmax = vs_attn_softmax_avx2, pv = vs_attn_pv_avx2;
    const bool bf16 = vs_kv_type(f->kv) == VS_TYPE_BF16;
    if (bf16) /* bitwise-equal twins (attn_arch.h): any ISA gives the same scores */
        (lm->attn_isa >= 2   ? vs_attn_scores_bf16_avx512
         : lm->attn_isa == 1 ? vs_attn_scores_bf16_avx2
                             : vs_attn_scores_bf16_ref)(s, ld, qp, T, nq, kb, hd, scale);
    else
        scores(s, ld, qp, T, nq, kb, f16, hd, scale, vb);
    for (int i = 0; i < nq; i++) {
        float *si = s + (size_t)i * ld;
        int r = rowof[i];
        if (f->rows[r].tree) {
            /* Tree row: gather the visible scores to the front in key order, softmax them, scatter back
             * (masked keys get 0). The visible keys are those of the causal row of the node's path at the
             * same offsets, so the lane-wise softmax sums - and the row's result - are the same as there. */
            const uint8_t *m = lm->mask + (size_t)r * f->n;
            const vs_lm_row *w = &f->rows[r];
            const int j0 = w->mask_past ? w->past_len : len0; /* keys before j0 are all visible: in place */
            int nv = j0;
            for (int j = j0; j < T[i]; j++)
                if (tree_visible(w, m, len0, lm->off[r], j)) si[nv++] = si[j];
            softmax(si, nv);
            for (int j = T[i] - 1; j >= j0; j--)
                si[j] = tree_visible(w, m, len0, lm->off[r], j) ? si[--nv] : 0.0f;
        } else {
            softmax(si, T[i]);
        }
        if (want_cb) f->out->attn_fn(f->out->attn_ctx, f->layer, r, headof[i], si, T[i]);
        if (T[i] < tmax) memset(si + T[i], 0, (size_t)(tmax - T[i]) * sizeof(float));
    }
    if (bf16)
        (lm->attn_isa >= 2   ? vs_attn_pv_bf16_avx512
         : lm->attn_isa == 1 ? vs_attn_pv_bf16_avx2
                             : vs_attn_pv_bf16_ref)(op, s, ld, nq, tmax, vb, hd);
    else
        pv(op, s, ld, nq, tmax, vb, f16, hd);
}

static void job_attention(void *p, int ith, int nth) {
    fwd_ctx *f = p;
    vs_lm *lm = f->lm;
    float *s = lm->attn_buf + (size_t)ith * VS_ATTN_QMAX * ((size_t)lm->cap_ctx + 16);
    int64_t lo, hi;
    vs_split_range(f->n_tasks, ith, nth, 1, &lo, &hi);
    /* task id -> (group, kv head, head sub-block, row block): tasks of group g are task_first[g] ..
     * task_first[g+1]-1, ordered kv-head-major, then head sub-block, then row block. */
    const int nhs = f->attn_nhs;
    int g = 0;
    for (int64_t t = lo; t < hi; t++) {
        while (t >= f->task_first[g + 1]) g++;
        int cnt = f->group_start[g + 1] - f->group_start[g];
        int nblk = (cnt + f->attn_rb - 1) / f->attn_rb;
        int local = (int)(t - f->task_first[g]);
        int hk = local / (nhs * nblk), rem = local % (nhs * nblk);
        attn_task(f, g, hk, rem / nblk, rem % nblk, s);
    }
}

/* gate = silu(gate) * up over n rows of n_ff. */
typedef struct swiglu_job {
    float *gate;
    const float *up;
    int64_t n;
    int isa;
} swiglu_job;

static void job_swiglu(void *p, int ith, int nth) {
    swiglu_job *j = p;
    int64_t lo, hi;
    vs_split_range(j->n, ith, nth, 64, &lo, &hi);
    if (hi <= lo) return;
    vs_attn_swiglu_fn *fn = j->isa >= 2 ? vs_attn_swiglu_avx512 : j->isa == 1 ? vs_attn_swiglu_avx2
                                                                               : vs_attn_swiglu_ref;
    fn(j->gate + lo, j->up + lo, hi - lo);
}

static void matmul_ex(vs_threadpool *tp, const vs_lm_mat *m, const float *x, int n, float *y,
                      unsigned flags) {
    if (m->packed) vs_matmul_x16(tp, m->type, m->data, m->packed, m->n_out, m->n_in, x, n, y);
    else vs_matmul_ex(tp, m->type, m->data, m->n_out, m->n_in, x, n, y, flags);
}

/* Matrices over the same input (q, k, v; gate, up) as one vs_matmul_multi call when they share a type and
 * none is repacked (the tiles then convert the input once); bitwise the same as one call each. */
static void matmul_shared(vs_threadpool *tp, const vs_lm_mat *const *m, float *const *y, int k, const float *x,
                          int n, unsigned flags) {
    bool one = true;
    for (int i = 0; i < k; i++) one &= !m[i]->packed && m[i]->type == m[0]->type && m[i]->n_in == m[0]->n_in;
    if (!one) {
        for (int i = 0; i < k; i++) matmul_ex(tp, m[i], x, n, y[i], flags);
        return;
    }
    vs_mm_part parts[VS_MM_MAX_PARTS];
    for (int i = 0; i < k; i++) parts[i] = (vs_mm_part){m[i]->data, m[i]->n_out, y[i]};
    vs_matmul_multi(tp, m[0]->type, m[0]->n_in, parts, k, x, n, flags);
}

/* ------------------------------------------------------------------------------------------------ */
/* forward */

static vs_status validate(vs_lm *lm, vs_kv *kv, const vs_lm_row *rows, int n, const vs_lm_out *out,
                          vs_error *err) {
    const vs_lm_config *c = &lm->cfg;
    const char *name = vs_gguf_name(lm->g);
    if (n < 1 || !rows) return vs_error_set(err, VS_ERR_INVALID, "%s: forward needs at least one row", name);
    if (n > (1 << 20)) return vs_error_set(err, VS_ERR_RANGE, "%s: batch of %d rows is too large", name, n);
    if (!kv) return vs_error_set(err, VS_ERR_INVALID, "%s: forward needs a KV cache", name);
    if (vs_kv_n_layer(kv) != c->n_layer || vs_kv_n_head_kv(kv) != c->n_head_kv || vs_kv_head_dim(kv) != c->head_dim)
        return vs_error_set(err, VS_ERR_INVALID,
                            "%s: KV cache shape (%d layers, %d kv heads, head dim %d) does not match the model "
                            "(%d, %d, %d)", name, vs_kv_n_layer(kv), vs_kv_n_head_kv(kv), vs_kv_head_dim(kv),
                            c->n_layer, c->n_head_kv, c->head_dim);
    int n_seq = vs_kv_n_seq(kv);
    for (int r = 0; r < n; r++) {
        const vs_lm_row *w = &rows[r];
        if (w->seq < 0 || w->seq >= n_seq)
            return vs_error_set(err, VS_ERR_INVALID, "%s: row %d: sequence %d outside [0, %d)", name, r, w->seq,
                                n_seq);
        if (!w->embd && !lm->w.tok_embd.data)
            return vs_error_set(err, VS_ERR_INVALID, "%s: row %d: a %s model takes embedding rows, not tokens", name,
                                r, lm->arch);
        if (w->want_logits && !lm->w.output.data)
            return vs_error_set(err, VS_ERR_INVALID, "%s: row %d: a %s model has no LM head (no logits)", name, r,
                                lm->arch);
        if (!w->embd && (w->token < 0 || w->token >= c->n_vocab))
            return vs_error_set(err, VS_ERR_INVALID, "%s: row %d: token %d outside the vocabulary [0, %d)", name,
                                r, w->token, c->n_vocab);
        if (w->pos < 0) return vs_error_set(err, VS_ERR_INVALID, "%s: row %d: negative position %d", name, r, w->pos);
        if (w->tree) {
            if (w->n_anc < 0 || (w->n_anc > 0 && !w->anc))
                return vs_error_set(err, VS_ERR_INVALID, "%s: row %d: bad ancestor list", name, r);
            for (int i = 0; i < w->n_anc; i++) {
                int a = w->anc[i];
                if (a < 0 || a >= r || rows[a].seq != w->seq)
                    return vs_error_set(err, VS_ERR_INVALID,
                                        "%s: row %d: ancestor %d must be an earlier row of sequence %d", name, r,
                                        a, w->seq);
            }
            if (w->mask_past) {
                int len = vs_kv_seq_len(kv, w->seq);
                if (w->past_len < 0 || w->past_len > len || w->n_past_anc < 0 ||
                    (w->n_past_anc > 0 && !w->past_anc))
                    return vs_error_set(err, VS_ERR_INVALID, "%s: row %d: bad cached prefix %d (of %d rows)",
                                        name, r, w->past_len, len);
                for (int i = 0; i < w->n_past_anc; i++)
                    if (w->past_anc[i] < w->past_len || w->past_anc[i] >= len)
                        return vs_error_set(err, VS_ERR_INVALID,
                                            "%s: row %d: cached ancestor slot %d outside [%d, %d)", name, r,
                                            w->past_anc[i], w->past_len, len);
            }
        }
    }
    if (out) {
        for (int i = 0; i < out->n_layer_out; i++)
            if (!out->layer_ids || !out->layer_hidden || out->layer_ids[i] < 0 ||
                out->layer_ids[i] >= c->n_layer || !out->layer_hidden[i])
                return vs_error_set(err, VS_ERR_INVALID, "%s: requested hidden layer %d is not in [0, %d)", name,
                                    out->layer_ids ? out->layer_ids[i] : -1, c->n_layer);
        if (out->attn_fn && out->attn_layer >= c->n_layer)
            return vs_error_set(err, VS_ERR_INVALID, "%s: attention layer %d is not in [0, %d)", name,
                                out->attn_layer, c->n_layer);
    }
    return VS_OK;
}

vs_status vs_lm_forward(vs_lm *lm, vs_kv *kv, vs_threadpool *tp, const vs_lm_row *rows, int n,
                        const vs_lm_out *out, vs_error *err) {
    const vs_lm_config *c = &lm->cfg;
    const char *name = vs_gguf_name(lm->g);
    vs_status st = validate(lm, kv, rows, n, out, err);
    if (st) return st;
    /* the attention follows the kernels' ISA cap (tests compare the paths) */
    lm->attn_isa = vs_isa_active() >= VS_ISA_AVX512 ? 2 : vs_isa_active() >= VS_ISA_AVX2 ? 1 : 0;
    int n_seq = vs_kv_n_seq(kv), n_ctx = vs_kv_n_ctx(kv), nth = vs_threadpool_size(tp);
    bool any_tree = false;
    for (int r = 0; r < n; r++) any_tree |= rows[r].tree;
    if ((st = ensure_scratch(lm, n, n_ctx, nth, n_seq, any_tree, err))) return st;

    /* Slots, offsets within the sequence, and context room (checked before anything is written). */
    for (int s = 0; s < n_seq; s++) {
        lm->seq_len0[s] = vs_kv_seq_len(kv, s);
        lm->seq_cnt[s] = 0;
    }
    for (int r = 0; r < n; r++) {
        int s = rows[r].seq;
        lm->off[r] = lm->seq_cnt[s]++;
        lm->slot[r] = lm->seq_len0[s] + lm->off[r];
    }
    for (int s = 0; s < n_seq; s++)
        if ((int64_t)lm->seq_len0[s] + lm->seq_cnt[s] > n_ctx)
            return vs_error_set(err, VS_ERR_RANGE,
                                "%s: sequence %d would hold %d rows, more than the KV cache's context of %d",
                                name, s, lm->seq_len0[s] + lm->seq_cnt[s], n_ctx);

    /* Group rows by sequence (stable), and enumerate attention tasks. */
    const int G = c->n_head / c->n_head_kv, hb = VS_MIN(G, VS_ATTN_QMAX), nhs = (G + hb - 1) / hb;
    const int rb = VS_MAX(1, VS_ATTN_QMAX / hb);
    int n_groups = 0;
    int *group_start = lm->groups, *task_first = lm->groups + n + 1;
    {
        int pos = 0;
        for (int r = 0; r < n; r++) {
            int s = rows[r].seq;
            if (lm->off[r] != 0) continue; /* first row of its sequence starts a group */
            group_start[n_groups++] = pos;
            for (int q = r; q < n; q++)
                if (rows[q].seq == s) lm->order[pos++] = q;
        }
        group_start[n_groups] = pos;
        task_first[0] = 0;
        for (int g = 0; g < n_groups; g++) {
            int cnt = group_start[g + 1] - group_start[g];
            task_first[g + 1] = task_first[g] + c->n_head_kv * nhs * ((cnt + rb - 1) / rb);
        }
    }

    /* Tree masks: mask[r][j] = 1 when row r attends to its sequence's batch row j (j < off[r]). */
    if (any_tree) {
        for (int r = 0; r < n; r++) {
            if (!rows[r].tree) continue;
            uint8_t *m = lm->mask + (size_t)r * n;
            memset(m, 0, (size_t)n);
            for (int i = 0; i < rows[r].n_anc; i++) m[lm->off[rows[r].anc[i]]] = 1;
        }
    }

    /* RoPE angles per row. */
    for (int r = 0; r < n; r++) {
        float *cs = lm->rope_cs + (size_t)r * c->rope_dim;
        for (int i = 0; i < c->rope_dim / 2; i++) {
            double th = (double)rows[r].pos * lm->inv_freq[i];
            cs[2 * i] = (float)cos(th);
            cs[2 * i + 1] = (float)sin(th);
        }
    }

    /* Input rows: token embeddings or given vectors. */
    const size_t E = (size_t)c->n_embd;
    for (int r = 0; r < n; r++) {
        if (rows[r].embd) memcpy(lm->x + (size_t)r * E, rows[r].embd, E * sizeof(float));
        else vs_lm_embed(lm, rows[r].token, lm->x + (size_t)r * E, NULL);
    }

    /* attention work: keys read x query dims, summed over the batch's rows */
    int64_t attn_work = 0;
    for (int r = 0; r < n; r++) attn_work += (int64_t)(lm->slot[r] + 1) * c->n_head * c->head_dim;
    fwd_ctx f = {.lm = lm, .kv = kv, .rows = rows, .n = n, .out = out, .n_groups = n_groups,
                 .group_start = group_start, .n_tasks = task_first[n_groups], .task_first = task_first,
                 .attn_hb = hb, .attn_nhs = nhs, .attn_rb = rb, .any_tree = any_tree};
    const unsigned mmf = out ? out->mm_flags : VS_MM_DEFAULT;
    for (int l = 0; l < c->n_layer; l++) {
        const vs_lm_layer *L = &lm->w.layers[l];
        f.layer = l;
        /* attention block */
        if (l == 0 && L->attn_norm) norm_rows(lm, tp, lm->x, lm->xn, L->attn_norm, n); /* later: fused below */
        else if (l == 0) memcpy(lm->xn, lm->x, (size_t)n * E * sizeof(float)); /* a head's first block */
        matmul_shared(tp, (const vs_lm_mat *const[]){&L->wq, &L->wk, &L->wv}, (float *const[]){lm->q, lm->k, lm->v},
                      3, lm->xn, n, mmf);
        run_job(tp, job_rope_store, &f, (int64_t)n * (c->n_head + 2 * c->n_head_kv) * c->head_dim);
        run_job(tp, job_attention, &f, attn_work);
        matmul_ex(tp, &L->wo, lm->att, n, lm->tmp, mmf);
        add_norm_job an = {lm, n, lm->x, lm->tmp, lm->xn, L->ffn_norm};
        run_job(tp, job_add_norm, &an, (int64_t)n * c->n_embd);
        /* feed-forward block */
        matmul_shared(tp, (const vs_lm_mat *const[]){&L->w_gate, &L->w_up}, (float *const[]){lm->gate, lm->up}, 2,
                      lm->xn, n, mmf);
        swiglu_job sj = {lm->gate, lm->up, (int64_t)n * c->n_ff, lm->attn_isa};
        run_job(tp, job_swiglu, &sj, sj.n);
        matmul_ex(tp, &L->w_down, lm->gate, n, lm->tmp, mmf);
        /* residual, then the next layer's attention norm */
        an.w = l + 1 < c->n_layer ? lm->w.layers[l + 1].attn_norm : NULL;
        run_job(tp, job_add_norm, &an, (int64_t)n * c->n_embd);
        if (out && out->layer_fn && l + 1 < c->n_layer) {
            out->layer_fn(out->layer_ctx, l, lm->x, n);
            if (an.w) norm_rows(lm, tp, lm->x, lm->xn, an.w, n);
            else memcpy(lm->xn, lm->x, (size_t)n * E * sizeof(float));
        }
        if (out)
            for (int i = 0; i < out->n_layer_out; i++)
                if (out->layer_ids[i] == l) memcpy(out->layer_hidden[i], lm->x, (size_t)n * E * sizeof(float));
    }
    if (out && out->hidden) memcpy(out->hidden, lm->x, (size_t)n * E * sizeof(float));
    if (out && out->logits) {
        /* Gather the rows that want logits (in batch order), norm them, apply the output matrix. */
        int nw = 0;
        for (int r = 0; r < n; r++)
            if (rows[r].want_logits) memcpy(lm->tmp + (size_t)nw++ * E, lm->x + (size_t)r * E, E * sizeof(float));
        if (nw > 0) {
            norm_rows(lm, tp, lm->tmp, lm->xn, lm->w.output_norm, nw);
            matmul_ex(tp, &lm->w.output, lm->xn, nw, out->logits, mmf);
        }
    }
    for (int s = 0; s < n_seq; s++)
        if (lm->seq_cnt[s] && (st = vs_kv_seq_extend(kv, s, lm->seq_cnt[s], err))) return st;
    return VS_OK;
}

vs_status vs_lm_head(vs_lm *lm, vs_threadpool *tp, const float *h, int n, bool apply_norm, float *logits,
                     vs_error *err) {
    if (n < 1) return vs_error_set(err, VS_ERR_INVALID, "%s: LM head needs at least one row", vs_gguf_name(lm->g));
    if (!lm->w.output.data)
        return vs_error_set(err, VS_ERR_INVALID, "%s: a %s model has no LM head", vs_gguf_name(lm->g), lm->arch);
    vs_status st = ensure_scratch(lm, n, 1, 1, 1, false, err);
    if (st) return st;
    if (apply_norm) {
        norm_rows(lm, tp, h, lm->xn, lm->w.output_norm, n);
        h = lm->xn;
    }
    matmul_ex(tp, &lm->w.output, h, n, logits, VS_MM_DEFAULT);
    return VS_OK;
}

/* ------------------------------------------------------------------------------------------------ */
/* random-weight models */

/* Synthetic SentencePiece vocabulary of n tokens: specials, characters, byte tokens, filler words. */
static vs_status set_synthetic_vocab(vs_gguf_writer *w, int n, const char *omit, vs_error *err) {
    static const char chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?:;'-()";
    char **tok = vs_calloc((size_t)n, sizeof(char *));
    float *score = vs_malloc(sizeof(float) * (size_t)n);
    int32_t *type = vs_malloc(sizeof(int32_t) * (size_t)n);
    vs_status st = VS_OK;
    if (!tok || !score || !type) st = vs_error_set(err, VS_ERR_NOMEM, "random model: out of memory");
    for (int i = 0; !st && i < n; i++) {
        char buf[32];
        int t = 1; /* NORMAL */
        int nc = (int)sizeof(chars) - 1;
        if (i == 0) snprintf(buf, sizeof(buf), "<unk>"), t = 2;
        else if (i == 1) snprintf(buf, sizeof(buf), "<s>"), t = 3;
        else if (i == 2) snprintf(buf, sizeof(buf), "</s>"), t = 3;
        else if (i == 3) snprintf(buf, sizeof(buf), "\xe2\x96\x81"); /* U+2581, SentencePiece's space */
        else if (i < 4 + nc) snprintf(buf, sizeof(buf), "%c", chars[i - 4]);
        else if (i < 4 + nc + 256) snprintf(buf, sizeof(buf), "<0x%02X>", i - 4 - nc), t = 6;
        else snprintf(buf, sizeof(buf), "\xe2\x96\x81w%d", i);
        tok[i] = vs_strdup(buf);
        score[i] = i < 3 ? 0.0f : -(float)i;
        type[i] = t;
        if (!tok[i]) st = vs_error_set(err, VS_ERR_NOMEM, "random model: out of memory");
    }
    if (!st) {
#define SET_UNLESS_OMITTED(key, call) \
    if (!omit || strcmp(omit, key)) call
        SET_UNLESS_OMITTED("tokenizer.ggml.model", vs_gguf_set_str(w, "tokenizer.ggml.model", "llama"));
        SET_UNLESS_OMITTED("tokenizer.ggml.tokens",
                           vs_gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok, (uint64_t)n));
        vs_gguf_set_arr(w, "tokenizer.ggml.scores", VS_GGUF_F32, score, (uint64_t)n);
        vs_gguf_set_arr(w, "tokenizer.ggml.token_type", VS_GGUF_I32, type, (uint64_t)n);
        vs_gguf_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
        vs_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
        vs_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
#undef SET_UNLESS_OMITTED
    }
    for (int i = 0; tok && i < n; i++) vs_free(tok[i]);
    vs_free(tok);
    vs_free(score);
    vs_free(type);
    return st;
}

/* Adds a tensor of ne = [n_in, n_out] (n_out = 1 for a vector) filled with N(0, std^2) values, or with
 * `fill` when std == 0, converted to type. */
static vs_status add_random_tensor(vs_gguf_writer *w, vs_rng *rng, const char *name, int64_t n_in, int64_t n_out,
                                   int n_dims, vs_type type, float std, float fill, const char *omit,
                                   vs_error *err) {
    if (omit && !strcmp(omit, name)) return VS_OK;
    size_t rb = vs_type_row_bytes(type, n_in);
    float *row = vs_malloc(sizeof(float) * (size_t)n_in);
    uint8_t *data = vs_malloc(rb * (size_t)n_out);
    vs_status st = VS_OK;
    if (!row || !data || rb == 0) {
        st = rb == 0 ? vs_error_set(err, VS_ERR_INVALID, "random model: %s: row of %lld values does not fit the %s "
                                    "block of %lld", name, (long long)n_in, vs_type_name(type),
                                    (long long)vs_type_block_size(type))
                     : vs_error_set(err, VS_ERR_NOMEM, "random model: %s: out of memory", name);
    } else {
        for (int64_t o = 0; o < n_out; o++) {
            for (int64_t i = 0; i < n_in; i++) row[i] = std > 0 ? std * vs_rng_normal(rng) : fill;
            vs_quantize_row(type, row, data + (size_t)o * rb, n_in);
        }
        int64_t ne[2] = {n_in, n_out};
        st = vs_gguf_add_tensor(w, name, type, n_dims, ne, data, err);
    }
    vs_free(row);
    vs_free(data);
    return st;
}

vs_gguf_writer *vs_lm_random_writer(const vs_lm_random_opts *o, vs_error *err) {
    if (o->n_embd < 2 || o->n_layer < 1 || o->n_head < 1 || o->n_head_kv < 1 || o->n_ff < 1 || o->n_ctx < 1 ||
        o->n_embd % o->n_head || (o->n_embd / o->n_head) % 2 || o->n_head % o->n_head_kv) {
        vs_error_set(err, VS_ERR_INVALID,
                     "random model: bad shape (dim %d, layers %d, heads %d, kv heads %d, ffn %d, ctx %d): dim must "
                     "be an even multiple of heads and heads a multiple of kv heads",
                     o->n_embd, o->n_layer, o->n_head, o->n_head_kv, o->n_ff, o->n_ctx);
        return NULL;
    }
    if (!vs_type_supported(o->type)) {
        vs_error_set(err, VS_ERR_UNSUPPORTED, "random model: weight type %d not supported", (int)o->type);
        return NULL;
    }
    int64_t bs = vs_type_block_size(o->type);
    if (o->n_embd % bs || o->n_ff % bs) {
        vs_error_set(err, VS_ERR_INVALID, "random model: dim %d and ffn %d must be multiples of %lld for %s",
                     o->n_embd, o->n_ff, (long long)bs, vs_type_name(o->type));
        return NULL;
    }
    int n_vocab = o->n_vocab;
    if (o->tok_from) {
        int64_t ki = vs_gguf_find_key(o->tok_from, "tokenizer.ggml.tokens");
        if (ki < 0 || vs_gguf_kv_type(o->tok_from, ki) != VS_GGUF_ARRAY || vs_gguf_arr_len(o->tok_from, ki) < 1 ||
            vs_gguf_arr_len(o->tok_from, ki) > (1 << 24)) {
            vs_error_set(err, VS_ERR_FORMAT, "%s: no usable tokenizer.ggml.tokens array to copy",
                         vs_gguf_name(o->tok_from));
            return NULL;
        }
        n_vocab = (int)vs_gguf_arr_len(o->tok_from, ki);
    } else if (n_vocab < 8 || n_vocab > (1 << 24)) {
        vs_error_set(err, VS_ERR_INVALID, "random model: vocabulary size %d must be in [8, 2^24]", n_vocab);
        return NULL;
    }
    vs_gguf_writer *w = vs_gguf_writer_new();
    if (!w) {
        vs_error_set(err, VS_ERR_NOMEM, "random model: out of memory");
        return NULL;
    }
    const char *omit = o->omit;
    int hd = o->n_embd / o->n_head;
#define SET(key, call) \
    if (!omit || strcmp(omit, key)) call
    SET("general.architecture", vs_gguf_set_str(w, "general.architecture", "llama"));
    vs_gguf_set_str(w, "general.name", "vlmspec-random");
    SET("llama.context_length", vs_gguf_set_u32(w, "llama.context_length", (uint32_t)o->n_ctx));
    SET("llama.embedding_length", vs_gguf_set_u32(w, "llama.embedding_length", (uint32_t)o->n_embd));
    SET("llama.block_count", vs_gguf_set_u32(w, "llama.block_count", (uint32_t)o->n_layer));
    SET("llama.feed_forward_length", vs_gguf_set_u32(w, "llama.feed_forward_length", (uint32_t)o->n_ff));
    SET("llama.attention.head_count", vs_gguf_set_u32(w, "llama.attention.head_count", (uint32_t)o->n_head));
    SET("llama.attention.head_count_kv",
        vs_gguf_set_u32(w, "llama.attention.head_count_kv", (uint32_t)o->n_head_kv));
    SET("llama.attention.layer_norm_rms_epsilon",
        vs_gguf_set_f32(w, "llama.attention.layer_norm_rms_epsilon", o->rms_eps > 0 ? o->rms_eps : 1e-5f));
    SET("llama.rope.freq_base", vs_gguf_set_f32(w, "llama.rope.freq_base", o->rope_base > 0 ? o->rope_base : 10000.0f));
    SET("llama.rope.dimension_count", vs_gguf_set_u32(w, "llama.rope.dimension_count", (uint32_t)hd));
#undef SET
    vs_status st = o->tok_from ? vs_gguf_copy_kv(w, o->tok_from, "tokenizer.", err)
                               : set_synthetic_vocab(w, n_vocab, omit, err);
    vs_rng rng;
    vs_rng_seed(&rng, o->seed);
    float std = o->init_std > 0 ? o->init_std : 0.02f;
    const int64_t E = o->n_embd, Q = o->n_embd, KV = (int64_t)o->n_head_kv * hd, F = o->n_ff;
    if (!st) st = add_random_tensor(w, &rng, "token_embd.weight", E, n_vocab, 2, o->type, std, 0, omit, err);
    char tn[64];
    for (int l = 0; !st && l < o->n_layer; l++) {
#define TN(suffix) (snprintf(tn, sizeof(tn), "blk.%d." suffix, l), tn)
        st = add_random_tensor(w, &rng, TN("attn_norm.weight"), E, 1, 1, VS_TYPE_F32, 0, 1.0f, omit, err);
        if (!st) st = add_random_tensor(w, &rng, TN("attn_q.weight"), E, Q, 2, o->type, std, 0, omit, err);
        if (!st) st = add_random_tensor(w, &rng, TN("attn_k.weight"), E, KV, 2, o->type, std, 0, omit, err);
        if (!st) st = add_random_tensor(w, &rng, TN("attn_v.weight"), E, KV, 2, o->type, std, 0, omit, err);
        if (!st) st = add_random_tensor(w, &rng, TN("attn_output.weight"), Q, E, 2, o->type, std, 0, omit, err);
        if (!st) st = add_random_tensor(w, &rng, TN("ffn_norm.weight"), E, 1, 1, VS_TYPE_F32, 0, 1.0f, omit, err);
        if (!st) st = add_random_tensor(w, &rng, TN("ffn_gate.weight"), E, F, 2, o->type, std, 0, omit, err);
        if (!st) st = add_random_tensor(w, &rng, TN("ffn_up.weight"), E, F, 2, o->type, std, 0, omit, err);
        if (!st) st = add_random_tensor(w, &rng, TN("ffn_down.weight"), F, E, 2, o->type, std, 0, omit, err);
#undef TN
    }
    if (!st) st = add_random_tensor(w, &rng, "output_norm.weight", E, 1, 1, VS_TYPE_F32, 0, 1.0f, omit, err);
    if (!st && !o->tied) st = add_random_tensor(w, &rng, "output.weight", E, n_vocab, 2, o->type, std, 0, omit, err);
    if (st) {
        vs_gguf_writer_free(w);
        return NULL;
    }
    return w;
}

vs_status vs_lm_write_random(const vs_lm_random_opts *o, const char *path, vs_error *err) {
    vs_gguf_writer *w = vs_lm_random_writer(o, err);
    if (!w) return err ? err->code : VS_ERR_INVALID;
    vs_status st = vs_gguf_write(w, path, err);
    vs_gguf_writer_free(w);
    return st;
}

/* ------------------------------------------------------------------------------------------------ */
/* conversion */

static int file_type_of(vs_type t) { /* llama.cpp's general.file_type (llama_ftype) */
    switch (t) {
    case VS_TYPE_F16: return 1;
    case VS_TYPE_Q4_0: return 2;
    case VS_TYPE_Q8_0: return 7;
    case VS_TYPE_Q4_K: return 14; /* "mostly Q4_K" (Q4_K_S): every matrix one type */
    case VS_TYPE_Q5_K: return 16; /* Q5_K_S */
    case VS_TYPE_Q6_K: return 18;
    case VS_TYPE_BF16: return 32;
    default: return 0;
    }
}

vs_status vs_lm_convert(const char *in, const char *out, vs_type type, vs_lm_convert_stats *stats, vs_error *err) {
    if (!vs_type_supported((int)type))
        return vs_error_set(err, VS_ERR_INVALID, "model convert: unsupported weight type %d", (int)type);
    vs_gguf *g = vs_gguf_open(in, err);
    if (!g) return err ? err->code : VS_ERR_IO;
    vs_gguf_str arch;
    vs_status st = VS_OK;
    if (vs_gguf_get_str(g, "general.architecture", &arch) != 1 || !vs_gguf_str_eq(arch, "llama")) {
        st = vs_error_set(err, VS_ERR_UNSUPPORTED, "%s: not a LLaMA model file (general.architecture must be "
                          "\"llama\"; projector files are not converted)", in);
        vs_gguf_close(g);
        return st;
    }
    const int64_t nt = vs_gguf_n_tensors(g);
    void **owned = vs_calloc((size_t)(nt > 0 ? nt : 1), sizeof(void *));
    float *row = NULL;
    vs_gguf_writer *w = vs_gguf_writer_new();
    vs_lm_convert_stats s = {0};
    if (!owned || !w) st = vs_error_set(err, VS_ERR_NOMEM, "model convert: out of memory");
    if (!st) st = vs_gguf_copy_kv(w, g, "", err);
    if (!st) vs_gguf_set_u32(w, "general.file_type", (uint32_t)file_type_of(type));
    for (int64_t i = 0; !st && i < nt; i++) {
        const vs_gguf_tensor *t = vs_gguf_tensor_at(g, i);
        const int64_t n_in = t->ne[0], n_rows = t->ne[1] * t->ne[2] * t->ne[3];
        /* the weight matrices; norms (1-D) stay as they are, like llama.cpp's converters */
        const bool convert = t->n_dims == 2 && vs_type_supported(t->type) && t->type != (int)type;
        s.bytes_in += t->nbytes;
        if (!convert) {
            st = vs_gguf_add_tensor_ref(w, t->name, t->type, t->n_dims, t->ne, t->data, err);
            s.bytes_out += t->nbytes, s.kept++;
            continue;
        }
        if (n_in % vs_type_block_size(type)) {
            st = vs_error_set(err, VS_ERR_INVALID, "model convert: %s has rows of %lld values, not a multiple of "
                              "%s's block of %lld", t->name, (long long)n_in, vs_type_name(type),
                              (long long)vs_type_block_size(type));
            break;
        }
        const size_t rb_in = vs_type_row_bytes((vs_type)t->type, n_in), rb = vs_type_row_bytes(type, n_in);
        uint8_t *dst = vs_malloc(rb * (size_t)n_rows);
        float *r2 = dst ? vs_realloc(row, sizeof(float) * (size_t)n_in) : NULL;
        if (!r2) {
            vs_free(dst);
            st = vs_error_set(err, VS_ERR_NOMEM, "model convert: out of memory for %s", t->name);
            break;
        }
        row = r2, owned[i] = dst;
        for (int64_t r = 0; r < n_rows; r++) {
            vs_dequantize_row((vs_type)t->type, (const uint8_t *)t->data + (size_t)r * rb_in, row, n_in);
            vs_quantize_row(type, row, dst + (size_t)r * rb, n_in);
        }
        st = vs_gguf_add_tensor_ref(w, t->name, (int)type, t->n_dims, t->ne, dst, err);
        s.bytes_out += rb * (size_t)n_rows, s.converted++;
    }
    if (!st) st = vs_gguf_write(w, out, err);
    if (w) vs_gguf_writer_free(w);
    for (int64_t i = 0; owned && i < nt; i++) vs_free(owned[i]);
    vs_free(owned), vs_free(row);
    vs_gguf_close(g);
    if (!st) { /* the result must load like any model */
        vs_lm *lm = vs_lm_load(out, err);
        if (!lm) st = vs_error_wrap(err, "model convert: the written file %s does not load", out);
        vs_lm_free(lm);
    }
    if (!st && stats) *stats = s;
    return st;
}
