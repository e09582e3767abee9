/* bench: records, the results file and the aggregation. See bench.h. */
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static double ratio(double a, double b) { return b > 0 ? a / b : 0; }

static void copy_str(char *dst, size_t cap, const char *s) {
    size_t n = s ? strlen(s) : 0;
    if (n >= cap) n = cap - 1;
    if (n) memcpy(dst, s, n);
    dst[n] = 0;
}

/* ------------------------------------------------------------------------------------------------
 * Records */

void vs_bench_record_fill(vs_bench_record *r, const vs_spec_log *log, const vs_spec_log *base) {
    r->gamma = log->gamma;
    r->n_prompt = log->n_prompt;
    r->n_tokens = log->n_tokens;
    r->n_blocks = log->n_blocks;
    r->n_drafted = r->n_accepted = r->n_steps = 0;
    memset(r->alpha_num, 0, sizeof(r->alpha_num));
    memset(r->alpha_den, 0, sizeof(r->alpha_den));
    memset(r->hist, 0, sizeof(r->hist));
    r->t_draft = r->t_verify = r->t_verify_full = 0;
    r->n_verify_full = 0;
    for (int32_t i = 0; i < log->n_blocks; i++) {
        const vs_spec_block *b = &log->blocks[i];
        r->n_drafted += b->n_draft;
        r->n_accepted += b->n_accept;
        r->n_steps += b->n_steps;
        r->t_draft += b->t_draft;
        r->t_verify += b->t_verify;
        r->hist[VS_MIN(VS_MAX(b->n_accept, 0), VS_SPEC_MAX_GAMMA)]++;
        /* position n (1-based) was decided when n <= n_eval and accepted when n <= n_accept */
        for (int32_t n = 1; n <= VS_MIN(b->n_eval, VS_SPEC_MAX_GAMMA); n++) {
            r->alpha_den[n - 1]++;
            if (n <= b->n_accept) r->alpha_num[n - 1]++;
        }
        /* a full block drafted gamma deep (a tree's depth, a chain's length) */
        const int32_t depth = b->n_depth > 0 ? b->n_depth : b->n_draft;
        if (log->gamma > 0 && depth == log->gamma) r->n_verify_full++, r->t_verify_full += b->t_verify;
    }
    r->t_prefill = log->t_prefill;
    r->t_draft_prefill = log->t_draft_prefill;
    r->t_decode = log->t_decode;
    r->t_total = r->t_vision + log->t_prefill + log->t_draft_prefill + log->t_decode;
    copy_str(r->stop, sizeof(r->stop), vs_spec_stop_name(log->stop));
    r->base_tokens = r->base_blocks = 0;
    r->base_t_verify = r->base_t_decode = r->base_t_total = 0;
    if (base) {
        r->base_tokens = base->n_tokens;
        r->base_blocks = base->n_blocks;
        for (int32_t i = 0; i < base->n_blocks; i++) r->base_t_verify += base->blocks[i].t_verify;
        r->base_t_decode = base->t_decode;
        /* the baseline's vision time is the same measurement (shared) */
        r->base_t_total = r->t_vision + base->t_prefill + base->t_draft_prefill + base->t_decode;
        r->identical = base->n_tokens == log->n_tokens &&
                       (log->n_tokens == 0 ||
                        !memcmp(base->tokens, log->tokens, sizeof(int32_t) * (size_t)log->n_tokens));
    }
}

double vs_bench_record_tau(const vs_bench_record *r) { return ratio(r->n_tokens, r->n_blocks); }

double vs_bench_record_speedup_decode(const vs_bench_record *r) {
    if (r->base_tokens <= 0 || r->n_tokens <= 0) return 0;
    return ratio(ratio(r->base_t_decode, r->base_tokens), ratio(r->t_decode, r->n_tokens));
}

double vs_bench_record_speedup_total(const vs_bench_record *r) {
    if (r->base_tokens <= 0 || r->n_tokens <= 0) return 0;
    return ratio(ratio(r->base_t_total, r->base_tokens), ratio(r->t_total, r->n_tokens));
}

