/* kv: multi-sequence key/value cache. See kv.h. */
#include "kv.h"

#include <string.h>

struct vs_kv {
    int n_layer, n_head_kv, head_dim, n_seq, n_ctx;
    vs_type type;
    size_t el;         /* bytes per element */
    size_t block;      /* elements per (seq, layer, head) block = n_ctx * head_dim (BF16: n_ctx rounded
                          up to 16) */
    uint8_t *k, *v;    /* [n_seq][n_layer][n_head_kv][block] each (kv.h: layout within a block) */
    int *len;          /* [n_seq] filled rows */
};

vs_kv *vs_kv_new(int n_layer, int n_head_kv, int head_dim, int n_seq, int n_ctx, vs_type type,
                 vs_error *err) {
    if (n_layer < 1 || n_head_kv < 1 || head_dim < 1 || n_seq < 1 || n_ctx < 1) {
        vs_error_set(err, VS_ERR_INVALID,
                     "kv cache: bad shape (layers %d, kv heads %d, head dim %d, sequences %d, ctx %d)",
                     n_layer, n_head_kv, head_dim, n_seq, n_ctx);
        return NULL;
    }
    if (type != VS_TYPE_F32 && type != VS_TYPE_F16 && type != VS_TYPE_BF16) {
        vs_error_set(err, VS_ERR_UNSUPPORTED, "kv cache: storage type %s not supported (F32, F16 or BF16)",
                     vs_type_name(type));
        return NULL;
    }
    if (type == VS_TYPE_BF16 && head_dim % 2) {
        vs_error_set(err, VS_ERR_UNSUPPORTED, "kv cache: BF16 storage needs an even head dimension (not %d)",
                     head_dim);
        return NULL;
    }
    vs_kv *kv = vs_calloc(1, sizeof(*kv));
    if (!kv) {
        vs_error_set(err, VS_ERR_NOMEM, "kv cache: out of memory");
        return NULL;
    }
    kv->n_layer = n_layer;
    kv->n_head_kv = n_head_kv;
    kv->head_dim = head_dim;
    kv->n_seq = n_seq;
    kv->n_ctx = n_ctx;
    kv->type = type;
    kv->el = type == VS_TYPE_F32 ? 4 : 2;
    kv->block = (size_t)(type == VS_TYPE_BF16 ? ((int64_t)n_ctx + 15) / 16 * 16 : n_ctx) * (size_t)head_dim;
    /* All factors are < 2^31; the product is checked against the allocator's limit by vs_malloc. */
    double total = (double)n_seq * n_layer * n_head_kv * (double)kv->block * (double)kv->el;
    size_t bytes = (size_t)n_seq * n_layer * n_head_kv * kv->block * kv->el;
    kv->len = vs_calloc((size_t)n_seq, sizeof(int));
    if (total < 1e15) { /* BF16: zeroed, so the attention's whole 16-key blocks never read garbage */
        kv->k = type == VS_TYPE_BF16 ? vs_calloc(1, bytes) : vs_malloc(bytes);
        kv->v = type == VS_TYPE_BF16 ? vs_calloc(1, bytes) : vs_malloc(bytes);
    }
    if (!kv->len || !kv->k || !kv->v) {
        vs_error_set(err, VS_ERR_NOMEM, "kv cache: cannot allocate 2 x %.0f MiB (%d sequences x %d rows)",
                     total / 1048576.0, n_seq, n_ctx);
        vs_kv_free(kv);
        return NULL;
    }
    return kv;
}

void vs_kv_free(vs_kv *kv) {
    if (!kv) return;
    vs_free(kv->k);
    vs_free(kv->v);
    vs_free(kv->len);
    vs_free(kv);
}

int vs_kv_n_seq(const vs_kv *kv) { return kv->n_seq; }
int vs_kv_n_ctx(const vs_kv *kv) { return kv->n_ctx; }
int vs_kv_n_layer(const vs_kv *kv) { return kv->n_layer; }
int vs_kv_n_head_kv(const vs_kv *kv) { return kv->n_head_kv; }
int vs_kv_head_dim(const vs_kv *kv) { return kv->head_dim; }
vs_type vs_kv_type(const vs_kv *kv) { return kv->type; }
size_t vs_kv_bytes(const vs_kv *kv) {
    return 2 * (size_t)kv->n_seq * kv->n_layer * kv->n_head_kv * kv->block * kv->el;
}

