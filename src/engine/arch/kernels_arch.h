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
 *  - AVX-512 VNNI and AMX layout (Q8_0 / Q4_0 on every CPU with AVX-512 VNNI, and with AVX2 + AVX-VNNI):
 *    the "AMX layout" below, whose row groups are what the 16-output-lane kernels and the tiles consume.
 */
#ifndef VS_KERNELS_ARCH_H
#define VS_KERNELS_ARCH_H

#include <math.h>
#include <string.h>

#include "kernels.h"

/* K-quant activations ("xk", Q4_K / Q5_K / Q6_K weights, the same layout on every ISA): every row of n_in
 * floats becomes super-blocks of 256 signed 8-bit values q with one f32 scale d and 16 int16 sums:
 * amax = max |x| over the block, d = amax / 127, q = round_half_even(x * (127 / amax)) (0 when amax == 0),
 * bsum[k] = sum of q[16 k .. 16 k + 15] (what the Q4_K/Q5_K mins and Q6_K's code offset 32 multiply).
 * Row layout, vs_xk_row_bytes(n_in) bytes: int8 q[n_in]; float d[n_in / 256] at vs_xk_d_offset;
 * int16 bsum[n_in / 256][16] at vs_xk_bsum_offset. */
static inline size_t vs_xk_d_offset(int64_t n_in) { return (size_t)((n_in + 63) / 64 * 64); }
static inline size_t vs_xk_bsum_offset(int64_t n_in) {
    return vs_xk_d_offset(n_in) + (size_t)((n_in / 256 * 4 + 63) / 64 * 64);
}
static inline size_t vs_xk_row_bytes(int64_t n_in) {
    return vs_xk_bsum_offset(n_in) + (size_t)((n_in / 256 * 32 + 63) / 64 * 64);
}
void vs_xk_quantize_row_ref(const float *x, int64_t n_in, uint8_t *row);
void vs_xk_quantize_row_avx2(const float *x, int64_t n_in, uint8_t *row);
/* The float steps of a K-quant dot: those of llama.cpp's x86 (AVX2) kernels, which it runs for Q5_K and
 * Q6_K on every x86 CPU (Q4_K it repacks), so that the logits agree with llama.cpp's bit for bit where
 * the rest of the model does. Per super-block the exact integer dot is split into 8 lanes: lane k holds
 * the terms of the values whose position in their 32-value chunk is 4k..4k+3 (each times its sub-block
 * scale; Q6_K: minus 32 * (scale_2k * bsum_2k + scale_2k+1 * bsum_2k+1), its codes being q + 32), and
 * m = sum_j min_j * (bsum_2j + bsum_2j+1) (Q4_K/Q5_K). Then, block by block,
 *   lane[k] = fma(dx * d, (float)sumi[k], lane[k]);   mins = mins + (-dx * dmin) * (float)m (not fused)
 * and the result is ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)) (+ mins for Q4_K/Q5_K). Every path
 * on the GGUF rows (scalar twins; the AVX2 tiles do the same steps lane-wise) follows them, so all agree
 * bitwise; the AVX-512 kernel of the x16 copy has steps of its own (vs_kq_x16_block below). */
typedef struct vs_kq_acc {
    float lane[8];
    float mins;
} vs_kq_acc;

static inline void vs_kq_acc_block(vs_kq_acc *acc, float d, float dmin, float dx, const int32_t sumi[8], int32_t m) {
    const float dd = dx * d, dm = -dx * dmin;
    for (int k = 0; k < 8; k++) acc->lane[k] = fmaf(dd, (float)sumi[k], acc->lane[k]);
    const float tm = dm * (float)m; /* its own statement: no compiler setting may fuse it into the add */
    acc->mins += tm;
}

static inline float vs_kq_acc_result(vs_type t, const vs_kq_acc *acc) {
    const float *l = acc->lane;
    const float s = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
    return t == VS_TYPE_Q6_K ? s : s + acc->mins;
}

