/* module.h — the interface every module implements, and the chain that calls them.
 *
 * A module is a struct of optional hooks (lighttpd's plugin struct and h2o's handler
 * chain are the models). For each request the chain calls, in the order of the module
 * table in module.c:
 *
 *   rewrite  every module, in order; may change the path
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
#include <sys/socket.h>
#include <sys/stat.h>

#include "config.h"
#include "http_parse.h"
#include "http_response.h"
#include "open_beneath.h"

enum mod_result {
    MOD_DECLINED = 0, /* not mine: ask the next module */
    MOD_HANDLED = 1,  /* the response is filled */
    MOD_ERROR = -1,   /* failed: the chain answers 500 */
};

/* The decoded path's buffer. Decoding never lengthens a path, so it holds the path of any
 * request the default max_header_size (8k) lets in, as nginx's 8 KiB request line; a
 * longer path (max_header_size raised) is 414. Several frames of the request path hold
 * one on the stack, whose size is bounded for Thread-per-Connection. */
#define REQUEST_PATH_MAX 8192

struct module_mount;
struct module_level;
struct upstream;
struct server;
struct site_set;
struct site_server;

struct request {
    const struct http_request *http; /* the parsed head: slices into the request buffer */
    char *path;                      /* percent-decoded, dot segments removed, NUL-ended; */
    size_t path_len;                 /* a buffer of REQUEST_PATH_MAX that rewrite may edit */
    const struct sockaddr *peer;     /* the client */
    const struct sockaddr *local;    /* the listener the connection came in on */
    int local_fd;                    /* the connection's socket: for $server_addr only */
    bool https;                      /* it came over TLS: $scheme, $https, redirects */
    /* $request_id's 33 bytes (vars.h), in the frame that made the request, "" until the
     * first expansion makes it: copies of the request (internal redirects) share it. */
    char *request_id;
    int64_t now_s;
    const struct config *cfg;
    int root_fd;           /* the document root, opened O_PATH | O_DIRECTORY */
    const char *root_real; /* its real path, for open_beneath() */
    unsigned root_id;      /* the root's number in the generation: caches keyed by a path
                              beneath the root put it in their keys */
    struct http_slice args; /* the query: the request's, or a try_files or error_page */
    bool has_args;          /* URI's "?..." (visible ASCII; anything else %XX-encoded) */
    const char *file;      /* the path beneath the root ("/..."): path, or under `alias` */
    size_t file_len;       /* what follows the location's prefix */
    /* The settings of the block that answers: the location, else the server, else the
     * top level. A module's own are module_settings(req, its index). */
    const struct module_level *level;
    const struct site_server *site; /* the server block, NULL without server blocks */
    /* The core's decisions (module_route.c): the block the path first matched, whose
     * access rules hold even after an internal redirect; a `return` to answer with; a
     * try_files =CODE. */
    const struct module_level *first_level;
    int return_status;
    const struct vars_value *return_text;
    int try_status;
    const struct module_mount *mount; /* the mount the path falls under, or NULL */
    const char *body;                 /* the whole request body, when the mount asked for */
    size_t body_len;                  /* it (wants_body); else NULL (a body is skipped) */
    const struct server *server;      /* for module_server_stats() */
    const struct module_chain *chain; /* for module_content_type() */
};

/* A path prefix a module answers for, e.g. `handler /echo echo;`. */
struct module_mount {
    char prefix[256];
    size_t prefix_len;
    unsigned module;  /* index in the chain */
    void *data;       /* the module's own, from module_mount_add */
    bool wants_body;  /* the core reads the whole request body before calling handle */
    bool level_only;  /* a location's handler: not found by its prefix */
    unsigned line;    /* the statement that mounted it, for messages */
};

struct module_chain;
struct module_init;

/* What a module's block hook is given. */
struct module_block {
    struct module_init *mi;        /* for module_error(); mi->cfg the configuration */
    unsigned context;              /* CONF_TOP, CONF_SERVER or CONF_LOCATION */
    const struct conf_node *node;  /* the block's statement (NULL at the top level) */
    const struct conf_node *first; /* its first statement inside */
    const void *outer;             /* the module's settings of the enclosing block */
    struct module_level *level;    /* the level being built: for module_block_mount() */
    bool prefix_location;          /* a `location /p` or `location = /p` */
    const char *pattern;           /* the location's pattern, "" elsewhere */
};

