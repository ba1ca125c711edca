/*
 * strategy_flags.c: parsing of the strategy flags into a distir.v1.Strategy
 * and the hand-off to the transforms.
 */
#include "strategy_flags.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "xform/xform.h"

static int
parse_uint(const char *flag, const char *v, uint32_t max, uint32_t *out)
{
    char *end;
    unsigned long x = strtoul(v, &end, 10);
    if (*v == '\0' || *end != '\0' || x > max || (v[0] == '-')) {
        cli_error("option '%s' needs an integer from 0 to %u, got '%s'", flag, max, v);
        return -1;
    }
    *out = (uint32_t)x;
    return 1;
}

/*
 * --stages and --tp-layers keep their values here: the CLI parses one
 * strategy per run, and the proto points at them.
 */
#define MAX_STAGES 4096
#define MAX_TP_LAYERS 65536
static Distir__V1__PipelineStage stage_buf[MAX_STAGES];
static Distir__V1__PipelineStage *stage_ptr[MAX_STAGES];
static uint32_t tp_layer_buf[MAX_TP_LAYERS];

/* A decimal number from min to max at *p (digits only), *p moved past it. */
static int
read_num(const char **p, unsigned long min, unsigned long max, unsigned long *out)
{
    char *end;
    if (**p < '0' || **p > '9')
        return 0;
    *out = strtoul(*p, &end, 10);
    *p = end;
    return *out >= min && *out <= max;
}

/* After a list entry: a comma before the next one, or the end. */
static int
list_next(const char **p)
{
    if (**p == ',' && (*p)[1] != '\0') {
        (*p)++;
        return 1;
    }
    return **p == '\0';
}

/* "DPxTP[:LAYERS],..." (one entry per pipeline stage). */
static int
parse_stages(const char *v, Distir__V1__Strategy *s)
{
    const char *p = v;
    size_t n = 0;
    while (*p) {
        unsigned long dp, tp, layers = 0;
        if (n == MAX_STAGES || !read_num(&p, 1, 1u << 20, &dp) || *p++ != 'x' ||
            !read_num(&p, 1, 1u << 20, &tp))
            goto bad;
        if (*p == ':' && (++p, !read_num(&p, 1, 1u << 20, &layers)))
            goto bad;
        distir__v1__pipeline_stage__init(&stage_buf[n]);
        stage_buf[n].dp = (uint32_t)dp;
        stage_buf[n].tp = (uint32_t)tp;
        stage_buf[n].layers = (uint32_t)layers;
        stage_ptr[n] = &stage_buf[n];
        n++;
        if (!list_next(&p))
            goto bad;
    }
    if (n == 0)
        goto bad;
    s->n_stages = n;
    s->stages = stage_ptr;
    return 1;
bad:
    cli_error("option '--stages' needs DPxTP[:LAYERS] per pipeline stage, comma-separated "
              "(e.g. 4x1:10,2x2:14), got '%s'",
              v);
    return -1;
}

/* "A-B,C,..." layer numbers. */
static int
parse_layers(const char *v, Distir__V1__Strategy *s)
{
    const char *p = v;
    size_t n = 0;
    while (*p) {
        unsigned long a, b;
        if (!read_num(&p, 0, INT32_MAX, &a))
            goto bad;
        b = a;
        if (*p == '-' && (++p, !read_num(&p, 0, INT32_MAX, &b)))
            goto bad;
        if (a > b || b - a >= MAX_TP_LAYERS - n)
            goto bad;
        for (unsigned long l = a; l <= b; l++)
            tp_layer_buf[n++] = (uint32_t)l;
        if (!list_next(&p))
            goto bad;
    }
    if (n == 0)
        goto bad;
    s->n_tp_layers = n;
    s->tp_layers = tp_layer_buf;
    return 1;
bad:
    cli_error("option '--tp-layers' needs layer numbers and ranges, comma-separated (e.g. "
              "0-11,16), got '%s'",
              v);
    return -1;
}

