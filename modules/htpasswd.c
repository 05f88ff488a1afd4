/* htpasswd.c — reading `htpasswd` files and checking passwords against them, as nginx's
 * auth_basic does: libxcrypt for the crypt(3) kinds, OpenSSL's EVP digests for Apache's
 * MD5 ($apr1$), {SHA} and {SSHA}.
 *
 * The table is an array of users sorted by name then line: found by binary search, and a
 * name listed again is a later neighbour after the sort (dropped: nginx takes the first
 * line that names the user). Verifying computes the hash the stored one would be for the
 * password (the stored hash carries its own kind, salt and cost), as nginx does, and
 * compares the two strings in constant time (CRYPTO_memcmp). A hash that cannot be a
 * result of its kind is still computed against, and never matches.
 *
 * What a load notices (weak kinds, malformed hashes, lines that are not NAME:HASH, a user
 * listed again) is gathered per kind and said once a kind, naming its first line.
 */
#include "htpasswd.h"

#include <crypt.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

/* What a stored hash is: its kind decides how it is verified and what a load says. */
enum kind {
    KIND_BCRYPT,       /* $2y$ $2a$ $2b$ */
    KIND_SHA_CRYPT,    /* $5$ $6$ */
    KIND_CRYPT_OTHER,  /* another method libxcrypt takes as sound ($y$ yescrypt...) */
    KIND_APR1,         /* Apache's MD5: $apr1$ */
    KIND_MD5_CRYPT,    /* $1$ */
    KIND_DES,          /* traditional DES crypt: 13 characters */
    KIND_CRYPT_LEGACY, /* another method libxcrypt calls legacy (_ BSDi DES...) */
    KIND_PLAIN,        /* {PLAIN} */
    KIND_SHA,          /* {SHA}: base64 of SHA-1(password) */
    KIND_SSHA,         /* {SSHA}: base64 of SHA-1(password salt) salt */
    KIND_MALFORMED,    /* never matches */
};

/* What a load says, one line a kind a file. */
enum note {
    NOTE_APR1,
    NOTE_MD5_CRYPT,
    NOTE_DES,
    NOTE_CRYPT_LEGACY,
    NOTE_PLAIN,
    NOTE_SHA,
    NOTE_SSHA,
    NOTE_MALFORMED,
    NOTE_NOT_A_USER, /* no ':' or an empty name */
    NOTE_AGAIN,      /* a user listed again */
    NOTE_COUNT,
};

struct htpasswd_user {
    char *name; /* NUL-terminated; the name and hash share one allocation */
    char *hash;
    unsigned line;
    enum kind kind;
};

struct htpasswd {
    struct htpasswd_user *users; /* sorted by name, then line */
    size_t n;
    const struct htpasswd_user *stand_in; /* hashed against for an unknown user */
};

/* The first line of a kind the load noticed, and how many lines of it there are. */
struct notes {
    unsigned line[NOTE_COUNT];
    unsigned count[NOTE_COUNT];
    char what[NOTE_COUNT][256]; /* the first line's message */
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
    if (!dollar || dollar - p > 16)
        return false;
    size_t want = h[1] == '5' ? 43 : 86;
    return strlen(dollar + 1) == want && in_crypt_alphabet(dollar + 1, want);
}

/* MD5 crypt, libxcrypt's $1$ or Apache's $apr1$ (magic given): the magic, a salt of up to
 * 8 characters without '$', "$", and 22 characters of hash. */
static bool is_md5_crypt(const char *h, const char *magic)
{
    size_t m = strlen(magic);
    if (strncmp(h, magic, m) != 0)
        return false;
    const char *dollar = strchr(h + m, '$');
    return dollar && dollar - (h + m) <= 8 && strlen(dollar + 1) == 22 &&
           in_crypt_alphabet(dollar + 1, 22);
}

/* Is s (n characters) base64 as OpenSSL writes it (padded, nothing else)? Its bytes into
 * out (room for 3 * n / 4), their number in *len. */
static bool base64_decode(const char *s, size_t n, unsigned char *out, size_t *len)
{
    if (n == 0 || n % 4 != 0 || n > 4 * 64)
        return false;
    int got = EVP_DecodeBlock(out, (const unsigned char *)s, (int)n);
    if (got < 0)
        return false;
    size_t pad = s[n - 1] == '=' ? (s[n - 2] == '=' ? 2 : 1) : 0;
    *len = (size_t)got - pad;
    char again[4 * 64 + 1];
    EVP_EncodeBlock((unsigned char *)again, out, (int)*len);
    return strlen(again) == n && memcmp(again, s, n) == 0; /* one spelling per bytes */
}

