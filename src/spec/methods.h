/* methods: the named drafting methods, one table for every front end (`generate --method`, `bench spec
 * --methods`, chat, the server and the public API all accept these names).
 * Owns: the method table (name, table label, kind, which drafter file it drafts with, one line of
 * help) and building a method's drafter from loaded models (draft_lm.h for the single small-LM
 * methods, draft_ensemble.h for C, P and the ensembles). Models are borrowed.
 *
 * A method drafts with one of two drafter files (vs_method_role): the LLaVA-recipe drafter
 * (models/draft-llava*.gguf, any small LM sharing the target's vocabulary given with -md) or the MASSV
 * drafter (models/draft-massv*.gguf); the MSD and EAGLE methods draft with a feature-level head file, DREAM
 * with a DREAM model file (-md names them).
 * The method "ar" is target-only decoding (no drafter). */
#ifndef VS_METHODS_H
#define VS_METHODS_H

#include "caption.h"
#include "draft_ensemble.h"
#include "draft_dream.h"
#include "draft_msd.h"
#include "lm.h"
#include "spec.h"
#include "vision.h"

typedef enum vs_method_kind {
    VS_METHOD_TARGET = 0,   /* target only */
    VS_METHOD_SINGLE = 1,   /* one drafting input */
    VS_METHOD_ENSEMBLE = 2, /* several inputs, weighted */
} vs_method_kind;

typedef enum vs_method_role {
    VS_ROLE_NONE = 0,
    VS_ROLE_LLAVA = 1, /* the LLaVA-recipe drafter (-md) and its projector (--mmproj-draft) */
    VS_ROLE_MASSV = 2, /* the MASSV drafter and its projector */
    VS_ROLE_MSD = 3,   /* the MSD feature-level head (draft_msd.h; a head file, not an LM; no projector) */
    VS_ROLE_EAGLE = 4, /* a second head file, the EAGLE baseline (trained with --no-decouple --one-stage),
                        * drafted by the same code: MSD and EAGLE side by side in one run */
    VS_ROLE_DREAM = 5, /* the DREAM draft model (draft_dream.h; its own file, no projector) */
} vs_method_role;
#define VS_N_ROLES 6
/* Roles whose file is a feature-level head (draft_msd.h), not a drafter LM. */
static inline bool vs_role_is_head(int r) { return r == VS_ROLE_MSD || r == VS_ROLE_EAGLE; }

/* The models a drafter is built from (borrowed by the drafter: free them after it). */
typedef struct vs_method_models {
    vs_lm *target;
    const vs_vision_tower *tower;                  /* the target's tower, NULL for text-only use */
    vs_lm *draft[VS_N_ROLES];                      /* by role; NULL when not loaded (and for the head roles) */
    const vs_msd_head *head[VS_N_ROLES];           /* the head roles' files (vs_role_is_head), NULL when not loaded */
    const vs_dream_head *dream;                    /* VS_ROLE_DREAM's file, NULL when not loaded */
    const vs_vision_projector *proj[VS_N_ROLES];   /* each drafter's projector, NULL when not loaded */
    vs_threadpool *tp;                             /* borrowed; NULL = caller's thread */
    vs_caption_src *captions;                      /* caption methods: their source (one request at a time) */
} vs_method_models;

/* Options every method takes. */
typedef struct vs_method_opts {
    int32_t n_ctx;      /* drafter cache rows; <= 0: the draft model's n_ctx_train */
    vs_type kv_type;    /* drafter cache type (VS_TYPE_F32 = 0, F16, BF16) */
    int32_t tree_width; /* width-D token trees; 0 or 1 = chains */
    int32_t tree_top_k; /* EAGLE-2 dynamic trees (draft_ensemble.h): K; 0 = off */
    int32_t tree_nodes; /* EAGLE-2 trees: nodes per proposal; 0 = 8 K */
    bool greedy;        /* draft greedily even when the request samples */
    int32_t visual_keep; /* percent of each image's rows the drafter keeps (DREAM's visual token
                          * compression); 0 or 100 = all; other methods refuse anything else */
    int32_t p_min;       /* adaptive draft length of the small-LM drafters' chains (draft_ensemble.h
                          * p_min), percent: a block stops before a drafted token below P%; 1..99,
                          * VS_P_MIN_OFF, or 0 = the default (VS_P_MIN_DEFAULT for chains, off for
                          * trees and the other drafters) */
} vs_method_opts;

