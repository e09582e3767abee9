/* kernels: the matrix and vector operations inference is made of.
 * Owns: W (any vs_type, n_out x n_in, row-major rows of n_in values) times n activation rows, with a
 * scalar reference twin and AVX2 / AVX-512 fast paths chosen at run time, plus the small fused
 * vector ops (RMSNorm, softmax, SiLU...). Fast paths must match the reference within the tolerance
 * stated in tests/test_kernels.c. Quantised weights (Q8_0/Q4_0; the K-quants Q4_K/Q5_K/Q6_K) are
 * multiplied against activations quantised to 8-bit blocks (32 values; 256 with block sums for the
 * K-quants), as llama.cpp does. */
#ifndef VS_KERNELS_H
#define VS_KERNELS_H

#include "quant.h"
#include "threadpool.h"

typedef enum vs_isa {
    VS_ISA_SCALAR = 0,
    VS_ISA_AVX2 = 1,
    VS_ISA_AVX512 = 2, /* AVX-512 F/BW/VL + VNNI */
    VS_ISA_AMX = 3,    /* AVX-512 + AMX-INT8 tiles (Q8_0/Q4_0 times several rows); compare with >= */
} vs_isa;

vs_isa vs_isa_detect(void);          /* best ISA this CPU supports (cached) */
const char *vs_isa_name(vs_isa isa);
/* Caps the ISA used by vs_matmul (tests use this to compare paths; the env var VLMSPEC_ISA=scalar|
 * avx2|avx512|amx sets the cap at start-up). Returns the ISA now in force. */
vs_isa vs_isa_set_max(vs_isa isa);
vs_isa vs_isa_active(void); /* the ISA vs_matmul and the vector ops use now: min(cap, detected) */
/* Whether the AVX2 level may use AVX-VNNI where the CPU has it (the lane kernels of Q8_0 / Q4_0 and of the
 * Q4_K / Q5_K x16 copy; default yes, VLMSPEC_AVXVNNI=0 at start-up says no). Tests flip it to check both AVX2 kernels; like the
 * ISA cap it must not change while a model made under the other setting is in use. Returns the setting
 * now in force (false on CPUs without AVX-VNNI). */
bool vs_avxvnni_allow(bool allow);

/* y[r * n_out + o] = sum_i W[o, i] * x[r * n_in + i] for r < n_rows, o < n_out.
 * w points at n_out rows of vs_type_row_bytes(wtype, n_in) bytes each. x and y must not alias.
 * n_in must be a multiple of the type's block size (32 for Q8_0/Q4_0, 256 for the K-quants). Threads
 * split output rows.
 *
 * BATCH INVARIANCE (what speculative decoding's greedy identity rests on): while the active ISA
 * (vs_isa_active) and the BLAS setting stay the same, row r of y is BITWISE equal to the result of
 * vs_matmul on row r of x alone, whatever n_rows, the row's position in the batch, the other rows and
 * the pool's thread count, for
 *   - Q4_K / Q5_K / Q6_K: every n_rows, and the scalar and AVX2 paths agree BITWISE too (exact integer
 *     lanes per super-block, then llama.cpp's AVX2 float steps, vs_kq_acc_block in arch/kernels_arch.h;
 *     on AVX-512 / AMX CPUs vs_matmul runs the AVX2 kernel for these types, while vs_matmul_x16 with the
 *     load-time copy, which the LM uses, runs the AVX-512 kernel with float steps of its own, as does
 *     the AVX-VNNI kernel for Q4_K / Q5_K on AVX2 CPUs that have it);
 *   - Q8_0 / Q4_0: every n_rows (one activation quantiser; per output and row, the exact integer block
 *     dots scaled and added in block order by the same float operations on every path of an ISA; the
 *     lane kernels of AVX-512 VNNI and of AVX2 + AVX-VNNI give the same bits);
 *   - F32 / F16 / BF16: n_rows < 128 always, and every n_rows when BLAS is off (vs_matmul_set_blas,
 *     VLMSPEC_NO_BLAS=1). With BLAS, batches of 128+ rows (prompt prefill, the vision tower) use
 *     sgemm, whose summation order is its own: such rows may differ from single-row results in the
 *     last bits. Verification batches (gamma + 1 <= 65 rows) and decoding never reach it. F16 / BF16
 *     on AVX-512 CPUs never use BLAS (the tiles are faster): every n_rows.
 *     Exception to the exception: F16 / BF16 matrices on the AMX-BF16 path (vs_matmul_path "amx-bf16")
 *     never use BLAS and are invariant for every n_rows.
 * Different ISAs (scalar / AVX2 / AVX-512 / AMX) give results that differ in f32 rounding only.
 * (Except F16 / BF16 on the AMX-BF16 path: bf16 activation halves, within 2^-16 * sum|w x| of exact.) */
