/* Unit tests of vars: compiling values with nginx variables, and expanding them safely. */
#define TEST_MAIN
#include "test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mod_headers.h"
#include "vars.h"
#include "vars_upstream.h"

/* A parsed request for the text of a head, kept in static storage between calls. */
static struct http_request parsed;
static char head_buf[1024];
static struct sockaddr_in peer, local;

static struct vars_source source(const char *head, const char *uri)
{
    snprintf(head_buf, sizeof(head_buf), "%s", head);
    struct http_limits lim = {.max_header_bytes = sizeof(head_buf), .max_headers = 64};
    memset(&parsed, 0, sizeof(parsed));
    if (http_parse_request(head_buf, strlen(head_buf), &lim, &parsed) <= 0)
        fprintf(stderr, "  the test's request does not parse\n");
    peer = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(40000)};
    inet_pton(AF_INET, "192.0.2.7", &peer.sin_addr);
    local = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(8080)};
    return (struct vars_source){.http = &parsed,
                                .uri = uri,
                                .uri_len = strlen(uri),
                                .peer = (struct sockaddr *)&peer,
                                .local = (struct sockaddr *)&local,
                                .server_name = "fallback.example"};
}

#define GET_HOST "GET /a/b?x=1&y=2 HTTP/1.1\r\nHost: WWW.Example.ORG.:8080\r\n\r\n"

/* Compile text in context ctx, expand it for src, and compare with want. */
static bool expands_to(const char *text, enum vars_context ctx, const struct vars_source *src,
                       const char *want)
{
    struct vars_value *v;
    char msg[256], out[512];
    if (vars_compile(text, ctx, &v, msg, sizeof(msg)) < 0) {
        fprintf(stderr, "  \"%s\" does not compile: %s\n", text, msg);
        return false;
    }
    long n = vars_expand(v, src, out, sizeof(out));
    vars_free(v);
    bool ok = n >= 0 && (size_t)n == strlen(want) && strcmp(out, want) == 0;
    if (!ok)
        fprintf(stderr, "  \"%s\" gave \"%s\" (%ld), want \"%s\"\n", text, out, n, want);
    return ok;
}

static bool refused(const char *text, enum vars_context ctx, const char *why)
{
    struct vars_value *v = NULL;
    char msg[256] = "";
    if (vars_compile(text, ctx, &v, msg, sizeof(msg)) == 0) {
        vars_free(v);
        fprintf(stderr, "  \"%s\" compiled\n", text);
        return false;
    }
    if (!strstr(msg, why))
        fprintf(stderr, "  \"%s\": \"%s\" does not say \"%s\"\n", text, msg, why);
    return strstr(msg, why) != NULL;
}

TEST(uri_is_the_decoded_normalized_path)
{
    struct vars_source s = source(GET_HOST, "/a/b c");
    CHECK(expands_to("$uri", VARS_HEADER, &s, "/a/b c"));
}

TEST(request_uri_is_the_target_as_sent)
{
    struct vars_source s = source("GET /a/%2e%2e/b?q=%41 HTTP/1.1\r\nHost: h\r\n\r\n", "/b");
    CHECK(expands_to("$request_uri", VARS_HEADER, &s, "/a/%2e%2e/b?q=%41"));
}

TEST(request_uri_leaves_out_an_absolute_targets_authority)
{
    struct vars_source s = source("GET http://h.example:81/p?q HTTP/1.1\r\nHost: h\r\n\r\n",
                                  "/p");
    CHECK(expands_to("$request_uri", VARS_HEADER, &s, "/p?q"));
}

/* An absolute-form target's empty path is "/" (RFC 9110 section 4.2.3), as it goes upstream. */
TEST(request_uri_of_an_absolute_target_without_a_path_is_slash_and_query)
{
    struct vars_source s = source("GET http://h.example?q=1 HTTP/1.1\r\nHost: h\r\n\r\n", "/");
    CHECK(expands_to("$request_uri", VARS_HEADER, &s, "/?q=1"));
    s = source("GET http://h.example HTTP/1.1\r\nHost: h\r\n\r\n", "/");
    CHECK(expands_to("$request_uri", VARS_HEADER, &s, "/"));
}

