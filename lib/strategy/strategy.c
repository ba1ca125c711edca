/*
 * strategy.c: the strategy type of strategy.h. One option table gives every
 * option's text form (the CLI flags); strategy_normalize is the one place
 * that checks a strategy on its own (without a module) and fills in the
 * defaults; strategy_hash encodes the normalized form for the cache key.
 * Every message names the option as its flag does, "dp=0", "zero=4", so the
 * same words reach a CLI user and a daemon client.
 */
#include "strategy/strategy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distir.pb-c.h"

static const char *const schedule_names[] = {"default", "gpipe", "1f1b", "interleaved"};
static const char *const recompute_names[] = {"none", "selective", "full", "selective-op"};
static const char *const stash_names[] = {"none", "pipedream", "2bw"};
static const char *const order_names[] = {"tp-dp-pp", "tp-pp-dp"};

void
strategy_init(strategy *s)
{
    memset(s, 0, sizeof *s);
}

void
strategy_fini(strategy *s)
{
    di_free(s->device_order);
    di_free(s->stages);
    di_free(s->tp_layers);
    memset(s, 0, sizeof *s);
}

static void *
dup_array(const void *src, size_t n, size_t size)
{
    void *p;
    if (n == 0)
        return NULL;
    p = di_xmalloc(n * size);
    memcpy(p, src, n * size);
    return p;
}

void
strategy_copy(strategy *dst, const strategy *src)
{
    *dst = *src;
    dst->device_order = dup_array(src->device_order, src->ndevice_order, sizeof(uint32_t));
    dst->stages = dup_array(src->stages, src->nstages, sizeof(strategy_stage));
    dst->tp_layers = dup_array(src->tp_layers, src->ntp_layers, sizeof(uint32_t));
}

/* ---- checks shared by every form ---- */

static int
check_range(di_error *err, const char *name, uint64_t v, uint64_t min, uint64_t max)
{
    if (v >= min && v <= max)
        return 0;
    return di_error_set(err, DI_ESTRATEGY, "%s=%llu is out of range (%llu to %llu)", name,
                        (unsigned long long)v, (unsigned long long)min, (unsigned long long)max);
}

/*
 * Per-stage degrees against pp and the uniform degrees; shared with the
 * transforms (xform_validate), which take hand-built strategies too.
 */
int
strategy_check_stages(const strategy *s, uint32_t pp, di_error *err)
{
    uint32_t layers = 0;
    if (s->nstages > STRATEGY_MAX_DEGREE)
        return di_error_set(err, DI_ESTRATEGY, "%u pipeline stages are too many (at most %u)",
                            s->nstages, STRATEGY_MAX_DEGREE);
    if (s->nstages != pp)
        return di_error_set(err, DI_ESTRATEGY, "the strategy lists %u pipeline stages, but pp=%u",
                            s->nstages, pp);
    if (s->dp > 1 || s->tp > 1)
        return di_error_set(err, DI_ESTRATEGY,
                            "give the degrees either as dp and tp or per pipeline stage, not "
                            "both (dp=%u tp=%u)",
                            s->dp, s->tp);
    for (uint32_t g = 0; g < s->nstages; g++) {
        const strategy_stage *a = &s->stages[g];
        if (a->dp > STRATEGY_MAX_DEGREE || a->tp > STRATEGY_MAX_DEGREE)
            return di_error_set(err, DI_ESTRATEGY, "stage %u: degrees %ux%u are too many", g, a->dp,
                                a->tp);
        if (a->layers)
            layers++;
    }
    if (layers && layers != s->nstages)
        return di_error_set(err, DI_ESTRATEGY,
                            "%u of the %u pipeline stages give a layer count: give it for all "
                            "or none",
                            layers, s->nstages);
    if (layers && s->schedule == STRATEGY_SCHEDULE_INTERLEAVED && s->virtual_stages > 1)
        return di_error_set(err, DI_ESTRATEGY,
                            "per-stage layer counts need one model stage per group (not the "
                            "interleaved schedule)");
    return 0;
}

/* True when every stage has the same degrees and none fixes its layer count. */
int
strategy_stages_alike(const strategy *s)
{
    for (uint32_t g = 0; g < s->nstages; g++) {
        const strategy_stage *a = &s->stages[g], *b = &s->stages[0];
        if ((a->dp ? a->dp : 1) != (b->dp ? b->dp : 1) ||
            (a->tp ? a->tp : 1) != (b->tp ? b->tp : 1) || a->layers)
            return 0;
    }
    return 1;
}

