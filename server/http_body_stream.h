/* http_body_stream.h — a request's body taken as it arrives, by a source that relays it to
 * its upstream (proxy_request_buffering off, fastcgi_request_buffering off and uwsgi_,
 * scgi_ alike) rather than have the core read it whole first.
 *
 * Where the body stands is the connection's (hc(c)->body_mode, body_left, chunked), as for
 * a body the core skips: the bytes that came with the head wait in c->in, and what follows
 * a chunked body's end goes back there, the next request's. A source reads a piece
 * (http_body_stream_read), takes it (http_body_stream_take: decoded in place, the
 * connection's count moved on), sends it on framed as its protocol says, and reads no more
 * before it went: an upstream that takes nothing stops the client being read. The body is
 * over when hc(c)->body_mode is REQ_BODY_NONE.
 */
#ifndef LFHTTPD_HTTP_BODY_STREAM_H
#define LFHTTPD_HTTP_BODY_STREAM_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "http_source.h"

/* Bytes of the client's body into buf[0..cap), as read: those that came with the head
 * first (left on the connection and taken only by http_body_stream_take: *from_in), then
 * the socket's. A Content-Length body is never read past its end. -1 with errno (EAGAIN:
 * nothing yet), 0 when the client closed. */
ssize_t http_body_stream_read(struct conn *c, char *buf, size_t cap, bool *from_in);

/* What taking a piece of the body came to. */
enum http_body_take {
    HTTP_BODY_TAKEN,     /* data[0..*out) is the body's (0 bytes is fine) */
    HTTP_BODY_INVALID,   /* a malformed chunked body: 400 */
    HTTP_BODY_TOO_LARGE, /* a chunked body past client_max_body_size: 413 */
    HTTP_BODY_NO_ROOM,   /* what follows it could not be kept: close the connection */
};

/* n bytes read at data by http_body_stream_read for source s: decoded in place
 * (data[0..*out) is the body's), the connection's count and c->in moved on; *used: the
 * bytes of the request they were ($request_length counts them). At a chunked body's end
 * its length goes to s's copy of the request ($content_length). */
enum http_body_take http_body_stream_take(struct http_source *s, char *data, size_t n,
                                          bool from_in, size_t *out, size_t *used);

/* Wait for the client's bytes and for the upstream's (an answer before the body's end) at
 * once: `set` is an epoll set of the two sockets, made at the first wait and kept until the
 * source closes it (set->fd), the one handle waited on until deadline_ms. The last act of
 * the event; false (the connection closed) when no set could be made. */
bool http_body_stream_wait(struct lf_handle *set, int up_fd, struct conn *c,
                           int64_t deadline_ms, void (*on_event)(struct lf_handle *, uint32_t));

#endif
