/* kernels_amx_avx512: Q8_0 / Q4_0 weights times several activation rows with AMX-INT8 tiles.
 * Why: with VNNI every (weight block, row) pair costs ~4 vector ops, so 6 or 16 rows are compute-bound;
 * a tile dot product does 16 outputs x up to 16 rows x one 32-value block in one instruction, leaving
 * only the per-block scaling (d_w * d_x, f32) to the vector units, so the weights stream at memory speed.
 *
 * Per 16-output tile and block b: A = the 16 weight blocks (Q8_0: loaded straight from the rows with a
 * stride; Q4_0: nibbles unpacked to q - 8 in a buffer), B = the activation chunk (kernels_arch.h, AMX
 * layout), C = A.B (int32, 16 x N, exact), stored and scaled into f32 accumulators whose lanes are
 * (output, row) pairs. Tile instructions are written as inline asm (no -mamx flags needed; binutils
 * knows them); the CPU check and the OS permission are in kernels.c / vs_amx_request. */
#include <immintrin.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels_arch.h"

#define VS_INLINE static inline __attribute__((always_inline))
#define VS_UNROLL _Pragma("GCC unroll 16")

bool vs_amx_request(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    /* ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 */
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
    return false;
#endif
}

/* ---- activation quantisation into the AMX layout ---- */

void vs_xq_quantize_row_amx(const float *x, int64_t n_in, vs_type wtype, int64_t n_rows, int64_t r, uint8_t *xq) {
    const int N = vs_xq_amx_N(n_rows);
    const int64_t G = vs_xq_amx_G(n_rows), nb = n_in / 32, g = r / N;
    const int c = (int)(r % N);
    const size_t chunk = vs_xq_amx_chunk(N);
    /* Q4_0 K order: even K index i holds value i / 2, odd holds 16 + i / 2 (bytes interleaved) */
    const __m256i q4_order = _mm256_setr_epi8(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15, 0, 8, 1, 9, 2,
                                              10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *ch = xq + (size_t)(b * G + g) * chunk;
        _Alignas(32) uint32_t q[8] = {0};
        float d = 0.0f;
        int32_t corr = 0;
        if (x) {
            __m512i i0, i1;
            vs_xq_block_avx512(x + b * 32, &i0, &i1, &d); /* the shared quantiser (kernels_arch.h) */
            __m256i qv = _mm256_set_m128i(_mm512_cvtepi32_epi8(i1), _mm512_cvtepi32_epi8(i0));
            if (wtype == VS_TYPE_Q4_0) {
                corr = -8 * _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
                /* [v0..7, v16..23 | v8..15, v24..31] then interleave bytes within each 16-byte half */
                qv = _mm256_permute4x64_epi64(qv, _MM_SHUFFLE(3, 1, 2, 0));
                qv = _mm256_shuffle_epi8(qv, q4_order);
            }
            _mm256_store_si256((__m256i *)q, qv);
        }
        for (int k = 0; k < 8; k++) memcpy(ch + (size_t)(k * N + c) * 4, &q[k], 4);
        memcpy(ch + 32 * N + 4 * c, &d, 4);
        memcpy(ch + 32 * N + 64 + 4 * c, &corr, 4);
        if (c == 0 && N < 16) { /* unused scale / correction slots */
            memset(ch + 32 * N + 4 * N, 0, (size_t)(64 - 4 * N));
            memset(ch + 32 * N + 64 + 4 * N, 0, (size_t)(64 - 4 * N));
        }
    }
}

/* ---- tiles ---- */

typedef struct amx_cfg {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

/* tmm0/1: C (16 x N int32), tmm2/3: A (16 x 32 int8), tmm4/5: B (8 x N*4 int8), for two blocks in
 * flight; tmm6: raw Q4_0 bytes (16 x 16). */
static void amx_config(int N) {
    amx_cfg cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.palette = 1;
    for (int i = 0; i < 2; i++) {
        cfg.rows[i] = 16, cfg.colsb[i] = (uint16_t)(N * 4);
        cfg.rows[2 + i] = 16, cfg.colsb[2 + i] = 32;
        cfg.rows[4 + i] = 8, cfg.colsb[4 + i] = (uint16_t)(N * 4);
    }
    cfg.rows[6] = 16, cfg.colsb[6] = 16;
    __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
}

#define TILE_LOAD(t, base, stride) \
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(base), "r"((int64_t)(stride)) : "memory")
#define TILE_STORE(t, base, stride) \
    __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(base), "r"((int64_t)(stride)) : "memory")

