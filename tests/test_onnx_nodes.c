/*
 * test_onnx_nodes.c: the ONNX backend node tests through the importer and
 * the sequential executor. For every directory test_* under
 * /usr/share/libonnx-testdata/data/node (Debian's libonnx-testdata; another
 * root may be given as argv[1] or $ONNX_NODE_TESTS), it imports model.onnx
 * strictly, runs every test_data_set_*: input_K.pb -> ex_run -> compares with
 * output_K.pb (onnx.TensorProto) with the ONNX backend tolerances, rtol 1e-3
 * and atol 1e-7 (|got - want| <= atol + rtol |want|; NaN matches NaN).
 *
 * A test is supported when every op, attribute and dtype it uses is: the
 * importer reports anything else as DI_EUNSUPPORTED, and the test is a skip
 * with that reason. distir needs static shapes, so when a model feeds a
 * graph input into a shape-like position (Reshape's shape, Split's sizes,
 * Dropout's ratio, ...) the runner binds the integer, boolean and scalar
 * inputs of each data set as constants and imports once per data set.
 * Tests whose reference draws random numbers are skipped by name, with the
 * reason.
 *
 * The tests listed in tests/data/onnx_nodes_pass.txt must pass: one of them
 * skipped or missing is a failure that names it. Missing test data is a
 * failure too (install Debian's libonnx-testdata: `make deps`).
 *
 * Usage: test_onnx_nodes [--print-passed] [ROOT]; run from the source root.
 * --print-passed prints only the names of the tests that pass, to refresh
 * the list.
 *
 * Output: the skipped tests in one list, the passing tests not yet listed,
 * each failure with its first mismatching index, cmocka-style totals (for
 * tests/run.sh), and a last line "N passed, N failed, N skipped (N must
 * pass)". Exit status 1 if any supported or listed test fails.
 */
#include <dirent.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/pb.h"
#include "exec/exec.h"
#include "onnx/onnx-ml.pb-c.h"
#include "onnx/onnx.h"
#include "onnx/onnx_ex.h"

#define RTOL 1e-3
#define ATOL 1e-7
#define MAX_IO 64

/* Tests whose reference output depends on NumPy's random generator. */
static const struct {
    const char *test;
    const char *reason;
} random_tests[] = {
    {"test_training_dropout", "random mask drawn by NumPy's generator"},
    {"test_training_dropout_default", "random mask drawn by NumPy's generator"},
    {"test_training_dropout_default_mask", "random mask drawn by NumPy's generator"},
    {"test_training_dropout_mask", "random mask drawn by NumPy's generator"},
    /*
     * ONNX 1.12's reference truncates float to bfloat16; distir rounds to the nearest
     * even value, as hardware does and as ONNX's reference does from 1.14 on.
     */
    {"test_cast_FLOAT_to_BFLOAT16", "the reference truncates to bfloat16 (distir rounds to "
                                    "nearest even, like hardware and ONNX >= 1.14)"},
    {"test_castlike_FLOAT_to_BFLOAT16", "the reference truncates to bfloat16 (distir rounds to "
                                        "nearest even, like hardware and ONNX >= 1.14)"},
    {"test_castlike_FLOAT_to_BFLOAT16_expanded", "the reference truncates to bfloat16 (distir "
                                                 "rounds to nearest even, like hardware and "
                                                 "ONNX >= 1.14)"},
};

typedef struct report {
    char **lines;
    size_t n, cap;
} report;