void vs_matmul(vs_threadpool *tp, vs_type wtype, const void *w, int64_t n_out, int64_t n_in,
               const float *x, int64_t n_rows, float *y);
/* vs_matmul with flags for F16 / BF16 weights, for callers that know where their weights live (the same
 * flags for every call on a matrix keep batch invariance; vs_matmul passes VS_MM_DEFAULT):
 *   VS_MM_DEFAULT      AMX-BF16 tiles for F16 matrices of 256 KiB to 4 MiB with n_in >= 256, BF16 matrices
 *                      of at least 128 KiB;
 *   VS_MM_AMX_BF16     the tiles whatever the size: best when the weights stream from L3 (a model between
 *                      the L2 and the L3 size) or when most calls have several rows;
 *   VS_MM_NO_AMX_BF16  never: the FMA kernel (and BLAS from 128 rows); best for one row of weights in
 *                      L1/L2 (small drafters) or streamed from DRAM.
 * Without AMX-BF16 (or with VLMSPEC_AMX_BF16=all|off set) the flags change nothing. */
enum { VS_MM_DEFAULT = 0, VS_MM_AMX_BF16 = 1, VS_MM_NO_AMX_BF16 = 2 };
void vs_matmul_ex(vs_threadpool *tp, vs_type wtype, const void *w, int64_t n_out, int64_t n_in,
                  const float *x, int64_t n_rows, float *y, unsigned flags);
/* Several matrices of one type over the same activations (a layer's q, k and v; gate and up):
 * parts[i].y = x W_i^T, W_i = parts[i].w of parts[i].n_out rows of n_in values. Results are BITWISE those of
 * vs_matmul_ex on each part with the same flags; when every part takes the AMX-BF16 tiles the activations are
 * converted into the tiles' layout once and all parts run in one pool dispatch (otherwise: separate calls). */
typedef struct vs_mm_part {
    const void *w;
    int64_t n_out;
    float *y; /* (n_rows, n_out) */
} vs_mm_part;
#define VS_MM_MAX_PARTS 4
void vs_matmul_multi(vs_threadpool *tp, vs_type wtype, int64_t n_in, const vs_mm_part *parts, int n_parts,
                     const float *x, int64_t n_rows, unsigned flags);
