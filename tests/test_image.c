/* test_image: decoding (every format, every truncation, corrupt and enormous headers), the two
 * preprocessing recipes' geometry, the resamplers' invariants, normalisation and grid pooling.
 * Bit-exactness of the LLaVA recipe against Pillow is checked by test_vision (reference fixtures). */
#include <string.h>

#include "image.h"
#include "testutil.h"

#define FIX "tests/reference/fixtures/vision/"

static uint8_t *read_all(const char *path, size_t *n) {
    uint8_t *d = NULL;
    vs_error err = {0};
    VT_REQUIRE(vs_read_file(path, &d, n, &err) == VS_OK, "%s", err.msg);
    return d;
}

static bool same_image(const vs_image *a, const vs_image *b) {
    return a->w == b->w && a->h == b->h && !memcmp(a->rgb, b->rgb, (size_t)a->w * a->h * 3);
}

static void test_formats(void) {
    vs_error err = {0};
    vs_image png, bmp, ppm, gpng, gpgm;
    VT_REQUIRE(vs_image_load(&png, FIX "img_a.png", &err) == VS_OK, "%s", err.msg);
    VT_CHECK(png.w == 23 && png.h == 17, "png %dx%d", png.w, png.h);
    VT_REQUIRE(vs_image_load(&bmp, FIX "img_a.bmp", &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_image_load(&ppm, FIX "img_a.ppm", &err) == VS_OK, "%s", err.msg);
    VT_CHECK(same_image(&png, &bmp), "BMP decodes to the PNG's pixels");
    VT_CHECK(same_image(&png, &ppm), "PPM decodes to the PNG's pixels");
    VT_REQUIRE(vs_image_load(&gpng, FIX "img_a_grey.png", &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_image_load(&gpgm, FIX "img_a_grey.pgm", &err) == VS_OK, "%s", err.msg);
    VT_CHECK(same_image(&gpng, &gpgm), "grey PNG == grey PGM");
    bool grey = true;
    for (int i = 0; i < gpng.w * gpng.h; i++)
        grey &= gpng.rgb[3 * i] == gpng.rgb[3 * i + 1] && gpng.rgb[3 * i] == gpng.rgb[3 * i + 2];
    VT_CHECK(grey, "grey images are replicated to R = G = B");
    vs_image jpg;
    VT_REQUIRE(vs_image_load(&jpg, FIX "img_b.jpg", &err) == VS_OK, "%s", err.msg);
    VT_CHECK(jpg.w == 47 && jpg.h == 35, "jpg %dx%d", jpg.w, jpg.h);
    /* seeds of the fuzz corpus decode too (RGBA, progressive JPEG) */
    const char *seeds[] = {"seed.png", "seed.bmp",      "seed.ppm",     "seed.pgm",
                           "seed.jpg", "seed_prog.jpg", "seed_rgba.png"};
    for (size_t i = 0; i < VS_ARRAY_LEN(seeds); i++) {
        char p[256];
        snprintf(p, sizeof(p), "fuzz/corpus/fuzz_image/%s", seeds[i]);
        vs_image s;
        VT_CHECK(vs_image_load(&s, p, &err) == VS_OK, "%s: %s", p, err.msg);
        vs_image_free(&s);
    }
    vs_image_free(&png);
    vs_image_free(&bmp);
    vs_image_free(&ppm);
    vs_image_free(&gpng);
    vs_image_free(&gpgm);
    vs_image_free(&jpg);
}

/* Every proper prefix of a valid file must be refused (never decoded from garbage, never a crash). */
static void test_truncations(const char *path) {
    size_t n;
    uint8_t *d = read_all(path, &n);
    int accepted = 0;
    for (size_t len = 0; len < n; len++) {
        uint8_t *copy = vs_malloc(len ? len : 1); /* exact-size buffer so ASan sees over-reads */
        memcpy(copy, d, len);
        vs_image img;
        vs_error err = {0};
        vs_status st = vs_image_decode(&img, copy, len, "trunc", &err);
        if (st == VS_OK) {
            accepted++;
            vs_image_free(&img);
        } else {
            VT_CHECK(img.rgb == NULL && err.msg[0] && strstr(err.msg, "trunc"), "error names the input: %s",
                     err.msg);
        }
        vs_free(copy);
    }
    VT_CHECK(accepted == 0, "%s: %d truncated prefixes were decoded", path, accepted);
    vs_free(d);
}

static void expect_fail(const uint8_t *d, size_t n, vs_status want, const char *substr, const char *what) {
    vs_image img;
    vs_error err = {0};
    vs_status st = vs_image_decode(&img, d, n, "bad.img", &err);
    VT_CHECK(st == want, "%s: status %s (want %s): %s", what, vs_status_name(st), vs_status_name(want),
             err.msg);
    VT_CHECK(strstr(err.msg, "bad.img") != NULL, "%s: message names the input: %s", what, err.msg);
    if (substr)
        VT_CHECK(strstr(err.msg, substr) != NULL, "%s: message '%s' lacks '%s'", what, err.msg, substr);
    VT_CHECK(img.rgb == NULL, "%s: no pixels on failure", what);
    if (st == VS_OK) vs_image_free(&img);
}

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}
static void put_le32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}

