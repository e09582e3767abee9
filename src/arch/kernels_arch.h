/* kernels_arch: the private contract between kernels.c (dispatch, threading, scalar twins) and the
 * per-ISA files arch/kernels_avx2.c and arch/kernels_avx512.c (only called after a run-time CPU check).
 * Owns: the matmul job description and the layouts of quantised activations ("xq").
 *
 * Quantised activations: every row of n_in floats becomes blocks of 32 signed 8-bit values q with one
 * scale d per block: amax = max |x| over the block, d = fp16(amax / 127) (kept as the float value of
 * that fp16), q = round_half_even(x * (127 / amax)) (0 when amax == 0). All ISAs compute exactly the
 * same q and d; only the memory layout differs:
 *  - scalar / AVX2 layout, vs_xq_row_bytes_ref(n_in) bytes per row: int8 q[n_in], then float d[n_in/32]
 *    (at offset round_up(n_in, 64)).
 *  - AVX-512 layout, vs_xq_row_bytes_avx512(n_in) bytes per row: for each pair of blocks p (the last
 *    one may hold a single block): 64 bytes of (q + 128) as uint8 (the missing block is 128s = q 0),
 *    then 16 floats: d of block 2p in lanes 0..7 and d of block 2p+1 in lanes 8..15 (0 if missing).
 *    The +128 bias lets VNNI's unsigned x signed dot take the activation as the unsigned operand; the
 *    kernel subtracts 128 * sum(w) per weight block (computed once per block, shared by all rows). */
#ifndef VS_KERNELS_ARCH_H
#define VS_KERNELS_ARCH_H

#include "kernels.h"

typedef struct vs_mm_job {
    vs_type wtype;
    const uint8_t *w;   /* (n_out, w_row_bytes) */
    size_t w_row_bytes; /* vs_type_row_bytes(wtype, n_in) */
    int64_t n_out, n_in, n_rows;
    const float *x;      /* (n_rows, n_in) */
    float *y;            /* (n_rows, n_out) */
    const uint8_t *xq;   /* (n_rows, xq_row_bytes) quantised activations (Q8_0/Q4_0 only) */
    size_t xq_row_bytes;
} vs_mm_job;

/* Scalar twin of the activation quantiser (one block of 32): q[32] and the block scale d. */
void vs_xq_block_ref(const float *x, int8_t *q, float *d);

size_t vs_xq_row_bytes_ref(int64_t n_in);
void vs_xq_quantize_row_ref(const float *x, int64_t n_in, uint8_t *row);

/* AVX2 (scalar layout). */
void vs_xq_quantize_row_avx2(const float *x, int64_t n_in, uint8_t *row);
void vs_mm_avx2(const vs_mm_job *job, int64_t o0, int64_t o1);
void vs_rmsnorm_avx2(float *out, const float *x, const float *weight, int64_t n, float eps);
void vs_softmax_avx2(float *x, int64_t n);
float vs_dot_f32_avx2(const float *a, const float *b, int64_t n);
void vs_axpy_f32_avx2(float *y, float a, const float *x, int64_t n);

/* AVX-512 (+VNNI). */
size_t vs_xq_row_bytes_avx512(int64_t n_in);
void vs_xq_quantize_row_avx512(const float *x, int64_t n_in, uint8_t *row);
void vs_mm_avx512(const vs_mm_job *job, int64_t o0, int64_t o1);
void vs_rmsnorm_avx512(float *out, const float *x, const float *weight, int64_t n, float eps);
void vs_softmax_avx512(float *x, int64_t n);
float vs_dot_f32_avx512(const float *a, const float *b, int64_t n);
void vs_axpy_f32_avx512(float *y, float a, const float *x, int64_t n);

#endif
