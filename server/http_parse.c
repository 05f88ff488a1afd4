/* http_parse.c — HTTP/1.1 request parsing (RFC 9112, RFC 9110): pure functions, no I/O.
 *
 * The parser is strict on purpose. Everything that has been used to make a proxy and a
 * server disagree about where a request ends (bare CR or LF, obs-fold, whitespace before
 * a colon, repeated or list-valued Content-Length, Transfer-Encoding with Content-Length,
 * any coding but a lone "chunked") is rejected, never repaired.
 *
 * http_parse_request is not incremental: the caller re-runs it on the whole buffer as
 * more bytes arrive. The head is bounded by max_header_bytes, so re-parsing is cheap, and
 * it leaves no state to go stale between calls. Bodies are unbounded, so the chunked
 * decoder is the opposite: a byte-driven state machine whose result does not depend on
 * how the stream is split between calls.
 */
#include "http_parse.h"

#include <limits.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

/* --- bytes and slices ----------------------------------------------------------------- */

/* No <ctype.h>: its answers depend on the locale, the protocol's do not. */
static bool is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static bool is_alpha(unsigned char c)
{
    c |= 0x20;
    return c >= 'a' && c <= 'z';
}

static int hex_value(unsigned char c)
{
    if (is_digit(c)) return c - '0';
    c |= 0x20;
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static unsigned char to_lower(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c;
}

static bool is_ows(unsigned char c)
{
    return c == ' ' || c == '\t';
}

/* Byte classes of the grammars below, one bit each, so that classifying a byte is one
 * load. The table is built at compile time by CLASS_OF from the grammars' own wording,
 * not written out by hand, so it cannot drift from them. */
enum {
    CL_TCHAR = 1 << 0,  /* tchar (RFC 9110 section 5.6.2): methods, field names, codings */
    CL_FIELD = 1 << 1,  /* field-value byte (section 5.5): VCHAR, SP, HTAB, obs-text */
    CL_TARGET = 1 << 2, /* request-target byte (RFC 9112 section 3.2): VCHAR only */
    CL_REG = 1 << 3,    /* unreserved / sub-delims (RFC 3986 section 2): reg-name bytes */
    CL_PATH = 1 << 4,   /* a path byte taken as it is: not NUL, '%' or '/' */
};

#define DIGIT_(c) ((c) >= '0' && (c) <= '9')
#define ALPHA_(c) (((c) >= 'a' && (c) <= 'z') || ((c) >= 'A' && (c) <= 'Z'))
#define TCHAR_(c)                                                                          \
    (DIGIT_(c) || ALPHA_(c) || (c) == '!' || (c) == '#' || (c) == '$' || (c) == '%' ||     \
     (c) == '&' || (c) == '\'' || (c) == '*' || (c) == '+' || (c) == '-' || (c) == '.' ||   \
     (c) == '^' || (c) == '_' || (c) == '`' || (c) == '|' || (c) == '~')
#define VCHAR_(c) ((c) >= 0x21 && (c) <= 0x7e)
#define FIELD_(c) (VCHAR_(c) || (c) == ' ' || (c) == '\t' || (c) >= 0x80)
#define SUB_DELIM_(c)                                                                      \
    ((c) == '!' || (c) == '$' || (c) == '&' || (c) == '\'' || (c) == '(' || (c) == ')' ||   \
     (c) == '*' || (c) == '+' || (c) == ',' || (c) == ';' || (c) == '=')
#define REG_(c)                                                                            \
    (DIGIT_(c) || ALPHA_(c) || (c) == '-' || (c) == '.' || (c) == '_' || (c) == '~' ||     \
     SUB_DELIM_(c))
#define CLASS_OF(c)                                                                        \
    ((TCHAR_(c) ? CL_TCHAR : 0) | (FIELD_(c) ? CL_FIELD : 0) |                             \
     (VCHAR_(c) ? CL_TARGET : 0) | (REG_(c) ? CL_REG : 0) |                               \
     ((c) != 0 && (c) != '%' && (c) != '/' ? CL_PATH : 0))
#define CLASS4_(c) CLASS_OF(c), CLASS_OF((c) + 1), CLASS_OF((c) + 2), CLASS_OF((c) + 3)
#define CLASS16_(c) CLASS4_(c), CLASS4_((c) + 4), CLASS4_((c) + 8), CLASS4_((c) + 12)
#define CLASS64_(c) CLASS16_(c), CLASS16_((c) + 16), CLASS16_((c) + 32), CLASS16_((c) + 48)

static const unsigned char byte_class[256] = {CLASS64_(0), CLASS64_(64), CLASS64_(128),
                                              CLASS64_(192)};

static bool in_class(unsigned char c, unsigned cls)
{
    return (byte_class[c] & cls) != 0;
}

static bool is_tchar(unsigned char c)
{
    return in_class(c, CL_TCHAR);
}

static bool is_field_char(unsigned char c)
{
    return in_class(c, CL_FIELD);
}

static struct http_slice slice(const char *p, size_t len)
{
    return (struct http_slice){p, len};
}

static bool bytes_eq_nocase(const char *a, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (to_lower((unsigned char)a[i]) != to_lower((unsigned char)b[i])) return false;
    return true;
}

bool http_bytes_eq_nocase(const char *a, const char *lower, size_t n)
{
    return bytes_eq_nocase(a, lower, n);
}

/* http_slice_eq for a string literal, whose length the compiler knows. */
#define SLICE_IS(s, lit)                                                                   \
    ((s).len == sizeof(lit) - 1 && bytes_eq_nocase((s).p, lit, sizeof(lit) - 1))

static bool starts_with_nocase(struct http_slice s, const char *lower)
{
    size_t n = strlen(lower);
    return s.len >= n && bytes_eq_nocase(s.p, lower, n);
}

static uint64_t load64(const char *p)
{
    uint64_t w;
    memcpy(&w, p, sizeof w);
    return w;
}

/* Case-insensitive equality of a token (tchar bytes only: a field name, a connection
 * option) with a lowercase name made of letters and '-', eight bytes at a time. OR-ing
 * 0x20 lowercases a letter and keeps '-'; besides the upper-case letters, the only byte
 * it turns into a lowercase letter or '-' is CR (into '-'), which is no tchar. So for
 * tchar input the comparison is exact. */
static bool token_eq(const char *name, const char *lower, size_t n)
{
    const uint64_t fold = 0x2020202020202020u;
    if (n < 8) {
        for (size_t i = 0; i < n; i++)
            if (((unsigned char)name[i] | 0x20) != (unsigned char)lower[i]) return false;
        return true;
    }
    for (size_t i = 0; i + 8 < n; i += 8)
        if ((load64(name + i) | fold) != load64(lower + i)) return false;
    return (load64(name + n - 8) | fold) == load64(lower + n - 8); /* may overlap */
}

static struct http_slice trim_ows(struct http_slice s)
{
    while (s.len > 0 && is_ows(s.p[0])) {
        s.p++;
        s.len--;
    }
    while (s.len > 0 && is_ows(s.p[s.len - 1]))
        s.len--;
    return s;
}

static bool is_token(struct http_slice s)
{
    if (s.len == 0) return false;
    for (size_t i = 0; i < s.len; i++)
        if (!is_tchar(s.p[i])) return false;
    return true;
}

/* Takes the next element of a comma-separated list (RFC 9110 section 5.6.1) off the
 * front of *rest, without its surrounding OWS. Elements may be empty, and the list
 * syntax says to skip those. Returns false once the list is used up. */
static bool list_next(struct http_slice *rest, struct http_slice *elem)
{
    if (rest->p == NULL) return false;
    const char *comma = memchr(rest->p, ',', rest->len);
    if (comma == NULL) {
        *elem = trim_ows(*rest);
        *rest = slice(NULL, 0);
        return true;
    }
    size_t n = (size_t)(comma - rest->p);
    *elem = trim_ows(slice(rest->p, n));
    *rest = slice(comma + 1, rest->len - n - 1);
    return true;
}

/* 1*DIGIT that fits in 64 bits: no sign, no spaces, no hex. */
static bool parse_u64(struct http_slice s, uint64_t *v)
{
    if (s.len == 0) return false;
    uint64_t n = 0;
    for (size_t i = 0; i < s.len; i++) {
        unsigned char c = s.p[i];
        /* n * 10 + d overflows exactly when n is past UINT64_MAX / 10, or at it with d
         * past the last digit of UINT64_MAX; both bounds are constants */
        if (!is_digit(c) || n > UINT64_MAX / 10 ||
            (n == UINT64_MAX / 10 && (uint64_t)(c - '0') > UINT64_MAX % 10))
            return false;
        n = n * 10 + (c - '0');
    }
    *v = n;
    return true;
}

/* --- host and authority (RFC 3986 section 3.2, RFC 9110 section 7.2) ----------------- */

static bool is_unreserved_or_sub_delim(unsigned char c)
{
    return in_class(c, CL_REG);
}

/* Two dots in a row, or a name that is one dot (empty once its trailing dot is gone): RFC
 * 3986 lets them through, nginx answers them 400, and so does lfhttpd. */
static bool empty_label(struct http_slice s)
{
    return (s.len == 1 && s.p[0] == '.') || memmem(s.p, s.len, "..", 2) != NULL;
}

/* reg-name, which also covers IPv4address. Empty is not allowed: http URIs need a host. */
static bool valid_reg_name(struct http_slice s)
{
    if (s.len == 0 || empty_label(s)) return false;
    for (size_t i = 0; i < s.len; i++) {
        if (is_unreserved_or_sub_delim(s.p[i])) continue;
        if (s.p[i] != '%') return false;
        if (i + 2 >= s.len || hex_value(s.p[i + 1]) < 0 || hex_value(s.p[i + 2]) < 0) return false;
        i += 2;
    }
    return true;
}

/* IPvFuture: "v" 1*HEXDIG "." 1*( unreserved / sub-delims / ":" ) */
static bool valid_ipvfuture(struct http_slice s)
{
    size_t i = 1;
    while (i < s.len && hex_value(s.p[i]) >= 0)
        i++;
    if (i == 1 || i >= s.len || s.p[i] != '.' || i + 1 == s.len) return false;
    for (i++; i < s.len; i++)
        if (s.p[i] != ':' && !is_unreserved_or_sub_delim(s.p[i])) return false;
    return true;
}

/* What sits between "[" and "]". IPv6 is checked for its alphabet only: a malformed
 * address is harmless here, since the server never connects to it. */
static bool valid_ip_literal(struct http_slice s)
{
    if (s.len > 0 && (s.p[0] == 'v' || s.p[0] == 'V')) return valid_ipvfuture(s);
    if (s.len < 2 || s.len > 45 || empty_label(s)) return false;
    bool colon = false;
    for (size_t i = 0; i < s.len; i++) {
        if (s.p[i] == ':')
            colon = true;
        else if (s.p[i] != '.' && hex_value(s.p[i]) < 0)
            return false;
    }
    return colon;
}

/* port = *DIGIT: "host:" is the host alone (RFC 3986, and nginx's Host). */
static bool valid_port(struct http_slice s)
{
    if (s.len > 5) return false;
    unsigned port = 0; /* five digits cannot overflow it */
    for (size_t i = 0; i < s.len; i++) {
        if (!is_digit(s.p[i])) return false;
        port = port * 10 + (unsigned)(s.p[i] - '0');
    }
    return port <= 65535;
}

/* uri-host [ ":" port ]; the port is required for CONNECT's authority-form. */
static bool valid_authority(struct http_slice s, bool need_port)
{
    if (s.len == 0) return false;
    size_t host_len;
    if (s.p[0] == '[') {
        const char *close = memchr(s.p, ']', s.len);
        if (close == NULL || !valid_ip_literal(slice(s.p + 1, (size_t)(close - s.p) - 1)))
            return false;
        host_len = (size_t)(close - s.p) + 1;
    } else {
        const char *colon = memchr(s.p, ':', s.len);
        host_len = colon ? (size_t)(colon - s.p) : s.len;
        if (!valid_reg_name(slice(s.p, host_len))) return false;
    }
    if (host_len == s.len) return !need_port;
    if (s.p[host_len] != ':') return false;
    if (need_port && host_len + 1 == s.len) return false; /* CONNECT names a port */
    return valid_port(slice(s.p + host_len + 1, s.len - host_len - 1));
}

/* --- request line --------------------------------------------------------------------- */

static const struct {
    const char *name;
    enum http_method method;
} method_names[] = {
    {"GET", HTTP_METHOD_GET},         {"HEAD", HTTP_METHOD_HEAD},
    {"POST", HTTP_METHOD_POST},       {"PUT", HTTP_METHOD_PUT},
    {"DELETE", HTTP_METHOD_DELETE},   {"CONNECT", HTTP_METHOD_CONNECT},
    {"OPTIONS", HTTP_METHOD_OPTIONS}, {"TRACE", HTTP_METHOD_TRACE},
    {"PATCH", HTTP_METHOD_PATCH},
};

/* Methods are case-sensitive (RFC 9110 section 9.1): "get" is an unknown method. GET is
 * looked for first: it is nearly every request. */
static enum http_method method_from_name(struct http_slice s)
{
    if (s.len == 3 && memcmp(s.p, "GET", 3) == 0) return HTTP_METHOD_GET;
    for (size_t i = 0; i < sizeof method_names / sizeof method_names[0]; i++) {
        const char *name = method_names[i].name;
        if (s.len == strlen(name) && memcmp(s.p, name, s.len) == 0) return method_names[i].method;
    }
    return HTTP_METHOD_UNKNOWN;
}

/* HTTP-version = "HTTP/" DIGIT "." DIGIT, nothing more (RFC 9112 section 2.3). */
static int parse_version(struct http_slice v, int *minor)
{
    if (v.len != 8 || memcmp(v.p, "HTTP/", 5) != 0 || !is_digit(v.p[5]) || v.p[6] != '.' ||
        !is_digit(v.p[7]))
        return -400;
    if (v.p[5] != '1') return -505;
    *minor = v.p[7] == '0' ? 0 : 1;
    return 0;
}

static void split_path_query(struct http_request *req, struct http_slice s)
{
    const char *q = memchr(s.p, '?', s.len);
    if (q == NULL) {
        req->path = s;
        return;
    }
    req->path = slice(s.p, (size_t)(q - s.p));
    req->query = slice(q + 1, s.len - req->path.len - 1);
    req->has_query = true;
}

/* absolute-form: the authority becomes the host, and wins over any Host field
 * (RFC 9112 section 3.2.2). */
static int parse_absolute_form(struct http_request *req)
{
    struct http_slice t = req->target;
    size_t skip;
    if (starts_with_nocase(t, "http://"))
        skip = 7;
    else if (starts_with_nocase(t, "https://"))
        skip = 8;
    else
        return -400;
    struct http_slice rest = slice(t.p + skip, t.len - skip);
    size_t n = 0;
    while (n < rest.len && rest.p[n] != '/' && rest.p[n] != '?')
        n++;
    struct http_slice authority = slice(rest.p, n);
    /* userinfo has no business in a request and is a known phishing vector
     * (RFC 9110 section 4.2.4) */
    if (memchr(authority.p, '@', n) != NULL || !valid_authority(authority, false)) return -400;
    req->host = authority;
    split_path_query(req, slice(rest.p + n, rest.len - n));
    if (req->path.len == 0) req->path = slice("/", 1);
    return 0;
}

/* Which target forms are allowed depends on the method (RFC 9112 section 3.2). */
static int parse_target(struct http_request *req)
{
    struct http_slice t = req->target;
    if (memchr(t.p, '#', t.len) != NULL) return -400;
    if (req->method == HTTP_METHOD_CONNECT) {
        /* authority-form, and only that; the path stays empty so nothing serves it */
        if (!valid_authority(t, true)) return -400;
        req->host = t;
        return 0;
    }
    if (t.p[0] == '/') {
        split_path_query(req, t);
        return 0;
    }
    if (t.len == 1 && t.p[0] == '*') {
        if (req->method != HTTP_METHOD_OPTIONS) return -400;
        req->path = slice("/", 1);
        return 0;
    }
    return parse_absolute_form(req);
}

/* method SP request-target SP HTTP-version, with exactly one SP between the parts. */
static int parse_request_line(struct http_request *req, struct http_slice line)
{
    size_t i = 0;
    while (i < line.len && is_tchar(line.p[i]))
        i++;
    if (i == 0 || i == line.len || line.p[i] != ' ') return -400;
    req->method_name = slice(line.p, i);

    size_t start = ++i;
    while (i < line.len && in_class(line.p[i], CL_TARGET))
        i++;
    if (i == start || i == line.len || line.p[i] != ' ') return -400;
    req->target = slice(line.p + start, i - start);

    i++;
    int rc = parse_version(slice(line.p + i, line.len - i), &req->version_minor);
    if (rc < 0) return rc;
    req->method = method_from_name(req->method_name);
    return parse_target(req);
}

/* --- header fields -------------------------------------------------------------------- */

/* What the field lines said that only makes sense once all of them are read. */
struct head_state {
    struct http_request *req;
    unsigned max_headers;
    bool host_field_seen; /* a Host field; req->host may also come from the target */
    bool content_length_seen;
    bool te_seen;
    unsigned te_codings;  /* non-empty Transfer-Encoding elements, over all TE fields */
    unsigned te_chunked;  /* how many of them are "chunked" */
    bool te_last_chunked; /* the last one is "chunked" */
    bool conn_close, conn_keep_alive;
    bool expect_seen, expect_continue, expect_other;
    bool authorization_seen, content_range_seen;
};

static int on_host(struct head_state *st, struct http_slice *slot, struct http_slice value)
{
    /* two Hosts could send a proxy and us to different sites (RFC 9110 section 7.2) */
    if (st->host_field_seen || !valid_authority(value, false)) return -400;
    st->host_field_seen = true;
    if (slot->p == NULL) /* else the absolute-form target set it, and wins */
        *slot = value;
    return 0;
}

static int on_content_length(struct head_state *st, struct http_slice *slot,
                             struct http_slice value)
{
    (void)slot;
    /* a repeat is refused even with the same value: a proxy might have seen a list */
    if (st->content_length_seen || !parse_u64(value, &st->req->content_length)) return -400;
    st->content_length_seen = true;
    st->req->framing = HTTP_BODY_LENGTH;
    return 0;
}

/* Transfer-Encoding fields form one list; it is judged in check_framing. */
static int on_transfer_encoding(struct head_state *st, struct http_slice *slot,
                                struct http_slice value)
{
    (void)slot;
    if (st->te_seen) /* two fields: refused, as nginx refuses them (a smuggler's tool) */
        return -400;
    st->te_seen = true;
    struct http_slice elem;
    while (list_next(&value, &elem)) {
        if (elem.len == 0) continue;
        if (!is_token(elem)) /* codings with parameters included: none that we know has any */
            return -400;
        st->te_codings++;
        st->te_last_chunked = SLICE_IS(elem, "chunked");
        st->te_chunked += st->te_last_chunked;
    }
    return 0;
}

static int on_connection(struct head_state *st, struct http_slice *slot, struct http_slice value)
{
    (void)slot;
    struct http_slice elem;
    while (list_next(&value, &elem)) {
        if (elem.len == 0) continue;
        if (!is_token(elem)) return -400;
        st->conn_close |= elem.len == 5 && token_eq(elem.p, "close", 5);
        st->conn_keep_alive |= elem.len == 10 && token_eq(elem.p, "keep-alive", 10);
    }
    return 0;
}

static int on_expect(struct head_state *st, struct http_slice *slot, struct http_slice value)
{
    (void)slot;
    if (st->expect_seen) /* two fields: refused, as nginx refuses them */
        return -400;
    st->expect_seen = true;
    struct http_slice elem;
    while (list_next(&value, &elem)) {
        if (elem.len == 0) continue;
        if (SLICE_IS(elem, "100-continue"))
            st->expect_continue = true;
        else
            st->expect_other = true;
    }
    return 0;
}

/* A field whose value decides the answer (a condition, a range, a body's type): two of
 * them is ambiguous, and we cannot join them without allocating, so refuse. */
static int on_single(struct head_state *st, struct http_slice *slot, struct http_slice value)
{
    (void)st;
    if (slot->p != NULL) return -400;
    *slot = value;
    return 0;
}

/* Authorization and Content-Range, read elsewhere (the auth module; a request's
 * Content-Range is never honoured): two of either are refused, as nginx refuses them, so
 * that no two readers of the request can take different ones. */
static int on_authorization(struct head_state *st, struct http_slice *slot,
                            struct http_slice value)
{
    (void)slot;
    (void)value;
    if (st->authorization_seen) return -400;
    st->authorization_seen = true;
    return 0;
}

static int on_content_range(struct head_state *st, struct http_slice *slot,
                            struct http_slice value)
{
    (void)slot;
    (void)value;
    if (st->content_range_seen) return -400;
    st->content_range_seen = true;
    return 0;
}

/* A field that is informational, or a list where the first field is a fair answer. */
static int on_first(struct head_state *st, struct http_slice *slot, struct http_slice value)
{
    (void)st;
    if (slot->p == NULL) *slot = value;
    return 0;
}

#define SLOT(field) offsetof(struct http_request, field)
#define NO_SLOT 0 /* offset 0 is `method`, never a slice */

/* The fields the parser reads, in the order of field_rules. */
enum field_rule_index {
    RULE_HOST,
    RULE_CONTENT_LENGTH,
    RULE_TRANSFER_ENCODING,
    RULE_CONNECTION,
    RULE_EXPECT,
    RULE_IF_NONE_MATCH,
    RULE_IF_MODIFIED_SINCE,
    RULE_IF_MATCH,
    RULE_IF_UNMODIFIED_SINCE,
    RULE_RANGE,
    RULE_IF_RANGE,
    RULE_CONTENT_TYPE,
    RULE_AUTHORIZATION,
    RULE_CONTENT_RANGE,
    RULE_USER_AGENT,
    RULE_REFERER,
    RULE_ACCEPT_ENCODING,
    RULE_NONE,
};

static const struct field_rule {
    const char *name; /* lowercase letters and '-' (token_eq relies on it) */
    size_t len;
    int (*apply)(struct head_state *st, struct http_slice *slot, struct http_slice value);
    size_t slot; /* offset of the struct http_slice it fills, or NO_SLOT */
} field_rules[RULE_NONE] = {
    [RULE_HOST] = {"host", 4, on_host, SLOT(host)},
    [RULE_CONTENT_LENGTH] = {"content-length", 14, on_content_length, NO_SLOT},
    [RULE_TRANSFER_ENCODING] = {"transfer-encoding", 17, on_transfer_encoding, NO_SLOT},
    [RULE_CONNECTION] = {"connection", 10, on_connection, NO_SLOT},
    [RULE_EXPECT] = {"expect", 6, on_expect, NO_SLOT},
    [RULE_IF_NONE_MATCH] = {"if-none-match", 13, on_single, SLOT(if_none_match)},
    [RULE_IF_MODIFIED_SINCE] = {"if-modified-since", 17, on_single, SLOT(if_modified_since)},
    [RULE_IF_MATCH] = {"if-match", 8, on_single, SLOT(if_match)},
    [RULE_IF_UNMODIFIED_SINCE] = {"if-unmodified-since", 19, on_single,
                                  SLOT(if_unmodified_since)},
    [RULE_RANGE] = {"range", 5, on_single, SLOT(range)},
    [RULE_IF_RANGE] = {"if-range", 8, on_single, SLOT(if_range)},
    [RULE_CONTENT_TYPE] = {"content-type", 12, on_single, SLOT(content_type)},
    [RULE_AUTHORIZATION] = {"authorization", 13, on_authorization, NO_SLOT},
    [RULE_CONTENT_RANGE] = {"content-range", 13, on_content_range, NO_SLOT},
    [RULE_USER_AGENT] = {"user-agent", 10, on_first, SLOT(user_agent)},
    [RULE_REFERER] = {"referer", 7, on_first, SLOT(referer)},
    [RULE_ACCEPT_ENCODING] = {"accept-encoding", 15, on_first, SLOT(accept_encoding)},
};

/* The only rule a name of this length could match, told apart from the others of its
 * length by one letter. Most names a client sends (Accept, Cookie...) are ruled out
 * here, before any comparison. */
static enum field_rule_index field_rule_candidate(struct http_slice name)
{
    unsigned char first = (unsigned char)name.p[0] | 0x20;
    switch (name.len) {
    case 4: return RULE_HOST;
    case 5: return RULE_RANGE;
    case 6: return RULE_EXPECT;
    case 7: return RULE_REFERER;
    case 8: return ((unsigned char)name.p[3] | 0x20) == 'm' ? RULE_IF_MATCH : RULE_IF_RANGE;
    case 10: return first == 'c' ? RULE_CONNECTION : RULE_USER_AGENT;
    case 12: return RULE_CONTENT_TYPE;
    case 13: return first == 'i' ? RULE_IF_NONE_MATCH
                    : first == 'a' ? RULE_AUTHORIZATION : RULE_CONTENT_RANGE;
    case 14: return RULE_CONTENT_LENGTH;
    case 15: return RULE_ACCEPT_ENCODING;
    case 17: return first == 't' ? RULE_TRANSFER_ENCODING : RULE_IF_MODIFIED_SINCE;
    case 19: return RULE_IF_UNMODIFIED_SINCE;
    default: return RULE_NONE;
    }
}

static int apply_field(struct head_state *st, struct http_slice name, struct http_slice value)
{
    enum field_rule_index i = field_rule_candidate(name);
    if (i == RULE_NONE) return 0;
    const struct field_rule *r = &field_rules[i];
    if (name.len != r->len || !token_eq(name.p, r->name, r->len)) return 0;
    struct http_slice *slot =
        r->slot == NO_SLOT ? NULL : (struct http_slice *)((char *)st->req + r->slot);
    return r->apply(st, slot, value);
}

#define BYTES_OF(b) (0x0101010101010101u * (b))

/* Field values are the longest part of a head, so they are checked eight bytes at a time:
 * a word with no byte below 0x20 and none equal to DEL (the two tests below are exact
 * about whether such a byte exists) holds only field bytes. A word that has one is
 * looked at byte by byte, as HTAB is allowed. Forced inline: the request parser's cost
 * per field (the response parser calls it too, and gcc would then keep one copy). */
static inline __attribute__((always_inline)) bool valid_field_value(const char *p, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w = load64(p + i), del = w ^ BYTES_OF(0x7f);
        uint64_t below_space = (w - BYTES_OF(0x20)) & ~w & BYTES_OF(0x80);
        uint64_t is_del = (del - BYTES_OF(0x01)) & ~del & BYTES_OF(0x80);
        if ((below_space | is_del) == 0) continue;
        for (size_t j = i; j < i + 8; j++)
            if (!is_field_char(p[j])) return false;
    }
    for (; i < n; i++)
        if (!is_field_char(p[i])) return false;
    return true;
}

