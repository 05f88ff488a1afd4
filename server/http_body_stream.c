/* http_body_stream.c — a request's body taken as it arrives (see http_body_stream.h). */
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "http_body_stream.h"
#include "log.h"

ssize_t http_body_stream_read(struct conn *c, char *buf, size_t cap, bool *from_in)
{
    if (hc(c)->body_mode == REQ_BODY_LENGTH && hc(c)->body_left < cap)
        cap = (size_t)hc(c)->body_left;
    *from_in = c->in != NULL;
    if (c->in) {
        size_t n = c->in->len < cap ? c->in->len : cap;
        memcpy(buf, c->in->data, n);
        return (ssize_t)n;
    }
    ssize_t n = conn_read(c, buf, cap);
    if (n > 0)
        atomic_fetch_add_explicit(&http_service_of(c)->stats.bytes_received, (unsigned long)n,
                                  memory_order_relaxed);
    return n;
}

/* `used` bytes of what the connection kept were taken. */
static void take_in(struct conn *c, size_t used)
{
    if (used < c->in->len) {
        memmove(c->in->data, c->in->data + used, c->in->len - used);
        c->in->len -= (uint32_t)used;
        return;
    }
    conn_buf_put(c->pool, c->in);
    c->in = NULL;
}

enum http_body_take http_body_stream_take(struct http_source *s, char *data, size_t n,
                                          bool from_in, size_t *out, size_t *used)
{
    struct conn *c = s->c;
    if (hc(c)->body_mode == REQ_BODY_LENGTH) {
        if (from_in)
            take_in(c, n);
        hc(c)->body_left -= n;
        if (hc(c)->body_left == 0)
            hc(c)->body_mode = REQ_BODY_NONE;
        *out = *used = n;
        return HTTP_BODY_TAKEN;
    }
    *out = *used = 0;
    enum http_chunked_result r = http_chunked_decode(&hc(c)->chunked, data, n,
                                                     hc(c)->limits->max_body_size, used, out);
    if (r == HTTP_CHUNKED_ERROR)
        return HTTP_BODY_INVALID;
    if (r == HTTP_CHUNKED_TOO_LARGE)
        return HTTP_BODY_TOO_LARGE;
    if (from_in)
        take_in(c, *used);
    else if (*used < n && !http_save_input(c, data + *used, n - *used))
        return HTTP_BODY_NO_ROOM; /* (what follows the body is the next request's) */
    if (r == HTTP_CHUNKED_DONE) {
        hc(c)->body_mode = REQ_BODY_NONE;
        s->saved.streamed_whole = true; /* (nginx's $content_length, once it has the body) */
        s->saved.streamed_len = hc(c)->chunked.total;
    }
    return HTTP_BODY_TAKEN;
}

/* The members of the set, as its events name them. */
enum { STREAM_UP = 1u << 0, STREAM_CLIENT = 1u << 1 };

bool http_body_stream_wait(struct lf_handle *set, int up_fd, struct conn *c,
                           int64_t deadline_ms, void (*on_event)(struct lf_handle *, uint32_t))
{
    if (set->fd >= 0) {
        conn_wait_on(c, set, CONN_STREAM, deadline_ms);
        return true;
    }
    set->fd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ue = {.events = EPOLLIN, .data.u32 = STREAM_UP};
    struct epoll_event ce = {.events = EPOLLIN, .data.u32 = STREAM_CLIENT};
    if (set->fd < 0 || epoll_ctl(set->fd, EPOLL_CTL_ADD, up_fd, &ue) < 0 ||
        epoll_ctl(set->fd, EPOLL_CTL_ADD, c->h.fd, &ce) < 0) {
        log_error("a streamed body's epoll set: %s", strerror(errno));
        conn_close(c);
        return false;
    }
    /* The upstream socket's own handle and the client's stay the source's, not armed: the
     * set speaks for both until another wait. */
    set->on_event = on_event;
    atomic_store_explicit(&c->deadline_ms, deadline_ms, memory_order_relaxed);
    atomic_store_explicit(&c->state, CONN_STREAM, memory_order_relaxed);
    int rc = lf_group_add(c->h.group, set, EPOLLIN);
    if (rc < 0) {
        log_error("epoll: cannot add a streamed body's set: %s", strerror(-rc));
        conn_close(c);
        return false;
    }
    return true;
}
