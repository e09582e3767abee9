/* kernels: ISA detection and dispatch, the scalar twins, and the threaded matmul driver.
 * vs_matmul quantises the activations once per call (Q8_0/Q4_0 weights: blocks of 32; the K-quants:
 * super-blocks of 256 with block sums, the xk layout of kernels_arch.h) into scratch owned by the
 * thread pool, then splits the output features over the threads in chunks of 16 (64 bytes of every
 * output row, so no two threads write the same cache line of y) and runs the ISA's kernel. */
#include "kernels.h"

#include <assert.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "arch/kernels_arch.h"

#ifdef VS_HAVE_OPENBLAS
#include <cblas.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define VS_X86 1
#endif

/* ---- ISA detection and the cap ---- */

#ifdef VS_X86
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

static vs_isa detect_uncached(void) {
#ifdef VS_X86
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return VS_ISA_SCALAR;
    bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
    if (!osxsave || !avx || !fma || !f16c) return VS_ISA_SCALAR;
    uint64_t xcr0 = xgetbv0();
    if ((xcr0 & 0x6) != 0x6) return VS_ISA_SCALAR; /* OS saves SSE + AVX state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return VS_ISA_SCALAR;
    bool avx2 = b & (1u << 5);
    if (!avx2) return VS_ISA_SCALAR;
    bool f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30), vl = b & (1u << 31);
    bool vnni = c & (1u << 11);
    unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
    __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1);
    bool bf16 = a1 & (1u << 5); /* the AVX-512 file is compiled with -mavx512bf16 */
    if (!(f && dq && bw && vl && vnni && bf16 && (xcr0 & 0xe0) == 0xe0)) return VS_ISA_AVX2;
    bool amx_tile = d & (1u << 24), amx_int8 = d & (1u << 25);
    /* XCR0 bits 17/18: the OS manages tile state; then Linux wants a per-process permission request. */
    if (amx_tile && amx_int8 && (xcr0 & 0x60000) == 0x60000 && vs_amx_request()) return VS_ISA_AMX;
    return VS_ISA_AVX512;
#else
    return VS_ISA_SCALAR;
#endif
}

/* Cached detection and the cap: the only process-wide state here (a CPU property, and a test knob). */
static atomic_int g_detected = -1;
static atomic_int g_amx_bf16 = -1;

/* AMX-BF16 (CPUID.(7,0):EDX bit 22) and AVX512-FP16 (bit 23) on top of usable AMX tiles (VS_ISA_AMX). */
bool vs_cpu_amx_bf16(void) {
    int v = atomic_load_explicit(&g_amx_bf16, memory_order_relaxed);
    if (v < 0) {
        v = 0;
#ifdef VS_X86
        unsigned a, b, c, d;
        /* the kernel's fp16 split uses AVX512-FP16 (EDX bit 23), which every AMX-BF16 CPU has */
        if (vs_isa_detect() == VS_ISA_AMX && __get_cpuid_count(7, 0, &a, &b, &c, &d))
            v = ((d >> 22) & 1) && ((d >> 23) & 1);
#endif
        atomic_store(&g_amx_bf16, v);
    }
    return v;
}
static atomic_int g_avxvnni = -1, g_avxvnni_allow = -1;

bool vs_cpu_avxvnni(void) {
    int v = atomic_load_explicit(&g_avxvnni, memory_order_relaxed);
    if (v < 0) {
        v = 0;
#ifdef VS_X86
        unsigned a, b, c, d;
        if (vs_isa_detect() >= VS_ISA_AVX2 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) v = (a >> 4) & 1;
#endif
        atomic_store(&g_avxvnni, v);
    }
    int allow = atomic_load_explicit(&g_avxvnni_allow, memory_order_relaxed);
    if (allow < 0) {
        const char *e = getenv("VLMSPEC_AVXVNNI");
        allow = !(e && !strcmp(e, "0"));
        int expected = -1;
        atomic_compare_exchange_strong(&g_avxvnni_allow, &expected, allow);
        allow = atomic_load(&g_avxvnni_allow);
    }
    return v && allow;
}

bool vs_avxvnni_allow(bool allow) {
    atomic_store(&g_avxvnni_allow, allow ? 1 : 0);
    return vs_cpu_avxvnni();
}

static atomic_int g_cap = -1;

vs_isa vs_isa_detect(void) {
    int v = atomic_load_explicit(&g_detected, memory_order_relaxed);
    if (v < 0) {
        v = (int)detect_uncached();
        atomic_store(&g_detected, v);
    }
    return (vs_isa)v;
}

const char *vs_isa_name(vs_isa isa) {
    switch (isa) {
    case VS_ISA_SCALAR: return "scalar";
    case VS_ISA_AVX2: return "avx2";
    case VS_ISA_AVX512: return "avx512";
    case VS_ISA_AMX: return "amx";
    }
    return "?";
}

static vs_isa isa_current(void) {
    int cap = atomic_load_explicit(&g_cap, memory_order_relaxed);
    if (cap < 0) {
        cap = (int)VS_ISA_AMX;
        const char *env = getenv("VLMSPEC_ISA");
        if (env) {
            if (!strcmp(env, "scalar")) cap = VS_ISA_SCALAR;
            else if (!strcmp(env, "avx2")) cap = VS_ISA_AVX2;
            else if (!strcmp(env, "avx512")) cap = VS_ISA_AVX512;
        }
        int expected = -1;
        atomic_compare_exchange_strong(&g_cap, &expected, cap);
        cap = atomic_load(&g_cap);
    }
    int det = (int)vs_isa_detect();
    return (vs_isa)(cap < det ? cap : det);
}

vs_isa vs_isa_set_max(vs_isa isa) {
    atomic_store(&g_cap, (int)isa);
    return isa_current();
}

vs_isa vs_isa_active(void) { return isa_current(); }

/* The vector-op ISA: AMX adds tiles, its vector ops are AVX-512's. */
static vs_isa vec_isa(void) {
    vs_isa i = isa_current();
    return i == VS_ISA_AMX ? VS_ISA_AVX512 : i;
}

/* ---- activation quantisation (scalar twin) ---- */

void vs_xq_block_ref(const float *x, int8_t *q, float *d) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    *d = vs_fp16_to_fp32(vs_fp32_to_fp16(amax / 127.0f));
    for (int j = 0; j < 32; j++) q[j] = (int8_t)rintf(x[j] * id); /* default mode: ties to even */
}

static int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

size_t vs_xq_row_bytes_ref(int64_t n_in) {
    return (size_t)round_up(round_up(n_in, 64) + n_in / 32 * 4, 64);
}

void vs_xq_quantize_row_ref(const float *x, int64_t n_in, uint8_t *row) {
    int8_t *q = (int8_t *)row;
    float *d = (float *)(row + round_up(n_in, 64));
    for (int64_t b = 0; b < n_in / 32; b++) vs_xq_block_ref(x + b * 32, q + b * 32, &d[b]);
}

/* One super-block of 256 (the xk quantiser; kernels_arch.h): q, d, and the 16 sums of 16. */
static void xk_block_ref(const float *x, int8_t *q, float *d, int16_t *bsum) {
    float amax = 0.0f;
    for (int j = 0; j < 256; j++) amax = fmaxf(amax, fabsf(x[j]));
    float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    *d = amax > 0.0f ? 1.0f / id : 0.0f; /* 1 / id, not amax / 127: llama.cpp's Q8_K scale, bit for bit */
    for (int j = 0; j < 256; j++) q[j] = (int8_t)rintf(x[j] * id);
    for (int k = 0; k < 16; k++) {
        int s = 0;
        for (int j = 0; j < 16; j++) s += q[16 * k + j];
        bsum[k] = (int16_t)s;
    }
}

