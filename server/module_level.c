/* module_level.c — the settings of each block: the top level, every server, every location.
 *
 * Built once per generation, after the modules' init, from the statement tree: the sites
 * (site.h) say which blocks there are; each block gets a struct module_level holding the
 * core's settings (root or alias, index, try_files, return, error_page, a location's
 * handler, the connection settings of struct config_limits) and each module's own (its
 * block hook). Inheritance is nginx's: a block that does not set root, index, error_page
 * or a connection setting has its outer block's; try_files and return belong to the block
 * that says them. Read-only afterwards, shared by every thread.
 */
#include "module_level.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "http_parse.h"
#include "log.h"
#include "referer.h"
#include "rewrite.h"
#include "site.h"
#include "vars.h"

/* What building the levels needs at hand. */
struct level_build {
    struct module_chain *c;
    const struct config *cfg;
    struct conf_reader r; /* the core's messages: "FILE:LINE: message" */
};

/* A server's or location's root (or alias) that does not exist: not an error, as in nginx,
 * whose requests find it missing. A root that opens nothing: its requests are answered 404,
 * with an error-log line each (module_route.c), until a reload finds the directory. */
static const struct level_root *missing_root(struct level_build *b, const char *path,
                                             unsigned line, const char *what)
{
    struct module_chain *c = b->c;
    const char *why = strerror(errno);
    for (unsigned i = 0; i < c->n_roots; i++)
        if (c->roots[i].fd < 0 && strcmp(c->roots[i].real, path) == 0)
            return &c->roots[i];
    struct level_root *r = &c->roots[c->n_roots];
    r->real = strdup(path);
    if (!r->real) {
        conf_error(&b->r, line, "out of memory");
        return NULL;
    }
    r->fd = -1;
    r->id = c->n_roots++;
    conf_notice(&b->r, line, "%s \"%s\": %s: its requests are answered 404 until a reload "
                "finds it", what, path, why);
    return r;
}

/* The root at path, opened once: the same real path is the same root. NULL after an error.
 * In a server or location (may_miss), a directory that does not exist is missing_root's. */
static const struct level_root *open_root(struct level_build *b, const char *path,
                                          unsigned line, const char *what, bool may_miss)
{
    struct module_chain *c = b->c;
    char real[PATH_MAX];
    int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 && may_miss && (errno == ENOENT || errno == ENOTDIR))
        return missing_root(b, path, line, what);
    if (fd < 0 || !realpath(path, real)) {
        conf_error(&b->r, line, "%s \"%s\": %s", what, path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    for (unsigned i = 0; i < c->n_roots; i++)
        if (strcmp(c->roots[i].real, real) == 0) {
            close(fd);
            return &c->roots[i];
        }
    struct level_root *r = &c->roots[c->n_roots];
    r->real = strdup(real);
    if (!r->real) {
        close(fd);
        conf_error(&b->r, line, "out of memory");
        return NULL;
    }
    r->fd = fd;
    r->id = c->n_roots++;
    return r;
}

/* What the statement n sets, standing in context: its line of the core's table says
 * (.id), the one allowed there or else any (one where it may not stand was reported at
 * load); the names are the table's alone. */
static enum config_core_id core_id(const struct conf_node *n, unsigned context)
{
    const struct conf_directive *d = conf_table_find(config_core_directives(), n->name,
                                                     context);
    return d ? (enum config_core_id)d->id : CONFIG_ID_NONE;
}

/* The block's first statement, from first on, that sets id. */
static const struct conf_node *find(const struct conf_node *first, unsigned context,
                                    enum config_core_id id)
{
    for (const struct conf_node *n = first; n; n = n->next)
        if (core_id(n, context) == id)
            return n;
    return NULL;
}

static bool is_url(const char *s)
{
    return strncmp(s, "http://", 7) == 0 || strncmp(s, "https://", 8) == 0 ||
           strncmp(s, "$scheme", 7) == 0;
}

static int compile(struct level_build *b, unsigned line, const char *text,
                   enum vars_context ctx, const struct vars_value **out)
{
    char msg[256];
    struct vars_value *v;
    if (vars_compile(text, ctx, &v, msg, sizeof(msg)) < 0)
        return conf_error(&b->r, line, "\"%s\": %s", text, msg);
    *out = v;
    return 0;
}

/* A status code as nginx's return and error_page take them. */
static int parse_status(const char *s, int lo, int hi)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s < '0' || *s > '9' || *end || v < lo || v > hi)
        return -1;
    return (int)v;
}

static bool is_redirect(int status)
{
    return status == 301 || status == 302 || status == 303 || status == 307 ||
           status == 308;
}

/* `return CODE [URL|TEXT];` or `return URL;` (302). */
static int read_return(struct level_build *b, struct module_level *l, const struct conf_node *n)
{
    if (n->n_args == 1 && is_url(n->args[0])) {
        l->return_status = 302;
        return compile(b, n->line, n->args[0], VARS_HEADER, &l->return_text);
    }
    int status = parse_status(n->args[0], 200, 599);
    if (status < 0)
        return conf_error(&b->r, n->line, "return: invalid code \"%s\" (200 to 599, or a URL "
                          "starting with http:// or https://)", n->args[0]);
    l->return_status = status;
    if (n->n_args == 1)
        return 0;
    /* A redirect's URL goes into a header; a text into the body, as it is. */
    return compile(b, n->line, n->args[1], is_redirect(status) ? VARS_HEADER : VARS_RAW,
                   &l->return_text);
}

