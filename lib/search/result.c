/*
 * result.c: a search's result: counts by status, the top K by the objective
 * and the Pareto set over (step time, peak memory), kept incrementally as
 * points are added, merged across shards and workers, and written as JSON
 * (the form `distir search --json` prints and `--merge` reads back) or as
 * tables.
 *
 * Both sets are defined by orders that break every tie by enumeration
 * index, so they are functions of the set of points added, not of the
 * order of additions: the top K is the K smallest by (cost, index), and the
 * Pareto set the points no other point dominates (search.h). That is what
 * makes a merge of shards equal to the unsharded search.
 */
#include "search/search.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const status_names[] = {
#define SEARCH_STATUS_NAME_(e, name) name,
    SEARCH_STATUS_LIST(SEARCH_STATUS_NAME_)
#undef SEARCH_STATUS_NAME_
};

const char *
search_status_name(int status)
{
    return status >= 0 && status < SEARCH_NSTATUS ? status_names[status] : "unknown";
}

static const char *const objective_names[SEARCH_NOBJECTIVE] = {"time", "throughput", "devices",
                                                               "cost"};

const char *
search_objective_name(search_objective o)
{
    return (unsigned)o < SEARCH_NOBJECTIVE ? objective_names[o] : "unknown";
}

uint32_t
search_point_devices(const search_point *p)
{
    return (uint32_t)search_candidate_devices(&p->cand);
}

/* -1, 0 or 1 as x is below, equal to or above y. */
static int
order(double x, double y)
{
    return x < y ? -1 : x > y ? 1 : 0;
}

int
search_point_compare(const search_result *r, const search_point *a, const search_point *b)
{
    double ta = a->step_time_s, tb = b->step_time_s;
    double da = search_point_devices(a), db = search_point_devices(b);
    int c = 0;
    if ((r->objective == SEARCH_MIN_DEVICES || r->objective == SEARCH_MIN_COST) &&
        r->target_step_s > 0) {
        int ma = ta > r->target_step_s, mb = tb > r->target_step_s;
        c = order(ma, mb); /* those that reach it first */
        if (c == 0 && ma) /* neither does: the closest first */
            c = order(ta, tb);
    }
    if (c == 0) {
        switch (r->objective) {
        case SEARCH_MAX_THROUGHPUT:
            c = order(b->tokens_per_s, a->tokens_per_s);
            break;
        case SEARCH_MIN_DEVICES:
            c = order(da, db);
            if (c == 0)
                c = order(ta, tb);
            break;
        case SEARCH_MIN_COST:
            c = order(da * ta, db * tb);
            break;
        default:
            c = order(ta, tb);
            break;
        }
    }
    if (c != 0)
        return c;
    return (a->cand.index > b->cand.index) - (a->cand.index < b->cand.index);
}

/* Orders points by the objective, then index: negative when a comes first. */
static int
top_cmp(const search_result *r, const search_point *a, const search_point *b)
{
    return search_point_compare(r, a, b);
}

/* Whether a dominates b (search.h). */
static int
dominates(const search_point *a, const search_point *b)
{
    if (a->step_time_s > b->step_time_s || a->peak_memory_bytes > b->peak_memory_bytes)
        return 0;
    if (a->step_time_s < b->step_time_s || a->peak_memory_bytes < b->peak_memory_bytes)
        return 1;
    return a->cand.index < b->cand.index;
}

void
search_result_init(search_result *r, const search_space *sp)
{
    memset(r, 0, sizeof *r);
    r->key = sp->key;
    r->objective = sp->cfg.objective;
    r->target_step_s = sp->cfg.target_step_s;
    r->price_per_device_hour = sp->cfg.price_per_device_hour;
    r->train_tokens = sp->cfg.train_tokens;
    r->pareto_within = sp->cfg.pareto_within;
    r->refine_pareto = sp->cfg.refine_pareto;
    r->tokens_per_step = sp->tokens_per_step;
    r->top_k = sp->cfg.top_k;
    r->devices = sp->devices;
    r->ndevice_counts = sp->cfg.ndevice_counts;
    memcpy(r->device_counts, sp->cfg.device_counts, sizeof r->device_counts);
    r->top = di_xcalloc(r->top_k, sizeof *r->top);
}

void
search_result_fini(search_result *r)
{
    di_free(r->top);
    di_free(r->pareto);
    memset(r, 0, sizeof *r);
}

static void
top_insert(search_result *r, const search_point *p)
{
    uint32_t i;
    if (r->ntop == r->top_k && top_cmp(r, p, &r->top[r->ntop - 1]) >= 0)
        return;
    i = r->ntop < r->top_k ? r->ntop++ : r->ntop - 1;
    while (i > 0 && top_cmp(r, p, &r->top[i - 1]) < 0) {
        r->top[i] = r->top[i - 1];
        i--;
    }
    r->top[i] = *p;
}

static int
pareto_cmp(const void *x, const void *y)
{
    const search_point *a = x, *b = y;
    if (a->step_time_s != b->step_time_s)
        return a->step_time_s < b->step_time_s ? -1 : 1;
    if (a->peak_memory_bytes != b->peak_memory_bytes)
        return a->peak_memory_bytes < b->peak_memory_bytes ? -1 : 1;
    return (a->cand.index > b->cand.index) - (a->cand.index < b->cand.index);
}

