/* msd_cache: the feature drafters' training data on disk (the MSD head's, the DREAM model's), computed
 * once from the frozen target.
 * Owns: the shard files of a cache directory (writing one shard at a time, atomically; finding where an
 * interrupted run stopped; reading every record back) and the record layout. The records come from
 * vs_train_msd_sequence_mid (train_msd.h); the trainer reads them back as vs_msd_seq.
 *
 * A record keeps what cannot be recomputed cheaply: the target's features (F16), the image rows (F16,
 * in order of appearance) and per row the token id (-1 on image rows) and the mask; the text rows'
 * embeddings are looked up in the target's table again when the record is loaded. About C * 2 bytes per
 * row plus C * 2 per image row (C = 512: ~1 KB per row; twice that with intermediate targets).
 *
 * Shard file `msd-NNNNN.bin` (little-endian): "VSMSDC01", u32 width C, u32 records; per record u32 T,
 * u32 image rows, u32 flags (bit 0: the sample has images; bit 1: it has DREAM's intermediate targets),
 * u32 their layer (0 without), u64 sample id, i32 tokens[T], u8 mask[T] padded to 4 bytes, u16
 * features[T][C], u16 image rows[n][C], with bit 1 u16 intermediate targets[T][C]. A shard is complete or absent
 * (written through a temporary and renamed), so the shards present are a resumable prefix: shard k holds
 * the records of samples [k * per_shard, (k + 1) * per_shard). */
#ifndef VS_MSD_CACHE_H
#define VS_MSD_CACHE_H

#include "train_msd.h"

/* One record as written / read (arrays owned by the caller when writing, by the reader when read). */
typedef struct vs_msd_record {
    int32_t T, n_img_rows;
    bool visual;      /* the sample has images */
    uint64_t sample;  /* its index in the data the cache was made from */
    int32_t *tokens;  /* (T) -1 on image rows */
    uint8_t *mask;    /* (T) */
    uint16_t *feat;   /* (T, C) F16 */
    uint16_t *img;    /* (n_img_rows, C) F16, the image rows in order of appearance */
    uint16_t *mid;    /* (T, C) F16 intermediate targets (vs_msd_seq.mid), or NULL */
    int32_t mid_layer; /* their layer, -1 without */
} vs_msd_record;

/* Parses one shard's bytes (buf 4-byte aligned, e.g. from malloc): the number of records, or -1 when the
 * bytes are not a complete shard of this width (magic, width, every record's sizes within the buffer,
 * image rows = the tokens marked -1, no trailing bytes). rec (that many entries, or NULL to count only)
 * receives records pointing into buf. */
int64_t vs_msd_shard_parse(uint8_t *buf, size_t size, int width, vs_msd_record *rec);

/* Shards of `dir` present from 0 on (the resumable prefix); 0 when none. Reads the headers only: a
 * shard of another width or without the magic is an error naming it (a damaged body is found by
 * vs_msd_cache_load). */
vs_status vs_msd_cache_count(const char *dir, int width, int64_t *n_shards, vs_error *err);
/* Writes shard `index` of dir from n sequences made by the target (their tokens, the mask, features
 * and image rows converted to F16). sample[i] and visual[i] label sequence i. */
vs_status vs_msd_cache_write_shard(const char *dir, int64_t index, int width, const vs_msd_seq *seqs,
                                   const int32_t *const *tokens, const uint64_t *sample, int n, vs_error *err);

/* Every record of shards 0 .. n_shards - 1, in memory. */
typedef struct vs_msd_cache {
    int width;
    int64_t n;
    vs_msd_record *rec; /* (n) pointing into the shards' buffers */
    uint8_t **bufs;
    int64_t n_bufs;
} vs_msd_cache;
vs_status vs_msd_cache_load(const char *dir, int width, int64_t n_shards, vs_msd_cache *c, vs_error *err);
void vs_msd_cache_free(vs_msd_cache *c);
/* Record r back as a training sequence for `target` (text rows' embeddings from its table): fills *out
 * (vs_msd_seq_free releases it). */
vs_status vs_msd_cache_sequence(const vs_msd_cache *c, int64_t r, const vs_lm *target, vs_msd_seq *out,
                                vs_error *err);

/* Batches for the trainer: buffers for up to max_B sequences of max_T rows of width C. */
typedef struct vs_msd_batch_buf {
    int max_B, max_T, C;
    float *emb, *feat, *noise, *mask; /* (max_B, max_T, C) x3, (max_B, max_T) */
    float *mid;                       /* (max_B, max_T, C) */
    uint8_t *is_image;                /* (max_B, max_T) */
} vs_msd_batch_buf;
vs_status vs_msd_batch_buf_init(vs_msd_batch_buf *b, int max_B, int max_T, int C, vs_error *err);
void vs_msd_batch_buf_free(vs_msd_batch_buf *b);
/* Fills *out with records idx[0 .. B) as one batch as long as the longest of them; shorter sequences are
 * padded at the end (zero rows, mask 0: causal attention keeps padding out of the real slots). noise_std
 * > 0 draws the released MSD code's input noise from rng: (U(0,1) - 0.5) * noise_std * 512 / T per value,
 * T the sequence's own length; 0 gives none. out->mid holds the intermediate targets when every record of
 * the batch has them, else NULL. A record longer than max_T is an error. */
vs_status vs_msd_cache_fill_batch(const vs_msd_cache *c, const vs_lm *target, const int64_t *idx, int B,
                                  float noise_std, vs_rng *rng, vs_msd_batch_buf *buf, vs_train_msd_batch *out,
                                  vs_error *err);

#endif