static int read_try_files(struct level_build *b, struct module_level *l,
                          const struct conf_node *n)
{
    const char *last = n->args[n->n_args - 1];
    if (last[0] == '=' && parse_status(last + 1, 200, 599) < 0)
        return conf_error(&b->r, n->line, "try_files: invalid code \"%s\"", last);
    if (last[0] != '=' && last[0] != '/' && last[0] != '@' && last[0] != '$')
        return conf_error(&b->r, n->line, "try_files: the last argument is a URI, =CODE or "
                          "@NAME: \"%s\"", last);
    for (unsigned i = 0; i < n->n_args; i++) {
        /* "$uri/" asks for a directory: tested without the slash, as nginx does, so that
         * /dir found this way is redirected to /dir/ like any directory. */
        char arg[CONFIG_PATH_MAX];
        snprintf(arg, sizeof(arg), "%s", n->args[i]);
        size_t al = strlen(arg);
        l->try_dir[i] = i + 1 < n->n_args && al > 1 && arg[al - 1] == '/';
        if (l->try_dir[i])
            arg[al - 1] = '\0';
        if (compile(b, n->line, arg, VARS_RAW, &l->try_files[i]) < 0)
            return -1;
        l->n_try = i + 1;
    }
    return 0;
}

/* Every `error_page CODE... [=ANSWER] URI` of a block; NULL count 0 when it has none. */
static int read_error_pages(struct level_build *b, struct module_level *l,
                            const struct conf_node *first)
{
    unsigned n = 0;
    for (const struct conf_node *s = first; s; s = s->next)
        if (core_id(s, l->context) == CONFIG_ID_ERROR_PAGE)
            n += s->n_args - 1;
    if (n == 0)
        return 0;
    struct level_error_page *pages = calloc(n, sizeof(*pages));
    if (!pages)
        return conf_error(&b->r, 0, "out of memory");
    l->error_pages = pages;
    l->error_pages_own = true;
    for (const struct conf_node *s = first; s; s = s->next) {
        if (core_id(s, l->context) != CONFIG_ID_ERROR_PAGE)
            continue;
        unsigned codes = s->n_args - 1;
        int answer = 0;
        const char *a = s->args[codes - 1];
        if (a[0] == '=') {
            codes--;
            /* A bare "=": the page's own answer, as nginx's `error_page 404 = /x;`. */
            answer = a[1] ? parse_status(a + 1, 200, 599) : LEVEL_ANSWER_OWN;
            if (answer == -1 || codes == 0)
                return conf_error(&b->r, s->line, "error_page: invalid answer \"%s\"", a);
        }
        const struct vars_value *uri;
        const char *target = s->args[s->n_args - 1];
        if (target[0] != '/' && target[0] != '@' && !is_url(target))
            return conf_error(&b->r, s->line, "error_page: \"%s\" is not a URI, a URL or "
                              "@NAME", target);
        for (unsigned i = 0; i < codes; i++) /* every code checked before any is kept */
            if (parse_status(s->args[i], 300, 599) < 0)
                return conf_error(&b->r, s->line, "error_page: invalid code \"%s\" (300 to "
                                  "599)", s->args[i]);
        if (compile(b, s->line, target, VARS_HEADER, &uri) < 0)
            return -1;
        /* The first code of the statement owns the compiled URI; the others share it. */
        for (unsigned i = 0; i < codes; i++)
            pages[l->n_error_pages++] =
                (struct level_error_page){parse_status(s->args[i], 300, 599), answer, uri};
    }
    return 0;
}

/* The index names with variables, compiled; each owned by l. */
static int compile_index(struct level_build *b, struct module_level *l, unsigned line)
{
    memset(l->index_values, 0, sizeof(l->index_values));
    l->index_values_own = true;
    for (unsigned i = 0; i < l->n_index; i++)
        if (strchr(l->index[i], '$') &&
            compile(b, line, l->index[i], VARS_RAW, &l->index_values[i]) < 0)
            return -1;
    return 0;
}

static int read_index(struct level_build *b, struct module_level *l, const struct conf_node *n,
                      char (*own)[256])
{
    for (unsigned i = 0; i < n->n_args; i++) {
        const char *a = n->args[i];
        if (strlen(a) >= 256 || a[0] == '\0' || (a[0] != '/' && strchr(a, '/')))
            return conf_error(&b->r, n->line, "invalid index file name \"%s\"", a);
        snprintf(own[i], 256, "%s", a);
    }
    l->index = (const char (*)[256])own;
    l->n_index = n->n_args;
    return compile_index(b, l, n->line);
}

/* The core's settings of a server or location block, over those of outer. */
/* `alias DIR` opens DIR; `alias FILE` (`location = /favicon.ico { alias /srv/fav.ico; }`)
 * opens the file's directory, and the location's path alone names the file. */
static const struct level_root *alias_root(struct level_build *b, struct module_level *l,
                                           const struct conf_node *alias)
{
    const char *path = alias->args[0];
    struct stat st;
    const char *slash = strrchr(path, '/');
    if (stat(path, &st) < 0 || !S_ISREG(st.st_mode) || !slash || !slash[1])
        return open_root(b, path, alias->line, "alias", true);
    char dir[PATH_MAX];
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    if (n >= sizeof(dir))
        return conf_error(&b->r, alias->line, "alias \"%s\": too long", path), NULL;
    memcpy(dir, path, n);
    dir[n] = '\0';
    l->alias_file = slash; /* "/NAME", in the statement, which outlives the levels */
    return open_root(b, dir, alias->line, "alias", true);
}

/* The value of statement n, a size, duration or count, into field: parsed and bounded by
 * its line of the core's table, and reported with its file and line. */
static int read_number(struct level_build *b, unsigned context, const struct conf_node *n,
                       void *field, size_t size)
{
    struct conf_directive line = *conf_table_find(config_core_directives(), n->name, context);
    line.set = NULL;
    line.offset = 0;
    line.size = size;
    return conf_apply(&b->r, &line, n, field);
}

/* client_max_body_size, client_body_buffer_size, client_body_timeout, keepalive_timeout,
 * keepalive_requests and send_timeout: what the block sets, else the outer block's
 * (nginx's merge). */
