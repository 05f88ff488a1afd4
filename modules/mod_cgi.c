/* mod_cgi.c — CGI/1.1 scripts (RFC 3875) mounted on prefixes: `cgi /cgi-bin/ www/cgi-bin;`.
 *
 * Finding the script: the path under the prefix is walked segment by segment beneath the
 * mount's directory, opened at start (open_beneath: no "..", absolute path or
 * symlink leads out). The first segment that is a regular file is the script, and it must
 * be executable; the rest of the path is PATH_INFO. A path that ends on a directory, a
 * file that is not executable, anything but a regular file, or a way out: 403. A missing
 * segment: 404.
 *
 * Running it: posix_spawn (a vfork-like clone: safe in a threaded process, and the calling
 * thread waits only for the exec), in the script's directory, in a process group of its
 * own (so that a timeout kills whatever it started too), with an empty signal mask and
 * default dispositions, every descriptor above 2 closed, and an environment made from the
 * request alone (RFC 3875 section 4.1) plus PATH:
 *   stdin   the request body, which the core has already read whole (the mount asks for
 *           it), written into a memfd; /dev/null without a body. Nothing to feed later,
 *           so nothing can block.
 *   stdout  a pipe; its non-blocking read end goes to the core as the response's stream.
 *   stderr  a memfd sealed at cgi_stderr bytes (writes past it fail), copied to the error
 *           log when the run is over; or /dev/null. A script cannot fill the log.
 * From then on the core drives the exchange (http_stream.c): it reads the pipe as it
 * becomes readable, hands us the start of the output to parse (cgi_parse_head), streams
 * the rest (chunked when the script gives no Content-Length), and kills the process group
 * when cgi_timeout passes (504 if no head was sent yet) or the client leaves, through a
 * pidfd of the script taken at once (cgi_pidfd). done() frees the run.
 *
 * Children are reaped by the main thread (SIGCHLD); done() tries once without waiting,
 * which catches the common case of a script that has exited by the end of its output.
 *
 * Location: a script's Location (a local path or an absolute URL) is answered as a 302
 * to it unless the script gives a Status; a local path is not re-dispatched inside the
 * server (RFC 3875 section 6.2.2 allows either, and a redirect is what clients see of
 * it anyway).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"
#include "mod_cgi.h"
#include "strbuf.h"

#define CGI_DEFAULT_PATH "/usr/local/bin:/usr/bin:/bin"
#define CGI_ENV_MAX (32 + HTTP_MAX_HEADERS)
#define CGI_REASON_MAX 64 /* a longer reason phrase from a script is replaced by ours */
#define CGI_STDERR_LOG_MAX (64 * 1024)
#define P_PIDFD_ID 3 /* waitid()'s P_PIDFD (Linux 5.4), which glibc 2.36 does not name */

/* One `cgi PREFIX DIR;`: the mount's data. */
struct cgi_dir {
    int fd;              /* DIR, O_PATH | O_DIRECTORY */
    char real[PATH_MAX]; /* its real path: scripts run as real + "/" + the resolved path */
};

struct cgi_state {
    unsigned timeout_ms;     /* cgi_timeout: the whole response */
    unsigned max_processes;  /* cgi_max_processes */
    size_t stderr_bytes;     /* cgi_stderr: kept per run and logged; 0 = /dev/null */
    atomic_uint running;     /* runs from spawn to done(): bounded by max_processes */
    atomic_ulong refused;    /* requests answered 503: max_processes were running */
    int devnull_fd;
    posix_spawnattr_t attr;  /* the same for every run, read-only after init */
    bool attr_ready;
    char software[96];       /* SERVER_SOFTWARE */
    char path[4096];         /* PATH */
    char document_root[PATH_MAX];
    char hostname[256];
    struct cgi_dir *dirs[MODULE_MOUNTS_MAX];
    unsigned n_dirs;
};

/* One running script: the stream's ctx. */
struct cgi_run {
    struct cgi_state *st;
    pid_t pid;
    pid_t pgid;       /* its process group, the script's pid; 0 once known to be gone */
    int pidfd;        /* the script's pidfd (the core closes it); -1 if none */
    int err_fd;       /* the stderr memfd, logged and closed by done(); -1 if none */
    char script[256]; /* SCRIPT_NAME, for log lines */
    char name[264];   /* "cgi: SCRIPT_NAME": the stream's name in the core's log lines */
};

/* --- the response head (RFC 3875 section 6) ------------------------------------------ */

static bool is_tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

struct cgi_field {
    struct http_slice name, value; /* the value without surrounding blanks */
};

/* Read the line at buf[*pos..len). Returns 1 for a header field (in f), 2 for the blank
 * line that ends the head, 0 if the line is not complete, -1 if it is not a field: no
 * token before a colon, control bytes in the value, a continuation line. */
