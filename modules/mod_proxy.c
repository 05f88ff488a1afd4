/* mod_proxy.c — `proxy_pass` and the `upstream` blocks: nginx's reverse proxy, the
 * module's half. It reads the configuration, writes the request an upstream gets, and
 * turns the upstream's head into the client's; the core (http_proxy.c) connects, sends,
 * relays the body and keeps connections, never holding a thread.
 *
 *   upstream app { server 127.0.0.1:3000 weight=2; server unix:/run/app.sock backup;
 *                  keepalive 32; least_conn; }
 *   location /api/ { proxy_pass http://app/v1/; proxy_set_header X-Id $request_id; }
 *
 * proxy_pass http://NAME[/URI]: NAME an upstream block, or HOST[:PORT] (resolved at load).
 * Without a URI the request's target goes as the client sent it (or, after an internal
 * redirect changed the path, the new path, encoded, and the arguments); with one, the
 * location's prefix is replaced by it, in the decoded path, encoded again (nginx's rule).
 * Not allowed with a URI: regex and named locations (nginx refuses them too).
 *
 * The request's head: `METHOD URI HTTP/1.1`, then the headers set here (nginx's
 * proxy_set_header, with these defaults, which nginx lacks: Host $proxy_host, X-Real-IP,
 * X-Forwarded-For appended, X-Forwarded-Proto, X-Forwarded-Host; in a file with nginx's
 * `http { }`, Host alone, as nginx's), then the client's fields
 * but those the set list names, Host, the hop-by-hop ones (Connection and the fields it
 * names, Keep-Alive, TE, Trailer, Transfer-Encoding, Upgrade, Proxy-*), Content-Length
 * and Expect (the body was read whole: it goes with one Content-Length; with
 * proxy_request_buffering off, the client's Content-Length, or chunked again). As nginx's, the
 * request line says HTTP/1.0 unless proxy_http_version 1.1, and `Connection: close` goes
 * unless proxy_set_header Connection says otherwise: a site keeps upstream connections with
 * `Connection ""` and passes WebSocket with `Upgrade $http_upgrade` and `Connection
 * "upgrade"`; the upstream's 101 to a client that asked for an upgrade makes a tunnel.
 *
 * The answer's head: the status line (its reason too, as nginx), the fields but the
 * hop-by-hop ones, Date and Server (lfhttpd's own unless proxy_pass_header names them),
 * nginx's X-Accel-* and those proxy_hide_header names; Location and Refresh rewritten as
 * `proxy_redirect default` does (the proxy_pass URL becomes the location's prefix), and a
 * Location that is a path made absolute as every redirect here is (absolute_redirect).
 */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "http_upstream.h"
#include "module.h"
#include "resolver.h"
#include "upstream.h"
#include "upstream_tls.h"
#include "vars.h"

#define PROXY_UPSTREAMS_MAX 64
#define PROXY_HEADERS_MAX 32
#define PROXY_NAMES_MAX 32
#define PROXY_UNSET 0xffffffffu
#define PROXY_DEFAULT_TIMEOUT_MS 60000
#define PROXY_RESOLVER_TIMEOUT_MS 30000 /* nginx's resolver_timeout */

/* The base of the module's setters: its state (upstream blocks) or a block's settings. */
enum { PROXY_STATE = 1, PROXY_BLOCK = 2 };

struct proxy_state {
    int kind; /* PROXY_STATE */
    struct upstream *ups[PROXY_UPSTREAMS_MAX];
    unsigned n_ups;
    struct upstream *implicit[MODULE_MOUNTS_MAX]; /* proxy_pass HOST's, owned by blocks */
    unsigned n_implicit;
    struct module_init *mi;
};

/* A header the request gets: a default's value is made here, a configured one expanded. */
enum proxy_default { DEF_NONE = 0, DEF_HOST, DEF_REAL_IP, DEF_FORWARDED_FOR, DEF_PROTO,
                     DEF_FORWARDED_HOST, DEF_CONNECTION };
#define PROXY_DEFAULTS 6

struct proxy_header {
    char name[64];
    size_t name_len;
    enum proxy_default def;
    struct vars_value *value; /* NULL for a default; an empty value sends nothing */
    bool empty;               /* the value is "": the field is not sent at all */
};

struct proxy_conf {
    int kind; /* PROXY_BLOCK */
    struct proxy_params params;

    /* proxy_pass (this location's only) */
    const char *pass_line_text;
    unsigned pass_line;
    struct vars_value *pass_vars; /* owned: the URL, when it has variables */
    struct proxy_state *st;       /* the upstream blocks a variable's host may name */
    /* resolver: this block's own (owned) or the enclosing one's */
    struct resolver *resolver;
    bool resolver_owned;
    unsigned resolver_timeout_ms;
    struct upstream *implicit; /* owned: a HOST[:PORT] */
    char proxy_host[UPSTREAM_NAME_MAX + 80];
    size_t proxy_host_len;
    char proxy_port[8]; /* $proxy_port: the URL's port, 80 when it names none */
    char uri[1024];
    size_t uri_len;
    bool has_uri;
    char prefix[256]; /* the location's prefix, replaced by uri */
    size_t prefix_len;
    char pass_url[1400]; /* "http://NAME" + uri: what proxy_redirect default replaces */
    size_t pass_url_len;

    /* Inherited as nginx does: the lists as a whole, when a block has none of its own. */
    struct proxy_header *headers; /* configured ones, in order */
    unsigned n_headers;
    bool headers_owned;
    char (*hide)[64];
    unsigned n_hide;
    char (*pass)[64];
    unsigned n_pass;
    bool hide_owned, pass_owned; /* set in this block (each inherited on its own) */
    unsigned connect_ms, send_ms, read_ms;
    unsigned next_upstream; /* PROXY_UNSET or PROXY_NEXT_* */
    unsigned tries;
    int redirect; /* -1 unset, 0 off, 1 default */
    int http_minor; /* proxy_http_version: -1 unset, 0 (1.0, nginx's default) or 1 */
    int intercept;  /* proxy_intercept_errors: -1 unset, 0 off, 1 on */
    /* proxy_buffering and its buffers: -1 / PROXY_UNSET / 0 unset (inherited, each on its
     * own); temp_path: NULL unset */
    int buffering;
    int request_buffering; /* proxy_request_buffering: -1 unset, 0 off, 1 on */
    unsigned buffers_n;
    uint64_t buffers_size, buffer_size, busy_size, max_temp, temp_write;
    bool max_temp_set, buffer_size_set, busy_size_set, temp_write_set;
    const char *temp_path;
    /* proxy_ssl_*: -1 / NULL / PROXY_UNSET unset (inherited, each on its own) */
    bool https;                 /* proxy_pass https:// */
    int ssl_server_name, ssl_verify, ssl_session_reuse;
    unsigned ssl_verify_depth;
    const struct conf_node *ssl_protocols;
    const char *ssl_ciphers, *ssl_trusted, *ssl_certificate, *ssl_certificate_key;
    const char *ssl_password_file, *ssl_crl;
    const char *ssl_commands[16][2]; /* proxy_ssl_conf_command: NAME, VALUE (as o.commands) */
    unsigned n_ssl_commands;
    struct vars_value *ssl_name; /* owned by the block that set it */
    bool ssl_name_owned;
    void *tls_ctx;               /* owned: made once the block is read */
    /* What a request gets, made once the block is read: the defaults, then the configured
     * ones (replacing a default of the same name). */
    struct proxy_header *effective[PROXY_HEADERS_MAX + PROXY_DEFAULTS];
    unsigned n_effective;
    struct proxy_header defaults[PROXY_DEFAULTS];
};

/* --- setters ------------------------------------------------------------------------------ */