TEST(args_is_the_query_without_its_question_mark)
{
    struct vars_source s = source(GET_HOST, "/a/b");
    CHECK(expands_to("[$args]", VARS_HEADER, &s, "[x=1&y=2]"));
    s = source("GET /a HTTP/1.1\r\nHost: h\r\n\r\n", "/a");
    CHECK(expands_to("[$args]", VARS_HEADER, &s, "[]"));
}

TEST(request_body_is_the_sources_body_escaped_as_its_context_asks)
{
    struct vars_source s = source(GET_HOST, "/a/b");
    CHECK(expands_to("[$request_body]", VARS_HEADER, &s, "[]"));
    s.request_body = "a=1\r\nX: y\"";
    s.request_body_len = strlen(s.request_body);
    CHECK(expands_to("[$request_body]", VARS_RAW, &s, "[a=1\r\nX: y\"]"));
    CHECK(expands_to("[$request_body]", VARS_HEADER, &s, "[a=1%0D%0AX: y\"]"));
    CHECK(expands_to("[$request_body]", VARS_LOG_DEFAULT, &s, "[a=1\\x0D\\x0AX: y\\x22]"));
}

TEST(host_is_lowercased_without_port_or_trailing_dot)
{
    struct vars_source s = source(GET_HOST, "/");
    CHECK(expands_to("$host", VARS_HEADER, &s, "www.example.org"));
    s = source("GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", "/");
    CHECK(expands_to("$host", VARS_HEADER, &s, "[::1]"));
}

/* Where nothing is escaped (an `if`, a file name, a map's key) too. */
TEST(host_is_lowercased_in_a_raw_value)
{
    struct vars_source s = source(GET_HOST, "/");
    CHECK(expands_to("x-$host-y", VARS_RAW, &s, "x-www.example.org-y"));
}

TEST(host_without_a_host_header_is_the_server_name)
{
    struct vars_source s = source("GET / HTTP/1.0\r\n\r\n", "/");
    CHECK(expands_to("$host", VARS_HEADER, &s, "fallback.example"));
    s.server_name = NULL;
    CHECK(expands_to("[$host]", VARS_HEADER, &s, "[]"));
}

TEST(scheme_method_address_and_port)
{
    struct vars_source s = source("HEAD /x HTTP/1.1\r\nHost: h\r\n\r\n", "/x");
    CHECK(expands_to("$scheme://$remote_addr:$server_port $request_method", VARS_HEADER, &s,
                     "http://192.0.2.7:8080 HEAD"));
}

TEST(remote_addr_of_an_ipv6_client)
{
    struct vars_source s = source(GET_HOST, "/");
    struct sockaddr_in6 six = {.sin6_family = AF_INET6};
    inet_pton(AF_INET6, "2001:db8::1", &six.sin6_addr);
    s.peer = (struct sockaddr *)&six;
    CHECK(expands_to("$remote_addr", VARS_HEADER, &s, "2001:db8::1"));
}

TEST(braced_names_and_case_insensitive_names)
{
    struct vars_source s = source(GET_HOST, "/a");
    CHECK(expands_to("${uri}x", VARS_HEADER, &s, "/ax"));
    CHECK(expands_to("$URI-$Host", VARS_HEADER, &s, "/a-www.example.org"));
    CHECK(expands_to("no variables", VARS_HEADER, &s, "no variables"));
}

TEST(a_value_without_variables_is_constant)
{
    struct vars_value *v;
    char msg[128];
    CHECK(vars_compile("plain", VARS_HEADER, &v, msg, sizeof(msg)) == 0);
    CHECK(vars_is_constant(v));
    vars_free(v);
    CHECK(vars_compile("a$uri", VARS_HEADER, &v, msg, sizeof(msg)) == 0);
    CHECK(!vars_is_constant(v));
    vars_free(v);
}

TEST(unknown_variable_is_refused_at_compile)
{
    CHECK(refused("$nosuchvar", VARS_HEADER, "unknown \"nosuchvar\" variable"));
    CHECK(refused("x${requests}", VARS_HEADER, "unknown \"requests\" variable"));
    CHECK(refused("$nosuchgroup", VARS_HEADER, "unknown \"nosuchgroup\" variable"));
}

