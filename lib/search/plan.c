/*
 * plan.c: branch and bound over a search space (docs/search.md, "Branch
 * and bound"). A seed of candidates with small bounds (choose_seed) is
 * evaluated first; its points decide, once and for all, which other
 * candidates cannot enter the answer: a candidate whose time bound
 * (search_time_bound) and memory bound (search_memory_bound), taken as its
 * figures, would still rank below K seed points and be dominated by a seed
 * point, cannot enter the top K or the Pareto set whatever it simulates to,
 * and is pruned (SEARCH_TIME_BOUND) without being validated, transformed or
 * simulated.
 *
 * The decision depends on the seed's points only, which depend on the space
 * only (the whole space, whatever the shard), so every candidate's status
 * is the same whatever the worker count, the interleaving or the sharding:
 * results merge as before. Workers share the plan (an atomic cursor over
 * the seed, then the shard's other candidates in enumeration order) and
 * each keeps its own copy of the seed's result, built once the seed is
 * complete. No threads here: a worker that reaches past the seed before the
 * other workers have finished it is told to wait (SEARCH_PLAN_WAIT).
 */
#include "search/search.h"

#include <stdlib.h>
#include <string.h>

/*
 * The seed: this many candidates per point of the top K, at least SEED_MIN
 * and at most SEED_MAX (with a larger K nothing is pruned: the seed cannot
 * hold K points).
 */
#define SEED_PER_TOP 2u
#define SEED_MIN 16u
#define SEED_MAX 64u

typedef struct bounded {
    double t;
    uint64_t index;
} bounded;

