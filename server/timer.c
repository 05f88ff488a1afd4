/* timer.c — the deadline sweep. See timer.h. */
#include "timer.h"

#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "conn.h"
#include "log.h"
#include "server.h"

static void timer_event(struct lf_handle *h, uint32_t events)
{
    (void)events;
    struct service *svc = (struct service *)((char *)h - offsetof(struct service, timer));
    struct server *srv = svc->srv;
    uint64_t ticks;
    ssize_t r = read(h->fd, &ticks, sizeof(ticks));
    (void)r;

    int64_t now = conn_now_ms();
    bool stopping = atomic_load_explicit(&srv->stopping, memory_order_relaxed);
    pthread_mutex_lock(&svc->lock);
    for (struct conn *c = svc->conns; c; c = c->next) {
        if (atomic_load_explicit(&c->expired, memory_order_relaxed))
            continue;
        uint8_t st = atomic_load_explicit(&c->state, memory_order_relaxed);
        int64_t dl = atomic_load_explicit(&c->deadline_ms, memory_order_relaxed);
        bool idle = st == CONN_NEW || st == CONN_IDLE;
        if (dl > now && !(stopping && idle))
            continue;
        atomic_store_explicit(&c->expired, true, memory_order_relaxed);
        if (st == CONN_STREAM) {
            /* The socket is not in the handle set while a script runs: killing the
             * script ends its output, and the pipe's end wakes the connection. */
            int pgid = atomic_load_explicit(&c->stream_pgid, memory_order_relaxed);
            if (pgid > 0)
                kill(-pgid, SIGKILL);
            continue;
        }
        shutdown(c->h.fd, st == CONN_SEND ? SHUT_RDWR : SHUT_RD);
    }
    pthread_mutex_unlock(&svc->lock);

    listener_resume_paused(srv, svc);

    /* Access-log lines wait at most about a second in their thread's buffer. */
    if (now - svc->last_flush_ms >= 1000) {
        svc->last_flush_ms = now;
        access_log_flush(&srv->access_log);
    }
    lf_group_rearm(h, EPOLLIN);
}

int timer_init(struct service *svc)
{
    int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (fd < 0)
        return -1;
    struct itimerspec its = {
        .it_interval = {0, TIMER_TICK_MS * 1000000L},
        .it_value = {0, TIMER_TICK_MS * 1000000L},
    };
    timerfd_settime(fd, 0, &its, NULL);
    svc->timer.fd = fd;
    svc->timer.on_event = timer_event;
    if (lf_group_add(svc->group, &svc->timer, EPOLLIN) < 0) {
        close(fd);
        svc->timer.fd = -1;
        return -1;
    }
    return 0;
}

void timer_fini(struct service *svc)
{
    if (svc->timer.fd >= 0)
        close(svc->timer.fd);
    svc->timer.fd = -1;
}
