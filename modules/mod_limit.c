/* mod_limit.c — nginx's limit_req and limit_conn: requests per key and time, and requests
 * in progress per key, checked where nginx's preaccess phase stands (after the rewrites
 * placed the request, before allow/deny and authentication).
 *
 *   limit_req_zone KEY zone=NAME:SIZE rate=Nr/s|Nr/m;      limit_conn_zone KEY zone=NAME:SIZE;
 *   limit_req zone=NAME [burst=N] [nodelay | delay=N];     limit_conn NAME N;
 *   limit_req_status, limit_req_log_level, limit_req_dry_run, and the same for limit_conn.
 *
 * limit_req is nginx's leaky bucket, counted in thousandths of a request: each key keeps
 * its "excess" and when it was last reckoned; a request drains rate * elapsed from it and
 * adds 1000. Over burst * 1000, the request is rejected (and not counted); otherwise it is
 * counted, and nginx delays it by (excess - delay * 1000) / rate when the excess is over
 * `delay=` (0 without it; never with `nodelay`). Such a request is marked DELAYED and put
 * aside (MOD_DELAY): no thread sleeps on it; the core parks its connection until then and
 * runs the request again (req->marks.resumed), when it is not counted again. A request
 * with a body, or one the core cannot put aside, is answered at once, as with nodelay.
 * Several limit_req of one block must all
 * let a request through; a block with any limit_req has only its own (the outer ones are
 * not added), as in nginx. An empty key is not limited.
 *
 * limit_conn counts the requests of a key being answered; the count is taken here and let
 * go by the log hook, which the core runs once the answer is handed to the connection (a
 * stream's, a proxied one's, at its end; a file's when its sending starts, where nginx
 * counts it until the last byte). A request over N is refused.
 *
 * The state: a zone is a table split into stripes, each with its own lock, LRU list and
 * bucket array, the stripe chosen by the key's hash (seeded at random per zone). Requests
 * for different keys seldom meet on a lock, and nothing is taken by every request. SIZE
 * bounds the keys a zone holds as nginx's documentation counts them (64 bytes a key: 1m is
 * 16384 keys), split evenly between the stripes; when a stripe is full, limit_req forgets
 * its least recently used key, while a limit_conn key is kept as long as a request holds
 * it, so a full limit_conn zone refuses (its status, "could not allocate node" logged).
 * Zones are the generation's: a reload starts them afresh.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "module.h"
#include "vars.h"

#define LIMIT_NAME_MAX 64     /* a zone's name */
#define LIMIT_KEY_MAX 1024    /* a key's bytes: a longer one is an error (500) */
#define LIMIT_STRIPES_MAX 64  /* stripes of a zone: fewer for small zones */
#define LIMIT_NODE_BYTES 64   /* what nginx's documentation counts a key: SIZE / this */
#define LIMIT_IDLE_MS 60000   /* a drained limit_req key idle this long may be dropped */
#define LIMIT_RULES_MAX 8     /* limit_req statements of one block */

/* One key's state. */
struct limit_node {
    struct limit_node *hnext;       /* the bucket's chain */
    struct limit_node *prev, *next; /* the stripe's LRU list, most recent first */
    struct limit_stripe *stripe;    /* its stripe: limit_conn lets go through it */
    uint64_t hash;
    int64_t last_ms; /* limit_req: when excess was last reckoned (monotonic) */
    int64_t excess;  /* limit_req: thousandths of a request over the rate */
    uint32_t count;  /* limit_conn: requests holding it */
    uint16_t key_len;
    char key[];
};

struct limit_stripe {
    pthread_mutex_t lock;
    struct limit_node **buckets; /* n_buckets, a power of two */
    unsigned n_buckets;
    unsigned n, max;             /* keys held, and the most it may hold */
    struct limit_node lru;       /* the list's head: lru.next the newest, lru.prev oldest */
} __attribute__((aligned(64)));

struct limit_zone {
    char name[LIMIT_NAME_MAX];
    bool conn;              /* limit_conn_zone; else limit_req_zone */
    uint64_t rate;          /* limit_req: thousandths of a request per second */
    struct vars_value *key;
    uint64_t seed;          /* the hash's */
    unsigned n_stripes;     /* a power of two */
    unsigned line;          /* its statement's */
    struct limit_stripe *stripes;
};

/* One `limit_req` or `limit_conn` of a block. */
struct limit_rule {
    struct limit_zone *zone;
    char zone_name[LIMIT_NAME_MAX];
    uint64_t burst;  /* limit_req: thousandths */
    uint64_t delay;  /* limit_req: thousandths of excess answered without delay */
    unsigned conn;   /* limit_conn: requests at once */
    const struct conf_node *where; /* its statement, while the configuration loads */
};