/* The 16 weight-block scales of a tile (rows o..o+15, `valid` of them real) for block b. */
VS_INLINE __m512 gather_scales(const uint8_t *wt, size_t rb, size_t boff, int valid) {
    const __m512i vidx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32((int)rb));
    __mmask16 m = valid >= 16 ? 0xffff : (__mmask16)((1u << valid) - 1);
    __m512i g = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, vidx, wt + boff, 1);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
}

/* 16 rows of 16 Q4_0 bytes (row o at src + o * stride) -> 16 rows of 32 unsigned nibbles, each byte's
 * low nibble then its high nibble (the K order of the Q4_0 activation chunks). */
VS_INLINE void unpack_q4(const uint8_t *src, size_t stride, uint8_t *out) {
    const __m512i m = _mm512_set1_epi16(0x0f0f);
    VS_UNROLL
    for (int k = 0; k < 8; k++) {
        __m256i two = _mm256_loadu2_m128i((const __m128i *)(src + (2 * k + 1) * stride),
                                          (const __m128i *)(src + 2 * k * stride));
        __m512i w = _mm512_cvtepu8_epi16(two); /* 0x00XY */
        /* (w | w << 4) & 0x0f0f: low byte Y, high byte X */
        __m512i v = _mm512_ternarylogic_epi32(w, _mm512_slli_epi16(w, 4), m, 0xa8);
        _mm512_store_si512(out + 64 * k, v);
    }
}

/* A: the tile's weight block b into tile register A (2 or 3), via abuf for Q4_0 / partial tiles. */
#define LOAD_A(A, b, abuf)                                                                                   \
    do {                                                                                                   \
        if (q8 && valid == 16) {                                                                           \
            TILE_LOAD(A, wt + (b) * bbytes + 2, rb);                                                       \
        } else if (q8) {                                                                                   \
            for (int o_ = 0; o_ < valid; o_++) memcpy((abuf) + 32 * o_, wt + o_ * rb + (b) * bbytes + 2, 32); \
            TILE_LOAD(A, (abuf), 32);                                                                      \
        } else {                                                                                           \
            if (valid == 16) {                                                                             \
                unpack_q4(wt + (b) * bbytes + 2, rb, (abuf));                                              \
            } else {                                                                                       \
                for (int o_ = 0; o_ < valid; o_++) memcpy(raw + 16 * o_, wt + o_ * rb + (b) * bbytes + 2, 16); \
                unpack_q4(raw, 16, (abuf));                                                                \
            }                                                                                              \
            TILE_LOAD(A, (abuf), 32);                                                                      \
        }                                                                                                  \
    } while (0)

