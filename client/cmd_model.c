/*
 * cmd_model.c: `distir model mlp|gpt [OPTIONS] [-o FILE]` writes a built-in
 * model's training step (lib/models) as IR text (.dir, or "-" for standard
 * output, the default) or protobuf (.pb). `distir model presets` lists the
 * GPT presets with their parameter counts. docs/models.md describes the
 * models and the conventions the strategy transforms rely on.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "distir.pb-c.h"
#include "ir/pb.h"
#include "models/models.h"
#include "sim/hw.h"

#define MODEL_USAGE                                                                                \
    "model mlp [--layers L] [--hidden H] [--batch B] [--input F] [--classes C]\n"                 \
    "                    [--activation relu|gelu] [--loss sce|mse] [COMMON] [-o FILE]\n"           \
    "   or: distir model gpt [--preset NAME] [--layers L] [--hidden H] [--heads A] [--seq S]\n"   \
    "                    [--vocab V] [--batch B] [--dropout P] [--final-ln-params]\n"              \
    "                    [--attention naive|fused] [COMMON] [-o FILE]\n"                          \
    "   or: distir model llama [--preset NAME] [--layers L] [--hidden H] [--heads A]\n"           \
    "                    [--kv-heads K] [--ffn F] [--seq S] [--vocab V] [--batch B]\n"            \
    "                    [--experts E [--top-k K] [--moe-ffn F] [--shared-experts N]\n"          \
    "                    [--moe-every N] [--first-dense N] [--capacity-factor F]\n"              \
    "                    [--imbalance X]] [--attention naive|fused] [--kv-lora R\n"               \
    "                    --qk-nope-dim D --rope-dim D --v-head-dim D [--q-lora R]] [COMMON]\n"   \
    "                    [-o FILE]\n"                                                              \
    "   or: distir model presets\n"                                                                \
    "COMMON: [--dtype f32|f16|bf16|f64] [--optimizer sgd|adam|none] [--lr LR] [--forward-only]\n" \
    "        [--precision mixed|mixed-grad16|mixed-grad32|pure] [--no-annotations]; FILE\n"        \
    "        ending .pb is protobuf, anything else (or -) IR text"

/*
 * Parses `distir model mlp|gpt [OPTIONS]` (argv[0] is the model) into *sp
 * (lib/models/spec.c checks each option). Returns CLI_OK, CLI_USAGE, or
 * CLI_OK with sp->kind 0 when --help was answered.
 */
static int
model_spec(int argc, char **argv, models_spec *sp, const char **outpath)
{
    const char *name = argv[0], *v;
    di_error err;
    /* The preset first, so that the other options override it whatever their order. */
    for (int i = 1; i < argc; i++) {
        int r;
        if (cli_is_help(argv[i])) {
            memset(sp, 0, sizeof *sp);
            return cli_help(MODEL_USAGE);
        }
        if (strcmp(argv[0], "mlp") != 0 && (r = cli_opt(argc, argv, &i, "--preset", &v)) != 0) {
            if (r < 0)
                return CLI_USAGE;
            name = v;
        }
    }
    di_error_clear(&err);
    if (models_spec_init(sp, name, &err) != 0) {
        cli_error("%s", err.msg);
        return CLI_USAGE;
    }
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *eq;
        char key[32];
        size_t n;
        int arity, r;
        if (strcmp(argv[0], "mlp") != 0 && (r = cli_opt(argc, argv, &i, "--preset", &v)) != 0)
            continue;
        if ((r = cli_opt(argc, argv, &i, "-o", &v)) != 0) {
            if (r < 0)
                return CLI_USAGE;
            *outpath = v;
            continue;
        }
        eq = strchr(arg, '=');
        n = eq ? (size_t)(eq - arg) : strlen(arg);
        if (strncmp(arg, "--", 2) != 0 || n - 2 >= sizeof key)
            goto unknown;
        memcpy(key, arg + 2, n - 2);
        key[n - 2] = '\0';
        if ((arity = models_spec_arity(key)) < 0)
            goto unknown;
        if (arity == 1 && eq == NULL) {
            if (i + 1 >= argc) {
                cli_error("option '%s' needs a value", arg);
                return CLI_USAGE;
            }
            v = argv[++i];
        } else {
            v = eq ? eq + 1 : NULL;
        }
        if ((r = models_spec_set(sp, key, v, &err)) != 0) {
            if (r == DI_ENOTFOUND)
                goto unknown;
            cli_error("%s", err.msg);
            return CLI_USAGE;
        }
        continue;
    unknown:
        cli_error("unknown option '%s' for 'model %s'", arg, argv[0]);
        return cli_usage(MODEL_USAGE);
    }
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
    for (uint32_t i = 0; models_llama_preset_name(i); i++) {
        models_llama c;
        models_llama_init(&c);
        models_llama_preset(models_llama_preset_name(i), &c, NULL);
        printf("%-11s layers %-4u hidden %-6lld heads %-4lld kv-heads %-3lld ffn %-6lld seq %lld "
               "vocab %lld: %.4g B parameters\n",
               models_llama_preset_name(i), c.layers, (long long)c.hidden, (long long)c.heads,
               (long long)c.kv_heads, (long long)c.ffn, (long long)c.seq, (long long)c.vocab,
               (double)models_llama_parameters(&c) / 1e9);
        if (c.experts)
            printf("%-11s experts %lld of ffn %lld, top %lld, %lld shared, MoE from layer %u: "
                   "%.4g B active\n",
                   "", (long long)c.experts, (long long)models_llama_moe_ffn(&c),
                   (long long)c.top_k, (long long)c.shared_experts, c.first_dense,
                   (double)models_llama_active_parameters(&c) / 1e9);
    }
    return CLI_OK;
}

