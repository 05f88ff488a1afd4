/* http_source.c — the end of every answer, and the seam of late responses (http_source.h).
 *
 * What the request loop and the sources share: the class's figures, the access log, the
 * log hooks, sending with parking, and the end of a source's answer, written once. The
 * table of kinds below is the only place that names the sources.
 */
#include "http_source.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "clock.h"
#include "vars.h"

/* Every kind of late response, asked in order which answers a streamed response. */
static const struct http_source_kind *const kinds[] = {&http_fastcgi_source, &http_proxy_source,
                                                      &http_stream_source};

/* --- the figures and the logs ------------------------------------------------------------ */

void http_stats_record(struct http_stats *st, int64_t us, int status, uint64_t bytes)
{
    /* the bucket is the bit length of us (us < 2^b), found at once rather than by a loop
     * of up to 31 shifts per request; the last bucket takes everything longer */
    unsigned b = us <= 0 ? 0 : 64 - (unsigned)__builtin_clzll((unsigned long long)us);
    if (b > HTTP_LATENCY_BUCKETS - 1)
        b = HTTP_LATENCY_BUCKETS - 1;
    atomic_fetch_add_explicit(&st->requests, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&st->latency_us_log2[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&st->latency_us_sum, us > 0 ? (unsigned long)us : 0,
                              memory_order_relaxed);
    if (status >= 100 && status <= 599)
        atomic_fetch_add_explicit(&st->by_status[status / 100 - 1], 1, memory_order_relaxed);
    if (bytes)
        atomic_fetch_add_explicit(&st->bytes_sent, bytes, memory_order_relaxed);
}

void http_log_access(struct conn *c, const struct sockaddr *peer, struct http_slice line,
                     struct http_slice referer,
                     struct http_slice user_agent, int status, uint64_t bytes, int64_t now_s,
                     char *request_id)
{
    char fresh[33] = "";
    struct access_entry e = {
        .peer = peer ? peer : &c->peer.sa,
        .request_line = line.p,
        .request_line_len = line.len,
        .status = status,
        .bytes = bytes,
        .referer = referer.p,
        .referer_len = referer.len,
        .user_agent = user_agent.p,
        .user_agent_len = user_agent.len,
        .time_s = now_s,
    };
    if (c->gen->cfg.access_log_request_id)
        e.request_id = vars_request_id(request_id ? request_id : fresh);
    access_log_write(&http_service_of(c)->shared->access_log, &e);
}

void http_request_init(struct conn *c, const struct http_request *h, struct request *r,
                       char *path, char *id, int64_t now_s)
{
    path[0] = '\0';
    id[0] = '\0';
    memset(r, 0, offsetof(struct request, captures)); /* not the arrays after (module.h) */
    r->captures.re = r->server_captures.re = NULL;
    r->captures.subject = r->server_captures.subject = NULL;
    r->captures.n = r->server_captures.n = 0;
    r->vars.n = r->vars.used = 0;
    r->http = h;
    r->path = path;
    r->peer = r->conn_peer = &c->peer.sa;
    r->proxy_protocol = hc(c)->pp ? &hc(c)->pp->addrs : NULL;
    r->local = c->local;
    r->local_fd = c->h.fd;
    r->https = c->tls != NULL;
    r->tls = c->tls;
    r->request_id = id;
    r->now_s = now_s;
    r->cfg = &c->gen->cfg;
    r->root_fd = c->gen->root_fd;
    r->root_real = c->gen->root_real;
    r->args = h->query;
    r->has_args = h->has_query;
    r->pipelined = hc(c)->pipeline;
    r->file = path;
    r->level = c->gen->chain.levels;
    r->server = http_service_of(c)->shared->server;
    r->chain = &c->gen->chain;
}

void http_log_unparsed(struct conn *c, const struct response *resp, int64_t now_s)
{
    http_log_unparsed_marked(c, resp, now_s, NULL);
}

void http_log_unparsed_marked(struct conn *c, const struct response *resp, int64_t now_s,
                              const struct request_marks *marks)
{
    struct http_request empty;
    memset(&empty, 0, sizeof(empty));
    char path[1], id[VARS_REQUEST_ID_SIZE];
    struct request r;
    http_request_init(c, &empty, &r, path, id, now_s);
    r.start_us = clock_now_us();
    if (marks)
        r.marks = *marks;
    module_chain_log(&c->gen->chain, &r, resp);
}

/* --- sending ----------------------------------------------------------------------------- */

static_assert(RESP_MAX_SEGS < CONN_MAX_SEGS, "a response's segments and its head fit a send");

enum send_result http_send_response(struct conn *c, struct response *resp, bool body)
{
    struct out_msg m = {
        .head = resp->head,
        .head_len = resp->head_len,
        .segs = resp->segs,
        .n_segs = body ? resp->n_segs : 0,
        .file_fd = resp->file_fd,
        .file_release = resp->file_release,
        .file_release_ctx = resp->file_release_ctx,
        .rate = resp->limit_rate,
        .rate_after = resp->limit_rate_after,
        .rate_start_ms = resp->rate_start_ms,
    };
    enum send_result res = conn_send(c, &m);
    if (m.file_fd < 0) { /* parked with the rest: the connection's now */
        resp->file_fd = -1;
        resp->file_release = NULL;
    }
    resp_file_close(resp);
    if (resp->release) { /* sent, or copied onto the connection: the module's memory goes */
        resp->release(resp->release_ctx);
        resp->release = NULL;
    }
    return res;
}

bool http_save_input(struct conn *c, const char *p, size_t n)
{
    if (n == 0)
        return true;
    c->in = conn_buf_get(c->pool);
    if (!c->in)
        return false;
    memcpy(c->in->data, p, n);
    c->in->len = (uint32_t)n;
    return true;
}

bool http_send(struct conn *c, struct response *resp, const char *rest, size_t rest_len)
{
    if (resp_is_drop(resp)) { /* return 444 */
        conn_close(c);
        return false;
    }
    enum send_result sr = http_send_response(c, resp, !resp->head_only && !resp->no_length);
    if (sr == SEND_ERROR) {
        conn_close(c);
        return false;
    }
    if (sr == SEND_PARKED) {
        if (!http_save_input(c, rest, rest_len)) {
            conn_close(c);
            return false;
        }
        c->close_after_send = !resp->keep_alive;
        conn_wait(c, CONN_SEND, EPOLLOUT, clock_now_ms() + hc(c)->limits->send_timeout_ms);
        return false;
    }
    if (resp->keep_alive)
        return true;
    /* Linger only when the client may still be sending; otherwise a plain close. */
    if (resp->status >= 400 || rest_len > 0 || hc(c)->body_mode != REQ_BODY_NONE)
        conn_linger(c);
    else
        conn_close(c);
    return false;
}

void http_collect_free(struct http_shared *shared, struct http_collect *k)
{
    atomic_fetch_sub_explicit(&shared->body_memory, k->cap, memory_order_relaxed);
    free(k);
}

/* --- sources: starting ------------------------------------------------------------------- */

void http_source_start(struct conn *c, struct response *resp, const struct request *r,
                       const char *rest, size_t rest_len, struct http_collect *body_owner)
{
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        if (kinds[i]->answers(resp)) {
            kinds[i]->start(c, resp, r, rest, rest_len, body_owner);
            return;
        }
    }
    /* A streamed response no kind answers: a module's mistake, never the client's. */
    log_error("a streamed response no source answers: connection fd %d closed", c->h.fd);
    if (body_owner)
        http_collect_free(http_service_of(c)->shared, body_owner);
    conn_close(c);
}

