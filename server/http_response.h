/* http_response.h — building a response: status line, headers, body segments.
 *
 * A response lives on the processing thread's stack. Its head is formatted into `head`;
 * its body is a list of segments, each either bytes in memory or a range of an open file
 * (sent with sendfile). The connection layer sends the head and the segments in order and,
 * only if the socket would block, copies what is left onto the connection.
 *
 * The fields of struct response are the core's. Modules build and read a response only
 * through the functions below: resp_start, headers, a body of memory that outlives the
 * response (resp_body_mem, scratch), of memory the module lends until sent
 * (resp_body_owned), of a file the response takes (resp_file_own) or borrows from a cache
 * (resp_file_shared) with its ranges (resp_body_file), or a stream (resp_stream). Who
 * frees what, and when, is then the core's one concern.
 */
#ifndef LFHTTPD_HTTP_RESPONSE_H
#define LFHTTPD_HTTP_RESPONSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "out_seg.h"

#define RESP_HEAD_CAP 4096
#define RESP_SCRATCH_CAP 4096
#define RESP_MAX_SEGS 72 /* enough for a multipart/byteranges answer of 16 ranges */
#define RESP_INDEXED_LINES 32 /* head lines whose start is remembered; more are scanned for */

/* A response body's pieces are struct out_seg (out_seg.h): memory when mem != NULL, else
 * len bytes of fd at off. */

struct response;
struct proxy_params; /* module.h: the reverse proxy's request (resp_proxy) */

/* A body produced over time by another process (a CGI script): the module starts it and
 * describes it here; the core reads `fd` as it becomes readable, never blocking a thread,
 * and sends what it reads (chunked when no length is known). */
struct resp_stream_ops {
    /* Parse the start of the output in buf[0..len): fill resp (resp_start, headers; set
     * content_length and length_known if the output says how long the body is). Returns
     * the bytes that were the head (> 0), 0 to wait for more, -1 if it is not a valid head
     * (the core answers 502). */
    int (*head)(void *ctx, const char *buf, size_t len, struct response *resp);
    /* The stream is over (end of output, error, client gone, or deadline): free ctx.
     * timed_out: the deadline passed and the process group was killed. */
    void (*done)(void *ctx, bool timed_out);
};

struct resp_stream {
    int fd;          /* non-blocking read end of the output; the core closes it */
    int pgid;        /* process group killed with SIGKILL when the deadline passes (or the
                        client leaves); 0 if there is none */
    int pidfd;       /* a pidfd of the group's leader (> 0), through which the group is
                        killed: the number may be reused once the leader is reaped. 0 or
                        less: none (a kernel before 5.3), pgid is used. The core closes it */
    unsigned timeout_ms; /* the whole response must be done within this */
    const struct resp_stream_ops *ops;
    void *ctx;
    const char *name; /* for the error log ("cgi: /cgi-bin/x.sh"); lives as long as ctx */
};

/* Where a body filter puts its output: emit(arg, p, n) copies n bytes; -1 if they do not
 * fit (the response is then cut). */
typedef int (*resp_emit_fn)(void *arg, const char *p, size_t n);

/* A transformation of a streamed body (a content coding), chosen by a filter on the head of
 * a streamed answer (resp_is_stream_head) and run by the core on each piece of the body as
 * it comes, whatever its source. */
struct resp_body_filter_ops {
    /* A state for one body, from what the filter gave resp_stream_filter; NULL if out of
     * memory (the core then answers 500, or cuts the response). */
    void *(*start)(const void *conf, unsigned arg);
    /* Transform in[0..n) and flush: every byte given so far must be decodable from what was
     * emitted, for a piece that came alone must reach the client alone. end: the input is
     * over, emit the end of the coding. Returns 0, or -1 (the response is cut). */
    int (*feed)(void *state, const char *in, size_t n, bool end, resp_emit_fn emit,
                void *arg);
    /* The body is over, or the connection went: free the state. */
    void (*free)(void *state);
};

/* The trailer lines of a streamed answer, made once its body has ended (add_trailer's
 * values may read $upstream_response_length): at most cap bytes written to out, "Name:
 * value\r\n" each; returns their length, or -1 if they do not fit. req is the request
 * (struct request, module.h), status the answer's. */
typedef long (*resp_trailers_fn)(const void *ctx, const void *req, int status, char *out,
                                 size_t cap);

