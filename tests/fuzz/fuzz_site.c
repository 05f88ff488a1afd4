/* fuzz_site.c — libFuzzer target for sites: server and location blocks (site.c).
 *
 * Input: a configuration text, then optionally a NUL byte and probe lines ('\n' apart),
 * each tried as a path and as a Host. The text is parsed by the configuration reader and
 * built into a site set (site_set_from_text); then selection runs on inputs derived from
 * the set itself (every location's pattern, longer and shorter; every server name, in
 * upper case, with a port, a trailing dot, a subdomain; every listening address) and on
 * the probes. Seeds: tests/fuzz/corpus/fuzz_site/.
 *
 * What it checks, beyond "no crash, no sanitizer report, no leak":
 *   - building returns a set or NULL; on NULL the message is non-empty, NUL-terminated
 *     and names the file;
 *   - a location chosen for a path belongs to that server, is never a named one, and is
 *     one that can match: an exact one equals the path, a prefix one begins it;
 *   - an exact location at the top of a server is always chosen for its own URI (a nested
 *     one only through its parent, as nginx); a named one is found by name;
 *   - a server chosen for one of the set's own addresses is one that listens there;
 *   - building is deterministic: the same text gives the same answers twice.
 * Links: server/site.c, server/config.c, server/directive.c. Built and run by `make fuzz`.
 */
#include "site.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REQUIRE(x)                                                                             \
    do {                                                                                       \
        if (!(x)) {                                                                            \
            fprintf(stderr, "FAIL %s:%d %s\n", __FILE__, __LINE__, #x);                        \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

static const char file[] = "fuzz.conf";

static bool in_group(const struct site_addr *g, const struct site_server *s)
{
    for (unsigned i = 0; i < g->n_servers; i++)
        if (g->servers[i] == s)
            return true;
    return false;
}

/* The location for path, checked against the rules that hold whatever was chosen. */
static const struct site_location *check_path(const struct site_server *s, const char *path,
                                              size_t len)
{
    char buf[4200];
    if (len >= sizeof(buf))
        return NULL;
    memcpy(buf, path, len);
    buf[len] = '\0';
    const struct site_location *l = site_location_for(s, buf, len);
    if (!l)
        return NULL;
    REQUIRE(l->server == s && l >= s->locations && l < s->locations + s->n_locations);
    REQUIRE(l->match != SITE_NAMED);
    if (l->match == SITE_EXACT)
        REQUIRE(l->pattern_len == len && memcmp(l->pattern, buf, len) == 0);
    if (l->match == SITE_PREFIX || l->match == SITE_PREFIX_STOP)
        REQUIRE(l->pattern_len <= len && memcmp(l->pattern, buf, l->pattern_len) == 0);
    return l;
}

static void check_locations(const struct site_server *s, const char *probes, size_t probes_len)
{
    char buf[4200];
    for (unsigned i = 0; i < s->n_locations; i++) {
        const struct site_location *l = &s->locations[i];
        if (l->match == SITE_NAMED) {
            REQUIRE(site_named_location(s, l->pattern) == l);
            continue;
        }
        const struct site_location *got = check_path(s, l->pattern, l->pattern_len);
        /* a nested exact location is reached through its parent, which a longer prefix
         * elsewhere can shadow (nginx does the same); a top-level one always wins */
        if (l->match == SITE_EXACT && !l->parent)
            REQUIRE(got == l);
        if (l->pattern_len + 2 < sizeof(buf)) { /* longer, and one byte shorter */
            memcpy(buf, l->pattern, l->pattern_len);
            memcpy(buf + l->pattern_len, "x", 2);
            check_path(s, buf, l->pattern_len + 1);
            check_path(s, l->pattern, l->pattern_len ? l->pattern_len - 1 : 0);
        }
    }
    for (const char *p = probes, *end = probes + probes_len; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        check_path(s, p, len);
        p += len + 1;
    }
}

static const struct site_server *server_at(const struct site_set *set,
                                           const struct site_addr *g, const char *host,
                                           size_t len)
{
    struct http_slice h = {host, len};
    const struct site_server *s =
        site_server_for(set, (const struct sockaddr *)&g->listen.addr, h);
    /* port 0 and the wildcard share their group with any other of the same address */
    REQUIRE(s != NULL && in_group(g, s));
    return s;
}

/* Hosts derived from a name: as written, upper case, with a port, a dot, a subdomain. */
static void check_hosts(const struct site_set *set, const struct site_addr *g,
                        const struct site_name *nm)
{
    char buf[600];
    if (nm->len + 20 >= sizeof(buf))
        return;
    const char *forms[] = {"%s", "%s:8080", "%s.", "a.%s", "%sx"};
    for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
        int n = snprintf(buf, sizeof(buf), forms[i], nm->text);
        server_at(set, g, buf, (size_t)n);
        for (int k = 0; k < n; k++)
            buf[k] = (char)(buf[k] >= 'a' && buf[k] <= 'z' ? buf[k] - 32 : buf[k]);
        server_at(set, g, buf, (size_t)n);
    }
}

static void check_servers(const struct site_set *set, const char *probes, size_t probes_len)
{
    for (unsigned i = 0; i < set->n_addrs; i++) {
        const struct site_addr *g = &set->addrs[i];
        REQUIRE(g->n_servers > 0 && g->n_servers <= set->n_servers);
        REQUIRE(!g->default_server || in_group(g, g->default_server));
        server_at(set, g, "", 0);
        for (unsigned k = 0; k < g->n_servers; k++)
            for (unsigned n = 0; n < g->servers[k]->n_names; n++)
                check_hosts(set, g, &g->servers[k]->names[n]);
        for (const char *p = probes, *end = probes + probes_len; p < end;) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
            server_at(set, g, p, len);
            p += len + 1;
        }
    }
}

/* A short account of the answers for the probes, to compare two builds. */
static unsigned long answers(const struct site_set *set, const char *probes, size_t len)
{
    unsigned long h = set->n_servers * 31u + set->n_addrs;
    for (unsigned i = 0; i < set->n_servers; i++) {
        const struct site_location *l = check_path(&set->servers[i], probes, len);
        h = h * 131 + (l ? (unsigned long)(l - set->servers[i].locations) + 1 : 0);
    }
    return h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char err_a[800], err_b[800];
    if (size > 65536)
        return 0;
    const char *text = (const char *)data;
    const char *nul = memchr(text, '\0', size);
    size_t text_len = nul ? (size_t)(nul - text) : size;
    const char *probes = nul ? nul + 1 : text + size;
    size_t probes_len = nul ? size - text_len - 1 : 0;

    memset(err_a, 0x55, sizeof(err_a)); /* no NUL: a message must end itself */
    struct site_set *a = site_set_from_text(file, text, text_len, err_a, sizeof(err_a));
    struct site_set *b = site_set_from_text(file, text, text_len, err_b, sizeof(err_b));
    REQUIRE(!a == !b);
    if (!a) {
        REQUIRE(memchr(err_a, '\0', sizeof(err_a)) && err_a[0]);
        REQUIRE(strncmp(err_a, file, strlen(file)) == 0 && err_a[strlen(file)] == ':');
        REQUIRE(strcmp(err_a, err_b) == 0);
        return 0;
    }
    for (unsigned i = 0; i < a->n_servers; i++)
        check_locations(&a->servers[i], probes, probes_len);
    check_servers(a, probes, probes_len);
    REQUIRE(answers(a, probes, probes_len) == answers(b, probes, probes_len));
    site_set_free(a);
    site_set_free(b);
    return 0;
}
