/* train_drafter: what turns the trainer (train_model.h, train_data.h) into a drafter trainer for
 * the LLaVA recipe (TABED app. H) and MASSV (docs/algorithms.md, 'MASSV drafter').
 * Owns: the drafter's model configuration (the TARGET's vision tower, a new projector W -> C -> C, a
 * small LLaMA LM of width C with the target's tokenizer), loading the target's tower into a training
 * model, the selection rule of the instruction data (single-image and text-only conversations), and
 * the sequence sets of the phases (vs_train_seqs: encoded sequences + the samples their images come
 * from, handed to vs_train_data_new_items):
 *   text      phase (a): every answer of the training split, every caption, and the text suite's
 *             conversations, as plain documents (no images, loss on every token);
 *   instruct  phase (c): the training conversations the selection rule keeps, the reference answers
 *             (the pooled recipe lays each picture out as its pooled rows: image_rows below);
 *   distill   MASSV's SDViT: the same conversations answered by the target (distill.h's file).
 * Phase (b) (projector pretraining) reads the world's captions split directly (vs_train_data_new).
 *
 * Selection rule (vs_drafter_turns): a conversation is kept when its first turn shows at most one
 * image; its second turn is kept when it adds no image. So diff (2 images) and story (5) samples are
 * dropped, and a "new_image" second turn is cut (the first turn stays): the drafter never sees two
 * images in one conversation, as in the papers' drafters. */
#ifndef VS_TRAIN_DRAFTER_H
#define VS_TRAIN_DRAFTER_H

#include "distill.h"
#include "gguf.h"
#include "train_data.h"
#include "train_model.h"
#include "vision.h"

/* The drafter LM's shape (the vision side comes from the target's mmproj). */
typedef struct vs_drafter_lm_shape {
    int width, n_layers, n_heads, n_kv_heads, ffn, max_seq;
} vs_drafter_lm_shape;
/* The default: width 192, 4 layers, 6 query / 2 KV heads (head size 32), SwiGLU 512, context 1024. */
void vs_drafter_lm_shape_default(vs_drafter_lm_shape *s);

/* A training config: the target mmproj's tower (size, patch, width, ffn, heads, blocks, epsilon,
 * mean/std; it must have a tower with quick-GELU, as the trainer's ViT) + the LM shape + vocab. */
vs_status vs_drafter_config(const vs_mmproj *target_mm, int vocab, const vs_drafter_lm_shape *lm,
                            vs_train_vlm_config *out, vs_error *err);
/* Copies the target's tower weights (dequantised to F32: an F16 file round-trips exactly) into m's
 * vision tensors. VS_ERR_INVALID when the shapes differ (the message names the mismatch). */
vs_status vs_train_vlm_set_vision(vs_train_vlm *m, const vs_mmproj *target_mm, vs_error *err);
/* The same from an mmproj file (opened and closed here; errors name the file). */
vs_status vs_train_vlm_set_vision_file(vs_train_vlm *m, const char *path, vs_error *err);

/* The drafter must speak the target's tokenizer: the target LM file's tokenizer.ggml.tokens must equal
 * the tokenizer file's, token by token. VS_ERR_INVALID naming both files and the first difference. */
vs_status vs_drafter_check_tokenizer(const vs_gguf *target_lm, const vs_gguf *tokenizer, vs_error *err);

/* Leading turns of s the instruction phases train on (the selection rule above); 0: drop s. */
int vs_drafter_turns(const vs_world_sample *s);
/* Images those turns show. */
int vs_drafter_turn_images(const vs_world_sample *s, int n_turns);

/* ---------------------------------------------------------------------------------------------- */
/* Sequence sets */

typedef struct vs_train_seqs {
    int64_t n, cap;
    vs_train_example *ex;  /* (n) */
    vs_train_item *items;  /* (n) items[i].ex = &ex[i] after vs_train_seqs_items */
    vs_world_sample **own; /* (n) sample copies this set owns (NULL where items borrow) */
    /* what was left out, per suite */
    int64_t dropped[VS_WORLD_N_SUITES];   /* conversations the selection rule drops */
    int64_t cut_turns[VS_WORLD_N_SUITES]; /* second turns cut (new image) */
    int64_t skipped_answers;              /* distilled answers without end-of-generation */
    int64_t failed;                       /* distilled conversations that do not lay out (counted) */
} vs_train_seqs;

void vs_train_seqs_free(vs_train_seqs *q);
/* The items (valid until the set changes or is freed). */
const vs_train_item *vs_train_seqs_items(vs_train_seqs *q);

/* Phase (a): documents from train (every turn's reference answer), captions (every caption record's
 * answer; NULL: none) and the text suite's whole conversations (vicuna form, no images). */
vs_status vs_train_seqs_add_text(vs_train_seqs *q, const vs_world_dataset *train,
                                 const vs_world_dataset *captions, const vs_tokenizer *tok, vs_error *err);
/* Phase (c): the conversations of train the selection rule keeps (image rows: image_rows each). */
vs_status vs_train_seqs_add_instruct(vs_train_seqs *q, const vs_world_dataset *train, const vs_tokenizer *tok,
                                     int image_rows, vs_error *err);
/* SDViT: every record of a distill file, the conversation laid out with the target's answers.
 * Records must name samples of train (by id) and the sample's kept turns; answers that did not end by
 * themselves are skipped and counted. */
vs_status vs_train_seqs_add_distill(vs_train_seqs *q, const vs_world_dataset *train, const vs_distill_file *f,
                                    const vs_tokenizer *tok, int image_rows, vs_error *err);

#endif