void vs_bench_cell_key(char *buf, size_t cap, const char *sample, int32_t turn, const char *method,
                       int32_t gamma, double temp) {
    snprintf(buf, cap, "%s|%d|%s|%d|%.3f", sample, turn, method, gamma, temp);
}

static void json_i64_arr(vs_json_writer *w, const char *key, const int64_t *v, int n) {
    vs_json_key(w, key);
    vs_json_arr_begin(w);
    for (int i = 0; i < n; i++) vs_json_int(w, v[i]);
    vs_json_arr_end(w);
}

char *vs_bench_record_to_json(const vs_bench_record *r, size_t *len) {
    const int G = VS_MIN(VS_MAX(r->gamma, 0), VS_SPEC_MAX_GAMMA);
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_json_obj_begin(&w);
    vs_json_kv_str(&w, "type", "record");
    vs_json_kv_str(&w, "sample", r->sample);
    vs_json_kv_str(&w, "suite", r->suite);
    vs_json_kv_int(&w, "turn", r->turn);
    vs_json_kv_str(&w, "turn_kind", r->turn_kind);
    vs_json_kv_str(&w, "method", r->method);
    vs_json_kv_int(&w, "gamma", r->gamma);
    vs_json_kv_num(&w, "temp", r->temp);
    vs_json_kv_int(&w, "n_prompt", r->n_prompt);
    vs_json_kv_int(&w, "n_images", r->n_images);
    vs_json_kv_int(&w, "n_tokens", r->n_tokens);
    vs_json_kv_int(&w, "n_blocks", r->n_blocks);
    vs_json_kv_int(&w, "n_drafted", r->n_drafted);
    vs_json_kv_int(&w, "n_accepted", r->n_accepted);
    vs_json_kv_int(&w, "n_steps", r->n_steps);
    json_i64_arr(&w, "alpha_num", r->alpha_num, G);
    json_i64_arr(&w, "alpha_den", r->alpha_den, G);
    json_i64_arr(&w, "hist", r->hist, G + 1);
    vs_json_kv_num(&w, "t_vision", r->t_vision);
    vs_json_kv_num(&w, "t_caption", r->t_caption);
    vs_json_kv_num(&w, "t_prefill", r->t_prefill);
    vs_json_kv_num(&w, "t_draft_prefill", r->t_draft_prefill);
    vs_json_kv_num(&w, "t_draft", r->t_draft);
    vs_json_kv_num(&w, "t_verify", r->t_verify);
    vs_json_kv_num(&w, "t_decode", r->t_decode);
    vs_json_kv_num(&w, "t_total", r->t_total);
    vs_json_kv_num(&w, "t_verify_full", r->t_verify_full);
    vs_json_kv_int(&w, "n_verify_full", r->n_verify_full);
    vs_json_kv_int(&w, "base_tokens", r->base_tokens);
    vs_json_kv_int(&w, "base_blocks", r->base_blocks);
    vs_json_kv_num(&w, "base_t_verify", r->base_t_verify);
    vs_json_kv_num(&w, "base_t_decode", r->base_t_decode);
    vs_json_kv_num(&w, "base_t_total", r->base_t_total);
    vs_json_kv_int(&w, "identical", r->identical);
    vs_json_kv_int(&w, "correct", r->correct);
    vs_json_kv_str(&w, "stop", r->stop);
    vs_json_obj_end(&w);
    char *s = vs_json_writer_take(&w, len);
    vs_json_writer_free(&w);
    return s;
}

/* Field readers that remember the first failure. */
typedef struct rd {
    const vs_json *o;
    const char *what;
    vs_error *err;
    vs_status st;
} rd;

static const vs_json *rd_get(rd *x, const char *key, vs_json_type t) {
    if (x->st) return NULL;
    const vs_json *v = vs_json_get(x->o, key);
    if (!v || v->type != t) {
        x->st = vs_error_set(x->err, VS_ERR_FORMAT, "%s: field \"%s\" missing or not a%s %s", x->what, key,
                             t == VS_JSON_ARRAY ? "n" : "", vs_json_type_name(t));
        return NULL;
    }
    return v;
}