/* Tile ops for block b into C tile Ct (A tile At, B tile Bt), result stored to cb. */
#define BLOCK_TILES(Ct, At, Bt, b, abuf, cb)                                                                 \
    do {                                                                                                   \
        const uint8_t *ch_ = jb->xq + (size_t)((b) * G + g) * chunk;                                       \
        LOAD_A(At, b, abuf);                                                                               \
        TILE_LOAD(Bt, ch_, N * 4);                                                                         \
        if (q8) {                                                                                          \
            __asm__ volatile("tilezero %%tmm" #Ct "\n\ttdpbssd %%tmm" #Bt ", %%tmm" #At ", %%tmm" #Ct ::: "memory"); \
        } else { /* start from -8 * sum(q) per column (stride 0: every row the same), unsigned nibbles */ \
            TILE_LOAD(Ct, ch_ + 32 * N + 64, 0);                                                           \
            __asm__ volatile("tdpbusd %%tmm" #Bt ", %%tmm" #At ", %%tmm" #Ct ::: "memory");                \
        }                                                                                                  \
        TILE_STORE(Ct, (cb), N * 4);                                                                       \
    } while (0)

/* One 16-output tile (rows o_t .. o_t + valid - 1) times activation group g, over all blocks. Blocks
 * are software-pipelined: the tile ops of block b + 1 are issued before block b's f32 epilogue.
 * Epilogue lanes are (output, row) pairs: N == 16 keeps one accumulator per output (lanes = rows),
 * N < 16 packs 16 / N outputs per vector (flat index o * N + c). */
VS_INLINE void amx_tile(const vs_mm_job *jb, int64_t o_t, int valid, int64_t g, size_t next_bytes, const int N) {
    const bool q8 = jb->wtype == VS_TYPE_Q8_0;
    const int64_t nb = jb->n_in / 32, G = vs_xq_amx_G(jb->n_rows);
    const size_t rb = jb->w_row_bytes, bbytes = q8 ? 34 : 18, chunk = vs_xq_amx_chunk(N);
    const uint8_t *wt = jb->w + o_t * rb;
    _Alignas(64) int32_t cbuf[2][16 * 16];
    _Alignas(64) uint8_t abuf[2][16 * 32];
    _Alignas(64) uint8_t raw[16 * 16];
    _Alignas(64) float dwf[16];
    __m512 acc[16];
    VS_UNROLL
    for (int k = 0; k < N; k++) acc[k] = _mm512_setzero_ps();
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    int lg = 0;
    while ((1 << lg) < N) lg++;
    _Alignas(64) int32_t idxs[16][16]; /* lane l of vector k belongs to output (16 k + l) / N */
    for (int k = 0; k < N && N < 16; k++)
        _mm512_store_si512(idxs[k], _mm512_srli_epi32(_mm512_add_epi32(iota, _mm512_set1_epi32(16 * k)), lg));
    const __m512i dxidx = _mm512_and_si512(iota, _mm512_set1_epi32(N - 1));
    if (valid < 16) {
        memset(abuf, 0, sizeof(abuf));
        memset(raw, 0x88, sizeof(raw)); /* padding rows: nibbles 8, and their scale is 0 anyway */
    }

    BLOCK_TILES(0, 2, 4, 0, abuf[0], cbuf[0]);
    const uint8_t *next = wt + 16 * rb; /* the next tile's weights, prefetched linearly (see vnni_rows) */
    size_t pf = 0;
    for (int64_t b = 0; b < nb; b++) {
        for (size_t pe = next_bytes * (size_t)(b + 1) / (size_t)nb; pf < pe; pf += 64)
            _mm_prefetch((const char *)next + pf, _MM_HINT_T0);
        if (b + 1 < nb) {
            if ((b + 1) & 1) BLOCK_TILES(1, 3, 5, b + 1, abuf[1], cbuf[1]);
            else BLOCK_TILES(0, 2, 4, b + 1, abuf[0], cbuf[0]);
        }
        const int32_t *cb = cbuf[b & 1];
        const uint8_t *ch = jb->xq + (size_t)(b * G + g) * chunk;
        __m512 dwv = gather_scales(wt, rb, (size_t)(b * bbytes), valid);
        __m512 dxv = _mm512_load_ps((const float *)(ch + 32 * N));
        /* Every (output, row) lane: acc = fma((float)isum_b, d_w * d_x, acc), blocks in order; the same
         * float operations for every N, G and lane position (batch invariance, kernels.h). */
        if (N == 16) {
            _mm512_store_ps(dwf, dwv);
            VS_UNROLL
            for (int k = 0; k < 16; k++) {
                __m512 s = _mm512_mul_ps(_mm512_set1_ps(dwf[k]), dxv);
                acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cb + 16 * k)), s, acc[k]);
            }
        } else {
            __m512 dxpat = _mm512_permutexvar_ps(dxidx, dxv);
            VS_UNROLL
            for (int k = 0; k < N; k++) {
                __m512 s = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_load_si512(idxs[k]), dwv), dxpat);
                acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cb + 16 * k)), s, acc[k]);
            }
        }
    }
    _Alignas(64) float out[16 * 16];
    VS_UNROLL
    for (int k = 0; k < N; k++) _mm512_store_ps(out + 16 * k, acc[k]);
    int64_t rows = VS_MIN((int64_t)N, jb->n_rows - g * N);
    for (int64_t c = 0; c < rows; c++) {
        float *yr = jb->y + (g * N + c) * jb->n_out + o_t;
        for (int o = 0; o < valid; o++) yr[o] = out[o * N + c];
    }
}

void vs_mm_amx(const vs_mm_job *jb, int64_t o0, int64_t o1) {
    const int N = vs_xq_amx_N(jb->n_rows);
    const int64_t G = vs_xq_amx_G(jb->n_rows);
    amx_config(N);
    for (int64_t o = o0; o < o1; o += 16) {
        int valid = (int)VS_MIN(16, o1 - o);
        size_t nx = o + 16 < o1 ? (size_t)VS_MIN(16, o1 - o - 16) * jb->w_row_bytes : 0;
        for (int64_t g = 0; g < G; g++) {
            size_t pfb = g == 0 ? nx : 0;
            switch (N) {
            case 1: amx_tile(jb, o, valid, g, pfb, 1); break;
            case 2: amx_tile(jb, o, valid, g, pfb, 2); break;
            case 4: amx_tile(jb, o, valid, g, pfb, 4); break;
            case 8: amx_tile(jb, o, valid, g, pfb, 8); break;
            default: amx_tile(jb, o, valid, g, pfb, 16); break;
            }
        }
    }
    __asm__ volatile("tilerelease" ::: "memory");
}

