/*
 * space.c: the search's configuration (search_config_set), the enumeration
 * of the space (search_space_init) and the evaluation of one candidate
 * (search_eval) with the real transforms and simulator.
 *
 * The space is built as one array in enumeration order, so that a
 * candidate's index is its position and a shard or a worker takes
 * candidates by index alone. The module's batch and layer count come from
 * the transforms' own analysis (xform_model_facts_init), so that the space
 * and xform_validate agree on what they are.
 */
#include "search/search.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "sim/sim.h"
#include "xform/xform.h"

/* ---- configuration ---- */

void
search_config_init(search_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->memory_headroom = 1.0;
    cfg->objective = SEARCH_MIN_TIME;
    cfg->top_k = 10;
    cfg->shard_count = 1;
    cfg->compose_saves = SEARCH_COMPOSE_SAVES;
}

/* A decimal in [lo, hi]; 0 or DI_EINVAL. */
static int
parse_u32(const char *name, const char *text, uint32_t lo, uint32_t hi, uint32_t *out,
          di_error *err)
{
    char *end;
    unsigned long long v;
    errno = 0;
    if (text == NULL || text[0] < '0' || text[0] > '9')
        return di_error_set(err, DI_EINVAL, "%s: '%s' is not a number", name, text ? text : "");
    v = strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi)
        return di_error_set(err, DI_EINVAL, "%s: '%s' is not a number from %u to %u", name, text,
                            lo, hi);
    *out = (uint32_t)v;
    return 0;
}

/* Splits a comma-separated list and calls add for each item. */
static int
parse_list(search_config *cfg, const char *name, const char *value,
           int (*add)(search_config *, const char *, const char *, di_error *), di_error *err)
{
    char item[64];
    const char *p = value;
    if (value == NULL || *value == '\0')
        return di_error_set(err, DI_EINVAL, "%s: an empty list", name);
    for (;;) {
        size_t n = strcspn(p, ",");
        int rc;
        if (n == 0 || n >= sizeof item)
            return di_error_set(err, DI_EINVAL, "%s: bad item in '%s'", name, value);
        memcpy(item, p, n);
        item[n] = '\0';
        if ((rc = add(cfg, name, item, err)) != 0)
            return rc;
        if (p[n] == '\0')
            return 0;
        p += n + 1;
    }
}

static int
set_add(uint32_t *set, uint32_t *n, const char *name, uint32_t v, di_error *err)
{
    for (uint32_t i = 0; i < *n; i++)
        if (set[i] == v)
            return 0;
    if (*n == SEARCH_MAX_SET)
        return di_error_set(err, DI_EINVAL, "%s: more than %u values", name, SEARCH_MAX_SET);
    set[(*n)++] = v;
    return 0;
}

static int
add_degree(search_config *cfg, const char *name, const char *item, di_error *err)
{
    uint32_t v, *set, *n;
    int rc;
    if (strcmp(name, "dp") == 0) {
        set = cfg->dp, n = &cfg->ndp;
    } else if (strcmp(name, "tp") == 0) {
        set = cfg->tp, n = &cfg->ntp;
    } else if (strcmp(name, "pp") == 0) {
        set = cfg->pp, n = &cfg->npp;
    } else if (strcmp(name, "cp") == 0) {
        set = cfg->cp, n = &cfg->ncp;
    } else if (strcmp(name, "microbatches") == 0) {
        set = cfg->microbatches, n = &cfg->nmicrobatches;
    } else if (strcmp(name, "recompute-layers") == 0) {
        /* 0: every layer; at most what a candidate's field holds. */
        if ((rc = parse_u32(name, item, 0, UINT16_MAX, &v, err)) != 0)
            return rc;
        return set_add(cfg->recompute_layers, &cfg->nrecompute_layers, name, v, err);
    } else {
        set = cfg->virtual_stages, n = &cfg->nvirtual;
    }
    if ((rc = parse_u32(name, item, 1, STRATEGY_MAX_DEGREE, &v, err)) != 0)
        return rc;
    return set_add(set, n, name, v, err);
}

static int
add_device_count(search_config *cfg, const char *name, const char *item, di_error *err)
{
    uint32_t v;
    int rc = parse_u32(name, item, 1, HW_MAX_DEVICES, &v, err);
    return rc != 0 ? rc : set_add(cfg->device_counts, &cfg->ndevice_counts, name, v, err);
}

static int
add_schedule(search_config *cfg, const char *name, const char *item, di_error *err)
{
    if (strcmp(item, "gpipe") == 0) {
        cfg->schedules |= 1u << STRATEGY_SCHEDULE_GPIPE;
    } else if (strcmp(item, "1f1b") == 0) {
        cfg->schedules |= 1u << STRATEGY_SCHEDULE_1F1B;
    } else if (strcmp(item, "interleaved") == 0) {
        cfg->schedules |= 1u << STRATEGY_SCHEDULE_INTERLEAVED;
    } else if (strncmp(item, "interleaved:", 12) == 0) {
        uint32_t v;
        int rc;
        if ((rc = parse_u32(name, item + 12, 2, STRATEGY_MAX_VIRTUAL_STAGES, &v, err)) != 0)
            return rc;
        cfg->schedules |= 1u << STRATEGY_SCHEDULE_INTERLEAVED;
        return set_add(cfg->virtual_stages, &cfg->nvirtual, "virtual-stages", v, err);
    } else {
        return di_error_set(err, DI_EINVAL,
                            "%s: unknown schedule '%s' (gpipe, 1f1b, interleaved[:V])", name, item);
    }
    return 0;
}

static int
add_recompute(search_config *cfg, const char *name, const char *item, di_error *err)
{
    static const char *const names[] = {"none", "selective", "full", "selective-op"};
    for (uint32_t i = 0; i < 4; i++)
        if (strcmp(item, names[i]) == 0) {
            cfg->recomputes |= 1u << i;
            return 0;
        }
    return di_error_set(err, DI_EINVAL,
                        "%s: unknown value '%s' (none, selective, full, selective-op)", name, item);
}

static int
add_zero(search_config *cfg, const char *name, const char *item, di_error *err)
{
    uint32_t v;
    int rc = parse_u32(name, item, 0, 3, &v, err);
    if (rc == 0)
        cfg->zeros |= 1u << v;
    return rc;
}

static int
add_switch(search_config *cfg, const char *name, const char *item, di_error *err)
{
    uint32_t *mask =
        strcmp(name, "sequence-parallel") == 0 ? &cfg->sequence_parallel : &cfg->overlap;
    if (strcmp(item, "0") == 0 || strcmp(item, "off") == 0)
        *mask |= 1u;
    else if (strcmp(item, "1") == 0 || strcmp(item, "on") == 0)
        *mask |= 2u;
    else
        return di_error_set(err, DI_EINVAL, "%s: '%s' is not 0, 1, off or on", name, item);
    return 0;
}

static int
add_order(search_config *cfg, const char *name, const char *item, di_error *err)
{
    if (strcmp(item, "tp-dp-pp") == 0)
        cfg->orders |= 1u << STRATEGY_ORDER_TP_DP_PP;
    else if (strcmp(item, "tp-pp-dp") == 0)
        cfg->orders |= 1u << STRATEGY_ORDER_TP_PP_DP;
    else
        return di_error_set(err, DI_EINVAL, "%s: '%s' is not tp-dp-pp or tp-pp-dp", name, item);
    return 0;
}

/* A setting of two spellings a and b: *is_a says which (untouched when value is neither). */
static int
one_of_two(const char *name, const char *value, const char *a, const char *b, int *is_a,
           di_error *err)
{
    if (value == NULL || (strcmp(value, a) != 0 && strcmp(value, b) != 0))
        return di_error_set(err, DI_EINVAL, "%s: '%s' is not %s or %s", name, value ? value : "",
                            a, b);
    *is_a = strcmp(value, a) == 0;
    return 0;
}

int
search_config_set(search_config *cfg, const char *name, const char *value, di_error *err)
{
    if (strcmp(name, "dp") == 0 || strcmp(name, "tp") == 0 || strcmp(name, "pp") == 0 ||
        strcmp(name, "cp") == 0 ||
        strcmp(name, "microbatches") == 0 || strcmp(name, "virtual-stages") == 0)
        return parse_list(cfg, name, value, add_degree, err);
    if (strcmp(name, "m") == 0)
        return parse_list(cfg, "microbatches", value, add_degree, err);
    if (strcmp(name, "recompute-layers") == 0)
        return parse_list(cfg, name, value, add_degree, err);
    if (strcmp(name, "schedule") == 0)
        return parse_list(cfg, name, value, add_schedule, err);
    if (strcmp(name, "recompute") == 0)
        return parse_list(cfg, name, value, add_recompute, err);
    if (strcmp(name, "zero") == 0)
        return parse_list(cfg, name, value, add_zero, err);
    if (strcmp(name, "sequence-parallel") == 0 || strcmp(name, "overlap-grad-reduce") == 0)
        return parse_list(cfg, name, value, add_switch, err);
    if (strcmp(name, "order") == 0)
        return parse_list(cfg, name, value, add_order, err);
    if (strcmp(name, "nested") == 0) {
        int off, rc = one_of_two(name, value, "0", "1", &off, err);
        if (rc == 0)
            cfg->nested = !off;
        return rc;
    }
    if (strcmp(name, "devices") == 0) {
        /* One count, or a list: the space on each. */
        int rc;
        cfg->ndevice_counts = 0;
        if (value != NULL && strchr(value, ',') == NULL)
            return parse_u32(name, value, 1, HW_MAX_DEVICES, &cfg->devices, err);
        if ((rc = parse_list(cfg, name, value, add_device_count, err)) != 0)
            return rc;
        cfg->devices = 0;
        for (uint32_t i = 0; i < cfg->ndevice_counts; i++)
            if (cfg->device_counts[i] > cfg->devices)
                cfg->devices = cfg->device_counts[i];
        if (cfg->ndevice_counts == 1) { /* "8,8" is "8" */
            cfg->ndevice_counts = 0;
            cfg->device_counts[0] = 0;
        }
        return 0;
    }
    if (strcmp(name, "target-step") == 0 || strcmp(name, "price") == 0 ||
        strcmp(name, "train-tokens") == 0) {
        char *end;
        double v = value ? strtod(value, &end) : 0;
        if (value == NULL || end == value || *end != '\0' || !(v > 0 && v < 1e30))
            return di_error_set(err, DI_EINVAL, "%s: '%s' is not a positive number", name,
                                value ? value : "");
        if (name[0] == 't' && name[1] == 'a')
            cfg->target_step_s = v;
        else if (name[0] == 'p')
            cfg->price_per_device_hour = v;
        else
            cfg->train_tokens = v;
        return 0;
    }
    if (strcmp(name, "top") == 0)
        return parse_u32(name, value, 1, SEARCH_MAX_TOP, &cfg->top_k, err);
    if (strcmp(name, "objective") == 0) {
        for (int o = 0; value != NULL && o < SEARCH_NOBJECTIVE; o++)
            if (strcmp(value, search_objective_name((search_objective)o)) == 0) {
                cfg->objective = (search_objective)o;
                return 0;
            }
        return di_error_set(err, DI_EINVAL,
                            "objective: '%s' is not time, throughput, devices or cost",
                            value ? value : "");
    }
    if (strcmp(name, "math") == 0)
        return one_of_two(name, value, "tf32", "ieee", &cfg->tf32, err);
    if (strcmp(name, "kernels") == 0)
        return one_of_two(name, value, "fused", "eager", &cfg->fuse, err);
    if (strcmp(name, "grad-accum-fusion") == 0)
        return one_of_two(name, value, "off", "on", &cfg->no_grad_accum_fusion, err);
    if (strcmp(name, "compose") == 0)
        return one_of_two(name, value, "0", "1", &cfg->no_compose, err);
    if (strcmp(name, "time-bound") == 0)
        return one_of_two(name, value, "0", "1", &cfg->no_time_bound, err);
    if (strcmp(name, "refine") == 0) {
        int top, rc = one_of_two(name, value, "top", "all", &top, err);
        if (rc == 0)
            cfg->refine_pareto = !top;
        return rc;
    }
    if (strcmp(name, "pareto-within") == 0) {
        char *end;
        double v = value ? strtod(value, &end) : 0;
        if (value == NULL || end == value || *end != '\0' || !(v == 0 || (v >= 1 && v < 1e30)))
            return di_error_set(err, DI_EINVAL,
                                "pareto-within: '%s' is not a ratio >= 1 (or 0: no limit)",
                                value ? value : "");
        cfg->pareto_within = v;
        return 0;
    }
    if (strcmp(name, "headroom") == 0) {
        char *end;
        double v = value ? strtod(value, &end) : 0;
        if (value == NULL || end == value || *end != '\0' || !(v > 0 && v <= 1))
            return di_error_set(err, DI_EINVAL, "headroom: '%s' is not a fraction in (0, 1]",
                                value ? value : "");
        cfg->memory_headroom = v;
        return 0;
    }
    if (strcmp(name, "shard") == 0) {
        unsigned i, n;
        int used = 0;
        if (value == NULL || sscanf(value, "%u/%u%n", &i, &n, &used) != 2 || value[used] != '\0' ||
            n == 0 || i >= n)
            return di_error_set(err, DI_EINVAL, "shard: '%s' is not i/n with i < n",
                                value ? value : "");
        cfg->shard_index = i;
        cfg->shard_count = n;
        return 0;
    }
    return di_error_set(err, DI_ENOTFOUND, "'%s' is not a search option", name);
}

int
search_config_fix(search_config *cfg, const char *assignment, di_error *err)
{
    char name[64];
    const char *eq = strchr(assignment, '=');
    size_t n = eq ? (size_t)(eq - assignment) : 0;
    if (eq == NULL || n == 0 || n >= sizeof name)
        return di_error_set(err, DI_EINVAL, "'%s' is not NAME=VALUE", assignment);
    memcpy(name, assignment, n);
    name[n] = '\0';
    if (strcmp(name, "sp") == 0)
        return search_config_set(cfg, "sequence-parallel", eq + 1, err);
    if (strcmp(name, "overlap") == 0)
        return search_config_set(cfg, "overlap-grad-reduce", eq + 1, err);
    if (strcmp(name, "v") == 0 || strcmp(name, "virtual_stages") == 0)
        return search_config_set(cfg, "virtual-stages", eq + 1, err);
    return search_config_set(cfg, name, eq + 1, err);
}

/* ---- the space ---- */

static int
in_set(const uint32_t *set, uint32_t n, uint32_t v)
{
    if (n == 0)
        return 1;
    for (uint32_t i = 0; i < n; i++)
        if (set[i] == v)
            return 1;
    return 0;
}

static int
in_mask(uint32_t mask, uint32_t v)
{
    return mask == 0 || (mask >> v & 1u) != 0;
}

/* The divisors of n (>= 1) in ascending order; the caller frees *out. */
static uint32_t
divisors(uint64_t n, uint32_t **out)
{
    uint32_t cnt = 0, cap = 16;
    uint32_t *d = di_xmalloc(cap * sizeof *d);
    for (uint64_t k = 1; k <= n && k <= STRATEGY_MAX_DEGREE; k++) {
        if (n % k != 0)
            continue;
        if (cnt == cap) {
            cap *= 2;
            d = di_xrealloc(d, cap * sizeof *d);
        }
        d[cnt++] = (uint32_t)k;
    }
    *out = d;
    return cnt;
}

typedef struct space_builder {
    search_space *sp;
    uint64_t cap;
} space_builder;

static void
push(space_builder *b, const search_candidate *c)
{
    search_space *sp = b->sp;
    if (sp->ncandidate == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 256;
        sp->candidates = di_xrealloc(sp->candidates, b->cap * sizeof *sp->candidates);
    }
    sp->candidates[sp->ncandidate] = *c;
    sp->candidates[sp->ncandidate].index = sp->ncandidate;
    sp->ncandidate++;
}

uint64_t
search_candidate_devices(const search_candidate *c)
{
    uint64_t n = 0;
    if (c->nstages == 0)
        return (uint64_t)c->dp * c->tp * c->pp * (c->cp > 1 ? c->cp : 1);
    for (uint32_t g = 0; g < c->nstages && g < SEARCH_NESTED_MAX_STAGES; g++)
        n += (uint64_t)c->sdp[g] * c->stp[g];
    return n;
}

int
search_order_matters(const hw_model *hw, const search_candidate *c)
{
    uint64_t cp = c->cp > 1 ? c->cp : 1;
    uint32_t per_node = hw->devices_per_node;
    if (c->pp <= 1 || c->dp * cp <= 1 || c->nstages > 0)
        return 0;
    if (hw->noverride > 0)
        return 1;
    return per_node > 0 && search_candidate_devices(c) > per_node &&
           (uint64_t)c->tp * cp % per_node != 0;
}

/*
 * The rank orders (the innermost axis): the default, then tp-pp-dp where it
 * matters. Where it does not, the allowed orders restrict nothing: the
 * candidate is there once, in the default order, as a single stage is there
 * whatever the allowed schedules.
 */