/* The captures of "^/(?<first>[^/]+)/(.*)$" on path. */
static struct regex_captures captures_of(const char *path)
{
    static struct regex r;
    struct regex_captures caps = {0};
    char msg[256];
    if (!r.code && regex_compile(&r, "^/(?<first>[^/]+)/(.*)$", 0, msg, sizeof(msg)) < 0)
        fprintf(stderr, "  the test's regex does not compile: %s\n", msg);
    if (regex_match(&r, path, strlen(path), &caps, NULL, 0) != REGEX_MATCH)
        fprintf(stderr, "  the test's regex does not match %s\n", path);
    return caps;
}

TEST(numbered_captures_expand_to_the_groups_one_digit_each)
{
    struct vars_source src = source(GET_HOST, "/a/b");
    struct regex_captures caps = captures_of("/img/x/y.png");
    src.captures = &caps;
    CHECK(expands_to("/$1/${2}!", VARS_RAW, &src, "/img/x/y.png!"));
    CHECK(expands_to("$10", VARS_RAW, &src, "img0"));
    CHECK(expands_to("[$3]", VARS_RAW, &src, "[]"));
}

TEST(named_capture_expands_once_a_regex_defines_the_name)
{
    struct vars_source src = source(GET_HOST, "/a/b");
    struct regex_captures caps = captures_of("/img/x");
    src.captures = &caps;
    CHECK(expands_to("<$first>", VARS_HEADER, &src, "<img>"));
}

TEST(captures_without_a_regex_match_are_empty)
{
    struct vars_source src = source(GET_HOST, "/a/b");
    CHECK(expands_to("[$1]", VARS_RAW, &src, "[]"));
}

TEST(dollar_without_a_name_is_refused)
{
    CHECK(refused("a$", VARS_HEADER, "invalid variable name"));
    CHECK(refused("a$-b", VARS_HEADER, "invalid variable name"));
    CHECK(refused("${}", VARS_HEADER, "invalid variable name"));
    CHECK(refused("${uri", VARS_HEADER, "closing bracket"));
}

TEST(decoded_crlf_in_uri_is_percent_encoded_in_a_header)
{
    struct vars_source s = source(GET_HOST, "/a\r\nSet-Cookie: x=1");
    CHECK(expands_to("$uri", VARS_HEADER, &s, "/a%0D%0ASet-Cookie: x=1"));
}

TEST(every_control_byte_is_percent_encoded_in_a_header)
{
    char uri[40] = "/";
    for (int c = 1; c < 0x20; c++)
        uri[c] = (char)c;
    uri[0x20] = 0x7f;
    struct vars_source s = source(GET_HOST, uri);
    s.uri_len = 0x21;
    char want[200], *w = want;
    w += sprintf(w, "/");
    for (int c = 1; c < 0x20; c++)
        w += sprintf(w, "%%%02X", c);
    sprintf(w, "%%7F");
    CHECK(expands_to("$uri", VARS_HEADER, &s, want));
    s.uri = "/a\0b";
    s.uri_len = 4;
    CHECK(expands_to("$uri", VARS_HEADER, &s, "/a%00b"));
}

TEST(raw_context_keeps_bytes_as_they_are)
{
    struct vars_source s = source(GET_HOST, "/a\r\nb");
    CHECK(expands_to("$uri", VARS_RAW, &s, "/a\r\nb"));
}

TEST(control_bytes_in_literal_header_text_are_refused)
{
    CHECK(refused("a\r\nX-Injected: 1", VARS_HEADER, "control byte (0x0d)"));
    CHECK(refused("tab\there", VARS_HEADER, "control byte (0x09)"));
}

TEST(expansion_never_writes_past_the_buffer)
{
    struct vars_source s = source(GET_HOST, "/abcdef");
    struct vars_value *v;
    char msg[128], out[16];
    CHECK(vars_compile("$uri$uri", VARS_HEADER, &v, msg, sizeof(msg)) == 0);
    memset(out, 'Z', sizeof(out));
    CHECK_EQ_INT(vars_expand(v, &s, out, 15), 14); /* 14 bytes and the NUL: fits exactly */
    CHECK(strcmp(out, "/abcdef/abcdef") == 0 && out[15] == 'Z');
    memset(out, 'Z', sizeof(out));
    CHECK_EQ_INT(vars_expand(v, &s, out, 14), -1);
    CHECK(out[14] == 'Z' && out[15] == 'Z');
    CHECK_EQ_INT(vars_expand(v, &s, out, 0), -1);
    vars_free(v);
}

