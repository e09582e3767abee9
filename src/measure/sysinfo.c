/* sysinfo: machine and code description for reports. See sysinfo.h. */
#include "sysinfo.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "kernels.h"

/* Copies at most cap - 1 bytes of s[0..n) and terminates. */
static void copy_n(char *dst, size_t cap, const char *s, size_t n) {
    if (cap == 0) return;
    if (n > cap - 1) n = cap - 1;
    memcpy(dst, s, n);
    dst[n] = 0;
}

/* The value after "key<spaces>:" on a line starting with key; NULL if the line is another key. */
static const char *line_value(const char *line, const char *key, size_t *vlen, const char *end) {
    size_t kl = strlen(key);
    if ((size_t)(end - line) < kl || strncmp(line, key, kl)) return NULL;
    const char *p = line + kl;
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    if (p == end || *p != ':') return NULL;
    p++;
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    const char *q = end;
    while (q > p && isspace((unsigned char)q[-1])) q--;
    *vlen = (size_t)(q - p);
    return p;
}

void vs_sysinfo_parse_proc(vs_sysinfo *s, const char *cpuinfo, const char *meminfo) {
    /* physical cores: distinct (physical id, core id) pairs, one pair per processor block */
    enum { MAX_PAIRS = 4096 };
    static const char *const wanted[] = {"avx2",     "fma",      "f16c",        "avx512f",
                                         "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
                                         "amx_tile", "amx_int8", "amx_bf16",    "avx_vnni"};
    if (cpuinfo) {
        long pairs[MAX_PAIRS][2];
        long sockets[256];
        int np = 0, ns = 0;
        long phys = -1, core = -1;
        bool flags_done = false;
        const char *line = cpuinfo;
        while (*line) {
            const char *end = strchr(line, '\n');
            if (!end) end = line + strlen(line);
            size_t vl = 0;
            const char *v;
            if (!s->cpu_model[0] && (v = line_value(line, "model name", &vl, end)))
                copy_n(s->cpu_model, sizeof(s->cpu_model), v, vl);
            else if ((v = line_value(line, "physical id", &vl, end)))
                phys = strtol(v, NULL, 10);
            else if ((v = line_value(line, "core id", &vl, end)))
                core = strtol(v, NULL, 10);
            else if (!flags_done && (v = line_value(line, "flags", &vl, end))) {
                flags_done = true;
                size_t used = 0;
                for (size_t i = 0; i < VS_ARRAY_LEN(wanted); i++) {
                    size_t wl = strlen(wanted[i]);
                    for (const char *f = v; f + wl <= v + vl; f++) {
                        if (strncmp(f, wanted[i], wl) || (f > v && f[-1] != ' ') ||
                            (f + wl < v + vl && f[wl] != ' '))
                            continue;
                        int n = snprintf(s->cpu_flags + used, sizeof(s->cpu_flags) - used, "%s%s",
                                         used ? " " : "", wanted[i]);
                        if (n > 0 && used + (size_t)n < sizeof(s->cpu_flags)) used += (size_t)n;
                        break;
                    }
                }
            }
            /* a blank line ends a processor block */
            if (end == line || *line == '\n' || !*end) {
                if (phys >= 0 && core >= 0) {
                    bool seen = false;
                    for (int i = 0; i < np && !seen; i++) seen = pairs[i][0] == phys && pairs[i][1] == core;
                    if (!seen && np < MAX_PAIRS) pairs[np][0] = phys, pairs[np][1] = core, np++;
                    seen = false;
                    for (int i = 0; i < ns && !seen; i++) seen = sockets[i] == phys;
                    if (!seen && ns < 256) sockets[ns++] = phys;
                }
                phys = core = -1;
            }
            line = *end ? end + 1 : end;
        }
        if (np > 0) s->n_cores = np, s->n_sockets = ns;
    }
    if (meminfo) {
        const char *p = strstr(meminfo, "MemTotal:");
        if (p) {
            long long kb = strtoll(p + 9, NULL, 10);
            if (kb > 0) s->mem_total = (int64_t)kb * 1024;
        }
    }
}

/* Whole text file, read in chunks: /proc files report a size of 0, so no size-first reading. NULL when
 * the file cannot be opened or is larger than 16 MiB. */
static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    char *buf = vs_malloc(cap);
    while (buf) {
        if (len + 1 >= cap) {
            char *nb = cap < ((size_t)16 << 20) ? vs_realloc(buf, cap * 2) : NULL;
            if (!nb) {
                vs_free(buf);
                buf = NULL;
                break;
            }
            buf = nb, cap *= 2;
        }
        size_t n = fread(buf + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0) break;
    }
    fclose(f);
    if (buf) buf[len] = 0;
    return buf;
}

/* ------------------------------------------------------------------------------------------------
 * git */

