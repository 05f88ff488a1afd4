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
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "server.h"

#define ACCEPT_BATCH 16

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

int listener_open(struct server *srv, struct listener *l, const struct config_listen *addr)
{
    l->addr = *addr;
    l->h.on_event = listener_event;
    l->h.fd = -1;
    int fd = socket(addr->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (addr->addr.ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    /* Accepted sockets inherit TCP_NODELAY: small responses leave at once. */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (bind(fd, (const struct sockaddr *)&addr->addr, addr->addr_len) < 0 ||
        listen(fd, 4096) < 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    /* At start, on the main thread: the generation cannot change under us. */
    int defer_s = (int)(atomic_load(&srv->gen)->cfg.header_timeout_ms / 1000);
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
static bool shed_one(struct server *srv, int lfd)
{
    pthread_mutex_lock(&srv->spare_lock);
    if (srv->spare_fd < 0)
        srv->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    bool shed = false;
    if (srv->spare_fd >= 0) {
        close(srv->spare_fd);
        srv->spare_fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (srv->spare_fd >= 0) {
            answer_busy(srv->spare_fd);
            shed = true;
        }
    }
    pthread_mutex_unlock(&srv->spare_lock);
    return shed;
}

void listener_resume_paused(struct server *srv, struct service *svc)
{
    pthread_mutex_lock(&srv->spare_lock);
    if (srv->spare_fd < 0)
        srv->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    pthread_mutex_unlock(&srv->spare_lock);
    for (unsigned i = 0; i < srv->n_listeners; i++) {
        struct listener *l = &srv->listeners[i];
        if (l->svc == svc && atomic_exchange(&l->paused, false) &&
            !atomic_load_explicit(&srv->stopping, memory_order_relaxed))
            lf_group_rearm(&l->h, EPOLLIN);
    }
}

void listener_event(struct lf_handle *h, uint32_t events)
{
    (void)events;
    struct listener *l = (struct listener *)h;
    struct service *svc = l->svc;
    struct server *srv = svc->srv;
    struct conn *mine[ACCEPT_BATCH];
    unsigned n_mine = 0;
    static _Thread_local int64_t last_warn_ms;
    bool at_once = lf_group_strategy(svc->group) != LF_STRATEGY_THREAD_PER_CONNECTION;
    struct generation *gen = generation_acquire(srv); /* one lock per batch, not per accept */

    for (int i = 0; i < ACCEPT_BATCH; i++) {
        struct sockaddr_storage peer;
        socklen_t plen = sizeof(peer);
        int fd = accept4(h->fd, (struct sockaddr *)&peer, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE) {
                int64_t now = conn_now_ms();
                if (now - last_warn_ms > 1000) {
                    log_warn("out of file descriptors: shedding connections");
                    last_warn_ms = now;
                }
                if (shed_one(srv, h->fd))
                    continue;
                /* Nothing to shed with: leave the listener disarmed until the timer's
                 * next tick, rather than be woken for the same queue at once. */
                atomic_store(&l->paused, true);
                break;
            }
            break; /* EAGAIN, or the listener was shut down */
        }
        /* A connection from a listener of the default class may belong to a class by
         * its client's address. */
        struct service *to = svc;
        if (svc == &srv->svcs[0]) {
            struct service *by_peer = server_class_for_peer(srv, &gen->cfg, (struct sockaddr *)&peer);
            to = by_peer ? by_peer : svc;
        }
        if (atomic_load_explicit(&srv->stopping, memory_order_relaxed) ||
            atomic_load_explicit(&srv->n_conns, memory_order_relaxed) >=
                srv->max_connections ||
            service_full(to)) {
            answer_busy(fd);
            close(fd);
            continue;
        }
        struct conn *c = conn_open(to, gen, fd, (struct sockaddr *)&peer, plen,
                                   (const struct sockaddr *)&l->addr.addr);
        if (!c)
            continue;
        if (to != svc || !at_once) { /* another class's group (or its own thread) reads it */
            conn_wait(c, CONN_NEW, EPOLLIN, atomic_load(&c->deadline_ms));
            continue;
        }
        mine[n_mine++] = c;
    }
    if (!atomic_load_explicit(&srv->stopping, memory_order_relaxed) &&
        !atomic_load(&l->paused))
        lf_group_rearm(h, EPOLLIN);
    generation_release(gen);
    for (unsigned i = 0; i < n_mine; i++)
        http_conn_start(mine[i]);
}
