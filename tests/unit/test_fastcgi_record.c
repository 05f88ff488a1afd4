/* test_fastcgi_record.c — FastCGI records written and read (server/fastcgi_record.c). */
#define TEST_MAIN
#include "test.h"

#include "fastcgi_record.h"

/* A record as an application writes it. */
static size_t rec(uint8_t *out, int type, int id, const char *content, size_t n, int pad)
{
    fcgi_header(out, (enum fcgi_type)type, (uint16_t)id, (uint16_t)n, (uint8_t)pad);
    memcpy(out + 8, content, n);
    memset(out + 8 + n, 0xAA, (size_t)pad);
    return 8 + n + (size_t)pad;
}

static size_t end_request(uint8_t *out, int id, uint32_t app, int proto)
{
    uint8_t body[8] = {(uint8_t)(app >> 24), (uint8_t)(app >> 16), (uint8_t)(app >> 8),
                       (uint8_t)app, (uint8_t)proto, 0, 0, 0};
    return rec(out, FCGI_END_REQUEST, id, (const char *)body, 8, 0);
}

/* Read buf in pieces of `piece` bytes: the STDOUT stream into out, the last event. */
static enum fcgi_event read_in(const uint8_t *buf, size_t n, size_t piece, char *out,
                               size_t *out_len, struct fcgi_reader *r)
{
    fcgi_reader_init(r, 1);
    *out_len = 0;
    for (size_t at = 0; at < n; at += piece) {
        size_t len = n - at < piece ? n - at : piece, off = 0;
        for (;;) {
            size_t used, dl;
            const uint8_t *d;
            enum fcgi_event ev = fcgi_read(r, buf + at + off, len - off, &used, &d, &dl);
            off += used;
            if (ev == FCGI_EV_NEED)
                break;
            if (ev == FCGI_EV_STDOUT) {
                memcpy(out + *out_len, d, dl);
                *out_len += dl;
            } else if (ev != FCGI_EV_STDERR) {
                return ev;
            }
        }
    }
    return FCGI_EV_NEED;
}

TEST(begin_request_asks_the_responder_role)
{
    uint8_t b[16];
    fcgi_begin_request(b, 1, 0);
    static const uint8_t want[16] = {1, 1, 0, 1, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0};
    CHECK(memcmp(b, want, 16) == 0);
}

TEST(param_lengths_take_one_byte_below_128_and_four_above)
{
    uint8_t out[400];
    char value[200];
    memset(value, 'v', sizeof(value));
    size_t n = fcgi_param(out, sizeof(out), "AB", 2, value, 200);
    CHECK_EQ_INT(n, 1 + 4 + 2 + 200);
    CHECK(out[0] == 2 && out[1] == 0x80 && out[2] == 0 && out[3] == 0 && out[4] == 200);
    CHECK(memcmp(out + 5, "AB", 2) == 0);
    CHECK_EQ_INT(fcgi_param(out, 10, "AB", 2, value, 200), 0); /* does not fit */
}

TEST(stdout_split_across_records_and_pieces_is_put_together)
{
    uint8_t buf[256];
    size_t n = rec(buf, FCGI_STDOUT, 1, "Content-Type: x\r\n\r\nhel", 22, 2);
    n += rec(buf + n, FCGI_STDERR, 1, "warn", 4, 0);
    n += rec(buf + n, FCGI_STDOUT, 1, "lo", 2, 7);
    n += rec(buf + n, FCGI_STDOUT, 1, "", 0, 0);
    n += end_request(buf + n, 1, 0, FCGI_REQUEST_COMPLETE);
    for (size_t piece = 1; piece <= n; piece++) {
        char out[64];
        size_t len;
        struct fcgi_reader r;
        CHECK_EQ_INT(read_in(buf, n, piece, out, &len, &r), FCGI_EV_END);
        CHECK_EQ_INT(len, 24);
        CHECK(memcmp(out, "Content-Type: x\r\n\r\nhello", 24) == 0);
        CHECK_EQ_INT(r.protocol_status, FCGI_REQUEST_COMPLETE);
    }
}

TEST(end_request_gives_the_statuses)
{
    uint8_t buf[16];
    size_t n = end_request(buf, 1, 0x01020304, FCGI_OVERLOADED);
    char out[8];
    size_t len;
    struct fcgi_reader r;
    CHECK_EQ_INT(read_in(buf, n, n, out, &len, &r), FCGI_EV_END);
    CHECK_EQ_INT(r.app_status, 0x01020304);
    CHECK_EQ_INT(r.protocol_status, FCGI_OVERLOADED);
}

TEST(records_an_application_may_not_send_are_errors)
{
    uint8_t buf[64];
    char out[64];
    size_t len;
    struct fcgi_reader r;
    size_t n = rec(buf, FCGI_STDOUT, 2, "x", 1, 0); /* another request's */
    CHECK_EQ_INT(read_in(buf, n, n, out, &len, &r), FCGI_EV_ERROR);
    n = rec(buf, FCGI_PARAMS, 1, "x", 1, 0); /* a server's record */
    CHECK_EQ_INT(read_in(buf, n, n, out, &len, &r), FCGI_EV_ERROR);
    n = rec(buf, FCGI_STDOUT, 1, "x", 1, 0);
    buf[0] = 2; /* another version */
    CHECK_EQ_INT(read_in(buf, n, n, out, &len, &r), FCGI_EV_ERROR);
    n = rec(buf, FCGI_END_REQUEST, 1, "1234", 4, 0); /* a short END_REQUEST */
    CHECK_EQ_INT(read_in(buf, n, n, out, &len, &r), FCGI_EV_ERROR);
}

TEST(nothing_may_follow_end_request)
{
    uint8_t buf[64];
    size_t n = end_request(buf, 1, 0, 0);
    n += rec(buf + n, FCGI_STDOUT, 1, "late", 4, 0);
    struct fcgi_reader r;
    fcgi_reader_init(&r, 1);
    size_t used, dl;
    const uint8_t *d;
    CHECK_EQ_INT(fcgi_read(&r, buf, n, &used, &d, &dl), FCGI_EV_END);
    CHECK_EQ_INT(used, 16);
    CHECK_EQ_INT(fcgi_read(&r, buf + used, n - used, &used, &d, &dl), FCGI_EV_ERROR);
}
