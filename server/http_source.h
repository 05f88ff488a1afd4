/* http_source.h — what the request loop (http_conn.c) and every late response share: the
 * service classes' HTTP sides and their figures, sending an answer, the access log and the
 * log hooks, and the seam through which a response that outlives its event is driven.
 *
 * A response that outlives one event (a CGI script's output, an upstream's answer) is a
 * *source*: a struct of its own whose first member is a struct http_source, with an ops
 * table. The connection holds one source pointer and knows no kinds: when the client has
 * taken a parked part it calls ops->resume, when it closes it calls ops->abort. The end of
 * every source's answer is one function, http_source_end: the class's figures, the access
 * log line, the log hooks, the last part sent, and the next request served. Body filters
 * (compression) run on every source's pieces through http_source_body.
 *
 * Adding a source: one file that defines its state (a struct http_source first), its
 * struct http_source_ops and a struct http_source_kind, and a line in the table of kinds
 * in http_source.c.
 */
#ifndef LFHTTPD_HTTP_SOURCE_H
#define LFHTTPD_HTTP_SOURCE_H

#include <assert.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "conn.h"
#include "generation.h"
#include "http_parse.h"
#include "http_response.h"
#include "log.h"
#include "module.h"

#define HTTP_LATENCY_BUCKETS 32

/* Requests answered, and a histogram of their service time (request parsed to response
 * handed to the socket): bucket i counts times below 2^i microseconds. Relaxed atomics,
 * one class's: what /status and /metrics read. */
struct http_stats {
    atomic_ulong requests;
    atomic_ulong latency_us_log2[HTTP_LATENCY_BUCKETS];
    atomic_ulong latency_us_sum;
    atomic_ulong by_status[5]; /* responses 1xx .. 5xx */
    atomic_ulong bytes_sent;   /* body bytes, as the access log counts them */
    atomic_ulong bytes_received; /* request heads and bodies read from clients */
};

struct http_service;
struct server;

/* What the HTTP side of every connection shares, server-wide: set up by the server. */
struct http_shared {
    struct generation_current current; /* the configuration new requests use */
    struct access_log access_log;
    atomic_bool stopping;     /* SIGTERM/SIGINT: finish what is in flight, take nothing new */
    /* SIGTERM with a shutdown_delay, before `stopping`: everything is still served, but the
     * health handler answers 503 and no connection is kept alive, so that a load balancer
     * and clients move to other copies before any connection is refused. */
    atomic_bool draining;
    atomic_uint n_conns;      /* open connections, every class's */
    /* Connections accepted since start, and of those the ones served (not refused as over
     * a limit): stub_status's "accepts" and "handled". */
    atomic_ulong accepted, handled;
    atomic_uint conn_serial; /* the last connection's number ($connection) */
    /* Bytes of request bodies being collected (their buffers), every class's: at most
     * max_body_memory; beyond it a body that needs a buffer is refused with 503. */
    _Atomic uint64_t body_memory;
    unsigned max_connections; /* from the configuration at start: needs a restart */
    /* Each service class's HTTP side, the default class's first: where a request or a new
     * connection goes by the class rules. */
    struct http_service *services[1 + CONFIG_MAX_CLASSES];
    unsigned n_services;
    const struct server *server; /* for the modules (module_server_stats) */
};

/* One service class's HTTP side: its connections and the figures of their requests. */
struct http_service {
    struct conn_pool pool;
    struct http_shared *shared;
    struct http_stats stats;
    /* The request loop: go on reading and answering requests on a connection this thread
     * owns. Installed by the loop (http_service_init), called when a source's answer ends. */
    void (*serve)(struct conn *c);
};

/* A request body still being skipped after the answer. */
enum req_body { REQ_BODY_NONE = 0, REQ_BODY_LENGTH, REQ_BODY_CHUNKED };

struct http_collect;
struct http_source;

/* An HTTP connection: the transport's struct conn, then what the HTTP layer keeps between
 * events (the pool allocates this much a connection: http_service_init). */
