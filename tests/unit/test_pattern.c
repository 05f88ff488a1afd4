/* Unit tests of the location regex matcher (server/pattern.c): the syntax it accepts, what
 * it refuses and how it says so, its answers checked against the C library's POSIX regcomp
 * and regexec over a table of patterns and texts, and its costs (time on pathological
 * patterns, no allocation when matching). */
#define TEST_MAIN
#include "test.h"

#include <regex.h>
#include <stdbool.h>
#include <time.h>

#include "pattern.h"

static char err[256];

/* Does re (icase: `~*`) match somewhere in s[0, len)? Aborts the test run on a pattern
 * that fails to compile: the callers pass valid ones. */
static bool search_n(const char *re, bool icase, const char *s, size_t len)
{
    struct pattern p;
    if (pattern_compile(&p, re, icase, err, sizeof(err)) < 0) {
        fprintf(stderr, "  pattern \"%s\" refused: %s\n", re, err);
        abort();
    }
    bool m = pattern_search(&p, s, len);
    pattern_free(&p);
    return m;
}

static bool search(const char *re, const char *s)
{
    return search_n(re, false, s, strlen(s));
}

static bool search_icase(const char *re, const char *s)
{
    return search_n(re, true, s, strlen(s));
}

/* Is re refused with exactly this message? */
static bool refused_with(const char *re, const char *message)
{
    struct pattern p;
    if (pattern_compile(&p, re, false, err, sizeof(err)) == 0) {
        pattern_free(&p);
        fprintf(stderr, "  pattern \"%s\" accepted\n", re);
        return false;
    }
    if (strcmp(err, message) != 0)
        fprintf(stderr, "  pattern \"%s\": \"%s\"\n", re, err);
    return strcmp(err, message) == 0;
}

/* --- syntax ----------------------------------------------------------------------------- */

TEST(literal_matches_anywhere_in_the_text)
{
    CHECK(search("php", "/index.php?x"));
    CHECK(!search("php", "/index.ph"));
}

TEST(caret_anchors_at_the_start_and_dollar_at_the_end)
{
    CHECK(search("^/api", "/api/x"));
    CHECK(!search("^/api", "/v1/api"));
    CHECK(search("\\.php$", "/a.php"));
    CHECK(!search("\\.php$", "/a.php/x"));
}

TEST(dot_is_any_byte_but_nul)
{
    CHECK(search("^a.c$", "a/c"));
    CHECK(search("^a.c$", "a\nc"));
    CHECK(!search_n("^a.c$", false, "a\0c", 3));
}

TEST(alternation_inside_a_group)
{
    CHECK(search("\\.(png|jpe?g|gif)$", "/x.jpeg"));
    CHECK(search("\\.(png|jpe?g|gif)$", "/x.jpg"));
    CHECK(!search("\\.(png|jpe?g|gif)$", "/x.jpgx"));
}

TEST(star_plus_and_question_mark_repeat_the_atom_before)
{
    CHECK(search("^ab*c$", "ac"));
    CHECK(search("^ab+c$", "abbc"));
    CHECK(!search("^ab+c$", "ac"));
    CHECK(search("^ab?c$", "abc"));
    CHECK(!search("^ab?c$", "abbc"));
}

TEST(counts_bound_the_repetitions)
{
    CHECK(search("^a{3}$", "aaa"));
    CHECK(!search("^a{3}$", "aa"));
    CHECK(search("^a{2,}$", "aaaaa"));
    CHECK(!search("^a{2,}$", "a"));
    CHECK(search("^a{1,2}$", "aa"));
    CHECK(!search("^a{1,2}$", "aaa"));
    CHECK(search("^(ab){0,1}$", ""));
}

TEST(bracket_ranges_negation_and_a_leading_close_bracket)
{
    CHECK(search("^[a-c0-9]+$", "ab09c"));
    CHECK(!search("^[a-c]+$", "abd"));
    CHECK(search("^[^/]+$", "abc"));
    CHECK(!search("^[^/]+$", "a/c"));
    CHECK(search("^[]x]$", "]"));
    CHECK(search("^[^]x]$", "y"));
    CHECK(search("^[a-]$", "-"));
}

