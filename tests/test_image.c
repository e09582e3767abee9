/* test_image: decoding (every format, every truncation, corrupt and enormous headers), the two
 * preprocessing recipes' geometry, the resamplers' invariants, normalisation and grid pooling.
 * Bit-exactness of the LLaVA recipe against Pillow is checked by test_vision (reference fixtures). */
#include <string.h>

#include "image.h"
#include "testutil.h"
#include "vision.h"

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

/* ------------------------------------------------------------------------------------------------
 * PNG files built here, byte by byte: chunks with real CRCs, image data in zlib stored blocks (no
 * compression) with a real Adler-32, scanlines filtered forward with the filter types the test picks. */

typedef struct bytes {
    uint8_t *p;
    size_t n, cap;
} bytes;

static void put(bytes *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = vs_realloc(b->p, b->cap);
        VT_REQUIRE(b->p != NULL, "out of memory");
    }
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void put_u32be(bytes *b, uint32_t v) {
    uint8_t q[4];
    put_be32(q, v);
    put(b, q, 4);
}

static uint32_t crc32_png(const uint8_t *p, size_t n) { /* ISO 3309 / PNG, reflected 0xEDB88320 */
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return c ^ 0xFFFFFFFFu;
}

static void png_chunk(bytes *b, const char *type, const uint8_t *data, size_t n) {
    put_u32be(b, (uint32_t)n);
    const size_t at = b->n;
    put(b, type, 4);
    put(b, data, n);
    put_u32be(b, crc32_png(b->p + at, n + 4));
}

/* zlib stream of raw: header 78 01, stored blocks of at most 65535 bytes, Adler-32 (big-endian). */
static void zlib_stored(bytes *z, const uint8_t *raw, size_t n) {
    static const uint8_t hdr[2] = {0x78, 0x01};
    put(z, hdr, 2);
    size_t pos = 0;
    do {
        const size_t len = VS_MIN(n - pos, (size_t)65535);
        const uint8_t bh[5] = {pos + len == n, (uint8_t)len, (uint8_t)(len >> 8), (uint8_t)~len,
                               (uint8_t)(~len >> 8)};
        put(z, bh, 5);
        put(z, raw + pos, len);
        pos += len;
    } while (pos < n);
    uint32_t a = 1, s2 = 0;
    for (size_t i = 0; i < n; i++) {
        a = (a + raw[i]) % 65521;
        s2 = (s2 + a) % 65521;
    }
    put_u32be(z, (s2 << 16) | a);
}

typedef struct png_spec {
    int w, h, depth, color, interlace;
    const uint8_t *plte; /* (n_plte, 3) */
    int n_plte;
    int n_plte2;        /* > 0: a second PLTE chunk of that many entries follows the first */
    const uint8_t *trns; /* (n_trns) alpha values, after the PLTE */
    int n_trns;
} png_spec;

/* A PNG of the spec whose IDAT holds `raw` (filtered scanlines, filter bytes included); raw NULL: no
 * IDAT chunk at all (a header-only file). Returns a vs_malloc'ed buffer of *n bytes. */
static uint8_t *make_png(const png_spec *s, const uint8_t *raw, size_t raw_n, size_t *n) {
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
    bytes b = {0}, z = {0};
    put(&b, sig, 8);
    uint8_t ihdr[13] = {0};
    put_be32(ihdr, (uint32_t)s->w);
    put_be32(ihdr + 4, (uint32_t)s->h);
    ihdr[8] = (uint8_t)s->depth, ihdr[9] = (uint8_t)s->color, ihdr[12] = (uint8_t)s->interlace;
    png_chunk(&b, "IHDR", ihdr, 13);
    if (s->n_plte) png_chunk(&b, "PLTE", s->plte, (size_t)s->n_plte * 3);
    if (s->n_plte2) png_chunk(&b, "PLTE", s->plte, (size_t)s->n_plte2 * 3);
    if (s->n_trns) png_chunk(&b, "tRNS", s->trns, (size_t)s->n_trns);
    if (raw) {
        zlib_stored(&z, raw, raw_n);
        png_chunk(&b, "IDAT", z.p, z.n);
    }
    png_chunk(&b, "IEND", NULL, 0);
    vs_free(z.p);
    *n = b.n;
    return b.p;
}

