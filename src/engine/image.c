/* image: decode (stb_image), container sanity checks, preprocessing recipes, patch-grid pooling.
 * See image.h for what the module owns. stb_image's implementation (Debian's libstb-dev, not vendored)
 * is compiled in stb_image_impl.c. */
#include "image.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* stb_image's declarations; its implementation is compiled in stb_image_impl.c. */
#define STBI_NO_STDIO
#define STBI_NO_LINEAR
#define STBI_NO_HDR
#include <stb_image.h>

/* ------------------------------------------------------------------------------------------------
 * Container checks. stb_image is lenient with truncated data in some formats (it reads zeros past
 * the end of a JPEG scan, a BMP or a PNM pixel array), so each container's structure is walked
 * first and a file that ends early is refused with a clear message. */

static uint32_t rd_be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static uint32_t rd_le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint16_t rd_le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

/* What the PNG chunk walk learns for the palette check (stb_image 2.27 keeps its palette in an
 * uninitialised 256-entry stack array and expands pixel indices through it without comparing them with
 * the PLTE size, so an index past the PLTE would hand the model stack garbage). */
typedef struct png_info {
    int32_t depth, color, interlace; /* IHDR bit depth, colour type, interlace method (-1: no IHDR) */
    int32_t pal_len;                 /* PLTE entries (0: no PLTE) */
    bool iphone;                     /* Apple's CgBI variant: raw deflate without a zlib header */
    size_t idat_len;                 /* total bytes of the IDAT chunks */
    int32_t empty_idat;              /* IDAT chunks of length 0 */
} png_info;

/* PNG: signature, then chunks (u32 BE length, type, data, crc) up to IEND. Besides truncation this
 * refuses a second IHDR or PLTE and a tRNS longer than the PLTE (what libpng refuses too). */
static vs_status check_png(const uint8_t *d, size_t n, const char *name, int64_t *w, int64_t *h, png_info *pi,
                           vs_error *err) {
    *pi = (png_info){.depth = -1, .color = -1, .interlace = -1};
    size_t pos = 8;
    for (;;) {
        if (n - pos < 12) return vs_error_set(err, VS_ERR_FORMAT, "%s: truncated PNG (no IEND chunk)", name);
        uint64_t len = rd_be32(d + pos);
        if (len > n - pos - 12) return vs_error_set(err, VS_ERR_FORMAT, "%s: truncated PNG chunk", name);
        const uint8_t *type = d + pos + 4, *c = d + pos + 8;
        if (!memcmp(type, "IEND", 4)) return VS_OK;
        if (!memcmp(type, "CgBI", 4)) pi->iphone = true;
        if (!memcmp(type, "IHDR", 4)) {
            if (pi->color >= 0) return vs_error_set(err, VS_ERR_FORMAT, "%s: corrupt PNG (two IHDR chunks)", name);
            if (len < 13) return vs_error_set(err, VS_ERR_FORMAT, "%s: corrupt PNG (short IHDR chunk)", name);
            *w = rd_be32(c);
            *h = rd_be32(c + 4);
            pi->depth = c[8], pi->color = c[9], pi->interlace = c[12];
        }
        if (!memcmp(type, "PLTE", 4)) {
            if (pi->pal_len) return vs_error_set(err, VS_ERR_FORMAT, "%s: corrupt PNG (two PLTE chunks)", name);
            if (len == 0 || len > 256 * 3 || len % 3)
                return vs_error_set(err, VS_ERR_FORMAT, "%s: corrupt PNG (PLTE of %u bytes)", name, (unsigned)len);
            pi->pal_len = (int32_t)(len / 3);
        }
        if (!memcmp(type, "tRNS", 4) && pi->color == 3 && len > (uint64_t)pi->pal_len)
            return vs_error_set(err, VS_ERR_FORMAT, "%s: corrupt PNG (tRNS has %u entries, PLTE %d)", name,
                                (unsigned)len, (int)pi->pal_len);
        if (!memcmp(type, "IDAT", 4)) pi->idat_len += (size_t)len, pi->empty_idat += len == 0;
        pos += 12 + (size_t)len;
    }
}

/* A copy of a PNG that check_png accepted without its zero-length IDAT chunks (legal, and they carry no
 * data). stb_image would otherwise copy 0 bytes to its not yet allocated buffer (memcpy(NULL, p, 0):
 * undefined behaviour, found by fuzz_image). NULL when out of memory. */
static uint8_t *png_drop_empty_idat(const uint8_t *d, size_t n, size_t *out_n) {
    uint8_t *o = vs_malloc(n);
    if (!o) return NULL;
    memcpy(o, d, 8);
    size_t pos = 8, k = 8;
    while (pos + 12 <= n) {
        const size_t len = rd_be32(d + pos), chunk = 12 + len;
        if (!(len == 0 && !memcmp(d + pos + 4, "IDAT", 4))) memcpy(o + k, d + pos, chunk), k += chunk;
        if (!memcmp(d + pos + 4, "IEND", 4)) break;
        pos += chunk;
    }
    *out_n = k;
    return o;
}

/* One PNG filter type applied in reverse to a row of rb bytes in place (1 byte per pixel for the
 * filter, as for every image of at most 8 bits per pixel); prev is the row above, NULL on a pass's
 * first row (where it reads as zeros). */
