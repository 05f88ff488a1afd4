/* http_response.c — status lines, headers, the cached Date, error pages. */
#include "http_response.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "http_parse.h"

/* Process-wide, set once before the threads start. */
static char server_line[96] = "Server: lfhttpd\r\n";
static size_t server_line_len = 17;
static char server_name[96] = "lfhttpd";

void http_response_set_server(const char *name)
{
    int n = snprintf(server_line, sizeof(server_line), "Server: %s\r\n", name);
    server_line_len = n > 0 && (size_t)n < sizeof(server_line) ? (size_t)n : 0;
    snprintf(server_name, sizeof(server_name), "%s", server_line_len ? name : "lfhttpd");
}

const char *http_response_server(void)
{
    return server_name;
}

char *http_fmt_u64(char *out, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *out++ = tmp[--n];
    return out;
}

char *http_fmt_hex(char *out, uint64_t v)
{
    static const char digits[] = "0123456789abcdef";
    char tmp[16];
    size_t n = 0;
    do {
        tmp[n++] = digits[v & 15];
        v >>= 4;
    } while (v);
    while (n)
        *out++ = tmp[--n];
    return out;
}

const char *http_last_modified(int64_t mtime_s)
{
    static _Thread_local int64_t cached_t = INT64_MIN;
    static _Thread_local char cached[30];
    if (mtime_s != cached_t) {
        http_date_format(mtime_s, cached);
        cached_t = mtime_s;
    }
    return cached;
}

const char *http_status_text(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 416: return "Range Not Satisfiable";
    case 417: return "Expectation Failed";
    case 421: return "Misdirected Request";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
    }
}

const char *http_date_header(int64_t *now_s)
{
    /* Per thread, so no lock and no shared cache line: formatting happens once a second. */
    static _Thread_local int64_t cached_s = -1;
    static _Thread_local char cached[40];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    if (ts.tv_sec != cached_s) {
        memcpy(cached, "Date: ", 6);
        http_date_format(ts.tv_sec, cached + 6);
        memcpy(cached + 35, "\r\n", 3);
        cached_s = ts.tv_sec;
    }
    if (now_s)
        *now_s = cached_s;
    return cached;
}

_Static_assert(RESP_HEAD_CAP <= UINT16_MAX, "line_at holds offsets into head");

/* A line starts at head[at] (after the status line). */
static void note_line(struct response *r, size_t at)
{
    if (r->n_lines < RESP_INDEXED_LINES)
        r->line_at[r->n_lines] = (uint16_t)at;
    if (r->n_lines <= RESP_INDEXED_LINES)
        r->n_lines++; /* one past the array: too many, and it stays so */
}

static bool lines_indexed(const struct response *r)
{
    return r->n_lines <= RESP_INDEXED_LINES;
}

static void head_append(struct response *r, const char *p, size_t n)
{
    if (r->head_len + n > sizeof(r->head) - 96) { /* keep room for the framing headers */
        r->overflow = true;
        return;
    }
    memcpy(r->head + r->head_len, p, n);
    r->head_len += n;
}

void resp_init(struct response *r)
{
    r->file_fd = -1;
    r->file_release = NULL;
    r->file_release_ctx = NULL;
    r->file_st = NULL;
    r->head_only = false;
    r->keep_alive = false;
    r->keep_alive_header_s = 0;
    r->say_keep_alive = false;
    r->release = NULL;
    r->release_ctx = NULL;
    r->streaming = false;
    r->proxy = NULL;
    r->limit_rate = 0;
    r->delay_ms = 0;
    r->upstream_head = false;
    r->stream_head = false;
    r->body_filter = NULL;
    r->chunked = false;
    r->trailers = NULL;
    r->trailers_len = 0;
    r->trailers_render = NULL;
    r->trailers_ctx = NULL;
    r->no_chunked = false;
    r->length_known = false;
    r->no_length = false;
    r->overflow = false;
    r->builtin_page = false;
    r->drop = false;
    r->content_length = 0;
    r->n_segs = 0;
    r->head_len = 0;
    r->n_lines = 0;
    r->scratch_len = 0;
}

