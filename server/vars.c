/* vars.c — compiling configuration values with variables, and expanding them per request.
 * See vars.h for the variables and the escaping. */
#include "vars.h"

#include "clock.h"

#include <arpa/inet.h>
#include <assert.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/un.h>
#include <time.h>
#include "vars_upstream.h"

enum var_id {
    VAR_LITERAL = 0,
    VAR_URI,
    VAR_REQUEST_URI,
    VAR_ARGS,
    VAR_QUERY_STRING,
    VAR_IS_ARGS,
    VAR_DOCUMENT_URI,
    VAR_CONTENT_TYPE,
    VAR_CONTENT_LENGTH,
    VAR_SERVER_PROTOCOL,
    VAR_NGINX_VERSION,
    VAR_HOST,
    VAR_SCHEME,
    VAR_HTTPS,
    VAR_REMOTE_ADDR,
    VAR_BINARY_REMOTE_ADDR,
    VAR_LIMIT_REQ_STATUS,
    VAR_LIMIT_CONN_STATUS,
    VAR_REQUEST_METHOD,
    VAR_SERVER_PORT,
    VAR_REMOTE_PORT,
    VAR_CONNECTIONS_ACTIVE,
    VAR_CONNECTIONS_READING,
    VAR_CONNECTIONS_WRITING,
    VAR_CONNECTIONS_WAITING,
    VAR_REALIP_REMOTE_ADDR,
    VAR_REALIP_REMOTE_PORT,
    VAR_PROXY_PROTOCOL_ADDR,
    VAR_PROXY_PROTOCOL_PORT,
    VAR_PROXY_PROTOCOL_SERVER_ADDR,
    VAR_PROXY_PROTOCOL_SERVER_PORT,
    VAR_SERVER_ADDR,
    VAR_SERVER_NAME,
    VAR_REQUEST_ID,
    VAR_PROXY_HOST,
    VAR_PROXY_PORT,
    VAR_PROXY_ADD_XFF,
    /* the answer's and the time's, for the access log */
    VAR_STATUS,
    VAR_BODY_BYTES_SENT,
    VAR_BYTES_SENT,
    VAR_REQUEST,
    VAR_MSEC,
    VAR_TIME_LOCAL,
    VAR_TIME_ISO8601,
    VAR_REMOTE_USER,
    VAR_REQUEST_TIME,
    VAR_REQUEST_LENGTH,
    VAR_REQUEST_BODY,
    VAR_CONNECTION_REQUESTS,
    VAR_CONNECTION,
    VAR_CONNECTION_TIME,
    VAR_PIPE,
    /* the proxy's tries (vars_upstream.h) */
    VAR_UPSTREAM_ADDR,
    VAR_UPSTREAM_STATUS,
    VAR_UPSTREAM_RESPONSE_TIME,
    VAR_UPSTREAM_CONNECT_TIME,
    VAR_UPSTREAM_HEADER_TIME,
    VAR_UPSTREAM_RESPONSE_LENGTH,
    VAR_UPSTREAM_BYTES_RECEIVED,
    VAR_UPSTREAM_BYTES_SENT,
    VAR_UPSTREAM_CACHE_STATUS,
    VAR_UPSTREAM_HTTP, /* $upstream_http_NAME: as $http_NAME's */
    VAR_UPSTREAM_COOKIE, /* $upstream_cookie_NAME: the part's name is NAME */
    /* the connection's TLS (vars_tls, in its order) */
    VAR_SSL_PROTOCOL,
    VAR_SSL_CIPHER,
    VAR_SSL_CIPHERS,
    VAR_SSL_CURVE,
    VAR_SSL_CURVES,
    VAR_SSL_SERVER_NAME,
    VAR_SSL_SESSION_REUSED,
    VAR_SSL_SESSION_ID,
    VAR_SSL_EARLY_DATA,
    VAR_SSL_CLIENT_VERIFY,
    VAR_SSL_CLIENT_S_DN,
    VAR_SSL_CLIENT_I_DN,
    VAR_SSL_CLIENT_SERIAL,
    VAR_SSL_CLIENT_FINGERPRINT,
    VAR_SSL_CLIENT_CERT,
    VAR_SSL_CLIENT_ESCAPED_CERT,
    VAR_SSL_CLIENT_RAW_CERT,
    VAR_SSL_CLIENT_V_START,
    VAR_SSL_CLIENT_V_END,
    VAR_SSL_CLIENT_V_REMAIN,
    VAR_SSL_CLIENT_S_DN_LEGACY,
    VAR_SSL_CLIENT_I_DN_LEGACY,
    VAR_DOCUMENT_ROOT,
    VAR_REALPATH_ROOT,
    VAR_INVALID_REFERER,
    VAR_SECURE_LINK,
    VAR_SECURE_LINK_EXPIRES,
    VAR_FASTCGI_SCRIPT_NAME,
    VAR_FASTCGI_PATH_INFO,
    VAR_REQUEST_FILENAME,
    VAR_HTTP,   /* $http_NAME: the part's name is NAME, '_' made '-' */
    VAR_SENT_HTTP, /* $sent_http_NAME: a field of the answer, as $http_NAME's */
    VAR_SENT_TRAILER, /* $sent_trailer_NAME: a trailer made before, as $http_NAME's */
    VAR_COOKIE, /* $cookie_NAME */
    VAR_ARG,    /* $arg_NAME */
    VAR_CAPTURE,       /* $1..$9: the part's name is the digit */
    VAR_CAPTURE_NAMED, /* $NAME of a regex's (?<NAME>...) */
    VAR_USER,          /* $NAME of a `set $NAME`: the part's name is NAME */
};

/* Each variable with its line of the reference (lfhttpd --variables,
 * docs/reference/variables.md). */