/* The core's: modules go through the functions below (see the top of this file). */
struct response {
    int status;
    bool head_only;    /* HEAD: every header as for GET, no body bytes */
    bool keep_alive;   /* the connection stays open after this response */
    unsigned keep_alive_header_s; /* with keep_alive: "Keep-Alive: timeout=N" (0: none) */
    bool say_keep_alive; /* with keep_alive: "Connection: keep-alive" in HTTP/1.1 too */
    bool no_length;    /* 1xx, 204, 304: no Content-Length and no body */
    bool overflow;     /* a header or segment did not fit: finish turns this into a 500 */
    bool builtin_page; /* the body is resp_error's own page (until resp_start) */
    bool drop;         /* nginx's 444: the connection is closed, nothing sent */
    uint64_t content_length;

    size_t head_len;
    char head[RESP_HEAD_CAP]; /* status line and header lines, CRLF-terminated */
    /* Where each line after the status line starts in head, in order, kept by every
     * function that writes the head: modules look headers up several times a response,
     * and this spares them the scan for line ends. n_lines > RESP_INDEXED_LINES: there
     * were too many to remember, and lookups scan the head (until resp_start). */
    uint16_t line_at[RESP_INDEXED_LINES];
    unsigned n_lines;

    unsigned n_segs;
    struct out_seg segs[RESP_MAX_SEGS];
    int file_fd; /* an open file the body refers to, closed when sent; -1 if none */
    /* When set, file_fd is not the response's to close: the core calls
     * file_release(file_release_ctx) instead, once it no longer needs the file (sent, or
     * the connection closed while the rest was parked). For a descriptor shared with
     * others, as an open-file cache's is: the core reads it only at explicit offsets. */
    void (*file_release)(void *ctx);
    void *file_release_ctx;
    /* file_fd's status as its owner saw it, valid while the response holds the file; NULL
     * when not known (ask fstat). */
    const struct stat *file_st;

    size_t scratch_len;
    char scratch[RESP_SCRATCH_CAP]; /* small body bytes: error pages, multipart part heads */

    /* Called once the body's memory is no longer needed (sent, or copied onto the
     * connection because the socket would block): for bodies a module allocated. */
    void (*release)(void *ctx);
    void *release_ctx;

    bool chunked;        /* framed with Transfer-Encoding: chunked (set by the core) */
    /* Trailer lines ("Name: value\r\n" each) after the body (resp_trailers): the body
     * then goes chunked; NULL: none. */
    const char *trailers;
    size_t trailers_len;
    /* A streamed answer's trailers, made at its end (resp_expect_trailers); NULL: none. */
    resp_trailers_fn trailers_render;
    const void *trailers_ctx;
    bool no_chunked;     /* a stream's head: chunked_transfer_encoding off */
    /* Set by the core: limit_rate (bytes per second from the request's start, on the
     * clock_now_ms scale, after the first limit_rate_after; 0: not paced), and a request a
     * preaccess hook put aside for delay_ms (MOD_DELAY: nothing is answered yet). */
    uint64_t limit_rate, limit_rate_after;
    int64_t rate_start_ms;
    uint64_t delay_ms;
    bool streaming;      /* the body comes from `stream` (resp_stream) */
    bool length_known;   /* for a stream: content_length is the body's length */
    struct resp_stream stream;
    /* The answer comes from an upstream server (streaming is set too): module.h. */
    const struct proxy_params *proxy;
    /* The filters are given the head of an upstream's answer (streaming is set: its body
     * comes later): a filter that acts on heads only (add_header) acts on it. */
    bool upstream_head;
    /* The filters are given the head of a streamed answer, of any source (an upstream's,
     * a process's): a filter of bodies may choose a body filter for what follows. */
    bool stream_head;
    /* For a streamed body: the transformation its pieces go through (resp_stream_filter),
     * or NULL. */
    const struct resp_body_filter_ops *body_filter;
    const void *body_filter_conf;
    unsigned body_filter_arg;
};

/* Prepare a response struct for use (file_fd -1, no release callback, keep_alive off). */
void resp_init(struct response *r);

/* Let go of the body's file: file_release if set, else close(file_fd). The response then
 * holds no file (its segments must no longer refer to it). */
void resp_file_close(struct response *r);

/* Number formatting without printf (it costs thousands of instructions a call): write v
 * in decimal or lowercase hex at out, return the end. out needs 21 / 17 bytes. */
char *http_fmt_u64(char *out, uint64_t v);
char *http_fmt_hex(char *out, uint64_t v);

