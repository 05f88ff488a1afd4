/* config.h — the configuration file, parsed into plain structs.
 *
 * The syntax is nginx's: `name arg ...;` statements, `name arg ... { ... }` blocks,
 * `#` comments, "quoted" and 'quoted' arguments. Parsing has two steps: the file becomes
 * a tree of statements (struct conf_node), then the top-level directives are interpreted
 * into struct config. Every error names the file and line.
 */
#ifndef LFHTTPD_CONFIG_H
#define LFHTTPD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "directive.h"
#include "lf_group.h" /* enum lf_strategy, enum lf_promotion */

#define CONFIG_MAX_LISTEN 16
#define CONFIG_MAX_INDEX 8

struct config_listen {
    struct sockaddr_storage addr;
    socklen_t addr_len;
    char text[120]; /* as written, for messages ("unix:" and a path of up to 107 bytes) */
    unsigned line;  /* of its `listen` statement, for messages (0: the command line's) */
    bool ssl;      /* `listen ADDR ssl`: connections here speak TLS (tls.h) */
    /* `listen ADDR reuseport`: other processes (of the same user, also asking for it) may
     * listen on the address too, and the kernel spreads the connections over all of them.
     * Without it the address is ours alone, even with one socket per thread group. */
    bool reuseport;
    /* `listen ADDR proxy_protocol`: each connection starts with a PROXY protocol header
     * (proxy_protocol.h), read before the TLS handshake and the first request. */
    bool proxy_protocol;
    /* nginx's socket parameters of the address (0 where not said). As nginx's, they are said
     * for an address in one `listen` only (options_set), and any of them, or `bind`, gives
     * the address a socket of its own even where the wildcard of its port listens. */
    bool options_set;
    bool bind;
    /* Computed once the servers' addresses are merged: no `bind` and a wildcard address of
     * the same family and port listens, so that socket accepts this address's connections
     * (nginx's one `*:80` for `listen 80` and `listen 127.0.0.1:80`); the address still
     * chooses its servers, `ssl` and `proxy_protocol`. */
    bool via_wildcard;
    bool deferred;     /* `deferred`: said; every listener has TCP_DEFER_ACCEPT anyway */
    bool ipv6only_off; /* `ipv6only=off`: a [::] socket takes IPv4 connections too */
    bool fastopen;     /* `fastopen=N`: TCP_FASTOPEN with fastopen_qlen */
    uint8_t so_keepalive; /* `so_keepalive=`: 0 not said, 1 on, 2 off */
    int fastopen_qlen;
    int backlog;       /* `backlog=N`: listen()'s queue; 0: 4096 */
    int rcvbuf_bytes;  /* `rcvbuf=SIZE`: SO_RCVBUF of the socket (and so of its connections) */
    int sndbuf_bytes;  /* `sndbuf=SIZE`: SO_SNDBUF, the same way */
    int keepidle_s;    /* so_keepalive=IDLE:INTVL:CNT (TCP_KEEPIDLE, TCP_KEEPINTVL, */
    int keepintvl_s;   /* TCP_KEEPCNT); 0: the kernel's */
    int keepcnt;
};

enum log_level { LOG_LEVEL_ERROR = 0, LOG_LEVEL_WARN, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG };

#define CONFIG_MAX_CLASSES 8
#define CONFIG_MAX_GROUPS 64   /* thread groups of one class */
/* `groups` when the file does not say: one per CPU with Leader/Followers, else one. */
#define CONFIG_GROUPS_UNSET 0xffffffffu
#define CONFIG_CLASS_RULES 16

/* An IPv4 or IPv6 network, for `match addr`. */
struct config_cidr {
    int family;
    uint8_t addr[16];
    unsigned prefix_bits;
};

/* A service class: its own Leader/Followers group, thread priority and limits, and the
 * rules that send connections and requests to it. */
struct config_class {
    char name[32];
    unsigned line;
    unsigned threads;        /* 0 = one per CPU */
    unsigned groups;         /* the threads split into this many groups; 0 = one per CPU;
                                CONFIG_GROUPS_UNSET: not said */
    int nice;                /* thread priority as a nice value: high -10, normal 0, low 10 */
    unsigned max_connections; /* 0 = only the server-wide limit */
    struct config_listen listen[CONFIG_MAX_LISTEN]; /* connections accepted here are ours */
    unsigned n_listen;
    char paths[CONFIG_CLASS_RULES][256]; /* `match path PREFIX` (decoded path prefixes) */
    unsigned n_paths;
    char hosts[CONFIG_CLASS_RULES][256]; /* `match host NAME` (without port, lowercase) */
    unsigned n_hosts;
    struct config_cidr addrs[CONFIG_CLASS_RULES]; /* `match addr CIDR` (client address) */
    unsigned n_addrs;
};

