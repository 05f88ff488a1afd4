/* test_uwsgi_scgi.c — the uwsgi packet and the SCGI netstring written
 * (server/uwsgi_packet.c, server/scgi_netstring.c), and the head of their applications'
 * answers read (uwsgi_parse_head, modules/mod_uwsgi.c). */
#define TEST_MAIN
#include "test.h"

#include "http_response.h"
#include "mod_uwsgi.h"
#include "scgi_netstring.h"
#include "uwsgi_packet.h"

static struct response resp;

static int head(const char *s)
{
    resp_init(&resp);
    return uwsgi_parse_head(s, strlen(s), &resp);
}

static bool head_has(const char *line)
{
    resp.head[resp.head_len < sizeof(resp.head) ? resp.head_len : sizeof(resp.head) - 1] = 0;
    return strstr(resp.head, line) != NULL;
}

TEST(uwsgi_pair_has_little_endian_lengths_before_name_and_value)
{
    uint8_t out[64];
    size_t n = uwsgi_pair(out, sizeof(out), "PATH_INFO", 9, "/a", 2);
    CHECK_EQ_INT(n, 2 + 9 + 2 + 2);
    CHECK(memcmp(out, "\x09\x00PATH_INFO\x02\x00/a", n) == 0);
}

TEST(uwsgi_pair_of_a_long_value_writes_its_length_low_byte_first)
{
    static uint8_t out[1024];
    static char value[300];
    memset(value, 'v', sizeof(value));
    size_t n = uwsgi_pair(out, sizeof(out), "X", 1, value, sizeof(value));
    CHECK_EQ_INT(n, 2 + 1 + 2 + 300);
    CHECK_EQ_INT(out[3], 300 & 0xff);
    CHECK_EQ_INT(out[4], 300 >> 8);
}

TEST(uwsgi_pair_that_does_not_fit_is_zero)
{
    uint8_t out[8];
    CHECK_EQ_INT(uwsgi_pair(out, sizeof(out), "NAME", 4, "value", 5), 0);
}

TEST(uwsgi_request_is_modifier1_size_modifier2_then_vars_then_body)
{
    uint8_t vars[64], out[128];
    size_t v = uwsgi_pair(vars, sizeof(vars), "A", 1, "b", 1);
    size_t n = uwsgi_request(out, sizeof(out), 5, 7, (const char *)vars, v, "BODY", 4);
    CHECK_EQ_INT(n, 4 + v + 4);
    CHECK_EQ_INT(out[0], 5);
    CHECK_EQ_INT(out[1], v);
    CHECK_EQ_INT(out[2], 0);
    CHECK_EQ_INT(out[3], 7);
    CHECK(memcmp(out + 4, vars, v) == 0);
    CHECK(memcmp(out + 4 + v, "BODY", 4) == 0);
    CHECK_EQ_INT(uwsgi_request_size(v, 4), n);
}

TEST(uwsgi_request_with_vars_over_64k_is_zero)
{
    static char vars[70000];
    static uint8_t out[80000];
    CHECK_EQ_INT(uwsgi_request(out, sizeof(out), 0, 0, vars, 65536, "", 0), 0);
    CHECK_EQ_INT(uwsgi_request(out, sizeof(out), 0, 0, vars, 65535, "", 0), 65539);
    CHECK_EQ_INT(out[1], 0xff);
    CHECK_EQ_INT(out[2], 0xff);
}

TEST(scgi_pair_is_name_nul_value_nul)
{
    uint8_t out[32];
    size_t n = scgi_pair(out, sizeof(out), "SCGI", 4, "1", 1);
    CHECK_EQ_INT(n, 7);
    CHECK(memcmp(out, "SCGI\0" "1\0", 7) == 0);
}

TEST(scgi_pair_with_a_nul_inside_is_zero)
{
    uint8_t out[32];
    CHECK_EQ_INT(scgi_pair(out, sizeof(out), "A\0B", 3, "1", 1), 0);
    CHECK_EQ_INT(scgi_pair(out, sizeof(out), "A", 1, "x\0y", 3), 0);
    CHECK_EQ_INT(scgi_pair(out, sizeof(out), "", 0, "x", 1), 0);
}

TEST(scgi_request_is_a_netstring_with_content_length_first_then_the_body)
{
    uint8_t vars[32], out[128];
    size_t v = scgi_pair(vars, sizeof(vars), "SCGI", 4, "1", 1);
    size_t n = scgi_request(out, sizeof(out), (const char *)vars, v, "hello", 5);
    static const char want[] = "24:CONTENT_LENGTH\0" "5\0" "SCGI\0" "1\0" ",hello";
    CHECK_EQ_INT(n, sizeof(want) - 1);
    CHECK(memcmp(out, want, n) == 0);
    CHECK(scgi_request_size(v, 5) >= n);
}

TEST(scgi_request_without_body_says_content_length_0)
{
    uint8_t out[64];
    size_t n = scgi_request(out, sizeof(out), "", 0, "", 0);
    static const char want[] = "17:CONTENT_LENGTH\0" "0\0" ",";
    CHECK_EQ_INT(n, sizeof(want) - 1);
    CHECK(memcmp(out, want, n) == 0);
}