/* What init is given: the configuration, and where to report errors. */
struct module_init {
    const struct config *cfg;
    struct module_chain *chain;
    unsigned index; /* this module's place in the chain */
    char *err;
    size_t err_len;
};

struct strbuf;

struct module {
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
    void (*fini)(void *state);
    enum mod_result (*rewrite)(void *state, struct request *req);
    enum mod_result (*access)(void *state, const struct request *req, struct response *resp);
    enum mod_result (*handle)(void *state, const struct request *req, struct response *resp);
    void (*filter)(void *state, const struct request *req, struct response *resp);
    void (*log)(void *state, const struct request *req, const struct response *resp);
    /* The media type of a file (path, and its open fd and stat), or NULL if unknown. Not
     * part of answering: modules that serve files ask through module_content_type(). */
    const char *(*content_type)(void *state, const struct request *req, const char *path,
                                int fd, const struct stat *st);
    /* Settings per block, as nginx's configuration of a location: called for the top
     * level, then each server, then each of its locations, after init. Reads the block's
     * statements of this module (module_block_read), inherits what they leave unset from
     * b->outer (this module's settings of the block around it; NULL at the top level), and
     * returns the settings, or NULL after module_error(). A block that sets nothing of
     * the module's may return b->outer itself: it is then not freed twice. */
    /* Does file (beneath req's root, "/..."), exist, as a directory (dir) or not? 1 yes,
     * 0 no, -1 not known (the core then looks itself). For try_files: the open-file cache
     * knows the files it serves without a system call. */
    int (*file_exists)(void *state, const struct request *req, const char *file, bool dir);
    void *(*block)(void *state, const struct module_block *b);
    void (*block_free)(void *state, void *settings);
    /* The upstream sets the module sends requests to, for a status page: up to max of them
     * into out; returns how many there are. */
    unsigned (*upstreams)(void *state, struct upstream **out, unsigned max);
    /* Its own figures for a metrics scrape, in the Prometheus text format (version 0.0.4):
     * whole families, HELP and TYPE lines included, names starting with "lfhttpd_". */
    void (*metrics)(void *state, struct strbuf *b);
};

#define MODULE_CHAIN_MAX 16
#define MODULE_MOUNTS_MAX 64
#define LEVEL_INDEX_MAX CONFIG_MAX_INDEX
#define LEVEL_TRY_MAX CONFIG_MAX_ARGS
#define LEVEL_ERROR_PAGES_MAX 64

/* A document root (or an `alias` directory), opened once per generation. */
struct level_root {
    int fd;      /* O_PATH | O_DIRECTORY */
    char *real;  /* its real path */
    unsigned id; /* equal for equal real paths */
};

struct vars_value;

/* `error_page CODE... [=[ANSWER]] URI`, one code each. */
#define LEVEL_ANSWER_OWN (-2) /* a bare "=": whatever the page answers */
struct level_error_page {
    int status;
    int answer; /* =ANSWER; 0: the original status; LEVEL_ANSWER_OWN: the page's own */
    const struct vars_value *uri;
};

/* The settings of one block: the top level, a server or a location. What a block does not
 * set it inherits from the one around it, as nginx merges (module_level.c). */
struct module_level {
    unsigned context; /* CONF_TOP, CONF_SERVER, CONF_LOCATION */
    unsigned line;    /* the block's statement */
    const struct level_root *root;
    bool alias;               /* root is an `alias`: the location's prefix is replaced */
    size_t alias_prefix_len;  /* the prefix that `alias` replaces */
    const char (*index)[256]; /* index file names */
    unsigned n_index;
    const struct vars_value *try_files[LEVEL_TRY_MAX]; /* not inherited, as nginx */
    bool try_dir[LEVEL_TRY_MAX]; /* written with a trailing '/': a directory is wanted */
    unsigned n_try;
    bool relative_redirect; /* absolute_redirect off */
    int return_status; /* `return`: 0 none */
    const struct vars_value *return_text; /* its URL or text, or NULL */
    const struct level_error_page *error_pages; /* inherited when a block has none */
    unsigned n_error_pages;
    bool error_pages_own;
    const struct module_mount *mount; /* `handler NAME;`, `cgi DIR;` in a location */
    unsigned class_index; /* `class NAME;`: 1 + its place in cfg->classes; 0: not said */
    void *conf[MODULE_CHAIN_MAX];     /* each module's block settings */
};

