/* mod_static.c — files from the document root.
 *
 * GET and HEAD; OPTIONS answers 200 with Allow (and no body) for what exists; other
 * methods 405. The request path arrives decoded and normalized; the
 * file is opened beneath the root (open_beneath: openat2 RESOLVE_BENEATH), so no
 * "..", absolute path or symlink can leave the root.
 *
 * Directories: a 301 adds the missing trailing slash; otherwise the index files are tried
 * in order; none: 403. Files: Last-Modified, a strong ETag, the conditional requests of
 * RFC 9110 section 13 in its order of evaluation, and Range (single and multipart) with
 * If-Range. The body is sent by the core with sendfile; a file of at most
 * open_file_cache_mem_max bytes (4k by default) is also read into its cache entry once,
 * and a whole-file 200 then leaves with its head in one write.
 *
 * Open-file cache (open_file_cache, on by default; file_cache.h): a regular file served
 * once stays open, keyed by the path given to open_beneath ("dir/" or "." for a directory
 * whose index file it is), with its stat, validators and media type. A hit opens, stats
 * and allocates nothing; the response holds a reference to the entry instead of a
 * descriptor of its own (resp_file_shared). An entry older than open_file_cache_valid
 * is looked at again beneath the root, as a request would open it (openat2
 * RESOLVE_BENEATH, O_PATH, then fstat): the same file unchanged (device, inode, size,
 * mtime and ctime to the nanosecond, and for a directory the same index file) keeps it;
 * anything else (changed, replaced, gone, a symlink now leading out) drops it, and the
 * request is answered as if the cache were empty. So edits show within the validity
 * window, and a file rewritten in place may be sent within it with the old length and
 * validators, as with nginx. Errors, directories and listings are not cached.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file_cache.h"
#include "log.h"
#include "module.h"
#include "strbuf.h"

#define STATIC_MAX_RANGES 16
#define STATIC_CACHE_MAX 10000         /* open_file_cache_max */
#define STATIC_CACHE_VALID_MS 1000     /* open_file_cache_valid */
#define STATIC_CACHE_INACTIVE_MS 60000 /* open_file_cache_inactive */
#define STATIC_CACHE_MEM_MAX 4096      /* open_file_cache_mem_max */

struct static_state {
    struct file_cache *cache; /* NULL: open_file_cache off */
    uint64_t mem_max;         /* open_file_cache_mem_max: files up to it kept in memory */
    unsigned index;           /* in the chain: for module_settings() */
};

/* if_modified_since: how an If-Modified-Since date is compared with the file's. */
enum static_ims {
    STATIC_IMS_UNSET, /* not set anywhere: RFC 9110's rule (see check_preconditions) */
    STATIC_IMS_OFF,   /* ignored */
    STATIC_IMS_EXACT, /* 304 when it is the file's date exactly */
    STATIC_IMS_BEFORE /* 304 when the file is not newer than it */
};


/* --- opening beneath the root -------------------------------------------------------- */

#define STATIC_OPEN_FLAGS (O_RDONLY | O_NONBLOCK | O_NOCTTY) /* a FIFO does not block */

static int open_file(const struct request *req, int dirfd, const char *rel)
{
    return open_beneath(dirfd, rel, STATIC_OPEN_FLAGS, req->root_real);
}


/* --- validators and conditionals ----------------------------------------------------- */

static void make_validators(const struct stat *sb, struct file_validators *v)
{
    /* "inode-size-mtime_ns" in hex: changes when the file is replaced or rewritten. */
    char *p = v->etag;
    *p++ = '"';
    p = http_fmt_hex(p, (uint64_t)sb->st_ino);
    *p++ = '-';
    p = http_fmt_hex(p, (uint64_t)sb->st_size);
    *p++ = '-';
    p = http_fmt_hex(p, (uint64_t)sb->st_mtim.tv_sec * 1000000000ull +
                            (uint64_t)sb->st_mtim.tv_nsec);
    *p++ = '"';
    *p = '\0';
    v->mtime_s = sb->st_mtim.tv_sec;
    memcpy(v->last_mod, http_last_modified(v->mtime_s), sizeof(v->last_mod));
}


