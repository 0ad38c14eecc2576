/* HTTP server event loop: the listening socket, one epoll service thread, connection lifetimes,
 * reads and writes, the connection limits (with eviction of idle connections), timeouts and
 * graceful shutdown. What a connection does with its bytes is http_server_conn.c; the stream queue
 * shared with producer threads is http_server_stream.c. Everything here runs on the service thread
 * except http_server_start/shutdown/free/port/inflight/draining (owning thread or any thread). */
#include "common/http_server.h"

#include "common/assert.h"
#include "common/http_server_priv.h"
#include "common/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Marks for the two non-connection descriptors in epoll. */
static char http_listen_mark, http_wake_mark;

#define HTTP_SWEEP_MS   250
#define HTTP_ACCEPT_MAX 64

static int64_t http_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void http_inflight_add(struct http_server *srv, int d)
{
    pthread_mutex_lock(&srv->mu);
    atomic_fetch_add(&srv->inflight, d);
    pthread_cond_broadcast(&srv->cv);
    pthread_mutex_unlock(&srv->mu);
}

void http_server_wake(struct http_server *srv)
{
    uint64_t one = 1;
    ssize_t w = write(srv->wake, &one, sizeof(one)); /* EAGAIN: already pending, as good */
    (void)w;
}

/* ---- Clients (per-address connection counts) -------------------------------------------------- */

static unsigned http_client_bucket(const uint8_t *addr)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (int i = 0; i < 16; i++) h = (h ^ addr[i]) * 16777619u;
    return h % HTTP_CLIENT_BUCKETS;
}

static struct http_client *http_client_get(struct http_server *srv, const uint8_t *addr)
{
    unsigned b = http_client_bucket(addr);
    for (struct http_client *cl = srv->clients[b]; cl; cl = cl->next)
        if (memcmp(cl->addr, addr, 16) == 0) return cl;
    struct http_client *cl = calloc(1, sizeof(*cl));
    if (!cl) return NULL;
    memcpy(cl->addr, addr, 16);
    cl->next = srv->clients[b];
    srv->clients[b] = cl;
    return cl;
}

/* Drops one connection of `cl` (none when it has none yet: a refused first one); frees it at 0. */
static void http_client_put(struct http_server *srv, struct http_client *cl)
{
    if (cl->n > 0 && --cl->n > 0) return;
    for (struct http_client **pp = &srv->clients[http_client_bucket(cl->addr)]; *pp;
         pp = &(*pp)->next) {
        if (*pp == cl) {
            *pp = cl->next;
            free(cl);
            return;
        }
    }
}

/* ---- Connections ------------------------------------------------------------------------------- */

static void http_conn_events(struct http_conn *c)
{
    if (c->dead) return;
    uint32_t ev = 0;
    if (!c->peer_eof && c->in_len < c->in_cap) ev |= EPOLLIN;
    if (http_conn_pending(c)) ev |= EPOLLOUT;
    if (ev == c->events) return;
    struct epoll_event e = {.events = ev, .data.ptr = c};
    if (epoll_ctl(c->srv->ep, EPOLL_CTL_MOD, c->fd, &e) == 0) c->events = ev;
}

