/* Unit tests of the regex wrapper (server/regex.c): PCRE2's syntax as nginx users write it,
 * `~*`, the captures as offsets, the load-time message, `$` at the very end only, and the
 * limits that stop a pattern that backtracks without end. */
#define TEST_MAIN
#include "test.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "regex.h"

static char err[256];

/* Match re against s; aborts on a pattern that does not compile (callers pass valid ones). */
static enum regex_result match_caps(const char *re, enum regex_flags flags, const char *s,
                                    struct regex_captures *caps, struct regex *keep)
{
    struct regex local; /* kept in *keep, where caps->re points */
    struct regex *r = keep ? keep : &local;
    if (regex_compile(r, re, flags, err, sizeof(err)) < 0) {
        fprintf(stderr, "  pattern \"%s\" refused: %s\n", re, err);
        abort();
    }
    enum regex_result m = regex_match(r, s, strlen(s), caps, NULL, 0);
    if (!keep)
        regex_free(r);
    return m;
}

static bool search(const char *re, const char *s)
{
    return match_caps(re, 0, s, NULL, NULL) == REGEX_MATCH;
}

static bool group_is(const struct regex_captures *caps, unsigned k, const char *want)
{
    size_t len;
    const char *p = regex_group(caps, k, &len);
    return len == strlen(want) && memcmp(p, want, len) == 0;
}

TEST(literal_matches_anywhere_in_the_path)
{
    CHECK(search("php", "/index.php?x"));
    CHECK(!search("php", "/index.ph"));
}

TEST(tilde_star_ignores_case)
{
    CHECK(match_caps("\\.PNG$", REGEX_CASELESS, "/a.png", NULL, NULL) == REGEX_MATCH);
    CHECK(!search("\\.PNG$", "/a.png"));
}

TEST(inline_caseless_option_is_pcre_syntax)
{
    CHECK(search("(?i)\\.png$", "/A.PNG"));
}

TEST(negative_lookahead_excludes_the_named_directory)
{
    CHECK(search("/\\.(?!well-known)", "/.git/config"));
    CHECK(!search("/\\.(?!well-known)", "/.well-known/acme"));
}

TEST(numbered_groups_are_slices_of_the_path)
{
    struct regex_captures caps;
    const char *path = "/u/alice/docs/a.txt";
    CHECK(match_caps("^/u/([^/]+)/(.*)$", 0, path, &caps, NULL) == REGEX_MATCH);
    CHECK(caps.n == 3);
    CHECK(group_is(&caps, 1, "alice"));
    CHECK(group_is(&caps, 2, "docs/a.txt"));
    size_t len;
    CHECK(regex_group(&caps, 1, &len) == path + 3); /* no copy */
}

TEST(named_group_is_found_by_its_name)
{
    struct regex r;
    struct regex_captures caps;
    CHECK(match_caps("^/(?<user>[a-z]+)/", 0, "/bob/x", &caps, &r) == REGEX_MATCH);
    size_t len;
    const char *p = regex_group_named(&caps, "user", 4, &len);
    CHECK(len == 3 && memcmp(p, "bob", 3) == 0);
    regex_group_named(&caps, "other", 5, &len);
    CHECK(len == 0);
    CHECK(regex_name_known("user", 4));
    CHECK(!regex_name_known("usr", 3));
    regex_free(&r);
}

TEST(dollar_does_not_match_before_a_final_newline)
{
    CHECK(search("\\.php$", "/x.php"));
    CHECK(!search("\\.php$", "/x.php\n"));
}

TEST(invalid_pattern_is_refused_with_pcre2_message_and_offset)
{
    struct regex r;
    CHECK(regex_compile(&r, "^/(a", 0, err, sizeof(err)) == -1);
    CHECK(strcmp(err, "missing closing parenthesis at offset 4") == 0);
}

TEST(catastrophic_backtracking_stops_at_the_limit)
{
    char s[64];
    memset(s, 'a', sizeof(s) - 2);
    s[sizeof(s) - 2] = 'b';
    s[sizeof(s) - 1] = '\0';
    struct regex r;
    char why[128] = "";
    CHECK(regex_compile(&r, "^(a+)+$", 0, err, sizeof(err)) == 0);
    CHECK(regex_match(&r, s, strlen(s), NULL, why, sizeof(why)) == REGEX_LIMIT);
    CHECK(why[0] != '\0');
    regex_free(&r);
}

TEST(text_may_hold_nul_bytes)
{
    struct regex r;
    CHECK(regex_compile(&r, "a\\x00b", 0, err, sizeof(err)) == 0);
    CHECK(regex_match(&r, "xa\0b", 4, NULL, NULL, 0) == REGEX_MATCH);
    regex_free(&r);
}

/* systemd's MemoryDenyWriteExecute=yes is this prctl (Linux 6.3 on): no memory may become
 * writable and executable, which PCRE2's JIT needs. */
#define MDWE_SET 65          /* PR_SET_MDWE */
#define MDWE_REFUSE_EXEC 1UL /* PR_MDWE_REFUSE_EXEC_GAIN */

/* An anchored pattern's literal beginning is tested before PCRE2 is called (regex.h):
 * the answers are PCRE2's all the same. */
