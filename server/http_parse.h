/* http_parse.h — HTTP/1.1 request parsing (RFC 9112), pure functions, no I/O.
 *
 * Everything here works on bytes the caller already holds. Parsed values are slices
 * (pointer + length) into the caller's buffer: nothing is copied and nothing is
 * allocated, so a request parsed from a thread's stack buffer lives exactly as long as
 * that buffer. All functions are safe to call on hostile input of any length.
 */
#ifndef LFHTTPD_HTTP_PARSE_H
#define LFHTTPD_HTTP_PARSE_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

/* A view into a buffer the caller owns. Never NUL-terminated. */
struct http_slice {
    const char *p;
    size_t len;
};

enum http_method {
    HTTP_METHOD_UNKNOWN = 0, /* a valid token we do not implement: answered 501 */
    HTTP_METHOD_GET,
    HTTP_METHOD_HEAD,
    HTTP_METHOD_POST,
    HTTP_METHOD_PUT,
    HTTP_METHOD_DELETE,
    HTTP_METHOD_CONNECT,
    HTTP_METHOD_OPTIONS,
    HTTP_METHOD_TRACE,
    HTTP_METHOD_PATCH,
};

/* How a message's body is framed (RFC 9112 section 6.3). */
enum http_framing {
    HTTP_BODY_NONE = 0,   /* no Content-Length, no Transfer-Encoding: no body */
    HTTP_BODY_LENGTH,     /* Content-Length: content_length bytes */
    HTTP_BODY_CHUNKED,    /* Transfer-Encoding: chunked */
    HTTP_BODY_CLOSE,      /* responses only: the body ends when the connection closes */
};

#define HTTP_MAX_HEADERS 64

struct http_header {
    struct http_slice name;  /* as sent; compare case-insensitively */
    struct http_slice value; /* leading and trailing whitespace removed */
};

struct http_request {
    enum http_method method;
    struct http_slice method_name; /* the method token as sent */
    struct http_slice target;      /* request-target as sent (origin, absolute, * form) */
    struct http_slice path;        /* target's path, still percent-encoded; "/" for '*' and
                                    * for an absolute-form target's empty path, a constant
                                    * outside the buffer (see http_origin_form) */
    struct http_slice query;       /* after '?', without it; len 0 when absent */
    bool has_query;                /* a '?' was present, even if the query is empty */
    int version_minor;             /* 0 for HTTP/1.0, 1 for HTTP/1.1 (and 1.x, x > 1) */

    struct http_header headers[HTTP_MAX_HEADERS];
    unsigned n_headers;

    /* Headers the server interprets, found while parsing (len 0 when absent). */
    struct http_slice host; /* from Host, or from an absolute-form target */
    struct http_slice if_none_match, if_modified_since, if_match, if_unmodified_since;
    struct http_slice range, if_range;
    struct http_slice user_agent, referer, accept_encoding, content_type;

    enum http_framing framing;
    uint64_t content_length; /* valid when framing == HTTP_BODY_LENGTH */
    bool keep_alive;         /* persistence after this request, from version + Connection */
    bool expect_continue;    /* Expect: 100-continue */

    size_t header_bytes; /* bytes from the buffer start through the blank line */
};

struct http_limits {
    /* Every byte of the head, CRLFs included: empty lines before the request line, the
     * request line, the field lines and the blank line that ends them. A request line
     * that does not fit: 414 (501 if its method is unknown or has not ended); field
     * lines that do not: 431. */
    size_t max_header_bytes;
    unsigned max_headers;    /* field lines; over it: 431. At most HTTP_MAX_HEADERS */
};

/* Parse one request head from buf[0..len).
 * Returns:
 *   > 0  the request is complete; the value is req->header_bytes.
 *     0  incomplete: read more and call again with the longer buffer.
 *   < 0  the request is invalid; the value is minus the HTTP status to answer with
 *        (-400, -414, -431, -501, -505, -417). The connection must be closed after the
 *        answer, since the request's framing cannot be trusted.
 * Empty lines (CRLF) before the request line are skipped, as RFC 9112 section 2.2 allows.
 * Bare LF and bare CR, obs-fold, whitespace before a colon, control bytes, conflicting or
 * repeated Content-Length, and any Transfer-Encoding other than a lone "chunked" are all
 * rejected, because lenient parsing is how request smuggling starts. */
