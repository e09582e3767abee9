/* test_quant: type traits, fp16/bf16 conversions (exhaustive or against an independent reference),
 * and Q8_0 / Q4_0 block layouts and rounding on hand-computed blocks and random data; the K-quants'
 * layouts against a value-by-value reading of llama.cpp's format on random blocks, hand-made blocks, and
 * quantiser round trips with error bounds. */
#include <math.h>
#include <string.h>

#include "quant.h"
#include "testutil.h"

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_traits(void) {
    VT_CHECK(vs_type_supported(VS_TYPE_F32) && vs_type_supported(VS_TYPE_Q4_0) && !vs_type_supported(3),
             "supported set");
    VT_CHECK(!strcmp(vs_type_name(VS_TYPE_Q8_0), "Q8_0") && !strcmp(vs_type_name(99), "?"), "names");
    VT_CHECK(vs_type_from_name("q4_0") == VS_TYPE_Q4_0 && vs_type_from_name("BF16") == VS_TYPE_BF16, "from");
    VT_CHECK(vs_type_from_name("Q4") == -1 && vs_type_from_name("") == -1 && vs_type_from_name(NULL) == -1,
             "from unknown");
    VT_CHECK(vs_type_block_size(VS_TYPE_Q8_0) == 32 && vs_type_block_bytes(VS_TYPE_Q8_0) == 34, "q8 traits");
    VT_CHECK(vs_type_block_size(VS_TYPE_Q4_0) == 32 && vs_type_block_bytes(VS_TYPE_Q4_0) == 18, "q4 traits");
    VT_CHECK(vs_type_row_bytes(VS_TYPE_F16, 7) == 14 && vs_type_row_bytes(VS_TYPE_BF16, 3) == 6, "f16 row");
    VT_CHECK(vs_type_row_bytes(VS_TYPE_Q4_0, 64) == 36 && vs_type_row_bytes(VS_TYPE_Q4_0, 48) == 0, "q4 row");
    VT_CHECK(vs_type_row_bytes(VS_TYPE_Q8_0, 2048) == 2176 && vs_type_row_bytes(VS_TYPE_F32, 5) == 20, "row");
}

/* Every half: the decoded value equals the IEEE formula. */
static void test_fp16_decode_exhaustive(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float v = vs_fp16_to_fp32((uint16_t)h);
        int e = (h >> 10) & 31, m = h & 1023;
        double s = (h & 0x8000) ? -1.0 : 1.0, want;
        if (e == 31) {
            if (m == 0 ? !(isinf(v) && (v < 0) == (s < 0)) : !isnan(v)) bad++;
            continue;
        }
        want = e == 0 ? s * ldexp(m, -24) : s * ldexp(1024 + m, e - 25);
        if ((double)v != want || (signbit(v) != 0) != (s < 0)) bad++;
        /* and every non-NaN half survives the round trip */
        if (vs_fp32_to_fp16(v) != h) bad++;
    }
    VT_CHECK(bad == 0, "%d halves decode or round-trip wrongly", bad);
}

/* Independent fp32 -> fp16 reference: binary search over the ordered positive halves for the nearest
 * one (ties to the even code), Inf at or beyond 65520. */
static uint16_t fp16_ref(float f) {
    if (isnan(f)) return 0x7e00;
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);
    if (a >= 65520.0) return sign | 0x7c00;
    uint32_t lo = 0, hi = 0x7bff; /* find the largest code with value <= a */
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1) / 2;
        if ((double)vs_fp16_to_fp32((uint16_t)mid) <= a) lo = mid;
        else hi = mid - 1;
    }
    uint32_t c = lo;
    if (c < 0x7bff || a > 65504.0) {
        double v0 = vs_fp16_to_fp32((uint16_t)c), v1 = c < 0x7bff ? vs_fp16_to_fp32((uint16_t)(c + 1)) : 65536.0;
        if (a - v0 > v1 - a || (a - v0 == v1 - a && (c & 1))) c++;
        if (c > 0x7bff) return sign | 0x7c00;
    }
    return sign | (uint16_t)c;
}

