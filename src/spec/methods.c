/* methods: the drafting-method table and its drafter builders. See methods.h. */
#include "methods.h"

#include <stdio.h>
#include <string.h>

#include "draft_lm.h"

/* A feature-level head (draft_msd.h) over the target's features: the MSD head or the EAGLE baseline's. */
static vs_spec_drafter *make_msd(const vs_method *m, const vs_method_models *mm, const vs_method_opts *o,
                                 vs_error *err) {
    const vs_msd_head *h = vs_role_is_head(m->role) ? mm->head[m->role] : NULL;
    if (!h) {
        vs_error_set(err, VS_ERR_INVALID, "method %s needs a head file (-md FILE), which is not loaded", m->name);
        return NULL;
    }
    if (o->tree_width > 1) {
        vs_error_set(err, VS_ERR_INVALID, "method %s drafts chains or EAGLE-2 trees (NAME@kK[nN]), not width trees",
                     m->name);
        return NULL;
    }
    vs_draft_msd_opts mo = {.n_ctx = o->n_ctx,
                            .kv_type = o->kv_type,
                            .tp = mm->tp,
                            .greedy = o->greedy,
                            .tree_top_k = o->tree_top_k,
                            .tree_nodes = o->tree_nodes};
    return vs_draft_msd_new(h, mm->target, &mo, err);
}

/* The DREAM draft model (draft_dream.h) over the target's features. */
static vs_spec_drafter *make_dream(const vs_method *m, const vs_method_models *mm, const vs_method_opts *o,
                                   vs_error *err) {
    if (!mm->dream) {
        vs_error_set(err, VS_ERR_INVALID, "method %s needs a DREAM model file (-md FILE), which is not loaded",
                     m->name);
        return NULL;
    }
    if (o->tree_width > 1) {
        vs_error_set(err, VS_ERR_INVALID, "method %s drafts chains or EAGLE-2 trees (NAME@kK[nN]), not width trees",
                     m->name);
        return NULL;
    }
    vs_draft_dream_opts d = {.n_ctx = o->n_ctx,
                             .kv_type = o->kv_type,
                             .tp = mm->tp,
                             .greedy = o->greedy,
                             .tree_top_k = o->tree_top_k,
                             .tree_nodes = o->tree_nodes,
                             .visual_keep = o->visual_keep > 0 ? (float)o->visual_keep / 100.0f : 1.0f};
    return vs_draft_dream_new(mm->dream, mm->target, &d, err);
}

static vs_lm *need_draft(const vs_method *m, const vs_method_models *mm, vs_error *err) {
    vs_lm *d = mm->draft[m->role];
    if (!d)
        vs_error_set(err, VS_ERR_INVALID, "method %s needs the %s drafter, which is not loaded", m->name,
                     m->role == VS_ROLE_MASSV ? "MASSV" : "LLaVA-recipe");
    return d;
}

