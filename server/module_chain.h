/* module_chain.h — the core's side of the module interface: the chain of modules built
 * from module_chain.c's table, and the functions the connection calls to route and answer a
 * request through it. No module includes this (tests/check_layers.py checks it): a module
 * sees module.h alone.
 */
#ifndef LFHTTPD_MODULE_CHAIN_H
#define LFHTTPD_MODULE_CHAIN_H

#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>

#include "module.h"

#define MODULE_CHAIN_MAX 24 /* modules in the table of module_chain.c (at most) */

struct module_level;
struct level_root;
struct site_set;

/* The modules of a generation, their states and mounts, and the settings of every block.
 * Built by module_chain_init and module_levels_build, read-only afterwards: every thread
 * routes through it without a lock. */
struct module_chain {
    const struct module *mods[MODULE_CHAIN_MAX]; /* in the order the hooks are called */
    void *state[MODULE_CHAIN_MAX];               /* each module's, from its init */
    bool has_mounts[MODULE_CHAIN_MAX]; /* owns a mount: its handle runs only under one */
    unsigned n;                        /* modules whose init succeeded */
    /* The modules with a log hook, and with a logs_request hook, in order: the hooks every
     * request runs, without a look at the modules that have none. */
    uint8_t log_mods[MODULE_CHAIN_MAX], n_log_mods;
    uint8_t logs_request_mods[MODULE_CHAIN_MAX], n_logs_request_mods;
    /* Likewise the modules with a rewrite, an access and a filter hook. */
    uint8_t rewrite_mods[MODULE_CHAIN_MAX], n_rewrite_mods;
    uint8_t access_mods[MODULE_CHAIN_MAX], n_access_mods;
    uint8_t filter_mods[MODULE_CHAIN_MAX], n_filter_mods;
    /* The modules whose post_read hook some block asked for (module_post_read_wanted): none
     * when no block configures one, and a request then pays nothing for the hook. */
    uint8_t post_read_mods[MODULE_CHAIN_MAX], n_post_read_mods;
    struct module_mount mounts[MODULE_MOUNTS_MAX];
    unsigned n_mounts;
    /* Server and location blocks (module_level.c) */
    struct site_set *sites;       /* NULL: none, one implicit server */
    struct rewrite_map *maps;     /* `map` blocks (rewrite.h), NULL: none */
    struct module_level *levels;  /* [0] the top level, then servers and locations */
    unsigned n_levels;
    struct level_root *roots;     /* the roots and aliases the blocks opened, once each */
    unsigned n_roots;
    void *index_room; /* the index lists blocks set */
    uint64_t id;      /* unique to this build of the levels, never reused */
};

/* The line of some module's table that names `name` (the configuration's config_known_fn),
 * or NULL. */
const struct conf_directive *module_known_directive(const char *name, unsigned context);

/* Every module's directives, in the chain's order, as conf_dump_table prints them. */
void module_dump_directives(FILE *out);

/* A module's place in every chain (module_settings()'s index); past the last if absent. */
unsigned module_chain_index(const struct module *m);

/* Build the chain from the table of modules, in order, and init each one. Returns 0, or
 * -1 with the message in err. */
int module_chain_init(struct module_chain *c, const struct config *cfg, char *err,
                      size_t err_len);
/* After a configuration that loaded with errors (its statements parsed): init and fini every
 * module, to add their errors to err too, so that `lfhttpd -t` reports every one. */
void module_chain_check(const struct config *cfg, char *err, size_t err_len);
void module_chain_fini(struct module_chain *c);

/* Place the request (module_route.c): its server, location, `return`, `try_files`; run the
 * rewrite hooks and find the mount. Returns 0, or the status of an error to answer. */
int module_chain_route(const struct module_chain *c, struct request *req);

/* Make uri[0, n) (an expanded value, "?args" replacing the request's) the request's path,
 * keeping its captures' bytes, as an internal redirect does. False: not clean, or too long. */
bool module_route_set_path(struct request *req, const char *uri, size_t n);
/* Run access, handle and filter hooks, and `error_page`; the response is always filled on
 * return. req may change: after an error page it is the page's request. */
void module_chain_answer(const struct module_chain *c, struct request *req,
                         struct response *resp);

/* Run the filter hooks alone: on the head of a proxied answer, once it has arrived
 * (resp_is_upstream_head), with the request as it was answered. */
/* An answer that failed after its handler (a proxy's 502 or 504, an upstream's error
 * intercepted), resp holding that error: answered again by the error_page of req's block
 * for resp->status, as module_chain_answer does, and filtered. req is a copy whose path
 * has REQUEST_PATH_MAX bytes of room (and file_room REQUEST_FILE_MAX, or NULL). False, resp
 * untouched, when the block has no page for it. */
bool module_chain_error_page(const struct module_chain *c, struct request *req,
                             struct response *resp);
/* An application's or upstream's answer named X-Accel-Redirect: uri[0..n) (a path, its
 * own arguments or none; or a named location) answers instead, as nginx's: an internal GET
 * (HEAD stays HEAD) with the client's conditions and ranges, routed again; its answer in
 * resp (freshly initialised by the caller), not yet filtered. req as for
 * module_chain_error_page; after the call it is the redirected request. Returns 0, or -1
 * when the answer would be streamed by another source (a proxy, an application): resp
 * then holds a 500, as that is not followed here. A path that is not absolute or has dot
 * segments is 404 (nginx's unsafe URI). */
int module_chain_accel_redirect(const struct module_chain *c, struct request *req,
                                struct response *resp, const char *uri, size_t n);
/* Has req's block an error_page for status? */
bool module_chain_has_error_page(const struct request *req, int status);
void module_chain_filter(const struct module_chain *c, const struct request *req,
                         struct response *resp);

/* The service class a request's block names (`class NAME;` in its location or server):
 * 1 + the class's place in cfg->classes, or 0. Selection only: no try_files. */
unsigned module_chain_class(const struct module_chain *c, const struct sockaddr *local,
                            struct http_slice host, const char *path, size_t len);

/* The connection settings (client_max_body_size, keepalive_timeout...) of a connection to
 * `local` before its first request is placed: those of the default server of its address,
 * as nginx's, or the top level's. */
const struct config_limits *module_chain_default_limits(const struct module_chain *c,
                                                        const struct sockaddr *local);

/* Build the sites and each block's settings, after the modules' init
 * (module_level.c). Returns
 * 0, or -1 with the messages in err. */
int module_levels_build(struct module_chain *c, const struct config *cfg, char *err,
                        size_t err_len);
void module_levels_free(struct module_chain *c);

/* Does a module write req's access log itself (a server's or location's `access_log`,
 * `off` included), so that the top-level access log leaves it out, as nginx's inner
 * access_log replaces the outer ones? */
bool module_chain_logs_request(const struct module_chain *c, const struct request *req);
/* Run the tick hooks (module.h), now_ms being clock_now_ms(). */
void module_chain_tick(const struct module_chain *c, int64_t now_ms);
/* Run log hooks. */
void module_chain_log(const struct module_chain *c, const struct request *req,
                      const struct response *resp);

#endif
