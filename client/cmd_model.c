/*
 * cmd_model.c: `distir model mlp|gpt [OPTIONS] [-o FILE]` writes a built-in
 * model's training step (lib/models) as IR text (.dir, or "-" for standard
 * output, the default) or protobuf (.pb). `distir model presets` lists the
 * GPT presets with their parameter counts. docs/models.md describes the
 * models and the conventions the strategy transforms rely on.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ir/pb.h"
#include "models/models.h"

#define MODEL_USAGE                                                                                \
    "model mlp [--layers L] [--hidden H] [--batch B] [--input F] [--classes C]\n"                 \
    "                    [--activation relu|gelu] [--loss sce|mse] [COMMON] [-o FILE]\n"           \
    "   or: distir model gpt [--preset NAME] [--layers L] [--hidden H] [--heads A] [--seq S]\n"   \
    "                    [--vocab V] [--batch B] [--dropout P] [--final-ln-params] [COMMON]\n"     \
    "                    [-o FILE]\n"                                                              \
    "   or: distir model presets\n"                                                                \
    "COMMON: [--dtype f32|f16|bf16|f64] [--optimizer sgd|adam|none] [--lr LR] [--forward-only]\n" \
    "        [--no-annotations]; FILE ending .pb is protobuf, anything else (or -) IR text"

static int
parse_i64(const char *opt, const char *s, int64_t *out)
{
    char *end;
    long long v;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v <= 0) {
        cli_error("option '%s' needs a positive integer, got '%s'", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int
parse_double(const char *opt, const char *s, double *out)
{
    char *end;
    errno = 0;
    *out = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0') {
        cli_error("option '%s' needs a number, got '%s'", opt, s);
        return -1;
    }
    return 0;
}

/*
 * Matches one of the options both models take. Returns 1 when argv[*i] was
 * one (consumed), 0 when it was not, -1 on a bad value.
 */
static int
common_opt(int argc, char **argv, int *i, ir_dtype *dtype, models_train *t, const char **outpath)
{
    const char *v;
    int r;
    if ((r = cli_opt(argc, argv, i, "--dtype", &v)) != 0) {
        if (r < 0)
            return -1;
        *dtype = ir_dtype_from_name(v, strlen(v));
        if (!ir_dtype_is_float(*dtype)) {
            cli_error("option '--dtype' needs f32, f16, bf16 or f64, got '%s'", v);
            return -1;
        }
        return 1;
    }
    if ((r = cli_opt(argc, argv, i, "--optimizer", &v)) != 0) {
        if (r < 0)
            return -1;
        if (strcmp(v, "sgd") == 0)
            t->optimizer = XFORM_OPTIM_SGD;
        else if (strcmp(v, "adam") == 0)
            t->optimizer = XFORM_OPTIM_ADAM;
        else if (strcmp(v, "none") == 0)
            t->optimizer = XFORM_OPTIM_NONE;
        else {
            cli_error("option '--optimizer' needs sgd, adam or none, got '%s'", v);
            return -1;
        }
        return 1;
    }
    if ((r = cli_opt(argc, argv, i, "--lr", &v)) != 0)
        return r < 0 || parse_double("--lr", v, &t->lr) != 0 ? -1 : 1;
    if ((r = cli_opt(argc, argv, i, "-o", &v)) != 0) {
        if (r < 0)
            return -1;
        *outpath = v;
        return 1;
    }
    if (cli_flag(argv[*i], "--forward-only")) {
        t->forward_only = 1;
        return 1;
    }
    if (cli_flag(argv[*i], "--no-annotations")) {
        t->annotate = 0;
        return 1;
    }
    return 0;
}

/* Matches "--name N" into *out; same returns as common_opt. */
static int
int_opt(int argc, char **argv, int *i, const char *name, int64_t *out)
{
    const char *v;
    int r = cli_opt(argc, argv, i, name, &v);
    if (r <= 0)
        return r;
    return parse_i64(name, v, out) != 0 ? -1 : 1;
}

static int
model_mlp(int argc, char **argv, ir_module **out, const char **outpath_out)
{
    models_mlp c;
    const char *outpath = "-", *v;
    di_error err;
    int64_t layers = 0;
    int rc;
    models_mlp_init(&c);
    for (int i = 1; i < argc; i++) {
        int r;
        if (cli_is_help(argv[i]))
            return cli_help(MODEL_USAGE);
        if ((r = common_opt(argc, argv, &i, &c.dtype, &c.train, &outpath)) != 0 ||
            (r = int_opt(argc, argv, &i, "--layers", &layers)) != 0 ||
            (r = int_opt(argc, argv, &i, "--hidden", &c.hidden)) != 0 ||
            (r = int_opt(argc, argv, &i, "--batch", &c.batch)) != 0 ||
            (r = int_opt(argc, argv, &i, "--input", &c.input)) != 0 ||
            (r = int_opt(argc, argv, &i, "--classes", &c.classes)) != 0) {
            if (r < 0)
                return CLI_USAGE;
            if (layers)
                c.layers = layers > 100000 ? 100001 : (uint32_t)layers;
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--activation", &v)) != 0) {
            if (r < 0)
                return CLI_USAGE;
            if (strcmp(v, "relu") == 0)
                c.act = MODELS_ACT_RELU;
            else if (strcmp(v, "gelu") == 0)
                c.act = MODELS_ACT_GELU;
            else {
                cli_error("option '--activation' needs relu or gelu, got '%s'", v);
                return CLI_USAGE;
            }
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--loss", &v)) != 0) {
            if (r < 0)
                return CLI_USAGE;
            if (strcmp(v, "sce") == 0)
                c.loss = MODELS_LOSS_SCE;
            else if (strcmp(v, "mse") == 0)
                c.loss = MODELS_LOSS_MSE;
            else {
                cli_error("option '--loss' needs sce or mse, got '%s'", v);
                return CLI_USAGE;
            }
            continue;
        }
        cli_error("unknown option '%s' for 'model mlp'", argv[i]);
        return cli_usage(MODEL_USAGE);
    }
    di_error_clear(&err);
    if ((rc = models_mlp_build(&c, out, &err)) != 0) {
        cli_error("cannot build the MLP: %s", err.msg);
        return rc == DI_EINVAL ? CLI_USAGE : CLI_FAIL;
    }
    *outpath_out = outpath;
    return CLI_OK;
}

