/* module_fastcgi.h — answering through a FastCGI application: what mod_fastcgi gives the
 * core (the parameters of a request, the reading of the answer's head) and what the core
 * gives mod_fastcgi ($fastcgi_script_name and $fastcgi_path_info, which any module may
 * expand: `try_files $fastcgi_script_name`, `set $path_info $fastcgi_path_info`).
 *
 * A handler answers with resp_proxy(resp, &params->up): the upstream's servers, timeouts
 * and retries are the proxy's (struct proxy_params), and up.fastcgi says that the
 * application speaks FastCGI (http_fastcgi.c) rather than HTTP (http_proxy.c).
 */
#ifndef LFHTTPD_MODULE_FASTCGI_H
#define LFHTTPD_MODULE_FASTCGI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "module.h"
#include "regex.h"

/* A `fastcgi_param` line (`uwsgi_param`, `scgi_param`): NAME, its VALUE compiled, and
 * whether an empty value leaves the parameter out (if_not_empty). */
struct fastcgi_param_line {
    char *name;
    size_t name_len;
    struct vars_value *value;
    bool if_not_empty;
};

#define FASTCGI_PARAM_LINES_MAX 128 /* a block's parameter lines */
#define FASTCGI_NAMES_MAX 32        /* a block's hide_header (pass_header) names */

struct conf_node;

/* Add the statement n (NAME VALUE [if_not_empty]) to a block's lines, which become the
 * block's own (*owned) at its first line. 0, or -1 with msg. */
int fastcgi_param_add(struct fastcgi_param_line **lines, unsigned *n_lines, bool *owned,
                      const struct conf_node *n, char *msg, size_t len);

/* Add the field name to a block's list of names (hide_header, pass_header), made the
 * block's own (*owned) at its first. 0, or -1 with msg. */
int fastcgi_name_add(char (**list)[64], unsigned *n, bool *owned, const char *name, char *msg,
                     size_t len);

/* A block's fastcgi_buffering and its buffers (uwsgi_, scgi_ alike), as read: unset ones
 * (-1, 0, false, NULL) are inherited each on its own, then take nginx's defaults. */
struct fastcgi_buffering {
    int buffering;         /* -1 unset, 0 off, 1 on */
    unsigned buffers_n;    /* PREFIX_buffers NUMBER; 0 unset */
    uint64_t buffers_size; /* ... SIZE */
    uint64_t max_temp;     /* PREFIX_max_temp_file_size, when max_temp_set */
    bool max_temp_set;
    const char *temp_path; /* PREFIX_temp_path; NULL unset */
};

/* One of the directives PREFIX_buffering, _buffers, _buffer_size, _busy_buffers_size,
 * _max_temp_file_size, _temp_file_write_size, _temp_path, read into b (a missing temp
 * path is made, as nginx makes it). 0, or -1 with msg. */
int fastcgi_buffering_set(struct fastcgi_buffering *b, const struct conf_node *n, char *msg,
                          size_t len);
/* b's unset settings: outer's, or without one nginx's defaults (buffering on in a file with
 * `http { }`, off in lfhttpd's own, as proxy_buffering); then b's part of the parameters. */
void fastcgi_buffering_merge(struct fastcgi_buffering *b, const struct fastcgi_buffering *outer,
                             bool http_block, struct proxy_params *p);

/* The table lines of those directives, for a module whose prefix is P ("fastcgi") and
 * whose setter SET calls fastcgi_buffering_set. */