/* The float steps of the K-quant kernels that read the x16 copy (vs_mm_kq_lanes and its twin
 * vs_matmul_x16_ref): per super-block one exact integer S = sum of scale * code * q over the 256 values
 * (Q6_K minus 32 * sum_j scale_j * bsum_j) and, for Q4_K / Q5_K, m = sum_j min_j * (bsum_2j + bsum_2j+1);
 * then acc = fma(dx * d, (float)S, acc) and macc = macc + (-dx * dmin) * (float)m (not fused); the result
 * is acc + macc (Q4_K / Q5_K) or acc (Q6_K). One FMA per super-block instead of vs_kq_acc_block's eight
 * lanes: with the outputs in vector lanes, eight separately scaled integer sums per output would cost
 * more than the dot products themselves. */
static inline void vs_kq_x16_block(float *acc, float *macc, float d, float dmin, float dx, int32_t s, int32_t m) {
    const float dd = dx * d, dm = -dx * dmin;
    *acc = fmaf(dd, (float)s, *acc);
    const float tm = dm * (float)m; /* its own statement: no compiler setting may fuse it into the add */
    *macc += tm;
}

typedef struct vs_mm_job {
    vs_type wtype;
    const uint8_t *w;   /* (n_out, w_row_bytes) */
    const uint8_t *wp;  /* the same weights in the x16 layout (kernels.h) where a kernel reads it, or NULL */
    size_t w_row_bytes; /* vs_type_row_bytes(wtype, n_in) */
    int64_t n_out, n_in, n_rows;
    const float *x;      /* (n_rows, n_in) */
    float *y;            /* (n_rows, n_out) */
    const uint8_t *xq;   /* (n_rows, xq_row_bytes) quantised activations (Q8_0/Q4_0; K-quants: xk layout) */
    size_t xq_row_bytes;
    const uint8_t *xb;   /* activations in the AMX-BF16 "xb" layout (F16/BF16 on AMX-BF16 only) */
    uint8_t *panels;     /* AMX-BF16: per-thread weight panels, panel_bytes apart (NULL for <= 32 rows) */
    size_t panel_bytes;
} vs_mm_job;

/* Scalar twin of the activation quantiser (one block of 32): q[32] and the block scale d. */
void vs_xq_block_ref(const float *x, int8_t *q, float *d);

size_t vs_xq_row_bytes_ref(int64_t n_in);
void vs_xq_quantize_row_ref(const float *x, int64_t n_in, uint8_t *row);

/* AMX layout (Q8_0 / Q4_0 on AVX-512 VNNI and AMX CPUs and with AVX-VNNI, every row count): rows are grouped by 16 into G groups of
 * N columns (N = 16, or the next power of two >= n_rows when n_rows < 16; padding rows are zero).
 * For each block b and group g, one chunk of vs_xq_amx_chunk(N) bytes at ((b * G) + g) * chunk:
 *   int8 q, 32 N bytes: Q8_0: q[8][N][4], the 32 q of row (N g + c) at [k][c][j] for value 4 k + j (the
 *     VNNI order of an AMX B tile: 8 rows of N * 4 bytes); Q4_0: q[N][32], row c's 32 q in value order
 *     (an AMX A tile: N rows of 32 bytes);
 *   float d[16]: the d of row N g + c at [c] (0 for padding);
 *   int32 corr[16]: -K * sum of the row's 32 q at [c], K = 8 for Q4_0 (whose unsigned nibbles are q + 8),
 *     128 for Q8_0 (used as w + 128 by the VNNI kernels; the Q8_0 tiles multiply signed values and ignore
 *     it); 0 for padding rows. */
