/* vars.h — nginx's variables in configuration values: `$uri`, `${host}`, compiled once.
 *
 * A value such as "https://$host$request_uri" is compiled when the configuration loads into
 * a list of parts (literal text, variable, literal text...), so a request expands it
 * without parsing and without allocating, into a buffer the caller gives. An unknown
 * variable is an error at load, as in nginx ("unknown \"x\" variable"); names are
 * case-insensitive, as nginx's.
 *
 *   $uri             the decoded, normalized path (dot segments removed, slashes merged)
 *   $request_uri     the target as sent, from its path on (an absolute-form target's
 *                    scheme and authority left out, as nginx does; its empty path is
 *                    "/", so "http://a?x=1" gives "/?x=1" where nginx gives "?x=1")
 *   $args            the query, without the '?'
 *   $arg_NAME        the raw value of the query's first NAME= argument (NAME compared
 *                    case-insensitively; "NAME" without '=' is not it), as nginx's
 *   $host            the Host (or the absolute-form authority), lowercased, without port
 *                    or trailing dot; without one, the server's name
 *   $http_NAME       the request header NAME ('_' in NAME stands for '-', any case). Of a
 *                    repeated field the first, except Cookie (all, joined with "; ") and
 *                    X-Forwarded-For (all, joined with ", "), as nginx 1.22. A field whose
 *                    name holds '_' is never one: nginx drops those by default
 *                    (underscores_in_headers off), so X_Forwarded_For cannot pose as one
 *   $cookie_NAME     the raw value of the first cookie NAME (any case) in the Cookie fields,
 *                    as nginx reads them: up to the next ';', spaces around '=' skipped
 *   $scheme          "http"
 *   $remote_addr     the client's address
 *   $remote_port     the client's port
 *   $binary_remote_addr  the client's address as its 4 (IPv4) or 16 (IPv6) bytes
 *   $limit_req_status, $limit_conn_status  what limit_req and limit_conn made of the
 *                    request (PASSED, DELAYED, REJECTED, *_DRY_RUN; empty: not limited)
 *   $server_addr     the address the connection came in on (asked of the socket, once per
 *                    expansion, when the listener is a wildcard one)
 *   $server_port     the port the connection came in on
 *   $server_name     the server block's first name as written, lowercased ("" without one)
 *   $request_method  the method as sent
 *   $request_id      16 random bytes as 32 lowercase hex digits, one per request: made on
 *                    first use, the same wherever the request expands it (internal
 *                    redirects included); from a per-thread generator seeded by getrandom
 *   $proxy_host      the upstream's name or HOST:PORT, and its port, as the proxy gives
 *   $proxy_port      them ("" when not proxying)
 *   $proxy_add_x_forwarded_for   $http_x_forwarded_for, ", " and $remote_addr; only
 *                    $remote_addr when the request has no X-Forwarded-For
 *   $status, $body_bytes_sent, $bytes_sent   the answer's status, its body bytes, and
 *                    those with the head's (empty before the answer: for the access log)
 *   $request         the request line as sent ("GET /x HTTP/1.1")
 *   $msec, $time_local, $time_iso8601   the time of the expansion: seconds with
 *                    milliseconds, "27/Nov/2026:18:00:00 +0000", "2026-11-27T18:00:00+00:00"
 *   $request_time    seconds with milliseconds from the request's start to the answer
 *   $request_length  the request's head, and its body's bytes as sent when a handler
 *                    reads it (not a body skipped)
 *   $connection_requests  the request's number on its connection
 *   $connection      the connection's serial number in the process, from 1
 *   $request_body    the body, once the block's handler has read it whole (the proxy,
 *                    FastCGI, CGI, echo; an error page's request keeps it), when it is no
 *                    longer than client_body_buffer_size: nginx's value, which is there
 *                    only while the body is in memory
 *   $is_args, $pipe  "?" when $args is not empty (else ""); "p" for a pipelined request
 *                    (else ".")
 *   $remote_user     empty: basic authentication's user is not kept (nginx logs "-" too
 *                    without one)
 *   $upstream_addr, $upstream_status, $upstream_response_time, $upstream_connect_time,
 *   $upstream_header_time, $upstream_response_length, $upstream_bytes_received,
 *   $upstream_bytes_sent   the proxy's tries, one entry each joined with ", "
 *                    (vars_upstream.h); $upstream_http_NAME a field of the last try's
 *                    answer; $upstream_cache_status never set (there is no cache)
 *   $document_root   the root (or alias) that serves the request, variables expanded
 *   $realpath_root   its real path (symlinks resolved)
 *   $request_filename  the file the path names there: the root and the path, or the alias
 *                    and what follows the location's prefix (of a regex location, the
 *                    alias alone)
 *   $1 .. $9         the groups of the regex location that matched (one digit: "$10" is
 *                    $1 then "0", as nginx's); without one, those of the server's regex
 *                    name that matched the Host; else empty
 *   $NAME            a named group `(?<NAME>...)` of that regex; NAME is known once any
 *                    regex of the configuration defines it (regex_name_known), as nginx's
 *   $sent_trailer_NAME  a trailer line made before, in add_trailer's values (trailers)
 *
 * Where the result goes decides the escaping, fixed at compile time:
 *
 *   VARS_HEADER  a header field value. $uri is decoded, so "/a%0d%0aSet-Cookie:x" holds a
 *                CR LF. nginx copies it into the header as it is (a known header injection
 *                with `return 302 ...$uri` or `add_header ... $uri`). Here every control
 *                byte a variable brings (0x00-0x1f and 0x7f) is written as %XX, so no
 *                expansion can end a header line or start another; literal text with
 *                control bytes is refused at load.
 *   VARS_RAW     anything else (a file name to try): bytes as they are.
 */
