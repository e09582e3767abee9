/* bench_run: the method table and the runner of `vlmspec bench spec`. See bench.h.
 *
 * Plan: the dataset's samples (the selected suites, the first --limit of each) are visited
 * round-robin over the suites, so a partial run covers every suite. A unit is one (sample, turn,
 * temperature); its cells are the target-only run ("ar") and every (method, gamma). Within a unit the
 * runs follow each other in one process on one engine - interleaved per sample, so slow drift of the
 * machine (thermal, other load) hits the baseline and the methods alike; the order is rotated from
 * unit to unit so no method always runs right after the baseline. A unit's records are appended to
 * the results file together when it finishes. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench.h"
#include "draft_ensemble.h"
#include "draft_lm.h"
#include "mmprompt.h"

/* ------------------------------------------------------------------------------------------------
 * Methods: adding one is one entry here. */

static vs_spec_drafter *make_lm(const vs_bench_models *m, vs_lm *draft, vs_mmproj *mp, vs_draft_lm_mode mode,
                                vs_error *err) {
    if (!draft) {
        vs_error_set(err, VS_ERR_INVALID, "the drafter model is missing");
        return NULL;
    }
    vs_draft_lm_opts o = {.mode = mode, .n_ctx = m->n_ctx, .kv_type = m->kv_type, .tp = m->tp};
    if (mode == VS_DRAFT_LM_MM) {
        if (!mp) {
            vs_error_set(err, VS_ERR_INVALID,
                         "multimodal drafting needs the drafter's projector (mmproj file)");
            return NULL;
        }
        o.proj = vs_mmproj_projector(mp);
        o.tower = m->target_mmproj ? vs_mmproj_tower(m->target_mmproj) : NULL;
    }
    return vs_draft_lm_new(draft, m->target, &o, err);
}

static vs_spec_drafter *make_llava(const vs_bench_models *m, int arg, vs_error *err) {
    return make_lm(m, m->draft, m->draft_mmproj, (vs_draft_lm_mode)arg, err);
}

static vs_spec_drafter *make_massv(const vs_bench_models *m, int arg, vs_error *err) {
    return make_lm(m, m->massv, m->massv_mmproj, (vs_draft_lm_mode)arg, err);
}

/* Ensemble drafters (draft_ensemble.h) over the LLaVA-recipe drafter: drafting inputs and weight policy.
 * The single C and P methods are its one-row case. TABED's defaults: w-grid for two inputs ("MT*"),
 * inverse KL distance for four ("MTCP*", app. B). */
typedef struct ens_spec {
    const char *inputs;
    vs_ens_policy policy;
} ens_spec;

static const ens_spec ens_specs[] = {
    {"c", VS_ENS_STATIC},    {"p", VS_ENS_STATIC},    {"mt", VS_ENS_STATIC},
    {"mtcp", VS_ENS_STATIC}, {"mt", VS_ENS_GRID},     {"mtcp", VS_ENS_INV_KL},
    {"mt", VS_ENS_RANDOM},   {"mtcp", VS_ENS_RANDOM}, {"mtcp", VS_ENS_INV_TVD},
    {"mtcp", VS_ENS_ADABOOST}};

static vs_spec_drafter *make_ens(const vs_bench_models *m, int arg, vs_error *err) {
    const ens_spec *es = &ens_specs[arg];
    if (!m->draft) {
        vs_error_set(err, VS_ERR_INVALID, "the drafter model is missing");
        return NULL;
    }
    vs_draft_ens_opts o;
    vs_draft_ens_opts_default(&o);
    if (vs_ens_inputs_parse(es->inputs, o.inputs, &o.n_inputs, err)) return NULL;
    o.weights.policy = es->policy;
    o.n_ctx = m->n_ctx;
    o.kv_type = m->kv_type;
    o.tp = m->tp;
    o.proj = m->draft_mmproj ? vs_mmproj_projector(m->draft_mmproj) : NULL;
    o.tower = m->target_mmproj ? vs_mmproj_tower(m->target_mmproj) : NULL;
    o.captions = m->captions;
    return vs_draft_ens_new(m->draft, m->target, &o, err);
}

