/* module_chain.c — the module chain, and the one table that lists the modules. */
#include "module_chain.h"
#include "upstream.h"

#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "module_figures.h"

/* The modules, in the order the chain calls them. A new module is one line here and one
 * in the table below. mod_auth comes first of the access hooks: access hooks run before any
 * handler anyway, but first in the table its refusal (403, 401) is decided before any other
 * module's access hook could answer, as nginx's access phase comes before content. mod_realip
 * has only a post-read hook and mod_limit only a preaccess hook, which the chain calls
 * before every access hook, in that order (nginx's phases). */
extern const struct module mod_realip;   /* the client's address from a trusted proxy */
extern const struct module mod_limit;    /* limit_req, limit_conn (nginx's preaccess phase) */
extern const struct module mod_auth;     /* allow/deny, then HTTP Basic authentication */
extern const struct module mod_mime;     /* content types: extension table, then libmagic */
extern const struct module mod_dirlist;  /* listings of directories without an index file */
extern const struct module mod_static;   /* files from the document root */
extern const struct module mod_handlers; /* in-process handlers on prefixes: echo, hello, status */
extern const struct module mod_metrics;  /* `handler PREFIX metrics;`: Prometheus's format */
extern const struct module mod_stub_status; /* `stub_status;`: nginx's basic status page */
extern const struct module mod_cgi;      /* CGI/1.1 scripts mounted on prefixes */
extern const struct module mod_proxy;    /* proxy_pass: answers from upstream servers */
extern const struct module mod_fastcgi;  /* fastcgi_pass: answers from FastCGI applications */
extern const struct module mod_uwsgi;    /* uwsgi_pass: answers from uwsgi applications */
extern const struct module mod_scgi;     /* scgi_pass: answers from SCGI applications */
extern const struct module mod_gzip;     /* compresses responses (a filter) */
extern const struct module mod_headers;  /* add_header, expires: after gzip, on final statuses */
extern const struct module mod_log;      /* log_format, a server's or location's access_log */

static const struct module *const module_table[] = {
    &mod_realip,   &mod_limit,   &mod_auth,        &mod_mime, &mod_dirlist, &mod_static,
    &mod_handlers, &mod_metrics, &mod_stub_status, &mod_cgi,  &mod_fastcgi, &mod_uwsgi,
    &mod_scgi,     &mod_proxy,
    &mod_gzip,     &mod_headers, &mod_log,
};

#define MODULE_COUNT (sizeof(module_table) / sizeof(module_table[0]))
_Static_assert(MODULE_COUNT <= MODULE_CHAIN_MAX, "the chain's arrays hold every module");

unsigned module_chain_index(const struct module *m)
{
    unsigned i = 0;
    while (i < MODULE_COUNT && module_table[i] != m)
        i++;
    return i;
}

const struct conf_directive *module_known_directive(const char *name, unsigned context)
{
    const struct conf_directive *any = NULL;
    for (size_t i = 0; i < MODULE_COUNT; i++) {
        const struct conf_directive *d = conf_table_find(module_table[i]->directives, name,
                                                         context);
        if (d && (d->contexts & context))
            return d;
        if (d && !any)
            any = d;
    }
    return any;
}

void module_dump_directives(FILE *out)
{
    for (size_t i = 0; i < MODULE_COUNT; i++)
        conf_dump_table(out, module_table[i]->name, module_table[i]->directives);
}

int module_error(struct module_init *mi, const struct conf_node *where, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    const char *name = mi->chain->mods[mi->index]->name;
    if (where)
        config_error_append(mi->err, mi->err_len, "%s:%u: %s: %s",
                            conf_line_file(where->line, mi->cfg->file),
                            conf_line_no(where->line), name, msg);
    else
        config_error_append(mi->err, mi->err_len, "%s: %s", name, msg);
    return -1;
}

