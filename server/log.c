/*
 * log.c: key=value log lines (see log.h). The file handle is the only
 * mutable global besides atomic counters; it is swapped under the same mutex
 * that serializes writes, so a SIGHUP reopen on the loop thread never races a
 * worker that is logging.
 */
#include "log.h"

#include "base/base.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *log_file; /* NULL: stderr */
static char *log_path; /* NULL: stderr */
static int log_level = SRV_LOG_INFO;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

int
srv_log_level_parse(const char *s)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(s, level_names[i]) == 0)
            return i;
    if (strcmp(s, "warning") == 0)
        return SRV_LOG_WARN;
    return -1;
}

const char *
srv_log_level_name(int level)
{
    return level >= 0 && level < 4 ? level_names[level] : "unknown";
}

int
srv_log_open(const char *path, int level)
{
    FILE *f = NULL;
    if (path != NULL && path[0] != '\0') {
        f = fopen(path, "a");
        if (f == NULL)
            return -errno;
        setvbuf(f, NULL, _IOLBF, 0);
    }
    pthread_mutex_lock(&log_lock);
    if (log_file != NULL)
        fclose(log_file);
    di_free(log_path);
    log_file = f;
    log_path = f != NULL ? di_strdup(path) : NULL;
    log_level = level;
    pthread_mutex_unlock(&log_lock);
    return 0;
}

int
srv_log_reopen(void)
{
    int rc = 0;
    pthread_mutex_lock(&log_lock);
    if (log_path != NULL) {
        FILE *f = fopen(log_path, "a");
        if (f == NULL) {
            rc = -errno;
        } else {
            setvbuf(f, NULL, _IOLBF, 0);
            fclose(log_file);
            log_file = f;
        }
    }
    pthread_mutex_unlock(&log_lock);
    return rc;
}

void
srv_log_close(void)
{
    pthread_mutex_lock(&log_lock);
    if (log_file != NULL)
        fclose(log_file);
    log_file = NULL;
    di_free(log_path);
    log_path = NULL;
    pthread_mutex_unlock(&log_lock);
}

int
srv_log_enabled(int level)
{
    return level >= log_level;
}

const char *
srv_log_quote(const char *s, char *buf, unsigned n)
{
    int needs = s[0] == '\0';
    for (const char *p = s; *p; p++)
        if (*p == ' ' || *p == '"' || *p == '=' || *p == '\\' || (unsigned char)*p < 0x20)
            needs = 1;
    if (!needs) {
        snprintf(buf, n, "%s", s);
        return buf;
    }
    unsigned j = 0;
    if (n < 3) {
        if (n)
            buf[0] = '\0';
        return buf;
    }
    buf[j++] = '"';
    for (const char *p = s; *p && j + 4 < n; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\') {
            buf[j++] = '\\';
            buf[j++] = (char)c;
        } else if (c == '\n') {
            buf[j++] = '\\';
            buf[j++] = 'n';
        } else if (c < 0x20) {
            buf[j++] = '?';
        } else {
            buf[j++] = (char)c;
        }
    }
    buf[j++] = '"';
    buf[j] = '\0';
    return buf;
}

void
srv_log(int level, const char *event, const char *fmt, ...)
{
    char line[4096];
    struct timespec ts;
    struct tm tm;
    size_t len;
    va_list ap;
    if (level < log_level)
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    len = strftime(line, sizeof line, "ts=%Y-%m-%dT%H:%M:%S", &tm);
    len += (size_t)snprintf(line + len, sizeof line - len, ".%03ldZ level=%s event=%s",
                            ts.tv_nsec / 1000000, srv_log_level_name(level), event);
    if (fmt != NULL && fmt[0] != '\0' && len + 1 < sizeof line) {
        line[len++] = ' ';
        va_start(ap, fmt);
        int n = vsnprintf(line + len, sizeof line - len, fmt, ap);
        va_end(ap);
        if (n > 0)
            len += (size_t)n;
    }
    if (len >= sizeof line - 1)
        len = sizeof line - 2;
    line[len++] = '\n';
    pthread_mutex_lock(&log_lock);
    fwrite(line, 1, len, log_file != NULL ? log_file : stderr);
    pthread_mutex_unlock(&log_lock);
}

/* Rate limits of srv_log_limited: one slot per event name. */
#define LIMIT_SLOTS 32
static struct {
    const char *event;
    double last; /* CLOCK_MONOTONIC seconds of the last record written */
    unsigned long long suppressed;
} limit_slot[LIMIT_SLOTS];
static pthread_mutex_t limit_lock = PTHREAD_MUTEX_INITIALIZER;

void
srv_log_limited(int level, const char *event, double every_s, const char *fmt, ...)
{
    char text[3072];
    struct timespec ts;
    double now;
    unsigned long long suppressed = 0;
    int write = 1;
    va_list ap;
    if (level < log_level)
        return;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    now = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    pthread_mutex_lock(&limit_lock);
    for (int i = 0; i < LIMIT_SLOTS; i++) {
        if (limit_slot[i].event != NULL && strcmp(limit_slot[i].event, event) != 0)
            continue;
        if (limit_slot[i].event != NULL && now - limit_slot[i].last < every_s) {
            limit_slot[i].suppressed++;
            write = 0;
        } else {
            suppressed = limit_slot[i].suppressed;
            limit_slot[i].event = event;
            limit_slot[i].last = now;
            limit_slot[i].suppressed = 0;
        }
        break;
    } /* every slot taken by other events: written without a limit */
    pthread_mutex_unlock(&limit_lock);
    if (!write)
        return;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (suppressed > 0)
        srv_log(level, event, "%s suppressed=%llu", text, suppressed);
    else
        srv_log(level, event, "%s", text);
}