TEST(a_close_bracket_first_may_begin_a_range)
{
    /* POSIX: `[]-c]` is the range from ']' to 'c' (0x5d..0x63), as glibc reads it. */
    CHECK(search("^[]-c]$", "a"));
    CHECK(search("^[]-c]$", "]"));
    CHECK(!search("^[]-c]$", "-"));
    CHECK(!search("^[^]-c:digiv:]", "a-[:digiv:]"));
}

TEST(bracket_named_classes)
{
    CHECK(search("^[[:alpha:]]+$", "abcXYZ"));
    CHECK(search("^[[:digit:]]+$", "0123"));
    CHECK(search("^[[:alnum:]]+$", "a1B2"));
    CHECK(search("^[[:space:]]$", "\t"));
    CHECK(search("^[[:upper:]]$", "Q"));
    CHECK(!search("^[[:upper:]]$", "q"));
    CHECK(search("^[[:lower:]]$", "q"));
    CHECK(search("^[[:punct:]]+$", "!/.~"));
    CHECK(search("^[[:xdigit:]]+$", "0fA9"));
    CHECK(!search("^[[:xdigit:]]+$", "g"));
}

TEST(backslash_makes_punctuation_literal)
{
    CHECK(search("^a\\.b$", "a.b"));
    CHECK(!search("^a\\.b$", "axb"));
    CHECK(search("^\\/\\(\\)\\[\\]\\{\\}\\*\\+\\?\\|\\^\\$\\\\$", "/()[]{}*+?|^$\\"));
}

TEST(pcre_shorthands_outside_and_inside_brackets)
{
    CHECK(search("^/users/\\d+$", "/users/42"));
    CHECK(!search("^/users/\\d+$", "/users/4a"));
    CHECK(search("^\\D+$", "abc"));
    CHECK(search("^\\w+$", "a_Z9"));
    CHECK(!search("^\\w+$", "a-b"));
    CHECK(search("^\\W$", "-"));
    CHECK(search("^a\\sb$", "a b"));
    CHECK(search("^\\S+$", "ab"));
    CHECK(search("^[\\w.-]+$", "a-b.c_d"));
    CHECK(!search("^[\\w.-]+$", "a/b"));
    CHECK(search("^[\\]]$", "]"));
}

TEST(non_capturing_group_groups)
{
    CHECK(search("^/(?:api|admin)/", "/admin/x"));
    CHECK(!search("^/(?:api|admin)/", "/apiadmin/"));
}

TEST(lazy_quantifier_matches_as_the_greedy_one)
{
    CHECK(search("^/a.*?z$", "/abcz"));
    CHECK(search("^a+?$", "aaa"));
    CHECK(!search("^a+?$", ""));
}

TEST(tilde_star_folds_ascii_letters_in_literals_and_brackets)
{
    CHECK(search_icase("\\.PNG$", "/x.png"));
    CHECK(search_icase("^[a-c]+$", "AbC"));
    CHECK(!search_icase("^[^a]$", "A"));
    CHECK(!search("\\.PNG$", "/x.png"));
}

/* As PCRE (nginx): the range holds 'D', so `~*` takes 'd' too. glibc's REG_ICASE does not
 * (it lowers the text's byte and looks 'd' up in the range as written). */
TEST(tilde_star_folds_every_letter_of_a_range)
{
    CHECK(search_icase("^[!-c]$", "D"));
    CHECK(search_icase("^[!-c]$", "d"));
    CHECK(!search_icase("^[^!-c]$", "d"));
}

TEST(empty_pattern_and_empty_alternatives_match_the_empty_text)
{
    CHECK(search("", ""));
    CHECK(search("^(|a)$", ""));
    CHECK(search("^()$", ""));
}

TEST(empty_text_is_matched_only_by_what_can_be_empty)
{
    CHECK(search("^$", ""));
    CHECK(search("a*", ""));
    CHECK(!search("a", ""));
}

TEST(text_is_bounded_by_its_length_not_by_a_nul)
{
    CHECK(search_n("^/a$", false, "/ab", 2));
    CHECK(search_n("b$", false, "a\0b", 3));
    CHECK(search_n("^a[^x]b$", false, "a\0b", 3));
}

