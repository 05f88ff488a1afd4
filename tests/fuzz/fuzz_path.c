/* fuzz_path.c — libFuzzer target for URL decoding and normalization (http_path_normalize).
 *
 * Input: the path of a request target, as sent (percent-encoded; the part before '?').
 * Seeds: tests/fuzz/corpus/fuzz_path/ (ordinary paths and traversal attempts: %2e%2e,
 * %2E%2e, %252e, %c0%ae, backslashes, /./, //, %00, long paths).
 *
 * What it checks, beyond "no crash, no sanitizer report":
 *   - the answer matches a reference written from RFC 3986 (percent-decode everything,
 *     then remove dot segments with a stack, collapse empty segments, refuse NUL, bad
 *     escapes and any ".." above the root with -400, and -414 when the result and its NUL
 *     do not fit the capacity);
 *   - the security properties, on their own: a result starts with '/', holds no NUL, no
 *     "//", and no "." or ".." segment; so whatever the encoding, it cannot name anything
 *     above the document root;
 *   - with the server's capacity (REQUEST_PATH_MAX, 4096) and with small ones; nothing is
 *     written at or past the capacity (the output buffer is exactly cap bytes on the heap);
 *   - http_path_encode of a normalized path (the Location of a directory redirect) holds
 *     only safe bytes and %XX, never starts with "//", never overflows, and normalizes back
 *     to the same path.
 * Links: server/http_parse.c only.
 * Build and run by hand:
 *   clang -O1 -g -fsanitize=fuzzer,address,undefined -std=c11 -D_GNU_SOURCE -Iserver \
 *     -o build/fuzz/fuzz_path tests/fuzz/fuzz_path.c server/http_parse.c
 *   build/fuzz/fuzz_path -max_total_time=60 build/fuzz/corpus-fuzz_path tests/fuzz/corpus/fuzz_path
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

#define MAX_IN 70000

static int hexv(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The reference. Returns the length of the normalized path written to out (unbounded
 * buffer of MAX_IN + 2), or -400. */
static long ref_normalize(const unsigned char *in, size_t len, char *out)
{
    static unsigned char dec[MAX_IN];
    static size_t seg_start[MAX_IN], seg_len[MAX_IN];
    if (len == 0 || in[0] != '/')
        return -400;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char b = in[i];
        if (b == '%') {
            if (i + 2 >= len || hexv(in[i + 1]) < 0 || hexv(in[i + 2]) < 0)
                return -400;
            b = (unsigned char)(hexv(in[i + 1]) * 16 + hexv(in[i + 2]));
            i += 2;
        }
        if (b == 0)
            return -400;
        dec[n++] = b;
    }
    /* segments after the leading '/' */
    size_t depth = 0, i = 1;
    int trailing = 0;
    for (;;) {
        size_t j = i;
        while (j < n && dec[j] != '/')
            j++;
        size_t L = j - i;
        int dot = L == 1 && dec[i] == '.';
        int dotdot = L == 2 && dec[i] == '.' && dec[i + 1] == '.';
        trailing = L == 0 || dot || dotdot;
        if (dotdot) {
            if (depth == 0)
                return -400;
            depth--;
        } else if (L > 0 && !dot) {
            seg_start[depth] = i;
            seg_len[depth] = L;
            depth++;
        }
        if (j >= n)
            break;
        i = j + 1;
    }
    size_t o = 0;
    for (size_t d = 0; d < depth; d++) {
        out[o++] = '/';
        memcpy(out + o, dec + seg_start[d], seg_len[d]);
        o += seg_len[d];
    }
    if (trailing || depth == 0)
        out[o++] = '/';
    out[o] = '\0';
    return (long)o;
}

static void check_result(const char *out, long rc)
{
    size_t L = (size_t)rc;
    REQUIRE(L >= 1 && out[0] == '/' && out[L] == '\0' && strlen(out) == L);
    REQUIRE(!strstr(out, "//"));
    /* no "." or ".." segment anywhere (one pass: segments run between slashes) */
    size_t seg = 1;
    for (size_t i = 1; i <= L; i++) {
        if (i < L && out[i] != '/')
            continue;
        size_t k = i - seg;
        REQUIRE(!(k == 1 && out[seg] == '.') && !(k == 2 && out[seg] == '.' && out[seg + 1] == '.'));
        seg = i + 1;
    }
}

/* http_path_encode, as the Location of a directory redirect and the links of listings use
 * it: only unreserved, sub-delims, ':', '@', '/' and %XX come out (no CR, LF, '\\', '?',
 * '#', bare '%'), never "//" at the start (a network-path reference), it never writes
 * past cap, and decoding it again gives the normalized path back. */
static void check_encode(const char *path, size_t len, uint64_t h)
{
    size_t big = 3 * len + 1, caps[2] = {big, (size_t)(h >> 16) % (big + 1)};
    for (int k = 0; k < 2; k++) {
        size_t cap = caps[k];
        char *enc = malloc(cap ? cap : 1); /* exact size: ASan sees any overflow */
        long n = http_path_encode(path, len, enc, cap);
        if (k == 0)
            REQUIRE(n >= (long)len);
        if (n < 0) {
            free(enc);
            continue;
        }
        REQUIRE((size_t)n < cap && enc[n] == '\0' && strlen(enc) == (size_t)n);
        REQUIRE(!(n >= 2 && enc[0] == '/' && enc[1] == '/'));
        for (long i = 0; i < n; i++) {
            unsigned char c = (unsigned char)enc[i];
            if (c == '%') {
                REQUIRE(i + 2 < n && hexv((unsigned char)enc[i + 1]) >= 0 &&
                        hexv((unsigned char)enc[i + 2]) >= 0);
                i += 2;
                continue;
            }
            REQUIRE((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    strchr("-._~/!$&'()*+,;=:@", c));
        }
        static char again[MAX_IN * 3 + 4];
        long m = http_path_normalize((struct http_slice){enc, (size_t)n}, again, sizeof again);
        REQUIRE(m == (long)len && memcmp(again, path, len) == 0);
        free(enc);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char ref[MAX_IN + 2];
    if (size > MAX_IN - 1)
        return 0;
    char *in = malloc(size ? size : 1); /* exact size: ASan sees any overread */
    memcpy(in, data, size);
    long want = ref_normalize(data, size, ref);

    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 1099511628211ull;
    size_t caps[3] = {4096, 1 + (size_t)(h % 64), (size_t)(h >> 8) % (size + 3)};
    for (int k = 0; k < 3; k++) {
        size_t cap = caps[k];
        char *out = malloc(cap ? cap : 1);
        long rc = http_path_normalize((struct http_slice){in, size}, out, cap);
        long expect = want < 0 ? want : (size_t)want < cap ? want : -414;
        if (rc != expect) {
            fprintf(stderr, "cap %zu: got %ld, reference %ld for \"%.*s\"\n", cap, rc, expect,
                    (int)size, in);
            abort();
        }
        if (rc >= 0) {
            check_result(out, rc);
            REQUIRE(memcmp(out, ref, (size_t)rc) == 0);
            if (k == 0)
                check_encode(out, (size_t)rc, h);
        }
        free(out);
    }
    free(in);
    return 0;
}