static void
push_orders(space_builder *b, search_candidate *c)
{
    const search_config *cfg = &b->sp->cfg;
    int matters = search_order_matters(b->sp->hw, c);
    c->order = STRATEGY_ORDER_TP_DP_PP;
    if (!matters || in_mask(cfg->orders, STRATEGY_ORDER_TP_DP_PP))
        push(b, c);
    c->order = STRATEGY_ORDER_TP_PP_DP;
    if (matters && in_mask(cfg->orders, STRATEGY_ORDER_TP_PP_DP))
        push(b, c);
    c->order = STRATEGY_ORDER_TP_DP_PP;
}

/* Whether a stage of c is data parallel (ZeRO and overlap shard and reduce over it). */
static int
some_dp(const search_candidate *c)
{
    int any = c->dp > 1;
    for (uint32_t g = 0; g < c->nstages; g++)
        any |= c->sdp[g] > 1;
    return any;
}

/* Whether every stage of c is tensor parallel (sequence parallelism splits the tensor axis). */
static int
every_tp(const search_candidate *c)
{
    int all = c->nstages ? 1 : c->tp > 1;
    for (uint32_t g = 0; g < c->nstages; g++)
        all &= c->stp[g] > 1;
    return all;
}

static int
cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The options after the recomputation: ZeRO, sequence parallelism, overlap, ep, order. */
static void
push_zero(space_builder *b, search_candidate *c)
{
    const search_config *cfg = &b->sp->cfg;
    uint32_t multi_dp = some_dp(c) ? 1u : 0u, multi_tp = every_tp(c) ? 1u : 0u;
    /* ZeRO shards over the data and context ranks (dp.c): with cp > 1, whatever dp. */
    uint32_t multi_zero = multi_dp || c->cp > 1 ? 1u : 0u;
    for (uint32_t z = 0; z <= 3 * multi_zero; z++) {
        /* Without data parallelism ZeRO-2 reduce-scatters nothing per microbatch: ZeRO-1. */
        if (!in_mask(cfg->zeros, z) || (z == 2 && !multi_dp))
            continue;
        c->zero = (uint8_t)z;
        for (uint32_t sq = 0; sq <= multi_tp; sq++) {
            if (!in_mask(cfg->sequence_parallel, sq))
                continue;
            c->sequence_parallel = (uint8_t)sq;
            for (uint32_t ov = 0; ov <= multi_dp; ov++) {
                if (!in_mask(cfg->overlap, ov))
                    continue;
                c->overlap = (uint8_t)ov;
                /*
                 * Expert parallelism over the data-parallel group or part of it
                 * (ep consecutive data ranks): every ep > 1 dividing dp and the experts.
                 */
                c->ep = 1;
                push_orders(b, c);
                for (uint32_t ep = 2; ep <= c->dp && b->sp->experts > 0; ep++) {
                    if (c->dp % ep != 0 || b->sp->experts % ep != 0)
                        continue;
                    c->ep = ep;
                    push_orders(b, c);
                }
            }
        }
    }
}

/*
 * The options after the schedule: recompute (under full, each allowed
 * recompute_layers below the model's layers: one at least as large
 * recomputes every layer, as 0 does), then push_zero's.
 */
static void
push_options(space_builder *b, search_candidate *c)
{
    const search_config *cfg = &b->sp->cfg; /* recompute_layers ascending (search_space_init) */
    uint32_t nl = cfg->nrecompute_layers ? cfg->nrecompute_layers : 1;
    for (uint32_t rc = 0; rc < 4; rc++) {
        /* selective-op only when asked for: the default space is Megatron-LM's three. */
        if (!in_mask(cfg->recomputes, rc) ||
            (rc == STRATEGY_RECOMPUTE_SELECTIVE_OP && !(cfg->recomputes & 1u << rc)))
            continue;
        c->recompute = (uint8_t)rc;
        for (uint32_t k = 0; k < (rc == STRATEGY_RECOMPUTE_FULL ? nl : 1); k++) {
            uint32_t n = rc == STRATEGY_RECOMPUTE_FULL && cfg->nrecompute_layers > 0
                             ? cfg->recompute_layers[k]
                             : 0;
            if (n > 0 && n >= b->sp->layers)
                continue;
            c->recompute_layers = (uint16_t)n;
            push_zero(b, c);
        }
    }
}

/*
 * A nested split's microbatch counts, schedules and options (ZeRO and overlap
 * when a stage is data parallel, sequence parallelism when every stage is
 * tensor parallel; ep 1 and the default order: dp is 1).
 */
static void
push_nested(space_builder *b, search_candidate *c)
{
    const search_space *sp = b->sp;
    const search_config *cfg = &sp->cfg;
    uint64_t l = 1;
    uint32_t *ms, nms;
    for (uint32_t g = 0; g < c->pp; g++) {
        uint64_t a = l, x = c->sdp[g];
        while (x) { /* l = lcm(l, sdp[g]) */
            uint64_t t = a % x;
            a = x;
            x = t;
        }
        l = l / a * c->sdp[g];
    }
    /* Each stage splits every microbatch over its data ranks: m divides batch / lcm(sdp). */
    if (sp->batch <= 0 || (uint64_t)sp->batch % l != 0)
        return;
    c->dp = c->tp = c->cp = c->ep = 1;
    c->virtual_stages = 1;
    c->order = STRATEGY_ORDER_TP_DP_PP;
    nms = divisors((uint64_t)sp->batch / l, &ms);
    for (uint32_t k = 0; k < nms; k++) {
        if (ms[k] > STRATEGY_MAX_MICROBATCHES ||
            !in_set(cfg->microbatches, cfg->nmicrobatches, ms[k]))
            continue;
        c->microbatches = ms[k];
        for (uint32_t sch = STRATEGY_SCHEDULE_GPIPE; sch <= STRATEGY_SCHEDULE_1F1B; sch++) {
            if (!in_mask(cfg->schedules, sch))
                continue;
            c->schedule = (uint8_t)sch;
            push_options(b, c);
        }
    }
    di_free(ms);
}

/*
 * Nested candidates (search_config.nested) on n devices over pp stages: each
 * stage g gets k_g >= 1 devices (the k_g adding up to n), split as sdp[g] x
 * stp[g] with both allowed, in lexicographic order of (k_g, stp[g]) from the
 * first stage; sequences whose stages are all alike are the uniform
 * candidates, already in the space. count: only count the sequences
 * (returned), capped at SEARCH_NESTED_MAX_SPLITS + 1.
 */
static uint64_t
nested_stage(space_builder *b, search_candidate *c, uint32_t g, uint32_t left, int count)
{
    const search_config *cfg = &b->sp->cfg;
    uint64_t total = 0;
    uint32_t hi, lo;
    if (g == c->pp) {
        int alike = 1;
        for (uint32_t k = 1; k < c->pp; k++)
            alike &= c->sdp[k] == c->sdp[0] && c->stp[k] == c->stp[0];
        if (left != 0 || alike)
            return 0;
        if (!count)
            push_nested(b, c);
        return 1;
    }
    hi = left - (c->pp - g - 1); /* a device at least for each stage after g */
    lo = g + 1 == c->pp ? hi : 1;
    for (uint32_t k = lo; k <= hi && total <= SEARCH_NESTED_MAX_SPLITS; k++) {
        for (uint32_t tp = 1; tp <= k; tp++) {
            if (k % tp != 0 || !in_set(cfg->tp, cfg->ntp, tp) || !in_set(cfg->dp, cfg->ndp, k / tp))
                continue;
            c->sdp[g] = k / tp;
            c->stp[g] = tp;
            total += nested_stage(b, c, g + 1, left - k, count);
        }
    }
    return total;
}

/* The nested candidates of pp stages on n devices; 0, or DI_EINVAL when they are too many. */
static int
enumerate_nested(space_builder *b, uint32_t n, uint32_t pp, di_error *err)
{
    search_candidate c;
    uint64_t splits;
    memset(&c, 0, sizeof c);
    c.pp = pp;
    c.nstages = (uint8_t)pp;
    if (n < pp)
        return 0;
    splits = nested_stage(b, &c, 0, n, 1);
    if (splits > SEARCH_NESTED_MAX_SPLITS)
        return di_error_set(err, DI_EINVAL,
                            "--nested: %u devices over %u stages split more than %u ways (each "
                            "stage's devices and their dp x tp): allow fewer (--tp, --dp, --pp)",
                            n, pp, SEARCH_NESTED_MAX_SPLITS);
    nested_stage(b, &c, 0, n, 0);
    return 0;
}

/*
 * Context-parallel degrees for the dp x cp part m of the devices, ascending,
 * into *out (caller frees): the allowed ones (or, none given, 1 and on a long
 * sequence every divisor) that divide the sequence and m.
 */
static uint32_t
cp_list(const search_space *sp, uint32_t m, uint32_t **out)
{
    const search_config *cfg = &sp->cfg;
    uint32_t nd = divisors(m, out), n = 0;
    for (uint32_t i = 0; i < nd; i++) {
        uint32_t cp = (*out)[i];
        if (cp > 1 && (sp->seq <= 0 || sp->seq % cp != 0))
            continue;
        if (cfg->ncp ? !in_set(cfg->cp, cfg->ncp, cp) : cp > 1 && sp->seq < SEARCH_LONG_SEQUENCE)
            continue;
        (*out)[n++] = cp;
    }
    return n;
}

/* The space on n devices; 0, or DI_EINVAL (enumerate_nested). */
static int
enumerate_on(space_builder *b, uint32_t n, di_error *err)
{
    search_space *sp = b->sp;
    const search_config *cfg = &sp->cfg;
    uint32_t *pps, *tps, *vs, *cps;
    uint32_t npps = divisors(n, &pps);
    int rc = 0;
    for (uint32_t i = 0; i < npps; i++) {
        uint32_t pp = pps[i];
        uint32_t ntps, ncps, nvs;
        /*
         * At most one model stage per layer. A pp that does not divide the layers
         * (Llama-3.1-405B's 126 on pp 16) cuts them balanced by cost (xform stages.c).
         * Interleaving: V >= 2 dividing ceil(layers / pp), at most a layer per model
         * stage: pp x V divides the layers when pp does (equal stages), and on 126
         * layers over pp 16, V = 2 and 4 (16 x 2: 7 or 8 layers a group).
         */
        if (!in_set(cfg->pp, cfg->npp, pp) || (sp->layers && pp > sp->layers))
            continue;
        nvs = divisors(sp->layers ? (sp->layers + pp - 1) / pp : 1, &vs);
        ntps = divisors(n / pp, &tps);
        ncps = cp_list(sp, n / pp, &cps);
        /* tp outer, cp inner (cp = 1 alone: the order without context parallelism). */
        for (uint32_t jj = 0; jj < ntps * ncps; jj++) {
            uint32_t tp = tps[jj / ncps], cp = cps[jj % ncps];
            uint32_t dp = (n / pp / tp) % cp == 0 ? n / pp / tp / cp : 0;
            uint32_t *ms, nms;
            if (dp == 0 || !in_set(cfg->tp, cfg->ntp, tp) || !in_set(cfg->dp, cfg->ndp, dp))
                continue;
            /* Without batch data only m = 1 can apply; dp > 1 is left for validation. */
            nms =
                divisors(sp->batch > 0 && sp->batch % dp == 0 ? (uint64_t)sp->batch / dp : 1, &ms);
            for (uint32_t k = 0; k < nms; k++) {
                search_candidate c;
                if (ms[k] > STRATEGY_MAX_MICROBATCHES ||
                    !in_set(cfg->microbatches, cfg->nmicrobatches, ms[k]))
                    continue;
                memset(&c, 0, sizeof c);
                c.dp = dp, c.tp = tp, c.pp = pp, c.microbatches = ms[k];
                c.cp = cp;
                c.virtual_stages = 1;
                if (pp == 1) {
                    /* One stage has no schedule (strategy_normalize refuses one). */
                    c.schedule = STRATEGY_SCHEDULE_DEFAULT;
                    push_options(b, &c);
                    continue;
                }
                for (uint32_t s = STRATEGY_SCHEDULE_GPIPE; s <= STRATEGY_SCHEDULE_1F1B; s++) {
                    if (!in_mask(cfg->schedules, s))
                        continue;
                    c.schedule = (uint8_t)s;
                    push_options(b, &c);
                }
                if (!in_mask(cfg->schedules, STRATEGY_SCHEDULE_INTERLEAVED))
                    continue;
                c.schedule = STRATEGY_SCHEDULE_INTERLEAVED;
                for (uint32_t v = 0; v < nvs; v++) {
                    if (vs[v] < 2 || vs[v] > STRATEGY_MAX_VIRTUAL_STAGES ||
                        (uint64_t)pp * vs[v] > sp->layers ||
                        !in_set(cfg->virtual_stages, cfg->nvirtual, vs[v]))
                        continue;
                    c.virtual_stages = vs[v];
                    push_options(b, &c);
                }
            }
            di_free(ms);
        }
        di_free(tps);
        di_free(cps);
        di_free(vs);
        /* Then this pp's nested candidates (stages of their own degrees), when asked for. */
        if (cfg->nested && pp >= 2 && pp <= SEARCH_NESTED_MAX_STAGES &&
            (rc = enumerate_nested(b, n, pp, err)) != 0)
            break;
    }
    di_free(pps);
    return rc;
}

/* Every device count's space, ascending. */
static int
enumerate(space_builder *b, di_error *err)
{
    const search_config *cfg = &b->sp->cfg;
    int rc = 0;
    if (cfg->ndevice_counts == 0)
        return enumerate_on(b, b->sp->devices, err);
    for (uint32_t i = 0; i < cfg->ndevice_counts && rc == 0; i++)
        rc = enumerate_on(b, cfg->device_counts[i], err);
    return rc;
}

/* An allowed list as a set: its count, then its values ascending. */
static void
hash_set(di_sha256 *h, const uint32_t *set, uint32_t n)
{
    uint32_t sorted[SEARCH_MAX_SET];
    memcpy(sorted, set, n * sizeof *set);
    qsort(sorted, n, sizeof *sorted, cmp_u32);
    di_sha256_u64(h, n);
    for (uint32_t i = 0; i < n; i++)
        di_sha256_u64(h, sorted[i]);
}

/* A mask with "0: every value" spelled out as the bits of every value. */
static void
hash_mask(di_sha256 *h, uint32_t mask, uint32_t every)
{
    di_sha256_u64(h, (mask ? mask : every) & every);
}

