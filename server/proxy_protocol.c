/* proxy_protocol.c — the PROXY protocol header, versions 1 and 2 (proxy_protocol.h). */
#include "proxy_protocol.h"

#include <arpa/inet.h>
#include <stdint.h>
#include <string.h>

static const char v2_signature[12] = "\r\n\r\n\0\r\nQUIT\n";

/* One v1 address of family (TCP4's AF_INET, TCP6's AF_INET6), up to the space after it,
 * into a. */
static const char *v1_addr(const char *p, const char *end, int family, union request_addr *a)
{
    const char *sp = memchr(p, ' ', (size_t)(end - p));
    char text[INET6_ADDRSTRLEN];
    size_t n = sp ? (size_t)(sp - p) : 0;
    if (!sp || n == 0 || n >= sizeof(text))
        return NULL;
    memcpy(text, p, n);
    text[n] = '\0';
    memset(a, 0, sizeof(*a));
    if (family == AF_INET && inet_pton(AF_INET, text, &a->in.sin_addr) == 1)
        a->in.sin_family = AF_INET;
    else if (family == AF_INET6 && inet_pton(AF_INET6, text, &a->in6.sin6_addr) == 1)
        a->in6.sin6_family = AF_INET6;
    else
        return NULL;
    return sp + 1;
}

/* A decimal port 0..65535 ending at `stop`, into a. */
static const char *v1_port(const char *p, const char *end, char stop, union request_addr *a)
{
    unsigned port = 0, digits = 0;
    for (; p < end && *p >= '0' && *p <= '9'; p++, digits++)
        port = port * 10 + (unsigned)(*p - '0');
    if (digits == 0 || digits > 5 || port > 65535 || p == end || *p != stop)
        return NULL;
    if (a->sa.sa_family == AF_INET6)
        a->in6.sin6_port = htons((uint16_t)port);
    else
        a->in.sin_port = htons((uint16_t)port);
    return p + 1;
}

static long v1_parse(const char *buf, size_t len, struct proxy_protocol_addrs *out)
{
    size_t have = len < 6 ? len : 6;
    if (memcmp(buf, "PROXY ", have) != 0)
        return -1;
    const char *lf = memchr(buf, '\n', len < PROXY_PROTOCOL_V1_MAX ? len : PROXY_PROTOCOL_V1_MAX);
    if (!lf)
        return len < PROXY_PROTOCOL_V1_MAX ? 0 : -1;
    long total = (long)(lf - buf + 1);
    if (lf == buf || lf[-1] != '\r' || total < 8)
        return -1;
    const char *p = buf + 6, *end = lf - 1; /* the CR */
    memset(out, 0, sizeof(*out));
    if ((size_t)(end - p) >= 7 && memcmp(p, "UNKNOWN", 7) == 0)
        return total;
    if (end - p < 5 || memcmp(p, "TCP", 3) != 0 || (p[3] != '4' && p[3] != '6') || p[4] != ' ')
        return -1;
    int family = p[3] == '4' ? AF_INET : AF_INET6; /* both addresses of it */
    p += 5;
    if (!(p = v1_addr(p, end, family, &out->src)) || !(p = v1_addr(p, end, family, &out->dst)) ||
        !(p = v1_port(p, end + 1, ' ', &out->src)) || !(p = v1_port(p, end + 1, '\r', &out->dst)))
        return -1;
    return total;
}

static long v2_parse(const unsigned char *b, size_t len, struct proxy_protocol_addrs *out)
{
    if (len < 16)
        return 0;
    if ((b[12] >> 4) != 2)
        return -1;
    size_t body = (size_t)b[14] << 8 | b[15];
    if (16 + body > PROXY_PROTOCOL_MAX)
        return -1;
    if (len < 16 + body)
        return 0;
    memset(out, 0, sizeof(*out));
    long total = (long)(16 + body);
    unsigned command = b[12] & 0x0f, family = b[13] >> 4, transport = b[13] & 0x0f;
    if (command > 1)
        return -1;
    if (command == 0 || (transport != 1 && transport != 2)) /* LOCAL, or not a stream */
        return total;
    const unsigned char *a = b + 16;
    if (family == 1) {
        if (body < 12)
            return -1;
        out->src.in.sin_family = out->dst.in.sin_family = AF_INET;
        memcpy(&out->src.in.sin_addr, a, 4);
        memcpy(&out->dst.in.sin_addr, a + 4, 4);
        memcpy(&out->src.in.sin_port, a + 8, 2);
        memcpy(&out->dst.in.sin_port, a + 10, 2);
    } else if (family == 2) {
        if (body < 36)
            return -1;
        out->src.in6.sin6_family = out->dst.in6.sin6_family = AF_INET6;
        memcpy(&out->src.in6.sin6_addr, a, 16);
        memcpy(&out->dst.in6.sin6_addr, a + 16, 16);
        memcpy(&out->src.in6.sin6_port, a + 32, 2);
        memcpy(&out->dst.in6.sin6_port, a + 34, 2);
    }
    return total;
}

long proxy_protocol_parse(const char *buf, size_t len, struct proxy_protocol_addrs *out)
{
    if (len == 0)
        return 0;
    size_t sig = len < sizeof(v2_signature) ? len : sizeof(v2_signature);
    if (memcmp(buf, v2_signature, sig) == 0)
        return v2_parse((const unsigned char *)buf, len, out);
    return v1_parse(buf, len, out);
}
