/* site.h — `server` and `location` blocks: which site answers a request, and which of its
 * locations, with nginx's rules.
 *
 * A site set is built once per generation from the configuration's statement tree and is
 * read-only afterwards: any number of threads select from it at once, without a lock, and
 * selection allocates nothing. The set keeps pointers into the tree (names, patterns, the
 * blocks' statements), so the tree must outlive it; owners of per-site directives (root,
 * try_files, add_header, auth...) read them later from site_location.first and
 * site_server.first.
 *
 * Servers. A `server` listens on its `listen` addresses (`listen ADDR [default_server]`),
 * or, without any, on the top-level ones (8080 when there are none). The servers that
 * listen on one address form a group, in file order. A request's group is the one of the
 * address its connection came in on: the group of that exact address when there is one,
 * else the group of the wildcard address with that port (nginx's rule: a server bound to
 * 127.0.0.1:8080 hides those on *:8080 from connections to 127.0.0.1:8080). Within the
 * group, the Host (the authority of an absolute-form target already sits there), without
 * its port and one trailing dot, compared without case, picks:
 *   1. an exact name;
 *   2. else the longest leading wildcard: `*.example.org` (any depth: a.b.example.org too),
 *      and `.example.org`, which is `*.example.org` that also takes example.org itself;
 *   3. else the longest trailing wildcard: `www.example.*`;
 *   4. else the first regex name (`~^(?<sub>.+)\.example\.org$`, PCRE2 without case, see
 *      regex.h) that matches, in file order; its captures are the request's ($sub, $1);
 *   5. else the group's `default_server`, else its first server.
 * `_` is a name like any other that no Host matches; `""` matches a request without Host.
 *
 * Locations, per server (nginx's `location` directive):
 *   1. `location = /p`: the path is exactly /p: done;
 *   2. else the longest prefix among `location /p` and `location ^~ /p`; if it is a `^~`
 *      one: done;
 *   3. else the regexes (`~` case-sensitive, `~*` not; PCRE2, see regex.h), in file order:
 *      the first that matches the decoded path, whose captures the request keeps;
 *   4. else the longest prefix of step 2; NULL when there is none.
 * `location @name` is never matched by a path: only site_named_location finds it.
 * Prefixes compare bytes, with case, as nginx on Linux.
 * Nested locations, as nginx's: when step 2 finds a prefix location with locations inside,
 * the search repeats among them (an exact or regex one there decides; a prefix one there is
 * the longest prefix so far), and the outer regexes of step 3 are tried only when nothing
 * inside decided (and the outer prefix is not `^~`); a regex location that matches has its
 * own nested ones searched too. A nested prefix must begin with its parent's prefix; no
 * location inside an exact or named one; named ones only in a server.
 *
 * Checked at load, each with FILE:LINE: a duplicate location in a server (`/a` and `^~ /a`
 * are duplicates, as in nginx: both are the prefix /a), an invalid or unsupported regex
 * (PCRE2's message and offset),
 * two `default_server` on one address, `location` outside a server, `server` inside one,
 * `listen` parameters other than `default_server`, malformed server names.
 *
 * Costs, per request: the address group is a scan of the set's addresses (a handful); the
 * server is a scan of the names of the group's servers, comparing from the end of the Host
 * (a short list: a hash would only pay for hundreds of names). Locations: exact ones
 * scanned, prefixes kept sorted longest first so the first that matches is the answer
 * (a dozen memcmp of a few bytes; nginx's prefix tree pays for thousands). Regexes are
 * regex_match calls, in file order, and only reached when no `=` or `^~` decides first:
 * PCRE2, JIT-compiled at load where allowed, no allocation, no lock, bounded work.
 */
#ifndef LFHTTPD_SITE_H
#define LFHTTPD_SITE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "config.h"
#include "directive.h"
#include "http_parse.h"
#include "regex.h"

enum site_match {
    SITE_PREFIX,      /* location /p */
    SITE_PREFIX_STOP, /* location ^~ /p: as the longest prefix, no regex is tried */
    SITE_EXACT,       /* location = /p */
    SITE_REGEX,       /* location ~ RE */
    SITE_REGEX_ICASE, /* location ~* RE */
    SITE_NAMED,       /* location @name */
};

struct site_server;
struct site_location;
struct module_level; /* the block's settings, made by the module chain (module_level.h) */

/* The locations directly inside a block (a server, or a location: nested ones), indexed
 * for selection. */
struct site_nest {
    const struct site_location **exact;  /* `=`, file order */
    const struct site_location **prefix; /* plain and `^~`, longest first */
    const struct site_location **regex;  /* `~` and `~*`, file order */
    unsigned n_exact, n_prefix, n_regex;
};

