/* mod_gzip.c — the gzip, br and zstd content codings (RFC 9110 sections 8.4, 12.5.3), as a
 * filter. What follows says "gzip" for all three: each coding switched on is offered alike,
 * the client's q-values choose (a tie goes to br, then zstd, then gzip), and each variant
 * has its own ETag suffix (-gzip, -br, -zstd), sidecar (.gz, .br, .zst) and cache entries.
 * The encoders are in mod_gzip_coding.c.
 *
 * Settings are per block (the top level, each server and location: gzip_block), merged as
 * nginx merges, with nginx's defaults in a file with an `http { }` block and lfhttpd's
 * otherwise (conf_defaults). `gzip off` turns off br and zstd too unless a block says
 * `brotli on` or `zstd on`. Once Accept-Encoding has chosen a coding, nginx's tests of the
 * request apply (request_allows): gzip_http_version, gzip_disable, and gzip_proxied for a
 * request with Via.
 *
 * The filter runs on every finished response. It touches GET and HEAD answers of a
 * compressible media type with no Content-Encoding yet, of two kinds:
 *
 *   files    responses that carry an open file (resp_file_fd, mod_static's): 200 whole
 *            files, the 304 and 206 answers about them, and error pages from files (403
 *            and 404, compressed with their status kept and no conditionals);
 *   memory   200, 403 and 404 responses whose body is all memory (in-process handlers,
 *            the server's own error pages), nginx's statuses.
 *
 * A response is negotiable when its type is compressible and its size is in
 * [gzip_min_length, gzip_max_length] (a file over the maximum still is when a fresh
 * sidecar NAME.gz stands beside it). Every negotiable response gets `Vary:
 * Accept-Encoding`, compressed or not, 304 and 206 included, so that caches keep the
 * variants apart. Range requests are answered from the identity file (gzip is skipped).
 *
 * The gzip variant's ETag is the identity's, weakened, with "-gzip" before the closing
 * quote: "i-s-m" becomes W/"i-s-m-gzip". Weak, because the variant's bytes are not one
 * fixed sequence: they come from a sidecar when one is fresh, else from zlib at the
 * configured level, and the two differ while meaning the same content (nginx weakens the
 * ETag of what it compresses for the same reason). A weak tag is all If-None-Match needs,
 * and since ranges of the variant are never served, strong comparison buys nothing;
 * If-Match, which compares strongly, then matches the variant only with "*", as RFC 9110
 * section 13.1.1 says it must. mod_static evaluates the conditionals against the identity
 * ETag; when gzip is chosen this filter evaluates If-Match and If-None-Match again against
 * the variant's tag (a 200 may become a 304, a 304 a 200, a 200 a 412).
 *
 * A file's variant comes from its fresh sidecar (gzip_static), else from the cache, else
 * it is compressed into a memfd and offered to the cache. The cache is keyed by (st_dev,
 * st_ino) and valid for one (mtime, size); it keeps each variant in a sealed memfd and
 * hands out duplicates of its descriptor, which the response then owns: the body
 * goes out with sendfile, and an entry evicted during a send cannot pull the bytes from
 * under it (the memory goes with the last descriptor).
 *
 * Compression runs on the request's thread, so its work is bounded three ways, and a
 * request that would exceed a bound is answered with the identity at once (nothing
 * waits for a compression but the request that started it):
 *
 *   one at a time per file      a request for a version another thread is compressing
 *                               gets the identity, not a wait (a hot file is still
 *                               compressed once);
 *   gzip_max_compressions       at most that many compressions at once, server-wide
 *                               (default: half the threads), so the rest of the threads
 *                               keep serving;
 *   gzip_cpu_per_second         the CPU time compressions may take, averaged over time:
 *                               a token bucket of CPU nanoseconds, refilled at that rate
 *                               and holding at most one second's worth, charged with
 *                               each compression's measured thread CPU time. A cycle of
 *                               files larger than the cache (every request a miss) then
 *                               costs at most this much CPU a second, whatever the
 *                               level or the file sizes; what is past it goes identity.
 *
 * A CPU budget rather than "compress on the second request only": a rule on how often a
 * file is asked for only delays a cycle by one round, and a byte budget means a
 * different CPU cost at each coding and level (br 11 is ~50 times br 5 per byte).
 */
#include "mod_gzip.h"

#include <assert.h>
#include <ctype.h>
#include <stddef.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "http_params.h"
#include "regex.h"
#include "log.h"
#include "module.h"
#include "strbuf.h"

#define GZIP_TYPES_MAX 64
#define GZIP_TYPE_LEN 128
#define GZIP_DISABLE_MAX 16 /* regexes of one gzip_disable */
#define GZIP_CACHE_ENTRIES_MAX 4096 /* descriptors the cache may hold, at most */
#define GZIP_NAME_CAP (REQUEST_PATH_MAX + 260)

/* `gzip_types`: what a block compresses besides its base set (text/html; or lfhttpd's). */
struct gzip_types {
    bool any; /* `*` */
    unsigned n;
    char t[GZIP_TYPES_MAX][GZIP_TYPE_LEN]; /* lowercase; may end in a slash-star */
};

/* `gzip_disable`'s regexes, matched without case against User-Agent. */
struct gzip_disable {
    unsigned n;
    struct regex re[GZIP_DISABLE_MAX];
};

enum { STATIC_OFF = 0, STATIC_ON = 1, STATIC_ALWAYS = 2 }; /* gzip_static */

/* gzip_proxied: which answers to a request with Via are compressed (nginx's words). */
enum {
    PROXIED_OFF = 1u << 0,
    PROXIED_EXPIRED = 1u << 1,
    PROXIED_NO_CACHE = 1u << 2,
    PROXIED_NO_STORE = 1u << 3,
    PROXIED_PRIVATE = 1u << 4,
    PROXIED_NO_LM = 1u << 5,
    PROXIED_NO_ETAG = 1u << 6,
    PROXIED_AUTH = 1u << 7,
    PROXIED_ANY = 1u << 8,
};

/* The settings of one block (the top level, a server, a location). While a block is read,
 * -1 (0 for http_version and proxied, NULL for the lists, UINT64_MAX for min_length) is
 * "not said"; merge() then takes the outer block's, and at the top level the defaults,
 * which are nginx's in a file with an `http { }` block and lfhttpd's otherwise. */
struct gzip_conf {
    /* gzip, brotli, zstd: on|off. brotli and zstd left unsaid (-1, even after the merge)
     * follow gzip: `gzip off` turns off every coding the block does not switch on itself. */
    int8_t on[CODING_COUNT];
    int8_t static_mode;  /* gzip_static: STATIC_* */
    int8_t vary;         /* gzip_vary */
    int8_t msie6;        /* gzip_disable msie6 (merged apart from the regexes, as nginx) */
    uint8_t http_version; /* gzip_http_version: 10 or 11 */
    unsigned proxied;     /* gzip_proxied: PROXIED_* bits */
    int level[CODING_COUNT]; /* gzip_comp_level 1-9, brotli_comp_level 0-11, zstd_ 1-19 */
    uint64_t min_length;     /* gzip_min_length: shorter bodies are sent as they are */
    struct gzip_types *types;     /* gzip_types */
    struct gzip_disable *disable; /* gzip_disable's regexes */
    bool types_own, disable_own;  /* this block's (freed with it), not inherited */
    bool html_only;   /* the base set is nginx's text/html, not lfhttpd's (see type_decide) */
    unsigned offered; /* the codings compressed on the fly: CODING_BIT()s, from on[] */
    bool asks; /* some setting tests the request (request_allows); lfhttpd's defaults none */
    unsigned long id; /* this block's, never reused (see type_compressible) */
};

struct gzip_state {
    struct gzip_conf top;     /* first: the table's per-block lines point into it at the top */
    unsigned index;           /* in the chain: for module_settings() */
    uint64_t max_length;      /* gzip_max_length: larger ones are not compressed here */
    uint64_t cache_bytes;     /* gzip_cache_size; 0: no cache */
    struct gzip_cache *cache; /* NULL when off */
    unsigned max_compressions; /* gzip_max_compressions; 0: not said (half the threads) */
    unsigned cpu_per_s_ms;     /* gzip_cpu_per_second; 0: no budget */
    struct gzip_gate *gate;    /* both bounds: every compression passes it */
};
static_assert(offsetof(struct gzip_state, top) == 0, "the per-block lines read the top into top");

/* --- Accept-Encoding ------------------------------------------------------------------ */

static bool token_is(const char *p, size_t len, const char *lower)
{
    return strlen(lower) == len && strncasecmp(p, lower, len) == 0;
}

static void weigh(int *slot, int q)
{
    if (q > *slot) /* a coding listed twice: the kinder weight */
        *slot = q;
}

void gzip_accept_init(struct gzip_accept *a)
{
    *a = (struct gzip_accept){
        .gzip = -1, .br = -1, .zstd = -1, .identity = -1, .star = -1, .any = false};
}

