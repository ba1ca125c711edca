/*
 * spec.c: a model by name and options (models_spec), the one description
 * of a built-in model that `distir model`, `distir simulate --model`, the
 * daemon's ModelSpec and the Python client share. Options are the
 * generator's, named as on the command line without "--" ("batch",
 * "dtype", "final-ln-params"), each parsed and checked here, so every entry
 * point accepts and refuses the same things with the same messages.
 */
#include "models/models.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The options and the models that take them (bit 0 MLP, 1 GPT, 2 Llama); arity 0 is a flag. */
static const struct spec_opt {
    const char *key;
    int arity;
    unsigned models;
} spec_opts[] = {
    {"layers", 1, 7},
    {"hidden", 1, 7},
    {"batch", 1, 7},
    {"dtype", 1, 7},
    {"optimizer", 1, 7},
    {"lr", 1, 7},
    {"forward-only", 0, 7},
    {"no-annotations", 0, 7},
    {"input", 1, 1},
    {"classes", 1, 1},
    {"activation", 1, 1},
    {"loss", 1, 1},
    {"heads", 1, 6},
    {"seq", 1, 6},
    {"vocab", 1, 6},
    {"dropout", 1, 2},
    {"final-ln-params", 0, 2},
    {"kv-heads", 1, 4},
    {"ffn", 1, 4},
    {"precision", 1, 7},
    {"experts", 1, 4},
    {"top-k", 1, 4},
    {"moe-ffn", 1, 4},
    {"shared-experts", 1, 4},
    {"moe-every", 1, 4},
    {"first-dense", 1, 4},
    {"capacity-factor", 1, 4},
    {"imbalance", 1, 4},
    {"attention", 1, 6},
    {"q-lora", 1, 4},
    {"kv-lora", 1, 4},
    {"qk-nope-dim", 1, 4},
    {"rope-dim", 1, 4},
    {"v-head-dim", 1, 4},
};

static const char *const kind_names[] = {"", "mlp", "gpt", "llama"};

#define NOPT (sizeof spec_opts / sizeof spec_opts[0])

static const struct spec_opt *
find_opt(const char *key)
{
    for (size_t i = 0; i < NOPT; i++)
        if (strcmp(spec_opts[i].key, key) == 0)
            return &spec_opts[i];
    return NULL;
}

int
models_spec_arity(const char *key)
{
    const struct spec_opt *o = find_opt(key);
    return o ? o->arity : -1;
}

int
models_spec_init(models_spec *sp, const char *name, di_error *err)
{
    memset(sp, 0, sizeof *sp);
    if (name == NULL || name[0] == '\0')
        return di_error_set(err, DI_EINVAL, "a model needs a name (mlp, gpt or a preset)");
    if (strlen(name) >= sizeof sp->name)
        return di_error_set(err, DI_EINVAL, "model name too long");
    snprintf(sp->name, sizeof sp->name, "%s", name);
    if (strcmp(name, "mlp") == 0) {
        sp->kind = MODELS_SPEC_MLP;
        models_mlp_init(&sp->mlp);
        return 0;
    }
    if (strcmp(name, "llama") == 0 || models_llama_preset(name, &sp->llama, NULL) == 0) {
        sp->kind = MODELS_SPEC_LLAMA;
        models_llama_init(&sp->llama);
        return strcmp(name, "llama") == 0 ? 0 : models_llama_preset(name, &sp->llama, err);
    }
    sp->kind = MODELS_SPEC_GPT;
    models_gpt_init(&sp->gpt);
    if (strcmp(name, "gpt") == 0)
        return 0;
    if (models_gpt_preset(name, &sp->gpt, NULL) == 0)
        return 0;
    {
        char known[512];
        size_t len = 0;
        const char *n;
        for (uint32_t i = 0; (n = models_gpt_preset_name(i)) != NULL && len < sizeof known; i++)
            len += (size_t)snprintf(known + len, sizeof known - len, "%s, ", n);
        for (uint32_t i = 0; (n = models_llama_preset_name(i)) != NULL && len < sizeof known; i++)
            len += (size_t)snprintf(known + len, sizeof known - len, "%s%s", i ? ", " : "", n);
        return di_error_set(err, DI_ENOTFOUND,
                            "unknown model '%s' (mlp, gpt, llama or a preset; "
                            "known: %s)",
                            name, known);
    }
}

static int
parse_pos(const char *key, const char *v, int64_t *out, di_error *err)
{
    char *end;
    long long x;
    errno = 0;
    x = strtoll(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || x <= 0)
        return di_error_set(err, DI_EINVAL, "option '--%s' needs a positive integer, got '%s'", key,
                            v);
    *out = x;
    return 0;
}

