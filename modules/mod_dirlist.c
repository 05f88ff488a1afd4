/* mod_dirlist.c — listings of directories that have no index file.
 *
 * With `autoindex on;`, a GET or HEAD for a directory path that ends in '/' and whose
 * directory holds none of the index files is answered with a listing: an HTML page (a
 * table of names, sizes and modification times in UTC, directories first, each group in
 * byte order) or, with ?format=json, a JSON array for scripts. Everything else is
 * declined, and mod_static answers it: the 301 that adds the slash, the index file, 403
 * when listings are off.
 *
 * The listing shows what mod_static would serve and nothing else. The directory is opened
 * beneath the root as mod_static opens files (openat2 RESOLVE_BENEATH, and the same
 * real-path check for absolute symlinks); entries are examined without following links,
 * and a symlink is listed as what it points to only when it resolves inside the root.
 * Broken links, links that lead out, FIFOs, sockets and devices are left out. Dotfiles
 * are listed only with `autoindex_hidden on;`.
 *
 * Names are hostile input. In HTML text they are escaped (& < > " '), with control bytes
 * and invalid UTF-8 shown as U+FFFD; in links they are percent-encoded byte for byte, so
 * every link fetches exactly the file listed. In JSON they are escaped per RFC 8259, with
 * invalid UTF-8 as \ufffd so the document is always valid; "href" keeps the exact bytes.
 *
 * The body is built in a strbuf, grown as needed up to DIRLIST_BODY_MAX (a listing past it
 * is a 500, never a silently shortened page), then written to a sealed memfd: the listing.
 *
 * Listings are cached per directory version, as lighttpd's dir-listing.cache keeps them:
 * without it every GET costs a stat per entry, a sort and a render, and a slow client's
 * parked response held a copy of the page (64 MiB at most) per connection. A listing is
 * keyed by what it depends on: the directory (st_dev, st_ino), its version (st_mtim and
 * st_ctim, with nanoseconds: any entry added, removed or renamed changes both), the form
 * (HTML or JSON; there is one order) and, for HTML, the request path its title and links
 * show; the cache is the generation's, so the root and autoindex_hidden are fixed in it.
 * What the directory's times do not see (a file inside rewritten, a symlink's target
 * changed) is seen after autoindex_cache_valid at most. A version whose ctime is within
 * a second of the build is not kept: a change in the same timestamp tick as the one keyed
 * would leave the key as it was (git's "racily clean" files), and file systems' ticks
 * range from nanoseconds to two seconds.
 *
 * A listing is reference-counted: the cache holds one reference, each response one
 * (resp_file_shared), and the body goes out with sendfile from the memfd. A parked
 * response moves the descriptor, never the bytes, so a thousand slow clients of one
 * listing hold it once. The cache's bytes are bounded by autoindex_cache_size (least
 * recently used out first); a listing evicted while being sent lives until its last
 * response is done. Requests for a version another thread is building wait for it, so a
 * cold directory hit by many clients at once is read once.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "http_params.h"
#include "log.h"
#include "mod_dirlist.h"
#include "module.h"
#include "strbuf.h"

#define DIRLIST_BODY_MAX ((size_t)64 << 20) /* the largest listing answered, in bytes */
#define DIRLIST_ENTRIES_MAX (1u << 20)      /* the most entries read from one directory */

#define DL_BUCKETS 1024 /* the cache's hash table: chains stay short up to many listings */

/* One rendered listing of one directory version, in one form. */
struct dl_listing {
    atomic_uint refs;  /* the cache's (while in it), each response's, each waiter's */
    /* the key */
    dev_t dev;
    ino_t ino;
    struct timespec mtime, ctime;
    bool json;
    char *where;       /* "H/a/b/" (HTML: the request path) or "J" (JSON) */
    size_t where_len;
    uint64_t hash;     /* of dev, ino and where: one directory in one form */
    /* the value, set once built (under the cache's lock) */
    int state;         /* 0 building, 1 ready, -1 failed */
    int fd;            /* the sealed memfd holding the body */
    struct stat st;    /* its status: the response's file_st */
    int64_t built_s;   /* req->now_s when it was built */
    /* the cache's (under its lock) */
    bool cached;
    struct dl_listing *hnext;        /* in the bucket */
    struct dl_listing *newer, *older; /* in the LRU order */
};

