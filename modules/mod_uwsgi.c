/* mod_uwsgi.c — uwsgi_pass and scgi_pass: a location answered by an application that
 * speaks uwsgi (uWSGI's own protocol) or SCGI, as nginx's ngx_http_uwsgi_module and
 * ngx_http_scgi_module. Two modules, one file: they differ only in their directives'
 * prefix and in the request's framing.
 *
 * The module reads the directives and, for each request, writes its parameters (the
 * uwsgi_param or scgi_param lines, expanded, then the client's header fields as
 * HTTP_NAME) in the protocol's pairs (uwsgi_packet.h, scgi_netstring.h) and reads the head
 * of the answer (a status line or CGI's head). The core does the rest with FastCGI's
 * machinery (http_fastcgi.c, told the protocol by struct fastcgi_wire): connect, send,
 * relay, timeouts, retries, error pages. The answer ends when the application closes its
 * connection: a connection per request, as nginx's.
 *
 * As nginx's: a block's param lines replace the outer block's as a whole; SCGI's
 * CONTENT_LENGTH is always the first header (the body's length); the uwsgi packet's
 * parameters are 64 KiB at most (more is 500).
 */
#include "mod_uwsgi.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "mod_cgi.h"
#include "module_fastcgi.h"
#include "scgi_netstring.h"
#include "upstream.h"
#include "uwsgi_packet.h"
#include "vars.h"

#define WIRE_UPSTREAMS_MAX 64
#define WIRE_UNSET 0xffffffffu
#define WIRE_DEFAULT_TIMEOUT_MS 60000
#define WIRE_HEAD_MAX 16384 /* http_fastcgi.c's FCGI_HEAD_MAX */

enum { WIRE_STATE = 1, WIRE_BLOCK = 2 };

/* What differs between the two protocols. */
struct wire_proto {
    const char *name; /* "uwsgi", "scgi": the directives' prefix */
    size_t (*pair)(uint8_t *out, size_t cap, const char *name, size_t name_len,
                   const char *value, size_t value_len);
    const struct fastcgi_wire *wire;
};

struct wire_state {
    int kind; /* WIRE_STATE */
    const struct wire_proto *proto;
    struct upstream *ups[WIRE_UPSTREAMS_MAX];
    bool used[WIRE_UPSTREAMS_MAX]; /* named by a ..._pass: on the status page */
    unsigned n_ups;
    struct upstream *implicit[MODULE_MOUNTS_MAX]; /* ..._pass ADDRESS's, owned by blocks */
    unsigned n_implicit;
    struct module_init *mi;
};

struct wire_conf {
    int kind; /* WIRE_BLOCK */
    const struct wire_proto *proto;
    struct fastcgi_params params;

    const char *pass_text; /* ..._pass (this location's only) */
    struct upstream *implicit; /* owned: an address */
    struct vars_value *pass_vars; /* owned: the value, when it has variables */
    const struct wire_state *st;  /* the upstream blocks a variable's value may name */
    struct fastcgi_resolver resolver; /* and the resolver of its names */

    struct fastcgi_param_line *lines; /* inherited as a whole when a block has none */
    unsigned n_lines;
    bool lines_owned;
    char (*hide)[64];
    unsigned n_hide;
    char (*pass)[64];
    unsigned n_pass;
    bool hide_owned, pass_owned;
    unsigned connect_ms, send_ms, read_ms;
    unsigned next_upstream, tries;
    unsigned modifier1, modifier2; /* WIRE_UNSET: unset */
    int intercept; /* ..._intercept_errors; -1 unset */
    int request_buffering; /* ..._request_buffering; -1 unset */
    struct fastcgi_buffering buf;
};

/* --- setters ------------------------------------------------------------------------------ */