static int64_t rd_int(rd *x, const char *key, int64_t lo, int64_t hi) {
    const vs_json *v = rd_get(x, key, VS_JSON_NUMBER);
    if (!v) return 0;
    if (!v->is_int || v->i < lo || v->i > hi) {
        x->st = vs_error_set(x->err, VS_ERR_FORMAT, "%s: field \"%s\" must be an integer in [%lld, %lld]",
                             x->what, key, (long long)lo, (long long)hi);
        return 0;
    }
    return v->i;
}

static double rd_num(rd *x, const char *key) {
    const vs_json *v = rd_get(x, key, VS_JSON_NUMBER);
    if (!v) return 0;
    if (!isfinite(v->num) || v->num < 0) {
        x->st = vs_error_set(x->err, VS_ERR_FORMAT, "%s: field \"%s\" must be a finite number >= 0", x->what,
                             key);
        return 0;
    }
    return v->num;
}

static void rd_str(rd *x, const char *key, char *dst, size_t cap) {
    const vs_json *v = rd_get(x, key, VS_JSON_STRING);
    if (!v) return;
    if (v->len >= cap || memchr(v->str, 0, v->len)) {
        x->st = vs_error_set(x->err, VS_ERR_FORMAT, "%s: field \"%s\" longer than %zu bytes", x->what, key,
                             cap - 1);
        return;
    }
    copy_str(dst, cap, v->str);
}

static void rd_arr(rd *x, const char *key, int64_t *dst, int n) {
    const vs_json *v = rd_get(x, key, VS_JSON_ARRAY);
    if (!v) return;
    if ((int64_t)v->len != n) {
        x->st = vs_error_set(x->err, VS_ERR_FORMAT, "%s: \"%s\" has %zu entries, expected %d", x->what, key,
                             v->len, n);
        return;
    }
    for (int i = 0; i < n; i++) {
        const vs_json *e = &v->items[i];
        if (e->type != VS_JSON_NUMBER || !e->is_int || e->i < 0) {
            x->st = vs_error_set(x->err, VS_ERR_FORMAT, "%s: \"%s\"[%d] is not a count", x->what, key, i);
            return;
        }
        dst[i] = e->i;
    }
}

vs_status vs_bench_record_from_json(const vs_json *obj, const char *what, vs_bench_record *r, vs_error *err) {
    memset(r, 0, sizeof(*r));
    if (!obj || obj->type != VS_JSON_OBJECT)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: not an object", what);
    rd x = {obj, what, err, VS_OK};
    rd_str(&x, "sample", r->sample, sizeof(r->sample));
    rd_str(&x, "suite", r->suite, sizeof(r->suite));
    r->turn = (int32_t)rd_int(&x, "turn", 1, 1000);
    rd_str(&x, "turn_kind", r->turn_kind, sizeof(r->turn_kind));
    rd_str(&x, "method", r->method, sizeof(r->method));
    r->gamma = (int32_t)rd_int(&x, "gamma", 0, VS_SPEC_MAX_GAMMA);
    r->temp = rd_num(&x, "temp");
    r->n_prompt = (int32_t)rd_int(&x, "n_prompt", 0, INT32_MAX);
    r->n_images = (int32_t)rd_int(&x, "n_images", 0, 1000);
    r->n_tokens = (int32_t)rd_int(&x, "n_tokens", 0, INT32_MAX);
    r->n_blocks = (int32_t)rd_int(&x, "n_blocks", 0, INT32_MAX);
    r->n_drafted = rd_int(&x, "n_drafted", 0, INT64_MAX);
    r->n_accepted = rd_int(&x, "n_accepted", 0, INT64_MAX);
    r->n_steps = rd_int(&x, "n_steps", 0, INT64_MAX);
    rd_arr(&x, "alpha_num", r->alpha_num, r->gamma);
    rd_arr(&x, "alpha_den", r->alpha_den, r->gamma);
    rd_arr(&x, "hist", r->hist, r->gamma + 1);
    r->t_vision = rd_num(&x, "t_vision");
    r->t_caption = rd_num(&x, "t_caption");
    r->t_prefill = rd_num(&x, "t_prefill");
    r->t_draft_prefill = rd_num(&x, "t_draft_prefill");
    r->t_draft = rd_num(&x, "t_draft");
    r->t_verify = rd_num(&x, "t_verify");
    r->t_decode = rd_num(&x, "t_decode");
    r->t_total = rd_num(&x, "t_total");
    r->t_verify_full = rd_num(&x, "t_verify_full");
    r->n_verify_full = (int32_t)rd_int(&x, "n_verify_full", 0, INT32_MAX);
    r->base_tokens = (int32_t)rd_int(&x, "base_tokens", 0, INT32_MAX);
    r->base_blocks = (int32_t)rd_int(&x, "base_blocks", 0, INT32_MAX);
    r->base_t_verify = rd_num(&x, "base_t_verify");
    r->base_t_decode = rd_num(&x, "base_t_decode");
    r->base_t_total = rd_num(&x, "base_t_total");
    r->identical = (int8_t)rd_int(&x, "identical", -1, 1);
    r->correct = (int8_t)rd_int(&x, "correct", -1, 1);
    rd_str(&x, "stop", r->stop, sizeof(r->stop));
    if (!x.st && (r->n_accepted > r->n_drafted || r->n_blocks > r->n_tokens + 1))
        x.st = vs_error_set(err, VS_ERR_FORMAT,
                            "%s: inconsistent counts (accepted %lld of %lld, %d blocks for %d tokens)", what,
                            (long long)r->n_accepted, (long long)r->n_drafted, r->n_blocks, r->n_tokens);
    return x.st;
}