struct dl_cache {
    pthread_mutex_t lock;
    pthread_cond_t built; /* a listing was built (or failed): waiters look again */
    struct dl_listing *buckets[DL_BUCKETS];
    struct dl_listing *newest, *oldest;
    uint64_t bytes; /* of the ready listings in the cache */
};

struct dirlist_state {
    bool enabled;             /* autoindex on, at the top level */
    unsigned index;           /* in the chain: for module_settings() */
    bool hidden;              /* autoindex_hidden on: dotfiles are listed */
    uint64_t cache_size;      /* autoindex_cache_size: 0 no cache */
    unsigned cache_valid_ms;  /* autoindex_cache_valid */
    struct dl_cache cache;
};

/* --- figures --------------------------------------------------------------------------- */

void dirlist_human_size(uint64_t n, char out[16])
{
    static const char units[][4] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (n < 1024) {
        snprintf(out, 16, "%u B", (unsigned)n);
        return;
    }
    double v = (double)n;
    unsigned u = 0;
    while (v >= 1024 && u < 6) {
        v /= 1024;
        u++;
    }
    if (v >= 1023.5 && u < 6) { /* would print as "1024 KiB" */
        v /= 1024;
        u++;
    }
    snprintf(out, 16, v < 9.95 ? "%.1f %s" : "%.0f %s", v, units[u]);
}

void dirlist_iso_time(int64_t t, char out[32])
{
    struct tm tm;
    time_t tt = (time_t)t;
    if (!gmtime_r(&tt, &tm) || strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(out, 32, "1970-01-01T00:00:00Z");
}

/* --- opening beneath the root -------------------------------------------------------- */

/* The root-relative path of `name` in the directory dir ("" for the root, else "a/b/").
 * Returns false if it does not fit. */
static bool join_rel(char *out, size_t cap, const char *dir, const char *name)
{
    int n = snprintf(out, cap, "%s%s", dir, name);
    return n >= 0 && (size_t)n < cap;
}

/* Would mod_static find an index file in the directory dfd (or fail trying)? */
static bool has_index(const struct request *req, int dfd)
{
    unsigned which;
    struct stat sb;
    int fd = module_index_open(req, dfd, "", O_PATH, &which, &sb);
    if (fd >= 0)
        close(fd);
    return fd != -ENOENT; /* an error: mod_static answers it */
}

/* --- reading the directory ------------------------------------------------------------- */

struct dl_list {
    struct dl_entry *v;
    size_t n, cap;
    struct strbuf names; /* every name, each followed by a NUL */
    unsigned n_dirs, n_files;
};

static void list_free(struct dl_list *l)
{
    free(l->v);
    free(l->names.p);
}

int dirlist_entry_cmp(const void *a, const void *b)
{
    const struct dl_entry *x = a, *y = b;
    if (x->is_dir != y->is_dir)
        return x->is_dir ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* What the entry is, as mod_static would serve it: lstat, and for a symlink the target
 * it resolves to inside the root. Returns false for what is not listed. */
static bool entry_stat(const struct request *req, int dfd,
                       const char *dir, const char *name, struct stat *sb)
{
    if (fstatat(dfd, name, sb, AT_SYMLINK_NOFOLLOW) < 0)
        return false;
    if (S_ISLNK(sb->st_mode)) {
        char rel[REQUEST_PATH_MAX + 256];
        if (!join_rel(rel, sizeof(rel), dir, name))
            return false;
        int fd = open_beneath(req->root_fd, rel, O_PATH, req->root_real);
        if (fd < 0)
            return false; /* broken, a loop, or leading out of the root */
        int rc = fstat(fd, sb);
        close(fd);
        if (rc < 0)
            return false;
    }
    return S_ISDIR(sb->st_mode) || S_ISREG(sb->st_mode);
}

static bool list_add(struct dl_list *l, const char *name, size_t len, const struct stat *sb)
{
    if (l->n == l->cap) {
        if (l->cap >= DIRLIST_ENTRIES_MAX)
            return false;
        size_t cap = l->cap ? l->cap * 2 : 256;
        struct dl_entry *v = realloc(l->v, cap * sizeof(*v));
        if (!v)
            return false;
        l->v = v;
        l->cap = cap;
    }
    size_t off = l->names.len;
    strbuf_add(&l->names, name, len + 1);
    if (l->names.failed)
        return false;
    bool is_dir = S_ISDIR(sb->st_mode);
    l->v[l->n++] = (struct dl_entry){
        .name_off = off,
        .name_len = len,
        .is_dir = is_dir,
        .size_bytes = is_dir ? 0 : (uint64_t)sb->st_size,
        .mtime_s = sb->st_mtim.tv_sec,
    };
    if (is_dir)
        l->n_dirs++;
    else
        l->n_files++;
    return true;
}

/* Read the open directory dfd (which this takes) into l, sorted. dir: its root-relative
 * path. Returns 0 or -1 (out of memory, too large, or unreadable). */
static int list_read(const struct dirlist_state *st, const struct request *req, int dfd,
                     const char *dir, struct dl_list *l)
{
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return -1;
    }
    int rc = 0;
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            rc = errno ? -1 : 0;
            break;
        }
        const char *name = de->d_name;
        if (name[0] == '.' && (!st->hidden || name[1] == '\0' ||
                               (name[1] == '.' && name[2] == '\0')))
            continue;
        struct stat sb;
        if (!entry_stat(req, dirfd(d), dir, name, &sb))
            continue;
        if (!list_add(l, name, strlen(name), &sb)) {
            rc = -1;
            break;
        }
    }
    closedir(d);
    if (rc < 0)
        return -1;
    for (size_t i = 0; i < l->n; i++)
        l->v[i].name = l->names.p + l->v[i].name_off;
    if (l->n > 1)
        qsort(l->v, l->n, sizeof(l->v[0]), dirlist_entry_cmp);
    return 0;
}

