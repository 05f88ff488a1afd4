/* fuzz_chunked.c — libFuzzer target for the chunked body decoder (http_chunked_decode).
 *
 * What it checks, beyond "no crash, no sanitizer report":
 *   - split invariance: the stream decoded in one call, and in pieces of pseudo-random
 *     sizes (chosen from a hash of the input), gives the same result, the same bytes
 *     consumed and the same data bytes;
 *   - in place: the decoded bytes are a subsequence of the input, never more than it,
 *     and input after the end of the body (DONE) is left untouched;
 *   - the body limit: with max_body B, a body the unbounded decoder accepts with at most
 *     B bytes is accepted identically, one with more is TOO_LARGE, and a bounded decoder
 *     never reports DONE or MORE where the unbounded one found an ERROR;
 *   - round trip: when the input's first byte is '!', the rest is data that the target
 *     encodes itself (chunk sizes, extensions, trailers picked from the data) into a valid
 *     chunked stream, which must decode to exactly that data.
 *
 * Input: the raw chunked stream as it follows a request head (seeds in
 *   tests/fuzz/corpus/fuzz_chunked/: real bodies with extensions, trailers, CRLF).
 * Links: server/http_parse.c only.
 * Build and run by hand:
 *   clang -O1 -g -fsanitize=fuzzer,address,undefined -std=c11 -D_GNU_SOURCE -Iserver \
 *     -o build/fuzz/fuzz_chunked tests/fuzz/fuzz_chunked.c server/http_parse.c
 *   build/fuzz/fuzz_chunked -max_total_time=60 build/fuzz/corpus-fuzz_chunked \
 *     tests/fuzz/corpus/fuzz_chunked
 * or `make fuzz FUZZ_SECONDS=60` (every target).
 */
#include "http_parse.h"

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

#define MAX_IN (1 << 16)

static uint64_t fnv(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

struct outcome {
    enum http_chunked_result res;
    size_t used; /* input bytes consumed */
    size_t out;  /* data bytes produced */
};

/* Decode in one call; the decoded data is left at the start of buf. */
static struct outcome decode_whole(const uint8_t *in, size_t len, uint64_t max_body, char *buf)
{
    struct http_chunked c;
    http_chunked_init(&c);
    memcpy(buf, in, len);
    struct outcome o;
    o.res = http_chunked_decode(&c, buf, len, max_body, &o.used, &o.out);
    REQUIRE(o.used <= len && o.out <= o.used);
    if (o.res == HTTP_CHUNKED_MORE)
        REQUIRE(o.used == len);
    if (o.res == HTTP_CHUNKED_DONE) /* what follows the body is for the next request */
        REQUIRE(memcmp(buf + o.used, in + o.used, len - o.used) == 0);
    REQUIRE(c.total == o.out || o.res < 0);
    return o;
}

/* Decode in pieces: step sizes from the seed; data collected into out. */
static struct outcome decode_split(const uint8_t *in, size_t len, uint64_t max_body,
                                   uint64_t seed, char *out)
{
    static char piece[MAX_IN];
    struct http_chunked c;
    http_chunked_init(&c);
    struct outcome o = {HTTP_CHUNKED_MORE, 0, 0};
    size_t pos = 0;
    while (o.res == HTTP_CHUNKED_MORE && pos < len) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        size_t step = 1 + (size_t)(seed >> 33) % 23;
        if ((seed >> 20) % 7 == 0)
            step = len - pos; /* sometimes all the rest at once */
        size_t n = len - pos < step ? len - pos : step;
        memcpy(piece, in + pos, n);
        size_t u, w;
        o.res = http_chunked_decode(&c, piece, n, max_body, &u, &w);
        REQUIRE(u <= n && w <= u);
        if (o.res == HTTP_CHUNKED_MORE)
            REQUIRE(u == n);
        memcpy(out + o.out, piece, w);
        o.out += w;
        o.used = pos + u;
        pos += n;
    }
    return o;
}

/* Is needle[0..n) a subsequence of hay[0..m)? (The decoder only ever drops bytes.) */
static int subsequence(const char *needle, size_t n, const uint8_t *hay, size_t m)
{
    size_t j = 0;
    for (size_t i = 0; i < m && j < n; i++)
        if ((uint8_t)needle[j] == hay[i])
            j++;
    return j == n;
}