static int set_upstream(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    (void)msg;
    (void)len;
    struct wire_state *st = base;
    if (st->kind != WIRE_STATE)
        return 0;
    struct module_init *mi = ctx;
    if (st->n_ups == WIRE_UPSTREAMS_MAX)
        return module_error(mi, n, "too many upstream blocks (%d)", WIRE_UPSTREAMS_MAX);
    struct upstream *u = malloc(sizeof(*u));
    if (!u)
        return module_error(mi, n, "out of memory");
    struct conf_reader r = {
        .file = mi->cfg->file,
        .owner = st->proto->name,
        .context = CONF_TOP,
        .ctx = mi,
        .err = mi->err,
        .err_len = mi->err_len,
    };
    if (upstream_read(u, n, &r) < 0) {
        free(u);
        return -1;
    }
    st->ups[st->n_ups++] = u;
    return 0;
}

static int set_pass(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    (void)ctx;
    struct wire_conf *c = base;
    const char *a = n->args[0];
    if (strchr(a, '$')) { /* made per request (fastcgi_target_eval) */
        char why[256];
        if (vars_compile(a, VARS_RAW, &c->pass_vars, why, sizeof(why)) < 0)
            return snprintf(msg, len, "%s", why), -1;
        c->pass_text = a;
        return 0;
    }
    /* nginx allows the protocol's own scheme before the address */
    size_t scheme = strlen(c->proto->name);
    if (strncasecmp(a, c->proto->name, scheme) == 0 && strncmp(a + scheme, "://", 3) == 0)
        a += scheme + 3;
    else if (strstr(a, "://"))
        return snprintf(msg, len, "\"%s\": an address (unix:PATH, HOST:PORT or an upstream's "
                        "name), not a URL", a), -1;
    if (!*a)
        return snprintf(msg, len, "\"%s\": no address", n->args[0]), -1;
    c->pass_text = a;
    return 0;
}

static int set_param(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    (void)ctx;
    struct wire_conf *c = base;
    return fastcgi_param_add(&c->lines, &c->n_lines, &c->lines_owned, n, msg, len);
}

static int set_hide(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    (void)ctx;
    struct wire_conf *c = base;
    return fastcgi_name_add(&c->hide, &c->n_hide, &c->hide_owned, n->args[0], msg, len);
}

static int set_pass_header(void *base, const struct conf_node *n, void *ctx, char *msg,
                           size_t len)
{
    (void)ctx;
    struct wire_conf *c = base;
    return fastcgi_name_add(&c->pass, &c->n_pass, &c->pass_owned, n->args[0], msg, len);
}

static int set_next(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    (void)ctx;
    struct wire_conf *c = base;
    static const struct conf_name words[] = {
        {"error", PROXY_NEXT_ERROR},       {"timeout", PROXY_NEXT_TIMEOUT},
        {"invalid_header", PROXY_NEXT_INVALID}, {"non_idempotent", PROXY_NEXT_NON_IDEMPOTENT},
        {"off", 0}, {NULL, 0},
    };
    unsigned mask = 0;
    for (unsigned i = 0; i < n->n_args; i++) {
        int v;
        if (conf_name_value(words, n->args[i], &v) < 0)
            return snprintf(msg, len, "invalid value \"%s\" (error, timeout, invalid_header, "
                            "non_idempotent, off)", n->args[i]), -1;
        if (v == 0 && n->n_args > 1)
            return snprintf(msg, len, "\"off\" stands alone"), -1;
        mask |= (unsigned)v;
    }
    c->next_upstream = mask;
    return 0;
}

static int on_off(const char *v, char *msg, size_t len)
{
    if (strcmp(v, "on") == 0)
        return 1;
    if (strcmp(v, "off") == 0)
        return 0;
    return snprintf(msg, len, "invalid value \"%s\" (on or off)", v), -1;
}

static int set_intercept(void *base, const struct conf_node *n, void *ctx, char *msg,
                         size_t len)
{
    (void)ctx;
    struct wire_conf *c = base;
    int v = on_off(n->args[0], msg, len);
    if (v < 0)
        return -1;
    c->intercept = v;
    return 0;
}

static int set_request_buffering(void *base, const struct conf_node *n, void *ctx, char *msg,
                                 size_t len)
{
    (void)ctx;
    struct wire_conf *c = base;
    int v = on_off(n->args[0], msg, len);
    if (v < 0)
        return -1;
    c->request_buffering = v;
    return 0;
}

