/* mod_headers.c — `add_header NAME VALUE [always];` and `expires [modified] TIME|...;`, with
 * nginx's semantics (ngx_http_headers_module), checked against nginx 1.22:
 *
 *   - Both act only on the statuses 200, 201, 204, 206, 301, 302, 303, 304, 307 and 308;
 *     `add_header ... always` on every status. `expires` has no `always`.
 *   - expires TIME: `Expires: now + TIME` and `Cache-Control: max-age=TIME`; TIME 0 gives
 *     max-age=0 and Expires equal to Date; a negative TIME gives an Expires in the past and
 *     `Cache-Control: no-cache`. epoch: `Expires: Thu, 01 Jan 1970 00:00:01 GMT`, no-cache.
 *     max: `Expires: Thu, 31 Dec 2037 23:55:55 GMT`, max-age=315360000. Any Expires or
 *     Cache-Control the response already has is replaced, not repeated.
 *   - expires @TIME: the next TIME of day (the server's time zone); expires modified TIME:
 *     Last-Modified + TIME, max-age counted from now (no Last-Modified: from now); a value
 *     with variables is parsed per request, and one that does not parse sets nothing.
 *   - add_header runs after expires, in file order, and appends (so `expires 1h;
 *     add_header Cache-Control private;` sends two Cache-Control lines, as nginx does). A
 *     value that expands to "" adds nothing. ETag and Last-Modified replace the response's
 *     own, and an empty value removes it (nginx's special cases for those two).
 *
 * It is a filter, placed after mod_gzip in the chain: the status it tests is the final
 * one, after gzip has evaluated the conditionals again for a compressed variant (a 200 may
 * become a 304 there). nginx's order is the same in effect: its headers filter runs after
 * the not-modified filter, and its gzip filter does not change statuses.
 *
 * Not applied to CGI's streamed responses: their head is parsed from the script's output
 * after the chain has run, and replaces what a filter would have added. Applied to a
 * proxied answer's head when it arrives (http_proxy.c calls the filters again then), as
 * nginx adds headers to proxied responses.
 */
#include "mod_headers.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "module.h"

#define EXPIRES_MAX_S 2147483647LL /* 68 years: beyond it is surely a typo */
#define EXPIRES_MAX_DATE "Thu, 31 Dec 2037 23:55:55 GMT"
#define EXPIRES_EPOCH_DATE "Thu, 01 Jan 1970 00:00:01 GMT"

/* --- settings ----------------------------------------------------------------------------- */

void headers_conf_merge(struct headers_conf *inner, const struct headers_conf *outer)
{
    if (inner->n_adds == 0) {
        inner->adds = outer->adds;
        inner->n_adds = outer->n_adds;
        inner->adds_owned = false;
    }
    if (inner->expires == HEADERS_EXPIRES_UNSET && !inner->expires_value) {
        inner->expires = outer->expires;
        inner->expires_s = outer->expires_s;
        inner->expires_value = outer->expires_value;
        inner->expires_value_owned = false;
    }
    if (inner->server_tokens < 0)
        inner->server_tokens = outer->server_tokens;
    if (inner->chunked < 0)
        inner->chunked = outer->chunked;
    if (inner->n_trailers == 0) {
        inner->trailers = outer->trailers;
        inner->n_trailers = outer->n_trailers;
        inner->trailers_owned = false;
    }
}

void headers_conf_free(struct headers_conf *c)
{
    if (c->adds_owned) {
        for (unsigned i = 0; i < c->n_adds; i++)
            vars_free(c->adds[i].value);
        free(c->adds);
    }
    c->adds = NULL;
    c->n_adds = 0;
    if (c->trailers_owned) {
        for (unsigned i = 0; i < c->n_trailers; i++)
            vars_free(c->trailers[i].value);
        free(c->trailers);
    }
    c->trailers = NULL;
    c->n_trailers = 0;
    if (c->expires_value_owned)
        vars_free(c->expires_value);
    c->expires_value = NULL;
}

/* One unit of an nginx time, largest first: each may appear once, in this order. */
static const struct {
    char unit;
    int64_t seconds;
} time_units[] = {
    {'y', 365 * 86400}, {'M', 30 * 86400}, {'w', 7 * 86400}, {'d', 86400},
    {'h', 3600},        {'m', 60},         {'s', 1},
};
#define TIME_UNITS (sizeof(time_units) / sizeof(time_units[0]))