int vs_kv_seq_len(const vs_kv *kv, int seq) {
    return seq >= 0 && seq < kv->n_seq ? kv->len[seq] : 0;
}

void vs_kv_clear(vs_kv *kv) {
    memset(kv->len, 0, (size_t)kv->n_seq * sizeof(int));
}

static size_t block_offset(const vs_kv *kv, int seq, int layer, int head) {
    return (((size_t)seq * kv->n_layer + layer) * kv->n_head_kv + head) * kv->block * kv->el;
}

void *vs_kv_k(vs_kv *kv, int seq, int layer, int head) { return kv->k + block_offset(kv, seq, layer, head); }
void *vs_kv_v(vs_kv *kv, int seq, int layer, int head) { return kv->v + block_offset(kv, seq, layer, head); }
const void *vs_kv_k_const(const vs_kv *kv, int seq, int layer, int head) {
    return kv->k + block_offset(kv, seq, layer, head);
}
const void *vs_kv_v_const(const vs_kv *kv, int seq, int layer, int head) {
    return kv->v + block_offset(kv, seq, layer, head);
}

static size_t index_of(const vs_kv *kv, bool key, int t, int d) {
    if (kv->type != VS_TYPE_BF16) return (size_t)t * kv->head_dim + d;
    return key ? vs_kv_bf16_key_index(kv->head_dim, t, d) : vs_kv_bf16_value_index(kv->head_dim, t, d);
}

float vs_kv_get(const vs_kv *kv, bool key, int seq, int layer, int head, int t, int d) {
    const void *b = key ? vs_kv_k_const(kv, seq, layer, head) : vs_kv_v_const(kv, seq, layer, head);
    size_t i = index_of(kv, key, t, d);
    switch (kv->type) {
    case VS_TYPE_F16: return vs_fp16_to_fp32(((const uint16_t *)b)[i]);
    case VS_TYPE_BF16: return vs_bf16_to_fp32(((const uint16_t *)b)[i]);
    default: return ((const float *)b)[i];
    }
}

void vs_kv_set(vs_kv *kv, bool key, int seq, int layer, int head, int t, int d, float v) {
    void *b = key ? vs_kv_k(kv, seq, layer, head) : vs_kv_v(kv, seq, layer, head);
    size_t i = index_of(kv, key, t, d);
    switch (kv->type) {
    case VS_TYPE_F16: ((uint16_t *)b)[i] = vs_fp32_to_fp16(v); break;
    case VS_TYPE_BF16: ((uint16_t *)b)[i] = vs_fp32_to_bf16(v); break;
    default: ((float *)b)[i] = v; break;
    }
}

/* BF16: moves row `from` of a key and a value block to slot `to` (pairs of 16-bit elements). */
static void move_row_bf16(const vs_kv *kv, uint16_t *k, uint16_t *v, int from, int to) {
    const int hd = kv->head_dim;
    for (int d = 0; d < hd; d += 2) {
        size_t a = vs_kv_bf16_key_index(hd, from, d), b = vs_kv_bf16_key_index(hd, to, d);
        k[b] = k[a], k[b + 1] = k[a + 1];
    }
    for (int d = 0; d < hd; d++) v[vs_kv_bf16_value_index(hd, to, d)] = v[vs_kv_bf16_value_index(hd, from, d)];
}

static vs_status check_seq(const vs_kv *kv, int seq, const char *op, vs_error *err) {
    if (seq < 0 || seq >= kv->n_seq)
        return vs_error_set(err, VS_ERR_INVALID, "kv cache %s: sequence %d out of range [0, %d)", op, seq,
                            kv->n_seq);
    return VS_OK;
}

