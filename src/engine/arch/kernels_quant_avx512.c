/* kernels_quant_avx512: Q8_0 / Q4_0 weights times activation rows on CPUs with AVX-512 VNNI, with and
 * without AMX-INT8 (all row counts), over the AMX activation layout (kernels_arch.h); all kernels of an
 * ISA are bitwise equal per row (batch invariance).
 *  - lane_group (vs_mm_lanes_vnni): lanes = the 16 outputs of a tile; per block the tile's weights in
 *    lane order (from the load-time x16 copy, kernels.h, or transposed from the GGUF rows), then per row
 *    8 VNNI dot products with broadcast activation dwords and one scaled FMA. The only Q8_0 / Q4_0
 *    kernel of AVX-512 CPUs without AMX; on AMX CPUs Q4_0 with 1-4 rows.
 *  - AMX only: Q8_0, 2+ rows, amx_tile: A = the 16 weight blocks loaded straight from the rows with a
 *    stride, B = the activation chunk, C = A.B (int32, 16 x N, exact), scaled into f32 accumulators whose
 *    lanes are (output, row) pairs; Q8_0, 1 row, vnni_rows: VNNI dot products, two outputs per vector and
 *    a reduction tree; Q4_0, 5+ rows, q4_tiles: lane_group's transposed block as the B tile of a tile
 *    product whose A is the rows' activations.
 * Why lanes and tiles: with two blocks per vector every (weight block, row) pair costs ~4 vector ops
 * (a dot, a scale permute, a conversion, an FMA), so 6 or 16 rows are compute-bound; with lanes = outputs
 * a row costs 8 dot products and 3 ops per 16 x 32 weights, and a tile product does 16 outputs x up to
 * 16 rows x one block in one instruction.
 * Tile instructions are written as inline asm (no -mamx flags needed; binutils knows them); the CPU
 * check and the OS permission are in kernels.c / vs_amx_request. */
#include <immintrin.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "amx_tiles.h"
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
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *ch = xq + (size_t)(b * G + g) * chunk;
        _Alignas(32) uint32_t q[8] = {0};
        float d = 0.0f;
        int32_t corr = 0;
        if (x) {
            __m512i i0, i1;
            vs_xq_block_avx512(x + b * 32, &i0, &i1, &d); /* the shared quantiser (kernels_arch.h) */
            __m256i qv = _mm256_set_m128i(_mm512_cvtepi32_epi8(i1), _mm512_cvtepi32_epi8(i0));
            corr = (wtype == VS_TYPE_Q4_0 ? -8 : -128) * _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
            _mm256_store_si256((__m256i *)q, qv);
        }
        vs_xq_amx_put(ch, N, c, wtype, q, d, corr);
    }
}

/* ---- tiles ---- */

/* Q8_0: tmm0/1/6/7: a ring of C tiles (16 x N int32), tmm2/3: A (16 x 32 int8), tmm4/5: B (8 x N*4 int8). */
static void amx_config(int N) {
    vs_amx_cfg cfg = vs_amx_cfg_new();
    for (int i = 0; i < 2; i++) {
        cfg.rows[i] = 16, cfg.colsb[i] = (uint16_t)(N * 4);
        cfg.rows[2 + i] = 16, cfg.colsb[2 + i] = 32;
        cfg.rows[4 + i] = 8, cfg.colsb[4 + i] = (uint16_t)(N * 4);
    }
    for (int i = 6; i < 8; i++) cfg.rows[i] = 16, cfg.colsb[i] = (uint16_t)(N * 4);
    vs_amx_load_cfg(&cfg);
}


/* The 16 weight-block scales of a tile (rows o..o+15, `valid` of them real) for block b. */
VS_INLINE __m512 gather_scales(const uint8_t *wt, size_t rb, size_t boff, int valid) {
    const __m512i vidx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32((int)rb));
    __mmask16 m = valid >= 16 ? 0xffff : (__mmask16)((1u << valid) - 1);
    __m512i g = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, vidx, wt + boff, 1);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
}

