/* referer.h — `valid_referers` and $invalid_referer, as nginx's referer module.
 *
 * A block's list says which Referer fields are valid: `none` (no Referer field), `blocked`
 * (a field that does not begin with "http://" or "https://", as a proxy or firewall leaves
 * it, or is shorter than "http://i.ru"), `server_names` (the server's names), a host
 * (`example.org`, `*.example.org`, `.example.org`, `example.*`) with an optional URI
 * prefix (`example.org/galleries/`), and `~REGEX` (PCRE2, without case) searched in what
 * follows the scheme. The host is the field's text after the scheme up to '/' or ':' (its
 * port is ignored), compared without case: an exact name first, then the longest leading
 * wildcard, then the longest trailing one; a host found with a URI prefix is valid only
 * when its path begins with that prefix. Else the server's regex names are tried on the
 * host, then the list's regexes. $invalid_referer is "" when valid, "1" when not; "" in a
 * block without a list. Built once per configuration, read-only after, allocation-free
 * per request.
 */
#ifndef LFHTTPD_REFERER_H
#define LFHTTPD_REFERER_H

#include <stdbool.h>
#include <stddef.h>

#include "directive.h"
#include "http_parse.h"
#include "site.h"

struct referer_list;

/* The block's `valid_referers` statements (every one of first's) into a list; *out NULL
 * when there is none. server: the block's server, for `server_names`. Returns 0, or -1
 * after conf_error. */
int referer_list_build(struct conf_reader *r, const struct conf_node *first,
                       const struct site_server *server, struct referer_list **out);
void referer_list_free(struct referer_list *l);

/* Is the request's Referer field (h's; NULL: none) valid for l? */
bool referer_valid(const struct referer_list *l, const struct http_request *h);

#endif