TEST(skipping_to_a_possible_start_misses_no_match)
{
    CHECK(search("aab", "aaab"));
    CHECK(search("\\.php$", "/a.b.c.php"));
    CHECK(search("x$", "aaax"));
    CHECK(search("(a|b)$", "zzb"));
    CHECK(search("(a|)$", "zzz"));    /* empty at the end: nothing can be skipped */
    CHECK(search("[0-9]{2}", "a1b22"));
    CHECK(!search("[0-9]{2}", "a1b2c3"));
}

TEST(anchor_in_the_middle_never_matches)
{
    CHECK(!search("a^b", "a^b"));
    CHECK(!search("a$b", "a$b"));
    CHECK(search("^(^a|b)$", "a"));
}

/* --- refusals --------------------------------------------------------------------------- */

TEST(unmatched_open_paren_is_refused_where_it_is)
{
    CHECK(refused_with("/abc(de", "unmatched '(' at 4"));
}

TEST(unmatched_close_paren_is_refused)
{
    CHECK(refused_with("a)", "unmatched ')' at 1"));
}

TEST(unmatched_bracket_is_refused)
{
    CHECK(refused_with("x[abc", "unmatched '[' at 1"));
}

TEST(leading_quantifier_has_nothing_to_repeat)
{
    CHECK(refused_with("*a", "nothing to repeat at 0"));
    CHECK(refused_with("a|+", "nothing to repeat at 2"));
    CHECK(refused_with("^*", "nothing to repeat at 1"));
}

TEST(count_over_255_is_refused)
{
    CHECK(refused_with("a{256}", "a count over 255 at 1"));
}

TEST(reversed_count_range_is_refused)
{
    CHECK(refused_with("a{3,2}", "invalid count range {3,2} at 1"));
}

TEST(brace_that_is_not_a_count_is_refused)
{
    CHECK(refused_with("/a{b}", "'{' is not a count at 2 (write \\{ for the character)"));
}

TEST(backreference_is_refused)
{
    CHECK(refused_with("(a)\\1", "backreferences are not supported: '\\1' at 3"));
}

TEST(lookaround_and_inline_flags_are_refused)
{
    CHECK(refused_with("a(?=b)", "unsupported group '(?=' at 1 (only (?:...) is)"));
    CHECK(refused_with("(?i)a", "unsupported group '(?i' at 0 (only (?:...) is)"));
}

TEST(letter_escape_other_than_the_shorthands_is_refused)
{
    CHECK(refused_with("\\bword", "unsupported escape '\\b' at 0"));
    CHECK(refused_with("[\\n]", "unsupported escape '\\n' in brackets at 1"));
}

TEST(possessive_or_doubled_quantifier_is_refused)
{
    CHECK(refused_with("a*+", "a quantifier cannot follow a quantifier at 2"));
    CHECK(refused_with("a**", "a quantifier cannot follow a quantifier at 2"));
}

TEST(reversed_range_and_unknown_class_are_refused)
{
    CHECK(refused_with("[z-a]", "invalid range 'z-a' at 1"));
    CHECK(refused_with("[[:word:]]", "unknown character class '[:word:]' at 1"));
    CHECK(refused_with("[[.a.]]", "collating elements ('[.') are not supported at 1"));
}

TEST(trailing_backslash_is_refused)
{
    CHECK(refused_with("a\\", "trailing backslash at 1"));
}

TEST(program_over_the_bound_is_too_complex)
{
    CHECK(refused_with("(((a{255}){255}){255})", "pattern too complex (over 2000 instructions)"));
    struct pattern p;
    CHECK(pattern_compile(&p, "(abcdefgh){200}", false, err, sizeof(err)) == 0);
    CHECK(p.n_insns <= PATTERN_MAX_INSNS);
    pattern_free(&p);
}

TEST(deep_nesting_is_refused_not_overflowing_the_stack)
{
    char re[400];
    memset(re, '(', 200);
    memset(re + 200, ')', 199);
    re[399] = '\0';
    CHECK(refused_with(re, "groups nested too deeply at 64"));
}