static void png_unfilter_row(uint8_t *row, const uint8_t *prev, size_t rb, int filter) {
    for (size_t i = 0; i < rb; i++) {
        const int a = i ? row[i - 1] : 0, b = prev ? prev[i] : 0, c = i && prev ? prev[i - 1] : 0;
        int pred = 0;
        switch (filter) {
        case 1: pred = a; break;
        case 2: pred = b; break;
        case 3: pred = (a + b) / 2; break;
        case 4: {
            const int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
            pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
            break;
        }
        }
        row[i] = (uint8_t)(row[i] + pred);
    }
}

/* A palette PNG whose PLTE has fewer than 2^depth entries: inflate its image data (into exactly the
 * bytes its w x h size needs; more or less is refused), undo the row filters of each interlace pass in
 * place and refuse any pixel index >= the PLTE size. Runs after the size limit, so the buffer is at
 * most about w * h bytes; the data is inflated again by stb_image afterwards (palette images only). */
static vs_status check_png_indices(const uint8_t *d, size_t n, const png_info *pi, int64_t w, int64_t h,
                                   const char *name, vs_error *err) {
    if (pi->color != 3) return VS_OK;
    if (pi->depth != 1 && pi->depth != 2 && pi->depth != 4 && pi->depth != 8)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: corrupt PNG (palette image of bit depth %d)", name,
                            (int)pi->depth);
    if (pi->interlace != 0 && pi->interlace != 1)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: corrupt PNG (interlace method %d)", name, (int)pi->interlace);
    if (pi->pal_len == 0) return vs_error_set(err, VS_ERR_FORMAT, "%s: corrupt PNG (palette image without PLTE)", name);
    if (pi->pal_len >= (1 << pi->depth)) return VS_OK; /* every index the depth can hold is defined */
    /* Adam7 passes (x origin, y origin, x step, y step); a plain image is the one pass (0, 0, 1, 1). */
    static const int adam7[7][4] = {{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4},
                                    {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}};
    static const int plain[1][4] = {{0, 0, 1, 1}};
    const int(*passes)[4] = pi->interlace ? adam7 : plain;
    const int n_pass = pi->interlace ? 7 : 1;
    size_t need = 0;
    for (int p = 0; p < n_pass; p++) {
        const int64_t pw = (w - passes[p][0] + passes[p][2] - 1) / passes[p][2];
        const int64_t ph = (h - passes[p][1] + passes[p][3] - 1) / passes[p][3];
        if (pw > 0 && ph > 0) need += (size_t)ph * (1 + ((size_t)pw * (size_t)pi->depth + 7) / 8);
    }
    if (need > INT_MAX || pi->idat_len > INT_MAX)
        return vs_error_set(err, VS_ERR_RANGE, "%s: PNG image data too large", name);
    uint8_t *z = vs_malloc(pi->idat_len ? pi->idat_len : 1), *raw = vs_malloc(need ? need : 1);
    if (!z || !raw) {
        vs_free(z);
        vs_free(raw);
        return vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory checking a palette PNG", name);
    }
    size_t zlen = 0;
    for (size_t pos = 8; pos + 12 <= n;) { /* check_png walked these chunks already */
        const size_t len = rd_be32(d + pos);
        if (!memcmp(d + pos + 4, "IEND", 4)) break;
        if (!memcmp(d + pos + 4, "IDAT", 4)) {
            memcpy(z + zlen, d + pos + 8, len);
            zlen += len;
        }
        pos += 12 + len;
    }
    const int got = pi->iphone ? stbi_zlib_decode_noheader_buffer((char *)raw, (int)need, (const char *)z, (int)zlen)
                               : stbi_zlib_decode_buffer((char *)raw, (int)need, (const char *)z, (int)zlen);
    vs_free(z);
    vs_status st = VS_OK;
    if (got < 0)
        st = vs_error_set(err, VS_ERR_FORMAT, "%s: corrupt PNG image data (%s; a %lld x %lld image needs %zu bytes)",
                          name, stbi_failure_reason(), (long long)w, (long long)h, need);
    else if ((size_t)got != need)
        st = vs_error_set(err, VS_ERR_FORMAT, "%s: corrupt PNG image data (%d bytes, a %lld x %lld image needs %zu)",
                          name, got, (long long)w, (long long)h, need);
    uint8_t *row = raw;
    for (int p = 0; st == VS_OK && p < n_pass; p++) {
        const int64_t pw = (w - passes[p][0] + passes[p][2] - 1) / passes[p][2];
        const int64_t ph = (h - passes[p][1] + passes[p][3] - 1) / passes[p][3];
        if (pw <= 0 || ph <= 0) continue;
        const size_t rb = ((size_t)pw * (size_t)pi->depth + 7) / 8;
        const uint8_t *prev = NULL;
        for (int64_t y = 0; st == VS_OK && y < ph; y++) {
            const int filter = row[0];
            if (filter > 4) {
                st = vs_error_set(err, VS_ERR_FORMAT, "%s: corrupt PNG (row filter %d)", name, filter);
                break;
            }
            uint8_t *px = row + 1;
            png_unfilter_row(px, prev, rb, filter);
            for (int64_t x = 0; x < pw; x++) {
                const size_t bit = (size_t)x * (size_t)pi->depth; /* indices are packed from the high bit */
                const int idx = (px[bit / 8] >> (8 - pi->depth - (int)(bit % 8))) & ((1 << pi->depth) - 1);
                if (idx >= pi->pal_len) {
                    st = vs_error_set(err, VS_ERR_FORMAT,
                                      "%s: corrupt PNG (palette index %d out of range: PLTE size %d)",
                                      name, idx, (int)pi->pal_len);
                    break;
                }
            }
            prev = px;
            row += 1 + rb;
        }
    }
    vs_free(raw);
    return st;
}