int
cli_model_build(int argc, char **argv, ir_module **out, const char **outpath)
{
    const char *path = "-";
    models_spec sp;
    di_error err;
    int rc;
    *out = NULL;
    if (strcmp(argv[0], "mlp") != 0 && strcmp(argv[0], "gpt") != 0 &&
        strcmp(argv[0], "llama") != 0) {
        cli_error("unknown model '%s' (mlp, gpt, or a preset: distir model presets)", argv[0]);
        return CLI_USAGE;
    }
    if ((rc = model_spec(argc, argv, &sp, &path)) != CLI_OK || sp.kind == 0)
        return rc;
    di_error_clear(&err);
    if ((rc = models_spec_build(&sp, out, &err)) != 0) {
        cli_error("cannot build the %s: %s",
                  sp.kind == MODELS_SPEC_GPT     ? "GPT"
                  : sp.kind == MODELS_SPEC_LLAMA ? "Llama"
                                                 : "MLP",
                  err.msg);
        return rc == DI_EINVAL ? CLI_USAGE : CLI_FAIL;
    }
    if (outpath)
        *outpath = path;
    return CLI_OK;
}

/* ---- --model NAME [options] of simulate and search ---- */

/* "--key" or "--key=value" of a generator option: its arity (0 flag, 1 value), or -1. */
static int
model_option(const char *arg, char *key, size_t n)
{
    const char *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    if (strncmp(arg, "--", 2) != 0 || len < 3 || len - 2 >= n)
        return -1;
    memcpy(key, arg + 2, len - 2);
    key[len - 2] = '\0';
    return models_spec_arity(key);
}

int
cli_model_opt(int argc, char **argv, int *i, cli_model_ref *mr)
{
    char key[32];
    int arity = model_option(argv[*i], key, sizeof key);
    if (arity < 0)
        return 0;
    if (mr->argc + 2 > (int)(sizeof mr->argv / sizeof mr->argv[0])) {
        cli_error("too many model options");
        return -1;
    }
    mr->argv[mr->argc++] = argv[*i];
    if (!strchr(argv[*i], '=') && arity == 1) {
        if (*i + 1 >= argc) {
            cli_error("option '%s' needs a value", argv[*i]);
            return -1;
        }
        mr->argv[mr->argc++] = argv[++*i];
    }
    return 1;
}

int
cli_model_ref_has(const cli_model_ref *mr, const char *key)
{
    char k[32];
    for (int j = 0; j < mr->argc; j++)
        if (model_option(mr->argv[j], k, sizeof k) >= 0 && strcmp(k, key) == 0)
            return 1;
    return 0;
}

