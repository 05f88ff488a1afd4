/* out_seg.h — what the transport sends: pieces of bytes in memory or in an open file, after
 * a head, and who lets go of the file and the memory once they are sent. The HTTP layer's
 * responses (http_response.h) are made of these; the transport (conn.h) sends them without
 * knowing what they say.
 */
#ifndef LFHTTPD_OUT_SEG_H
#define LFHTTPD_OUT_SEG_H

#include <stddef.h>
#include <stdint.h>

/* One piece of a body: memory when mem != NULL, else len bytes of fd at off. */
struct out_seg {
    const char *mem;
    int fd;
    uint64_t off;
    uint64_t len;
};

/* A message to send: a head, then body segments. The file its segments read (file_fd, or
 * -1) goes with whatever of it is parked: conn_send then sets file_fd to -1 and
 * file_release to NULL, and the caller no longer lets go of it. */
struct out_msg {
    const char *head;
    size_t head_len;
    const struct out_seg *segs;
    unsigned n_segs;
    int file_fd;
    /* When set, file_fd is not the message's to close: file_release(file_release_ctx) is
     * called instead, once the file is no longer needed. */
    void (*file_release)(void *ctx);
    void *file_release_ctx;
    /* limit_rate: bytes per second from the request's start (start_ms, clock_now_ms), after
     * the first rate_after; 0: not paced. */
    uint64_t rate, rate_after;
    int64_t rate_start_ms;
};

#endif