/* JPEG: marker segments from SOI to EOI; after each SOS the entropy-coded data runs to the next
 * marker that is not a stuffed 0xFF00 or a restart marker. Besides truncation this refuses what
 * stb_image 2.27 mishandles: Huffman tables declaring more than 256 symbols (it overruns its arrays)
 * and scans that use a Huffman table no DHT defined (its tables are uninitialised heap memory then,
 * and decoding indexes with garbage; both found by the fuzz target). */
static vs_status check_jpeg(const uint8_t *d, size_t n, const char *name, int64_t *w, int64_t *h,
                            vs_error *err) {
    bool dc_def[4] = {false}, ac_def[4] = {false};
    bool progressive = false;
    size_t pos = 2;
    for (;;) {
        if (pos >= n)
            return vs_error_set(err, VS_ERR_FORMAT, "%s: truncated JPEG (no end-of-image marker)", name);
        if (d[pos] != 0xFF)
            return vs_error_set(err, VS_ERR_FORMAT, "%s: corrupt JPEG (expected a marker at byte %zu)", name,
                                pos);
        while (pos < n && d[pos] == 0xFF)
            pos++;
        if (pos >= n)
            return vs_error_set(err, VS_ERR_FORMAT, "%s: truncated JPEG (no end-of-image marker)", name);
        uint8_t m = d[pos++];
        if (m == 0xD9) return VS_OK;                         /* EOI */
        if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) continue; /* TEM, RSTn: no length */
        if (m == 0x00 || m == 0xD8)
            return vs_error_set(err, VS_ERR_FORMAT, "%s: corrupt JPEG (bad marker 0x%02X)", name, m);
        if (n - pos < 2) return vs_error_set(err, VS_ERR_FORMAT, "%s: truncated JPEG segment", name);
        size_t len = ((size_t)d[pos] << 8) | d[pos + 1];
        if (len < 2) return vs_error_set(err, VS_ERR_FORMAT, "%s: corrupt JPEG segment length", name);
        if (len > n - pos) return vs_error_set(err, VS_ERR_FORMAT, "%s: truncated JPEG segment", name);
        const size_t seg_end = pos + len;
        if (m == 0xC4) { /* DHT: one or more tables (class/id byte, 16 counts, symbols) */
            for (size_t q = pos + 2; q < seg_end;) {
                if (seg_end - q < 17)
                    return vs_error_set(err, VS_ERR_FORMAT, "%s: corrupt JPEG Huffman table", name);
                const int tc = d[q] >> 4, th = d[q] & 15;
                if (tc > 1 || th > 3)
                    return vs_error_set(err, VS_ERR_FORMAT, "%s: corrupt JPEG Huffman table id 0x%02X", name,
                                        d[q]);
                size_t total = 0;
                for (int i = 1; i <= 16; i++)
                    total += d[q + (size_t)i];
                if (total > 256 || total > seg_end - q - 17)
                    return vs_error_set(err, VS_ERR_FORMAT, "%s: corrupt JPEG Huffman table (%zu symbols)",
                                        name, total);
                if (tc)
                    ac_def[th] = true;
                else
                    dc_def[th] = true;
                q += 17 + total;
            }
        }
        /* SOFn (not DHT C4, JPG C8, DAC CC): precision, height, width */
        if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC && len >= 7) {
            if (*w < 0) {
                *h = ((int64_t)d[pos + 3] << 8) | d[pos + 4];
                *w = ((int64_t)d[pos + 5] << 8) | d[pos + 6];
            }
            progressive = m == 0xC2 || m == 0xC6 || m == 0xCA || m == 0xCE;
        }
        if (m == 0xDA) { /* SOS: Ns, Ns x (component, Td << 4 | Ta), Ss, Se, Ah << 4 | Al */
            const size_t ns = len >= 3 ? d[pos + 2] : 0;
            if (ns < 1 || ns > 4 || len != 6 + 2 * ns)
                return vs_error_set(err, VS_ERR_FORMAT, "%s: corrupt JPEG scan header", name);
            const uint8_t ss = d[pos + 3 + 2 * ns], se = d[pos + 4 + 2 * ns], ah = d[pos + 5 + 2 * ns] >> 4;
            const bool uses_dc = !progressive || (ss == 0 && ah == 0);
            const bool uses_ac = !progressive || se > 0;
            for (size_t c = 0; c < ns; c++) {
                const int td = d[pos + 4 + 2 * c] >> 4, ta = d[pos + 4 + 2 * c] & 15;
                if (td > 3 || ta > 3 || (uses_dc && !dc_def[td]) || (uses_ac && !ac_def[ta]))
                    return vs_error_set(err, VS_ERR_FORMAT,
                                        "%s: corrupt JPEG (a scan uses an undefined Huffman "
                                        "table)",
                                        name);
            }
        }
        pos = seg_end;
        if (m == 0xDA) { /* skip the entropy-coded data */
            for (;;) {
                if (n - pos < 2)
                    return vs_error_set(err, VS_ERR_FORMAT, "%s: truncated JPEG scan data", name);
                if (d[pos] != 0xFF) {
                    pos++;
                    continue;
                }
                uint8_t nx = d[pos + 1];
                if (nx == 0x00 || (nx >= 0xD0 && nx <= 0xD7))
                    pos += 2;
                else if (nx == 0xFF)
                    pos++;
                else
                    break; /* a real marker */
            }
        }
    }
}