void vs_xk_quantize_row_ref(const float *x, int64_t n_in, uint8_t *row) {
    float *d = (float *)(row + vs_xk_d_offset(n_in));
    int16_t *bs = (int16_t *)(row + vs_xk_bsum_offset(n_in));
    for (int64_t b = 0; b < n_in / 256; b++) xk_block_ref(x + b * 256, (int8_t *)row + b * 256, &d[b], bs + b * 16);
}

/* ---- the AMX-BF16 activation layout and the fp16 split (scalar twins) ---- */

/* f32 -> bf16 as VCVTNE2PS2BF16 does it: round to nearest even, denormal inputs read as (signed) zero. */
static uint16_t bf16_rne_daz(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0) return (uint16_t)((u >> 16) & 0x8000u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

void vs_xb_convert_row_ref(const float *x, int64_t n_in, vs_type wtype, int64_t n_rows, int64_t r,
                           uint8_t *xb) {
    const int64_t G = vs_xb_G(n_rows), g = r / 8, c = r % 8;
    const float scale = wtype == VS_TYPE_F16 ? 0x1p62f : 1.0f;
    for (int64_t s = 0; s < vs_xb_steps(n_in); s++) {
        /* [16 kp][16 columns][2] */
        uint16_t *ch = (uint16_t *)(xb + (size_t)(s * G + g) * vs_xb_chunk(wtype));
        for (int k = 0; k < 32; k++) {
            int64_t i = 32 * s + k;
            float v = x && i < n_in ? x[i] : 0.0f;
            uint16_t h = bf16_rne_daz(v), l = bf16_rne_daz(v - vs_bf16_to_fp32(h));
            uint16_t *at = ch + (k / 2) * 32 + 4 * c + k % 2; /* row k / 2, half k % 2 of columns 2c, 2c+1 */
            at[0] = vs_fp32_to_bf16(vs_bf16_to_fp32(h) * scale); /* exact */
            at[2] = vs_fp32_to_bf16(vs_bf16_to_fp32(l) * scale);
        }
    }
}

void vs_f16_split_bf16_ref(const uint16_t *w, int64_t n, uint16_t *hi, uint16_t *lo) {
    for (int64_t i = 0; i < n; i++) {
        float f = vs_fp16_to_fp32(w[i]), fh;
        uint32_t u;
        memcpy(&u, &f, 4);
        u &= 0xffff0000u; /* truncation to 8 significant bits */
        memcpy(&fh, &u, 4);
        hi[i] = vs_fp32_to_bf16(fh * 0x1p-102f);        /* exact: >= 2^-24 * 2^-102 */
        lo[i] = vs_fp32_to_bf16((f - fh) * 0x1p-102f); /* exact: no rounding happens */
    }
}

/* ---- scalar matmul: the reference twin and the threaded scalar path ---- */

static float w_elem(vs_type t, const uint8_t *row, int64_t i) {
    switch (t) {
    case VS_TYPE_F32: {
        float v;
        memcpy(&v, row + 4 * i, 4);
        return v;
    }
    case VS_TYPE_F16: {
        uint16_t h;
        memcpy(&h, row + 2 * i, 2);
        return vs_fp16_to_fp32(h);
    }
    case VS_TYPE_BF16: {
        uint16_t h;
        memcpy(&h, row + 2 * i, 2);
        return vs_bf16_to_fp32(h);
    }
    default: return 0.0f;
    }
}

/* Integer dot of one weight block with 32 quantised activations, and the weight block's scale. */
static int32_t block_idot(vs_type t, const uint8_t *wrow, int64_t b, const int8_t *q, float *dw) {
    int32_t s = 0;
    if (t == VS_TYPE_Q8_0) {
        const vs_block_q8_0 *blk = (const vs_block_q8_0 *)wrow + b;
        *dw = vs_fp16_to_fp32(blk->d);
        for (int j = 0; j < 32; j++) s += (int32_t)blk->qs[j] * q[j];
    } else {
        const vs_block_q4_0 *blk = (const vs_block_q4_0 *)wrow + b;
        *dw = vs_fp16_to_fp32(blk->d);
        for (int j = 0; j < 16; j++) {
            s += ((blk->qs[j] & 0x0f) - 8) * q[j];
            s += ((blk->qs[j] >> 4) - 8) * q[j + 16];
        }
    }
    return s;
}

/* The code (0..15, 0..31 or 0..63) of value i of a K-quant super-block, read value by value. */
static int kq_code(vs_type t, const uint8_t *blk, int i) {
    if (t == VS_TYPE_Q6_K) {
        const vs_block_q6_k *b = (const vs_block_q6_k *)blk;
        const int h = i / 128, k = (i / 32) % 4, l = i % 32;
        const int lo = (b->ql[64 * h + l + 32 * (k & 1)] >> (4 * (k / 2))) & 15;
        return lo | (((b->qh[32 * h + l] >> (2 * k)) & 3) << 4);
    }
    const int g = i / 64, l = i % 32, j = i / 32;
    const uint8_t *qs = t == VS_TYPE_Q4_K ? ((const vs_block_q4_k *)blk)->qs : ((const vs_block_q5_k *)blk)->qs;
    int c = (qs[32 * g + l] >> (4 * (j % 2))) & 15;
    if (t == VS_TYPE_Q5_K) c |= ((((const vs_block_q5_k *)blk)->qh[l] >> j) & 1) << 4;
    return c;
}

/* Super-block b of a K-quant row times its 256 quantised activations q (with their 16 sums bs): the
 * exact integer lanes sumi and m of vs_kq_acc_block, and the block's scales. */
static void kblock_idot(vs_type t, const uint8_t *wrow, int64_t b, const int8_t *q, const int16_t *bs,
                        int32_t sumi[8], int32_t *m, float *d, float *dmin) {
    const uint8_t *blk = wrow + (size_t)b * vs_type_block_bytes(t);
    int sc[16], mn[8] = {0};
    if (t == VS_TYPE_Q6_K) {
        const vs_block_q6_k *k6 = (const vs_block_q6_k *)blk;
        *d = vs_fp16_to_fp32(k6->d);
        *dmin = 0.0f;
        for (int j = 0; j < 16; j++) sc[j] = k6->scales[j];
    } else {
        const vs_block_q4_k *k4 = (const vs_block_q4_k *)blk; /* d, dmin, scales: the same in Q5_K */
        *d = vs_fp16_to_fp32(k4->d);
        *dmin = vs_fp16_to_fp32(k4->dmin);
        for (int j = 0; j < 8; j++) vs_kq_scale_min(j, k4->scales, &sc[j], &mn[j]);
    }
    *m = 0;
    for (int k = 0; k < 8; k++) {
        int32_t s = 0;
        for (int c = 0; c < 8; c++)
            for (int l = 4 * k; l < 4 * k + 4; l++) {
                const int scale = t == VS_TYPE_Q6_K ? sc[2 * c + l / 16] : sc[c];
                s += scale * kq_code(t, blk, 32 * c + l) * q[32 * c + l];
            }
        if (t == VS_TYPE_Q6_K) s -= 32 * (sc[2 * k] * bs[2 * k] + sc[2 * k + 1] * bs[2 * k + 1]);
        else *m += mn[k] * (bs[2 * k] + bs[2 * k + 1]);
        sumi[k] = s;
    }
}

/* Output o of one quantised activation row (the xk layout) on K-quant weights: vs_kq_acc in block order. */
static float kq_dot_ref(vs_type t, const uint8_t *wr, const uint8_t *xrow, int64_t n_in) {
    const float *dx = (const float *)(xrow + vs_xk_d_offset(n_in));
    const int16_t *bs = (const int16_t *)(xrow + vs_xk_bsum_offset(n_in));
    vs_kq_acc acc = {{0}, 0};
    for (int64_t b = 0; b < n_in / 256; b++) {
        int32_t sumi[8], m;
        float d, dmin;
        kblock_idot(t, wr, b, (const int8_t *)xrow + b * 256, bs + b * 16, sumi, &m, &d, &dmin);
        vs_kq_acc_block(&acc, d, dmin, dx[b], sumi, m);
    }
    return vs_kq_acc_result(t, &acc);
}

/* The same with the float steps of the kernels that read the x16 copy (vs_kq_x16_block). */
static float kq_dot_x16_ref(vs_type t, const uint8_t *wr, const uint8_t *xrow, int64_t n_in) {
    const float *dx = (const float *)(xrow + vs_xk_d_offset(n_in));
    const int16_t *bs = (const int16_t *)(xrow + vs_xk_bsum_offset(n_in));
    float acc = 0.0f, macc = 0.0f;
    for (int64_t b = 0; b < n_in / 256; b++) {
        int32_t sumi[8], m, s = 0;
        float d, dmin;
        kblock_idot(t, wr, b, (const int8_t *)xrow + b * 256, bs + b * 16, sumi, &m, &d, &dmin);
        for (int k = 0; k < 8; k++) s += sumi[k];
        vs_kq_x16_block(&acc, &macc, d, dmin, dx[b], s, m);
    }
    return t == VS_TYPE_Q6_K ? acc : acc + macc;
}

static bool is_quant(vs_type t) { return t == VS_TYPE_Q8_0 || t == VS_TYPE_Q4_0 || vs_type_is_kquant(t); }

static void matmul_ref(vs_type wtype, const void *w, int64_t n_out, int64_t n_in, const float *x, int64_t n_rows,
                       float *y, bool x16_steps) {
    size_t rb = vs_type_row_bytes(wtype, n_in);
    assert(vs_type_supported(wtype) && (rb > 0 || n_in == 0));
    const uint8_t *wb = w;
    if (!is_quant(wtype)) {
        for (int64_t r = 0; r < n_rows; r++)
            for (int64_t o = 0; o < n_out; o++) {
                float s = 0.0f;
                for (int64_t i = 0; i < n_in; i++) s += w_elem(wtype, wb + o * rb, i) * x[r * n_in + i];
                y[r * n_out + o] = s;
            }
        return;
    }
    if (vs_type_is_kquant(wtype)) { /* each row quantised once into a scratch row */
        uint8_t *xq = vs_malloc(vs_xk_row_bytes(n_in));
        assert(xq);
        for (int64_t r = 0; r < n_rows; r++) {
            vs_xk_quantize_row_ref(x + r * n_in, n_in, xq);
            for (int64_t o = 0; o < n_out; o++)
                y[r * n_out + o] = (x16_steps ? kq_dot_x16_ref : kq_dot_ref)(wtype, wb + o * rb, xq, n_in);
        }
        vs_free(xq);
        return;
    }
    /* Block-outer loop: each activation block is quantised once and needs no scratch; every y element
     * still accumulates its blocks in order 0, 1, 2, ... */
    for (int64_t r = 0; r < n_rows; r++) {
        float *yr = y + r * n_out;
        for (int64_t o = 0; o < n_out; o++) yr[o] = 0.0f;
        for (int64_t b = 0; b < n_in / 32; b++) {
            int8_t q[32];
            float dx;
            vs_xq_block_ref(x + r * n_in + b * 32, q, &dx);
            for (int64_t o = 0; o < n_out; o++) {
                float dw;
                int32_t s = block_idot(wtype, wb + o * rb, b, q, &dw);
                yr[o] += (float)s * (dw * dx);
            }
        }
    }
}

void vs_matmul_ref(vs_type wtype, const void *w, int64_t n_out, int64_t n_in, const float *x, int64_t n_rows,
                   float *y) {
    matmul_ref(wtype, w, n_out, n_in, x, n_rows, y, false);
}

void vs_matmul_x16_ref(vs_type wtype, const void *w, int64_t n_out, int64_t n_in, const float *x, int64_t n_rows,
                       float *y) {
    matmul_ref(wtype, w, n_out, n_in, x, n_rows, y, vs_type_is_kquant(wtype));
}

/* The threaded scalar path (ISA cap "scalar"): same math, reading the scalar xq layout. */
static void mm_scalar(const vs_mm_job *jb, int64_t o0, int64_t o1) {
    int64_t nb = jb->n_in / 32;
    for (int64_t r = 0; r < jb->n_rows; r++) {
        for (int64_t o = o0; o < o1; o++) {
            const uint8_t *wr = jb->w + o * jb->w_row_bytes;
            float s = 0.0f;
            if (vs_type_is_kquant(jb->wtype)) {
                s = kq_dot_ref(jb->wtype, wr, jb->xq + r * jb->xq_row_bytes, jb->n_in);
            } else if (is_quant(jb->wtype)) {
                const uint8_t *row = jb->xq + r * jb->xq_row_bytes;
                const int8_t *q = (const int8_t *)row;
                const float *d = (const float *)(row + round_up(jb->n_in, 64));
                for (int64_t b = 0; b < nb; b++) {
                    float dw;
                    int32_t is = block_idot(jb->wtype, wr, b, q + b * 32, &dw);
                    s += (float)is * (dw * d[b]);
                }
            } else {
                const float *xr = jb->x + r * jb->n_in;
                for (int64_t i = 0; i < jb->n_in; i++) s += w_elem(jb->wtype, wr, i) * xr[i];
            }
            jb->y[r * jb->n_out + o] = s;
        }
    }
}

/* ---- the threaded driver ---- */

/* With AMX, Q8_0/Q4_0 use the AMX layout for every row count (batch invariance: one quantiser, one
 * per-lane float epilogue): tiles, or for few rows the bitwise-equal VNNI kernel vs_mm_amx_vnni. */
static int64_t amx_min_rows(vs_type t) { (void)t; return 1; }
/* Up to this many rows the VNNI kernels over the AMX layout beat the tiles (kbench, 1 thread; Q8_0: 5632 x
 * 2048 from DRAM, noisy, 2 rows 1.26-1.36 vs 1.11-1.13 ms with tiles; Q4_0: 1024 x 1024 from L2, medians
 * of 300, VNNI / tiles 1 row 31 / 49 us, 2 rows 38 / 50, 4 rows 54 / 55, 6 rows 65 / 60, 16 rows 147 / 102). */
static int64_t amx_vnni_max_rows(vs_type t) { return t == VS_TYPE_Q8_0 ? 1 : 4; }
/* F16 / BF16 matrices on AMX-BF16 tiles (when the CPU has them) for EVERY row count: the choice depends on
 * the matrix and the caller's flags, never on the row count, so one row gets the same split-bf16
 * arithmetic as a batch (batch invariance). Default (VS_MM_DEFAULT): BF16 matrices of at least
 * VS_AMXBF16_MIN_BYTES_BF16 (below); F16 matrices of VS_AMXBF16_MIN_BYTES to
 * VS_AMXBF16_MAX_BYTES with rows of at least VS_AMXBF16_MIN_IN inputs. Bigger ones stream from DRAM in
 * any model holding them, where one row on the FMA kernel runs at the memory roofline and the tile path's
 * conversion does not overlap the misses as well (5632 x 2048 F16 from DRAM, one row: 1.9 vs 1.4 ms);
 * smaller ones are usually parts of small, cache-resident models (drafters), where one row is
 * compute-bound and the conversion plus the per-tile start and drain cost more than the FMA kernel
 * (192 x 512 from L1/L2: 18 vs 7 us; a 2.1M-parameter F16 model of width 192 decoded 8% slower with only
 * its 2048 x 192 output matrix on the tiles). In between (the 25M target's matrices, streamed from L3)
 * the tile path is faster for one row as well. A caller that knows where its weights live passes
 * VS_MM_AMX_BF16 / VS_MM_NO_AMX_BF16 (vs_matmul_ex); VLMSPEC_AMX_BF16=all|off overrides everything
 * (measurements). F32 always stays on the FMA kernel. */
#define VS_AMXBF16_MIN_BYTES ((size_t)256 << 10)
#define VS_AMXBF16_MIN_IN 256 /* shorter rows: too few input steps per tile to hide its start and drain */
#define VS_AMXBF16_MAX_BYTES ((size_t)4 << 20)
/* BF16 weights need no conversion on the tiles (their rows are loaded as they are) while the FMA kernel
 * still widens every weight, so the tiles win for one row from 128 KiB up, at every size (kbench, BF16,
 * one thread, one row, tiles / FMA: 512 x 192 from L3 8.6 / 16.1 us, 2048 x 192 32 / 52, 2048 x 512 84 /
 * 146, 1408 x 512 61 / 66, 192 x 512 13.4 / 13.8, 512 x 1408 67 / 59; 5632 x 2048 from DRAM 1.34 / 1.58
 * ms; below: 192 x 192 8.3 / 8.5, 64 x 192 3.1 / 2.6; from L2: 512 x 192 5.5 / 7.0, 2048 x 192 18.5 / 27.9,
 * 192 x 512 8.4 / 6.3). */
#define VS_AMXBF16_MIN_BYTES_BF16 ((size_t)128 << 10)
static atomic_int g_amxbf16_mode = -1; /* 0 off, 1 by flags and size, 2 all */

static int amx_bf16_mode(void) {
    int m = atomic_load_explicit(&g_amxbf16_mode, memory_order_relaxed);
    if (m < 0) {
        const char *e = getenv("VLMSPEC_AMX_BF16");
        int v = e && !strcmp(e, "off") ? 0 : e && !strcmp(e, "all") ? 2 : 1, expected = -1;
        atomic_compare_exchange_strong(&g_amxbf16_mode, &expected, v);
        m = atomic_load(&g_amxbf16_mode);
    }
    return m;
}

static bool use_amx_bf16(vs_type t, int64_t n_out, int64_t n_in, unsigned flags) {
    if (!(t == VS_TYPE_F16 || t == VS_TYPE_BF16) || !vs_cpu_amx_bf16()) return false;
    int m = amx_bf16_mode();
    if (m != 1) return m == 2;
    if (flags & VS_MM_NO_AMX_BF16) return false;
    if (flags & VS_MM_AMX_BF16) return true;
    size_t bytes = vs_type_row_bytes(t, n_in) * (size_t)n_out;
    if (t == VS_TYPE_BF16) return bytes >= VS_AMXBF16_MIN_BYTES_BF16;
    return bytes >= VS_AMXBF16_MIN_BYTES && bytes <= VS_AMXBF16_MAX_BYTES && n_in >= VS_AMXBF16_MIN_IN;
}

/* Whether ISA isa has a K-quant kernel that reads the x16 copy of type t: AVX-512 VNNI (and AMX CPUs)
 * for all three; AVX2 with AVX-VNNI for Q4_K / Q5_K (Q6_K's AVX2 kernel is faster at one row). */
static bool kq_reads_copy(vs_type t, vs_isa isa) {
    return isa >= VS_ISA_AVX512 || (isa == VS_ISA_AVX2 && t != VS_TYPE_Q6_K && vs_cpu_avxvnni());
}

/* Whether Q8_0 / Q4_0 run on the AMX activation layout (kernels_arch.h) at ISA isa: the output-lane
 * kernels and tiles of AVX-512 VNNI and AMX CPUs, and the lane kernel of AVX2 with AVX-VNNI. */
static bool q_lanes(vs_isa isa) { return isa >= VS_ISA_AVX512 || (isa == VS_ISA_AVX2 && vs_cpu_avxvnni()); }

typedef struct mm_ctx {
    vs_mm_job job;
    vs_isa isa;      /* VS_ISA_AMX only when an AMX kernel runs (INT8 for Q8_0/Q4_0, BF16 for F16/BF16) */
    int64_t q_rows;  /* rows to quantise (AMX layout: padded to whole groups) */
    bool lanes;      /* Q8_0 / Q4_0 on the AMX layout (q_lanes), decided once per call */
    uint8_t *xq_out; /* writable view of job.xq for the quantisation pass */
} mm_ctx;

static void quant_rows(mm_ctx *c, int64_t r0, int64_t r1) {
    if (c->isa == VS_ISA_AMX && !is_quant(c->job.wtype)) { /* r0, r1: whole groups of 8 */
        for (int64_t g = r0 / 8; g < r1 / 8; g++)
            vs_xb_convert_group_avx512(c->job.x, c->job.n_in, c->job.wtype, c->job.n_rows, g, c->xq_out);
        return;
    }
    if (c->lanes) { /* Q8_0 / Q4_0: the AMX layout */
        for (int64_t r = r0; r < r1; r++)
            (c->isa >= VS_ISA_AVX512 ? vs_xq_quantize_row_amx : vs_xq_quantize_row_amx_avx2)(
                r < c->job.n_rows ? c->job.x + r * c->job.n_in : NULL, c->job.n_in, c->job.wtype, c->job.n_rows, r,
                c->xq_out);
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = c->job.x + r * c->job.n_in;
        uint8_t *dst = c->xq_out + r * c->job.xq_row_bytes;
        if (vs_type_is_kquant(c->job.wtype)) { /* one layout for every ISA */
            if (c->isa >= VS_ISA_AVX2) vs_xk_quantize_row_avx2(xr, c->job.n_in, dst);
            else vs_xk_quantize_row_ref(xr, c->job.n_in, dst);
            continue;
        }
        switch (c->isa) {
        case VS_ISA_AVX2: vs_xq_quantize_row_avx2(xr, c->job.n_in, dst); break;
        default: vs_xq_quantize_row_ref(xr, c->job.n_in, dst); break;
        }
    }
}

static void quant_task(void *p, int ith, int nth) {
    mm_ctx *c = p;
    int64_t r0, r1;
    vs_split_range(c->q_rows, ith, nth, 16, &r0, &r1); /* whole AMX groups: no shared cache lines */
    quant_rows(c, r0, r1);
}

static void mm_task(void *p, int ith, int nth) {
    mm_ctx *c = p;
    int64_t o0, o1;
    vs_split_range(c->job.n_out, ith, nth, 16, &o0, &o1);
    if (o0 >= o1) return;
    switch (c->isa) {
    case VS_ISA_AMX:
        if (!is_quant(c->job.wtype))
            vs_mm_amx_bf16(&c->job, o0, o1,
                           c->job.panels ? c->job.panels + (size_t)ith * c->job.panel_bytes : NULL);
        else if (c->job.wtype == VS_TYPE_Q4_0)
            (c->job.n_rows <= amx_vnni_max_rows(VS_TYPE_Q4_0) ? vs_mm_lanes_vnni : vs_mm_amx_q4_tiles)(&c->job, o0, o1);
        else if (c->job.n_rows <= amx_vnni_max_rows(c->job.wtype)) vs_mm_amx_vnni(&c->job, o0, o1);
        else vs_mm_amx(&c->job, o0, o1);
        break;
    case VS_ISA_AVX512:
        if (vs_type_is_kquant(c->job.wtype)) vs_mm_kq_lanes(&c->job, o0, o1);
        else (is_quant(c->job.wtype) ? vs_mm_lanes_vnni : vs_mm_avx512)(&c->job, o0, o1);
        break;
    case VS_ISA_AVX2:
        if (vs_type_is_kquant(c->job.wtype) && c->job.wp) vs_mm_kq_lanes_avxvnni(&c->job, o0, o1);
        else if (c->lanes) vs_mm_lanes_avxvnni(&c->job, o0, o1);
        else vs_mm_avx2(&c->job, o0, o1);
        break;
    default: mm_scalar(&c->job, o0, o1); break;
    }
}

void vs_row_to_f32(vs_type t, const void *src, float *dst, int64_t n) {
    if ((t == VS_TYPE_F16 || t == VS_TYPE_BF16) && vec_isa() == VS_ISA_AVX512) vs_half_to_f32_avx512(t, src, dst, n);
    else vs_dequantize_row(t, src, dst, n);
}

#ifdef VS_HAVE_OPENBLAS
/* Large batches of F32 / F16 / BF16 weights: OpenBLAS sgemm (threaded by OpenBLAS itself, with as many
 * threads as the pool), half-precision weights converted to f32 a chunk of outputs at a time by the
 * pool. The register-blocked built-in kernel is as fast up to ~128 rows (vlmspec kbench, one thread:
 * 64 rows 2.1 vs 2.7 ms, 577 rows 20 vs 19 ms for F16 512 x 2048); the f32 math is the twin's. */
#define VS_BLAS_MIN_ROWS 128
#define VS_BLAS_CHUNK 256

typedef struct conv_ctx {
    vs_type t;
    const uint8_t *w;
    size_t rb;
    int64_t n_in, o0, o1;
    float *dst; /* (o1 - o0, n_in) */
} conv_ctx;

static void conv_task(void *p, int ith, int nth) {
    conv_ctx *c = p;
    int64_t a, b;
    vs_split_range(c->o1 - c->o0, ith, nth, 4, &a, &b);
    for (int64_t o = a; o < b; o++) vs_row_to_f32(c->t, c->w + (c->o0 + o) * c->rb, c->dst + o * c->n_in, c->n_in);
}

/* VLMSPEC_NO_BLAS=1 (or vs_matmul_set_blas(false)) keeps the built-in kernels. */
static atomic_int g_blas = -1;

static bool blas_allowed(void) {
    int a = atomic_load_explicit(&g_blas, memory_order_relaxed);
    if (a < 0) {
        const char *e = getenv("VLMSPEC_NO_BLAS");
        int v = !(e && *e && strcmp(e, "0")), expected = -1;
        atomic_compare_exchange_strong(&g_blas, &expected, v);
        a = atomic_load(&g_blas);
    }
    return a;
}

static bool matmul_blas(vs_threadpool *tp, vs_type wtype, const void *w, int64_t n_out, int64_t n_in,
                        const float *x, int64_t n_rows, float *y) {
    if (n_rows > INT32_MAX || n_out > INT32_MAX || n_in > INT32_MAX) return false;
    openblas_set_num_threads(vs_threadpool_size(tp));
    if (wtype == VS_TYPE_F32) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n_rows, (int)n_out, (int)n_in, 1.0f, x, (int)n_in,
                    w, (int)n_in, 0.0f, y, (int)n_out);
        return true;
    }
    int64_t chunk = VS_MIN(n_out, VS_BLAS_CHUNK);
    size_t bytes = sizeof(float) * (size_t)(chunk * n_in);
    void *owned = NULL;
    float *buf = tp ? vs_threadpool_scratch(tp, bytes) : (owned = vs_malloc(bytes));
    if (!buf) return false;
    conv_ctx c = {.t = wtype, .w = w, .rb = vs_type_row_bytes(wtype, n_in), .n_in = n_in, .dst = buf};
    for (int64_t o = 0; o < n_out; o += chunk) {
        c.o0 = o;
        c.o1 = VS_MIN(n_out, o + chunk);
        vs_threadpool_run(tp, conv_task, &c);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n_rows, (int)(c.o1 - o), (int)n_in, 1.0f, x,
                    (int)n_in, buf, (int)n_in, 0.0f, y + o, (int)n_out);
    }
    vs_free(owned);
    return true;
}
#endif

