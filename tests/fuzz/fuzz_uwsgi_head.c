/* fuzz_uwsgi_head.c — libFuzzer target for the head of a uwsgi or SCGI application's
 * answer (uwsgi_parse_head in modules/mod_uwsgi.c, exposed by mod_uwsgi.h): a status line
 * ("HTTP/1.1 200 OK") then fields, or CGI's head, as nginx's uwsgi and scgi modules read it.
 *
 * Input: the start of an application's answer, as read from its socket (lines ending in LF
 * or CRLF, a blank line, then body bytes). Seeds: tests/fuzz/corpus/fuzz_uwsgi_head/.
 *
 * What it checks, beyond "no crash, no sanitizer report" (as fuzz_cgi_head.c):
 *   - the result is -1, 0 or the length of a head that ends with LF, within the input;
 *   - no response splitting: the response head the server will send is a status line
 *     "HTTP/1.1 NNN ...", then "name: value" lines each ending in CRLF, with no CR, LF,
 *     NUL or other control byte inside a line, and none of the fields the core owns;
 *   - incremental: every prefix of the answer parses to 0 ("wait for more") or to the
 *     same head once the head is in it, and "-1" on a prefix means -1 on the whole;
 *   - resp_finish then completes the head without overflowing it.
 * Build and run by hand: as fuzz_cgi_head.c, with this file.
 */
#include "http_response.h"
#include "mod_uwsgi.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define REQUIRE(x)                                                                             \
    do {                                                                                       \
        if (!(x)) {                                                                            \
            fprintf(stderr, "FAIL %s:%d %s\n", __FILE__, __LINE__, #x);                        \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

static int is_tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* The head as the server would send it: status line, then fields, each CRLF-ended. */
static void check_head(const struct response *r)
{
    REQUIRE(r->head_len <= sizeof r->head);
    const char *h = r->head, *end = h + r->head_len;
    REQUIRE(r->head_len > 17 && memcmp(h, "HTTP/1.1 ", 9) == 0);
    int code = (h[9] - '0') * 100 + (h[10] - '0') * 10 + (h[11] - '0');
    REQUIRE(code == r->status && code >= 200 && code <= 599 && h[12] == ' ');
    unsigned line_no = 0, dates = 0, servers = 0;
    const char *p = h;
    while (p < end) {
        const char *lf = memchr(p, '\n', (size_t)(end - p));
        REQUIRE(lf && lf > p && lf[-1] == '\r'); /* every line ends in CRLF */
        for (const char *q = p; q < lf - 1; q++) {
            unsigned char c = (unsigned char)*q;
            REQUIRE(c != '\r' && c != '\n' && c != 0 && (c >= 0x20 || c == '\t') && c != 0x7f);
        }
        if (line_no > 0) {
            const char *colon = p;
            while (colon < lf && is_tchar((unsigned char)*colon))
                colon++;
            REQUIRE(colon > p && colon < lf && *colon == ':'); /* "name:" */
            size_t n = (size_t)(colon - p);
#define NAMED(s) (n == strlen(s) && strncasecmp(p, s, n) == 0)
            REQUIRE(!NAMED("status") && !NAMED("content-length") && !NAMED("connection") &&
                    !NAMED("transfer-encoding") && !NAMED("keep-alive") && !NAMED("upgrade"));
            dates += NAMED("date");
            servers += NAMED("server");
#undef NAMED
        }
        line_no++;
        p = lf + 1;
    }
    REQUIRE(dates == 1 && servers == 1);
}

static int parse(const char *buf, size_t len, struct response *r)
{
    resp_init(r);
    int rc = uwsgi_parse_head(buf, len, r);
    REQUIRE(rc >= -1 && rc <= (int)len);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct response r, r2;
    if (size > 16384) /* http_fastcgi.c gathers at most 16 KiB for a head */
        return 0;
    char *buf = malloc(size ? size : 1); /* exact size: ASan sees any overread */
    memcpy(buf, data, size);

    int rc = parse(buf, size, &r);
    if (rc > 0) {
        REQUIRE(buf[rc - 1] == '\n');
        check_head(&r);
        if (r.length_known)
            REQUIRE(!r.no_length);
        struct response fin = r;
        resp_finish(&fin, false);
        REQUIRE(fin.head_len <= sizeof fin.head);
        REQUIRE(fin.head_len >= 4 && memcmp(fin.head + fin.head_len - 4, "\r\n\r\n", 4) == 0);
    }

    /* prefixes, at a few cut points derived from the input */
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 1099511628211ull;
    for (int k = 0; k < 4 && size > 0; k++) {
        size_t cut = (size_t)((h >> (k * 13)) % size);
        if (k == 0 && rc > 0)
            cut = (size_t)rc - 1; /* just short of the blank line's LF */
        int rp = parse(buf, cut, &r2);
        if (rp == -1)
            REQUIRE(rc == -1);
        if (rc > 0 && cut < (size_t)rc)
            REQUIRE(rp == 0);
        if (rc > 0 && cut >= (size_t)rc) {
            REQUIRE(rp == rc && r2.status == r.status && r2.head_len == r.head_len);
        }
        if (rc == 0)
            REQUIRE(rp == 0);
    }
    free(buf);
    return 0;
}
