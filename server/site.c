/* site.c — the site set: built from the statement tree at load, read by every request. */
#include "site.h"

#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

/* --- where blocks stand ----------------------------------------------------------------- */

/* `server` belongs at the top level, `location` in a server or a location: anywhere else is an
 * error, reported at the statement. The walk goes through every block (classes too) so
 * that a misplaced one is never silently ignored. */
static void check_placement(const struct conf_node *first, unsigned context,
                            struct conf_reader *r)
{
    for (const struct conf_node *n = first; n; n = n->next) {
        unsigned inner = CONF_CLASS; /* any other block: neither top level nor a site */
        if (strcmp(n->name, "server") == 0) {
            if (context != CONF_TOP) {
                conf_error(r, n->line, "\"server\" is only allowed at the top level, not "
                           "inside another block");
                continue;
            }
            inner = CONF_SERVER;
        } else if (strcmp(n->name, "location") == 0) {
            if (context != CONF_SERVER && context != CONF_LOCATION) {
                conf_error(r, n->line, "\"location\" is only allowed in a server block");
                continue;
            }
            inner = CONF_LOCATION;
        }
        /* An upstream block's `server` lines are its servers (upstream.c reads them); a
         * map's and a types block's lines are keys, whatever their words. */
        if (n->is_block && strcmp(n->name, "upstream") != 0 && strcmp(n->name, "map") != 0 &&
            strcmp(n->name, "types") != 0)
            check_placement(n->children, inner, r);
    }
}

/* --- server names ------------------------------------------------------------------------ */

static char ascii_lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* Is a (any case) equal to the lowercase b over len bytes? */
static bool eq_ci(const char *a, const char *lower, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (ascii_lower(a[i]) != lower[i])
            return false;
    return true;
}

/* A `server_name ~RE`: compiled without case (host names have none), kept as written. */
static int parse_regex_name(const char *word, struct site_name *nm, struct conf_reader *r,
                            unsigned line)
{
    char why[256];
    if (regex_compile(&nm->re, word + 1, REGEX_CASELESS, why, sizeof(why)) < 0)
        return conf_error(r, line, "server_name: invalid regular expression \"%s\": %s",
                          word + 1, why);
    nm->kind = SITE_NAME_REGEX;
    nm->text = strdup(word);
    nm->len = strlen(word);
    if (!nm->text) {
        regex_free(&nm->re);
        return conf_error(r, line, "out of memory");
    }
    return 0;
}

/* One word of `server_name` into nm: exact, `*.x`, `.x`, `x.*` or `~RE`. A '*' elsewhere
 * is refused: nginx's rule for wildcards. */
static int parse_name(const char *word, struct site_name *nm, struct conf_reader *r,
                      unsigned line)
{
    size_t len = strlen(word);
    const char *text = word;
    memset(nm, 0, sizeof(*nm));
    if (word[0] == '~')
        return parse_regex_name(word, nm, r, line);
    if (len > 2 && word[0] == '*' && word[1] == '.') {
        nm->kind = SITE_NAME_LEADING;
        text = word + 1, len -= 1;
    } else if (len > 1 && word[0] == '.') {
        nm->kind = SITE_NAME_LEADING;
        nm->bare_too = true;
    } else if (len > 2 && word[len - 1] == '*' && word[len - 2] == '.') {
        nm->kind = SITE_NAME_TRAILING;
        len -= 1;
    }
    if (memchr(text, '*', len))
        return conf_error(r, line, "server_name: invalid wildcard \"%s\" (only \"*.name\", "
                          "\".name\" or \"name.*\")", word);
    nm->text = malloc(len + 1);
    if (!nm->text)
        return conf_error(r, line, "out of memory");
    for (size_t i = 0; i < len; i++)
        nm->text[i] = ascii_lower(text[i]);
    nm->text[len] = '\0';
    nm->len = len;
    return 0;
}

/* --- locations --------------------------------------------------------------------------- */

static const struct {
    const char *word;
    enum site_match match;
} modifiers[] = {
    /* longest first: an attached modifier ("~*\.png$") is read by its longest match */
    {"^~", SITE_PREFIX_STOP}, {"~*", SITE_REGEX_ICASE}, {"=", SITE_EXACT}, {"~", SITE_REGEX},
};