/* RFC 9110 section 13.2.2, steps 1 to 4. Returns 0 to go on, or 304 / 412. now_s: the
 * server's clock; an If-Modified-Since later than it is no date the client can have had
 * from us, so it is ignored (RFC 9110 section 13.1.3), and the file sent whole. */
static int check_preconditions(const struct http_request *h, const struct file_validators *v,
                               int64_t now_s, enum static_ims ims)
{
    int64_t t;
    if (h->if_match.len) {
        if (!http_etag_list_matches(h->if_match, v->etag, false))
            return 412;
    } else if (h->if_unmodified_since.len && http_date_parse(h->if_unmodified_since, &t) == 0) {
        if (v->mtime_s > t)
            return 412;
    }
    if (h->if_none_match.len) {
        if (http_etag_list_matches(h->if_none_match, v->etag, true))
            return 304;
    } else if (ims != STATIC_IMS_OFF && h->if_modified_since.len &&
               http_date_parse(h->if_modified_since, &t) == 0) {
        if (ims == STATIC_IMS_EXACT ? v->mtime_s == t
            : ims == STATIC_IMS_BEFORE ? v->mtime_s <= t
            : t <= now_s && v->mtime_s <= t)
            return 304;
    }
    return 0;
}

/* If-Range (RFC 9110 section 13.1.5): the range applies only if the validator matches. */
static bool if_range_holds(struct http_slice ir, const struct file_validators *v)
{
    if (ir.len == 0)
        return true;
    if (ir.p[0] == '"' || (ir.len > 2 && ir.p[0] == 'W' && ir.p[1] == '/'))
        return ir.len == strlen(v->etag) && memcmp(ir.p, v->etag, ir.len) == 0;
    int64_t t;
    return http_date_parse(ir, &t) == 0 && t == v->mtime_s;
}

/* --- responses ------------------------------------------------------------------------ */

static void add_file_headers(struct response *resp, const struct file_validators *v)
{
    resp_header(resp, "Last-Modified", v->last_mod);
    resp_header(resp, "ETag", v->etag);
}

static void multipart(struct response *resp, int fd, uint64_t size, const char *type,
                      const struct http_range *r, unsigned n)
{
    static _Thread_local unsigned long long counter;
    char boundary[40];
    snprintf(boundary, sizeof(boundary), "lfhttpd-%016llx",
             (unsigned long long)(uintptr_t)&counter * 2654435761u ^ ++counter);
    resp_headerf(resp, "Content-Type: multipart/byteranges; boundary=%s", boundary);
    for (unsigned i = 0; i < n; i++) {
        char part[512];
        int len = snprintf(part, sizeof(part),
                           "%s--%s\r\nContent-Type: %s\r\nContent-Range: bytes %llu-%llu/%llu"
                           "\r\n\r\n",
                           i ? "\r\n" : "", boundary, type, (unsigned long long)r[i].first,
                           (unsigned long long)r[i].last, (unsigned long long)size);
        resp_body_copy(resp, part, (size_t)len);
        resp_body_file(resp, fd, r[i].first, r[i].last - r[i].first + 1);
    }
    char tail[64];
    int len = snprintf(tail, sizeof(tail), "\r\n--%s--\r\n", boundary);
    resp_body_copy(resp, tail, (size_t)len);
}

/* A file to answer with: one opened for this request, or a cache entry. */
struct file_view {
    int fd;
    const struct stat *st;
    const struct file_validators *v;
    const char *type; /* NULL: asked for when needed (after the preconditions) */
    const char *name; /* for the type */
    const char *data; /* the whole file in memory (a cache entry's), or NULL */
    enum static_ims ims; /* the location's if_modified_since */
};