static const vs_bench_method method_table[] = {
    {"ar", "AR", VS_BENCH_BASELINE, VS_BENCH_DRAFT_NONE, "target-only decoding (the baseline, always run)",
     NULL, 0, false},
    {"m", "M", VS_BENCH_SINGLE, VS_BENCH_DRAFT_LLAVA,
     "multimodal drafting: the drafter's projector over the shared image features", make_llava,
     VS_DRAFT_LM_MM, false},
    {"t", "T", VS_BENCH_SINGLE, VS_BENCH_DRAFT_LLAVA, "text-only drafting: each image replaced by \"\\n\"",
     make_llava, VS_DRAFT_LM_TEXT, false},
    {"c", "C", VS_BENCH_SINGLE, VS_BENCH_DRAFT_LLAVA,
     "caption drafting: each image replaced by \"image: \" + a caption by the drafter (captioner thread)",
     make_ens, 0, true},
    {"p", "P", VS_BENCH_SINGLE, VS_BENCH_DRAFT_LLAVA, "pooled multimodal drafting: features pooled 2 x 2",
     make_ens, 1, false},
    {"mt", "Static^MT", VS_BENCH_ENSEMBLE, VS_BENCH_DRAFT_LLAVA,
     "in-batch ensemble of M and T, uniform weights (IbED)", make_ens, 2, false},
    {"mtcp", "Static^MTCP", VS_BENCH_ENSEMBLE, VS_BENCH_DRAFT_LLAVA,
     "in-batch ensemble of M, T, C, P, uniform weights", make_ens, 3, true},
    {"tabed-mt", "TABED^MT", VS_BENCH_ENSEMBLE, VS_BENCH_DRAFT_LLAVA, "TABED over M and T, w-grid weights",
     make_ens, 4, false},
    {"tabed-mtcp", "TABED^MTCP", VS_BENCH_ENSEMBLE, VS_BENCH_DRAFT_LLAVA,
     "TABED over M, T, C, P, inverse-KL weights", make_ens, 5, true},
    {"random-mt", "Random^MT", VS_BENCH_ENSEMBLE, VS_BENCH_DRAFT_LLAVA,
     "M and T with random weights per block (TABED Table 4 ablation)", make_ens, 6, false},
    {"random-mtcp", "Random^MTCP", VS_BENCH_ENSEMBLE, VS_BENCH_DRAFT_LLAVA,
     "M, T, C, P with random weights per block (ablation)", make_ens, 7, true},
    {"tabed-mtcp-tvd", "TABED^MTCP-TVD", VS_BENCH_ENSEMBLE, VS_BENCH_DRAFT_LLAVA,
     "TABED over M, T, C, P, inverse-TVD weights (ablation)", make_ens, 8, true},
    {"tabed-mtcp-ada", "TABED^MTCP-Ada", VS_BENCH_ENSEMBLE, VS_BENCH_DRAFT_LLAVA,
     "TABED over M, T, C, P, AdaBoost-style weights (ablation)", make_ens, 9, true},
    {"massv", "MASSV", VS_BENCH_SINGLE, VS_BENCH_DRAFT_MASSV, "the MASSV drafter, multimodal", make_massv,
     VS_DRAFT_LM_MM, false},
    {"massv-t", "MASSV-T", VS_BENCH_SINGLE, VS_BENCH_DRAFT_MASSV, "the MASSV drafter, text-only (ablation)",
     make_massv, VS_DRAFT_LM_TEXT, false},
};

const vs_bench_method *vs_bench_methods(int *n) {
    *n = (int)VS_ARRAY_LEN(method_table);
    return method_table;
}

const vs_bench_method *vs_bench_method_find(const char *name) {
    for (size_t i = 0; i < VS_ARRAY_LEN(method_table); i++)
        if (!strcmp(method_table[i].name, name)) return &method_table[i];
    return NULL;
}

const char *vs_bench_method_label(const char *name) {
    const vs_bench_method *m = vs_bench_method_find(name);
    return m ? m->label : name;
}

/* ------------------------------------------------------------------------------------------------
 * Configuration */

void vs_bench_config_default(vs_bench_config *c) {
    memset(c, 0, sizeof(*c));
    c->split = "test";
    c->methods[0] = "ar", c->methods[1] = "m", c->methods[2] = "t";
    c->n_methods = 3;
    c->gammas[0] = 5;
    c->n_gammas = 1;
    c->temps[0] = 0;
    c->n_temps = 1;
    c->turns[0] = 1, c->turns[1] = 2;
    c->n_turns = 2;
    c->threads = 1;
    c->n_predict = 128;
    c->repeat = 1;
    c->kv_type = VS_TYPE_F16;
    c->draft_kv_type = VS_TYPE_BF16;
    c->seed = 1;
    c->progress = true;
}

static vs_status mkdir_p(const char *dir, vs_error *err) {
    char buf[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof(buf))
        return vs_error_set(err, VS_ERR_INVALID, "bad output directory '%s'", dir);
    memcpy(buf, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != 0) continue;
        char c = buf[i];
        buf[i] = 0;
        if (mkdir(buf, 0777) && errno != EEXIST)
            return vs_error_set(err, VS_ERR_IO, "%s: cannot create: %s", buf, strerror(errno));
        buf[i] = c;
    }
    struct stat sb;
    if (stat(dir, &sb) || !S_ISDIR(sb.st_mode))
        return vs_error_set(err, VS_ERR_IO, "%s: not a directory", dir);
    return VS_OK;
}

/* models_dir/name, or name itself when absolute. */
static void model_path(char *buf, size_t cap, const char *dir, const char *name) {
    if (name[0] == '/' || !dir || !dir[0])
        snprintf(buf, cap, "%s", name);
    else
        snprintf(buf, cap, "%s/%s", dir, name);
}

static bool file_exists(const char *path, int64_t *bytes) {
    struct stat sb;
    if (stat(path, &sb) || !S_ISREG(sb.st_mode)) return false;
    if (bytes) *bytes = (int64_t)sb.st_size;
    return true;
}

/* The header line: what must be equal for results to be comparable (not the method / gamma / limit
 * lists: a resumed run may add cells). */