/* --- against the C library ------------------------------------------------------------ */

struct case_ {
    const char *re;
    bool icase;
    const char *text;
    size_t len;
};

/* A case; the text's length is the literal's, NUL bytes included. */
#define T(re, icase, text) {re, icase, text, sizeof(text) - 1}

/* POSIX patterns (no PCRE-only construct), each with texts that match and texts that do
 * not: the location patterns nginx users write first. */
static const struct case_ cases[] = {
    T("\\.(png|jpe?g|gif|svg|woff2?)$", 0, "/a/b.png"), T("\\.(png|jpe?g|gif|svg|woff2?)$", 0, "/b.jpg"),
    T("\\.(png|jpe?g|gif|svg|woff2?)$", 0, "/b.jpeg"), T("\\.(png|jpe?g|gif|svg|woff2?)$", 0, "/b.woff"),
    T("\\.(png|jpe?g|gif|svg|woff2?)$", 0, "/b.woff2"), T("\\.(png|jpe?g|gif|svg|woff2?)$", 0, "/b.woff3"),
    T("\\.(png|jpe?g|gif|svg|woff2?)$", 0, "/b.PNG"), T("\\.(png|jpe?g|gif|svg|woff2?)$", 1, "/b.PNG"),
    T("\\.(png|jpe?g|gif|svg|woff2?)$", 0, "/png"), T("\\.(png|jpe?g|gif|svg|woff2?)$", 0, ""),
    T("^/users/[0-9]+$", 0, "/users/1"), T("^/users/[0-9]+$", 0, "/users/"),
    T("^/users/[0-9]+$", 0, "/users/12a"), T("^/users/[0-9]+$", 0, "/x/users/12"),
    T("\\.php$", 0, "/index.php"), T("\\.php$", 0, "/index.php5"), T("\\.php$", 0, "/php"),
    T("\\.php$", 1, "/INDEX.PHP"), T("^/(api|admin)/", 0, "/api/x"), T("^/(api|admin)/", 0, "/admin/"),
    T("^/(api|admin)/", 0, "/apix/"), T("^/(api|admin)/", 0, "/ap/"), T("/\\.", 0, "/.git/config"),
    T("/\\.", 0, "/a.b/c"), T("/\\.", 0, "/a/.htaccess"), T("~$", 0, "/file.txt~"), T("~$", 0, "/~user"),
    T("^/~([^/]+)(/.*)?$", 0, "/~bob/x"), T("^/~([^/]+)(/.*)?$", 0, "/~/x"),
    T("\\.(css|js)$", 0, "/app.1a2b.js"), T("\\.(css|js)$", 0, "/app.json"),
    T("^/static/.*\\.[0-9a-f]{8}\\.(js|css)$", 0, "/static/app.0123abcd.js"),
    T("^/static/.*\\.[0-9a-f]{8}\\.(js|css)$", 0, "/static/app.0123abc.js"),
    T("^/static/.*\\.[0-9a-f]{8}\\.(js|css)$", 0, "/static/app.0123abcde.css"),
    T("^/(images|javascript|js|css|flash|media|static)/", 0, "/media/a"),
    T("^/(images|javascript|js|css|flash|media|static)/", 0, "/jss/a"),
    T("(\\.htaccess|\\.htpasswd|\\.git)", 0, "/a/.git/HEAD"), T("(\\.htaccess|\\.htpasswd|\\.git)", 0, "/a/git"),
    T("^/wp-(admin|includes)/.*\\.php$", 0, "/wp-admin/x/y.php"),
    T("^/wp-(admin|includes)/.*\\.php$", 0, "/wp-content/y.php"),
    T("\\.(ico|css|js|gif|jpe?g|png)(\\?[0-9]+)?$", 1, "/a.JPG"),
    T("^/download/.*/(mp3|ogg)/", 0, "/download/x/y/ogg/z"),
    T("^/download/.*/(mp3|ogg)/", 0, "/download/ogg/z"),
    T("^/[a-z]{2}(-[a-z]{2})?/", 0, "/en-us/x"), T("^/[a-z]{2}(-[a-z]{2})?/", 0, "/en/x"),
    T("^/[a-z]{2}(-[a-z]{2})?/", 0, "/eng/x"), T("^/[a-z]{2,3}/", 0, "/eng/x"),
    T("^/[a-z]{2,3}/", 0, "/engl/x"), T("^/a{0}b", 0, "/b"), T("^/a{0}b", 0, "/ab"),
    T("^/[[:alpha:]]+/[[:digit:]]+$", 0, "/abc/123"), T("^/[[:alpha:]]+/[[:digit:]]+$", 0, "/ab1/123"),
    T("[[:space:]]", 0, "/a b"), T("[[:space:]]", 0, "/ab"), T("^[[:upper:]]", 0, "Abc"),
    T("^[[:upper:]]", 0, "abc"), T("^[[:lower:]]+$", 0, "abc"), T("^[[:punct:]]+$", 0, "/.-"),
    T("^[[:xdigit:]]+$", 0, "DEADbeef"), T("^[[:xdigit:]]+$", 0, "xyz"), T("^[[:alnum:]]+$", 0, "a1"),
    T("[^a-z0-9/._-]", 0, "/ok/path-1.txt"), T("[^a-z0-9/._-]", 0, "/Bad"),
    T("^[]a]+$", 0, "]a]"), T("^[]-c]+$", 0, "]^_`ab"), T("^[^]-c]+$", 0, "-d"), T("^[^]a]+$", 0, "bc"), T("^[^]a]+$", 0, "b]"), T("^[a-]+$", 0, "a-a"),
    T("^[-a]+$", 0, "-a"), T("^.$", 0, "\n"), T("^.$", 0, "x"), T("^.$", 0, "xy"),
    T("a|b|c", 0, "zzc"), T("a|b|c", 0, "zzz"), T("^(a|ab)(c|bcd)(d*)$", 0, "abcd"),
    T("(a|b)*c", 0, "ababc"), T("(a|b)*c", 0, "abab"), T("^(a+|b+)*$", 0, "aabba"),
    T("^(a+|b+)*$", 0, "aabbac"), T("^a?a?a?aaa$", 0, "aaa"), T("^a?a?a?aaa$", 0, "aa"),
    T("x*", 0, ""), T("^$", 0, ""), T("^$", 0, "a"), T("$", 0, "abc"), T("^", 0, ""),
    T("abc", 1, "xABCx"), T("^[A-C]+$", 1, "abc"), T("^[^A-C]+$", 1, "abc"), T("^[^A-C]+$", 1, "xyz"),
    T("ß", 0, "/straße"), T("^/caf\xc3\xa9$", 0, "/caf\xc3\xa9"), T("[\x80-\xff]", 0, "/caf\xc3\xa9"),
    T("[\x80-\xff]", 0, "/cafe"), T("^a.b$", 0, "a\0b"), T("^a[^x]b$", 0, "a\0b"),
    T("b$", 0, "a\0b"), T("^a", 0, "\0a"), T("a\\{", 0, "a{"), T("a}", 0, "a}"), T("a]", 0, "a]"),
    T("\\^\\$", 0, "^$"), T("\\\\", 0, "a\\b"), T("(a)(b)(c)", 0, "abc"), T("((((a))))", 0, "a"),
    T("^(ab|a)(bc|c)$", 0, "abc"), T("^(a*)*b$", 0, "aaab"), T("^(a*)*b$", 0, "aaa"),
    T("^(a|)+$", 0, "aa"), T("^(|a)*$", 0, "aaa"), T("^a{1,3}b{2}$", 0, "aabb"),
    T("^a{1,3}b{2}$", 0, "aaaabb"), T("^(ab){2,}$", 0, "ababab"), T("^(ab){2,}$", 0, "ab"),
};