static int next_field(const char *buf, size_t len, size_t *pos, struct cgi_field *f)
{
    const char *p = buf + *pos, *end = buf + len;
    const char *colon = p;
    while (colon < end && is_tchar((unsigned char)*colon))
        colon++;
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl) /* incomplete; but garbage is garbage already */
        return colon < end && (colon == p || *colon != ':') && *colon != '\r' ? -1 : 0;
    const char *eol = nl > p && nl[-1] == '\r' ? nl - 1 : nl;
    *pos = (size_t)(nl + 1 - buf);
    if (eol == p)
        return 2;
    if (colon == p || colon >= eol || *colon != ':')
        return -1;
    const char *v = colon + 1, *ve = eol;
    while (v < ve && (*v == ' ' || *v == '\t'))
        v++;
    while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
        ve--;
    for (const char *q = v; q < ve; q++) {
        unsigned char c = (unsigned char)*q;
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return -1; /* NUL, CR, other controls: never into our head */
    }
    f->name = (struct http_slice){p, (size_t)(colon - p)};
    f->value = (struct http_slice){v, (size_t)(ve - v)};
    return 1;
}

/* What the head says about the response itself. */
struct cgi_head {
    int status;                /* from Status, 0 if absent */
    struct http_slice reason;  /* Status's reason phrase */
    bool location, content_type, has_length;
    uint64_t length;           /* from Content-Length */
};

/* "NNN" or "NNN reason". */
static int parse_status(struct http_slice v, struct cgi_head *h)
{
    if (v.len < 3 || (v.len > 3 && v.p[3] != ' ' && v.p[3] != '\t'))
        return -1;
    int code = 0;
    for (int i = 0; i < 3; i++) {
        if (v.p[i] < '0' || v.p[i] > '9')
            return -1;
        code = code * 10 + (v.p[i] - '0');
    }
    if (code < 200 || code > 599) /* no interim or unknown classes as a final answer */
        return -1;
    const char *r = v.p + 3, *end = v.p + v.len;
    while (r < end && (*r == ' ' || *r == '\t'))
        r++;
    h->status = code;
    h->reason = (struct http_slice){r, (size_t)(end - r)};
    return 0;
}

static int parse_length(struct http_slice v, uint64_t *out)
{
    if (v.len == 0 || v.len > 18)
        return -1;
    uint64_t n = 0;
    for (size_t i = 0; i < v.len; i++) {
        if (v.p[i] < '0' || v.p[i] > '9')
            return -1;
        n = n * 10 + (uint64_t)(v.p[i] - '0');
    }
    *out = n;
    return 0;
}

/* Fields the core writes itself, or that only mean something on one connection. */
static bool field_dropped(struct http_slice name)
{
    static const char *const dropped[] = {
        "status",  "content-length", "connection", "keep-alive", "transfer-encoding", "te",
        "trailer", "upgrade",        "proxy-connection", "date", "server",
    };
    for (size_t i = 0; i < sizeof(dropped) / sizeof(dropped[0]); i++)
        if (http_slice_eq(name, dropped[i]))
            return true;
    return false;
}

static int add_field(struct response *resp, const struct cgi_field *f)
{
    char line[RESP_HEAD_CAP];
    if (f->name.len + f->value.len + 2 > sizeof(line))
        return -1;
    memcpy(line, f->name.p, f->name.len);
    line[f->name.len] = '\0';
    char *value = line + f->name.len + 1;
    memcpy(value, f->value.p, f->value.len);
    value[f->value.len] = '\0';
    return resp_header(resp, line, value);
}

int cgi_parse_head(const char *buf, size_t len, struct response *resp)
{
    /* First the whole head must be there, every line valid; then it is read twice: what
     * it says of the response, then the fields to pass on. */
    size_t pos = 0;
    struct cgi_field f;
    for (;;) {
        int r = next_field(buf, len, &pos, &f);
        if (r <= 0)
            return r;
        if (r == 2)
            break;
    }
    size_t head_len = pos;
    if (head_len > INT32_MAX)
        return -1;

    struct cgi_head h = {0};
    pos = 0;
    while (next_field(buf, head_len, &pos, &f) == 1) {
        if (http_slice_eq(f.name, "status")) {
            if (h.status || parse_status(f.value, &h) < 0)
                return -1;
        } else if (http_slice_eq(f.name, "content-length")) {
            uint64_t n;
            if (parse_length(f.value, &n) < 0 || (h.has_length && n != h.length))
                return -1;
            h.has_length = true;
            h.length = n;
        } else if (http_slice_eq(f.name, "location")) {
            if (f.value.len == 0)
                return -1;
            h.location = true;
        } else if (http_slice_eq(f.name, "content-type")) {
            h.content_type = true;
        }
    }
    if (!h.status && !h.location && !h.content_type)
        return -1; /* RFC 3875 section 6.2: a response has at least one of them */

    int status = h.status ? h.status : h.location ? 302 : 200;
    resp_start(resp, status);
    if (h.reason.len <= CGI_REASON_MAX)
        resp_set_reason(resp, h.reason.p, h.reason.len);
    pos = 0;
    while (next_field(buf, head_len, &pos, &f) == 1)
        if (!field_dropped(f.name) && add_field(resp, &f) < 0)
            return -1;
    if (h.has_length)
        resp_stream_length(resp, h.length);
    return resp_failed(resp) ? -1 : (int)head_len;
}

