/* conn.c — connection lifetime, carry-over buffers, and sending with parking. */
#include "conn.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "server.h"
#include "timer.h"

#define FREE_CONNS_MAX 1024
#define FREE_BUFS_MAX 64
#define LINGER_MS 2000

/* The rest of a response, parked when the socket would block: one allocation holding the
 * segments still to send and copies of their memory bytes (the originals were on a stack). */
struct conn_out {
    int file_fd; /* let go of when the response is done: */
    void (*file_release)(void *ctx); /* called if set, else file_fd is closed */
    void *file_release_ctx;
    unsigned n, pos;
    struct out_seg segs[];
};

int64_t conn_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t conn_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int service_init(struct service *svc, struct server *srv, const char *name, unsigned threads,
                 int nice, const struct config_class *cls)
{
    memset(svc, 0, sizeof(*svc));
    svc->srv = srv;
    snprintf(svc->name, sizeof(svc->name), "%s", name);
    svc->max_connections = cls ? cls->max_connections : 0;
    svc->nice = nice;
    svc->timer.fd = -1;
    pthread_mutex_init(&svc->lock, NULL);
    const struct config *cfg = &atomic_load(&srv->gen)->cfg; /* at start, on main */
    svc->group = lf_group_create(name, threads, cfg->concurrency, cfg->promotion, nice);
    if (!svc->group)
        return -1;
    return timer_init(svc);
}

void service_record(struct service *svc, int64_t us)
{
    unsigned b = 0;
    while (b + 1 < SERVICE_LATENCY_BUCKETS && us >= (1ll << b))
        b++;
    atomic_fetch_add_explicit(&svc->requests, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&svc->latency_us_log2[b], 1, memory_order_relaxed);
}

bool service_full(const struct service *svc)
{
    return svc->max_connections &&
           atomic_load_explicit(&svc->n_conns, memory_order_relaxed) >= svc->max_connections;
}

static void list_unlink(struct service *svc, struct conn *c)
{
    pthread_mutex_lock(&svc->lock);
    if (c->prev)
        c->prev->next = c->next;
    else
        svc->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    pthread_mutex_unlock(&svc->lock);
    atomic_fetch_sub_explicit(&svc->n_conns, 1, memory_order_relaxed);
}

static void list_link(struct service *svc, struct conn *c)
{
    pthread_mutex_lock(&svc->lock);
    c->prev = NULL;
    c->next = svc->conns;
    if (svc->conns)
        svc->conns->prev = c;
    svc->conns = c;
    pthread_mutex_unlock(&svc->lock);
    atomic_fetch_add_explicit(&svc->n_conns, 1, memory_order_relaxed);
}

void service_move(struct conn *c, struct service *to)
{
    /* One list at a time, never both locks: two moves in opposite directions cannot
     * deadlock. Meanwhile the connection is in no list, so no sweep can touch it. */
    list_unlink(c->svc, c);
    if (c->registered) /* leave the old group's handle set; the new one adds it */
        lf_group_detach(&c->h, false);
    c->registered = false;
    c->svc = to;
    c->h.group = to->group;
    list_link(to, c);
}

void service_fini(struct service *svc)
{
    while (svc->conns)
        conn_close(svc->conns);
    timer_fini(svc);
    lf_group_destroy(svc->group);
    svc->group = NULL;
    while (svc->free_conns) {
        struct conn *c = svc->free_conns;
        svc->free_conns = c->next;
        free(c);
    }
    while (svc->free_bufs) {
        struct conn_buf *b = svc->free_bufs;
        svc->free_bufs = b->next;
        free(b);
    }
    pthread_mutex_destroy(&svc->lock);
}

struct conn *conn_open(struct service *svc, struct generation *gen, int fd,
                       const struct sockaddr *peer, socklen_t peer_len,
                       const struct sockaddr *local)
{
    pthread_mutex_lock(&svc->lock);
    struct conn *c = svc->free_conns;
    if (c) {
        svc->free_conns = c->next;
        svc->n_free_conns--;
    }
    pthread_mutex_unlock(&svc->lock);
    if (!c && !(c = malloc(sizeof(*c)))) {
        close(fd);
        return NULL;
    }
    memset(c, 0, sizeof(*c));
    c->h.fd = fd;
    c->h.on_event = http_conn_event;
    c->h.group = svc->group;
    c->svc = svc;
    c->local = local;
    if (peer_len > sizeof(c->peer))
        peer_len = sizeof(c->peer);
    memcpy(&c->peer, peer, peer_len);
    c->home = svc;
    generation_hold(gen);
    c->gen = gen;
    atomic_store_explicit(&c->deadline_ms, conn_now_ms() + gen->cfg.header_timeout_ms,
                          memory_order_relaxed);
    list_link(svc, c);
    atomic_fetch_add_explicit(&svc->srv->n_conns, 1, memory_order_relaxed);
    return c;
}