/* BMP: uncompressed pixel arrays must fit in the file. */
static vs_status check_bmp(const uint8_t *d, size_t n, const char *name, int64_t *ow, int64_t *oh,
                           vs_error *err) {
    if (n < 26) return vs_error_set(err, VS_ERR_FORMAT, "%s: truncated BMP header", name);
    uint64_t off = rd_le32(d + 10);
    uint32_t hsz = rd_le32(d + 14);
    int64_t w, h;
    uint32_t bpp, comp = 0;
    if (hsz == 12) {
        w = rd_le16(d + 18);
        h = rd_le16(d + 20);
        bpp = rd_le16(d + 24);
    } else {
        if (n < 34) return vs_error_set(err, VS_ERR_FORMAT, "%s: truncated BMP header", name);
        w = (int32_t)rd_le32(d + 18);
        h = (int32_t)rd_le32(d + 22);
        bpp = rd_le16(d + 28);
        comp = rd_le32(d + 30);
    }
    if (h < 0) h = -h;
    *ow = w;
    *oh = h;
    if (w <= 0 || h <= 0) return vs_error_set(err, VS_ERR_FORMAT, "%s: zero-sized BMP", name);
    if (w > VS_IMAGE_MAX_DIM || h > VS_IMAGE_MAX_DIM) return VS_OK; /* the size check reports it */
    if (comp == 0 || comp == 3) {
        if (bpp == 0 || bpp > 32)
            return vs_error_set(err, VS_ERR_FORMAT, "%s: corrupt BMP (%u bits per pixel)", name, bpp);
        uint64_t row = ((uint64_t)w * bpp + 31) / 32 * 4;
        if (off > n || row * (uint64_t)h > n - off)
            return vs_error_set(err, VS_ERR_FORMAT, "%s: truncated BMP (pixel data ends early)", name);
    }
    return VS_OK;
}

/* Binary PNM (P5 grey, P6 RGB): header of whitespace-separated width, height, maxval (with #
 * comments), one whitespace byte, then the raster. */
static bool pnm_int(const uint8_t *d, size_t n, size_t *pos, int64_t *out) {
    for (;;) {
        while (*pos < n && (d[*pos] == ' ' || d[*pos] == '\t' || d[*pos] == '\n' || d[*pos] == '\r' ||
                            d[*pos] == '\v' || d[*pos] == '\f'))
            (*pos)++;
        if (*pos < n && d[*pos] == '#') {
            while (*pos < n && d[*pos] != '\n' && d[*pos] != '\r')
                (*pos)++;
            continue;
        }
        break;
    }
    if (*pos >= n || d[*pos] < '0' || d[*pos] > '9') return false;
    int64_t v = 0;
    while (*pos < n && d[*pos] >= '0' && d[*pos] <= '9') {
        v = v * 10 + (d[*pos] - '0');
        if (v > INT32_MAX) return false;
        (*pos)++;
    }
    *out = v;
    return true;
}

static bool pnm_space(uint8_t c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static vs_status check_pnm(const uint8_t *d, size_t n, const char *name, int64_t *ow, int64_t *oh,
                           vs_error *err) {
    size_t pos = 2;
    int64_t w, h, maxv;
    if (n < 3 || !pnm_space(d[2]))
        return vs_error_set(err, VS_ERR_FORMAT, "%s: corrupt PNM header (no whitespace after the magic)",
                            name);
    if (!pnm_int(d, n, &pos, &w) || !pnm_int(d, n, &pos, &h) || !pnm_int(d, n, &pos, &maxv))
        return vs_error_set(err, VS_ERR_FORMAT, "%s: corrupt or truncated PNM header", name);
    *ow = w;
    *oh = h;
    if (w <= 0 || h <= 0) return vs_error_set(err, VS_ERR_FORMAT, "%s: zero-sized PNM image", name);
    if (pos >= n || !pnm_space(d[pos]))
        return vs_error_set(err, VS_ERR_FORMAT, "%s: corrupt PNM header (no whitespace after maxval)", name);
    if (maxv <= 0 || maxv > 65535)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: corrupt PNM (maxval %lld)", name, (long long)maxv);
    /* stb_image 2.27 converts 16-bit PNM channels with its 8-bit converter and then reads the buffer
     * as 16-bit (a heap over-read, found by the fuzz target): only 8-bit PNM is accepted. */
    if (maxv > 255)
        return vs_error_set(err, VS_ERR_UNSUPPORTED, "%s: 16-bit PNM (maxval %lld) is not supported", name,
                            (long long)maxv);
    if (w > VS_IMAGE_MAX_DIM || h > VS_IMAGE_MAX_DIM) return VS_OK; /* the size check reports it */
    pos++; /* the single whitespace byte after maxval */
    uint64_t need = (uint64_t)w * (uint64_t)h * (d[1] == '6' ? 3u : 1u);
    if (need > n - pos)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: truncated PNM (pixel data ends early)", name);
    return VS_OK;
}

/* Walks the container; *w / *h receive the header's dimensions (-1 when not found), *pi what a
 * PNG's chunks say about its palette (colour type -1 for other formats). */
static vs_status check_container(const uint8_t *d, size_t n, const char *name, int64_t *w, int64_t *h,
                                 png_info *pi, vs_error *err) {
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
    *w = *h = -1;
    *pi = (png_info){.depth = -1, .color = -1, .interlace = -1};
    if (n >= 8 && !memcmp(d, png_sig, 8)) return check_png(d, n, name, w, h, pi, err);
    if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) return check_jpeg(d, n, name, w, h, err);
    if (n >= 2 && d[0] == 'B' && d[1] == 'M') return check_bmp(d, n, name, w, h, err);
    if (n >= 2 && d[0] == 'P' && (d[1] == '5' || d[1] == '6')) return check_pnm(d, n, name, w, h, err);
    return vs_error_set(err, VS_ERR_FORMAT, "%s: not a PNG, JPEG, BMP or binary PPM/PGM image", name);
}