/* --- rendering ------------------------------------------------------------------------- */

/* Icons are CSS masks (data: URIs), so they follow the text colour in both schemes. */
static const char page_style[] =
    ":root{color-scheme:light dark;--bg:#fff;--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;"
    "--head:#f6f8fa;--hover:#eef4fd;--link:#0969da;--dir:#9a6700}\n"
    "@media (prefers-color-scheme:dark){:root{--bg:#0d1117;--fg:#e6edf3;--muted:#9198a1;"
    "--line:#30363d;--head:#151b23;--hover:#16202e;--link:#4493f8;--dir:#d29922}}\n"
    "*{box-sizing:border-box}\n"
    "body{margin:0;background:var(--bg);color:var(--fg);"
    "font:15px/1.5 system-ui,-apple-system,\"Segoe UI\",Roboto,\"Noto Sans\",sans-serif}\n"
    "main{max-width:980px;margin:0 auto;padding:28px 16px 40px}\n"
    "h1{font-size:20px;font-weight:600;margin:0 0 18px;overflow-wrap:anywhere}\n"
    "h1 .crumbs a{color:var(--link)}\n"
    "a{color:var(--link);text-decoration:none}a:hover{text-decoration:underline}\n"
    "table{width:100%;border-collapse:separate;border-spacing:0;border:1px solid var(--line);"
    "border-radius:8px;overflow:hidden}\n"
    "th,td{padding:7px 14px;text-align:left;vertical-align:top}\n"
    "th{background:var(--head);color:var(--muted);font-size:12px;font-weight:600;"
    "text-transform:uppercase;letter-spacing:.04em;border-bottom:1px solid var(--line)}\n"
    "tbody tr+tr td{border-top:1px solid var(--line)}\n"
    "tbody tr:hover{background:var(--hover)}\n"
    "td.n{width:100%;overflow-wrap:anywhere}\n"
    ".s,.m{white-space:nowrap;color:var(--muted);font-variant-numeric:tabular-nums}\n"
    ".s{text-align:right}\n"
    "td.n a{display:inline-flex}\n"
    "td.n a::before{content:\"\";flex:none;width:16px;height:16px;"
    "margin:3px 10px 0 0;background:var(--muted);"
    "-webkit-mask:var(--icon) center/contain no-repeat;mask:var(--icon) center/contain "
    "no-repeat}\n"
    "tr.d td.n a::before{background:var(--dir)}\n"
    "tr.f{--icon:url(\"data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' "
    "viewBox='0 0 16 16'%3E%3Cpath d='M3 1h6l4 4v10H3z' fill='none' stroke='black' "
    "stroke-width='1.5'/%3E%3Cpath d='M9 1v4h4' fill='none' stroke='black' "
    "stroke-width='1.5'/%3E%3C/svg%3E\")}\n"
    "tr.d{--icon:url(\"data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' "
    "viewBox='0 0 16 16'%3E%3Cpath d='M1 3h5l2 2h7v9H1z'/%3E%3C/svg%3E\")}\n"
    "tr.u{--icon:url(\"data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' "
    "viewBox='0 0 16 16'%3E%3Cpath d='M8 2 3 7h3v7h4V7h3z'/%3E%3C/svg%3E\")}\n"
    "footer{margin-top:14px;color:var(--muted);font-size:13px}\n"
    "@media (max-width:600px){main{padding:16px 8px 28px}h1{font-size:17px}"
    "th,td{padding:7px 8px}.m .t{display:none}body{font-size:14px}}\n";

