/* Unit tests of mod_handlers' pure parts: content negotiation, the request handler's head, uptime, and
 * the per-thread counters, through mod_handlers.h; and its log hook, through the module. */
#define TEST_MAIN
#include "test.h"

#include <pthread.h>
#include <unistd.h>

#include "config.h"
#include "mod_handlers.h"
#include "module_chain.h"

extern const struct module mod_handlers;

static bool prefers_json(const char *accept)
{
    return handlers_accept_prefers_json((struct http_slice){accept, strlen(accept)});
}

TEST(accept_json_alone_or_preferred)
{
    CHECK(prefers_json("application/json"));
    CHECK(prefers_json("Application/JSON"));
    CHECK(prefers_json("application/json, text/html;q=0.5"));
    CHECK(prefers_json("text/html;q=0.1,application/json;q=0.2"));
    CHECK(prefers_json("application/json ; charset=utf-8"));
}

TEST(accept_html_browsers_and_wildcards_get_html)
{
    CHECK(!prefers_json(""));
    CHECK(!prefers_json("*/*"));
    CHECK(!prefers_json("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"));
    CHECK(!prefers_json("application/json;q=0"));
    CHECK(!prefers_json("application/json;q=0.000"));
    CHECK(!prefers_json("application/json, text/html")); /* a tie: the default */
    CHECK(!prefers_json("application/jsonx"));
}

TEST(accept_q_values)
{
    CHECK(prefers_json("text/html;q=0.4, application/json;q=0.5"));
    CHECK(prefers_json("text/html;q=0.2, application/json; level=1; Q=0.25"));
    CHECK(prefers_json("text/html;q=0.999, application/json;q=1.000"));
    CHECK(!prefers_json("application/json;q=0.0001")); /* three decimals at most */
}

static struct http_request with_query(const char *q)
{
    struct http_request h = {0};
    h.query = (struct http_slice){q, strlen(q)};
    return h;
}

TEST(query_format_parameter)
{
    struct http_request h = with_query("format=json");
    CHECK(handlers_status_wants_json(&h));
    h = with_query("x=1&format=html");
    CHECK(!handlers_status_wants_json(&h));
    h = with_query("format=jsonp");
    CHECK(!handlers_status_wants_json(&h));
    struct http_request none = {0}; /* no query, no Accept: NULL slices */
    CHECK(!handlers_status_wants_json(&none));
    CHECK(!handlers_accept_prefers_json((struct http_slice){NULL, 0}));
}

TEST(format_html_wins_over_accept_json)
{
    struct http_request h = with_query("format=html");
    h.headers[0].name = (struct http_slice){"Accept", 6};
    h.headers[0].value = (struct http_slice){"application/json", 16};
    h.n_headers = 1;
    CHECK(!handlers_status_wants_json(&h));
    h.query.len = 0;
    CHECK(handlers_status_wants_json(&h));
}

TEST(request_head_is_the_request_as_received)
{
    const char raw[] = "POST /e?x HTTP/1.1\r\nHost: t\r\nX-A: 1 2\r\n\r\n";
    struct http_limits lim = {8192, 64};
    struct http_request h;
    CHECK(http_parse_request(raw, sizeof(raw) - 1, &lim, &h) > 0);
    size_t n = handlers_request_head_len(&h);
    CHECK_EQ_INT(n, sizeof(raw) - 1);
    char out[128];
    handlers_request_head_write(&h, out);
    CHECK(memcmp(out, raw, n) == 0);
}

TEST(request_head_of_http10)
{
    const char raw[] = "GET / HTTP/1.0\r\n\r\n";
    struct http_limits lim = {8192, 64};
    struct http_request h;
    CHECK(http_parse_request(raw, sizeof(raw) - 1, &lim, &h) > 0);
    char out[64];
    CHECK_EQ_INT(handlers_request_head_len(&h), sizeof(raw) - 1);
    handlers_request_head_write(&h, out);
    CHECK(memcmp(out, raw, sizeof(raw) - 1) == 0);
}

TEST(uptime_text)
{
    char out[48];
    handlers_format_uptime(42, out);
    CHECK(strcmp(out, "42s") == 0);
    handlers_format_uptime(366, out);
    CHECK(strcmp(out, "6m 06s") == 0);
    handlers_format_uptime(3 * 86400 + 4 * 3600 + 5 * 60 + 6, out);
    CHECK(strcmp(out, "3d 04h 05m 06s") == 0);
    handlers_format_uptime(-5, out);
    CHECK(strcmp(out, "0s") == 0);
}

