/* Unit tests of `upstream` blocks: reading them, the smooth weighted order, least_conn,
 * taking a failing server out and bringing it back, backups. */
#define TEST_MAIN
#include "test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/un.h>

#include "upstream.h"

static char err[2048];
static struct upstream up;

/* Read the block `upstream NAME { body }`; 0 or -1 (messages in err). */
static int read_text(const char *text)
{
    struct conf_node *tree;
    err[0] = '\0';
    if (conf_parse_text("up.conf", text, strlen(text), &tree, err, sizeof(err)) < 0)
        return -2;
    struct conf_reader r = {.file = "up.conf", .owner = "", .err = err,
                            .err_len = sizeof(err)};
    int rc = upstream_read(&up, tree, &r);
    conf_tree_free(tree);
    return rc;
}

static unsigned port_of(const struct upstream_server *s)
{
    return ntohs(((const struct sockaddr_in *)&s->addr)->sin_port);
}

/* The ports of the next n picks, each attempt ended as a success at once. */
static void picks(unsigned *out, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        struct upstream_server *s = upstream_pick(&up, 1000, 0, NULL);
        out[i] = s ? port_of(s) : 0;
        if (s)
            upstream_done(&up, s, false, 1000);
    }
}

/* An attempt on the first server, as a pick of it would count it. */
static struct upstream_server *take_first(void)
{
    atomic_fetch_add(&up.servers[0].active, 1);
    return &up.servers[0];
}

TEST(servers_are_read_with_their_parameters)
{
    CHECK_EQ_INT(read_text("upstream app {\n server 127.0.0.1:3000 weight=2 max_fails=3 "
                           "fail_timeout=5s;\n server 127.0.0.1:3001 backup;\n keepalive 32;\n}\n"),
                 0);
    CHECK_EQ_INT(up.n_servers, 2);
    CHECK(strcmp(up.name, "app") == 0);
    CHECK_EQ_INT(up.servers[0].weight, 2);
    CHECK_EQ_INT(up.servers[0].max_fails, 3);
    CHECK_EQ_INT(up.servers[0].fail_timeout_ms, 5000);
    CHECK_EQ_INT(port_of(&up.servers[0]), 3000);
    CHECK(up.servers[1].backup);
    CHECK_EQ_INT(up.keepalive, 32);
    CHECK_EQ_INT(up.balance, UPSTREAM_ROUND_ROBIN);
}

TEST(an_address_without_port_is_port_80)
{
    CHECK_EQ_INT(read_text("upstream a { server 127.0.0.1; }\n"), 0);
    CHECK_EQ_INT(port_of(&up.servers[0]), 80);
}

TEST(ipv6_and_unix_addresses_are_read)
{
    CHECK_EQ_INT(read_text("upstream a { server [::1]:8000; server unix:/run/app.sock; }\n"), 0);
    CHECK_EQ_INT(up.servers[0].addr.ss_family, AF_INET6);
    CHECK_EQ_INT(up.servers[1].addr.ss_family, AF_UNIX);
    CHECK(strcmp(((struct sockaddr_un *)&up.servers[1].addr)->sun_path, "/run/app.sock") == 0);
}

TEST(a_host_name_is_resolved_at_load)
{
    CHECK_EQ_INT(read_text("upstream a { server localhost:8000; }\n"), 0);
    CHECK(up.n_servers >= 1);
    CHECK_EQ_INT(port_of(&up.servers[0]), 8000);
}

TEST(bad_parameters_are_refused_with_their_line)
{
    CHECK_EQ_INT(read_text("upstream a {\n server 127.0.0.1 weight=0;\n}\n"), -1);
    CHECK(strstr(err, "up.conf:2: server: weight=0: 1 to 1000"));
    CHECK_EQ_INT(read_text("upstream a {\n server 127.0.0.1 slow;\n}\n"), -1);
    CHECK(strstr(err, "up.conf:2: server: unknown parameter \"slow\""));
    CHECK_EQ_INT(read_text("upstream a {\n server 1:2:3;\n}\n"), -1);
    CHECK(strstr(err, "invalid address"));
    CHECK_EQ_INT(read_text("upstream a {\n server unix:relative.sock;\n}\n"), -1);
    CHECK(strstr(err, "an absolute path"));
}