void http_sources_fini(void)
{
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (kinds[i]->fini)
            kinds[i]->fini();
}

static void copy_slice(char *dst, size_t cap, struct http_slice s)
{
    size_t n = s.len < cap - 1 ? s.len : cap - 1;
    if (n)
        memcpy(dst, s.p, n);
    dst[n] = '\0';
}

static struct http_slice slice_of(const char *s)
{
    return (struct http_slice){s, strlen(s)};
}

void http_source_init(struct http_source *s, const struct http_source_ops *ops,
                      struct conn *c, const struct response *resp, const struct request *r)
{
    const struct http_request *h = r->http;
    s->ops = ops;
    s->c = c;
    s->status = 0;
    s->sent = 0;
    s->start_us = clock_now_us();
    s->head_sent = s->chunked = false;
    s->trailers_render = NULL;
    s->no_chunked = false;
    s->head_only = resp->head_only;
    s->keep_alive = resp->keep_alive;
    s->http10 = h->version_minor == 0;
    s->has_saved = false;
    s->saved.marks = r->marks; /* even unsaved: the log hooks let go of what it holds */
    s->filter = NULL;
    s->filter_state = NULL;
    s->request_id[0] = '\0';
    copy_slice(s->request_line, sizeof(s->request_line), http_request_line(h));
    copy_slice(s->referer, sizeof(s->referer), h->referer);
    copy_slice(s->user_agent, sizeof(s->user_agent), h->user_agent);
    hc(c)->source = s;
}