int headers_parse_time(const char *s, int64_t *out_s)
{
    bool negative = *s == '-';
    s += negative;
    int64_t total = 0;
    size_t next_unit = 0; /* the units before this one are no longer allowed */
    bool any = false;
    while (*s) {
        if (*s == ' ') {
            s++;
            continue;
        }
        if (*s < '0' || *s > '9')
            return -1;
        int64_t n = 0;
        while (*s >= '0' && *s <= '9' && n <= EXPIRES_MAX_S)
            n = n * 10 + (*s++ - '0');
        size_t u = next_unit;
        while (u < TIME_UNITS && *s && time_units[u].unit != *s)
            u++;
        if (u == TIME_UNITS || (*s == '\0' && next_unit == TIME_UNITS))
            return -1; /* an unknown unit, or one out of order or repeated */
        if (*s == '\0')
            u = TIME_UNITS - 1; /* a bare number: seconds */
        else
            s++;
        if (n > EXPIRES_MAX_S / time_units[u].seconds)
            return -1;
        total += n * time_units[u].seconds;
        if (total > EXPIRES_MAX_S)
            return -1;
        next_unit = u + 1;
        any = true;
    }
    if (!any)
        return -1;
    *out_s = negative ? -total : total;
    return 0;
}

int headers_parse_expires(const char *s, bool modified, enum headers_expires *kind,
                          int64_t *out_s, const char **why)
{
    *why = "a time such as 30d, 12h, -1, @15h30m, or epoch, max, off; at most 68 years";
    if (!modified && strcmp(s, "off") == 0)
        return *kind = HEADERS_EXPIRES_OFF, 0;
    if (!modified && strcmp(s, "epoch") == 0)
        return *kind = HEADERS_EXPIRES_EPOCH, 0;
    if (!modified && strcmp(s, "max") == 0)
        return *kind = HEADERS_EXPIRES_MAX, 0;
    *kind = modified ? HEADERS_EXPIRES_MODIFIED : HEADERS_EXPIRES_TIME;
    if (*s == '@') {
        if (modified)
            return *why = "a time of day (@) cannot follow \"modified\"", -1;
        *kind = HEADERS_EXPIRES_DAILY;
        s++;
    } else if (*s == '+') {
        s++;
    }
    if (*s == '\0' || headers_parse_time(s, out_s) < 0)
        return -1;
    if (*kind == HEADERS_EXPIRES_DAILY && (*out_s < 0 || *out_s > 86400))
        return *why = "a time of day (@) is under 24 hours", -1;
    return 0;
}

static bool token_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool header_name_ok(const char *name)
{
    size_t i = 0;
    while (token_char(name[i]))
        i++;
    return i > 0 && name[i] == '\0' && i < HEADERS_NAME_MAX;
}

/* `add_header NAME VALUE [always];`, and add_trailer's (in_trailers) */
static int add_to_list(struct headers_conf *c, const struct conf_node *n, bool in_trailers,
                       char *msg, size_t len)
{
    if (!header_name_ok(n->args[0]))
        return snprintf(msg, len, "invalid header name \"%s\"", n->args[0]), -1;
    if (n->n_args == 3 && strcmp(n->args[2], "always") != 0)
        return snprintf(msg, len, "invalid parameter \"%s\" (only \"always\")", n->args[2]), -1;
    struct headers_add add = {.always = n->n_args == 3};
    memcpy(add.name, n->args[0], strlen(n->args[0]) + 1);
    add.replaces = strcasecmp(add.name, "ETag") == 0 || strcasecmp(add.name, "Last-Modified") == 0;
    if (vars_compile(n->args[1], VARS_HEADER, &add.value, msg, len) < 0)
        return -1;
    struct headers_add **list = in_trailers ? &c->trailers : &c->adds;
    unsigned *n_list = in_trailers ? &c->n_trailers : &c->n_adds;
    struct headers_add *grown = realloc(*list, (*n_list + 1) * sizeof(*grown));
    if (!grown) {
        vars_free(add.value);
        return snprintf(msg, len, "out of memory"), -1;
    }
    *list = grown;
    grown[(*n_list)++] = add;
    if (in_trailers)
        c->trailers_owned = true;
    else
        c->adds_owned = true;
    return 0;
}

