/* strbuf.c — see strbuf.h. */
#include "strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STRBUF_FIRST_CAP 16384 /* a page of listing or status fits without growing */

bool strbuf_reserve(struct strbuf *b, size_t n)
{
    if (b->failed)
        return false;
    if (n <= b->cap - b->len)
        return true;
    if (n > b->max - b->len) {
        b->failed = true;
        return false;
    }
    size_t cap = b->cap ? b->cap : STRBUF_FIRST_CAP;
    while (cap - b->len < n)
        cap *= 2;
    if (cap > b->max)
        cap = b->max;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->failed = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void strbuf_add(struct strbuf *b, const char *s, size_t n)
{
    if (!strbuf_reserve(b, n))
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

void strbuf_puts(struct strbuf *b, const char *s)
{
    strbuf_add(b, s, strlen(s));
}

void strbuf_printf(struct strbuf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = true;
        return;
    }
    if ((size_t)n < sizeof(small)) {
        strbuf_add(b, small, (size_t)n);
        return;
    }
    /* Longer: format again straight into the buffer (with room for vsnprintf's NUL). */
    if (!strbuf_reserve(b, (size_t)n + 1))
        return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* --- escaping -------------------------------------------------------------------------- */

static const char replacement_char[] = "\xEF\xBF\xBD"; /* U+FFFD */

size_t utf8_seq_len(const unsigned char *p, size_t n)
{
    unsigned char c = p[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF; /* the range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else {
        return 0;
    }
    if (n < len || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    return len;
}

static const char *html_reference(unsigned char c)
{
    switch (c) {
    case '&': return "&amp;";
    case '<': return "&lt;";
    case '>': return "&gt;";
    case '"': return "&quot;";
    case '\'': return "&#39;";
    default: return c < 0x20 || c == 0x7F ? replacement_char : NULL;
    }
}

void strbuf_html(struct strbuf *b, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        const char *rep = html_reference(p[i]);
        size_t len = rep ? 0 : utf8_seq_len(p + i, n - i);
        if (rep || len == 0) {
            strbuf_puts(b, rep ? rep : replacement_char);
            i++;
        } else {
            strbuf_add(b, s + i, len);
            i += len;
        }
    }
}

void strbuf_json(struct strbuf *b, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    strbuf_add(b, "\"", 1);
    size_t i = 0;
    while (i < n) {
        unsigned char c = p[i];
        size_t len = 1;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            strbuf_add(b, e, 2);
        } else if (c < 0x20) {
            strbuf_printf(b, "\\u%04x", c);
        } else if ((len = utf8_seq_len(p + i, n - i)) == 0) {
            strbuf_puts(b, "\\ufffd");
            len = 1;
        } else {
            strbuf_add(b, s + i, len);
        }
        i += len;
    }
    strbuf_add(b, "\"", 1);
}

void strbuf_prom_label(struct strbuf *b, const char *s, size_t n)
{
    strbuf_add(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\' || s[i] == '"')
            strbuf_add(b, "\\", 1);
        if (s[i] == '\n')
            strbuf_add(b, "\\n", 2);
        else
            strbuf_add(b, s + i, 1);
    }
    strbuf_add(b, "\"", 1);
}

void strbuf_prom_family(struct strbuf *b, const char *name, const char *type, const char *help)
{
    strbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void strbuf_url_path(struct strbuf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                     (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~' ||
                     c == '/';
        if (plain) {
            strbuf_add(b, s + i, 1);
        } else {
            char e[3] = {'%', hex[c >> 4], hex[c & 15]};
            strbuf_add(b, e, 3);
        }
    }
}