static int read_limits(struct level_build *b, struct module_level *l,
                       const struct module_level *outer, const struct conf_node *first)
{
    struct config_limits *m = &l->limits;
    *m = outer->limits;
    int rc = 0;
    const struct conf_node *n;
    char msg[256];
    if ((n = find(first, l->context, CONFIG_ID_CLIENT_MAX_BODY_SIZE)))
        rc |= read_number(b, l->context, n, &m->max_body_size, sizeof(m->max_body_size));
    if ((n = find(first, l->context, CONFIG_ID_CLIENT_BODY_BUFFER_SIZE)))
        rc |= read_number(b, l->context, n, &m->client_body_buffer_size,
                          sizeof(m->client_body_buffer_size));
    if ((n = find(first, l->context, CONFIG_ID_CLIENT_BODY_TIMEOUT)))
        rc |= read_number(b, l->context, n, &m->client_body_timeout_ms,
                          sizeof(m->client_body_timeout_ms));
    if ((n = find(first, l->context, CONFIG_ID_KEEPALIVE_REQUESTS)))
        rc |= read_number(b, l->context, n, &m->keepalive_requests,
                          sizeof(m->keepalive_requests));
    if ((n = find(first, l->context, CONFIG_ID_SEND_TIMEOUT)))
        rc |= read_number(b, l->context, n, &m->send_timeout_ms, sizeof(m->send_timeout_ms));
    if ((n = find(first, l->context, CONFIG_ID_LIMIT_RATE)))
        rc |= read_number(b, l->context, n, &m->limit_rate, sizeof(m->limit_rate));
    if ((n = find(first, l->context, CONFIG_ID_LIMIT_RATE_AFTER)))
        rc |= read_number(b, l->context, n, &m->limit_rate_after,
                          sizeof(m->limit_rate_after));
    if ((n = find(first, l->context, CONFIG_ID_KEEPALIVE_TIME)))
        rc |= read_number(b, l->context, n, &m->keepalive_time_ms,
                          sizeof(m->keepalive_time_ms));
    if ((n = find(first, l->context, CONFIG_ID_KEEPALIVE_DISABLE)) &&
        config_parse_keepalive_disable(n, &m->keepalive_disable, msg, sizeof(msg)) < 0)
        rc |= conf_error(&b->r, n->line, "keepalive_disable: %s", msg);
    if ((n = find(first, l->context, CONFIG_ID_KEEPALIVE_TIMEOUT)) &&
        config_parse_keepalive(n, &m->keepalive_timeout_ms, &m->keepalive_header_s, msg,
                               sizeof(msg)) < 0)
        rc |= conf_error(&b->r, n->line, "keepalive_timeout: %s", msg);
    return rc;
}

/* `error_log PATH [LEVEL];` of a server or location: opened now, as nginx opens its files
 * at load (the level checked when read, config.c). */
static int read_error_log(struct level_build *b, struct module_level *l,
                          const struct conf_node *n)
{
    struct log_dest *d = calloc(1, sizeof(*d));
    if (!d)
        return conf_error(&b->r, n->line, "out of memory");
    d->level = LOG_LEVEL_ERROR; /* nginx's default */
    if (n->n_args == 2)
        config_log_level(n->args[1], &d->level, &d->quiet);
    const char *path = n->args[0];
    bool off = strcmp(path, "off") == 0 && n->n_args == 1;
    if (off) { /* nothing written (config.c) */
        d->fd = -1;
        d->quiet = true;
    } else if (strcmp(path, "stderr") == 0 || strcmp(path, "stdout") == 0)
        d->fd = path[3] == 'e' ? 2 : 1;
    else
        d->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (d->fd < 0 && !off) {
        int err = errno;
        free(d);
        return conf_error(&b->r, n->line, "error_log \"%s\": %s", path, strerror(err));
    }
    l->error_log = d;
    l->error_log_own = true;
    return 0;
}

/* root or alias with variables (or an alias in a regex location): compiled, and the
 * directory its literal text begins with opened as the anchor that every file it names
 * stays beneath ("/srv" of "/srv/$host", "/" of "$dir"). A `..` that a variable brings is
 * refused per request (module_route.c), and the anchor's descriptor keeps anything else,
 * a symlink included, from leading out of it. */
static int read_root_value(struct level_build *b, struct module_level *l, unsigned line,
                           const char *text, const char *what)
{
    char msg[256];
    struct vars_value *v;
    if (strstr(text, "$realpath_root") || strstr(text, "${realpath_root}"))
        return conf_error(&b->r, line, "the $realpath_root variable cannot be used in "
                          "the \"%s\" directive", what);
    if (vars_compile(text, VARS_RAW, &v, msg, sizeof(msg)) < 0)
        return conf_error(&b->r, line, "%s \"%s\": %s", what, text, msg);
    const char *dollar = strchr(text, '$');
    size_t lit = dollar ? (size_t)(dollar - text) : strlen(text);
    size_t anchor = 0;
    for (size_t i = 0; i < lit; i++)
        if (text[i] == '/')
            anchor = i;
    char dir[PATH_MAX];
    if (anchor >= sizeof(dir)) {
        vars_free(v);
        return conf_error(&b->r, line, "%s \"%s\": too long", what, text);
    }
    if (anchor == 0 && text[0] == '/')
        snprintf(dir, sizeof(dir), "/");
    else if (anchor == 0)
        snprintf(dir, sizeof(dir), "%s", text[0] == '$' ? "/" : ".");
    else
        snprintf(dir, sizeof(dir), "%.*s", (int)anchor, text);
    l->root = open_root(b, dir, line, what, true);
    l->root_value = v;
    l->root_value_own = true;
    l->root_anchor_len = anchor;
    return l->root ? 0 : -1;
}

