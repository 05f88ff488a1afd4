/* mod_realip.c — the client's address as a trusted proxy names it, as nginx's realip module:
 *
 *   set_real_ip_from ADDR|CIDR|unix:|HOST;   (repeatable)
 *   real_ip_header X-Real-IP|X-Forwarded-For|proxy_protocol|NAME;
 *   real_ip_recursive on|off;
 *
 * When the connection's address is one of the trusted ones, the address the header names
 * becomes the client's for the rest of the request (module_set_peer): $remote_addr, the
 * access log, allow/deny, CGI's REMOTE_ADDR, the proxy's X-Forwarded-For all see it, and
 * $realip_remote_addr keeps the connection's. The header's value is read from its end: the
 * last address of the list (after the last ',' or ' '); with real_ip_recursive on, while
 * the address found is trusted too, the one before it, and for X-Forwarded-For the fields
 * before the last one, as nginx's ngx_http_get_forwarded_addr. "ADDR:PORT" and
 * "[ADDR]:PORT" set $remote_port too; a bare address leaves it empty.
 *
 * The hook runs twice (module.h's post_read): with the server block's settings before the
 * server's rewrites, and with the location's before the access rules; the first that
 * changes the address decides, as nginx's post-read and preaccess phases share one context.
 * Blocks without set_real_ip_from ask nothing: without the directive anywhere, the hook is
 * not called at all.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "module.h"

#define REALIP_FROM_MAX 64
#define REALIP_NAME_MAX 64

enum realip_header {
    REALIP_UNSET = 0,
    REALIP_X_REAL_IP,
    REALIP_X_FORWARDED_FOR,
    REALIP_PROXY_PROTOCOL,
    REALIP_OTHER, /* a field named by `name` */
};

struct realip_settings {
    struct config_cidr from[REALIP_FROM_MAX];
    unsigned n_from;
    bool from_set;  /* the block has set_real_ip_from: its list replaces the outer one */
    bool from_unix; /* `unix:`: connections on a UNIX socket are trusted */
    enum realip_header header;
    char name[REALIP_NAME_MAX]; /* REALIP_OTHER's field name, lowercase */
    int recursive;              /* -1: not set here */
};

/* --- directives ---------------------------------------------------------------------- */

static int add_from(struct realip_settings *s, const struct config_cidr *c, char *msg,
                    size_t len)
{
    if (s->n_from == REALIP_FROM_MAX)
        return snprintf(msg, len, "more than %d addresses", REALIP_FROM_MAX), -1;
    s->from[s->n_from++] = *c;
    return 0;
}

/* A host name: every address it resolves to, at load (nginx's ngx_inet_resolve_host). */
static int add_host(struct realip_settings *s, const char *host, char *msg, size_t len)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0)
        return snprintf(msg, len, "host not found in set_real_ip_from \"%s\"", host), -1;
    int out = 0;
    for (const struct addrinfo *a = res; a && out == 0; a = a->ai_next) {
        struct config_cidr c;
        memset(&c, 0, sizeof(c));
        c.family = a->ai_family;
        if (a->ai_family == AF_INET) {
            memcpy(c.addr, &((const struct sockaddr_in *)(const void *)a->ai_addr)->sin_addr, 4);
            c.prefix_bits = 32;
        } else if (a->ai_family == AF_INET6) {
            memcpy(c.addr, &((const struct sockaddr_in6 *)(const void *)a->ai_addr)->sin6_addr,
                   16);
            c.prefix_bits = 128;
        } else {
            continue;
        }
        out = add_from(s, &c, msg, len);
    }
    freeaddrinfo(res);
    return out;
}

static int set_from(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    struct realip_settings *s = base;
    (void)ctx;
    const char *v = n->args[0];
    s->from_set = true;
    if (strcmp(v, "unix:") == 0) {
        s->from_unix = true;
        return 0;
    }
    struct config_cidr c;
    if (config_cidr_parse(v, &c) == 0)
        return add_from(s, &c, msg, len);
    if (strchr(v, '/'))
        return snprintf(msg, len, "invalid address \"%s\" (ADDR, ADDR/BITS, unix: or a host "
                        "name)", v), -1;
    return add_host(s, v, msg, len);
}

