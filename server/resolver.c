/* resolver.c — c-ares driven from a thread group's handle set (resolver.h).
 *
 * Everything about a resolver happens under its lock: asking c-ares, the events of its
 * sockets, the cache. c-ares owns its sockets; it tells us of each new one (the socket
 * callback), and after every call into it the sockets it still has are compared with those
 * registered (ares_getsock): a new one is added to the asking request's group, one-shot; one
 * gone was closed by c-ares (which took it out of the set). A socket's record is never
 * freed while the server runs, and not reused for a while after its socket went, so an
 * event already fetched for it finds it dead and does nothing.
 *
 * c-ares's own time (resending to a server that did not answer, giving up) is kept by a
 * timerfd of the resolver's, a handle like its sockets in the first shared group that
 * used it, every RESOLVER_TICK_MS; a lookup and a cancelled wait look at it too.
 */
#include "resolver.h"

#include <arpa/inet.h>
#include <ares.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "clock.h"
#include "directive.h"
#include "log.h"

#define RESOLVER_ENTRIES_MAX 1024  /* names cached; past it, expired ones go first */
#define RESOLVER_ERROR_VALID_S 30  /* a name that does not exist, when valid= says nothing */
#define RESOLVER_RETIRE_MS 10000   /* a gone socket's record waits so long before reuse */
#define RESOLVER_TRY_MS 2000       /* c-ares's wait for one server, before the next try */
#define RESOLVER_TICK_MS 500       /* how often c-ares's resends and timeouts are looked at */

/* A socket of a channel, as a handle of a group. */
struct res_sock {
    struct lf_handle h;
    struct resolver *r; /* NULL: dead (under socks.lock) */
    bool registered;    /* in a handle set (under r->lock) */
    bool tick;          /* the resolver's timerfd, not a socket of c-ares's */
    int64_t retired_ms; /* when it went dead */
    struct res_sock *next;
};

/* Every record; the free ones are those dead for RESOLVER_RETIRE_MS. */
static struct {
    pthread_mutex_t lock;
    struct res_sock *all;
} socks = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* A cached or asked name. */
struct res_entry {
    struct res_entry *next;
    struct resolver *r;
    char name[RESOLVER_NAME_MAX];
    bool pending;
    int status;
    int64_t expires_ms;
    struct resolver_addrs addrs;
    struct resolver_wait *waiters;
    /* An answer of a CNAME alone is followed: the name asked for now, how many were */
    char follow[RESOLVER_NAME_MAX];
    unsigned follows;
    int ttl;          /* the chain's lowest TTL so far (-1: none) */
    unsigned asked;   /* answers still to come for the name asked (A, AAAA) */
    char cname[RESOLVER_NAME_MAX]; /* the CNAME they hold, "" none */
    int fail;         /* the first failure among them (an ARES_ status), 0: none */
};

#define RESOLVER_FOLLOWS_MAX 8 /* CNAMEs followed, at most */

struct resolver {
    pthread_mutex_t lock;
    ares_channel ch;
    unsigned valid_s;
    int family;
    struct res_entry *entries;
    unsigned n_entries, n_pending;
    struct lf_group *group; /* where new sockets go: the asking request's */
    struct lf_group *home;  /* the last shared group seen: when no request is asking */
    int tick_fd;            /* a timerfd: c-ares's resends and timeouts, -1 until a group */
    int fresh[ARES_GETSOCK_MAXNUM]; /* sockets c-ares opened since the last reconcile */
    unsigned n_fresh;
    atomic_uint busy; /* sockets' events between finding r and taking its lock */
};

const char *resolver_strerror(int status)
{
    switch (status) {
    case RESOLVER_ENOTFOUND:
        return "Host not found";
    case RESOLVER_ETIMEDOUT:
        return "Operation timed out";
    case RESOLVER_EREFUSED:
        return "Operation refused";
    case RESOLVER_EFORMERR:
        return "Format error";
    case RESOLVER_ENOTIMP:
        return "Unimplemented";
    default:
        return "Server failure";
    }
}

