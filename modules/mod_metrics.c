/* mod_metrics.c — `handler PREFIX metrics;` (or `handler metrics;` in a location): the
 * server's figures in the Prometheus text exposition format, version 0.0.4.
 *
 * Everything is read at scrape time from counters that already exist: each class's relaxed
 * counters (module_server_metrics), the upstream servers' atomics, the other modules'
 * metrics hooks (caches, CGI). The one figure counted here is the requests of each server
 * block, by the log hook into counters of the thread's own, so that a request costs no
 * lock, no allocation and no shared cache line. A scrape walks the connection lists under
 * their locks, as /status does: that is the scrape's cost, not the requests'. */
#include <dirent.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "clock.h"
#include "directive.h"
#include "http_response.h"
#include "module.h"
#include "module_figures.h"
#include "site.h"
#include "strbuf.h"
#include "upstream.h"

#define METRICS_NAME "metrics"
#define METRICS_ALLOW "GET, HEAD, OPTIONS"
#define METRICS_PAGE_MAX (4u << 20)
#define METRICS_SITES_MAX 64     /* server blocks counted apart; the rest go to the last */
#define METRICS_UPSTREAMS_MAX 64
/* The histogram's buckets: times below 2^i microseconds, i from 9 (0.512 ms) to 23
 * (8.39 s), then +Inf. */
#define METRICS_BUCKET_FIRST 9
#define METRICS_BUCKET_LAST 23

/* One thread's requests per server block, by the status class of their answers (1xx..5xx,
 * then none: a client gone before it). Written only by its thread. */
#define METRICS_CLASSES 6
struct site_counters {
    alignas(64) _Atomic uint64_t requests[METRICS_SITES_MAX][METRICS_CLASSES];
    struct site_counters *next; /* the list, under metrics_state.lock */
    pthread_t owner;
};

struct metrics_state {
    unsigned index; /* this module's place in the chain */
    bool mounted;   /* a metrics handler is mounted: only then are server blocks counted */
    uint64_t generation;
    pthread_mutex_t lock; /* the list; taken by a thread's first request and by scrapes */
    struct site_counters *list;
};

/* A thread's registration, as mod_handlers keeps its own: the instance it last counted
 * for (instances are made again by reloads, and old and new serve side by side). */
static _Thread_local struct {
    uint64_t generation;
    struct site_counters *sc;
} tls_sites;
static atomic_uint_fast64_t metrics_generations;

/* --- counting --------------------------------------------------------------------------- */

static struct site_counters *my_counters(struct metrics_state *st)
{
    if (tls_sites.generation == st->generation)
        return tls_sites.sc;
    pthread_t self = pthread_self();
    pthread_mutex_lock(&st->lock);
    struct site_counters *sc = st->list;
    while (sc && !pthread_equal(sc->owner, self))
        sc = sc->next;
    if (!sc && (sc = aligned_alloc(64, sizeof(*sc)))) {
        memset(sc, 0, sizeof(*sc));
        sc->owner = self;
        sc->next = st->list;
        st->list = sc;
    }
    pthread_mutex_unlock(&st->lock);
    if (!sc)
        return NULL;
    tls_sites.generation = st->generation;
    tls_sites.sc = sc;
    return sc;
}

