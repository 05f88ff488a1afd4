/* regex.c — PCRE2 behind the few calls the server needs: compile at load, match per request
 * with the limits, captures as offsets. See regex.h for the choices. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "regex.h"

#include <pcre2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- the thread's match block ---------------------------------------------------------------
 *
 * Made on a thread's first match (never static TLS of any size: thread_per_connection's
 * stacks are small, and the block grows PCRE2's frame vector on the heap as a pattern needs
 * it, then keeps it), freed by the key's destructor when the thread ends. */
static pthread_key_t block_key;
static pthread_once_t block_once = PTHREAD_ONCE_INIT;
static _Thread_local pcre2_match_data *block;

static void block_free(void *md)
{
    pcre2_match_data_free(md);
}

static void block_key_make(void)
{
    pthread_key_create(&block_key, block_free);
}

static pcre2_match_data *thread_block(void)
{
    if (!block) {
        pthread_once(&block_once, block_key_make);
        block = pcre2_match_data_create(REGEX_GROUPS_MAX, NULL);
        if (block)
            pthread_setspecific(block_key, block);
    }
    return block;
}

/* --- the names of named groups, process-wide ------------------------------------------------
 *
 * Only ever added to, at load; read when a value is compiled (also at load). A short list:
 * a configuration names a handful of groups. */
static pthread_mutex_t names_lock = PTHREAD_MUTEX_INITIALIZER;
static char **names;
static size_t n_names, names_room;

static bool name_listed(const char *name, size_t len)
{
    for (size_t i = 0; i < n_names; i++)
        if (strlen(names[i]) == len && memcmp(names[i], name, len) == 0)
            return true;
    return false;
}

static void name_add(const char *name)
{
    if (name_listed(name, strlen(name)))
        return;
    if (n_names == names_room) {
        size_t room = names_room ? 2 * names_room : 16;
        char **grown = realloc(names, room * sizeof(*grown));
        if (!grown)
            return;
        names = grown;
        names_room = room;
    }
    char *copy = strdup(name);
    if (copy)
        names[n_names++] = copy;
}

/* Add the group names of code to the list. PCRE2's name table: entries of entry_size
 * bytes, each a group number in two bytes then the name, NUL-terminated. */
static void names_remember(const pcre2_code *code)
{
    uint32_t count = 0, entry_size = 0;
    PCRE2_SPTR table = NULL;
    pcre2_pattern_info(code, PCRE2_INFO_NAMECOUNT, &count);
    if (count == 0)
        return;
    pcre2_pattern_info(code, PCRE2_INFO_NAMEENTRYSIZE, &entry_size);
    pcre2_pattern_info(code, PCRE2_INFO_NAMETABLE, &table);
    pthread_mutex_lock(&names_lock);
    for (uint32_t i = 0; i < count; i++)
        name_add((const char *)table + (size_t)i * entry_size + 2);
    pthread_mutex_unlock(&names_lock);
}

bool regex_name_known(const char *name, size_t len)
{
    pthread_mutex_lock(&names_lock);
    bool known = name_listed(name, len);
    pthread_mutex_unlock(&names_lock);
    return known;
}

/* --- compiling and matching ----------------------------------------------------------------- */

/* The literal text every match of re must begin with, into r->prefix: only for a pattern
 * PCRE2 anchored that starts with '^' and has no '|' anywhere (so no branch escapes the
 * anchor), read up to the first byte with a meaning of its own; a literal followed by a
 * quantifier is left out (it may be absent or repeated). A non-alphanumeric byte after a
 * backslash is itself; a backslash before a letter or digit (a class, \Q...) ends it.
 * Under `~*` the prefix stops at a byte above 127: PCRE2's default tables fold ASCII
 * letters alone, which is what the test before the match compares. */
static void literal_prefix(struct regex *r, const char *re, const pcre2_code *code,
                           bool caseless)
{
    uint32_t options = 0;
    pcre2_pattern_info(code, PCRE2_INFO_ALLOPTIONS, &options);
    if (re[0] != '^' || !(options & PCRE2_ANCHORED) || strchr(re, '|'))
        return;
    const char *p = re + 1;
    size_t n = 0;
    while (*p && n < sizeof(r->prefix)) {
        const char *next = p + 1;
        char c = *p;
        if (c == '\\') {
            c = p[1];
            next = p + 2;
            if (!c || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                (c >= 'A' && c <= 'Z'))
                break;
        } else if (strchr("^$.[]()?*+{}|", c)) {
            break;
        }
        if (*next == '?' || *next == '*' || *next == '+' || *next == '{')
            break;
        if (caseless && (unsigned char)c > 127)
            break;
        r->prefix[n++] = c;
        p = next;
    }
    r->prefix_len = (uint8_t)n;
    r->prefix_caseless = caseless;
    uint32_t newline = 0;
    pcre2_config(PCRE2_CONFIG_NEWLINE, &newline);
    r->prefix_then_rest = n > 0 && strcmp(p, "(.*)$") == 0 && newline == PCRE2_NEWLINE_LF;
}

/* Does s[0, len) begin with r's prefix? */
static bool prefix_holds(const struct regex *r, const char *s, size_t len)
{
    if (len < r->prefix_len)
        return false;
    if (!r->prefix_caseless)
        return memcmp(s, r->prefix, r->prefix_len) == 0;
    for (unsigned i = 0; i < r->prefix_len; i++) {
        unsigned a = (unsigned char)s[i], b = (unsigned char)r->prefix[i];
        if ((a | 0x20) != (b | 0x20)) /* a letter in any case (a few more pass: PCRE2
                                         decides) */
            return false;
    }
    return true;
}