uint32_t
strategy_device_groups(const strategy *s, uint32_t ndevice, uint32_t *group)
{
    uint32_t pp = s->pp ? s->pp : 1, cp = s->cp ? s->cp : 1;
    uint64_t rank = 0;
    for (uint32_t d = 0; d < ndevice; d++)
        group[d] = UINT32_MAX;
    for (uint32_t g = 0; g < pp; g++) {
        uint64_t dp = s->dp ? s->dp : 1, tp = s->tp ? s->tp : 1;
        if (g < s->nstages) {
            dp = s->stages[g].dp ? s->stages[g].dp : 1;
            tp = s->stages[g].tp ? s->stages[g].tp : 1;
        }
        for (uint64_t k = 0; k < dp * cp * tp; k++, rank++) {
            uint64_t dev = strategy_rank_device(s, rank, g, k, tp);
            if (dev < ndevice)
                group[dev] = g;
        }
    }
    return pp;
}

uint64_t
strategy_rank_device(const strategy *s, uint64_t rank, uint32_t g, uint64_t inner, uint64_t tp)
{
    if (s->ndevice_order)
        return rank < s->ndevice_order ? s->device_order[rank] : rank;
    if (s->order == STRATEGY_ORDER_TP_PP_DP) /* a replica's stages together */
        return ((inner / tp) * (s->pp ? s->pp : 1) + g) * tp + inner % tp;
    return rank;
}

static int
cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* An upper bound on a field where 0 asks for the default. */
static int
check_max(di_error *err, const char *name, uint32_t v, uint32_t max)
{
    return v > max ? check_range(err, name, v, 1, max) : 0;
}

int
strategy_check_values(const strategy *s, di_error *err)
{
    int rc;
    if ((rc = check_range(err, "zero", s->zero, 0, 3)) != 0)
        return rc;
    if ((unsigned)s->schedule > STRATEGY_SCHEDULE_INTERLEAVED)
        return di_error_set(err, DI_ESTRATEGY, "schedule %u is not a schedule (%s)",
                            (unsigned)s->schedule, "gpipe, 1f1b, interleaved:V");
    if ((unsigned)s->recompute > STRATEGY_RECOMPUTE_SELECTIVE_OP)
        return di_error_set(err, DI_ESTRATEGY, "recompute %u is not a recompute mode (%s)",
                            (unsigned)s->recompute, "none, selective, full, selective-op");
    if ((unsigned)s->stash > STRATEGY_STASH_2BW)
        return di_error_set(err, DI_ESTRATEGY, "stash %u is not a stash mode (%s)",
                            (unsigned)s->stash, "none, pipedream, 2bw");
    if ((unsigned)s->order > STRATEGY_ORDER_TP_PP_DP)
        return di_error_set(err, DI_ESTRATEGY, "order %u is not a rank order (%s)",
                            (unsigned)s->order, "tp-dp-pp, tp-pp-dp");
    if (s->ndevice_order > STRATEGY_MAX_LIST || s->ntp_layers > STRATEGY_MAX_LIST)
        return di_error_set(err, DI_ESTRATEGY,
                            "the device order (%u entries) or tp_layers (%u) is too long (at "
                            "most %u)",
                            s->ndevice_order, s->ntp_layers, STRATEGY_MAX_LIST);
    if (s->nstages > STRATEGY_MAX_DEGREE)
        return di_error_set(err, DI_ESTRATEGY, "%u pipeline stages are too many (at most %u)",
                            s->nstages, STRATEGY_MAX_DEGREE);
    if ((rc = check_max(err, "dp", s->dp, STRATEGY_MAX_DEGREE)) != 0 ||
        (rc = check_max(err, "tp", s->tp, STRATEGY_MAX_DEGREE)) != 0 ||
        (rc = check_max(err, "pp", s->pp, STRATEGY_MAX_DEGREE)) != 0 ||
        (rc = check_max(err, "ep", s->ep, STRATEGY_MAX_DEGREE)) != 0 ||
        (rc = check_max(err, "cp", s->cp, STRATEGY_MAX_DEGREE)) != 0 ||
        (rc = check_max(err, "microbatches", s->microbatches, STRATEGY_MAX_MICROBATCHES)) != 0 ||
        (rc = check_max(err, "virtual_stages", s->virtual_stages, STRATEGY_MAX_VIRTUAL_STAGES)) !=
            0 ||
        (rc = check_max(err, "bucket_mb", s->bucket_mb, STRATEGY_MAX_DEGREE)) != 0 ||
        (rc = check_max(err, "recompute_layers", s->recompute_layers, STRATEGY_MAX_DEGREE)) != 0)
        return rc;
    if (s->recompute_layers > 0 && s->recompute != STRATEGY_RECOMPUTE_FULL)
        return di_error_set(err, DI_ESTRATEGY,
                            "recompute_layers %u needs recompute full (the layers it recomputes "
                            "in full)",
                            s->recompute_layers);
    return 0;
}

