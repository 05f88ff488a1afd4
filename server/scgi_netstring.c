/* scgi_netstring.c — the SCGI protocol's request, written (scgi_netstring.h). */
#include "scgi_netstring.h"

#include <stdio.h>
#include <string.h>

size_t scgi_pair(uint8_t *out, size_t cap, const char *name, size_t name_len,
                 const char *value, size_t value_len)
{
    if (name_len == 0 || memchr(name, '\0', name_len) ||
        (value_len && memchr(value, '\0', value_len)))
        return 0;
    size_t need = name_len + 1 + value_len + 1;
    if (need < name_len || need > cap)
        return 0;
    memcpy(out, name, name_len);
    out[name_len] = '\0';
    if (value_len)
        memcpy(out + name_len + 1, value, value_len);
    out[name_len + 1 + value_len] = '\0';
    return need;
}

size_t scgi_request_head(uint8_t *out, size_t cap, const char *vars, size_t vars_len,
                         uint64_t content_length)
{
    char length[24];
    int ll = snprintf(length, sizeof(length), "%llu", (unsigned long long)content_length);
    size_t headers = sizeof("CONTENT_LENGTH") + (size_t)ll + 1 + vars_len;
    char prefix[24];
    int pl = snprintf(prefix, sizeof(prefix), "%zu:", headers);
    size_t need = (size_t)pl + headers + 1;
    if (vars_len > cap || need > cap)
        return 0;
    size_t o = 0;
    memcpy(out, prefix, (size_t)pl);
    o += (size_t)pl;
    memcpy(out + o, "CONTENT_LENGTH", sizeof("CONTENT_LENGTH"));
    o += sizeof("CONTENT_LENGTH");
    memcpy(out + o, length, (size_t)ll + 1);
    o += (size_t)ll + 1;
    if (vars_len)
        memcpy(out + o, vars, vars_len);
    o += vars_len;
    out[o++] = ',';
    return o;
}

size_t scgi_request(uint8_t *out, size_t cap, const char *vars, size_t vars_len,
                    const char *body, size_t body_len)
{
    size_t o = scgi_request_head(out, cap, vars, vars_len, body_len);
    if (o == 0 || body_len > cap - o)
        return 0;
    if (body_len)
        memcpy(out + o, body, body_len);
    return o + body_len;
}