#ifndef LFHTTPD_VARS_H
#define LFHTTPD_VARS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/socket.h>

#include "http_parse.h"
#include "proxy_protocol.h"
#include "regex.h"

enum vars_path { VARS_DOCUMENT_ROOT, VARS_REALPATH_ROOT, VARS_REQUEST_FILENAME,
                 VARS_FASTCGI_SCRIPT_NAME, VARS_FASTCGI_PATH_INFO, VARS_INVALID_REFERER,
                 VARS_SECURE_LINK, VARS_SECURE_LINK_EXPIRES };

/* The $ssl_* variables, in the order of their ids in vars.c; asked of vars_source.tls_var. */
enum vars_tls {
    VARS_SSL_PROTOCOL,
    VARS_SSL_CIPHER,
    VARS_SSL_CIPHERS,
    VARS_SSL_CURVE,
    VARS_SSL_CURVES,
    VARS_SSL_SERVER_NAME,
    VARS_SSL_SESSION_REUSED,
    VARS_SSL_SESSION_ID,
    VARS_SSL_EARLY_DATA,
    VARS_SSL_CLIENT_VERIFY,
    VARS_SSL_CLIENT_S_DN,
    VARS_SSL_CLIENT_I_DN,
    VARS_SSL_CLIENT_SERIAL,
    VARS_SSL_CLIENT_FINGERPRINT,
    VARS_SSL_CLIENT_CERT,
    VARS_SSL_CLIENT_ESCAPED_CERT,
    VARS_SSL_CLIENT_RAW_CERT,
    VARS_SSL_CLIENT_V_START,
    VARS_SSL_CLIENT_V_END,
    VARS_SSL_CLIENT_V_REMAIN,
    VARS_SSL_CLIENT_S_DN_LEGACY,
    VARS_SSL_CLIENT_I_DN_LEGACY,
};

enum vars_context {
    VARS_HEADER,
    VARS_RAW,
    /* An access-log line, as nginx's log_format escape=default|json|none: only what the
     * variables bring is escaped, the format's own text is written as it is. default:
     * '"', '\\' and bytes below 32 or above 126 as \xHH, an empty value as "-"; json:
     * the inside of a JSON string (\", \\, \n, \r, \t, \b, \f, \u00XX for the other
     * bytes below 32); none: bytes as they are, an empty value as "-". */
    VARS_LOG_DEFAULT,
    VARS_LOG_JSON,
    VARS_LOG_NONE,
};

struct vars_upstream;

