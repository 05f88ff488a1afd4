/* vars_upstream.c — nginx's $upstream_* values from the proxy's record of its tries. See
 * vars_upstream.h. */
#include "vars_upstream.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* One entry's value of field into out; the length, or -1 if it does not fit. */
static int format_try(const struct vars_upstream_try *t, enum vars_upstream_field field, char *out,
                      size_t cap)
{
    int64_t us = -1;
    uint64_t count = 0;
    switch (field) {
    case VARS_UPSTREAM_ADDR:
        return snprintf(out, cap, "%s", t->addr ? t->addr : "");
    case VARS_UPSTREAM_STATUS:
        return t->status ? snprintf(out, cap, "%d", t->status) : snprintf(out, cap, "-");
    case VARS_UPSTREAM_RESPONSE_TIME:
        us = t->response_us;
        goto time;
    case VARS_UPSTREAM_CONNECT_TIME:
        us = t->connect_us;
        goto time;
    case VARS_UPSTREAM_HEADER_TIME:
        us = t->header_us;
        goto time;
    case VARS_UPSTREAM_RESPONSE_LENGTH:
        count = t->response_length;
        break;
    case VARS_UPSTREAM_BYTES_RECEIVED:
        count = t->bytes_received;
        break;
    case VARS_UPSTREAM_BYTES_SENT:
        count = t->bytes_sent;
        break;
    }
    return snprintf(out, cap, "%llu", (unsigned long long)count);
time:
    if (us < 0) return snprintf(out, cap, "-");
    int64_t ms = us / 1000;
    return snprintf(out, cap, "%lld.%03lld", (long long)(ms / 1000), (long long)(ms % 1000));
}

long vars_upstream_format(const struct vars_upstream *u, enum vars_upstream_field field, char *out,
                          size_t cap)
{
    size_t n = 0;
    for (unsigned i = 0; u && i < u->n; i++) {
        if (i > 0) {
            if (n + 2 >= cap) return -1;
            memcpy(out + n, ", ", 2);
            n += 2;
        }
        int w = format_try(&u->tries[i], field, out + n, cap - n);
        if (w < 0 || (size_t)w >= cap - n) return -1;
        n += (size_t)w;
    }
    return (long)n;
}

/* Is the field name f[0..flen) name[0..len), '-' and '_' alike (nginx compares them so)? */
static bool field_is(const char *f, size_t flen, const char *name, size_t len)
{
    if (flen != len) return false;
    for (size_t i = 0; i < len; i++) {
        char a = f[i] == '_' ? '-' : f[i], b = name[i] == '_' ? '-' : name[i];
        if (a >= 'A' && a <= 'Z') a = (char)(a + 32);
        if (a != b) return false;
    }
    return true;
}

struct http_slice vars_upstream_header(const struct vars_upstream *u, const char *name, size_t len,
                                       bool *found)
{
    *found = false;
    if (!u || !u->head) return (struct http_slice){"", 0};
    const char *p = memchr(u->head, '\n', u->head_len); /* past the status line */
    const char *end = u->head + u->head_len;
    while (p && ++p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol) break;
        const char *colon = memchr(p, ':', (size_t)(eol - p));
        if (colon && field_is(p, (size_t)(colon - p), name, len)) {
            const char *v = colon + 1, *e = eol;
            while (v < e && (*v == ' ' || *v == '\t'))
                v++;
            while (e > v && (e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t'))
                e--;
            *found = true;
            return (struct http_slice){v, (size_t)(e - v)};
        }
        p = eol;
    }
    return (struct http_slice){"", 0};
}

struct http_slice vars_upstream_cookie(const struct vars_upstream *u, const char *name,
                                       size_t len)
{
    if (!u || !u->head)
        return (struct http_slice){"", 0};
    const char *p = memchr(u->head, '\n', u->head_len); /* past the status line */
    const char *end = u->head + u->head_len;
    while (p && ++p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            break;
        const char *colon = memchr(p, ':', (size_t)(eol - p));
        const char *v = colon ? colon + 1 : eol, *e = eol;
        while (v < e && (*v == ' ' || *v == '\t'))
            v++;
        while (e > v && (e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if (colon && field_is(p, (size_t)(colon - p), "set-cookie", 10) &&
            (size_t)(e - v) > len && v[len] == '=' && strncasecmp(v, name, len) == 0) {
            const char *at = v + len + 1;
            const char *semi = memchr(at, ';', (size_t)(e - at));
            return (struct http_slice){at, (size_t)((semi ? semi : e) - at)};
        }
        p = eol;
    }
    return (struct http_slice){"", 0};
}