/* "Index of /a/b/" with each step a link: relative ("../../", "../", "./"), so the
 * links hold whatever prefix or rewrite brought the request here. */
void dirlist_render_crumbs(struct strbuf *b, const char *path, size_t len)
{
    unsigned depth = 0;
    for (size_t i = 1; i < len; i++)
        if (path[i] == '/')
            depth++;
    strbuf_puts(b, "<a href=\"");
    for (unsigned i = 0; i < depth; i++)
        strbuf_puts(b, "../");
    strbuf_puts(b, depth ? "\">/</a>" : "./\">/</a>");
    const char *p = path + 1, *end = path + len;
    for (unsigned level = 1; p < end; level++) {
        const char *slash = memchr(p, '/', (size_t)(end - p));
        if (!slash)
            break;
        strbuf_puts(b, "<a href=\"");
        for (unsigned i = level; i < depth; i++)
            strbuf_puts(b, "../");
        if (level == depth)
            strbuf_puts(b, "./");
        strbuf_puts(b, "\">");
        strbuf_html(b, p, (size_t)(slash - p));
        strbuf_puts(b, "/</a>");
        p = slash + 1;
    }
}

static void render_row(struct strbuf *b, const struct dl_entry *e)
{
    char when[32], size[16];
    dirlist_iso_time(e->mtime_s, when);
    strbuf_puts(b, e->is_dir ? "<tr class=\"d\"><td class=\"n\"><a href=\""
                          : "<tr class=\"f\"><td class=\"n\"><a href=\"");
    strbuf_url_path(b, e->name, e->name_len);
    strbuf_puts(b, e->is_dir ? "/\">" : "\">");
    strbuf_html(b, e->name, e->name_len);
    strbuf_puts(b, e->is_dir ? "/</a></td><td class=\"s\">&mdash;</td>" : "</a></td>");
    if (!e->is_dir) {
        dirlist_human_size(e->size_bytes, size);
        strbuf_printf(b, "<td class=\"s\" title=\"%llu byte%s\">%s</td>",
                   (unsigned long long)e->size_bytes, e->size_bytes == 1 ? "" : "s", size);
    }
    /* when: YYYY-MM-DDTHH:MM:SSZ; shown as "YYYY-MM-DD HH:MM" */
    strbuf_printf(b, "<td class=\"m\"><time datetime=\"%s\" title=\"%s\">%.10s<span class=\"t\"> "
                  "%.5s</span></time></td></tr>\n",
               when, when, when, when + 11);
}

