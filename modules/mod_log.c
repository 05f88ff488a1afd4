/* mod_log.c — nginx's `log_format` and a server's or a location's `access_log`.
 *
 *   log_format NAME [escape=default|json|none] STRING...;   (top level, nginx's http)
 *   access_log PATH [FORMAT [buffer=SIZE] [gzip[=LEVEL]] [flush=TIME] [if=CONDITION]];
 *   access_log off;
 *
 * A format is compiled once (vars.h), with the escaping its escape= names applied to what
 * the variables bring, and expanded after the response, in the log hook, so that $status
 * and $body_bytes_sent are the answer's. The predefined `combined` is nginx's, the line the
 * top-level access log writes.
 *
 * The blocks inherit as nginx's: a server or location with any access_log has exactly its
 * own list, `off` none; one without takes its outer block's. A path is opened once a
 * generation (O_APPEND), whichever blocks name it, as nginx's open files; a path with
 * variables is made per line and its file opened, written and closed for it (nginx's
 * without open_log_file_cache), never beneath a ".." a value brought. Without
 * buffer=, each line is one write(2), so lines of several threads never interleave and a
 * line is in the file when the response has gone. With buffer=SIZE, the file's lines
 * wait in a buffer of SIZE per thread (nginx's is per worker process), written whole when
 * the next line would overflow it, when flush=TIME has passed since its oldest line (the
 * server's tick looks four times a second, so a quiet server writes too), and when the
 * generation is let go: at a reload once its last request is done, and at shutdown. The
 * request path allocates nothing: the line is built on the stack, and a thread's buffer
 * for a file is made at its first line there.
 *
 * With gzip[=LEVEL] (a buffer of 64k unless buffer= says), what a buffer writes is one
 * whole gzip member, written by one write(2), so that the file is always a series of
 * members that zcat reads whole, whichever threads wrote them. Each buffer keeps its
 * compressor and its output space, made with it, reset for each member.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "../server/clock.h"
#include "../server/directive.h"
#include "../server/http_response.h"
#include "../server/module.h"
#include "../server/vars.h"

#define LOG_FORMATS_MAX 64
#define LOG_FORMAT_NAME_MAX 64
#define LOG_LINE_MAX 8192 /* a longer line is left out (the error log says nothing) */
#define LOG_BUFFER_MAX (64u << 20) /* buffer=: per thread, so kept sane */
#define LOG_GZIP_BUFFER (64u << 10) /* gzip without buffer=: nginx's */

/* nginx's predefined format, the Combined Log Format. */
static const char combined[] = "$remote_addr - $remote_user [$time_local] \"$request\" "
                               "$status $body_bytes_sent \"$http_referer\" "
                               "\"$http_user_agent\"";

struct log_format {
    char name[LOG_FORMAT_NAME_MAX];
    struct vars_value *line;
};

/* One thread's lines waiting for a buffered file. */
struct log_tbuf {
    pthread_mutex_t lock; /* the owner appends, the tick writes: hardly ever contended */
    struct log_tbuf *next;
    pthread_t owner;
    int64_t oldest_ms; /* when its first unwritten line came, for flush= */
    size_t len;
    z_stream z;           /* gzip=: the compressor, reset for each member */
    unsigned char *zout;  /* gzip=: room for a member of the most a flush writes */
    size_t zout_size;
    char data[]; /* the file's buffer_bytes */
};

/* A file the access logs of a generation write, opened once whatever blocks name it (as
 * nginx's open files), with its buffer= and flush= when it has them. */
struct log_file {
    struct log_file *next;      /* the module's files */
    struct log_file *next_busy; /* the files with buffers, process-wide (busy_files) */
    char *path;
    int fd;
    uint64_t id;            /* never reused: the key of the threads' buffer caches */
    size_t buffer_bytes;    /* buffer=; 0: every line written at once */
    unsigned flush_ms;      /* flush=; 0: only when full and when let go */
    int gzip;               /* gzip=: the level, 1-9; 0: the lines as they are */
    pthread_mutex_t lock;   /* guards bufs (the list, not their contents) */
    struct log_tbuf *bufs;  /* one per thread that wrote here */
};