static void
pareto_insert(search_result *r, const search_point *p)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->npareto; i++)
        if (dominates(&r->pareto[i], p))
            return;
    for (uint32_t i = 0; i < r->npareto; i++)
        if (!dominates(p, &r->pareto[i]))
            r->pareto[n++] = r->pareto[i];
    r->npareto = n;
    if (r->npareto == r->capacity_pareto) {
        r->capacity_pareto = r->capacity_pareto ? 2 * r->capacity_pareto : 16;
        r->pareto = di_xrealloc(r->pareto, r->capacity_pareto * sizeof *r->pareto);
    }
    /* Kept sorted: the set is small and a sorted set prints and compares as it is. */
    n = r->npareto++;
    while (n > 0 && pareto_cmp(p, &r->pareto[n - 1]) < 0) {
        r->pareto[n] = r->pareto[n - 1];
        n--;
    }
    r->pareto[n] = *p;
    /*
     * Under pareto_within, the points slower than that many times the
     * fastest go. The fastest only gets faster, so a point cut now is out of
     * the answer for good, and so is any point it would have dominated (no
     * faster than it): what is kept is the set the whole answer would keep
     * among these points (a part's cut is never tighter than the whole's).
     */
    while (r->pareto_within > 0 && r->npareto > 1 &&
           r->pareto[r->npareto - 1].step_time_s > r->pareto_within * r->pareto[0].step_time_s)
        r->npareto--;
}

/* Whether a point of the same index is among the n points at p (a merge sees points twice). */
static int
has_index(const search_point *p, uint32_t n, uint64_t index)
{
    for (uint32_t i = 0; i < n; i++)
        if (p[i].cand.index == index)
            return 1;
    return 0;
}

static void
add_point(search_result *r, const search_point *p)
{
    if (p->status != SEARCH_OK)
        return;
    if (!has_index(r->top, r->ntop, p->cand.index))
        top_insert(r, p);
    if (!has_index(r->pareto, r->npareto, p->cand.index))
        pareto_insert(r, p);
}

void
search_result_add(search_result *r, const search_point *p)
{
    r->enumerated++;
    if (p->status >= 0 && p->status < SEARCH_NSTATUS)
        r->count[p->status]++;
    if (p->composed)
        r->composed++;
    if (p->cached)
        r->cache_hits++;
    add_point(r, p);
}

/* The place in r's top K of candidate index, or r->ntop. */
static uint32_t
top_find(const search_result *r, uint64_t index)
{
    uint32_t j = 0;
    while (j < r->ntop && r->top[j].cand.index != index)
        j++;
    return j;
}

/*
 * Without refine_pareto, a Pareto point reports its full simulation exactly
 * when it is in the top K (search_result_refine): a part may have re-simulated
 * a point of its own top K that the whole's Pareto set holds but not its top K.
 */
static void
settle_refined(search_result *r)
{
    for (uint32_t i = 0; i < r->npareto && !r->refine_pareto; i++) {
        search_point *p = &r->pareto[i];
        if (p->refined && top_find(r, p->cand.index) == r->ntop) {
            p->refined = 0;
            memset(&p->full, 0, sizeof p->full);
        }
    }
}

int
search_result_merge(search_result *dst, const search_result *src, di_error *err)
{
    if (memcmp(&dst->key, &src->key, sizeof dst->key) != 0 || dst->objective != src->objective ||
        dst->top_k != src->top_k || dst->devices != src->devices ||
        dst->pareto_within != src->pareto_within || dst->refine_pareto != src->refine_pareto)
        return di_error_set(err, DI_EINVAL,
                            "cannot merge results of different searches (the module, hardware, "
                            "devices, constraints, objective or top K differ)");
    dst->enumerated += src->enumerated;
    for (int s = 0; s < SEARCH_NSTATUS; s++)
        dst->count[s] += src->count[s];
    dst->composed += src->composed;
    dst->cache_hits += src->cache_hits;
    for (uint32_t i = 0; i < src->ntop; i++)
        add_point(dst, &src->top[i]);
    for (uint32_t i = 0; i < src->npareto; i++)
        add_point(dst, &src->pareto[i]);
    settle_refined(dst);
    return 0;
}

/* Re-simulates p in full if it is composed and not re-simulated yet; 1 if it was. */
static int
refine_point(search_evaluator *ev, search_point *p)
{
    search_point q;
    if (!p->composed || p->refined)
        return 0;
    search_eval_full(ev, &p->cand, &q);
    p->refined = 1;
    p->full.status = q.status;
    p->full.step_time_s = q.step_time_s;
    p->full.peak_memory_bytes = q.peak_memory_bytes;
    p->full.tokens_per_s = q.tokens_per_s;
    p->full.mfu = q.mfu;
    return 1;
}

uint32_t
search_result_refine_if(search_evaluator *ev, search_result *r,
                        int (*keep)(void *ctx, const search_point *p), void *ctx)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->ntop; i++)
        if (keep == NULL || keep(ctx, &r->top[i]))
            n += (uint32_t)refine_point(ev, &r->top[i]);
    /* A point of both sets is re-simulated once. */
    for (uint32_t i = 0; i < r->npareto; i++) {
        search_point *p = &r->pareto[i];
        uint32_t j = top_find(r, p->cand.index);
        if (j < r->ntop) {
            *p = r->top[j];
            continue;
        }
        if (r->refine_pareto && (keep == NULL || keep(ctx, p)))
            n += (uint32_t)refine_point(ev, p);
    }
    return n;
}

uint32_t
search_result_refine(search_evaluator *ev, search_result *r)
{
    return search_result_refine_if(ev, r, NULL, NULL);
}

search_figures
search_point_reported(const search_point *p)
{
    search_figures f = {p->status, p->step_time_s, p->peak_memory_bytes, p->tokens_per_s, p->mfu};
    return p->refined ? p->full : f;
}