static int status_of(int ares_status)
{
    switch (ares_status) {
    case ARES_SUCCESS:
        return 0;
    case ARES_ENOTFOUND:
    case ARES_ENODATA:
    case ARES_ENONAME:
        return RESOLVER_ENOTFOUND;
    case ARES_ETIMEOUT:
        return RESOLVER_ETIMEDOUT;
    case ARES_EREFUSED:
        return RESOLVER_EREFUSED;
    case ARES_EFORMERR:
        return RESOLVER_EFORMERR;
    case ARES_ENOTIMP:
        return RESOLVER_ENOTIMP;
    default:
        return RESOLVER_EFAIL;
    }
}

/* --- sockets ------------------------------------------------------------------------------ */

static void sock_event(struct lf_handle *h, uint32_t events);
static void reconcile(struct resolver *r);

static int on_socket(ares_socket_t fd, int type, void *data)
{
    (void)type;
    struct resolver *r = data;
    if (r->n_fresh < ARES_GETSOCK_MAXNUM)
        r->fresh[r->n_fresh++] = fd;
    return 0; /* (ARES_SUCCESS: keep it) */
}

static struct res_sock *sock_get(struct resolver *r, int fd)
{
    int64_t now = clock_now_ms();
    pthread_mutex_lock(&socks.lock);
    struct res_sock *s = socks.all;
    while (s && !(s->r == NULL && s->retired_ms && now - s->retired_ms > RESOLVER_RETIRE_MS))
        s = s->next;
    if (!s) {
        s = calloc(1, sizeof(*s));
        if (s) {
            s->next = socks.all;
            socks.all = s;
        }
    }
    if (s) {
        s->r = r;
        s->retired_ms = 0;
        s->registered = false;
        s->h.fd = fd;
        s->h.on_event = sock_event;
        s->tick = false;
    }
    pthread_mutex_unlock(&socks.lock);
    return s;
}

static void sock_retire(struct res_sock *s)
{
    pthread_mutex_lock(&socks.lock);
    s->r = NULL;
    s->registered = false;
    s->retired_ms = clock_now_ms();
    pthread_mutex_unlock(&socks.lock);
}

static uint32_t wanted(struct resolver *r, int fd)
{
    ares_socket_t fds[ARES_GETSOCK_MAXNUM];
    int bits = ares_getsock(r->ch, fds, ARES_GETSOCK_MAXNUM);
    for (int i = 0; i < ARES_GETSOCK_MAXNUM; i++) {
        if (!ARES_GETSOCK_READABLE(bits, i) && !ARES_GETSOCK_WRITABLE(bits, i))
            break;
        if (fds[i] == fd)
            return (ARES_GETSOCK_READABLE(bits, i) ? EPOLLIN : 0) |
                   (ARES_GETSOCK_WRITABLE(bits, i) ? EPOLLOUT : 0);
    }
    return 0;
}

/* The resolver's tick: a timerfd in g's set, every RESOLVER_TICK_MS, so that c-ares
 * resends and gives up on time even when nothing else happens. */
static void tick_start(struct resolver *r, struct lf_group *g)
{
    int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (fd < 0)
        return;
    struct itimerspec its = {.it_interval = {0, RESOLVER_TICK_MS * 1000000L},
                             .it_value = {0, RESOLVER_TICK_MS * 1000000L}};
    struct res_sock *s = timerfd_settime(fd, 0, &its, NULL) == 0 ? sock_get(r, fd) : NULL;
    if (!s) {
        close(fd);
        return;
    }
    s->tick = true;
    s->registered = true;
    r->tick_fd = fd;
    if (lf_group_add(g, &s->h, EPOLLIN) < 0) {
        sock_retire(s);
        close(fd);
        r->tick_fd = -1;
    }
}

