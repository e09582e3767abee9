/* sysinfo: what a benchmark report must say about the machine and the code it ran.
 * Owns: the vs_sysinfo record (CPU model, logical CPUs, physical cores, memory, relevant ISA flags,
 * the kernels' active ISA, OS, compiler, git commit and branch, measured memory read bandwidth), its
 * collection from /proc and uname (Linux; other systems leave fields empty), reading the git commit
 * from .git without running git, and its JSON form. Nothing here fails hard: unknown fields stay
 * empty / 0. */
#ifndef VS_SYSINFO_H
#define VS_SYSINFO_H

#include "common.h"
#include "json.h"
#include "threadpool.h"

typedef struct vs_sysinfo {
    char cpu_model[128]; /* "model name" of /proc/cpuinfo */
    int n_cpus;          /* logical CPUs online */
    int n_cores;         /* physical cores: distinct (physical id, core id) pairs; 0 = unknown */
    int n_sockets;       /* distinct physical ids; 0 = unknown */
    int64_t mem_total;   /* bytes (MemTotal of /proc/meminfo); 0 = unknown */
    char cpu_flags[160]; /* the flags that matter to the kernels: avx2 fma f16c avx512f ... amx_int8 */
    char isa[16];        /* the ISA the kernels use now (vs_isa_active) */
    char os[128];        /* "sysname release machine" */
    char compiler[96];
    char git_commit[41]; /* 40 hex digits, "" when unknown */
    char git_ref[128];   /* "refs/heads/main", "" when detached or unknown */
    double mem_bw_gbs;   /* measured read bandwidth, GB/s (1e9 B/s); 0 = not measured */
    int mem_bw_threads;  /* threads that measured it */
} vs_sysinfo;

/* Fills s from /proc/cpuinfo, /proc/meminfo, sysconf, uname and the git repository containing
 * repo_dir (NULL = the current directory). Does not measure bandwidth. */
void vs_sysinfo_collect(vs_sysinfo *s, const char *repo_dir);
/* The parsing behind collect, for tests: cpuinfo / meminfo file texts (either may be NULL). */
void vs_sysinfo_parse_proc(vs_sysinfo *s, const char *cpuinfo, const char *meminfo);
/* Measures the read bandwidth with every thread of tp over a `bytes` buffer (vs_measure_read_bandwidth)
 * and stores it in s; returns it (0 when the buffer cannot be allocated). */
double vs_sysinfo_measure_bandwidth(vs_sysinfo *s, vs_threadpool *tp, size_t bytes);

/* The commit HEAD points to, read from the repository containing dir (searched upwards; a ".git" file
 * "gitdir: PATH" and worktrees' commondir are followed; loose refs, then packed-refs). ref receives the
 * symbolic ref ("" when HEAD is detached). VS_ERR_IO when no repository is found, VS_ERR_FORMAT when
 * HEAD or the ref is malformed. */
vs_status vs_git_head(const char *dir, char commit[41], char *ref, size_t ref_cap, vs_error *err);

/* The record as one JSON object value at the writer's current position. */
void vs_sysinfo_json(const vs_sysinfo *s, vs_json_writer *w);
/* One-line human summary ("CPU, N cores / M threads, X GiB, ISA, commit abcdef12") into buf. */
void vs_sysinfo_summary(const vs_sysinfo *s, char *buf, size_t cap);

#endif
