/* http_conn.c — HTTP/1.1 on one connection: read, parse, answer, repeat.
 *
 * Called on the processing thread when a connection's socket is ready. The request is
 * read into a buffer on this thread's stack and parsed in place; every request already
 * complete in the buffer is answered in order (pipelining); the connection is then parked
 * in the handle set with only what must outlive this call (a partial request, the rest of
 * a response the socket would not take, a body still being skipped).
 *
 * Request bodies: the request is routed (path decoded, rewrite hooks, mount found) before
 * its body is touched. If the mount's module wants bodies, the whole body is read first:
 * from the stack buffer when it is all there, else collected on the connection across
 * events (after a "100 Continue" if the client waits for one), unless the mount streams it
 * (proxy_request_buffering off): then its handler reads it, as it arrives, from where the
 * skipping would have (body_mode, c->in), and what it leaves is skipped. Every other body is
 * skipped, exactly, so that the next request starts where the body ends: what is already
 * in the buffer is checked before the request is answered (a malformed chunked body is a
 * 400), the rest is skipped after the answer as it arrives. A body the client has not
 * started to send because it waits for "100 Continue" is not asked for: the answer says
 * Connection: close instead.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "directive.h"
#include "http_conn.h"
#include "http_source.h"
#include "module_chain.h"
#include "module_level.h"
#include "vars.h"

/* The most a collected body may hold, whatever client_max_body_size says (0 there: no limit
 * on bodies that are only skipped). A collected body is held in memory whole. */
#define COLLECT_MAX ((uint64_t)64 << 20)

static struct http_shared *conn_shared(const struct conn *c)
{
    return http_service_of(c)->shared;
}

/* The limit on a body a handler wants whole: the request's block's client_max_body_size,
 * within COLLECT_MAX. */
static uint64_t collect_limit(const struct conn *c)
{
    uint64_t max = hc_const(c)->limits->max_body_size;
    return max == 0 || max > COLLECT_MAX ? COLLECT_MAX : max;
}

/* Take n bytes of the server's max_body_memory for a collect buffer. False: over the
 * bound, nothing taken. The count is shared by every thread and every generation, so that
 * a reload neither forgets nor doubles what connections still hold. */
static bool body_memory_take(struct conn *c, size_t n)
{
    _Atomic uint64_t *held = &conn_shared(c)->body_memory;
    uint64_t bound = c->gen->cfg.max_body_memory;
    uint64_t cur = atomic_load_explicit(held, memory_order_relaxed);
    do {
        if (bound != 0 && (n > bound || cur > bound - n))
            return false;
    } while (!atomic_compare_exchange_weak_explicit(held, &cur, cur + n, memory_order_relaxed,
                                                    memory_order_relaxed));
    return true;
}

static void body_memory_give(struct http_shared *shared, size_t n)
{
    atomic_fetch_sub_explicit(&shared->body_memory, n, memory_order_relaxed);
}

/* A body starts: its deadline by client_body_min_rate runs from now. */
static void body_start(struct conn *c)
{
    hc(c)->body_due_us = (clock_now_ms() + hc(c)->limits->client_body_timeout_ms) * 1000;
}

/* n bytes of the body arrived: each byte buys 1/client_body_min_rate of a second (Apache's
 * RequestReadTimeout MinRate), so a trickle falls behind and runs out of time. */
static void body_progress(struct conn *c, size_t n)
{
    uint64_t rate = c->gen->cfg.client_body_min_rate;
    if (rate != 0)
        hc(c)->body_due_us += (int64_t)((uint64_t)n * 1000000 / rate);
}

/* When the sweep ends a connection waiting for more of a body: client_body_timeout after
 * the last bytes, and never later than the minimum rate allows. */
static int64_t body_deadline(const struct conn *c)
{
    const struct config *cfg = &c->gen->cfg;
    int64_t dl = clock_now_ms() + hc_const(c)->limits->client_body_timeout_ms;
    if (cfg->client_body_min_rate != 0 && hc_const(c)->body_due_us / 1000 < dl)
        dl = hc_const(c)->body_due_us / 1000;
    return dl;
}

/* Read request bytes from the client, counted as the class's bytes received (on the line
 * http_stats_record writes for the same request). */
static ssize_t http_read(struct conn *c, void *buf, size_t len)
{
    ssize_t n = conn_read(c, buf, len);
    if (n > 0)
        atomic_fetch_add_explicit(&http_service_of(c)->stats.bytes_received, (unsigned long)n,
                                  memory_order_relaxed);
    return n;
}

/* Skip body bytes at the start of buf. Returns the bytes consumed; *err is set to 400 or
 * 413 if the body is malformed or too large. */
static size_t skip_body(struct conn *c, char *buf, size_t len, int *err)
{
    if (hc(c)->body_mode == REQ_BODY_LENGTH) {
        size_t take = len < hc(c)->body_left ? len : (size_t)hc(c)->body_left;
        body_progress(c, take);
        hc(c)->body_left -= take;
        if (hc(c)->body_left == 0)
            hc(c)->body_mode = REQ_BODY_NONE;
        return take;
    }
    size_t used = 0, out = 0;
    enum http_chunked_result r = http_chunked_decode(
        &hc(c)->chunked, buf, len, hc(c)->limits->max_body_size, &used, &out);
    body_progress(c, used);
    if (r == HTTP_CHUNKED_DONE)
        hc(c)->body_mode = REQ_BODY_NONE;
    else if (r == HTTP_CHUNKED_ERROR)
        *err = 400;
    else if (r == HTTP_CHUNKED_TOO_LARGE)
        *err = 413;
    return used;
}

/* The access-log line of a response (req: NULL for a request that was not parsed). */
static void log_access(struct conn *c, const struct sockaddr *peer, struct http_slice line,
                       const struct http_request *req, const struct response *resp,
                       int64_t now_s, char *request_id)
{
    struct http_slice none = {NULL, 0};
    http_log_access(c, peer, line, req ? req->referer : none, req ? req->user_agent : none,
                         resp->status,
                         resp->head_only || resp->no_length ? 0 : resp->content_length, now_s,
                         request_id);
}