static bool is_hex40(const char *s) {
    for (int i = 0; i < 40; i++)
        if (!isxdigit((unsigned char)s[i])) return false;
    return true;
}

/* buf = a + b (b starts with '/' or is appended after one); false when it does not fit. */
static bool join(char *buf, size_t cap, const char *a, const char *sep, const char *b) {
    size_t la = strlen(a), ls = strlen(sep), lb = strlen(b);
    if (la + ls + lb >= cap) return false;
    memmove(buf, a, la); /* a may be buf itself */
    memcpy(buf + la, sep, ls);
    memcpy(buf + la + ls, b, lb + 1);
    return true;
}

/* The git directory of the repository containing dir: dir/.git (directory or "gitdir:" file), searched
 * upwards. *common: the directory holding refs (commondir of a worktree). Both vs_malloc'd. */
static bool find_git_dir(const char *dir, char **gitdir, char **common) {
    char path[4096];
    char cur[4096];
    if (!getcwd(cur, sizeof(cur))) return false;
    if (dir && dir[0] == '/') {
        if (!join(cur, sizeof(cur), dir, "", "")) return false;
    } else if (dir && strcmp(dir, ".")) {
        char base[4096];
        memcpy(base, cur, sizeof(base));
        if (!join(cur, sizeof(cur), base, "/", dir)) return false;
    }
    for (int depth = 0; depth < 64; depth++) {
        if (!join(path, sizeof(path), cur, "/", ".git/HEAD")) return false;
        if (access(path, R_OK) == 0) {
            join(path, sizeof(path), cur, "/", ".git");
            *gitdir = vs_strdup(path);
            break;
        }
        join(path, sizeof(path), cur, "/", ".git");
        char *t = read_text(path);
        if (t && !strncmp(t, "gitdir:", 7)) {
            char *v = t + 7;
            while (*v == ' ') v++;
            size_t l = strcspn(v, "\r\n");
            v[l] = 0;
            if (v[0] == '/') *gitdir = vs_strdup(v);
            else if (join(path, sizeof(path), cur, "/", v)) *gitdir = vs_strdup(path);
            vs_free(t);
            break;
        }
        vs_free(t);
        char *slash = strrchr(cur, '/');
        if (!slash || slash == cur) return false;
        *slash = 0;
    }
    if (!*gitdir) return false;
    if (!join(path, sizeof(path), *gitdir, "/", "commondir")) return false;
    char *c = read_text(path);
    if (c) {
        size_t l = strcspn(c, "\r\n");
        c[l] = 0;
        if (c[0] == '/') *common = vs_strdup(c);
        else if (join(path, sizeof(path), *gitdir, "/", c)) *common = vs_strdup(path);
        vs_free(c);
    } else {
        *common = vs_strdup(*gitdir);
    }
    return *common != NULL;
}

/* Resolves a ref name in gitdir / common: loose file first, then packed-refs. */
static bool resolve_ref(const char *gitdir, const char *common, const char *ref, char commit[41]) {
    char path[4096];
    const char *dirs[2] = {gitdir, common};
    for (int i = 0; i < 2; i++) {
        char *t = join(path, sizeof(path), dirs[i], "/", ref) ? read_text(path) : NULL;
        if (t) {
            bool ok = strlen(t) >= 40 && is_hex40(t);
            if (ok) copy_n(commit, 41, t, 40);
            vs_free(t);
            if (ok) return true;
        }
    }
    char *t = join(path, sizeof(path), common, "/", "packed-refs") ? read_text(path) : NULL;
    if (!t) return false;
    bool found = false;
    size_t rl = strlen(ref);
    for (char *line = t; *line && !found;) {
        char *end = strchr(line, '\n');
        size_t ll = end ? (size_t)(end - line) : strlen(line);
        if (ll >= 41 + rl && is_hex40(line) && line[40] == ' ' && !strncmp(line + 41, ref, rl) &&
            (ll == 41 + rl || line[41 + rl] == '\r')) {
            copy_n(commit, 41, line, 40);
            found = true;
        }
        line = end ? end + 1 : line + ll;
    }
    vs_free(t);
    return found;
}

