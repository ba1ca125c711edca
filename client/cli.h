/*
 * cli.h: shared pieces of the distir command-line client. The CLI is a table
 * of subcommands (client/commands.h); each lives in client/cmd_NAME.c and
 * defines `int cmd_NAME(int argc, char **argv)` returning an exit code:
 * 0 ok, 1 failure, 2 usage error. Messages follow git's style:
 * lowercase, what failed first, the subject quoted, no full stop.
 */
#ifndef DISTIR_CLI_H
#define DISTIR_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"

#define CLI_OK 0
#define CLI_FAIL 1
#define CLI_USAGE 2

/* The command functions, one per line of commands.h. */
#define CLI_CMD_DECL_(name, summary) int cmd_##name(int argc, char **argv);
#include "commands.h"
CLI_COMMANDS(CLI_CMD_DECL_)
#undef CLI_CMD_DECL_

/* Prints "distir: " + message to stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints a usage line for a command to stderr and returns CLI_USAGE. */
int cli_usage(const char *usage);
/* Prints the usage asked for by -h or --help to stdout and returns CLI_OK. */
int cli_help(const char *usage);
/* Whether arg asks for a command's help: "-h" or "--help". */
int cli_is_help(const char *arg);

/* Module file formats, detected by content. */
typedef enum cli_format {
    CLI_FORMAT_UNKNOWN = 0,
    CLI_FORMAT_TEXT,  /* IR text (.dir) */
    CLI_FORMAT_PB,    /* distir.v1.Module protobuf (.pb) */
    CLI_FORMAT_ONNX,  /* ONNX ModelProto */
} cli_format;

cli_format cli_detect_format(const uint8_t *data, size_t len);
/* The format implied by an output file name (.dir, .pb), or UNKNOWN. */
cli_format cli_format_from_path(const char *path);

/*
 * Reads a module in any supported format (path "-" is standard input).
 * On error prints every problem and returns non-zero; the caller frees *out.
 */
int cli_load_module(const char *path, ir_module **out);

/*
 * Writes m to path ("-": standard output) as protobuf when fmt is
 * CLI_FORMAT_PB, else as IR text; fmt CLI_FORMAT_UNKNOWN means "by the
 * path's extension" (.pb: protobuf, anything else: text). Reports errors
 * itself and returns CLI_OK or CLI_FAIL.
 */
int cli_write_module(const ir_module *m, const char *path, cli_format fmt);

/*
 * A Simulate on the daemon at server (hardware by preset name, or in full
 * when hw has tables or came from a file): CLI_OK with *reply (free with
 * protobuf_c_message_free_unpacked), or CLI_FAIL after printing why.
 */
struct hw_model;
struct strategy;
struct sim_options;
struct Distir__V1__SimulateReply;
struct Distir__V1__ModelSpec;
/* spec non-NULL: the daemon generates the module from it (m is not sent). */
int cli_simulate_remote(const char *server, const ir_module *m,
                        const struct Distir__V1__ModelSpec *spec, const char *hwname,
                        const struct hw_model *hw, const struct strategy *strat,
                        const struct sim_options *o, int timeout_ms,
                        struct Distir__V1__SimulateReply **reply);

/*
 * A built-in model from `distir model` arguments (argv[0] "mlp" or "gpt",
 * then its options): CLI_OK with *out, or a CLI code after a message.
 * *outpath (may be NULL) gets the -o option's value ("-" when absent).
 */
int cli_model_build(int argc, char **argv, ir_module **out, const char **outpath);

/*
 * --model NAME and the generator's options (--batch 8, --dtype=bf16,
 * --final-ln-params, ...), as simulate and search take them: gathered as
 * given, then built here or sent to the daemon as a ModelSpec.
 */
typedef struct cli_model_ref {
    const char *name; /* NULL: no --model */
    int argc;
    char *argv[64];
} cli_model_ref;
/* 1: argv[*i] was a generator option (taken with its value), 0: it was not, -1: error said. */
int cli_model_opt(int argc, char **argv, int *i, cli_model_ref *mr);
int cli_model_ref_has(const cli_model_ref *mr, const char *key);
int cli_model_ref_build(const cli_model_ref *mr, ir_module **out);
struct hw_model;
/* Warns on stderr about the generator's defaults a planner rarely wants (f32, SGD, eager). */
void cli_warn_model_defaults(const cli_model_ref *mr, const struct hw_model *hw, int kernels);
struct Distir__V1__ModelSpec;
void cli_model_ref_proto(const cli_model_ref *mr, struct Distir__V1__ModelSpec *ms);
void cli_model_ref_proto_fini(struct Distir__V1__ModelSpec *ms);

/* Parameters of a training step: the elements of entry arguments an optimizer updates. */
uint64_t cli_module_parameters(const ir_module *m);

/* Option parsing helpers: match "--name VALUE" or "--name=VALUE". */
int cli_opt(int argc, char **argv, int *i, const char *name, const char **value);
/*
 * A two-valued option `name` at argv[*i] (`on` or `off`): 1 taken, *on_set
 * whether it was `on`; 0 not this option; -1 a usage error, reported.
 */
int cli_two_valued(int argc, char **argv, int *i, const char *name, const char *on,
                   const char *off, int *on_set);
int cli_flag(const char *arg, const char *name);
/*
 * The simulation options at argv[*i]: --math tf32|ieee into *tf32, --kernels fused|eager
 * into *fuse (and *kernels set: it was given), --grad-accum-fusion on|off into *no_gaf (1 for
 * off). 1 taken, 0 not one of them, -1 usage error (said).
 */
int cli_sim_opt(int argc, char **argv, int *i, int *tf32, int *fuse, int *no_gaf, int *kernels);
/* Whether text is a whole decimal in [lo, hi]; its value into *out. */
int cli_long_in(const char *text, long lo, long hi, long *out);

#endif