struct module_chain {
    const struct module *mods[MODULE_CHAIN_MAX];
    void *state[MODULE_CHAIN_MAX];
    bool has_mounts[MODULE_CHAIN_MAX];
    unsigned n;
    struct module_mount mounts[MODULE_MOUNTS_MAX];
    unsigned n_mounts;
    /* Server and location blocks (module_level.c) */
    struct site_set *sites;       /* NULL: none, one implicit server */
    struct module_level *levels;  /* [0] the top level, then servers and locations */
    unsigned n_levels;
    struct level_root *roots;
    unsigned n_roots;
    void *index_room; /* the index lists blocks set */
    uint64_t id;      /* unique to this build of the levels, never reused */
};

/* The module's settings for the block that answers req (its block hook's result). */
static inline const void *module_settings(const struct request *req, unsigned index)
{
    return req->level ? req->level->conf[index] : NULL;
}

/* For a block hook: read the block's statements of this module (its .directives) into
 * base. Returns 0, or -1 after reporting every error. */
int module_block_read(const struct module_block *b, void *base);
/* For a block hook: does the block hold any statement of this module's directives? */
bool module_block_has(const struct module_block *b);
/* For a block hook of a location: this location's handler is the module, with data
 * (`handler NAME;`, `cgi DIR;`). Returns 0, or -1 after module_error(). */
int module_block_mount(const struct module_block *b, const struct conf_node *where,
                       void *data, bool wants_body);

/* For init: mount the module on a path prefix. Returns 0, or -1 after module_error(). */
int module_mount_add(struct module_init *mi, const struct conf_node *where, const char *prefix,
                     void *data, bool wants_body);
/* For init: add "FILE:LINE: module: message" (where may be NULL) to the errors, and
 * return -1. */
int module_error(struct module_init *mi, const struct conf_node *where, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* For init: read the module's directives (its .directives) from the configuration into
 * base, the struct their offsets point into, which holds the defaults. Setters are given
 * mi as their ctx. Returns 0, or -1 after reporting every error. */
int module_read_directives(struct module_init *mi, void *base);

/* For init: the statement of the directive `name`, for the line of an error found later
 * (a file that does not open), or NULL if the configuration has none. */
const struct conf_node *module_directive(struct module_init *mi, const char *name);

/* The line of some module's table that names `name` (the configuration's config_known_fn),
 * or NULL. */
const struct conf_directive *module_known_directive(const char *name, unsigned context);

/* Every module's directives, in the chain's order, as conf_dump_table prints them. */
void module_dump_directives(FILE *out);

/* Build the chain from the table of modules, in order, and init each one. Returns 0, or
 * -1 with the message in err. */
int module_chain_init(struct module_chain *c, const struct config *cfg, char *err,
                      size_t err_len);
/* After a configuration that loaded with errors (its statements parsed): init and fini every
 * module, to add their errors to err too, so that `lfhttpd -t` reports every one. */
void module_chain_check(const struct config *cfg, char *err, size_t err_len);
void module_chain_fini(struct module_chain *c);

/* Build the sites and each block's settings (module_level.c), after the modules' init.
 * Returns 0, or -1 with the messages in err. */
int module_levels_build(struct module_chain *c, const struct config *cfg, char *err,
                        size_t err_len);
void module_levels_free(struct module_chain *c);

/* Place the request (module_route.c): its server, location, `return`, `try_files`; run the
 * rewrite hooks and find the mount. Returns 0, or the status of an error to answer. */
int module_chain_route(const struct module_chain *c, struct request *req);
/* Run access, handle and filter hooks, and `error_page`; the response is always filled on
 * return. req may change: after an error page it is the page's request. */
void module_chain_answer(const struct module_chain *c, struct request *req,
                         struct response *resp);

/* Every module's upstream sets (the upstreams hooks), up to max into out; how many. */
unsigned module_upstreams(const struct module_chain *c, struct upstream **out, unsigned max);

/* Run the filter hooks alone: on the head of a proxied answer, once it has arrived
 * (resp_is_upstream_head), with the request as it was answered. */
void module_chain_filter(const struct module_chain *c, const struct request *req,
                         struct response *resp);

/* The service class a request's block names (`class NAME;` in its location or server):
 * 1 + the class's place in cfg->classes, or 0. Selection only: no try_files. */
unsigned module_chain_class(const struct module_chain *c, const struct sockaddr *local,
                            struct http_slice host, const char *path, size_t len);

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
/* Run the metrics hooks, in chain order. */
void module_chain_metrics(const struct module_chain *c, struct strbuf *b);
/* Run log hooks. */
void module_chain_log(const struct module_chain *c, const struct request *req,
                      const struct response *resp);

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

/* --- the reverse proxy (mod_proxy asks, the core's http_proxy.c does the I/O) ----------- */

struct upstream;
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
};