/* Make the registered sockets those c-ares has: under r->lock, after any call into it. */
static void reconcile(struct resolver *r)
{
    /* (a group that goes with its connection is not a home: Thread-per-Connection's) */
    if (r->group && !lf_group_is_private(r->group))
        r->home = r->group;
    struct lf_group *g = r->group ? r->group : r->home;
    if (r->tick_fd < 0 && r->home)
        tick_start(r, r->home);
    ares_socket_t fds[ARES_GETSOCK_MAXNUM];
    int bits = ares_getsock(r->ch, fds, ARES_GETSOCK_MAXNUM);
    int n = 0;
    while (n < ARES_GETSOCK_MAXNUM &&
           (ARES_GETSOCK_READABLE(bits, n) || ARES_GETSOCK_WRITABLE(bits, n)))
        n++;
    /* Records whose socket is gone, or whose number is a new socket's now, go dead. */
    pthread_mutex_lock(&socks.lock);
    for (struct res_sock *s = socks.all; s; s = s->next) {
        if (s->r != r || s->tick)
            continue;
        bool kept = false;
        for (int i = 0; i < n && !kept; i++)
            kept = fds[i] == s->h.fd;
        for (unsigned i = 0; i < r->n_fresh && kept; i++)
            kept = r->fresh[i] != s->h.fd;
        if (!kept) {
            s->r = NULL;
            s->registered = false;
            s->retired_ms = clock_now_ms();
        }
    }
    pthread_mutex_unlock(&socks.lock);
    /* Sockets with no record get one, in the asking group's set. */
    for (int i = 0; i < n; i++) {
        bool known = false;
        pthread_mutex_lock(&socks.lock);
        for (struct res_sock *s = socks.all; s && !known; s = s->next)
            known = s->r == r && s->h.fd == fds[i];
        pthread_mutex_unlock(&socks.lock);
        if (known || !g)
            continue;
        struct res_sock *s = sock_get(r, fds[i]);
        if (!s) {
            log_error("resolver: out of memory for a socket's record");
            continue;
        }
        uint32_t ev = (ARES_GETSOCK_READABLE(bits, i) ? EPOLLIN : 0) |
                      (ARES_GETSOCK_WRITABLE(bits, i) ? EPOLLOUT : 0);
        s->registered = true;
        int rc = lf_group_add(g, &s->h, ev);
        if (rc < 0) {
            log_error("resolver: cannot wait on a DNS socket: %s", strerror(-rc));
            sock_retire(s);
        }
    }
    r->n_fresh = 0;
}

