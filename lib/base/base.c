/*
 * base.c: errors, the swappable allocator, byte strings, whole-file I/O,
 * UTF-8 validation and SHA-256. See base.h for the contracts.
 */
#define _POSIX_C_SOURCE 200809L
#include "base.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <math.h>
#include <setjmp.h>
#include <openssl/evp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <threads.h>
#include <unistd.h>

const char *
di_errname(int code)
{
    switch (code) {
    case DI_OK:
        return "DI_OK";
#define DI_ERROR_NAME_(name, c, msg)                                                               \
    case c:                                                                                        \
        return "DI_E" #name;
        DI_ERROR_LIST(DI_ERROR_NAME_)
#undef DI_ERROR_NAME_
    }
    return "DI_EUNKNOWN";
}

const char *
di_strerror(int code)
{
    switch (code) {
    case DI_OK:
        return "success";
#define DI_ERROR_MSG_(name, c, msg)                                                                \
    case c:                                                                                        \
        return msg;
        DI_ERROR_LIST(DI_ERROR_MSG_)
#undef DI_ERROR_MSG_
    }
    return "unknown error";
}

void
di_error_clear(di_error *err)
{
    if (err == NULL)
        return;
    err->code = 0;
    err->line = 0;
    err->column = 0;
    err->msg[0] = '\0';
}

int
di_error_setv(di_error *err, int code, const char *fmt, va_list ap)
{
    if (err == NULL)
        return code;
    err->code = code;
    err->line = 0;
    err->column = 0;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    return code;
}

int
di_error_set(di_error *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    di_error_setv(err, code, fmt, ap);
    va_end(ap);
    return code;
}

int
di_error_at(di_error *err, int code, uint32_t line, uint32_t column, const char *fmt, ...)
{
    va_list ap;
    char tmp[DI_ERROR_MSG_MAX];
    if (err == NULL)
        return code;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    err->code = code;
    err->line = line;
    err->column = column;
    snprintf(err->msg, sizeof err->msg, "%u:%u: %s", line, column, tmp);
    return code;
}

void
di_error_prefix(di_error *err, const char *fmt, ...)
{
    char pre[256], tmp[DI_ERROR_MSG_MAX];
    va_list ap;
    if (err == NULL)
        return;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    snprintf(tmp, sizeof tmp, "%s: %s", pre, err->msg);
    memcpy(err->msg, tmp, sizeof tmp);
}

#if defined(__SANITIZE_ADDRESS__)
/* AddressSanitizer checks heap blocks, not mappings: keep every table on the heap. */
#define DI_BIG_MIN SIZE_MAX
#else
#define DI_BIG_MIN ((size_t)2 << 20)
#endif

static size_t
big_len(size_t bytes)
{
    return (bytes + 4095) & ~(size_t)4095;
}

static void
big_advise(void *p, size_t len)
{
#ifdef MADV_HUGEPAGE
    (void)madvise(p, len, MADV_HUGEPAGE); /* advice only: without THP it changes nothing */
#else
    (void)p;
    (void)len;
#endif
}

/*
 * Fault injection: when fail_countdown reaches zero the allocation fails.
 * A negative value disables it. It is an atomic so that threaded callers stay
 * well-defined; only tests set it.
 */
static _Atomic long fail_countdown = -1;

void
di_alloc_fail_after(long n)
{
    atomic_store(&fail_countdown, n);
}

static int
alloc_should_fail(void)
{
    long n = atomic_load_explicit(&fail_countdown, memory_order_relaxed);
    if (n < 0)
        return 0;
    return atomic_fetch_sub(&fail_countdown, 1) == 0;
}

/*
 * An allocation scope (see base.h): the blocks allocated inside it and not yet
 * freed, in an open-addressing hash set keyed by address (linear probing,
 * deletion by backward shift, at most half full). A set rather than a header
 * on every block keeps di_free a plain free() outside scopes, so that memory
 * a library frees with free() and memory we free with di_free stay
 * interchangeable. The set itself is allocated with plain malloc: it is not
 * subject to fault injection and never tracked.
 */
typedef struct scope_slot {
    void *p;    /* NULL: empty */
    size_t map; /* bytes mapped for a mapped di_big block, 0 for a heap block */
} scope_slot;

