/* generation.h — one loaded configuration and what is built from it: the document root,
 * the parser's limits, the module chain.
 *
 * SIGHUP builds a new generation beside the running one; new connections, and each
 * connection's next request, take the new one, while requests in flight finish with the
 * generation they started with. The last reference frees it. What a reload may not change
 * (what was built once at start: sockets, threads, log files) is decided here too.
 */
#ifndef LFHTTPD_GENERATION_H
#define LFHTTPD_GENERATION_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "config.h"
#include "http_parse.h"
#include "module_chain.h"
#include "tls.h"

struct generation {
    atomic_uint refs;      /* the current slot's (while current) + one per connection */
    unsigned number;       /* 1 at start, then one more per reload */
    struct config cfg;
    int root_fd;           /* the document root, O_PATH | O_DIRECTORY */
    char root_real[4096];  /* its real path */
    struct http_limits limits;
    struct module_chain chain;
    bool chain_ready;      /* module_chain_init succeeded: fini is owed */
    struct tls_set *tls;   /* its TLS contexts (tls.h), NULL when no address is a TLS one */
};

/* Where a generation's configuration comes from: a file, and the command line on top. */
struct generation_source {
    const char *conf;                       /* -c, or NULL: the default file if it exists */
    const char *listen[CONFIG_MAX_LISTEN];  /* -l, replacing the file's `listen` lines */
    unsigned n_listen;
    const char *root;    /* -r */
    const char *threads; /* -n */
};

#define GENERATION_DEFAULT_CONF "conf/lfhttpd.conf"

/* Read the configuration and build what depends on it: a generation, not yet installed.
 * -t builds one too, so that it opens what a start would. Returns NULL with the message
 * in err. */
struct generation *generation_build(const struct generation_source *src, unsigned number,
                                    char *err, size_t len);
/* The log files a start would open, checked without creating them (for -t). Returns 0,
 * or -1 with "FILE:LINE: directive \"path\": reason" in err. */
int generation_check_logs(const struct generation *g, char *err, size_t len);
/* What a reload from a to b cannot change, because it was built once at start: the first
 * such directive that differs ("NAME" or "NAME (DETAIL)"), or NULL. */
const char *generation_needs_restart(const struct config *a, const struct config *b);
/* Where a directive's value came from, for messages: "FILE:LINE: ", or "" for a built-in
 * default. */
void generation_origin(const struct config *cfg, const char *name, char *out, size_t len);

/* Another reference to a generation the caller already holds. */
void generation_hold(struct generation *g);
/* Drop a reference; the last one frees the generation (module fini, root, config). */
void generation_release(struct generation *g);
/* Free an unpublished generation (refs never taken), or the last reference's. */
void generation_free(struct generation *g);

/* The generation new requests use. */
struct generation_current {
    /* Read without the lock only to compare pointers, or by the main thread (the only
     * writer); everyone else dereferences it through generation_acquire(). */
    struct generation *_Atomic gen;
    pthread_mutex_t lock;
    atomic_uint number; /* the current generation's number, for the status page */
};

void generation_current_init(struct generation_current *cur);
/* The current generation, with a reference for the caller. */
struct generation *generation_acquire(struct generation_current *cur);
/* Make g current (it arrives with the slot's reference) and release the old one. */
void generation_install(struct generation_current *cur, struct generation *g);
/* Let go of the current generation (at exit, once every connection is closed). */
void generation_current_fini(struct generation_current *cur);

#endif