TEST(an_upstream_without_servers_is_refused)
{
    CHECK_EQ_INT(read_text("upstream a {\n keepalive 4;\n}\n"), -1);
    CHECK(strstr(err, "up.conf:1: upstream a: no server"));
}

TEST(an_unknown_directive_in_an_upstream_is_refused)
{
    CHECK_EQ_INT(read_text("upstream a {\n server 127.0.0.1;\n sticky cookie srv;\n}\n"), -1);
    CHECK(strstr(err, "up.conf:3: upstream a: unknown directive \"sticky\""));
}

TEST(round_robin_follows_the_smooth_weighted_order)
{
    CHECK_EQ_INT(read_text("upstream a { server 127.0.0.1:1 weight=5; server 127.0.0.1:2; "
                           "server 127.0.0.1:3; }\n"),
                 0);
    unsigned p[14];
    picks(p, 14);
    /* nginx's order for 5, 1, 1: a a b a c a a, then again */
    static const unsigned want[7] = {1, 1, 2, 1, 3, 1, 1};
    for (unsigned i = 0; i < 14; i++)
        CHECK_EQ_INT(p[i], want[i % 7]);
}

TEST(least_conn_picks_the_server_with_fewest_requests_in_flight)
{
    CHECK_EQ_INT(read_text("upstream a { server 127.0.0.1:1; server 127.0.0.1:2; least_conn; }\n"),
                 0);
    struct upstream_server *first = upstream_pick(&up, 1000, 0, NULL);
    struct upstream_server *second = upstream_pick(&up, 1000, 0, NULL);
    CHECK(first != second); /* one in flight on the first: the other is lighter */
    upstream_done(&up, first, false, 1000);
    struct upstream_server *third = upstream_pick(&up, 1000, 0, NULL);
    CHECK(third == first); /* the second still carries one */
    upstream_done(&up, second, false, 1000);
    upstream_done(&up, third, false, 1000);
}

TEST(least_conn_weighs_the_load)
{
    CHECK_EQ_INT(read_text("upstream a { server 127.0.0.1:1 weight=3; server 127.0.0.1:2; "
                           "least_conn; }\n"),
                 0);
    unsigned on1 = 0;
    struct upstream_server *held[4];
    for (int i = 0; i < 4; i++) { /* none ends: 3 go to the server of weight 3 */
        held[i] = upstream_pick(&up, 1000, 0, NULL);
        on1 += port_of(held[i]) == 1;
    }
    CHECK_EQ_INT(on1, 3);
    for (int i = 0; i < 4; i++)
        upstream_done(&up, held[i], false, 1000);
}

TEST(a_server_failing_max_fails_times_is_out_for_fail_timeout)
{
    CHECK_EQ_INT(read_text("upstream a { server 127.0.0.1:1 max_fails=2 fail_timeout=10s; "
                           "server 127.0.0.1:2; }\n"),
                 0);
    struct upstream_server *a = &up.servers[0];
    upstream_done(&up, take_first(), true, 1000);
    CHECK(!upstream_server_out(a, 1000)); /* one failure of two */
    upstream_done(&up, take_first(), true, 2000);
    CHECK(upstream_server_out(a, 2000));
    unsigned p[6];
    picks(p, 6);
    for (int i = 0; i < 6; i++)
        CHECK_EQ_INT(p[i], 2);
}

TEST(after_fail_timeout_one_attempt_tries_the_server_again)
{
    CHECK_EQ_INT(read_text("upstream a { server 127.0.0.1:1 fail_timeout=1s; "
                           "server 127.0.0.1:2; }\n"),
                 0);
    struct upstream_server *a = &up.servers[0];
    upstream_done(&up, take_first(), true, 1000); /* max_fails=1: out until 2000 */
    CHECK(upstream_server_out(a, 1500));
    /* At 2500 the first attempt that reaches it tries it; the one after does not. */
    struct upstream_server *x = NULL, *y = NULL;
    for (int i = 0; i < 4 && !x; i++) {
        struct upstream_server *s = upstream_pick(&up, 2500, 0, NULL);
        if (s == a)
            x = s;
        else
            upstream_done(&up, s, false, 2500);
    }
    CHECK(x == a);
    for (int i = 0; i < 4; i++) {
        y = upstream_pick(&up, 2600, 0, NULL);
        CHECK(y != a); /* its trial is in flight */
        upstream_done(&up, y, false, 2600);
    }
    upstream_done(&up, x, false, 2700); /* the trial succeeded: back in */
    CHECK(!upstream_server_out(a, 2700));
}