static int set_upstream(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    (void)msg;
    (void)len;
    struct proxy_state *st = base;
    if (st->kind != PROXY_STATE)
        return 0; /* a block's reading passes over the top level's upstream blocks */
    struct module_init *mi = ctx;
    if (st->n_ups == PROXY_UPSTREAMS_MAX)
        return module_error(mi, n, "too many upstream blocks (%d)", PROXY_UPSTREAMS_MAX);
    for (unsigned i = 0; i < st->n_ups; i++)
        if (n->n_args == 1 && strcmp(st->ups[i]->name, n->args[0]) == 0)
            return module_error(mi, n, "duplicate upstream \"%s\" (line %u)", n->args[0],
                                st->ups[i]->line);
    struct upstream *u = malloc(sizeof(*u));
    if (!u)
        return module_error(mi, n, "out of memory");
    struct conf_reader r = {
        .file = mi->cfg->file,
        .owner = "proxy",
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
    struct proxy_conf *c = base;
    const char *url = n->args[0];
    if (strchr(url, '$')) {
        char why[256];
        if (vars_compile(url, VARS_RAW, &c->pass_vars, why, sizeof(why)) < 0)
            return snprintf(msg, len, "%s", why), -1;
        if (vars_is_constant(c->pass_vars)) { /* ("$" escaped only: a URL as any other) */
            vars_free(c->pass_vars);
            c->pass_vars = NULL;
        }
    }
    bool https = strncasecmp(url, "https://", 8) == 0;
    if (c->pass_vars && https)
        return snprintf(msg, len, "\"%s\": https:// with variables is not supported (an "
                        "https:// upstream is named as it is, or by an upstream block)", url), -1;
    if (!c->pass_vars && strncasecmp(url, "http://", 7) != 0 && !https)
        return snprintf(msg, len, "invalid URL prefix in \"%s\" (http:// or https://)",
                        url), -1;
    c->pass_line_text = url;
    c->pass_line = n->line;
    c->https = https;
    return 0;
}

/* proxy_ssl_server_name, proxy_ssl_verify, proxy_ssl_session_reuse: on|off. */
static int set_ssl_flag(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    (void)ctx;
    struct proxy_conf *c = base;
    static const struct conf_name words[] = {{"off", 0}, {"on", 1}, {NULL, 0}};
    int *to = strcmp(n->name, "proxy_ssl_server_name") == 0 ? &c->ssl_server_name
              : strcmp(n->name, "proxy_ssl_verify") == 0    ? &c->ssl_verify
                                                             : &c->ssl_session_reuse;
    if (conf_name_value(words, n->args[0], to) < 0)
        return snprintf(msg, len, "invalid value \"%s\" (on or off)", n->args[0]), -1;
    return 0;
}

/* proxy_ssl_trusted_certificate, _certificate, _certificate_key, _ciphers: kept as
 * written (the context is made once the block is read). */
static int set_ssl_word(void *base, const struct conf_node *n, void *ctx, char *msg,
                        size_t len)
{
    (void)ctx;
    (void)msg;
    (void)len;
    struct proxy_conf *c = base;
    const char **to = strcmp(n->name, "proxy_ssl_trusted_certificate") == 0 ? &c->ssl_trusted
                      : strcmp(n->name, "proxy_ssl_certificate") == 0 ? &c->ssl_certificate
                      : strcmp(n->name, "proxy_ssl_certificate_key") == 0
                          ? &c->ssl_certificate_key
                      : strcmp(n->name, "proxy_ssl_password_file") == 0 ? &c->ssl_password_file
                      : strcmp(n->name, "proxy_ssl_crl") == 0            ? &c->ssl_crl
                                                                         : &c->ssl_ciphers;
    *to = n->args[0];
    return 0;
}

static int set_ssl_protocols(void *base, const struct conf_node *n, void *ctx, char *msg,
                             size_t len)
{
    (void)ctx;
    struct proxy_conf *c = base;
    static const char *const known[] = {"SSLv2", "SSLv3", "TLSv1", "TLSv1.1", "TLSv1.2",
                                        "TLSv1.3"};
    for (unsigned i = 0; i < n->n_args; i++) {
        unsigned k = 0;
        while (k < sizeof known / sizeof known[0] && strcmp(known[k], n->args[i]) != 0)
            k++;
        if (k == sizeof known / sizeof known[0])
            return snprintf(msg, len, "invalid value \"%s\"", n->args[i]), -1;
    }
    c->ssl_protocols = n;
    return 0;
}

static int set_ssl_command(void *base, const struct conf_node *n, void *ctx, char *msg,
                           size_t len)
{
    (void)ctx;
    struct proxy_conf *c = base;
    if (c->n_ssl_commands == sizeof c->ssl_commands / sizeof c->ssl_commands[0])
        return snprintf(msg, len, "too many (%zu at most)",
                        sizeof c->ssl_commands / sizeof c->ssl_commands[0]), -1;
    c->ssl_commands[c->n_ssl_commands][0] = n->args[0];
    c->ssl_commands[c->n_ssl_commands++][1] = n->args[1];
    return 0;
}

static int set_ssl_name(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    (void)ctx;
    struct proxy_conf *c = base;
    char why[256];
    if (vars_compile(n->args[0], VARS_HEADER, &c->ssl_name, why, sizeof(why)) < 0)
        return snprintf(msg, len, "%s", why), -1;
    c->ssl_name_owned = true;
    return 0;
}

/* resolver ADDRESS ... [valid=TIME] [ipv4=on|off] [ipv6=on|off] [status_zone=NAME] */
static int set_resolver(void *base, const struct conf_node *n, void *ctx, char *msg,
                        size_t len)
{
    (void)ctx;
    struct proxy_conf *c = base;
    struct resolver *r = resolver_read(n, msg, len);
    if (!r)
        return -1;
    c->resolver = r;
    c->resolver_owned = true;
    return 0;
}

static bool token_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

static bool field_name_ok(const char *name)
{
    if (!*name || strlen(name) >= 64)
        return false;
    for (const char *p = name; *p; p++)
        if (!token_char(*p))
            return false;
    return true;
}

static int set_header(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    (void)ctx;
    struct proxy_conf *c = base;
    if (!field_name_ok(n->args[0]))
        return snprintf(msg, len, "\"%s\" is not a field name", n->args[0]), -1;
    if (c->n_headers == PROXY_HEADERS_MAX)
        return snprintf(msg, len, "too many (%d at most)", PROXY_HEADERS_MAX), -1;
    if (!c->headers_owned) {
        c->headers = calloc(PROXY_HEADERS_MAX, sizeof(*c->headers));
        if (!c->headers)
            return snprintf(msg, len, "out of memory"), -1;
        c->headers_owned = true;
        c->n_headers = 0;
    }
    struct proxy_header *h = &c->headers[c->n_headers];
    memset(h, 0, sizeof(*h));
    h->name_len = strlen(n->args[0]);
    memcpy(h->name, n->args[0], h->name_len + 1);
    h->empty = n->args[1][0] == '\0';
    char why[256];
    if (!h->empty && vars_compile(n->args[1], VARS_HEADER, &h->value, why, sizeof(why)) < 0)
        return snprintf(msg, len, "%s", why), -1;
    c->n_headers++;
    return 0;
}

static int add_name(char (**list)[64], unsigned *n, bool *owned, const char *name, char *msg,
                    size_t len)
{
    if (!field_name_ok(name))
        return snprintf(msg, len, "\"%s\" is not a field name", name), -1;
    if (*n == PROXY_NAMES_MAX)
        return snprintf(msg, len, "too many (%d at most)", PROXY_NAMES_MAX), -1;
    if (!*list) {
        *list = calloc(PROXY_NAMES_MAX, 64);
        if (!*list)
            return snprintf(msg, len, "out of memory"), -1;
        *owned = true;
    }
    snprintf((*list)[(*n)++], 64, "%s", name);
    return 0;
}

static int set_hide(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    (void)ctx;
    struct proxy_conf *c = base;
    return add_name(&c->hide, &c->n_hide, &c->hide_owned, n->args[0], msg, len);
}

static int set_pass_header(void *base, const struct conf_node *n, void *ctx, char *msg,
                           size_t len)
{
    (void)ctx;
    struct proxy_conf *c = base;
    return add_name(&c->pass, &c->n_pass, &c->pass_owned, n->args[0], msg, len);
}

static int set_next(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    (void)ctx;
    struct proxy_conf *c = base;
    static const struct conf_name words[] = {
        {"error", PROXY_NEXT_ERROR},       {"timeout", PROXY_NEXT_TIMEOUT},
        {"invalid_header", PROXY_NEXT_INVALID}, {"http_502", PROXY_NEXT_502},
        {"http_503", PROXY_NEXT_503},      {"http_504", PROXY_NEXT_504},
        {"http_500", PROXY_NEXT_500},      {"http_403", PROXY_NEXT_403},
        {"http_404", PROXY_NEXT_404},      {"http_429", PROXY_NEXT_429},
        {"non_idempotent", PROXY_NEXT_NON_IDEMPOTENT}, {"off", 0}, {NULL, 0},
    };
    unsigned mask = 0;
    for (unsigned i = 0; i < n->n_args; i++) {
        int v;
        if (conf_name_value(words, n->args[i], &v) < 0)
            return snprintf(msg, len, "invalid value \"%s\" (error, timeout, invalid_header, "
                            "http_500, http_502, http_503, http_504, http_403, http_404, "
                            "http_429, non_idempotent, off)", n->args[i]), -1;
        if (v == 0 && n->n_args > 1)
            return snprintf(msg, len, "\"off\" stands alone"), -1;
        mask |= (unsigned)v;
    }
    c->next_upstream = mask;
    return 0;
}

static int set_redirect(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    (void)ctx;
    struct proxy_conf *c = base;
    if (strcmp(n->args[0], "default") == 0)
        c->redirect = 1;
    else if (strcmp(n->args[0], "off") == 0)
        c->redirect = 0;
    else
        return snprintf(msg, len, "only \"default\" and \"off\" are supported"), -1;
    return 0;
}

static int set_http_version(void *base, const struct conf_node *n, void *ctx, char *msg,
                            size_t len)
{
    (void)ctx;
    struct proxy_conf *c = base;
    static const struct conf_name words[] = {{"1.0", 0}, {"1.1", 1}, {NULL, 0}};
    if (conf_name_value(words, n->args[0], &c->http_minor) < 0)
        return snprintf(msg, len, "invalid value \"%s\" (1.0 or 1.1)", n->args[0]), -1;
    return 0;
}

static int set_intercept(void *base, const struct conf_node *n, void *ctx, char *msg,
                         size_t len)
{
    (void)ctx;
    struct proxy_conf *c = base;
    static const struct conf_name words[] = {{"off", 0}, {"on", 1}, {NULL, 0}};
    if (conf_name_value(words, n->args[0], &c->intercept) < 0)
        return snprintf(msg, len, "invalid value \"%s\" (on or off)", n->args[0]), -1;
    return 0;
}

static int set_on_off(int *to, const struct conf_node *n, char *msg, size_t len)
{
    static const struct conf_name words[] = {{"off", 0}, {"on", 1}, {NULL, 0}};
    if (conf_name_value(words, n->args[0], to) < 0)
        return snprintf(msg, len, "invalid value \"%s\" (on or off)", n->args[0]), -1;
    return 0;
}

static int set_buffering(void *base, const struct conf_node *n, void *ctx, char *msg,
                         size_t len)
{
    (void)ctx;
    return set_on_off(&((struct proxy_conf *)base)->buffering, n, msg, len);
}

static int set_request_buffering(void *base, const struct conf_node *n, void *ctx, char *msg,
                                 size_t len)
{
    (void)ctx;
    return set_on_off(&((struct proxy_conf *)base)->request_buffering, n, msg, len);
}

/* proxy_buffers NUMBER SIZE: as nginx, at least 2 buffers. */
static int set_buffers(void *base, const struct conf_node *n, void *ctx, char *msg,
                       size_t len)
{
    (void)ctx;
    struct proxy_conf *c = base;
    char *end;
    unsigned long num = strtoul(n->args[0], &end, 10);
    uint64_t size;
    if (*n->args[0] < '0' || *n->args[0] > '9' || *end || num > 65536)
        return snprintf(msg, len, "invalid value \"%s\" (a number of buffers)", n->args[0]), -1;
    if (num < 2)
        return snprintf(msg, len, "there must be at least 2 \"proxy_buffers\""), -1;
    if (config_parse_size(n->args[1], &size) < 0 || size == 0 || size > (64u << 20))
        return snprintf(msg, len, "invalid value \"%s\" (a size, 64m at most)", n->args[1]), -1;
    if ((uint64_t)num * size > (1ull << 30))
        return snprintf(msg, len, "proxy_buffers: more than 1g in all"), -1;
    c->buffers_n = (unsigned)num;
    c->buffers_size = size;
    return 0;
}

/* proxy_buffer_size, proxy_busy_buffers_size, proxy_max_temp_file_size,
 * proxy_temp_file_write_size: a size each. */
static int set_buffer_size(void *base, const struct conf_node *n, void *ctx, char *msg,
                           size_t len)
{
    (void)ctx;
    struct proxy_conf *c = base;
    uint64_t size;
    if (config_parse_size(n->args[0], &size) < 0 || size > (1ull << 40))
        return snprintf(msg, len, "invalid value \"%s\" (a size)", n->args[0]), -1;
    if (strcmp(n->name, "proxy_max_temp_file_size") == 0) {
        c->max_temp = size;
        c->max_temp_set = true;
    } else if (size == 0) {
        return snprintf(msg, len, "invalid value \"%s\" (a size above 0)", n->args[0]), -1;
    } else if (strcmp(n->name, "proxy_buffer_size") == 0) {
        c->buffer_size = size;
        c->buffer_size_set = true;
    } else if (strcmp(n->name, "proxy_busy_buffers_size") == 0) {
        c->busy_size = size;
        c->busy_size_set = true;
    } else {
        c->temp_write = size;
        c->temp_write_set = true;
    }
    return 0;
}

/* proxy_temp_path DIR [LEVEL...]: made when missing, as nginx makes its temporary paths
 * (module_temp_path_read). */
static int set_temp_path(void *base, const struct conf_node *n, void *ctx, char *msg,
                         size_t len)
{
    (void)ctx;
    struct proxy_conf *c = base;
    if (module_temp_path_read(n, msg, len) < 0)
        return -1;
    c->temp_path = n->args[0];
    return 0;
}

/* nginx's directives whose default is the only behaviour there is: that value is
 * accepted (it is what happens), any other refused. */
static int set_default_only(void *base, const struct conf_node *n, void *ctx, char *msg,
                            size_t len)
{
    (void)base;
    (void)ctx;
    const char *only = strcmp(n->name, "proxy_store") == 0 ? "off" : "on";
    if (strcmp(n->args[0], only) == 0)
        return 0;
    return snprintf(msg, len, "only \"%s\" (%s)", only,
                    strcmp(only, "off") == 0 ? "answers are never stored to files here"
                                             : "the client's header fields always go "
                                               "upstream here"), -1;
}

#define LOC CONF_TOP | CONF_SERVER | CONF_LOCATION
static const struct conf_directive proxy_directives[] = {
    {"upstream", CONF_BLOCK, CONF_TOP, CONF_REPEATS, .min_args = 1, .max_args = 1,
     .set = set_upstream, .usage = "NAME { server ADDRESS [PARAMETERS]; ... }",
     .doc = "A named set of servers: `server ADDRESS [weight=N] [max_fails=N] "
        "[fail_timeout=TIME] [max_conns=N] [backup] [down];` (IPv4, [IPv6], a host name "
        "resolved at load, or unix:PATH; port 80 by default; `resolve`, `service=`, "
        "`slow_start=`, `route=` and `drain` are refused, as open-source nginx 1.22 refuses "
        "them), `keepalive N;` (idle connections kept for the next requests: N times the "
        "thread groups in all, as nginx keeps N per worker process, but shared by the "
        "groups, so that a busier group keeps what a quieter one leaves room for; when the "
        "location sends HTTP/1.1 and `proxy_set_header Connection \"\"`), `keepalive_requests N;` (1000), "
        "`keepalive_timeout TIME;` (60s: an idle connection is closed after it), `keepalive_time TIME;` (1h), `zone NAME "
        "[SIZE];` (accepted: the figures are shared already), and one method: "
        "`least_conn;`, `ip_hash;`, `hash KEY [consistent];`, `random [two [least_conn]];` "
        "(default: smooth weighted round-robin). `ip_hash` and `hash` choose the server "
        "nginx's would for the same address or key and servers, and take no backup. A "
        "server that failed "
        "`max_fails` times (default 1) within `fail_timeout` (10s) is out for "
        "`fail_timeout`; a set of one server never is, nor one with `fail_timeout=0` (nginx "
        "keeps that one out for under a second); backups serve when every other server "
        "is out; all out: 502 at once."},
    {"proxy_pass", CONF_LIST, CONF_LOCATION, .min_args = 1, .max_args = 1, .set = set_pass,
     .usage = "http[s]://UPSTREAM[/URI] | http[s]://unix:PATH[:URI]",
     .doc = "Answers the location from an upstream: NAME an `upstream`, HOST[:PORT], or "
        "`unix:PATH` a socket (its URI after a colon; `Host: localhost`, as nginx's). Without a "
        "URI the target goes as the client sent it; with one, the location's prefix is "
        "replaced by it. With variables (`proxy_pass http://$backend:8080$request_uri;`, "
        "`set $up http://app:8000; proxy_pass $up;`) the URL is made per request: a host "
        "that names an `upstream` uses it, an IP address is used as it is, another name is "
        "resolved by `resolver` (none: 502, \"no resolver defined to resolve HOST\"); a URI "
        "given then replaces the request's whole, as nginx's. `https://`: over TLS (port 443 "
        "by default; see `proxy_ssl_*`), named without variables. HTTP/1.1 only."},
    {"resolver", CONF_LIST, LOC, .min_args = 1, .max_args = 20, .set = set_resolver,
     .usage = "ADDRESS[:PORT] ... [valid=TIME] [ipv4=on|off] [ipv6=on|off] [status_zone=NAME]",
     .doc = "The DNS servers that resolve the names of `proxy_pass` with variables (and of "
        "`fastcgi_pass`, `uwsgi_pass`, `scgi_pass`), at run "
        "time, without a thread waiting (c-ares, driven by the thread group's handle set); "
        "answers kept for their TTL, or for `valid=`; requests for a name being asked wait "
        "on the same query. `ipv6=off` asks for IPv4 addresses only, `ipv4=off` IPv6; "
        "`status_zone` is accepted. A name that does not exist is kept 30s (or `valid=`); a "
        "timeout or a server failure is not kept."},
    {"resolver_timeout", CONF_DURATION, LOC, .min = 1, .max = 3600000,
     CONF_AT(struct proxy_conf, resolver_timeout_ms),
     .dflt = "30s",
     .doc = "No answer from the `resolver` within it: 502, logged \"HOST could not be resolved "
        "(110: Operation timed out)\", as nginx's."},
    {"proxy_ssl_server_name", CONF_LIST, LOC, .min_args = 1, .max_args = 1,
     .set = set_ssl_flag, .usage = "on|off", .dflt = "off",
     .doc = "`on`: the TLS handshake with an `https://` upstream names `proxy_ssl_name` "
        "(SNI; never an IP address, as RFC 6066 says)."},
    {"proxy_ssl_name", CONF_LIST, LOC, .min_args = 1, .max_args = 1, .set = set_ssl_name,
     .usage = "NAME", .dflt = "$proxy_host",
     .doc = "The upstream's name for SNI and for checking its certificate (variables "
        "allowed; a port is left out)."},
    {"proxy_ssl_verify", CONF_LIST, LOC, .min_args = 1, .max_args = 1, .set = set_ssl_flag,
     .usage = "on|off", .dflt = "off",
     .doc = "`on`: the upstream's certificate must verify against "
        "`proxy_ssl_trusted_certificate` and carry `proxy_ssl_name`, else the attempt fails "
        "(502, or the next server with `proxy_next_upstream error`), the reason in the error "
        "log as nginx says it."},
    {"proxy_ssl_trusted_certificate", CONF_PATH, LOC, .set = set_ssl_word, .usage = "FILE",
     .doc = "The CA certificates (PEM) an upstream's certificate is verified against."},
    {"proxy_ssl_crl", CONF_PATH, LOC, .set = set_ssl_word, .usage = "FILE",
     .doc = "Revoked certificates (PEM CRLs): with `proxy_ssl_verify on`, each certificate of "
        "the upstream's chain is checked against them."},
    {"proxy_ssl_verify_depth", CONF_COUNT, LOC, .max = 100,
     CONF_AT(struct proxy_conf, ssl_verify_depth), .dflt = "1",
     .doc = "How deep the upstream's chain may be, OpenSSL's count as nginx's: 1 takes its "
        "certificate, one CA above it and the trusted root; 0 a certificate the root "
        "signed itself."},
    {"proxy_ssl_protocols", CONF_LIST, LOC, .min_args = 1, .max_args = 6,
     .set = set_ssl_protocols, .usage = "PROTOCOL...", .dflt = "TLSv1.2 TLSv1.3",
     .doc = "The TLS versions offered to an upstream: of those named, TLSv1.2 and TLSv1.3 "
        "(older ones are accepted and not offered: OpenSSL's security level refuses them)."},
    {"proxy_ssl_ciphers", CONF_STRING, LOC, .set = set_ssl_word, .usage = "CIPHERS",
     .dflt = "DEFAULT",
     .doc = "The TLS 1.2 ciphers offered to an upstream, in OpenSSL's format."},
    {"proxy_ssl_session_reuse", CONF_LIST, LOC, .min_args = 1, .max_args = 1,
     .set = set_ssl_flag, .usage = "on|off", .dflt = "on",
     .doc = "`on`: the last TLS session each upstream server gave is offered on the next "
        "new connection to it (an abbreviated handshake)."},
    {"proxy_ssl_certificate", CONF_PATH, LOC, .set = set_ssl_word, .usage = "FILE",
     .doc = "A client certificate (PEM, with its chain) shown to an upstream that asks for "
        "one; `\"\"`: none (an outer block's is not inherited)."},
    {"proxy_ssl_certificate_key", CONF_PATH, LOC, .set = set_ssl_word, .usage = "FILE",
     .doc = "The key of `proxy_ssl_certificate` (default: in the same file)."},
    {"proxy_ssl_conf_command", CONF_LIST, LOC, CONF_REPEATS, .min_args = 2, .max_args = 2,
     .set = set_ssl_command, .usage = "NAME VALUE",
     .doc = "An OpenSSL setting of the TLS to upstreams by its name (`SSL_CONF_cmd`, as "
        "`openssl.cnf` writes them: `Ciphersuites`, `Options`, `Groups`...), applied after "
        "the other `proxy_ssl_*`; a block's list replaces the outer one's."},
    {"proxy_ssl_password_file", CONF_PATH, LOC, .set = set_ssl_word, .usage = "FILE",
     .doc = "The passphrases of `proxy_ssl_certificate_key`, a line each, tried in turn."},
    {"proxy_set_header", CONF_LIST, LOC, CONF_REPEATS, .min_args = 2, .max_args = 2,
     .set = set_header, .usage = "NAME VALUE",
     .doc = "A field of the request sent upstream (variables allowed; an empty value removes "
        "it), replacing the default of that name: `Host $proxy_host`, `X-Real-IP "
        "$remote_addr`, `X-Forwarded-For` (appended), `X-Forwarded-Proto $scheme`, "
        "`X-Forwarded-Host` (the client's Host; in a file with nginx's `http { }` these four "
        "go only where it sets them, as nginx), `Connection close` (nginx's: set "
        "`Connection \"\"` with `keepalive` and HTTP/1.1, and `Upgrade $http_upgrade` with "
        "`Connection "
        "\"upgrade\"` for WebSocket). Host is never sent empty; the client's own Connection, "
        "Upgrade, Keep-Alive, TE and Expect never go."},
    {"proxy_hide_header", CONF_LIST, LOC, CONF_REPEATS, .min_args = 1, .max_args = 1,
     .set = set_hide, .usage = "NAME",
     .doc = "A field of the upstream's answer not passed to the client."},
    {"proxy_pass_header", CONF_LIST, LOC, CONF_REPEATS, .min_args = 1, .max_args = 1,
     .set = set_pass_header, .usage = "NAME",
     .doc = "Passes the upstream's `Date` or `Server`, which are otherwise lfhttpd's own."},
    {"proxy_connect_timeout", CONF_DURATION, LOC, .min = 1, .max = 3600000,
     CONF_AT(struct proxy_conf, connect_ms),
     .dflt = "60s",
     .doc = "No connection to the upstream within it: 504 (or the next server, with "
        "`proxy_next_upstream timeout`)."},
    {"proxy_send_timeout", CONF_DURATION, LOC, .min = 1, .max = 86400000,
     CONF_AT(struct proxy_conf, send_ms),
     .dflt = "60s",
     .doc = "The longest wait between two writes of the request to the upstream; past it 504 "
        "before the answer began."},
    {"proxy_read_timeout", CONF_DURATION, LOC, .min = 1, .max = 86400000,
     CONF_AT(struct proxy_conf, read_ms),
     .dflt = "60s",
     .doc = "The longest wait between two reads of the answer: no head within it is 504, a stall "
        "after the head cuts the client's connection. A WebSocket tunnel is closed after it "
        "without a byte either way."},
    {"proxy_next_upstream", CONF_LIST, LOC, .min_args = 1, .max_args = 11, .set = set_next,
     .usage = "error | timeout | invalid_header | http_500 | http_502 | http_503 | http_504 | "
              "http_403 | http_404 | http_429 | non_idempotent | off ...",
     .dflt = "error timeout",
     .doc = "When a failed attempt goes to the next server: `error`, `timeout`, `invalid_header` "
        "(a head over 16 KiB, a status line that is not HTTP), `http_500`, `http_502`, "
        "`http_503`, `http_504`, `http_403`, `http_404`, `http_429`, as in nginx; a request "
        "that is not idempotent (POST, LOCK, PATCH) and was sent goes again only with "
        "`non_idempotent`; `off`: never."},
    {"proxy_next_upstream_tries", CONF_COUNT, LOC, .max = 64,
     CONF_AT(struct proxy_conf, tries),
     .dflt = "0",
     .doc = "How many servers a request may try in all (0: no limit)."},
    {"proxy_redirect", CONF_LIST, LOC, .min_args = 1, .max_args = 1, .set = set_redirect,
     .usage = "default|off",
     .dflt = "default",
     .doc = "`default`: `Location` and `Refresh` naming the `proxy_pass` URL are rewritten to "
        "the location's prefix; `off`: passed as they are."},
    {"proxy_http_version", CONF_LIST, LOC, .min_args = 1, .max_args = 1,
     .set = set_http_version, .usage = "1.0|1.1", .dflt = "1.0",
     .doc = "The version of the request line sent upstream, as nginx's: 1.1 for `keepalive` "
        "connections (with `proxy_set_header Connection \"\"`) and for WebSocket; a 1.0 "
        "request's connection is not kept unless its Connection says keep-alive."},
    {"proxy_intercept_errors", CONF_LIST, LOC, .min_args = 1, .max_args = 1,
     .set = set_intercept, .usage = "on|off", .dflt = "off",
     .doc = "`on`: an upstream's answer of 300 or more for which the block has an "
        "`error_page` is answered by that page instead (its body is not read, its "
        "connection closed; a 401 keeps the upstream's `WWW-Authenticate`), as nginx's; "
        "answers without a page pass as they are. The proxy's own 502 and 504 get their "
        "`error_page` either way."},
    {"proxy_buffering", CONF_LIST, LOC, .min_args = 1, .max_args = 1, .set = set_buffering,
     .usage = "on|off", .dflt = "(on in a file with `http { }`, as nginx; off in lfhttpd's own)",
     .doc = "`on`: the answer is read as fast as the upstream sends it, into `proxy_buffers` "
        "and past them a temporary file (`proxy_temp_path`, at most "
        "`proxy_max_temp_file_size`), and the upstream connection is let go of (kept, "
        "with `keepalive`) once the whole answer is read, while a slow client is still "
        "served from them, as nginx's. `off`: the answer streams through 16 KiB, and a "
        "client that does not read holds the upstream. An upstream's `X-Accel-Buffering: "
        "yes|no` turns it on or off for its answer. nginx's default is `on`; in lfhttpd's "
        "own files (without `http { }`) it is `off`."},
    {"proxy_buffers", CONF_LIST, LOC, .min_args = 2, .max_args = 2, .set = set_buffers,
     .usage = "NUMBER SIZE", .dflt = "8 4k",
     .doc = "The memory an answer is read ahead into, per connection, with `proxy_buffering "
        "on`: NUMBER times SIZE bytes, taken only when the client is slower than the "
        "upstream and let go of when the answer ends."},
    {"proxy_buffer_size", CONF_LIST, LOC, .min_args = 1, .max_args = 1, .set = set_buffer_size,
     .usage = "SIZE", .dflt = "4k",
     .doc = "Accepted for nginx's configurations: the upstream's head is read into a buffer "
        "of its own of 16 KiB whatever this says (a larger head is a 502)."},
    {"proxy_busy_buffers_size", CONF_LIST, LOC, .min_args = 1, .max_args = 1,
     .set = set_buffer_size, .usage = "SIZE", .dflt = "8k",
     .doc = "Accepted for nginx's configurations: what the client has not taken is parked on "
        "its connection (bounded by `max_parked_size`), and the rest of `proxy_buffers` "
        "goes on reading."},
    {"proxy_max_temp_file_size", CONF_LIST, LOC, .min_args = 1, .max_args = 1,
     .set = set_buffer_size, .usage = "SIZE", .dflt = "1024m",
     .doc = "With `proxy_buffering on`, the most of an answer written to its temporary "
        "file; past it, the upstream is read only as the client takes the answer. `0`: no "
        "file, only `proxy_buffers`."},
    {"proxy_temp_file_write_size", CONF_LIST, LOC, .min_args = 1, .max_args = 1,
     .set = set_buffer_size, .usage = "SIZE", .dflt = "8k",
     .doc = "Accepted for nginx's configurations: the temporary file is written a read at a "
        "time (16 KiB at most)."},
    {"proxy_temp_path", CONF_LIST, LOC, .min_args = 1, .max_args = 4, .set = set_temp_path,
     .usage = "DIR [LEVEL...]", .dflt = "(the system's temporary directory, /tmp)",
     .doc = "Where the temporary files of `proxy_buffering on` are made: without a name "
        "(`O_TMPFILE`, or unlinked at once where the file system lacks it), so that none "
        "is ever left behind; the directory is made at load when missing (mode 0700, as "
        "nginx makes it; its parent must exist). Started by root with `user`, the server "
        "gives the directory to that user, as nginx does, unless all may write in it "
        "(`/tmp`), which is never given away. LEVELs are accepted and mean nothing."},
    {"proxy_pass_request_headers", CONF_LIST, LOC, .min_args = 1, .max_args = 1,
     .set = set_default_only, .usage = "on", .dflt = "on",
     .doc = "The client's header fields go upstream (nginx's default); `off` is refused."},
    {"proxy_store", CONF_LIST, LOC, .min_args = 1, .max_args = 1, .set = set_default_only,
     .usage = "off", .dflt = "off",
     .doc = "Answers are never saved to files (nginx's default); any other value is "
        "refused."},
    {"proxy_request_buffering", CONF_LIST, LOC, .min_args = 1, .max_args = 1,
     .set = set_request_buffering, .usage = "on|off", .dflt = "on",
     .doc = "`on`: a request's body is read whole first, bounded by `max_body_size` and "
        "`max_body_memory`, and sent with one `Content-Length`. `off`: the upstream is "
        "connected to once the head is read, and the body relayed as it arrives through "
        "a fixed 16 KiB (a client faster than the upstream waits for it): a "
        "`Content-Length` one as it is, a chunked one chunked again with "
        "`proxy_http_version 1.1` (read whole first with 1.0, as nginx). As nginx's, "
        "`$request_body` is then empty, a request whose body began to go is never sent "
        "to the next server, and an answer that comes before the body's end ends the "
        "client's connection after it."},
    {.name = NULL},
};

/* --- per block ---------------------------------------------------------------------------- */

static const struct proxy_ops proxy_ops;
static void proxy_block_free(void *state, void *settings);

static struct upstream *find_upstream(struct proxy_state *st, const char *name, size_t len)
{
    for (unsigned i = 0; i < st->n_ups; i++)
        if (strlen(st->ups[i]->name) == len && strncasecmp(st->ups[i]->name, name, len) == 0)
            return st->ups[i];
    return NULL;
}

/* proxy_pass's URL: its upstream (a block, or a host made one), its URI part. */
static int resolve_pass(struct proxy_state *st, struct proxy_conf *c, const struct module_block *b,
                        const struct conf_node *where)
{
    if (c->pass_vars) { /* made per request (proxy_target); no proxy_redirect default */
        c->st = st;
        c->params.dynamic = true;
        return 0;
    }
    const char *url = c->pass_line_text + (c->https ? 8 : 7);
    /* http://unix:PATH[:URI] (nginx's form): the path ends at the next ':' */
    bool on_unix = strncmp(url, "unix:", 5) == 0;
    const char *end_of_path = on_unix ? strchr(url + 5, ':') : NULL;
    const char *slash = on_unix ? (end_of_path && end_of_path[1] ? end_of_path + 1 : NULL)
                                : strchr(url, '/');
    size_t host_len = on_unix ? (end_of_path ? (size_t)(end_of_path - url) : strlen(url))
                      : slash ? (size_t)(slash - url)
                              : strlen(url);
    if (on_unix && slash && *slash != '/')
        return module_error(b->mi, where, "proxy_pass: the URI after the socket's path "
                            "must start with \"/\" in \"%s\"", c->pass_line_text);
    if (host_len == 0 || host_len >= sizeof(c->proxy_host) - 1)
        return module_error(b->mi, where, "proxy_pass: no host in \"%s\"",
                            c->pass_line_text);
    if (slash) {
        c->has_uri = true;
        c->uri_len = strlen(slash);
        if (c->uri_len >= sizeof(c->uri))
            return module_error(b->mi, where, "proxy_pass: the URI is too long");
        memcpy(c->uri, slash, c->uri_len + 1);
        if (!b->prefix_location)
            return module_error(b->mi, where, "proxy_pass cannot have a URI part in a "
                                "location given by a regular expression, or inside a "
                                "named location, or inside an \"if\" or a "
                                "\"limit_except\" block");
    }
    if (b->prefix_location) {
        c->prefix_len = strlen(b->pattern);
        if (c->prefix_len >= sizeof(c->prefix))
            return module_error(b->mi, where, "the location's prefix is too long");
        memcpy(c->prefix, b->pattern, c->prefix_len + 1);
    }
    memcpy(c->proxy_host, url, host_len);
    c->proxy_host[host_len] = '\0';
    c->proxy_host_len = host_len;
    const char *colon = strrchr(c->proxy_host, ':');
    bool has_port = colon && !strchr(colon, ']');
    snprintf(c->proxy_port, sizeof(c->proxy_port), "%s",
             has_port ? colon + 1 : c->https ? "443" : "80");
    struct upstream *u = strchr(c->proxy_host, ':') ? NULL
                                                    : find_upstream(st, url, host_len);
    if (!u) {
        c->implicit = malloc(sizeof(*c->implicit));
        char msg[512];
        if (!c->implicit)
            return module_error(b->mi, where, "out of memory");
        char hostport[sizeof(c->proxy_host) + 8]; /* https's port, 443, when none is named */
        snprintf(hostport, sizeof(hostport), "%s%s", c->proxy_host,
                 c->https && !has_port && !on_unix ? ":443" : "");
        if (upstream_from_host(c->implicit, hostport, where->line, msg, sizeof(msg)) < 0) {
            free(c->implicit);
            c->implicit = NULL;
            return module_error(b->mi, where, "proxy_pass: %s", msg);
        }
        u = c->implicit;
        if (st->n_implicit < MODULE_MOUNTS_MAX)
            st->implicit[st->n_implicit++] = u;
        /* $proxy_host: HOST[:PORT], the port left out when it is 80 (nginx); a unix
         * socket's is "localhost", as nginx's */
        if (on_unix)
            c->proxy_host_len = (size_t)snprintf(c->proxy_host, sizeof(c->proxy_host),
                                                 "localhost");
        else if (!c->https && host_len > 3 && strcmp(c->proxy_host + host_len - 3, ":80") == 0)
            c->proxy_host[c->proxy_host_len -= 3] = '\0';
        else if (c->https && host_len > 4 && strcmp(c->proxy_host + host_len - 4, ":443") == 0)
            c->proxy_host[c->proxy_host_len -= 4] = '\0';
    }
    /* proxy_redirect default: nginx's `proxy_redirect URL /prefix/`, URL as written (with
     * a "/" added when it has no URI part, which "/" then replaces). */
    int n = snprintf(c->pass_url, sizeof(c->pass_url), "%s%s", c->pass_line_text,
                     c->has_uri ? "" : "/");
    c->pass_url_len = n > 0 && (size_t)n < sizeof(c->pass_url) ? (size_t)n : 0;
    c->params.upstream = u;
    return 0;
}

static void default_header(struct proxy_conf *c, unsigned i, const char *name,
                           enum proxy_default def)
{
    struct proxy_header *h = &c->defaults[i];
    memset(h, 0, sizeof(*h));
    h->name_len = strlen(name);
    memcpy(h->name, name, h->name_len + 1);
    h->def = def;
    c->effective[c->n_effective++] = h;
}

/* The headers a request gets: the defaults, each replaced by a configured one of its name,
 * then the other configured ones. In a file with nginx's `http { }`, nginx's defaults
 * alone (Host, Connection): the forwarding fields go only where the file sets them. */
static void make_effective(struct proxy_conf *c, bool nginx)
{
    c->n_effective = 0;
    default_header(c, 0, "Host", DEF_HOST);
    if (!nginx) {
        default_header(c, 1, "X-Real-IP", DEF_REAL_IP);
        default_header(c, 2, "X-Forwarded-For", DEF_FORWARDED_FOR);
        default_header(c, 3, "X-Forwarded-Proto", DEF_PROTO);
        default_header(c, 4, "X-Forwarded-Host", DEF_FORWARDED_HOST);
    }
    default_header(c, 5, "Connection", DEF_CONNECTION); /* nginx's "close" */
    for (unsigned i = 0; i < c->n_headers; i++) {
        struct proxy_header *h = &c->headers[i];
        unsigned j = 0;
        while (j < c->n_effective && strcasecmp(c->effective[j]->name, h->name) != 0)
            j++;
        if (j == c->n_effective)
            c->n_effective++;
        c->effective[j] = h;
    }
}

/* The proxy_ssl_* settings this block leaves unset: outer's, or nginx's defaults. */
static void inherit_ssl(struct proxy_conf *c, const struct proxy_conf *outer)
{
    if (c->ssl_server_name < 0)
        c->ssl_server_name = outer ? outer->ssl_server_name : 0;
    if (c->ssl_verify < 0)
        c->ssl_verify = outer ? outer->ssl_verify : 0;
    if (c->ssl_session_reuse < 0)
        c->ssl_session_reuse = outer ? outer->ssl_session_reuse : 1;
    if (c->ssl_verify_depth == PROXY_UNSET)
        c->ssl_verify_depth = outer ? outer->ssl_verify_depth : 1;
    if (!outer)
        return;
    if (!c->ssl_protocols)
        c->ssl_protocols = outer->ssl_protocols;
    if (!c->ssl_ciphers)
        c->ssl_ciphers = outer->ssl_ciphers;
    if (!c->ssl_trusted)
        c->ssl_trusted = outer->ssl_trusted;
    if (!c->ssl_certificate) {
        c->ssl_certificate = outer->ssl_certificate;
        c->ssl_certificate_key = outer->ssl_certificate_key;
    }
    if (!c->ssl_password_file)
        c->ssl_password_file = outer->ssl_password_file;
    if (!c->ssl_crl)
        c->ssl_crl = outer->ssl_crl;
    if (c->n_ssl_commands == 0) { /* the list as a whole, as nginx */
        memcpy(c->ssl_commands, outer->ssl_commands, sizeof c->ssl_commands);
        c->n_ssl_commands = outer->n_ssl_commands;
    }
    if (!c->ssl_name)
        c->ssl_name = outer->ssl_name; /* (the outer block's to free) */
}

static_assert(sizeof(((struct proxy_conf *)0)->ssl_commands) ==
                  sizeof(((struct upstream_tls_opts *)0)->commands),
              "proxy_ssl_conf_command's list is copied whole");

/* proxy_pass https://: the block's TLS client context, from its proxy_ssl_* settings. */
static int make_tls(struct proxy_conf *c, const struct module_block *b)
{
    const struct conf_node *where = b->node;
    for (const struct conf_node *n = b->first; n; n = n->next)
        if (strcmp(n->name, "proxy_pass") == 0)
            where = n;
    if (c->ssl_verify > 0 && !c->ssl_trusted)
        return module_error(b->mi, where, "no proxy_ssl_trusted_certificate for "
                            "proxy_ssl_verify");
    if (c->ssl_certificate_key && c->ssl_certificate_key[0] && !c->ssl_certificate)
        return module_error(b->mi, where, "proxy_ssl_certificate_key without "
                            "proxy_ssl_certificate");
    /* proxy_ssl_certificate "": none, whatever an outer block says (nginx's) */
    bool no_cert = c->ssl_certificate && !c->ssl_certificate[0];
    struct upstream_tls_opts o = {
        .ciphers = c->ssl_ciphers,
        .trusted = c->ssl_trusted,
        .crl = c->ssl_crl,
        .certificate = no_cert ? NULL : c->ssl_certificate,
        .certificate_key = no_cert ? NULL : c->ssl_certificate_key,
        .password_file = c->ssl_password_file,
        .verify_depth = c->ssl_verify_depth,
        .verify = c->ssl_verify > 0,
        .session_reuse = c->ssl_session_reuse > 0,
    };
    memcpy(o.commands, c->ssl_commands, sizeof o.commands);
    o.n_commands = c->n_ssl_commands;
    for (unsigned i = 0; c->ssl_protocols && i < c->ssl_protocols->n_args && i < 8; i++)
        o.protocols[o.n_protocols++] = c->ssl_protocols->args[i];
    char why[512];
    c->tls_ctx = upstream_tls_ctx_new(&o, why, sizeof(why));
    if (!c->tls_ctx)
        return module_error(b->mi, where, "proxy_pass %s: %s", c->pass_line_text, why);
    return 0;
}

static void *proxy_block(void *state, const struct module_block *b)
{
    struct proxy_state *st = state;
    const struct proxy_conf *outer = b->outer;
    struct proxy_conf *c = calloc(1, sizeof(*c));
    if (!c) {
        module_error(b->mi, b->node, "out of memory");
        return NULL;
    }
    c->kind = PROXY_BLOCK;
    c->connect_ms = c->send_ms = c->read_ms = PROXY_UNSET;
    c->next_upstream = c->tries = PROXY_UNSET;
    c->redirect = -1;
    c->http_minor = -1;
    c->intercept = -1;
    c->buffering = -1;
    c->request_buffering = -1;
    c->resolver_timeout_ms = PROXY_UNSET;
    c->ssl_server_name = c->ssl_verify = c->ssl_session_reuse = -1;
    c->ssl_verify_depth = PROXY_UNSET;
    if (module_block_read(b, c) < 0)
        goto fail;
    for (const struct conf_node *n = b->first; n; n = n->next) /* written in once `user` */
        if (strcmp(n->name, "proxy_temp_path") == 0 &&
            module_dir_for_user(b->mi, n, n->args[0]) < 0)
            goto fail;
    if (outer) { /* inherit what this block leaves unset */
        if (c->n_headers == 0 && !c->headers_owned) {
            c->headers = outer->headers;
            c->n_headers = outer->n_headers;
        }
        if (!c->hide_owned) {
            c->hide = outer->hide;
            c->n_hide = outer->n_hide;
        }
        if (!c->pass_owned) {
            c->pass = outer->pass;
            c->n_pass = outer->n_pass;
        }
        if (c->connect_ms == PROXY_UNSET)
            c->connect_ms = outer->connect_ms;
        if (c->send_ms == PROXY_UNSET)
            c->send_ms = outer->send_ms;
        if (c->read_ms == PROXY_UNSET)
            c->read_ms = outer->read_ms;
        if (c->next_upstream == PROXY_UNSET)
            c->next_upstream = outer->next_upstream;
        if (c->tries == PROXY_UNSET)
            c->tries = outer->tries;
        if (c->redirect < 0)
            c->redirect = outer->redirect;
        if (c->http_minor < 0)
            c->http_minor = outer->http_minor;
        if (c->intercept < 0)
            c->intercept = outer->intercept;
        if (c->buffering < 0)
            c->buffering = outer->buffering;
        if (c->request_buffering < 0)
            c->request_buffering = outer->request_buffering;
        if (!c->buffers_n) {
            c->buffers_n = outer->buffers_n;
            c->buffers_size = outer->buffers_size;
        }
        if (!c->max_temp_set)
            c->max_temp = outer->max_temp;
        if (!c->temp_path)
            c->temp_path = outer->temp_path;
        if (!c->resolver)
            c->resolver = outer->resolver;
        if (c->resolver_timeout_ms == PROXY_UNSET)
            c->resolver_timeout_ms = outer->resolver_timeout_ms;
        inherit_ssl(c, outer);
    } else {
        if (c->connect_ms == PROXY_UNSET)
            c->connect_ms = PROXY_DEFAULT_TIMEOUT_MS;
        if (c->send_ms == PROXY_UNSET)
            c->send_ms = PROXY_DEFAULT_TIMEOUT_MS;
        if (c->read_ms == PROXY_UNSET)
            c->read_ms = PROXY_DEFAULT_TIMEOUT_MS;
        if (c->next_upstream == PROXY_UNSET)
            c->next_upstream = PROXY_NEXT_ERROR | PROXY_NEXT_TIMEOUT;
        if (c->tries == PROXY_UNSET)
            c->tries = 0;
        if (c->redirect < 0)
            c->redirect = 1;
        if (c->http_minor < 0)
            c->http_minor = 0;
        if (c->intercept < 0)
            c->intercept = 0;
        if (c->buffering < 0) /* nginx's default in nginx's files; streaming in ours */
            c->buffering = b->mi->cfg->http_block;
        if (c->request_buffering < 0)
            c->request_buffering = 1;
        if (!c->buffers_n) {
            c->buffers_n = 8;
            c->buffers_size = 4096;
        }
        if (!c->max_temp_set)
            c->max_temp = 1024ull << 20;
        if (!c->temp_path)
            c->temp_path = P_tmpdir;
        if (c->resolver_timeout_ms == PROXY_UNSET)
            c->resolver_timeout_ms = PROXY_RESOLVER_TIMEOUT_MS;
        inherit_ssl(c, NULL);
    }
    if (c->pass_line_text) {
        const struct conf_node *where = b->node;
        for (const struct conf_node *n = b->first; n; n = n->next)
            if (strcmp(n->name, "proxy_pass") == 0)
                where = n;
        if (resolve_pass(st, c, b, where) < 0 || module_block_mount(b, where, c, true) < 0)
            goto fail;
        if (!c->request_buffering) /* a chunked body only re-chunked to HTTP/1.1 (nginx) */
            module_block_stream_body(b, c->http_minor > 0);
        module_block_slash_redirect(b);
    }
    make_effective(c, b->mi->cfg->http_block);
    if (c->pass_line_text && c->https && make_tls(c, b) < 0)
        goto fail;
    c->params = (struct proxy_params){
        .ops = &proxy_ops,
        .conf = c,
        .upstream = c->params.upstream,
        .dynamic = c->params.dynamic,
        .resolver = c->resolver,
        .resolver_timeout_ms = c->resolver_timeout_ms,
        .connect_ms = c->connect_ms,
        .send_ms = c->send_ms,
        .read_ms = c->read_ms,
        .next_upstream = c->next_upstream,
        .tries = c->tries,
        .intercept_errors = c->intercept > 0,
        .tls_ctx = c->tls_ctx,
        .tls_server_name = c->ssl_server_name > 0,
        .tls_verify = c->ssl_verify > 0,
        .tls_name = c->ssl_name,
        .tls_host = {c->proxy_host, c->proxy_host_len},
        .buffering = c->buffering > 0,
        .buffers_bytes = (size_t)c->buffers_n * c->buffers_size,
        .max_temp_bytes = c->max_temp,
        .temp_path = c->temp_path,
    };
    return c;
fail:
    proxy_block_free(state, c);
    return NULL;
}

static void proxy_block_free(void *state, void *settings)
{
    (void)state;
    struct proxy_conf *c = settings;
    if (!c)
        return;
    if (c->headers_owned) {
        for (unsigned i = 0; i < c->n_headers; i++)
            vars_free(c->headers[i].value);
        free(c->headers);
    }
    if (c->hide_owned)
        free(c->hide);
    if (c->pass_owned)
        free(c->pass);
    vars_free(c->pass_vars);
    if (c->resolver_owned)
        resolver_free(c->resolver);
    if (c->ssl_name_owned)
        vars_free(c->ssl_name);
    upstream_tls_ctx_free(c->tls_ctx);
    if (c->implicit) {
        upstream_idle_close_all(c->implicit);
        upstream_release(c->implicit);
        free(c->implicit);
    }
    free(c);
}

/* --- the request -------------------------------------------------------------------------- */

struct out {
    char *p;
    size_t len, cap;
    bool full;
};

static void put(struct out *o, const char *s, size_t n)
{
    if (o->full || n > o->cap - o->len) {
        o->full = true;
        return;
    }
    if (n) /* (an empty slice may have no pointer) */
        memcpy(o->p + o->len, s, n);
    o->len += n;
}

static void puts_(struct out *o, const char *s)
{
    put(o, s, strlen(s));
}

static bool name_is(struct http_slice name, const char *lower)
{
    return http_slice_eq(name, lower);
}

/* Is name one of names (lowercase, NULL-ended)? Compared only where the length and the
 * first letter agree: a field's name is looked up in these lists for every field of every
 * proxied request and answer. */
struct name {
    const char *s;
    size_t len;
};
#define NAME(s) {s, sizeof(s) - 1}
#define LEN_BIT(n) (1ull << (n))

/* lengths: a bit per length the list holds (LEN_BIT), so that most names are turned away
 * by one test. */
static bool name_among(struct http_slice name, const struct name *names, uint64_t lengths)
{
    if (name.len >= 64 || !(lengths & LEN_BIT(name.len)))
        return false;
    char first = (char)(name.p[0] | 0x20);
    for (const struct name *n = names; n->s; n++)
        if (n->len == name.len && n->s[0] == first &&
            http_bytes_eq_nocase(name.p, n->s, n->len))
            return true;
    return false;
}

/* Is a field of the client's one the upstream never gets from it? */
static bool hop_by_hop(struct http_slice name)
{
    static const struct name names[] = {
        NAME("connection"), NAME("keep-alive"), NAME("te"), NAME("trailer"),
        NAME("transfer-encoding"), NAME("upgrade"), NAME("host"), NAME("content-length"),
        NAME("expect"), {NULL, 0},
    };
    static const uint64_t lengths = LEN_BIT(10) | LEN_BIT(2) | LEN_BIT(7) | LEN_BIT(17) |
                                    LEN_BIT(4) | LEN_BIT(14) | LEN_BIT(6);
    return name_among(name, names, lengths) ||
           (name.len >= 6 && http_bytes_eq_nocase(name.p, "proxy-", 6));
}

/* Does the client's Connection field name fields beyond close, keep-alive and upgrade
 * (which are removed anyway)? Only then is each field looked for in it. */
static bool connection_names_others(const struct http_request *h)
{
    static const struct name plain[] = {NAME("close"), NAME("keep-alive"), NAME("upgrade"),
                                        {NULL, 0}};
    for (unsigned i = 0; i < h->n_headers; i++) {
        if (!name_is(h->headers[i].name, "connection"))
            continue;
        struct http_slice rest = h->headers[i].value, e;
        while (http_list_next(&rest, &e))
            if (e.len && !name_among(e, plain, LEN_BIT(5) | LEN_BIT(10) | LEN_BIT(7)))
                return true;
    }
    return false;
}

/* Does the Connection field among fields f[0..n) (all of its lines) list name? */
static bool connection_lists(const struct http_header *f, unsigned n, struct http_slice name)
{
    for (unsigned i = 0; i < n; i++) {
        if (!name_is(f[i].name, "connection"))
            continue;
        struct http_slice rest = f[i].value, e;
        while (http_list_next(&rest, &e))
            if (e.len == name.len && strncasecmp(e.p, name.p, e.len) == 0)
                return true;
    }
    return false;
}

/* Does the client's Connection field list name? */
static bool connection_names(const struct http_request *h, struct http_slice name)
{
    return connection_lists(h->headers, h->n_headers, name);
}

/* The client's address as text (IPv4 without printf: it goes into every request). */
static size_t addr_text(const struct sockaddr *sa, char *out, size_t cap)
{
    if (sa && sa->sa_family == AF_INET && cap >= 16) {
        const unsigned char *b =
            (const unsigned char *)&((const struct sockaddr_in *)(const void *)sa)->sin_addr;
        char *p = out;
        for (int i = 0; i < 4; i++) {
            if (i)
                *p++ = '.';
            p = http_fmt_u64(p, b[i]);
        }
        *p = '\0';
        return (size_t)(p - out);
    }
    if (sa && sa->sa_family == AF_INET6 &&
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, out,
                  (socklen_t)cap))
        return strlen(out);
    out[0] = '\0';
    return 0;
}

