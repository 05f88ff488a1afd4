/* mod_handlers.h — the parts of mod_handlers that need no connection, for its unit tests:
 * the status page's negotiation and counters, the request handler's head, the uptime text. The module
 * itself is `mod_handlers` in module_chain.c's table.
 */
#ifndef LFHTTPD_MOD_HANDLERS_H
#define LFHTTPD_MOD_HANDLERS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http_parse.h"
#include "http_response.h"

/* Does an Accept value prefer application/json to text/html? Only those two exact types
 * count (a browser's list names text/html; a wildcard gets the default, HTML). */
bool handlers_accept_prefers_json(struct http_slice accept);
/* The status page as JSON: ?format=json, else not with ?format=html, else by Accept. */
bool handlers_status_wants_json(const struct http_request *h);

/* What the request handler shows before the body: the request line and header fields as
 * an HTTP/1.1 head, CRLF lines, a blank line. */
size_t handlers_request_head_len(const struct http_request *h);
void handlers_request_head_write(const struct http_request *h, char *out);

/* "3d 04h 05m 06s", "5m 06s", "42s" */
void handlers_format_uptime(int64_t s, char out[48]);

/* The status page's counters: one cache-line-aligned struct per thread that counts (see
 * mod_handlers.c), summed when the page is rendered. */
struct thread_counters;
struct status_counters {
    uint64_t generation;  /* tells this instance's thread registrations from others' */
    pthread_mutex_t lock; /* guards the list */
    struct thread_counters *list;
};
struct status_totals {
    uint64_t requests, bytes, by_class[5]; /* by_class: responses 1xx .. 5xx */
};
void status_counters_init(struct status_counters *c);
void status_counters_fini(struct status_counters *c);
/* Count a response (its status, and its body bytes as the access log counts them). */
void status_counters_count(struct status_counters *c, const struct response *resp);
void status_counters_sum(struct status_counters *c, struct status_totals *t);
/* The counters of a mod_handlers instance (its init's state), or NULL when it mounts no
 * status handler and so counts nothing. */
struct status_counters *handlers_counters(void *state);

#endif