static void metrics_log(void *state, const struct request *req, const struct response *resp)
{
    struct metrics_state *st = state;
    const struct site_set *sites = module_sites(req);
    if (!st->mounted || !req->site || !sites)
        return;
    size_t i = (size_t)(req->site - sites->servers);
    if (i >= METRICS_SITES_MAX)
        i = METRICS_SITES_MAX - 1;
    struct site_counters *sc = my_counters(st);
    if (!sc)
        return;
    /* one writer: a plain load and store, no locked instruction */
    int k = resp->status >= 100 && resp->status <= 599 ? resp->status / 100 - 1 : 5;
    _Atomic uint64_t *n = &sc->requests[i][k];
    atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* --- rendering -------------------------------------------------------------------------- */

static void sample(struct strbuf *b, const char *name, const char *label, const char *value,
                   unsigned long long n)
{
    strbuf_puts(b, name);
    if (label) {
        strbuf_printf(b, "{%s=", label);
        strbuf_prom_label(b, value, strlen(value));
        strbuf_puts(b, "}");
    }
    strbuf_printf(b, " %llu\n", n);
}

static void build_and_config(struct strbuf *b, const struct server_metrics *m)
{
    strbuf_prom_family(b, "lfhttpd_build_info", "gauge", "The version running; always 1.");
    sample(b, "lfhttpd_build_info", "version", m->version, 1);
    strbuf_prom_family(b, "lfhttpd_config_generation", "gauge",
                       "The configuration generation serving: 1 at start, one more per reload.");
    sample(b, "lfhttpd_config_generation", NULL, NULL, m->generation);
    strbuf_prom_family(b, "lfhttpd_config_reloads_total", "counter",
                       "SIGHUP reloads, by result: ok (serving) or refused.");
    sample(b, "lfhttpd_config_reloads_total", "result", "ok", m->reloads_ok);
    sample(b, "lfhttpd_config_reloads_total", "result", "refused", m->reloads_refused);
}

static void process_metrics(struct strbuf *b, const struct server_metrics *m)
{
    struct rusage ru;
    double cpu = 0;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
              (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    strbuf_prom_family(b, "process_cpu_seconds_total", "counter",
                       "User and system CPU time spent, in seconds.");
    strbuf_printf(b, "process_cpu_seconds_total %.6f\n", cpu);
    unsigned long long pages_virt = 0, pages_rss = 0;
    FILE *f = fopen("/proc/self/statm", "re");
    if (f) {
        if (fscanf(f, "%llu %llu", &pages_virt, &pages_rss) != 2)
            pages_virt = pages_rss = 0;
        fclose(f);
    }
    unsigned long long page = (unsigned long long)sysconf(_SC_PAGESIZE);
    strbuf_prom_family(b, "process_resident_memory_bytes", "gauge",
                       "Resident memory size in bytes.");
    sample(b, "process_resident_memory_bytes", NULL, NULL, pages_rss * page);
    strbuf_prom_family(b, "process_virtual_memory_bytes", "gauge",
                       "Virtual memory size in bytes.");
    sample(b, "process_virtual_memory_bytes", NULL, NULL, pages_virt * page);
    unsigned long long fds = 0;
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        for (struct dirent *e = readdir(d); e; e = readdir(d))
            fds += e->d_name[0] != '.';
        closedir(d);
        fds--; /* the directory's own descriptor */
    }
    strbuf_prom_family(b, "process_open_fds", "gauge", "Number of open file descriptors.");
    sample(b, "process_open_fds", NULL, NULL, fds);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        strbuf_prom_family(b, "process_max_fds", "gauge",
                           "Maximum number of open file descriptors.");
        sample(b, "process_max_fds", NULL, NULL, (unsigned long long)rl.rlim_cur);
    }
    strbuf_prom_family(b, "process_start_time_seconds", "gauge",
                       "Start time of the process since the Unix epoch, in seconds.");
    strbuf_printf(b, "process_start_time_seconds %.3f\n", m->start_time_s);
}

static const char *const state_names[SERVER_METRICS_STATES] = {
    "new", "idle", "head", "body", "send", "linger", "stream", "timed",
};

static void class_label(struct strbuf *b, const char *name, const char *cls)
{
    strbuf_printf(b, "%s{class=", name);
    strbuf_prom_label(b, cls, strlen(cls));
}

static void class_counts(struct strbuf *b, const struct server_metrics *m)
{
    strbuf_prom_family(b, "lfhttpd_requests_total", "counter",
                       "Requests answered, by service class.");
    for (unsigned i = 0; i < m->n_classes; i++)
        sample(b, "lfhttpd_requests_total", "class", m->classes[i].name,
               m->classes[i].requests);
    strbuf_prom_family(b, "lfhttpd_responses_total", "counter",
                       "Responses, by service class and status class (1xx..5xx).");
    for (unsigned i = 0; i < m->n_classes; i++)
        for (unsigned s = 0; s < 5; s++) {
            class_label(b, "lfhttpd_responses_total", m->classes[i].name);
            strbuf_printf(b, ",code=\"%uxx\"} %llu\n", s + 1,
                          (unsigned long long)m->classes[i].by_status[s]);
        }
    strbuf_prom_family(b, "lfhttpd_sent_bytes_total", "counter",
                       "Response body bytes sent, by service class.");
    for (unsigned i = 0; i < m->n_classes; i++)
        sample(b, "lfhttpd_sent_bytes_total", "class", m->classes[i].name,
               m->classes[i].bytes_sent);
    strbuf_prom_family(b, "lfhttpd_received_bytes_total", "counter",
                       "Request bytes read from clients (heads and bodies; not what a "
                       "WebSocket tunnel carries), by service class.");
    for (unsigned i = 0; i < m->n_classes; i++)
        sample(b, "lfhttpd_received_bytes_total", "class", m->classes[i].name,
               m->classes[i].bytes_received);
}