/* server_name_in_redirect and port_in_redirect: the block's own, else the outer block's
 * (outer NULL: the top level, whose defaults are nginx's, off and on). */
static void redirect_flags(struct module_level *l, const struct module_level *outer,
                           const struct conf_node *first)
{
    l->name_in_redirect = outer && outer->name_in_redirect;
    l->no_port_in_redirect = outer && outer->no_port_in_redirect;
    const struct conf_node *n = find(first, l->context, CONFIG_ID_SERVER_NAME_IN_REDIRECT),
                           *p = find(first, l->context, CONFIG_ID_PORT_IN_REDIRECT);
    if (n)
        l->name_in_redirect = strcmp(n->args[0], "on") == 0;
    if (p)
        l->no_port_in_redirect = strcmp(p->args[0], "off") == 0;
}

static int read_core(struct level_build *b, struct module_level *l,
                     const struct module_level *outer, const struct site_location *loc,
                     const struct conf_node *first, char (*index_room)[256])
{
    int rc = 0;
    l->root = outer->root;
    l->alias = outer->alias;
    l->alias_prefix_len = outer->alias_prefix_len;
    l->alias_file = outer->alias_file;
    l->root_text = outer->root_text;
    l->root_text_len = outer->root_text_len;
    l->root_value = outer->root_value;
    l->root_anchor_len = outer->root_anchor_len;
    l->alias_whole = outer->alias_whole;
    l->index = outer->index;
    l->n_index = outer->n_index;
    memcpy(l->index_values, outer->index_values, sizeof(l->index_values));
    const struct conf_node *root = find(first, l->context, CONFIG_ID_ROOT),
                           *alias = find(first, l->context, CONFIG_ID_ALIAS);
    l->relative_redirect = outer->relative_redirect;
    const struct conf_node *ar = find(first, l->context,
                                          CONFIG_ID_ABSOLUTE_REDIRECT);
    if (ar)
        l->relative_redirect = strcmp(ar->args[0], "off") == 0;
    redirect_flags(l, outer, first);
    if (alias && !loc)
        return -1; /* not in a location: reported where it stands */
    if (root && alias)
        return conf_error(&b->r, alias->line, "alias: the location has a root too (%s:%u)",
                          conf_line_file(root->line, b->r.file), conf_line_no(root->line));
    if (root || alias) {
        l->alias_file = NULL;
        l->root_value = NULL;
        l->alias_whole = false;
        const char *text = (root ? root : alias)->args[0];
        l->root_text = text;
        l->root_text_len = strlen(text);
        if (root && l->root_text_len > 1 && text[l->root_text_len - 1] == '/')
            l->root_text_len--; /* nginx's root drops one trailing '/', its alias not */
    }
    if (root && strchr(root->args[0], '$')) {
        char text[PATH_MAX];
        snprintf(text, sizeof(text), "%.*s", (int)l->root_text_len, root->args[0]);
        rc |= read_root_value(b, l, root->line, text, "root");
        l->alias = false;
    } else if (root) {
        l->root = open_root(b, root->args[0], root->line, "root", true);
        l->alias = false;
        rc |= l->root ? 0 : -1;
    }
    bool regex_loc = loc && (loc->match == SITE_REGEX || loc->match == SITE_REGEX_ICASE);
    if (alias && loc->match == SITE_NAMED)
        return conf_error(&b->r, alias->line, "the \"alias\" directive cannot be used inside "
                          "the named location");
    if (alias && (regex_loc || strchr(alias->args[0], '$'))) {
        rc |= read_root_value(b, l, alias->line, alias->args[0], "alias");
        l->alias = true;
        l->alias_whole = regex_loc;
        l->alias_prefix_len = regex_loc ? 0 : loc->pattern_len;
    } else if (alias) {
        l->root = alias_root(b, l, alias);
        l->alias = true;
        l->alias_prefix_len = loc->pattern_len;
        rc |= l->root ? 0 : -1;
    }
    const struct conf_node *n;
    l->internal = loc && find(first, l->context, CONFIG_ID_INTERNAL);
    if ((n = find(first, l->context, CONFIG_ID_INDEX)))
        rc |= read_index(b, l, n, index_room);
    if (l->in_if) /* its rewrite module's statements run in the location's list */
        goto settings;
    if ((n = find(first, l->context, CONFIG_ID_TRY_FILES)))
        rc |= read_try_files(b, l, n);
    if ((n = find(first, l->context, CONFIG_ID_RETURN)))
        rc |= read_return(b, l, n);
    struct rewrite_prog *prog;
    rc |= rewrite_build(&b->r, first, l->context, &prog);
    l->rewrite = prog;
settings:
    l->error_log = outer->error_log;
    if ((n = find(first, l->context, CONFIG_ID_ERROR_LOG)))
        rc |= read_error_log(b, l, n);
    l->log_not_found = outer->log_not_found;
    l->referers = outer->referers; /* (a block's own: read_referers) */
    l->secure_link = outer->secure_link; /* (a block's own: read_secure_link) */
    if ((n = find(first, l->context, CONFIG_ID_LOG_NOT_FOUND)))
        l->log_not_found = strcmp(n->args[0], "on") == 0;
    l->class_index = outer->class_index;
    if ((n = find(first, l->context, CONFIG_ID_CLASS))) {
        l->class_index = 0;
        for (unsigned i = 0; i < b->cfg->n_classes && !l->class_index; i++)
            if (strcmp(b->cfg->classes[i].name, n->args[0]) == 0)
                l->class_index = i + 1;
        if (!l->class_index)
            rc |= conf_error(&b->r, n->line, "class: no class \"%s\" is defined",
                             n->args[0]);
    }
    rc |= read_limits(b, l, outer, first);
    rc |= read_error_pages(b, l, first);
    if (!l->error_pages) {
        l->error_pages = outer->error_pages;
        l->n_error_pages = outer->n_error_pages;
    }
    return rc;
}