/* The length of the field name that ends at line's colon, or 0 if the line is not a
 * field line. The name must end at the colon: whitespace there is refused (RFC 9112
 * section 5.1), as is a line starting with whitespace (obs-fold, section 5.2), since
 * proxies disagree about both. */
static inline __attribute__((always_inline)) size_t field_line_name(struct http_slice line)
{
    size_t i = 0;
    while (i < line.len && is_tchar(line.p[i]))
        i++;
    if (i == 0 || i == line.len || line.p[i] != ':') return 0;
    if (!valid_field_value(line.p + i + 1, line.len - i - 1)) return 0;
    return i;
}

/* Fills h from a line field_line_name accepted, whose name is name_len bytes. */
static void field_line_split(struct http_slice line, size_t name_len, struct http_header *h)
{
    h->name = slice(line.p, name_len);
    size_t v = name_len + 1;
    if (v < line.len && line.p[v] == ' ') v++; /* the usual single space, without a call */
    h->value = trim_ows(slice(line.p + v, line.len - v));
}

/* field-name ":" OWS field-value OWS. */
static int parse_field_line(struct head_state *st, struct http_slice line)
{
    size_t name_len = field_line_name(line);
    if (name_len == 0) return -400;
    struct http_request *req = st->req;
    if (req->n_headers >= st->max_headers) return -431;
    struct http_header *h = &req->headers[req->n_headers++];
    field_line_split(line, name_len, h);
    return apply_field(st, h->name, h->value);
}

