/*
 * tokens.h: the token file of distird --tokens (parsing only: no gRPC, no
 * I/O, so that a fuzz target can take it). One tenant per line,
 * "NAME SHA256 [admin]": a name of 1 to 63 characters, the hex SHA-256 of
 * the tenant's bearer token, and "admin" for tenants that may see paths;
 * '#' starts a comment; blank lines are skipped.
 */
#ifndef DISTIRD_TOKENS_H
#define DISTIRD_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

typedef struct srv_tenant {
    char name[64];
    di_hash token_hash;
    int admin;
} srv_tenant;

typedef struct srv_tenants srv_tenants;

/*
 * Parses text[0..len) (from the file `what`, for messages). Returns 0 with a
 * table of at least one tenant, or DI_EINVAL naming the line. Free with
 * srv_tenants_free.
 */
int srv_tenants_parse(const char *text, size_t len, const char *what, srv_tenants **out,
                      di_error *err);
void srv_tenants_free(srv_tenants *ts);
uint32_t srv_tenants_count(const srv_tenants *ts);
/* The tenant whose token hashes to h (compared in constant time), or NULL. */
const srv_tenant *srv_tenants_find(const srv_tenants *ts, const di_hash *h);

#endif
