/* vars.c — compiling configuration values with variables, and expanding them per request.
 * See vars.h for the variables and the escaping. */
#include "vars.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum var_id {
    VAR_LITERAL = 0,
    VAR_URI,
    VAR_REQUEST_URI,
    VAR_ARGS,
    VAR_HOST,
    VAR_SCHEME,
    VAR_REMOTE_ADDR,
    VAR_REQUEST_METHOD,
    VAR_SERVER_PORT,
};

static const struct {
    const char *name;
    enum var_id id;
} var_names[] = {
    {"uri", VAR_URI},
    {"request_uri", VAR_REQUEST_URI},
    {"args", VAR_ARGS},
    {"host", VAR_HOST},
    {"scheme", VAR_SCHEME},
    {"remote_addr", VAR_REMOTE_ADDR},
    {"request_method", VAR_REQUEST_METHOD},
    {"server_port", VAR_SERVER_PORT},
};

struct vars_part {
    enum var_id id;
    uint32_t off, len; /* a literal's bytes in text */
};

struct vars_value {
    enum vars_context ctx;
    unsigned n_parts;
    struct vars_part *parts; /* inside the same allocation, after text */
    char text[];             /* the literal bytes, in order */
};

/* --- compiling ---------------------------------------------------------------------------- */

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_';
}

static int var_lookup(const char *name, size_t len, enum var_id *id)
{
    for (size_t i = 0; i < sizeof(var_names) / sizeof(var_names[0]); i++)
        if (strlen(var_names[i].name) == len && strncasecmp(var_names[i].name, name, len) == 0)
            return *id = var_names[i].id, 0;
    return -1;
}

/* Read the variable at s ("$name" or "${name}"): its id and the bytes it took. */
static int read_variable(const char *s, enum var_id *id, size_t *used, char *msg, size_t len)
{
    bool braced = s[1] == '{';
    const char *name = s + 1 + braced;
    size_t n = 0;
    while (name_char(name[n]))
        n++;
    if (n == 0)
        return snprintf(msg, len, "invalid variable name after \"$\""), -1;
    if (braced && name[n] != '}')
        return snprintf(msg, len, "the closing bracket in \"%.*s\" variable is missing",
                        (int)n, name), -1;
    if (var_lookup(name, n, id) < 0)
        return snprintf(msg, len, "unknown \"%.*s\" variable (known: uri, request_uri, args, "
                        "host, scheme, remote_addr, request_method, server_port)", (int)n,
                        name), -1;
    *used = 1 + braced + n + braced;
    return 0;
}

static bool is_control(unsigned char c)
{
    return c < 0x20 || c == 0x7f;
}

static void add_literal(struct vars_value *v, uint32_t off, uint32_t len)
{
    if (len > 0)
        v->parts[v->n_parts++] = (struct vars_part){VAR_LITERAL, off, len};
}

int vars_compile(const char *text, enum vars_context ctx, struct vars_value **out, char *msg,
                 size_t msg_len)
{
    size_t len = strlen(text), dollars = 0;
    for (size_t i = 0; i < len; i++) {
        dollars += text[i] == '$';
        if (ctx == VARS_HEADER && is_control((unsigned char)text[i]))
            return snprintf(msg, msg_len, "a control byte (0x%02x) in a header value",
                            (unsigned char)text[i]), -1;
    }
    if (len > UINT32_MAX)
        return snprintf(msg, msg_len, "too long"), -1;
    size_t max_parts = 2 * dollars + 1;
    size_t text_room = (len + 1 + 7) & ~(size_t)7; /* parts after it, aligned */
    struct vars_value *v = malloc(sizeof(*v) + text_room + max_parts * sizeof(v->parts[0]));
    if (!v)
        return snprintf(msg, msg_len, "out of memory"), -1;
    v->ctx = ctx;
    v->n_parts = 0;
    v->parts = (struct vars_part *)(void *)(v->text + text_room);
    size_t lit_start = 0, t = 0; /* literal bytes are packed into v->text from t on */
    for (size_t i = 0; i < len;) {
        if (text[i] != '$') {
            v->text[t++] = text[i++];
            continue;
        }
        enum var_id id;
        size_t used;
        if (read_variable(text + i, &id, &used, msg, msg_len) < 0) {
            free(v);
            return -1;
        }
        add_literal(v, (uint32_t)lit_start, (uint32_t)(t - lit_start));
        v->parts[v->n_parts++] = (struct vars_part){id, 0, 0};
        lit_start = t;
        i += used;
    }
    add_literal(v, (uint32_t)lit_start, (uint32_t)(t - lit_start));
    v->text[t] = '\0';
    *out = v;
    return 0;
}

void vars_free(struct vars_value *v)
{
    free(v);
}

bool vars_is_constant(const struct vars_value *v)
{
    for (unsigned i = 0; i < v->n_parts; i++)
        if (v->parts[i].id != VAR_LITERAL)
            return false;
    return true;
}

/* --- expanding ---------------------------------------------------------------------------- */

/* Where the bytes go: out[0..cap), n used so far; failed once something did not fit. */
struct sink {
    char *out;
    size_t cap, n;
    bool failed;
};

static const char hex_digits[] = "0123456789ABCDEF";

