/* conn.c — connection lifetime, the pool, carry-over buffers, and sending with parking. */
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
#include <unistd.h>

#include "clock.h"
#include "generation.h"
#include "log.h"

#define FREE_CONNS_MAX 1024
#define FREE_BUFS_MAX 64
#define LINGER_MS 2000
/* The refusals of max_parked_size are logged at most this often: under the flood the cap
 * is for, one line a refusal would be a flood of its own. */
#define PARK_LOG_INTERVAL_MS 10000

/* The rest of a response, parked when the socket would block: one allocation holding the
 * segments still to send and copies of their memory bytes (the originals were on a stack).
 *
 * Its send deadline has two parts. send_timeout (the layer above's) bounds each wait for
 * the socket, and restarts whenever bytes go out; alone it lets a client that reads a
 * little before each timeout hold the response for ever. send_min_rate bounds the whole:
 * the response must have gone out at that average rate since it was parked, after a
 * grace of one send_timeout (Apache's MinRate, for sending). Credit earned by reading fast
 * carries over, so an honest client that stalls for a moment is not cut. */
struct conn_out {
    int file_fd; /* let go of when the response is done: */
    void (*file_release)(void *ctx); /* called if set, else file_fd is closed */
    void *file_release_ctx;
    uint64_t mem_bytes;   /* copied bytes, counted in parked_bytes (the server's) */
    uint64_t sent_bytes;  /* sent since parked */
    int64_t grace_end_ms; /* the first wait's deadline (parked + send_timeout); 0 before */
    unsigned min_rate;    /* send_min_rate, bytes per second; 0: no minimum */
    bool rate_bound;      /* the last wait's deadline was the minimum rate's */
    /* limit_rate (see conn.h): bytes per second, 0 if not paced; the bytes sent at full
     * speed first; the request's start; the response's bytes sent so far (head included);
     * and, when the pace holds the rest back, when it may go on (0: not held back). */
    uint64_t pace_rate, pace_after;
    int64_t pace_start_ms;
    uint64_t pace_sent;
    int64_t wake_ms;
    unsigned n, pos;
    struct out_seg segs[];
};

/* Process-wide: the memory bytes of every parked response of the server, against
 * max_parked_size; and when a refusal was last logged, with those not logged since. */
static _Atomic uint64_t parked_bytes;
static _Atomic int64_t park_refused_logged_ms = INT64_MIN / 2;
static atomic_uint park_refused_unlogged;

void conn_pool_init(struct conn_pool *pool, struct lf_group *const *groups, unsigned n,
                    size_t conn_size, unsigned max_connections, atomic_uint *n_total)
{
    memset(pool, 0, sizeof(*pool));
    pool->groups = groups;
    pool->n_groups = n;
    pool->conn_size = conn_size < sizeof(struct conn) ? sizeof(struct conn) : conn_size;
    pool->max_connections = max_connections;
    pool->n_total = n_total;
    pthread_mutex_init(&pool->lock, NULL);
}

void conn_pool_count_states(struct conn_pool *pool, unsigned counts[CONN_STATES])
{
    memset(counts, 0, CONN_STATES * sizeof(counts[0]));
    pthread_mutex_lock(&pool->lock);
    for (const struct conn *c = pool->conns; c; c = c->next) {
        unsigned st = atomic_load_explicit(&c->state, memory_order_relaxed);
        if (st < CONN_STATES)
            counts[st]++;
    }
    pthread_mutex_unlock(&pool->lock);
}

bool conn_pool_full(const struct conn_pool *pool)
{
    return pool->max_connections &&
           atomic_load_explicit(&pool->n_conns, memory_order_relaxed) >= pool->max_connections;
}

/* The group a connection of the pool goes to when nothing chose one: spread by descriptor. */
static struct lf_group *pool_group(const struct conn_pool *pool, int fd)
{
    return pool->groups[(unsigned)fd % pool->n_groups];
}

/* Out of the pool's timed list (its lock held): the last entry takes its place. */
static void timed_unlink(struct conn_pool *pool, struct conn *c)
{
    for (unsigned i = 0; i < pool->n_timed; i++)
        if (pool->timed[i].c == c) {
            pool->timed[i] = pool->timed[--pool->n_timed];
            break;
        }
}

static void list_unlink(struct conn_pool *pool, struct conn *c)
{
    pthread_mutex_lock(&pool->lock);
    if (atomic_load_explicit(&c->state, memory_order_relaxed) == CONN_TIMED)
        timed_unlink(pool, c); /* closed while parked (a stop), or woken: no harm */
    if (c->prev)
        c->prev->next = c->next;
    else
        pool->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    pthread_mutex_unlock(&pool->lock);
    atomic_fetch_sub_explicit(&pool->n_conns, 1, memory_order_relaxed);
}

