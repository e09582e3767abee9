/* image: decoding image files and turning them into a vision tower's input.
 * Owns: vs_image (8-bit RGB pixels), decoding PNG / JPEG / BMP / binary PPM-PGM through Debian's
 * stb_image (this module is the one place that compiles its implementation), the size checks made
 * BEFORE any pixel buffer is allocated, the two preprocessing recipes that make a square model input
 * (LLaVA's and llama.cpp's), normalisation to the float layout a ViT reads, and k x k average pooling
 * of a patch grid of feature rows (pooled drafting).
 *
 * Size limit (measurements: docs/vision.md): for a model whose input is S x S pixels, an image's width
 * and height must each be at most L = max(4096, 16 * S), capped at VS_IMAGE_MAX_DIM (vs_image_max_side);
 * without a model L = 4096. Both sides rather than a pixel count, because LLaVA's recipe pads to a
 * square of the longer side: the request then peaks at about 16 bytes per pixel of L x L in the worst
 * format (16-bit RGBA PNG; 264 MB at L = 4096, 454 MB at L = 5376 for S = 336). 4096 passes 4K frames
 * and 12-megapixel photos untouched; past 16 x the input side the resize keeps under 0.4% of the
 * pixels anyway. The limit is applied to the dimensions in the file's header, before anything is
 * decoded or allocated, and its error says both sizes.
 *
 * Errors name the input exactly once, first: "PATH: reason" (vs_image_load) or "NAME: reason".
 *
 * Preprocessing recipes (facts: docs/vision.md; docs/formats.md, 'Image preprocessing'):
 *   VS_PREPROC_LLAVA    LLaVA-1.5 + HF CLIPImageProcessor: pad to a square with the "mean colour"
 *                       (int(mean[c] * 255) per channel, image centred), resize to size x size with
 *                       Pillow's antialiased bicubic (two 8-bit passes, horizontal first), then
 *                       (v / 255 - mean) / std.
 *   VS_PREPROC_LLAMACPP llama.cpp's clip: fit inside size x size keeping the aspect ratio with its
 *                       plain 4-tap cubic interpolation, centre on a canvas of RGB (122, 116, 104),
 *                       then (v / 255 - mean) / std. */
#ifndef VS_IMAGE_H
#define VS_IMAGE_H

#include "common.h"

/* Largest width or height any limit may allow (vs_image_decode_max clamps to it). */
#define VS_IMAGE_MAX_DIM 16384
/* Largest width or height accepted when no model size is known (vs_image_decode, vs_image_load). */
#define VS_IMAGE_DEFAULT_MAX_SIDE 4096

typedef struct vs_image {
    int32_t w, h; /* pixels */
    uint8_t *rgb; /* (h, w, 3) row-major RGB, vs_malloc'ed, owned */
} vs_image;

/* The largest width or height accepted for a model whose input is model_size x model_size:
 * max(VS_IMAGE_DEFAULT_MAX_SIDE, 16 * model_size), at most VS_IMAGE_MAX_DIM (model_size <= 0: the
 * default). */
int32_t vs_image_max_side(int32_t model_size);
/* Decodes PNG, JPEG, BMP or binary PPM/PGM (P5/P6) bytes into RGB (alpha is dropped, grey is
 * replicated). `name` starts every error message. Refuses zero-sized or corrupt data, palette PNGs
 * whose pixels index past their PLTE (or whose tRNS is longer than it), and images wider or taller
 * than VS_IMAGE_DEFAULT_MAX_SIDE, before allocating pixels. On failure *img is zeroed. */
vs_status vs_image_decode(vs_image *img, const uint8_t *data, size_t size, const char *name, vs_error *err);
/* Same with a caller-chosen side limit (1 <= max_dim <= VS_IMAGE_MAX_DIM, anything else means
 * VS_IMAGE_MAX_DIM); fuzzing uses a small one to keep each input fast. */
vs_status vs_image_decode_max(vs_image *img, const uint8_t *data, size_t size, const char *name,
                              int32_t max_dim, vs_error *err);
/* Reads and decodes a file (limit VS_IMAGE_DEFAULT_MAX_SIDE); errors start with the path. */
vs_status vs_image_load(vs_image *img, const char *path, vs_error *err);
/* Same with a caller-chosen side limit, as vs_image_decode_max; the vision tower passes
 * vs_image_max_side(its image_size). */
vs_status vs_image_load_max(vs_image *img, const char *path, int32_t max_dim, vs_error *err);
/* Allocates a w x h image filled with one colour. */
vs_status vs_image_alloc(vs_image *img, int32_t w, int32_t h, const uint8_t fill[3], vs_error *err);
void vs_image_free(vs_image *img);

typedef enum vs_preproc_mode {
    VS_PREPROC_LLAVA = 0,    /* HF / LLaVA semantics (default) */
    VS_PREPROC_LLAMACPP = 1, /* llama.cpp's clip preprocessing */
} vs_preproc_mode;

typedef struct vs_preproc {
    int32_t size;          /* side of the square model input (clip.vision.image_size) */
    float mean[3], std[3]; /* clip.vision.image_mean / image_std */
    vs_preproc_mode mode;
} vs_preproc;

/* The square size x size 8-bit image the recipe produces before normalisation (out is allocated). */
vs_status vs_image_to_square(const vs_image *img, const vs_preproc *p, vs_image *out, vs_error *err);
/* out (3, h, w) channel-major floats = (v / 255 - mean[c]) / std[c]. */
void vs_image_normalize(const vs_image *img, const float mean[3], const float std[3], float *out);
/* Both steps: out (3, size, size) channel-major floats, caller-allocated. */
vs_status vs_image_preprocess(const vs_image *img, const vs_preproc *p, float *out, vs_error *err);

/* Resamplers (exposed for tests and the data generator). Both allocate out (out_w x out_h). */
/* Pillow-compatible antialiased bicubic (a = -0.5, support widened by the downscale factor, 22-bit
 * fixed-point taps, horizontal pass then vertical pass, 8-bit rounding after each). */
vs_status vs_image_resize_bicubic_pil(const vs_image *img, int32_t out_w, int32_t out_h, vs_image *out,
                                      vs_error *err);
/* llama.cpp's cubic interpolation: source x = j * (w / out_w), 4 taps (x-1 .. x+2, clamped) of the
 * cubic through those samples, rows first, rounded and clamped once. No antialiasing. */
vs_status vs_image_resize_cubic_llamacpp(const vs_image *img, int32_t out_w, int32_t out_h, vs_image *out,
                                         vs_error *err);

/* k x k average pooling of a patch grid of feature rows.
 * in (gh * gw, d): row r * gw + c is patch (r, c). out (ceil(gh/k) * ceil(gw/k), d): each output
 * cell is the mean of the input cells its window covers; windows at the right / bottom edge that
 * stick out average only the cells inside the grid (PyTorch avg_pool2d, ceil_mode, no padding).
 * k = 1 copies. Returns the output grid size in *ogh, *ogw. */
void vs_pool_grid_avg(const float *in, int32_t gh, int32_t gw, int64_t d, int32_t k, float *out, int32_t *ogh,
                      int32_t *ogw);
/* Output side of vs_pool_grid_avg for one dimension. */
static inline int32_t vs_pool_out_side(int32_t g, int32_t k) { return (g + k - 1) / k; }

#endif
