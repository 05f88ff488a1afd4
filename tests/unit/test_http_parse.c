/* test_http_parse.c — the behaviour of http_parse.h, one rule a test. */
#define TEST_MAIN
#include "test.h"

#include "http_parse.h"

#include <stdint.h>

static const struct http_limits limits = {.max_header_bytes = 8192, .max_headers = 64};

static int parse_len(const char *s, size_t len, struct http_request *req)
{
    return http_parse_request(s, len, &limits, req);
}

static int parse(const char *s, struct http_request *req)
{
    return parse_len(s, strlen(s), req);
}

static int status_len(const char *s, size_t len)
{
    struct http_request req;
    return parse_len(s, len, &req);
}

static int status(const char *s)
{
    return status_len(s, strlen(s));
}

static int status_limited(const char *s, size_t max_bytes, unsigned max_headers)
{
    struct http_limits lim = {.max_header_bytes = max_bytes, .max_headers = max_headers};
    struct http_request r;
    return http_parse_request(s, strlen(s), &lim, &r);
}

/* For requests holding NUL bytes: the length of a string literal. */
#define STATUS_LIT(lit) status_len((lit), sizeof(lit) - 1)

static struct http_slice sl(const char *s)
{
    return (struct http_slice){s, strlen(s)};
}

#define CHECK_STR(got, want) CHECK_SLICE(sl(got), want)

#define HOST "Host: example.com\r\n"

/* --- valid requests ------------------------------------------------------------------- */

TEST(get_request_fields_are_parsed)
{
    const char *s = "GET /index.html?x=1&y HTTP/1.1\r\n" HOST "User-Agent: t/1\r\n\r\n";
    struct http_request r;
    CHECK_EQ_INT(parse(s, &r), strlen(s));
    CHECK_EQ_INT(r.method, HTTP_METHOD_GET);
    CHECK_SLICE(r.method_name, "GET");
    CHECK_SLICE(r.target, "/index.html?x=1&y");
    CHECK_SLICE(r.path, "/index.html");
    CHECK_SLICE(r.query, "x=1&y");
    CHECK(r.has_query);
    CHECK_EQ_INT(r.version_minor, 1);
    CHECK_SLICE(r.host, "example.com");
    CHECK_SLICE(r.user_agent, "t/1");
    CHECK_EQ_INT(r.n_headers, 2);
    CHECK_SLICE(r.headers[0].name, "Host");
    CHECK_SLICE(r.headers[0].value, "example.com");
    CHECK_SLICE(r.headers[1].name, "User-Agent");
    CHECK_EQ_INT(r.framing, HTTP_BODY_NONE);
    CHECK(r.keep_alive);
    CHECK(!r.expect_continue);
    CHECK_EQ_INT(r.header_bytes, strlen(s));
}

TEST(head_request_is_parsed)
{
    struct http_request r;
    const char *s = "HEAD /a/b HTTP/1.1\r\n" HOST "\r\n";
    CHECK_EQ_INT(parse(s, &r), strlen(s));
    CHECK_EQ_INT(r.method, HTTP_METHOD_HEAD);
    CHECK_SLICE(r.path, "/a/b");
    CHECK(!r.has_query);
    CHECK_EQ_INT(r.query.len, 0);
}

TEST(post_with_content_length_returns_head_size_not_body)
{
    const char *head = "POST /form HTTP/1.1\r\n" HOST "Content-Type: text/plain\r\n"
                       "Content-Length: 5\r\n\r\n";
    char s[256];
    snprintf(s, sizeof s, "%shello", head);
    struct http_request r;
    CHECK_EQ_INT(parse(s, &r), strlen(head));
    CHECK_EQ_INT(r.method, HTTP_METHOD_POST);
    CHECK_EQ_INT(r.framing, HTTP_BODY_LENGTH);
    CHECK_EQ_INT(r.content_length, 5);
    CHECK_SLICE(r.content_type, "text/plain");
}

TEST(every_known_method_maps_to_its_enum)
{
    static const struct {
        const char *line;
        enum http_method m;
    } cases[] = {
        {"GET / HTTP/1.1\r\n", HTTP_METHOD_GET},
        {"HEAD / HTTP/1.1\r\n", HTTP_METHOD_HEAD},
        {"POST / HTTP/1.1\r\n", HTTP_METHOD_POST},
        {"PUT / HTTP/1.1\r\n", HTTP_METHOD_PUT},
        {"DELETE / HTTP/1.1\r\n", HTTP_METHOD_DELETE},
        {"CONNECT example.com:443 HTTP/1.1\r\n", HTTP_METHOD_CONNECT},
        {"OPTIONS / HTTP/1.1\r\n", HTTP_METHOD_OPTIONS},
        {"TRACE / HTTP/1.1\r\n", HTTP_METHOD_TRACE},
        {"PATCH / HTTP/1.1\r\n", HTTP_METHOD_PATCH},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char s[128];
        snprintf(s, sizeof s, "%s" HOST "\r\n", cases[i].line);
        struct http_request r;
        CHECK(parse(s, &r) > 0);
        CHECK_EQ_INT(r.method, cases[i].m);
    }
}

TEST(unknown_method_token_is_parsed_fully_as_unknown)
{
    struct http_request r;
    const char *s = "BREW /pot HTTP/1.1\r\n" HOST "\r\n";
    CHECK_EQ_INT(parse(s, &r), strlen(s));
    CHECK_EQ_INT(r.method, HTTP_METHOD_UNKNOWN);
    CHECK_SLICE(r.method_name, "BREW");
    CHECK_SLICE(r.path, "/pot");
}

TEST(method_is_case_sensitive)
{
    struct http_request r;
    CHECK(parse("get / HTTP/1.1\r\n" HOST "\r\n", &r) > 0);
    CHECK_EQ_INT(r.method, HTTP_METHOD_UNKNOWN);
}

TEST(method_may_use_any_tchar)
{
    struct http_request r;
    CHECK(parse("X-!#$%&'*+.^_`|~1 / HTTP/1.1\r\n" HOST "\r\n", &r) > 0);
    CHECK_EQ_INT(r.method, HTTP_METHOD_UNKNOWN);
}

TEST(empty_query_after_question_mark_sets_has_query)
{
    struct http_request r;
    CHECK(parse("GET /a? HTTP/1.1\r\n" HOST "\r\n", &r) > 0);
    CHECK(r.has_query);
    CHECK_SLICE(r.path, "/a");
    CHECK_EQ_INT(r.query.len, 0);
}

TEST(query_splits_at_first_question_mark)
{
    struct http_request r;
    CHECK(parse("GET /a?b?c=/d HTTP/1.1\r\n" HOST "\r\n", &r) > 0);
    CHECK_SLICE(r.path, "/a");
    CHECK_SLICE(r.query, "b?c=/d");
}

TEST(field_value_surrounding_whitespace_is_trimmed)
{
    struct http_request r;
    CHECK(parse("GET / HTTP/1.1\r\n" HOST "X-A: \t a \t b \t\r\n\r\n", &r) > 0);
    CHECK_SLICE(r.headers[1].value, "a \t b");
}

TEST(field_value_may_be_empty)
{
    struct http_request r;
    CHECK(parse("GET / HTTP/1.1\r\n" HOST "X-Empty:\r\nX-Blank:  \r\n\r\n", &r) > 0);
    CHECK_EQ_INT(r.n_headers, 3);
    CHECK_EQ_INT(r.headers[1].value.len, 0);
    CHECK_EQ_INT(r.headers[2].value.len, 0);
}

TEST(field_value_allows_obs_text)
{
    struct http_request r;
    CHECK(parse("GET / HTTP/1.1\r\n" HOST "X-A: caf\xc3\xa9 \x80\xff\r\n\r\n", &r) > 0);
    CHECK_SLICE(r.headers[1].value, "caf\xc3\xa9 \x80\xff");
}

TEST(recognised_fields_are_found_case_insensitively)
{
    struct http_request r;
    const char *s = "GET / HTTP/1.1\r\n"
                    "hOsT: example.com\r\n"
                    "IF-NONE-MATCH: \"e1\"\r\n"
                    "if-modified-since: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
                    "If-Match: \"e2\"\r\n"
                    "If-Unmodified-Since: Mon, 07 Nov 1994 08:49:37 GMT\r\n"
                    "range: bytes=0-1\r\n"
                    "If-Range: \"e3\"\r\n"
                    "user-agent: ua\r\n"
                    "REFERER: http://r/\r\n"
                    "Accept-Encoding: gzip, br\r\n"
                    "Content-Type: text/html\r\n"
                    "\r\n";
    CHECK(parse(s, &r) > 0);
    CHECK_SLICE(r.host, "example.com");
    CHECK_SLICE(r.if_none_match, "\"e1\"");
    CHECK_SLICE(r.if_modified_since, "Sun, 06 Nov 1994 08:49:37 GMT");
    CHECK_SLICE(r.if_match, "\"e2\"");
    CHECK_SLICE(r.if_unmodified_since, "Mon, 07 Nov 1994 08:49:37 GMT");
    CHECK_SLICE(r.range, "bytes=0-1");
    CHECK_SLICE(r.if_range, "\"e3\"");
    CHECK_SLICE(r.user_agent, "ua");
    CHECK_SLICE(r.referer, "http://r/");
    CHECK_SLICE(r.accept_encoding, "gzip, br");
    CHECK_SLICE(r.content_type, "text/html");
    CHECK_EQ_INT(r.n_headers, 11);
}

/* A name as long as a recognised one, differing in any one byte (first, middle, last),
 * is someone else's field: none of them may set a slot or change the framing. */
TEST(names_one_byte_off_a_recognised_name_are_not_interpreted)
{
    static const char *const names[] = {
        "host", "content-length", "transfer-encoding", "connection", "expect",
        "if-none-match", "if-modified-since", "if-match", "if-unmodified-since", "range",
        "if-range", "content-type", "user-agent", "referer", "accept-encoding",
    };
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        size_t n = strlen(names[k]);
        size_t at[] = {0, n / 2, n - 1};
        for (size_t j = 0; j < 3; j++) {
            char name[32], req[128];
            memcpy(name, names[k], n + 1);
            name[at[j]] = name[at[j]] == 'x' ? 'y' : 'x';
            snprintf(req, sizeof req, "GET / HTTP/1.1\r\n" HOST "%s: 1\r\n\r\n", name);
            struct http_request r;
            CHECK(parse(req, &r) > 0);
            CHECK_SLICE(r.host, "example.com");
            CHECK_EQ_INT(r.framing, HTTP_BODY_NONE);
            CHECK(r.keep_alive && !r.expect_continue);
            CHECK(r.range.len == 0 && r.if_match.len == 0 && r.if_range.len == 0);
            CHECK(r.if_none_match.len == 0 && r.if_modified_since.len == 0);
            CHECK(r.if_unmodified_since.len == 0 && r.content_type.len == 0);
            CHECK(r.user_agent.len == 0 && r.referer.len == 0 && r.accept_encoding.len == 0);
            CHECK_EQ_INT(r.n_headers, 2);
        }
    }
}

