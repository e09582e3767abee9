/* test_kv: the KV cache. Unit checks of truncate / copy / compact on raw rows and their errors, then
 * at the logits level: after each edit, the next forward gives the logits of recomputing the same
 * token history from scratch (F32, F16 and BF16 storage). */
#include "lm_testmodel.h"

#define V 64

/* Fills every row of seq with a value encoding (seq, layer, head, slot, dim) and checks moves. F32: the
 * value spells the indices in decimal; BF16: the indices pick the exponent and dim the mantissa, so every
 * value is exact in bf16 and distinct within a cache of these shapes (2 layers, 3 heads, 10 slots). */
static vs_type g_type = VS_TYPE_F32;
static float tag(int seq, int l, int h, int t, int d) {
    if (g_type == VS_TYPE_BF16) return ldexpf(1.0f + (float)(d % 8) / 8.0f, ((seq * 2 + l) * 3 + h) * 10 + t - 90);
    return (float)(seq * 1000 + l * 100 + h * 10 + t) + d * 1e-3f;
}

static float get(vs_kv *kv, bool k, int seq, int l, int h, int t, int d) { return vs_kv_get(kv, k, seq, l, h, t, d); }

static void fill(vs_kv *kv, int seq, int n) {
    vs_error err = {0};
    for (int l = 0; l < vs_kv_n_layer(kv); l++)
        for (int h = 0; h < vs_kv_n_head_kv(kv); h++)
            for (int t = vs_kv_seq_len(kv, seq); t < vs_kv_seq_len(kv, seq) + n; t++)
                for (int d = 0; d < vs_kv_head_dim(kv); d++) {
                    vs_kv_set(kv, true, seq, l, h, t, d, tag(seq, l, h, t, d));
                    vs_kv_set(kv, false, seq, l, h, t, d, -tag(seq, l, h, t, d));
                }
    VT_CHECK(vs_kv_seq_extend(kv, seq, n, &err) == VS_OK, "%s", err.msg);
}