typedef struct di_scope {
    jmp_buf jump;
    scope_slot *slot;
    size_t cap; /* a power of two, or 0 */
    size_t n;
} di_scope;

static _Thread_local di_scope *cur_scope;
/* The flag di_cancel_watch set on this thread (restored when a scope fails out of a watch). */
static _Thread_local const atomic_int *cur_cancel;

/*
 * The set of the thread's last scope, emptied, for the next one: a scope per
 * simulation of a few hundred blocks would otherwise make and free a table
 * each time (and freeing it at the top of the heap lets malloc trim and
 * fault the heap again on every run). Kept up to SCOPE_SPARE_MAX slots; a
 * thread-specific key frees it when the thread exits.
 */
#define SCOPE_SPARE_MAX ((size_t)1 << 16)
static _Thread_local scope_slot *spare_slot;
static _Thread_local size_t spare_cap;
static tss_t spare_key;
static once_flag spare_once = ONCE_FLAG_INIT;

static void
spare_key_create(void)
{
    if (tss_create(&spare_key, free) != thrd_success)
        abort();
}

/* Ends the use of a scope's set: kept as the spare if small enough. */
static void
scope_release_set(scope_slot *slot, size_t cap)
{
    if (slot == NULL)
        return;
    if (cap > SCOPE_SPARE_MAX || spare_slot != NULL) {
        free(slot);
        return;
    }
    memset(slot, 0, cap * sizeof *slot);
    call_once(&spare_once, spare_key_create);
    spare_slot = slot;
    spare_cap = cap;
    (void)tss_set(spare_key, slot);
}

static size_t
scope_hash(const di_scope *s, const void *p)
{
    return (size_t)(((uint64_t)(uintptr_t)p >> 4) * 0x9e3779b97f4a7c15ull >> 32) & (s->cap - 1);
}

/* Makes room for one more block; -1 if the set cannot grow. */
static int
scope_reserve(di_scope *s)
{
    scope_slot *old = s->slot, *slot;
    size_t ocap = s->cap, cap;
    if (2 * (s->n + 1) <= s->cap)
        return 0;
    cap = s->cap ? 2 * s->cap : 256;
    slot = calloc(cap, sizeof *slot);
    if (slot == NULL)
        return -1;
    s->slot = slot;
    s->cap = cap;
    for (size_t i = 0; i < ocap; i++) {
        size_t h;
        if (old[i].p == NULL)
            continue;
        for (h = scope_hash(s, old[i].p); slot[h].p; h = (h + 1) & (cap - 1))
            ;
        slot[h] = old[i];
    }
    free(old);
    return 0;
}

/* Adds p (never present); scope_reserve must have made room. */
static void
scope_add(di_scope *s, void *p, size_t map)
{
    size_t h = scope_hash(s, p);
    assert(2 * (s->n + 1) <= s->cap);
    while (s->slot[h].p)
        h = (h + 1) & (s->cap - 1);
    s->slot[h].p = p;
    s->slot[h].map = map;
    s->n++;
}

/* Removes p; returns 1 if it was tracked. */
static int
scope_remove(di_scope *s, const void *p)
{
    size_t h, j, mask = s->cap - 1;
    if (s->n == 0)
        return 0;
    for (h = scope_hash(s, p); s->slot[h].p != p; h = (h + 1) & mask)
        if (s->slot[h].p == NULL)
            return 0;
    /* Backward shift: pull later members of the probe run into the hole. */
    for (j = (h + 1) & mask; s->slot[j].p; j = (j + 1) & mask) {
        size_t home = scope_hash(s, s->slot[j].p);
        if (((j - home) & mask) >= ((j - h) & mask)) {
            s->slot[h] = s->slot[j];
            h = j;
        }
    }
    s->slot[h].p = NULL;
    s->n--;
    return 1;
}

int
di_scope_active(void)
{
    return cur_scope != NULL;
}

const atomic_int *
di_cancel_watch(const atomic_int *flag)
{
    const atomic_int *prev = cur_cancel;
    cur_cancel = flag;
    return prev;
}

