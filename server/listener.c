/* listener.c — listening sockets and the accept step of the Leader/Followers loop.
 *
 * A listener is a handle like any other, registered EPOLLONESHOT: the thread that gets
 * its event has already promoted a successor. It accepts what is queued (a bounded
 * batch), re-arms the listener so the next leader can accept more, and then processes
 * the new connections itself, one after the other: TCP_DEFER_ACCEPT means their first
 * requests are usually already there to be read, and a connection answered and closed
 * (no keep-alive) never enters the handle set at all. One that has more to say (keep-alive,
 * a partial request) is registered then, like any other.
 * (Half-Sync/Half-Async: the listener's event is processed by a worker, which may do the
 * same. Thread-per-Connection: every connection is registered, for a thread of its own.)
 */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "listener.h"

#include "clock.h"
#include "log.h"

#define ACCEPT_BATCH 16
/* Each connection started in an accept batch may end its event with one handle to run again
 * (a proxied request's kept upstream socket): the batch's callback keeps them all. */
static_assert(ACCEPT_BATCH <= LF_AGAIN_MAX, "every started connection's handle runs again");

/* Read and drop what the client has sent so far (a bounded amount; the socket does not
 * block). A socket closed with unread input sends a reset, which can destroy the answer
 * before the client reads it. */
static void drop_input(int fd)
{
    char sink[4096];
    for (int i = 0; i < 16 && read(fd, sink, sizeof(sink)) > 0; i++)
        ;
}

/* Answer a connection refused at accept (over max_connections, its class full, out of
 * descriptors) with the same 503 as any other, Date and Server included, and end it
 * gracefully: our side is shut down after the answer, and what the client sent is read
 * first, so the close that follows is a FIN, not a reset. */
static void answer_busy(int fd)
{
    struct response resp;
    resp_init(&resp);
    resp_error(&resp, 503);
    resp_header(&resp, "Retry-After", "1");
    resp_finish(&resp, false);
    drop_input(fd);
    struct iovec iov[2] = {{resp.head, resp.head_len}, {NULL, 0}};
    if (resp.n_segs == 1)
        iov[1] = (struct iovec){(void *)resp.segs[0].mem, resp.segs[0].len};
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 2};
    ssize_t w = sendmsg(fd, &msg, MSG_NOSIGNAL); /* a fresh socket's buffer takes it whole */
    (void)w;
    shutdown(fd, SHUT_WR);
    drop_input(fd);
}

static void listener_event(struct lf_handle *h, uint32_t events);