int module_temp_path_read(const struct conf_node *n, char *msg, size_t len)
{
    for (unsigned i = 1; i < n->n_args; i++)
        if (strcmp(n->args[i], "1") != 0 && strcmp(n->args[i], "2") != 0)
            return snprintf(msg, len, "invalid level \"%s\" (1 or 2)", n->args[i]), -1;
    struct stat st;
    if (stat(n->args[0], &st) < 0 && errno == ENOENT && mkdir(n->args[0], 0700) < 0 &&
        errno != EEXIST)
        return snprintf(msg, len, "cannot make \"%s\": %s", n->args[0], strerror(errno)), -1;
    if (stat(n->args[0], &st) < 0 || !S_ISDIR(st.st_mode))
        return snprintf(msg, len, "\"%s\" is not a directory", n->args[0]), -1;
    return 0;
}

int module_dir_for_user(struct module_init *mi, const struct conf_node *where, const char *dir)
{
    const struct config *cfg = mi->cfg;
    if (!cfg->user[0] || geteuid() != 0)
        return 0;
    const struct passwd *pw = getpwnam(cfg->user);
    struct stat st;
    if (!pw || stat(dir, &st) < 0) /* (an unknown user is the start's error) */
        return 0;
    /* A directory all may write in (/tmp) is left as it is: never given away. */
    if (st.st_uid == pw->pw_uid || (st.st_mode & S_IWOTH))
        return 0;
    if (chown(dir, pw->pw_uid, (gid_t)-1) < 0)
        return module_error(mi, where, "cannot give \"%s\" to user %s: %s", dir, cfg->user,
                            strerror(errno));
    return 0;
}

int module_read_directives(struct module_init *mi, void *base)
{
    const struct module *m = mi->chain->mods[mi->index];
    struct conf_reader r = {
        .file = mi->cfg->file,
        .owner = m->name,
        .context = CONF_TOP,
        .ctx = mi,
        .err = mi->err,
        .err_len = mi->err_len,
    };
    return conf_read_owned(&r, m->directives, mi->cfg->tree, base);
}

const struct conf_node *module_directive(struct module_init *mi, const char *name)
{
    return config_next(mi->cfg, name, NULL);
}

const struct conf_node *module_directive_next(struct module_init *mi, const char *name,
                                              const struct conf_node *after)
{
    return config_next(mi->cfg, name, after);
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
            return module_error(mi, where, "\"%s\" is already mounted (first at %s:%u)",
                                prefix, conf_line_file(c->mounts[i].line, mi->cfg->file),
                                conf_line_no(c->mounts[i].line));
    if (c->n_mounts == MODULE_MOUNTS_MAX)
        return module_error(mi, where, "too many mounts");
    struct module_mount *m = &c->mounts[c->n_mounts++];
    memcpy(m->prefix, prefix, len + 1);
    m->prefix_len = len;
    m->module = mi->index;
    m->data = data;
    m->wants_body = wants_body;
    m->streams_body = m->streams_chunked = false;
    m->line = where ? where->line : 0;
    c->has_mounts[mi->index] = true;
    return 0;
}

/* levels: build the blocks' settings too; not over a configuration whose statements did
 * not all read (their arguments were never checked). */
static int chain_init(struct module_chain *c, const struct config *cfg, char *err,
                      size_t err_len, bool levels)
{
    memset(c, 0, sizeof(*c));
    if (err_len)
        err[0] = '\0';
    bool failed[MODULE_COUNT] = {false}, any = false;
    for (size_t i = 0; i < MODULE_COUNT; i++) {
        const struct module *m = module_table[i];
        c->mods[c->n] = m;
        struct module_init mi = {cfg, c, c->n, err, err_len};
        void *state = NULL;
        if (m->init && m->init(&mi, &state) < 0)
            failed[i] = any = true;
        c->state[c->n] = state;
        if (m->log)
            c->log_mods[c->n_log_mods++] = (uint8_t)c->n;
        if (m->logs_request)
            c->logs_request_mods[c->n_logs_request_mods++] = (uint8_t)c->n;
        if (m->rewrite)
            c->rewrite_mods[c->n_rewrite_mods++] = (uint8_t)c->n;
        if (m->access)
            c->access_mods[c->n_access_mods++] = (uint8_t)c->n;
        if (m->filter)
            c->filter_mods[c->n_filter_mods++] = (uint8_t)c->n;
        c->n++;
    }
    if (!any && (!levels || module_levels_build(c, cfg, err, err_len) == 0))
        return 0;
    if (!any)
        module_levels_free(c);
    while (c->n > 0) { /* fini only for those whose init succeeded */
        c->n--;
        if (!failed[c->n] && c->mods[c->n]->fini)
            c->mods[c->n]->fini(c->state[c->n]);
    }
    return -1;
}

