/* http_private.h — what http_conn.c and http_stream.c / http_proxy.c, the parts of the HTTP
 * state machine, call of each other. Nobody else includes it. */
#ifndef LFHTTPD_HTTP_PRIVATE_H
#define LFHTTPD_HTTP_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http_conn.h"
#include "http_parse.h"
#include "http_response.h"

/* The host (service class) whose pool this is. */
static inline struct http_host *http_host_of_pool(const struct conn_pool *pool)
{
    return (struct http_host *)((char *)pool - offsetof(struct http_host, pool));
}

/* The host (service class) a connection belongs to now. */
static inline struct http_host *http_host_of(const struct conn *c)
{
    return http_host_of_pool(c->pool);
}

/* Count one request served in `us` microseconds. */
void http_stats_record(struct http_stats *st, int64_t us, int status, uint64_t bytes);

/* The request line as sent ("GET /x HTTP/1.1"), for the access log. */
static inline struct http_slice http_request_line(const struct http_request *req)
{
    const char *end = req->target.p + req->target.len + 9; /* " HTTP/1.x" */
    return (struct http_slice){req->method_name.p, (size_t)(end - req->method_name.p)};
}

/* Write one access-log line for connection c. request_id: the request's $request_id buffer
 * (33 bytes, made if empty), or NULL; the line carries it when access_log_request_id is on. */
void http_conn_log_access(struct conn *c, struct http_slice line, struct http_slice referer,
                          struct http_slice user_agent, int status, uint64_t bytes,
                          int64_t now_s, char *request_id);
/* Run the modules' log hooks for a response whose request is no longer at hand (not
 * parsed, or streamed): they see an empty request (no fields, method unknown, path ""). */
void http_conn_log_unparsed(struct conn *c, const struct response *resp, int64_t now_s);
/* Send a finished response and go on with the connection (true), or it was handed off:
 * parked, lingering or closed (false). rest/rest_len: input not yet processed. */
bool http_conn_send(struct conn *c, struct response *resp, const char *rest, size_t rest_len);
/* Keep unparsed bytes on the connection until its next event. Returns false if out of
 * memory. */
bool http_conn_save_input(struct conn *c, const char *p, size_t n);
/* Go on reading and answering requests on a connection this thread owns. */
void http_conn_continue(struct conn *c);

/* Start streaming resp->stream to the client, keeping rest/rest_len (input after the
 * request) for later: the last act of the event, from then on the pipe's events drive the
 * connection. On failure the stream is let go of and the connection closed. */
void http_stream_start(struct conn *c, struct response *resp, const struct http_request *h,
                       const char *rest, size_t rest_len);
/* Go on after a parked part of the stream was sent. */
void http_stream_resume(struct conn *c);
/* The connection is closing: kill the process, log what was sent, let the stream go. */
void http_stream_abort(struct conn *c);

struct request;
/* Start relaying the answer of an upstream server (resp->proxy) for request r, keeping
 * rest/rest_len for later: the last act of the event. body_owner: the collected body r's
 * body lies in, which the proxy now owns (NULL: the body, if any, is in the read buffer). */
void http_proxy_start(struct conn *c, struct response *resp, const struct request *r,
                      const char *rest, size_t rest_len, void *body_owner);
/* Go on after a parked part of the answer was sent. */
void http_proxy_resume(struct conn *c);
/* The connection is closing: log what was sent, let the upstream connection go. */
void http_proxy_abort(struct conn *c);
/* Let go of a collected request body (and the memory it counted). */
void http_conn_body_free(struct http_shared *shared, void *body_owner);

#endif
