/* Unit tests of the response API that modules use: owned memory, room for a body, a new
 * status or reason phrase, a stream's length, the Server name. */
#define TEST_MAIN
#include "test.h"

#include "http_response.h"

#include <strings.h>

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

/* --- finding a header in the head ------------------------------------------------------- */

/* The value of `name` found by reading the head's text line by line, as a client would. */
static const char *value_in_text(const struct response *r, const char *name, size_t *len)
{
    size_t nl = strlen(name);
    const char *p = memchr(r->head, '\n', r->head_len), *end = r->head + r->head_len;
    while (p && p + 1 < end) {
        const char *line = p + 1, *eol = memchr(line, '\n', (size_t)(end - line));
        if (!eol)
            return NULL;
        if ((size_t)(eol - line) > nl && line[nl] == ':' && strncasecmp(line, name, nl) == 0) {
            const char *v = line + nl + 1;
            while (*v == ' ')
                v++;
            *len = (size_t)(eol - 1 - v);
            return v;
        }
        p = eol;
    }
    return NULL;
}

static bool lookup_agrees_with_text(const struct response *r, const char *name)
{
    size_t got_len = 0, want_len = 0;
    const char *got = resp_header_get(r, name, &got_len);
    const char *want = value_in_text(r, name, &want_len);
    return got == want && (!got || got_len == want_len);
}

static bool value_is(const struct response *r, const char *name, const char *want)
{
    size_t len;
    const char *v = resp_header_get(r, name, &len);
    return v && len == strlen(want) && memcmp(v, want, len) == 0;
}

TEST(headers_are_found_after_a_neighbour_is_removed_and_the_status_changes)
{
    struct response r;
    resp_init(&r);
    resp_start(&r, 200);
    resp_header(&r, "A-One", "1");
    resp_header(&r, "B-Two", "22");
    resp_header(&r, "C-Three", "333");
    resp_header_remove(&r, "B-Two");
    resp_set_status(&r, 416); /* a longer status line moves every line */
    CHECK(value_is(&r, "a-one", "1"));
    CHECK(value_is(&r, "C-Three", "333"));
    size_t len;
    CHECK(resp_header_get(&r, "B-Two", &len) == NULL);
    resp_set_status(&r, 200);
    CHECK(value_is(&r, "C-Three", "333"));
    CHECK(value_is(&r, "Server", "lfhttpd"));
}

TEST(set_replaces_every_line_of_the_name)
{
    struct response r;
    resp_init(&r);
    resp_start(&r, 200);
    resp_header(&r, "Vary", "Cookie");
    resp_header(&r, "X", "y");
    resp_header(&r, "Vary", "Origin");
    resp_header_set(&r, "Vary", "Accept-Encoding");
    CHECK(value_is(&r, "Vary", "Accept-Encoding"));
    CHECK(value_is(&r, "X", "y"));
    const char *tail = "X: y\r\nVary: Accept-Encoding\r\n";
    CHECK(r.head_len > strlen(tail));
    CHECK(memcmp(r.head + r.head_len - strlen(tail), tail, strlen(tail)) == 0);
}

TEST(headers_written_by_finish_are_found_and_removing_one_keeps_the_blank_line)
{
    struct response r;
    resp_init(&r);
    resp_start(&r, 200);
    resp_header(&r, "X", "y");
    r.keep_alive = true;
    resp_finish(&r, true);
    CHECK(value_is(&r, "Content-Length", "0"));
    CHECK(value_is(&r, "Connection", "keep-alive"));
    resp_header_remove(&r, "Connection");
    const char *tail = "X: y\r\nContent-Length: 0\r\n\r\n";
    CHECK(memcmp(r.head + r.head_len - strlen(tail), tail, strlen(tail)) == 0);
}

/* More lines than the response remembers: lookups still find every one of them. */
TEST(headers_past_the_remembered_lines_are_found)
{
    struct response r;
    resp_init(&r);
    resp_start(&r, 200);
    char name[16], value[16];
    for (int i = 0; i < RESP_INDEXED_LINES + 8; i++) {
        snprintf(name, sizeof name, "X-%d", i);
        snprintf(value, sizeof value, "v%d", i);
        CHECK_EQ_INT(resp_header(&r, name, value), 0);
    }
    CHECK(value_is(&r, "X-0", "v0"));
    snprintf(name, sizeof name, "X-%d", RESP_INDEXED_LINES + 7);
    snprintf(value, sizeof value, "v%d", RESP_INDEXED_LINES + 7);
    CHECK(value_is(&r, name, value));
    resp_header_remove(&r, "X-3");
    CHECK(lookup_agrees_with_text(&r, "X-3") && lookup_agrees_with_text(&r, "X-4"));
    resp_set_status(&r, 404);
    CHECK(value_is(&r, "X-4", "v4"));
}

/* Any mix of adds, removals, replacements, status changes and restarts: every lookup
 * finds what the head's text says. */
TEST(lookups_agree_with_the_head_text_after_any_sequence_of_changes)
{
    static const char *const names[] = {"Vary", "ETag", "Content-Type", "X-A", "x-a", "Link"};
    static const int statuses[] = {200, 304, 416, 100, 505};
    unsigned seed = 12345;
    struct response r;
    resp_init(&r);
    resp_start(&r, 200);
    for (int step = 0; step < 20000; step++) {
        seed = seed * 1103515245u + 12345u;
        unsigned pick = (seed >> 16) % 100, n = (seed >> 8) % 6;
        char value[32];
        snprintf(value, sizeof value, "v%u", (seed >> 4) % (1u + step % 50));
        if (pick < 45)
            resp_header(&r, names[n], value);
        else if (pick < 55)
            resp_headerf(&r, "%s: f%s", names[n], value);
        else if (pick < 70)
            resp_header_remove(&r, names[n]);
        else if (pick < 85)
            resp_header_set(&r, names[n], value);
        else if (pick < 97)
            resp_set_status(&r, statuses[n % 5]);
        else
            resp_start(&r, 200);
        if (r.overflow)
            resp_start(&r, 200);
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            CHECK(lookup_agrees_with_text(&r, names[i]));
        CHECK(lookup_agrees_with_text(&r, "Date") && lookup_agrees_with_text(&r, "Server"));
    }
}

TEST(start_writes_the_status_line_then_date_and_server)
{
    static const int statuses[] = {200, 404, 206, 1000};
    static const char *const lines[] = {"HTTP/1.1 200 OK\r\nDate: ",
                                        "HTTP/1.1 404 Not Found\r\nDate: ",
                                        "HTTP/1.1 206 Partial Content\r\nDate: ",
                                        "HTTP/1.1 500 Unknown\r\nDate: "};
    for (int i = 0; i < 4; i++) {
        struct response r;
        resp_init(&r);
        resp_start(&r, statuses[i]);
        CHECK(status_line_is(&r, lines[i]));
        CHECK(value_is(&r, "Server", "lfhttpd"));
        CHECK(lookup_agrees_with_text(&r, "Date"));
    }
}

TEST(header_line_is_name_colon_space_value_crlf)
{
    struct response r;
    resp_init(&r);
    resp_start(&r, 200);
    size_t before = r.head_len;
    CHECK_EQ_INT(resp_header(&r, "Content-Type", "text/plain"), 0);
    CHECK_EQ_INT(r.head_len - before, strlen("Content-Type: text/plain\r\n"));
    CHECK(memcmp(r.head + before, "Content-Type: text/plain\r\n", r.head_len - before) == 0);
}