/* The first line of bytes that did not parse, at most max bytes of it, for the log. */
static struct http_slice first_line(const char *p, size_t len, size_t max)
{
    size_t n = len < max ? len : max;
    const char *eol = memchr(p, '\r', n);
    return (struct http_slice){p, eol ? (size_t)(eol - p) : n};
}

/* "OPTIONS *" asks about the server, not a resource (RFC 9110 section 9.3.7). */
static bool asks_server_options(const struct http_request *h)
{
    return h->method == HTTP_METHOD_OPTIONS && h->target.len == 1 && h->target.p[0] == '*';
}

/* The methods some resource here may accept: files take GET and HEAD, the echo and
 * request handlers and CGI scripts the rest. */
#define SERVER_ALLOW "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"

/* Decode and route the request's path (rewrite hooks, mount). r is always usable by the
 * log hooks afterwards. Returns 0, or the status of an error to answer instead. "OPTIONS *"
 * is not routed: no module answers it. */
static int route(struct conn *c, const struct http_request *h, struct request *r, char *path,
                 char id[VARS_REQUEST_ID_SIZE], char file[REQUEST_FILE_MAX], int64_t now_s)
{
    http_request_init(c, h, r, path, id, now_s);
    r->file_room = file;
    if (h->method == HTTP_METHOD_UNKNOWN)
        return 501;
    if (h->method == HTTP_METHOD_CONNECT)
        return 405;
    if (asks_server_options(h))
        return 0;
    long n = http_path_normalize(h->path, path, REQUEST_PATH_MAX);
    if (n < 0)
        return (int)-n;
    r->path_len = (size_t)n;
    r->file_len = (size_t)n;
    return module_chain_route(&c->gen->chain, r);
}

/* Fill, finish and log the response: an error status, or the module chain's answer. */
static void respond(struct conn *c, const struct http_request *h, struct request *r,
                    int status, struct response *resp)
{
    if (status) {
        resp_error(resp, status);
        if (status == 405)
            resp_header(resp, "Allow", SERVER_ALLOW);
    } else if (asks_server_options(h)) {
        resp_start(resp, 200); /* no body: Content-Length: 0 */
        resp_header(resp, "Allow", SERVER_ALLOW);
    } else {
        module_chain_answer(&c->gen->chain, r, resp);
        if (resp->delay_ms)
            return; /* put aside: answered when it runs again */
        if (resp->streaming)
            return; /* the head comes later, from the stream: finished and logged there */
    }
    resp->keep_alive_header_s = hc(c)->limits->keepalive_header_s;
    resp->say_keep_alive = hc(c)->limits->say_keep_alive;
    resp_finish(resp, h->version_minor == 0);
    if (!module_chain_logs_request(&c->gen->chain, r))
        log_access(c, r->peer, http_request_line(h), h, resp, r->now_s, r->request_id);
    module_chain_log(&c->gen->chain, r, resp);
}

/* Answer a request whose head could not be parsed: status, then close. */
static void answer_malformed(struct conn *c, int status, const char *buf, size_t len)
{
    struct response resp;
    int64_t now_s;
    http_date_header(&now_s);
    resp_init(&resp);
    resp_error(&resp, status);
    if (status == 503) /* max_body_memory: the memory is back once other bodies are served */
        resp_header(&resp, "Retry-After", "1");
    resp_finish(&resp, false);
    log_access(c, NULL, first_line(buf, len, 2048), NULL, &resp, now_s, NULL);
    http_log_unparsed(c, &resp, now_s);
    hc(c)->body_mode = REQ_BODY_NONE;
    http_send(c, &resp, NULL, 0);
}

/* Is the body the handler wants all in buf[*pos, len)? If so, point r at it and move *pos
 * past it. A chunked body is decoded in place as far as it goes (*decoded says how far);
 * a malformed or oversized one sets *status. */
static bool body_in_buffer(struct conn *c, char *buf, size_t *pos, size_t len,
                           struct request *r, size_t *decoded, int *status)
{
    size_t avail = len - *pos;
    *decoded = 0;
    if (hc(c)->body_mode == REQ_BODY_LENGTH) {
        if (avail < hc(c)->body_left)
            return false;
        r->body = buf + *pos;
        r->body_len = (size_t)hc(c)->body_left;
        *pos += r->body_len;
        hc(c)->body_mode = REQ_BODY_NONE;
        return true;
    }
    size_t used = 0;
    enum http_chunked_result res = http_chunked_decode(
        &hc(c)->chunked, buf + *pos, avail, collect_limit(c), &used, decoded);
    if (res == HTTP_CHUNKED_MORE)
        return false;
    if (res == HTTP_CHUNKED_DONE) {
        r->body = buf + *pos;
        r->body_len = *decoded;
        *pos += used;
        hc(c)->body_mode = REQ_BODY_NONE;
    } else {
        *status = res == HTTP_CHUNKED_TOO_LARGE ? 413 : 400;
    }
    return true;
}

/* Is a chunked body, decoded from state st, whole in buf[0..n)? Tried on a copy (the
 * decoder moves what it decodes), a piece at a time. */
static bool chunked_whole(const struct http_chunked *st, const char *buf, size_t n)
{
    struct http_chunked probe = *st;
    char room[4096];
    while (n > 0) {
        size_t k = n < sizeof(room) ? n : sizeof(room), used, out;
        memcpy(room, buf, k);
        enum http_chunked_result r = http_chunked_decode(&probe, room, k, 0, &used, &out);
        if (r != HTTP_CHUNKED_MORE)
            return r == HTTP_CHUNKED_DONE;
        buf += k;
        n -= k;
    }
    return false;
}

static void send_continue(struct conn *c)
{
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    ssize_t w = conn_write(c, cont, sizeof(cont) - 1);
    (void)w; /* 25 bytes into an idle socket: they go, or the client sends anyway */
}

/* Start collecting a body on the connection: `have` bytes of head + body so far. A body
 * whose buffer would take the server past max_body_memory is refused with 503 (and
 * Retry-After) before the client sends it, if it waits for 100 Continue: collected bodies
 * are consumed from memory, so spooling them elsewhere would not bound memory. */