static const struct {
    const char *name;
    enum var_id id;
    const char *doc;
} var_names[] = {
    {"uri", VAR_URI, "The decoded, normalized path (`/ex%61ct` and `/a/../exact` are "
     "`/exact`); of a directory's index, the directory's path (nginx's index is an internal "
     "redirect to the file)."},
    {"request_uri", VAR_REQUEST_URI, "The target as sent, from its path on: an absolute-form "
     "target's scheme and authority left out, and its empty path `/` (`GET http://a?x=1` "
     "gives `/?x=1`, where nginx 1.22 gives `?x=1`)."},
    {"args", VAR_ARGS, "The query string, without the `?`."},
    {"query_string", VAR_QUERY_STRING, "The same as `$args`."},
    {"is_args", VAR_IS_ARGS, "`?` when the request has arguments (`$args` is not empty), "
     "else empty: `$uri$is_args$args`."},
    {"document_uri", VAR_DOCUMENT_URI, "The same as `$uri`."},
    {"content_type", VAR_CONTENT_TYPE, "The request's `Content-Type` field."},
    {"content_length", VAR_CONTENT_LENGTH, "The request's `Content-Length` field; of a "
     "chunked body, its decoded length once it was read whole, empty before (a body streamed "
     "with `*_request_buffering off` that the answer cut short stays empty), as nginx's."},
    {"server_protocol", VAR_SERVER_PROTOCOL, "The request's protocol: `HTTP/1.0` or "
     "`HTTP/1.1`."},
    {"nginx_version", VAR_NGINX_VERSION, "The version of nginx whose configuration language "
     "and behaviour lfhttpd follows (`1.22.1`), for the files that name it (`fastcgi.conf`'s "
     "`SERVER_SOFTWARE`)."},
    {"host", VAR_HOST, "The Host, lowercase, without port or trailing dot (the authority of "
     "an absolute-form target wins over the Host field); without a Host, the server's name."},
    {"scheme", VAR_SCHEME, "`http`, or `https` on a TLS address."},
    {"https", VAR_HTTPS, "`on` on a TLS connection, else empty."},
    {"remote_addr", VAR_REMOTE_ADDR, "The client's address."},
    {"binary_remote_addr", VAR_BINARY_REMOTE_ADDR, "The client's address in binary form: 4 "
     "bytes for IPv4, 16 for IPv6 (the usual key of `limit_req_zone` and `limit_conn_zone`)."},
    {"limit_req_status", VAR_LIMIT_REQ_STATUS, "What `limit_req` made of the request: "
     "`PASSED`, `DELAYED`, `REJECTED`, `DELAYED_DRY_RUN` or `REJECTED_DRY_RUN`; empty when "
     "no limit applied."},
    {"limit_conn_status", VAR_LIMIT_CONN_STATUS, "What `limit_conn` made of the request: "
     "`PASSED`, `REJECTED` or `REJECTED_DRY_RUN`; empty when no limit applied."},
    /* the connection's TLS, each empty on a plain connection */
    {"ssl_protocol", VAR_SSL_PROTOCOL, "The TLS version (`TLSv1.3`)."},
    {"ssl_cipher", VAR_SSL_CIPHER, "The cipher suite, OpenSSL's name "
     "(`TLS_AES_256_GCM_SHA384`)."},
    {"ssl_ciphers", VAR_SSL_CIPHERS, "The suites the client offered, joined with `:`, an "
     "unknown one as `0x` and its hex."},
    {"ssl_curve", VAR_SSL_CURVE, "The key exchange's group (`X25519`, `prime256v1`)."},
    {"ssl_curves", VAR_SSL_CURVES, "The groups the client offered, joined with `:`."},
    {"ssl_server_name", VAR_SSL_SERVER_NAME, "The name the client sent by SNI."},
    {"ssl_session_reused", VAR_SSL_SESSION_REUSED, "`r` when the session was resumed, "
     "else `.`."},
    {"ssl_session_id", VAR_SSL_SESSION_ID, "The session's ID, lowercase hex."},
    {"ssl_early_data", VAR_SSL_EARLY_DATA, "Empty: early data (0-RTT) is not accepted."},
    {"ssl_client_verify", VAR_SSL_CLIENT_VERIFY, "The client certificate's check: "
     "`SUCCESS`, `FAILED:REASON` (OpenSSL's words), or `NONE` without one."},
    {"ssl_client_s_dn", VAR_SSL_CLIENT_S_DN, "The client certificate's subject, RFC 2253 "
     "(`CN=alice,O=Example`)."},
    {"ssl_client_i_dn", VAR_SSL_CLIENT_I_DN, "The client certificate's issuer, RFC 2253."},
    {"ssl_client_serial", VAR_SSL_CLIENT_SERIAL, "The client certificate's serial number, "
     "uppercase hex."},
    {"ssl_client_fingerprint", VAR_SSL_CLIENT_FINGERPRINT, "The client certificate's SHA-1 "
     "fingerprint, lowercase hex."},
    {"ssl_client_cert", VAR_SSL_CLIENT_CERT, "The client certificate in PEM, each line but "
     "the first begun with a tab, the last newline left out (deprecated, as in nginx)."},
    {"ssl_client_escaped_cert", VAR_SSL_CLIENT_ESCAPED_CERT, "The client certificate in PEM, "
     "percent-encoded as a URI component."},
    {"ssl_client_raw_cert", VAR_SSL_CLIENT_RAW_CERT, "The client certificate in PEM."},
    {"ssl_client_v_start", VAR_SSL_CLIENT_V_START, "The client certificate's start date "
     "(`Nov 27 18:00:00 2026 GMT`)."},
    {"ssl_client_v_end", VAR_SSL_CLIENT_V_END, "The client certificate's end date."},
    {"ssl_client_v_remain", VAR_SSL_CLIENT_V_REMAIN, "Days until the client certificate "
     "expires (0 once it has)."},
    {"ssl_client_s_dn_legacy", VAR_SSL_CLIENT_S_DN_LEGACY, "The client certificate's "
     "subject in OpenSSL's older form (`/C=US/O=Example/CN=alice`)."},
    {"ssl_client_i_dn_legacy", VAR_SSL_CLIENT_I_DN_LEGACY, "The client certificate's issuer "
     "in OpenSSL's older form."},
    {"request_method", VAR_REQUEST_METHOD, "The request's method."},
    {"server_port", VAR_SERVER_PORT, "The port the connection came in on."},
    {"remote_port", VAR_REMOTE_PORT, "The client's port (empty when `real_ip_header` named "
     "an address without one)."},
    {"connections_active", VAR_CONNECTIONS_ACTIVE, "Open connections now, as stub_status's "
     "`Active connections`."},
    {"connections_reading", VAR_CONNECTIONS_READING, "Connections reading a request head, as "
     "stub_status's `Reading`."},
    {"connections_writing", VAR_CONNECTIONS_WRITING, "Connections answering (the one asking "
     "included), as stub_status's `Writing`."},
    {"connections_waiting", VAR_CONNECTIONS_WAITING, "Idle connections, as stub_status's "
     "`Waiting`."},
    {"realip_remote_addr", VAR_REALIP_REMOTE_ADDR, "The connection's own address, before "
     "`set_real_ip_from` replaced it."},
    {"realip_remote_port", VAR_REALIP_REMOTE_PORT, "The connection's own port, before "
     "`set_real_ip_from` replaced it."},
    {"proxy_protocol_addr", VAR_PROXY_PROTOCOL_ADDR, "The client's address from the PROXY "
     "protocol header (`listen ... proxy_protocol`); else empty."},
    {"proxy_protocol_port", VAR_PROXY_PROTOCOL_PORT, "The client's port from the PROXY "
     "protocol header; else empty."},
    {"proxy_protocol_server_addr", VAR_PROXY_PROTOCOL_SERVER_ADDR, "The server's address "
     "from the PROXY protocol header; else empty."},
    {"proxy_protocol_server_port", VAR_PROXY_PROTOCOL_SERVER_PORT, "The server's port from "
     "the PROXY protocol header; else empty."},
    {"server_addr", VAR_SERVER_ADDR, "The local address the connection came in on."},
    {"server_name", VAR_SERVER_NAME, "The server block's first name, as written."},
    {"request_id", VAR_REQUEST_ID, "32 hex digits, random, made on first use, one per "
     "request through internal redirects."},
    {"proxy_host", VAR_PROXY_HOST, "The upstream's name, or `HOST:PORT`, as `proxy_pass` "
     "names it (the default `Host` of a proxied request); empty when not proxying."},
    {"proxy_port", VAR_PROXY_PORT, "The upstream's port; empty when not proxying."},
    {"fastcgi_script_name", VAR_FASTCGI_SCRIPT_NAME, "`$uri`, or the first group of the "
     "block's `fastcgi_split_path_info` when it matches, with `fastcgi_index` appended when "
     "it ends in `/`."},
    {"fastcgi_path_info", VAR_FASTCGI_PATH_INFO, "The second group of the block's "
     "`fastcgi_split_path_info` when it matches `$uri`, else empty."},
    {"proxy_add_x_forwarded_for", VAR_PROXY_ADD_XFF, "The client's `X-Forwarded-For` list "
     "(every field joined with `, `) with its address appended."},
    /* the answer's and the time's, expanded when the access-log line is written */
    {"status", VAR_STATUS, "The response's status (in an access-log line; else empty)."},
    {"body_bytes_sent", VAR_BODY_BYTES_SENT, "The response body's bytes (in an access-log "
     "line; else empty)."},
    {"bytes_sent", VAR_BYTES_SENT, "The response's bytes, head and body (in an access-log "
     "line; else empty)."},
    {"request", VAR_REQUEST, "The request line as sent (`GET /x HTTP/1.1`)."},
    {"msec", VAR_MSEC, "The time, in seconds with milliseconds (`1795888800.123`)."},
    {"time_local", VAR_TIME_LOCAL, "The local time in the Common Log Format "
     "(`27/Nov/2026:18:00:00 +0000`)."},
    {"time_iso8601", VAR_TIME_ISO8601, "The local time in ISO 8601 "
     "(`2026-11-27T18:00:00+00:00`)."},
    {"remote_user", VAR_REMOTE_USER, "Empty: the user of basic authentication is not kept "
     "(an access-log line shows `-`)."},
    {"request_time", VAR_REQUEST_TIME, "Seconds with milliseconds from the request's start "
     "(its head read; a `limit_req` delay counts) to the answer in an access-log line, "
     "to now elsewhere (`add_header`), as nginx's."},
    {"request_length", VAR_REQUEST_LENGTH, "The request's bytes, as nginx counts them: its "
     "head, and the body's bytes as sent (a chunked body's framing too) when the block's "
     "handler reads it (`proxy_pass`, `fastcgi_pass`, CGI); a body skipped (a `return`, a "
     "file) is not counted. In `add_header` and the access log."},
    {"request_body", VAR_REQUEST_BODY, "The request's body (decoded, if chunked), as nginx's: "
     "where the block's handler reads it (`proxy_pass`, `fastcgi_pass`, CGI, `echo`), once "
     "read (and in an `error_page` after it), when it is no longer than the block's "
     "`client_body_buffer_size` (nginx keeps such a body in memory, where the variable "
     "finds it, and a longer one in a file); else empty (a `return`, a file, a body that "
     "is skipped)."},
    {"connection_time", VAR_CONNECTION_TIME, "Seconds, with milliseconds, since the "
     "request's connection was accepted (`1.204`), as nginx's."},
    {"pipe", VAR_PIPE, "`p` when the request was pipelined (its bytes came with the "
     "request's before it), else `.`."},
    {"connection_requests", VAR_CONNECTION_REQUESTS, "The request's number on its connection, "
     "from 1."},
    {"connection", VAR_CONNECTION, "The connection's serial number, from 1 for the first "
     "connection accepted since start, as nginx's (it wraps after 2^32 connections)."},
    /* the proxy's, one entry a try (the first, then each proxy_next_upstream makes) */
    {"upstream_addr", VAR_UPSTREAM_ADDR, "The upstream servers tried, `HOST:PORT` each, "
     "joined with `, ` (`127.0.0.1:8081, 127.0.0.1:8082`); the upstream's name when no "
     "server was left; empty when not proxied, as every `$upstream_` variable."},
    {"upstream_status", VAR_UPSTREAM_STATUS, "Each try's answer status (`502, 200`); 502, "
     "or 504 after a timeout, for a try that got none."},
    {"upstream_response_time", VAR_UPSTREAM_RESPONSE_TIME, "Each try's time, from its start "
     "to the answer's end, in seconds with milliseconds (`0.004`); `-` while the answer "
     "goes (in `add_header`)."},
    {"upstream_connect_time", VAR_UPSTREAM_CONNECT_TIME, "Each try's time to connect "
     "(`0.000` on a kept connection), seconds with milliseconds; `-` if it never did."},
    {"upstream_header_time", VAR_UPSTREAM_HEADER_TIME, "Each try's time to the answer's "
     "whole head, seconds with milliseconds; `-` without one."},
    {"upstream_response_length", VAR_UPSTREAM_RESPONSE_LENGTH, "Each try's answer body "
     "bytes as received (0 without an answer)."},
    {"upstream_bytes_received", VAR_UPSTREAM_BYTES_RECEIVED, "Each try's bytes received "
     "from the upstream, head and body."},
    {"upstream_bytes_sent", VAR_UPSTREAM_BYTES_SENT, "Each try's bytes sent to the "
     "upstream, request head and body."},
    {"upstream_cache_status", VAR_UPSTREAM_CACHE_STATUS, "Never set, as nginx's without "
     "`proxy_cache` (there is no cache): empty, `-` in a log line."},
    {"document_root", VAR_DOCUMENT_ROOT, "The `root` or `alias` that serves the request, "
     "its variables expanded (a root's trailing `/` left out, as nginx's)."},
    {"secure_link", VAR_SECURE_LINK, "`1` when the link's hash (`secure_link`, "
     "`secure_link_md5`) is right and it has not expired, `0` when it has expired, else "
     "empty; with `secure_link_secret`, the link when its hash is right."},
    {"secure_link_expires", VAR_SECURE_LINK_EXPIRES, "The expiry `secure_link` names (after "
     "its comma)."},
    {"invalid_referer", VAR_INVALID_REFERER, "Empty when the `Referer` field is valid for "
     "the block's `valid_referers` (or it has none), else `1`."},
    {"realpath_root", VAR_REALPATH_ROOT, "The real path of `$document_root` (symlinks "
     "resolved); empty when it does not exist."},
    {"request_filename", VAR_REQUEST_FILENAME, "The file the request names: the root and "
     "the path, or the alias and what follows the location's prefix (in a regex location, "
     "the alias alone), as nginx's."},
};

