/* file_cache.h — a cache of open files, shared by every thread (nginx's open_file_cache).
 *
 * Keyed by a path (the caller's: mod_static uses the request path relative to the root).
 * An entry holds an open descriptor, its stat and what the caller derived from it once
 * (validators, media type). The descriptor is shared: it must only be read at explicit
 * offsets (pread, sendfile with an offset pointer), never through its file position.
 *
 * Entries are reference counted: the table holds one reference, and every user one more,
 * taken by file_cache_get or file_cache_insert and given back with file_cache_put. An
 * entry removed from the table (evicted, replaced, found stale) lives on until its last
 * user puts it; only then is its descriptor closed. Entries never point back at the
 * cache, so a reference may even outlive it.
 *
 * Locking: lookups take the read lock of one stripe of buckets and touch the entry with
 * atomics only, so hits on any files by any threads proceed together. Changes (insert,
 * remove, eviction, the inactivity sweep) take the cache's one mutex, then the write lock
 * of the stripe they change; they do no I/O under a lock (descriptors of dropped entries
 * are closed after unlocking).
 *
 * Eviction: CLOCK over an array of max_entries slots. A hit sets the entry's reference
 * bit; an insert into a full table advances the hand, clearing bits, to the first entry
 * whose bit is clear. Apart from that, a lookup at most once every FILE_CACHE_SWEEP_MS
 * sweeps a part of the slots and drops entries unused for inactive_ms.
 *
 * Freshness is the caller's to check: file_cache_get says when an entry was last
 * validated more than valid_ms ago (FILE_CACHE_EXPIRED); the caller looks at the file
 * again and then either calls file_cache_validated or file_cache_remove.
 *
 * Times are CLOCK_MONOTONIC milliseconds passed in by the caller (file_cache_now_ms).
 */
#ifndef LFHTTPD_FILE_CACHE_H
#define LFHTTPD_FILE_CACHE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#define FILE_CACHE_MAX_ENTRIES 1000000 /* a bound on open_file_cache_max */
#define FILE_CACHE_SWEEP_MS 1000       /* how often a lookup sweeps for inactive entries */
#define FILE_CACHE_SWEEP_SLOTS 1024    /* slots one sweep looks at */

struct file_cache;

/* The validators of one version of a file (RFC 9110 section 8.8): made once per entry. */
struct file_validators {
    char etag[64];     /* strong, quoted */
    char last_mod[30]; /* IMF-fixdate */
    int64_t mtime_s;
};

struct file_cache_entry {
    /* Set by the caller between file_cache_entry_new and file_cache_insert; read-only
     * once inserted. */
    int fd;           /* open for reading; closed with the last put */
    struct stat st;   /* the descriptor's, at open */
    unsigned variant; /* the caller's: which index file a key resolved to */
    const char *type; /* media type: a string that outlives the cache */
    char *data;       /* NULL, or the whole file's bytes (malloc'd; freed with the entry) */
    struct file_validators v;

    /* The cache's. */
    atomic_uint refs;              /* the table's (while linked) + one per user */
    atomic_ulong hits;             /* look-ups that found it: on the line refs dirties */
    atomic_bool referenced;        /* CLOCK bit: used since the hand last passed */
    _Atomic int64_t validated_ms;  /* when the file was last found unchanged */
    _Atomic int64_t used_ms;       /* when the entry was last handed out */
    bool linked;                   /* in the table (guarded by the cache's mutex) */
    unsigned slot;                 /* its place in the CLOCK array, while linked */
    uint64_t hash;                 /* of the key */
    struct file_cache_entry *next; /* in its bucket; in a list of dropped entries */
    size_t key_len;
    char key[]; /* NUL-terminated */
};

enum file_cache_result {
    FILE_CACHE_MISS = 0, /* no entry */
    FILE_CACHE_HIT,      /* *out: a reference to an entry validated within valid_ms */
    FILE_CACHE_EXPIRED,  /* *out: a reference to an entry to validate before use */
};

/* Counted under the cache's mutex, but for the look-ups. A hit is counted in its entry,
 * on the cache line the hit's reference count makes its thread's anyway (a counter shared
 * by every hit would cost more than the hit), and added to the cache's total when the
 * entry leaves the table; a miss, which opens a file anyway, on a line of its own. */
struct file_cache_stats {
    unsigned entries, max_entries;
    uint64_t hits;      /* look-ups that found an entry (fresh, or to revalidate) */
    uint64_t misses;    /* look-ups that found none */
    uint64_t bytes;     /* of the files held in memory (data) by the entries in the table */
    uint64_t inserts;   /* entries added */
    uint64_t evictions; /* taken by the CLOCK hand to make room */
    uint64_t inactive;  /* dropped by the sweep, unused for inactive_ms */
    uint64_t removed;   /* taken out by file_cache_remove, or replaced by an insert */
};

/* A cache of at most max_entries (1 to FILE_CACHE_MAX_ENTRIES) entries; NULL when out of
 * memory or max_entries is out of range. */
struct file_cache *file_cache_create(unsigned max_entries, int64_t valid_ms, int64_t inactive_ms);
/* Drop every entry (each closes its descriptor once its users are done) and free the
 * cache. */
void file_cache_destroy(struct file_cache *c);

/* The monotonic clock in milliseconds, without a system call (the coarse clock). */
int64_t file_cache_now_ms(void);

/* Look key[0..len) up. On HIT and EXPIRED, *out holds a new reference. */
enum file_cache_result file_cache_get(struct file_cache *c, const char *key, size_t len,
                                      int64_t now_ms, struct file_cache_entry **out);

/* A new entry for key, owning fd, with one reference (the caller's); NULL when out of
 * memory (fd is then still the caller's). The caller fills the rest before inserting. */
struct file_cache_entry *file_cache_entry_new(const char *key, size_t len, int fd,
                                              const struct stat *st);
/* Add e (from file_cache_entry_new) to the table, replacing an entry with the same key and
 * evicting one if the table is full. The caller's reference stays the caller's. False if
 * no entry could be evicted (every one was hit again as the hand passed): e is then not
 * in the table, and serves its request uncached, closed with the caller's last put. */
bool file_cache_insert(struct file_cache *c, struct file_cache_entry *e, int64_t now_ms);

/* The caller found e's file unchanged at now_ms. */
void file_cache_validated(struct file_cache_entry *e, int64_t now_ms);
/* The caller found e's file changed or gone: take e out of the table, if it is still in
 * it. The caller's reference stays the caller's. */
void file_cache_remove(struct file_cache *c, struct file_cache_entry *e);

/* Give back a reference; the last one closes the descriptor and frees the entry. */
void file_cache_put(struct file_cache_entry *e);

/* Is the file st describes the same file, unchanged, as e's (device, inode, size, mtime
 * and ctime to the nanosecond, type)? */
bool file_cache_same_file(const struct file_cache_entry *e, const struct stat *st);

void file_cache_get_stats(struct file_cache *c, struct file_cache_stats *out);

#endif