int
di_cancel_requested(void)
{
    return cur_cancel != NULL && atomic_load_explicit(cur_cancel, memory_order_relaxed) != 0;
}

void
di_scope_adopt(void *p, size_t big_bytes)
{
    di_scope *s = cur_scope;
    if (s == NULL || p == NULL)
        return;
    if (scope_reserve(s) != 0)
        di_oom();
    scope_add(s, p, big_bytes >= DI_BIG_MIN ? big_len(big_bytes) : 0);
}

int
di_scope_run(int (*fn)(void *arg), void *arg, di_error *err)
{
    di_scope s;
    int rc;
    const atomic_int *cancel = cur_cancel; /* a failure may jump out of a watch */
    if (cur_scope)
        return fn(arg); /* nested: a failure goes to the outermost scope */
    s.slot = spare_slot;
    s.cap = spare_cap;
    s.n = 0;
    spare_slot = NULL;
    spare_cap = 0;
    if (s.slot)
        (void)tss_set(spare_key, NULL);
    cur_scope = &s;
    if (setjmp(s.jump) == 0) {
        rc = fn(arg);
        cur_scope = NULL;
        scope_release_set(s.slot, s.cap);
        return rc;
    }
    cur_scope = NULL;
    cur_cancel = cancel;
    for (size_t i = 0; i < s.cap; i++) {
        if (s.slot[i].p == NULL)
            continue;
        if (s.slot[i].map)
            munmap(s.slot[i].p, s.slot[i].map);
        else
            free(s.slot[i].p);
    }
    scope_release_set(s.slot, s.cap);
    return di_error_set(err, DI_ENOMEM, "out of memory");
}

void *
di_malloc(size_t size)
{
    di_scope *s = cur_scope;
    void *p;
    if (alloc_should_fail() || (s && scope_reserve(s) != 0))
        return NULL;
    p = malloc(size ? size : 1);
    if (p && s)
        scope_add(s, p, 0);
    return p;
}

void *
di_calloc(size_t count, size_t size)
{
    di_scope *s = cur_scope;
    void *p;
    if (alloc_should_fail() || (s && scope_reserve(s) != 0))
        return NULL;
    p = calloc(count ? count : 1, size ? size : 1);
    if (p && s)
        scope_add(s, p, 0);
    return p;
}

void *
di_realloc(void *ptr, size_t size)
{
    di_scope *s = cur_scope;
    void *p;
    int tracked;
    if (alloc_should_fail() || (s && scope_reserve(s) != 0))
        return NULL;
    /* Untracked while realloc runs: it may free ptr. Re-added if it fails. */
    tracked = s && (ptr == NULL || scope_remove(s, ptr));
    p = realloc(ptr, size ? size : 1);
    if (tracked && (p || ptr))
        scope_add(s, p ? p : ptr, 0);
    return p;
}

void
di_free(void *ptr)
{
    if (cur_scope && ptr)
        scope_remove(cur_scope, ptr);
    free(ptr);
}

_Noreturn void
di_oom(void)
{
    if (cur_scope)
        longjmp(cur_scope->jump, 1);
    fputs("distir: out of memory\n", stderr);
    abort();
}

void *
di_xmalloc(size_t size)
{
    void *p = di_malloc(size);
    if (p == NULL)
        di_oom();
    return p;
}

void *
di_xcalloc(size_t count, size_t size)
{
    void *p = di_calloc(count, size);
    if (p == NULL)
        di_oom();
    return p;
}

void *
di_xrealloc(void *ptr, size_t size)
{
    void *p = di_realloc(ptr, size);
    if (p == NULL)
        di_oom();
    return p;
}