static void put_default(struct out *o, struct http_slice proxy_host, const struct request *req,
                        enum proxy_default def, const char *ip, size_t ip_len)
{
    const struct http_request *h = req->http;
    switch (def) {
    case DEF_HOST:
        put(o, proxy_host.p, proxy_host.len);
        break;
    case DEF_REAL_IP:
        put(o, ip, ip_len);
        break;
    case DEF_FORWARDED_FOR:
        for (unsigned i = 0; i < h->n_headers; i++) {
            if (name_is(h->headers[i].name, "x-forwarded-for") && h->headers[i].value.len) {
                put(o, h->headers[i].value.p, h->headers[i].value.len);
                puts_(o, ", ");
            }
        }
        put(o, ip, ip_len);
        break;
    case DEF_PROTO:
        puts_(o, req->https ? "https" : "http");
        break;
    case DEF_FORWARDED_HOST:
        put(o, h->host.p, h->host.len);
        break;
    case DEF_CONNECTION:
        puts_(o, "close");
        break;
    case DEF_NONE:
        break;
    }
}

/* The target: as the client sent it, or the path (replaced under the prefix) encoded. */
static void put_target(struct out *o, const struct proxy_conf *c, const struct request *req,
                       const struct proxy_target *t)
{
    const struct http_request *h = req->http;
    if (t && t->has_uri) { /* proxy_pass with variables: its URI as it is (nginx's) */
        put(o, t->uri, t->uri_len);
        return;
    }
    char orig[REQUEST_PATH_MAX];
    bool changed = true;
    if (!c->has_uri) { /* the request's own target, unless a redirect changed the path */
        long n = http_path_normalize(h->path, orig, sizeof(orig));
        changed = n < 0 || (size_t)n != req->path_len || memcmp(orig, req->path, (size_t)n);
        if (!changed && h->path.len && h->path.p[0] == '/') {
            struct http_origin_form of = http_origin_form(h);
            put(o, of.path.p, of.path.len);
            put(o, of.query.p, of.query.len);
            return;
        }
    }
    char enc[REQUEST_PATH_MAX * 3 + 1];
    char path[REQUEST_PATH_MAX + 1024];
    size_t pl = 0;
    if (c->has_uri && req->path_len >= c->prefix_len &&
        memcmp(req->path, c->prefix, c->prefix_len) == 0) {
        memcpy(path, c->uri, c->uri_len);
        pl = c->uri_len;
        size_t rest = req->path_len - c->prefix_len;
        if (pl + rest >= sizeof(path)) {
            o->full = true;
            return;
        }
        memcpy(path + pl, req->path + c->prefix_len, rest);
        pl += rest;
    } else {
        memcpy(path, req->path, req->path_len);
        pl = req->path_len;
    }
    long el = http_path_encode(path, pl, enc, sizeof(enc));
    if (el < 0) {
        o->full = true;
        return;
    }
    put(o, enc, (size_t)el);
    if (req->has_args) {
        puts_(o, "?");
        put(o, req->args.p, req->args.len);
    }
}

