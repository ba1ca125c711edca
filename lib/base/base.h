/*
 * base.h: the small foundation every other part of distir stands on.
 *
 * Error codes come from one X-macro list (DI_ERROR_LIST) that generates the
 * enum, the names and the messages, in the manner of libuv's UV_ERRNO_MAP.
 * A function that can fail returns 0 or a negative code and fills a
 * caller-owned di_error with a message that says what failed and where.
 *
 * All heap memory goes through di_malloc/di_realloc/di_free so that tests can
 * make the Nth allocation fail (di_alloc_fail_after) and check that every
 * error path cleans up. Out-of-memory in code that cannot report it (the
 * di_x* functions, DI_GROW) jumps out of the innermost allocation scope
 * (di_scope_run), which frees what was allocated inside it and returns
 * DI_ENOMEM; outside any scope it aborts.
 *
 * Growable arrays are plain (pointer, count, capacity) triples grown with
 * DI_GROW; strings are built in a di_buf.
 */
#ifndef DISTIR_BASE_H
#define DISTIR_BASE_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define DISTIR_VERSION "0.1.0"

/* X(name, code, message): every code is negative and appears once. */
#define DI_ERROR_LIST(X)                                                       \
    X(NOMEM, -1, "out of memory")                                              \
    X(INVAL, -2, "invalid argument")                                           \
    X(PARSE, -3, "syntax error")                                               \
    X(VERIFY, -4, "invalid module")                                            \
    X(DECODE, -5, "malformed message")                                         \
    X(TOODEEP, -6, "message nested too deeply")                                \
    X(TOOBIG, -7, "input exceeds a limit")                                     \
    X(IO, -8, "input/output error")                                            \
    X(UNSUPPORTED, -9, "unsupported")                                          \
    X(NOTFOUND, -10, "not found")                                              \
    X(STRATEGY, -11, "impossible strategy")                                    \
    X(COST, -12, "cannot price operation")                                     \
    X(CANCELLED, -13, "cancelled")                                             \
    X(EXISTS, -14, "already exists")                                           \
    X(INTERNAL, -15, "internal error")                                         \
    X(CORRUPT, -16, "stored data is corrupt")

enum di_errcode {
    DI_OK = 0,
#define DI_ERROR_ENUM_(name, code, msg) DI_E##name = code,
    DI_ERROR_LIST(DI_ERROR_ENUM_)
#undef DI_ERROR_ENUM_
};

/* The constant name of a code ("DI_EPARSE") and its generic message. */
const char *di_errname(int code);
const char *di_strerror(int code);

/*
 * An error report. line and column are 1-based positions in text input, 0
 * when the input was not text. msg always holds a terminated string.
 */
#define DI_ERROR_MSG_MAX 1024

typedef struct di_error {
    int code;
    uint32_t line;
    uint32_t column;
    char msg[DI_ERROR_MSG_MAX];
} di_error;

