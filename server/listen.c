/*
 * listen.c: distird's own accept loop for the gRPC port.
 *
 * gRPC core 1.51 stops accepting on a port for good when accept4 fails with
 * anything but EAGAIN/ECONNABORTED: one burst of connections that fills the
 * descriptor table (EMFILE) leaves a listener that never accepts again
 * while health still says SERVING. So distird owns the listening socket: a
 * uv_poll on the event loop accepts each connection and hands the
 * descriptor to the server with grpc_server_add_channel_from_fd, which
 * builds the same HTTP/2 transport with the server's channel arguments.
 *
 * The table never fills through this port: a connection accepted on a
 * descriptor within LISTEN_HEADROOM of RLIMIT_NOFILE is closed at once
 * (the client sees the connection reset and may retry), keeping room for
 * the database, the metrics port and files. Should accept4 still fail with
 * EMFILE or ENFILE (descriptors taken elsewhere), the spare descriptor
 * distird holds is released, the pending connection accepted and closed,
 * and the spare taken again, so the backlog drains instead of spinning;
 * accepting resumes as soon as descriptors are free. Idle connections are
 * closed by gRPC after --max-idle-s (GRPC_ARG_MAX_CONNECTION_IDLE_MS).
 */
#include <errno.h>
#include <fcntl.h>
#include <grpc/grpc.h>
#include <grpc/grpc_posix.h>
#include <grpc/grpc_security.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon.h"
#include "log.h"

/* Descriptors kept free for everything but gRPC connections. */
#define LISTEN_HEADROOM 64

static int
spare_open(void)
{
    return open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/* The lowest descriptor number a new gRPC connection may not reach. */
static int
fd_ceiling(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        rl.rlim_cur > (rlim_t)1 << 30)
        return 1 << 30;
    return rl.rlim_cur > 2 * LISTEN_HEADROOM ? (int)rl.rlim_cur - LISTEN_HEADROOM
                                             : (int)rl.rlim_cur / 2;
}

static void
on_accept(uv_poll_t *h, int status, int events)
{
    srv_daemon *d = h->data;
    (void)events;
    if (status < 0 || d->listen_fd < 0)
        return;
    for (int n = 0; n < 256; n++) { /* then let the loop serve others */
        int fd = accept4(d->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE) {
                /* Make room with the spare, drop the connection, keep the spare. */
                d->m.conn_refused++;
                if (d->spare_fd >= 0) {
                    close(d->spare_fd);
                    d->spare_fd = -1;
                    fd = accept4(d->listen_fd, NULL, NULL, SOCK_CLOEXEC);
                    if (fd >= 0)
                        close(fd);
                    d->spare_fd = spare_open();
                }
                srv_log_limited(SRV_LOG_ERROR, "accept_failed", 10.0,
                                "error=\"%s\" action=connection_dropped", strerror(errno));
                if (fd < 0)
                    return; /* nothing could be taken: wait for the next readiness */
                continue;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                srv_log_limited(SRV_LOG_ERROR, "accept_failed", 10.0, "error=\"%s\"",
                                strerror(errno));
            return;
        }
        if (fd >= d->fd_ceiling) {
            close(fd);
            d->m.conn_refused++;
            srv_log_limited(SRV_LOG_WARN, "connection_refused", 10.0,
                            "reason=descriptors fd=%d ceiling=%d", fd, d->fd_ceiling);
            continue;
        }
        if (d->listen_family != AF_UNIX) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        }
        d->m.conn_accepted++;
        grpc_server_add_channel_from_fd(d->server, fd, d->listen_creds);
    }
}

/* Binds and listens on spec (host:port or unix:PATH); returns the socket or -1 with err set. */
static int
bind_listen(srv_daemon *d, const char *spec, di_error *err)
{
    int fd = -1, one = 1;
    if (strncmp(spec, "unix:", 5) == 0) {
        struct sockaddr_un sa;
        struct stat sb;
        const char *path = spec + 5;
        memset(&sa, 0, sizeof sa);
        sa.sun_family = AF_UNIX;
        if (path[0] == '\0' || strlen(path) >= sizeof sa.sun_path) {
            di_error_set(err, DI_EINVAL, "cannot listen on '%s': bad socket path", spec);
            return -1;
        }
        memcpy(sa.sun_path, path, strlen(path) + 1);
        /* A socket left by an earlier run is replaced; any other file is not. */
        if (lstat(path, &sb) == 0 && S_ISSOCK(sb.st_mode))
            unlink(path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 1024) != 0)
            goto fail;
        d->listen_family = AF_UNIX;
        snprintf(d->listen_addr, sizeof d->listen_addr, "%s", spec);
        return fd;
    }
    const char *colon = strrchr(spec, ':');
    char host[256], port[16];
    struct addrinfo hints, *res = NULL;
    if (colon == NULL || colon - spec >= (long)sizeof host || strlen(colon + 1) >= sizeof port ||
        colon[1] == '\0') {
        di_error_set(err, DI_EINVAL, "cannot listen on '%s': expected host:port or unix:PATH",
                     spec);
        return -1;
    }
    snprintf(host, sizeof host, "%.*s", (int)(colon - spec), spec);
    snprintf(port, sizeof port, "%s", colon + 1);
    if (host[0] == '[' && host[strlen(host) - 1] == ']') { /* [::1]:7878 */
        memmove(host, host + 1, strlen(host));
        host[strlen(host) - 1] = '\0';
    }
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int gai = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
    if (gai != 0) {
        di_error_set(err, DI_EINVAL, "cannot listen on '%s': %s", spec, gai_strerror(gai));
        return -1;
    }
    fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
        freeaddrinfo(res);
        goto fail;
    }
    d->listen_family = res->ai_family;
    freeaddrinfo(res);
    {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        int p = 0;
        if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
            p = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                         : ntohs(((struct sockaddr_in *)&ss)->sin_port);
        d->port = p;
        snprintf(d->listen_addr, sizeof d->listen_addr, "%.*s:%d", (int)(colon - spec), spec, p);
    }
    return fd;
fail:
    di_error_set(err, DI_EIO, "cannot listen on '%s': %s", spec, strerror(errno));
    if (fd >= 0)
        close(fd);
    return -1;
}

int
srv_listen_start(srv_daemon *d, di_error *err)
{
    d->spare_fd = -1;
    d->listen_fd = bind_listen(d, d->cfg->listen, err);
    if (d->listen_fd < 0)
        return err ? err->code : DI_EIO;
    d->fd_ceiling = fd_ceiling();
    d->spare_fd = spare_open();
    d->listen_creds = grpc_insecure_server_credentials_create();
    uv_poll_init(d->loop, &d->listen_poll, d->listen_fd);
    d->listen_poll.data = d;
    uv_poll_start(&d->listen_poll, UV_READABLE, on_accept);
    d->listening = 1;
    return 0;
}

static void
on_listen_closed(uv_handle_t *h)
{
    srv_daemon *d = h->data;
    if (d->listen_fd >= 0)
        close(d->listen_fd);
    d->listen_fd = -1;
}

void
srv_listen_stop(srv_daemon *d)
{
    if (!d->listening)
        return;
    d->listening = 0;
    uv_poll_stop(&d->listen_poll);
    uv_close((uv_handle_t *)&d->listen_poll, on_listen_closed);
    if (d->spare_fd >= 0)
        close(d->spare_fd);
    d->spare_fd = -1;
    grpc_server_credentials_release(d->listen_creds);
    d->listen_creds = NULL;
    if (d->listen_family == AF_UNIX)
        unlink(d->cfg->listen + 5);
}