/* May the connection that carries a request with this Connection value (v[0..n), what was
 * sent, none if n is 0) be kept for another? As HTTP/1.x says of the request's side. */
static bool request_keeps(int minor, const char *v, size_t n)
{
    struct http_slice rest = {v, n}, e;
    bool close = false, keep = false;
    while (http_list_next(&rest, &e)) {
        close |= e.len == 5 && strncasecmp(e.p, "close", 5) == 0;
        keep |= e.len == 10 && strncasecmp(e.p, "keep-alive", 10) == 0;
    }
    return !close && (minor > 0 || keep);
}

static long proxy_request(const void *conf, const struct request *req,
                          const struct proxy_target *t, bool *keep_alive, char *out_buf,
                          size_t cap)
{
    const struct proxy_conf *c = conf;
    const struct http_request *h = req->http;
    struct out o = {out_buf, 0, cap, false};
    put(&o, h->method_name.p, h->method_name.len);
    puts_(&o, " ");
    put_target(&o, c, req, t);
    puts_(&o, c->http_minor > 0 ? " HTTP/1.1\r\n" : " HTTP/1.0\r\n");
    size_t connection_at = 0, connection_len = 0; /* the Connection value sent, if any */

    char ip[64];
    size_t ip_len = addr_text(req->peer, ip, sizeof(ip));
    struct vars_source src;
    module_vars_source(req, &src);
    struct http_slice proxy_host = {c->proxy_host, c->proxy_host_len};
    src.proxy_host = proxy_host;
    src.proxy_port = (struct http_slice){c->proxy_port, strlen(c->proxy_port)};
    if (t) {
        proxy_host = (struct http_slice){t->proxy_host, t->proxy_host_len};
        src.proxy_host = proxy_host;
        src.proxy_port = (struct http_slice){t->proxy_port, strlen(t->proxy_port)};
    }
    for (unsigned i = 0; i < c->n_effective; i++) {
        const struct proxy_header *e = c->effective[i];
        bool host = i == 0; /* (Host is first: make_effective keeps it there) */
        if (e->empty && !host)
            continue;
        size_t line_at = o.len;
        bool was_full = o.full; /* (a field that turns out empty takes no room) */
        put(&o, e->name, e->name_len);
        puts_(&o, ": ");
        size_t value_at = o.len;
        if (e->value) {
            long n = o.full ? -1 : vars_expand(e->value, &src, o.p + o.len, o.cap - o.len);
            if (n < 0)
                o.full = true;
            else
                o.len += (size_t)n;
        } else {
            put_default(&o, proxy_host, req, e->def, ip, ip_len);
        }
        if (o.len == value_at && host) /* an HTTP/1.1 request has one Host, never empty */
            put(&o, proxy_host.p, proxy_host.len);
        if (o.len == value_at) { /* nginx sends no field whose value is empty */
            o.len = line_at;
            o.full = was_full;
            continue;
        }
        if (!o.full && e->name_len == 10 && strcasecmp(e->name, "connection") == 0) {
            connection_at = value_at;
            connection_len = o.len - value_at;
        }
        puts_(&o, "\r\n");
    }
    bool named = connection_names_others(h);
    for (unsigned i = 0; i < h->n_headers; i++) {
        const struct http_header *f = &h->headers[i];
        if (hop_by_hop(f->name))
            continue;
        bool set = false;
        for (unsigned j = 0; j < c->n_effective && !set; j++)
            set = f->name.len == c->effective[j]->name_len &&
                  strncasecmp(f->name.p, c->effective[j]->name, f->name.len) == 0;
        if (set || (named && connection_names(h, f->name)))
            continue;
        put(&o, f->name.p, f->name.len);
        puts_(&o, ": ");
        put(&o, f->value.p, f->value.len);
        puts_(&o, "\r\n");
    }
    if (req->body_streams && h->framing == HTTP_BODY_CHUNKED) {
        puts_(&o, "Transfer-Encoding: chunked\r\n");
    } else if (h->framing != HTTP_BODY_NONE) {
        char num[24];
        char *e = http_fmt_u64(num, req->body_streams ? h->content_length : req->body_len);
        puts_(&o, "Content-Length: ");
        put(&o, num, (size_t)(e - num));
        puts_(&o, "\r\n");
    }
    puts_(&o, "\r\n");
    *keep_alive = *keep_alive && !o.full &&
                  request_keeps(c->http_minor, out_buf + connection_at, connection_len);
    return o.full ? -1 : (long)o.len;
}