static void
report_add(report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
report_add(report *r, const char *fmt, ...)
{
    char buf[1400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    DI_GROW(&r->lines, &r->cap, r->n + 1);
    r->lines[r->n++] = di_xstrdup(buf);
}

static void
report_print(const report *r, const char *title)
{
    if (r->n == 0)
        return;
    printf("%s (%zu):\n", title, r->n);
    for (size_t i = 0; i < r->n; i++)
        printf("  %s\n", r->lines[i]);
}

static void
report_free(report *r)
{
    for (size_t i = 0; i < r->n; i++)
        di_free(r->lines[i]);
    di_free(r->lines);
}

/* Names of the directory entries of dir starting with prefix, sorted. */
static int
list_dir(const char *dir, const char *prefix, char ***names, int *n)
{
    struct dirent **ents;
    int k = scandir(dir, &ents, NULL, alphasort), m = 0;
    *names = NULL;
    *n = 0;
    if (k < 0)
        return -1;
    *names = di_xcalloc((size_t)k + 1, sizeof **names);
    for (int i = 0; i < k; i++) {
        if (strncmp(ents[i]->d_name, prefix, strlen(prefix)) == 0)
            (*names)[m++] = di_xstrdup(ents[i]->d_name);
        free(ents[i]);
    }
    free(ents);
    *n = m;
    return 0;
}

static void
free_names(char **names, int n)
{
    for (int i = 0; i < n; i++)
        di_free(names[i]);
    di_free(names);
}

/* Reads dir/prefix_K.pb for K = 0, 1, ... until one is missing. */
static int
read_tensors(const char *dir, const char *prefix, ex_tensor *t, uint32_t *n, di_error *err)
{
    *n = 0;
    for (uint32_t k = 0; k < MAX_IO; k++) {
        char path[4200];
        uint8_t *data;
        size_t len;
        struct stat st;
        int rc;
        snprintf(path, sizeof path, "%s/%s_%u.pb", dir, prefix, k);
        if (stat(path, &st) != 0)
            return 0;
        if ((rc = di_read_file(path, (size_t)1 << 30, &data, &len, err)) != 0)
            return rc;
        rc = onnx_tensor_decode(data, len, &t[k], NULL, err);
        di_free(data);
        if (rc != 0) {
            di_error_prefix(err, "%s", path);
            return rc;
        }
        (*n)++;
    }
    return 0;
}

/* Finalizes n tensors of an array the caller owns (not freed). */
static void
fini_tensors(ex_tensor *t, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        ex_tensor_fini(&t[i]);
}

/* The first mismatch of got against want, described in msg; 0 if they match. */
static int
compare(const ex_tensor *got, const ex_tensor *want, char *msg, size_t cap)
{
    int fl = ir_dtype_is_float(want->dtype);
    if (got->dtype != want->dtype) {
        snprintf(msg, cap, "dtype %s, expected %s", ir_dtype_name(got->dtype),
                 ir_dtype_name(want->dtype));
        return 1;
    }
    if (got->rank != want->rank ||
        memcmp(got->dims, want->dims, got->rank * sizeof got->dims[0]) != 0) {
        snprintf(msg, cap, "rank %u shape differs from the expected rank %u shape", got->rank,
                 want->rank);
        return 1;
    }
    for (size_t i = 0; i < want->numel; i++) {
        double g = ex_get(got, i), w = ex_get(want, i);
        int ok;
        if (!fl)
            ok = g == w;
        else if (isnan(w))
            ok = isnan(g);
        else if (isinf(w))
            ok = g == w;
        else
            ok = fabs(g - w) <= ATOL + RTOL * fabs(w);
        if (!ok) {
            snprintf(msg, cap, "first mismatch at index %zu: got %.9g, expected %.9g", i, g, w);
            return 1;
        }
    }
    return 0;
}

/* The model's graph inputs: names and whether each is an initializer. */
typedef struct graph_io {
    uint32_t ninput;
    char *names[MAX_IO];
    int is_init[MAX_IO];
} graph_io;

static int
read_graph_io(const uint8_t *data, size_t len, graph_io *io, di_error *err)
{
    ProtobufCMessage *msg;
    const Onnx__ModelProto *mp;
    int rc;
    memset(io, 0, sizeof *io);
    if ((rc = pb_unpack_checked(&onnx__model_proto__descriptor, data, len, 64, &msg, err)) != 0)
        return rc;
    mp = (const Onnx__ModelProto *)msg;
    if (mp->graph == NULL || mp->graph->n_input > MAX_IO) {
        protobuf_c_message_free_unpacked(msg, NULL);
        return di_error_set(err, DI_EUNSUPPORTED, "no graph or too many inputs");
    }
    for (size_t i = 0; i < mp->graph->n_input; i++) {
        io->names[i] = di_xstrdup(mp->graph->input[i]->name ? mp->graph->input[i]->name : "");
        for (size_t j = 0; j < mp->graph->n_initializer; j++)
            if (mp->graph->initializer[j]->name &&
                strcmp(mp->graph->initializer[j]->name, io->names[i]) == 0)
                io->is_init[i] = 1;
    }
    io->ninput = (uint32_t)mp->graph->n_input;
    protobuf_c_message_free_unpacked(msg, NULL);
    return 0;
}

static void
free_graph_io(graph_io *io)
{
    for (uint32_t i = 0; i < io->ninput; i++)
        di_free(io->names[i]);
}

typedef enum outcome { PASS, FAIL, SKIP } outcome;

/*
 * Whether input t is bound as a constant: bind 1 binds integer, boolean and
 * scalar inputs (shape-like inputs), bind 2 every input (for data sets whose
 * shapes differ from the shapes the model declares).
 */
static int
bindable(const ex_tensor *t, int bind)
{
    return bind == 2 || (bind == 1 && (!ir_dtype_is_float(t->dtype) || t->rank == 0));
}

/* Runs one data set; msg receives the reason of a failure or skip. */
static outcome
run_set(const char *dir, const uint8_t *model, size_t mlen, const graph_io *io, int bind,
        char *msg, size_t cap)
{
    ex_tensor in[MAX_IO], want[MAX_IO], *args = NULL, *res = NULL;
    uint32_t nin = 0, nwant = 0, nres = 0, nargs, pos = 0;
    const char *names[MAX_IO];
    onnx_options opt;
    ir_module *m = NULL;
    di_error err;
    outcome out = FAIL;
    memset(in, 0, sizeof in);
    memset(want, 0, sizeof want);
    di_error_clear(&err);
    if (read_tensors(dir, "input", in, &nin, &err) != 0 ||
        read_tensors(dir, "output", want, &nwant, &err) != 0) {
        snprintf(msg, cap, "%s", err.msg);
        out = err.code == DI_EUNSUPPORTED ? SKIP : FAIL;
        goto done;
    }
    onnx_options_default(&opt);
    opt.strict = 1;
    if (bind) {
        uint32_t k = 0, nb = 0;
        static ex_tensor bound[MAX_IO];
        for (uint32_t i = 0; i < io->ninput && k < nin; i++) {
            if (io->is_init[i])
                continue;
            if (bindable(&in[k], bind)) {
                names[nb] = io->names[i];
                bound[nb++] = in[k];
            }
            k++;
        }
        opt.nconst = nb;
        opt.const_names = names;
        opt.const_values = bound;
    }
    if (onnx_import_opts(model, mlen, &opt, &m, &err) != 0) {
        snprintf(msg, cap, "%s", err.msg);
        out = err.code == DI_EUNSUPPORTED ? SKIP : FAIL;
        goto done;
    }
    nargs = ex_num_args(m);
    args = di_xcalloc(nargs + 1, sizeof *args);
    for (uint32_t i = 0, k = 0; i < io->ninput; i++) {
        if (io->is_init[i]) {
            pos++; /* data NULL: its initializer */
            continue;
        }
        if (k >= nin) {
            snprintf(msg, cap, "the data set has %u inputs for %u graph inputs", nin,
                     io->ninput);
            goto done;
        }
        if (!bindable(&in[k], bind) && pos < nargs)
            args[pos++] = in[k];
        k++;
    }
    if (ex_run(m, args, nargs, &res, &nres, &err) != 0) {
        snprintf(msg, cap, "run: %s", err.msg);
        goto done;
    }
    if (nres != nwant) {
        snprintf(msg, cap, "%u results, expected %u", nres, nwant);
        goto done;
    }
    for (uint32_t k = 0; k < nres; k++) {
        char why[600];
        if (compare(&res[k], &want[k], why, sizeof why) != 0) {
            snprintf(msg, cap, "output %u: %s", k, why);
            goto done;
        }
    }
    out = PASS;
done:
    for (uint32_t k = 0; k < nres; k++)
        ex_tensor_fini(&res[k]);
    di_free(res);
    di_free(args);
    fini_tensors(in, nin);
    fini_tensors(want, nwant);
    ir_module_free(m);
    return out;
}

static outcome
run_test(const char *root, const char *test, char *msg, size_t cap)
{
    char dir[4200], path[4300];
    uint8_t *model;
    size_t mlen;
    char **sets;
    int nsets, bind = 0;
    graph_io io;
    ir_module *m = NULL;
    di_error err;
    outcome out = PASS;
    for (size_t i = 0; i < sizeof random_tests / sizeof random_tests[0]; i++)
        if (strcmp(test, random_tests[i].test) == 0) {
            snprintf(msg, cap, "%s", random_tests[i].reason);
            return SKIP;
        }
    snprintf(dir, sizeof dir, "%s/%s", root, test);
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    di_error_clear(&err);
    if (di_read_file(path, (size_t)1 << 30, &model, &mlen, &err) != 0) {
        snprintf(msg, cap, "%s", err.msg);
        return SKIP;
    }
    if (read_graph_io(model, mlen, &io, &err) != 0) {
        snprintf(msg, cap, "%s", err.msg);
        di_free(model);
        return err.code == DI_EUNSUPPORTED ? SKIP : FAIL;
    }
    if (onnx_import(model, mlen, 1, &m, &err) != 0) {
        if (err.code == DI_EUNSUPPORTED && strstr(err.msg, "constant") != NULL) {
            bind = 1; /* import once per data set with its constants */
        } else {
            snprintf(msg, cap, "%s", err.msg);
            out = err.code == DI_EUNSUPPORTED ? SKIP : FAIL;
        }
    }
    ir_module_free(m);
    if (out == PASS) {
        if (list_dir(dir, "test_data_set_", &sets, &nsets) != 0 || nsets == 0) {
            snprintf(msg, cap, "no test data");
            out = SKIP;
        } else {
            for (int s = 0; s < nsets && out == PASS; s++) {
                char sdir[4300];
                snprintf(sdir, sizeof sdir, "%s/%s", dir, sets[s]);
                out = run_set(sdir, model, mlen, &io, bind, msg, cap);
                if (out == FAIL && strncmp(msg, "run: argument", 13) == 0)
                    out = run_set(sdir, model, mlen, &io, 2, msg, cap);
                if (out == FAIL) {
                    char tmp[1100];
                    snprintf(tmp, sizeof tmp, "%s: %s", sets[s], msg);
                    snprintf(msg, cap, "%s", tmp);
                }
            }
        }
        free_names(sets, nsets);
    }
    free_graph_io(&io);
    di_free(model);
    return out;
}

/*
 * The node tests that must pass, one name a line ('#' starts a comment):
 * a test in the list that is skipped or missing fails, so a supported op
 * that starts answering "unsupported" names itself instead of becoming one
 * more skip. A test that passes without being listed is only reported.
 */
#define MUST_PASS_LIST "tests/data/onnx_nodes_pass.txt"

/* Appends the names in the list at path to r. */
static int
read_must_pass(const char *path, report *r)
{
    uint8_t *data;
    size_t len;
    di_error err;
    if (di_read_file(path, (size_t)1 << 20, &data, &len, &err) != 0) {
        printf("test_onnx_nodes: %s\n", err.msg);
        return -1;
    }
    for (char *line = (char *)data, *end = (char *)data + len; line < end;) {
        char *nl = memchr(line, '\n', (size_t)(end - line)), *stop = nl ? nl : end;
        while (stop > line && (stop[-1] == ' ' || stop[-1] == '\r'))
            stop--;
        if (stop > line && line[0] != '#')
            report_add(r, "%.*s", (int)(stop - line), line);
        line = nl ? nl + 1 : end;
    }
    di_free(data);
    return 0;
}

int
main(int argc, char **argv)
{
    const char *root = NULL;
    char **tests;
    int ntests, passed = 0, failed = 0, skipped = 0, print_passed = 0;
    report skips = {0}, fails = {0}, unlisted = {0}, must = {0};
    outcome *outcomes;
    char (*msgs)[1200];
    struct stat st;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--print-passed") == 0)
            print_passed = 1;
        else
            root = argv[i];
    }
    if (root == NULL)
        root = getenv("ONNX_NODE_TESTS");
    if (root == NULL || *root == '\0')
        root = "/usr/share/libonnx-testdata/data/node";
    if (stat(root, &st) != 0 || !S_ISDIR(st.st_mode)) {
        printf("test_onnx_nodes: the ONNX node tests are missing: %s is not a directory; install "
               "the Debian package libonnx-testdata ('make deps' as root) or name another root "
               "in $ONNX_NODE_TESTS\n",
               root);
        printf("[  FAILED  ] 1 test(s), listed above.\n");
        return 1;
    }
    if (list_dir(root, "test_", &tests, &ntests) != 0) {
        fprintf(stderr, "cannot list %s\n", root);
        return 1;
    }
    if (!print_passed && read_must_pass(MUST_PASS_LIST, &must) != 0) {
        printf("[  FAILED  ] 1 test(s): cannot read %s (run from the source root)\n",
               MUST_PASS_LIST);
        free_names(tests, ntests);
        return 1;
    }
    outcomes = di_xcalloc((size_t)ntests + 1, sizeof *outcomes);
    msgs = di_xcalloc((size_t)ntests + 1, sizeof *msgs);
    for (int i = 0; i < ntests; i++) {
        outcomes[i] = run_test(root, tests[i], msgs[i], sizeof msgs[i]);
        if (outcomes[i] == PASS) {
            passed++;
            if (print_passed)
                printf("%s\n", tests[i]);
        } else if (outcomes[i] == SKIP) {
            skipped++;
            report_add(&skips, "%s: %s", tests[i], msgs[i]);
        } else {
            failed++;
            report_add(&fails, "%s: %s", tests[i], msgs[i]);
        }
    }
    if (print_passed)
        goto done;
    /* The floor: every listed test ran and passed (the failures are counted above). */
    for (size_t k = 0; k < must.n; k++) {
        int i = 0;
        while (i < ntests && strcmp(tests[i], must.lines[k]) != 0)
            i++;
        if (i == ntests) {
            failed++;
            report_add(&fails, "%s: listed in %s but not found in %s", must.lines[k],
                       MUST_PASS_LIST, root);
        } else if (outcomes[i] == SKIP) {
            failed++;
            report_add(&fails, "%s: listed in %s but skipped: %s", must.lines[k], MUST_PASS_LIST,
                       msgs[i]);
        }
    }
    for (int i = 0; i < ntests; i++) {
        size_t k = 0;
        while (k < must.n && strcmp(tests[i], must.lines[k]) != 0)
            k++;
        if (outcomes[i] == PASS && k == must.n)
            report_add(&unlisted, "%s", tests[i]);
    }
    report_print(&skips, "skipped (unsupported)");
    report_print(&unlisted, "passed, not yet in " MUST_PASS_LIST " (add them)");
    report_print(&fails, "FAILED");
    printf("[==========] %d ONNX node test(s) run.\n", passed + failed);
    printf("[  PASSED  ] %d test(s).\n", passed);
    if (failed)
        printf("[  FAILED  ] %d test(s), listed above.\n", failed);
    printf("%d passed, %d failed, %d skipped (%zu must pass)\n", passed, failed, skipped, must.n);
done:
    report_free(&skips);
    report_free(&fails);
    report_free(&unlisted);
    di_free(outcomes);
    di_free(msgs);
    report_free(&must);
    free_names(tests, ntests);
    return failed ? 1 : 0;
}