static void test_fp16_encode(void) {
    static const struct {
        float f;
        uint16_t h;
    } known[] = {
        {1.0f, 0x3c00},           {-2.0f, 0xc000},         {65504.0f, 0x7bff},      {65519.0f, 0x7bff},
        {65520.0f, 0x7c00},       {1e6f, 0x7c00},          {0x1p-24f, 0x0001},      {0x1p-25f, 0x0000},
        {0x1.8p-25f, 0x0001},     {0x1p-14f, 0x0400},      {0x1.ffcp-15f, 0x0400},  {-0.0f, 0x8000},
        {1.0f + 0x1p-11f, 0x3c00}, {1.0f + 0x3p-11f, 0x3c02}, {0x3p-25f, 0x0002},    {0x1p-30f, 0x0000},
    };
    for (size_t i = 0; i < VS_ARRAY_LEN(known); i++)
        VT_CHECK(vs_fp32_to_fp16(known[i].f) == known[i].h, "fp16(%a) = %04x, want %04x", known[i].f,
                 vs_fp32_to_fp16(known[i].f), known[i].h);
    VT_CHECK(vs_fp32_to_fp16(INFINITY) == 0x7c00 && vs_fp32_to_fp16(-INFINITY) == 0xfc00, "inf");
    uint16_t hn = vs_fp32_to_fp16(NAN);
    VT_CHECK((hn & 0x7c00) == 0x7c00 && (hn & 0x3ff), "NaN stays NaN (%04x)", hn);
    /* random bit patterns (all exponents) and values near the subnormal / overflow edges */
    vs_rng rng;
    vs_rng_seed(&rng, 1);
    int bad = 0;
    for (int i = 0; i < 400000; i++) {
        float f;
        if (i % 2) f = bitsf((uint32_t)vs_rng_u64(&rng));
        else f = (float)ldexp(vs_rng_uniform(&rng) * 2 - 1, (int)vs_rng_below(&rng, 48) - 30);
        if (isnan(f)) continue;
        if (vs_fp32_to_fp16(f) != fp16_ref(f)) {
            if (bad++ < 5) fprintf(stderr, "fp16(%a): %04x vs ref %04x\n", f, vs_fp32_to_fp16(f), fp16_ref(f));
        }
    }
    VT_CHECK(bad == 0, "%d fp16 encodings differ from the reference", bad);
}

static uint16_t bf16_ref(float f) {
    uint32_t u = fbits(f);
    uint16_t t = (uint16_t)(u >> 16);
    double v0 = vs_bf16_to_fp32(t), v1 = vs_bf16_to_fp32((uint16_t)(t + 1)), a = f;
    /* same sign, so the next code is farther from zero */
    double d0 = fabs(a - v0), d1 = isinf(v1) ? fabs(a - copysign(0x1p128, a)) : fabs(a - v1);
    if (d1 < d0 || (d1 == d0 && (t & 1))) t++;
    return t;
}

static void test_bf16(void) {
    VT_CHECK(vs_fp32_to_bf16(1.0f) == 0x3f80 && vs_bf16_to_fp32(0x3f80) == 1.0f, "one");
    VT_CHECK(vs_fp32_to_bf16(bitsf(0x3f808000)) == 0x3f80, "tie to even (down)");
    VT_CHECK(vs_fp32_to_bf16(bitsf(0x3f818000)) == 0x3f82, "tie to even (up)");
    VT_CHECK(vs_fp32_to_bf16(bitsf(0x7f7fffff)) == 0x7f80, "max float rounds to inf");
    VT_CHECK(vs_fp32_to_bf16(INFINITY) == 0x7f80 && vs_fp32_to_bf16(-INFINITY) == 0xff80, "inf");
    uint16_t n = vs_fp32_to_bf16(bitsf(0x7f800001)); /* NaN whose payload lives in the low bits */
    VT_CHECK((n & 0x7f80) == 0x7f80 && (n & 0x7f), "NaN stays NaN (%04x)", n);
    VT_CHECK(vs_fp32_to_bf16(bitsf(0x00012345)) == 0x0001, "subnormal kept (%04x)", vs_fp32_to_bf16(bitsf(0x00012345)));
    vs_rng rng;
    vs_rng_seed(&rng, 2);
    int bad = 0;
    for (int i = 0; i < 400000; i++) {
        float f = bitsf((uint32_t)vs_rng_u64(&rng));
        if (isnan(f) || isinf(f)) continue;
        if (vs_fp32_to_bf16(f) != bf16_ref(f)) bad++;
    }
    VT_CHECK(bad == 0, "%d bf16 encodings differ from the reference", bad);
    for (uint32_t h = 0; h < 65536; h += 7) {
        float v = vs_bf16_to_fp32((uint16_t)h);
        if (!isnan(v)) VT_CHECK(vs_fp32_to_bf16(v) == h, "bf16 round trip %04x", h);
    }
}

