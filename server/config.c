/*
 * config.c: the settings table of config.h put to work. Each row becomes a
 * descriptor (name, type, field offset, default, bounds, help); setting a
 * value from a flag or a file line goes through srv_config_set, the one place
 * that validates.
 */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

typedef struct config_desc {
    const char *name;
    srv_config_type type;
    const char *meta; /* the value's name in --help */
    size_t offset;
    const char *dflt;
    int64_t min, max;
    const char *help;
} config_desc;

static const config_desc config_table[] = {
#define SRV_CONFIG_DESC_(name, field, type, meta, dflt, min, max, help)                            \
    {name, SRV_CONFIG_##type, meta, offsetof(srv_config, field), dflt, min, max, help},
    SRV_CONFIG_LIST(SRV_CONFIG_DESC_)
#undef SRV_CONFIG_DESC_
};
#define NCONFIG (sizeof config_table / sizeof config_table[0])

/* Matches a setting name, treating '_' and '-' alike. */
static const config_desc *
config_find(const char *name, size_t len)
{
    for (size_t i = 0; i < NCONFIG; i++) {
        const char *n = config_table[i].name;
        if (strlen(n) != len)
            continue;
        size_t j = 0;
        for (; j < len; j++) {
            char a = name[j] == '_' ? '-' : name[j];
            if (a != n[j])
                break;
        }
        if (j == len)
            return &config_table[i];
    }
    return NULL;
}

static int
config_apply(srv_config *c, const config_desc *d, const char *value, di_error *err)
{
    char *p = (char *)c + d->offset;
    switch (d->type) {
    case SRV_CONFIG_STRING: {
        char **s = (char **)(void *)p;
        di_free(*s);
        *s = strdup(value);
        if (*s == NULL)
            di_oom();
        return 0;
    }
    case SRV_CONFIG_INT: {
        char *end;
        errno = 0;
        long long v = strtoll(value, &end, 10);
        if (value[0] == '\0' || *end != '\0' || errno != 0)
            return di_error_set(err, DI_EINVAL, "setting '%s': '%s' is not an integer", d->name,
                                value);
        if (v < d->min || v > d->max)
            return di_error_set(err, DI_EINVAL, "setting '%s': %lld is out of range [%lld, %lld]",
                                d->name, v, (long long)d->min, (long long)d->max);
        *(int64_t *)(void *)p = v;
        return 0;
    }
    case SRV_CONFIG_LEVEL: {
        int lv = srv_log_level_parse(value);
        if (lv < 0)
            return di_error_set(err, DI_EINVAL,
                                "setting '%s': '%s' is not one of debug, info, warn, error",
                                d->name, value);
        *(int64_t *)(void *)p = lv;
        return 0;
    }
    }
    return di_error_set(err, DI_EINTERNAL, "setting '%s' has an unknown type", d->name);
}

void
srv_config_init(srv_config *c)
{
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < NCONFIG; i++) {
        di_error err;
        if (config_apply(c, &config_table[i], config_table[i].dflt, &err) != 0)
            abort(); /* a default that does not validate is a broken table */
    }
}

void
srv_config_fini(srv_config *c)
{
    for (size_t i = 0; i < NCONFIG; i++) {
        if (config_table[i].type == SRV_CONFIG_STRING) {
            char **s = (char **)(void *)((char *)c + config_table[i].offset);
            di_free(*s);
            *s = NULL;
        }
    }
    di_free(c->config);
    c->config = NULL;
}

int
srv_config_set(srv_config *c, const char *name, const char *value, di_error *err)
{
    const config_desc *d = config_find(name, strlen(name));
    if (d == NULL)
        return di_error_set(err, DI_EINVAL, "unknown setting '%s'", name);
    return config_apply(c, d, value, err);
}

static int
is_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\r';
}

static int
srv_config_line_error(di_error *err, const char *origin, uint32_t line, const char *what)
{
    di_error_set(err, DI_EINVAL, "%s:%u: %s", origin, line, what);
    if (err != NULL)
        err->line = line;
    return DI_EINVAL;
}

int
srv_config_load_text(srv_config *c, const char *text, const char *origin, di_error *err)
{
    const char *p = text;
    uint32_t line = 0;
    while (*p) {
        const char *eol = strchr(p, '\n');
        const char *end = eol ? eol : p + strlen(p);
        const char *k, *kend, *v, *vend;
        line++;
        k = p;
        while (k < end && is_space(*k))
            k++;
        p = eol ? eol + 1 : end;
        if (k == end || *k == '#')
            continue;
        kend = k;
        while (kend < end && !is_space(*kend) && *kend != '=')
            kend++;
        v = kend;
        while (v < end && is_space(*v))
            v++;
        if (v < end && *v == '=') {
            v++;
            while (v < end && is_space(*v))
                v++;
        }
        vend = end;
        if (v < end && *v == '"') {
            /* A double-quoted value keeps spaces and '#'; a comment may follow it. */
            const char *q = memchr(v + 1, '"', (size_t)(end - v - 1));
            if (q == NULL)
                return srv_config_line_error(err, origin, line, "unterminated quote");
            v++;
            vend = q;
        } else {
            /* '#' after a space starts a comment. */
            for (const char *h = v; h < end; h++) {
                if (*h == '#' && (h == v || is_space(h[-1]))) {
                    vend = h;
                    break;
                }
            }
            while (vend > v && is_space(vend[-1]))
                vend--;
        }
        const config_desc *d = config_find(k, (size_t)(kend - k));
        if (d == NULL) {
            di_error_set(err, DI_EINVAL, "%s:%u: unknown setting '%.*s'", origin, line,
                         (int)(kend - k), k);
            if (err != NULL)
                err->line = line;
            return DI_EINVAL;
        }
        char *value = di_strndup(v, (size_t)(vend - v));
        if (value == NULL)
            di_oom();
        int rc = config_apply(c, d, value, err);
        di_free(value);
        if (rc != 0) {
            di_error_prefix(err, "%s:%u", origin, line);
            err->line = line;
            return rc;
        }
    }
    return 0;
}

