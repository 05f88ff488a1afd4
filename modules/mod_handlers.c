/* mod_handlers.c — handlers that answer in-process, mounted on path prefixes.
 *
 *   handler /hello hello;    200 "Hello, world!\n" from static memory, nothing allocated:
 *                            the least a dynamic answer can cost, for benchmarks
 *   handler /echo echo;      the request body as it came (decoded if it came chunked),
 *                            with the request's Content-Type: 200 and nothing else, as
 *                            conformance suites' echo endpoints answer
 *   handler /req request;    the request as the server received it: request line, header
 *                            fields, a blank line, then the body (decoded if chunked), as
 *                            text/plain, to see what a client or a proxy sent
 *   handler /healthz health; 200 "ok\n" while the server serves; 503 "draining\n" in the
 *                            shutdown_delay after SIGTERM, for load balancers and
 *                            Kubernetes readiness probes (never cached)
 *   handler /status status;  live figures: uptime, per service class (its Leader/Followers
 *                            group's threads, nice, connections, requests, service-time
 *                            p50/p99, events, hand-offs, epoll waits), requests, bytes and
 *                            responses by status class; HTML, or JSON when asked
 *
 * `handler PREFIX NAME;` may be repeated; the longest matching prefix wins (the core's
 * routing). Only echo and request ask the core for request bodies. OPTIONS on a handler
 * answers 200 with Allow, the methods it takes (RFC 9110 section 9.3.7); a method it
 * does not take is 405 with the same Allow.
 *
 * Counting for the status page happens in the log hook, which runs for every response the
 * chain answered (not, today, for the core's answers to heads that do not parse), on the
 * thread that made it. Every thread counts into its own struct, cache-line aligned,
 * registered once in a list under a mutex; the page sums the list. Each counter has
 * one writer, so an increment is a relaxed load and store (no locked instruction), and
 * relaxed loads on the reading side keep ThreadSanitizer informed. Nothing is counted
 * unless a status handler is mounted.
 */
#include <assert.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "clock.h"
#include "http_params.h"
#include "mod_handlers.h"
#include "module.h"
#include "module_figures.h"
#include "strbuf.h"
#include "upstream.h"

#define STATUS_PAGE_MAX 32768 /* the status page's largest size; its content is bounded */

struct handlers_state;

struct handler_kind {
    const char *name;
    enum mod_result (*handle)(struct handlers_state *st, const struct request *req,
                              struct response *resp);
    bool wants_body;
    const char *allow; /* the methods it takes, as the Allow field lists them */
};

/* One thread's figures. Written only by its thread, read by whoever renders the page. */
struct thread_counters {
    alignas(64) _Atomic uint64_t requests;
    _Atomic uint64_t bytes;       /* body bytes of responses, as in the access log */
    _Atomic uint64_t by_class[5]; /* responses 1xx .. 5xx */
    struct thread_counters *next; /* the list, under status_counters.lock */
    pthread_t owner;
};

struct handlers_state {
    unsigned index; /* this module's place in the chain */
    bool counting;  /* a status handler is mounted */
    struct status_counters counters;
};

/* A thread's registration: thread-local because the log hook runs on many threads, with a
 * generation because a module instance (and so its list) may be made again (-t, tests, a
 * configuration reload, after which the old and the new instance serve side by side for a
 * while). */
static _Thread_local struct {
    uint64_t generation;
    struct thread_counters *tc;
} tls_counters;
static atomic_uint_fast64_t handlers_generations; /* process-wide: one per init */

/* --- counting --------------------------------------------------------------------------- */

void status_counters_init(struct status_counters *c)
{
    c->generation = atomic_fetch_add(&handlers_generations, 1) + 1;
    pthread_mutex_init(&c->lock, NULL);
    c->list = NULL;
}

void status_counters_fini(struct status_counters *c)
{
    while (c->list) {
        struct thread_counters *next = c->list->next;
        free(c->list);
        c->list = next;
    }
    pthread_mutex_destroy(&c->lock);
}