/* RFC 9112 section 6.3: only a lone "chunked" can frame a request we accept. */
static int check_framing(const struct head_state *st)
{
    struct http_request *req = st->req;
    if (!st->te_seen) return 0;
    /* HTTP/1.0 has no chunked coding; TE beside CL is the classic smuggling shape */
    if (req->version_minor == 0 || st->content_length_seen || st->te_codings == 0) return -400;
    if (st->te_chunked > 1 || (st->te_chunked == 1 && !st->te_last_chunked)) return -400;
    if (!st->te_last_chunked || st->te_codings > 1)
        return -501; /* well formed, but a coding we do not implement */
    req->framing = HTTP_BODY_CHUNKED;
    return 0;
}

/* The checks that need the whole head; 400s first, as they mean the framing is unsure. */
static int finish_head(const struct head_state *st)
{
    struct http_request *req = st->req;
    /* RFC 9112 section 3.2: every HTTP/1.1 request carries Host, even with an
     * absolute-form target (whose authority then wins) */
    if (req->version_minor == 1 && !st->host_field_seen) return -400;
    int rc = check_framing(st);
    if (rc < 0) return rc;
    if (st->expect_other) return -417;
    /* an HTTP/1.0 client cannot understand 100 (RFC 9110 section 10.1.1) */
    req->expect_continue = st->expect_continue && req->version_minor == 1;
    if (req->version_minor == 1)
        req->keep_alive = !st->conn_close;
    else
        req->keep_alive = st->conn_keep_alive && !st->conn_close;
    return (int)req->header_bytes;
}