static void serve_file(const struct request *req, struct response *resp,
                       const struct file_view *f)
{
    const struct http_request *h = req->http;
    const struct file_validators *v = f->v;
    uint64_t size = (uint64_t)f->st->st_size;

    int pre = check_preconditions(h, v, req->now_s, f->ims);
    if (pre == 304) {
        resp_start(resp, 304);
        add_file_headers(resp, v);
        return;
    }
    if (pre) {
        resp_error(resp, pre);
        return;
    }
    /* After the preconditions: a 304 or 412 has no use for it (and it may cost libmagic). */
    const char *type = f->type ? f->type : module_content_type(req, f->name, f->fd, f->st);

    struct http_range ranges[STATIC_MAX_RANGES];
    unsigned n = 0;
    enum http_range_result rr = HTTP_RANGE_IGNORE;
    if (h->method == HTTP_METHOD_GET && h->range.len && if_range_holds(h->if_range, v))
        rr = http_range_parse(h->range, size, ranges, STATIC_MAX_RANGES, &n);

    if (rr == HTTP_RANGE_UNSATISFIABLE) {
        resp_error(resp, 416);
        resp_headerf(resp, "Content-Range: bytes */%llu", (unsigned long long)size);
        add_file_headers(resp, v);
        return;
    }
    if (rr == HTTP_RANGE_OK) {
        resp_start(resp, 206);
        add_file_headers(resp, v);
        resp_header(resp, "Accept-Ranges", "bytes");
        if (n == 1) {
            resp_header(resp, "Content-Type", type);
            resp_headerf(resp, "Content-Range: bytes %llu-%llu/%llu",
                         (unsigned long long)ranges[0].first,
                         (unsigned long long)ranges[0].last, (unsigned long long)size);
            resp_body_file(resp, f->fd, ranges[0].first, ranges[0].last - ranges[0].first + 1);
        } else {
            multipart(resp, f->fd, size, type, ranges, n);
        }
        return;
    }
    resp_start(resp, 200);
    resp_header(resp, "Content-Type", type);
    add_file_headers(resp, v);
    resp_header(resp, "Accept-Ranges", "bytes");
    if (f->data) /* head and body leave in one write */
        resp_body_mem(resp, f->data, size);
    else
        resp_body_file(resp, f->fd, 0, size);
}

/* --- the open-file cache -------------------------------------------------------------- */

static void release_entry(void *entry)
{
    file_cache_put(entry);
}

/* Answer from e, a reference the response now holds: the core gives it back once sent. */
static void serve_entry(const struct request *req, struct response *resp,
                        struct file_cache_entry *e, enum static_ims ims)
{
    resp_file_shared(resp, e->fd, &e->st, release_entry, e);
    struct file_view f = {e->fd, &e->st, &e->v, e->type, NULL, e->data, ims};
    serve_file(req, resp, &f);
}

/* Is key a directory's ("." for the root, else ending in '/')? */
static bool key_is_dir(const char *key, size_t len)
{
    return key[len - 1] == '/' || (len == 1 && key[0] == '.');
}

/* The status of what a request would open at rel now, beneath the root as mod_static
 * opens files (O_PATH: nothing is opened for reading, a FIFO does not block).
 * Returns 0 or -errno. */
