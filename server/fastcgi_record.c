/* fastcgi_record.c — FastCGI 1.0 records, written and read (fastcgi_record.h). */
#include "fastcgi_record.h"

#include <string.h>

void fcgi_header(uint8_t out[FCGI_HEADER_LEN], enum fcgi_type type, uint16_t request_id,
                 uint16_t content_len, uint8_t padding_len)
{
    out[0] = FCGI_VERSION_1;
    out[1] = (uint8_t)type;
    out[2] = (uint8_t)(request_id >> 8);
    out[3] = (uint8_t)request_id;
    out[4] = (uint8_t)(content_len >> 8);
    out[5] = (uint8_t)content_len;
    out[6] = padding_len;
    out[7] = 0;
}

void fcgi_begin_request(uint8_t out[16], uint16_t request_id, uint8_t flags)
{
    fcgi_header(out, FCGI_BEGIN_REQUEST, request_id, 8, 0);
    memset(out + 8, 0, 8);
    out[9] = FCGI_RESPONDER;
    out[10] = flags;
}

/* A length as the name-value pairs write it: one byte below 128, else four. */
static size_t put_length(uint8_t *out, size_t len)
{
    if (len < 128) {
        out[0] = (uint8_t)len;
        return 1;
    }
    out[0] = (uint8_t)(0x80 | (len >> 24));
    out[1] = (uint8_t)(len >> 16);
    out[2] = (uint8_t)(len >> 8);
    out[3] = (uint8_t)len;
    return 4;
}

size_t fcgi_param(uint8_t *out, size_t cap, const char *name, size_t name_len,
                  const char *value, size_t value_len)
{
    if (name_len > 0x7fffffff || value_len > 0x7fffffff)
        return 0;
    size_t need = (name_len < 128 ? 1 : 4) + (value_len < 128 ? 1 : 4) + name_len + value_len;
    if (need > cap)
        return 0;
    size_t o = put_length(out, name_len);
    o += put_length(out + o, value_len);
    memcpy(out + o, name, name_len);
    o += name_len;
    memcpy(out + o, value, value_len);
    return o + value_len;
}

void fcgi_reader_init(struct fcgi_reader *r, uint16_t request_id)
{
    memset(r, 0, sizeof(*r));
    r->request_id = request_id;
}

static enum fcgi_event fail(struct fcgi_reader *r, const char *why)
{
    r->why = why;
    return FCGI_EV_ERROR;
}

/* A record's header is whole: check it and start its content. */
static enum fcgi_event begin_record(struct fcgi_reader *r)
{
    const uint8_t *h = r->hdr;
    if (h[0] != FCGI_VERSION_1)
        return fail(r, "a record of another version than 1");
    if (r->ended)
        return fail(r, "a record after END_REQUEST");
    r->type = h[1];
    uint16_t id = (uint16_t)(h[2] << 8 | h[3]);
    r->content_left = (uint16_t)(h[4] << 8 | h[5]);
    r->padding_left = h[6];
    r->end_have = 0;
    switch (r->type) {
    case FCGI_STDOUT:
    case FCGI_STDERR:
        break;
    case FCGI_END_REQUEST:
        if (r->content_left != 8)
            return fail(r, "an END_REQUEST whose body is not 8 bytes");
        break;
    default:
        return fail(r, "a record type an application does not send to a server");
    }
    if (id != r->request_id)
        return fail(r, "a record of another request");
    return FCGI_EV_NEED;
}

enum fcgi_event fcgi_read(struct fcgi_reader *r, const uint8_t *p, size_t n, size_t *used,
                          const uint8_t **data, size_t *len)
{
    size_t i = 0;
    *data = NULL;
    *len = 0;
    for (;;) {
        if (r->hdr_have < FCGI_HEADER_LEN) { /* a header being gathered */
            if (i == n)
                break;
            size_t take = FCGI_HEADER_LEN - r->hdr_have;
            if (take > n - i)
                take = n - i;
            memcpy(r->hdr + r->hdr_have, p + i, take);
            r->hdr_have = (uint8_t)(r->hdr_have + take);
            i += take;
            if (r->hdr_have == FCGI_HEADER_LEN && begin_record(r) == FCGI_EV_ERROR) {
                *used = i;
                return FCGI_EV_ERROR;
            }
            continue;
        }
        if (r->content_left > 0) {
            if (i == n)
                break;
            size_t take = r->content_left < n - i ? r->content_left : n - i;
            r->content_left = (uint16_t)(r->content_left - take);
            if (r->type == FCGI_END_REQUEST) {
                memcpy(r->end + r->end_have, p + i, take);
                r->end_have = (uint8_t)(r->end_have + take);
                i += take;
                continue;
            }
            *data = p + i;
            *len = take;
            *used = i + take;
            return r->type == FCGI_STDOUT ? FCGI_EV_STDOUT : FCGI_EV_STDERR;
        }
        if (r->padding_left > 0) {
            if (i == n)
                break;
            size_t take = r->padding_left < n - i ? r->padding_left : n - i;
            r->padding_left = (uint8_t)(r->padding_left - take);
            i += take;
            continue;
        }
        r->hdr_have = 0; /* the record is over */
        if (r->type == FCGI_END_REQUEST) {
            r->ended = true;
            r->app_status = (uint32_t)r->end[0] << 24 | (uint32_t)r->end[1] << 16 |
                            (uint32_t)r->end[2] << 8 | r->end[3];
            r->protocol_status = r->end[4];
            *used = i;
            return FCGI_EV_END;
        }
    }
    *used = i;
    return FCGI_EV_NEED;
}
