/* module.h — the contract between the core and a module: the hooks a module implements,
 * the request it is given, and the functions it may call. Nothing else: the chain that
 * calls the hooks and the settings of each block are the core's (module_chain.h,
 * module_level.h), which no file of modules/ includes (tests/check_layers.py says so); the
 * server's figures a status page reads are in module_figures.h.
 *
 * A module is a struct of optional hooks (lighttpd's plugin struct and h2o's handler
 * chain are the models). For each request the chain calls, in the order of the module
 * table in module_chain.c:
 *
 *   rewrite  every module, in order; may change the path
 *   preaccess every module, in order, once per request (not again for an error page): the
 *            first that returns MOD_HANDLED has answered (limit_req's, limit_conn's 503);
 *            MOD_DELAY puts the request aside for a time, then it runs again from the
 *            start (limit_req's delay: no thread waits meanwhile)
 *   access   every module, in order; the first that returns MOD_HANDLED has answered
 *            (a refusal) and no handler runs
 *   handle   if the path falls under a mount (the longest prefix wins), only the module
 *            that owns the mount; otherwise every module without mounts, in order, until
 *            one returns MOD_HANDLED. Nobody: 404. MOD_ERROR: 500.
 *   filter   every module, in order, on the finished response (compression)
 *   log      every module, after the response is handed to the connection
 *
 * A module sees the request, the response it fills and the configuration: nothing of
 * connections, threads or the event loop. It fills and reads the response only through
 * http_response.h's functions (resp_start, resp_header, resp_body_*, resp_file_*,
 * resp_stream, resp_status...): the fields of struct response are the core's. Hooks run
 * on many threads at once: whatever state they share must be read-only after init, or
 * guarded.
 */
#ifndef LFHTTPD_MODULE_H
#define LFHTTPD_MODULE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "config.h"
#include "http_parse.h"
#include "http_response.h"
#include "open_beneath.h"
#include "proxy_protocol.h"
#include "regex.h"

/* What a hook answers. */
enum mod_result {
    MOD_DECLINED = 0, /* not mine: ask the next module */
    MOD_HANDLED = 1,  /* the response is filled */
    MOD_ERROR = -1,   /* failed: the chain answers 500 */
    /* A preaccess hook only: put the request aside for req->marks.delay_ms (limit_req's
     * delay), then run it again from the start, with req->marks.resumed set; nothing is
     * answered now. Only when req->marks.may_delay says the core can (else answer now). */
    MOD_DELAY = 2,
};

/* The decoded path's buffer. Decoding never lengthens a path, so it holds the path of any
 * request the default max_header_size (8k) lets in, as nginx's 8 KiB request line; a
 * longer path (max_header_size raised) is 414. Several frames of the request path hold
 * one on the stack, whose size is bounded for Thread-per-Connection. */
#define REQUEST_PATH_MAX 8192
#define REQUEST_VARS_MAX 16     /* variables `set` per request */
#define REQUEST_VARS_BYTES 1024 /* their values, together */
#define REQUEST_FILE_MAX 4096   /* a file named by a root or alias with variables */

/* How many mounts (module_mount_add, module_block_mount) a configuration may make, all
 * modules together: a module that keeps one record per mount may size its table by it. */
#define MODULE_MOUNTS_MAX 64

/* The core's, opaque to modules: */
struct module_chain;   /* the modules and their states (module_chain.h) */
struct module_level;   /* the settings of one block (module_level.h) */
struct server;         /* the running server, for module_figures.h */
struct site_server;    /* a server block (site.h) */
struct vars_value;     /* a compiled text with variables (vars.h) */
struct vars_upstream;  /* a proxied request's tries (vars_upstream.h) */

/* --- the request ------------------------------------------------------------------------ */

/* $limit_req_status and $limit_conn_status (0: not limited, the variable is empty). */
enum request_limit_status {
    REQUEST_LIMIT_NONE = 0,
    REQUEST_LIMIT_PASSED,
    REQUEST_LIMIT_DELAYED,
    REQUEST_LIMIT_REJECTED,
    REQUEST_LIMIT_DELAYED_DRY_RUN,
    REQUEST_LIMIT_REJECTED_DRY_RUN,
};

