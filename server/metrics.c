/*
 * metrics.c: the Prometheus endpoint (--metrics-listen host:port), a minimal
 * HTTP/1.0 responder on the libuv loop. It reads one request head, answers
 * GET /metrics (or /) with the text exposition format and closes the
 * connection; anything else gets 404 or 400. The counters are the loop
 * thread's own (srv_metrics), so rendering needs no locks. At most
 * HTTP_MAX_CONNS connections are open at once (more are closed on accept)
 * and one that has not sent its request within HTTP_IDLE_MS is closed, so
 * idle or slow clients cannot hold the port or the descriptors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "log.h"
#include "status.h"

#define HTTP_MAX_HEAD 8192
#define HTTP_MAX_CONNS 32
#define HTTP_IDLE_MS 5000

typedef struct http_conn http_conn;
struct http_conn {
    uv_tcp_t tcp;
    uv_write_t wr;
    srv_http *http;
    http_conn *next, *prev;
    size_t len;
    int responded;
    uint64_t opened_ms; /* uv_now at accept */
    char *resp;
    char head[HTTP_MAX_HEAD];
};

struct srv_http {
    uv_tcp_t server;
    uv_timer_t sweep; /* closes connections idle past HTTP_IDLE_MS */
    int handles;      /* server and sweep not yet closed */
    srv_daemon *d;
    http_conn *conns;
    unsigned nconn;
};

static void
conn_closed(uv_handle_t *h)
{
    http_conn *c = h->data;
    srv_http *http = c->http;
    if (http != NULL) { /* NULL once the endpoint is stopping */
        http->nconn--;
        if (c->prev != NULL)
            c->prev->next = c->next;
        else
            http->conns = c->next;
        if (c->next != NULL)
            c->next->prev = c->prev;
    }
    di_free(c->resp);
    di_free(c);
}

static void
conn_close(http_conn *c)
{
    if (!uv_is_closing((uv_handle_t *)&c->tcp))
        uv_close((uv_handle_t *)&c->tcp, conn_closed);
}

static void
on_written(uv_write_t *wr, int status)
{
    (void)status;
    conn_close(wr->data);
}

static void
respond(http_conn *c, int code, const char *reason, const char *type, const char *body,
        size_t bodylen)
{
    di_buf b;
    di_buf_init(&b);
    di_buf_printf(&b,
                  "HTTP/1.0 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                  "Connection: close\r\n\r\n",
                  code, reason, type, bodylen);
    di_buf_put(&b, body, bodylen);
    size_t len;
    char *data = di_buf_take(&b, &len);
    c->resp = di_malloc(len);
    if (c->resp == NULL)
        di_oom();
    memcpy(c->resp, data, len);
    di_free(data);
    c->responded = 1;
    uv_read_stop((uv_stream_t *)&c->tcp);
    uv_buf_t buf = uv_buf_init(c->resp, (unsigned)len);
    c->wr.data = c;
    if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &buf, 1, on_written) != 0)
        conn_close(c);
}

static void
handle_request(http_conn *c)
{
    srv_daemon *d = c->http->d;
    char method[16], path[256];
    if (sscanf(c->head, "%15s %255s", method, path) != 2) {
        respond(c, 400, "Bad Request", "text/plain", "bad request\n", 12);
        return;
    }
    if (strcmp(method, "GET") != 0) {
        respond(c, 405, "Method Not Allowed", "text/plain", "GET only\n", 9);
        return;
    }
    if (strcmp(path, "/metrics") != 0 && strcmp(path, "/") != 0) {
        respond(c, 404, "Not Found", "text/plain", "try /metrics\n", 13);
        return;
    }
    di_buf b;
    di_buf_init(&b);
    srv_metrics_render(d, &b);
    respond(c, 200, "OK", "text/plain; version=0.0.4", b.data ? b.data : "", b.len);
    di_buf_fini(&b);
}

static void
on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    http_conn *c = h->data;
    (void)suggested;
    buf->base = c->head + c->len;
    buf->len = sizeof c->head - 1 - c->len;
}

static void
on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    http_conn *c = s->data;
    (void)buf;
    if (c->responded)
        return;
    if (n < 0) {
        conn_close(c);
        return;
    }
    c->len += (size_t)n;
    c->head[c->len] = '\0';
    if (strstr(c->head, "\r\n\r\n") != NULL || strstr(c->head, "\n\n") != NULL)
        handle_request(c);
    else if (c->len >= sizeof c->head - 1)
        respond(c, 431, "Request Header Fields Too Large", "text/plain", "too large\n", 10);
}