TEST(an_escape_that_does_not_fit_whole_is_not_cut)
{
    struct vars_source s = source(GET_HOST, "/\n");
    struct vars_value *v;
    char msg[128], out[8];
    CHECK(vars_compile("$uri", VARS_HEADER, &v, msg, sizeof(msg)) == 0);
    CHECK_EQ_INT(vars_expand(v, &s, out, 4), -1); /* "/%0A" needs 5 with the NUL */
    CHECK_EQ_INT(vars_expand(v, &s, out, 5), 4);
    CHECK(strcmp(out, "/%0A") == 0);
    vars_free(v);
}

/* --- request headers, cookies and arguments (nginx 1.22's $http_, $cookie_, $arg_) ------ */

TEST(http_name_finds_a_header_in_any_case_with_underscore_for_dash)
{
    struct vars_source s = source("GET / HTTP/1.1\r\nHost: h\r\nx-Trace-ID: t1\r\n\r\n", "/");
    CHECK(expands_to("[$http_x_trace_id]", VARS_HEADER, &s, "[t1]"));
    CHECK(expands_to("[$HTTP_X_TRACE_ID]", VARS_HEADER, &s, "[t1]"));
    CHECK(expands_to("[${http_host}]", VARS_HEADER, &s, "[h]"));
}

TEST(http_name_of_an_absent_header_is_empty)
{
    struct vars_source s = source(GET_HOST, "/");
    CHECK(expands_to("[$http_x_absent]", VARS_HEADER, &s, "[]"));
}

TEST(http_name_of_a_repeated_header_is_its_first_field)
{
    struct vars_source s =
        source("GET / HTTP/1.1\r\nHost: h\r\nVia: 1.1 a\r\nvia: 1.1 b\r\n\r\n", "/");
    CHECK(expands_to("$http_via", VARS_HEADER, &s, "1.1 a"));
}

TEST(http_cookie_joins_repeated_fields_with_a_semicolon)
{
    struct vars_source s =
        source("GET / HTTP/1.1\r\nHost: h\r\nCookie: a=1; b=2\r\ncookie: c=3\r\n\r\n", "/");
    CHECK(expands_to("$http_cookie", VARS_HEADER, &s, "a=1; b=2; c=3"));
}

TEST(http_x_forwarded_for_joins_repeated_fields_with_a_comma)
{
    struct vars_source s = source("GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 1.1.1.1\r\n"
                                  "X-Forwarded-For: 2.2.2.2, 3.3.3.3\r\n\r\n", "/");
    CHECK(expands_to("$http_x_forwarded_for", VARS_HEADER, &s, "1.1.1.1, 2.2.2.2, 3.3.3.3"));
}

TEST(http_name_never_matches_a_field_name_with_an_underscore)
{
    struct vars_source s =
        source("GET / HTTP/1.1\r\nHost: h\r\nX_Forwarded_For: 6.6.6.6\r\n\r\n", "/");
    CHECK(expands_to("[$http_x_forwarded_for]", VARS_HEADER, &s, "[]"));
}

TEST(http_name_escapes_a_tab_in_the_value_in_a_header)
{
    struct vars_source s = source("GET / HTTP/1.1\r\nHost: h\r\nX-A: a\tb\r\n\r\n", "/");
    CHECK(expands_to("$http_x_a", VARS_HEADER, &s, "a%09b"));
    CHECK(expands_to("$http_x_a", VARS_RAW, &s, "a\tb"));
}

TEST(cookie_name_is_the_first_such_cookie_in_any_field_and_case)
{
    struct vars_source s = source("GET / HTTP/1.1\r\nHost: h\r\nCookie: b=1\r\n"
                                  "Cookie: SID=x; sid=y\r\n\r\n", "/");
    CHECK(expands_to("[$cookie_sid]", VARS_HEADER, &s, "[x]"));
    CHECK(expands_to("[$cookie_none]", VARS_HEADER, &s, "[]"));
}

