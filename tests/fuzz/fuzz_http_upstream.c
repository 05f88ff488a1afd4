/* fuzz_http_upstream.c — libFuzzer target for the upstream response-head parser
 * (http_parse_response, server/http_upstream.h).
 *
 * Input: one byte of knobs (the request's method, the head limits), then what an
 * upstream sends on a connection: heads (1xx ones first, maybe) and a body.
 * Seeds: tests/fuzz/corpus/fuzz_http_upstream/.
 *
 * What it checks, beyond "no crash, no sanitizer report":
 *   - the result is 0, a known error code, or a head length within the input, the head
 *     ending just after its first blank line;
 *   - every slice (reason, field names and values, Upgrade) lies inside the buffer;
 *   - the framing agrees with the status and the method: no body for HEAD, 1xx, 204,
 *     304 and a 2xx to CONNECT; a body otherwise; chunked never in HTTP/1.0; a response
 *     read to the close, a 101 or one with both Transfer-Encoding and Content-Length is
 *     never kept alive;
 *   - incremental: every prefix of the stream (all of them for short inputs, a sample
 *     for long ones) parses to 0 or to the very same result, head or refusal;
 *   - 1xx heads (but 101) are followed by the next head, as the proxy reads them;
 *   - a chunked body after the final head, decoded with http_chunked_decode whole and in
 *     pieces, never reads or writes past its buffer and gives the same bytes either way.
 * Build and run: make fuzz FUZZ_SECONDS=60 (every target), or by hand as the Makefile's
 * fuzz rule does for this one file.
 */
#include "http_upstream.h"

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

static const enum http_method methods[4] = {HTTP_METHOD_GET, HTTP_METHOD_HEAD,
                                            HTTP_METHOD_CONNECT, HTTP_METHOD_POST};

static int in_buf(struct http_slice s, const char *b, size_t len)
{
    if (s.len == 0) return 1;
    return s.p >= b && s.p + s.len <= b + len;
}

static void check_result(int rc, size_t len)
{
    if (rc >= 0) {
        REQUIRE((size_t)rc <= len);
        return;
    }
    REQUIRE(rc >= HTTP_UPSTREAM_TOO_LARGE && rc <= HTTP_UPSTREAM_BAD_STATUS_LINE);
}

/* Where the first empty line (CRLF or LF alone, after a line's LF) ends, or 0. */
static size_t first_blank_end(const char *b, size_t len)
{
    size_t line = 0;
    for (size_t i = 0; i < len; i++) {
        if (b[i] != '\n')
            continue;
        size_t n = i - line; /* the line's bytes before its LF */
        if (line > 0 && (n == 0 || (n == 1 && b[line] == '\r')))
            return i + 1;
        line = i + 1;
    }
    return 0;
}

static void check_head(const struct http_response_head *h, int rc, const char *buf,
                       size_t len, enum http_method m, const struct http_limits *lim)
{
    REQUIRE((size_t)rc == h->header_bytes && h->header_bytes <= lim->max_header_bytes);
    /* the head ends at the first blank line, just after it: status line, fields, an empty
     * line, each ended by CRLF or a bare LF (as nginx takes an upstream's); the shortest
     * is "HTTP/1.1 200\n\n" */
    REQUIRE(rc >= 14 && first_blank_end(buf, len) == (size_t)rc);
    REQUIRE(h->status >= 100 && h->status <= 599);
    REQUIRE(h->version_minor == 0 || h->version_minor == 1);
    REQUIRE(h->n_headers <= lim->max_headers && h->n_headers <= HTTP_MAX_HEADERS);
    REQUIRE(in_buf(h->reason, buf, len) && in_buf(h->upgrade, buf, len));
    for (unsigned i = 0; i < h->n_headers; i++) {
        REQUIRE(h->headers[i].name.len > 0);
        REQUIRE(in_buf(h->headers[i].name, buf, len) && in_buf(h->headers[i].value, buf, len));
    }
    int s = h->status;
    int bodiless = m == HTTP_METHOD_HEAD || s < 200 || s == 204 || s == 304 ||
                   (m == HTTP_METHOD_CONNECT && s < 300);
    REQUIRE(bodiless == (h->framing == HTTP_BODY_NONE));
    if (h->framing == HTTP_BODY_LENGTH) REQUIRE(h->has_content_length && !h->te_and_length);
    if (h->framing == HTTP_BODY_CHUNKED) REQUIRE(h->version_minor == 1);
    if (h->framing == HTTP_BODY_CLOSE || h->te_and_length || s == 101) REQUIRE(!h->keep_alive);
}