void gzip_accept_parse(struct gzip_accept *a, const char *value, size_t len)
{
    const char *p = value, *end = value + len;
    struct http_qitem it;
    while (http_qlist_next(&p, end, &it)) {
        const char *tok = it.value.p;
        size_t tlen = it.value.len;
        if (memchr(tok, '/', tlen)) /* a media range: no coding at all */
            continue;
        a->any = true;
        if (token_is(tok, tlen, "gzip") || token_is(tok, tlen, "x-gzip"))
            weigh(&a->gzip, it.q);
        else if (token_is(tok, tlen, "br"))
            weigh(&a->br, it.q);
        else if (token_is(tok, tlen, "zstd"))
            weigh(&a->zstd, it.q);
        else if (token_is(tok, tlen, "identity"))
            weigh(&a->identity, it.q);
        else if (token_is(tok, tlen, "*"))
            weigh(&a->star, it.q);
    }
}

/* The server's preference among codings of equal weight: the smallest bytes first. */
static const enum content_coding preference[CODING_COUNT] = {CODING_BR, CODING_ZSTD,
                                                             CODING_GZIP};

static enum gzip_choice choice_of(enum content_coding c)
{
    return c == CODING_BR ? GZIP_CHOICE_BR : c == CODING_ZSTD ? GZIP_CHOICE_ZSTD
                                                              : GZIP_CHOICE_GZIP;
}

enum content_coding gzip_choice_coding(enum gzip_choice ch)
{
    return ch == GZIP_CHOICE_BR ? CODING_BR : ch == GZIP_CHOICE_ZSTD ? CODING_ZSTD : CODING_GZIP;
}

enum gzip_choice gzip_accept_choose_among(const struct gzip_accept *a, unsigned offered)
{
    if (!a->any)
        return GZIP_CHOICE_IDENTITY;
    const int own[CODING_COUNT] = {[CODING_GZIP] = a->gzip, [CODING_BR] = a->br,
                                   [CODING_ZSTD] = a->zstd};
    int best = -1, best_q = 0;
    for (unsigned i = 0; i < CODING_COUNT; i++) {
        enum content_coding c = preference[i];
        int q = own[c] >= 0 ? own[c] : (a->star >= 0 ? a->star : 0);
        if ((offered & CODING_BIT(c)) && q > best_q) /* a tie keeps the preferred one */
            best = (int)c, best_q = q;
    }
    int id = a->identity >= 0 ? a->identity : a->star; /* -1: no preference stated */
    if (best >= 0 && best_q >= id)
        return choice_of((enum content_coding)best);
    return id != 0 ? GZIP_CHOICE_IDENTITY : GZIP_CHOICE_NONE;
}

enum gzip_choice gzip_accept_choose(const struct gzip_accept *a)
{
    return gzip_accept_choose_among(a, CODING_BIT(CODING_GZIP));
}

enum gzip_choice gzip_negotiate(const char *value, size_t len)
{
    struct gzip_accept a;
    gzip_accept_init(&a);
    gzip_accept_parse(&a, value, len);
    return gzip_accept_choose(&a);
}

/* Every Accept-Encoding line of the request, taken together, among the codings offered. */
static enum gzip_choice request_choice(const struct http_request *h, unsigned offered)
{
    struct gzip_accept a;
    gzip_accept_init(&a);
    if (h->accept_encoding.p) /* the parser saw at least one line: look for them all */
        for (unsigned i = 0; i < h->n_headers; i++)
            if (http_slice_eq(h->headers[i].name, "accept-encoding"))
                gzip_accept_parse(&a, h->headers[i].value.p, h->headers[i].value.len);
    return gzip_accept_choose_among(&a, offered);
}

static bool choice_is_coded(enum gzip_choice ch)
{
    return ch != GZIP_CHOICE_IDENTITY && ch != GZIP_CHOICE_NONE;
}

/* --- compression ---------------------------------------------------------------------- */

/* gzip alone, for the unit tests and callers that predate the other codings. */
int gzip_compress_iov(const struct iovec *in, unsigned n, int level, char **out,
                      size_t *out_len)
{
    return coding_compress_iov(CODING_GZIP, in, n, level, out, out_len);
}

int gzip_compress_file(int fd, uint64_t size, int level, int *memfd, uint64_t *gz_len)
{
    return coding_compress_file(CODING_GZIP, fd, size, level, memfd, gz_len);
}

/* --- the cache -------------------------------------------------------------------------- */

struct gzip_cache_entry {
    struct gzip_file_id id;
    int fd;              /* the memfd holding the variant; -1 while pending */
    uint64_t gz_len;
    uint64_t cost_bytes; /* gz_len rounded up to whole pages: what the memfd holds */
    bool pending;        /* a thread is compressing it; others are told GZIP_CACHE_BUSY */
    struct gzip_cache_entry *hash_next;
    struct gzip_cache_entry *lru_prev, *lru_next; /* ready entries, most recent first */
};

struct gzip_cache {
    pthread_mutex_t lock;
    uint64_t cap_bytes, bytes;
    unsigned max_entries, n_entries; /* ready entries: each holds one descriptor */
    uint64_t hits, misses, evictions, busy;
    struct gzip_cache_entry lru; /* sentinel of the ring: lru.lru_next is the newest */
    size_t mask;                 /* buckets - 1 */
    struct gzip_cache_entry *buckets[];
};

struct gzip_cache *gzip_cache_create(uint64_t cap_bytes, unsigned max_entries)
{
    size_t n = 64;
    while (n < (size_t)max_entries * 2)
        n *= 2;
    struct gzip_cache *c = calloc(1, sizeof(*c) + n * sizeof(c->buckets[0]));
    if (!c)
        return NULL;
    pthread_mutex_init(&c->lock, NULL);
    c->cap_bytes = cap_bytes;
    c->max_entries = max_entries ? max_entries : 1;
    c->lru.lru_next = c->lru.lru_prev = &c->lru;
    c->mask = n - 1;
    return c;
}

static struct gzip_cache_entry **bucket(struct gzip_cache *c, const struct gzip_file_id *id)
{
    uint64_t h = ((uint64_t)id->dev * 0x9e3779b97f4a7c15ull) ^ (uint64_t)id->ino;
    h ^= (uint64_t)id->coding << 61;
    h *= 0xff51afd7ed558ccdull;
    return &c->buckets[(h >> 32) & c->mask];
}

static struct gzip_cache_entry *find(struct gzip_cache *c, const struct gzip_file_id *id)
{
    for (struct gzip_cache_entry *e = *bucket(c, id); e; e = e->hash_next)
        if (e->id.dev == id->dev && e->id.ino == id->ino && e->id.coding == id->coding)
            return e;
    return NULL;
}

static void lru_unlink(struct gzip_cache_entry *e)
{
    e->lru_prev->lru_next = e->lru_next;
    e->lru_next->lru_prev = e->lru_prev;
}

static void lru_push_front(struct gzip_cache *c, struct gzip_cache_entry *e)
{
    e->lru_prev = &c->lru;
    e->lru_next = c->lru.lru_next;
    c->lru.lru_next->lru_prev = e;
    c->lru.lru_next = e;
}

/* Unlink e from its bucket and free it (and its memfd and accounting, if ready). */
static void drop(struct gzip_cache *c, struct gzip_cache_entry *e)
{
    struct gzip_cache_entry **pp = bucket(c, &e->id);
    while (*pp != e)
        pp = &(*pp)->hash_next;
    *pp = e->hash_next;
    if (!e->pending) {
        lru_unlink(e);
        close(e->fd); /* a send holding a duplicate keeps the bytes alive */
        c->bytes -= e->cost_bytes;
        c->n_entries--;
    }
    free(e);
}

static void evict(struct gzip_cache *c)
{
    while ((c->bytes > c->cap_bytes || c->n_entries > c->max_entries) &&
           c->lru.lru_prev != &c->lru) {
        drop(c, c->lru.lru_prev);
        c->evictions++;
    }
}

static bool same_version(const struct gzip_file_id *a, const struct gzip_file_id *b)
{
    return a->mtime_ns == b->mtime_ns && a->size == b->size;
}

enum gzip_cache_result gzip_cache_get(struct gzip_cache *c, const struct gzip_file_id *id,
                                      int *fd, uint64_t *gz_len,
                                      struct gzip_cache_entry **pending)
{
    enum gzip_cache_result res = GZIP_CACHE_MISS;
    *pending = NULL;
    pthread_mutex_lock(&c->lock);
    struct gzip_cache_entry *e = find(c, id);
    if (e && !same_version(&e->id, id)) {
        if (e->pending) { /* another version is being made: leave it be */
            res = GZIP_CACHE_BYPASS;
            goto out;
        }
        drop(c, e); /* stale */
        e = NULL;
    }
    if (e && e->pending) { /* being made: waiting would hold this thread as long */
        c->busy++;
        res = GZIP_CACHE_BUSY;
        goto out;
    }
    if (e) {
        /* Duplicated under the lock: an eviction cannot close it between look-up and dup. */
        *fd = fcntl(e->fd, F_DUPFD_CLOEXEC, 0);
        if (*fd < 0) {
            res = GZIP_CACHE_BYPASS;
            goto out;
        }
        *gz_len = e->gz_len;
        lru_unlink(e);
        lru_push_front(c, e);
        c->hits++;
        res = GZIP_CACHE_HIT;
        goto out;
    }
    e = calloc(1, sizeof(*e));
    if (!e) {
        res = GZIP_CACHE_BYPASS;
        goto out;
    }
    e->id = *id;
    e->fd = -1;
    e->pending = true;
    struct gzip_cache_entry **b = bucket(c, id);
    e->hash_next = *b;
    *b = e;
    c->misses++;
    *pending = e;
out:
    pthread_mutex_unlock(&c->lock);
    return res;
}

