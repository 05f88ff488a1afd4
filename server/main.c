/* main.c — command line, configuration, signals; start the groups, wait, shut down. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server.h"

#define DEFAULT_CONF "conf/lfhttpd.conf"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: lfhttpd [-c FILE] [-l ADDR:PORT]... [-r DOCROOT] [-n THREADS] [-t] [-h] [-V]\n"
            "  -c FILE       configuration file (default: " DEFAULT_CONF
            " if it exists, else built-in defaults)\n"
            "  -l ADDR:PORT  listen here instead of the file's `listen` lines (repeatable)\n"
            "  -r DOCROOT    serve this directory instead of the file's `root`\n"
            "  -n THREADS    threads in the Leader/Followers group (0 = one per CPU)\n"
            "  -t            check the configuration and exit (0 valid, 1 not)\n"
            "  -h            this help\n"
            "  -V            print the version\n");
}

struct options {
    const char *conf;
    const char *listen[CONFIG_MAX_LISTEN];
    unsigned n_listen;
    const char *root;
    const char *threads;
    bool test_only;
};

/* Returns 0 to go on, 1 to exit with success (-h, -V), -1 on a usage error. */
static int parse_options(int argc, char **argv, struct options *o)
{
    int ch;
    while ((ch = getopt(argc, argv, "c:l:r:n:thV")) != -1) {
        switch (ch) {
        case 'c': o->conf = optarg; break;
        case 'l':
            if (o->n_listen == CONFIG_MAX_LISTEN) {
                fprintf(stderr, "lfhttpd: too many -l options\n");
                return -1;
            }
            o->listen[o->n_listen++] = optarg;
            break;
        case 'r': o->root = optarg; break;
        case 'n': o->threads = optarg; break;
        case 't': o->test_only = true; break;
        case 'h': usage(stdout); return 1;
        case 'V': printf("lfhttpd %s\n", LFHTTPD_VERSION); return 1;
        default: usage(stderr); return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "lfhttpd: unexpected argument \"%s\"\n", argv[optind]);
        return -1;
    }
    return 0;
}

/* Where a directive's value came from, for messages: "FILE:LINE: ", or "" for a built-in
 * default. */
static void origin(const struct config *cfg, const char *name, char *out, size_t len)
{
    const struct conf_node *n = cfg->file[0] ? config_next(cfg, name, NULL) : NULL;
    if (n)
        snprintf(out, len, "%.3000s:%u: ", cfg->file, n->line);
    else
        out[0] = '\0';
}

/* The document root must be a directory. The message says where it was set and which
 * directory that is: a relative root is relative to where the server started, which is
 * not always where its user thinks. */
static int check_root(const struct config *cfg, const struct options *o, char *err,
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
        origin(cfg, "root", where, sizeof(where));
    if (cfg->root[0] != '/' && !getcwd(cwd, sizeof(cwd)))
        cwd[0] = '\0';
    snprintf(err, len, "%.1000sroot \"%.500s\"%s (%.1000s%s%.500s): %s", where, cfg->root,
             where[0] ? "" : " (the default)", cwd, cwd[0] ? "/" : "", cfg->root, why);
    return -1;
}

/* The log files the start will open, checked without creating them (for -t). Returns 0,
 * or -1 with "FILE:LINE: directive \"path\": reason" in err. */
