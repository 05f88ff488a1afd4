/* http_upstream.h — what an HTTP/1.1 upstream answers: the response head (RFC 9112).
 *
 * The reverse proxy reads an upstream's answer with this, as the server reads a client's
 * request with http_parse.h, and with the same guarantees: a pure function of the bytes
 * given, no I/O, no allocation, every value a slice into the caller's buffer, safe on
 * hostile input of any length. It is as strict as the request parser, because a proxy
 * that guesses where an upstream's response ends is how a response gets spliced into the
 * wrong client's connection.
 */
#ifndef LFHTTPD_HTTP_UPSTREAM_H
#define LFHTTPD_HTTP_UPSTREAM_H

#include "http_parse.h"

/* Why a head was refused. The proxy answers 502 to all of them (or cuts the client's
 * connection if it already sent a head) and never reuses the upstream connection; the
 * reasons exist for the error log. */
enum http_upstream_error {
    HTTP_UPSTREAM_BAD_STATUS_LINE = -1, /* not HTTP-version SP 3DIGIT SP reason */
    HTTP_UPSTREAM_BAD_VERSION = -2,     /* well formed, but not HTTP/1.x */
    HTTP_UPSTREAM_BAD_STATUS = -3,      /* a status code outside 100..599 */
    HTTP_UPSTREAM_BAD_LINE_END = -4,    /* a bare LF or a bare CR */
    HTTP_UPSTREAM_BAD_FIELD = -5,       /* a field line that is not name ":" value */
    HTTP_UPSTREAM_BAD_CONTENT_LENGTH = -6, /* malformed, a list, or repeated */
    HTTP_UPSTREAM_BAD_TRANSFER_ENCODING = -7, /* empty, malformed, chunked twice, in 1.0 */
    HTTP_UPSTREAM_BAD_CONNECTION = -8,  /* a Connection option that is not a token */
    HTTP_UPSTREAM_TOO_LARGE = -9,       /* over max_header_bytes or max_headers */
};

struct http_response_head {
    int status;                /* 100..599 */
    int version_minor;         /* 0 for HTTP/1.0, 1 for HTTP/1.1 (and 1.x, x > 1) */
    struct http_slice reason;  /* the reason-phrase, maybe empty; never to be trusted */

    struct http_header headers[HTTP_MAX_HEADERS]; /* every field line, in order */
    unsigned n_headers;

    /* How the body that follows is framed: NONE (1xx, 204, 304, any answer to HEAD, a
     * 2xx to CONNECT), LENGTH, CHUNKED (the final transfer coding is chunked) or CLOSE
     * (no framing field, or a final coding that is not chunked: RFC 9112 section 6.3). */
    enum http_framing framing;
    uint64_t content_length;   /* the Content-Length given; it frames only with LENGTH */
    bool has_content_length;   /* a Content-Length field, framing or not */
    bool other_codings;        /* Transfer-Encoding names a coding besides one "chunked":
                                  the body is still encoded once chunking is removed */
    bool te_and_length;        /* Transfer-Encoding and Content-Length both: the former
                                  won (section 6.3 item 3); keep_alive is false */

    /* Persistence: after this response (and its body), may the connection carry another
     * request? From the version and Connection; false with CLOSE framing, after a 101
     * (the connection now speaks another protocol) and with te_and_length. */
    bool keep_alive;
    bool connection_upgrade;   /* Connection lists "upgrade" */
    bool connection_names_fields; /* Connection lists options besides "close",
                                     "keep-alive" and "upgrade": fields to remove */
    struct http_slice upgrade; /* the first Upgrade field's value, len 0 if none; for a
                                  101, the protocol the connection switched to */

    size_t header_bytes;       /* from the status line through the blank line */
};

/* Parse one response head from buf[0..len), the answer to a request of request_method.
 * Returns:
 *   > 0  the head is complete; the value is out->header_bytes, where the body (or the
 *        next head, after a 1xx) starts.
 *     0  incomplete: read more and call again with the longer buffer.
 *   < 0  an enum http_upstream_error: the response cannot be relayed.
 * A 1xx is a complete head of its own: the caller skips 100, 102 and 103 and parses the
 * next head after it; 101 ends HTTP on the connection. lim->max_header_bytes bounds the
 * whole head, lim->max_headers its field lines (at most HTTP_MAX_HEADERS).
 * Nothing is skipped before the status line: an empty line there means the upstream sent
 * more body than it framed, and the connection is out of step. */
int http_parse_response(const char *buf, size_t len, const struct http_limits *lim,
                        enum http_method request_method, struct http_response_head *out);

#endif