/* What a value is expanded from: one request, as the module chain sees it. */
struct vars_source {
    const struct http_request *http;
    const char *uri; /* the decoded, normalized path */
    size_t uri_len;
    const struct sockaddr *peer;  /* the client (NULL: $remote_addr is empty) */
    /* The connection's own address, for $realip_remote_addr (NULL: peer's). */
    const struct sockaddr *conn_peer;
    /* $connections_active, _reading, _writing, _waiting into out[4] (NULL: empty). */
    void (*connections)(const void *user_vars, unsigned long long out[4]);
    /* The connection's PROXY protocol header (NULL: $proxy_protocol_* are empty). */
    const struct proxy_protocol_addrs *proxy_protocol;
    const struct sockaddr *local; /* the listener's address (NULL: $server_port is empty) */
    bool https;                   /* over TLS: $scheme https, $https on */
    int local_fd;                 /* the connection's socket, for $server_addr behind a
                                     wildcard listener; 0 or less: not known (0, so that
                                     a source left zeroed never asks stdin) */
    const char *server_name;      /* $host without a Host; NULL: "" (nginx's default name) */
    /* $server_name: before, text and after ("*", "example.", "" for `*.example.`'s
     * pieces; NULL: ""), the three written one after the other. */
    const char *name_before, *name, *name_after;
    const struct http_slice *args; /* $args; NULL: the request's query */
    /* The request's $request_id: 33 bytes that live as long as the request, "" until
     * the first expansion fills them (so a request that never asks pays nothing). NULL:
     * $request_id is empty. */
    char *request_id;
    struct http_slice proxy_host, proxy_port; /* the proxy's; empty when not proxying */
    const struct regex_captures *captures;    /* $1..$9, $NAME; NULL: none */
    const struct regex_captures *server_captures; /* of a server_name ~RE; the location's
                                                     win, as in nginx, when they have one */
    /* $NAME of a `set $NAME` or a `map`, by the index vars_declare gave NAME: its value
     * for this request, written into out (empty when not set); user_var NULL: all empty.
     * It is given the source being expanded, so that a map's own source sees what this
     * one sees (the answer's $status in an access log's if=, say). */
    long (*user_var)(const struct vars_source *src, unsigned user, char *out,
                     size_t cap); /* the value's length in out, or -1: too long */
    const void *user_vars;
    /* $document_root, $realpath_root, $request_filename of the request user_vars (which
     * names one of enum vars_path), written into out; NULL: all empty. */
    long (*path_var)(const void *user_vars, int which, char *out, size_t cap);
    /* The $ssl_* variable `which` (enum vars_tls) of the connection's TLS state `tls`,
     * written into out: its length, or -1 when it does not fit; NULL (or tls NULL): all
     * empty, a plain connection. */
    long (*tls_var)(const void *tls, int which, char *out, size_t cap);
    const void *tls;
    /* $sent_http_NAME: the field NAME ("content-type") of the answer `response`, as it is
     * when the value is expanded (in add_header, expires, an access-log line); NULL: all
     * empty. */
    struct http_slice (*sent_field)(const void *response, const char *name, size_t len);
    const void *response;
    /* The answer, for a value expanded after it (an access-log line); without one
     * (answered false) $status, $body_bytes_sent and $bytes_sent are empty. */
    bool answered;
    int status;
    uint64_t body_bytes;   /* $body_bytes_sent */
    uint64_t head_bytes;   /* the response head's bytes: $bytes_sent is both */
    int64_t start_us;      /* when the request began (clock_now_us), for $request_time */
    int64_t now_us;        /* when the answer went (the same clock) */
    uint64_t request_length;       /* $request_length */
    unsigned long conn_requests;   /* $connection_requests (0: not known, empty) */
    bool pipelined;                /* $pipe: "p", else "." */
    /* The trailer lines made so far ("Name: value\r\n" each), for $sent_trailer_NAME;
     * NULL: none. */
    const char *trailers;
    size_t trailers_len;
    uint32_t conn_number;          /* $connection (0: not known, empty) */
    int64_t conn_opened_ms;        /* $connection_time: the connection's accept (clock_now_ms);
                                      0: not known, empty */
    const struct vars_upstream *upstream; /* the proxy's tries (vars_upstream.h); NULL:
                                             not proxied, $upstream_* empty */
    uint64_t body_len; /* the request body's length, read whole: $content_length of a
                          chunked body (as nginx's once it has read it) */
    bool body_streams; /* the body goes on as it arrives: a chunked one's length is not
                          known ($content_length empty, as nginx's while it reads) */
    /* $request_body: the body, or NULL (empty): not read, or longer than nginx keeps in
     * memory (module_vars_source decides) */
    const char *request_body;
    size_t request_body_len;
    /* $limit_req_status, $limit_conn_status: enum request_limit_status (module.h) */
    unsigned char limit_req_status, limit_conn_status;
};

/* Declare $name[0, len) as one that `set` gives a value: values compiled afterwards may
 * use it. Process-wide, as nginx's variables are known wherever one is set. Returns the
 * name's index (the same for the same name in any case, from 0 up, never reused), which
 * user_var is given; -1: a built-in variable's name, not a name, or too many. */
int vars_declare(const char *name, size_t len);

#define VARS_REQUEST_ID_SIZE 33 /* 32 hex digits and a NUL */

struct vars_value; /* opaque: one allocation, read-only once compiled */

/* Compile text into *out (which the caller frees with vars_free). Returns 0, or -1 with
 * the reason in msg: an unknown variable, "$" not followed by a name, "${name" unclosed,
 * or, in header context, a control byte in the literal text. */
int vars_compile(const char *text, enum vars_context ctx, struct vars_value **out, char *msg,
                 size_t msg_len);
void vars_free(struct vars_value *v);

/* Every variable, one a line: NAME (a family as "http_NAME"), a tab, its documentation;
 * what docs/reference/variables.md is generated from. */
void vars_dump(FILE *out);

/* A request's $request_id in id (33 bytes, "" until made): made now if it was not yet. */
const char *vars_request_id(char *id);

/* Does the value use any variable? (If not, it expands to the same text every time.) */
bool vars_is_constant(const struct vars_value *v);

/* The text a value without variables expands to (in any context: only what a variable
 * brings is escaped), NUL-ended, its length in *len; NULL when it has a variable. */
const char *vars_constant(const struct vars_value *v, size_t *len);

/* Expand v for src into out (capacity cap, NUL written). Returns the length, or -1 if the
 * result (with its NUL) does not fit: nothing longer than cap is ever written. */
long vars_expand(const struct vars_value *v, const struct vars_source *src, char *out,
                 size_t cap);

#endif