/* --- the head ------------------------------------------------------------------------- */

/* Finds the line starting at *pos, before end. Returns 1 and sets *line (without its
 * CRLF) and moves *pos past the LF; 0 if the line has not ended yet; -400 on a bare LF.
 * A CR anywhere else is left in the line, where every grammar that reads a line (method,
 * target, version, field name and value) refuses it: so bare CR is a 400 too. */
static int next_line(const char *buf, size_t end, size_t *pos, struct http_slice *line)
{
    const char *lf = memchr(buf + *pos, '\n', end - *pos);
    if (!lf) { /* incomplete; but a CR with a byte after it can already be refused */
        const char *cr = memchr(buf + *pos, '\r', end - *pos);
        return cr && cr + 1 < buf + end ? -400 : 0;
    }
    size_t i = (size_t)(lf - buf);
    if (i == *pos || buf[i - 1] != '\r') return -400;
    *line = slice(buf + *pos, i - 1 - *pos);
    *pos = i + 1;
    return 1;
}

/* The status for a request line that does not end within the limit (line[0..len) is what
 * of it fits). Only a long target is "URI Too Long": a method that has not ended, or is
 * not one we know, is 501 (RFC 9112 section 3: a method longer than any implemented), as
 * it would be with a short target; a byte that cannot be in a method is 400. */