int http_parse_request(const char *buf, size_t len, const struct http_limits *lim,
                       struct http_request *req);

/* The target in origin-form (RFC 9112 section 3.2.1): path, then "?" and the query when
 * there was one. It is the target from its path on, except where the path is an empty one
 * made "/" (RFC 9110 section 4.2.3: "http://a", "http://a?x=1"): that "/" is not in the
 * buffer, so whoever sends, logs or exposes the origin-form writes these two parts and
 * never measures from path.p to the target's end. */
struct http_origin_form {
    struct http_slice path;  /* req->path */
    struct http_slice query; /* "?" and the query as sent; len 0 without a '?' */
};

static inline struct http_origin_form http_origin_form(const struct http_request *req)
{
    struct http_origin_form o = {req->path, {"", 0}};
    if (req->has_query) /* (the '?' is in the buffer, just before the query) */
        o.query = (struct http_slice){req->query.p - 1, req->query.len + 1};
    return o;
}

/* Find a header by name (case-insensitive). Returns NULL if absent. */
const struct http_header *http_find_header(const struct http_request *req, const char *name);

/* Case-insensitive comparison of a[0..n) with lower[0..n). */
bool http_bytes_eq_nocase(const char *a, const char *lower, size_t n);
/* Case-insensitive comparison of a slice with a NUL-terminated lowercase string. Inline: the
 * lengths, compared first, settle most calls (a literal's is known at compile time). */
static inline bool http_slice_eq(struct http_slice s, const char *lower)
{
    size_t n = __builtin_strlen(lower);
    return s.len == n && http_bytes_eq_nocase(s.p, lower, n);
}

/* --- the grammar's pieces, for the other parsers of HTTP/1.1 messages ----------------
 * The response-head parser (http_upstream.c) reads field lines by the same rules as
 * requests: these are the functions http_parse_request itself uses. */

/* The line starting at *pos in buf[0..end): returns 1, sets *line (without its CRLF) and
 * moves *pos past the LF; 0 if the line has not ended; -1 on a bare LF, or on a CR with
 * a byte other than LF after it in a line that has not ended yet. A CR inside an ended
 * line is left in *line, where no grammar of these parsers accepts it. */
int http_next_line(const char *buf, size_t end, size_t *pos, struct http_slice *line);

/* field-name ":" OWS field-value OWS, strictly: a token name ending at the colon (no
 * whitespace before it, none at the line's start: obs-fold), a value of VCHAR, SP, HTAB
 * and obs-text only. Returns 0 and fills *h (value trimmed), or -1. */
int http_field_line(struct http_slice line, struct http_header *h);

/* Are p[0..n) all field-value bytes (VCHAR, SP, HTAB, obs-text)? Also reason-phrase's. */
bool http_field_value_valid(const char *p, size_t n);

/* Takes the next element of a comma-separated list (RFC 9110 section 5.6.1) off the
 * front of *rest, without its OWS; elements may be empty. False once the list is used. */
bool http_list_next(struct http_slice *rest, struct http_slice *elem);

/* 1*tchar? */
bool http_is_token(struct http_slice s);

/* 1*DIGIT that fits in 64 bits: no sign, no spaces. */
bool http_parse_u64(struct http_slice s, uint64_t *v);

/* nginx's browser tests on a User-Agent, for keepalive_disable and gzip_disable: "msie6" is
 * MSIE 4, 5 and 6 (6 unless "SV1" follows), not Opera posing as one; "safari" is Safari on
 * Mac OS X (or iOS), not Chrome. */
bool http_user_agent_msie6(struct http_slice ua);
bool http_user_agent_safari(struct http_slice ua);

