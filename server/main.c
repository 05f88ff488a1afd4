/* main.c — the command line, signals, start, and graceful shutdown. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "generation.h"
#include "log.h"
#include "module_chain.h"
#include "server.h"
#include "server_metrics.h"
#include "vars.h"

#define DEFAULT_CONF GENERATION_DEFAULT_CONF

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
            "  -V            print the version\n"
            "  --directives  print every directive (the reference's source) and exit\n"
            "  --variables   print every variable (the reference's source) and exit\n");
}

struct options {
    struct generation_source src; /* the configuration: file and overrides */
    bool test_only;
};

/* `--directives` and `--variables`: the tables the reference documentation is generated
 * from (tests/gen_docs.py), one entry a line. */
static int dump_reference(const char *what)
{
    if (strcmp(what, "--directives") == 0) {
        conf_dump_table(stdout, "core", config_core_directives());
        conf_dump_table(stdout, "core", config_events_directives());
        module_dump_directives(stdout);
        return 1;
    }
    if (strcmp(what, "--variables") == 0) {
        vars_dump(stdout);
        return 1;
    }
    fprintf(stderr, "lfhttpd: unknown option %s\n", what);
    usage(stderr);
    return -1;
}

/* Returns 0 to go on, 1 to exit with success (-h, -V, a dump), -1 on a usage error. */
static int parse_options(int argc, char **argv, struct options *o)
{
    if (argc == 2 && strncmp(argv[1], "--", 2) == 0 && argv[1][2])
        return dump_reference(argv[1]);
    int ch;
    while ((ch = getopt(argc, argv, "c:l:r:n:thV")) != -1) {
        switch (ch) {
        case 'c': o->src.conf = optarg; break;
        case 'l':
            if (o->src.n_listen == CONFIG_MAX_LISTEN) {
                fprintf(stderr, "lfhttpd: too many -l options\n");
                return -1;
            }
            o->src.listen[o->src.n_listen++] = optarg;
            break;
        case 'r': o->src.root = optarg; break;
        case 'n': o->src.threads = optarg; break;
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

/* SIGHUP: build the new generation beside the running one and switch to it. Connections
 * move to it at their next request; a configuration that does not load, or that changes
 * what only a restart can, is refused and the running one stays. */
static void reload(struct server *srv, const struct options *o)
{
    char err[4096];
    /* main is the only writer: the current generation cannot go under us */
    struct generation *cur = atomic_load(&srv->http.current.gen);
    struct generation *g = generation_build(&o->src, cur->number + 1, err, sizeof(err));
    const char *what = g ? generation_needs_restart(&cur->cfg, &g->cfg) : NULL;
    if (!g || what) {
        if (what) /* "NAME" or "NAME (DETAIL)": the directive's name stands quoted */
            snprintf(err, sizeof(err), "changing `%.*s`%s needs a restart",
                     (int)strcspn(what, " "), what, what + strcspn(what, " "));
        for (char *nl = strchr(err, '\n'); nl; nl = strchr(nl, '\n'))
            *nl = ';'; /* every error, on the one line of the log */
        log_error("SIGHUP: configuration not reloaded: %s; still serving generation %u", err,
                  cur->number);
        generation_free(g);
        server_metrics_reloaded(false);
        return;
    }
    generation_install(&srv->http.current, g);
    server_metrics_reloaded(true);
    log_info("SIGHUP: configuration reloaded (generation %u): new connections and the "
             "next request of open ones use it",
             g->number);
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

static void reap_children(void)
{
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
}

static void reopen_logs(struct server *srv)
{
    if (log_reopen_error() < 0)
        log_error("reopening the error log: %s", strerror(errno));
    if (access_log_reopen(&srv->http.access_log) < 0)
        log_error("reopening the access log: %s", strerror(errno));
    else
        log_info("SIGUSR1: log files reopened");
}

/* The signals a serving server acts on and goes on serving: a CGI script's end, a log
 * rotation, a reload. */
static void serve_signal(struct server *srv, const struct options *o, int sig)
{
    if (sig == SIGCHLD)
        reap_children();
    if (sig == SIGUSR1)
        reopen_logs(srv);
    if (sig == SIGHUP)
        reload(srv, o);
}

/* shutdown_delay: before the graceful shutdown, go on serving everything for a while with
 * the health handler answering 503 and every response closing its connection, so that a
 * load balancer (a Kubernetes readiness probe) stops sending new connections here and
 * keep-alive clients reconnect elsewhere, before any connection is refused. The server is
 * still serving meanwhile, so SIGHUP, SIGUSR1 and SIGCHLD act as they always do (a reload
 * does not change the delay already running). A second SIGTERM, or SIGINT, ends the delay:
 * the graceful shutdown starts at once. */
static void drain(struct server *srv, const struct options *o, const sigset_t *sigs)
{
    unsigned delay_ms = atomic_load(&srv->http.current.gen)->cfg.shutdown_delay_ms;
    if (delay_ms == 0)
        return;
    atomic_store(&srv->http.draining, true);
    log_info("shutdown_delay: draining for %u ms: health checks answer 503, requests are "
             "still served, connections are not kept alive",
             delay_ms);
    int64_t deadline = clock_now_ms() + delay_ms;
    for (int64_t now = clock_now_ms(); now < deadline; now = clock_now_ms()) {
        int64_t left = deadline - now;
        struct timespec wait = {left / 1000, left % 1000 * 1000000L};
        int sig = sigtimedwait(sigs, NULL, &wait);
        if (sig == SIGTERM || sig == SIGINT) {
            log_info("%s: ending the shutdown delay early",
                     sig == SIGTERM ? "SIGTERM" : "SIGINT");
            return;
        }
        serve_signal(srv, o, sig);
    }
    log_info("shutdown delay over: shutting down");
}

/* Stop accepting, let responses in flight finish, close idle connections, stop. */
static void shut_down(struct server *srv, const sigset_t *sigs)
{
    atomic_store(&srv->http.stopping, true);
    for (unsigned i = 0; i < srv->n_listeners; i++)
        shutdown(srv->listeners[i].h.fd, SHUT_RDWR); /* new connections are refused now */
    int64_t deadline =
        clock_now_ms() + atomic_load(&srv->http.current.gen)->cfg.shutdown_timeout_ms;
    struct timespec tick = {0, 50 * 1000000L};
    while (atomic_load(&srv->http.n_conns) > 0 && clock_now_ms() < deadline) {
        int sig = sigtimedwait(sigs, NULL, &tick);
        if (sig == SIGCHLD)
            reap_children();
        if (sig == SIGTERM || sig == SIGINT || sig == SIGQUIT) {
            log_info("second signal: closing %u connections now", atomic_load(&srv->http.n_conns));
            break;
        }
    }
    if (atomic_load(&srv->http.n_conns) > 0)
        log_warn("shutdown: closing %u connections still open", atomic_load(&srv->http.n_conns));
}

/* Each message on a line of its own, as "lfhttpd: [KIND]FILE:LINE: message". */
static void print_lines(const char *kind, const char *text)
{
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, "\n");
        fprintf(stderr, "lfhttpd: %s%.*s\n", kind, (int)n, p);
        p += n + (p[n] == '\n');
    }
}

static void print_errors(const char *err)
{
    print_lines("", err);
}

/* The notices of the file (what nginx's directives do here), into the error log. */
static void log_notes(const char *notes)
{
    for (const char *p = notes; *p;) {
        size_t n = strcspn(p, "\n");
        log_info("notice: %.*s", (int)n, p);
        p += n + (p[n] == '\n');
    }
}

/* worker_rlimit_nofile: the descriptors the process may open, soft and hard. */
static void set_fd_limit(const struct config *cfg)
{
    struct rlimit rl = {cfg->rlimit_nofile, cfg->rlimit_nofile};
    if (cfg->rlimit_nofile && setrlimit(RLIMIT_NOFILE, &rl) < 0)
        log_warn("worker_rlimit_nofile %u: %s", cfg->rlimit_nofile, strerror(errno));
}

/* pid: written once the server listens; removed at exit. */
static int write_pid_file(const struct config *cfg)
{
    if (!cfg->pid_file[0])
        return 0;
    FILE *f = fopen(cfg->pid_file, "we");
    if (!f || fprintf(f, "%ld\n", (long)getpid()) < 0 || fclose(f) != 0) {
        log_error("pid \"%s\": %s", cfg->pid_file, strerror(errno));
        return -1;
    }
    return 0;
}

static void remove_pid_file(const struct config *cfg)
{
    if (cfg->pid_file[0] && unlink(cfg->pid_file) < 0)
        log_warn("pid \"%s\": cannot remove it: %s", cfg->pid_file, strerror(errno));
}

/* user: become USER:GROUP now that the listeners are bound and the keys read. glibc
 * changes the IDs of every thread of the process at once. */
static int drop_privileges(const struct config *cfg)
{
    if (!cfg->user[0] || geteuid() != 0)
        return 0;
    struct passwd *pw = getpwnam(cfg->user);
    struct group *gr = getgrnam(cfg->group);
    if (!pw || !gr) {
        log_error("user %s %s: not found", cfg->user, cfg->group);
        return -1;
    }
    if (setgid(gr->gr_gid) < 0 || initgroups(cfg->user, gr->gr_gid) < 0 ||
        setuid(pw->pw_uid) < 0) {
        log_error("user %s %s: %s", cfg->user, cfg->group, strerror(errno));
        return -1;
    }
    log_info("user: running as %s (uid %u), group %s (gid %u)", cfg->user,
             (unsigned)pw->pw_uid, cfg->group, (unsigned)gr->gr_gid);
    return 0;
}

static bool pid_written; /* by before_serving: removed at exit, or when the start fails */

/* Once the listeners are bound and the keys read, before any thread serves: the pid file,
 * then `user` (so that no request is ever served as root). */
static int before_serving(const struct config *cfg)
{
    if (write_pid_file(cfg) < 0)
        return -1;
    pid_written = true;
    return drop_privileges(cfg);
}

int main(int argc, char **argv)
{
    struct options opts = {0};
    int rc = parse_options(argc, argv, &opts);
    if (rc != 0)
        return rc > 0 ? 0 : 1;

    static struct server srv; /* large (listeners, classes): not on main's stack */
    server_init(&srv);
    raise_fd_limit();
    char err[4096];
    struct generation *g = generation_build(&opts.src, 1, err, sizeof(err));
    if (!g) {
        print_errors(err);
        return 1;
    }
    if (opts.test_only && generation_check_logs(g, err, sizeof(err)) < 0) {
        print_errors(err);
        generation_free(g);
        return 1;
    }
    if (opts.test_only) {
        print_lines("notice: ", g->cfg.notes);
        printf("lfhttpd: configuration %s is valid\n", g->cfg.file[0] ? g->cfg.file
                                                                      : "(defaults)");
        generation_free(g);
        return 0;
    }

    /* Signals are taken synchronously by this thread; the workers never see them. */
    signal(SIGPIPE, SIG_IGN);
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGQUIT); /* nginx's graceful shutdown (`nginx -s quit`) */
    sigaddset(&sigs, SIGHUP);
    sigaddset(&sigs, SIGUSR1);
    sigaddset(&sigs, SIGCHLD); /* CGI scripts: reaped here, so none is left a zombie */
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    /* Until the server runs, an error that stops it is said on the terminal too, not only
     * in an error_log file nobody is looking at yet (nginx's [emerg]). */
    log_echo_errors(true);
    set_fd_limit(&g->cfg);
    srv.before_serving = before_serving;
    if (server_start(&srv, g) < 0) {
        if (pid_written)
            remove_pid_file(&g->cfg);
        server_fini(&srv);
        return 1;
    }
    /* The generation is the server's now: its file names stay while it runs. */
    struct config *started = &g->cfg;
    log_notes(started->notes);
    char pid_file[CONFIG_PATH_MAX];
    snprintf(pid_file, sizeof(pid_file), "%s", started->pid_file);
    log_echo_errors(false);
    for (;;) {
        int sig = sigwaitinfo(&sigs, NULL);
        if (sig == SIGTERM) {
            log_info("SIGTERM: shutting down");
            drain(&srv, &opts, &sigs);
            break;
        }
        if (sig == SIGINT || sig == SIGQUIT) { /* a terminal, or nginx's tools: no delay */
            log_info("%s: shutting down", sig == SIGINT ? "SIGINT" : "SIGQUIT");
            break;
        }
        serve_signal(&srv, &opts, sig);
    }
    shut_down(&srv, &sigs);
    server_fini(&srv);
    /* The pid file of the start: a reload does not move it (nginx's neither). */
    if (pid_file[0] && unlink(pid_file) < 0)
        log_warn("pid \"%s\": cannot remove it: %s", pid_file, strerror(errno));
    log_info("exit");
    return 0;
}