void resp_file_close(struct response *r)
{
    if (r->file_release)
        r->file_release(r->file_release_ctx);
    else if (r->file_fd >= 0)
        close(r->file_fd);
    r->file_fd = -1;
    r->file_release = NULL;
    r->file_release_ctx = NULL;
    r->file_st = NULL;
}

/* header_line when the lines' starts are not known: look for each line end. */
static bool header_line_scan(const struct response *r, const char *name, size_t nl,
                             size_t *start, size_t *next)
{
    const char *head = r->head, *end = r->head + r->head_len;
    const char *p = memchr(head, '\n', r->head_len);
    while (p && p + 1 < end) {
        const char *line = p + 1;
        const char *eol = memchr(line, '\n', (size_t)(end - line));
        if (!eol)
            return false;
        if ((size_t)(eol - line) > nl && line[nl] == ':' && strncasecmp(line, name, nl) == 0) {
            *start = (size_t)(line - head);
            *next = (size_t)(eol + 1 - head);
            return true;
        }
        p = eol;
    }
    return false;
}

/* Find the line of header `name` (nl bytes) in the head (after the status line): its
 * start and the start of the next line. */
static bool header_line(const struct response *r, const char *name, size_t nl, size_t *start,
                        size_t *next)
{
    if (!lines_indexed(r))
        return header_line_scan(r, name, nl, start, next);
    for (unsigned i = 0; i < r->n_lines; i++) {
        size_t at = r->line_at[i], end = i + 1 < r->n_lines ? r->line_at[i + 1] : r->head_len;
        const char *line = r->head + at;
        /* end - at counts the CRLF: the line must go on past the colon */
        if (end - at > nl + 1 && line[nl] == ':' && strncasecmp(line, name, nl) == 0) {
            *start = at;
            *next = end;
            return true;
        }
    }
    return false;
}

/* The line head[start..next) was cut out: later lines moved back by its length. */
static void forget_line(struct response *r, size_t start, size_t next)
{
    if (!lines_indexed(r))
        return;
    unsigned i = 0;
    while (i < r->n_lines && r->line_at[i] != start)
        i++;
    if (i == r->n_lines)
        return;
    for (r->n_lines--; i < r->n_lines; i++)
        r->line_at[i] = (uint16_t)(r->line_at[i + 1] - (next - start));
}

const char *resp_header_get(const struct response *r, const char *name, size_t *len)
{
    size_t start, next, nl = strlen(name);
    if (!header_line(r, name, nl, &start, &next))
        return NULL;
    const char *v = r->head + start + nl + 1;
    while (*v == ' ')
        v++;
    *len = (size_t)(r->head + next - 2 - v); /* without the CRLF */
    return v;
}

void resp_header_remove(struct response *r, const char *name)
{
    size_t start, next, nl = strlen(name);
    while (header_line(r, name, nl, &start, &next)) {
        memmove(r->head + start, r->head + next, r->head_len - next);
        r->head_len -= next - start;
        forget_line(r, start, next);
    }
}

int resp_header_set(struct response *r, const char *name, const char *value)
{
    resp_header_remove(r, name);
    return resp_header(r, name, value);
}

static void release_owned(struct response *r)
{
    if (r->release)
        r->release(r->release_ctx);
    r->release = NULL;
    r->release_ctx = NULL;
}

void resp_body_clear(struct response *r)
{
    release_owned(r);
    r->n_segs = 0;
    r->content_length = 0;
}

void resp_fail(struct response *r)
{
    r->overflow = true;
}