static int set_header(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    struct realip_settings *s = base;
    (void)ctx;
    const char *v = n->args[0];
    if (strcmp(v, "X-Real-IP") == 0) { /* nginx compares these three as written */
        s->header = REALIP_X_REAL_IP;
        return 0;
    }
    if (strcmp(v, "X-Forwarded-For") == 0) {
        s->header = REALIP_X_FORWARDED_FOR;
        return 0;
    }
    if (strcmp(v, "proxy_protocol") == 0) {
        s->header = REALIP_PROXY_PROTOCOL;
        return 0;
    }
    size_t l = strlen(v);
    if (l >= sizeof(s->name))
        return snprintf(msg, len, "the field name is longer than %d bytes",
                        REALIP_NAME_MAX - 1), -1;
    for (size_t i = 0; i <= l; i++)
        s->name[i] = (char)(v[i] >= 'A' && v[i] <= 'Z' ? v[i] + 32 : v[i]);
    s->header = REALIP_OTHER;
    return 0;
}

static const struct conf_directive realip_directives[] = {
    {"set_real_ip_from", CONF_LIST, CONF_TOP | CONF_SERVER | CONF_LOCATION, CONF_REPEATS,
     .min_args = 1, .max_args = 1, .set = set_from, .usage = "ADDR|CIDR|unix:|HOST",
     .doc = "A trusted proxy: a connection from it may name the client in `real_ip_header`, "
        "which then becomes `$remote_addr` (and what the access log, `allow`/`deny`, CGI and "
        "the proxy see); `$realip_remote_addr` keeps the connection's. IPv4 or IPv6, with "
        "`/BITS`; `unix:` trusts UNIX-socket connections; a host name trusts each address "
        "it resolves to at load. A block with any `set_real_ip_from` has exactly its own "
        "list."},
    {"real_ip_header", CONF_LIST, CONF_TOP | CONF_SERVER | CONF_LOCATION, .min_args = 1,
     .max_args = 1, .set = set_header, .usage = "X-Real-IP|X-Forwarded-For|proxy_protocol|NAME",
     .dflt = "X-Real-IP",
     .doc = "The field that names the client, read from its end: the last address of the "
        "list (`ADDR`, `ADDR:PORT` or `[ADDR]:PORT`, the port becoming `$remote_port`); "
        "`proxy_protocol`: the address and port of the connection's PROXY protocol header "
        "(`listen ... proxy_protocol`). An address that does not parse changes nothing."},
    {"real_ip_recursive", CONF_FLAG, CONF_TOP | CONF_SERVER | CONF_LOCATION,
     CONF_AT(struct realip_settings, recursive), .usage = "on|off", .dflt = "off",
     .doc = "`on`: while the address found is itself trusted, take the one before it (for "
        "`X-Forwarded-For`, through the earlier fields too): the client is the last address "
        "that is not a trusted proxy. `off`: the last address, whatever it is."},
    {.name = NULL},
};

/* --- finding the address ------------------------------------------------------------- */

static bool trusted(const struct realip_settings *s, const struct sockaddr *sa)
{
    if (sa->sa_family == AF_UNIX)
        return s->from_unix;
    for (unsigned i = 0; i < s->n_from; i++)
        if (config_cidr_match(&s->from[i], sa))
            return true;
    return false;
}

/* ADDR, ADDR:PORT or [ADDR]:PORT (nginx's ngx_parse_addr_port), into out; port 0 when
 * none is given. */