/* --- chunked transfer coding (RFC 9112 section 7.1), incremental --------------------- */

struct http_chunked {
    int state;              /* internal: where in the chunk grammar we are */
    uint64_t remaining;     /* bytes left in the current chunk's data */
    uint64_t total;         /* decoded body bytes so far */
    uint32_t line_bytes;    /* bytes of the current size/extension/trailer line */
    uint32_t trailer_bytes; /* bytes of trailer section so far */
};

enum http_chunked_result {
    HTTP_CHUNKED_MORE = 0,   /* all input used; the body continues */
    HTTP_CHUNKED_DONE = 1,   /* the last chunk and trailers ended; *in_used says where */
    HTTP_CHUNKED_ERROR = -1, /* malformed: 400, and close */
    HTTP_CHUNKED_TOO_LARGE = -2, /* decoded body exceeds max_body: 413, and close */
};

void http_chunked_init(struct http_chunked *c);

/* Decode in place: reads buf[0..len), moves the decoded data bytes to the start of buf,
 * sets *in_used to the bytes consumed and *out_len to the data bytes produced.
 * max_body bounds the decoded total (0 = no bound). Trailer fields are checked and
 * dropped. Each call may be given any split of the stream. */
enum http_chunked_result http_chunked_decode(struct http_chunked *c, char *buf, size_t len,
                                             uint64_t max_body, size_t *in_used,
                                             size_t *out_len);

/* --- Range (RFC 9110 section 14.2) --------------------------------------------------- */

struct http_range {
    uint64_t first; /* first byte, inclusive */
    uint64_t last;  /* last byte, inclusive */
};

enum http_range_result {
    HTTP_RANGE_IGNORE = 0,         /* absent, not "bytes", malformed or too many: send 200 */
    HTTP_RANGE_OK = 1,             /* *n satisfiable ranges in ranges[]: send 206 */
    HTTP_RANGE_UNSATISFIABLE = 2,  /* well formed but none satisfiable: send 416 */
};

/* Parse a Range value against a representation of `size` bytes. At most max_ranges
 * ranges are kept; a header with more is ignored (served whole), as is one whose ranges
 * overlap, since those serve only to amplify a response. */
enum http_range_result http_range_parse(struct http_slice value, uint64_t size,
                                        struct http_range *ranges, unsigned max_ranges,
                                        unsigned *n);

/* --- dates (RFC 9110 section 5.6.7) -------------------------------------------------- */

/* Parse an HTTP-date in IMF-fixdate, RFC 850 or asctime form. Returns 0 and sets *t, or
 * -1 if the value is not a valid date. */
int http_date_parse(struct http_slice value, int64_t *t);

/* Format t as IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT", 29 bytes) into out[30]. */
void http_date_format(int64_t t, char out[30]);

/* --- paths --------------------------------------------------------------------------- */

/* Percent-decode the path `in` into out (capacity cap), then remove dot segments
 * (RFC 3986 section 5.2.4) and collapse repeated slashes. The result starts with '/'.
 * Returns the decoded length, or -400 for a malformed escape, an encoded or literal NUL,
 * or a path that climbs above "/"; -414 if it does not fit in cap. */
long http_path_normalize(struct http_slice in, char *out, size_t cap);

/* Percent-encode a decoded path for a header or a link: every byte but the unreserved
 * ones (RFC 3986 section 2.3), '/' and the sub-delims and ':' '@' that are safe in a path
 * becomes %XX (so CR, LF, '\\', '?', '#' and '%' never pass through). Writes a NUL.
 * Returns the length, or -1 if it does not fit in cap. */
long http_path_encode(const char *in, size_t len, char *out, size_t cap);

/* Does an If-Match / If-None-Match list hold etag (a quoted tag, maybe W/)? weak: weak
 * comparison (RFC 9110 section 8.8.3.2: W/ ignored on both sides); strong: a weak tag on
 * either side never matches. "*" matches anything; a malformed list matches nothing. */
bool http_etag_list_matches(struct http_slice list, const char *etag, bool weak);

#endif
