/* heap: a binary heap (priority queue) written once and instantiated per element type, so the
 * comparison and the element moves compile to direct code (a generic void* heap measured ~20%
 * slower in the tokenizers' merge loops). Used by the SentencePiece and BPE merge loops and the BPE
 * trainer.
 *
 *   VS_HEAP_DEFINE(name, T, before)   defines, for element type T and a function
 *                                     `bool before(const T *a, const T *b)` (a comes out first):
 *     typedef struct name { T *v; int64_t n, cap; } name;    (zero-initialise to start empty)
 *     static bool name##_push(name *h, T x);                  false (heap unchanged) when out of memory
 *     static T    name##_pop(name *h);                        h->n must be > 0
 *     static void name##_free(name *h);                       releases the array; the heap is empty
 * Owns: the one growing array of elements (vs_realloc'ed). */
#ifndef VS_HEAP_H
#define VS_HEAP_H

#include "common.h"

#define VS_HEAP_DEFINE(name, T, before)                                                            \
    typedef struct name {                                                                          \
        T *v;                                                                                      \
        int64_t n, cap;                                                                            \
    } name;                                                                                        \
    static inline bool name##_push(name *h, T x) {                                                 \
        if (h->n == h->cap) {                                                                      \
            int64_t cap = h->cap ? 2 * h->cap : 64;                                                \
            T *v = vs_realloc(h->v, (size_t)cap * sizeof(T));                                      \
            if (!v) return false;                                                                  \
            h->v = v;                                                                              \
            h->cap = cap;                                                                          \
        }                                                                                          \
        int64_t i = h->n++; /* sift up: parents move down until x's place is found */             \
        while (i > 0) {                                                                            \
            int64_t p = (i - 1) / 2;                                                               \
            if (!before(&x, &h->v[p])) break;                                                      \
            h->v[i] = h->v[p];                                                                     \
            i = p;                                                                                 \
        }                                                                                          \
        h->v[i] = x;                                                                               \
        return true;                                                                               \
    }                                                                                              \
    static inline T name##_pop(name *h) {                                                          \
        T top = h->v[0], x = h->v[--h->n];                                                         \
        int64_t i = 0; /* sift down: the earlier child moves up until x's place is found */       \
        for (;;) {                                                                                 \
            int64_t c = 2 * i + 1;                                                                 \
            if (c >= h->n) break;                                                                  \
            if (c + 1 < h->n && before(&h->v[c + 1], &h->v[c])) c++;                               \
            if (!before(&h->v[c], &x)) break;                                                      \
            h->v[i] = h->v[c];                                                                     \
            i = c;                                                                                 \
        }                                                                                          \
        if (h->n > 0) h->v[i] = x;                                                                 \
        return top;                                                                                \
    }                                                                                              \
    static inline void name##_free(name *h) {                                                      \
        vs_free(h->v);                                                                             \
        h->v = NULL;                                                                               \
        h->n = h->cap = 0;                                                                         \
    }

#endif
