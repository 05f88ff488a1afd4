/* test_cgi.c — mod_cgi's pure parts: the parser of a script's head (RFC 3875 section 6)
 * and the environment builder (section 4.1). */
#define TEST_MAIN
#include "test.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include "mod_cgi.h"

/* --- the head ------------------------------------------------------------------------- */

static struct response resp;

static int parse(const char *s)
{
    resp_init(&resp);
    return cgi_parse_head(s, strlen(s), &resp);
}

static bool head_has(const char *line)
{
    resp.head[resp.head_len < sizeof(resp.head) ? resp.head_len : sizeof(resp.head) - 1] = 0;
    return strstr(resp.head, line) != NULL;
}

TEST(head_content_type_only_is_200)
{
    const char *s = "Content-Type: text/plain\n\nbody";
    CHECK_EQ_INT(parse(s), (long long)(strlen(s) - 4));
    CHECK_EQ_INT(resp.status, 200);
    CHECK(head_has("Content-Type: text/plain\r\n"));
    CHECK(!resp.length_known);
}

TEST(head_crlf_and_lf_line_ends_both_work)
{
    CHECK_EQ_INT(parse("Content-Type: a/b\r\nX-A: 1\r\n\r\n"), 19 + 8 + 2);
    CHECK(head_has("X-A: 1\r\n"));
    CHECK_EQ_INT(parse("Content-Type: a/b\r\nX-A: 1\n\r\nrest"), 19 + 7 + 2);
}

TEST(head_incomplete_asks_for_more)
{
    CHECK_EQ_INT(parse(""), 0);
    CHECK_EQ_INT(parse("Content-Type: text/pl"), 0);
    CHECK_EQ_INT(parse("Content-Type: text/plain\n"), 0);
    CHECK_EQ_INT(parse("Content-Type: text/plain\r\n\r"), 0);
    CHECK_EQ_INT(parse("Content-Ty"), 0);
}

TEST(head_garbage_is_refused_at_once)
{
    CHECK_EQ_INT(parse("<html>"), -1);
    CHECK_EQ_INT(parse("hello world\n\n"), -1);
    CHECK_EQ_INT(parse("HTTP/1.1 200 OK\r\n"), -1);
    CHECK_EQ_INT(parse(": no name\n\n"), -1);
    CHECK_EQ_INT(parse("Content-Type: a/b\n continued\n\n"), -1);
    CHECK_EQ_INT(parse("Bad Name: x\n\n"), -1);
}

TEST(head_needs_content_type_location_or_status)
{
    CHECK_EQ_INT(parse("X-Only: 1\n\n"), -1);
    CHECK_EQ_INT(parse("\n\nbody"), -1);
    CHECK(parse("Status: 204\n\n") > 0);
    CHECK_EQ_INT(resp.status, 204);
    CHECK(resp.no_length);
}

TEST(head_control_bytes_in_a_value_are_refused)
{
    CHECK_EQ_INT(parse("Content-Type: a/b\nX-A: a\rb\n\n"), -1);
    CHECK_EQ_INT(parse("Content-Type: a/b\nX-A: a\x01"
                       "b\n\n"),
                 -1);
    static const char nul[] = "Content-Type: a/b\nX-A: a\0b\n\n";
    resp_init(&resp);
    CHECK_EQ_INT(cgi_parse_head(nul, sizeof(nul) - 1, &resp), -1);
    CHECK(parse("Content-Type: a/b\nX-A: tab\there\n\n") > 0);
}

TEST(head_status_sets_code_and_reason)
{
    CHECK(parse("Status: 404 Not Found\nContent-Type: text/plain\n\n") > 0);
    CHECK_EQ_INT(resp.status, 404);
    CHECK(strncmp(resp.head, "HTTP/1.1 404 Not Found\r\n", 24) == 0);
    CHECK(!head_has("Status:"));
    CHECK(parse("Status: 418 I'm a teapot\nContent-Type: text/plain\n\n") > 0);
    CHECK(strncmp(resp.head, "HTTP/1.1 418 I'm a teapot\r\n", 27) == 0);
    CHECK(head_has("Server: "));
    CHECK(parse("Status: 201\nContent-Type: text/plain\n\n") > 0);
    CHECK(strncmp(resp.head, "HTTP/1.1 201 Created\r\n", 22) == 0);
}