struct http_conn {
    struct conn c;               /* first: a conn of a service's pool is an http_conn */
    uint8_t body_mode;           /* enum req_body: a request body still being skipped */
    bool resumed;                /* the request in `in` was put aside (MOD_DELAY): its
                                    preaccess hooks see it resumed when it runs again */
    bool pipeline;               /* bytes followed the last request's in its read: the
                                    next request is pipelined ($pipe), as nginx counts */
    bool source_ended;           /* a source's answer has just gone whole: the request loop
                                    reads again only if the socket may hold more */
    uint32_t requests;           /* requests served on this connection */
    int64_t opened_ms;           /* clock_now_ms() at accept: keepalive_time, $connection_time */
    int64_t body_due_us;         /* the body's deadline by client_body_min_rate (clock_now_ms
                                    scale, in microseconds): extended by each byte received */
    union { /* the one body_mode uses */
        uint64_t body_left;          /* REQ_BODY_LENGTH: bytes still to skip */
        struct http_chunked chunked; /* REQ_BODY_CHUNKED: decoder state */
    };
    struct http_collect *collect; /* a request body being read for a handler, or NULL */
    struct http_source *source;   /* a response that outlives its event, or NULL */
    struct conn_pool *home;       /* the class chosen at accept: requests no rule claims */
    /* The settings of the block that answers the request (nginx's: its location's), from
     * the moment it is routed until the next one is; before the first, and once a reload
     * has moved the connection to a new generation, the default server's of the address.
     * They belong to c.gen's levels. */
    const struct config_limits *limits;
    /* On a `listen ... proxy_protocol` address: the header's bytes while it arrives, then
     * (shrunk to its addrs) what it said, for the requests; NULL elsewhere. */
    struct http_proxy_header *pp;
};

/* A connection's PROXY protocol header (http_conn.c). */
struct http_proxy_header {
    struct proxy_protocol_addrs addrs; /* what it said, once done */
    bool done;                         /* read whole: buf is gone */
    uint16_t have;                     /* bytes of it in buf so far */
    char buf[PROXY_PROTOCOL_MAX];
};

static_assert(sizeof(struct http_conn) <= 256, "an idle connection should stay small");

/* The HTTP side of a connection of a service's pool. */
static inline struct http_conn *hc(struct conn *c)
{
    return (struct http_conn *)c;
}
static inline const struct http_conn *hc_const(const struct conn *c)
{
    return (const struct http_conn *)c;
}

/* The service class whose pool this is. */
static inline struct http_service *http_service_of_pool(const struct conn_pool *pool)
{
    return (struct http_service *)((char *)pool - offsetof(struct http_service, pool));
}

/* The service class a connection belongs to now. */
static inline struct http_service *http_service_of(const struct conn *c)
{
    return http_service_of_pool(c->pool);
}

/* The request line as sent ("GET /x HTTP/1.1"), for the access log. */
static inline struct http_slice http_request_line(const struct http_request *req)
{
    const char *end = req->target.p + req->target.len + 9; /* " HTTP/1.x" */
    return (struct http_slice){req->method_name.p, (size_t)(end - req->method_name.p)};
}

/* --- services of every answer ------------------------------------------------------------ */

/* Count one request served in `us` microseconds. */
void http_stats_record(struct http_stats *st, int64_t us, int status, uint64_t bytes);

/* Write one access-log line for connection c. peer: the request's client (its req->peer),
 * or NULL for the connection's. request_id: the request's $request_id buffer (33 bytes,
 * made if empty), or NULL; the line carries it when access_log_request_id is on. */
void http_log_access(struct conn *c, const struct sockaddr *peer, struct http_slice line,
                     struct http_slice referer,
                     struct http_slice user_agent, int status, uint64_t bytes, int64_t now_s,
                     char *request_id);
/* What every module sees of a request on connection c, before its path is decoded: path is
 * an empty string in its buffer; id the request's $request_id, made only if asked for. */
void http_request_init(struct conn *c, const struct http_request *h, struct request *r,
                       char *path, char *id, int64_t now_s);
/* Run the modules' log hooks for a response whose request is not at hand (not parsed):
 * they see an empty request (no fields, method unknown, path ""). */
void http_log_unparsed(struct conn *c, const struct response *resp, int64_t now_s);
/* The same, with what the preaccess hooks left on the request (its limit_conn counters,
 * which the log hooks let go). */
void http_log_unparsed_marked(struct conn *c, const struct response *resp, int64_t now_s,
                              const struct request_marks *marks);

/* Send resp's head, and its body if `body` (not for HEAD, 204 or 304: the caller decides),
 * as conn_send does; then resp lets go of its file (unless parked with it) and memory. */
enum send_result http_send_response(struct conn *c, struct response *resp, bool body);
/* Keep unparsed bytes on the connection until its next event. Returns false if out of
 * memory. */