int
cli_strategy_flag(int argc, char **argv, int *i, Distir__V1__Strategy *s)
{
    static const struct {
        const char *flag;
        size_t off;
        uint32_t max;
    } degrees[] = {
        {"--dp", offsetof(Distir__V1__Strategy, dp), 1u << 20},
        {"--tp", offsetof(Distir__V1__Strategy, tp), 1u << 20},
        {"--pp", offsetof(Distir__V1__Strategy, pp), 1u << 20},
        {"--microbatches", offsetof(Distir__V1__Strategy, microbatches), 1u << 20},
        {"--virtual-stages", offsetof(Distir__V1__Strategy, virtual_stages), 1024},
        {"--zero", offsetof(Distir__V1__Strategy, zero), 3},
        {"--bucket-mb", offsetof(Distir__V1__Strategy, bucket_mb), 1u << 20},
    };
    const char *v;
    int r;
    if (cli_flag(argv[*i], "--sequence-parallel")) {
        s->sequence_parallel = 1;
        return 1;
    }
    if (cli_flag(argv[*i], "--overlap-grad-reduce")) {
        s->overlap_grad_reduce = 1;
        return 1;
    }
    for (size_t k = 0; k < sizeof degrees / sizeof degrees[0]; k++) {
        r = cli_opt(argc, argv, i, degrees[k].flag, &v);
        if (r < 0)
            return -1;
        if (r > 0)
            return parse_uint(degrees[k].flag, v, degrees[k].max,
                              (uint32_t *)((char *)s + degrees[k].off));
    }
    if ((r = cli_opt(argc, argv, i, "--stages", &v)) != 0)
        return r < 0 ? -1 : parse_stages(v, s);
    if ((r = cli_opt(argc, argv, i, "--tp-layers", &v)) != 0)
        return r < 0 ? -1 : parse_layers(v, s);
    if ((r = cli_opt(argc, argv, i, "--schedule", &v)) != 0) {
        if (r < 0)
            return -1;
        if (strcmp(v, "gpipe") == 0) {
            s->schedule = DISTIR__V1__SCHEDULE__SCHEDULE_GPIPE;
        } else if (strcmp(v, "1f1b") == 0) {
            s->schedule = DISTIR__V1__SCHEDULE__SCHEDULE_1F1B;
        } else if (strncmp(v, "interleaved", 11) == 0) {
            s->schedule = DISTIR__V1__SCHEDULE__SCHEDULE_INTERLEAVED;
            if (v[11] == ':' && parse_uint("--schedule interleaved:V", v + 12, 1024,
                                           &s->virtual_stages) < 0)
                return -1;
        } else {
            cli_error("unknown schedule '%s' (gpipe, 1f1b, interleaved:V)", v);
            return -1;
        }
        return 1;
    }
    if ((r = cli_opt(argc, argv, i, "--recompute", &v)) != 0) {
        if (r < 0)
            return -1;
        if (strcmp(v, "none") == 0)
            s->recompute = DISTIR__V1__RECOMPUTE__RECOMPUTE_NONE;
        else if (strcmp(v, "selective") == 0)
            s->recompute = DISTIR__V1__RECOMPUTE__RECOMPUTE_SELECTIVE;
        else if (strcmp(v, "full") == 0)
            s->recompute = DISTIR__V1__RECOMPUTE__RECOMPUTE_FULL;
        else {
            cli_error("unknown recompute mode '%s' (none, selective, full)", v);
            return -1;
        }
        return 1;
    }
    if ((r = cli_opt(argc, argv, i, "--stash", &v)) != 0) {
        if (r < 0)
            return -1;
        if (strcmp(v, "none") == 0)
            s->stash = DISTIR__V1__STASH__STASH_NONE;
        else if (strcmp(v, "pipedream") == 0)
            s->stash = DISTIR__V1__STASH__STASH_PIPEDREAM;
        else if (strcmp(v, "2bw") == 0)
            s->stash = DISTIR__V1__STASH__STASH_2BW;
        else {
            cli_error("unknown stash mode '%s' (none, pipedream, 2bw)", v);
            return -1;
        }
        return 1;
    }
    return 0;
}

int
cli_strategy_is_trivial(const Distir__V1__Strategy *s)
{
    return s->dp <= 1 && s->tp <= 1 && s->pp <= 1 && s->microbatches <= 1 &&
           s->schedule == 0 && s->virtual_stages <= 1 && s->recompute == 0 && s->stash == 0 &&
           s->zero == 0 && !s->sequence_parallel && !s->overlap_grad_reduce &&
           s->n_device_order == 0 && s->n_stages == 0 && s->n_tp_layers == 0;
}

int
cli_apply_strategy(const ir_module *m, const Distir__V1__Strategy *s, const hw_model *hw,
                   ir_module **out)
{
    xform_strategy xs;
    di_error err;
    *out = NULL;
    if (cli_strategy_is_trivial(s))
        return 0;
    if (xform_strategy_from_proto(s, &xs, &err) != 0 ||
        xform_apply(m, &xs, hw, out, &err) != 0) {
        cli_error("cannot apply the strategy: %s", err.msg);
        xform_strategy_fini(&xs);
        return -1;
    }
    xform_strategy_fini(&xs);
    return 0;
}
