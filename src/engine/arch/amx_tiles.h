/* amx_tiles: the AMX tile plumbing shared by the arch/ files that use tiles (kernels_quant_avx512.c,
 * kernels_amxbf16_avx512.c, train_gemm_amx_avx512.c). Owns: the tile configuration record and the
 * tile instructions, written as inline asm (no -mamx flags needed; binutils knows them). Tile numbers
 * are literals. The CPU check and the OS permission are in kernels.c / vs_amx_request. */
#ifndef VS_AMX_TILES_H
#define VS_AMX_TILES_H

#include <stdint.h>
#include <string.h>

typedef struct vs_amx_cfg {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} vs_amx_cfg;

/* An empty palette-1 configuration: fill rows[] / colsb[] of the tiles used, then vs_amx_load_cfg. */
static inline vs_amx_cfg vs_amx_cfg_new(void) {
    vs_amx_cfg cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.palette = 1;
    return cfg;
}
static inline void vs_amx_load_cfg(const vs_amx_cfg *cfg) { __asm__ volatile("ldtilecfg %0" ::"m"(*cfg)); }
/* All eight tiles 16 rows x 64 bytes. */
static inline void vs_amx_config_full(void) {
    vs_amx_cfg cfg = vs_amx_cfg_new();
    for (int i = 0; i < 8; i++) cfg.rows[i] = 16, cfg.colsb[i] = 64;
    vs_amx_load_cfg(&cfg);
}

#define TILE_LOAD(t, base, stride) \
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(base), "r"((int64_t)(stride)) : "memory")
#define TILE_STORE(t, base, stride) \
    __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(base), "r"((int64_t)(stride)) : "memory")
#define TILE_ZERO(t) __asm__ volatile("tilezero %%tmm" #t ::: "memory")
#define TILE_RELEASE() __asm__ volatile("tilerelease" ::: "memory")
/* C += A.B for bf16 pairs (AT&T operand order: B, A, C) */
#define TDP_BF16(C, A, B) __asm__ volatile("tdpbf16ps %%tmm" #B ", %%tmm" #A ", %%tmm" #C ::: "memory")

#endif
