/* test_http_upstream.c — the behaviour of http_upstream.h, one rule a test. */
#define TEST_MAIN
#include "test.h"

#include "http_upstream.h"

#include <stdint.h>
#include <time.h>

static const struct http_limits limits = {.max_header_bytes = 8192, .max_headers = 64};

static int parse_method_len(const char *s, size_t len, enum http_method m,
                            struct http_response_head *h)
{
    return http_parse_response(s, len, &limits, m, h);
}

static int parse_method(const char *s, enum http_method m, struct http_response_head *h)
{
    return parse_method_len(s, strlen(s), m, h);
}

static int parse(const char *s, struct http_response_head *h)
{
    return parse_method(s, HTTP_METHOD_GET, h);
}

static int status_len(const char *s, size_t len)
{
    struct http_response_head h;
    return parse_method_len(s, len, HTTP_METHOD_GET, &h);
}

static int status(const char *s)
{
    return status_len(s, strlen(s));
}

/* For heads holding NUL bytes: the length of a string literal. */
#define STATUS_LIT(lit) status_len((lit), sizeof(lit) - 1)

#define OK "HTTP/1.1 200 OK\r\n"

/* --- status line ---------------------------------------------------------------------- */

TEST(status_line_and_fields_are_parsed)
{
    const char *s = OK "Content-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello";
    struct http_response_head h;
    CHECK_EQ_INT(parse(s, &h), strlen(s) - 5);
    CHECK_EQ_INT(h.header_bytes, strlen(s) - 5);
    CHECK_EQ_INT(h.status, 200);
    CHECK_EQ_INT(h.version_minor, 1);
    CHECK_SLICE(h.reason, "OK");
    CHECK_EQ_INT(h.n_headers, 2);
    CHECK_SLICE(h.headers[0].name, "Content-Type");
    CHECK_SLICE(h.headers[0].value, "text/plain");
    CHECK_SLICE(h.headers[1].name, "Content-Length");
    CHECK_SLICE(h.headers[1].value, "5");
}

TEST(http_1_0_status_line_is_version_minor_0)
{
    struct http_response_head h;
    CHECK(parse("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", &h) > 0);
    CHECK_EQ_INT(h.version_minor, 0);
}

TEST(http_1_minor_above_1_is_read_as_1_1)
{
    struct http_response_head h;
    CHECK(parse("HTTP/1.7 200 OK\r\nContent-Length: 0\r\n\r\n", &h) > 0);
    CHECK_EQ_INT(h.version_minor, 1);
}

TEST(version_other_than_1_x_is_refused)
{
    CHECK_EQ_INT(status("HTTP/2.0 200 OK\r\n\r\n"), HTTP_UPSTREAM_BAD_VERSION);
    CHECK_EQ_INT(status("HTTP/0.9 200 OK\r\n\r\n"), HTTP_UPSTREAM_BAD_VERSION);
}

TEST(malformed_version_is_refused)
{
    CHECK_EQ_INT(status("http/1.1 200 OK\r\n\r\n"), HTTP_UPSTREAM_BAD_STATUS_LINE);
    CHECK_EQ_INT(status("HTTP/1 200 OK\r\n\r\n"), HTTP_UPSTREAM_BAD_STATUS_LINE);
    CHECK_EQ_INT(status("HTTP/1.11 200 OK\r\n\r\n"), HTTP_UPSTREAM_BAD_STATUS_LINE);
    CHECK_EQ_INT(status("ICY 200 OK\r\n\r\n"), HTTP_UPSTREAM_BAD_STATUS_LINE);
}

TEST(status_code_is_exactly_three_digits)
{
    CHECK_EQ_INT(status("HTTP/1.1 20 OK\r\n\r\n"), HTTP_UPSTREAM_BAD_STATUS_LINE);
    CHECK_EQ_INT(status("HTTP/1.1 2000 OK\r\n\r\n"), HTTP_UPSTREAM_BAD_STATUS_LINE);
    CHECK_EQ_INT(status("HTTP/1.1 2x0 OK\r\n\r\n"), HTTP_UPSTREAM_BAD_STATUS_LINE);
    CHECK_EQ_INT(status("HTTP/1.1 +20 OK\r\n\r\n"), HTTP_UPSTREAM_BAD_STATUS_LINE);
}

