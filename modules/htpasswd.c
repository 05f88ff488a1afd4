/* htpasswd.c — reading `htpasswd` files and checking passwords against them (libxcrypt).
 *
 * The table is an array of users sorted by name: found by binary search, and a duplicate
 * is two neighbours after the sort. Verifying is crypt_rn() with the stored hash as the
 * setting (the hash carries its own method, cost and salt) and a constant-time comparison
 * of the result with the hash.
 */
#include "htpasswd.h"

#include <crypt.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct htpasswd_user {
    char *name; /* NUL-terminated; the name and hash share one allocation */
    char *hash;
    unsigned line;
};

struct htpasswd {
    struct htpasswd_user *users; /* sorted by name */
    size_t n;
};

static void say(char *err, size_t len, const char *path, unsigned line, const char *what,
                const char *detail)
{
    if (line)
        snprintf(err, len, "%s:%u: %s%s", path, line, what, detail);
    else
        snprintf(err, len, "%s: %s%s", path, what, detail);
}

static bool in_crypt_alphabet(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '/'))
            return false;
    }
    return true;
}

/* bcrypt: "$2y$" two digits "$", then 53 characters (22 of salt, 31 of hash). */
static bool is_bcrypt(const char *h)
{
    return strlen(h) == 60 && h[0] == '$' && h[1] == '2' && strchr("aby", h[2]) &&
           h[3] == '$' && h[4] >= '0' && h[4] <= '3' && h[5] >= '0' && h[5] <= '9' &&
           h[6] == '$' && in_crypt_alphabet(h + 7, 53);
}

/* SHA-crypt: "$5$" or "$6$", an optional "rounds=N$", a salt of up to 16, "$", and a hash
 * of 43 (SHA-256) or 86 (SHA-512) characters. */
static bool is_sha_crypt(const char *h)
{
    if (h[0] != '$' || (h[1] != '5' && h[1] != '6') || h[2] != '$')
        return false;
    const char *p = h + 3;
    if (strncmp(p, "rounds=", 7) == 0) {
        p += 7;
        const char *digits = p;
        while (*p >= '0' && *p <= '9')
            p++;
        if (p == digits || p - digits > 9 || *p++ != '$')
            return false;
    }
    const char *dollar = strchr(p, '$');
    if (!dollar || dollar - p > 16 || strchr(p, ':'))
        return false;
    size_t want = h[1] == '5' ? 43 : 86;
    return strlen(dollar + 1) == want && in_crypt_alphabet(dollar + 1, want);
}

/* Why a hash is refused, naming what it looks like; NULL if it is accepted. */
static const char *refusal(const char *h)
{
    if (is_bcrypt(h) || is_sha_crypt(h))
        return NULL;
    if (strncmp(h, "$apr1$", 6) == 0)
        return "Apache MD5 ($apr1$, htpasswd's default) is not supported: make the line "
               "again with htpasswd -B (bcrypt) or -5 (SHA-512)";
    if (strncmp(h, "{SHA}", 5) == 0)
        return "unsalted SHA-1 ({SHA}) is not supported: make the line again with "
               "htpasswd -B (bcrypt) or -5 (SHA-512)";
    if (strncmp(h, "$2", 2) == 0 || strncmp(h, "$5$", 3) == 0 || strncmp(h, "$6$", 3) == 0)
        return "malformed bcrypt or SHA-crypt hash";
    return "not a bcrypt ($2y$) or SHA-crypt ($5$, $6$) hash (crypt DES, MD5 and plain "
           "text are not supported): make the line with htpasswd -B or -5";
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct htpasswd_user *)a)->name,
                  ((const struct htpasswd_user *)b)->name);
}

static int add_user(struct htpasswd *h, size_t *cap, const char *name, size_t name_len,
                    const char *hash, unsigned line)
{
    if (h->n == *cap) {
        size_t n = *cap ? *cap * 2 : 16;
        struct htpasswd_user *u = realloc(h->users, n * sizeof(*u));
        if (!u)
            return -1;
        h->users = u;
        *cap = n;
    }
    size_t hash_len = strlen(hash);
    char *mem = malloc(name_len + hash_len + 2);
    if (!mem)
        return -1;
    memcpy(mem, name, name_len);
    mem[name_len] = '\0';
    memcpy(mem + name_len + 1, hash, hash_len + 1);
    h->users[h->n++] = (struct htpasswd_user){mem, mem + name_len + 1, line};
    return 0;
}

/* One line, without its line end. Returns 0 (a user added, or nothing to add) or -1 with
 * the message in err. */
static int read_line(struct htpasswd *h, size_t *cap, char *s, const char *path,
                     unsigned line, char *err, size_t err_len)
{
    const char *p = s;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p == '\0' || *p == '#')
        return 0;
    char *colon = strchr(s, ':');
    if (!colon || colon == s)
        return say(err, err_len, path, line, "expected NAME:HASH", ""), -1;
    for (const char *q = s; q < colon; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7f)
            return say(err, err_len, path, line, "a control character in the user name",
                       ""), -1;
    char *hash = colon + 1;
    char *comment = strchr(hash, ':'); /* NAME:HASH:COMMENT */
    if (comment)
        *comment = '\0';
    const char *why = refusal(hash);
    if (why)
        return say(err, err_len, path, line, why, ""), -1;
    if (h->n == HTPASSWD_USERS_MAX)
        return say(err, err_len, path, line, "too many users", ""), -1;
    if (add_user(h, cap, s, (size_t)(colon - s), hash, line) < 0)
        return say(err, err_len, path, line, "out of memory", ""), -1;
    return 0;
}