/* {SHA}: the base64 of 20 bytes; {SSHA}: of 20 bytes and a salt. */
static bool is_sha_base64(const char *b64, bool salted)
{
    unsigned char raw[3 * 64];
    size_t len;
    if (!base64_decode(b64, strlen(b64), raw, &len))
        return false;
    return salted ? len >= 20 : len == 20;
}

static enum kind kind_of(const char *h)
{
    if (strncmp(h, "$apr1$", 6) == 0)
        return is_md5_crypt(h, "$apr1$") ? KIND_APR1 : KIND_MALFORMED;
    if (strncmp(h, "{PLAIN}", 7) == 0)
        return KIND_PLAIN;
    if (strncmp(h, "{SSHA}", 6) == 0)
        return is_sha_base64(h + 6, true) ? KIND_SSHA : KIND_MALFORMED;
    if (strncmp(h, "{SHA}", 5) == 0)
        return is_sha_base64(h + 5, false) ? KIND_SHA : KIND_MALFORMED;
    /* the rest is crypt(3)'s, as nginx hands it to crypt_r() */
    if (is_bcrypt(h))
        return KIND_BCRYPT;
    if (is_sha_crypt(h))
        return KIND_SHA_CRYPT;
    if (strncmp(h, "$2", 2) == 0 || strncmp(h, "$5$", 3) == 0 || strncmp(h, "$6$", 3) == 0)
        return KIND_MALFORMED;
    if (strncmp(h, "$1$", 3) == 0)
        return is_md5_crypt(h, "$1$") ? KIND_MD5_CRYPT : KIND_MALFORMED;
    if (h[0] != '$' && h[0] != '_')
        return strlen(h) == 13 && in_crypt_alphabet(h, 13) ? KIND_DES : KIND_MALFORMED;
    switch (crypt_checksalt(h)) {
    case CRYPT_SALT_OK:
        return KIND_CRYPT_OTHER;
    case CRYPT_SALT_METHOD_LEGACY:
    case CRYPT_SALT_TOO_CHEAP:
        return KIND_CRYPT_LEGACY;
    default:
        return KIND_MALFORMED;
    }
}

/* The note a kind makes, and its words; NOTE_COUNT for the sound kinds. */
static enum note note_of(enum kind k, const char **what)
{
    static const struct {
        enum kind kind;
        enum note note;
        const char *what;
    } weak[] = {
        {KIND_APR1, NOTE_APR1, "an Apache MD5 ($apr1$)"},
        {KIND_MD5_CRYPT, NOTE_MD5_CRYPT, "an MD5-crypt ($1$)"},
        {KIND_DES, NOTE_DES, "a DES crypt (8 characters count)"},
        {KIND_CRYPT_LEGACY, NOTE_CRYPT_LEGACY, "a legacy crypt"},
        {KIND_PLAIN, NOTE_PLAIN, "a {PLAIN} (plain text)"},
        {KIND_SHA, NOTE_SHA, "an {SHA} (unsalted SHA-1)"},
        {KIND_SSHA, NOTE_SSHA, "an {SSHA} (salted SHA-1)"},
    };
    for (size_t i = 0; i < sizeof(weak) / sizeof(weak[0]); i++)
        if (weak[i].kind == k)
            return *what = weak[i].what, weak[i].note;
    return k == KIND_MALFORMED ? NOTE_MALFORMED : NOTE_COUNT;
}

/* What a malformed hash claims to be, for the load's words (never the hash itself: it
 * may be a password written without {PLAIN}). */
static const char *malformed(const char *h)
{
    static const struct {
        const char *prefix, *what;
    } kinds[] = {
        {"$apr1$", "a malformed Apache MD5 ($apr1$) hash"},
        {"{SSHA}", "an {SSHA} hash that is not base64 of 20 bytes or more"},
        {"{SHA}", "an {SHA} hash that is not base64 of 20 bytes"},
        {"$1$", "a malformed MD5-crypt ($1$) hash"},
        {"$2", "a malformed bcrypt hash"},
        {"$5$", "a malformed SHA-256 crypt hash"},
        {"$6$", "a malformed SHA-512 crypt hash"},
        {"$", "a crypt hash of a method libxcrypt does not know, or malformed"},
    };
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (strncmp(h, kinds[i].prefix, strlen(kinds[i].prefix)) == 0)
            return kinds[i].what;
    return "a hash of no known kind (plain text needs the prefix {PLAIN})";
}

