/* log.c — error log and buffered access log. */
#include "log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The process-wide error log: the one place every part of the server reports to. */
static struct {
    int fd;
    enum log_level level;
    char path[CONFIG_PATH_MAX]; /* "" for stdout/stderr */
} error_log = {2, LOG_LEVEL_INFO, ""};

/* Error-level messages also to stderr, while the server starts. */
static atomic_bool echo_errors;

void log_echo_errors(bool on)
{
    atomic_store_explicit(&echo_errors, on, memory_order_relaxed);
}

int log_check_dest(const char *dest)
{
    if (!strcmp(dest, "stderr") || !strcmp(dest, "stdout") || !strcmp(dest, "off"))
        return 0;
    struct stat sb;
    if (stat(dest, &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) {
            errno = EISDIR;
            return -1;
        }
        return access(dest, W_OK);
    }
    if (errno != ENOENT)
        return -1;
    char dir[CONFIG_PATH_MAX];
    const char *slash = strrchr(dest, '/');
    if (!slash)
        snprintf(dir, sizeof(dir), ".");
    else
        snprintf(dir, sizeof(dir), "%.*s", slash == dest ? 1 : (int)(slash - dest), dest);
    return access(dir, W_OK | X_OK); /* ENOENT when the directory itself is missing */
}

/* Open path and put it in place of fd. */
static int reopen_onto(const char *path, int fd)
{
    int nfd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (nfd < 0)
        return -1;
    int rc = dup3(nfd, fd, O_CLOEXEC);
    int saved = errno;
    close(nfd);
    errno = saved;
    return rc < 0 ? -1 : 0;
}

static int open_dest(const char *dest, int *fd, bool *own)
{
    *own = false;
    if (strcmp(dest, "stderr") == 0) {
        *fd = 2;
        return 0;
    }
    if (strcmp(dest, "stdout") == 0) {
        *fd = 1;
        return 0;
    }
    *fd = open(dest, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (*fd < 0)
        return -1;
    *own = true;
    return 0;
}

int log_open_error(const char *dest, enum log_level level)
{
    int fd;
    bool own;
    if (open_dest(dest, &fd, &own) < 0)
        return -1;
    log_close_error();
    error_log.fd = fd;
    error_log.level = level;
    snprintf(error_log.path, sizeof(error_log.path), "%s", own ? dest : "");
    return 0;
}

int log_reopen_error(void)
{
    if (!error_log.path[0])
        return 0;
    return reopen_onto(error_log.path, error_log.fd);
}

int access_log_reopen(struct access_log *log)
{
    if (!log->own_fd || !log->path[0])
        return 0;
    access_log_flush(log); /* lines written before the rotation go to the old file */
    return reopen_onto(log->path, log->fd);
}

void log_close_error(void)
{
    if (error_log.fd > 2)
        close(error_log.fd);
    error_log.fd = 2;
}

/* Copy s into out (at most cap bytes) with control bytes and DEL as \xHH, so that a file
 * name or a header value holding a newline cannot begin a forged line of its own. An
 * escape that does not fit whole is left out. */
static size_t escape_controls(char *out, size_t cap, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        bool control = c < 0x20 || c == 0x7f;
        if (n + (control ? 4 : 1) > cap)
            break;
        if (control) {
            out[n++] = '\\';
            out[n++] = 'x';
            out[n++] = hex[c >> 4];
            out[n++] = hex[c & 15];
        } else {
            out[n++] = (char)c;
        }
    }
    return n;
}

/* One line to fd (one write, so lines of several threads never interleave); echo: to
 * stderr too. */
static void vlog(int fd, bool echo, enum log_level level, const char *fmt, va_list ap)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    char line[1024], msg[1024];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    size_t n = strftime(line, sizeof(line), "%Y/%m/%d %H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, sizeof(line) - n, " [%s] ", names[level]);
    int m = vsnprintf(msg, sizeof(msg), fmt, ap);
    if (m > 0) {
        size_t len = (size_t)m < sizeof(msg) ? (size_t)m : sizeof(msg) - 1;
        n += escape_controls(line + n, sizeof(line) - n - 1, msg, len);
    }
    line[n++] = '\n';
    ssize_t w = write(fd, line, n);
    if (echo)
        w = write(2, line, n);
    (void)w;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    if (level > error_log.level)
        return;
    bool echo = level == LOG_LEVEL_ERROR && error_log.fd != 2 &&
                atomic_load_explicit(&echo_errors, memory_order_relaxed);
    va_list ap;
    va_start(ap, fmt);
    vlog(error_log.fd, echo, level, fmt, ap);
    va_end(ap);
}

