/* Unit tests of the response API that modules use: owned memory, room for a body, a new
 * status or reason phrase, a stream's length, the Server name. */
#define TEST_MAIN
#include "test.h"

#include "http_response.h"

static int released;
static void count_release(void *ctx)
{
    (void)ctx;
    released++;
}

static bool status_line_is(const struct response *r, const char *want)
{
    size_t n = strlen(want);
    return r->head_len >= n && memcmp(r->head, want, n) == 0;
}

TEST(owned_body_is_released_once_when_cleared)
{
    static const char body[] = "owned";
    struct response r;
    resp_init(&r);
    resp_start(&r, 200);
    released = 0;
    CHECK(resp_body_owned(&r, body, 5, count_release, NULL) == 0);
    CHECK_EQ_INT(resp_content_length(&r), 5);
    resp_body_clear(&r);
    CHECK_EQ_INT(released, 1);
    CHECK_EQ_INT(resp_content_length(&r), 0);
    resp_body_clear(&r);
    CHECK_EQ_INT(released, 1);
}

TEST(a_second_owned_body_fails_and_is_released)
{
    static const char body[] = "ab";
    struct response r;
    resp_init(&r);
    resp_start(&r, 200);
    released = 0;
    resp_body_owned(&r, body, 1, count_release, NULL);
    CHECK(resp_body_owned(&r, body + 1, 1, count_release, NULL) < 0);
    CHECK_EQ_INT(released, 1); /* the second: the first stays in use */
    CHECK(resp_failed(&r));
    resp_body_clear(&r);
    CHECK_EQ_INT(released, 2);
}

TEST(body_alloc_uses_scratch_when_it_fits)
{
    struct response r;
    resp_init(&r);
    resp_start(&r, 200);
    char *p = resp_body_alloc(&r, 100);
    CHECK(p >= r.scratch && p < r.scratch + RESP_SCRATCH_CAP);
    CHECK(r.release == NULL);
}

TEST(body_alloc_beyond_scratch_is_owned_by_the_response)
{
    struct response r;
    resp_init(&r);
    resp_start(&r, 200);
    char *p = resp_body_alloc(&r, RESP_SCRATCH_CAP + 1);
    CHECK(p != NULL);
    memset(p, 'x', RESP_SCRATCH_CAP + 1);
    CHECK(resp_body_mem(&r, p, RESP_SCRATCH_CAP + 1) == 0);
    CHECK(r.release != NULL);
    resp_body_clear(&r); /* frees it (ASan and valgrind would see a leak otherwise) */
    CHECK(r.release == NULL);
}

TEST(set_status_rewrites_the_status_line_and_keeps_the_headers)
{
    struct response r;
    resp_init(&r);
    resp_start(&r, 200);
    resp_header(&r, "ETag", "\"x\"");
    resp_set_status(&r, 304);
    CHECK(status_line_is(&r, "HTTP/1.1 304 Not Modified\r\n"));
    CHECK_EQ_INT(resp_status(&r), 304);
    CHECK_EQ_INT(resp_body_bytes(&r), 0);
    size_t len;
    CHECK(resp_header_get(&r, "ETag", &len) != NULL);
}

TEST(set_reason_replaces_the_phrase_only)
{
    struct response r;
    resp_init(&r);
    resp_start(&r, 404);
    resp_set_reason(&r, "Gone Fishing", 12);
    CHECK(status_line_is(&r, "HTTP/1.1 404 Gone Fishing\r\n"));
    CHECK_EQ_INT(resp_status(&r), 404);
    resp_set_reason(&r, "", 0); /* empty: left as it is */
    CHECK(status_line_is(&r, "HTTP/1.1 404 Gone Fishing\r\n"));
}

TEST(stream_length_is_ignored_for_a_status_without_body)
{
    struct response r;
    resp_init(&r);
    resp_start(&r, 304);
    resp_stream_length(&r, 10);
    CHECK(!r.length_known);
    resp_start(&r, 200);
    resp_stream_length(&r, 10);
    CHECK(r.length_known);
    CHECK_EQ_INT(resp_content_length(&r), 10);
}

TEST(server_name_is_what_the_header_says)
{
    CHECK(strcmp(http_response_server(), "lfhttpd") == 0);
    http_response_set_server("lfhttpd/9.9");
    CHECK(strcmp(http_response_server(), "lfhttpd/9.9") == 0);
    struct response r;
    resp_init(&r);
    resp_start(&r, 200);
    size_t len;
    const char *v = resp_header_get(&r, "Server", &len);
    CHECK(v && len == 11 && memcmp(v, "lfhttpd/9.9", 11) == 0);
    http_response_set_server("lfhttpd");
}