static void sock_event(struct lf_handle *h, uint32_t events)
{
    struct res_sock *s = (struct res_sock *)h;
    pthread_mutex_lock(&socks.lock);
    struct resolver *r = s->r;
    if (!r) {
        pthread_mutex_unlock(&socks.lock);
        return;
    }
    /* (r->lock is taken after socks.lock is let go of: reconcile takes them the other way;
     * `busy` keeps r from being freed meanwhile) */
    atomic_fetch_add(&r->busy, 1);
    pthread_mutex_unlock(&socks.lock);
    pthread_mutex_lock(&r->lock);
    if (s->r != r) { /* gone dead meanwhile */
        pthread_mutex_unlock(&r->lock);
        atomic_fetch_sub(&r->busy, 1);
        return;
    }
    int fd = h->fd;
    r->group = h->group;
    if (s->tick) { /* c-ares's time: resends, timeouts */
        uint64_t ticks;
        if (read(fd, &ticks, sizeof(ticks)) < 0 && errno != EAGAIN)
            log_error("resolver: timer: %s", strerror(errno));
        if (r->n_pending) {
            ares_process_fd(r->ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
            reconcile(r);
        }
        if (lf_group_rearm(h, EPOLLIN) < 0)
            sock_retire(s);
        r->group = NULL;
        pthread_mutex_unlock(&r->lock);
        atomic_fetch_sub(&r->busy, 1);
        return;
    }
    ares_process_fd(r->ch, events & (EPOLLIN | EPOLLERR | EPOLLHUP) ? fd : ARES_SOCKET_BAD,
                    events & EPOLLOUT ? fd : ARES_SOCKET_BAD);
    reconcile(r);
    if (s->r == r && s->registered) {
        uint32_t ev = wanted(r, fd);
        if (lf_group_rearm(h, ev ? ev : EPOLLIN) < 0)
            sock_retire(s);
    }
    r->group = NULL;
    pthread_mutex_unlock(&r->lock);
    atomic_fetch_sub(&r->busy, 1);
}

/* --- the cache ---------------------------------------------------------------------------- */

static void entry_unlink(struct resolver *r, struct res_entry *e)
{
    for (struct res_entry **p = &r->entries; *p; p = &(*p)->next) {
        if (*p == e) {
            *p = e->next;
            r->n_entries--;
            return;
        }
    }
}

static void notify(struct resolver_wait *w, int status, const struct resolver_addrs *a)
{
    w->status = status;
    if (a)
        w->addrs = *a;
    else
        w->addrs.n = 0;
    w->done = true;
    char b = 1;
    if (w->notify_fd >= 0 && write(w->notify_fd, &b, 1) < 0)
        log_error("resolver: cannot wake a waiting request: %s", strerror(errno));
}

static void settle(struct res_entry *e, int ttl);
static void on_raw(void *arg, int status, int timeouts, unsigned char *abuf, int alen);

/* Ask for e->follow: A, AAAA or both, as nginx's (ipv4=, ipv6=), each answer parsed here. */
static void ask(struct resolver *r, struct res_entry *e)
{
    e->pending = true;
    e->asked = r->family == AF_UNSPEC ? 2 : 1;
    e->addrs.n = 0;
    e->cname[0] = '\0';
    e->fail = 0;
    r->n_pending++;
    if (r->family != AF_INET6)
        ares_query(r->ch, e->follow, 1 /* IN */, 1 /* A */, on_raw, e);
    if (r->family != AF_INET)
        ares_query(r->ch, e->follow, 1 /* IN */, 28 /* AAAA */, on_raw, e);
}

static int lower(int ttl, int other)
{
    return ttl < 0 || (other >= 0 && other < ttl) ? other : ttl;
}

/* The name at the end of the CNAMEs of a raw answer (abuf[0..alen)), into out; their lowest
 * TTL into *ttl. False when it has none. */
static bool cname_end(const unsigned char *abuf, int alen, char *out, size_t cap, int *ttl)
{
    if (alen < 12)
        return false;
    const unsigned char *p = abuf + 12, *end = abuf + alen;
    unsigned qd = (unsigned)(abuf[4] << 8 | abuf[5]), an = (unsigned)(abuf[6] << 8 | abuf[7]);
    char *name;
    long len;
    for (unsigned i = 0; i < qd; i++) {
        if (ares_expand_name(p, abuf, alen, &name, &len) != ARES_SUCCESS)
            return false;
        ares_free_string(name);
        if (end - p < len + 4)
            return false;
        p += len + 4;
    }
    bool found = false;
    for (unsigned i = 0; i < an; i++) {
        if (ares_expand_name(p, abuf, alen, &name, &len) != ARES_SUCCESS)
            return found;
        ares_free_string(name);
        if (end - p < len + 10)
            return found;
        p += len;
        unsigned type = (unsigned)(p[0] << 8 | p[1]);
        uint32_t rttl = (uint32_t)p[4] << 24 | (uint32_t)p[5] << 16 | (uint32_t)p[6] << 8 | p[7];
        long rdlen = p[8] << 8 | p[9];
        p += 10;
        if (end - p < rdlen)
            return found;
        if (type == 5 /* CNAME */ &&
            ares_expand_name(p, abuf, alen, &name, &len) == ARES_SUCCESS) {
            if (strlen(name) < cap) {
                found = true;
                snprintf(out, cap, "%s", name);
                *ttl = lower(*ttl, rttl > INT32_MAX ? 0 : (int)rttl);
            }
            ares_free_string(name);
        }
        p += rdlen;
    }
    return found;
}

/* The addresses of one answer (A or AAAA) added to e's; their lowest TTL into *ttl. */
static void take_addresses(struct res_entry *e, const unsigned char *abuf, int alen, int *ttl)
{
    struct ares_addrttl v4[RESOLVER_ADDRS_MAX];
    struct ares_addr6ttl v6[RESOLVER_ADDRS_MAX];
    int n4 = RESOLVER_ADDRS_MAX, n6 = RESOLVER_ADDRS_MAX;
    if (ares_parse_a_reply(abuf, alen, NULL, v4, &n4) != ARES_SUCCESS)
        n4 = 0;
    if (ares_parse_aaaa_reply(abuf, alen, NULL, v6, &n6) != ARES_SUCCESS)
        n6 = 0;
    for (int i = 0; i < n4 && e->addrs.n < RESOLVER_ADDRS_MAX; i++) {
        struct sockaddr_in *in = (struct sockaddr_in *)&e->addrs.addr[e->addrs.n];
        memset(in, 0, sizeof(e->addrs.addr[0]));
        in->sin_family = AF_INET;
        in->sin_addr = v4[i].ipaddr;
        e->addrs.len[e->addrs.n++] = sizeof(*in);
        *ttl = lower(*ttl, v4[i].ttl);
    }
    for (int i = 0; i < n6 && e->addrs.n < RESOLVER_ADDRS_MAX; i++) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&e->addrs.addr[e->addrs.n];
        memset(in6, 0, sizeof(e->addrs.addr[0]));
        in6->sin6_family = AF_INET6;
        memcpy(&in6->sin6_addr, &v6[i].ip6addr, sizeof(in6->sin6_addr));
        e->addrs.len[e->addrs.n++] = sizeof(*in6);
        *ttl = lower(*ttl, v6[i].ttl);
    }
}

