/* msd_cache: shard files of the MSD head's training data (see msd_cache.h). */
#include "msd_cache.h"

#include <stdio.h>
#include <string.h>

#include "outfile.h"
#include "quant.h"

#define MAGIC "VSMSDC01"

static void shard_path(char *buf, size_t cap, const char *dir, int64_t index) {
    snprintf(buf, cap, "%s/msd-%05lld.bin", dir, (long long)index);
}

static size_t pad4(size_t n) { return (n + 3) & ~(size_t)3; }

static size_t record_bytes(int32_t T, int32_t n_img, bool mid, int C) {
    return 24 + (size_t)T * 4 + pad4((size_t)T) + (size_t)T * C * 2 * (mid ? 2 : 1) + (size_t)n_img * C * 2;
}

int64_t vs_msd_shard_parse(uint8_t *buf, size_t size, int C, vs_msd_record *rec) {
    if (size < 16 || memcmp(buf, MAGIC, 8)) return -1;
    uint32_t w, n;
    memcpy(&w, buf + 8, 4), memcpy(&n, buf + 12, 4);
    if ((int)w != C) return -1;
    size_t off = 16;
    for (uint32_t i = 0; i < n; i++) {
        if (size - off < 24) return -1;
        uint32_t T, ni, flags, layer;
        uint64_t sample;
        memcpy(&T, buf + off, 4), memcpy(&ni, buf + off + 4, 4), memcpy(&flags, buf + off + 8, 4);
        memcpy(&layer, buf + off + 12, 4), memcpy(&sample, buf + off + 16, 8);
        const bool mid = flags & 2;
        if (T < 2 || T > (1u << 20) || ni > T || flags > 3 || (mid ? layer < 1 || layer > 4096 : layer != 0) ||
            size - off < record_bytes((int32_t)T, (int32_t)ni, mid, C))
            return -1;
        uint8_t *p = buf + off + 24;
        int32_t imgs = 0, tok;
        for (uint32_t t = 0; t < T; t++) memcpy(&tok, p + (size_t)t * 4, 4), imgs += tok < 0;
        if (imgs != (int32_t)ni) return -1;
        if (rec) {
            vs_msd_record *r = &rec[i];
            r->T = (int32_t)T, r->n_img_rows = (int32_t)ni, r->visual = flags & 1, r->sample = sample;
            r->tokens = (int32_t *)p; /* 4-aligned: records start at multiples of 4 in a malloc'd buffer */
            p += (size_t)T * 4;
            r->mask = p;
            p += pad4(T);
            r->feat = (uint16_t *)p;
            p += (size_t)T * C * 2;
            r->img = (uint16_t *)p;
            p += (size_t)ni * C * 2;
            r->mid = mid ? (uint16_t *)p : NULL;
            r->mid_layer = mid ? (int32_t)layer : -1;
        }
        off += record_bytes((int32_t)T, (int32_t)ni, mid, C);
    }
    return off == size ? (int64_t)n : -1;
}

vs_status vs_msd_cache_count(const char *dir, int width, int64_t *n_shards, vs_error *err) {
    *n_shards = 0;
    char path[4096];
    for (int64_t k = 0;; k++) {
        shard_path(path, sizeof(path), dir, k);
        FILE *f = fopen(path, "rb");
        if (!f) break;
        /* the header only: shards appear whole (renamed into place); loading parses every record */
        uint8_t head[16];
        const bool whole = fread(head, 1, sizeof(head), f) == sizeof(head);
        fclose(f);
        uint32_t w = 0;
        if (whole) memcpy(&w, head + 8, 4);
        if (!whole || memcmp(head, MAGIC, 8) || w != (uint32_t)width)
            return vs_error_set(err, VS_ERR_FORMAT, "%s: not an MSD feature shard of width %d (damaged or from "
                                "another target: delete the cache directory to rebuild it)", path, width);
        *n_shards = k + 1;
    }
    return VS_OK;
}

