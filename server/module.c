/* module.c — the module chain, and the one table that lists the modules. */
#include "module.h"

#include <stdio.h>
#include <string.h>

/* The modules, in the order the chain calls them. A new module is one line here and one
 * in the table below. */
extern const struct module mod_mime;     /* content types: extension table, then libmagic */
extern const struct module mod_dirlist;  /* listings of directories without an index file */
extern const struct module mod_static;   /* files from the document root */
extern const struct module mod_handlers; /* in-process handlers on prefixes: echo, hello, status */
extern const struct module mod_cgi;      /* CGI/1.1 scripts mounted on prefixes */
extern const struct module mod_gzip;     /* compresses responses (a filter) */

static const struct module *const module_table[] = {
    &mod_mime, &mod_dirlist, &mod_static, &mod_handlers, &mod_cgi, &mod_gzip,
};

#define MODULE_COUNT (sizeof(module_table) / sizeof(module_table[0]))

bool module_known_directive(const char *name)
{
    for (size_t i = 0; i < MODULE_COUNT; i++) {
        const char *const *d = module_table[i]->directives;
        for (; d && *d; d++)
            if (strcmp(*d, name) == 0)
                return true;
    }
    return false;
}

int module_error(struct module_init *mi, const struct conf_node *where, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    const char *name = mi->chain->mods[mi->index]->name;
    if (where)
        snprintf(mi->err, mi->err_len, "%s:%u: %s: %s", mi->cfg->file, where->line, name, msg);
    else
        snprintf(mi->err, mi->err_len, "%s: %s", name, msg);
    return -1;
}

int module_single_directive(struct module_init *mi, const char *name, const char *usage,
                            const struct conf_node **out)
{
    const struct conf_node *n = config_next(mi->cfg, name, NULL);
    *out = n;
    if (!n)
        return 0;
    if (n->is_block || n->n_args != 1)
        return module_error(mi, n, "usage: %s", usage);
    return 0;
}

int module_flag_directive(struct module_init *mi, const char *name, bool *out)
{
    char usage[96];
    snprintf(usage, sizeof(usage), "%s on|off;", name);
    const struct conf_node *n;
    if (module_single_directive(mi, name, usage, &n) < 0)
        return -1;
    if (!n)
        return 0;
    if (strcmp(n->args[0], "on") != 0 && strcmp(n->args[0], "off") != 0)
        return module_error(mi, n, "%s is on or off, not \"%s\"", name, n->args[0]);
    *out = strcmp(n->args[0], "on") == 0;
    return 0;
}

int module_duration_directive(struct module_init *mi, const char *name, unsigned *out_ms)
{
    char usage[96];
    snprintf(usage, sizeof(usage), "%s TIME;", name);
    const struct conf_node *n;
    if (module_single_directive(mi, name, usage, &n) < 0)
        return -1;
    if (n && config_parse_duration_ms(n->args[0], out_ms) < 0)
        return module_error(mi, n, "%s: invalid duration \"%s\"", name, n->args[0]);
    return 0;
}

int module_mount_add(struct module_init *mi, const struct conf_node *where, const char *prefix,
                     void *data, bool wants_body)
{
    struct module_chain *c = mi->chain;
    size_t len = strlen(prefix);
    if (prefix[0] != '/' || len >= sizeof(c->mounts[0].prefix))
        return module_error(mi, where, "a mount prefix starts with '/' and is short: \"%s\"",
                            prefix);
    for (unsigned i = 0; i < c->n_mounts; i++)
        if (strcmp(c->mounts[i].prefix, prefix) == 0)
            return module_error(mi, where, "\"%s\" is already mounted", prefix);
    if (c->n_mounts == MODULE_MOUNTS_MAX)
        return module_error(mi, where, "too many mounts");
    struct module_mount *m = &c->mounts[c->n_mounts++];
    memcpy(m->prefix, prefix, len + 1);
    m->prefix_len = len;
    m->module = mi->index;
    m->data = data;
    m->wants_body = wants_body;
    c->has_mounts[mi->index] = true;
    return 0;
}