/* search_space.key (search.h). */
static void
space_key(search_space *sp)
{
    static const char domain[] = "distir.search.v1";
    const search_config *cfg = &sp->cfg;
    di_sha256 h;
    di_hash part;
    uint64_t headroom;
    di_sha256_init(&h);
    di_sha256_update(&h, domain, sizeof domain); /* with its NUL */
    ir_hash(sp->module, &part);
    di_sha256_update(&h, part.b, sizeof part.b);
    hw_hash(sp->hw, &part);
    di_sha256_update(&h, part.b, sizeof part.b);
    di_sha256_u64(&h, sp->devices);
    hash_set(&h, cfg->dp, cfg->ndp);
    hash_set(&h, cfg->tp, cfg->ntp);
    hash_set(&h, cfg->pp, cfg->npp);
    if (cfg->ncp) /* only when set: keys of searches without it stay as they were */
        hash_set(&h, cfg->cp, cfg->ncp);
    hash_set(&h, cfg->microbatches, cfg->nmicrobatches);
    hash_set(&h, cfg->virtual_stages, cfg->nvirtual);
    hash_mask(&h, cfg->schedules,
              (1u << STRATEGY_SCHEDULE_GPIPE) | (1u << STRATEGY_SCHEDULE_1F1B) |
                  (1u << STRATEGY_SCHEDULE_INTERLEAVED));
    hash_mask(&h, cfg->recomputes, 7u);
    if (cfg->recomputes & 1u << STRATEGY_RECOMPUTE_SELECTIVE_OP) /* keys without it stay */
        di_sha256_update(&h, "selective-op", 12);
    if (cfg->nrecompute_layers > 0) { /* keys without them stay */
        di_sha256_update(&h, "recompute-layers", 16);
        hash_set(&h, cfg->recompute_layers, cfg->nrecompute_layers);
    }
    hash_mask(&h, cfg->zeros, 15u);
    hash_mask(&h, cfg->sequence_parallel, 3u);
    hash_mask(&h, cfg->overlap, 3u);
    if (cfg->nested)
        di_sha256_update(&h, "nested", 6);
    if (cfg->orders && (cfg->orders & 3u) != 3u) { /* restricted: keys of others stay */
        di_sha256_update(&h, "order", 5);
        hash_mask(&h, cfg->orders, 3u);
    }
    memcpy(&headroom, &cfg->memory_headroom, sizeof headroom);
    di_sha256_u64(&h, headroom);
    di_sha256_u64(&h, (uint64_t)cfg->objective);
    di_sha256_u64(&h, cfg->no_compose ? 1 : 0);
    if (!cfg->no_compose)
        di_sha256_u64(&h, cfg->compose_saves);
    /* Added only when set, so the keys of searches without them stay what they were. */
    if (cfg->tf32)
        di_sha256_update(&h, "tf32", 4);
    if (cfg->fuse)
        di_sha256_update(&h, "fused", 5);
    if (cfg->fuse && cfg->no_grad_accum_fusion)
        di_sha256_update(&h, "no-gaf", 6);
    if (cfg->no_time_bound) /* which candidates are counted pruned by the time bound */
        di_sha256_update(&h, "no-time-bound", 13);
    if (cfg->ndevice_counts > 0)
        hash_set(&h, cfg->device_counts, cfg->ndevice_counts);
    if (cfg->refine_pareto) /* which points report a full simulation */
        di_sha256_update(&h, "refine-all", 10);
    if (cfg->pareto_within > 0) { /* which points the Pareto set holds, which are pruned */
        di_sha256_update(&h, "pareto-within", 13);
        di_sha256_u64(&h, di_double_bits(cfg->pareto_within));
    }
    if (cfg->target_step_s > 0 || cfg->price_per_device_hour > 0 || cfg->train_tokens > 0) {
        double v[3] = {cfg->target_step_s, cfg->price_per_device_hour, cfg->train_tokens};
        for (int i = 0; i < 3; i++)
            di_sha256_u64(&h, di_double_bits(v[i]));
    }
    di_sha256_u64(&h, cfg->top_k);
    di_sha256_u64(&h, sizeof SIM_VERSION - 1);
    di_sha256_update(&h, SIM_VERSION, sizeof SIM_VERSION - 1);
    di_sha256_u64(&h, sizeof SEARCH_VERSION - 1);
    di_sha256_update(&h, SEARCH_VERSION, sizeof SEARCH_VERSION - 1);
    di_sha256_final(&h, &sp->key);

    /* eval_key: only what a candidate's simulation and its figures depend on. */
    {
        static const char edomain[] = "distir.search.eval.v1";
        di_sha256_init(&h);
        di_sha256_update(&h, edomain, sizeof edomain);
        ir_hash(sp->module, &part);
        di_sha256_update(&h, part.b, sizeof part.b);
        hw_hash(sp->hw, &part);
        di_sha256_update(&h, part.b, sizeof part.b);
        di_sha256_u64(&h, headroom); /* the status, ok or out of memory */
        di_sha256_u64(&h, cfg->no_compose ? 1 : 0);
        if (!cfg->no_compose)
            di_sha256_u64(&h, cfg->compose_saves);
        di_sha256_u64(&h, cfg->tf32 ? 1 : 0);
        di_sha256_u64(&h, cfg->fuse ? 1 : 0);
        if (cfg->fuse && cfg->no_grad_accum_fusion) /* keys without it stay what they were */
            di_sha256_update(&h, "no-gaf", 6);
        di_sha256_u64(&h, sizeof SIM_VERSION - 1);
        di_sha256_update(&h, SIM_VERSION, sizeof SIM_VERSION - 1);
        di_sha256_u64(&h, sizeof SEARCH_VERSION - 1);
        di_sha256_update(&h, SEARCH_VERSION, sizeof SEARCH_VERSION - 1);
        di_sha256_final(&h, &sp->eval_key);
    }
}

/* The layer_mem entry of (tp, sp), or NULL. */
static const struct search_layer_mem *
find_layer_mem(const search_space *sp, uint32_t tp, uint8_t seq)
{
    for (uint32_t i = 0; i < sp->nlayer_mem; i++)
        if (sp->layer_mem[i].tp == tp && sp->layer_mem[i].sequence_parallel == seq)
            return &sp->layer_mem[i];
    return NULL;
}

/* The stage layout of (pp, V), or NULL. */
static const struct search_stage_layout *
find_stage_layout(const search_space *sp, uint32_t pp, uint32_t V)
{
    for (uint32_t i = 0; i < sp->nstage_layout; i++)
        if (sp->stage_layout[i].pp == pp && sp->stage_layout[i].V == V)
            return &sp->stage_layout[i];
    return NULL;
}

/* The virtual stages of c's schedule (1 but for the interleaved one). */
static uint32_t
virtual_of(const search_candidate *c)
{
    return c->schedule == STRATEGY_SCHEDULE_INTERLEAVED && c->virtual_stages > 1
               ? c->virtual_stages
               : 1;
}

/* The index of dp in sp->dps, or -1. */
static int32_t
dp_index(const search_space *sp, uint32_t dp)
{
    for (uint32_t i = 0; i < sp->ndp; i++)
        if (sp->dps[i] == dp)
            return (int32_t)i;
    return -1;
}

/*
 * The distance between the devices of two ranks of the first stage that are
 * `ranks` apart in its rank order (strategy_rank_device): with the order
 * tp-pp-dp the pipeline stages lie between them too.
 */
static uint32_t
rank_stride(const search_candidate *c, uint32_t ranks)
{
    return c->order == STRATEGY_ORDER_TP_PP_DP ? ranks * c->pp : ranks;
}

/*
 * The distance between the devices of the first stage's data-parallel group
 * (over the data axis alone): the tensor and context ranks between them.
 */
static uint32_t
dp_stride(const search_candidate *c)
{
    return rank_stride(c, c->tp * (c->cp > 1 ? c->cp : 1));
}

/* The dp group entry of (dp, stride), or NULL. */
static const struct search_dp_group *
find_dp_group(const search_space *sp, uint32_t dp, uint32_t stride)
{
    for (uint32_t i = 0; i < sp->ndp_group; i++)
        if (sp->dp_group[i].dp == dp && sp->dp_group[i].stride == stride)
            return &sp->dp_group[i];
    return NULL;
}

/* The least of row r of per, L values a row (L >= 1). */
static uint64_t
least_row(const uint64_t *per, uint32_t L, uint32_t r)
{
    uint64_t least = per[(size_t)r * L];
    for (uint32_t l = 1; l < L; l++)
        if (per[(size_t)r * L + l] < least)
            least = per[(size_t)r * L + l];
    return least;
}

/* e->zero_min, zero_grad_min and the counts from the layers' parameters p[0..np) under its (tp, sp). */
static void
zero_analysis(search_space *sp, struct search_layer_mem *e, const xform_layer_param *p,
              uint32_t np)
{
    uint32_t L = sp->layers;
    uint64_t *per;
    sim_op_bound add, cat;
    if (L == 0)
        return;
    if (sim_op_bound_terms(sp->hw, 0, IR_OP_CONCAT, IR_F32, 0, &cat))
        e->concat_per_byte = cat.per_byte;
    /* search_layer_mem.accumulate_s: each parameter's Add, least over the layers. */
    if (sim_op_bound_terms(sp->hw, 0, IR_OP_ADD, IR_F32, 0, &add)) {
        double *acc = di_xcalloc(L, sizeof *acc);
        for (uint32_t i = 0; i < np; i++)
            if (p[i].layer < L && p[i].grad_bytes > 0)
                acc[p[i].layer] += 3.0 * (double)p[i].grad_bytes * add.per_byte + add.launch;
        e->accumulate_s = acc[0];
        for (uint32_t l = 1; l < L; l++)
            if (acc[l] < e->accumulate_s)
                e->accumulate_s = acc[l];
        e->add_per_byte = add.per_byte;
        e->add_launch = add.launch;
        di_free(acc);
    }
    per = di_xmalloc(5 * (size_t)L * sizeof *per);
    e->zero_min = di_xcalloc(sp->ndp ? sp->ndp : 1, sizeof *e->zero_min);
    e->zero_grad_min = di_xcalloc(sp->ndp ? sp->ndp : 1, sizeof *e->zero_grad_min);
    e->zero_count_min = di_xcalloc(sp->ndp ? sp->ndp : 1, sizeof *e->zero_count_min);
    e->zero_bwd_count_min = di_xcalloc(sp->ndp ? sp->ndp : 1, sizeof *e->zero_bwd_count_min);
    e->zero_full_count_min = di_xcalloc(sp->ndp ? sp->ndp : 1, sizeof *e->zero_full_count_min);
    for (uint32_t k = 0; k < sp->ndp; k++) {
        /* Per layer (rows of L): bytes, gradient bytes, count, read backward, under full. */
        memset(per, 0, 5 * (size_t)L * sizeof *per);
        for (uint32_t i = 0; i < np; i++)
            if (p[i].layer < L && p[i].rank > 0 &&
                xform_zero_dim(p[i].dims, p[i].rank, p[i].tp_dim, sp->dps[k]) >= 0) {
                uint64_t *c = per + p[i].layer;
                c[0] += p[i].bytes;
                c[L] += p[i].grad_bytes;
                c[2 * (size_t)L]++;
                c[3 * (size_t)L] += p[i].bwd;
                c[4 * (size_t)L] += p[i].full;
            }
        e->zero_min[k] = least_row(per, L, 0);
        e->zero_grad_min[k] = least_row(per, L, 1);
        e->zero_count_min[k] = (uint32_t)least_row(per, L, 2);
        e->zero_bwd_count_min[k] = (uint32_t)least_row(per, L, 3);
        e->zero_full_count_min[k] = (uint32_t)least_row(per, L, 4);
    }
    di_free(per);
}

/*
 * sim_collective_slope (latency 0) or sim_collective_latency (1) over the group of
 * devices k stride, k < n.
 */
static double
group_term(const hw_model *hw, int kind, uint32_t n, uint32_t stride, int latency)
{
    int32_t *devs = di_xmalloc(n * sizeof *devs);
    double t;
    for (uint32_t k = 0; k < n; k++)
        devs[k] = (int32_t)(k * stride);
    t = latency ? sim_collective_latency(hw, kind, devs, n) : sim_collective_slope(hw, kind, devs, n);
    di_free(devs);
    return t;
}

static double
group_slope(const hw_model *hw, int kind, uint32_t n, uint32_t stride)
{
    return group_term(hw, kind, n, stride, 0);
}

static double
group_latency(const hw_model *hw, int kind, uint32_t n, uint32_t stride)
{
    return group_term(hw, kind, n, stride, 1);
}

/* search_space.layer_mem for (tp, sp): the layers' analysis, dp = pp = m = 1. */
static void
layer_analysis(search_space *sp, struct search_layer_mem *e)
{
    strategy s;
    xform_layer_facts f;
    di_error err;
    strategy_init(&s);
    s.tp = e->tp;
    s.sequence_parallel = e->sequence_parallel;
    if (strategy_normalize(&s, NULL) == 0 &&
        xform_layer_analysis(sp->module, &s, sp->hw,
                             (sp->cfg.tf32 ? XFORM_ANALYSIS_TF32 : 0u) |
                                 (sp->cfg.fuse ? XFORM_ANALYSIS_FUSED : 0u) |
                                 (sp->cfg.no_grad_accum_fusion
                                      ? XFORM_ANALYSIS_NO_GRAD_ACCUM_FUSION
                                      : 0u),
                             &f, &err) == 0) {
        e->ok = 1;
        memcpy(e->saved_min, f.saved_min, sizeof e->saved_min);
        memcpy(e->work_set_min, f.work_set_min, sizeof e->work_set_min);
        memcpy(e->work_set_weights, f.work_set_weights, sizeof e->work_set_weights);
        memcpy(e->work_set_fixed_at_most, f.work_set_fixed_at_most,
               sizeof e->work_set_fixed_at_most);
        memcpy(e->work_set_fixed_most, f.work_set_fixed_most, sizeof e->work_set_fixed_most);
        e->state_min = f.state_min;
        e->param_min = f.param_min;
        e->grad_min = f.grad_min;
        memcpy(e->edge_state, f.edge_state, sizeof e->edge_state);
        memcpy(e->edge_param, f.edge_param, sizeof e->edge_param);
        memcpy(e->edge_grad, f.edge_grad, sizeof e->edge_grad);
        memcpy(e->edge_grad_summed, f.edge_grad_summed, sizeof e->edge_grad_summed);
        memcpy(e->edge_grad_parts, f.edge_grad_parts, sizeof e->edge_grad_parts);
        e->head_saved = f.head_saved;
        e->embed_saved = f.embed_saved;
        e->time = f.time;
        if (e->tp > 1 && e->tp <= sp->hw->ndevice) {
            /*
             * The analysis counts the all-reduces apart from the reduce-scatters
             * and all-gathers: each kind at its own least terms. (Across nodes the
             * hierarchical all-reduce's slope is below the all-gather's: the bound
             * once priced every reduction at the reduce-scatter's and all-gather's,
             * above the all-reduce of a large payload.)
             */
            double ag = group_slope(sp->hw, IR_OP_ALLGATHER, e->tp, 1);
            double aga = group_latency(sp->hw, IR_OP_ALLGATHER, e->tp, 1);
            e->tp_slope = group_slope(sp->hw, IR_OP_REDUCESCATTER, e->tp, 1);
            e->tp_alpha = group_latency(sp->hw, IR_OP_REDUCESCATTER, e->tp, 1);
            if (ag < e->tp_slope)
                e->tp_slope = ag;
            if (aga < e->tp_alpha)
                e->tp_alpha = aga;
            e->tp_ar_slope = group_slope(sp->hw, IR_OP_ALLREDUCE, e->tp, 1);
            e->tp_ar_alpha = group_latency(sp->hw, IR_OP_ALLREDUCE, e->tp, 1);
        }
        zero_analysis(sp, e, f.params, f.nparams);
        f.time.gemms = NULL; /* e's now, until split_analyses */
        xform_layer_facts_fini(&f);
    }
    strategy_fini(&s);
}

/* search_space.dp_group for (dp, stride): the first stage's data-parallel group. */
static void
dp_group_analysis(search_space *sp, struct search_dp_group *g)
{
    g->all_reduce = group_slope(sp->hw, IR_OP_ALLREDUCE, g->dp, g->stride);
    g->reduce_scatter = group_slope(sp->hw, IR_OP_REDUCESCATTER, g->dp, g->stride);
    g->all_gather = group_slope(sp->hw, IR_OP_ALLGATHER, g->dp, g->stride);
    g->all_gather_alpha = group_latency(sp->hw, IR_OP_ALLGATHER, g->dp, g->stride);
}

/* search_space.stage_layout for (pp, V): a pipeline of one device per group. */
static void
stage_analysis(search_space *sp, struct search_stage_layout *e)
{
    strategy s;
    di_error err;
    strategy_init(&s);
    di_error_clear(&err);
    s.pp = e->pp;
    if (e->V > 1) {
        s.schedule = STRATEGY_SCHEDULE_INTERLEAVED;
        s.virtual_stages = e->V;
        s.microbatches = e->pp;
    }
    if (strategy_normalize(&s, NULL) != 0 ||
        xform_model_stage_layers(sp->module, &s, sp->hw, &e->layers, &e->nstage, &err) != 0 ||
        e->nstage != e->pp * e->V)
        e->nstage = 0;
    strategy_fini(&s);
}

/*
 * The quantization factor of GEMM g on device 0 of hw when a batch split
 * divides the whole batch by den (1 where it is not known to divide it:
 * the least the factor can be counted as).
 */
static double
gemm_factor(const hw_model *hw, const xform_gemm *g, uint64_t den)
{
    double inv = 0;
    if (g->noutput == 0)
        return 1;
    for (uint32_t i = 0; i < g->noutput; i++) {
        int64_t dims[IR_MAX_RANK];
        double b, r, c;
        memcpy(dims, g->out[i].dims, sizeof dims);
        if (g->out[i].bdim >= 0) {
            int64_t *d = &dims[g->out[i].bdim];
            if (*d <= 0 || (uint64_t)*d % den != 0)
                return 1;
            *d /= (int64_t)den;
        }
        sim_gemm_dims_shape(dims, g->out[i].rank, g->fold, &b, &r, &c);
        inv += 1.0 / sim_gemm_quantization(hw, 0, b, r, c);
    }
    return g->noutput / inv;
}

/* Sorts base[0..n) by cmp and keeps one of each run of equal elements; returns their count. */
static size_t
sort_unique(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *))
{
    char *b = base;
    size_t k = 0;
    if (n == 0)
        return 0;
    qsort(base, n, size, cmp);
    for (size_t i = 1; i < n; i++)
        if (cmp(b + k * size, b + i * size) != 0 && ++k != i)
            memcpy(b + k * size, b + i * size, size);
    return k + 1;
}

static int
cmp_split(const void *a, const void *b)
{
    const struct search_split_gemm *x = a, *y = b;
    return (x->den > y->den) - (x->den < y->den);
}

static const struct search_split_gemm *
find_split(const struct search_layer_mem *e, uint64_t den)
{
    struct search_split_gemm key;
    key.den = den;
    return bsearch(&key, e->split, e->nsplit, sizeof *e->split, cmp_split);
}

/*
 * search_layer_mem.split: per (tp, sp) and batch split of the space, each
 * slot's GEMM FLOP time with the quantization of its GEMMs at that
 * microbatch's shape, the least over the layers (as least_work's).
 */
