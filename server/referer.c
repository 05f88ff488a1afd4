/* referer.c — `valid_referers` and $invalid_referer (see referer.h). */
#include "referer.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "regex.h"

#define REFERER_HOST_MAX 256 /* a longer host is invalid, as nginx's */

enum referer_kind { REF_EXACT, REF_LEADING, REF_TRAILING };

struct referer_name {
    enum referer_kind kind;
    char *host;      /* lowercase; leading: ".example.org"; trailing: "example." */
    size_t host_len;
    bool bare_too;   /* ".example.org": example.org itself too */
    char *uri;       /* the URI prefix, "/galleries/"; NULL: any */
    size_t uri_len;
};

struct referer_list {
    bool none, blocked;
    unsigned n_names, n_regex, n_server_regex;
    struct referer_name *names;
    struct regex *regex;                     /* ~REGEX: on the text after the scheme */
    const struct regex **server_regex;       /* server_names' regex names: on the host */
};

void referer_list_free(struct referer_list *l)
{
    if (!l)
        return;
    for (unsigned i = 0; i < l->n_names; i++) {
        free(l->names[i].host);
        free(l->names[i].uri);
    }
    for (unsigned i = 0; i < l->n_regex; i++)
        regex_free(&l->regex[i]);
    free(l->names);
    free(l->regex);
    free(l->server_regex);
    free(l);
}

/* A name as written: HOST[/URI], HOST with a leading "*." or '.', or a trailing ".*". */
static int add_name(struct conf_reader *r, unsigned line, struct referer_list *l,
                    const char *text, size_t len)
{
    struct referer_name *n = &l->names[l->n_names];
    const char *slash = memchr(text, '/', len);
    size_t host_len = slash ? (size_t)(slash - text) : len;
    n->kind = REF_EXACT;
    const char *host = text;
    if (host_len > 2 && strncmp(host, "*.", 2) == 0) {
        n->kind = REF_LEADING;
        host++, host_len--;
    } else if (host_len > 1 && host[0] == '.') {
        n->kind = REF_LEADING;
        n->bare_too = true;
    } else if (host_len > 2 && strncmp(host + host_len - 2, ".*", 2) == 0) {
        n->kind = REF_TRAILING;
        host_len--;
    }
    if (host_len == 0 || host_len >= REFERER_HOST_MAX || memchr(host, '*', host_len))
        return conf_error(r, line, "valid_referers: invalid server name \"%.*s\"", (int)len,
                          text);
    n->host = strndup(host, host_len);
    if (!n->host)
        return conf_error(r, line, "out of memory");
    for (size_t i = 0; i < host_len; i++)
        n->host[i] = (char)(n->host[i] >= 'A' && n->host[i] <= 'Z' ? n->host[i] + 32
                                                                    : n->host[i]);
    n->host_len = host_len;
    if (slash) {
        n->uri_len = len - (size_t)(slash - text);
        n->uri = strndup(slash, n->uri_len);
        if (!n->uri)
            return conf_error(r, line, "out of memory");
    }
    l->n_names++;
    return 0;
}

static int add_server_names(struct conf_reader *r, unsigned line, struct referer_list *l,
                            const struct site_server *server)
{
    for (unsigned i = 0; server && i < server->n_names; i++) {
        const struct site_name *sn = &server->names[i];
        if (sn->kind == SITE_NAME_REGEX) {
            l->server_regex[l->n_server_regex++] = &sn->re;
            continue;
        }
        if (sn->len == 0)
            continue; /* `server_name ""`: no Referer has an empty host */
        char text[REFERER_HOST_MAX + 2];
        int n = sn->kind == SITE_NAME_LEADING && !sn->bare_too
                    ? snprintf(text, sizeof(text), "*%s", sn->text)
                : sn->kind == SITE_NAME_TRAILING ? snprintf(text, sizeof(text), "%s*", sn->text)
                                                 : snprintf(text, sizeof(text), "%s", sn->text);
        if (n < 0 || (size_t)n >= sizeof(text) || add_name(r, line, l, text, (size_t)n) < 0)
            return -1;
    }
    return 0;
}