static void render_html(struct strbuf *b, const struct request *req, const struct dl_list *l)
{
    strbuf_puts(b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
                "<meta name=\"color-scheme\" content=\"light dark\">\n<title>Index of ");
    strbuf_html(b, req->path, req->path_len);
    strbuf_puts(b, "</title>\n<style>\n");
    strbuf_puts(b, page_style);
    strbuf_puts(b, "</style>\n</head>\n<body>\n<main>\n<h1>Index of <span class=\"crumbs\">");
    dirlist_render_crumbs(b, req->path, req->path_len);
    strbuf_puts(b, "</span></h1>\n<table>\n<thead><tr><th>Name</th><th class=\"s\">Size</th>"
                "<th class=\"m\">Modified (UTC)</th></tr></thead>\n<tbody>\n");
    if (req->path_len > 1)
        strbuf_puts(b, "<tr class=\"u\"><td class=\"n\"><a href=\"../\">Parent directory</a>"
                    "</td><td class=\"s\"></td><td class=\"m\"></td></tr>\n");
    for (size_t i = 0; i < l->n; i++)
        render_row(b, &l->v[i]);
    strbuf_puts(b, "</tbody>\n</table>\n");
    strbuf_printf(b, "<footer>%u director%s, %u file%s &middot; lfhttpd</footer>\n", l->n_dirs,
               l->n_dirs == 1 ? "y" : "ies", l->n_files, l->n_files == 1 ? "" : "s");
    strbuf_puts(b, "</main>\n</body>\n</html>\n");
}

static void render_json(struct strbuf *b, const struct dl_list *l)
{
    strbuf_puts(b, "[");
    for (size_t i = 0; i < l->n; i++) {
        const struct dl_entry *e = &l->v[i];
        char when[32];
        dirlist_iso_time(e->mtime_s, when);
        strbuf_puts(b, i ? ",\n{\"name\":" : "\n{\"name\":");
        strbuf_json(b, e->name, e->name_len);
        strbuf_printf(b, ",\"type\":\"%s\",\"size\":%llu,\"mtime\":\"%s\",\"href\":\"",
                   e->is_dir ? "dir" : "file", (unsigned long long)e->size_bytes, when);
        strbuf_url_path(b, e->name, e->name_len); /* only unreserved bytes and '%': no escaping */
        strbuf_puts(b, e->is_dir ? "/\"}" : "\"}");
    }
    strbuf_puts(b, "\n]\n");
}

/* --- the cache of listings -------------------------------------------------------------- */

bool dirlist_version_settled(const struct timespec *ctime, const struct timespec *now)
{
    /* now - 1 s > ctime, with nanoseconds */
    if (now->tv_sec - 1 != ctime->tv_sec)
        return now->tv_sec - 1 > ctime->tv_sec;
    return now->tv_nsec > ctime->tv_nsec;
}

static uint64_t listing_hash(dev_t dev, ino_t ino, const char *where, size_t len)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)dev ^ ((uint64_t)ino << 17);
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)where[i]) * 1099511628211ull;
    return h;
}