#define FASTCGI_BUFFERING_DIRECTIVES(P, SET, CTX)                                              \
    {P "_buffering", CONF_LIST, CTX, .min_args = 1, .max_args = 1, .set = SET,                \
     .usage = "on|off", .dflt = "(on in a file with `http { }`, as nginx; off in lfhttpd's own)", \
     .doc = "`on`: the answer is read as fast as the application sends it, into `" P         \
        "_buffers` and past them a temporary file (`" P "_temp_path`, at most `" P            \
        "_max_temp_file_size`), and the application's connection is let go of (kept for "    \
        "the next request when `fastcgi_keep_conn` and `keepalive` allow) once the whole "    \
        "answer is read, while a slow client is still served from them, as nginx's: a slow client does not "  \
        "hold a worker of the application. `off`: the answer streams through 16 KiB, and a "   \
        "client that does not read holds the application. The application's "                \
        "`X-Accel-Buffering: yes|no` turns it on or off for its answer. nginx's default is "   \
        "`on`; in lfhttpd's own files (without `http { }`) it is `off`."},                     \
    {P "_buffers", CONF_LIST, CTX, .min_args = 2, .max_args = 2, .set = SET,                 \
     .usage = "NUMBER SIZE", .dflt = "8 4k",                                                   \
     .doc = "The memory an answer is read ahead into, per connection, with `" P               \
        "_buffering on`: NUMBER times SIZE bytes, taken only when the client is slower than " \
        "the application and let go of when the answer ends."},                               \
    {P "_buffer_size", CONF_LIST, CTX, .min_args = 1, .max_args = 1, .set = SET,             \
     .usage = "SIZE", .dflt = "4k",                                                            \
     .doc = "Accepted for nginx's configurations: the answer's head may be 16 KiB whatever "  \
        "this says (a larger head is a 502)."},                                               \
    {P "_busy_buffers_size", CONF_LIST, CTX, .min_args = 1, .max_args = 1, .set = SET,       \
     .usage = "SIZE", .dflt = "8k",                                                            \
     .doc = "Accepted for nginx's configurations: what the client has not taken is parked "   \
        "on its connection (bounded by `max_parked_size`), and the rest of `" P               \
        "_buffers` goes on reading."},                                                        \
    {P "_max_temp_file_size", CONF_LIST, CTX, .min_args = 1, .max_args = 1, .set = SET,      \
     .usage = "SIZE", .dflt = "1024m",                                                         \
     .doc = "With `" P "_buffering on`, the most of an answer written to its temporary "      \
        "file; past it, the application is read only as the client takes the answer. `0`: "  \
        "no file, only `" P "_buffers`."},                                                    \
    {P "_temp_file_write_size", CONF_LIST, CTX, .min_args = 1, .max_args = 1, .set = SET,    \
     .usage = "SIZE", .dflt = "8k",                                                            \
     .doc = "Accepted for nginx's configurations: the temporary file is written a read at a " \
        "time (16 KiB at most)."},                                                            \
    {P "_temp_path", CONF_LIST, CTX, .min_args = 1, .max_args = 4, .set = SET,               \
     .usage = "DIR [LEVEL...]", .dflt = "(the system's temporary directory, /tmp)",           \
     .doc = "Where the temporary files of `" P "_buffering on` are made: without a name "      \
        "(`O_TMPFILE`, or unlinked at once where the file system lacks it), so that none is " \
        "ever left behind; the directory is made at load when missing (mode 0700, as nginx " \
        "makes it; its parent must exist). LEVELs are accepted and mean nothing."}

struct upstream;

/* Where a request of `fastcgi_pass $VAR;` (uwsgi_pass, scgi_pass) goes, made per request
 * by fastcgi_ops.target from the value: an `upstream` block it names, else the address it
 * is (`unix:PATH`, IP:PORT, [IPv6]:PORT) or a host name to resolve, on port; connections
 * to an address are not kept, as nginx's. */
struct fastcgi_target {
    struct upstream *upstream;    /* the block named; NULL: addr, or host when addr_len is 0 */
    struct sockaddr_storage addr; /* its port set */
    socklen_t addr_len;
    char host[256];               /* a name to resolve */
    unsigned port;
    int status;     /* when there is no target: the answer (500, 502) ... */
    char why[400];  /* ... and the error log's line, nginx's words */
};

struct fastcgi_ops {
    /* fastcgi_pass with variables: req's target into *t. 0, or -1 when the value names
     * none (t->status, t->why). */
    int (*target)(const void *conf, const struct request *req, struct fastcgi_target *t);
    /* The request's parameters, as FCGI_PARAMS content (name-value pairs), into
     * out[0..cap): their length, or -1 when they do not fit. */
    long (*params)(const void *conf, const struct request *req, char *out, size_t cap);
    /* Start resp from the head of the application's output in buf[0..len) (CGI's: Status,
     * Location, fields): the head's length (> 0), 0 to wait for more, -1 when it is not a
     * valid head (502). req: the request as it was answered, or NULL. */
    int (*head)(const void *conf, const struct request *req, const char *buf, size_t len,
                struct response *resp);
};

/* The protocol of an application that does not speak FastCGI, for the core's connection
 * state (http_fastcgi.c): uwsgi_pass and scgi_pass (mod_uwsgi.c) share FastCGI's connect,
 * send, relay, timeouts and error pages, and differ in the framing of the request and in
 * the answer, which is raw bytes (a head, then the body until the application closes)
 * rather than records. */