static void notice(struct notes *n, enum note which, unsigned line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void notice(struct notes *n, enum note which, unsigned line, const char *fmt, ...)
{
    if (n->count[which]++)
        return;
    n->line[which] = line;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(n->what[which], sizeof(n->what[which]), fmt, ap);
    va_end(ap);
}

/* One line a kind: "PATH:LINE: what (and N more lines of this kind in the file)\n"; a
 * line that does not fit whole is left out. */
static void write_notes(const struct notes *n, const char *path, char *out, size_t len)
{
    size_t at = 0;
    if (!out || !len)
        return;
    out[0] = '\0';
    for (unsigned i = 0; i < NOTE_COUNT; i++) {
        if (!n->count[i])
            continue;
        char more[80] = "";
        if (n->count[i] > 1)
            snprintf(more, sizeof(more), " (and %u more line%s of this kind in the file)",
                     n->count[i] - 1, n->count[i] > 2 ? "s" : "");
        int w = snprintf(out + at, len - at, "%s:%u: %s%s\n", path, n->line[i], n->what[i],
                         more);
        if (w < 0 || (size_t)w >= len - at) {
            out[at] = '\0';
            break;
        }
        at += (size_t)w;
    }
}

static int by_name(const void *a, const void *b)
{
    const struct htpasswd_user *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->line > y->line) - (x->line < y->line);
}

static int by_name_only(const void *a, const void *b)
{
    return strcmp(((const struct htpasswd_user *)a)->name,
                  ((const struct htpasswd_user *)b)->name);
}

static int add_user(struct htpasswd *h, size_t *cap, const char *name, size_t name_len,
                    const char *hash, unsigned line, enum kind kind)
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
    h->users[h->n++] = (struct htpasswd_user){mem, mem + name_len + 1, line, kind};
    return 0;
}

/* One line, without its line end. Returns 0 (a user added, or nothing to add) or -1 with
 * the message in err. */
static int read_line(struct htpasswd *h, size_t *cap, struct notes *notes, char *s,
                     const char *path, unsigned line, char *err, size_t err_len)
{
    const char *p = s;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p == '\0' || *p == '#')
        return 0;
    char *colon = strchr(s, ':');
    if (!colon || colon == s) { /* nginx: no name can match it */
        notice(notes, NOTE_NOT_A_USER, line,
               "not NAME:HASH (%s): skipped, as nginx skips it", colon ? "no name" : "no ':'");
        return 0;
    }
    for (const char *q = s; q < colon; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7f)
            return say(err, err_len, path, line, "a control character in the user name",
                       ""), -1;
    char *hash = colon + 1;
    char *comment = strchr(hash, ':'); /* NAME:HASH:COMMENT */
    if (comment)
        *comment = '\0';
    if (h->n == HTPASSWD_USERS_MAX)
        return say(err, err_len, path, line, "too many users", ""), -1;
    enum kind kind = kind_of(hash);
    int name_len = (int)(colon - s);
    const char *what;
    enum note note = note_of(kind, &what);
    if (note == NOTE_MALFORMED)
        notice(notes, note, line, "user '%.*s' has %s: it never matches (401), as in nginx",
               name_len > 64 ? 64 : name_len, s, malformed(hash));
    else if (note != NOTE_COUNT)
        notice(notes, note, line, "user '%.*s' has %s password: accepted as nginx accepts "
               "it; `htpasswd -B` makes a bcrypt one", name_len > 64 ? 64 : name_len, s, what);
    if (add_user(h, cap, s, (size_t)name_len, hash, line, kind) < 0)
        return say(err, err_len, path, line, "out of memory", ""), -1;
    return 0;
}

static int read_lines(struct htpasswd *h, FILE *f, struct notes *notes, const char *path,
                      char *err, size_t len)
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
        if (read_line(h, &cap, notes, buf, path, line, err, len) < 0)
            return -1;
    }
    if (ferror(f)) {
        int e = errno;
        say(err, len, path, 0, "cannot read: ", strerror(e));
        errno = e;
        return -1;
    }
    return 0;
}

