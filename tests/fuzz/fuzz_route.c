/* fuzz_route.c — libFuzzer target for placing and answering requests through server and
 * location blocks (module_route.c, module_level.c and the modules behind them).
 *
 * Input: a configuration text, then a NUL byte, then request lines ('\n' apart), each
 * "METHOD TARGET HOST [PORT]" (HOST "-": no Host field, an HTTP/1.0 request; PORT: the
 * local port the request came in on, 8080 by default). In the configuration, "%D" stands
 * for a small document tree the target makes once at start in a temporary directory:
 *
 *   %D/site/    index.html a.txt app.js 404.html 50x.html, dir/ (with an index.html),
 *               noindex/ (without one), symlinks: rel -> a.txt, absin -> %D/site/a.txt
 *               (absolute, inside), out -> ../outside/secret.txt, outdir -> ../outside,
 *               abs -> %D/outside/secret.txt (all three leading outside)
 *   %D/other/   index.html x.txt assets/app.css: a second root
 *   %D/outside/ secret.txt, and a file named after the secret: never to be served
 *
 * The configuration is built as a start builds it (generation_build: config_load with the
 * modules' directives, then module_chain_init), with the top-level root %D/site (as -r
 * gives it), "mime_magic off" and "mime_types off" in front (libmagic's database per input
 * would cost more than the rest). A configuration whose roots or aliases lie outside
 * %D/site and %D/other (an administrator may serve what they like), or that mounts CGI
 * (a process per request), is not run. Each request is parsed (http_parse_request),
 * its path normalized as http_conn.c's route() does, placed (module_chain_route) and
 * answered (module_chain_answer, resp_finish, the log hooks), then its response is let go
 * as the connection does after sending (resp_file_close, the release callback). Seeds:
 * tests/fuzz/corpus/fuzz_route/.
 *
 * What it checks, beyond "no crash, no sanitizer report, no leak":
 *   - module_chain_route returns 0 or a 4xx/5xx status; the response's status is 100..599;
 *   - req->file points into the path buffer or the file room, or is "/"; req->level is
 *     one of the chain's levels, before and after answering;
 *   - every file a body refers to is one of the tree's own (same st_dev and st_ino), or a
 *     memfd the server made (a directory listing) that does not hold the secret; no
 *     in-memory body holds the secret unless the request or the configuration named it
 *     (or a piece of it);
 *   - the same request twice is placed in the same block and gets the same status (the
 *     per-thread location memo must not change an answer);
 *   - no descriptor outlives the input.
 * Links: every server and module object. Built and run by `make fuzz`.
 */