/* --- the answer --------------------------------------------------------------------------- */

static bool listed(char (*list)[64], unsigned n, struct http_slice name)
{
    for (unsigned i = 0; i < n; i++)
        if (strlen(list[i]) == name.len && strncasecmp(list[i], name.p, name.len) == 0)
            return true;
    return false;
}

/* Does the upstream's Connection field list name? */
static bool up_connection_names(const struct http_response_head *h, struct http_slice name)
{
    return connection_lists(h->headers, h->n_headers, name);
}

/* A field the client never gets from the upstream (unless proxy_pass_header names it). */
static bool hidden(const struct proxy_conf *c, const struct http_response_head *h,
                   struct http_slice name)
{
    static const struct name never[] = {
        NAME("connection"), NAME("keep-alive"), NAME("transfer-encoding"),
        NAME("content-length"), NAME("proxy-connection"), NAME("trailer"), NAME("te"),
        NAME("upgrade"), {NULL, 0}, /* (a 101's Upgrade is added after) */
    };
    static const struct name ours[] = {NAME("date"), NAME("server"), NAME("x-pad"), {NULL, 0}};
    static const uint64_t never_lengths = LEN_BIT(10) | LEN_BIT(17) | LEN_BIT(14) |
                                          LEN_BIT(16) | LEN_BIT(7) | LEN_BIT(2);
    if (name_among(name, never, never_lengths))
        return true;
    if (listed(c->hide, c->n_hide, name))
        return true;
    if (listed(c->pass, c->n_pass, name))
        return false;
    if (name_among(name, ours, LEN_BIT(4) | LEN_BIT(6) | LEN_BIT(5)) ||
        (name.len >= 8 && http_bytes_eq_nocase(name.p, "x-accel-", 8)))
        return true;
    return h->connection_names_fields && up_connection_names(h, name);
}