/* Whether a product of n_rows rows over these weights goes to OpenBLAS (when built with it): F32 from
 * VS_BLAS_MIN_ROWS rows on every ISA; F16 / BF16 only on AVX2 (the AVX-512 tiles convert the halves in
 * registers and beat sgemm plus a conversion pass at every size measured: Zen 5, 2 threads, F16 1408 x 512
 * 128 / 512 rows 0.56 / 2.0 ms against 0.92 / 2.5 with OpenBLAS's own AVX-512 kernels, 5632 x 2048 7.4 /
 * 28 against 13 / 40; F32 stays: 0.59 / 2.0 against 0.58 / 1.9, 12.5 / 38 against 9.1 / 28). With no
 * BLAS, F16 / BF16 on AVX-512 are batch-invariant for every row count. */
static bool use_blas(vs_type t, vs_isa isa, int64_t n_rows, bool amxbf) {
#ifdef VS_HAVE_OPENBLAS
    return !is_quant(t) && n_rows >= VS_BLAS_MIN_ROWS && isa != VS_ISA_SCALAR && blas_allowed() && !amxbf &&
           (t == VS_TYPE_F32 || isa < VS_ISA_AVX512);
#else
    (void)t, (void)isa, (void)n_rows, (void)amxbf;
    return false;
#endif
}

