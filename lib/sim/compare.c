/*
 * compare.c: a candidate result against a baseline (compare.h).
 */
#include "sim/compare.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int
sim_compare_parse_limit(const char *text, int memory, double *rel, double *abs_value,
                        di_error *err)
{
    char *end;
    double v = strtod(text, &end);
    *rel = 0;
    *abs_value = 0;
    if (end == text || !isfinite(v) || v < 0)
        return di_error_set(err, DI_EINVAL, "'%s': expected a non-negative number with a unit",
                            text);
    if (strcmp(end, "%") == 0) {
        *rel = v / 100;
        return 0;
    }
    if (*end == '\0') { /* a bare number is a fraction */
        *rel = v;
        return 0;
    }
    static const struct {
        const char *unit;
        double scale;
        int memory;
    } units[] = {{"s", 1, 0},         {"ms", 1e-3, 0},          {"us", 1e-6, 0},
                 {"B", 1, 1},         {"KB", 1e3, 1},           {"MB", 1e6, 1},
                 {"GB", 1e9, 1},      {"KiB", 1024.0, 1},       {"MiB", 1048576.0, 1},
                 {"GiB", 1073741824.0, 1}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(end, units[i].unit) == 0) {
            if (units[i].memory != memory)
                break;
            *abs_value = v * units[i].scale;
            return 0;
        }
    return di_error_set(err, DI_EINVAL, "'%s': expected a percentage or %s", text,
                        memory ? "bytes (B, KB, MB, GB, KiB, MiB, GiB)" : "a time (s, ms, us)");
}

/* The device with the largest busy time (busy = 1, the one that sets the step) or peak memory. */
static const sim_device_result *
largest(const sim_result *r, int busy)
{
    const sim_device_result *best = NULL;
    for (uint32_t i = 0; i < r->ndevice; i++) {
        const sim_device_result *d = &r->devices[i];
        if (best == NULL || (busy ? d->busy_s > best->busy_s
                                  : d->peak_memory_bytes > best->peak_memory_bytes))
            best = d;
    }
    return best;
}

static void
metric(sim_compare_metric *m, const char *name, double base, double cand, double rel_limit,
       double abs_limit)
{
    m->name = name;
    m->base = base;
    m->cand = cand;
    m->delta = cand - base;
    m->rel = base != 0 ? m->delta / base : (m->delta != 0 ? INFINITY : 0);
    m->allowed = fmax(rel_limit * base, abs_limit);
    m->regressed = m->delta > m->allowed;
}

/* Shows text in out (truncated with "..." when longer, at a UTF-8 character's start). */
static void
shown(char *out, size_t n, const char *text)
{
    int k = snprintf(out, n, "%s", text);
    if (k >= 0 && (size_t)k >= n && n > 4) {
        size_t cut = n - 4;
        while (cut > 0 && ((unsigned char)out[cut] & 0xC0) == 0x80)
            cut--;
        memcpy(out + cut, "...", 4);
    }
}

static void
add_diff(sim_compare *c, const char *setting, const char *base, const char *cand)
{
    sim_compare_diff *d;
    if (c->ndiff == SIM_CMP_MAX_DIFF)
        return;
    d = &c->diff[c->ndiff++];
    d->setting = setting;
    shown(d->base, sizeof d->base, base);
    shown(d->cand, sizeof d->cand, cand);
}