static int
reported_cmp(const search_result *r, const search_point *a, const search_point *b)
{
    search_figures fa = search_point_reported(a), fb = search_point_reported(b);
    search_point ra = *a, rb = *b;
    int oa = fa.status != SEARCH_OK, ob = fb.status != SEARCH_OK;
    if (oa != ob)
        return oa - ob;
    ra.step_time_s = fa.step_time_s;
    ra.tokens_per_s = fa.tokens_per_s;
    rb.step_time_s = fb.step_time_s;
    rb.tokens_per_s = fb.tokens_per_s;
    return top_cmp(r, &ra, &rb);
}

void
search_result_reported_top(const search_result *r, search_point *out)
{
    if (r->ntop == 0)
        return;
    memcpy(out, r->top, r->ntop * sizeof *out);
    /* Insertion sort: qsort has no context argument, and K is small (the order is by the
     * estimates already, the full simulations move a point a few places at most). */
    for (uint32_t i = 1; i < r->ntop; i++) {
        search_point p = out[i];
        uint32_t j = i;
        while (j > 0 && reported_cmp(r, &p, &out[j - 1]) < 0) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = p;
    }
}

void
search_point_train(const search_result *r, const search_figures *f, const search_point *p,
                   double *step_cost, double *train_s)
{
    double devices = search_point_devices(p);
    *step_cost = devices * f->step_time_s * r->price_per_device_hour / 3600;
    *train_s = r->tokens_per_step > 0 ? r->train_tokens / r->tokens_per_step * f->step_time_s : 0;
}

static int
figures_equal(const search_figures *a, const search_figures *b)
{
    return a->status == b->status && a->step_time_s == b->step_time_s &&
           a->peak_memory_bytes == b->peak_memory_bytes && a->tokens_per_s == b->tokens_per_s &&
           a->mfu == b->mfu;
}

int
search_point_equal(const search_point *a, const search_point *b)
{
    const search_candidate *x = &a->cand, *y = &b->cand;
    return x->index == y->index && x->dp == y->dp && x->tp == y->tp && x->pp == y->pp &&
           x->microbatches == y->microbatches && x->virtual_stages == y->virtual_stages &&
           x->schedule == y->schedule && x->recompute == y->recompute && x->zero == y->zero &&
           x->sequence_parallel == y->sequence_parallel && x->overlap == y->overlap &&
           x->ep == y->ep && x->cp == y->cp && x->order == y->order &&
           x->recompute_layers == y->recompute_layers &&
           x->nstages == y->nstages && memcmp(x->sdp, y->sdp, sizeof x->sdp) == 0 &&
           memcmp(x->stp, y->stp, sizeof x->stp) == 0 && a->status == b->status &&
           a->step_time_s == b->step_time_s && a->peak_memory_bytes == b->peak_memory_bytes &&
           a->tokens_per_s == b->tokens_per_s && a->mfu == b->mfu && a->composed == b->composed &&
           a->refined == b->refined && (!a->refined || figures_equal(&a->full, &b->full));
}

int
search_result_equal(const search_result *a, const search_result *b)
{
    if (memcmp(&a->key, &b->key, sizeof a->key) != 0 || a->objective != b->objective ||
        a->top_k != b->top_k || a->devices != b->devices || a->enumerated != b->enumerated ||
        a->composed != b->composed || a->target_step_s != b->target_step_s ||
        a->price_per_device_hour != b->price_per_device_hour ||
        a->train_tokens != b->train_tokens || a->tokens_per_step != b->tokens_per_step ||
        a->pareto_within != b->pareto_within || a->refine_pareto != b->refine_pareto ||
        a->ndevice_counts != b->ndevice_counts ||
        memcmp(a->device_counts, b->device_counts, sizeof a->device_counts) != 0 ||
        a->ntop != b->ntop || a->npareto != b->npareto)
        return 0;
    for (int s = 0; s < SEARCH_NSTATUS; s++)
        if (a->count[s] != b->count[s])
            return 0;
    for (uint32_t i = 0; i < a->ntop; i++)
        if (!search_point_equal(&a->top[i], &b->top[i]))
            return 0;
    for (uint32_t i = 0; i < a->npareto; i++)
        if (!search_point_equal(&a->pareto[i], &b->pareto[i]))
            return 0;
    return 1;
}

/* ---- JSON ---- */