static int overlong_request_line(const char *line, size_t len)
{
    size_t i = 0;
    while (i < len && is_tchar(line[i]))
        i++;
    if (i == 0) return len == 0 ? -414 : -400; /* len 0: empty lines filled the limit */
    if (i == len) return -501;
    if (line[i] != ' ') return -400;
    return method_from_name(slice(line, i)) == HTTP_METHOD_UNKNOWN ? -501 : -414;
}

int http_parse_request(const char *buf, size_t len, const struct http_limits *lim,
                       struct http_request *req)
{
    /* Everything but the header array, which is filled as far as n_headers says. */
    memset(req, 0, offsetof(struct http_request, headers));
    memset(&req->n_headers, 0, sizeof *req - offsetof(struct http_request, n_headers));
    struct head_state st = {.req = req, .max_headers = lim->max_headers};
    if (st.max_headers > HTTP_MAX_HEADERS) st.max_headers = HTTP_MAX_HEADERS;
    /* the head must end within the limit, and its size must fit the int we return */
    size_t limit = lim->max_header_bytes < INT_MAX ? lim->max_header_bytes : INT_MAX;
    size_t end = len < limit ? len : limit;

    bool request_line_done = false;
    size_t pos = 0;
    struct http_slice line;
    int rc;
    while ((rc = next_line(buf, end, &pos, &line)) > 0) {
        if (!request_line_done && line.len == 0)
            continue; /* empty lines before the request line (RFC 9112 section 2.2) */
        if (request_line_done && line.len == 0) {
            req->header_bytes = pos;
            return finish_head(&st);
        }
        if (request_line_done)
            rc = parse_field_line(&st, line);
        else
            rc = parse_request_line(req, line);
        if (rc < 0) return rc;
        request_line_done = true;
    }
    if (rc < 0) return rc;
    if (len <= limit) return 0;
    return request_line_done ? -431 : overlong_request_line(buf + pos, end - pos);
}

/* --- the grammar's pieces, shared ------------------------------------------------------ */

int http_next_line(const char *buf, size_t end, size_t *pos, struct http_slice *line)
{
    int rc = next_line(buf, end, pos, line);
    return rc < 0 ? -1 : rc;
}

int http_field_line(struct http_slice line, struct http_header *h)
{
    size_t name_len = field_line_name(line);
    if (name_len == 0) return -1;
    field_line_split(line, name_len, h);
    return 0;
}

bool http_field_value_valid(const char *p, size_t n)
{
    return valid_field_value(p, n);
}

bool http_list_next(struct http_slice *rest, struct http_slice *elem)
{
    return list_next(rest, elem);
}

bool http_is_token(struct http_slice s)
{
    return is_token(s);
}

bool http_parse_u64(struct http_slice s, uint64_t *v)
{
    return parse_u64(s, v);
}

const struct http_header *http_find_header(const struct http_request *req, const char *name)
{
    size_t n = strlen(name);
    for (unsigned i = 0; i < req->n_headers; i++) {
        const struct http_header *h = &req->headers[i];
        if (h->name.len == n && bytes_eq_nocase(h->name.p, name, n)) return h;
    }
    return NULL;
}

/* --- chunked transfer coding ---------------------------------------------------------- */

/* Where in the grammar of RFC 9112 section 7.1 the decoder stands. Each state names what
 * the next byte may be. A chunk-size line is:
 *   1*16HEXDIG *( BWS ";" BWS ext-name [ BWS "=" BWS ( token / quoted-string ) ] ) CRLF */
enum chunk_state {
    CH_SIZE = 0,        /* hex digits of chunk-size; 0, so a zeroed struct is ready */
    CH_EXT_WS,          /* BWS after an item: only ";" may follow */
    CH_EXT_NAME_START,  /* after ";" (and BWS): an ext-name starts */
    CH_EXT_NAME,        /* inside an ext-name */
    CH_EXT_NAME_WS,     /* BWS after an ext-name: "=" or ";" */
    CH_EXT_VALUE_START, /* after "=" (and BWS): a token or a quoted-string */
    CH_EXT_TOKEN,       /* inside a token value */
    CH_EXT_QUOTED,      /* inside a quoted-string value */
    CH_EXT_QUOTED_ESC,  /* after a backslash in a quoted-string */
    CH_EXT_ITEM_END,    /* after a quoted-string's closing quote */
    CH_SIZE_LF,         /* after the size line's CR */
    CH_DATA,            /* `remaining` data bytes to go */
    CH_DATA_CR,         /* the CR after chunk data */
    CH_DATA_LF,         /* the LF after chunk data */
    CH_TRAILER_START,   /* start of a trailer line, or of the final empty line */
    CH_TRAILER_NAME,    /* inside a trailer field name */
    CH_TRAILER_VALUE,   /* after the colon, up to CR */
    CH_TRAILER_LF,      /* the LF ending a trailer line */
    CH_END_LF,          /* the LF of the final empty line */
    CH_DONE,            /* the states from here on are final */
    CH_ERROR,
    CH_TOO_LARGE,
};