/* nginx's log levels for these directives, 0 unset. */
enum { LIMIT_LOG_INFO = 1, LIMIT_LOG_NOTICE, LIMIT_LOG_WARN, LIMIT_LOG_ERROR };
enum { LIMIT_DRY_OFF = 1, LIMIT_DRY_ON };

/* A block's settings; 0 (or no rules) is "the outer block's". */
struct limit_conf {
    struct limit_rule reqs[LIMIT_RULES_MAX], conns[REQUEST_HELD_MAX];
    unsigned n_reqs, n_conns;
    unsigned req_status, conn_status;   /* 400..599 */
    int req_log, conn_log;              /* LIMIT_LOG_* */
    int req_dry, conn_dry;              /* LIMIT_DRY_* */
};

struct limit_module {
    unsigned index; /* in the chain: module_settings() */
    struct limit_zone *zones;
    unsigned n_zones;
};

/* --- zones --------------------------------------------------------------------------------- */

static uint64_t key_hash(uint64_t seed, const char *p, size_t n)
{
    uint64_t h = seed ^ (n * 0x9e3779b97f4a7c15ull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0x94d049bb133111ebull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 32);
}

static int zone_setup(struct limit_zone *z, uint64_t size)
{
    uint64_t keys = size / LIMIT_NODE_BYTES;
    unsigned stripes = LIMIT_STRIPES_MAX;
    while (stripes > 1 && keys / stripes < 64)
        stripes /= 2;
    z->n_stripes = stripes;
    if (getrandom(&z->seed, sizeof(z->seed), 0) != sizeof(z->seed))
        z->seed = (uint64_t)(uintptr_t)z * 0x9e3779b97f4a7c15ull;
    z->stripes = aligned_alloc(64, sizeof(*z->stripes) * stripes);
    if (!z->stripes)
        return -1;
    for (unsigned i = 0; i < stripes; i++) {
        struct limit_stripe *s = &z->stripes[i];
        memset(s, 0, sizeof(*s));
        s->max = (unsigned)(keys / stripes);
        if (s->max == 0)
            s->max = 1;
        s->n_buckets = 4;
        while (s->n_buckets < s->max && s->n_buckets < (1u << 20))
            s->n_buckets *= 2;
        s->buckets = calloc(s->n_buckets, sizeof(*s->buckets));
        pthread_mutex_init(&s->lock, NULL);
        s->lru.next = s->lru.prev = &s->lru;
        if (!s->buckets) {
            z->n_stripes = i + 1;
            return -1;
        }
    }
    return 0;
}

static void zone_free(struct limit_zone *z)
{
    for (unsigned i = 0; z->stripes && i < z->n_stripes; i++) {
        struct limit_stripe *s = &z->stripes[i];
        for (struct limit_node *n = s->lru.next, *next; n && n != &s->lru; n = next) {
            next = n->next;
            free(n);
        }
        free(s->buckets);
        pthread_mutex_destroy(&s->lock);
    }
    free(z->stripes);
    vars_free(z->key);
}

static void lru_unlink(struct limit_node *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
}

static void lru_push(struct limit_stripe *s, struct limit_node *n)
{
    n->next = s->lru.next;
    n->prev = &s->lru;
    s->lru.next->prev = n;
    s->lru.next = n;
}

static void node_remove(struct limit_stripe *s, struct limit_node *n)
{
    struct limit_node **pp = &s->buckets[n->hash & (s->n_buckets - 1)];
    while (*pp != n)
        pp = &(*pp)->hnext;
    *pp = n->hnext;
    lru_unlink(n);
    s->n--;
    free(n);
}

/* The stripe's node for key, made most recent, or NULL. Under the stripe's lock. */
static struct limit_node *node_find(struct limit_stripe *s, uint64_t h, const char *key,
                                    size_t len)
{
    for (struct limit_node *n = s->buckets[h & (s->n_buckets - 1)]; n; n = n->hnext)
        if (n->hash == h && n->key_len == len && memcmp(n->key, key, len) == 0) {
            lru_unlink(n);
            lru_push(s, n);
            return n;
        }
    return NULL;
}

/* limit_req: drop up to two of the oldest keys that have drained and stayed idle, as
 * nginx does on each new key, and the oldest by force when the stripe is full. */