static int set_buffering(void *base, const struct conf_node *n, void *ctx, char *msg,
                         size_t len)
{
    (void)ctx;
    struct wire_conf *c = base;
    return fastcgi_buffering_set(&c->buf, n, msg, len);
}

#define LOC CONF_TOP | CONF_SERVER | CONF_LOCATION
/* The directives both protocols have, P their prefix and WHO the application's kind. */
#define WIRE_DIRECTIVES(P, WHO)                                                                \
    {P "_pass", CONF_LIST, CONF_LOCATION, .min_args = 1, .max_args = 1, .set = set_pass,     \
     .usage = "unix:PATH | HOST:PORT | UPSTREAM",                                             \
     .doc = "Answers the location from " WHO ": a unix socket, an address (`" P "://` "      \
        "before it allowed), or the servers of an `upstream` block (its balancing and "      \
        "failures as `proxy_pass`'s). A connection per request; the answer goes to the "     \
        "client as it comes (read ahead of a slow client with `" P "_buffering on`) and "    \
        "ends when the application closes. With variables, the value made per request is "   \
        "an `upstream` block's name, an address or a name for `resolver`, as "                \
        "`fastcgi_pass`'s."},                                                                  \
    {P "_param", CONF_LIST, LOC, CONF_REPEATS, .min_args = 2, .max_args = 3,                  \
     .set = set_param, .usage = "NAME VALUE [if_not_empty]",                                  \
     .doc = "A parameter passed to the application (variables allowed; `if_not_empty`: not " \
        "passed when empty). A block with its own `" P "_param` lines has those alone, as "  \
        "nginx's. The client's header fields follow as `HTTP_NAME`, unless a line set that " \
        "name. `include " P "_params;` sets the usual ones."},                               \
    {P "_connect_timeout", CONF_DURATION, LOC, .min = 1, .max = 3600000,                     \
     CONF_AT(struct wire_conf, connect_ms), .dflt = "60s",                                    \
     .doc = "No connection to the application within it: 504 (or the next server)."},       \
    {P "_send_timeout", CONF_DURATION, LOC, .min = 1, .max = 86400000,                       \
     CONF_AT(struct wire_conf, send_ms), .dflt = "60s",                                       \
     .doc = "The longest wait between two writes of the request to the application: 504."}, \
    {P "_read_timeout", CONF_DURATION, LOC, .min = 1, .max = 86400000,                       \
     CONF_AT(struct wire_conf, read_ms), .dflt = "60s",                                       \
     .doc = "The longest wait between two reads of the answer: no head within it is 504, a " \
        "stall after the head cuts the client's connection."},                               \
    {P "_next_upstream", CONF_LIST, LOC, .min_args = 1, .max_args = 4, .set = set_next,      \
     .usage = "error | timeout | invalid_header | non_idempotent | off ...",                  \
     .dflt = "error timeout",                                                                 \
     .doc = "When a failed attempt goes to the next server of the upstream, as "             \
        "`proxy_next_upstream`."},                                                           \
    {P "_next_upstream_tries", CONF_COUNT, LOC, .max = 64,                                   \
     CONF_AT(struct wire_conf, tries), .dflt = "0",                                           \
     .doc = "How many servers a request may try in all (0: no limit)."},                     \
    {P "_hide_header", CONF_LIST, LOC, CONF_REPEATS, .min_args = 1, .max_args = 1,           \
     .set = set_hide, .usage = "NAME",                                                        \
     .doc = "A field of the application's answer not passed to the client (besides "         \
        "`Status` and the `X-Accel-` ones, never passed)."},                                 \
    {P "_pass_header", CONF_LIST, LOC, CONF_REPEATS, .min_args = 1, .max_args = 1,           \
     .set = set_pass_header, .usage = "NAME",                                                 \
     .doc = "Passes a field hidden by default (`X-Accel-...`); `Date` and `Server` stay "    \
        "lfhttpd's own."},                                                                   \
    {P "_intercept_errors", CONF_LIST, LOC, .min_args = 1, .max_args = 1,                    \
     .set = set_intercept, .usage = "on|off", .dflt = "off",                                  \
     .doc = "`on`: an application's answer of 300 or more for which the block has an "       \
        "`error_page` is answered by that page instead (its body is not read), as nginx's."}, \
    {P "_request_buffering", CONF_LIST, LOC, .min_args = 1, .max_args = 1,                   \
     .set = set_request_buffering, .usage = "on|off", .dflt = "on",                           \
     .doc = "`on`: the request's body is read whole before the application is contacted; "   \
        "`off`: a body with a `Content-Length` goes to the application as it arrives, "       \
        "after the parameters, through a fixed buffer (a chunked one is still read whole "    \
        "first, as nginx's: the protocol needs its length). The request is then not tried "  \
        "on the next server once a byte of its body was read."},                             \
    FASTCGI_BUFFERING_DIRECTIVES(P, set_buffering, LOC)