static inline int vs_xq_amx_N(int64_t n_rows) {
    int N = 1;
    while (N < 16 && N < n_rows) N *= 2;
    return N;
}
static inline int64_t vs_xq_amx_G(int64_t n_rows) { return n_rows >= 16 ? (n_rows + 15) / 16 : 1; }
static inline size_t vs_xq_amx_chunk(int N) { return (size_t)(32 * N + 128); }
static inline size_t vs_xq_amx_bytes(int64_t n_in, int64_t n_rows) {
    return (size_t)(n_in / 32) * (size_t)vs_xq_amx_G(n_rows) * vs_xq_amx_chunk(vs_xq_amx_N(n_rows));
}
/* Row c of a group's chunk ch (N columns): its 32 q (as 8 dwords), d and corr in their places; row 0 also
 * zeroes the scale and correction slots past N. */
static inline void vs_xq_amx_put(uint8_t *ch, int N, int c, vs_type wtype, const uint32_t q[8], float d, int32_t corr) {
    if (wtype == VS_TYPE_Q4_0) memcpy(ch + 32 * c, q, 32); /* rows of 32: an AMX A tile */
    else
        for (int k = 0; k < 8; k++) memcpy(ch + (size_t)(k * N + c) * 4, &q[k], 4); /* a B tile */
    memcpy(ch + 32 * N + 4 * c, &d, 4);
    memcpy(ch + 32 * N + 64 + 4 * c, &corr, 4);
    if (c == 0 && N < 16) { /* unused scale / correction slots */
        memset(ch + 32 * N + 4 * N, 0, (size_t)(64 - 4 * N));
        memset(ch + 32 * N + 64 + 4 * N, 0, (size_t)(64 - 4 * N));
    }
}
/* Row r (0 <= r < G * N: padding rows too) of the AMX layout; x NULL quantises a zero row. The _avx2 version
 * (AVX2 CPUs with AVX-VNNI) writes the same bytes. */
void vs_xq_quantize_row_amx(const float *x, int64_t n_in, vs_type wtype, int64_t n_rows, int64_t r, uint8_t *xq);
void vs_xq_quantize_row_amx_avx2(const float *x, int64_t n_in, vs_type wtype, int64_t n_rows, int64_t r,
                                 uint8_t *xq);
/* Outputs [o0, o1) for all rows from the AMX layout (job->xq); o0 a multiple of 16. */
void vs_mm_amx(const vs_mm_job *job, int64_t o0, int64_t o1);
/* Outputs [o0, o1) of 1 to 4 rows (n_rows <= 4) from the AMX layout, with AVX-512 VNNI instead of tiles
 * (cheaper for one row, and for Q4_0 up to a few); bitwise equal to vs_mm_amx on the same rows. */
void vs_mm_amx_vnni(const vs_mm_job *job, int64_t o0, int64_t o1);
/* Outputs [o0, o1) of Q8_0 or Q4_0 weights for any number of rows from the AMX layout with AVX-512 VNNI
 * on 16-output lanes (no tile instructions: the quantised-weight kernel of every AVX-512 VNNI CPU; on AMX
 * CPUs Q4_0 up to 4 rows), or Q4_0 with AMX tiles, the transposed weights as B (5+ rows); bitwise equal to
 * each other and to vs_mm_amx / vs_mm_amx_vnni. job->wp: the x16 copy (kernels.h) or NULL. */
void vs_mm_lanes_vnni(const vs_mm_job *job, int64_t o0, int64_t o1);
void vs_mm_amx_q4_tiles(const vs_mm_job *job, int64_t o0, int64_t o1);
/* Bytes of one 16-output tile's block in the x16 layout (kernels.h): Q8_0 8 x 64 quant bytes + 32 scale
 * bytes, Q4_0 4 x 64 + 32; per super-block of 256 Q4_K 2368, Q5_K 2880, Q6_K 3392. */
static inline size_t vs_x16_block_bytes(vs_type t) {
    switch (t) {
    case VS_TYPE_Q8_0: return 544;
    case VS_TYPE_Q4_K: return 2368;
    case VS_TYPE_Q5_K: return 2880;
    case VS_TYPE_Q6_K: return 3392;
    default: return 288;
    }
}
/* Q4_K / Q5_K / Q6_K from the x16 copy (job->wp, never NULL here) with AVX-512 VNNI, any number of rows
 * (arch/kernels_kquant_avx512.c): the float steps of vs_kq_x16_block, bitwise equal to vs_matmul_x16_ref. */