static json_t *
point_to_json(const search_result *r, const search_point *p)
{
    char name[256];
    const search_candidate *c = &p->cand;
    json_t *o;
    search_candidate_format(c, name, sizeof name);
    o = json_pack("{s:I, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:f, "
                     "s:I, s:f, s:f}",
                     "index", (json_int_t)c->index, "strategy", name, "dp", (int)c->dp, "tp",
                     (int)c->tp, "pp", (int)c->pp, "microbatches", (int)c->microbatches, "schedule",
                     (int)c->schedule, "virtual_stages", (int)c->virtual_stages, "recompute",
                     (int)c->recompute, "zero", (int)c->zero, "sequence_parallel",
                     (int)c->sequence_parallel, "overlap_grad_reduce", (int)c->overlap, "status",
                     search_status_name(p->status), "step_time_s", p->step_time_s,
                     "peak_memory_bytes", (json_int_t)p->peak_memory_bytes, "tokens_per_s",
                     p->tokens_per_s, "mfu", p->mfu);
    if (o == NULL)
        abort();
    json_object_set_new(o, "composed", json_boolean(p->composed));
    if (c->ep > 1)
        json_object_set_new(o, "ep", json_integer((json_int_t)c->ep));
    if (c->cp > 1)
        json_object_set_new(o, "cp", json_integer((json_int_t)c->cp));
    if (c->order == STRATEGY_ORDER_TP_PP_DP)
        json_object_set_new(o, "order", json_string("tp-pp-dp"));
    if (c->recompute_layers > 0)
        json_object_set_new(o, "recompute_layers", json_integer((json_int_t)c->recompute_layers));
    if (c->nstages > 0) {
        /* Nested: each stage's [dp, tp] (dp and tp above are then 1). */
        json_t *a = json_array();
        for (uint32_t g = 0; g < c->nstages; g++)
            json_array_append_new(a, json_pack("[i, i]", (int)c->sdp[g], (int)c->stp[g]));
        json_object_set_new(o, "stages", a);
    }
    if (p->refined) {
        json_t *f = json_pack("{s:s, s:f, s:I, s:f, s:f}", "status",
                              search_status_name(p->full.status), "step_time_s",
                              p->full.step_time_s, "peak_memory_bytes",
                              (json_int_t)p->full.peak_memory_bytes, "tokens_per_s",
                              p->full.tokens_per_s, "mfu", p->full.mfu);
        if (f == NULL)
            abort();
        json_object_set_new(o, "simulated", f);
    }
    {
        search_figures f = search_point_reported(p);
        double step_cost = 0, train_s = 0;
        search_point_train(r, &f, p, &step_cost, &train_s);
        if (r->price_per_device_hour > 0)
            json_object_set_new(o, "step_cost", json_real(step_cost));
        if (r->train_tokens > 0) {
            json_object_set_new(o, "train_time_s", json_real(train_s));
            if (r->price_per_device_hour > 0)
                json_object_set_new(o, "train_cost",
                                    json_real(step_cost * train_s / f.step_time_s));
        }
    }
    return o;
}

char *
search_result_to_json(const search_result *r)
{
    json_t *root, *counts, *top, *pareto;
    search_point *ordered;
    char *text, *out, key[65];
    di_hash_hex(&r->key, key);
    counts = json_object();
    for (int s = 0; s < SEARCH_NSTATUS; s++)
        json_object_set_new(counts, status_names[s], json_integer((json_int_t)r->count[s]));
    top = json_array();
    ordered = di_xmalloc((r->ntop ? r->ntop : 1) * sizeof *ordered);
    search_result_reported_top(r, ordered);
    for (uint32_t i = 0; i < r->ntop; i++)
        json_array_append_new(top, point_to_json(r, &ordered[i]));
    di_free(ordered);
    pareto = json_array();
    for (uint32_t i = 0; i < r->npareto; i++)
        json_array_append_new(pareto, point_to_json(r, &r->pareto[i]));
    root = json_pack("{s:s, s:s, s:i, s:i}", "search_key", key, "objective",
                     objective_names[r->objective], "top_k", (int)r->top_k, "devices",
                     (int)r->devices);
    if (root == NULL)
        abort();
    if (r->ndevice_counts > 0) {
        json_t *a = json_array();
        for (uint32_t i = 0; i < r->ndevice_counts; i++)
            json_array_append_new(a, json_integer(r->device_counts[i]));
        json_object_set_new(root, "device_counts", a);
    }
    if (r->target_step_s > 0)
        json_object_set_new(root, "target_step_s", json_real(r->target_step_s));
    if (r->price_per_device_hour > 0)
        json_object_set_new(root, "price_per_device_hour", json_real(r->price_per_device_hour));
    if (r->train_tokens > 0)
        json_object_set_new(root, "train_tokens", json_real(r->train_tokens));
    if (r->pareto_within > 0)
        json_object_set_new(root, "pareto_within", json_real(r->pareto_within));
    if (r->refine_pareto)
        json_object_set_new(root, "refine", json_string("all"));
    json_object_set_new(root, "tokens_per_step", json_real(r->tokens_per_step));
    json_object_set_new(root, "enumerated", json_integer((json_int_t)r->enumerated));
    json_object_set_new(root, "counts", counts);
    json_object_set_new(root, "composed", json_integer((json_int_t)r->composed));
    json_object_set_new(root, "top", top);
    json_object_set_new(root, "pareto", pareto);
    text = json_dumps(root, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17) | JSON_COMPACT);
    json_decref(root);
    if (text == NULL)
        abort();
    out = di_xstrdup(text);
    free(text);
    return out;
}

/* A non-negative integer field within max. */
static int
get_uint(const json_t *o, const char *key, uint64_t max, uint64_t *out, di_error *err)
{
    const json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || (uint64_t)json_integer_value(v) > max)
        return di_error_set(err, DI_EINVAL, "search result: '%s' is not an integer in 0..%llu", key,
                            (unsigned long long)max);
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

int
search_result_has_devices(const search_result *r, uint64_t n)
{
    if (r->ndevice_counts == 0)
        return n == r->devices;
    for (uint32_t i = 0; i < r->ndevice_counts; i++)
        if (r->device_counts[i] == n)
            return 1;
    return 0;
}

static int get_real(const json_t *o, const char *key, double *out, di_error *err);

/* A non-negative number or absent (0). */
static int
get_optional_real(const json_t *o, const char *key, double *out, di_error *err)
{
    int rc;
    *out = 0;
    if (json_object_get(o, key) == NULL)
        return 0;
    if ((rc = get_real(o, key, out, err)) != 0)
        return rc;
    if (!(*out >= 0 && *out < 1e300))
        return di_error_set(err, DI_EINVAL, "search result: '%s' is not a non-negative number",
                            key);
    return 0;
}