/* nginx's per-block settings of a request's connection (http, server, location): the top
 * level's are the config's fields of the same names; a server's and a location's are merged
 * over the block around them (module_level.c); a connection points at those of the block
 * its last request was answered from (http_source.h). */
struct config_limits {
    uint64_t max_body_size;          /* client_max_body_size; 0: no limit */
    uint64_t client_body_buffer_size; /* the longest body $request_body shows (nginx keeps
                                         such a body in memory, a longer one in a file) */
    unsigned client_body_timeout_ms; /* the longest wait for the next bytes of a body */
    unsigned keepalive_timeout_ms;   /* idle between requests; 0: no keep-alive */
    unsigned keepalive_header_s;     /* "Keep-Alive: timeout=N"; 0: none */
    unsigned keepalive_requests;     /* requests a connection serves; 0: no limit */
    unsigned send_timeout_ms;        /* a response the client stops reading */
    unsigned keepalive_time_ms;      /* keepalive_time: a connection's life for keep-alive */
    uint64_t limit_rate;             /* limit_rate: bytes per second a response is sent at;
                                        0: no limit (conn.c paces it) */
    uint64_t limit_rate_after;       /* limit_rate_after: bytes sent before the pacing starts */
    uint8_t keepalive_disable;       /* enum config_keepalive_disable bits */
    bool say_keep_alive;             /* a file with nginx's `http { }`: every kept HTTP/1.1
                                        answer says "Connection: keep-alive", as nginx's */
};

/* keepalive_disable: the browsers whose requests close their connection (nginx's: MSIE 6
 * and older on a POST, Safari on Mac OS X). */
enum config_keepalive_disable {
    CONFIG_KA_DISABLE_MSIE6 = 1,
    CONFIG_KA_DISABLE_SAFARI = 2,
};

struct config {
    char file[CONFIG_PATH_MAX]; /* the file it was read from, "" for built-in defaults */

    struct config_listen listen[CONFIG_MAX_LISTEN];
    unsigned n_listen;

    char root[CONFIG_PATH_MAX];
    char index[CONFIG_MAX_INDEX][256];
    unsigned n_index;

    unsigned threads; /* 0 = one per CPU */
    /* The default class's threads split into this many thread groups, each with its own
     * handle set and listening sockets (SO_REUSEPORT); 0 = one per CPU (at most threads);
     * CONFIG_GROUPS_UNSET when not said. */
    unsigned groups;
    enum lf_strategy concurrency; /* how every class's threads share its connections */
    enum lf_reactivation reactivation; /* how a connection's handle is reactivated */
    enum lf_promotion promotion;  /* Leader/Followers: which waiting thread leads next */
    unsigned max_connections;

    size_t max_header_size;  /* request line + fields, at most CONFIG_MAX_HEADER_SIZE */
    unsigned max_headers;
    uint64_t max_body_size;
    uint64_t max_body_memory;      /* bytes of collected bodies held at once; 0 = no bound */
    uint64_t client_body_buffer_size; /* the top level's (struct config_limits) */
    uint64_t client_body_min_rate; /* bytes per second a body must average; 0 = none */

    unsigned header_timeout_ms;
    unsigned client_body_timeout_ms; /* the longest wait for the next bytes of a body */
    unsigned keepalive_timeout_ms;
    unsigned keepalive_header_s; /* keepalive_timeout's second value: "Keep-Alive: timeout=N" */
    unsigned send_timeout_ms;
    uint64_t limit_rate, limit_rate_after; /* the top level's (struct config_limits) */
    /* A parked response must go out at this average rate (bytes per second) since it was
     * parked, after a grace of send_timeout; 0: no minimum (see conn.h). */
    unsigned send_min_rate;
    /* Memory bytes of parked responses, all connections together; 0: no limit. */
    uint64_t max_parked_size;
    unsigned shutdown_timeout_ms;
    /* After SIGTERM, how long to go on serving, with the health handler answering 503,
     * before the graceful shutdown starts; 0: at once. */
    unsigned shutdown_delay_ms;
    unsigned keepalive_requests; /* 0 = unlimited */
    unsigned keepalive_time_ms;  /* keepalive_time */
    uint8_t keepalive_disable;   /* enum config_keepalive_disable bits */