void http_conn_close(struct http_conn *c)
{
    if (c->dead) return;
    struct http_server *srv = c->srv;
    c->dead = true;
    if (c->stream) {
        struct http_stream *s = c->stream;
        c->stream = NULL;
        for (struct http_stream **pp = &srv->streams; *pp; pp = &(*pp)->next)
            if (*pp == s) {
                *pp = s->next;
                break;
            }
        s->next = NULL;
        http_stream_detach(s, false); /* cancel callback runs here, on this thread */
    }
    epoll_ctl(srv->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    if (c->inflight) {
        c->inflight = false;
        http_inflight_add(srv, -1);
    }
    if (c->prev)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    srv->n_conns--;
    http_client_put(srv, c->client);
    c->next = srv->dead;
    c->prev = NULL;
    srv->dead = c;
}

static void http_conn_free(struct http_conn *c)
{
    free(c->in);
    free(c->hbuf);
    free(c->path);
    buf_fini(&c->body);
    buf_fini(&c->out);
    free(c);
}

/* Sends what c->out holds. Returns false when the connection was closed. */
static bool http_conn_flush(struct http_conn *c)
{
    while (http_conn_pending(c)) {
        ssize_t n = send(c->fd, c->out.data + c->out_off, http_conn_pending(c), MSG_NOSIGNAL);
        if (n > 0) {
            c->out_off += (size_t)n;
            c->t_write = c->srv->now;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
        http_conn_close(c); /* the client is gone (EPIPE, ECONNRESET) */
        return false;
    }
    if (c->out.cap > (1u << 20)) { /* do not keep a large answer's buffer on an idle connection */
        buf_fini(&c->out);
        buf_init(&c->out, 0);
    } else {
        buf_reset(&c->out);
    }
    c->out_off = 0;
    if (c->inflight && (c->state == CONN_HEAD || c->state == CONN_CLOSING)) {
        c->inflight = false;
        http_inflight_add(c->srv, -1);
    }
    if (c->state == CONN_CLOSING && !c->write_shut) {
        /* Half-close: the client reads the end of the answer at once, while what it still sends
         * is read and dropped until it closes or the linger time passes. */
        shutdown(c->fd, SHUT_WR);
        c->write_shut = true;
        c->t_close = c->srv->now;
    }
    return true;
}

/* Runs the connection until nothing more can be done without new events. */
static void http_conn_run(struct http_conn *c)
{
    for (;;) {
        if (c->dead) return;
        size_t in = c->in_len, out = c->out.len, off = c->out_off;
        enum http_conn_state st = c->state;
        unsigned reqs = c->requests;
        if (c->state == CONN_RESPONDING && c->stream && http_conn_pending(c) < HTTP_OUT_LOW) {
            int rc = http_stream_service(c->stream);
            if (rc < 0) {
                http_conn_close(c);
                return;
            }
            if (rc == 1) http_conn_txn_done(c);
        }
        http_conn_process(c);
        if (c->dead || !http_conn_flush(c)) return;
        if (c->state == CONN_CLOSING) {
            c->in_len = 0; /* dropped */
            if (c->write_shut && c->peer_eof) {
                http_conn_close(c);
                return;
            }
        } else if (c->peer_eof && c->state != CONN_BODY && !http_conn_pending(c) &&
                   (c->state == CONN_RESPONDING || c->in_len == 0)) {
            /* The client closed: between requests that is the normal end; with a deferred answer
             * still coming it means the client is gone (cancel), as a client cannot tell us it
             * only half-closed. */
            http_conn_close(c);
            return;
        }
        if (in == c->in_len && out == c->out.len && off == c->out_off && st == c->state &&
            reqs == c->requests)
            break;
    }
    http_conn_events(c);
}

static void http_conn_read(struct http_conn *c)
{
    for (int k = 0; k < 4 && !c->peer_eof && c->in_len < c->in_cap; k++) {
        ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
        if (n > 0) {
            if (c->state == CONN_CLOSING) continue; /* lingering: dropped */
            c->in_len += (size_t)n;
            continue;
        }
        if (n == 0) {
            c->peer_eof = true;
            break;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        http_conn_close(c); /* reset */
        return;
    }
}

/* An idle or unfinished connection that may be closed to make room: no request in flight. */
static bool http_conn_evictable(const struct http_conn *c)
{
    return (c->state == CONN_HEAD || c->state == CONN_CLOSING) && !c->inflight &&
           !http_conn_pending(c);
}

/* Closes the longest-idle evictable connection (of `client` when not NULL). Returns whether one
 * was found. */
static bool http_evict(struct http_server *srv, const struct http_client *client)
{
    struct http_conn *victim = NULL;
    for (struct http_conn *c = srv->conns; c; c = c->next) {
        if ((client && c->client != client) || !http_conn_evictable(c)) continue;
        if (!victim || c->t_idle < victim->t_idle) victim = c;
    }
    if (!victim) return false;
    /* Read what it sent but we have not seen yet (a connection accepted in this same batch): a
     * close with unread bytes would reset the connection instead of answering it. */
    if (!victim->dead && victim->state == CONN_HEAD) http_conn_read(victim);
    if (victim->dead) return true;
    if (victim->state == CONN_HEAD && victim->in_len) { /* an unfinished head: say why */
        victim->keep_alive = false;
        http_conn_reject(victim, 503, "too many connections: this one was closed to make room",
                         NULL, 0, true);
        if (!victim->dead) http_conn_flush(victim);
    }
    http_conn_close(victim);
    return true;
}

/* A new connection that no limit has room for: a best-effort 503, then closed. */
static void http_refuse(int fd, const char *why)
{
    char msg[512];
    char body[256];
    int bn = snprintf(body, sizeof(body),
                      "{\"error\":{\"message\":\"%s\",\"type\":\"server_error\",\"param\":null,"
                      "\"code\":null}}",
                      why);
    int n = snprintf(msg, sizeof(msg),
                     "HTTP/1.1 503 Service Unavailable\r\nServer: cinfer\r\nContent-Type: "
                     "application/json\r\nContent-Length: %d\r\nRetry-After: 1\r\nConnection: "
                     "close\r\n\r\n%s",
                     bn, body);
    ssize_t w = send(fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
    close(fd);
}

static void http_addr_key(const struct sockaddr_storage *sa, uint8_t *key)
{
    memset(key, 0, 16);
    if (sa->ss_family == AF_INET) {
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    } else if (sa->ss_family == AF_INET6) {
        memcpy(key, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
    }
}

static void http_accept(struct http_server *srv)
{
    for (int k = 0; k < HTTP_ACCEPT_MAX && srv->lfd >= 0; k++) {
        struct sockaddr_storage sa;
        socklen_t sl = sizeof(sa);
        int fd = accept4(srv->lfd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                log_warn("accept failed", LOG_S("server", srv->cfg.name),
                         LOG_S("error", strerror(errno)));
            return;
        }
        uint8_t key[16];
        http_addr_key(&sa, key);
        struct http_client *cl = http_client_get(srv, key);
        if (!cl) {
            close(fd);
            continue;
        }
        if (cl->n >= srv->cfg.max_connections_per_client && !http_evict(srv, cl)) {
            if (cl->n == 0) http_client_put(srv, cl);
            http_refuse(fd, "too many connections from this client");
            continue;
        }
        if (srv->n_conns >= srv->cfg.max_connections && !http_evict(srv, NULL)) {
            if (cl->n == 0) http_client_put(srv, cl);
            http_refuse(fd, "too many connections");
            continue;
        }
        struct http_conn *c = calloc(1, sizeof(*c));
        size_t cap = (size_t)srv->cfg.max_header_bytes + HTTP_IN_EXTRA;
        char *in = c ? malloc(cap) : NULL;
        struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
        if (!in || epoll_ctl(srv->ep, EPOLL_CTL_ADD, fd, &e) != 0) {
            free(in);
            free(c);
            if (cl->n == 0) http_client_put(srv, cl);
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        c->srv = srv;
        c->fd = fd;
        c->in = in;
        c->in_cap = cap;
        c->events = EPOLLIN;
        c->client = cl;
        cl->n++;
        c->t_idle = srv->now;
        buf_init(&c->out, 0);
        buf_init(&c->body, srv->cfg.max_body_bytes);
        c->next = srv->conns;
        if (srv->conns) srv->conns->prev = c;
        srv->conns = c;
        srv->n_conns++;
    }
}

/* ---- Timeouts and draining --------------------------------------------------------------------- */

static void http_sweep(struct http_server *srv)
{
    int64_t now = srv->now;
    int64_t head_ms = (int64_t)srv->cfg.header_timeout_s * 1000;
    int64_t idle_ms = (int64_t)srv->cfg.idle_timeout_s * 1000;
    int64_t stall_ms = (int64_t)srv->cfg.request_timeout_s * 1000;
    for (struct http_conn *c = srv->conns, *next; c; c = next) {
        next = c->next;
        if (http_conn_pending(c)) {
            if (now - c->t_write > stall_ms) {
                log_info("closing a connection whose client does not read",
                         LOG_S("server", srv->cfg.name));
                http_conn_close(c);
            }
            continue;
        }
        switch (c->state) {
        case CONN_HEAD:
            if (c->t_head && now - c->t_head > head_ms) {
                http_conn_reject(c, 408, "request head not received in time", NULL, 0, true);
                http_conn_run(c);
            } else if (!c->t_head && now - c->t_idle > (c->requests ? idle_ms : head_ms)) {
                http_conn_close(c); /* idle keep-alive (or never sent a request) */
            }
            break;
        case CONN_BODY:
            if (now - c->t_read > stall_ms) {
                http_conn_reject(c, 408, "request body not received in time", NULL, 0, true);
                http_conn_run(c);
            }
            break;
        case CONN_RESPONDING: break; /* a deferred answer has no timeout (generation is slow) */
        case CONN_CLOSING:
            if (c->write_shut && now - c->t_close > HTTP_LINGER_MS) http_conn_close(c);
            break;
        }
    }
}

/* Once draining: no new connections, idle ones closed; busy ones finish (new requests get 503). */
static void http_drain(struct http_server *srv)
{
    if (srv->drain_done) return;
    srv->drain_done = true;
    if (srv->lfd >= 0) {
        epoll_ctl(srv->ep, EPOLL_CTL_DEL, srv->lfd, NULL);
        close(srv->lfd);
        srv->lfd = -1;
    }
    for (struct http_conn *c = srv->conns, *next; c; c = next) {
        next = c->next;
        if (c->state == CONN_HEAD && !c->in_len && !http_conn_pending(c)) http_conn_close(c);
    }
}

/* A producer called http_server_wake(): give every stream with news a turn. */
static void http_on_wake(struct http_server *srv)
{
    uint64_t v;
    ssize_t r = read(srv->wake, &v, sizeof(v));
    (void)r;
    if (atomic_load(&srv->draining)) http_drain(srv);
    /* Collect first: running a connection may finish streams and change the list. Connections
     * closed meanwhile stay allocated (on srv->dead) until the loop iteration ends. */
    size_t n = 0;
    for (struct http_stream *s = srv->streams; s; s = s->next) {
        pthread_mutex_lock(&s->mu);
        bool dirty = s->dirty;
        s->dirty = false;
        pthread_mutex_unlock(&s->mu);
        if (!dirty || !s->conn) continue;
        if (n == srv->woken_cap) {
            size_t cap = n ? 2 * n : 64;
            struct http_conn **w = realloc(srv->woken, cap * sizeof(*w));
            if (!w) break; /* the rest are picked up on their next wake or event */
            srv->woken = w;
            srv->woken_cap = cap;
        }
        srv->woken[n++] = s->conn;
    }
    for (size_t i = 0; i < n; i++) http_conn_run(srv->woken[i]);
}

static void *http_service_main(void *arg)
{
    struct http_server *srv = arg;
    struct epoll_event evs[128];
    int64_t next_sweep = http_now_ms() + HTTP_SWEEP_MS;
    while (!atomic_load(&srv->stopping)) {
        int64_t wait = next_sweep - http_now_ms();
        int n = epoll_wait(srv->ep, evs, ARRAY_LEN(evs), wait < 0 ? 0 : (int)wait);
        srv->now = http_now_ms();
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == &http_listen_mark) {
                if (!atomic_load(&srv->draining)) http_accept(srv);
                continue;
            }
            if (p == &http_wake_mark) {
                http_on_wake(srv);
                continue;
            }
            struct http_conn *c = p;
            if (c->dead) continue;
            if (evs[i].events & (EPOLLHUP | EPOLLERR)) {
                http_conn_close(c); /* reset, or both directions shut: nothing more to do */
                continue;
            }
            if (evs[i].events & EPOLLIN) http_conn_read(c);
            http_conn_run(c);
        }
        if (srv->now >= next_sweep) {
            if (atomic_load(&srv->draining)) http_drain(srv);
            http_sweep(srv);
            next_sweep = srv->now + HTTP_SWEEP_MS;
        }
        while (srv->dead) {
            struct http_conn *c = srv->dead;
            srv->dead = c->next;
            http_conn_free(c);
        }
    }
    /* Producers must no longer wake the loop: detach every stream, cancelled unless it ended; its
     * cancel callback runs now, on this (the service) thread. */
    srv->now = http_now_ms();
    while (srv->conns) http_conn_close(srv->conns);
    while (srv->dead) {
        struct http_conn *c = srv->dead;
        srv->dead = c->next;
        http_conn_free(c);
    }
    pthread_mutex_lock(&srv->mu);
    srv->loop_alive = false;
    pthread_mutex_unlock(&srv->mu);
    return NULL;
}

/* ---- Server lifecycle -------------------------------------------------------------------------- */

static bool http_host_is_any(const char *h)
{
    return !h || !*h || !strcmp(h, "0.0.0.0") || !strcmp(h, "::") || !strcmp(h, "*");
}

/* Binds and listens. Returns the socket or -1 (logged). */
static int http_listen(const struct http_server_cfg *cfg)
{
    const char *host = cfg->host;
    if (host && !strcmp(host, "localhost")) host = "127.0.0.1";
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    socklen_t sl;
    bool v6only = false;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (host && !strcmp(host, "0.0.0.0")) {
        a4->sin_family = AF_INET;
        a4->sin_addr.s_addr = htonl(INADDR_ANY);
        sl = sizeof(*a4);
    } else if (http_host_is_any(host)) {
        a6->sin6_family = AF_INET6; /* dual-stack */
        a6->sin6_addr = in6addr_any;
        sl = sizeof(*a6);
    } else if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        sl = sizeof(*a4);
    } else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        v6only = true;
        sl = sizeof(*a6);
    } else {
        log_error("listen host must be an IP address or localhost", LOG_S("host", cfg->host));
        return -2;
    }
    a4->sin_port = htons((uint16_t)cfg->port); /* same offset in sockaddr_in6 */
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 && ss.ss_family == AF_INET6 && http_host_is_any(host)) {
        /* No IPv6 on this machine: every IPv4 address instead. */
        memset(&ss, 0, sizeof(ss));
        a4->sin_family = AF_INET;
        a4->sin_addr.s_addr = htonl(INADDR_ANY);
        a4->sin_port = htons((uint16_t)cfg->port);
        sl = sizeof(*a4);
        fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    }
    if (fd < 0) goto fail;
    int one = 1, v6 = v6only ? 1 : 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ss.ss_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6, sizeof(v6));
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 1024) != 0) goto fail;
    return fd;
