/* generation.c — building a configuration generation, comparing two, and counting their
 * references. See generation.h. */
#include "generation.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

void generation_origin(const struct config *cfg, const char *name, char *out, size_t len)
{
    const struct conf_node *n = cfg->file[0] ? config_next(cfg, name, NULL) : NULL;
    if (n)
        snprintf(out, len, "%.3000s:%u: ", conf_line_file(n->line, cfg->file),
                 conf_line_no(n->line));
    else
        out[0] = '\0';
}

/* The document root must be a directory. The message says where it was set and which
 * directory that is: a relative root is relative to where the server started, which is
 * not always where its user thinks. */
static int check_root(const struct config *cfg, const struct generation_source *o, char *err,
                      size_t len)
{
    struct stat sb;
    int rc = stat(cfg->root, &sb);
    if (rc == 0 && S_ISDIR(sb.st_mode))
        return 0;
    const char *why = rc < 0 ? strerror(errno) : "not a directory";
    char where[CONFIG_PATH_MAX + 32], cwd[CONFIG_PATH_MAX] = "";
    if (o->root)
        snprintf(where, sizeof(where), "-r: ");
    else
        generation_origin(cfg, "root", where, sizeof(where));
    if (cfg->root[0] != '/' && !getcwd(cwd, sizeof(cwd)))
        cwd[0] = '\0';
    snprintf(err, len, "%.1000sroot \"%.500s\"%s (%.1000s%s%.500s): %s", where, cfg->root,
             where[0] ? "" : " (the default)", cwd, cwd[0] ? "/" : "", cfg->root, why);
    return -1;
}