static void req_expire(const struct limit_zone *z, struct limit_stripe *s, int64_t now_ms)
{
    for (int i = 0; i < 2 && s->lru.prev != &s->lru; i++) {
        struct limit_node *old = s->lru.prev;
        int64_t ms = now_ms - old->last_ms;
        if (ms < LIMIT_IDLE_MS || old->excess - (int64_t)(z->rate * (uint64_t)ms / 1000) > 0)
            break;
        node_remove(s, old);
    }
    if (s->n >= s->max && s->lru.prev != &s->lru)
        node_remove(s, s->lru.prev);
}

/* A new node for key in s (room made by the caller), or NULL when out of memory. */
static struct limit_node *node_add(struct limit_stripe *s, uint64_t h, const char *key,
                                   size_t len)
{
    struct limit_node *n = malloc(sizeof(*n) + len);
    if (!n)
        return NULL;
    memset(n, 0, sizeof(*n));
    n->hash = h;
    n->stripe = s;
    n->key_len = (uint16_t)len;
    memcpy(n->key, key, len);
    struct limit_node **b = &s->buckets[h & (s->n_buckets - 1)];
    n->hnext = *b;
    *b = n;
    lru_push(s, n);
    s->n++;
    return n;
}

static struct limit_stripe *stripe_of(const struct limit_zone *z, uint64_t h)
{
    return &z->stripes[(h >> 48) & (z->n_stripes - 1)];
}

/* --- limit_req ------------------------------------------------------------------------------ */

/* The key of zone z for req into buf: its length (0: not limited), or -1 (too long). */
static long key_of(const struct limit_zone *z, const struct request *req, char *buf)
{
    struct vars_source src;
    module_vars_source(req, &src);
    long n = vars_expand(z->key, &src, buf, LIMIT_KEY_MAX);
    return n;
}

/* The excess key would have with this request, after draining since its last one. */
static int64_t excess_now(const struct limit_zone *z, const struct limit_node *n,
                          int64_t now_ms)
{
    int64_t ms = now_ms - n->last_ms;
    if (ms < -60000)
        ms = 1;
    else if (ms < 0)
        ms = 0;
    int64_t e = n->excess - (int64_t)(z->rate * (uint64_t)ms / 1000) + 1000;
    return e < 0 ? 0 : e;
}

/* What req_account does with a request. */
enum req_mode {
    REQ_CHECK,      /* is it within the burst? */
    REQ_CHECK_COUNT, /* that, and if so count it, under one lock: the last limit */
    REQ_COUNT,      /* count it (the others, once the last let it through) */
};

/* One request against rule, *excess the key's excess with it: 0, 1 when over the burst
 * (not counted), -1 when no node could be made. */