TEST(cookie_name_must_be_a_whole_name)
{
    struct vars_source s = source("GET / HTTP/1.1\r\nHost: h\r\nCookie: xa=1; ab=2; a=3\r\n\r\n",
                                  "/");
    CHECK(expands_to("$cookie_a", VARS_HEADER, &s, "3"));
}

/* As nginx reads them (checked against nginx 1.22): spaces around '=' skipped, a value up
 * to the next ';' (trailing spaces and commas kept), a ',' also starting a new pair. */
TEST(cookie_values_are_read_as_nginx_reads_them)
{
    struct vars_source s = source(
        "GET / HTTP/1.1\r\nHost: h\r\nCookie: a = 2 ;b=3,c=4;d;e=\r\n\r\n", "/");
    CHECK(expands_to("[$cookie_a][$cookie_b][$cookie_c][$cookie_d][$cookie_e]", VARS_HEADER, &s,
                     "[2 ][3,c=4][4][][]"));
}

TEST(arg_name_is_the_first_such_argument_in_any_case_as_sent)
{
    struct vars_source s = source("GET /?xx=1&x&X=%41+&x=3&y=a=b HTTP/1.1\r\nHost: h\r\n\r\n",
                                  "/");
    CHECK(expands_to("[$arg_x][$arg_y][$arg_z]", VARS_HEADER, &s, "[%41+][a=b][]"));
}

TEST(arg_name_reads_the_arguments_an_internal_redirect_gave)
{
    struct vars_source s = source("GET /?a=old HTTP/1.1\r\nHost: h\r\n\r\n", "/");
    struct http_slice given = {"a=new&b=2", 9};
    s.args = &given;
    CHECK(expands_to("$arg_a,$arg_b", VARS_HEADER, &s, "new,2"));
}

TEST(a_family_prefix_without_a_name_is_unknown)
{
    CHECK(refused("$http_", VARS_HEADER, "unknown \"http_\" variable"));
    CHECK(refused("${cookie_}", VARS_HEADER, "unknown \"cookie_\" variable"));
}

/* --- $request_id ---------------------------------------------------------------------- */

static char id_a[VARS_REQUEST_ID_SIZE];

TEST(request_id_is_32_lowercase_hex_digits)
{
    struct vars_source s = source(GET_HOST, "/");
    id_a[0] = '\0';
    s.request_id = id_a;
    char out[64], msg[128];
    struct vars_value *v;
    CHECK(vars_compile("$request_id", VARS_HEADER, &v, msg, sizeof(msg)) == 0);
    CHECK_EQ_INT(vars_expand(v, &s, out, sizeof(out)), 32);
    CHECK(strspn(out, "0123456789abcdef") == 32);
    vars_free(v);
}

TEST(request_id_is_the_same_wherever_one_request_expands_it)
{
    struct vars_source s = source(GET_HOST, "/");
    id_a[0] = '\0';
    s.request_id = id_a;
    char out1[64], out2[64], msg[128];
    struct vars_value *v, *w;
    CHECK(vars_compile("$request_id", VARS_HEADER, &v, msg, sizeof(msg)) == 0);
    CHECK(vars_compile("x-${request_id}", VARS_RAW, &w, msg, sizeof(msg)) == 0);
    CHECK_EQ_INT(vars_expand(v, &s, out1, sizeof(out1)), 32);
    CHECK_EQ_INT(vars_expand(w, &s, out2, sizeof(out2)), 34);
    CHECK(strcmp(out2 + 2, out1) == 0 && strcmp(id_a, out1) == 0);
    vars_free(v);
    vars_free(w);
}

TEST(request_id_differs_between_requests)
{
    struct vars_source s = source(GET_HOST, "/");
    static char seen[200][VARS_REQUEST_ID_SIZE];
    char out[64], msg[128];
    struct vars_value *v;
    CHECK(vars_compile("$request_id", VARS_HEADER, &v, msg, sizeof(msg)) == 0);
    bool distinct = true;
    for (int i = 0; i < 200; i++) { /* more ids than one batch of random bytes makes */
        seen[i][0] = '\0';
        s.request_id = seen[i];
        CHECK_EQ_INT(vars_expand(v, &s, out, sizeof(out)), 32);
        for (int j = 0; j < i; j++)
            distinct = distinct && strcmp(seen[i], seen[j]) != 0;
    }
    CHECK(distinct);
    vars_free(v);
}