static void start_collect(struct conn *c, const char *have, size_t n, size_t head_len,
                          size_t wire_len, bool wait_continue)
{
    size_t cap = hc(c)->body_mode == REQ_BODY_LENGTH ? head_len + (size_t)hc(c)->body_left
                                                  : n + 65536;
    if (!body_memory_take(c, cap)) {
        answer_malformed(c, 503, have, n);
        return;
    }
    struct http_collect *k = malloc(sizeof(*k) + cap);
    if (!k) {
        body_memory_give(conn_shared(c), cap);
        conn_close(c);
        return;
    }
    memcpy(k->data, have, n);
    k->head_len = head_len;
    k->body_len = n - head_len;
    k->raw_len = n;
    k->wire_len = wire_len;
    k->cap = cap;
    if (hc(c)->body_mode == REQ_BODY_LENGTH)
        hc(c)->body_left -= k->body_len;
    body_progress(c, k->body_len);
    hc(c)->collect = k;
    if (wait_continue)
        send_continue(c);
    conn_wait(c, CONN_BODY, EPOLLIN, body_deadline(c));
}

/* The service class this request belongs to: a class whose rules (path prefix, Host)
 * claim it, else the class the connection was given at accept. */
static struct http_service *request_class(struct conn *c, const struct http_request *req)
{
    char path[REQUEST_PATH_MAX];
    long n = http_path_normalize(req->path, path, sizeof(path));
    if (n < 0)
        return http_service_of(c); /* the error is answered where we are */
    struct http_shared *shared = conn_shared(c);
    struct http_service *to =
        http_class_for_request(shared, &c->gen->cfg, path, (size_t)n, req->host);
    if (!to) { /* `class NAME;` in the request's server or location */
        unsigned k = module_chain_class(&c->gen->chain, c->local, req->host, path, (size_t)n);
        to = k && k < shared->n_services ? shared->services[k] : NULL;
    }
    return to ? to : http_service_of_pool(hc(c)->home);
}

/* Move the connection, with the request and everything after it (buf[from, len)), to
 * another class's group: a one-time move, not a queue. Its threads parse the request again
 * from the carried bytes; the socket is armed for writing too, so that the move takes
 * effect at once even though the bytes are no longer in the socket. */
static void hand_off(struct conn *c, struct http_service *to, const char *p, size_t n)
{
    if (conn_pool_full(&to->pool)) {
        struct response resp;
        resp_init(&resp);
        resp_error(&resp, 503);
        resp_header(&resp, "Retry-After", "1");
        resp_finish(&resp, false);
        int64_t now_s;
        http_date_header(&now_s);
        const char *eol = memchr(p, '\r', n);
        log_access(c, NULL, (struct http_slice){p, eol ? (size_t)(eol - p) : 0}, NULL, &resp, now_s,
                   NULL);
        http_log_unparsed(c, &resp, now_s);
        hc(c)->body_mode = REQ_BODY_NONE;
        http_send(c, &resp, NULL, 0);
        return;
    }
    if (!http_save_input(c, p, n)) {
        conn_close(c);
        return;
    }
    conn_move(c, &to->pool);
    conn_wait(c, CONN_HEAD, EPOLLIN | EPOLLOUT,
              clock_now_ms() + c->gen->cfg.header_timeout_ms);
}

/* May the connection go on after this request? Not if the client said close, nor while
 * the server drains or stops, nor where the request's block says keepalive_timeout 0, nor
 * past its keepalive_requests (nginx's, its location's). */
static bool keep_alive_allowed(const struct conn *c, const struct http_request *req)
{
    const struct config_limits *lim = hc_const(c)->limits;
    const struct http_shared *sh = conn_shared(c);
    return req->keep_alive && !atomic_load_explicit(&sh->stopping, memory_order_relaxed) &&
           !atomic_load_explicit(&sh->draining, memory_order_relaxed) &&
           lim->keepalive_timeout_ms != 0 &&
           (lim->keepalive_requests == 0 || hc_const(c)->requests < lim->keepalive_requests) &&
           clock_now_ms() - hc_const(c)->opened_ms <= (int64_t)lim->keepalive_time_ms &&
           !(lim->keepalive_disable & CONFIG_KA_DISABLE_MSIE6 &&
             req->method == HTTP_METHOD_POST && http_user_agent_msie6(req->user_agent)) &&
           !(lim->keepalive_disable & CONFIG_KA_DISABLE_SAFARI &&
             http_user_agent_safari(req->user_agent));
}

/* limit_rate: the request's `set $limit_rate`, else its block's, paces the response from
 * the request's start (nginx's). Not a request's that set nothing, in a block with none:
 * for those, two loads and a branch. */
static void set_pace(const struct request *r, struct response *resp, int64_t start_us)
{
    const struct config_limits *l = &r->level->limits;
    uint64_t rate = l->limit_rate;
    /* $limit_rate's index among the names `set` gives (process-wide, never reused) */
    static _Atomic int limit_rate_index = -2;
    int at = r->vars.n ? atomic_load_explicit(&limit_rate_index, memory_order_relaxed) : -1;
    if (at == -2) {
        at = vars_declare("limit_rate", sizeof("limit_rate") - 1);
        atomic_store_explicit(&limit_rate_index, at, memory_order_relaxed);
    }
    for (unsigned i = 0; at >= 0 && i < r->vars.n; i++) {
        if (r->vars.v[i].user != (unsigned)at)
            continue;
        char v[32];
        size_t n = r->vars.v[i].len < sizeof(v) - 1 ? r->vars.v[i].len : sizeof(v) - 1;
        memcpy(v, r->vars.buf + r->vars.v[i].off, n);
        v[n] = '\0';
        uint64_t set;
        if (config_parse_size(v, &set) == 0)
            rate = set;
        else
            module_log(r, LOG_LEVEL_ERROR, "invalid $limit_rate \"%s\"", v);
    }
    if (!rate)
        return;
    resp->limit_rate = rate;
    resp->limit_rate_after = l->limit_rate_after;
    resp->rate_start_ms = start_us / 1000;
}