int
srv_config_load_file(srv_config *c, const char *path, di_error *err)
{
    uint8_t *data;
    size_t len;
    int rc = di_read_file(path, 1u << 20, &data, &len, err);
    if (rc != 0)
        return rc;
    char *text = di_xmalloc(len + 1);
    memcpy(text, data, len);
    text[len] = '\0';
    di_free(data);
    if (strlen(text) != len) {
        di_free(text);
        return di_error_set(err, DI_EINVAL, "%s: config file contains a NUL byte", path);
    }
    rc = srv_config_load_text(c, text, path, err);
    di_free(text);
    return rc;
}

/* Matches argv[*i] against --name / --name=VALUE; returns the value or NULL. */
static int
arg_split(int argc, char **argv, int *i, const char **name, size_t *namelen, const char **value,
          di_error *err)
{
    const char *a = argv[*i];
    if (strncmp(a, "--", 2) != 0)
        return di_error_set(err, DI_EINVAL, "unexpected argument '%s'; see --help", a);
    a += 2;
    const char *eq = strchr(a, '=');
    *name = a;
    if (eq != NULL) {
        *namelen = (size_t)(eq - a);
        *value = eq + 1;
        return 0;
    }
    *namelen = strlen(a);
    if (*i + 1 >= argc)
        return di_error_set(err, DI_EINVAL, "option '--%s' needs a value", a);
    *value = argv[++*i];
    return 0;
}

int
srv_config_parse_args(srv_config *c, int argc, char **argv, di_error *err)
{
    /* Pass 1: --help, --version and --config, so the file comes before the flags. */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return SRV_CONFIG_HELP;
        if (strcmp(argv[i], "--version") == 0)
            return SRV_CONFIG_VERSION;
    }
    for (int i = 1; i < argc; i++) {
        const char *name, *value;
        size_t len;
        int rc = arg_split(argc, argv, &i, &name, &len, &value, err);
        if (rc != 0)
            return rc;
        if (len == 6 && strncmp(name, "config", 6) == 0) {
            di_free(c->config);
            c->config = di_strdup(value);
            if (c->config == NULL)
                di_oom();
        }
    }
    if (c->config != NULL) {
        int rc = srv_config_load_file(c, c->config, err);
        if (rc != 0)
            return rc;
    }
    for (int i = 1; i < argc; i++) {
        const char *name, *value;
        size_t len;
        int rc = arg_split(argc, argv, &i, &name, &len, &value, err);
        if (rc != 0)
            return rc;
        if (len == 6 && strncmp(name, "config", 6) == 0)
            continue;
        const config_desc *d = config_find(name, len);
        if (d == NULL)
            return di_error_set(err, DI_EINVAL, "unknown option '--%.*s'; see --help", (int)len,
                                name);
        rc = config_apply(c, d, value, err);
        if (rc != 0)
            return rc;
    }
    return 0;
}

void
srv_config_usage(FILE *f)
{
    fprintf(f, "usage: distird [--config FILE] [--NAME VALUE ...]\n\n"
               "distird serves the distir cost model over gRPC (service distir.v1.CostModel)\n"
               "with a SQLite result cache. Options (also valid as \"NAME VALUE\" lines in the\n"
               "config file; flags override the file):\n\n");
    fprintf(f, "  --%-22s %s\n", "config FILE", "read settings from FILE (default: none)");
    for (size_t i = 0; i < NCONFIG; i++) {
        const config_desc *d = &config_table[i];
        char flag[64];
        snprintf(flag, sizeof flag, "%s %s", d->name, d->meta);
        fprintf(f, "  --%-22s %s\n  %-24s (default: %s)\n", flag, d->help, "",
                d->dflt[0] ? d->dflt : "\"\"");
    }
    fprintf(f, "\nSignals: SIGTERM/SIGINT drain and exit; SIGHUP reopens the log file and\n"
               "reloads --tokens and the TLS files.\n");
}

void
srv_config_dump(const srv_config *c, di_buf *out)
{
    for (size_t i = 0; i < NCONFIG; i++) {
        const config_desc *d = &config_table[i];
        const char *p = (const char *)c + d->offset;
        char q[512];
        if (i > 0)
            di_buf_putc(out, ' ');
        switch (d->type) {
        case SRV_CONFIG_STRING:
            di_buf_printf(out, "%s=%s", d->name,
                          srv_log_quote(*(char *const *)(const void *)p, q, sizeof q));
            break;
        case SRV_CONFIG_INT:
            di_buf_printf(out, "%s=%lld", d->name, (long long)*(const int64_t *)(const void *)p);
            break;
        case SRV_CONFIG_LEVEL:
            di_buf_printf(out, "%s=%s", d->name,
                          srv_log_level_name((int)*(const int64_t *)(const void *)p));
            break;
        }
    }
}