void *
di_big_xalloc(size_t bytes)
{
    di_scope *s = cur_scope;
    void *p;
    if (bytes < DI_BIG_MIN)
        return di_xcalloc(1, bytes ? bytes : 1);
    if (alloc_should_fail() || (s && scope_reserve(s) != 0))
        di_oom();
    p = mmap(NULL, big_len(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        di_oom();
    big_advise(p, big_len(bytes));
    if (s)
        scope_add(s, p, big_len(bytes));
    return p;
}

void *
di_big_xrealloc(void *p, size_t old_bytes, size_t new_bytes)
{
    di_scope *s = cur_scope;
    void *q;
    if (p == NULL)
        return di_big_xalloc(new_bytes);
    if (new_bytes <= old_bytes)
        return p;
    if (new_bytes < DI_BIG_MIN) {
        q = di_xrealloc(p, new_bytes);
        memset((char *)q + old_bytes, 0, new_bytes - old_bytes);
        return q;
    }
    if (old_bytes < DI_BIG_MIN) {
        /* A heap block becomes a mapping, tracked if the heap block was. */
        q = di_big_xalloc(new_bytes);
        memcpy(q, p, old_bytes);
        if (s && !scope_remove(s, p))
            scope_remove(s, q);
        free(p);
        return q;
    }
    if (alloc_should_fail() || (s && scope_reserve(s) != 0))
        di_oom();
    q = mremap(p, big_len(old_bytes), big_len(new_bytes), MREMAP_MAYMOVE);
    if (q == MAP_FAILED)
        di_oom();
    big_advise(q, big_len(new_bytes));
    if (s && scope_remove(s, p))
        scope_add(s, q, big_len(new_bytes));
    return q;
}

void
di_big_free(void *p, size_t bytes)
{
    if (p == NULL)
        return;
    if (bytes < DI_BIG_MIN) {
        di_free(p);
        return;
    }
    if (cur_scope)
        scope_remove(cur_scope, p);
    munmap(p, big_len(bytes));
}

char *
di_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = di_malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

char *
di_strndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *p = di_malloc(len + 1);
    if (p) {
        memcpy(p, s, len);
        p[len] = '\0';
    }
    return p;
}

char *
di_xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = di_xmalloc(n);
    memcpy(p, s, n);
    return p;
}

void
di_buf_init(di_buf *b)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

void
di_buf_fini(di_buf *b)
{
    di_free(b->data);
    di_buf_init(b);
}

void
di_buf_reset(di_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

static void
buf_reserve(di_buf *b, size_t extra)
{
    size_t need = b->len + extra + 1;
    if (need < b->len)
        di_oom();
    DI_GROW(&b->data, &b->cap, need);
}

void
di_buf_put(di_buf *b, const void *data, size_t len)
{
    buf_reserve(b, len);
    if (len)
        memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
}

void
di_buf_puts(di_buf *b, const char *s)
{
    di_buf_put(b, s, strlen(s));
}

void
di_buf_putc(di_buf *b, char c)
{
    buf_reserve(b, 1);
    b->data[b->len++] = c;
    b->data[b->len] = '\0';
}

void
di_buf_printf(di_buf *b, const char *fmt, ...)
{
    va_list ap, aq;
    int n;
    va_start(ap, fmt);
    va_copy(aq, ap);
    n = vsnprintf(NULL, 0, fmt, aq);
    va_end(aq);
    if (n < 0) {
        va_end(ap);
        return;
    }
    buf_reserve(b, (size_t)n);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    va_end(ap);
}

void
di_buf_json_str(di_buf *b, const char *s)
{
    di_buf_putc(b, '"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        switch (c) {
        case '"':
            di_buf_puts(b, "\\\"");
            break;
        case '\\':
            di_buf_puts(b, "\\\\");
            break;
        case '\n':
            di_buf_puts(b, "\\n");
            break;
        case '\t':
            di_buf_puts(b, "\\t");
            break;
        case '\r':
            di_buf_puts(b, "\\r");
            break;
        default:
            if (c < 0x20)
                di_buf_printf(b, "\\u%04x", c);
            else
                di_buf_putc(b, (char)c);
        }
    }
    di_buf_putc(b, '"');
}

void
di_buf_double(di_buf *b, double v)
{
    char tmp[40];
    if (isnan(v)) {
        di_buf_puts(b, "nan");
        return;
    }
    if (isinf(v)) {
        di_buf_puts(b, v < 0 ? "-inf" : "inf");
        return;
    }
    /*
     * The shortest %.*g that reads back bit-identical: reading back is
     * monotone in the precision (17 always does), so bisect.
     */
    {
        int lo = 1, hi = 17;
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            snprintf(tmp, sizeof tmp, "%.*g", mid, v);
            if (strtod(tmp, NULL) == v)
                hi = mid;
            else
                lo = mid + 1;
        }
        snprintf(tmp, sizeof tmp, "%.*g", lo, v);
    }
    /* Keep a float recognisable as one: "1" becomes "1.0". */
    if (strpbrk(tmp, ".eE") == NULL)
        strcat(tmp, ".0");
    di_buf_puts(b, tmp);
}

