/* mod_auth.c — allow/deny and HTTP Basic authentication (see mod_auth.h).
 *
 * nginx's order: the address rules first (a denied client learns nothing of the realm),
 * then the credentials. The Authorization field is read strictly: the scheme "Basic" in
 * any case, one or more spaces, and standard base64 with its padding; anything else is
 * treated as no credentials (401). Two Authorization fields are 400, as nginx answers.
 *
 * The cost of a password is the hash's (bcrypt is made to be slow: milliseconds), and a
 * browser sends the same header with every request. A verified credential is therefore
 * remembered for AUTH_CACHE_TTL_S: what is kept is a 128-bit keyed hash (two SipHash-2-4
 * by OpenSSL, keyed_hash.h, with random keys drawn at load) of "user:password", never the
 * password, in a bounded set-associative table (AUTH_CACHE_SETS x AUTH_CACHE_WAYS; a full
 * set drops the entry that expires first). One table for all threads, under a mutex held
 * for a lookup of four entries: a browser's connections land on any thread, and
 * per-thread tables would make each thread pay the bcrypt again. A wrong password is never
 * cached: each attempt costs a verification, and is logged (info) with the user name
 * escaped. A reload makes new settings and a new, empty table: a changed user file counts
 * at once.
 */
#include "mod_auth.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "keyed_hash.h"

#include "log.h"
#include "strbuf.h"

#define AUTH_CACHE_SETS 256
#define AUTH_CACHE_WAYS 4
#define AUTH_NOTES_MAX 4096 /* a user file's notes: a line a kind, a dozen kinds */
#define AUTH_TOKEN_MAX (4 * ((HTPASSWD_SECRET_MAX + 2) / 3)) /* base64 of the longest */

/* --- directives ---------------------------------------------------------------------- */

static int parse_cidr(const char *text, struct config_cidr *c)
{
    char addr[INET6_ADDRSTRLEN];
    const char *slash = strchr(text, '/');
    size_t len = slash ? (size_t)(slash - text) : strlen(text);
    if (len == 0 || len >= sizeof(addr))
        return -1;
    memcpy(addr, text, len);
    addr[len] = '\0';
    memset(c, 0, sizeof(*c));
    unsigned max;
    if (inet_pton(AF_INET, addr, c->addr) == 1) {
        c->family = AF_INET;
        max = 32;
    } else if (inet_pton(AF_INET6, addr, c->addr) == 1) {
        c->family = AF_INET6;
        max = 128;
    } else {
        return -1;
    }
    c->prefix_bits = max;
    if (!slash)
        return 0;
    const char *p = slash + 1;
    unsigned bits = 0;
    if (*p < '0' || *p > '9' || strlen(p) > 3)
        return -1;
    for (; *p >= '0' && *p <= '9'; p++)
        bits = bits * 10 + (unsigned)(*p - '0');
    if (*p || bits > max)
        return -1;
    c->prefix_bits = bits;
    return 0;
}

static int add_rule(void *base, const struct conf_node *n, char *msg, size_t len, bool allow)
{
    struct auth_settings *s = base;
    if (s->n_rules == AUTH_RULES_MAX)
        return snprintf(msg, len, "more than %d allow and deny rules", AUTH_RULES_MAX), -1;
    struct auth_rule *r = &s->rules[s->n_rules];
    memset(r, 0, sizeof(*r));
    r->allow = allow;
    r->line = n->line;
    if (strcmp(n->args[0], "all") == 0)
        r->all = true;
    else if (strcmp(n->args[0], "unix:") == 0) /* every client of a Unix socket, as nginx */
        r->cidr.family = AF_UNIX;
    else if (parse_cidr(n->args[0], &r->cidr) < 0)
        return snprintf(msg, len, "invalid address \"%s\" (an IPv4 or IPv6 address, "
                        "ADDR/BITS, unix: or all)", n->args[0]), -1;
    s->n_rules++;
    return 0;
}

static int set_allow(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    (void)ctx;
    return add_rule(base, n, msg, len, true);
}