/* --- the environment (RFC 3875 section 4.1) ------------------------------------------ */

struct env_builder {
    char *mem;
    size_t len, cap;
    size_t start;              /* of the variable being written */
    size_t off[CGI_ENV_MAX];   /* where each finished variable starts */
    unsigned n;
    bool failed;
};

static void env_append(struct env_builder *b, const char *p, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        char *m = realloc(b->mem, cap);
        if (!m) {
            b->failed = true;
            return;
        }
        b->mem = m;
        b->cap = cap;
    }
    if (n)
        memcpy(b->mem + b->len, p, n);
    b->len += n;
}

static void env_begin(struct env_builder *b, const char *name)
{
    b->start = b->len;
    env_append(b, name, strlen(name));
    env_append(b, "=", 1);
}

static void env_end(struct env_builder *b)
{
    env_append(b, "", 1);
    if (b->n == CGI_ENV_MAX)
        b->failed = true;
    if (!b->failed)
        b->off[b->n++] = b->start;
}

static void env_put(struct env_builder *b, const char *name, const char *v, size_t len)
{
    env_begin(b, name);
    env_append(b, v, len);
    env_end(b);
}

static void env_puts(struct env_builder *b, const char *name, const char *v)
{
    env_put(b, name, v, strlen(v));
}

/* The numeric text of sa's address (IPv4-mapped IPv6 as IPv4; IPv6 in brackets when
 * asked), and its port. */
static unsigned addr_text(const struct sockaddr *sa, char *out, size_t cap, bool brackets)
{
    out[0] = '\0';
    if (sa && sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &a->sin_addr, out, (socklen_t)cap);
        return ntohs(a->sin_port);
    }
    if (sa && sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
        if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
            inet_ntop(AF_INET, &a->sin6_addr.s6_addr[12], out, (socklen_t)cap);
        } else if (brackets && cap > 2) {
            out[0] = '[';
            inet_ntop(AF_INET6, &a->sin6_addr, out + 1, (socklen_t)(cap - 2));
            strcat(out, "]");
        } else {
            inet_ntop(AF_INET6, &a->sin6_addr, out, (socklen_t)cap);
        }
        return ntohs(a->sin6_port);
    }
    return 0;
}

/* SERVER_NAME: the Host without its port; else the listener's address, unless that is a
 * wildcard (then the machine's name). */
static void env_server_name(struct env_builder *b, const struct request *req,
                            const struct cgi_vars *v)
{
    struct http_slice host = req->http->host;
    if (host.len) {
        size_t n = 0;
        if (host.p[0] == '[') {
            const char *close = memchr(host.p, ']', host.len);
            n = close ? (size_t)(close + 1 - host.p) : host.len;
        } else {
            while (n < host.len && host.p[n] != ':')
                n++;
        }
        env_put(b, "SERVER_NAME", host.p, n);
        return;
    }
    char addr[INET6_ADDRSTRLEN + 2];
    addr_text(req->local, addr, sizeof(addr), true);
    bool wildcard = !addr[0] || strcmp(addr, "0.0.0.0") == 0 || strcmp(addr, "[::]") == 0;
    env_puts(b, "SERVER_NAME", wildcard ? v->hostname : addr);
}

static bool same_name(struct http_slice a, struct http_slice b)
{
    return a.len == b.len && strncasecmp(a.p, b.p, a.len) == 0;
}

/* "HTTP_" + the name in upper case, '-' as '_'; false if this header gets no variable. */
static bool header_var(struct http_slice name, char *out, size_t cap)
{
    static const char *const skipped[] = {"proxy", "content-length", "content-type",
                                          "transfer-encoding"};
    for (size_t i = 0; i < sizeof(skipped) / sizeof(skipped[0]); i++)
        if (http_slice_eq(name, skipped[i]))
            return false;
    if (name.len == 0 || name.len + 6 > cap)
        return false;
    memcpy(out, "HTTP_", 5);
    for (size_t i = 0; i < name.len; i++) {
        char c = name.p[i];
        if (c >= 'a' && c <= 'z')
            c = (char)(c - 'a' + 'A');
        else if (c == '-')
            c = '_';
        else if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')))
            return false;
        out[5 + i] = c;
    }
    out[5 + name.len] = '\0';
    return true;
}

