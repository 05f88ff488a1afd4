/* upstream.c — `upstream` blocks and the choice of a server (see upstream.h). */
#include "upstream.h"
#include "upstream_tls.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/un.h>
#include <zlib.h>

#define UPSTREAM_HASH_TRIES 20   /* then round-robin, as nginx's */
#define UPSTREAM_CHASH_POINTS 160 /* points of the ring a unit of weight (nginx's) */

/* --- addresses ---------------------------------------------------------------------------- */

static int unix_address(struct upstream_server *s, const char *path, char *msg, size_t len)
{
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    if (path[0] != '/' || strlen(path) >= sizeof(un.sun_path))
        return snprintf(msg, len, "\"unix:%s\": an absolute path of at most %zu bytes", path,
                        sizeof(un.sun_path) - 1), -1;
    memcpy(un.sun_path, path, strlen(path) + 1);
    memcpy(&s->addr, &un, sizeof(un));
    s->addr_len = (socklen_t)sizeof(un);
    return 0;
}

/* HOST[:PORT] or [V6][:PORT] into host and port (80 when none). */
static int split_host(const char *text, char *host, size_t cap, char *port, size_t pcap)
{
    const char *p;
    size_t hl;
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (!close || (close[1] && close[1] != ':'))
            return -1;
        hl = (size_t)(close - text - 1);
        if (hl >= cap)
            return -1;
        memcpy(host, text + 1, hl);
        p = close[1] ? close + 2 : NULL;
    } else {
        const char *colon = strrchr(text, ':');
        if (colon && strchr(text, ':') != colon)
            return -1; /* a bare IPv6 address needs its brackets */
        hl = colon ? (size_t)(colon - text) : strlen(text);
        if (hl == 0 || hl >= cap)
            return -1;
        memcpy(host, text, hl);
        p = colon ? colon + 1 : NULL;
    }
    host[hl] = '\0';
    const char *ps = p ? p : "80";
    char *end;
    long v = strtol(ps, &end, 10);
    if (!*ps || *end || v < 1 || v > 65535 || strlen(ps) >= pcap)
        return -1;
    snprintf(port, pcap, "%ld", v);
    return 0;
}

/* The addresses of text: one, or a resolved name's every one. Adds servers to u from
 * proto (its parameters); returns how many, or -1 with msg. */
static int add_addresses(struct upstream *u, const struct upstream_server *proto,
                         const char *text, char *msg, size_t len)
{
    if (strncmp(text, "unix:", 5) == 0) {
        if (u->n_servers == UPSTREAM_SERVERS_MAX)
            return snprintf(msg, len, "at most %d servers", UPSTREAM_SERVERS_MAX), -1;
        struct upstream_server *s = &u->servers[u->n_servers];
        *s = *proto;
        if (unix_address(s, text + 5, msg, len) < 0)
            return -1;
        snprintf(s->text, sizeof(s->text), "%s", text);
        u->n_servers++;
        return 1;
    }
    char host[256], port[8];
    if (split_host(text, host, sizeof(host), port, sizeof(port)) < 0)
        return snprintf(msg, len, "invalid address \"%s\"", text), -1;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_ADDRCONFIG}, *res;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0)
        return snprintf(msg, len, "host \"%s\" not found: %s", host, gai_strerror(rc)), -1;
    int added = 0;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        if (a->ai_family != AF_INET && a->ai_family != AF_INET6)
            continue;
        if (u->n_servers == UPSTREAM_SERVERS_MAX) {
            freeaddrinfo(res);
            return snprintf(msg, len, "at most %d servers", UPSTREAM_SERVERS_MAX), -1;
        }
        struct upstream_server *s = &u->servers[u->n_servers++];
        *s = *proto;
        memcpy(&s->addr, a->ai_addr, a->ai_addrlen);
        s->addr_len = a->ai_addrlen;
        char ip[INET6_ADDRSTRLEN] = "?";
        const void *in = a->ai_family == AF_INET
                             ? (const void *)&((struct sockaddr_in *)a->ai_addr)->sin_addr
                             : (const void *)&((struct sockaddr_in6 *)a->ai_addr)->sin6_addr;
        inet_ntop(a->ai_family, in, ip, sizeof(ip));
        snprintf(s->text, sizeof(s->text), a->ai_family == AF_INET6 ? "[%s]:%s" : "%s:%s", ip,
                 port);
        added++;
    }
    freeaddrinfo(res);
    if (!added)
        return snprintf(msg, len, "host \"%s\" has no IPv4 or IPv6 address", host), -1;
    return added;
}

/* --- the block ------------------------------------------------------------------------------ */

static bool param(const char *arg, const char *name, const char **value)
{
    size_t n = strlen(name);
    if (strncmp(arg, name, n) != 0 || arg[n] != '=')
        return false;
    *value = arg + n + 1;
    return true;
}