/* ------------------------------------------------------------------------------------------------
 * Decode */

vs_status vs_image_decode_max(vs_image *img, const uint8_t *data, size_t size, const char *name,
                              int32_t max_dim, vs_error *err) {
    memset(img, 0, sizeof(*img));
    if (!name) name = "image";
    if (max_dim < 1 || max_dim > VS_IMAGE_MAX_DIM) max_dim = VS_IMAGE_MAX_DIM;
    if (!data || size == 0) return vs_error_set(err, VS_ERR_FORMAT, "%s: empty image file", name);
    if (size > INT_MAX)
        return vs_error_set(err, VS_ERR_RANGE, "%s: image file too large (%zu bytes)", name, size);
    /* Dimensions from our own header walk first: stb's info call refuses some large (but allowed)
     * sizes with a generic message, and the limit must be applied before anything is allocated. */
    int64_t hw = -1, hh = -1;
    png_info pi;
    vs_status st = check_container(data, size, name, &hw, &hh, &pi, err);
    if (st == VS_OK && (hw == 0 || hh == 0))
        return vs_error_set(err, VS_ERR_FORMAT, "%s: zero-sized image (%lld x %lld)", name, (long long)hw,
                            (long long)hh);
    if (st == VS_OK && (hw > max_dim || hh > max_dim))
        return vs_error_set(err, VS_ERR_RANGE, "%s: image is %lld x %lld, larger than the limit of %d x %d",
                            name, (long long)hw, (long long)hh, (int)max_dim, (int)max_dim);
    if (st != VS_OK) return st;
    int w = 0, h = 0, comp = 0;
    if (!stbi_info_from_memory(data, (int)size, &w, &h, &comp))
        return vs_error_set(err, VS_ERR_FORMAT, "%s: corrupt image header (%s)", name, stbi_failure_reason());
    if (w <= 0 || h <= 0)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: zero-sized image (%d x %d)", name, w, h);
    if (w > max_dim || h > max_dim)
        return vs_error_set(err, VS_ERR_RANGE, "%s: image is %d x %d, larger than the limit of %d x %d", name,
                            w, h, (int)max_dim, (int)max_dim);
    if ((st = check_png_indices(data, size, &pi, w, h, name, err)) != VS_OK) return st;
    int w2 = 0, h2 = 0;
    uint8_t *stripped = NULL;
    size_t stripped_n = 0;
    if (pi.color >= 0 && pi.empty_idat > 0) {
        if (!(stripped = png_drop_empty_idat(data, size, &stripped_n)))
            return vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", name);
        data = stripped, size = stripped_n;
    }
    uint8_t *px = stbi_load_from_memory(data, (int)size, &w2, &h2, &comp, 3);
    vs_free(stripped);
    if (!px)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: corrupt image data (%s)", name, stbi_failure_reason());
    if (w2 != w || h2 != h) {
        vs_free(px);
        return vs_error_set(err, VS_ERR_FORMAT, "%s: image size changed while decoding", name);
    }
    img->w = w;
    img->h = h;
    img->rgb = px;
    return VS_OK;
}

int32_t vs_image_max_side(int32_t model_size) {
    const int64_t l = VS_MAX((int64_t)VS_IMAGE_DEFAULT_MAX_SIDE, 16 * (int64_t)model_size);
    return (int32_t)VS_MIN(l, (int64_t)VS_IMAGE_MAX_DIM);
}

vs_status vs_image_decode(vs_image *img, const uint8_t *data, size_t size, const char *name, vs_error *err) {
    return vs_image_decode_max(img, data, size, name, VS_IMAGE_DEFAULT_MAX_SIDE, err);
}

vs_status vs_image_load_max(vs_image *img, const char *path, int32_t max_dim, vs_error *err) {
    memset(img, 0, sizeof(*img));
    uint8_t *data = NULL;
    size_t size = 0;
    vs_status st = vs_read_file(path, &data, &size, err); /* its messages start with the path */
    if (st != VS_OK) return st;
    st = vs_image_decode_max(img, data, size, path, max_dim, err);
    vs_free(data);
    return st;
}

vs_status vs_image_load(vs_image *img, const char *path, vs_error *err) {
    return vs_image_load_max(img, path, VS_IMAGE_DEFAULT_MAX_SIDE, err);
}

vs_status vs_image_alloc(vs_image *img, int32_t w, int32_t h, const uint8_t fill[3], vs_error *err) {
    memset(img, 0, sizeof(*img));
    if (w <= 0 || h <= 0 || w > VS_IMAGE_MAX_DIM || h > VS_IMAGE_MAX_DIM)
        return vs_error_set(err, VS_ERR_RANGE, "image size %d x %d out of range", (int)w, (int)h);
    img->rgb = vs_malloc((size_t)w * (size_t)h * 3);
    if (!img->rgb)
        return vs_error_set(err, VS_ERR_NOMEM, "out of memory for a %d x %d image", (int)w, (int)h);
    img->w = w;
    img->h = h;
    for (size_t i = 0; i < (size_t)w * (size_t)h; i++)
        memcpy(img->rgb + 3 * i, fill, 3);
    return VS_OK;
}