static void
split_analyses(search_space *sp)
{
    for (uint32_t i = 0; i < sp->nlayer_mem; i++) {
        struct search_layer_mem *e = &sp->layer_mem[i];
        uint32_t cap = 0, L = e->time.nlayer;
        double *sum;
        if (!e->ok || e->time.gemms == NULL || L == 0)
            continue;
        for (uint64_t k = 0; k < sp->ncandidate; k++) {
            const search_candidate *c = &sp->candidates[k];
            if (c->tp == e->tp && c->sequence_parallel == e->sequence_parallel) {
                DI_GROW(&e->split, &cap, e->nsplit + 1);
                e->split[e->nsplit++].den = (uint64_t)c->dp * c->microbatches;
            }
        }
        e->nsplit = (uint32_t)sort_unique(e->split, e->nsplit, sizeof *e->split, cmp_split);
        sum = di_xmalloc((size_t)4 * L * sizeof *sum);
        for (uint32_t k = 0; k < e->nsplit; k++) {
            struct search_split_gemm *g = &e->split[k];
            memset(sum, 0, (size_t)4 * L * sizeof *sum);
            for (uint32_t j = 0; j < e->time.ngemm; j++) {
                const xform_gemm *x = &e->time.gemms[j];
                if (x->slot < 4 && x->layer < L)
                    sum[(size_t)x->slot * L + x->layer] +=
                        x->flop_s / gemm_factor(sp->hw, x, g->den);
            }
            for (uint32_t slot = 0; slot < 4; slot++)
                for (uint32_t l = 0; l < L; l++)
                    if (l == 0 || sum[(size_t)slot * L + l] < g->gemm_flop_s[slot])
                        g->gemm_flop_s[slot] = sum[(size_t)slot * L + l];
        }
        di_free(sum);
        di_free(e->time.gemms);
        e->time.gemms = NULL;
        e->time.ngemm = 0;
    }
}

static int
cmp_pipe(const void *a, const void *b)
{
    const struct search_pipe *x = a, *y = b;
    if (x->pp != y->pp)
        return x->pp < y->pp ? -1 : 1;
    if (x->V != y->V)
        return x->V < y->V ? -1 : 1;
    if (x->m != y->m)
        return x->m < y->m ? -1 : 1;
    return (x->schedule > y->schedule) - (x->schedule < y->schedule);
}

static const struct search_pipe *
find_pipe(const search_space *sp, const search_candidate *c)
{
    struct search_pipe key;
    memset(&key, 0, sizeof key); /* cmp_pipe reads pp, V, m and schedule */
    key.pp = c->pp;
    key.V = virtual_of(c);
    key.m = c->microbatches;
    key.schedule = c->schedule;
    return bsearch(&key, sp->pipe, sp->npipe, sizeof *sp->pipe, cmp_pipe);
}

/* Layers of the model stages after stage k. */
static double
layers_above(const struct search_stage_layout *st, uint32_t k)
{
    double n = 0;
    for (uint32_t s = k + 1; s < st->nstage; s++)
        n += st->layers[s];
    return n;
}

/*
 * search_space.pipe for e's (pp, V, m, schedule): each group's forward
 * chunks before its first backward (inflight), and group 0's chunks in
 * program order weighted by their stages' layers. B0 is its first backward
 * chunk (microbatch 0 of its last model stage), LF its last forward and LB
 * its last backward.
 */
static void
pipe_analysis(const search_space *sp, struct search_pipe *e)
{
    const struct search_stage_layout *st = find_stage_layout(sp, e->pp, e->V);
    uint64_t n = (uint64_t)2 * e->V * e->m;
    xform_chunk *ev;
    uint64_t b0 = n, lf = 0;
    if (n == 0 || n > (1u << 24))
        return;
    ev = di_xmalloc(n * sizeof *ev);
    /* Each group's forward chunks per model stage before its first backward. */
    e->inflight = di_xcalloc((size_t)e->pp * e->V, sizeof *e->inflight);
    for (uint32_t g = 0; g < e->pp; g++) {
        /*
         * Its k forwards before the first backward: a prefix of the sequence
         * twice as long until it holds that backward (or is the whole).
         */
        uint32_t got, cap = 64, k;
        for (;;) {
            got = xform_group_sequence(e->schedule, e->pp, e->V, e->m, g, ev,
                                       cap < n ? cap : (uint32_t)n);
            for (k = 0; k < got && ev[k].kind == XFORM_CHUNK_F; k++)
                ;
            if (k < got || got == n)
                break;
            cap *= 2;
        }
        for (uint32_t j = 0; j < k; j++)
            e->inflight[(size_t)g * e->V + ev[j].stage / e->pp]++;
    }
    if (st == NULL || st->nstage != e->pp * e->V) {
        di_free(ev);
        return;
    }
    xform_group_sequence(e->schedule, e->pp, e->V, e->m, 0, ev, (uint32_t)n);
    for (uint64_t k = 0; k < n; k++) {
        if (ev[k].kind == XFORM_CHUNK_B && b0 == n)
            b0 = k;
        if (ev[k].kind == XFORM_CHUNK_F)
            lf = k;
    }
    if (b0 == n || ev[n - 1].kind != XFORM_CHUNK_B) {
        di_free(ev);
        return;
    }
    e->lf_late = lf > b0;
    e->same_mb = ev[lf].mb == ev[n - 1].mb;
    for (uint64_t k = 0; k < n; k++) {
        double N = st->layers[ev[k].stage];
        int fwd = ev[k].kind == XFORM_CHUNK_F;
        if (k < b0)
            e->warm_f += N; /* every chunk before B0 is a forward */
        if (k <= lf && fwd)
            e->pre_f += N;
        if (k > b0 && k <= lf)
            *(fwd ? &e->mid_f : &e->mid_b) += N;
        if (k > (e->lf_late ? lf : b0))
            e->tail_b += N; /* every chunk after both is a backward */
        if (!fwd && ev[k].mb > 0) {
            if (k > b0 && k <= lf)
                e->mid_b1 += N;
            if (k > (e->lf_late ? lf : b0))
                e->tail_b1 += N;
        }
    }
    e->n_b0 = st->layers[ev[b0].stage];
    e->n_first = st->layers[0];
    for (uint32_t s = 0; s < st->nstage; s++)
        e->layers += st->layers[s];
    e->above_b0 = layers_above(st, ev[b0].stage);
    e->above_lf = layers_above(st, ev[lf].stage);
    e->above_lb = layers_above(st, ev[n - 1].stage);
    e->n_lb = st->layers[ev[n - 1].stage];
    e->stages = st->nstage;
    e->st_above_b0 = st->nstage - 1 - ev[b0].stage;
    e->st_above_lf = st->nstage - 1 - ev[lf].stage;
    e->st_above_lb = st->nstage - 1 - ev[n - 1].stage;
    e->ok = 1;
    di_free(ev);
}

/* search_space.pipe: one entry per (pp, V, m, schedule) of the space with pp > 1. */
static void
pipe_analyses(search_space *sp)
{
    uint64_t n = 0;
    for (uint64_t i = 0; i < sp->ncandidate; i++)
        n += sp->candidates[i].pp > 1;
    if (n == 0)
        return;
    sp->pipe = di_xcalloc(n, sizeof *sp->pipe);
    for (uint64_t i = 0; i < sp->ncandidate; i++) {
        const search_candidate *c = &sp->candidates[i];
        if (c->pp > 1) {
            struct search_pipe *e = &sp->pipe[sp->npipe++];
            e->pp = c->pp;
            e->V = virtual_of(c);
            e->m = c->microbatches;
            e->schedule = c->schedule;
        }
    }
    sp->npipe = (uint32_t)sort_unique(sp->pipe, sp->npipe, sizeof *sp->pipe, cmp_pipe);
    for (uint32_t i = 0; i < sp->npipe; i++)
        pipe_analysis(sp, &sp->pipe[i]);
}

/*
 * The analyses behind the bounds: one per (tp, sp) of the space
 * (layer_mem), one per (pp, V) (stage_layout) and one per (pp, V, m,
 * schedule) (pipe).
 */
static void
bound_analyses(search_space *sp)
{
    uint32_t cap = 0, cap_st = 0, cap_dp = 0, cap_g = 0;
    for (uint64_t i = 0; i < sp->ncandidate; i++) {
        const search_candidate *c = &sp->candidates[i];
        uint32_t stride = dp_stride(c);
        if (dp_index(sp, c->dp) < 0) {
            DI_GROW(&sp->dps, &cap_dp, sp->ndp + 1);
            sp->dps[sp->ndp++] = c->dp;
        }
        if (c->dp > 1 && (uint64_t)c->dp * stride <= sp->hw->ndevice &&
            find_dp_group(sp, c->dp, stride) == NULL) {
            struct search_dp_group *g;
            DI_GROW(&sp->dp_group, &cap_g, sp->ndp_group + 1);
            g = &sp->dp_group[sp->ndp_group++];
            memset(g, 0, sizeof *g);
            g->dp = c->dp;
            g->stride = stride;
            dp_group_analysis(sp, g);
        }
    }
    if (sp->ndp > 1) /* none in an empty space: qsort takes no null array */
        qsort(sp->dps, sp->ndp, sizeof *sp->dps, cmp_u32);
    for (uint64_t i = 0; i < sp->ncandidate; i++) {
        const search_candidate *c = &sp->candidates[i];
        uint32_t V = virtual_of(c);
        if (find_layer_mem(sp, c->tp, c->sequence_parallel) == NULL) {
            struct search_layer_mem *e;
            DI_GROW(&sp->layer_mem, &cap, sp->nlayer_mem + 1);
            e = &sp->layer_mem[sp->nlayer_mem++];
            memset(e, 0, sizeof *e);
            e->tp = c->tp;
            e->sequence_parallel = c->sequence_parallel;
            layer_analysis(sp, e);
        }
        if (find_stage_layout(sp, c->pp, V) == NULL && c->pp * V <= sp->layers) {
            struct search_stage_layout *e;
            DI_GROW(&sp->stage_layout, &cap_st, sp->nstage_layout + 1);
            e = &sp->stage_layout[sp->nstage_layout++];
            memset(e, 0, sizeof *e);
            e->pp = c->pp;
            e->V = V;
            stage_analysis(sp, e);
        }
    }
    split_analyses(sp);
    pipe_analyses(sp);
}

int
search_space_init_keyed(search_space *sp, const ir_module *m, const hw_model *hw,
                        const search_config *cfg, di_error *err)
{
    xform_model_facts facts;
    space_builder b;
    int rc;

    memset(sp, 0, sizeof *sp);
    if (cfg->shard_count == 0 || cfg->shard_index >= cfg->shard_count)
        return di_error_set(err, DI_EINVAL, "shard %u/%u: the index must be below the count",
                            cfg->shard_index, cfg->shard_count);
    if (!(cfg->memory_headroom > 0 && cfg->memory_headroom <= 1))
        return di_error_set(err, DI_EINVAL, "memory headroom %g is not in (0, 1]",
                            cfg->memory_headroom);
    if (cfg->top_k == 0 || cfg->top_k > SEARCH_MAX_TOP)
        return di_error_set(err, DI_EINVAL, "top K %u is not in 1..%u", cfg->top_k, SEARCH_MAX_TOP);
    if (cfg->devices > hw->ndevice)
        return di_error_set(err, DI_EINVAL, "%u devices asked for, but %s has %u", cfg->devices,
                            hw->name, hw->ndevice);
    if (cfg->objective == SEARCH_MIN_DEVICES && !(cfg->target_step_s > 0))
        return di_error_set(err, DI_EINVAL,
                            "the devices objective needs a target step time (--target-step S)");
    if ((unsigned)cfg->objective >= SEARCH_NOBJECTIVE)
        return di_error_set(err, DI_EINVAL, "objective %d is unknown", (int)cfg->objective);
    if ((rc = xform_model_facts_init(&facts, m, err)) != 0) {
        di_error_prefix(err, "cannot search this module");
        return rc;
    }
    sp->cfg = *cfg;
    /* Ascending, whatever the spelling of the set: the enumeration's order (push_options). */
    qsort(sp->cfg.recompute_layers, sp->cfg.nrecompute_layers, sizeof *sp->cfg.recompute_layers,
          cmp_u32);
    if (sp->cfg.ndevice_counts > 0) { /* ascending, the largest is the space's N */
        qsort(sp->cfg.device_counts, sp->cfg.ndevice_counts, sizeof *sp->cfg.device_counts,
              cmp_u32);
        memset(sp->cfg.device_counts + sp->cfg.ndevice_counts, 0,
               (SEARCH_MAX_SET - sp->cfg.ndevice_counts) * sizeof *sp->cfg.device_counts);
        sp->cfg.devices = sp->cfg.device_counts[sp->cfg.ndevice_counts - 1];
        if (sp->cfg.devices > hw->ndevice) {
            xform_model_facts_fini(&facts);
            return di_error_set(err, DI_EINVAL, "%u devices asked for, but %s has %u",
                                sp->cfg.devices, hw->name, hw->ndevice);
        }
    }
    sp->module = m;
    sp->hw = hw;
    sp->devices = sp->cfg.devices ? sp->cfg.devices : hw->ndevice;
    sp->batch = facts.batch;
    sp->layers = facts.layers;
    sp->data_bytes = facts.data_bytes;
    memcpy(sp->saved_min, facts.saved_min, sizeof sp->saved_min);
    sp->state_min = facts.state_min;
    sp->param_min = facts.param_min;
    sp->grad_min = facts.grad_min;
    sp->state_bytes = facts.weight_bytes;
    sp->selective_ops = facts.selective_ops;
    sp->sequence_ops = facts.sequence_ops;
    sp->experts = facts.experts;
    sp->seq = facts.seq;
    sp->expert_bytes = facts.expert_bytes;
    xform_model_facts_fini(&facts);
    for (uint32_t d = 0; d < hw->ndevice; d++)
        if (hw_device_capacity(hw_device_spec(hw, d)) > sp->max_capacity)
            sp->max_capacity = hw_device_capacity(hw_device_spec(hw, d));
    sim_model_stats_of(m, &sp->stats);
    sp->tokens_per_step = sp->stats.tokens > 0 ? sp->stats.tokens : 1.0;
    space_key(sp);
    b.sp = sp;
    b.cap = 0;
    if ((rc = enumerate(&b, err)) != 0)
        search_space_fini(sp);
    return rc;
}

void
search_space_analyse(search_space *sp)
{
    di_error err;
    if (sp->analysed)
        return;
    bound_analyses(sp);
    /* Cannot fail where xform_model_facts_init did not; without it, validation analyzes anew. */
    if (xform_analysis_new(sp->module, &sp->analysis, &err) != 0)
        sp->analysis = NULL;
    sp->analysed = 1;
}

int
search_space_validate(const search_space *sp, const strategy *s, di_error *err)
{
    if (sp->analysis != NULL)
        return xform_validate_analyzed(sp->analysis, s, sp->hw, err);
    return xform_validate(sp->module, s, sp->hw, err);
}

int
search_space_init(search_space *sp, const ir_module *m, const hw_model *hw,
                  const search_config *cfg, di_error *err)
{
    int rc = search_space_init_keyed(sp, m, hw, cfg, err);
    if (rc == 0)
        search_space_analyse(sp);
    return rc;
}

void
search_space_fini(search_space *sp)
{
    xform_analysis_free(sp->analysis);
    di_free(sp->candidates);
    for (uint32_t i = 0; i < sp->nlayer_mem; i++) {
        di_free(sp->layer_mem[i].zero_min);
        di_free(sp->layer_mem[i].zero_grad_min);
        di_free(sp->layer_mem[i].zero_count_min);
        di_free(sp->layer_mem[i].zero_bwd_count_min);
        di_free(sp->layer_mem[i].zero_full_count_min);
        di_free(sp->layer_mem[i].split);
        di_free(sp->layer_mem[i].time.gemms);
    }
    di_free(sp->layer_mem);
    di_free(sp->dps);
    di_free(sp->dp_group);
    for (uint32_t i = 0; i < sp->nstage_layout; i++)
        di_free(sp->stage_layout[i].layers);
    di_free(sp->stage_layout);
    for (uint32_t i = 0; i < sp->npipe; i++)
        di_free(sp->pipe[i].inflight);
    di_free(sp->pipe);
    memset(sp, 0, sizeof *sp);
}

uint64_t
search_space_shard_size(const search_space *sp)
{
    uint64_t i = sp->cfg.shard_index, n = sp->cfg.shard_count;
    return sp->ncandidate > i ? (sp->ncandidate - i + n - 1) / n : 0;
}

const search_candidate *
search_space_at(const search_space *sp, uint64_t k)
{
    uint64_t i = sp->cfg.shard_index + k * sp->cfg.shard_count;
    return i < sp->ncandidate ? &sp->candidates[i] : NULL;
}

const search_candidate *
search_space_next(const search_space *sp, uint64_t *cursor)
{
    const search_candidate *c = search_space_at(sp, *cursor);
    if (c)
        ++*cursor;
    return c;
}

/* ---- candidates ---- */