void gzip_cache_fill(struct gzip_cache *c, struct gzip_cache_entry *e, int fd,
                     uint64_t gz_len)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t cost = (gz_len + page - 1) / page * page;
    if (cost == 0)
        cost = page;
    pthread_mutex_lock(&c->lock);
    int dup_fd = cost <= c->cap_bytes ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
    if (dup_fd < 0) { /* too large to keep, or no descriptor left */
        drop(c, e);
    } else {
        e->pending = false;
        e->fd = dup_fd;
        e->gz_len = gz_len;
        e->cost_bytes = cost;
        c->bytes += cost;
        c->n_entries++;
        lru_push_front(c, e);
        evict(c);
    }
    pthread_mutex_unlock(&c->lock);
}

void gzip_cache_abandon(struct gzip_cache *c, struct gzip_cache_entry *e)
{
    pthread_mutex_lock(&c->lock);
    drop(c, e);
    pthread_mutex_unlock(&c->lock);
}

void gzip_cache_get_stats(struct gzip_cache *c, struct gzip_cache_stats *out)
{
    pthread_mutex_lock(&c->lock);
    *out = (struct gzip_cache_stats){c->n_entries, c->bytes,     c->hits,
                                     c->misses,    c->evictions, c->busy};
    pthread_mutex_unlock(&c->lock);
}

void gzip_cache_destroy(struct gzip_cache *c)
{
    if (!c)
        return;
    for (size_t i = 0; i <= c->mask; i++)
        while (c->buckets[i])
            drop(c, c->buckets[i]);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* --- the gate: how many compressions at once, and how much CPU ----------------------- */

#define NS_PER_S 1000000000ll

struct gzip_gate {
    pthread_mutex_t lock;
    unsigned max_running, running;
    int64_t budget_ns;   /* CPU nanoseconds a second; 0: no budget */
    int64_t credit_ns;   /* at most budget_ns; below 0 after a compression that overran */
    int64_t refilled_ns; /* when credit_ns was last refilled */
    uint64_t opened, busy, spent;
};

struct gzip_gate *gzip_gate_create(unsigned max_running, uint64_t cpu_ns_per_s, int64_t now_ns)
{
    struct gzip_gate *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    pthread_mutex_init(&g->lock, NULL);
    g->max_running = max_running ? max_running : 1;
    g->budget_ns = cpu_ns_per_s > (uint64_t)INT64_MAX / 2 ? INT64_MAX / 2 : (int64_t)cpu_ns_per_s;
    g->credit_ns = g->budget_ns;
    g->refilled_ns = now_ns;
    return g;
}

void gzip_gate_destroy(struct gzip_gate *g)
{
    if (!g)
        return;
    pthread_mutex_destroy(&g->lock);
    free(g);
}

/* Add what the budget earned since the last refill (one second's worth at most). */
static void refill(struct gzip_gate *g, int64_t now_ns)
{
    int64_t elapsed = now_ns - g->refilled_ns;
    if (elapsed <= 0)
        return;
    g->refilled_ns = now_ns;
    /* In double: elapsed times a budget of seconds overflows 64 bits after minutes. */
    double earned = (double)elapsed * (double)g->budget_ns / (double)NS_PER_S;
    double credit = (double)g->credit_ns + earned;
    g->credit_ns = credit >= (double)g->budget_ns ? g->budget_ns : (int64_t)credit;
}

enum gzip_gate_result gzip_gate_enter(struct gzip_gate *g, int64_t now_ns)
{
    enum gzip_gate_result res = GZIP_GATE_OPEN;
    pthread_mutex_lock(&g->lock);
    if (g->budget_ns)
        refill(g, now_ns);
    if (g->running >= g->max_running) {
        res = GZIP_GATE_BUSY;
        g->busy++;
    } else if (g->budget_ns && g->credit_ns <= 0) {
        res = GZIP_GATE_SPENT;
        g->spent++;
    } else {
        g->running++;
        g->opened++;
    }
    pthread_mutex_unlock(&g->lock);
    return res;
}

void gzip_gate_leave(struct gzip_gate *g, uint64_t cpu_ns)
{
    pthread_mutex_lock(&g->lock);
    g->running--;
    if (g->budget_ns)
        g->credit_ns -= cpu_ns > (uint64_t)INT64_MAX / 2 ? INT64_MAX / 2 : (int64_t)cpu_ns;
    pthread_mutex_unlock(&g->lock);
}

void gzip_gate_get_stats(struct gzip_gate *g, struct gzip_gate_stats *out)
{
    pthread_mutex_lock(&g->lock);
    *out = (struct gzip_gate_stats){g->running, g->opened, g->busy, g->spent, g->credit_ns};
    pthread_mutex_unlock(&g->lock);
}

static int64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

/* Why a compression was not started, for the debug log. */
static const char *gate_refusal(enum gzip_gate_result r)
{
    return r == GZIP_GATE_BUSY ? "gzip_max_compressions are running"
                               : "gzip_cpu_per_second is spent";
}

/* --- headers ---------------------------------------------------------------------------- */

/* Is the media type of a Content-Type value one to compress? Decided afresh by
 * type_decide; most responses in a row have the same type, so each thread remembers its
 * last answer (per configuration: a state's address may be reused after a reload, its
 * id is not). */
static bool type_decide(const struct gzip_conf *g, const char *v, size_t len);

static bool type_compressible(const struct gzip_conf *g, const char *v, size_t len)
{
    static _Thread_local struct {
        unsigned long id;
        size_t len;
        bool yes;
        char value[64];
    } last;
    if (last.id == g->id && last.len == len && memcmp(last.value, v, len) == 0)
        return last.yes;
    bool yes = type_decide(g, v, len);
    if (len <= sizeof(last.value)) {
        last.id = g->id;
        last.len = len;
        last.yes = yes;
        memcpy(last.value, v, len);
    }
    return yes;
}

/* nginx's base set is text/html alone (a file with `http { }`); lfhttpd's is every text/ type
 * and the common text formats that do not say text/. gzip_types adds to it, `*` is any type. */
static bool type_decide(const struct gzip_conf *g, const char *v, size_t len)
{
    static const char *const defaults[] = {"application/javascript", "application/json",
                                           "application/xml", "image/svg+xml"};
    char t[GZIP_TYPE_LEN];
    size_t n = 0;
    while (len > 0 && (*v == ' ' || *v == '\t'))
        v++, len--;
    while (n < len && v[n] != ';' && v[n] != ' ' && v[n] != '\t') {
        if (n + 1 == sizeof(t))
            return false;
        t[n] = (char)tolower((unsigned char)v[n]);
        n++;
    }
    t[n] = '\0';
    if (n == 0)
        return false;
    if (g->html_only ? strcmp(t, "text/html") == 0 : strncmp(t, "text/", 5) == 0)
        return true;
    for (size_t i = 0; !g->html_only && i < sizeof(defaults) / sizeof(defaults[0]); i++)
        if (strcmp(t, defaults[i]) == 0)
            return true;
    const struct gzip_types *ty = g->types;
    if (ty && ty->any)
        return true;
    for (unsigned i = 0; ty && i < ty->n; i++) {
        const char *c = ty->t[i];
        size_t cl = strlen(c);
        if (strcmp(t, c) == 0 || (cl >= 2 && strcmp(c + cl - 2, "/*") == 0 &&
                                  strncmp(t, c, cl - 1) == 0))
            return true;
    }
    return false;
}

/* Does the comma-separated list hold `lower` (case-insensitive)? */
static bool list_has(const char *v, size_t len, const char *lower)
{
    const char *p = v, *end = v + len;
    while (p < end) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == ','))
            p++;
        const char *s = p;
        while (p < end && *p != ',')
            p++;
        const char *e = p;
        while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if (token_is(s, (size_t)(e - s), lower))
            return true;
    }
    return false;
}

static void vary_add(struct response *r)
{
    size_t len;
    const char *v = resp_header_get(r, "Vary", &len);
    if (!v) {
        resp_header(r, "Vary", "Accept-Encoding");
        return;
    }
    if (list_has(v, len, "accept-encoding") || list_has(v, len, "*"))
        return;
    char merged[512];
    int n = snprintf(merged, sizeof(merged), "%.*s, Accept-Encoding", (int)len, v);
    if (n < 0 || (size_t)n >= sizeof(merged)) {
        resp_fail(r);
        return;
    }
    resp_header_set(r, "Vary", merged);
}