#define REQUEST_HELD_MAX 8 /* limit_conn counters one request may hold */

struct request_marks {
    bool preaccess_done;  /* the preaccess hooks have run (not again for an error page) */
    uint8_t limit_req;    /* enum request_limit_status */
    uint8_t limit_conn;   /* enum request_limit_status */
    uint8_t n_held;       /* of held: */
    bool may_delay;       /* set by the core: a preaccess hook may return MOD_DELAY */
    bool resumed;         /* set by the core: the request was put aside, and runs again */
    uint32_t delay_ms;    /* MOD_DELAY: how long */
    void *held[REQUEST_HELD_MAX]; /* the limiting module's counters, let go by its log hook */
};

struct request {
    /* The parsed head: method, target, fields, as slices into the request buffer. */
    const struct http_request *http;
    /* The path, percent-decoded, dot segments removed, NUL-ended, in a buffer of
     * REQUEST_PATH_MAX that a rewrite hook may edit (then set path_len). */
    char *path;
    size_t path_len;
    /* The client's address: the connection's, or the one a trusted proxy named (the
     * realip module's `set_real_ip_from`, decided once by a post_read hook) in real_peer
     * below. Everything that asks who the client is reads this. */
    const struct sockaddr *peer;
    const struct sockaddr *conn_peer; /* the connection's own: $realip_remote_addr */
    bool peer_replaced;               /* peer is real_peer, set by a post_read hook */
    /* The connection's PROXY protocol header, or NULL on a listener without one. */
    const struct proxy_protocol_addrs *proxy_protocol;
    const struct sockaddr *local; /* the address of the listener it came in on */
    int local_fd;                 /* the connection's socket: for $server_addr only */
    bool https;                   /* it came over TLS: $scheme, $https, redirects */
    const void *tls;              /* its connection's TLS state (tls.h), NULL on a plain
                                     one: $ssl_*, the client certificate's check */
    /* $request_id's 33 bytes (vars.h), in the frame that made the request, "" until the
     * first expansion makes it: copies of the request (internal redirects) share it. */
    char *request_id;
    int64_t now_s;                /* the time the request started, Unix seconds */
    int64_t start_us;             /* the same on the monotonic clock (clock_now_us): for
                                     $request_time */
    uint64_t request_length;      /* the head's bytes and the body's as framed: for
                                     $request_length */
    unsigned long conn_requests;  /* this request's number on its connection, from 1 */
    bool pipelined;               /* it came in one read after the request before ($pipe) */
    /* $invalid_referer once read: 0 not yet, 1 "" (valid), 2 "1". nginx keeps a variable's
     * first value for the request, so a later block's valid_referers does not change it. */
    unsigned char invalid_referer;
    uint32_t conn_number;         /* its connection's serial number, from 1 ($connection) */
    int64_t conn_opened_ms;       /* when its connection was accepted (clock_now_ms) */
    const struct config *cfg;     /* the configuration of the generation that answers */
    int root_fd;                  /* the document root, opened O_PATH | O_DIRECTORY */
    const char *root_real;        /* its real path, for open_beneath() */
    /* The root's number in the generation (equal real paths, equal numbers): caches keyed
     * by a path beneath the root put it in their keys. */
    unsigned root_id;
    struct http_slice args;       /* the query: the request's, or a try_files or error_page */
    bool has_args;                /* the URI had "?..." (visible ASCII, else %XX-encoded) */
    const char *file;             /* the path beneath the root ("/..."): path, or what */
    size_t file_len;              /* follows the location's prefix under `alias` */
    /* REQUEST_FILE_MAX bytes in the frame that made the request, where a root or alias
     * with variables writes the file it names (NULL: such a root serves nothing). */
    char *file_room;
    const struct module_mount *mount; /* the mount the path falls under, or NULL */
    /* The whole request body, when the mount asked for it (wants_body); else NULL (a body
     * is skipped). */
    const char *body;
    size_t body_len;
    /* The mount takes the body as it arrives (module_block_stream_body): the body, framed
     * as the request's head says, is still the connection's to read; body is then the
     * part of a Content-Length one that came with the head (nginx's $request_body while
     * the request's head is made), else NULL. */
    bool body_streams;
    /* A streamed chunked body read whole (set in the copy of the request its source keeps):
     * its decoded length, $content_length as nginx's once it has read the body. */
    bool streamed_whole;
    uint64_t streamed_len;
    /* An error page's request: the body its first request read, which the page's handler
     * does not get but $request_body still shows, as nginx's after the redirect; else
     * NULL. */
    const char *read_body;
    size_t read_body_len;
    const struct site_server *site; /* the server block, NULL without server blocks */