void listener_spare_init(struct listener_spare *spare)
{
    pthread_mutex_init(&spare->lock, NULL);
    spare->fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

void listener_spare_fini(struct listener_spare *spare)
{
    if (spare->fd >= 0)
        close(spare->fd);
    spare->fd = -1;
}

/* One of the listen parameters' socket options; as nginx's, one the kernel refuses is
 * logged and the socket used without it. */
static void set_opt(int fd, const struct config_listen *addr, int level, int name,
                    const char *what, int value)
{
    if (setsockopt(fd, level, name, &value, sizeof(value)) < 0)
        log_warn("listen on %s: setsockopt(%s, %d): %s; ignored", addr->text, what, value,
                 strerror(errno));
}

/* Before bind: the buffers (accepted connections inherit them) and keep-alive probes, as
 * the `listen` said (nginx's rcvbuf=, sndbuf=, so_keepalive=). */
static void set_socket_params(int fd, const struct config_listen *addr)
{
    if (addr->rcvbuf_bytes)
        set_opt(fd, addr, SOL_SOCKET, SO_RCVBUF, "SO_RCVBUF", addr->rcvbuf_bytes);
    if (addr->sndbuf_bytes)
        set_opt(fd, addr, SOL_SOCKET, SO_SNDBUF, "SO_SNDBUF", addr->sndbuf_bytes);
    if (addr->addr.ss_family == AF_UNIX || !addr->so_keepalive)
        return;
    set_opt(fd, addr, SOL_SOCKET, SO_KEEPALIVE, "SO_KEEPALIVE", addr->so_keepalive != 2);
    if (addr->keepidle_s)
        set_opt(fd, addr, IPPROTO_TCP, TCP_KEEPIDLE, "TCP_KEEPIDLE", addr->keepidle_s);
    if (addr->keepintvl_s)
        set_opt(fd, addr, IPPROTO_TCP, TCP_KEEPINTVL, "TCP_KEEPINTVL", addr->keepintvl_s);
    if (addr->keepcnt)
        set_opt(fd, addr, IPPROTO_TCP, TCP_KEEPCNT, "TCP_KEEPCNT", addr->keepcnt);
}

/* listen()'s queue: `backlog=N`, else 4096 (the kernel caps it at net.core.somaxconn). */
static int backlog_of(const struct config_listen *addr)
{
    return addr->backlog ? addr->backlog : 4096;
}

int listener_claim(const struct config_listen *addr)
{
    int fd = socket(addr->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    int v6only = !addr->ipv6only_off;
    if (addr->addr.ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only));
    /* Without SO_REUSEPORT this bind fails if anyone listens there, with or without it. */
    int rc = bind(fd, (const struct sockaddr *)&addr->addr, addr->addr_len);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

/* Whether a process listens on the Unix socket at path: a connection to it is taken. */
static bool unix_in_use(const struct config_listen *addr)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return true;
    bool used = connect(fd, (const struct sockaddr *)&addr->addr, addr->addr_len) == 0 ||
                errno != ECONNREFUSED;
    close(fd);
    return used;
}

/* A Unix-domain listener: one socket (no SO_REUSEPORT: the kernel does not spread a Unix
 * socket's connections), its file readable and writable by all as nginx makes it. A
 * socket file nobody listens on (left by a process that was killed) is replaced; one in
 * use is "address already in use", as a TCP port is. */
static int open_unix(struct listener *l, const struct config_listen *addr)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    const char *path = ((const struct sockaddr_un *)&addr->addr)->sun_path;
    set_socket_params(fd, addr);
    int rc = bind(fd, (const struct sockaddr *)&addr->addr, addr->addr_len);
    if (rc < 0 && errno == EADDRINUSE && !unix_in_use(addr)) {
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode) && unlink(path) == 0) {
            log_info("listen on %s: replacing a stale socket file", addr->text);
            rc = bind(fd, (const struct sockaddr *)&addr->addr, addr->addr_len);
        } else {
            errno = EADDRINUSE;
        }
    }
    if (rc < 0 || listen(fd, backlog_of(addr)) < 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    if (chmod(path, 0666) < 0)
        log_warn("listen on %s: chmod: %s", addr->text, strerror(errno));
    l->h.fd = fd;
    return 0;
}

int listener_accept_for(struct listener *l, const struct config_listen *ls, unsigned n)
{
    const struct sockaddr_in *w4 = (const struct sockaddr_in *)&l->addr.addr;
    for (unsigned i = 0; i < n; i++) {
        const struct sockaddr_in *a4 = (const struct sockaddr_in *)&ls[i].addr;
        if (!ls[i].via_wildcard || ls[i].addr.ss_family != l->addr.addr.ss_family ||
            a4->sin_port != w4->sin_port) /* sin6_port sits at sin_port's offset */
            continue;
        if (!l->via && !(l->via = calloc(n, sizeof(*l->via))))
            return -1;
        l->via[l->n_via++] = ls[i].addr;
    }
    return 0;
}

/* The local address of connection fd accepted by l: the listener's, or one of those it
 * accepts for (a wildcard socket's). Points into l: the listener outlives its connections. */