vs_status vs_msd_cache_write_shard(const char *dir, int64_t index, int width, const vs_msd_seq *seqs,
                                   const int32_t *const *tokens, const uint64_t *sample, int n, vs_error *err) {
    const int C = width;
    if (C < 2 || C % 2 || n < 0)
        return vs_error_set(err, VS_ERR_INVALID, "MSD feature cache: width %d, %d records", C, n);
    size_t total = 16;
    for (int i = 0; i < n; i++) {
        int32_t ni = 0;
        for (int32_t t = 0; t < seqs[i].T; t++) ni += seqs[i].is_image[t] != 0;
        total += record_bytes(seqs[i].T, ni, seqs[i].mid != NULL, C);
    }
    uint8_t *buf = vs_calloc(total, 1);
    if (!buf) return vs_error_set(err, VS_ERR_NOMEM, "MSD feature cache: out of memory for a shard of %zu bytes", total);
    memcpy(buf, MAGIC, 8);
    const uint32_t w = (uint32_t)C, nn = (uint32_t)n;
    memcpy(buf + 8, &w, 4), memcpy(buf + 12, &nn, 4);
    size_t off = 16;
    for (int i = 0; i < n; i++) {
        const vs_msd_seq *s = &seqs[i];
        uint32_t T = (uint32_t)s->T, ni = 0;
        for (uint32_t t = 0; t < T; t++) ni += s->is_image[t] != 0;
        const uint32_t flags = (ni > 0) | (s->mid ? 2u : 0u), layer = s->mid ? (uint32_t)s->mid_layer : 0;
        memcpy(buf + off, &T, 4), memcpy(buf + off + 4, &ni, 4), memcpy(buf + off + 8, &flags, 4);
        memcpy(buf + off + 12, &layer, 4), memcpy(buf + off + 16, &sample[i], 8);
        uint8_t *p = buf + off + 24;
        for (uint32_t t = 0; t < T; t++) {
            const int32_t tok = s->is_image[t] ? -1 : tokens[i][t];
            memcpy(p + (size_t)t * 4, &tok, 4);
        }
        p += (size_t)T * 4;
        for (uint32_t t = 0; t < T; t++) p[t] = s->mask[t] > 0;
        p += pad4(T);
        uint16_t h;
        for (size_t j = 0; j < (size_t)T * C; j++) h = vs_fp32_to_fp16(s->feat[j]), memcpy(p + j * 2, &h, 2);
        p += (size_t)T * C * 2;
        for (uint32_t t = 0; t < T; t++) {
            if (!s->is_image[t]) continue;
            for (int c = 0; c < C; c++) h = vs_fp32_to_fp16(s->emb[(size_t)t * C + c]), memcpy(p + (size_t)c * 2, &h, 2);
            p += (size_t)C * 2;
        }
        if (s->mid)
            for (size_t j = 0; j < (size_t)T * C; j++) h = vs_fp32_to_fp16(s->mid[j]), memcpy(p + j * 2, &h, 2);
        off += record_bytes((int32_t)T, (int32_t)ni, s->mid != NULL, C);
    }
    char path[4096];
    shard_path(path, sizeof(path), dir, index);
    vs_status st = vs_write_file(path, buf, total, err);
    vs_free(buf);
    return st;
}

vs_status vs_msd_cache_load(const char *dir, int width, int64_t n_shards, vs_msd_cache *c, vs_error *err) {
    memset(c, 0, sizeof(*c));
    c->width = width;
    c->bufs = vs_calloc((size_t)(n_shards > 0 ? n_shards : 1), sizeof(uint8_t *));
    if (!c->bufs) return vs_error_set(err, VS_ERR_NOMEM, "MSD feature cache: out of memory");
    char path[4096];
    for (int64_t k = 0; k < n_shards; k++) {
        shard_path(path, sizeof(path), dir, k);
        size_t size = 0;
        vs_status st = vs_read_file(path, &c->bufs[k], &size, err);
        if (st) {
            vs_msd_cache_free(c);
            return st;
        }
        c->n_bufs = k + 1;
        const int64_t n = vs_msd_shard_parse(c->bufs[k], size, width, NULL);
        vs_msd_record *grown = n >= 0 ? vs_realloc(c->rec, sizeof(vs_msd_record) * (size_t)(c->n + n + 1)) : NULL;
        if (!grown) {
            vs_msd_cache_free(c);
            return n < 0 ? vs_error_set(err, VS_ERR_FORMAT, "%s: not an MSD feature shard of width %d (damaged or "
                                        "from another target: delete the cache directory to rebuild it)", path, width)
                         : vs_error_set(err, VS_ERR_NOMEM, "MSD feature cache: out of memory");
        }
        c->rec = grown;
        vs_msd_shard_parse(c->bufs[k], size, width, c->rec + c->n);
        c->n += n;
    }
    return VS_OK;
}