void di_error_clear(di_error *err);
/* Sets code and a formatted message; returns code. err may be NULL. */
int di_error_set(di_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int di_error_setv(di_error *err, int code, const char *fmt, va_list ap);
/* As di_error_set, with a text position. */
int di_error_at(di_error *err, int code, uint32_t line, uint32_t column, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Prefixes the existing message with a formatted context: "ctx: msg". */
void di_error_prefix(di_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * Allocation. di_malloc and di_realloc return NULL on failure (which tests can
 * force); di_xmalloc/di_xrealloc/di_xcalloc/di_xstrdup call di_oom on failure
 * and are for code that has no error path of its own. di_oom leaves the
 * current allocation scope (see di_scope_run) or, outside any, aborts.
 * Memory from any of them is freed with di_free (plain free() is harmless
 * outside a scope, but inside one it leaves the block to be freed again if
 * the scope fails).
 */
void *di_malloc(size_t size);
void *di_calloc(size_t count, size_t size);
void *di_realloc(void *ptr, size_t size);
void di_free(void *ptr);
/* strdup and strndup on di_malloc: NULL on failure. */
char *di_strdup(const char *s);
char *di_strndup(const char *s, size_t n);
void *di_xmalloc(size_t size);
void *di_xcalloc(size_t count, size_t size);
void *di_xrealloc(void *ptr, size_t size);
char *di_xstrdup(const char *s);
_Noreturn void di_oom(void);
/*
 * Large zeroed arrays (the simulator's per-value and per-instance tables):
 * from 2 MiB up they are mapped straight from the kernel, advised to use
 * transparent huge pages (one fault per 2 MiB instead of per 4 KiB) and
 * grown with mremap (page tables move, bytes are not copied); below that
 * they are ordinary heap blocks. Growth zeroes the new tail. The caller
 * passes the current size back on every call. They call di_oom on
 * out-of-memory; allocation scopes track them like heap blocks.
 */
void *di_big_xalloc(size_t bytes);
void *di_big_xrealloc(void *p, size_t old_bytes, size_t new_bytes);
void di_big_free(void *p, size_t bytes);
/* Makes the allocation after the next n succeed-calls fail (n < 0: never). Tests only. */
void di_alloc_fail_after(long n);

/*
 * For a process that transforms and simulates module after module (distird,
 * the CLI, the benchmarks): glibc's mmap threshold at 32 MiB and its trim
 * threshold at 512 MiB, so that memory a run frees stays in the heap for the
 * next instead of going back to the kernel and being faulted in, zeroed,
 * again (a third of a GPT-3 175B transform with glibc's self-tuning
 * defaults). The price is a resident set near its high-water mark. Call it
 * first thing in main.
 */
void di_heap_keep(void);

/*
 * Allocation scopes, as Lua's protected calls: di_scope_run runs fn(arg) with
 * a scope active on the calling thread and returns what fn returns. Every
 * block allocated by the di_* functions while the scope is active, and not
 * freed with di_free (or di_big_free) before it ends, is tracked. If an
 * allocation fails in a di_x* function (or DI_GROW, or anything that calls
 * di_oom), control jumps back to di_scope_run, which frees every tracked
 * block and returns di_error_set(err, DI_ENOMEM, "out of memory"). When fn
 * returns, the tracked blocks are simply forgotten: whatever fn handed out
 * now belongs to its callers as usual.
 *
 * So fn must be written for the jump: it must hold no resource other than
 * di_* memory (files, locks, OpenSSL contexts) across an allocation, and must
 * not store a block allocated inside the scope where something outside the
 * scope keeps it (a global cache, a caller-owned object that survives the
 * failure) unless the caller resets that place after DI_ENOMEM. A realloc of
 * a block allocated outside the scope stays untracked (it still belongs to
 * its outside owner). Scopes nest by flattening: inside a scope, di_scope_run
 * just calls fn, and a failure jumps to the outermost one. The scope is
 * per thread (_Thread_local); a block must be freed on the thread whose
 * scope allocated it while that scope is active.
 */
int di_scope_run(int (*fn)(void *arg), void *arg, di_error *err);
/* True if an allocation scope is active on this thread. */
int di_scope_active(void);
/*
 * Hands a block allocated before the scope to the current scope (no-op
 * outside one): freed if the scope fails. big_bytes is the size given to
 * di_big_* for a di_big block, 0 for a di_malloc block. For tables that a
 * scoped function takes over from a caller-owned cache.
 */
void di_scope_adopt(void *p, size_t big_bytes);

/*
 * Cooperative cancellation for work that takes no options of its own (the
 * strategy transforms): di_cancel_watch makes this thread's long loops poll
 * *flag (NULL: none) and returns the flag watched before, to restore;
 * di_cancel_requested is true once the watched flag is set. A loop that sees
 * it returns DI_ECANCELLED. The simulator polls sim_options.cancel instead.
 */
const atomic_int *di_cancel_watch(const atomic_int *flag);
int di_cancel_requested(void);

/*
 * Grows the array *pp (element size sizeof(**pp)) so that it holds at least
 * need elements, doubling its capacity *capp. Calls di_oom on out-of-memory.
 */
#define DI_GROW(pp, capp, need)                                                                    \
    do {                                                                                           \
        if ((size_t)(need) > (size_t)*(capp)) {                                                    \
            size_t di_grow_cap_ = *(capp) ? (size_t)*(capp) : 8;                                   \
            while (di_grow_cap_ < (size_t)(need))                                                  \
                di_grow_cap_ *= 2;                                                                 \
            *(pp) = di_xrealloc(*(pp), di_grow_cap_ * sizeof(**(pp)));                             \
            *(capp) = di_grow_cap_;                                                                \
        }                                                                                          \
    } while (0)

/* A growable byte string, always terminated. */
typedef struct di_buf {
    char *data;
    size_t len;
    size_t cap;
} di_buf;

void di_buf_init(di_buf *b);
void di_buf_fini(di_buf *b);
void di_buf_reset(di_buf *b);
void di_buf_put(di_buf *b, const void *data, size_t len);
void di_buf_puts(di_buf *b, const char *s);
void di_buf_putc(di_buf *b, char c);
void di_buf_printf(di_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s as a JSON string literal with quotes and escapes. */
void di_buf_json_str(di_buf *b, const char *s);
/* Appends a double in the shortest form that reads back to the same bits. */
void di_buf_double(di_buf *b, double v);
/* Transfers ownership of the data to the caller (free with di_free). */
char *di_buf_take(di_buf *b, size_t *len);

/* Reads a whole file; the caller frees *data with di_free. Limit: max bytes. */
int di_read_file(const char *path, size_t max, uint8_t **data, size_t *len, di_error *err);
/*
 * A whole text file (at most max bytes), NUL-terminated; the caller frees it
 * with di_free. NULL with err set, its message prefixed by what (an option
 * name such as "--tls-cert").
 */
char *di_read_text(const char *path, size_t max, const char *what, di_error *err);
/* Writes a whole file atomically (temporary file, fsync, rename). */
int di_write_file(const char *path, const void *data, size_t len, di_error *err);

/* True if s[0..len) is valid UTF-8 (no overlongs, no surrogates). */
int di_utf8_valid(const char *s, size_t len);

/* SHA-256 (OpenSSL libcrypto). */
typedef struct di_sha256 {
    void *ctx;
} di_sha256;
typedef struct di_hash {
    uint8_t b[32];
} di_hash;

void di_sha256_init(di_sha256 *s);
void di_sha256_update(di_sha256 *s, const void *data, size_t len);
void di_sha256_u64(di_sha256 *s, uint64_t v);
void di_sha256_final(di_sha256 *s, di_hash *out);
void di_sha256_once(const void *data, size_t len, di_hash *out);
/* Writes 64 lowercase hex digits plus a terminator into out[65]. */
void di_hash_hex(const di_hash *h, char out[65]);
int di_hash_from_hex(const char *hex, di_hash *out);

/*
 * SipHash-1-3 of p[0..n) under the 128-bit key (k0, k1): a keyed hash for
 * in-memory tables that hostile input must not be able to flood. Never part
 * of a persistent or canonical hash.
 */
uint64_t di_siphash(const void *p, size_t n, uint64_t k0, uint64_t k1);
/* 16 random bytes for hash keys (getrandom; a fixed key if it is unavailable). */
void di_hash_key(uint64_t key[2]);

/*
 * splitmix64's finalizer: a fixed bijective scramble of 64 bits, for
 * unkeyed in-memory tables over trusted keys and for deterministic streams.
 */
static inline uint64_t
di_mix64(uint64_t x)
{
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* One splitmix64 output for state x: di_mix64 of x plus the golden-ratio increment. */
static inline uint64_t
di_splitmix64(uint64_t x)
{
    return di_mix64(x + 0x9e3779b97f4a7c15ull);
}

/* The low n (<= 8) bytes of v at p, least significant first (every format's byte order here). */
static inline void
di_store_le(uint8_t *p, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* The n (<= 8) little-endian bytes at p as an integer (di_store_le's inverse). */
static inline uint64_t
di_load_le(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* A double's IEEE-754 bits, and back: exact round trips for hashing, keys and formats. */
static inline uint64_t
di_double_bits(double d)
{
    uint64_t b;
    memcpy(&b, &d, sizeof b);
    return b;
}

static inline double
di_bits_double(uint64_t b)
{
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
}

/* Checked size arithmetic: returns 0 and stores the product, or -1 on overflow. */
int di_mul_u64(uint64_t a, uint64_t b, uint64_t *out);

#endif
