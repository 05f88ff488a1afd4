/* file_cache.c — see file_cache.h. */
#include "file_cache.h"
#include "clock.h"

#include <assert.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FILE_CACHE_STRIPES 64 /* read-write locks over the buckets */

static_assert((FILE_CACHE_STRIPES & (FILE_CACHE_STRIPES - 1)) == 0, "stripes: a mask");

struct file_cache_stripe {
    alignas(64) pthread_rwlock_t lock; /* guards the chains of the buckets it covers */
};

struct file_cache {
    int64_t valid_ms;
    int64_t inactive_ms;
    unsigned max_entries;
    _Atomic int64_t next_sweep_ms; /* the first lookup at or after it sweeps */
    alignas(64) atomic_ulong misses; /* apart from what every hit reads */

    /* Held by whoever changes the table: it guards the fields below and is taken before a
     * stripe's write lock. Readers of the chains need only their stripe's read lock. */
    pthread_mutex_t lock;
    unsigned n_entries;
    unsigned hand;                   /* CLOCK: the next slot looked at for a victim */
    unsigned sweep_at;               /* the next slot the inactivity sweep looks at */
    struct file_cache_entry **slots; /* max_entries; NULL: free */
    unsigned *free_slots;            /* a stack of the free slots' indexes */
    unsigned n_free;
    struct file_cache_stats stats; /* hits: of the entries no longer in the table */

    struct file_cache_stripe stripes[FILE_CACHE_STRIPES];
    size_t mask; /* buckets - 1 */
    struct file_cache_entry *buckets[];
};

static uint64_t hash_key(const char *key, size_t len)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a, then a finalizer for the low bits */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)key[i]) * 1099511628211ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

int64_t file_cache_now_ms(void)
{
    return clock_now_ms();
}

struct file_cache *file_cache_create(unsigned max_entries, int64_t valid_ms, int64_t inactive_ms)
{
    if (max_entries == 0 || max_entries > FILE_CACHE_MAX_ENTRIES)
        return NULL;
    size_t n = FILE_CACHE_STRIPES;
    while (n < max_entries)
        n *= 2;
    struct file_cache *c = aligned_alloc(alignof(struct file_cache),
                                         (sizeof(*c) + n * sizeof(c->buckets[0]) + 63) / 64 * 64);
    if (!c)
        return NULL;
    memset(c, 0, sizeof(*c) + n * sizeof(c->buckets[0]));
    c->slots = calloc(max_entries, sizeof(c->slots[0]));
    c->free_slots = malloc(max_entries * sizeof(c->free_slots[0]));
    if (!c->slots || !c->free_slots) {
        free(c->slots);
        free(c->free_slots);
        free(c);
        return NULL;
    }
    c->valid_ms = valid_ms;
    c->inactive_ms = inactive_ms;
    c->max_entries = max_entries;
    c->mask = n - 1;
    atomic_init(&c->next_sweep_ms, 0);
    atomic_init(&c->misses, 0);
    for (unsigned i = 0; i < max_entries; i++) /* popped from the end: slot 0 first */
        c->free_slots[i] = max_entries - 1 - i;
    c->n_free = max_entries;
    pthread_mutex_init(&c->lock, NULL);
    for (unsigned i = 0; i < FILE_CACHE_STRIPES; i++)
        pthread_rwlock_init(&c->stripes[i].lock, NULL);
    return c;
}

static struct file_cache_entry **bucket_of(struct file_cache *c, uint64_t hash)
{
    return &c->buckets[hash & c->mask];
}

static pthread_rwlock_t *stripe_of(struct file_cache *c, uint64_t hash)
{
    return &c->stripes[(hash & c->mask) & (FILE_CACHE_STRIPES - 1)].lock;
}

static bool entry_is(const struct file_cache_entry *e, uint64_t hash, const char *key,
                     size_t len)
{
    return e->hash == hash && e->key_len == len && memcmp(e->key, key, len) == 0;
}

/* --- changes: under c->lock --------------------------------------------------------- */

/* Take e out of its chain and its slot, onto *dropped (whose table references the caller
 * gives back after unlocking: closing descriptors is no work for a lock holder). */
static void unlink_entry(struct file_cache *c, struct file_cache_entry *e,
                         struct file_cache_entry **dropped)
{
    pthread_rwlock_t *lock = stripe_of(c, e->hash);
    pthread_rwlock_wrlock(lock);
    struct file_cache_entry **p = bucket_of(c, e->hash);
    while (*p != e)
        p = &(*p)->next;
    *p = e->next;
    pthread_rwlock_unlock(lock);
    c->slots[e->slot] = NULL;
    c->free_slots[c->n_free++] = e->slot;
    c->n_entries--;
    /* unlinked under the stripe's write lock: no look-up counts a hit in e any more */
    c->stats.hits += atomic_load_explicit(&e->hits, memory_order_relaxed);
    e->linked = false;
    e->next = *dropped; /* no reader can be on the chain through e any more */
    *dropped = e;
}