/* Put line[0..n) in place of the status line. Returns 0, or -1 if the head has no room. */
static int replace_status_line(struct response *r, const char *line, size_t n)
{
    const char *eol = memchr(r->head, '\n', r->head_len);
    if (!eol)
        return -1;
    size_t old = (size_t)(eol + 1 - r->head), rest = r->head_len - old;
    if (rest + n > sizeof(r->head) - 96) /* the room resp_finish counts on */
        return -1;
    memmove(r->head + n, r->head + old, rest);
    memcpy(r->head, line, n);
    r->head_len = n + rest;
    for (unsigned i = 0; i < r->n_lines && i < RESP_INDEXED_LINES; i++)
        r->line_at[i] = (uint16_t)(r->line_at[i] + n - old);
    return 0;
}

void resp_set_status(struct response *r, int status)
{
    char line[64];
    int n = snprintf(line, sizeof(line), "HTTP/1.1 %d %s\r\n", status,
                     http_status_text(status));
    if (n <= 0 || (size_t)n >= sizeof(line) || replace_status_line(r, line, (size_t)n) < 0) {
        r->overflow = true;
        return;
    }
    r->status = status;
    r->no_length = status < 200 || status == 204 || status == 304;
}

void resp_set_reason(struct response *r, const char *reason, size_t len)
{
    char line[RESP_HEAD_CAP];
    if (len == 0 || len > sizeof(line) - 32)
        return;
    const char *standard = http_status_text(r->status);
    if (strlen(standard) == len && memcmp(standard, reason, len) == 0)
        return; /* the line says so already */
    int n = snprintf(line, sizeof(line), "HTTP/1.1 %d %.*s\r\n", r->status, (int)len, reason);
    if (n > 0 && (size_t)n < sizeof(line))
        replace_status_line(r, line, (size_t)n);
}

void resp_start(struct response *r, int status)
{
    r->status = status;
    r->no_length = status < 200 || status == 204 || status == 304;
    r->builtin_page = false;
    r->drop = false;
    r->overflow = false;
    r->content_length = 0;
    r->n_segs = 0;
    r->scratch_len = 0;
    r->trailers = NULL;
    r->trailers_len = 0;
    /* file_fd is left alone: whoever opened it still owns it until the response is sent */
    static const char ok_line[] = "HTTP/1.1 200 OK\r\n";
    if (status == 200) { /* nearly every response: no formatting */
        memcpy(r->head, ok_line, sizeof ok_line - 1);
        r->head_len = sizeof ok_line - 1;
    } else {
        char *p = r->head;
        memcpy(p, "HTTP/1.1 ", 9);
        p = http_fmt_u64(p + 9, (uint64_t)(status > 0 && status < 1000 ? status : 500));
        *p++ = ' ';
        const char *text = http_status_text(status);
        size_t tl = strlen(text);
        memcpy(p, text, tl);
        memcpy(p + tl, "\r\n", 2);
        r->head_len = (size_t)(p + tl + 2 - r->head);
    }
    r->n_lines = 0;
    note_line(r, r->head_len);
    head_append(r, http_date_header(NULL), 37);
    if (server_line_len > 0)
        note_line(r, r->head_len);
    head_append(r, server_line, server_line_len);
}

int resp_header(struct response *r, const char *name, const char *value)
{
    return resp_header_n(r, name, strlen(name), value, strlen(value));
}

int resp_header_n(struct response *r, const char *name, size_t nl, const char *value,
                  size_t vl)
{
    if (r->head_len + nl + vl + 4 > sizeof(r->head) - 96) {
        r->overflow = true;
        return -1;
    }
    note_line(r, r->head_len);
    char *p = r->head + r->head_len; /* the room was checked above, once for the line */
    memcpy(p, name, nl);
    memcpy(p + nl, ": ", 2);
    memcpy(p + nl + 2, value, vl);
    memcpy(p + nl + 2 + vl, "\r\n", 2);
    r->head_len += nl + vl + 4;
    return 0;
}

int resp_headerf(struct response *r, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line) - 2, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(line) - 2) {
        r->overflow = true;
        return -1;
    }
    memcpy(line + n, "\r\n", 2);
    size_t at = r->head_len;
    head_append(r, line, (size_t)n + 2);
    if (r->head_len != at)
        note_line(r, at);
    return r->overflow ? -1 : 0;
}