/* One of a name's answers (A or AAAA). Once both are in: its addresses; or, when the
 * answers held a CNAME alone, the name it points to is asked for in turn (nginx's
 * resolver does so); or the first failure. */
static void on_raw(void *arg, int status, int timeouts, unsigned char *abuf, int alen)
{
    (void)timeouts;
    struct res_entry *e = arg;
    struct resolver *r = e->r;
    if (status == ARES_EDESTRUCTION) { /* resolver_free: nobody waits; it frees e */
        if (--e->asked == 0) {
            e->pending = false;
            r->n_pending--;
        }
        return;
    }
    int ttl = e->ttl;
    if (status == ARES_SUCCESS && abuf) {
        take_addresses(e, abuf, alen, &ttl);
        cname_end(abuf, alen, e->cname, sizeof(e->cname), &ttl);
    } else if (!e->fail && status != ARES_ENODATA) {
        e->fail = status;
    }
    e->ttl = ttl;
    if (--e->asked > 0)
        return;
    e->pending = false;
    r->n_pending--;
    if (e->addrs.n == 0 && e->cname[0] && strcasecmp(e->cname, e->follow) != 0 &&
        e->follows < RESOLVER_FOLLOWS_MAX) {
        e->follows++;
        memcpy(e->follow, e->cname, sizeof(e->follow));
        ask(r, e);
        return;
    }
    e->status = e->addrs.n ? 0 : e->fail ? status_of(e->fail) : RESOLVER_ENOTFOUND;
    settle(e, e->ttl);
}

/* e's answer is in: kept for its TTL (or valid=), given to those waiting for it. */
static void settle(struct res_entry *e, int ttl)
{
    struct resolver *r = e->r;
    unsigned keep_s = r->valid_s ? r->valid_s
                      : e->status == 0 ? (unsigned)(ttl < 0 ? 0 : ttl)
                                       : RESOLVER_ERROR_VALID_S;
    e->expires_ms = clock_now_ms() + (int64_t)keep_s * 1000;
    struct resolver_wait *w = e->waiters;
    e->waiters = NULL;
    while (w) {
        struct resolver_wait *next = w->next;
        notify(w, e->status, &e->addrs);
        w = next;
    }
    /* Only an answer, or a name that does not exist, is kept: a timeout, a refusal or a
     * failure of the servers is asked again by the next request. */
    if (e->status != 0 && e->status != RESOLVER_ENOTFOUND) {
        entry_unlink(r, e);
        free(e);
    }
}