int module_chain_init(struct module_chain *c, const struct config *cfg, char *err,
                      size_t err_len)
{
    return chain_init(c, cfg, err, err_len, true);
}

void module_chain_check(const struct config *cfg, char *err, size_t err_len)
{
    struct module_chain *c = malloc(sizeof(*c));
    char *more = malloc(err_len);
    if (c && more && chain_init(c, cfg, more, err_len, false) < 0)
        config_error_append(err, err_len, "%s", more);
    else if (c && more)
        module_chain_fini(c);
    free(more);
    free(c);
}

void module_chain_fini(struct module_chain *c)
{
    module_levels_free(c);
    while (c->n > 0) {
        c->n--;
        if (c->mods[c->n]->fini)
            c->mods[c->n]->fini(c->state[c->n]);
    }
}

void module_metrics(const struct request *req, struct strbuf *b)
{
    const struct module_chain *c = req->chain;
    for (unsigned i = 0; c && i < c->n; i++)
        if (c->mods[i]->metrics)
            c->mods[i]->metrics(c->state[i], b);
}

unsigned module_upstreams(const struct request *req, struct upstream **out, unsigned max)
{
    const struct module_chain *c = req->chain;
    unsigned n = 0;
    for (unsigned i = 0; c && i < c->n; i++)
        if (c->mods[i]->upstreams)
            n += c->mods[i]->upstreams(c->state[i], out + (n < max ? n : max),
                                       n < max ? max - n : 0);
    /* An `upstream` block two modules read (fastcgi_pass's copy, then proxy_pass's) is
     * listed once, by the first: the same name twice would be the same series twice. */
    unsigned stored = n < max ? n : max, kept = 0;
    for (unsigned k = 0; k < stored; k++) {
        bool twice = false;
        for (unsigned j = 0; j < kept && out[k]->name[0] && !twice; j++)
            twice = strcmp(out[j]->name, out[k]->name) == 0;
        if (!twice)
            out[kept++] = out[k];
    }
    return n - (stored - kept);
}

const struct site_set *module_sites(const struct request *req)
{
    return req->chain ? req->chain->sites : NULL;
}

bool module_chain_logs_request(const struct module_chain *c, const struct request *req)
{
    for (unsigned k = 0; k < c->n_logs_request_mods; k++) {
        unsigned i = c->logs_request_mods[k];
        if (c->mods[i]->logs_request(c->state[i], req))
            return true;
    }
    return false;
}

void module_chain_tick(const struct module_chain *c, int64_t now_ms)
{
    for (unsigned i = 0; i < c->n; i++)
        if (c->mods[i]->tick)
            c->mods[i]->tick(c->state[i], now_ms);
}

void module_chain_log(const struct module_chain *c, const struct request *req,
                      const struct response *resp)
{
    for (unsigned k = 0; k < c->n_log_mods; k++) {
        unsigned i = c->log_mods[k];
        c->mods[i]->log(c->state[i], req, resp);
    }
}

const char *module_content_type(const struct request *req, const char *path, int fd,
                                const struct stat *st)
{
    const struct module_chain *c = req->chain;
    for (unsigned i = 0; c && i < c->n; i++) {
        if (!c->mods[i]->content_type)
            continue;
        const char *t = c->mods[i]->content_type(c->state[i], req, path, fd, st);
        if (t)
            return t;
    }
    return "application/octet-stream";
}