/* Location or Refresh with proxy_redirect default: the proxy_pass URL at its start becomes
 * the location's prefix; then a path is made absolute. */
static void put_location(const struct proxy_conf *c, const struct request *req,
                         struct http_header *f, struct response *resp)
{
    char v[4096];
    struct http_slice val = f->value;
    size_t at = 0;
    if (name_is(f->name, "refresh")) { /* "5; url=http://..." */
        const char *u = NULL;
        for (size_t i = 0; i + 4 <= val.len && !u; i++)
            if (strncasecmp(val.p + i, "url=", 4) == 0)
                u = val.p + i + 4;
        if (!u) {
            resp_header_n(resp, f->name.p, f->name.len, val.p, val.len);
            return;
        }
        at = (size_t)(u - val.p);
    }
    size_t n = 0;
    struct http_slice url = {val.p + at, val.len - at};
    if (c->redirect == 1 && c->pass_url_len && url.len >= c->pass_url_len &&
        strncasecmp(url.p, c->pass_url, c->pass_url_len) == 0 &&
        at + c->prefix_len + url.len - c->pass_url_len < sizeof(v) - 600) {
        memcpy(v, val.p, at);
        n = at;
        const char *to = c->has_uri ? c->prefix : "/";
        size_t tl = c->has_uri ? c->prefix_len : 1;
        size_t skip = c->pass_url_len;
        memcpy(v + n, to, tl);
        n += tl;
        memcpy(v + n, url.p + skip, url.len - skip);
        n += url.len - skip;
        url = (struct http_slice){v + at, n - at};
    } else if (val.len < sizeof(v) - 600) {
        memcpy(v, val.p, val.len);
        n = val.len;
        url = (struct http_slice){v + at, n - at};
    } else {
        resp_header_n(resp, f->name.p, f->name.len, val.p, val.len);
        return;
    }
    char abs[4700];
    size_t bl;
    if (name_is(f->name, "location") && url.len && url.p[0] == '/' && req &&
        (bl = module_redirect_base(req, abs, 600)) > 0) {
        memcpy(abs + bl, url.p, url.len);
        resp_header_n(resp, f->name.p, f->name.len, abs, bl + url.len);
        return;
    }
    resp_header_n(resp, f->name.p, f->name.len, v, n);
}