/* A preaccess hook put the request aside (limit_req's delay): its bytes, and what follows
 * them, wait on the connection, which is parked until then, when it runs again. */
static void put_aside(struct conn *c, const char *p, size_t n, uint64_t delay_ms,
                      int64_t start_us)
{
    hc(c)->requests--;
    hc(c)->resumed = true;
    hc(c)->body_mode = REQ_BODY_NONE;
    if (!http_save_input(c, p, n)) {
        conn_close(c);
        return;
    }
    if (c->in)
        c->in->start_us = start_us;
    int64_t at = clock_now_ms() + (int64_t)delay_ms;
    conn_park(c, at, at + hc(c)->limits->send_timeout_ms);
}

/* Answer one complete request whose head is buf[*pos .. *pos + head_len). Advances *pos
 * past the head and whatever of its body is in the buffer. Returns true to go on with the
 * connection, false if it was handed off. */
static bool serve_one(struct conn *c, char *buf, size_t *pos, size_t len,
                      const struct http_request *req, size_t head_len, int64_t started_us)
{
    int64_t t0_us = started_us ? started_us : clock_now_us();
    struct http_service *svc = http_service_of(c); /* c may be gone once the response is sent */
    if (svc->shared->n_services > 1) {
        struct http_service *to = request_class(c, req);
        if (to != svc) {
            hand_off(c, to, buf + *pos, len - *pos);
            return false;
        }
    }
    struct response resp;
    int64_t now_s;
    http_date_header(&now_s);

    hc(c)->requests++;
    resp_init(&resp);
    resp.head_only = req->method == HTTP_METHOD_HEAD;
    size_t head_at = *pos;
    *pos += head_len;

    char path[REQUEST_PATH_MAX], id[VARS_REQUEST_ID_SIZE], file[REQUEST_FILE_MAX];
    struct request r;
    int routed = route(c, req, &r, path, id, file, now_s);
    r.start_us = t0_us;
    r.conn_requests = hc(c)->requests;
    r.conn_number = c->number;
    r.conn_opened_ms = hc(c)->opened_ms;
    /* The head; a body read for the handler adds its bytes as sent (nginx's count: a
     * body skipped is not counted). */
    r.request_length = head_len;
    hc(c)->limits = &r.level->limits; /* the block that answers: its location's */
    resp.keep_alive = keep_alive_allowed(c, req);

    int status = 0;
    if (req->framing == HTTP_BODY_LENGTH && req->content_length > 0) {
        body_start(c);
        hc(c)->body_mode = REQ_BODY_LENGTH;
        hc(c)->body_left = req->content_length;
        if (r.body_max != 0 && req->content_length > r.body_max)
            status = 413;
    } else if (req->framing == HTTP_BODY_CHUNKED) {
        body_start(c);
        hc(c)->body_mode = REQ_BODY_CHUNKED;
        http_chunked_init(&hc(c)->chunked);
    }
    bool body_error = status != 0; /* framing errors close the connection; others do not */
    status = status ? status : routed;
    bool wants_body = !status && hc(c)->body_mode != REQ_BODY_NONE && r.mount &&
                      r.mount->wants_body;
    if (!status && req->expect_continue && req->framing == HTTP_BODY_LENGTH &&
        req->content_length == 0 && r.mount && r.mount->wants_body)
        send_continue(c); /* nothing to wait for, but the client asked: as nginx answers */
    /* A body the handler streams (proxy_request_buffering off) is left where it is: the
     * handler reads it from here on, as it arrives; a client waiting for "100 Continue"
     * is told to send it now, as nginx tells it before it connects upstream. */
    /* (A body all read with the head is as good as read whole, as nginx reads it whole
     * then: $request_body has it, and a chunked one's length is known.) */
    bool streams = wants_body && r.mount->streams_body &&
                   (hc(c)->body_mode == REQ_BODY_LENGTH
                        ? len - *pos < hc(c)->body_left
                        : r.mount->streams_chunked &&
                              !chunked_whole(&hc(c)->chunked, buf + *pos, len - *pos));
    if (streams) {
        wants_body = false;
        r.body_streams = true;
        if (hc(c)->body_mode == REQ_BODY_LENGTH) { /* what came with the head, still in buf:
                                                    * $request_body while the head goes */
            r.body = buf + *pos;
            r.body_len = len - *pos;
        }
        if (req->expect_continue && *pos == len)
            send_continue(c);
    }
    if (wants_body && hc(c)->body_mode == REQ_BODY_LENGTH && hc(c)->body_left > collect_limit(c)) {
        status = 413; /* too large to hold, though max_body_size would let it be skipped */
        body_error = true;
        wants_body = false;
    }
    if (wants_body) {
        size_t decoded;
        size_t body_at = *pos;
        if (!body_in_buffer(c, buf, pos, len, &r, &decoded, &status)) {
            bool waiting = req->expect_continue && *pos == len;
            size_t have = hc(c)->body_mode == REQ_BODY_LENGTH ? len - head_at
                                                           : *pos + decoded - head_at;
            start_collect(c, buf + head_at, have, head_len, len - head_at, waiting);
            return false;
        }
        r.request_length += *pos - body_at;
        body_error = status != 0;
    } else if (!status && hc(c)->body_mode != REQ_BODY_NONE && !streams) {
        if (req->expect_continue && *pos == len) {
            resp.keep_alive = false; /* the client waits for 100: don't ask for the body */
        } else {
            *pos += skip_body(c, buf + *pos, len - *pos, &status);
            body_error = status != 0;
        }
    }
    if (body_error)
        resp.keep_alive = false;
    if (!resp.keep_alive && !streams)
        hc(c)->body_mode = REQ_BODY_NONE; /* closing: the rest of the body is drained, not parsed */
    /* What follows this request in the read is pipelined, as nginx counts it ($pipe). */
    bool pipelined = r.pipelined;
    hc(c)->pipeline = !streams && *pos < len;
    r.marks.resumed = hc(c)->resumed;
    hc(c)->resumed = false;
    /* Only a request whose bytes are all in buf can be put aside and read again. */
    r.marks.may_delay = !status && req->framing != HTTP_BODY_CHUNKED &&
                        !(req->framing == HTTP_BODY_LENGTH && req->content_length > 0);
    respond(c, req, &r, status, &resp);
    if (resp.delay_ms) {
        hc(c)->pipeline = pipelined; /* it runs again as it came */
        put_aside(c, buf + head_at, len - head_at, resp.delay_ms, t0_us);
        return false;
    }
    if (resp.streaming) { /* a late response: its source drives the connection now */
        http_source_start(c, &resp, &r, buf + *pos, len - *pos, NULL);
        return false;
    }
    set_pace(&r, &resp, t0_us); /* not a stream's: its pieces are not paced */
    /* Counted before it is sent: a client that has the answer and asks again (a status
     * page) must find this request counted, as nginx counts a request when it begins. */
    http_stats_record(&svc->stats, clock_now_us() - t0_us, resp.status, resp_body_bytes(&resp));
    return http_send(c, &resp, buf + *pos, len - *pos);
}