static void test_q8_0_block(void) {
    float x[32];
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16);
    vs_block_q8_0 b;
    vs_quantize_row(VS_TYPE_Q8_0, x, &b, 32);
    VT_CHECK(b.d == vs_fp32_to_fp16(16.0f / 127.0f), "d %04x", b.d);
    VT_CHECK(b.qs[0] == -127 && b.qs[16] == 0 && b.qs[31] == 119 && b.qs[17] == 8, "qs %d %d %d %d", b.qs[0],
             b.qs[16], b.qs[31], b.qs[17]);
    /* ties round away from zero (roundf), as ggml's reference quantiser does */
    memset(x, 0, sizeof(x));
    x[0] = 127.0f;
    x[1] = 2.5f;
    x[2] = -2.5f;
    x[3] = 0.5f;
    vs_quantize_row(VS_TYPE_Q8_0, x, &b, 32);
    VT_CHECK(b.d == 0x3c00 && b.qs[0] == 127 && b.qs[1] == 3 && b.qs[2] == -3 && b.qs[3] == 1, "ties %d %d %d",
             b.qs[1], b.qs[2], b.qs[3]);
    memset(x, 0, sizeof(x));
    vs_quantize_row(VS_TYPE_Q8_0, x, &b, 32);
    VT_CHECK(b.d == 0 && b.qs[5] == 0, "all-zero block");
}

static void test_q4_0_block(void) {
    float x[32];
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16);
    vs_block_q4_0 b;
    vs_quantize_row(VS_TYPE_Q4_0, x, &b, 32);
    /* largest magnitude is -16 (j = 0): d = -16 / -8 = 2, q = min(15, trunc(x / 2 + 8.5)) */
    VT_CHECK(b.d == vs_fp32_to_fp16(2.0f), "d %04x", b.d);
    VT_CHECK(b.qs[0] == 0x80, "qs[0] = %02x: q0 = 0 low, q16 = 8 high", b.qs[0]);
    VT_CHECK(b.qs[15] == 0xf8, "qs[15] = %02x: q15 = trunc(-0.5 + 8.5) = 8 low, q31 = min(15, 16) high", b.qs[15]);
    float y[32];
    vs_dequantize_row(VS_TYPE_Q4_0, &b, y, 32);
    VT_CHECK(y[0] == -16.0f && y[16] == 0.0f && y[31] == 14.0f, "dequant %g %g %g", y[0], y[16], y[31]);
    /* a positive extreme gives a negative scale */
    for (int j = 0; j < 32; j++) x[j] = (float)j * 0.25f;
    vs_quantize_row(VS_TYPE_Q4_0, x, &b, 32);
    VT_CHECK(vs_fp16_to_fp32(b.d) == -7.75f / 8.0f, "negative d %g", vs_fp16_to_fp32(b.d));
    VT_CHECK((b.qs[15] >> 4) == 0, "largest maps to q = 0 (%d)", b.qs[15] >> 4);
}

