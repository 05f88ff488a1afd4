/* mod_fastcgi.c — fastcgi_pass: a location answered by a FastCGI application (PHP-FPM and
 * its kin), as nginx's ngx_http_fastcgi_module.
 *
 * The module reads the directives and, for each request, writes its parameters (the
 * fastcgi_param lines, expanded, then the client's header fields as HTTP_NAME) and reads
 * the head of the application's answer (CGI's: Status, Location, fields; mod_cgi's
 * parser); the core does the I/O (http_fastcgi.c) with the servers of an `upstream` block
 * or of the address given, as the proxy's (upstream.c).
 *
 * As nginx's: fastcgi_param lines of a block replace the outer block's as a whole; a
 * Location from the application is passed on (no internal redirect, unlike CGI's local
 * redirects), with 302 when no Status came; $fastcgi_script_name and $fastcgi_path_info
 * split $uri by fastcgi_split_path_info.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fastcgi_record.h"
#include "mod_cgi.h"
#include "module.h"
#include "module_fastcgi.h"
#include "upstream.h"
#include "vars.h"

#define FCGI_UPSTREAMS_MAX 64
#define FCGI_UNSET 0xffffffffu
#define FCGI_DEFAULT_TIMEOUT_MS 60000

enum { FCGI_STATE = 1, FCGI_BLOCK = 2 };

struct fcgi_state {
    int kind; /* FCGI_STATE */
    struct upstream *ups[FCGI_UPSTREAMS_MAX];
    bool used[FCGI_UPSTREAMS_MAX]; /* named by a fastcgi_pass: on the status page */
    unsigned n_ups;
    struct upstream *implicit[MODULE_MOUNTS_MAX]; /* fastcgi_pass ADDRESS's, owned by blocks */
    unsigned n_implicit;
    struct module_init *mi;
};

struct fcgi_conf {
    struct fastcgi_split split; /* first: module_fastcgi_var reads it */
    int kind;                   /* FCGI_BLOCK */
    struct fastcgi_params params;
    struct regex split_re;
    bool split_owned;  /* split_re is this block's */
    char index[256];
    bool index_set;

    const char *pass_text; /* fastcgi_pass (this location's only) */
    unsigned pass_line;
    struct vars_value *pass_vars; /* owned: the value, when it has variables */
    const struct fcgi_state *st;  /* the upstream blocks a variable's value may name */
    struct fastcgi_resolver resolver; /* and the resolver of its names */
    struct upstream *implicit; /* owned: an address */

    struct fastcgi_param_line *lines; /* inherited as a whole when a block has none */
    unsigned n_lines;
    bool lines_owned;
    char (*hide)[64];
    unsigned n_hide;
    char (*pass)[64];
    unsigned n_pass;
    bool hide_owned, pass_owned;
    const char **catch_stderr; /* fastcgi_catch_stderr's strings (the lines' own) */
    unsigned n_catch_stderr;
    bool catch_owned;
    unsigned connect_ms, send_ms, read_ms;
    unsigned next_upstream, tries;
    int keep_conn; /* -1 unset */
    int intercept; /* fastcgi_intercept_errors; -1 unset */
    int request_buffering; /* fastcgi_request_buffering; -1 unset */
    struct fastcgi_buffering buf;
};

/* --- setters ------------------------------------------------------------------------------ */

