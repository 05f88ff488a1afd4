/* upstream_store.c — an answer read ahead of its client, in memory then a temporary file
 * without a name; the wait on both sockets meanwhile. See upstream_store.h. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "log.h"
#include "upstream_store.h"

/* The members of a wait's set, as its events name them (as a tunnel's). */
enum { WAIT_UP = 1u << 0, WAIT_CLIENT = 1u << 1 };

/* The most a read of HTTP_SOURCE_PIECE bytes becomes once filtered and framed. */
#define STORE_PIECE_MAX (sizeof(((struct http_piece *)0)->out) + 64)
#define STORE_FRAMING 64      /* a chunk's size line and its CRLF, at most, with room */
#define STORE_FLUSH_MAX 65536 /* memory sent (or parked, copied) at a time */

/* Stores' memory let go of, of any size up to UPSTREAM_STORE_SPARE_MAX. */
static struct upstream_spares store_spares = {.lock = PTHREAD_MUTEX_INITIALIZER};

void *upstream_spare_get(struct upstream_spares *list, size_t size)
{
    void *p = NULL;
    pthread_mutex_lock(&list->lock);
    for (unsigned i = list->n; i-- > 0;)
        if (list->bufs[i].size == size) {
            p = list->bufs[i].p;
            list->bufs[i] = list->bufs[--list->n];
            break;
        }
    pthread_mutex_unlock(&list->lock);
    return p ? p : malloc(size);
}

void upstream_spare_put(struct upstream_spares *list, void *p, size_t size)
{
    if (!p)
        return;
    pthread_mutex_lock(&list->lock);
    if (list->n < UPSTREAM_STORE_SPARES) {
        list->bufs[list->n++] = (struct upstream_spare){p, size};
        p = NULL;
    }
    pthread_mutex_unlock(&list->lock);
    free(p);
}

void upstream_spares_free(struct upstream_spares *list)
{
    pthread_mutex_lock(&list->lock);
    for (unsigned i = 0; i < list->n; i++)
        free(list->bufs[i].p);
    list->n = 0;
    pthread_mutex_unlock(&list->lock);
}

void upstream_store_fini(void)
{
    upstream_spares_free(&store_spares);
}

void upstream_store_init(struct upstream_store *st)
{
    *st = (struct upstream_store){.fd = -1};
}

bool upstream_store_empty(const struct upstream_store *st)
{
    return st->rd == st->wr && st->frd == st->fwr;
}

void upstream_store_free(struct upstream_store *st)
{
    if (st->mem && st->cap <= UPSTREAM_STORE_SPARE_MAX)
        upstream_spare_put(&store_spares, st->mem, st->cap);
    else
        free(st->mem);
    if (st->fd >= 0)
        close(st->fd);
    upstream_store_init(st);
}

/* The temporary file, made now if it is not yet: without a name, in p->temp_path. */
static bool store_open(struct upstream_store *st, const struct http_source *src,
                       const struct proxy_params *p)
{
    if (st->fd >= 0)
        return true;
    if (st->no_file)
        return false;
    const char *dir = p->temp_path;
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
        char name[PATH_MAX];
        if (snprintf(name, sizeof(name), "%s/lfhttpd-proxy-XXXXXX", dir) < (int)sizeof(name)) {
            fd = mkostemp(name, O_CLOEXEC);
            if (fd >= 0)
                unlink(name); /* at once: it is never seen, and never left behind */
        }
    }
    if (fd < 0) {
        const char *who = p->fastcgi ? "fastcgi" : "proxy";
        if (src->has_saved)
            module_log(&src->saved, LOG_LEVEL_ERROR, "%s: cannot make a temporary file in %s: %s",
                       who, dir, strerror(errno));
        else
            log_error("%s: cannot make a temporary file in %s: %s", who, dir, strerror(errno));
        st->no_file = true;
        return false;
    }
    st->fd = fd;
    return true;
}