/* --- the request as it was answered ------------------------------------------------------ */

/* A slice into the client's head [from, from + len) points into its copy at `to` instead. */
static void rebase(struct http_slice *sl, const char *from, size_t len, const char *to)
{
    if (sl->p && sl->p >= from && sl->p <= from + len)
        sl->p = to + (sl->p - from);
}

/* The bytes of the path's buffer a copy keeps: the path, and the groups of its regex
 * captures that a try_files or an error_page kept past its end. */
static size_t path_kept(const struct request *r)
{
    size_t keep = r->path_len;
    const struct regex_captures *k = &r->captures;
    if (k->subject != r->path)
        return keep;
    for (unsigned i = 0; i < 2 * k->n; i++)
        if (k->ov[i] != UINT32_MAX && k->ov[i] > keep)
            keep = k->ov[i];
    return keep;
}

size_t http_source_save_room(const struct request *r)
{
    return r->http->header_bytes + path_kept(r) + 1 + r->args.len;
}

/* *dst = *src, but of the values `set` gave only those there are (module.h). */
static void request_copy(struct request *dst, const struct request *src)
{
    memcpy(dst, src, offsetof(struct request, vars));
    if (src->peer_replaced) /* the copy's own address, not the frame's */
        dst->peer = &dst->real_peer.sa;
    dst->vars.n = src->vars.n;
    dst->vars.used = src->vars.used;
    memcpy(dst->vars.v, src->vars.v, src->vars.n * sizeof(src->vars.v[0]));
    memcpy(dst->vars.buf, src->vars.buf, src->vars.used);
}