static void env_headers(struct env_builder *b, const struct http_request *h)
{
    char var[256];
    for (unsigned i = 0; i < h->n_headers; i++) {
        struct http_slice name = h->headers[i].name;
        bool seen = false;
        for (unsigned j = 0; j < i && !seen; j++)
            seen = same_name(h->headers[j].name, name);
        if (seen || !header_var(name, var, sizeof(var)))
            continue;
        const char *sep = http_slice_eq(name, "cookie") ? "; " : ", ";
        env_begin(b, var);
        for (unsigned j = i; j < h->n_headers; j++) {
            if (!same_name(h->headers[j].name, name))
                continue;
            if (j > i)
                env_append(b, sep, 2);
            env_append(b, h->headers[j].value.p, h->headers[j].value.len);
        }
        env_end(b);
    }
}

int cgi_env_build(const struct request *req, const struct cgi_vars *v, struct cgi_env *env)
{
    const struct http_request *h = req->http;
    struct env_builder b = {0};
    char addr[INET6_ADDRSTRLEN + 2], num[24];

    env_puts(&b, "GATEWAY_INTERFACE", "CGI/1.1");
    env_puts(&b, "SERVER_SOFTWARE", v->software);
    env_server_name(&b, req, v);
    snprintf(num, sizeof(num), "%u", addr_text(req->local, addr, sizeof(addr), false));
    env_puts(&b, "SERVER_PORT", num);
    env_puts(&b, "REQUEST_SCHEME", req->https ? "https" : "http");
    if (req->https)
        env_puts(&b, "HTTPS", "on");
    env_puts(&b, "SERVER_PROTOCOL", h->version_minor == 0 ? "HTTP/1.0" : "HTTP/1.1");
    env_put(&b, "REQUEST_METHOD", h->method_name.p, h->method_name.len);
    struct http_origin_form of = http_origin_form(h); /* what $request_uri expands to */
    env_begin(&b, "REQUEST_URI");
    env_append(&b, of.path.p, of.path.len);
    env_append(&b, of.query.p, of.query.len);
    env_end(&b);
    env_put(&b, "SCRIPT_NAME", v->script_name.p, v->script_name.len);
    env_put(&b, "PATH_INFO", v->path_info.p, v->path_info.len);
    if (v->path_info.len) {
        env_begin(&b, "PATH_TRANSLATED");
        env_append(&b, v->document_root, strlen(v->document_root));
        env_append(&b, v->path_info.p, v->path_info.len);
        env_end(&b);
    }
    env_put(&b, "QUERY_STRING", req->args.p, req->args.len);
    unsigned port = addr_text(req->peer, addr, sizeof(addr), false);
    num[0] = '\0'; /* no port: a real_ip_header that named none, as nginx's $remote_port */
    if (port)
        snprintf(num, sizeof(num), "%u", port);
    env_puts(&b, "REMOTE_ADDR", addr);
    env_puts(&b, "REMOTE_PORT", num);
    if (h->framing != HTTP_BODY_NONE) {
        snprintf(num, sizeof(num), "%zu", req->body_len);
        env_puts(&b, "CONTENT_LENGTH", num);
    }
    if (h->content_type.len)
        env_put(&b, "CONTENT_TYPE", h->content_type.p, h->content_type.len);
    env_puts(&b, "DOCUMENT_ROOT", v->document_root);
    env_puts(&b, "SCRIPT_FILENAME", v->script_filename);
    env_puts(&b, "REDIRECT_STATUS", "200"); /* what php-cgi asks for, as Apache sets it */
    env_puts(&b, "PATH", v->path);
    env_headers(&b, h);

    env->envp = b.failed ? NULL : malloc((b.n + 1) * sizeof(char *));
    if (!env->envp) {
        free(b.mem);
        return -1;
    }
    for (unsigned i = 0; i < b.n; i++)
        env->envp[i] = b.mem + b.off[i];
    env->envp[b.n] = NULL;
    env->mem = b.mem;
    env->n = b.n;
    return 0;
}

const char *cgi_env_get(const struct cgi_env *env, const char *name)
{
    size_t n = strlen(name);
    for (unsigned i = 0; i < env->n; i++)
        if (strncmp(env->envp[i], name, n) == 0 && env->envp[i][n] == '=')
            return env->envp[i] + n + 1;
    return NULL;
}

void cgi_env_free(struct cgi_env *env)
{
    free(env->envp);
    free(env->mem);
    env->envp = NULL;
    env->mem = NULL;
}

/* --- finding the script ---------------------------------------------------------------- */

struct cgi_target {
    char rel[REQUEST_PATH_MAX]; /* the script, relative to the mount's directory */
    size_t script_name_len;     /* req->path[0..this) is SCRIPT_NAME */
};


