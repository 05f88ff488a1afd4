/* fuzz_regex.c — libFuzzer target for the regex wrapper (server/regex.c) over PCRE2.
 *
 * Input: a pattern, a NUL byte, then the text (which may hold more NUL bytes); without a
 * NUL the whole input is the pattern and the text is empty. Each pattern is compiled
 * twice, case-sensitive (`~`) and not (`~*`). Seeds: tests/fuzz/corpus/fuzz_regex/.
 *
 * What it checks, beyond "no crash, no sanitizer report, no leak, no timeout" (the match
 * and depth limits must stop every pattern, however it backtracks):
 *   - compiling returns 0 or -1; on -1 the message is non-empty and names an offset;
 *   - a match answers the same twice, and its groups lie inside the text, in order.
 * Links: server/regex.c. Built and run by `make fuzz`.
 */
#include "regex.h"

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

static void check(const char *re, enum regex_flags flags, const char *s, size_t len)
{
    struct regex r;
    char err[256] = "";
    if (regex_compile(&r, re, flags, err, sizeof(err)) < 0) {
        REQUIRE(err[0] != '\0' && strstr(err, " at offset ") != NULL);
        return;
    }
    struct regex_captures caps;
    enum regex_result m = regex_match(&r, s, len, &caps, NULL, 0);
    REQUIRE(m == REGEX_MATCH || m == REGEX_NOMATCH || m == REGEX_LIMIT);
    REQUIRE(regex_match(&r, s, len, NULL, NULL, 0) == m);
    if (m == REGEX_MATCH) {
        REQUIRE(caps.n >= 1 && caps.n <= REGEX_GROUPS_MAX);
        for (unsigned k = 0; k < caps.n; k++) {
            size_t glen;
            const char *g = regex_group(&caps, k, &glen);
            REQUIRE(glen == 0 || (g >= s && g + glen <= s + len));
        }
    }
    regex_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, '\0', size);
    size_t re_len = nul ? (size_t)(nul - data) : size;
    char *re = malloc(re_len + 1);
    if (!re)
        return 0;
    memcpy(re, data, re_len);
    re[re_len] = '\0';
    const char *text = nul ? (const char *)nul + 1 : "";
    size_t text_len = nul ? size - re_len - 1 : 0;
    check(re, 0, text, text_len);
    check(re, REGEX_CASELESS, text, text_len);
    free(re);
    return 0;
}