static const struct conf_directive uwsgi_directives[] = {
    WIRE_DIRECTIVES("uwsgi", "a uwsgi application (uWSGI)"),
    {"uwsgi_modifier1", CONF_COUNT, LOC, .max = 255, CONF_AT(struct wire_conf, modifier1),
     .dflt = "0",
     .doc = "The packet's first modifier: which of uWSGI's plugins answers (0: WSGI)."},
    {"uwsgi_modifier2", CONF_COUNT, LOC, .max = 255, CONF_AT(struct wire_conf, modifier2),
     .dflt = "0", .doc = "The packet's second modifier."},
    {.name = NULL},
};

static const struct conf_directive scgi_directives[] = {
    WIRE_DIRECTIVES("scgi", "an SCGI application"),
    {.name = NULL},
};

/* --- the protocols' framing ------------------------------------------------------------- */

static size_t uwsgi_size(size_t params_len, size_t body_len)
{
    return uwsgi_request_size(params_len, body_len);
}

static size_t uwsgi_frame(const struct fastcgi_params *fp, char *out, size_t cap,
                          const char *params, size_t params_len, const char *body,
                          size_t body_len, uint64_t content_length)
{
    (void)content_length; /* (the packet's CONTENT_LENGTH is a parameter's) */
    return uwsgi_request((uint8_t *)out, cap, fp->modifier1, fp->modifier2, params, params_len,
                         body, body_len);
}

static size_t scgi_size(size_t params_len, size_t body_len)
{
    return scgi_request_size(params_len, body_len);
}

static size_t scgi_frame(const struct fastcgi_params *fp, char *out, size_t cap,
                         const char *params, size_t params_len, const char *body,
                         size_t body_len, uint64_t content_length)
{
    (void)fp;
    size_t o = scgi_request_head((uint8_t *)out, cap, params, params_len, content_length);
    if (o == 0 || body_len > cap - o)
        return 0;
    if (body_len)
        memcpy(out + o, body, body_len);
    return o + body_len;
}

static const struct fastcgi_wire uwsgi_wire = {
    .name = "uwsgi", .size = uwsgi_size, .frame = uwsgi_frame};
static const struct fastcgi_wire scgi_wire = {
    .name = "scgi", .size = scgi_size, .frame = scgi_frame};
static const struct wire_proto uwsgi_proto = {
    .name = "uwsgi", .pair = uwsgi_pair, .wire = &uwsgi_wire};
static const struct wire_proto scgi_proto = {
    .name = "scgi", .pair = scgi_pair, .wire = &scgi_wire};

/* --- per block ---------------------------------------------------------------------------- */

static const struct fastcgi_ops wire_ops;
static void wire_block_free(void *state, void *settings);

static struct upstream *find_upstream(struct wire_state *st, const char *name)
{
    for (unsigned i = 0; i < st->n_ups; i++)
        if (strcasecmp(st->ups[i]->name, name) == 0) {
            st->used[i] = true;
            return st->ups[i];
        }
    return NULL;
}