/* Parameters of NGINX Plus's (or of nginx's after 1.22) that nginx 1.22 refuses. */
static bool plus_only(const char *a)
{
    static const char *const words[] = {"resolve", "drain", NULL};
    static const char *const valued[] = {"service", "slow_start", "route", NULL};
    const char *v;
    for (int i = 0; words[i]; i++)
        if (strcmp(a, words[i]) == 0)
            return true;
    for (int i = 0; valued[i]; i++)
        if (param(a, valued[i], &v))
            return true;
    return false;
}

static int read_server(struct upstream *u, const struct conf_node *n, struct conf_reader *r)
{
    struct upstream_server proto = {.weight = 1, .max_fails = 1, .fail_timeout_ms = 10000,
                                    .line = n->line};
    if (n->n_args < 1)
        return conf_error(r, n->line, "server: usage: server ADDRESS [weight=N] "
                          "[max_fails=N] [fail_timeout=TIME] [max_conns=N] [backup] [down];");
    snprintf(proto.written, sizeof(proto.written), "%s", n->args[0]);
    for (unsigned i = 1; i < n->n_args; i++) {
        const char *a = n->args[i], *v;
        uint64_t x;
        unsigned ms;
        if (param(a, "weight", &v)) {
            if (config_parse_count(v, &x) < 0 || x < 1 || x > 1000)
                return conf_error(r, n->line, "server: weight=%s: 1 to 1000", v);
            proto.weight = (unsigned)x;
        } else if (param(a, "max_fails", &v)) {
            if (config_parse_count(v, &x) < 0 || x > 1000)
                return conf_error(r, n->line, "server: max_fails=%s: 0 to 1000", v);
            proto.max_fails = (unsigned)x;
        } else if (param(a, "fail_timeout", &v)) {
            if (config_parse_duration_ms(v, &ms) < 0 && strcmp(v, "0") != 0)
                return conf_error(r, n->line, "server: fail_timeout=%s: a time", v);
            if (strcmp(v, "0") == 0)
                ms = 0; /* never out, as max_fails=0 (nginx's out for under a second) */
            proto.fail_timeout_ms = ms;
        } else if (param(a, "max_conns", &v)) {
            if (config_parse_count(v, &x) < 0 || x > 1000000)
                return conf_error(r, n->line, "server: max_conns=%s: 0 to 1000000", v);
            proto.max_conns = (unsigned)x;
        } else if (strcmp(a, "backup") == 0) {
            if (u->balance != UPSTREAM_ROUND_ROBIN && u->balance != UPSTREAM_LEAST_CONN)
                return conf_error(r, n->line, "server: balancing method does not support "
                                  "parameter \"backup\"");
            proto.backup = true;
        } else if (strcmp(a, "down") == 0) {
            proto.down = true;
        } else if (plus_only(a)) {
            return conf_error(r, n->line, "server: invalid parameter \"%s\" (NGINX Plus's: "
                              "open-source nginx 1.22 refuses it too)", a);
        } else {
            return conf_error(r, n->line, "server: unknown parameter \"%s\"", a);
        }
    }
    char msg[512];
    if (add_addresses(u, &proto, n->args[0], msg, sizeof(msg)) < 0)
        return conf_error(r, n->line, "server: %s", msg);
    return 0;
}

/* The primaries in nginx's smooth weighted order: each step every server gains its
 * weight, the richest is chosen and pays the total. Weights 5, 1, 1 give A A B A C A A. */
static int build_schedule(struct upstream *u, struct conf_reader *r)
{
    long current[UPSTREAM_SERVERS_MAX] = {0};
    long total = 0;
    for (unsigned i = 0; i < u->n_servers; i++)
        if (!u->servers[i].backup)
            total += u->servers[i].weight;
    if (total > UPSTREAM_SCHEDULE_MAX)
        return conf_error(r, u->line, "upstream %s: the weights of its servers add up to "
                          "%ld, more than %d", u->name, total, UPSTREAM_SCHEDULE_MAX);
    u->n_schedule = 0;
    u->total_weight = (unsigned)total;
    for (long step = 0; step < total; step++) {
        int best = -1;
        for (unsigned i = 0; i < u->n_servers; i++) {
            if (u->servers[i].backup)
                continue;
            current[i] += u->servers[i].weight;
            if (best < 0 || current[i] > current[best])
                best = (int)i;
        }
        current[best] -= total;
        u->schedule[u->n_schedule++] = (uint8_t)best;
    }
    return 0;
}

static int point_order(const void *a, const void *b)
{
    uint32_t x = ((const struct upstream_point *)a)->hash;
    uint32_t y = ((const struct upstream_point *)b)->hash;
    return x < y ? -1 : x > y;
}

/* `hash ... consistent`'s ring, as nginx's (Cache::Memcached::Fast's): for each primary,
 * weight * 160 points, each the CRC-32 of HOST, a NUL, PORT (as the server was written;
 * unix:PATH is the path, no port) and the previous point's four bytes (little-endian),
 * sorted, a hash taken twice kept once. */