char *
di_buf_take(di_buf *b, size_t *len)
{
    char *p;
    if (b->data == NULL)
        di_buf_put(b, "", 0);
    p = b->data;
    if (len)
        *len = b->len;
    di_buf_init(b);
    return p;
}

int
di_read_file(const char *path, size_t max, uint8_t **data, size_t *len, di_error *err)
{
    FILE *f;
    uint8_t *p = NULL;
    size_t n = 0, cap = 0;
    *data = NULL;
    *len = 0;
    f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (f == NULL)
        return di_error_set(err, DI_EIO, "cannot open '%s': %s", path, strerror(errno));
    for (;;) {
        size_t got;
        DI_GROW(&p, &cap, n + 65536);
        got = fread(p + n, 1, cap - n, f);
        n += got;
        if (n > max) {
            if (f != stdin)
                fclose(f);
            di_free(p);
            return di_error_set(err, DI_ETOOBIG, "'%s' is larger than the limit of %zu bytes", path,
                                max);
        }
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        int e = errno;
        if (f != stdin)
            fclose(f);
        di_free(p);
        return di_error_set(err, DI_EIO, "cannot read '%s': %s", path, strerror(e));
    }
    if (f != stdin)
        fclose(f);
    *data = p;
    *len = n;
    return 0;
}

char *
di_read_text(const char *path, size_t max, const char *what, di_error *err)
{
    uint8_t *data;
    size_t len;
    if (di_read_file(path, max, &data, &len, err) != 0) {
        di_error_prefix(err, "%s", what);
        return NULL;
    }
    data = di_xrealloc(data, len + 1);
    data[len] = '\0';
    return (char *)data;
}

