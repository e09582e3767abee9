/* png_write: see png_write.h. The one translation unit that compiles stb_image_write's implementation
 * (static, so its tuning variables stay private to this file). */
#include "png_write.h"
#include "outfile.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

/* A fast zlib stream for stb's PNG writer: greedy LZ77 with a one-entry hash table and the fixed
 * Huffman codes of RFC 1951. stb's own compressor allocates a 16384-bucket hash table of growing
 * lists per call, which dominates the time for the world's small images; this one is several times
 * faster at a similar size on them. */
static unsigned char *png_deflate(unsigned char *data, int data_len, int *out_len, int quality);
#define STBIW_ZLIB_COMPRESS png_deflate
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#define STBI_WRITE_NO_STDIO
#define STBIW_MALLOC(sz) vs_malloc(sz)
#define STBIW_REALLOC(p, sz) vs_realloc(p, sz)
#define STBIW_FREE(p) vs_free(p)
/* unused-function is diagnosed at the end of the file (stb declares writers we never call) */
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#include "stb_image_write.h"
#pragma GCC diagnostic pop

/* Bit writer over a buffer sized for the worst case up front (fixed Huffman never needs more than
 * 9 bits per input byte). Bits go least significant first, as DEFLATE packs them. */
typedef struct bitw {
    uint8_t *p;
    size_t n;
    uint64_t bits;
    int nbits;
} bitw;

static inline void bw_bits(bitw *w, uint32_t v, int n) {
    w->bits |= (uint64_t)v << w->nbits;
    w->nbits += n;
    while (w->nbits >= 8) {
        w->p[w->n++] = (uint8_t)w->bits;
        w->bits >>= 8;
        w->nbits -= 8;
    }
}

static uint32_t reverse_bits(uint32_t code, int len) {
    uint32_t r = 0;
    for (int i = 0; i < len; i++) r |= ((code >> i) & 1u) << (len - 1 - i);
    return r;
}

typedef struct huff_tables {
    uint16_t sym[288]; /* fixed literal/length codes (RFC 1951 3.2.6), bit-reversed */
    uint8_t sym_len[288];
    uint8_t dist[30]; /* 5-bit distance codes, bit-reversed */
} huff_tables;

static void make_huff(huff_tables *t) {
    for (int s = 0; s < 288; s++) {
        uint32_t code;
        int len;
        if (s < 144) code = 0x30u + (uint32_t)s, len = 8;
        else if (s < 256) code = 0x190u + (uint32_t)(s - 144), len = 9;
        else if (s < 280) code = (uint32_t)(s - 256), len = 7;
        else code = 0xC0u + (uint32_t)(s - 280), len = 8;
        t->sym[s] = (uint16_t)reverse_bits(code, len);
        t->sym_len[s] = (uint8_t)len;
    }
    for (int d = 0; d < 30; d++) t->dist[d] = (uint8_t)reverse_bits((uint32_t)d, 5);
}

static const uint16_t len_base[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                      31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
static const uint8_t len_extra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
static const uint16_t dist_base[30] = {1,   2,   3,   4,   5,   7,    9,    13,   17,   25,   33,   49,   65,    97,    129,
                                       193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
static const uint8_t dist_extra[30] = {0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

static void bw_match(bitw *w, const huff_tables *t, int len, int dist) {
    int l = 28;
    while (len_base[l] > len) l--;
    bw_bits(w, t->sym[257 + l], t->sym_len[257 + l]);
    if (len_extra[l]) bw_bits(w, (uint32_t)(len - len_base[l]), len_extra[l]);
    int d = 29;
    while (dist_base[d] > dist) d--;
    bw_bits(w, t->dist[d], 5);
    if (dist_extra[d]) bw_bits(w, (uint32_t)(dist - dist_base[d]), dist_extra[d]);
}

#define PNG_HASH_BITS 14

static inline uint32_t hash3(const unsigned char *p) {
    return ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16) * 2654435761u >> (32 - PNG_HASH_BITS);
}

static unsigned char *png_deflate(unsigned char *data, int data_len, int *out_len, int quality) {
    (void)quality;
    huff_tables ht;
    make_huff(&ht);
    size_t cap = (size_t)data_len * 9 / 8 + 64;
    bitw w = {vs_malloc(cap), 0, 0, 0};
    int32_t *table = vs_malloc(sizeof(int32_t) << PNG_HASH_BITS);
    if (!w.p || !table) {
        vs_free(w.p);
        vs_free(table);
        return NULL;
    }
    for (int i = 0; i < (1 << PNG_HASH_BITS); i++) table[i] = -1;
    w.p[w.n++] = 0x78; /* deflate, 32K window */
    w.p[w.n++] = 0x01; /* no preset dictionary, fastest */
    bw_bits(&w, 1, 1); /* BFINAL */
    bw_bits(&w, 1, 2); /* fixed Huffman */
    int i = 0;
    while (i < data_len) {
        int best = 0, dist = 0;
        if (i + 3 <= data_len) {
            uint32_t h = hash3(data + i);
            int32_t c = table[h];
            table[h] = i;
            if (c >= 0 && i - c <= 32768 && data[c] == data[i] && data[c + 1] == data[i + 1] && data[c + 2] == data[i + 2]) {
                int m = 3, lim = VS_MIN(258, data_len - i);
                while (m < lim && data[c + m] == data[i + m]) m++;
                best = m;
                dist = i - c;
            }
        }
        if (best >= 3) {
            bw_match(&w, &ht, best, dist);
            for (int k = i + 1; k < i + best && k + 3 <= data_len; k++) table[hash3(data + k)] = k;
            i += best;
        } else {
            bw_bits(&w, ht.sym[data[i]], ht.sym_len[data[i]]);
            i++;
        }
    }
    bw_bits(&w, ht.sym[256], ht.sym_len[256]);
    if (w.nbits) bw_bits(&w, 0, 8 - w.nbits);
    vs_free(table);
    /* Adler-32 of the uncompressed data, big-endian; the modulo is deferred over 5552-byte runs */
    uint32_t a = 1, b = 0;
    for (int k = 0; k < data_len;) {
        int end = VS_MIN(data_len, k + 5552);
        for (; k < end; k++) {
            a += data[k];
            b += a;
        }
        a %= 65521u;
        b %= 65521u;
    }
    uint32_t ad = (b << 16) | a;
    for (int k = 3; k >= 0; k--) w.p[w.n++] = (uint8_t)(ad >> (8 * k));
    *out_len = (int)w.n;
    return w.p;
}

uint8_t *vs_png_encode(const uint8_t *pixels, int w, int h, int channels, size_t *len) {
    if (len) *len = 0;
    if (!pixels || w <= 0 || h <= 0 || channels < 1 || channels > 4) return NULL;
    if ((int64_t)w * channels > INT_MAX / 2 || (int64_t)w * h * channels > INT_MAX / 2) return NULL;
    int n = 0;
    unsigned char *png = stbi_write_png_to_mem(pixels, w * channels, w, h, channels, &n);
    if (!png || n <= 0) {
        vs_free(png);
        return NULL;
    }
    if (len) *len = (size_t)n;
    return png;
}

vs_status vs_png_write(const char *path, const uint8_t *pixels, int w, int h, int channels, vs_error *err) {
    size_t n;
    uint8_t *png = vs_png_encode(pixels, w, h, channels, &n);
    if (!png)
        return vs_error_set(err, VS_ERR_INVALID, "%s: cannot encode a %dx%dx%d PNG", path, w, h, channels);
    vs_status s = vs_write_file(path, png, n, err);
    vs_free(png);
    return s;
}
