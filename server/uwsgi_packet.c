/* uwsgi_packet.c — the uwsgi protocol's request packet, written (uwsgi_packet.h). */
#include "uwsgi_packet.h"

#include <string.h>

static void put_le16(uint8_t *out, size_t n)
{
    out[0] = (uint8_t)(n & 0xff);
    out[1] = (uint8_t)(n >> 8);
}

size_t uwsgi_pair(uint8_t *out, size_t cap, const char *name, size_t name_len,
                  const char *value, size_t value_len)
{
    if (name_len > 0xffff || value_len > 0xffff)
        return 0;
    size_t need = 2 + name_len + 2 + value_len;
    if (need > cap)
        return 0;
    put_le16(out, name_len);
    memcpy(out + 2, name, name_len);
    put_le16(out + 2 + name_len, value_len);
    memcpy(out + 4 + name_len, value, value_len);
    return need;
}

void uwsgi_header(uint8_t out[UWSGI_HEADER_LEN], uint8_t modifier1, uint16_t datasize,
                  uint8_t modifier2)
{
    out[0] = modifier1;
    put_le16(out + 1, datasize);
    out[3] = modifier2;
}

size_t uwsgi_request(uint8_t *out, size_t cap, uint8_t modifier1, uint8_t modifier2,
                     const char *vars, size_t vars_len, const char *body, size_t body_len)
{
    if (vars_len > UWSGI_DATASIZE_MAX || body_len > cap ||
        uwsgi_request_size(vars_len, 0) > cap - body_len)
        return 0;
    uwsgi_header(out, modifier1, (uint16_t)vars_len, modifier2);
    if (vars_len)
        memcpy(out + UWSGI_HEADER_LEN, vars, vars_len);
    if (body_len)
        memcpy(out + UWSGI_HEADER_LEN + vars_len, body, body_len);
    return uwsgi_request_size(vars_len, body_len);
}