/* A: the tile's weight block b into tile register A (2 or 3), straight from the rows, or via abuf for a
 * partial tile. */
#define LOAD_A(A, b, abuf)                                                                                   \
    do {                                                                                                   \
        if (valid == 16) {                                                                                 \
            TILE_LOAD(A, wt + (b) * 34 + 2, rb);                                                           \
        } else {                                                                                           \
            for (int o_ = 0; o_ < valid; o_++) memcpy((abuf) + 32 * o_, wt + o_ * rb + (b) * 34 + 2, 32);  \
            TILE_LOAD(A, (abuf), 32);                                                                      \
        }                                                                                                  \
    } while (0)

/* Tile product of block b into C tile Ct (A tile At, B tile Bt). */
#define BLOCK_TILES(Ct, At, Bt, b, abuf)                                                                     \
    do {                                                                                                   \
        LOAD_A(At, b, abuf);                                                                               \
        TILE_LOAD(Bt, jb->xq + (size_t)((b) * G + g) * chunk, N * 4);                                      \
        __asm__ volatile("tilezero %%tmm" #Ct "\n\ttdpbssd %%tmm" #Bt ", %%tmm" #At ", %%tmm" #Ct ::: "memory"); \
    } while (0)
/* Block b's product, C in the ring tmm0/1/6/7 (b & 3), A and B double-buffered. */
#define ISSUE(b)                                                                                             \
    do {                                                                                                   \
        switch ((b) & 3) {                                                                                 \
        case 0: BLOCK_TILES(0, 2, 4, b, abuf[0]); break;                                                   \
        case 1: BLOCK_TILES(1, 3, 5, b, abuf[1]); break;                                                   \
        case 2: BLOCK_TILES(6, 2, 4, b, abuf[0]); break;                                                   \
        default: BLOCK_TILES(7, 3, 5, b, abuf[1]); break;                                                  \
        }                                                                                                  \
    } while (0)
#define STORE_C(b)                                                                                           \
    do {                                                                                                   \
        switch ((b) & 3) {                                                                                 \
        case 0: TILE_STORE(0, cbuf[0], N * 4); break;                                                      \
        case 1: TILE_STORE(1, cbuf[1], N * 4); break;                                                      \
        case 2: TILE_STORE(6, cbuf[2], N * 4); break;                                                      \
        default: TILE_STORE(7, cbuf[3], N * 4); break;                                                     \
        }                                                                                                  \
    } while (0)

/* One 16-output tile (rows o_t .. o_t + valid - 1) times activation group g, over all blocks. Blocks
 * are software-pipelined as in q4_tiles: product of block b + 2, store of block b + 1's C (a tile store
 * right behind its product stalls), epilogue of block b.
 * Epilogue lanes are (output, row) pairs: N == 16 keeps one accumulator per output (lanes = rows),
 * N < 16 packs 16 / N outputs per vector (flat index o * N + c). */
VS_INLINE void amx_tile(const vs_mm_job *jb, int64_t o_t, int valid, int64_t g, size_t next_bytes, const int N) {
    const int64_t nb = jb->n_in / 32, G = vs_xq_amx_G(jb->n_rows);
    const size_t rb = jb->w_row_bytes, chunk = vs_xq_amx_chunk(N);
    const uint8_t *wt = jb->w + o_t * rb;
    _Alignas(64) int32_t cbuf[4][16 * 16];
    _Alignas(64) uint8_t abuf[2][16 * 32];
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
    if (valid < 16) memset(abuf, 0, sizeof(abuf));

    ISSUE(0);
    if (nb > 1) ISSUE(1);
    STORE_C(0);
    /* the next tile's weights, prefetched linearly (see vnni_rows); none after the last */
    const uint8_t *next = next_bytes ? wt + 16 * rb : NULL;
    size_t pf = 0;
    for (int64_t b = 0; b < nb; b++) {
        for (size_t pe = next_bytes * (size_t)(b + 1) / (size_t)nb; pf < pe; pf += 64)
            _mm_prefetch((const char *)next + pf, _MM_HINT_T0);
        if (b + 2 < nb) ISSUE(b + 2);
        if (b + 1 < nb) STORE_C(b + 1);
        const int32_t *cb = cbuf[b & 3];
        const uint8_t *ch = jb->xq + (size_t)(b * G + g) * chunk;
        __m512 dwv = gather_scales(wt, rb, (size_t)(b * 34), valid);
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
    TILE_RELEASE();
}

/* ---- Q8_0, one to four activation rows with AVX-512 VNNI, bitwise equal to the AMX tiles ----
 * Decoding (n_rows == 1) streams every weight once for a single row, where a tile product wastes 15 of
 * its 16 columns; VNNI dot products are cheaper there. To keep batch invariance this kernel reads the same AMX layout (N = 1, 2 or 4) and produces,
 * per output and row, the same exact integer block dots and then the same float operations in the same
 * order as amx_tile: acc = fma((float)isum_b, d_w * d_x, acc) for b = 0, 1, ... Lanes are 16 outputs.
 * Per block: 8 vectors of two outputs' 32 weights (unsigned: w + 128), shared by the rows; per row, 8
 * dot products with the row's 32 q (in both halves), each started from -128 * (sum of the lane's 4 q) so the lane sums are exact, and a three-level add tree that turns the 8 x (2 outputs x
 * 8 lanes) into one vector of 16 block dots. */

/* Sums adjacent halves of the lane groups of a and b: groups of 2h lanes -> groups of h, a's then b's. */
VS_INLINE __m512i fold(__m512i a, __m512i b, __m512i ilo, __m512i ihi) {
    return _mm512_add_epi32(_mm512_permutex2var_epi32(a, ilo, b), _mm512_permutex2var_epi32(a, ihi, b));
}

VS_INLINE void vnni_rows(const vs_mm_job *jb, int64_t o0, int64_t o1, const int R) {
    const int N = vs_xq_amx_N(R);
    const int64_t nb = jb->n_in / 32;
    const size_t rb = jb->w_row_bytes, chunk = vs_xq_amx_chunk(N);
    const __m512i x80 = _mm512_set1_epi8((char)0x80);
    /* fold indices: h = 4, 2, 1 (lanes per output after the fold) */
    __m512i ilo[3], ihi[3];
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
        const size_t next_bytes = o + 16 < o1 ? (size_t)VS_MIN(16, o1 - o - 16) * rb : 0;
        const uint8_t *next = next_bytes ? wt + 16 * rb : NULL;
        size_t pf = 0;
        for (int64_t b = 0; b < nb; b++) {
            for (size_t pe = next_bytes * (size_t)(b + 1) / (size_t)nb; pf < pe; pf += 64)
                _mm_prefetch((const char *)next + pf, _MM_HINT_T0);
            const uint8_t *ch = jb->xq + (size_t)b * chunk;
            const size_t boff = (size_t)b * 34;
            __m512i wv[8];
            VS_UNROLL
            for (int j = 0; j < 8; j++) {
                const uint8_t *pa = wrow[2 * j] + boff, *pb = wrow[2 * j + 1] + boff;
                __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)pa)),
                                               _mm256_loadu_si256((const __m256i *)pb), 1);
                wv[j] = _mm512_xor_si512(w, x80);
            }
            __m512 dwv = gather_scales(wt, rb, boff, valid);
            const __m512i z0 = _mm512_loadu_si512(ch), z1 = _mm512_loadu_si512(ch + 64);
            VS_UNROLL
            for (int c = 0; c < R; c++) {
                __m256i q = N == 1 ? _mm512_castsi512_si256(z0)
                                   : _mm512_castsi512_si256(_mm512_permutex2var_epi32(z0, xidx[c], z1));
                const __m512i xq = _mm512_broadcast_i64x4(q);
                const __m512i cinit = _mm512_sub_epi32(_mm512_setzero_si512(),
                                                       _mm512_dpbusd_epi32(_mm512_setzero_si512(), x80, xq));
                __m512i v[8];
                VS_UNROLL
                for (int j = 0; j < 8; j++) v[j] = _mm512_dpbusd_epi32(cinit, wv[j], xq);
                __m512i f0 = fold(v[0], v[1], ilo[0], ihi[0]), f1 = fold(v[2], v[3], ilo[0], ihi[0]);
                __m512i f2 = fold(v[4], v[5], ilo[0], ihi[0]), f3 = fold(v[6], v[7], ilo[0], ihi[0]);
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

/* ---- Q8_0 and Q4_0, any number of rows, with AVX-512 VNNI on 16-output lanes ----
 * The kernel of every AVX-512 VNNI CPU without AMX (all row counts), and of AMX CPUs for Q4_0 with 1-4
 * rows. A 16-output tile's weights are brought into lane order once per block: 8 vectors W[j] whose lane o
 * holds output o's 4 weights that meet activation dword j (Q8_0: values 4j..4j+3 as w + 128, by an xor;
 * Q4_0: the nibbles, q + 8: low nibbles of dword j are values 4j..4j+3, high nibbles 16+4j..16+4j+3).
 * From GGUF rows that is a transpose (16 x 16 bytes per 4 dwords: 8 permutes); from the load-time x16
 * copy (kernels.h) plain loads. Each row then costs 8 vpdpbusd with its chunk's q dwords broadcast from
 * memory, started from the row's -K * sum(q) (K = 128 or 8, the weights' offset), and one scaled FMA:
 * acc = fma((float)isum_b, d_w * d_x, acc) for b = 0, 1, ..., the float operations of every kernel here
 * (batch invariance). Rows go in their AMX groups; a group's rows share the weights in registers. (Before
 * this, CPUs without AMX ran a kernel with two blocks per vector whose per-row cost, a dot, a scale
 * permute, a conversion and an FMA per block pair, made 6 rows cost 2.3x one row.) */

/* The permutes of lanes4. Stage 1 (a pair of 4-row vectors -> 8 rows' dwords 0,1 or 2,3): lane
 * 2r + d takes row r's dword d, from the first vector (rows 0-3) or the second (+16). Stage 2 (the two
 * 8-row halves -> dword i of all 16 rows): lane l takes lane 2 (l % 8) + (i % 2) of the first half or
 * the second (+16). */
static const int32_t k_q4_stage1[2][16] = {{0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29},
                                           {2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31}};
static const int32_t k_q4_stage2[2][16] = {{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30},
                                           {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31}};

/* A 16-output tile's weights: the 16 GGUF rows (rows past `valid` repeat the last one) at their quants,
 * or (pn != NULL) the tile of the x16 copy (kernels.h): quants already in lane order at pn, 16
 * contiguous fp16 scales per block at ps. */
typedef struct lane_src {
    const uint8_t *wt; /* the tile's first GGUF row */
    size_t rb, bbytes; /* GGUF row bytes; bytes of one block (34 or 18) */
    int valid;
    const uint8_t *wrow[16];
    const uint8_t *pn, *ps;
} lane_src;

VS_INLINE void lane_src_init(lane_src *src, const vs_mm_job *jb, int64_t o, int valid) {
    src->rb = jb->w_row_bytes;
    src->bbytes = jb->wtype == VS_TYPE_Q8_0 ? 34 : 18;
    src->wt = jb->w + o * src->rb;
    src->valid = valid;
    for (int k = 0; k < 16; k++) src->wrow[k] = src->wt + (size_t)VS_MIN(k, valid - 1) * src->rb + 2;
    src->pn = src->ps = NULL;
    if (jb->wp) {
        const int64_t nb = jb->n_in / 32;
        src->pn = jb->wp + (size_t)(o / 16 * nb) * vs_x16_block_bytes(jb->wtype);
        src->ps = src->pn + (size_t)nb * (vs_x16_block_bytes(jb->wtype) - 32);
    }
}

/* The next tile's bytes and start, for the linear prefetch of lane_group / q4_tiles. */
VS_INLINE const uint8_t *lane_next(const lane_src *src, const vs_mm_job *jb) {
    return src->pn ? src->pn + (size_t)(jb->n_in / 32) * vs_x16_block_bytes(jb->wtype) : src->wt + 16 * src->rb;
}

/* The 16 weight rows' 16 bytes at byte offset off as 4 vectors: P[i] lane o = dword i of row o. */
VS_INLINE void lanes4(const lane_src *src, size_t off, __m512i P[4]) {
    const uint8_t *const *wrow = src->wrow;
    __m512i z[4]; /* z[k] = rows 4k..4k+3, 16 bytes each: lane 4m + i = dword i of row 4k + m */
    VS_UNROLL
    for (int k = 0; k < 4; k++) {
        __m256i lo = _mm256_loadu2_m128i((const __m128i *)(wrow[4 * k + 1] + off), (const __m128i *)(wrow[4 * k] + off));
        __m256i hi = _mm256_loadu2_m128i((const __m128i *)(wrow[4 * k + 3] + off), (const __m128i *)(wrow[4 * k + 2] + off));
        z[k] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    }
    /* a[h]: rows 8h..8h+7, dwords 0,1 (a[h][0]) or 2,3 (a[h][1]), lane 2 * row + (dword & 1) */
    __m512i a[2][2];
    VS_UNROLL
    for (int h = 0; h < 2; h++)
        for (int d = 0; d < 2; d++)
            a[h][d] = _mm512_permutex2var_epi32(z[2 * h], _mm512_loadu_si512(k_q4_stage1[d]), z[2 * h + 1]);
    VS_UNROLL
    for (int i = 0; i < 4; i++) /* dword i of all rows */
        P[i] = _mm512_permutex2var_epi32(a[0][i / 2], _mm512_loadu_si512(k_q4_stage2[i % 2]), a[1][i / 2]);
}

/* Block b of the tile as the 8 vectors W[j] (see above). Q8 says the type (Q8_0 or Q4_0), P whether
 * the x16 copy is read. */
VS_INLINE void lane_block(const lane_src *src, int64_t b, __m512i W[8], const bool P, const bool Q8) {
    if (Q8) {
        const __m512i x80 = _mm512_set1_epi8((char)0x80);
        if (P) {
            VS_UNROLL
            for (int j = 0; j < 8; j++) W[j] = _mm512_loadu_si512(src->pn + 512 * b + 64 * j);
        } else {
            lanes4(src, (size_t)b * 34, W);
            lanes4(src, (size_t)b * 34 + 16, W + 4);
        }
        VS_UNROLL
        for (int j = 0; j < 8; j++) W[j] = _mm512_xor_si512(W[j], x80);
        return;
    }
    const __m512i m = _mm512_set1_epi8(0x0f);
    __m512i p[4];
    if (P) {
        VS_UNROLL
        for (int i = 0; i < 4; i++) p[i] = _mm512_loadu_si512(src->pn + 256 * b + 64 * i);
    } else {
        lanes4(src, (size_t)b * 18, p);
    }
    VS_UNROLL
    for (int i = 0; i < 4; i++) {
        W[i] = _mm512_and_si512(p[i], m);
        W[4 + i] = _mm512_and_si512(_mm512_srli_epi16(p[i], 4), m);
    }
}

/* Block b's 16 weight scales as f32 (0 past `valid`; the x16 copy holds zeros there). */
VS_INLINE __m512 lane_scales(const lane_src *src, int64_t b, const bool P) {
    if (P) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src->ps + 32 * b)));
    return gather_scales(src->wt, src->rb, (size_t)b * src->bbytes, src->valid);
}