static int paeth(int a, int b, int c) {
    const int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

/* Filtered scanlines of a one-channel image of `depth` bits (1..8) per pixel: v (h, w) row-major,
 * packed from the high bit; with adam7 the seven interlace passes in order. Scanline number k (over
 * all passes) uses filter filters[k % nf], applied forward (the decoder undoes it). pad sets the
 * unused low bits of each row's last byte (decoders ignore them). Returns the bytes written to out. */
static size_t scanlines(const uint8_t *v, int w, int h, int depth, bool adam7, const int *filters, int nf,
                        uint8_t pad, uint8_t *out) {
    static const int a7[7][4] = {{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4},
                                 {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}};
    static const int one[1][4] = {{0, 0, 1, 1}};
    size_t n = 0;
    int k = 0;
    for (int p = 0; p < (adam7 ? 7 : 1); p++) {
        const int *g = adam7 ? a7[p] : one[0];
        const int pw = (w - g[0] + g[2] - 1) / g[2], ph = (h - g[1] + g[3] - 1) / g[3];
        if (pw <= 0 || ph <= 0) continue;
        const int rb = (pw * depth + 7) / 8;
        uint8_t prev[64] = {0}, cur[64];
        VT_REQUIRE(rb <= 64, "test rows are short");
        for (int j = 0; j < ph; j++, k++) {
            memset(cur, 0, sizeof(cur));
            for (int i = 0; i < pw; i++) {
                const int bit = i * depth, x = g[0] + i * g[2], y = g[1] + j * g[3];
                cur[bit / 8] |= (uint8_t)(v[y * w + x] << (8 - depth - bit % 8));
            }
            if ((pw * depth) % 8) cur[rb - 1] |= (uint8_t)(pad & ((1u << (8 - (pw * depth) % 8)) - 1));
            const int f = filters[k % nf];
            out[n++] = (uint8_t)f;
            for (int i = 0; i < rb; i++) {
                const int a = i ? cur[i - 1] : 0, b = j ? prev[i] : 0, c = i && j ? prev[i - 1] : 0;
                const int pred = f == 1 ? a : f == 2 ? b : f == 3 ? (a + b) / 2 : f == 4 ? paeth(a, b, c) : 0;
                out[n++] = (uint8_t)(cur[i] - pred);
            }
            memcpy(prev, cur, sizeof(prev));
        }
    }
    return n;
}

/* The palette test image's colours: entry i = (i, 255 - i, 7 i mod 256). */
static void test_palette_colours(uint8_t plte[256 * 3]) {
    for (int i = 0; i < 256; i++)
        plte[3 * i] = (uint8_t)i, plte[3 * i + 1] = (uint8_t)(255 - i), plte[3 * i + 2] = (uint8_t)(7 * i);
}

/* Decodes a palette PNG of indices v and checks every pixel is its PLTE colour. */
static void expect_palette_image(const png_spec *s, const uint8_t *v, const uint8_t *raw, size_t raw_n,
                                 const char *what) {
    size_t n;
    uint8_t *d = make_png(s, raw, raw_n, &n);
    vs_image img;
    vs_error err = {0};
    VT_CHECK(vs_image_decode(&img, d, n, "pal.png", &err) == VS_OK, "%s: %s", what, err.msg);
    bool ok = img.rgb && img.w == s->w && img.h == s->h;
    for (int i = 0; ok && i < s->w * s->h; i++)
        ok = !memcmp(img.rgb + 3 * i, s->plte + 3 * v[i], 3);
    VT_CHECK(ok, "%s: every pixel is its palette colour", what);
    vs_image_free(&img);
    vs_free(d);
}

/* Decoding must fail with exactly `want` as the message (the input named once, first). */
static void expect_message(const uint8_t *d, size_t n, vs_status st_want, const char *want, const char *what) {
    vs_image img;
    vs_error err = {0};
    vs_status st = vs_image_decode(&img, d, n, "bad.img", &err);
    VT_CHECK(st == st_want && !strcmp(err.msg, want), "%s: got %s '%s', want %s '%s'", what, vs_status_name(st),
             err.msg, vs_status_name(st_want), want);
    VT_CHECK(img.rgb == NULL, "%s: no pixels on failure", what);
    if (st == VS_OK) vs_image_free(&img);
}

static void expect_palette_fail(const png_spec *s, const uint8_t *raw, size_t raw_n, const char *want,
                                const char *what) {
    size_t n;
    uint8_t *d = make_png(s, raw, raw_n, &n);
    expect_message(d, n, VS_ERR_FORMAT, want, what);
    vs_free(d);
}

/* stb_image 2.27 expands palette indices through a 256-entry array it fills only up to the PLTE's size:
 * an index past the PLTE used to reach the model as uninitialised stack memory (a different embedding
 * on every run). Such files are refused, whatever the bit depth, filters or interlacing. */
static void test_png_palette(void) {
    uint8_t plte[256 * 3], raw[4096], v[81];
    test_palette_colours(plte);
    const int all_filters[5] = {0, 1, 2, 3, 4};
    size_t rn;

    /* the reported file: one PLTE entry, index 200 */
    png_spec s = {.w = 4, .h = 2, .depth = 8, .color = 3, .plte = plte, .n_plte = 1};
    memset(v, 0, sizeof(v));
    rn = scanlines(v, 4, 2, 8, false, all_filters, 1, 0, raw);
    expect_palette_image(&s, v, raw, rn, "1-entry PLTE, index 0");
    v[7] = 200;
    rn = scanlines(v, 4, 2, 8, false, all_filters, 1, 0, raw);
    expect_palette_fail(&s, raw, rn, "bad.img: corrupt PNG (palette index 200 out of range: PLTE size 1)",
                        "1-entry PLTE, index 200");

    /* 150 entries, 5 x 5 pixels, every filter type on every row in turn: in-range images decode; an
     * index of 200 is found whichever filter hides it (the filtered byte itself is small) */
    s = (png_spec){.w = 5, .h = 5, .depth = 8, .color = 3, .plte = plte, .n_plte = 150};
    for (int rot = 0; rot < 5; rot++) {
        const int filters[5] = {rot % 5, (rot + 1) % 5, (rot + 2) % 5, (rot + 3) % 5, (rot + 4) % 5};
        for (int i = 0; i < 25; i++)
            v[i] = (uint8_t)((i * 37 + 11) % 150);
        rn = scanlines(v, 5, 5, 8, false, filters, 5, 0, raw);
        char what[96];
        snprintf(what, sizeof(what), "150 entries, filters rotated by %d", rot);
        expect_palette_image(&s, v, raw, rn, what);
        v[3 * 5 + 2] = 200; /* row 3 uses filter (rot + 3) % 5 */
        rn = scanlines(v, 5, 5, 8, false, filters, 5, 0, raw);
        snprintf(what, sizeof(what), "index 200 under filter %d", filters[3]);
        expect_palette_fail(&s, raw, rn, "bad.img: corrupt PNG (palette index 200 out of range: PLTE size 150)",
                            what);
    }

    /* 4 bits per pixel, odd width (a half-used last byte whose padding bits are set): 3 entries */
    s = (png_spec){.w = 5, .h = 3, .depth = 4, .color = 3, .plte = plte, .n_plte = 3};
    for (int i = 0; i < 15; i++)
        v[i] = (uint8_t)(i % 3);
    rn = scanlines(v, 5, 3, 4, false, all_filters, 5, 0xF, raw);
    expect_palette_image(&s, v, raw, rn, "4-bit, padding bits set");
    v[9] = 3;
    rn = scanlines(v, 5, 3, 4, false, all_filters, 5, 0, raw);
    expect_palette_fail(&s, raw, rn, "bad.img: corrupt PNG (palette index 3 out of range: PLTE size 3)",
                        "4-bit index 3");
    /* 1 bit per pixel, 1 entry: index 1 */
    s = (png_spec){.w = 9, .h = 2, .depth = 1, .color = 3, .plte = plte, .n_plte = 1};
    memset(v, 0, sizeof(v));
    v[17] = 1;
    rn = scanlines(v, 9, 2, 1, false, all_filters, 1, 0, raw);
    expect_palette_fail(&s, raw, rn, "bad.img: corrupt PNG (palette index 1 out of range: PLTE size 1)",
                        "1-bit index 1");

    /* Adam7 interlacing, 9 x 9: the index sits in pass 2 at (4, 0), then in pass 7 at (1, 1) */
    s = (png_spec){.w = 9, .h = 9, .depth = 8, .color = 3, .interlace = 1, .plte = plte, .n_plte = 100};
    for (int i = 0; i < 81; i++)
        v[i] = (uint8_t)((i * 13) % 100);
    rn = scanlines(v, 9, 9, 8, true, all_filters, 5, 0, raw);
    expect_palette_image(&s, v, raw, rn, "Adam7, in range");
    const int at[2] = {4, 1 * 9 + 1};
    for (int k = 0; k < 2; k++) {
        const uint8_t keep = v[at[k]];
        v[at[k]] = 255;
        rn = scanlines(v, 9, 9, 8, true, all_filters, 5, 0, raw);
        expect_palette_fail(&s, raw, rn, "bad.img: corrupt PNG (palette index 255 out of range: PLTE size 100)",
                            k ? "Adam7, pass 7" : "Adam7, pass 2");
        v[at[k]] = keep;
    }

    /* more image data than the size needs: refused rather than inflated without bound */
    s = (png_spec){.w = 4, .h = 2, .depth = 8, .color = 3, .plte = plte, .n_plte = 1};
    memset(v, 0, sizeof(v));
    rn = scanlines(v, 4, 2, 8, false, all_filters, 1, 0, raw);
    memset(raw + rn, 0, 100);
    size_t n;
    uint8_t *d = make_png(&s, raw, rn + 100, &n);
    expect_fail(d, n, VS_ERR_FORMAT, "corrupt PNG image data", "palette PNG with trailing data");
    vs_free(d);

    /* tRNS longer than the PLTE, and a second PLTE (stb would keep the first one's extra entries) */
    const uint8_t alpha[2] = {10, 20};
    s = (png_spec){.w = 4, .h = 2, .depth = 8, .color = 3, .plte = plte, .n_plte = 1, .trns = alpha, .n_trns = 2};
    expect_palette_fail(&s, raw, rn, "bad.img: corrupt PNG (tRNS has 2 entries, PLTE 1)", "tRNS > PLTE");
    s.n_trns = 1;
    expect_palette_image(&s, v, raw, rn, "tRNS == PLTE");
    s = (png_spec){.w = 4, .h = 2, .depth = 8, .color = 3, .plte = plte, .n_plte = 256, .n_plte2 = 1};
    v[7] = 200;
    rn = scanlines(v, 4, 2, 8, false, all_filters, 1, 0, raw);
    expect_palette_fail(&s, raw, rn, "bad.img: corrupt PNG (two PLTE chunks)", "two PLTE chunks");

    /* the CLI refuses the reported file with the same message (it used to embed stack garbage) */
    char pal[512], log[512];
    snprintf(pal, sizeof(pal), "%s/pal200.png", vt_tmpdir());
    snprintf(log, sizeof(log), "%s/pal200.log", vt_tmpdir());
    s = (png_spec){.w = 4, .h = 2, .depth = 8, .color = 3, .plte = plte, .n_plte = 1};
    d = make_png(&s, raw, rn, &n);
    FILE *f = fopen(pal, "wb");
    VT_REQUIRE(f && fwrite(d, 1, n, f) == n && fclose(f) == 0, "writing %s", pal);
    vs_free(d);
    int rc = vt_run("%s embed-image --mmproj " FIX "tiny_f32.gguf --image %s -o %s/pal200 2> %s", vt_cli(), pal,
                    vt_tmpdir(), log);
    char want[1200];
    snprintf(want, sizeof(want),
             "vlmspec embed-image: %s: corrupt PNG (palette index 200 out of range: PLTE size 1)\n", pal);
    size_t ln = 0;
    uint8_t *got = read_all(log, &ln);
    VT_CHECK(rc == 1 && !strcmp((const char *)got, want), "embed-image: exit %d, stderr '%s', want '%s'", rc,
             (const char *)got, want);
    vs_free(got);
}

/* Writes n bytes to <tmpdir>/name; path (cap bytes) receives the file's path, which is returned. */
static const char *write_tmp(const char *name, const uint8_t *d, size_t n, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", vt_tmpdir(), name);
    FILE *f = fopen(path, "wb");
    VT_REQUIRE(f && fwrite(d, 1, n, f) == n && fclose(f) == 0, "writing %s", path);
    return path;
}

/* A grey 8-bit w x 1 PNG (all zero), or with header_only just IHDR + IEND. */
static uint8_t *grey_row_png(int w, int h, bool header_only, size_t *n) {
    png_spec s = {.w = w, .h = h, .depth = 8, .color = 0};
    if (header_only) return make_png(&s, NULL, 0, n);
    const size_t rn = (size_t)h * ((size_t)w + 1);
    uint8_t *raw = vs_calloc(rn, 1);
    uint8_t *d = make_png(&s, raw, rn, n);
    vs_free(raw);
    return d;
}

/* Zero-length IDAT chunks (legal, empty) before and between the data: the same pixels as without them
 * (stb_image used to memcpy 0 bytes to NULL for the first one; fuzz_image found it). */
static void test_empty_idat(void) {
    png_spec s = {.w = 5, .h = 3, .depth = 8, .color = 0};
    uint8_t raw[3 * 6];
    for (int i = 0; i < 18; i++) raw[i] = i % 6 ? (uint8_t)(i * 13) : 0;
    size_t n = 0;
    uint8_t *plain = make_png(&s, raw, sizeof(raw), &n);
    bytes b = {0};
    put(&b, plain, 33); /* signature + IHDR */
    png_chunk(&b, "IDAT", NULL, 0);
    png_chunk(&b, "IDAT", NULL, 0);
    put(&b, plain + 33, n - 33 - 12); /* the data's IDAT */
    png_chunk(&b, "IDAT", NULL, 0);
    put(&b, plain + n - 12, 12); /* IEND */
    vs_image a, e;
    vs_error err = {0};
    VT_REQUIRE(vs_image_decode(&a, plain, n, "plain", &err) == VS_OK, "%s", err.msg);
    VT_CHECK(vs_image_decode(&e, b.p, b.n, "empty-idat", &err) == VS_OK, "zero-length IDAT chunks: %s", err.msg);
    VT_CHECK(e.w == a.w && e.h == a.h && e.rgb && !memcmp(a.rgb, e.rgb, (size_t)a.w * a.h * 3),
             "zero-length IDAT chunks change the pixels");
    vs_image_free(&a);
    vs_image_free(&e);
    vs_free(plain);
    vs_free(b.p);
}

/* The size limit: max(4096, 16 x the model's input side) per side, from the header, before decoding.
 * A 783 KB all-zero 16384 x 16384 PNG used to cost 1.6 GB and 13 s. */
static void test_size_limit(void) {
    VT_CHECK(vs_image_max_side(0) == 4096 && vs_image_max_side(35) == 4096 && vs_image_max_side(256) == 4096,
             "small models: 4096");
    VT_CHECK(vs_image_max_side(336) == 5376 && vs_image_max_side(1024) == 16384 && vs_image_max_side(8192) == 16384,
             "16 x the side, at most VS_IMAGE_MAX_DIM: %d %d", vs_image_max_side(336), vs_image_max_side(1024));
    size_t n;
    uint8_t *d = grey_row_png(16384, 16384, true, &n);
    expect_message(d, n, VS_ERR_RANGE, "bad.img: image is 16384 x 16384, larger than the limit of 4096 x 4096",
                   "16384^2 PNG header");
    vs_free(d);
    d = grey_row_png(4097, 1, false, &n);
    expect_message(d, n, VS_ERR_RANGE, "bad.img: image is 4097 x 1, larger than the limit of 4096 x 4096",
                   "4097 x 1 PNG");
    vs_image img;
    vs_error err = {0};
    VT_CHECK(vs_image_decode_max(&img, d, n, "x", 5376, &err) == VS_OK && img.w == 4097, "a larger limit: %s",
             err.msg);
    vs_image_free(&img);
    vs_free(d);
    d = grey_row_png(1, 4096, false, &n);
    VT_CHECK(vs_image_decode(&img, d, n, "x", &err) == VS_OK && img.h == 4096, "1 x 4096 decodes: %s", err.msg);
    vs_image_free(&img);
    vs_free(d);

    /* the vision tower applies its own input side: S = 336 allows 5376, not 5377 */
    vs_vision_config c;
    vs_vision_config_llava15(&c);
    c.image_size = 336, c.patch_size = 112, c.width = 8, c.ffn = 16, c.n_heads = 2, c.n_blocks = 1;
    c.projection_dim = 0, c.proj_hidden = 8, c.proj_out = 8;
    char mp[512], p1[512], p2[512];
    snprintf(mp, sizeof(mp), "%s/s336.gguf", vt_tmpdir());
    VT_REQUIRE(vs_mmproj_write_random(mp, &c, VS_TYPE_F32, 1, &err) == VS_OK, "%s", err.msg);
    vs_mmproj *m = vs_mmproj_open(mp, &err);
    VT_REQUIRE(m && vs_mmproj_tower(m), "%s", err.msg);
    d = grey_row_png(5376, 1, false, &n);
    write_tmp("w5376.png", d, n, p1, sizeof(p1));
    vs_free(d);
    d = grey_row_png(5377, 1, false, &n);
    write_tmp("w5377.png", d, n, p2, sizeof(p2));
    vs_free(d);
    vs_vision_features f;
    VT_CHECK(vs_vision_encode_file(vs_mmproj_tower(m), NULL, p1, VS_PREPROC_LLAMACPP, NULL, &f, &err) == VS_OK,
             "S = 336 encodes 5376 x 1: %s", err.msg);
    vs_vision_features_free(&f);
    char want[1200];
    snprintf(want, sizeof(want), "%s: image is 5377 x 1, larger than the limit of 5376 x 5376", p2);
    vs_status st = vs_vision_encode_file(vs_mmproj_tower(m), NULL, p2, VS_PREPROC_LLAMACPP, NULL, &f, &err);
    VT_CHECK(st == VS_ERR_RANGE && !strcmp(err.msg, want), "S = 336 refuses 5377 x 1: '%s'", err.msg);
    VT_CHECK(vs_image_load(&img, p1, &err) == VS_ERR_RANGE, "without a model 5376 is too wide: %s", err.msg);
    vs_image_free(&img);
    vs_mmproj_free(m);
}

/* Every image error names its input once, first: "PATH: reason" (it used to read "PATH: : reason" when
 * the vision step after a successful load failed). */
static void test_error_names_path_once(void) {
    char p[512], want[1200];
    vs_image img;
    vs_error err = {0};
    const char text[] = "not an image";
    write_tmp("text.png", (const uint8_t *)text, sizeof(text) - 1, p, sizeof(p));
    snprintf(want, sizeof(want), "%s: not a PNG, JPEG, BMP or binary PPM/PGM image", p);
    VT_CHECK(vs_image_load(&img, p, &err) == VS_ERR_FORMAT && !strcmp(err.msg, want), "load: '%s'", err.msg);
    vs_vision_features f;
    VT_CHECK(vs_vision_encode_file(NULL, NULL, p, VS_PREPROC_LLAVA, NULL, &f, &err) == VS_ERR_FORMAT &&
                 !strcmp(err.msg, want),
             "encode_file, bad image: '%s'", err.msg);
    snprintf(want, sizeof(want), "%s: vision encode: no vision tower (projector-only file?)", FIX "img_a.png");
    VT_CHECK(vs_vision_encode_file(NULL, NULL, FIX "img_a.png", VS_PREPROC_LLAVA, NULL, &f, &err) ==
                     VS_ERR_INVALID &&
                 !strcmp(err.msg, want),
             "encode_file, no tower: '%s', want '%s'", err.msg, want);
    snprintf(p, sizeof(p), "%s/missing.png", vt_tmpdir());
    snprintf(want, sizeof(want), "%s: cannot open: ", p);
    VT_CHECK(vs_image_load(&img, p, &err) == VS_ERR_IO && !strncmp(err.msg, want, strlen(want)) &&
                 !strstr(err.msg + strlen(p), p),
             "missing file: '%s'", err.msg);
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
    test_png_palette();
    test_size_limit();
    test_empty_idat();
    test_error_names_path_once();
    test_resize();
    test_recipes();
    test_pool();
    return vt_finish("image");
}