void log_msg_to(const struct log_dest *d, enum log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (!d) {
        if (level <= error_log.level)
            vlog(error_log.fd, level == LOG_LEVEL_ERROR && error_log.fd != 2 &&
                                   atomic_load_explicit(&echo_errors, memory_order_relaxed),
                 level, fmt, ap);
    } else if (!d->quiet && level <= d->level) {
        vlog(d->fd, false, level, fmt, ap);
    }
    va_end(ap);
}

/* --- access log -------------------------------------------------------------------- */

int access_log_open(struct access_log *log, const char *dest, bool json)
{
    memset(log, 0, sizeof(*log));
    log->fd = -1;
    log->json = json;
    pthread_mutex_init(&log->lock, NULL);
    if (strcmp(dest, "off") == 0)
        return 0;
    if (open_dest(dest, &log->fd, &log->own_fd) < 0)
        return -1;
    if (log->own_fd)
        snprintf(log->path, sizeof(log->path), "%s", dest);
    return 0;
}

static void buf_flush_locked(struct access_log *log, struct access_log_buf *b)
{
    size_t off = 0;
    while (off < b->len) {
        ssize_t w = write(log->fd, b->data + off, b->len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break; /* a full disk must not stop serving; the lines are dropped */
        off += (size_t)w;
    }
    b->len = 0;
}

/* The calling thread's buffer for this log, created at the thread's first request. */
static struct access_log_buf *thread_buf(struct access_log *log)
{
    static _Thread_local struct access_log *cached_log;
    static _Thread_local struct access_log_buf *cached_buf;
    if (cached_log == log && cached_buf)
        return cached_buf;
    struct access_log_buf *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    pthread_mutex_init(&b->lock, NULL);
    pthread_mutex_lock(&log->lock);
    b->next = log->bufs;
    log->bufs = b;
    pthread_mutex_unlock(&log->lock);
    cached_log = log;
    cached_buf = b;
    return b;
}

/* Copy s into out as a log-safe string: quotes, backslashes, control and non-ASCII bytes
 * become \xHH, so one request is always one line and cannot forge another. */
static size_t escape(char *out, size_t cap, const char *s, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    if (!s || len == 0) {
        out[0] = '-';
        return 1;
    }
    size_t n = 0;
    for (size_t i = 0; i < len && n + 4 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
            out[n++] = '\\';
            out[n++] = 'x';
            out[n++] = hex[c >> 4];
            out[n++] = hex[c & 15];
        } else {
            out[n++] = (char)c;
        }
    }
    return n;
}

static size_t format_peer(char *out, size_t cap, const struct sockaddr *sa)
{
    if (sa && sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        if (inet_ntop(AF_INET, &a->sin_addr, out, (socklen_t)cap))
            return strlen(out);
    } else if (sa && sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
        if (inet_ntop(AF_INET6, &a->sin6_addr, out, (socklen_t)cap))
            return strlen(out);
    }
    out[0] = '-';
    return 1;
}

/* The time part of a line, "[21/Nov/2026:23:30:00 +0000]", cached per thread per second. */
static const char *log_time(int64_t t)
{
    static _Thread_local int64_t cached_t = -1;
    static _Thread_local char cached[40];
    if (t != cached_t) {
        time_t tt = (time_t)t;
        struct tm tm;
        localtime_r(&tt, &tm);
        strftime(cached, sizeof(cached), "[%d/%b/%Y:%H:%M:%S %z]", &tm);
        cached_t = t;
    }
    return cached;
}

/* Copy s into out as the inside of a JSON string: quotes, backslashes and control bytes
 * escaped, and every byte >= 0x80 as \u00XX, so the line is valid JSON (and ASCII)
 * whatever the client sent. */