TEST(status_code_outside_100_to_599_is_refused)
{
    CHECK_EQ_INT(status("HTTP/1.1 099 X\r\n\r\n"), HTTP_UPSTREAM_BAD_STATUS);
    CHECK_EQ_INT(status("HTTP/1.1 000 X\r\n\r\n"), HTTP_UPSTREAM_BAD_STATUS);
    CHECK_EQ_INT(status("HTTP/1.1 600 X\r\n\r\n"), HTTP_UPSTREAM_BAD_STATUS);
    CHECK_EQ_INT(status("HTTP/1.1 999 X\r\n\r\n"), HTTP_UPSTREAM_BAD_STATUS);
}

TEST(status_codes_100_and_599_are_the_bounds)
{
    struct http_response_head h;
    CHECK(parse("HTTP/1.1 100 Continue\r\n\r\n", &h) > 0);
    CHECK_EQ_INT(h.status, 100);
    CHECK(parse("HTTP/1.1 599 Whatever\r\nContent-Length: 0\r\n\r\n", &h) > 0);
    CHECK_EQ_INT(h.status, 599);
}

TEST(empty_reason_after_the_space_is_accepted)
{
    struct http_response_head h;
    CHECK(parse("HTTP/1.1 404 \r\nContent-Length: 0\r\n\r\n", &h) > 0);
    CHECK_EQ_INT(h.status, 404);
    CHECK_EQ_INT(h.reason.len, 0);
}

TEST(status_line_without_space_or_reason_is_accepted)
{
    struct http_response_head h;
    CHECK(parse("HTTP/1.1 204\r\n\r\n", &h) > 0);
    CHECK_EQ_INT(h.status, 204);
    CHECK_EQ_INT(h.reason.len, 0);
}

TEST(reason_may_hold_spaces_tabs_and_obs_text)
{
    struct http_response_head h;
    CHECK(parse("HTTP/1.1 200 Tr\xc3\xa8s\tbien, OK\r\nContent-Length: 0\r\n\r\n", &h) > 0);
    CHECK_SLICE(h.reason, "Tr\xc3\xa8s\tbien, OK");
}

TEST(reason_with_a_control_byte_is_refused)
{
    CHECK_EQ_INT(STATUS_LIT("HTTP/1.1 200 O\0K\r\n\r\n"), HTTP_UPSTREAM_BAD_STATUS_LINE);
    CHECK_EQ_INT(status("HTTP/1.1 200 O\x01K\r\n\r\n"), HTTP_UPSTREAM_BAD_STATUS_LINE);
    CHECK_EQ_INT(status("HTTP/1.1 200 O\x7fK\r\n\r\n"), HTTP_UPSTREAM_BAD_STATUS_LINE);
}

TEST(two_spaces_before_the_status_code_are_refused)
{
    CHECK_EQ_INT(status("HTTP/1.1  200 OK\r\n\r\n"), HTTP_UPSTREAM_BAD_STATUS_LINE);
    CHECK_EQ_INT(status("HTTP/1.1\t200 OK\r\n\r\n"), HTTP_UPSTREAM_BAD_STATUS_LINE);
}

TEST(empty_line_before_the_status_line_is_refused)
{
    /* what an upstream sends when its last body was longer than it said */
    CHECK_EQ_INT(status("\r\nHTTP/1.1 200 OK\r\n\r\n"), HTTP_UPSTREAM_BAD_STATUS_LINE);
}

/* --- field lines ---------------------------------------------------------------------- */

TEST(fields_are_kept_in_order_with_values_trimmed)
{
    struct http_response_head h;
    CHECK(parse(OK "A: 1\r\nSet-Cookie: x=1\r\nSet-Cookie:y=2 \t\r\nContent-Length: 0\r\n\r\n",
                &h) > 0);
    CHECK_EQ_INT(h.n_headers, 4);
    CHECK_SLICE(h.headers[1].value, "x=1");
    CHECK_SLICE(h.headers[2].name, "Set-Cookie");
    CHECK_SLICE(h.headers[2].value, "y=2");
}

