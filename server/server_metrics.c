/* server_metrics.c — the server's figures for a metrics scrape: each class's requests,
 * statuses, bytes and service times (their relaxed counters), its connections by state,
 * TLS handshakes, and the reloads. Read at scrape time only: nothing here runs per
 * request. */
#include "server_metrics.h"

#include <assert.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "conn.h"
#include "module_figures.h"
#include "server.h"

static_assert(SERVER_METRICS_BUCKETS == HTTP_LATENCY_BUCKETS, "one histogram, one shape");
static_assert(SERVER_METRICS_STATES == CONN_STATES, "every connection state is counted");

/* Process-wide: main is the one writer (its signal loop). */
static atomic_ulong reloads_ok, reloads_refused;

void server_metrics_reloaded(bool ok)
{
    atomic_fetch_add_explicit(ok ? &reloads_ok : &reloads_refused, 1, memory_order_relaxed);
}

static uint64_t load(const atomic_ulong *a)
{
    return atomic_load_explicit(a, memory_order_relaxed);
}

static void class_metrics(const struct service *svc, struct server_metrics *out, unsigned i)
{
    const struct http_stats *st = &svc->http.stats;
    snprintf(out->classes[i].name, sizeof(out->classes[i].name), "%s", svc->name);
    out->classes[i].connections =
        atomic_load_explicit(&svc->http.pool.n_conns, memory_order_relaxed);
    /* the pool's lock is the connections', never held across I/O: a scrape may take it */
    conn_pool_count_states((struct conn_pool *)&svc->http.pool, out->classes[i].by_state);
    /* the histogram first: a request recorded between the two reads then shows in the
     * count, never in the buckets alone */
    for (unsigned b = 0; b < HTTP_LATENCY_BUCKETS; b++)
        out->classes[i].latency_us_log2[b] = load(&st->latency_us_log2[b]);
    out->classes[i].latency_us_sum = load(&st->latency_us_sum);
    out->classes[i].requests = 0;
    for (unsigned b = 0; b < HTTP_LATENCY_BUCKETS; b++)
        out->classes[i].requests += out->classes[i].latency_us_log2[b];
    for (unsigned s = 0; s < 5; s++)
        out->classes[i].by_status[s] = load(&st->by_status[s]);
    out->classes[i].bytes_sent = load(&st->bytes_sent);
    out->classes[i].bytes_received = load(&st->bytes_received);
}

void module_server_metrics(const struct request *req, struct server_metrics *out)
{
    const struct server *srv = req->server;
    memset(out, 0, sizeof(*out));
    out->version = LFHTTPD_VERSION;
    out->generation = atomic_load_explicit(&srv->http.current.number, memory_order_relaxed);
    out->reloads_ok = load(&reloads_ok);
    out->reloads_refused = load(&reloads_refused);
    out->accepted = load(&srv->http.accepted);
    out->handled = load(&srv->http.handled);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    out->start_time_s = (double)now.tv_sec + now.tv_nsec / 1e9 -
                        (double)(clock_now_ms() - srv->start_ms) / 1000.0;
    struct conn_tls_counts tls;
    conn_tls_counts(&tls);
    out->tls_handshakes = tls.handshakes;
    out->tls_resumed = tls.resumed;
    out->tls_failed = tls.failed;
    for (unsigned i = 0; i < srv->n_svcs && out->n_classes < SERVER_STATS_GROUPS; i++) {
        if (srv->svcs[i].n_groups)
            class_metrics(&srv->svcs[i], out, out->n_classes++);
    }
}

void module_server_connections(const struct request *req, struct server_connections *out)
{
    const struct server *srv = req->server;
    memset(out, 0, sizeof(*out));
    for (unsigned i = 0; i < srv->n_svcs; i++) {
        const struct service *svc = &srv->svcs[i];
        if (!svc->n_groups)
            continue;
        unsigned st[CONN_STATES];
        conn_pool_count_states((struct conn_pool *)&svc->http.pool, st);
        for (unsigned k = 0; k < CONN_STATES; k++)
            out->active += st[k];
        out->reading += st[CONN_HEAD];
        out->writing += st[CONN_BODY] + st[CONN_SEND] + st[CONN_STREAM];
    }
    /* the request asking is being answered: its connection still shows the state it last
     * waited in (new, idle, or a head in pieces) */
    out->writing++;
    if (out->active < out->writing)
        out->active = out->writing;
    if (out->reading + out->writing > out->active)
        out->reading = out->active - out->writing;
    out->waiting = out->active - out->reading - out->writing;
}