void http_source_save_request(struct http_source *s, const struct request *r, char *room,
                              size_t cap)
{
    const struct http_request *h = r->http;
    s->has_saved = false;
    const char *start = h->method_name.p;
    /* The blank line follows the last field (or the request line) at once. (The head ends
     * within header_bytes of its first byte, which is at or before the method: the parser
     * may have skipped empty lines.) */
    const char *from = h->n_headers ? h->headers[h->n_headers - 1].value.p +
                                          h->headers[h->n_headers - 1].value.len
                                    : h->target.p + h->target.len;
    const char *limit = start + h->header_bytes;
    const char *end = start && from < limit ? memmem(from, (size_t)(limit - from), "\r\n\r\n", 4)
                                            : NULL;
    if (!end)
        return;
    size_t hl = (size_t)(end + 4 - start);
    size_t kept = path_kept(r);
    if (hl + kept + 1 + r->args.len > cap)
        return;
    char *at = room;
    memcpy(at, start, hl);
    struct http_request *c = &s->saved_http;
    memcpy(c, h, offsetof(struct http_request, headers)); /* the fields before the lines */
    c->n_headers = h->n_headers;
    memcpy(&c->host, &h->host,
           sizeof(*h) - offsetof(struct http_request, host)); /* and after them */
    struct http_slice *named[] = {&c->method_name, &c->target, &c->path, &c->query, &c->host,
                                  &c->if_none_match, &c->if_modified_since, &c->if_match,
                                  &c->if_unmodified_since, &c->range, &c->if_range,
                                  &c->user_agent, &c->referer, &c->accept_encoding,
                                  &c->content_type};
    for (size_t i = 0; i < sizeof(named) / sizeof(named[0]); i++)
        rebase(named[i], start, hl, at);
    for (unsigned i = 0; i < h->n_headers; i++) {
        c->headers[i] = h->headers[i];
        rebase(&c->headers[i].name, start, hl, at);
        rebase(&c->headers[i].value, start, hl, at);
    }
    request_copy(&s->saved, r);
    s->saved.http = c;
    char *path = at + hl;
    memcpy(path, r->path, kept);
    path[r->path_len] = '\0';
    s->saved.path = path;
    s->saved.file = path;
    s->saved.file_len = r->path_len;
    s->saved.file_room = NULL; /* the frame's: gone when the answer goes on later */
    /* The captures are offsets into what they matched: the path, kept above, and the Host
     * of a `server_name ~RE`, in the head: the copies, since the answer's filters read them
     * in a later event, when the thread's buffers hold another request. */
    if (r->captures.subject == r->path)
        s->saved.captures.subject = path;
    const char *host = r->server_captures.subject;
    if (host && host >= start && host <= start + hl)
        s->saved.server_captures.subject = at + (host - start);
    char *args = path + kept + 1;
    if (r->args.len)
        memcpy(args, r->args.p, r->args.len);
    s->saved.args = (struct http_slice){args, r->args.len};
    s->saved.body = s->saved.read_body = NULL; /* the frame's: http_source_save_body */
    s->saved.body_len = s->saved.read_body_len = 0;
    s->request_id[0] = '\0';
    if (r->request_id)
        memcpy(s->request_id, r->request_id, sizeof(s->request_id));
    s->saved.request_id = s->request_id;
    s->has_saved = true;
}

size_t http_source_body_room(const struct request *r)
{
    return module_request_body_len(r);
}

void http_source_save_body(struct http_source *s, const struct request *r, char *room)
{
    size_t n = http_source_body_room(r);
    if (!s->has_saved || n == 0)
        return;
    memcpy(room, module_request_body(r), n);
    http_source_keep_body(s, room, n);
}

void http_source_keep_body(struct http_source *s, const char *body, size_t len)
{
    if (!s->has_saved)
        return;
    s->saved.body = len ? body : NULL;
    s->saved.body_len = len;
}

/* --- the head and the body --------------------------------------------------------------- */

/* pg made a copy of the saved request, with room for a path of its own. */
static void page_from_saved(struct http_source *s, struct http_source_page *pg)
{
    pg->r = s->saved; /* (it keeps the body for $request_body only) */
    memcpy(pg->path, s->saved.path, s->saved.path_len + 1);
    if (pg->r.captures.subject == s->saved.path)
        pg->r.captures.subject = pg->path;
    pg->r.path = pg->path;
    pg->r.file = pg->path;
    pg->r.file_len = pg->r.path_len;
    pg->r.file_room = pg->file;
}

bool http_source_error_page(struct http_source *s, struct response *resp,
                            struct http_source_page *pg)
{
    if (!s->has_saved || !module_chain_has_error_page(&s->saved, resp->status))
        return false;
    page_from_saved(s, pg);
    if (!module_chain_error_page(&s->c->gen->chain, &pg->r, resp))
        return false;
    s->status = resp->status;
    return true;
}

/* The fields of an application's or upstream's head that go with the answer its
 * X-Accel-Redirect names, as nginx's (the upstream fields it marks to keep across the
 * redirect): each in place of the answer's own, every line of it, but Content-Type, whose
 * last line holds. */
static const char *const accel_kept[] = {"Content-Type",  "Content-Disposition",
                                         "Cache-Control", "Expires",
                                         "Accept-Ranges", "Set-Cookie"};

static bool field_is(struct http_slice name, const char *want)
{
    return name.len == strlen(want) && strncasecmp(name.p, want, name.len) == 0;
}