void vs_mm_kq_lanes(const vs_mm_job *job, int64_t o0, int64_t o1);
/* The same kernel for Q4_K / Q5_K on 8-output halves with AVX2 + AVX-VNNI (arch/kernels_kquant_avxvnni.c;
 * CPUs without AVX-512 or `VLMSPEC_ISA=avx2`): bitwise equal to vs_mm_kq_lanes. Call only when
 * vs_cpu_avxvnni(). */
void vs_mm_kq_lanes_avxvnni(const vs_mm_job *job, int64_t o0, int64_t o1);
/* Q8_0 / Q4_0 with AVX2 + AVX-VNNI on 8-output halves of the 16-output tiles, any number of rows, from the
 * AMX layout and the x16 copy (job->wp) or the GGUF rows (arch/kernels_quant_avxvnni.c): bitwise equal to
 * vs_mm_lanes_vnni. Call only when vs_cpu_avxvnni(). */
void vs_mm_lanes_avxvnni(const vs_mm_job *job, int64_t o0, int64_t o1);
/* Whether the CPU has AVX-VNNI (CPUID.(7,1):EAX bit 4) with the AVX2 level usable, and VLMSPEC_AVXVNNI is
 * not 0 (read once). */
bool vs_cpu_avxvnni(void);
/* Asks the OS for AMX tile state (once per process); false if unavailable. */
bool vs_amx_request(void);

/* AMX-BF16 path (F16 / BF16 weights, arch/kernels_amxbf16_avx512.c): activations split into bf16 halves
 * xh = bf16_rne(x), xl = bf16_rne(x - xh) (bf16_rne as VCVTNE2PS2BF16: f32 denormals read as 0), for F16
 * weights times 2^62 (exact; the kernel's fp16 split scales the weights by 2^-102 and the result by 2^40),
 * in the order of AMX B tiles. Rows are grouped by 8 into G = ceil(n_rows / 8) groups; row r = 8 g + c
 * owns columns 2c (xh) and 2c + 1 (xl) of its group's tile (always 16 columns: padding rows are 0).
 * Inputs go in steps of 32 (S = ceil(n_in / 32); inputs past n_in are 0). Step s, group g: one tile of
 * VS_XB_CHUNK bytes at (s * G + g) * VS_XB_CHUNK, uint32 [16][16] (16 rows of 64 bytes):
 *   [kp][2c] = (xh of input 32 s + 2 kp, xh of 32 s + 2 kp + 1) (a bf16 pair), [kp][2c + 1] the same
 *   of xl. */
#define VS_XB_CHUNK 1024
static inline size_t vs_xb_chunk(vs_type wtype) { (void)wtype; return VS_XB_CHUNK; }
static inline int64_t vs_xb_G(int64_t n_rows) { return (n_rows + 7) / 8; }
static inline int64_t vs_xb_steps(int64_t n_in) { return (n_in + 31) / 32; }
static inline size_t vs_xb_bytes(vs_type wtype, int64_t n_in, int64_t n_rows) {
    return (size_t)(vs_xb_steps(n_in) * vs_xb_G(n_rows)) * vs_xb_chunk(wtype);
}
/* Row r (0 <= r < 8 G, padding rows too) of the xb layout; x NULL writes a zero row (the scalar
 * reference). */
void vs_xb_convert_row_ref(const float *x, int64_t n_in, vs_type wtype, int64_t n_rows, int64_t r,
                           uint8_t *xb);
/* Group g (rows 8 g .. 8 g + 7, the padding rows zero) of the xb layout from the n_rows x n_in matrix x
 * (64-byte aligned xb): the same bytes as vs_xb_convert_row_ref of those 8 rows. The *_avx512 functions of
 * the AMX-BF16 file use AVX512-FP16 too: call them only when vs_cpu_amx_bf16(). */
