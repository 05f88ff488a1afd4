/* fuzz_gzip_accept.c — libFuzzer target for the Accept-Encoding negotiation of mod_gzip
 * (gzip_accept_parse, gzip_accept_choose, gzip_negotiate in modules/mod_gzip.h).
 *
 * Input: an Accept-Encoding field value as a client sends it; a byte 0x00 in the input
 * splits it into two field lines of the same request (the parser is then fed both, as
 * mod_gzip does for a request that repeats the field). Seeds:
 * tests/fuzz/corpus/fuzz_gzip_accept/ (what browsers, curl and proxies send, q-values,
 * "*", identity;q=0, x-gzip, quoted parameters).
 *
 * What it checks, beyond "no crash, no sanitizer report":
 *   - weights are -1 (not listed) or 0..1000, and the choice is one of the three;
 *   - the choice follows from the weights as mod_gzip.h documents it (recomputed here);
 *   - gzip is never chosen unless the value names gzip, x-gzip or "*";
 *   - "gzip;q=0" or "x-gzip;q=0" alone is never gzip, and neither is a value with no
 *     well-formed element;
 *   - two field lines give the same answer as the same lines joined with ", "
 *     (RFC 9110 section 5.3), when no quoted-string could run across the join;
 *   - gzip_negotiate equals init + parse + choose.
 * Links: modules/mod_gzip.c and, through it, every server object but main.c (see the
 * Makefile's fuzz rule).
 * Build and run by hand (from the repository root):
 *   clang -O1 -g -fsanitize=fuzzer,address,undefined -std=c11 -D_GNU_SOURCE -Iserver \
 *     -Imodules -o build/fuzz/fuzz_gzip_accept tests/fuzz/fuzz_gzip_accept.c \
 *     $(ls server/[a-z]*.c modules/[a-z]*.c | grep -v main.c) -lz -lmagic -pthread
 *   build/fuzz/fuzz_gzip_accept -max_total_time=60 build/fuzz/corpus-fuzz_gzip_accept \
 *     tests/fuzz/corpus/fuzz_gzip_accept
 */
#include "mod_gzip.h"

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

static int weight_ok(int w)
{
    return w == -1 || (w >= 0 && w <= 1000);
}

/* mod_gzip.h: gzip when its weight (its own, else that of "*") is above 0 and at least
 * identity's (its own, else that of "*"; no preference when neither is listed). */
static enum gzip_choice expected(const struct gzip_accept *a)
{
    if (!a->any)
        return GZIP_CHOICE_IDENTITY;
    int gz = a->gzip >= 0 ? a->gzip : a->star >= 0 ? a->star : 0;
    int id = a->identity >= 0 ? a->identity : a->star;
    if (gz > 0 && (id < 0 || gz >= id))
        return GZIP_CHOICE_GZIP;
    return id == 0 ? GZIP_CHOICE_NONE : GZIP_CHOICE_IDENTITY;
}

static int contains_nocase(const char *p, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (strncasecmp(p + i, needle, k) == 0)
            return 1;
    return 0;
}

static enum gzip_choice check(const struct gzip_accept *a)
{
    REQUIRE(weight_ok(a->gzip) && weight_ok(a->identity) && weight_ok(a->star));
    enum gzip_choice c = gzip_accept_choose(a);
    REQUIRE(c == GZIP_CHOICE_IDENTITY || c == GZIP_CHOICE_GZIP || c == GZIP_CHOICE_NONE);
    REQUIRE(c == expected(a));
    return c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 8192)
        return 0;
    /* exact-size heap copies: ASan sees any read past a value */
    char *whole = malloc(size ? size : 1);
    memcpy(whole, data, size);
    const char *nul = memchr(whole, '\0', size);

    if (!nul) {
        struct gzip_accept a;
        gzip_accept_init(&a);
        REQUIRE(!a.any && a.gzip == -1 && a.identity == -1 && a.star == -1);
        gzip_accept_parse(&a, whole, size);
        enum gzip_choice c = check(&a);
        REQUIRE(gzip_negotiate(whole, size) == c);
        if (c == GZIP_CHOICE_GZIP)
            REQUIRE(contains_nocase(whole, size, "gzip") || memchr(whole, '*', size));
        if (a.gzip >= 0)
            REQUIRE(contains_nocase(whole, size, "gzip"));
        if (a.identity >= 0)
            REQUIRE(contains_nocase(whole, size, "identity"));
        if (a.star >= 0)
            REQUIRE(memchr(whole, '*', size) != NULL);
        static const char *const refusals[] = {"gzip;q=0", "x-gzip;q=0", "gzip; q=0.000",
                                               "*;q=0"};
        for (int i = 0; i < 4; i++)
            if (size == strlen(refusals[i]) && memcmp(whole, refusals[i], size) == 0)
                REQUIRE(c != GZIP_CHOICE_GZIP);
    } else {
        size_t la = (size_t)(nul - whole), lb = size - la - 1;
        char *a_val = malloc(la ? la : 1), *b_val = malloc(lb ? lb : 1);
        memcpy(a_val, whole, la);
        memcpy(b_val, nul + 1, lb);
        struct gzip_accept two;
        gzip_accept_init(&two);
        gzip_accept_parse(&two, a_val, la);
        gzip_accept_parse(&two, b_val, lb);
        enum gzip_choice c2 = check(&two);

        /* the same lines joined: a list is a list, however it is split into lines */
        if (!memchr(a_val, '"', la) && !memchr(b_val, '"', lb) && !memchr(b_val, '\0', lb)) {
            size_t lj = la + 2 + lb;
            char *joined = malloc(lj);
            memcpy(joined, a_val, la);
            memcpy(joined + la, ", ", 2);
            memcpy(joined + la + 2, b_val, lb);
            struct gzip_accept one;
            gzip_accept_init(&one);
            gzip_accept_parse(&one, joined, lj);
            enum gzip_choice c1 = check(&one);
            if (c1 != c2 || one.gzip != two.gzip || one.identity != two.identity ||
                one.star != two.star || one.any != two.any) {
                fprintf(stderr, "lines [%.*s] [%.*s]: gzip %d/%d identity %d/%d star %d/%d\n",
                        (int)la, a_val, (int)lb, b_val, two.gzip, one.gzip, two.identity,
                        one.identity, two.star, one.star);
                abort();
            }
            free(joined);
        }
        free(a_val);
        free(b_val);
    }
    free(whole);
    return 0;
}