static int set_deny(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    (void)ctx;
    return add_rule(base, n, msg, len, false);
}

/* `auth_basic "REALM"|off;` */
static int set_basic(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    struct auth_settings *s = base;
    (void)ctx;
    const char *realm = n->args[0];
    size_t rl = strlen(realm);
    if (rl >= sizeof(s->realm))
        return snprintf(msg, len, "the realm is longer than %d bytes", AUTH_REALM_MAX - 1), -1;
    for (size_t i = 0; i < rl; i++)
        if ((unsigned char)realm[i] < 0x20 || realm[i] == 0x7f)
            return snprintf(msg, len, "a control character in the realm"), -1;
    s->basic_set = true;
    s->basic_off = strcmp(realm, "off") == 0;
    memcpy(s->realm, realm, rl + 1);
    s->basic_line = n->line;
    return 0;
}

static int set_user_file(void *base, const struct conf_node *n, void *ctx, char *msg,
                         size_t len)
{
    struct auth_settings *s = base;
    (void)ctx;
    size_t pl = strlen(n->args[0]);
    if (pl == 0 || pl >= sizeof(s->user_file))
        return snprintf(msg, len, "the path is empty or too long"), -1;
    memcpy(s->user_file, n->args[0], pl + 1);
    s->user_file_line = n->line;
    if (!strchr(s->user_file, '$'))
        return 0;
    char why[256];
    if (vars_compile(s->user_file, VARS_RAW, &s->user_file_var, why, sizeof(why)) < 0)
        return snprintf(msg, len, "%s", why), -1;
    s->owns_user_file_var = true;
    if (vars_is_constant(s->user_file_var)) {
        vars_free(s->user_file_var);
        s->user_file_var = NULL;
        s->owns_user_file_var = false;
    }
    return 0;
}

static const struct conf_name satisfy_names[] = {
    {"all", AUTH_SATISFY_ALL}, {"any", AUTH_SATISFY_ANY}, {NULL, 0},
};

const struct conf_directive auth_directives[] = {
    {"allow", CONF_LIST, CONF_TOP | CONF_SERVER | CONF_LOCATION, CONF_REPEATS, .min_args = 1, .max_args = 1,
     .set = set_allow, .usage = "ADDR|CIDR|unix:|all",
     .doc = "Client address rules, IPv4 and IPv6 (`10.0.0.0/8`, `::1`, `2001:db8::/32`), or "
        "`unix:`, every client of a Unix socket (`listen unix:PATH`), as nginx's; checked "
        "in file order with `deny`: the first that matches decides, `allow` lets the request "
        "on; no match lets it on too. Checked before `auth_basic`, as in nginx. A block with "
        "any `allow`/`deny` has exactly its own rules (the outer ones are replaced)."},
    {"deny", CONF_LIST, CONF_TOP | CONF_SERVER | CONF_LOCATION, CONF_REPEATS, .min_args = 1, .max_args = 1,
     .set = set_deny, .usage = "ADDR|CIDR|unix:|all",
     .doc = "As `allow`: the first rule that matches decides, and `deny` answers 403 before any "
        "password is looked at."},
    {"auth_basic", CONF_LIST, CONF_TOP | CONF_SERVER | CONF_LOCATION, .min_args = 1, .max_args = 1, .set = set_basic,
     .usage = "\"REALM\"|off",
     .dflt = "off",
     .doc = "HTTP Basic authentication: without valid credentials 401 with `WWW-Authenticate: "
        "Basic realm=\"REALM\", charset=\"UTF-8\"` (quotes and backslashes in the realm "
        "escaped; control bytes refused at load). Needs `auth_basic_user_file` (nginx would "
        "quietly ask nothing)."},
    {"auth_basic_user_file", CONF_LIST, CONF_TOP | CONF_SERVER | CONF_LOCATION, .min_args = 1, .max_args = 1,
     .set = set_user_file, .usage = "PATH",
     .doc = "An `htpasswd` file, read at start and reload; `#` comments and blank lines "
        "allowed. The hashes nginx takes: bcrypt (`htpasswd -B`), SHA-256/512 crypt (`-2`, "
        "`-5`), Apache MD5 (`$apr1$`, htpasswd's default), MD5-crypt (`$1$`), DES crypt, "
        "`{SHA}`, `{SSHA}`, `{PLAIN}`. The weak ones, a malformed hash (never matches: 401), "
        "a line that is not NAME:HASH (skipped) and a user listed again (the first line "
        "counts) are accepted as nginx accepts them, with a warning at load naming the "
        "file's line (once a kind a file; `-t` shows them). A file with no user is a "
        "configuration error. A name with variables (`$arg_f`) is read at each request, "
        "as nginx reads every user file: one that does not exist answers 403, one that "
        "cannot be read 500."},
    {"satisfy", CONF_ENUM, CONF_TOP | CONF_SERVER | CONF_LOCATION, .names = satisfy_names,
     CONF_AT(struct auth_settings, satisfy), .usage = "all|any", .dflt = "all",
     .doc = "`all`: the request must pass both the `allow`/`deny` rules and `auth_basic`; "
        "`any`: either suffices (a matching `allow`, or valid credentials). With `any` and "
        "neither, the answer is 401 when `auth_basic` asks for a password (its challenge "
        "sent), else 403, as nginx's."},
    {.name = NULL},
};