static int build_ring(struct upstream *u, struct conf_reader *r)
{
    u->points = calloc(u->total_weight * UPSTREAM_CHASH_POINTS + 1, sizeof(*u->points));
    if (!u->points)
        return conf_error(r, u->line, "upstream %s: out of memory", u->name);
    u->n_points = 0;
    for (unsigned i = 0; i < u->n_servers; i++) {
        const struct upstream_server *s = &u->servers[i];
        if (s->backup)
            continue;
        const char *w = s->written, *host = w, *port = "";
        size_t len = strlen(w), host_len = len, port_len = 0;
        if (strncasecmp(w, "unix:", 5) == 0) {
            host = w + 5;
            host_len = len - 5;
        } else {
            for (size_t j = 0; j < len; j++) {
                char ch = w[len - j - 1];
                if (ch == ':') {
                    host_len = len - j - 1;
                    port = w + len - j;
                    port_len = j;
                    break;
                }
                if (ch < '0' || ch > '9')
                    break;
            }
        }
        uLong base = crc32(0L, Z_NULL, 0);
        base = crc32(base, (const Bytef *)host, (uInt)host_len);
        base = crc32(base, (const Bytef *)"", 1);
        base = crc32(base, (const Bytef *)port, (uInt)port_len);
        uint32_t prev = 0;
        for (unsigned j = 0; j < s->weight * UPSTREAM_CHASH_POINTS; j++) {
            unsigned char b[4] = {(unsigned char)prev, (unsigned char)(prev >> 8),
                                  (unsigned char)(prev >> 16), (unsigned char)(prev >> 24)};
            uint32_t h = (uint32_t)crc32(base, b, 4);
            u->points[u->n_points++] = (struct upstream_point){h, (uint16_t)i};
            prev = h;
        }
    }
    qsort(u->points, u->n_points, sizeof(*u->points), point_order);
    unsigned k = 0;
    for (unsigned j = 1; j < u->n_points; j++)
        if (u->points[k].hash != u->points[j].hash)
            u->points[++k] = u->points[j];
    u->n_points = u->n_points ? k + 1 : 0;
    return 0;
}

static int read_balance(struct upstream *u, const struct conf_node *n, struct conf_reader *r,
                        unsigned *balance_line)
{
    if (*balance_line)
        return conf_error(r, n->line, "\"%s\": the balancing method is set already "
                          "(line %u)", n->name, *balance_line);
    *balance_line = n->line;
    for (unsigned i = 0; i < u->n_servers; i++)
        if (u->servers[i].backup && strcmp(n->name, "least_conn") != 0)
            return conf_error(r, n->line, "\"%s\": balancing method does not support the "
                              "backup server of line %u", n->name, u->servers[i].line);
    if (strcmp(n->name, "least_conn") == 0 && n->n_args == 0) {
        u->balance = UPSTREAM_LEAST_CONN;
    } else if (strcmp(n->name, "ip_hash") == 0 && n->n_args == 0) {
        u->balance = UPSTREAM_IP_HASH;
    } else if (strcmp(n->name, "hash") == 0 && n->n_args >= 1 && n->n_args <= 2) {
        if (n->n_args == 2 && strcmp(n->args[1], "consistent") != 0)
            return conf_error(r, n->line, "hash: invalid parameter \"%s\" (consistent)",
                              n->args[1]);
        char why[256];
        if (vars_compile(n->args[0], VARS_HEADER, &u->hash_key, why, sizeof(why)) < 0)
            return conf_error(r, n->line, "hash: %s", why);
        u->hash_consistent = n->n_args == 2;
        u->balance = UPSTREAM_HASH;
    } else if (strcmp(n->name, "random") == 0 && n->n_args <= 2) {
        if ((n->n_args >= 1 && strcmp(n->args[0], "two") != 0) ||
            (n->n_args == 2 && strcmp(n->args[1], "least_conn") != 0))
            return conf_error(r, n->line, "random: usage: random [two [least_conn]]");
        u->random_two = n->n_args >= 1;
        u->balance = UPSTREAM_RANDOM;
    } else {
        return conf_error(r, n->line, "%s: invalid number of arguments", n->name);
    }
    return 0;
}

static bool balance_directive(const char *name)
{
    return strcmp(name, "least_conn") == 0 || strcmp(name, "ip_hash") == 0 ||
           strcmp(name, "hash") == 0 || strcmp(name, "random") == 0;
}

static void read_duration(const struct conf_node *n, struct conf_reader *r, unsigned *out)
{
    unsigned ms;
    if (n->n_args != 1 || config_parse_duration_ms(n->args[0], &ms) < 0 || ms == 0)
        conf_error(r, n->line, "%s: a time, more than 0", n->name);
    else
        *out = ms;
}

