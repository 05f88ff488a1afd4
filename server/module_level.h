/* module_level.h — the settings of each block (the top level, every server, every
 * location): the core's own (root or alias, index, try_files, return, error_page, a
 * location's handler, client_max_body_size and the connection's timeouts) and each
 * module's, as its block hook made them. Built once per generation by module_level.c, read
 * by module_route.c and, for the connection settings, http_conn.c. No module includes
 * this: a module reads its own settings with module_settings() and the index names with
 * module_index_name() (module.h).
 */
#ifndef LFHTTPD_MODULE_LEVEL_H
#define LFHTTPD_MODULE_LEVEL_H

#include <stdbool.h>
#include <stddef.h>

#include "module_chain.h"
#include "secure_link.h"

#define LEVEL_INDEX_MAX CONFIG_MAX_INDEX /* names of one `index` */
#define LEVEL_TRY_MAX CONFIG_MAX_ARGS    /* entries of one `try_files` */

/* A document root (or an `alias` directory), opened once per generation. */
struct level_root {
    int fd;      /* O_PATH | O_DIRECTORY */
    char *real;  /* its real path */
    unsigned id; /* equal for equal real paths */
};

/* `error_page CODE... [=[ANSWER]] URI`, one code each. */
#define LEVEL_ANSWER_OWN (-2) /* a bare "=": whatever the page answers */
struct level_error_page {
    int status; /* the status the page stands in for */
    int answer; /* =ANSWER; 0: the original status; LEVEL_ANSWER_OWN: the page's own */
    const struct vars_value *uri; /* the page, variables expanded per request */
};

/* The settings of one block: the top level, a server or a location. What a block does not
 * set it inherits from the one around it, as nginx merges (module_level.c). */
struct module_level {
    unsigned context; /* CONF_TOP, CONF_SERVER, CONF_LOCATION */
    unsigned line;    /* the block's statement */
    const struct level_root *root; /* `root` or `alias`, inherited */
    bool alias;               /* root is an `alias`: the location's prefix is replaced */
    size_t alias_prefix_len;  /* the prefix that `alias` replaces */
    const char *alias_file;   /* `alias FILE`: "/NAME" beneath root, for the prefix alone */
    /* root or alias as written (a root's one trailing '/' taken off, as nginx): the
     * $document_root of a root without variables. */
    const char *root_text;
    size_t root_text_len;
    /* root or alias with variables, or an alias in a regex location (nginx's: its
     * expansion names the whole file): expanded per request, and `root` above is then the
     * directory its literal text begins with (the anchor), opened at load, which the file
     * must stay beneath. NULL: root_text is the root. */
    const struct vars_value *root_value;
    size_t root_anchor_len; /* the anchor's bytes of the expansion ("/srv" of "/srv/$host") */
    bool alias_whole;       /* an alias in a regex location: the expansion is the file */
    bool root_value_own;    /* root_value is this block's (freed with it), not inherited */
    const char (*index)[256]; /* index file names, inherited */
    unsigned n_index;         /* how many */
    /* index names with variables, compiled (NULL: the name as written); inherited with
     * index, freed by the level that owns them */
    const struct vars_value *index_values[LEVEL_INDEX_MAX];
    bool index_values_own;
    const struct vars_value *try_files[LEVEL_TRY_MAX]; /* not inherited, as nginx */
    bool try_dir[LEVEL_TRY_MAX]; /* written with a trailing '/': a directory is wanted */
    unsigned n_try;              /* try_files entries; 0: none */
    bool relative_redirect; /* absolute_redirect off */
    bool name_in_redirect;  /* server_name_in_redirect on */
    bool no_port_in_redirect; /* port_in_redirect off */
    int return_status; /* `return`: 0 none */
    const struct vars_value *return_text; /* its URL or text, or NULL */
    /* `rewrite`, `break` and `return` in order (rewrite.h); NULL: none but `return` */
    const struct rewrite_prog *rewrite;
    const struct level_error_page *error_pages; /* inherited when a block has none */
    unsigned n_error_pages;
    bool error_pages_own; /* error_pages is this block's (freed with it), not inherited */
    const struct module_mount *mount; /* `handler NAME;`, `cgi DIR;` in a location */
    /* nginx's auto_redirect: an upstream answers this location, whose pattern ends in '/';
     * its path without that slash is redirected (301) to it. */
    bool slash_redirect;
    bool internal; /* `internal`: only internal redirects reach the location */
    bool in_if;    /* an `if`'s or a `limit_except`'s in a location (nginx's implicit
                      locations) */
    /* `limit_except`: its level, whose access settings are those of a request whose
     * method is not in limit_except_lets (bits 1 << enum http_method); NULL: none. */
    const struct module_level *limit_except;
    unsigned limit_except_lets;
    const struct module_level *outer; /* a location's enclosing block: server or location */
    unsigned class_index; /* `class NAME;`: 1 + its place in cfg->classes; 0: not said */
    /* client_max_body_size, keepalive_timeout...: each inherited unless the block sets it */
    struct config_limits limits;
    /* `error_log`: where the messages about its requests go, inherited; NULL: the
     * top-level error log. error_log_own: this block's (closed and freed with it). */
    const struct log_dest *error_log;
    bool error_log_own;
    bool log_not_found; /* `log_not_found`, inherited */
    /* `valid_referers` (referer.h), inherited; NULL: none ($invalid_referer is empty).
     * referers_own: this block's (freed with it). */
    const struct referer_list *referers;
    bool referers_own;
    /* secure_link, secure_link_md5, secure_link_secret (secure_link.h), each inherited;
     * secure_link_own: which of the first two are this block's (freed with it). */
    struct secure_link_conf secure_link;
    bool secure_link_own[2];
    void *conf[MODULE_CHAIN_MAX];     /* each module's block settings */
};

#endif