static void
on_connection(uv_stream_t *server, int status)
{
    srv_http *http = server->data;
    if (status < 0)
        return;
    http_conn *c = di_xcalloc(1, sizeof *c);
    c->http = http;
    c->opened_ms = uv_now(server->loop);
    uv_tcp_init(server->loop, &c->tcp);
    c->tcp.data = c;
    c->next = http->conns;
    if (http->conns != NULL)
        http->conns->prev = c;
    http->conns = c;
    http->nconn++;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0 || http->nconn > HTTP_MAX_CONNS ||
        uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0)
        conn_close(c);
}

static void
on_sweep(uv_timer_t *t)
{
    srv_http *http = t->data;
    uint64_t now = uv_now(t->loop);
    for (http_conn *c = http->conns; c != NULL; c = c->next)
        if (!c->responded && now - c->opened_ms >= HTTP_IDLE_MS)
            conn_close(c);
}

/* Parses "host:port" or "[v6]:port". */
static int
parse_addr(const char *addr, struct sockaddr_storage *ss)
{
    char host[128];
    const char *colon = strrchr(addr, ':');
    if (colon == NULL)
        return -1;
    int port = atoi(colon + 1);
    size_t hl = (size_t)(colon - addr);
    if (port < 0 || port > 65535 || hl >= sizeof host)
        return -1;
    memcpy(host, addr, hl);
    host[hl] = '\0';
    if (host[0] == '[' && hl >= 2 && host[hl - 1] == ']') {
        host[hl - 1] = '\0';
        return uv_ip6_addr(host + 1, port, (struct sockaddr_in6 *)ss);
    }
    return uv_ip4_addr(hl ? host : "0.0.0.0", port, (struct sockaddr_in *)ss);
}

int
srv_http_start(srv_daemon *d, const char *addr, di_error *err)
{
    struct sockaddr_storage ss;
    int rc;
    memset(&ss, 0, sizeof ss);
    if (parse_addr(addr, &ss) != 0)
        return di_error_set(err, DI_EINVAL, "--metrics-listen: cannot parse '%s'", addr);
    srv_http *http = di_xcalloc(1, sizeof *http);
    http->d = d;
    uv_tcp_init(d->loop, &http->server);
    http->server.data = http;
    uv_timer_init(d->loop, &http->sweep);
    http->sweep.data = http;
    http->handles = 2;
    uv_timer_start(&http->sweep, on_sweep, 1000, 1000);
    uv_unref((uv_handle_t *)&http->sweep);
    d->http = http;
    rc = uv_tcp_bind(&http->server, (const struct sockaddr *)&ss, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&http->server, 64, on_connection);
    if (rc != 0) {
        srv_http_stop(d);
        return di_error_set(err, DI_EIO, "--metrics-listen: cannot listen on '%s': %s", addr,
                            uv_strerror(rc));
    }
    struct sockaddr_storage bound;
    int blen = sizeof bound;
    char ip[64] = "?";
    int port = 0;
    if (uv_tcp_getsockname(&http->server, (struct sockaddr *)&bound, &blen) == 0) {
        if (bound.ss_family == AF_INET6) {
            uv_ip6_name((struct sockaddr_in6 *)&bound, ip, sizeof ip);
            port = ntohs(((struct sockaddr_in6 *)&bound)->sin6_port);
        } else {
            uv_ip4_name((struct sockaddr_in *)&bound, ip, sizeof ip);
            port = ntohs(((struct sockaddr_in *)&bound)->sin_port);
        }
    }
    srv_log(SRV_LOG_INFO, "metrics_listening", "addr=%s:%d", ip, port);
    printf("distird metrics on %s:%d\n", ip, port);
    fflush(stdout);
    return 0;
}

static void
http_server_closed(uv_handle_t *h)
{
    srv_http *http = h->data;
    if (--http->handles == 0)
        di_free(http);
}

void
srv_http_stop(srv_daemon *d)
{
    srv_http *http = d->http;
    if (http == NULL)
        return;
    d->http = NULL;
    /* libuv runs close callbacks in no promised order: detach the connections first. */
    for (http_conn *c = http->conns, *next; c != NULL; c = next) {
        next = c->next;
        c->http = NULL;
        conn_close(c);
    }
    http->conns = NULL;
    uv_timer_stop(&http->sweep);
    uv_close((uv_handle_t *)&http->sweep, http_server_closed);
    uv_close((uv_handle_t *)&http->server, http_server_closed);
}

static void
counter(di_buf *b, const char *name, const char *help, const char *type, double v)
{
    di_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s ", name, help, name, type, name);
    di_buf_double(b, v);
    di_buf_putc(b, '\n');
}