struct log_module {
    unsigned index; /* in the chain: for module_settings() */
    struct log_format formats[LOG_FORMATS_MAX];
    unsigned n_formats;
    struct log_file *files;
};

/* One `access_log`: where, how, and when. */
struct log_target {
    struct log_file *file;   /* NULL when the path has variables: */
    struct vars_value *path; /* then made per line, and the file opened for it (below) */
    const struct log_format *format;
    struct vars_value *cond; /* if=: a line only when it is neither "" nor "0"; or NULL */
};

/* A block's access logs. */
struct log_conf {
    struct log_module *m; /* the formats and files, for the setter */
    struct log_target *targets;
    unsigned n_targets;
    bool off; /* `access_log off;`: none here */
};

static const struct log_format *format_named(const struct log_module *m, const char *name)
{
    for (unsigned i = 0; i < m->n_formats; i++)
        if (strcmp(m->formats[i].name, name) == 0)
            return &m->formats[i];
    return NULL;
}

static int add_format(struct log_module *m, const char *name, enum vars_context ctx,
                      const char *text, char *msg, size_t len)
{
    if (format_named(m, name))
        return snprintf(msg, len, "duplicate log_format name \"%s\"", name), -1;
    if (m->n_formats == LOG_FORMATS_MAX || strlen(name) >= LOG_FORMAT_NAME_MAX)
        return snprintf(msg, len, "too many log formats, or a name too long"), -1;
    struct log_format *f = &m->formats[m->n_formats];
    if (vars_compile(text, ctx, &f->line, msg, len) < 0)
        return -1;
    snprintf(f->name, sizeof(f->name), "%s", name);
    m->n_formats++;
    return 0;
}

/* `log_format NAME [escape=default|json|none] STRING...;`: the strings joined. */
static int set_log_format(void *base, const struct conf_node *n, void *ctx, char *msg,
                          size_t len)
{
    (void)ctx;
    struct log_module *m = base;
    unsigned first = 1;
    enum vars_context esc = VARS_LOG_DEFAULT;
    if (strncmp(n->args[1], "escape=", 7) == 0) {
        const char *e = n->args[1] + 7;
        if (strcmp(e, "default") == 0)
            esc = VARS_LOG_DEFAULT;
        else if (strcmp(e, "json") == 0)
            esc = VARS_LOG_JSON;
        else if (strcmp(e, "none") == 0)
            esc = VARS_LOG_NONE;
        else
            return snprintf(msg, len, "unknown log format escaping \"%s\"", e), -1;
        first = 2;
    }
    if (first >= n->n_args)
        return snprintf(msg, len, "log_format %s has no string", n->args[0]), -1;
    size_t total = 1;
    for (unsigned i = first; i < n->n_args; i++)
        total += strlen(n->args[i]);
    char *text = malloc(total);
    if (!text)
        return snprintf(msg, len, "out of memory"), -1;
    text[0] = '\0';
    for (unsigned i = first; i < n->n_args; i++)
        strcat(text, n->args[i]);
    int rc = add_format(m, n->args[0], esc, text, msg, len);
    free(text);
    return rc;
}

/* The buffered files of every generation still alive, process-wide: the current
 * generation's tick writes what is due in all of them, so that one kept after a reload by
 * an idle keep-alive connection still meets its flush= (nginx's old workers go at once). */
static struct {
    pthread_mutex_t lock;
    struct log_file *head;
} busy_files = {PTHREAD_MUTEX_INITIALIZER, NULL};

static atomic_uint_fast64_t next_file_id = 1;

static void write_all(int fd, const void *data, size_t n)
{
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(fd, (const char *)data + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break; /* a full disk must not stop serving: the lines are dropped */
        off += (size_t)w;
    }
}

/* The most one gzip member holds: a buffer's worth, or one line longer than the buffer. */
static size_t gzip_input_max(const struct log_file *f)
{
    return f->buffer_bytes > LOG_LINE_MAX + 1 ? f->buffer_bytes : LOG_LINE_MAX + 1;
}

/* b's compressor for f: as nginx's, deflate's window and memory level no larger than the
 * input needs; the output space deflateBound's for the most a member holds. */
