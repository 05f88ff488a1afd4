/* regex.h — regular expressions for `location ~ RE`, `location ~* RE` and
 * `server_name ~RE`: PCRE2 (the library nginx uses), compiled once at load, matched by any
 * number of threads at once with no lock, no allocation per match and bounded work.
 *
 * Syntax and meaning are PCRE2's (Perl's): captures `( )`, named captures `(?<name> )`,
 * lookaround, `(?i)` and the other options, backreferences, `\b`... `~*` compiles with
 * PCRE2_CASELESS. One choice differs from PCRE2's default (and from nginx's): `$` matches at
 * the very end of the text only (PCRE2_DOLLAR_ENDONLY), never before a final newline, so
 * that `\.php$` does not take "/x.php\n" (a path decoded from "/x.php%0A") for a PHP file.
 *
 * Compiled with JIT where the system allows it; where it does not (a process under
 * systemd's MemoryDenyWriteExecute=yes cannot map executable memory) the interpreter runs
 * instead, silently: the answers are the same. Every match runs under a match limit and a
 * depth limit (REGEX_MATCH_LIMIT, REGEX_DEPTH_LIMIT): a pattern that backtracks without end
 * (`^(a+)+$` on "aaaa...b") stops with REGEX_LIMIT instead of holding a thread.
 *
 * Each thread keeps one match block (its ovector, REGEX_GROUPS_MAX pairs, and PCRE2's
 * backtracking frames), made on its first match and freed when the thread ends.
 */
#ifndef LFHTTPD_REGEX_H
#define LFHTTPD_REGEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Groups remembered of a match, the whole match (group 0) included: $1..$9 and named groups
 * numbered up to 15. A group numbered beyond is empty. */
#define REGEX_GROUPS_MAX 16
/* pcre2_set_match_limit: how many times the matcher may try a path (backtracking steps). A
 * path of REQUEST_PATH_MAX bytes through an ordinary pattern takes a few thousand. */
#define REGEX_MATCH_LIMIT 1000000
/* pcre2_set_depth_limit: how deeply the interpreter may nest its backtracking frames
 * (which bounds their memory). JIT code ignores it: its stack, PCRE2's default 32 KiB on
 * the thread's own stack, bounds it instead (PCRE2_ERROR_JIT_STACKLIMIT, REGEX_LIMIT). */
#define REGEX_DEPTH_LIMIT 10000

enum regex_flags {
    REGEX_CASELESS = 1, /* `~*` */
};

#define REGEX_PREFIX_MAX 16

struct regex {
    void *code;    /* pcre2_code */
    void *context; /* pcre2_match_context: the limits */
    bool jit;      /* JIT-compiled (else interpreted) */
    unsigned n_groups; /* capturing groups, without group 0 */
    /* What an anchored pattern's text must begin with ("/old/" of "^/old/(.*)$"), read
     * from the pattern at load: a text that does not is refused without calling PCRE2
     * (the price of a call is that of a few hundred instructions; rewrites and regex
     * locations mostly do not match). prefix_len 0: none. */
    uint8_t prefix_len;
    bool prefix_caseless; /* `~*`: compared without ASCII case (the prefix is ASCII) */
    /* The whole pattern is '^', the prefix and "(.*)$" (a rewrite's "^/old/(.*)$"): a
     * text matches when it begins with the prefix and holds no newline after it (PCRE2's
     * '.', newline LF), its group 1 the rest; answered without PCRE2. */
    bool prefix_then_rest;
    char prefix[REGEX_PREFIX_MAX];
};

/* The captures of the last regex a request matched: offsets into subject (the request's
 * path, which lives as long as the request). n == 0: none. */
struct regex_captures {
    const struct regex *re; /* whose group names $name looks up */
    const char *subject;
    unsigned n;                       /* groups set in ov, group 0 included */
    uint32_t ov[2 * REGEX_GROUPS_MAX]; /* start, end of each; UINT32_MAX: unset */
};

enum regex_result {
    REGEX_NOMATCH = 0,
    REGEX_MATCH = 1,
    REGEX_LIMIT = -1, /* over the match or depth limit, or another matcher error */
};

/* Compile re (NUL-terminated). Returns 0, or -1 with PCRE2's message and the byte offset
 * in err ("missing closing parenthesis at offset 5"); r is then empty and need not be
 * freed. */
int regex_compile(struct regex *r, const char *re, enum regex_flags flags, char *err,
                  size_t len);

void regex_free(struct regex *r);

/* Search s[0, len) (which may hold NUL bytes). caps, if not NULL, receives the groups on
 * a match (and n = 0 otherwise). why, if not NULL, receives PCRE2's reason on REGEX_LIMIT. */
enum regex_result regex_match(const struct regex *r, const char *s, size_t len,
                              struct regex_captures *caps, char *why, size_t why_len);

/* Group k (0..9) of caps: its bytes, or an empty slice when unset or absent. */
const char *regex_group(const struct regex_captures *caps, unsigned k, size_t *len);

/* The group named name[0, len) of caps, as regex_group. */
const char *regex_group_named(const struct regex_captures *caps, const char *name, size_t len,
                              size_t *out_len);

/* Has any regex compiled in this process a group named name[0, len)? The names are
 * process-wide, as nginx's: `$name` in any value is known once some regex defines it (and
 * stays known across reloads; without a match it is empty). */
bool regex_name_known(const char *name, size_t len);

#endif