static int proxy_head(const void *conf, const struct request *req,
                      const struct http_response_head *h, struct response *resp)
{
    const struct proxy_conf *c = conf;
    resp_start(resp, h->status);
    if (h->reason.len && http_field_value_valid(h->reason.p, h->reason.len))
        resp_set_reason(resp, h->reason.p, h->reason.len);
    for (unsigned i = 0; i < h->n_headers; i++) {
        struct http_header f = h->headers[i];
        if (hidden(c, h, f.name))
            continue;
        if (name_is(f.name, "date") || name_is(f.name, "server")) { /* proxy_pass_header */
            char name[8], value[1024];
            if (f.value.len >= sizeof(value))
                continue;
            snprintf(name, sizeof(name), "%s", name_is(f.name, "date") ? "Date" : "Server");
            memcpy(value, f.value.p, f.value.len);
            value[f.value.len] = '\0';
            resp_header_set(resp, name, value);
            continue;
        }
        if (name_is(f.name, "location") || name_is(f.name, "refresh")) {
            put_location(c, req, &f, resp);
            continue;
        }
        resp_header_n(resp, f.name.p, f.name.len, f.value.p, f.value.len);
    }
    if (h->status == 101) {
        resp_header_n(resp, "Upgrade", 7, h->upgrade.p, h->upgrade.len);
        resp_header(resp, "Connection", "upgrade");
    }
    return resp_failed(resp) ? -1 : 0;
}

