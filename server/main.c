/* main.c — command line, configuration, signals; start the groups, wait, shut down. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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
    struct stat sb;
    if (stat(cfg->root, &sb) < 0 || !S_ISDIR(sb.st_mode)) {
        snprintf(err, len, "%.200s: root \"%.500s\" is not a directory",
                 path ? path : "defaults", cfg->root);
        return -1;
    }
    if (cfg->threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        cfg->threads = n > 0 ? (unsigned)n : 1;
    }
    return 0;
}

static int start(struct server *srv)
{
    char err[1024];
    const struct config *cfg = &srv->cfg;
    if (log_open_error(cfg->error_log, cfg->error_level) < 0) {
        fprintf(stderr, "lfhttpd: error log \"%s\": %s\n", cfg->error_log, strerror(errno));
        return -1;
    }
    if (access_log_open(&srv->access_log, cfg->access_log) < 0) {
        log_error("access log \"%s\": %s", cfg->access_log, strerror(errno));
        return -1;
    }
    srv->root_fd = open(cfg->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (srv->root_fd < 0) {
        log_error("root \"%s\": %s", cfg->root, strerror(errno));
        return -1;
    }
    http_response_set_server(cfg->server_tokens ? "lfhttpd/" LFHTTPD_VERSION : "lfhttpd");
    srv->limits.max_header_bytes = cfg->max_header_size;
    srv->limits.max_headers = cfg->max_headers;
    if (module_chain_init(&srv->chain, cfg, err, sizeof(err)) < 0) {
        log_error("%s", err);
        return -1;
    }
    pthread_mutex_init(&srv->spare_lock, NULL);
    srv->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (service_init(&srv->svc, srv, "lf", cfg->threads) < 0) {
        log_error("cannot create the thread group: %s", strerror(errno));
        return -1;
    }
    for (unsigned i = 0; i < cfg->n_listen; i++) {
        struct listener *l = &srv->listeners[i];
        if (listener_open(srv, l, &cfg->listen[i]) < 0) {
            log_error("listen on %s: %s", cfg->listen[i].text, strerror(errno));
            return -1;
        }
        srv->n_listeners++;
        l->svc = &srv->svc;
        if (lf_group_add(srv->svc.group, &l->h, EPOLLIN) < 0) {
            log_error("epoll: %s", strerror(errno));
            return -1;
        }
        log_info("listening on %s", l->addr.text);
    }
    int rc = lf_group_start(srv->svc.group);
    if (rc < 0) {
        log_error("cannot start threads: %s", strerror(-rc));
        return -1;
    }
    log_info("lfhttpd %s serving %s with %u threads (Leader/Followers)", LFHTTPD_VERSION,
             cfg->root, cfg->threads);
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
    int64_t deadline = conn_now_ms() + srv->cfg.shutdown_timeout_ms;
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
    if (srv->svc.group) {
        lf_group_stop(srv->svc.group);
        service_fini(&srv->svc);
    }
    for (unsigned i = 0; i < srv->n_listeners; i++)
        close(srv->listeners[i].h.fd);
    module_chain_fini(&srv->chain);
    access_log_close(&srv->access_log);
    if (srv->root_fd >= 0)
        close(srv->root_fd);
    if (srv->spare_fd >= 0)
        close(srv->spare_fd);
    config_free(&srv->cfg);
}

int main(int argc, char **argv)
{
    struct options opts = {0};
    int rc = parse_options(argc, argv, &opts);
    if (rc != 0)
        return rc > 0 ? 0 : 1;

    static struct server srv; /* large (listeners, config): not on main's stack */
    srv.root_fd = -1;
    srv.spare_fd = -1;
    srv.start_ms = conn_now_ms();
    char err[1024];
    if (load_config(&srv.cfg, &opts, err, sizeof(err)) < 0) {
        fprintf(stderr, "lfhttpd: %s\n", err);
        config_free(&srv.cfg);
        return 1;
    }
    if (opts.test_only) {
        /* The modules check their own directives (paths that must exist, and so on). */
        if (module_chain_init(&srv.chain, &srv.cfg, err, sizeof(err)) < 0) {
            fprintf(stderr, "lfhttpd: %s\n", err);
            config_free(&srv.cfg);
            return 1;
        }
        module_chain_fini(&srv.chain);
        printf("lfhttpd: configuration %s is valid\n", srv.cfg.file[0] ? srv.cfg.file
                                                                          : "(defaults)");
        config_free(&srv.cfg);
        return 0;
    }

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

    if (start(&srv) < 0) {
        clean_up(&srv);
        return 1;
    }
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
            log_warn("SIGHUP ignored: configuration reload is not built yet; restart instead");
    }
    shut_down(&srv, &sigs);
    clean_up(&srv);
    log_info("exit");
    return 0;
}