/* Families of variables named by a prefix and what follows it, as nginx's. */
static const struct {
    const char *prefix;
    enum var_id id;
    const char *doc;
} var_prefixes[] = {
    {"http_", VAR_HTTP, "A request header field, as nginx 1.22 reads them: NAME in lowercase "
     "with `_` for `-`; a repeated field's first value, but every `Cookie` joined with `; ` "
     "and every `X-Forwarded-For` with `, `; a field whose name holds `_` never, as nginx "
     "drops those."},
    {"cookie_", VAR_COOKIE, "The value of the cookie NAME, raw."},
    {"sent_http_", VAR_SENT_HTTP, "A field of the answer (NAME as for `http_NAME`), its "
     "first, as it stands where the value is read: in `add_header`, `expires` and `map`s "
     "they read, the fields before those directives' own; in a log line, all of them. "
     "Empty elsewhere, as nginx's before the answer."},
    {"sent_trailer_", VAR_SENT_TRAILER, "A trailer line of the answer (NAME as for "
     "`http_NAME`): in `add_trailer`, one made by an `add_trailer` before; empty "
     "elsewhere."},
    {"upstream_http_", VAR_UPSTREAM_HTTP, "A field of the last upstream try's answer (NAME "
     "as for `http_NAME`), its first, as nginx 1.22; empty without one."},
    {"upstream_cookie_", VAR_UPSTREAM_COOKIE, "The value of the cookie NAME (without "
     "case) that the last upstream try's answer sets in a `Set-Cookie` field, the first "
     "that does, up to its `;`; empty without one, as nginx's."},
    {"arg_", VAR_ARG, "The value of the query parameter NAME, raw."},
};

void vars_dump(FILE *out)
{
    for (size_t i = 0; i < sizeof(var_names) / sizeof(var_names[0]); i++)
        fprintf(out, "%s\t%s\n", var_names[i].name, var_names[i].doc);
    for (size_t i = 0; i < sizeof(var_prefixes) / sizeof(var_prefixes[0]); i++)
        fprintf(out, "%sNAME\t%s\n", var_prefixes[i].prefix, var_prefixes[i].doc);
    fprintf(out, "1\tThrough `$9`: the groups of the regex location that matched (PCRE2); "
                 "without one, of the `server_name ~RE` that chose the server; else empty. "
                 "One digit: `$10` is `$1` then `0`, as nginx's.\n");
    fprintf(out, "NAME\tA variable a `set $NAME` gives a value (empty until set), known "
                 "once any block sets it, as nginx's.\n");
    fprintf(out, "NAME\tA named group `(?<NAME>...)` of those regexes, known once any regex of "
                 "the configuration names it (else an unknown variable), as nginx's.\n");
}

struct vars_part {
    enum var_id id;
    uint32_t off, len; /* in text: a literal's bytes, or a family member's name */
    uint32_t user;     /* VAR_USER: the name's index (vars_declare) */
};

struct vars_value {
    enum vars_context ctx;
    unsigned n_parts;
    struct vars_part *parts; /* inside the same allocation, after text */
    char text[];             /* the literal bytes, in order */
};

/* --- compiling ---------------------------------------------------------------------------- */

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_';
}

/* The variable named name[0..len): its id, and for a family member (http_NAME...) where
 * NAME starts in name and its length. */
static int var_lookup(const char *name, size_t len, enum var_id *id, size_t *arg_at)
{
    *arg_at = len;
    for (size_t i = 0; i < sizeof(var_names) / sizeof(var_names[0]); i++)
        if (strlen(var_names[i].name) == len && strncasecmp(var_names[i].name, name, len) == 0)
            return *id = var_names[i].id, 0;
    for (size_t i = 0; i < sizeof(var_prefixes) / sizeof(var_prefixes[0]); i++) {
        size_t pl = strlen(var_prefixes[i].prefix);
        if ((len > pl || (len == pl && var_prefixes[i].id == VAR_ARG)) &&
            strncasecmp(var_prefixes[i].prefix, name, pl) == 0)
            return *id = var_prefixes[i].id, *arg_at = pl, 0;
    }
    return -1;
}

/* The names `set` declares, process-wide as nginx's (known once any block sets them, and
 * across reloads): a name is added once and never removed. */
#define USER_NAMES_MAX 256
#define USER_VALUE_MAX 2048 /* the longest value of one, with its NUL */
static char *user_names[USER_NAMES_MAX];
static unsigned n_user_names;
static pthread_mutex_t user_lock = PTHREAD_MUTEX_INITIALIZER;