/* --- settings ------------------------------------------------------------------------ */

void auth_settings_init(struct auth_settings *s)
{
    memset(s, 0, sizeof(*s));
    s->satisfy = -1;
}

void auth_settings_merge(struct auth_settings *s, const struct auth_settings *outer)
{
    if (s->n_rules == 0) {
        memcpy(s->rules, outer->rules, outer->n_rules * sizeof(outer->rules[0]));
        s->n_rules = outer->n_rules;
    }
    if (!s->basic_set) {
        s->basic_set = outer->basic_set;
        s->basic_off = outer->basic_off;
        memcpy(s->realm, outer->realm, sizeof(s->realm));
        s->basic_line = outer->basic_line;
    }
    if (s->satisfy < 0)
        s->satisfy = outer->satisfy;
    if (!s->user_file[0]) {
        memcpy(s->user_file, outer->user_file, sizeof(s->user_file));
        s->user_file_line = outer->user_file_line;
        s->user_file_var = outer->user_file_var; /* the outer block's, not freed here */
    }
}

struct auth_cache_entry {
    uint64_t a, b;     /* the two keyed hashes of "user:password" */
    int64_t expires_s; /* 0: empty */
};

struct auth_cache {
    pthread_mutex_t lock;
    struct keyed_hash *hash_a, *hash_b; /* random keys, drawn at load */
    struct auth_cache_entry sets[AUTH_CACHE_SETS][AUTH_CACHE_WAYS];
};

static struct auth_cache *cache_create(void)
{
    struct auth_cache *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->hash_a = keyed_hash_new_random();
    c->hash_b = keyed_hash_new_random();
    if (!c->hash_a || !c->hash_b) {
        keyed_hash_free(c->hash_a);
        keyed_hash_free(c->hash_b);
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->lock, NULL);
    return c;
}

static void cache_destroy(struct auth_cache *c)
{
    if (!c)
        return;
    pthread_mutex_destroy(&c->lock);
    keyed_hash_free(c->hash_a);
    keyed_hash_free(c->hash_b);
    explicit_bzero(c, sizeof(*c));
    free(c);
}

/* Backslash before '"' and '\' (RFC 9110 section 5.6.4's quoted-pair). */
static void make_challenge(struct auth_settings *s)
{
    char *p = s->challenge;
    p += sprintf(p, "Basic realm=\"");
    for (const char *r = s->realm; *r; r++) {
        if (*r == '"' || *r == '\\')
            *p++ = '\\';
        *p++ = *r;
    }
    strcpy(p, "\", charset=\"UTF-8\"");
}