static int stat_beneath(const struct request *req, const char *rel, struct stat *st)
{
    int fd = open_beneath(req->root_fd, rel, O_PATH, req->root_real);
    if (fd < 0)
        return fd;
    int rc = fstat(fd, st) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

/* A cache key: the path beneath the root, and for any root but the first (the top
 * level's) "/ID/" in front, so that two roots' files of one path are two entries. A path
 * beneath the root never starts with '/'. Returns the key, in buf or rel itself. */
static const char *cache_key(const struct request *req, const char *rel, char *buf, size_t cap)
{
    if (req->root_id == 0)
        return rel;
    int n = snprintf(buf, cap, "/%u/%s", req->root_id, rel);
    return n > 0 && (size_t)n < cap ? buf : NULL;
}

/* The path beneath the root in a cache key. */
static const char *key_rel(const char *key)
{
    return key[0] == '/' ? strchr(key + 1, '/') + 1 : key;
}

/* Would a request for e's key be answered with e's file, unchanged, now? */
static bool entry_current(const struct request *req, const struct file_cache_entry *e)
{
    struct stat st;
    const char *rel = key_rel(e->key);
    if (!key_is_dir(e->key, e->key_len))
        return stat_beneath(req, rel, &st) == 0 && file_cache_same_file(e, &st);
    /* The same index file as the one a request would be served now. */
    const char *dir = strcmp(rel, ".") == 0 ? "" : rel;
    unsigned which;
    int fd = module_index_open(req, req->root_fd, dir, O_PATH, &which, &st);
    if (fd < 0)
        return false;
    close(fd);
    return which == e->variant && file_cache_same_file(e, &st);
}

/* Answer from the cache if it holds rel, still current. False: not answered. */
static bool serve_cached(struct file_cache *cache, const struct request *req,
                         struct response *resp, const char *key, enum static_ims ims)
{
    int64_t now = file_cache_now_ms();
    struct file_cache_entry *e;
    enum file_cache_result r = file_cache_get(cache, key, strlen(key), now, &e);
    if (r == FILE_CACHE_MISS)
        return false;
    if (r == FILE_CACHE_EXPIRED) {
        if (!entry_current(req, e)) {
            file_cache_remove(cache, e);
            file_cache_put(e);
            return false;
        }
        file_cache_validated(e, now);
    }
    serve_entry(req, resp, e, ims);
    return true;
}

/* The whole of a small file, read once for its cache entry, or NULL (too large, empty, a
 * read error, or the file changed while it was read: then it is sent from the file). */
static char *read_small(const struct static_state *s, int fd, const struct stat *sb)
{
    if (sb->st_size <= 0 || (uint64_t)sb->st_size > s->mem_max)
        return NULL;
    size_t size = (size_t)sb->st_size, got = 0;
    char *data = malloc(size);
    if (!data)
        return NULL;
    while (got < size) {
        ssize_t n = pread(fd, data + got, size - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    struct stat after;
    if (got != size || fstat(fd, &after) < 0 || after.st_size != sb->st_size ||
        after.st_mtim.tv_sec != sb->st_mtim.tv_sec ||
        after.st_mtim.tv_nsec != sb->st_mtim.tv_nsec) {
        free(data);
        return NULL;
    }
    return data;
}

/* A regular file opened for this request (fd, the caller's until now): answer with it,
 * through a new cache entry for key when the cache is on. name: for its media type. */
struct static_settings;
static enum static_ims ims_of(const struct static_state *s, const struct request *req);

static void serve_opened(struct static_state *s, const struct request *req,
                         struct response *resp, int fd, const struct stat *sb,
                         const char *name, const char *key, unsigned variant)
{
    struct file_cache_entry *e = s->cache ? file_cache_entry_new(key, strlen(key), fd, sb) : NULL;
    if (e) {
        make_validators(sb, &e->v);
        e->type = module_content_type(req, name, fd, sb);
        e->variant = variant;
        e->data = read_small(s, fd, sb);
        file_cache_insert(s->cache, e, file_cache_now_ms());
        serve_entry(req, resp, e, ims_of(s, req));
        return;
    }
    struct file_validators v;
    make_validators(sb, &v);
    resp_file_own(resp, fd); /* the core closes it once the response is sent */
    struct file_view f = {fd, sb, &v, NULL, name, NULL, ims_of(s, req)};
    serve_file(req, resp, &f);
}

/* --- directories and the handler -------------------------------------------------------- */

/* The directory `dirfd` (rel beneath the root) was asked for with its trailing slash: try
 * the index files. */
static void serve_index(struct static_state *s, const struct request *req,
                        struct response *resp, int dirfd, const char *rel)
{
    unsigned i;
    struct stat sb;
    int fd = module_index_open(req, dirfd, "", STATIC_OPEN_FLAGS, &i, &sb);
    if (fd >= 0)
        serve_opened(s, req, resp, fd, &sb, module_index_name(req, i), rel, i);
    else if (fd == -ENOENT)
        resp_error(resp, 403); /* no index file, and listings are not enabled */
    else
        resp_error(resp, http_status_for_errno(-fd));
}

/* 301 to the directory with its slash. The Location is made from the normalized path,
 * percent-encoded, never from the raw target: "//evil.example/../sub" names /sub, and
 * must not send a browser to the host evil.example; a decoded %0d%0a must not start a
 * header. A Location too long for the response head is a 414. */
static void redirect_slash(const struct request *req, struct response *resp)
{
    char loc[2048];
    long n = http_path_encode(req->path, req->path_len, loc, sizeof(loc) - 2);
    size_t q = req->has_args ? req->args.len + 1 : 0;
    if (n < 0 || (size_t)n + 1 + q >= sizeof(loc)) {
        resp_error(resp, 414);
        return;
    }
    loc[n++] = '/';
    if (req->has_args) {
        loc[n++] = '?';
        memcpy(loc + n, req->args.p, req->args.len); /* visible ASCII: parser or set_path */
        n += (long)req->args.len;
    }
    loc[n] = '\0';
    module_redirect(req, resp, 301, loc);
}

#define STATIC_ALLOW "GET, HEAD, OPTIONS"

/* OPTIONS (RFC 9110 section 9.3.7): what the path accepts, if it names anything. 200 with
 * an empty body rather than 204, as for OPTIONS *: one answer for both forms, and every
 * client reads a 200 with Content-Length: 0. */
static void answer_options(const struct request *req, struct response *resp)
{
    struct stat sb;
    int rc = stat_beneath(req, req->file[1] ? req->file + 1 : ".", &sb);
    if (rc < 0) {
        resp_error(resp, http_status_for_errno(-rc));
        return;
    }
    resp_start(resp, 200);
    resp_header(resp, "Allow", STATIC_ALLOW);
}

/* For try_files: a fresh cache entry says the file (or the directory, by its index) is
 * there without a system call; anything else is not known here. */
static int static_file_exists(void *state, const struct request *req, const char *file,
                              bool dir)
{
    const struct static_state *s = state;
    if (!s->cache)
        return -1;
    char rel[REQUEST_PATH_MAX + 2], key_room[REQUEST_PATH_MAX + 16];
    size_t fl = strlen(file);
    if (fl + 2 > sizeof(rel))
        return -1;
    if (fl <= 1) {
        memcpy(rel, ".", 2);
    } else {
        memcpy(rel, file + 1, fl - 1);
        rel[fl - 1] = '\0';
        if (dir && rel[fl - 2] != '/')
            memcpy(rel + fl - 1, "/", 2);
    }
    if (!dir && key_is_dir(rel, strlen(rel)))
        return -1;
    const char *key = cache_key(req, rel, key_room, sizeof(key_room));
    struct file_cache_entry *e;
    if (!key)
        return -1;
    enum file_cache_result r = file_cache_get(s->cache, key, strlen(key), file_cache_now_ms(), &e);
    if (r == FILE_CACHE_MISS)
        return -1;
    file_cache_put(e);
    return r == FILE_CACHE_HIT ? 1 : -1;
}

static enum mod_result static_handle(void *state, const struct request *req,
                                     struct response *resp)
{
    struct static_state *s = state;
    const struct http_request *h = req->http;
    if (h->method == HTTP_METHOD_OPTIONS) {
        answer_options(req, resp);
        return MOD_HANDLED;
    }
    if (h->method != HTTP_METHOD_GET && h->method != HTTP_METHOD_HEAD) {
        /* 405 names a resource that exists; a missing one is 404, as nginx answers (and
         * an error_page 404 then serves its page). */
        struct stat sb;
        int rc = stat_beneath(req, req->file[1] ? req->file + 1 : ".", &sb);
        if (rc < 0) {
            resp_error(resp, http_status_for_errno(-rc));
            return MOD_HANDLED;
        }
        resp_error(resp, 405);
        resp_header(resp, "Allow", STATIC_ALLOW);
        return MOD_HANDLED;
    }
    const char *rel = req->file[1] ? req->file + 1 : ".";
    char key_room[REQUEST_PATH_MAX + 16];
    const char *key = cache_key(req, rel, key_room, sizeof(key_room));
    if (!key) {
        resp_error(resp, 414);
        return MOD_HANDLED;
    }
    if (s->cache && serve_cached(s->cache, req, resp, key, ims_of(s, req)))
        return MOD_HANDLED;
    int fd = open_file(req, req->root_fd, rel);
    if (fd < 0) {
        int status = http_status_for_errno(-fd);
        /* nginx's open() "..." failed, in the request's error log (a missing file only
         * with log_not_found) */
        if ((fd != -ENOENT && fd != -ENOTDIR) || module_log_not_found(req))
            module_log(req, LOG_LEVEL_ERROR, "static: open \"%s/%s\": %s (%d)",
                       req->root_real, rel, strerror(-fd), status);
        resp_error(resp, status);
        return MOD_HANDLED;
    }
    struct stat sb;
    if (fstat(fd, &sb) < 0) {
        close(fd);
        resp_error(resp, 500);
        return MOD_HANDLED;
    }
    if (S_ISDIR(sb.st_mode)) {
        if (req->path[req->path_len - 1] != '/')
            redirect_slash(req, resp);
        else
            serve_index(s, req, resp, fd, key);
        close(fd);
        return MOD_HANDLED;
    }
    if (!S_ISREG(sb.st_mode)) { /* FIFOs, devices, sockets: never served */
        close(fd);
        resp_error(resp, 403);
        return MOD_HANDLED;
    }
    serve_opened(s, req, resp, fd, &sb, req->path, key, 0);
    return MOD_HANDLED;
}

/* --- configuration ---------------------------------------------------------------------- */

/* What the directives set, before the cache is built from it (at the top level), and a
 * block's if_modified_since (the block hook's settings). */
struct static_settings {
    enum static_ims ims;   /* if_modified_since */
    bool cache;            /* open_file_cache */
    unsigned max;          /* open_file_cache_max */
    unsigned valid_ms;     /* open_file_cache_valid */
    unsigned inactive_ms;  /* open_file_cache_inactive */
    uint64_t mem_max;      /* open_file_cache_mem_max */
};

#define SETTING(field) CONF_AT(struct static_settings, field)

static const struct conf_name ims_names[] = {
    {"off", STATIC_IMS_OFF}, {"exact", STATIC_IMS_EXACT}, {"before", STATIC_IMS_BEFORE}, {NULL, 0}};

static const struct conf_directive static_directives[] = {
    {"open_file_cache", CONF_FLAG, CONF_TOP, SETTING(cache),
     .dflt = "on",
     .doc = "Keeps files open with their stat, validators and type, as nginx's cache, so a hit "
        "opens, stats and allocates nothing."},
    {"open_file_cache_max", CONF_COUNT, CONF_TOP, .min = 1, .max = FILE_CACHE_MAX_ENTRIES,
     SETTING(max),
     .dflt = "10000",
     .doc = "Entries of the open-file cache, at most half the descriptor limit."},
    {"open_file_cache_valid", CONF_DURATION, CONF_TOP, SETTING(valid_ms),
     .dflt = "1s",
     .doc = "An older entry is looked at again beneath the root, and any change, removal or "
        "symlink now leading out drops it. Within it a file rewritten in place may be sent "
        "with its old length and validators."},
    {"open_file_cache_inactive", CONF_DURATION, CONF_TOP, SETTING(inactive_ms),
     .dflt = "60s",
     .doc = "An entry unused this long is closed."},
    {"open_file_cache_mem_max", CONF_SIZE, CONF_TOP, .max = 1u << 20, SETTING(mem_max),
     .dflt = "4k",
     .doc = "Files up to this size are read into their entry once and leave with the response "
        "head in a single write; 0: off (sent with `sendfile`, as nginx sends them)."},
    {"if_modified_since", CONF_ENUM, CONF_TOP | CONF_SERVER | CONF_LOCATION,
     .names = ims_names, SETTING(ims), .dflt = "(RFC 9110's rule)",
     .doc = "How a file's date answers an `If-Modified-Since` (without `If-None-Match`): "
        "`exact` 304 when the dates are equal, `before` when the file is not newer, `off` "
        "never, as nginx's. Unset, the rule is RFC 9110's: `before`, with a date later than "
        "the server's clock ignored. nginx's default is `exact`."},
    {.name = NULL},
};

/* The request's location's if_modified_since. */
static enum static_ims ims_of(const struct static_state *s, const struct request *req)
{
    const struct static_settings *set = module_settings(req, s->index);
    return set ? set->ims : STATIC_IMS_UNSET;
}

/* A block's if_modified_since, else the outer block's. */
static void *static_block(void *state, const struct module_block *b)
{
    (void)state;
    if (b->outer && !module_block_has(b))
        return (void *)b->outer;
    struct static_settings *set = calloc(1, sizeof(*set));
    if (!set) {
        module_error(b->mi, NULL, "out of memory");
        return NULL;
    }
    if (module_block_read(b, set) < 0) {
        free(set);
        return NULL;
    }
    if (set->ims == STATIC_IMS_UNSET && b->outer)
        set->ims = ((const struct static_settings *)b->outer)->ims;
    return set;
}

static void static_block_free(void *state, void *settings)
{
    (void)state;
    free(settings);
}

/* Each entry holds a descriptor: half the limit at most, so that a large maximum cannot
 * leave no descriptors for connections. (Past the limit nothing breaks: accept sheds with
 * 503, an open that fails answers 503; but the cache should not be why.) */
static unsigned descriptor_bound(unsigned max)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY ||
        rl.rlim_cur / 2 >= max)
        return max;
    return rl.rlim_cur / 2 < 16 ? 16 : (unsigned)(rl.rlim_cur / 2);
}

static int static_init(struct module_init *mi, void **state)
{
    struct static_settings set = {
        .cache = true,
        .max = STATIC_CACHE_MAX,
        .valid_ms = STATIC_CACHE_VALID_MS,
        .inactive_ms = STATIC_CACHE_INACTIVE_MS,
        .mem_max = STATIC_CACHE_MEM_MAX,
    };
    if (module_read_directives(mi, &set) < 0)
        return -1;
    struct static_state *s = calloc(1, sizeof(*s));
    if (!s)
        return module_error(mi, NULL, "out of memory");
    s->mem_max = set.mem_max;
    s->index = mi->index;
    if (set.cache) {
        unsigned bound = descriptor_bound(set.max);
        if (bound < set.max)
            log_info("static: open_file_cache_max %u lowered to %u, half the "
                     "descriptor limit", set.max, bound);
        s->cache = file_cache_create(bound, set.valid_ms, set.inactive_ms);
        if (!s->cache) {
            free(s);
            return module_error(mi, NULL, "out of memory");
        }
    }
    *state = s;
    return 0;
}

static void static_fini(void *state)
{
    struct static_state *s = state;
    if (!s)
        return;
    file_cache_destroy(s->cache);
    free(s);
}

/* The open-file cache's figures. */
static void static_metrics(void *state, struct strbuf *b)
{
    struct static_state *s = state;
    if (!s->cache)
        return;
    struct file_cache_stats fs;
    file_cache_get_stats(s->cache, &fs);
    strbuf_prom_family(b, "lfhttpd_open_file_cache_entries", "gauge", "Files held open.");
    strbuf_printf(b, "lfhttpd_open_file_cache_entries %u\n", fs.entries);
    strbuf_prom_family(b, "lfhttpd_open_file_cache_max_entries", "gauge",
                       "open_file_cache_max.");
    strbuf_printf(b, "lfhttpd_open_file_cache_max_entries %u\n", fs.max_entries);
    strbuf_prom_family(b, "lfhttpd_open_file_cache_memory_bytes", "gauge",
                       "Bytes of the small files held in memory (open_file_cache_mem_max).");
    strbuf_printf(b, "lfhttpd_open_file_cache_memory_bytes %llu\n", (unsigned long long)fs.bytes);
    strbuf_prom_family(b, "lfhttpd_open_file_cache_lookups_total", "counter",
                       "Look-ups, by result, since the configuration was loaded (a hit "
                       "older than open_file_cache_valid is checked against the file).");
    strbuf_printf(b, "lfhttpd_open_file_cache_lookups_total{result=\"hit\"} %llu\n"
                  "lfhttpd_open_file_cache_lookups_total{result=\"miss\"} %llu\n",
                  (unsigned long long)fs.hits, (unsigned long long)fs.misses);
    strbuf_prom_family(b, "lfhttpd_open_file_cache_inserts_total", "counter",
                       "Files opened and kept, since the configuration was loaded.");
    strbuf_printf(b, "lfhttpd_open_file_cache_inserts_total %llu\n",
                  (unsigned long long)fs.inserts);
    strbuf_prom_family(b, "lfhttpd_open_file_cache_drops_total", "counter",
                       "Entries dropped, by reason: evicted for room, inactive, or changed.");
    strbuf_printf(b, "lfhttpd_open_file_cache_drops_total{reason=\"evicted\"} %llu\n"
                  "lfhttpd_open_file_cache_drops_total{reason=\"inactive\"} %llu\n"
                  "lfhttpd_open_file_cache_drops_total{reason=\"changed\"} %llu\n",
                  (unsigned long long)fs.evictions, (unsigned long long)fs.inactive,
                  (unsigned long long)fs.removed);
}

const struct module mod_static = {
    .name = "static",
    .directives = static_directives,
    .init = static_init,
    .fini = static_fini,
    .handle = static_handle,
    .block = static_block,
    .block_free = static_block_free,
    .file_exists = static_file_exists,
    .metrics = static_metrics,
};