int upstream_read(struct upstream *u, const struct conf_node *block, struct conf_reader *r)
{
    memset(u, 0, sizeof(*u));
    pthread_mutex_init(&u->idle_lock, NULL);
    u->line = block->line;
    if (block->n_args != 1 || strlen(block->args[0]) >= sizeof(u->name))
        return conf_error(r, block->line, "upstream: usage: upstream NAME { ... }");
    snprintf(u->name, sizeof(u->name), "%s", block->args[0]);
    unsigned before = r->errors;
    bool keepalive = false;
    unsigned balance_line = 0;
    u->keepalive_requests = 1000;
    u->keepalive_timeout_ms = 60000;
    u->keepalive_time_ms = 3600000;
    for (const struct conf_node *n = block->children; n; n = n->next) {
        uint64_t x = 0;
        if (strcmp(n->name, "server") == 0 && !n->is_block) {
            read_server(u, n, r);
        } else if (balance_directive(n->name) && !n->is_block) {
            read_balance(u, n, r, &balance_line);
        } else if (strcmp(n->name, "keepalive_requests") == 0 && n->n_args == 1 &&
                   !n->is_block) {
            if (config_parse_count(n->args[0], &x) < 0 || x < 1 || x > 100000000)
                conf_error(r, n->line, "keepalive_requests: %s: a count from 1", n->args[0]);
            else
                u->keepalive_requests = (unsigned)x;
        } else if (strcmp(n->name, "keepalive_timeout") == 0 && !n->is_block) {
            read_duration(n, r, &u->keepalive_timeout_ms);
        } else if (strcmp(n->name, "keepalive_time") == 0 && !n->is_block) {
            read_duration(n, r, &u->keepalive_time_ms);
        } else if (strcmp(n->name, "zone") == 0 && n->n_args >= 1 && n->n_args <= 2 &&
                   !n->is_block) {
            /* accepted: the set's live figures are shared by every thread already */
        } else if (strcmp(n->name, "keepalive") == 0 && n->n_args == 1 && !n->is_block) {
            if (keepalive)
                conf_error(r, n->line, "\"keepalive\" directive is duplicate");
            else if (config_parse_count(n->args[0], &x) < 0 || x > 100000)
                conf_error(r, n->line, "keepalive: %s: a count up to 100000", n->args[0]);
            else
                u->keepalive = (unsigned)x;
            keepalive = true;
        } else {
            conf_error(r, n->line, "upstream %s: unknown directive \"%s\" (server, keepalive, "
                       "keepalive_requests, keepalive_timeout, keepalive_time, least_conn, "
                       "ip_hash, hash, random, zone)", u->name, n->name);
        }
    }
    if (r->errors == before && u->n_servers == 0)
        conf_error(r, block->line, "upstream %s: no server", u->name);
    if (r->errors == before)
        build_schedule(u, r);
    if (r->errors == before && u->balance == UPSTREAM_HASH && u->hash_consistent)
        build_ring(u, r);
    if (r->errors > before) {
        upstream_release(u);
        return -1;
    }
    return 0;
}

void upstream_release(struct upstream *u)
{
    for (unsigned i = 0; i < u->n_servers; i++)
        upstream_tls_session_free(&u->servers[i].tls_session);
    vars_free(u->hash_key);
    u->hash_key = NULL;
    free(u->points);
    u->points = NULL;
    u->n_points = 0;
}

int upstream_from_host(struct upstream *u, const char *hostport, unsigned line, char *msg,
                       size_t len)
{
    memset(u, 0, sizeof(*u));
    pthread_mutex_init(&u->idle_lock, NULL);
    u->line = line;
    u->keepalive_requests = 1000;
    u->keepalive_timeout_ms = 60000;
    u->keepalive_time_ms = 3600000;
    struct upstream_server proto = {.weight = 1, .max_fails = 1, .fail_timeout_ms = 10000,
                                    .line = line};
    snprintf(proto.written, sizeof(proto.written), "%s", hostport);
    if (add_addresses(u, &proto, hostport, msg, len) < 0)
        return -1;
    struct conf_reader r = {.file = "", .owner = "", .err = msg, .err_len = len};
    return build_schedule(u, &r);
}

int upstream_from_addrs(struct upstream *u, const struct sockaddr_storage *addrs,
                        const socklen_t *len, unsigned n, unsigned port)
{
    memset(u, 0, sizeof(*u));
    pthread_mutex_init(&u->idle_lock, NULL);
    u->keepalive_requests = 1000;
    u->keepalive_timeout_ms = 60000;
    u->keepalive_time_ms = 3600000;
    for (unsigned i = 0; i < n && u->n_servers < UPSTREAM_SERVERS_MAX; i++) {
        int fam = addrs[i].ss_family;
        if (fam != AF_INET && fam != AF_INET6 && fam != AF_UNIX)
            continue;
        struct upstream_server *s = &u->servers[u->n_servers++];
        *s = (struct upstream_server){.weight = 1, .max_fails = 1, .fail_timeout_ms = 10000};
        memcpy(&s->addr, &addrs[i], len[i]);
        s->addr_len = len[i];
        char ip[INET6_ADDRSTRLEN] = "?";
        if (fam == AF_UNIX) {
            snprintf(s->text, sizeof(s->text), "unix:%.*s", (int)sizeof(s->text) - 6,
                     ((const struct sockaddr_un *)&s->addr)->sun_path);
            memcpy(s->written, s->text, sizeof(s->written));
            continue;
        }
        if (fam == AF_INET) {
            struct sockaddr_in *in = (struct sockaddr_in *)&s->addr;
            in->sin_port = htons((uint16_t)port);
            inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
        } else {
            struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&s->addr;
            in6->sin6_port = htons((uint16_t)port);
            inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
        }
        snprintf(s->text, sizeof(s->text), fam == AF_INET6 ? "[%s]:%u" : "%s:%u", ip, port);
        memcpy(s->written, s->text, sizeof(s->written));
    }
    if (u->n_servers == 0)
        return -1;
    char msg[128];
    struct conf_reader r = {.file = "", .owner = "", .err = msg, .err_len = sizeof(msg)};
    return build_schedule(u, &r);
}