static bool is_prefix(enum site_match m)
{
    return m == SITE_PREFIX || m == SITE_PREFIX_STOP;
}

static bool is_regex(enum site_match m)
{
    return m == SITE_REGEX || m == SITE_REGEX_ICASE;
}

/* `location [MOD] URI`, `location MODURI` (nginx accepts the modifier attached) or
 * `location @NAME`: the kind and the pattern. */
static int parse_location_args(const struct conf_node *n, struct site_location *loc,
                               struct conf_reader *r)
{
    static const char usage[] = "usage: location [=|^~|~|~*] URI { ... } or location @NAME "
                                "{ ... }";
    if (!n->is_block || n->n_args < 1 || n->n_args > 2)
        return conf_error(r, n->line, "location: %s", usage);
    const char *arg = n->args[n->n_args - 1];
    loc->match = SITE_PREFIX;
    if (n->n_args == 2) {
        size_t i = 0;
        while (i < sizeof(modifiers) / sizeof(modifiers[0]) &&
               strcmp(n->args[0], modifiers[i].word) != 0)
            i++;
        if (i == sizeof(modifiers) / sizeof(modifiers[0]))
            return conf_error(r, n->line, "location: unknown modifier \"%s\"; %s", n->args[0],
                              usage);
        loc->match = modifiers[i].match;
    } else if (arg[0] == '@') {
        loc->match = SITE_NAMED;
    } else {
        for (size_t i = 0; i < sizeof(modifiers) / sizeof(modifiers[0]); i++) {
            size_t ml = strlen(modifiers[i].word);
            if (strncmp(arg, modifiers[i].word, ml) == 0) {
                loc->match = modifiers[i].match;
                arg += ml;
                break;
            }
        }
    }
    if (arg[0] == '\0' || (loc->match == SITE_NAMED && arg[1] == '\0'))
        return conf_error(r, n->line, "location: an empty %s; %s",
                          loc->match == SITE_NAMED ? "name" : "URI", usage);
    loc->pattern = arg;
    loc->pattern_len = strlen(arg);
    return 0;
}

/* Compile a regex location. */
static int compile_location(struct site_location *loc, struct conf_reader *r)
{
    char why[256];
    if (regex_compile(&loc->re, loc->pattern,
                      loc->match == SITE_REGEX_ICASE ? REGEX_CASELESS : 0, why, sizeof(why)) == 0)
        return 0;
    loc->match = SITE_PREFIX; /* nothing compiled: nothing to free */
    return conf_error(r, loc->node->line, "location: invalid regular expression \"%s\": %s",
                      loc->pattern, why);
}

/* The same location twice in a server: nginx's rule, where `/a` and `^~ /a` are one
 * prefix and so duplicates. */
static bool same_location(const struct site_location *a, const struct site_location *b)
{
    bool same_kind = a->match == b->match || (is_prefix(a->match) && is_prefix(b->match));
    return same_kind && a->pattern_len == b->pattern_len &&
           memcmp(a->pattern, b->pattern, a->pattern_len) == 0;
}

/* Prefixes longest first (stable, so that equal lengths keep file order): the first one
 * that matches a path is then the longest. A dozen entries: insertion sort. */
static void sort_prefixes(const struct site_location **v, unsigned n)
{
    for (unsigned i = 1; i < n; i++) {
        const struct site_location *x = v[i];
        unsigned j = i;
        for (; j > 0 && v[j - 1]->pattern_len < x->pattern_len; j--)
            v[j] = v[j - 1];
        v[j] = x;
    }
}

/* The locations of s directly inside parent (NULL: the server's own), into nest: three
 * lists in one allocation, freed with nest->exact. */
static int index_nest(struct site_server *s, const struct site_location *parent,
                      struct site_nest *nest, struct conf_reader *r)
{
    unsigned n = s->n_locations;
    const struct site_location **all = calloc(n ? 3u * n : 1u, sizeof(*all));
    if (!all)
        return conf_error(r, s->node->line, "out of memory");
    nest->exact = all, nest->prefix = all + n, nest->regex = all + 2 * n;
    for (unsigned i = 0; i < n; i++) {
        const struct site_location *l = &s->locations[i];
        if (l->parent != parent)
            continue;
        if (l->match == SITE_EXACT)
            nest->exact[nest->n_exact++] = l;
        else if (is_prefix(l->match))
            nest->prefix[nest->n_prefix++] = l;
        else if (is_regex(l->match))
            nest->regex[nest->n_regex++] = l;
    }
    sort_prefixes(nest->prefix, nest->n_prefix);
    return 0;
}