vs_status vs_kv_seq_truncate(vs_kv *kv, int seq, int len, vs_error *err) {
    vs_status st = check_seq(kv, seq, "truncate", err);
    if (st) return st;
    if (len < 0 || len > kv->len[seq])
        return vs_error_set(err, VS_ERR_INVALID, "kv cache truncate: length %d outside [0, %d] of sequence %d",
                            len, kv->len[seq], seq);
    kv->len[seq] = len;
    return VS_OK;
}

vs_status vs_kv_seq_copy(vs_kv *kv, int src, int dst, int len, vs_error *err) {
    vs_status st = check_seq(kv, src, "copy", err);
    if (!st) st = check_seq(kv, dst, "copy", err);
    if (st) return st;
    if (len < 0 || len > kv->len[src])
        return vs_error_set(err, VS_ERR_INVALID, "kv cache copy: length %d outside [0, %d] of sequence %d",
                            len, kv->len[src], src);
    if (src != dst) {
        size_t row = (size_t)kv->head_dim * kv->el;
        /* BF16: whole 16-key blocks and position pairs (slots past len are not part of dst) */
        size_t kn = kv->type == VS_TYPE_BF16 ? (size_t)(len + 15) / 16 * 16 : (size_t)len;
        size_t vn = kv->type == VS_TYPE_BF16 ? (size_t)(len + 1) / 2 * 2 : (size_t)len;
        for (int l = 0; l < kv->n_layer; l++)
            for (int h = 0; h < kv->n_head_kv; h++) {
                memcpy(vs_kv_k(kv, dst, l, h), vs_kv_k(kv, src, l, h), kn * row);
                memcpy(vs_kv_v(kv, dst, l, h), vs_kv_v(kv, src, l, h), vn * row);
            }
    }
    kv->len[dst] = len;
    return VS_OK;
}

vs_status vs_kv_seq_compact(vs_kv *kv, int seq, const int32_t *slots, int n, int dst_len, vs_error *err) {
    vs_status st = check_seq(kv, seq, "compact", err);
    if (st) return st;
    int len = kv->len[seq];
    if (n < 0 || dst_len < 0 || dst_len > len)
        return vs_error_set(err, VS_ERR_INVALID, "kv cache compact: bad count %d or start %d (sequence %d has %d)",
                            n, dst_len, seq, len);
    for (int i = 0; i < n; i++) {
        if (slots[i] < dst_len || slots[i] >= len || (i > 0 && slots[i] <= slots[i - 1]))
            return vs_error_set(err, VS_ERR_INVALID,
                                "kv cache compact: slot %d (entry %d) must be increasing and in [%d, %d)",
                                slots[i], i, dst_len, len);
    }
    size_t row = (size_t)kv->head_dim * kv->el;
    for (int l = 0; l < kv->n_layer; l++)
        for (int h = 0; h < kv->n_head_kv; h++) {
            uint8_t *k = vs_kv_k(kv, seq, l, h), *v = vs_kv_v(kv, seq, l, h);
            for (int i = 0; i < n; i++) {
                size_t from = (size_t)slots[i], to = (size_t)dst_len + i;
                if (from == to) continue;
                if (kv->type == VS_TYPE_BF16) { /* rows interleaved with their neighbours */
                    move_row_bf16(kv, (uint16_t *)k, (uint16_t *)v, (int)from, (int)to);
                    continue;
                }
                /* from > to (strictly increasing slots starting at >= dst_len): no overlap */
                memcpy(k + to * row, k + from * row, row);
                memcpy(v + to * row, v + from * row, row);
            }
        }
    kv->len[seq] = dst_len + n;
    return VS_OK;
}

vs_status vs_kv_seq_extend(vs_kv *kv, int seq, int n, vs_error *err) {
    vs_status st = check_seq(kv, seq, "extend", err);
    if (st) return st;
    if (n < 0 || (int64_t)kv->len[seq] + n > kv->n_ctx)
        return vs_error_set(err, VS_ERR_RANGE,
                            "kv cache: sequence %d would hold %lld rows, more than its context of %d",
                            seq, (long long)kv->len[seq] + n, kv->n_ctx);
    kv->len[seq] += n;
    return VS_OK;
}