TEST(head_bad_status_is_refused)
{
    CHECK_EQ_INT(parse("Status: 99\n\n"), -1);
    CHECK_EQ_INT(parse("Status: abc\n\n"), -1);
    CHECK_EQ_INT(parse("Status: 2000\n\n"), -1);
    CHECK_EQ_INT(parse("Status: 100 Continue\n\n"), -1);
    CHECK_EQ_INT(parse("Status: 600 Nope\n\n"), -1);
    CHECK_EQ_INT(parse("Status: 200\nStatus: 404\n\n"), -1);
}

TEST(head_location_without_status_is_302)
{
    CHECK(parse("Location: /elsewhere?x=1\n\n") > 0);
    CHECK_EQ_INT(resp.status, 302);
    CHECK(head_has("Location: /elsewhere?x=1\r\n"));
    CHECK(parse("Location: https://example.com/\n\n") > 0);
    CHECK_EQ_INT(resp.status, 302);
    CHECK(parse("Status: 301 Moved\nLocation: https://example.com/\n\n") > 0);
    CHECK_EQ_INT(resp.status, 301);
    CHECK_EQ_INT(parse("Location:\n\n"), -1);
}

TEST(head_content_length_is_taken_not_copied)
{
    CHECK(parse("Content-Type: a/b\nContent-Length: 12\n\n") > 0);
    CHECK(resp.length_known);
    CHECK_EQ_INT(resp.content_length, 12);
    CHECK(!head_has("Content-Length"));
    CHECK(parse("Content-Type: a/b\nContent-Length: 3\nContent-Length: 3\n\n") > 0);
    CHECK_EQ_INT(parse("Content-Type: a/b\nContent-Length: 3\nContent-Length: 4\n\n"), -1);
    CHECK_EQ_INT(parse("Content-Type: a/b\nContent-Length: -1\n\n"), -1);
    CHECK_EQ_INT(parse("Content-Type: a/b\nContent-Length: 1x\n\n"), -1);
}

TEST(head_hop_by_hop_and_core_fields_are_dropped)
{
    CHECK(parse("Content-Type: a/b\nConnection: close\nTransfer-Encoding: chunked\n"
                "Keep-Alive: 5\nDate: x\nServer: evil\nUpgrade: h2c\nX-Kept: yes\n\n") > 0);
    CHECK(!head_has("Connection"));
    CHECK(!head_has("Transfer-Encoding"));
    CHECK(!head_has("Keep-Alive"));
    CHECK(!head_has("Date: x"));
    CHECK(!head_has("evil"));
    CHECK(!head_has("Upgrade"));
    CHECK(head_has("X-Kept: yes\r\n"));
}

TEST(head_values_are_trimmed_and_repeats_kept)
{
    CHECK(parse("Content-Type:   a/b  \nSet-Cookie: a=1\nSet-Cookie: b=2\n\n") > 0);
    CHECK(head_has("Content-Type: a/b\r\n"));
    CHECK(head_has("Set-Cookie: a=1\r\nSet-Cookie: b=2\r\n"));
}

TEST(head_too_large_for_the_response_is_refused)
{
    static char big[20000];
    size_t n = (size_t)snprintf(big, sizeof(big), "Content-Type: a/b\n");
    while (n < 9000)
        n += (size_t)snprintf(big + n, sizeof(big) - n, "X-Filler: %0100d\n", 0);
    snprintf(big + n, sizeof(big) - n, "\n");
    CHECK_EQ_INT(parse(big), -1);
}

/* --- the environment ------------------------------------------------------------------ */

static const struct http_limits limits = {.max_header_bytes = 8192, .max_headers = 64};

struct env_case {
    struct http_request http;
    struct request req;
    struct sockaddr_in peer, local;
    struct cgi_env env;
    char path[REQUEST_PATH_MAX];
};

static struct env_case ec;

