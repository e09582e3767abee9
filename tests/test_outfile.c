/* test_outfile: safe output files (outfile.h), vs_read_file on every kind of file, and the CLI's
 * handling of failed writes: a device node or FIFO is never replaced, a failed write leaves no file
 * behind and exits non-zero, output lost on standard output is a failure. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "gguf.h"
#include "outfile.h"
#include "png_write.h"
#include "testutil.h"

static char g_path[4096];
static const char *tpath(const char *name) {
    snprintf(g_path, sizeof(g_path), "%s/%s", vt_tmpdir(), name);
    return g_path;
}

static bool file_equals(const char *path, const char *want) {
    uint8_t *d = NULL;
    size_t n = 0;
    if (vs_read_file(path, &d, &n, NULL) != VS_OK) return false;
    bool eq = n == strlen(want) && !memcmp(d, want, n);
    vs_free(d);
    return eq;
}

/* Files in DIR whose name starts with PREFIX (temporaries left behind show up here). */
static int count_prefix(const char *dir, const char *prefix) {
    char cmd[4600];
    snprintf(cmd, sizeof(cmd), "ls -A '%s' | grep -c '^%s' > '%s/.count'", dir, prefix, dir);
    (void)!system(cmd);
    snprintf(cmd, sizeof(cmd), "%s/.count", dir);
    FILE *f = fopen(cmd, "r");
    int n = -1;
    if (f) {
        if (fscanf(f, "%d", &n) != 1) n = -1;
        fclose(f);
    }
    return n;
}