/* The settings of b and c that differ, where both recorded them. */
static void
settings_differ(const sim_settings *b, const sim_settings *c, sim_compare *out)
{
    if (b->version[0] && c->version[0] && strcmp(b->version, c->version) != 0)
        add_diff(out, "simulator", b->version, c->version);
    if (b->hardware_hash[0] && c->hardware_hash[0]
            ? strcmp(b->hardware_hash, c->hardware_hash) != 0
            : b->hardware[0] && c->hardware[0] && strcmp(b->hardware, c->hardware) != 0) {
        char x[160], y[160];
        if (strcmp(b->hardware, c->hardware) != 0) {
            add_diff(out, "hardware", b->hardware, c->hardware);
        } else { /* the same name, other figures (a changed JSON file or preset) */
            snprintf(x, sizeof x, "%.100s (figures %.12s)", b->hardware, b->hardware_hash);
            snprintf(y, sizeof y, "%.100s (figures %.12s)", c->hardware, c->hardware_hash);
            add_diff(out, "hardware", x, y);
        }
    }
    if (b->strategy && c->strategy && strcmp(b->strategy, c->strategy) != 0)
        add_diff(out, "strategy", b->strategy, c->strategy);
    if (!b->have_options || !c->have_options)
        return;
    if (b->fuse != c->fuse)
        add_diff(out, "kernels", b->fuse ? "fused" : "eager", c->fuse ? "fused" : "eager");
    if (b->tf32 != c->tf32)
        add_diff(out, "math", b->tf32 ? "tf32" : "ieee", c->tf32 ? "tf32" : "ieee");
    if (b->no_overlap != c->no_overlap)
        add_diff(out, "overlap", b->no_overlap ? "off" : "on", c->no_overlap ? "off" : "on");
    if (b->no_grad_accum_fusion != c->no_grad_accum_fusion)
        add_diff(out, "grad_accum_fusion", b->no_grad_accum_fusion ? "off" : "on",
                 c->no_grad_accum_fusion ? "off" : "on");
    if (b->strict != c->strict)
        add_diff(out, "strict", b->strict ? "on" : "off", c->strict ? "on" : "off");
}

void
sim_compare_results(const sim_result *base, const sim_result *cand,
                    const sim_compare_limits *lim, sim_compare *out)
{
    memset(out, 0, sizeof *out);
    metric(&out->m[SIM_CMP_TIME], "step_time_s", base->step_time_s, cand->step_time_s,
           lim->time_rel, lim->time_abs_s);
    metric(&out->m[SIM_CMP_MEMORY], "peak_memory_bytes", (double)base->peak_memory_bytes,
           (double)cand->peak_memory_bytes, lim->memory_rel, (double)lim->memory_abs);
    out->regressed = out->m[SIM_CMP_TIME].regressed || out->m[SIM_CMP_MEMORY].regressed;
    settings_differ(&base->settings, &cand->settings, out);
    const sim_device_result *bt = largest(base, 1), *ct = largest(cand, 1);
    if (bt != NULL && ct != NULL) {
        out->d_compute_s = ct->compute_s - bt->compute_s;
        out->d_exposed_comm_s = ct->exposed_comm_s - bt->exposed_comm_s;
        out->d_idle_s = ct->idle_s - bt->idle_s;
    }
    out->d_flops = cand->flops - base->flops;
    const sim_device_result *bm = largest(base, 0), *cm = largest(cand, 0);
    for (int k = 0; k < SIM_NMEMCLASS && bm != NULL && cm != NULL; k++)
        out->d_by_class[k] = (int64_t)cm->peak_by_class[k] - (int64_t)bm->peak_by_class[k];
}

static void
signed_bytes(di_buf *b, double v)
{
    char t[32];
    sim_format_bytes(t, sizeof t, (uint64_t)fabs(v));
    di_buf_printf(b, "%s%s", v < 0 ? "-" : "+", t);
}

static void
signed_time(di_buf *b, double v)
{
    char t[32];
    sim_format_time(t, sizeof t, fabs(v));
    di_buf_printf(b, "%s%s", v < 0 ? "-" : "+", t);
}