static void link_entry(struct file_cache *c, struct file_cache_entry *e)
{
    assert(c->n_free > 0);
    unsigned slot = c->free_slots[--c->n_free];
    c->slots[slot] = e;
    e->slot = slot;
    e->linked = true;
    c->n_entries++;
    pthread_rwlock_t *lock = stripe_of(c, e->hash);
    pthread_rwlock_wrlock(lock);
    struct file_cache_entry **head = bucket_of(c, e->hash);
    e->next = *head;
    *head = e;
    pthread_rwlock_unlock(lock);
}

/* The table is full: advance the hand to an entry not used since it last passed. False
 * when none was found: lookups on other threads set the bits again as the hand went. */
static bool evict_one(struct file_cache *c, struct file_cache_entry **dropped)
{
    /* Two turns at most: the first clears every bit it passes. */
    for (unsigned n = 0; n < 2 * c->max_entries + 1; n++) {
        struct file_cache_entry *e = c->slots[c->hand];
        c->hand = c->hand + 1 == c->max_entries ? 0 : c->hand + 1;
        if (!e || atomic_exchange_explicit(&e->referenced, false, memory_order_relaxed))
            continue;
        unlink_entry(c, e, dropped);
        c->stats.evictions++;
        return true;
    }
    return false;
}

static void put_all(struct file_cache_entry *list)
{
    while (list) {
        struct file_cache_entry *next = list->next;
        file_cache_put(list);
        list = next;
    }
}

/* Drop entries unused for inactive_ms, looking at a part of the slots: at most once every
 * FILE_CACHE_SWEEP_MS, by the lookup that finds the time has come (and the lock free). */
static void sweep_inactive(struct file_cache *c, int64_t now_ms)
{
    int64_t next = atomic_load_explicit(&c->next_sweep_ms, memory_order_relaxed);
    if (now_ms < next ||
        !atomic_compare_exchange_strong_explicit(&c->next_sweep_ms, &next,
                                                 now_ms + FILE_CACHE_SWEEP_MS,
                                                 memory_order_relaxed, memory_order_relaxed))
        return;
    if (pthread_mutex_trylock(&c->lock) != 0)
        return; /* a change is under way: the next sweep will do */
    struct file_cache_entry *dropped = NULL;
    unsigned n = c->max_entries < FILE_CACHE_SWEEP_SLOTS ? c->max_entries : FILE_CACHE_SWEEP_SLOTS;
    for (unsigned i = 0; i < n && c->n_entries > 0; i++) {
        struct file_cache_entry *e = c->slots[c->sweep_at];
        c->sweep_at = c->sweep_at + 1 == c->max_entries ? 0 : c->sweep_at + 1;
        if (e && now_ms - atomic_load_explicit(&e->used_ms, memory_order_relaxed) >=
                     c->inactive_ms) {
            unlink_entry(c, e, &dropped);
            c->stats.inactive++;
        }
    }
    pthread_mutex_unlock(&c->lock);
    put_all(dropped);
}

/* --- the interface -------------------------------------------------------------------- */

enum file_cache_result file_cache_get(struct file_cache *c, const char *key, size_t len,
                                      int64_t now_ms, struct file_cache_entry **out)
{
    sweep_inactive(c, now_ms);
    uint64_t hash = hash_key(key, len);
    pthread_rwlock_t *lock = stripe_of(c, hash);
    pthread_rwlock_rdlock(lock);
    struct file_cache_entry *e = *bucket_of(c, hash);
    while (e && !entry_is(e, hash, key, len))
        e = e->next;
    if (e) { /* the table's reference keeps e alive until the lock is released */
        atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&e->hits, 1, memory_order_relaxed);
    }
    pthread_rwlock_unlock(lock);
    if (!e) {
        atomic_fetch_add_explicit(&c->misses, 1, memory_order_relaxed);
        return FILE_CACHE_MISS;
    }
    /* Written only when they change: a line every thread reads stays shared. */
    if (!atomic_load_explicit(&e->referenced, memory_order_relaxed))
        atomic_store_explicit(&e->referenced, true, memory_order_relaxed);
    if (atomic_load_explicit(&e->used_ms, memory_order_relaxed) != now_ms)
        atomic_store_explicit(&e->used_ms, now_ms, memory_order_relaxed);
    *out = e;
    int64_t validated = atomic_load_explicit(&e->validated_ms, memory_order_relaxed);
    return now_ms - validated >= c->valid_ms ? FILE_CACHE_EXPIRED : FILE_CACHE_HIT;
}