static void http_process(struct conn *c);

/* The collected request is complete: answer it, then go on with what followed it. */
static void serve_collected(struct conn *c)
{
    struct http_collect *k = hc(c)->collect;
    struct http_request req;
    struct response resp;
    int64_t now_s, t0_us = clock_now_us();
    http_date_header(&now_s);
    struct http_service *svc = http_service_of(c); /* c may be gone once the response is sent */

    /* The same bytes parse the same way; the head was valid when collecting began. */
    int rc = http_parse_request(k->data, k->head_len, &c->gen->limits, &req);
    resp_init(&resp);
    resp.head_only = req.method == HTTP_METHOD_HEAD;
    char path[REQUEST_PATH_MAX], id[VARS_REQUEST_ID_SIZE], file[REQUEST_FILE_MAX];
    struct request r;
    int status = rc > 0 ? route(c, &req, &r, path, id, file, now_s) : 500;
    resp.keep_alive = rc > 0 && keep_alive_allowed(c, &req); /* the same block as before */
    r.start_us = t0_us;
    r.conn_requests = hc(c)->requests;
    r.conn_number = c->number;
    r.conn_opened_ms = hc(c)->opened_ms;
    r.request_length = k->wire_len;
    r.body = k->data + k->head_len;
    r.body_len = k->body_len;
    hc(c)->pipeline = false; /* what followed its body came in later reads */
    respond(c, &req, &r, status, &resp);
    hc(c)->collect = NULL;
    if (resp.streaming) { /* the source owns k now (the proxy sends the body on) */
        http_source_start(c, &resp, &r, NULL, 0, k);
        return;
    }
    set_pace(&r, &resp, t0_us);
    /* The response may point into k (an echo of the body): sending copies whatever it
     * cannot send at once, so k can go as soon as the send returns. */
    http_stats_record(&svc->stats, clock_now_us() - t0_us, resp.status, resp_body_bytes(&resp));
    bool go_on = http_send(c, &resp, NULL, 0);
    http_collect_free(svc->shared, k);
    if (go_on)
        http_process(c);
}

/* The collected body is malformed or too large: the connection leaves collect mode, so
 * that its next event flushes the answer if it parks, then closes. */
static void collect_fail(struct conn *c, int status)
{
    struct http_collect *k = hc(c)->collect;
    hc(c)->collect = NULL;
    /* Counted back before the answer, so that a client that has it can count on the
     * memory (k itself goes just after: the log line is read from it). */
    body_memory_give(conn_shared(c), k->cap);
    answer_malformed(c, status, k->data, k->head_len);
    free(k);
}

/* More of a collected body has arrived (or the socket says so). */
static void collect_event(struct conn *c)
{
    struct http_collect *k = hc(c)->collect;
    for (;;) {
        size_t want;
        if (hc(c)->body_mode == REQ_BODY_LENGTH) {
            want = (size_t)hc(c)->body_left;
        } else {
            size_t limit = k->head_len + (size_t)collect_limit(c) + CONN_BUF_SIZE;
            if (k->cap - k->raw_len < 16384 && k->cap < limit) {
                size_t cap = k->cap * 2 < limit ? k->cap * 2 : limit;
                if (!body_memory_take(c, cap - k->cap)) {
                    collect_fail(c, 503);
                    return;
                }
                struct http_collect *bigger = realloc(k, sizeof(*k) + cap);
                if (!bigger) {
                    body_memory_give(conn_shared(c), cap - k->cap);
                    conn_close(c);
                    return;
                }
                hc(c)->collect = k = bigger;
                k->cap = cap;
            }
            want = k->cap - k->raw_len < 16384 ? k->cap - k->raw_len : 16384;
        }
        if (want == 0) { /* cannot happen: the decoder stops a body over the limit first */
            collect_fail(c, 413);
            return;
        }
        ssize_t n = http_read(c, k->data + k->raw_len, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            conn_wait(c, CONN_BODY, EPOLLIN, body_deadline(c));
            return;
        }
        if (n <= 0) {
            conn_close(c);
            return;
        }
        body_progress(c, (size_t)n);
        k->wire_len += (size_t)n;
        if (hc(c)->body_mode == REQ_BODY_LENGTH) {
            k->raw_len += (size_t)n;
            k->body_len += (size_t)n;
            hc(c)->body_left -= (uint64_t)n;
            if (hc(c)->body_left == 0)
                break;
            continue;
        }
        size_t start = k->head_len + k->body_len, avail = k->raw_len + (size_t)n - start;
        size_t used = 0, out = 0;
        enum http_chunked_result res = http_chunked_decode(
            &hc(c)->chunked, k->data + start, avail, collect_limit(c), &used, &out);
        k->body_len += out;
        k->raw_len = k->head_len + k->body_len;
        if (res == HTTP_CHUNKED_MORE)
            continue;
        if (res != HTTP_CHUNKED_DONE) {
            collect_fail(c, res == HTTP_CHUNKED_TOO_LARGE ? 413 : 400);
            return;
        }
        /* Bytes after the body belong to the next request. */
        k->wire_len -= avail - used;
        if (!http_save_input(c, k->data + start + used, avail - used)) {
            conn_close(c);
            return;
        }
        break;
    }
    hc(c)->body_mode = REQ_BODY_NONE;
    serve_collected(c);
}