/* Sort; of a user listed again keep the first line, as nginx does; pick the stand-in. */
static int index_users(struct htpasswd *h, struct notes *notes, const char *path, char *err,
                       size_t len)
{
    if (h->n == 0)
        return say(err, len, path, 0, "no user in the file", ""), -1;
    qsort(h->users, h->n, sizeof(h->users[0]), by_name);
    size_t kept = 1;
    for (size_t i = 1; i < h->n; i++) {
        struct htpasswd_user *first = &h->users[kept - 1], *u = &h->users[i];
        if (strcmp(first->name, u->name) != 0) {
            h->users[kept++] = *u;
            continue;
        }
        notice(notes, NOTE_AGAIN, u->line, "user '%.64s' listed again (first on line %u): "
               "the first line counts, as in nginx", u->name, first->line);
        free(u->name);
    }
    h->n = kept;
    h->stand_in = &h->users[0];
    for (size_t i = 0; i < h->n; i++)
        if (h->users[i].kind != KIND_MALFORMED) {
            h->stand_in = &h->users[i];
            break;
        }
    return 0;
}

struct htpasswd *htpasswd_load(const char *path, char *err, size_t err_len, char *warn,
                               size_t warn_len)
{
    if (warn && warn_len)
        warn[0] = '\0';
    FILE *f = fopen(path, "re");
    if (!f) {
        int e = errno;
        say(err, err_len, path, 0, "cannot open: ", strerror(e));
        errno = e;
        return NULL;
    }
    struct htpasswd *h = calloc(1, sizeof(*h));
    struct notes *notes = calloc(1, sizeof(*notes));
    if (!h || !notes) {
        fclose(f);
        free(h);
        free(notes);
        say(err, err_len, path, 0, "out of memory", "");
        return NULL;
    }
    errno = EINVAL; /* what the text's errors leave; a read error sets its own */
    int rc = read_lines(h, f, notes, path, err, err_len);
    int e = errno;
    fclose(f);
    if (rc == 0) {
        e = EINVAL;
        rc = index_users(h, notes, path, err, err_len);
    }
    if (rc < 0) {
        htpasswd_free(h);
        free(notes);
        errno = e;
        return NULL;
    }
    if (warn)
        write_notes(notes, path, warn, warn_len);
    free(notes);
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
    return bsearch(&key, h->users, h->n, sizeof(h->users[0]), by_name_only);
}

/* Equal strings, in a time that depends on their lengths only. */
static bool same_secret(const char *a, const char *b)
{
    size_t n = strlen(a);
    return n == strlen(b) && CRYPTO_memcmp(a, b, n) == 0;
}

/* crypt(3): the stored hash is the setting. The work area of libxcrypt is some 32 KiB:
 * from the heap, not a thread's stack. */
static int verify_crypt(const char *pass, const char *hash)
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

static bool md5_add(EVP_MD_CTX *c, const void *p, size_t n)
{
    return EVP_DigestUpdate(c, p, n) == 1;
}

static bool md5_start(EVP_MD_CTX *c, const EVP_MD *md5)
{
    return EVP_DigestInit_ex(c, md5, NULL) == 1;
}

static bool md5_end(EVP_MD_CTX *c, unsigned char out[16])
{
    return EVP_DigestFinal_ex(c, out, NULL) == 1;
}

/* Crypt's base64 of three bytes (low 6 bits first), n characters of it. */
static char *to64(char *p, uint32_t v, int n)
{
    static const char itoa64[] =
        "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    while (n-- > 0) {
        *p++ = itoa64[v & 0x3f];
        v >>= 6;
    }
    return p;
}

/* Poul-Henning Kamp's MD5 crypt with Apache's magic "$apr1$": the string pass makes with
 * the salt of setting (up to 8 characters, to the first '$'), into out (6 + 8 + 1 + 22 + 1).
 * Returns 0, or -1 if a digest could not be computed. */