static void test_unit(vs_type type) {
    vs_error err = {0};
    g_type = type;
    printf("  %s storage\n", vs_type_name(type));
    VT_CHECK(vs_kv_new(0, 1, 1, 1, 1, type, &err) == NULL, "zero layers accepted");
    VT_CHECK(vs_kv_new(1, 1, 1, 1, 1, VS_TYPE_Q8_0, &err) == NULL, "Q8_0 storage accepted");
    VT_CHECK(vs_kv_new(1 << 20, 1 << 10, 1 << 10, 1 << 10, 1 << 20, type, &err) == NULL, "absurd size");
    VT_CHECK(vs_kv_new(1, 1, 3, 1, 4, VS_TYPE_BF16, &err) == NULL && strstr(err.msg, "even"),
             "BF16 with an odd head dimension accepted");
    vs_kv *kv = vs_kv_new(2, 3, 4, 3, 10, type, &err);
    VT_REQUIRE(kv, "%s", err.msg);
    /* BF16: 2 bytes, slots rounded up to 16 */
    size_t want = type == VS_TYPE_BF16 ? 2u * 3 * 2 * 3 * 16 * 4 * 2 : 2u * 3 * 2 * 3 * 10 * 4 * 4;
    VT_CHECK(vs_kv_bytes(kv) == want, "bytes %zu", vs_kv_bytes(kv));
    fill(kv, 0, 8);
    VT_CHECK(vs_kv_seq_len(kv, 0) == 8 && vs_kv_seq_len(kv, 1) == 0, "lengths");
    VT_CHECK(vs_kv_seq_extend(kv, 0, 3, &err) == VS_ERR_RANGE, "extend past n_ctx accepted");
    VT_CHECK(vs_kv_seq_len(kv, 0) == 8, "failed extend changed the length");
    /* copy a prefix */
    VT_CHECK(vs_kv_seq_copy(kv, 0, 2, 5, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(vs_kv_seq_len(kv, 2) == 5, "copy length");
    int ok = 1;
    for (int l = 0; l < 2; l++)
        for (int h = 0; h < 3; h++)
            for (int t = 0; t < 5; t++)
                for (int d = 0; d < 4; d++)
                    ok &= get(kv, true, 2, l, h, t, d) == tag(0, l, h, t, d) &&
                          get(kv, false, 2, l, h, t, d) == -tag(0, l, h, t, d);
    VT_CHECK(ok, "copied rows differ");
    VT_CHECK(vs_kv_seq_copy(kv, 0, 1, 9, &err) == VS_ERR_INVALID, "copy beyond length accepted");
    VT_CHECK(vs_kv_seq_copy(kv, 0, 3, 1, &err) == VS_ERR_INVALID, "copy to bad sequence accepted");
    /* compact rows 4, 6, 7 of seq 0 to slots 3, 4, 5 */
    int32_t slots[3] = {4, 6, 7};
    VT_CHECK(vs_kv_seq_compact(kv, 0, slots, 3, 3, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(vs_kv_seq_len(kv, 0) == 6, "compact length %d", vs_kv_seq_len(kv, 0));
    ok = 1;
    for (int l = 0; l < 2; l++)
        for (int h = 0; h < 3; h++)
            for (int d = 0; d < 4; d++) {
                for (int t = 0; t < 3; t++) ok &= get(kv, true, 0, l, h, t, d) == tag(0, l, h, t, d);
                for (int i = 0; i < 3; i++)
                    ok &= get(kv, true, 0, l, h, 3 + i, d) == tag(0, l, h, slots[i], d) &&
                          get(kv, false, 0, l, h, 3 + i, d) == -tag(0, l, h, slots[i], d);
            }
    VT_CHECK(ok, "compacted rows differ");
    int32_t bad1[2] = {5, 4}, bad2[1] = {2}, bad3[1] = {6};
    VT_CHECK(vs_kv_seq_compact(kv, 0, bad1, 2, 3, &err) == VS_ERR_INVALID, "decreasing slots accepted");
    VT_CHECK(vs_kv_seq_compact(kv, 0, bad2, 1, 3, &err) == VS_ERR_INVALID, "slot before dst accepted");
    VT_CHECK(vs_kv_seq_compact(kv, 0, bad3, 1, 3, &err) == VS_ERR_INVALID, "slot past length accepted");
    VT_CHECK(vs_kv_seq_compact(kv, 0, NULL, 0, 7, &err) == VS_ERR_INVALID, "dst past length accepted");
    VT_CHECK(vs_kv_seq_len(kv, 0) == 6, "failed compact changed the length");
    /* truncate */
    VT_CHECK(vs_kv_seq_truncate(kv, 0, 7, &err) == VS_ERR_INVALID, "growing truncate accepted");
    VT_CHECK(vs_kv_seq_truncate(kv, 0, 2, &err) == VS_OK && vs_kv_seq_len(kv, 0) == 2, "truncate");
    VT_CHECK(vs_kv_seq_truncate(kv, -1, 0, &err) == VS_ERR_INVALID, "negative sequence accepted");
    VT_CHECK(vs_kv_seq_len(kv, 99) == 0, "out-of-range length");
    vs_kv_clear(kv);
    VT_CHECK(vs_kv_seq_len(kv, 2) == 0, "clear");
    vs_kv_free(kv);
}

/* Logits of `next` after the cache holds history[0..n) (any way it got there) vs recomputed fresh. */
static double cmp_fresh(vs_lm *lm, vs_threadpool *tp, vs_type kvt, const int32_t *history, int n,
                        const float *got) {
    vs_error err = {0};
    vs_kv *kv = vs_lm_kv_new(lm, 1, 64, kvt, &err);
    float *all = malloc(sizeof(float) * (size_t)(n + 1) * V);
    VT_CHECK(tm_feed(lm, kv, tp, 0, history, n, all, &err) == VS_OK, "%s", err.msg);
    double d = vt_max_abs_diff(all + (size_t)(n - 1) * V, got, V);
    free(all);
    vs_kv_free(kv);
    return d;
}

static void test_edits(vs_lm *lm, vs_threadpool *tp, vs_type kvt) {
    vs_error err = {0};
    double tol = kvt == VS_TYPE_F32 ? 1e-5 : 1e-2;
    enum { P = 10, D = 4 };
    int32_t pre[P + D + 4], draft[D];
    tm_random_tokens(pre, P + D + 4, V, 700);
    tm_random_tokens(draft, D, V, 701);
    vs_kv *kv = vs_lm_kv_new(lm, 3, 64, kvt, &err);
    VT_REQUIRE(kv, "%s", err.msg);
    float lg[V], *dl = malloc(sizeof(float) * 8 * V);

    /* truncate: a rejected draft of D rows, roll back to P + 1 (first draft accepted), continue */
    VT_CHECK(tm_feed(lm, kv, tp, 0, pre, P, NULL, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(tm_feed(lm, kv, tp, 0, draft, D, dl, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(vs_kv_seq_truncate(kv, 0, P + 1, &err) == VS_OK, "%s", err.msg);
    int32_t next = 17;
    VT_CHECK(tm_feed(lm, kv, tp, 0, &next, 1, lg, &err) == VS_OK, "%s", err.msg);
    int32_t hist[64];
    memcpy(hist, pre, sizeof(int32_t) * P);
    hist[P] = draft[0];
    hist[P + 1] = next;
    double d = cmp_fresh(lm, tp, kvt, hist, P + 2, lg);
    printf("  %s KV truncate then continue vs fresh: %.3g\n", vs_type_name(kvt), d);
    VT_CHECK(d <= tol, "truncate differs by %g", d);

    /* copy: fork sequence 0's first P rows into sequence 1 and continue there differently */
    VT_CHECK(vs_kv_seq_copy(kv, 0, 1, P, &err) == VS_OK, "%s", err.msg);
    int32_t alt[2] = {3, 9};
    float lg2[2 * V];
    VT_CHECK(tm_feed(lm, kv, tp, 1, alt, 2, lg2, &err) == VS_OK, "%s", err.msg);
    memcpy(hist + P, alt, sizeof(alt));
    d = cmp_fresh(lm, tp, kvt, hist, P + 2, lg2 + V);
    printf("  %s KV copy (fork) then continue vs fresh: %.3g\n", vs_type_name(kvt), d);
    VT_CHECK(d <= tol, "copy differs by %g", d);
    /* sequence 0 is untouched by the fork */
    VT_CHECK(vs_kv_seq_len(kv, 0) == P + 2, "source length changed");

    /* compact: a tree after the prefix in sequence 2; accept the path 0 -> 2 -> 4 and continue */
    VT_CHECK(vs_kv_seq_copy(kv, 0, 2, P, &err) == VS_OK, "%s", err.msg);
    int parent[6] = {-1, 0, 0, 1, 2, 2};
    int32_t tt[6] = {5, 6, 7, 8, 9, 10};
    static int32_t anc[6][6];
    vs_lm_row rows[6];
    memset(rows, 0, sizeof(rows));
    for (int i = 0; i < 6; i++) {
        int n = 0;
        for (int p = parent[i]; p >= 0; p = parent[p]) anc[i][n++] = p;
        rows[i] = (vs_lm_row){.token = tt[i], .seq = 2, .pos = P + n, .tree = true, .n_anc = n, .anc = anc[i]};
    }
    VT_CHECK(vs_lm_forward(lm, kv, tp, rows, 6, NULL, &err) == VS_OK, "%s", err.msg);
    int32_t path[3] = {P + 0, P + 2, P + 4};
    VT_CHECK(vs_kv_seq_compact(kv, 2, path, 3, P, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(vs_kv_seq_len(kv, 2) == P + 3, "compact length %d", vs_kv_seq_len(kv, 2));
    VT_CHECK(tm_feed(lm, kv, tp, 2, &next, 1, lg, &err) == VS_OK, "%s", err.msg);
    hist[P] = tt[0];
    hist[P + 1] = tt[2];
    hist[P + 2] = tt[4];
    hist[P + 3] = next;
    d = cmp_fresh(lm, tp, kvt, hist, P + 4, lg);
    printf("  %s KV compact tree path then continue vs fresh: %.3g\n", vs_type_name(kvt), d);
    VT_CHECK(d <= tol, "compact differs by %g", d);
    free(dl);
    vs_kv_free(kv);
}

int main(void) {
    vs_error err = {0};
    printf("cache operations:\n");
    test_unit(VS_TYPE_F32);
    test_unit(VS_TYPE_BF16);
    vs_threadpool *tp = vs_threadpool_new(2, &err);
    VT_REQUIRE(tp, "%s", err.msg);
    vs_lm_random_opts o = tm_small_opts(VS_TYPE_F32, 77);
    vs_lm *lm = tm_model(&o, "kv-f32.gguf");
    printf("edits vs recomputation:\n");
    test_edits(lm, tp, VS_TYPE_F32);
    test_edits(lm, tp, VS_TYPE_F16);
    test_edits(lm, tp, VS_TYPE_BF16);
    vs_lm_free(lm);
    vs_threadpool_free(tp);
    return vt_finish("kv");
}
