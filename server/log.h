/*
 * log.h: structured logs for distird. Each record is one line of key=value
 * pairs, "ts=... level=info event=listening addr=127.0.0.1:7878", written to
 * standard error or to the log file (--log-file), which SIGHUP reopens so
 * that logrotate can move it away. Values with spaces, quotes or '=' are
 * quoted. Any thread may log; a mutex keeps lines whole.
 */
#ifndef DISTIRD_LOG_H
#define DISTIRD_LOG_H

typedef enum srv_log_level {
    SRV_LOG_DEBUG = 0,
    SRV_LOG_INFO = 1,
    SRV_LOG_WARN = 2,
    SRV_LOG_ERROR = 3,
} srv_log_level;

/* Parses "debug", "info", "warn" or "error"; returns -1 for anything else. */
int srv_log_level_parse(const char *s);
const char *srv_log_level_name(int level);

/* Opens the log: path NULL or "" means standard error. Returns 0 or -errno. */
int srv_log_open(const char *path, int level);
/* Reopens the same path (SIGHUP). Returns 0 or -errno; on failure the old file stays. */
int srv_log_reopen(void);
void srv_log_close(void);
int srv_log_enabled(int level);

/*
 * Writes one record: event is a bare word, fmt the rest of the line as
 * key=value pairs ("key=%s n=%d"). Use srv_log_quote for free-form text.
 */
void srv_log(int level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * As srv_log for records that can repeat at a high rate (a full disk, a
 * damaged database): at most one record per event per every_s seconds; the
 * next one written carries suppressed=N, the records left out meanwhile.
 */
void srv_log_limited(int level, const char *event, double every_s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/*
 * Quotes s for a value if it needs quoting (spaces, quotes, '=', control
 * characters), into buf of size n; returns buf.
 */
const char *srv_log_quote(const char *s, char *buf, unsigned n);

#endif