static int apr1(const char *pass, const char *setting, char *out)
{
    const char *magic = "$apr1$", *salt = setting + 6;
    size_t plen = strlen(pass), slen = 0;
    while (slen < 8 && salt[slen] && salt[slen] != '$')
        slen++;
    EVP_MD *md5 = EVP_MD_fetch(NULL, "MD5", NULL);
    EVP_MD_CTX *c = EVP_MD_CTX_new(), *alt = EVP_MD_CTX_new();
    unsigned char fin[16];
    bool ok = md5 && c && alt;
    /* alternate: pass salt pass */
    ok = ok && md5_start(alt, md5) && md5_add(alt, pass, plen) && md5_add(alt, salt, slen) &&
         md5_add(alt, pass, plen) && md5_end(alt, fin);
    ok = ok && md5_start(c, md5) && md5_add(c, pass, plen) && md5_add(c, magic, 6) &&
         md5_add(c, salt, slen);
    for (size_t n = plen; ok && n > 0; n -= n > 16 ? 16 : n)
        ok = md5_add(c, fin, n > 16 ? 16 : n);
    memset(fin, 0, sizeof(fin));
    for (size_t i = plen; ok && i; i >>= 1)
        ok = md5_add(c, (i & 1) ? (const void *)fin : (const void *)pass, 1);
    ok = ok && md5_end(c, fin);
    for (int i = 0; ok && i < 1000; i++) {
        ok = md5_start(c, md5);
        ok = ok && ((i & 1) ? md5_add(c, pass, plen) : md5_add(c, fin, 16));
        ok = ok && (i % 3 == 0 || md5_add(c, salt, slen));
        ok = ok && (i % 7 == 0 || md5_add(c, pass, plen));
        ok = ok && ((i & 1) ? md5_add(c, fin, 16) : md5_add(c, pass, plen));
        ok = ok && md5_end(c, fin);
    }
    EVP_MD_CTX_free(c);
    EVP_MD_CTX_free(alt);
    EVP_MD_free(md5);
    if (!ok)
        return explicit_bzero(fin, sizeof(fin)), -1;
    char *p = out;
    memcpy(p, magic, 6);
    p += 6;
    memcpy(p, salt, slen);
    p += slen;
    *p++ = '$';
    p = to64(p, (uint32_t)fin[0] << 16 | (uint32_t)fin[6] << 8 | fin[12], 4);
    p = to64(p, (uint32_t)fin[1] << 16 | (uint32_t)fin[7] << 8 | fin[13], 4);
    p = to64(p, (uint32_t)fin[2] << 16 | (uint32_t)fin[8] << 8 | fin[14], 4);
    p = to64(p, (uint32_t)fin[3] << 16 | (uint32_t)fin[9] << 8 | fin[15], 4);
    p = to64(p, (uint32_t)fin[4] << 16 | (uint32_t)fin[10] << 8 | fin[5], 4);
    p = to64(p, fin[11], 2);
    *p = '\0';
    explicit_bzero(fin, sizeof(fin));
    return 0;
}

static int verify_apr1(const char *pass, const char *hash)
{
    char out[6 + 8 + 1 + 22 + 1];
    if (apr1(pass, hash, out) < 0)
        return -1;
    int ok = same_secret(out, hash);
    explicit_bzero(out, sizeof(out));
    return ok;
}

/* {SHA} and {SSHA}: SHA-1 of the password and the salt (the bytes after the first 20 of
 * the stored base64; none for {SHA}), the digest and salt written in base64 again. */
static int verify_sha1(const char *pass, const char *b64, bool salted)
{
    unsigned char raw[3 * 64];
    size_t len = 0;
    if (!base64_decode(b64, strlen(b64), raw, &len) || len < 20)
        len = 20; /* as nginx: no salt, and the digest that cannot match */
    if (!salted)
        len = 20;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    bool ok = c && EVP_DigestInit_ex(c, EVP_sha1(), NULL) == 1 &&
              EVP_DigestUpdate(c, pass, strlen(pass)) == 1 &&
              EVP_DigestUpdate(c, raw + 20, len - 20) == 1 &&
              EVP_DigestFinal_ex(c, raw, NULL) == 1;
    EVP_MD_CTX_free(c);
    if (!ok)
        return -1;
    char out[4 * 64 + 1];
    EVP_EncodeBlock((unsigned char *)out, raw, (int)len);
    ok = same_secret(out, b64);
    explicit_bzero(raw, sizeof(raw));
    return ok;
}

/* Does pass (NUL-terminated) hash to u's hash? -1 if it could not be computed. */
static int verify(const char *pass, const struct htpasswd_user *u)
{
    const char *h = u->hash;
    int ok;
    if (strncmp(h, "$apr1$", 6) == 0)
        ok = verify_apr1(pass, h);
    else if (strncmp(h, "{PLAIN}", 7) == 0)
        ok = same_secret(pass, h + 7);
    else if (strncmp(h, "{SSHA}", 6) == 0)
        ok = verify_sha1(pass, h + 6, true);
    else if (strncmp(h, "{SHA}", 5) == 0)
        ok = verify_sha1(pass, h + 5, false);
    else
        ok = verify_crypt(pass, h);
    return ok > 0 && u->kind == KIND_MALFORMED ? 0 : ok;
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
    /* An unknown user costs what a known one does: hashed against a stand-in's. */
    int ok = verify(secret, u ? u : h->stand_in);
    explicit_bzero(secret, sizeof(secret));
    if (ok < 0)
        return HTPASSWD_FAILED;
    if (!u)
        return HTPASSWD_NO_USER;
    return ok ? HTPASSWD_OK : HTPASSWD_MISMATCH;
}
