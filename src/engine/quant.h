/* quant: the tensor element types vlmspec computes with and their llama.cpp-identical layouts.
 * Owns: type traits (block size, bytes per block, names), scalar conversions (F16, BF16), and row
 * quantize/dequantize for F32, F16, BF16, Q8_0, Q4_0 and the K-quants Q4_K, Q5_K, Q6_K. Type ids are
 * ggml's, so a GGUF tensor's type field is a vs_type directly. These are the scalar reference
 * implementations; fast paths live in kernels / arch/. */
#ifndef VS_QUANT_H
#define VS_QUANT_H

#include "common.h"

typedef enum vs_type {
    VS_TYPE_F32 = 0,
    VS_TYPE_F16 = 1,
    VS_TYPE_Q4_0 = 2,
    VS_TYPE_Q8_0 = 8,
    VS_TYPE_Q4_K = 12,
    VS_TYPE_Q5_K = 13,
    VS_TYPE_Q6_K = 14,
    VS_TYPE_BF16 = 30,
} vs_type;

#define VS_QK8_0 32
#define VS_QK4_0 32

typedef struct vs_block_q8_0 {
    uint16_t d;            /* fp16 scale */
    int8_t qs[VS_QK8_0];
} vs_block_q8_0;
typedef struct vs_block_q4_0 {
    uint16_t d;            /* fp16 scale */
    uint8_t qs[VS_QK4_0 / 2];
} vs_block_q4_0;
_Static_assert(sizeof(vs_block_q8_0) == 34, "Q8_0 block must be 34 bytes");
_Static_assert(sizeof(vs_block_q4_0) == 18, "Q4_0 block must be 18 bytes");

/* K-quants (llama.cpp's layouts): super-blocks of VS_QK_K = 256 values.
 * Q4_K / Q5_K: 8 sub-blocks of 32, value = d * sc[j] * q - dmin * m[j], q in 0..15 (Q5_K: 0..31), the
 *   sub-block scales sc and mins m 6-bit each, packed into scales[12] (vs_kq_scale_min). Values are in
 *   4 groups g of 64: qs[32 g + l] holds value 64 g + l in its low nibble and 64 g + 32 + l in its high
 *   one; Q5_K's fifth bit of those two values is bit 2 g (resp. 2 g + 1) of qh[l].
 * Q6_K: 16 sub-blocks of 16, value = d * scales[j] * (q - 32), q in 0..63. Two halves h of 128 values;
 *   for l < 32 and k < 4, value 128 h + 32 k + l has low 4 bits in ql[64 h + l + 32 (k & 1)] (low nibble
 *   for k < 2, high nibble for k >= 2) and high 2 bits at bits 2 k..2 k + 1 of qh[32 h + l]. */
#define VS_QK_K 256
typedef struct vs_block_q4_k {
    uint16_t d;          /* fp16 scale of the sub-block scales */
    uint16_t dmin;       /* fp16 scale of the sub-block mins */
    uint8_t scales[12];  /* 8 x (6-bit scale, 6-bit min) */
    uint8_t qs[VS_QK_K / 2];
} vs_block_q4_k;
typedef struct vs_block_q5_k {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qh[VS_QK_K / 8]; /* the fifth bits */
    uint8_t qs[VS_QK_K / 2]; /* the low 4 bits */
} vs_block_q5_k;
typedef struct vs_block_q6_k {
    uint8_t ql[VS_QK_K / 2];    /* low 4 bits */
    uint8_t qh[VS_QK_K / 4];    /* high 2 bits */
    int8_t scales[VS_QK_K / 16]; /* 16 signed sub-block scales */
    uint16_t d;                 /* fp16 super-block scale */
} vs_block_q6_k;
_Static_assert(sizeof(vs_block_q4_k) == 144, "Q4_K block must be 144 bytes");
_Static_assert(sizeof(vs_block_q5_k) == 176, "Q5_K block must be 176 bytes");
_Static_assert(sizeof(vs_block_q6_k) == 210, "Q6_K block must be 210 bytes");

/* Sub-block j (0..7) of a Q4_K / Q5_K scales[12]: bytes 0..3 hold scales 0..3 in their low 6 bits,
 * bytes 4..7 mins 0..3 likewise; sub-blocks 4..7 keep their low 4 bits in the nibbles of bytes 8..11
 * (scale low, min high) and their top 2 bits in the top 2 bits of bytes j - 4 (scale) and j (min). */
static inline void vs_kq_scale_min(int j, const uint8_t *s, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}
static inline bool vs_type_is_kquant(int t) {
    return t == VS_TYPE_Q4_K || t == VS_TYPE_Q5_K || t == VS_TYPE_Q6_K;
}

bool vs_type_supported(int type);          /* one of the vs_type values above */
const char *vs_type_name(int type);        /* "F32", "Q8_0", ...; "?" for unknown ids */
int vs_type_from_name(const char *name);   /* -1 if unknown; case-insensitive */
int64_t vs_type_block_size(vs_type t);     /* values per block (1 for float types) */
size_t vs_type_block_bytes(vs_type t);     /* bytes per block */
/* Bytes of a row of n values; n must be a multiple of the block size (returns 0 otherwise). */
size_t vs_type_row_bytes(vs_type t, int64_t n);

float vs_fp16_to_fp32(uint16_t h);
uint16_t vs_fp32_to_fp16(float f);  /* round to nearest even, like ggml */
float vs_bf16_to_fp32(uint16_t h);
uint16_t vs_fp32_to_bf16(float f);  /* round to nearest even; NaN stays NaN */

/* n must be a multiple of the type's block size. */
void vs_dequantize_row(vs_type t, const void *src, float *dst, int64_t n);
void vs_quantize_row(vs_type t, const float *src, void *dst, int64_t n);

#endif