TEST(obs_fold_is_refused)
{
    CHECK_EQ_INT(status(OK "X-A: 1\r\n 2\r\n\r\n"), HTTP_UPSTREAM_BAD_FIELD);
    CHECK_EQ_INT(status(OK "X-A: 1\r\n\t2\r\n\r\n"), HTTP_UPSTREAM_BAD_FIELD);
}

TEST(whitespace_before_the_colon_is_refused)
{
    CHECK_EQ_INT(status(OK "Content-Length : 5\r\n\r\n"), HTTP_UPSTREAM_BAD_FIELD);
    CHECK_EQ_INT(status(OK "Content-Length\t: 5\r\n\r\n"), HTTP_UPSTREAM_BAD_FIELD);
}

TEST(field_line_without_colon_or_name_is_refused)
{
    CHECK_EQ_INT(status(OK "NoColon\r\n\r\n"), HTTP_UPSTREAM_BAD_FIELD);
    CHECK_EQ_INT(status(OK ": value\r\n\r\n"), HTTP_UPSTREAM_BAD_FIELD);
    CHECK_EQ_INT(status(OK "Bad(Name): 1\r\n\r\n"), HTTP_UPSTREAM_BAD_FIELD);
}

TEST(a_bare_lf_ends_a_line_as_nginx_takes_it)
{
    struct http_response_head head;
    const char *lf_only = "HTTP/1.1 200 OK\nContent-Length: 2\nX-A: 1\n\nok";
    CHECK_EQ_INT(parse(lf_only, &head), (int)strlen(lf_only) - 2);
    CHECK_EQ_INT((int)head.n_headers, 2);
    CHECK_EQ_INT((int)head.headers[1].value.len, 1);
    CHECK_EQ_INT((int)head.content_length, 2);
    const char *mixed = "HTTP/1.1 200\nContent-Length: 0\r\n\n";
    CHECK_EQ_INT(status(mixed), (int)strlen(mixed));
    CHECK_EQ_INT(status(OK "Content-Length: 0\n\r\n"), (int)strlen(OK) + 20);
}

TEST(bare_cr_is_refused_in_an_ended_or_unfinished_line)
{
    CHECK_EQ_INT(status(OK "X-A: 1\r2\r\nContent-Length: 0\r\n\r\n"), HTTP_UPSTREAM_BAD_LINE_END);
    CHECK_EQ_INT(status(OK "X-A: 1\r2"), HTTP_UPSTREAM_BAD_LINE_END);
    CHECK_EQ_INT(status("HTTP/1.1 200 O\rK\r\n\r\n"), HTTP_UPSTREAM_BAD_LINE_END);
}

TEST(control_bytes_in_a_field_value_are_refused)
{
    CHECK_EQ_INT(STATUS_LIT(OK "X-A: a\0b\r\n\r\n"), HTTP_UPSTREAM_BAD_FIELD);
    CHECK_EQ_INT(status(OK "X-A: a\x1b[31mb\r\n\r\n"), HTTP_UPSTREAM_BAD_FIELD);
    CHECK_EQ_INT(status(OK "X-A: a\x7f\r\n\r\n"), HTTP_UPSTREAM_BAD_FIELD);
}

TEST(more_fields_than_max_headers_is_too_large)
{
    struct http_limits lim = {.max_header_bytes = 8192, .max_headers = 2};
    struct http_response_head h;
    const char *two = OK "A: 1\r\nB: 2\r\n\r\n", *three = OK "A: 1\r\nB: 2\r\nC: 3\r\n\r\n";
    CHECK(http_parse_response(two, strlen(two), &lim, HTTP_METHOD_GET, &h) > 0);
    CHECK_EQ_INT(http_parse_response(three, strlen(three), &lim, HTTP_METHOD_GET, &h),
                 HTTP_UPSTREAM_TOO_LARGE);
}