static void test_random_rows(void) {
    vs_rng rng;
    vs_rng_seed(&rng, 3);
    enum { N = 32 * 40 };
    float x[N], y[N];
    vs_block_q8_0 q8[N / 32];
    vs_block_q4_0 q4[N / 32];
    for (int i = 0; i < N; i++) x[i] = vs_rng_normal(&rng) * (i % 97 == 0 ? 30.0f : 1.0f);
    vs_quantize_row(VS_TYPE_Q8_0, x, q8, N);
    vs_dequantize_row(VS_TYPE_Q8_0, q8, y, N);
    int bad = 0;
    for (int b = 0; b < N / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b * 32 + j]));
        /* half a step plus the fp16 rounding of d (2^-11 relative) times |q| <= 127 */
        double tol = amax / 127.0 * 0.5 + amax * 0x1p-11 * 1.01;
        for (int j = 0; j < 32; j++) bad += fabs(x[b * 32 + j] - y[b * 32 + j]) > tol;
    }
    VT_CHECK(bad == 0, "%d Q8_0 values off by more than half a step", bad);
    vs_quantize_row(VS_TYPE_Q4_0, x, q4, N);
    vs_dequantize_row(VS_TYPE_Q4_0, q4, y, N);
    bad = 0;
    for (int b = 0; b < N / 32; b++) {
        float d = fabsf(vs_fp16_to_fp32(q4[b].d));
        /* one step covers the clamped top code (x / d + 8.5 = 16.5 -> 15); plus fp16 rounding of d */
        for (int j = 0; j < 32; j++) bad += fabs(x[b * 32 + j] - y[b * 32 + j]) > d * 1.01 + 8 * d * 0x1p-11;
    }
    VT_CHECK(bad == 0, "%d Q4_0 values off by more than one step", bad);
    uint16_t h[N];
    vs_quantize_row(VS_TYPE_F16, x, h, N);
    vs_dequantize_row(VS_TYPE_F16, h, y, N);
    bad = 0;
    for (int i = 0; i < N; i++) bad += h[i] != vs_fp32_to_fp16(x[i]) || y[i] != vs_fp16_to_fp32(h[i]);
    vs_quantize_row(VS_TYPE_BF16, x, h, N);
    vs_dequantize_row(VS_TYPE_BF16, h, y, N);
    for (int i = 0; i < N; i++) bad += h[i] != vs_fp32_to_bf16(x[i]) || y[i] != vs_bf16_to_fp32(h[i]);
    vs_quantize_row(VS_TYPE_F32, x, y, N);
    for (int i = 0; i < N; i++) bad += y[i] != x[i];
    VT_CHECK(bad == 0, "%d float-row conversions differ from the scalar ones", bad);
}

/* Value i of a K-quant block read straight from the format description (quant.h), bit by bit: an
 * independent second reading to hold vs_dequantize_row to. */
static float kq_value(vs_type t, const uint8_t *blk, int i) {
    uint16_t h;
    if (t == VS_TYPE_Q6_K) {
        const vs_block_q6_k *b = (const vs_block_q6_k *)blk;
        const int half = i >> 7, k = (i >> 5) & 3, l = i & 31;
        const uint8_t lbyte = b->ql[half * 64 + (k & 1) * 32 + l];
        const int low = k >= 2 ? lbyte >> 4 : lbyte & 0xf;
        const int high = (b->qh[half * 32 + l] >> (2 * k)) & 3;
        memcpy(&h, &b->d, 2);
        return vs_fp16_to_fp32(h) * (float)b->scales[i >> 4] * (float)(low + 16 * high - 32);
    }
    const vs_block_q4_k *b = (const vs_block_q4_k *)blk;
    const int j = i >> 5, g = i >> 6, l = i & 31;
    /* 6-bit fields: sub-block j < 4 in bytes j (scale) and j + 4 (min); j >= 4 split 4 + 2 bits */
    int sc, mn;
    if (j < 4) {
        sc = b->scales[j] % 64;
        mn = b->scales[j + 4] % 64;
    } else {
        sc = b->scales[j + 4] % 16 + 16 * (b->scales[j - 4] / 64);
        mn = b->scales[j + 4] / 16 + 16 * (b->scales[j] / 64);
    }
    const uint8_t *qs = t == VS_TYPE_Q4_K ? b->qs : ((const vs_block_q5_k *)blk)->qs;
    int q = j % 2 ? qs[32 * g + l] / 16 : qs[32 * g + l] % 16;
    if (t == VS_TYPE_Q5_K) q += 16 * ((((const vs_block_q5_k *)blk)->qh[l] >> j) & 1);
    const float d = vs_fp16_to_fp32(b->d), dmin = vs_fp16_to_fp32(b->dmin);
    return d * (float)sc * (float)q - dmin * (float)mn;
}

static void test_kquant_traits(void) {
    VT_CHECK(vs_type_supported(VS_TYPE_Q4_K) && vs_type_supported(VS_TYPE_Q5_K) && vs_type_supported(VS_TYPE_Q6_K) &&
                 !vs_type_supported(11) && !vs_type_supported(15),
             "K-quants supported, Q3_K / Q8_K not");
    VT_CHECK(vs_type_from_name("q4_k") == VS_TYPE_Q4_K && vs_type_from_name("Q5_K") == VS_TYPE_Q5_K &&
                 vs_type_from_name("q6_K") == VS_TYPE_Q6_K && !strcmp(vs_type_name(VS_TYPE_Q6_K), "Q6_K"),
             "K names");
    VT_CHECK(vs_type_block_size(VS_TYPE_Q4_K) == 256 && vs_type_block_bytes(VS_TYPE_Q4_K) == 144 &&
                 vs_type_block_bytes(VS_TYPE_Q5_K) == 176 && vs_type_block_bytes(VS_TYPE_Q6_K) == 210,
             "K block traits");
    VT_CHECK(vs_type_row_bytes(VS_TYPE_Q4_K, 512) == 288 && vs_type_row_bytes(VS_TYPE_Q6_K, 768) == 630 &&
                 vs_type_row_bytes(VS_TYPE_Q5_K, 288) == 0 && vs_type_row_bytes(VS_TYPE_Q4_K, 32) == 0,
             "K row bytes (rows of 288 or 32 are not whole super-blocks)");
}