int auth_settings_load(struct auth_settings *s, const char *conf_file, char *err,
                       size_t err_len, char *warn, size_t warn_len)
{
    if (warn && warn_len)
        warn[0] = '\0';
    if (!s->basic_set || s->basic_off)
        return 0;
    if (!s->user_file[0]) {
        snprintf(err, err_len, "%s:%u: auth: auth_basic \"%s\" needs auth_basic_user_file",
                 conf_file, s->basic_line, s->realm);
        return -1;
    }
    s->basic_on = true;
    make_challenge(s);
    if (s->user_file_var)
        return 0; /* read at each request */
    char why[1024];
    s->users = htpasswd_load(s->user_file, why, sizeof(why), warn, warn_len);
    if (!s->users) {
        snprintf(err, err_len, "%s:%u: auth: auth_basic_user_file: %s",
                 conf_line_file(s->user_file_line, conf_file),
                 conf_line_no(s->user_file_line), why);
        return -1;
    }
    s->cache = cache_create();
    if (!s->cache) {
        htpasswd_free(s->users);
        s->users = NULL;
        snprintf(err, err_len, "%s:%u: auth: auth_basic_user_file: out of memory or randomness",
                 conf_line_file(s->user_file_line, conf_file), conf_line_no(s->user_file_line));
        return -1;
    }
    return 0;
}

void auth_settings_free(struct auth_settings *s)
{
    htpasswd_free(s->users);
    cache_destroy(s->cache);
    if (s->owns_user_file_var)
        vars_free(s->user_file_var);
    s->users = NULL;
    s->cache = NULL;
    s->user_file_var = NULL;
    s->owns_user_file_var = false;
}

/* --- the credential cache ------------------------------------------------------------ */

static bool cache_hit(struct auth_cache *c, uint64_t a, uint64_t b, int64_t now_s)
{
    struct auth_cache_entry *set = c->sets[a % AUTH_CACHE_SETS];
    bool hit = false;
    pthread_mutex_lock(&c->lock);
    for (unsigned i = 0; i < AUTH_CACHE_WAYS && !hit; i++)
        hit = set[i].expires_s > now_s && set[i].a == a && set[i].b == b;
    pthread_mutex_unlock(&c->lock);
    return hit;
}

static void cache_add(struct auth_cache *c, uint64_t a, uint64_t b, int64_t now_s)
{
    struct auth_cache_entry *set = c->sets[a % AUTH_CACHE_SETS];
    pthread_mutex_lock(&c->lock);
    unsigned victim = 0;
    for (unsigned i = 1; i < AUTH_CACHE_WAYS; i++)
        if (set[i].expires_s < set[victim].expires_s)
            victim = i;
    set[victim] = (struct auth_cache_entry){a, b, now_s + AUTH_CACHE_TTL_S};
    pthread_mutex_unlock(&c->lock);
}

/* --- the request --------------------------------------------------------------------- */

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

long auth_base64_decode(const char *in, size_t len, unsigned char *out, size_t cap)
{
    if (len == 0 || len % 4 != 0)
        return -1;
    size_t pad = in[len - 1] == '=' ? (in[len - 2] == '=' ? 2 : 1) : 0;
    size_t n = 0;
    uint32_t acc = 0;
    for (size_t i = 0; i < len - pad; i++) {
        int v = b64_value((unsigned char)in[i]);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        if (i % 4 == 3) {
            if (n + 3 > cap)
                return -1;
            out[n++] = (unsigned char)(acc >> 16);
            out[n++] = (unsigned char)(acc >> 8);
            out[n++] = (unsigned char)acc;
            acc = 0;
        }
    }
    if (pad == 0)
        return (long)n;
    /* The last group: 2 (pad 2) or 3 (pad 1) characters; the bits past the bytes are 0. */
    unsigned bits = pad == 2 ? 4 : 2;
    if (acc & ((1u << bits) - 1) || n + 3 - pad > cap)
        return -1;
    acc >>= bits;
    if (pad == 1) {
        out[n++] = (unsigned char)(acc >> 8);
        out[n++] = (unsigned char)acc;
    } else {
        out[n++] = (unsigned char)acc;
    }
    return (long)n;
}

