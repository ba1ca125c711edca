/*
 * plan.c: branch and bound over a search space (docs/search.md, "Branch
 * and bound"). A seed of candidates with small bounds (choose_seed) is
 * evaluated first; its points decide, once and for all, which other
 * candidates cannot enter the answer: a candidate whose time bound
 * (search_time_bound, or the schedule's: search_time_bound_schedule) and
 * memory bound (search_memory_bound), taken as its figures, would still rank
 * below K seed points and be dominated by a seed point, cannot enter the top
 * K or the Pareto set whatever it simulates to, and is pruned
 * (SEARCH_TIME_BOUND) without being validated, transformed or simulated.
 *
 * The seed grows in rounds (extend): once a round is evaluated, the next
 * takes the candidates of the whole space that could still enter the top K
 * by the points so far, best optimistic point first, until none can; then
 * the Pareto rounds take the candidates that no point so far dominates, the
 * smallest optimistic step time first, until none is left. So the seed is,
 * nearly, what a sequential best-first branch and bound would evaluate for
 * the top K and then for the Pareto set (the rounds' size aside), and every
 * candidate outside it that has an optimistic point is pruned. Shards share
 * the whole space's seed, so each evaluates all of it: sharding divides the
 * rest (the candidates without a time bound, or left past SEED_CAP).
 *
 * The decisions depend on the seed's points only, which depend on the space
 * only (the whole space, whatever the shard; a round on the rounds before
 * it, never on which worker evaluated what), so every candidate's status is
 * the same whatever the worker count, the interleaving or the sharding:
 * results merge as before. Workers share the plan (an atomic cursor over
 * the seed, then the shard's other candidates in enumeration order) and
 * each keeps its own copy of the seed's result, built once the seed is
 * complete. No threads here: a worker that reaches past the seed before the
 * other workers have finished it is told to wait (SEARCH_PLAN_WAIT); the
 * worker that finds a round complete chooses the next.
 */
#include "search/search.h"

#include <stdlib.h>
#include <string.h>

/*
 * The seed's first round: this many candidates per point of the top K, at
 * least SEED_MIN and at most SEED_MAX (with a larger K nothing is pruned: the
 * seed cannot hold K points). One per point: the later rounds go best first
 * by the optimistic points, so the first only has to give the top K a K-th
 * point; with two per point (and at least 16), the 20 first of gpt3-175b on
 * 1,024 GPUs included 10 whose time bounds were above the answer's tenth step.
 */
#define SEED_PER_TOP 1u
#define SEED_MIN 4u
#define SEED_MAX 64u
/*
 * The rounds after the first: at least SEED_ROUND candidates, or an eighth of
 * the seed so far (fewer rounds, fewer waits, as the threshold settles), and
 * at most SEED_CAP seeds in all (then the rest is left to the shards). The
 * Pareto rounds take SEED_PARETO_ROUND at most: a round's candidates are
 * chosen by the points of the rounds before it, so one a point of its own
 * round dominates is evaluated all the same, and the Pareto rounds' points
 * dominate most of what follows them in step order. On gpt3-175b on 1,024
 * GPUs (SEARCH_VERSION distir-search-49, in process, 2 threads) the search
 * evaluated 879 candidates with rounds of 16, 878 with 8 (and more waits
 * between rounds), 929 with an eighth of the seed (rounds of 110 to 120 by
 * then), the same answer each time.
 */