static void class_histogram(struct strbuf *b, const struct server_metrics *m)
{
    const char *h = "lfhttpd_request_duration_seconds";
    strbuf_prom_family(b, h, "histogram",
                       "Service time, request parsed to response handed to the socket.");
    for (unsigned i = 0; i < m->n_classes; i++) {
        const uint64_t *c = m->classes[i].latency_us_log2;
        unsigned long long below = 0;
        for (unsigned k = 0; k < METRICS_BUCKET_FIRST; k++)
            below += c[k];
        for (unsigned k = METRICS_BUCKET_FIRST; k <= METRICS_BUCKET_LAST; k++) {
            below += c[k];
            class_label(b, "lfhttpd_request_duration_seconds_bucket", m->classes[i].name);
            strbuf_printf(b, ",le=\"%.9g\"} %llu\n", (double)(1ull << k) / 1e6, below);
        }
        class_label(b, "lfhttpd_request_duration_seconds_bucket", m->classes[i].name);
        strbuf_printf(b, ",le=\"+Inf\"} %llu\n", (unsigned long long)m->classes[i].requests);
        class_label(b, "lfhttpd_request_duration_seconds_sum", m->classes[i].name);
        strbuf_printf(b, "} %.6f\n", (double)m->classes[i].latency_us_sum / 1e6);
        class_label(b, "lfhttpd_request_duration_seconds_count", m->classes[i].name);
        strbuf_printf(b, "} %llu\n", (unsigned long long)m->classes[i].requests);
    }
}

static void class_connections(struct strbuf *b, const struct server_metrics *m)
{
    strbuf_prom_family(b, "lfhttpd_connections", "gauge",
                       "Connections open, by service class and state.");
    for (unsigned i = 0; i < m->n_classes; i++)
        for (unsigned s = 0; s < SERVER_METRICS_STATES; s++) {
            class_label(b, "lfhttpd_connections", m->classes[i].name);
            strbuf_printf(b, ",state=\"%s\"} %u\n", state_names[s],
                          m->classes[i].by_state[s]);
        }
}

static void tls_metrics(struct strbuf *b, const struct server_metrics *m)
{
    strbuf_prom_family(b, "lfhttpd_tls_handshakes_total", "counter",
                       "TLS handshakes completed.");
    sample(b, "lfhttpd_tls_handshakes_total", NULL, NULL, m->tls_handshakes);
    strbuf_prom_family(b, "lfhttpd_tls_resumptions_total", "counter",
                       "TLS handshakes completed that resumed a session.");
    sample(b, "lfhttpd_tls_resumptions_total", NULL, NULL, m->tls_resumed);
    strbuf_prom_family(b, "lfhttpd_tls_handshake_failures_total", "counter",
                       "TLS handshakes begun and not completed.");
    sample(b, "lfhttpd_tls_handshake_failures_total", NULL, NULL, m->tls_failed);
}

/* A sample of family `name` for server block i: its first server_name, else its place
 * ("#1", from 1), and its index. */
static void site_label(struct strbuf *b, const char *family, const struct site_server *s,
                       unsigned i)
{
    char num[16];
    snprintf(num, sizeof(num), "#%u", i + 1);
    const char *name = s->n_names && s->names[0].len ? s->names[0].text : num;
    strbuf_printf(b, "%s{server=", family);
    strbuf_prom_label(b, name, strlen(name));
    strbuf_printf(b, ",index=\"%u\"", i + 1);
}

