/* scgi_netstring.h — the SCGI protocol's request, as a web server writes it to an
 * application (nginx's scgi_pass): the headers as a netstring ("LENGTH:" then the bytes
 * then ","), each header a name and a value ended by NUL, CONTENT_LENGTH first (the
 * body's length, in decimal), then the body. No I/O and no allocation.
 */
#ifndef LFHTTPD_SCGI_NETSTRING_H
#define LFHTTPD_SCGI_NETSTRING_H

#include <stddef.h>
#include <stdint.h>

/* One header, "name\0value\0", at out[0..cap): its length, or 0 when it does not fit or
 * the name is empty or either part holds a NUL. */
size_t scgi_pair(uint8_t *out, size_t cap, const char *name, size_t name_len,
                 const char *value, size_t value_len);

/* The netstring (CONTENT_LENGTH = body_len, then vars[0..vars_len), pairs as scgi_pair
 * writes them) and the body at out[0..cap): the length, or 0 when it does not fit. */
size_t scgi_request(uint8_t *out, size_t cap, const char *vars, size_t vars_len,
                    const char *body, size_t body_len);

/* The netstring alone, for a body that follows as it arrives (content_length bytes). */
size_t scgi_request_head(uint8_t *out, size_t cap, const char *vars, size_t vars_len,
                         uint64_t content_length);

/* The most scgi_request writes for vars_len and body_len bytes. */
static inline size_t scgi_request_size(size_t vars_len, size_t body_len)
{
    /* "LENGTH:" (20 digits), "CONTENT_LENGTH\0" and 20 digits and NUL, ",", the rest */
    return 21 + 15 + 21 + 1 + vars_len + body_len;
}

#endif