static int tbuf_gzip_init(const struct log_file *f, struct log_tbuf *b)
{
    size_t in = gzip_input_max(f);
    int wbits = 15, mem_level = 8;
    while (wbits > 9 && in < (size_t)((1 << (wbits - 1)) - 262)) {
        wbits--;
        mem_level--;
    }
    /* 16 + wbits: the gzip wrapper, with zlib's default header (no name, mtime 0) */
    if (deflateInit2(&b->z, f->gzip, Z_DEFLATED, 16 + wbits, mem_level,
                     Z_DEFAULT_STRATEGY) != Z_OK)
        return -1;
    b->zout_size = deflateBound(&b->z, (uLong)in);
    if (!(b->zout = malloc(b->zout_size))) {
        deflateEnd(&b->z);
        return -1;
    }
    return 0;
}

/* n bytes to f as they are, or (gzip=) as one gzip member, one write (b->lock held). */
static void tbuf_emit(const struct log_file *f, struct log_tbuf *b, const char *data,
                      size_t n)
{
    if (!f->gzip) {
        write_all(f->fd, data, n);
        return;
    }
    if (deflateReset(&b->z) != Z_OK)
        return;
    b->z.next_in = (Bytef *)data;
    b->z.avail_in = (uInt)n;
    b->z.next_out = b->zout;
    b->z.avail_out = (uInt)b->zout_size;
    if (deflate(&b->z, Z_FINISH) != Z_STREAM_END)
        return; /* cannot be, within deflateBound: nothing half made is written */
    write_all(f->fd, b->zout, b->zout_size - b->z.avail_out);
}

/* Write out b's lines (b->lock held). */
static void tbuf_write_locked(const struct log_file *f, struct log_tbuf *b)
{
    if (b->len)
        tbuf_emit(f, b, b->data, b->len);
    b->len = 0;
}

/* The lines of f's threads that are due (all: every one) go to the file. */
static void file_flush(struct log_file *f, int64_t now_ms, bool all)
{
    pthread_mutex_lock(&f->lock);
    for (struct log_tbuf *b = f->bufs; b; b = b->next) {
        pthread_mutex_lock(&b->lock);
        if (b->len && (all || (f->flush_ms && now_ms - b->oldest_ms >= f->flush_ms)))
            tbuf_write_locked(f, b);
        pthread_mutex_unlock(&b->lock);
    }
    pthread_mutex_unlock(&f->lock);
}

/* A buffer for f, with its compressor when f is gzip=. */
static struct log_tbuf *tbuf_new(const struct log_file *f)
{
    struct log_tbuf *b = calloc(1, sizeof(*b) + f->buffer_bytes);
    if (!b)
        return NULL;
    if (f->gzip && tbuf_gzip_init(f, b) < 0) {
        free(b);
        return NULL;
    }
    pthread_mutex_init(&b->lock, NULL);
    return b;
}

/* The calling thread's buffer for f, made at its first line there (with, for gzip=, its
 * compressor: nothing is allocated per line or per flush). A few files' buffers
 * are remembered per thread, by the file's id, which no other file ever has. */
static struct log_tbuf *thread_tbuf(struct log_file *f)
{
    enum { CACHED = 8 };
    static _Thread_local struct {
        uint64_t id;
        struct log_tbuf *b;
    } cache[CACHED];
    unsigned slot = (unsigned)(f->id % CACHED);
    if (cache[slot].id == f->id)
        return cache[slot].b;
    pthread_t self = pthread_self();
    pthread_mutex_lock(&f->lock);
    struct log_tbuf *b = f->bufs;
    while (b && !pthread_equal(b->owner, self))
        b = b->next;
    if (!b && (b = tbuf_new(f)) != NULL) {
        b->owner = self;
        b->next = f->bufs;
        f->bufs = b;
    }
    pthread_mutex_unlock(&f->lock);
    if (b) {
        cache[slot].id = f->id;
        cache[slot].b = b;
    }
    return b;
}

static void write_now(const struct log_file *f, const char *line, size_t n)
{
    ssize_t w = write(f->fd, line, n);
    (void)w; /* a full disk must not stop serving */
}

