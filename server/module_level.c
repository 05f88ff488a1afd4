/* module_level.c — the settings of each block: the top level, every server, every location.
 *
 * Built once per generation, after the modules' init, from the statement tree: the sites
 * (site.h) say which blocks there are; each block gets a struct module_level holding the
 * core's settings (root or alias, index, try_files, return, error_page, a location's
 * handler) and each module's own (its block hook). Inheritance is nginx's: a block that
 * does not set root, index or error_page has its outer block's; try_files and return
 * belong to the block that says them. Read-only afterwards, shared by every thread.
 */
#include "module_level.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
    if (root || alias)
        l->alias_file = NULL;
    if (root) {
        l->root = open_root(b, root->args[0], root->line, "root", true);
        l->alias = false;
        rc |= l->root ? 0 : -1;
    }
    if (alias) {
        if (loc->match != SITE_PREFIX && loc->match != SITE_PREFIX_STOP &&
            loc->match != SITE_EXACT)
            return conf_error(&b->r, alias->line, "alias: only in a prefix or exact location "
                              "(a regex location would need captures)");
        l->root = alias_root(b, l, alias);
        l->alias = true;
        l->alias_prefix_len = loc->pattern_len;
        rc |= l->root ? 0 : -1;
    }
    const struct conf_node *n;
    l->internal = loc && find(first, l->context, CONFIG_ID_INTERNAL);
    if ((n = find(first, l->context, CONFIG_ID_INDEX)))
        rc |= read_index(b, l, n, index_room);
    if ((n = find(first, l->context, CONFIG_ID_TRY_FILES)))
        rc |= read_try_files(b, l, n);
    if ((n = find(first, l->context, CONFIG_ID_RETURN)))
        rc |= read_return(b, l, n);
    struct rewrite_prog *prog;
    rc |= rewrite_build(&b->r, first, l->context, &prog);
    l->rewrite = prog;
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

/* The top level: the configuration's root (the -r flag's, when given) and index. */
static int build_top(struct level_build *b, struct module_level *l, char *err, size_t len)
{
    l->context = CONF_TOP;
    const struct conf_node *root = find(b->cfg->tree, CONF_TOP, CONFIG_ID_ROOT);
    if (!root && find(b->cfg->tree, CONF_TOP, CONFIG_ID_SERVER) &&
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
    redirect_flags(l, NULL, b->cfg->tree);
    int rc = l->root ? 0 : -1;
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
        n += set->servers[i].n_locations;
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
            c->n_levels++;
            rc |= read_modules(&b, ll, outer, loc->node, loc->first, loc, err, err_len);
            loc->level = ll;
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
    rewrite_free((struct rewrite_prog *)l->rewrite);
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

void module_block_slash_redirect(const struct module_block *b)
{
    size_t n = strlen(b->pattern);
    if (b->context == CONF_LOCATION && b->prefix_location && n && b->pattern[n - 1] == '/')
        b->level->slash_redirect = true;
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
    m->level_only = true;
    m->line = where ? where->line : 0;
    c->has_mounts[mi->index] = true;
    b->level->mount = m;
    return 0;
}