static const struct sockaddr *local_of(const struct listener *l, int fd)
{
    if (!l->n_via)
        return (const struct sockaddr *)&l->addr.addr;
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
        return (const struct sockaddr *)&l->addr.addr;
    for (unsigned i = 0; i < l->n_via; i++) {
        if (ss.ss_family == AF_INET &&
            ((struct sockaddr_in *)&ss)->sin_addr.s_addr ==
                ((struct sockaddr_in *)&l->via[i])->sin_addr.s_addr)
            return (const struct sockaddr *)&l->via[i];
        if (ss.ss_family == AF_INET6 &&
            memcmp(&((struct sockaddr_in6 *)&ss)->sin6_addr,
                   &((struct sockaddr_in6 *)&l->via[i])->sin6_addr, 16) == 0)
            return (const struct sockaddr *)&l->via[i];
    }
    return (const struct sockaddr *)&l->addr.addr;
}

void listener_close(struct listener *l)
{
    free(l->via);
    l->via = NULL;
    l->n_via = 0;
    if (l->h.fd < 0)
        return;
    close(l->h.fd);
    l->h.fd = -1;
    if (l->addr.addr.ss_family == AF_UNIX) { /* as nginx: the socket file goes with it */
        const char *path = ((const struct sockaddr_un *)&l->addr.addr)->sun_path;
        if (unlink(path) < 0 && errno != ENOENT)
            log_warn("removing %s: %s", l->addr.text, strerror(errno));
    }
}