/* Wait for more input, keeping what is buffered. head_started: a partial head was already
 * waiting before this event, so its deadline (from its first byte) stands. */
static void park_reading(struct conn *c, const char *p, size_t n, bool head_started)
{
    const struct config *cfg = &c->gen->cfg;
    int64_t now = clock_now_ms();
    if (!http_save_input(c, p, n)) {
        conn_close(c);
        return;
    }
    if (hc(c)->body_mode != REQ_BODY_NONE) {
        conn_wait(c, CONN_BODY, EPOLLIN, body_deadline(c));
    } else if (n > 0) {
        int64_t dl = head_started ? atomic_load_explicit(&c->deadline_ms, memory_order_relaxed)
                                  : now + cfg->header_timeout_ms;
        conn_wait(c, CONN_HEAD, EPOLLIN, dl);
    } else if (hc(c)->requests == 0) {
        conn_wait(c, CONN_NEW, EPOLLIN, atomic_load(&c->deadline_ms));
    } else {
        conn_wait(c, CONN_IDLE, EPOLLIN, now + hc(c)->limits->keepalive_timeout_ms);
    }
}

/* Between requests: move to the server's current generation if a reload made another. */
static void renew_generation(struct conn *c)
{
    struct generation_current *cur = &conn_shared(c)->current;
    if (atomic_load_explicit(&cur->gen, memory_order_relaxed) == c->gen)
        return;
    struct generation *old = c->gen;
    c->gen = generation_acquire(cur);
    hc(c)->limits = module_chain_default_limits(&c->gen->chain, c->local); /* old's go */
    tls_renew(c->tls, c->gen->tls); /* the TLS set's too: the old one goes with old */
    generation_release(old);
}

/* Read and answer requests until the socket has nothing more for now. */
static void http_process(struct conn *c)
{
    char buf[CONN_BUF_SIZE];
    size_t len = 0, pos = 0;
    bool served = false;
    bool head_started = atomic_load_explicit(&c->state, memory_order_relaxed) == CONN_HEAD;
    /* A source's answer has gone whole and nothing was left of the socket when its request
     * was read (a plain socket's read says so: TLS may hold records of its own): what the
     * client sent since raised an edge, which the handle has kept for its owner, so a read
     * now would only say EAGAIN (lf_group_reactivate runs this again if something came). */
    bool drained = hc(c)->source_ended && !c->in && !c->tls && c->rd_drained &&
                   hc(c)->body_mode == REQ_BODY_NONE;
    hc(c)->source_ended = false;
    if (!head_started && hc(c)->body_mode == REQ_BODY_NONE)
        renew_generation(c); /* between requests: where a reload takes effect */

    int64_t resumed_us = 0; /* the start of a request put aside, which comes first */
    if (c->in) {
        resumed_us = c->in->start_us;
        len = c->in->len;
        memcpy(buf, c->in->data, len);
        conn_buf_put(c->pool, c->in);
        c->in = NULL;
    }
    for (;;) {
        if (hc(c)->body_mode != REQ_BODY_NONE && pos < len) {
            int err = 0;
            pos += skip_body(c, buf + pos, len - pos, &err);
            if (err) { /* the answer is already sent: nothing to say, just stop */
                conn_close(c);
                return;
            }
        }
        if (hc(c)->body_mode == REQ_BODY_NONE && pos < len) {
            struct http_request req;
            int r = http_parse_request(buf + pos, len - pos, &c->gen->limits, &req);
            if (r > 0) {
                if (!serve_one(c, buf, &pos, len, &req, (size_t)r, resumed_us))
                    return;
                resumed_us = 0;
                served = true;
                head_started = false;
                continue;
            }
            if (r < 0) {
                answer_malformed(c, -r, buf + pos, len - pos);
                return;
            }
        }
        if (pos == len && (served || drained))
            break; /* wait for the next request: a read now would only say EAGAIN */
        if (pos > 0) {
            memmove(buf, buf + pos, len - pos);
            len -= pos;
            pos = 0;
        }
        if (len == sizeof(buf)) { /* cannot happen with the header limit, but never spin */
            answer_malformed(c, 431, buf, len);
            return;
        }
        ssize_t n = http_read(c, buf + len, sizeof(buf) - len);
        if (n > 0) {
            len += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        conn_close(c); /* the client closed, or the connection failed */
        return;
    }
    park_reading(c, buf + pos, len - pos, head_started && !served);
}

/* A deadline passed (the sweep shut the socket). A request not answered gets a 408. */
static void expire(struct conn *c)
{
    uint8_t state = atomic_load_explicit(&c->state, memory_order_relaxed);
    /* A request not yet answered: a partial head, or a body being collected for it. */
    if ((state == CONN_HEAD && c->in) || (state == CONN_BODY && hc(c)->collect)) {
        struct response resp;
        resp_init(&resp);
        resp_error(&resp, 408);
        resp_finish(&resp, false);
        char out[1024];
        size_t n = resp.head_len;
        if (n <= sizeof(out)) {
            memcpy(out, resp.head, n);
            if (resp.n_segs == 1 && resp.segs[0].len <= sizeof(out) - n) {
                memcpy(out + n, resp.segs[0].mem, resp.segs[0].len);
                n += resp.segs[0].len;
            }
            ssize_t w = conn_write(c, out, n); /* a socket that took nothing ends unanswered */
            (void)w;
        }
    }
    conn_close(c);
}

/* A plain HTTP request on a TLS port: told so in plain text (as nginx says it), then
 * closed. The connection is a plain one from here on. */
static void answer_plain_on_tls(struct conn *c)
{
    static const char body[] = "<html>\r\n<head><title>400 The plain HTTP request was sent "
                               "to HTTPS port</title></head>\r\n<body>\r\n<center><h1>400 "
                               "Bad Request</h1></center>\r\n<center>The plain HTTP request "
                               "was sent to HTTPS port</center>\r\n</body>\r\n</html>\r\n";
    conn_tls_free(c);
    struct response resp;
    int64_t now_s;
    http_date_header(&now_s);
    resp_init(&resp);
    resp_start(&resp, 400);
    resp_header(&resp, "Content-Type", "text/html");
    resp_body_mem(&resp, body, sizeof(body) - 1);
    resp_finish(&resp, false);
    log_access(c, NULL, (struct http_slice){"-", 1}, NULL, &resp, now_s, NULL);
    http_send(c, &resp, NULL, 0);
}

/* --- the PROXY protocol header ------------------------------------------------------------ */

/* The header is not one: logged as nginx logs it (the bytes up to the first line's end,
 * escaped), and the connection closed unanswered. */
static void proxy_header_broken(struct conn *c, const char *buf, size_t n)
{
    char text[4 * 108 + 1], client[INET6_ADDRSTRLEN] = "-";
    size_t t = 0;
    for (size_t i = 0; i < n && i < 107 && buf[i] != '\r' && buf[i] != '\n'; i++) {
        unsigned char b = (unsigned char)buf[i];
        if (b < 0x20 || b > 0x7e || b == '"' || b == '\\')
            t += (size_t)snprintf(text + t, sizeof(text) - t, "\\x%02X", b);
        else
            text[t++] = (char)b;
    }
    text[t] = '\0';
    if (c->peer.sa.sa_family == AF_INET)
        inet_ntop(AF_INET, &c->peer.v4.sin_addr, client, sizeof(client));
    else if (c->peer.sa.sa_family == AF_INET6)
        inet_ntop(AF_INET6, &c->peer.v6.sin6_addr, client, sizeof(client));
    char server[INET6_ADDRSTRLEN + 8] = "-"; /* the listener, as nginx names it */
    const struct sockaddr *l = c->local;
    if (l && l->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)(const void *)l;
        inet_ntop(AF_INET, &a->sin_addr, server, sizeof(server));
        snprintf(server + strlen(server), 8, ":%u", ntohs(a->sin_port));
    } else if (l && l->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)(const void *)l;
        server[0] = '[';
        inet_ntop(AF_INET6, &a->sin6_addr, server + 1, sizeof(server) - 8);
        snprintf(server + strlen(server), 8, "]:%u", ntohs(a->sin6_port));
    }
    log_error("broken header: \"%s\" while reading PROXY protocol, client: %s, server: %s",
              text, client, server);
    conn_close(c);
}