/* One line to f: at once, or into the thread's buffer, which goes first when the line
 * would overflow it; a line longer than the buffer is written at once after it. */
static void file_write(struct log_file *f, const char *line, size_t n, int64_t now_ms)
{
    struct log_tbuf *b = f->buffer_bytes ? thread_tbuf(f) : NULL;
    if (!b) {
        if (!f->gzip) /* (out of memory for a gzip buffer: plain text would spoil it) */
            write_now(f, line, n);
        return;
    }
    pthread_mutex_lock(&b->lock);
    if (b->len + n > f->buffer_bytes)
        tbuf_write_locked(f, b);
    if (n > f->buffer_bytes) {
        tbuf_emit(f, b, line, n);
    } else {
        if (b->len == 0)
            b->oldest_ms = now_ms;
        memcpy(b->data + b->len, line, n);
        b->len += n;
    }
    pthread_mutex_unlock(&b->lock);
}

static void file_close(struct log_file *f)
{
    if (f->buffer_bytes) {
        pthread_mutex_lock(&busy_files.lock);
        struct log_file **p = &busy_files.head;
        while (*p && *p != f)
            p = &(*p)->next_busy;
        if (*p)
            *p = f->next_busy;
        pthread_mutex_unlock(&busy_files.lock);
        file_flush(f, 0, true);
    }
    struct log_tbuf *b = f->bufs;
    while (b) {
        struct log_tbuf *next = b->next;
        pthread_mutex_destroy(&b->lock);
        if (f->gzip) {
            deflateEnd(&b->z);
            free(b->zout);
        }
        free(b);
        b = next;
    }
    if (f->fd > 2)
        close(f->fd);
    pthread_mutex_destroy(&f->lock);
    free(f->path);
    free(f);
}

/* The file at path for an access_log with buffer=size, flush=flush_ms (0: none) and
 * gzip=level (0: none): one already named shares its descriptor and buffer, as in nginx,
 * where two buffers that differ are an error. */
static struct log_file *file_open(struct log_module *m, const char *path, size_t size,
                                  unsigned flush_ms, int gzip, char *msg, size_t len)
{
    struct log_file *f = m->files;
    while (f && strcmp(f->path, path) != 0)
        f = f->next;
    if (f && size && f->buffer_bytes &&
        (f->buffer_bytes != size || f->flush_ms != flush_ms || f->gzip != gzip))
        return snprintf(msg, len, "access_log \"%s\" already defined with conflicting "
                        "parameters", path), NULL;
    if (!f) {
        if (!(f = calloc(1, sizeof(*f))) || !(f->path = strdup(path))) {
            free(f);
            return snprintf(msg, len, "out of memory"), NULL;
        }
        if (strcmp(path, "stderr") == 0 || strcmp(path, "stdout") == 0)
            f->fd = path[3] == 'e' ? 2 : 1;
        else
            f->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (f->fd < 0) {
            snprintf(msg, len, "\"%s\": %s", path, strerror(errno));
            free(f->path);
            free(f);
            return NULL;
        }
        f->id = atomic_fetch_add(&next_file_id, 1);
        pthread_mutex_init(&f->lock, NULL);
        f->next = m->files;
        m->files = f;
    }
    if (size && !f->buffer_bytes) {
        f->buffer_bytes = size;
        f->flush_ms = flush_ms;
        f->gzip = gzip;
        pthread_mutex_lock(&busy_files.lock);
        f->next_busy = busy_files.head;
        busy_files.head = f;
        pthread_mutex_unlock(&busy_files.lock);
    }
    return f;
}

/* What follows FORMAT: buffer=SIZE, gzip[=LEVEL], flush=TIME and if=CONDITION. */
struct log_options {
    uint64_t buffer_bytes;
    unsigned flush_ms;
    int gzip;
};

/* gzip=LEVEL: 1 (fastest) to 9 (smallest), digits only, as nginx's. */
static int read_gzip_level(const char *s)
{
    int level = 0;
    if (!*s)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || level > 9)
            return -1;
        level = level * 10 + (*s - '0');
    }
    return level >= 1 && level <= 9 ? level : -1;
}