    char access_log[CONFIG_PATH_MAX]; /* path, "stdout", "stderr", or "off" */
    bool access_log_json;             /* JSON lines instead of Combined Log Format */
    bool access_log_request_id;       /* each line ends with the request's $request_id */
    /* The top level's access_log statements are nginx's, with a format, options or more
     * than one: mod_log writes them, and access_log above is "off". */
    bool access_log_by_format;
    unsigned access_log_statements; /* how many the top level has (while reading) */
    char error_log[CONFIG_PATH_MAX];  /* path, "stdout" or "stderr" */
    enum log_level error_level;
    bool server_tokens;
    bool sendfile; /* file bodies with sendfile(2); off: read into a buffer and written */
    bool absolute_redirect; /* a redirect to a path names the host and port (nginx's) */

    /* nginx's main context and events { } */
    char user[64], group[64]; /* `user`: who to become after binding; "" none (or not root) */
    unsigned rlimit_nofile;   /* `worker_rlimit_nofile`: descriptors; 0: the hard limit */
    char pid_file[CONFIG_PATH_MAX]; /* `pid`: written at start, removed at exit; "" none */
    unsigned worker_connections;    /* events' `worker_connections`; 0: not said */
    bool http_block; /* the file has nginx's `http { }`: nginx's defaults where lfhttpd's
                      * differ (compression: mod_gzip.c) */
    /* Notices, one "FILE:LINE: message" a line: what nginx's directives do here (printed
     * by -t, logged at start). */
    char notes[8192];

    /* Service classes beyond the default one (which has the top-level listen, threads and
     * max_connections, and takes whatever no class matches). */
    struct config_class classes[CONFIG_MAX_CLASSES];
    unsigned n_classes;

    struct conf_node *tree; /* the whole file, for directives of later parts */
};

/* ADDR or ADDR/BITS, IPv4 or IPv6, into c: 0, or -1 when it is neither. */
int config_cidr_parse(const char *text, struct config_cidr *c);
/* Does the client address match the network? */
bool config_cidr_match(const struct config_cidr *c, const struct sockaddr *sa);

/* The largest max_header_size: the size of the per-thread stack buffer requests are read into. */
#define CONFIG_MAX_HEADER_SIZE 16384

/* Fill cfg with the built-in defaults. */
void config_defaults(struct config *cfg);

/* Read and interpret the file at path into cfg (which should hold defaults). The modules'
 * directives (known) are checked for where they stand and how often they repeat; their
 * values are read by their owners (module_read_directives).
 * Returns 0, or -1 with every error found, one "FILE:LINE: message" a line, in err. */
int config_load(struct config *cfg, const char *path, config_known_fn known, char *err,
                size_t err_len);

/* The core's directive table: for the reference (conf_dump_table), and for the settings of
 * each block (module_level.c), which finds its statements by their lines' .id. */
const struct conf_directive *config_core_directives(void);
/* The table of `events { }` (nginx's), for the reference. */
const struct conf_directive *config_events_directives(void);

/* What a line of the core's table sets in a block (struct conf_directive.id). */
enum config_core_id {
    CONFIG_ID_NONE = 0,
    CONFIG_ID_ROOT,
    CONFIG_ID_ALIAS,
    CONFIG_ID_INDEX,
    CONFIG_ID_TRY_FILES,
    CONFIG_ID_RETURN,
    CONFIG_ID_ERROR_PAGE,
    CONFIG_ID_CLASS,
    CONFIG_ID_ABSOLUTE_REDIRECT,
    CONFIG_ID_SERVER_NAME_IN_REDIRECT,
    CONFIG_ID_PORT_IN_REDIRECT,
    CONFIG_ID_SERVER,
    CONFIG_ID_REWRITE,
    CONFIG_ID_BREAK,
    CONFIG_ID_IF,
    CONFIG_ID_LIMIT_EXCEPT,
    CONFIG_ID_SET,
    CONFIG_ID_INTERNAL,
    /* struct config_limits, per block */
    CONFIG_ID_CLIENT_MAX_BODY_SIZE,
    CONFIG_ID_CLIENT_BODY_TIMEOUT,
    CONFIG_ID_CLIENT_BODY_BUFFER_SIZE,
    CONFIG_ID_KEEPALIVE_TIMEOUT,
    CONFIG_ID_KEEPALIVE_REQUESTS,
    CONFIG_ID_SEND_TIMEOUT,
    CONFIG_ID_KEEPALIVE_TIME,
    CONFIG_ID_KEEPALIVE_DISABLE,
    CONFIG_ID_LIMIT_RATE,
    CONFIG_ID_LIMIT_RATE_AFTER,
    CONFIG_ID_ERROR_LOG,     /* in a server or location */
    CONFIG_ID_LOG_NOT_FOUND,
};