TEST(absent_fields_have_zero_length)
{
    struct http_request r;
    CHECK(parse("GET / HTTP/1.1\r\n" HOST "\r\n", &r) > 0);
    CHECK_EQ_INT(r.range.len, 0);
    CHECK_EQ_INT(r.if_none_match.len, 0);
    CHECK_EQ_INT(r.content_type.len, 0);
    CHECK_EQ_INT(r.content_length, 0);
}

TEST(unrecognised_fields_are_stored_in_order)
{
    struct http_request r;
    CHECK(parse("GET / HTTP/1.1\r\nX-One: 1\r\n" HOST "X-Two: 2\r\n\r\n", &r) > 0);
    CHECK_EQ_INT(r.n_headers, 3);
    CHECK_SLICE(r.headers[0].name, "X-One");
    CHECK_SLICE(r.headers[2].name, "X-Two");
    CHECK_SLICE(r.headers[2].value, "2");
}

TEST(find_header_is_case_insensitive)
{
    struct http_request r;
    CHECK(parse("GET / HTTP/1.1\r\n" HOST "X-Custom: v\r\n\r\n", &r) > 0);
    const struct http_header *h = http_find_header(&r, "x-CUSTOM");
    CHECK(h != NULL);
    CHECK_SLICE(h->value, "v");
    CHECK(http_find_header(&r, "X-Custo") == NULL);
    CHECK(http_find_header(&r, "X-Customs") == NULL);
}

TEST(slice_eq_ignores_case_of_the_slice)
{
    CHECK(http_slice_eq(sl("Keep-ALIVE"), "keep-alive"));
    CHECK(!http_slice_eq(sl("keep-alive2"), "keep-alive"));
    CHECK(!http_slice_eq(sl("keep"), "keep-alive"));
    CHECK(http_slice_eq((struct http_slice){NULL, 0}, ""));
}

TEST(repeated_user_agent_keeps_the_first)
{
    struct http_request r;
    CHECK(parse("GET / HTTP/1.1\r\n" HOST "User-Agent: a\r\nUser-Agent: b\r\n\r\n", &r) > 0);
    CHECK_SLICE(r.user_agent, "a");
}

TEST(repeated_range_or_condition_field_is_400)
{
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\n" HOST "Range: bytes=0-1\r\nRange: bytes=2-3\r\n\r\n"),
                 -400);
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\n" HOST "If-None-Match: \"a\"\r\n"
                        "If-None-Match: \"b\"\r\n\r\n"),
                 -400);
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\n" HOST "If-Range: \"a\"\r\nif-range: \"a\"\r\n\r\n"),
                 -400);
}

/* --- incomplete input and leading empty lines --------------------------------------- */

TEST(incomplete_head_returns_0)
{
    CHECK_EQ_INT(status(""), 0);
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\n" HOST), 0);
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\n" HOST "\r"), 0);
}

/* Every proper prefix of the head is incomplete, and every longer buffer (the head plus
 * body bytes) returns the same size. Returns -1, or the first length that disagrees. */
static long first_bad_prefix(const char *s, size_t head_len)
{
    size_t n = strlen(s);
    for (size_t k = 0; k <= n; k++) {
        int want = k < head_len ? 0 : (int)head_len;
        if (status_len(s, k) != want) return (long)k;
    }
    return -1;
}

TEST(every_prefix_of_a_valid_request_is_incomplete)
{
    const char *heads[] = {
        "GET / HTTP/1.1\r\n" HOST "\r\n",
        "\r\n\r\nHEAD /x?y HTTP/1.0\r\n\r\n",
        "POST /up HTTP/1.1\r\n" HOST "Content-Length: 3\r\nConnection: close\r\n\r\n",
        "PUT http://example.com:8080/a HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\n"
        "Expect: 100-continue\r\nX-A: \x80\r\n\r\n",
        "OPTIONS * HTTP/1.1\r\n" HOST "\r\n",
    };
    for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++)
        CHECK_EQ_INT(first_bad_prefix(heads[i], strlen(heads[i])), -1);
}

TEST(every_prefix_with_body_bytes_returns_the_head_size)
{
    const char *head = "POST /up HTTP/1.1\r\n" HOST "Content-Length: 10\r\n\r\n";
    char s[256];
    snprintf(s, sizeof s, "%s0123456789GET / HTTP/1.1\r\n", head);
    CHECK_EQ_INT(first_bad_prefix(s, strlen(head)), -1);
}

TEST(an_error_stays_the_same_error_as_more_bytes_arrive)
{
    const char *s = "GET / HTTP/1.1\r\n" HOST "Bad Name: x\r\nX-A: b\r\n\r\n";
    size_t bad_end = strlen("GET / HTTP/1.1\r\n" HOST "Bad Name: x\r\n");
    for (size_t k = 0; k <= strlen(s); k++)
        CHECK_EQ_INT(status_len(s, k), k < bad_end ? 0 : -400);
}

TEST(leading_empty_lines_are_skipped_and_counted)
{
    struct http_request r;
    const char *s = "\r\n\r\nGET / HTTP/1.1\r\n" HOST "\r\n";
    CHECK_EQ_INT(parse(s, &r), strlen(s));
    CHECK_EQ_INT(r.header_bytes, strlen(s));
    CHECK_EQ_INT(r.method, HTTP_METHOD_GET);
}

TEST(leading_empty_lines_count_toward_the_limit)
{
    CHECK_EQ_INT(status_limited("\r\n\r\n\r\n\r\nGET / HTTP/1.0\r\n\r\n", 8, 8), -414);
}

TEST(leading_bare_lf_is_400)
{
    CHECK_EQ_INT(status("\nGET / HTTP/1.1\r\n" HOST "\r\n"), -400);
}

/* --- line endings --------------------------------------------------------------------- */

TEST(bare_lf_ending_request_line_is_400)
{
    CHECK_EQ_INT(status("GET / HTTP/1.1\n" HOST "\r\n"), -400);
}

TEST(bare_lf_ending_field_line_is_400)
{
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\nHost: example.com\n\r\n"), -400);
}

TEST(bare_lf_as_blank_line_is_400)
{
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\n" HOST "\n"), -400);
}

TEST(bare_cr_in_request_line_is_400)
{
    CHECK_EQ_INT(status("GET /\r HTTP/1.1\r\n" HOST "\r\n"), -400);
}

TEST(bare_cr_in_field_value_is_400)
{
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\n" HOST "X-A: a\rb\r\n\r\n"), -400);
}

TEST(bare_cr_is_400_before_the_head_is_complete)
{
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\nX-A: a\rb"), -400);
}

/* --- bytes that do not belong --------------------------------------------------------- */

TEST(nul_in_method_is_400)
{
    CHECK_EQ_INT(STATUS_LIT("G\0T / HTTP/1.1\r\n" HOST "\r\n"), -400);
}

TEST(control_byte_in_method_is_400)
{
    CHECK_EQ_INT(status("G\x01T / HTTP/1.1\r\n" HOST "\r\n"), -400);
    CHECK_EQ_INT(status("GET\x7f / HTTP/1.1\r\n" HOST "\r\n"), -400);
}

TEST(non_token_byte_in_method_is_400)
{
    CHECK_EQ_INT(status("GE(T / HTTP/1.1\r\n" HOST "\r\n"), -400);
    CHECK_EQ_INT(status("G\xc3\x89T / HTTP/1.1\r\n" HOST "\r\n"), -400);
}

TEST(nul_in_target_is_400)
{
    CHECK_EQ_INT(STATUS_LIT("GET /a\0b HTTP/1.1\r\n" HOST "\r\n"), -400);
}

TEST(control_byte_or_del_in_target_is_400)
{
    CHECK_EQ_INT(status("GET /a\x01 HTTP/1.1\r\n" HOST "\r\n"), -400);
    CHECK_EQ_INT(status("GET /a\x7f HTTP/1.1\r\n" HOST "\r\n"), -400);
}

TEST(byte_above_0x7e_in_target_is_400)
{
    CHECK_EQ_INT(status("GET /caf\xc3\xa9 HTTP/1.1\r\n" HOST "\r\n"), -400);
}

TEST(nul_in_field_name_is_400)
{
    CHECK_EQ_INT(STATUS_LIT("GET / HTTP/1.1\r\n" HOST "X-\0A: b\r\n\r\n"), -400);
}

TEST(control_byte_in_field_name_is_400)
{
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\n" HOST "X-\x01: b\r\n\r\n"), -400);
}

TEST(nul_in_field_value_is_400)
{
    CHECK_EQ_INT(STATUS_LIT("GET / HTTP/1.1\r\n" HOST "X-A: b\0c\r\n\r\n"), -400);
}