static struct thread_counters *my_counters(struct status_counters *c)
{
    if (tls_counters.generation == c->generation)
        return tls_counters.tc;
    /* Not this instance's last user: find this thread's entry, or make one. A thread that
     * alternates between two instances finds its entry again instead of adding more. */
    pthread_t self = pthread_self();
    pthread_mutex_lock(&c->lock);
    struct thread_counters *tc = c->list;
    while (tc && !pthread_equal(tc->owner, self))
        tc = tc->next;
    if (!tc && (tc = aligned_alloc(64, sizeof(*tc)))) {
        memset(tc, 0, sizeof(*tc));
        tc->owner = self;
        tc->next = c->list;
        c->list = tc;
    }
    pthread_mutex_unlock(&c->lock);
    if (!tc)
        return NULL;
    tls_counters.generation = c->generation;
    tls_counters.tc = tc;
    return tc;
}

static void bump(_Atomic uint64_t *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

void status_counters_count(struct status_counters *c, const struct response *resp)
{
    struct thread_counters *tc = my_counters(c);
    if (!tc)
        return;
    bump(&tc->requests, 1);
    bump(&tc->bytes, resp_body_bytes(resp));
    int cls = resp_status(resp) / 100;
    if (cls >= 1 && cls <= 5)
        bump(&tc->by_class[cls - 1], 1);
}

void status_counters_sum(struct status_counters *c, struct status_totals *t)
{
    memset(t, 0, sizeof(*t));
    pthread_mutex_lock(&c->lock);
    for (const struct thread_counters *tc = c->list; tc; tc = tc->next) {
        t->requests += atomic_load_explicit(&tc->requests, memory_order_relaxed);
        t->bytes += atomic_load_explicit(&tc->bytes, memory_order_relaxed);
        for (int i = 0; i < 5; i++)
            t->by_class[i] += atomic_load_explicit(&tc->by_class[i], memory_order_relaxed);
    }
    pthread_mutex_unlock(&c->lock);
}

struct status_counters *handlers_counters(void *state)
{
    struct handlers_state *st = state;
    return st->counting ? &st->counters : NULL;
}

static void handlers_log(void *state, const struct request *req, const struct response *resp)
{
    (void)req;
    struct handlers_state *st = state;
    if (st->counting)
        status_counters_count(&st->counters, resp);
}

/* --- content negotiation ---------------------------------------------------------------- */

bool handlers_accept_prefers_json(struct http_slice accept)
{
    if (accept.len == 0)
        return false; /* (accept.p is NULL then) */
    int q_json = 0, q_html = 0;
    const char *p = accept.p, *end = accept.p + accept.len;
    struct http_qitem it;
    while (http_qlist_next(&p, end, &it)) {
        if (it.value.len == 16 && strncasecmp(it.value.p, "application/json", 16) == 0)
            q_json = it.q;
        else if (it.value.len == 9 && strncasecmp(it.value.p, "text/html", 9) == 0)
            q_html = it.q;
    }
    return q_json > 0 && q_json > q_html;
}

bool handlers_status_wants_json(const struct http_request *h)
{
    if (http_query_has(h->query, "format", "json"))
        return true;
    if (http_query_has(h->query, "format", "html"))
        return false;
    const struct http_header *a = http_find_header(h, "accept");
    return a && handlers_accept_prefers_json(a->value);
}

/* --- the handlers ----------------------------------------------------------------------- */

static enum mod_result not_allowed(struct response *resp, const char *allow)
{
    resp_error(resp, 405);
    resp_header(resp, "Allow", allow);
    return MOD_HANDLED;
}

/* Does the comma-separated Allow list name the method? */
static bool allow_lists(const char *allow, struct http_slice method)
{
    for (const char *p = allow; *p;) {
        size_t n = strcspn(p, ",");
        if (n == method.len && memcmp(p, method.p, n) == 0)
            return true;
        p += n;
        p += strspn(p, ", ");
    }
    return false;
}

static enum mod_result hello_handle(struct handlers_state *st, const struct request *req,
                                    struct response *resp)
{
    (void)st;
    (void)req;
    static const char hello[] = "Hello, world!\n";
    resp_start(resp, 200);
    resp_header(resp, "Content-Type", "text/plain; charset=utf-8");
    resp_body_mem(resp, hello, sizeof(hello) - 1);
    return MOD_HANDLED;
}

/* The request line and header fields as an HTTP/1.1 head: CRLF lines, a blank line. */
size_t handlers_request_head_len(const struct http_request *h)
{
    size_t n = h->method_name.len + 1 + h->target.len + 1 + 8 + 2;
    for (unsigned i = 0; i < h->n_headers; i++)
        n += h->headers[i].name.len + 2 + h->headers[i].value.len + 2;
    return n + 2;
}

void handlers_request_head_write(const struct http_request *h, char *out)
{
    char *p = out;
#define PUT(s, n) (memcpy(p, (s), (n)), p += (n))
    PUT(h->method_name.p, h->method_name.len);
    PUT(" ", 1);
    PUT(h->target.p, h->target.len);
    PUT(h->version_minor == 0 ? " HTTP/1.0\r\n" : " HTTP/1.1\r\n", 11);
    for (unsigned i = 0; i < h->n_headers; i++) {
        PUT(h->headers[i].name.p, h->headers[i].name.len);
        PUT(": ", 2);
        PUT(h->headers[i].value.p, h->headers[i].value.len);
        PUT("\r\n", 2);
    }
    PUT("\r\n", 2);
#undef PUT
}

/* A body the client sent comes back only to it: never cached, never sniffed as HTML. */
static void reflected_headers(struct response *resp)
{
    resp_header(resp, "X-Content-Type-Options", "nosniff");
    resp_header(resp, "Cache-Control", "no-store");
}

static enum mod_result request_handle(struct handlers_state *st, const struct request *req,
                                      struct response *resp)
{
    (void)st;
    const struct http_request *h = req->http;
    resp_start(resp, 200);
    resp_header(resp, "Content-Type", "text/plain; charset=utf-8");
    reflected_headers(resp);

    size_t n = handlers_request_head_len(h);
    char *head = resp_body_alloc(resp, n); /* scratch for most heads, no allocation */
    if (!head)
        return MOD_ERROR;
    handlers_request_head_write(h, head);
    resp_body_mem(resp, head, n);
    /* The body stays where the core collected it until the response is sent (or copied
     * because the socket would block), so it goes out without a copy. */
    if (req->body && req->body_len)
        resp_body_mem(resp, req->body, req->body_len);
    return MOD_HANDLED;
}

/* The body alone, with the request's media type (none if it had none). The value was
 * checked by the parser (no CR, LF or other control bytes), so it is safe in our head. */
static enum mod_result echo_handle(struct handlers_state *st, const struct request *req,
                                   struct response *resp)
{
    (void)st;
    struct http_slice type = req->http->content_type;
    resp_start(resp, 200);
    if (type.len)
        resp_headerf(resp, "Content-Type: %.*s", (int)type.len, type.p);
    reflected_headers(resp);
    if (req->body && req->body_len) /* as in request_handle: sent without a copy */
        resp_body_mem(resp, req->body, req->body_len);
    return MOD_HANDLED;
}

/* Ready or not: what a load balancer's health check or a readiness probe asks. Answered
 * from static memory, so that probing every second costs nothing. */
static enum mod_result health_handle(struct handlers_state *st, const struct request *req,
                                     struct response *resp)
{
    (void)st;
    static const char ok[] = "ok\n", draining[] = "draining\n";
    bool ready = !module_server_draining(req);
    resp_start(resp, ready ? 200 : 503);
    resp_header(resp, "Content-Type", "text/plain; charset=utf-8");
    resp_header(resp, "Cache-Control", "no-store");
    if (ready)
        resp_body_mem(resp, ok, sizeof(ok) - 1);
    else
        resp_body_mem(resp, draining, sizeof(draining) - 1);
    return MOD_HANDLED;
}

static const char status_style[] =
    ":root{color-scheme:light dark;--bg:#fff;--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;"
    "--head:#f6f8fa;--accent:#0969da}\n"
    "@media (prefers-color-scheme:dark){:root{--bg:#0d1117;--fg:#e6edf3;--muted:#9198a1;"
    "--line:#30363d;--head:#151b23;--accent:#4493f8}}\n"
    "*{box-sizing:border-box}\n"
    "body{margin:0;background:var(--bg);color:var(--fg);"
    "font:15px/1.5 system-ui,-apple-system,\"Segoe UI\",Roboto,\"Noto Sans\",sans-serif}\n"
    "main{max-width:980px;margin:0 auto;padding:28px 16px 40px}\n"
    "h1{font-size:20px;font-weight:600;margin:0 0 18px}\n"
    "h2{font-size:15px;font-weight:600;margin:26px 0 10px}\n"
    ".cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(150px,1fr));gap:12px}\n"
    ".card{border:1px solid var(--line);border-radius:8px;padding:12px 14px}\n"
    ".card dt{color:var(--muted);font-size:12px;text-transform:uppercase;"
    "letter-spacing:.04em}\n"
    ".card dd{margin:2px 0 0;font-size:22px;font-weight:600;"
    "font-variant-numeric:tabular-nums;color:var(--accent)}\n"
    ".wrap{overflow-x:auto}\n"
    "table{width:100%;border-collapse:separate;border-spacing:0;border:1px solid var(--line);"
    "border-radius:8px;overflow:hidden}\n"
    "th,td{padding:7px 12px;text-align:right;white-space:nowrap;"
    "font-variant-numeric:tabular-nums}\n"
    "th:first-child,td:first-child{text-align:left}\n"
    "th{background:var(--head);color:var(--muted);font-size:12px;font-weight:600;"
    "text-transform:uppercase;letter-spacing:.04em;border-bottom:1px solid var(--line)}\n"
    "tbody tr+tr td{border-top:1px solid var(--line)}\n"
    "footer{margin-top:18px;color:var(--muted);font-size:13px}\n"
    "footer a{color:var(--accent)}\n"
    "@media (max-width:600px){main{padding:16px 8px 28px}th,td{padding:7px 8px}}\n";

/* "3d 04h 05m 06s", "5m 06s", "42s" */
void handlers_format_uptime(int64_t s, char out[48])
{
    if (s < 0)
        s = 0;
    long long d = s / 86400, h = s / 3600 % 24, m = s / 60 % 60, sec = s % 60;
    if (d)
        snprintf(out, 48, "%lldd %02lldh %02lldm %02llds", d, h, m, sec);
    else if (h)
        snprintf(out, 48, "%lldh %02lldm %02llds", h, m, sec);
    else if (m)
        snprintf(out, 48, "%lldm %02llds", m, sec);
    else
        snprintf(out, 48, "%llds", sec);
}

/* A service-time bound: "<= 256 us", "<= 1.0 ms", "<= 2.1 s"; "-" before any request. */
static void format_micros(uint64_t us, char out[24])
{
    if (us == 0)
        snprintf(out, 24, "&ndash;");
    else if (us < 1000)
        snprintf(out, 24, "&le; %llu &micro;s", (unsigned long long)us);
    else if (us < 1000000)
        snprintf(out, 24, "&le; %.1f ms", (double)us / 1e3);
    else
        snprintf(out, 24, "&le; %.1f s", (double)us / 1e6);
}

/* The upstream sets the proxy sends to, for the status page. */
struct status_upstreams {
    struct upstream *u[64];
    unsigned n;
    int64_t now_ms;
};

static const char *server_state(const struct upstream_server *s, int64_t now_ms)
{
    if (s->down)
        return "down";
    if (upstream_server_out(s, now_ms))
        return "out";
    return s->backup ? "backup" : "up";
}

/* The mean time to an answer's head, in microseconds (0 before any). */
static unsigned long long answer_mean_us(const struct upstream_server *s)
{
    unsigned long long n = atomic_load_explicit(&s->answered, memory_order_relaxed);
    return n ? atomic_load_explicit(&s->answer_us, memory_order_relaxed) / n : 0;
}

static void upstreams_html(struct strbuf *b, const struct status_upstreams *su)
{
    if (su->n == 0)
        return;
    strbuf_puts(b, "<h2>Upstreams</h2>\n<div class=\"wrap\"><table id=\"upstreams\">\n"
                "<thead><tr><th>Upstream</th><th>Server</th><th>State</th><th>Weight</th>"
                "<th title=\"requests in flight\">Active</th><th>Requests</th>"
                "<th>Failures</th><th title=\"mean time to the answer's head\">Answer</th>"
                "</tr></thead>\n<tbody>\n");
    for (unsigned i = 0; i < su->n && i < 64; i++) {
        const struct upstream *u = su->u[i];
        for (unsigned j = 0; j < u->n_servers; j++) {
            const struct upstream_server *s = &u->servers[j];
            char mean[32] = "&ndash;";
            unsigned long long us = answer_mean_us(s);
            if (us)
                snprintf(mean, sizeof(mean), "%llu.%llu ms", us / 1000, us % 1000 / 100);
            strbuf_puts(b, "<tr><td>");
            strbuf_html(b, u->name[0] ? u->name : "(proxy_pass)",
                        strlen(u->name[0] ? u->name : "(proxy_pass)"));
            strbuf_puts(b, "</td><td>");
            strbuf_html(b, s->text, strlen(s->text));
            strbuf_printf(b, "</td><td>%s</td><td>%u</td><td>%u</td><td>%llu</td><td>%llu</td>"
                          "<td>%s</td></tr>\n",
                          server_state(s, su->now_ms), s->weight,
                          atomic_load_explicit(&s->active, memory_order_relaxed),
                          (unsigned long long)atomic_load(&s->requests),
                          (unsigned long long)atomic_load(&s->failures), mean);
        }
    }
    strbuf_puts(b, "</tbody>\n</table></div>\n");
}

static void upstreams_json(struct strbuf *b, const struct status_upstreams *su)
{
    strbuf_puts(b, ",\"upstreams\":[");
    unsigned k = 0;
    for (unsigned i = 0; i < su->n && i < 64; i++) {
        const struct upstream *u = su->u[i];
        for (unsigned j = 0; j < u->n_servers; j++) {
            const struct upstream_server *s = &u->servers[j];
            strbuf_puts(b, k++ ? ",{\"upstream\":" : "{\"upstream\":");
            strbuf_json(b, u->name, strlen(u->name));
            strbuf_puts(b, ",\"server\":");
            strbuf_json(b, s->text, strlen(s->text));
            strbuf_printf(b, ",\"state\":\"%s\",\"weight\":%u,\"active\":%u,"
                          "\"requests\":%llu,\"failures\":%llu,\"answer_mean_us\":%llu}",
                          server_state(s, su->now_ms), s->weight,
                          atomic_load_explicit(&s->active, memory_order_relaxed),
                          (unsigned long long)atomic_load(&s->requests),
                          (unsigned long long)atomic_load(&s->failures), answer_mean_us(s));
        }
    }
    strbuf_puts(b, "]");
}

static void status_html(struct strbuf *b, const struct server_stats *ss,
                        const struct status_totals *t, const struct status_upstreams *su)
{
    char up[48];
    handlers_format_uptime(ss->uptime_s, up);
    strbuf_puts(b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
                "<meta name=\"color-scheme\" content=\"light dark\">\n"
                "<title>lfhttpd status</title>\n<style>\n");
    strbuf_puts(b, status_style);
    strbuf_puts(b, "</style>\n</head>\n<body>\n<main>\n<h1>lfhttpd status</h1>\n"
                "<dl class=\"cards\">\n");
    strbuf_printf(b, "<div class=\"card\"><dt>Uptime</dt><dd id=\"uptime\" data-s=\"%lld\">%s"
                  "</dd></div>\n",
               (long long)ss->uptime_s, up);
    strbuf_printf(b, "<div class=\"card\"><dt>Connections</dt><dd id=\"connections\">%u</dd>"
                  "</div>\n",
               ss->connections);
    strbuf_printf(b, "<div class=\"card\"><dt>Configuration</dt><dd id=\"generation\" "
                  "title=\"1 at start, one more per reload\">generation %u</dd></div>\n",
               ss->generation);
    strbuf_printf(b, "<div class=\"card\"><dt>Requests</dt><dd id=\"requests\">%llu</dd>"
                  "</div>\n",
               (unsigned long long)t->requests);
    strbuf_printf(b, "<div class=\"card\"><dt>Bytes served</dt><dd id=\"bytes\">%llu</dd>"
                  "</div>\n</dl>\n",
               (unsigned long long)t->bytes);
    strbuf_puts(b, "<h2>Responses</h2>\n<div class=\"wrap\"><table id=\"responses\">\n<thead><tr>"
                "<th>Status</th><th>1xx</th><th>2xx</th><th>3xx</th><th>4xx</th><th>5xx</th>"
                "</tr></thead>\n<tbody><tr><td>Responses</td>");
    for (int i = 0; i < 5; i++)
        strbuf_printf(b, "<td>%llu</td>", (unsigned long long)t->by_class[i]);
    strbuf_puts(b, "</tr></tbody>\n</table></div>\n<h2>Service classes (thread groups)"
                "</h2>\n<div class=\"wrap\"><table id=\"groups\">\n<thead><tr><th>Class</th>"
                "<th>Strategy</th><th>Threads</th><th>Nice</th>"
                "<th title=\"open connections\">Conns</th>"
                "<th>Requests</th><th title=\"service time, median\">p50</th>"
                "<th title=\"service time, 99th percentile\">p99</th>"
                "<th title=\"events dispatched\">Events</th>"
                "<th title=\"promotions of a follower to leader; events queued for a worker "
                "(Half-Sync/Half-Async); connections given a thread (Thread-per-Connection)\">"
                "Hand-offs</th>"
                "<th title=\"epoll_wait calls\">Epoll waits</th></tr></thead>\n<tbody>\n");
    for (unsigned i = 0; i < ss->n_groups && i < SERVER_STATS_GROUPS; i++) {
        char p50[24], p99[24];
        format_micros(ss->groups[i].p50_us, p50);
        format_micros(ss->groups[i].p99_us, p99);
        strbuf_puts(b, "<tr><td>");
        strbuf_html(b, ss->groups[i].name, strlen(ss->groups[i].name));
        strbuf_puts(b, "</td><td>");
        strbuf_html(b, ss->groups[i].strategy, strlen(ss->groups[i].strategy));
        strbuf_printf(b, "</td><td>%u</td><td>%d</td><td>%u</td><td>%llu</td><td>%s</td>"
                      "<td>%s</td><td>%llu</td><td>%llu</td><td>%llu</td></tr>\n",
                   ss->groups[i].threads, ss->groups[i].nice, ss->groups[i].connections,
                   (unsigned long long)ss->groups[i].requests, p50, p99,
                   (unsigned long long)ss->groups[i].events,
                   (unsigned long long)ss->groups[i].handoffs,
                   (unsigned long long)ss->groups[i].waits);
    }
    strbuf_puts(b, "</tbody>\n</table></div>\n");
    upstreams_html(b, su);
    strbuf_puts(b, "<footer>Figures since start; requests, bytes and "
                "responses since the last reload. This page is not counted until it is sent. <a href=\"?format=json\">JSON</a></footer>\n"
                "</main>\n</body>\n</html>\n");
}

static void status_json(struct strbuf *b, const struct server_stats *ss,
                        const struct status_totals *t, const struct status_upstreams *su)
{
    strbuf_printf(b, "{\"uptime_s\":%lld,\"generation\":%u,\"connections\":%u,"
                  "\"context_switches\":{\"voluntary\":%llu,\"involuntary\":%llu},"
                  "\"requests\":%llu,\"bytes\":%llu,"
                  "\"responses\":{\"1xx\":%llu,\"2xx\":%llu,\"3xx\":%llu,\"4xx\":%llu,"
                  "\"5xx\":%llu},\"groups\":[",
               (long long)ss->uptime_s, ss->generation, ss->connections,
               (unsigned long long)ss->ctx_voluntary, (unsigned long long)ss->ctx_involuntary,
               (unsigned long long)t->requests,
               (unsigned long long)t->bytes, (unsigned long long)t->by_class[0],
               (unsigned long long)t->by_class[1], (unsigned long long)t->by_class[2],
               (unsigned long long)t->by_class[3], (unsigned long long)t->by_class[4]);
    for (unsigned i = 0; i < ss->n_groups && i < SERVER_STATS_GROUPS; i++) {
        strbuf_puts(b, i ? ",{\"name\":" : "{\"name\":");
        strbuf_json(b, ss->groups[i].name, strlen(ss->groups[i].name));
        strbuf_puts(b, ",\"strategy\":");
        strbuf_json(b, ss->groups[i].strategy, strlen(ss->groups[i].strategy));
        strbuf_printf(b, ",\"threads\":%u,\"nice\":%d,\"connections\":%u,\"requests\":%llu,"
                      "\"p50_us\":%llu,\"p99_us\":%llu,\"events\":%llu,\"handoffs\":%llu,"
                      "\"waits\":%llu}",
                   ss->groups[i].threads, ss->groups[i].nice, ss->groups[i].connections,
                   (unsigned long long)ss->groups[i].requests,
                   (unsigned long long)ss->groups[i].p50_us,
                   (unsigned long long)ss->groups[i].p99_us,
                   (unsigned long long)ss->groups[i].events,
                   (unsigned long long)ss->groups[i].handoffs,
                   (unsigned long long)ss->groups[i].waits);
    }
    strbuf_puts(b, "]");
    upstreams_json(b, su);
    strbuf_puts(b, "}\n");
}

static enum mod_result status_handle(struct handlers_state *st, const struct request *req,
                                     struct response *resp)
{
    struct server_stats ss;
    struct status_totals t;
    module_server_stats(req, &ss);
    status_counters_sum(&st->counters, &t);

    struct strbuf b = STRBUF_INIT(STATUS_PAGE_MAX);
    struct status_upstreams su;
    su.n = module_upstreams(req, su.u, 64);
    su.now_ms = clock_now_ms();
    bool json = handlers_status_wants_json(req->http);
    if (json)
        status_json(&b, &ss, &t, &su);
    else
        status_html(&b, &ss, &t, &su);
    if (b.failed) {
        free(b.p);
        return MOD_ERROR;
    }
    resp_start(resp, 200);
    resp_header(resp, "Content-Type", json ? "application/json" : "text/html; charset=utf-8");
    resp_header(resp, "Cache-Control", "no-store");
    resp_header(resp, "Vary", "Accept");
    resp_body_owned(resp, b.p, b.len, free, b.p);
    return MOD_HANDLED;
}

#define ANY_ALLOW "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"
#define READ_ALLOW "GET, HEAD, OPTIONS"

static const struct handler_kind handler_kinds[] = {
    {"echo", echo_handle, true, ANY_ALLOW},
    {"health", health_handle, false, READ_ALLOW},
    {"hello", hello_handle, false, READ_ALLOW},
    {"request", request_handle, true, ANY_ALLOW},
    {"status", status_handle, false, READ_ALLOW},
};
#define HANDLER_KINDS (sizeof(handler_kinds) / sizeof(handler_kinds[0]))

/* --- the hooks ----------------------------------------------------------------------- */

static enum mod_result handlers_handle(void *state, const struct request *req,
                                       struct response *resp)
{
    struct handlers_state *st = state;
    if (!req->mount || req->mount->module != st->index)
        return MOD_DECLINED;
    const struct handler_kind *k = req->mount->data;
    if (!allow_lists(k->allow, req->http->method_name))
        return not_allowed(resp, k->allow);
    if (req->http->method == HTTP_METHOD_OPTIONS) {
        resp_start(resp, 200); /* no body: Content-Length: 0 */
        resp_header(resp, "Allow", k->allow);
        return MOD_HANDLED;
    }
    return k->handle(st, req, resp);
}

/* `handler PREFIX metrics;` is the same directive, read by mod_metrics. */
static bool other_module_kind(const char *name)
{
    return strcmp(name, "metrics") == 0;
}

static const struct handler_kind *kind_named(const char *name)
{
    for (size_t i = 0; i < HANDLER_KINDS; i++)
        if (strcmp(handler_kinds[i].name, name) == 0)
            return &handler_kinds[i];
    return NULL;
}

static void handlers_fini(void *state)
{
    struct handlers_state *st = state;
    if (!st)
        return;
    status_counters_fini(&st->counters);
    free(st);
}

/* `handler PREFIX NAME;`: mounts the handler named on the prefix. */
static int add_handler(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    struct handlers_state *st = base;
    if (other_module_kind(n->args[1]))
        return 0;
    const struct handler_kind *k = kind_named(n->args[1]);
    if (!k)
        return snprintf(msg, len, "unknown handler \"%s\" (known: echo, health, hello, "
                        "metrics, request, status)", n->args[1]), -1;
    /* The kinds are read-only: the cast only fits the mount's generic pointer. */
    if (module_mount_add(ctx, n, n->args[0], (void *)k, k->wants_body) < 0)
        return -1;
    if (k->handle == status_handle)
        st->counting = true;
    return 0;
}

/* `handler NAME;` in a location: checked here, mounted by the block hook. */
static int location_handler(void *base, const struct conf_node *n, void *ctx, char *msg,
                            size_t len)
{
    (void)base;
    (void)ctx;
    if (other_module_kind(n->args[0]))
        return 0;
    if (!kind_named(n->args[0]))
        return snprintf(msg, len, "unknown handler \"%s\" (known: echo, health, hello, "
                        "metrics, request, status)", n->args[0]), -1;
    return 0;
}

/* A location's `handler NAME;` makes the handler its content. The module has no settings
 * per block: the value returned only says "no error". */
static void *handlers_block(void *state, const struct module_block *b)
{
    static const char none;
    struct handlers_state *st = state;
    if (b->context != CONF_LOCATION)
        return (void *)&none;
    if (module_block_read(b, st) < 0)
        return NULL;
    for (const struct conf_node *n = b->first; n; n = n->next) {
        if (strcmp(n->name, "handler") != 0 || n->n_args != 1 || other_module_kind(n->args[0]))
            continue;
        const struct handler_kind *k = kind_named(n->args[0]);
        if (module_block_mount(b, n, (void *)k, k->wants_body) < 0)
            return NULL;
        if (k->handle == status_handle)
            st->counting = true;
    }
    return (void *)&none;
}

static const struct conf_directive handlers_directives[] = {
    {"handler", CONF_LIST, CONF_TOP, CONF_REPEATS, .min_args = 2, .max_args = 2,
     .set = add_handler, .usage = "PREFIX NAME",
     .doc = "Mounts an in-process handler on a path prefix (repeatable; longest prefix wins; a "
        "prefix matches whole path segments, so `/echo` answers `/echo` and `/echo/x` but "
        "not `/echoes`, while a prefix ending in `/` matches everything below it): `hello`, "
        "`echo`, `request`, `status`, `health` (and `metrics`, mod_metrics's). Unknown names "
        "are configuration errors."},
    {"handler", CONF_LIST, CONF_LOCATION, .min_args = 1, .max_args = 1,
     .set = location_handler, .usage = "NAME",
     .doc = "The location is answered by an in-process handler (`echo`, `health`, `hello`, "
        "`request`, `status`, `metrics`)."},
    {.name = NULL},
};

static int handlers_init(struct module_init *mi, void **state)
{
    struct handlers_state *st = calloc(1, sizeof(*st));
    if (!st)
        return module_error(mi, NULL, "out of memory");
    st->index = mi->index;
    status_counters_init(&st->counters);
    if (module_read_directives(mi, st) < 0) {
        handlers_fini(st);
        return -1;
    }
    *state = st;
    return 0;
}

const struct module mod_handlers = {
    .name = "handlers",
    .directives = handlers_directives,
    .init = handlers_init,
    .fini = handlers_fini,
    .handle = handlers_handle,
    .log = handlers_log,
    .block = handlers_block,
};