#define CHUNK_SIZE_DIGITS_MAX 16 /* 16 hex digits cannot overflow 64 bits */
#define CHUNK_LINE_MAX 4096      /* size line with extensions, without its CRLF */
#define CHUNK_TRAILER_MAX 8192   /* the whole trailer section, final CRLF included */

void http_chunked_init(struct http_chunked *c)
{
    memset(c, 0, sizeof *c);
    c->state = CH_SIZE;
}

/* After a complete item of the size line: the size, a name, or a value. */
static int chunk_after_item(unsigned char b)
{
    if (b == ';') return CH_EXT_NAME_START;
    if (is_ows(b)) return CH_EXT_WS;
    return b == '\r' ? CH_SIZE_LF : CH_ERROR;
}

static int chunk_size_digit(struct http_chunked *c, unsigned char b, uint64_t max_body)
{
    int v = hex_value(b);
    /* until the first non-digit, line_bytes counts the digits */
    if (v < 0) return c->line_bytes == 0 ? CH_ERROR : chunk_after_item(b);
    if (c->line_bytes == CHUNK_SIZE_DIGITS_MAX) return CH_ERROR;
    c->remaining = c->remaining << 4 | (uint64_t)v;
    /* more digits only make it larger, so the size is already certain to be too much */
    if (max_body != 0 && c->remaining > max_body - c->total) return CH_TOO_LARGE;
    return CH_SIZE;
}

/* qdtext or quoted-pair's second byte (RFC 9110 section 5.6.4). */
static int chunk_quoted(unsigned char b)
{
    if (b == '"') return CH_EXT_ITEM_END;
    if (b == '\\') return CH_EXT_QUOTED_ESC;
    return is_field_char(b) ? CH_EXT_QUOTED : CH_ERROR;
}

static int chunk_size_line_byte(struct http_chunked *c, unsigned char b, uint64_t max_body)
{
    switch (c->state) {
    case CH_SIZE:
        return chunk_size_digit(c, b, max_body);
    case CH_EXT_WS:
        if (is_ows(b)) return CH_EXT_WS;
        return b == ';' ? CH_EXT_NAME_START : CH_ERROR;
    case CH_EXT_NAME_START:
        if (is_ows(b)) return CH_EXT_NAME_START;
        return is_tchar(b) ? CH_EXT_NAME : CH_ERROR;
    case CH_EXT_NAME:
        if (is_tchar(b)) return CH_EXT_NAME;
        if (is_ows(b)) /* BWS before "=" or ";" */
            return CH_EXT_NAME_WS;
        return b == '=' ? CH_EXT_VALUE_START : chunk_after_item(b);
    case CH_EXT_NAME_WS:
        if (is_ows(b)) return CH_EXT_NAME_WS;
        if (b == '=') return CH_EXT_VALUE_START;
        return b == ';' ? CH_EXT_NAME_START : CH_ERROR;
    case CH_EXT_VALUE_START:
        if (is_ows(b)) return CH_EXT_VALUE_START;
        if (b == '"') return CH_EXT_QUOTED;
        return is_tchar(b) ? CH_EXT_TOKEN : CH_ERROR;
    case CH_EXT_TOKEN:
        return is_tchar(b) ? CH_EXT_TOKEN : chunk_after_item(b);
    case CH_EXT_QUOTED:
        return chunk_quoted(b);
    case CH_EXT_QUOTED_ESC:
        return is_field_char(b) ? CH_EXT_QUOTED : CH_ERROR;
    case CH_EXT_ITEM_END:
        return chunk_after_item(b);
    }
    return CH_ERROR;
}

/* The size line is bounded, extensions included: a peer may not make us scan forever. */
static int chunk_size_line(struct http_chunked *c, unsigned char b, uint64_t max_body)
{
    int next = chunk_size_line_byte(c, b, max_body);
    if (next != CH_SIZE_LF && ++c->line_bytes > CHUNK_LINE_MAX) return CH_ERROR;
    return next;
}

static int chunk_trailer_byte(struct http_chunked *c, unsigned char b)
{
    if (++c->trailer_bytes > CHUNK_TRAILER_MAX) return CH_ERROR;
    switch (c->state) {
    case CH_TRAILER_START:
        if (b == '\r') return CH_END_LF;
        return is_tchar(b) ? CH_TRAILER_NAME : CH_ERROR; /* SP or HTAB: obs-fold */
    case CH_TRAILER_NAME:
        if (b == ':') return CH_TRAILER_VALUE;
        return is_tchar(b) ? CH_TRAILER_NAME : CH_ERROR;
    case CH_TRAILER_VALUE:
        if (b == '\r') return CH_TRAILER_LF;
        return is_field_char(b) ? CH_TRAILER_VALUE : CH_ERROR;
    case CH_TRAILER_LF:
        return b == '\n' ? CH_TRAILER_START : CH_ERROR;
    case CH_END_LF:
        return b == '\n' ? CH_DONE : CH_ERROR;
    }
    return CH_ERROR;
}

/* One framing byte, anywhere but inside chunk data. */
static int chunk_byte(struct http_chunked *c, unsigned char b, uint64_t max_body)
{
    switch (c->state) {
    case CH_SIZE_LF:
        if (b != '\n') return CH_ERROR;
        return c->remaining == 0 ? CH_TRAILER_START : CH_DATA;
    case CH_DATA_CR:
        return b == '\r' ? CH_DATA_LF : CH_ERROR;
    case CH_DATA_LF:
        if (b != '\n') return CH_ERROR;
        c->line_bytes = 0;
        return CH_SIZE;
    }
    if (c->state >= CH_TRAILER_START) return chunk_trailer_byte(c, b);
    return chunk_size_line(c, b, max_body);
}

static enum http_chunked_result chunk_result(int state)
{
    switch (state) {
    case CH_DONE:
        return HTTP_CHUNKED_DONE;
    case CH_ERROR:
        return HTTP_CHUNKED_ERROR;
    case CH_TOO_LARGE:
        return HTTP_CHUNKED_TOO_LARGE;
    }
    return HTTP_CHUNKED_MORE;
}

enum http_chunked_result http_chunked_decode(struct http_chunked *c, char *buf, size_t len,
                                             uint64_t max_body, size_t *in_used, size_t *out_len)
{
    size_t in = 0, out = 0;
    while (in < len && c->state < CH_DONE) {
        if (c->state != CH_DATA) {
            c->state = chunk_byte(c, (unsigned char)buf[in++], max_body);
            continue;
        }
        size_t n = len - in < c->remaining ? len - in : (size_t)c->remaining;
        memmove(buf + out, buf + in, n); /* out <= in: data only ever moves left */
        in += n;
        out += n;
        c->remaining -= n;
        c->total += n;
        if (c->remaining == 0) c->state = CH_DATA_CR;
    }
    *in_used = in;
    *out_len = out;
    return chunk_result(c->state);
}

/* --- Range ---------------------------------------------------------------------------- */

/* One range-spec resolved against size. Returns 1 with *r set if satisfiable, 0 if not,
 * -1 if malformed. */
