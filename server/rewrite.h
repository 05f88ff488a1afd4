/* rewrite.h — nginx's rewrite module in a server or location block: `rewrite`, `break`
 * and `return`, run in the order written, each block's list once per request.
 *
 * A server's list runs before the location is searched (nginx's server rewrite phase), a
 * location's after (its rewrite phase). `rewrite RE REPLACEMENT [FLAG]` matches RE against
 * the path ($uri); on a match the replacement, with the match's $1..$9 and named groups,
 * becomes the path, or the URL of a redirect (flag `redirect` 302, `permanent` 301, or a
 * replacement that starts with http://, https:// or $scheme). The request's arguments
 * follow the new path unless the replacement ends with '?'; a replacement with its own
 * "?args" has the request's appended after '&'. `last` ends the list and searches the
 * location again; `break` ends it and serves the new path in this location; without a
 * flag the list goes on, and a location whose path changed is searched again at its end.
 * An `if` whose condition holds runs its block's statements in the list's order; in a
 * location it also makes its block's settings the request's (req->level: nginx's implicit
 * location, built by module_level.c), and the list goes on after it.
 */
#ifndef LFHTTPD_REWRITE_H
#define LFHTTPD_REWRITE_H

#include "directive.h"
#include "module.h"

struct rewrite_prog; /* one block's list, read-only once built */

/* Build the list of the block's statements from first on (standing in context): NULL in
 * *out when the block has no `rewrite` or `break` (its `return` alone is the level's, as
 * before). Returns 0, or -1 after reporting through r. */
int rewrite_build(struct conf_reader *r, const struct conf_node *first, unsigned context,
                  struct rewrite_prog **out);
void rewrite_free(struct rewrite_prog *p);

/* Does nginx take the directive `name` inside a location's `if` (besides the rewrite
 * module's own)? */
bool rewrite_if_takes(const char *name);

/* The `if` statement node of p (a location's list) gets level: the settings of its block,
 * which become the request's when its condition holds, as nginx's implicit location. */
struct module_level;
void rewrite_set_if_level(struct rewrite_prog *p, const struct conf_node *node,
                          const struct module_level *level);

/* $NAME of a `set` (the request's value) or of a `map` (made now), by NAME's index
 * (vars_declare), for src->user_vars (a struct request), into out: its length, or -1 when
 * it does not fit cap. Empty when not set. */
long rewrite_var(const struct vars_source *src, unsigned user, char *out, size_t cap);

/* `map SOURCE $NAME { ... }` at the top level (nginx's http), every one of tree's: the
 * list in *out (NULL: none). Returns 0, or -1 after reporting through r. */
struct rewrite_map;
int rewrite_maps_build(struct conf_reader *r, const struct conf_node *tree,
                       struct rewrite_map **out);
void rewrite_maps_free(struct rewrite_map *m);

enum rewrite_result {
    REWRITE_GO_ON,  /* the location (or the search) goes on with the request's path */
    REWRITE_SEARCH, /* `last`, or a location's path changed: search the location again */
    REWRITE_RETURN, /* req->return_status (and return_text) say the answer */
    REWRITE_ERROR,  /* the new path does not fit or is not clean: 500 */
};

/* Run p for req. in_location: a location's list (else a server's). The block's `return`
 * is return_status and return_text, taken when the list reaches it. */
enum rewrite_result rewrite_run(const struct rewrite_prog *p, struct request *req,
                                bool in_location, int return_status,
                                const struct vars_value *return_text);

#endif
