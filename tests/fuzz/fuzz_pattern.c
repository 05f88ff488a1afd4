/* fuzz_pattern.c — libFuzzer target for the location regex matcher (server/pattern.c).
 *
 * Input: a pattern, a NUL byte, then the text (which may hold more NUL bytes); without a
 * NUL the whole input is the pattern and the text is empty. Each pattern is compiled
 * twice, case-sensitive (`~`) and not (`~*`). Seeds: tests/fuzz/corpus/fuzz_pattern/.
 *
 * What it checks, beyond "no crash, no sanitizer report, no leak":
 *   - compiling returns 0 or -1; on -1 the message is non-empty and NUL-terminated;
 *   - an accepted program is within PATTERN_MAX_INSNS and ends in a reachable state: the
 *     search returns, and returns the same answer twice;
 *   - when the pattern is one of POSIX's (no \d, (?:...), lazy quantifier, escape in
 *     brackets: pattern.posix) and the C library's regcomp(REG_EXTENDED | REG_NOSUB) accepts
 *     it too, regexec over the same text gives the same answer (but for two quirks of
 *     glibc's, which differs there from POSIX and PCRE: see check()).
 * Links: server/pattern.c. Built and run by `make fuzz`.
 */
#include "pattern.h"

#include <regex.h>
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

/* The C library is only asked about short patterns and texts: its matcher is not bounded
 * as ours is, and the fuzzer's time is better spent on many inputs. */
#define LIBC_MAX_PATTERN 64
#define LIBC_MAX_TEXT 256

/* The text is copied with a NUL after it: regexec reads up to len (REG_STARTEND), but
 * AddressSanitizer's wrapper of regexec reads the string to its NUL. */
static int libc_search(const char *re, bool icase, const char *s, size_t len)
{
    regex_t r;
    if (regcomp(&r, re, REG_EXTENDED | REG_NOSUB | (icase ? REG_ICASE : 0)) != 0)
        return -1;
    char copy[LIBC_MAX_TEXT + 1];
    memcpy(copy, s, len);
    copy[len] = '\0';
    regmatch_t m = {.rm_so = 0, .rm_eo = (regoff_t)len};
    int rc = regexec(&r, copy, 1, &m, REG_STARTEND);
    regfree(&r);
    return rc == 0;
}

static void check(const char *re, size_t re_len, bool icase, const char *text, size_t len)
{
    struct pattern p;
    char err[256];
    memset(err, 'x', sizeof(err));
    if (pattern_compile(&p, re, icase, err, sizeof(err)) < 0) {
        REQUIRE(memchr(err, '\0', sizeof(err)) != NULL && err[0] != '\0');
        return;
    }
    REQUIRE(p.n_insns > 0 && p.n_insns <= PATTERN_MAX_INSNS);
    bool got = pattern_search(&p, text, len);
    REQUIRE(pattern_search(&p, text, len) == got);
    /* Under REG_ICASE glibc lowers the text's byte and looks it up in the bracket as
     * written, so [!-c] does not take 'D'; ours, as PCRE's, adds the other case of every
     * letter of the bracket. Case-insensitive brackets are not compared. */
    /* And glibc lets `^` and `$` match beside a newline inside the text, even without
     * REG_NEWLINE ("x$\na" takes "x\na", "$." takes "\n"); ours anchor at the text's ends
     * only. Anchored patterns are not compared on a text or pattern with a newline. */
    bool newline = strchr(re, '\n') || memchr(text, '\n', len);
    bool comparable = p.posix && !(icase && strchr(re, '[')) &&
                      !(newline && strpbrk(re, "^$"));
    if (comparable && re_len <= LIBC_MAX_PATTERN && len <= LIBC_MAX_TEXT) {
        int want = libc_search(re, icase, text, len);
        if (want >= 0 && want != (int)got) {
            fprintf(stderr, "FAIL \"%s\"%s on %zu bytes: ours %d, the C library's %d\n", re,
                    icase ? " (icase)" : "", len, got, want);
            abort();
        }
    }
    pattern_free(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
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
    size_t len = nul ? size - re_len - 1 : 0;
    check(re, re_len, false, text, len);
    check(re, re_len, true, text, len);
    free(re);
    return 0;
}