bool vs_matmul_set_blas(bool on) {
#ifdef VS_HAVE_OPENBLAS
    atomic_store(&g_blas, on ? 1 : 0);
    return on;
#else
    (void)on;
    return false;
#endif
}

bool vs_blas_info(char *buf, size_t cap) {
    if (cap) buf[0] = 0;
#ifdef VS_HAVE_OPENBLAS
    const char *cfg = openblas_get_config(), *core = openblas_get_corename();
    if (cap) snprintf(buf, cap, "%s, core %s", cfg ? cfg : "OpenBLAS", core ? core : "?");
    return true;
#else
    return false;
#endif
}

const char *vs_matmul_path(vs_type wtype, int64_t n_out, int64_t n_in, int64_t n_rows, unsigned flags) {
    vs_isa isa = isa_current();
    bool amxbf = isa == VS_ISA_AMX && use_amx_bf16(wtype, n_out, n_in, flags);
#ifdef VS_HAVE_OPENBLAS
    if (use_blas(wtype, isa, n_rows, amxbf)) return "blas";
#endif
    if (vs_type_is_kquant(wtype)) /* without the x16 copy: AVX2 on AVX-512 CPUs too (vs_matmul_x16_path) */
        return isa >= VS_ISA_AVX2 ? "avx2" : "scalar";
    if (isa == VS_ISA_AMX && is_quant(wtype) && n_rows >= amx_min_rows(wtype))
        return n_rows <= amx_vnni_max_rows(wtype) ? "amx-vnni" : "amx-int8";
    if (amxbf) return "amx-bf16";
    if (isa >= VS_ISA_AVX512) return is_quant(wtype) ? "avx512-vnni" : "avx512-fma";
    if (isa == VS_ISA_AVX2 && is_quant(wtype) && q_lanes(isa)) return "avx-vnni";
    return isa == VS_ISA_AVX2 ? "avx2" : "scalar";
}