int
strategy_normalize(strategy *s, di_error *err)
{
    uint32_t maxtp, vstages = s->virtual_stages;
    int rc;
    if ((rc = strategy_check_values(s, err)) != 0)
        return rc;
    if (s->dp == 0)
        s->dp = 1;
    if (s->tp == 0)
        s->tp = 1;
    if (s->pp == 0)
        s->pp = s->nstages ? s->nstages : 1;
    if (s->ep == 0)
        s->ep = 1;
    if (s->cp == 0)
        s->cp = 1;
    if (s->microbatches == 0)
        s->microbatches = s->pp;
    if (s->virtual_stages == 0)
        s->virtual_stages = 1;
    if ((rc = check_max(err, "microbatches", s->microbatches, STRATEGY_MAX_MICROBATCHES)) != 0)
        return rc;
    if (s->nstages > 0 && (rc = strategy_check_stages(s, s->pp, err)) != 0)
        return rc;
    if (s->schedule != STRATEGY_SCHEDULE_DEFAULT && s->pp == 1)
        return di_error_set(err, DI_ESTRATEGY,
                            "the %s schedule orders pipeline stages and pp=1 (give pp or stages)",
                            schedule_names[s->schedule]);
    if (s->schedule == STRATEGY_SCHEDULE_INTERLEAVED && s->virtual_stages < 2)
        return di_error_set(err, DI_ESTRATEGY,
                            "the interleaved schedule needs at least 2 virtual stages per device "
                            "(interleaved:V), got %u",
                            vstages);

    /* Defaults that depend on the checks above. */
    if (s->pp > 1 && s->schedule == STRATEGY_SCHEDULE_DEFAULT)
        s->schedule = STRATEGY_SCHEDULE_1F1B;
    if (s->schedule != STRATEGY_SCHEDULE_INTERLEAVED)
        s->virtual_stages = 1;
    /* The bucket size only matters with overlap: normalized so that equal strategies are equal. */
    if (!s->overlap_grad_reduce)
        s->bucket_mb = 0;
    else if (s->bucket_mb == 0)
        s->bucket_mb = STRATEGY_BUCKET_MB_DEFAULT;
    s->sequence_parallel = s->sequence_parallel != 0;
    s->overlap_grad_reduce = s->overlap_grad_reduce != 0;

    /* Stages all alike are the uniform strategy; else each has its degrees, 0 read as 1. */
    maxtp = s->tp;
    if (s->nstages > 0 && strategy_stages_alike(s)) {
        s->dp = s->stages[0].dp ? s->stages[0].dp : 1;
        s->tp = maxtp = s->stages[0].tp ? s->stages[0].tp : 1;
        di_free(s->stages);
        s->stages = NULL;
        s->nstages = 0;
    }
    for (uint32_t g = 0; g < s->nstages; g++) {
        strategy_stage *st = &s->stages[g];
        st->dp = st->dp ? st->dp : 1;
        st->tp = st->tp ? st->tp : 1;
        if (st->tp > maxtp)
            maxtp = st->tp;
    }

    if (s->cp > 1 && s->nstages > 0)
        return di_error_set(err, DI_ESTRATEGY,
                            "cp=%u with per-stage degrees: context parallelism needs the same "
                            "degrees on every stage",
                            s->cp);
    if (s->ep > 1 && s->nstages > 0)
        return di_error_set(err, DI_ESTRATEGY,
                            "ep=%u with per-stage degrees: expert parallelism needs one dp for "
                            "every stage",
                            s->ep);
    if (s->ep > 1 && s->dp % s->ep != 0)
        return di_error_set(err, DI_ESTRATEGY,
                            "ep=%u does not divide dp=%u (expert parallelism splits the "
                            "data-parallel group)",
                            s->ep, s->dp);

    if (s->order != STRATEGY_ORDER_TP_DP_PP) {
        if (s->ndevice_order > 0)
            return di_error_set(err, DI_ESTRATEGY,
                                "order=%s with a device order: the device order places every "
                                "rank (give one or the other)",
                                order_names[s->order]);
        if (s->nstages > 0)
            return di_error_set(err, DI_ESTRATEGY,
                                "order=%s with per-stage degrees: the rank order needs the same "
                                "degrees on every stage",
                                order_names[s->order]);
        /* One stage or one replica: both orders place every rank alike. */
        if (s->pp == 1 || (uint64_t)s->dp * s->cp == 1)
            s->order = STRATEGY_ORDER_TP_DP_PP;
    }

    /* tp_layers: a set (sorted, distinct), and only with tensor parallelism. */
    if (s->ntp_layers > 0) {
        uint32_t n = 0;
        if (maxtp == 1)
            return di_error_set(err, DI_ESTRATEGY,
                                "tp_layers chooses the tensor-parallel layers and tp=1 (give tp or "
                                "stages with tp > 1)");
        qsort(s->tp_layers, s->ntp_layers, sizeof *s->tp_layers, cmp_u32);
        for (uint32_t i = 0; i < s->ntp_layers; i++)
            if (n == 0 || s->tp_layers[n - 1] != s->tp_layers[i])
                s->tp_layers[n++] = s->tp_layers[i];
        s->ntp_layers = n;
    }
    return 0;
}