static int read_option(struct log_target *t, struct log_options *o, const char *a, char *msg,
                       size_t len)
{
    if (strncmp(a, "buffer=", 7) == 0) {
        if (config_parse_size(a + 7, &o->buffer_bytes) < 0 || o->buffer_bytes == 0 ||
            o->buffer_bytes > LOG_BUFFER_MAX)
            return snprintf(msg, len, "invalid buffer size \"%s\"", a + 7), -1;
        return 0;
    }
    if (strncmp(a, "flush=", 6) == 0) {
        if (config_parse_duration_ms(a + 6, &o->flush_ms) < 0 || o->flush_ms == 0)
            return snprintf(msg, len, "invalid flush time \"%s\"", a + 6), -1;
        return 0;
    }
    if (strcmp(a, "gzip") == 0) {
        o->gzip = Z_BEST_SPEED;
        return 0;
    }
    if (strncmp(a, "gzip=", 5) == 0) {
        if ((o->gzip = read_gzip_level(a + 5)) < 0)
            return snprintf(msg, len, "invalid compression level \"%s\"", a + 5), -1;
        return 0;
    }
    if (strncmp(a, "if=", 3) == 0) {
        if (t->cond)
            return snprintf(msg, len, "duplicate \"if=\""), -1;
        return vars_compile(a + 3, VARS_RAW, &t->cond, msg, len);
    }
    return snprintf(msg, len, "invalid parameter \"%s\"", a), -1;
}

/* `access_log PATH [FORMAT [buffer=SIZE] [gzip[=LEVEL]] [flush=TIME] [if=CONDITION]];` or
 * `off`. */
static int set_access_log(void *base, const struct conf_node *n, void *ctx, char *msg,
                          size_t len)
{
    (void)ctx;
    struct log_conf *c = base;
    if (strcmp(n->args[0], "off") == 0) {
        if (n->n_args > 1)
            return snprintf(msg, len, "\"off\" takes no other parameter"), -1;
        c->off = true;
        return 0;
    }
    struct log_target t = {.file = NULL};
    if (strchr(n->args[0], '$') &&
        vars_compile(n->args[0], VARS_RAW, &t.path, msg, len) < 0)
        return -1;
    struct log_options o = {0, 0, 0};
    const char *name = n->n_args > 1 ? n->args[1] : "combined";
    t.format = format_named(c->m, name);
    if (!t.format)
        return snprintf(msg, len, "unknown log format \"%s\"", name), -1;
    for (unsigned i = 2; i < n->n_args; i++)
        if (read_option(&t, &o, n->args[i], msg, len) < 0)
            goto fail;
    if (o.gzip && !o.buffer_bytes)
        o.buffer_bytes = LOG_GZIP_BUFFER;
    if (o.flush_ms && !o.buffer_bytes) {
        snprintf(msg, len, "no buffer is defined for access_log \"%s\"", n->args[0]);
        goto fail;
    }
    if (t.path && o.buffer_bytes) {
        snprintf(msg, len, "buffered logs cannot have variables in name (as nginx)");
        goto fail;
    }
    struct log_target *grown = realloc(c->targets, (c->n_targets + 1) * sizeof(*grown));
    if (!grown) {
        snprintf(msg, len, "out of memory");
        goto fail;
    }
    c->targets = grown;
    if (!t.path) {
        t.file = file_open(c->m, n->args[0], (size_t)o.buffer_bytes, o.flush_ms, o.gzip,
                           msg, len);
        if (!t.file)
            goto fail;
    }
    c->targets[c->n_targets++] = t;
    return 0;
fail:
    vars_free(t.cond);
    vars_free(t.path);
    return -1;
}