TEST(scgi_request_that_does_not_fit_is_zero)
{
    uint8_t out[16];
    CHECK_EQ_INT(scgi_request(out, sizeof(out), "", 0, "", 0), 0);
}

TEST(scgi_request_head_says_the_content_length_of_a_body_to_follow)
{
    uint8_t vars[32], out[128];
    size_t v = scgi_pair(vars, sizeof(vars), "SCGI", 4, "1", 1);
    size_t n = scgi_request_head(out, sizeof(out), (const char *)vars, v, 20971520);
    static const char want[] = "31:CONTENT_LENGTH\0" "20971520\0" "SCGI\0" "1\0" ",";
    CHECK_EQ_INT(n, sizeof(want) - 1);
    CHECK(memcmp(out, want, n) == 0);
}

TEST(head_with_a_status_line_takes_its_code_and_reason)
{
    const char *s = "HTTP/1.1 404 Gone Away\r\nContent-Type: text/plain\r\n\r\nbody";
    CHECK_EQ_INT(head(s), (long long)(strlen(s) - 4));
    CHECK_EQ_INT(resp.status, 404);
    CHECK(strncmp(resp.head, "HTTP/1.1 404 Gone Away\r\n", 24) == 0);
    CHECK(head_has("Content-Type: text/plain\r\n"));
    CHECK(!head_has("Status:"));
}

TEST(head_with_a_status_line_needs_no_other_field)
{
    const char *s = "HTTP/1.0 204 No Content\r\n\r\n";
    CHECK_EQ_INT(head(s), (long long)strlen(s));
    CHECK_EQ_INT(resp.status, 204);
}

TEST(head_with_a_status_line_and_a_location_keeps_the_lines_code)
{
    CHECK(head("HTTP/1.1 301 Moved\r\nLocation: /x\r\n\r\n") > 0);
    CHECK_EQ_INT(resp.status, 301);
}

TEST(head_with_a_status_line_and_a_status_field_takes_the_line_s)
{
    const char *s = "HTTP/1.1 201 Made\r\nX-A: 1\r\nStatus: 404 No\r\n\r\nStatus: body";
    CHECK_EQ_INT(head(s), (long long)(strlen(s) - 12));
    CHECK_EQ_INT(resp.status, 201);
    CHECK(head_has("X-A: 1\r\n"));
    CHECK(!head_has("Status"));
}

TEST(head_with_two_status_fields_takes_the_first)
{
    const char *s = "Status: 201 Made\r\nX-A: 1\r\nStatus: 404 No\r\n\r\nbody";
    CHECK_EQ_INT(head(s), (long long)(strlen(s) - 4));
    CHECK_EQ_INT(resp.status, 201);
    CHECK(head_has("X-A: 1\r\n"));
    CHECK(!head_has("Status"));
}

TEST(head_without_a_status_line_is_cgi_s)
{
    CHECK(head("Status: 201 Made\r\nContent-Type: a/b\r\n\r\n") > 0);
    CHECK_EQ_INT(resp.status, 201);
    CHECK(head("Location: /y\r\n\r\n") > 0);
    CHECK_EQ_INT(resp.status, 302);
    CHECK(head("Content-Type: a/b\n\n") > 0);
    CHECK_EQ_INT(resp.status, 200);
}

TEST(head_not_whole_yet_asks_for_more)
{
    CHECK_EQ_INT(head("HTT"), 0);
    CHECK_EQ_INT(head("HTTP/1.1 200 OK"), 0);
    CHECK_EQ_INT(head("HTTP/1.1 200 OK\r\nContent-Type: a/b\r\n"), 0);
}

TEST(head_with_a_malformed_status_line_is_invalid)
{
    CHECK_EQ_INT(head("HTTP/1.1 20 OK\r\n\r\n"), -1);
    CHECK_EQ_INT(head("HTTP/1.1 2000 OK\r\n\r\n"), -1);
    CHECK_EQ_INT(head("HTTP/x 200 OK\r\n\r\n"), -1);
    CHECK_EQ_INT(head("HTTP/1.1  200 OK\r\n\r\n"), -1);
    CHECK_EQ_INT(head("HTTP/1.1 099 Low\r\n\r\n"), -1);
}

TEST(head_with_a_control_byte_in_the_reason_is_invalid)
{
    CHECK_EQ_INT(head("HTTP/1.1 200 O\rK\r\nContent-Type: a/b\r\n\r\n"), -1);
    CHECK_EQ_INT(head("HTTP/1.1 200 O\x01K\r\n\r\n"), -1);
}

TEST(head_field_with_a_cr_inside_is_invalid)
{
    CHECK_EQ_INT(head("HTTP/1.1 200 OK\r\nX-A: a\rSet-Cookie: b\r\n\r\n"), -1);
    CHECK_EQ_INT(head("Status: 200 OK\r\nX-A: a\rSet-Cookie: b\r\n\r\n"), -1);
}

TEST(head_that_never_ends_within_16k_is_invalid)
{
    static char big[16384 + 1];
    memcpy(big, "HTTP/1.1 200 ", 13);
    memset(big + 13, 'a', sizeof(big) - 14);
    resp_init(&resp);
    CHECK_EQ_INT(uwsgi_parse_head(big, sizeof(big) - 1, &resp), -1);
}
