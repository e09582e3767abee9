/* fuzz_msd_cache: the MSD feature cache's shard parser, vs_msd_shard_parse (msd_cache.c), which
 * `vs_msd_cache_count` and `vs_msd_cache_load` run on every shard file of a cache directory. The input is
 * one shard's bytes; the width is read from its header (bytes 8..11) when that is a small even number,
 * else 8, so mutations of both the header and the records reach the parser.
 *
 * Checked properties (abort on violation):
 *   - counting and filling agree on the number of records;
 *   - every record lies inside the input: T >= 2, its tokens, mask, features, image rows and intermediate
 *     targets (when flagged, with a layer >= 1) are read in full here (ASan reports any byte outside), and
 *     its image-row count equals the tokens marked -1;
 *   - the records tile the input: the bytes they span plus the 16-byte header equal the size. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msd_cache.h"

static void check(int cond, const char *what) {
    if (!cond) {
        fprintf(stderr, "fuzz_msd_cache: property violated: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = malloc(size ? size : 1); /* the parser wants 4-byte alignment, as files read by malloc */
    if (!buf) return 0;
    memcpy(buf, data, size);
    uint32_t w = 8;
    if (size >= 12) memcpy(&w, buf + 8, 4);
    const int C = w >= 2 && w <= 64 && w % 2 == 0 ? (int)w : 8;
    const int64_t n = vs_msd_shard_parse(buf, size, C, NULL);
    if (n >= 0) {
        vs_msd_record *rec = calloc((size_t)n + 1, sizeof(vs_msd_record));
        check(rec != NULL, "allocation");
        check(vs_msd_shard_parse(buf, size, C, rec) == n, "count and fill disagree");
        size_t spanned = 16;
        volatile uint64_t sink = 0;
        for (int64_t i = 0; i < n; i++) {
            const vs_msd_record *r = &rec[i];
            check(r->T >= 2 && r->n_img_rows >= 0 && r->n_img_rows <= r->T, "record sizes");
            int32_t imgs = 0;
            for (int32_t t = 0; t < r->T; t++) imgs += r->tokens[t] < 0, sink += r->mask[t];
            check(imgs == r->n_img_rows, "image rows = tokens marked -1");
            for (size_t j = 0; j < (size_t)r->T * C; j++) sink += r->feat[j];
            for (size_t j = 0; j < (size_t)r->n_img_rows * C; j++) sink += r->img[j];
            check(!r->mid == (r->mid_layer < 0) && (!r->mid || r->mid_layer >= 1), "intermediate layer");
            if (r->mid)
                for (size_t j = 0; j < (size_t)r->T * C; j++) sink += r->mid[j];
            spanned += 24 + (size_t)r->T * 4 + (((size_t)r->T + 3) & ~(size_t)3) +
                       (size_t)r->T * C * 2 * (r->mid ? 2 : 1) + (size_t)r->n_img_rows * C * 2;
        }
        check(spanned == size, "records tile the input");
        free(rec);
    }
    free(buf);
    return 0;
}