static int index_locations(struct site_server *s, struct conf_reader *r)
{
    s->named = calloc(s->n_locations + 1, sizeof(*s->named));
    if (!s->named)
        return conf_error(r, s->node->line, "out of memory");
    for (unsigned i = 0; i < s->n_locations; i++) {
        struct site_location *l = &s->locations[i];
        if (l->match == SITE_NAMED)
            s->named[s->n_named++] = l;
        s->n_regex += is_regex(l->match);
        if (index_nest(s, l, &l->inner, r) < 0)
            return -1;
    }
    return index_nest(s, NULL, &s->top, r);
}

/* nginx's rules for a location inside another. */
static int check_nesting(const struct site_location *loc, const struct site_location *p,
                         struct conf_reader *r)
{
    unsigned line = loc->node->line;
    if (p->match == SITE_EXACT || p->match == SITE_NAMED)
        return conf_error(r, line, "location \"%s\" cannot be inside the %s location \"%s\"",
                          loc->pattern, p->match == SITE_EXACT ? "exact" : "named",
                          p->pattern);
    if (loc->match == SITE_NAMED)
        return conf_error(r, line, "named location \"%s\" can be on the server level only",
                          loc->pattern);
    if (!is_regex(loc->match) && (loc->pattern_len < p->pattern_len ||
                                  memcmp(loc->pattern, p->pattern, p->pattern_len) != 0))
        return conf_error(r, line, "location \"%s\" is outside location \"%s\"", loc->pattern,
                          p->pattern);
    return 0;
}

/* A location, and those nested in it after it (file order, parents first). */
static int add_location(struct site_server *s, const struct conf_node *n,
                        const struct site_location *parent, struct conf_reader *r)
{
    struct site_location *loc = &s->locations[s->n_locations];
    memset(loc, 0, sizeof(*loc));
    loc->node = n;
    loc->first = n->children;
    loc->server = s;
    loc->parent = parent;
    if (parse_location_args(n, loc, r) < 0 || (parent && check_nesting(loc, parent, r) < 0))
        return -1;
    for (unsigned i = 0; i < s->n_locations; i++)
        if (s->locations[i].parent == parent && same_location(&s->locations[i], loc))
            return conf_error(r, n->line, "duplicate location \"%s\" (first at %s:%u)",
                              loc->pattern, conf_line_file(s->locations[i].node->line, r->file),
                              conf_line_no(s->locations[i].node->line));
    if (is_regex(loc->match) && compile_location(loc, r) < 0)
        return -1;
    s->n_locations++;
    for (const struct conf_node *c = n->children; c; c = c->next)
        if (strcmp(c->name, "location") == 0)
            add_location(s, c, loc, r);
    return 0;
}

/* The `location` statements in a block, nested ones too. */
static unsigned count_locations(const struct conf_node *first)
{
    unsigned n = 0;
    for (const struct conf_node *c = first; c; c = c->next)
        if (strcmp(c->name, "location") == 0)
            n += 1 + count_locations(c->children);
    return n;
}

/* --- listen addresses -------------------------------------------------------------------- */

/* One `listen` of a server, before the addresses are grouped. */
struct site_listen {
    struct config_listen addr;
    bool is_default;
    unsigned line;
};