static void conn_out_free(struct conn *c)
{
    if (!c->out)
        return;
    if (c->out->file_release)
        c->out->file_release(c->out->file_release_ctx);
    else if (c->out->file_fd >= 0)
        close(c->out->file_fd);
    free(c->out);
    c->out = NULL;
}

void conn_close(struct conn *c)
{
    struct service *svc = c->svc;
    /* Unlink before close(): the sweep calls shutdown() on listed fds under this lock, so
     * it can never act on a descriptor number that has been closed and reused. */
    list_unlink(svc, c);

    if (c->stream)
        http_stream_abort(c);
    lf_group_detach(&c->h, true); /* a thread of its own leaves after this event */
    close(c->h.fd);
    conn_out_free(c);
    if (c->in)
        conn_buf_put(svc, c->in);
    c->in = NULL;
    free(c->collect);
    c->collect = NULL;
    generation_release(c->gen);
    c->gen = NULL;
    atomic_fetch_sub_explicit(&svc->srv->n_conns, 1, memory_order_relaxed);

    pthread_mutex_lock(&svc->lock);
    if (svc->n_free_conns < FREE_CONNS_MAX) {
        c->next = svc->free_conns;
        svc->free_conns = c;
        svc->n_free_conns++;
        c = NULL;
    }
    pthread_mutex_unlock(&svc->lock);
    free(c);
}

void conn_renew_generation(struct conn *c)
{
    struct server *srv = c->svc->srv;
    if (atomic_load_explicit(&srv->gen, memory_order_relaxed) == c->gen)
        return;
    struct generation *old = c->gen;
    c->gen = generation_acquire(srv);
    generation_release(old);
}

void conn_wait(struct conn *c, enum conn_state state, uint32_t events, int64_t deadline_ms)
{
    atomic_store_explicit(&c->deadline_ms, deadline_ms, memory_order_relaxed);
    atomic_store_explicit(&c->state, (uint8_t)state, memory_order_relaxed);
    int rc;
    bool first = !c->registered;
    if (!first) {
        rc = lf_group_rearm(&c->h, events);
    } else {
        c->registered = true;
        rc = lf_group_add_conn(c->h.group, &c->h, events);
    }
    if (rc < 0) {
        /* A first registration may also fail to start the connection's own thread
         * (thread-per-connection). */
        log_error("%s connection fd %d: %s", first ? "registering" : "re-arming", c->h.fd,
                  strerror(-rc));
        conn_close(c);
    }
    /* From here on another thread may own c: touch nothing. */
}

struct conn_buf *conn_buf_get(struct service *svc)
{
    pthread_mutex_lock(&svc->lock);
    struct conn_buf *b = svc->free_bufs;
    if (b) {
        svc->free_bufs = b->next;
        svc->n_free_bufs--;
    }
    pthread_mutex_unlock(&svc->lock);
    if (!b)
        b = malloc(sizeof(*b));
    if (b)
        b->len = 0;
    return b;
}

void conn_buf_put(struct service *svc, struct conn_buf *b)
{
    pthread_mutex_lock(&svc->lock);
    if (svc->n_free_bufs < FREE_BUFS_MAX) {
        b->next = svc->free_bufs;
        svc->free_bufs = b;
        svc->n_free_bufs++;
        b = NULL;
    }
    pthread_mutex_unlock(&svc->lock);
    free(b);
}

/* --- sending -------------------------------------------------------------------------- */

/* Send segs[*pos..n), advancing them in place as bytes go out.
 * Returns SEND_DONE, SEND_PARKED (the socket would block) or SEND_ERROR. */
