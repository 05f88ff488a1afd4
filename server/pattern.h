/* pattern.h — regular expressions for `location ~ RE`: compiled once at load, matched by
 * any number of threads at once with no allocation, no lock, and bounded time and stack.
 *
 * Syntax: POSIX extended, as nginx users write it for locations, with the PCRE shorthands
 * they write most:
 *   literals; `.` (any byte but NUL, as in POSIX); `[...]` with ranges, `^` negation, `]`
 *   first, `[:alpha:]` `[:digit:]` `[:alnum:]` `[:space:]` `[:upper:]` `[:lower:]`
 *   `[:punct:]` `[:xdigit:]` `[:blank:]` `[:cntrl:]` `[:graph:]` `[:print:]` (C locale);
 *   `\` before any punctuation for the character itself; `( )`, `(?:...)`, `|`; `*` `+` `?`
 *   `{m}` `{m,}` `{m,n}` (counts up to 255), a lazy `?` after any of them (accepted: whether
 *   a pattern matches does not depend on laziness); `^` and `$` at the ends of the text;
 *   `\d \D \w \W \s \S`, outside and inside brackets (where `\` escapes, as in PCRE, and
 *   not a literal backslash, as in POSIX).
 * Refused, with what and where: backreferences, lookaround, `(?i)` and other `(?` groups,
 *   `\b` and other letter escapes, possessive or doubled quantifiers, `{` that is not a
 *   count, collating elements (`[.x.]`, `[=x=]`), unmatched `(`, `)` or `[`.
 * Case-insensitive patterns (`~*`) fold ASCII letters only.
 *
 * Matching is a Thompson-NFA simulation (a Pike VM without captures) over a program of at
 * most PATTERN_MAX_INSNS instructions: time O(len x program), no backtracking, so that
 * `(a*)*b` on a long run of 'a' is as quick as any other pattern. Its thread lists live on
 * the caller's stack, sized by the program (at most ~12 KiB at the bound).
 */
#ifndef LFHTTPD_PATTERN_H
#define LFHTTPD_PATTERN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A longer program is refused as "pattern too complex": it bounds the matcher's stack. */
#define PATTERN_MAX_INSNS 2000
/* The largest count in {m,n}. */
#define PATTERN_MAX_REPEAT 255

struct pattern_insn {
    uint8_t op;  /* enum in pattern.c */
    uint8_t c;   /* the byte of a BYTE instruction */
    uint16_t x;  /* SPLIT, JMP: the target; CLASS: the set's index */
    uint16_t y;  /* SPLIT: the second target */
};

struct pattern_set {
    uint64_t bits[4]; /* byte b is in the set when bit b is */
};

/* Where a thread goes once past a consuming instruction: follow[at, at + n), or, when
 * dynamic, wherever the jumps from the next instruction lead at that position. */
struct pattern_next {
    uint32_t at;
    uint16_t n;
    uint16_t dynamic;
};

struct pattern {
    struct pattern_insn *prog;
    unsigned n_insns;
    struct pattern_set *sets;
    unsigned n_sets;
    bool anchored; /* begins with `^` on every path: only tried at the start */
    bool posix;    /* no PCRE-only construct: means the same to POSIX regcomp */
    /* The bytes a match can begin with after the text's start, when that is not every
     * byte and the pattern cannot match the empty string: the search skips to the next
     * such byte whenever no match is under way. first_byte: the only one, else -1. */
    bool skip;
    int first_byte;
    struct pattern_set first;
    /* The consuming instructions a match starting inside the text (neither at its start
     * nor at its end) begins with: added at each position without following the jumps. */
    uint16_t *start;
    unsigned n_start;
    struct pattern_next *next; /* per instruction */
    uint16_t *follow;          /* the lists of next */
};

/* Compile re (NUL-terminated); icase folds ASCII letters. Returns 0, or -1 with a message
 * in err (what is wrong and at which byte offset: "unmatched '(' at 5"); p is then empty
 * and need not be freed. */
int pattern_compile(struct pattern *p, const char *re, bool icase, char *err, size_t len);

void pattern_free(struct pattern *p);

/* Does p match anywhere in s[0, len)? s may hold NUL bytes and need not end with one.
 * Allocates nothing; p is only read. */
bool pattern_search(const struct pattern *p, const char *s, size_t len);

#endif