/* Quantised weights repacked at load time (the "x16" layout) for the kernels whose lanes are the 16
 * outputs of a tile (AVX-512 VNNI and the AMX Q4_0 kernels; on AVX2 + AVX-VNNI their 8-output halves,
 * docs/kernels.md). On GGUF rows those kernels
 * transpose 16 rows' bytes and gather 16 scales per block; repacked, they load each tile as one linear
 * stream. Outputs past n_out are zero blocks.
 * Q8_0 / Q4_0: tile t (outputs 16t..16t+15) of a matrix with nb = n_in / 32 blocks holds nb * B bytes at
 * t * nb * B, B = 544 (Q8_0) or 288 (Q4_0):
 *   quants: nb x (B - 32) bytes; block b at (B - 32) b: parts of 64 bytes, lane o's 4 bytes of part i =
 *           bytes 4i..4i+3 of output o's block b quants (Q8_0: 8 parts, the int8 values 4i..4i+3 as
 *           stored; Q4_0: 4 parts, values 4i..4i+3 in the low nibbles, 16+4i.. in the high);
 *   scales: nb x 32 bytes at nb * (B - 32): block b's 16 fp16 scales at 32 b, output o at [o].
 * K-quants (nb = n_in / 256 super-blocks): tile t's super-block b is B bytes at (t * nb + b) * B; "lane o's
 * dword k" below is 4 bytes at 64 k + 4 o of a 512-byte part.
 *   Q4_K (B = 2368): qs parts j = 0..3 at 512 j (lane o's dword k = qs[32 j + 4k ..]: chunk 2 j in the low
 *     nibbles, 2 j + 1 in the high), then at 2048: scales [8][16] and mins [8][16] as bytes (sub-block j,
 *     output o), fp16 d [16], fp16 dmin [16].
 *   Q5_K (B = 2880): Q4_K's qs parts, qh at 2048 (lane o's dword k = qh[4k ..]), then Q4_K's scales,
 *     mins, d and dmin at 2560.
 *   Q6_K (B = 3392): ql parts (h, s) at 1024 h + 512 s (lane o's dword k = ql[64 h + 32 s + 4k ..]), qh
 *     parts h at 2048 + 512 h (qh[32 h + 4k ..]), the int8 scale pairs [8][16][2] at 3072 (pair i, output
 *     o: scales 2i, 2i + 1), fp16 d [16] at 3328, 32 bytes of zeros (whole cache lines).
 * vs_x16_wanted: whether the kernels of the ISA in force (vs_isa_active) read the layout for type t (Q4_0
 * and K-quants: AVX-512 VNNI or AMX; Q8_0, Q4_0, Q4_K and Q5_K also AVX2 with AVX-VNNI, vs_avxvnni_allow;
 * Q8_0: AVX-512 VNNI on a CPU without AMX, whose Q8_0 tiles read the GGUF rows) and VLMSPEC_REPACK is not 0. */
bool vs_x16_wanted(vs_type t);
size_t vs_x16_bytes(vs_type t, int64_t n_out, int64_t n_in);
void vs_x16_pack(vs_type t, const void *w, int64_t n_out, int64_t n_in, void *dst);
/* vs_matmul of quantised weights w with their repacked copy `packed` (NULL: plain vs_matmul). Kernels
 * that read the layout take `packed`; the others read w. Q8_0 / Q4_0: results BITWISE equal to vs_matmul
 * on w (same quantised activations, same integer dots, same float operations). K-quants: the AVX-512 and
 * AVX-VNNI kernels exist only for the copy and keep one integer sum per super-block (kernels_arch.h,
 * vs_kq_x16_block) where vs_matmul keeps llama.cpp's eight lanes, so it is bitwise equal to
 * vs_matmul_x16_ref, and within float rounding of vs_matmul. Batch invariance as vs_matmul. */
void vs_matmul_x16(vs_threadpool *tp, vs_type t, const void *w, const void *packed, int64_t n_out, int64_t n_in,
                   const float *x, int64_t n_rows, float *y);
/* The scalar twin of what vs_matmul_x16 computes where the ISA in force reads the copy (vs_x16_wanted):
 * vs_matmul_ref with the K-quants' float steps of the x16 kernel. */
void vs_matmul_x16_ref(vs_type wtype, const void *w, int64_t n_out, int64_t n_in, const float *x, int64_t n_rows,
                       float *y);
/* The scalar reference twin (single thread, double accumulation not required). */
void vs_matmul_ref(vs_type wtype, const void *w, int64_t n_out, int64_t n_in, const float *x,
                   int64_t n_rows, float *y);