/* What glibc's regcomp(REG_EXTENDED | REG_NOSUB [| REG_ICASE]) and regexec(REG_STARTEND)
 * say, or -1 when glibc refuses the pattern. */
static int libc_search(const char *re, bool icase, const char *s, size_t len)
{
    regex_t r;
    if (regcomp(&r, re, REG_EXTENDED | REG_NOSUB | (icase ? REG_ICASE : 0)) != 0)
        return -1;
    regmatch_t m = {.rm_so = 0, .rm_eo = (regoff_t)len};
    int rc = regexec(&r, s, 1, &m, REG_STARTEND);
    regfree(&r);
    return rc == 0;
}

TEST(answers_as_the_c_library_on_the_table)
{
    CHECK(sizeof(cases) / sizeof(cases[0]) >= 100);
    int differ = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct case_ *c = &cases[i];
        size_t len = c->len;
        int want = libc_search(c->re, c->icase, c->text, len);
        struct pattern p;
        CHECK(pattern_compile(&p, c->re, c->icase, err, sizeof(err)) == 0);
        CHECK(p.posix);
        int got = pattern_search(&p, c->text, len);
        pattern_free(&p);
        if (got != want) {
            fprintf(stderr, "  \"%s\"%s on \"%.*s\": %d, the C library %d\n", c->re,
                    c->icase ? " (icase)" : "", (int)len, c->text, got, want);
            differ++;
        }
    }
    CHECK_EQ_INT(differ, 0);
}