/* Room for one more entry: the expired ones go, when the cache is full. */
static bool make_room(struct resolver *r, int64_t now)
{
    if (r->n_entries < RESOLVER_ENTRIES_MAX)
        return true;
    for (struct res_entry **p = &r->entries; *p;) {
        struct res_entry *e = *p;
        if (!e->pending && e->expires_ms <= now) {
            *p = e->next;
            r->n_entries--;
            free(e);
        } else {
            p = &e->next;
        }
    }
    return r->n_entries < RESOLVER_ENTRIES_MAX;
}

int resolver_lookup(struct resolver *r, const char *name, struct lf_group *g,
                    struct resolver_wait *w)
{
    w->fd = w->notify_fd = -1;
    w->done = false;
    w->next = NULL;
    w->addrs.n = 0;
    w->status = RESOLVER_EFAIL;
    if (strlen(name) >= RESOLVER_NAME_MAX) {
        w->status = RESOLVER_ENOTFOUND;
        return 1;
    }
    int64_t now = clock_now_ms();
    pthread_mutex_lock(&r->lock);
    r->group = g;
    if (r->n_pending) { /* c-ares's timeouts, due or not */
        ares_process_fd(r->ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
        reconcile(r);
    }
    struct res_entry *e = r->entries, **prev = &r->entries;
    while (e && strcasecmp(e->name, name) != 0) {
        prev = &e->next;
        e = e->next;
    }
    if (e && !e->pending && e->expires_ms <= now) { /* expired: asked again */
        *prev = e->next;
        r->n_entries--;
        free(e);
        e = NULL;
    }
    if (e && !e->pending) {
        w->status = e->status;
        w->addrs = e->addrs;
        r->group = NULL;
        pthread_mutex_unlock(&r->lock);
        return 1;
    }
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) < 0)
        goto fail;
    if (!e) {
        if (!make_room(r, now) || !(e = calloc(1, sizeof(*e)))) {
            close(pair[0]);
            close(pair[1]);
            goto fail;
        }
        e->r = r;
        snprintf(e->name, sizeof(e->name), "%s", name);
        memcpy(e->follow, e->name, sizeof(e->follow));
        e->ttl = -1;
        e->next = r->entries;
        r->entries = e;
        r->n_entries++;
        w->fd = pair[0];
        w->notify_fd = pair[1];
        w->next = e->waiters;
        e->waiters = w;
        ask(r, e);
        reconcile(r);
    } else {
        w->fd = pair[0];
        w->notify_fd = pair[1];
        w->next = e->waiters;
        e->waiters = w;
    }
    /* (An answer may have come at once: w->done, and its fd is readable.) */
    r->group = NULL;
    pthread_mutex_unlock(&r->lock);
    return 0;
fail:
    r->group = NULL;
    pthread_mutex_unlock(&r->lock);
    log_error("resolver: cannot ask for \"%s\": %s", name, strerror(errno));
    return -1;
}

static void wait_unlink(struct resolver *r, struct resolver_wait *w)
{
    for (struct res_entry *e = r->entries; e; e = e->next) {
        for (struct resolver_wait **p = &e->waiters; *p; p = &(*p)->next) {
            if (*p == w) {
                *p = w->next;
                return;
            }
        }
    }
}

bool resolver_take(struct resolver *r, struct resolver_wait *w)
{
    pthread_mutex_lock(&r->lock);
    bool done = w->done;
    if (done && w->notify_fd >= 0) {
        close(w->notify_fd);
        w->notify_fd = -1;
    }
    pthread_mutex_unlock(&r->lock);
    return done;
}