static int check_logs(const struct config *cfg, char *err, size_t len)
{
    const char *names[] = {"error_log", "access_log"};
    const char *dests[] = {cfg->error_log, cfg->access_log};
    for (int i = 0; i < 2; i++) {
        if (log_check_dest(dests[i]) < 0) {
            char where[CONFIG_PATH_MAX + 32];
            origin(cfg, names[i], where, sizeof(where));
            snprintf(err, len, "%.1000s%s \"%.500s\": %s", where, names[i], dests[i],
                     strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* Read the file and apply the command line on top. Returns 0 or -1 with a message. */
static int load_config(struct config *cfg, const struct options *o, char *err, size_t len)
{
    config_defaults(cfg);
    const char *path = o->conf;
    if (!path && access(DEFAULT_CONF, F_OK) == 0)
        path = DEFAULT_CONF;
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
    if (check_root(cfg, o, err, len) < 0)
        return -1;
    if (cfg->threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        cfg->threads = n > 0 ? (unsigned)n : 1;
    }
    return 0;
}

/* Read the configuration and build what depends on it (the document root, the parser's
 * limits, the module chain): a generation, not yet installed. -t builds one too, so that
 * it opens what a start would. Returns NULL with the message in err. */
static struct generation *build_generation(const struct options *o, unsigned number,
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
    g->root_fd = open(cfg->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (g->root_fd < 0 || !realpath(cfg->root, g->root_real)) {
        char where[CONFIG_PATH_MAX + 32];
        origin(cfg, "root", where, sizeof(where));
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
        if (a[i].addr_len != b[i].addr_len || memcmp(&a[i].addr, &b[i].addr, a[i].addr_len))
            return false;
    return true;
}

/* What a reload cannot change, because it was built once at start (sockets, threads,
 * groups, log files): the first such directive that differs, or NULL. */
static const char *needs_restart(const struct config *a, const struct config *b)
{
    if (!same_listen(a->listen, a->n_listen, b->listen, b->n_listen))
        return "listen";
    if (a->threads != b->threads)
        return "threads";
    if (a->concurrency != b->concurrency)
        return "concurrency";
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
        if (strcmp(x->name, y->name) || x->threads != y->threads || x->nice != y->nice ||
            x->max_connections != y->max_connections ||
            !same_listen(x->listen, x->n_listen, y->listen, y->n_listen))
            return "class (name, threads, priority, max_connections or listen)";
    }
    return NULL;
}

/* SIGHUP: build the new generation beside the running one and switch to it. Connections
 * move to it at their next request; a configuration that does not load, or that changes
 * what only a restart can, is refused and the running one stays. */
static void reload(struct server *srv, const struct options *o)
{
    char err[4096];
    struct generation *cur = atomic_load(&srv->gen); /* main is the only writer */
    struct generation *g = build_generation(o, cur->number + 1, err, sizeof(err));
    const char *what = g ? needs_restart(&cur->cfg, &g->cfg) : NULL;
    if (!g || what) {
        if (what) /* "NAME" or "NAME (DETAIL)": the directive's name stands quoted */
            snprintf(err, sizeof(err), "changing `%.*s`%s needs a restart",
                     (int)strcspn(what, " "), what, what + strcspn(what, " "));
        log_error("SIGHUP: configuration not reloaded: %s; still serving generation %u", err,
                  cur->number);
        generation_free(g);
        return;
    }
    server_install_generation(srv, g);
    log_info("SIGHUP: configuration reloaded (generation %u): new connections and the "
             "next request of open ones use it",
             g->number);
}

/* Class priorities are nice values relative to the process's own (high -10, normal 0,
 * low 10). Raising a thread above the process's own priority needs CAP_SYS_NICE (or
 * RLIMIT_NICE); without it, every class moves up by the same amount, so that the most
 * urgent runs at the process's own priority and the order between classes is kept.
 * Returns that shift (0 when the priorities can be applied as configured). */
static int priority_shift(const struct config *cfg)
{
    int lowest = 0;
    for (unsigned i = 0; i < cfg->n_classes; i++)
        lowest = cfg->classes[i].nice < lowest ? cfg->classes[i].nice : lowest;
    if (lowest == 0)
        return 0;
    errno = 0;
    int own = getpriority(PRIO_PROCESS, (id_t)gettid());
    if (own == -1 && errno)
        return -lowest;
    if (setpriority(PRIO_PROCESS, (id_t)gettid(), own + lowest) == 0) {
        setpriority(PRIO_PROCESS, (id_t)gettid(), own); /* a probe: put ours back */
        return 0;
    }
    log_warn("cannot raise thread priorities (%s: no CAP_SYS_NICE): keeping the order of "
             "the service classes by lowering the others by %d instead",
             strerror(errno), -lowest);
    return -lowest;
}

static int add_listener(struct server *srv, struct service *svc, const struct config_listen *a)
{
    struct listener *l = &srv->listeners[srv->n_listeners];
    if (listener_open(srv, l, a) < 0) {
        log_error("listen on %s: %s", a->text, strerror(errno));
        return -1;
    }
    srv->n_listeners++;
    l->svc = svc;
    if (lf_group_add(svc->group, &l->h, EPOLLIN) < 0) {
        log_error("epoll: %s", strerror(errno));
        return -1;
    }
    log_info("listening on %s (class %s)", l->addr.text, svc->name);
    return 0;
}

/* One service (a Leader/Followers group) per class, the default class first. */
static int start_services(struct server *srv)
{
    const struct config *cfg = &atomic_load(&srv->gen)->cfg;
    int shift = priority_shift(cfg);
    errno = 0;
    int own = getpriority(PRIO_PROCESS, (id_t)gettid());
    own = own == -1 && errno ? 0 : own;
    for (unsigned i = 0; i <= cfg->n_classes; i++) {
        const struct config_class *k = i ? &cfg->classes[i - 1] : NULL;
        unsigned threads = k ? k->threads : cfg->threads;
        if (threads == 0)
            threads = cfg->threads; /* 0: one per CPU, already resolved for the default */
        int nice = (k ? k->nice : 0) + shift;
        nice = nice > 19 ? 19 : nice;
        struct service *svc = &srv->svcs[srv->n_svcs];
        if (service_init(svc, srv, k ? k->name : "default", threads, nice ? own + nice : 0, k) <
            0) {
            log_error("cannot create the thread group of class %s: %s",
                      k ? k->name : "default", strerror(errno));
            return -1;
        }
        srv->n_svcs++;
        const struct config_listen *ls = k ? k->listen : cfg->listen;
        unsigned n = k ? k->n_listen : cfg->n_listen;
        for (unsigned j = 0; j < n; j++)
            if (add_listener(srv, svc, &ls[j]) < 0)
                return -1;
    }
    for (unsigned i = 0; i < srv->n_svcs; i++) {
        struct service *svc = &srv->svcs[i];
        int rc = lf_group_start(svc->group);
        if (rc < 0) {
            log_error("cannot start threads: %s", strerror(-rc));
            return -1;
        }
        log_info("class %s: %u threads at nice %d", svc->name, lf_group_threads(svc->group),
                 svc->nice ? svc->nice : own);
    }
    return 0;
}

/* Each connection is a descriptor, and so is each entry of the open-file cache: take the
 * hard limit, not the (often 1024) soft one. Done first, before the modules size their
 * caches by it. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static void check_fd_limit(unsigned want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)want + 64)
        log_warn("open files limited to %llu: fewer than max_connections (%u) can be served",
                 (unsigned long long)rl.rlim_cur, want);
}

static int start(struct server *srv)
{
    const struct config *cfg = &atomic_load(&srv->gen)->cfg;
    char where[CONFIG_PATH_MAX + 32];
    if (log_open_error(cfg->error_log, cfg->error_level) < 0) {
        origin(cfg, "error_log", where, sizeof(where));
        fprintf(stderr, "lfhttpd: %serror_log \"%s\": %s\n", where, cfg->error_log,
                strerror(errno));
        return -1;
    }
    if (access_log_open(&srv->access_log, cfg->access_log, cfg->access_log_json) < 0) {
        origin(cfg, "access_log", where, sizeof(where));
        log_error("%saccess_log \"%s\": %s", where, cfg->access_log, strerror(errno));
        return -1;
    }
    check_fd_limit(cfg->max_connections);
    srv->max_connections = cfg->max_connections;
    http_response_set_server(cfg->server_tokens ? "lfhttpd/" LFHTTPD_VERSION : "lfhttpd");
    pthread_mutex_init(&srv->spare_lock, NULL);
    srv->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (start_services(srv) < 0)
        return -1;
    const char *promotion = "";
    if (cfg->concurrency == LF_STRATEGY_LEADER_FOLLOWERS)
        promotion = cfg->promotion == LF_PROMOTE_LIFO ? " with LIFO promotion"
                                                      : " with condvar promotion";
    log_info("lfhttpd %s serving %s (%s%s, %u service class%s)", LFHTTPD_VERSION, cfg->root,
             lf_strategy_name(cfg->concurrency), promotion, srv->n_svcs,
             srv->n_svcs == 1 ? "" : "es");
    return 0;
}

static void reap_children(void)
{
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
}

static void reopen_logs(struct server *srv)
{
    if (log_reopen_error() < 0)
        log_error("reopening the error log: %s", strerror(errno));
    if (access_log_reopen(&srv->access_log) < 0)
        log_error("reopening the access log: %s", strerror(errno));
    else
        log_info("SIGUSR1: log files reopened");
}

/* Stop accepting, let responses in flight finish, close idle connections, stop. */
static void shut_down(struct server *srv, const sigset_t *sigs)
{
    atomic_store(&srv->stopping, true);
    for (unsigned i = 0; i < srv->n_listeners; i++)
        shutdown(srv->listeners[i].h.fd, SHUT_RDWR); /* new connections are refused now */
    int64_t deadline = conn_now_ms() + atomic_load(&srv->gen)->cfg.shutdown_timeout_ms;
    struct timespec tick = {0, 50 * 1000000L};
    while (atomic_load(&srv->n_conns) > 0 && conn_now_ms() < deadline) {
        int sig = sigtimedwait(sigs, NULL, &tick);
        if (sig == SIGCHLD)
            reap_children();
        if (sig == SIGTERM || sig == SIGINT) {
            log_info("second signal: closing %u connections now", atomic_load(&srv->n_conns));
            break;
        }
    }
    if (atomic_load(&srv->n_conns) > 0)
        log_warn("shutdown: closing %u connections still open", atomic_load(&srv->n_conns));
}

static void clean_up(struct server *srv)
{
    for (unsigned i = 0; i < srv->n_svcs; i++)
        lf_group_stop(srv->svcs[i].group);
    for (unsigned i = 0; i < srv->n_svcs; i++)
        service_fini(&srv->svcs[i]);
    for (unsigned i = 0; i < srv->n_listeners; i++)
        close(srv->listeners[i].h.fd);
    access_log_close(&srv->access_log);
    if (srv->spare_fd >= 0)
        close(srv->spare_fd);
    /* Every connection is closed: the server's is the last reference. */
    struct generation *g = atomic_exchange(&srv->gen, NULL);
    if (g)
        generation_release(g);
}

/* Each error on a line of its own, as "lfhttpd: FILE:LINE: message". */
static void print_errors(const char *err)
{
    for (const char *p = err; *p;) {
        size_t n = strcspn(p, "\n");
        fprintf(stderr, "lfhttpd: %.*s\n", (int)n, p);
        p += n + (p[n] == '\n');
    }
}

int main(int argc, char **argv)
{
    struct options opts = {0};
    int rc = parse_options(argc, argv, &opts);
    if (rc != 0)
        return rc > 0 ? 0 : 1;

    static struct server srv; /* large (listeners, classes): not on main's stack */
    srv.spare_fd = -1;
    srv.start_ms = conn_now_ms();
    pthread_mutex_init(&srv.gen_lock, NULL);
    raise_fd_limit();
    char err[4096];
    struct generation *g = build_generation(&opts, 1, err, sizeof(err));
    if (!g) {
        print_errors(err);
        return 1;
    }
    if (opts.test_only && check_logs(&g->cfg, err, sizeof(err)) < 0) {
        print_errors(err);
        generation_free(g);
        return 1;
    }
    if (opts.test_only) {
        printf("lfhttpd: configuration %s is valid\n", g->cfg.file[0] ? g->cfg.file
                                                                      : "(defaults)");
        generation_free(g);
        return 0;
    }
    server_install_generation(&srv, g);

    /* Signals are taken synchronously by this thread; the workers never see them. */
    signal(SIGPIPE, SIG_IGN);
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    sigaddset(&sigs, SIGUSR1);
    sigaddset(&sigs, SIGCHLD); /* CGI scripts: reaped here, so none is left a zombie */
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    /* Until the server runs, an error that stops it is said on the terminal too, not only
     * in an error_log file nobody is looking at yet (nginx's [emerg]). */
    log_echo_errors(true);
    if (start(&srv) < 0) {
        clean_up(&srv);
        return 1;
    }
    log_echo_errors(false);
    for (;;) {
        int sig = sigwaitinfo(&sigs, NULL);
        if (sig == SIGTERM || sig == SIGINT) {
            log_info("%s: shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
            break;
        }
        if (sig == SIGCHLD)
            reap_children();
        if (sig == SIGUSR1)
            reopen_logs(&srv);
        if (sig == SIGHUP)
            reload(&srv, &opts);
    }
    shut_down(&srv, &sigs);
    clean_up(&srv);
    log_info("exit");
    return 0;
}