/* Random bytes as blocks (finite fp16 scales): vs_dequantize_row equals the bit-by-bit reading. */
static void test_kquant_layout_random(void) {
    static const vs_type kt[] = {VS_TYPE_Q4_K, VS_TYPE_Q5_K, VS_TYPE_Q6_K};
    vs_rng rng;
    vs_rng_seed(&rng, 77);
    int bad = 0, n = 0;
    for (size_t ti = 0; ti < VS_ARRAY_LEN(kt); ti++) {
        const size_t bb = vs_type_block_bytes(kt[ti]);
        uint8_t blk[2 * 210];
        float y[512];
        for (int rep = 0; rep < 200; rep++) {
            for (size_t k = 0; k < 2 * bb; k++) blk[k] = (uint8_t)vs_rng_below(&rng, 256);
            for (int b = 0; b < 2; b++) { /* scales: small finite halves */
                const size_t at = kt[ti] == VS_TYPE_Q6_K ? 208 : 0;
                for (int k = 0; k < (kt[ti] == VS_TYPE_Q6_K ? 1 : 2); k++) {
                    uint16_t h = vs_fp32_to_fp16((float)(vs_rng_uniform(&rng) - 0.5) * 0.01f);
                    memcpy(blk + b * bb + at + 2 * k, &h, 2);
                }
            }
            vs_dequantize_row(kt[ti], blk, y, 512);
            for (int i = 0; i < 512; i++, n++) {
                const float want = kq_value(kt[ti], blk + (i / 256) * bb, i % 256);
                if (memcmp(&want, &y[i], 4)) {
                    if (bad++ < 3)
                        fprintf(stderr, "  %s value %d: %.9g, format says %.9g\n", vs_type_name(kt[ti]), i, y[i], want);
                }
            }
        }
    }
    VT_CHECK(bad == 0, "%d of %d K-quant values differ from the format's bit-by-bit reading", bad, n);
}

/* Hand-made blocks: one known value at a known place. */
static void test_kquant_hand(void) {
    vs_block_q4_k b4;
    memset(&b4, 0, sizeof(b4));
    b4.d = vs_fp32_to_fp16(0.5f);
    b4.dmin = vs_fp32_to_fp16(0.25f);
    /* sub-block 5: scale 37 = 0b100101 (low 4 bits 5 in byte 9, top 2 bits 2 in byte 1's top), min 50 =
     * 0b110010 (low 4 bits 2 in byte 9's high nibble, top bits 3 in byte 5's top) */
    b4.scales[9] = 0x25;
    b4.scales[1] = 2 << 6;
    b4.scales[5] = 3 << 6;
    b4.qs[32 * 2 + 7] = 0xb0; /* value 64 * 2 + 32 + 7 = 167 (sub-block 5) is code 11 */
    float y[256];
    vs_dequantize_row(VS_TYPE_Q4_K, &b4, y, 256);
    VT_CHECK(y[167] == 0.5f * 37 * 11 - 0.25f * 50, "Q4_K value 167: %g", y[167]);
    VT_CHECK(y[160] == -0.25f * 50 && y[135] == 0.0f, "Q4_K neighbours: %g %g", y[160], y[135]);
    vs_block_q5_k b5;
    memset(&b5, 0, sizeof(b5));
    b5.d = vs_fp32_to_fp16(1.0f);
    b5.scales[3] = 2;   /* sub-block 3: scale 2, min 0 */
    b5.qs[32 + 4] = 0x30; /* value 64 + 32 + 4 = 100: low bits 3 */
    b5.qh[4] = 1 << 3;  /* fifth bit of sub-block 3's value 4 */
    vs_dequantize_row(VS_TYPE_Q5_K, &b5, y, 256);
    VT_CHECK(y[100] == 2.0f * 19 && y[68] == 0.0f, "Q5_K value 100: %g (value 68 %g)", y[100], y[68]);
    vs_block_q6_k b6;
    memset(&b6, 0, sizeof(b6));
    b6.d = vs_fp32_to_fp16(0.125f);
    /* value 241 = 128 h + 32 k + l with h 1, k 3, l 17: low bits in the high nibble of ql[64 + 32 + 17],
     * high bits at bits 6..7 of qh[32 + 17]; scale 241 / 16 = 15 */
    b6.scales[15] = -3;
    b6.ql[64 + 32 + 17] = 0x90;
    b6.qh[32 + 17] = 2 << 6;
    vs_dequantize_row(VS_TYPE_Q6_K, &b6, y, 256);
    VT_CHECK(y[241] == 0.125f * -3 * (float)(9 + 32 - 32), "Q6_K value 241: %g", y[241]);
    VT_CHECK(y[240] == 0.125f * -3 * -32.0f && y[17] == 0.0f, "Q6_K neighbours: %g %g", y[240], y[17]);
}

