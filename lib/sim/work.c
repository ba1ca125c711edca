/*
 * work.c: the simulation workspace (sim.h). The large tables of a
 * simulation (instances, per-value tables, memory events and their sort
 * scratch) move into a run from the workspace and back out of it at the
 * end, so that a long-lived caller maps and faults them once.
 */
#include "sim/sim_int.h"

#include <stdlib.h>

void
sim_workspace_release(sim_workspace *w)
{
    di_big_free(w->inst, w->cinst * sizeof *w->inst);
    di_big_free(w->vbase, w->cvalue * sizeof *w->vbase);
    di_big_free(w->vrep, w->cvalue * sizeof *w->vrep);
    di_big_free(w->vuni, w->cvalue);
    di_big_free(w->vclass, w->cvalue);
    di_big_free(w->ev, w->cev * sizeof *w->ev);
    di_big_free(w->tmp, w->ctmp * sizeof *w->tmp);
    di_free(w->count);
    memset(w, 0, sizeof *w);
}

sim_workspace *
sim_workspace_new(void)
{
    return di_xcalloc(1, sizeof(sim_workspace));
}

void
sim_workspace_free(sim_workspace *ws)
{
    if (ws == NULL)
        return;
    sim_workspace_release(ws);
    di_free(ws);
}

size_t
sim_workspace_bytes(const sim_workspace *w)
{
    return w->cinst * sizeof *w->inst + (size_t)w->cvalue * (2 * sizeof(uint32_t) + 2) +
           (w->cev + w->ctmp) * sizeof(memev) + (w->count ? SORT_COUNTERS * sizeof *w->count : 0);
}

void
sim_workspace_trim(sim_workspace *ws, size_t max_bytes)
{
    if (ws && sim_workspace_bytes(ws) > max_bytes)
        sim_workspace_release(ws);
}

/* Moves the tables of ws (or none) into s. */
void
sim_tables_take(sim *s, sim_workspace *ws)
{
    if (ws == NULL)
        return;
    assert(s->inst == NULL && s->vbase == NULL && s->ev == NULL); /* taken once */
    s->inst = ws->inst, s->cinst = ws->cinst;
    s->cvalue = ws->cvalue;
    s->vbase = ws->vbase, s->vrep = ws->vrep, s->vuni = ws->vuni, s->vclass = ws->vclass;
    s->ev = ws->ev, s->cev = ws->cev;
    s->tmp = ws->tmp, s->ctmp = ws->ctmp;
    s->count = ws->count;
    memset(ws, 0, sizeof *ws);
}

/* Moves the tables of s back into ws, or frees them. */
void
sim_tables_give(sim *s, sim_workspace *ws)
{
    sim_workspace w;
    w.inst = s->inst, w.cinst = s->cinst;
    w.cvalue = s->cvalue;
    w.vbase = s->vbase, w.vrep = s->vrep, w.vuni = s->vuni, w.vclass = s->vclass;
    w.ev = s->ev, w.cev = s->cev;
    w.tmp = s->tmp, w.ctmp = s->ctmp;
    w.count = s->count;
    if (ws)
        *ws = w;
    else
        sim_workspace_release(&w);
}