static void keep_accel_fields(struct response *resp, const struct http_header *fields,
                              unsigned n)
{
    for (size_t k = 0; k < sizeof(accel_kept) / sizeof(accel_kept[0]); k++) {
        const char *name = accel_kept[k];
        bool single = k == 0, removed = false;
        for (unsigned i = 0; i < n; i++) {
            if (!field_is(fields[i].name, name))
                continue;
            if (!removed || single)
                resp_header_remove(resp, name);
            removed = true;
            resp_header_n(resp, name, strlen(name), fields[i].value.p, fields[i].value.len);
        }
    }
}

bool http_source_accel(struct http_source *s, struct response *resp,
                       struct http_source_page *pg, struct http_slice to,
                       const struct http_header *fields, unsigned n)
{
    resp_init(resp);
    page_from_saved(s, pg);
    bool followed = module_chain_accel_redirect(&s->c->gen->chain, &pg->r, resp, to.p,
                                                to.len) == 0;
    if (followed && resp->status < 400)
        keep_accel_fields(resp, fields, n);
    module_chain_filter(&s->c->gen->chain, &pg->r, resp);
    s->status = resp->status;
    return followed;
}

void http_source_filter_head(struct http_source *s, struct response *resp,
                             const struct proxy_params *upstream)
{
    if (!s->has_saved)
        return;
    int64_t now_s;
    http_date_header(&now_s);
    s->saved.now_s = now_s;
    resp->streaming = true; /* the body comes later: filters of whole bodies pass it by */
    resp->stream_head = true;
    resp->proxy = upstream;
    resp->upstream_head = upstream != NULL;
    module_chain_filter(&s->c->gen->chain, &s->saved, resp);
    s->trailers_render = resp->trailers_render;
    s->trailers_ctx = resp->trailers_ctx;
    s->no_chunked = resp->no_chunked;
    resp->streaming = false;
    resp->stream_head = false;
    resp->proxy = NULL;
    resp->upstream_head = false;
}

bool http_source_start_filter(struct http_source *s, const struct response *resp)
{
    if (!resp->body_filter || s->head_only || resp->no_length)
        return true;
    s->filter_state = resp->body_filter->start(resp->body_filter_conf, resp->body_filter_arg);
    if (!s->filter_state)
        return false;
    s->filter = resp->body_filter;
    return true;
}

/* The filter's output, gathered into the piece (see struct http_piece). */
static int piece_emit(void *arg, const char *p, size_t n)
{
    struct http_piece *pc = arg;
    if (n > sizeof(pc->out) - pc->out_len)
        return -1;
    memcpy(pc->out + pc->out_len, p, n);
    pc->out_len += n;
    return 0;
}

/* Queue p[0..n), framed, on resp. */
static void frame(struct http_source *s, struct response *resp, const char *p, size_t n,
                  struct http_piece *pc)
{
    if (n == 0)
        return;
    if (s->chunked) {
        char *e = http_fmt_hex(pc->chunk_line, n);
        memcpy(e, "\r\n", 2);
        resp_body_mem(resp, pc->chunk_line, (size_t)(e + 2 - pc->chunk_line));
    }
    resp_body_mem(resp, p, n);
    if (s->chunked)
        resp_body_mem(resp, "\r\n", 2);
    s->sent += n;
}

/* Run the filter on p[0..n) (end: the last), its output framed onto resp. */
static int filter_piece(struct http_source *s, struct response *resp, const char *p, size_t n,
                        bool end, struct http_piece *pc)
{
    pc->out_len = 0;
    if (s->filter->feed(s->filter_state, p, n, end, piece_emit, pc) < 0)
        return -1;
    frame(s, resp, pc->out, pc->out_len, pc);
    return 0;
}

int http_source_body(struct http_source *s, struct response *resp, const char *p, size_t n,
                     struct http_piece *pc)
{
    if (n == 0 || s->head_only)
        return 0;
    if (s->filter)
        return filter_piece(s, resp, p, n, false, pc);
    frame(s, resp, p, n, pc);
    return 0;
}