/* One `listen` into out[0 .. *n): a port range's every address, as nginx's. */
static int parse_site_listen(const struct conf_node *n, struct site_listen *out, unsigned *n_out,
                             struct conf_reader *r)
{
    if (n->is_block || n->n_args < 1)
        return conf_error(r, n->line, "listen: usage: listen ADDR:PORT [default_server] "
                                            "[PARAMETER...];");
    memset(out, 0, sizeof(*out));
    out->line = n->line;
    char msg[256];
    enum config_listen_word w;
    unsigned ports;
    int rc = config_parse_listen_range(n->args[0], &out->addr, &ports);
    if (rc == -2)
        return conf_error(r, n->line, "listen: invalid port range in \"%s\"", n->args[0]);
    if (rc < 0)
        return conf_error(r, n->line, "listen: invalid address \"%s\"", n->args[0]);
    for (unsigned i = 1; i < n->n_args; i++) {
        if (strcmp(n->args[i], "default_server") == 0 || strcmp(n->args[i], "default") == 0)
            out->is_default = true; /* `default`: nginx's older name of it */
        else if (strcmp(n->args[i], "http2") == 0)
            conf_notice(r, n->line, "listen: http2: accepted, not used: lfhttpd speaks "
                        "HTTP/1.1 only; TLS clients are offered http/1.1 by ALPN and use it");
        else if ((w = config_listen_param(&out->addr, n->args[i], msg, sizeof(msg))) ==
                 CONFIG_LISTEN_IGNORED)
            conf_notice(r, n->line, "listen: %s", msg);
        else if (w == CONFIG_LISTEN_INVALID)
            return conf_error(r, n->line, "listen: %s", msg);
        else if (w == CONFIG_LISTEN_UNKNOWN)
            return conf_error(r, n->line, "listen: unsupported parameter \"%s\" (only "
                              "default_server, http2, " LISTEN_PARAMS ")", n->args[i]);
    }
    for (unsigned k = 1; k < ports; k++) {
        out[k] = out[0];
        config_listen_nth(&out[k].addr, k);
    }
    *n_out += ports;
    return 0;
}

/* An address read out of a sockaddr by copying (the sockaddr types alias one another;
 * copies keep the compiler's aliasing rules intact). An IPv4-mapped IPv6 address (an IPv4
 * client of a `[::]` socket) is read as the IPv4 one. */
struct endpoint {
    int family; /* AF_INET, AF_INET6, AF_UNIX, or 0: none of them */
    uint16_t port;
    uint8_t ip[16];
    const char *path; /* AF_UNIX: the socket's path, in the sockaddr read (port 0) */
};

static struct endpoint endpoint_of(const void *sa)
{
    struct endpoint e = {0};
    sa_family_t family;
    memcpy(&family, sa, sizeof(family));
    if (family == AF_INET) {
        struct sockaddr_in a;
        memcpy(&a, sa, sizeof(a));
        e.family = AF_INET;
        e.port = a.sin_port;
        memcpy(e.ip, &a.sin_addr, 4);
    } else if (family == AF_INET6) {
        struct sockaddr_in6 a;
        memcpy(&a, sa, sizeof(a));
        e.port = a.sin6_port;
        if (IN6_IS_ADDR_V4MAPPED(&a.sin6_addr)) {
            e.family = AF_INET;
            memcpy(e.ip, a.sin6_addr.s6_addr + 12, 4);
        } else {
            e.family = AF_INET6;
            memcpy(e.ip, a.sin6_addr.s6_addr, 16);
        }
    } else if (family == AF_UNIX) {
        e.family = AF_UNIX;
        e.path = ((const struct sockaddr_un *)sa)->sun_path;
    }
    return e;
}

static bool is_any(const struct endpoint *e)
{
    static const uint8_t zero[16];
    return e->family != AF_UNIX && memcmp(e->ip, zero, e->family == AF_INET ? 4 : 16) == 0;
}

/* The same host: the same IP address, or the same Unix socket path. */
static bool same_host(const struct endpoint *a, const struct endpoint *b)
{
    if (a->family != b->family)
        return false;
    if (a->family == AF_UNIX)
        return strcmp(a->path, b->path) == 0;
    return memcmp(a->ip, b->ip, sizeof(a->ip)) == 0;
}

/* One address however written: `[::ffff:127.0.0.1]:80` is `127.0.0.1:80`, as a connection
 * to either is read (endpoint_of). */
static bool same_addr(const struct config_listen *a, const struct config_listen *b)
{
    struct endpoint x = endpoint_of(&a->addr), y = endpoint_of(&b->addr);
    return x.port == y.port && same_host(&x, &y);
}