const char *vs_matmul_x16_path(vs_type wtype, int64_t n_out, int64_t n_in, int64_t n_rows) {
    if (vs_type_is_kquant(wtype) && vs_x16_wanted(wtype))
        return isa_current() >= VS_ISA_AVX512 ? "avx512-vnni" : "avx-vnni";
    return vs_matmul_path(wtype, n_out, n_in, n_rows, VS_MM_DEFAULT);
}

void vs_matmul(vs_threadpool *tp, vs_type wtype, const void *w, int64_t n_out, int64_t n_in,
               const float *x, int64_t n_rows, float *y) {
    vs_matmul_ex(tp, wtype, w, n_out, n_in, x, n_rows, y, VS_MM_DEFAULT);
}

/* F16 / BF16 on the AMX-BF16 tiles: scratch for the activations' bf16 halves (the xb layout) and the
 * per-thread weight panels, into c's job, then the conversion. False when no memory (*owned: what the
 * caller frees when there is no pool). */
static bool amxbf16_prepare(vs_threadpool *tp, mm_ctx *c, void **owned) {
    const vs_type wtype = c->job.wtype;
    const int64_t n_in = c->job.n_in, n_rows = c->job.n_rows;
    size_t xbb = vs_xb_bytes(wtype, n_in, n_rows), pb = vs_mm_amx_bf16_panel_bytes(n_in, n_rows);
    size_t bytes = xbb + pb * (size_t)vs_threadpool_size(tp);
    uint8_t *buf = tp ? vs_threadpool_scratch(tp, bytes) : (*owned = vs_malloc(bytes));
    if (!buf) return false;
    c->job.xb = c->xq_out = buf;
    c->job.panels = pb ? buf + xbb : NULL; /* xbb and pb are multiples of 64 */
    c->job.panel_bytes = pb;
    c->q_rows = vs_xb_G(n_rows) * 8;
    if (c->q_rows >= 32 && vs_threadpool_size(tp) > 1) vs_threadpool_run(tp, quant_task, c);
    else quant_rows(c, 0, c->q_rows);
    return true;
}