/* A variant's ETag from the response's: W/"<opaque>-gzip", -br or -zstd (see the top).
 * False if the response has no well-formed ETag. */
static bool variant_etag(const struct response *r, enum content_coding c, char *out, size_t cap)
{
    size_t len;
    const char *v = resp_header_get(r, "ETag", &len);
    if (!v)
        return false;
    if (len >= 2 && v[0] == 'W' && v[1] == '/')
        v += 2, len -= 2;
    if (len < 2 || v[0] != '"' || v[len - 1] != '"' || memchr(v + 1, '"', len - 2))
        return false;
    int n = snprintf(out, cap, "W/%.*s-%s\"", (int)(len - 1), v, coding_name(c));
    return n > 0 && (size_t)n < cap;
}

/* Headers of a response now carrying a compressed variant. */
static void mark_coded(struct response *r, enum content_coding c, const char *etag)
{
    if (etag)
        resp_header_set(r, "ETag", etag);
    resp_header_remove(r, "Accept-Ranges"); /* ranges are served of the identity only */
    resp_header_set(r, "Content-Encoding", coding_name(c));
}

/* --- nginx's tests of the request (its ngx_http_gzip_ok, Accept-Encoding aside) ------- */

/* Does the response (to a request with Via) pass gzip_proxied? In nginx's order: a
 * response with Expires is judged by it alone (`expired`: compressed when already past),
 * one with Cache-Control by its no-cache, no-store and private; else `no_last_modified`
 * and `no_etag` refuse a response that has the field, and what is left is compressed. */
static bool proxied_allows(unsigned p, const struct http_request *h, const struct response *r)
{
    if (p & PROXIED_OFF)
        return false;
    if (p & PROXIED_ANY)
        return true;
    if ((p & PROXIED_AUTH) && http_find_header(h, "authorization"))
        return true;
    size_t len;
    const char *v = resp_header_get(r, "Expires", &len);
    if (v) {
        int64_t expires, date;
        size_t dlen;
        const char *d = resp_header_get(r, "Date", &dlen);
        if (!(p & PROXIED_EXPIRED) || http_date_parse((struct http_slice){v, len}, &expires) < 0)
            return false;
        if (!d)
            date = (int64_t)time(NULL);
        else if (http_date_parse((struct http_slice){d, dlen}, &date) < 0)
            return false;
        return expires < date;
    }
    v = resp_header_get(r, "Cache-Control", &len);
    if (v)
        return ((p & PROXIED_NO_CACHE) && list_has(v, len, "no-cache")) ||
               ((p & PROXIED_NO_STORE) && list_has(v, len, "no-store")) ||
               ((p & PROXIED_PRIVATE) && list_has(v, len, "private"));
    if ((p & PROXIED_NO_LM) && resp_header_get(r, "Last-Modified", &len))
        return false;
    return !((p & PROXIED_NO_ETAG) && resp_header_get(r, "ETag", &len));
}

/* The request's side of the choice, as nginx's: gzip_http_version, gzip_disable and, for a
 * request that came through a proxy (it has Via), gzip_proxied. Asked once Accept-Encoding
 * has chosen a coding (request_choice), so that a request for the identity pays nothing. */
static inline bool request_allows(const struct gzip_conf *c, const struct request *req,
                           const struct response *resp)
{
    const struct http_request *h = req->http;
    if (c->http_version == 11 && h->version_minor < 1)
        return false;
    if (c->msie6 > 0 && http_user_agent_msie6(h->user_agent))
        return false;
    if (!c->asks)
        return true;
    if (http_find_header(h, "via") && !proxied_allows(c->proxied, h, resp))
        return false;
    for (unsigned i = 0; c->disable && h->user_agent.p && i < c->disable->n; i++)
        if (regex_match(&c->disable->re[i], h->user_agent.p, h->user_agent.len, NULL, NULL,
                        0) != REGEX_NOMATCH)
            return false; /* a match, or a regex over its limits: not compressed, as nginx */
    return true;
}

/* --- file responses --------------------------------------------------------------------- */

/* What the filter learns about a file response, lazily. */
struct file_ctx {
    int fd; /* the identity file: the response's */
    struct stat st;
    const char *type;         /* its media type, when the response does not say (304, 206) */
    int name_state;           /* 0: not looked up, 1: name holds it, -1: unknown */
    char name[GZIP_NAME_CAP]; /* relative to the root, no leading '/' */
    /* Per coding: 0 not looked for, 1 side_fd is a fresh NAME.gz/.br/.zst, -1 none. */
    int side_state[CODING_COUNT];
    int side_fd[CODING_COUNT];
    struct stat side_st[CODING_COUNT];
};

#define SUFFIX_ROOM 5 /* ".zst" and its NUL: what served_name leaves free after the name */

/* The served file's path relative to the root: the request's, or for a directory the index
 * file that is this file (same dev and inode). */
static bool served_name(const struct request *req, struct file_ctx *f)
{
    if (f->name_state)
        return f->name_state > 0;
    f->name_state = -1;
    const char *rel = req->file + 1;
    size_t rl = req->file_len ? req->file_len - 1 : 0;
    if (rl == 0 || req->file[req->file_len - 1] != '/') {
        if (rl == 0 || rl + SUFFIX_ROOM >= sizeof(f->name))
            return false;
        memcpy(f->name, rel, rl + 1);
        f->name_state = 1;
        return true;
    }
    const char *index;
    for (unsigned i = 0; (index = module_index_name(req, i)); i++) {
        int n = snprintf(f->name, sizeof(f->name) - SUFFIX_ROOM, "%s%s", rel, index);
        struct stat st;
        if (n < 0 || (size_t)n >= sizeof(f->name) - SUFFIX_ROOM ||
            fstatat(req->root_fd, f->name, &st, 0) < 0)
            continue;
        if (st.st_dev == f->st.st_dev && st.st_ino == f->st.st_ino) {
            f->name_state = 1;
            return true;
        }
    }
    return false;
}

static bool not_older(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec > b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec >= b->tv_nsec);
}

/* Is there a NAME.gz (.br, .zst) beside the file, a regular file no older than it? Opened
 * beneath the root as mod_static opens files (open_beneath), kept open in side_fd[c]. */
static bool sidecar_fresh(const struct request *req, struct file_ctx *f, enum content_coding c)
{
    if (f->side_state[c])
        return f->side_state[c] > 0;
    f->side_state[c] = -1;
    if (!served_name(req, f))
        return false;
    char side[GZIP_NAME_CAP];
    size_t nl = strlen(f->name); /* < sizeof(name) - SUFFIX_ROOM: served_name keeps the room */
    memcpy(side, f->name, nl);
    memcpy(side + nl, coding_suffix(c), strlen(coding_suffix(c)) + 1);
    int fd = open_beneath(req->root_fd, side, O_RDONLY | O_NONBLOCK | O_NOCTTY, req->root_real);
    if (fd < 0)
        return false;
    struct stat *sst = &f->side_st[c];
    if (fstat(fd, sst) < 0 || !S_ISREG(sst->st_mode) || sst->st_size == 0 ||
        !not_older(&sst->st_mtim, &f->st.st_mtim)) {
        close(fd);
        return false;
    }
    f->side_fd[c] = fd;
    f->side_state[c] = 1;
    return true;
}

/* Is the body the whole file (what a 200 of mod_static's carries)? */
static bool whole_file(const struct response *r, const struct stat *st)
{
    unsigned n;
    const struct out_seg *s = resp_body_segs(r, &n);
    if (n == 0)
        return st->st_size == 0;
    /* The file, or (from an open-file cache) the whole file's bytes in memory. */
    return n == 1 && (s->mem || (s->fd == resp_file_fd(r) && s->off == 0)) &&
           s->len == (uint64_t)st->st_size;
}

/* The codings the file can be sent in (CODING_BIT()s; 0: it is not negotiable): every one
 * compressed on the fly (c->offered), up to gzip_max_length, and with gzip_static those
 * of a fresh sidecar (gzip's even with `gzip off`, as nginx's gzip_static). */
static unsigned file_offers(const struct gzip_state *g, const struct gzip_conf *c,
                            const struct request *req, const struct response *resp,
                            struct file_ctx *f)
{
    uint64_t size = (uint64_t)f->st.st_size;
    if (size < c->min_length)
        return 0;
    size_t len;
    int status = resp_status(resp);
    const char *ct = status == 200 || status == 403 || status == 404
                         ? resp_header_get(resp, "Content-Type", &len)
                         : NULL;
    if (!ct) { /* 304 and 206 say nothing or multipart/byteranges: ask who knows types */
        if (!served_name(req, f))
            return 0;
        f->type = module_content_type(req, f->name, f->fd, &f->st);
        ct = f->type;
        len = strlen(ct);
    }
    if (!type_compressible(c, ct, len))
        return 0;
    unsigned offers = size <= g->max_length ? c->offered : 0;
    unsigned side = c->static_mode != STATIC_OFF ? c->offered | CODING_BIT(CODING_GZIP) : 0;
    unsigned more = side & ~offers; /* usually none: a file within gzip_max_length */
    for (unsigned k = 0; more && k < CODING_COUNT; k++)
        if ((more & CODING_BIT(k)) && sidecar_fresh(req, f, k))
            offers |= CODING_BIT(k);
    return offers;
}