/* Put server s on the address of l: its group, made when new. */
static int join_addr(struct site_set *set, const struct site_server *s,
                     const struct site_listen *l, struct conf_reader *r)
{
    struct site_addr *g = NULL;
    for (unsigned i = 0; i < set->n_addrs && !g; i++)
        if (same_addr(&set->addrs[i].listen, &l->addr))
            g = &set->addrs[i];
    if (!g) {
        g = &set->addrs[set->n_addrs];
        g->servers = calloc(set->n_servers, sizeof(*g->servers));
        if (!g->servers)
            return conf_error(r, l->line, "out of memory");
        g->listen = l->addr;
        set->n_addrs++;
    }
    g->listen.ssl |= l->addr.ssl; /* one server's `ssl` makes the address a TLS one */
    g->listen.reuseport |= l->addr.reuseport;
    g->listen.proxy_protocol |= l->addr.proxy_protocol;
    if (g->n_servers && g->servers[g->n_servers - 1] == s)
        return conf_error(r, l->line, "listen: %s twice in one server", l->addr.text);
    g->servers[g->n_servers++] = s;
    if (!l->is_default)
        return 0;
    if (g->default_server)
        return conf_error(r, l->line, "a second default_server for %s (the first at %s:%u)",
                          l->addr.text, conf_line_file(g->default_line, r->file),
                          conf_line_no(g->default_line));
    g->default_server = s;
    g->default_line = l->line;
    return 0;
}

/* --- servers ------------------------------------------------------------------------------ */

static unsigned count_named(const struct conf_node *first, const char *name, bool args)
{
    unsigned n = 0;
    for (const struct conf_node *c = first; c; c = c->next)
        if (strcmp(c->name, name) == 0)
            n += args ? c->n_args : 1;
    return n;
}

/* A server's names and locations; its listens go to ls (room for each `listen`). */
static int build_server(struct site_server *s, const struct conf_node *n,
                        struct site_listen *ls, unsigned *n_ls, struct conf_reader *r)
{
    unsigned before = r->errors;
    s->node = n;
    s->first = n->children;
    if (!n->is_block || n->n_args > 0)
        conf_error(r, n->line, "server: usage: server { ... }");
    s->names = calloc(count_named(n->children, "server_name", true) + 1, sizeof(*s->names));
    s->locations = calloc(count_locations(n->children) + 1, sizeof(*s->locations));
    if (!s->names || !s->locations)
        return conf_error(r, n->line, "out of memory");
    for (const struct conf_node *c = n->children; c; c = c->next) {
        if (strcmp(c->name, "listen") == 0) {
            parse_site_listen(c, &ls[*n_ls], n_ls, r);
        } else if (strcmp(c->name, "server_name") == 0) {
            if (c->is_block || c->n_args == 0)
                conf_error(r, c->line, "server_name: usage: server_name NAME...;");
            for (unsigned i = 0; i < c->n_args && !c->is_block; i++)
                if (parse_name(c->args[i], &s->names[s->n_names], r, c->line) == 0)
                    s->n_names++;
        } else if (strcmp(c->name, "location") == 0) {
            add_location(s, c, NULL, r);
        }
    }
    if (index_locations(s, r) < 0)
        return -1;
    return r->errors > before ? -1 : 0;
}

/* The top-level listens: a server without its own listens on these (as nginx's servers
 * listen on its default port); 8080, the built-in default, when the file has none. */
static unsigned top_listens(const struct conf_node *tree, struct site_listen *out)
{
    unsigned n = 0;
    for (const struct conf_node *c = tree; c; c = c->next) {
        if (strcmp(c->name, "listen") != 0 || c->n_args < 1)
            continue;
        memset(&out[n], 0, sizeof(out[n]));
        out[n].line = c->line;
        unsigned ports; /* a port range's every address */
        if (config_parse_listen_range(c->args[0], &out[n].addr, &ports) == 0) {
            char msg[256];
            for (unsigned i = 1; i < c->n_args; i++) /* else config_load says */
                config_listen_param(&out[n].addr, c->args[i], msg, sizeof(msg));
            for (unsigned k = 1; k < ports; k++) {
                out[n + k] = out[n];
                config_listen_nth(&out[n + k].addr, k);
            }
            n += ports;
        }
    }
    if (n == 0) {
        memset(&out[0], 0, sizeof(out[0]));
        config_parse_listen("8080", &out[0].addr);
        n = 1;
    }
    return n;
}

