/* fastcgi_record.h — the FastCGI 1.0 record layer, as a web server speaks it to an
 * application: records written (a request's BEGIN_REQUEST, PARAMS, STDIN) and records
 * read (STDOUT, STDERR, END_REQUEST), with no I/O and no allocation.
 *
 * The reader is incremental: it is handed the bytes as they come, in pieces of any size
 * (a record split across reads, many records in one), and hands back the content of the
 * stream records as slices of those bytes, so that an answer of any length goes through
 * a fixed buffer. Anything the specification does not allow an application to send to a
 * server is an error, after which the connection is out of step and must be closed.
 */
#ifndef LFHTTPD_FASTCGI_RECORD_H
#define LFHTTPD_FASTCGI_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FCGI_VERSION_1 1
#define FCGI_HEADER_LEN 8
#define FCGI_CONTENT_MAX 65535

enum fcgi_type {
    FCGI_BEGIN_REQUEST = 1,
    FCGI_ABORT_REQUEST = 2,
    FCGI_END_REQUEST = 3,
    FCGI_PARAMS = 4,
    FCGI_STDIN = 5,
    FCGI_STDOUT = 6,
    FCGI_STDERR = 7,
    FCGI_DATA = 8,
    FCGI_GET_VALUES = 9,
    FCGI_GET_VALUES_RESULT = 10,
    FCGI_UNKNOWN_TYPE = 11,
};

#define FCGI_RESPONDER 1
#define FCGI_KEEP_CONN 1

/* END_REQUEST's protocolStatus. */
enum fcgi_protocol_status {
    FCGI_REQUEST_COMPLETE = 0,
    FCGI_CANT_MPX_CONN = 1,
    FCGI_OVERLOADED = 2,
    FCGI_UNKNOWN_ROLE = 3,
};

/* A record's 8-byte header for `content_len` bytes of content (at most FCGI_CONTENT_MAX)
 * and `padding_len` of padding, into out. */
void fcgi_header(uint8_t out[FCGI_HEADER_LEN], enum fcgi_type type, uint16_t request_id,
                 uint16_t content_len, uint8_t padding_len);

/* A BEGIN_REQUEST record for the responder role (16 bytes), flags FCGI_KEEP_CONN or 0. */
void fcgi_begin_request(uint8_t out[16], uint16_t request_id, uint8_t flags);

/* One name-value pair as PARAMS content, at out[0..cap): its length, or 0 when it does not
 * fit (or a length is over 2^31 - 1). */
size_t fcgi_param(uint8_t *out, size_t cap, const char *name, size_t name_len,
                  const char *value, size_t value_len);

/* What the reader found. */
enum fcgi_event {
    FCGI_EV_NEED = 0,   /* every byte given was taken: give more */
    FCGI_EV_STDOUT,     /* data: a piece of the answer's output */
    FCGI_EV_STDERR,     /* data: a piece of the application's error stream */
    FCGI_EV_END,        /* END_REQUEST: app_status, protocol_status set */
    FCGI_EV_ERROR,      /* not a record an application may send: why says which */
};

/* The reader's state between pieces: zero it (fcgi_reader_init) for each connection. */
struct fcgi_reader {
    uint16_t request_id;   /* the request's: records of another are an error */
    uint8_t hdr[FCGI_HEADER_LEN];
    uint8_t hdr_have;      /* header bytes gathered */
    uint8_t type;          /* of the record being read (hdr complete) */
    uint16_t content_left; /* its content still to come */
    uint8_t padding_left;
    uint8_t end[8];        /* END_REQUEST's body, gathered */
    uint8_t end_have;
    bool ended;            /* END_REQUEST was read: nothing may follow */
    uint32_t app_status;
    uint8_t protocol_status;
    const char *why;       /* FCGI_EV_ERROR: what was wrong */
};

void fcgi_reader_init(struct fcgi_reader *r, uint16_t request_id);

/* Read from p[0..n): *used is set to the bytes taken. Returns FCGI_EV_STDOUT or _STDERR
 * with *data, *len a slice of p (the next piece of that stream; an empty record, a
 * stream's end, is skipped), FCGI_EV_END once END_REQUEST is whole, FCGI_EV_ERROR on a
 * record the application may not send, or FCGI_EV_NEED when all of p was taken. Call
 * again with p + *used until it returns FCGI_EV_NEED. */
enum fcgi_event fcgi_read(struct fcgi_reader *r, const uint8_t *p, size_t n, size_t *used,
                          const uint8_t **data, size_t *len);

#endif