TEST(control_byte_or_del_in_field_value_is_400)
{
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\n" HOST "X-A: b\x1b[c\r\n\r\n"), -400);
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\n" HOST "X-A: b\x7f\r\n\r\n"), -400);
}

/* --- every byte, classified as the grammar says ---------------------------------------- */

/* The classes below are written from the RFCs' wording, apart from the parser's tables. */
static bool rfc_digit_or_alpha(int b)
{
    return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z');
}

/* tchar, RFC 9110 section 5.6.2 */
static bool rfc_tchar(int b)
{
    return rfc_digit_or_alpha(b) || (b != 0 && strchr("!#$%&'*+-.^_`|~", b) != NULL);
}

/* unreserved / sub-delims, RFC 3986 section 2.2 and 2.3 */
static bool rfc_reg_name_char(int b)
{
    return rfc_digit_or_alpha(b) || (b != 0 && strchr("-._~!$&'()*+,;=", b) != NULL);
}

/* The status of `before` + byte b + `after`, a request holding b once. */
static int status_with_byte(const char *before, int b, const char *after)
{
    char buf[256];
    size_t n = strlen(before), m = strlen(after);
    memcpy(buf, before, n);
    buf[n] = (char)b;
    memcpy(buf + n + 1, after, m);
    return status_len(buf, n + 1 + m);
}

TEST(method_accepts_exactly_the_tchar_bytes)
{
    for (int b = 0; b < 256; b++) {
        int rc = status_with_byte("G", b, "T / HTTP/1.1\r\n" HOST "\r\n");
        if (rfc_tchar(b) ? rc <= 0 : rc != -400) fprintf(stderr, "  byte 0x%02x\n", b);
        CHECK(rfc_tchar(b) ? rc > 0 : rc == -400);
    }
}

/* ':' is left out: it ends the name, and what follows is a valid value. */
TEST(field_name_accepts_exactly_the_tchar_bytes)
{
    for (int b = 0; b < 256; b++) {
        if (b == ':') continue;
        int rc = status_with_byte("GET / HTTP/1.1\r\n" HOST "X", b, "Y: v\r\n\r\n");
        if (rfc_tchar(b) ? rc <= 0 : rc != -400) fprintf(stderr, "  byte 0x%02x\n", b);
        CHECK(rfc_tchar(b) ? rc > 0 : rc == -400);
    }
}

/* field-vchar, SP and HTAB (RFC 9110 section 5.5), obs-text included. */
TEST(field_value_accepts_vchar_sp_htab_and_obs_text_only)
{
    for (int b = 0; b < 256; b++) {
        bool ok = (b >= 0x21 && b <= 0x7e) || b == ' ' || b == '\t' || b >= 0x80;
        int rc = status_with_byte("GET / HTTP/1.1\r\n" HOST "X-A: a", b, "b\r\n\r\n");
        if (ok ? rc <= 0 : rc != -400) fprintf(stderr, "  byte 0x%02x\n", b);
        CHECK(ok ? rc > 0 : rc == -400);
    }
}

/* Long values are checked a word at a time: a byte must be judged the same wherever it
 * falls in the value, at the start, the middle or the end of a word or of the tail. */
TEST(field_value_byte_is_judged_the_same_at_every_offset_of_a_long_value)
{
    const char *head = "GET / HTTP/1.1\r\n" HOST "X-A: ";
    const char *value = "abcdefghijklmnopqrstuvwxyz"; /* 26: three words and a tail */
    for (size_t at = 0; at < 26; at++) {
        for (int b = 0; b < 256; b++) {
            bool ok = (b >= 0x21 && b <= 0x7e) || b == ' ' || b == '\t' || b >= 0x80;
            char before[128], after[64];
            snprintf(before, sizeof before, "%s%.*s", head, (int)at, value);
            snprintf(after, sizeof after, "%s\r\n\r\n", value + at + 1);
            /* a space or tab at either end is trimmed, not refused: ok either way */
            int rc = status_with_byte(before, b, after);
            if (ok ? rc <= 0 : rc != -400) fprintf(stderr, "  byte 0x%02x at %zu\n", b, at);
            CHECK(ok ? rc > 0 : rc == -400);
        }
    }
}

/* VCHAR (RFC 9112 section 3.2); '#' is a VCHAR, but a fragment is refused on its own. */
TEST(target_accepts_vchar_but_the_fragment_mark)
{
    for (int b = 0; b < 256; b++) {
        bool ok = b >= 0x21 && b <= 0x7e && b != '#';
        int rc = status_with_byte("GET /a", b, "b HTTP/1.1\r\n" HOST "\r\n");
        if (ok ? rc <= 0 : rc != -400) fprintf(stderr, "  byte 0x%02x\n", b);
        CHECK(ok ? rc > 0 : rc == -400);
    }
}

/* reg-name (RFC 3986 section 3.2.2); '%' only starts pct-encoded, tested apart. */
TEST(host_name_accepts_exactly_unreserved_and_sub_delims)
{
    for (int b = 0; b < 256; b++) {
        if (b == '%') continue;
        int rc = status_with_byte("GET / HTTP/1.1\r\nHost: a", b, "b\r\n\r\n");
        if (rfc_reg_name_char(b) ? rc <= 0 : rc != -400) fprintf(stderr, "  byte 0x%02x\n", b);
        CHECK(rfc_reg_name_char(b) ? rc > 0 : rc == -400);
    }
}

TEST(host_name_accepts_pct_encoded_bytes_only_whole)
{
    CHECK(status("GET / HTTP/1.1\r\nHost: a%2Db\r\n\r\n") > 0);
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\nHost: a%2\r\n\r\n"), -400);
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\nHost: a%g0\r\n\r\n"), -400);
}

/* --- request line shape --------------------------------------------------------------- */

TEST(two_spaces_between_method_and_target_is_400)
{
    CHECK_EQ_INT(status("GET  / HTTP/1.1\r\n" HOST "\r\n"), -400);
}

TEST(two_spaces_between_target_and_version_is_400)
{
    CHECK_EQ_INT(status("GET /  HTTP/1.1\r\n" HOST "\r\n"), -400);
}

TEST(tab_as_separator_is_400)
{
    CHECK_EQ_INT(status("GET\t/ HTTP/1.1\r\n" HOST "\r\n"), -400);
    CHECK_EQ_INT(status("GET /\tHTTP/1.1\r\n" HOST "\r\n"), -400);
}

TEST(space_before_method_is_400)
{
    CHECK_EQ_INT(status(" GET / HTTP/1.1\r\n" HOST "\r\n"), -400);
}

TEST(space_after_version_is_400)
{
    CHECK_EQ_INT(status("GET / HTTP/1.1 \r\n" HOST "\r\n"), -400);
}

TEST(request_line_without_version_is_400)
{
    CHECK_EQ_INT(status("GET /\r\n\r\n"), -400);
    CHECK_EQ_INT(status("GET\r\n\r\n"), -400);
}

/* --- version -------------------------------------------------------------------------- */

TEST(http_1_0_sets_minor_0_and_needs_no_host)
{
    struct http_request r;
    CHECK(parse("GET / HTTP/1.0\r\n\r\n", &r) > 0);
    CHECK_EQ_INT(r.version_minor, 0);
    CHECK_EQ_INT(r.host.len, 0);
}

TEST(http_1_higher_minor_is_treated_as_1_1)
{
    struct http_request r;
    CHECK(parse("GET / HTTP/1.9\r\n" HOST "\r\n", &r) > 0);
    CHECK_EQ_INT(r.version_minor, 1);
}

TEST(other_major_versions_are_505)
{
    CHECK_EQ_INT(status("GET / HTTP/2.0\r\n" HOST "\r\n"), -505);
    CHECK_EQ_INT(status("GET / HTTP/3.0\r\n" HOST "\r\n"), -505);
    CHECK_EQ_INT(status("GET / HTTP/0.9\r\n\r\n"), -505);
}

TEST(malformed_version_is_400)
{
    CHECK_EQ_INT(status("GET / HTTP/1\r\n" HOST "\r\n"), -400);
    CHECK_EQ_INT(status("GET / HTTP/1.10\r\n" HOST "\r\n"), -400);
    CHECK_EQ_INT(status("GET / HTTP/11\r\n" HOST "\r\n"), -400);
    CHECK_EQ_INT(status("GET / http/1.1\r\n" HOST "\r\n"), -400);
    CHECK_EQ_INT(status("GET / HTTP/1.x\r\n" HOST "\r\n"), -400);
    CHECK_EQ_INT(status("GET / HTTPS/1.1\r\n" HOST "\r\n"), -400);
}

/* --- request-target forms ------------------------------------------------------------- */

TEST(absolute_form_sets_host_path_and_query)
{
    struct http_request r;
    CHECK(parse("GET http://example.org:8080/a/b?q=1 HTTP/1.1\r\nHost: h\r\n\r\n", &r) > 0);
    CHECK_SLICE(r.target, "http://example.org:8080/a/b?q=1");
    CHECK_SLICE(r.host, "example.org:8080");
    CHECK_SLICE(r.path, "/a/b");
    CHECK_SLICE(r.query, "q=1");
}

TEST(absolute_form_scheme_is_case_insensitive)
{
    struct http_request r;
    CHECK(parse("GET HTTPS://example.org/x HTTP/1.1\r\nHost: h\r\n\r\n", &r) > 0);
    CHECK_SLICE(r.host, "example.org");
    CHECK_SLICE(r.path, "/x");
}

TEST(absolute_form_without_path_has_path_slash)
{
    struct http_request r;
    CHECK(parse("GET http://example.org HTTP/1.1\r\nHost: h\r\n\r\n", &r) > 0);
    CHECK_SLICE(r.path, "/");
    CHECK(!r.has_query);
    CHECK(parse("GET http://example.org?q HTTP/1.1\r\nHost: h\r\n\r\n", &r) > 0);
    CHECK_SLICE(r.host, "example.org");
    CHECK_SLICE(r.path, "/");
    CHECK_SLICE(r.query, "q");
}

/* The origin-form every consumer writes (the proxy's target, $request_uri, REQUEST_URI):
 * "/" for an empty path, then the query with its '?'. */
TEST(origin_form_of_absolute_form_without_path_is_slash_and_query)
{
    struct http_request r;
    struct http_origin_form o;
    CHECK(parse("GET http://example.org HTTP/1.1\r\nHost: h\r\n\r\n", &r) > 0);
    o = http_origin_form(&r);
    CHECK_SLICE(o.path, "/");
    CHECK_SLICE(o.query, "");
    CHECK(parse("GET http://example.org?x=1 HTTP/1.1\r\nHost: h\r\n\r\n", &r) > 0);
    o = http_origin_form(&r);
    CHECK_SLICE(o.path, "/");
    CHECK_SLICE(o.query, "?x=1");
    CHECK(parse("GET http://example.org/a?b HTTP/1.1\r\nHost: h\r\n\r\n", &r) > 0);
    o = http_origin_form(&r);
    CHECK_SLICE(o.path, "/a");
    CHECK_SLICE(o.query, "?b");
    CHECK(parse("GET /a? HTTP/1.1\r\nHost: h\r\n\r\n", &r) > 0);
    o = http_origin_form(&r);
    CHECK_SLICE(o.query, "?"); /* an empty query keeps its '?', as sent */
}

TEST(absolute_form_authority_wins_over_host_field)
{
    struct http_request r;
    CHECK(parse("GET http://a.example/ HTTP/1.1\r\nHost: b.example\r\n\r\n", &r) > 0);
    CHECK_SLICE(r.host, "a.example");
}

/* RFC 9112 section 3.2: "A server MUST respond with a 400 (Bad Request) status code to any
 * HTTP/1.1 request message that lacks a Host header field", whatever the target's form. */
TEST(http11_absolute_form_without_host_field_is_400)
{
    CHECK_EQ_INT(status("GET http://example.org/ HTTP/1.1\r\n\r\n"), -400);
}

TEST(http10_absolute_form_without_host_field_is_accepted)
{
    struct http_request r;
    CHECK(parse("GET http://example.org/x HTTP/1.0\r\n\r\n", &r) > 0);
    CHECK_SLICE(r.host, "example.org");
}

TEST(absolute_form_still_rejects_two_host_fields)
{
    CHECK_EQ_INT(status("GET http://a/ HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n"), -400);
}

TEST(absolute_form_with_userinfo_is_400)
{
    CHECK_EQ_INT(status("GET http://user@example.org/ HTTP/1.1\r\nHost: h\r\n\r\n"), -400);
}

TEST(absolute_form_with_empty_or_bad_authority_is_400)
{
    CHECK_EQ_INT(status("GET http:///a HTTP/1.1\r\nHost: h\r\n\r\n"), -400);
    CHECK_EQ_INT(status("GET http://a:b/ HTTP/1.1\r\nHost: h\r\n\r\n"), -400);
    CHECK_EQ_INT(status("GET http://a%zz/ HTTP/1.1\r\nHost: h\r\n\r\n"), -400);
}

TEST(absolute_form_with_other_scheme_is_400)
{
    CHECK_EQ_INT(status("GET ftp://example.org/ HTTP/1.1\r\n" HOST "\r\n"), -400);
    CHECK_EQ_INT(status("GET http:/example.org/ HTTP/1.1\r\n" HOST "\r\n"), -400);
}

TEST(asterisk_form_with_options_has_path_slash)
{
    struct http_request r;
    CHECK(parse("OPTIONS * HTTP/1.1\r\n" HOST "\r\n", &r) > 0);
    CHECK_SLICE(r.target, "*");
    CHECK_SLICE(r.path, "/");
}

TEST(asterisk_form_with_other_methods_is_400)
{
    CHECK_EQ_INT(status("GET * HTTP/1.1\r\n" HOST "\r\n"), -400);
    CHECK_EQ_INT(status("OPTIONS *x HTTP/1.1\r\n" HOST "\r\n"), -400);
}

TEST(authority_form_with_connect_sets_host)
{
    struct http_request r;
    CHECK(parse("CONNECT example.org:443 HTTP/1.1\r\n" HOST "\r\n", &r) > 0);
    CHECK_SLICE(r.host, "example.org:443");
    CHECK_EQ_INT(r.path.len, 0);
}

TEST(authority_form_without_port_is_400)
{
    CHECK_EQ_INT(status("CONNECT example.org HTTP/1.1\r\n" HOST "\r\n"), -400);
}

TEST(connect_with_origin_form_is_400)
{
    CHECK_EQ_INT(status("CONNECT / HTTP/1.1\r\n" HOST "\r\n"), -400);
}

TEST(authority_form_with_other_methods_is_400)
{
    CHECK_EQ_INT(status("GET example.org:80 HTTP/1.1\r\n" HOST "\r\n"), -400);
}

TEST(relative_target_is_400)
{
    CHECK_EQ_INT(status("GET index.html HTTP/1.1\r\n" HOST "\r\n"), -400);
}

TEST(fragment_in_target_is_400)
{
    CHECK_EQ_INT(status("GET /a#b HTTP/1.1\r\n" HOST "\r\n"), -400);
    CHECK_EQ_INT(status("GET http://a/#b HTTP/1.1\r\nHost: h\r\n\r\n"), -400);
}

/* --- size limits ---------------------------------------------------------------------- */

TEST(unfinished_request_line_over_limit_is_414)
{
    CHECK_EQ_INT(status_limited("GET /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 20, 8), -414);
}

TEST(method_not_ended_within_limit_is_501)
{
    CHECK_EQ_INT(status_limited("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", 20, 8), -501);
}

TEST(unknown_method_before_an_overlong_target_is_501)
{
    CHECK_EQ_INT(status_limited("FROB /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 20, 8), -501);
}

TEST(bad_byte_in_method_of_an_overlong_line_is_400)
{
    CHECK_EQ_INT(status_limited("GE(T /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 20, 8), -400);
}

TEST(complete_request_line_over_limit_is_414)
{
    CHECK_EQ_INT(status_limited("GET /aaaaaaaaaaaaaaaaaaaaaaaaa HTTP/1.1\r\n\r\n", 20, 8), -414);
}

TEST(unfinished_fields_over_limit_are_431)
{
    CHECK_EQ_INT(status_limited("GET / HTTP/1.1\r\nX-Long: aaaaaaaaaaaaaaaaa", 30, 8), -431);
}

TEST(complete_head_over_limit_is_431)
{
    const char *s = "GET / HTTP/1.1\r\n" HOST "\r\n";
    CHECK_EQ_INT(status_limited(s, strlen(s) - 1, 8), -431);
}

TEST(head_of_exactly_the_limit_is_accepted)
{
    const char *s = "GET / HTTP/1.1\r\n" HOST "\r\n";
    CHECK_EQ_INT(status_limited(s, strlen(s), 8), strlen(s));
}

TEST(short_incomplete_head_under_limit_is_0)
{
    CHECK_EQ_INT(status_limited("GET / HTTP/1.1\r\nX-A: b", 30, 8), 0);
}

TEST(more_field_lines_than_max_headers_is_431)
{
    CHECK_EQ_INT(status_limited("GET / HTTP/1.1\r\n" HOST "A: 1\r\nB: 2\r\n\r\n", 8192, 2), -431);
}

TEST(exactly_max_headers_field_lines_is_accepted)
{
    CHECK(status_limited("GET / HTTP/1.1\r\n" HOST "A: 1\r\n\r\n", 8192, 2) > 0);
}

TEST(max_headers_above_array_size_is_capped)
{
    char s[4096];
    size_t n = (size_t)snprintf(s, sizeof s, "GET / HTTP/1.1\r\n" HOST);
    for (int i = 0; i < HTTP_MAX_HEADERS; i++)
        n += (size_t)snprintf(s + n, sizeof s - n, "X-%d: v\r\n", i);
    snprintf(s + n, sizeof s - n, "\r\n");
    CHECK_EQ_INT(status_limited(s, sizeof s, 1000), -431);
}

/* --- field line shape ----------------------------------------------------------------- */

TEST(obs_fold_is_400)
{
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\n" HOST "X-A: a\r\n  b\r\n\r\n"), -400);
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\n" HOST "X-A: a\r\n\tb\r\n\r\n"), -400);
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\n" HOST "X-A: a\r\n Content-Length: 5\r\n\r\n"), -400);
}

TEST(whitespace_before_first_field_line_is_400)
{
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\n " HOST "\r\n"), -400);
}

TEST(whitespace_between_name_and_colon_is_400)
{
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\nHost : example.com\r\n\r\n"), -400);
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\n" HOST "Content-Length\t: 0\r\n\r\n"), -400);
}

TEST(field_line_without_colon_is_400)
{
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\n" HOST "NoColon\r\n\r\n"), -400);
}

TEST(empty_field_name_is_400)
{
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\n" HOST ": v\r\n\r\n"), -400);
}

/* --- Host ----------------------------------------------------------------------------- */

TEST(http_1_1_without_host_is_400)
{
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\n\r\n"), -400);
}

TEST(two_host_fields_are_400)
{
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), -400);
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n"), -400);
}

TEST(two_authorization_fields_are_400_as_nginx)
{
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Basic a\r\n"
                        "authorization: Basic a\r\n\r\n"), -400);
    CHECK(status("GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Basic a\r\n\r\n") > 0);
}

TEST(two_content_range_fields_are_400_as_nginx)
{
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\nHost: a\r\nContent-Range: a\r\n"
                        "Content-Range: b\r\n\r\n"), -400);
    CHECK(status("GET / HTTP/1.1\r\nHost: a\r\nContent-Range: a\r\n\r\n") > 0);
}

TEST(two_expect_fields_are_400_as_nginx)
{
    CHECK_EQ_INT(status("PUT / HTTP/1.1\r\n" HOST "Expect: 100-continue\r\n"
                        "Expect: 100-continue\r\nContent-Length: 1\r\n\r\n"), -400);
}

TEST(empty_host_is_400)
{
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\nHost:\r\n\r\n"), -400);
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\nHost:   \r\n\r\n"), -400);
}

TEST(valid_host_forms_are_accepted)
{
    const char *hosts[] = {"example.com", "example.com:8080", "127.0.0.1",     "[::1]",
                           "[::1]:80",    "[v1.fe80::a+b]",   "xn--bcher-kva", "a%41b",
                           "under_score", "localhost:65535",
                           "a:" /* port = *DIGIT */};
    for (size_t i = 0; i < sizeof hosts / sizeof hosts[0]; i++) {
        char s[128];
        snprintf(s, sizeof s, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", hosts[i]);
        struct http_request r;
        CHECK(parse(s, &r) > 0);
        CHECK_SLICE(r.host, hosts[i]);
    }
}

TEST(invalid_host_forms_are_400)
{
    const char *hosts[] = {"a b",     "a/b", "a@b",   "a:x",  "a:65536",
                           ":80",     "[::1", "[]",   "[::1]x", "[g::1]",
                           "a%4",     "a:1:2", "a\"b", "exa\x80mple",
                           ".", "..a", "a..b:80", "[a..b::1]"};
    for (size_t i = 0; i < sizeof hosts / sizeof hosts[0]; i++) {
        char s[128];
        snprintf(s, sizeof s, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", hosts[i]);
        CHECK_EQ_INT(status(s), -400);
    }
}

/* --- Content-Length ------------------------------------------------------------------- */

TEST(content_length_zero_is_length_framing)
{
    struct http_request r;
    CHECK(parse("POST / HTTP/1.1\r\n" HOST "Content-Length: 0\r\n\r\n", &r) > 0);
    CHECK_EQ_INT(r.framing, HTTP_BODY_LENGTH);
    CHECK_EQ_INT(r.content_length, 0);
}

TEST(content_length_up_to_uint64_max_is_accepted)
{
    const char *s = "POST / HTTP/1.1\r\n" HOST "Content-Length: 18446744073709551615\r\n\r\n";
    struct http_request r;
    CHECK(parse(s, &r) > 0);
    CHECK(r.content_length == UINT64_MAX);
}

TEST(content_length_overflowing_uint64_is_400)
{
    CHECK_EQ_INT(status("POST / HTTP/1.1\r\n" HOST "Content-Length: 18446744073709551616\r\n\r\n"),
                 -400);
    CHECK_EQ_INT(status("POST / HTTP/1.1\r\n" HOST "Content-Length: 99999999999999999999\r\n\r\n"),
                 -400);
}

TEST(content_length_not_plain_digits_is_400)
{
    const char *values[] = {"", "-1", "+1", "1 2", "0x10", "1.0", "one", "1;"};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        char s[128];
        snprintf(s, sizeof s, "POST / HTTP/1.1\r\n" HOST "Content-Length: %s\r\n\r\n", values[i]);
        CHECK_EQ_INT(status(s), -400);
    }
}

TEST(repeated_content_length_is_400_even_with_same_value)
{
    CHECK_EQ_INT(
        status("POST / HTTP/1.1\r\n" HOST "Content-Length: 42\r\nContent-Length: 42\r\n\r\n"),
        -400);
    CHECK_EQ_INT(
        status("POST / HTTP/1.1\r\n" HOST "Content-Length: 1\r\ncontent-length: 2\r\n\r\n"), -400);
}

TEST(comma_joined_content_length_is_400)
{
    CHECK_EQ_INT(status("POST / HTTP/1.1\r\n" HOST "Content-Length: 42, 42\r\n\r\n"), -400);
    CHECK_EQ_INT(status("POST / HTTP/1.1\r\n" HOST "Content-Length: 42,42\r\n\r\n"), -400);
}

/* --- Transfer-Encoding ---------------------------------------------------------------- */

static int te_status(const char *fields)
{
    char s[512];
    snprintf(s, sizeof s, "POST / HTTP/1.1\r\n" HOST "%s\r\n", fields);
    return status(s);
}

TEST(transfer_encoding_chunked_is_chunked_framing)
{
    struct http_request r;
    CHECK(parse("POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\n\r\n", &r) > 0);
    CHECK_EQ_INT(r.framing, HTTP_BODY_CHUNKED);
}

TEST(transfer_encoding_chunked_is_case_insensitive)
{
    struct http_request r;
    CHECK(parse("POST / HTTP/1.1\r\n" HOST "transfer-encoding: CHUNKED\r\n\r\n", &r) > 0);
    CHECK_EQ_INT(r.framing, HTTP_BODY_CHUNKED);
}

TEST(transfer_encoding_empty_elements_are_ignored)
{
    struct http_request r;
    CHECK(parse("POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: , chunked ,\r\n\r\n", &r) > 0);
    CHECK_EQ_INT(r.framing, HTTP_BODY_CHUNKED);
}

TEST(transfer_encoding_with_content_length_is_400)
{
    CHECK_EQ_INT(te_status("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n"), -400);
    CHECK_EQ_INT(te_status("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n"), -400);
}

TEST(transfer_encoding_in_http_1_0_is_400)
{
    CHECK_EQ_INT(status("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), -400);
}

TEST(chunked_twice_is_400)
{
    CHECK_EQ_INT(te_status("Transfer-Encoding: chunked, chunked\r\n"), -400);
    CHECK_EQ_INT(te_status("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n"), -400);
}

TEST(chunked_not_last_is_400)
{
    CHECK_EQ_INT(te_status("Transfer-Encoding: chunked, identity\r\n"), -400);
    CHECK_EQ_INT(te_status("Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n"), -400);
}

TEST(other_coding_before_chunked_is_501)
{
    CHECK_EQ_INT(te_status("Transfer-Encoding: gzip, chunked\r\n"), -501);
}

TEST(two_transfer_encoding_fields_are_400_as_nginx)
{
    CHECK_EQ_INT(te_status("Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n"), -400);
    CHECK_EQ_INT(te_status("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n"),
                 -400);
}

TEST(single_coding_other_than_chunked_is_501)
{
    CHECK_EQ_INT(te_status("Transfer-Encoding: gzip\r\n"), -501);
    CHECK_EQ_INT(te_status("Transfer-Encoding: identity\r\n"), -501);
}

TEST(transfer_encoding_with_no_coding_is_400)
{
    CHECK_EQ_INT(te_status("Transfer-Encoding:\r\n"), -400);
    CHECK_EQ_INT(te_status("Transfer-Encoding: ,\r\n"), -400);
}

TEST(transfer_encoding_element_not_a_token_is_400)
{
    CHECK_EQ_INT(te_status("Transfer-Encoding: chun ked\r\n"), -400);
    CHECK_EQ_INT(te_status("Transfer-Encoding: \"chunked\"\r\n"), -400);
    CHECK_EQ_INT(te_status("Transfer-Encoding: chunked;q=1\r\n"), -400);
}

/* --- Connection and keep-alive -------------------------------------------------------- */

static bool keep_alive_of(const char *s)
{
    struct http_request r;
    return parse(s, &r) > 0 && r.keep_alive;
}

TEST(http_1_1_is_persistent_by_default)
{
    CHECK(keep_alive_of("GET / HTTP/1.1\r\n" HOST "\r\n"));
}

TEST(http_1_1_connection_close_is_not_persistent)
{
    CHECK(!keep_alive_of("GET / HTTP/1.1\r\n" HOST "Connection: close\r\n\r\n"));
    CHECK(!keep_alive_of("GET / HTTP/1.1\r\n" HOST "Connection: Upgrade, CLOSE\r\n\r\n"));
    CHECK(!keep_alive_of("GET / HTTP/1.1\r\n" HOST "Connection: x\r\nConnection: close\r\n\r\n"));
}

TEST(http_1_0_is_not_persistent_by_default)
{
    CHECK(!keep_alive_of("GET / HTTP/1.0\r\n\r\n"));
}

TEST(http_1_0_keep_alive_is_persistent)
{
    CHECK(keep_alive_of("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"));
    CHECK(keep_alive_of("GET / HTTP/1.0\r\nConnection: foo, keep-alive\r\n\r\n"));
}

TEST(http_1_0_keep_alive_with_close_is_not_persistent)
{
    CHECK(!keep_alive_of("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n"));
}

TEST(connection_element_not_a_token_is_400)
{
    CHECK_EQ_INT(status("GET / HTTP/1.1\r\n" HOST "Connection: clo se\r\n\r\n"), -400);
}

/* --- Expect --------------------------------------------------------------------------- */

TEST(expect_100_continue_sets_flag)
{
    const char *s = "PUT / HTTP/1.1\r\n" HOST "Expect: 100-Continue\r\nContent-Length: 1\r\n\r\n";
    struct http_request r;
    CHECK(parse(s, &r) > 0);
    CHECK(r.expect_continue);
}

TEST(other_expectation_is_417)
{
    CHECK_EQ_INT(status("PUT / HTTP/1.1\r\n" HOST "Expect: 200-ok\r\n\r\n"), -417);
    CHECK_EQ_INT(status("PUT / HTTP/1.1\r\n" HOST "Expect: 100-continue, x\r\n\r\n"), -417);
    CHECK_EQ_INT(status("PUT / HTTP/1.1\r\n" HOST "Expect: 100-continue=1\r\n\r\n"), -417);
}

TEST(expect_100_continue_from_http_1_0_is_ignored)
{
    struct http_request r;
    CHECK(parse("PUT / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n", &r) > 0);
    CHECK(!r.expect_continue);
}

TEST(bad_framing_is_400_before_expectation_417)
{
    const char *s = "PUT / HTTP/1.1\r\n" HOST "Expect: x\r\nContent-Length: -1\r\n\r\n";
    CHECK_EQ_INT(status(s), -400);
}

/* --- chunked decoding ----------------------------------------------------------------- */

struct decoded {
    enum http_chunked_result rc;
    size_t used;     /* input bytes consumed over all calls */
    bool short_read; /* a MORE call that did not consume all its input */
    size_t out_len;
    char out[1024];
};

/* Feeds in[0..len) to a fresh decoder in pieces cut at cuts[0..ncuts) (ascending), each
 * piece in a scratch buffer of its own, as a server that drops consumed input would. */
static void decode_pieces(const char *in, size_t len, const size_t *cuts, size_t ncuts,
                          uint64_t max_body, struct decoded *d)
{
    struct http_chunked c;
    http_chunked_init(&c);
    memset(d, 0, sizeof *d);
    size_t start = 0;
    for (size_t k = 0; k <= ncuts && d->rc == HTTP_CHUNKED_MORE; k++) {
        size_t end = k < ncuts ? cuts[k] : len;
        static char piece[16384];
        size_t used, out;
        if (end - start > sizeof piece) abort(); /* a test's input is too big for this harness */
        memcpy(piece, in + start, end - start);
        d->rc = http_chunked_decode(&c, piece, end - start, max_body, &used, &out);
        memcpy(d->out + d->out_len, piece, out);
        d->out_len += out;
        d->used = start + used;
        if (d->rc == HTTP_CHUNKED_MORE && used != end - start) d->short_read = true;
        start = end;
    }
}

static void decode_all(const char *in, uint64_t max_body, struct decoded *d)
{
    decode_pieces(in, strlen(in), NULL, 0, max_body, d);
}

static bool same_decoding(const struct decoded *a, const struct decoded *b)
{
    return a->rc == b->rc && a->used == b->used && a->short_read == b->short_read &&
           a->out_len == b->out_len && memcmp(a->out, b->out, a->out_len) == 0;
}

/* Every cut of the input into two or three pieces, and one byte at a time, decodes as a
 * single call does. Returns 0, or 1 + the first cut that disagrees. */
static size_t first_bad_split(const char *in, uint64_t max_body)
{
    size_t len = strlen(in);
    struct decoded whole, part;
    decode_all(in, max_body, &whole);
    for (size_t i = 0; i <= len; i++) {
        for (size_t j = i; j <= len; j++) {
            size_t cuts[2] = {i, j};
            decode_pieces(in, len, cuts, 2, max_body, &part);
            if (!same_decoding(&whole, &part)) return i + 1;
        }
    }
    size_t bytes[1024];
    for (size_t i = 0; i + 1 < len; i++)
        bytes[i] = i + 1;
    decode_pieces(in, len, bytes, len ? len - 1 : 0, max_body, &part);
    return same_decoding(&whole, &part) ? 0 : len + 1;
}

/* Decodes `in` in one call; says on stderr what differs from the expectation. */
static bool decodes_to(const char *in, enum http_chunked_result rc, const char *out)
{
    struct decoded d;
    decode_all(in, 0, &d);
    if (d.rc == rc && d.out_len == strlen(out) && memcmp(d.out, out, d.out_len) == 0) return true;
    fprintf(stderr, "  decoded to %d \"%.*s\", expected %d \"%s\"\n", (int)d.rc, (int)d.out_len,
            d.out, (int)rc, out);
    return false;
}

#define CHECK_DECODES(in, rc, out) CHECK(decodes_to((in), (rc), (out)))

static enum http_chunked_result chunked_rc(const char *in)
{
    struct decoded d;
    decode_all(in, 0, &d);
    return d.rc;
}

TEST(chunked_single_chunk_decodes)
{
    CHECK_DECODES("5\r\nhello\r\n0\r\n\r\n", HTTP_CHUNKED_DONE, "hello");
}

TEST(chunked_several_chunks_concatenate)
{
    CHECK_DECODES("3\r\nabc\r\nA\r\n0123456789\r\n1\r\n!\r\n0\r\n\r\n", HTTP_CHUNKED_DONE,
                  "abc0123456789!");
}

TEST(chunked_empty_body_is_just_the_last_chunk)
{
    CHECK_DECODES("0\r\n\r\n", HTTP_CHUNKED_DONE, "");
}

TEST(chunked_size_hex_is_case_insensitive_and_may_have_leading_zeros)
{
    CHECK_DECODES("0a\r\n0123456789\r\n000B\r\n0123456789X\r\n0\r\n\r\n", HTTP_CHUNKED_DONE,
                  "01234567890123456789X");
}

TEST(chunked_unfinished_body_is_more)
{
    CHECK_DECODES("5\r\nhel", HTTP_CHUNKED_MORE, "hel");
    CHECK_DECODES("5\r\nhello\r\n0\r\n", HTTP_CHUNKED_MORE, "hello");
}

TEST(chunked_done_stops_just_past_the_final_crlf)
{
    char buf[] = "5\r\nhello\r\n0\r\n\r\nGET / HTTP/1.1\r\n";
    size_t len = strlen(buf), used, out;
    struct http_chunked c;
    http_chunked_init(&c);
    CHECK_EQ_INT(http_chunked_decode(&c, buf, len, 0, &used, &out), HTTP_CHUNKED_DONE);
    CHECK_EQ_INT(used, strlen("5\r\nhello\r\n0\r\n\r\n"));
    CHECK_EQ_INT(out, 5);
    CHECK(memcmp(buf, "hello", 5) == 0);
    CHECK_STR(buf + used, "GET / HTTP/1.1\r\n");
}

TEST(chunked_call_after_done_consumes_nothing)
{
    char buf[] = "0\r\n\r\nGET";
    size_t used, out;
    struct http_chunked c;
    http_chunked_init(&c);
    CHECK_EQ_INT(http_chunked_decode(&c, buf, 5, 0, &used, &out), HTTP_CHUNKED_DONE);
    CHECK_EQ_INT(http_chunked_decode(&c, buf + 5, 3, 0, &used, &out), HTTP_CHUNKED_DONE);
    CHECK_EQ_INT(used, 0);
    CHECK_EQ_INT(out, 0);
}

TEST(chunked_error_is_sticky)
{
    char bad[] = "x\r\n", good[] = "0\r\n\r\n";
    size_t used, out;
    struct http_chunked c;
    http_chunked_init(&c);
    CHECK_EQ_INT(http_chunked_decode(&c, bad, 3, 0, &used, &out), HTTP_CHUNKED_ERROR);
    CHECK_EQ_INT(http_chunked_decode(&c, good, 5, 0, &used, &out), HTTP_CHUNKED_ERROR);
}

TEST(chunked_missing_size_is_error)
{
    CHECK_EQ_INT(chunked_rc("\r\nhello\r\n0\r\n\r\n"), HTTP_CHUNKED_ERROR);
    CHECK_EQ_INT(chunked_rc(";ext\r\n"), HTTP_CHUNKED_ERROR);
}

TEST(chunked_size_with_leading_whitespace_is_error)
{
    CHECK_EQ_INT(chunked_rc(" 5\r\nhello\r\n0\r\n\r\n"), HTTP_CHUNKED_ERROR);
    CHECK_EQ_INT(chunked_rc("\t5\r\nhello\r\n0\r\n\r\n"), HTTP_CHUNKED_ERROR);
}

TEST(chunked_size_with_sign_or_prefix_is_error)
{
    CHECK_EQ_INT(chunked_rc("+5\r\nhello\r\n0\r\n\r\n"), HTTP_CHUNKED_ERROR);
    CHECK_EQ_INT(chunked_rc("0x5\r\nhello\r\n0\r\n\r\n"), HTTP_CHUNKED_ERROR);
}

TEST(chunked_size_of_16_hex_digits_is_accepted)
{
    CHECK_DECODES("0000000000000003\r\nabc\r\n0\r\n\r\n", HTTP_CHUNKED_DONE, "abc");
    CHECK_EQ_INT(chunked_rc("ffffffffffffffff\r\n"), HTTP_CHUNKED_MORE);
}

TEST(chunked_size_of_17_hex_digits_is_error)
{
    CHECK_EQ_INT(chunked_rc("00000000000000003\r\nabc\r\n0\r\n\r\n"), HTTP_CHUNKED_ERROR);
    CHECK_EQ_INT(chunked_rc("10000000000000000\r\n"), HTTP_CHUNKED_ERROR);
}

TEST(chunked_bare_lf_after_size_is_error)
{
    CHECK_EQ_INT(chunked_rc("5\nhello\r\n0\r\n\r\n"), HTTP_CHUNKED_ERROR);
}

TEST(chunked_bare_cr_after_size_is_error)
{
    CHECK_EQ_INT(chunked_rc("5\rhello\r\n0\r\n\r\n"), HTTP_CHUNKED_ERROR);
}

TEST(chunked_data_not_followed_by_crlf_is_error)
{
    CHECK_EQ_INT(chunked_rc("5\r\nhelloX\r\n0\r\n\r\n"), HTTP_CHUNKED_ERROR);
    CHECK_EQ_INT(chunked_rc("5\r\nhello\n0\r\n\r\n"), HTTP_CHUNKED_ERROR);
    CHECK_EQ_INT(chunked_rc("5\r\nhello\r0\r\n\r\n"), HTTP_CHUNKED_ERROR);
}

TEST(chunked_valid_extensions_are_skipped)
{
    const char *cases[] = {
        "5;name\r\nhello\r\n0\r\n\r\n",
        "5;name=value\r\nhello\r\n0\r\n\r\n",
        "5 ; name = value ;other\r\nhello\r\n0\r\n\r\n",
        "5;a=\"quoted ;,= \\\" value\"\r\nhello\r\n0\r\n\r\n",
        "5;a=\"\";b=c\r\nhello\r\n0;last=1\r\n\r\n",
        "5;\t a\t=\tb\r\nhello\r\n0\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK_DECODES(cases[i], HTTP_CHUNKED_DONE, "hello");
}

TEST(chunked_invalid_extensions_are_errors)
{
    const char *cases[] = {
        "5;\r\nhello\r\n0\r\n\r\n",           /* no name */
        "5;=v\r\nhello\r\n0\r\n\r\n",         /* no name before "=" */
        "5;a=\r\nhello\r\n0\r\n\r\n",         /* no value after "=" */
        "5;a b\r\nhello\r\n0\r\n\r\n",        /* two names */
        "5 \r\nhello\r\n0\r\n\r\n",           /* whitespace that leads nowhere */
        "5;a \r\nhello\r\n0\r\n\r\n",         /* same, after a name */
        "5;a=b \r\nhello\r\n0\r\n\r\n",       /* same, after a value */
        "5;a=\"b\r\nhello\r\n0\r\n\r\n",      /* unterminated quoted-string */
        "5;a=\"b\"c\r\nhello\r\n0\r\n\r\n",   /* junk after the quote */
        "5;a=b\x01\r\nhello\r\n0\r\n\r\n",    /* control byte */
        "5;a=\"\x7f\"\r\nhello\r\n0\r\n\r\n", /* DEL in a quoted-string */
        "5;a=(b)\r\nhello\r\n0\r\n\r\n",      /* not a token */
        "5x\r\nhello\r\n0\r\n\r\n",           /* junk after the size */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK_EQ_INT(chunked_rc(cases[i]), HTTP_CHUNKED_ERROR);
}

static void size_line_with_padding(char *buf, size_t line_len)
{
    /* "1;x=aaa...a" of line_len bytes, then CRLF and one data byte */
    memcpy(buf, "1;x=", 4);
    memset(buf + 4, 'a', line_len - 4);
    strcpy(buf + line_len, "\r\nZ\r\n0\r\n\r\n");
}

TEST(chunked_size_line_of_4096_bytes_is_accepted)
{
    static char buf[5000];
    size_line_with_padding(buf, 4096);
    CHECK_DECODES(buf, HTTP_CHUNKED_DONE, "Z");
}

TEST(chunked_size_line_over_4096_bytes_is_error)
{
    static char buf[5000];
    size_line_with_padding(buf, 4097);
    CHECK_EQ_INT(chunked_rc(buf), HTTP_CHUNKED_ERROR);
}

TEST(chunked_trailers_are_checked_and_dropped)
{
    CHECK_DECODES("5\r\nhello\r\n0\r\nX-Sum: 1\r\nX-Empty:\r\n\r\nNEXT", HTTP_CHUNKED_DONE,
                  "hello");
    struct decoded d;
    decode_all("5\r\nhello\r\n0\r\nX-Sum: 1\r\n\r\nNEXT", 0, &d);
    CHECK_EQ_INT(d.used, strlen("5\r\nhello\r\n0\r\nX-Sum: 1\r\n\r\n"));
}

TEST(chunked_trailer_obs_fold_is_error)
{
    CHECK_EQ_INT(chunked_rc("0\r\nX-A: 1\r\n 2\r\n\r\n"), HTTP_CHUNKED_ERROR);
    CHECK_EQ_INT(chunked_rc("0\r\n\tX-A: 1\r\n\r\n"), HTTP_CHUNKED_ERROR);
    /* a continuation that looks like a field of its own is still a fold */
    CHECK_EQ_INT(chunked_rc("0\r\nX-A: 1\r\n X-B: 2\r\n\r\n"), HTTP_CHUNKED_ERROR);
}

TEST(chunked_trailer_without_colon_is_error)
{
    CHECK_EQ_INT(chunked_rc("0\r\nX-A\r\n\r\n"), HTTP_CHUNKED_ERROR);
}

TEST(chunked_trailer_whitespace_before_colon_is_error)
{
    CHECK_EQ_INT(chunked_rc("0\r\nX-A : 1\r\n\r\n"), HTTP_CHUNKED_ERROR);
}

TEST(chunked_trailer_control_byte_or_bare_lf_is_error)
{
    CHECK_EQ_INT(chunked_rc("0\r\nX-A: \x01\r\n\r\n"), HTTP_CHUNKED_ERROR);
    CHECK_EQ_INT(chunked_rc("0\r\nX-A: 1\n\r\n"), HTTP_CHUNKED_ERROR);
    CHECK_EQ_INT(chunked_rc("0\r\n\n"), HTTP_CHUNKED_ERROR);
}

TEST(chunked_trailer_section_over_8192_bytes_is_error)
{
    static char ok[9000], big[9000];
    /* "0\r\n" + "X: " + v + "\r\n" + "\r\n": the trailer section is 7 + |v| bytes */
    strcpy(ok, "0\r\nX: ");
    memset(ok + 6, 'v', 8192 - 7);
    strcpy(ok + 6 + 8192 - 7, "\r\n\r\n");
    CHECK_EQ_INT(chunked_rc(ok), HTTP_CHUNKED_DONE);
    strcpy(big, "0\r\nX: ");
    memset(big + 6, 'v', 8192 - 6);
    strcpy(big + 6 + 8192 - 6, "\r\n\r\n");
    CHECK_EQ_INT(chunked_rc(big), HTTP_CHUNKED_ERROR);
}

TEST(chunked_size_over_max_body_is_too_large_before_its_data)
{
    struct decoded d;
    decode_all("10\r\n", 15, &d);
    CHECK_EQ_INT(d.rc, HTTP_CHUNKED_TOO_LARGE);
    decode_all("ffffffffffffffff\r\n", 1000, &d);
    CHECK_EQ_INT(d.rc, HTTP_CHUNKED_TOO_LARGE);
}

TEST(chunked_total_over_max_body_is_too_large)
{
    struct decoded d;
    decode_all("5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n", 9, &d);
    CHECK_EQ_INT(d.rc, HTTP_CHUNKED_TOO_LARGE);
    CHECK_EQ_INT(d.out_len, 5);
}

TEST(chunked_total_equal_to_max_body_is_accepted)
{
    struct decoded d;
    decode_all("5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n", 10, &d);
    CHECK_EQ_INT(d.rc, HTTP_CHUNKED_DONE);
    CHECK_SLICE(((struct http_slice){d.out, d.out_len}), "helloworld");
}

TEST(chunked_every_split_decodes_the_same)
{
    const char *bodies[] = {
        "5\r\nhello\r\n0\r\n\r\n",
        ("3;ext=\"a \\\"b\";x\r\nabc\r\n10 ; y = z\r\n0123456789abcdef\r\n0\r\n"
         "Trailer: yes\r\nX: y\r\n\r\nGET / HTTP/1.1\r\n"),
        "1\r\na\r\n1\r\nb\r\n1\r\nc\r\n0\r\n\r\n",
        "0\r\n\r\n\r\n",
        "5\r\nhelloX\r\n0\r\n\r\n",
        "5\r\nhel",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++)
        CHECK_EQ_INT(first_bad_split(bodies[i], 0), 0);
}

TEST(chunked_every_split_is_too_large_at_the_same_point)
{
    CHECK_EQ_INT(first_bad_split("4\r\nabcd\r\n8\r\n01234567\r\n0\r\n\r\n", 10), 0);
}

/* --- Range ---------------------------------------------------------------------------- */

static int range(const char *v, uint64_t size, struct http_range *r, unsigned *n)
{
    return http_range_parse(sl(v), size, r, 4, n);
}

TEST(range_single_closed)
{
    struct http_range r[4];
    unsigned n;
    CHECK_EQ_INT(range("bytes=0-499", 1000, r, &n), HTTP_RANGE_OK);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(r[0].first, 0);
    CHECK_EQ_INT(r[0].last, 499);
}

TEST(range_unit_is_case_insensitive)
{
    struct http_range r[4];
    unsigned n;
    CHECK_EQ_INT(range("Bytes=1-1", 10, r, &n), HTTP_RANGE_OK);
}

TEST(range_open_ended_runs_to_the_end)
{
    struct http_range r[4];
    unsigned n;
    CHECK_EQ_INT(range("bytes=900-", 1000, r, &n), HTTP_RANGE_OK);
    CHECK_EQ_INT(r[0].first, 900);
    CHECK_EQ_INT(r[0].last, 999);
}

TEST(range_suffix_is_the_last_bytes)
{
    struct http_range r[4];
    unsigned n;
    CHECK_EQ_INT(range("bytes=-100", 1000, r, &n), HTTP_RANGE_OK);
    CHECK_EQ_INT(r[0].first, 900);
    CHECK_EQ_INT(r[0].last, 999);
}

TEST(range_suffix_beyond_length_is_whole_file)
{
    struct http_range r[4];
    unsigned n;
    CHECK_EQ_INT(range("bytes=-5000", 1000, r, &n), HTTP_RANGE_OK);
    CHECK_EQ_INT(r[0].first, 0);
    CHECK_EQ_INT(r[0].last, 999);
}

TEST(range_last_beyond_length_is_clamped)
{
    struct http_range r[4];
    unsigned n;
    CHECK_EQ_INT(range("bytes=500-5000", 1000, r, &n), HTTP_RANGE_OK);
    CHECK_EQ_INT(r[0].first, 500);
    CHECK_EQ_INT(r[0].last, 999);
}

TEST(range_multiple_are_kept_in_order_given)
{
    struct http_range r[4];
    unsigned n;
    CHECK_EQ_INT(range("bytes=500-599 ,, 0-99,\t-10", 1000, r, &n), HTTP_RANGE_OK);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(r[0].first, 500);
    CHECK_EQ_INT(r[1].first, 0);
    CHECK_EQ_INT(r[1].last, 99);
    CHECK_EQ_INT(r[2].first, 990);
}

TEST(range_adjacent_ranges_do_not_overlap)
{
    struct http_range r[4];
    unsigned n;
    CHECK_EQ_INT(range("bytes=0-4,5-9", 10, r, &n), HTTP_RANGE_OK);
    CHECK_EQ_INT(n, 2);
}

TEST(range_unsatisfiable_ranges_are_dropped)
{
    struct http_range r[4];
    unsigned n;
    CHECK_EQ_INT(range("bytes=2000-3000,0-0,-0", 1000, r, &n), HTTP_RANGE_OK);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(r[0].last, 0);
}

TEST(range_first_beyond_length_is_unsatisfiable)
{
    struct http_range r[4];
    unsigned n;
    CHECK_EQ_INT(range("bytes=1000-", 1000, r, &n), HTTP_RANGE_UNSATISFIABLE);
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(range("bytes=1000-1001,2000-2001", 1000, r, &n), HTTP_RANGE_UNSATISFIABLE);
}

TEST(range_suffix_zero_is_unsatisfiable)
{
    struct http_range r[4];
    unsigned n;
    CHECK_EQ_INT(range("bytes=-0", 1000, r, &n), HTTP_RANGE_UNSATISFIABLE);
}

TEST(range_on_empty_representation_is_unsatisfiable)
{
    struct http_range r[4];
    unsigned n;
    CHECK_EQ_INT(range("bytes=0-", 0, r, &n), HTTP_RANGE_UNSATISFIABLE);
    CHECK_EQ_INT(range("bytes=-1", 0, r, &n), HTTP_RANGE_UNSATISFIABLE);
}

TEST(range_overlapping_in_any_order_is_ignored)
{
    struct http_range r[4];
    unsigned n;
    CHECK_EQ_INT(range("bytes=0-10,5-20", 1000, r, &n), HTTP_RANGE_IGNORE);
    CHECK_EQ_INT(range("bytes=5-20,0-10", 1000, r, &n), HTTP_RANGE_IGNORE);
    CHECK_EQ_INT(range("bytes=0-99,-950", 1000, r, &n), HTTP_RANGE_IGNORE);
    CHECK_EQ_INT(range("bytes=0-0,0-0", 1000, r, &n), HTTP_RANGE_IGNORE);
    CHECK_EQ_INT(n, 0);
}

TEST(range_more_than_max_ranges_is_ignored)
{
    struct http_range r[4];
    unsigned n;
    CHECK_EQ_INT(range("bytes=0-0,2-2,4-4,6-6", 1000, r, &n), HTTP_RANGE_OK);
    CHECK_EQ_INT(n, 4);
    CHECK_EQ_INT(range("bytes=0-0,2-2,4-4,6-6,8-8", 1000, r, &n), HTTP_RANGE_IGNORE);
    CHECK_EQ_INT(range("bytes=5000-,5001-,5002-,5003-,5004-", 1000, r, &n), HTTP_RANGE_IGNORE);
}

TEST(range_malformed_is_ignored)
{
    const char *values[] = {
        "",
        "bytes",
        "bytes=",
        "bytes=,",
        "bytes=5",
        "bytes=a-b",
        "bytes=5-4",
        "bytes=--5",
        "bytes=1-2-3",
        "bytes = 0-1",
        "bytes=0-1;",
        "bytes=+0-1",
        "bytes=0x10-",
        "bytes=0-1 2",
        "bytes=-",
        "bytes=18446744073709551616-",
        "bytes=-18446744073709551616",
        "bytes=0-1,x",
    };
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        struct http_range r[4];
        unsigned n = 99;
        CHECK_EQ_INT(range(values[i], 1000, r, &n), HTTP_RANGE_IGNORE);
        CHECK_EQ_INT(n, 0);
    }
}

TEST(range_other_unit_is_ignored)
{
    struct http_range r[4];
    unsigned n;
    CHECK_EQ_INT(range("items=0-1", 1000, r, &n), HTTP_RANGE_IGNORE);
    CHECK_EQ_INT(range("bytesx=0-1", 1000, r, &n), HTTP_RANGE_IGNORE);
}

TEST(range_absent_is_ignored)
{
    struct http_range r[4];
    unsigned n;
    struct http_slice absent = {NULL, 0};
    CHECK_EQ_INT(http_range_parse(absent, 1000, r, 4, &n), HTTP_RANGE_IGNORE);
}

TEST(range_huge_values_do_not_overflow)
{
    struct http_range r[4];
    unsigned n;
    CHECK_EQ_INT(range("bytes=0-18446744073709551615", 1000, r, &n), HTTP_RANGE_OK);
    CHECK_EQ_INT(r[0].last, 999);
    CHECK_EQ_INT(range("bytes=-18446744073709551615", 1000, r, &n), HTTP_RANGE_OK);
    CHECK_EQ_INT(r[0].first, 0);
}

/* --- dates ---------------------------------------------------------------------------- */

static int date(const char *s, int64_t *t)
{
    return http_date_parse(sl(s), t);
}

#define SUNDAY_1994 784111777 /* Sun, 06 Nov 1994 08:49:37 GMT */

TEST(date_imf_fixdate_parses)
{
    int64_t t = 0;
    CHECK_EQ_INT(date("Sun, 06 Nov 1994 08:49:37 GMT", &t), 0);
    CHECK_EQ_INT(t, SUNDAY_1994);
}

TEST(date_rfc850_parses)
{
    int64_t t = 0;
    CHECK_EQ_INT(date("Sunday, 06-Nov-94 08:49:37 GMT", &t), 0);
    CHECK_EQ_INT(t, SUNDAY_1994);
}

TEST(date_asctime_parses)
{
    int64_t t = 0;
    CHECK_EQ_INT(date("Sun Nov  6 08:49:37 1994", &t), 0);
    CHECK_EQ_INT(t, SUNDAY_1994);
    CHECK_EQ_INT(date("Sun Nov 06 08:49:37 1994", &t), 0);
    CHECK_EQ_INT(t, SUNDAY_1994);
}

TEST(date_rfc850_two_digit_year_pivots_at_70)
{
    int64_t t = 0;
    CHECK_EQ_INT(date("Thursday, 01-Jan-70 00:00:00 GMT", &t), 0);
    CHECK_EQ_INT(t, 0);
    CHECK_EQ_INT(date("Tuesday, 01-Jan-69 00:00:00 GMT", &t), 0);
    CHECK_EQ_INT(t, 3124224000); /* 2069-01-01 */
}

TEST(date_epoch_leap_day_and_far_future_parse)
{
    int64_t t = -1;
    CHECK_EQ_INT(date("Thu, 01 Jan 1970 00:00:00 GMT", &t), 0);
    CHECK_EQ_INT(t, 0);
    CHECK_EQ_INT(date("Tue, 29 Feb 2000 12:00:00 GMT", &t), 0);
    CHECK_EQ_INT(t, 951825600);
    CHECK_EQ_INT(date("Fri, 31 Dec 9999 23:59:59 GMT", &t), 0);
    CHECK_EQ_INT(t, 253402300799);
    CHECK_EQ_INT(date("Wed, 31 Dec 1969 23:59:59 GMT", &t), 0);
    CHECK_EQ_INT(t, -1);
}

TEST(date_leap_second_is_accepted)
{
    int64_t t = 0;
    CHECK_EQ_INT(date("Sat, 31 Dec 2016 23:59:60 GMT", &t), 0);
    CHECK_EQ_INT(t, 1483228800);
}

TEST(date_out_of_range_fields_are_invalid)
{
    const char *dates[] = {
        "Sun, 00 Nov 1994 08:49:37 GMT", "Sun, 32 Nov 1994 08:49:37 GMT",
        "Sun, 31 Nov 1994 08:49:37 GMT", "Sun, 29 Feb 1900 08:49:37 GMT",
        "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nov 1994 08:60:37 GMT",
        "Sun, 06 Nov 1994 08:49:61 GMT", "Sunday, 32-Nov-94 08:49:37 GMT",
        "Sun Nov 31 08:49:37 1994",      "Sun Nov  0 08:49:37 1994",
    };
    for (size_t i = 0; i < sizeof dates / sizeof dates[0]; i++) {
        int64_t t;
        CHECK_EQ_INT(date(dates[i], &t), -1);
    }
}

TEST(date_malformed_is_invalid)
{
    const char *dates[] = {
        "",
        "Sun, 06 Nov 1994 08:49:37 UTC",
        "Sun, 06 Nov 1994 08:49:37 gmt",
        "Sun, 06 nov 1994 08:49:37 GMT",
        "Sun, 06 Foo 1994 08:49:37 GMT",
        "Xyz, 06 Nov 1994 08:49:37 GMT",
        "sun, 06 Nov 1994 08:49:37 GMT",
        "Sun, 6 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 94 08:49:37 GMT",
        "Sun, 06 Nov 1994 8:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:37 GMT ",
        "Sun,  06 Nov 1994 08:49:37 GMT",
        "Sun, 06-Nov-1994 08:49:37 GMT",
        "Sun, 0x Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-1994 08:49:37 GMT",
        "Sunday, 06 Nov 94 08:49:37 GMT",
        "Sun, 06-Nov-94 08:49:37 GMT",
        "Sunday,06-Nov-94 08:49:37 GMT",
        "Sun Nov 6 08:49:37 1994",
        "Sun Nov  6 08:49:37 94",
        "Sun Nov  6 08:49:37 1994 GMT",
        "1994-11-06T08:49:37Z",
    };
    for (size_t i = 0; i < sizeof dates / sizeof dates[0]; i++) {
        int64_t t;
        if (date(dates[i], &t) != -1) fprintf(stderr, "  accepted: \"%s\"\n", dates[i]);
        CHECK_EQ_INT(date(dates[i], &t), -1);
    }
}

TEST(date_format_is_imf_fixdate)
{
    char out[30];
    http_date_format(SUNDAY_1994, out);
    CHECK_STR(out, "Sun, 06 Nov 1994 08:49:37 GMT");
    http_date_format(0, out);
    CHECK_STR(out, "Thu, 01 Jan 1970 00:00:00 GMT");
    http_date_format(-1, out);
    CHECK_STR(out, "Wed, 31 Dec 1969 23:59:59 GMT");
    http_date_format(4102444800, out);
    CHECK_STR(out, "Fri, 01 Jan 2100 00:00:00 GMT");
}

TEST(date_format_clamps_to_four_digit_years)
{
    char out[30];
    http_date_format(INT64_MAX, out);
    CHECK_STR(out, "Fri, 31 Dec 9999 23:59:59 GMT");
    http_date_format(INT64_MIN, out);
    CHECK_STR(out, "Sat, 01 Jan 0000 00:00:00 GMT");
}

TEST(date_format_and_parse_round_trip)
{
    for (int64_t t = -86400 * 400; t < INT64_C(86400) * 366 * 200; t += 86400 * 7 + 3599) {
        char out[30];
        int64_t back;
        http_date_format(t, out);
        CHECK_EQ_INT(date(out, &back), 0);
        CHECK_EQ_INT(back, t);
    }
}

/* --- paths ---------------------------------------------------------------------------- */

/* The normalized path, or "<-400>" / "<-414>". */
static const char *norm_cap(const char *in, size_t cap)
{
    static char out[256], err[32];
    long rc = http_path_normalize(sl(in), out, cap);
    if (rc >= 0) {
        if ((size_t)rc != strlen(out)) return "<length mismatch>";
        return out;
    }
    snprintf(err, sizeof err, "<%ld>", rc);
    return err;
}

static const char *norm(const char *in)
{
    return norm_cap(in, 256);
}

TEST(path_root_stays_root)
{
    CHECK_STR(norm("/"), "/");
}

TEST(path_plain_is_unchanged)
{
    CHECK_STR(norm("/a/b.html"), "/a/b.html");
    CHECK_STR(norm("/a/b/"), "/a/b/");
}

TEST(path_repeated_slashes_collapse)
{
    CHECK_STR(norm("//a///b//"), "/a/b/");
    CHECK_STR(norm("//"), "/");
}

TEST(path_dot_segments_vanish)
{
    CHECK_STR(norm("/./a/./b"), "/a/b");
    CHECK_STR(norm("/a/."), "/a/");
    CHECK_STR(norm("/."), "/");
}

TEST(path_dot_dot_removes_the_previous_segment)
{
    CHECK_STR(norm("/a/b/../c"), "/a/c");
    CHECK_STR(norm("/a/b/.."), "/a/");
    CHECK_STR(norm("/a/.."), "/");
    CHECK_STR(norm("/a/b/../../c/"), "/c/");
    CHECK_STR(norm("/a//..//b"), "/b");
}

TEST(path_names_that_only_start_with_dots_are_kept)
{
    CHECK_STR(norm("/.hidden/..x/.../x.."), "/.hidden/..x/.../x..");
}

TEST(path_percent_escapes_are_decoded)
{
    CHECK_STR(norm("/%41%62%7e/caf%C3%A9"), "/Ab~/caf\xc3\xa9");
    CHECK_STR(norm("/a%20b"), "/a b");
}

TEST(path_is_decoded_only_once)
{
    CHECK_STR(norm("/%252e%252e/x"), "/%2e%2e/x");
}

TEST(path_encoded_dots_are_dot_segments)
{
    CHECK_STR(norm("/a/%2e/b"), "/a/b");
    CHECK_STR(norm("/a/b/%2E%2e/c"), "/a/c");
    CHECK_STR(norm("/a/.%2e/b"), "/b");
}

TEST(path_encoded_slash_separates_segments)
{
    CHECK_STR(norm("/a%2fb"), "/a/b");
    CHECK_STR(norm("/a%2F..%2Fb"), "/b");
}

TEST(path_climbing_above_root_is_400)
{
    const char *paths[] = {"/..",        "/../x",
                           "/a/../../x", "/%2e%2e/x",
                           "/%2E%2E",    "/a/%2e%2e/%2e%2e/x",
                           "/.%2e/x",    "/a%2f..%2f..%2fetc/passwd",
                           "/./../x",    "//../x"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        CHECK_STR(norm(paths[i]), "<-400>");
}

TEST(path_malformed_escapes_are_400)
{
    const char *paths[] = {"/%", "/%4", "/a%zz", "/%g0", "/%0g", "/a%"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        CHECK_STR(norm(paths[i]), "<-400>");
}

TEST(path_nul_encoded_or_literal_is_400)
{
    CHECK_STR(norm("/a%00b"), "<-400>");
    char out[16];
    CHECK_EQ_INT(http_path_normalize((struct http_slice){"/a\0b", 4}, out, sizeof out), -400);
}

TEST(path_not_starting_with_slash_is_400)
{
    CHECK_STR(norm("a/b"), "<-400>");
    CHECK_STR(norm(""), "<-400>");
    CHECK_STR(norm("%2fa"), "<-400>");
    CHECK_STR(norm("*"), "<-400>");
}

TEST(path_that_fits_exactly_with_its_nul_is_accepted)
{
    CHECK_STR(norm_cap("/abc", 5), "/abc");
    CHECK_STR(norm_cap("/abc/", 6), "/abc/");
    CHECK_STR(norm_cap("/", 2), "/");
}

TEST(path_one_byte_too_long_is_414)
{
    CHECK_STR(norm_cap("/abc", 4), "<-414>");
    CHECK_STR(norm_cap("/abc/", 5), "<-414>");
    CHECK_STR(norm_cap("/", 1), "<-414>");
    CHECK_STR(norm_cap("/", 0), "<-414>");
}

TEST(path_long_segment_removed_by_dot_dot_does_not_need_room)
{
    CHECK_STR(norm_cap("/a-very-long-name/../b", 3), "/b");
    CHECK_STR(norm_cap("/x/a-very-long-name/more/../../y", 5), "/x/y");
}

TEST(path_climbing_above_root_is_400_even_when_too_long)
{
    CHECK_STR(norm_cap("/a-very-long-name/../../b", 3), "<-400>");
}

/* --- path encoding (for Location and links) ------------------------------------------ */

TEST(path_encode_keeps_safe_bytes_and_escapes_the_rest)
{
    char out[64];
    const char in[] = "/a b/\r\n%?#\\\xc3\xa9/x-y_z.~";
    long n = http_path_encode(in, sizeof(in) - 1, out, sizeof(out));
    CHECK(n > 0);
    CHECK(strcmp(out, "/a%20b/%0D%0A%25%3F%23%5C%C3%A9/x-y_z.~") == 0);
}

TEST(path_encode_reports_when_it_does_not_fit)
{
    char out[8];
    CHECK_EQ_INT(http_path_encode("/aaaaaaaa", 9, out, sizeof(out)), -1);
    CHECK_EQ_INT(http_path_encode("/ \x01", 3, out, 7), -1);
}

/* --- entity-tag lists (If-Match, If-None-Match) --------------------------------------- */

static bool tags(const char *list, const char *etag, bool weak)
{
    return http_etag_list_matches((struct http_slice){list, strlen(list)}, etag, weak);
}

TEST(etag_list_weak_comparison_ignores_w_prefix_on_both_sides)
{
    CHECK(tags("\"a\"", "\"a\"", true));
    CHECK(tags("W/\"a\"", "\"a\"", true));
    CHECK(tags("\"x\", W/\"a\"", "W/\"a\"", true));
    CHECK(!tags("\"b\"", "\"a\"", true));
}

TEST(etag_list_strong_comparison_never_matches_a_weak_tag)
{
    CHECK(tags("\"a\"", "\"a\"", false));
    CHECK(!tags("W/\"a\"", "\"a\"", false));
    CHECK(!tags("\"a\"", "W/\"a\"", false));
}

TEST(etag_list_star_matches_and_malformed_matches_nothing)
{
    CHECK(tags("*", "\"a\"", false));
    CHECK(!tags("a", "\"a\"", true));
    CHECK(!tags("\"a", "\"a\"", true));
}

static bool msie6(const char *ua)
{
    return http_user_agent_msie6((struct http_slice){ua, ua ? strlen(ua) : 0});
}

TEST(user_agent_msie6_is_msie_4_to_6_not_opera_nor_6_with_sv1)
{
    CHECK(msie6("Mozilla/4.0 (compatible; MSIE 5.0)"));
    CHECK(msie6("Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1)"));
    CHECK(!msie6("Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1; SV1)"));
    CHECK(!msie6("Mozilla/4.0 (compatible; MSIE 7.0)"));
    CHECK(!msie6("Opera/9.0 (compatible; MSIE 5.0)"));
    CHECK(!msie6("MSIE 5"));
}

TEST(user_agent_tests_take_a_request_without_a_user_agent)
{
    CHECK(!msie6(NULL)); /* no User-Agent: an empty slice with no bytes behind it */
    CHECK(!http_user_agent_safari((struct http_slice){NULL, 0}));
}

TEST(user_agent_safari_is_safari_on_mac_os_x_not_chrome)
{
    struct http_slice s = {"Mozilla/5.0 (Macintosh; Intel Mac OS X 10_7) Safari/7534.48.3", 0};
    s.len = strlen(s.p);
    CHECK(http_user_agent_safari(s));
    struct http_slice c = {"Mozilla/5.0 (Macintosh; Intel Mac OS X) Chrome/120 Safari/537.36", 0};
    c.len = strlen(c.p);
    CHECK(!http_user_agent_safari(c));
}