TEST(request_id_without_a_requests_storage_is_empty)
{
    struct vars_source s = source(GET_HOST, "/");
    CHECK(expands_to("[$request_id]", VARS_HEADER, &s, "[]"));
}

/* --- for the proxy ---------------------------------------------------------------------- */

TEST(proxy_add_x_forwarded_for_appends_the_client_to_every_field)
{
    struct vars_source s = source("GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 1.1.1.1\r\n"
                                  "X-Forwarded-For: 2.2.2.2\r\n\r\n", "/");
    CHECK(expands_to("$proxy_add_x_forwarded_for", VARS_HEADER, &s,
                     "1.1.1.1, 2.2.2.2, 192.0.2.7"));
}

TEST(proxy_add_x_forwarded_for_without_one_is_the_client)
{
    struct vars_source s = source(GET_HOST, "/");
    CHECK(expands_to("$proxy_add_x_forwarded_for", VARS_HEADER, &s, "192.0.2.7"));
}

TEST(proxy_add_x_forwarded_for_keeps_an_empty_field_as_nginx)
{
    struct vars_source s = source("GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For:\r\n\r\n", "/");
    CHECK(expands_to("$proxy_add_x_forwarded_for", VARS_HEADER, &s, ", 192.0.2.7"));
}

TEST(proxy_host_and_port_are_the_proxys_and_empty_otherwise)
{
    struct vars_source s = source(GET_HOST, "/");
    CHECK(expands_to("[$proxy_host][$proxy_port]", VARS_HEADER, &s, "[][]"));
    s.proxy_host = (struct http_slice){"app", 3};
    s.proxy_port = (struct http_slice){"3000", 4};
    CHECK(expands_to("$proxy_host:$proxy_port", VARS_HEADER, &s, "app:3000"));
}

/* Two tries: the first refused (no connection, no head), the second answered. */
static struct vars_upstream two_tries(void)
{
    static const char head[] = "HTTP/1.1 200 OK\r\nX-A: one\r\nx-a: two\r\n"
                               "X_B:  under \r\n\r\n";
    struct vars_upstream u = {.n = 2, .head = head, .head_len = sizeof(head) - 1};
    u.tries[0] = (struct vars_upstream_try){.addr = "127.0.0.1:1", .status = 502,
                                            .connect_us = -1, .header_us = -1,
                                            .response_us = 300};
    u.tries[1] = (struct vars_upstream_try){.addr = "[::1]:2", .status = 200,
                                            .connect_us = 1000, .header_us = 4500,
                                            .response_us = 1234567, .bytes_sent = 90,
                                            .bytes_received = 130, .response_length = 10};
    return u;
}

TEST(upstream_tries_are_joined_with_a_comma_as_nginx)
{
    struct vars_source s = source(GET_HOST, "/");
    struct vars_upstream u = two_tries();
    s.upstream = &u;
    CHECK(expands_to("$upstream_addr|$upstream_status", VARS_HEADER, &s,
                     "127.0.0.1:1, [::1]:2|502, 200"));
    CHECK(expands_to("$upstream_response_length $upstream_bytes_received $upstream_bytes_sent",
                     VARS_HEADER, &s, "0, 10 0, 130 0, 90"));
    CHECK(expands_to("[$upstream_cache_status]", VARS_HEADER, &s, "[]")); /* no cache */
}

TEST(upstream_times_are_seconds_with_milliseconds_and_a_dash_when_not_reached)
{
    struct vars_source s = source(GET_HOST, "/");
    struct vars_upstream u = two_tries();
    s.upstream = &u;
    CHECK(expands_to("$upstream_connect_time|$upstream_header_time|$upstream_response_time",
                     VARS_HEADER, &s, "-, 0.001|-, 0.004|0.000, 1.234"));
}

