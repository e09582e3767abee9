/* testutil: what every test executable shares. Checks that FAIL THE PROCESS (exit 1 at the end of
 * main via vt_finish, or at once with VT_REQUIRE), locating ../shared/testdata (tests run from the
 * project root) with a clear skip when it is absent, temp files, and running the CLI binary. */
#ifndef VS_TESTUTIL_H
#define VS_TESTUTIL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

extern int vt_failures;
extern int vt_checks;

#define VT_CHECK(cond, ...)                                                                   \
    do {                                                                                      \
        vt_checks++;                                                                          \
        if (!(cond)) {                                                                        \
            vt_failures++;                                                                    \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                   \
            fprintf(stderr, __VA_ARGS__);                                                     \
            fprintf(stderr, "\n");                                                            \
        }                                                                                     \
    } while (0)

/* Stops the test at once (for preconditions whose failure makes the rest meaningless). */
#define VT_REQUIRE(cond, ...)                                                                 \
    do {                                                                                      \
        vt_checks++;                                                                          \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "FATAL %s:%d: %s: ", __FILE__, __LINE__, #cond);                  \
            fprintf(stderr, __VA_ARGS__);                                                     \
            fprintf(stderr, "\n");                                                            \
            vt_failures++;                                                                    \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

#define VT_CHECK_NEAR(a, b, tol, ...)                                                         \
    do {                                                                                      \
        double vt_a_ = (double)(a), vt_b_ = (double)(b);                                      \
        VT_CHECK(fabs(vt_a_ - vt_b_) <= (tol), "%g vs %g (tol %g) ", vt_a_, vt_b_, (double)(tol)); \
        if (fabs(vt_a_ - vt_b_) > (tol)) fprintf(stderr, __VA_ARGS__), fprintf(stderr, "\n"); \
    } while (0)

/* Prints a summary and returns the exit status for main: 0 only if no check failed. */
int vt_finish(const char *name);

/* Directory of the shared test data ("../shared/testdata" or $VLMSPEC_SHARED/testdata), or NULL
 * if absent; vt_shared_or_skip prints "SKIP: <what> needs ../shared/testdata" and returns NULL. */
const char *vt_shared_dir(void);
const char *vt_shared_or_skip(const char *what);
/* Exit code ctest treats as skipped (see SKIP_RETURN_CODE in tests/CMakeLists.txt). */
#define VT_SKIP_CODE 77

/* A fresh temporary directory for this test process ($TMPDIR or /tmp), removed with its contents
 * when the process exits after every check passed; kept, and its path printed, when a check failed
 * or VLMSPEC_KEEP_TMP=1. */
const char *vt_tmpdir(void);
/* Whether the file's first MiB holds the string (false when it cannot be read). */
bool vt_file_has(const char *path, const char *needle);
/* Path of the vlmspec CLI binary ($VLMSPEC_BIN, set by ctest). */
const char *vt_cli(void);
/* Runs a shell command, returns its exit status (-1 if it could not run / was killed). */
int vt_run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* P(X > chi2) for X ~ chi-square with df degrees of freedom (the p-value of a chi-square test):
 * the regularised upper incomplete gamma function Q(df/2, chi2/2), by series or continued fraction. */
double vt_chi2_pvalue(double chi2, int df);

/* Max |a - b| over n floats. */
double vt_max_abs_diff(const float *a, const float *b, size_t n);

/* Max |got - ref| / max |ref| over n floats (divided by 1 when ref is all zero; a NaN gives infinity):
 * the relative error the export-parity tests bound. */
double vt_max_rel_diff(const float *got, const float *ref, size_t n);

#endif