static int64_t mtime_ns(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

/* Take a place at the gate for a compression of req's body in coding c, noting in *cpu0
 * the thread's CPU clock; -EBUSY (logged) when the gate refuses. */
static int gate_take(const struct gzip_state *g, const struct request *req,
                     enum content_coding c, int64_t *cpu0)
{
    enum gzip_gate_result r = gzip_gate_enter(g->gate, clock_ns(CLOCK_MONOTONIC));
    if (r != GZIP_GATE_OPEN) {
        log_debug("%s: not compressing %s: %s", coding_name(c), req->path, gate_refusal(r));
        return -EBUSY;
    }
    *cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    return 0;
}

/* Give the place back, charging the CPU time the compression took to the budget. */
static void gate_give(const struct gzip_state *g, int64_t cpu0)
{
    int64_t spent = clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
    gzip_gate_leave(g->gate, spent > 0 ? (uint64_t)spent : 0);
}

/* Compress the file (or take it from the cache). -EBUSY: not now (another thread is making
 * this variant, or a bound on compression work is reached): the identity goes instead. */
static int compressed_variant(const struct gzip_state *g, const struct gzip_conf *conf,
                              const struct request *req, struct file_ctx *f,
                              enum content_coding c, int *fd, uint64_t *len)
{
    struct gzip_file_id id = {f->st.st_dev, f->st.st_ino, mtime_ns(&f->st),
                              (uint64_t)f->st.st_size, c};
    struct gzip_cache_entry *pending = NULL;
    enum gzip_cache_result cr = GZIP_CACHE_BYPASS;
    if (g->cache)
        cr = gzip_cache_get(g->cache, &id, fd, len, &pending);
    if (cr == GZIP_CACHE_HIT)
        return 0;
    if (cr == GZIP_CACHE_BUSY) {
        log_debug("%s: not compressing %s: another request is", coding_name(c), req->path);
        return -EBUSY;
    }
    int64_t cpu0;
    if (gate_take(g, req, c, &cpu0) < 0) {
        if (pending)
            gzip_cache_abandon(g->cache, pending);
        return -EBUSY;
    }
    log_debug("%s: compressing %s", coding_name(c), req->path);
    int rc = coding_compress_file(c, f->fd, id.size, conf->level[c], fd, len);
    gate_give(g, cpu0);
    struct stat after;
    if (rc == 0 && (fstat(f->fd, &after) < 0 || mtime_ns(&after) != id.mtime_ns ||
                    (uint64_t)after.st_size != id.size)) {
        close(*fd); /* changed while we read it: these bytes are no version of it */
        rc = -ESTALE;
    }
    if (pending && rc == 0)
        gzip_cache_fill(g->cache, pending, *fd, *len);
    else if (pending)
        gzip_cache_abandon(g->cache, pending);
    if (rc == 0)
        log_debug("%s: compressed %s: %llu -> %llu bytes", coding_name(c), req->path,
                  (unsigned long long)id.size, (unsigned long long)*len);
    else
        log_warn("%s: cannot compress %s: %s", coding_name(c), req->path, strerror(-rc));
    return rc;
}

/* The file's variant in coding c: a descriptor (the caller's) and its length. */
static int file_variant(const struct gzip_state *g, const struct gzip_conf *conf,
                        const struct request *req, struct file_ctx *f, enum content_coding c,
                        int *fd, uint64_t *len)
{
    if (conf->static_mode != STATIC_OFF && sidecar_fresh(req, f, c)) {
        *fd = f->side_fd[c];
        *len = (uint64_t)f->side_st[c].st_size;
        f->side_fd[c] = -1;
        return 0;
    }
    if ((uint64_t)f->st.st_size > g->max_length || !(conf->offered & CODING_BIT(c)))
        return -EFBIG;
    return compressed_variant(g, conf, req, f, c, fd, len);
}

/* Coding c was chosen for a file that mod_static answered 200 or 304 about, judging by the
 * identity ETag: judge again by the variant's, then send the variant. */
static void answer_coded(const struct gzip_state *g, const struct gzip_conf *conf,
                         const struct request *req, struct response *resp, struct file_ctx *f,
                         enum content_coding c)
{
    const struct http_request *h = req->http;
    char etag[160];
    bool has_etag = variant_etag(resp, c, etag, sizeof(etag));
    const char *tag = has_etag ? etag : "";
    int status = resp_status(resp);
    if (status == 403 || status == 404) /* an error page: no conditionals, its status kept */
        goto send;
    if (h->if_match.len && !http_etag_list_matches(h->if_match, tag, false)) {
        resp_error(resp, 412);
        if (conf->vary)
            vary_add(resp);
        return;
    }
    bool not_modified = resp_status(resp) == 304; /* If-Modified-Since: the same for all */
    if (h->if_none_match.len)
        not_modified = http_etag_list_matches(h->if_none_match, tag, true);
    if (not_modified) {
        if (resp_status(resp) != 304)
            resp_set_status(resp, 304);
        resp_header_remove(resp, "Content-Type");
        resp_header_remove(resp, "Accept-Ranges");
        if (has_etag)
            resp_header_set(resp, "ETag", etag);
        resp_body_clear(resp);
        return;
    }
    if (status != 200 && !f->type && served_name(req, f)) /* a sidecar's 304 */
        f->type = module_content_type(req, f->name, f->fd, &f->st);
    if (status != 200 && !f->type)
        return; /* no type to send the variant with: mod_static's answer stands */
send:;
    int vfd;
    uint64_t vlen;
    if (file_variant(g, conf, req, f, c, &vfd, &vlen) < 0)
        return; /* mod_static's answer stands: identity (a 304 of it stays a 304) */
    if (status == 304 || status == 206) {
        resp_set_status(resp, 200);
        resp_header_set(resp, "Content-Type", f->type);
    }
    mark_coded(resp, c, has_etag ? etag : NULL);
    resp_file_close(resp); /* the identity file: closed, or given back to its cache */
    resp_body_clear(resp);
    resp_file_own(resp, vfd); /* the core closes it once sent */
    resp_body_file(resp, vfd, 0, vlen);
}

static void filter_file(const struct gzip_state *g, const struct gzip_conf *c,
                        const struct request *req, struct response *resp)
{
    /* Not zeroed as a whole: name is kilobytes, written only when looked up. */
    struct file_ctx f;
    f.fd = resp_file_fd(resp);
    f.type = NULL;
    f.name_state = 0;
    for (unsigned k = 0; k < CODING_COUNT; k++) {
        f.side_state[k] = 0;
        f.side_fd[k] = -1;
    }
    const struct stat *st = resp_file_stat(resp);
    if (st) /* what mod_static's ETag was made from (its open-file cache's) */
        f.st = *st;
    else if (fstat(f.fd, &f.st) < 0)
        return;
    if (!S_ISREG(f.st.st_mode))
        return;
    int status = resp_status(resp);
    if ((status == 200 || status == 403 || status == 404) && !whole_file(resp, &f.st))
        return;
    /* Range requests get the identity: mod_static's 206 (or its 200 if it ignored them). */
    bool ranged = resp_status(resp) == 206 || req->http->range.len;
    /* gzip_static always: NAME.gz to every client, whatever it accepts (no Vary, as nginx) */
    if (c->static_mode == STATIC_ALWAYS && !ranged && sidecar_fresh(req, &f, CODING_GZIP)) {
        answer_coded(g, c, req, resp, &f, CODING_GZIP);
        goto out;
    }
    unsigned offered = file_offers(g, c, req, resp, &f);
    /* nginx's gzip_static (a file with http { }): NAME.gz whatever the type and size */
    if (!offered && c->static_mode == STATIC_ON && c->html_only &&
        sidecar_fresh(req, &f, CODING_GZIP))
        offered = CODING_BIT(CODING_GZIP);
    if (!offered)
        goto out;
    if (c->vary)
        vary_add(resp);
    if (ranged)
        goto out;
    enum gzip_choice ch = request_choice(req->http, offered);
    if (choice_is_coded(ch) && request_allows(c, req, resp))
        answer_coded(g, c, req, resp, &f, gzip_choice_coding(ch));
out:
    for (unsigned k = 0; k < CODING_COUNT; k++)
        if (f.side_fd[k] >= 0)
            close(f.side_fd[k]);
}

/* --- memory responses ------------------------------------------------------------------- */

static void filter_memory(const struct gzip_state *g, const struct gzip_conf *c,
                          const struct request *req, struct response *resp)
{
    struct iovec iov[RESP_MAX_SEGS];
    unsigned n;
    const struct out_seg *segs = resp_body_segs(resp, &n);
    for (unsigned i = 0; i < n; i++) {
        if (!segs[i].mem)
            return;
        iov[i] = (struct iovec){(void *)segs[i].mem, (size_t)segs[i].len};
    }
    size_t len;
    uint64_t length = resp_content_length(resp);
    const char *ct = resp_header_get(resp, "Content-Type", &len);
    if (!c->offered || !ct || !type_compressible(c, ct, len) || length < c->min_length ||
        length > g->max_length)
        return;
    if (c->vary)
        vary_add(resp);
    enum gzip_choice ch = request_choice(req->http, c->offered);
    if (!choice_is_coded(ch) || !request_allows(c, req, resp))
        return;
    enum content_coding coding = gzip_choice_coding(ch);
    char *out;
    size_t out_len;
    int64_t cpu0;
    if (gate_take(g, req, coding, &cpu0) < 0)
        return; /* the body goes as it is */
    int rc = coding_compress_iov(coding, iov, n, c->level[coding], &out, &out_len);
    gate_give(g, cpu0);
    if (rc < 0)
        return;
    resp_body_clear(resp); /* the handler's memory, if it lent some, is released */
    resp_body_owned(resp, out, out_len, free, out);
    char etag[160];
    mark_coded(resp, coding, variant_etag(resp, coding, etag, sizeof(etag)) ? etag : NULL);
}

/* --- streamed responses ---------------------------------------------------------------- */

/* A streamed body's coding (resp_stream_filter): arg is the coding and its level. */
static void *stream_start(const void *conf, unsigned arg)
{
    (void)conf;
    struct coding_stream *s;
    if (coding_stream_start((enum content_coding)(arg & 0xff), (int)(arg >> 8), &s) < 0)
        return NULL;
    return s;
}

/* The core's emit, for the encoder's bytes. */
struct stream_emit {
    resp_emit_fn emit;
    void *arg;
};

static int stream_emit(void *arg, const unsigned char *p, size_t n)
{
    struct stream_emit *to = arg;
    return n ? to->emit(to->arg, (const char *)p, n) : 0;
}

static int stream_feed(void *state, const char *in, size_t n, bool end, resp_emit_fn emit,
                       void *arg)
{
    struct stream_emit to = {emit, arg};
    return coding_stream_feed(state, in, n, end, stream_emit, &to);
}

static void stream_free(void *state)
{
    coding_stream_free(state);
}

static const struct resp_body_filter_ops stream_coding = {
    .start = stream_start,
    .feed = stream_feed,
    .free = stream_free,
};

/* The head of a streamed answer of any source (resp_is_stream_head: a proxied answer, a
 * CGI script's): its body is compressed as it streams, in the coding the client prefers
 * among those switched on, when the type is compressible, the source did not encode it
 * and allows transforms (Cache-Control: no-transform), and its length, if known, is in
 * bounds, when gzip is on. The statuses nginx compresses: 200, 403, 404. The ETag becomes weak: the bytes
 * differ. */
static void filter_stream(const struct gzip_state *g, const struct gzip_conf *c,
                          const struct request *req, struct response *resp)
{
    size_t len;
    int status = resp_status(resp);
    unsigned offered = c->offered;
    if (!offered || (status != 200 && status != 403 && status != 404))
        return;
    const char *cc = resp_header_get(resp, "Cache-Control", &len);
    if (cc && list_has(cc, len, "no-transform"))
        return;
    size_t ct_len;
    const char *ct = resp_header_get(resp, "Content-Type", &ct_len);
    uint64_t length = resp_length_is_known(resp) ? resp_content_length(resp) : UINT64_MAX;
    if (!ct || !type_compressible(c, ct, ct_len) ||
        (length != UINT64_MAX && (length < c->min_length || length > g->max_length)))
        return;
    if (c->vary)
        vary_add(resp);
    enum gzip_choice ch = request_choice(req->http, offered);
    if (!choice_is_coded(ch) || !request_allows(c, req, resp))
        return;
    enum content_coding coding = gzip_choice_coding(ch);
    const char *etag = resp_header_get(resp, "ETag", &len);
    if (etag && len >= 2 && etag[0] == '"' && len < 250) {
        char weak[256];
        snprintf(weak, sizeof(weak), "W/%.*s", (int)len, etag);
        resp_header_set(resp, "ETag", weak);
    }
    mark_coded(resp, coding, NULL);
    resp_stream_filter(resp, &stream_coding, NULL,
                       (unsigned)coding | (unsigned)c->level[coding] << 8);
}

/* --- the module ------------------------------------------------------------------------- */

static void gzip_filter(void *state, const struct request *req, struct response *resp)
{
    const struct gzip_state *g = state;
    const struct gzip_conf *c = module_settings(req, g->index);
    if (!c) /* a request placed in no block */
        c = &g->top;
    const struct http_request *h = req->http;
    size_t len;
    if (resp_is_stream_head(resp)) {
        if (!resp_failed(resp) &&
            (h->method == HTTP_METHOD_GET || h->method == HTTP_METHOD_HEAD) &&
            !resp_header_get(resp, "Content-Encoding", &len))
            filter_stream(g, c, req, resp);
        return;
    }
    if ((!c->offered && c->static_mode == STATIC_OFF) || resp_is_stream(resp) ||
        resp_failed(resp) ||
        (h->method != HTTP_METHOD_GET && h->method != HTTP_METHOD_HEAD) ||
        resp_header_get(resp, "Content-Encoding", &len))
        return;
    int status = resp_status(resp);
    if (resp_file_fd(resp) >= 0 && (status == 200 || status == 304 || status == 206 ||
                                     status == 403 || status == 404))
        filter_file(g, c, req, resp);
    else if (resp_file_fd(resp) < 0 && (status == 200 || status == 403 || status == 404))
        filter_memory(g, c, req, resp);
}

/* --- the directives ---------------------------------------------------------------------- */

/* `gzip_types TYPE...;`: type/subtype, type/ followed by a star, or a star (any type). A
 * block's list replaces the outer block's, as nginx merges it. */
static int set_types(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    struct gzip_conf *g = base;
    (void)ctx;
    if (!g->types_own) {
        g->types = calloc(1, sizeof(*g->types));
        if (!g->types)
            return snprintf(msg, len, "out of memory"), -1;
        g->types_own = true;
    }
    struct gzip_types *ty = g->types;
    for (unsigned i = 0; i < n->n_args; i++) {
        const char *a = n->args[i];
        if (strcmp(a, "*") == 0) {
            ty->any = true;
            continue;
        }
        const char *slash = strchr(a, '/');
        size_t alen = strlen(a);
        if (!slash || slash == a || !slash[1] || strchr(slash + 1, '/') ||
            alen >= GZIP_TYPE_LEN || strpbrk(a, " \t;,"))
            return snprintf(msg, len, "invalid media type \"%s\" (type/subtype, type/* or *)",
                            a), -1;
        if (ty->n == GZIP_TYPES_MAX)
            return snprintf(msg, len, "more than %d types", GZIP_TYPES_MAX), -1;
        for (size_t k = 0; k <= alen; k++)
            ty->t[ty->n][k] = (char)tolower((unsigned char)a[k]);
        ty->n++;
    }
    return 0;
}

/* `gzip_disable REGEX|msie6...;`: regexes compiled without case, as nginx's. */
static int set_disable(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    struct gzip_conf *g = base;
    (void)ctx;
    if (!g->disable_own) {
        g->disable = calloc(1, sizeof(*g->disable));
        if (!g->disable)
            return snprintf(msg, len, "out of memory"), -1;
        g->disable_own = true;
    }
    struct gzip_disable *d = g->disable;
    for (unsigned i = 0; i < n->n_args; i++) {
        if (strcmp(n->args[i], "msie6") == 0) {
            g->msie6 = 1;
            continue;
        }
        if (d->n == GZIP_DISABLE_MAX)
            return snprintf(msg, len, "more than %d regexes", GZIP_DISABLE_MAX), -1;
        char why[160];
        if (regex_compile(&d->re[d->n], n->args[i], REGEX_CASELESS, why, sizeof(why)) < 0)
            return snprintf(msg, len, "\"%s\": %s", n->args[i], why), -1;
        d->n++;
    }
    return 0;
}

/* `gzip_proxied off|expired|no-cache|no-store|private|no_last_modified|no_etag|auth|any...` */
static int set_proxied(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    static const struct conf_name names[] = {
        {"off", PROXIED_OFF},           {"expired", PROXIED_EXPIRED},
        {"no-cache", PROXIED_NO_CACHE}, {"no-store", PROXIED_NO_STORE},
        {"private", PROXIED_PRIVATE},   {"no_last_modified", PROXIED_NO_LM},
        {"no_etag", PROXIED_NO_ETAG},   {"auth", PROXIED_AUTH},
        {"any", PROXIED_ANY},           {NULL, 0}};
    struct gzip_conf *g = base;
    (void)ctx;
    for (unsigned i = 0; i < n->n_args; i++) {
        int v;
        if (conf_name_value(names, n->args[i], &v) < 0)
            return snprintf(msg, len, "invalid value \"%s\" (off, expired, no-cache, no-store, "
                            "private, no_last_modified, no_etag, auth, any)", n->args[i]), -1;
        g->proxied |= (unsigned)v;
    }
    return 0;
}

static const struct conf_name static_names[] = {
    {"off", STATIC_OFF}, {"on", STATIC_ON}, {"always", STATIC_ALWAYS}, {NULL, 0}};
static const struct conf_name http_version_names[] = {{"1.0", 10}, {"1.1", 11}, {NULL, 0}};

#define SETTING(field) CONF_AT(struct gzip_state, field)
#define BLOCK_SETTING(field) CONF_AT(struct gzip_conf, field)
#define EVERY_BLOCK (CONF_TOP | CONF_SERVER | CONF_LOCATION)
/* The default of a file with nginx's http { } block (nginx's), and of one without. */
#define NGINX_LFHTTPD(n, l) "(" n " in a file with http { }, else " l ")"

static const struct conf_directive gzip_directives[] = {
    {"gzip", CONF_FLAG, EVERY_BLOCK, BLOCK_SETTING(on[CODING_GZIP]),
     .dflt = NGINX_LFHTTPD("off", "on"),
     .doc = "Compression, in every coding the block does not switch off (`brotli`, `zstd`), "
        "negotiated with `Accept-Encoding` q-values (on a tie the server prefers br, then "
        "zstd, then gzip). `gzip off` turns off br and zstd too, unless the block (or one "
        "around it) says `brotli on` or `zstd on`. In a file with nginx's `http { }` the "
        "gzip family has nginx's defaults (compression off); without, lfhttpd's."},
    {"gzip_types", CONF_LIST, EVERY_BLOCK, .min_args = 1, .max_args = CONFIG_MAX_ARGS,
     .set = set_types, .usage = "TYPE...",
     .dflt = NGINX_LFHTTPD("text/html", "text/* and the common text types"),
     .doc = "Types compressed besides text/html (nginx's, in a file with `http { }`) or "
        "else besides text/*, application/javascript, application/json, application/xml and "
        "image/svg+xml (`type/subtype`, `type/*`, or `*` for all); for all three codings. A "
        "block's list replaces the outer block's."},
    {"gzip_min_length", CONF_SIZE, EVERY_BLOCK, BLOCK_SETTING(min_length),
     .dflt = NGINX_LFHTTPD("20", "256"),
     .doc = "Responses shorter than this are sent as they are (by their Content-Length; a "
        "stream of unknown length is compressed)."},
    {"gzip_max_length", CONF_SIZE, CONF_TOP, .max = 1ull << 30, SETTING(max_length),
     .dflt = "16m",
     .doc = "Files and handler bodies up to this are compressed (files once per version and "
        "coding, kept in the cache); larger ones are sent as they are."},
    {"gzip_static", CONF_ENUM, EVERY_BLOCK, .names = static_names,
     BLOCK_SETTING(static_mode), .usage = "on|off|always",
     .dflt = NGINX_LFHTTPD("off", "on"),
     .doc = "A sidecar `NAME.gz` (and `NAME.br`, `NAME.zst` for the codings on) beside NAME, "
        "not older than it, is sent as it is for its coding (at any size), to clients that "
        "accept it; `NAME.gz` also with `gzip off`. `always`: `NAME.gz` to every client, "
        "whatever it accepts. In a file with `http { }` looked for beside any file, as nginx's; "
        "else only where the file would be compressed (its type in `gzip_types`, its size "
        "from `gzip_min_length`)."},
    {"gzip_comp_level", CONF_COUNT, EVERY_BLOCK, .min = 1, .max = 9,
     BLOCK_SETTING(level[CODING_GZIP]), .dflt = NGINX_LFHTTPD("1", "6"),
     .doc = "gzip's level, 1 to 9."},
    {"gzip_vary", CONF_FLAG, EVERY_BLOCK, BLOCK_SETTING(vary),
     .dflt = NGINX_LFHTTPD("off", "on"),
     .doc = "`Vary: Accept-Encoding` on every response that could be compressed (its type and "
        "size are), compressed or not (304 and 206 of files too)."},
    {"gzip_proxied", CONF_LIST, EVERY_BLOCK, .min_args = 1, .max_args = 9, .set = set_proxied,
     .usage = "off|expired|no-cache|no-store|private|no_last_modified|no_etag|auth|any...",
     .dflt = NGINX_LFHTTPD("off", "any"),
     .doc = "For a request with `Via` (one a proxy passed on), as nginx: `off` none, `any` "
        "all; else an answer with `Expires` is compressed when `expired` and that date is "
        "past, one with `Cache-Control` when it says `no-cache`, `no-store` or `private` and "
        "that word is listed, a request with `Authorization` when `auth`; and an answer "
        "with neither Expires nor Cache-Control unless `no_last_modified` and it has "
        "`Last-Modified`, or `no_etag` and it has `ETag`."},
    {"gzip_disable", CONF_LIST, EVERY_BLOCK, .min_args = 1, .max_args = CONFIG_MAX_ARGS,
     .set = set_disable, .usage = "REGEX|msie6...",
     .dflt = "(none)",
     .doc = "No compression for a User-Agent that a REGEX matches (without case); `msie6`: "
        "MSIE 4 to 6 (6 without SV1), as nginx's. A block's regexes replace the outer "
        "block's; `msie6` is inherited apart, as in nginx."},
    {"gzip_http_version", CONF_ENUM, EVERY_BLOCK, .names = http_version_names,
     BLOCK_SETTING(http_version), .usage = "1.0|1.1",
     .dflt = NGINX_LFHTTPD("1.1", "1.0"),
     .doc = "The lowest HTTP version whose requests get compressed answers."},
    {"brotli", CONF_FLAG, EVERY_BLOCK, BLOCK_SETTING(on[CODING_BR]),
     .dflt = "(as gzip)",
     .doc = "Compression with Brotli (`br`), besides gzip; unsaid, it follows `gzip`."},
    {"brotli_comp_level", CONF_COUNT, EVERY_BLOCK, .min = 0, .max = 11,
     BLOCK_SETTING(level[CODING_BR]), .dflt = "6",
     .doc = "Brotli's level, 0 to 11, for files and for handler bodies (compressed on every "
        "response). Level 11 saves another 7-16% for 22-44 times gzip 6's CPU: make `.br` "
        "sidecars ahead (`brotli -q 11`) instead."},
    {"zstd", CONF_FLAG, EVERY_BLOCK, BLOCK_SETTING(on[CODING_ZSTD]),
     .dflt = "(as gzip)",
     .doc = "Compression with Zstandard (`zstd`), besides gzip, its window kept within 8 MiB "
        "(RFC 9659), which browsers require; unsaid, it follows `gzip`."},
    {"zstd_comp_level", CONF_COUNT, EVERY_BLOCK, .min = 1, .max = 19,
     BLOCK_SETTING(level[CODING_ZSTD]), .dflt = "6",
     .doc = "Zstandard's level, 1 to 19."},
    {"gzip_cache_size", CONF_SIZE, CONF_TOP, SETTING(cache_bytes),
     .dflt = "64m",
     .doc = "Bounds the compressed variants kept in memory (memfds, sent with `sendfile`), all "
        "codings together, least recently used first out; 0 turns the cache off."},
    {"gzip_max_compressions", CONF_COUNT, CONF_TOP, .min = 1, .max = 4096,
     SETTING(max_compressions),
     .dflt = "(half the threads, at least 1)",
     .doc = "Compressions at once, server-wide, files and handler bodies alike (default: half "
        "the threads of all classes together, at least 1), so that the other threads keep "
        "serving; a request past it gets the identity at once (with `Vary`), never a wait."},
    {"gzip_cpu_per_second", CONF_DURATION, CONF_TOP, SETTING(cpu_per_s_ms),
     .dflt = "500ms",
     .doc = "The CPU time compressions may take each second, averaged (a token bucket of CPU "
        "time holding at most one second's worth, charged with each compression's measured "
        "thread CPU time); past it files go as they are until the budget refills. 0: no "
        "budget."},
    {.name = NULL},
};

/* --- the settings of each block ---------------------------------------------------------- */

static atomic_ulong conf_ids; /* 0 is no block's */

/* Every setting not said (what a block's statements are read over). */
static void conf_unset(struct gzip_conf *c)
{
    *c = (struct gzip_conf){.static_mode = -1, .vary = -1, .msie6 = -1,
                            .min_length = UINT64_MAX};
    for (unsigned k = 0; k < CODING_COUNT; k++)
        c->on[k] = -1, c->level[k] = -1;
}

/* What a block leaves unsaid, from the block around it (as nginx's merge). */
static void conf_merge(struct gzip_conf *c, const struct gzip_conf *o)
{
    for (unsigned k = 0; k < CODING_COUNT; k++) {
        if (c->on[k] < 0)
            c->on[k] = o->on[k];
        if (c->level[k] < 0)
            c->level[k] = o->level[k];
    }
    if (c->static_mode < 0)
        c->static_mode = o->static_mode;
    if (c->vary < 0)
        c->vary = o->vary;
    if (c->msie6 < 0)
        c->msie6 = o->msie6;
    if (!c->http_version)
        c->http_version = o->http_version;
    if (!c->proxied)
        c->proxied = o->proxied;
    if (c->min_length == UINT64_MAX)
        c->min_length = o->min_length;
    if (!c->types_own)
        c->types = o->types;
    if (!c->disable_own)
        c->disable = o->disable;
    c->html_only = o->html_only;
}

/* The codings compressed on the fly: gzip's switch, and brotli's and zstd's where said. */
static void conf_resolve(struct gzip_conf *c)
{
    c->offered = 0;
    for (unsigned k = 0; k < CODING_COUNT; k++) {
        int on = c->on[k] >= 0 ? c->on[k] : c->on[CODING_GZIP];
        if (on > 0)
            c->offered |= CODING_BIT(k);
    }
    c->asks = c->http_version > 10 || c->msie6 > 0 || (c->disable && c->disable->n) ||
              (c->proxied & (PROXIED_ANY | PROXIED_OFF)) != PROXIED_ANY;
    c->id = atomic_fetch_add(&conf_ids, 1) + 1;
}

/* The top level's defaults: nginx's in a file with `http { }` (ngx_http_gzip_filter_module
 * and the core module's gzip_* directives), else lfhttpd's, which compress. */
static void conf_defaults(struct gzip_conf *c, bool nginx)
{
    /* Levels at about gzip 6's speed (see conf/lfhttpd.conf): br 6 is also nginx's brotli
     * module's default; zstd 6 gives about gzip 6's bytes, where zstd's own default, 3,
     * gives some 5% more. nginx's gzip level is 1. */
    const struct gzip_conf d = {
        .on = {[CODING_GZIP] = !nginx, [CODING_BR] = -1, [CODING_ZSTD] = -1},
        .level = {[CODING_GZIP] = nginx ? 1 : 6, [CODING_BR] = 6, [CODING_ZSTD] = 6},
        .static_mode = nginx ? STATIC_OFF : STATIC_ON,
        .vary = !nginx,
        .msie6 = 0,
        .http_version = nginx ? 11 : 10,
        .proxied = nginx ? PROXIED_OFF : PROXIED_ANY,
        .min_length = nginx ? 20 : 256,
        .html_only = nginx,
    };
    conf_merge(c, &d);
}

static void conf_free(struct gzip_conf *c)
{
    if (c->types_own)
        free(c->types);
    if (c->disable_own) {
        for (unsigned i = 0; i < c->disable->n; i++)
            regex_free(&c->disable->re[i]);
        free(c->disable);
    }
    c->types_own = c->disable_own = false;
}

/* A server's or location's settings: its own over the outer block's. A block without any of
 * the module's directives shares the outer block's. The top level's are init's. */
static void *gzip_block(void *state, const struct module_block *b)
{
    struct gzip_state *g = state;
    if (b->context == CONF_TOP)
        return &g->top;
    if (b->outer && !module_block_has(b))
        return (void *)b->outer;
    struct gzip_conf *c = malloc(sizeof(*c));
    if (!c) {
        module_error(b->mi, b->node, "out of memory");
        return NULL;
    }
    conf_unset(c);
    if (module_block_read(b, c) < 0) {
        conf_free(c);
        free(c);
        return NULL;
    }
    conf_merge(c, b->outer ? b->outer : &g->top);
    conf_resolve(c);
    return c;
}

static void gzip_block_free(void *state, void *settings)
{
    struct gzip_state *g = state;
    if (settings == &g->top)
        return;
    conf_free(settings);
    free(settings);
}

/* --- the module -------------------------------------------------------------------------- */

/* The cache holds one descriptor per variant: keep it to a fraction of the limit. */
static unsigned cache_max_entries(void)
{
    struct rlimit rl;
    uint64_t n = GZIP_CACHE_ENTRIES_MAX;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur / 8 < n)
        n = rl.rlim_cur / 8;
    return n < 16 ? 16 : (unsigned)n;
}