VS_INLINE void lane_group(const vs_mm_job *jb, int64_t o, int valid, int64_t g, size_t next_bytes, const int R,
                          const bool P, const bool Q8) {
    const int N = vs_xq_amx_N(jb->n_rows);
    const int64_t nb = jb->n_in / 32, G = vs_xq_amx_G(jb->n_rows);
    const size_t chunk = vs_xq_amx_chunk(N);
    lane_src src;
    lane_src_init(&src, jb, o, valid);
    __m512 acc[16];
    VS_UNROLL
    for (int c = 0; c < R; c++) acc[c] = _mm512_setzero_ps();
    /* the next tile's weights, prefetched linearly (see vnni_rows); none after the last */
    const uint8_t *next = next_bytes ? lane_next(&src, jb) : NULL;
    size_t pf = 0;
    for (int64_t b = 0; b < nb; b++) {
        for (size_t pe = next_bytes * (size_t)(b + 1) / (size_t)nb; pf < pe; pf += 64)
            _mm_prefetch((const char *)next + pf, _MM_HINT_T0);
        __m512i W[8];
        lane_block(&src, b, W, P, Q8);
        const __m512 dwv = lane_scales(&src, b, P);
        const uint8_t *ch = jb->xq + (size_t)(b * G + g) * chunk;
        const int32_t *xd = (const int32_t *)ch, *corr = (const int32_t *)(ch + 32 * N + 64);
        const float *dx = (const float *)(ch + 32 * N);
        VS_UNROLL
        for (int c = 0; c < R; c++) {
            /* row c's dword j: Q8_0 a B tile's order ([j][N]), Q4_0 an A tile's ([N][8]). Few rows: two
             * chains of dot products (integer sums, exact in any order) to hide their latency. */
            __m512i v = _mm512_set1_epi32(corr[c]), v2 = _mm512_setzero_si512();
            VS_UNROLL
            for (int j = 0; j < 8; j++) {
                const __m512i xj = _mm512_set1_epi32(xd[Q8 ? j * N + c : 8 * c + j]);
                if (R <= 2 && (j & 1)) v2 = _mm512_dpbusd_epi32(v2, W[j], xj);
                else v = _mm512_dpbusd_epi32(v, W[j], xj);
            }
            if (R <= 2) v = _mm512_add_epi32(v, v2);
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(dwv, _mm512_set1_ps(dx[c])), acc[c]);
        }
    }
    const __mmask16 m = valid >= 16 ? 0xffff : (__mmask16)((1u << valid) - 1);
    VS_UNROLL
    for (int c = 0; c < R; c++) _mm512_mask_storeu_ps(jb->y + (g * N + c) * jb->n_out + o, m, acc[c]);
}