/* The single small-LM methods (M, T, MASSV): draft_lm.h. */
static vs_spec_drafter *make_lm(const vs_method *m, const vs_method_models *mm, const vs_method_opts *o,
                                vs_error *err) {
    vs_lm *draft = need_draft(m, mm, err);
    if (!draft) return NULL;
    vs_draft_lm_opts lo = {.mode = (vs_draft_lm_mode)m->arg,
                           .n_ctx = o->n_ctx,
                           .kv_type = o->kv_type,
                           .tp = mm->tp,
                           .greedy = o->greedy,
                           .tree_width = o->tree_width,
                           .tree_top_k = o->tree_top_k,
                           .tree_nodes = o->tree_nodes,
                           .p_min = vs_method_p_min(o)};
    if (lo.mode == VS_DRAFT_LM_MM) {
        if (!mm->proj[m->role]) {
            vs_error_set(err, VS_ERR_INVALID, "method %s (multimodal drafting) needs the drafter's projector "
                                              "(its mmproj file)", m->name);
            return NULL;
        }
        lo.proj = mm->proj[m->role];
        lo.tower = mm->tower;
    }
    return vs_draft_lm_new(draft, mm->target, &lo, err);
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

static vs_spec_drafter *make_ens(const vs_method *m, const vs_method_models *mm, const vs_method_opts *o,
                                 vs_error *err) {
    const ens_spec *es = &ens_specs[m->arg];
    vs_lm *draft = need_draft(m, mm, err);
    if (!draft) return NULL;
    vs_draft_ens_opts eo;
    vs_draft_ens_opts_default(&eo);
    if (vs_ens_inputs_parse(es->inputs, eo.inputs, &eo.n_inputs, err)) return NULL;
    eo.weights.policy = es->policy;
    eo.n_ctx = o->n_ctx;
    eo.kv_type = o->kv_type;
    eo.tp = mm->tp;
    eo.proj = mm->proj[m->role];
    eo.tower = mm->tower;
    eo.captions = mm->captions;
    eo.greedy = o->greedy;
    eo.tree_width = o->tree_width;
    eo.tree_top_k = o->tree_top_k;
    eo.tree_nodes = o->tree_nodes;
    eo.p_min = vs_method_p_min(o);
    return vs_draft_ens_new(draft, mm->target, &eo, err);
}

static const vs_method method_table[] = {
    {"ar", "AR", VS_METHOD_TARGET, VS_ROLE_NONE, "target-only decoding (the baseline)", NULL, 0, false, false},
    {"m", "M", VS_METHOD_SINGLE, VS_ROLE_LLAVA,
     "multimodal drafting: the drafter's projector over the shared image features", make_lm, VS_DRAFT_LM_MM,
     false, true},
    {"t", "T", VS_METHOD_SINGLE, VS_ROLE_LLAVA, "text-only drafting: each image replaced by \"\\n\"", make_lm,
     VS_DRAFT_LM_TEXT, false, false},
    {"c", "C", VS_METHOD_SINGLE, VS_ROLE_LLAVA,
     "caption drafting: each image replaced by \"image: \" + a caption by the drafter (captioner thread)",
     make_ens, 0, true, false},
    {"p", "P", VS_METHOD_SINGLE, VS_ROLE_LLAVA, "pooled multimodal drafting: features pooled 2 x 2", make_ens,
     1, false, true},
    {"mt", "Static^MT", VS_METHOD_ENSEMBLE, VS_ROLE_LLAVA, "in-batch ensemble of M and T, uniform weights (IbED)",
     make_ens, 2, false, true},
    {"mtcp", "Static^MTCP", VS_METHOD_ENSEMBLE, VS_ROLE_LLAVA, "in-batch ensemble of M, T, C, P, uniform weights",
     make_ens, 3, true, true},
    {"tabed-mt", "TABED^MT", VS_METHOD_ENSEMBLE, VS_ROLE_LLAVA, "TABED over M and T, w-grid weights", make_ens, 4,
     false, true},
    {"tabed-mtcp", "TABED^MTCP", VS_METHOD_ENSEMBLE, VS_ROLE_LLAVA, "TABED over M, T, C, P, inverse-KL weights",
     make_ens, 5, true, true},
    {"random-mt", "Random^MT", VS_METHOD_ENSEMBLE, VS_ROLE_LLAVA,
     "M and T with random weights per block (TABED Table 4 ablation)", make_ens, 6, false, true},
    {"random-mtcp", "Random^MTCP", VS_METHOD_ENSEMBLE, VS_ROLE_LLAVA,
     "M, T, C, P with random weights per block (ablation)", make_ens, 7, true, true},
    {"tabed-mtcp-tvd", "TABED^MTCP-TVD", VS_METHOD_ENSEMBLE, VS_ROLE_LLAVA,
     "TABED over M, T, C, P, inverse-TVD weights (ablation)", make_ens, 8, true, true},
    {"tabed-mtcp-ada", "TABED^MTCP-Ada", VS_METHOD_ENSEMBLE, VS_ROLE_LLAVA,
     "TABED over M, T, C, P, AdaBoost-style weights (ablation)", make_ens, 9, true, true},
    {"massv", "MASSV", VS_METHOD_SINGLE, VS_ROLE_MASSV, "the MASSV drafter, multimodal", make_lm, VS_DRAFT_LM_MM,
     false, true},
    {"massv-t", "MASSV-T", VS_METHOD_SINGLE, VS_ROLE_MASSV, "the MASSV drafter, text-only (ablation)", make_lm,
     VS_DRAFT_LM_TEXT, false, false},
    {"msd", "MSD", VS_METHOD_SINGLE, VS_ROLE_MSD,
     "the MSD feature-level head on the target's own features (chains; EAGLE-2 trees with msd@kK[nN])", make_msd, 0,
     false, false},
    {"eagle", "EAGLE", VS_METHOD_SINGLE, VS_ROLE_EAGLE,
     "the EAGLE baseline: a second head file, trained without decoupled images (eagle@kK[nN] for trees)", make_msd, 0,
     false, false},
    {"dream", "DREAM", VS_METHOD_SINGLE, VS_ROLE_DREAM,
     "the DREAM draft model: cross-attention to the target's features (chains; EAGLE-2 trees with dream@kK[nN])",
     make_dream, 0, false, false},
};

const vs_method *vs_methods(int *n) {
    *n = (int)VS_ARRAY_LEN(method_table);
    return method_table;
}

/* A decimal number at *s (advanced past it) into *v; false when there is none or it exceeds 100000. */
static bool parse_num(const char **s, int32_t *v) {
    if (**s < '0' || **s > '9') return false;
    for (*v = 0; **s >= '0' && **s <= '9'; ++*s)
        if ((*v = *v * 10 + (**s - '0')) > 100000) return false;
    return true;
}

/* "wD", "kK[nN]", then optionally "vP", then optionally "pP" (each alone too) into o's tree fields,
 * visual_keep and (when given) p_min; false when malformed or out of range. */
static bool parse_shape(const char *s, vs_method_opts *o) {
    vs_method_opts t = *o;
    t.tree_width = t.tree_top_k = t.tree_nodes = t.visual_keep = 0; /* p_min: kept unless the shape sets it */
    bool any = false;
    if (*s == 'w') {
        s++;
        if (!parse_num(&s, &t.tree_width) || t.tree_width < 2 || t.tree_width > VS_DRAFT_ENS_MAX_WIDTH) return false;
        any = true;
    } else if (*s == 'k') {
        s++;
        if (!parse_num(&s, &t.tree_top_k) || t.tree_top_k < 1 || t.tree_top_k > VS_TREE_MAX_TOP_K) return false;
        if (*s == 'n') {
            s++;
            if (!parse_num(&s, &t.tree_nodes) || t.tree_nodes < 1 || t.tree_nodes > VS_TREE_MAX_NODES) return false;
        }
        any = true;
    }
    if (*s == 'v') {
        s++;
        if (!parse_num(&s, &t.visual_keep) || t.visual_keep < 1 || t.visual_keep > 100) return false;
        any = true;
    }
    if (*s == 'p') {
        s++;
        if (!parse_num(&s, &t.p_min) || t.p_min > 99) return false;
        if (t.p_min == 0) t.p_min = VS_P_MIN_OFF; /* @p0: fixed length */
        any = true;
    }
    if (*s || !any) return false;
    *o = t;
    return true;
}

const vs_method *vs_method_find(const char *name) {
    if (!name) return NULL;
    const char *at = strchr(name, '@');
    const size_t len = at ? (size_t)(at - name) : strlen(name);
    for (size_t i = 0; i < VS_ARRAY_LEN(method_table); i++) {
        const vs_method *m = &method_table[i];
        if (strlen(m->name) != len || strncmp(m->name, name, len)) continue;
        vs_method_opts o = {0};
        if (at && (m->kind == VS_METHOD_TARGET || !parse_shape(at + 1, &o))) return NULL;
        return m;
    }
    return NULL;
}

void vs_method_shape(const char *name, vs_method_opts *o) {
    const char *at = name ? strchr(name, '@') : NULL;
    vs_method_opts t = *o;
    if (at && parse_shape(at + 1, &t)) *o = t;
}

int32_t vs_method_verify_rows(const vs_method_opts *o, int32_t gamma) {
    if (o->tree_top_k > 0) return (o->tree_nodes > 0 ? o->tree_nodes : vs_tree_default_nodes(o->tree_top_k)) + 1;
    return VS_MAX(o->tree_width, 1) * gamma + 1;
}

const char *vs_method_label(const char *name, char *buf, size_t cap) {
    const vs_method *m = vs_method_find(name);
    const char *at = name ? strchr(name, '@') : NULL;
    snprintf(buf, cap, "%s%s", m ? m->label : name ? name : "", m && at ? at : "");
    return buf;
}

void vs_method_names(char *buf, size_t cap) {
    if (!cap) return;
    buf[0] = 0;
    for (size_t i = 0; i < VS_ARRAY_LEN(method_table); i++) {
        size_t l = strlen(buf);
        snprintf(buf + l, cap - l, "%s%s", i ? ", " : "", method_table[i].name);
    }
    size_t l = strlen(buf);
    snprintf(buf + l, cap - l,
             "; token trees: NAME@wD (width D, 2..%d) or NAME@kK[nN] (EAGLE-2, K 1..%d, N 1..%d); dream's visual "
             "token compression: NAME@vP or NAME@kK[nN]vP (keep P%% of each image's rows, 1..100); adaptive draft "
             "length of the small-LM drafters' chains: NAME@pP (stop before a drafted token below P%%, 1..99; "
             "default %d; @p0 fixed)",
             VS_DRAFT_ENS_MAX_WIDTH, VS_TREE_MAX_TOP_K, VS_TREE_MAX_NODES, VS_P_MIN_DEFAULT);
}

vs_spec_drafter *vs_method_drafter_new(const vs_method *m, const vs_method_models *mm, const vs_method_opts *o,
                                       vs_error *err) {
    if (!m->make) {
        vs_error_set(err, VS_ERR_INVALID, "method %s decodes with the target alone (no drafter)", m->name);
        return NULL;
    }
    vs_method_opts def = {0};
    if (!o) o = &def;
    if (o->visual_keep < 0 || o->visual_keep > 100 || (o->visual_keep && o->visual_keep < 100 && m->make != make_dream)) {
        vs_error_set(err, VS_ERR_INVALID, "method %s: visual token compression (@vP, P in 1..100) is DREAM's (method "
                     "dream); %d%% given", m->name, o->visual_keep);
        return NULL;
    }
    if ((o->p_min < 0 && o->p_min != VS_P_MIN_OFF) || o->p_min > 99 ||
        (o->p_min > 0 && m->make != make_lm && m->make != make_ens)) {
        vs_error_set(err, VS_ERR_INVALID, "method %s: the adaptive draft length (@pP, P in 1..99) is the small-LM "
                     "drafters' (m, t, c, p, the ensembles, massv); %d%% given", m->name, o->p_min);
        return NULL;
    }
    return m->make(m, mm, o, err);
}
