/*
 * main.c: the distir command-line client: dispatches to the subcommand
 * table in commands.h and holds the helpers every command shares (error
 * output, module loading by content, option matching).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ir/pb.h"
#include "onnx/onnx.h"

static const struct {
    const char *name;
    const char *summary;
    int (*fn)(int, char **);
} commands[] = {
#define CLI_CMD_ROW_(name, summary) {#name, summary, cmd_##name},
    CLI_COMMANDS(CLI_CMD_ROW_)
#undef CLI_CMD_ROW_
};

void
cli_error(const char *fmt, ...)
{
    va_list ap;
    fputs("distir: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int
cli_usage(const char *usage)
{
    fprintf(stderr, "usage: distir %s\n", usage);
    return CLI_USAGE;
}

int
cli_help(const char *usage)
{
    printf("usage: distir %s\n", usage);
    return CLI_OK;
}

int
cli_is_help(const char *arg)
{
    return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0;
}

int
cli_flag(const char *arg, const char *name)
{
    return strcmp(arg, name) == 0;
}

int
cli_long_in(const char *text, long lo, long hi, long *out)
{
    char *end;
    long t;
    errno = 0;
    t = strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0' || errno != 0 || t < lo || t > hi)
        return 0;
    *out = t;
    return 1;
}

int
cli_opt(int argc, char **argv, int *i, const char *name, const char **value)
{
    size_t n = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, n) != 0)
        return 0;
    if (a[n] == '=') {
        *value = a + n + 1;
        return 1;
    }
    if (a[n] != '\0')
        return 0;
    if (*i + 1 >= argc) {
        cli_error("option '%s' needs a value", name);
        *value = NULL;
        return -1;
    }
    *value = argv[++*i];
    return 1;
}

int
cli_two_valued(int argc, char **argv, int *i, const char *name, const char *on, const char *off,
           int *on_set)
{
    const char *v;
    int r = cli_opt(argc, argv, i, name, &v);
    if (r <= 0)
        return r;
    if (strcmp(v, on) != 0 && strcmp(v, off) != 0) {
        cli_error("%s takes %s or %s, got '%s'", name, on, off, v);
        return -1;
    }
    *on_set = strcmp(v, on) == 0;
    return 1;
}

int
cli_sim_opt(int argc, char **argv, int *i, int *tf32, int *fuse, int *no_gaf, int *kernels)
{
    int r, on;
    if ((r = cli_two_valued(argc, argv, i, "--math", "tf32", "ieee", tf32)) != 0)
        return r;
    if ((r = cli_two_valued(argc, argv, i, "--grad-accum-fusion", "on", "off", &on)) != 0) {
        if (r > 0)
            *no_gaf = !on;
        return r;
    }
    if ((r = cli_two_valued(argc, argv, i, "--kernels", "fused", "eager", fuse)) != 0) {
        if (r > 0)
            *kernels = 1;
        return r;
    }
    return 0;
}

cli_format
cli_detect_format(const uint8_t *data, size_t len)
{
    size_t i = 0;
    /* Text: optional whitespace and comments, then "func", "dist." or "//". */
    while (i < len && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r'))
        i++;
    if (i < len && (data[i] == '/' || data[i] == 'f' || data[i] == 'd' || data[i] == '#'))
        return CLI_FORMAT_TEXT;
    if (len == 0)
        return CLI_FORMAT_UNKNOWN;
    /*
     * Binary: a distir.v1.Module starts with field 1 or 2 (types/values,
     * length-delimited: 0x0a or 0x12). An ONNX ModelProto starts with
     * ir_version (field 1, varint: 0x08).
     */
    if (data[0] == 0x08)
        return CLI_FORMAT_ONNX;
    if (data[0] == 0x0a || data[0] == 0x12 || data[0] == 0x1a || data[0] == 0x22)
        return CLI_FORMAT_PB;
    return CLI_FORMAT_UNKNOWN;
}

cli_format
cli_format_from_path(const char *path)
{
    size_t n = strlen(path);
    if (n >= 4 && strcmp(path + n - 4, ".dir") == 0)
        return CLI_FORMAT_TEXT;
    if (n >= 3 && strcmp(path + n - 3, ".pb") == 0)
        return CLI_FORMAT_PB;
    if (n >= 5 && strcmp(path + n - 5, ".onnx") == 0)
        return CLI_FORMAT_ONNX;
    return CLI_FORMAT_UNKNOWN;
}