static int resolve_pass(struct wire_state *st, struct wire_conf *c,
                        const struct module_block *b, const struct conf_node *where)
{
    const char *a = c->pass_text;
    if (c->pass_vars) { /* any block may be named: each is on the status page */
        c->st = st;
        c->params.up.dynamic = true;
        for (unsigned i = 0; i < st->n_ups; i++)
            st->used[i] = true;
        return 0;
    }
    struct upstream *u = strchr(a, ':') ? NULL : find_upstream(st, a);
    if (!u) {
        char msg[512];
        c->implicit = malloc(sizeof(*c->implicit));
        if (!c->implicit)
            return module_error(b->mi, where, "out of memory");
        if (upstream_from_host(c->implicit, a, where->line, msg, sizeof(msg)) < 0) {
            free(c->implicit);
            c->implicit = NULL;
            return module_error(b->mi, where, "%s_pass: %s", st->proto->name, msg);
        }
        u = c->implicit;
        if (st->n_implicit < MODULE_MOUNTS_MAX)
            st->implicit[st->n_implicit++] = u;
    }
    c->params.up.upstream = u;
    return 0;
}

#define INHERIT(field, unset, dflt)                                                         \
    do {                                                                                    \
        if (c->field == (unset))                                                            \
            c->field = outer ? outer->field : (dflt);                                       \
    } while (0)

static void *wire_block(void *state, const struct module_block *b)
{
    struct wire_state *st = state;
    const struct wire_conf *outer = b->outer;
    struct wire_conf *c = calloc(1, sizeof(*c));
    if (!c) {
        module_error(b->mi, b->node, "out of memory");
        return NULL;
    }
    c->kind = WIRE_BLOCK;
    c->proto = st->proto;
    c->connect_ms = c->send_ms = c->read_ms = WIRE_UNSET;
    c->next_upstream = c->tries = WIRE_UNSET;
    c->modifier1 = c->modifier2 = WIRE_UNSET;
    c->intercept = -1;
    c->request_buffering = -1;
    c->buf.buffering = -1;
    if (module_block_read(b, c) < 0)
        goto fail;
    if (fastcgi_resolver_read(&c->resolver, b, outer ? &outer->resolver : NULL) < 0)
        goto fail;
    for (const struct conf_node *n = b->first; n; n = n->next) /* written in once `user` */
        if ((strcmp(n->name, "uwsgi_temp_path") == 0 || strcmp(n->name, "scgi_temp_path") == 0) &&
            module_dir_for_user(b->mi, n, n->args[0]) < 0)
            goto fail;
    if (outer && !c->lines_owned) {
        c->lines = outer->lines;
        c->n_lines = outer->n_lines;
    }
    if (outer && !c->hide_owned) {
        c->hide = outer->hide;
        c->n_hide = outer->n_hide;
    }
    if (outer && !c->pass_owned) {
        c->pass = outer->pass;
        c->n_pass = outer->n_pass;
    }
    INHERIT(connect_ms, WIRE_UNSET, WIRE_DEFAULT_TIMEOUT_MS);
    INHERIT(send_ms, WIRE_UNSET, WIRE_DEFAULT_TIMEOUT_MS);
    INHERIT(read_ms, WIRE_UNSET, WIRE_DEFAULT_TIMEOUT_MS);
    INHERIT(next_upstream, WIRE_UNSET, PROXY_NEXT_ERROR | PROXY_NEXT_TIMEOUT);
    INHERIT(tries, WIRE_UNSET, 0);
    INHERIT(modifier1, WIRE_UNSET, 0);
    INHERIT(modifier2, WIRE_UNSET, 0);
    INHERIT(intercept, -1, 0);
    INHERIT(request_buffering, -1, 1);
    if (c->pass_text) {
        char pass_name[32];
        snprintf(pass_name, sizeof(pass_name), "%s_pass", st->proto->name);
        const struct conf_node *where = b->node;
        for (const struct conf_node *n = b->first; n; n = n->next)
            if (strcmp(n->name, pass_name) == 0)
                where = n;
        if (resolve_pass(st, c, b, where) < 0 || module_block_mount(b, where, c, true) < 0)
            goto fail;
        if (!c->request_buffering) /* a Content-Length body only, as nginx's */
            module_block_stream_body(b, false);
    }
    c->params = (struct fastcgi_params){
        .up = {
            .ops = NULL,
            .conf = c,
            .upstream = c->params.up.upstream,
            .dynamic = c->params.up.dynamic,
            .resolver = c->resolver.resolver,
            .resolver_timeout_ms = c->resolver.timeout_ms,
            .connect_ms = c->connect_ms,
            .send_ms = c->send_ms,
            .read_ms = c->read_ms,
            .next_upstream = c->next_upstream,
            .tries = c->tries,
            .intercept_errors = c->intercept > 0,
            .fastcgi = true,
        },
        .ops = &wire_ops,
        .keep_conn = false,
        .wire = st->proto->wire,
        .modifier1 = (unsigned char)c->modifier1,
        .modifier2 = (unsigned char)c->modifier2,
    };
    fastcgi_buffering_merge(&c->buf, outer ? &outer->buf : NULL, b->mi->cfg->http_block,
                            &c->params.up);
    return c;
fail:
    wire_block_free(state, c);
    return NULL;
}

