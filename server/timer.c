/* timer.c — a periodic tick. See timer.h. */
#include "timer.h"

#include <errno.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "log.h"

/* The tick could not be re-armed: without it nothing would sweep again, so take the handle
 * out of the set and put it back. If even that fails, say so: from then on deadlines are
 * not enforced in this group. */
static void rearm_failed(struct timer *t, int rc)
{
    log_error("timer fd %d: re-arming: %s; registering it again", t->h.fd, strerror(-rc));
    lf_group_detach(&t->h, false);
    rc = lf_group_add(t->h.group, &t->h, EPOLLIN);
    if (rc < 0)
        log_error("timer fd %d: registering again: %s; deadlines are no longer enforced",
                  t->h.fd, strerror(-rc));
}

static void timer_event(struct lf_handle *h, uint32_t events)
{
    (void)events;
    struct timer *t = (struct timer *)h;
    uint64_t ticks;
    ssize_t r = read(h->fd, &ticks, sizeof(ticks));
    (void)r; /* how many ticks were missed does not matter: one pass covers them */
    t->on_tick(t);
    int rc = lf_group_rearm(h, EPOLLIN);
    if (rc < 0)
        rearm_failed(t, rc);
}

int timer_start(struct timer *t, struct lf_group *g, unsigned period_ms, timer_tick_fn on_tick)
{
    int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (fd < 0)
        return -1;
    long ns = (long)(period_ms % 1000) * 1000000L;
    struct itimerspec its = {
        .it_interval = {period_ms / 1000, ns},
        .it_value = {period_ms / 1000, ns},
    };
    if (period_ms)
        timerfd_settime(fd, 0, &its, NULL);
    t->h.fd = fd;
    t->h.on_event = timer_event;
    t->on_tick = on_tick;
    int rc = lf_group_add(g, &t->h, EPOLLIN);
    if (rc < 0) {
        close(fd);
        t->h.fd = -1;
        errno = -rc;
        return -1;
    }
    return 0;
}

void timer_arm_at(struct timer *t, int64_t at_ms)
{
    if (at_ms < 1)
        at_ms = 1; /* 0 would disarm it */
    struct itimerspec its = {
        .it_value = {(time_t)(at_ms / 1000), (long)(at_ms % 1000) * 1000000L},
    };
    timerfd_settime(t->h.fd, TFD_TIMER_ABSTIME, &its, NULL);
}

void timer_stop(struct timer *t)
{
    if (t->h.fd >= 0)
        close(t->h.fd);
    t->h.fd = -1;
}
