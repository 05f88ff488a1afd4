/* mod_stub_status.c — `stub_status;` in a location: nginx's basic status page, in its exact
 * text, from the server's existing figures (module_figures.h):
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
#include "http_response.h"
#include "module.h"
#include "module_figures.h"

struct stub_state {
    unsigned index; /* in the chain: req->mount->module of the locations it answers */
};

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
    for (const struct conf_node *n = b->first; n; n = n->next)
        if (strcmp(n->name, "stub_status") == 0 && module_block_mount(b, n, NULL, false) < 0)
            return NULL;
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