/* Each module's settings for the block. */
static int read_modules(struct level_build *b, struct module_level *l,
                        const struct module_level *outer, const struct conf_node *node,
                        const struct conf_node *first, const struct site_location *loc,
                        char *err, size_t err_len)
{
    struct module_chain *c = b->c;
    int rc = 0;
    for (unsigned i = 0; i < c->n; i++) {
        const struct module *m = c->mods[i];
        if (!m->block)
            continue;
        struct module_init mi = {b->cfg, c, i, err, err_len};
        struct module_block mb = {
            .mi = &mi,
            .context = l->context,
            .node = node,
            .first = first,
            .outer = outer ? outer->conf[i] : NULL,
            .level = l,
            .prefix_location = loc && (loc->match == SITE_PREFIX ||
                                       loc->match == SITE_PREFIX_STOP ||
                                       loc->match == SITE_EXACT),
            .pattern = loc ? loc->pattern : "",
        };
        l->conf[i] = m->block(c->state[i], &mb);
        if (!l->conf[i])
            rc = -1;
    }
    return rc;
}

/* The statement n inside a location's `if`, checked as in the location itself: a
 * directive of some table (the core's, a module's) that may stand in a location. */
static int check_in_location(struct level_build *b, const struct conf_node *n)
{
    const struct module_chain *c = b->c;
    const struct conf_directive *d = conf_table_find(config_core_directives(), n->name,
                                                     CONF_LOCATION);
    for (unsigned i = 0; i < c->n && !(d && (d->contexts & CONF_LOCATION)); i++) {
        const struct conf_directive *m = conf_table_find(c->mods[i]->directives, n->name,
                                                         CONF_LOCATION);
        d = m && (!d || (m->contexts & CONF_LOCATION)) ? m : d;
    }
    if (!d)
        return conf_error(&b->r, n->line, "unknown directive \"%s\"%s", n->name,
                          conf_unknown_hint(n->name));
    if (!(d->contexts & CONF_LOCATION))
        return conf_error(&b->r, n->line, "\"%s\" directive is not allowed in a location "
                          "block", n->name);
    /* The core's (root, error_page) are read from the tree below: their form first, as a
     * location's own statements have had theirs checked (the modules check their own). */
    if (d->set == conf_set_later && conf_table_find(config_core_directives(), n->name,
                                                    CONF_LOCATION) == d)
        return conf_apply(&b->r, d, n, NULL);
    return 0;
}

/* An `if` in a location is nginx's implicit location: a level of its own, inside the
 * location's, whose settings (root, error_page, each module's: add_header, expires,
 * proxy_pass, access_log...) are the request's while its condition holds; the rewrite
 * module's statements in it run in the location's list (rewrite.c). What a location does
 * not pass on (try_files, return) is not the `if`'s either, as nginx's; its handler (a
 * proxy_pass) is, unless the `if` has its own. */
static int build_if(struct level_build *b, struct module_level *loc_level,
                    const struct site_location *loc, const struct conf_node *n,
                    char (*index_room)[LEVEL_INDEX_MAX][256], char *err, size_t err_len)
{
    struct module_chain *c = b->c;
    struct module_level *l = &c->levels[c->n_levels];
    int rc = 0;
    for (const struct conf_node *s = n->children; s; s = s->next)
        if (rewrite_if_takes(s->name))
            rc |= check_in_location(b, s);
    if (rc)
        return rc; /* read_core takes the statements' forms as checked */
    l->context = CONF_LOCATION;
    l->line = n->line;
    l->outer = loc_level;
    l->in_if = true;
    rc |= read_core(b, l, loc_level, loc, n->children, index_room[c->n_levels]);
    c->n_levels++;
    rc |= read_modules(b, l, loc_level, n, n->children, NULL, err, err_len);
    if (!l->mount)
        l->mount = loc_level->mount;
    l->class_index = loc_level->class_index;
    rewrite_set_if_level((struct rewrite_prog *)loc_level->rewrite, n, l);
    return rc;
}

/* What nginx lets stand inside `limit_except` (its NGX_HTTP_LMT_CONF directives). */
static const char *const limit_except_takes[] = {
    "allow", "deny", "auth_basic", "auth_basic_user_file", "access_log", "proxy_pass", NULL,
};

/* The methods of `limit_except`'s arguments that it lets by (GET brings HEAD), as bits
 * 1 << enum http_method; nginx's WebDAV methods lfhttpd answers 501 before any location. */
static unsigned limit_except_lets(const struct conf_node *n)
{
    static const struct {
        const char *name;
        enum http_method m;
    } known[] = {
        {"GET", HTTP_METHOD_GET},         {"HEAD", HTTP_METHOD_HEAD},
        {"POST", HTTP_METHOD_POST},       {"PUT", HTTP_METHOD_PUT},
        {"DELETE", HTTP_METHOD_DELETE},   {"OPTIONS", HTTP_METHOD_OPTIONS},
        {"PATCH", HTTP_METHOD_PATCH},
    };
    unsigned lets = 0;
    for (unsigned i = 0; i < n->n_args; i++)
        for (unsigned k = 0; k < sizeof(known) / sizeof(known[0]); k++)
            if (strcasecmp(n->args[i], known[k].name) == 0)
                lets |= 1u << known[k].m;
    if (lets & (1u << HTTP_METHOD_GET))
        lets |= 1u << HTTP_METHOD_HEAD;
    return lets;
}

/* `limit_except METHOD... { }` in a location: nginx's implicit location, whose settings
 * are those of a request of a method not named (module_route.c): its own (allow, deny,
 * auth_basic, access_log, proxy_pass), and the location's for the rest, as a block's
 * settings inherit, but for what a location does not pass on (rewrite, return,
 * try_files), as nginx's. */