static int set_upstream(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    (void)msg;
    (void)len;
    struct fcgi_state *st = base;
    if (st->kind != FCGI_STATE)
        return 0;
    struct module_init *mi = ctx;
    if (st->n_ups == FCGI_UPSTREAMS_MAX)
        return module_error(mi, n, "too many upstream blocks (%d)", FCGI_UPSTREAMS_MAX);
    struct upstream *u = malloc(sizeof(*u));
    if (!u)
        return module_error(mi, n, "out of memory");
    struct conf_reader r = {
        .file = mi->cfg->file,
        .owner = "fastcgi",
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
    struct fcgi_conf *c = base;
    const char *a = n->args[0];
    if (strchr(a, '$')) { /* made per request (fastcgi_target_eval) */
        char why[256];
        if (vars_compile(a, VARS_RAW, &c->pass_vars, why, sizeof(why)) < 0)
            return snprintf(msg, len, "%s", why), -1;
    } else if (strncasecmp(a, "http://", 7) == 0 || strncasecmp(a, "https://", 8) == 0)
        return snprintf(msg, len, "\"%s\": an address (unix:PATH, HOST:PORT or an upstream's "
                        "name), not a URL", a), -1;
    c->pass_text = a;
    c->pass_line = n->line;
    return 0;
}

static int set_param(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    (void)ctx;
    struct fcgi_conf *c = base;
    return fastcgi_param_add(&c->lines, &c->n_lines, &c->lines_owned, n, msg, len);
}

static int set_hide(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    (void)ctx;
    struct fcgi_conf *c = base;
    return fastcgi_name_add(&c->hide, &c->n_hide, &c->hide_owned, n->args[0], msg, len);
}

static int set_pass_header(void *base, const struct conf_node *n, void *ctx, char *msg,
                           size_t len)
{
    (void)ctx;
    struct fcgi_conf *c = base;
    return fastcgi_name_add(&c->pass, &c->n_pass, &c->pass_owned, n->args[0], msg, len);
}

/* fastcgi_catch_stderr STRING: one more, the block's own list from its first (nginx's: a
 * block with none has its outer block's). */
static int set_catch_stderr(void *base, const struct conf_node *n, void *ctx, char *msg,
                            size_t len)
{
    (void)ctx;
    struct fcgi_conf *c = base;
    const char **list = realloc(c->catch_owned ? c->catch_stderr : NULL,
                                (c->n_catch_stderr + 1) * sizeof(*list));
    if (!list)
        return snprintf(msg, len, "out of memory"), -1;
    list[c->n_catch_stderr++] = n->args[0];
    c->catch_stderr = list;
    c->catch_owned = true;
    return 0;
}

static int set_index(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    (void)ctx;
    struct fcgi_conf *c = base;
    if (strlen(n->args[0]) >= sizeof(c->index))
        return snprintf(msg, len, "too long"), -1;
    snprintf(c->index, sizeof(c->index), "%s", n->args[0]);
    c->index_set = true;
    return 0;
}

static int set_split(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    (void)ctx;
    struct fcgi_conf *c = base;
    char why[256];
    if (regex_compile(&c->split_re, n->args[0], 0, why, sizeof(why)) < 0)
        return snprintf(msg, len, "%s", why), -1;
    c->split_owned = true;
    if (c->split_re.n_groups != 2) {
        return snprintf(msg, len, "pattern \"%s\" must have 2 captures", n->args[0]), -1;
    }
    return 0;
}

static int set_next(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    (void)ctx;
    struct fcgi_conf *c = base;
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
    struct fcgi_conf *c = base;
    int v = on_off(n->args[0], msg, len);
    if (v < 0)
        return -1;
    c->intercept = v;
    return 0;
}

static int set_keep_conn(void *base, const struct conf_node *n, void *ctx, char *msg,
                         size_t len)
{
    (void)ctx;
    struct fcgi_conf *c = base;
    int v = on_off(n->args[0], msg, len);
    if (v < 0)
        return -1;
    c->keep_conn = v;
    return 0;
}

static int set_request_buffering(void *base, const struct conf_node *n, void *ctx, char *msg,
                                 size_t len)
{
    (void)ctx;
    struct fcgi_conf *c = base;
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
    struct fcgi_conf *c = base;
    return fastcgi_buffering_set(&c->buf, n, msg, len);
}

#define LOC CONF_TOP | CONF_SERVER | CONF_LOCATION
static const struct conf_directive fastcgi_directives[] = {
    {"fastcgi_pass", CONF_LIST, CONF_LOCATION, .min_args = 1, .max_args = 1, .set = set_pass,
     .usage = "unix:PATH | HOST:PORT | UPSTREAM",
     .doc = "Answers the location from a FastCGI application (PHP-FPM): a unix socket, an "
        "address, or the servers of an `upstream` block (its balancing and failures as "
        "`proxy_pass`'s). The answer goes to the client as it comes, and is read ahead of a "
        "slow client with `fastcgi_buffering on`. With variables (`fastcgi_pass $php;`, the "
        "value from a `map` or `set`) the value is made per request, as nginx's: a name "
        "without a port that an `upstream` block has uses that block (its `keepalive` too), "
        "`unix:PATH`, `IPv4:PORT` and `[IPv6]:PORT` are used as they are (a connection each, "
        "never kept), a `HOST:PORT` that a `fastcgi_pass` without variables names, as "
        "written, uses that line's servers (resolved at load), another is resolved by "
        "`resolver` (none: 502, \"no "
        "resolver defined to resolve HOST\"); a malformed value, or one without a port, is "
        "500, logged as nginx logs it (\"no port in upstream \\\"HOST\\\"\")."},
    {"fastcgi_param", CONF_LIST, LOC, CONF_REPEATS, .min_args = 2, .max_args = 3,
     .set = set_param, .usage = "NAME VALUE [if_not_empty]",
     .doc = "A parameter passed to the application (variables allowed; `if_not_empty`: not "
        "passed when empty). A block with its own `fastcgi_param` lines has those alone, as "
        "nginx's. The client's header fields follow as `HTTP_NAME`, unless a line set that "
        "name. `include fastcgi.conf;` sets the usual ones."},
    {"fastcgi_index", CONF_LIST, LOC, .min_args = 1, .max_args = 1, .set = set_index,
     .usage = "NAME",
     .doc = "Appended to `$fastcgi_script_name` when it ends in `/`."},
    {"fastcgi_split_path_info", CONF_LIST, LOC, .min_args = 1, .max_args = 1,
     .set = set_split, .usage = "REGEX",
     .doc = "A regular expression with two captures that splits `$uri` into "
        "`$fastcgi_script_name` and `$fastcgi_path_info`; when it does not match, the script "
        "name is `$uri` and the path info empty."},
    {"fastcgi_connect_timeout", CONF_DURATION, LOC, .min = 1, .max = 3600000,
     CONF_AT(struct fcgi_conf, connect_ms), .dflt = "60s",
     .doc = "No connection to the application within it: 504 (or the next server)."},
    {"fastcgi_send_timeout", CONF_DURATION, LOC, .min = 1, .max = 86400000,
     CONF_AT(struct fcgi_conf, send_ms), .dflt = "60s",
     .doc = "The longest wait between two writes of the request to the application: 504."},
    {"fastcgi_read_timeout", CONF_DURATION, LOC, .min = 1, .max = 86400000,
     CONF_AT(struct fcgi_conf, read_ms), .dflt = "60s",
     .doc = "The longest wait between two reads of the answer: no head within it is 504, a "
        "stall after the head cuts the client's connection."},
    {"fastcgi_next_upstream", CONF_LIST, LOC, .min_args = 1, .max_args = 4, .set = set_next,
     .usage = "error | timeout | invalid_header | non_idempotent | off ...",
     .dflt = "error timeout",
     .doc = "When a failed attempt goes to the next server of the upstream, as "
        "`proxy_next_upstream`."},
    {"fastcgi_next_upstream_tries", CONF_COUNT, LOC, .max = 64,
     CONF_AT(struct fcgi_conf, tries), .dflt = "0",
     .doc = "How many servers a request may try in all (0: no limit)."},
    {"fastcgi_hide_header", CONF_LIST, LOC, CONF_REPEATS, .min_args = 1, .max_args = 1,
     .set = set_hide, .usage = "NAME",
     .doc = "A field of the application's answer not passed to the client (besides `Status` "
        "and the `X-Accel-` ones, never passed)."},
    {"fastcgi_pass_header", CONF_LIST, LOC, CONF_REPEATS, .min_args = 1, .max_args = 1,
     .set = set_pass_header, .usage = "NAME",
     .doc = "Passes a field hidden by default (`X-Accel-...`); `Date` and `Server` stay "
        "lfhttpd's own."},
    {"fastcgi_catch_stderr", CONF_LIST, LOC, CONF_REPEATS, .min_args = 1, .max_args = 1,
     .set = set_catch_stderr, .usage = "STRING",
     .doc = "While the answer's head has not come, a FCGI_STDERR record of the "
        "application's (logged as ever) that contains STRING (case-sensitive; trailing "
        "spaces, dots and line ends of the record's text are not searched) makes the answer "
        "invalid, as nginx's: the connection is closed and the request goes to the next "
        "server when `fastcgi_next_upstream invalid_header` allows, else 502. Once the head "
        "came, the application's stderr is only logged. Repeatable; a block with none has "
        "its outer block's."},
    {"fastcgi_keep_conn", CONF_LIST, LOC, .min_args = 1, .max_args = 1, .set = set_keep_conn,
     .usage = "on|off", .dflt = "off",
     .doc = "`on`: the application is asked to keep its connection (FCGI_KEEP_CONN), and "
        "it is kept for the next request when the `upstream` block has `keepalive N`; "
        "`off`: a connection per request, closed by the application."},
    {"fastcgi_intercept_errors", CONF_LIST, LOC, .min_args = 1, .max_args = 1,
     .set = set_intercept, .usage = "on|off", .dflt = "off",
     .doc = "`on`: an application's answer of 300 or more for which the block has an "
        "`error_page` is answered by that page instead (its body is not read), as nginx's."},
    {"fastcgi_request_buffering", CONF_LIST, LOC, .min_args = 1, .max_args = 1,
     .set = set_request_buffering, .usage = "on|off", .dflt = "on",
     .doc = "`on`: the request's body is read whole before the application is contacted; "
        "`off`: the application is contacted once the head is read, and the body goes to it "
        "as FCGI_STDIN records as it arrives (a chunked one too, decoded, with "
        "`$content_length` empty, as nginx's, unless it came whole with the head), through a "
        "fixed buffer: a slow uploader holds no more than it. The request is then not tried on the next server once a byte of "
        "its body was read."},
    FASTCGI_BUFFERING_DIRECTIVES("fastcgi", set_buffering, LOC),
    {.name = NULL},
};

/* --- per block ---------------------------------------------------------------------------- */

static const struct fastcgi_ops fcgi_ops;
static void fcgi_block_free(void *state, void *settings);

static struct upstream *find_upstream(struct fcgi_state *st, const char *name)
{
    for (unsigned i = 0; i < st->n_ups; i++)
        if (strcasecmp(st->ups[i]->name, name) == 0) {
            st->used[i] = true;
            return st->ups[i];
        }
    return NULL;
}

static int resolve_pass(struct fcgi_state *st, struct fcgi_conf *c, const struct module_block *b,
                        const struct conf_node *where)
{
    const char *a = c->pass_text;
    if (c->pass_vars) { /* any block may be named: each is watched, and on the status page */
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
            return module_error(b->mi, where, "fastcgi_pass: %s", msg);
        }
        u = c->implicit;
        if (st->n_implicit < MODULE_MOUNTS_MAX)
            st->implicit[st->n_implicit++] = u;
    }
    c->params.up.upstream = u;
    return 0;
}