static int set_add_header(void *base, const struct conf_node *n, void *ctx, char *msg,
                          size_t len)
{
    (void)ctx;
    return add_to_list(base, n, false, msg, len);
}

/* `add_trailer NAME VALUE [always];` */
static int set_add_trailer(void *base, const struct conf_node *n, void *ctx, char *msg,
                           size_t len)
{
    (void)ctx;
    return add_to_list(base, n, true, msg, len);
}

/* `server_tokens on|off;` in a server or location (the top level's is the process's). */
static int set_server_tokens(void *base, const struct conf_node *n, void *ctx, char *msg,
                             size_t len)
{
    (void)ctx;
    struct headers_conf *c = base;
    if (strcmp(n->args[0], "on") != 0 && strcmp(n->args[0], "off") != 0)
        return snprintf(msg, len, "expected \"on\" or \"off\", not \"%s\"", n->args[0]), -1;
    c->server_tokens = strcmp(n->args[0], "on") == 0;
    return 0;
}

/* `chunked_transfer_encoding on|off;` */
static int set_chunked(void *base, const struct conf_node *n, void *ctx, char *msg,
                       size_t len)
{
    (void)ctx;
    struct headers_conf *c = base;
    if (strcmp(n->args[0], "on") != 0 && strcmp(n->args[0], "off") != 0)
        return snprintf(msg, len, "expected \"on\" or \"off\", not \"%s\"", n->args[0]), -1;
    c->chunked = strcmp(n->args[0], "on") == 0;
    return 0;
}

/* `expires [modified] TIME|@TIME|epoch|max|off;`, or a value with variables. */
static int set_expires(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    (void)ctx;
    struct headers_conf *c = base;
    bool modified = n->n_args == 2;
    if (modified && strcmp(n->args[0], "modified") != 0)
        return snprintf(msg, len, "invalid value \"%s\" (two values: modified TIME)",
                        n->args[0]), -1;
    const char *a = n->args[modified];
    if (strchr(a, '$')) {
        if (vars_compile(a, VARS_HEADER, &c->expires_value, msg, len) < 0)
            return -1;
        c->expires_value_owned = true;
        c->expires = modified ? HEADERS_EXPIRES_MODIFIED : HEADERS_EXPIRES_UNSET;
        return 0;
    }
    const char *why;
    if (headers_parse_expires(a, modified, &c->expires, &c->expires_s, &why) < 0)
        return snprintf(msg, len, "invalid value \"%s\" (%s)", a, why), -1;
    return 0;
}