/* proxy_pass with variables: http://HOST[:PORT][/URI], made for this request. */
static int proxy_target(const void *conf, const struct request *req, struct proxy_target *t)
{
    const struct proxy_conf *c = conf;
    char url[4096];
    struct vars_source src;
    module_vars_source(req, &src);
    long n = vars_expand(c->pass_vars, &src, url, sizeof(url));
    t->upstream = NULL;
    t->has_uri = false;
    t->uri_len = 0;
    size_t shown = n < 0 ? 0 : strnlen(url, sizeof(t->host) - 1); /* (for the message) */
    memcpy(t->host, url, shown);
    t->host[shown] = '\0';
    if (n < 0 || strncasecmp(url, "http://", 7) != 0)
        return -1;
    const char *h = url + 7;
    size_t hl = strcspn(h, "/?");
    if (hl == 0 || hl >= sizeof(t->proxy_host))
        return -1;
    const char *rest = h + hl;
    if (*rest) {
        t->uri_len = strlen(rest);
        if (t->uri_len >= sizeof(t->uri))
            return -1;
        /* ("?a" without a path: nginx sends "/?a") */
        t->uri_len = (size_t)snprintf(t->uri, sizeof(t->uri), "%s%s", *rest == '?' ? "/" : "",
                                      rest);
        t->has_uri = true;
    }
    memcpy(t->proxy_host, h, hl);
    t->proxy_host[hl] = '\0';
    t->proxy_host_len = hl;
    const char *name = t->proxy_host, *port = NULL;
    size_t name_len = hl;
    if (name[0] == '[') { /* [IPv6][:PORT] */
        const char *end = memchr(name, ']', hl);
        if (!end)
            return -1;
        name++;
        name_len = (size_t)(end - name);
        port = end[1] == ':' ? end + 2 : NULL;
        if (!port && end[1])
            return -1;
    } else {
        const char *colon = memchr(name, ':', hl);
        if (colon) {
            name_len = (size_t)(colon - name);
            port = colon + 1;
        }
    }
    if (name_len == 0 || name_len >= sizeof(t->host))
        return -1;
    t->port = 80;
    if (port) {
        char *end;
        long p = strtol(port, &end, 10);
        if (!*port || *end || p < 1 || p > 65535)
            return -1;
        t->port = (unsigned)p;
    }
    snprintf(t->proxy_port, sizeof(t->proxy_port), "%u", t->port);
    memcpy(t->host, name, name_len);
    t->host[name_len] = '\0';
    if (!port) /* a host without a port may name an upstream block */
        t->upstream = find_upstream(c->st, t->host, name_len);
    else if (t->port == 80 && hl > 3) /* $proxy_host leaves ":80" out */
        t->proxy_host[t->proxy_host_len -= 3] = '\0';
    return 0;
}

static const struct proxy_ops proxy_ops = {
    .target = proxy_target,
    .request = proxy_request,
    .head = proxy_head,
};

/* --- the module --------------------------------------------------------------------------- */

static enum mod_result proxy_handle(void *state, const struct request *req,
                                   struct response *resp)
{
    (void)state;
    const struct proxy_conf *c = req->mount ? req->mount->data : NULL;
    if (!c || (!c->params.upstream && !c->params.dynamic))
        return MOD_DECLINED;
    resp_proxy(resp, &c->params);
    return MOD_HANDLED;
}

static unsigned proxy_upstreams(void *state, struct upstream **out, unsigned max)
{
    struct proxy_state *st = state;
    unsigned n = 0;
    for (unsigned i = 0; i < st->n_ups; i++, n++)
        if (n < max)
            out[n] = st->ups[i];
    for (unsigned i = 0; i < st->n_implicit; i++, n++)
        if (n < max)
            out[n] = st->implicit[i];
    return n;
}

/* At init, only the top level's `upstream` blocks: the other directives are the blocks'
 * (the top level's included), read by proxy_block into a struct of theirs. */
static const struct conf_directive upstream_directive[] = {
    {"upstream", CONF_BLOCK, CONF_TOP, CONF_REPEATS, .min_args = 1, .max_args = 1,
     .set = set_upstream, .usage = "NAME { server ADDRESS [PARAMETERS]; ... }",
     .doc = "A named set of servers (see mod_proxy's table)."},
    {.name = NULL},
};

static int proxy_init(struct module_init *mi, void **state)
{
    struct proxy_state *st = calloc(1, sizeof(*st));
    if (!st)
        return module_error(mi, NULL, "out of memory");
    st->kind = PROXY_STATE;
    st->mi = mi;
    struct conf_reader r = {
        .file = mi->cfg->file,
        .owner = "proxy",
        .context = CONF_TOP,
        .ctx = mi,
        .err = mi->err,
        .err_len = mi->err_len,
    };
    if (conf_read_owned(&r, upstream_directive, mi->cfg->tree, st) < 0) {
        for (unsigned i = 0; i < st->n_ups; i++) {
            upstream_release(st->ups[i]);
            free(st->ups[i]);
        }
        free(st);
        return -1;
    }
    *state = st;
    return 0;
}

static void proxy_fini(void *state)
{
    struct proxy_state *st = state;
    for (unsigned i = 0; i < st->n_ups; i++) {
        upstream_idle_close_all(st->ups[i]);
        upstream_release(st->ups[i]);
        free(st->ups[i]);
    }
    free(st);
}

/* Kept upstream connections idle past their block's keepalive_timeout are closed, as
 * nginx's upstream keepalive timer closes them. */
static void proxy_tick(void *state, int64_t now_ms)
{
    struct proxy_state *st = state;
    for (unsigned i = 0; i < st->n_ups; i++)
        upstream_idle_expire(st->ups[i], now_ms);
    for (unsigned i = 0; i < st->n_implicit; i++)
        upstream_idle_expire(st->implicit[i], now_ms);
}

const struct module mod_proxy = {
    .name = "proxy",
    .directives = proxy_directives,
    .init = proxy_init,
    .fini = proxy_fini,
    .handle = proxy_handle,
    .block = proxy_block,
    .block_free = proxy_block_free,
    .upstreams = proxy_upstreams,
    .tick = proxy_tick,
};