/* The base64 token of an Authorization field, or NULL if it is not `Basic TOKEN`. */
static const char *basic_token(struct http_slice v, size_t *len)
{
    if (v.len < 6 || strncasecmp(v.p, "basic ", 6) != 0)
        return NULL;
    size_t i = 6;
    while (i < v.len && v.p[i] == ' ')
        i++;
    *len = v.len - i;
    return v.p + i;
}

static void format_peer(const struct sockaddr *sa, char *out, size_t len)
{
    if (sa->sa_family == AF_UNIX) {
        snprintf(out, len, "unix:");
        return;
    }
    const void *a = sa->sa_family == AF_INET6
                        ? (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr
                        : (const void *)&((const struct sockaddr_in *)sa)->sin_addr;
    if (!inet_ntop(sa->sa_family, a, out, (socklen_t)len))
        snprintf(out, len, "?");
}

static void log_refusal(const struct auth_settings *s, const struct request *req,
                        const unsigned char *user, size_t user_len, enum htpasswd_result r)
{
    struct strbuf name = STRBUF_INIT(8 * HTPASSWD_SECRET_MAX);
    strbuf_json(&name, (const char *)user, user_len);
    char peer[INET6_ADDRSTRLEN];
    format_peer(req->peer, peer, sizeof(peer));
    if (name.failed)
        module_log(req, LOG_LEVEL_INFO, "auth: a user name that cannot be shown (client %s)",
                   peer);
    else if (r == HTPASSWD_NO_USER)
        module_log(req, LOG_LEVEL_INFO, "auth: user %.*s is not in %s (client %s)",
                   (int)name.len, name.p, s->user_file, peer);
    else
        module_log(req, LOG_LEVEL_INFO, "auth: user %.*s: wrong password (client %s)",
                   (int)name.len, name.p, peer);
    free(name.p);
}

static enum mod_result refuse(const struct auth_settings *s, struct response *resp)
{
    resp_error(resp, 401);
    resp_header(resp, "WWW-Authenticate", s->challenge);
    return MOD_HANDLED;
}

/* Rules: the first that matches the client, or NULL. */
static const struct auth_rule *address_rule(const struct auth_settings *s,
                                            const struct sockaddr *peer)
{
    for (unsigned i = 0; i < s->n_rules; i++)
        if (s->rules[i].all || config_cidr_match(&s->rules[i].cidr, peer))
            return &s->rules[i];
    return NULL;
}

/* The credentials of value against users (the file read at load, or this request's).
 * The credential cache serves the file read at load only: it knows no file name. */
static enum mod_result check_credentials(const struct auth_settings *s,
                                         const struct htpasswd *users,
                                         const struct request *req, struct response *resp,
                                         struct http_slice value)
{
    size_t tlen;
    const char *token = basic_token(value, &tlen);
    unsigned char cred[HTPASSWD_SECRET_MAX + 3];
    long n = token && tlen <= AUTH_TOKEN_MAX
                 ? auth_base64_decode(token, tlen, cred, sizeof(cred)) : -1;
    const unsigned char *colon = n > 0 ? memchr(cred, ':', (size_t)n) : NULL;
    if (!colon)
        return refuse(s, resp);
    if (users != s->users) {
        size_t ulen = (size_t)(colon - cred);
        enum htpasswd_result r = htpasswd_check(users, (const char *)cred, ulen,
                                                (const char *)colon + 1, (size_t)n - ulen - 1);
        if (r == HTPASSWD_NO_USER || r == HTPASSWD_MISMATCH)
            log_refusal(s, req, cred, ulen, r);
        explicit_bzero(cred, sizeof(cred));
        if (r == HTPASSWD_FAILED)
            return MOD_ERROR;
        return r == HTPASSWD_OK ? MOD_DECLINED : refuse(s, resp);
    }
    uint64_t a, b;
    if (keyed_hash64(s->cache->hash_a, cred, (size_t)n, &a) < 0 ||
        keyed_hash64(s->cache->hash_b, cred, (size_t)n, &b) < 0) {
        explicit_bzero(cred, sizeof(cred));
        return MOD_ERROR;
    }
    if (cache_hit(s->cache, a, b, req->now_s))
        return MOD_DECLINED;
    size_t ulen = (size_t)(colon - cred);
    enum htpasswd_result r = htpasswd_check(users, (const char *)cred, ulen,
                                            (const char *)colon + 1, (size_t)n - ulen - 1);
    if (r == HTPASSWD_NO_USER || r == HTPASSWD_MISMATCH)
        log_refusal(s, req, cred, ulen, r);
    explicit_bzero(cred, sizeof(cred));
    if (r == HTPASSWD_FAILED)
        return MOD_ERROR;
    if (r != HTPASSWD_OK)
        return refuse(s, resp);
    cache_add(s->cache, a, b, req->now_s);
    return MOD_DECLINED;
}

/* The one Authorization field, or NULL; *twice when there are more (nginx: 400). */
static const struct http_header *authorization(const struct request *req, bool *twice)
{
    const struct http_header *found = NULL;
    *twice = false;
    for (unsigned i = 0; i < req->http->n_headers; i++) {
        if (!http_slice_eq(req->http->headers[i].name, "authorization"))
            continue;
        *twice = found != NULL;
        if (*twice)
            return NULL;
        found = &req->http->headers[i];
    }
    return found;
}

/* A user file named with variables: expanded and read for this request, as nginx does at
 * every request (relative to the working directory, as a plain path is). A file that does
 * not exist is 403 and any other failure to read it 500, as nginx answers; a file that
 * reads but holds no user lets no one in (401). */
static enum mod_result check_with_file_of_request(const struct auth_settings *s,
                                                  const struct request *req,
                                                  struct response *resp,
                                                  struct http_slice value)
{
    struct vars_source src;
    module_vars_source(req, &src);
    char path[CONFIG_PATH_MAX], why[1024];
    long n = vars_expand(s->user_file_var, &src, path, sizeof(path));
    if (n < 0) {
        module_log(req, LOG_LEVEL_ERROR, "auth: auth_basic_user_file: the file name is "
                   "longer than %d bytes", CONFIG_PATH_MAX - 1);
        return MOD_ERROR;
    }
    struct htpasswd *users = htpasswd_load(n ? path : ".", why, sizeof(why), NULL, 0);
    if (!users) {
        int e = errno;
        module_log(req, LOG_LEVEL_ERROR, "auth: auth_basic_user_file: %s", why);
        if (e == ENOENT) {
            resp_error(resp, 403);
            return MOD_HANDLED;
        }
        return e == EINVAL ? refuse(s, resp) : MOD_ERROR;
    }
    enum mod_result r = check_credentials(s, users, req, resp, value);
    htpasswd_free(users);
    return r;
}

/* The credentials against the block's users: the file read at load, or the one its name
 * with variables gives for this request. */
static enum mod_result credentials_of(const struct auth_settings *s, const struct request *req,
                                      struct response *resp, struct http_slice value)
{
    if (!s->user_file_var)
        return check_credentials(s, s->users, req, resp, value);
    return check_with_file_of_request(s, req, resp, value);
}

enum mod_result auth_check(const struct auth_settings *s, const struct request *req,
                           struct response *resp)
{
    if (!s->basic_on && s->n_rules == 0)
        return MOD_DECLINED;
    bool twice;
    const struct http_header *field = authorization(req, &twice);
    if (twice) { /* nginx refuses it while reading the head, before any rule */
        resp_error(resp, 400);
        return MOD_HANDLED;
    }
    const struct auth_rule *rule = address_rule(s, req->peer);
    if (s->satisfy == AUTH_SATISFY_ANY) {
        if (rule && rule->allow)
            return MOD_DECLINED;
        if (!s->basic_on && !rule) /* neither asks anything */
            return MOD_DECLINED;
        if (!s->basic_on)
            goto forbidden;
        /* the password decides: its 401 outranks the rules' 403, as in nginx */
        return field ? credentials_of(s, req, resp, field->value) : refuse(s, resp);
    }
    if (rule && !rule->allow)
        goto forbidden;
    if (!s->basic_on)
        return MOD_DECLINED;
    if (!field)
        return refuse(s, resp);
    return credentials_of(s, req, resp, field->value);
forbidden:
    module_log(req, LOG_LEVEL_ERROR, "auth: access forbidden by rule (403)");
    resp_error(resp, 403);
    return MOD_HANDLED;
}

/* --- the module: settings per block ------------------------------------------------- */

struct auth_module {
    unsigned index; /* in the chain: for module_settings() */
    /* The user files whose notes were said in this load: once a file, however many
     * blocks read it. */
    char **warned;
    size_t n_warned;
};

/* Say the user file's notes (weak hashes, skipped lines: htpasswd.h) as warnings, each
 * behind the directive's FILE:LINE, unless this load has said that file's already. */
static void warn_once(struct auth_module *m, const struct auth_settings *s,
                      const char *conf_file, const char *notes)
{
    if (!notes[0])
        return;
    for (size_t i = 0; i < m->n_warned; i++)
        if (strcmp(m->warned[i], s->user_file) == 0)
            return;
    char **w = realloc(m->warned, (m->n_warned + 1) * sizeof(*w));
    if (w) {
        m->warned = w;
        w[m->n_warned] = strdup(s->user_file);
        m->n_warned += w[m->n_warned] != NULL;
    }
    for (const char *p = notes; *p;) {
        size_t n = strcspn(p, "\n");
        log_warn("%s:%u: auth: auth_basic_user_file: %.*s",
                 conf_line_file(s->user_file_line, conf_file),
                 conf_line_no(s->user_file_line), (int)n, p);
        p += n + (p[n] == '\n');
    }
}

static int auth_init(struct module_init *mi, void **state)
{
    struct auth_module *m = malloc(sizeof(*m));
    if (!m)
        return module_error(mi, NULL, "out of memory");
    m->index = mi->index;
    m->warned = NULL;
    m->n_warned = 0;
    *state = m;
    return 0;
}

static void auth_fini(void *state)
{
    struct auth_module *m = state;
    for (size_t i = 0; i < m->n_warned; i++)
        free(m->warned[i]);
    free(m->warned);
    free(m);
}

/* A block's settings: read, merged with the outer block's, loaded (its user file read).
 * A block without any of the module's directives shares its outer block's. */
static void *auth_block(void *state, const struct module_block *b)
{
    if (b->outer && !module_block_has(b))
        return (void *)b->outer;
    struct auth_settings *s = malloc(sizeof(*s));
    if (!s) {
        module_error(b->mi, NULL, "out of memory");
        return NULL;
    }
    auth_settings_init(s);
    char err[1536];
    if (module_block_read(b, s) < 0)
        goto fail;
    if (b->outer)
        auth_settings_merge(s, b->outer);
    char *notes = malloc(AUTH_NOTES_MAX);
    if (!notes) {
        module_error(b->mi, NULL, "out of memory");
        goto fail;
    }
    if (auth_settings_load(s, b->mi->cfg->file, err, sizeof(err), notes, AUTH_NOTES_MAX) < 0) {
        config_error_append(b->mi->err, b->mi->err_len, "%s", err);
        free(notes);
        goto fail;
    }
    warn_once(state, s, b->mi->cfg->file, notes);
    free(notes);
    return s;
fail:
    free(s);
    return NULL;
}

static void auth_block_free(void *state, void *settings)
{
    (void)state;
    auth_settings_free(settings);
    free(settings);
}

static enum mod_result auth_access(void *state, const struct request *req,
                                   struct response *resp)
{
    const struct auth_module *m = state;
    const struct auth_settings *s = module_settings(req, m->index);
    return s ? auth_check(s, req, resp) : MOD_DECLINED;
}

const struct module mod_auth = {
    .name = "auth",
    .directives = auth_directives,
    .init = auth_init,
    .fini = auth_fini,
    .access = auth_access,
    .block = auth_block,
    .block_free = auth_block_free,
};
