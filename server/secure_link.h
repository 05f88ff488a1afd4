/* secure_link.h — nginx's secure links: $secure_link and $secure_link_expires.
 *
 * `secure_link EXPR;` names the link's hash and, after a comma, its expiry (a Unix time):
 * `secure_link $arg_md5,$arg_expires;`. `secure_link_md5 EXPR;` is what the hash is of:
 * `secure_link_md5 "$secure_link_expires$uri$remote_addr secret";`. The hash is MD5, sent
 * in base64url (RFC 4648's '-' and '_', padding optional). $secure_link is "1" when the
 * hash is right and the link has not expired, "0" when it has expired, empty otherwise
 * (a wrong hash, no hash, an expiry that is no positive number). $secure_link_expires is
 * the expiry the link names.
 *
 * `secure_link_secret WORD;` (nginx's older form, in a location) checks a URI
 * /PREFIX/HASH/LINK instead: HASH is the MD5 of LINK and WORD in hex, and $secure_link is
 * LINK when it is right, empty otherwise.
 *
 * A block's three settings are each inherited from the outer block unless it sets them.
 */
#ifndef LFHTTPD_SECURE_LINK_H
#define LFHTTPD_SECURE_LINK_H

#include <stdbool.h>
#include <stddef.h>

#include "module.h"
#include "vars.h"

struct secure_link_conf {
    const struct vars_value *link; /* secure_link; NULL: none */
    const struct vars_value *md5;  /* secure_link_md5; NULL: none */
    const char *secret;            /* secure_link_secret; NULL: none */
};

/* $secure_link (expires false) or $secure_link_expires (true) of req under conf, written
 * into out: its length, or -1 when it does not fit. src: the request's variables, for the
 * expressions. */
long secure_link_value(const struct secure_link_conf *conf, const struct request *req,
                       const struct vars_source *src, bool expires, char *out, size_t cap);

#endif
