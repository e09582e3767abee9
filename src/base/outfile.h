/* outfile: every file that vlmspec writes goes through here.
 * Owns: safe replacement of output files and checked writes. A destination is written as a
 * temporary file in the same folder (PATH.tmp<pid>-<n>), flushed, fsync'ed and then renamed over
 * PATH, so a reader never sees a half-written file and a failed write leaves nothing behind (the
 * temporary is removed on every error). What PATH is decides how it is written:
 *   - absent or a regular file: temporary + rename (an existing file's permission bits are kept);
 *   - a symbolic link: the same, on the file it points to (the link stays a link);
 *   - a character device or a FIFO (/dev/null, /dev/stdout, a pipe): written in place, never replaced;
 *   - "-": standard output, written in place;
 *   - a directory or anything else (block device, socket): refused.
 * Every error names the path and carries strerror. Appending writers (logs, resumable files) do not
 * use this: they must see their earlier contents. */
#ifndef VS_OUTFILE_H
#define VS_OUTFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "common.h"

typedef struct vs_outfile {
    FILE *f;    /* write through this (fprintf, fwrite, ...) */
    char *path; /* the destination as given, for messages */
    char *dest; /* where the rename lands (a link's target); NULL when written in place */
    char *tmp;  /* the temporary; NULL when written in place */
    bool is_stdout;
} vs_outfile;

/* Opens PATH for writing as described above ("-" is standard output). On failure *o is zeroed. */
vs_status vs_outfile_open(vs_outfile *o, const char *path, vs_error *err);
/* Flushes, checks every earlier write (ferror), fsyncs and closes, then renames the temporary over
 * the destination. On any failure the temporary is removed and the destination is untouched.
 * Always releases *o. Standard output is flushed and checked but not closed. */
vs_status vs_outfile_commit(vs_outfile *o, vs_error *err);
/* Gives up: closes and removes the temporary (the destination is untouched); releases *o. Safe on a
 * zeroed or already released *o. */
void vs_outfile_abort(vs_outfile *o);

/* Writes SIZE bytes to PATH through vs_outfile (the whole file or nothing). */
vs_status vs_write_file(const char *path, const void *data, size_t size, vs_error *err);

/* Flushes standard output and reports a write error that happened on it at any time (a full disk,
 * a closed pipe, /dev/full). The CLI calls it before exiting so that lost output is never exit 0. */
vs_status vs_stdout_check(vs_error *err);

#endif