static void *fcgi_block(void *state, const struct module_block *b)
{
    struct fcgi_state *st = state;
    const struct fcgi_conf *outer = b->outer;
    struct fcgi_conf *c = calloc(1, sizeof(*c));
    if (!c) {
        module_error(b->mi, b->node, "out of memory");
        return NULL;
    }
    c->kind = FCGI_BLOCK;
    c->connect_ms = c->send_ms = c->read_ms = FCGI_UNSET;
    c->next_upstream = c->tries = FCGI_UNSET;
    c->keep_conn = -1;
    c->intercept = -1;
    c->request_buffering = -1;
    c->buf.buffering = -1;
    if (module_block_read(b, c) < 0)
        goto fail;
    if (fastcgi_resolver_read(&c->resolver, b, outer ? &outer->resolver : NULL) < 0)
        goto fail;
    for (const struct conf_node *n = b->first; n; n = n->next) /* written in once `user` */
        if (strcmp(n->name, "fastcgi_temp_path") == 0 &&
            module_dir_for_user(b->mi, n, n->args[0]) < 0)
            goto fail;
    if (c->split_owned)
        c->split.split = &c->split_re;
    if (c->index_set)
        c->split.index = c->index;
    if (outer) {
        if (!c->lines_owned) {
            c->lines = outer->lines;
            c->n_lines = outer->n_lines;
        }
        if (!c->hide_owned) {
            c->hide = outer->hide;
            c->n_hide = outer->n_hide;
        }
        if (!c->pass_owned) {
            c->pass = outer->pass;
            c->n_pass = outer->n_pass;
        }
        if (!c->catch_owned) {
            c->catch_stderr = outer->catch_stderr;
            c->n_catch_stderr = outer->n_catch_stderr;
        }
        if (!c->split.split)
            c->split.split = outer->split.split;
        if (!c->split.index)
            c->split.index = outer->split.index;
        if (c->connect_ms == FCGI_UNSET)
            c->connect_ms = outer->connect_ms;
        if (c->send_ms == FCGI_UNSET)
            c->send_ms = outer->send_ms;
        if (c->read_ms == FCGI_UNSET)
            c->read_ms = outer->read_ms;
        if (c->next_upstream == FCGI_UNSET)
            c->next_upstream = outer->next_upstream;
        if (c->tries == FCGI_UNSET)
            c->tries = outer->tries;
        if (c->keep_conn < 0)
            c->keep_conn = outer->keep_conn;
        if (c->intercept < 0)
            c->intercept = outer->intercept;
        if (c->request_buffering < 0)
            c->request_buffering = outer->request_buffering;
    } else {
        if (c->connect_ms == FCGI_UNSET)
            c->connect_ms = FCGI_DEFAULT_TIMEOUT_MS;
        if (c->send_ms == FCGI_UNSET)
            c->send_ms = FCGI_DEFAULT_TIMEOUT_MS;
        if (c->read_ms == FCGI_UNSET)
            c->read_ms = FCGI_DEFAULT_TIMEOUT_MS;
        if (c->next_upstream == FCGI_UNSET)
            c->next_upstream = PROXY_NEXT_ERROR | PROXY_NEXT_TIMEOUT;
        if (c->tries == FCGI_UNSET)
            c->tries = 0;
        if (c->keep_conn < 0)
            c->keep_conn = 0;
        if (c->intercept < 0)
            c->intercept = 0;
        if (c->request_buffering < 0)
            c->request_buffering = 1;
    }
    if (c->pass_text) {
        const struct conf_node *where = b->node;
        for (const struct conf_node *n = b->first; n; n = n->next)
            if (strcmp(n->name, "fastcgi_pass") == 0)
                where = n;
        if (resolve_pass(st, c, b, where) < 0 || module_block_mount(b, where, c, true) < 0)
            goto fail;
        if (!c->request_buffering) /* a chunked body too, as nginx's */
            module_block_stream_body(b, true);
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
        .ops = &fcgi_ops,
        .keep_conn = c->keep_conn > 0,
        .catch_stderr = c->catch_stderr,
        .n_catch_stderr = c->n_catch_stderr,
    };
    fastcgi_buffering_merge(&c->buf, outer ? &outer->buf : NULL, b->mi->cfg->http_block,
                            &c->params.up);
    return c;
fail:
    fcgi_block_free(state, c);
    return NULL;
}