void
search_candidate_strategy(const search_candidate *c, strategy *s)
{
    strategy_init(s);
    s->dp = c->dp;
    s->tp = c->tp;
    s->pp = c->pp;
    s->microbatches = c->microbatches;
    s->schedule = (strategy_schedule)c->schedule;
    s->virtual_stages = c->schedule == STRATEGY_SCHEDULE_INTERLEAVED ? c->virtual_stages : 1;
    s->recompute = (strategy_recompute)c->recompute;
    s->zero = c->zero;
    s->sequence_parallel = c->sequence_parallel;
    s->overlap_grad_reduce = c->overlap;
    s->ep = c->ep > 1 ? c->ep : 1;
    s->cp = c->cp > 1 ? c->cp : 1;
    s->order = (strategy_order)c->order;
    s->recompute_layers = c->recompute_layers;
    if (c->nstages > 0) {
        s->dp = s->tp = 1;
        s->nstages = c->nstages;
        s->stages = di_xcalloc(c->nstages, sizeof *s->stages);
        for (uint32_t g = 0; g < c->nstages; g++) {
            s->stages[g].dp = c->sdp[g];
            s->stages[g].tp = c->stp[g];
        }
    }
    /*
     * Every field is in range and the schedule is DEFAULT exactly when pp = 1 by construction,
     * so normalizing only fills in the bucket size.
     */
    if (strategy_normalize(s, NULL) != 0)
        abort();
}

void
search_candidate_format(const search_candidate *c, char *buf, size_t size)
{
    strategy s;
    search_candidate_strategy(c, &s);
    strategy_format(&s, buf, size);
    strategy_fini(&s);
}

/* ---- evaluation ---- */

/*
 * The forward chunks of model stage j (0 <= j < V, the group's j-th) that
 * group g of c has run and not freed just before its first backward chunk:
 * those before it in the group's program order (search_pipe.inflight, from
 * xform_group_sequence: GPipe m; 1F1B min(pp - g, m); interleaved the
 * warm-up's and one more that run stage j), none of whose activations is
 * freed yet. pp = 1: one.
 */
static double
in_flight(const search_space *sp, const search_candidate *c, uint32_t g, uint32_t j)
{
    const struct search_pipe *e;
    double n = 1;
    if (c->pp > 1 && (e = find_pipe(sp, c)) != NULL && e->inflight != NULL)
        n = e->inflight[(size_t)g * e->V + j];
    return n;
}

/* The fewest of in_flight over group g's model stages (at least 1). */
static double
in_flight_least(const search_space *sp, const search_candidate *c, uint32_t g)
{
    double least = 0;
    for (uint32_t j = 0; j < virtual_of(c); j++) {
        double n = in_flight(sp, c, g, j);
        if (j == 0 || n < least)
            least = n;
    }
    return least > 0 ? least : 1;
}

/*
 * Per layer, what a device of group k holds at once at least (layer_bound):
 * a activations per microbatch, s state, g gradient buffers (0 when they are
 * not held whole over the microbatches; never negative). The simulator holds a gradient
 * buffer from the start of the step to its reduction (docs/simulator.md,
 * Memory: Megatron-LM's contiguous gradient buffer), so just before the
 * group's first backward chunk, with its in-flight forwards, it holds them
 * all; that moment also covers the last backward chunk's s + g + a.
 */
static double
held(const search_space *sp, const search_candidate *c, uint32_t k, double a, double s, double g)
{
    return in_flight_least(sp, c, k) * a + s + g;
}

/*
 * What weights of state, param (the parameters alone) and grad (their
 * gradients as accumulated) bytes, each divided by split, hold per device
 * for the whole step under c's ZeRO stage (layer_bound): *s of weights and
 * optimizer state, divided by dp under ZeRO (ZeRO-1 and -2 gather the
 * parameters whole before the first chunk and keep them), and *g of
 * gradient buffers, held from the start of the step with two microbatches
 * or more (held, above): whole without ZeRO and under ZeRO-1; under ZeRO-2
 * and -3 the buffers that accumulate the reduce-scattered shards (the
 * simulator's gradient buffer is the first microbatch's shard, which later
 * microbatches add to: sched.c), each gradient at least 1 / dp of it.
 *
 * ep: the expert parallelism of the layers' weights (1 for the embedding's
 * and the head's). Under ep > 1 a layer's experts are split over ep ranks and
 * the rest is not, in a share that is not known: each part is at least its
 * whole divided by ep. Under ZeRO the experts' optimizer state (and under
 * ZeRO-3 their parameters) is sharded over the dp / ep ranks of their
 * expert-data group, dp ways in all as the rest's: those divide by dp (and cp
 * at most) as without ep. No gradient buffer counts under ep: a device's
 * experts' gradients are not all held whole when its last backward chunk
 * starts (test_memory_bound_ep).
 */
static void
zero_held(const search_candidate *c, uint32_t ep, uint64_t state, uint64_t param, uint64_t grad,
          double split, double *s, double *g)
{
    /* ZeRO shards over the data and context ranks at most (dp.c). */
    double zs = (double)c->dp * (c->cp > 1 ? c->cp : 1), x = ep > 1 ? (double)ep : 1;
    *s = floor((double)state / (split * (c->zero ? zs : x)));
    if ((c->zero == 1 || c->zero == 2) && param <= state)
        *s = floor((double)(state - param) / (split * zs) + (double)param / (split * x));
    *g = 0;
    if (ep > 1)
        return;
    if (c->zero <= 1 && c->microbatches >= 2)
        *g = floor((double)grad / split);
    else if (c->microbatches >= 2)
        *g = floor((double)grad / (split * c->dp));
}

/*
 * What some device holds at once by its layers. Per microbatch and device
 * a layer keeps at least a = kept / (dp m) of activations and s = state /
 * (zero ? dp : 1) of weights and optimizer state for the whole step, kept
 * and state per device under the candidate's tp and sp (layer_mem; without
 * that analysis the sequential figures divided by tp: every value at most
 * split over it). The batch is split over dp and m. Group g holds w_g
 * microbatches in flight (in_flight) on each of its L_g layers, so a device
 * of it L_g (w_g a + s): the largest of these with the L_g the transforms
 * give (stage_layout), else, however the L layers are split over the
 * groups, max_g L_g (w_g a + s) >= L / sum_g 1 / (w_g a + s).
 *
 * Without ZeRO and under ZeRO-1 a layer also accumulates its whole gradient
 * buffers, g (grad_min), over the microbatches, and reduces them only after
 * its last accumulation (under ZeRO-2 and -3 it accumulates their shards:
 * g / dp at least, held to the step's end). With m >= 2 microbatches, when a device starts its
 * last backward chunk (microbatch m's), every layer it holds has run the
 * backward of microbatch 1, and the chunk's own layers still hold microbatch
 * m's activations: per layer s + g + a when the device holds one chunk
 * function (V = 1). Interleaved, the other chunks' buffers may be reduced
 * and freed by then under ZeRO-1 with overlap; an all-reduce (ZeRO 0) runs in
 * place, and without overlap nothing is reduced before the backward ends:
 * per layer s + g there. So w_g a + s above becomes the larger of the two.
 */
static uint64_t
layer_bound(const search_space *sp, const search_candidate *c)
{
    const struct search_layer_mem *e = find_layer_mem(sp, c->tp, c->sequence_parallel);
    const struct search_stage_layout *st = find_stage_layout(sp, c->pp, virtual_of(c));
    /*
     * Op-level selective recomputation (selective-op), and full recomputation of
     * some layers only (recompute_layers), keep at least what full recomputation
     * keeps (the layer checkpoints), and the analyses have no working set of
     * them: full's kept bytes, and no working set.
     */
    int no_ws = c->recompute == STRATEGY_RECOMPUTE_SELECTIVE_OP || c->recompute_layers > 0;
    int r = c->recompute < 3 ? c->recompute : STRATEGY_RECOMPUTE_FULL;
    double a, s, g, inv = 0, split = c->tp; /* without the analysis: everything split over tp */
    double ws = 0;
    uint64_t kept = sp->saved_min[r], state = sp->state_min, param = sp->param_min,
             grad = sp->grad_min;
    if (e != NULL && e->ok) { /* per device already */
        kept = e->saved_min[r];
        state = e->state_min;
        param = e->param_min;
        grad = e->grad_min;
        split = 1;
    }
    if (sp->layers == 0 || (kept == 0 && state == 0))
        return 0;
    /* Context parallelism splits the activations further (all but the gathered keys, values). */
    a = floor((double)kept / ((double)c->dp * c->microbatches * split * (c->cp > 1 ? c->cp : 1)));
    zero_held(c, c->ep, state, param, grad, split, &s, &g);
    /*
     * The backward's working set: when the group's first backward chunk
     * runs its top layer, that layer's backward and repeated ops hold at
     * least ws (work_set_min, per microbatch) beside everything above but
     * that layer's kept activations of the microbatch, which may be freed
     * by then (at most a of the least layer's: the others still hold theirs).
     */
    if (!no_ws && e != NULL && e->ok && c->cp <= 1 && c->ep <= 1)
        ws = floor((double)e->work_set_min[r] / ((double)c->dp * c->microbatches));
    /*
     * ZeRO-3 gathers a layer's weights whole before their first reader (an
     * all-gather's result, besides the shard s counts; a weight ZeRO cannot
     * split is held whole instead): when the group's first backward chunk
     * starts the first op of its top layer that reads them, the device holds
     * at least param (1 - 1 / dp) more, and as at ws's moment at most that
     * layer's a of the microbatch may be freed. The larger of the two.
     */
    if (e != NULL && e->ok && c->zero == 3 && c->dp > 1 && c->cp <= 1 && c->ep <= 1) {
        double wz = floor((double)param * (1 - 1.0 / c->dp));
        /*
         * And at the working set's moment, the weights the layer's ops read
         * before and after it (work_set_weights) are held gathered beside it.
         */
        double wsz = no_ws ? 0 : ws + floor((double)e->work_set_weights[r] * (1 - 1.0 / c->dp));
        if (wz > ws)
            ws = wz;
        if (wsz > ws)
            ws = wsz;
    }
    /*
     * ZeRO-2 and -3 keep no whole gradient buffer: each microbatch's weight
     * gradients (and their casts) are made whole, reduce-scattered and freed,
     * besides the shards' buffers g counts. At two moments of the layer's
     * backward (work_set_fixed_at_most, at the working set's most; and
     * work_set_fixed_most, where those values are most) the device holds the
     * batch-divided bytes, the gathered weights under ZeRO-3, and those values
     * whole, all at once.
     */
    if (!no_ws && e != NULL && e->ok && c->zero >= 2 && c->dp > 1 && c->cp <= 1 && c->ep <= 1) {
        const struct xform_ws_moment *fm = &e->work_set_fixed_most[r];
        double x = (double)c->dp * c->microbatches, y = c->zero == 3 ? 1 - 1.0 / c->dp : 0;
        double at = floor((double)e->work_set_min[r] / x) +
                    floor((double)e->work_set_weights[r] * y) +
                    (double)e->work_set_fixed_at_most[r];
        double fmost = floor((double)fm->act / x) + floor((double)fm->weights * y) +
                       (double)fm->fixed;
        if (at > ws)
            ws = at;
        if (fmost > ws)
            ws = fmost;
    }
    if (st != NULL && st->nstage == c->pp * virtual_of(c)) {
        /* The layers each group holds are known: the busiest group. */
        /*
         * The weights outside the layers (xform_layer_facts.edge_state, per
         * device): the embedding's on the first group, the head's on the last.
         */
        double most = 0, edge[2] = {0, 0}, ea = 0, eb = 0;
        /* Not experts: expert parallelism leaves them as they are. */
        if (e != NULL && e->ok) {
            for (int x = 0; x < 2; x++) {
                double es, eg;
                zero_held(c, 1, e->edge_state[x], e->edge_param[x], e->edge_grad[x], 1, &es, &eg);
                /*
                 * Under ZeRO-2 and -3 a summed gradient (a tied weight's) is not
                 * reduce-scattered per microbatch: its contributions are
                 * accumulated whole and combined once per step (xform.h).
                 */
                if (c->zero >= 2 && c->microbatches >= 2 && e->edge_grad_summed[x] > 0 &&
                    e->edge_grad_summed[x] <= e->edge_grad[x])
                    eg = floor((double)(e->edge_grad[x] - e->edge_grad_summed[x]) / c->dp) +
                         (double)e->edge_grad_parts[x];
                edge[x] = es + eg;
            }
            /*
             * The activations the head keeps for the backward (head_saved: the
             * final norm's, the logits', the vocabulary-parallel cross-entropy's
             * softmax), per microbatch as a, on the last model stage.
             */
            /*
             * And those the embedding keeps (embed_saved: its dropout's mask), per
             * microbatch, on the first: each in-flight microbatch's until its
             * backward ends, after the chunk's layers', so all of them at ws's moment.
             */
            if (c->cp <= 1) {
                ea = floor((double)e->head_saved / ((double)c->dp * c->microbatches));
                eb = floor((double)e->embed_saved / ((double)c->dp * c->microbatches));
            }
        }
        for (uint32_t k = 0; k < c->pp; k++) {
            /* Each model stage of the group with its own in-flight chunks. */
            double h = ws > a ? ws - a : 0;
            h += (k == 0 ? edge[0] + in_flight(sp, c, 0, 0) * eb : 0) +
                 (k + 1 == c->pp ? edge[1] : 0);
            if (k + 1 == c->pp && ea > 0) {
                /*
                 * The head's in-flight microbatches keep theirs until their
                 * backward: all of them just before the group's first backward
                 * chunk, all but that chunk's microbatch once it has reached the
                 * top layer (ws's moment, which may have freed that
                 * microbatch's): the larger of the two.
                 */
                double late = ws > a ? ws - a : 0, w = in_flight(sp, c, k, virtual_of(c) - 1);
                h += (w - 1) * ea + (ea > late ? ea - late : 0);
            }
            for (uint32_t j = k, v = 0; j < st->nstage; j += c->pp, v++)
                h += st->layers[j] * (in_flight(sp, c, k, v) * a + s + g);
            if (h > most)
                most = h;
        }
        return (uint64_t)floor(most * (1 - 1e-9));
    }
    for (uint32_t k = 0; k < c->pp; k++) {
        double h = held(sp, c, k, a, s, g);
        if (h <= 0)
            return 0; /* a group may hold nothing */
        inv += 1 / h;
    }
    /* Rounded down, with a margin for the floating-point sum. */
    return (uint64_t)floor(sp->layers / inv * (1 - 1e-9));
}

uint64_t
search_memory_bound(const search_space *sp, const search_candidate *c)
{
    uint64_t held, state, act, ncp = c->cp > 1 ? c->cp : 1, n;
    /* The analyses assume every stage's degrees alike: a nested candidate has no bound. */
    if (c->nstages > 0)
        return 0;
    n = search_candidate_devices(c);
    act = layer_bound(sp, c);
    /* Saturating, and floor division keeps it a lower bound. */
    if (di_mul_u64(sp->state_bytes, c->zero ? 1 : c->dp * ncp, &held) != 0 ||
        held + sp->data_bytes < held)
        return UINT64_MAX / n;
    /* Under ep the experts' state is held dp / ep times over the data-parallel group, not dp. */
    if (c->ep > 1 && !c->zero)
        held -= sp->expert_bytes * (c->dp - c->dp / c->ep) * ncp;
    state = (held + sp->data_bytes) / n;
    /* Two bounds that may hold on different devices: the larger. */
    return state > act ? state : act;
}

/*
 * A layer's least bytes per device at c's dp, as dp_comm_bound below names them:
 * b[0] P, b[1] Z, b[2] G, b[3] Zg; how many parameters ZeRO shards, b[4], and of
 * those its backward chunk reads, b[5] (a backward op, or under full
 * recomputation also a forward op it repeats); and *gp the first stage's
 * data-parallel group. 0 where the analyses do not say.
 */
static int
zero_layer_bytes(const search_space *sp, const search_candidate *c,
                 const struct search_layer_mem *e, const struct search_dp_group **gp, double b[6])
{
    int32_t k;
    if (c->dp <= 1 || e->zero_min == NULL || !e->ok ||
        (*gp = find_dp_group(sp, c->dp, dp_stride(c))) == NULL ||
        (k = dp_index(sp, c->dp)) < 0)
        return 0;
    b[0] = (double)e->param_min;
    b[1] = (double)e->zero_min[k] < b[0] ? (double)e->zero_min[k] : b[0];
    b[2] = (double)e->grad_min > b[0] ? (double)e->grad_min : b[0];
    /* A sharded parameter's gradient has at least its bytes. */
    b[3] = (double)e->zero_grad_min[k] > b[1] ? (double)e->zero_grad_min[k] : b[1];
    if (b[3] > b[2])
        b[3] = b[2];
    b[4] = e->zero_count_min != NULL ? (double)e->zero_count_min[k] : 0;
    b[5] = e->zero_bwd_count_min != NULL ? (double)e->zero_bwd_count_min[k] : 0;
    if (c->recompute == STRATEGY_RECOMPUTE_FULL && c->recompute_layers == 0 &&
        e->zero_full_count_min != NULL)
        b[5] = (double)e->zero_full_count_min[k];
    return 1;
}