void vs_msd_cache_free(vs_msd_cache *c) {
    if (!c) return;
    for (int64_t k = 0; k < c->n_bufs; k++) vs_free(c->bufs[k]);
    vs_free(c->bufs);
    vs_free(c->rec);
    memset(c, 0, sizeof(*c));
}

/* Record r's rows into emb, feat (T, C), is_image and mask (T): text rows' embeddings from the target. */
static vs_status record_rows(const vs_msd_cache *c, int64_t r, const vs_lm *target, float *emb, float *feat,
                             uint8_t *is_image, float *mask, float *mid, vs_error *err) {
    const vs_msd_record *rec = &c->rec[r];
    const int C = c->width, T = rec->T;
    vs_dequantize_row(VS_TYPE_F16, rec->feat, feat, (int64_t)T * C);
    if (mid && rec->mid) vs_dequantize_row(VS_TYPE_F16, rec->mid, mid, (int64_t)T * C);
    int32_t ii = 0;
    for (int32_t t = 0; t < T; t++) {
        is_image[t] = rec->tokens[t] < 0;
        mask[t] = rec->mask[t] ? 1.0f : 0.0f;
        float *e = emb + (size_t)t * C;
        if (is_image[t]) vs_dequantize_row(VS_TYPE_F16, rec->img + (size_t)ii++ * C, e, C);
        else {
            vs_status st = vs_lm_embed(target, rec->tokens[t], e, err);
            if (st) return st;
        }
    }
    return VS_OK;
}

static vs_status check_record(const vs_msd_cache *c, int64_t r, const vs_lm *target, vs_error *err) {
    if (r < 0 || r >= c->n) return vs_error_set(err, VS_ERR_INVALID, "MSD feature cache: no record %lld", (long long)r);
    if (vs_lm_cfg(target)->n_embd != c->width)
        return vs_error_set(err, VS_ERR_INVALID, "MSD feature cache of width %d used with a target of width %d",
                            c->width, vs_lm_cfg(target)->n_embd);
    return VS_OK;
}

vs_status vs_msd_cache_sequence(const vs_msd_cache *c, int64_t r, const vs_lm *target, vs_msd_seq *out,
                                vs_error *err) {
    memset(out, 0, sizeof(*out));
    vs_status st = check_record(c, r, target, err);
    if (st) return st;
    if (!vs_msd_seq_alloc(out, c->rec[r].T, c->width))
        return vs_error_set(err, VS_ERR_NOMEM, "MSD feature cache: out of memory for %d rows", c->rec[r].T);
    if (c->rec[r].mid && !(out->mid = vs_malloc(sizeof(float) * (size_t)c->rec[r].T * c->width))) {
        vs_msd_seq_free(out);
        return vs_error_set(err, VS_ERR_NOMEM, "MSD feature cache: out of memory for %d rows", c->rec[r].T);
    }
    out->mid_layer = c->rec[r].mid_layer;
    if ((st = record_rows(c, r, target, out->emb, out->feat, out->is_image, out->mask, out->mid, err)))
        vs_msd_seq_free(out);
    return st;
}

