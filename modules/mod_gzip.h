/* mod_gzip.h — the parts of mod_gzip that need no request: Accept-Encoding negotiation,
 * compression (gzip here; br and zstd in mod_gzip_coding.h), and the cache of compressed
 * files. Exposed for the unit tests
 * (tests/unit/test_gzip.c); the module itself is `mod_gzip` in module_chain.c's table.
 */
#ifndef LFHTTPD_MOD_GZIP_H
#define LFHTTPD_MOD_GZIP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "mod_gzip_coding.h"

/* --- Accept-Encoding (RFC 9110 section 12.5.3) --------------------------------------- */

/* The weights one request gives, in thousandths (q=0.5 is 500); -1 where not listed. */
struct gzip_accept {
    int gzip;     /* "gzip", or its alias "x-gzip" (RFC 9110 section 8.4.1.3) */
    int br;       /* "br" */
    int zstd;     /* "zstd" */
    int identity; /* "identity": no coding */
    int star;     /* "*": every coding not listed, identity included */
    bool any;     /* at least one well-formed element was seen */
};

enum gzip_choice {
    GZIP_CHOICE_IDENTITY = 0, /* send the representation as it is */
    GZIP_CHOICE_GZIP,         /* gzip is acceptable, and not less preferred than identity */
    GZIP_CHOICE_NONE,         /* both refused; mod_gzip then sends identity, as nginx does */
    GZIP_CHOICE_BR,           /* br (only when offered: gzip_accept_choose_among) */
    GZIP_CHOICE_ZSTD,         /* zstd (likewise) */
};

void gzip_accept_init(struct gzip_accept *a);
/* Add one Accept-Encoding field value (a request may send the field on several lines).
 * Malformed elements (bad token, bad qvalue, unterminated quote) are skipped. */
void gzip_accept_parse(struct gzip_accept *a, const char *value, size_t len);
/* Gzip when its weight (its own, else that of "*") is above 0 and at least identity's
 * (its own, else that of "*"; when neither is listed identity states no preference).
 * No field, or an empty one: identity. */
enum gzip_choice gzip_accept_choose(const struct gzip_accept *a);
/* The same rule over the codings in `offered` (CODING_BIT(c) for each): the one of the
 * highest weight wins, a tie going to the server's preference br, zstd, gzip (the smaller
 * bytes first); it must be above 0 and at least identity's weight. GZIP_CHOICE_NONE when
 * nothing offered nor identity is acceptable. */
enum gzip_choice gzip_accept_choose_among(const struct gzip_accept *a, unsigned offered);
/* The coding of a choice that names one (GZIP, BR, ZSTD). */
enum content_coding gzip_choice_coding(enum gzip_choice ch);
/* Parse and choose, for a single field value. */
enum gzip_choice gzip_negotiate(const char *value, size_t len);

/* --- compression ----------------------------------------------------------------------- */

/* Compress the concatenation of in[0..n) into one gzip member (no name, mtime 0: the same
 * input and level give the same bytes) in a new malloc'd buffer the caller frees.
 * Returns 0, or -ENOMEM / -EIO. */
int gzip_compress_iov(const struct iovec *in, unsigned n, int level, char **out, size_t *out_len);

/* Compress bytes [0, size) of the file fd into a new sealed memfd. Returns 0 with *memfd
 * (the caller's) and *gz_len, or -errno (-ESTALE: the file was shorter than size). */
int gzip_compress_file(int fd, uint64_t size, int level, int *memfd, uint64_t *gz_len);

/* --- the cache of compressed files ----------------------------------------------------- */

/* A file (dev, ino, coding: the key) at one version (mtime, size: when a cached variant is
 * valid). */
struct gzip_file_id {
    dev_t dev;
    ino_t ino;
    int64_t mtime_ns;
    uint64_t size;
    enum content_coding coding; /* which variant of it (part of the key; 0 is gzip) */
};

struct gzip_cache;
struct gzip_cache_entry;

enum gzip_cache_result {
    GZIP_CACHE_HIT = 0, /* *fd is a new descriptor of the variant (the caller's), *gz_len */
    GZIP_CACHE_MISS,    /* the caller compresses, then calls fill or abandon on *pending */
    GZIP_CACHE_BYPASS,  /* the caller compresses without caching (another version of the
                         * file is being compressed, or no memory or descriptor was left) */
    GZIP_CACHE_BUSY,    /* another thread is compressing this version: do not wait for it
                         * (the caller sends the identity) */
};

struct gzip_cache_stats {
    unsigned entries;
    uint64_t bytes; /* page-rounded sizes of the memfds held */
    uint64_t hits, misses, evictions;
    uint64_t busy; /* look-ups answered GZIP_CACHE_BUSY */
};

/* A cache holding at most cap_bytes of compressed bytes (each variant counted in whole
 * pages, as a memfd holds it) in at most max_entries memfds. NULL if out of memory. */
struct gzip_cache *gzip_cache_create(uint64_t cap_bytes, unsigned max_entries);
void gzip_cache_destroy(struct gzip_cache *c);

/* Look the file up. A thread asking for a version another thread is compressing is told
 * GZIP_CACHE_BUSY at once, so a hot file is compressed once and nobody waits for it. A
 * different cached version is dropped. */
enum gzip_cache_result gzip_cache_get(struct gzip_cache *c, const struct gzip_file_id *id, int *fd,
                                      uint64_t *gz_len, struct gzip_cache_entry **pending);
/* The compressed variant of a MISS is ready in fd: the cache keeps a duplicate of it (fd
 * stays the caller's), evicting the least recently used variants to stay in bounds. */
void gzip_cache_fill(struct gzip_cache *c, struct gzip_cache_entry *e, int fd, uint64_t gz_len);
/* Compressing the variant of a MISS failed or was not started: forget it (the next
 * look-up is a MISS again). */
void gzip_cache_abandon(struct gzip_cache *c, struct gzip_cache_entry *e);
void gzip_cache_get_stats(struct gzip_cache *c, struct gzip_cache_stats *out);

/* --- the bounds on compression work ---------------------------------------------------- */

/* Every compression passes one gate: at most max_running at once, and, when cpu_ns_per_s
 * is not 0, a budget of CPU time: a bucket of nanoseconds refilled at cpu_ns_per_s and
 * holding at most one second's worth (full at the start), which each compression's CPU
 * time is taken from once it is known (it may go below zero: the next compressions then
 * wait, as identity responses, until it is refilled above zero). Times are CLOCK_MONOTONIC
 * nanoseconds, given by the caller so that tests can choose them. */
struct gzip_gate;

enum gzip_gate_result {
    GZIP_GATE_OPEN = 0, /* compress, then call gzip_gate_leave */
    GZIP_GATE_BUSY,     /* max_running compressions are running */
    GZIP_GATE_SPENT,    /* the CPU budget is spent for now */
};

struct gzip_gate_stats {
    unsigned running;
    uint64_t opened, busy, spent; /* gzip_gate_enter's answers, counted */
    int64_t credit_ns;            /* the budget left (below zero: owed) */
};

struct gzip_gate *gzip_gate_create(unsigned max_running, uint64_t cpu_ns_per_s, int64_t now_ns);
void gzip_gate_destroy(struct gzip_gate *g);
enum gzip_gate_result gzip_gate_enter(struct gzip_gate *g, int64_t now_ns);
/* A compression that entered is over, having taken cpu_ns of its thread's CPU time. */
void gzip_gate_leave(struct gzip_gate *g, uint64_t cpu_ns);
void gzip_gate_get_stats(struct gzip_gate *g, struct gzip_gate_stats *out);

#endif