static int range_spec(struct http_slice e, uint64_t size, struct http_range *r)
{
    const char *dash = memchr(e.p, '-', e.len);
    if (dash == NULL) return -1;
    struct http_slice a = slice(e.p, (size_t)(dash - e.p));
    struct http_slice b = slice(dash + 1, e.len - a.len - 1);
    uint64_t first, last;
    if (a.len == 0) { /* suffix-range: the last b bytes */
        uint64_t suffix;
        if (!parse_u64(b, &suffix)) return -1;
        if (suffix == 0 || size == 0) return 0;
        *r = (struct http_range){suffix >= size ? 0 : size - suffix, size - 1};
        return 1;
    }
    if (!parse_u64(a, &first)) return -1;
    if (b.len == 0)
        last = UINT64_MAX;
    else if (!parse_u64(b, &last) || last < first)
        return -1;
    if (first >= size) return 0;
    *r = (struct http_range){first, last >= size ? size - 1 : last};
    return 1;
}

static bool ranges_overlap(const struct http_range *r, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        for (unsigned j = i + 1; j < n; j++)
            if (r[i].first <= r[j].last && r[j].first <= r[i].last) return true;
    return false;
}

enum http_range_result http_range_parse(struct http_slice value, uint64_t size,
                                        struct http_range *out, unsigned max_ranges, unsigned *n)
{
    *n = 0;
    if (!starts_with_nocase(value, "bytes=")) return HTTP_RANGE_IGNORE;
    struct http_slice rest = slice(value.p + 6, value.len - 6), elem;
    unsigned specs = 0, kept = 0;
    while (list_next(&rest, &elem)) {
        if (elem.len == 0) continue;
        if (++specs > max_ranges) return HTTP_RANGE_IGNORE;
        int rc = range_spec(elem, size, &out[kept]);
        if (rc < 0) return HTTP_RANGE_IGNORE;
        kept += (unsigned)rc;
    }
    if (specs == 0) return HTTP_RANGE_IGNORE;
    if (kept == 0) return HTTP_RANGE_UNSATISFIABLE;
    if (ranges_overlap(out, kept)) return HTTP_RANGE_IGNORE;
    *n = kept;
    return HTTP_RANGE_OK;
}

/* --- dates ---------------------------------------------------------------------------- */

_Static_assert(sizeof(time_t) >= 8, "dates past 2038 need a 64-bit time_t");

static const char *const day_short[7] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
static const char *const day_long[7] = {"Sunday",   "Monday", "Tuesday", "Wednesday",
                                        "Thursday", "Friday", "Saturday"};
static const char *const month_short[12] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

/* A broken-down UTC time, month 1..12. */
struct civil {
    int year, month, day, hour, min, sec;
};

/* Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar: Howard Hinnant's
 * days_from_civil, exact for any year, no timezone or locale involved. */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;                                   /* [0, 399] */
    int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1; /* [0, 365] */
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;           /* [0, 146096] */
    return era * 146097 + doe - 719468;
}

static int days_in_month(int year, int month)
{
    static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    return month == 2 && leap ? 29 : days[month - 1];
}

/* Exactly n digits. */
static bool date_digits(const char *s, size_t n, int *v)
{
    int x = 0;
    for (size_t i = 0; i < n; i++) {
        if (!is_digit(s[i])) return false;
        x = x * 10 + (s[i] - '0');
    }
    *v = x;
    return true;
}

/* Names are case-sensitive in HTTP-date (RFC 9110 section 5.6.7). */
static int name_index(const char *s, size_t n, const char *const *names, int count)
{
    for (int i = 0; i < count; i++)
        if (strlen(names[i]) == n && memcmp(s, names[i], n) == 0) return i;
    return -1;
}

static bool date_month(const char *s, int *month)
{
    int i = name_index(s, 3, month_short, 12);
    *month = i + 1;
    return i >= 0;
}

/* "HH:MM:SS" */
static bool date_clock(const char *s, struct civil *c)
{
    return date_digits(s, 2, &c->hour) && s[2] == ':' && date_digits(s + 3, 2, &c->min) &&
           s[5] == ':' && date_digits(s + 6, 2, &c->sec);
}

/* "Sun, 06 Nov 1994 08:49:37 GMT" */
static bool date_imf(struct http_slice v, struct civil *c)
{
    const char *s = v.p;
    return v.len == 29 && name_index(s, 3, day_short, 7) >= 0 && memcmp(s + 3, ", ", 2) == 0 &&
           date_digits(s + 5, 2, &c->day) && s[7] == ' ' && date_month(s + 8, &c->month) &&
           s[11] == ' ' && date_digits(s + 12, 4, &c->year) && s[16] == ' ' &&
           date_clock(s + 17, c) && memcmp(s + 25, " GMT", 4) == 0;
}

/* "Sunday, 06-Nov-94 08:49:37 GMT" */
static bool date_rfc850(struct http_slice v, struct civil *c)
{
    const char *comma = memchr(v.p, ',', v.len);
    if (comma == NULL) return false;
    size_t name_len = (size_t)(comma - v.p);
    if (name_index(v.p, name_len, day_long, 7) < 0 || v.len != name_len + 24 || comma[1] != ' ')
        return false;
    const char *s = comma + 2; /* "06-Nov-94 08:49:37 GMT" */
    int yy;
    if (!date_digits(s, 2, &c->day) || s[2] != '-' || !date_month(s + 3, &c->month) ||
        s[6] != '-' || !date_digits(s + 7, 2, &yy) || s[9] != ' ' || !date_clock(s + 10, c) ||
        memcmp(s + 18, " GMT", 4) != 0)
        return false;
    c->year = yy >= 70 ? 1900 + yy : 2000 + yy;
    return true;
}

/* "Sun Nov  6 08:49:37 1994"; the day is 2DIGIT or SP DIGIT. */
static bool date_asctime(struct http_slice v, struct civil *c)
{
    const char *s = v.p;
    if (v.len != 24 || name_index(s, 3, day_short, 7) < 0 || s[3] != ' ' ||
        !date_month(s + 4, &c->month) || s[7] != ' ')
        return false;
    bool day = s[8] == ' ' ? date_digits(s + 9, 1, &c->day) : date_digits(s + 8, 2, &c->day);
    return day && s[10] == ' ' && date_clock(s + 11, c) && s[19] == ' ' &&
           date_digits(s + 20, 4, &c->year);
}

int http_date_parse(struct http_slice value, int64_t *t)
{
    struct civil c;
    if (value.p == NULL ||
        !(date_imf(value, &c) || date_rfc850(value, &c) || date_asctime(value, &c)))
        return -1;
    /* the day-name is not checked against the date: a wrong one harms nobody */
    if (c.day < 1 || c.day > days_in_month(c.year, c.month) || c.hour > 23 || c.min > 59 ||
        c.sec > 60) /* 60: a leap second, counted as the next minute's first */
        return -1;
    *t = days_from_civil(c.year, c.month, c.day) * 86400 + c.hour * 3600 + c.min * 60 + c.sec;
    return 0;
}

static void put_digits(char *out, int v, int n)
{
    for (int i = n - 1; i >= 0; i--) {
        out[i] = (char)('0' + v % 10);
        v /= 10;
    }
}

/* Years 0 and 9999, the only ones four digits can show. */
#define DATE_MIN INT64_C(-62167219200)
#define DATE_MAX INT64_C(253402300799)

