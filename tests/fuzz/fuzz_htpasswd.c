/* fuzz_htpasswd.c — libFuzzer target for the htpasswd reader (modules/htpasswd.c) and the
 * strict base64 decoder of `Authorization: Basic` (auth_base64_decode, modules/mod_auth.c).
 *
 * Input: a user file's text, then optionally a NUL byte and a credential as a client would
 * send it after "Basic ". The text is loaded through a memfd (htpasswd_load reads a path:
 * /proc/self/fd/N). Seeds: tests/fuzz/corpus/fuzz_htpasswd/.
 *
 * What it checks, beyond "no crash, no sanitizer report, no leak, no descriptor left open":
 *   - a load returns a table of at least one user and at most one per line, or NULL with a
 *     message that names the file; each line of its warnings names the file too;
 *   - the decoder returns -1 or a length of exactly 3/4 of the input less the padding, never
 *     writes past the room it is given, and accepts only what re-encodes to the same text
 *     (strict: one spelling per byte string).
 * Passwords are not verified here: a bcrypt verification costs milliseconds, and the
 * verification is libxcrypt's and OpenSSL's (tests/unit/test_htpasswd.c checks the calls).
 * Links: modules/htpasswd.c, modules/mod_auth.c and the server objects they refer to; built
 * and run by `make fuzz`.
 */
#include "htpasswd.h"
#include "mod_auth.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define REQUIRE(x)                                                                             \
    do {                                                                                       \
        if (!(x)) {                                                                            \
            fprintf(stderr, "FAIL %s:%d %s\n", __FILE__, __LINE__, #x);                        \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

static void check_load(const uint8_t *data, size_t len)
{
    int fd = memfd_create("htpasswd", MFD_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, data, len) == (ssize_t)len);
    char path[64], err[1024], warn[4096];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    struct htpasswd *h = htpasswd_load(path, err, sizeof(err), warn, sizeof(warn));
    size_t lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += data[i] == '\n';
    if (h) {
        REQUIRE(htpasswd_count(h) >= 1 && htpasswd_count(h) <= lines);
        REQUIRE(memchr(warn, '\0', sizeof(warn)));
        for (const char *p = warn; *p; p = strchr(p, '\n') + 1)
            REQUIRE(strncmp(p, path, strlen(path)) == 0 && strchr(p, '\n'));
        htpasswd_free(h);
    } else {
        REQUIRE(memchr(err, '\0', sizeof(err)) && strncmp(err, path, strlen(path)) == 0);
    }
    close(fd);
}

static const char alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static size_t encode(const unsigned char *in, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)in[i] << 16 | (i + 1 < n ? (unsigned)in[i + 1] << 8 : 0) |
                     (i + 2 < n ? in[i + 2] : 0);
        out[o++] = alphabet[v >> 18 & 63];
        out[o++] = alphabet[v >> 12 & 63];
        out[o++] = i + 1 < n ? alphabet[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? alphabet[v & 63] : '=';
    }
    return o;
}

static void check_decode(const char *in, size_t len)
{
    unsigned char out[512 + 8];
    size_t cap = len / 4 * 3 < 512 ? len / 4 * 3 : 512;
    memset(out + cap, 0xA5, 8);
    long n = auth_base64_decode(in, len, out, cap);
    for (int i = 0; i < 8; i++)
        REQUIRE(out[cap + i] == 0xA5); /* nothing written past the room */
    if (n < 0)
        return;
    REQUIRE(len % 4 == 0 && (size_t)n <= cap);
    size_t pad = len >= 1 && in[len - 1] == '=' ? (len >= 2 && in[len - 2] == '=' ? 2 : 1) : 0;
    REQUIRE((size_t)n == len / 4 * 3 - pad);
    char again[1024];
    REQUIRE(encode(out, (size_t)n, again) == len && memcmp(again, in, len) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, '\0', size);
    size_t text_len = nul ? (size_t)(nul - data) : size;
    check_load(data, text_len);
    if (nul && size - text_len - 1 <= 680)
        check_decode((const char *)nul + 1, size - text_len - 1);
    return 0;
}
