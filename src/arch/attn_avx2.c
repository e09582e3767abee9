/* attn_avx2: AVX2 + F16C + FMA inner loops of the decoder's attention over an F32 or F16 KV cache.
 * The scalar twins live in lm.c (attn_*_ref) and tests/test_lm.c compares the two. Only called after
 * vs_isa_detect() reported at least AVX2. Shapes: q [hd], k and v [T][hd] (row stride hd), s/p [T]. */
#include <immintrin.h>
#include <stdint.h>

static inline float hsum256(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

static inline __m256 load8(const void *base, int f16, int64_t i) {
    if (f16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)base + i)));
    return _mm256_loadu_ps((const float *)base + i);
}

static inline float load1(const void *base, int f16, int64_t i) {
    if (f16) {
        __m128i h = _mm_cvtsi32_si128(((const uint16_t *)base)[i]);
        return _mm_cvtss_f32(_mm_cvtph_ps(h));
    }
    return ((const float *)base)[i];
}

/* s[t] = scale * dot(q, k[t]) for t < T. */
void vs_attn_qk_avx2(float *s, const float *q, const void *k, int f16, int T, int hd, float scale) {
    int hd8 = hd & ~7;
    for (int t = 0; t < T; t++) {
        int64_t base = (int64_t)t * hd;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        int d = 0;
        for (; d + 16 <= hd8; d += 16) {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load8(k, f16, base + d), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), load8(k, f16, base + d + 8), a1);
        }
        for (; d < hd8; d += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load8(k, f16, base + d), a0);
        float acc = hsum256(_mm256_add_ps(a0, a1));
        for (; d < hd; d++) acc += q[d] * load1(k, f16, base + d);
        s[t] = acc * scale;
    }
}

/* o[d] = sum_t p[t] * v[t][d] (o overwritten; rows with p[t] == 0 are skipped). */
void vs_attn_pv_avx2(float *o, const float *p, const void *v, int f16, int T, int hd) {
    int hd8 = hd & ~7;
    for (int d = 0; d < hd; d++) o[d] = 0.0f;
    for (int t = 0; t < T; t++) {
        if (p[t] == 0.0f) continue;
        int64_t base = (int64_t)t * hd;
        __m256 pt = _mm256_set1_ps(p[t]);
        int d = 0;
        for (; d < hd8; d += 8)
            _mm256_storeu_ps(o + d, _mm256_fmadd_ps(pt, load8(v, f16, base + d), _mm256_loadu_ps(o + d)));
        for (; d < hd; d++) o[d] += p[t] * load1(v, f16, base + d);
    }
}

/* dst[i] = src[i] as F32 or F16 (round to nearest even), n values. */
void vs_attn_store_avx2(void *dst, const float *src, int f16, int n) {
    if (!f16) {
        float *d = dst;
        for (int i = 0; i < n; i++) d[i] = src[i];
        return;
    }
    uint16_t *d = dst;
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) {
        __m128i h = _mm_cvtps_ph(_mm_set_ss(src[i]), _MM_FROUND_TO_NEAREST_INT);
        d[i] = (uint16_t)_mm_extract_epi16(h, 0);
    }
}