TEST(max_headers_above_the_array_is_capped_at_its_size)
{
    struct http_limits lim = {.max_header_bytes = 1 << 16, .max_headers = 1000};
    char buf[4096];
    size_t n = (size_t)snprintf(buf, sizeof buf, OK);
    for (int i = 0; i < HTTP_MAX_HEADERS + 1; i++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "X-%d: v\r\n", i);
    n += (size_t)snprintf(buf + n, sizeof buf - n, "\r\n");
    struct http_response_head h;
    CHECK_EQ_INT(http_parse_response(buf, n, &lim, HTTP_METHOD_GET, &h),
                 HTTP_UPSTREAM_TOO_LARGE);
}

TEST(head_longer_than_max_header_bytes_is_too_large)
{
    const char *s = OK "Content-Length: 0\r\n\r\n";
    size_t n = strlen(s);
    struct http_limits exact = {.max_header_bytes = n, .max_headers = 64};
    struct http_limits short_by_one = {.max_header_bytes = n - 1, .max_headers = 64};
    struct http_response_head h;
    CHECK_EQ_INT(http_parse_response(s, n, &exact, HTTP_METHOD_GET, &h), n);
    CHECK_EQ_INT(http_parse_response(s, n, &short_by_one, HTTP_METHOD_GET, &h),
                 HTTP_UPSTREAM_TOO_LARGE);
    /* up to the limit, a head that has not ended may still end */
    CHECK_EQ_INT(http_parse_response(s, n - 1, &short_by_one, HTTP_METHOD_GET, &h), 0);
}

/* --- framing -------------------------------------------------------------------------- */

TEST(content_length_frames_the_body)
{
    struct http_response_head h;
    CHECK(parse(OK "Content-Length: 1234567890123\r\n\r\n", &h) > 0);
    CHECK_EQ_INT(h.framing, HTTP_BODY_LENGTH);
    CHECK_EQ_INT(h.content_length, 1234567890123LL);
    CHECK(h.has_content_length && h.keep_alive);
}

TEST(content_length_zero_is_an_empty_framed_body)
{
    struct http_response_head h;
    CHECK(parse(OK "Content-Length: 0\r\n\r\n", &h) > 0);
    CHECK_EQ_INT(h.framing, HTTP_BODY_LENGTH);
    CHECK_EQ_INT(h.content_length, 0);
    CHECK(h.keep_alive);
}

TEST(no_framing_field_reads_until_close_and_is_not_kept_alive)
{
    struct http_response_head h;
    CHECK(parse(OK "Content-Type: text/plain\r\n\r\n", &h) > 0);
    CHECK_EQ_INT(h.framing, HTTP_BODY_CLOSE);
    CHECK(!h.keep_alive);
}

TEST(chunked_transfer_encoding_frames_the_body)
{
    struct http_response_head h;
    CHECK(parse(OK "Transfer-Encoding: Chunked\r\n\r\n", &h) > 0);
    CHECK_EQ_INT(h.framing, HTTP_BODY_CHUNKED);
    CHECK(h.keep_alive && !h.other_codings && !h.te_and_length);
}

TEST(chunked_as_the_final_coding_after_another_is_chunked_with_other_codings)
{
    struct http_response_head h;
    CHECK(parse(OK "Transfer-Encoding: gzip, chunked\r\n\r\n", &h) > 0);
    CHECK_EQ_INT(h.framing, HTTP_BODY_CHUNKED);
    CHECK(h.other_codings && h.keep_alive);
}

TEST(transfer_encoding_fields_form_one_list)
{
    struct http_response_head h;
    CHECK(parse(OK "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n", &h) > 0);
    CHECK_EQ_INT(h.framing, HTTP_BODY_CHUNKED);
    CHECK(parse(OK "Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n", &h) > 0);
    CHECK_EQ_INT(h.framing, HTTP_BODY_CLOSE);
}

TEST(final_coding_other_than_chunked_reads_until_close)
{
    struct http_response_head h;
    CHECK(parse(OK "Transfer-Encoding: gzip\r\n\r\n", &h) > 0);
    CHECK_EQ_INT(h.framing, HTTP_BODY_CLOSE);
    CHECK(h.other_codings && !h.keep_alive);
    CHECK(parse(OK "Transfer-Encoding: chunked, gzip\r\n\r\n", &h) > 0);
    CHECK_EQ_INT(h.framing, HTTP_BODY_CLOSE);
    CHECK(!h.keep_alive);
}