static int
get_real(const json_t *o, const char *key, double *out, di_error *err)
{
    const json_t *v = json_object_get(o, key);
    if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < 0)
        return di_error_set(err, DI_EINVAL, "search result: '%s' is not a non-negative number",
                            key);
    *out = json_number_value(v);
    return 0;
}

/* A degree written only when above 1 (ep, cp): 1 when absent. */
static int
opt_degree(const json_t *o, const char *key, uint32_t *v, di_error *err)
{
    uint64_t x = 1;
    int rc;
    if (json_object_get(o, key) != NULL &&
        (rc = get_uint(o, key, STRATEGY_MAX_DEGREE, &x, err)) != 0)
        return rc;
    *v = (uint32_t)x;
    return 0;
}

/* A nested point's "stages" ([[dp, tp], ...], pp of them, with dp and tp 1), if any. */
static int
stages_from_json(const json_t *o, search_candidate *c, di_error *err)
{
    const json_t *a = json_object_get(o, "stages");
    size_t n = json_array_size(a);
    if (a == NULL)
        return 0;
    if (!json_is_array(a) || n < 2 || n > SEARCH_NESTED_MAX_STAGES || n != c->pp || c->dp != 1 ||
        c->tp != 1)
        goto bad;
    for (size_t g = 0; g < n; g++) {
        const json_t *e = json_array_get(a, g);
        json_int_t dp, tp;
        if (!json_is_array(e) || json_array_size(e) != 2 ||
            !json_is_integer(json_array_get(e, 0)) || !json_is_integer(json_array_get(e, 1)))
            goto bad;
        dp = json_integer_value(json_array_get(e, 0));
        tp = json_integer_value(json_array_get(e, 1));
        if (dp < 1 || tp < 1 || dp > STRATEGY_MAX_DEGREE || tp > STRATEGY_MAX_DEGREE)
            goto bad;
        c->sdp[g] = (uint32_t)dp;
        c->stp[g] = (uint32_t)tp;
    }
    c->nstages = (uint8_t)n;
    return 0;
bad:
    return di_error_set(err, DI_EINVAL,
                        "search result: point %llu: 'stages' is not pp (2 to %u) [dp, tp] "
                        "pairs of a point with dp and tp 1",
                        (unsigned long long)c->index, SEARCH_NESTED_MAX_STAGES);
}

static int
point_from_json(const json_t *o, search_point *p, di_error *err)
{
    static const struct {
        const char *key;
        uint64_t max;
    } fields[] = {
        {"index", UINT64_MAX / 2},
        {"dp", STRATEGY_MAX_DEGREE},
        {"tp", STRATEGY_MAX_DEGREE},
        {"pp", STRATEGY_MAX_DEGREE},
        {"microbatches", STRATEGY_MAX_MICROBATCHES},
        {"schedule", STRATEGY_SCHEDULE_INTERLEAVED},
        {"virtual_stages", STRATEGY_MAX_VIRTUAL_STAGES},
        {"recompute", STRATEGY_RECOMPUTE_SELECTIVE_OP},
        {"zero", 3},
        {"sequence_parallel", 1},
        {"overlap_grad_reduce", 1},
        {"peak_memory_bytes", UINT64_MAX / 2},
    };
    uint64_t v[sizeof fields / sizeof fields[0]];
    const char *status;
    const json_t *f;
    int rc;
    if (!json_is_object(o))
        return di_error_set(err, DI_EINVAL, "search result: a point is not an object");
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if ((rc = get_uint(o, fields[i].key, fields[i].max, &v[i], err)) != 0)
            return rc;
    memset(p, 0, sizeof *p);
    p->cand.index = v[0];
    p->cand.dp = (uint32_t)v[1];
    p->cand.tp = (uint32_t)v[2];
    p->cand.pp = (uint32_t)v[3];
    p->cand.microbatches = (uint32_t)v[4];
    p->cand.schedule = (uint8_t)v[5];
    p->cand.virtual_stages = (uint32_t)v[6];
    p->cand.recompute = (uint8_t)v[7];
    p->cand.zero = (uint8_t)v[8];
    p->cand.sequence_parallel = (uint8_t)v[9];
    p->cand.overlap = (uint8_t)v[10];
    p->peak_memory_bytes = v[11];
    if ((rc = opt_degree(o, "ep", &p->cand.ep, err)) != 0 ||
        (rc = opt_degree(o, "cp", &p->cand.cp, err)) != 0)
        return rc;
    if (json_object_get(o, "recompute_layers") != NULL) {
        uint64_t n;
        if ((rc = get_uint(o, "recompute_layers", UINT16_MAX, &n, err)) != 0)
            return rc;
        if (n > 0 && p->cand.recompute != STRATEGY_RECOMPUTE_FULL)
            return di_error_set(err, DI_EINVAL,
                                "search result: point %llu: recompute_layers without full "
                                "recomputation",
                                (unsigned long long)p->cand.index);
        p->cand.recompute_layers = (uint16_t)n;
    }
    {
        const json_t *ord = json_object_get(o, "order");
        const char *name = json_string_value(ord);
        if (ord != NULL && (name == NULL || (strcmp(name, "tp-pp-dp") != 0 &&
                                             strcmp(name, "tp-dp-pp") != 0)))
            return di_error_set(err, DI_EINVAL,
                                "search result: point %llu: 'order' is not tp-dp-pp or tp-pp-dp",
                                (unsigned long long)p->cand.index);
        if (name != NULL && strcmp(name, "tp-pp-dp") == 0)
            p->cand.order = STRATEGY_ORDER_TP_PP_DP;
    }
    if ((rc = stages_from_json(o, &p->cand, err)) != 0)
        return rc;
    if (p->cand.dp == 0 || p->cand.tp == 0 || p->cand.pp == 0 || p->cand.microbatches == 0 ||
        p->cand.virtual_stages == 0 || p->cand.ep == 0 || p->cand.cp == 0 ||
        (p->cand.ep > 1 && p->cand.ep != p->cand.dp) ||
        (p->cand.order != STRATEGY_ORDER_TP_DP_PP &&
         (p->cand.pp == 1 || (uint64_t)p->cand.dp * p->cand.cp == 1 || p->cand.nstages)) ||
        (p->cand.pp == 1) != (p->cand.schedule == STRATEGY_SCHEDULE_DEFAULT) ||
        (p->cand.virtual_stages > 1) != (p->cand.schedule == STRATEGY_SCHEDULE_INTERLEAVED))
        return di_error_set(err, DI_EINVAL,
                            "search result: point %llu is not a strategy of "
                            "the space",
                            (unsigned long long)p->cand.index);
    status = json_string_value(json_object_get(o, "status"));
    if (status == NULL || strcmp(status, status_names[SEARCH_OK]) != 0)
        return di_error_set(err, DI_EINVAL, "search result: point %llu has status '%s', not ok",
                            (unsigned long long)p->cand.index, status ? status : "");
    p->status = SEARCH_OK;
    if ((rc = get_real(o, "step_time_s", &p->step_time_s, err)) != 0 ||
        (rc = get_real(o, "tokens_per_s", &p->tokens_per_s, err)) != 0 ||
        (rc = get_real(o, "mfu", &p->mfu, err)) != 0)
        return rc;
    p->composed = json_is_true(json_object_get(o, "composed"));
    f = json_object_get(o, "simulated");
    if (f != NULL) {
        uint64_t peak;
        int st = -1;
        const char *name = json_string_value(json_object_get(f, "status"));
        for (int k = 0; name && k < SEARCH_NSTATUS; k++)
            if (strcmp(name, status_names[k]) == 0)
                st = k;
        if (!p->composed || !json_is_object(f) || st < 0)
            return di_error_set(err, DI_EINVAL,
                                "search result: point %llu: 'simulated' is not the full "
                                "simulation of a composed point",
                                (unsigned long long)p->cand.index);
        if ((rc = get_real(f, "step_time_s", &p->full.step_time_s, err)) != 0 ||
            (rc = get_uint(f, "peak_memory_bytes", UINT64_MAX / 2, &peak, err)) != 0 ||
            (rc = get_real(f, "tokens_per_s", &p->full.tokens_per_s, err)) != 0 ||
            (rc = get_real(f, "mfu", &p->full.mfu, err)) != 0)
            return rc;
        p->refined = 1;
        p->full.status = st;
        p->full.peak_memory_bytes = peak;
    }
    return 0;
}