#define VS_P_MIN_OFF (-1)
/* The default adaptive draft length, measured with `bench spec` on the world's test requests (shipped
 * models, 2 threads, greedy, gamma 5, median decode speedups; docs/spec.md): first turns (24 runs) T
 * fixed 1.39x, P 30 / 50 / 70 1.49x / 1.48x / 1.37x; first and second turns (52 runs) T fixed 1.71x,
 * P 30 / 40 / 50 1.77x / 1.76x / 1.72x, M fixed 1.85x, P 40 1.85x (mean 1.75x -> 1.77x). */
#define VS_P_MIN_DEFAULT 40
/* The p_min (0..1) a chain drafter of these options runs with. */
static inline float vs_method_p_min(const vs_method_opts *o) {
    const bool chain = o->tree_width <= 1 && o->tree_top_k <= 0;
    return o->p_min > 0 ? (float)o->p_min / 100.0f : o->p_min == 0 && chain ? VS_P_MIN_DEFAULT / 100.0f : 0.0f;
}

typedef struct vs_method vs_method;
typedef vs_spec_drafter *(*vs_method_make_fn)(const vs_method *m, const vs_method_models *mm,
                                              const vs_method_opts *o, vs_error *err);

struct vs_method {
    const char *name;  /* what users type: "m", "tabed-mt" ... */
    const char *label; /* in tables and plots: "M", "TABED^MT" */
    vs_method_kind kind;
    vs_method_role role;   /* the drafter file it drafts with (VS_ROLE_NONE: target only) */
    const char *what;      /* one line for --help and docs */
    vs_method_make_fn make; /* NULL for the target-only method */
    int arg;               /* the builder's argument (draft_lm mode, ensemble entry) */
    bool captions;         /* needs a caption source (vs_method_models.captions) */
    bool projector;        /* drafts through its drafter's projector (M or P inputs): needs that mmproj */
};

/* The table (n entries); the first entry is "ar". */
const vs_method *vs_methods(int *n);
/* A method by name. Every front end also accepts a name with a token-tree shape after '@' (not for "ar"):
 *   NAME@wD        width-D trees (tree_width = D, 2 .. VS_DRAFT_ENS_MAX_WIDTH);
 *   NAME@kK[nN]    EAGLE-2 dynamic trees (tree_top_k = K, 1 .. VS_TREE_MAX_TOP_K; tree_nodes = N,
 *                  1 .. VS_TREE_MAX_NODES, default 8 K);
 * followed by, or instead of the tree part:
 *   vP             visual token compression: keep P percent of each image's rows (visual_keep, 1 .. 100;
 *                  the dream method);
 * e.g. "m@k4n24", "tabed-mt@w3". NULL if the name or the shape is unknown / malformed. */
const vs_method *vs_method_find(const char *name);
/* Applies the shape of a name (vs_method_find accepted it) to o: the tree fields and visual_keep are replaced;
 * a name without '@' leaves o as it is. */
void vs_method_shape(const char *name, vs_method_opts *o);
/* Rows the target verifies per block at most with these options (a chain gamma + 1, a width-D tree
 * D gamma + 1, an EAGLE-2 tree its nodes + 1). */
int32_t vs_method_verify_rows(const vs_method_opts *o, int32_t gamma);
/* The label of a method name for tables ("TABED^MT"; with a shape "M@k4n24"), into buf; the name itself
 * when unknown. Returns buf. */
const char *vs_method_label(const char *name, char *buf, size_t cap);
/* "ar, m, t, ..." into buf (for error messages). */
void vs_method_names(char *buf, size_t cap);
/* The method's drafter. NULL + err when a model it needs is missing (message names the method and the
 * file it lacks) or an option is invalid. The target-only method has no drafter: VS_ERR_INVALID. */
vs_spec_drafter *vs_method_drafter_new(const vs_method *m, const vs_method_models *mm, const vs_method_opts *o,
                                       vs_error *err);

#endif