bool http_save_input(struct conn *c, const char *p, size_t n);
/* Send a finished response and go on with the connection (true), or it was handed off:
 * parked, lingering or closed (false). rest/rest_len: input not yet processed. */
bool http_send(struct conn *c, struct response *resp, const char *rest, size_t rest_len);

/* A request body collected across events (http_conn.c): the head, then the body (decoded,
 * if chunked), then raw bytes not yet decoded. Its buffer counts in the server's
 * body_memory. */
struct http_collect {
    size_t head_len;
    size_t body_len; /* decoded body bytes after the head */
    size_t raw_len;  /* valid bytes in data: head + body + pending raw */
    /* The request's bytes as they came, head and body (a chunked body's framing too):
     * $request_length, as nginx counts it. */
    uint64_t wire_len;
    size_t cap;
    char data[];
};
/* Let go of a collected body and the memory it counted (shared: the connection's, which
 * may be gone by now). */
void http_collect_free(struct http_shared *shared, struct http_collect *k);

/* --- sources ----------------------------------------------------------------------------- */

/* What the connection asks of a source. Both run on the thread that owns the connection. */
struct http_source_ops {
    /* The part of the answer that was parked has gone out: produce more (the last act of
     * the event: wait, send, or end with http_source_end). */
    void (*resume)(struct http_source *s);
    /* The connection is closing under the answer (the client left, a deadline, shutdown):
     * stop at once and let everything go. The end was logged; nothing more is sent. */
    void (*abort)(struct http_source *s);
    /* The answer has ended (http_source_end, after the log): let go of what it holds. The
     * state may be reused at once by another thread: the core touches it no more. */
    void (*release)(struct http_source *s);
};

/* Where a piece of the body is framed and filtered: on the stack of the event that sends
 * it (the bytes must outlive the send; parking copies them). A piece is at most
 * HTTP_SOURCE_PIECE bytes of input. */
#define HTTP_SOURCE_PIECE 16384
struct http_piece {
    char chunk_line[24];
    size_t out_len;
    char out[HTTP_SOURCE_PIECE + 4096]; /* more than a coding makes of a piece, flushed */
};

/* The head of every late response: the first member of each source's state. */
struct http_source {
    const struct http_source_ops *ops;
    struct conn *c;
    int status;        /* the answer's, once its head is made */
    uint64_t sent;     /* body bytes sent, as the access log counts them */
    int64_t start_us;  /* for the class's service time */
    bool head_sent;
    bool head_only;    /* HEAD (or 204, 304): no body bytes go out */
    bool chunked;      /* the body goes out as chunks */
    bool keep_alive;   /* the connection goes on after this answer */
    bool http10;
    bool has_saved;    /* `saved` holds the request */
    /* add_trailer's: the trailer lines made at the body's end (resp_expect_trailers);
     * NULL: none. The body then goes chunked. */
    resp_trailers_fn trailers_render;
    const void *trailers_ctx;
    bool no_chunked; /* chunked_transfer_encoding off: an unknown length ends with the
                        connection, as for an HTTP/1.0 client */
    /* The body filter chosen on the head (resp_stream_filter), and its state. */
    const struct resp_body_filter_ops *filter;
    void *filter_state;
    /* For the access log, written when the answer ends: the request is long gone. */
    char request_id[33];
    char request_line[512], referer[256], user_agent[256];
    /* The request as it was answered, for the filters on the answer's head and the log
     * hooks: its parsed head copied, its slices pointing into room the source gave
     * (http_source_save_request). */
    struct request saved;
    struct http_request saved_http;
};

/* What a kind of source is: which answers it gives, and how one starts. */
struct http_source_kind {
    const char *name;
    /* Is resp (streaming) this kind's to answer? */
    bool (*answers)(const struct response *resp);
    /* Start answering request r with resp on c, keeping rest/rest_len (input after the
     * request) for later: the last act of the event. body_owner: a collected body r's body
     * lies in, now the source's to free (http_collect_free), or NULL. On failure the source
     * lets everything go and closes the connection. */
    void (*start)(struct conn *c, struct response *resp, const struct request *r,
                  const char *rest, size_t rest_len, struct http_collect *body_owner);
    /* At exit, once every group has stopped: free what the kind keeps (may be NULL). */
    void (*fini)(void);
};