/* ---- text form: the option table ---- */

typedef enum option_kind {
    OPT_UINT,   /* a uint32_t field from min to max */
    OPT_SWITCH, /* an int field set to 1, no value */
    OPT_SCHEDULE,
    OPT_RECOMPUTE,
    OPT_STASH,
    OPT_ORDER,
    OPT_STAGES,
    OPT_TP_LAYERS,
} option_kind;

typedef struct option {
    const char *name;  /* the CLI flag without "--" */
    const char *label; /* the field, as messages name it */
    option_kind kind;
    size_t off; /* OPT_UINT, OPT_SWITCH: the field */
    uint32_t min, max;
} option;

#define FIELD(f) offsetof(strategy, f)
static const option options[] = {
    {"dp", "dp", OPT_UINT, FIELD(dp), 1, STRATEGY_MAX_DEGREE},
    {"tp", "tp", OPT_UINT, FIELD(tp), 1, STRATEGY_MAX_DEGREE},
    {"pp", "pp", OPT_UINT, FIELD(pp), 1, STRATEGY_MAX_DEGREE},
    {"ep", "ep", OPT_UINT, FIELD(ep), 1, STRATEGY_MAX_DEGREE},
    {"cp", "cp", OPT_UINT, FIELD(cp), 1, STRATEGY_MAX_DEGREE},
    {"microbatches", "microbatches", OPT_UINT, FIELD(microbatches), 0, STRATEGY_MAX_MICROBATCHES},
    {"schedule", "schedule", OPT_SCHEDULE, 0, 0, 0},
    {"virtual-stages", "virtual_stages", OPT_UINT, FIELD(virtual_stages), 0,
     STRATEGY_MAX_VIRTUAL_STAGES},
    {"recompute", "recompute", OPT_RECOMPUTE, 0, 0, 0},
    {"recompute-layers", "recompute_layers", OPT_UINT, FIELD(recompute_layers), 1,
     STRATEGY_MAX_DEGREE},
    {"stash", "stash", OPT_STASH, 0, 0, 0},
    {"zero", "zero", OPT_UINT, FIELD(zero), 0, 3},
    {"sequence-parallel", "sequence_parallel", OPT_SWITCH, FIELD(sequence_parallel), 0, 0},
    {"overlap-grad-reduce", "overlap_grad_reduce", OPT_SWITCH, FIELD(overlap_grad_reduce), 0, 0},
    {"bucket-mb", "bucket_mb", OPT_UINT, FIELD(bucket_mb), 0, STRATEGY_MAX_DEGREE},
    {"order", "order", OPT_ORDER, 0, 0, 0},
    {"stages", "stages", OPT_STAGES, 0, 0, 0},
    {"tp-layers", "tp_layers", OPT_TP_LAYERS, 0, 0, 0},
};
#undef FIELD