static void list_link(struct conn_pool *pool, struct conn *c)
{
    pthread_mutex_lock(&pool->lock);
    c->prev = NULL;
    c->next = pool->conns;
    if (pool->conns)
        pool->conns->prev = c;
    pool->conns = c;
    pthread_mutex_unlock(&pool->lock);
    atomic_fetch_add_explicit(&pool->n_conns, 1, memory_order_relaxed);
}

void conn_move(struct conn *c, struct conn_pool *to)
{
    /* One list at a time, never both locks: two moves in opposite directions cannot
     * deadlock. Meanwhile the connection is in no list, so no sweep can touch it. */
    list_unlink(c->pool, c);
    if (c->registered) /* leave the old group's handle set; the new one adds it */
        lf_group_detach(&c->h, false);
    c->registered = false;
    c->pool = to;
    c->h.group = pool_group(to, c->h.fd);
    list_link(to, c);
}

void conn_pool_fini(struct conn_pool *pool)
{
    while (pool->conns)
        conn_close(pool->conns);
    while (pool->free_conns) {
        struct conn *c = pool->free_conns;
        pool->free_conns = c->next;
        free(c);
    }
    free(pool->timed);
    pool->timed = NULL;
    while (pool->free_bufs) {
        struct conn_buf *b = pool->free_bufs;
        pool->free_bufs = b->next;
        free(b);
    }
    pthread_mutex_destroy(&pool->lock);
}