static enum send_result send_segs(int fd, struct out_seg *segs, unsigned n, unsigned *pos)
{
    while (*pos < n) {
        struct out_seg *s = &segs[*pos];
        if (s->len == 0) {
            (*pos)++;
            continue;
        }
        if (s->mem) {
            /* Gather this and the following memory segments into one call. */
            struct iovec iov[64];
            unsigned k = 0;
            while (*pos + k < n && k < 64 && segs[*pos + k].mem) {
                iov[k].iov_base = (void *)segs[*pos + k].mem;
                iov[k].iov_len = segs[*pos + k].len;
                k++;
            }
            bool more = *pos + k < n; /* a file follows: let it share the packet */
            struct msghdr mh = {.msg_iov = iov, .msg_iovlen = k};
            ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL | (more ? MSG_MORE : 0));
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                return errno == EAGAIN ? SEND_PARKED : SEND_ERROR;
            }
            size_t left = (size_t)w;
            while (left > 0) {
                struct out_seg *t = &segs[*pos];
                size_t take = left < t->len ? left : t->len;
                t->mem += take;
                t->len -= take;
                left -= take;
                if (t->len == 0)
                    (*pos)++;
            }
            continue;
        }
        off_t off = (off_t)s->off;
        size_t want = s->len > (1u << 30) ? (1u << 30) : (size_t)s->len;
        ssize_t w = sendfile(fd, s->fd, &off, want);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN ? SEND_PARKED : SEND_ERROR;
        }
        if (w == 0)
            return SEND_ERROR; /* the file shrank under us: the length we promised is a lie */
        s->off += (uint64_t)w;
        s->len -= (uint64_t)w;
    }
    return SEND_DONE;
}

/* Copy what is left of a response onto the connection; the response's file goes with it. */
static int park(struct conn *c, struct out_seg *segs, unsigned n, unsigned pos,
                struct response *r)
{
    size_t bytes = 0;
    for (unsigned i = pos; i < n; i++)
        if (segs[i].mem)
            bytes += segs[i].len;
    struct conn_out *o = malloc(sizeof(*o) + (n - pos) * sizeof(struct out_seg) + bytes);
    if (!o)
        return -1;
    char *data = (char *)(o->segs + (n - pos));
    o->n = n - pos;
    o->pos = 0;
    o->file_fd = r->file_fd;
    o->file_release = r->file_release;
    o->file_release_ctx = r->file_release_ctx;
    for (unsigned i = pos; i < n; i++) {
        o->segs[i - pos] = segs[i];
        if (segs[i].mem) {
            memcpy(data, segs[i].mem, segs[i].len);
            o->segs[i - pos].mem = data;
            data += segs[i].len;
        }
    }
    c->out = o;
    return 0;
}

enum send_result conn_send_response(struct conn *c, struct response *r)
{
    struct out_seg segs[RESP_MAX_SEGS + 1];
    unsigned n = 1, pos = 0;
    segs[0] = (struct out_seg){.mem = r->head, .fd = -1, .len = r->head_len};
    if (!r->head_only && !r->no_length) {
        memcpy(segs + 1, r->segs, r->n_segs * sizeof(segs[0]));
        n += r->n_segs;
    }
    enum send_result res = send_segs(c->h.fd, segs, n, &pos);
    if (res == SEND_PARKED) {
        if (park(c, segs, n, pos, r) < 0) {
            res = SEND_ERROR;
        } else { /* the file belongs to the parked response now */
            r->file_fd = -1;
            r->file_release = NULL;
        }
    }
    resp_file_close(r);
    if (r->release) { /* sent, or copied by park(): the module's memory is free to go */
        r->release(r->release_ctx);
        r->release = NULL;
    }
    return res;
}

enum send_result conn_send_pending(struct conn *c)
{
    struct conn_out *o = c->out;
    enum send_result res = send_segs(c->h.fd, o->segs, o->n, &o->pos);
    if (res != SEND_PARKED)
        conn_out_free(c);
    return res;
}

/* --- closing ------------------------------------------------------------------------ */

/* Read and drop what the client sends. Returns true when the client has closed. */
static bool drain(int fd)
{
    char sink[4096];
    for (int i = 0; i < 16; i++) {
        ssize_t n = read(fd, sink, sizeof(sink));
        if (n > 0)
            continue;
        if (n < 0 && errno == EINTR)
            continue;
        return !(n < 0 && errno == EAGAIN);
    }
    return false;
}

void conn_linger(struct conn *c)
{
    shutdown(c->h.fd, SHUT_WR);
    if (drain(c->h.fd)) {
        conn_close(c);
        return;
    }
    conn_wait(c, CONN_LINGER, EPOLLIN | EPOLLRDHUP, conn_now_ms() + LINGER_MS);
}

void conn_linger_event(struct conn *c)
{
    if (drain(c->h.fd) || atomic_load_explicit(&c->expired, memory_order_relaxed)) {
        conn_close(c);
        return;
    }
    /* Keep the original deadline: lingering is bounded in total, not per read. */
    conn_wait(c, CONN_LINGER, EPOLLIN | EPOLLRDHUP,
              atomic_load_explicit(&c->deadline_ms, memory_order_relaxed));
}
