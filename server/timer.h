/* timer.h — deadlines: the sweep that ends connections whose deadline has passed.
 *
 * Each service has a timerfd in its group's handle set, firing every TIMER_TICK_MS. The
 * thread that gets it walks the service's connections; for each whose deadline has
 * passed it sets `expired` and shuts the socket down (reading side only, so a 408 can
 * still be written; both sides for a stalled send). That wakes the connection in the
 * handle set as usual, and the thread that then gets it closes it. The sweep itself never
 * closes or frees a connection, so it cannot race the connection's owner.
 */
#ifndef LFHTTPD_TIMER_H
#define LFHTTPD_TIMER_H

#define TIMER_TICK_MS 250

struct service;

int timer_init(struct service *svc);
void timer_fini(struct service *svc);

#endif