static int add_seg(struct response *r, struct out_seg seg)
{
    if (r->n_segs == RESP_MAX_SEGS) {
        r->overflow = true;
        return -1;
    }
    r->segs[r->n_segs++] = seg;
    r->content_length += seg.len;
    return 0;
}

int resp_body_mem(struct response *r, const char *p, size_t len)
{
    if (len == 0)
        return 0;
    return add_seg(r, (struct out_seg){.mem = p, .fd = -1, .len = len});
}

int resp_body_owned(struct response *r, const char *p, size_t len, void (*release)(void *),
                    void *ctx)
{
    if (r->release) { /* one owner only: the first one's memory stays in use */
        release(ctx);
        r->overflow = true;
        return -1;
    }
    r->release = release;
    r->release_ctx = ctx;
    return resp_body_mem(r, p, len);
}

char *resp_body_alloc(struct response *r, size_t n)
{
    if (n <= sizeof(r->scratch) - r->scratch_len)
        return resp_scratch(r, n);
    char *p = malloc(n);
    if (!p) {
        r->overflow = true;
        return NULL;
    }
    if (r->release) { /* one owner only */
        free(p);
        r->overflow = true;
        return NULL;
    }
    r->release = free;
    r->release_ctx = p;
    return p;
}

void resp_stream(struct response *r, const struct resp_stream *s)
{
    r->status = 200; /* a placeholder: the stream's head decides */
    r->streaming = true;
    r->stream = *s;
}

void resp_proxy(struct response *r, const struct proxy_params *p)
{
    r->status = 200; /* a placeholder: the upstream's head decides */
    r->streaming = true;
    r->proxy = p;
}

void resp_stream_length(struct response *r, uint64_t len)
{
    if (r->no_length)
        return;
    r->content_length = len;
    r->length_known = true;
}

int resp_body_file(struct response *r, int fd, uint64_t off, uint64_t len)
{
    if (len == 0)
        return 0;
    return add_seg(r, (struct out_seg){.mem = NULL, .fd = fd, .off = off, .len = len});
}

char *resp_scratch(struct response *r, size_t n)
{
    if (r->scratch_len + n > sizeof(r->scratch)) {
        r->overflow = true;
        return NULL;
    }
    char *p = r->scratch + r->scratch_len;
    r->scratch_len += n;
    return p;
}

int resp_body_copy(struct response *r, const char *p, size_t len)
{
    char *dst = resp_scratch(r, len);
    if (!dst)
        return -1;
    memcpy(dst, p, len);
    return resp_body_mem(r, dst, len);
}

/* nginx's 495 and 496: a client certificate that did not verify, or none where one is
 * required; answered as a 400 with their own words, and the connection closed. */
static void cert_error(struct response *r, int status)
{
    static const char bad[] = "<html>\r\n<head><title>400 The SSL certificate error</title>"
                              "</head>\r\n<body>\r\n<center><h1>400 Bad Request</h1>"
                              "</center>\r\n<center>The SSL certificate error</center>\r\n"
                              "</body>\r\n</html>\r\n";
    static const char none[] = "<html>\r\n<head><title>400 No required SSL certificate was "
                               "sent</title></head>\r\n<body>\r\n<center><h1>400 Bad "
                               "Request</h1></center>\r\n<center>No required SSL "
                               "certificate was sent</center>\r\n</body>\r\n</html>\r\n";
    resp_start(r, 400);
    r->keep_alive = false;
    resp_header(r, "Content-Type", "text/html");
    if (status == 495)
        resp_body_mem(r, bad, sizeof(bad) - 1);
    else
        resp_body_mem(r, none, sizeof(none) - 1);
}