/* Append p[0..len), escaping control bytes in header context and lowercasing if asked. */
static void put(struct sink *s, const char *p, size_t len, bool escape, bool lower)
{
    if (!escape && !lower && !s->failed) { /* raw bytes: one copy */
        if (s->cap - s->n < len + 1) {
            s->failed = true;
            return;
        }
        memcpy(s->out + s->n, p, len);
        s->n += len;
        return;
    }
    for (size_t i = 0; i < len && !s->failed; i++) {
        unsigned char c = (unsigned char)p[i];
        size_t need = escape && is_control(c) ? 3 : 1;
        if (s->cap - s->n < need + 1) { /* + the NUL */
            s->failed = true;
            return;
        }
        if (need == 3) {
            s->out[s->n++] = '%';
            s->out[s->n++] = hex_digits[c >> 4];
            s->out[s->n++] = hex_digits[c & 15];
        } else {
            s->out[s->n++] = lower && c >= 'A' && c <= 'Z' ? (char)(c + 32) : (char)c;
        }
    }
}

/* The Host without port or trailing dot (nginx's $host), or the server's name. */
static struct http_slice host_of(const struct vars_source *src)
{
    struct http_slice h = src->http ? src->http->host : (struct http_slice){NULL, 0};
    if (h.len == 0) {
        const char *name = src->server_name ? src->server_name : "";
        return (struct http_slice){name, strlen(name)};
    }
    const char *end = h.p + h.len;
    const char *colon = h.p[0] == '[' ? memchr(h.p, ']', h.len) : h.p;
    colon = colon ? memchr(colon, ':', (size_t)(end - colon)) : NULL;
    if (colon)
        h.len = (size_t)(colon - h.p);
    if (h.len > 1 && h.p[h.len - 1] == '.')
        h.len--;
    return h;
}

/* The target from its path on: absolute-form's scheme and authority are not part of it. */
static struct http_slice request_uri_of(const struct http_request *http)
{
    struct http_slice t = http->target;
    if (http->path.p > t.p && http->path.p < t.p + t.len)
        return (struct http_slice){http->path.p, (size_t)(t.p + t.len - http->path.p)};
    return t;
}

/* Text of the address variables, into tmp (at least INET6_ADDRSTRLEN + 8 bytes). */
static size_t remote_addr_of(const struct sockaddr *sa, char *tmp, size_t cap)
{
    const void *a = NULL;
    if (sa && sa->sa_family == AF_INET)
        a = &((const struct sockaddr_in *)(const void *)sa)->sin_addr;
    else if (sa && sa->sa_family == AF_INET6)
        a = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
    if (!a) {
        tmp[0] = '\0';
        return sa && sa->sa_family == AF_UNIX ? (size_t)snprintf(tmp, cap, "unix:") : 0;
    }
    return inet_ntop(sa->sa_family, a, tmp, (socklen_t)cap) ? strlen(tmp) : 0;
}

static size_t port_of(const struct sockaddr *sa, char *tmp, size_t cap)
{
    unsigned port;
    if (sa && sa->sa_family == AF_INET)
        port = ntohs(((const struct sockaddr_in *)(const void *)sa)->sin_port);
    else if (sa && sa->sa_family == AF_INET6)
        port = ntohs(((const struct sockaddr_in6 *)(const void *)sa)->sin6_port);
    else
        return 0;
    return (size_t)snprintf(tmp, cap, "%u", port);
}

static void put_variable(struct sink *s, enum var_id id, const struct vars_source *src,
                         bool esc)
{
    const struct http_request *h = src->http;
    char tmp[INET6_ADDRSTRLEN + 8];
    struct http_slice v = {tmp, 0};
    switch (id) {
    case VAR_URI: v = (struct http_slice){src->uri, src->uri ? src->uri_len : 0}; break;
    case VAR_REQUEST_URI: v = h ? request_uri_of(h) : v; break;
    case VAR_ARGS: v = src->args ? *src->args : h ? h->query : v; break;
    case VAR_HOST: put(s, host_of(src).p, host_of(src).len, esc, true); return;
    case VAR_SCHEME: v = (struct http_slice){"http", 4}; break;
    case VAR_REMOTE_ADDR: v.len = remote_addr_of(src->peer, tmp, sizeof(tmp)); break;
    case VAR_REQUEST_METHOD: v = h ? h->method_name : v; break;
    case VAR_SERVER_PORT: v.len = port_of(src->local, tmp, sizeof(tmp)); break;
    case VAR_LITERAL: break;
    }
    put(s, v.p, v.len, esc, false);
}

long vars_expand(const struct vars_value *v, const struct vars_source *src, char *out,
                 size_t cap)
{
    if (cap == 0)
        return -1;
    struct sink s = {out, cap, 0, false};
    bool esc = v->ctx == VARS_HEADER;
    for (unsigned i = 0; i < v->n_parts && !s.failed; i++) {
        const struct vars_part *p = &v->parts[i];
        if (p->id == VAR_LITERAL)
            put(&s, v->text + p->off, p->len, false, false);
        else
            put_variable(&s, p->id, src, esc);
    }
    out[s.failed ? 0 : s.n] = '\0';
    return s.failed ? -1 : (long)s.n;
}