TEST(anchored_literal_beginning_refuses_other_paths_and_keeps_groups)
{
    struct regex_captures caps;
    CHECK(match_caps("^/old/(.*)$", 0, "/old/page", &caps, NULL) == REGEX_MATCH);
    CHECK(group_is(&caps, 1, "page"));
    CHECK(match_caps("^/old/(.*)$", 0, "/new/page", &caps, NULL) == REGEX_NOMATCH);
    CHECK(caps.n == 0);
    CHECK(!search("^/old/", "/ol"));
    CHECK(!search("^/old/", "x/old/"));
}

TEST(anchored_literal_beginning_under_tilde_star_ignores_ascii_case)
{
    CHECK(match_caps("^www\\.(.+)$", REGEX_CASELESS, "WwW.example.com", NULL, NULL) ==
          REGEX_MATCH);
    CHECK(match_caps("^www\\.(.+)$", REGEX_CASELESS, "wwwxexample.com", NULL, NULL) ==
          REGEX_NOMATCH);
}

TEST(literal_before_a_quantifier_may_be_absent_or_repeated)
{
    CHECK(search("^/ab?c", "/ac"));
    CHECK(search("^/ab*c", "/ac"));
    CHECK(search("^/ab{0,2}c", "/ac"));
    CHECK(search("^/ab+c", "/abbc"));
}

TEST(alternation_after_an_anchor_is_not_a_beginning)
{
    CHECK(search("^/a|/b", "/x/b"));
    CHECK(search("^/a/|^/b/", "/b/x"));
}

TEST(escaped_byte_is_literal_and_escaped_letter_is_a_class)
{
    CHECK(search("^\\.x", ".x"));
    CHECK(!search("^\\.x", "ax"));
    CHECK(search("^\\d+/", "42/"));
    CHECK(search("^\\w/", "a/"));
    CHECK(search("^\\Q/a.b\\E", "/a.b"));
}

/* "^PREFIX(.*)$" is answered without PCRE2 (regex.h): as PCRE2 answers "^PREFIX(.*)$(?#)",
 * which it matches itself, for texts with and without the prefix, a newline, a NUL. */
TEST(prefix_then_rest_answers_as_pcre2)
{
    static const char *const texts[] = {"/old/page", "/old/", "/old", "/OLD/x", "/new/old/x",
                                        "/old/a\nb", "/old/a\n", "/old/\0x", "/old/a/b?c"};
    static const size_t lens[] = {9, 5, 4, 6, 10, 8, 7, 7, 10};
    const struct { const char *re; enum regex_flags flags; } pats[] = {
        {"^/old/(.*)$", 0}, {"^/old/(.*)$", REGEX_CASELESS}, {"^/o(.*)$", 0}};
    for (unsigned p = 0; p < sizeof(pats) / sizeof(pats[0]); p++) {
        char slow_re[64];
        snprintf(slow_re, sizeof(slow_re), "%s(?#)", pats[p].re);
        struct regex fast, slow;
        CHECK(regex_compile(&fast, pats[p].re, pats[p].flags, err, sizeof(err)) == 0);
        CHECK(regex_compile(&slow, slow_re, pats[p].flags, err, sizeof(err)) == 0);
        CHECK(fast.prefix_then_rest && !slow.prefix_then_rest);
        for (unsigned t = 0; t < sizeof(texts) / sizeof(texts[0]); t++) {
            struct regex_captures a, b;
            enum regex_result ra = regex_match(&fast, texts[t], lens[t], &a, NULL, 0);
            enum regex_result rb = regex_match(&slow, texts[t], lens[t], &b, NULL, 0);
            CHECK(ra == rb);
            CHECK(a.n == b.n);
            for (unsigned k = 0; ra == REGEX_MATCH && k < 2; k++) {
                size_t la, lb;
                const char *ga = regex_group(&a, k, &la), *gb = regex_group(&b, k, &lb);
                CHECK(la == lb && memcmp(ga, gb, la) == 0);
            }
        }
        regex_free(&fast);
        regex_free(&slow);
    }
}

TEST(without_executable_memory_the_interpreter_answers_the_same)
{
    pid_t pid = fork();
    if (pid == 0) { /* the child gives up W+X memory for good, then compiles and matches */
        pcre2_jit_free_unused_memory(NULL); /* the earlier tests' JIT pages, kept for reuse */
        if (prctl(MDWE_SET, MDWE_REFUSE_EXEC, 0UL, 0UL, 0UL) != 0)
            _exit(3); /* an older kernel: nothing to show */
        struct regex r;
        struct regex_captures caps;
        if (regex_compile(&r, "^/u/([^/]+)/", 0, err, sizeof(err)) < 0)
            _exit(1);
        bool ok = !r.jit && regex_match(&r, "/u/ann/x", 8, &caps, NULL, 0) == REGEX_MATCH &&
                  group_is(&caps, 1, "ann");
        _exit(ok ? 0 : 2);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status));
    if (WEXITSTATUS(status) == 3)
        return; /* no PR_SET_MDWE here */
    if (WEXITSTATUS(status) != 0)
        fprintf(stderr, "  the child exited %d\n", WEXITSTATUS(status));
    CHECK(WEXITSTATUS(status) == 0);
    struct regex r; /* and here, where W+X memory is allowed, the JIT compiled it */
    CHECK(regex_compile(&r, "^/u/([^/]+)/", 0, err, sizeof(err)) == 0);
    CHECK(r.jit);
    regex_free(&r);
}