static char *make_header(const vs_bench_config *c, const char *const paths[6], const vs_world_dataset *d,
                         int32_t n_ctx) {
    static const char *const keys[6] = {"target",       "target_mmproj", "draft",
                                        "draft_mmproj", "massv",         "massv_mmproj"};
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_json_obj_begin(&w);
    vs_json_kv_str(&w, "type", "header");
    vs_json_kv_str(&w, "format", "vlmspec-bench-results");
    vs_json_kv_int(&w, "version", 1);
    vs_json_key(&w, "models");
    vs_json_obj_begin(&w);
    for (int i = 0; i < 6; i++) {
        int64_t bytes = 0;
        vs_json_key(&w, keys[i]);
        if (!file_exists(paths[i], &bytes)) {
            vs_json_null(&w);
            continue;
        }
        vs_json_obj_begin(&w);
        vs_json_kv_str(&w, "path", paths[i]);
        vs_json_kv_int(&w, "bytes", bytes);
        vs_json_obj_end(&w);
    }
    vs_json_obj_end(&w);
    vs_json_kv_str(&w, "data", c->data_dir);
    vs_json_kv_int(&w, "data_seed", (int64_t)d->seed);
    vs_json_kv_str(&w, "split", c->split);
    vs_json_kv_int(&w, "n_predict", c->n_predict);
    vs_json_kv_int(&w, "n_ctx", n_ctx);
    vs_json_kv_str(&w, "kv_type", vs_type_name(c->kv_type));
    vs_json_kv_str(&w, "draft_kv_type", vs_type_name(c->draft_kv_type));
    vs_json_kv_bool(&w, "ignore_eos", c->ignore_eos);
    vs_json_kv_int(&w, "seed", (int64_t)c->seed);
    vs_json_kv_int(&w, "threads", c->threads);
    if (c->repeat > 1) vs_json_kv_int(&w, "repeat", c->repeat); /* 1 keeps older headers valid */
    vs_json_kv_str(&w, "second_turn_context", "dataset reference answer");
    vs_json_obj_end(&w);
    char *s = vs_json_writer_take(&w, NULL);
    vs_json_writer_free(&w);
    return s;
}

/* ------------------------------------------------------------------------------------------------
 * One sample's images and one turn's prompt */

typedef struct sample_images {
    int n;                                        /* images encoded so far (a prefix of the sample's) */
    vs_vision_features feat[VS_WORLD_MAX_IMAGES]; /* shared ViT output */
    const vs_vision_features *fp[VS_WORLD_MAX_IMAGES];
    float *rows[VS_WORLD_MAX_IMAGES]; /* (n_rows, target n_embd): the target's projection */
    int64_t n_rows[VS_WORLD_MAX_IMAGES];
    double secs[VS_WORLD_MAX_IMAGES]; /* encode + project */
} sample_images;

static void sample_images_free(sample_images *si) {
    for (int i = 0; i < si->n; i++) {
        vs_vision_features_free(&si->feat[i]);
        vs_free(si->rows[i]);
    }
    memset(si, 0, sizeof(*si));
}

/* Encodes images [si->n, n) of s. */
static vs_status encode_images(sample_images *si, const vs_world_sample *s, int n, const vs_bench_models *m,
                               vs_error *err) {
    if (n > si->n && !m->target_mmproj)
        return vs_error_set(err, VS_ERR_INVALID, "sample %s has images but no target mmproj was given",
                            s->id);
    const vs_vision_tower *tower = m->target_mmproj ? vs_mmproj_tower(m->target_mmproj) : NULL;
    if (n > si->n && !tower)
        return vs_error_set(err, VS_ERR_INVALID, "%s: the target mmproj has no vision tower",
                            vs_mmproj_path(m->target_mmproj));
    while (si->n < n) {
        int i = si->n;
        double t0 = vs_time_now();
        vs_status st =
            vs_vision_encode_file(tower, m->tp, s->images[i], VS_PREPROC_LLAVA, NULL, &si->feat[i], err);
        if (st) return st;
        si->n++; /* owns feat[i] from here */
        if ((st = vs_vision_embed(vs_mmproj_projector(m->target_mmproj), m->tp, &si->feat[i], 1, &si->rows[i],
                                  &si->n_rows[i], err)))
            return st;
        si->secs[i] = vs_time_now() - t0;
        si->fp[i] = &si->feat[i];
    }
    return VS_OK;
}

typedef struct turn_prompt {
    vs_mm_prompt mp;
    vs_spec_segment *seg;
    int32_t n_seg;
    vs_spec_prompt p;
    int n_images;
    double t_vision;
} turn_prompt;

static void turn_prompt_free(turn_prompt *tp) {
    vs_mm_prompt_free(&tp->mp);
    vs_free(tp->seg);
    memset(tp, 0, sizeof(*tp));
}

/* Images the prompt of turn t (0-based) shows: those of turns 0..t. */
static int turn_images(const vs_world_sample *s, int t) {
    int n = 0;
    for (int k = 0; k <= t; k++) n = VS_MAX(n, s->turns[k].first_image + s->turns[k].n_images);
    return n;
}

/* Builds the prompt of turn t: the conversation text (earlier turns with the dataset's reference
 * answers) with each image's target rows at its marker. VS_ERR_RANGE when it does not fit n_ctx. */
static vs_status build_prompt(turn_prompt *tp, const vs_world_sample *s, int t, sample_images *si,
                              const vs_bench_models *m, int32_t n_ctx, vs_error *err) {
    memset(tp, 0, sizeof(*tp));
    int ni = turn_images(s, t);
    vs_status st = encode_images(si, s, ni, m, err);
    if (st) return st;
    vs_mm_image imgs[VS_WORLD_MAX_IMAGES];
    const vs_lm_config *c = vs_lm_cfg(m->target);
    for (int i = 0; i < ni; i++) {
        imgs[i] = (vs_mm_image){.rows = si->rows[i], .n_rows = si->n_rows[i], .width = c->n_embd};
        tp->t_vision += si->secs[i];
    }
    tp->n_images = ni;
    char *text = vs_world_prompt(s, t, false);
    if (!text) return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    vs_mm_prompt_opts po = {.lm_width = c->n_embd, .n_ctx = n_ctx};
    st = vs_mm_prompt_build(&tp->mp, m->tok, text, strlen(text), imgs, ni, &po, err);
    vs_free(text);
    if (st) return st;
    /* rows -> segments: runs of text tokens, and one segment per image */
    tp->seg = vs_calloc((size_t)(2 * ni + 1), sizeof(vs_spec_segment));
    if (!tp->seg) return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    const vs_mm_prompt *mp = &tp->mp;
    int64_t r = 0;
    int img = 0;
    while (r < mp->n_rows) {
        if (img < mp->n_images && r == mp->image_first[img]) {
            tp->seg[tp->n_seg++] = (vs_spec_segment){.kind = VS_SPEC_SEG_IMAGE,
                                                     .n = (int32_t)si->n_rows[img],
                                                     .embd = si->rows[img],
                                                     .image = img};
            r += si->n_rows[img];
            img++;
            continue;
        }
        int64_t e = r;
        while (e < mp->n_rows && (img >= mp->n_images || e < mp->image_first[img])) e++;
        tp->seg[tp->n_seg++] =
            (vs_spec_segment){.kind = VS_SPEC_SEG_TEXT, .n = (int32_t)(e - r), .tokens = mp->tokens + r};
        r = e;
    }
    tp->p =
        (vs_spec_prompt){.seg = tp->seg, .n_seg = tp->n_seg, .images = ni ? si->fp : NULL, .n_images = ni};
    return VS_OK;
}