    /* The core's, which modules pass along but do not read: the settings of the block that
     * answers (a module's own are module_settings(req, its index)), the block the path
     * first matched (whose access rules hold after an internal redirect), the `return` to
     * answer with, a try_files =CODE, the running server and the chain. */
    const struct module_level *level;
    const struct module_level *first_level;
    /* The smallest client_max_body_size of the blocks the location searches found (nginx
     * checks a Content-Length against each); 0: no limit. */
    uint64_t body_max;
    int return_status;
    const struct vars_value *return_text;
    bool return_args; /* a rewrite's redirect: the request's arguments follow its URL */
    int try_status;
    /* try_files found a file beneath an alias in a regex location: the file is the alias
     * and the path after it (nginx's add_uri_to_alias) */
    bool alias_add_path;
    const char *slash_to; /* with return_status 301: the location the path lacked a '/' of */
    bool internal;        /* an error page's internal redirect: `internal` locations answer */
    const struct server *server;
    const struct module_chain *chain;
    /* A proxied request's tries, for $upstream_* (vars_upstream.h): the proxy's; NULL. */
    const struct vars_upstream *upstream;
    /* What the preaccess hooks (limit_req, limit_conn) left on the request; copies of it
     * (an error page's, a source's saved one) keep it, so they run once per request. */
    struct request_marks marks;
    /* From here on, a request starts with only the counts cleared (http_request_init):
     * $1..$9 and $name, the groups of the regex location that matched, as offsets into
     * the path it matched (n = 0 when the location is not a regex one). A try_files or an
     * error_page that changes the path keeps their bytes at the end of the path's buffer;
     * the location the new path finds sets new ones. */
    struct regex_captures captures;
    /* Those of the `server_name ~RE` that chose the server: $N when the location has none,
     * $name when the location's regex has no such group. */
    struct regex_captures server_captures;
    /* Where a post_read hook writes the address peer then points to (not cleared at a
     * request's start: written only when used). */
    union request_addr real_peer;
    /* The values `set` gave, in the request's own bytes (rewrite.c): each by its name's
     * index (vars_declare), its value in buf. */
    struct request_vars {
        unsigned n, used;
        struct {
            uint16_t user, off, len;
        } v[REQUEST_VARS_MAX];
        char buf[REQUEST_VARS_BYTES];
    } vars;
};

/* A path prefix a module answers for, e.g. `handler /echo echo;`. */
struct module_mount {
    char prefix[256];  /* the path prefix, NUL-ended; "" for a location's handler */
    size_t prefix_len; /* its length: req->path + prefix_len is what follows it */
    unsigned module;   /* the owner's place in the chain (its mi->index) */
    void *data;        /* the owner's own, from module_mount_add or module_block_mount */
    bool wants_body;   /* the core reads the whole request body before calling handle */
    /* ...unless it streams: then the handler is called once the head is read, and reads
     * the body itself (req->body_streams); a chunked one too if streams_chunked. */
    bool streams_body, streams_chunked;
    bool level_only;   /* a location's handler: not found by its prefix */
    unsigned line;     /* the statement that mounted it, for messages */
};

/* The module's settings for the block that answers req (its block hook's result), or NULL
 * when the module has no block hook or the request was not placed. */
const void *module_settings(const struct request *req, unsigned index);

/* --- the module ------------------------------------------------------------------------- */