static const struct conf_directive log_directives[] = {
    {"log_format", CONF_LIST, CONF_TOP, CONF_REPEATS, .min_args = 2, .max_args = CONFIG_MAX_ARGS,
     .set = set_log_format, .usage = "NAME [escape=default|json|none] STRING...",
     .doc = "A format for `access_log` in a server or location: the strings joined, with "
            "variables (`$status`, `$body_bytes_sent`, `$request`, `$time_local`... expanded "
            "after the response). What a variable brings is escaped as nginx's: `default` "
            "writes `\"`, `\\` and bytes below 32 or above 126 as `\\xHH`, and an empty value "
            "as `-`; `json` as in a JSON string; `none` not at all. `combined` is predefined, "
            "nginx's."},
    {"access_log", CONF_LIST, CONF_SERVER | CONF_LOCATION, CONF_REPEATS, .min_args = 1,
     .max_args = 6, .set = set_access_log,
     .usage = "PATH [FORMAT [buffer=SIZE] [gzip[=LEVEL]] [flush=TIME] [if=CONDITION]] | off",
     .doc = "In a server or location: one more log of its requests, in FORMAT (`combined` "
            "when not named); several write the same request each. A block with any "
            "`access_log` has exactly its own (`off`: none), one without its outer block's, "
            "as nginx. `if=`: a line only when CONDITION expands to neither \"\" nor `0`. "
            "Without `buffer=`, each line is written at once, one `write`. `buffer=SIZE` "
            "keeps the file's lines in a buffer of SIZE per thread (nginx's is per worker), "
            "written when a line would overflow it, `flush=TIME` after its oldest line "
            "(within a quarter second more), at a reload and at shutdown; lines of "
            "several threads then reach the file out of time order. `gzip[=LEVEL]` "
            "(1 fastest to 9 smallest; 1 when not said) compresses what the buffer writes, "
            "a buffer of 64k unless `buffer=` says: each write is one whole gzip member, "
            "so `zcat` reads the file whenever it is read. Not reopened on `SIGUSR1`. "
            "PATH may hold variables (`/var/log/nginx/$host.log`): the file is opened for "
            "each line and closed (made, 0644), without `buffer=` or `gzip`, not when the "
            "request's root is missing, as nginx's; a value that would put `..` in the "
            "path writes nothing."},
    {.name = NULL},
};

/* --- the module --------------------------------------------------------------------------- */

/* A path made of variables names a file beneath what its literal text says, never a
 * "..": a value a client sends cannot take the log elsewhere. */
static bool safe_log_path(const char *p, size_t n)
{
    if (n == 0 || memchr(p, '\0', n))
        return false;
    for (size_t i = 0; i + 1 < n; i++)
        if (p[i] == '.' && p[i + 1] == '.' && (i == 0 || p[i - 1] == '/') &&
            (i + 2 == n || p[i + 2] == '/'))
            return false;
    return true;
}

/* A line for a path with variables: the file opened (made, 0644) for it, written with one
 * write(2), and closed, as nginx without open_log_file_cache. Not when the request's root
 * is missing, as nginx, which tests the root before it makes a log there. */
static void write_to_path(const struct log_target *t, const struct vars_source *src,
                          const struct request *req, const char *line, size_t n)
{
    char path[PATH_MAX];
    long len = vars_expand(t->path, src, path, sizeof(path));
    if (len < 0 || !safe_log_path(path, (size_t)len) || req->root_fd < 0)
        return;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    ssize_t w = write(fd, line, n);
    (void)w; /* a line that does not go is lost, as a full disk loses it */
    close(fd);
}

static void log_target_write(const struct log_target *t, const struct vars_source *src,
                             const struct request *req, int64_t now_ms)
{
    char line[LOG_LINE_MAX + 1];
    if (t->cond) {
        long n = vars_expand(t->cond, src, line, sizeof(line));
        if (n <= 0 || (n == 1 && line[0] == '0'))
            return;
    }
    long n = vars_expand(t->format->line, src, line, LOG_LINE_MAX);
    if (n < 0)
        return; /* longer than a line may be */
    line[n++] = '\n';
    if (t->path)
        write_to_path(t, src, req, line, (size_t)n);
    else
        file_write(t->file, line, (size_t)n, now_ms);
}