/* Every class's threads together, 0 counting as one per CPU (as the server reads it). */
static unsigned total_threads(const struct config *cfg)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned per_cpu = cpus > 0 ? (unsigned)cpus : 1;
    unsigned n = cfg->threads ? cfg->threads : per_cpu;
    for (unsigned i = 0; i < cfg->n_classes; i++)
        n += cfg->classes[i].threads ? cfg->classes[i].threads : per_cpu;
    return n;
}

/* The cache and the gate, for a configuration that compresses. */
static int make_bounds(struct module_init *mi, struct gzip_state *g)
{
    if (g->cache_bytes > 0) {
        g->cache = gzip_cache_create(g->cache_bytes, cache_max_entries());
        if (!g->cache)
            return module_error(mi, NULL, "out of memory");
    }
    unsigned max = g->max_compressions;
    if (max == 0) /* half the threads: the other half keep serving whatever happens */
        max = total_threads(mi->cfg) / 2 ? total_threads(mi->cfg) / 2 : 1;
    g->gate = gzip_gate_create(max, (uint64_t)g->cpu_per_s_ms * 1000000,
                               clock_ns(CLOCK_MONOTONIC));
    if (!g->gate) {
        gzip_cache_destroy(g->cache);
        return module_error(mi, NULL, "out of memory");
    }
    return 0;
}