/* ---- Q4_0 with AMX tiles, weights as the B operand ----
 * q4_lanes' 8 vectors are exactly an AMX B tile (8 rows of 16 outputs x 4 K bytes), so the activations
 * are the A tile (the group's rows of 32 q, straight from the chunk) and C = A.B is rows x 16 outputs:
 * lanes = outputs, as in q4_group, with the same per-row epilogue (the -8 * sum(q) correction is added
 * to the exact tile sum instead of starting from it). Tiles are pipelined two blocks ahead: tmm0-3 a
 * ring of C tiles, tmm4/5 A, tmm6/7 B, so a block's epilogue reads a C stored two blocks earlier. */
static void amx_q4_config(int N) {
    vs_amx_cfg cfg = vs_amx_cfg_new();
    for (int i = 0; i < 4; i++) cfg.rows[i] = (uint8_t)N, cfg.colsb[i] = 64;
    for (int i = 4; i < 6; i++) cfg.rows[i] = (uint8_t)N, cfg.colsb[i] = 32;
    for (int i = 6; i < 8; i++) cfg.rows[i] = 8, cfg.colsb[i] = 64;
    vs_amx_load_cfg(&cfg);
}

/* Block b's weights, unpacked into its B buffer. */
VS_INLINE void q4_prepare(const lane_src *src, uint8_t *bb, int64_t b, const bool P) {
    __m512i W[8];
    lane_block(src, b, W, P, false);
    VS_UNROLL
    for (int j = 0; j < 8; j++) _mm512_store_si512(bb + 64 * j, W[j]);
}