static int build_servers(struct site_set *set, const struct conf_node *tree,
                         struct conf_reader *r)
{
    unsigned n_top_max = config_listen_count(tree) + 1;
    unsigned addr_max = 0;
    for (const struct conf_node *c = tree; c; c = c->next)
        if (strcmp(c->name, "server") == 0)
            addr_max += config_listen_count(c->children) + n_top_max;
    set->servers = calloc(set->n_servers, sizeof(*set->servers));
    set->addrs = calloc(addr_max, sizeof(*set->addrs));
    struct site_listen *top = calloc(n_top_max, sizeof(*top));
    if (!set->servers || !set->addrs || !top) {
        free(top);
        return conf_error(r, 0, "out of memory");
    }
    unsigned n_top = top_listens(tree, top);
    unsigned i = 0;
    for (const struct conf_node *c = tree; c; c = c->next) {
        if (strcmp(c->name, "server") != 0)
            continue;
        struct site_server *s = &set->servers[i++];
        struct site_listen *ls = calloc(config_listen_count(c->children) + 1, sizeof(*ls));
        unsigned n_ls = 0;
        if (!ls) {
            conf_error(r, c->line, "out of memory");
            continue;
        }
        build_server(s, c, ls, &n_ls, r);
        bool own = count_named(c->children, "listen", false) > 0;
        for (unsigned k = 0; k < (own ? n_ls : n_top); k++)
            join_addr(set, s, own ? &ls[k] : &top[k], r);
        free(ls);
    }
    free(top);
    return 0;
}

struct site_set *site_set_build(const struct conf_node *tree, struct conf_reader *r)
{
    unsigned before = r->errors;
    struct site_set *set = calloc(1, sizeof(*set));
    if (!set) {
        conf_error(r, 0, "out of memory");
        return NULL;
    }
    check_placement(tree, CONF_TOP, r);
    set->n_servers = count_named(tree, "server", false);
    if (set->n_servers)
        build_servers(set, tree, r);
    if (r->errors > before) {
        site_set_free(set);
        return NULL;
    }
    return set;
}

struct site_set *site_set_from_text(const char *file, const char *text, size_t len, char *err,
                                    size_t err_len)
{
    struct conf_node *tree;
    if (conf_parse_text(file, text, len, &tree, err, err_len) < 0)
        return NULL;
    struct conf_reader r = {.file = file, .owner = "", .context = CONF_TOP, .err = err,
                            .err_len = err_len};
    struct site_set *set = site_set_build(tree, &r);
    if (!set) {
        conf_tree_free(tree);
        return NULL;
    }
    set->owned_tree = tree;
    return set;
}

void site_set_free(struct site_set *set)
{
    if (!set)
        return;
    for (unsigned i = 0; set->servers && i < set->n_servers; i++) {
        struct site_server *s = &set->servers[i];
        for (unsigned k = 0; k < s->n_names; k++) {
            free(s->names[k].text);
            if (s->names[k].kind == SITE_NAME_REGEX)
                regex_free(&s->names[k].re);
        }
        for (unsigned k = 0; k < s->n_locations; k++) {
            if (is_regex(s->locations[k].match))
                regex_free(&s->locations[k].re);
            free(s->locations[k].inner.exact); /* the three lists are one allocation */
        }
        free(s->names);
        free(s->locations);
        free(s->top.exact);
        free(s->named);
    }
    for (unsigned i = 0; i < set->n_addrs; i++)
        free(set->addrs[i].servers);
    free(set->servers);
    free(set->addrs);
    conf_tree_free(set->owned_tree);
    free(set);
}

/* --- selection: no allocation, no lock ---------------------------------------------------- */

/* The group of the address a connection came in on: that exact address, else the
 * wildcard address with its port, of its own family first. */