static const option *
option_find(const char *name)
{
    for (size_t k = 0; k < sizeof options / sizeof options[0]; k++)
        if (strcmp(options[k].name, name) == 0)
            return &options[k];
    return NULL;
}

int
strategy_option_arity(const char *name)
{
    const option *o = option_find(name);
    return o == NULL ? -1 : o->kind != OPT_SWITCH;
}

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

static int
set_uint(const char *name, const char *v, uint32_t min, uint32_t max, uint32_t *out, di_error *err)
{
    const char *p = v;
    unsigned long x;
    if (!read_num(&p, 0, UINT32_MAX, &x) || *p != '\0')
        return di_error_set(err, DI_ESTRATEGY, "%s needs an integer from %u to %u, got '%s'", name,
                            min, max, v);
    if (x < min || x > max)
        return check_range(err, name, x, min, max);
    *out = (uint32_t)x;
    return 0;
}

/* The index of v in names[first..n), or -1. */
static int
name_index(const char *v, const char *const *names, int first, int n)
{
    for (int k = first; k < n; k++)
        if (strcmp(v, names[k]) == 0)
            return k;
    return -1;
}

/* "DPxTP[:LAYERS],..." (one entry per pipeline stage). */
static int
set_stages(strategy *s, const char *v, di_error *err)
{
    const char *p = v;
    uint32_t n = 0, cap = 0;
    strategy_stage *st = NULL;
    while (*p) {
        unsigned long dp, tp, layers = 0;
        if (n == STRATEGY_MAX_DEGREE || !read_num(&p, 1, STRATEGY_MAX_DEGREE, &dp) || *p++ != 'x' ||
            !read_num(&p, 1, STRATEGY_MAX_DEGREE, &tp))
            goto bad;
        if (*p == ':' && (++p, !read_num(&p, 1, STRATEGY_MAX_DEGREE, &layers)))
            goto bad;
        if (n == cap) {
            cap = cap ? 2 * cap : 8;
            st = di_xrealloc(st, cap * sizeof *st);
        }
        st[n].dp = (uint32_t)dp;
        st[n].tp = (uint32_t)tp;
        st[n].layers = (uint32_t)layers;
        n++;
        if (!list_next(&p))
            goto bad;
    }
    if (n == 0)
        goto bad;
    di_free(s->stages);
    s->stages = st;
    s->nstages = n;
    return 0;
bad:
    di_free(st);
    return di_error_set(err, DI_ESTRATEGY,
                        "stages needs DPxTP[:LAYERS] per pipeline stage, comma-separated (e.g. "
                        "4x1:10,2x2:14), got '%s'",
                        v);
}

/* "A-B,C,..." layer numbers. */
static int
set_tp_layers(strategy *s, const char *v, di_error *err)
{
    const char *p = v;
    uint32_t n = 0, cap = 0;
    uint32_t *l = NULL;
    while (*p) {
        unsigned long a, b;
        if (!read_num(&p, 0, INT32_MAX, &a))
            goto bad;
        b = a;
        if (*p == '-' && (++p, !read_num(&p, 0, INT32_MAX, &b)))
            goto bad;
        if (a > b || b - a >= STRATEGY_MAX_LIST - n)
            goto bad;
        if (n + (b - a + 1) > cap) {
            while (n + (b - a + 1) > cap)
                cap = cap ? 2 * cap : 16;
            l = di_xrealloc(l, cap * sizeof *l);
        }
        for (unsigned long k = a; k <= b; k++)
            l[n++] = (uint32_t)k;
        if (!list_next(&p))
            goto bad;
    }
    if (n == 0)
        goto bad;
    di_free(s->tp_layers);
    s->tp_layers = l;
    s->ntp_layers = n;
    return 0;
bad:
    di_free(l);
    return di_error_set(err, DI_ESTRATEGY,
                        "tp_layers needs layer numbers and ranges, comma-separated (e.g. "
                        "0-11,16), got '%s'",
                        v);
}