vs_status vs_msd_batch_buf_init(vs_msd_batch_buf *b, int max_B, int max_T, int C, vs_error *err) {
    memset(b, 0, sizeof(*b));
    if (max_B < 1 || max_T < 2 || C < 1)
        return vs_error_set(err, VS_ERR_INVALID, "MSD batch: %d x %d rows of width %d", max_B, max_T, C);
    const size_t rows = (size_t)max_B * max_T, vals = rows * C;
    b->max_B = max_B, b->max_T = max_T, b->C = C;
    b->emb = vs_malloc(sizeof(float) * vals);
    b->feat = vs_malloc(sizeof(float) * vals);
    b->noise = vs_malloc(sizeof(float) * vals);
    b->mask = vs_malloc(sizeof(float) * rows);
    b->is_image = vs_malloc(rows);
    b->mid = vs_malloc(sizeof(float) * vals);
    if (!b->emb || !b->feat || !b->noise || !b->mask || !b->is_image || !b->mid) {
        vs_msd_batch_buf_free(b);
        return vs_error_set(err, VS_ERR_NOMEM, "MSD batch: no memory for %d x %d rows of width %d", max_B, max_T, C);
    }
    return VS_OK;
}

void vs_msd_batch_buf_free(vs_msd_batch_buf *b) {
    if (!b) return;
    vs_free(b->emb), vs_free(b->feat), vs_free(b->noise), vs_free(b->mask), vs_free(b->is_image), vs_free(b->mid);
    memset(b, 0, sizeof(*b));
}

vs_status vs_msd_cache_fill_batch(const vs_msd_cache *c, const vs_lm *target, const int64_t *idx, int B,
                                  float noise_std, vs_rng *rng, vs_msd_batch_buf *buf, vs_train_msd_batch *out,
                                  vs_error *err) {
    const int C = buf->C;
    if (B < 1 || B > buf->max_B || C != c->width)
        return vs_error_set(err, VS_ERR_INVALID, "MSD batch: %d sequences of width %d into buffers for %d of width %d", B,
                            c->width, buf->max_B, C);
    int T = 2;
    bool mid = true; /* intermediate targets when every record of the batch has them */
    for (int i = 0; i < B; i++) {
        vs_status st = check_record(c, idx[i], target, err);
        if (st) return st;
        T = VS_MAX(T, c->rec[idx[i]].T);
        mid = mid && c->rec[idx[i]].mid;
    }
    if (T > buf->max_T)
        return vs_error_set(err, VS_ERR_INVALID, "MSD batch: a record of %d rows, buffers for %d", T, buf->max_T);
    for (int i = 0; i < B; i++) {
        const size_t o = (size_t)i * T;
        const int32_t Ti = c->rec[idx[i]].T;
        vs_status st = record_rows(c, idx[i], target, buf->emb + o * C, buf->feat + o * C, buf->is_image + o,
                                   buf->mask + o, mid ? buf->mid + o * C : NULL, err);
        if (st) return st;
        const size_t pad = (size_t)(T - Ti); /* padding rows after the record: zero, never counted */
        memset(buf->emb + (o + Ti) * C, 0, sizeof(float) * pad * C);
        if (mid) memset(buf->mid + (o + Ti) * C, 0, sizeof(float) * pad * C);
        memset(buf->feat + (o + Ti) * C, 0, sizeof(float) * pad * C);
        memset(buf->mask + o + Ti, 0, sizeof(float) * pad);
        memset(buf->is_image + o + Ti, 0, pad);
        if (noise_std > 0 && rng) {
            const float amp = noise_std * 512.0f / (float)Ti;
            for (size_t j = 0; j < (size_t)Ti * C; j++) buf->noise[o * C + j] = (float)(vs_rng_uniform(rng) - 0.5) * amp;
            memset(buf->noise + (o + Ti) * C, 0, sizeof(float) * pad * C);
        }
    }
    *out = (vs_train_msd_batch){.B = B, .T = T, .emb = buf->emb, .is_image = buf->is_image, .feat = buf->feat,
                                .noise = noise_std > 0 && rng ? buf->noise : NULL, .mask = buf->mask,
                                .mid = mid ? buf->mid : NULL};
    return VS_OK;
}
