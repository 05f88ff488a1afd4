/* http_upstream.c — an upstream's response head (RFC 9112 sections 4 to 6), strictly.
 *
 * Like http_parse_request, this is not incremental: the caller re-runs it on the whole
 * buffer as bytes arrive (the head is bounded, so that is cheap and leaves no state).
 * Its answer on a prefix is never a different one: every check looks at bytes in order,
 * so a refusal found in a prefix is the one the whole buffer gets, and a head is only
 * complete at its blank line. The fixed-width start of the status line is checked on
 * every call, so an upstream that answers garbage is refused at its first wrong byte
 * rather than once max_header_bytes have arrived.
 *
 * The field-line grammar, lists, tokens and numbers are http_parse.c's, shared with the
 * request parser, so a response field is refused exactly when a request field would be.
 *
 * Decisions where RFC 9112 leaves room:
 *  - Content-Length: one field, one number. "5, 5" and a repeated field are refused even
 *    when the values agree (RFC 9110 section 8.6 would allow joining identical ones), as
 *    nginx refuses them: a list means some hop joined fields it should not have, and a
 *    502 from a broken upstream is safer than guessing which hop counted right.
 *  - Transfer-Encoding with Content-Length: the transfer coding wins (section 6.3 item 3)
 *    and the connection is not reused; nginx refuses such a response outright.
 *  - Transfer-Encoding in an HTTP/1.0 response, or chunked applied twice: refused
 *    (section 6.1: faulty framing). A final coding other than chunked: the body runs to
 *    the close (section 6.3 item 4), which is not an error.
 *  - "HTTP/1.1 200" with no space and no reason is accepted: the line has ended, nothing
 *    about the framing depends on it.
 *  - A line may end with a bare LF (section 2.2 lets a recipient take it for CRLF), as
 *    nginx takes an upstream's: older backends answer so. A CR anywhere but before the
 *    LF is still refused (a bare CR), and chunked bodies keep their CRLFs.
 */
#include "http_upstream.h"

#include <limits.h>
#include <stddef.h>
#include <string.h>

static bool is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static struct http_slice slice(const char *p, size_t len)
{
    return (struct http_slice){p, len};
}

/* --- status line ---------------------------------------------------------------------- */

/* The fixed-width start of every status line: HTTP-version SP status-code; 'd' is a
 * digit. After it comes SP and the reason, or the end of the line. */
static const char status_shape[] = "HTTP/d.d ddd";
#define STATUS_SHAPE_LEN (sizeof status_shape - 1)

/* Checks the first bytes of buf[0..n), however many have arrived, position by position,
 * so that the first wrong byte decides the answer whatever follows it. */
static int status_line_start(const char *p, size_t n)
{
    size_t m = n < STATUS_SHAPE_LEN ? n : STATUS_SHAPE_LEN;
    for (size_t i = 0; i < m; i++) {
        unsigned char c = (unsigned char)p[i];
        if (status_shape[i] != 'd') {
            if (c != (unsigned char)status_shape[i]) return HTTP_UPSTREAM_BAD_STATUS_LINE;
            continue;
        }
        if (!is_digit(c)) return HTTP_UPSTREAM_BAD_STATUS_LINE;
        if (i == 5 && c != '1') return HTTP_UPSTREAM_BAD_VERSION;
        if (i == 9 && (c < '1' || c > '5')) return HTTP_UPSTREAM_BAD_STATUS;
    }
    if (n > STATUS_SHAPE_LEN && p[STATUS_SHAPE_LEN] != ' ' && p[STATUS_SHAPE_LEN] != '\r' &&
        p[STATUS_SHAPE_LEN] != '\n')
        return HTTP_UPSTREAM_BAD_STATUS_LINE; /* a fourth digit, or anything else */
    return 0;
}