/* Matmul shares per pool thread. Shipped target decode, 2 threads, Zen 3: quiet, one and three busy
 * processes within noise of each other for 1, 2, 4 and 8 (vlmspec bench --tg 32, 3 alternating rounds). */
#define VS_MM_SHARES_PER_THREAD 2

static void matmul_impl(vs_threadpool *tp, vs_type wtype, const void *w, const void *packed, int64_t n_out,
                        int64_t n_in, const float *x, int64_t n_rows, float *y, unsigned flags) {
    size_t rb = vs_type_row_bytes(wtype, n_in);
    assert(vs_type_supported(wtype) && n_out >= 0 && n_in >= 0 && n_rows >= 0);
    assert(rb > 0 || n_in == 0);
    if (n_out == 0 || n_rows == 0) return;
    if (n_in == 0) {
        memset(y, 0, (size_t)(n_rows * n_out) * sizeof(float));
        return;
    }
#ifdef VS_HAVE_OPENBLAS
    /* F16 / BF16 on AMX-BF16 tiles beat sgemm at every size (kbench, 1408 x 512, one thread: 256 rows 1.9 vs
     * 5.8 ms CPU) and stay batch-invariant: no BLAS for them */
    const bool amxbf = isa_current() == VS_ISA_AMX && use_amx_bf16(wtype, n_out, n_in, flags);
    if (use_blas(wtype, isa_current(), n_rows, amxbf) &&
        matmul_blas(tp, wtype, w, n_out, n_in, x, n_rows, y))
        return;
#endif
    if (n_rows > 512 && isa_current() == VS_ISA_AMX && use_amx_bf16(wtype, n_out, n_in, flags)) {
        /* bounded activation scratch for long prompts: 512 rows at a time (rows are independent) */
        for (int64_t r = 0; r < n_rows; r += 512)
            matmul_impl(tp, wtype, w, NULL, n_out, n_in, x + r * n_in, VS_MIN(512, n_rows - r), y + r * n_out,
                        flags);
        return;
    }
    mm_ctx c = {.job = {.wtype = wtype, .w = w, .w_row_bytes = rb, .n_out = n_out, .n_in = n_in,
                        .n_rows = n_rows, .x = x, .y = y},
                .isa = isa_current(), .q_rows = n_rows};
    if (vs_type_is_kquant(wtype)) { /* the lane kernels only from the x16 copy, else the AVX2 kernel */
        const bool lanes = packed && kq_reads_copy(wtype, c.isa);
        if (c.isa > VS_ISA_AVX2) c.isa = lanes ? VS_ISA_AVX512 : VS_ISA_AVX2;
        if (lanes) c.job.wp = packed;
    } else if (is_quant(wtype) && q_lanes(c.isa)) {
        c.lanes = true;
        c.job.wp = packed;
    }
    if (c.isa == VS_ISA_AMX &&
        !(is_quant(wtype) ? n_rows >= amx_min_rows(wtype) : use_amx_bf16(wtype, n_out, n_in, flags)))
        c.isa = VS_ISA_AVX512;
    void *owned = NULL;
    if (c.isa == VS_ISA_AMX && !is_quant(wtype) && !amxbf16_prepare(tp, &c, &owned)) {
        vs_matmul_ref(wtype, w, n_out, n_in, x, n_rows, y); /* no memory for scratch: the reference needs none */
        return;
    }
    if (is_quant(wtype)) {
        size_t xrb = vs_type_is_kquant(wtype) ? vs_xk_row_bytes(n_in) : vs_xq_row_bytes_ref(n_in);
        size_t bytes = xrb * (size_t)n_rows;
        if (c.lanes) { /* the AMX layout (kernels_arch.h) */
            xrb = 0;
            bytes = vs_xq_amx_bytes(n_in, n_rows);
            c.q_rows = vs_xq_amx_G(n_rows) * vs_xq_amx_N(n_rows);
        }
        uint8_t *buf = tp ? vs_threadpool_scratch(tp, bytes) : (owned = vs_malloc(bytes));
        if (!buf) { /* no memory for scratch: the reference needs none */
            vs_matmul_ref(wtype, w, n_out, n_in, x, n_rows, y);
            return;
        }
        c.job.xq = c.xq_out = buf;
        c.job.xq_row_bytes = xrb;
        if (c.q_rows >= 32 && vs_threadpool_size(tp) > 1) vs_threadpool_run(tp, quant_task, &c);
        else quant_rows(&c, 0, c.q_rows);
    }
    /* more shares than threads (outputs are independent, so the split never changes a result): a thread
     * slowed by another process on its core leaves the rest of its work to the others. The AMX-BF16
     * path keeps one share per thread: its weight panels are per share. */
    int shares = vs_threadpool_size(tp);
    if (!c.job.panels) shares = (int)VS_MIN((int64_t)VS_MM_SHARES_PER_THREAD * shares, (n_out + 15) / 16);
    vs_threadpool_run_shares(tp, mm_task, &c, shares);
    vs_free(owned);
}