static void test_bad_inputs(void) {
    expect_fail((const uint8_t *)"", 0, VS_ERR_FORMAT, "empty", "empty");
    const uint8_t junk[] = "this is not an image at all, just text";
    expect_fail(junk, sizeof(junk), VS_ERR_FORMAT, "not a PNG", "text");

    /* enormous dimensions in each format: refused from the header (VS_ERR_RANGE), nothing allocated */
    uint8_t png[8 + 25 + 12] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
    put_be32(png + 8, 13);
    memcpy(png + 12, "IHDR", 4);
    put_be32(png + 16, 20000);
    put_be32(png + 20, 20000);
    png[24] = 8, png[25] = 2; /* 8-bit RGB */
    put_be32(png + 33, 0);
    memcpy(png + 37, "IEND", 4);
    expect_fail(png, sizeof(png), VS_ERR_RANGE, "larger than the limit", "20000^2 PNG");
    put_be32(png + 16, 0); /* zero width */
    expect_fail(png, sizeof(png), VS_ERR_FORMAT, NULL, "0-wide PNG");

    const char ppm_big[] = "P6\n20000 20000\n255\n";
    expect_fail((const uint8_t *)ppm_big, strlen(ppm_big), VS_ERR_RANGE, "larger than the limit",
                "20000^2 PPM");
    const char ppm_zero[] = "P6\n0 5\n255\n";
    expect_fail((const uint8_t *)ppm_zero, strlen(ppm_zero), VS_ERR_FORMAT, "zero-sized", "0-wide PPM");
    const char pgm16[] = "P5\n2 2\n65535\n01234567";
    expect_fail((const uint8_t *)pgm16, strlen(pgm16), VS_ERR_UNSUPPORTED, "16-bit", "16-bit PGM");
    const char pnm_nospace[] = "P51 9 255\n123456789";
    expect_fail((const uint8_t *)pnm_nospace, strlen(pnm_nospace), VS_ERR_FORMAT, "whitespace",
                "P5 glued to width");
    const char ppm_short[] = "P6\n4 4\n255\nabc";
    expect_fail((const uint8_t *)ppm_short, strlen(ppm_short), VS_ERR_FORMAT, "truncated", "short PPM");

    uint8_t bmp[54] = {'B', 'M'};
    put_le32(bmp + 10, 54);
    put_le32(bmp + 14, 40);
    put_le32(bmp + 18, 30000);
    put_le32(bmp + 22, 30000);
    bmp[26] = 1, bmp[28] = 24;
    expect_fail(bmp, sizeof(bmp), VS_ERR_RANGE, "larger than the limit", "30000^2 BMP");
    put_le32(bmp + 18, 8);
    put_le32(bmp + 22, 8);
    expect_fail(bmp, sizeof(bmp), VS_ERR_FORMAT, "truncated", "BMP without pixels");

    /* JPEG: SOI, SOF0 claiming 20000 x 20000, EOI */
    const uint8_t jpg[] = {0xFF, 0xD8, 0xFF, 0xC0, 0x00, 0x11, 8, 0x4E, 0x20, 0x4E, 0x20, 3,
                           1,    0x11, 0,    2,    0x11, 0,    3, 0x11, 0,    0xFF, 0xD9};
    expect_fail(jpg, sizeof(jpg), VS_ERR_RANGE, "larger than the limit", "20000^2 JPEG");

    /* corrupt bytes inside valid containers */
    size_t n;
    uint8_t *d = read_all(FIX "img_a.png", &n);
    /* scramble the compressed data of the IDAT chunk (chunk lengths stay intact) */
    for (size_t pos = 8; pos + 12 <= n;) {
        uint32_t len = ((uint32_t)d[pos] << 24) | ((uint32_t)d[pos + 1] << 16) | ((uint32_t)d[pos + 2] << 8) |
                       d[pos + 3];
        if (!memcmp(d + pos + 4, "IDAT", 4))
            for (uint32_t i = 2; i < len; i++)
                d[pos + 8 + i] ^= 0x5A;
        pos += 12 + len;
    }
    expect_fail(d, n, VS_ERR_FORMAT, "corrupt", "scrambled PNG");
    vs_free(d);

    /* a Huffman table declaring more than 256 symbols (stb_image would overrun its arrays) */
    d = read_all(FIX "img_b.jpg", &n);
    bool patched = false;
    for (size_t i = 2; i + 21 < n && !patched; i++)
        if (d[i] == 0xFF && d[i + 1] == 0xC4) {
            for (int k = 0; k < 16; k++)
                d[i + 5 + k] = 200; /* 16 x 200 code counts */
            patched = true;
        }
    VT_REQUIRE(patched, "img_b.jpg has a DHT segment");
    expect_fail(d, n, VS_ERR_FORMAT, "Huffman", "DHT with 3200 symbols");
    vs_free(d);

    /* a scan selecting Huffman tables no DHT defined (stb would decode with uninitialised tables) */
    d = read_all(FIX "img_b.jpg", &n);
    patched = false;
    for (size_t i = 2; i + 6 < n && !patched; i++)
        if (d[i] == 0xFF && d[i + 1] == 0xDA) {
            d[i + 6] = 0x33; /* first component: DC table 3, AC table 3 */
            patched = true;
        }
    VT_REQUIRE(patched, "img_b.jpg has an SOS segment");
    expect_fail(d, n, VS_ERR_FORMAT, "undefined Huffman", "scan with undefined tables");
    vs_free(d);
    d = read_all("fuzz/corpus/fuzz_image/undefined_huffman.jpg", &n);
    expect_fail(d, n, VS_ERR_FORMAT, "undefined Huffman", "fuzzer's progressive JPEG");
    vs_free(d);
    d = read_all("fuzz/corpus/fuzz_image/pnm16_overread.pgm", &n);
    expect_fail(d, n, VS_ERR_FORMAT, "whitespace", "fuzzer's 16-bit PGM");
    vs_free(d);

    /* caller-chosen limit */
    d = read_all(FIX "img_a.png", &n);
    vs_image img;
    vs_error err = {0};
    VT_CHECK(vs_image_decode_max(&img, d, n, "small-limit", 16, &err) == VS_ERR_RANGE,
             "limit 16 refuses 23x17");
    VT_CHECK(vs_image_decode_max(&img, d, n, "small-limit", 23, &err) == VS_OK, "limit 23 accepts 23x17: %s",
             err.msg);
    vs_image_free(&img);
    vs_free(d);

    VT_CHECK(vs_image_load(&img, "no/such/file.png", &err) == VS_ERR_IO, "missing file: %s", err.msg);
    VT_CHECK(strstr(err.msg, "no/such/file.png") != NULL, "message names the path: %s", err.msg);
}

