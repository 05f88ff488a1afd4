/* mod_headers.h — `add_header`, `add_trailer` and `expires`, nginx's
 * ngx_http_headers_module.
 *
 * The settings of one level (the top level, a server, a location) are a
 * struct headers_conf, filled by reading that level's statements with the module's own
 * table: conf_read_owned(reader, mod_headers.directives, block->children, &conf). The
 * setters use only base (never the reader's ctx), so any block's reader may apply them.
 *
 * Inheritance, as nginx merges (for whoever adds server and location blocks):
 *   - add_header: a level with at least one add_header has exactly its own list; a level
 *     with none inherits the whole list of the level around it. Lists are never joined.
 *   - add_trailer: the same, its list apart from add_header's.
 *   - expires: a level that does not say inherits the outer value.
 * headers_conf_merge(inner, outer) does both; an inherited list is borrowed, not copied
 * (headers_conf_free frees only what a level owns), so free the inner levels first or
 * together with the outer.
 */
#ifndef LFHTTPD_MOD_HEADERS_H
#define LFHTTPD_MOD_HEADERS_H

#include <stdbool.h>
#include <stdint.h>

#include "http_response.h"
#include "vars.h"

#define HEADERS_NAME_MAX 128

enum headers_expires {
    HEADERS_EXPIRES_UNSET = 0, /* not said here: inherit (top level: off) */
    HEADERS_EXPIRES_OFF,
    HEADERS_EXPIRES_EPOCH,     /* Expires: 1 Jan 1970 00:00:01, Cache-Control: no-cache */
    HEADERS_EXPIRES_MAX,       /* Expires: 31 Dec 2037 23:55:55, max-age=315360000 */
    HEADERS_EXPIRES_TIME,      /* now + expires_s (negative: in the past, no-cache) */
    HEADERS_EXPIRES_MODIFIED,  /* Last-Modified + expires_s (without one: as TIME) */
    HEADERS_EXPIRES_DAILY,     /* `@TIME`: the next expires_s past local midnight */
};

struct headers_add {
    char name[HEADERS_NAME_MAX];
    struct vars_value *value; /* compiled for header context: no line can be injected */
    bool always;              /* every status, not only 2xx/3xx "safe" ones */
    bool replaces;            /* ETag, Last-Modified: replace the response's own (nginx) */
};

struct headers_conf {
    struct headers_add *adds; /* in file order; malloc'd, or borrowed from an outer level */
    unsigned n_adds;
    bool adds_owned;
    enum headers_expires expires;
    int64_t expires_s; /* HEADERS_EXPIRES_TIME: seconds from now, may be negative */
    int8_t server_tokens; /* a server's or location's `server_tokens`: -1 unset, 0 off, 1 on */
    /* `expires [modified] $VALUE`: parsed per request (expires is then UNSET when it is
     * the time alone, MODIFIED when it follows `modified`); NULL: none */
    struct vars_value *expires_value;
    bool expires_value_owned;
    /* `add_trailer`, in file order, inherited as add_header's list (on its own) */
    struct headers_add *trailers;
    unsigned n_trailers;
    bool trailers_owned;
    int8_t chunked; /* `chunked_transfer_encoding`: -1 unset (on), 0 off, 1 on */
};

/* Inherit from outer what inner does not set (see the top of this file). */
void headers_conf_merge(struct headers_conf *inner, const struct headers_conf *outer);
void headers_conf_free(struct headers_conf *c);

/* Parse an nginx time for `expires`: "1y", "30d", "12h", "1d12h", "90m", "-1", "3600"
 * (units y=365d, M=30d, w, d, h, m, s, largest first, each once; no unit: seconds).
 * Returns 0, or -1 if it is not one or is beyond 68 years either way. */
int headers_parse_time(const char *s, int64_t *out_s);

/* One value of `expires` (after `modified`, when modified): epoch, max, off, [+|-]TIME,
 * or @TIME (a time of day, under 24 hours; not after `modified`). Sets *kind and *out_s;
 * returns 0, or -1 with the reason in *why. */
int headers_parse_expires(const char *s, bool modified, enum headers_expires *kind,
                          int64_t *out_s, const char **why);

/* Apply c to a finished response: expires, then every add_header, on the statuses nginx
 * uses (200, 201, 204, 206, 301, 302, 303, 304, 307, 308) or any with `always`. */
void headers_apply(const struct headers_conf *c, const struct vars_source *src, int64_t now_s,
                   struct response *resp);

#endif
