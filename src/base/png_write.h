/* png_write: PNG encoding (stb_image_write from Debian's libstb-dev, compiled here and only here).
 * Owns: nothing beyond the returned buffers. Deterministic: the same pixels give the same bytes. */
#ifndef VS_PNG_WRITE_H
#define VS_PNG_WRITE_H

#include "common.h"

/* Encodes w x h pixels of `channels` (1 gray, 2 gray+alpha, 3 RGB, 4 RGBA) bytes each, row-major, into
 * a vs_malloc'd PNG (*len bytes). NULL on bad arguments or out of memory. */
uint8_t *vs_png_encode(const uint8_t *pixels, int w, int h, int channels, size_t *len);
/* Encodes and writes a PNG file. */
vs_status vs_png_write(const char *path, const uint8_t *pixels, int w, int h, int channels, vs_error *err);

#endif