/*
 * What the data-parallel communicator's collective stream of a device of
 * the first pipeline stage carries at least for the data parallelism of its
 * N0 layers, in seconds: its collectives, all over the one data-parallel
 * group, run one at a time on that stream (docs/simulator.md), each at
 * least its payload times the group's least slope (sharing a link only
 * slows it). A layer's parameters P (bytes per
 * device), of which Z are sharded by ZeRO at this dp; its gradients G
 * (at the dtype the updates read them, which the reductions carry: Megatron's
 * fp32 accumulation doubles a bf16 model's), Zg of them sharded; a gradient
 * has at least its parameter's bytes. ZeRO 0: one all-reduce of the gradients.
 * ZeRO-1: a reduce-scatter of the gradients (all-reduce where unsharded)
 * and an all-gather of the sharded working copy; ZeRO-2: the sharded
 * gradients reduce-scattered each microbatch; ZeRO-3: also the sharded
 * parameters gathered before each use, in the forward and the backward
 * chunks of each microbatch (dp.c, chunk.c). g and b: zero_layer_bytes's (g NULL
 * where it does not say).
 */
static double
dp_comm_bound(const search_candidate *c, const struct search_dp_group *g, const double b[6],
              uint32_t N0)
{
    double Z, G, Zg, m = (double)c->microbatches, per;
    if (N0 == 0 || g == NULL)
        return 0;
    Z = b[1];
    G = b[2];
    Zg = b[3];
    /*
     * Each term grows with each of P, Z, G, Zg and the counts (m >= 1), so the least of
     * each over the layers gives the least of the whole.
     */
    switch (c->zero) {
    case 0:
        per = G * g->all_reduce;
        break;
    case 1:
        per = G * g->reduce_scatter + Z * g->all_gather;
        break;
    case 2:
        per = Zg * m * g->reduce_scatter + (G - Zg) * g->reduce_scatter + Z * g->all_gather;
        break;
    default:
        /*
         * Each gather is a collective of its own (one per weight, chunk.c), at least
         * the group's all-gather latency besides its payload: a layer's b[4] sharded
         * weights in each forward chunk, the b[5] its backward chunk reads in each
         * backward chunk.
         */
        per = Zg * m * g->reduce_scatter + (G - Zg) * g->reduce_scatter +
              2 * Z * m * g->all_gather + (b[4] + b[5]) * m * g->all_gather_alpha;
        break;
    }
    return N0 * per;
}

/*
 * ZeRO-1 without overlap_grad_reduce: the step program reduce-scatters the
 * gradients its optimizer updates read by buckets (chunk.c, step_buckets),
 * each bucket the concatenation of its gradients' replica-major views
 * (xf_body_bucket_reduce: a Concat, a compute op, even of one gradient). The
 * step programs come after every chunk in program order (pipeline.c), so a
 * device's first such Concat starts once its compute stream has run all its
 * chunks, and the reduce-scatters, which read the Concats, run one at a time on
 * the data-parallel communicator's stream after that: a layer's sharded
 * gradients (Zg, at least) at the group's least reduce-scatter slope, per
 * layer of the group, come after its chunks. Unsharded gradients may be
 * all-reduced alone, with no Concat, as soon as accumulated, and ZeRO-1's
 * gathers of the working copy run at the start of the step
 * (xf_pl_emit_gathers): neither counts. With overlap the buckets go in the
 * last microbatch's backward chunk instead. The slope is that of the first
 * stage's data-parallel group; *aligned says whether every stage's group is
 * the same devices shifted by whole nodes (dp tp cp a multiple of the devices
 * per node; under tp-pp-dp, tp cp), whose collectives then cost the same on
 * the hardware's identical nodes. g and b as dp_comm_bound's.
 */
static double
zero1_step_scatter(const search_space *sp, const search_candidate *c,
                   const struct search_dp_group *g, const double b[6], int *aligned)
{
    uint32_t per_node = sp->hw->devices_per_node;
    *aligned = 0;
    if (c->zero != 1 || c->overlap || g == NULL)
        return 0;
    /* The next stage's group is this one shifted by its devices (tp-pp-dp: by tp cp). */
    *aligned = per_node > 0 && (c->order == STRATEGY_ORDER_TP_PP_DP
                                    ? (uint64_t)c->tp * (c->cp > 1 ? c->cp : 1)
                                    : (uint64_t)g->dp * g->stride) % per_node == 0;
    return b[3] * g->reduce_scatter;
}

/*
 * The pipeline's bubble, from group 0's side (docs/search.md, "Time
 * bound"). Per layer and microbatch, fw and bw are the least compute-stream
 * time of a forward and a backward chunk (recomputation included), fc and
 * bc the least of it once the chunk's input has arrived: its GEMMs and
 * tensor-axis reductions, which all read the incoming activation or
 * gradient (recomputation does not, and may run ahead). A chunk's ops are
 * in the order of the model's layers (the backward's reversed, each
 * recomputed op right before its first use), so every op of a chunk's
 * layers but the first (forward) or the first in program order (backward:
 * its top layer) comes after an op that reads the input: a chunk of N
 * layers takes at least fc + (N - 1) fw (backward: bc + (N - 1) bw) from
 * its input's arrival to its output. The stream runs group 0's chunks in
 * program order, each after the one before. So:
 *   - B0, group 0's first backward chunk (microbatch 0), gets its gradient no
 *     earlier than microbatch 0's forward has crossed every layer (model
 *     stage 0 on group 0 from the start) and its backward the stages after
 *     B0's; nor before the stream has run the forward chunks before it: e1;
 *   - from e1, B0 from its input, then every chunk up to the last forward
 *     (LF) in full;
 *   - after LF, the backward chunks left, in full, and the last (LB, the
 *     same microbatch as LF) no earlier than LF's output has crossed the
 *     stages after LF's and the gradient come back down through LB's stage.
 * When LF precedes B0 (few microbatches) the two ends are bounded apart.
 * Every term is a least time of work that runs in that order, so the sum is
 * a lower bound of the step; on a pipeline of equal stages and layers whose
 * work all reads the input it is 1F1B's (m + p - 1)(f + b).
 */
static double
pipe_bound(const struct search_pipe *e, double fw, double fc, double bw, double bc,
           const double edge[4], double acc)
{
    double e1, x, T, chain_a, chain_b;
    if (e == NULL || !e->ok)
        return 0;
#define FWD_CHAIN(layers, stages) ((layers) * fw - (stages) * (fw - fc))
#define BWD_CHAIN(layers, stages) ((layers) * bw - (stages) * (bw - bc))
    /* The embedding (edge[0], its backward edge[1]) and the head and loss (edge[2], [3]). */
    chain_a = edge[0] + e->n_first * fw + FWD_CHAIN(e->layers - e->n_first, e->stages - 1) +
              edge[2] + edge[3] + BWD_CHAIN(e->above_b0, e->st_above_b0);
    e1 = e->warm_f * fw > chain_a ? e->warm_f * fw : chain_a;
    x = e1 + BWD_CHAIN(e->n_b0, 1);
    chain_b = e->same_mb ? FWD_CHAIN(e->above_lf, e->st_above_lf) + edge[2] + edge[3] +
                               BWD_CHAIN(e->above_lb + e->n_lb, e->st_above_lb + 1) +
                               (e->st_above_lb + 1 == e->stages ? edge[1] : 0)
                         : 0;
#undef FWD_CHAIN
#undef BWD_CHAIN
    /* acc: a layer's gradient accumulation, in each backward chunk of a later microbatch. */
    if (e->lf_late) {
        double e2 = x + e->mid_f * fw + e->mid_b * bw + e->mid_b1 * acc;
        double tail = e->tail_b * bw + e->tail_b1 * acc;
        T = e2 + (tail > chain_b ? tail : chain_b);
    } else {
        double late = e->pre_f * fw + chain_b;
        T = x + e->tail_b * bw + e->tail_b1 * acc;
        if (late > T)
            T = late;
    }
    return T;
}

/*
 * The least time of tensor-axis collectives on the compute path for one
 * microbatch, q of the batch: count reduce-scatters and all-gathers of bytes
 * (whole batch) and ar_count all-reduces of ar_bytes, each at least its
 * kind's latency terms plus its payload times its kind's least slope.
 */
static double
tp_time(const struct search_layer_mem *e, double bytes, double count, double ar_bytes,
        double ar_count, double q)
{
    return e->tp_alpha * count + e->tp_slope * bytes * q + e->tp_ar_alpha * ar_count +
           e->tp_ar_slope * ar_bytes * q;
}

/*
 * The backward chunk's reductions with compute ops between them and their
 * reader (xform_layer_time.bwd_tp_late[].bytes, and re_tp_late for the
 * repeated forward's: bytes, between): the compute stream spends at least
 * the collective's time from the reduced op's end to the reader's start,
 * running meanwhile only those ops (counted in the work at their terms,
 * bwd_tp_late[].between) and what the chunk emits after an op that makes a
 * gradient: the accumulation's Add, where the bound counts it (ZeRO 0 and 1,
 * from two microbatches: accumulate_s, at these terms), of the gradients
 * those ops make (bwd_tp_late[].leaf_bytes and leaf_count, per device, whatever
 * the batch; a layer's accumulation counted in the work is at most its own
 * Adds' terms, so subtracting those of the Adds between keeps the rest of the
 * layer's count below the Adds outside), and bucket copies and ZeRO-2/3
 * shard additions, counted nowhere. So a layer's microbatch adds the
 * collectives' time less those, when positive. (Until 2026-11-29 the whole
 * layer's accumulation was subtracted, the most over the layers: on
 * gpt3-175b's layers, 1.7 ms at tp 8, more than the late collectives take.)
 */
static double
late_reductions(const struct search_layer_mem *e, const search_candidate *c,
                const xform_late_pair *p, double q)
{
    double late = tp_time(e, p->bytes, p->count, p->ar_bytes, p->ar_count, q) -
                  xform_work_time(&p->between, q);
    if (c->zero <= 1 && c->microbatches >= 2)
        late -= 3.0 * p->leaf_bytes * e->add_per_byte + p->leaf_count * e->add_launch;
    return late > 0 ? late : 0;
}

/*
 * late_reductions per place of the layer's late pairs (xform_layer_time.bwd_tp_late[r]
 * and the rest, XFORM_LATE_POS of each), summed: their intervals are disjoint, so each adds
 * its own idle time, and a pair whose ops between accumulate a large gradient (a weight's)
 * does not take from another's (a bias's). Until SEARCH_VERSION distir-search-48 the pairs
 * were summed first: on gpt3-175b at tp 8 with sequence parallelism, selective
 * recomputation and ZeRO-1, the all-gathers of the two output gradients (0.19 ms each,
 * exposed: only a bias's sum and cast between them and their GEMM) were cancelled by the
 * reduce-scatters that a weight gradient's cast and accumulation hide.
 */
static double
late_places(const struct search_layer_mem *e, const search_candidate *c, const xform_late_pair *pl,
            double q)
{
    double sum = 0;
    for (int k = 0; k < XFORM_LATE_POS; k++)
        sum += late_reductions(e, c, &pl[k], q);
    return sum;
}

/* A pass's tensor-axis collectives on the compute path (xform_work_bound's), as tp_time. */
static double
tp_reductions(const struct search_layer_mem *e, const xform_work_bound *w, double q)
{
    return tp_time(e, w->tp_reduce_bytes, w->tp_reduce_count, w->tp_ar_bytes, w->tp_ar_count, q);
}

int
search_memory_pruned(const search_space *sp, uint64_t bound)
{
    return (double)bound > sp->cfg.memory_headroom * sp->max_capacity;
}

int
search_time_bound_refused(const search_space *sp, const search_candidate *c)
{
    const struct search_layer_mem *e = find_layer_mem(sp, c->tp, c->sequence_parallel);
    const struct search_stage_layout *st = find_stage_layout(sp, c->pp, virtual_of(c));
    /* No layout: more pipeline stages than layers (or layers without annotations). */
    return (e != NULL && !e->ok) ||
           (st == NULL ? (uint64_t)c->pp * virtual_of(c) > 1 : st->nstage == 0);
}

/*
 * Ring attention under context parallelism (xform_layer_time.ring_bytes): on
 * each layer and microbatch of group 0 (N layers) the ring shifts every block
 * of keys and values cp - 1 times forward and again backward, and their
 * gradients cp times (lower.c), one dist.shift per tensor. All of them run on
 * the context group's communicator, whose stream runs one collective at a
 * time (sched.c, run_group), each at least its latency terms plus its slope
 * times its block, a (dp m cp)-th of the whole batch's (sim_collective_latency
 * and _slope over the group: 0 where a measured table prices it). Device 0's
 * context group: its ranks tp apart (rank_stride).
 */
static double
ring_bound(const search_space *sp, const search_candidate *c, const xform_layer_time *t,
           uint32_t N)
{
    uint32_t cp = c->cp, stride;
    double q, lat, slope, per;
    if (cp <= 1 || t->ring_count[0] <= 0)
        return 0;
    stride = rank_stride(c, c->tp);
    lat = group_latency(sp->hw, IR_OP_SHIFT, cp, stride);
    slope = group_slope(sp->hw, IR_OP_SHIFT, cp, stride);
    q = 1.0 / ((double)c->dp * c->microbatches * cp);
    per = (cp - 1) * (t->ring_count[0] * lat + slope * q * t->ring_bytes[0]) +
          (cp - 1) * (t->ring_count[1] * lat + slope * q * t->ring_bytes[1]) +
          cp * (t->ring_count[2] * lat + slope * q * t->ring_bytes[2]);
    return (double)c->microbatches * N * per;
}

/*
 * Expert parallelism's all_to_alls on a layer's dependency chain, per
 * microbatch (xform_layer_time.a2a_bytes, q the microbatch's share of the
 * batch): in the forward chunk the dispatched tokens go to their experts'
 * ranks right after moe.dispatch makes them and the experts' GEMM, the next
 * compute op in program order, reads them; the experts' output goes back
 * right after their last GEMM and moe.combine, the next, reads it; in the
 * backward chunk the output's gradient goes to the experts' ranks after the
 * backward moe.dispatch and their first backward GEMM, the next, reads it.
 * The compute stream runs its ops in program order, so it waits that long,
 * each at least the ep group's all-to-all latency terms plus its slope times
 * the bytes (sharing a link only slows it). Full recomputation repeats the
 * forward's two in the backward chunk, alike (search_time_bound adds *f
 * there). The backward's other all_to_all (the dispatched tokens' gradient)
 * is not counted: the weight gradients' casts, emitted before it, may run
 * meanwhile. The group of each pipeline stage: ep consecutive data ranks
 * (dp_stride apart), their costs the least over the stages (groups of the
 * same devices per node cost the same). *f the forward's, *b the
 * backward's, seconds.
 */
static void
a2a_bound(const search_space *sp, const search_candidate *c, const xform_layer_time *t, double q,
          double *f, double *b)
{
    uint32_t ep = c->ep, stride = dp_stride(c), per_node = sp->hw->devices_per_node;
    uint32_t cp = c->cp > 1 ? c->cp : 1;
    uint64_t stage = c->order == STRATEGY_ORDER_TP_PP_DP ? (uint64_t)c->tp * cp
                                                          : (uint64_t)c->tp * cp * c->dp;
    int32_t *devs;
    *f = *b = 0;
    if (ep <= 1 || (t->a2a_count[0] <= 0 && t->a2a_count[1] <= 0))
        return;
    devs = di_xmalloc(ep * sizeof *devs);
    for (uint32_t d = 0; d < c->pp; d++) {
        uint64_t off = d * stage;
        double lat, slope, tf, tb;
        /* Offsets alike modulo the node size give groups alike. */
        if (per_node > 0 && d >= per_node)
            break;
        for (uint32_t k = 0; k < ep; k++)
            devs[k] = (int32_t)(off + (uint64_t)k * stride);
        lat = sim_collective_latency(sp->hw, IR_OP_ALLTOALL, devs, ep);
        slope = sim_collective_slope(sp->hw, IR_OP_ALLTOALL, devs, ep);
        tf = t->a2a_count[0] * lat + slope * q * t->a2a_bytes[0];
        tb = t->a2a_count[1] * lat + slope * q * t->a2a_bytes[1];
        if (d == 0 || tf < *f)
            *f = tf;
        if (d == 0 || tb < *b)
            *b = tb;
    }
    di_free(devs);
}

/*
 * What search_time_bound prices per layer and microbatch on the compute stream, by pass
 * (pipe_bound's fw, fc, bw, bc, edges and accumulation; zcat, the bucket copies of a
 * backward chunk's layer under ZeRO-2/3), and the step program's reduce-scatters per
 * layer (zs, zs_aligned: zero1_step_scatter), for the schedule bound. ok once filled
 * (pipelined candidates with a bound only).
 */
struct pass_terms {
    double fw, fc, bw, bc, edge[4], acc, zcat, zs;
    int zs_aligned, ok;
};