#define Q4_ISSUE(Ct, At, Bt, b)                                                                              \
    do {                                                                                                   \
        TILE_LOAD(Bt, bbuf[(b) & 3], 64);                                                                  \
        TILE_LOAD(At, jb->xq + (size_t)((b) * G + g) * chunk, 32);                                         \
        __asm__ volatile("tilezero %%tmm" #Ct "\n\ttdpbsud %%tmm" #Bt ", %%tmm" #At ", %%tmm" #Ct ::: "memory"); \
    } while (0)

/* Block b's tile product, from its B buffer (filled at least one block earlier: a tile load right after
 * the vector stores it reads waits for them to reach L1, ~60 ns per block measured) into C buffer b & 3. */
VS_INLINE void q4_issue(const vs_mm_job *jb, uint8_t (*bbuf)[512], int64_t b, int64_t g, int64_t G, size_t chunk) {
    switch (b & 3) {
    case 0: Q4_ISSUE(0, 4, 6, b); break;
    case 1: Q4_ISSUE(1, 5, 7, b); break;
    case 2: Q4_ISSUE(2, 4, 6, b); break;
    default: Q4_ISSUE(3, 5, 7, b); break;
    }
}

/* Block b's C tile to its buffer: one block after its tile product, since a tile store right behind
 * the product waits for it and holds up everything behind it. */
VS_INLINE void q4_store(int32_t (*cbuf)[256], int64_t b) {
    switch (b & 3) {
    case 0: TILE_STORE(0, cbuf[0], 64); break;
    case 1: TILE_STORE(1, cbuf[1], 64); break;
    case 2: TILE_STORE(2, cbuf[2], 64); break;
    default: TILE_STORE(3, cbuf[3], 64); break;
    }
}

VS_INLINE void q4_tiles(const vs_mm_job *jb, int64_t o, int valid, int64_t g, size_t next_bytes, const int R,
                        const bool P) {
    const int N = vs_xq_amx_N(jb->n_rows);
    const int64_t nb = jb->n_in / 32, G = vs_xq_amx_G(jb->n_rows);
    const size_t chunk = vs_xq_amx_chunk(N);
    lane_src src;
    lane_src_init(&src, jb, o, valid);
    _Alignas(64) uint8_t bbuf[4][512];
    _Alignas(64) int32_t cbuf[4][256];
    __m512 acc[16];
    VS_UNROLL
    for (int c = 0; c < R; c++) acc[c] = _mm512_setzero_ps();
    const uint8_t *next = next_bytes ? lane_next(&src, jb) : NULL;
    size_t pf = 0;
    /* stages: unpack block b + 3, tile product of block b + 2, epilogue of block b */
    for (int64_t b = 0; b < VS_MIN(nb, 3); b++) q4_prepare(&src, bbuf[b & 3], b, P);
    for (int64_t b = 0; b < VS_MIN(nb, 2); b++) q4_issue(jb, bbuf, b, g, G, chunk);
    q4_store(cbuf, 0);
    for (int64_t b = 0; b < nb; b++) {
        for (size_t pe = next_bytes * (size_t)(b + 1) / (size_t)nb; pf < pe; pf += 64)
            _mm_prefetch((const char *)next + pf, _MM_HINT_T0);
        if (b + 3 < nb) q4_prepare(&src, bbuf[(b + 3) & 3], b + 3, P);
        if (b + 2 < nb) q4_issue(jb, bbuf, b + 2, g, G, chunk);
        if (b + 1 < nb) q4_store(cbuf, b + 1);
        const __m512 dwv = lane_scales(&src, b, P);
        const uint8_t *ch = jb->xq + (size_t)(b * G + g) * chunk;
        const int32_t *corr = (const int32_t *)(ch + 32 * N + 64), *cb = cbuf[b & 3];
        const float *dx = (const float *)(ch + 32 * N);
        VS_UNROLL
        for (int c = 0; c < R; c++) {
            __m512i v = _mm512_add_epi32(_mm512_load_si512(cb + 16 * c), _mm512_set1_epi32(corr[c]));
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(dwv, _mm512_set1_ps(dx[c])), acc[c]);
        }
    }
    const __mmask16 m = valid >= 16 ? 0xffff : (__mmask16)((1u << valid) - 1);
    VS_UNROLL
    for (int c = 0; c < R; c++) _mm512_mask_storeu_ps(jb->y + (g * N + c) * jb->n_out + o, m, acc[c]);
}