void http_date_format(int64_t t, char out[30])
{
    time_t tt = (time_t)(t < DATE_MIN ? DATE_MIN : t > DATE_MAX ? DATE_MAX : t);
    struct tm tm;
    if (gmtime_r(&tt, &tm) == NULL) { /* cannot happen in range; print the epoch anyway */
        tt = 0;
        gmtime_r(&tt, &tm);
    }
    memcpy(out, day_short[tm.tm_wday], 3);
    memcpy(out + 3, ", ", 2);
    put_digits(out + 5, tm.tm_mday, 2);
    out[7] = ' ';
    memcpy(out + 8, month_short[tm.tm_mon], 3);
    out[11] = ' ';
    put_digits(out + 12, tm.tm_year + 1900, 4);
    out[16] = ' ';
    put_digits(out + 17, tm.tm_hour, 2);
    out[19] = ':';
    put_digits(out + 20, tm.tm_min, 2);
    out[22] = ':';
    put_digits(out + 23, tm.tm_sec, 2);
    memcpy(out + 25, " GMT", 5); /* with the NUL */
}

/* --- paths ---------------------------------------------------------------------------- */

/* The output so far: out[0..len) is "/seg/seg" with no trailing slash ("" is the root),
 * and the segment being read is written after it, at out[len + 1], while it fits.
 * Segments that do not fit are only counted (`hidden`): a later ".." may still remove
 * them, so the result is -414 only if the final path does not fit. */
struct path_out {
    char *out;
    size_t cap;
    size_t len;
    size_t seg_len;
    char seg_head[2]; /* the segment's first bytes, kept even when it is not stored */
    unsigned hidden;  /* committed segments past the end of out */
    bool trailing;    /* the last segment was empty, "." or "..": the path ends in '/' */
};

static void path_byte(struct path_out *po, unsigned char b)
{
    size_t at = po->len + 1 + po->seg_len;
    if (po->seg_len < 2) po->seg_head[po->seg_len] = (char)b;
    if (po->hidden == 0 && at < po->cap) po->out[at] = (char)b;
    po->seg_len++;
}

/* path_byte for a run of bytes that need no decoding. */
static void path_bytes(struct path_out *po, const char *p, size_t n)
{
    for (size_t k = 0; po->seg_len + k < 2 && k < n; k++)
        po->seg_head[po->seg_len + k] = p[k];
    size_t at = po->len + 1 + po->seg_len;
    if (po->hidden == 0 && at < po->cap)
        memcpy(po->out + at, p, n < po->cap - at ? n : po->cap - at);
    po->seg_len += n;
}

static int path_segment_end(struct path_out *po)
{
    size_t n = po->seg_len;
    bool dot = n == 1 && po->seg_head[0] == '.';
    bool dotdot = n == 2 && po->seg_head[0] == '.' && po->seg_head[1] == '.';
    po->seg_len = 0;
    po->trailing = n == 0 || dot || dotdot;
    if (n == 0 || dot) return 0;
    if (dotdot) {
        if (po->hidden > 0) {
            po->hidden--;
            return 0;
        }
        if (po->len == 0) return -400; /* above the root */
        while (po->out[--po->len] != '/')
            ;
        return 0;
    }
    if (po->hidden == 0 && po->len + 1 + n < po->cap) { /* "< cap": room for the NUL */
        po->out[po->len] = '/';
        po->len += 1 + n;
    } else {
        po->hidden++;
    }
    return 0;
}

long http_path_normalize(struct http_slice in, char *out, size_t cap)
{
    if (in.len == 0 || in.p[0] != '/') return -400;
    struct path_out po = {.out = out, .cap = cap};
    for (size_t i = 1; i < in.len; i++) {
        unsigned char b = in.p[i];
        if (in_class(b, CL_PATH)) { /* most of a path: copied a run at a time */
            size_t j = i + 1;
            while (j < in.len && in_class(in.p[j], CL_PATH))
                j++;
            path_bytes(&po, in.p + i, j - i);
            i = j - 1;
            continue;
        }
        if (b == '%') {
            if (i + 2 >= in.len || hex_value(in.p[i + 1]) < 0 || hex_value(in.p[i + 2]) < 0)
                return -400;
            b = (unsigned char)(hex_value(in.p[i + 1]) << 4 | hex_value(in.p[i + 2]));
            i += 2;
        }
        if (b == 0) return -400;
        /* decoding comes first, so an encoded '/' separates segments like a literal one */
        if (b != '/') {
            path_byte(&po, b);
            continue;
        }
        if (path_segment_end(&po) < 0) return -400;
    }
    if (path_segment_end(&po) < 0) return -400;
    if (po.hidden > 0) return -414;
    if (po.trailing || po.len == 0) {
        if (po.len + 1 >= cap) return -414;
        out[po.len++] = '/';
    }
    if (po.len >= cap) return -414;
    out[po.len] = '\0';
    return (long)po.len;
}

long http_path_encode(const char *in, size_t len, char *out, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)in[i];
        bool keep = is_digit(c) || is_alpha(c) || (c != 0 && strchr("-._~/!$&'()*+,;=:@", c));
        if (n + (keep ? 1 : 3) >= cap) return -1;
        if (keep) {
            out[n++] = (char)c;
        } else {
            out[n++] = '%';
            out[n++] = hex[c >> 4];
            out[n++] = hex[c & 15];
        }
    }
    if (n >= cap) return -1;
    out[n] = '\0';
    return (long)n;
}

/* Does the If-Match / If-None-Match list contain etag? weak: weak comparison (W/ ignored on
 * both sides); strong: a weak tag never matches. "*" matches anything. */
bool http_etag_list_matches(struct http_slice list, const char *etag, bool weak)
{
    const char *tag = etag;
    bool tag_weak = strncmp(tag, "W/", 2) == 0;
    if (tag_weak)
        tag += 2;
    size_t tl = strlen(tag);
    const char *p = list.p, *end = list.p + list.len;
    while (p < end) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == ','))
            p++;
        if (p >= end)
            break;
        if (*p == '*')
            return true;
        bool is_weak = false;
        if (end - p >= 2 && p[0] == 'W' && p[1] == '/') {
            is_weak = true;
            p += 2;
        }
        if (p >= end || *p != '"')
            return false; /* malformed: no match */
        const char *q = memchr(p + 1, '"', (size_t)(end - p - 1));
        if (!q)
            return false;
        size_t len = (size_t)(q - p + 1);
        if ((weak || (!is_weak && !tag_weak)) && tl && len == tl && memcmp(p, tag, tl) == 0)
            return true;
        p = q + 1;
    }
    return false;
}

bool http_user_agent_msie6(struct http_slice ua)
{
    const char *m = ua.len ? memmem(ua.p, ua.len, "MSIE ", 5) : NULL;
    if (!m)
        return false; /* ua.p may be NULL: no User-Agent */
    const char *end = ua.p + ua.len;
    if (m + 7 >= end || m[6] != '.' || memmem(ua.p, ua.len, "Opera", 5))
        return false;
    if (m[5] == '4' || m[5] == '5')
        return true;
    return m[5] == '6' && !memmem(m + 8, (size_t)(end - (m + 8)), "SV1", 3);
}

bool http_user_agent_safari(struct http_slice ua)
{
    return ua.len && !memmem(ua.p, ua.len, "Chrome/", 7) && memmem(ua.p, ua.len, "Safari/", 7) &&
           memmem(ua.p, ua.len, "Mac OS X", 8);
}
