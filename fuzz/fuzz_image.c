/* Fuzz target for image decoding and preprocessing: any bytes must decode or fail cleanly (never
 * crash, never read past the input); a decoded image goes through both preprocessing recipes at a
 * tiny model size and its normalised pixels must be finite; a grid pooling of them must stay within
 * their range. The decode limit is small (64 px) so each input stays well under a millisecond. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "image.h"

#define FUZZ_MAX_DIM 64
#define FUZZ_SIZE 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    vs_image img;
    vs_error err = {0};
    if (vs_image_decode_max(&img, data, size, "fuzz", FUZZ_MAX_DIM, &err) != VS_OK) {
        if (img.rgb || !err.msg[0]) abort(); /* failure must leave no pixels and say why */
        return 0;
    }
    if (img.w < 1 || img.h < 1 || img.w > FUZZ_MAX_DIM || img.h > FUZZ_MAX_DIM) abort();
    float px[3 * FUZZ_SIZE * FUZZ_SIZE];
    vs_preproc p = {.size = FUZZ_SIZE,
                    .mean = {0.48145466f, 0.4578275f, 0.40821073f},
                    .std = {0.26862954f, 0.26130258f, 0.27577711f}};
    for (int mode = 0; mode < 2; mode++) {
        p.mode = (vs_preproc_mode)mode;
        if (vs_image_preprocess(&img, &p, px, &err) != VS_OK) abort(); /* a decoded image always works */
        float lo = INFINITY, hi = -INFINITY;
        for (size_t i = 0; i < VS_ARRAY_LEN(px); i++) {
            if (!isfinite(px[i])) abort();
            lo = fminf(lo, px[i]);
            hi = fmaxf(hi, px[i]);
        }
        /* pool the first channel as an 8 x 8 grid of 1-d rows, 3 x 3 windows */
        float pooled[9];
        int32_t oh, ow;
        vs_pool_grid_avg(px, FUZZ_SIZE, FUZZ_SIZE, 1, 3, pooled, &oh, &ow);
        if (oh != 3 || ow != 3) abort();
        for (int i = 0; i < 9; i++)
            if (!(pooled[i] >= lo - 1e-4f && pooled[i] <= hi + 1e-4f)) abort();
    }
    vs_image_free(&img);
    return 0;
}
