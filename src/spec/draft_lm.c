/* draft_lm: a separate small LM as drafter (see draft_lm.h). It is the one-input case of the ensemble
 * drafter (draft_ensemble.c owns the code: prompts, prefix reuse, feeding, drawing, rollback); this file
 * maps the options and the accessors. */
#include "draft_lm.h"

#include "draft_ensemble.h"

/* Mixed into the ensemble drafter's seed (which XORs 0x6A09E667F3BCC909 into the request's seed), so a
 * draft-LM drafter's random stream is the request's seed XOR 0xD1B54A32D192ED03, as it always was. */
#define DRAFT_LM_SEED_MIX (0x6A09E667F3BCC909ull ^ 0xD1B54A32D192ED03ull)

vs_spec_drafter *vs_draft_lm_new(vs_lm *draft, const vs_lm *target, const vs_draft_lm_opts *opts,
                                 vs_error *err) {
    vs_draft_lm_opts def = {0};
    if (!opts) opts = &def;
    if (opts->mode != VS_DRAFT_LM_TEXT && opts->mode != VS_DRAFT_LM_MM) {
        vs_error_set(err, VS_ERR_INVALID, "draft-lm: unknown drafting mode %d", (int)opts->mode);
        return NULL;
    }
    vs_draft_ens_opts o;
    vs_draft_ens_opts_default(&o);
    o.n_inputs = 1;
    o.inputs[0] = opts->mode == VS_DRAFT_LM_MM ? VS_ENS_IN_M : VS_ENS_IN_T;
    o.n_ctx = opts->n_ctx;
    o.kv_type = opts->kv_type;
    o.tp = opts->tp;
    o.proj = opts->mode == VS_DRAFT_LM_MM ? opts->proj : NULL;
    o.tower = opts->mode == VS_DRAFT_LM_MM ? opts->tower : NULL;
    o.greedy = opts->greedy;
    o.tree_width = opts->tree_width;
    o.tree_top_k = opts->tree_top_k;
    o.tree_nodes = opts->tree_nodes;
    o.p_min = opts->p_min;
    o.debug_reject = opts->debug_reject;
    o.seed = DRAFT_LM_SEED_MIX;
    return vs_draft_ens_new(draft, target, &o, err);
}

int64_t vs_draft_lm_rows_evaluated(const vs_spec_drafter *d) {
    const vs_draft_ens_stats *s = vs_draft_ens_get_stats(d);
    return s ? s->rows_evaluated : -1;
}

int32_t vs_draft_lm_prefilled(const vs_spec_drafter *d) {
    const vs_draft_ens_stats *s = vs_draft_ens_get_stats(d);
    return s ? s->prefilled[0] : -1;
}

vs_kv *vs_draft_lm_kv(vs_spec_drafter *d) { return vs_draft_ens_kv(d); }