static int build_limit_except(struct level_build *b, struct module_level *loc_level,
                              const struct site_location *loc, const struct conf_node *n,
                              char (*index_room)[LEVEL_INDEX_MAX][256], char *err,
                              size_t err_len)
{
    struct module_chain *c = b->c;
    struct module_level *l = &c->levels[c->n_levels];
    int rc = 0;
    for (const struct conf_node *s = n->children; s; s = s->next) {
        unsigned k = 0;
        while (limit_except_takes[k] && strcmp(limit_except_takes[k], s->name) != 0)
            k++;
        if (!limit_except_takes[k])
            rc |= conf_error(&b->r, s->line, "\"%s\" directive is not allowed here (in "
                             "limit_except: allow, deny, auth_basic, auth_basic_user_file, "
                             "access_log, proxy_pass)", s->name);
        else
            rc |= check_in_location(b, s);
    }
    if (rc)
        return rc;
    l->context = CONF_LOCATION;
    l->line = n->line;
    l->outer = loc_level;
    l->in_if = true;
    rc |= read_core(b, l, loc_level, loc, n->children, index_room[c->n_levels]);
    c->n_levels++;
    rc |= read_modules(b, l, loc_level, n, n->children, NULL, err, err_len);
    if (!l->mount)
        l->mount = loc_level->mount;
    l->internal = loc_level->internal;
    l->class_index = loc_level->class_index;
    loc_level->limit_except = l;
    loc_level->limit_except_lets = limit_except_lets(n);
    return rc;
}

/* The top level: the configuration's root (the -r flag's, when given) and index. */
/* The block's own `valid_referers`, if it has any (else the outer block's stay). */
static int read_referers(struct level_build *b, struct module_level *l,
                         const struct conf_node *first, const struct site_server *server)
{
    struct referer_list *list;
    if (referer_list_build(&b->r, first, server, &list) < 0)
        return -1;
    if (list) {
        l->referers = list;
        l->referers_own = true;
    }
    return 0;
}

/* The block's own secure_link, secure_link_md5 and secure_link_secret, over the outer
 * block's. */
static int read_secure_link(struct level_build *b, struct module_level *l,
                            const struct conf_node *first)
{
    int rc = 0;
    const struct conf_node *secret = NULL, *other = NULL;
    for (const struct conf_node *n = first; n; n = n->next) {
        if (strcmp(n->name, "secure_link_secret") == 0)
            secret = n;
        else if (strcmp(n->name, "secure_link") == 0 || strcmp(n->name, "secure_link_md5") == 0)
            other = other ? other : n;
    }
    /* nginx's merge: a block's secret stands alone (the outer block's expressions are not
     * its), and a block's expressions end the outer block's secret. */
    if (secret && other)
        return conf_error(&b->r, other->line, "secure_link_secret cannot be mixed with "
                          "secure_link and secure_link_md5 (as nginx)");
    if (secret)
        l->secure_link.link = l->secure_link.md5 = NULL;
    if (other)
        l->secure_link.secret = NULL;
    for (const struct conf_node *n = first; n; n = n->next) {
        if (n->is_block || n->n_args != 1)
            continue;
        unsigned k = strcmp(n->name, "secure_link") == 0       ? 1
                     : strcmp(n->name, "secure_link_md5") == 0 ? 2
                     : strcmp(n->name, "secure_link_secret") == 0 ? 3
                                                                  : 0;
        if (k == 3) {
            l->secure_link.secret = n->args[0];
        } else if (k) {
            const struct vars_value *v;
            if (compile(b, n->line, n->args[0], VARS_RAW, &v) < 0) {
                rc = -1;
                continue;
            }
            *(k == 1 ? &l->secure_link.link : &l->secure_link.md5) = v;
            l->secure_link_own[k - 1] = true;
        }
    }
    return rc;
}

static int build_top(struct level_build *b, struct module_level *l, char *err, size_t len)
{
    l->context = CONF_TOP;
    const struct conf_node *root = find(b->cfg->tree, CONF_TOP, CONFIG_ID_ROOT);
    l->root_text = b->cfg->root;
    l->root_text_len = strlen(b->cfg->root);
    if (l->root_text_len > 1 && b->cfg->root[l->root_text_len - 1] == '/')
        l->root_text_len--;
    int rv = 0;
    if (strchr(b->cfg->root, '$')) {
        char text[PATH_MAX];
        snprintf(text, sizeof(text), "%.*s", (int)l->root_text_len, b->cfg->root);
        rv = read_root_value(b, l, root ? root->line : 0, text, "root");
    } else if (!root && find(b->cfg->tree, CONF_TOP, CONFIG_ID_SERVER) &&
        access(b->cfg->root, F_OK) < 0) {
        /* The default root, missing, under servers that may all have their own: a root
         * that opens nothing (nginx does not check its default root either). */
        struct level_root *r = &b->c->roots[b->c->n_roots];
        r->fd = -1;
        r->real = strdup(b->cfg->root);
        r->id = b->c->n_roots++;
        l->root = r->real ? r : NULL;
    } else {
        l->root = open_root(b, b->cfg->root, root ? root->line : 0, "root", false);
    }
    l->index = b->cfg->index;
    l->n_index = b->cfg->n_index;
    const struct conf_node *ix = find(b->cfg->tree, CONF_TOP, CONFIG_ID_INDEX);
    if (compile_index(b, l, ix ? ix->line : 0) < 0)
        return -1;
    l->relative_redirect = !b->cfg->absolute_redirect;
    if (read_secure_link(b, l, b->cfg->tree) < 0)
        return -1;
    l->limits = (struct config_limits){
        .max_body_size = b->cfg->max_body_size,
        .client_body_buffer_size = b->cfg->client_body_buffer_size,
        .client_body_timeout_ms = b->cfg->client_body_timeout_ms,
        .keepalive_timeout_ms = b->cfg->keepalive_timeout_ms,
        .keepalive_header_s = b->cfg->keepalive_header_s,
        .keepalive_requests = b->cfg->keepalive_requests,
        .send_timeout_ms = b->cfg->send_timeout_ms,
        .keepalive_time_ms = b->cfg->keepalive_time_ms,
        .limit_rate = b->cfg->limit_rate,
        .limit_rate_after = b->cfg->limit_rate_after,
        .keepalive_disable = b->cfg->keepalive_disable,
        .say_keep_alive = b->cfg->http_block,
    };
    const struct conf_node *lnf = find(b->cfg->tree, CONF_TOP, CONFIG_ID_LOG_NOT_FOUND);
    l->log_not_found = !lnf || strcmp(lnf->args[0], "on") == 0;
    redirect_flags(l, NULL, b->cfg->tree);
    int rc = l->root && rv == 0 ? 0 : -1;
    rc |= read_error_pages(b, l, b->cfg->tree);
    rc |= read_modules(b, l, NULL, NULL, b->cfg->tree, NULL, err, len);
    return rc;
}