TEST(backups_serve_only_when_every_primary_is_out)
{
    CHECK_EQ_INT(read_text("upstream a { server 127.0.0.1:1; server 127.0.0.1:9 backup; }\n"),
                 0);
    unsigned p[3];
    picks(p, 3);
    CHECK_EQ_INT(p[0], 1);
    CHECK_EQ_INT(p[2], 1);
    upstream_done(&up, upstream_pick(&up, 1000, 0, NULL), true, 1000); /* the primary out */
    picks(p, 3);
    CHECK_EQ_INT(p[0], 9);
    CHECK_EQ_INT(p[1], 9);
}

TEST(every_server_out_or_tried_gives_no_server)
{
    CHECK_EQ_INT(read_text("upstream a { server 127.0.0.1:1; server 127.0.0.1:2 down; }\n"), 0);
    CHECK(upstream_pick(&up, 1000, 1u, NULL) == NULL); /* the first tried, the second down */
    upstream_done(&up, upstream_pick(&up, 1000, 0, NULL), true, 1000);
    CHECK(upstream_pick(&up, 1000, 0, NULL) == NULL);
}

TEST(a_proxy_pass_host_is_a_set_of_its_own)
{
    char msg[256];
    CHECK_EQ_INT(upstream_from_host(&up, "127.0.0.1:8081", 7, msg, sizeof(msg)), 0);
    CHECK_EQ_INT(up.n_servers, 1);
    CHECK_EQ_INT(port_of(&up.servers[0]), 8081);
    CHECK(upstream_pick(&up, 1000, 0, NULL) == &up.servers[0]);
}

TEST(a_lone_server_is_never_taken_out)
{
    CHECK_EQ_INT(read_text("upstream a { server 127.0.0.1:1 max_fails=1; }\n"), 0);
    struct upstream_server *s = upstream_pick(&up, 1000, 0, NULL);
    upstream_done(&up, s, true, 1000);
    CHECK(!upstream_server_out(s, 1001));
    CHECK(upstream_pick(&up, 1001, 0, NULL) == s);
}

static unsigned closed;
static void count_close(struct upstream_idle *idle)
{
    (void)idle;
    closed++;
}

TEST(idle_connections_are_kept_up_to_keepalive_and_taken_by_server)
{
    CHECK_EQ_INT(read_text("upstream a { server 127.0.0.1:1; server 127.0.0.1:2; "
                           "keepalive 2; }\n"), 0);
    struct upstream_idle i1 = {.server = &up.servers[0], .close = count_close};
    struct upstream_idle i2 = {.server = &up.servers[1], .close = count_close};
    struct upstream_idle i3 = {.server = &up.servers[0], .close = count_close};
    CHECK(upstream_idle_put(&up, &i1, 1000, 0));
    CHECK(upstream_idle_put(&up, &i2, 1000, 0));
    CHECK(!upstream_idle_put(&up, &i3, 1000, 0)); /* keepalive 2: the caller closes it */
    CHECK(upstream_idle_take(&up, &up.servers[1], NULL) == &i2);
    CHECK(upstream_idle_take(&up, &up.servers[1], NULL) == NULL);
    CHECK(upstream_idle_take(&up, &up.servers[0], NULL) == &i1);
}

TEST(an_idle_connection_of_the_takers_own_group_is_preferred)
{
    CHECK_EQ_INT(read_text("upstream a { server 127.0.0.1:1; keepalive 4; }\n"), 0);
    int g1, g2;
    struct upstream_idle a = {.server = &up.servers[0], .home = &g1, .close = count_close};
    struct upstream_idle b = {.server = &up.servers[0], .home = &g2, .close = count_close};
    CHECK(upstream_idle_put(&up, &a, 1000, 0));
    CHECK(upstream_idle_put(&up, &b, 1000, 0)); /* newest first: b, then a */
    CHECK(upstream_idle_take(&up, &up.servers[0], &g1) == &a);
    CHECK(upstream_idle_take(&up, &up.servers[0], &g1) == &b); /* none at home: any */
}