static struct status_counters *counters_new(void)
{
    struct status_counters *c = malloc(sizeof(*c));
    status_counters_init(c);
    return c;
}

static void counters_free(struct status_counters *c)
{
    status_counters_fini(c);
    free(c);
}

static void log_one(struct status_counters *c, int status, uint64_t bytes, bool head)
{
    static const char body[256];
    struct response r;
    resp_init(&r);
    resp_start(&r, status);
    resp_body_mem(&r, body, bytes);
    r.head_only = head; /* as the core marks a HEAD request's response */
    status_counters_count(c, &r);
}

TEST(counters_by_class_and_bytes)
{
    struct status_counters *c = counters_new();
    log_one(c, 200, 100, false);
    log_one(c, 200, 100, true); /* HEAD: no body bytes */
    log_one(c, 304, 0, false);
    log_one(c, 404, 10, false);
    log_one(c, 503, 5, false);
    struct status_totals t;
    status_counters_sum(c, &t);
    CHECK_EQ_INT(t.requests, 5);
    CHECK_EQ_INT(t.bytes, 115);
    CHECK_EQ_INT(t.by_class[1], 2);
    CHECK_EQ_INT(t.by_class[2], 1);
    CHECK_EQ_INT(t.by_class[3], 1);
    CHECK_EQ_INT(t.by_class[4], 1);
    counters_free(c);
}

TEST(counters_of_a_new_instance_start_at_zero)
{
    struct status_counters *a = counters_new();
    log_one(a, 200, 1, false);
    counters_free(a);
    struct status_counters *b = counters_new(); /* may reuse a's address */
    log_one(b, 200, 1, false);
    struct status_totals t;
    status_counters_sum(b, &t);
    CHECK_EQ_INT(t.requests, 1);
    counters_free(b);
}

static void *count_many(void *arg)
{
    for (int i = 0; i < 10000; i++)
        log_one(arg, 200, 3, false);
    return NULL;
}

TEST(counters_of_many_threads_add_up)
{
    struct status_counters *c = counters_new();
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, count_many, c);
    struct status_totals mid;
    status_counters_sum(c, &mid); /* while they count: any value, no race */
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    struct status_totals tot;
    status_counters_sum(c, &tot);
    CHECK_EQ_INT(tot.requests, 40000);
    CHECK_EQ_INT(tot.bytes, 120000);
    CHECK_EQ_INT(tot.by_class[1], 40000);
    CHECK(mid.requests <= 40000);
    counters_free(c);
}

/* Init mod_handlers with the configuration text conf; its state, or NULL. */
static void *handlers_start(const char *conf, struct config *cfg, struct module_chain *chain)
{
    char path[] = "/tmp/lfhttpd-test-handlers-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return NULL;
    ssize_t w = write(fd, conf, strlen(conf));
    close(fd);
    char err[512];
    void *state = NULL;
    config_defaults(cfg);
    if (w == (ssize_t)strlen(conf) &&
        config_load(cfg, path, module_known_directive, err, sizeof(err)) == 0) {
        memset(chain, 0, sizeof(*chain));
        chain->mods[0] = &mod_handlers;
        chain->n = 1;
        struct module_init mi = {cfg, chain, 0, err, sizeof(err)};
        if (mod_handlers.init(&mi, &state) < 0)
            state = NULL;
    }
    unlink(path);
    return state;
}

TEST(log_hook_counts_with_a_status_handler)
{
    struct config cfg;
    struct module_chain chain;
    void *st = handlers_start("handler /status status;\n", &cfg, &chain);
    CHECK(st != NULL);
    struct response r;
    resp_init(&r);
    resp_start(&r, 200);
    mod_handlers.log(st, NULL, &r);
    struct status_totals t;
    CHECK(handlers_counters(st) != NULL);
    status_counters_sum(handlers_counters(st), &t);
    CHECK_EQ_INT(t.requests, 1);
    mod_handlers.fini(st);
    config_free(&cfg);
}

TEST(counting_off_without_a_status_handler)
{
    struct config cfg;
    struct module_chain chain;
    void *st = handlers_start("handler /hello hello;\n", &cfg, &chain);
    CHECK(st != NULL);
    struct response r;
    resp_init(&r);
    resp_start(&r, 200);
    mod_handlers.log(st, NULL, &r);
    CHECK(handlers_counters(st) == NULL);
    mod_handlers.fini(st);
    config_free(&cfg);
}
