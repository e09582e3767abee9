/* methods: the drafting-method table and its drafter builders. See methods.h. */
#include "methods.h"

#include <stdio.h>
#include <string.h>

#include "draft_lm.h"

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
                           .tree_width = o->tree_width};
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
};

const vs_method *vs_methods(int *n) {
    *n = (int)VS_ARRAY_LEN(method_table);
    return method_table;
}

const vs_method *vs_method_find(const char *name) {
    for (size_t i = 0; name && i < VS_ARRAY_LEN(method_table); i++)
        if (!strcmp(method_table[i].name, name)) return &method_table[i];
    return NULL;
}

const char *vs_method_label(const char *name) {
    const vs_method *m = vs_method_find(name);
    return m ? m->label : name;
}

void vs_method_names(char *buf, size_t cap) {
    if (!cap) return;
    buf[0] = 0;
    for (size_t i = 0; i < VS_ARRAY_LEN(method_table); i++) {
        size_t l = strlen(buf);
        snprintf(buf + l, cap - l, "%s%s", i ? ", " : "", method_table[i].name);
    }
}

vs_spec_drafter *vs_method_drafter_new(const vs_method *m, const vs_method_models *mm, const vs_method_opts *o,
                                       vs_error *err) {
    if (!m->make) {
        vs_error_set(err, VS_ERR_INVALID, "method %s decodes with the target alone (no drafter)", m->name);
        return NULL;
    }
    vs_method_opts def = {0};
    return m->make(m, mm, o ? o : &def, err);
}