/* ------------------------------------------------------------------------------------------------
 * The run */

/* One forward over one row on a scratch cache, so the first timed run does not pay the page faults of
 * the weights' mapping. */
static vs_status warm_up(vs_lm *lm, vs_threadpool *tp, vs_error *err) {
    vs_kv *kv = vs_lm_kv_new(lm, 1, 2, VS_TYPE_F32, err);
    if (!kv) return err ? err->code : VS_ERR_NOMEM;
    float *lg = vs_malloc(sizeof(float) * (size_t)vs_lm_cfg(lm)->n_vocab);
    vs_lm_row r = {.token = 0, .want_logits = true};
    vs_lm_out o = {.logits = lg, .attn_layer = -1};
    vs_status st =
        lg ? vs_lm_forward(lm, kv, tp, &r, 1, &o, err) : vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    vs_free(lg);
    vs_kv_free(kv);
    return st;
}

typedef struct cell {
    const vs_bench_method *m;
    int mi; /* index into the configured methods (drafters[]) */
    int32_t gamma;
    bool missing; /* not in the results file yet */
    vs_spec_log log;  /* the latest run */
    vs_spec_log best; /* the fastest run so far (config repeat); its records are written */
    double t_caption, best_t_caption;
} cell;

/* Sample order: round-robin over suites, the first `limit` of each. */
static int64_t plan_order(const vs_world_dataset *d, int64_t limit, int64_t *order) {
    int64_t first[VS_WORLD_N_SUITES], count[VS_WORLD_N_SUITES] = {0};
    for (int s = 0; s < VS_WORLD_N_SUITES; s++) first[s] = -1;
    for (int64_t i = 0; i < d->n; i++) {
        int s = d->samples[i].suite;
        if (first[s] < 0) first[s] = i;
        count[s]++;
    }
    int64_t n = 0;
    int64_t taken[VS_WORLD_N_SUITES] = {0};
    int64_t cursor[VS_WORLD_N_SUITES];
    for (int s = 0; s < VS_WORLD_N_SUITES; s++) cursor[s] = first[s];
    for (bool more = true; more;) {
        more = false;
        for (int s = 0; s < VS_WORLD_N_SUITES; s++) {
            if (first[s] < 0 || taken[s] >= count[s] || (limit > 0 && taken[s] >= limit)) continue;
            /* the next sample of suite s in file order */
            while (cursor[s] < d->n && (int)d->samples[cursor[s]].suite != s) cursor[s]++;
            if (cursor[s] >= d->n) continue;
            order[n++] = cursor[s]++;
            taken[s]++;
            more = true;
        }
    }
    return n;
}

static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static vs_status check_config(const vs_bench_config *c, vs_error *err) {
    if (!c->models_dir || !c->data_dir || !c->out_dir)
        return vs_error_set(err, VS_ERR_INVALID, "bench: --models, --data and --out are required");
    if (c->n_methods < 1 || c->n_methods > VS_BENCH_MAX_LIST)
        return vs_error_set(err, VS_ERR_INVALID, "bench: %d methods (1..%d)", c->n_methods,
                            VS_BENCH_MAX_LIST);
    for (int i = 0; i < c->n_methods; i++) {
        if (!vs_bench_method_find(c->methods[i])) {
            char names[512] = "";
            int n;
            const vs_bench_method *t = vs_bench_methods(&n);
            for (int k = 0; k < n; k++)
                snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", k ? ", " : "",
                         t[k].name);
            return vs_error_set(err, VS_ERR_INVALID, "bench: unknown method '%s' (known: %s)", c->methods[i],
                                names);
        }
        for (int k = 0; k < i; k++)
            if (!strcmp(c->methods[i], c->methods[k]))
                return vs_error_set(err, VS_ERR_INVALID, "bench: method '%s' listed twice", c->methods[i]);
    }
    if (c->n_gammas < 1 || c->n_gammas > VS_BENCH_MAX_LIST)
        return vs_error_set(err, VS_ERR_INVALID, "bench: no gamma");
    for (int i = 0; i < c->n_gammas; i++)
        if (c->gammas[i] < 1 || c->gammas[i] > VS_SPEC_MAX_GAMMA)
            return vs_error_set(err, VS_ERR_INVALID, "bench: gamma %d outside [1, %d]", c->gammas[i],
                                VS_SPEC_MAX_GAMMA);
    if (c->n_temps < 1 || c->n_temps > VS_BENCH_MAX_LIST)
        return vs_error_set(err, VS_ERR_INVALID, "bench: no temperature");
    for (int i = 0; i < c->n_temps; i++)
        if (!(c->temps[i] >= 0 && c->temps[i] <= 100))
            return vs_error_set(err, VS_ERR_INVALID, "bench: temperature %g outside [0, 100]", c->temps[i]);
    if (c->n_turns < 1 || c->n_turns > 2)
        return vs_error_set(err, VS_ERR_INVALID, "bench: turns must be 1 and/or 2");
    for (int i = 0; i < c->n_turns; i++)
        if (c->turns[i] < 1 || c->turns[i] > VS_WORLD_MAX_TURNS)
            return vs_error_set(err, VS_ERR_INVALID, "bench: turn %d outside [1, %d]", c->turns[i],
                                VS_WORLD_MAX_TURNS);
    if (c->threads < 1) return vs_error_set(err, VS_ERR_INVALID, "bench: threads %d < 1", c->threads);
    if (c->repeat < 1 || c->repeat > 100)
        return vs_error_set(err, VS_ERR_INVALID, "bench: repeat %d outside [1, 100]", c->repeat);
    if (c->n_predict < 1) return vs_error_set(err, VS_ERR_INVALID, "bench: token limit %d < 1", c->n_predict);
    return VS_OK;
}