void resolver_cancel(struct resolver *r, struct resolver_wait *w)
{
    pthread_mutex_lock(&r->lock);
    if (!w->done)
        wait_unlink(r, w);
    if (w->notify_fd >= 0)
        close(w->notify_fd);
    w->notify_fd = -1;
    w->done = true;
    if (r->n_pending) {
        ares_process_fd(r->ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
        reconcile(r);
    }
    pthread_mutex_unlock(&r->lock);
}

/* --- making one --------------------------------------------------------------------------- */

/* "IP", "IP:PORT", "[IPv6]", "[IPv6]:PORT" → c-ares's "IP:PORT" / "[IPv6]:PORT". */
static int server_text(const char *s, char *out, size_t cap)
{
    char host[128];
    const char *port = "53";
    if (s[0] == '[') {
        const char *end = strchr(s, ']');
        if (!end || (size_t)(end - s - 1) >= sizeof(host))
            return -1;
        memcpy(host, s + 1, (size_t)(end - s - 1));
        host[end - s - 1] = '\0';
        if (end[1] == ':')
            port = end + 2;
        else if (end[1])
            return -1;
    } else {
        const char *colon = strchr(s, ':');
        size_t hl = colon && !strchr(colon + 1, ':') ? (size_t)(colon - s) : strlen(s);
        if (hl >= sizeof(host))
            return -1;
        memcpy(host, s, hl);
        host[hl] = '\0';
        if (hl < strlen(s))
            port = s + hl + 1;
    }
    char *end;
    long p = strtol(port, &end, 10);
    if (!*port || *end || p < 1 || p > 65535)
        return -1;
    unsigned char buf[16];
    if (inet_pton(AF_INET, host, buf) == 1)
        return snprintf(out, cap, "%s:%ld", host, p) < (int)cap ? 0 : -1;
    if (inet_pton(AF_INET6, host, buf) == 1)
        return snprintf(out, cap, "[%s]:%ld", host, p) < (int)cap ? 0 : -1;
    /* A name: resolved now, once (nginx resolves its resolvers' names at load). */
    struct addrinfo hints = {.ai_socktype = SOCK_DGRAM}, *res;
    if (getaddrinfo(host, NULL, &hints, &res) != 0)
        return -1;
    char ip[INET6_ADDRSTRLEN] = "";
    const struct sockaddr *sa = res->ai_addr;
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, ip,
                  sizeof(ip));
    else
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, ip,
                  sizeof(ip));
    int fam = sa->sa_family;
    freeaddrinfo(res);
    int n = snprintf(out, cap, fam == AF_INET6 ? "[%s]:%ld" : "%s:%ld", ip, p);
    return n > 0 && n < (int)cap ? 0 : -1;
}

static pthread_once_t ares_once = PTHREAD_ONCE_INIT;
static int ares_init_rc;

static void ares_start(void)
{
    ares_init_rc = ares_library_init(ARES_LIB_INIT_ALL);
}

struct resolver *resolver_create(const char *const *servers, unsigned n, unsigned valid_s,
                                 bool ipv4, bool ipv6, char *msg, size_t len)
{
    pthread_once(&ares_once, ares_start);
    if (ares_init_rc != ARES_SUCCESS)
        return snprintf(msg, len, "c-ares: %s", ares_strerror(ares_init_rc)), NULL;
    char csv[2048] = "";
    size_t used = 0;
    for (unsigned i = 0; i < n; i++) {
        char one[160];
        if (server_text(servers[i], one, sizeof(one)) < 0)
            return snprintf(msg, len, "invalid address \"%s\"", servers[i]), NULL;
        int w = snprintf(csv + used, sizeof(csv) - used, "%s%s", used ? "," : "", one);
        if (w < 0 || (size_t)w >= sizeof(csv) - used)
            return snprintf(msg, len, "too many addresses"), NULL;
        used += (size_t)w;
    }
    struct resolver *r = calloc(1, sizeof(*r));
    if (!r)
        return snprintf(msg, len, "out of memory"), NULL;
    pthread_mutex_init(&r->lock, NULL);
    r->tick_fd = -1;
    r->valid_s = valid_s;
    r->family = ipv4 && ipv6 ? AF_UNSPEC : ipv6 ? AF_INET6 : AF_INET;
    /* DNS only (no hosts file, no search list), as nginx's resolver; a server's SERVFAIL
     * or REFUSED is its answer (nginx's), not a reason to ask the next one. */
    struct ares_options o = {.flags = ARES_FLAG_NOSEARCH | ARES_FLAG_NOALIASES |
                                      ARES_FLAG_NOCHECKRESP,
                             .timeout = RESOLVER_TRY_MS,
                             .tries = 2,
                             .lookups = (char *)"b",
                             .sock_state_cb = NULL};
    int mask = ARES_OPT_FLAGS | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES | ARES_OPT_LOOKUPS;
    int rc = ares_init_options(&r->ch, &o, mask);
    if (rc == ARES_SUCCESS)
        rc = ares_set_servers_ports_csv(r->ch, csv);
    if (rc != ARES_SUCCESS) {
        snprintf(msg, len, "c-ares: %s", ares_strerror(rc));
        if (r->ch)
            ares_destroy(r->ch);
        pthread_mutex_destroy(&r->lock);
        free(r);
        return NULL;
    }
    ares_set_socket_callback(r->ch, on_socket, r);
    return r;
}