static void fcgi_block_free(void *state, void *settings)
{
    (void)state;
    struct fcgi_conf *c = settings;
    if (!c)
        return;
    if (c->lines_owned) {
        for (unsigned i = 0; i < c->n_lines; i++) {
            free(c->lines[i].name);
            vars_free(c->lines[i].value);
        }
        free(c->lines);
    }
    if (c->split_owned)
        regex_free(&c->split_re);
    vars_free(c->pass_vars);
    fastcgi_resolver_free(&c->resolver);
    if (c->hide_owned)
        free(c->hide);
    if (c->pass_owned)
        free(c->pass);
    if (c->catch_owned)
        free(c->catch_stderr);
    if (c->implicit) {
        upstream_idle_close_all(c->implicit);
        upstream_release(c->implicit);
        free(c->implicit);
    }
    free(c);
}

/* --- the request's parameters -------------------------------------------------------------- */

/* HTTP_NAME of a field name (upper case, '-' as '_') into out; false when it does not fit
 * or the name has bytes a parameter name should not. */
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
            return false; /* (nginx ignores fields with other bytes, as "invalid") */
        out[5 + i] = ch;
    }
    *len = name.len + 5;
    out[*len] = '\0';
    return true;
}

static bool set_by_line(const struct fcgi_conf *c, const char *name, size_t len)
{
    for (unsigned i = 0; i < c->n_lines; i++)
        if (c->lines[i].name_len == len && memcmp(c->lines[i].name, name, len) == 0)
            return true;
    return false;
}