typedef struct runner {
    const vs_bench_config *c;
    vs_bench_models m;
    vs_tokenizer *tok;
    vs_spec *eng;
    vs_spec_drafter *drafters[VS_BENCH_MAX_LIST]; /* per configured method (NULL for ar) */
    const vs_bench_method *meth[VS_BENCH_MAX_LIST];
    int n_meth;
    vs_world_dataset *d;
    vs_bench_results res;
    vs_bench_results_file rf;
    int32_t n_ctx;
} runner;

static bool uses(const runner *r, vs_bench_drafter_file f) {
    for (int i = 0; i < r->n_meth; i++)
        if (r->meth[i]->drafter == f) return true;
    return false;
}

static vs_status load_models(runner *r, const char *const paths[6], vs_error *err) {
    const vs_bench_config *c = r->c;
    vs_status st;
    if (!(r->m.target = vs_lm_load(paths[0], err))) return err->code;
    if (!(r->tok = vs_tokenizer_from_gguf(vs_lm_gguf(r->m.target), err))) return err->code;
    r->m.tok = r->tok;
    /* the target's mmproj: optional (text-only datasets); an image sample without it is an error */
    if (file_exists(paths[1], NULL) && !(r->m.target_mmproj = vs_mmproj_open(paths[1], err)))
        return err->code;
    if (uses(r, VS_BENCH_DRAFT_LLAVA)) {
        if (!(r->m.draft = vs_lm_load(paths[2], err))) return vs_error_wrap(err, "drafter for methods m/t");
        if (file_exists(paths[3], NULL) && !(r->m.draft_mmproj = vs_mmproj_open(paths[3], err)))
            return err->code;
    }
    if (uses(r, VS_BENCH_DRAFT_MASSV)) {
        if (!(r->m.massv = vs_lm_load(paths[4], err))) return vs_error_wrap(err, "MASSV drafter");
        if (file_exists(paths[5], NULL) && !(r->m.massv_mmproj = vs_mmproj_open(paths[5], err)))
            return err->code;
    }
    if (c->threads > 1 && !(r->m.tp = vs_threadpool_new(c->threads, err))) return err->code;
    bool captions = false;
    for (int i = 0; i < r->n_meth; i++) captions |= r->meth[i]->captions;
    if (captions) {
        /* the captioner: the drafter's LM and projector, on its own thread (no pool: it must not share the
         * target's, which runs the prefill at the same time) */
        if (!r->m.draft_mmproj)
            return vs_error_set(err, VS_ERR_INVALID, "caption drafting needs the drafter's projector (%s)",
                                paths[3]);
        vs_captioner_opts co = {.prompt = NULL, .max_tokens = 0, .pool_k = 1, .tp = NULL};
        if (!(r->m.captioner =
                  vs_captioner_new(r->m.draft, vs_mmproj_projector(r->m.draft_mmproj), &co, err)))
            return vs_error_wrap(err, "captioner");
        if (!(r->m.captions = vs_caption_src_new_captioner(r->m.captioner, err))) return err->code;
    }
    r->m.kv_type = c->draft_kv_type;
    r->m.n_ctx = c->n_ctx;
    r->n_ctx = c->n_ctx > 0 ? c->n_ctx : vs_lm_cfg(r->m.target)->n_ctx_train;
    vs_spec_config ec = {
        .n_ctx = r->n_ctx, .kv_type = c->kv_type, .tp = r->m.tp, .tok = c->ignore_eos ? NULL : r->tok};
    if (!(r->eng = vs_spec_new(r->m.target, &ec, err))) return err->code;
    for (int i = 0; i < r->n_meth; i++) {
        if (!r->meth[i]->make) continue;
        if (!(r->drafters[i] = r->meth[i]->make(&r->m, r->meth[i]->arg, err)))
            return vs_error_wrap(err, "method %s", r->meth[i]->name);
    }
    if ((st = warm_up(r->m.target, r->m.tp, err))) return st;
    if (r->m.draft && (st = warm_up(r->m.draft, r->m.tp, err))) return st;
    if (r->m.massv && (st = warm_up(r->m.massv, r->m.tp, err))) return st;
    return VS_OK;
}