void vs_xb_convert_group_avx512(const float *x, int64_t n_in, vs_type wtype, int64_t n_rows, int64_t g,
                                uint8_t *xb);
/* fp16 -> bf16 hi + lo with (hi + lo) * 2^102 == w exactly (hi = w truncated to 8 significant bits, both
 * scaled by 2^-102 as the kernel's A tiles hold them; every finite w). */
void vs_f16_split_bf16_avx512(const uint16_t *w, int64_t n, uint16_t *hi, uint16_t *lo);
void vs_f16_split_bf16_ref(const uint16_t *w, int64_t n, uint16_t *hi, uint16_t *lo);
/* Outputs [o0, o1) for all rows from job->xb with AMX-BF16 tiles (F16 / BF16 weights). panel: this
 * thread's scratch of vs_mm_amx_bf16_panel_bytes (64-byte aligned; 0 bytes, NULL allowed, for <= 32 rows)
 * holding a 16-output panel of converted weights while it is applied to more than 4 row groups. */
size_t vs_mm_amx_bf16_panel_bytes(int64_t n_in, int64_t n_rows);
void vs_mm_amx_bf16(const vs_mm_job *job, int64_t o0, int64_t o1, void *panel);
/* Whether the CPU has AMX-BF16 and AVX512-FP16 (with AMX tiles usable: VS_ISA_AMX detected). */
bool vs_cpu_amx_bf16(void);

/* Reads n bytes (n a multiple of 64, p 64-byte aligned) and returns a checksum, for bandwidth tests. */
uint64_t vs_read_sum_avx2(const uint8_t *p, size_t n);
uint64_t vs_read_sum_avx512(const uint8_t *p, size_t n);

/* F16 / BF16 rows to f32. */
void vs_half_to_f32_avx512(vs_type t, const uint16_t *src, float *dst, int64_t n);

/* AVX2 (scalar layout). */
void vs_xq_quantize_row_avx2(const float *x, int64_t n_in, uint8_t *row);
void vs_mm_avx2(const vs_mm_job *job, int64_t o0, int64_t o1);
void vs_rmsnorm_avx2(float *out, const float *x, const float *weight, int64_t n, float eps);
void vs_softmax_avx2(float *x, int64_t n);
float vs_dot_f32_avx2(const float *a, const float *b, int64_t n);
void vs_axpy_f32_avx2(float *y, float a, const float *x, int64_t n);

/* AVX-512 (F/BW/VL/DQ). */
/* F32 / F16 / BF16 only (quantised weights: vs_mm_lanes_vnni). */
void vs_mm_avx512(const vs_mm_job *job, int64_t o0, int64_t o1);
void vs_rmsnorm_avx512(float *out, const float *x, const float *weight, int64_t n, float eps);
void vs_softmax_avx512(float *x, int64_t n);
float vs_max_f32_avx512(const float *x, int64_t n); /* max of x[0..n), n >= 1 (-inf entries allowed) */
int64_t vs_argmax_f32_avx512(const float *x, int64_t n); /* vs_argmax_f32 (kernels.h) */
float vs_dot_f32_avx512(const float *a, const float *b, int64_t n);
void vs_axpy_f32_avx512(float *y, float a, const float *x, int64_t n);

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__F16C__)
#include <immintrin.h>
/* THE activation quantiser of the AVX-512 and AMX paths (one block of 32; the same q and d as
 * vs_xq_block_ref and the AVX2 quantiser: id = 127 / amax, q = round_half_even(x * id), d =
 * fp16(amax / 127)). q comes back as two vectors of 16 int32 (values 0..15, 16..31). Only files compiled
 * with AVX-512 see it. */
static inline __attribute__((always_inline)) void vs_xq_block_avx512(const float *x, __m512i *q0, __m512i *q1,
                                                                     float *d) {
    __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    *d = _cvtsh_ss(_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT));
    __m512 vid = _mm512_set1_ps(id);
    /* cvtps rounds to nearest even (the default mode), like rintf in the scalar twin */
    *q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, vid));
    *q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, vid));
}
#endif

#endif