static void proxy_header_done(struct conn *c);

/* Read what has come of the header, without blocking and without taking a byte past it
 * (the TLS handshake or the request reads those): what the socket holds is looked at; if
 * the header ends in it, exactly the header is taken, else all of it is (it is all header)
 * and the connection waits for more, until the deadline set at accept. */
static void proxy_header_read(struct conn *c)
{
    struct http_proxy_header *pp = hc(c)->pp;
    size_t room = sizeof(pp->buf) - pp->have;
    ssize_t n = conn_peek_raw(c, pp->buf + pp->have, room);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        conn_close(c); /* gone before its header: nothing to say, as nginx at info level */
        return;
    }
    if (n < 0) {
        c->rd_drained = true;
        conn_wait(c, CONN_NEW, EPOLLIN, atomic_load(&c->deadline_ms));
        return;
    }
    size_t total = pp->have + (size_t)n;
    long len = proxy_protocol_parse(pp->buf, total, &pp->addrs);
    if (len < 0) {
        proxy_header_broken(c, pp->buf, total);
        return;
    }
    size_t take = len > 0 ? (size_t)len - pp->have : (size_t)n;
    ssize_t got = conn_read_raw(c, pp->buf + pp->have, take);
    if (got != (ssize_t)take) { /* what was seen a moment ago is there */
        conn_close(c);
        return;
    }
    pp->have = (uint16_t)(pp->have + take);
    if (len == 0) {
        c->rd_drained = (size_t)n < room; /* all the socket held was taken */
        conn_wait(c, CONN_NEW, EPOLLIN, atomic_load(&c->deadline_ms));
        return;
    }
    proxy_header_done(c);
}

/* The TLS handshake, as far as the socket allows; then the first request. Its deadline is
 * header_timeout from accept, the connection's first. */
static void handshake(struct conn *c)
{
    int64_t deadline = atomic_load_explicit(&c->deadline_ms, memory_order_relaxed);
    switch (conn_tls_handshake(c)) {
    case CONN_TLS_DONE:
        http_process(c);
        return;
    case CONN_TLS_WANT_READ:
        conn_wait(c, CONN_NEW, EPOLLIN, deadline);
        return;
    case CONN_TLS_WANT_WRITE:
        conn_wait(c, CONN_NEW, EPOLLOUT, deadline);
        return;
    case CONN_TLS_PLAIN:
        answer_plain_on_tls(c);
        return;
    case CONN_TLS_FAILED:
        conn_close(c);
        return;
    }
}

/* The header is read: keep what it said, let the buffer go, and start the connection. */
static void proxy_header_done(struct conn *c)
{
    struct http_proxy_header *pp = hc(c)->pp;
    pp->done = true;
    struct http_proxy_header *small = realloc(pp, offsetof(struct http_proxy_header, buf));
    if (small)
        hc(c)->pp = small;
    if (c->tls)
        handshake(c);
    else
        http_process(c);
}

