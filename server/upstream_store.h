/* upstream_store.h — an answer read ahead of its client: what `proxy_buffering on` and
 * `fastcgi_buffering on` (`uwsgi_`, `scgi_`) share (http_proxy.c, http_fastcgi.c).
 *
 * While the client takes the answer as fast as it comes, a source sends it as it is read.
 * Once a part of it is parked on the client's connection, the source goes on reading its
 * upstream into the store instead of waiting for the client: memory first (the block's
 * buffers_bytes, taken only then), then a temporary file without a name in temp_path, at
 * most max_temp_bytes. Both sockets are waited on at once meanwhile (a set of their own,
 * upstream_store_wait_both), and the client is written to at every event of either. Once
 * the answer is read whole the source lets its upstream connection go (kept, when it may
 * be) and serves the client from the store alone. A full store waits for the client, as
 * streaming does.
 *
 * Bytes go to memory only while the file has nothing pending, so that every byte in memory
 * comes before every byte in the file; the file only grows (its parts parked on the
 * connection are read from it until sent) and, having no name, is gone with its descriptor:
 * upstream_store_free, which every end of the answer calls (done, client gone, upstream
 * failed, timeout), leaves nothing behind.
 *
 * Memory let go of is kept for the next store of the same size (up to
 * UPSTREAM_STORE_SPARE_MAX bytes, UPSTREAM_STORE_SPARES of them), so that a warm server
 * allocates none; spare buffers of other kinds (the proxy's head and request room) are kept
 * the same way through upstream_spare_get and upstream_spare_put.
 */
#ifndef LFHTTPD_UPSTREAM_STORE_H
#define LFHTTPD_UPSTREAM_STORE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http_source.h"

struct upstream_store {
    char *mem;         /* buffers_bytes, taken when first needed; NULL: not yet */
    size_t cap;        /* its size */
    size_t rd, wr;     /* mem[rd, wr) waits for the client */
    int fd;            /* the temporary file, without a name; -1: none yet */
    bool no_file;      /* it cannot be made: memory only */
    uint64_t frd, fwr; /* its bytes [frd, fwr) wait for the client */
};

/* A list of spare buffers: at most UPSTREAM_STORE_SPARES, each of its size; define one as
 * `static struct upstream_spares x = {.lock = PTHREAD_MUTEX_INITIALIZER};`. */
#define UPSTREAM_STORE_SPARES 64
#define UPSTREAM_STORE_SPARE_MAX (1u << 20) /* store memory kept, at most, per buffer */
struct upstream_spares {
    pthread_mutex_t lock;
    struct upstream_spare {
        void *p;
        size_t size;
    } bufs[UPSTREAM_STORE_SPARES];
    unsigned n;
};

/* size bytes: a spare of that size from `list`, or new (NULL: out of memory). */
void *upstream_spare_get(struct upstream_spares *list, size_t size);
/* p (size bytes, or NULL) is let go of: kept in `list` if it has room, else freed. */
void upstream_spare_put(struct upstream_spares *list, void *p, size_t size);
/* At exit, once every thread group has stopped: free every spare of `list`. */
void upstream_spares_free(struct upstream_spares *list);
/* At exit: the same for the stores' spare memory. */
void upstream_store_fini(void);

/* An empty store, without memory or file. */
void upstream_store_init(struct upstream_store *st);
/* Nothing waits in it. */
bool upstream_store_empty(const struct upstream_store *st);
/* How many of the upstream's bytes to read now (at most `relay`, which is at most
 * HTTP_SOURCE_PIECE), so that what they become once filtered and framed fits whole in the
 * store's memory or in its file; 0 when it is full. Takes the memory, or makes the file
 * (in p->temp_path; a failure is logged for src's request, and the store keeps to its
 * memory), when needed. */
size_t upstream_store_room(struct upstream_store *st, const struct http_source *src,
                           const struct proxy_params *p, size_t relay);
/* resp's body pieces (memory) join the store: in its memory if nothing waits in the file
 * and they fit (upstream_store_room said where they would), else at the end of its file.
 * 0, or -1 when they fit nowhere or the file cannot be written. */
int upstream_store_put(struct upstream_store *st, const struct response *resp);
/* The store's next part goes to c: some of its memory, or once that is drained its file's
 * bytes; sent, or parked on the connection (memory copied, the file read from until sent).
 * As http_send_response. */
enum send_result upstream_store_flush(struct upstream_store *st, struct conn *c);
/* The store lets go of its memory (kept as a spare) and its file (gone with it). */
void upstream_store_free(struct upstream_store *st);

/* Wait for the upstream's bytes (up_fd) and room at c's client at once, through `set`, a
 * handle of the source's own (an epoll set made at the first wait of the answer, kept
 * until upstream_store_wait_end), with on_event its events' handler, until deadline_ms;
 * the last act of the event. 1: waiting (or the connection closed, the failure logged);
 * 0: no set could be had, and nothing is waited on: the caller waits on the upstream. */
int upstream_store_wait_both(struct lf_handle *set, int up_fd, struct conn *c,
                             int64_t deadline_ms, void (*on_event)(struct lf_handle *, uint32_t));
/* The upstream socket leaves the set (the answer is read whole: never waited on again). */
void upstream_store_wait_drop(struct lf_handle *set, int up_fd);
/* The set goes (closed: out of its group's set with it). */
void upstream_store_wait_end(struct lf_handle *set);

#endif