static int
cmp_bounded(const void *a, const void *b)
{
    const bounded *x = a, *y = b;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* Whether c is of this process's shard. */
static int
in_shard(const search_space *sp, const search_candidate *c)
{
    return c->index % sp->cfg.shard_count == sp->cfg.shard_index;
}

/*
 * The seed: candidates of the whole space that pass the memory bound and
 * xform_validate, the smallest time bound first (ties by index): 2 K (16 to
 * 64) of those whose memory bound is at most half the usable memory, then 2
 * more of those within a quarter, an eighth, a sixteenth and a
 * thirty-second of it, each time among the candidates without ZeRO-2 or -3
 * and with tensor parallelism inside a node. Any seed is sound (a candidate
 * is pruned only below K seed points and dominated by one); the choice only
 * makes it useful. The time bound counts little communication (the first
 * stage's data-parallel part), so small bounds include tensor parallelism
 * across nodes and ZeRO-2 and -3, which communication makes slow; the
 * memory bound is often well below the simulated peak, so a seed of the
 * smallest time bounds alone runs out of memory; and the Pareto set is
 * pruned only by a seed point that needs no more memory than a candidate's
 * bound, hence seeds down the memory scale.
 */
/* Whether communication is not known to make c slow (the seed's choice, above). */
static int
likely(const search_space *sp, const search_candidate *c)
{
    return !(c->zero > 1 || (c->tp > sp->hw->devices_per_node && sp->hw->devices_per_node > 1));
}

/* Adds to the seed up to `want` valid candidates not in it yet, of b[0..n) in order. */
static void
add_seeds(search_plan *pl, const bounded *b, uint64_t n, uint32_t want)
{
    const search_space *sp = pl->sp;
    uint32_t added = 0;
    for (uint64_t i = 0; i < n && added < want; i++) {
        strategy s;
        di_error err;
        int dup = 0;
        for (uint32_t j = 0; j < pl->nseed && !dup; j++)
            dup = pl->seed[j] == b[i].index;
        if (dup)
            continue;
        search_candidate_strategy(&sp->candidates[b[i].index], &s);
        if (xform_validate(sp->module, &s, sp->hw, &err) == 0) {
            pl->seed[pl->nseed++] = b[i].index;
            added++;
        }
        strategy_fini(&s);
    }
}

static void
choose_seed(search_plan *pl)
{
    static const double ladder[] = {0.5, 0.25, 0.125, 0.0625, 0.03125};
    const search_space *sp = pl->sp;
    double usable = sp->cfg.memory_headroom * sp->max_capacity;
    uint32_t want = sp->cfg.top_k * SEED_PER_TOP, nl = sizeof ladder / sizeof ladder[0];
    size_t nc = sp->ncandidate ? sp->ncandidate : 1;
    bounded *b = di_xmalloc(nc * sizeof *b);
    double *t = di_xmalloc(nc * sizeof *t), *mem = di_xmalloc(nc * sizeof *mem);
    if (want < SEED_MIN)
        want = SEED_MIN;
    if (want > SEED_MAX)
        want = SEED_MAX;
    for (uint64_t i = 0; i < sp->ncandidate; i++) {
        t[i] = likely(sp, &sp->candidates[i]) ? search_time_bound(sp, &sp->candidates[i]) : 0;
        mem[i] = t[i] > 0 ? (double)search_memory_bound(sp, &sp->candidates[i]) : 0;
    }
    pl->seed = di_xmalloc((want + (nl - 1) * 2 + 1) * sizeof *pl->seed);
    for (uint32_t k = 0; k < nl; k++) {
        uint64_t n = 0;
        for (uint64_t i = 0; i < sp->ncandidate; i++)
            if (t[i] > 0 && mem[i] <= ladder[k] * usable) {
                b[n].t = t[i];
                b[n++].index = i;
            }
        qsort(b, n, sizeof *b, cmp_bounded);
        add_seeds(pl, b, n, k == 0 ? want : 2);
    }
    di_free(mem);
    di_free(t);
    di_free(b);
}

void
search_plan_init(search_plan *pl, const search_space *sp)
{
    uint64_t total = search_space_shard_size(sp);
    uint8_t *seed; /* per candidate of the space: a seed */
    memset(pl, 0, sizeof *pl);
    pl->sp = sp;
    if (!sp->cfg.no_time_bound)
        choose_seed(pl);
    pl->seed_point = di_xcalloc(pl->nseed ? pl->nseed : 1, sizeof *pl->seed_point);
    /* The shard's candidates but its seeds, in enumeration order. */
    seed = di_xcalloc(sp->ncandidate ? sp->ncandidate : 1, 1);
    for (uint32_t j = 0; j < pl->nseed; j++)
        seed[pl->seed[j]] = 1;
    pl->order = di_xmalloc((total ? total : 1) * sizeof *pl->order);
    for (uint64_t k = 0; k < total; k++) {
        const search_candidate *c = search_space_at(sp, k);
        if (!seed[c->index])
            pl->order[pl->norder++] = c->index;
    }
    di_free(seed);
    atomic_init(&pl->cursor, 0);
    atomic_init(&pl->seeds_done, 0);
}

void
search_plan_fini(search_plan *pl)
{
    di_free(pl->seed);
    di_free(pl->seed_point);
    di_free(pl->order);
    memset(pl, 0, sizeof *pl);
}

void
search_planner_init(search_planner *w, search_plan *pl)
{
    memset(w, 0, sizeof *w);
    w->plan = pl;
}

void
search_planner_fini(search_planner *w)
{
    if (w->ready) {
        search_result_fini(w->seeds_result);
        di_free(w->seeds_result);
    }
    memset(w, 0, sizeof *w);
}

/*
 * Whether candidate c cannot enter the answer, by the seed's result r: with
 * its time bound as its step time and its memory bound as its peak, K seed
 * points would still rank before it, and a seed point would be faster and
 * need no more memory.
 */
static int
pruned_by_bound(const search_space *sp, const search_result *r, const search_candidate *c)
{
    double t = search_time_bound(sp, c), n;
    uint32_t m1, m2;
    search_point opt;
    int dominated = 0;
    if (!(t > 0) || r->ntop < r->top_k || r->npareto == 0)
        return 0;
    /* What the memory bound prunes keeps that reason (search_eval). */
    if ((double)search_memory_bound(sp, c) > sp->cfg.memory_headroom * sp->max_capacity)
        return 0;
    if (search_compose_counts(sp, c, &m1, &m2))
        t *= 1 - SEARCH_COMPOSE_SLACK;
    memset(&opt, 0, sizeof opt);
    opt.cand = *c;
    opt.status = SEARCH_OK;
    opt.step_time_s = t;
    opt.peak_memory_bytes = search_memory_bound(sp, c);
    n = (double)search_point_devices(&opt);
    opt.tokens_per_s = sp->tokens_per_step / t / n;
    if (search_point_compare(r, &r->top[r->top_k - 1], &opt) >= 0)
        return 0;
    for (uint32_t i = 0; i < r->npareto && !dominated; i++)
        dominated = r->pareto[i].step_time_s < t &&
                    r->pareto[i].peak_memory_bytes <= opt.peak_memory_bytes;
    return dominated;
}

/* Whether w holds the seed's result, made once every seed is evaluated. */
static int
ready(search_planner *w)
{
    search_plan *pl = w->plan;
    if (w->ready || pl->nseed == 0)
        return w->ready;
    if (atomic_load(&pl->seeds_done) < pl->nseed)
        return 0;
    w->seeds_result = di_xmalloc(sizeof *w->seeds_result);
    search_result_init(w->seeds_result, pl->sp);
    for (uint32_t j = 0; j < pl->nseed; j++)
        search_result_add(w->seeds_result, &pl->seed_point[j]);
    w->ready = 1;
    return 1;
}

int
search_plan_prunes(search_planner *w, const search_candidate *c)
{
    return ready(w) && pruned_by_bound(w->plan->sp, w->seeds_result, c);
}

int
search_plan_next(search_planner *w, search_evaluator *ev, search_point *out)
{
    search_plan *pl = w->plan;
    const search_space *sp = pl->sp;
    const search_candidate *c;
    uint64_t k;
    if (w->holding) {
        k = w->pos;
    } else {
        k = atomic_fetch_add(&pl->cursor, 1);
        w->pos = k;
    }
    if (k < pl->nseed) {
        c = &sp->candidates[pl->seed[k]];
        search_eval(ev, c, &pl->seed_point[k]);
        *out = pl->seed_point[k];
        atomic_fetch_add(&pl->seeds_done, 1); /* after the point is written */
        return in_shard(sp, c) ? SEARCH_PLAN_POINT : SEARCH_PLAN_SKIP;
    }
    k -= pl->nseed;
    if (k >= pl->norder)
        return SEARCH_PLAN_END;
    if (pl->nseed > 0 && !ready(w)) {
        w->holding = 1;
        return SEARCH_PLAN_WAIT;
    }
    w->holding = 0;
    c = &sp->candidates[pl->order[k]];
    if (w->ready && pruned_by_bound(sp, w->seeds_result, c)) {
        memset(out, 0, sizeof *out);
        out->cand = *c;
        out->status = SEARCH_TIME_BOUND;
        return SEARCH_PLAN_POINT;
    }
    search_eval(ev, c, out);
    return SEARCH_PLAN_POINT;
}
