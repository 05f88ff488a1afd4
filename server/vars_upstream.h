/* vars_upstream.h — what the proxy records of its tries for nginx's $upstream_* variables,
 * and how those variables write it.
 *
 * Each try at an upstream server (the first, and each one proxy_next_upstream makes) is one
 * entry; a variable writes the entries' values joined with ", ", as nginx's: $upstream_addr
 * "127.0.0.1:8081, 127.0.0.1:8082", $upstream_status "502, 200", times in seconds with
 * milliseconds ("0.004", "-" for a phase the try never reached). The record lives in the
 * proxy's state for as long as its request does (the access log is written before the
 * state is let go); a request that was not proxied has none, and the variables are empty
 * ("-" in a log line).
 */
#ifndef LFHTTPD_VARS_UPSTREAM_H
#define LFHTTPD_VARS_UPSTREAM_H

#include <stddef.h>
#include <stdint.h>

#include "http_parse.h"

#define VARS_UPSTREAM_TRIES 8 /* tries past these are made, but not written */

struct vars_upstream_try {
    const char *addr; /* the server, "HOST:PORT" or "unix:PATH" (the generation's text); the
                         upstream's name when no server was left to try, as nginx's */
    int status;       /* its answer's status, 502 or 504 when it failed; 0: "-" */
    int64_t start_us; /* when the try began (clock_now_us) */
    int64_t connect_us, header_us, response_us; /* since start_us; -1: "-" */
    uint64_t bytes_sent;                        /* to the upstream */
    uint64_t bytes_received;                    /* from it, head and body */
    uint64_t response_length;                   /* of that, the body's (as framed on the wire) */
};

struct vars_upstream {
    unsigned n; /* entries in tries[] */
    struct vars_upstream_try tries[VARS_UPSTREAM_TRIES];
    /* The last try's response head ("HTTP/1.1 200 OK\r\n...\r\n\r\n"), for
     * $upstream_http_NAME; NULL when it has none (failed, or its buffer went to a tunnel). */
    const char *head;
    size_t head_len;
};

enum vars_upstream_field {
    VARS_UPSTREAM_ADDR,
    VARS_UPSTREAM_STATUS,
    VARS_UPSTREAM_RESPONSE_TIME,
    VARS_UPSTREAM_CONNECT_TIME,
    VARS_UPSTREAM_HEADER_TIME,
    VARS_UPSTREAM_RESPONSE_LENGTH,
    VARS_UPSTREAM_BYTES_RECEIVED,
    VARS_UPSTREAM_BYTES_SENT,
};

/* The entries' values of field, joined with ", ", into out (capacity cap). Returns the
 * length (0 without a try: the variable is not set), or -1 if it does not fit. */
long vars_upstream_format(const struct vars_upstream *u, enum vars_upstream_field field, char *out,
                          size_t cap);

/* The value of the last try's response field name[0..len) (lowercase, '-' for '_'), the
 * first of that name as nginx 1.22's $upstream_http_NAME; found false without one. */
struct http_slice vars_upstream_header(const struct vars_upstream *u, const char *name, size_t len,
                                       bool *found);
/* The value of the cookie name[0..len) (without case) that the last try's response sets:
 * the first `Set-Cookie` field whose cookie it is, up to its ';' (nginx 1.22's
 * $upstream_cookie_NAME); empty without one. */
struct http_slice vars_upstream_cookie(const struct vars_upstream *u, const char *name,
                                       size_t len);

#endif