void resp_error(struct response *r, int status)
{
    if (status == 495 || status == 496) {
        cert_error(r, status);
        return;
    }
    resp_start(r, status);
    if (r->no_length)
        return;
    resp_header(r, "Content-Type", "text/html; charset=utf-8");
    r->builtin_page = true;
    char *body = resp_scratch(r, 512);
    int n = snprintf(body, 512,
                     "<!DOCTYPE html>\n<html><head><title>%d %s</title></head>\n"
                     "<body><h1>%d %s</h1><hr><address>lfhttpd</address></body></html>\n",
                     status, http_status_text(status), status, http_status_text(status));
    r->scratch_len -= 512 - (size_t)n;
    resp_body_mem(r, body, (size_t)n);
}

/* A whole body followed by trailers: one chunk of it, then the last chunk with them. */
static void frame_with_trailers(struct response *r)
{
    r->chunked = true;
    uint64_t body = r->content_length;
    if (body > 0) {
        char *line = resp_scratch(r, 20);
        if (!line || r->n_segs == RESP_MAX_SEGS)
            return (void)(r->overflow = true);
        char *e = http_fmt_hex(line, body);
        memcpy(e, "\r\n", 2);
        memmove(r->segs + 1, r->segs, r->n_segs * sizeof(r->segs[0]));
        r->segs[0] = (struct out_seg){.mem = line, .fd = -1, .len = (uint64_t)(e + 2 - line)};
        r->n_segs++;
        r->content_length += r->segs[0].len;
        resp_body_mem(r, "\r\n", 2);
    }
    resp_body_mem(r, "0\r\n", 3);
    resp_body_mem(r, r->trailers, r->trailers_len);
    resp_body_mem(r, "\r\n", 2);
}

void resp_finish(struct response *r, bool http10)
{
    if (r->trailers && !r->streaming) /* resp_trailers' caller saw a body to follow */
        frame_with_trailers(r);
    if (r->overflow) {
        r->keep_alive = false;
        resp_error(r, 500);
    }
    if (r->chunked) {
        note_line(r, r->head_len);
        memcpy(r->head + r->head_len, "Transfer-Encoding: chunked\r\n", 28);
        r->head_len += 28;
    } else if (!r->no_length) {
        note_line(r, r->head_len);
        char *p = r->head + r->head_len;
        memcpy(p, "Content-Length: ", 16);
        p = http_fmt_u64(p + 16, r->content_length);
        memcpy(p, "\r\n", 2);
        r->head_len = (size_t)(p + 2 - r->head);
    }
    if (!r->keep_alive) {
        note_line(r, r->head_len);
        memcpy(r->head + r->head_len, "Connection: close\r\n", 19);
        r->head_len += 19;
    } else if (http10 || r->say_keep_alive) {
        note_line(r, r->head_len);
        memcpy(r->head + r->head_len, "Connection: keep-alive\r\n", 24);
        r->head_len += 24;
    }
    /* At most 29 bytes (seconds of an unsigned count of ms): with the longest framing and
     * Connection lines it stays within the 96 kept for resp_finish. */
    if (r->keep_alive && r->keep_alive_header_s) {
        note_line(r, r->head_len);
        char *p = r->head + r->head_len;
        memcpy(p, "Keep-Alive: timeout=", 20);
        p = http_fmt_u64(p + 20, r->keep_alive_header_s);
        memcpy(p, "\r\n", 2);
        r->head_len = (size_t)(p + 2 - r->head);
    }
    note_line(r, r->head_len); /* the blank line: it ends the last field line */
    memcpy(r->head + r->head_len, "\r\n", 2);
    r->head_len += 2;
}

int http_status_for_errno(int err)
{
    switch (err) {
    case ENOENT:
    case ENOTDIR:
    case ENAMETOOLONG: /* no file has that name: nginx answers 404 too */
        return 404;
    case EMFILE:
    case ENFILE:
    case ENOMEM:
        return 503;
    default: /* EXDEV (a way out of the root), ELOOP, EACCES, ENXIO... */
        return 403;
    }
}