static bool parse_addr_port(const char *p, size_t n, union request_addr *out)
{
    char text[INET6_ADDRSTRLEN + 1];
    unsigned port = 0;
    const char *addr = p;
    size_t alen = n;
    const char *colon = memchr(p, ':', n);
    if (n && p[0] == '[') {
        const char *close = memchr(p, ']', n);
        if (!close)
            return false;
        addr = p + 1;
        alen = (size_t)(close - addr);
        if (close != p + n - 1) {
            if (close[1] != ':')
                return false;
            colon = close + 1;
        } else {
            colon = NULL;
        }
    } else if (colon && memchr(colon + 1, ':', n - (size_t)(colon + 1 - p))) {
        colon = NULL; /* more than one ':': an IPv6 address, without a port */
    } else if (colon) {
        alen = (size_t)(colon - p);
    }
    if (colon) {
        const char *d = colon + 1, *end = p + n;
        if (d == end || end - d > 5)
            return false;
        for (; d < end; d++) {
            if (*d < '0' || *d > '9')
                return false;
            port = port * 10 + (unsigned)(*d - '0');
        }
        if (port < 1 || port > 65535)
            return false;
    }
    if (alen == 0 || alen >= sizeof(text))
        return false;
    memcpy(text, addr, alen);
    text[alen] = '\0';
    memset(out, 0, sizeof(*out));
    if (inet_pton(AF_INET, text, &out->in.sin_addr) == 1) {
        out->in.sin_family = AF_INET;
        out->in.sin_port = htons((uint16_t)port);
        return true;
    }
    if (inet_pton(AF_INET6, text, &out->in6.sin6_addr) == 1) {
        out->in6.sin6_family = AF_INET6;
        out->in6.sin6_port = htons((uint16_t)port);
        return true;
    }
    return false;
}

enum found { FOUND_NONE, FOUND_ALL, FOUND_STOPPED };

/* One field's list, from its end, while *addr is trusted: *addr becomes each address read.
 * FOUND_NONE: nothing taken; FOUND_ALL: the whole list was read (each address trusted but
 * maybe the first); FOUND_STOPPED: an untrusted or unparsable address ended the walk. */
static enum found walk(const struct realip_settings *s, union request_addr *addr,
                       const char *v, size_t len, bool recursive)
{
    bool found = false;
    do {
        if (!trusted(s, &addr->sa))
            return found ? FOUND_STOPPED : FOUND_NONE;
        while (len > 0 && (v[len - 1] == ' ' || v[len - 1] == ','))
            len--;
        size_t start = len;
        while (start > 0 && v[start - 1] != ' ' && v[start - 1] != ',')
            start--;
        union request_addr next;
        if (!parse_addr_port(v + start, len - start, &next))
            return found ? FOUND_STOPPED : FOUND_NONE;
        *addr = next;
        found = true;
        len = start;
    } while (recursive && len > 0);
    return FOUND_ALL;
}

static const struct http_header *field_before(const struct http_request *h, unsigned *i,
                                              const char *name, size_t name_len)
{
    while (*i > 0) {
        const struct http_header *f = &h->headers[--*i];
        if (f->name.len == name_len && http_bytes_eq_nocase(f->name.p, name, name_len))
            return f;
    }
    return NULL;
}

/* The address the request's field names. X-Forwarded-For: from its last field back (only
 * the last one unless recursive), as nginx joins them; another field: its first one, as
 * nginx finds it. */
static bool from_fields(const struct realip_settings *s, const struct request *req,
                        const char *name, union request_addr *addr)
{
    const struct http_request *h = req->http;
    size_t name_len = strlen(name);
    bool recursive = s->recursive > 0;
    if (s->header != REALIP_X_FORWARDED_FOR) {
        for (unsigned i = 0; i < h->n_headers; i++) {
            const struct http_header *f = &h->headers[i];
            if (f->name.len == name_len && http_bytes_eq_nocase(f->name.p, name, name_len))
                return walk(s, addr, f->value.p, f->value.len, recursive) != FOUND_NONE;
        }
        return false;
    }
    unsigned i = h->n_headers;
    bool any = false;
    for (const struct http_header *f = field_before(h, &i, name, name_len); f;
         f = recursive ? field_before(h, &i, name, name_len) : NULL) {
        enum found r = walk(s, addr, f->value.p, f->value.len, recursive);
        if (r == FOUND_NONE)
            return any;
        any = true;
        if (r == FOUND_STOPPED)
            return true;
    }
    return any;
}

