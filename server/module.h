/* module.h — the interface every module implements, and the chain that calls them.
 *
 * A module is a struct of optional hooks. For each request the chain calls the modules'
 * `handle` hooks in order; the first that returns MOD_HANDLED has filled the response.
 * If none does, the answer is 404. A module sees the request, the response it fills, and
 * the configuration: nothing of connections, threads or the event loop.
 */
#ifndef LFHTTPD_MODULE_H
#define LFHTTPD_MODULE_H

#include <stdint.h>
#include <sys/socket.h>

#include "config.h"
#include "http_parse.h"
#include "http_response.h"

enum mod_result {
    MOD_DECLINED = 0, /* not mine: ask the next module */
    MOD_HANDLED = 1,  /* the response is filled */
    MOD_ERROR = -1,   /* failed: the chain answers 500 */
};

struct request {
    const struct http_request *http; /* the parsed head: slices into the thread's buffer */
    const char *path;                /* percent-decoded, dot segments removed, NUL-ended */
    size_t path_len;
    const struct sockaddr *peer;
    int64_t now_s;
    const struct config *cfg;
    int root_fd; /* the document root, opened O_PATH | O_DIRECTORY */
};

struct module {
    const char *name;
    /* At start: read the configuration, build state. Returns 0, or -1 with a message. */
    int (*init)(const struct config *cfg, void **state, char *err, size_t err_len);
    void (*fini)(void *state);
    /* Answer the request, or decline it. */
    enum mod_result (*handle)(void *state, const struct request *req, struct response *resp);
};

#define MODULE_CHAIN_MAX 16

struct module_chain {
    const struct module *mods[MODULE_CHAIN_MAX];
    void *state[MODULE_CHAIN_MAX];
    unsigned n;
};

/* Build the chain from the table of modules, in order, and init each one. */
int module_chain_init(struct module_chain *c, const struct config *cfg, char *err,
                      size_t err_len);
void module_chain_fini(struct module_chain *c);
/* Run the request through the chain; the response is always filled on return. */
void module_chain_handle(const struct module_chain *c, const struct request *req,
                         struct response *resp);

#endif