static int build(const char *raw, const char *body, size_t script_len)
{
    memset(&ec, 0, sizeof(ec));
    if (http_parse_request(raw, strlen(raw), &limits, &ec.http) <= 0)
        return -2;
    ec.peer.sin_family = AF_INET;
    ec.peer.sin_port = htons(40000);
    inet_pton(AF_INET, "192.0.2.7", &ec.peer.sin_addr);
    ec.local.sin_family = AF_INET;
    ec.local.sin_port = htons(8080);
    inet_pton(AF_INET, "0.0.0.0", &ec.local.sin_addr);
    long n = http_path_normalize(ec.http.path, ec.path, sizeof(ec.path));
    if (n < 0)
        return -3;
    ec.req = (struct request){
        .http = &ec.http,
        .path = ec.path,
        .path_len = (size_t)n,
        .args = ec.http.query,
        .has_args = ec.http.has_query,
        .peer = (const struct sockaddr *)&ec.peer,
        .local = (const struct sockaddr *)&ec.local,
        .body = body,
        .body_len = body ? strlen(body) : 0,
    };
    struct cgi_vars v = {
        .software = "lfhttpd/test",
        .path = "/usr/bin:/bin",
        .document_root = "/srv/www",
        .hostname = "myhost",
        .script_name = {ec.path, script_len},
        .path_info = {ec.path + script_len, (size_t)n - script_len},
        .script_filename = "/srv/cgi-bin/env.sh",
    };
    return cgi_env_build(&ec.req, &v, &ec.env);
}

static bool env_is(const char *name, const char *value)
{
    const char *v = cgi_env_get(&ec.env, name);
    if (!v || strcmp(v, value) != 0) {
        fprintf(stderr, "  %s is %s%s%s, expected \"%s\"\n", name, v ? "\"" : "", v ? v : "unset",
                v ? "\"" : "", value);
        return false;
    }
    return true;
}

TEST(env_request_variables)
{
    CHECK_EQ_INT(build("GET /cgi-bin/env.sh/a%20b/c?x=1&y=%41 HTTP/1.1\r\n"
                       "Host: example.org:8080\r\n\r\n",
                       NULL, strlen("/cgi-bin/env.sh")),
                 0);
    CHECK(env_is("GATEWAY_INTERFACE", "CGI/1.1"));
    CHECK(env_is("SERVER_SOFTWARE", "lfhttpd/test"));
    CHECK(env_is("SERVER_NAME", "example.org"));
    CHECK(env_is("SERVER_PORT", "8080"));
    CHECK(env_is("SERVER_PROTOCOL", "HTTP/1.1"));
    CHECK(env_is("REQUEST_METHOD", "GET"));
    CHECK(env_is("REQUEST_URI", "/cgi-bin/env.sh/a%20b/c?x=1&y=%41"));
    CHECK(env_is("SCRIPT_NAME", "/cgi-bin/env.sh"));
    CHECK(env_is("PATH_INFO", "/a b/c"));
    CHECK(env_is("PATH_TRANSLATED", "/srv/www/a b/c"));
    CHECK(env_is("QUERY_STRING", "x=1&y=%41"));
    CHECK(env_is("REMOTE_ADDR", "192.0.2.7"));
    CHECK(env_is("REMOTE_PORT", "40000"));
    CHECK(env_is("DOCUMENT_ROOT", "/srv/www"));
    CHECK(env_is("SCRIPT_FILENAME", "/srv/cgi-bin/env.sh"));
    CHECK(env_is("PATH", "/usr/bin:/bin"));
    CHECK(env_is("HTTP_HOST", "example.org:8080"));
    CHECK(cgi_env_get(&ec.env, "CONTENT_LENGTH") == NULL);
    CHECK(cgi_env_get(&ec.env, "CONTENT_TYPE") == NULL);
    cgi_env_free(&ec.env);
}

/* REQUEST_URI is $request_uri: an absolute-form target's scheme and authority left out, its
 * empty path "/" (RFC 9110 section 4.2.3). */
TEST(env_request_uri_of_an_absolute_target_is_its_origin_form)
{
    CHECK_EQ_INT(build("GET http://example.org/cgi-bin/env.sh?x=1 HTTP/1.1\r\n"
                       "Host: example.org\r\n\r\n",
                       NULL, strlen("/cgi-bin/env.sh")),
                 0);
    CHECK(env_is("REQUEST_URI", "/cgi-bin/env.sh?x=1"));
    cgi_env_free(&ec.env);
    CHECK_EQ_INT(build("GET http://example.org?x=1 HTTP/1.1\r\nHost: example.org\r\n\r\n",
                       NULL, 1),
                 0);
    CHECK(env_is("REQUEST_URI", "/?x=1"));
    cgi_env_free(&ec.env);
}