static int gzip_init(struct module_init *mi, void **state)
{
    struct gzip_state *g = calloc(1, sizeof(*g));
    if (!g)
        return module_error(mi, NULL, "out of memory");
    g->index = mi->index;
    conf_unset(&g->top);
    g->max_length = 16 << 20;
    g->cache_bytes = 64 << 20;
    g->cpu_per_s_ms = 500; /* half a CPU, averaged, for compressions */
    if (module_read_directives(mi, g) < 0) /* the top level's, into g->top and the rest */
        goto fail;
    conf_defaults(&g->top, mi->cfg->http_block);
    conf_resolve(&g->top);
    if (g->top.min_length > g->max_length) {
        const struct conf_node *where = module_directive(mi, "gzip_min_length");
        module_error(mi, where ? where : module_directive(mi, "gzip_max_length"),
                     "gzip_min_length is larger than gzip_max_length");
        goto fail;
    }
    /* Made whether the top level compresses or not: a server or location may. */
    if (make_bounds(mi, g) < 0)
        goto fail;
    *state = g;
    return 0;
fail:
    conf_free(&g->top);
    free(g);
    return -1;
}

static void gzip_fini(void *state)
{
    struct gzip_state *g = state;
    if (!g)
        return;
    gzip_cache_destroy(g->cache);
    gzip_gate_destroy(g->gate);
    conf_free(&g->top);
    free(g);
}