/* What init is given: the configuration, and where to report errors. */
struct module_init {
    const struct config *cfg;   /* the whole configuration, read-only */
    struct module_chain *chain; /* the core's: for module_error() and module_mount_add() */
    unsigned index;             /* this module's place in the chain: module_settings(), */
                                /* module_mount.module */
    char *err;                  /* the messages so far, for module_error() */
    size_t err_len;             /* err's size in bytes */
};

/* What a module's block hook is given. */
struct module_block {
    struct module_init *mi;        /* for module_error(); mi->cfg the configuration */
    unsigned context;              /* CONF_TOP, CONF_SERVER or CONF_LOCATION */
    const struct conf_node *node;  /* the block's statement (NULL at the top level) */
    const struct conf_node *first; /* its first statement inside */
    const void *outer;             /* the module's settings of the enclosing block */
    struct module_level *level;    /* the core's level being built: for module_block_mount() */
    bool prefix_location;          /* a `location /p` or `location = /p` */
    const char *pattern;           /* the location's pattern, "" elsewhere */
};

struct strbuf;
struct upstream;

/* A module: its name, its directives and its hooks, every hook optional (NULL). */
struct module {
    /* Its name, for messages ("FILE:LINE: NAME: ...") and `handler PREFIX NAME;`. */
    const char *name;
    /* The directives this module reads: its lines of the directive table (directive.h),
     * ended by {.name = NULL}. config_load checks where they stand and how often; init
     * reads their values with module_read_directives(). */
    const struct conf_directive *directives;
    /* At start (and for `lfhttpd -t`): read directives, build state, add mounts.
     * Returns 0, or -1 after module_error(), having freed whatever it allocated: fini is
     * called only for modules whose init succeeded. The other modules' init runs even
     * when one fails, so that every error is reported. */
    int (*init)(struct module_init *mi, void **state);
    /* When the generation is let go: free the state init made. */
    void (*fini)(void *state);
    /* Right after the request's head is read, with the server block's settings (req->level
     * its level), and again once its location is found, before the access hooks, with the
     * location's (nginx's post-read and preaccess phases): may set the client's address
     * (req->peer, through module_set_peer). Returns MOD_DECLINED, or MOD_ERROR (500). */
    enum mod_result (*post_read)(void *state, struct request *req);
    /* May change req->path (and path_len); MOD_HANDLED has nothing more to say. */
    enum mod_result (*rewrite)(void *state, struct request *req);
    /* nginx's preaccess phase (limit_req, limit_conn): once per request, before every
     * access hook, with the settings of the block the path first matched; it may mark the
     * request (req->marks) and refuse: MOD_HANDLED with the refusal in resp (to which an
     * error_page applies), and no handler runs. */
    enum mod_result (*preaccess)(void *state, struct request *req, struct response *resp);
    /* May refuse: MOD_HANDLED with the refusal in resp, and no handler runs. */
    enum mod_result (*access)(void *state, const struct request *req, struct response *resp);
    /* Answers: MOD_HANDLED with resp filled, MOD_DECLINED, or MOD_ERROR (500). */
    enum mod_result (*handle)(void *state, const struct request *req, struct response *resp);
    /* Changes the finished response (compression, added headers), whoever made it. */
    void (*filter)(void *state, const struct request *req, struct response *resp);
    /* After the response is handed to the connection: counts, logs. */
    void (*log)(void *state, const struct request *req, const struct response *resp);
    /* Does the module's log hook write req's access-log lines in place of the top-level
     * access log (which then leaves the request out)? */
    bool (*logs_request)(void *state, const struct request *req);
    /* About four times a second, on one of the server's threads, with the current
     * generation's state (now_ms: clock_now_ms()): work due by time, as writing out
     * buffered log lines. Quick, and safe beside requests on other threads. */
    void (*tick)(void *state, int64_t now_ms);
    /* The media type of a file (path, and its open fd and stat), or NULL if unknown. Not
     * part of answering: modules that serve files ask through module_content_type(). */
    const char *(*content_type)(void *state, const struct request *req, const char *path,
                                int fd, const struct stat *st);
    /* Does file (beneath req's root, "/..."), exist, as a directory (dir) or not? 1 yes,
     * 0 no, -1 not known (the core then looks itself). For try_files: the open-file cache
     * knows the files it serves without a system call. */
    int (*file_exists)(void *state, const struct request *req, const char *file, bool dir);
    /* Settings per block, as nginx's configuration of a location: called for the top
     * level, then each server, then each of its locations, after init. Reads the block's
     * statements of this module (module_block_read), inherits what they leave unset from
     * b->outer (this module's settings of the block around it; NULL at the top level), and
     * returns the settings, or NULL after module_error(). A block that sets nothing of
     * the module's may return b->outer itself: it is then not freed twice. */
    void *(*block)(void *state, const struct module_block *b);
    /* Free what block returned (never called for a returned b->outer). */
    void (*block_free)(void *state, void *settings);
    /* The upstream sets the module sends requests to, for a status page: up to max of them
     * into out; returns how many there are. */
    unsigned (*upstreams)(void *state, struct upstream **out, unsigned max);
    /* Its own figures for a metrics scrape, in the Prometheus text format (version 0.0.4):
     * whole families, HELP and TYPE lines included, names starting with "lfhttpd_". */
    void (*metrics)(void *state, struct strbuf *b);
};

