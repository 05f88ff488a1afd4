/* fuzz_http_parse.c — libFuzzer target for the pure parsing functions of http_parse.h.
 *
 * The first input byte selects the function (request head, chunked decoder, Range, dates,
 * path normalization), the second is a knob (limits, sizes, split points); the rest is
 * the input. Beyond "no crash, no sanitizer report" it checks properties: every slice
 * points into the buffer; a prefix of a request parses to "incomplete" or the same
 * result; chunked decoding gives the same bytes for any split of the stream; ranges are
 * in bounds and disjoint; formatted dates parse back; normalized paths hold no dot
 * segments or double slashes, and normalizing them again changes nothing.
 *
 * Build and run: make fuzz FUZZ_SECONDS=60
 */
#include "http_parse.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define REQUIRE(x) do { if (!(x)) { fprintf(stderr, "FAIL %s:%d %s\n", __FILE__, __LINE__, #x); abort(); } } while (0)

static int ok_status(int rc, size_t len) {
    if (rc >= 0) return (size_t)rc <= len;
    return rc == -400 || rc == -414 || rc == -431 || rc == -501 || rc == -505 || rc == -417;
}
static int in_buf(struct http_slice s, const char *b, size_t len) {
    if (s.len == 0) return 1;
    return s.p >= b && s.p + s.len <= b + len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    unsigned sel = data[0] % 5, knob = data[1];
    const char *in = (const char *)data + 2;
    size_t len = size - 2;
    char *copy = malloc(len + 1);
    memcpy(copy, in, len);
    if (sel == 0) {
        struct http_limits lim = {.max_header_bytes = 64 + knob * 4, .max_headers = knob % 70};
        static struct http_request r, r2;
        int rc = http_parse_request(copy, len, &lim, &r);
        REQUIRE(ok_status(rc, len));
        if (rc > 0) {
            REQUIRE((size_t)rc == r.header_bytes);
            REQUIRE(in_buf(r.method_name, copy, len) && in_buf(r.target, copy, len));
            REQUIRE(r.n_headers <= HTTP_MAX_HEADERS);
            for (unsigned i = 0; i < r.n_headers; i++)
                REQUIRE(in_buf(r.headers[i].name, copy, len) && in_buf(r.headers[i].value, copy, len));
            REQUIRE(r.method == HTTP_METHOD_CONNECT || r.path.len > 0);
            struct http_origin_form of = http_origin_form(&r); /* all in the buffer but "/" */
            REQUIRE(in_buf(of.query, copy, len));
            REQUIRE(in_buf(of.path, copy, len) || (of.path.len == 1 && of.path.p[0] == '/'));
            if (r.version_minor == 1) REQUIRE(r.host.len > 0);
            if (r.framing == HTTP_BODY_CHUNKED) REQUIRE(r.version_minor == 1);
        }
        size_t cut = len ? (knob * 7919u) % len : 0;
        int rc2 = http_parse_request(copy, cut, &lim, &r2);
        REQUIRE(ok_status(rc2, cut));
        if (rc2 != 0) REQUIRE(rc2 == rc);
    } else if (sel == 1) {
        static char buf1[1 << 16], buf2[1 << 16], out2[1 << 16];
        if (len > sizeof buf1) goto done;
        uint64_t maxb = knob & 1 ? knob * 3 : 0;
        struct http_chunked c1, c2;
        http_chunked_init(&c1); http_chunked_init(&c2);
        memcpy(buf1, in, len);
        size_t u1, o1;
        enum http_chunked_result a = http_chunked_decode(&c1, buf1, len, maxb, &u1, &o1);
        REQUIRE(u1 <= len && o1 <= u1);
        if (a == HTTP_CHUNKED_MORE) REQUIRE(u1 == len);
        if (a == HTTP_CHUNKED_DONE) REQUIRE(memcmp(buf1 + u1, in + u1, len - u1) == 0);
        /* pieces of pseudo-random sizes */
        size_t pos = 0, outn = 0, step = 1 + knob % 13;
        enum http_chunked_result b = HTTP_CHUNKED_MORE;
        size_t used_total = 0;
        while (b == HTTP_CHUNKED_MORE && pos < len) {
            size_t n = len - pos < step ? len - pos : step;
            memcpy(buf2, in + pos, n);
            size_t u, o;
            b = http_chunked_decode(&c2, buf2, n, maxb, &u, &o);
            memcpy(out2 + outn, buf2, o); outn += o;
            used_total = pos + u;
            if (b == HTTP_CHUNKED_MORE) REQUIRE(u == n);
            pos += n;
            step = 1 + (step * 31 + 7) % 17;
        }
        if (len == 0) { b = a; used_total = u1; }
        REQUIRE(a == b);
        REQUIRE(u1 == used_total);
        REQUIRE(o1 == outn && memcmp(buf1, out2, o1) == 0);
    } else if (sel == 2) {
        struct http_range r[8];
        unsigned n = 77;
        uint64_t sz = knob < 200 ? knob : (uint64_t)knob << 40;
        enum http_range_result rr = http_range_parse((struct http_slice){copy, len}, sz, r, knob % 9, &n);
        if (rr == HTTP_RANGE_OK) {
            REQUIRE(n >= 1 && n <= knob % 9);
            for (unsigned i = 0; i < n; i++) {
                REQUIRE(r[i].first <= r[i].last && r[i].last < sz);
                for (unsigned j = 0; j < i; j++)
                    REQUIRE(r[i].last < r[j].first || r[j].last < r[i].first);
            }
        } else REQUIRE(n == 0);
    } else if (sel == 3) {
        int64_t t;
        if (http_date_parse((struct http_slice){copy, len}, &t) == 0) {
            char out[30]; int64_t t2;
            http_date_format(t, out);
            REQUIRE(strlen(out) == 29);
            REQUIRE(http_date_parse((struct http_slice){out, 29}, &t2) == 0);
            REQUIRE(t2 == t || (t2 + 1 == t)); /* leap second 60 formats as :00 of next min: same t */
        }
        char out[30];
        int64_t tt; memcpy(&tt, data, size >= 8 ? 8 : 0);
        http_date_format(size >= 8 ? tt : 0, out);
        REQUIRE(strlen(out) == 29);
    } else {
        static char out[4096];
        size_t cap = knob * 3;
        long rc = http_path_normalize((struct http_slice){copy, len}, out, cap);
        REQUIRE(rc == -400 || rc == -414 || rc >= 0);
        if (rc >= 0) {
            REQUIRE((size_t)rc < cap && out[rc] == 0 && strlen(out) == (size_t)rc && out[0] == '/');
            REQUIRE(!strstr(out, "//") && !strstr(out, "/./") && !strstr(out, "/../"));
            size_t L = (size_t)rc;
            REQUIRE(!(L >= 2 && !strcmp(out + L - 2, "/.")) && !(L >= 3 && !strcmp(out + L - 3, "/..")));
            /* normalizing is idempotent once escapes are gone */
            if (!memchr(out, '%', L)) {
                static char again[4096];
                REQUIRE(http_path_normalize((struct http_slice){out, L}, again, sizeof again) == rc);
                REQUIRE(!memcmp(again, out, L));
            }
        }
    }
done:
    free(copy);
    return 0;
}
