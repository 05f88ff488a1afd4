/* timer.h — a periodic tick in a group's handle set (a timerfd, armed one-shot like every
 * handle): whichever thread gets it calls the owner's tick function, then re-arms it. The
 * service's tick runs the deadline sweep and the service's other chores (service.c). */
#ifndef LFHTTPD_TIMER_H
#define LFHTTPD_TIMER_H

#include <stdint.h>

#include "lf_group.h"

#define TIMER_TICK_MS 250

struct timer;
typedef void (*timer_tick_fn)(struct timer *t);

struct timer {
    struct lf_handle h; /* first: the handle is the timer */
    timer_tick_fn on_tick;
};

/* Start ticking every `period_ms` in group g. Returns 0, or -1 with errno set. */
int timer_start(struct timer *t, struct lf_group *g, unsigned period_ms, timer_tick_fn on_tick);
/* A timer that fires once, at a time set with timer_arm_at (period_ms 0 to timer_start). */
/* Fire once at at_ms (clock_now_ms()'s monotonic scale; at most a tick of the coarse clock
 * late), replacing any time set before. Any thread may call it. */
void timer_arm_at(struct timer *t, int64_t at_ms);
/* After the group's threads have stopped. */
void timer_stop(struct timer *t);

#endif
