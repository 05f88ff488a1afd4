/* uwsgi_packet.h — the uwsgi protocol's request packet, as a web server writes it to an
 * application (nginx's uwsgi_pass): a 4-byte header (modifier1, the size of the variables
 * as 16 bits little-endian, modifier2), then the variables, each a name and a value with
 * a 16-bit little-endian length before each; the request's body follows the packet. No
 * I/O and no allocation.
 */
#ifndef LFHTTPD_UWSGI_PACKET_H
#define LFHTTPD_UWSGI_PACKET_H

#include <stddef.h>
#include <stdint.h>

#define UWSGI_HEADER_LEN 4
#define UWSGI_DATASIZE_MAX 65535 /* the variables' bytes in all: the header's 16 bits */

/* One variable at out[0..cap): its length, or 0 when it does not fit or a part is longer
 * than 65535 bytes. */
size_t uwsgi_pair(uint8_t *out, size_t cap, const char *name, size_t name_len,
                  const char *value, size_t value_len);

/* The packet's header for datasize bytes of variables. */
void uwsgi_header(uint8_t out[UWSGI_HEADER_LEN], uint8_t modifier1, uint16_t datasize,
                  uint8_t modifier2);

/* Header, variables (vars[0..vars_len), pairs as uwsgi_pair writes them) and body at
 * out[0..cap): the length, or 0 when the variables are more than UWSGI_DATASIZE_MAX bytes
 * or the whole does not fit. */
size_t uwsgi_request(uint8_t *out, size_t cap, uint8_t modifier1, uint8_t modifier2,
                     const char *vars, size_t vars_len, const char *body, size_t body_len);

/* What uwsgi_request writes for vars_len and body_len bytes. */
static inline size_t uwsgi_request_size(size_t vars_len, size_t body_len)
{
    return UWSGI_HEADER_LEN + vars_len + body_len;
}

#endif
