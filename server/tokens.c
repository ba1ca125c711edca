/*
 * tokens.c: the token file's parser (tokens.h).
 */
#include "tokens.h"

#include <stdio.h>
#include <string.h>

struct srv_tenants {
    uint32_t n;
    srv_tenant *t;
};

/* Splits line into at most 4 blank-separated words; returns their count. */
static int
words(char *line, char **w)
{
    int n = 0;
    for (char *p = line; *p != '\0' && n < 4;) {
        while (*p == ' ' || *p == '\t' || *p == '\r')
            p++;
        if (*p == '\0')
            break;
        w[n++] = p;
        while (*p != '\0' && *p != ' ' && *p != '\t' && *p != '\r')
            p++;
        if (*p != '\0')
            *p++ = '\0';
    }
    return n;
}

int
srv_tenants_parse(const char *text, size_t len, const char *what, srv_tenants **out,
                  di_error *err)
{
    srv_tenants *ts = di_xcalloc(1, sizeof *ts);
    unsigned lineno = 0;
    *out = NULL;
    for (size_t pos = 0; pos < len;) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - text) : len;
        char line[512], *w[4];
        lineno++;
        if (end - pos >= sizeof line || memchr(text + pos, '\0', end - pos) != NULL) {
            srv_tenants_free(ts);
            return di_error_set(err, DI_EINVAL, "--tokens: '%s' line %u is too long or binary",
                                what, lineno);
        }
        memcpy(line, text + pos, end - pos);
        line[end - pos] = '\0';
        pos = end + 1;
        char *hash = strchr(line, '#');
        if (hash != NULL)
            *hash = '\0';
        int n = words(line, w);
        if (n == 0)
            continue;
        if (n < 2 || n > 3 || strlen(w[0]) >= sizeof ts->t[0].name || strlen(w[1]) != 64 ||
            (n == 3 && strcmp(w[2], "admin") != 0)) {
            srv_tenants_free(ts);
            return di_error_set(err, DI_EINVAL,
                                "--tokens: '%s' line %u: expected NAME SHA256-HEX [admin]", what,
                                lineno);
        }
        srv_tenant t;
        memset(&t, 0, sizeof t);
        snprintf(t.name, sizeof t.name, "%s", w[0]);
        if (di_hash_from_hex(w[1], &t.token_hash) != 0) {
            srv_tenants_free(ts);
            return di_error_set(err, DI_EINVAL,
                                "--tokens: '%s' line %u: the SHA-256 is not hexadecimal", what,
                                lineno);
        }
        t.admin = n == 3;
        for (uint32_t i = 0; i < ts->n; i++)
            if (strcmp(ts->t[i].name, t.name) == 0) {
                srv_tenants_free(ts);
                return di_error_set(err, DI_EINVAL, "--tokens: '%s' line %u: tenant '%s' again",
                                    what, lineno, t.name);
            }
        ts->t = di_xrealloc(ts->t, (ts->n + 1) * sizeof *ts->t);
        ts->t[ts->n++] = t;
    }
    if (ts->n == 0) {
        srv_tenants_free(ts);
        return di_error_set(err, DI_EINVAL, "--tokens: '%s' lists no tenant", what);
    }
    *out = ts;
    return 0;
}

void
srv_tenants_free(srv_tenants *ts)
{
    if (ts == NULL)
        return;
    di_free(ts->t);
    di_free(ts);
}

uint32_t
srv_tenants_count(const srv_tenants *ts)
{
    return ts ? ts->n : 0;
}

const srv_tenant *
srv_tenants_find(const srv_tenants *ts, const di_hash *h)
{
    const srv_tenant *found = NULL;
    for (uint32_t i = 0; ts != NULL && i < ts->n; i++) {
        uint8_t diff = 0; /* no early exit: timing says nothing about a token */
        for (size_t k = 0; k < sizeof h->b; k++)
            diff |= (uint8_t)(ts->t[i].token_hash.b[k] ^ h->b[k]);
        if (diff == 0)
            found = &ts->t[i];
    }
    return found;
}