TEST(env_empty_query_and_path_info)
{
    CHECK_EQ_INT(build("GET /cgi-bin/env.sh HTTP/1.1\r\nHost: h\r\n\r\n", NULL, 15), 0);
    CHECK(env_is("QUERY_STRING", ""));
    CHECK(env_is("PATH_INFO", ""));
    CHECK(cgi_env_get(&ec.env, "PATH_TRANSLATED") == NULL);
    cgi_env_free(&ec.env);
}

TEST(env_body_variables)
{
    CHECK_EQ_INT(build("POST /cgi-bin/env.sh HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n"
                       "Content-Type: application/x-www-form-urlencoded\r\n\r\n",
                       "a=1&b", 15),
                 0);
    CHECK(env_is("REQUEST_METHOD", "POST"));
    CHECK(env_is("CONTENT_LENGTH", "5"));
    CHECK(env_is("CONTENT_TYPE", "application/x-www-form-urlencoded"));
    CHECK(cgi_env_get(&ec.env, "HTTP_CONTENT_LENGTH") == NULL);
    CHECK(cgi_env_get(&ec.env, "HTTP_CONTENT_TYPE") == NULL);
    cgi_env_free(&ec.env);
}

TEST(env_chunked_body_has_its_decoded_length)
{
    CHECK_EQ_INT(build("POST /cgi-bin/env.sh HTTP/1.1\r\nHost: h\r\n"
                       "Transfer-Encoding: chunked\r\n\r\n",
                       "hello world", 15),
                 0);
    CHECK(env_is("CONTENT_LENGTH", "11"));
    CHECK(cgi_env_get(&ec.env, "HTTP_TRANSFER_ENCODING") == NULL);
    cgi_env_free(&ec.env);
}

TEST(env_headers_become_http_variables)
{
    CHECK_EQ_INT(build("GET /cgi-bin/env.sh HTTP/1.1\r\nHost: h\r\nX-Custom-Thing: v 1\r\n"
                       "Accept: a\r\naccept: b\r\nCookie: c=1\r\nCookie: d=2\r\n"
                       "Proxy: http://evil:1/\r\nX_Custom_Thing: spoof\r\n\r\n",
                       NULL, 15),
                 0);
    CHECK(env_is("HTTP_X_CUSTOM_THING", "v 1"));
    CHECK(env_is("HTTP_ACCEPT", "a, b"));
    CHECK(env_is("HTTP_COOKIE", "c=1; d=2"));
    CHECK(cgi_env_get(&ec.env, "HTTP_PROXY") == NULL); /* httpoxy */
    cgi_env_free(&ec.env);
}

TEST(env_server_name_without_host_on_a_wildcard_listener)
{
    CHECK_EQ_INT(build("GET /cgi-bin/env.sh HTTP/1.0\r\n\r\n", NULL, 15), 0);
    CHECK(env_is("SERVER_NAME", "myhost"));
    CHECK(env_is("SERVER_PROTOCOL", "HTTP/1.0"));
    cgi_env_free(&ec.env);
}

TEST(env_server_name_strips_the_port_of_an_ipv6_host)
{
    CHECK_EQ_INT(build("GET /cgi-bin/env.sh HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", NULL, 15), 0);
    CHECK(env_is("SERVER_NAME", "[::1]"));
    cgi_env_free(&ec.env);
}

TEST(env_has_nothing_of_the_server_environment_but_path)
{
    setenv("LFHTTPD_SECRET", "s3cret", 1);
    CHECK_EQ_INT(build("GET /cgi-bin/env.sh HTTP/1.1\r\nHost: h\r\n\r\n", NULL, 15), 0);
    for (unsigned i = 0; i < ec.env.n; i++)
        CHECK(strstr(ec.env.envp[i], "s3cret") == NULL);
    CHECK(ec.env.envp[ec.env.n] == NULL);
    cgi_env_free(&ec.env);
}