int generation_check_logs(const struct generation *g, char *err, size_t len)
{
    const struct config *cfg = &g->cfg;
    const char *names[] = {"error_log", "access_log"};
    const char *dests[] = {cfg->error_log, cfg->access_log};
    for (int i = 0; i < 2; i++) {
        if (log_check_dest(dests[i]) < 0) {
            char where[CONFIG_PATH_MAX + 32];
            generation_origin(cfg, names[i], where, sizeof(where));
            snprintf(err, len, "%.1000s%s \"%.500s\": %s", where, names[i], dests[i],
                     strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* Read the file and apply the command line on top. Returns 0 or -1 with a message. */
static int load_config(struct config *cfg, const struct generation_source *o, char *err,
                       size_t len)
{
    config_defaults(cfg);
    const char *path = o->conf;
    if (!path && access(GENERATION_DEFAULT_CONF, F_OK) == 0)
        path = GENERATION_DEFAULT_CONF;
    if (path && config_load(cfg, path, module_known_directive, err, len) < 0)
        return -1;
    if (o->n_listen) {
        cfg->n_listen = 0;
        for (unsigned i = 0; i < o->n_listen; i++) {
            if (config_parse_listen(o->listen[i], &cfg->listen[cfg->n_listen++]) < 0) {
                snprintf(err, len, "-l: invalid address \"%s\"", o->listen[i]);
                return -1;
            }
        }
        unsigned at = 0;
        char msg[400];
        if (config_listen_settle(cfg->listen, cfg->n_listen, &at, msg, sizeof(msg)) < 0) {
            snprintf(err, len, "-l: %s", msg);
            return -1;
        }
    }
    if (o->root)
        snprintf(cfg->root, sizeof(cfg->root), "%s", o->root);
    if (o->threads) {
        char *end;
        long n = strtol(o->threads, &end, 10);
        if (*end || n < 0 || n > 1024) {
            snprintf(err, len, "-n: invalid thread count \"%s\"", o->threads);
            return -1;
        }
        cfg->threads = (unsigned)n;
    }
    /* With server blocks, a top-level root is needed only if the file says one: each
     * server may have its own (nginx does not check its default root either). */
    bool optional = (!o->root && !config_next(cfg, "root", NULL) &&
                     config_next(cfg, "server", NULL)) ||
                    strchr(cfg->root, '$'); /* a root with variables: per request */
    if (!optional && check_root(cfg, o, err, len) < 0)
        return -1;
    if (cfg->threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        cfg->threads = n > 0 ? (unsigned)n : 1;
    }
    return 0;
}

struct generation *generation_build(const struct generation_source *o, unsigned number,
                                    char *err, size_t len)
{
    struct generation *g = calloc(1, sizeof(*g));
    if (!g) {
        snprintf(err, len, "out of memory");
        return NULL;
    }
    g->number = number;
    g->root_fd = -1;
    if (load_config(&g->cfg, o, err, len) < 0) {
        if (g->cfg.tree) /* the file parsed: the modules' errors are reported too */
            module_chain_check(&g->cfg, err, len);
        goto fail;
    }
    const struct config *cfg = &g->cfg;
    /* A root with variables is opened per request, beneath the directory its literal text
     * begins with (module_level.c), not here. */
    bool root_vars = strchr(cfg->root, '$') != NULL;
    g->root_fd = root_vars ? -1 : open(cfg->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root_vars) {
        snprintf(g->root_real, sizeof(g->root_real), "%s", cfg->root);
    } else if ((g->root_fd < 0 || !realpath(cfg->root, g->root_real)) && !o->root &&
        !config_next(cfg, "root", NULL) && config_next(cfg, "server", NULL)) {
        snprintf(g->root_real, sizeof(g->root_real), "%s", cfg->root); /* see load_config */
    } else if (g->root_fd < 0 || !realpath(cfg->root, g->root_real)) {
        char where[CONFIG_PATH_MAX + 32];
        generation_origin(cfg, "root", where, sizeof(where));
        snprintf(err, len, "%.1000sroot \"%.500s\": %s", o->root ? "-r: " : where, cfg->root,
                 strerror(errno));
        goto fail;
    }
    g->limits.max_header_bytes = cfg->max_header_size;
    g->limits.max_headers = cfg->max_headers;
    /* The modules check their own directives (paths that must exist, and so on). */
    if (module_chain_init(&g->chain, cfg, err, len) < 0)
        goto fail;
    g->chain_ready = true;
    /* HTTPS: its servers' certificates, after the sites they belong to. */
    if (tls_set_build(cfg, g->chain.sites, &g->tls, err, len) < 0)
        goto fail;
    return g;
fail:
    generation_free(g);
    return NULL;
}

static bool same_listen(const struct config_listen *a, unsigned na,
                        const struct config_listen *b, unsigned nb)
{
    if (na != nb)
        return false;
    for (unsigned i = 0; i < na; i++)
        if (a[i].addr_len != b[i].addr_len || memcmp(&a[i].addr, &b[i].addr, a[i].addr_len) ||
            a[i].reuseport != b[i].reuseport)
            return false;
    return true;
}

/* The socket parameters of the same addresses: what the sockets were made with (a
 * listening socket's are not changed in place). */
static bool same_socket_params(const struct config_listen *a, const struct config_listen *b,
                               unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (a[i].via_wildcard != b[i].via_wildcard || a[i].backlog != b[i].backlog ||
            a[i].rcvbuf_bytes != b[i].rcvbuf_bytes || a[i].sndbuf_bytes != b[i].sndbuf_bytes ||
            a[i].ipv6only_off != b[i].ipv6only_off || a[i].fastopen != b[i].fastopen ||
            a[i].fastopen_qlen != b[i].fastopen_qlen || a[i].so_keepalive != b[i].so_keepalive ||
            a[i].keepidle_s != b[i].keepidle_s || a[i].keepintvl_s != b[i].keepintvl_s ||
            a[i].keepcnt != b[i].keepcnt)
            return false;
    return true;
}

const char *generation_needs_restart(const struct config *a, const struct config *b)
{
    if (!same_listen(a->listen, a->n_listen, b->listen, b->n_listen))
        return "listen";
    if (!same_socket_params(a->listen, b->listen, a->n_listen))
        return "listen (backlog=, rcvbuf=, sndbuf=, ipv6only=, so_keepalive=, fastopen= or bind)";
    if (a->threads != b->threads)
        return "threads";
    if (a->groups != b->groups)
        return "groups";
    if (a->concurrency != b->concurrency)
        return "concurrency";
    if (a->reactivation != b->reactivation)
        return "reactivation";
    if (a->promotion != b->promotion)
        return "promotion";
    if (a->max_connections != b->max_connections)
        return "max_connections";
    if (strcmp(a->error_log, b->error_log) || a->error_level != b->error_level)
        return "error_log";
    if (strcmp(a->access_log, b->access_log))
        return "access_log";
    if (a->access_log_json != b->access_log_json)
        return "access_log_format";
    if (a->server_tokens != b->server_tokens)
        return "server_tokens";
    if (a->n_classes != b->n_classes)
        return "class (added or removed)";
    for (unsigned i = 0; i < a->n_classes; i++) {
        const struct config_class *x = &a->classes[i], *y = &b->classes[i];
        if (strcmp(x->name, y->name) || x->threads != y->threads || x->groups != y->groups ||
            x->nice != y->nice ||
            x->max_connections != y->max_connections ||
            !same_listen(x->listen, x->n_listen, y->listen, y->n_listen))
            return "class (name, threads, groups, priority, max_connections or listen)";
    }
    return NULL;
}

/* --- references ------------------------------------------------------------------------ */

struct generation *generation_acquire(struct generation_current *cur)
{
    /* Under the lock, so the generation cannot lose its last reference (the server's)
     * between being read and being held. */
    pthread_mutex_lock(&cur->lock);
    struct generation *g = atomic_load_explicit(&cur->gen, memory_order_relaxed);
    atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
    pthread_mutex_unlock(&cur->lock);
    return g;
}

void generation_hold(struct generation *g)
{
    atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
}

void generation_release(struct generation *g)
{
    if (atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) == 1)
        generation_free(g);
}

void generation_free(struct generation *g)
{
    if (!g)
        return;
    tls_set_free(g->tls);
    if (g->chain_ready)
        module_chain_fini(&g->chain);
    if (g->root_fd >= 0)
        close(g->root_fd);
    config_free(&g->cfg);
    free(g);
}

/* --- the current generation ----------------------------------------------------------- */

void generation_current_init(struct generation_current *cur)
{
    atomic_init(&cur->gen, NULL);
    pthread_mutex_init(&cur->lock, NULL);
    atomic_init(&cur->number, 0);
}

void generation_install(struct generation_current *cur, struct generation *g)
{
    atomic_store_explicit(&g->refs, 1, memory_order_relaxed);
    pthread_mutex_lock(&cur->lock);
    struct generation *old = atomic_load_explicit(&cur->gen, memory_order_relaxed);
    atomic_store_explicit(&cur->gen, g, memory_order_relaxed);
    pthread_mutex_unlock(&cur->lock);
    atomic_store_explicit(&cur->number, g->number, memory_order_relaxed);
    if (old)
        generation_release(old);
}

void generation_current_fini(struct generation_current *cur)
{
    struct generation *g = atomic_exchange(&cur->gen, NULL);
    if (g)
        generation_release(g);
}