/* HTTP-version SP status-code SP [ reason-phrase ], the line without its CRLF. */
static int parse_status_line(struct http_slice line, struct http_response_head *out)
{
    int rc = status_line_start(line.p, line.len);
    if (rc < 0) return rc;
    if (line.len < STATUS_SHAPE_LEN) return HTTP_UPSTREAM_BAD_STATUS_LINE;
    out->version_minor = line.p[7] == '0' ? 0 : 1;
    out->status = (line.p[9] - '0') * 100 + (line.p[10] - '0') * 10 + (line.p[11] - '0');
    if (line.len == STATUS_SHAPE_LEN) return 0;
    /* reason-phrase is field-value bytes: HTAB, SP, VCHAR, obs-text */
    out->reason = slice(line.p + STATUS_SHAPE_LEN + 1, line.len - STATUS_SHAPE_LEN - 1);
    if (!http_field_value_valid(out->reason.p, out->reason.len))
        return HTTP_UPSTREAM_BAD_STATUS_LINE;
    return 0;
}

/* --- header fields -------------------------------------------------------------------- */

/* What the field lines said that is judged once all of them are read. */
struct resp_state {
    struct http_response_head *out;
    unsigned max_headers;
    bool te_seen;
    unsigned te_codings;  /* non-empty Transfer-Encoding elements, over all TE fields */
    unsigned te_chunked;  /* how many of them are "chunked" */
    bool te_last_chunked; /* the last one is */
    bool conn_close, conn_keep_alive;
};

static int on_content_length(struct resp_state *st, struct http_slice value)
{
    struct http_response_head *out = st->out;
    if (out->has_content_length || !http_parse_u64(value, &out->content_length))
        return HTTP_UPSTREAM_BAD_CONTENT_LENGTH;
    out->has_content_length = true;
    return 0;
}

static int on_transfer_encoding(struct resp_state *st, struct http_slice value)
{
    st->te_seen = true;
    struct http_slice elem;
    while (http_list_next(&value, &elem)) {
        if (elem.len == 0) continue;
        /* a coding with parameters: none that a server sends has any */
        if (!http_is_token(elem)) return HTTP_UPSTREAM_BAD_TRANSFER_ENCODING;
        st->te_codings++;
        st->te_last_chunked = http_slice_eq(elem, "chunked");
        st->te_chunked += st->te_last_chunked;
    }
    return 0;
}

static int on_connection(struct resp_state *st, struct http_slice value)
{
    struct http_response_head *out = st->out;
    struct http_slice elem;
    while (http_list_next(&value, &elem)) {
        if (elem.len == 0) continue;
        if (!http_is_token(elem)) return HTTP_UPSTREAM_BAD_CONNECTION;
        if (http_slice_eq(elem, "close"))
            st->conn_close = true;
        else if (http_slice_eq(elem, "keep-alive"))
            st->conn_keep_alive = true;
        else if (http_slice_eq(elem, "upgrade"))
            out->connection_upgrade = true;
        else
            out->connection_names_fields = true;
    }
    return 0;
}

/* The fields that decide framing, persistence and upgrades; the others are only kept. */
static int apply_field(struct resp_state *st, const struct http_header *h)
{
    switch (h->name.len) {
    case 7:
        if (http_slice_eq(h->name, "upgrade") && st->out->upgrade.p == NULL)
            st->out->upgrade = h->value;
        return 0;
    case 10:
        return http_slice_eq(h->name, "connection") ? on_connection(st, h->value) : 0;
    case 14:
        return http_slice_eq(h->name, "content-length") ? on_content_length(st, h->value) : 0;
    case 17:
        return http_slice_eq(h->name, "transfer-encoding") ? on_transfer_encoding(st, h->value)
                                                            : 0;
    }
    return 0;
}

static int parse_field(struct resp_state *st, struct http_slice line)
{
    struct http_header h;
    if (http_field_line(line, &h) < 0) return HTTP_UPSTREAM_BAD_FIELD;
    struct http_response_head *out = st->out;
    if (out->n_headers >= st->max_headers) return HTTP_UPSTREAM_TOO_LARGE;
    out->headers[out->n_headers++] = h;
    return apply_field(st, &h);
}

/* --- framing and persistence ---------------------------------------------------------- */