static int
parse_real(const char *key, const char *v, double *out, di_error *err)
{
    char *end;
    errno = 0;
    *out = strtod(v, &end);
    if (errno != 0 || end == v || *end != '\0' || *out != *out)
        return di_error_set(err, DI_EINVAL, "option '--%s' needs a number, got '%s'", key, v);
    return 0;
}

/* One of names[] (NULL-terminated): its index, or DI_EINVAL naming them. */
static int
parse_word(const char *key, const char *v, const char *const *names, int *out, di_error *err)
{
    char list[128] = "";
    size_t len = 0;
    for (int i = 0; names[i]; i++) {
        if (strcmp(v, names[i]) == 0) {
            *out = i;
            return 0;
        }
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s",
                                i == 0         ? ""
                                : names[i + 1] ? ", "
                                               : " or ",
                                names[i]);
    }
    return di_error_set(err, DI_EINVAL, "option '--%s' needs %s, got '%s'", key, list, v);
}

int
models_spec_set(models_spec *sp, const char *key, const char *value, di_error *err)
{
    static const char *const dtypes[] = {"f32", "f16", "bf16", "f64", NULL};
    static const ir_dtype dtype_ids[] = {IR_F32, IR_F16, IR_BF16, IR_F64};
    static const char *const optims[] = {"sgd", "adam", "none", NULL};
    static const xform_optim optim_ids[] = {XFORM_OPTIM_SGD, XFORM_OPTIM_ADAM, XFORM_OPTIM_NONE};
    static const char *const acts[] = {"relu", "gelu", NULL};
    static const char *const losses[] = {"sce", "mse", NULL};
    static const char *const precisions[] = {"mixed", "mixed-grad16", "pure", "mixed-grad32",
                                             NULL};
    const struct spec_opt *o = find_opt(key);
    int gpt = sp->kind == MODELS_SPEC_GPT, llama = sp->kind == MODELS_SPEC_LLAMA, w;
    models_train *t = gpt ? &sp->gpt.train : llama ? &sp->llama.train : &sp->mlp.train;
    ir_dtype *dtype = gpt ? &sp->gpt.dtype : llama ? &sp->llama.dtype : &sp->mlp.dtype;
    int64_t n = 0;
    double x = 0;
    if (o == NULL || !(o->models & (1u << (sp->kind - 1))))
        return di_error_set(err, DI_ENOTFOUND, "unknown option '--%s' for model %s", key,
                            kind_names[sp->kind]);
    if (o->arity == 1 && value == NULL)
        return di_error_set(err, DI_EINVAL, "option '--%s' needs a value", key);
    if (o->arity == 0) {
        if (value != NULL && value[0] != '\0')
            return di_error_set(err, DI_EINVAL, "option '--%s' takes no value", key);
        if (strcmp(key, "forward-only") == 0)
            t->forward_only = 1;
        else if (strcmp(key, "no-annotations") == 0)
            t->annotate = 0;
        else
            sp->gpt.final_ln_params = 1;
        return 0;
    }
    if (strcmp(key, "dtype") == 0) {
        if (parse_word(key, value, dtypes, &w, err) != 0)
            return DI_EINVAL;
        *dtype = dtype_ids[w];
    } else if (strcmp(key, "optimizer") == 0) {
        if (parse_word(key, value, optims, &w, err) != 0)
            return DI_EINVAL;
        t->optimizer = optim_ids[w];
    } else if (strcmp(key, "precision") == 0) {
        if (parse_word(key, value, precisions, &w, err) != 0)
            return DI_EINVAL;
        t->precision = w;
    } else if (strcmp(key, "activation") == 0) {
        if (parse_word(key, value, acts, &w, err) != 0)
            return DI_EINVAL;
        sp->mlp.act = w ? MODELS_ACT_GELU : MODELS_ACT_RELU;
    } else if (strcmp(key, "loss") == 0) {
        if (parse_word(key, value, losses, &w, err) != 0)
            return DI_EINVAL;
        sp->mlp.loss = w ? MODELS_LOSS_MSE : MODELS_LOSS_SCE;
    } else if (strcmp(key, "attention") == 0) {
        static const char *const kinds[] = {"naive", "fused", NULL};
        if (parse_word(key, value, kinds, &w, err) != 0)
            return DI_EINVAL;
        if (gpt)
            sp->gpt.fused_attention = w;
        else
            sp->llama.fused_attention = w;
    } else if (strcmp(key, "capacity-factor") == 0 || strcmp(key, "imbalance") == 0) {
        if (parse_real(key, value, &x, err) != 0)
            return DI_EINVAL;
        *(key[0] == 'c' ? &sp->llama.capacity_factor : &sp->llama.imbalance) = x;
    } else if (strcmp(key, "q-lora") == 0 || strcmp(key, "kv-lora") == 0) {
        /* 0 allowed: no latent (queries directly; no latent attention). */
        if (strcmp(value, "0") != 0 && parse_pos(key, value, &n, err) != 0)
            return DI_EINVAL;
        *(key[0] == 'q' ? &sp->llama.q_lora : &sp->llama.kv_lora) = strcmp(value, "0") ? n : 0;
    } else if (strcmp(key, "qk-nope-dim") == 0 || strcmp(key, "rope-dim") == 0 ||
               strcmp(key, "v-head-dim") == 0) {
        if (parse_pos(key, value, &n, err) != 0)
            return DI_EINVAL;
        *(key[0] == 'q' ? &sp->llama.qk_nope : key[0] == 'r' ? &sp->llama.rope_dim
                                                              : &sp->llama.v_head) = n;
    } else if (strcmp(key, "experts") == 0 || strcmp(key, "shared-experts") == 0 ||
               strcmp(key, "first-dense") == 0) {
        /* 0 allowed: a dense model, no shared expert, no dense layer first. */
        if (strcmp(value, "0") != 0 && parse_pos(key, value, &n, err) != 0)
            return DI_EINVAL;
        if (strcmp(value, "0") == 0)
            n = 0;
        if (key[0] == 'e')
            sp->llama.experts = n;
        else if (key[0] == 's')
            sp->llama.shared_experts = n;
        else
            sp->llama.first_dense = n > MODELS_MAX_LAYERS ? MODELS_MAX_LAYERS + 1 : (uint32_t)n;
    } else if (strcmp(key, "lr") == 0 || strcmp(key, "dropout") == 0) {
        if (parse_real(key, value, &x, err) != 0)
            return DI_EINVAL;
        *(strcmp(key, "lr") == 0 ? &t->lr : &sp->gpt.dropout) = x;
    } else {
        if (parse_pos(key, value, &n, err) != 0)
            return DI_EINVAL;
        if (strcmp(key, "layers") == 0) {
            /* Beyond any real model; the generator refuses it by name. */
            uint32_t l = n > MODELS_MAX_LAYERS ? MODELS_MAX_LAYERS + 1 : (uint32_t)n;
            *(gpt ? &sp->gpt.layers : llama ? &sp->llama.layers : &sp->mlp.layers) = l;
        } else if (strcmp(key, "hidden") == 0) {
            *(gpt ? &sp->gpt.hidden : llama ? &sp->llama.hidden : &sp->mlp.hidden) = n;
        } else if (strcmp(key, "batch") == 0) {
            *(gpt ? &sp->gpt.batch : llama ? &sp->llama.batch : &sp->mlp.batch) = n;
        } else if (strcmp(key, "input") == 0) {
            sp->mlp.input = n;
        } else if (strcmp(key, "classes") == 0) {
            sp->mlp.classes = n;
        } else if (strcmp(key, "heads") == 0) {
            *(gpt ? &sp->gpt.heads : &sp->llama.heads) = n;
        } else if (strcmp(key, "seq") == 0) {
            *(gpt ? &sp->gpt.seq : &sp->llama.seq) = n;
        } else if (strcmp(key, "vocab") == 0) {
            *(gpt ? &sp->gpt.vocab : &sp->llama.vocab) = n;
        } else if (strcmp(key, "kv-heads") == 0) {
            sp->llama.kv_heads = n;
        } else if (strcmp(key, "top-k") == 0) {
            sp->llama.top_k = n;
        } else if (strcmp(key, "moe-ffn") == 0) {
            sp->llama.moe_ffn = n;
        } else if (strcmp(key, "moe-every") == 0) {
            sp->llama.moe_every = n > MODELS_MAX_LAYERS ? MODELS_MAX_LAYERS + 1 : (uint32_t)n;
        } else {
            sp->llama.ffn = n;
        }
    }
    return 0;
}

uint32_t
models_spec_layers(const models_spec *sp)
{
    return sp->kind == MODELS_SPEC_GPT     ? sp->gpt.layers
           : sp->kind == MODELS_SPEC_LLAMA ? sp->llama.layers
                                           : sp->mlp.layers;
}

int
models_spec_build(const models_spec *sp, ir_module **out, di_error *err)
{
    if (sp->kind == MODELS_SPEC_LLAMA)
        return models_llama_build(&sp->llama, out, err);
    return sp->kind == MODELS_SPEC_GPT ? models_gpt_build(&sp->gpt, out, err)
                                       : models_mlp_build(&sp->mlp, out, err);
}