/* The event handler of every HTTP connection. */
static void http_conn_event(struct lf_handle *h, uint32_t events)
{
    (void)events;
    struct conn *c = (struct conn *)h;
    uint8_t state = atomic_load_explicit(&c->state, memory_order_relaxed);
    if (atomic_load_explicit(&c->expired, memory_order_relaxed)) {
        /* A response in flight is only cut when its own (send) deadline has passed: the
         * sweep may have seen a stale state while this connection was being served. */
        if (state != CONN_SEND ||
            atomic_load_explicit(&c->deadline_ms, memory_order_relaxed) <= clock_now_ms()) {
            expire(c);
            return;
        }
        atomic_store_explicit(&c->expired, false, memory_order_relaxed);
    }
    if (state == CONN_LINGER) {
        conn_linger_event(c);
        return;
    }
    if (hc(c)->pp && !hc(c)->pp->done) {
        proxy_header_read(c);
        return;
    }
    if (c->tls && !conn_tls_finished(c)) {
        handshake(c);
        return;
    }
    if (hc(c)->collect) {
        collect_event(c);
        return;
    }
    if (state == CONN_TIMED) {
        if (!c->out) { /* a request put aside: it runs again now */
            http_process(c);
            return;
        }
        state = CONN_SEND; /* a paced response: the pace allows more now */
    }
    if (state == CONN_SEND) {
        enum send_result r = conn_send_pending(c);
        if (r == SEND_ERROR) {
            conn_close(c);
            return;
        }
        if (r == SEND_PARKED) {
            conn_wait(c, CONN_SEND, EPOLLOUT,
                      clock_now_ms() + hc(c)->limits->send_timeout_ms);
            return;
        }
        if (hc(c)->source) { /* a part of a late response went out: its source goes on */
            hc(c)->source->ops->resume(hc(c)->source);
            return;
        }
        if (c->close_after_send) {
            conn_linger(c);
            return;
        }
        atomic_store_explicit(&c->state, CONN_IDLE, memory_order_relaxed);
    }
    http_process(c);
}

/* The close hook of every HTTP connection: what the HTTP layer hung on it goes. */
static void http_conn_closed(struct conn *c)
{
    if (hc(c)->source)
        http_source_abort(c);
    if (hc(c)->collect)
        http_collect_free(conn_shared(c), hc(c)->collect);
    hc(c)->collect = NULL;
    generation_release(c->gen);
    c->gen = NULL;
    free(hc(c)->pp);
    hc(c)->pp = NULL;
}

void http_service_init(struct http_service *svc, struct http_shared *shared,
                       struct lf_group *const *groups, unsigned n, unsigned max_connections)
{
    memset(svc, 0, sizeof(*svc));
    svc->shared = shared;
    svc->serve = http_process;
    conn_pool_init(&svc->pool, groups, n, sizeof(struct http_conn), max_connections,
                   &shared->n_conns);
}

void http_service_fini(struct http_service *svc)
{
    conn_pool_fini(&svc->pool);
}

struct conn *http_conn_open(struct http_service *svc, struct lf_group *group,
                            struct generation *gen, int fd,
                            const struct sockaddr *peer, socklen_t peer_len,
                            const struct sockaddr *local)
{
    struct conn *c = conn_open(&svc->pool, group, fd, peer, peer_len, local,
                               clock_now_ms() + gen->cfg.header_timeout_ms, http_conn_event,
                               http_conn_closed);
    if (!c)
        return NULL;
    hc(c)->home = &svc->pool;
    hc(c)->opened_ms = clock_now_ms();
    c->number = atomic_fetch_add_explicit(&svc->shared->conn_serial, 1, memory_order_relaxed) + 1;
    generation_hold(gen);
    c->gen = gen;
    hc(c)->limits = module_chain_default_limits(&gen->chain, local);
    void *ssl;
    int tls = tls_accept(gen->tls, local, &ssl);
    if (tls < 0) {
        log_error("connection fd %d: no memory for its TLS state", fd);
        conn_close(c);
        return NULL;
    }
    if (tls)
        conn_tls_attach(c, ssl);
    int at = site_listen_match(gen->cfg.listen, gen->cfg.n_listen, local);
    if (at >= 0 && gen->cfg.listen[at].proxy_protocol) {
        hc(c)->pp = malloc(sizeof(*hc(c)->pp));
        if (!hc(c)->pp) {
            log_error("connection fd %d: no memory for its PROXY protocol header", fd);
            conn_close(c);
            return NULL;
        }
        hc(c)->pp->done = false;
        hc(c)->pp->have = 0;
    }
    return c;
}

void http_conn_start(struct conn *c)
{
    if (hc(c)->pp && !hc(c)->pp->done)
        proxy_header_read(c);
    else if (c->tls)
        handshake(c);
    else
        http_process(c);
}

/* --- service classes ------------------------------------------------------------------ */

struct http_service *http_class_for_request(const struct http_shared *shared,
                                            const struct config *cfg, const char *path,
                                            size_t len, struct http_slice host)
{
    struct http_service *best = NULL;
    size_t best_len = 0;
    for (unsigned i = 1; i < shared->n_services; i++) {
        const struct config_class *k = &cfg->classes[i - 1];
        for (unsigned p = 0; p < k->n_paths; p++) {
            size_t pl = strlen(k->paths[p]);
            if (pl > best_len && pl <= len && memcmp(path, k->paths[p], pl) == 0) {
                best = shared->services[i];
                best_len = pl;
            }
        }
    }
    if (best || host.len == 0)
        return best;
    /* The host without its port: "example.org:8080" -> "example.org", "[::1]:80" -> "[::1]". */
    size_t hl = host.len;
    const char *end = host.p[0] == '[' ? memchr(host.p, ']', host.len) : host.p;
    const char *colon = end ? memchr(end, ':', host.len - (size_t)(end - host.p)) : NULL;
    if (colon)
        hl = (size_t)(colon - host.p);
    for (unsigned i = 1; i < shared->n_services; i++) {
        const struct config_class *k = &cfg->classes[i - 1];
        for (unsigned h = 0; h < k->n_hosts; h++)
            if (strlen(k->hosts[h]) == hl && strncasecmp(k->hosts[h], host.p, hl) == 0)
                return shared->services[i];
    }
    return NULL;
}

struct http_service *http_class_for_peer(const struct http_shared *shared,
                                         const struct config *cfg, const struct sockaddr *peer)
{
    for (unsigned i = 1; i < shared->n_services; i++) {
        const struct config_class *k = &cfg->classes[i - 1];
        for (unsigned a = 0; a < k->n_addrs; a++)
            if (config_cidr_match(&k->addrs[a], peer))
                return shared->services[i];
    }
    return NULL;
}