/* ---- one to four activation rows with AVX-512 VNNI, bitwise equal to the AMX tiles ----
 * Decoding (n_rows == 1) streams every weight once for a single row, where a tile product wastes 15 of
 * its 16 columns, and Q4_0 tiles pay for unpacking nibbles through memory; VNNI dot products are cheaper
 * there. To keep batch invariance this kernel reads the same AMX layout (N = 1, 2 or 4) and produces,
 * per output and row, the same exact integer block dots and then the same float operations in the same
 * order as amx_tile: acc = fma((float)isum_b, d_w * d_x, acc) for b = 0, 1, ... Lanes are 16 outputs.
 * Per block: 8 vectors of two outputs' 32 weights (unsigned: Q8_0 as w + 128, Q4_0 nibbles), shared by
 * the rows; per row, 8 dot products with the row's 32 q (in both halves), each started from -K * (sum of
 * the lane's 4 q) so the lane sums are exact, and a three-level add tree that turns the 8 x (2 outputs x
 * 8 lanes) into one vector of 16 block dots. */

/* Sums adjacent halves of the lane groups of a and b: groups of 2h lanes -> groups of h, a's then b's. */
VS_INLINE __m512i fold(__m512i a, __m512i b, __m512i ilo, __m512i ihi) {
    return _mm512_add_epi32(_mm512_permutex2var_epi32(a, ilo, b), _mm512_permutex2var_epi32(a, ihi, b));
}