/* stat rel beneath the mount's directory, never leaving it. Returns 0 or -errno. */
static int stat_beneath(const struct cgi_dir *d, const char *rel, struct stat *sb)
{
    int fd = open_beneath(d->fd, rel, O_PATH, d->real);
    if (fd < 0)
        return fd;
    int rc = fstat(fd, sb) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

/* Split the path under the mount into the script and PATH_INFO. Returns 0 or a status. */
static int cgi_resolve(const struct cgi_dir *d, const struct request *req,
                       struct cgi_target *t)
{
    const char *rest = req->path + req->mount->prefix_len;
    if (*rest == '/')
        rest++;
    size_t rest_len = req->path_len - (size_t)(rest - req->path);
    if (rest_len == 0)
        return 403; /* the directory itself */
    memcpy(t->rel, rest, rest_len + 1);
    char *seg = t->rel;
    for (;;) {
        char *slash = strchr(seg, '/');
        if (slash)
            *slash = '\0';
        struct stat sb;
        int rc = stat_beneath(d, t->rel, &sb);
        if (rc < 0)
            return http_status_for_errno(-rc);
        if (S_ISREG(sb.st_mode)) {
            if (!(sb.st_mode & (S_IXUSR | S_IXGRP | S_IXOTH)))
                return 403;
            t->script_name_len = (size_t)(rest - req->path) + strlen(t->rel);
            return 0;
        }
        if (!S_ISDIR(sb.st_mode) || !slash || slash[1] == '\0')
            return 403; /* never run a directory, a FIFO, a device */
        *slash = '/';
        seg = slash + 1;
    }
}

/* --- running it ------------------------------------------------------------------------ */

/* Move fd above 0..2 (only when the server runs with those closed), keeping O_CLOEXEC, so
 * that the child's dup2 onto 0, 1 and 2 never clobbers one of its own sources. */
static int above_stdio(int fd)
{
    if (fd < 0 || fd > 2)
        return fd;
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    int saved = errno;
    close(fd);
    errno = saved;
    return moved;
}

/* The body in a memfd, at offset 0. Returns the fd or -1. */
static int body_memfd(const char *body, size_t len)
{
    int fd = above_stdio(memfd_create("lfhttpd-cgi-stdin", MFD_CLOEXEC));
    if (fd < 0)
        return -1;
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, body + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            goto fail;
        done += (size_t)w;
    }
    if (lseek(fd, 0, SEEK_SET) == 0)
        return fd;
fail:
    close(fd);
    return -1;
}