static void site_metrics(struct strbuf *b, struct metrics_state *st,
                         const struct site_set *sites)
{
    if (!sites || sites->n_servers == 0)
        return;
    uint64_t sum[METRICS_SITES_MAX][METRICS_CLASSES] = {{0}};
    pthread_mutex_lock(&st->lock);
    for (const struct site_counters *sc = st->list; sc; sc = sc->next)
        for (unsigned i = 0; i < METRICS_SITES_MAX; i++)
            for (unsigned k = 0; k < METRICS_CLASSES; k++)
                sum[i][k] += atomic_load_explicit(&sc->requests[i][k], memory_order_relaxed);
    pthread_mutex_unlock(&st->lock);
    unsigned n = sites->n_servers < METRICS_SITES_MAX ? sites->n_servers : METRICS_SITES_MAX;
    const char *family = "lfhttpd_server_requests_total";
    strbuf_prom_family(b, family, "counter",
                       "Requests, by server block (its first server_name, else #N), since "
                       "the configuration was loaded.");
    for (unsigned i = 0; i < n; i++) {
        unsigned long long all = 0;
        for (unsigned k = 0; k < METRICS_CLASSES; k++)
            all += sum[i][k];
        site_label(b, family, &sites->servers[i], i);
        strbuf_printf(b, "} %llu\n", all);
    }
    family = "lfhttpd_server_responses_total";
    strbuf_prom_family(b, family, "counter",
                       "Responses, by server block and status class (1xx..5xx), since the "
                       "configuration was loaded.");
    for (unsigned i = 0; i < n; i++)
        for (unsigned k = 0; k < 5; k++) {
            site_label(b, family, &sites->servers[i], i);
            strbuf_printf(b, ",code=\"%uxx\"} %llu\n", k + 1, (unsigned long long)sum[i][k]);
        }
}

static void upstream_labels(struct strbuf *b, const char *name, const struct upstream *u,
                            const struct upstream_server *s)
{
    strbuf_printf(b, "%s{upstream=", name);
    strbuf_prom_label(b, u->name[0] ? u->name : "proxy_pass",
                      strlen(u->name[0] ? u->name : "proxy_pass"));
    strbuf_puts(b, ",server=");
    strbuf_prom_label(b, s->text, strlen(s->text));
}

static uint64_t relaxed(const atomic_ullong *a)
{
    return atomic_load_explicit(a, memory_order_relaxed);
}

enum upstream_figure { UP_REQUESTS, UP_FAILURES, UP_ANSWER_SUM, UP_ANSWERED, UP_UP };

static double upstream_value(const struct upstream_server *s, enum upstream_figure what,
                             int64_t now_ms)
{
    switch (what) {
    case UP_REQUESTS: return (double)relaxed(&s->requests);
    case UP_FAILURES: return (double)relaxed(&s->failures);
    case UP_ANSWER_SUM: return (double)relaxed(&s->answer_us) / 1e6;
    case UP_ANSWERED: return (double)relaxed(&s->answered);
    default: return !s->down && !upstream_server_out(s, now_ms);
    }
}

/* One family's samples over every server of every upstream set. */
static void upstream_family(struct strbuf *b, struct upstream *const *u, unsigned n,
                            const char *name, enum upstream_figure what, int64_t now_ms)
{
    for (unsigned i = 0; i < n; i++)
        for (unsigned j = 0; j < u[i]->n_servers; j++) {
            const struct upstream_server *s = &u[i]->servers[j];
            upstream_labels(b, name, u[i], s);
            strbuf_printf(b, "} %.17g\n", upstream_value(s, what, now_ms));
        }
}

static void upstream_metrics(struct strbuf *b, const struct request *req)
{
    struct upstream *u[METRICS_UPSTREAMS_MAX];
    unsigned n = module_upstreams(req, u, METRICS_UPSTREAMS_MAX);
    if (n > METRICS_UPSTREAMS_MAX)
        n = METRICS_UPSTREAMS_MAX;
    if (n == 0)
        return;
    int64_t now_ms = clock_now_ms();
    const char *base = "lfhttpd_upstream_requests_total";
    strbuf_prom_family(b, base, "counter", "Attempts sent to each upstream server.");
    upstream_family(b, u, n, base, UP_REQUESTS, now_ms);
    base = "lfhttpd_upstream_failures_total";
    strbuf_prom_family(b, base, "counter",
                       "Attempts that failed: no connection, a timeout, a broken answer.");
    upstream_family(b, u, n, base, UP_FAILURES, now_ms);
    strbuf_prom_family(b, "lfhttpd_upstream_response_seconds", "summary",
                       "Time from the attempt to the answer's head.");
    upstream_family(b, u, n, "lfhttpd_upstream_response_seconds_sum", UP_ANSWER_SUM, now_ms);
    upstream_family(b, u, n, "lfhttpd_upstream_response_seconds_count", UP_ANSWERED, now_ms);
    base = "lfhttpd_upstream_up";
    strbuf_prom_family(b, base, "gauge",
                       "1 while the server may be chosen; 0 when down or taken out.");
    upstream_family(b, u, n, base, UP_UP, now_ms);
}