void vs_image_free(vs_image *img) {
    if (!img) return;
    vs_free(img->rgb);
    memset(img, 0, sizeof(*img));
}

/* ------------------------------------------------------------------------------------------------
 * Pillow-compatible antialiased bicubic. For each output sample along one axis: the filter centre
 * in input coordinates is (o + 0.5) * scale; the cubic kernel (a = -0.5) is stretched by
 * max(scale, 1) so downscaling averages; taps are normalised to sum 1 in double, then rounded to
 * 22-bit fixed point away from zero; each pass accumulates from a rounding bias of half a unit and
 * clamps to 0..255. */

#define PIL_PRECISION_BITS 22

typedef struct pil_taps {
    int64_t ksize;   /* taps per output sample */
    int32_t *bounds; /* (n_out, 2): first input index, number of taps */
    int32_t *k;      /* (n_out, ksize) fixed-point weights */
} pil_taps;

static double cubic_a05(double x) {
    const double a = -0.5;
    if (x < 0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
    return 0.0;
}

static void pil_taps_free(pil_taps *t) {
    vs_free(t->bounds);
    vs_free(t->k);
    memset(t, 0, sizeof(*t));
}

static vs_status pil_taps_init(pil_taps *t, int32_t in_size, int32_t out_size, vs_error *err) {
    memset(t, 0, sizeof(*t));
    double scale = (double)in_size / (double)out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 2.0 * filterscale;
    t->ksize = (int64_t)ceil(support) * 2 + 1;
    t->bounds = vs_calloc((size_t)out_size * 2, sizeof(int32_t));
    t->k = vs_calloc((size_t)out_size * (size_t)t->ksize, sizeof(int32_t));
    double *w = vs_calloc((size_t)t->ksize, sizeof(double));
    if (!t->bounds || !t->k || !w) {
        vs_free(w);
        pil_taps_free(t);
        return vs_error_set(err, VS_ERR_NOMEM, "out of memory for resampling taps");
    }
    double ss = 1.0 / filterscale;
    for (int32_t o = 0; o < out_size; o++) {
        double center = (o + 0.5) * scale;
        int64_t xmin = (int64_t)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int64_t xmax = (int64_t)(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
        int64_t cnt = xmax - xmin;
        if (cnt > t->ksize) cnt = t->ksize; /* cannot happen: the support bounds the span */
        double sum = 0.0;
        for (int64_t x = 0; x < cnt; x++) {
            w[x] = cubic_a05(((double)(x + xmin) - center + 0.5) * ss);
            sum += w[x];
        }
        int32_t *k = t->k + (size_t)o * (size_t)t->ksize;
        for (int64_t x = 0; x < cnt; x++) {
            double v = sum != 0.0 ? w[x] / sum : w[x];
            double f = v * (double)(1 << PIL_PRECISION_BITS);
            k[x] = (int32_t)(v < 0 ? f - 0.5 : f + 0.5);
        }
        t->bounds[2 * o] = (int32_t)xmin;
        t->bounds[2 * o + 1] = (int32_t)cnt;
    }
    vs_free(w);
    return VS_OK;
}

static uint8_t pil_clip8(int64_t acc) {
    if (acc < 0) return 0;
    acc >>= PIL_PRECISION_BITS;
    return acc > 255 ? 255 : (uint8_t)acc;
}

/* One pass along x (horiz = true) or y. src (sh, sw, 3) -> dst (dh, dw, 3). */
static void pil_pass(const uint8_t *src, int32_t sw, uint8_t *dst, int32_t dw, int32_t dh, const pil_taps *t,
                     bool horiz) {
    const int64_t half = (int64_t)1 << (PIL_PRECISION_BITS - 1);
    for (int32_t y = 0; y < dh; y++) {
        for (int32_t x = 0; x < dw; x++) {
            int32_t o = horiz ? x : y;
            int32_t first = t->bounds[2 * o], cnt = t->bounds[2 * o + 1];
            const int32_t *k = t->k + (size_t)o * (size_t)t->ksize;
            int64_t acc[3] = {half, half, half};
            for (int32_t i = 0; i < cnt; i++) {
                const uint8_t *p = horiz ? src + ((size_t)y * sw + (size_t)(first + i)) * 3
                                         : src + ((size_t)(first + i) * sw + (size_t)x) * 3;
                acc[0] += (int64_t)p[0] * k[i];
                acc[1] += (int64_t)p[1] * k[i];
                acc[2] += (int64_t)p[2] * k[i];
            }
            uint8_t *q = dst + ((size_t)y * dw + (size_t)x) * 3;
            q[0] = pil_clip8(acc[0]);
            q[1] = pil_clip8(acc[1]);
            q[2] = pil_clip8(acc[2]);
        }
    }
}

static vs_status copy_image(const vs_image *img, vs_image *out, vs_error *err) {
    static const uint8_t black[3] = {0, 0, 0};
    vs_status st = vs_image_alloc(out, img->w, img->h, black, err);
    if (st == VS_OK) memcpy(out->rgb, img->rgb, (size_t)img->w * (size_t)img->h * 3);
    return st;
}

vs_status vs_image_resize_bicubic_pil(const vs_image *img, int32_t out_w, int32_t out_h, vs_image *out,
                                      vs_error *err) {
    memset(out, 0, sizeof(*out));
    if (!img->rgb || img->w <= 0 || img->h <= 0 || out_w <= 0 || out_h <= 0 || out_w > VS_IMAGE_MAX_DIM ||
        out_h > VS_IMAGE_MAX_DIM)
        return vs_error_set(err, VS_ERR_INVALID, "resize %d x %d -> %d x %d: bad size", (int)img->w,
                            (int)img->h, (int)out_w, (int)out_h);
    if (out_w == img->w && out_h == img->h) return copy_image(img, out, err);
    static const uint8_t black[3] = {0, 0, 0};
    vs_image tmp = {0};
    const vs_image *cur = img;
    vs_status st;
    if (out_w != img->w) {
        pil_taps t;
        if ((st = pil_taps_init(&t, img->w, out_w, err)) != VS_OK) return st;
        if ((st = vs_image_alloc(&tmp, out_w, img->h, black, err)) != VS_OK) {
            pil_taps_free(&t);
            return st;
        }
        pil_pass(img->rgb, img->w, tmp.rgb, out_w, img->h, &t, true);
        pil_taps_free(&t);
        cur = &tmp;
    }
    if (out_h != img->h) {
        pil_taps t;
        if ((st = pil_taps_init(&t, cur->h, out_h, err)) != VS_OK) {
            vs_image_free(&tmp);
            return st;
        }
        if ((st = vs_image_alloc(out, out_w, out_h, black, err)) != VS_OK) {
            pil_taps_free(&t);
            vs_image_free(&tmp);
            return st;
        }
        pil_pass(cur->rgb, cur->w, out->rgb, out_w, out_h, &t, false);
        pil_taps_free(&t);
        vs_image_free(&tmp);
    } else {
        *out = tmp; /* only the horizontal pass was needed */
    }
    return VS_OK;
}

/* ------------------------------------------------------------------------------------------------
 * llama.cpp's cubic: the cubic polynomial through 4 neighbouring samples p0..p3 (at -1, 0, 1, 2),
 * evaluated at t in [0, 1): p1 + a1 t + a2 t^2 + a3 t^3 with d_i = p_i - p1 and
 * a1 = -d0/3 + d2 - d3/6, a2 = (d0 + d2)/2, a3 = -d0/6 - d2/2 + d3/6 (single-precision storage). */

static float cubic4(float p0, float p1, float p2, float p3, float t) {
    float d0 = p0 - p1, d2 = p2 - p1, d3 = p3 - p1;
    float a1 = (float)(-1.0 / 3 * d0 + d2 - 1.0 / 6 * d3);
    float a2 = (float)(1.0 / 2 * d0 + 1.0 / 2 * d2);
    float a3 = (float)(-1.0 / 6 * d0 - 1.0 / 2 * d2 + 1.0 / 6 * d3);
    return p1 + a1 * t + a2 * t * t + a3 * t * t * t;
}

static inline int32_t clampi(int32_t v, int32_t lo, int32_t hi) { return v < lo ? lo : v > hi ? hi : v; }

vs_status vs_image_resize_cubic_llamacpp(const vs_image *img, int32_t out_w, int32_t out_h, vs_image *out,
                                         vs_error *err) {
    memset(out, 0, sizeof(*out));
    if (!img->rgb || img->w <= 0 || img->h <= 0)
        return vs_error_set(err, VS_ERR_INVALID, "resize: empty source image");
    static const uint8_t black[3] = {0, 0, 0};
    vs_status st = vs_image_alloc(out, out_w, out_h, black, err);
    if (st != VS_OK) return st;
    const int32_t w = img->w, h = img->h;
    const float tx = (float)w / (float)out_w, ty = (float)h / (float)out_h;
    for (int32_t i = 0; i < out_h; i++) {
        int32_t y = (int32_t)(ty * (float)i);
        float dy = ty * (float)i - (float)y;
        for (int32_t j = 0; j < out_w; j++) {
            int32_t x = (int32_t)(tx * (float)j);
            float dx = tx * (float)j - (float)x;
            for (int c = 0; c < 3; c++) {
                float col[4];
                for (int r = 0; r < 4; r++) {
                    const uint8_t *row = img->rgb + (size_t)clampi(y - 1 + r, 0, h - 1) * (size_t)w * 3;
                    float p[4];
                    for (int q = 0; q < 4; q++)
                        p[q] = (float)row[(size_t)clampi(x - 1 + q, 0, w - 1) * 3 + c];
                    col[r] = cubic4(p[0], p[1], p[2], p[3], dx);
                }
                float v = roundf(cubic4(col[0], col[1], col[2], col[3], dy));
                v = v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v;
                out->rgb[((size_t)i * out_w + j) * 3 + c] = (uint8_t)v;
            }
        }
    }
    return VS_OK;
}

/* ------------------------------------------------------------------------------------------------
 * Recipes */

/* Copies src into dst (which is larger or equal) at offset (ox, oy). */
static void paste(const vs_image *src, vs_image *dst, int32_t ox, int32_t oy) {
    for (int32_t y = 0; y < src->h; y++)
        memcpy(dst->rgb + ((size_t)(y + oy) * dst->w + (size_t)ox) * 3, src->rgb + (size_t)y * src->w * 3,
               (size_t)src->w * 3);
}

static vs_status to_square_llava(const vs_image *img, const vs_preproc *p, vs_image *out, vs_error *err) {
    /* LLaVA's expand2square: background = tuple(int(m * 255) for m in image_mean), image centred
     * (offset floor((long - short) / 2)), then the processor's bicubic resize to size x size. */
    uint8_t bg[3];
    for (int c = 0; c < 3; c++) {
        double v = (double)p->mean[c] * 255.0;
        bg[c] = v <= 0 ? 0 : v >= 255 ? 255 : (uint8_t)v;
    }
    int32_t side = VS_MAX(img->w, img->h);
    vs_image sq;
    vs_status st = vs_image_alloc(&sq, side, side, bg, err);
    if (st != VS_OK) return st;
    paste(img, &sq, (side - img->w) / 2, (side - img->h) / 2);
    st = vs_image_resize_bicubic_pil(&sq, p->size, p->size, out, err);
    vs_image_free(&sq);
    return st;
}

static vs_status to_square_llamacpp(const vs_image *img, const vs_preproc *p, vs_image *out, vs_error *err) {
    /* Fit inside size x size keeping the aspect ratio, centre on the fixed LLaVA background. */
    static const uint8_t bg[3] = {122, 116, 104};
    const int32_t s = p->size;
    float scale_w = (float)s / (float)img->w, scale_h = (float)s / (float)img->h;
    int32_t nw, nh;
    if (scale_w < scale_h) {
        nw = s;
        nh = VS_MIN((int32_t)ceilf((float)img->h * scale_w), s);
    } else {
        nh = s;
        nw = VS_MIN((int32_t)ceilf((float)img->w * scale_h), s);
    }
    nw = VS_MAX(nw, 1);
    nh = VS_MAX(nh, 1);
    vs_image rs;
    vs_status st = vs_image_resize_cubic_llamacpp(img, nw, nh, &rs, err);
    if (st != VS_OK) return st;
    st = vs_image_alloc(out, s, s, bg, err);
    if (st == VS_OK) paste(&rs, out, (s - nw) / 2, (s - nh) / 2);
    vs_image_free(&rs);
    return st;
}

vs_status vs_image_to_square(const vs_image *img, const vs_preproc *p, vs_image *out, vs_error *err) {
    memset(out, 0, sizeof(*out));
    if (!img || !img->rgb || img->w <= 0 || img->h <= 0)
        return vs_error_set(err, VS_ERR_INVALID, "preprocess: empty image");
    if (p->size <= 0 || p->size > VS_IMAGE_MAX_DIM)
        return vs_error_set(err, VS_ERR_INVALID, "preprocess: bad target size %d", (int)p->size);
    switch (p->mode) {
    case VS_PREPROC_LLAVA: return to_square_llava(img, p, out, err);
    case VS_PREPROC_LLAMACPP: return to_square_llamacpp(img, p, out, err);
    }
    return vs_error_set(err, VS_ERR_INVALID, "preprocess: unknown mode %d", (int)p->mode);
}

void vs_image_normalize(const vs_image *img, const float mean[3], const float std[3], float *out) {
    const size_t plane = (size_t)img->w * (size_t)img->h;
    for (int c = 0; c < 3; c++) {
        const float m = mean[c], inv = 1.0f / std[c];
        float *o = out + (size_t)c * plane;
        for (size_t i = 0; i < plane; i++)
            o[i] = ((float)img->rgb[3 * i + c] / 255.0f - m) * inv;
    }
}

vs_status vs_image_preprocess(const vs_image *img, const vs_preproc *p, float *out, vs_error *err) {
    for (int c = 0; c < 3; c++)
        if (!(p->std[c] > 0.0f) || !isfinite(p->mean[c]))
            return vs_error_set(err, VS_ERR_INVALID, "preprocess: bad mean/std for channel %d", c);
    vs_image sq;
    vs_status st = vs_image_to_square(img, p, &sq, err);
    if (st != VS_OK) return st;
    vs_image_normalize(&sq, p->mean, p->std, out);
    vs_image_free(&sq);
    return VS_OK;
}

/* ------------------------------------------------------------------------------------------------
 * Pooling */

void vs_pool_grid_avg(const float *in, int32_t gh, int32_t gw, int64_t d, int32_t k, float *out, int32_t *ogh,
                      int32_t *ogw) {
    if (k < 1) k = 1;
    const int32_t oh = vs_pool_out_side(gh, k), ow = vs_pool_out_side(gw, k);
    for (int32_t r = 0; r < oh; r++) {
        for (int32_t c = 0; c < ow; c++) {
            float *o = out + ((size_t)r * ow + c) * (size_t)d;
            int32_t r1 = VS_MIN(r * k + k, gh), c1 = VS_MIN(c * k + k, gw);
            for (int64_t j = 0; j < d; j++)
                o[j] = 0.0f;
            for (int32_t y = r * k; y < r1; y++)
                for (int32_t x = c * k; x < c1; x++) {
                    const float *src = in + ((size_t)y * gw + x) * (size_t)d;
                    for (int64_t j = 0; j < d; j++)
                        o[j] += src[j];
                }
            const float inv = 1.0f / (float)((r1 - r * k) * (c1 - c * k));
            for (int64_t j = 0; j < d; j++)
                o[j] *= inv;
        }
    }
    if (ogh) *ogh = oh;
    if (ogw) *ogw = ow;
}