/* nginx's ngx_parse_url, as its fastcgi_pass with variables calls it: no URI part, no
 * default port, names not resolved. */
static int addr_unix(const char *text, size_t len, struct upstream_addr *a, const char **err)
{
    struct sockaddr_un *un = (struct sockaddr_un *)&a->addr;
    const char *path = text + 5;
    size_t plen = len - 5;
    if (plen == 0)
        return *err = "no path in the unix domain socket", -1;
    if (plen >= sizeof(un->sun_path) || memchr(path, '\0', plen))
        return *err = "too long path in the unix domain socket", -1;
    un->sun_family = AF_UNIX;
    memcpy(un->sun_path, path, plen);
    un->sun_path[plen] = '\0';
    a->addr_len = (socklen_t)sizeof(*un);
    a->kind = UPSTREAM_ADDR_UNIX;
    a->host = path;
    a->host_len = plen;
    return 0;
}

/* PORT: 1..65535, digits only (ngx_atoi). */
static int addr_port(const char *p, size_t len, unsigned *port)
{
    unsigned long v = 0;
    if (len == 0)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9' || v > 65535)
            return -1;
        v = v * 10 + (unsigned)(p[i] - '0');
    }
    if (v < 1 || v > 65535)
        return -1;
    *port = (unsigned)v;
    return 0;
}

int upstream_addr_parse(const char *text, size_t len, struct upstream_addr *a, const char **err)
{
    memset(a, 0, sizeof(*a));
    *err = NULL;
    if (len >= 5 && strncasecmp(text, "unix:", 5) == 0)
        return addr_unix(text, len, a, err);
    const char *end = text + len, *host = text, *host_end, *port = NULL;
    if (memchr(text, '/', len) || memchr(text, '?', len))
        return *err = "invalid host", -1;
    char ip[INET6_ADDRSTRLEN + 1];
    if (len && text[0] == '[') {
        const char *close = memchr(text, ']', len);
        if (!close)
            return *err = "invalid host", -1;
        if (close + 1 < end && close[1] != ':')
            return *err = "invalid host", -1;
        port = close + 1 < end ? close + 2 : NULL;
        host_end = close + 1;
        size_t v6 = (size_t)(close - text - 1);
        if (v6 == 0)
            return *err = "no host", -1;
        if (port && addr_port(port, (size_t)(end - port), &a->port) < 0)
            return *err = "invalid port", -1;
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&a->addr;
        if (v6 >= sizeof(ip))
            return *err = "invalid IPv6 address", -1;
        memcpy(ip, text + 1, v6);
        ip[v6] = '\0';
        if (inet_pton(AF_INET6, ip, &in6->sin6_addr) != 1)
            return *err = "invalid IPv6 address", -1;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)a->port);
        a->addr_len = sizeof(*in6);
        a->kind = UPSTREAM_ADDR_IP;
    } else {
        const char *colon = memchr(text, ':', len);
        host_end = colon ? colon : end;
        if (colon && addr_port(colon + 1, (size_t)(end - colon - 1), &a->port) < 0)
            return *err = "invalid port", -1;
        if (host_end == host)
            return *err = "no host", -1;
        struct sockaddr_in *in = (struct sockaddr_in *)&a->addr;
        size_t hl = (size_t)(host_end - host);
        a->kind = UPSTREAM_ADDR_NAME;
        if (hl < sizeof(ip)) {
            memcpy(ip, host, hl);
            ip[hl] = '\0';
            if (inet_pton(AF_INET, ip, &in->sin_addr) == 1) {
                in->sin_family = AF_INET;
                in->sin_port = htons((uint16_t)a->port);
                a->addr_len = sizeof(*in);
                a->kind = UPSTREAM_ADDR_IP;
            }
        }
    }
    a->host = host;
    a->host_len = (size_t)(host_end - host);
    return 0;
}

/* --- choosing --------------------------------------------------------------------------- */

bool upstream_server_out(const struct upstream_server *s, int64_t now_ms)
{
    long long until = atomic_load_explicit(&s->out_until_ms, memory_order_relaxed);
    return s->down || (until != 0 && now_ms < until);
}

/* May s take this attempt? A server whose time out has passed takes one attempt: the
 * thread that moves its time on gets it, the others see it out still. */
