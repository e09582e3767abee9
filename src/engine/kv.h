/* kv: the key/value cache of a decoder, holding several independent sequences.
 * Owns: one block of K and V rows per (sequence, layer, kv head), F32, F16 or BF16, and each
 * sequence's filled length. Rows are stored with RoPE already applied, so a row's position is baked
 * into its key; moving a row (copy, compact) does not re-rotate it.
 *
 * Who writes what: vs_lm_forward appends the rows of a batch to their sequences (through
 * vs_kv_seq_extend); the speculative engine edits sequences between forwards:
 *   - truncate: roll a sequence back to the accepted length after a rejected draft;
 *   - copy:     fork a draft row (sequence dst := the first len rows of sequence src);
 *   - compact:  after a tree verification, move the accepted nodes' rows (a root-to-node path, slot
 *               indices in path order) to consecutive slots starting at a given length.
 *
 * Layout (element type vs_kv_type): for sequence s, layer l, kv head h the keys are one contiguous
 * block at vs_kv_k(kv, s, l, h), the values another at vs_kv_v. Slot t of a sequence holds its t-th
 * cached row. F32 and F16: both blocks are [n_ctx][head_dim], row after row. BF16 (drafters only: a
 * cheaper attention, docs/ensemble.md) interleaves neighbours so the attention's vector loops need no
 * reductions or transposes (index functions below; head_dim must be even):
 *   keys   [n_ctx / 16][head_dim / 2][16][2]: blocks of 16 keys; within a block, for each pair of
 *          dimensions (2j, 2j + 1), the 16 keys' pairs side by side;
 *   values [n_ctx / 2][head_dim][2]: pairs of positions (2u, 2u + 1), each dimension's two values
 *          side by side.
 * (n_ctx rounded up to a multiple of 16 for BF16.) Memory is reserved for n_seq * n_ctx rows up front
 * but only touched as rows are written (the OS maps pages lazily). Not thread-safe: one user at a
 * time. */
#ifndef VS_KV_H
#define VS_KV_H

#include <stdbool.h>

#include "quant.h"

typedef struct vs_kv vs_kv;

/* type: VS_TYPE_F32, VS_TYPE_F16 or VS_TYPE_BF16 (head_dim even). n_ctx: rows per sequence. All counts
 * >= 1. */
vs_kv *vs_kv_new(int n_layer, int n_head_kv, int head_dim, int n_seq, int n_ctx, vs_type type,
                 vs_error *err);
void vs_kv_free(vs_kv *kv);

int vs_kv_n_seq(const vs_kv *kv);
int vs_kv_n_ctx(const vs_kv *kv);
int vs_kv_n_layer(const vs_kv *kv);
int vs_kv_n_head_kv(const vs_kv *kv);
int vs_kv_head_dim(const vs_kv *kv);
vs_type vs_kv_type(const vs_kv *kv);
size_t vs_kv_bytes(const vs_kv *kv); /* bytes reserved for K and V */

/* Number of rows cached for a sequence (0 for an out-of-range seq). */
int vs_kv_seq_len(const vs_kv *kv, int seq);

/* Drops every row of every sequence. */
void vs_kv_clear(vs_kv *kv);
/* Keeps the first len rows of seq (len <= current length). */
vs_status vs_kv_seq_truncate(vs_kv *kv, int seq, int len, vs_error *err);
/* Sequence dst becomes a copy of the first len rows of sequence src (len <= len(src)); dst's old
 * contents are dropped. src == dst truncates. */
vs_status vs_kv_seq_copy(vs_kv *kv, int src, int dst, int len, vs_error *err);
/* Moves rows slots[0..n) of seq to slots dst_len .. dst_len + n - 1 (in that order) and sets the
 * length to dst_len + n. slots must be strictly increasing, each < the current length, and
 * slots[0] >= dst_len (rows only move towards the front: an accepted tree path behind a kept prefix
 * of dst_len rows). n = 0 truncates to dst_len. */
vs_status vs_kv_seq_compact(vs_kv *kv, int seq, const int32_t *slots, int n, int dst_len, vs_error *err);

/* Marks n more rows of seq as filled (the caller wrote slots len .. len + n - 1 first). Fails with
 * VS_ERR_RANGE, changing nothing, when len + n would exceed n_ctx. Used by vs_lm_forward. */
vs_status vs_kv_seq_extend(vs_kv *kv, int seq, int n, vs_error *err);

/* Base of the [n_ctx][head_dim] key / value block of (seq, layer, kv head); elements of vs_kv_type. */
void *vs_kv_k(vs_kv *kv, int seq, int layer, int head);
void *vs_kv_v(vs_kv *kv, int seq, int layer, int head);
const void *vs_kv_k_const(const vs_kv *kv, int seq, int layer, int head);
const void *vs_kv_v_const(const vs_kv *kv, int seq, int layer, int head);

/* BF16 layout: element index of dimension d of slot t in a key / value block of head dimension hd. */
static inline size_t vs_kv_bf16_key_index(int hd, int t, int d) {
    return (((size_t)(t >> 4) * (size_t)(hd >> 1) + (size_t)(d >> 1)) << 5) + (size_t)((t & 15) << 1) +
           (size_t)(d & 1);
}
static inline size_t vs_kv_bf16_value_index(int hd, int t, int d) {
    return (((size_t)(t >> 1) * (size_t)hd + (size_t)d) << 1) + (size_t)(t & 1);
}

/* Element d of row t of (seq, layer, head), keys or values, as a float, for any storage type. */
float vs_kv_get(const vs_kv *kv, bool key, int seq, int layer, int head, int t, int d);
/* Stores v (rounded to the storage type) as element d of row t; does not change the length. */
void vs_kv_set(vs_kv *kv, bool key, int seq, int layer, int head, int t, int d, float v);

#endif
