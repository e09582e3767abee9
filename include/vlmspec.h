/* vlmspec: the public API, one include for applications.
 *
 * vlmspec runs LLaVA-style vision-language models (vision tower + projector + LLaMA-family decoder)
 * from llama.cpp's GGUF files on the CPU, and decodes them faster without changing their output by
 * speculative decoding. The modules below are the public surface; each header opens with what its
 * module owns and documents ownership of every pointer. Conventions for all of them:
 *   - functions report bad input through a vs_status and a vs_error (message naming the file or
 *     object); constructors return NULL and fill the vs_error; nothing in the library exits;
 *   - objects come in _new/_free (or _load/_free, _open/_close) pairs; NULL is accepted by every _free;
 *   - one object is used by one thread at a time; parallelism comes from the vs_threadpool passed in.
 *
 * A minimal speculative generation (see tools/cli_ensemble.c for the complete version):
 *   vs_lm *target = vs_lm_load("target.gguf", &err), *draft = vs_lm_load("draft.gguf", &err);
 *   vs_tokenizer *tok = vs_tokenizer_from_gguf(vs_lm_gguf(target), &err);
 *   vs_spec *eng = vs_spec_new(target, &(vs_spec_config){.tok = tok}, &err);
 *   vs_draft_lm_opts o = {.mode = VS_DRAFT_LM_TEXT};
 *   vs_spec_drafter *d = vs_draft_lm_new(draft, target, &o, &err);
 *   ... build a vs_spec_prompt from vs_tokenize (or vs_mm_prompt_build with images) ...
 *   vs_spec_generate(eng, d, &prompt, &params, on_tokens, ctx, &log, &err);
 */
#ifndef VLMSPEC_H
#define VLMSPEC_H

#define VLMSPEC_VERSION "0.1.0"

#include "common.h"     /* errors, allocation, RNG, progress */
#include "gguf.h"       /* GGUF reader and writer */
#include "quant.h"      /* tensor types */
#include "threadpool.h" /* worker threads */
#include "kernels.h"    /* matmul and vector kernels */
#include "tokenizer.h"  /* SentencePiece and byte-level BPE */
#include "chat.h"       /* chat templates */
#include "lm.h"         /* LLaMA decoder: batched rows, tree masks */
#include "kv.h"         /* multi-sequence KV cache */
#include "sample.h"     /* sampling and final distributions */
#include "image.h"      /* image decode and preprocessing */
#include "vision.h"     /* CLIP tower + LLaVA projector (mmproj) */
#include "mmprompt.h"   /* multimodal prompt rows */
#include "spec.h"       /* the speculative decoding engine and the drafter interface */
#include "draft_lm.h"   /* a separate small-LM drafter (M / T) */
#include "draft_ensemble.h" /* IbED / TABED in-batch ensemble drafting (M, T, C, P) */
#include "world.h"      /* the generated multimodal world */

#endif