/* The compressed variants' cache and the gate, for a metrics scrape. */
static void gzip_metrics(void *state, struct strbuf *b)
{
    struct gzip_state *st = state;
    if (st->cache) {
        struct gzip_cache_stats cs;
        gzip_cache_get_stats(st->cache, &cs);
        strbuf_prom_family(b, "lfhttpd_gzip_cache_lookups_total", "counter",
                           "Look-ups of compressed variants, by result, since the "
                           "configuration was loaded (busy: another thread compresses it).");
        strbuf_printf(b, "lfhttpd_gzip_cache_lookups_total{result=\"hit\"} %llu\n"
                      "lfhttpd_gzip_cache_lookups_total{result=\"miss\"} %llu\n"
                      "lfhttpd_gzip_cache_lookups_total{result=\"busy\"} %llu\n",
                      (unsigned long long)cs.hits, (unsigned long long)cs.misses,
                      (unsigned long long)cs.busy);
        strbuf_prom_family(b, "lfhttpd_gzip_cache_evictions_total", "counter",
                           "Variants evicted to stay within gzip_cache_size.");
        strbuf_printf(b, "lfhttpd_gzip_cache_evictions_total %llu\n",
                      (unsigned long long)cs.evictions);
        strbuf_prom_family(b, "lfhttpd_gzip_cache_entries", "gauge", "Variants kept.");
        strbuf_printf(b, "lfhttpd_gzip_cache_entries %u\n", cs.entries);
        strbuf_prom_family(b, "lfhttpd_gzip_cache_bytes", "gauge",
                           "Bytes of the variants kept (whole pages).");
        strbuf_printf(b, "lfhttpd_gzip_cache_bytes %llu\n", (unsigned long long)cs.bytes);
    }
    struct gzip_gate_stats gs;
    gzip_gate_get_stats(st->gate, &gs);
    strbuf_prom_family(b, "lfhttpd_compressions_running", "gauge",
                       "Compressions running now.");
    strbuf_printf(b, "lfhttpd_compressions_running %u\n", gs.running);
}

const struct module mod_gzip = {
    .name = "gzip",
    .directives = gzip_directives,
    .init = gzip_init,
    .fini = gzip_fini,
    .filter = gzip_filter,
    .block = gzip_block,
    .block_free = gzip_block_free,
    .metrics = gzip_metrics,
};
