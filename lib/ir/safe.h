/*
 * safe.h: bounds-checked reads of a module that may be malformed, shared by
 * the code that must never trust one: the verifier (verify.c), the hash
 * (hash.c, which is defined even for modules the verifier rejects) and the
 * op labels of error messages (ops.c). A module decoded from protobuf has
 * passed index checks but nothing more; these helpers are the one place
 * where "is this id, string or array slice inside the module" is written.
 */
#ifndef DISTIR_IR_SAFE_H
#define DISTIR_IR_SAFE_H

#include <stdint.h>
#include <string.h>

#include "ir/ir.h"

/*
 * True when every array the module must have exists with its slot 0, its
 * count within its capacity for the string table, and the string table ends
 * in a NUL (so any in-range string id reads a terminated string).
 */
static inline int
ir_safe_arrays(const ir_module *m)
{
    return m->chars != NULL && m->nchar >= 1 && m->nchar <= m->cchar &&
           m->chars[m->nchar - 1] == '\0' && m->types != NULL && m->ntype >= 1 &&
           m->values != NULL && m->nvalue >= 1 && m->ops != NULL && m->nop >= 1 &&
           m->regions != NULL && m->nregion >= 1 && m->meshes != NULL && m->nmesh >= 1 &&
           m->attrs != NULL && m->nattr >= 1 && m->refs != NULL && m->nref >= 1 &&
           m->ints != NULL && m->nint >= 1 && (m->nfloat == 0 || m->floats != NULL) &&
           (m->ndata == 0 || m->data != NULL) && (m->ninit == 0 || m->inits != NULL);
}

/* True when the slice [off, off + n) lies within an array of `count` elements. */
static inline int
ir_safe_slice(uint64_t off, uint64_t n, uint64_t count)
{
    return off + n <= count;
}

/* String s, or "" when s is 0 or out of range (needs ir_safe_arrays). */
static inline const char *
ir_safe_str(const ir_module *m, ir_id s)
{
    return (s != 0 && s < m->nchar) ? m->chars + s : "";
}

/* True for a kind of the op table (not IR_OP_NONE). */
static inline int
ir_safe_kind(int kind)
{
    return kind > IR_OP_NONE && kind < IR_NOPKIND;
}

/*
 * ir_module_entry's choice ("main", else the first named function), for a
 * module that may be malformed (needs ir_safe_arrays).
 */
static inline ir_id
ir_safe_entry(const ir_module *m)
{
    ir_id first = 0;
    for (ir_id r = 1; r < m->nregion; r++) {
        const ir_region *reg = &m->regions[r];
        if (reg->parent != 0 || reg->name == 0 || reg->name >= m->nchar)
            continue;
        if (strcmp(m->chars + reg->name, "main") == 0)
            return r;
        if (first == 0)
            first = r;
    }
    return first;
}

#endif