static void wire_block_free(void *state, void *settings)
{
    (void)state;
    struct wire_conf *c = settings;
    if (!c)
        return;
    if (c->lines_owned) {
        for (unsigned i = 0; i < c->n_lines; i++) {
            free(c->lines[i].name);
            vars_free(c->lines[i].value);
        }
        free(c->lines);
    }
    vars_free(c->pass_vars);
    fastcgi_resolver_free(&c->resolver);
    if (c->hide_owned)
        free(c->hide);
    if (c->pass_owned)
        free(c->pass);
    if (c->implicit) {
        upstream_idle_close_all(c->implicit);
        upstream_release(c->implicit);
        free(c->implicit);
    }
    free(c);
}

/* --- the request's parameters -------------------------------------------------------------- */

/* HTTP_NAME of a field name (upper case, '-' as '_') into out; false when it does not fit
 * or the name has bytes a parameter name should not (nginx ignores those fields). */
static bool header_param(struct http_slice name, char *out, size_t cap, size_t *len)
{
    if (name.len + 6 > cap)
        return false;
    memcpy(out, "HTTP_", 5);
    for (size_t i = 0; i < name.len; i++) {
        char ch = name.p[i];
        if (ch >= 'a' && ch <= 'z')
            ch = (char)(ch - 'a' + 'A');
        else if (ch == '-')
            ch = '_';
        else if (!((ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9')))
            return false;
        out[5 + i] = ch;
    }
    *len = name.len + 5;
    out[*len] = '\0';
    return true;
}

static bool set_by_line(const struct wire_conf *c, const char *name, size_t len)
{
    for (unsigned i = 0; i < c->n_lines; i++)
        if (c->lines[i].name_len == len && memcmp(c->lines[i].name, name, len) == 0)
            return true;
    return false;
}

static long wire_params(const void *conf, const struct request *req, char *out, size_t cap)
{
    const struct wire_conf *c = conf;
    struct vars_source src;
    module_vars_source(req, &src);
    size_t o = 0;
    char value[16384];
    for (unsigned i = 0; i < c->n_lines; i++) {
        const struct fastcgi_param_line *l = &c->lines[i];
        long n = vars_expand(l->value, &src, value, sizeof(value));
        if (n < 0)
            return -1;
        if (n == 0 && l->if_not_empty)
            continue;
        size_t w = c->proto->pair((uint8_t *)out + o, cap - o, l->name, l->name_len, value,
                                  (size_t)n);
        if (w == 0)
            return -1;
        o += w;
    }
    const struct http_request *h = req->http;
    for (unsigned i = 0; h && i < h->n_headers; i++) {
        char name[300];
        size_t name_len;
        const struct http_header *f = &h->headers[i];
        if (!header_param(f->name, name, sizeof(name), &name_len) ||
            set_by_line(c, name, name_len))
            continue;
        size_t w = c->proto->pair((uint8_t *)out + o, cap - o, name, name_len, f->value.p,
                                  f->value.len);
        if (w == 0)
            return -1;
        o += w;
    }
    return (long)o;
}

/* --- the answer's head --------------------------------------------------------------------- */

/* "HTTP/D.D NNN[ reason]" in line[0..len) (its end of line cut): the code and the reason,
 * or -1 when it is not a status line. */
static int status_line(const char *line, size_t len, const char **reason, size_t *reason_len)
{
    size_t i = 5; /* "HTTP/" */
    size_t major = i;
    while (i < len && line[i] >= '0' && line[i] <= '9')
        i++;
    if (i == major || i >= len || line[i++] != '.')
        return -1;
    size_t minor = i;
    while (i < len && line[i] >= '0' && line[i] <= '9')
        i++;
    if (i == minor || i >= len || line[i++] != ' ')
        return -1;
    if (len - i < 3)
        return -1;
    int code = 0;
    for (int k = 0; k < 3; k++, i++) {
        if (line[i] < '0' || line[i] > '9')
            return -1;
        code = code * 10 + (line[i] - '0');
    }
    if (i < len && line[i] != ' ')
        return -1;
    *reason = i < len ? line + i + 1 : line + i;
    *reason_len = i < len ? len - i - 1 : 0;
    return code; /* (the reason's bytes are checked as a Status field's) */
}

int uwsgi_parse_head(const char *buf, size_t len, struct response *resp)
{
    /* The head is copied for CGI's reader, which then checks every line and reads the
     * fields: a status line becomes a Status field, and of the Status fields only the
     * first counts, as nginx's (the status line's, when it came, else the head's first;
     * CGI's reader would take two as invalid). */
    static _Thread_local char room[WIRE_HEAD_MAX + 32];
    static const char http[] = "HTTP/";
    size_t line_len = 0, pre = 0;
    bool have_status = false;
    if (memcmp(buf, http, len < 5 ? len : 5) == 0) {
        const char *lf = memchr(buf, '\n', len);
        if (!lf)
            return len >= WIRE_HEAD_MAX ? -1 : 0;
        line_len = (size_t)(lf - buf) + 1;
        size_t end = line_len - 1;
        if (end > 0 && buf[end - 1] == '\r')
            end--;
        const char *reason;
        size_t reason_len;
        int code = status_line(buf, end, &reason, &reason_len);
        if (code < 0 || reason_len > WIRE_HEAD_MAX)
            return -1;
        int o = snprintf(room, sizeof(room), "Status: %03d%s", code, reason_len ? " " : "");
        memcpy(room + o, reason, reason_len);
        memcpy(room + o + reason_len, "\r\n", 2);
        pre = (size_t)o + reason_len + 2;
        have_status = true;
    }
    if (pre + (len - line_len) > sizeof(room))
        return -1;
    size_t at = pre, skipped = 0;
    const char *p = buf + line_len, *stop = buf + len;
    bool in_head = true;
    while (p < stop) {
        const char *nl = memchr(p, '\n', (size_t)(stop - p));
        size_t n = nl ? (size_t)(nl - p) + 1 : (size_t)(stop - p);
        if (in_head && nl && (n == 1 || (n == 2 && p[0] == '\r')))
            in_head = false; /* the blank line: the body follows */
        bool status = in_head && nl && n >= 7 && strncasecmp(p, "status:", 7) == 0;
        if (status && have_status) {
            skipped += n;
        } else {
            have_status = have_status || status;
            memcpy(room + at, p, n);
            at += n;
        }
        p += n;
    }
    int used = cgi_parse_head(room, at, resp);
    if (used <= 0)
        return used;
    return (int)(line_len + skipped + ((size_t)used - pre));
}

static bool listed(char (*list)[64], unsigned n, const char *name)
{
    for (unsigned i = 0; i < n; i++)
        if (strcasecmp(list[i], name) == 0)
            return true;
    return false;
}

static int wire_head(const void *conf, const struct request *req, const char *buf, size_t len,
                     struct response *resp)
{
    (void)req;
    const struct wire_conf *c = conf;
    int used = uwsgi_parse_head(buf, len, resp);
    if (used <= 0)
        return used;
    static const char *const accel[] = {"X-Accel-Expires", "X-Accel-Redirect",
                                        "X-Accel-Limit-Rate", "X-Accel-Buffering",
                                        "X-Accel-Charset"};
    for (size_t i = 0; i < sizeof(accel) / sizeof(accel[0]); i++)
        if (!listed(c->pass, c->n_pass, accel[i]))
            resp_header_remove(resp, accel[i]);
    for (unsigned i = 0; i < c->n_hide; i++)
        resp_header_remove(resp, c->hide[i]);
    return resp_failed(resp) ? -1 : used;
}

/* uwsgi_pass's value may begin with "uwsgi://", as nginx's (its "suwsgi://" is not
 * taken: no TLS to the application here) */
static int wire_target(const void *conf, const struct request *req, struct fastcgi_target *t)
{
    const struct wire_conf *c = conf;
    const struct fastcgi_upstreams ups = {c->st->ups, c->st->n_ups, c->st->implicit,
                                          c->st->n_implicit};
    return fastcgi_target_eval(c->pass_vars, req, &ups, c->proto == &uwsgi_proto ? "uwsgi"
                                                                               : NULL, t);
}

static const struct fastcgi_ops wire_ops = {
    .target = wire_target,
    .params = wire_params,
    .head = wire_head,
};

/* --- the modules -------------------------------------------------------------------------- */

static enum mod_result wire_handle(void *state, const struct request *req, struct response *resp)
{
    (void)state;
    const struct wire_conf *c = req->mount ? req->mount->data : NULL;
    if (!c || c->kind != WIRE_BLOCK || (!c->params.up.upstream && !c->params.up.dynamic))
        return MOD_DECLINED;
    resp_proxy(resp, &c->params.up);
    return MOD_HANDLED;
}

static unsigned wire_upstreams(void *state, struct upstream **out, unsigned max)
{
    struct wire_state *st = state;
    unsigned n = 0;
    for (unsigned i = 0; i < st->n_ups; i++)
        if (st->used[i] && n++ < max)
            out[n - 1] = st->ups[i];
    for (unsigned i = 0; i < st->n_implicit; i++, n++)
        if (n < max)
            out[n] = st->implicit[i];
    return n;
}

/* The top level's `upstream` blocks, read again here: ..._pass NAME has servers of its
 * own (their failures counted apart from proxy_pass's and fastcgi_pass's). */
static const struct conf_directive upstream_directive[] = {
    {"upstream", CONF_BLOCK, CONF_TOP, CONF_REPEATS, .min_args = 1, .max_args = 1,
     .set = set_upstream, .usage = "NAME { server ADDRESS [PARAMETERS]; ... }",
     .doc = "A named set of servers (see mod_proxy's table)."},
    {.name = NULL},
};

static int wire_init(struct module_init *mi, void **state, const struct wire_proto *proto)
{
    struct wire_state *st = calloc(1, sizeof(*st));
    if (!st)
        return module_error(mi, NULL, "out of memory");
    st->kind = WIRE_STATE;
    st->proto = proto;
    st->mi = mi;
    struct conf_reader r = {
        .file = mi->cfg->file,
        .owner = proto->name,
        .context = CONF_TOP,
        .ctx = mi,
        .err = mi->err,
        .err_len = mi->err_len,
    };
    if (conf_read_owned(&r, upstream_directive, mi->cfg->tree, st) < 0) {
        for (unsigned i = 0; i < st->n_ups; i++)
            free(st->ups[i]);
        free(st);
        return -1;
    }
    *state = st;
    return 0;
}

static int uwsgi_init(struct module_init *mi, void **state)
{
    return wire_init(mi, state, &uwsgi_proto);
}

static int scgi_init(struct module_init *mi, void **state)
{
    return wire_init(mi, state, &scgi_proto);
}

static void wire_fini(void *state)
{
    struct wire_state *st = state;
    for (unsigned i = 0; i < st->n_ups; i++) {
        upstream_idle_close_all(st->ups[i]);
        upstream_release(st->ups[i]);
        free(st->ups[i]);
    }
    free(st);
}

const struct module mod_uwsgi = {
    .name = "uwsgi",
    .directives = uwsgi_directives,
    .init = uwsgi_init,
    .fini = wire_fini,
    .handle = wire_handle,
    .block = wire_block,
    .block_free = wire_block_free,
    .upstreams = wire_upstreams,
};

const struct module mod_scgi = {
    .name = "scgi",
    .directives = scgi_directives,
    .init = scgi_init,
    .fini = wire_fini,
    .handle = wire_handle,
    .block = wire_block,
    .block_free = wire_block_free,
    .upstreams = wire_upstreams,
};