void vs_matmul_ex(vs_threadpool *tp, vs_type wtype, const void *w, int64_t n_out, int64_t n_in,
                  const float *x, int64_t n_rows, float *y, unsigned flags) {
    matmul_impl(tp, wtype, w, NULL, n_out, n_in, x, n_rows, y, flags);
}

/* The parts of vs_matmul_multi on the tiles: one mm_ctx each, all reading the same converted activations. */
typedef struct mm_multi_ctx {
    mm_ctx part[VS_MM_MAX_PARTS];
    int n;
} mm_multi_ctx;

static void mm_multi_task(void *p, int ith, int nth) {
    mm_multi_ctx *m = p;
    for (int i = 0; i < m->n; i++) mm_task(&m->part[i], ith, nth); /* each part split as a lone call would be */
}

void vs_matmul_multi(vs_threadpool *tp, vs_type wtype, int64_t n_in, const vs_mm_part *parts, int n_parts,
                     const float *x, int64_t n_rows, unsigned flags) {
    /* one conversion only where every part would take the tiles on its own, and in one piece (<= 512 rows) */
    bool tiles = n_parts > 1 && n_parts <= VS_MM_MAX_PARTS && n_in > 0 && n_rows > 0 && n_rows <= 512 &&
                 isa_current() == VS_ISA_AMX && !is_quant(wtype);
    for (int i = 0; tiles && i < n_parts; i++)
        tiles = parts[i].n_out > 0 && use_amx_bf16(wtype, parts[i].n_out, n_in, flags);
    if (!tiles) {
        for (int i = 0; i < n_parts; i++)
            matmul_impl(tp, wtype, parts[i].w, NULL, parts[i].n_out, n_in, x, n_rows, parts[i].y, flags);
        return;
    }
    mm_multi_ctx m = {.n = n_parts};
    for (int i = 0; i < n_parts; i++)
        m.part[i] = (mm_ctx){.job = {.wtype = wtype, .w = parts[i].w, .w_row_bytes = vs_type_row_bytes(wtype, n_in),
                                     .n_out = parts[i].n_out, .n_in = n_in, .n_rows = n_rows, .x = x,
                                     .y = parts[i].y},
                             .isa = VS_ISA_AMX};
    void *owned = NULL;
    if (!amxbf16_prepare(tp, &m.part[0], &owned)) {
        for (int i = 0; i < n_parts; i++)
            vs_matmul_ref(wtype, parts[i].w, parts[i].n_out, n_in, x, n_rows, parts[i].y);
        return;
    }
    for (int i = 1; i < n_parts; i++) { /* the same converted activations and panels */
        m.part[i].job.xb = m.part[0].job.xb;
        m.part[i].job.panels = m.part[0].job.panels;
        m.part[i].job.panel_bytes = m.part[0].job.panel_bytes;
    }
    vs_threadpool_run(tp, mm_multi_task, &m);
    vs_free(owned);
}

/* ---- quantised weights repacked for the 16-output-lane kernels (the x16 layout in kernels.h) ---- */

bool vs_x16_wanted(vs_type t) {
    const char *e = getenv("VLMSPEC_REPACK");
    if (e && !strcmp(e, "0")) return false;
    /* the ISA in force (VLMSPEC_ISA=avx2 reads it with AVX-VNNI, except Q6_K); Q8_0's AMX tiles read the
     * GGUF rows */
    const vs_isa isa = vs_isa_active(), cpu = vs_isa_detect();
    if (vs_type_is_kquant(t)) return kq_reads_copy(t, isa);
    if (isa == VS_ISA_AVX2) return (t == VS_TYPE_Q4_0 || t == VS_TYPE_Q8_0) && q_lanes(isa);
    if (t == VS_TYPE_Q4_0) return isa >= VS_ISA_AVX512;
    return t == VS_TYPE_Q8_0 && isa >= VS_ISA_AVX512 && cpu == VS_ISA_AVX512;
}

size_t vs_x16_bytes(vs_type t, int64_t n_out, int64_t n_in) {
    return (size_t)((n_out + 15) / 16) * (size_t)(n_in / vs_type_block_size(t)) * vs_x16_block_bytes(t);
}

/* K-quants: tile tl's super-block b at (tl * nb + b) * B (the layout in kernels.h). */
static void x16_pack_kquant(vs_type t, const void *w, int64_t n_out, int64_t n_in, uint8_t *dst) {
    const int64_t nb = n_in / 256;
    const size_t rb = vs_type_row_bytes(t, n_in), bb = vs_type_block_bytes(t), B = vs_x16_block_bytes(t);
    static const union { /* a zero block of any K type (d = 0), aligned as the blocks */
        vs_block_q4_k q4;
        vs_block_q5_k q5;
        vs_block_q6_k q6;
    } zero_block;
    const uint8_t *zero = (const uint8_t *)&zero_block;
    for (int64_t tl = 0; tl < (n_out + 15) / 16; tl++)
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *p = dst + (size_t)(tl * nb + b) * B;
            if (t == VS_TYPE_Q6_K) memset(p + 3360, 0, B - 3360); /* padding to whole cache lines */
            for (int l = 0; l < 16; l++) {
                const int64_t o = 16 * tl + l;
                const uint8_t *blk = o < n_out ? (const uint8_t *)w + (size_t)o * rb + (size_t)b * bb : zero;
                if (t == VS_TYPE_Q6_K) {
                    const vs_block_q6_k *k6 = (const vs_block_q6_k *)blk;
                    for (int h = 0; h < 2; h++)
                        for (int k = 0; k < 8; k++) {
                            for (int s2 = 0; s2 < 2; s2++)
                                memcpy(p + 1024 * h + 512 * s2 + 64 * k + 4 * l, k6->ql + 64 * h + 32 * s2 + 4 * k, 4);
                            memcpy(p + 2048 + 512 * h + 64 * k + 4 * l, k6->qh + 32 * h + 4 * k, 4);
                        }
                    for (int i = 0; i < 8; i++) memcpy(p + 3072 + 32 * i + 2 * l, k6->scales + 2 * i, 2);
                    memcpy(p + 3328 + 2 * l, &k6->d, 2);
                    continue;
                }
                const vs_block_q4_k *k4 = (const vs_block_q4_k *)blk; /* d, dmin, scales: the same in Q5_K */
                const uint8_t *qs = t == VS_TYPE_Q4_K ? k4->qs : ((const vs_block_q5_k *)blk)->qs;
                for (int j = 0; j < 4; j++)
                    for (int k = 0; k < 8; k++) memcpy(p + 512 * j + 64 * k + 4 * l, qs + 32 * j + 4 * k, 4);
                size_t off = 2048;
                if (t == VS_TYPE_Q5_K) {
                    for (int k = 0; k < 8; k++) memcpy(p + 2048 + 64 * k + 4 * l, ((const vs_block_q5_k *)blk)->qh + 4 * k, 4);
                    off = 2560;
                }
                for (int j = 0; j < 8; j++) {
                    int sc, mn;
                    vs_kq_scale_min(j, k4->scales, &sc, &mn);
                    p[off + 16 * j + l] = (uint8_t)sc;
                    p[off + 128 + 16 * j + l] = (uint8_t)mn;
                }
                memcpy(p + off + 256 + 2 * l, &k4->d, 2);
                memcpy(p + off + 288 + 2 * l, &k4->dmin, 2);
            }
        }
}