static bool from_proxy_protocol(const struct realip_settings *s, const struct request *req,
                                union request_addr *addr)
{
    const struct proxy_protocol_addrs *pp = req->proxy_protocol;
    if (!pp || pp->src.sa.sa_family == AF_UNSPEC || !trusted(s, &addr->sa))
        return false;
    *addr = pp->src;
    return true;
}

/* --- the module ---------------------------------------------------------------------- */

struct realip_module {
    unsigned index;
    struct realip_settings none; /* the top level's, when it sets nothing */
};

static int realip_init(struct module_init *mi, void **state)
{
    struct realip_module *m = calloc(1, sizeof(*m));
    if (!m)
        return module_error(mi, NULL, "out of memory");
    m->index = mi->index;
    m->none.recursive = 0;
    m->none.header = REALIP_X_REAL_IP;
    *state = m;
    return 0;
}

static void realip_fini(void *state)
{
    free(state);
}

static void *realip_block(void *state, const struct module_block *b)
{
    struct realip_module *m = state;
    if (!module_block_has(b))
        return b->outer ? (void *)b->outer : &m->none;
    struct realip_settings *s = calloc(1, sizeof(*s));
    if (!s) {
        module_error(b->mi, NULL, "out of memory");
        return NULL;
    }
    s->recursive = -1;
    if (module_block_read(b, s) < 0) {
        free(s);
        return NULL;
    }
    const struct realip_settings *o = b->outer ? b->outer : &m->none;
    if (!s->from_set) {
        memcpy(s->from, o->from, o->n_from * sizeof(o->from[0]));
        s->n_from = o->n_from;
        s->from_set = o->from_set;
        s->from_unix = o->from_unix;
    }
    if (s->header == REALIP_UNSET) {
        s->header = o->header;
        memcpy(s->name, o->name, sizeof(s->name));
    }
    if (s->recursive < 0)
        s->recursive = o->recursive;
    if (s->from_set)
        module_post_read_wanted(b);
    return s;
}

static void realip_block_free(void *state, void *settings)
{
    if (settings != &((struct realip_module *)state)->none)
        free(settings);
}

static enum mod_result realip_post_read(void *state, struct request *req)
{
    const struct realip_module *m = state;
    const struct realip_settings *s = module_settings(req, m->index);
    if (!s || !s->from_set || req->peer_replaced || !req->http)
        return MOD_DECLINED;
    union request_addr addr;
    const struct sockaddr *conn = req->conn_peer;
    if (conn->sa_family == AF_INET6)
        addr.in6 = *(const struct sockaddr_in6 *)(const void *)conn;
    else if (conn->sa_family == AF_INET)
        addr.in = *(const struct sockaddr_in *)(const void *)conn;
    else if (conn->sa_family == AF_UNIX)
        addr.sa.sa_family = AF_UNIX; /* trusted only as `unix:` */
    else
        return MOD_DECLINED;
    bool found;
    switch (s->header) {
    case REALIP_PROXY_PROTOCOL: found = from_proxy_protocol(s, req, &addr); break;
    case REALIP_X_FORWARDED_FOR: found = from_fields(s, req, "x-forwarded-for", &addr); break;
    case REALIP_OTHER: found = from_fields(s, req, s->name, &addr); break;
    default: found = from_fields(s, req, "x-real-ip", &addr); break;
    }
    if (found)
        module_set_peer(req, &addr.sa);
    return MOD_DECLINED;
}

const struct module mod_realip = {
    .name = "realip",
    .directives = realip_directives,
    .init = realip_init,
    .fini = realip_fini,
    .post_read = realip_post_read,
    .block = realip_block,
    .block_free = realip_block_free,
};