void
sim_compare_text(const sim_compare *c, di_buf *out)
{
    for (int i = 0; i < SIM_CMP_NMETRIC; i++) {
        const sim_compare_metric *m = &c->m[i];
        int mem = i == SIM_CMP_MEMORY;
        di_buf_printf(out, "%-12s %s ", mem ? "peak memory" : "step time",
                      m->regressed ? "REGRESSED" : "ok       ");
        if (mem) {
            signed_bytes(out, m->delta);
            di_buf_printf(out, " (%+.2f%%; allowed ", m->rel * 100);
            signed_bytes(out, m->allowed);
        } else {
            signed_time(out, m->delta);
            di_buf_printf(out, " (%+.2f%%; allowed ", m->rel * 100);
            signed_time(out, m->allowed);
        }
        di_buf_puts(out, ")\n");
    }
    di_buf_puts(out, "where the time changed (busiest device): compute ");
    signed_time(out, c->d_compute_s);
    di_buf_puts(out, ", exposed communication ");
    signed_time(out, c->d_exposed_comm_s);
    di_buf_puts(out, ", idle ");
    signed_time(out, c->d_idle_s);
    di_buf_printf(out, "; FLOPs %+.4g\n", c->d_flops);
    di_buf_puts(out, "where the memory changed (peak device):");
    int any = 0;
    for (int k = 0; k < SIM_NMEMCLASS; k++)
        if (c->d_by_class[k] != 0) {
            di_buf_printf(out, " %s ", sim_memclass_name(k));
            signed_bytes(out, (double)c->d_by_class[k]);
            any = 1;
        }
    di_buf_puts(out, any ? "\n" : " no class changed\n");
    if (c->ndiff == 0)
        return;
    di_buf_puts(out, "warning: ");
    sim_compare_settings_text(c, out);
    di_buf_puts(out, "\n");
}

void
sim_compare_settings_text(const sim_compare *c, di_buf *out)
{
    di_buf_puts(out, "the results were simulated with different settings, which may explain "
                     "the difference rather than the module:");
    for (uint32_t i = 0; i < c->ndiff; i++)
        di_buf_printf(out, "%s %s '%s' (baseline) -> '%s'", i ? ";" : "", c->diff[i].setting,
                      c->diff[i].base, c->diff[i].cand);
}

void
sim_compare_json(const sim_compare *c, di_buf *out)
{
    di_buf_printf(out, "{\"regressed\":%s,\"metrics\":[", c->regressed ? "true" : "false");
    for (int i = 0; i < SIM_CMP_NMETRIC; i++) {
        const sim_compare_metric *m = &c->m[i];
        di_buf_printf(out, "%s{\"name\":\"%s\",\"baseline\":", i ? "," : "", m->name);
        di_buf_double(out, m->base);
        di_buf_puts(out, ",\"candidate\":");
        di_buf_double(out, m->cand);
        di_buf_puts(out, ",\"delta\":");
        di_buf_double(out, m->delta);
        di_buf_puts(out, ",\"relative\":");
        di_buf_double(out, isfinite(m->rel) ? m->rel : 1e308);
        di_buf_puts(out, ",\"allowed\":");
        di_buf_double(out, m->allowed);
        di_buf_printf(out, ",\"regressed\":%s}", m->regressed ? "true" : "false");
    }
    di_buf_puts(out, "],\"explanation\":{\"compute_s\":");
    di_buf_double(out, c->d_compute_s);
    di_buf_puts(out, ",\"exposed_comm_s\":");
    di_buf_double(out, c->d_exposed_comm_s);
    di_buf_puts(out, ",\"idle_s\":");
    di_buf_double(out, c->d_idle_s);
    di_buf_puts(out, ",\"flops\":");
    di_buf_double(out, c->d_flops);
    di_buf_puts(out, ",\"memory_by_class\":{");
    for (int k = 0; k < SIM_NMEMCLASS; k++)
        di_buf_printf(out, "%s\"%s\":%lld", k ? "," : "", sim_memclass_name(k),
                      (long long)c->d_by_class[k]);
    di_buf_puts(out, "}},\"settings_differ\":[");
    for (uint32_t i = 0; i < c->ndiff; i++) {
        di_buf_printf(out, "%s{\"setting\":\"%s\",\"baseline\":", i ? "," : "",
                      c->diff[i].setting);
        di_buf_json_str(out, c->diff[i].base);
        di_buf_puts(out, ",\"candidate\":");
        di_buf_json_str(out, c->diff[i].cand);
        di_buf_puts(out, "}");
    }
    di_buf_puts(out, "]}");
}