void vs_x16_pack(vs_type t, const void *w, int64_t n_out, int64_t n_in, void *dst) {
    if (vs_type_is_kquant(t)) {
        x16_pack_kquant(t, w, n_out, n_in, dst);
        return;
    }
    const int64_t nb = n_in / 32;
    const size_t rb = vs_type_row_bytes(t, n_in), bb = t == VS_TYPE_Q8_0 ? 34 : 18, qb = bb - 2;
    static const uint8_t zero[34];
    for (int64_t tl = 0; tl < (n_out + 15) / 16; tl++) {
        uint8_t *qs = (uint8_t *)dst + (size_t)(tl * nb) * (16 * qb + 32), *sc = qs + (size_t)nb * 16 * qb;
        for (int64_t b = 0; b < nb; b++)
            for (int l = 0; l < 16; l++) {
                const int64_t o = 16 * tl + l;
                const uint8_t *blk = o < n_out ? (const uint8_t *)w + (size_t)o * rb + (size_t)b * bb : zero;
                memcpy(sc + 32 * b + 2 * l, blk, 2);
                for (size_t i = 0; i < qb / 4; i++) memcpy(qs + 16 * qb * b + 64 * i + 4 * l, blk + 2 + 4 * i, 4);
            }
    }
}

void vs_matmul_x16(vs_threadpool *tp, vs_type t, const void *w, const void *packed, int64_t n_out, int64_t n_in,
                   const float *x, int64_t n_rows, float *y) {
    matmul_impl(tp, t, w, packed, n_out, n_in, x, n_rows, y, VS_MM_DEFAULT);
}

/* ---- memory bandwidth ---- */

typedef struct bw_ctx {
    const uint8_t *buf;
    size_t bytes;
    vs_isa isa;
    _Alignas(64) uint64_t sums[64][8]; /* one cache line per thread */
} bw_ctx;

static void bw_task(void *p, int ith, int nth) {
    bw_ctx *c = p;
    int64_t lo, hi;
    vs_split_range((int64_t)(c->bytes / 64), ith, nth, 64, &lo, &hi); /* in cache lines, 4 KB aligned */
    const uint8_t *s = c->buf + lo * 64;
    size_t n = (size_t)(hi - lo) * 64;
    uint64_t v = 0;
    switch (c->isa) {
    case VS_ISA_AVX512: v = vs_read_sum_avx512(s, n); break;
    case VS_ISA_AVX2: v = vs_read_sum_avx2(s, n); break;
    default: {
        const uint64_t *q = (const uint64_t *)s;
        for (size_t i = 0; i < n / 8; i++) v ^= q[i];
    }
    }
    c->sums[ith % 64][0] ^= v;
}

static void bw_fill_task(void *p, int ith, int nth) {
    bw_ctx *c = p;
    int64_t lo, hi;
    vs_split_range((int64_t)(c->bytes / 64), ith, nth, 64, &lo, &hi);
    memset((uint8_t *)c->buf + lo * 64, 0x5a + ith, (size_t)(hi - lo) * 64); /* first touch */
}

double vs_measure_read_bandwidth(vs_threadpool *tp, size_t bytes) {
    bytes = bytes / 4096 * 4096;
    if (bytes == 0) return 0.0;
    bw_ctx *c = vs_calloc(1, sizeof(bw_ctx));
    uint8_t *buf = vs_malloc(bytes);
    if (!c || !buf) {
        vs_free(c);
        vs_free(buf);
        return 0.0;
    }
    c->buf = buf;
    c->bytes = bytes;
    c->isa = vec_isa();
    vs_threadpool_run(tp, bw_fill_task, c);
    vs_threadpool_run(tp, bw_task, c); /* warm-up pass */
    double best = 0.0;
    for (int pass = 0; pass < 5; pass++) {
        double t0 = vs_time_now();
        vs_threadpool_run(tp, bw_task, c);
        double dt = vs_time_now() - t0;
        if (dt > 0 && (double)bytes / dt > best) best = (double)bytes / dt;
    }
    vs_free(buf);
    vs_free(c);
    return best / 1e9;
}

/* ---- vector ops ---- */

/* ggml's statistics: the f32 squares summed in double, the mean rounded to f32, eps added in f32; then
 * (x * scale) * weight. Matching them matters for the K-quants: their activations are quantised to
 * 8-bit blocks, and 6-bit weights (token embeddings) make exact ties x * 127 / amax = k + 0.5 common,
 * so one ulp of the scale decides which way a code rounds. Other summation orders of the same double
 * sum agree unless it lands within ~1e-13 relative of an f32 rounding boundary. */
static void rmsnorm_ref(float *out, const float *x, const float *weight, int64_t n, float eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)(x[i] * x[i]);
    const float mean = (float)(ss / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale * (weight ? weight[i] : 1.0f);
}

static void softmax_ref(float *x, int64_t n) {
    if (n <= 0) return;
    float m = x[0];
    for (int64_t i = 1; i < n; i++) m = fmaxf(m, x[i]);
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - m);
        s += x[i];
    }
    float inv = 1.0f / s;
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

static float dot_ref(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void axpy_ref(float *y, float a, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

void vs_rmsnorm(float *out, const float *x, const float *weight, int64_t n, float eps) {
    switch (vec_isa()) {
    case VS_ISA_AVX512: vs_rmsnorm_avx512(out, x, weight, n, eps); return;
    case VS_ISA_AVX2: vs_rmsnorm_avx2(out, x, weight, n, eps); return;
    default: rmsnorm_ref(out, x, weight, n, eps); return;
    }
}

void vs_softmax_inplace(float *x, int64_t n) {
    switch (vec_isa()) {
    case VS_ISA_AVX512: vs_softmax_avx512(x, n); return;
    case VS_ISA_AVX2: vs_softmax_avx2(x, n); return;
    default: softmax_ref(x, n); return;
    }
}

float vs_dot_f32(const float *a, const float *b, int64_t n) {
    switch (vec_isa()) {
    case VS_ISA_AVX512: return vs_dot_f32_avx512(a, b, n);
    case VS_ISA_AVX2: return vs_dot_f32_avx2(a, b, n);
    default: return dot_ref(a, b, n);
    }
}

void vs_axpy_f32(float *y, float a, const float *x, int64_t n) {
    switch (vec_isa()) {
    case VS_ISA_AVX512: vs_axpy_f32_avx512(y, a, x, n); return;
    case VS_ISA_AVX2: vs_axpy_f32_avx2(y, a, x, n); return;
    default: axpy_ref(y, a, x, n); return;
    }
}

void vs_rmsnorm_ref(float *out, const float *x, const float *weight, int64_t n, float eps) {
    rmsnorm_ref(out, x, weight, n, eps);
}
void vs_softmax_inplace_ref(float *x, int64_t n) { softmax_ref(x, n); }
float vs_dot_f32_ref(const float *a, const float *b, int64_t n) { return dot_ref(a, b, n); }
void vs_axpy_f32_ref(float *y, float a, const float *x, int64_t n) { axpy_ref(y, a, x, n); }

int64_t vs_argmax_f32_ref(const float *x, int64_t n) {
    int64_t best = -1;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(x[i])) continue;
        if (best < 0 || x[i] > x[best]) best = i;
    }
    return best;
}

int64_t vs_argmax_f32(const float *x, int64_t n) {
    return vec_isa() == VS_ISA_AVX512 ? vs_argmax_f32_avx512(x, n) : vs_argmax_f32_ref(x, n);
}