int
cli_load_module(const char *path, ir_module **out)
{
    uint8_t *data;
    size_t len;
    di_error err;
    ir_limits lim;
    int rc;
    *out = NULL;
    ir_limits_default(&lim);
    if (di_read_file(path, (size_t)lim.max_bytes, &data, &len, &err) != 0) {
        cli_error("%s", err.msg);
        return -1;
    }
    di_error_clear(&err);
    switch (cli_detect_format(data, len)) {
    case CLI_FORMAT_TEXT:
        rc = ir_parse((const char *)data, len, out, &err);
        break;
    case CLI_FORMAT_PB:
        rc = ir_decode(data, len, &lim, out, &err);
        break;
    case CLI_FORMAT_ONNX:
        rc = onnx_import(data, len, 0, out, &err);
        break;
    default:
        rc = di_error_set(&err, DI_EDECODE, "not a module (IR text, protobuf or ONNX)");
    }
    di_free(data);
    if (rc != 0) {
        cli_error("cannot load '%s': %s", path, err.msg);
        return rc;
    }
    return 0;
}

int
cli_write_module(const ir_module *m, const char *path, cli_format fmt)
{
    uint8_t *data;
    size_t len;
    di_error err;
    int rc;
    if (fmt == CLI_FORMAT_UNKNOWN)
        fmt = cli_format_from_path(path);
    if (fmt == CLI_FORMAT_PB) {
        if (ir_encode(m, &data, &len) != 0) {
            cli_error("cannot encode the module");
            return CLI_FAIL;
        }
    } else {
        data = (uint8_t *)ir_print(m, &len);
    }
    rc = di_write_file(path, data, len, &err);
    if (rc != 0)
        cli_error("%s", err.msg);
    di_free(data);
    return rc == 0 ? CLI_OK : CLI_FAIL;
}

static void
usage_all(FILE *f)
{
    fprintf(f, "usage: distir COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nModules may be IR text, protobuf or ONNX (detected by content).\n"
               "With --server, anywhere on the line: --tls-ca FILE (the daemon's CA), --tls-cert\n"
               "FILE and --tls-key FILE (a client certificate), --token TOKEN (or the variables\n"
               "DISTIR_TLS_CA, DISTIR_TLS_CERT, DISTIR_TLS_KEY, DISTIR_TOKEN).\n"
               "Exit codes: 0 ok, 1 failure, 2 usage error.\n");
}

/*
 * The connection options every command with --server shares, given anywhere
 * on the command line: --tls-ca FILE, --tls-cert FILE, --tls-key FILE,
 * --token TOKEN. They become DISTIR_TLS_CA, DISTIR_TLS_CERT, DISTIR_TLS_KEY
 * and DISTIR_TOKEN for the RPC client (rpc.c), which can also come from the
 * environment (better for a token: the command line is visible in ps).
 * Removes them from argv; returns the new argc, or -1 after a usage error.
 */
static int
take_connection_flags(int argc, char **argv)
{
    static const char *const flags[][2] = {{"--tls-ca", "DISTIR_TLS_CA"},
                                           {"--tls-cert", "DISTIR_TLS_CERT"},
                                           {"--tls-key", "DISTIR_TLS_KEY"},
                                           {"--token", "DISTIR_TOKEN"}};
    int out = 1;
    for (int i = 1; i < argc; i++) {
        int taken = 0;
        for (size_t f = 0; f < sizeof flags / sizeof flags[0] && !taken; f++) {
            size_t n = strlen(flags[f][0]);
            if (strncmp(argv[i], flags[f][0], n) != 0)
                continue;
            if (argv[i][n] == '=') {
                setenv(flags[f][1], argv[i] + n + 1, 1);
                taken = 1;
            } else if (argv[i][n] == '\0') {
                if (i + 1 >= argc) {
                    cli_error("%s needs a value", flags[f][0]);
                    return -1;
                }
                setenv(flags[f][1], argv[++i], 1);
                taken = 1;
            }
        }
        if (!taken)
            argv[out++] = argv[i];
    }
    argv[out] = NULL;
    return out;
}

int
main(int argc, char **argv)
{
    /*
     * A transform and a simulation grow and free large tables: freed memory
     * stays in the heap (on llama3-405b at 16,384 GPUs the kernel's page
     * clearing was a third of the run without).
     */
    di_heap_keep();
    if ((argc = take_connection_flags(argc, argv)) < 0)
        return CLI_USAGE;
    if (argc < 2) {
        usage_all(stderr);
        return CLI_USAGE;
    }
    if (cli_is_help(argv[1]) || strcmp(argv[1], "help") == 0) {
        usage_all(stdout);
        return CLI_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("distir %s\n", DISTIR_VERSION);
        return CLI_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].fn(argc - 1, argv + 1);
    cli_error("'%s' is not a distir command; see 'distir --help'", argv[1]);
    return CLI_USAGE;
}