static const struct conf_directive headers_directives[] = {
    {"add_header", CONF_LIST, CONF_TOP | CONF_SERVER | CONF_LOCATION, CONF_REPEATS, .min_args = 2, .max_args = 3,
     .set = set_add_header, .usage = "NAME VALUE [always]",
     .doc = "A header line added to responses with status 200, 201, 204, 206, 301, 302, 303, "
        "304, 307 or 308, or to every status with `always`; repeatable, in file order. VALUE "
        "may hold variables; one that expands to \"\" adds nothing. `ETag` and "
        "`Last-Modified` replace the response's own (an empty value removes it), as in "
        "nginx. A block with any `add_header` has exactly its own list (an outer list is "
        "never joined)."},
    {"add_trailer", CONF_LIST, CONF_TOP | CONF_SERVER | CONF_LOCATION, CONF_REPEATS,
     .min_args = 2, .max_args = 3, .set = set_add_trailer, .usage = "NAME VALUE [always]",
     .doc = "A trailer line sent after the body, on the statuses of `add_header` (every "
        "status with `always`), as nginx's: the answer then goes chunked to an HTTP/1.1 "
        "client (a file's too; not to HTTP/1.0, not for HEAD, 204 or 304), its last chunk "
        "followed by the trailers. VALUE may hold variables, read once the body has gone "
        "(a proxied answer's `$upstream_response_length`), and `$sent_trailer_NAME` reads "
        "a trailer made before; one that expands to \"\" adds nothing. A block with any "
        "`add_trailer` has exactly its own list, apart from `add_header`'s. Not on "
        "answers of CGI scripts or FastCGI applications."},
    {"chunked_transfer_encoding", CONF_LIST, CONF_TOP | CONF_SERVER | CONF_LOCATION,
     CONF_ONCE, .min_args = 1, .max_args = 1, .set = set_chunked, .usage = "on|off",
     .dflt = "on",
     .doc = "`off`: no answer goes chunked, as nginx's: a streamed answer of unknown length "
        "(proxied, FastCGI, CGI) ends with the connection, and `add_trailer` sends "
        "nothing."},
    {"server_tokens", CONF_LIST, CONF_SERVER | CONF_LOCATION, CONF_ONCE, .min_args = 1,
     .max_args = 1, .set = set_server_tokens, .usage = "on|off",
     .dflt = "(the top level's)",
     .doc = "`off`: this block's answers, errors included, say `Server: lfhttpd` without the "
        "version (nginx's `server_tokens` per block); `on` under a top-level `off` leaves "
        "`Server: lfhttpd`. An upstream's `Server` passed by `proxy_pass_header` is kept."},
    {"expires", CONF_LIST, CONF_TOP | CONF_SERVER | CONF_LOCATION, CONF_ONCE, .min_args = 1,
     .max_args = 2,
     .set = set_expires, .usage = "[modified] TIME|@TIME|epoch|max|off",
     .dflt = "off",
     .doc = "On the same statuses as `add_header` (no `always`): `Expires` now + TIME and "
        "`Cache-Control: max-age=TIME`, replacing any the response has; TIME in nginx's form "
        "(`30d`, `12h`, `1y`, `1d12h`; `y` 365 days, `M` 30 days; at most 68 years); 0: "
        "`max-age=0`; negative: an `Expires` in the past and `no-cache`; `epoch`: `Thu, 01 "
        "Jan 1970 00:00:01 GMT` and `no-cache`; `max`: `Thu, 31 Dec 2037 23:55:55 GMT` and "
        "`max-age=315360000`. `@TIME`: the next time of day TIME (server's time zone); "
        "`modified TIME`: the file's `Last-Modified` + TIME (its max-age from now; past: "
        "`no-cache`). A value with variables is read per request, as nginx's (one that is "
        "no value adds nothing)."},
    {.name = NULL},
};

/* --- answering ---------------------------------------------------------------------------- */

/* The statuses nginx adds headers and expiry to without `always`. */
static bool safe_status(int status)
{
    switch (status) {
    case 200: case 201: case 204: case 206: case 301: case 302: case 303: case 304: case 307:
    case 308: return true;
    default: return false;
    }
}

/* The next time of day `at` (seconds past local midnight) after now, as nginx's
 * ngx_next_time; -1 if the clock cannot say. */
static int64_t next_time_of_day(int64_t now_s, int64_t at)
{
    time_t now = (time_t)now_s;
    struct tm tm;
    if (!localtime_r(&now, &tm))
        return -1;
    tm.tm_hour = (int)(at / 3600);
    tm.tm_min = (int)(at % 3600 / 60);
    tm.tm_sec = (int)(at % 60);
    time_t next = mktime(&tm);
    if (next != -1 && next > now)
        return next;
    tm.tm_mday++; /* mktime normalizes the day past the month's end */
    next = mktime(&tm);
    return next;
}

/* The response's Last-Modified as seconds, or -1 without one. */
static int64_t last_modified_of(const struct response *resp)
{
    size_t len;
    const char *lm = resp_header_get(resp, "Last-Modified", &len);
    int64_t t;
    if (!lm || http_date_parse((struct http_slice){lm, len}, &t) < 0)
        return -1;
    return t;
}