struct file_cache_entry *file_cache_entry_new(const char *key, size_t len, int fd,
                                              const struct stat *st)
{
    struct file_cache_entry *e = malloc(sizeof(*e) + len + 1);
    if (!e)
        return NULL;
    memset(e, 0, sizeof(*e));
    e->fd = fd;
    e->st = *st;
    atomic_init(&e->refs, 1);
    atomic_init(&e->hits, 0);
    atomic_init(&e->referenced, true);
    atomic_init(&e->validated_ms, 0);
    atomic_init(&e->used_ms, 0);
    e->hash = hash_key(key, len);
    e->key_len = len;
    memcpy(e->key, key, len);
    e->key[len] = '\0';
    return e;
}

bool file_cache_insert(struct file_cache *c, struct file_cache_entry *e, int64_t now_ms)
{
    atomic_store_explicit(&e->validated_ms, now_ms, memory_order_relaxed);
    atomic_store_explicit(&e->used_ms, now_ms, memory_order_relaxed);
    atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed); /* the table's */
    struct file_cache_entry *dropped = NULL;
    pthread_mutex_lock(&c->lock);
    /* Only lock holders change chains: this one may be read without its stripe's lock. */
    struct file_cache_entry *old = *bucket_of(c, e->hash);
    while (old && !entry_is(old, e->hash, e->key, e->key_len))
        old = old->next;
    if (old) { /* another thread opened the same file meanwhile: the newer open wins */
        unlink_entry(c, old, &dropped);
        c->stats.removed++;
    } else if (c->n_entries == c->max_entries && !evict_one(c, &dropped)) {
        pthread_mutex_unlock(&c->lock);
        atomic_fetch_sub_explicit(&e->refs, 1, memory_order_relaxed); /* not the table's */
        return false;
    }
    link_entry(c, e);
    c->stats.inserts++;
    pthread_mutex_unlock(&c->lock);
    put_all(dropped);
    return true;
}

void file_cache_validated(struct file_cache_entry *e, int64_t now_ms)
{
    atomic_store_explicit(&e->validated_ms, now_ms, memory_order_relaxed);
}

void file_cache_remove(struct file_cache *c, struct file_cache_entry *e)
{
    struct file_cache_entry *dropped = NULL;
    pthread_mutex_lock(&c->lock);
    if (e->linked) {
        unlink_entry(c, e, &dropped);
        c->stats.removed++;
    }
    pthread_mutex_unlock(&c->lock);
    put_all(dropped);
}

void file_cache_put(struct file_cache_entry *e)
{
    if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) != 1)
        return;
    close(e->fd);
    free(e->data);
    free(e);
}

bool file_cache_same_file(const struct file_cache_entry *e, const struct stat *st)
{
    const struct stat *a = &e->st;
    return a->st_dev == st->st_dev && a->st_ino == st->st_ino &&
           (a->st_mode & S_IFMT) == (st->st_mode & S_IFMT) && a->st_size == st->st_size &&
           a->st_mtim.tv_sec == st->st_mtim.tv_sec && a->st_mtim.tv_nsec == st->st_mtim.tv_nsec &&
           a->st_ctim.tv_sec == st->st_ctim.tv_sec && a->st_ctim.tv_nsec == st->st_ctim.tv_nsec;
}

void file_cache_get_stats(struct file_cache *c, struct file_cache_stats *out)
{
    pthread_mutex_lock(&c->lock);
    *out = c->stats;
    /* the entries in the table are c->lock's: none leaves it while they are summed */
    for (unsigned i = 0; i < c->max_entries && c->n_entries; i++)
        if (c->slots[i]) {
            out->hits += atomic_load_explicit(&c->slots[i]->hits, memory_order_relaxed);
            if (c->slots[i]->data)
                out->bytes += (uint64_t)c->slots[i]->st.st_size;
        }
    out->misses = atomic_load_explicit(&c->misses, memory_order_relaxed);
    out->entries = c->n_entries;
    out->max_entries = c->max_entries;
    pthread_mutex_unlock(&c->lock);
}

void file_cache_destroy(struct file_cache *c)
{
    if (!c)
        return;
    struct file_cache_entry *dropped = NULL;
    pthread_mutex_lock(&c->lock);
    for (unsigned i = 0; i < c->max_entries; i++)
        if (c->slots[i])
            unlink_entry(c, c->slots[i], &dropped);
    pthread_mutex_unlock(&c->lock);
    put_all(dropped);
    for (unsigned i = 0; i < FILE_CACHE_STRIPES; i++)
        pthread_rwlock_destroy(&c->stripes[i].lock);
    pthread_mutex_destroy(&c->lock);
    free(c->slots);
    free(c->free_slots);
    free(c);
}