int listener_open(struct listener *l, struct listener_spare *spare,
                  const struct config_listen *addr, int64_t header_timeout_ms, bool shared)
{
    l->addr = *addr;
    l->spare = spare;
    l->h.on_event = listener_event;
    l->h.fd = -1;
    if (addr->addr.ss_family == AF_UNIX)
        return open_unix(l, addr);
    int fd = socket(addr->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (shared && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    /* `ipv6only=off`: a [::] socket takes IPv4 connections too (as ::ffff:a.b.c.d) */
    int v6only = !addr->ipv6only_off;
    if (addr->addr.ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only));
    /* Accepted sockets inherit TCP_NODELAY: small responses leave at once. */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    set_socket_params(fd, addr);
    if (bind(fd, (const struct sockaddr *)&addr->addr, addr->addr_len) < 0 ||
        listen(fd, backlog_of(addr)) < 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    if (addr->fastopen) /* the queue of connections whose SYN carried data (RFC 7413) */
        set_opt(fd, addr, IPPROTO_TCP, TCP_FASTOPEN, "TCP_FASTOPEN", addr->fastopen_qlen);
    /* Whether `deferred` is said or not: a connection is handed over once it has sent
     * something, or when the header timeout has passed. */
    int defer_s = (int)(header_timeout_ms / 1000);
    defer_s = defer_s < 1 ? 1 : defer_s;
    setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer_s, sizeof(defer_s));

    /* Learn the port the kernel chose when 0 was asked, and say where we listen. */
    socklen_t len = sizeof(l->addr.addr);
    getsockname(fd, (struct sockaddr *)&l->addr.addr, &len);
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port;
    if (l->addr.addr.ss_family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&l->addr.addr;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
        port = ntohs(a->sin6_port);
        snprintf(l->addr.text, sizeof(l->addr.text), "[%s]:%u", host, port);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&l->addr.addr;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
        port = ntohs(a->sin_port);
        snprintf(l->addr.text, sizeof(l->addr.text), "%s:%u", host, port);
    }
    l->h.fd = fd;
    return 0;
}

/* Out of descriptors: free the spare, take one pending connection, answer it 503, and keep
 * that socket (shut down, so the client sees its answer end) as the new spare: the slot
 * never becomes free for another thread to take. Returns false if nothing could be shed
 * (no spare, or the slot went elsewhere), and the caller must not spin on the listener. */
static bool shed_one(struct listener_spare *spare, int lfd, bool tls)
{
    pthread_mutex_lock(&spare->lock);
    if (spare->fd < 0)
        spare->fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    bool shed = false;
    if (spare->fd >= 0) {
        close(spare->fd);
        spare->fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (spare->fd >= 0) {
            if (!tls) /* a TLS client would read a plain answer as garbage: just closed */
                answer_busy(spare->fd);
            shed = true;
        }
    }
    pthread_mutex_unlock(&spare->lock);
    return shed;
}

/* Arm the listener for its next connections. If that fails, it is left paused, for the
 * tick to try again: a listener out of the set would accept nothing ever again. */
static void rearm(struct listener *l)
{
    int rc = lf_group_rearm(&l->h, EPOLLIN);
    if (rc < 0) {
        log_error("listener %s: re-arming: %s; trying again on the next tick", l->addr.text,
                  strerror(-rc));
        atomic_store(&l->paused, true);
    }
}

bool listener_resume_paused(struct listener *first)
{
    if (!first)
        return false;
    struct listener_spare *spare = first->spare;
    pthread_mutex_lock(&spare->lock);
    if (spare->fd < 0)
        spare->fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    bool short_of_fds = spare->fd < 0;
    pthread_mutex_unlock(&spare->lock);
    for (struct listener *l = first; l; l = l->next) {
        const atomic_bool *stopping = &l->svc->shared->stopping;
        if (atomic_exchange(&l->paused, false) &&
            !atomic_load_explicit(stopping, memory_order_relaxed))
            rearm(l);
    }
    return short_of_fds;
}

static void listener_event(struct lf_handle *h, uint32_t events)
{
    (void)events;
    struct listener *l = (struct listener *)h;
    struct http_service *svc = l->svc;
    struct http_shared *shared = svc->shared;
    struct conn *mine[ACCEPT_BATCH];
    unsigned n_mine = 0;
    static _Thread_local int64_t last_warn_ms;
    bool at_once = lf_group_strategy(h->group) != LF_STRATEGY_THREAD_PER_CONNECTION;
    /* One lock per batch, not per accept. */
    struct generation *gen = generation_acquire(&shared->current);

    for (int i = 0; i < ACCEPT_BATCH; i++) {
        struct sockaddr_storage peer;
        socklen_t plen = sizeof(peer);
        int fd = accept4(h->fd, (struct sockaddr *)&peer, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE) {
                int64_t now = clock_now_ms();
                if (now - last_warn_ms > 1000) {
                    log_warn("out of file descriptors: shedding connections");
                    last_warn_ms = now;
                }
                if (shed_one(l->spare, h->fd, l->addr.ssl))
                    continue;
                /* Nothing to shed with: leave the listener disarmed until the timer's
                 * next tick, rather than be woken for the same queue at once. */
                atomic_store(&l->paused, true);
                break;
            }
            break; /* EAGAIN, or the listener was shut down */
        }
        atomic_fetch_add_explicit(&shared->accepted, 1, memory_order_relaxed);
        /* A connection from a listener of the default class may belong to a class by
         * its client's address. */
        struct http_service *to = svc;
        if (svc == shared->services[0]) {
            struct http_service *by_peer =
                http_class_for_peer(shared, &gen->cfg, (struct sockaddr *)&peer);
            to = by_peer ? by_peer : svc;
        }
        if (atomic_load_explicit(&shared->stopping, memory_order_relaxed) ||
            atomic_load_explicit(&shared->n_conns, memory_order_relaxed) >=
                shared->max_connections ||
            conn_pool_full(&to->pool)) {
            if (!l->addr.ssl) /* a TLS client would read a plain 503 as garbage */
                answer_busy(fd);
            close(fd);
            continue;
        }
        /* Its own class's connections stay in this listener's group. */
        struct conn *c = http_conn_open(to, to == svc ? h->group : NULL, gen, fd,
                                        (struct sockaddr *)&peer, plen,
                                        local_of(l, fd));
        if (!c)
            continue;
        atomic_fetch_add_explicit(&shared->handled, 1, memory_order_relaxed);
        if (to != svc || !at_once) { /* another class's group (or its own thread) reads it */
            conn_wait(c, CONN_NEW, EPOLLIN, atomic_load(&c->deadline_ms));
            continue;
        }
        mine[n_mine++] = c;
    }
    if (!atomic_load_explicit(&shared->stopping, memory_order_relaxed) &&
        !atomic_load(&l->paused))
        rearm(l);
    generation_release(gen);
    for (unsigned i = 0; i < n_mine; i++)
        http_conn_start(mine[i]);
}