struct site_location {
    enum site_match match;
    const char *pattern; /* as written, without the modifier ("@app" keeps its '@') */
    size_t pattern_len;
    struct regex re;     /* SITE_REGEX, SITE_REGEX_ICASE: compiled at load */
    const struct conf_node *node;  /* the `location` statement: its line, for messages */
    const struct conf_node *first; /* its first statement inside, NULL for `{ }` */
    const struct site_server *server;
    const struct site_location *parent; /* the location it is nested in, or NULL */
    struct site_nest inner;             /* the locations nested in it */
    const struct module_level *level;
};

enum site_name_kind {
    SITE_NAME_EXACT,    /* example.org: text is the name */
    SITE_NAME_LEADING,  /* *.example.org or .example.org: text is ".example.org" */
    SITE_NAME_TRAILING, /* www.example.*: text is "www.example." */
    SITE_NAME_REGEX,    /* ~RE: text is "~RE", as written; re compiled at load */
};

struct site_name {
    enum site_name_kind kind;
    bool bare_too;      /* .example.org: example.org itself matches too */
    char *text;         /* lowercase, as above */
    size_t len;
    struct regex re;    /* SITE_NAME_REGEX */
};

struct site_server {
    const struct conf_node *node;  /* the `server` statement */
    const struct conf_node *first; /* its first statement inside */
    struct site_name *names;       /* server_name, in order */
    unsigned n_names;
    struct site_location *locations; /* in file order, nested ones after their parent */
    unsigned n_locations;
    struct site_nest top;                /* the server's own locations, indexed */
    const struct site_location **named;  /* `@name` */
    unsigned n_named;
    unsigned n_regex;                    /* regex locations, nested ones too */
    const struct module_level *level;
};

/* One listening address and the servers that listen on it. */
struct site_addr {
    struct config_listen listen;               /* the address (and its text) */
    const struct site_server **servers;         /* file order */
    unsigned n_servers;
    const struct site_server *default_server;   /* `default_server`, or NULL */
    unsigned default_line;
};

struct site_set {
    struct site_server *servers; /* file order; none: the configuration has no sites */
    unsigned n_servers;
    struct site_addr *addrs;
    unsigned n_addrs;
    struct conf_node *owned_tree; /* site_set_from_text's tree, freed with the set */
};

/* Build the sites of a statement tree (the whole file, top level first). The messages go
 * to r ("FILE:LINE: message", r->file naming the file). Returns the set (with no servers
 * when the file has none), or NULL after reporting every error, or on lack of memory
 * (reported too). tree must outlive the set. */
struct site_set *site_set_build(const struct conf_node *tree, struct conf_reader *r);

/* Parse a configuration text (as config_load parses a file; file names it in messages)
 * and build its sites; the set owns the tree. NULL with the messages in err. For the unit
 * tests and the fuzz target, until generations build sites from their files. */
struct site_set *site_set_from_text(const char *file, const char *text, size_t len, char *err,
                                    size_t err_len);

void site_set_free(struct site_set *set);

/* The server for a connection that came in on `local` with this Host (a slice of the
 * request, possibly empty). NULL when no server listens on that address (and when the set
 * has no servers). */
const struct site_server *site_server_for(const struct site_set *set,
                                          const struct sockaddr *local, struct http_slice host);

/* site_server_for, and the captures of the regex name that chose the server in caps (if not
 * NULL; n = 0 when no regex name did). */
const struct site_server *site_server_find(const struct site_set *set,
                                           const struct sockaddr *local,
                                           struct http_slice host, struct regex_captures *caps);

/* The group of the address a connection came in on (see above), or NULL. */
const struct site_addr *site_addr_for(const struct site_set *set, const struct sockaddr *local);

/* Which of the listen addresses ls[0..n) a connection to local came in through (the exact
 * address, else a wildcard with its port, else a `:0` one): its index, or -1. */
int site_listen_match(const struct config_listen *ls, unsigned n, const struct sockaddr *local);

/* The location for a decoded path (NUL-terminated at len), by the rules above, in *out
 * (NULL when none matches); caps, if not NULL, gets the captures of the regex that matched
 * (n = 0 for any other kind). Returns 0, or -1 when a regex went over its limits (regex.h),
 * with PCRE2's reason in why: the request cannot be placed. */
int site_location_find(const struct site_server *s, const char *path, size_t len,
                       const struct site_location **out, struct regex_captures *caps,
                       char *why, size_t why_len);

/* site_location_find without captures; a regex over its limits gives NULL. */
const struct site_location *site_location_for(const struct site_server *s, const char *path,
                                              size_t len);

/* The exact or prefix location whose pattern is the path and a final '/' (`location /api/`
 * for /api), or NULL: nginx's redirect of /api to /api/ when an upstream answers there. */
const struct site_location *site_location_slashed(const struct site_server *s,
                                                  const char *path, size_t len);

/* `location @name`, by its name with the '@' ("@app"); NULL if the server has none. */
const struct site_location *site_named_location(const struct site_server *s,
                                                const char *name);

#endif