void
srv_metrics_render(srv_daemon *d, di_buf *b)
{
    const srv_metrics *m = &d->m;
    di_buf_puts(b, "# HELP distird_requests_total Calls accepted, by method.\n"
                   "# TYPE distird_requests_total counter\n");
    for (int i = 0; i < SRV_NMETHOD; i++)
        di_buf_printf(b, "distird_requests_total{method=\"%s\"} %llu\n", srv_method_names[i],
                      (unsigned long long)m->requests[i]);
    di_buf_puts(b, "# HELP distird_responses_total Statuses sent, by method and gRPC code.\n"
                   "# TYPE distird_responses_total counter\n");
    for (int i = 0; i < SRV_NMETHOD; i++)
        for (int s = 0; s < SRV_NSTATUS; s++)
            if (m->responses[i][s] > 0)
                di_buf_printf(b, "distird_responses_total{method=\"%s\",code=\"%s\"} %llu\n",
                              srv_method_names[i], srv_status_name((grpc_status_code)s),
                              (unsigned long long)m->responses[i][s]);
    di_buf_puts(b, "# HELP distird_request_duration_seconds Time from call accepted to status "
                   "sent.\n# TYPE distird_request_duration_seconds summary\n");
    for (int i = 0; i < SRV_NMETHOD; i++) {
        uint64_t n = 0;
        for (int s = 0; s < SRV_NSTATUS; s++)
            n += m->responses[i][s];
        di_buf_printf(b, "distird_request_duration_seconds_sum{method=\"%s\"} ",
                      srv_method_names[i]);
        di_buf_double(b, m->latency_sum_s[i]);
        di_buf_printf(b, "\ndistird_request_duration_seconds_count{method=\"%s\"} %llu\n",
                      srv_method_names[i], (unsigned long long)n);
    }
    counter(b, "distird_cache_hits_total", "Simulations answered from the cache.", "counter",
            (double)m->cache_hits);
    counter(b, "distird_cache_misses_total", "Simulations not found in the cache.", "counter",
            (double)m->cache_misses);
    counter(b, "distird_cache_corrupt_total",
            "Stored results that failed their checksum (dropped and computed again).", "counter",
            (double)m->cache_corrupt);
    counter(b, "distird_cache_memo_hits_total",
            "Hits found by the request-bytes memo, without decoding the request.", "counter",
            (double)m->memo_hits);
    counter(b, "distird_cache_coalesced_total",
            "Misses that waited for an identical simulation already running.", "counter",
            (double)m->coalesced);
    counter(b, "distird_cache_entries", "Results stored in the cache.", "gauge",
            (double)cache_count(d->cache));
    counter(b, "distird_cache_evicted_total",
            "Rows evicted, least recently used first, to stay under --max-db-kb.", "counter",
            (double)cache_evicted_count(d->cache));
    counter(b, "distird_queue_depth", "Jobs waiting for a worker.", "gauge",
            (double)pool_queued(d->pool));
    counter(b, "distird_jobs_running", "Jobs running on workers.", "gauge",
            (double)pool_running(d->pool));
    counter(b, "distird_workers", "Worker threads.", "gauge", (double)d->nworkers);
    di_buf_puts(b, "# HELP distird_jobs_total Simulation jobs finished, by result.\n"
                   "# TYPE distird_jobs_total counter\n");
    di_buf_printf(b, "distird_jobs_total{result=\"ok\"} %llu\n", (unsigned long long)m->jobs_done);
    di_buf_printf(b, "distird_jobs_total{result=\"failed\"} %llu\n",
                  (unsigned long long)m->jobs_failed);
    di_buf_printf(b, "distird_jobs_total{result=\"cancelled\"} %llu\n",
                  (unsigned long long)m->jobs_cancelled);
    counter(b, "distird_job_seconds_total", "Worker time spent on jobs, seconds.", "counter",
            m->job_seconds_sum);
    counter(b, "distird_stream_messages_total", "SimulateBatch and Search messages sent.",
            "counter", (double)m->stream_messages);
    counter(b, "distird_searches_total", "Search calls answered with a result.", "counter",
            (double)m->searches_done);
    counter(b, "distird_search_candidates_total", "Candidates evaluated by searches.", "counter",
            (double)m->search_candidates);
    counter(b, "distird_search_cache_hits_total", "Search calls answered from stored searches.",
            "counter", (double)m->search_cache_hits);
    counter(b, "distird_calls_cancelled_total",
            "Calls that ended before their status was sent (deadline, cancel, disconnect).",
            "counter", (double)m->calls_cancelled);
    counter(b, "distird_live_calls", "Calls in progress.", "gauge", (double)d->live_calls);
    counter(b, "distird_serving", "1 while health reports SERVING.", "gauge", (double)d->serving);
    counter(b, "distird_uptime_seconds", "Seconds since start.", "gauge",
            (double)(uv_hrtime() - d->start_ns) / 1e9);
}