int
strategy_set(strategy *s, const char *name, const char *value, di_error *err)
{
    const option *o = option_find(name);
    int k, rc;
    if (o == NULL)
        return di_error_set(err, DI_ENOTFOUND, "'%s' is not a strategy option", name);
    if (o->kind != OPT_SWITCH && value == NULL)
        return di_error_set(err, DI_ESTRATEGY, "%s needs a value", o->label);
    switch (o->kind) {
    case OPT_UINT:
        return set_uint(o->label, value, o->min, o->max, (uint32_t *)((char *)s + o->off), err);
    case OPT_SWITCH:
        *(int *)((char *)s + o->off) = 1;
        return 0;
    case OPT_SCHEDULE: {
        /* "interleaved:V" also sets the virtual stages; plain "interleaved" keeps them. */
        size_t n = strcspn(value, ":");
        char head[16] = "";
        if (n < sizeof head)
            memcpy(head, value, n);
        k = name_index(head, schedule_names, 1, 4);
        if (k < 0 || (value[n] == ':' && k != STRATEGY_SCHEDULE_INTERLEAVED))
            return di_error_set(err, DI_ESTRATEGY,
                                "unknown schedule '%s' (gpipe, 1f1b, interleaved:V)", value);
        if (value[n] == ':' &&
            (rc = set_uint("interleaved:V", value + n + 1, 0, STRATEGY_MAX_VIRTUAL_STAGES,
                           &s->virtual_stages, err)) != 0)
            return rc;
        s->schedule = (strategy_schedule)k;
        return 0;
    }
    case OPT_RECOMPUTE:
        if ((k = name_index(value, recompute_names, 0, 4)) < 0)
            return di_error_set(err, DI_ESTRATEGY,
                                "unknown recompute mode '%s' (none, selective, full, selective-op)",
                                value);
        s->recompute = (strategy_recompute)k;
        return 0;
    case OPT_STASH:
        if ((k = name_index(value, stash_names, 0, 3)) < 0)
            return di_error_set(err, DI_ESTRATEGY, "unknown stash mode '%s' (none, pipedream, 2bw)",
                                value);
        s->stash = (strategy_stash)k;
        return 0;
    case OPT_ORDER:
        if ((k = name_index(value, order_names, 0, 2)) < 0)
            return di_error_set(err, DI_ESTRATEGY, "unknown rank order '%s' (tp-dp-pp, tp-pp-dp)",
                                value);
        s->order = (strategy_order)k;
        return 0;
    case OPT_STAGES:
        return set_stages(s, value, err);
    case OPT_TP_LAYERS:
        return set_tp_layers(s, value, err);
    }
    return di_error_set(err, DI_EINTERNAL, "option '%s' has no parser", name);
}

/* ---- proto form ---- */

int
strategy_from_proto(const Distir__V1__Strategy *p, strategy *s, di_error *err)
{
    strategy_init(s);
    if (p == NULL)
        return strategy_normalize(s, err);
    /* Lists beyond the limits are refused before any copy. */
    if (p->n_stages > STRATEGY_MAX_DEGREE)
        return di_error_set(err, DI_ESTRATEGY, "%zu pipeline stages are too many (at most %u)",
                            p->n_stages, STRATEGY_MAX_DEGREE);
    if (p->n_device_order > STRATEGY_MAX_LIST || p->n_tp_layers > STRATEGY_MAX_LIST)
        return di_error_set(err, DI_ESTRATEGY,
                            "the device order (%zu entries) or tp_layers (%zu) is too long (at "
                            "most %u)",
                            p->n_device_order, p->n_tp_layers, STRATEGY_MAX_LIST);
    s->dp = p->dp;
    s->tp = p->tp;
    s->pp = p->pp;
    s->microbatches = p->microbatches;
    /* Enums outside the known values stay as they are for strategy_normalize to refuse. */
    s->schedule = (strategy_schedule)p->schedule;
    s->virtual_stages = p->virtual_stages;
    s->recompute = (strategy_recompute)p->recompute;
    s->stash = (strategy_stash)p->stash;
    s->zero = p->zero;
    s->sequence_parallel = p->sequence_parallel != 0;
    s->overlap_grad_reduce = p->overlap_grad_reduce != 0;
    s->bucket_mb = p->bucket_mb;
    s->ep = p->ep;
    s->cp = p->cp;
    s->order = (strategy_order)p->order;
    s->recompute_layers = p->recompute_layers;
    s->ndevice_order = (uint32_t)p->n_device_order;
    s->device_order = dup_array(p->device_order, p->n_device_order, sizeof(uint32_t));
    s->ntp_layers = (uint32_t)p->n_tp_layers;
    s->tp_layers = dup_array(p->tp_layers, p->n_tp_layers, sizeof(uint32_t));
    if (p->n_stages > 0) {
        s->nstages = (uint32_t)p->n_stages;
        s->stages = di_xcalloc(p->n_stages, sizeof *s->stages);
        for (size_t i = 0; i < p->n_stages; i++) {
            if (p->stages[i] == NULL)
                continue;
            s->stages[i].dp = p->stages[i]->dp;
            s->stages[i].tp = p->stages[i]->tp;
            s->stages[i].layers = p->stages[i]->layers;
        }
    }
    return strategy_normalize(s, err);
}