fail:
    log_error("cannot listen", LOG_S("server", cfg->name), LOG_S("host", cfg->host),
              LOG_I("port", cfg->port), LOG_S("error", strerror(errno)));
    if (fd >= 0) close(fd);
    return -1;
}

/* Descriptors for max_connections: the soft limit is raised towards the hard one if needed. */
static void http_fd_budget(struct http_server_cfg *cfg)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
    rlim_t want = (rlim_t)cfg->max_connections + 256; /* model files, logs, other servers */
    if (rl.rlim_cur < want && rl.rlim_cur != RLIM_INFINITY) {
        rlim_t cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
        if (cur > rl.rlim_cur) {
            rl.rlim_cur = cur;
            setrlimit(RLIMIT_NOFILE, &rl);
            getrlimit(RLIMIT_NOFILE, &rl);
        }
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
        int fit = rl.rlim_cur > 512 ? (int)(rl.rlim_cur - 256) : (int)(rl.rlim_cur / 2);
        log_warn("file descriptor limit lowers max connections", LOG_S("server", cfg->name),
                 LOG_I("max_connections", cfg->max_connections), LOG_I("now", fit));
        cfg->max_connections = fit;
        if (cfg->max_connections_per_client > fit) cfg->max_connections_per_client = fit;
    }
}