struct fastcgi_params;
struct fastcgi_wire {
    const char *name; /* "uwsgi", "scgi" */
    /* The most frame writes for params_len bytes of parameters and body_len of body. */
    size_t (*size)(size_t params_len, size_t body_len);
    /* The request: the parameters (as ops->params wrote them) framed, then the body, at
     * out[0..cap): its length, or 0 when the protocol cannot carry it (500). The body's
     * length as the head says it is content_length: body_len, or more when the rest of the
     * body follows as it arrives (*_request_buffering off). */
    size_t (*frame)(const struct fastcgi_params *fp, char *out, size_t cap, const char *params,
                    size_t params_len, const char *body, size_t body_len,
                    uint64_t content_length);
};

/* How a location splits its path (fastcgi_split_path_info, fastcgi_index): the first
 * member of mod_fastcgi's settings of every block, read by module_fastcgi_var. */
struct fastcgi_split {
    const struct regex *split; /* two groups: script name, path info; NULL: none */
    const char *index;         /* fastcgi_index, or NULL */
};

/* One location's fastcgi_pass: read-only, as long as the generation. */
struct fastcgi_params {
    struct proxy_params up; /* first: up.fastcgi is true, up.ops NULL */
    const struct fastcgi_ops *ops;
    bool keep_conn;         /* fastcgi_keep_conn on */
    /* fastcgi_catch_stderr's strings: one in a STDERR record before the head makes the
     * answer invalid */
    const char *const *catch_stderr;
    unsigned n_catch_stderr;
    const struct fastcgi_wire *wire; /* NULL: FastCGI's records */
    unsigned char modifier1, modifier2; /* uwsgi_modifier1, uwsgi_modifier2 */
};

/* For the core: the FastCGI parameters of a response that resp_proxy gave them. */
static inline const struct fastcgi_params *fastcgi_params_of(const struct proxy_params *p)
{
    return p && p->fastcgi ? (const struct fastcgi_params *)p : NULL;
}

/* The upstreams a value may name: the `upstream` blocks, and the sets of the module's
 * `PREFIX_pass HOST:PORT` lines without variables (resolved at load, as nginx's). */
struct fastcgi_upstreams {
    struct upstream *const *named;
    unsigned n_named;
    struct upstream *const *implicit;
    unsigned n_implicit;
};

/* The target of `PREFIX_pass VALUE` with variables for req, as nginx's (its _eval and
 * ngx_http_upstream_init_request): the value made, a name without a port is an `upstream`
 * block when one has it (any case), a HOST:PORT that a line without variables names is
 * that line's set, else the value is an address; a
 * malformed one is 500 ("invalid port in upstream \"x:y\""), one without a port too ("no
 * port in upstream \"x\""); a host name is left to the resolver (t->host). scheme: "uwsgi" for uwsgi_pass, whose value may begin with
 * "uwsgi://" (NULL: none). 0, or -1 with t->status and t->why. */
int fastcgi_target_eval(const struct vars_value *value, const struct request *req,
                        const struct fastcgi_upstreams *ups, const char *scheme,
                        struct fastcgi_target *t);

/* A block's `resolver` and `resolver_timeout` (the directives are mod_proxy's, as nginx's
 * are its core's): the names of PREFIX_pass with variables are resolved by it. */
struct fastcgi_resolver {
    struct resolver *resolver; /* the block's own (owned) or its outer block's; NULL: none */
    bool owned;
    unsigned timeout_ms;
};

/* Read b's statements into r, what b does not say taken from outer (NULL at the top: no
 * resolver, 30s). 0, or -1 after module_error. */
int fastcgi_resolver_read(struct fastcgi_resolver *r, const struct module_block *b,
                          const struct fastcgi_resolver *outer);
void fastcgi_resolver_free(struct fastcgi_resolver *r);

enum fastcgi_var { FASTCGI_SCRIPT_NAME, FASTCGI_PATH_INFO };

/* $fastcgi_script_name or $fastcgi_path_info of req (the path split by its block's
 * fastcgi_split_path_info, the index appended to a script name that ends in "/"), into
 * out[0..cap): its length, or -1 when it does not fit. */
long module_fastcgi_var(const struct request *req, enum fastcgi_var which, char *out,
                        size_t cap);

#endif