const struct site_addr *site_addr_for(const struct site_set *set, const struct sockaddr *sa)
{
    if (!set || !set->n_addrs)
        return NULL;
    struct endpoint local = endpoint_of(sa);
    if (!local.family)
        return NULL;
    const struct site_addr *wild = NULL, *wild_other = NULL;
    for (unsigned i = 0; i < set->n_addrs; i++) {
        const struct site_addr *g = &set->addrs[i];
        struct endpoint a = endpoint_of(&g->listen.addr);
        if (a.port != local.port)
            continue;
        if (same_host(&a, &local))
            return g;
        if (is_any(&a) && a.family == local.family && !wild)
            wild = g;
        else if (is_any(&a) && !wild_other)
            wild_other = g;
    }
    if (wild || wild_other)
        return wild ? wild : wild_other;
    /* `listen ...:0` asks the kernel for a port: a connection on a port no address names
     * came in through it. */
    for (unsigned i = 0; i < set->n_addrs; i++) {
        struct endpoint a = endpoint_of(&set->addrs[i].listen.addr);
        if (a.port == 0 && a.family == local.family &&
            (is_any(&a) || same_host(&a, &local)))
            return &set->addrs[i];
    }
    return NULL;
}

int site_listen_match(const struct config_listen *ls, unsigned n, const struct sockaddr *sa)
{
    struct endpoint local = endpoint_of(sa);
    int wild = -1, zero = -1;
    for (unsigned i = 0; local.family && i < n; i++) {
        struct endpoint a = endpoint_of(&ls[i].addr);
        bool ip = is_any(&a) || same_host(&a, &local);
        if (a.port == local.port && a.family == local.family && !is_any(&a) && ip)
            return (int)i;
        if (a.port == local.port && is_any(&a) && wild < 0)
            wild = (int)i;
        if (a.port == 0 && ip && a.family == local.family && zero < 0)
            zero = (int)i;
    }
    return wild >= 0 ? wild : zero;
}

/* The Host without its port and one trailing dot. */
static struct http_slice host_name(struct http_slice h)
{
    const char *end = NULL;
    if (h.len && h.p[0] == '[') { /* an IPv6 literal keeps its brackets */
        end = memchr(h.p, ']', h.len);
        if (end)
            h.len = (size_t)(end - h.p) + 1;
    } else if (h.len && (end = memchr(h.p, ':', h.len))) {
        h.len = (size_t)(end - h.p);
    }
    if (h.len && h.p[h.len - 1] == '.')
        h.len--;
    return h;
}

/* How well name nm matches the host: 0 not at all, else its rank and length in *len. */
enum { MISS, TRAILING, LEADING, EXACT };
static int name_match(const struct site_name *nm, struct http_slice h)
{
    switch (nm->kind) {
    case SITE_NAME_EXACT: return h.len == nm->len && eq_ci(h.p, nm->text, nm->len) ? EXACT : MISS;
    case SITE_NAME_LEADING:
        if (h.len > nm->len && eq_ci(h.p + h.len - nm->len, nm->text, nm->len))
            return LEADING;
        return nm->bare_too && h.len == nm->len - 1 && eq_ci(h.p, nm->text + 1, h.len)
                   ? LEADING : MISS;
    case SITE_NAME_TRAILING:
        return h.len > nm->len && eq_ci(h.p, nm->text, nm->len) ? TRAILING : MISS;
    case SITE_NAME_REGEX: return MISS; /* tried after the others (regex_server) */
    }
    return MISS;
}

/* Has s a `server_name ~RE`? */
static bool regex_named(const struct site_server *s)
{
    for (unsigned k = 0; k < s->n_names; k++)
        if (s->names[k].kind == SITE_NAME_REGEX)
            return true;
    return false;
}

/* The first server of the group, in file order, with a regex name that matches h. A regex
 * over its limits is a miss. */
static const struct site_server *regex_server(const struct site_addr *g, struct http_slice h,
                                              struct regex_captures *caps)
{
    for (unsigned i = 0; i < g->n_servers; i++) {
        const struct site_server *s = g->servers[i];
        for (unsigned k = 0; k < s->n_names; k++)
            if (s->names[k].kind == SITE_NAME_REGEX &&
                regex_match(&s->names[k].re, h.p ? h.p : "", h.len, caps, NULL, 0) ==
                    REGEX_MATCH)
                return s;
    }
    return NULL;
}

const struct site_server *site_server_for(const struct site_set *set,
                                          const struct sockaddr *local, struct http_slice host)
{
    return site_server_find(set, local, host, NULL);
}