/* Encode data as a valid chunked stream, shapes taken from the data itself. */
static size_t encode(const uint8_t *data, size_t len, char *out, size_t cap)
{
    static const char *const exts[] = {"", ";a", ";a=b", " ; name = \"q\\\"v\"", ";x=1;y=\"\"",
                                       "\t;t"};
    static const char *const trailers[] = {"", "X-T: v\r\n", "A: \r\nB:b c\r\n",
                                           "Server-Timing: x;dur=1\r\n"};
    uint64_t h = fnv(data, len);
    size_t pos = 0, o = 0;
    while (pos < len) {
        h = h * 6364136223846793005ull + 1442695040888963407ull;
        size_t n = 1 + (size_t)(h >> 40) % 300;
        if (n > len - pos)
            n = len - pos;
        const char *ext = exts[(h >> 8) % (sizeof exts / sizeof exts[0])];
        int zeros = (int)((h >> 16) % 3);
        int upper = (int)((h >> 18) & 1);
        int w = snprintf(out + o, cap - o, "%.*s%zx%s\r\n", zeros, "00", n, ext);
        if (upper)
            for (int i = 0; i < w; i++)
                if (out[o + i] >= 'a' && out[o + i] <= 'f')
                    out[o + i] = (char)(out[o + i] - 32);
        o += (size_t)w;
        memcpy(out + o, data + pos, n);
        o += n;
        memcpy(out + o, "\r\n", 2);
        o += 2;
        pos += n;
    }
    const char *tr = trailers[(h >> 3) % (sizeof trailers / sizeof trailers[0])];
    o += (size_t)snprintf(out + o, cap - o, "0%s\r\n%s\r\n", exts[h % 2], tr);
    return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char whole[MAX_IN], split[MAX_IN], bounded[MAX_IN], enc[MAX_IN * 2];
    if (size > MAX_IN / 2)
        return 0;

    if (size > 0 && data[0] == '!') { /* round trip */
        size_t n = encode(data + 1, size - 1, enc, sizeof enc);
        static char buf[MAX_IN * 2];
        struct http_chunked c;
        http_chunked_init(&c);
        memcpy(buf, enc, n);
        memcpy(buf + n, "GET /", 5); /* the next pipelined request must stay where it is */
        size_t used, out;
        enum http_chunked_result r = http_chunked_decode(&c, buf, n + 5, 0, &used, &out);
        REQUIRE(r == HTTP_CHUNKED_DONE);
        REQUIRE(used == n);
        REQUIRE(out == size - 1 && memcmp(buf, data + 1, out) == 0);
        REQUIRE(memcmp(buf + n, "GET /", 5) == 0);
        return 0;
    }

    uint64_t h = fnv(data, size);
    struct outcome a = decode_whole(data, size, 0, whole);
    REQUIRE(subsequence(whole, a.out, data, size));

    struct outcome b = decode_split(data, size, 0, h, split);
    REQUIRE(a.res == b.res);
    REQUIRE(a.used == b.used);
    REQUIRE(a.out == b.out && memcmp(whole, split, a.out) == 0);

    /* the same stream under a body limit */
    uint64_t max_body = 1 + (h >> 7) % (size + 2);
    struct outcome c = decode_whole(data, size, max_body, bounded);
    if (a.res == HTTP_CHUNKED_DONE && a.out <= max_body) {
        REQUIRE(c.res == HTTP_CHUNKED_DONE && c.used == a.used && c.out == a.out);
        REQUIRE(memcmp(bounded, whole, a.out) == 0);
    } else if (a.res == HTTP_CHUNKED_DONE) {
        REQUIRE(c.res == HTTP_CHUNKED_TOO_LARGE);
    } else if (a.res == HTTP_CHUNKED_ERROR) {
        REQUIRE(c.res == HTTP_CHUNKED_ERROR || c.res == HTTP_CHUNKED_TOO_LARGE);
    } else { /* MORE */
        REQUIRE(c.res == HTTP_CHUNKED_MORE || c.res == HTTP_CHUNKED_TOO_LARGE);
    }
    REQUIRE(a.res != HTTP_CHUNKED_TOO_LARGE);
    if (c.res == HTTP_CHUNKED_TOO_LARGE)
        REQUIRE(c.out <= max_body); /* nothing over the limit was ever produced */
    return 0;
}
