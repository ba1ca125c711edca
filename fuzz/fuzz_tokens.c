/*
 * fuzz_tokens.c: libFuzzer target for distird's token file parser
 * (server/tokens.c, --tokens): any bytes either parse into a table of 1 or
 * more tenants whose names are non-empty and unique, in which every listed
 * token hash is found again, or fail with a code and a message. The fuzz
 * builds link the library only, so the parser's file is compiled in here;
 * it uses nothing but lib/base. The seed corpus in fuzz/corpus/fuzz_tokens
 * runs with the tests (fuzz/replay.c).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../server/tokens.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    srv_tenants *ts = NULL;
    di_error err;
    di_error_clear(&err);
    int rc = srv_tenants_parse((const char *)data, size, "fuzz", &ts, &err);
    if (rc != 0) {
        if (ts != NULL || err.code != rc || err.msg[0] == '\0')
            abort();
        return 0;
    }
    if (ts == NULL || srv_tenants_count(ts) == 0)
        abort();
    for (uint32_t i = 0; i < ts->n; i++) {
        if (ts->t[i].name[0] == '\0' || srv_tenants_find(ts, &ts->t[i].token_hash) == NULL)
            abort();
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(ts->t[i].name, ts->t[j].name) == 0)
                abort();
    }
    srv_tenants_free(ts);
    return 0;
}