struct proxy_ops {
    /* Write the head of the request to the upstream, through its blank line, into
     * out[0..cap) (the core adds the body, req->body, after it): its length, or -1 if it
     * does not fit. keep_alive: the connection will be kept for another request. Called
     * once per request. */
    long (*request)(const void *conf, const struct request *req, bool keep_alive, char *out,
                    size_t cap);
    /* Start resp from the upstream's head h (status, the fields to relay, rewritten as the
     * configuration says). req: the request as it was answered (a copy the core kept), or
     * NULL if it could not be kept. The core then adds the framing (Content-Length or
     * chunked) and Connection. Returns 0, or -1 if the head cannot be relayed (502). */
    int (*head)(const void *conf, const struct request *req, const struct http_response_head *h,
                struct response *resp);
};

/* One location's `proxy_pass`, as the core needs it: read-only, as long as the generation. */
struct proxy_params {
    const struct proxy_ops *ops;
    const void *conf; /* the module's own, given to ops */
    struct upstream *upstream;
    unsigned connect_ms, send_ms, read_ms; /* proxy_connect_, _send_, _read_timeout */
    unsigned next_upstream;                /* PROXY_NEXT_* */
    unsigned tries;                        /* proxy_next_upstream_tries; 0: no limit */
};

/* A handler answers through the proxy with resp_proxy (http_response.h). */

/* Live figures of the whole server, for a status page. */
#define SERVER_STATS_GROUPS 8
struct server_stats {
    int64_t uptime_s;
    unsigned connections; /* open now, all groups */
    unsigned generation;  /* configuration generation: 1 at start, one more per reload */
    /* The process's context switches since start, every thread's (getrusage): voluntary
     * (a thread waited) and involuntary (preempted). */
    uint64_t ctx_voluntary, ctx_involuntary;
    unsigned n_groups;
    struct {
        char name[32];
        const char *strategy; /* "Leader/Followers", "Half-Sync/Half-Async"... (static) */
        unsigned threads;
        unsigned connections;
        int nice;
        uint64_t events, handoffs, waits;
        uint64_t requests;
        uint64_t p50_us, p99_us; /* service time percentiles (upper bounds: powers of 2) */
    } groups[SERVER_STATS_GROUPS];
    bool draining; /* in the shutdown_delay after SIGTERM (module_server_draining) */
};
void module_server_stats(const struct server *srv, struct server_stats *out);
/* Is the server in its shutdown_delay (SIGTERM received, still serving everything)? A
 * health check answers "not ready" then. One atomic load: cheap enough for every probe. */
bool module_server_draining(const struct server *srv);

/* Figures of the whole server for a metrics scrape (mod_metrics), beside server_stats:
 * counters since start, whatever reloads happened. */
#define SERVER_METRICS_STATES 7   /* enum conn_state: new, idle, head, body, send... */
#define SERVER_METRICS_BUCKETS 32 /* the service-time histogram's: times below 2^i us */
struct server_metrics {
    const char *version; /* static */
    unsigned generation;
    uint64_t reloads_ok, reloads_refused;
    double start_time_s; /* the Unix time the server started */
    uint64_t tls_handshakes, tls_resumed, tls_failed;
    unsigned n_classes;
    struct {
        char name[32];
        unsigned connections;
        unsigned by_state[SERVER_METRICS_STATES];
        uint64_t requests, by_status[5], bytes_sent, bytes_received;
        uint64_t latency_us_sum;
        uint64_t latency_us_log2[SERVER_METRICS_BUCKETS];
    } classes[SERVER_STATS_GROUPS];
};
void module_server_metrics(const struct server *srv, struct server_metrics *out);

#endif