static double
time_bound(const search_space *sp, const search_candidate *c, struct pass_terms *pt)
{
    const struct search_layer_mem *e = find_layer_mem(sp, c->tp, c->sequence_parallel);
    const struct search_stage_layout *st = find_stage_layout(sp, c->pp, virtual_of(c));
    const struct search_split_gemm *split;
    const xform_layer_time *t;
    xform_layer_time lt;
    double q, w, wg, red, rb = 0, rre = 0, chain, chain_f, bound = 0,
                          m = (double)c->microbatches, edge[4], acc, bwork, rf, rs_layer = 0, zs;
    double af, ab; /* a2a_bound's */
    double zb[6] = {0}; /* zero_layer_bytes */
    const struct search_dp_group *zg = NULL;
    double zcat = 0; /* a layer's bucket copies per microbatch under ZeRO-2/3 */
    int zs_aligned;
    uint32_t S = 0; /* layers of the model stages before group d's first */
    /* Full recomputation of some layers only: at least no recomputation's work. */
    int r = c->recompute_layers > 0 ? STRATEGY_RECOMPUTE_NONE : c->recompute;
    /*
     * Devices of other kinds (overrides) may be faster than device 0, which the analyses price.
     * With fused kernels the analyses count what every fused kernel costs at least
     * (XFORM_ANALYSIS_FUSED).
     */
    if (e == NULL || !e->ok || st == NULL || st->nstage == 0 || sp->batch <= 0 || c->dp == 0 ||
        c->microbatches == 0 || sp->hw->noverride > 0 || c->nstages > 0)
        return 0;
    t = &e->time;
    /*
     * Context parallelism splits every token-wise op's work and bytes over the cp ranks
     * (the busiest device has at least the average: attention's too, each rank's queries
     * against the keys they see), so q below counts cp too; its GEMMs are priced
     * unquantized (a smaller split never quantizes better: split_analyses's are per dp m),
     * and no data-parallel term counts (gradients reduced and ZeRO sharded over dp x cp,
     * which the dp groups' analyses do not price). Expert parallelism leaves each device
     * the work it has without (E / ep experts on the tokens of ep data ranks, at the same
     * capacity, where each rank had every expert on its own tokens), in GEMMs of other
     * shapes, so unquantized too; the experts' gradients are reduced over dp / ep ranks
     * and their state sharded so: no data-parallel term either.
     */
    if (c->cp <= 1 && c->ep <= 1 &&
        (split = find_split(e, (uint64_t)c->dp * c->microbatches)) != NULL) {
        /* The GEMMs quantized at this microbatch's shape (split_analyses). */
        lt = *t;
        lt.fwd.gemm_flop_s = split->gemm_flop_s[0];
        lt.bwd.gemm_flop_s = split->gemm_flop_s[1];
        lt.re[1].gemm_flop_s = split->gemm_flop_s[2];
        lt.re[2].gemm_flop_s = split->gemm_flop_s[3];
        t = &lt;
    }
    q = 1.0 / ((double)c->dp * c->microbatches * (c->cp > 1 ? c->cp : 1));
    w = xform_work_time(&t->fwd, q) + xform_work_time(&t->bwd, q);
    wg = xform_gemm_time(&t->fwd, q) + xform_gemm_time(&t->bwd, q);
    /*
     * The forward reductions over the tensor group the next op waits for: on the
     * dependency chain, and time the compute stream cannot fill.
     */
    rf = red = tp_reductions(e, &t->fwd, q);
    /* Expert parallelism's forward all_to_alls, on the chain too (a2a_bound). */
    a2a_bound(sp, c, t, q, &af, &ab);
    rf += af;
    red += af;
    chain = wg + red;
    chain_f = xform_gemm_time(&t->fwd, q) + rf; /* the forward's part of it */
    if (r == STRATEGY_RECOMPUTE_SELECTIVE || r == STRATEGY_RECOMPUTE_FULL) {
        w += xform_work_time(&t->re[r], q);
        wg += xform_gemm_time(&t->re[r], q);
        rre = tp_reductions(e, &t->re[r], q) +
              late_places(e, c, t->re_tp_late[r], q);
        /* Full recomputation repeats the forward's all_to_alls, each before its reader. */
        if (r == STRATEGY_RECOMPUTE_FULL)
            rre += af;
        red += rre;
    }
    /* And the backward's (not on the chain counted above: the forward's GEMMs). */
    if (r >= 0 && r < 3)
        rb = tp_time(e, t->bwd_tp_reduce_bytes[r], t->bwd_tp_reduce_count[r], t->bwd_tp_ar_bytes[r],
                     t->bwd_tp_ar_count[r], q) +
             late_places(e, c, t->bwd_tp_late[r], q);
    rb += ab; /* the backward's all_to_all the experts' backward GEMM waits for */
    red += rb;
    w += red;
    for (int k = 0; k < 4; k++)
        edge[k] = xform_work_time(&t->edge[k], q);
    /*
     * Without ZeRO and under ZeRO-1 each later microbatch adds its gradients into the
     * buffers; under expert parallelism a device adds only its experts' (a share the
     * analysis at ep 1 does not separate), so none counts.
     */
    acc = c->zero <= 1 && c->microbatches >= 2 && c->ep <= 1 ? e->accumulate_s : 0;
    if (c->pp > 1) {
        /* The same terms split by pass, for the bubble (pipe_bound). */
        double fw = xform_work_time(&t->fwd, q) + rf, fc = xform_gemm_time(&t->fwd, q) + rf;
        double bw = xform_work_time(&t->bwd, q), bc = xform_gemm_time(&t->bwd, q);
        if (r == STRATEGY_RECOMPUTE_SELECTIVE || r == STRATEGY_RECOMPUTE_FULL)
            bw += xform_work_time(&t->re[r], q) + rre;
        bound = pipe_bound(find_pipe(sp, c), fw, fc, bw + rb, bc + rb, edge, acc);
        if (pt != NULL) {
            pt->fw = fw;
            pt->fc = fc;
            pt->bw = bw + rb;
            pt->bc = bc + rb;
            memcpy(pt->edge, edge, sizeof pt->edge);
            pt->acc = acc;
            pt->ok = 1;
        }
    }
    /* A layer's backward work as counted in w, and its shards' reduce-scatter under ZeRO-2/3. */
    bwork = xform_work_time(&t->bwd, q) + rb;
    if (r == STRATEGY_RECOMPUTE_SELECTIVE || r == STRATEGY_RECOMPUTE_FULL)
        bwork += xform_work_time(&t->re[r], q) + rre;
    if (c->cp > 1 || c->ep > 1 || !zero_layer_bytes(sp, c, e, &zg, zb))
        zg = NULL;
    if (c->zero >= 2 && zg != NULL) {
        rs_layer = zb[3] * zg->reduce_scatter;
        /*
         * Each microbatch's backward chunk copies the layer's sharded gradients
         * (Zg bytes, at least) into the buckets it reduce-scatters: a Concat of
         * them (xf_body_bucket_reduce), a compute op on the stream that reads
         * and writes those bytes, outside every layer's work counted above.
         */
        zcat = 2 * zb[3] * e->concat_per_byte;
    }
    zs = zero1_step_scatter(sp, c, zg, zb, &zs_aligned);
    if (pt != NULL) {
        pt->zcat = zcat;
        pt->zs = zs;
        pt->zs_aligned = zs_aligned;
    }
    for (uint32_t d = 0; d < c->pp && d < st->nstage; d++) {
        uint32_t N = 0; /* group d's layers: model stages d, d + pp, ... */
        double busy, head;
        for (uint32_t k = d; k < st->nstage; k += c->pp)
            N += st->layers[k];
        /*
         * Group d runs its compute ops one at a time, and none before microbatch 0's
         * forward has crossed the S layers before its first (their GEMMs, on the
         * dependency chain: its first op in program order reads that activation).
         * Its last backward GEMM (a MatMulGrad of its lowest layer, last microbatch)
         * is followed by that microbatch's backward across the same S layers (their
         * GEMMs; recomputation may run ahead of the gradient, so it is not on that
         * chain). Only the other ops of that last layer may still run meanwhile: at
         * most one layer's non-GEMM work for one microbatch, w - wg, and its bucket
         * copies under ZeRO-2/3, zcat (each of the m N layer chunks has them).
         */
        busy = m * N * (w + zcat) + S * chain - (S ? w + zcat - wg : 0);
        if (m * N * (w + zcat) > busy)
            busy = m * N * (w + zcat);
        /*
         * The embedding runs on group 0 and the head and loss on the last
         * (each microbatch, in full); the others' first op waits for the
         * embedding's forward and their last backward is followed by its
         * backward, both on microbatch 0's and the last one's dependency chain.
         */
        busy += d == 0 ? m * (edge[0] + edge[1]) : edge[0] + edge[1];
        /* Its accumulations (those of the last layer it runs may overlap the drain). */
        busy += (m - 1) * N * acc - (S ? acc : 0);
        head = d + 1 == c->pp ? m * (edge[2] + edge[3]) : 0;
        busy += head;
        /*
         * ZeRO-2/3, from the second microbatch on: a backward chunk ends with the
         * additions of its gradients' shards into their accumulators, on the compute
         * stream, which wait for the reduce-scatters of the chunk's buckets (chunk.c),
         * which cannot start before the chunk does and run one at a time on the
         * data-parallel communicator: the chunk holds the stream at least as long as
         * they take, L x Zg x the group's reduce-scatter slope for its L layers, where
         * the work counts L x (bwork + zcat). The last microbatch's chunks may overlap
         * the drain counted above: m - 2 microbatches.
         */
        if (rs_layer > bwork + zcat && c->microbatches >= 3)
            busy += (m - 2) * N * (rs_layer - bwork - zcat);
        bound = busy > bound ? busy : bound;
        if (d == 0) {
            double comm = dp_comm_bound(c, zg, zb, N);
            /*
             * Group 0's chunks end no earlier than both its busy time (S is 0: its own
             * work) and the pipeline's bound (pipe_bound: its last backward chunk), so
             * bound is now at most when its compute stream runs its step program.
             */
            double ring = ring_bound(sp, c, t, N);
            bound += N * zs;
            bound = comm > bound ? comm : bound;
            bound = ring > bound ? ring : bound;
        } else if (zs > 0 && zs_aligned) {
            /*
             * Group d's chunks end no earlier than its first op's input has crossed
             * the embedding and the S layers before it (the chain above) and its stream
             * has then run its own work; its step program's reduce-scatters follow.
             */
            double own = edge[0] + S * chain_f + m * N * w + (m - 1) * N * acc + N * zs + head;
            bound = own > bound ? own : bound;
        }
        S += st->layers[d];
    }
    return bound;
}

double
search_time_bound(const search_space *sp, const search_candidate *c)
{
    return time_bound(sp, c, NULL);
}

/*
 * The pipeline schedule played out at least times (search_time_bound_schedule): every
 * group's chunks in program order (xform_group_sequence), each chunk of model stage k
 * (N_k layers) holding its group's compute stream for at least its work W (a forward:
 * N_k fw; a backward: N_k bw, its bucket copies under ZeRO-2/3 and, from the second
 * microbatch, its gradient accumulation; the embedding's, the head's and the loss's where
 * its stage holds them: pipe_bound's terms) after the chunk before it, and making its
 * output (the activation or the gradient the next chunk of that microbatch reads) no
 * earlier than C after both its input's arrival and the chunk before it: a forward chunk's
 * input is the previous model stage's output for that microbatch (model stage 0's, the
 * data, at 0), a backward chunk's the next model stage's gradient (the last stage's, its
 * own forward's output, through the loss), and C is fc + (N_k - 1) fw (bc + (N_k - 1)
 * bw), as pipe_bound counts it, with the embedding's and the head's terms on the chain. A
 * transfer counts 0. Each time is a maximum of sums of least times over the same
 * precedences as the simulation's, whose times are each at least these, so each is at
 * most the simulated one, and the step at least the latest chunk's end; plus, per group,
 * the step program's reduce-scatters after its chunks where search_time_bound counts them
 * (zero1_step_scatter: group 0, or every group when their data-parallel groups are alike).
 * 0 when the schedule does not run to its end (which xform_group_sequence's orders do).
 */
static double
schedule_bound(const search_space *sp, const search_candidate *c, const struct pass_terms *pt)
{
    const struct search_stage_layout *st = find_stage_layout(sp, c->pp, virtual_of(c));
    uint32_t p = c->pp, V = virtual_of(c), m = c->microbatches, S, per, *pos, *stack, nstack = 0;
    uint8_t *queued;
    xform_chunk *seq;
    double *out_f, *out_b, *end, bound = 0;
    uint64_t done = 0, total;
    if (st == NULL || st->nstage != p * V || p < 2 || m == 0 ||
        (uint64_t)2 * V * m * p > (1u << 24))
        return 0;
    S = st->nstage;
    per = 2 * V * m;
    total = (uint64_t)per * p;
    seq = di_xmalloc(total * sizeof *seq);
    for (uint32_t g = 0; g < p; g++)
        if (xform_group_sequence(c->schedule, p, V, m, g, seq + (size_t)g * per, per) != per) {
            di_free(seq);
            return 0;
        }
    out_f = di_xmalloc((size_t)S * m * sizeof *out_f);
    out_b = di_xmalloc((size_t)S * m * sizeof *out_b);
    for (size_t i = 0; i < (size_t)S * m; i++)
        out_f[i] = out_b[i] = -1;
    end = di_xcalloc(p, sizeof *end);
    pos = di_xcalloc(p, sizeof *pos);
    stack = di_xmalloc(p * sizeof *stack);
    queued = di_xmalloc(p);
    for (uint32_t g = 0; g < p; g++) {
        stack[nstack++] = p - 1 - g;
        queued[g] = 1;
    }
    while (nstack > 0) {
        uint32_t g = stack[--nstack];
        queued[g] = 0;
        while (pos[g] < per) {
            const xform_chunk *ch = &seq[(size_t)g * per + pos[g]];
            uint32_t k = ch->stage, j = ch->mb, wake;
            double N = st->layers[k], arrive, W, C, out;
            if (ch->kind == XFORM_CHUNK_F) {
                arrive = k == 0 ? 0 : out_f[(size_t)(k - 1) * m + j];
                W = N * pt->fw;
                C = k == 0 ? pt->edge[0] + N * pt->fw : N > 0 ? pt->fc + (N - 1) * pt->fw : 0;
                if (k == 0)
                    W += pt->edge[0];
                if (k + 1 == S) {
                    W += pt->edge[2];
                    C += pt->edge[2];
                }
                wake = k + 1 == S ? g : (k + 1) % p;
            } else {
                arrive = k + 1 == S ? out_f[(size_t)k * m + j] : out_b[(size_t)(k + 1) * m + j];
                W = N * (pt->bw + pt->zcat) + (j > 0 ? N * pt->acc : 0);
                C = N > 0 ? pt->bc + (N - 1) * pt->bw : 0;
                if (k + 1 == S) {
                    W += pt->edge[3];
                    C += pt->edge[3];
                }
                if (k == 0)
                    W += pt->edge[1];
                wake = k == 0 ? g : (k - 1) % p;
            }
            if (arrive < 0)
                break; /* woken when its input is made */
            out = (arrive > end[g] ? arrive : end[g]) + C;
            end[g] = end[g] + W > out ? end[g] + W : out;
            (ch->kind == XFORM_CHUNK_F ? out_f : out_b)[(size_t)k * m + j] = out;
            pos[g]++;
            done++;
            if (wake != g && !queued[wake]) {
                stack[nstack++] = wake;
                queued[wake] = 1;
            }
        }
    }
    if (done == total) {
        for (uint32_t g = 0; g < p; g++) {
            double t = end[g];
            if (g == 0 || pt->zs_aligned) {
                uint32_t N = 0;
                for (uint32_t k = g; k < S; k += p)
                    N += st->layers[k];
                t += N * pt->zs;
            }
            bound = t > bound ? t : bound;
        }
    }
    di_free(queued);
    di_free(stack);
    di_free(pos);
    di_free(end);
    di_free(out_b);
    di_free(out_f);
    di_free(seq);
    return bound;
}

double
search_time_bound_schedule(const search_space *sp, const search_candidate *c)
{
    struct pass_terms pt;
    double t, s;
    memset(&pt, 0, sizeof pt);
    t = time_bound(sp, c, &pt);
    if (!(t > 0) || !pt.ok)
        return t;
    s = schedule_bound(sp, c, &pt);
    return s > t ? s : t;
}

void
search_evaluator_init(search_evaluator *ev, const search_space *sp)
{
    search_evaluator_init_ws(ev, sp, NULL);
}

void
search_evaluator_init_ws(search_evaluator *ev, const search_space *sp, struct sim_workspace *ws)
{
    memset(ev, 0, sizeof *ev);
    ev->space = sp;
    ev->own_ws = ws == NULL;
    ev->ws = ws ? ws : sim_workspace_new();
}

void
search_evaluator_fini(search_evaluator *ev)
{
    ir_module_free(search_evaluator_take_garbage(ev));
    if (ev->own_ws)
        sim_workspace_free(ev->ws);
    ev->ws = NULL;
}

ir_module *
search_evaluator_take_garbage(search_evaluator *ev)
{
    ir_module *g = ev->garbage;
    ev->garbage = NULL;
    return g;
}

/*
 * Whether a and b differ only in the options (recompute, ZeRO, sp, overlap)
 * and the rank order, which xform_validate does not read (devices are
 * counted, not placed).
 */
