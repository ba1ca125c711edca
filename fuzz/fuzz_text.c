/*
 * fuzz_text.c: libFuzzer target for the IR text parser. Any input may be
 * rejected, but never with a crash or a leak; an input that parses must
 * print to text that parses again, and that reparsed module must print to
 * exactly the same text (print(parse(x)) == x for printed x). A broken
 * invariant aborts so that the fuzzer records the input.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ir_module *m = NULL, *m2 = NULL;
    di_error err;
    char *text, *text2;
    size_t len, len2;

    if (ir_parse((const char *)data, size, &m, &err) != 0) {
        if (m != NULL || err.code != DI_EPARSE || err.line == 0 || err.column == 0) {
            fprintf(stderr, "fuzz_text: bad error report: %s\n", err.msg);
            abort();
        }
        return 0;
    }
    text = ir_print(m, &len);
    if (ir_parse(text, len, &m2, &err) != 0) {
        fprintf(stderr, "fuzz_text: printed text does not parse: %s\n%s\n", err.msg, text);
        abort();
    }
    text2 = ir_print(m2, &len2);
    if (len != len2 || memcmp(text, text2, len) != 0) {
        fprintf(stderr, "fuzz_text: printing is not stable:\n%s\n---\n%s\n", text, text2);
        abort();
    }
    di_free(text);
    di_free(text2);
    ir_module_free(m);
    ir_module_free(m2);
    return 0;
}