/* A memfd of `bytes` zeros that cannot grow: the script's stderr, bounded. */
static int stderr_memfd(size_t bytes)
{
    int fd = above_stdio(memfd_create("lfhttpd-cgi-stderr", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (fd < 0)
        return -1;
    if (ftruncate(fd, (off_t)bytes) < 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Copy p[0..len) into out as one NUL-terminated log-safe line: control bytes become '?'
 * (a path or a script's words must not forge log lines or send terminal escapes). */
static void printable(char *out, size_t cap, const char *p, size_t len)
{
    if (len > cap - 1)
        len = cap - 1;
    for (size_t i = 0; i < len; i++)
        out[i] = (unsigned char)p[i] < 0x20 || p[i] == 0x7f ? '?' : p[i];
    out[len] = '\0';
}

/* Copy what the script wrote to stderr into the error log, a line at a time. */
static void log_stderr(const struct cgi_run *run)
{
    struct stat sb;
    if (fstat(run->err_fd, &sb) < 0 || sb.st_blocks == 0)
        return; /* nothing was written: no page was ever touched */
    size_t cap = run->st->stderr_bytes;
    char *buf = malloc(cap);
    ssize_t n = buf ? pread(run->err_fd, buf, cap, 0) : -1;
    const char *p = buf, *end = n > 0 ? buf + n : buf;
    const char *nul = n > 0 ? memchr(buf, '\0', (size_t)n) : NULL;
    if (nul)
        end = nul; /* the rest is the zeros it was made of */
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *eol = nl ? nl : end;
        char line[1024];
        if (eol > p) {
            printable(line, sizeof(line), p, (size_t)(eol - p));
            log_warn("cgi: %s: %s", run->script, line);
        }
        p = nl ? nl + 1 : end;
    }
    free(buf);
}

static int cgi_stream_head(void *ctx, const char *buf, size_t len, struct response *resp)
{
    (void)ctx;
    return cgi_parse_head(buf, len, resp);
}

static void cgi_stream_done(void *ctx, bool timed_out)
{
    struct cgi_run *run = ctx;
    if (timed_out)
        log_warn("cgi: %s: killed after cgi_timeout (%u ms)", run->script,
                 run->st->timeout_ms);
    if (run->err_fd >= 0) {
        log_stderr(run);
        close(run->err_fd);
    }
    /* Once, without waiting: the main thread reaps whatever is still running. */
    waitpid(run->pid, NULL, WNOHANG);
    atomic_fetch_sub_explicit(&run->st->running, 1, memory_order_relaxed);
    free(run);
}

static const struct resp_stream_ops cgi_stream_ops = {
    .head = cgi_stream_head,
    .done = cgi_stream_done,
};

/* Take a place among the cgi_max_processes, or say there is none. */
static bool slot_take(struct cgi_state *st)
{
    unsigned n = atomic_load_explicit(&st->running, memory_order_relaxed);
    do {
        if (n >= st->max_processes)
            return false;
    } while (!atomic_compare_exchange_weak_explicit(&st->running, &n, n + 1,
                                                    memory_order_relaxed,
                                                    memory_order_relaxed));
    return true;
}

static int spawn_status(int err)
{
    switch (err) {
    case EACCES:
    case EPERM:
        return 403;
    case EAGAIN:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
        return 503;
    default: /* ENOENT (a missing interpreter), ENOEXEC, E2BIG: the script is broken */
        return 500;
    }
}

/* A pidfd of the script just started, so that its group is never signalled by a number
 * that names someone else by then. The main thread may already have reaped it: then the
 * pid may be anyone's, and the pidfd (if any) is refused unless it is still our child. */
static void cgi_pidfd(struct cgi_run *run)
{
    run->pgid = run->pid; /* POSIX_SPAWN_SETPGROUP with 0: the group is the script's pid */
    run->pidfd = (int)syscall(SYS_pidfd_open, run->pid, 0);
    if (run->pidfd < 0) {
        if (errno == ESRCH)
            run->pgid = 0; /* gone already: nothing of it to kill */
        return;            /* ENOSYS, before Linux 5.3: the number it is */
    }
    siginfo_t si;
    if (waitid((idtype_t)P_PIDFD_ID, (id_t)run->pidfd, &si,
               WEXITED | WNOHANG | WNOWAIT) < 0 && errno == ECHILD) {
        close(run->pidfd); /* reaped before the pidfd was taken: not ours */
        run->pidfd = -1;
        run->pgid = 0;
    }
}

/* Start the script with its pipes. Returns 0 with run->pid and *out_fd set, or a status. */
static int cgi_spawn(struct cgi_state *st, const struct cgi_dir *d, const struct request *req,
                     const struct cgi_target *t, struct cgi_run *run, int *out_fd)
{
    char filename[PATH_MAX + REQUEST_PATH_MAX], dir[sizeof(filename)];
    snprintf(filename, sizeof(filename), "%s/%s", d->real, t->rel);
    memcpy(dir, filename, strlen(filename) + 1);
    *strrchr(dir, '/') = '\0'; /* there is one: after d->real */
    struct cgi_vars vars = {
        .software = st->software,
        .path = st->path,
        .document_root = req->root_real ? req->root_real : st->document_root,
        .hostname = st->hostname,
        .script_name = {req->path, t->script_name_len},
        .path_info = {req->path + t->script_name_len, req->path_len - t->script_name_len},
        .script_filename = filename,
    };
    struct cgi_env env;
    if (cgi_env_build(req, &vars, &env) < 0) {
        log_error("cgi: %s: the environment: out of memory", run->script);
        return 503;
    }

    int status = 503;
    int in_fd = st->devnull_fd, err_fd = -1, out[2] = {-1, -1};
    const char *failed = NULL; /* the step that failed, for the log */
    if (req->body_len > 0 && (in_fd = body_memfd(req->body, req->body_len)) < 0)
        failed = "the body's memfd";
    else if (pipe2(out, O_CLOEXEC) < 0 || (out[0] = above_stdio(out[0])) < 0 ||
             (out[1] = above_stdio(out[1])) < 0 ||
             fcntl(out[0], F_SETFL, O_NONBLOCK) < 0) /* ours only: its stdout blocks */
        failed = "the output pipe";
    else if (st->stderr_bytes && (err_fd = stderr_memfd(st->stderr_bytes)) < 0)
        failed = "the stderr memfd";
    if (failed) {
        log_error("cgi: %s: %s: %s", run->script, failed, strerror(errno));
        goto out;
    }

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in_fd, 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err_fd >= 0 ? err_fd : st->devnull_fd, 2);
    posix_spawn_file_actions_addchdir_np(&fa, dir);
    /* The server opens everything O_CLOEXEC, but not what it inherited from whoever
     * started it (a shell's stray descriptors), nor what a library may forget. */
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    char *argv[] = {filename, NULL};
    int rc = posix_spawn(&run->pid, filename, &fa, &st->attr, argv, env.envp);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        log_error("cgi: %s: cannot run %s: %s", run->script, filename, strerror(rc));
        status = spawn_status(rc);
        goto out;
    }
    status = 0;
    cgi_pidfd(run);
    *out_fd = out[0];
    out[0] = -1;
    run->err_fd = err_fd;
    err_fd = -1;
out:
    cgi_env_free(&env);
    if (in_fd != st->devnull_fd && in_fd >= 0)
        close(in_fd);
    if (out[0] >= 0)
        close(out[0]);
    if (out[1] >= 0)
        close(out[1]);
    if (err_fd >= 0)
        close(err_fd);
    return status;
}

static enum mod_result cgi_handle(void *state, const struct request *req,
                                  struct response *resp)
{
    struct cgi_state *st = state;
    const struct cgi_dir *d = req->mount->data;
    struct cgi_target t;
    int status = cgi_resolve(d, req, &t);
    if (status) {
        resp_error(resp, status);
        return MOD_HANDLED;
    }
    if (!slot_take(st)) {
        atomic_fetch_add_explicit(&st->refused, 1, memory_order_relaxed);
        resp_error(resp, 503);
        resp_header(resp, "Retry-After", "1");
        return MOD_HANDLED;
    }
    struct cgi_run *run = malloc(sizeof(*run));
    int fd = -1;
    status = run ? 0 : 503;
    if (run) {
        run->st = st;
        run->err_fd = -1;
        printable(run->script, sizeof(run->script), req->path, t.script_name_len);
        snprintf(run->name, sizeof(run->name), "cgi: %s", run->script);
        status = cgi_spawn(st, d, req, &t, run, &fd);
    }
    if (status) {
        free(run);
        atomic_fetch_sub_explicit(&st->running, 1, memory_order_relaxed);
        resp_error(resp, status);
        if (status == 503) /* out of descriptors or memory: a moment may fix it */
            resp_header(resp, "Retry-After", "1");
        return MOD_HANDLED;
    }
    resp_stream(resp, &(struct resp_stream){
        .fd = fd,
        .pgid = run->pgid,
        .pidfd = run->pidfd,
        .timeout_ms = st->timeout_ms,
        .ops = &cgi_stream_ops,
        .ctx = run,
        .name = run->name,
    });
    return MOD_HANDLED;
}

/* --- configuration --------------------------------------------------------------------- */

/* What every run shares: SERVER_SOFTWARE (the Server header, as server_tokens made it),
 * PATH, DOCUMENT_ROOT, the host name, /dev/null and the spawn attributes. */
static int read_server(struct module_init *mi, struct cgi_state *st)
{
    snprintf(st->software, sizeof(st->software), "%s", http_response_server());
    const char *path = getenv("PATH");
    snprintf(st->path, sizeof(st->path), "%s", path && *path ? path : CGI_DEFAULT_PATH);
    if (!realpath(mi->cfg->root, st->document_root))
        snprintf(st->document_root, sizeof(st->document_root), "%s", mi->cfg->root);
    if (gethostname(st->hostname, sizeof(st->hostname) - 1) < 0)
        snprintf(st->hostname, sizeof(st->hostname), "localhost");

    st->devnull_fd = above_stdio(open("/dev/null", O_RDWR | O_CLOEXEC));
    if (st->devnull_fd < 0)
        return module_error(mi, NULL, "/dev/null: %s", strerror(errno));
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    /* The server ignores SIGPIPE, may have been started ignoring others (nohup), blocks
     * its shutdown signals: a script starts with none of that. */
    static const int sigs[] = {SIGPIPE, SIGCHLD, SIGHUP, SIGINT,  SIGQUIT, SIGTERM,
                               SIGUSR1, SIGUSR2, SIGALRM, SIGTSTP, SIGTTIN, SIGTTOU};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        sigaddset(&defaults, sigs[i]);
    posix_spawnattr_init(&st->attr);
    st->attr_ready = true;
    if (posix_spawnattr_setflags(&st->attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                                POSIX_SPAWN_SETSIGDEF) != 0 ||
        posix_spawnattr_setpgroup(&st->attr, 0) != 0 ||
        posix_spawnattr_setsigmask(&st->attr, &none) != 0 ||
        posix_spawnattr_setsigdefault(&st->attr, &defaults) != 0)
        return module_error(mi, NULL, "posix_spawnattr: cannot set the attributes");
    return 0;
}

/* The scripts of the directory at path, opened once; NULL with the message in msg. */
static struct cgi_dir *open_dir(struct cgi_state *st, const char *path, char *msg, size_t len)
{
    if (st->n_dirs == MODULE_MOUNTS_MAX)
        return snprintf(msg, len, "too many cgi directories"), NULL;
    struct cgi_dir *d = calloc(1, sizeof(*d));
    if (!d)
        return snprintf(msg, len, "out of memory"), NULL;
    st->dirs[st->n_dirs++] = d;
    d->fd = above_stdio(open(path, O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (d->fd < 0 || !realpath(path, d->real))
        return snprintf(msg, len, "directory \"%s\": %s", path, strerror(errno)), NULL;
    return d;
}

/* `cgi PREFIX DIR;`: mounts the scripts of DIR on PREFIX. */
static int add_dir(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len)
{
    struct cgi_dir *d = open_dir(base, n->args[1], msg, len);
    return d ? module_mount_add(ctx, n, n->args[0], d, true) : -1;
}

/* A location's `cgi DIR;` makes it the scripts' mount: the location's prefix is where the
 * script names start. CGI has no settings per block: the value returned only says "no
 * error". */
static void *cgi_block(void *state, const struct module_block *b)
{
    static const char none;
    struct cgi_state *st = state;
    if (b->context != CONF_LOCATION)
        return (void *)&none;
    for (const struct conf_node *n = b->first; n; n = n->next) {
        if (strcmp(n->name, "cgi") != 0 || n->n_args != 1)
            continue;
        char msg[CONFIG_PATH_MAX + 64];
        struct cgi_dir *d = open_dir(st, n->args[0], msg, sizeof(msg));
        if (!d) {
            module_error(b->mi, n, "cgi: %s", msg);
            return NULL;
        }
        if (module_block_mount(b, n, d, true) < 0)
            return NULL;
    }
    return (void *)&none;
}

#define SETTING(field) CONF_AT(struct cgi_state, field)

static const struct conf_directive cgi_directives[] = {
    {"cgi", CONF_LIST, CONF_TOP, CONF_REPEATS, .min_args = 2, .max_args = 2, .set = add_dir,
     .usage = "PREFIX DIR",
     .doc = "Mounts a directory of CGI/1.1 scripts (RFC 3875) on a path prefix: the path under "
        "the prefix is walked beneath DIR, the first executable regular file is the script "
        "(`SCRIPT_NAME`), the rest `PATH_INFO`; directories, files without an x bit and "
        "symlinks leading out are 403. Repeatable."},
    /* read by the block hook */
    {"cgi", CONF_LIST, CONF_LOCATION, .min_args = 1, .max_args = 1, .set = conf_set_later,
     .usage = "DIR",
     .doc = "The location's paths name CGI scripts in DIR: `/cgi-bin/t.sh` in `location "
        "/cgi-bin/ { cgi /srv/cgi; }` runs `/srv/cgi/t.sh` with `SCRIPT_NAME=/cgi-bin/t.sh` "
        "(in a regex location the whole path names the script)."},
    {"cgi_timeout", CONF_DURATION, CONF_TOP, .min = 1, SETTING(timeout_ms),
     .dflt = "30s",
     .doc = "Bounds a script's whole response: past it the process group is killed and the "
        "client gets 504 (or a cut connection if the head went out)."},
    {"cgi_max_processes", CONF_COUNT, CONF_TOP, .min = 1, .max = 100000,
     SETTING(max_processes),
     .dflt = "32",
     .doc = "Scripts running at once; beyond it 503 with `Retry-After`."},
    {"cgi_stderr", CONF_SIZE, CONF_TOP, .off = true, .max = CGI_STDERR_LOG_MAX,
     SETTING(stderr_bytes),
     .dflt = "4k",
     .doc = "How much of a script's stderr is copied to the error log; `off`: none."},
    {.name = NULL},
};

static void cgi_fini(void *state)
{
    struct cgi_state *st = state;
    for (unsigned i = 0; i < st->n_dirs; i++) {
        if (st->dirs[i]->fd >= 0)
            close(st->dirs[i]->fd);
        free(st->dirs[i]);
    }
    if (st->devnull_fd >= 0)
        close(st->devnull_fd);
    if (st->attr_ready)
        posix_spawnattr_destroy(&st->attr);
    free(st);
}

static int cgi_init(struct module_init *mi, void **state)
{
    struct cgi_state *st = calloc(1, sizeof(*st));
    if (!st)
        return module_error(mi, NULL, "out of memory");
    st->timeout_ms = 30000;
    st->max_processes = 32;
    st->stderr_bytes = 4096;
    st->devnull_fd = -1;
    int rc = module_read_directives(mi, st);
    if (rc == 0) /* locations may mount scripts later */
        rc = read_server(mi, st);
    if (rc < 0) {
        cgi_fini(st);
        return -1;
    }
    *state = st;
    return 0;
}

static void cgi_metrics(void *state, struct strbuf *b)
{
    struct cgi_state *st = state;
    strbuf_prom_family(b, "lfhttpd_cgi_processes", "gauge", "CGI scripts running now.");
    strbuf_printf(b, "lfhttpd_cgi_processes %u\n",
                  atomic_load_explicit(&st->running, memory_order_relaxed));
    strbuf_prom_family(b, "lfhttpd_cgi_refused_total", "counter",
                       "CGI requests refused (503) because cgi_max_processes were running, "
                       "since the configuration was loaded.");
    strbuf_printf(b, "lfhttpd_cgi_refused_total %llu\n",
                  (unsigned long long)atomic_load_explicit(&st->refused, memory_order_relaxed));
}

const struct module mod_cgi = {
    .name = "cgi",
    .directives = cgi_directives,
    .init = cgi_init,
    .fini = cgi_fini,
    .handle = cgi_handle,
    .block = cgi_block,
    .metrics = cgi_metrics,
};