/* Has the peer closed its side, with nothing unread before the end? */
static bool peer_closed(int fd)
{
    char b;
    return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

void conn_set_wake_fd(struct conn *c, int fd, bool on_peer_close)
{
    pthread_mutex_lock(&c->pool->lock);
    c->wake_fd = fd;
    c->wake_on_peer_close = on_peer_close;
    atomic_store_explicit(&c->woken, false, memory_order_relaxed);
    pthread_mutex_unlock(&c->pool->lock);
}

void conn_pool_set_waker(struct conn_pool *pool, struct timer *waker)
{
    pool->waker = waker;
}

/* Make a parked connection ready (pool lock held): false if its owner has not let go yet. */
static bool wake_one(struct conn_pool *pool, struct conn *c)
{
    if (!atomic_exchange_explicit(&c->parked, false, memory_order_acq_rel))
        return false;
    timed_unlink(pool, c);
    if (!lf_group_wake(&c->h)) /* its deadline still holds: the sweep will end it */
        log_error("connection fd %d: cannot wake it: %s", c->h.fd, strerror(errno));
    /* From here on another thread may own c. */
    return true;
}

void conn_pool_wake(struct conn_pool *pool, int64_t now_ms)
{
    int64_t next = 0;
    pthread_mutex_lock(&pool->lock);
    for (unsigned i = 0; i < pool->n_timed;) {
        struct conn_timed *t = &pool->timed[i];
        int64_t at = t->wake_ms;
        if (at <= now_ms) {
            if (wake_one(pool, t->c))
                continue; /* the last entry moved here */
            at = now_ms + 1; /* its owner has not let go yet */
        }
        if (!next || at < next)
            next = at;
        i++;
    }
    pool->wake_armed_ms = next;
    if (next && pool->waker)
        timer_arm_at(pool->waker, next);
    pthread_mutex_unlock(&pool->lock);
}

void conn_park(struct conn *c, int64_t wake_ms, int64_t deadline_ms)
{
    struct conn_pool *pool = c->pool;
    c->rd_drained = c->wr_blocked = false;
    atomic_store_explicit(&c->deadline_ms, deadline_ms, memory_order_relaxed);
    atomic_store_explicit(&c->state, (uint8_t)CONN_TIMED, memory_order_relaxed);
    pthread_mutex_lock(&pool->lock);
    if (pool->n_timed == pool->cap_timed) {
        unsigned cap = pool->cap_timed ? pool->cap_timed * 2 : 64;
        struct conn_timed *t = realloc(pool->timed, cap * sizeof(*t));
        if (!t) {
            pthread_mutex_unlock(&pool->lock);
            log_error("parking connection fd %d: out of memory", c->h.fd);
            conn_close(c);
            return;
        }
        pool->timed = t;
        pool->cap_timed = cap;
    }
    pool->timed[pool->n_timed++] = (struct conn_timed){c, wake_ms};
    if (pool->waker && (!pool->wake_armed_ms || wake_ms < pool->wake_armed_ms)) {
        pool->wake_armed_ms = wake_ms;
        timer_arm_at(pool->waker, wake_ms);
    }
    pthread_mutex_unlock(&pool->lock);
    int rc;
    if (!c->registered) {
        c->registered = true;
        rc = lf_group_add_conn(c->h.group, &c->h, 0);
    } else {
        rc = lf_group_park(&c->h);
    }
    if (rc < 0) {
        log_error("parking connection fd %d: %s", c->h.fd, strerror(-rc));
        conn_close(c);
        return;
    }
    /* Nobody can take it now but the waker (or a stop), which waits for this. */
    atomic_store_explicit(&c->parked, true, memory_order_release);
}


void conn_pool_sweep(struct conn_pool *pool, int64_t now_ms, bool stopping)
{
    pthread_mutex_lock(&pool->lock);
    for (struct conn *c = pool->conns; c; c = c->next) {
        uint8_t st = atomic_load_explicit(&c->state, memory_order_relaxed);
        /* A connection waiting through its wake_fd keeps that deadline even if an earlier
         * sweep, seeing a state gone stale, marked it expired while a request was being
         * started: its socket's shutdown woke nothing it waits on. */
        if (st == CONN_STREAM && c->wake_fd >= 0) {
            if (!atomic_load_explicit(&c->woken, memory_order_relaxed) &&
                (atomic_load_explicit(&c->deadline_ms, memory_order_relaxed) <= now_ms ||
                 (c->wake_on_peer_close && peer_closed(c->h.fd)))) {
                atomic_store_explicit(&c->woken, true, memory_order_relaxed);
                shutdown(c->wake_fd, SHUT_RDWR);
            }
            continue;
        }
        if (atomic_load_explicit(&c->expired, memory_order_relaxed))
            continue;
        int64_t dl = atomic_load_explicit(&c->deadline_ms, memory_order_relaxed);
        /* Parked until a time: a stop ends it now, and so does its deadline (which the
         * waker's time comes before, unless its owner never let go). */
        if (st == CONN_TIMED && atomic_load_explicit(&c->parked, memory_order_acquire)) {
            if (stopping || dl <= now_ms) {
                atomic_store_explicit(&c->expired, true, memory_order_relaxed);
                shutdown(c->h.fd, SHUT_RDWR);
                wake_one(pool, c);
            }
            continue;
        }
        bool idle = st == CONN_NEW || st == CONN_IDLE;
        if (dl > now_ms && !(stopping && idle))
            continue;
        if (st == CONN_STREAM) /* the layer above keeps this deadline itself */
            continue;
        atomic_store_explicit(&c->expired, true, memory_order_relaxed);
        shutdown(c->h.fd, st == CONN_SEND || st == CONN_TIMED ? SHUT_RDWR : SHUT_RD);
    }
    pthread_mutex_unlock(&pool->lock);
}

bool conn_pool_close_idle(struct conn_pool *pool)
{
    bool found = false;
    pthread_mutex_lock(&pool->lock);
    for (struct conn *c = pool->conns; c && !found; c = c->next) {
        if (atomic_load_explicit(&c->state, memory_order_relaxed) != CONN_IDLE ||
            atomic_load_explicit(&c->expired, memory_order_relaxed))
            continue;
        atomic_store_explicit(&c->expired, true, memory_order_relaxed);
        shutdown(c->h.fd, SHUT_RD);
        found = true;
    }
    pthread_mutex_unlock(&pool->lock);
    return found;
}

struct conn *conn_open(struct conn_pool *pool, struct lf_group *group, int fd,
                       const struct sockaddr *peer, socklen_t peer_len,
                       const struct sockaddr *local, int64_t deadline_ms, lf_event_fn on_event,
                       conn_close_fn on_close)
{
    pthread_mutex_lock(&pool->lock);
    struct conn *c = pool->free_conns;
    if (c) {
        pool->free_conns = c->next;
        pool->n_free_conns--;
    }
    pthread_mutex_unlock(&pool->lock);
    if (!c) {
        if (!(c = malloc(pool->conn_size))) {
            close(fd);
            return NULL;
        }
        atomic_init(&c->h.edge_state, 0);
    }
    /* All but the handle's edge_state, which an event of the connection that used this
     * memory before may still be reading (see lf_group.c): its incarnation lives on. */
    memset((char *)c + offsetof(struct conn, pool), 0,
           pool->conn_size - offsetof(struct conn, pool));
    c->wake_fd = -1;
    c->h.edge = false;
    c->h.armed = 0;
    atomic_store_explicit(&c->h.handoff, 0, memory_order_relaxed);
    c->h.fd = fd;
    c->h.on_event = on_event;
    c->h.group = group ? group : pool_group(pool, fd);
    c->pool = pool;
    c->on_close = on_close;
    c->local = local;
    if (peer_len > sizeof(c->peer))
        peer_len = sizeof(c->peer);
    memcpy(&c->peer, peer, peer_len);
    atomic_store_explicit(&c->deadline_ms, deadline_ms, memory_order_relaxed);
    list_link(pool, c);
    atomic_fetch_add_explicit(pool->n_total, 1, memory_order_relaxed);
    return c;
}

static void conn_out_free(struct conn *c)
{
    if (!c->out)
        return;
    atomic_fetch_sub_explicit(&parked_bytes, c->out->mem_bytes, memory_order_relaxed);
    if (c->out->file_release)
        c->out->file_release(c->out->file_release_ctx);
    else if (c->out->file_fd >= 0)
        close(c->out->file_fd);
    free(c->out);
    c->out = NULL;
}

/* A parked response that went out slower than send_min_rate: the connection is reset, not
 * closed, as nginx's reset_timedout_connection does. A close would leave what the socket
 * has queued (megabytes, with the send buffer tuned up) to trickle out for as long as
 * the client cares to read it; the reset lets the kernel free it now. */
static void rate_cut(struct conn *c)
{
    log_info("connection fd %d: reset: the response went out slower than send_min_rate "
             "(%llu bytes since it was parked)", c->h.fd,
             (unsigned long long)c->out->sent_bytes);
    struct linger reset = {.l_onoff = 1, .l_linger = 0};
    setsockopt(c->h.fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
}

void conn_close(struct conn *c)
{
    struct conn_pool *pool = c->pool;
    /* Unlink before close(): the sweep calls shutdown() on listed fds under this lock, so
     * it can never act on a descriptor number that has been closed and reused. */
    list_unlink(pool, c);

    if (c->out && c->out->rate_bound && atomic_load_explicit(&c->expired, memory_order_relaxed))
        rate_cut(c);
    if (c->on_close)
        c->on_close(c);
    lf_group_detach(&c->h, true); /* a thread of its own leaves after this event */
    if (c->tls) {
        if (!atomic_load_explicit(&c->expired, memory_order_relaxed))
            conn_tls_shutdown(c);
        conn_tls_free(c);
    }
    close(c->h.fd);
    conn_out_free(c);
    if (c->in)
        conn_buf_put(pool, c->in);
    c->in = NULL;
    atomic_fetch_sub_explicit(pool->n_total, 1, memory_order_relaxed);

    pthread_mutex_lock(&pool->lock);
    /* An edge-triggered connection's memory is never freed while the groups run: an event
     * fetched before the close may still name it (lf_group.c). */
    if (pool->n_free_conns < FREE_CONNS_MAX || c->h.edge) {
        c->next = pool->free_conns;
        pool->free_conns = c;
        pool->n_free_conns++;
        c = NULL;
    }
    pthread_mutex_unlock(&pool->lock);
    free(c);
}

/* A parked response's deadline: the layer above's (send_timeout from now), or sooner if
 * the response has gone out slower than send_min_rate since it was parked. */
static int64_t out_deadline(struct conn_out *o, int64_t deadline_ms)
{
    if (!o->min_rate)
        return deadline_ms;
    if (!o->grace_end_ms)
        o->grace_end_ms = deadline_ms;
    uint64_t earned_ms = o->sent_bytes * 1000 / o->min_rate;
    int64_t by_rate = earned_ms > (uint64_t)INT32_MAX * 1000
                          ? INT64_MAX
                          : o->grace_end_ms + (int64_t)earned_ms;
    o->rate_bound = by_rate < deadline_ms;
    return o->rate_bound ? by_rate : deadline_ms;
}

void conn_wait(struct conn *c, enum conn_state state, uint32_t events, int64_t deadline_ms)
{
    if (state == CONN_SEND && c->out && c->out->wake_ms) {
        /* Held back by limit_rate: send_timeout counts from when it may go on. */
        int64_t wake = c->out->wake_ms;
        conn_park(c, wake, wake + (deadline_ms - clock_now_ms()));
        return;
    }
    if (state == CONN_SEND && c->out)
        deadline_ms = out_deadline(c->out, deadline_ms);
    atomic_store_explicit(&c->deadline_ms, deadline_ms, memory_order_relaxed);
    atomic_store_explicit(&c->state, (uint8_t)state, memory_order_relaxed);
    int rc;
    bool first = !c->registered;
    /* What OpenSSL has read ahead raises no edge: a connection holding some is not
     * drained, and its callback runs again at once. A registration, or a one-shot re-arm,
     * only reports what the socket holds: there a writable socket's EPOLLOUT, reported at
     * once, runs it again. */
    bool tls_held = c->tls && (events & EPOLLIN) && conn_tls_pending(c);
    bool drained = (!(events & EPOLLIN) || (c->rd_drained && !tls_held)) &&
                   (!(events & EPOLLOUT) || c->wr_blocked);
    c->rd_drained = c->wr_blocked = false; /* for the next event */
    if (tls_held && (first || !c->h.edge))
        events |= EPOLLOUT;
    if (!first) {
        rc = lf_group_reactivate(&c->h, events, drained);
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

void conn_wait_on(struct conn *c, struct lf_handle *h, enum conn_state state,
                  int64_t deadline_ms)
{
    atomic_store_explicit(&c->state, (uint8_t)state, memory_order_relaxed);
    atomic_store_explicit(&c->deadline_ms, deadline_ms, memory_order_relaxed);
    int rc = lf_group_rearm(h, EPOLLIN);
    if (rc < 0) {
        /* Armed, the handle would have been the connection's only way on: without it the
         * connection would wait forever, out of every set. */
        log_error("re-arming fd %d of connection fd %d: %s", h->fd, c->h.fd, strerror(-rc));
        conn_close(c);
    }
    /* From here on another thread may own c: touch nothing. */
}

ssize_t conn_read(struct conn *c, void *buf, size_t len)
{
    if (c->tls) /* the socket BIO's watch notes rd_drained */
        return conn_tls_read(c, buf, len);
    ssize_t n = read(c->h.fd, buf, len);
    /* What the last read says: a full one may have left more behind. */
    c->rd_drained = (n >= 0 && (size_t)n < len) || (n < 0 && errno == EAGAIN);
    return n;
}

ssize_t conn_peek_raw(struct conn *c, void *buf, size_t len)
{
    return recv(c->h.fd, buf, len, MSG_PEEK | MSG_DONTWAIT);
}

ssize_t conn_read_raw(struct conn *c, void *buf, size_t len)
{
    ssize_t n = recv(c->h.fd, buf, len, MSG_DONTWAIT);
    c->rd_drained = (n >= 0 && (size_t)n < len) || (n < 0 && errno == EAGAIN);
    return n;
}

ssize_t conn_write(struct conn *c, const void *buf, size_t len)
{
    if (c->tls)
        return conn_tls_write(c, buf, len);
    return send(c->h.fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
}

struct conn_buf *conn_buf_get(struct conn_pool *pool)
{
    pthread_mutex_lock(&pool->lock);
    struct conn_buf *b = pool->free_bufs;
    if (b) {
        pool->free_bufs = b->next;
        pool->n_free_bufs--;
    }
    pthread_mutex_unlock(&pool->lock);
    if (!b)
        b = malloc(sizeof(*b));
    if (b) {
        b->len = 0;
        b->start_us = 0;
    }
    return b;
}

void conn_buf_put(struct conn_pool *pool, struct conn_buf *b)
{
    pthread_mutex_lock(&pool->lock);
    if (pool->n_free_bufs < FREE_BUFS_MAX) {
        b->next = pool->free_bufs;
        pool->free_bufs = b;
        pool->n_free_bufs++;
        b = NULL;
    }
    pthread_mutex_unlock(&pool->lock);
    free(b);
}

/* --- sending -------------------------------------------------------------------------- */

/* The buffer file bytes are read into when sendfile is off: one per thread, made at its
 * first use and freed when the thread ends. Not a _Thread_local array: static TLS lives
 * in the thread's stack mapping, and thread_per_connection's stacks are small. */
#define COPY_BUF_SIZE (64 * 1024)
static pthread_key_t copy_key;
static pthread_once_t copy_once = PTHREAD_ONCE_INIT;
static _Thread_local char *copy_buf;

static void copy_key_make(void)
{
    pthread_key_create(&copy_key, free);
}

static char *copy_buffer(void)
{
    if (!copy_buf) {
        pthread_once(&copy_once, copy_key_make);
        copy_buf = malloc(COPY_BUF_SIZE);
        if (copy_buf)
            pthread_setspecific(copy_key, copy_buf);
    }
    return copy_buf;
}

/* Advance segs[*pos..] past w bytes that went out. */
static void advance(struct out_seg *segs, unsigned *pos, size_t w)
{
    while (w > 0) {
        struct out_seg *t = &segs[*pos];
        size_t take = w < t->len ? w : (size_t)t->len;
        if (t->mem)
            t->mem += take;
        else
            t->off += take;
        t->len -= take;
        w -= take;
        if (t->len == 0)
            (*pos)++;
    }
}

/* One sendmsg of the memory segments from *pos on, and, when sendfile is off, the next
 * piece of the file segment that follows them, read into the thread's buffer: a head
 * and the start of its file leave in one call, as they would with writev. A piece the
 * socket does not take whole is read again next time (from the page cache). */
static enum send_result send_gathered(int fd, struct out_seg *segs, unsigned n,
                                      unsigned *pos, uint64_t *sent, bool copy)
{
    struct iovec iov[64];
    unsigned k = 0;
    bool more = false; /* bytes follow this call's: let them share the packet */
    for (; *pos + k < n && k < 64; k++) {
        struct out_seg *t = &segs[*pos + k];
        if (t->mem) {
            iov[k] = (struct iovec){.iov_base = (void *)t->mem, .iov_len = t->len};
            continue;
        }
        if (!copy)
            break;
        char *buf = copy_buffer();
        if (!buf)
            return SEND_ERROR;
        size_t want = t->len < COPY_BUF_SIZE ? (size_t)t->len : COPY_BUF_SIZE;
        ssize_t got;
        do
            got = pread(t->fd, buf, want, (off_t)t->off);
        while (got < 0 && errno == EINTR);
        if (got <= 0)
            return SEND_ERROR; /* unreadable, or it shrank: the length we promised is a lie */
        iov[k++] = (struct iovec){.iov_base = buf, .iov_len = (size_t)got};
        more = (uint64_t)got < t->len;
        break;
    }
    more |= *pos + k < n;
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = k};
    ssize_t w;
    do
        w = sendmsg(fd, &mh, MSG_NOSIGNAL | (more ? MSG_MORE : 0));
    while (w < 0 && errno == EINTR);
    if (w < 0)
        return errno == EAGAIN ? SEND_PARKED : SEND_ERROR;
    *sent += (uint64_t)w;
    advance(segs, pos, (size_t)w);
    return SEND_DONE;
}

/* Send segs[*pos..n), advancing them in place as bytes go out and adding them to *sent.
 * File segments go with sendfile(2), or, with copy (`sendfile off`), are read into the
 * thread's buffer and written with the memory before them.
 * Returns SEND_DONE, SEND_PARKED (the socket would block) or SEND_ERROR. */
static enum send_result send_segs(int fd, struct out_seg *segs, unsigned n, unsigned *pos,
                                  uint64_t *sent, bool copy)
{
    while (*pos < n) {
        struct out_seg *s = &segs[*pos];
        if (s->len == 0) {
            (*pos)++;
            continue;
        }
        if (s->mem || copy) {
            enum send_result r = send_gathered(fd, segs, n, pos, sent, copy);
            if (r != SEND_DONE)
                return r;
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
        *sent += (uint64_t)w;
    }
    return SEND_DONE;
}

/* Over TLS: records of at most TLS_RECORD plaintext bytes, each gathered from the
 * segments into the thread's buffer (memory copied, file bytes read) and given to
 * SSL_write whole. When the socket is full, OpenSSL keeps the record it has encrypted and
 * asks for the same bytes again: the next call gathers them from the same place, parked
 * or not (the segments advance only by what SSL_write took). */
#define TLS_RECORD 16384

static enum send_result send_tls(struct conn *c, struct out_seg *segs, unsigned n,
                                 unsigned *pos, uint64_t *sent)
{
    char *buf = copy_buffer();
    if (!buf)
        return SEND_ERROR;
    while (*pos < n) {
        size_t len = 0;
        for (unsigned i = *pos; i < n && len < TLS_RECORD; i++) {
            const struct out_seg *t = &segs[i];
            size_t want = t->len < TLS_RECORD - len ? (size_t)t->len : TLS_RECORD - len;
            if (want == 0)
                continue;
            if (t->mem) {
                memcpy(buf + len, t->mem, want);
                len += want;
                continue;
            }
            ssize_t got;
            do
                got = pread(t->fd, buf + len, want, (off_t)t->off);
            while (got < 0 && errno == EINTR);
            if (got <= 0)
                return SEND_ERROR; /* unreadable, or it shrank: the promised length is a lie */
            len += (size_t)got;
            if ((size_t)got < want)
                break;
        }
        if (len == 0) { /* empty segments only */
            *pos = n;
            break;
        }
        ssize_t w = conn_tls_write(c, buf, len);
        if (w < 0)
            return errno == EAGAIN ? SEND_PARKED : SEND_ERROR;
        if (w == 0)
            return SEND_ERROR;
        *sent += (uint64_t)w;
        advance(segs, pos, (size_t)w);
    }
    return SEND_DONE;
}

/* `sendfile off`: file bytes are copied through the thread's buffer. */
static bool copy_files(const struct conn *c)
{
    return c->gen && !c->gen->cfg.sendfile;
}

static enum send_result send_any(struct conn *c, struct out_seg *segs, unsigned n,
                                 unsigned *pos, uint64_t *sent)
{
    return c->tls ? send_tls(c, segs, n, pos, sent)
                  : send_segs(c->h.fd, segs, n, pos, sent, copy_files(c));
}

/* Send at most cap bytes of segs[*pos..n): the segment the cap falls in is cut short for
 * the call (sendfile's count is capped so) and its rest given back after. Over TLS the cap
 * is rounded up to whole records, so that a write OpenSSL retries asks for the same bytes. */
static enum send_result send_capped(struct conn *c, struct out_seg *segs, unsigned n,
                                    unsigned *pos, uint64_t *sent, uint64_t cap)
{
    if (c->tls)
        cap = (cap + TLS_RECORD - 1) / TLS_RECORD * TLS_RECORD;
    uint64_t acc = 0;
    unsigned end = *pos;
    while (end < n && acc + segs[end].len <= cap)
        acc += segs[end++].len;
    if (end == n)
        return send_any(c, segs, n, pos, sent);
    uint64_t rest = segs[end].len - (cap - acc);
    segs[end].len = cap - acc;
    enum send_result r = send_any(c, segs, end + 1, pos, sent);
    segs[end].len += rest;
    if (*pos > end)
        *pos = end;
    return r;
}

/* The pace's state, between a response's sends (see conn.h). */
struct pace {
    uint64_t rate, after, sent;
    int64_t start_ms;
};

#define PACE_RATE_MAX ((uint64_t)1 << 40) /* beyond any link: keeps the sums in range */

/* Send what the pace allows. SEND_PARKED with *wake_ms set when it holds the rest back;
 * SEND_PARKED with *wake_ms 0 when the socket is full. */
static enum send_result send_paced(struct conn *c, struct out_seg *segs, unsigned n,
                                   unsigned *pos, uint64_t *sent, struct pace *p,
                                   int64_t *wake_ms)
{
    *wake_ms = 0;
    uint64_t s0 = *sent;
    if (!p->rate) {
        enum send_result r = send_any(c, segs, n, pos, sent);
        p->sent += *sent - s0;
        return r;
    }
    int64_t rate = (int64_t)(p->rate < PACE_RATE_MAX ? p->rate : PACE_RATE_MAX);
    int64_t now = clock_now_ms();
    int64_t limit = rate * ((now - p->start_ms) / 1000 + 1) - ((int64_t)p->sent -
                                                               (int64_t)p->after);
    if (limit <= 0) {
        *wake_ms = now + -limit * 1000 / rate + 1;
        return SEND_PARKED;
    }
    uint64_t before = p->sent;
    enum send_result r = send_capped(c, segs, n, pos, sent, (uint64_t)limit);
    p->sent += *sent - s0;
    if (r != SEND_DONE || *pos >= n)
        return r;
    uint64_t a = before > p->after ? before - p->after : 0;
    uint64_t b = p->sent > p->after ? p->sent - p->after : 0;
    int64_t delay = (int64_t)((b - a) * 1000 / (uint64_t)rate);
    *wake_ms = now + (delay > 0 ? delay : 1);
    return SEND_PARKED;
}

/* A park refused by max_parked_size: logged once an interval, with the count since. */
static void park_refused(struct conn *c, uint64_t bytes, uint64_t cap)
{
    unsigned n = atomic_fetch_add_explicit(&park_refused_unlogged, 1, memory_order_relaxed) + 1;
    int64_t now = clock_now_ms();
    int64_t last = atomic_load_explicit(&park_refused_logged_ms, memory_order_relaxed);
    if (now - last < PARK_LOG_INTERVAL_MS ||
        !atomic_compare_exchange_strong(&park_refused_logged_ms, &last, now))
        return;
    atomic_fetch_sub_explicit(&park_refused_unlogged, n, memory_order_relaxed);
    log_warn("max_parked_size (%llu bytes) reached: connection fd %d closed, its %llu "
             "unsent bytes would not fit (%u closed so; logged at most every %d s)",
             (unsigned long long)cap, c->h.fd, (unsigned long long)bytes, n,
             PARK_LOG_INTERVAL_MS / 1000);
}

/* Reserve bytes of the server's max_parked_size for a parked copy. */
static bool park_reserve(struct conn *c, uint64_t bytes)
{
    uint64_t cap = c->gen ? c->gen->cfg.max_parked_size : 0;
    uint64_t total =
        atomic_fetch_add_explicit(&parked_bytes, bytes, memory_order_relaxed) + bytes;
    if (!cap || total <= cap)
        return true;
    atomic_fetch_sub_explicit(&parked_bytes, bytes, memory_order_relaxed);
    park_refused(c, bytes, cap);
    return false;
}

/* Copy what is left of a response onto the connection; the response's file goes with it.
 * Memory a module lends is copied: a body that should not be copied per connection (a
 * listing, a compressed variant) is better handed over as a file, which moves. */
static int park(struct conn *c, struct out_seg *segs, unsigned n, unsigned pos,
                struct out_msg *m)
{
    size_t bytes = 0;
    for (unsigned i = pos; i < n; i++)
        if (segs[i].mem)
            bytes += segs[i].len;
    if (!park_reserve(c, bytes))
        return -1;
    struct conn_out *o = malloc(sizeof(*o) + (n - pos) * sizeof(struct out_seg) + bytes);
    if (!o) {
        atomic_fetch_sub_explicit(&parked_bytes, bytes, memory_order_relaxed);
        return -1;
    }
    char *data = (char *)(o->segs + (n - pos));
    o->n = n - pos;
    o->pos = 0;
    o->mem_bytes = bytes;
    o->sent_bytes = 0;
    o->grace_end_ms = 0;
    /* A paced response is slow by the server's own choice: no minimum rate. */
    o->min_rate = c->gen && !m->rate ? c->gen->cfg.send_min_rate : 0;
    o->pace_rate = m->rate;
    o->pace_after = m->rate_after;
    o->pace_start_ms = m->rate_start_ms;
    o->pace_sent = 0;
    o->wake_ms = 0;
    o->rate_bound = false;
    o->file_fd = m->file_fd;
    o->file_release = m->file_release;
    o->file_release_ctx = m->file_release_ctx;
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

enum send_result conn_send(struct conn *c, struct out_msg *m)
{
    struct out_seg segs[CONN_MAX_SEGS];
    unsigned n = 1, pos = 0;
    segs[0] = (struct out_seg){.mem = m->head, .fd = -1, .len = m->head_len};
    if (m->n_segs > CONN_MAX_SEGS - 1)
        return SEND_ERROR;
    memcpy(segs + 1, m->segs, m->n_segs * sizeof(segs[0]));
    n += m->n_segs;
    uint64_t sent = 0; /* before parking: the minimum rate counts from the park */
    struct pace p = {.rate = m->rate, .after = m->rate_after, .start_ms = m->rate_start_ms};
    int64_t wake_ms = 0;
    enum send_result res = send_paced(c, segs, n, &pos, &sent, &p, &wake_ms);
    if (res == SEND_PARKED) {
        if (park(c, segs, n, pos, m) < 0) {
            res = SEND_ERROR;
        } else { /* the file belongs to the parked response now */
            c->out->pace_sent = p.sent;
            c->out->wake_ms = wake_ms;
            c->wr_blocked = !wake_ms;
            m->file_fd = -1;
            m->file_release = NULL;
        }
    }
    return res;
}

enum send_result conn_send_pending(struct conn *c)
{
    struct conn_out *o = c->out;
    struct pace p = {.rate = o->pace_rate, .after = o->pace_after, .sent = o->pace_sent,
                     .start_ms = o->pace_start_ms};
    enum send_result res = send_paced(c, o->segs, o->n, &o->pos, &o->sent_bytes, &p,
                                      &o->wake_ms);
    o->pace_sent = p.sent;
    if (res != SEND_PARKED)
        conn_out_free(c);
    else
        c->wr_blocked = !o->wake_ms;
    return res;
}

/* --- closing ------------------------------------------------------------------------ */

/* Read and drop what the client sends. Returns true when the client has closed. */
static bool drain(struct conn *c)
{
    char sink[4096];
    for (int i = 0; i < 16; i++) {
        ssize_t n = conn_read(c, sink, sizeof(sink));
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
    if (c->tls)
        conn_tls_shutdown(c);
    shutdown(c->h.fd, SHUT_WR);
    if (drain(c)) {
        conn_close(c);
        return;
    }
    conn_wait(c, CONN_LINGER, EPOLLIN | EPOLLRDHUP, clock_now_ms() + LINGER_MS);
}

void conn_linger_event(struct conn *c)
{
    if (drain(c) || atomic_load_explicit(&c->expired, memory_order_relaxed)) {
        conn_close(c);
        return;
    }
    /* Keep the original deadline: lingering is bounded in total, not per read. */
    conn_wait(c, CONN_LINGER, EPOLLIN | EPOLLRDHUP,
              atomic_load_explicit(&c->deadline_ms, memory_order_relaxed));
}