int module_levels_build(struct module_chain *c, const struct config *cfg, char *err,
                        size_t err_len)
{
    static atomic_uint_fast64_t builds;
    /* The notices join the file's (config.c's): the configuration owns their room. */
    char *notes = (char *)cfg->notes;
    struct level_build b = {c, cfg, {.file = cfg->file, .owner = "", .context = CONF_TOP,
                                     .err = err, .err_len = err_len, .notes = notes,
                                     .notes_len = sizeof(cfg->notes)}};
    c->id = atomic_fetch_add(&builds, 1) + 1;
    if (rewrite_maps_build(&b.r, cfg->tree, &c->maps) < 0)
        return -1;
    c->sites = site_set_build(cfg->tree, &b.r);
    if (!c->sites)
        return -1;
    struct site_set *set = c->sites;
    unsigned n = 1 + set->n_servers;
    for (unsigned i = 0; i < set->n_servers; i++)
        for (unsigned k = 0; k < set->servers[i].n_locations; k++) {
            n++;
            for (const struct conf_node *s = set->servers[i].locations[k].first; s;
                 s = s->next)
                n += core_id(s, CONF_LOCATION) == CONFIG_ID_IF || /* implicit locations */
                     core_id(s, CONF_LOCATION) == CONFIG_ID_LIMIT_EXCEPT;
        }
    c->levels = calloc(n, sizeof(*c->levels));
    c->roots = calloc(n, sizeof(*c->roots));
    /* Index lists a block sets: one room per level. */
    char(*index_room)[LEVEL_INDEX_MAX][256] = calloc(n, sizeof(*index_room));
    if (!c->levels || !c->roots || !index_room) {
        free(index_room);
        return conf_error(&b.r, 0, "out of memory");
    }
    c->index_room = index_room;
    int rc = build_top(&b, &c->levels[0], err, err_len);
    c->n_levels = 1;
    for (unsigned i = 0; i < set->n_servers; i++) {
        struct site_server *s = &set->servers[i];
        struct module_level *sl = &c->levels[c->n_levels];
        sl->context = CONF_SERVER;
        sl->line = s->node->line;
        rc |= read_core(&b, sl, &c->levels[0], NULL, s->first, index_room[c->n_levels]);
        rc |= read_referers(&b, sl, s->first, s);
        rc |= read_secure_link(&b, sl, s->first);
        c->n_levels++;
        rc |= read_modules(&b, sl, &c->levels[0], s->node, s->first, NULL, err, err_len);
        s->level = sl;
        for (unsigned k = 0; k < s->n_locations; k++) {
            struct site_location *loc = &s->locations[k];
            struct module_level *ll = &c->levels[c->n_levels];
            /* A nested location's outer block is its parent, built before it. */
            const struct module_level *outer = loc->parent ? loc->parent->level : sl;
            ll->context = CONF_LOCATION;
            ll->line = loc->node->line;
            ll->outer = outer;
            rc |= read_core(&b, ll, outer, loc, loc->first, index_room[c->n_levels]);
            rc |= read_referers(&b, ll, loc->first, s);
            rc |= read_secure_link(&b, ll, loc->first);
            c->n_levels++;
            rc |= read_modules(&b, ll, outer, loc->node, loc->first, loc, err, err_len);
            loc->level = ll;
            for (const struct conf_node *f = loc->first; f; f = f->next)
                if (core_id(f, CONF_LOCATION) == CONFIG_ID_IF)
                    rc |= build_if(&b, ll, loc, f, index_room, err, err_len);
                else if (core_id(f, CONF_LOCATION) == CONFIG_ID_LIMIT_EXCEPT)
                    rc |= build_limit_except(&b, ll, loc, f, index_room, err, err_len);
        }
    }
    return rc || b.r.errors ? -1 : 0;
}