/* Last-Modified for a modification time: IMF-fixdate, cached per thread for the last
 * time asked (a hot file asks for the same one again and again). */
const char *http_last_modified(int64_t mtime_s);

/* Set the process-wide Server header value (at start, before any thread runs). */
void http_response_set_server(const char *name);
/* Its value ("lfhttpd", or as server_tokens made it), e.g. for SERVER_SOFTWARE. */
const char *http_response_server(void);

/* The reason phrase for a status code ("Not Found"). */
const char *http_status_text(int status);

/* The current time as "Date: <IMF-fixdate>\r\n", cached per thread per second. */
const char *http_date_header(int64_t *now_s);

/* Start (or restart) the response: clears headers and body, writes the status line,
 * Date and Server. The body is empty and Content-Length 0 until a body is added. */
void resp_start(struct response *r, int status);

/* Append a header line. Values must not contain CR or LF (callers pass server-made text).
 * Returns 0, or -1 if the head is full (the response then becomes a 500 at finish). */
int resp_header(struct response *r, const char *name, const char *value);
/* The same, for a name and a value that are not NUL-ended. */
int resp_header_n(struct response *r, const char *name, size_t name_len, const char *value,
                  size_t value_len);
int resp_headerf(struct response *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Add body bytes that outlive the response (static memory, or scratch). */
int resp_body_mem(struct response *r, const char *p, size_t len);
/* Add body bytes the caller lends until release(ctx) is called: once they are sent or
 * copied onto the connection, or when the body is cleared. One owned block per response
 * (a second is a 500); release is called even when the segment does not fit. */
int resp_body_owned(struct response *r, const char *p, size_t len, void (*release)(void *),
                    void *ctx);
/* Room for n body bytes, to be written by the caller and added with resp_body_mem:
 * scratch when it fits, else malloc'd and owned by the response (freed once sent). NULL
 * if out of memory (the response then becomes a 500). */
char *resp_body_alloc(struct response *r, size_t n);

/* The response takes the open file fd: the core closes it once the body is sent (or the
 * connection closes with the rest parked). Its ranges go in with resp_body_file. */
static inline void resp_file_own(struct response *r, int fd)
{
    r->file_fd = fd;
    r->file_release = NULL;
    r->file_release_ctx = NULL;
    r->file_st = NULL;
}
/* The response borrows fd, a descriptor shared with others (an open-file cache's entry,
 * read only at explicit offsets): the core calls release(ctx) instead of closing it. st:
 * the file's status as its owner saw it, valid until release (NULL: unknown). */
static inline void resp_file_shared(struct response *r, int fd, const struct stat *st,
                                    void (*release)(void *), void *ctx)
{
    r->file_fd = fd;
    r->file_release = release;
    r->file_release_ctx = ctx;
    r->file_st = st;
}
/* Add len bytes of the open file fd from offset off. */
int resp_body_file(struct response *r, int fd, uint64_t off, uint64_t len);

/* The body comes from s->fd over time (a CGI script's output): the core reads it, calls
 * s->ops->head on its start, and s->ops->done at its end. The status and headers so far
 * are placeholders: the head parser starts the response again. */
void resp_stream(struct response *r, const struct resp_stream *s);
/* The answer comes from an upstream server (module.h's struct proxy_params): the core
 * connects (or takes a kept connection), sends the request and its body, and relays the
 * answer as it arrives. */
void resp_proxy(struct response *r, const struct proxy_params *p);
/* For a stream's head parser: the body is len bytes long (ignored for statuses that have
 * no body), so it is sent with a Content-Length, not chunked. */
void resp_stream_length(struct response *r, uint64_t len);

/* What modules may read. */
static inline int resp_status(const struct response *r)
{
    return r->status;
}
/* The body bytes that go on the wire: 0 for HEAD and for 1xx, 204, 304. */
static inline uint64_t resp_body_bytes(const struct response *r)
{
    return r->head_only || r->no_length ? 0 : r->content_length;
}
/* The body's length as the head will announce it (what content_length holds). */
static inline uint64_t resp_content_length(const struct response *r)
{
    return r->content_length;
}
/* The body's segments, in order. */
static inline const struct out_seg *resp_body_segs(const struct response *r, unsigned *n)
{
    *n = r->n_segs;
    return r->segs;
}
/* The file the response holds, or -1; and its status when its owner knows it, else NULL. */
static inline int resp_file_fd(const struct response *r)
{
    return r->file_fd;
}
static inline const struct stat *resp_file_stat(const struct response *r)
{
    return r->file_st;
}
static inline bool resp_is_stream(const struct response *r)
{
    return r->streaming;
}
/* For a filter given the head of a streamed answer: its body goes through ops as it
 * streams (the filter sets Content-Encoding and Vary; the core frames the result, chunked
 * or up to the close). conf and arg are given to ops->start. */
static inline void resp_stream_filter(struct response *r, const struct resp_body_filter_ops *ops,
                                      const void *conf, unsigned arg)
{
    r->body_filter = ops;
    r->body_filter_conf = conf;
    r->body_filter_arg = arg;
}
/* Trailer lines after the body ("Name: value\r\n" each, in memory that lives as long as
 * the response: resp_scratch): the body goes chunked, its end followed by them. The
 * caller knows the client speaks HTTP/1.1 and the answer has a body (resp_has_body). */
static inline void resp_trailers(struct response *r, const char *lines, size_t len)
{
    r->trailers = lines;
    r->trailers_len = len;
}
/* For the head of a streamed answer: its body goes chunked (unless it has none, or the
 * client speaks HTTP/1.0), and render(ctx, ...) makes the trailer lines at its end. */
static inline void resp_expect_trailers(struct response *r, resp_trailers_fn render,
                                        const void *ctx)
{
    r->trailers_render = render;
    r->trailers_ctx = ctx;
}
/* For the head of a streamed answer: never chunked (chunked_transfer_encoding off): a
 * body of unknown length ends with the connection. */
static inline void resp_no_chunked(struct response *r)
{
    r->no_chunked = true;
}
/* Does the answer have a body on the wire (not HEAD, 1xx, 204, 304)? */
static inline bool resp_has_body(const struct response *r)
{
    return !r->head_only && !r->no_length;
}
/* For a streamed body: is its length (resp_content_length) known? */
static inline bool resp_length_is_known(const struct response *r)
{
    return r->length_known;
}
/* Is this the head of an upstream's answer, given to the filters once it has arrived? */
static inline bool resp_is_upstream_head(const struct response *r)
{
    return r->upstream_head;
}
/* Is this the head of a streamed answer of any source (an upstream's, a CGI script's),
 * given to the filters once it has arrived, its body still to come? */
static inline bool resp_is_stream_head(const struct response *r)
{
    return r->stream_head;
}
/* Something did not fit (a header, a segment, memory): the response becomes a 500. */
/* nginx's `return 444`: the request is logged with its status, and its connection is
 * closed without a byte of answer. */
static inline void resp_drop(struct response *r)
{
    r->drop = true;
}

static inline bool resp_is_drop(const struct response *r)
{
    return r->drop;
}

/* Is the body resp_error's own page (its type "text/html; charset=utf-8" the core's)? */
static inline bool resp_is_builtin_page(const struct response *r)
{
    return r->builtin_page;
}

static inline bool resp_failed(const struct response *r)
{
    return r->overflow;
}
void resp_fail(struct response *r);
/* Reserve n bytes of scratch space for body text; NULL if full. */
char *resp_scratch(struct response *r, size_t n);
/* Copy bytes into scratch and add them as a body segment. */
int resp_body_copy(struct response *r, const char *p, size_t len);

/* The value of header `name` (case-insensitive) in the head so far, and its length;
 * NULL if absent. */
const char *resp_header_get(const struct response *r, const char *name, size_t *len);
/* Remove every line of header `name`. */
void resp_header_remove(struct response *r, const char *name);
/* Replace header `name` (or add it). Returns 0 or -1 if the head is full. */
int resp_header_set(struct response *r, const char *name, const char *value);
/* Drop the body (segments and length), releasing owned memory now; a file the response
 * holds stays held. */
void resp_body_clear(struct response *r);
/* Change the status of a response whose head is started: the status line is written again
 * (with the standard reason phrase). */
void resp_set_status(struct response *r, int status);
/* Give the status line another reason phrase (a CGI script's "Status: 404 Gone"). Left as
 * it is when the phrase is empty or does not fit. */
void resp_set_reason(struct response *r, const char *reason, size_t len);

/* The status for a failed open of a client-named file: 404 missing, 414 too long,
 * 503 out of descriptors or memory, 403 for the rest (refused, or leading out). */
int http_status_for_errno(int err);

/* A complete error response with a small HTML body naming the status. */
void resp_error(struct response *r, int status);

/* End the head: Content-Length (unless no_length), Connection, blank line. */
void resp_finish(struct response *r, bool http10);

#endif