vs_status vs_git_head(const char *dir, char commit[41], char *ref, size_t ref_cap, vs_error *err) {
    commit[0] = 0;
    if (ref && ref_cap) ref[0] = 0;
    char *gitdir = NULL, *common = NULL;
    if (!find_git_dir(dir, &gitdir, &common)) {
        vs_free(gitdir);
        vs_free(common);
        return vs_error_set(err, VS_ERR_IO, "no git repository contains %s", dir ? dir : ".");
    }
    char path[4096];
    char *head = join(path, sizeof(path), gitdir, "/", "HEAD") ? read_text(path) : NULL;
    vs_status st = VS_OK;
    if (!head)
        st = vs_error_set(err, VS_ERR_IO, "%s: cannot read", path);
    else if (!strncmp(head, "ref:", 4)) {
        char *r = head + 4;
        while (*r == ' ') r++;
        r[strcspn(r, "\r\n")] = 0;
        if (!r[0] || strstr(r, ".."))
            st = vs_error_set(err, VS_ERR_FORMAT, "%s: bad ref '%s'", path, r);
        else {
            if (ref && ref_cap) copy_n(ref, ref_cap, r, strlen(r));
            if (!resolve_ref(gitdir, common, r, commit))
                st =
                    vs_error_set(err, VS_ERR_FORMAT, "%s: ref %s does not resolve (no commit yet?)", path, r);
        }
    } else if (strlen(head) >= 40 && is_hex40(head)) {
        copy_n(commit, 41, head, 40);
    } else {
        st = vs_error_set(err, VS_ERR_FORMAT, "%s: neither a ref nor a commit", path);
    }
    vs_free(head);
    vs_free(gitdir);
    vs_free(common);
    return st;
}

/* ------------------------------------------------------------------------------------------------ */

void vs_sysinfo_collect(vs_sysinfo *s, const char *repo_dir) {
    memset(s, 0, sizeof(*s));
    char *ci = read_text("/proc/cpuinfo"), *mi = read_text("/proc/meminfo");
    vs_sysinfo_parse_proc(s, ci, mi);
    vs_free(ci);
    vs_free(mi);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    s->n_cpus = n > 0 ? (int)n : 0;
    if (!s->mem_total) {
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        if (pages > 0 && psz > 0) s->mem_total = (int64_t)pages * psz;
    }
    snprintf(s->isa, sizeof(s->isa), "%s", vs_isa_name(vs_isa_active()));
    struct utsname u;
    if (uname(&u) == 0) {
        /* truncation of an overlong release string is fine */
        size_t l = 0;
        const char *parts[3] = {u.sysname, u.release, u.machine};
        for (int i = 0; i < 3 && l + 1 < sizeof(s->os); i++) {
            size_t pl = strnlen(parts[i], sizeof(s->os) - l - 1 - (i > 0));
            if (i > 0) s->os[l++] = ' ';
            memcpy(s->os + l, parts[i], pl);
            l += pl;
        }
        s->os[l] = 0;
    }
#ifdef __VERSION__
#ifdef __clang__
    snprintf(s->compiler, sizeof(s->compiler), "clang %s", __clang_version__);
#else
    snprintf(s->compiler, sizeof(s->compiler), "gcc %s", __VERSION__);
#endif
#endif
    vs_git_head(repo_dir, s->git_commit, s->git_ref, sizeof(s->git_ref), NULL);
}

double vs_sysinfo_measure_bandwidth(vs_sysinfo *s, vs_threadpool *tp, size_t bytes) {
    s->mem_bw_gbs = vs_measure_read_bandwidth(tp, bytes);
    s->mem_bw_threads = vs_threadpool_size(tp);
    return s->mem_bw_gbs;
}

void vs_sysinfo_json(const vs_sysinfo *s, vs_json_writer *w) {
    vs_json_obj_begin(w);
    vs_json_kv_str(w, "cpu_model", s->cpu_model);
    vs_json_kv_int(w, "logical_cpus", s->n_cpus);
    vs_json_kv_int(w, "physical_cores", s->n_cores);
    vs_json_kv_int(w, "sockets", s->n_sockets);
    vs_json_kv_int(w, "memory_bytes", s->mem_total);
    vs_json_kv_str(w, "cpu_flags", s->cpu_flags);
    vs_json_kv_str(w, "kernel_isa", s->isa);
    vs_json_kv_str(w, "os", s->os);
    vs_json_kv_str(w, "compiler", s->compiler);
    vs_json_kv_str(w, "git_commit", s->git_commit);
    vs_json_kv_str(w, "git_ref", s->git_ref);
    vs_json_key(w, "memory_read_bandwidth_gbs");
    if (s->mem_bw_gbs > 0)
        vs_json_num(w, s->mem_bw_gbs);
    else
        vs_json_null(w);
    vs_json_kv_int(w, "bandwidth_threads", s->mem_bw_threads);
    vs_json_obj_end(w);
}

void vs_sysinfo_summary(const vs_sysinfo *s, char *buf, size_t cap) {
    char bw[48] = "";
    if (s->mem_bw_gbs > 0)
        snprintf(bw, sizeof(bw), ", %.1f GB/s read (%d threads)", s->mem_bw_gbs, s->mem_bw_threads);
    snprintf(buf, cap, "%s, %d cores / %d logical CPUs, %.1f GiB, kernels %s%s, commit %.12s",
             s->cpu_model[0] ? s->cpu_model : "unknown CPU", s->n_cores, s->n_cpus,
             (double)s->mem_total / (1024.0 * 1024.0 * 1024.0), s->isa[0] ? s->isa : "?", bw,
             s->git_commit[0] ? s->git_commit : "unknown");
}