int
di_write_file(const char *path, const void *data, size_t len, di_error *err)
{
    char tmp[4096];
    int fd;
    const uint8_t *p = data;
    size_t off = 0;
    if (strcmp(path, "-") == 0) {
        if (fwrite(data, 1, len, stdout) != len || fflush(stdout) != 0)
            return di_error_set(err, DI_EIO, "cannot write standard output: %s", strerror(errno));
        return 0;
    }
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return di_error_set(err, DI_EINVAL, "path too long: '%s'", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return di_error_set(err, DI_EIO, "cannot create '%s': %s", tmp, strerror(errno));
    while (off < len) {
        ssize_t w = write(fd, p + off, len - off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            close(fd);
            unlink(tmp);
            return di_error_set(err, DI_EIO, "cannot write '%s': %s", path, strerror(e));
        }
        off += (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return di_error_set(err, DI_EIO, "cannot write '%s': %s", path, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return di_error_set(err, DI_EIO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(e));
    }
    return 0;
}

int
di_utf8_valid(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    while (p < end) {
        unsigned c = *p++;
        unsigned need, min, cp;
        if (c < 0x80)
            continue;
        if (c >= 0xc2 && c <= 0xdf) {
            need = 1;
            min = 0x80;
            cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            need = 2;
            min = 0x800;
            cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            need = 3;
            min = 0x10000;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if ((size_t)(end - p) < need)
            return 0;
        for (unsigned i = 0; i < need; i++) {
            if ((p[i] & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (p[i] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        p += need;
    }
    return 1;
}

/*
 * OpenSSL 3 looks the implementation up on every EVP_DigestInit_ex with
 * EVP_sha256(); fetching it once halves the cost of short digests (the
 * canonical hash makes one per op). call_once keeps this thread-safe.
 */
static EVP_MD *sha256_md;
static once_flag sha256_once = ONCE_FLAG_INIT;

static void
sha256_fetch(void)
{
    sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
}

void
di_sha256_init(di_sha256 *s)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    call_once(&sha256_once, sha256_fetch);
    if (ctx == NULL || EVP_DigestInit_ex(ctx, sha256_md ? sha256_md : EVP_sha256(), NULL) != 1)
        di_oom();
    s->ctx = ctx;
}

void
di_sha256_update(di_sha256 *s, const void *data, size_t len)
{
    if (EVP_DigestUpdate(s->ctx, data, len) != 1)
        di_oom();
}

void
di_sha256_u64(di_sha256 *s, uint64_t v)
{
    uint8_t b[8];
    di_store_le(b, v, sizeof b);
    di_sha256_update(s, b, sizeof b);
}

void
di_sha256_final(di_sha256 *s, di_hash *out)
{
    unsigned int n = 0;
    if (EVP_DigestFinal_ex(s->ctx, out->b, &n) != 1 || n != sizeof out->b)
        di_oom();
    EVP_MD_CTX_free(s->ctx);
    s->ctx = NULL;
}

void
di_sha256_once(const void *data, size_t len, di_hash *out)
{
    di_sha256 s;
    di_sha256_init(&s);
    di_sha256_update(&s, data, len);
    di_sha256_final(&s, out);
}

void
di_hash_hex(const di_hash *h, char out[65])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = hex[h->b[i] >> 4];
        out[2 * i + 1] = hex[h->b[i] & 15];
    }
    out[64] = '\0';
}

static int
hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int
di_hash_from_hex(const char *hex, di_hash *out)
{
    if (strlen(hex) != 64)
        return DI_EINVAL;
    for (int i = 0; i < 32; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return DI_EINVAL;
        out->b[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

int
di_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a != 0 && b > UINT64_MAX / a)
        return -1;
    *out = a * b;
    return 0;
}

#define SIP_ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIP_ROUND(v0, v1, v2, v3)                                                                  \
    do {                                                                                           \
        v0 += v1;                                                                                  \
        v1 = SIP_ROTL(v1, 13);                                                                     \
        v1 ^= v0;                                                                                  \
        v0 = SIP_ROTL(v0, 32);                                                                     \
        v2 += v3;                                                                                  \
        v3 = SIP_ROTL(v3, 16);                                                                     \
        v3 ^= v2;                                                                                  \
        v0 += v3;                                                                                  \
        v3 = SIP_ROTL(v3, 21);                                                                     \
        v3 ^= v0;                                                                                  \
        v2 += v1;                                                                                  \
        v1 = SIP_ROTL(v1, 17);                                                                     \
        v1 ^= v2;                                                                                  \
        v2 = SIP_ROTL(v2, 32);                                                                     \
    } while (0)

uint64_t
di_siphash(const void *p, size_t n, uint64_t k0, uint64_t k1)
{
    const uint8_t *in = p;
    uint64_t v0 = k0 ^ 0x736f6d6570736575ull, v1 = k1 ^ 0x646f72616e646f6dull;
    uint64_t v2 = k0 ^ 0x6c7967656e657261ull, v3 = k1 ^ 0x7465646279746573ull;
    uint64_t b = (uint64_t)n << 56, m;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        m = 0;
        for (int j = 7; j >= 0; j--)
            m = m << 8 | in[i + (size_t)j];
        v3 ^= m;
        SIP_ROUND(v0, v1, v2, v3);
        v0 ^= m;
    }
    for (int j = (int)(n - i) - 1; j >= 0; j--)
        b |= (uint64_t)in[i + (size_t)j] << (8 * j);
    v3 ^= b;
    SIP_ROUND(v0, v1, v2, v3);
    v0 ^= b;
    v2 ^= 0xff;
    SIP_ROUND(v0, v1, v2, v3);
    SIP_ROUND(v0, v1, v2, v3);
    SIP_ROUND(v0, v1, v2, v3);
    return v0 ^ v1 ^ v2 ^ v3;
}

void
di_hash_key(uint64_t key[2])
{
    if (getrandom(key, 2 * sizeof key[0], GRND_NONBLOCK) != (ssize_t)(2 * sizeof key[0])) {
        key[0] = 0x0123456789abcdefull;
        key[1] = 0xfedcba9876543210ull;
    }
}

void
di_heap_keep(void)
{
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
}