int regex_compile(struct regex *r, const char *re, enum regex_flags flags, char *err,
                  size_t len)
{
    memset(r, 0, sizeof(*r));
    uint32_t options = PCRE2_DOLLAR_ENDONLY | (flags & REGEX_CASELESS ? PCRE2_CASELESS : 0);
    int code_err;
    PCRE2_SIZE offset;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, options, &code_err,
                                     &offset, NULL);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code_err, msg, sizeof(msg));
        snprintf(err, len, "%s at offset %zu", (const char *)msg, (size_t)offset);
        return -1;
    }
    pcre2_match_context *ctx = pcre2_match_context_create(NULL);
    if (!ctx) {
        pcre2_code_free(code);
        snprintf(err, len, "out of memory");
        return -1;
    }
    pcre2_set_match_limit(ctx, REGEX_MATCH_LIMIT);
    pcre2_set_depth_limit(ctx, REGEX_DEPTH_LIMIT);
    /* JIT, where executable memory may be mapped; the interpreter otherwise. */
    r->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    uint32_t groups = 0;
    pcre2_pattern_info(code, PCRE2_INFO_CAPTURECOUNT, &groups);
    names_remember(code);
    literal_prefix(r, re, code, flags & REGEX_CASELESS);
    r->code = code;
    r->context = ctx;
    r->n_groups = groups;
    return 0;
}

void regex_free(struct regex *r)
{
    pcre2_match_context_free(r->context);
    pcre2_code_free(r->code);
    memset(r, 0, sizeof(*r));
}

/* Copy the offsets of the groups PCRE2 set (rc of them) into caps. */
static void keep_groups(const struct regex *r, const char *s, pcre2_match_data *md, int rc,
                        struct regex_captures *caps)
{
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    unsigned n = rc > 0 && rc <= REGEX_GROUPS_MAX ? (unsigned)rc : REGEX_GROUPS_MAX;
    caps->re = r;
    caps->subject = s;
    caps->n = n;
    for (unsigned i = 0; i < 2 * n; i++)
        caps->ov[i] = ov[i] == PCRE2_UNSET ? UINT32_MAX : (uint32_t)ov[i];
}

enum regex_result regex_match(const struct regex *r, const char *s, size_t len,
                              struct regex_captures *caps, char *why, size_t why_len)
{
    if (caps)
        caps->n = 0;
    pcre2_match_data *md = thread_block();
    if (!md) {
        if (why)
            snprintf(why, why_len, "out of memory");
        return REGEX_LIMIT;
    }
    if (r->prefix_len && !prefix_holds(r, s, len))
        return REGEX_NOMATCH;
    if (r->prefix_then_rest) {
        size_t at = r->prefix_len;
        if (memchr(s + at, '\n', len - at))
            return REGEX_NOMATCH;
        if (caps)
            *caps = (struct regex_captures){.re = r, .subject = s, .n = 2,
                                            .ov = {0, (uint32_t)len, (uint32_t)at,
                                                   (uint32_t)len}};
        return REGEX_MATCH;
    }
    /* JIT code straight to its matcher (pcre2_match's checks are for the interpreter and
     * for UTF, which is not used); the context's match limit holds in both. */
    int rc = r->jit ? pcre2_jit_match(r->code, (PCRE2_SPTR)s, len, 0, 0, md, r->context)
                    : pcre2_match(r->code, (PCRE2_SPTR)s, len, 0, 0, md, r->context);
    if (rc == PCRE2_ERROR_NOMATCH)
        return REGEX_NOMATCH;
    if (rc < 0) {
        if (why) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(rc, msg, sizeof(msg));
            snprintf(why, why_len, "%s", (const char *)msg);
        }
        return REGEX_LIMIT;
    }
    if (caps) /* rc == 0: more groups than the block holds; the first ones are set */
        keep_groups(r, s, md, rc, caps);
    return REGEX_MATCH;
}

const char *regex_group(const struct regex_captures *caps, unsigned k, size_t *len)
{
    *len = 0;
    if (!caps || k >= caps->n || caps->ov[2 * k] == UINT32_MAX)
        return "";
    *len = caps->ov[2 * k + 1] - caps->ov[2 * k];
    return caps->subject + caps->ov[2 * k];
}

const char *regex_group_named(const struct regex_captures *caps, const char *name, size_t len,
                              size_t *out_len)
{
    *out_len = 0;
    char z[64]; /* PCRE2 names are at most 32 bytes */
    if (!caps || !caps->re || caps->n == 0 || len >= sizeof(z))
        return "";
    memcpy(z, name, len);
    z[len] = '\0';
    /* A name used by several groups ((?J) or alternatives): the first one set. */
    PCRE2_SPTR first, last;
    int size = pcre2_substring_nametable_scan(caps->re->code, (PCRE2_SPTR)z, &first, &last);
    if (size <= 0)
        return "";
    for (PCRE2_SPTR e = first; e <= last; e += size) {
        unsigned k = (unsigned)(e[0] << 8 | e[1]);
        const char *p = regex_group(caps, k, out_len);
        if (k < caps->n && caps->ov[2 * k] != UINT32_MAX)
            return p;
    }
    return "";
}