TEST(transfer_encoding_wins_over_content_length_and_ends_keep_alive)
{
    struct http_response_head h;
    CHECK(parse(OK "Content-Length: 10\r\nTransfer-Encoding: chunked\r\n\r\n", &h) > 0);
    CHECK_EQ_INT(h.framing, HTTP_BODY_CHUNKED);
    CHECK(h.te_and_length && !h.keep_alive);
    CHECK(parse(OK "Transfer-Encoding: chunked\r\nContent-Length: 10\r\n\r\n", &h) > 0);
    CHECK_EQ_INT(h.framing, HTTP_BODY_CHUNKED);
    CHECK(h.te_and_length && !h.keep_alive);
}

TEST(chunked_applied_twice_is_refused)
{
    CHECK_EQ_INT(status(OK "Transfer-Encoding: chunked, chunked\r\n\r\n"),
                 HTTP_UPSTREAM_BAD_TRANSFER_ENCODING);
    CHECK_EQ_INT(status(OK "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"),
                 HTTP_UPSTREAM_BAD_TRANSFER_ENCODING);
}

TEST(empty_transfer_encoding_is_refused)
{
    CHECK_EQ_INT(status(OK "Transfer-Encoding: \r\n\r\n"), HTTP_UPSTREAM_BAD_TRANSFER_ENCODING);
    CHECK_EQ_INT(status(OK "Transfer-Encoding: ,\r\n\r\n"), HTTP_UPSTREAM_BAD_TRANSFER_ENCODING);
}

TEST(transfer_coding_that_is_not_a_token_is_refused)
{
    CHECK_EQ_INT(status(OK "Transfer-Encoding: chunked;x=1\r\n\r\n"),
                 HTTP_UPSTREAM_BAD_TRANSFER_ENCODING);
    CHECK_EQ_INT(status(OK "Transfer-Encoding: \"chunked\"\r\n\r\n"),
                 HTTP_UPSTREAM_BAD_TRANSFER_ENCODING);
}

TEST(transfer_encoding_in_http_1_0_is_refused)
{
    CHECK_EQ_INT(status("HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"),
                 HTTP_UPSTREAM_BAD_TRANSFER_ENCODING);
}

/* RFC 9110 section 8.6 lets a recipient accept "5, 5"; nginx's upstream module refuses any
 * value that is not one number, and any second Content-Length. So do we: see the decisions
 * at the top of http_upstream.c. */
TEST(content_length_list_of_identical_values_is_refused)
{
    CHECK_EQ_INT(status(OK "Content-Length: 5, 5\r\n\r\nhello"),
                 HTTP_UPSTREAM_BAD_CONTENT_LENGTH);
}

TEST(repeated_content_length_field_is_refused_even_with_the_same_value)
{
    CHECK_EQ_INT(status(OK "Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello"),
                 HTTP_UPSTREAM_BAD_CONTENT_LENGTH);
}

TEST(differing_content_lengths_are_refused)
{
    CHECK_EQ_INT(status(OK "Content-Length: 5\r\nContent-Length: 6\r\n\r\n"),
                 HTTP_UPSTREAM_BAD_CONTENT_LENGTH);
    CHECK_EQ_INT(status(OK "Content-Length: 5, 6\r\n\r\n"), HTTP_UPSTREAM_BAD_CONTENT_LENGTH);
}

TEST(malformed_content_length_is_refused)
{
    static const char *const bad[] = {
        "", "-1", "+5", "5a", "0x10", "5 5", "1.0", "18446744073709551616",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char s[128];
        snprintf(s, sizeof s, OK "Content-Length: %s\r\n\r\n", bad[i]);
        CHECK_EQ_INT(status(s), HTTP_UPSTREAM_BAD_CONTENT_LENGTH);
    }
}

TEST(largest_content_length_is_accepted)
{
    struct http_response_head h;
    CHECK(parse(OK "Content-Length: 18446744073709551615\r\n\r\n", &h) > 0);
    CHECK(h.content_length == UINT64_MAX);
}