/* ------------------------------------------------------------------------------------------------
 * Result sets */

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h ? h : 1;
}

void vs_bench_results_init(vs_bench_results *r) { memset(r, 0, sizeof(*r)); }

void vs_bench_results_free(vs_bench_results *r) {
    vs_free(r->rec);
    vs_free(r->header);
    vs_free(r->hkeys);
    vs_free(r->hidx);
    vs_bench_results_init(r);
}

static uint64_t record_hash(const vs_bench_record *x) {
    char key[256];
    vs_bench_cell_key(key, sizeof(key), x->sample, x->turn, x->method, x->gamma, x->temp);
    return hash_str(key);
}

static bool same_cell(const vs_bench_record *x, const char *sample, int32_t turn, const char *method,
                      int32_t gamma, double temp) {
    return x->turn == turn && x->gamma == gamma && fabs(x->temp - temp) < 5e-4 &&
           !strcmp(x->sample, sample) && !strcmp(x->method, method);
}

static void index_put(vs_bench_results *r, uint64_t h, int64_t i) {
    int64_t m = r->hcap - 1, j = (int64_t)(h & (uint64_t)m);
    while (r->hkeys[j]) {
        const vs_bench_record *x = &r->rec[r->hidx[j]];
        if (r->hkeys[j] == h && same_cell(x, r->rec[i].sample, r->rec[i].turn, r->rec[i].method,
                                          r->rec[i].gamma, r->rec[i].temp)) {
            r->hidx[j] = i; /* the later record of a cell wins */
            return;
        }
        j = (j + 1) & m;
    }
    r->hkeys[j] = h, r->hidx[j] = i;
}

static vs_status index_grow(vs_bench_results *r, vs_error *err) {
    int64_t cap = r->hcap ? r->hcap * 2 : 256;
    while (cap < 2 * (r->n + 1)) cap *= 2;
    uint64_t *k = vs_calloc((size_t)cap, sizeof(uint64_t));
    int64_t *ix = vs_calloc((size_t)cap, sizeof(int64_t));
    if (!k || !ix) {
        vs_free(k), vs_free(ix);
        return vs_error_set(err, VS_ERR_NOMEM, "bench results: out of memory");
    }
    vs_free(r->hkeys), vs_free(r->hidx);
    r->hkeys = k, r->hidx = ix, r->hcap = cap;
    for (int64_t i = 0; i < r->n; i++) index_put(r, record_hash(&r->rec[i]), i);
    return VS_OK;
}