/* A message about req, to the error log of the block that answers it (nginx's error_log
 * in a server or location; else the top-level one), if its level lets it through; the
 * client's address and the request line are added, as nginx adds them. */
void module_log(const struct request *req, enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* For a post_read hook: the client is sa (AF_INET or AF_INET6) for the rest of the
 * request: $remote_addr, the access log, the access rules, CGI and the proxy see it. */
void module_set_peer(struct request *req, const struct sockaddr *sa);

/* Is a missing file written to req's error log (`log_not_found`)? */
bool module_log_not_found(const struct request *req);

/* --- for init and the block hook -------------------------------------------------------- */

/* For init: read the module's directives (its .directives) from the configuration into
 * base, the struct their offsets point into, which holds the defaults. Setters are given
 * mi as their ctx. Returns 0, or -1 after reporting every error. */
int module_read_directives(struct module_init *mi, void *base);

/* For init: the statement of the directive `name`, for the line of an error found later
 * (a file that does not open), or NULL if the configuration has none. */
const struct conf_node *module_directive(struct module_init *mi, const char *name);
/* The next top-level statement of `name` after `after`, for a directive that repeats. */
const struct conf_node *module_directive_next(struct module_init *mi, const char *name,
                                              const struct conf_node *after);

/* For init: mount the module on a path prefix. Returns 0, or -1 after module_error(). */
int module_mount_add(struct module_init *mi, const struct conf_node *where, const char *prefix,
                     void *data, bool wants_body);

/* A `*_temp_path DIR [LEVEL...]` statement (proxy_, fastcgi_, uwsgi_, scgi_): DIR made
 * when missing (its parent not; mode 0700), as nginx makes its temporary paths at start,
 * then it must be a directory; LEVELs are 1 or 2 and mean nothing (the files have no
 * names). Returns 0, or -1 with the reason in msg. */
int module_temp_path_read(const struct conf_node *n, char *msg, size_t len);

/* For init and block hooks: a directory the server writes in once it runs as `user`
 * (proxy_temp_path), when started by root: given to that user if it is another's and not
 * writable by all, as nginx gives its temporary paths to its workers' user. Returns 0, or
 * -1 after module_error() (where: the directive's line). */
int module_dir_for_user(struct module_init *mi, const struct conf_node *where, const char *dir);

/* For init and block hooks: add "FILE:LINE: module: message" (where may be NULL) to the
 * errors, and return -1. */
int module_error(struct module_init *mi, const struct conf_node *where, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* For a block hook: read the block's statements of this module (its .directives) into
 * base. Returns 0, or -1 after reporting every error. */
int module_block_read(const struct module_block *b, void *base);
/* For a block hook: a block needs the module's post_read hook; without this call from any
 * block, the hook is never called. */
void module_post_read_wanted(const struct module_block *b);
/* For a block hook: does the block hold any statement of this module's directives? */
bool module_block_has(const struct module_block *b);
/* For a block hook of a location: this location's handler is the module, with data
 * (`handler NAME;`, `cgi DIR;`). Returns 0, or -1 after module_error(). */
int module_block_mount(const struct module_block *b, const struct conf_node *where,
                       void *data, bool wants_body);

/* For a block hook of a location whose handler module_block_mount made with wants_body:
 * the body is not read first but streamed by the handler (proxy_request_buffering off),
 * a Content-Length one, and a chunked one too if `chunked`. */
void module_block_stream_body(const struct module_block *b, bool chunked);

/* For a block hook of a location that an upstream answers (proxy_pass): when its pattern
 * ends in '/', a request for it without that slash (/api for `location /api/`) is answered
 * 301 to it, the arguments kept, as nginx does for its *_pass handlers. */
void module_block_slash_redirect(const struct module_block *b);

/* --- for the hooks ---------------------------------------------------------------------- */

/* A redirect: status and Location. A location that is a path ("/new") is made an absolute
 * URL, as nginx's absolute_redirect (on by default): http://HOST[:PORT]/new, HOST the
 * request's Host without its port (else the server's name, else the local address), PORT
 * the one the connection came in on, left out when 80. */
void module_redirect(const struct request *req, struct response *resp, int status,
                     const char *location);

/* What module_redirect puts before a path: "http://HOST[:PORT]" into out (NUL-ended), its
 * length; 0 when redirects stay relative (absolute_redirect off) or it does not fit. */
size_t module_redirect_base(const struct request *req, char *out, size_t cap);

struct vars_source;
/* The variables' source for a request (vars.h). */
void module_vars_source(const struct request *req, struct vars_source *src);
/* The length of req's $request_body: its body's, when the block's handler read it and
 * nginx would hold it in memory (no longer than client_body_buffer_size), else 0. A
 * source that answers later keeps a copy of that much for its filters and log. */
size_t module_request_body_len(const struct request *req);
/* Where those bytes are: the body, or an error page's request's read_body (NULL: none). */
const char *module_request_body(const struct request *req);
/* The same, and the answer's fields for $sent_http_NAME. */
void module_vars_answer(struct vars_source *src, const struct response *resp);

/* The index file names of the block that answers req (`index`), in order: the i-th, or
 * NULL past the last. */
const char *module_index_name(const struct request *req, unsigned i);

/* The index file of a directory, as mod_static serves it: the first of the configured
 * index names that opens (flags) beneath the root as prefix + name relative to dirfd and
 * is a regular file; missing or non-regular candidates are skipped. Returns its
 * descriptor (the caller's), with *which its place in the index list and *st its status;
 * -ENOENT when the directory has none; else the -errno of the first candidate that could
 * not be opened (mod_static answers with its status). prefix: "" when dirfd is the
 * directory, else its path relative to dirfd ending in '/'. */
int module_index_open(const struct request *req, int dirfd, const char *prefix, int flags,
                      unsigned *which, struct stat *st);

/* The media type of a file, from the first module that knows it (mod_mime), else
 * "application/octet-stream". */
const char *module_content_type(const struct request *req, const char *path, int fd,
                                const struct stat *st);

/* --- answering through the reverse proxy (mod_proxy asks, http_proxy.c does the I/O) ---- */

struct http_response_head;

/* proxy_next_upstream: when an attempt that failed is tried again on the next server. */
enum {
    PROXY_NEXT_ERROR = 1u << 0,   /* could not connect, or the connection failed */
    PROXY_NEXT_TIMEOUT = 1u << 1, /* a timeout */
    PROXY_NEXT_INVALID = 1u << 2, /* invalid_header: a head that cannot be relayed */
    PROXY_NEXT_502 = 1u << 3,
    PROXY_NEXT_503 = 1u << 4,
    PROXY_NEXT_504 = 1u << 5,
    PROXY_NEXT_NON_IDEMPOTENT = 1u << 6, /* even a POST, LOCK or PATCH once it was sent */
    PROXY_NEXT_500 = 1u << 7,
    PROXY_NEXT_403 = 1u << 8,
    PROXY_NEXT_404 = 1u << 9,
    PROXY_NEXT_429 = 1u << 10,
};

struct upstream;
struct resolver;

/* Where a `proxy_pass` with variables goes, made per request by proxy_ops.target. */
struct proxy_target {
    struct upstream *upstream; /* the `upstream` block the host names; NULL: host below */
    char host[256];            /* an IP address (IPv6 without brackets) or a name to resolve */
    unsigned port;             /* the URL's, 80 when it names none */
    char proxy_host[320];      /* $proxy_host: the URL's HOST[:PORT] (":80" left out) */
    size_t proxy_host_len;
    char proxy_port[8];        /* $proxy_port */
    char uri[2048];            /* the URL's URI, sent as it is (nginx's rule with variables) */
    size_t uri_len;
    bool has_uri;
};

struct proxy_ops {
    /* proxy_pass with variables: expand the URL for req into *t. Returns 0, or -1 when it
     * is not an http:// URL with a host (the request is answered 500, logged with why in
     * t->host). */
    int (*target)(const void *conf, const struct request *req, struct proxy_target *t);
    /* Write the head of the request to the upstream, through its blank line, into
     * out[0..cap) (the core adds the body, req->body, after it): its length, or -1 if it
     * does not fit. t: the request's target (proxy_pass with variables), else NULL.
     * *keep_alive: on entry, whether the upstream keeps connections; on return, whether
     * the request written lets this one be kept. Called once per request. */
    long (*request)(const void *conf, const struct request *req,
                    const struct proxy_target *t, bool *keep_alive, char *out, size_t cap);
    /* Start resp from the upstream's head h (status, the fields to relay, rewritten as the
     * configuration says). req: the request as it was answered (a copy the core kept), or
     * NULL if it could not be kept. The core then adds the framing (Content-Length or
     * chunked) and Connection. Returns 0, or -1 if the head cannot be relayed (502). */
    int (*head)(const void *conf, const struct request *req, const struct http_response_head *h,
                struct response *resp);
};

/* One location's `proxy_pass`, as the core needs it: read-only, as long as the generation.
 * A handler answers through the proxy with resp_proxy (http_response.h). */
struct proxy_params {
    const struct proxy_ops *ops;
    const void *conf;          /* the module's own, given to ops */
    struct upstream *upstream; /* the servers to try (upstream.h); NULL when `dynamic` */
    bool dynamic;              /* proxy_pass has variables: ops->target chooses per request */
    struct resolver *resolver; /* `resolver` (resolver.h), for dynamic's names; NULL: none */
    unsigned resolver_timeout_ms;
    unsigned connect_ms, send_ms, read_ms; /* proxy_connect_, _send_, _read_timeout */
    unsigned next_upstream;                /* PROXY_NEXT_* */
    unsigned tries;                        /* proxy_next_upstream_tries; 0: no limit */
    bool intercept_errors; /* proxy_intercept_errors: an upstream's answer of 300 or more
                              with an error_page gets the page */
    bool fastcgi; /* the servers speak FastCGI (module_fastcgi.h), not HTTP; ops NULL */
    /* proxy_pass https://: the TLS client context (an SSL_CTX, upstream_tls.h), NULL for
     * http:// */
    void *tls_ctx;
    bool tls_server_name;         /* proxy_ssl_server_name: send SNI */
    bool tls_verify;              /* proxy_ssl_verify: check the name too */
    struct vars_value *tls_name;  /* proxy_ssl_name, NULL: $proxy_host */
    struct http_slice tls_host;   /* $proxy_host, proxy_ssl_name's default (its port is cut) */
    /* proxy_buffering on: the answer is read as fast as the upstream sends it, into
     * buffers_bytes of memory (proxy_buffers), then a temporary file in temp_path of at most
     * max_temp_bytes (proxy_max_temp_file_size; 0: none), so that the upstream connection
     * is let go of once the answer is read, while a slow client is still served. An
     * upstream's X-Accel-Buffering: yes|no turns it on or off for its answer. */
    bool buffering;
    size_t buffers_bytes;
    uint64_t max_temp_bytes;
    const char *temp_path;
};

#endif