/* The index of name[0, len) among the declared names, or -1. */
static int user_index(const char *name, size_t len)
{
    for (unsigned i = 0; i < n_user_names; i++)
        if (strlen(user_names[i]) == len && strncasecmp(user_names[i], name, len) == 0)
            return (int)i;
    return -1;
}

int vars_declare(const char *name, size_t len)
{
    enum var_id id;
    size_t at;
    if (len == 0 || var_lookup(name, len, &id, &at) == 0)
        return -1;
    for (size_t i = 0; i < len; i++)
        if (!name_char(name[i]))
            return -1;
    pthread_mutex_lock(&user_lock);
    int rc = user_index(name, len);
    if (rc < 0) {
        char *copy = n_user_names < USER_NAMES_MAX ? strndup(name, len) : NULL;
        if (copy) {
            rc = (int)n_user_names;
            user_names[n_user_names++] = copy;
        }
    }
    pthread_mutex_unlock(&user_lock);
    return rc;
}

static int user_known(const char *name, size_t len)
{
    pthread_mutex_lock(&user_lock);
    int i = user_index(name, len);
    pthread_mutex_unlock(&user_lock);
    return i;
}

/* A variable as read from the text: which, the bytes it took, and a family member's
 * name (empty otherwise). */
struct var_ref {
    enum var_id id;
    size_t used;
    const char *arg;
    size_t arg_len;
    unsigned user; /* VAR_USER: the name's index */
};

/* Read the variable at s ("$name" or "${name}"). */
static int read_variable(const char *s, struct var_ref *ref, char *msg, size_t len)
{
    bool braced = s[1] == '{';
    const char *name = s + 1 + braced;
    size_t n = 0, arg_at;
    if (name[0] >= '1' && name[0] <= '9') { /* $1..$9: one digit, as nginx's */
        if (braced && name[1] != '}')
            return snprintf(msg, len, "the closing bracket in \"%c\" variable is missing",
                            name[0]), -1;
        *ref = (struct var_ref){VAR_CAPTURE, 2 + 2 * braced, name, 1, 0};
        return 0;
    }
    while (name_char(name[n]))
        n++;
    if (n == 0)
        return snprintf(msg, len, "invalid variable name after \"$\""), -1;
    if (braced && name[n] != '}')
        return snprintf(msg, len, "the closing bracket in \"%.*s\" variable is missing",
                        (int)n, name), -1;
    int user = -1;
    if (var_lookup(name, n, &ref->id, &arg_at) < 0 && (user = user_known(name, n)) >= 0)
        ref->id = VAR_USER, arg_at = 0, ref->user = (unsigned)user;
    else if (var_lookup(name, n, &ref->id, &arg_at) < 0 && regex_name_known(name, n))
        ref->id = VAR_CAPTURE_NAMED, arg_at = 0;
    else if (var_lookup(name, n, &ref->id, &arg_at) < 0)
        return snprintf(msg, len, "unknown \"%.*s\" variable (known: uri, request_uri, args, "
                        "arg_NAME, host, http_NAME, cookie_NAME, scheme, https, ssl_*, remote_addr, "
                        "remote_port, server_addr, server_port, server_name, "
                        "request_method, request_id, proxy_host, proxy_port, "
                        "proxy_add_x_forwarded_for, status, body_bytes_sent, bytes_sent, "
                        "request, msec, time_local, time_iso8601, remote_user, "
                        "request_time, request_length, request_body, connection_requests)",
                        (int)n, name), -1;
    ref->used = 1 + braced + n + braced;
    ref->arg = name + arg_at;
    ref->arg_len = n - arg_at;
    return 0;
}

static bool is_control(unsigned char c)
{
    return c < 0x20 || c == 0x7f;
}

static void add_literal(struct vars_value *v, uint32_t off, uint32_t len)
{
    if (len > 0)
        v->parts[v->n_parts++] = (struct vars_part){VAR_LITERAL, off, len, 0};
}

int vars_compile(const char *text, enum vars_context ctx, struct vars_value **out, char *msg,
                 size_t msg_len)
{
    size_t len = strlen(text), dollars = 0;
    for (size_t i = 0; i < len; i++) {
        dollars += text[i] == '$';
        if (ctx == VARS_HEADER && is_control((unsigned char)text[i]))
            return snprintf(msg, msg_len, "a control byte (0x%02x) in a header value",
                            (unsigned char)text[i]), -1;
    }
    if (len > UINT32_MAX)
        return snprintf(msg, msg_len, "too long"), -1;
    size_t max_parts = 2 * dollars + 1;
    size_t text_room = (len + 1 + 7) & ~(size_t)7; /* parts after it, aligned */
    struct vars_value *v = malloc(sizeof(*v) + text_room + max_parts * sizeof(v->parts[0]));
    if (!v)
        return snprintf(msg, msg_len, "out of memory"), -1;
    v->ctx = ctx;
    v->n_parts = 0;
    v->parts = (struct vars_part *)(void *)(v->text + text_room);
    size_t lit_start = 0, t = 0; /* literal bytes are packed into v->text from t on */
    for (size_t i = 0; i < len;) {
        if (text[i] != '$') {
            v->text[t++] = text[i++];
            continue;
        }
        struct var_ref ref;
        if (read_variable(text + i, &ref, msg, msg_len) < 0) {
            free(v);
            return -1;
        }
        add_literal(v, (uint32_t)lit_start, (uint32_t)(t - lit_start));
        /* A family member's name goes into text too (never longer than the variable
         * itself): lowercased (but a group's name, which PCRE2 compares with case), and for
         * $http_NAME with '-' for '_', as header names. */
        v->parts[v->n_parts++] = (struct vars_part){ref.id, (uint32_t)t, (uint32_t)ref.arg_len,
                                                    ref.id == VAR_USER ? ref.user : 0};
        for (size_t k = 0; k < ref.arg_len; k++) {
            char c = ref.arg[k];
            if (ref.id != VAR_CAPTURE_NAMED && c >= 'A' && c <= 'Z')
                c = (char)(c + 32);
            v->text[t++] = (ref.id == VAR_HTTP || ref.id == VAR_UPSTREAM_HTTP ||
                            ref.id == VAR_SENT_HTTP || ref.id == VAR_SENT_TRAILER) &&
                                    c == '_' ? '-' : c;
        }
        lit_start = t;
        i += ref.used;
    }
    add_literal(v, (uint32_t)lit_start, (uint32_t)(t - lit_start));
    v->text[t] = '\0';
    *out = v;
    return 0;
}

void vars_free(struct vars_value *v)
{
    free(v);
}

bool vars_is_constant(const struct vars_value *v)
{
    for (unsigned i = 0; i < v->n_parts; i++)
        if (v->parts[i].id != VAR_LITERAL)
            return false;
    return true;
}

const char *vars_constant(const struct vars_value *v, size_t *len)
{
    if (!vars_is_constant(v))
        return NULL;
    *len = v->n_parts ? v->parts[0].len : 0; /* one literal at most: they are merged */
    return v->text;
}

/* --- expanding ---------------------------------------------------------------------------- */

/* Where the bytes go: out[0..cap), n used so far; failed once something did not fit. */
struct sink {
    char *out;
    size_t cap, n;
    bool failed;
    enum vars_context ctx; /* a log context: what is escaped is escaped as a log's */
};

static const char hex_digits[] = "0123456789ABCDEF";

/* How a byte that a variable brings is written into an access-log line (vars.h): into
 * e (at most 6 bytes), its length. */
static size_t log_escape(enum vars_context ctx, unsigned char c, char *e)
{
    static const char upper_hex[] = "0123456789ABCDEF"; /* JSON's \u00XX, as nginx's */
    static const char json_short[0x20] = {['\n'] = 'n', ['\r'] = 'r', ['\t'] = 't',
                                          ['\b'] = 'b', ['\f'] = 'f'};
    if (ctx == VARS_LOG_DEFAULT && (c == '"' || c == '\\' || c < 0x20 || c > 0x7e))
        return e[0] = '\\', e[1] = 'x', e[2] = hex_digits[c >> 4], e[3] = hex_digits[c & 15],
               4;
    if (ctx == VARS_LOG_JSON && (c == '"' || c == '\\'))
        return e[0] = '\\', e[1] = (char)c, 2;
    if (ctx == VARS_LOG_JSON && c < 0x20 && json_short[c])
        return e[0] = '\\', e[1] = json_short[c], 2;
    if (ctx == VARS_LOG_JSON && c < 0x20)
        return memcpy(e, "\\u00", 4), e[4] = upper_hex[c >> 4], e[5] = upper_hex[c & 15], 6;
    e[0] = (char)c;
    return 1;
}