vs_status vs_bench_results_add(vs_bench_results *r, const vs_bench_record *rec, vs_error *err) {
    if (r->n == r->cap) {
        int64_t cap = r->cap ? r->cap * 2 : 64;
        vs_bench_record *nr = vs_realloc(r->rec, sizeof(*nr) * (size_t)cap);
        if (!nr) return vs_error_set(err, VS_ERR_NOMEM, "bench results: out of memory");
        r->rec = nr, r->cap = cap;
    }
    r->rec[r->n++] = *rec;
    if (2 * r->n > r->hcap) return index_grow(r, err); /* re-indexes everything, the new record included */
    index_put(r, record_hash(rec), r->n - 1);
    return VS_OK;
}

int64_t vs_bench_results_find(const vs_bench_results *r, const char *sample, int32_t turn, const char *method,
                              int32_t gamma, double temp) {
    if (!r->hcap) return -1;
    char key[256];
    vs_bench_cell_key(key, sizeof(key), sample, turn, method, gamma, temp);
    uint64_t h = hash_str(key);
    int64_t m = r->hcap - 1, j = (int64_t)(h & (uint64_t)m);
    while (r->hkeys[j]) {
        if (r->hkeys[j] == h && same_cell(&r->rec[r->hidx[j]], sample, turn, method, gamma, temp))
            return r->hidx[j];
        j = (j + 1) & m;
    }
    return -1;
}