static int req_account(const struct limit_rule *rule, const char *key, size_t len,
                       int64_t now_ms, enum req_mode mode, int64_t *excess)
{
    const struct limit_zone *z = rule->zone;
    uint64_t h = key_hash(z->seed, key, len);
    struct limit_stripe *s = stripe_of(z, h);
    int rc = 0;
    *excess = 0;
    pthread_mutex_lock(&s->lock);
    struct limit_node *n = node_find(s, h, key, len);
    if (n) {
        *excess = excess_now(z, n, now_ms);
        if (mode != REQ_COUNT && (uint64_t)*excess > rule->burst) {
            rc = 1;
        } else if (mode != REQ_CHECK) {
            n->excess = *excess;
            n->last_ms = now_ms;
        }
    } else if (mode != REQ_CHECK) {
        req_expire(z, s, now_ms);
        n = node_add(s, h, key, len);
        if (n)
            n->last_ms = now_ms;
        else
            rc = -1;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static enum log_level level_of(int nginx_level, bool delay)
{
    switch (nginx_level) {
    case LIMIT_LOG_INFO:
    case LIMIT_LOG_NOTICE: return LOG_LEVEL_INFO;
    case LIMIT_LOG_WARN: return delay ? LOG_LEVEL_INFO : LOG_LEVEL_WARN;
    default: return delay ? LOG_LEVEL_WARN : LOG_LEVEL_ERROR;
    }
}

/* A request refused by limit_req (or let through, in a dry run). */
static enum mod_result req_refuse(const struct limit_conf *c, struct request *req,
                                  struct response *resp)
{
    bool dry = c->req_dry == LIMIT_DRY_ON;
    req->marks.limit_req = dry ? REQUEST_LIMIT_REJECTED_DRY_RUN : REQUEST_LIMIT_REJECTED;
    if (dry)
        return MOD_DECLINED;
    resp_error(resp, (int)c->req_status);
    return MOD_HANDLED;
}

/* Every limit_req of the block must let the request through; only then is it counted in
 * each (a refused request counts in none, as nginx's). The last limit with a key checks and
 * counts under one lock, so that requests racing for one key are counted one by one. */
static enum mod_result req_limit(const struct limit_conf *c, struct request *req,
                                 struct response *resp)
{
    char key[LIMIT_KEY_MAX];
    long lens[LIMIT_RULES_MAX];
    int64_t now_ms = req->start_us / 1000, e;
    bool dry = c->req_dry == LIMIT_DRY_ON;
    int last = -1;
    for (unsigned i = 0; i < c->n_reqs; i++) {
        lens[i] = key_of(c->reqs[i].zone, req, key);
        if (lens[i] < 0) {
            module_log(req, LOG_LEVEL_ERROR, "the value of the key of zone \"%s\" is more "
                       "than %d bytes", c->reqs[i].zone->name, LIMIT_KEY_MAX - 1);
            return MOD_ERROR;
        }
        if (lens[i] > 0)
            last = (int)i;
    }
    if (last < 0)
        return MOD_DECLINED;
    if (req->marks.resumed) { /* counted and delayed already: it goes on now */
        req->marks.limit_req = dry ? REQUEST_LIMIT_DELAYED_DRY_RUN : REQUEST_LIMIT_DELAYED;
        return MOD_DECLINED;
    }
    uint64_t delay_ms = 0;
    int64_t delay_excess = 0;
    const struct limit_rule *delayer = NULL;
    for (int pass = 0; pass < 2; pass++) {
        /* pass 0: check each, the last counted too; pass 1: count the others */
        for (int i = 0; i <= last; i++) {
            const struct limit_rule *r = &c->reqs[i];
            if (lens[i] == 0 || (pass == 1 && i == last))
                continue;
            if (c->n_reqs > 1) /* with one limit, the buffer still holds its key */
                key_of(r->zone, req, key);
            enum req_mode mode = pass ? REQ_COUNT : i == last ? REQ_CHECK_COUNT : REQ_CHECK;
            int rc = req_account(r, key, (size_t)lens[i], now_ms, mode, &e);
            if (rc > 0) {
                module_log(req, level_of(c->req_log, false),
                           "limiting requests%s, excess: %llu.%03llu by zone \"%s\"",
                           dry ? ", dry run" : "", (unsigned long long)(e / 1000),
                           (unsigned long long)(e % 1000), r->zone->name);
                return req_refuse(c, req, resp);
            }
            if (rc < 0) {
                module_log(req, LOG_LEVEL_ERROR, "could not allocate node in limit_req zone "
                           "\"%s\"", r->zone->name);
                return req_refuse(c, req, resp);
            }
            if (mode == REQ_CHECK || (uint64_t)e <= r->delay)
                continue;
            uint64_t ms = ((uint64_t)e - r->delay) * 1000 / r->zone->rate;
            if (!delayer || ms > delay_ms) {
                delay_ms = ms;
                delay_excess = e;
                delayer = r;
            }
        }
    }
    if (!delayer) {
        req->marks.limit_req = REQUEST_LIMIT_PASSED;
        return MOD_DECLINED;
    }
    module_log(req, level_of(c->req_log, true), "delaying request%s, excess: %llu.%03llu, by "
               "zone \"%s\"", dry ? ", dry run" : "",
               (unsigned long long)(delay_excess / 1000),
               (unsigned long long)(delay_excess % 1000), delayer->zone->name);
    req->marks.limit_req = dry ? REQUEST_LIMIT_DELAYED_DRY_RUN : REQUEST_LIMIT_DELAYED;
    if (dry || !req->marks.may_delay || delay_ms == 0)
        return MOD_DECLINED; /* answered now: see the top of the file */
    req->marks.delay_ms = delay_ms > UINT32_MAX ? UINT32_MAX : (uint32_t)delay_ms;
    return MOD_DELAY;
}

/* --- limit_conn ----------------------------------------------------------------------------- */

static void conn_let_go(struct limit_node *n)
{
    struct limit_stripe *s = n->stripe;
    pthread_mutex_lock(&s->lock);
    if (n->count > 0 && --n->count == 0)
        node_remove(s, n);
    pthread_mutex_unlock(&s->lock);
}

/* One more request for key in rule's zone: 0, 1 when over the limit, -1 when no room. */
static int conn_take(const struct limit_rule *rule, const char *key, size_t len,
                     struct limit_node **out)
{
    const struct limit_zone *z = rule->zone;
    uint64_t h = key_hash(z->seed, key, len);
    struct limit_stripe *s = stripe_of(z, h);
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    struct limit_node *n = node_find(s, h, key, len);
    if (!n && s->n < s->max)
        n = node_add(s, h, key, len);
    if (!n)
        rc = -1;
    else if (n->count >= rule->conn)
        rc = 1;
    else
        n->count++;
    pthread_mutex_unlock(&s->lock);
    *out = n;
    return rc;
}

static void conn_let_go_all(struct request *req)
{
    for (unsigned i = 0; i < req->marks.n_held; i++)
        conn_let_go(req->marks.held[i]);
    req->marks.n_held = 0;
}

static enum mod_result conn_limit(const struct limit_conf *c, struct request *req,
                                  struct response *resp)
{
    bool dry = c->conn_dry == LIMIT_DRY_ON;
    char key[LIMIT_KEY_MAX];
    for (unsigned i = 0; i < c->n_conns; i++) {
        const struct limit_rule *r = &c->conns[i];
        long n = key_of(r->zone, req, key);
        if (n < 0) {
            module_log(req, LOG_LEVEL_ERROR, "the value of the key of zone \"%s\" is more "
                       "than %d bytes", r->zone->name, LIMIT_KEY_MAX - 1);
            conn_let_go_all(req);
            return MOD_ERROR;
        }
        if (n == 0)
            continue;
        req->marks.limit_conn = REQUEST_LIMIT_PASSED;
        struct limit_node *node;
        int rc = conn_take(r, key, (size_t)n, &node);
        if (rc == 0) {
            req->marks.held[req->marks.n_held++] = node;
            continue;
        }
        if (rc < 0)
            module_log(req, LOG_LEVEL_ERROR, "could not allocate node in limit_conn zone "
                       "\"%s\"", r->zone->name);
        else
            module_log(req, level_of(c->conn_log, false), "limiting connections%s by zone "
                       "\"%s\"", dry ? ", dry run" : "", r->zone->name);
        req->marks.limit_conn = dry ? REQUEST_LIMIT_REJECTED_DRY_RUN : REQUEST_LIMIT_REJECTED;
        if (dry)
            return MOD_DECLINED; /* what it holds is let go when it ends, as nginx's */
        conn_let_go_all(req);
        resp_error(resp, (int)c->conn_status);
        return MOD_HANDLED;
    }
    return MOD_DECLINED;
}

/* --- the hooks ------------------------------------------------------------------------------- */

static enum mod_result limit_preaccess(void *state, struct request *req, struct response *resp)
{
    const struct limit_module *m = state;
    const struct limit_conf *c = module_settings(req, m->index);
    if (!c)
        return MOD_DECLINED;
    enum mod_result r = c->n_reqs ? req_limit(c, req, resp) : MOD_DECLINED;
    if (r == MOD_DECLINED && c->n_conns)
        r = conn_limit(c, req, resp);
    return r;
}

static void limit_log(void *state, const struct request *req, const struct response *resp)
{
    (void)state;
    (void)resp;
    for (unsigned i = 0; i < req->marks.n_held; i++)
        conn_let_go(req->marks.held[i]);
}

/* --- configuration --------------------------------------------------------------------------- */

/* NAME:SIZE of zone=NAME:SIZE. */
static int parse_zone_arg(const char *a, struct limit_zone *z, uint64_t *size, char *msg,
                          size_t len)
{
    const char *colon = strrchr(a + 5, ':');
    size_t nl = colon ? (size_t)(colon - (a + 5)) : 0;
    if (!colon || nl == 0 || nl >= LIMIT_NAME_MAX)
        return snprintf(msg, len, "invalid zone size \"%s\"", a), -1;
    memcpy(z->name, a + 5, nl);
    z->name[nl] = '\0';
    if (config_parse_size(colon + 1, size) < 0 || *size < 8 * 4096)
        return snprintf(msg, len, "invalid zone size \"%s\" (at least 32k)", a), -1;
    return 0;
}

/* rate=Nr/s or rate=Nr/m, in thousandths of a request per second. */
static int parse_rate(const char *a, uint64_t *rate)
{
    const char *p = a + 5;
    uint64_t n = 0;
    if (*p < '0' || *p > '9')
        return -1;
    while (*p >= '0' && *p <= '9' && n < 1000000000)
        n = n * 10 + (uint64_t)(*p++ - '0');
    if (n == 0 || n >= 1000000000)
        return -1;
    if (strcmp(p, "r/s") == 0)
        *rate = n * 1000;
    else if (strcmp(p, "r/m") == 0)
        *rate = n * 1000 / 60;
    else
        return -1;
    return *rate ? 0 : -1;
}

static int read_zone(struct module_init *mi, const struct conf_node *n, bool conn,
                     struct limit_zone *z)
{
    char msg[256] = "";
    uint64_t size = 0;
    bool has_zone = false, has_rate = conn;
    memset(z, 0, sizeof(*z));
    z->conn = conn;
    z->line = n->line;
    for (unsigned i = 1; i < n->n_args; i++) {
        const char *a = n->args[i];
        if (strncmp(a, "zone=", 5) == 0) {
            if (parse_zone_arg(a, z, &size, msg, sizeof(msg)) < 0)
                return module_error(mi, n, "%s: %s", n->name, msg);
            has_zone = true;
        } else if (!conn && strncmp(a, "rate=", 5) == 0) {
            if (parse_rate(a, &z->rate) < 0)
                return module_error(mi, n, "%s: invalid rate \"%s\"", n->name, a);
            has_rate = true;
        } else if (!conn && strcmp(a, "sync") == 0) {
            continue; /* nginx Plus's zone synchronization: one server has nothing to share */
        } else {
            return module_error(mi, n, "%s: invalid parameter \"%s\"", n->name, a);
        }
    }
    if (!has_zone)
        return module_error(mi, n, "%s: no zone=NAME:SIZE", n->name);
    if (!has_rate)
        return module_error(mi, n, "%s: no rate=", n->name);
    if (vars_compile(n->args[0], VARS_RAW, &z->key, msg, sizeof(msg)) < 0)
        return module_error(mi, n, "%s: %s", n->name, msg);
    if (zone_setup(z, size) < 0) {
        zone_free(z);
        return module_error(mi, n, "out of memory");
    }
    return 0;
}

static int read_zones(struct module_init *mi, struct limit_module *m, const char *name,
                      bool conn)
{
    int rc = 0;
    for (const struct conf_node *n = module_directive(mi, name); n;
         n = module_directive_next(mi, name, n)) {
        struct limit_zone z;
        if (read_zone(mi, n, conn, &z) < 0) {
            rc = -1;
            continue;
        }
        for (unsigned i = 0; i < m->n_zones; i++)
            if (strcmp(m->zones[i].name, z.name) == 0) {
                zone_free(&z);
                rc = module_error(mi, n, "%s: duplicate zone \"%s\"", name, m->zones[i].name);
                break;
            }
        if (!z.stripes)
            continue;
        struct limit_zone *more = realloc(m->zones, (m->n_zones + 1) * sizeof(*more));
        if (!more) {
            zone_free(&z);
            return module_error(mi, n, "out of memory");
        }
        m->zones = more;
        m->zones[m->n_zones++] = z;
    }
    return rc;
}

static int set_limit_req(void *base, const struct conf_node *n, void *ctx, char *msg,
                         size_t len)
{
    (void)ctx;
    struct limit_conf *c = base;
    if (c->n_reqs == LIMIT_RULES_MAX)
        return snprintf(msg, len, "more than %d in one block", LIMIT_RULES_MAX), -1;
    struct limit_rule r = {.where = n};
    for (unsigned i = 0; i < n->n_args; i++) {
        const char *a = n->args[i];
        uint64_t v;
        if (strncmp(a, "zone=", 5) == 0 && a[5] && strlen(a + 5) < LIMIT_NAME_MAX)
            strcpy(r.zone_name, a + 5);
        else if (strncmp(a, "burst=", 6) == 0 && config_parse_count(a + 6, &v) == 0 &&
                 v < 1000000000)
            r.burst = v * 1000;
        else if (strncmp(a, "delay=", 6) == 0 && config_parse_count(a + 6, &v) == 0 &&
                 v < 1000000000)
            r.delay = v * 1000;
        else if (strcmp(a, "nodelay") == 0)
            r.delay = UINT64_MAX;
        else
            return snprintf(msg, len, "invalid parameter \"%s\"", a), -1;
    }
    if (!r.zone_name[0])
        return snprintf(msg, len, "no zone=NAME"), -1;
    for (unsigned i = 0; i < c->n_reqs; i++)
        if (strcmp(c->reqs[i].zone_name, r.zone_name) == 0)
            return snprintf(msg, len, "zone \"%s\" is duplicate", r.zone_name), -1;
    c->reqs[c->n_reqs++] = r;
    return 0;
}

static int set_limit_conn(void *base, const struct conf_node *n, void *ctx, char *msg,
                          size_t len)
{
    (void)ctx;
    struct limit_conf *c = base;
    if (c->n_conns == REQUEST_HELD_MAX)
        return snprintf(msg, len, "more than %d in one block", REQUEST_HELD_MAX), -1;
    struct limit_rule r = {.where = n};
    uint64_t v;
    if (strlen(n->args[0]) >= LIMIT_NAME_MAX)
        return snprintf(msg, len, "invalid zone \"%s\"", n->args[0]), -1;
    strcpy(r.zone_name, n->args[0]);
    if (config_parse_count(n->args[1], &v) < 0 || v == 0 || v > 65535)
        return snprintf(msg, len, "invalid number of connections \"%s\"", n->args[1]), -1;
    r.conn = (unsigned)v;
    for (unsigned i = 0; i < c->n_conns; i++)
        if (strcmp(c->conns[i].zone_name, r.zone_name) == 0)
            return snprintf(msg, len, "zone \"%s\" is duplicate", r.zone_name), -1;
    c->conns[c->n_conns++] = r;
    return 0;
}

static const struct conf_name log_levels[] = {
    {"info", LIMIT_LOG_INFO}, {"notice", LIMIT_LOG_NOTICE}, {"warn", LIMIT_LOG_WARN},
    {"error", LIMIT_LOG_ERROR}, {NULL, 0},
};
static const struct conf_name on_off[] = {{"off", LIMIT_DRY_OFF}, {"on", LIMIT_DRY_ON}, {NULL, 0}};

#define LIMIT_BLOCKS (CONF_TOP | CONF_SERVER | CONF_LOCATION)

static const struct conf_directive limit_directives[] = {
    {"limit_req_zone", CONF_LIST, CONF_TOP, CONF_REPEATS, .min_args = 3, .max_args = 4,
     .set = conf_set_later, .usage = "KEY zone=NAME:SIZE rate=RATE [sync]",
     .doc = "A zone of request rates per KEY (a value with variables, usually "
        "`$binary_remote_addr`; an empty key is not limited), for `limit_req`. RATE is "
        "`Nr/s` or `Nr/m`; SIZE (at least 32k) bounds the keys it holds, 16384 a megabyte; "
        "when full, the least recently used key is forgotten. `sync` (nginx Plus) is "
        "accepted and does nothing. A reload starts the zone afresh."},
    {"limit_req", CONF_LIST, LIMIT_BLOCKS, CONF_REPEATS, .min_args = 1, .max_args = 3,
     .set = set_limit_req, .usage = "zone=NAME [burst=N] [nodelay|delay=N]",
     .doc = "Limits the request rate per key of the zone, nginx's leaky bucket: a request "
        "beyond the rate and `burst` more is refused with `limit_req_status`; one within "
        "the burst (beyond `delay=N`, unless `nodelay`) waits until the rate lets it "
        "through, no thread with it, and is marked `DELAYED` in `$limit_req_status` (one "
        "with a body is answered at once). Repeatable; a block with any `limit_req` has "
        "only its own."},
    {"limit_req_status", CONF_COUNT, LIMIT_BLOCKS, CONF_ONCE, .min = 400, .max = 599,
     CONF_AT(struct limit_conf, req_status), .usage = "CODE", .dflt = "503",
     .doc = "The status of a request refused by `limit_req`."},
    {"limit_req_log_level", CONF_ENUM, LIMIT_BLOCKS, CONF_ONCE, .names = log_levels,
     CONF_AT(struct limit_conf, req_log), .usage = "info|notice|warn|error", .dflt = "error",
     .doc = "The level of the error-log line of a refusal; a delay is logged one level below "
        "(notice is info here)."},
    {"limit_req_dry_run", CONF_ENUM, LIMIT_BLOCKS, CONF_ONCE, .names = on_off,
     CONF_AT(struct limit_conf, req_dry), .usage = "on|off", .dflt = "off",
     .doc = "`on`: `limit_req` counts and logs, and refuses nothing (`$limit_req_status` "
        "says `REJECTED_DRY_RUN` or `DELAYED_DRY_RUN`)."},
    {"limit_conn_zone", CONF_LIST, CONF_TOP, CONF_REPEATS, .min_args = 2, .max_args = 2,
     .set = conf_set_later, .usage = "KEY zone=NAME:SIZE",
     .doc = "A zone counting the requests in progress per KEY (a value with variables; an "
        "empty key is not limited), for `limit_conn`. SIZE (at least 32k) bounds the keys "
        "in it at once, 16384 a megabyte; a request that finds it full is refused. A "
        "reload starts the zone afresh."},
    {"limit_conn", CONF_LIST, LIMIT_BLOCKS, CONF_REPEATS, .min_args = 2, .max_args = 2,
     .set = set_limit_conn, .usage = "ZONE NUMBER",
     .doc = "At most NUMBER requests of one key of the zone answered at once; one more is "
        "refused with `limit_conn_status`. A request counts from its placing to the end of "
        "its answer (a proxied or CGI one), or until its answer is handed over to be sent "
        "(a file). Repeatable; a block with any `limit_conn` has only its own."},
    {"limit_conn_status", CONF_COUNT, LIMIT_BLOCKS, CONF_ONCE, .min = 400, .max = 599,
     CONF_AT(struct limit_conf, conn_status), .usage = "CODE", .dflt = "503",
     .doc = "The status of a request refused by `limit_conn`."},
    {"limit_conn_log_level", CONF_ENUM, LIMIT_BLOCKS, CONF_ONCE, .names = log_levels,
     CONF_AT(struct limit_conf, conn_log), .usage = "info|notice|warn|error", .dflt = "error",
     .doc = "The level of the error-log line of a refusal (notice is info here)."},
    {"limit_conn_dry_run", CONF_ENUM, LIMIT_BLOCKS, CONF_ONCE, .names = on_off,
     CONF_AT(struct limit_conf, conn_dry), .usage = "on|off", .dflt = "off",
     .doc = "`on`: `limit_conn` counts and logs, and refuses nothing (`$limit_conn_status` "
        "says `REJECTED_DRY_RUN`)."},
    {.name = NULL},
};

static struct limit_zone *zone_named(struct limit_module *m, const char *name)
{
    for (unsigned i = 0; i < m->n_zones; i++)
        if (strcmp(m->zones[i].name, name) == 0)
            return &m->zones[i];
    return NULL;
}

/* Point the block's rules at their zones. */
static int bind_rules(struct limit_module *m, const struct module_block *b,
                      struct limit_rule *rules, unsigned n, bool conn)
{
    int rc = 0;
    for (unsigned i = 0; i < n; i++) {
        struct limit_zone *z = zone_named(m, rules[i].zone_name);
        const char *what = conn ? "limit_conn" : "limit_req";
        if (!z)
            rc = module_error(b->mi, rules[i].where, "%s: unknown %s_zone \"%s\"", what, what,
                              rules[i].zone_name);
        else if (z->conn != conn)
            rc = module_error(b->mi, rules[i].where, "%s: zone \"%s\" is a %s_zone", what,
                              z->name, z->conn ? "limit_conn" : "limit_req");
        else
            rules[i].zone = z;
    }
    return rc;
}

static void *limit_block(void *state, const struct module_block *b)
{
    struct limit_module *m = state;
    if (b->outer && !module_block_has(b))
        return (void *)b->outer;
    struct limit_conf *c = calloc(1, sizeof(*c));
    if (!c) {
        module_error(b->mi, NULL, "out of memory");
        return NULL;
    }
    if (module_block_read(b, c) < 0 || bind_rules(m, b, c->reqs, c->n_reqs, false) < 0 ||
        bind_rules(m, b, c->conns, c->n_conns, true) < 0) {
        free(c);
        return NULL;
    }
    const struct limit_conf *o = b->outer;
    if (o && !c->n_reqs) {
        memcpy(c->reqs, o->reqs, sizeof(c->reqs));
        c->n_reqs = o->n_reqs;
    }
    if (o && !c->n_conns) {
        memcpy(c->conns, o->conns, sizeof(c->conns));
        c->n_conns = o->n_conns;
    }
#define INHERIT(f, dflt) c->f = c->f ? c->f : o ? o->f : (dflt)
    INHERIT(req_status, 503);
    INHERIT(conn_status, 503);
    INHERIT(req_log, LIMIT_LOG_ERROR);
    INHERIT(conn_log, LIMIT_LOG_ERROR);
    INHERIT(req_dry, LIMIT_DRY_OFF);
    INHERIT(conn_dry, LIMIT_DRY_OFF);
#undef INHERIT
    return c;
}

static void limit_block_free(void *state, void *settings)
{
    (void)state;
    free(settings);
}

static int limit_init(struct module_init *mi, void **state)
{
    struct limit_module *m = calloc(1, sizeof(*m));
    if (!m)
        return module_error(mi, NULL, "out of memory");
    m->index = mi->index;
    int rc = read_zones(mi, m, "limit_req_zone", false);
    if (read_zones(mi, m, "limit_conn_zone", true) < 0)
        rc = -1;
    if (rc < 0) {
        for (unsigned i = 0; i < m->n_zones; i++)
            zone_free(&m->zones[i]);
        free(m->zones);
        free(m);
        return -1;
    }
    *state = m;
    return 0;
}

static void limit_fini(void *state)
{
    struct limit_module *m = state;
    for (unsigned i = 0; i < m->n_zones; i++)
        zone_free(&m->zones[i]);
    free(m->zones);
    free(m);
}

const struct module mod_limit = {
    .name = "limit",
    .directives = limit_directives,
    .init = limit_init,
    .fini = limit_fini,
    .preaccess = limit_preaccess,
    .log = limit_log,
    .block = limit_block,
    .block_free = limit_block_free,
};