TEST(answer_to_head_has_no_body_whatever_it_says)
{
    struct http_response_head h;
    CHECK(parse_method(OK "Content-Length: 500\r\n\r\n", HTTP_METHOD_HEAD, &h) > 0);
    CHECK_EQ_INT(h.framing, HTTP_BODY_NONE);
    CHECK(h.has_content_length && h.content_length == 500 && h.keep_alive);
    CHECK(parse_method(OK "Transfer-Encoding: chunked\r\n\r\n", HTTP_METHOD_HEAD, &h) > 0);
    CHECK_EQ_INT(h.framing, HTTP_BODY_NONE);
    CHECK(parse_method(OK "\r\n", HTTP_METHOD_HEAD, &h) > 0);
    CHECK_EQ_INT(h.framing, HTTP_BODY_NONE);
    CHECK(h.keep_alive);
}

TEST(status_204_has_no_body_and_its_content_length_is_ignored)
{
    struct http_response_head h;
    CHECK(parse("HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n", &h) > 0);
    CHECK_EQ_INT(h.framing, HTTP_BODY_NONE);
    CHECK(h.keep_alive);
}

TEST(status_304_has_no_body_and_keeps_its_content_length)
{
    struct http_response_head h;
    CHECK(parse("HTTP/1.1 304 Not Modified\r\nContent-Length: 7\r\n\r\n", &h) > 0);
    CHECK_EQ_INT(h.framing, HTTP_BODY_NONE);
    CHECK(h.has_content_length && h.content_length == 7 && h.keep_alive);
}

TEST(malformed_content_length_is_refused_even_where_it_does_not_frame)
{
    CHECK_EQ_INT(status("HTTP/1.1 304 Not Modified\r\nContent-Length: 7, 7\r\n\r\n"),
                 HTTP_UPSTREAM_BAD_CONTENT_LENGTH);
}

TEST(informational_responses_have_no_body)
{
    struct http_response_head h;
    CHECK(parse("HTTP/1.1 100 Continue\r\nContent-Length: 9\r\n\r\n", &h) > 0);
    CHECK_EQ_INT(h.framing, HTTP_BODY_NONE);
    CHECK(parse("HTTP/1.1 102 Processing\r\n\r\n", &h) > 0);
    CHECK_EQ_INT(h.framing, HTTP_BODY_NONE);
}

TEST(success_answer_to_connect_has_no_body_but_a_refusal_does)
{
    struct http_response_head h;
    CHECK(parse_method("HTTP/1.1 200 Connection established\r\n\r\n", HTTP_METHOD_CONNECT,
                       &h) > 0);
    CHECK_EQ_INT(h.framing, HTTP_BODY_NONE);
    CHECK(parse_method("HTTP/1.1 407 Auth\r\nContent-Length: 3\r\n\r\n", HTTP_METHOD_CONNECT,
                       &h) > 0);
    CHECK_EQ_INT(h.framing, HTTP_BODY_LENGTH);
}

/* --- persistence ---------------------------------------------------------------------- */

TEST(http_1_1_response_is_kept_alive_by_default)
{
    struct http_response_head h;
    CHECK(parse(OK "Content-Length: 0\r\n\r\n", &h) > 0);
    CHECK(h.keep_alive);
}

TEST(connection_close_ends_keep_alive)
{
    struct http_response_head h;
    CHECK(parse(OK "Connection: close\r\nContent-Length: 0\r\n\r\n", &h) > 0);
    CHECK(!h.keep_alive);
    CHECK(!h.connection_names_fields);
}

TEST(http_1_0_response_is_kept_alive_only_when_it_says_so)
{
    struct http_response_head h;
    CHECK(parse("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", &h) > 0);
    CHECK(!h.keep_alive);
    CHECK(parse("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n", &h) >
          0);
    CHECK(h.keep_alive);
}

TEST(connection_options_are_a_case_insensitive_list_over_fields)
{
    struct http_response_head h;
    CHECK(parse("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nConnection: x, CLOSE\r\n"
                "Content-Length: 0\r\n\r\n",
                &h) > 0);
    CHECK(!h.keep_alive);
}

