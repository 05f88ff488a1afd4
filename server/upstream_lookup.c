/* upstream_lookup.c — a request's target named at run time, looked up (upstream_lookup.h). */
#include "upstream_lookup.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum upstream_lookup_result upstream_lookup_set(struct upstream_lookup *l,
                                                const struct sockaddr_storage *addr,
                                                const socklen_t *addr_len, unsigned n,
                                                char *why, size_t len)
{
    if (!l->set)
        l->set = malloc(sizeof(*l->set));
    if (!l->set || upstream_from_addrs(l->set, addr, addr_len, n, l->port) < 0) {
        snprintf(why, len, "no address to connect to");
        return UPSTREAM_LOOKUP_FAILED;
    }
    return UPSTREAM_LOOKUP_READY;
}

static enum upstream_lookup_result answered(struct upstream_lookup *l, char *why, size_t len)
{
    if (l->rwait.status != 0) {
        snprintf(why, len, "%s could not be resolved (%d: %s)", l->host, l->rwait.status,
                 resolver_strerror(l->rwait.status));
        return UPSTREAM_LOOKUP_FAILED;
    }
    return upstream_lookup_set(l, l->rwait.addrs.addr, l->rwait.addrs.len, l->rwait.addrs.n,
                               why, len);
}

enum upstream_lookup_result upstream_lookup_begin(struct upstream_lookup *l,
                                                  struct resolver *r, struct lf_group *g,
                                                  char *why, size_t len)
{
    struct resolver_addrs *a = &l->rwait.addrs;
    memset(&a->addr[0], 0, sizeof(a->addr[0]));
    struct sockaddr_in *in = (struct sockaddr_in *)&a->addr[0];
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&a->addr[0];
    if (inet_pton(AF_INET, l->host, &in->sin_addr) == 1) {
        in->sin_family = AF_INET;
        a->len[0] = sizeof(*in);
        return upstream_lookup_set(l, a->addr, a->len, 1, why, len);
    }
    if (inet_pton(AF_INET6, l->host, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        a->len[0] = sizeof(*in6);
        return upstream_lookup_set(l, a->addr, a->len, 1, why, len);
    }
    if (!r) {
        snprintf(why, len, "no resolver defined to resolve %s", l->host);
        return UPSTREAM_LOOKUP_FAILED;
    }
    if (resolver_lookup(r, l->host, g, &l->rwait) != 0)
        return answered(l, why, len);
    l->resolving = true;
    return UPSTREAM_LOOKUP_WAIT;
}

enum upstream_lookup_result upstream_lookup_take(struct upstream_lookup *l,
                                                 struct resolver *r, char *why, size_t len)
{
    if (!resolver_take(r, &l->rwait))
        return UPSTREAM_LOOKUP_WAIT;
    l->resolving = false;
    return answered(l, why, len);
}

void upstream_lookup_cancel(struct upstream_lookup *l, struct resolver *r, char *why,
                            size_t len)
{
    if (l->resolving)
        resolver_cancel(r, &l->rwait);
    l->resolving = false;
    if (why)
        snprintf(why, len, "%s could not be resolved (%d: %s)", l->host, RESOLVER_ETIMEDOUT,
                 resolver_strerror(RESOLVER_ETIMEDOUT));
}

void upstream_lookup_free(struct upstream_lookup *l)
{
    if (l->set)
        upstream_release(l->set);
    free(l->set);
    l->set = NULL;
}