void
strategy_to_proto(const strategy *s, Distir__V1__Strategy *p)
{
    p->dp = s->dp;
    p->tp = s->tp;
    p->pp = s->pp;
    p->microbatches = s->microbatches;
    p->schedule = (Distir__V1__Schedule)s->schedule;
    p->virtual_stages = s->virtual_stages;
    p->recompute = (Distir__V1__Recompute)s->recompute;
    p->stash = (Distir__V1__Stash)s->stash;
    p->zero = s->zero;
    p->sequence_parallel = s->sequence_parallel != 0;
    p->overlap_grad_reduce = s->overlap_grad_reduce != 0;
    p->bucket_mb = s->bucket_mb;
    p->ep = s->ep;
    p->cp = s->cp;
    p->recompute_layers = s->recompute_layers;
    p->order = (Distir__V1__RankOrder)s->order;
    p->n_device_order = s->ndevice_order;
    p->device_order = dup_array(s->device_order, s->ndevice_order, sizeof(uint32_t));
    p->n_tp_layers = s->ntp_layers;
    p->tp_layers = dup_array(s->tp_layers, s->ntp_layers, sizeof(uint32_t));
    p->n_stages = s->nstages;
    p->stages = NULL;
    if (s->nstages > 0) {
        p->stages = di_xcalloc(s->nstages, sizeof *p->stages);
        for (uint32_t g = 0; g < s->nstages; g++) {
            Distir__V1__PipelineStage *st = di_xmalloc(sizeof *st);
            distir__v1__pipeline_stage__init(st);
            st->dp = s->stages[g].dp;
            st->tp = s->stages[g].tp;
            st->layers = s->stages[g].layers;
            p->stages[g] = st;
        }
    }
}

void
strategy_proto_fini(Distir__V1__Strategy *p)
{
    for (size_t g = 0; g < p->n_stages; g++)
        di_free(p->stages[g]);
    di_free(p->stages);
    di_free(p->device_order);
    di_free(p->tp_layers);
    p->stages = NULL;
    p->device_order = p->tp_layers = NULL;
    p->n_stages = p->n_device_order = p->n_tp_layers = 0;
}

/* ---- what a normalized strategy says ---- */

int
strategy_is_trivial(const strategy *s)
{
    return s->dp <= 1 && s->tp <= 1 && s->pp <= 1 && s->microbatches <= 1 &&
           s->schedule == STRATEGY_SCHEDULE_DEFAULT && s->virtual_stages <= 1 &&
           s->recompute == STRATEGY_RECOMPUTE_NONE && s->stash == STRATEGY_STASH_NONE &&
           s->zero == 0 && !s->sequence_parallel && !s->overlap_grad_reduce &&
           s->ndevice_order == 0 && s->nstages == 0 && s->ntp_layers == 0 && s->ep <= 1 &&
           s->cp <= 1 && s->order == STRATEGY_ORDER_TP_DP_PP;
}