static void fill_pattern(vs_image *im) {
    for (int y = 0; y < im->h; y++)
        for (int x = 0; x < im->w; x++)
            for (int c = 0; c < 3; c++)
                im->rgb[(y * im->w + x) * 3 + c] = (uint8_t)((x * 37 + y * 11 + c * 80) & 255);
}

static void test_resize(void) {
    vs_error err = {0};
    const uint8_t col[3] = {10, 200, 77};
    vs_image a, out;
    VT_REQUIRE(vs_image_alloc(&a, 13, 9, col, &err) == VS_OK, "%s", err.msg);
    fill_pattern(&a);
    /* same size: identity for both resamplers */
    VT_REQUIRE(vs_image_resize_bicubic_pil(&a, 13, 9, &out, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(same_image(&a, &out), "PIL resize to the same size is the identity");
    vs_image_free(&out);
    VT_REQUIRE(vs_image_resize_cubic_llamacpp(&a, 13, 9, &out, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(same_image(&a, &out), "llama.cpp cubic to the same size is the identity");
    vs_image_free(&out);
    vs_image_free(&a);
    /* constant images stay constant (taps sum to one) at any scale */
    VT_REQUIRE(vs_image_alloc(&a, 31, 7, col, &err) == VS_OK, "%s", err.msg);
    const int sizes[][2] = {{5, 3}, {64, 40}, {31, 50}, {1, 1}, {200, 9}};
    for (size_t i = 0; i < VS_ARRAY_LEN(sizes); i++) {
        for (int which = 0; which < 2; which++) {
            vs_status st = which ? vs_image_resize_cubic_llamacpp(&a, sizes[i][0], sizes[i][1], &out, &err)
                                 : vs_image_resize_bicubic_pil(&a, sizes[i][0], sizes[i][1], &out, &err);
            VT_REQUIRE(st == VS_OK, "%s", err.msg);
            bool ok = out.w == sizes[i][0] && out.h == sizes[i][1];
            for (int p = 0; ok && p < out.w * out.h; p++)
                ok = !memcmp(out.rgb + 3 * p, col, 3);
            VT_CHECK(ok, "%s resize of a constant image to %dx%d stays constant", which ? "llama.cpp" : "PIL",
                     sizes[i][0], sizes[i][1]);
            vs_image_free(&out);
        }
    }
    vs_image_free(&a);
    /* a single pixel upscales to a constant */
    VT_REQUIRE(vs_image_alloc(&a, 1, 1, col, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_image_resize_bicubic_pil(&a, 6, 6, &out, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(!memcmp(out.rgb + 3 * 35, col, 3), "1x1 -> 6x6");
    vs_image_free(&out);
    vs_image_free(&a);
    /* PIL downscale by an integer factor 2 of a 2-periodic column pattern: every output column is
     * the same average (antialiasing), unlike point sampling */
    VT_REQUIRE(vs_image_alloc(&a, 16, 4, col, &err) == VS_OK, "%s", err.msg);
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 16; x++)
            memset(a.rgb + (y * 16 + x) * 3, x % 2 ? 200 : 0, 3);
    VT_REQUIRE(vs_image_resize_bicubic_pil(&a, 8, 4, &out, &err) == VS_OK, "%s", err.msg);
    int lo = 255, hi = 0;
    for (int x = 1; x < 7; x++)
        lo = VS_MIN(lo, out.rgb[x * 3]), hi = VS_MAX(hi, out.rgb[x * 3]);
    VT_CHECK(hi - lo <= 2 && lo >= 95 && hi <= 105, "antialiased downscale averages the stripes: %d..%d", lo,
             hi);
    vs_image_free(&out);
    vs_image_free(&a);
}

static void test_recipes(void) {
    vs_error err = {0};
    const uint8_t col[3] = {1, 2, 3};
    vs_preproc p = {.size = 4,
                    .mean = {0.48145466f, 0.4578275f, 0.40821073f},
                    .std = {0.26862954f, 0.26130258f, 0.27577711f},
                    .mode = VS_PREPROC_LLAVA};
    /* LLaVA: 4 x 2 -> padded to 4 x 4 with int(mean * 255) = (122, 116, 104), image in rows 1..2 */
    vs_image a, sq;
    VT_REQUIRE(vs_image_alloc(&a, 4, 2, col, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_image_to_square(&a, &p, &sq, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(sq.w == 4 && sq.h == 4, "square size");
    const uint8_t bg[3] = {122, 116, 104};
    bool ok = true;
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 4; x++)
            ok &= !memcmp(sq.rgb + (y * 4 + x) * 3, (y == 1 || y == 2) ? col : bg, 3);
    VT_CHECK(ok, "LLaVA expand2square: centred rows, mean-colour background");
    vs_image_free(&sq);
    vs_image_free(&a);
    /* portrait 1 x 3 -> 3 x 3 with the image in column 1 (offset (3-1)/2) */
    p.size = 3;
    VT_REQUIRE(vs_image_alloc(&a, 1, 3, col, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_image_to_square(&a, &p, &sq, &err) == VS_OK, "%s", err.msg);
    ok = true;
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 3; x++)
            ok &= !memcmp(sq.rgb + (y * 3 + x) * 3, x == 1 ? col : bg, 3);
    VT_CHECK(ok, "LLaVA expand2square: portrait image centred horizontally");
    vs_image_free(&sq);
    vs_image_free(&a);

    /* llama.cpp: fit 8 x 4 into 8 x 8 -> 8 x 4 resized (identity), centred at rows 2..5 on (122,116,104) */
    p.mode = VS_PREPROC_LLAMACPP;
    p.size = 8;
    const uint8_t col2[3] = {250, 0, 9};
    VT_REQUIRE(vs_image_alloc(&a, 8, 4, col2, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_image_to_square(&a, &p, &sq, &err) == VS_OK, "%s", err.msg);
    ok = sq.w == 8 && sq.h == 8;
    for (int y = 0; ok && y < 8; y++)
        for (int x = 0; x < 8; x++)
            ok &= !memcmp(sq.rgb + (y * 8 + x) * 3, (y >= 2 && y < 6) ? col2 : bg, 3);
    VT_CHECK(ok, "llama.cpp fit-and-pad geometry");
    vs_image_free(&sq);
    vs_image_free(&a);
    /* llama.cpp: 3 x 9 into 6: scale 6/9 -> new size ceil(3 * 0.667) = 2 x 6, pad_x = 2 */
    VT_REQUIRE(vs_image_alloc(&a, 3, 9, col2, &err) == VS_OK, "%s", err.msg);
    p.size = 6;
    VT_REQUIRE(vs_image_to_square(&a, &p, &sq, &err) == VS_OK, "%s", err.msg);
    ok = true;
    for (int y = 0; y < 6; y++)
        for (int x = 0; x < 6; x++)
            ok &= !memcmp(sq.rgb + (y * 6 + x) * 3, (x >= 2 && x < 4) ? col2 : bg, 3);
    VT_CHECK(ok, "llama.cpp fit-and-pad geometry (portrait, downscaled)");
    vs_image_free(&sq);

    /* normalisation: (v / 255 - mean) / std of the square image, channel-major */
    float out[3 * 6 * 6];
    p.mode = VS_PREPROC_LLAVA;
    VT_REQUIRE(vs_image_preprocess(&a, &p, out, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_image_to_square(&a, &p, &sq, &err) == VS_OK, "%s", err.msg);
    double worst = 0;
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 36; i++)
            worst = fmax(worst, fabs(out[c * 36 + i] - (sq.rgb[3 * i + c] / 255.0 - p.mean[c]) / p.std[c]));
    VT_CHECK(worst < 1e-5, "normalised values, channel-major: worst %g", worst);
    vs_image_free(&sq);
    p.std[1] = 0.0f;
    VT_CHECK(vs_image_preprocess(&a, &p, out, &err) == VS_ERR_INVALID, "zero std refused");
    vs_image_free(&a);
    vs_image empty = {0};
    p.std[1] = 0.5f;
    VT_CHECK(vs_image_preprocess(&empty, &p, out, &err) == VS_ERR_INVALID, "empty image refused");
}

static void test_pool(void) {
    /* 5 x 5 grid of 2-d rows, value (r * 5 + c, -(r * 5 + c)) */
    float in[25 * 2], out[9 * 2];
    for (int i = 0; i < 25; i++)
        in[2 * i] = (float)i, in[2 * i + 1] = -(float)i;
    int32_t oh, ow;
    vs_pool_grid_avg(in, 5, 5, 2, 2, out, &oh, &ow);
    VT_CHECK(oh == 3 && ow == 3, "5x5 pooled by 2 -> 3x3 (ceil)");
    VT_CHECK_NEAR(out[0], (0 + 1 + 5 + 6) / 4.0, 1e-6, "full window");
    VT_CHECK_NEAR(out[2 * 2], (4 + 9) / 2.0, 1e-6, "right edge window averages 2 cells");
    VT_CHECK_NEAR(out[2 * 6], (20 + 21) / 2.0, 1e-6, "bottom edge window");
    VT_CHECK_NEAR(out[2 * 8], 24.0, 1e-6, "corner window of 1 cell");
    VT_CHECK_NEAR(out[2 * 8 + 1], -24.0, 1e-6, "second channel");
    float one[2];
    vs_pool_grid_avg(in, 5, 5, 2, 7, one, &oh, &ow);
    VT_CHECK(oh == 1 && ow == 1 && fabsf(one[0] - 12.0f) < 1e-5f, "k > grid: the mean of all");
    float cp[50];
    vs_pool_grid_avg(in, 5, 5, 2, 1, cp, &oh, &ow);
    VT_CHECK(oh == 5 && vt_max_abs_diff(cp, in, 50) == 0.0, "k = 1 copies");
    /* non-square grid 2 x 3, k 2 */
    float in2[6] = {1, 2, 3, 4, 5, 6}, o2[2];
    vs_pool_grid_avg(in2, 2, 3, 1, 2, o2, &oh, &ow);
    VT_CHECK(oh == 1 && ow == 2 && o2[0] == 3.0f && o2[1] == 4.5f, "2x3 grid: %g %g", o2[0], o2[1]);
}

int main(void) {
    test_formats();
    test_truncations(FIX "img_a.png");
    test_truncations(FIX "img_b.jpg");
    test_truncations(FIX "img_a.bmp");
    test_truncations(FIX "img_a.ppm");
    test_truncations(FIX "img_a_grey.pgm");
    test_truncations("fuzz/corpus/fuzz_image/seed_prog.jpg");
    test_bad_inputs();
    test_resize();
    test_recipes();
    test_pool();
    return vt_finish("image");
}