TEST(connection_naming_other_fields_is_recorded)
{
    struct http_response_head h;
    CHECK(parse(OK "Connection: keep-alive, X-Secret\r\nX-Secret: 1\r\nContent-Length: 0\r\n\r\n",
                &h) > 0);
    CHECK(h.connection_names_fields && h.keep_alive);
    CHECK(parse(OK "Connection: keep-alive, close\r\nContent-Length: 0\r\n\r\n", &h) > 0);
    CHECK(!h.connection_names_fields);
}

TEST(connection_option_that_is_not_a_token_is_refused)
{
    CHECK_EQ_INT(status(OK "Connection: keep alive\r\nContent-Length: 0\r\n\r\n"),
                 HTTP_UPSTREAM_BAD_CONNECTION);
}

/* --- 1xx ------------------------------------------------------------------------------ */

TEST(continue_then_final_response_in_one_buffer_are_two_heads_in_sequence)
{
    const char *s = "HTTP/1.1 100 Continue\r\n\r\n"
                    "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok";
    struct http_response_head h;
    int n = parse(s, &h);
    CHECK_EQ_INT(n, strlen("HTTP/1.1 100 Continue\r\n\r\n"));
    CHECK_EQ_INT(h.status, 100);
    int m = parse(s + n, &h);
    CHECK_EQ_INT(m, strlen(s + n) - 2);
    CHECK_EQ_INT(h.status, 201);
    CHECK_EQ_INT(h.framing, HTTP_BODY_LENGTH);
    CHECK_EQ_INT(h.content_length, 2);
}

TEST(early_hints_is_a_complete_head_with_its_fields)
{
    struct http_response_head h;
    CHECK(parse("HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n", &h) > 0);
    CHECK_EQ_INT(h.status, 103);
    CHECK_EQ_INT(h.n_headers, 1);
    CHECK_EQ_INT(h.framing, HTTP_BODY_NONE);
}

TEST(switching_protocols_records_the_upgrade_and_ends_http_on_the_connection)
{
    struct http_response_head h;
    CHECK(parse("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                "Connection: Upgrade\r\nSec-WebSocket-Accept: x\r\n\r\n",
                &h) > 0);
    CHECK_EQ_INT(h.status, 101);
    CHECK_SLICE(h.upgrade, "websocket");
    CHECK(h.connection_upgrade && !h.connection_names_fields);
    CHECK_EQ_INT(h.framing, HTTP_BODY_NONE);
    CHECK(!h.keep_alive);
}

/* --- hostile input -------------------------------------------------------------------- */

static const char *const valid_heads[] = {
    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
    "HTTP/1.0 404 Not Found\r\nServer: x\r\n\r\n",
    "HTTP/1.1 100 Continue\r\n\r\n",
    "HTTP/1.1 204\r\n\r\n",
    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
};

/* An exact-size copy, so that a sanitizer build catches any read past len. */
static char *copy_of(const char *s, size_t len)
{
    char *p = malloc(len ? len : 1);
    if (p) memcpy(p, s, len);
    return p;
}

TEST(every_prefix_of_a_valid_head_is_incomplete)
{
    for (size_t k = 0; k < sizeof valid_heads / sizeof valid_heads[0]; k++) {
        size_t n = strlen(valid_heads[k]);
        for (size_t i = 0; i < n; i++) {
            char *p = copy_of(valid_heads[k], i);
            int rc = status_len(p, i);
            free(p);
            CHECK_EQ_INT(rc, 0);
        }
        CHECK_EQ_INT(status(valid_heads[k]), n);
    }
}

static bool same_head(const struct http_response_head *a, const struct http_response_head *b)
{
    if (a->status != b->status || a->version_minor != b->version_minor ||
        a->n_headers != b->n_headers || a->framing != b->framing ||
        a->content_length != b->content_length || a->keep_alive != b->keep_alive ||
        a->header_bytes != b->header_bytes || a->reason.len != b->reason.len ||
        a->upgrade.len != b->upgrade.len)
        return false;
    for (unsigned i = 0; i < a->n_headers; i++)
        if (a->headers[i].name.len != b->headers[i].name.len ||
            a->headers[i].value.len != b->headers[i].value.len)
            return false;
    return true;
}

