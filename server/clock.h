/* clock.h — the server's one clock: CLOCK_MONOTONIC, for deadlines, caches and uptime
 * (milliseconds, from the coarse clock: read without a system call, to a tick's
 * precision) and for measuring (microseconds, precise). */
#ifndef LFHTTPD_CLOCK_H
#define LFHTTPD_CLOCK_H

#include <stdint.h>

int64_t clock_now_ms(void);
int64_t clock_now_us(void);

#endif