int module_chain_init(struct module_chain *c, const struct config *cfg, char *err,
                      size_t err_len)
{
    memset(c, 0, sizeof(*c));
    for (size_t i = 0; i < MODULE_COUNT; i++) {
        const struct module *m = module_table[i];
        c->mods[c->n] = m;
        struct module_init mi = {cfg, c, c->n, err, err_len};
        void *state = NULL;
        if (m->init && m->init(&mi, &state) < 0) {
            module_chain_fini(c);
            return -1;
        }
        c->state[c->n] = state;
        c->n++;
    }
    return 0;
}

void module_chain_fini(struct module_chain *c)
{
    while (c->n > 0) {
        c->n--;
        if (c->mods[c->n]->fini)
            c->mods[c->n]->fini(c->state[c->n]);
    }
}

/* A prefix matches the path itself, or the path continues with '/' after it
 * ("/echo" matches "/echo" and "/echo/x", not "/echoes"; "/cgi-bin/" matches below it). */
static bool prefix_matches(const struct module_mount *m, const char *path, size_t len)
{
    if (len < m->prefix_len || memcmp(path, m->prefix, m->prefix_len) != 0)
        return false;
    return len == m->prefix_len || m->prefix[m->prefix_len - 1] == '/' ||
           path[m->prefix_len] == '/';
}

void module_chain_route(const struct module_chain *c, struct request *req)
{
    for (unsigned i = 0; i < c->n; i++)
        if (c->mods[i]->rewrite)
            c->mods[i]->rewrite(c->state[i], req);
    req->mount = NULL;
    for (unsigned i = 0; i < c->n_mounts; i++) {
        const struct module_mount *m = &c->mounts[i];
        if (prefix_matches(m, req->path, req->path_len) &&
            (!req->mount || m->prefix_len > req->mount->prefix_len))
            req->mount = m;
    }
}

static bool call_handle(const struct module_chain *c, unsigned i, const struct request *req,
                        struct response *resp)
{
    enum mod_result r = c->mods[i]->handle(c->state[i], req, resp);
    if (r == MOD_ERROR)
        resp_error(resp, 500);
    return r != MOD_DECLINED;
}

static void handle(const struct module_chain *c, const struct request *req,
                   struct response *resp)
{
    for (unsigned i = 0; i < c->n; i++) {
        if (!c->mods[i]->access)
            continue;
        enum mod_result r = c->mods[i]->access(c->state[i], req, resp);
        if (r == MOD_ERROR)
            resp_error(resp, 500);
        if (r != MOD_DECLINED)
            return;
    }
    if (req->mount) {
        /* Only the owner: a handler that declines must not let static files serve, say,
         * a CGI script's source. */
        unsigned i = req->mount->module;
        if (c->mods[i]->handle && call_handle(c, i, req, resp))
            return;
        resp_error(resp, 404);
        return;
    }
    for (unsigned i = 0; i < c->n; i++)
        if (c->mods[i]->handle && !c->has_mounts[i] && call_handle(c, i, req, resp))
            return;
    resp_error(resp, 404);
}

void module_chain_answer(const struct module_chain *c, const struct request *req,
                         struct response *resp)
{
    handle(c, req, resp);
    for (unsigned i = 0; i < c->n; i++)
        if (c->mods[i]->filter)
            c->mods[i]->filter(c->state[i], req, resp);
}

void module_chain_log(const struct module_chain *c, const struct request *req,
                      const struct response *resp)
{
    for (unsigned i = 0; i < c->n; i++)
        if (c->mods[i]->log)
            c->mods[i]->log(c->state[i], req, resp);
}

const char *module_content_type(const struct request *req, const char *path, int fd,
                                const struct stat *st)
{
    const struct module_chain *c = req->chain;
    for (unsigned i = 0; c && i < c->n; i++) {
        if (!c->mods[i]->content_type)
            continue;
        const char *t = c->mods[i]->content_type(c->state[i], path, fd, st);
        if (t)
            return t;
    }
    return "application/octet-stream";
}