/* The caller re-parses the growing buffer: whichever byte the first read ended at, the
 * head it ends up with is the same. */
TEST(head_split_at_every_byte_parses_the_same)
{
    const char *s = "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked"
                    "\r\nConnection: keep-alive, X-A\r\nX-A: 1\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
    size_t len = strlen(s);
    struct http_response_head whole, first, second;
    int rc = parse(s, &whole);
    CHECK(rc > 0);
    for (size_t i = 0; i <= len; i++) {
        char *buf = malloc(len);
        CHECK(buf != NULL);
        memcpy(buf, s, i);
        int a = parse_method_len(buf, i, HTTP_METHOD_GET, &first);
        memcpy(buf + i, s + i, len - i); /* the rest arrives */
        int b = parse_method_len(buf, len, HTTP_METHOD_GET, &second);
        free(buf);
        CHECK(a == 0 || (a == rc && same_head(&first, &whole)));
        CHECK_EQ_INT(b, rc);
        CHECK(same_head(&second, &whole));
    }
}

TEST(a_refusal_found_in_a_prefix_is_the_refusal_of_the_whole)
{
    static const char *const bad[] = {
        "HTTP/1.1 200 OK\r\nX-A: 1\r2\r\n\r\n",   "HTTP/2.0 200 OK\r\n\r\n",
        "HTTP/1.1 2000 OK\r\n\r\n",              "HTTP/1.1 200 OK\r\nA : 1\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
        "HTTP/1.1 200 OK\nX: 1\r2\n\r\n",
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        size_t n = strlen(bad[k]);
        int whole = status(bad[k]);
        CHECK(whole < 0);
        for (size_t i = 0; i < n; i++) {
            int rc = status_len(bad[k], i);
            CHECK(rc == 0 || rc == whole);
        }
    }
}

TEST(garbage_is_refused_at_its_first_wrong_byte)
{
    CHECK_EQ_INT(status_len("<html>", 1), HTTP_UPSTREAM_BAD_STATUS_LINE);
    CHECK_EQ_INT(status_len("HTTX", 4), HTTP_UPSTREAM_BAD_STATUS_LINE);
    CHECK_EQ_INT(status_len("HTTP/1.1 200!", 13), HTTP_UPSTREAM_BAD_STATUS_LINE);
}

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

TEST(sixty_four_kib_of_garbage_is_refused_quickly)
{
    size_t n = 64 * 1024;
    char *g = malloc(n);
    CHECK(g != NULL);
    for (size_t i = 0; i < n; i++)
        g[i] = (char)(i * 2654435761u >> 13);
    g[0] = 'X';
    double t0 = seconds_now();
    int rc = status_len(g, n);
    for (int i = 0; i < 999 && rc == HTTP_UPSTREAM_BAD_STATUS_LINE; i++)
        rc = status_len(g, n);
    double spent = seconds_now() - t0;
    free(g);
    CHECK_EQ_INT(rc, HTTP_UPSTREAM_BAD_STATUS_LINE);
    CHECK(spent < 0.5); /* a thousand refusals, each at the first byte */
}

TEST(sixty_four_kib_head_that_never_ends_is_too_large_quickly)
{
    size_t n = 64 * 1024;
    char *g = malloc(n);
    CHECK(g != NULL);
    memset(g, 'a', n);
    memcpy(g, OK "X-Long: ", strlen(OK "X-Long: "));
    double t0 = seconds_now();
    int rc = status_len(g, n);
    for (int i = 0; i < 999 && rc == HTTP_UPSTREAM_TOO_LARGE; i++)
        rc = status_len(g, n);
    double spent = seconds_now() - t0;
    free(g);
    CHECK_EQ_INT(rc, HTTP_UPSTREAM_TOO_LARGE);
    CHECK(spent < 2.0); /* the scan stops at max_header_bytes (8 KiB), not at 64 KiB */
}

TEST(body_bytes_after_the_head_are_not_read)
{
    const char *s = OK "Content-Length: 3\r\n\r\n\x01\n\r";
    struct http_response_head h;
    CHECK_EQ_INT(parse(s, &h), strlen(s) - 3);
}