/* RFC 9112 section 6.3, items 1 to 4 and 7 (5 and 6 are about requests). */
static enum http_framing body_framing(const struct resp_state *st, enum http_method method)
{
    const struct http_response_head *out = st->out;
    int s = out->status;
    if (method == HTTP_METHOD_HEAD || s < 200 || s == 204 || s == 304) return HTTP_BODY_NONE;
    if (method == HTTP_METHOD_CONNECT && s < 300) return HTTP_BODY_NONE; /* a tunnel */
    if (st->te_seen) return st->te_last_chunked ? HTTP_BODY_CHUNKED : HTTP_BODY_CLOSE;
    return out->has_content_length ? HTTP_BODY_LENGTH : HTTP_BODY_CLOSE;
}

static int finish_head(const struct resp_state *st, enum http_method method)
{
    struct http_response_head *out = st->out;
    if (st->te_seen) {
        /* an empty list, chunked twice (section 7.1 forbids it) or a coding HTTP/1.0
         * cannot have (section 6.1: the framing is faulty) */
        if (st->te_codings == 0 || st->te_chunked > 1 || out->version_minor == 0)
            return HTTP_UPSTREAM_BAD_TRANSFER_ENCODING;
        out->other_codings = st->te_codings > st->te_chunked;
        out->te_and_length = out->has_content_length;
    }
    out->framing = body_framing(st, method);
    if (out->version_minor == 1)
        out->keep_alive = !st->conn_close;
    else
        out->keep_alive = st->conn_keep_alive && !st->conn_close;
    if (out->framing == HTTP_BODY_CLOSE || out->te_and_length || out->status == 101)
        out->keep_alive = false;
    return (int)out->header_bytes;
}

/* --- the head ------------------------------------------------------------------------- */

/* The line starting at *pos in buf[0..end): 1, *line without its CRLF or bare LF, *pos past
 * the LF; 0 if it has not ended; -1 on a CR followed by a byte other than LF in a line
 * that has not ended. A CR elsewhere in an ended line is left in *line. */
static int head_line(const char *buf, size_t end, size_t *pos, struct http_slice *line)
{
    const char *p = buf + *pos;
    size_t n = end - *pos;
    const char *lf = memchr(p, '\n', n);
    if (!lf) {
        const char *cr = memchr(p, '\r', n);
        return cr && cr + 1 < p + n ? -1 : 0;
    }
    size_t len = (size_t)(lf - p);
    if (len > 0 && p[len - 1] == '\r')
        len--;
    *line = slice(p, len);
    *pos = (size_t)(lf + 1 - buf);
    return 1;
}

int http_parse_response(const char *buf, size_t len, const struct http_limits *lim,
                        enum http_method request_method, struct http_response_head *out)
{
    /* Everything but the header array, which is filled as far as n_headers says. */
    memset(out, 0, offsetof(struct http_response_head, headers));
    memset(&out->n_headers, 0, sizeof *out - offsetof(struct http_response_head, n_headers));
    struct resp_state st = {.out = out, .max_headers = lim->max_headers};
    if (st.max_headers > HTTP_MAX_HEADERS) st.max_headers = HTTP_MAX_HEADERS;
    /* the head must end within the limit, and its size must fit the int we return */
    size_t limit = lim->max_header_bytes < INT_MAX ? lim->max_header_bytes : INT_MAX;
    size_t end = len < limit ? len : limit;

    int rc = status_line_start(buf, end);
    if (rc < 0) return rc;
    bool status_done = false;
    size_t pos = 0;
    struct http_slice line;
    while ((rc = head_line(buf, end, &pos, &line)) > 0) {
        /* a CR inside an ended line is a bare CR, as it is in a line still arriving */
        if (memchr(line.p, '\r', line.len) != NULL) return HTTP_UPSTREAM_BAD_LINE_END;
        if (!status_done) {
            rc = parse_status_line(line, out);
            status_done = true;
        } else if (line.len == 0) {
            out->header_bytes = pos;
            return finish_head(&st, request_method);
        } else {
            rc = parse_field(&st, line);
        }
        if (rc < 0) return rc;
    }
    if (rc < 0) return HTTP_UPSTREAM_BAD_LINE_END;
    return len > limit ? HTTP_UPSTREAM_TOO_LARGE : 0;
}