TEST(closing_every_idle_connection_calls_each_close_hook_once)
{
    CHECK_EQ_INT(read_text("upstream a { server 127.0.0.1:1; keepalive 4; }\n"), 0);
    struct upstream_idle a = {.server = &up.servers[0], .close = count_close};
    struct upstream_idle b = {.server = &up.servers[0], .close = count_close};
    upstream_idle_put(&up, &a, 1000, 0);
    upstream_idle_put(&up, &b, 1000, 0);
    closed = 0;
    upstream_idle_close_all(&up);
    CHECK_EQ_INT(closed, 2);
    CHECK(upstream_idle_take(&up, &up.servers[0], NULL) == NULL);
}

TEST(keepalive_bounds_the_idle_connections_of_each_home)
{
    CHECK_EQ_INT(read_text("upstream a { server 127.0.0.1:1; keepalive 1; }\n"), 0);
    int g1, g2;
    struct upstream_idle a = {.server = &up.servers[0], .home = &g1, .close = count_close};
    struct upstream_idle b = {.server = &up.servers[0], .home = &g2, .close = count_close};
    struct upstream_idle c = {.server = &up.servers[0], .home = &g1, .close = count_close};
    CHECK(upstream_idle_put(&up, &a, 1000, 0));
    CHECK(upstream_idle_put(&up, &b, 1000, 0)); /* another group's: its own one */
    CHECK(!upstream_idle_put(&up, &c, 1000, 0));
    CHECK(upstream_idle_take(&up, &up.servers[0], &g1) == &a);
    CHECK(upstream_idle_put(&up, &c, 1000, 0)); /* g1's place is free again */
}

TEST(keepalive_times_the_groups_bounds_the_idle_connections_in_all)
{
    CHECK_EQ_INT(read_text("upstream a { server 127.0.0.1:1; keepalive 1; }\n"), 0);
    int g1, g2;
    struct upstream_idle a = {.server = &up.servers[0], .home = &g1, .close = count_close};
    struct upstream_idle b = {.server = &up.servers[0], .home = &g1, .close = count_close};
    struct upstream_idle c = {.server = &up.servers[0], .home = &g2, .close = count_close};
    CHECK(upstream_idle_put(&up, &a, 1000, 2));
    CHECK(upstream_idle_put(&up, &b, 1000, 2)); /* g1's second: g2 has room for one */
    CHECK(!upstream_idle_put(&up, &c, 1000, 2)); /* 1 times 2 groups, kept */
    CHECK(upstream_idle_take(&up, &up.servers[0], &g2) == &b); /* none at g2's: any */
    CHECK(upstream_idle_put(&up, &c, 1000, 2));
}

/* An idle connection whose watch is handling an event cannot be claimed: a taker passes it
 * by for the next one to the same server, and the handler drops it from the list. */
static struct upstream_idle *busy;
static bool claim_unless_busy(struct upstream_idle *idle)
{
    return idle != busy;
}

TEST(a_taker_passes_by_an_idle_connection_it_cannot_claim)
{
    CHECK_EQ_INT(read_text("upstream a { server 127.0.0.1:1; keepalive 4; }\n"), 0);
    struct upstream_idle a = {.server = &up.servers[0], .claim = claim_unless_busy,
                              .close = count_close};
    struct upstream_idle b = {.server = &up.servers[0], .claim = claim_unless_busy,
                              .close = count_close};
    CHECK(upstream_idle_put(&up, &a, 1000, 0));
    CHECK(upstream_idle_put(&up, &b, 1000, 0)); /* newest first: b */
    busy = &b;
    CHECK(upstream_idle_take(&up, &up.servers[0], NULL) == &a);
    CHECK(upstream_idle_take(&up, &up.servers[0], NULL) == NULL);
    upstream_idle_drop(&up, &b);
    busy = NULL;
    CHECK(upstream_idle_take(&up, &up.servers[0], NULL) == NULL);
    CHECK(upstream_idle_put(&up, &b, 1000, 0)); /* its place was given back */
}

static unsigned watched;
static void count_watch(struct upstream_idle *idle)
{
    (void)idle;
    watched++;
}