#define SEED_ROUND 16u
#define SEED_PARETO_ROUND 16u
#define SEED_CAP 4096u

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
 * xform_validate, the smallest time bound first (ties by index): K (4 to
 * 64) of them, then, when the Pareto set is not restricted to a window
 * (pareto_within), 2 more of those whose memory bound is within a half, a
 * quarter, an eighth, a sixteenth and a thirty-second of the usable memory,
 * each time among the candidates without ZeRO-2 or -3 and with tensor
 * parallelism inside a node. Any seed is sound (a candidate
 * is pruned only below K seed points and dominated by one); the choice only
 * makes it useful. The time bound counts little communication (the first
 * stage's data-parallel part), so small bounds include tensor parallelism
 * across nodes and ZeRO-2 and -3, which communication makes slow; the
 * memory bound was once well below the simulated peak, so the first K were
 * taken within half the memory until 2026-11-29 (on gpt3-175b with 1,024
 * GPUs and --pareto-within 1 that kept out the fastest candidates, and
 * searches simulated 10 more: 115 against 105; as many ran out of memory
 * either way); and the Pareto set is
 * pruned only by a seed point that needs no more memory than a candidate's
 * bound, hence seeds down the memory scale. Under a window the Pareto set's
 * slow low-memory end is pruned by the window (pruned_by_bound), and such
 * seeds would only cost their simulations.
 */
/* Whether communication is not known to make c slow (the seed's choice, above). */
static int
likely(const search_space *sp, const search_candidate *c)
{
    return !(c->zero > 1 || (c->tp > sp->hw->devices_per_node && sp->hw->devices_per_node > 1));
}

/* Whether c passes xform_validate (a seed must: its point is worth ranking). */
static int
valid(const search_space *sp, uint64_t index)
{
    strategy s;
    di_error err;
    int rc;
    search_candidate_strategy(&sp->candidates[index], &s);
    rc = search_space_validate(sp, &s, &err);
    strategy_fini(&s);
    return rc == 0;
}

/*
 * Appends a seed and publishes it: its slot is written before nseed counts
 * it, so a worker that reads nseed may evaluate it at once.
 */
static void
push_seed(search_plan *pl, uint64_t index)
{
    uint32_t n = (uint32_t)atomic_load(&pl->nseed);
    pl->seed[n] = index;
    pl->is_seed[index] = 1;
    atomic_store(&pl->nseed, n + 1);
}

/* Adds to the seed up to `want` valid candidates not in it yet, of b[0..n) in order. */
static void
add_seeds(search_plan *pl, const bounded *b, uint64_t n, uint32_t want)
{
    uint32_t added = 0;
    for (uint64_t i = 0; i < n && added < want; i++)
        if (!pl->is_seed[b[i].index] && valid(pl->sp, b[i].index)) {
            push_seed(pl, b[i].index);
            added++;
        }
}

static void
choose_seed(search_plan *pl)
{
    static const double ladder[] = {1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125};
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
    if (sp->cfg.pareto_within > 0)
        nl = 1; /* no seeds down the memory scale under a window (above) */
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

/* The point of candidate c with step time t and peak mem, as the objective ranks it. */
static void
point_of(const search_space *sp, const search_candidate *c, double t, uint64_t mem,
         search_point *p)
{
    memset(p, 0, sizeof *p);
    p->cand = *c;
    p->status = SEARCH_OK;
    p->step_time_s = t;
    p->peak_memory_bytes = mem;
    p->tokens_per_s = sp->tokens_per_step / t / (double)search_point_devices(p);
}

/*
 * c's optimistic point: its time bound as its step time (lowered by
 * SEARCH_COMPOSE_SLACK when it will be composed), its memory bound as its
 * peak. 0 when it has no time bound (then *no_bound is set, when given), or
 * when the memory bound prunes it (that reason is kept: search_eval).
 */
static int
optimistic(const search_space *sp, const search_candidate *c, search_point *opt, int *no_bound)
{
    double t = search_time_bound(sp, c);
    uint64_t mem;
    uint32_t m1, m2;
    if (no_bound != NULL)
        *no_bound = !(t > 0);
    if (!(t > 0))
        return 0;
    mem = search_memory_bound(sp, c);
    if (search_memory_pruned(sp, mem))
        return 0;
    if (search_compose_counts(sp, c, &m1, &m2))
        t *= 1 - SEARCH_COMPOSE_SLACK;
    point_of(sp, c, t, mem, opt);
    return 1;
}

/* Whether a point as good as opt could enter r's top K: r does not hold K points ranking first. */
static int
may_top(const search_result *r, const search_point *opt)
{
    return r->ntop < r->top_k || search_point_compare(r, &r->top[r->top_k - 1], opt) >= 0;
}

/*
 * Whether a point as good as opt can enter neither r's top K nor its Pareto
 * set: K points of r rank before it, and one of them is faster and needs no
 * more memory, or (under pareto_within) its step is more than that many times
 * the fastest point's.
 */
static int
beyond(const search_result *r, const search_point *opt)
{
    int dominated = 0;
    if (may_top(r, opt))
        return 0;
    /* Under pareto_within: slower than the Pareto set may be (the fastest only gets faster). */
    if (r->pareto_within > 0 && opt->step_time_s > r->pareto_within * r->pareto[0].step_time_s)
        return 1;
    for (uint32_t i = 0; i < r->npareto && !dominated; i++)
        dominated = r->pareto[i].step_time_s < opt->step_time_s &&
                    r->pareto[i].peak_memory_bytes <= opt->peak_memory_bytes;
    return dominated;
}

/*
 * Whether candidate c cannot enter the answer, by the seed's result r: its
 * optimistic point (its time bound as its step time and its memory bound as
 * its peak) is beyond r. Where search_time_bound's point is not, the pipeline
 * schedule's bound (search_time_bound_schedule) may be: dearer, so only then
 * (the candidates a search evaluates and those it prunes: about a thousand on
 * gpt3-175b with 1,024 GPUs).
 */
static int
pruned_by_bound(const search_space *sp, const search_result *r, const search_candidate *c)
{
    search_point opt;
    uint32_t m1, m2;
    double t;
    if (r->npareto == 0 || !optimistic(sp, c, &opt, NULL))
        return 0;
    if (beyond(r, &opt))
        return 1;
    if (c->pp < 2)
        return 0;
    t = search_time_bound_schedule(sp, c);
    if (search_compose_counts(sp, c, &m1, &m2))
        t *= 1 - SEARCH_COMPOSE_SLACK;
    if (!(t > opt.step_time_s))
        return 0;
    point_of(sp, c, t, opt.peak_memory_bytes, &opt);
    return beyond(r, &opt);
}

/* Orders candidates i and j by their optimistic times ti, tj as the objective ranks points. */
static int
rank_cmp(const search_space *sp, const search_result *r, uint64_t i, double ti, uint64_t j,
         double tj)
{
    search_point a, b;
    point_of(sp, &sp->candidates[i], ti, 0, &a);
    point_of(sp, &sp->candidates[j], tj, 0, &b);
    return search_point_compare(r, &a, &b);
}

/*
 * The candidates a round may take: those of the whole space with an
 * optimistic point, ordered as their optimistic points rank by the
 * objective (which reads the step time and the strategy, not the peak;
 * ties by index). A merge sort: qsort has no context argument, and the
 * order must be total and the same on every machine. 16 bytes per
 * candidate of the space and 16 per ranked one while sorting, 8 per ranked
 * one after.
 */
static void
rank_candidates(search_plan *pl)
{
    const search_space *sp = pl->sp;
    size_t nc = sp->ncandidate ? sp->ncandidate : 1;
    search_result r;
    uint64_t n = 0, *idx = di_xmalloc(nc * sizeof *idx), *pos, *tmp;
    double *t = di_xmalloc(nc * sizeof *t);
    for (uint64_t i = 0; i < sp->ncandidate; i++) {
        const search_candidate *c = &sp->candidates[i];
        search_point opt;
        int no_bound;
        if (optimistic(sp, c, &opt, &no_bound)) {
            idx[n] = i;
            t[n++] = opt.step_time_s;
        } else if (no_bound && !search_time_bound_refused(sp, c) &&
                   !search_memory_pruned(sp, search_memory_bound(sp, c))) {
            pl->unbounded++; /* may be feasible: the rounds cannot rank it */
        }
    }
    pos = di_xmalloc((n ? n : 1) * sizeof *pos);
    tmp = di_xmalloc((n ? n : 1) * sizeof *tmp);
    for (uint64_t i = 0; i < n; i++)
        pos[i] = i;
    search_result_init(&r, sp);
    for (uint64_t w = 1; w < n; w *= 2) {
        uint64_t *x;
        for (uint64_t lo = 0; lo < n; lo += 2 * w) {
            uint64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            uint64_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                tmp[k++] = rank_cmp(sp, &r, idx[pos[j]], t[pos[j]], idx[pos[i]], t[pos[i]]) < 0
                               ? pos[j++]
                               : pos[i++];
            while (i < mid)
                tmp[k++] = pos[i++];
            while (j < hi)
                tmp[k++] = pos[j++];
        }
        x = pos;
        pos = tmp;
        tmp = x;
    }
    search_result_fini(&r);
    for (uint64_t i = 0; i < n; i++)
        tmp[i] = idx[pos[i]];
    di_free(pos);
    pl->ranked = tmp;
    pl->nranked = n;
    /* The Pareto rounds' order: the smallest optimistic step time first (ties by index). */
    {
        bounded *b = di_xmalloc((n ? n : 1) * sizeof *b);
        for (uint64_t i = 0; i < n; i++) {
            b[i].t = t[i];
            b[i].index = idx[i];
        }
        qsort(b, n, sizeof *b, cmp_bounded);
        pl->by_time = di_xmalloc((n ? n : 1) * sizeof *pl->by_time);
        for (uint64_t i = 0; i < n; i++)
            pl->by_time[i] = b[i].index;
        pl->nby_time = n;
        di_free(b);
    }
    di_free(t);
    di_free(idx);
}

/*
 * A rough cost of evaluating candidate index, for the order within a round:
 * its simulated microbatches (a composition's three runs: m1, m2 and
 * 2 m2 - m1) and a set-up per simulation (SEARCH_SETUP_MICROBATCHES).
 */
static double
eval_cost(const search_space *sp, uint64_t index)
{
    const search_candidate *c = &sp->candidates[index];
    uint32_t m1, m2;
    if (search_compose_counts(sp, c, &m1, &m2))
        return 3.0 * SEARCH_SETUP_MICROBATCHES + 3.0 * m2;
    return (double)SEARCH_SETUP_MICROBATCHES + c->microbatches;
}

/*
 * Publishes a round's candidates, the dearest first, so that the workers
 * end it on cheap ones instead of one waiting for the other's long last
 * simulation (the order changes nothing else: a round's statuses are its
 * candidates', whoever evaluates them when).
 */
static void
push_round(search_plan *pl, bounded *b, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        b[i].t = -eval_cost(pl->sp, b[i].index);
    qsort(b, n, sizeof *b, cmp_bounded);
    for (uint32_t i = 0; i < n; i++)
        push_seed(pl, b[i].index);
}

/*
 * The next round, once every seed so far is evaluated: the candidates
 * next in rank order that are not seeds yet and could still enter the top
 * K by the points so far; once there are none, the Pareto rounds' (below);
 * the seed is complete (`seeded`) when those are none too. The top K's are
 * not validated here but by the workers that evaluate them (search_eval
 * counts an invalid one as such): a round is chosen while the other workers
 * wait, and a cancelled search stops between candidates. The Pareto rounds
 * walk far more candidates than they take, most of them dominated, and
 * validate the few that are not (an invalid seed would be evaluated by
 * every shard).
 * Called by one worker at a time (the `planning` flag). Its choice depends
 * on the seed's points, whoever evaluated them, so it is the same whatever
 * the workers.
 */
static void
extend(search_plan *pl)
{
    const search_space *sp = pl->sp;
    uint32_t n = (uint32_t)atomic_load(&pl->nseed), want = n / 8, added = 0;
    search_result r;
    bounded *round;
    if (want < SEED_ROUND)
        want = SEED_ROUND;
    if (want > pl->seed_cap - n)
        want = pl->seed_cap - n;
    round = di_xmalloc((want ? want : 1) * sizeof *round);
    search_result_init(&r, sp);
    for (uint32_t j = 0; j < n; j++)
        search_result_add(&r, &pl->seed_point[j]);
    while (!pl->pareto_phase && added < want && pl->ranked_pos < pl->nranked) {
        uint64_t index = pl->ranked[pl->ranked_pos];
        search_point opt;
        if (!pl->is_seed[index]) {
            optimistic(sp, &sp->candidates[index], &opt, NULL);
            if (!may_top(&r, &opt)) { /* nor any after it */
                pl->ranked_pos = pl->nranked;
                break;
            }
            round[added++].index = index;
        }
        pl->ranked_pos++;
    }
    if (!pl->pareto_phase && added == 0) {
        pl->pareto_phase = 1; /* the top K's rounds are over */
        /*
         * Settled when they ended because no candidate left could enter the top K
         * (not at the seed's cap), and every candidate was ranked: the seed's top
         * K, evaluated in full by now, is the answer's.
         */
        if (pl->ranked_pos >= pl->nranked && pl->unbounded == 0) {
            pl->nsettled_top = r.ntop;
            pl->settled_top = di_xmalloc((r.ntop ? r.ntop : 1) * sizeof *pl->settled_top);
            memcpy(pl->settled_top, r.top, r.ntop * sizeof *r.top);
            atomic_store(&pl->top_settled, 1);
        }
    }
    /*
     * The Pareto rounds: candidates of the whole space, the smallest
     * optimistic step time first, that no point so far dominates (and that
     * pass xform_validate). One a point dominates now is dominated by the
     * whole seed too: pruned outside it.
     */
    if (pl->pareto_phase && want > SEED_PARETO_ROUND)
        want = SEED_PARETO_ROUND;
    while (pl->pareto_phase && added < want && pl->by_time_pos < pl->nby_time) {
        uint64_t index = pl->by_time[pl->by_time_pos++];
        if (pl->is_seed[index] || pruned_by_bound(sp, &r, &sp->candidates[index]) ||
            !valid(sp, index))
            continue;
        round[added++].index = index;
    }
    search_result_fini(&r);
    push_round(pl, round, added);
    di_free(round);
    if (added > 0)
        pl->rounds++;
    else
        atomic_store(&pl->seeded, 1);
}

void
search_plan_init(search_plan *pl, const search_space *sp)
{
    uint64_t total = search_space_shard_size(sp);
    memset(pl, 0, sizeof *pl);
    pl->sp = sp;
    atomic_init(&pl->nseed, 0);
    atomic_init(&pl->seeded, 0);
    atomic_init(&pl->planning, 0);
    atomic_init(&pl->top_settled, 0);
    pl->is_seed = di_xcalloc(sp->ncandidate ? sp->ncandidate : 1, 1);
    if (!sp->cfg.no_time_bound) {
        /* The first round's SEED_MAX and ladder (choose_seed), then the other rounds'. */
        pl->seed_cap = SEED_MAX + 16 + SEED_CAP;
        pl->seed = di_xmalloc(pl->seed_cap * sizeof *pl->seed);
        choose_seed(pl);
        rank_candidates(pl);
        pl->rounds = 1;
    }
    if (atomic_load(&pl->nseed) == 0)
        atomic_store(&pl->seeded, 1);
    pl->seed_point = di_xcalloc(pl->seed_cap ? pl->seed_cap : 1, sizeof *pl->seed_point);
    /* The shard's candidates but the first round's seeds, in enumeration order. */
    pl->order = di_xmalloc((total ? total : 1) * sizeof *pl->order);
    for (uint64_t k = 0; k < total; k++) {
        const search_candidate *c = search_space_at(sp, k);
        if (!pl->is_seed[c->index])
            pl->order[pl->norder++] = c->index;
    }
    atomic_init(&pl->cursor, 0);
    atomic_init(&pl->seeds_done, 0);
}

void
search_plan_fini(search_plan *pl)
{
    di_free(pl->seed);
    di_free(pl->seed_point);
    di_free(pl->is_seed);
    di_free(pl->ranked);
    di_free(pl->by_time);
    di_free(pl->order);
    di_free(pl->settled_top);
    memset(pl, 0, sizeof *pl);
}

int
search_plan_settled_top(search_plan *pl, const search_point **top, uint32_t *n)
{
    if (!atomic_load(&pl->top_settled))
        return 0;
    *top = pl->settled_top;
    *n = pl->nsettled_top;
    return 1;
}

int
search_plan_seeded(search_plan *pl)
{
    return atomic_load(&pl->seeded) && atomic_load(&pl->seeds_done) == atomic_load(&pl->nseed);
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

/* Whether w holds the seed's result, made once every seed is evaluated. */
static int
ready(search_planner *w)
{
    search_plan *pl = w->plan;
    uint32_t n;
    if (w->ready || !search_plan_seeded(pl))
        return w->ready;
    n = (uint32_t)atomic_load(&pl->nseed);
    if (n == 0)
        return 0;
    w->seeds_result = di_xmalloc(sizeof *w->seeds_result);
    search_result_init(w->seeds_result, pl->sp);
    for (uint32_t j = 0; j < n; j++)
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
    uint64_t k, nseed;
    if (w->holding) {
        k = w->pos;
    } else {
        k = atomic_fetch_add(&pl->cursor, 1);
        w->pos = k;
    }
    for (;;) {
        int idle = 0;
        nseed = atomic_load(&pl->nseed);
        if (k < nseed) {
            w->holding = 0;
            c = &sp->candidates[pl->seed[k]];
            search_eval(ev, c, &pl->seed_point[k]);
            *out = pl->seed_point[k];
            atomic_fetch_add(&pl->seeds_done, 1); /* after the point is written */
            return in_shard(sp, c) ? SEARCH_PLAN_POINT : SEARCH_PLAN_SKIP;
        }
        if (atomic_load(&pl->seeded)) {
            if (atomic_load(&pl->nseed) == nseed) /* final once seeded is seen */
                break;
            continue;
        }
        /*
         * k waits for the next round, which the worker that finds this one
         * complete chooses; then k may be one of its seeds.
         */
        if (atomic_load(&pl->seeds_done) == nseed &&
            atomic_compare_exchange_strong(&pl->planning, &idle, 1)) {
            if (!atomic_load(&pl->seeded) &&
                atomic_load(&pl->seeds_done) == atomic_load(&pl->nseed))
                extend(pl);
            atomic_store(&pl->planning, 0);
            continue;
        }
        w->holding = 1;
        return SEARCH_PLAN_WAIT;
    }
    k -= nseed;
    if (k >= pl->norder) {
        w->holding = 0;
        return SEARCH_PLAN_END;
    }
    if (nseed > 0 && !ready(w)) {
        w->holding = 1;
        return SEARCH_PLAN_WAIT;
    }
    w->holding = 0;
    c = &sp->candidates[pl->order[k]];
    if (pl->is_seed[c->index]) /* a later round's seed: evaluated there */
        return SEARCH_PLAN_SKIP;
    if (w->ready && pruned_by_bound(sp, w->seeds_result, c)) {
        memset(out, 0, sizeof *out);
        out->cand = *c;
        out->status = SEARCH_TIME_BOUND;
        return SEARCH_PLAN_POINT;
    }
    search_eval(ev, c, out);
    return SEARCH_PLAN_POINT;
}

/*
 * Whether r's top K or Pareto set holds candidate index: the points r's
 * refinement re-simulates (without refine_pareto, the top K only).
 */
static int
in_answer(const search_result *r, uint64_t index)
{
    for (uint32_t i = 0; i < r->ntop; i++)
        if (r->top[i].cand.index == index)
            return 1;
    for (uint32_t i = 0; i < r->npareto && r->refine_pareto; i++)
        if (r->pareto[i].cand.index == index)
            return 1;
    return 0;
}

typedef struct refine_ctx {
    const search_plan *plan;
    const search_result *seeds; /* the shard's seed points */
} refine_ctx;

/* Whether point p may be in the whole answer, by the shard's seed points (search_planner_refine). */
static int
may_answer(void *arg, const search_point *p)
{
    const refine_ctx *x = arg;
    search_result with;
    di_error err;
    int in;
    if (x->plan->is_seed[p->cand.index]) /* one of them */
        return in_answer(x->seeds, p->cand.index);
    search_result_init(&with, x->plan->sp);
    in = search_result_merge(&with, x->seeds, &err) != 0; /* cannot fail: the same space */
    search_result_add(&with, p);
    in = in || in_answer(&with, p->cand.index);
    search_result_fini(&with);
    return in;
}

uint32_t
search_planner_refine(search_planner *w, search_evaluator *ev, search_result *r)
{
    search_plan *pl = w->plan;
    const search_space *sp = pl->sp;
    search_result seeds;
    refine_ctx x;
    uint32_t n, nseed;
    if (!search_plan_seeded(pl))
        return search_result_refine(ev, r);
    nseed = (uint32_t)atomic_load(&pl->nseed);
    search_result_init(&seeds, sp);
    for (uint32_t j = 0; j < nseed; j++)
        if (in_shard(sp, &sp->candidates[pl->seed[j]]))
            search_result_add(&seeds, &pl->seed_point[j]);
    x.plan = pl;
    x.seeds = &seeds;
    n = search_result_refine_if(ev, r, may_answer, &x);
    search_result_fini(&seeds);
    return n;
}