static void runner_free(runner *r) {
    for (int i = 0; i < r->n_meth; i++) vs_spec_drafter_free(r->drafters[i]);
    vs_spec_free(r->eng);
    vs_caption_src_free(r->m.captions);
    vs_captioner_free(r->m.captioner);
    vs_mmproj_free(r->m.massv_mmproj);
    vs_lm_free(r->m.massv);
    vs_mmproj_free(r->m.draft_mmproj);
    vs_lm_free(r->m.draft);
    vs_mmproj_free(r->m.target_mmproj);
    vs_tokenizer_free(r->tok);
    vs_lm_free(r->m.target);
    vs_threadpool_free(r->m.tp);
    vs_bench_results_close(&r->rf);
    vs_bench_results_free(&r->res);
    vs_world_dataset_free(r->d);
}

/* The cells of a unit (ar first), marking those already in the results. */
static int unit_cells(const runner *r, const vs_world_sample *s, int turn, double temp, cell *cells,
                      int *n_missing) {
    int n = 0;
    *n_missing = 0;
    for (int i = 0; i < r->n_meth; i++) {
        const vs_bench_method *m = r->meth[i];
        int ng = m->kind == VS_BENCH_BASELINE ? 1 : r->c->n_gammas;
        for (int g = 0; g < ng; g++) {
            cell *x = &cells[n++]; /* x->log keeps its allocations from unit to unit */
            x->m = m, x->mi = i;
            x->t_caption = 0;
            x->gamma = m->kind == VS_BENCH_BASELINE ? 0 : r->c->gammas[g];
            x->missing = vs_bench_results_find(&r->res, s->id, turn, m->name, x->gamma, temp) < 0;
            *n_missing += x->missing;
        }
    }
    return n;
}

