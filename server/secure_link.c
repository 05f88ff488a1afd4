/* secure_link.c — $secure_link and $secure_link_expires (see secure_link.h). */
#include "secure_link.h"

#include <openssl/evp.h>
#include <stdint.h>
#include <string.h>

#define SECURE_LINK_EXPR_MAX 4096

/* base64url (or base64's alphabet's shared part) of s[0, len), padding optional, into 16
 * bytes: true when it is exactly 16. */
static bool decode_hash(const char *s, size_t len, unsigned char out[16])
{
    while (len && s[len - 1] == '=')
        len--;
    if (len != 22) /* 16 bytes are 22 characters */
        return false;
    uint32_t acc = 0;
    unsigned bits = 0, n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        int v = c >= 'A' && c <= 'Z'   ? c - 'A'
                : c >= 'a' && c <= 'z' ? c - 'a' + 26
                : c >= '0' && c <= '9' ? c - '0' + 52
                : c == '-'             ? 62
                : c == '_'             ? 63
                                       : -1;
        if (v < 0)
            return false;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (unsigned char)(acc >> bits);
        }
    }
    return n == 16;
}

static bool md5_of(const char *s, size_t len, unsigned char out[16])
{
    unsigned int n = 0;
    return EVP_Digest(s, len, out, &n, EVP_md5(), NULL) == 1 && n == 16;
}

static long put(const char *v, size_t len, char *out, size_t cap)
{
    if (len >= cap)
        return -1;
    memcpy(out, v, len);
    out[len] = '\0';
    return (long)len;
}

/* nginx's older form: /PREFIX/HASH/LINK, HASH the hex MD5 of LINK and the secret. */
static long old_form(const struct secure_link_conf *conf, const struct request *req,
                     char *out, size_t cap)
{
    const struct http_slice t = req->http->target;
    const char *p = t.p + 1, *end = t.p + t.len;
    while (p < end && *p != '/')
        p++;
    if (p >= end)
        return 0;
    const char *hash = ++p;
    while (p < end && *p != '/')
        p++;
    if (p - hash != 32 || p >= end)
        return 0;
    const char *link = p + 1;
    size_t link_len = (size_t)(end - link), secret_len = strlen(conf->secret);
    char text[SECURE_LINK_EXPR_MAX];
    if (link_len + secret_len > sizeof(text))
        return 0;
    memcpy(text, link, link_len);
    memcpy(text + link_len, conf->secret, secret_len);
    unsigned char md5[16];
    if (!md5_of(text, link_len + secret_len, md5))
        return 0;
    static const char hex[] = "0123456789abcdef";
    for (unsigned i = 0; i < 16; i++) {
        char hi = hash[2 * i] | 0x20, lo = hash[2 * i + 1] | 0x20; /* without case */
        if (hi != hex[md5[i] >> 4] || lo != hex[md5[i] & 15])
            return 0;
    }
    return put(link, link_len, out, cap);
}

long secure_link_value(const struct secure_link_conf *conf, const struct request *req,
                       const struct vars_source *src, bool expires, char *out, size_t cap)
{
    if (!conf)
        return 0;
    if (conf->secret && !expires)
        return old_form(conf, req, out, cap);
    if (!conf->link || (!conf->md5 && !expires))
        return 0;
    char link[SECURE_LINK_EXPR_MAX];
    long n = vars_expand(conf->link, src, link, sizeof(link));
    if (n < 0)
        return 0;
    const char *comma = memchr(link, ',', (size_t)n);
    size_t hash_len = comma ? (size_t)(comma - link) : (size_t)n;
    long long expiry = 0;
    if (comma) {
        const char *e = comma + 1, *last = link + n;
        if (e == last)
            return 0;
        for (; e < last; e++) {
            if (*e < '0' || *e > '9' || expiry > (long long)1e15)
                return 0;
            expiry = expiry * 10 + (*e - '0');
        }
        if (expiry <= 0)
            return 0;
    }
    if (expires)
        return comma ? put(comma + 1, (size_t)(link + n - comma - 1), out, cap) : 0;
    unsigned char want[16], got[16];
    if (hash_len > 24 || !decode_hash(link, hash_len, want))
        return 0;
    char text[SECURE_LINK_EXPR_MAX];
    long m = vars_expand(conf->md5, src, text, sizeof(text));
    if (m < 0 || !md5_of(text, (size_t)m, got) || memcmp(want, got, 16) != 0)
        return 0;
    return put(expiry && expiry < (long long)req->now_s ? "0" : "1", 1, out, cap);
}