/* F32 weights with 128+ rows (F16/BF16 too on AVX2 CPUs) use OpenBLAS sgemm when the build has it
 * (VS_HAVE_OPENBLAS) unless turned off here or by VLMSPEC_NO_BLAS=1. Returns whether BLAS is now in use
 * (false without it). */
bool vs_matmul_set_blas(bool on);
/* Writes the BLAS library's description ("OpenBLAS 0.3.21 DYNAMIC_ARCH ..., core SkylakeX") into buf;
 * false (buf empty) when built without one. OpenBLAS picks its kernels by CPU unless OPENBLAS_CORETYPE
 * names a core: Haswell kernels on an AVX-512 CPU made F32 sgemm about half as fast (Zen 5: 236 against
 * 440-456 GFLOP/s, 2 threads) and training steps 1.5x slower. */
bool vs_blas_info(char *buf, size_t cap);

/* The kernel vs_matmul_ex runs now for this weight matrix, row count and flags (for benchmarks and logs):
 * "scalar", "avx2", "avx-vnni" (Q8_0/Q4_0 on AVX2 CPUs with AVX-VNNI), "avx512-fma", "avx512-vnni",
 * "amx-int8", "amx-vnni" (Q8_0/Q4_0 few rows on the AMX layout), "amx-bf16" (F16/BF16 on AMX-BF16 tiles, every row count: exact fp16 split, bf16 activation
 * halves, results within 2^-16 * sum|w x| of exact; by default for matrices of 256 KiB to 4 MiB, n_in >= 256;
 * VLMSPEC_AMX_BF16=all|off overrides) or "blas". */
const char *vs_matmul_path(vs_type wtype, int64_t n_out, int64_t n_in, int64_t n_rows, unsigned flags);
/* The same for vs_matmul_x16 with a copy: the K-quants' AVX-512 kernel ("avx512-vnni") or AVX-VNNI kernel
 * ("avx-vnni", AVX2 CPUs) where the ISA in force reads the copy (vs_x16_wanted), else vs_matmul_path. */
const char *vs_matmul_x16_path(vs_type wtype, int64_t n_out, int64_t n_in, int64_t n_rows);

/* Vectorised vs_dequantize_row (same results): n values of a row of type t to f32. */
void vs_row_to_f32(vs_type t, const void *src, float *dst, int64_t n);

/* Memory read bandwidth in GB/s (1e9 bytes/s): every thread of the pool streams its share of a
 * `bytes`-sized buffer (make it several times the last-level cache to measure DRAM); the best of a few
 * passes is returned (the achievable figure, for rooflines). 0 if the buffer cannot be allocated. */
double vs_measure_read_bandwidth(vs_threadpool *tp, size_t bytes);

/* Vector ops (single row; callers parallelise across rows if needed). Any n >= 0.
 * rmsnorm: out = (x * scale) * weight, scale = 1 / sqrtf(mean + eps), mean = the f32 squares summed in
 * double, rounded to f32 (ggml's steps; weight may be NULL: all ones); out may equal x.
 * softmax: -INFINITY entries give exactly 0. */
void vs_rmsnorm(float *out, const float *x, const float *weight, int64_t n, float eps);
void vs_softmax_inplace(float *x, int64_t n);
float vs_dot_f32(const float *a, const float *b, int64_t n);
void vs_axpy_f32(float *y, float a, const float *x, int64_t n); /* y += a * x */
/* argmax: the lowest index of the largest non-NaN entry (-1 when every entry is NaN or n <= 0). */
int64_t vs_argmax_f32(const float *x, int64_t n);
/* Their scalar twins (tests compare the dispatched versions against these). */
void vs_rmsnorm_ref(float *out, const float *x, const float *weight, int64_t n, float eps);
void vs_softmax_inplace_ref(float *x, int64_t n);
float vs_dot_f32_ref(const float *a, const float *b, int64_t n);
void vs_axpy_f32_ref(float *y, float a, const float *x, int64_t n);
int64_t vs_argmax_f32_ref(const float *x, int64_t n);

#endif