#include "generation.h"
#include "log.h"
#include "module_level.h"
#include "server.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define REQUIRE(x)                                                                             \
    do {                                                                                       \
        if (!(x)) {                                                                            \
            fprintf(stderr, "FAIL %s:%d %s\n", __FILE__, __LINE__, #x);                        \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

/* What no response may carry: the content of the file outside the tree, and the name of
 * another file there (a listing of the outside directory would show it). */
#define SECRET "ZZOUTSIDEZZ"
#define MAX_REQUESTS 48
#define MAX_TREE_FILES 32

/* --- the document tree ------------------------------------------------------------------ */

static char tree[PATH_MAX]; /* its real path: %D */
static struct {
    dev_t dev;
    ino_t ino;
} tree_files[MAX_TREE_FILES];
static unsigned n_tree_files;

static void put(const char *rel, const char *text, bool ours)
{
    char p[PATH_MAX + 64];
    snprintf(p, sizeof(p), "%s/%s", tree, rel);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    REQUIRE(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    struct stat st;
    REQUIRE(fstat(fd, &st) == 0);
    close(fd);
    if (!ours)
        return;
    REQUIRE(n_tree_files < MAX_TREE_FILES);
    tree_files[n_tree_files].dev = st.st_dev;
    tree_files[n_tree_files].ino = st.st_ino;
    n_tree_files++;
}

static void dir(const char *rel)
{
    char p[PATH_MAX + 64];
    snprintf(p, sizeof(p), "%s/%s", tree, rel);
    REQUIRE(mkdir(p, 0755) == 0);
}

static void link_to(const char *target, const char *rel)
{
    char p[PATH_MAX + 64];
    snprintf(p, sizeof(p), "%s/%s", tree, rel);
    REQUIRE(symlink(target, p) == 0);
}

static int remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)type;
    (void)ftw;
    return remove(path);
}

/* At exit, the tree goes (a crash leaves it, for the reproducer to be looked at). */
static void remove_tree(void)
{
    nftw(tree, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void make_tree(void)
{
    char tmpl[] = "/tmp/fuzz_route.XXXXXX";
    REQUIRE(mkdtemp(tmpl) && realpath(tmpl, tree));
    atexit(remove_tree);
    dir("site");
    dir("site/dir");
    dir("site/noindex");
    dir("site/noindex/sub");
    dir("other");
    dir("other/assets");
    dir("outside");
    put("site/index.html", "<h1>site</h1>\n", true);
    put("site/a.txt", "a\n", true);
    put("site/app.js", "console.log('app');\n", true);
    put("site/404.html", "<h1>custom 404</h1>\n", true);
    put("site/50x.html", "<h1>custom 50x</h1>\n", true);
    put("site/dir/index.html", "<h1>dir</h1>\n", true);
    put("site/dir/b.txt", "b\n", true);
    put("site/noindex/c.txt", "c\n", true);
    put("site/noindex/sub/d.txt", "d\n", true);
    put("other/index.html", "<h1>other</h1>\n", true);
    put("other/x.txt", "x\n", true);
    put("other/assets/app.css", "body{}\n", true);
    put("outside/secret.txt", SECRET "\n", false);
    put("outside/" SECRET ".txt", "listed only\n", false);
    char abs_out[PATH_MAX + 64], abs_in[PATH_MAX + 64];
    snprintf(abs_out, sizeof(abs_out), "%s/outside/secret.txt", tree);
    snprintf(abs_in, sizeof(abs_in), "%s/site/a.txt", tree);
    link_to("a.txt", "site/rel");
    link_to(abs_in, "site/absin");
    link_to("../outside/secret.txt", "site/out");
    link_to("../outside", "site/outdir");
    link_to(abs_out, "site/abs");
}

/* Is path (a real path) inside %D/site or %D/other? */
static bool inside_served(const char *path)
{
    static const char *const parts[] = {"/site", "/other"};
    size_t tl = strlen(tree);
    if (strncmp(path, tree, tl) != 0)
        return false;
    for (size_t i = 0; i < 2; i++) {
        size_t pl = strlen(parts[i]);
        if (strncmp(path + tl, parts[i], pl) == 0 &&
            (path[tl + pl] == '\0' || path[tl + pl] == '/'))
            return true;
    }
    return false;
}

static unsigned open_descriptors(void)
{
    DIR *d = opendir("/proc/self/fd");
    REQUIRE(d);
    unsigned n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* --- the configuration ---------------------------------------------------------------- */

/* The text with "%D" replaced by the tree, after the directives that keep it cheap, into
 * a memfd the configuration is loaded from. */
static bool write_config(int fd, const char *text, size_t len)
{
    static const char head[] = "mime_magic off;\nmime_types off;\n";
    size_t tl = strlen(tree), cap = sizeof(head) + len * (tl + 1);
    char *out = malloc(cap);
    REQUIRE(out);
    size_t n = sizeof(head) - 1;
    memcpy(out, head, n);
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '%' && i + 1 < len && text[i + 1] == 'D') {
            memcpy(out + n, tree, tl);
            n += tl;
            i++;
        } else {
            out[n++] = text[i];
        }
    }
    bool ok = ftruncate(fd, 0) == 0 && pwrite(fd, out, n, 0) == (ssize_t)n;
    free(out);
    return ok;
}

/* Roots and aliases in the tree's served parts, and no CGI: see the top. */
static bool runnable(const struct generation *g)
{
    const struct module_chain *c = &g->chain;
    if (!inside_served(g->root_real))
        return false;
    for (unsigned i = 0; i < c->n_roots; i++)
        if (!inside_served(c->roots[i].real))
            return false;
    for (unsigned i = 0; i < c->n_mounts; i++)
        if (strcmp(c->mods[c->mounts[i].module]->name, "cgi") == 0)
            return false;
    return true;
}

/* --- one request ------------------------------------------------------------------------ */

struct probe {
    const char *line; /* the request line as given, for the secret check */
    size_t line_len;
    char head[1200];  /* the request head made of it */
    size_t head_len;
    uint16_t port;
};

/* "METHOD TARGET HOST [PORT]" into a request head. False: not of that form. */
static bool make_probe(const char *line, size_t len, struct probe *p)
{
    char copy[1024];
    if (len >= sizeof(copy))
        return false;
    memcpy(copy, line, len);
    copy[len] = '\0';
    char *save, *method = strtok_r(copy, " ", &save), *target = strtok_r(NULL, " ", &save);
    char *host = strtok_r(NULL, " ", &save), *port = strtok_r(NULL, " ", &save);
    if (!method || !target || !host)
        return false;
    int n = strcmp(host, "-") == 0
                ? snprintf(p->head, sizeof(p->head), "%s %s HTTP/1.0\r\n\r\n", method, target)
                : snprintf(p->head, sizeof(p->head), "%s %s HTTP/1.1\r\nHost: %s\r\n\r\n",
                           method, target, host);
    if (n < 0 || (size_t)n >= sizeof(p->head))
        return false;
    p->head_len = (size_t)n;
    p->line = line;
    p->line_len = len;
    p->port = port ? (uint16_t)strtoul(port, NULL, 10) : 8080;
    return true;
}

static bool is_tree_file(const struct stat *st)
{
    for (unsigned i = 0; i < n_tree_files; i++)
        if (tree_files[i].dev == st->st_dev && tree_files[i].ino == st->st_ino)
            return true;
    return false;
}

static bool is_memfd(int fd)
{
    char p[64], target[128];
    snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(p, target, sizeof(target) - 1);
    return n > 0 && strncmp(target, "/memfd:", 7) == 0;
}

static bool holds_secret(const char *p, size_t len)
{
    return memmem(p, len, SECRET, sizeof(SECRET) - 1) != NULL;
}

/* A file segment: the tree's own file, or a memfd of the server's without the secret. */
static void check_file_segment(const struct out_seg *s)
{
    struct stat st;
    REQUIRE(fstat(s->fd, &st) == 0 && S_ISREG(st.st_mode));
    if (is_tree_file(&st))
        return;
    REQUIRE(is_memfd(s->fd));
    char buf[65536];
    uint64_t len = s->len < sizeof(buf) ? s->len : sizeof(buf);
    ssize_t got = pread(s->fd, buf, (size_t)len, (off_t)s->off);
    REQUIRE(got >= 0 && !holds_secret(buf, (size_t)got));
}

/* The secret's text, or a piece of it, written in the configuration or a request line: a
 * body may then hold it (an administrator's `return 200 "..."`, a request's arguments
 * echoed), which says nothing of the file. */
static bool names_secret(const char *p, size_t len)
{
    return holds_secret(p, len) || memmem(p, len, "ZZOUT", 5) || memmem(p, len, "SIDEZZ", 6) ||
           memmem(p, len, "OUTSIDE", 7);
}

static bool conf_names_secret; /* the input's configuration does (names_secret) */

static void check_body(const struct response *resp, const struct probe *p)
{
    bool named = conf_names_secret || names_secret(p->line, p->line_len);
    unsigned n;
    const struct out_seg *segs = resp_body_segs(resp, &n);
    for (unsigned i = 0; i < n; i++) {
        if (segs[i].mem)
            REQUIRE(named || !holds_secret(segs[i].mem, (size_t)segs[i].len));
        else
            check_file_segment(&segs[i]);
    }
    REQUIRE(!resp_is_stream(resp)); /* no CGI: nothing streams */
}

static void check_request(const struct module_chain *c, const struct request *r)
{
    REQUIRE(r->level >= c->levels && r->level < c->levels + c->n_levels);
    REQUIRE((r->file >= r->path && r->file < r->path + REQUEST_PATH_MAX) ||
            (r->file >= r->file_room && r->file < r->file_room + REQUEST_FILE_MAX) ||
            strcmp(r->file, "/") == 0);
}

/* What one request's answer was, to compare with the same request's second answer. */
struct answer {
    int routed;
    int status;
    const struct module_level *level;
};

/* Place and answer the request as http_conn.c's serve_one, route and respond do. */
static struct answer serve(struct generation *g, const struct probe *p)
{
    static struct server server; /* for the status handler's figures: all zero */
    struct answer a = {0, 0, NULL};
    struct http_request h;
    if (http_parse_request(p->head, p->head_len, &g->limits, &h) <= 0)
        return a;
    if (h.method == HTTP_METHOD_UNKNOWN || h.method == HTTP_METHOD_CONNECT ||
        (h.method == HTTP_METHOD_OPTIONS && h.target.len == 1 && h.target.p[0] == '*'))
        return a; /* answered before routing */
    static char path[REQUEST_PATH_MAX], file_room[REQUEST_FILE_MAX];
    long n = http_path_normalize(h.path, path, sizeof(path));
    if (n < 0)
        return a;
    struct sockaddr_in peer = {.sin_family = AF_INET, .sin_port = htons(40000),
                               .sin_addr.s_addr = htonl(0x7f000001)};
    struct sockaddr_in local = {.sin_family = AF_INET, .sin_port = htons(p->port),
                                .sin_addr.s_addr = htonl(0x7f000001)};
    struct request r = {
        .http = &h,
        .path = path,
        .path_len = (size_t)n,
        .peer = (const struct sockaddr *)&peer,
        .local = (const struct sockaddr *)&local,
        .now_s = 1700000000,
        .cfg = &g->cfg,
        .root_fd = g->root_fd,
        .root_real = g->root_real,
        .args = h.query,
        .has_args = h.has_query,
        .file = path,
        .file_len = (size_t)n,
        .file_room = file_room,
        .level = g->chain.levels,
        .server = &server,
        .chain = &g->chain,
    };
    a.routed = module_chain_route(&g->chain, &r);
    REQUIRE(a.routed == 0 || (a.routed >= 400 && a.routed <= 599));
    check_request(&g->chain, &r);
    a.level = r.level;
    struct response resp;
    resp_init(&resp);
    resp.head_only = h.method == HTTP_METHOD_HEAD;
    if (a.routed) {
        resp_error(&resp, a.routed);
    } else {
        module_chain_answer(&g->chain, &r, &resp);
        check_request(&g->chain, &r);
    }
    REQUIRE(resp.status >= 100 && resp.status <= 599);
    check_body(&resp, p);
    resp_finish(&resp, h.version_minor == 0);
    module_chain_log(&g->chain, &r, &resp);
    a.status = resp.status;
    resp_file_close(&resp); /* as conn_send lets go of a sent response */
    if (resp.release)
        resp.release(resp.release_ctx);
    return a;
}

/* FUZZ_ROUTE_TRACE=1: say what each input did (to see that a seed runs as meant). */
static bool trace;

static void serve_all(struct generation *g, const char *lines, size_t len)
{
    unsigned done = 0;
    for (const char *p = lines, *end = lines + len; p < end && done < MAX_REQUESTS;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        struct probe pr;
        if (make_probe(p, n, &pr)) {
            struct answer first = serve(g, &pr), again = serve(g, &pr);
            REQUIRE(first.routed == again.routed && first.status == again.status);
            REQUIRE(first.level == again.level);
            if (trace)
                fprintf(stderr, "  %.*s -> %d/%d\n", (int)n, p, first.routed, first.status);
            done++;
        }
        p += n + 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char conf[64], site[PATH_MAX + 8];
    static char err[4096];
    if (fd < 0) {
        make_tree();
        REQUIRE(log_open_error("/dev/null", LOG_LEVEL_ERROR) == 0);
        fd = memfd_create("fuzz_route", MFD_CLOEXEC);
        REQUIRE(fd >= 0);
        snprintf(conf, sizeof(conf), "/proc/self/fd/%d", fd);
        snprintf(site, sizeof(site), "%s/site", tree);
        trace = getenv("FUZZ_ROUTE_TRACE") != NULL;
    }
    if (size > 16384)
        return 0;
    const char *text = (const char *)data;
    const char *nul = memchr(text, '\0', size);
    if (!nul)
        return 0; /* no requests */
    unsigned fds = open_descriptors();
    conf_names_secret = names_secret(text, (size_t)(nul - text));
    REQUIRE(write_config(fd, text, (size_t)(nul - text)));
    struct generation_source src = {.conf = conf, .root = site};
    struct generation *g = generation_build(&src, 1, err, sizeof(err));
    if (trace)
        fprintf(stderr, "%s\n", !g ? err : runnable(g) ? "runs:" : "not run: roots or cgi");
    if (g && runnable(g))
        serve_all(g, nul + 1, size - (size_t)(nul - text) - 1);
    generation_free(g);
    REQUIRE(open_descriptors() == fds);
    return 0;
}