int http_source_body_end(struct http_source *s, struct response *resp, struct http_piece *pc)
{
    if (s->head_only)
        return 0;
    if (s->filter && filter_piece(s, resp, NULL, 0, true, pc) < 0)
        return -1;
    if (s->chunked && s->trailers_render) {
        /* The trailers go after the filter's last output, in the piece's room. */
        size_t used = s->filter ? pc->out_len : 0;
        char *at = pc->out + used;
        long n = s->trailers_render(s->trailers_ctx, &s->saved, s->status, at,
                                    sizeof(pc->out) - used);
        resp_body_mem(resp, "0\r\n", 3);
        if (n > 0)
            resp_body_mem(resp, at, (size_t)n);
        resp_body_mem(resp, "\r\n", 2);
    } else if (s->chunked) {
        resp_body_mem(resp, "0\r\n\r\n", 5);
    }
    return 0;
}

enum send_result http_source_send(struct http_source *s, struct response *resp)
{
    struct conn *c = s->c;
    /* Whether there is a body is the source's to say (HEAD, 204 and 304 add none). */
    enum send_result r = http_send_response(c, resp, true);
    if (r == SEND_PARKED) {
        c->close_after_send = false;
        conn_wait(c, CONN_SEND, EPOLLOUT, clock_now_ms() + hc(c)->limits->send_timeout_ms);
    }
    return r;
}

/* --- the end ----------------------------------------------------------------------------- */

/* Count and log the answer, and let go of its filter. */
static void source_log(struct http_source *s)
{
    struct conn *c = s->c;
    http_stats_record(&http_service_of(c)->stats, clock_now_us() - s->start_us, s->status,
                      s->sent);
    int64_t now_s;
    http_date_header(&now_s);
    if (!s->has_saved || !module_chain_logs_request(&c->gen->chain, &s->saved))
        http_log_access(c, s->has_saved ? s->saved.peer : NULL, slice_of(s->request_line), slice_of(s->referer),
                        slice_of(s->user_agent), s->status, s->sent, now_s,
                        s->has_saved ? s->request_id : NULL);
    struct response resp; /* what the modules' log hooks need to know of it */
    resp_init(&resp);
    resp.status = s->status;
    resp.content_length = s->sent;
    if (s->has_saved) /* the log hooks see the request as it was answered */
        module_chain_log(&c->gen->chain, &s->saved, &resp);
    else
        http_log_unparsed_marked(c, &resp, now_s, &s->saved.marks); /* limits let go */
    if (s->filter)
        s->filter->free(s->filter_state);
    s->filter = NULL;
    s->filter_state = NULL;
}

/* The connection whose next request waits to be read, when a source ended while this
 * thread was already serving from an earlier end (see http_source_end). */
static _Thread_local struct conn *serve_next;
static _Thread_local bool serving_after_end;

void http_source_end(struct http_source *s, struct response *resp, bool keep_alive)
{
    struct conn *c = s->c;
    source_log(s);
    hc(c)->source = NULL;
    s->ops->release(s); /* s may be another thread's from here on */
    resp->keep_alive = keep_alive;
    if (!http_send(c, resp, NULL, 0))
        return;
    hc(c)->source_ended = true;
    /* The next request may fail at once too (an application whose socket is gone), and
     * end its source inside this serve: serving it from there would nest one more serve
     * per request for as long as the client keeps asking, and overflow the stack. The
     * inner end leaves the connection here instead, and this loop serves it once the
     * stack is back to where the first end ran. */
    if (serving_after_end && !serve_next) {
        serve_next = c;
        return;
    }
    if (serving_after_end) { /* a second connection at once: served from here, as it comes */
        http_service_of(c)->serve(c);
        return;
    }
    serving_after_end = true;
    for (struct conn *next = c; next; ) {
        serve_next = NULL;
        http_service_of(next)->serve(next);
        next = serve_next;
    }
    serving_after_end = false;
}

void http_source_abort(struct conn *c)
{
    struct http_source *s = hc(c)->source;
    source_log(s);
    hc(c)->source = NULL;
    s->ops->abort(s);
}