int http_server_start(const struct http_server_cfg *cfg, const struct http_route *routes,
                      size_t n_routes, struct http_server **out)
{
    if (cfg->port < 0 || cfg->port > 65535 || cfg->max_body_bytes == 0 ||
        cfg->stream_queue_bytes < 64 || cfg->request_timeout_s <= 0 || cfg->header_timeout_s <= 0 ||
        cfg->idle_timeout_s <= 0 || cfg->max_header_bytes < 1024 ||
        cfg->max_header_bytes > (1 << 20) || cfg->max_connections <= 0 ||
        cfg->max_connections_per_client <= 0 || cfg->max_requests_per_conn < 0) {
        log_error("invalid http server config", LOG_S("server", cfg->name));
        return ERR_INVAL;
    }
    for (size_t i = 0; i < n_routes; i++) {
        if (!routes[i].fn || !routes[i].path || routes[i].path[0] != '/' ||
            !http_method_str(routes[i].method)[1])
            return ERR_INVAL;
        for (size_t j = 0; j < i; j++)
            if (routes[j].method == routes[i].method && !strcmp(routes[j].path, routes[i].path)) {
                log_error("duplicate route", LOG_S("path", routes[i].path));
                return ERR_INVAL;
            }
    }
    const char *ao = cfg->allowed_origins;
    if (ao && (strlen(ao) > 4096 || strpbrk(ao, "\r\n"))) {
        log_error("invalid allowed origins", LOG_S("server", cfg->name));
        return ERR_INVAL;
    }
    struct http_server *srv = calloc(1, sizeof(*srv));
    if (!srv) return ERR_NOMEM;
    srv->cfg = *cfg;
    srv->routes = routes;
    srv->n_routes = n_routes;
    srv->lfd = srv->ep = srv->wake = -1;
    pthread_mutex_init(&srv->mu, NULL);
    pthread_cond_init(&srv->cv, NULL);
    int rc = ERR_NOMEM;
    if (ao && *ao && !(srv->origins = strdup(ao))) goto fail;
    http_fd_budget(&srv->cfg);
    srv->lfd = http_listen(cfg);
    if (srv->lfd < 0) {
        rc = srv->lfd == -2 ? ERR_INVAL : ERR_IO;
        srv->lfd = -1;
        goto fail;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    getsockname(srv->lfd, (struct sockaddr *)&ss, &sl);
    srv->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
    srv->ep = epoll_create1(EPOLL_CLOEXEC);
    srv->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    rc = ERR_IO;
    if (srv->ep < 0 || srv->wake < 0) goto fail;
    struct epoll_event le = {.events = EPOLLIN, .data.ptr = &http_listen_mark};
    struct epoll_event we = {.events = EPOLLIN, .data.ptr = &http_wake_mark};
    if (epoll_ctl(srv->ep, EPOLL_CTL_ADD, srv->lfd, &le) != 0 ||
        epoll_ctl(srv->ep, EPOLL_CTL_ADD, srv->wake, &we) != 0)
        goto fail;
    srv->loop_alive = true;
    if (pthread_create(&srv->thread, NULL, http_service_main, srv) != 0) {
        rc = ERR_NOMEM;
        goto fail;
    }
    srv->thread_started = true;
    log_info("http server listening", LOG_S("server", cfg->name), LOG_S("host", cfg->host),
             LOG_I("port", srv->port));
    srv->cfg.host = NULL; /* borrowed for this call only */
    srv->cfg.allowed_origins = NULL;
    *out = srv;
    return 0;
fail:
    if (srv->lfd >= 0) close(srv->lfd);
    if (srv->ep >= 0) close(srv->ep);
    if (srv->wake >= 0) close(srv->wake);
    free(srv->origins);
    pthread_mutex_destroy(&srv->mu);
    pthread_cond_destroy(&srv->cv);
    free(srv);
    return rc;
}

int http_server_port(const struct http_server *srv)
{
    return srv->port;
}

int http_server_inflight(const struct http_server *srv)
{
    return atomic_load(&srv->inflight);
}

bool http_server_draining(const struct http_server *srv)
{
    return atomic_load(&srv->draining);
}

int http_server_shutdown(struct http_server *srv, int grace_ms)
{
    if (srv->shut_down) return 0;
    atomic_store(&srv->draining, true);
    http_server_wake(srv);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += grace_ms / 1000;
    deadline.tv_nsec += (long)(grace_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    int rc = 0;
    pthread_mutex_lock(&srv->mu);
    while (atomic_load(&srv->inflight) > 0 && srv->loop_alive) {
        if (pthread_cond_timedwait(&srv->cv, &srv->mu, &deadline) == ETIMEDOUT) break;
    }
    if (atomic_load(&srv->inflight) > 0) rc = ERR_TIMEOUT;
    pthread_mutex_unlock(&srv->mu);
    if (rc)
        log_warn("http server grace period over: cancelling", LOG_S("server", srv->cfg.name),
                 LOG_I("inflight", atomic_load(&srv->inflight)));
    atomic_store(&srv->stopping, true);
    http_server_wake(srv);
    if (srv->thread_started) pthread_join(srv->thread, NULL);
    srv->thread_started = false;
    srv->shut_down = true;
    log_info("http server stopped", LOG_S("server", srv->cfg.name));
    return rc;
}

void http_server_free(struct http_server *srv)
{
    if (!srv) return;
    http_server_shutdown(srv, 0);
    for (size_t b = 0; b < HTTP_CLIENT_BUCKETS; b++)
        while (srv->clients[b]) {
            struct http_client *cl = srv->clients[b];
            srv->clients[b] = cl->next;
            free(cl);
        }
    if (srv->lfd >= 0) close(srv->lfd);
    close(srv->ep);
    close(srv->wake);
    free(srv->origins);
    free(srv->woken);
    pthread_mutex_destroy(&srv->mu);
    pthread_cond_destroy(&srv->cv);
    free(srv);
}