size_t upstream_store_room(struct upstream_store *st, const struct http_source *src,
                           const struct proxy_params *p, size_t relay)
{
    bool file_pending = st->frd < st->fwr;
    bool filtered = src->filter != NULL;
    uint64_t need = filtered ? STORE_PIECE_MAX : STORE_FRAMING + 1;
    if (st->rd == st->wr)
        st->rd = st->wr = 0;
    uint64_t room = 0;
    if (!file_pending && p->buffers_bytes > 0 && !st->mem) {
        size_t size = p->buffers_bytes;
        st->mem = size <= UPSTREAM_STORE_SPARE_MAX ? upstream_spare_get(&store_spares, size)
                                                   : malloc(size);
        st->cap = st->mem ? size : 0;
    }
    if (!file_pending && st->mem)
        room = st->cap - st->wr;
    uint64_t max = p->max_temp_bytes;
    uint64_t file_room = st->fwr < max ? max - st->fwr : 0;
    if (room < need && file_room >= need && store_open(st, src, p))
        room = file_room;
    if (room < need)
        return 0;
    if (filtered || room - STORE_FRAMING >= relay)
        return relay;
    return (size_t)(room - STORE_FRAMING);
}

int upstream_store_put(struct upstream_store *st, const struct response *resp)
{
    size_t total = 0;
    for (unsigned i = 0; i < resp->n_segs; i++)
        total += resp->segs[i].len;
    if (st->frd == st->fwr && st->mem && st->cap - st->wr >= total) {
        for (unsigned i = 0; i < resp->n_segs; i++) {
            memcpy(st->mem + st->wr, resp->segs[i].mem, resp->segs[i].len);
            st->wr += resp->segs[i].len;
        }
        return 0;
    }
    if (st->fd < 0)
        return -1;
    for (unsigned i = 0; i < resp->n_segs; i++) {
        const char *p = resp->segs[i].mem;
        size_t left = resp->segs[i].len;
        while (left > 0) {
            ssize_t w = pwrite(st->fd, p, left, (off_t)st->fwr);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                return -1;
            st->fwr += (uint64_t)w;
            p += w;
            left -= (size_t)w;
        }
    }
    return 0;
}

enum send_result upstream_store_flush(struct upstream_store *st, struct conn *c)
{
    struct response resp;
    resp_init(&resp);
    if (st->rd < st->wr) {
        size_t n = st->wr - st->rd < STORE_FLUSH_MAX ? st->wr - st->rd : STORE_FLUSH_MAX;
        resp.segs[0] = (struct out_seg){.mem = st->mem + st->rd, .fd = -1, .len = n};
        st->rd += n;
    } else {
        resp.segs[0] = (struct out_seg){.fd = st->fd, .off = st->frd, .len = st->fwr - st->frd};
        st->frd = st->fwr;
    }
    resp.n_segs = 1;
    return http_send_response(c, &resp, true);
}

int upstream_store_wait_both(struct lf_handle *set, int up_fd, struct conn *c,
                             int64_t deadline_ms, void (*on_event)(struct lf_handle *, uint32_t))
{
    if (set->fd >= 0) {
        conn_wait_on(c, set, CONN_STREAM, deadline_ms);
        return 1;
    }
    set->fd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ue = {.events = EPOLLIN, .data.u32 = WAIT_UP};
    struct epoll_event ce = {.events = EPOLLOUT, .data.u32 = WAIT_CLIENT};
    if (set->fd < 0 || epoll_ctl(set->fd, EPOLL_CTL_ADD, up_fd, &ue) < 0 ||
        epoll_ctl(set->fd, EPOLL_CTL_ADD, c->h.fd, &ce) < 0) {
        upstream_store_wait_end(set);
        return 0;
    }
    /* The upstream socket's own handle and the client's stay the source's, not armed: the
     * set speaks for both until another wait. */
    set->on_event = on_event;
    atomic_store_explicit(&c->deadline_ms, deadline_ms, memory_order_relaxed);
    atomic_store_explicit(&c->state, CONN_STREAM, memory_order_relaxed);
    int rc = lf_group_add(c->h.group, set, EPOLLIN);
    if (rc < 0) {
        log_error("upstream: epoll: cannot add a buffered answer's set: %s", strerror(-rc));
        conn_close(c);
    }
    return 1;
}

void upstream_store_wait_drop(struct lf_handle *set, int up_fd)
{
    if (set->fd >= 0 && up_fd >= 0)
        epoll_ctl(set->fd, EPOLL_CTL_DEL, up_fd, NULL);
}

void upstream_store_wait_end(struct lf_handle *set)
{
    if (set->fd >= 0)
        close(set->fd); /* (which takes it out of its group's set) */
    set->fd = -1;
}