static bool available(struct upstream_server *s, int64_t now_ms)
{
    if (s->down)
        return false;
    if (s->max_conns &&
        atomic_load_explicit(&s->active, memory_order_relaxed) >= s->max_conns)
        return false;
    long long until = atomic_load_explicit(&s->out_until_ms, memory_order_relaxed);
    if (until == 0)
        return true;
    if (now_ms < until)
        return false;
    return atomic_compare_exchange_strong(&s->out_until_ms, &until,
                                          now_ms + (long long)s->fail_timeout_ms);
}

static struct upstream_server *take(struct upstream_server *s)
{
    atomic_fetch_add_explicit(&s->active, 1, memory_order_relaxed);
    return s;
}

/* Does a carry less load than b, for their weights? */
static bool lighter(const struct upstream_server *a, const struct upstream_server *b)
{
    unsigned long la = atomic_load_explicit(&a->active, memory_order_relaxed);
    unsigned long lb = atomic_load_explicit(&b->active, memory_order_relaxed);
    return la * b->weight < lb * a->weight;
}

/* Might s be chosen now (not down, not out, under max_conns)? Without claiming a trial. */
static bool eligible(const struct upstream_server *s, int64_t now_ms)
{
    return !upstream_server_out(s, now_ms) &&
           !(s->max_conns &&
             atomic_load_explicit(&s->active, memory_order_relaxed) >= s->max_conns);
}

/* The primary that w (below the primaries' total weight) falls on: the primaries in
 * order, each taking as many as its weight (nginx's walk). */
static unsigned by_weight(const struct upstream *u, uint64_t w)
{
    unsigned last = 0;
    for (unsigned i = 0; i < u->n_servers; i++) {
        if (u->servers[i].backup)
            continue;
        if (w < u->servers[i].weight)
            return i;
        w -= u->servers[i].weight;
        last = i;
    }
    return last;
}

/* ip_hash and hash (not consistent): nginx's values, hashed again while the server they
 * name may not be tried. UINT_MAX: give up (round-robin then). */
static unsigned hashed(struct upstream *u, struct upstream_choice *ch, int64_t now_ms,
                       uint64_t tried)
{
    bool ip = u->balance == UPSTREAM_IP_HASH;
    if (!ch->begun) {
        ch->begun = true;
        ch->hash = ip ? 89 : 0;
        ch->rehash = ch->tries = 0;
    }
    while (ch->tries <= UPSTREAM_HASH_TRIES) {
        if (ip) {
            for (size_t k = 0; k < ch->key_len; k++)
                ch->hash = (ch->hash * 113 + ch->key[k]) % 6271;
        } else { /* Cache::Memcached's: ((crc32([REHASH] KEY) >> 16) & 0x7fff) + previous */
            uLong c = crc32(0L, Z_NULL, 0);
            if (ch->rehash > 0) {
                char num[16];
                int n = snprintf(num, sizeof(num), "%u", ch->rehash);
                c = crc32(c, (const Bytef *)num, (uInt)n);
            }
            c = crc32(c, ch->key, (uInt)ch->key_len);
            ch->hash += (c >> 16) & 0x7fff;
            ch->rehash++;
        }
        unsigned i = by_weight(u, ch->hash % u->total_weight);
        if (!(tried >> i & 1) && available(&u->servers[i], now_ms))
            return i;
        ch->tries++;
    }
    return UINT32_MAX;
}

/* The first point of the ring at or after hash (n_points: past the last, which wraps). */
static unsigned ring_point(const struct upstream *u, uint32_t hash)
{
    unsigned i = 0, j = u->n_points;
    while (i < j) {
        unsigned k = (i + j) / 2;
        if (hash > u->points[k].hash)
            i = k + 1;
        else if (hash < u->points[k].hash)
            j = k;
        else
            return k;
    }
    return i;
}

/* hash ... consistent: the server of the point the key falls on, or of the next points
 * while it may not be tried. Of several addresses of one name, the first that may. */
static unsigned ring(struct upstream *u, struct upstream_choice *ch, int64_t now_ms,
                     uint64_t tried)
{
    if (!ch->begun) {
        ch->begun = true;
        ch->tries = 0;
        ch->hash = ring_point(u, (uint32_t)crc32(crc32(0L, Z_NULL, 0), ch->key,
                                                 (uInt)ch->key_len));
    }
    while (ch->tries <= UPSTREAM_HASH_TRIES) {
        const char *name = u->servers[u->points[ch->hash % u->n_points].server].written;
        for (unsigned i = 0; i < u->n_servers; i++) {
            struct upstream_server *s = &u->servers[i];
            if (s->backup || (tried >> i & 1) || strcmp(s->written, name) != 0 ||
                !eligible(s, now_ms))
                continue;
            if (available(s, now_ms))
                return i;
        }
        ch->hash++;
        ch->tries++;
    }
    return UINT32_MAX;
}

/* A thread's own pseudo-random numbers (xorshift), for `random`. */
static uint32_t random_next(void)
{
    static _Thread_local uint32_t x;
    if (x == 0)
        x = (uint32_t)(uintptr_t)&x ^ 0x9e3779b9u;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return x;
}