/* Appends the points of root's array key to *points (grown with *cap). */
static int
points_from_json(const json_t *root, const char *key, const search_result *r, search_point **points,
                 size_t *npoint, size_t *cap, di_error *err)
{
    const json_t *a = json_object_get(root, key);
    if (!json_is_array(a))
        return di_error_set(err, DI_EINVAL, "search result: '%s' is not an array", key);
    for (size_t i = 0; i < json_array_size(a); i++) {
        search_point *p;
        const search_candidate *c;
        int rc;
        if (*npoint == *cap) {
            *cap = *cap ? 2 * *cap : 64;
            *points = di_xrealloc(*points, *cap * sizeof **points);
        }
        p = &(*points)[*npoint];
        if ((rc = point_from_json(json_array_get(a, i), p, err)) != 0)
            return rc;
        c = &p->cand;
        if (!search_result_has_devices(r, search_candidate_devices(c)))
            return di_error_set(
                err, DI_EINVAL,
                "search result: point %llu uses %llu devices, not a device "
                "count of the search (at most %u)",
                (unsigned long long)c->index, (unsigned long long)search_candidate_devices(c),
                r->devices);
        ++*npoint;
    }
    return 0;
}

static int
index_cmp(const void *x, const void *y)
{
    const search_point *a = x, *b = y;
    return (a->cand.index > b->cand.index) - (a->cand.index < b->cand.index);
}

/*
 * Adds the n points to r. A point may appear in both the top and the Pareto
 * set, but two points with the same index must be the same point (otherwise
 * which one the sets keep would depend on the order of additions), and there
 * cannot be more distinct points than candidates counted ok.
 */
static int
add_points(search_result *r, const search_point *points, size_t n, di_error *err)
{
    search_point *sorted = di_xmalloc((n ? n : 1) * sizeof *sorted);
    uint64_t distinct = 0;
    int rc = 0;
    if (n > 0) { /* points is NULL when both arrays are empty */
        memcpy(sorted, points, n * sizeof *sorted);
        qsort(sorted, n, sizeof *sorted, index_cmp);
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (i == 0 || sorted[i].cand.index != sorted[i - 1].cand.index)
            distinct++;
        else if (!search_point_equal(&sorted[i], &sorted[i - 1]))
            rc = di_error_set(err, DI_EINVAL,
                              "search result: point %llu appears twice with different values",
                              (unsigned long long)sorted[i].cand.index);
    }
    di_free(sorted);
    if (rc == 0 && distinct > r->count[SEARCH_OK])
        rc = di_error_set(err, DI_EINVAL,
                          "search result: %llu points, but %llu candidates counted ok",
                          (unsigned long long)distinct, (unsigned long long)r->count[SEARCH_OK]);
    for (size_t i = 0; i < n && rc == 0; i++)
        add_point(r, &points[i]);
    return rc;
}

