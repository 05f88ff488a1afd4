/* http_params.c — see http_params.h. */
#include "http_params.h"

#include <string.h>

bool http_query_has(struct http_slice query, const char *name, const char *value)
{
    if (query.len == 0)
        return false; /* (query.p is NULL then) */
    size_t nl = strlen(name), vl = strlen(value);
    const char *p = query.p, *end = query.p + query.len;
    while (p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *stop = amp ? amp : end;
        if ((size_t)(stop - p) == nl + 1 + vl && memcmp(p, name, nl) == 0 && p[nl] == '=' &&
            memcmp(p + nl + 1, value, vl) == 0)
            return true;
        p = stop + 1;
    }
    return false;
}

/* tchar, RFC 9110 section 5.6.2 */
static bool is_tchar(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static const char *skip_ows(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    return p;
}

static const char *skip_token(const char *p, const char *end)
{
    while (p < end && is_tchar(*p))
        p++;
    return p;
}

int http_qvalue_parse(const char *p, size_t len)
{
    if (len == 0 || (p[0] != '0' && p[0] != '1'))
        return -1;
    int q = (p[0] - '0') * 1000;
    if (len == 1)
        return q;
    if (p[1] != '.' || len > 5)
        return -1;
    int scale = 100;
    for (size_t i = 2; i < len; i++, scale /= 10) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        q += (p[i] - '0') * scale;
    }
    return q > 1000 ? -1 : q;
}

/* A parameter value: a token or a quoted-string. Returns the end, or NULL if malformed. */
static const char *param_value(const char *p, const char *end, const char **v, size_t *vlen)
{
    if (p < end && *p == '"') {
        const char *q = p + 1;
        while (q < end && *q != '"')
            q += (*q == '\\' && q + 1 < end) ? 2 : 1;
        if (q >= end)
            return NULL;
        *v = p + 1;
        *vlen = (size_t)(q - p - 1);
        return q + 1;
    }
    const char *q = skip_token(p, end);
    *v = p;
    *vlen = (size_t)(q - p);
    return q;
}

/* The parameters after an element: `*( OWS ";" OWS name "=" value )`. Sets *q from "q=";
 * returns the end, or NULL if malformed. */
static const char *parse_params(const char *p, const char *end, int *q)
{
    for (;;) {
        p = skip_ows(p, end);
        if (p >= end || *p != ';')
            return p;
        p = skip_ows(p + 1, end);
        const char *name = p;
        p = skip_token(p, end);
        size_t nlen = (size_t)(p - name);
        p = skip_ows(p, end);
        if (nlen == 0 || p >= end || *p != '=')
            return NULL;
        p = skip_ows(p + 1, end);
        const char *v;
        size_t vlen;
        p = param_value(p, end, &v, &vlen);
        if (!p)
            return NULL;
        if (nlen == 1 && (name[0] == 'q' || name[0] == 'Q') &&
            (*q = http_qvalue_parse(v, vlen)) < 0)
            return NULL;
    }
}

bool http_qlist_next(const char **pp, const char *end, struct http_qitem *out)
{
    const char *p = *pp;
    for (;;) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == ','))
            p++;
        if (p >= end) {
            *pp = p;
            return false;
        }
        const char *tok = p;
        p = skip_token(p, end);
        if (p > tok && p < end && *p == '/') /* a media range: type/subtype */
            p = skip_token(p + 1, end);
        size_t tlen = (size_t)(p - tok);
        int q = 1000;
        const char *after = tlen && tok[tlen - 1] != '/' ? parse_params(p, end, &q) : NULL;
        if (after)
            after = skip_ows(after, end);
        if (!after || (after < end && *after != ',')) { /* malformed: skip the element */
            const char *comma = memchr(p, ',', (size_t)(end - p));
            p = comma ? comma : end;
            continue;
        }
        *pp = after;
        *out = (struct http_qitem){{tok, tlen}, q};
        return true;
    }
}