static void set_expiry(enum headers_expires kind, int64_t s, int64_t now_s,
                       struct response *resp)
{
    char date[30], cc[40];
    const char *expires = date;
    int64_t at, max_age;
    if (kind == HEADERS_EXPIRES_EPOCH) {
        expires = EXPIRES_EPOCH_DATE;
        strcpy(cc, "no-cache");
    } else if (kind == HEADERS_EXPIRES_MAX) {
        expires = EXPIRES_MAX_DATE;
        strcpy(cc, "max-age=315360000");
    } else {
        int64_t lm = kind == HEADERS_EXPIRES_MODIFIED ? last_modified_of(resp) : -1;
        if (kind == HEADERS_EXPIRES_DAILY)
            at = next_time_of_day(now_s, s), max_age = at - now_s;
        else if (lm >= 0)
            at = lm + s, max_age = at - now_s;
        else
            at = now_s + s, max_age = s;
        http_date_format(at, date);
        if (s < 0 || max_age < 0)
            strcpy(cc, "no-cache");
        else
            *http_fmt_u64(stpcpy(cc, "max-age="), (uint64_t)max_age) = '\0';
    }
    resp_header_set(resp, "Expires", expires);
    resp_header_set(resp, "Cache-Control", cc);
}

/* The expiry of c for this request: its value, or its variable's read now. False: none. */
static bool expiry_of(const struct headers_conf *c, const struct vars_source *src,
                      enum headers_expires *kind, int64_t *s)
{
    *kind = c->expires;
    *s = c->expires_s;
    if (c->expires_value) {
        char value[64];
        const char *why;
        long n = vars_expand(c->expires_value, src, value, sizeof(value));
        if (n <= 0 || (size_t)n >= sizeof(value) ||
            headers_parse_expires(value, c->expires == HEADERS_EXPIRES_MODIFIED, kind, s,
                                  &why) < 0)
            return false;
    }
    return *kind != HEADERS_EXPIRES_UNSET && *kind != HEADERS_EXPIRES_OFF;
}

static void add_one(const struct headers_add *a, const struct vars_source *src,
                    struct response *resp)
{
    char value[RESP_HEAD_CAP];
    long n = vars_expand(a->value, src, value, sizeof(value));
    if (n < 0) { /* cannot fit in any head: as a head that overflows, a 500 */
        resp_fail(resp);
        return;
    }
    if (a->replaces)
        resp_header_remove(resp, a->name);
    if (n > 0)
        resp_header(resp, a->name, value);
}

/* A block's `server_tokens off`: the Server line without the version, unless it is an
 * upstream's (proxy_pass_header Server). */
static void server_tokens_apply(const struct headers_conf *c, struct response *resp)
{
    size_t len;
    const char *v = resp_header_get(resp, "Server", &len);
    if (c->server_tokens == 0 && v && len > 8 && strncmp(v, "lfhttpd/", 8) == 0)
        resp_header_set(resp, "Server", "lfhttpd");
}

void headers_apply(const struct headers_conf *c, const struct vars_source *src, int64_t now_s,
                   struct response *resp)
{
    server_tokens_apply(c, resp);
    bool safe = safe_status(resp_status(resp));
    enum headers_expires kind;
    int64_t s;
    if (safe && expiry_of(c, src, &kind, &s))
        set_expiry(kind, s, now_s, resp);
    for (unsigned i = 0; i < c->n_adds; i++)
        if (safe || c->adds[i].always)
            add_one(&c->adds[i], src, resp);
}

/* The trailer lines of c for an answer of this status, "Name: value\r\n" each, into
 * out: those the status allows (or `always`), whose value is not empty. Returns their
 * length, or -1 if they do not fit. */
static long trailers_render_conf(const struct headers_conf *c, struct vars_source *src,
                                 int status, char *out, size_t cap)
{
    bool safe = safe_status(status);
    size_t n = 0;
    for (unsigned i = 0; i < c->n_trailers; i++) {
        const struct headers_add *t = &c->trailers[i];
        if (!safe && !t->always)
            continue;
        src->trailers = out; /* $sent_trailer_NAME: the lines made before this one */
        src->trailers_len = n;
        char value[RESP_HEAD_CAP];
        long v = vars_expand(t->value, src, value, sizeof(value));
        if (v < 0)
            return -1;
        size_t name_len = strlen(t->name);
        if (v == 0)
            continue;
        if (n + name_len + 4 + (size_t)v > cap)
            return -1;
        memcpy(out + n, t->name, name_len);
        memcpy(out + n + name_len, ": ", 2);
        memcpy(out + n + name_len + 2, value, (size_t)v);
        memcpy(out + n + name_len + 2 + (size_t)v, "\r\n", 2);
        n += name_len + 4 + (size_t)v;
    }
    src->trailers = NULL;
    return (long)n;
}

