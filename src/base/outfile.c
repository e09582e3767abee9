/* outfile: safe replacement of output files (outfile.h). */
#include "outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void release(vs_outfile *o) {
    vs_free(o->path);
    free(o->dest); /* from realpath() or strdup() below: malloc'd, not vs_malloc'd */
    vs_free(o->tmp);
    memset(o, 0, sizeof(*o));
}

/* What may be done with an existing destination: replaced by rename, written in place, or refused. */
static vs_status classify(const char *path, const struct stat *st, bool *in_place, vs_error *err) {
    *in_place = false;
    if (S_ISREG(st->st_mode)) return VS_OK;
    if (S_ISCHR(st->st_mode) || S_ISFIFO(st->st_mode)) {
        *in_place = true;
        return VS_OK;
    }
    if (S_ISDIR(st->st_mode)) return vs_error_set(err, VS_ERR_IO, "%s: is a directory", path);
    return vs_error_set(err, VS_ERR_IO, "%s: not a regular file, a character device or a FIFO; refusing to replace it",
                        path);
}

/* fsync the folder that holds PATH so the rename itself is durable; best effort (some file systems
 * refuse fsync on a directory). */
static void sync_parent(const char *path) {
    char *copy = vs_strdup(path);
    if (!copy) return;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    vs_free(copy);
}

vs_status vs_outfile_open(vs_outfile *o, const char *path, vs_error *err) {
    memset(o, 0, sizeof(*o));
    if (!path || !*path) return vs_error_set(err, VS_ERR_INVALID, "output path is empty");
    if (!(o->path = vs_strdup(path))) return vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", path);
    if (!strcmp(path, "-")) {
        o->f = stdout;
        o->is_stdout = true;
        return VS_OK;
    }
    struct stat st;
    bool exists = false, in_place = false;
    vs_status s = VS_OK;
    if (lstat(path, &st) == 0) {
        exists = true;
        if (S_ISLNK(st.st_mode)) {
            /* replace what the link points to, keep the link */
            if (stat(path, &st) != 0) {
                s = vs_error_set(err, VS_ERR_IO, "%s: symbolic link to a missing file: %s", path, strerror(errno));
                goto fail;
            }
            if (!(o->dest = realpath(path, NULL))) {
                s = vs_error_set(err, VS_ERR_IO, "%s: cannot resolve the link: %s", path, strerror(errno));
                goto fail;
            }
        }
        if ((s = classify(path, &st, &in_place, err)) != VS_OK) goto fail;
    } else if (errno != ENOENT) {
        s = vs_error_set(err, VS_ERR_IO, "%s: cannot inspect: %s", path, strerror(errno));
        goto fail;
    }
    if (in_place) {
        if (!(o->f = fopen(path, "wb"))) {
            s = vs_error_set(err, VS_ERR_IO, "%s: cannot open for writing: %s", path, strerror(errno));
            goto fail;
        }
        free(o->dest);
        o->dest = NULL;
        return VS_OK;
    }
    if (!o->dest && !(o->dest = strdup(path))) {
        s = vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    size_t cap = strlen(o->dest) + 48;
    if (!(o->tmp = vs_malloc(cap))) {
        s = vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    mode_t mode = exists ? (st.st_mode & 07777) : 0666;
    int fd = -1;
    /* O_EXCL with a per-process counter: concurrent writers of one destination never share a temporary */
    for (unsigned n = 0; fd < 0 && n < 1000; n++) {
        snprintf(o->tmp, cap, "%s.tmp%ld-%u", o->dest, (long)getpid(), n);
        fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
        if (fd < 0 && errno != EEXIST) {
            s = vs_error_set(err, VS_ERR_IO, "%s: cannot create %s: %s", path, o->tmp, strerror(errno));
            goto fail;
        }
    }
    if (fd < 0) {
        s = vs_error_set(err, VS_ERR_IO, "%s: no free temporary name beside it", path);
        goto fail;
    }
    if (exists) (void)fchmod(fd, mode); /* open's mode went through the umask; keep the old file's bits */
    if (!(o->f = fdopen(fd, "wb"))) {
        s = vs_error_set(err, VS_ERR_IO, "%s: cannot open %s: %s", path, o->tmp, strerror(errno));
        close(fd);
        unlink(o->tmp);
        goto fail;
    }
    return VS_OK;
fail:
    release(o);
    return s;
}

vs_status vs_outfile_commit(vs_outfile *o, vs_error *err) {
    if (!o->f) {
        release(o);
        return vs_error_set(err, VS_ERR_INVALID, "output file is not open");
    }
    const char *shown = o->is_stdout ? "standard output" : o->path;
    errno = 0;
    bool ok = fflush(o->f) == 0 && !ferror(o->f);
    int e = errno;
    if (ok && o->tmp && fsync(fileno(o->f)) != 0) {
        ok = false;
        e = errno;
    }
    if (!o->is_stdout && fclose(o->f) != 0 && ok) {
        ok = false;
        e = errno;
    }
    o->f = NULL;
    vs_status s = VS_OK;
    if (!ok) {
        s = vs_error_set(err, VS_ERR_IO, "%s: write failed: %s", shown, e ? strerror(e) : "I/O error");
    } else if (o->tmp) {
        /* the destination may have changed since open: still never rename over a non-regular file */
        struct stat st;
        bool in_place = false;
        if (lstat(o->dest, &st) == 0 && (classify(o->path, &st, &in_place, err) != VS_OK || in_place)) {
            if (in_place) vs_error_set(err, VS_ERR_IO, "%s: became a device or FIFO while being written", o->path);
            s = VS_ERR_IO;
        } else if (rename(o->tmp, o->dest) != 0) {
            s = vs_error_set(err, VS_ERR_IO, "%s: cannot rename %s over it: %s", o->path, o->tmp, strerror(errno));
        } else {
            sync_parent(o->dest);
            vs_free(o->tmp);
            o->tmp = NULL;
        }
    }
    if (o->tmp) unlink(o->tmp);
    release(o);
    return s;
}

void vs_outfile_abort(vs_outfile *o) {
    if (o->f && !o->is_stdout) fclose(o->f);
    if (o->f && o->is_stdout) fflush(o->f);
    if (o->tmp) unlink(o->tmp);
    release(o);
}

vs_status vs_write_file(const char *path, const void *data, size_t size, vs_error *err) {
    vs_outfile o;
    vs_status s = vs_outfile_open(&o, path, err);
    if (s != VS_OK) return s;
    if (size > 0 && fwrite(data, 1, size, o.f) != size) {
        int e = errno;
        vs_outfile_abort(&o);
        return vs_error_set(err, VS_ERR_IO, "%s: write failed: %s", path, e ? strerror(e) : "I/O error");
    }
    return vs_outfile_commit(&o, err);
}

vs_status vs_stdout_check(vs_error *err) {
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        int e = errno;
        return vs_error_set(err, VS_ERR_IO, "standard output: write failed: %s", e ? strerror(e) : "I/O error");
    }
    return VS_OK;
}