static size_t json_escape(char *out, size_t cap, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;
    for (size_t i = 0; s && i < len && n + 7 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            out[n++] = '\\';
            out[n++] = (char)c;
        } else if (c < 0x20 || c >= 0x7f) {
            memcpy(out + n, "\\u00", 4);
            out[n + 4] = hex[c >> 4];
            out[n + 5] = hex[c & 15];
            n += 6;
        } else {
            out[n++] = (char)c;
        }
    }
    return n;
}

/* {"time":"2026-11-22T01:00:00+00:00","remote":"127.0.0.1","request":"GET / HTTP/1.1",
 *  "status":200,"bytes":5,"referer":"","user_agent":"curl/7.88.1"} */
static size_t format_json(char *line, const struct access_entry *e)
{
    char peer[64], when[40];
    format_peer(peer, sizeof(peer), e->peer);
    time_t tt = (time_t)e->time_s;
    struct tm tm;
    localtime_r(&tt, &tm);
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S%z", &tm);
    size_t n = (size_t)sprintf(line, "{\"time\":\"%s\",\"remote\":\"%s\",\"request\":\"", when,
                               peer);
    /* caps: 2048 + 1024 + 1024 escaped bytes and about 250 fixed ones fit the line */
    n += json_escape(line + n, 2048, e->request_line, e->request_line_len);
    n += (size_t)sprintf(line + n, "\",\"status\":%d,\"bytes\":%llu,\"referer\":\"", e->status,
                         (unsigned long long)e->bytes);
    n += json_escape(line + n, 1024, e->referer, e->referer_len);
    n += (size_t)sprintf(line + n, "\",\"user_agent\":\"");
    n += json_escape(line + n, 1024, e->user_agent, e->user_agent_len);
    if (e->request_id) /* 32 hex digits: nothing to escape */
        n += (size_t)sprintf(line + n, "\",\"request_id\":\"%.32s", e->request_id);
    memcpy(line + n, "\"}\n", 3);
    return n + 3;
}

void access_log_write(struct access_log *log, const struct access_entry *e)
{
    if (log->fd < 0)
        return;
    char line[4096 + 512];
    size_t n;
    if (log->json) {
        n = format_json(line, e);
        goto append;
    }
    n = format_peer(line, 64, e->peer);
    n += (size_t)snprintf(line + n, 64, " - - %s \"", log_time(e->time_s));
    n += escape(line + n, 2048, e->request_line, e->request_line_len);
    n += (size_t)snprintf(line + n, 64, "\" %d %llu \"", e->status, (unsigned long long)e->bytes);
    n += escape(line + n, 1024, e->referer, e->referer_len);
    memcpy(line + n, "\" \"", 3);
    n += 3;
    n += escape(line + n, 1024, e->user_agent, e->user_agent_len);
    line[n++] = '"';
    if (e->request_id) /* one more quoted field at the end, as nginx's `"$request_id"` */
        n += (size_t)sprintf(line + n, " \"%.32s\"", e->request_id);
    line[n++] = '\n';

append:;
    struct access_log_buf *b = thread_buf(log);
    if (!b)
        return;
    pthread_mutex_lock(&b->lock);
    if (b->len + n > sizeof(b->data))
        buf_flush_locked(log, b);
    memcpy(b->data + b->len, line, n);
    b->len += n;
    pthread_mutex_unlock(&b->lock);
}

void access_log_flush(struct access_log *log)
{
    if (log->fd < 0)
        return;
    pthread_mutex_lock(&log->lock);
    for (struct access_log_buf *b = log->bufs; b; b = b->next) {
        pthread_mutex_lock(&b->lock);
        if (b->len)
            buf_flush_locked(log, b);
        pthread_mutex_unlock(&b->lock);
    }
    pthread_mutex_unlock(&log->lock);
}

void access_log_close(struct access_log *log)
{
    access_log_flush(log);
    struct access_log_buf *b = log->bufs;
    while (b) {
        struct access_log_buf *next = b->next;
        pthread_mutex_destroy(&b->lock);
        free(b);
        b = next;
    }
    log->bufs = NULL;
    if (log->own_fd)
        close(log->fd);
    log->fd = -1;
    pthread_mutex_destroy(&log->lock);
}