int
cli_model_ref_build(const cli_model_ref *mr, ir_module **out)
{
    /* "gpt", "mlp" or "llama" with their options, or a preset name: gpt or llama --preset. */
    char *pargv[3 + sizeof mr->argv / sizeof mr->argv[0]];
    int pargc = 0, rc;
    models_llama probe;
    int builtin = strcmp(mr->name, "gpt") == 0 || strcmp(mr->name, "mlp") == 0 ||
                  strcmp(mr->name, "llama") == 0;
    int llama = models_llama_preset(mr->name, &probe, NULL) == 0;
    pargv[pargc++] = builtin ? (char *)mr->name : llama ? (char *)"llama" : (char *)"gpt";
    if (!builtin) {
        pargv[pargc++] = (char *)"--preset";
        pargv[pargc++] = (char *)mr->name;
    }
    for (int j = 0; j < mr->argc; j++)
        pargv[pargc++] = mr->argv[j];
    if ((rc = cli_model_build(pargc, pargv, out, NULL)) != CLI_OK || *out == NULL)
        return rc != CLI_OK ? rc : CLI_USAGE;
    return CLI_OK;
}

void
cli_model_ref_proto(const cli_model_ref *mr, Distir__V1__ModelSpec *ms)
{
    distir__v1__model_spec__init(ms);
    ms->name = (char *)mr->name;
    ms->options = di_xcalloc((size_t)mr->argc + 1, sizeof *ms->options);
    for (int j = 0; j < mr->argc; j++) {
        Distir__V1__ModelOption *o = di_xcalloc(1, sizeof *o);
        char key[32];
        const char *eq = strchr(mr->argv[j], '=');
        int arity = model_option(mr->argv[j], key, sizeof key);
        distir__v1__model_option__init(o);
        o->key = di_xstrdup(key);
        if (eq)
            o->value = di_xstrdup(eq + 1);
        else if (arity == 1 && j + 1 < mr->argc)
            o->value = di_xstrdup(mr->argv[++j]);
        else
            o->value = di_xstrdup("");
        ms->options[ms->n_options++] = o;
    }
}

void
cli_model_ref_proto_fini(Distir__V1__ModelSpec *ms)
{
    for (size_t k = 0; k < ms->n_options; k++) {
        di_free(ms->options[k]->key);
        di_free(ms->options[k]->value);
        di_free(ms->options[k]);
    }
    di_free(ms->options);
}

int
cmd_model(int argc, char **argv)
{
    if (argc < 2)
        return cli_usage(MODEL_USAGE);
    if (strcmp(argv[1], "mlp") == 0 || strcmp(argv[1], "gpt") == 0 ||
        strcmp(argv[1], "llama") == 0) {
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
    cli_error("unknown model '%s' (mlp, gpt, llama or presets)", argv[1]);
    return cli_usage(MODEL_USAGE);
}

/*
 * --model with the generator's defaults that a planner rarely wants: f32 on
 * a device with a faster bf16 rate, SGD for a language model, and the
 * simulator's one kernel per element-wise op for a language model, which
 * training frameworks fuse. Warned once each on stderr (distir simulate and
 * distir search); giving --dtype, --optimizer or --kernels silences them.
 */
void
cli_warn_model_defaults(const cli_model_ref *mr, const struct hw_model *hw, int kernels)
{
    int dtype = cli_model_ref_has(mr, "dtype"), optimizer = cli_model_ref_has(mr, "optimizer");
    if (!dtype && hw->device.flops[IR_BF16] > 1.5 * hw->device.flops[IR_F32])
        fprintf(stderr,
                "distir: warning: the model computes in f32 (the default) while %s runs bf16 "
                "%.0fx faster; training runs use --dtype bf16 (or --math tf32 for f32 matrix "
                "products on tensor cores)\n",
                hw->device.kind[0] ? hw->device.kind : hw->name,
                hw->device.flops[IR_BF16] / hw->device.flops[IR_F32]);
    if (!optimizer && strcmp(mr->name, "mlp") != 0)
        fprintf(stderr, "distir: warning: the model trains with SGD (the default); language "
                        "models train with Adam (--optimizer adam), whose moments take 8 more "
                        "bytes per parameter\n");
    if (!kernels && strcmp(mr->name, "mlp") != 0)
        fprintf(stderr, "distir: warning: every element-wise op runs as a kernel of its own "
                        "(--kernels eager, the default); Megatron-LM, DeepSpeed and compilers "
                        "fuse them (--kernels fused, as distir validate simulates measured "
                        "runs)\n");
}