static bool is_log(enum vars_context ctx)
{
    return ctx == VARS_LOG_DEFAULT || ctx == VARS_LOG_JSON || ctx == VARS_LOG_NONE;
}

/* Append p[0..len) into an access-log line, escaped as its context says. */
static void put_log(struct sink *s, const char *p, size_t len, bool lower)
{
    for (size_t i = 0; i < len && !s->failed; i++) {
        char e[6];
        unsigned char c = (unsigned char)p[i];
        size_t n = log_escape(s->ctx, lower && c >= 'A' && c <= 'Z' ? c + 32 : c, e);
        if (s->cap - s->n < n + 1) {
            s->failed = true;
            return;
        }
        memcpy(s->out + s->n, e, n);
        s->n += n;
    }
}

/* Append p[0..len), escaping control bytes in header context and lowercasing if asked. */
static void put(struct sink *s, const char *p, size_t len, bool escape, bool lower)
{
    if (len == 0)
        return; /* p may be NULL then: an empty slice */
    if (escape && is_log(s->ctx))
        return put_log(s, p, len, lower);
    if (!escape && !s->failed) { /* raw bytes: one copy (lowercased after, if asked) */
        if (s->cap - s->n < len + 1) {
            s->failed = true;
            return;
        }
        char *o = s->out + s->n;
        memcpy(o, p, len);
        s->n += len;
        for (size_t i = 0; lower && i < len; i++)
            o[i] = (char)(o[i] >= 'A' && o[i] <= 'Z' ? o[i] + 32 : o[i]);
        return;
    }
    for (size_t i = 0; i < len && !s->failed; i++) {
        unsigned char c = (unsigned char)p[i];
        size_t need = escape && is_control(c) ? 3 : 1;
        if (s->cap - s->n < need + 1) { /* + the NUL */
            s->failed = true;
            return;
        }
        if (need == 3) {
            s->out[s->n++] = '%';
            s->out[s->n++] = hex_digits[c >> 4];
            s->out[s->n++] = hex_digits[c & 15];
        } else {
            s->out[s->n++] = lower && c >= 'A' && c <= 'Z' ? (char)(c + 32) : (char)c;
        }
    }
}

/* Append a NUL-ended string (NULL: nothing). */
static void put_string(struct sink *s, const char *str, bool escape)
{
    if (str)
        put(s, str, strlen(str), escape, false);
}

/* The Host without port or trailing dot (nginx's $host), or the server's name. */
static struct http_slice host_of(const struct vars_source *src)
{
    struct http_slice h = src->http ? src->http->host : (struct http_slice){NULL, 0};
    if (h.len == 0) {
        const char *name = src->server_name ? src->server_name : "";
        return (struct http_slice){name, strlen(name)};
    }
    const char *end = h.p + h.len;
    const char *colon = h.p[0] == '[' ? memchr(h.p, ']', h.len) : h.p;
    colon = colon ? memchr(colon, ':', (size_t)(end - colon)) : NULL;
    if (colon)
        h.len = (size_t)(colon - h.p);
    if (h.len > 1 && h.p[h.len - 1] == '.')
        h.len--;
    return h;
}


/* Text of the address variables, into tmp (at least INET6_ADDRSTRLEN + 8 bytes). */
static size_t remote_addr_of(const struct sockaddr *sa, char *tmp, size_t cap)
{
    const void *a = NULL;
    if (sa && sa->sa_family == AF_INET)
        a = &((const struct sockaddr_in *)(const void *)sa)->sin_addr;
    else if (sa && sa->sa_family == AF_INET6)
        a = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
    if (!a) {
        tmp[0] = '\0';
        return sa && sa->sa_family == AF_UNIX ? (size_t)snprintf(tmp, cap, "unix:") : 0;
    }
    return inet_ntop(sa->sa_family, a, tmp, (socklen_t)cap) ? strlen(tmp) : 0;
}