static void free_level(struct module_chain *c, struct module_level *l)
{
    for (unsigned i = 0; i < c->n; i++) {
        const void *outer_conf = NULL;
        /* A block's settings that are its outer block's are freed there. */
        if (l->context == CONF_SERVER)
            outer_conf = c->levels[0].conf[i];
        if (l->context == CONF_LOCATION && l->outer)
            outer_conf = l->outer->conf[i];
        if (l->conf[i] && l->conf[i] != outer_conf && c->mods[i]->block_free)
            c->mods[i]->block_free(c->state[i], l->conf[i]);
    }
    for (unsigned i = 0; i < l->n_try; i++)
        vars_free((struct vars_value *)l->try_files[i]);
    for (unsigned i = 0; l->index_values_own && i < LEVEL_INDEX_MAX; i++)
        vars_free((struct vars_value *)l->index_values[i]);
    vars_free((struct vars_value *)l->return_text);
    if (l->root_value_own)
        vars_free((struct vars_value *)l->root_value);
    rewrite_free((struct rewrite_prog *)l->rewrite);
    if (l->referers_own)
        referer_list_free((struct referer_list *)l->referers);
    if (l->secure_link_own[0])
        vars_free((struct vars_value *)l->secure_link.link);
    if (l->secure_link_own[1])
        vars_free((struct vars_value *)l->secure_link.md5);
    if (l->error_log_own) {
        if (l->error_log->fd > 2)
            close(l->error_log->fd);
        free((void *)l->error_log);
    }
    if (l->error_pages_own) {
        for (unsigned i = 0; i < l->n_error_pages; i++)
            if (l->error_pages[i].uri &&
                (i == 0 || l->error_pages[i].uri != l->error_pages[i - 1].uri))
                vars_free((struct vars_value *)l->error_pages[i].uri);
        free((void *)l->error_pages);
    }
}

void module_levels_free(struct module_chain *c)
{
    /* Locations first, then servers, then the top level: inner settings may borrow. */
    for (unsigned i = c->n_levels; i-- > 0;)
        free_level(c, &c->levels[i]);
    free(c->levels);
    c->levels = NULL;
    c->n_levels = 0;
    for (unsigned i = 0; i < c->n_roots; i++) {
        if (c->roots[i].fd >= 0)
            close(c->roots[i].fd);
        free(c->roots[i].real);
    }
    free(c->roots);
    c->roots = NULL;
    c->n_roots = 0;
    free(c->index_room);
    c->index_room = NULL;
    site_set_free(c->sites);
    c->sites = NULL;
    rewrite_maps_free(c->maps);
    c->maps = NULL;
}

const void *module_settings(const struct request *req, unsigned index)
{
    return req->level ? req->level->conf[index] : NULL;
}

void module_log(const struct request *req, enum log_level level, const char *fmt, ...)
{
    const struct log_dest *d = req->level ? req->level->error_log : NULL;
    char msg[768], client[INET6_ADDRSTRLEN] = "-";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    const struct sockaddr *sa = req->peer;
    if (sa && sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, client, sizeof(client));
    else if (sa && sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, client,
                  sizeof(client));
    const struct http_request *h = req->http;
    /* The request line, as $request: from the method to the version after the target. */
    int line = h && h->method_name.len && h->target.len
                   ? (int)(h->target.p + h->target.len + 9 - h->method_name.p) : 0;
    log_msg_to(d, level, "%s, client: %s, request: \"%.*s\"", msg, client,
               line > 0 && line < 512 ? line : 0, line > 0 ? h->method_name.p : "");
}

bool module_log_not_found(const struct request *req)
{
    return !req->level || req->level->log_not_found;
}

int module_block_read(const struct module_block *b, void *base)
{
    struct module_init *mi = b->mi;
    const struct module *m = mi->chain->mods[mi->index];
    struct conf_reader r = {
        .file = mi->cfg->file,
        .owner = m->name,
        .context = b->context,
        .ctx = mi,
        .err = mi->err,
        .err_len = mi->err_len,
    };
    return conf_read_owned(&r, m->directives, b->first, base);
}

bool module_block_has(const struct module_block *b)
{
    const struct module *m = b->mi->chain->mods[b->mi->index];
    for (const struct conf_node *n = b->first; n; n = n->next) {
        const struct conf_directive *d = conf_table_find(m->directives, n->name, b->context);
        if (d && (d->contexts & b->context))
            return true;
    }
    return false;
}

void module_post_read_wanted(const struct module_block *b)
{
    struct module_chain *c = b->mi->chain;
    unsigned i = b->mi->index;
    for (unsigned k = 0; k < c->n_post_read_mods; k++)
        if (c->post_read_mods[k] == i)
            return;
    if (c->mods[i]->post_read)
        c->post_read_mods[c->n_post_read_mods++] = (uint8_t)i;
}

void module_block_slash_redirect(const struct module_block *b)
{
    size_t n = strlen(b->pattern);
    if (b->context == CONF_LOCATION && b->prefix_location && n && b->pattern[n - 1] == '/')
        b->level->slash_redirect = true;
}

void module_block_stream_body(const struct module_block *b, bool chunked)
{
    struct module_chain *c = b->mi->chain;
    if (!b->level->mount)
        return;
    struct module_mount *m = &c->mounts[b->level->mount - c->mounts]; /* (the chain's own) */
    m->streams_body = true;
    m->streams_chunked = chunked;
}

int module_block_mount(const struct module_block *b, const struct conf_node *where, void *data,
                       bool wants_body)
{
    struct module_init *mi = b->mi;
    struct module_chain *c = mi->chain;
    if (b->context != CONF_LOCATION)
        return module_error(mi, where, "a handler belongs in a location");
    if (b->level->mount)
        return module_error(mi, where, "the location has a handler already (%s:%u)",
                            conf_line_file(b->level->mount->line, mi->cfg->file),
                            conf_line_no(b->level->mount->line));
    size_t len = b->prefix_location ? strlen(b->pattern) : 0;
    if (len >= sizeof(c->mounts[0].prefix))
        return module_error(mi, where, "the location's prefix is too long for a handler");
    if (c->n_mounts == MODULE_MOUNTS_MAX)
        return module_error(mi, where, "too many mounts");
    struct module_mount *m = &c->mounts[c->n_mounts++];
    memcpy(m->prefix, b->pattern, len);
    m->prefix[len] = '\0';
    m->prefix_len = len;
    m->module = mi->index;
    m->data = data;
    m->wants_body = wants_body;
    m->streams_body = m->streams_chunked = false;
    m->level_only = true;
    m->line = where ? where->line : 0;
    c->has_mounts[mi->index] = true;
    b->level->mount = m;
    return 0;
}