VS_INLINE void vnni_rows(const vs_mm_job *jb, int64_t o0, int64_t o1, const int R) {
    const bool q8 = jb->wtype == VS_TYPE_Q8_0;
    const int N = vs_xq_amx_N(R);
    const int64_t nb = jb->n_in / 32;
    const size_t rb = jb->w_row_bytes, bbytes = q8 ? 34 : 18, chunk = vs_xq_amx_chunk(N);
    const __m512i kmul = _mm512_set1_epi8(q8 ? (char)0x80 : 8), m0f = _mm512_set1_epi8(0x0f);
    const __m512i x80 = _mm512_set1_epi8((char)0x80);
    /* fold indices: h = 4, 2, 1 (lanes per output after the fold) */
    __m512i ilo[3], ihi[3];
    /* Q4_0 vectors are [A lo nibbles, B lo, A hi, B hi] (16 bytes each): A's lanes are 0-3 and 8-11 */
    const __m512i q4lo = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
    const __m512i q4hi = _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    /* the chunk's Q4_0 K order (v0, v16, v1, v17, ...) back to value order, per 16-byte half */
    const __m256i deint = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10, 12,
                                           14, 1, 3, 5, 7, 9, 11, 13, 15);
    for (int s = 0; s < 3; s++) {
        int h = 4 >> s;
        _Alignas(64) int32_t lo[16], hi[16];
        for (int l = 0; l < 16; l++) { /* output lane group l / h of the result comes from a (first 8) or b */
            int grp = l / h, src = (grp % (8 / h)) * 2 * h + l % h + (grp >= 8 / h ? 16 : 0);
            lo[l] = src;
            hi[l] = src + h;
        }
        ilo[s] = _mm512_load_si512(lo);
        ihi[s] = _mm512_load_si512(hi);
    }
    /* row c's q: dword k of the chunk's [8][N] dwords is at k * N + c */
    __m512i xidx[4];
    VS_UNROLL
    for (int c = 0; c < R; c++)
        xidx[c] = _mm512_add_epi32(_mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 0, 0, 0, 0, 0, 0, 0, 0),
                                                      _mm512_set1_epi32(N)),
                                   _mm512_set1_epi32(c));
    for (int64_t o = o0; o < o1; o += 16) {
        const int valid = (int)VS_MIN(16, o1 - o);
        const uint8_t *wt = jb->w + o * rb;
        const uint8_t *wrow[16];
        for (int k = 0; k < 16; k++) wrow[k] = wt + (size_t)VS_MIN(k, valid - 1) * rb + 2; /* pad: repeat */
        __m512 acc[4];
        VS_UNROLL
        for (int c = 0; c < R; c++) acc[c] = _mm512_setzero_ps();
        /* The tile's 16 rows are one contiguous range read as 16 interleaved streams, which the hardware
         * prefetchers follow poorly: prefetch the next tile's range linearly, a share per block. */
        const uint8_t *next = wt + 16 * rb;
        const size_t next_bytes = o + 16 < o1 ? (size_t)VS_MIN(16, o1 - o - 16) * rb : 0;
        size_t pf = 0;
        for (int64_t b = 0; b < nb; b++) {
            for (size_t pe = next_bytes * (size_t)(b + 1) / (size_t)nb; pf < pe; pf += 64)
                _mm_prefetch((const char *)next + pf, _MM_HINT_T0);
            const uint8_t *ch = jb->xq + (size_t)b * chunk;
            const size_t boff = (size_t)b * bbytes;
            __m512i wv[8];
            VS_UNROLL
            for (int j = 0; j < 8; j++) {
                const uint8_t *pa = wrow[2 * j] + boff, *pb = wrow[2 * j + 1] + boff;
                if (q8) {
                    __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)pa)),
                                                   _mm256_loadu_si256((const __m256i *)pb), 1);
                    wv[j] = _mm512_xor_si512(w, x80);
                } else {
                    __m256i t = _mm256_loadu2_m128i((const __m128i *)pb, (const __m128i *)pa);
                    wv[j] = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(t), _mm256_srli_epi16(t, 4), 1), m0f);
                }
            }
            __m512 dwv = gather_scales(wt, rb, boff, valid);
            const __m512i z0 = _mm512_loadu_si512(ch), z1 = _mm512_loadu_si512(ch + 64);
            VS_UNROLL
            for (int c = 0; c < R; c++) {
                __m256i q = N == 1 ? _mm512_castsi512_si256(z0)
                                   : _mm512_castsi512_si256(_mm512_permutex2var_epi32(z0, xidx[c], z1));
                __m512i xq;
                if (q8) {
                    xq = _mm512_broadcast_i64x4(q);
                } else { /* [v0..15, v0..15, v16..31, v16..31] */
                    __m256i nat = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(q, deint), _MM_SHUFFLE(3, 1, 2, 0));
                    xq = _mm512_shuffle_i64x2(_mm512_castsi256_si512(nat), _mm512_castsi256_si512(nat),
                                              _MM_SHUFFLE(1, 1, 0, 0));
                }
                const __m512i cinit = _mm512_sub_epi32(_mm512_setzero_si512(),
                                                       _mm512_dpbusd_epi32(_mm512_setzero_si512(), kmul, xq));
                __m512i v[8];
                VS_UNROLL
                for (int j = 0; j < 8; j++) v[j] = _mm512_dpbusd_epi32(cinit, wv[j], xq);
                const __m512i l0 = q8 ? ilo[0] : q4lo, h0 = q8 ? ihi[0] : q4hi;
                __m512i f0 = fold(v[0], v[1], l0, h0), f1 = fold(v[2], v[3], l0, h0);
                __m512i f2 = fold(v[4], v[5], l0, h0), f3 = fold(v[6], v[7], l0, h0);
                __m512i g0 = fold(f0, f1, ilo[1], ihi[1]), g1 = fold(f2, f3, ilo[1], ihi[1]);
                __m512i isum = fold(g0, g1, ilo[2], ihi[2]);
                __m512 sc = _mm512_mul_ps(dwv, _mm512_set1_ps(((const float *)(ch + 32 * N))[c]));
                acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), sc, acc[c]);
            }
        }
        const __mmask16 m = valid >= 16 ? 0xffff : (__mmask16)((1u << valid) - 1);
        VS_UNROLL
        for (int c = 0; c < R; c++) _mm512_mask_storeu_ps(jb->y + c * jb->n_out + o, m, acc[c]);
    }
}

void vs_mm_amx_vnni(const vs_mm_job *jb, int64_t o0, int64_t o1) {
    switch (jb->n_rows) {
    case 1: vnni_rows(jb, o0, o1, 1); break;
    case 2: vnni_rows(jb, o0, o1, 2); break;
    case 3: vnni_rows(jb, o0, o1, 3); break;
    default: vnni_rows(jb, o0, o1, 4); break;
    }
}