static int read_lines(struct htpasswd *h, FILE *f, const char *path, char *err, size_t len)
{
    char buf[HTPASSWD_LINE_MAX + 2];
    size_t cap = 0;
    unsigned line = 0;
    while (fgets(buf, sizeof(buf), f)) {
        line++;
        size_t n = strlen(buf);
        if (n && buf[n - 1] == '\n')
            buf[--n] = '\0';
        else if (!feof(f))
            return say(err, len, path, line, "line too long", ""), -1;
        if (n && buf[n - 1] == '\r')
            buf[--n] = '\0';
        if (read_line(h, &cap, buf, path, line, err, len) < 0)
            return -1;
    }
    if (ferror(f))
        return say(err, len, path, 0, "cannot read: ", strerror(errno)), -1;
    return 0;
}

/* Sort, and refuse a user listed twice. */
static int index_users(struct htpasswd *h, const char *path, char *err, size_t len)
{
    if (h->n == 0)
        return say(err, len, path, 0, "no user in the file", ""), -1;
    qsort(h->users, h->n, sizeof(h->users[0]), by_name);
    for (size_t i = 1; i < h->n; i++) {
        if (strcmp(h->users[i - 1].name, h->users[i].name) != 0)
            continue;
        const struct htpasswd_user *a = &h->users[i - 1], *b = &h->users[i];
        char detail[64];
        snprintf(detail, sizeof(detail), " (also on line %u)",
                 a->line < b->line ? a->line : b->line);
        say(err, len, path, a->line > b->line ? a->line : b->line, "user listed twice",
            detail);
        return -1;
    }
    return 0;
}

struct htpasswd *htpasswd_load(const char *path, char *err, size_t err_len)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        say(err, err_len, path, 0, "cannot open: ", strerror(errno));
        return NULL;
    }
    struct htpasswd *h = calloc(1, sizeof(*h));
    if (!h) {
        fclose(f);
        say(err, err_len, path, 0, "out of memory", "");
        return NULL;
    }
    int rc = read_lines(h, f, path, err, err_len);
    fclose(f);
    if (rc < 0 || index_users(h, path, err, err_len) < 0) {
        htpasswd_free(h);
        return NULL;
    }
    return h;
}

void htpasswd_free(struct htpasswd *h)
{
    if (!h)
        return;
    for (size_t i = 0; i < h->n; i++)
        free(h->users[i].name);
    free(h->users);
    free(h);
}

size_t htpasswd_count(const struct htpasswd *h)
{
    return h->n;
}

static const struct htpasswd_user *find(const struct htpasswd *h, const char *name)
{
    struct htpasswd_user key = {.name = (char *)name};
    return bsearch(&key, h->users, h->n, sizeof(h->users[0]), by_name);
}

/* Equal strings, in a time that depends on their lengths only. */
static bool same_secret(const char *a, const char *b)
{
    size_t n = strlen(a);
    if (n != strlen(b))
        return false;
    unsigned char diff = 0;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

/* Does pass (NUL-terminated) hash to hash? -1 if it could not be computed. The work
 * area of libxcrypt is some 32 KiB: from the heap, not a thread's stack. */
static int verify(const char *pass, const char *hash)
{
    struct crypt_data *cd = calloc(1, sizeof(*cd));
    if (!cd)
        return -1;
    const char *out = crypt_rn(pass, hash, cd, (int)sizeof(*cd));
    int ok = out && out[0] != '*' && same_secret(out, hash);
    explicit_bzero(cd, sizeof(*cd));
    free(cd);
    return ok;
}

enum htpasswd_result htpasswd_check(const struct htpasswd *h, const char *user, size_t user_len,
                                    const char *pass, size_t pass_len)
{
    char name[HTPASSWD_SECRET_MAX + 1], secret[HTPASSWD_SECRET_MAX + 1];
    if (user_len > HTPASSWD_SECRET_MAX || pass_len > HTPASSWD_SECRET_MAX ||
        memchr(user, '\0', user_len) || memchr(pass, '\0', pass_len))
        return HTPASSWD_NO_USER;
    memcpy(name, user, user_len);
    name[user_len] = '\0';
    memcpy(secret, pass, pass_len);
    secret[pass_len] = '\0';
    const struct htpasswd_user *u = find(h, name);
    /* An unknown user costs what a known one does: hashed against the first user's. */
    int ok = verify(secret, u ? u->hash : h->users[0].hash);
    explicit_bzero(secret, sizeof(secret));
    if (ok < 0)
        return HTPASSWD_FAILED;
    if (!u)
        return HTPASSWD_NO_USER;
    return ok ? HTPASSWD_OK : HTPASSWD_MISMATCH;
}