vs_status vs_bench_results_load(const char *path, vs_bench_results *r, vs_error *err) {
    vs_bench_results_free(r);
    FILE *probe = fopen(path, "rb");
    if (!probe) {
        if (errno == ENOENT) return VS_OK;
        return vs_error_set(err, VS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    fclose(probe);
    uint8_t *data = NULL;
    size_t size = 0;
    vs_status st = vs_read_file(path, &data, &size, err);
    if (st) return st;
    const char *text = (const char *)data;
    size_t pos = 0;
    int64_t line_no = 0;
    while (pos < size && !st) {
        const char *line = text + pos;
        const char *nl = memchr(line, '\n', size - pos);
        line_no++;
        if (!nl) { /* a partial last line: the run was killed while writing it */
            r->n_dropped++;
            break;
        }
        size_t len = (size_t)(nl - line);
        char what[600];
        snprintf(what, sizeof(what), "%s:%lld", path, (long long)line_no);
        vs_error lerr = {0};
        vs_json_doc *doc = vs_json_parse(line, len, what, &lerr);
        const vs_json *root = doc ? vs_json_root(doc) : NULL;
        const char *type = vs_json_get_str(root, "type", "");
        vs_status ls = doc ? VS_OK : lerr.code;
        if (!ls && line_no == 1) {
            if (strcmp(type, "header"))
                ls = vs_error_set(&lerr, VS_ERR_FORMAT, "%s: the first line is not a header", what);
            else if (!(r->header = vs_strndup(line, len)))
                ls = vs_error_set(&lerr, VS_ERR_NOMEM, "out of memory");
        } else if (!ls) {
            vs_bench_record rec;
            if (strcmp(type, "record"))
                ls = vs_error_set(&lerr, VS_ERR_FORMAT, "%s: not a record", what);
            else if (!(ls = vs_bench_record_from_json(root, what, &rec, &lerr)))
                ls = vs_bench_results_add(r, &rec, &lerr);
        }
        vs_json_doc_free(doc);
        bool last = nl + 1 >= text + size;
        if (ls) {
            if (last && ls != VS_ERR_NOMEM) { /* a damaged last line is dropped like a partial one */
                r->n_dropped++;
                break;
            }
            if (err) *err = lerr;
            st = ls;
            break;
        }
        pos += len + 1;
        r->good_bytes = (int64_t)pos;
    }
    vs_free(data);
    if (st) vs_bench_results_free(r);
    return st;
}

vs_status vs_bench_results_open(vs_bench_results_file *rf, const char *path, const vs_bench_results *loaded,
                                const char *header, vs_error *err) {
    memset(rf, 0, sizeof(*rf));
    if (loaded->header && strcmp(loaded->header, header))
        return vs_error_set(
            err, VS_ERR_INVALID,
            "%s holds results of another configuration (models, dataset or lengths differ): use "
            "another --out directory or --fresh to discard them\n  file: %s\n  now:  %s",
            path, loaded->header, header);
    FILE *f = fopen(path, loaded->good_bytes > 0 ? "r+b" : "wb");
    if (!f) return vs_error_set(err, VS_ERR_IO, "%s: cannot open for writing: %s", path, strerror(errno));
    if (loaded->good_bytes > 0) {
        /* drop a partial last line, then append */
        if (ftruncate(fileno(f), (off_t)loaded->good_bytes) || fseek(f, 0, SEEK_END)) {
            fclose(f);
            return vs_error_set(err, VS_ERR_IO, "%s: cannot truncate to %lld bytes: %s", path,
                                (long long)loaded->good_bytes, strerror(errno));
        }
    } else if (fprintf(f, "%s\n", header) < 0 || fflush(f)) {
        int e = errno;
        fclose(f);
        return vs_error_set(err, VS_ERR_IO, "%s: write failed: %s", path, strerror(e));
    }
    rf->f = f;
    if (!(rf->path = vs_strdup(path))) {
        vs_bench_results_close(rf);
        return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    }
    return VS_OK;
}

vs_status vs_bench_results_append(vs_bench_results_file *rf, const vs_bench_record *recs, int64_t n,
                                  vs_error *err) {
    bool ok = true;
    for (int64_t i = 0; i < n && ok; i++) {
        size_t len = 0;
        char *s = vs_bench_record_to_json(&recs[i], &len);
        if (!s) return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
        ok = fwrite(s, 1, len, rf->f) == len && fputc('\n', rf->f) != EOF;
        vs_free(s);
    }
    /* one flush per unit: a killed run leaves whole units, at most one partial line (dropped on reading) */
    ok = fflush(rf->f) == 0 && ok;
    return ok ? VS_OK : vs_error_set(err, VS_ERR_IO, "%s: write failed: %s", rf->path, strerror(errno));
}

void vs_bench_results_close(vs_bench_results_file *rf) {
    if (rf->f) fclose(rf->f);
    vs_free(rf->path);
    memset(rf, 0, sizeof(*rf));
}

/* ------------------------------------------------------------------------------------------------
 * Aggregation */

vs_bench_filter vs_bench_filter_any(void) {
    return (vs_bench_filter){
        .method = NULL, .gamma = -1, .temp = NAN, .suite = NULL, .turn = 0, .turn_kind = NULL};
}

static bool matches(const vs_bench_record *r, const vs_bench_filter *f) {
    if (f->method && strcmp(f->method, r->method)) return false;
    if (f->gamma >= 0 && f->gamma != r->gamma) return false;
    if (!isnan(f->temp) && fabs(f->temp - r->temp) >= 5e-4) return false;
    if (f->suite && strcmp(f->suite, r->suite)) return false;
    if (f->turn > 0 && f->turn != r->turn) return false;
    if (f->turn_kind && strcmp(f->turn_kind, r->turn_kind)) return false;
    return true;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double vs_bench_median(double *v, int64_t n) {
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

vs_status vs_bench_aggregate(const vs_bench_record *recs, int64_t n, const vs_bench_filter *f,
                             vs_bench_group *g, vs_error *err) {
    memset(g, 0, sizeof(*g));
    g->gamma = -2; /* unset */
    double *sd = vs_malloc(sizeof(double) * (size_t)VS_MAX(n, 1)),
           *st = vs_malloc(sizeof(double) * (size_t)VS_MAX(n, 1));
    if (!sd || !st) {
        vs_free(sd), vs_free(st);
        return vs_error_set(err, VS_ERR_NOMEM, "bench aggregate: out of memory");
    }
    double t_draft = 0, t_verify_full = 0, base_t_verify = 0, sum_dec = 0, sum_tot = 0;
    int64_t n_verify_full = 0, base_blocks = 0, n_eval = 0;
    for (int64_t i = 0; i < n; i++) {
        const vs_bench_record *r = &recs[i];
        if (!matches(r, f)) continue;
        g->n++;
        g->gamma = g->gamma == -2 ? r->gamma : (g->gamma == r->gamma ? g->gamma : -1);
        g->n_tokens += r->n_tokens;
        g->n_blocks += r->n_blocks;
        g->n_drafted += r->n_drafted;
        g->n_accepted += r->n_accepted;
        g->n_steps += r->n_steps;
        for (int k = 0; k < VS_SPEC_MAX_GAMMA; k++)
            g->alpha_num[k] += r->alpha_num[k], g->alpha_den[k] += r->alpha_den[k];
        for (int k = 0; k <= VS_SPEC_MAX_GAMMA; k++) g->hist[k] += r->hist[k];
        g->t_vision += r->t_vision;
        g->t_caption += r->t_caption;
        g->t_prefill += r->t_prefill;
        g->t_draft_prefill += r->t_draft_prefill;
        g->t_draft += r->t_draft;
        g->t_verify += r->t_verify;
        g->t_decode += r->t_decode;
        g->t_total += r->t_total;
        t_draft += r->t_draft;
        t_verify_full += r->t_verify_full;
        n_verify_full += r->n_verify_full;
        base_t_verify += r->base_t_verify;
        base_blocks += r->base_blocks;
        if (r->base_tokens > 0 && r->n_tokens > 0 && r->t_decode > 0 && r->t_total > 0) {
            sd[g->n_speedup] = vs_bench_record_speedup_decode(r);
            st[g->n_speedup] = vs_bench_record_speedup_total(r);
            sum_dec += sd[g->n_speedup];
            sum_tot += st[g->n_speedup];
            g->n_speedup++;
        }
        if (r->identical >= 0) g->n_compared++, g->n_identical += r->identical;
        if (r->correct >= 0) g->n_checked++, g->n_correct += r->correct;
    }
    if (g->gamma == -2) g->gamma = -1;
    for (int k = 0; k < VS_SPEC_MAX_GAMMA; k++) {
        g->n_alpha[k] = g->alpha_den[k] > 0 ? (double)g->alpha_num[k] / (double)g->alpha_den[k] : -1;
        n_eval += g->alpha_den[k];
    }
    g->tau = ratio((double)g->n_tokens, (double)g->n_blocks);
    g->accept_rate = ratio((double)g->n_accepted, (double)n_eval);
    g->tok_s_decode = ratio((double)g->n_tokens, g->t_decode);
    g->tok_s_total = ratio((double)g->n_tokens, g->t_total);
    if (g->n > 0) {
        double inv = 1.0 / (double)g->n;
        g->t_vision *= inv, g->t_caption *= inv, g->t_prefill *= inv, g->t_draft_prefill *= inv;
        g->t_draft *= inv, g->t_verify *= inv, g->t_decode *= inv, g->t_total *= inv;
    }
    g->tq = ratio(t_draft, (double)g->n_steps);
    g->tp = ratio(base_t_verify, (double)base_blocks);
    g->tp_verify = ratio(t_verify_full, (double)n_verify_full);
    g->tq_tp = ratio(g->tq, g->tp);
    if (g->gamma > 0 && g->tq > 0 && g->tp > 0) {
        g->est_eq1 = g->tau / (g->gamma * g->tq_tp + 1);
        if (g->tp_verify > 0) g->est_eq1_cpu = g->tau / (g->gamma * g->tq_tp + g->tp_verify / g->tp);
    }
    if (g->n_speedup > 0) {
        g->speedup_decode_mean = sum_dec / (double)g->n_speedup;
        g->speedup_total_mean = sum_tot / (double)g->n_speedup;
        g->speedup_decode_median = vs_bench_median(sd, g->n_speedup);
        g->speedup_total_median = vs_bench_median(st, g->n_speedup);
    }
    vs_free(sd);
    vs_free(st);
    return VS_OK;
}