const struct site_server *site_server_find(const struct site_set *set,
                                           const struct sockaddr *local,
                                           struct http_slice host, struct regex_captures *caps)
{
    if (caps)
        caps->n = 0;
    const struct site_addr *g = site_addr_for(set, local);
    if (!g)
        return NULL;
    if (g->n_servers == 1 && !regex_named(g->servers[0]))
        return g->servers[0]; /* the address's only server answers any Host: no name to
                                 compare, no regex's groups to keep */
    struct http_slice h = host_name(host);
    const struct site_server *best[EXACT] = {NULL}; /* [LEADING], [TRAILING] */
    size_t best_len[EXACT] = {0};
    for (unsigned i = 0; i < g->n_servers; i++) {
        const struct site_server *s = g->servers[i];
        for (unsigned k = 0; k < s->n_names; k++) {
            int rank = name_match(&s->names[k], h);
            if (rank == EXACT)
                return s; /* the first server that names it, as nginx */
            if (rank != MISS && (!best[rank] || s->names[k].len > best_len[rank])) {
                best[rank] = s;
                best_len[rank] = s->names[k].len;
            }
        }
    }
    if (best[LEADING])
        return best[LEADING];
    if (best[TRAILING])
        return best[TRAILING];
    const struct site_server *by_regex = regex_server(g, h, caps);
    if (by_regex)
        return by_regex;
    return g->default_server ? g->default_server : g->servers[0];
}

/* The search among the locations of one block (nginx's ngx_http_core_find_location):
 * 1 when an exact or regex location decided, 0 when at most a prefix one was found (*out,
 * if any), -1 when a regex went over its limits. */
static int find_in(const struct site_nest *nest, const char *path, size_t len,
                   const struct site_location **out, struct regex_captures *caps, char *why,
                   size_t why_len)
{
    for (unsigned i = 0; i < nest->n_exact; i++)
        if (nest->exact[i]->pattern_len == len &&
            memcmp(nest->exact[i]->pattern, path, len) == 0)
            return *out = nest->exact[i], 1;
    const struct site_location *prefix = NULL;
    for (unsigned i = 0; i < nest->n_prefix && !prefix; i++) /* longest first */
        if (nest->prefix[i]->pattern_len <= len &&
            memcmp(nest->prefix[i]->pattern, path, nest->prefix[i]->pattern_len) == 0)
            prefix = nest->prefix[i];
    if (prefix) {
        *out = prefix;
        int rc = find_in(&prefix->inner, path, len, out, caps, why, why_len);
        if (rc != 0 || prefix->match == SITE_PREFIX_STOP)
            return rc;
    }
    for (unsigned i = 0; i < nest->n_regex; i++) {
        enum regex_result m = regex_match(&nest->regex[i]->re, path, len, caps, why, why_len);
        if (m == REGEX_LIMIT)
            return -1;
        if (m == REGEX_MATCH) {
            *out = nest->regex[i];
            return find_in(&nest->regex[i]->inner, path, len, out, caps, why, why_len) < 0
                       ? -1 : 1;
        }
    }
    return 0;
}

int site_location_find(const struct site_server *s, const char *path, size_t len,
                       const struct site_location **out, struct regex_captures *caps,
                       char *why, size_t why_len)
{
    *out = NULL;
    if (caps)
        caps->n = 0;
    return find_in(&s->top, path, len, out, caps, why, why_len) < 0 ? -1 : 0;
}

const struct site_location *site_location_for(const struct site_server *s, const char *path,
                                              size_t len)
{
    const struct site_location *loc;
    return site_location_find(s, path, len, &loc, NULL, NULL, 0) == 0 ? loc : NULL;
}

const struct site_location *site_location_slashed(const struct site_server *s,
                                                  const char *path, size_t len)
{
    for (unsigned i = 0; i < s->n_locations; i++) {
        const struct site_location *l = &s->locations[i];
        if ((l->match == SITE_EXACT || is_prefix(l->match)) && l->pattern_len == len + 1 &&
            l->pattern[len] == '/' && memcmp(l->pattern, path, len) == 0)
            return l;
    }
    return NULL;
}

const struct site_location *site_named_location(const struct site_server *s, const char *name)
{
    for (unsigned i = 0; i < s->n_named; i++)
        if (strcmp(s->named[i]->pattern, name) == 0)
            return s->named[i];
    return NULL;
}