static char *repeated(char c, size_t n, const char *tail)
{
    size_t t = strlen(tail);
    char *s = malloc(n + t + 1);
    memset(s, c, n);
    memcpy(s + n, tail, t + 1);
    return s;
}

TEST(long_texts_answer_as_the_c_library)
{
    const char *res[] = {"^/a*b$", "b$", "(ab|a)*c", "^[^/]*$", "a{5}b"};
    char *texts[] = {repeated('a', 10000, "b"), repeated('a', 10000, ""),
                     repeated('a', 5000, "aaaaab/")};
    for (size_t i = 0; i < sizeof(res) / sizeof(res[0]); i++)
        for (size_t k = 0; k < 3; k++) {
            size_t len = strlen(texts[k]);
            CHECK_EQ_INT(search_n(res[i], false, texts[k], len),
                         libc_search(res[i], false, texts[k], len));
        }
    for (size_t k = 0; k < 3; k++)
        free(texts[k]);
}

/* --- costs ------------------------------------------------------------------------------ */

static double seconds_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

TEST(nested_stars_on_ten_thousand_a_return_quickly)
{
    char *text = repeated('a', 10000, "");
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(!search_n("(a*)*b", false, text, 10000));
    CHECK(search_n("^(a|aa)+$", false, text, 9999));
    CHECK(!search_n("(a|a)*(a|a)*(a|a)*c", false, text, 10000));
    CHECK(seconds_since(&t0) < 1.0);
    free(text);
}

/* Counting allocations: this binary's malloc family forwards to glibc's and counts.
 * AddressSanitizer brings its own, with which these would clash: there, matching's
 * freedom from allocation is checked by the server's tests (the alloc_counter library). */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NO_ALLOC_COUNT
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define NO_ALLOC_COUNT
#endif

#ifndef NO_ALLOC_COUNT
extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t nmemb, size_t size);
extern void *__libc_realloc(void *ptr, size_t size);
extern void __libc_free(void *ptr);
static unsigned long allocations;
void *malloc(size_t size) { allocations++; return __libc_malloc(size); }
void *calloc(size_t n, size_t size) { allocations++; return __libc_calloc(n, size); }
void *realloc(void *p, size_t size) { allocations++; return __libc_realloc(p, size); }
void free(void *p) { __libc_free(p); }
#endif

TEST(matching_allocates_nothing)
{
#ifndef NO_ALLOC_COUNT
    struct pattern p;
    CHECK(pattern_compile(&p, "\\.(png|jpe?g|gif|svg|woff2?)$", true, err, sizeof(err)) == 0);
    unsigned long before = allocations;
    bool m = pattern_search(&p, "/assets/logo.PNG", 16);
    m = pattern_search(&p, "/assets/a/b/c/d/e/f/g/h/i", 25) || !m;
    unsigned long after = allocations;
    pattern_free(&p);
    CHECK(!m);
    CHECK_EQ_INT(after - before, 0);
    CHECK(allocations > 0); /* the counter counts: compiling allocated */
#endif
}
