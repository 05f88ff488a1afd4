/* strbuf.h — a growable text buffer, and the escapers that write into it.
 *
 * Whatever a module renders (a directory listing, the status page) is built here: append
 * bytes, strings or printf output, escaped for HTML, JSON or a URL path. The buffer grows
 * by doubling up to its `max`; past it, or out of memory, it fails: `failed` is set, and
 * nothing more is added, so the caller checks once at the end and never sends a page cut
 * short. The memory is the caller's to free (free(b.p)), or to hand to a response
 * (resp_body_owned with free).
 *
 *     struct strbuf b = STRBUF_INIT(64 << 20);
 *     strbuf_puts(&b, "<p>");
 *     strbuf_html(&b, name, name_len);
 *     if (b.failed) ...
 */
#ifndef LFHTTPD_STRBUF_H
#define LFHTTPD_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

struct strbuf {
    char *p;     /* malloc'd; NULL until something is added */
    size_t len;  /* bytes of text (not NUL-terminated) */
    size_t cap;  /* bytes allocated */
    size_t max;  /* the most it may hold; adding past it fails */
    bool failed; /* out of memory or past max: nothing more is added */
};

#define STRBUF_INIT(max_bytes) ((struct strbuf){.max = (max_bytes)})

/* Make room for n more bytes. False (and failed set) if that is past max or out of memory. */
bool strbuf_reserve(struct strbuf *b, size_t n);
void strbuf_add(struct strbuf *b, const char *s, size_t n);
void strbuf_puts(struct strbuf *b, const char *s);
void strbuf_printf(struct strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Text for an HTML element or a quoted attribute value: & < > " ' as references; control
 * bytes and invalid UTF-8 as U+FFFD, so that hostile names (files, headers) stay text. */
void strbuf_html(struct strbuf *b, const char *s, size_t n);
/* A JSON string, quotes included (RFC 8259): valid JSON whatever the bytes are (invalid
 * UTF-8 becomes \ufffd). */
void strbuf_json(struct strbuf *b, const char *s, size_t n);
/* A URL path: every byte but the unreserved ones (RFC 3986 section 2.3) and '/'
 * percent-encoded, so that a link names exactly these bytes. */
void strbuf_url_path(struct strbuf *b, const char *s, size_t n);

/* A label value of the Prometheus text format, quotes included: \ " and newline escaped. */
void strbuf_prom_label(struct strbuf *b, const char *s, size_t n);
/* A metric family's HELP and TYPE lines (help is plain text without backslash or newline). */
void strbuf_prom_family(struct strbuf *b, const char *name, const char *type, const char *help);

/* The length of the well-formed UTF-8 sequence at p (of n bytes, n > 0), or 0 if there is
 * none (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF). */
size_t utf8_seq_len(const unsigned char *p, size_t n);

#endif
