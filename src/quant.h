/* quant: the tensor element types vlmspec computes with and their llama.cpp-identical layouts.
 * Owns: type traits (block size, bytes per block, names), scalar conversions (F16, BF16), and row
 * quantize/dequantize for F32, F16, BF16, Q8_0 and Q4_0. Type ids are ggml's, so a GGUF tensor's
 * type field is a vs_type directly. These are the scalar reference implementations; fast paths live
 * in kernels / arch/. */
#ifndef VS_QUANT_H
#define VS_QUANT_H

#include "common.h"

typedef enum vs_type {
    VS_TYPE_F32 = 0,
    VS_TYPE_F16 = 1,
    VS_TYPE_Q4_0 = 2,
    VS_TYPE_Q8_0 = 8,
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