static void listing_release(void *ctx)
{
    struct dl_listing *l = ctx;
    if (atomic_fetch_sub_explicit(&l->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (l->fd >= 0)
        close(l->fd);
    free(l->where);
    free(l);
}

static bool same_version(const struct dl_listing *l, const struct stat *sb)
{
    return l->mtime.tv_sec == sb->st_mtim.tv_sec && l->mtime.tv_nsec == sb->st_mtim.tv_nsec &&
           l->ctime.tv_sec == sb->st_ctim.tv_sec && l->ctime.tv_nsec == sb->st_ctim.tv_nsec;
}

/* Take l out of the cache (under its lock): the cache's reference goes. */
static void cache_remove(struct dl_cache *c, struct dl_listing *l)
{
    struct dl_listing **pp = &c->buckets[l->hash % DL_BUCKETS];
    while (*pp != l)
        pp = &(*pp)->hnext;
    *pp = l->hnext;
    if (l->newer)
        l->newer->older = l->older;
    else
        c->newest = l->older;
    if (l->older)
        l->older->newer = l->newer;
    else
        c->oldest = l->newer;
    if (l->state == 1)
        c->bytes -= (uint64_t)l->st.st_size;
    l->cached = false;
    listing_release(l);
}

static void cache_touch(struct dl_cache *c, struct dl_listing *l)
{
    if (c->newest == l)
        return;
    l->newer->older = l->older; /* not the newest: it has a newer one */
    if (l->older)
        l->older->newer = l->newer;
    else
        c->oldest = l->newer;
    l->older = c->newest;
    l->newer = NULL;
    c->newest->newer = l;
    c->newest = l;
}

static void cache_insert(struct dl_cache *c, struct dl_listing *l)
{
    struct dl_listing **b = &c->buckets[l->hash % DL_BUCKETS];
    l->hnext = *b;
    *b = l;
    l->newer = NULL;
    l->older = c->newest;
    if (c->newest)
        c->newest->newer = l;
    else
        c->oldest = l;
    c->newest = l;
    l->cached = true;
    atomic_fetch_add_explicit(&l->refs, 1, memory_order_relaxed);
}

/* The cached listing of this directory in this form, or NULL (under the lock). */
static struct dl_listing *cache_find(struct dl_cache *c, uint64_t hash, const struct stat *sb,
                                     const char *where, size_t where_len)
{
    for (struct dl_listing *l = c->buckets[hash % DL_BUCKETS]; l; l = l->hnext)
        if (l->hash == hash && l->dev == sb->st_dev && l->ino == sb->st_ino &&
            l->where_len == where_len && memcmp(l->where, where, where_len) == 0)
            return l;
    return NULL;
}

/* A listing of the directory version sb in the form `where`: the cache's if it is there
 * and fresh (waiting while another thread builds it), else a new one to build (state 0),
 * in the cache when there is one. *build: the caller builds it. NULL if out of memory. */
static struct dl_listing *listing_get(struct dirlist_state *st, const struct request *req,
                                      const struct stat *sb, const char *where,
                                      size_t where_len, bool *build)
{
    struct dl_cache *c = &st->cache;
    uint64_t hash = listing_hash(sb->st_dev, sb->st_ino, where, where_len);
    *build = false;
    pthread_mutex_lock(&c->lock);
    struct dl_listing *l = st->cache_size ? cache_find(c, hash, sb, where, where_len) : NULL;
    if (l && (!same_version(l, sb) || l->state < 0 ||
              (l->state == 1 &&
               (uint64_t)(req->now_s - l->built_s) * 1000 >= st->cache_valid_ms))) {
        cache_remove(c, l); /* an older version, or too old to trust for what is inside */
        l = NULL;
    }
    if (l) {
        atomic_fetch_add_explicit(&l->refs, 1, memory_order_relaxed);
        cache_touch(c, l);
        while (l->state == 0)
            pthread_cond_wait(&c->built, &c->lock);
        pthread_mutex_unlock(&c->lock);
        return l;
    }
    l = calloc(1, sizeof(*l));
    char *w = l ? malloc(where_len) : NULL;
    if (!w) {
        pthread_mutex_unlock(&c->lock);
        free(l);
        return NULL;
    }
    memcpy(w, where, where_len);
    *l = (struct dl_listing){.dev = sb->st_dev, .ino = sb->st_ino, .mtime = sb->st_mtim,
                             .ctime = sb->st_ctim, .json = where[0] == 'J', .where = w,
                             .where_len = where_len, .hash = hash, .fd = -1,
                             .built_s = req->now_s};
    atomic_init(&l->refs, 1); /* the builder's, which becomes its response's */
    if (st->cache_size)
        cache_insert(c, l);
    pthread_mutex_unlock(&c->lock);
    *build = true;
    return l;
}

/* The listing l is built (fd >= 0) or not (-1): publish it, keep it if it may be kept,
 * and wake those waiting for it. */
static void listing_done(struct dirlist_state *st, struct dl_listing *l, int fd, bool settled)
{
    struct dl_cache *c = &st->cache;
    struct stat mst = {.st_size = 0};
    int state = fd >= 0 && fstat(fd, &mst) == 0 ? 1 : -1;
    pthread_mutex_lock(&c->lock);
    l->fd = fd;
    l->st = mst;
    l->state = state;
    if (l->cached) {
        if (l->state == 1)
            c->bytes += (uint64_t)l->st.st_size;
        if (l->state < 0 || !settled || (uint64_t)l->st.st_size > st->cache_size)
            cache_remove(c, l);
        while (c->bytes > st->cache_size && c->oldest)
            cache_remove(c, c->oldest);
    }
    pthread_cond_broadcast(&c->built);
    pthread_mutex_unlock(&c->lock);
}

/* The body in a sealed memfd (the caller's), or -1. */
static int body_memfd(const struct strbuf *body)
{
    int fd = memfd_create("lfhttpd-dirlist", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -1;
    size_t off = 0;
    while (off < body->len) {
        ssize_t w = write(fd, body->p + off, body->len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    /* Sealed: whatever shares it can read it, none can change it under a response. */
    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
    return fd;
}

/* Read the directory dfd (which this takes) and render it into a memfd; -1 (logged) if it
 * cannot be listed. */
static int build(const struct dirlist_state *st, const struct request *req, int dfd,
                 const char *dir, bool json)
{
    struct dl_list l = {.names = STRBUF_INIT(DIRLIST_BODY_MAX)};
    if (list_read(st, req, dfd, dir, &l) < 0) {
        log_error("dirlist: /%s: not listed (500): %s", dir,
                  l.names.failed ? "out of memory or over 64 MiB of names" : strerror(errno));
        list_free(&l);
        return -1;
    }
    struct strbuf body = STRBUF_INIT(DIRLIST_BODY_MAX);
    if (json)
        render_json(&body, &l);
    else
        render_html(&body, req, &l);
    size_t entries = l.n;
    list_free(&l);
    int fd = body.failed ? -1 : body_memfd(&body);
    if (body.failed)
        log_error("dirlist: /%s: not listed (500): the listing is over 64 MiB or out of "
                  "memory", dir);
    else if (fd < 0)
        log_error("dirlist: /%s: not listed (500): memfd: %s", dir, strerror(errno));
    free(body.p);
    if (fd >= 0) { /* the path is a client's and a directory's name: escaped */
        struct strbuf name = STRBUF_INIT(8192);
        strbuf_json(&name, req->path, req->path_len);
        log_debug("dirlist: built the %s listing of %.*s: %zu entries, %zu bytes",
                  json ? "JSON" : "HTML", name.failed ? 3 : (int)name.len,
                  name.failed ? "\"?\"" : name.p, entries, body.len);
        free(name.p);
    }
    return fd;
}

/* --- the hooks ------------------------------------------------------------------------- */

static enum mod_result dirlist_handle(void *state, const struct request *req,
                                      struct response *resp)
{
    struct dirlist_state *st = state;
    const struct http_request *h = req->http;
    const bool *enabled = module_settings(req, st->index);
    if (!(enabled ? *enabled : st->enabled) || (h->method != HTTP_METHOD_GET && h->method != HTTP_METHOD_HEAD) ||
        req->path_len == 0 || req->path[req->path_len - 1] != '/')
        return MOD_DECLINED;
    const char *dir = req->file + 1; /* "" for the root, else "a/b/" */
    int dfd = open_beneath(req->root_fd, dir[0] ? dir : ".", O_RDONLY | O_DIRECTORY,
                           req->root_real);
    if (dfd < 0)
        return MOD_DECLINED; /* not there, not a directory, not allowed: mod_static says */
    struct stat sb;
    if (has_index(req, dfd) || fstat(dfd, &sb) < 0) {
        close(dfd);
        return MOD_DECLINED;
    }

    bool json = http_query_has(req->args, "format", "json");
    char where[REQUEST_PATH_MAX + 1];
    size_t where_len = 1;
    where[0] = json ? 'J' : 'H';
    if (!json) { /* the page shows its path; the JSON form does not */
        memcpy(where + 1, req->path, req->path_len);
        where_len += req->path_len;
    }
    bool own_build;
    struct dl_listing *l = listing_get(st, req, &sb, where, where_len, &own_build);
    if (!l) {
        close(dfd);
        log_error("dirlist: /%s: not listed (500): out of memory", dir);
        return MOD_ERROR;
    }
    if (own_build) {
        struct timespec start;
        clock_gettime(CLOCK_REALTIME, &start); /* before reading: see the top of the file */
        int fd = build(st, req, dfd, dir, json);
        listing_done(st, l, fd, dirlist_version_settled(&sb.st_ctim, &start));
    } else {
        close(dfd);
    }
    if (l->state < 0) { /* the builder logged why */
        listing_release(l);
        return MOD_ERROR;
    }

    resp_start(resp, 200);
    if (json) {
        resp_header(resp, "Content-Type", "application/json");
    } else {
        resp_header(resp, "Content-Type", "text/html; charset=utf-8");
        /* Defence in depth: even an escaping bug could run no script here. */
        resp_header(resp, "Content-Security-Policy",
                    "default-src 'none'; style-src 'unsafe-inline'; img-src data:");
    }
    resp_header(resp, "X-Content-Type-Options", "nosniff");
    resp_header(resp, "Cache-Control", "no-cache");
    /* The response holds the listing (its reference) until the body is sent. */
    resp_file_shared(resp, l->fd, &l->st, listing_release, l);
    resp_body_file(resp, l->fd, 0, (uint64_t)l->st.st_size);
    return MOD_HANDLED;
}

static int dirlist_init(struct module_init *mi, void **state)
{
    struct dirlist_state *st = calloc(1, sizeof(*st));
    if (!st)
        return module_error(mi, NULL, "out of memory");
    /* 64 MiB: the largest listing fits, and the pages of a few hundred directories of
     * thousands of files each; 10 s: how stale a size or time inside may be. */
    st->cache_size = (uint64_t)64 << 20;
    st->cache_valid_ms = 10000;
    st->index = mi->index;
    if (module_read_directives(mi, st) < 0) {
        free(st);
        return -1;
    }
    pthread_mutex_init(&st->cache.lock, NULL);
    pthread_cond_init(&st->cache.built, NULL);
    *state = st;
    return 0;
}

/* The cache lets go of its listings; those still being sent live on in their responses. */
static void dirlist_fini(void *state)
{
    struct dirlist_state *st = state;
    while (st->cache.oldest)
        cache_remove(&st->cache, st->cache.oldest);
    pthread_cond_destroy(&st->cache.built);
    pthread_mutex_destroy(&st->cache.lock);
    free(st);
}

/* What a server or location block sets. */
struct dirlist_block_flag {
    bool enabled;
};

/* `autoindex` of a block: on or off, its own or its outer block's. */
static void *dirlist_block(void *state, const struct module_block *b)
{
    static const bool on = true, off = false;
    const struct dirlist_state *st = state;
    struct dirlist_block_flag set = {b->outer ? *(const bool *)b->outer : st->enabled};
    if (b->context != CONF_TOP && module_block_read(b, &set) < 0)
        return NULL;
    return (void *)(set.enabled ? &on : &off);
}

static const struct conf_directive dirlist_directives[] = {
    {"autoindex", CONF_FLAG, CONF_TOP, CONF_AT(struct dirlist_state, enabled),
     .dflt = "off",
     .doc = "Listings of directories without an index file: a directory path ending in `/` with "
        "none of the `index` files gets a listing instead of 403 (HTML, or JSON with "
        "`?format=json`)."},
    {"autoindex", CONF_FLAG, CONF_SERVER | CONF_LOCATION,
     CONF_AT(struct dirlist_block_flag, enabled),
     .dflt = "(the outer block's)",
     .doc = "As at the top level, for this block."},
    {"autoindex_hidden", CONF_FLAG, CONF_TOP, CONF_AT(struct dirlist_state, hidden),
     .dflt = "off",
     .doc = "Listings show dotfiles too (which are served either way when named)."},
    {"autoindex_cache_size", CONF_SIZE, CONF_TOP, .off = true,
     CONF_AT(struct dirlist_state, cache_size),
     .dflt = "64m",
     .doc = "Bounds the bytes of the listings kept in the listing cache (least recently used out "
        "first; a listing over it is sent and not kept); `off`: no cache."},
    {"autoindex_cache_valid", CONF_DURATION, CONF_TOP, .min = 1,
     CONF_AT(struct dirlist_state, cache_valid_ms),
     .dflt = "10s",
     .doc = "How old a kept listing may be: a file rewritten in place does not change its "
        "directory's times, so its new size and time show within this."},
    {.name = NULL},
};

const struct module mod_dirlist = {
    .name = "dirlist",
    .directives = dirlist_directives,
    .init = dirlist_init,
    .fini = dirlist_fini,
    .handle = dirlist_handle,
    .block = dirlist_block,
};