static void test_regular(void) {
    vs_error err = {0};
    const char *p = tpath("a.txt");
    VT_CHECK(vs_write_file(p, "hello", 5, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(file_equals(p, "hello"), "new file content");
    /* replacing keeps the old file's permission bits */
    VT_CHECK(chmod(p, 0640) == 0, "chmod");
    VT_CHECK(vs_write_file(p, "world!", 6, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(file_equals(p, "world!"), "replaced content");
    struct stat st;
    VT_CHECK(stat(p, &st) == 0 && (st.st_mode & 07777) == 0640, "mode kept: %o", (unsigned)(st.st_mode & 07777));
    VT_CHECK(count_prefix(vt_tmpdir(), "a.txt.tmp") == 0, "no temporary left");

    /* abort: the destination is untouched, nothing left behind */
    vs_outfile o;
    VT_REQUIRE(vs_outfile_open(&o, p, &err) == VS_OK, "%s", err.msg);
    fputs("partial", o.f);
    vs_outfile_abort(&o);
    VT_CHECK(file_equals(p, "world!"), "abort left the old content");
    VT_CHECK(count_prefix(vt_tmpdir(), "a.txt.tmp") == 0, "abort removed the temporary");
    vs_outfile_abort(&o); /* released: a second abort is harmless */
}

static void test_symlink(void) {
    vs_error err = {0};
    char target[4096], link[4096];
    snprintf(target, sizeof(target), "%s", tpath("target.txt"));
    snprintf(link, sizeof(link), "%s", tpath("link.txt"));
    VT_REQUIRE(vs_write_file(target, "old", 3, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(symlink(target, link) == 0, "symlink: %s", strerror(errno));
    VT_CHECK(vs_write_file(link, "new", 3, &err) == VS_OK, "%s", err.msg);
    struct stat st;
    VT_CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode), "the link is still a link");
    VT_CHECK(file_equals(target, "new"), "the link's target was replaced");
    /* a dangling link is refused rather than guessed at */
    char dangling[4096];
    snprintf(dangling, sizeof(dangling), "%s", tpath("dangling.txt"));
    VT_REQUIRE(symlink(tpath("missing/none.txt"), dangling) == 0, "symlink");
    VT_CHECK(vs_write_file(dangling, "x", 1, &err) == VS_ERR_IO && strstr(err.msg, "missing file"), "%s", err.msg);
}

/* A FIFO stands in for a device node (creating /dev nodes needs root): written in place, never replaced. */
static void test_fifo_and_devices(void) {
    vs_error err = {0};
    char fifo[4096];
    snprintf(fifo, sizeof(fifo), "%s", tpath("fifo"));
    VT_REQUIRE(mkfifo(fifo, 0600) == 0, "mkfifo: %s", strerror(errno));
    int rd = open(fifo, O_RDONLY | O_NONBLOCK); /* a reader, so the writer's open does not block */
    VT_REQUIRE(rd >= 0, "open fifo: %s", strerror(errno));
    VT_CHECK(vs_write_file(fifo, "through", 7, &err) == VS_OK, "%s", err.msg);
    char buf[16] = {0};
    VT_CHECK(read(rd, buf, sizeof(buf)) == 7 && !memcmp(buf, "through", 7), "read back through the FIFO");
    close(rd);
    struct stat st;
    VT_CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO is still a FIFO");
    VT_CHECK(count_prefix(vt_tmpdir(), "fifo.tmp") == 0, "no temporary beside the FIFO");

    /* the GGUF writer goes the same way */
    rd = open(fifo, O_RDONLY | O_NONBLOCK);
    VT_REQUIRE(rd >= 0, "open fifo");
    vs_gguf_writer *w = vs_gguf_writer_new();
    vs_gguf_set_u32(w, "test.value", 7);
    VT_CHECK(vs_gguf_write(w, fifo, &err) == VS_OK, "%s", err.msg);
    vs_gguf_writer_free(w);
    VT_CHECK(read(rd, buf, 4) == 4 && !memcmp(buf, "GGUF", 4), "GGUF magic through the FIFO");
    close(rd);
    VT_CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO survived the GGUF writer");

    if (stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode)) {
        VT_CHECK(vs_write_file("/dev/null", "x", 1, &err) == VS_OK, "%s", err.msg);
        VT_CHECK(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode), "/dev/null is still a device");
    }
    if (access("/dev/full", W_OK) == 0) {
        VT_CHECK(vs_write_file("/dev/full", "x", 1, &err) == VS_ERR_IO && strstr(err.msg, "/dev/full") &&
                     strstr(err.msg, strerror(ENOSPC)),
                 "%s", err.msg);
    }
    /* a directory is refused */
    VT_CHECK(vs_write_file(vt_tmpdir(), "x", 1, &err) == VS_ERR_IO && strstr(err.msg, "is a directory"), "%s",
             err.msg);
    /* a folder that does not exist: the error names the path and the reason */
    VT_CHECK(vs_write_file(tpath("nodir/x.txt"), "x", 1, &err) == VS_ERR_IO && strstr(err.msg, "nodir/x.txt") &&
                 strstr(err.msg, strerror(ENOENT)),
             "%s", err.msg);
}

/* A write that fails half way (file size limit): the old destination stays, no temporary remains. */
static void test_failed_write(void) {
    vs_error err = {0};
    const char *p = tpath("big.bin");
    VT_REQUIRE(vs_write_file(p, "keep", 4, &err) == VS_OK, "%s", err.msg);
    pid_t pid = fork();
    VT_REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {20480, 20480};
        setrlimit(RLIMIT_FSIZE, &rl);
        size_t n = 131072;
        uint8_t *d = calloc(n, 1);
        vs_error e = {0};
        vs_status s = vs_write_file(p, d, n, &e);
        free(d);
        _exit(s == VS_ERR_IO && strstr(e.msg, strerror(EFBIG)) ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    VT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the write past the limit failed with EFBIG");
    VT_CHECK(file_equals(p, "keep"), "the old file is untouched");
    VT_CHECK(count_prefix(vt_tmpdir(), "big.bin.tmp") == 0, "no temporary left");
}

static void test_stdout_check(void) {
    if (access("/dev/full", W_OK) != 0) return;
    pid_t pid = fork();
    VT_REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        int fd = open("/dev/full", O_WRONLY);
        if (fd < 0 || dup2(fd, 1) < 0) _exit(2);
        printf("lost output\n");
        vs_error e = {0};
        _exit(vs_stdout_check(&e) == VS_ERR_IO && strstr(e.msg, "standard output") ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    VT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "vs_stdout_check saw the lost output");
    vs_error e = {0};
    VT_CHECK(vs_stdout_check(&e) == VS_OK, "%s", e.msg);
}

static void test_read_file(void) {
    vs_error err = {0};
    uint8_t *d = NULL;
    size_t n = 99;
    VT_CHECK(vs_read_file(vt_tmpdir(), &d, &n, &err) == VS_ERR_IO && strstr(err.msg, "is a directory") && !d &&
                 n == 0,
             "%s", err.msg);
    if (access("/dev/zero", R_OK) == 0) {
        VT_CHECK(vs_read_file("/dev/zero", &d, &n, &err) == VS_ERR_RANGE && strstr(err.msg, "not a regular file"),
                 "%s", err.msg);
    }
    if (access("/proc/self/status", R_OK) == 0) {
        VT_CHECK(vs_read_file("/proc/self/status", &d, &n, &err) == VS_OK && n > 0 && strstr((char *)d, "Name:"),
                 "procfs file read whole (%zu bytes): %s", n, err.msg);
        vs_free(d);
        d = NULL;
    }
    /* a pipe is read to its end */
    char fifo[4096];
    snprintf(fifo, sizeof(fifo), "%s", tpath("readfifo"));
    VT_REQUIRE(mkfifo(fifo, 0600) == 0, "mkfifo");
    pid_t pid = fork();
    VT_REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        int fd = open(fifo, O_WRONLY);
        for (int i = 0; i < 1000; i++) (void)!write(fd, "0123456789", 10);
        close(fd);
        _exit(0);
    }
    VT_CHECK(vs_read_file(fifo, &d, &n, &err) == VS_OK && n == 10000 && d[9999] == '9' && d[10000] == 0,
             "pipe read to its end: %zu bytes: %s", n, err.msg);
    vs_free(d);
    waitpid(pid, NULL, 0);
    /* an empty regular file */
    const char *e = tpath("empty");
    VT_REQUIRE(vs_write_file(e, "", 0, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(vs_read_file(e, &d, &n, &err) == VS_OK && n == 0 && d && d[0] == 0, "empty file: %s", err.msg);
    vs_free(d);
}

/* The CLI: device nodes (FIFO) survive every writer, failed writes leave nothing and exit non-zero. */
static void test_cli(void) {
    const char *cli = vt_cli();
    if (!cli || access("models/target.gguf", R_OK) != 0) {
        printf("SKIP cli part: needs $VLMSPEC_BIN and models/\n");
        return;
    }
    const char *dir = vt_tmpdir();
    char fifo[4096];
    snprintf(fifo, sizeof(fifo), "%s/cli.fifo", dir);
    VT_REQUIRE(mkfifo(fifo, 0600) == 0, "mkfifo");
    /* model random -o FIFO: written through the FIFO (drained by cat), the FIFO stays; the check that
     * loads the model back refuses a FIFO (without blocking on it) */
    /* cat ends by itself once the writer has closed the FIFO: wait for it (killing it at once could cut what
     * it still had to copy); a writer that never opened the FIFO leaves cat blocked: killed after 10 s */
    int rc = vt_run("cat '%s' > '%s/drained.gguf' & c=$!; timeout 60 %s model random --dim 32 --layers 1 --heads 2 "
                    "--ffn 64 --ctx 64 --type F16 --vocab 64 -o '%s' > /dev/null 2>'%s/random.err'; r=$?; "
                    "(sleep 10; kill $c) > /dev/null 2>&1 & k=$!; wait $c; kill $k 2>/dev/null; exit $r",
                    fifo, dir, cli, fifo, dir);
    struct stat st;
    char rerr[4200];
    snprintf(rerr, sizeof(rerr), "%s/random.err", dir);
    VT_CHECK(rc == 1 && vt_file_has(rerr, "not a regular file"), "model random -o FIFO: rc %d", rc);
    VT_CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode), "model random -o FIFO replaced the FIFO");
    char drained[4200];
    snprintf(drained, sizeof(drained), "%s/drained.gguf", dir);
    VT_CHECK(vt_file_has(drained, "GGUF"), "the model went through the FIFO");
    rc = vt_run("%s model random --dim 32 --layers 1 --heads 2 --ffn 64 --ctx 64 --type F16 --vocab 64 -o '%s' "
                "> /dev/null 2>&1", cli, dir);
    VT_CHECK(rc != 0, "model random -o DIR must fail (rc %d)", rc);

    /* standard output lost to /dev/full: non-zero exit */
    if (access("/dev/full", W_OK) == 0) {
        rc = vt_run("%s generate --raw -m models/target.gguf -p hi -n 2 --json - > /dev/full 2>/dev/null", cli);
        VT_CHECK(rc == 1, "generate --json - > /dev/full: rc %d", rc);
        rc = vt_run("%s gguf models/target.gguf > /dev/full 2>/dev/null", cli);
        VT_CHECK(rc == 1, "gguf > /dev/full: rc %d", rc);
        rc = vt_run("%s tokenize -m models/target.gguf -p hello > /dev/full 2>/dev/null", cli);
        VT_CHECK(rc == 1, "tokenize > /dev/full: rc %d", rc);
    }
    /* chat --dump into a folder that does not exist: reported and non-zero */
    rc = vt_run("echo hi | %s chat -m models/target.gguf -n 2 --dump '%s/none/d' > /dev/null 2>'%s/chat.err'", cli,
                dir, dir);
    char errf[4200];
    snprintf(errf, sizeof(errf), "%s/chat.err", dir);
    VT_CHECK(rc == 1 && vt_file_has(errf, "none/d.turn1.prompt.txt"), "chat --dump failure: rc %d", rc);

    /* embed-image past a file size limit: exit non-zero, no partial PREFIX.f32 */
    if (access("models/target-mmproj.gguf", R_OK) == 0) {
        uint8_t px[64 * 64 * 3];
        for (size_t i = 0; i < sizeof(px); i++) px[i] = (uint8_t)(i * 7);
        char img[4200];
        snprintf(img, sizeof(img), "%s/in.png", dir);
        vs_error err = {0};
        VT_REQUIRE(vs_png_write(img, px, 64, 64, 3, &err) == VS_OK, "%s", err.msg);
        rc = vt_run("ulimit -f 20; %s embed-image --mmproj models/target-mmproj.gguf --image '%s' -o '%s/emb' "
                    "> /dev/null 2>&1", cli, img, dir);
        VT_CHECK(rc == 1, "embed-image past ulimit -f: rc %d", rc);
        VT_CHECK(count_prefix(dir, "emb") == 0, "embed-image left files behind: %d", count_prefix(dir, "emb"));
    }
}

int main(void) {
    test_regular();
    test_symlink();
    test_fifo_and_devices();
    test_failed_write();
    test_stdout_check();
    test_read_file();
    test_cli();
    return vt_finish("outfile");
}