/* Runs one unit: the target-only run and every missing cell, in a rotated order; appends the records. */
static vs_status run_unit(runner *r, const vs_world_sample *s, int turn, double temp, const turn_prompt *tp,
                          cell *cells, int nc, vs_bench_run_info *info, vs_progress *pg, int64_t *done,
                          vs_error *err) {
    const vs_bench_config *c = r->c;
    vs_spec_params par = vs_spec_params_default();
    par.n_predict = c->n_predict;
    par.ignore_eos = c->ignore_eos;
    par.sampling = vs_sampler_params_default();
    par.sampling.temperature = (float)temp;
    /* the unit's seed and run order depend on the unit only (the same after a resume) */
    uint64_t h = 1469598103934665603ull;
    for (const char *p = s->id; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    const uint64_t unit = mix64(h ^ mix64((uint64_t)turn * 1000003u + (uint64_t)llround(temp * 1000)));
    par.sampling.seed = mix64(c->seed ^ unit);
    const int rot = (int)(unit % (uint64_t)nc);
    int base = -1;
    for (int i = 0; i < nc; i++)
        if (cells[i].m->kind == VS_BENCH_BASELINE) base = i;
    vs_status st = VS_OK;
    /* repeat: the whole rotated order again (drift hits every cell alike); each cell keeps its fastest
     * run. Greedy runs repeat token for token; sampled ones too (the seed depends on the unit only). */
    for (int rep = 0; rep < c->repeat && !st; rep++) {
        for (int k = 0; k < nc && !st; k++) {
            cell *x = &cells[(k + rot) % nc];
            if (!x->missing && x->m->kind != VS_BENCH_BASELINE) continue;
            vs_spec_drafter *d = r->drafters[x->mi];
            par.gamma = x->gamma;
            st = vs_spec_generate(r->eng, d, &tp->p, &par, NULL, NULL, &x->log, err);
            const vs_draft_ens_stats *es = d ? vs_draft_ens_get_stats(d) : NULL;
            x->t_caption = es ? es->t_caption : 0;
            if (st) {
                vs_error_wrap(err, "sample %s turn %d method %s gamma %d", s->id, turn, x->m->name, x->gamma);
                break;
            }
            if (rep == 0 || x->log.t_total < x->best.t_total) {
                vs_spec_log tmp = x->best; /* swap: both keep their allocations */
                x->best = x->log, x->log = tmp;
                x->best_t_caption = x->t_caption;
            }
            (*done)++;
            if (rep == 0) info->n_run += x->missing;
            if (pg) vs_progress_update(pg, *done, "%s t%d %s", s->id, turn, x->m->name);
        }
    }
    if (st) return st;
    /* records */
    vs_bench_record *recs = vs_calloc((size_t)nc, sizeof(vs_bench_record));
    if (!recs) return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    int nr = 0;
    for (int i = 0; i < nc; i++) {
        cell *x = &cells[i];
        if (!x->missing) continue;
        vs_bench_record *rec = &recs[nr++];
        memset(rec, 0, sizeof(*rec));
        snprintf(rec->sample, sizeof(rec->sample), "%s", s->id);
        snprintf(rec->suite, sizeof(rec->suite), "%s", vs_world_suite_name(s->suite));
        rec->turn = turn;
        snprintf(rec->turn_kind, sizeof(rec->turn_kind), "%s",
                 vs_world_turn_kind_name(s->turns[turn - 1].kind));
        snprintf(rec->method, sizeof(rec->method), "%s", x->m->name);
        rec->temp = temp;
        rec->n_images = tp->n_images;
        rec->t_vision = tp->t_vision;
        rec->t_caption = x->best_t_caption;
        rec->identical = -1;
        vs_bench_record_fill(rec, &x->best, &cells[base].best);
        if (temp > 0 || x->m->kind == VS_BENCH_BASELINE)
            rec->identical = -1; /* sampling: differs by design */
        else if (!rec->identical && x->m->kind != VS_BENCH_BASELINE) {
            info->n_mismatch++;
            vs_log("bench: WARNING: greedy output of %s (gamma %d) differs from target-only on %s turn %d\n",
                   x->m->name, x->gamma, s->id, turn);
        }
        char *text = vs_detokenize(r->tok, x->best.tokens, x->best.n_tokens, 0, NULL, NULL);
        rec->correct = text ? (int8_t)vs_world_check(s, turn - 1, text, NULL) : -1;
        vs_free(text);
    }
    st = vs_bench_results_append(&r->rf, recs, nr, err);
    for (int i = 0; !st && i < nr; i++) st = vs_bench_results_add(&r->res, &recs[i], err);
    vs_free(recs);
    return st;
}

vs_status vs_bench_run(const vs_bench_config *c, vs_bench_run_info *info, vs_error *err) {
    vs_bench_run_info dummy;
    if (!info) info = &dummy;
    memset(info, 0, sizeof(*info));
    const double t_start = vs_time_now();
    vs_status st = check_config(c, err);
    if (st) return st;
    runner r = {.c = c};
    vs_bench_results_init(&r.res);
    /* "ar" first, always */
    r.meth[r.n_meth++] = vs_bench_method_find("ar");
    for (int i = 0; i < c->n_methods; i++)
        if (strcmp(c->methods[i], "ar")) r.meth[r.n_meth++] = vs_bench_method_find(c->methods[i]);
    if (r.n_meth > VS_BENCH_MAX_LIST) return vs_error_set(err, VS_ERR_INVALID, "bench: too many methods");

    char paths[6][4096];
    const char *names[6] = {c->target ? c->target : VS_BENCH_FILE_TARGET,
                            c->target_mmproj ? c->target_mmproj : VS_BENCH_FILE_TARGET_MMPROJ,
                            c->draft ? c->draft : VS_BENCH_FILE_DRAFT,
                            c->draft_mmproj ? c->draft_mmproj : VS_BENCH_FILE_DRAFT_MMPROJ,
                            c->massv ? c->massv : VS_BENCH_FILE_MASSV,
                            c->massv_mmproj ? c->massv_mmproj : VS_BENCH_FILE_MASSV_MMPROJ};
    const char *pp[6];
    for (int i = 0; i < 6; i++)
        model_path(paths[i], sizeof(paths[i]), c->models_dir, names[i]), pp[i] = paths[i];

    uint32_t mask = c->suites ? c->suites : (VS_WORLD_ALL_SUITES & ~VS_WORLD_SUITE_BIT(VS_WORLD_CAPTION));
    int64_t *order = NULL;
    char *header = NULL;
    cell *cells = NULL;
    sample_images si = {0};
    turn_prompt tp = {0};
    char res_path[4200];
    snprintf(res_path, sizeof(res_path), "%s/results.jsonl", c->out_dir);

    if (!(r.d = vs_world_load(c->data_dir, c->split, mask, err))) {
        st = err->code;
        goto done;
    }
    if ((st = mkdir_p(c->out_dir, err))) goto done;
    if ((st = load_models(&r, pp, err))) goto done;
    if (!(header = make_header(c, pp, r.d, r.n_ctx))) {
        st = vs_error_set(err, VS_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (c->fresh && remove(res_path) && errno != ENOENT) {
        st = vs_error_set(err, VS_ERR_IO, "%s: cannot remove: %s", res_path, strerror(errno));
        goto done;
    }
    if ((st = vs_bench_results_load(res_path, &r.res, err))) goto done;
    if (r.res.n_dropped && !c->quiet)
        vs_log("bench: %s: dropped %lld incomplete line(s) of an interrupted run\n", res_path,
               (long long)r.res.n_dropped);
    if ((st = vs_bench_results_open(&r.rf, res_path, &r.res, header, err))) goto done;

    /* the plan */
    order = vs_malloc(sizeof(int64_t) * (size_t)VS_MAX(r.d->n, 1));
    int max_cells = 1 + (r.n_meth - 1) * c->n_gammas;
    cells = vs_calloc((size_t)max_cells, sizeof(cell));
    if (!order || !cells) {
        st = vs_error_set(err, VS_ERR_NOMEM, "out of memory");
        goto done;
    }
    const int64_t n_samples = plan_order(r.d, c->limit, order);
    int64_t total_runs = 0;
    for (int64_t oi = 0; oi < n_samples; oi++) {
        const vs_world_sample *s = &r.d->samples[order[oi]];
        for (int ti = 0; ti < c->n_turns; ti++) {
            if (c->turns[ti] > s->n_turns) continue;
            for (int k = 0; k < c->n_temps; k++) {
                int miss = 0;
                int nc = unit_cells(&r, s, c->turns[ti], c->temps[k], cells, &miss);
                info->n_units++;
                info->n_cells += nc;
                info->n_done_before += nc - miss;
                /* the baseline always runs when anything is missing (it pairs the timings) */
                if (miss) total_runs += (int64_t)c->repeat * (miss + !cells[0].missing);
            }
        }
    }
    if (!c->quiet)
        vs_log("bench: %lld samples, %lld units, %lld cells (%lld done before), %lld runs to do; results in "
               "%s\n",
               (long long)n_samples, (long long)info->n_units, (long long)info->n_cells,
               (long long)info->n_done_before, (long long)total_runs, res_path);
    vs_progress pg;
    if (c->progress) vs_progress_begin(&pg, "bench spec", total_runs);
    int64_t done_runs = 0;
    /* a prompt must leave room for the whole answer and the longest draft */
    int32_t max_gamma = 0;
    for (int i = 0; i < c->n_gammas; i++) max_gamma = VS_MAX(max_gamma, c->gammas[i]);
    const int32_t prompt_room = r.n_ctx - c->n_predict - max_gamma - 1;
    for (int64_t oi = 0; oi < n_samples && !st; oi++) {
        const vs_world_sample *s = &r.d->samples[order[oi]];
        for (int ti = 0; ti < c->n_turns && !st; ti++) {
            const int turn = c->turns[ti];
            if (turn > s->n_turns) continue;
            bool built = false;
            for (int k = 0; k < c->n_temps && !st; k++) {
                int miss = 0;
                int nc = unit_cells(&r, s, turn, c->temps[k], cells, &miss);
                if (!miss) continue;
                if (!built) {
                    st = build_prompt(&tp, s, turn - 1, &si, &r.m, VS_MAX(prompt_room, 1), err);
                    if (st == VS_ERR_RANGE) { /* longer than the context: skip the unit */
                        if (!c->quiet) vs_log("bench: skipping %s turn %d: %s\n", s->id, turn, err->msg);
                        info->n_skipped_units++;
                        turn_prompt_free(&tp);
                        st = VS_OK;
                        break;
                    }
                    if (st) break;
                    built = true;
                }
                st = run_unit(&r, s, turn, c->temps[k], &tp, cells, nc, info, c->progress ? &pg : NULL,
                              &done_runs, err);
            }
            turn_prompt_free(&tp);
        }
        sample_images_free(&si);
    }
    if (c->progress) vs_progress_end(&pg, done_runs);
done:
    for (int i = 0; cells && i < 1 + (r.n_meth - 1) * c->n_gammas; i++) {
        vs_spec_log_free(&cells[i].log);
        vs_spec_log_free(&cells[i].best);
    }
    turn_prompt_free(&tp);
    sample_images_free(&si);
    vs_free(cells);
    vs_free(order);
    vs_free(header);
    runner_free(&r);
    info->seconds = vs_time_now() - t_start;
    return st;
}

/* ------------------------------------------------------------------------------------------------
 * Random model sets */

void vs_bench_random_opts_default(vs_bench_random_opts *o) {
    *o = (vs_bench_random_opts){.n_embd = 256,
                                .n_layer = 4,
                                .n_head = 4,
                                .n_ff = 512,
                                .n_vocab = 512,
                                .n_ctx = 2048,
                                .draft_layers = 1,
                                .type = VS_TYPE_F16,
                                .init_std = 0.1f,
                                .image_size = 56,
                                .patch_size = 14,
                                .vit_width = 64,
                                .vit_blocks = 1,
                                .seed = 1};
}

vs_status vs_bench_make_random_models(const char *dir, const vs_bench_random_opts *o, vs_error *err) {
    if (o->draft_layers < 1 || o->draft_layers >= o->n_layer)
        return vs_error_set(err, VS_ERR_INVALID, "random models: drafter layers %d must be in [1, %d)",
                            o->draft_layers, o->n_layer);
    vs_status st = mkdir_p(dir, err);
    if (st) return st;
    char path[4200];
    vs_lm_random_opts lo = {.n_embd = o->n_embd,
                            .n_layer = o->n_layer,
                            .n_head = o->n_head,
                            .n_head_kv = o->n_head,
                            .n_ff = o->n_ff,
                            .n_ctx = o->n_ctx,
                            .n_vocab = o->n_vocab,
                            .type = o->type,
                            .init_std = o->init_std,
                            .tied = true,
                            .seed = o->seed};
    snprintf(path, sizeof(path), "%s/%s", dir, VS_BENCH_FILE_TARGET);
    if ((st = vs_lm_write_random(&lo, path, err))) return st;
    /* the twin: same seed and width, tied embeddings, fewer layers (the first ones are identical) */
    lo.n_layer = o->draft_layers;
    const char *lm_names[2] = {VS_BENCH_FILE_DRAFT, VS_BENCH_FILE_MASSV};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, lm_names[i]);
        if ((st = vs_lm_write_random(&lo, path, err))) return st;
    }
    vs_vision_config vc;
    vs_vision_config_llava15(&vc);
    vc.image_size = o->image_size, vc.patch_size = o->patch_size, vc.width = o->vit_width;
    vc.ffn = 2 * o->vit_width, vc.n_heads = VS_MAX(1, o->vit_width / 32), vc.n_blocks = o->vit_blocks;
    vc.projection_dim = o->vit_width, vc.proj_hidden = 2 * o->vit_width, vc.proj_out = o->n_embd;
    vc.has_tower = true;
    if ((st = vs_vision_config_check(&vc, "random mmproj", err))) return st;
    snprintf(path, sizeof(path), "%s/%s", dir, VS_BENCH_FILE_TARGET_MMPROJ);
    if ((st = vs_mmproj_write_random(path, &vc, VS_TYPE_F32, o->seed + 7, err))) return st;
    /* drafters' projectors: projector-only copies of the target's, recording the tower's hash */
    vs_mmproj *mp = vs_mmproj_open(path, err);
    if (!mp) return err->code;
    vs_vision_weights w;
    if ((st = vs_mmproj_read_weights(mp, &w, err))) {
        vs_mmproj_free(mp);
        return st;
    }
    vs_vision_config pc = vc;
    pc.has_tower = false;
    vs_mmproj_write_opts wo = {.mat_type = VS_TYPE_F32,
                               .tower_hash = vs_vision_tower_hash(vs_mmproj_tower(mp)),
                               .name = "random drafter projector"};
    const char *mm_names[2] = {VS_BENCH_FILE_DRAFT_MMPROJ, VS_BENCH_FILE_MASSV_MMPROJ};
    for (int i = 0; i < 2 && !st; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, mm_names[i]);
        st = vs_mmproj_write(path, &pc, &w, &wo, err);
    }
    vs_vision_weights_free(&w, &vc);
    vs_mmproj_free(mp);
    return st;
}