static int
model_gpt(int argc, char **argv, ir_module **out, const char **outpath_out)
{
    models_gpt c;
    const char *outpath = "-", *v, *preset = NULL;
    di_error err;
    int64_t layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 0, batch = 0;
    int rc;
    models_gpt_init(&c);
    /* The preset first, so that the other options override it whatever their order. */
    for (int i = 1; i < argc; i++) {
        int r;
        if (cli_is_help(argv[i]))
            return cli_help(MODEL_USAGE);
        r = cli_opt(argc, argv, &i, "--preset", &v);
        if (r < 0)
            return CLI_USAGE;
        if (r > 0)
            preset = v;
    }
    di_error_clear(&err);
    if (preset && models_gpt_preset(preset, &c, &err) != 0) {
        cli_error("%s", err.msg);
        return CLI_USAGE;
    }
    for (int i = 1; i < argc; i++) {
        int r;
        if ((r = cli_opt(argc, argv, &i, "--preset", &v)) != 0)
            continue;
        if ((r = common_opt(argc, argv, &i, &c.dtype, &c.train, &outpath)) != 0 ||
            (r = int_opt(argc, argv, &i, "--layers", &layers)) != 0 ||
            (r = int_opt(argc, argv, &i, "--hidden", &hidden)) != 0 ||
            (r = int_opt(argc, argv, &i, "--heads", &heads)) != 0 ||
            (r = int_opt(argc, argv, &i, "--seq", &seq)) != 0 ||
            (r = int_opt(argc, argv, &i, "--vocab", &vocab)) != 0 ||
            (r = int_opt(argc, argv, &i, "--batch", &batch)) != 0) {
            if (r < 0)
                return CLI_USAGE;
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--dropout", &v)) != 0) {
            if (r < 0 || parse_double("--dropout", v, &c.dropout) != 0)
                return CLI_USAGE;
            continue;
        }
        if (cli_flag(argv[i], "--final-ln-params")) {
            c.final_ln_params = 1;
            continue;
        }
        cli_error("unknown option '%s' for 'model gpt'", argv[i]);
        return cli_usage(MODEL_USAGE);
    }
    if (layers)
        c.layers = layers > 100000 ? 100001 : (uint32_t)layers;
    if (hidden)
        c.hidden = hidden;
    if (heads)
        c.heads = heads;
    if (seq)
        c.seq = seq;
    if (vocab)
        c.vocab = vocab;
    if (batch)
        c.batch = batch;
    if ((rc = models_gpt_build(&c, out, &err)) != 0) {
        cli_error("cannot build the GPT: %s", err.msg);
        return rc == DI_EINVAL ? CLI_USAGE : CLI_FAIL;
    }
    *outpath_out = outpath;
    return CLI_OK;
}

static int
model_presets(void)
{
    for (uint32_t i = 0; models_gpt_preset_name(i); i++) {
        models_gpt c;
        models_gpt_init(&c);
        models_gpt_preset(models_gpt_preset_name(i), &c, NULL);
        printf("%-10s layers %-4u hidden %-6lld heads %-4lld seq %lld vocab %lld: %.4g B "
               "parameters\n",
               models_gpt_preset_name(i), c.layers, (long long)c.hidden, (long long)c.heads,
               (long long)c.seq, (long long)c.vocab, (double)models_gpt_parameters(&c) / 1e9);
    }
    return CLI_OK;
}

int
cli_model_build(int argc, char **argv, ir_module **out, const char **outpath)
{
    const char *ignored;
    *out = NULL;
    if (strcmp(argv[0], "mlp") == 0)
        return model_mlp(argc, argv, out, outpath ? outpath : &ignored);
    if (strcmp(argv[0], "gpt") == 0)
        return model_gpt(argc, argv, out, outpath ? outpath : &ignored);
    cli_error("unknown model '%s' (mlp, gpt, or a preset: distir model presets)", argv[0]);
    return CLI_USAGE;
}

int
cmd_model(int argc, char **argv)
{
    if (argc < 2)
        return cli_usage(MODEL_USAGE);
    if (strcmp(argv[1], "mlp") == 0 || strcmp(argv[1], "gpt") == 0) {
        ir_module *m;
        const char *outpath;
        int rc = cli_model_build(argc - 1, argv + 1, &m, &outpath);
        if (rc != CLI_OK || m == NULL) /* an error, or --help answered */
            return rc;
        rc = cli_write_module(m, outpath, CLI_FORMAT_UNKNOWN);
        ir_module_free(m);
        return rc;
    }
    if (strcmp(argv[1], "presets") == 0 && argc == 2)
        return model_presets();
    if (cli_is_help(argv[1]))
        return cli_help(MODEL_USAGE);
    cli_error("unknown model '%s' (mlp, gpt or presets)", argv[1]);
    return cli_usage(MODEL_USAGE);
}