static int
same_base(const search_candidate *a, const search_candidate *b)
{
    if (a->nstages != b->nstages ||
        memcmp(a->sdp, b->sdp, sizeof a->sdp) != 0 || memcmp(a->stp, b->stp, sizeof a->stp) != 0)
        return 0;
    return a->dp == b->dp && a->tp == b->tp && a->pp == b->pp && a->ep == b->ep && a->cp == b->cp &&
           a->microbatches == b->microbatches && a->schedule == b->schedule &&
           a->virtual_stages == b->virtual_stages;
}

/* Transforms s (only its first mb microbatches when mb > 0) and simulates it into *r. */
static int
simulate(search_evaluator *ev, const strategy *s, uint32_t mb, sim_result **r)
{
    const search_space *sp = ev->space;
    ir_module *dm = NULL;
    sim_options o;
    di_error err;
    int rc;
    *r = NULL;
    di_error_clear(&err);
    ir_module_free(search_evaluator_take_garbage(ev)); /* a cancelled run's, kept until now */
    sim_options_default(&o);
    o.want_timeline = 0; /* the search reads the peaks, not the timelines */
    o.cancel = ev->cancel;
    o.tf32 = sp->cfg.tf32;
    o.fuse = sp->cfg.fuse;
    o.no_grad_accum_fusion = sp->cfg.no_grad_accum_fusion;
    {
        /* The transforms poll the search's cancel too (a large candidate's take 0.3 s). */
        const atomic_int *watched = di_cancel_watch(ev->cancel);
        if (sp->analysis)
            rc = xform_apply_analyzed(sp->analysis, s, sp->hw, mb, &dm, &err);
        else
            rc = mb > 0 ? xform_apply_partial(sp->module, s, sp->hw, mb, &dm, &err)
                        : xform_apply(sp->module, s, sp->hw, &dm, &err);
        di_cancel_watch(watched);
    }
    if (rc == 0 && ev->test_flag_after_transform)
        atomic_store(ev->test_flag_after_transform, 1);
    if (rc == 0)
        rc = sim_run_ws(ev->ws, dm, sp->hw, &o, r, NULL, NULL, &err);
    if (rc == DI_ECANCELLED)
        ev->garbage = dm; /* the cancel returns now; the module is freed later */
    else
        ir_module_free(dm);
    return rc;
}

/*
 * The figures of candidate c's step of time T whose device d peaks at
 * peak[d] (r: a simulation of the candidate, for capacities and peak
 * FLOP/s).
 */
static void
figures(const search_space *sp, const search_candidate *c, double T, const uint64_t *peak,
        const sim_result *r, search_figures *f)
{
    double n = (double)search_candidate_devices(c);
    f->status = SEARCH_OK;
    f->step_time_s = T;
    f->peak_memory_bytes = 0;
    for (uint32_t d = 0; d < r->ndevice; d++) {
        double usable = sp->cfg.memory_headroom * (double)r->devices[d].capacity_bytes;
        if (peak[d] > f->peak_memory_bytes)
            f->peak_memory_bytes = peak[d];
        if ((double)peak[d] > usable)
            f->status = SEARCH_OOM;
    }
    f->mfu = T > 0 && r->peak_flops > 0 ? sp->stats.model_flops / (T * r->peak_flops) : 0;
    f->tokens_per_s = T > 0 ? sp->tokens_per_step / T / n : 0;
}

int
search_compose_counts(const search_space *sp, const search_candidate *c, uint32_t *m1,
                      uint32_t *m2)
{
    uint32_t p = c->pp;
    *m1 = *m2 = 0;
    /*
     * GPipe is simulated in full: it holds every microbatch's activations,
     * so its peak grows with m, but on small models by a step that varies
     * from one count to the next (which transient buffer tops it): a
     * ZeRO-3 GPT of 4 layers composed from 8 and 10 microbatches came out
     * 7% above its full simulation's peak at 24.
     */
    if (sp->cfg.no_compose || c->schedule == STRATEGY_SCHEDULE_GPIPE)
        return 0;
    /* Nested: simulated in full (their composition is not checked by test_compose_agreement). */
    if (c->nstages > 0)
        return 0;
    if (c->schedule == STRATEGY_SCHEDULE_INTERLEAVED) {
        /*
         * Interleaving runs whole rounds of p microbatches (m is a multiple
         * of p): 5 and 6 rounds. On gpt3-175b on 1,024 GPUs its period is
         * steady from the first rounds and its peak from the fourth (from 3
         * and 4 rounds 3.1% above at pp 4, 0.24% at pp 8); on a 4-layer Llama
         * with pp 2, 4 and 5 rounds were 0.53% off in step time, 5 and 6
         * exact.
         */
        *m1 = 5 * p;
        *m2 = *m1 + p;
    } else {
        /*
         * 1F1B holds at most p microbatches (pp = 1: one); its period is
         * steady once the first microbatch's backward has run: on a sample
         * of gpt3-175b's 1F1B candidates on 1,024 GPUs (pp 2 to 32, every
         * recomputation and ZeRO stage), extrapolating from p + 1 and
         * p + 3 microbatches gave the full simulation's step and peak
         * exactly (at most 0.03% off in step time, tensor parallelism
         * across nodes under ZeRO-2, where 4 p was 0.2% off). m1 has m's
         * parity and m2 = m1 + 2: which device and which moment of the
         * step peak can alternate from one microbatch count to the next
         * (a memory step every other microbatch), which consecutive counts
         * would extrapolate as a slope; 3 at least (a middle variant).
         */
        *m1 = p + 1 > 3 ? p + 1 : 3;
        if ((*m1 ^ c->microbatches) & 1)
            (*m1)++;
        *m2 = *m1 + 2;
    }
    /*
     * compose checks the extrapolation with a third run of m3 = 2 m2 - m1 microbatches. Each
     * simulation has a cost of its own besides its microbatches' (the transforms, the step
     * program's set-up, the optimizer step), SEARCH_SETUP_MICROBATCHES of them: measured
     * on a sample of gpt3-175b's composable 1F1B candidates on 1,024 GPUs (28, pp 1 to 32,
     * best of 2), composing from two runs took 1.03 to 1.36 times a full simulation's time at
     * m - (m1 + m2) up to 38, 0.85 at 42, 0.94 at 50, and 0.06 to 0.84 from 58. Three runs
     * pay it twice more than one (SEARCH_COMPOSE_SAVES).
     */
    return (uint64_t)*m1 + *m2 + (2 * (uint64_t)*m2 - *m1) + sp->cfg.compose_saves <=
           c->microbatches;
}

static int full(search_evaluator *ev, const search_candidate *c, const strategy *s,
                search_figures *f);

/* x(a) and x(b), extrapolated linearly to m. */
static double
extrapolate(double xa, uint32_t a, double xb, uint32_t b, uint32_t m)
{
    return xb + (xb - xa) * ((double)m - b) / ((double)b - a);
}

/* Whether extrapolations x and y (the later pair's, the estimate) differ by at most tol of y. */
static int
agree(double x, double y, double tol)
{
    return fabs(x - y) <= tol * fabs(y);
}

/*
 * The composed estimate of c: the step with m1, m2 and m3 = 2 m2 - m1 of
 * its microbatches (the same size; xform_apply_partial) simulated in full,
 * the step time and every device's peak extrapolated linearly to m from m2
 * and m3. Past the warm-up of its schedule a pipeline adds the same work for
 * every further microbatch (a period of its slowest stage, the same gradient
 * accumulation, one more microbatch's data), so the extrapolation is what
 * the full simulation gives; but where a queue is still filling at m1 (a
 * communication stream or link that falls behind a little more with each
 * microbatch until the step is bound by it) the period grows for a while,
 * and extrapolating from its start comes out too fast: on a GPT of 8
 * layers and hidden size 64 on two DGX nodes, ZeRO-3 at dp 4, tp 2, pp 2
 * with 1F1B was 1.26% too fast composed from 3 and 5 of its 48
 * microbatches. So the extrapolation from m1 and m2 must agree with the one
 * from m2 and m3 (SEARCH_COMPOSE_CHECK_TIME, _MEMORY), or the candidate is
 * simulated in full (*unsteady set). The tests check the estimates within
 * 1% (time) and 0.5% (memory) on samples of several models' spaces.
 */
static int
compose(search_evaluator *ev, const search_candidate *c, const strategy *s, uint32_t m1,
        uint32_t m2, search_figures *f, int *unsteady)
{
    const search_space *sp = ev->space;
    sim_result *r[3] = {NULL, NULL, NULL};
    uint32_t mb[3] = {m1, m2, 2 * m2 - m1}, m = c->microbatches;
    uint64_t *peak = NULL;
    int steady = 1, rc = 0;
    double T;
    *unsteady = 0;
    for (int i = 0; i < 3 && rc == 0; i++)
        if (simulate(ev, s, mb[i], &r[i]) != 0 || r[i]->ndevice != r[0]->ndevice)
            rc = -1;
    if (rc == 0) {
        T = extrapolate(r[1]->step_time_s, mb[1], r[2]->step_time_s, mb[2], m);
        steady = agree(extrapolate(r[0]->step_time_s, mb[0], r[1]->step_time_s, mb[1], m), T,
                       SEARCH_COMPOSE_CHECK_TIME);
        peak = di_xmalloc((r[0]->ndevice ? r[0]->ndevice : 1) * sizeof *peak);
        for (uint32_t d = 0; d < r[0]->ndevice; d++) {
            double p[3], v;
            for (int i = 0; i < 3; i++)
                p[i] = (double)r[i]->devices[d].peak_memory_bytes;
            v = extrapolate(p[1], mb[1], p[2], mb[2], m);
            steady &= agree(extrapolate(p[0], mb[0], p[1], mb[1], m), v,
                            SEARCH_COMPOSE_CHECK_MEMORY);
            peak[d] = v > 0 ? (uint64_t)llround(v) : 0;
        }
        if (steady)
            figures(sp, c, T, peak, r[2], f);
    }
    di_free(peak);
    for (int i = 0; i < 3; i++)
        sim_result_free(r[i]);
    if (rc == 0 && !steady) {
        *unsteady = 1;
        rc = full(ev, c, s, f);
    }
    return rc;
}

/* A full simulation of c (strategy s). */
static int
full(search_evaluator *ev, const search_candidate *c, const strategy *s, search_figures *f)
{
    sim_result *r = NULL;
    uint64_t *peak;
    if (simulate(ev, s, 0, &r) != 0) {
        sim_result_free(r);
        return -1;
    }
    peak = di_xmalloc((r->ndevice ? r->ndevice : 1) * sizeof *peak);
    for (uint32_t d = 0; d < r->ndevice; d++)
        peak[d] = r->devices[d].peak_memory_bytes;
    figures(ev->space, c, r->step_time_s, peak, r, f);
    di_free(peak);
    sim_result_free(r);
    return 0;
}

static void
set_figures(search_point *p, const search_figures *f)
{
    p->status = f->status;
    p->step_time_s = f->step_time_s;
    p->peak_memory_bytes = f->peak_memory_bytes;
    p->tokens_per_s = f->tokens_per_s;
    p->mfu = f->mfu;
}

int
search_twin(const search_space *sp, const search_candidate *c, search_candidate *twin)
{
    *twin = *c;
    /*
     * ZeRO-2/3 reduce-scatter each microbatch's gradients as the backward makes
     * them whether or not the reduction overlaps (chunk.c, pipeline.c): overlap_grad_reduce
     * changes nothing. (Until SEARCH_VERSION distir-search-40 one microbatch without
     * overlap reduced after the backward pass, ZeRO-1's twin under ZeRO-2.)
     */
    if (c->zero >= 2 && c->overlap && in_mask(sp->cfg.overlap, 0)) {
        twin->overlap = 0;
        return 1;
    }
    /*
     * Selective recomputation repeats the attention core (xf_recompute_mark): with
     * FlashAttention, which keeps no scores, or without attention, it repeats nothing and
     * the transforms build none's program. (Before SEARCH_VERSION distir-search-43 both
     * were simulated, and a fused-attention model's top K listed each plan twice.)
     */
    if (c->recompute == STRATEGY_RECOMPUTE_SELECTIVE && sp->selective_ops == 0 &&
        in_mask(sp->cfg.recomputes, STRATEGY_RECOMPUTE_NONE)) {
        twin->recompute = STRATEGY_RECOMPUTE_NONE;
        return 1;
    }
    /*
     * Full recomputation of the first N layers of each model stage, N at least
     * every stage's layers (stage_layout, as the transforms cut them): every
     * layer, as N = 0.
     */
    if (c->recompute_layers > 0 && in_set(sp->cfg.recompute_layers, sp->cfg.nrecompute_layers, 0)) {
        const struct search_stage_layout *st = find_stage_layout(sp, c->pp, virtual_of(c));
        uint32_t most = 0;
        for (uint32_t k = 0; st != NULL && k < st->nstage; k++)
            most = st->layers[k] > most ? st->layers[k] : most;
        if (st != NULL && st->nstage > 0 && c->nstages == 0 && c->recompute_layers >= most) {
            twin->recompute_layers = 0;
            return 1;
        }
    }
    /* Sequence parallelism splits the ops with a sequence (xform_model_facts.sequence_ops). */
    if (c->sequence_parallel && sp->sequence_ops == 0 && in_mask(sp->cfg.sequence_parallel, 0)) {
        twin->sequence_parallel = 0;
        return 1;
    }
    if (c->microbatches != 1)
        return 0;
    if (c->schedule == STRATEGY_SCHEDULE_1F1B &&
        in_mask(sp->cfg.schedules, STRATEGY_SCHEDULE_GPIPE))
        twin->schedule = STRATEGY_SCHEDULE_GPIPE;
    else
        return 0;
    return 1;
}

/*
 * search_eval (searching: duplicates pruned, composed where
 * search_compose_counts says so) or search_eval_full (neither).
 */
static int
eval(search_evaluator *ev, const search_candidate *c, search_point *out, int searching)
{
    const search_space *sp = ev->space;
    strategy s;
    search_figures f;
    search_candidate twin;
    di_error err;
    uint32_t m1, m2;
    int rc, composable, unsteady = 0;

    memset(out, 0, sizeof *out);
    out->cand = *c;
    if (!ev->have_base || !same_base(&ev->base, c)) {
        ev->base = *c;
        ev->base.recompute = ev->base.zero = 0;
        ev->base.recompute_layers = 0;
        ev->base.sequence_parallel = ev->base.overlap = ev->base.order = 0;
        search_candidate_strategy(&ev->base, &s);
        ev->base_rc = search_space_validate(sp, &s, &err);
        ev->have_base = 1;
        strategy_fini(&s);
    }
    search_candidate_strategy(c, &s);
    rc = ev->base_rc;
    /*
     * The memory bound before the options' own validation, which costs
     * about a millisecond a candidate on gpt3-175b (36.8 of the 62.6
     * thread-seconds its whole search spent on candidates it did not
     * simulate went there): a candidate whose options the transforms would
     * refuse may be counted memory_bound instead of indivisible. Pruned
     * either way, never simulated.
     */
    if (rc == 0 && search_memory_pruned(sp, search_memory_bound(sp, c))) {
        out->status = SEARCH_MEMORY_BOUND;
        goto done;
    }
    if (rc == 0 &&
        (c->recompute || c->zero || c->sequence_parallel || c->overlap || c->ep > 1 || c->cp > 1))
        rc = search_space_validate(sp, &s, &err);
    if (rc != 0) {
        out->status = rc == DI_ESTRATEGY ? SEARCH_INDIVISIBLE : SEARCH_UNSUPPORTED;
        goto done;
    }
    if (searching && search_twin(sp, c, &twin)) {
        out->status = SEARCH_DUPLICATE;
        goto done;
    }
    composable = searching && search_compose_counts(sp, c, &m1, &m2);
    {
        /* Figures an earlier search found (deterministic: the same as simulating again). */
        const search_memo_entry *e = search_memo_find(ev->memo, c, composable);
        if (e != NULL) {
            out->cached = 1;
            out->composed = composable && !e->unsteady;
            out->unsteady = composable && e->unsteady;
            set_figures(out, &e->f);
            goto done;
        }
    }
    rc = composable ? compose(ev, c, &s, m1, m2, &f, &unsteady) : full(ev, c, &s, &f);
    if (rc != 0) {
        out->status = SEARCH_FAILED;
        goto done;
    }
    /* A composition whose check failed reports its full simulation: not an estimate. */
    out->composed = composable && !unsteady;
    out->unsteady = (uint8_t)unsteady;
    set_figures(out, &f);
    if (ev->journal != NULL) {
        search_memo_entry e;
        e.cand = *c;
        e.composed = (uint8_t)composable;
        e.unsteady = (uint8_t)unsteady;
        e.f = f;
        search_memo_add(ev->journal, &e);
    }
done:
    strategy_fini(&s);
    return out->status;
}

int
search_eval(search_evaluator *ev, const search_candidate *c, search_point *out)
{
    return eval(ev, c, out, 1);
}

int
search_eval_full(search_evaluator *ev, const search_candidate *c, search_point *out)
{
    return eval(ev, c, out, 0);
}