/* The next top-level statement named `name` after `after` (NULL: from the start). */
const struct conf_node *config_next(const struct config *cfg, const char *name,
                                    const struct conf_node *after);

/* `keepalive_timeout TIMEOUT [HEADER_TIMEOUT]` (n's words): nginx's two values. Returns 0,
 * or -1 with the reason in msg. */
/* `keepalive_disable none | msie6 | safari ...` into enum config_keepalive_disable bits. */
int config_parse_keepalive_disable(const struct conf_node *n, uint8_t *bits, char *msg,
                                   size_t len);
int config_parse_keepalive(const struct conf_node *n, unsigned *timeout_ms, unsigned *header_s,
                           char *msg, size_t len);

/* Parse "ADDR:PORT", "PORT", "[V6]:PORT" or "*:PORT" into l. Returns 0 or -1. */
int config_parse_listen(const char *text, struct config_listen *l);
/* The same, where PORT may be a range FIRST-LAST, as nginx's `listen` takes
 * (127.0.0.1:8000-8003): l is the first port's address and *ports how many there are
 * (1 without a range). Returns 0, -1 (not an address) or -2 (LAST before FIRST). */
int config_parse_listen_range(const char *text, struct config_listen *l, unsigned *ports);
/* l, the first address of a range, made its k-th (its port and its text). */
void config_listen_nth(struct config_listen *l, unsigned k);
/* How many addresses the `listen` statements of a block hold, their ranges counted
 * (one for a statement that does not parse: it is reported where it stands). */
unsigned config_listen_count(const struct conf_node *first);
/* The parameters a `listen` takes, for messages (a server's takes default_server and http2
 * too). */
#define LISTEN_PARAMS "ssl, reuseport, proxy_protocol, bind, deferred, backlog=, rcvbuf=, " \
    "sndbuf=, ipv6only=, so_keepalive= and fastopen="
/* What config_listen_param made of a word. */
enum config_listen_word {
    CONFIG_LISTEN_INVALID = -1, /* one of them with a wrong value: msg says why */
    CONFIG_LISTEN_UNKNOWN = 0,  /* none of them (msg says so, for the caller to extend) */
    CONFIG_LISTEN_SET = 1,      /* set in l */
    CONFIG_LISTEN_IGNORED = 2,  /* `accept_filter=`: FreeBSD's; msg says it is ignored */
};
/* A parameter of `listen` after the address, set in l: `ssl`, `reuseport`,
 * `proxy_protocol` and nginx's socket parameters (`backlog=`, `rcvbuf=`, `sndbuf=`,
 * `deferred`, `bind`, `ipv6only=`, `so_keepalive=`, `fastopen=`). */
enum config_listen_word config_listen_param(struct config_listen *l, const char *word,
                                            char *msg, size_t len);
/* Whether l is 0.0.0.0 or [::] (any port). */
bool config_listen_is_wildcard(const struct config_listen *l);
/* The last step of the addresses in ls: which of them the wildcard of their port accepts
 * for (via_wildcard). -1 with msg when two of them cannot both be bound on Linux (an
 * address with its own socket beside the wildcard of its port, as nginx's bind() fails);
 * *at is then the later one. */
int config_listen_settle(struct config_listen *ls, unsigned n, unsigned *at, char *msg,
                         size_t len);

void config_free(struct config *cfg);

/* nginx's error-log level name (debug, info, notice, warn, error, crit, alert, emerg) as
 * lfhttpd's level; *above_error: crit, alert or emerg, graver than lfhttpd's error. 0, or
 * -1 for an unknown name. */
int config_log_level(const char *name, enum log_level *level, bool *above_error);

#endif