void resolver_free(struct resolver *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->lock);
    pthread_mutex_lock(&socks.lock);
    for (struct res_sock *s = socks.all; s; s = s->next) {
        if (s->r == r) {
            s->r = NULL;
            s->registered = false;
            s->retired_ms = clock_now_ms();
        }
    }
    pthread_mutex_unlock(&socks.lock);
    ares_destroy(r->ch); /* (pending queries end with ARES_EDESTRUCTION) */
    if (r->tick_fd >= 0)
        close(r->tick_fd); /* (its record is dead: an event already fetched does nothing) */
    pthread_mutex_unlock(&r->lock);
    while (atomic_load(&r->busy)) /* an event that found r before it went dead */
        sched_yield();
    struct res_entry *e = r->entries;
    while (e) {
        struct res_entry *next = e->next;
        free(e);
        e = next;
    }
    pthread_mutex_destroy(&r->lock);
    free(r);
}

#define RESOLVER_SERVERS_MAX 16

struct resolver *resolver_read(const struct conf_node *n, char *msg, size_t len)
{
    const char *servers[RESOLVER_SERVERS_MAX];
    unsigned n_servers = 0, valid_s = 0;
    bool ipv4 = true, ipv6 = true;
    for (unsigned i = 0; i < n->n_args; i++) {
        const char *a = n->args[i];
        if (strncmp(a, "valid=", 6) == 0) {
            unsigned ms;
            if (config_parse_duration_ms(a + 6, &ms) < 0 || ms < 1000)
                return snprintf(msg, len, "invalid parameter \"%s\"", a), NULL;
            valid_s = ms / 1000;
        } else if (strncmp(a, "ipv4=", 5) == 0 || strncmp(a, "ipv6=", 5) == 0) {
            bool on = strcmp(a + 5, "on") == 0;
            if (!on && strcmp(a + 5, "off") != 0)
                return snprintf(msg, len, "invalid parameter \"%s\"", a), NULL;
            *(a[3] == '4' ? &ipv4 : &ipv6) = on;
        } else if (strncmp(a, "status_zone=", 12) == 0) {
            continue; /* (accepted: no zone statistics) */
        } else if (n_servers == RESOLVER_SERVERS_MAX) {
            return snprintf(msg, len, "too many addresses (%d at most)", RESOLVER_SERVERS_MAX),
                   NULL;
        } else {
            servers[n_servers++] = a;
        }
    }
    if (!ipv4 && !ipv6)
        return snprintf(msg, len, "\"ipv4\" and \"ipv6\" cannot both be \"off\""), NULL;
    if (n_servers == 0)
        return snprintf(msg, len, "no address"), NULL;
    char why[256];
    struct resolver *r = resolver_create(servers, n_servers, valid_s, ipv4, ipv6, why,
                                         sizeof(why));
    if (!r)
        snprintf(msg, len, "%s", why);
    return r;
}
