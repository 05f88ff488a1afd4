/* fuzz_range.c — libFuzzer target for the Range header parser (http_range_parse).
 *
 * Input: an optional first line "SIZE\n" (the representation's length, decimal; else a
 * length derived from a hash of the input, sometimes 0, sometimes near 2^64), then the
 * Range field value as a client sends it. Seeds: tests/fuzz/corpus/fuzz_range/.
 *
 * What it checks, beyond "no crash, no sanitizer report":
 *   - the answer matches an independent reference implementation of RFC 9110 section
 *     14.1.2 as the server documents it (http_parse.h): "bytes=" (any case), a list of
 *     int-range / suffix-range with OWS and empty elements, at most max_ranges specs, a
 *     malformed spec or overlapping ranges ignore the header, none satisfiable is 416;
 *   - every range returned is in bounds (first <= last < size), they are disjoint, and
 *     there are at most max_ranges of them;
 *   - nothing is read outside the value (ASan, the value is copied to an exact-size heap
 *     buffer with no NUL after it).
 * Links: server/http_parse.c only.
 * Build and run by hand:
 *   clang -O1 -g -fsanitize=fuzzer,address,undefined -std=c11 -D_GNU_SOURCE -Iserver \
 *     -o build/fuzz/fuzz_range tests/fuzz/fuzz_range.c server/http_parse.c
 *   build/fuzz/fuzz_range -max_total_time=60 build/fuzz/corpus-fuzz_range tests/fuzz/corpus/fuzz_range
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

#define MAXR 16

/* --- the reference: written from the RFC's grammar, sharing no code ---------------- */

static int ref_num(const char *p, size_t n, uint64_t *v)
{
    if (n == 0)
        return -1;
    unsigned __int128 x = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        x = x * 10 + (unsigned)(p[i] - '0');
        if (x > UINT64_MAX)
            return -1; /* does not fit: malformed for us */
    }
    *v = (uint64_t)x;
    return 0;
}

static enum http_range_result ref_parse(const char *v, size_t len, uint64_t size,
                                        struct http_range *out, unsigned max, unsigned *n)
{
    *n = 0;
    if (len < 6)
        return HTTP_RANGE_IGNORE;
    static const char bytes_eq[] = "bytes=";
    for (int i = 0; i < 6; i++) {
        char c = v[i];
        if (c >= 'A' && c <= 'Z')
            c = (char)(c + 32);
        if (c != bytes_eq[i])
            return HTTP_RANGE_IGNORE;
    }
    unsigned specs = 0, kept = 0;
    size_t i = 6;
    for (;;) {
        size_t j = i;
        while (j < len && v[j] != ',')
            j++;
        size_t a = i, b = j; /* the element, trimmed of SP and HTAB */
        while (a < b && (v[a] == ' ' || v[a] == '\t'))
            a++;
        while (b > a && (v[b - 1] == ' ' || v[b - 1] == '\t'))
            b--;
        if (b > a) {
            if (++specs > max)
                return HTTP_RANGE_IGNORE;
            size_t d = a;
            while (d < b && v[d] != '-')
                d++;
            if (d == b)
                return HTTP_RANGE_IGNORE;
            uint64_t first, last;
            if (d == a) { /* suffix */
                if (ref_num(v + d + 1, b - d - 1, &last) < 0)
                    return HTTP_RANGE_IGNORE;
                if (last > 0 && size > 0) {
                    out[kept].first = last >= size ? 0 : size - last;
                    out[kept].last = size - 1;
                    kept++;
                }
            } else {
                if (ref_num(v + a, d - a, &first) < 0)
                    return HTTP_RANGE_IGNORE;
                if (d + 1 == b) {
                    last = UINT64_MAX;
                } else if (ref_num(v + d + 1, b - d - 1, &last) < 0 || last < first) {
                    return HTTP_RANGE_IGNORE;
                }
                if (first < size) {
                    out[kept].first = first;
                    out[kept].last = last < size ? last : size - 1;
                    kept++;
                }
            }
        }
        if (j >= len)
            break;
        i = j + 1;
    }
    if (specs == 0)
        return HTTP_RANGE_IGNORE;
    if (kept == 0)
        return HTTP_RANGE_UNSATISFIABLE;
    for (unsigned x = 0; x < kept; x++)
        for (unsigned y = x + 1; y < kept; y++)
            if (!(out[x].last < out[y].first || out[y].last < out[x].first))
                return HTTP_RANGE_IGNORE;
    *n = kept;
    return HTTP_RANGE_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 8192)
        return 0;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 1099511628211ull;

    const char *in = (const char *)data;
    size_t len = size;
    uint64_t rep;
    const char *nl = memchr(in, '\n', len);
    uint64_t parsed;
    if (nl && ref_num(in, (size_t)(nl - in), &parsed) == 0) {
        rep = parsed;
        len -= (size_t)(nl + 1 - in);
        in = nl + 1;
    } else {
        static const uint64_t sizes[] = {0, 1, 2, 10, 100, 1000, 4096, 1u << 20,
                                         UINT64_MAX, UINT64_MAX - 1, 1ull << 63};
        rep = sizes[h % (sizeof sizes / sizeof sizes[0])];
    }
    unsigned max = (unsigned)((h >> 8) % (MAXR + 1));
    if ((h >> 16) % 4 != 0)
        max = 16; /* the server's STATIC_MAX_RANGES, most of the time */

    char *value = malloc(len ? len : 1); /* exact size: ASan sees any overread */
    memcpy(value, in, len);
    struct http_range got[MAXR + 1], want[MAXR + 1];
    unsigned n_got = 99, n_want = 99;
    enum http_range_result r = http_range_parse((struct http_slice){value, len}, rep, got, max,
                                                &n_got);
    enum http_range_result w = ref_parse(value, len, rep, want, max, &n_want);
    if (r != w || n_got != n_want) {
        fprintf(stderr, "size %llu max %u: got %d/%u, reference %d/%u for \"%.*s\"\n",
                (unsigned long long)rep, max, r, n_got, w, n_want, (int)len, value);
        abort();
    }
    if (r == HTTP_RANGE_OK) {
        REQUIRE(n_got >= 1 && n_got <= max);
        for (unsigned i = 0; i < n_got; i++) {
            REQUIRE(got[i].first == want[i].first && got[i].last == want[i].last);
            REQUIRE(got[i].first <= got[i].last && got[i].last < rep);
            for (unsigned j = 0; j < i; j++)
                REQUIRE(got[i].last < got[j].first || got[j].last < got[i].first);
        }
    } else {
        REQUIRE(n_got == 0);
    }
    free(value);
    return 0;
}