/* random [two]: a server by weight; with two, the lighter of two (least_conn's measure). */
static unsigned randomly(struct upstream *u, int64_t now_ms, uint64_t tried)
{
    for (unsigned t = 0; t <= UPSTREAM_HASH_TRIES; t++) {
        unsigned i = by_weight(u, random_next() % u->total_weight);
        if ((tried >> i & 1) || !eligible(&u->servers[i], now_ms))
            continue;
        for (unsigned k = 0; u->random_two && k <= UPSTREAM_HASH_TRIES; k++) {
            /* a second, other server; the lighter of the two (least_conn's measure) */
            unsigned j = by_weight(u, random_next() % u->total_weight);
            if (j == i || (tried >> j & 1) || !eligible(&u->servers[j], now_ms))
                continue;
            if (lighter(&u->servers[j], &u->servers[i]))
                i = j;
            break;
        }
        if (available(&u->servers[i], now_ms))
            return i;
    }
    return UINT32_MAX;
}

/* The hashing and random methods (nginx: fewer than two primaries, or an empty key, go
 * round-robin; so does a choice that gave up). */
static struct upstream_server *pick_method(struct upstream *u, int64_t now_ms, uint64_t tried,
                                           struct upstream_choice *ch)
{
    unsigned primaries = 0;
    for (unsigned i = 0; i < u->n_servers; i++)
        primaries += !u->servers[i].backup;
    if (primaries < 2 || u->total_weight == 0)
        return NULL;
    unsigned i;
    if (u->balance == UPSTREAM_RANDOM)
        i = randomly(u, now_ms, tried);
    else if (!ch || ch->key_len == 0)
        return NULL;
    else if (u->balance == UPSTREAM_HASH && u->hash_consistent)
        i = u->n_points ? ring(u, ch, now_ms, tried) : UINT32_MAX;
    else
        i = hashed(u, ch, now_ms, tried);
    return i == UINT32_MAX ? NULL : take(&u->servers[i]);
}

static struct upstream_server *pick_primary(struct upstream *u, int64_t now_ms,
                                            uint64_t tried)
{
    if (u->n_schedule == 0)
        return NULL;
    unsigned start = atomic_fetch_add_explicit(&u->next, 1, memory_order_relaxed);
    if (u->balance != UPSTREAM_LEAST_CONN) {
        for (unsigned k = 0; k < u->n_schedule; k++) {
            unsigned i = u->schedule[(start + k) % u->n_schedule];
            if (!(tried >> i & 1) && available(&u->servers[i], now_ms))
                return take(&u->servers[i]);
        }
        return NULL;
    }
    struct upstream_server *best = NULL;
    for (unsigned k = 0; k < u->n_servers; k++) {
        unsigned i = (start + k) % u->n_servers;
        struct upstream_server *s = &u->servers[i];
        if (s->backup || (tried >> i & 1) || upstream_server_out(s, now_ms))
            continue;
        if (!best || lighter(s, best))
            best = s;
    }
    if (best && !available(best, now_ms))
        return NULL;
    return best ? take(best) : NULL;
}

struct upstream_server *upstream_pick(struct upstream *u, int64_t now_ms, uint64_t tried,
                                      struct upstream_choice *ch)
{
    struct upstream_server *s = NULL;
    if (u->balance != UPSTREAM_ROUND_ROBIN && u->balance != UPSTREAM_LEAST_CONN)
        s = pick_method(u, now_ms, tried, ch);
    if (!s)
        s = pick_primary(u, now_ms, tried);
    if (s)
        return s;
    for (unsigned i = 0; i < u->n_servers; i++) /* the backups, in file order */
        if (u->servers[i].backup && !(tried >> i & 1) && available(&u->servers[i], now_ms))
            return take(&u->servers[i]);
    return NULL;
}

void upstream_done(struct upstream *u, struct upstream_server *s, bool failed, int64_t now_ms)
{
    atomic_fetch_sub_explicit(&s->active, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->requests, 1, memory_order_relaxed);
    if (!failed) {
        if (atomic_load_explicit(&s->out_until_ms, memory_order_relaxed) != 0) {
            atomic_store(&s->fails, 0); /* its trial succeeded: back in */
            atomic_store(&s->out_until_ms, 0);
        }
        return;
    }
    atomic_fetch_add_explicit(&s->failures, 1, memory_order_relaxed);
    if (s->max_fails == 0 || s->fail_timeout_ms == 0 ||
        u->n_servers == 1) /* a lone server is never out (nginx) */
        return;
    long long start = atomic_load_explicit(&s->window_ms, memory_order_relaxed);
    unsigned fails;
    if (now_ms - start >= (long long)s->fail_timeout_ms) { /* a new window */
        atomic_store_explicit(&s->window_ms, now_ms, memory_order_relaxed);
        atomic_store_explicit(&s->fails, 1, memory_order_relaxed);
        fails = 1;
    } else {
        fails = atomic_fetch_add_explicit(&s->fails, 1, memory_order_relaxed) + 1;
    }
    if (fails >= s->max_fails)
        atomic_store_explicit(&s->out_until_ms, now_ms + (long long)s->fail_timeout_ms,
                              memory_order_relaxed);
}