TEST(a_kept_idle_connection_is_watched_once_it_is_listed)
{
    CHECK_EQ_INT(read_text("upstream a { server 127.0.0.1:1; keepalive 1; }\n"), 0);
    struct upstream_idle a = {.server = &up.servers[0], .watch = count_watch,
                              .close = count_close};
    struct upstream_idle b = {.server = &up.servers[0], .watch = count_watch,
                              .close = count_close};
    watched = 0;
    CHECK(upstream_idle_put(&up, &a, 1000, 0));
    CHECK(!upstream_idle_put(&up, &b, 1000, 0)); /* not kept: not watched */
    CHECK_EQ_INT(watched, 1);
}

/* Closing every idle connection waits for one whose watch is handling an event: here the
 * claim fails once, as while that handler runs, and the close still comes. */
static unsigned refusals;
static bool claim_after_a_refusal(struct upstream_idle *idle)
{
    (void)idle;
    return refusals++ > 0;
}

TEST(closing_every_idle_connection_waits_for_one_being_handled)
{
    CHECK_EQ_INT(read_text("upstream a { server 127.0.0.1:1; keepalive 4; }\n"), 0);
    struct upstream_idle a = {.server = &up.servers[0], .claim = claim_after_a_refusal,
                              .close = count_close};
    upstream_idle_put(&up, &a, 1000, 0);
    refusals = 0;
    closed = 0;
    upstream_idle_close_all(&up);
    CHECK_EQ_INT(closed, 1);
    CHECK_EQ_INT(refusals, 2);
}

/* --- a target named at run time (upstream_addr_parse): nginx's ngx_parse_url ------------- */

static const char *parse_err(const char *text, struct upstream_addr *a)
{
    const char *why = NULL;
    return upstream_addr_parse(text, strlen(text), a, &why) == 0 ? NULL : why;
}

/* Is text refused, in these words? */
static int refused_as(const char *text, const char *words)
{
    struct upstream_addr a;
    const char *why = parse_err(text, &a);
    return why && strcmp(why, words) == 0;
}

TEST(a_run_time_ipv4_address_and_port_is_an_address)
{
    struct upstream_addr a;
    CHECK(parse_err("127.0.0.1:9000", &a) == NULL);
    CHECK_EQ_INT(a.kind, UPSTREAM_ADDR_IP);
    CHECK_EQ_INT(a.port, 9000);
    CHECK_EQ_INT(ntohs(((struct sockaddr_in *)&a.addr)->sin_port), 9000);
    CHECK_SLICE(((struct http_slice){a.host, a.host_len}), "127.0.0.1");
}

TEST(a_run_time_ipv6_address_keeps_its_brackets_as_its_host)
{
    struct upstream_addr a;
    CHECK(parse_err("[::1]:9000", &a) == NULL);
    CHECK_EQ_INT(a.kind, UPSTREAM_ADDR_IP);
    CHECK_EQ_INT(a.addr.ss_family, AF_INET6);
    CHECK_SLICE(((struct http_slice){a.host, a.host_len}), "[::1]");
    CHECK(refused_as("[::zz]:9000", "invalid IPv6 address"));
    CHECK(refused_as("[::1]x", "invalid host"));
}

TEST(a_run_time_unix_socket_is_its_path)
{
    struct upstream_addr a;
    CHECK(parse_err("unix:/run/php/php8.2-fpm.sock", &a) == NULL);
    CHECK_EQ_INT(a.kind, UPSTREAM_ADDR_UNIX);
    CHECK(strcmp(((struct sockaddr_un *)&a.addr)->sun_path, "/run/php/php8.2-fpm.sock") == 0);
    CHECK(refused_as("unix:", "no path in the unix domain socket"));
}

TEST(a_run_time_name_without_port_has_port_0)
{
    struct upstream_addr a;
    CHECK(parse_err("backend", &a) == NULL);
    CHECK_EQ_INT(a.kind, UPSTREAM_ADDR_NAME);
    CHECK_EQ_INT(a.port, 0);
    CHECK(parse_err("php.example:9000", &a) == NULL);
    CHECK_EQ_INT(a.kind, UPSTREAM_ADDR_NAME);
    CHECK_EQ_INT(a.port, 9000);
}

TEST(a_malformed_run_time_value_is_refused_in_nginx_words)
{
    CHECK(refused_as("", "no host"));
    CHECK(refused_as(":9000", "no host"));
    CHECK(refused_as("host:", "invalid port"));
    CHECK(refused_as("host:65536", "invalid port"));
    CHECK(refused_as("host:0", "invalid port"));
    CHECK(refused_as("host:9000/x", "invalid host"));
}