static long fcgi_params(const void *conf, const struct request *req, char *out, size_t cap)
{
    const struct fcgi_conf *c = conf;
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
        size_t w = fcgi_param((uint8_t *)out + o, cap - o, l->name, l->name_len, value,
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
        size_t w = fcgi_param((uint8_t *)out + o, cap - o, name, name_len, f->value.p,
                              f->value.len);
        if (w == 0)
            return -1;
        o += w;
    }
    return (long)o;
}

/* --- the answer's head --------------------------------------------------------------------- */

static bool listed(char (*list)[64], unsigned n, const char *name)
{
    for (unsigned i = 0; i < n; i++)
        if (strcasecmp(list[i], name) == 0)
            return true;
    return false;
}

static int fcgi_head(const void *conf, const struct request *req, const char *buf, size_t len,
                     struct response *resp)
{
    (void)req;
    const struct fcgi_conf *c = conf;
    int used = cgi_parse_head(buf, len, resp);
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

static int fcgi_target(const void *conf, const struct request *req, struct fastcgi_target *t)
{
    const struct fcgi_conf *c = conf;
    const struct fastcgi_upstreams ups = {c->st->ups, c->st->n_ups, c->st->implicit,
                                          c->st->n_implicit};
    return fastcgi_target_eval(c->pass_vars, req, &ups, NULL, t);
}

static const struct fastcgi_ops fcgi_ops = {
    .target = fcgi_target,
    .params = fcgi_params,
    .head = fcgi_head,
};

/* --- the module --------------------------------------------------------------------------- */

static enum mod_result fcgi_handle(void *state, const struct request *req, struct response *resp)
{
    (void)state;
    const struct fcgi_conf *c = req->mount ? req->mount->data : NULL;
    if (!c || (!c->params.up.upstream && !c->params.up.dynamic))
        return MOD_DECLINED;
    resp_proxy(resp, &c->params.up);
    return MOD_HANDLED;
}

/* The upstreams fastcgi_pass uses (for the status page and the metrics): the blocks it
 * names (its own copies, counted apart from proxy_pass's), and its addresses. */
static unsigned fcgi_upstreams(void *state, struct upstream **out, unsigned max)
{
    struct fcgi_state *st = state;
    unsigned n = 0;
    for (unsigned i = 0; i < st->n_ups; i++)
        if (st->used[i] && n++ < max)
            out[n - 1] = st->ups[i];
    for (unsigned i = 0; i < st->n_implicit; i++, n++)
        if (n < max)
            out[n] = st->implicit[i];
    return n;
}

/* The top level's `upstream` blocks, read again here: fastcgi_pass NAME has servers of
 * its own (their failures and idle connections counted apart from proxy_pass's). */
static const struct conf_directive upstream_directive[] = {
    {"upstream", CONF_BLOCK, CONF_TOP, CONF_REPEATS, .min_args = 1, .max_args = 1,
     .set = set_upstream, .usage = "NAME { server ADDRESS [PARAMETERS]; ... }",
     .doc = "A named set of servers (see mod_proxy's table)."},
    {.name = NULL},
};

static int fcgi_init(struct module_init *mi, void **state)
{
    struct fcgi_state *st = calloc(1, sizeof(*st));
    if (!st)
        return module_error(mi, NULL, "out of memory");
    st->kind = FCGI_STATE;
    st->mi = mi;
    struct conf_reader r = {
        .file = mi->cfg->file,
        .owner = "fastcgi",
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

static void fcgi_fini(void *state)
{
    struct fcgi_state *st = state;
    for (unsigned i = 0; i < st->n_ups; i++) {
        upstream_idle_close_all(st->ups[i]);
        upstream_release(st->ups[i]);
        free(st->ups[i]);
    }
    free(st);
}

/* Kept application connections idle past their block's keepalive_timeout are closed:
 * each holds one of the application's workers (PHP-FPM's) until it is. */
static void fcgi_tick(void *state, int64_t now_ms)
{
    struct fcgi_state *st = state;
    for (unsigned i = 0; i < st->n_ups; i++)
        if (st->used[i])
            upstream_idle_expire(st->ups[i], now_ms);
    for (unsigned i = 0; i < st->n_implicit; i++)
        upstream_idle_expire(st->implicit[i], now_ms);
}

const struct module mod_fastcgi = {
    .name = "fastcgi",
    .directives = fastcgi_directives,
    .init = fcgi_init,
    .fini = fcgi_fini,
    .handle = fcgi_handle,
    .block = fcgi_block,
    .block_free = fcgi_block_free,
    .upstreams = fcgi_upstreams,
    .tick = fcgi_tick,
};