bool upstream_idle_carried(const struct upstream *u, struct upstream_idle *idle, int64_t now_ms)
{
    if (idle->requests + 1 >= u->keepalive_requests ||
        now_ms - idle->born_ms >= (int64_t)u->keepalive_time_ms)
        return false;
    idle->requests++;
    return true;
}

/* The count of a home's idle connections (under idle_lock): its own slot, a free one, or
 * the last, which homes past UPSTREAM_HOMES_MAX share. */
static unsigned *home_count(struct upstream *u, const void *home)
{
    int empty = -1;
    for (unsigned i = 0; i < UPSTREAM_HOMES_MAX; i++) {
        if (u->homes[i].n > 0 && u->homes[i].home == home)
            return &u->homes[i].n;
        if (u->homes[i].n == 0 && empty < 0)
            empty = (int)i;
    }
    unsigned i = empty >= 0 ? (unsigned)empty : UPSTREAM_HOMES_MAX - 1;
    if (u->homes[i].n == 0)
        u->homes[i].home = home;
    return &u->homes[i].n;
}

bool upstream_idle_put(struct upstream *u, struct upstream_idle *idle, int64_t now_ms,
                       unsigned groups)
{
    bool kept = false;
    idle->since_ms = now_ms;
    pthread_mutex_lock(&u->idle_lock);
    unsigned *n = home_count(u, idle->home);
    if (groups ? u->n_idle < u->keepalive * groups : *n < u->keepalive) {
        idle->next = u->idle;
        u->idle = idle;
        u->n_idle++;
        (*n)++;
        kept = true;
        if (idle->watch)
            idle->watch(idle); /* under the lock: no taker sees it listed and not watched */
    }
    pthread_mutex_unlock(&u->idle_lock);
    return kept;
}

static bool idle_claim(struct upstream_idle *idle)
{
    return !idle->claim || idle->claim(idle);
}

/* Out of the list, under idle_lock: *at is idle. */
static void idle_unlink(struct upstream *u, struct upstream_idle **at)
{
    struct upstream_idle *idle = *at;
    *at = idle->next;
    u->n_idle--;
    (*home_count(u, idle->home))--;
}

struct upstream_idle *upstream_idle_take(struct upstream *u, const struct upstream_server *s,
                                         const void *home)
{
    if (u->keepalive == 0)
        return NULL;
    pthread_mutex_lock(&u->idle_lock);
    struct upstream_idle **at = NULL;
    for (int pass = 0; pass < 2 && !at; pass++) { /* at home first, then anywhere */
        for (struct upstream_idle **i = &u->idle; *i; i = &(*i)->next) {
            if ((*i)->server != s || (pass == 0 && (*i)->home != home))
                continue;
            if (idle_claim(*i)) {
                at = i;
                break;
            }
        }
    }
    struct upstream_idle *found = at ? *at : NULL;
    if (found)
        idle_unlink(u, at);
    pthread_mutex_unlock(&u->idle_lock);
    return found;
}

void upstream_idle_drop(struct upstream *u, struct upstream_idle *idle)
{
    pthread_mutex_lock(&u->idle_lock);
    for (struct upstream_idle **i = &u->idle; *i; i = &(*i)->next)
        if (*i == idle) {
            idle_unlink(u, i);
            break;
        }
    pthread_mutex_unlock(&u->idle_lock);
}

void upstream_idle_close_all(struct upstream *u)
{
    for (;;) {
        struct upstream_idle *mine = NULL;
        pthread_mutex_lock(&u->idle_lock);
        for (struct upstream_idle **i = &u->idle; *i;) {
            struct upstream_idle *idle = *i;
            if (!idle_claim(idle)) {
                i = &idle->next; /* its watch's handler is dropping it */
                continue;
            }
            idle_unlink(u, i);
            idle->next = mine;
            mine = idle;
        }
        bool left = u->idle != NULL;
        pthread_mutex_unlock(&u->idle_lock);
        while (mine) {
            struct upstream_idle *next = mine->next;
            mine->close(mine);
            mine = next;
        }
        if (!left)
            return;
        sched_yield();
    }
}

void upstream_idle_expire(struct upstream *u, int64_t now_ms)
{
    struct upstream_idle *mine = NULL;
    pthread_mutex_lock(&u->idle_lock);
    for (struct upstream_idle **i = &u->idle; *i;) {
        struct upstream_idle *idle = *i;
        if (now_ms - idle->since_ms <= (int64_t)u->keepalive_timeout_ms || !idle_claim(idle)) {
            i = &idle->next;
            continue;
        }
        idle_unlink(u, i);
        idle->next = mine;
        mine = idle;
    }
    pthread_mutex_unlock(&u->idle_lock);
    while (mine) {
        struct upstream_idle *next = mine->next;
        mine->close(mine);
        mine = next;
    }
}

void upstream_answered(struct upstream_server *s, int64_t us)
{
    atomic_fetch_add_explicit(&s->answered, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->answer_us, (unsigned long long)(us > 0 ? us : 0),
                              memory_order_relaxed);
}