/* The lane kernels (and Q4_0's tiles): 16-output tiles x row groups, the group's row count a compile-time
 * constant. */
static void lane_driver(const vs_mm_job *jb, int64_t o0, int64_t o1, bool tiles) {
    const int N = vs_xq_amx_N(jb->n_rows);
    const int64_t G = vs_xq_amx_G(jb->n_rows);
    const bool q8 = jb->wtype == VS_TYPE_Q8_0;
    if (tiles) amx_q4_config(N);
    for (int64_t o = o0; o < o1; o += 16) {
        const int valid = (int)VS_MIN(16, o1 - o);
        const size_t nx = o + 16 >= o1 ? 0
                          : jb->wp     ? (size_t)(jb->n_in / 32) * vs_x16_block_bytes(jb->wtype)
                                       : (size_t)VS_MIN(16, o1 - o - 16) * jb->w_row_bytes;
        for (int64_t g = 0; g < G; g++) {
            const size_t pfb = g == 0 ? nx : 0;
            switch ((int)VS_MIN((int64_t)N, jb->n_rows - g * N)) {
#define VS_LANE_CASE(r)                                                                   \
    case r:                                                                               \
        if (tiles && jb->wp) q4_tiles(jb, o, valid, g, pfb, r, true);                     \
        else if (tiles) q4_tiles(jb, o, valid, g, pfb, r, false);                         \
        else if (q8 && jb->wp) lane_group(jb, o, valid, g, pfb, r, true, true);           \
        else if (q8) lane_group(jb, o, valid, g, pfb, r, false, true);                    \
        else if (jb->wp) lane_group(jb, o, valid, g, pfb, r, true, false);                \
        else lane_group(jb, o, valid, g, pfb, r, false, false);                           \
        break;
                VS_LANE_CASE(1) VS_LANE_CASE(2) VS_LANE_CASE(3) VS_LANE_CASE(4) VS_LANE_CASE(5) VS_LANE_CASE(6)
                VS_LANE_CASE(7) VS_LANE_CASE(8) VS_LANE_CASE(9) VS_LANE_CASE(10) VS_LANE_CASE(11) VS_LANE_CASE(12)
                VS_LANE_CASE(13) VS_LANE_CASE(14) VS_LANE_CASE(15) VS_LANE_CASE(16)
#undef VS_LANE_CASE
            default: break;
            }
        }
    }
    if (tiles) TILE_RELEASE();
}

void vs_mm_lanes_vnni(const vs_mm_job *jb, int64_t o0, int64_t o1) { lane_driver(jb, o0, o1, false); }
void vs_mm_amx_q4_tiles(const vs_mm_job *jb, int64_t o0, int64_t o1) { lane_driver(jb, o0, o1, true); }