extern const struct http_source_kind http_proxy_source; /* http_proxy.c */
extern const struct http_source_kind http_stream_source; /* http_stream.c */
extern const struct http_source_kind http_fastcgi_source; /* http_fastcgi.c */

/* Start the source whose kind answers resp (resp_is_stream), as its kind's start says. */
void http_source_start(struct conn *c, struct response *resp, const struct request *r,
                       const char *rest, size_t rest_len, struct http_collect *body_owner);
/* At exit: every kind's fini. */
void http_sources_fini(void);

/* A source begins, for request r answered by resp on c: its fields set, the log's slices
 * copied. The connection holds it from now on (c->source). */
void http_source_init(struct http_source *s, const struct http_source_ops *ops,
                      struct conn *c, const struct response *resp, const struct request *r);
/* Room for http_source_save_request to keep r in. */
size_t http_source_save_room(const struct request *r);
/* Keep what the answer's head, its filters and the log hooks will need of r in room[0,
 * cap) (its head, path and arguments copied, the parsed head with its slices moved there);
 * without room, s->has_saved stays false (the head goes unfiltered). */
void http_source_save_request(struct http_source *s, const struct request *r, char *room,
                              size_t cap);
/* $request_body's bytes of r (module_request_body_len): the room http_source_save_body
 * needs. */
size_t http_source_body_room(const struct request *r);
/* After http_source_save_request: copy those bytes of r's body into room, for the saved
 * request's $request_body. */
void http_source_save_body(struct http_source *s, const struct request *r, char *room);
/* After http_source_save_request: the saved request's body is body[0, len), which the
 * source keeps as long as it lives (the proxy's copy for sending). */
void http_source_keep_body(struct http_source *s, const char *body, size_t len);
/* The answer's head is made (resp): run the filters on it with the request as it was.
 * upstream: the proxy's parameters for an upstream's answer, else NULL. A body filter
 * chosen there is in resp->body_filter; http_source_start_filter starts it. */
void http_source_filter_head(struct http_source *s, struct response *resp,
                             const struct proxy_params *upstream);
/* Room for an error page's request, alive until its answer is sent. */
struct http_source_page {
    struct request r;
    char path[REQUEST_PATH_MAX];
    char file[REQUEST_FILE_MAX];
};
/* resp holds an error the client is owed (a 502, a 504, an intercepted error): the
 * error_page of the saved request's block for it answers instead, as nginx's (true); else
 * false, resp untouched. pg: room for the page's request, alive until resp is sent. */
bool http_source_error_page(struct http_source *s, struct response *resp,
                            struct http_source_page *pg);
/* An application's or upstream's answer named X-Accel-Redirect `to`: the saved request
 * (s->has_saved) is answered again there (module_chain_accel_redirect), into resp, with
 * the fields of that head (fields[0..n)) that nginx keeps when the answer is not an
 * error, filtered as the redirected request's; s->status is the answer's. False: the
 * answer there would be streamed by another source, which is not followed (resp holds a
 * 500; the caller says so in its log). */
bool http_source_accel(struct http_source *s, struct response *resp,
                       struct http_source_page *pg, struct http_slice to,
                       const struct http_header *fields, unsigned n);
/* Start the body filter the filters chose (if any, and if a body goes out). false: out of
 * memory. */
bool http_source_start_filter(struct http_source *s, const struct response *resp);
/* Queue body bytes p[0..n) on resp: filtered, then framed (one chunk when chunked), counted
 * as sent. The bytes must outlive the send (pc, and the caller's buffer). Returns 0, or -1
 * if the filter failed (cut the answer). */
int http_source_body(struct http_source *s, struct response *resp, const char *p, size_t n,
                     struct http_piece *pc);
/* The body is over: queue the filter's last bytes and the last chunk on resp. */
int http_source_body_end(struct http_source *s, struct response *resp, struct http_piece *pc);
/* Send what resp holds. SEND_PARKED: the client's socket is armed, and ops->resume runs
 * once it is sent. */
enum send_result http_source_send(struct http_source *s, struct response *resp);
/* The answer is over: count it, log it, run the log hooks, let the source go
 * (ops->release), then send resp (the last part, or the whole answer of a source that
 * failed before its head) with keep_alive, and serve the next request. */
void http_source_end(struct http_source *s, struct response *resp, bool keep_alive);
/* The connection is closing (its close hook): log the answer so far, then ops->abort. */
void http_source_abort(struct conn *c);

#endif