static int same_head(const struct http_response_head *a, const struct http_response_head *b)
{
    if (a->status != b->status || a->version_minor != b->version_minor ||
        a->n_headers != b->n_headers || a->framing != b->framing ||
        a->content_length != b->content_length || a->keep_alive != b->keep_alive ||
        a->header_bytes != b->header_bytes || a->reason.p != b->reason.p ||
        a->reason.len != b->reason.len || a->upgrade.p != b->upgrade.p ||
        a->te_and_length != b->te_and_length || a->other_codings != b->other_codings ||
        a->connection_names_fields != b->connection_names_fields ||
        a->connection_upgrade != b->connection_upgrade)
        return 0;
    for (unsigned i = 0; i < a->n_headers; i++)
        if (a->headers[i].name.p != b->headers[i].name.p ||
            a->headers[i].name.len != b->headers[i].name.len ||
            a->headers[i].value.p != b->headers[i].value.p ||
            a->headers[i].value.len != b->headers[i].value.len)
            return 0;
    return 1;
}

/* Every prefix (or a sample of them) gives 0 or exactly the whole buffer's answer. */
static void check_prefixes(const char *buf, size_t len, const struct http_limits *lim,
                           enum http_method m, int rc, const struct http_response_head *whole)
{
    static struct http_response_head part;
    size_t step = len <= 512 ? 1 : len / 64 + 1;
    for (size_t i = 0; i < len; i += step) {
        int r = http_parse_response(buf, i, lim, m, &part);
        REQUIRE(r == 0 || r == rc);
        if (r > 0) REQUIRE(same_head(&part, whole));
    }
    if (rc > 0) { /* one byte short of the blank line's end: never complete */
        REQUIRE(http_parse_response(buf, (size_t)rc - 1, lim, m, &part) == 0);
    }
}

/* A chunked body, decoded whole and in pieces of varying size: same bytes, no overrun. */
static void check_chunked_body(const char *body, size_t len, unsigned knob)
{
    char *whole = malloc(len + 1), *piece = malloc(len + 1), *joined = malloc(len + 1);
    REQUIRE(whole && piece && joined);
    memcpy(whole, body, len);
    struct http_chunked c1, c2;
    http_chunked_init(&c1);
    http_chunked_init(&c2);
    size_t used1, out1;
    enum http_chunked_result a = http_chunked_decode(&c1, whole, len, 0, &used1, &out1);
    REQUIRE(used1 <= len && out1 <= used1);
    if (a == HTTP_CHUNKED_MORE) REQUIRE(used1 == len);
    size_t pos = 0, joined_len = 0, used2 = 0, step = 1 + knob % 11;
    enum http_chunked_result b = HTTP_CHUNKED_MORE;
    while (b == HTTP_CHUNKED_MORE && pos < len) {
        size_t n = len - pos < step ? len - pos : step;
        memcpy(piece, body + pos, n);
        size_t u, o;
        b = http_chunked_decode(&c2, piece, n, 0, &u, &o);
        REQUIRE(u <= n && o <= u);
        memcpy(joined + joined_len, piece, o);
        joined_len += o;
        used2 = pos + u;
        pos += n;
        step = 1 + (step * 31 + 7) % 17;
    }
    if (len > 0) {
        REQUIRE(a == b && used1 == used2);
        REQUIRE(out1 == joined_len && memcmp(whole, joined, out1) == 0);
    }
    free(whole);
    free(piece);
    free(joined);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    unsigned knob = data[0];
    enum http_method m = methods[knob & 3];
    /* mostly roomy limits, sometimes tight ones */
    struct http_limits lim = {.max_header_bytes = knob & 4 ? 64 + (knob >> 3) * 16 : 8192,
                              .max_headers = knob & 4 ? (knob >> 3) % 8 : 64};
    size_t len = size - 1;
    char *buf = malloc(len ? len : 1); /* exact size: a read past it is reported */
    REQUIRE(buf != NULL);
    memcpy(buf, data + 1, len);

    static struct http_response_head h;
    size_t off = 0;
    for (int heads = 0; heads < 16; heads++) {
        int rc = http_parse_response(buf + off, len - off, &lim, m, &h);
        check_result(rc, len - off);
        check_prefixes(buf + off, len - off, &lim, m, rc, &h);
        if (rc <= 0) break;
        /* check_prefixes used its own struct: h is still the whole buffer's head */
        check_head(&h, rc, buf + off, len - off, m, &lim);
        off += (size_t)rc;
        if (h.status >= 200 || h.status == 101) {
            if (h.framing == HTTP_BODY_CHUNKED) check_chunked_body(buf + off, len - off, knob);
            break;
        }
    }
    free(buf);
    return 0;
}