/* Round trips of the quantisers on rough data: error bounds per value and overall. */
static void test_kquant_round_trip(void) {
    static const vs_type kt[] = {VS_TYPE_Q4_K, VS_TYPE_Q5_K, VS_TYPE_Q6_K};
    static const double rel_rms_max[] = {0.12, 0.06, 0.03};
    enum { N = 256 * 12 };
    static float x[N], y[N];
    static uint8_t q[N / 256 * 210];
    vs_rng rng;
    vs_rng_seed(&rng, 5);
    for (int i = 0; i < N; i++) x[i] = vs_rng_normal(&rng) * (i % 97 == 0 ? 20.0f : 1.0f) + (i / 256 == 3 ? 5.0f : 0.0f);
    for (int i = 512; i < 768; i++) x[i] = 0.0f;       /* an all-zero super-block */
    for (int i = 1024; i < 1056; i++) x[i] = -2.0f;    /* a constant negative sub-block */
    for (size_t ti = 0; ti < VS_ARRAY_LEN(kt); ti++) {
        vs_quantize_row(kt[ti], x, q, N);
        vs_dequantize_row(kt[ti], q, y, N);
        double se = 0, sx = 0;
        int bad = 0, zero_bad = 0;
        for (int b = 0; b < N / 256; b++) {
            double amax = 0;
            for (int i = 256 * b; i < 256 * b + 256; i++) amax = fmax(amax, fabs(x[i]));
            for (int i = 256 * b; i < 256 * b + 256; i++) {
                se += (x[i] - y[i]) * (x[i] - y[i]);
                sx += (double)x[i] * x[i];
                /* no value moves by more than a quarter of its super-block's largest magnitude (a
                 * clamped or badly rounded code would) */
                bad += fabs(x[i] - y[i]) > 0.25 * amax + 1e-6;
            }
        }
        for (int i = 512; i < 768; i++) zero_bad += y[i] != 0.0f;
        const double rel = sqrt(se / sx);
        printf("quant: %s round trip: rms error / rms value = %.4f (limit %.2f)\n", vs_type_name(kt[ti]), rel,
               rel_rms_max[ti]);
        VT_CHECK(rel <= rel_rms_max[ti], "%s relative rms error %g", vs_type_name(kt[ti]), rel);
        VT_CHECK(bad == 0 && zero_bad == 0, "%s: %d values off by a quarter of amax, %d zeros not zero",
                 vs_type_name(kt[ti]), bad, zero_bad);
        /* quantising what it dequantised reproduces the values (a fixed point up to one rounding step) */
        float z[N];
        memcpy(z, y, sizeof(z));
        vs_quantize_row(kt[ti], z, q, N);
        vs_dequantize_row(kt[ti], q, y, N);
        double se2 = 0;
        for (int i = 0; i < N; i++) se2 += (z[i] - y[i]) * (z[i] - y[i]);
        VT_CHECK(sqrt(se2 / sx) <= rel_rms_max[ti], "%s requantised: rms %g", vs_type_name(kt[ti]), sqrt(se2 / sx));
    }
}

int main(void) {
    test_traits();
    test_kquant_traits();
    test_kquant_layout_random();
    test_kquant_hand();
    test_kquant_round_trip();
    test_fp16_decode_exhaustive();
    test_fp16_encode();
    test_bf16();
    test_q8_0_block();
    test_q4_0_block();
    test_random_rows();
    return vt_finish("quant");
}
