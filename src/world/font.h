/* font: vlmspec's own 5 x 7 bitmap font (uppercase letters, digits, a little punctuation), drawn by
 * hand for the generated world's glyph scenes, chart labels and contact-sheet captions.
 * Owns: the glyph table and text drawing into RGB buffers (clipped to the buffer). */
#ifndef VS_FONT_H_INCLUDED
#define VS_FONT_H_INCLUDED

#include "common.h"

#define VS_FONT_W 5       /* glyph columns */
#define VS_FONT_H 7       /* glyph rows */
#define VS_FONT_ADVANCE 6 /* columns from one glyph to the next (1 column gap) */

/* A glyph as VS_FONT_H rows of VS_FONT_W characters, row-major ('#' = ink, '.' = paper); lowercase
 * maps to uppercase; NULL if the character has no glyph (space has an empty one). */
const char *vs_font_glyph(char c);
/* Width in pixels of s drawn at `scale` (no trailing gap). */
int vs_font_text_width(const char *s, int scale);
/* Draws s with its top-left corner at (x, y), each font pixel a scale x scale block, into an RGB
 * buffer of w x h; characters without a glyph draw as a hollow box. Clipped to the buffer. */
void vs_font_draw(uint8_t *rgb, int w, int h, int x, int y, const char *s, int scale, const uint8_t color[3]);

#endif