int
search_result_from_json(const char *text, size_t len, search_result *r, di_error *err)
{
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je), *counts;
    const char *obj;
    search_point *points = NULL;
    size_t npoint = 0, cap = 0;
    uint64_t v, sum = 0;
    int rc = 0;

    memset(r, 0, sizeof *r);
    if (root == NULL)
        return di_error_set(err, DI_EINVAL, "search result: line %d: %s", je.line, je.text);
    obj = json_string_value(json_object_get(root, "objective"));
    r->objective = SEARCH_NOBJECTIVE;
    for (int o = 0; obj != NULL && o < SEARCH_NOBJECTIVE; o++)
        if (strcmp(obj, objective_names[o]) == 0)
            r->objective = (search_objective)o;
    if (r->objective == SEARCH_NOBJECTIVE) {
        rc = di_error_set(err, DI_EINVAL,
                          "search result: 'objective' is not time, throughput, devices or cost");
        goto out;
    }
    if ((rc = get_optional_real(root, "target_step_s", &r->target_step_s, err)) != 0 ||
        (rc = get_optional_real(root, "price_per_device_hour", &r->price_per_device_hour, err)) !=
            0 ||
        (rc = get_optional_real(root, "train_tokens", &r->train_tokens, err)) != 0 ||
        (rc = get_optional_real(root, "tokens_per_step", &r->tokens_per_step, err)) != 0 ||
        (rc = get_optional_real(root, "pareto_within", &r->pareto_within, err)) != 0)
        goto out;
    if (r->pareto_within != 0 && !(r->pareto_within >= 1)) {
        rc = di_error_set(err, DI_EINVAL, "search result: 'pareto_within' is below 1");
        goto out;
    }
    obj = json_string_value(json_object_get(root, "refine"));
    if (json_object_get(root, "refine") != NULL && (obj == NULL || strcmp(obj, "all") != 0)) {
        rc = di_error_set(err, DI_EINVAL, "search result: 'refine' is not \"all\"");
        goto out;
    }
    r->refine_pareto = obj != NULL;
    obj = json_string_value(json_object_get(root, "search_key"));
    if (obj == NULL || di_hash_from_hex(obj, &r->key) != 0) {
        rc = di_error_set(err, DI_EINVAL, "search result: 'search_key' is not 64 hex digits");
        goto out;
    }
    if ((rc = get_uint(root, "top_k", SEARCH_MAX_TOP, &v, err)) != 0)
        goto out;
    if (v == 0) {
        rc = di_error_set(err, DI_EINVAL, "search result: 'top_k' is 0");
        goto out;
    }
    r->top_k = (uint32_t)v;
    r->top = di_xcalloc(r->top_k, sizeof *r->top);
    if ((rc = get_uint(root, "devices", HW_MAX_DEVICES, &v, err)) != 0)
        goto out;
    if (v == 0) {
        rc = di_error_set(err, DI_EINVAL, "search result: 'devices' is 0");
        goto out;
    }
    r->devices = (uint32_t)v;
    if (json_object_get(root, "device_counts") != NULL) {
        const json_t *a = json_object_get(root, "device_counts");
        if (!json_is_array(a) || json_array_size(a) == 0 || json_array_size(a) > SEARCH_MAX_SET) {
            rc = di_error_set(err, DI_EINVAL,
                              "search result: 'device_counts' is not a list of 1 to %u counts",
                              SEARCH_MAX_SET);
            goto out;
        }
        for (size_t i = 0; i < json_array_size(a); i++) {
            json_int_t d = json_integer_value(json_array_get(a, i));
            if (!json_is_integer(json_array_get(a, i)) || d < 1 || d > r->devices ||
                (i > 0 && d <= (json_int_t)r->device_counts[i - 1])) {
                rc = di_error_set(err, DI_EINVAL,
                                  "search result: 'device_counts' is not ascending counts up to "
                                  "'devices'");
                goto out;
            }
            r->device_counts[r->ndevice_counts++] = (uint32_t)d;
        }
    }
    if ((rc = get_uint(root, "enumerated", UINT64_MAX / 2, &r->enumerated, err)) != 0)
        goto out;
    counts = json_object_get(root, "counts");
    if (!json_is_object(counts)) {
        rc = di_error_set(err, DI_EINVAL, "search result: 'counts' is not an object");
        goto out;
    }
    for (int s = 0; s < SEARCH_NSTATUS; s++) {
        if ((rc = get_uint(counts, status_names[s], UINT64_MAX / 2, &r->count[s], err)) != 0)
            goto out;
        /* Each count is below 2^63, so the sum stops before it can wrap. */
        if (sum <= r->enumerated)
            sum += r->count[s];
    }
    if (json_object_get(root, "composed") != NULL &&
        (rc = get_uint(root, "composed", UINT64_MAX / 2, &r->composed, err)) != 0)
        goto out;
    if (r->composed > r->count[SEARCH_OK] + r->count[SEARCH_OOM]) {
        rc = di_error_set(err, DI_EINVAL,
                          "search result: more candidates composed than simulated");
        goto out;
    }
    if (sum != r->enumerated) {
        rc = di_error_set(err, DI_EINVAL,
                          "search result: the counts do not add up to the %llu candidates "
                          "enumerated",
                          (unsigned long long)r->enumerated);
        goto out;
    }
    if ((rc = points_from_json(root, "top", r, &points, &npoint, &cap, err)) != 0 ||
        (rc = points_from_json(root, "pareto", r, &points, &npoint, &cap, err)) != 0 ||
        (rc = add_points(r, points, npoint, err)) != 0)
        goto out;
    /*
     * Without "refine": "all", a Pareto point outside the top K reports its estimate
     * (as a merge would make it: a file of an older version re-simulated them all).
     */
    settle_refined(r);
