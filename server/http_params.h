/* http_params.h — what a request states beside its path: query parameters (?format=json)
 * and weighted lists (Accept, Accept-Encoding: elements with a q of RFC 9110 section
 * 12.4.2). Pure parsing, no I/O; every module that negotiates uses these.
 */
#ifndef LFHTTPD_HTTP_PARAMS_H
#define LFHTTPD_HTTP_PARAMS_H

#include <stdbool.h>
#include <stddef.h>

#include "http_parse.h"

/* Does the query (without its '?') hold the parameter name=value, exactly, anywhere
 * among its '&'-separated parameters? An empty query (a NULL slice) holds none. */
bool http_query_has(struct http_slice query, const char *name, const char *value);

/* One element of a weighted list. */
struct http_qitem {
    struct http_slice value; /* a token ("gzip", "*") or "type/subtype" ("text/html") */
    int q;                   /* its weight in thousandths (q=0.5 is 500); 1000 if unstated */
};

/* A qvalue, "0" [ "." 0*3DIGIT ] or "1" [ "." 0*3("0") ], in thousandths; -1 if it is not
 * one. */
int http_qvalue_parse(const char *p, size_t len);

/* Read the next well-formed element of the list at *p (before end) into *out and move *p
 * past it; false at the end of the list. An element is a token or type/subtype, then
 * parameters `*( OWS ";" OWS name "=" ( token / quoted-string ) )`; a "q" parameter must
 * be a qvalue, others are ignored. Malformed elements (no token, a bad parameter or
 * qvalue, an unterminated quote, anything before the next comma) are skipped. */
bool http_qlist_next(const char **p, const char *end, struct http_qitem *out);

#endif
