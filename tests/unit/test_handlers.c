/* Unit tests of mod_handlers' pure parts: content negotiation, the echo head, uptime, and
 * the per-thread counters. The module's file is included (its statics are what is tested)
 * under another name for its module struct, since the real one is linked in too. */
#define TEST_MAIN
#include "test.h"

#define mod_handlers mod_handlers_under_test
#include "../../modules/mod_handlers.c"
#undef mod_handlers

static bool prefers_json(const char *accept)
{
    return accept_prefers_json((struct http_slice){accept, strlen(accept)});
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
    const char *s = ";q=0.5";
    CHECK_EQ_INT(accept_q(s, s + strlen(s)), 500);
    s = "; level=1; Q=0.25";
    CHECK_EQ_INT(accept_q(s, s + strlen(s)), 250);
    s = ";q=1.000";
    CHECK_EQ_INT(accept_q(s, s + strlen(s)), 1000);
    s = "";
    CHECK_EQ_INT(accept_q(s, s), 1000);
    s = ";q=0.0001"; /* three decimals at most count */
    CHECK_EQ_INT(accept_q(s, s + strlen(s)), 0);
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
    CHECK(query_format_is(&h, "json"));
    CHECK(status_wants_json(&h));
    h = with_query("x=1&format=html");
    CHECK(query_format_is(&h, "html"));
    CHECK(!status_wants_json(&h));
    h = with_query("format=jsonp");
    CHECK(!query_format_is(&h, "json"));
    struct http_request none = {0}; /* no query, no Accept: NULL slices */
    CHECK(!status_wants_json(&none));
    CHECK(!accept_prefers_json((struct http_slice){NULL, 0}));
}

TEST(format_html_wins_over_accept_json)
{
    struct http_request h = with_query("format=html");
    h.headers[0].name = (struct http_slice){"Accept", 6};
    h.headers[0].value = (struct http_slice){"application/json", 16};
    h.n_headers = 1;
    CHECK(!status_wants_json(&h));
    h.query.len = 0;
    CHECK(status_wants_json(&h));
}

TEST(echo_head_is_the_request_as_received)
{
    const char raw[] = "POST /e?x HTTP/1.1\r\nHost: t\r\nX-A: 1 2\r\n\r\n";
    struct http_limits lim = {8192, 64};
    struct http_request h;
    CHECK(http_parse_request(raw, sizeof(raw) - 1, &lim, &h) > 0);
    size_t n = echo_head_len(&h);
    CHECK_EQ_INT(n, sizeof(raw) - 1);
    char out[128];
    echo_head_write(&h, out);
    CHECK(memcmp(out, raw, n) == 0);
}

TEST(echo_head_of_http10)
{
    const char raw[] = "GET / HTTP/1.0\r\n\r\n";
    struct http_limits lim = {8192, 64};
    struct http_request h;
    CHECK(http_parse_request(raw, sizeof(raw) - 1, &lim, &h) > 0);
    char out[64];
    CHECK_EQ_INT(echo_head_len(&h), sizeof(raw) - 1);
    echo_head_write(&h, out);
    CHECK(memcmp(out, raw, sizeof(raw) - 1) == 0);
}

TEST(uptime_text)
{
    char out[48];
    format_uptime(42, out);
    CHECK(strcmp(out, "42s") == 0);
    format_uptime(366, out);
    CHECK(strcmp(out, "6m 06s") == 0);
    format_uptime(3 * 86400 + 4 * 3600 + 5 * 60 + 6, out);
    CHECK(strcmp(out, "3d 04h 05m 06s") == 0);
    format_uptime(-5, out);
    CHECK(strcmp(out, "0s") == 0);
}

static struct handlers_state *state_counting(void)
{
    struct handlers_state *st = calloc(1, sizeof(*st));
    st->counting = true;
    st->generation = atomic_fetch_add(&handlers_generations, 1) + 1;
    pthread_mutex_init(&st->lock, NULL);
    return st;
}

static void log_one(struct handlers_state *st, int status, uint64_t bytes, bool head)
{
    struct response r;
    resp_init(&r);
    resp_start(&r, status);
    r.content_length = bytes;
    r.head_only = head;
    handlers_log(st, NULL, &r);
}

TEST(counters_by_class_and_bytes)
{
    struct handlers_state *st = state_counting();
    log_one(st, 200, 100, false);
    log_one(st, 200, 100, true); /* HEAD: no body bytes */
    log_one(st, 304, 0, false);
    log_one(st, 404, 10, false);
    log_one(st, 503, 5, false);
    struct status_totals t;
    totals_sum(st, &t);
    CHECK_EQ_INT(t.requests, 5);
    CHECK_EQ_INT(t.bytes, 115);
    CHECK_EQ_INT(t.by_class[1], 2);
    CHECK_EQ_INT(t.by_class[2], 1);
    CHECK_EQ_INT(t.by_class[3], 1);
    CHECK_EQ_INT(t.by_class[4], 1);
    handlers_fini(st);
}

TEST(counters_of_a_new_instance_start_at_zero)
{
    struct handlers_state *a = state_counting();
    log_one(a, 200, 1, false);
    handlers_fini(a);
    struct handlers_state *b = state_counting(); /* may reuse a's address */
    log_one(b, 200, 1, false);
    struct status_totals t;
    totals_sum(b, &t);
    CHECK_EQ_INT(t.requests, 1);
    handlers_fini(b);
}

static void *count_many(void *arg)
{
    for (int i = 0; i < 10000; i++)
        log_one(arg, 200, 3, false);
    return NULL;
}

TEST(counters_of_many_threads_add_up)
{
    struct handlers_state *st = state_counting();
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, count_many, st);
    struct status_totals mid;
    totals_sum(st, &mid); /* while they count: any value, no race */
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    struct status_totals tot;
    totals_sum(st, &tot);
    CHECK_EQ_INT(tot.requests, 40000);
    CHECK_EQ_INT(tot.bytes, 120000);
    CHECK_EQ_INT(tot.by_class[1], 40000);
    CHECK(mid.requests <= 40000);
    handlers_fini(st);
}

TEST(counting_off_without_a_status_handler)
{
    struct handlers_state *st = state_counting();
    st->counting = false;
    log_one(st, 200, 1, false);
    CHECK(st->counters == NULL);
    handlers_fini(st);
}