static void log_log(void *state, const struct request *req, const struct response *resp)
{
    const struct log_module *m = state;
    const struct log_conf *c = module_settings(req, m->index);
    if (!c || c->n_targets == 0)
        return;
    struct vars_source src;
    module_vars_source(req, &src);
    module_vars_answer(&src, resp);
    src.answered = true;
    src.status = resp->status;
    src.body_bytes = resp->head_only || resp->no_length ? 0 : resp->content_length;
    src.head_bytes = resp->head_len;
    src.start_us = req->start_us;
    src.now_us = clock_now_us();
    src.request_length = req->request_length;
    src.conn_requests = req->conn_requests;
    src.pipelined = req->pipelined;
    for (unsigned i = 0; i < c->n_targets; i++)
        log_target_write(&c->targets[i], &src, req, src.now_us / 1000);
}

/* Four times a second: the buffered lines whose flush= has come, of every generation. */
static void log_tick(void *state, int64_t now_ms)
{
    (void)state;
    pthread_mutex_lock(&busy_files.lock);
    for (struct log_file *f = busy_files.head; f; f = f->next_busy)
        if (f->flush_ms)
            file_flush(f, now_ms, false);
    pthread_mutex_unlock(&busy_files.lock);
}

/* A block with its own access_log, or `off`, replaces the top-level log. */
static bool log_logs_request(void *state, const struct request *req)
{
    const struct log_module *m = state;
    const struct log_conf *c = module_settings(req, m->index);
    return c && (c->n_targets || c->off);
}

static void log_fini(void *state)
{
    struct log_module *m = state;
    for (unsigned i = 0; i < m->n_formats; i++)
        vars_free(m->formats[i].line);
    while (m->files) {
        struct log_file *next = m->files->next;
        file_close(m->files); /* what is buffered goes out */
        m->files = next;
    }
    free(m);
}

static int log_init(struct module_init *mi, void **state)
{
    struct log_module *m = calloc(1, sizeof(*m));
    if (!m)
        return module_error(mi, NULL, "out of memory");
    m->index = mi->index;
    char msg[256];
    if (add_format(m, "combined", VARS_LOG_DEFAULT, combined, msg, sizeof(msg)) < 0 ||
        module_read_directives(mi, m) < 0) {
        log_fini(m);
        return -1;
    }
    *state = m;
    return 0;
}

static void log_block_free(void *state, void *settings)
{
    (void)state;
    struct log_conf *c = settings;
    for (unsigned i = 0; i < c->n_targets; i++) {
        vars_free(c->targets[i].cond); /* the files are the module's (log_fini) */
        vars_free(c->targets[i].path);
    }
    free(c->targets);
    free(c);
}

/* The top level's access_log statements, when they are nginx's (config.h): the core's
 * table has the directive there, so they are read here one by one. */
static int top_block(const struct module_block *b, struct log_conf *c)
{
    if (!b->mi->cfg->access_log_by_format)
        return 0;
    for (const struct conf_node *n = module_directive(b->mi, "access_log"); n;
         n = module_directive_next(b->mi, "access_log", n)) {
        char msg[256];
        if (set_access_log(c, n, NULL, msg, sizeof(msg)) < 0)
            return module_error(b->mi, n, "%s", msg);
    }
    return 0;
}

/* A block with any access_log has its own list (none after `off`); one without shares its
 * outer block's. */
static void *log_block(void *state, const struct module_block *b)
{
    if (b->outer && !module_block_has(b))
        return (void *)b->outer;
    struct log_conf *c = calloc(1, sizeof(*c));
    if (!c) {
        module_error(b->mi, NULL, "out of memory");
        return NULL;
    }
    c->m = state;
    /* At the top level the core logs, unless the statements are nginx's (top_block). */
    int rc = b->context == CONF_TOP ? top_block(b, c) : module_block_read(b, c);
    if (rc == 0 && c->off && c->n_targets)
        rc = module_error(b->mi, b->node, "access_log off with another access_log");
    if (rc < 0) {
        log_block_free(state, c);
        return NULL;
    }
    return c;
}

const struct module mod_log = {
    .name = "log",
    .directives = log_directives,
    .init = log_init,
    .fini = log_fini,
    .log = log_log,
    .logs_request = log_logs_request,
    .tick = log_tick,
    .block = log_block,
    .block_free = log_block_free,
};