TEST(upstream_http_is_the_first_field_of_the_name)
{
    struct vars_source s = source(GET_HOST, "/");
    struct vars_upstream u = two_tries();
    s.upstream = &u;
    CHECK(expands_to("[$upstream_http_x_a][$upstream_http_x_b][$upstream_http_none]",
                     VARS_HEADER, &s, "[one][under][]"));
}

TEST(upstream_variables_without_a_try_are_empty_and_a_dash_in_a_log)
{
    struct vars_source s = source(GET_HOST, "/");
    CHECK(expands_to("[$upstream_addr][$upstream_status][$upstream_cache_status]",
                     VARS_HEADER, &s, "[][][]"));
    CHECK(expands_to("$upstream_addr $upstream_response_time $upstream_cache_status",
                     VARS_LOG_DEFAULT, &s, "- - -"));
}

/* --- the connection and the server ------------------------------------------------------ */

TEST(remote_port_and_server_addr)
{
    struct vars_source s = source(GET_HOST, "/");
    inet_pton(AF_INET, "198.51.100.1", &local.sin_addr);
    CHECK(expands_to("$remote_port $server_addr", VARS_HEADER, &s, "40000 198.51.100.1"));
}

TEST(server_addr_behind_a_wildcard_listener_is_the_sockets)
{
    int lfd = socket(AF_INET, SOCK_STREAM, 0), cfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
    socklen_t al = sizeof(a);
    CHECK(bind(lfd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(lfd, 1) == 0);
    CHECK(getsockname(lfd, (struct sockaddr *)&a, &al) == 0);
    CHECK(connect(cfd, (struct sockaddr *)&a, sizeof(a)) == 0);
    struct vars_source s = source(GET_HOST, "/");
    local.sin_addr.s_addr = htonl(INADDR_ANY);
    CHECK(expands_to("$server_addr", VARS_HEADER, &s, "0.0.0.0"));
    s.local_fd = cfd;
    CHECK(expands_to("$server_addr", VARS_HEADER, &s, "127.0.0.1"));
    close(cfd);
    close(lfd);
}

TEST(server_name_is_the_first_name_as_written)
{
    struct vars_source s = source(GET_HOST, "/");
    CHECK(expands_to("[$server_name]", VARS_HEADER, &s, "[]"));
    s.name_before = "*";
    s.name = ".example.org";
    s.name_after = "";
    CHECK(expands_to("$server_name", VARS_HEADER, &s, "*.example.org"));
}

/* expires' time syntax, as nginx's ngx_parse_time reads it (checked with nginx -t). */
TEST(expires_times_in_nginx_syntax)
{
    int64_t t;
    CHECK(headers_parse_time("1y", &t) == 0 && t == 365 * 86400);
    CHECK(headers_parse_time("30d", &t) == 0 && t == 30 * 86400);
    CHECK(headers_parse_time("12h", &t) == 0 && t == 12 * 3600);
    CHECK(headers_parse_time("1M", &t) == 0 && t == 30 * 86400);
    CHECK(headers_parse_time("1w", &t) == 0 && t == 7 * 86400);
    CHECK(headers_parse_time("90m", &t) == 0 && t == 90 * 60);
    CHECK(headers_parse_time("1d12h", &t) == 0 && t == 86400 + 12 * 3600);
    CHECK(headers_parse_time("1d 12h", &t) == 0 && t == 86400 + 12 * 3600);
    CHECK(headers_parse_time("3600", &t) == 0 && t == 3600);
    CHECK(headers_parse_time("-1", &t) == 0 && t == -1);
    CHECK(headers_parse_time("0", &t) == 0 && t == 0);
}

TEST(expires_times_nginx_refuses_are_refused)
{
    int64_t t;
    CHECK(headers_parse_time("1ms", &t) < 0);
    CHECK(headers_parse_time("1h1d", &t) < 0);
    CHECK(headers_parse_time("1y1y", &t) < 0);
    CHECK(headers_parse_time("abc", &t) < 0);
    CHECK(headers_parse_time("", &t) < 0);
    CHECK(headers_parse_time("-", &t) < 0);
    CHECK(headers_parse_time("69y", &t) < 0); /* ours: beyond 68 years */
}