/* Does some trailer of c hold for this status (nginx's "expect trailers")? */
static bool trailers_expected(const struct headers_conf *c, int status)
{
    bool safe = safe_status(status);
    for (unsigned i = 0; i < c->n_trailers; i++)
        if (safe || c->trailers[i].always)
            return true;
    return false;
}

/* resp_trailers_fn: a streamed answer's trailers, at its end. */
static long trailers_render_late(const void *ctx, const void *req, int status, char *out,
                                 size_t cap)
{
    struct vars_source src;
    module_vars_source(req, &src);
    return trailers_render_conf(ctx, &src, status, out, cap);
}

/* add_trailer for an answer to an HTTP/1.1 request that has a body: a whole body's
 * trailers made now (its values are all known), a stream's at its end. */
static void trailers_apply(const struct headers_conf *c, const struct request *req,
                           struct vars_source *src, struct response *resp)
{
    if (!c->n_trailers || c->chunked == 0 || !req->http || req->http->version_minor == 0 ||
        !resp_has_body(resp) || !trailers_expected(c, resp_status(resp)))
        return;
    if (resp_is_stream(resp)) {
        resp_expect_trailers(resp, trailers_render_late, c);
        return;
    }
    char lines[RESP_SCRATCH_CAP];
    long n = trailers_render_conf(c, src, resp_status(resp), lines, sizeof(lines));
    char *kept = n >= 0 ? resp_scratch(resp, (size_t)n + 1) : NULL;
    if (!kept) { /* cannot fit: as a head that overflows, a 500 */
        resp_fail(resp);
        return;
    }
    memcpy(kept, lines, (size_t)n);
    resp_trailers(resp, kept, (size_t)n);
}

/* --- the module --------------------------------------------------------------------------- */

struct headers_module {
    unsigned index; /* in the chain: for module_settings() */
};

static void headers_filter(void *state, const struct request *req, struct response *resp)
{
    const struct headers_module *m = state;
    const struct headers_conf *c = module_settings(req, m->index);
    if (c && c->chunked == 0 && resp_is_stream_head(resp))
        resp_no_chunked(resp); /* a CGI script's too */
    if (!c || (resp_is_stream(resp) && !resp_is_upstream_head(resp)) ||
        (c->n_adds == 0 && c->expires <= HEADERS_EXPIRES_OFF && !c->expires_value &&
         c->server_tokens != 0 && c->n_trailers == 0))
        return;
    struct vars_source src;
    module_vars_source(req, &src);
    module_vars_answer(&src, resp);
    headers_apply(c, &src, req->now_s, resp);
    trailers_apply(c, req, &src, resp);
}

static int headers_init(struct module_init *mi, void **state)
{
    struct headers_module *m = malloc(sizeof(*m));
    if (!m)
        return module_error(mi, NULL, "out of memory");
    m->index = mi->index;
    *state = m;
    return 0;
}

static void headers_fini(void *state)
{
    free(state);
}

/* A block's settings, its own merged over the outer block's; a block without any of the
 * module's directives shares its outer block's. */
static void *headers_block(void *state, const struct module_block *b)
{
    (void)state;
    if (b->outer && !module_block_has(b))
        return (void *)b->outer;
    struct headers_conf *c = calloc(1, sizeof(*c));
    if (!c) {
        module_error(b->mi, NULL, "out of memory");
        return NULL;
    }
    c->server_tokens = -1;
    c->chunked = -1;
    if (module_block_read(b, c) < 0) {
        headers_conf_free(c);
        free(c);
        return NULL;
    }
    if (b->outer)
        headers_conf_merge(c, b->outer);
    return c;
}

static void headers_block_free(void *state, void *settings)
{
    (void)state;
    headers_conf_free(settings);
    free(settings);
}

const struct module mod_headers = {
    .name = "headers",
    .directives = headers_directives,
    .init = headers_init,
    .fini = headers_fini,
    .filter = headers_filter,
    .block = headers_block,
    .block_free = headers_block_free,
};
