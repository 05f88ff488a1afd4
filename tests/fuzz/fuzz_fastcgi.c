/* fuzz_fastcgi.c — libFuzzer target for the FastCGI record reader (fcgi_read in
 * server/fastcgi_record.c) and the head of the answer it carries (cgi_parse_head, which
 * mod_fastcgi reads it with).
 *
 * Input: byte 0 picks the size of the pieces the rest is handed over in (1 to 256 bytes),
 * as an application's answer arrives in reads of any size; the rest is what an
 * application sends. Seeds: tests/fuzz/corpus/fuzz_fastcgi/.
 *
 * What it checks, beyond "no crash, no sanitizer report":
 *   - every call takes at most what it was given, and makes progress (takes bytes or
 *     reports an event), slices lie inside the piece given;
 *   - reading in pieces gives the same STDOUT and STDERR streams and the same end (END,
 *     error, or more wanted) as reading all at once;
 *   - nothing is reported after END_REQUEST or an error;
 *   - the STDOUT stream's head, when it parses, makes a response head whose lines hold no
 *     CR, LF or NUL inside;
 *   - a name-value pair written by fcgi_param decodes back to itself.
 * Links: server/fastcgi_record.c and modules/mod_cgi.c with every server object but
 * main.c: see the Makefile's fuzz rule.
 */
#include "fastcgi_record.h"
#include "http_response.h"
#include "mod_cgi.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REQUIRE(x)                                                                             \
    do {                                                                                       \
        if (!(x)) {                                                                            \
            fprintf(stderr, "FAIL %s:%d %s\n", __FILE__, __LINE__, #x);                        \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

#define STREAM_MAX (1 << 20)

struct outcome {
    uint8_t out[STREAM_MAX], err[STREAM_MAX];
    size_t out_len, err_len;
    enum fcgi_event last; /* FCGI_EV_END, FCGI_EV_ERROR or FCGI_EV_NEED */
    uint8_t protocol_status;
};

static void read_all(const uint8_t *p, size_t n, size_t piece, struct outcome *o)
{
    struct fcgi_reader r;
    fcgi_reader_init(&r, 1);
    o->out_len = o->err_len = 0;
    o->last = FCGI_EV_NEED;
    for (size_t at = 0; at < n;) {
        size_t len = n - at < piece ? n - at : piece;
        size_t off = 0;
        for (;;) {
            size_t used;
            const uint8_t *data;
            size_t dlen;
            enum fcgi_event ev = fcgi_read(&r, p + at + off, len - off, &used, &data, &dlen);
            REQUIRE(used <= len - off);
            if (ev == FCGI_EV_NEED) {
                REQUIRE(used == len - off);
                break;
            }
            REQUIRE(used > 0);
            off += used;
            if (ev == FCGI_EV_STDOUT || ev == FCGI_EV_STDERR) {
                REQUIRE(dlen > 0 && data >= p + at && data + dlen <= p + at + off);
                uint8_t *dst = ev == FCGI_EV_STDOUT ? o->out : o->err;
                size_t *dl = ev == FCGI_EV_STDOUT ? &o->out_len : &o->err_len;
                REQUIRE(*dl + dlen <= STREAM_MAX);
                memcpy(dst + *dl, data, dlen);
                *dl += dlen;
                continue;
            }
            o->last = ev; /* END or ERROR: the connection is over */
            if (ev == FCGI_EV_END)
                o->protocol_status = r.protocol_status;
            else
                REQUIRE(r.why != NULL);
            return;
        }
        at += len;
    }
}

static void check_head(const uint8_t *p, size_t n)
{
    struct response resp;
    resp_init(&resp);
    int used = cgi_parse_head((const char *)p, n, &resp);
    REQUIRE(used >= -1 && (used <= 0 || (size_t)used <= n));
    if (used > 0 && !resp_failed(&resp)) {
        resp_finish(&resp, false);
        const char *h = resp.head;
        size_t len = resp.head_len;
        REQUIRE(len >= 4 && memcmp(h + len - 4, "\r\n\r\n", 4) == 0);
        for (size_t i = 0; i + 1 < len; i++) {
            if (h[i] == '\r')
                REQUIRE(h[i + 1] == '\n');
            if (h[i] == '\n')
                REQUIRE(i > 0 && h[i - 1] == '\r');
            REQUIRE(h[i] != '\0');
        }
    }
    resp_body_clear(&resp);
}

static void check_param(const uint8_t *p, size_t n)
{
    size_t split = n ? p[0] % (n + 1) : 0;
    uint8_t out[1024];
    size_t w = fcgi_param(out, sizeof(out), (const char *)p, split, (const char *)p + split,
                          n - split);
    if (w == 0) {
        REQUIRE(n + 8 > sizeof(out));
        return;
    }
    size_t at = 0, len[2];
    for (int k = 0; k < 2; k++) {
        if (out[at] & 0x80) {
            len[k] = (size_t)(out[at] & 0x7f) << 24 | (size_t)out[at + 1] << 16 |
                     (size_t)out[at + 2] << 8 | out[at + 3];
            at += 4;
        } else {
            len[k] = out[at++];
        }
    }
    REQUIRE(len[0] == split && len[1] == n - split && at + n == w);
    REQUIRE(memcmp(out + at, p, n) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct outcome whole, pieces;
    if (size < 1)
        return 0;
    size_t piece = (size_t)data[0] % 256 + 1;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    read_all(p, n, n ? n : 1, &whole);
    read_all(p, n, piece, &pieces);
    REQUIRE(whole.last == pieces.last);
    REQUIRE(whole.out_len == pieces.out_len && whole.err_len == pieces.err_len);
    REQUIRE(memcmp(whole.out, pieces.out, whole.out_len) == 0);
    REQUIRE(memcmp(whole.err, pieces.err, whole.err_len) == 0);
    if (whole.last == FCGI_EV_END)
        REQUIRE(whole.protocol_status == pieces.protocol_status);
    check_head(whole.out, whole.out_len);
    check_param(p, n < 600 ? n : 600);
    return 0;
}
