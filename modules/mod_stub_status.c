/* mod_stub_status.c — the answers a location gives from the server itself: `stub_status;`
 * and `empty_gif;`.
 *
 * `empty_gif;` answers nginx's 1x1 transparent GIF (43 bytes, `image/gif`, Last-Modified
 * 28 Sep 1970 06:00:00 GMT, as nginx's), 304 to an If-Modified-Since of that very date
 * (nginx's `if_modified_since exact`), 412 to an If-Unmodified-Since before it; GET and
 * HEAD only (else 405).
 *
 * `stub_status;` is nginx's basic status page, in its exact text, from the server's
 * existing figures (module_figures.h):
 *
 *   Active connections: 2 
 *   server accepts handled requests
 *    16 16 31 
 *   Reading: 0 Writing: 1 Waiting: 1 
 *
 * "accepts" and "handled" count connections since start (handled: not refused over a
 * limit), "requests" the answered requests and the one asking (nginx counts a request when
 * it begins). Reading, writing and waiting are module_server_connections'. GET and HEAD
 * only (else 405), as nginx's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "directive.h"
#include "http_parse.h"
#include "http_response.h"
#include "module.h"
#include "module_figures.h"

struct stub_state {
    unsigned index; /* in the chain: req->mount->module of the locations it answers */
};

/* The GIF, a 1x1 transparent image, byte for byte nginx's. */
static const unsigned char empty_gif[43] = {
    'G',  'I',  'F',  '8',  '9',  'a',  0x01, 0x00, 0x01, 0x00, 0x80, 0x01, 0x00, 0x00, 0x00,
    0x00, 0xff, 0xff, 0xff, 0x21, 0xf9, 0x04, 0x01, 0x00, 0x00, 0x01, 0x00, 0x2c, 0x00, 0x00,
    0x00, 0x00, 0x01, 0x00, 0x01, 0x00, 0x00, 0x02, 0x02, 0x4c, 0x01, 0x00, 0x3b,
};
#define EMPTY_GIF_MTIME 23349600 /* nginx's Last-Modified for it: 1970-09-28 06:00:00 UTC */

static const char empty_gif_mount; /* a mount whose data points here answers the GIF */

static enum mod_result gif_handle(const struct request *req, struct response *resp)
{
    const struct http_request *h = req->http;
    int64_t t;
    if (h->if_unmodified_since.len && http_date_parse(h->if_unmodified_since, &t) == 0 &&
        t < EMPTY_GIF_MTIME) {
        resp_error(resp, 412);
        return MOD_HANDLED;
    }
    bool not_modified = h->if_modified_since.len && !h->if_none_match.len &&
                        http_date_parse(h->if_modified_since, &t) == 0 && t == EMPTY_GIF_MTIME;
    resp_start(resp, not_modified ? 304 : 200);
    if (!not_modified) /* (nginx's 304 has no Content-Type) */
        resp_header(resp, "Content-Type", "image/gif");
    resp_header(resp, "Last-Modified", http_last_modified(EMPTY_GIF_MTIME));
    if (!not_modified)
        resp_body_mem(resp, (const char *)empty_gif, sizeof(empty_gif));
    return MOD_HANDLED;
}

static enum mod_result stub_handle(void *state, const struct request *req,
                                   struct response *resp)
{
    const struct stub_state *st = state;
    if (!req->mount || req->mount->module != st->index)
        return MOD_DECLINED;
    if (req->http->method != HTTP_METHOD_GET && req->http->method != HTTP_METHOD_HEAD) {
        resp_error(resp, 405);
        return MOD_HANDLED;
    }
    if (req->mount->data == &empty_gif_mount)
        return gif_handle(req, resp);
    struct server_metrics *m = malloc(sizeof(*m));
    if (!m)
        return MOD_ERROR;
    module_server_metrics(req, m);
    uint64_t requests = 1; /* this one */
    for (unsigned i = 0; i < m->n_classes; i++)
        requests += m->classes[i].requests;
    struct server_connections n;
    module_server_connections(req, &n);
    char *body = resp_scratch(resp, 256);
    int len = snprintf(body, 256,
                       "Active connections: %llu \nserver accepts handled requests\n"
                       " %llu %llu %llu \nReading: %llu Writing: %llu Waiting: %llu \n",
                       (unsigned long long)n.active, (unsigned long long)m->accepted,
                       (unsigned long long)m->handled, (unsigned long long)requests,
                       (unsigned long long)n.reading, (unsigned long long)n.writing,
                       (unsigned long long)n.waiting);
    free(m);
    if (len < 0 || len >= 256)
        return MOD_ERROR;
    resp_start(resp, 200);
    resp_header(resp, "Content-Type", "text/plain");
    resp_body_mem(resp, body, (size_t)len);
    return MOD_HANDLED;
}

static int stub_init(struct module_init *mi, void **state)
{
    struct stub_state *st = calloc(1, sizeof(*st));
    if (!st)
        return module_error(mi, NULL, "out of memory");
    st->index = mi->index;
    *state = st;
    return 0;
}

static void stub_fini(void *state)
{
    free(state);
}

/* No settings per block: the value returned only says "no error". */
static void *stub_block(void *state, const struct module_block *b)
{
    static const char none;
    (void)state;
    if (b->context != CONF_LOCATION)
        return (void *)&none;
    char unused;
    if (module_block_read(b, &unused) < 0) /* its form: at most one word */
        return NULL;
    for (const struct conf_node *n = b->first; n; n = n->next) {
        bool gif = strcmp(n->name, "empty_gif") == 0;
        if ((gif || strcmp(n->name, "stub_status") == 0) &&
            module_block_mount(b, n, gif ? (void *)&empty_gif_mount : NULL, false) < 0)
            return NULL;
    }
    return (void *)&none;
}

static const struct conf_directive stub_directives[] = {
    {"stub_status", CONF_LIST, CONF_LOCATION, .min_args = 0, .max_args = 1,
     .set = conf_set_later, .usage = "[on]",
     .doc = "The location answers nginx's basic status page (`Active connections`, "
        "`server accepts handled requests`, `Reading`/`Writing`/`Waiting`), as "
        "`text/plain`; GET and HEAD only. A word after it (nginx's old `stub_status on;`) is "
        "ignored, as nginx ignores it. The same figures are `$connections_active`, "
        "`$connections_reading`, `$connections_writing` and `$connections_waiting`."},
    {"empty_gif", CONF_LIST, CONF_LOCATION, .min_args = 0, .max_args = 0,
     .set = conf_set_later, .usage = "",
     .doc = "The location answers nginx's 1x1 transparent GIF (43 bytes, `image/gif`, "
        "`Last-Modified` 28 Sep 1970 06:00:00 GMT, as nginx's); 304 to an "
        "If-Modified-Since of that date; GET and HEAD only."},
    {.name = NULL},
};

const struct module mod_stub_status = {
    .name = "stub_status",
    .directives = stub_directives,
    .init = stub_init,
    .fini = stub_fini,
    .handle = stub_handle,
    .block = stub_block,
};