out:
    di_free(points);
    json_decref(root);
    if (rc != 0)
        search_result_fini(r);
    return rc;
}

/* ---- tables ---- */

static void
table(di_buf *b, const search_result *r, const char *title, const search_point *p, uint32_t n)
{
    int cost = r->price_per_device_hour > 0, train = r->train_tokens > 0;
    di_buf_printf(b, "%s\n", title);
    di_buf_printf(b, "  %4s  %12s  %12s  %14s  %6s", "#", "step time ms", "peak mem MiB",
                  "tokens/s/dev", "MFU %");
    if (r->ndevice_counts > 0)
        di_buf_printf(b, "  %7s", "devices");
    if (train)
        di_buf_printf(b, "  %12s", "train days");
    if (cost)
        di_buf_printf(b, "  %12s", train ? "train cost" : "step cost");
    di_buf_puts(b, "  strategy\n");
    for (uint32_t i = 0; i < n; i++) {
        char name[256];
        search_figures f = search_point_reported(&p[i]);
        const char *mark = p[i].refined ? (f.status == SEARCH_OK ? " " : "!")
                           : p[i].composed ? "~"
                                           : " ";
        double step_cost, train_s;
        search_point_train(r, &f, &p[i], &step_cost, &train_s);
        search_candidate_format(&p[i].cand, name, sizeof name);
        di_buf_printf(b, "  %4u %s%12.3f  %12.3f  %14.1f  %6.2f", i + 1, mark,
                      f.step_time_s * 1e3, (double)f.peak_memory_bytes / (1u << 20),
                      f.tokens_per_s, f.mfu * 100);
        if (r->ndevice_counts > 0)
            di_buf_printf(b, "  %7u", search_point_devices(&p[i]));
        if (train)
            di_buf_printf(b, "  %12.2f", train_s / 86400);
        if (cost)
            di_buf_printf(b, "  %12.2f",
                          train && f.step_time_s > 0 ? step_cost * train_s / f.step_time_s
                                                     : step_cost);
        di_buf_printf(b, "  %s\n", name);
    }
    if (n == 0)
        di_buf_puts(b, r->enumerated == 0
                           ? "  (no candidate: no strategy the constraints allow uses these "
                             "devices)\n"
                           : "  (no candidate fits)\n");
}

char *
search_result_to_table(const search_result *r)
{
    static const char *const by[SEARCH_NOBJECTIVE] = {
        "step time", "tokens/s per device", "fewest devices", "device time per step"};
    di_buf b;
    char title[256], on[160];
    int w = 0;
    di_buf_init(&b);
    if (r->ndevice_counts == 0)
        snprintf(on, sizeof on, "%u", r->devices);
    for (uint32_t i = 0; i < r->ndevice_counts && w >= 0 && (size_t)w < sizeof on; i++)
        w += snprintf(on + w, sizeof on - (size_t)w, "%s%u", i ? "," : "", r->device_counts[i]);
    snprintf(title, sizeof title, "top %u by %s on %s devices", r->top_k,
             (unsigned)r->objective < SEARCH_NOBJECTIVE ? by[r->objective] : "?", on);
    if (r->target_step_s > 0) {
        size_t len = strlen(title);
        snprintf(title + len, sizeof title - len, " (target step time %.3f s)", r->target_step_s);
    }
    {
        search_point *ordered = di_xmalloc((r->ntop ? r->ntop : 1) * sizeof *ordered);
        search_result_reported_top(r, ordered);
        table(&b, r, title, ordered, r->ntop);
        di_free(ordered);
    }
    if (r->pareto_within > 0)
        snprintf(title, sizeof title,
                 "pareto set over (step time, peak memory), within %gx the fastest step",
                 r->pareto_within);
    else
        snprintf(title, sizeof title, "pareto set over (step time, peak memory)");
    table(&b, r, title, r->pareto, r->npareto);
    di_buf_printf(&b, "candidates %llu:", (unsigned long long)r->enumerated);
    for (int s = 0; s < SEARCH_NSTATUS; s++)
        di_buf_printf(&b, " %s %llu", status_names[s], (unsigned long long)r->count[s]);
    di_buf_putc(&b, '\n');
    di_buf_printf(&b, "simulated: %llu in full, %llu composed\n",
                  (unsigned long long)(r->count[SEARCH_OK] + r->count[SEARCH_OOM] - r->composed),
                  (unsigned long long)r->composed);
    if (r->composed > 0)
        di_buf_puts(&b, r->refine_pareto
                            ? "(composed points in the tables are re-simulated in full; ~: not, "
                              "!: out of memory in the full simulation)\n"
                            : "(the top K's composed points are re-simulated in full, the Pareto "
                              "set's are estimates within 1% (--refine all: re-simulated too); "
                              "~: an estimate, !: out of memory in the full simulation)\n");
    if (r->target_step_s > 0 && r->ntop > 0 && r->top[0].step_time_s > r->target_step_s)
        di_buf_puts(&b, "(no candidate reaches the target step time: the closest first)\n");
    return di_buf_take(&b, NULL);
}