/* $binary_remote_addr: the address's own bytes (none for a Unix socket). */
static struct http_slice binary_addr_of(const struct sockaddr *sa)
{
    if (sa && sa->sa_family == AF_INET)
        return (struct http_slice){
            (const char *)&((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4};
    if (sa && sa->sa_family == AF_INET6)
        return (struct http_slice){
            (const char *)&((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16};
    return (struct http_slice){"", 0};
}

/* $limit_req_status, $limit_conn_status: enum request_limit_status (module.h) by name. */
static struct http_slice limit_status_of(unsigned status)
{
    static const char *const names[] = {"", "PASSED", "DELAYED", "REJECTED",
                                        "DELAYED_DRY_RUN", "REJECTED_DRY_RUN"};
    const char *n = status < sizeof(names) / sizeof(names[0]) ? names[status] : "";
    return (struct http_slice){n, strlen(n)};
}

/* v in decimal, at least `width` digits (zeros before), in tmp; its length (0: no room).
 * Numbers are written for every logged request: printf's cost is not needed here. */
static size_t decimal(char *tmp, size_t cap, uint64_t v, unsigned width)
{
    if (width == 3 && v < 1000 && cap > 3) { /* a status: three digits, every line */
        tmp[0] = (char)('0' + v / 100);
        tmp[1] = (char)('0' + v / 10 % 10);
        tmp[2] = (char)('0' + v % 10);
        tmp[3] = '\0';
        return 3;
    }
    char d[20];
    unsigned n = 0;
    do {
        d[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n < width && n < sizeof(d))
        d[n++] = '0';
    if (n >= cap)
        return 0;
    for (unsigned i = 0; i < n; i++)
        tmp[i] = d[n - 1 - i];
    tmp[n] = '\0';
    return n;
}

static size_t port_of(const struct sockaddr *sa, char *tmp, size_t cap)
{
    unsigned port;
    if (sa && sa->sa_family == AF_INET)
        port = ntohs(((const struct sockaddr_in *)(const void *)sa)->sin_port);
    else if (sa && sa->sa_family == AF_INET6)
        port = ntohs(((const struct sockaddr_in6 *)(const void *)sa)->sin6_port);
    else
        return 0;
    return port ? decimal(tmp, cap, port, 1) : 0; /* 0: a real_ip_header without a port */
}

/* A listener on 0.0.0.0 or [::]: which address a connection came in on, only its socket
 * knows. */
static bool is_wildcard(const struct sockaddr *sa)
{
    if (sa && sa->sa_family == AF_INET)
        return ((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr == INADDR_ANY;
    if (sa && sa->sa_family == AF_INET6)
        return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr);
    return false;
}

/* $server_addr: the listener's address, or behind a wildcard one the socket's (a system
 * call, paid only by a value that uses it, as nginx's). */
static size_t server_addr_of(const struct vars_source *src, char *tmp, size_t cap)
{
    const struct sockaddr *sa = src->local;
    if (sa && sa->sa_family == AF_UNIX) { /* the listener's path, as nginx's "unix:PATH" */
        const struct sockaddr_un *un = (const void *)sa;
        int n = snprintf(tmp, cap, "unix:%.*s", (int)sizeof(un->sun_path), un->sun_path);
        return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (is_wildcard(sa) && src->local_fd > 0 &&
        getsockname(src->local_fd, (struct sockaddr *)&ss, &sl) == 0)
        sa = (const struct sockaddr *)&ss;
    return remote_addr_of(sa, tmp, cap);
}

/* --- $request_id ---------------------------------------------------------------------- */

/* Random bytes for ids: a thread's own batch, refilled from getrandom 16 ids at a time
 * (no lock, one system call per 16 ids). The kernel's generator rather than a fast one
 * seeded from it: ids go out in headers, and a fast generator's state can be worked back
 * from a few of its outputs, so a client could foretell the next ids (nginx takes them
 * from OpenSSL's RAND_bytes). 256 bytes: getrandom never returns fewer. */
#define ID_BATCH 256
static _Thread_local struct {
    unsigned char bytes[ID_BATCH];
    unsigned used;
    uint64_t fallback; /* without getrandom (seccomp, old kernels): splitmix64's state */
} id_pool = {.used = ID_BATCH};

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static void id_pool_fill(void)
{
    id_pool.used = 0;
    if (getrandom(id_pool.bytes, ID_BATCH, 0) == ID_BATCH)
        return;
    if (id_pool.fallback == 0) { /* unique enough: this thread's address and the time */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        id_pool.fallback = (uint64_t)(uintptr_t)&id_pool ^ (uint64_t)ts.tv_nsec ^
                           ((uint64_t)ts.tv_sec << 32);
    }
    for (unsigned i = 0; i < ID_BATCH; i += 8) {
        uint64_t r = splitmix64(&id_pool.fallback);
        memcpy(id_pool.bytes + i, &r, 8);
    }
}

/* The request's id, made on its first use. */
static struct http_slice request_id_of(char *id)
{
    static const char hex[] = "0123456789abcdef";
    if (!id)
        return (struct http_slice){"", 0};
    if (id[0] == '\0') {
        if (id_pool.used + 16 > ID_BATCH)
            id_pool_fill();
        const unsigned char *b = id_pool.bytes + id_pool.used;
        for (unsigned i = 0; i < 16; i++) {
            id[2 * i] = hex[b[i] >> 4];
            id[2 * i + 1] = hex[b[i] & 15];
        }
        id[32] = '\0';
        id_pool.used += 16;
    }
    return (struct http_slice){id, 32};
}

const char *vars_request_id(char *id)
{
    request_id_of(id);
    return id;
}

/* --- the request's fields ----------------------------------------------------------------- */

/* Is h the field name[0..len) (lowercase, '-' where the variable had '_')? A field name
 * with '_' never is: nginx drops such fields by default. */
static bool header_named(const struct http_header *h, const char *name, size_t len)
{
    return h->name.len == len && strncasecmp(h->name.p, name, len) == 0;
}

/* $http_NAME: the first field NAME, or for Cookie and X-Forwarded-For all of them, joined
 * as nginx 1.22 joins them. Returns whether the request has the field at all. */
static bool put_header(struct sink *s, const struct http_request *h, const char *name,
                       size_t len, bool esc)
{
    const char *sep = NULL;
    if (len == 6 && memcmp(name, "cookie", 6) == 0)
        sep = "; ";
    else if (len == 15 && memcmp(name, "x-forwarded-for", 15) == 0)
        sep = ", ";
    bool found = false;
    for (unsigned i = 0; h && i < h->n_headers; i++) {
        if (!header_named(&h->headers[i], name, len))
            continue;
        if (found && !sep)
            break;
        if (found)
            put(s, sep, 2, false, false);
        put(s, h->headers[i].value.p, h->headers[i].value.len, esc, false);
        found = true;
    }
    return found;
}

/* The value of cookie name[0..len) in one Cookie field, read as nginx reads it: pairs
 * separated by ';' or ',', the name compared in any case, spaces around '=' skipped, the
 * value running to the next ';'. */
static bool cookie_in(struct http_slice f, const char *name, size_t len, struct http_slice *v)
{
    const char *p = f.p, *end = f.p + f.len;
    while (p < end) {
        if ((size_t)(end - p) >= len && strncasecmp(p, name, len) == 0) {
            const char *q = p + len;
            while (q < end && *q == ' ')
                q++;
            if (q < end && *q == '=') {
                q++;
                while (q < end && *q == ' ')
                    q++;
                const char *e = memchr(q, ';', (size_t)(end - q));
                *v = (struct http_slice){q, (size_t)((e ? e : end) - q)};
                return true;
            }
        }
        while (p < end && *p != ';' && *p != ',')
            p++;
        if (p < end)
            p++; /* the separator */
        while (p < end && *p == ' ')
            p++;
    }
    return false;
}

static struct http_slice cookie_of(const struct http_request *h, const char *name, size_t len)
{
    struct http_slice v = {"", 0};
    for (unsigned i = 0; h && i < h->n_headers; i++)
        if (header_named(&h->headers[i], "cookie", 6) &&
            cookie_in(h->headers[i].value, name, len, &v))
            break;
    return v;
}

/* $arg_NAME: the value of the first "NAME=" argument (any case), up to the next '&'. */
static struct http_slice arg_of(struct http_slice q, const char *name, size_t len)
{
    if (q.len == 0 || len == 0) /* $arg_: nginx's is always empty, even for "?=x" */
        return (struct http_slice){"", 0};
    const char *p = q.p, *end = q.p + q.len;
    while (p && p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *e = amp ? amp : end;
        if ((size_t)(e - p) > len && p[len] == '=' && strncasecmp(p, name, len) == 0)
            return (struct http_slice){p + len + 1, (size_t)(e - p - len - 1)};
        p = amp ? amp + 1 : NULL;
    }
    return (struct http_slice){"", 0};
}

/* --- the answer's and the time's (the access log) ---------------------------------------- */

/* The time now in a log's formats: cached per thread per second, as localtime_r is not
 * free. */
static size_t time_text(enum var_id id, char *out, size_t cap)
{
    static _Thread_local time_t cached_s = -1;
    static _Thread_local char local[40], iso[40];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (id == VAR_MSEC)
        return (size_t)snprintf(out, cap, "%lld.%03ld", (long long)ts.tv_sec,
                                ts.tv_nsec / 1000000);
    if (ts.tv_sec != cached_s) {
        struct tm tm;
        localtime_r(&ts.tv_sec, &tm);
        strftime(local, sizeof(local), "%d/%b/%Y:%H:%M:%S %z", &tm);
        size_t n = strftime(iso, sizeof(iso), "%Y-%m-%dT%H:%M:%S%z", &tm);
        if (n >= 2) { /* +0000 -> +00:00, as nginx's */
            memmove(iso + n - 1, iso + n - 2, 3);
            iso[n - 2] = ':';
        }
        cached_s = ts.tv_sec;
    }
    return (size_t)snprintf(out, cap, "%s", id == VAR_TIME_LOCAL ? local : iso);
}

static struct http_slice log_var_of(enum var_id id, const struct vars_source *src, char *tmp,
                                    size_t cap)
{
    const struct http_request *h = src->http;
    struct http_slice v = {tmp, 0};
    switch (id) {
    case VAR_STATUS:
        if (src->answered)
            v.len = decimal(tmp, cap, src->status > 0 ? (uint64_t)src->status : 0, 3);
        break;
    case VAR_BODY_BYTES_SENT:
    case VAR_BYTES_SENT:
        if (src->answered)
            v.len = decimal(tmp, cap, src->body_bytes +
                            (id == VAR_BYTES_SENT ? src->head_bytes : 0), 1);
        break;
    case VAR_REQUEST: /* from the method to the version: " HTTP/1.x" after the target */
        if (h && h->method_name.len && h->target.len)
            v = (struct http_slice){h->method_name.p,
                                    (size_t)(h->target.p + h->target.len + 9 -
                                             h->method_name.p)};
        break;
    case VAR_MSEC:
    case VAR_TIME_LOCAL:
    case VAR_TIME_ISO8601: v.len = time_text(id, tmp, cap); break;
    case VAR_REQUEST_TIME: { /* before the answer (add_header): until now, as nginx's */
        int64_t now_us = src->answered ? src->now_us : clock_now_us();
        int64_t ms = now_us > src->start_us ? (now_us - src->start_us) / 1000 : 0;
        if ((src->answered || src->start_us) && cap > 24) {
            v.len = decimal(tmp, cap, (uint64_t)(ms / 1000), 1);
            tmp[v.len++] = '.';
            v.len += decimal(tmp + v.len, cap - v.len, (uint64_t)(ms % 1000), 3);
        }
        break;
    }
    case VAR_REQUEST_LENGTH: /* 0: not a request's (a stream's log line) */
        if (src->answered || src->request_length)
            v.len = decimal(tmp, cap, src->request_length, 1);
        break;
    case VAR_CONNECTION_REQUESTS:
        if (src->conn_requests)
            v.len = decimal(tmp, cap, src->conn_requests, 1);
        break;
    case VAR_CONNECTION:
        if (src->conn_number)
            v.len = decimal(tmp, cap, src->conn_number, 1);
        break;
    case VAR_CONNECTION_TIME: {
        int64_t ms = src->conn_opened_ms ? clock_now_ms() - src->conn_opened_ms : -1;
        if (ms >= 0 && cap > 24) {
            v.len = decimal(tmp, cap, (uint64_t)(ms / 1000), 1);
            tmp[v.len++] = '.';
            v.len += decimal(tmp + v.len, cap - v.len, (uint64_t)(ms % 1000), 3);
        }
        break;
    }
    default: break;
    }
    return v;
}

/* The part's name (a family member's), in the value's text. */
struct part_name {
    const char *p;
    size_t len;
    unsigned user; /* VAR_USER: the name's index (vars_declare) */
};

/* A `set` or `map` variable: its value written here first (a map's is made when read). */
__attribute__((noinline)) static void put_user(struct sink *s, unsigned user,
                                               const struct vars_source *src, bool esc)
{
    char value[USER_VALUE_MAX];
    long n = src->user_var ? src->user_var(src, user, value, sizeof(value)) : 0;
    if (n < 0)
        s->failed = true;
    else if (n > 0)
        put(s, value, (size_t)n, esc, false);
}

static_assert(VAR_UPSTREAM_BYTES_SENT - VAR_UPSTREAM_ADDR == VARS_UPSTREAM_BYTES_SENT,
              "the $upstream_* ids follow vars_upstream_field's order");

/* An $upstream_* value of the proxy's tries: written here first (several tries' may be
 * long). */
__attribute__((noinline)) static void put_upstream(struct sink *s, enum var_id id,
                                                   struct part_name nm,
                                                   const struct vars_source *src, bool esc)
{
    if (id == VAR_UPSTREAM_HTTP) {
        bool found;
        struct http_slice v = vars_upstream_header(src->upstream, nm.p, nm.len, &found);
        put(s, v.p, v.len, esc, false);
        return;
    }
    if (id == VAR_UPSTREAM_COOKIE) {
        struct http_slice v = vars_upstream_cookie(src->upstream, nm.p, nm.len);
        put(s, v.p, v.len, esc, false);
        return;
    }
    if (id == VAR_UPSTREAM_CACHE_STATUS)
        return;
    char value[VARS_UPSTREAM_TRIES * 64];
    long n = vars_upstream_format(src->upstream,
                                  (enum vars_upstream_field)(id - VAR_UPSTREAM_ADDR), value,
                                  sizeof(value));
    if (n < 0)
        s->failed = true;
    else
        put(s, value, (size_t)n, esc, false);
}

/* $document_root, $realpath_root, $request_filename: the request's file, asked of the
 * router. */
__attribute__((noinline)) static void put_path(struct sink *s, enum vars_path which,
                                               const struct vars_source *src, bool esc)
{
    char value[4096];
    long n = src->path_var ? src->path_var(src->user_vars, (int)which, value, sizeof(value))
                           : 0;
    if (n < 0)
        s->failed = true;
    else if (n > 0)
        put(s, value, (size_t)n, esc, false);
}

static_assert(VAR_SSL_CLIENT_I_DN_LEGACY - VAR_SSL_PROTOCOL == VARS_SSL_CLIENT_I_DN_LEGACY,
              "vars_tls follows the $ssl_ ids");

/* $ssl_*: the connection's, asked of the TLS layer. */
__attribute__((noinline)) static void put_tls(struct sink *s, enum var_id id,
                                              const struct vars_source *src, bool esc)
{
    char value[8192];
    if (!src->tls || !src->tls_var)
        return;
    long n = src->tls_var(src->tls, (int)(id - VAR_SSL_PROTOCOL), value, sizeof(value));
    if (n < 0)
        s->failed = true;
    else if (n > 0)
        put(s, value, (size_t)n, esc, false);
}

/* The value of the trailer line name (lowercase, '-') among src's, or empty. */
static struct http_slice trailer_of(const struct vars_source *src, const char *name,
                                    size_t len)
{
    const char *p = src->trailers, *end = p ? p + src->trailers_len : NULL;
    while (p && p < end) {
        const char *eol = memchr(p, '\r', (size_t)(end - p));
        if (!eol)
            break;
        if ((size_t)(eol - p) > len + 1 && p[len] == ':' && strncasecmp(p, name, len) == 0) {
            const char *v = p + len + 1;
            while (v < eol && *v == ' ')
                v++;
            return (struct http_slice){v, (size_t)(eol - v)};
        }
        p = eol + 2;
    }
    return (struct http_slice){"", 0};
}

static void put_variable(struct sink *s, enum var_id id, struct part_name nm,
                         const struct vars_source *src, bool esc)
{
    const struct http_request *h = src->http;
    char tmp[128]; /* an address's text: "unix:" and a socket path the longest */
    struct http_slice v = {tmp, 0};
    switch (id) {
    case VAR_URI: v = (struct http_slice){src->uri, src->uri ? src->uri_len : 0}; break;
    case VAR_REQUEST_URI: /* the origin-form: absolute-form's scheme and authority left out */
        if (h) {
            struct http_origin_form of = http_origin_form(h);
            put(s, of.path.p, of.path.len, esc, false);
            v = of.query;
        }
        break;
    case VAR_ARGS:
    case VAR_QUERY_STRING: v = src->args ? *src->args : h ? h->query : v; break;
    case VAR_IS_ARGS:
        v = src->args ? *src->args : h ? h->query : v;
        v = v.len ? (struct http_slice){"?", 1} : (struct http_slice){"", 0};
        break;
    case VAR_PIPE:
        v = src->pipelined ? (struct http_slice){"p", 1} : (struct http_slice){".", 1};
        break;
    case VAR_HOST: {
        struct http_slice host = host_of(src);
        put(s, host.p, host.len, esc, true);
        return;
    }
    case VAR_DOCUMENT_URI: v = (struct http_slice){src->uri, src->uri ? src->uri_len : 0}; break;
    case VAR_CONTENT_TYPE:
        if (h)
            put_header(s, h, "content-type", 12, esc);
        return;
    case VAR_CONTENT_LENGTH:
        if (h && h->framing == HTTP_BODY_CHUNKED) {
            if (src->body_streams) /* not known yet: empty */
                break;
            v.len = (size_t)snprintf(tmp, sizeof(tmp), "%llu",
                                     (unsigned long long)src->body_len);
            v.p = tmp;
        } else if (h) {
            put_header(s, h, "content-length", 14, esc);
            return;
        }
        break;
    case VAR_SERVER_PROTOCOL:
        if (h)
            v = h->version_minor ? (struct http_slice){"HTTP/1.1", 8}
                                 : (struct http_slice){"HTTP/1.0", 8};
        break;
    case VAR_NGINX_VERSION: v = (struct http_slice){"1.22.1", 6}; break;
    case VAR_SCHEME:
        v = src->https ? (struct http_slice){"https", 5} : (struct http_slice){"http", 4};
        break;
    case VAR_HTTPS: v = src->https ? (struct http_slice){"on", 2} : v; break;
    case VAR_REMOTE_ADDR: v.len = remote_addr_of(src->peer, tmp, sizeof(tmp)); break;
    case VAR_BINARY_REMOTE_ADDR: v = binary_addr_of(src->peer); break;
    case VAR_LIMIT_REQ_STATUS: v = limit_status_of(src->limit_req_status); break;
    case VAR_LIMIT_CONN_STATUS: v = limit_status_of(src->limit_conn_status); break;
    case VAR_REMOTE_PORT: v.len = port_of(src->peer, tmp, sizeof(tmp)); break;
    case VAR_CONNECTIONS_ACTIVE:
    case VAR_CONNECTIONS_READING:
    case VAR_CONNECTIONS_WRITING:
    case VAR_CONNECTIONS_WAITING:
        if (src->connections) {
            unsigned long long n[4];
            src->connections(src->user_vars, n);
            v.len = decimal(tmp, sizeof(tmp), n[id - VAR_CONNECTIONS_ACTIVE], 1);
        }
        break;
    case VAR_REALIP_REMOTE_ADDR:
        v.len = remote_addr_of(src->conn_peer ? src->conn_peer : src->peer, tmp, sizeof(tmp));
        break;
    case VAR_REALIP_REMOTE_PORT:
        v.len = port_of(src->conn_peer ? src->conn_peer : src->peer, tmp, sizeof(tmp));
        break;
    case VAR_PROXY_PROTOCOL_ADDR:
    case VAR_PROXY_PROTOCOL_SERVER_ADDR:
        if (src->proxy_protocol)
            v.len = remote_addr_of(id == VAR_PROXY_PROTOCOL_ADDR ? &src->proxy_protocol->src.sa
                                                                  : &src->proxy_protocol->dst.sa,
                                   tmp, sizeof(tmp));
        break;
    case VAR_PROXY_PROTOCOL_PORT:
    case VAR_PROXY_PROTOCOL_SERVER_PORT:
        if (src->proxy_protocol)
            v.len = port_of(id == VAR_PROXY_PROTOCOL_PORT ? &src->proxy_protocol->src.sa
                                                          : &src->proxy_protocol->dst.sa,
                            tmp, sizeof(tmp));
        break;
    case VAR_REQUEST_METHOD: v = h ? h->method_name : v; break;
    case VAR_REQUEST_BODY:
        v = (struct http_slice){src->request_body, src->request_body ? src->request_body_len : 0};
        break;
    case VAR_SERVER_PORT: v.len = port_of(src->local, tmp, sizeof(tmp)); break;
    case VAR_SERVER_ADDR: v.len = server_addr_of(src, tmp, sizeof(tmp)); break;
    case VAR_SERVER_NAME:
        put_string(s, src->name_before, esc);
        put_string(s, src->name, esc);
        put_string(s, src->name_after, esc);
        return;
    case VAR_REQUEST_ID: v = request_id_of(src->request_id); break;
    case VAR_PROXY_HOST: v = src->proxy_host; break;
    case VAR_PROXY_PORT: v = src->proxy_port; break;
    case VAR_PROXY_ADD_XFF:
        if (put_header(s, h, "x-forwarded-for", 15, esc))
            put(s, ", ", 2, false, false);
        v.len = remote_addr_of(src->peer, tmp, sizeof(tmp));
        break;
    case VAR_STATUS:
    case VAR_BODY_BYTES_SENT:
    case VAR_BYTES_SENT:
    case VAR_REQUEST:
    case VAR_MSEC:
    case VAR_TIME_LOCAL:
    case VAR_TIME_ISO8601:
    case VAR_REMOTE_USER:
    case VAR_REQUEST_TIME:
    case VAR_REQUEST_LENGTH:
    case VAR_CONNECTION_REQUESTS:
    case VAR_CONNECTION:
    case VAR_CONNECTION_TIME: v = log_var_of(id, src, tmp, sizeof(tmp)); break;
    case VAR_UPSTREAM_ADDR:
    case VAR_UPSTREAM_STATUS:
    case VAR_UPSTREAM_RESPONSE_TIME:
    case VAR_UPSTREAM_CONNECT_TIME:
    case VAR_UPSTREAM_HEADER_TIME:
    case VAR_UPSTREAM_RESPONSE_LENGTH:
    case VAR_UPSTREAM_BYTES_RECEIVED:
    case VAR_UPSTREAM_BYTES_SENT:
    case VAR_UPSTREAM_CACHE_STATUS:
    case VAR_UPSTREAM_HTTP:
    case VAR_UPSTREAM_COOKIE: put_upstream(s, id, nm, src, esc); return;
    case VAR_HTTP: put_header(s, h, nm.p, nm.len, esc); return;
    case VAR_SENT_HTTP:
        if (src->sent_field && src->response)
            v = src->sent_field(src->response, nm.p, nm.len);
        break;
    case VAR_SENT_TRAILER: v = trailer_of(src, nm.p, nm.len); break;
    case VAR_COOKIE: v = cookie_of(h, nm.p, nm.len); break;
    case VAR_ARG: v = arg_of(src->args ? *src->args : h ? h->query : v, nm.p, nm.len); break;
    /* A server name's captures are of the Host lowercased, as nginx matches it. */
    case VAR_CAPTURE: {
        const struct regex_captures *c = src->captures;
        c = c && c->n ? c : src->server_captures;
        v.p = regex_group(c, (unsigned)(nm.p[0] - '0'), &v.len);
        put(s, v.p, v.len, esc, c && c == src->server_captures);
        return;
    }
    case VAR_CAPTURE_NAMED:
        v.p = regex_group_named(src->captures, nm.p, nm.len, &v.len);
        if (v.len == 0) {
            v.p = regex_group_named(src->server_captures, nm.p, nm.len, &v.len);
            put(s, v.p, v.len, esc, true);
            return;
        }
        break;
    case VAR_USER:
        put_user(s, nm.user, src, esc);
        return;
    case VAR_SSL_PROTOCOL:
    case VAR_SSL_CIPHER:
    case VAR_SSL_CIPHERS:
    case VAR_SSL_CURVE:
    case VAR_SSL_CURVES:
    case VAR_SSL_SERVER_NAME:
    case VAR_SSL_SESSION_REUSED:
    case VAR_SSL_SESSION_ID:
    case VAR_SSL_EARLY_DATA:
    case VAR_SSL_CLIENT_VERIFY:
    case VAR_SSL_CLIENT_S_DN:
    case VAR_SSL_CLIENT_I_DN:
    case VAR_SSL_CLIENT_SERIAL:
    case VAR_SSL_CLIENT_FINGERPRINT:
    case VAR_SSL_CLIENT_CERT:
    case VAR_SSL_CLIENT_ESCAPED_CERT:
    case VAR_SSL_CLIENT_RAW_CERT:
    case VAR_SSL_CLIENT_V_START:
    case VAR_SSL_CLIENT_V_END:
    case VAR_SSL_CLIENT_V_REMAIN:
    case VAR_SSL_CLIENT_S_DN_LEGACY:
    case VAR_SSL_CLIENT_I_DN_LEGACY: put_tls(s, id, src, esc); return;
    case VAR_DOCUMENT_ROOT: put_path(s, VARS_DOCUMENT_ROOT, src, esc); return;
    case VAR_REALPATH_ROOT: put_path(s, VARS_REALPATH_ROOT, src, esc); return;
    case VAR_INVALID_REFERER: put_path(s, VARS_INVALID_REFERER, src, esc); return;
    case VAR_SECURE_LINK: put_path(s, VARS_SECURE_LINK, src, esc); return;
    case VAR_SECURE_LINK_EXPIRES: put_path(s, VARS_SECURE_LINK_EXPIRES, src, esc); return;
    case VAR_FASTCGI_SCRIPT_NAME: put_path(s, VARS_FASTCGI_SCRIPT_NAME, src, esc); return;
    case VAR_FASTCGI_PATH_INFO: put_path(s, VARS_FASTCGI_PATH_INFO, src, esc); return;
    case VAR_REQUEST_FILENAME: put_path(s, VARS_REQUEST_FILENAME, src, esc); return;
    case VAR_LITERAL: break;
    }
    put(s, v.p, v.len, esc, false);
}

/* A value that is one `set` or `map` variable and nothing else, unescaped (`if ($x)`, an
 * access log's if=$x): the variable's value straight into out, without the copy put_user
 * makes (and within the same bound). */
static long expand_user(const struct vars_value *v, const struct vars_source *src, char *out,
                        size_t cap)
{
    size_t room = cap < USER_VALUE_MAX ? cap : USER_VALUE_MAX;
    long n = src->user_var ? src->user_var(src, v->parts[0].user, out, room) : 0;
    out[n < 0 ? 0 : n] = '\0';
    return n;
}

long vars_expand(const struct vars_value *v, const struct vars_source *src, char *out,
                 size_t cap)
{
    if (cap == 0)
        return -1;
    if (v->n_parts == 1 && v->parts[0].id == VAR_USER && v->ctx == VARS_RAW)
        return expand_user(v, src, out, cap);
    if (v->n_parts == 1 && v->parts[0].id == VAR_LITERAL) { /* text alone, as it is */
        size_t len = v->parts[0].len;
        if (len >= cap) {
            out[0] = '\0';
            return -1;
        }
        memcpy(out, v->text + v->parts[0].off, len);
        out[len] = '\0';
        return (long)len;
    }
    struct sink s = {out, cap, 0, false, v->ctx};
    bool esc = v->ctx == VARS_HEADER || is_log(v->ctx);
    for (unsigned i = 0; i < v->n_parts && !s.failed; i++) {
        const struct vars_part *p = &v->parts[i];
        if (p->id == VAR_LITERAL) {
            put(&s, v->text + p->off, p->len, false, false);
            continue;
        }
        size_t before = s.n;
        put_variable(&s, p->id, (struct part_name){v->text + p->off, p->len, p->user}, src, esc);
        /* nginx's log writes a value that is not there as "-" (but not with escape=json
         * or escape=none) */
        if (s.n == before && v->ctx == VARS_LOG_DEFAULT)
            put(&s, "-", 1, false, false);
    }
    out[s.failed ? 0 : s.n] = '\0';
    return s.failed ? -1 : (long)s.n;
}