int referer_list_build(struct conf_reader *r, const struct conf_node *first,
                       const struct site_server *server, struct referer_list **out)
{
    *out = NULL;
    unsigned args = 0;
    bool any = false;
    for (const struct conf_node *n = first; n; n = n->next)
        if (strcmp(n->name, "valid_referers") == 0 && !n->is_block) {
            args += n->n_args;
            any = true;
        }
    if (!any)
        return 0;
    unsigned names = args + (server ? server->n_names : 0);
    struct referer_list *l = calloc(1, sizeof(*l));
    if (!l || !(l->names = calloc(names + 1, sizeof(*l->names))) ||
        !(l->regex = calloc(args + 1, sizeof(*l->regex))) ||
        !(l->server_regex = calloc(names + 1, sizeof(*l->server_regex)))) {
        referer_list_free(l);
        return conf_error(r, first->line, "out of memory");
    }
    int rc = 0;
    bool server_names = false;
    unsigned line = 0;
    for (const struct conf_node *n = first; n; n = n->next) {
        if (strcmp(n->name, "valid_referers") != 0 || n->is_block)
            continue;
        line = line ? line : n->line;
        for (unsigned i = 0; i < n->n_args; i++) {
            const char *a = n->args[i];
            if (strcmp(a, "none") == 0) {
                l->none = true;
            } else if (strcmp(a, "blocked") == 0) {
                l->blocked = true;
            } else if (strcmp(a, "server_names") == 0) {
                if (!server_names)
                    rc |= add_server_names(r, n->line, l, server);
                server_names = true;
            } else if (a[0] == '~') {
                char err[256];
                if (regex_compile(&l->regex[l->n_regex], a + 1, REGEX_CASELESS, err,
                                  sizeof(err)) < 0)
                    rc |= conf_error(r, n->line, "valid_referers: \"%s\": %s", a, err);
                else
                    l->n_regex++;
            } else {
                rc |= add_name(r, n->line, l, a, strlen(a));
            }
        }
    }
    if (!rc && (l->none || l->blocked) && !l->n_names && !l->n_regex && !l->n_server_regex)
        rc = conf_error(r, line, "valid_referers: \"none\" or \"blocked\" without "
                        "any valid referer (as nginx refuses it)");
    if (rc) {
        referer_list_free(l);
        return -1;
    }
    *out = l;
    return 0;
}

/* The name that takes host[0, len): exact, else the longest leading wildcard, else the
 * longest trailing one; NULL: none. */
static const struct referer_name *find_name(const struct referer_list *l, const char *host,
                                            size_t len)
{
    const struct referer_name *lead = NULL, *trail = NULL;
    for (unsigned i = 0; i < l->n_names; i++) {
        const struct referer_name *n = &l->names[i];
        if (n->kind == REF_EXACT && n->host_len == len && memcmp(n->host, host, len) == 0)
            return n;
        if (n->kind == REF_LEADING && (!lead || n->host_len > lead->host_len) &&
            ((len > n->host_len && memcmp(host + len - n->host_len, n->host, n->host_len) == 0) ||
             (n->bare_too && len == n->host_len - 1 && memcmp(host, n->host + 1, len) == 0)))
            lead = n;
        if (n->kind == REF_TRAILING && (!trail || n->host_len > trail->host_len) &&
            len > n->host_len && memcmp(host, n->host, n->host_len) == 0)
            trail = n;
    }
    return lead ? lead : trail;
}

bool referer_valid(const struct referer_list *l, const struct http_request *h)
{
    if (!l)
        return true;
    const struct http_header *f = h ? http_find_header(h, "referer") : NULL;
    if (!f)
        return l->none;
    const char *p = f->value.p;
    size_t len = f->value.len, skip;
    if (len >= 7 && strncasecmp(p, "http://", 7) == 0)
        skip = 7;
    else if (len >= 8 && strncasecmp(p, "https://", 8) == 0)
        skip = 8;
    else
        skip = 0;
    if (len < sizeof("http://i.ru") - 1 || !skip)
        return l->blocked;
    const char *ref = p + skip, *end = p + len;
    char host[REFERER_HOST_MAX];
    size_t n = 0;
    const char *q = ref;
    for (; q < end && *q != '/' && *q != ':'; q++) {
        if (n == sizeof(host))
            return false;
        host[n++] = (char)(*q >= 'A' && *q <= 'Z' ? *q + 32 : *q);
    }
    const struct referer_name *name = find_name(l, host, n);
    if (name) {
        if (!name->uri)
            return true;
        while (q < end && *q != '/') /* the port */
            q++;
        return (size_t)(end - q) >= name->uri_len && memcmp(q, name->uri, name->uri_len) == 0;
    }
    for (unsigned i = 0; i < l->n_server_regex; i++)
        if (regex_match(l->server_regex[i], host, n, NULL, NULL, 0) == REGEX_MATCH)
            return true;
    for (unsigned i = 0; i < l->n_regex; i++)
        if (regex_match(&l->regex[i], ref, (size_t)(end - ref), NULL, NULL, 0) == REGEX_MATCH)
            return true;
    return false;
}