void
strategy_format(const strategy *s, char *buf, size_t size)
{
    char overlap[32] = "", degrees[32] = "";
    if (s->overlap_grad_reduce)
        snprintf(overlap, sizeof overlap, " overlap bucket=%uMiB",
                 s->bucket_mb ? s->bucket_mb : STRATEGY_BUCKET_MB_DEFAULT);
    if (s->nstages == 0) /* per-stage degrees (stages=, below) replace dp and tp */
        snprintf(degrees, sizeof degrees, "dp=%u tp=%u ", s->dp, s->tp);
    snprintf(buf, size, "%spp=%u m=%u schedule=%s%s%.0u recompute=%s stash=%s zero=%u%s%s",
             degrees, s->pp, s->microbatches, schedule_names[s->schedule & 3],
             s->schedule == STRATEGY_SCHEDULE_INTERLEAVED ? ":" : "",
             s->schedule == STRATEGY_SCHEDULE_INTERLEAVED ? s->virtual_stages : 0u,
             recompute_names[s->recompute % 4], stash_names[s->stash % 3], s->zero,
             s->sequence_parallel ? " sp" : "", overlap);
    /* Degrees added later, only when set, so that the text of older strategies stays. */
    for (int i = 0; i < 2; i++) {
        uint32_t v = i ? s->cp : s->ep;
        size_t w = strlen(buf);
        if (v > 1 && w + 1 < size)
            snprintf(buf + w, size - w, " %s=%u", i ? "cp" : "ep", v);
    }
    if (s->order != STRATEGY_ORDER_TP_DP_PP) {
        size_t w = strlen(buf);
        if (w + 1 < size)
            snprintf(buf + w, size - w, " order=%s", order_names[s->order & 1]);
    }
    if (s->recompute_layers > 0) {
        size_t w = strlen(buf);
        if (w + 1 < size)
            snprintf(buf + w, size - w, " recompute_layers=%u", s->recompute_layers);
    }
    /* Nested parallelism: " stages=4x1:10,2x2:14 tp_layers=0-11,16". */
    for (uint32_t g = 0; g < s->nstages; g++) {
        size_t w = strlen(buf);
        const strategy_stage *st = &s->stages[g];
        if (w + 1 >= size)
            return;
        snprintf(buf + w, size - w, "%s%ux%u", g ? "," : " stages=", st->dp ? st->dp : 1,
                 st->tp ? st->tp : 1);
        if (st->layers && (w = strlen(buf)) + 1 < size)
            snprintf(buf + w, size - w, ":%u", st->layers);
    }
    for (uint32_t i = 0; i < s->ntp_layers;) {
        uint32_t j = i;
        size_t w = strlen(buf);
        while (j + 1 < s->ntp_layers && s->tp_layers[j + 1] == s->tp_layers[j] + 1)
            j++;
        if (w + 1 >= size)
            return;
        if (j > i)
            snprintf(buf + w, size - w, "%s%u-%u", i ? "," : " tp_layers=", s->tp_layers[i],
                     s->tp_layers[j]);
        else
            snprintf(buf + w, size - w, "%s%u", i ? "," : " tp_layers=", s->tp_layers[i]);
        i = j + 1;
    }
}

void
strategy_hash(const strategy *s, di_sha256 *h)
{
    di_sha256_u64(h, s->dp);
    di_sha256_u64(h, s->tp);
    di_sha256_u64(h, s->pp);
    di_sha256_u64(h, s->microbatches);
    di_sha256_u64(h, (uint64_t)s->schedule);
    di_sha256_u64(h, s->virtual_stages);
    di_sha256_u64(h, (uint64_t)s->recompute);
    di_sha256_u64(h, (uint64_t)s->stash);
    di_sha256_u64(h, s->zero);
    di_sha256_u64(h, (uint64_t)s->sequence_parallel);
    di_sha256_u64(h, (uint64_t)s->overlap_grad_reduce);
    di_sha256_u64(h, s->bucket_mb);
    di_sha256_u64(h, s->ndevice_order);
    for (uint32_t i = 0; i < s->ndevice_order; i++)
        di_sha256_u64(h, s->device_order[i]);
    di_sha256_u64(h, s->nstages);
    for (uint32_t i = 0; i < s->nstages; i++) {
        di_sha256_u64(h, s->stages[i].dp);
        di_sha256_u64(h, s->stages[i].tp);
        di_sha256_u64(h, s->stages[i].layers);
    }
    di_sha256_u64(h, s->ntp_layers);
    for (uint32_t i = 0; i < s->ntp_layers; i++)
        di_sha256_u64(h, s->tp_layers[i]);
    /* Only when set, so that the keys of strategies without them stay as they were. */
    for (int i = 0; i < 2; i++) {
        uint32_t v = i ? s->cp : s->ep;
        if (v > 1) {
            di_sha256_update(h, i ? "cp" : "ep", 2);
            di_sha256_u64(h, v);
        }
    }
    if (s->order != STRATEGY_ORDER_TP_DP_PP) {
        di_sha256_update(h, "order", 5);
        di_sha256_u64(h, (uint64_t)s->order);
    }
    if (s->recompute_layers > 0) {
        di_sha256_update(h, "recompute_layers", 16);
        di_sha256_u64(h, s->recompute_layers);
    }
}