static void render(struct strbuf *b, struct metrics_state *st, const struct request *req)
{
    struct server_metrics m;
    module_server_metrics(req, &m);
    build_and_config(b, &m);
    process_metrics(b, &m);
    class_counts(b, &m);
    class_histogram(b, &m);
    class_connections(b, &m);
    site_metrics(b, st, module_sites(req));
    tls_metrics(b, &m);
    upstream_metrics(b, req);
    module_metrics(req, b);
}

static enum mod_result metrics_handle(void *state, const struct request *req,
                                      struct response *resp)
{
    struct metrics_state *st = state;
    if (!req->mount || req->mount->module != st->index)
        return MOD_DECLINED;
    if (req->http->method == HTTP_METHOD_OPTIONS) {
        resp_start(resp, 200);
        resp_header(resp, "Allow", METRICS_ALLOW);
        return MOD_HANDLED;
    }
    if (req->http->method != HTTP_METHOD_GET && req->http->method != HTTP_METHOD_HEAD) {
        resp_error(resp, 405);
        resp_header(resp, "Allow", METRICS_ALLOW);
        return MOD_HANDLED;
    }
    struct strbuf b = STRBUF_INIT(METRICS_PAGE_MAX);
    render(&b, st, req);
    if (b.failed) {
        free(b.p);
        return MOD_ERROR;
    }
    resp_start(resp, 200);
    resp_header(resp, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    resp_header(resp, "Cache-Control", "no-store");
    resp_body_owned(resp, b.p, b.len, free, b.p);
    return MOD_HANDLED;
}

/* --- configuration ---------------------------------------------------------------------- */

/* `handler PREFIX metrics;`: mod_handlers reads the other names of the same directive. */
static int add_handler(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    (void)msg;
    (void)len;
    struct metrics_state *st = base;
    if (strcmp(n->args[1], METRICS_NAME) != 0)
        return 0;
    if (module_mount_add(ctx, n, n->args[0], NULL, false) < 0)
        return -1;
    st->mounted = true;
    return 0;
}

/* The module has no settings per block: the value returned only says "no error". */
static void *metrics_block(void *state, const struct module_block *b)
{
    static const char none;
    struct metrics_state *st = state;
    if (b->context != CONF_LOCATION)
        return (void *)&none;
    for (const struct conf_node *n = b->first; n; n = n->next) {
        if (strcmp(n->name, "handler") != 0 || n->n_args != 1 ||
            strcmp(n->args[0], METRICS_NAME) != 0)
            continue;
        if (module_block_mount(b, n, NULL, false) < 0)
            return NULL;
        st->mounted = true;
    }
    return (void *)&none;
}

static const struct conf_directive metrics_directives[] = {
    {"handler", CONF_LIST, CONF_TOP, CONF_REPEATS, .min_args = 2, .max_args = 2,
     .set = add_handler, .usage = "PREFIX NAME",
     .doc = "`handler PREFIX metrics;` mounts the Prometheus scrape (text exposition format "
        "0.0.4) on a path prefix."},
    {"handler", CONF_LIST, CONF_LOCATION, .min_args = 1, .max_args = 1,
     .set = conf_set_later, .usage = "NAME",
     /* mounted by the block hook */
     .doc = "`handler metrics;` answers the location with the Prometheus scrape."},
    {.name = NULL},
};

static void metrics_fini(void *state)
{
    struct metrics_state *st = state;
    if (!st)
        return;
    while (st->list) {
        struct site_counters *next = st->list->next;
        free(st->list);
        st->list = next;
    }
    pthread_mutex_destroy(&st->lock);
    free(st);
}

static int metrics_init(struct module_init *mi, void **state)
{
    struct metrics_state *st = calloc(1, sizeof(*st));
    if (!st)
        return module_error(mi, NULL, "out of memory");
    st->index = mi->index;
    st->generation = atomic_fetch_add(&metrics_generations, 1) + 1;
    pthread_mutex_init(&st->lock, NULL);
    if (module_read_directives(mi, st) < 0) {
        metrics_fini(st);
        return -1;
    }
    *state = st;
    return 0;
}

const struct module mod_metrics = {
    .name = "metrics",
    .directives = metrics_directives,
    .init = metrics_init,
    .fini = metrics_fini,
    .handle = metrics_handle,
    .log = metrics_log,
    .block = metrics_block,
};
